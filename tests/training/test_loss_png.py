"""loss.png is a valid PNG written with zlib + struct only."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from xeoncluster.node.events.canvas import Canvas
from xeoncluster.node.events.loss_curve import EVAL_COLOUR, TRAIN_COLOUR, LossCurve, write_loss_png
from xeoncluster.node.events.png import SIGNATURE, encode_rgb


def chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    assert data[:8] == SIGNATURE
    found, offset = [], 8
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind, body = data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        found.append((kind, body))
        offset += 12 + length
    return found


def decode_rgb(data: bytes) -> tuple[int, int, bytes]:
    parts = chunks(data)
    assert parts[0][0] == b"IHDR" and parts[-1] == (b"IEND", b"")
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", parts[0][1])
    assert (depth, colour, interlace) == (8, 2, 0)
    raw = zlib.decompress(b"".join(body for kind, body in parts if kind == b"IDAT"))
    stride = 1 + 3 * width
    assert len(raw) == stride * height
    assert all(raw[row * stride] == 0 for row in range(height))
    return width, height, b"".join(raw[row * stride + 1 : (row + 1) * stride] for row in range(height))


def test_encoded_pixels_decode_back() -> None:
    pixels = bytes(range(2 * 3 * 3))
    assert decode_rgb(encode_rgb(3, 2, pixels)) == (3, 2, pixels)
    with pytest.raises(ValueError):
        encode_rgb(3, 2, pixels[:-1])


def test_canvas_draws_lines_and_text_inside_its_bounds() -> None:
    canvas = Canvas(20, 10)
    canvas.line(-5, 0, 30, 9, (255, 0, 0), thickness=2)
    canvas.text(1, 1, "loss 0.5?", (0, 0, 0), scale=1)
    _, _, pixels = decode_rgb(canvas.png())
    assert bytes((255, 0, 0)) in pixels and bytes((0, 0, 0)) in pixels


def test_loss_png_has_both_curves(tmp_path: Path) -> None:
    curve = LossCurve(train=[(s, 3.0 / (1 + s / 50)) for s in range(10, 300, 10)],
                      eval=[(0.0, 3.5), (150.0, 1.4), (300.0, 1.1)])
    path = tmp_path / "loss.png"
    assert write_loss_png(path, curve)
    width, height, pixels = decode_rgb(path.read_bytes())
    assert (width, height) == (720, 420)
    assert bytes(TRAIN_COLOUR) in pixels and bytes(EVAL_COLOUR) in pixels


def test_flat_single_point_curve_still_draws_and_empty_curve_writes_nothing(tmp_path: Path) -> None:
    assert write_loss_png(tmp_path / "one.png", LossCurve(train=[(5.0, 0.0)], eval=[]))
    decode_rgb((tmp_path / "one.png").read_bytes())
    assert not write_loss_png(tmp_path / "none.png", LossCurve(train=[], eval=[]))
    assert not (tmp_path / "none.png").exists()
