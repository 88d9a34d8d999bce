"""Line charts written as PNG files with NumPy, zlib and struct only (no plotting library).

`line_chart(path, panels)` draws one panel per entry side by side: axes with "nice" ticks,
a title, and one polyline per series with a legend. Text uses a built-in 5x7 pixel font
(lower case, digits and a little punctuation).

>>> import os, tempfile
>>> with tempfile.TemporaryDirectory() as folder:
...     path = os.path.join(folder, "curve.png")
...     line_chart(path, [{"title": "loss", "xlabel": "epoch", "series": [("train", [1, 2, 3], [0.9, 0.5, 0.4])]}])
...     open(path, "rb").read(8)
b'\\x89PNG\\r\\n\\x1a\\n'
"""

import math
import struct
import zlib

import numpy as np

__all__ = ["line_chart", "write_png"]

# Each glyph: 7 rows of 5 pixels, the leftmost pixel in bit 4.
_FONT = {
    "0": (14, 17, 19, 21, 25, 17, 14), "1": (4, 12, 4, 4, 4, 4, 14), "2": (14, 17, 1, 2, 4, 8, 31),
    "3": (31, 2, 4, 2, 1, 17, 14), "4": (2, 6, 10, 18, 31, 2, 2), "5": (31, 16, 30, 1, 1, 17, 14),
    "6": (6, 8, 16, 30, 17, 17, 14), "7": (31, 1, 2, 4, 8, 8, 8), "8": (14, 17, 17, 14, 17, 17, 14),
    "9": (14, 17, 17, 15, 1, 2, 12),
    "a": (0, 0, 14, 1, 15, 17, 15), "b": (16, 16, 22, 25, 17, 17, 30), "c": (0, 0, 14, 16, 16, 17, 14),
    "d": (1, 1, 13, 19, 17, 17, 15), "e": (0, 0, 14, 17, 31, 16, 14), "f": (6, 9, 8, 28, 8, 8, 8),
    "g": (0, 0, 15, 17, 15, 1, 14), "h": (16, 16, 22, 25, 17, 17, 17), "i": (4, 0, 12, 4, 4, 4, 14),
    "j": (2, 0, 6, 2, 2, 18, 12), "k": (16, 16, 18, 20, 24, 20, 18), "l": (12, 4, 4, 4, 4, 4, 14),
    "m": (0, 0, 26, 21, 21, 17, 17), "n": (0, 0, 22, 25, 17, 17, 17), "o": (0, 0, 14, 17, 17, 17, 14),
    "p": (0, 0, 30, 17, 30, 16, 16), "q": (0, 0, 13, 19, 15, 1, 1), "r": (0, 0, 22, 25, 16, 16, 16),
    "s": (0, 0, 14, 16, 14, 1, 30), "t": (8, 8, 28, 8, 8, 9, 6), "u": (0, 0, 17, 17, 17, 19, 13),
    "v": (0, 0, 17, 17, 17, 10, 4), "w": (0, 0, 17, 17, 21, 21, 10), "x": (0, 0, 17, 10, 4, 10, 17),
    "y": (0, 0, 17, 17, 15, 1, 14), "z": (0, 0, 31, 2, 4, 8, 31),
    " ": (0,) * 7, ".": (0, 0, 0, 0, 0, 12, 12), ",": (0, 0, 0, 0, 12, 4, 8), "-": (0, 0, 0, 31, 0, 0, 0),
    "%": (24, 25, 2, 4, 8, 19, 3), ":": (0, 12, 12, 0, 12, 12, 0), "(": (2, 4, 8, 8, 8, 4, 2),
    ")": (8, 4, 2, 2, 2, 4, 8), "/": (0, 1, 2, 4, 8, 16, 0), "=": (0, 0, 31, 0, 31, 0, 0),
    "+": (0, 4, 4, 31, 4, 4, 0), "_": (0, 0, 0, 0, 0, 0, 31),
}
_GLYPH_W, _GLYPH_H, _SPACING = 5, 7, 1
COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75)]
_AXIS, _GRID, _TEXT = (60, 60, 60), (225, 225, 225), (30, 30, 30)


