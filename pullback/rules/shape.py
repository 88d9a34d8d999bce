"""Rules for reshaping, joining and copying arrays, and for `*_like` constructors."""

import numpy as np

from .._registry import FUNCTIONS
from .._trace import Dual, Traced, _astype, apply, mark_view, stop_gradient
from ._register import function_rule, implements


def view_rule(*fns):
    """Like `function_rule`, and marks input and result as sharing memory (see in-place writes)."""

    def register(rule):
        def run(x, *args, **kwargs):
            y = apply(rule, (x,) + args, kwargs)
            if isinstance(y, Traced) and isinstance(x, Traced):
                mark_view(y, x)
            return y

        for fn in fns:
            FUNCTIONS[fn] = run
        return rule

    return register


@view_rule(np.reshape)
def reshape_rule(x, shape=None, order="C", *, newshape=None, copy=None):
    shape = newshape if shape is None else shape
    y = np.reshape(x, shape, order=order)
    old = np.shape(x)
    return y, lambda g: (np.reshape(g, old, order=order),)


@view_rule(np.ravel)
def ravel_rule(x, order="C"):
    y = np.ravel(x, order=order)
    old = np.shape(x)
    return y, lambda g: (np.reshape(g, old, order=order),)


@view_rule(np.transpose)
def transpose_rule(x, axes=None):
    y = np.transpose(x, axes)
    inverse = None if axes is None else tuple(np.argsort([a % np.ndim(x) for a in axes]))
    return y, lambda g: (np.transpose(g, inverse),)


@view_rule(np.swapaxes)
def swapaxes_rule(x, axis1, axis2):
    return np.swapaxes(x, axis1, axis2), lambda g: (np.swapaxes(g, axis1, axis2),)


@view_rule(np.moveaxis)
def moveaxis_rule(x, source, destination):
    return np.moveaxis(x, source, destination), lambda g: (np.moveaxis(g, destination, source),)


@view_rule(np.expand_dims)
def expand_dims_rule(x, axis):
    old = np.shape(x)
    return np.expand_dims(x, axis), lambda g: (np.reshape(g, old),)


@view_rule(np.squeeze)
def squeeze_rule(x, axis=None):
    old = np.shape(x)
    return np.squeeze(x, axis), lambda g: (np.reshape(g, old),)


@view_rule(np.broadcast_to)
def broadcast_to_rule(x, shape, subok=False):
    # The engine sums the cotangent back down to x's shape.
    return np.broadcast_to(x, shape), lambda g: (g,)


def _atleast(fn):
    def run(*arrays):
        results = [FUNCTIONS[np.reshape](a, fn(np.empty(np.shape(a), dtype=bool)).shape) for a in arrays]
        return results[0] if len(results) == 1 else tuple(results)

    return run


for _fn in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
    FUNCTIONS[_fn] = _atleast(_fn)


@function_rule(np.copy)
def copy_rule(x, order="K", subok=False):
    return np.copy(x, order=order), lambda g: (g,)


@function_rule(_astype)
def astype_rule(x, dtype):
    # The engine casts the cotangent back to x's dtype.
    return _astype(x, dtype), lambda g: (g,)


def _concatenate_rule(*arrays, axis=0):
    if axis is None:
        shapes = [np.shape(a) for a in arrays]
        y = np.concatenate([np.ravel(a) for a in arrays])
        sizes = [int(np.prod(s)) for s in shapes]
    else:
        y = np.concatenate(arrays, axis=axis)
        shapes = [np.shape(a) for a in arrays]
        sizes = [s[axis] for s in shapes]
    ax = 0 if axis is None else axis % np.ndim(y)
    bounds = np.cumsum([0] + sizes)

    def back(g):
        parts = []
        for k, shape in enumerate(shapes):
            part = g[(slice(None),) * ax + (slice(int(bounds[k]), int(bounds[k + 1])),)]
            parts.append(np.reshape(part, shape) if axis is None else part)
        return tuple(parts)

    return y, back


@implements(np.concatenate)
def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    if out is not None:
        raise TypeError("numpy.concatenate(..., out=...) is not supported on tracked values")
    y = apply(_concatenate_rule, tuple(arrays), {"axis": axis})
    return y if dtype is None else FUNCTIONS[_astype](y, dtype)


def _stack_rule(*arrays, axis=0):
    y = np.stack(arrays, axis=axis)
    ax = axis % np.ndim(y)
    return y, lambda g: tuple(g[(slice(None),) * ax + (k,)] for k in range(len(arrays)))


@implements(np.stack)
def stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    if out is not None:
        raise TypeError("numpy.stack(..., out=...) is not supported on tracked values")
    y = apply(_stack_rule, tuple(arrays), {"axis": axis})
    return y if dtype is None else FUNCTIONS[_astype](y, dtype)


@implements(np.vstack)
def vstack(arrays, *, dtype=None, casting="same_kind"):
    return concatenate([np.atleast_2d(a) for a in arrays], axis=0, dtype=dtype)


@implements(np.hstack)
def hstack(arrays, *, dtype=None, casting="same_kind"):
    arrays = [np.atleast_1d(a) for a in arrays]
    return concatenate(arrays, axis=0 if np.ndim(arrays[0]) == 1 else 1, dtype=dtype)


def _like(make):
    """`np.zeros_like(x)` etc. on a tracked `x`: a constant that lives on x's tape.

    Being tracked, it accepts tracked values written into it (`h[i] = f(x)`).
    """

    def run(prototype, *args, **kwargs):
        value = make(stop_gradient(prototype), *args, **kwargs)
        if not isinstance(prototype, Traced) or value.dtype.kind != "f":
            return value
        if type(prototype) is Dual:
            return Dual(value, None, prototype._tape)  # a None tangent is a zero tangent
        return prototype._tape.leaf(value)

    return run


for _make in (np.zeros_like, np.ones_like, np.empty_like, np.full_like):
    FUNCTIONS[_make] = _like(_make)
