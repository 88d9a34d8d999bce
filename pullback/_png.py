"""A small RGB canvas with a 5x8 bitmap font, saved as PNG with NumPy, `zlib` and `struct` only.

`Canvas` draws rectangles, lines and text; `png()` encodes it (8-bit RGB, unfiltered rows)
and `read_png` decodes such files again (used to check what was written).

>>> c = Canvas(40, 12)
>>> c.rect(0, 0, 40, 12, (255, 255, 255))
>>> c.text(1, 1, "ok 1.5x", (0, 0, 0))  # returns where the next character would start
43
>>> data = c.png()
>>> data[:8] == b"\\x89PNG\\r\\n\\x1a\\n", read_png(data)[:2]
(True, (40, 12))
"""

import functools
import struct
import zlib

import numpy as np

__all__ = ["Canvas", "encode_png", "read_png", "GLYPH_W", "GLYPH_H"]

# Glyphs are 8 rows of 5 columns ('#' = ink); rows 0-6 hold the characters, row 7 the
# descenders. Text is drawn in lower case; characters without a glyph are drawn as '?'.
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
_ADVANCE = GLYPH_W + 1  # one blank column between characters


@functools.lru_cache(maxsize=None)
def _glyph(ch, scale):
    """The ink mask of `ch` as a `(GLYPH_H * scale, GLYPH_W * scale)` bool array."""
    ch = _ALIASES.get(ch, ch.lower())
    rows = _GLYPHS.get(ch, _GLYPHS["?"]).split("|")
    mask = np.array([[bit == "#" for bit in row] for row in rows], dtype=bool)
    return mask.repeat(scale, axis=0).repeat(scale, axis=1)


class Canvas:
    """An RGB image of `width` x `height` pixels; `pixels` is its `(height, width, 3)` uint8 array.

    Drawing outside the image is clipped. Coordinates may be floats; they are truncated.

    >>> c = Canvas(4, 3, (0, 0, 0))
    >>> c.rect(1, 1, 10, 1, (9, 9, 9))
    >>> c.pixels[:, :, 0].tolist()
    [[0, 0, 0, 0], [0, 9, 9, 9], [0, 0, 0, 0]]
    """

    def __init__(self, width, height, background=(255, 255, 255)):
        if width <= 0 or height <= 0:
            raise ValueError(f"a canvas needs a positive size, got {width} x {height}")
        self.width, self.height = int(width), int(height)
        self.pixels = np.empty((self.height, self.width, 3), np.uint8)
        self.pixels[...] = background

    def rect(self, x, y, w, h, color):
        """Fill the `w` x `h` rectangle whose top-left corner is (x, y)."""
        x0, y0 = max(0, int(x)), max(0, int(y))
        x1, y1 = min(self.width, int(x + w)), min(self.height, int(y + h))
        if x1 > x0 and y1 > y0:
            self.pixels[y0:y1, x0:x1] = color

    def line(self, x0, y0, x1, y1, color, width=2):
        """A straight line from (x0, y0) to (x1, y1), `width` pixels thick (points are rounded)."""
        steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        for t in np.linspace(0.0, 1.0, steps + 1):
            x, y = round(x0 + (x1 - x0) * t), round(y0 + (y1 - y0) * t)
            self.rect(x - width // 2, y - width // 2, width, width, color)

    def text(self, x, y, s, color, scale=1):
        """Draw `s` with its top-left corner at (x, y); returns where the next character would start."""
        x, y = int(x), int(y)
        for ch in s:
            self._paint(x, y, _glyph(ch, scale), color)
            x += _ADVANCE * scale
        return x

    @staticmethod
    def text_width(s, scale=1):
        """Pixels from the left edge of `s`'s first glyph to the right edge of its last.

        >>> Canvas.text_width("ab"), Canvas.text_width("")
        (11, 0)
        """
        return (len(s) * _ADVANCE - 1) * scale if s else 0

    def _paint(self, x, y, mask, color):
        h, w = mask.shape
        x0, y0 = max(0, x), max(0, y)
        x1, y1 = min(self.width, x + w), min(self.height, y + h)
        if x1 > x0 and y1 > y0:
            self.pixels[y0:y1, x0:x1][mask[y0 - y:y1 - y, x0 - x:x1 - x]] = color

    def png(self):
        """The image as PNG bytes (8-bit RGB, no filtering)."""
        return encode_png(self.pixels)

    def save(self, path):
        with open(path, "wb") as f:
            f.write(self.png())


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(rgb):
    """PNG bytes (8-bit RGB, unfiltered rows) of an `(height, width, 3)` uint8 array.

    >>> read_png(encode_png(np.zeros((2, 3, 3), np.uint8)))
    (3, 2, b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00')
    """
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected an (height, width, 3) RGB array, got shape {rgb.shape}")
    height, width, _ = rgb.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, width * 3)], axis=1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 9))
            + _chunk(b"IEND", b""))


def read_png(data):
    """`(width, height, rgb bytes)` of a PNG written by `encode_png` (checks signature and CRCs)."""
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
