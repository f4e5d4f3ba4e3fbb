"""Encode an RGB image as PNG with the standard library only (zlib + struct); no imaging dependency."""

from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
_RGB = 2  # PNG colour type: truecolour, 8 bits per channel


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def encode_rgb(width: int, height: int, pixels: bytes | bytearray) -> bytes:
    """`pixels` holds height rows of width RGB triples, top row first."""
    stride = width * 3
    if width <= 0 or height <= 0 or len(pixels) != stride * height:
        raise ValueError(f"expected {stride * height} bytes for {width}x{height} RGB, got {len(pixels)}")
    # Each scanline starts with filter type 0 (none).
    raw = b"".join(b"\x00" + bytes(pixels[row * stride : (row + 1) * stride]) for row in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, _RGB, 0, 0, 0)
    return SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b"")
