"""A tiny RGB canvas with a 5x8 bitmap font, saved as PNG with `zlib` and `struct` only.

>>> c = Canvas(40, 12)
>>> c.rect(0, 0, 40, 12, (255, 255, 255))
>>> c.text(1, 1, "ok 1.5x", (0, 0, 0))  # returns where the text ends
43
>>> data = c.png()
>>> data[:8] == b"\\x89PNG\\r\\n\\x1a\\n", read_png(data)[:2]
(True, (40, 12))
"""

import struct
import zlib

# Glyphs are 8 rows of 5 columns ('#' = ink); row 7 is for descenders. Text is drawn in
# lower case; characters without a glyph are drawn as '?'.
_GLYPHS = {
    "a": ".....|.....|.###.|....#|.####|#...#|.####|.....",
    "b": "#....|#....|####.|#...#|#...#|#...#|####.|.....",
    "c": ".....|.....|.####|#....|#....|#....|.####|.....",
    "d": "....#|....#|.####|#...#|#...#|#...#|.####|.....",
    "e": ".....|.....|.###.|#...#|#####|#....|.###.|.....",
    "f": "..##.|.#...|####.|.#...|.#...|.#...|.#...|.....",
    "g": ".....|.....|.####|#...#|#...#|.####|....#|.###.",
    "h": "#....|#....|####.|#...#|#...#|#...#|#...#|.....",
    "i": "..#..|.....|.##..|..#..|..#..|..#..|.###.|.....",
    "j": "...#.|.....|..##.|...#.|...#.|...#.|#..#.|.##..",
    "k": "#....|#....|#..#.|#.#..|##...|#.#..|#..#.|.....",
    "l": ".##..|..#..|..#..|..#..|..#..|..#..|.###.|.....",
    "m": ".....|.....|##.#.|#.#.#|#.#.#|#.#.#|#.#.#|.....",
    "n": ".....|.....|####.|#...#|#...#|#...#|#...#|.....",
    "o": ".....|.....|.###.|#...#|#...#|#...#|.###.|.....",
    "p": ".....|.....|####.|#...#|#...#|####.|#....|#....",
    "q": ".....|.....|.####|#...#|#...#|.####|....#|....#",
    "r": ".....|.....|#.##.|##..#|#....|#....|#....|.....",
    "s": ".....|.....|.####|#....|.###.|....#|####.|.....",
    "t": ".#...|.#...|####.|.#...|.#...|.#..#|..##.|.....",
    "u": ".....|.....|#...#|#...#|#...#|#..##|.##.#|.....",
    "v": ".....|.....|#...#|#...#|#...#|.#.#.|..#..|.....",
    "w": ".....|.....|#...#|#...#|#.#.#|#.#.#|.#.#.|.....",
    "x": ".....|.....|#...#|.#.#.|..#..|.#.#.|#...#|.....",
    "y": ".....|.....|#...#|#...#|#...#|.####|....#|.###.",
    "z": ".....|.....|#####|...#.|..#..|.#...|#####|.....",
    "0": ".###.|#...#|#..##|#.#.#|##..#|#...#|.###.|.....",
    "1": "..#..|.##..|..#..|..#..|..#..|..#..|.###.|.....",
    "2": ".###.|#...#|....#|...#.|..#..|.#...|#####|.....",
    "3": "#####|...#.|..#..|...#.|....#|#...#|.###.|.....",
    "4": "...#.|..##.|.#.#.|#..#.|#####|...#.|...#.|.....",
    "5": "#####|#....|####.|....#|....#|#...#|.###.|.....",
    "6": "..##.|.#...|#....|####.|#...#|#...#|.###.|.....",
    "7": "#####|....#|...#.|..#..|.#...|.#...|.#...|.....",
    "8": ".###.|#...#|#...#|.###.|#...#|#...#|.###.|.....",
    "9": ".###.|#...#|#...#|.####|....#|...#.|.##..|.....",
    " ": ".....|.....|.....|.....|.....|.....|.....|.....",
    ".": ".....|.....|.....|.....|.....|.##..|.##..|.....",
    ",": ".....|.....|.....|.....|.....|.##..|..#..|.#...",
    ":": ".....|.##..|.##..|.....|.##..|.##..|.....|.....",
    ";": ".....|.##..|.##..|.....|.##..|..#..|.#...|.....",
    "-": ".....|.....|.....|#####|.....|.....|.....|.....",
    "_": ".....|.....|.....|.....|.....|.....|.....|#####",
    "/": "....#|...#.|...#.|..#..|.#...|.#...|#....|.....",
    "(": "...#.|..#..|.#...|.#...|.#...|..#..|...#.|.....",
    ")": ".#...|..#..|...#.|...#.|...#.|..#..|.#...|.....",
    "%": "##...|##..#|...#.|..#..|.#...|#..##|...##|.....",
    "=": ".....|.....|#####|.....|#####|.....|.....|.....",
    "+": ".....|..#..|..#..|#####|..#..|..#..|.....|.....",
    "<": "...#.|..#..|.#...|#....|.#...|..#..|...#.|.....",
    ">": ".#...|..#..|...#.|....#|...#.|..#..|.#...|.....",
    "?": ".###.|#...#|....#|...#.|..#..|.....|..#..|.....",
    "!": "..#..|..#..|..#..|..#..|..#..|.....|..#..|.....",
    "'": "..#..|..#..|.....|.....|.....|.....|.....|.....",
    "*": ".....|#.#.#|.###.|#####|.###.|#.#.#|.....|.....",
}
_ALIASES = {"µ": "u", "×": "x", "–": "-", "—": "-", "…": "."}

