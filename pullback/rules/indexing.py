"""Rules for indexing, in-place writes (as functional updates), `where` and `clip`."""

import numpy as np

from .._extend import primitive, rrule
from .._registry import FUNCTIONS
from .._tangents import InplaceableThunk, Thunk
from .._trace import Traced, _getitem, mark_view, _index_update, apply, stop_gradient
from ._register import implements


def is_basic(index):
    """True when `x[index]` is a view: only ints, slices, None and Ellipsis, so no element repeats."""
    parts = index if type(index) is tuple else (index,)
    return all(p is None or p is Ellipsis or isinstance(p, (int, np.integer, slice)) for p in parts)


@primitive
def unindex(g, index, shape):
    """Zeros of `shape` with `g` added at `index`: the transpose of `x[index]`."""
    out = np.zeros(shape, dtype=np.result_type(g))
    return _add_at(out, index, g)


@rrule(unindex)
def unindex_rule(g, index, shape):
    return unindex(g, index, shape), lambda dy: (dy[index],)


def _add_at(buffer, index, g):
    if isinstance(g, Traced):  # a nested derivative: keep it on the outer tape
        return buffer + unindex(g, index, np.shape(buffer))
    if is_basic(index):
        buffer[index] += g
    else:
        np.add.at(buffer, index, g)  # repeated indices each add their share
    return buffer


def getitem_rule(x, index):
    y = x[index]
    shape = np.shape(x)

    def back(g):
        return InplaceableThunk(lambda buffer: _add_at(buffer, index, g), lambda: unindex(g, index, shape)), None

    return y, back


@implements(_getitem)
def getitem(x, index):
    index = _plain_index(index)
    y = apply(getitem_rule, (x, index))
    if is_basic(index) and isinstance(y, Traced) and isinstance(x, Traced) and np.ndim(y) > 0:
        mark_view(y, x)  # a basic index gives a view, except a single element
    return y


def _plain_index(index):
    if type(index) is tuple:
        return tuple(stop_gradient(p) for p in index)
    return stop_gradient(index)


def index_update_rule(x, index, value):
    _refuse_repeats(np.shape(x), index)
    y = FUNCTIONS[_index_update](x, index, value) if isinstance(x, Traced) or isinstance(value, Traced) else _update_plain(x, index, value)

    def back(g):
        return Thunk(lambda: FUNCTIONS[_index_update](g, index, 0.0)), None, Thunk(lambda: g[index])

    return y, back


def _update_plain(x, index, value):
    y = np.array(x, copy=True)
    y[index] = value
    return y


@implements(_index_update)
def index_update(x, index, value):
    return apply(index_update_rule, (x, _plain_index(index), value))


def _refuse_repeats(shape, index):
    if is_basic(index):
        return
    positions = np.arange(int(np.prod(shape))).reshape(shape)[index]
    if np.unique(positions).size != np.size(positions):
        raise ValueError(
            "This indexed assignment writes the same element more than once; NumPy keeps only one "
            "of the writes, so no gradient is well defined. Use unique indices."
        )


def where_rule(condition, a, b):
    y = np.where(condition, a, b)
    return y, lambda g: (None, Thunk(lambda: np.where(condition, g, 0.0)), Thunk(lambda: np.where(condition, 0.0, g)))


@implements(np.where)
def where(condition, x=None, y=None):
    condition = stop_gradient(condition)
    if x is None and y is None:
        return np.nonzero(condition)
    return apply(where_rule, (condition, x, y))


def clip_rule(x, low, high):
    y = np.clip(x, low, high)

    def back(g):
        # np.clip is min(max(x, low), high): `high` wins wherever it binds, even when low > high.
        below = False if low is None else x < low
        if high is None:
            above = False
        else:
            above = x > high if low is None else np.where(below, low > high, x > high)
        return (
            Thunk(lambda: np.where(np.logical_or(below, above), 0.0, g)),
            None if low is None else Thunk(lambda: np.where(np.logical_and(below, np.logical_not(above)), g, 0.0)),
            None if high is None else Thunk(lambda: np.where(above, g, 0.0)),
        )

    return y, back


@implements(np.clip)
def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):
    if out is not None or kwargs:
        raise TypeError("numpy.clip: out= and other keyword arguments are not supported on tracked values")
    low = a_min if min is None else min
    high = a_max if max is None else max
    return apply(clip_rule, (a, low, high))