def write_png(path, rgb):
    """Write an `(height, width, 3)` uint8 array as an 8-bit RGB PNG."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    height, width, _ = rgb.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, width * 3)], axis=1)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 9)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def text_width(text):
    return len(text) * (_GLYPH_W + _SPACING) - _SPACING if text else 0


def draw_text(canvas, x, y, text, colour=_TEXT):
    """Draw `text` with its top-left corner at pixel (x, y); characters outside the font show as blanks."""
    for k, ch in enumerate(text.lower()):
        rows = _FONT.get(ch, _FONT[" "])
        left = x + k * (_GLYPH_W + _SPACING)
        for r, bits in enumerate(rows):
            for c in range(_GLYPH_W):
                if bits >> (_GLYPH_W - 1 - c) & 1:
                    _put(canvas, left + c, y + r, colour)


def _put(canvas, x, y, colour):
    if 0 <= y < canvas.shape[0] and 0 <= x < canvas.shape[1]:
        canvas[y, x] = colour


def draw_line(canvas, x0, y0, x1, y1, colour, width=2):
    steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
    for t in np.linspace(0.0, 1.0, steps + 1):
        x, y = round(x0 + (x1 - x0) * t), round(y0 + (y1 - y0) * t)
        for dx in range(width):
            for dy in range(width):
                _put(canvas, x + dx - width // 2, y + dy - width // 2, colour)


def nice_ticks(low, high, count=5):
    """Round tick values covering [low, high], about `count` of them (steps of 1, 2 or 5 x 10^k).

    >>> nice_ticks(0.13, 0.92)
    [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    """
    if not math.isfinite(low) or not math.isfinite(high):
        raise ValueError("cannot chart non-finite values")
    if high <= low:
        low, high = low - 0.5 * (abs(low) or 1.0), high + 0.5 * (abs(high) or 1.0)
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step + 1e-9) * step
    ticks = []
    value = start
    while value < high + step * 0.999:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _label(value):
    text = f"{value:.6g}"
    return text if "e" not in text else f"{value:.0e}"


def _panel(canvas, left, top, width, height, panel):
    series = panel["series"]
    xs = [x for _, sx, _ in series for x in sx]
    ys = [y for _, _, sy in series for y in sy]
    if not xs:
        raise ValueError(f"panel {panel.get('title', '')!r} has no data")
    yt = nice_ticks(*panel.get("ylim", (min(ys), max(ys))))
    x_lo, x_hi = min(xs), max(xs)
    if x_hi > x_lo:  # the x axis spans the data exactly, with the nice ticks that fall inside
        xt = [t for t in nice_ticks(x_lo, x_hi) if x_lo - 1e-9 <= t <= x_hi + 1e-9]
    else:
        xt = nice_ticks(x_lo, x_hi)
        x_lo, x_hi = xt[0], xt[-1]
    ml, mr, mt, mb = 48, 12, 22, 30  # margins: room for tick labels, the title and the x label
    x0, x1, y0, y1 = left + ml, left + width - mr, top + mt, top + height - mb

    def px(x):
        return x0 + (x - x_lo) / (x_hi - x_lo) * (x1 - x0)

    def py(y):
        return y1 - (y - yt[0]) / (yt[-1] - yt[0]) * (y1 - y0)

    for y in yt:
        canvas[round(py(y)), x0:x1 + 1] = _GRID
        label = _label(y)
        draw_text(canvas, x0 - 5 - text_width(label), round(py(y)) - 3, label)
    for x in xt:
        canvas[y0:y1 + 1, round(px(x))] = _GRID
        label = _label(x)
        draw_text(canvas, round(px(x)) - text_width(label) // 2, y1 + 5, label)
    canvas[y0:y1 + 1, x0] = _AXIS
    canvas[y1, x0:x1 + 1] = _AXIS
    title = panel.get("title", "")
    draw_text(canvas, (x0 + x1 - text_width(title)) // 2, top + 7, title)
    xlabel = panel.get("xlabel", "")
    draw_text(canvas, (x0 + x1 - text_width(xlabel)) // 2, y1 + 17, xlabel)
    for k, (name, sx, sy) in enumerate(series):
        colour = COLOURS[k % len(COLOURS)]
        points = [(px(x), py(y)) for x, y in zip(sx, sy)]
        for (a, b), (c, d) in zip(points, points[1:]):
            draw_line(canvas, a, b, c, d, colour)
        if len(points) == 1:
            draw_line(canvas, *points[0], *points[0], colour, width=4)
        if panel.get("legend", "upper") == "upper":
            legend_y = y0 + 6 + 12 * k
        else:
            legend_y = y1 - 6 - 12 * (len(series) - k)
        canvas[legend_y:legend_y + 7, x1 - 70:x1 - 60] = colour
        draw_text(canvas, x1 - 56, legend_y, name)


def line_chart(path, panels, panel_size=(420, 300)):
    """Write a PNG with one line chart per panel, side by side.

    Each panel is a dict: `title`, `xlabel`, `series` (a list of `(name, xs, ys)`) and
    optionally `ylim` `(low, high)` and `legend` (`"upper"` or `"lower"` right corner).
    """
    width, height = panel_size
    canvas = np.full((height, width * len(panels), 3), 255, np.uint8)
    for k, panel in enumerate(panels):
        _panel(canvas, k * width, 0, width, height, panel)
    write_png(path, canvas)
