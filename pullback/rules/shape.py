"""Rules for reshaping, joining and copying arrays, and for `*_like` constructors, in both modes.

All of these are linear, so each forward rule applies the same operation to the tangent.
"""

import numpy as np

from .._registry import FUNCTIONS
from .._trace import Dual, Traced, _astype, apply, stop_gradient
from ._register import (composite, describe, forward_rule, linear_forward, private_rule, refuse, rule,
                        zeros_if_none)


@rule(np.reshape, args="a", view=True)
def reshape_rule(x, shape=None, order="C", *, newshape=None, copy=None):
    shape = newshape if shape is None else shape
    y = np.reshape(x, shape, order=order)
    old = np.shape(x)
    return y, lambda g: (np.reshape(g, old, order=order),)


@rule(np.ravel, args="a", view=True)
def ravel_rule(x, order="C"):
    y = np.ravel(x, order=order)
    old = np.shape(x)
    return y, lambda g: (np.reshape(g, old, order=order),)


@rule(np.transpose, args="a", view=True)
def transpose_rule(x, axes=None):
    y = np.transpose(x, axes)
    inverse = None if axes is None else tuple(np.argsort([a % np.ndim(x) for a in axes]))
    return y, lambda g: (np.transpose(g, inverse),)


@rule(np.swapaxes, args="a", view=True)
def swapaxes_rule(x, axis1, axis2):
    return np.swapaxes(x, axis1, axis2), lambda g: (np.swapaxes(g, axis1, axis2),)


@rule(np.moveaxis, args="a", view=True)
def moveaxis_rule(x, source, destination):
    return np.moveaxis(x, source, destination), lambda g: (np.moveaxis(g, destination, source),)


@rule(np.expand_dims, args="a", view=True)
def expand_dims_rule(x, axis):
    old = np.shape(x)
    return np.expand_dims(x, axis), lambda g: (np.reshape(g, old),)


@rule(np.squeeze, args="a", view=True)
def squeeze_rule(x, axis=None):
    old = np.shape(x)
    return np.squeeze(x, axis), lambda g: (np.reshape(g, old),)


@rule(np.broadcast_to, args="array", view=True)
def broadcast_to_rule(x, shape, subok=False):
    # The engine sums the cotangent back down to x's shape.
    return np.broadcast_to(x, shape), lambda g: (g,)


for _rule, _fn in ((reshape_rule, np.reshape), (ravel_rule, np.ravel), (transpose_rule, np.transpose),
                   (swapaxes_rule, np.swapaxes), (moveaxis_rule, np.moveaxis), (expand_dims_rule, np.expand_dims),
                   (squeeze_rule, np.squeeze), (broadcast_to_rule, np.broadcast_to)):
    linear_forward(_rule, _fn)


def _atleast(fn):
    def run(*arrays):
        results = [FUNCTIONS[np.reshape](a, fn(np.empty(np.shape(a), dtype=bool)).shape) for a in arrays]
        return results[0] if len(results) == 1 else tuple(results)

    return run


for _fn in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
    composite(_fn, args="*arys", notes="A reshape of each array.")(_atleast(_fn))


@rule(np.copy, args="a")
def copy_rule(x, order="K", subok=False):
    return np.copy(x, order=order), lambda g: (g,)


linear_forward(copy_rule, np.copy)


@rule(_astype, args="x", notes="To another float dtype; the gradient comes back in x's dtype.")
def astype_rule(x, dtype):
    # The engine casts the cotangent back to x's dtype.
    return _astype(x, dtype), lambda g: (g,)


linear_forward(astype_rule, _astype)


@private_rule
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


@forward_rule(_concatenate_rule)
def _concatenate_frule(primals, tangents, axis=0):
    y = _concatenate_rule(*primals, axis=axis)[0]
    if all(t is None for t in tangents):
        return y, None
    parts = [zeros_if_none(t, p) for t, p in zip(tangents, primals)]
    return y, np.concatenate(parts, axis=axis) if axis is not None else np.concatenate([np.ravel(p) for p in parts])


