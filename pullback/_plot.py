"""Charts through matplotlib, an optional dependency (`pip install "pullback[plot]"`).

matplotlib is imported only when a chart is drawn, and figures are drawn off screen
(`matplotlib.figure.Figure`, no pyplot), so the user's backend and open windows are left
alone. Without matplotlib, `new_figure` returns None and callers print `HINT` instead.
"""

__all__ = ["HINT", "available", "new_figure", "save"]

HINT = 'no chart drawn: matplotlib is not installed (pip install "pullback[plot]" to get charts)'
DPI = 100


def available():
    """True when matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def new_figure(width_px, height_px):
    """A matplotlib Figure of `width_px` x `height_px` pixels (as saved by `save`), or None without matplotlib."""
    if not available():
        return None
    from matplotlib.figure import Figure

    return Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI, layout="constrained")


def save(figure, path):
    """Write `figure` to `path` as a PNG of exactly the figure's size in pixels."""
    figure.savefig(path, format="png", dpi=DPI)
