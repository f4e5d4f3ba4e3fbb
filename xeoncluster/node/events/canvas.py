"""A tiny RGB raster: pixels, straight lines, rectangles and a 3x5 bitmap font, enough for a line chart."""

from __future__ import annotations

from dataclasses import dataclass, field

from xeoncluster.node.events.png import encode_rgb

Colour = tuple[int, int, int]

# 3 columns x 5 rows per glyph, one string per row; '#' is ink.
_GLYPHS: dict[str, tuple[str, ...]] = {
    "0": ("###", "#.#", "#.#", "#.#", "###"), "1": (".#.", "##.", ".#.", ".#.", "###"),
    "2": ("###", "..#", "###", "#..", "###"), "3": ("###", "..#", ".##", "..#", "###"),
    "4": ("#.#", "#.#", "###", "..#", "..#"), "5": ("###", "#..", "###", "..#", "###"),
    "6": ("###", "#..", "###", "#.#", "###"), "7": ("###", "..#", ".#.", ".#.", ".#."),
    "8": ("###", "#.#", "###", "#.#", "###"), "9": ("###", "#.#", "###", "..#", "###"),
    ".": ("...", "...", "...", "...", ".#."), "-": ("...", "...", "###", "...", "..."),
    "+": ("...", ".#.", "###", ".#.", "..."), " ": ("...", "...", "...", "...", "..."),
    "a": ("...", "##.", "..#", "###", "###"), "e": (".#.", "#.#", "###", "#..", ".##"),
    "i": (".#.", "...", ".#.", ".#.", ".#."), "l": ("#..", "#..", "#..", "#..", "##."),
    "n": ("...", "##.", "#.#", "#.#", "#.#"), "o": ("...", "###", "#.#", "#.#", "###"),
    "p": ("...", "##.", "#.#", "##.", "#.."), "r": ("...", "##.", "#..", "#..", "#.."),
    "s": (".##", "#..", ".#.", "..#", "##."), "t": (".#.", "###", ".#.", ".#.", ".##"),
    "v": ("...", "#.#", "#.#", "#.#", ".#."),
}
GLYPH_WIDTH, GLYPH_HEIGHT = 3, 5


@dataclass
class Canvas:
    width: int
    height: int
    background: Colour = (255, 255, 255)
    pixels: bytearray = field(init=False)

    def __post_init__(self) -> None:
        self.pixels = bytearray(bytes(self.background) * (self.width * self.height))

    def dot(self, x: int, y: int, colour: Colour) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            offset = (y * self.width + x) * 3
            self.pixels[offset : offset + 3] = bytes(colour)

    def line(self, x0: int, y0: int, x1: int, y1: int, colour: Colour, thickness: int = 1) -> None:
        """Bresenham, widened to `thickness` pixels."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        error = dx + dy
        while True:
            self._brush(x0, y0, colour, thickness)
            if x0 == x1 and y0 == y1:
                return
            twice = 2 * error
            if twice >= dy:
                error, x0 = error + dy, x0 + sx
            if twice <= dx:
                error, y0 = error + dx, y0 + sy

    def _brush(self, x: int, y: int, colour: Colour, thickness: int) -> None:
        low = -(thickness // 2)
        for ox in range(low, low + thickness):
            for oy in range(low, low + thickness):
                self.dot(x + ox, y + oy, colour)

    def fill(self, x: int, y: int, width: int, height: int, colour: Colour) -> None:
        for row in range(y, y + height):
            for column in range(x, x + width):
                self.dot(column, row, colour)

    def text(self, x: int, y: int, text: str, colour: Colour, scale: int = 2) -> None:
        """Draw `text` with its top-left corner at (x, y); characters without a glyph become blanks."""
        for index, char in enumerate(text.lower()):
            glyph = _GLYPHS.get(char, _GLYPHS[" "])
            left = x + index * (GLYPH_WIDTH + 1) * scale
            for row, bits in enumerate(glyph):
                for column, bit in enumerate(bits):
                    if bit == "#":
                        self.fill(left + column * scale, y + row * scale, scale, scale, colour)

    def png(self) -> bytes:
        return encode_rgb(self.width, self.height, self.pixels)


def text_width(text: str, scale: int = 2) -> int:
    return len(text) * (GLYPH_WIDTH + 1) * scale - scale