@composite(np.concatenate, args="arrays")
def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    if out is not None:
        raise TypeError("numpy.concatenate(..., out=...) is not supported on tracked values")
    y = apply(_concatenate_rule, tuple(arrays), {"axis": axis})
    return y if dtype is None else FUNCTIONS[_astype](y, dtype)


@private_rule
def _stack_rule(*arrays, axis=0):
    y = np.stack(arrays, axis=axis)
    ax = axis % np.ndim(y)
    return y, lambda g: tuple(g[(slice(None),) * ax + (k,)] for k in range(len(arrays)))


@forward_rule(_stack_rule)
def _stack_frule(primals, tangents, axis=0):
    y = np.stack(primals, axis=axis)
    if all(t is None for t in tangents):
        return y, None
    return y, np.stack([zeros_if_none(t, p) for t, p in zip(tangents, primals)], axis=axis)


@composite(np.stack, args="arrays")
def stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    if out is not None:
        raise TypeError("numpy.stack(..., out=...) is not supported on tracked values")
    y = apply(_stack_rule, tuple(arrays), {"axis": axis})
    return y if dtype is None else FUNCTIONS[_astype](y, dtype)


@composite(np.vstack, args="tup")
def vstack(tup, *, dtype=None, casting="same_kind"):
    return concatenate([np.atleast_2d(a) for a in tup], axis=0, dtype=dtype)


@composite(np.hstack, args="tup")
def hstack(tup, *, dtype=None, casting="same_kind"):
    arrays = [np.atleast_1d(a) for a in tup]
    return concatenate(arrays, axis=0 if np.ndim(arrays[0]) == 1 else 1, dtype=dtype)


def _constant_like(prototype, value):
    """`value`, made by `np.zeros_like(prototype)` or the like: a constant living on the prototype's
    tape (or level), so that tracked values can be written into it (`h[i] = f(x)`)."""
    if not isinstance(prototype, Traced) or value.dtype.kind != "f":
        return value
    if type(prototype) is Dual:
        return Dual(value, None, prototype._tape)  # a None tangent is a zero tangent
    return prototype._tape.leaf(value)


def _like(make, name):
    """`make(prototype, ...)`, whose prototype parameter is called `name`, on a tracked prototype."""

    def run(*args, **kwargs):
        prototype, args = (args[0], args[1:]) if args else (kwargs.pop(name), ())
        return _constant_like(prototype, make(stop_gradient(prototype), *args, **kwargs))

    return run


for _make, _name in ((np.zeros_like, "a"), (np.ones_like, "a"), (np.empty_like, "prototype")):
    FUNCTIONS[_make] = _like(_make, _name)
    describe(_make, "none", """A constant: no gradient flows from the prototype. On a tracked prototype the
             result is tracked too, so tracked values can be written into it.""", kind="none")


@composite(np.full_like, args="fill_value", notes="""The fill value is differentiable (its gradient
           sums the result's); none flows from the prototype. On a tracked prototype the result is
           tracked, so tracked values can be written into it. With a plain prototype NumPy never
           hands the call over: pass a tracked prototype, or write `v * np.ones_like(a)`.""")
def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kwargs):
    value = np.full_like(stop_gradient(a), stop_gradient(fill_value), dtype, order, subok, shape, **kwargs)
    if not isinstance(fill_value, Traced) or value.dtype.kind != "f":
        return _constant_like(a, value)
    if fill_value.dtype != value.dtype:
        fill_value = FUNCTIONS[_astype](fill_value, value.dtype)
    return np.copy(np.broadcast_to(fill_value, value.shape))  # a copy, not a view of the fill value


refuse(np.copyto, "it writes into an array in place. Into a tracked array, write `dst[...] = src` instead. "
       "np.full_like(a, v) with a plain `a`, and np.full(shape, v, dtype), call it when the fill value v is "
       "tracked: write `v * np.ones_like(a)` (or `v * np.ones(shape)`), or pass a tracked prototype to "
       "np.full_like.")
