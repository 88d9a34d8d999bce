"""Rules for scans and differences: cumsum, cumprod and diff, in both modes.

Every backward and forward rule is written with NumPy calls, so it can be differentiated again.
"""

import numpy as np

from .._values import stop_gradient
from ._register import composite, forward_in_first, linear_forward, rule
from .reductions import refuse_out

_NO = np._NoValue


def reverse_cumsum(g, axis):
    """`sum(g[i:])` along `axis` for every `i`: the transpose of cumsum."""
    return np.flip(np.cumsum(np.flip(g, axis), axis=axis), axis)


@rule(np.cumsum, args="a", notes="`axis=None` scans the flattened array.")
def cumsum_rule(a, axis=None, dtype=None, out=None):
    refuse_out("cumsum", out)
    y = np.cumsum(a, axis=axis, dtype=dtype)
    shape = np.shape(a)

    def back(g):
        if axis is None:
            return (np.reshape(reverse_cumsum(g, 0), shape),)
        return (reverse_cumsum(g, axis),)

    return y, back


linear_forward(np.cumsum)


@rule(np.cumprod, args="a", notes="""Exact also where the input has zeros, to every order (the
      backward does one more scan per zero in a line).""")
def cumprod_rule(a, axis=None, dtype=None, out=None):
    refuse_out("cumprod", out)
    y = np.cumprod(a, axis=axis, dtype=dtype)
    shape = np.shape(a)

    def back(g):
        x, ax = (np.ravel(a), 0) if axis is None else (a, axis)
        r = _cumprod_cotangent(g, x, y, ax)
        return (np.reshape(r, shape) if axis is None else r,)

    return y, back


def _cumprod_cotangent(g, x, y, axis):
    # d y_j / d x_i = prod_{k <= j, k != i} x_k for j >= i. Where x_i != 0 that is y_j / x_i.
    zero = stop_gradient(x) == 0
    if not np.any(zero):
        return reverse_cumsum(g * y, axis) / x
    result = np.where(zero, 0.0, reverse_cumsum(g * y, axis) / np.where(zero, 1.0, x))
    # At the q-th zero of each line, scan the products that skip that factor (no division, so
    # higher derivatives stay exact too).
    rank = np.cumsum(zero, axis=axis) * zero
    for q in range(1, int(np.max(rank)) + 1):
        at = rank == q
        skipping = np.cumprod(np.where(at, 1.0, x), axis=axis)
        result = np.where(at, reverse_cumsum(g * skipping, axis), result)
    return result


@forward_in_first(np.cumprod)
def cumprod_frule(t, a, axis=None, dtype=None, out=None):
    y = cumprod_rule(a, axis, dtype, out)[0]
    if axis is None:
        a, t, axis = np.ravel(a), np.ravel(t), 0
    return y, _cumprod_tangent(t, a, y, axis)


def _cumprod_tangent(t, x, y, axis):
    # dy_j = sum_{i <= j} t_i prod_{k <= j, k != i} x_k. Where x_i != 0 the product is y_j / x_i.
    zero = stop_gradient(x) == 0
    if not np.any(zero):
        return y * np.cumsum(t / x, axis=axis)
    total = y * np.cumsum(np.where(zero, 0.0, t / np.where(zero, 1.0, x)), axis=axis)
    # The q-th zero of a line contributes from its own position on, times the products that skip it.
    seen = np.cumsum(zero, axis=axis)
    rank = seen * zero
    for q in range(1, int(np.max(rank)) + 1):
        at = rank == q
        skipping = np.cumprod(np.where(at, 1.0, x), axis=axis)
        t_at = np.sum(np.where(at, t, 0.0), axis=axis, keepdims=True)
        total = total + np.where(seen >= q, skipping * t_at, 0.0)
    return total


@composite(np.diff, args="a, prepend, append", notes="Written with slicing and subtraction.")
def diff(a, n=1, axis=-1, prepend=_NO, append=_NO):
    if n == 0:
        return a
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    if np.ndim(a) == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = axis % np.ndim(a)
    parts = []
    for extra in (prepend, a, append):
        if extra is _NO:
            continue
        if extra is not a and np.ndim(extra) == 0:
            shape = list(np.shape(a))
            shape[axis] = 1
            extra = np.broadcast_to(extra, tuple(shape))
        parts.append(extra)
    if len(parts) > 1:
        a = np.concatenate(parts, axis=axis)
    head = (slice(None),) * axis
    for _ in range(n):
        a = a[head + (slice(1, None),)] - a[head + (slice(None, -1),)]
    return a
