"""Line charts written as PNG files (no plotting library), drawn on `pullback._png.Canvas`.

`line_chart(path, panels)` draws one panel per entry side by side: axes with "nice" ticks,
a title, and one polyline per series with a legend.

>>> import os, tempfile
>>> with tempfile.TemporaryDirectory() as folder:
...     path = os.path.join(folder, "curve.png")
...     line_chart(path, [{"title": "loss", "xlabel": "epoch", "series": [("train", [1, 2, 3], [0.9, 0.5, 0.4])]}])
...     open(path, "rb").read(8)
b'\\x89PNG\\r\\n\\x1a\\n'
"""

import math

from ._png import Canvas

__all__ = ["line_chart", "nice_ticks"]

COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75)]
_AXIS, _GRID, _TEXT = (60, 60, 60), (225, 225, 225), (30, 30, 30)


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
        canvas.rect(x0, round(py(y)), x1 - x0 + 1, 1, _GRID)
        label = _label(y)
        canvas.text(x0 - 5 - Canvas.text_width(label), round(py(y)) - 3, label, _TEXT)
    for x in xt:
        canvas.rect(round(px(x)), y0, 1, y1 - y0 + 1, _GRID)
        label = _label(x)
        canvas.text(round(px(x)) - Canvas.text_width(label) // 2, y1 + 5, label, _TEXT)
    canvas.rect(x0, y0, 1, y1 - y0 + 1, _AXIS)
    canvas.rect(x0, y1, x1 - x0 + 1, 1, _AXIS)
    title = panel.get("title", "")
    canvas.text((x0 + x1 - Canvas.text_width(title)) // 2, top + 7, title, _TEXT)
    xlabel = panel.get("xlabel", "")
    canvas.text((x0 + x1 - Canvas.text_width(xlabel)) // 2, y1 + 17, xlabel, _TEXT)
    for k, (name, sx, sy) in enumerate(series):
        colour = COLOURS[k % len(COLOURS)]
        points = [(px(x), py(y)) for x, y in zip(sx, sy)]
        for (a, b), (c, d) in zip(points, points[1:]):
            canvas.line(a, b, c, d, colour)
        if len(points) == 1:
            canvas.line(*points[0], *points[0], colour, width=4)
        if panel.get("legend", "upper") == "upper":
            legend_y = y0 + 6 + 12 * k
        else:
            legend_y = y1 - 6 - 12 * (len(series) - k)
        canvas.rect(x1 - 70, legend_y, 10, 7, colour)
        canvas.text(x1 - 56, legend_y, name, _TEXT)


def line_chart(path, panels, panel_size=(420, 300)):
    """Write a PNG with one line chart per panel, side by side.

    Each panel is a dict: `title`, `xlabel`, `series` (a list of `(name, xs, ys)`) and
    optionally `ylim` `(low, high)` and `legend` (`"upper"` or `"lower"` right corner).
    """
    width, height = panel_size
    canvas = Canvas(width * len(panels), height)
    for k, panel in enumerate(panels):
        _panel(canvas, k * width, 0, width, height, panel)
    canvas.save(path)
