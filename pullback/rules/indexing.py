"""Rules for indexing, in-place writes (as functional updates), `where` and `clip`, in both modes."""

import numpy as np

from .._extend import primitive, rrule
from .._registry import FUNCTIONS
from .._tangents import InplaceableThunk, Thunk
from .._trace import Traced, _getitem, mark_view, _index_update, apply, stop_gradient
from ._register import add_tangents, composite, forward_rule, linear_forward, private_rule, zeros_if_none


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


linear_forward(unindex_rule, unindex)


def _add_at(buffer, index, g):
    if isinstance(g, Traced):  # a nested derivative: keep it on the outer tape
        return buffer + unindex(g, index, np.shape(buffer))
    if is_basic(index):
        buffer[index] += g
    else:
        np.add.at(buffer, index, g)  # repeated indices each add their share
    return buffer


@private_rule
def getitem_rule(x, index):
    y = x[index]
    shape = np.shape(x)

    def back(g):
        return InplaceableThunk(lambda buffer: _add_at(buffer, index, g), lambda: unindex(g, index, shape)), None

    return y, back


linear_forward(getitem_rule, _getitem)


@composite(_getitem, args="x", notes="""Basic and advanced indexing; repeated indices add up their
           gradients. A basic index gives a view, as in NumPy.""")
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


@private_rule
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


@forward_rule(index_update_rule)
def index_update_frule(primals, tangents):
    x, index, value = primals
    tx, _, tv = tangents
    y = index_update_rule(x, index, value)[0]
    if tx is None and tv is None:
        return y, None
    return y, FUNCTIONS[_index_update](zeros_if_none(tx, x), index, 0.0 if tv is None else tv)


@composite(_index_update, args="x, value", notes="""What `x[index] = value` does to a tracked `x`
           (or a plain `x` receiving a tracked value): a functional update, so earlier uses of `x`
           keep their gradient. Writing the same element twice is refused; so is writing into a
           view of an array still in use.""")
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


@private_rule
def where_rule(condition, a, b):
    y = np.where(condition, a, b)
    return y, lambda g: (None, Thunk(lambda: np.where(condition, g, 0.0)), Thunk(lambda: np.where(condition, 0.0, g)))


@forward_rule(where_rule)
def where_frule(primals, tangents):
    condition, a, b = primals
    _, ta, tb = tangents
    y = np.where(condition, a, b)
    if ta is None and tb is None:
        return y, None
    return y, np.where(condition, 0.0 if ta is None else ta, 0.0 if tb is None else tb)


@composite(np.where, args="x, y", notes="The condition carries no gradient; one-argument `where` is `nonzero`.")
def where(condition, x=None, y=None):
    condition = stop_gradient(condition)
    if x is None and y is None:
        return np.nonzero(condition)
    return apply(where_rule, (condition, x, y))


@private_rule
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


@forward_rule(clip_rule)
def clip_frule(primals, tangents):
    x, low, high = primals
    tx, tlow, thigh = tangents
    y = np.clip(x, low, high)
    below = False if low is None else x < low
    if high is None:
        above = False
    else:
        above = x > high if low is None else np.where(below, low > high, x > high)
    return y, add_tangents(
        None if tx is None else np.where(np.logical_or(below, above), 0.0, tx),
        None if tlow is None else np.where(np.logical_and(below, np.logical_not(above)), tlow, 0.0),
        None if thigh is None else np.where(above, thigh, 0.0),
    )


@composite(np.clip, args="a, a_min, a_max", notes="""Bounds may be differentiated too; where `a`
           equals a bound the gradient goes to `a`. As in NumPy, `a_max` wins where the bounds cross.""")
def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):
    if out is not None or kwargs:
        raise TypeError("numpy.clip: out= and other keyword arguments are not supported on tracked values")
    low = a_min if min is None else min
    high = a_max if max is None else max
    return apply(clip_rule, (a, low, high))