GLYPH_W, GLYPH_H = 5, 8


def _bitmap(ch):
    ch = _ALIASES.get(ch, ch.lower())
    return [row for row in _GLYPHS.get(ch, _GLYPHS["?"]).split("|")]


class Canvas:
    """An RGB image; `scale` multiplies the font's pixel size."""

    def __init__(self, width, height, background=(255, 255, 255)):
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def rect(self, x, y, w, h, color):
        x0, y0 = max(0, int(x)), max(0, int(y))
        x1, y1 = min(self.width, int(x + w)), min(self.height, int(y + h))
        if x1 <= x0 or y1 <= y0:
            return
        row = bytes(color) * (x1 - x0)
        for yy in range(y0, y1):
            start = (yy * self.width + x0) * 3
            self.pixels[start:start + len(row)] = row

    def text(self, x, y, s, color, scale=1):
        """Draw `s` with its top-left corner at (x, y); returns the x after the last glyph."""
        for ch in s:
            for r, bits in enumerate(_bitmap(ch)):
                for c, bit in enumerate(bits):
                    if bit == "#":
                        self.rect(x + c * scale, y + r * scale, scale, scale, color)
            x += (GLYPH_W + 1) * scale
        return x

    @staticmethod
    def text_width(s, scale=1):
        return len(s) * (GLYPH_W + 1) * scale

    def png(self):
        """The image as PNG bytes (8-bit RGB, no filtering)."""
        stride = self.width * 3
        raw = b"".join(b"\x00" + bytes(self.pixels[y * stride:(y + 1) * stride]) for y in range(self.height))
        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b"")

    def save(self, path):
        with open(path, "wb") as f:
            f.write(self.png())


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def read_png(data):
    """`(width, height, rgb bytes)` of a PNG written by `Canvas.png` (checks signature and CRCs)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file: the signature is wrong")
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            raise ValueError(f"PNG chunk {kind!r} has a wrong CRC")
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    if (depth, color, interlace) != (8, 2, 0):
        raise ValueError("only 8-bit RGB, non-interlaced PNGs are read here")
    raw = zlib.decompress(chunks[b"IDAT"])
    stride = width * 3
    if len(raw) != height * (stride + 1) or any(raw[y * (stride + 1)] != 0 for y in range(height)):
        raise ValueError("PNG rows are not unfiltered RGB rows of the declared size")
    rgb = b"".join(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)] for y in range(height))
    return width, height, rgb
