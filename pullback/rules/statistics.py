"""Rules for statistics: the weighted average, nanmean, var, std and ptp, in both modes.

Every backward and forward rule is written with NumPy calls, so it can be differentiated again.
"""

import numpy as np

from .._values import stop_gradient
from ._register import composite, forward_in_first, rule
from .reductions import expand_to, reduced_size, refuse_out

_NO = np._NoValue


@composite(np.average, args="a, weights", notes="""Weights may be differentiated too; they may be
      1-D along `axis`, as in NumPy.""")
def average(a, axis=None, weights=None, returned=False, *, keepdims=_NO):
    keep = keepdims is True
    if weights is None:
        avg = np.mean(a, axis=axis, keepdims=keep)
        if not returned:
            return avg
        scale = np.full(np.shape(avg), np.size(a) / max(np.size(avg), 1), dtype=avg.dtype)
        return avg, scale
    shape = np.shape(a)
    if np.shape(weights) != shape:
        if axis is None:
            raise TypeError("Axis must be specified when shapes of a and weights differ.")
        axes = tuple(k % len(shape) for k in (axis if isinstance(axis, tuple) else (axis,)))
        if np.shape(weights) != tuple(shape[k] for k in axes):
            raise ValueError("Shape of weights must be consistent with shape of a along specified axis.")
        order = np.argsort(axes)
        weights = np.transpose(weights, tuple(int(k) for k in order))
        weights = np.reshape(weights, tuple(n if k in axes else 1 for k, n in enumerate(shape)))
    scale = np.sum(weights, axis=axis, keepdims=keep)
    if np.any(stop_gradient(scale) == 0.0):
        raise ZeroDivisionError("Weights sum to zero, can't be normalized")
    avg = np.sum(a * weights, axis=axis, keepdims=keep) / scale
    if not returned:
        return avg
    if np.shape(scale) != np.shape(avg):
        scale = np.copy(np.broadcast_to(scale, np.shape(avg)))
    return avg, scale


@composite(np.nanmean, args="a", notes="NaNs are left out of the mean and get zero gradient.")
def nanmean(a, axis=None, dtype=None, out=None, keepdims=_NO, *, where=_NO):
    refuse_out("nanmean", out, where)
    keep = keepdims is True
    missing = np.isnan(a)
    count = np.sum(~missing, axis=axis, keepdims=keep)
    total = np.sum(np.where(missing, 0.0, a), axis=axis, dtype=dtype, keepdims=keep)
    return total / np.asarray(count, dtype=np.result_type(total.dtype, np.float16))


def _ddof(name, ddof, correction, mean, where):
    if mean is not _NO or (where is not _NO and where is not True):
        raise TypeError(f"numpy.{name}: mean= and where= are not supported on tracked values")
    if correction is not _NO:
        if ddof != 0:
            raise ValueError("ddof and correction can't be provided simultaneously.")
        return correction
    return ddof


@rule(np.var, args="a", notes="`ddof`, `correction`, `axis` and `keepdims` as in NumPy; `mean=` and `where=` are "
      "refused.")
def var_rule(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, *, where=_NO, mean=_NO, correction=_NO):
    refuse_out("var", out)
    ddof = _ddof("var", ddof, correction, mean, where)
    keep = keepdims is True
    y = np.var(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keep)
    shape = np.shape(a)
    scale = 2.0 / (reduced_size(shape, axis) - ddof)

    def back(g):
        centred = a - np.mean(a, axis=axis, keepdims=True)
        return (expand_to(g, shape, axis, keep) * centred * scale,)

    return y, back


@forward_in_first(np.var)
def var_frule(t, a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, **options):
    y = var_rule(a, axis, dtype, out, ddof, keepdims, **options)[0]
    ddof = _ddof("var", ddof, options.get("correction", _NO), _NO, _NO)
    centred = a - np.mean(a, axis=axis, keepdims=True)
    scale = 2.0 / (reduced_size(np.shape(a), axis) - ddof)
    return y, np.sum(centred * t, axis=axis, keepdims=keepdims is True) * scale


@rule(np.std, args="a", notes="Where the spread is zero the gradient is taken as 0 (the derivative does not exist).")
def std_rule(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, *, where=_NO, mean=_NO, correction=_NO):
    refuse_out("std", out)
    ddof = _ddof("std", ddof, correction, mean, where)
    keep = keepdims is True
    y = np.std(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keep)
    shape = np.shape(a)
    count = float(reduced_size(shape, axis) - ddof)

    def back(g):
        centred = a - np.mean(a, axis=axis, keepdims=True)
        spread = expand_to(y, shape, axis, keep)
        flat = spread == 0
        share = np.where(flat, 0.0, expand_to(g, shape, axis, keep) / np.where(flat, 1.0, spread * count))
        return (share * centred,)

    return y, back


@forward_in_first(np.std)
def std_frule(t, a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, **options):
    y = std_rule(a, axis, dtype, out, ddof, keepdims, **options)[0]
    ddof = _ddof("std", ddof, options.get("correction", _NO), _NO, _NO)
    centred = a - np.mean(a, axis=axis, keepdims=True)
    count = float(reduced_size(np.shape(a), axis) - ddof)
    flat = y == 0
    pairing = np.sum(centred * t, axis=axis, keepdims=keepdims is True)
    return y, np.where(flat, 0.0, pairing / np.where(flat, 1.0, y * count))


@composite(np.ptp, args="a", notes="max - min; ties share the gradient equally.")
def ptp(a, axis=None, out=None, keepdims=_NO):
    refuse_out("ptp", out)
    keep = keepdims is True
    return np.max(a, axis=axis, keepdims=keep) - np.min(a, axis=axis, keepdims=keep)
