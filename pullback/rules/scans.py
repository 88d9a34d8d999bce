"""Rules for scans and statistics: cumsum, cumprod, diff, nan-reductions, average, var, std,
ptp, trace and the norms, in both modes.

Every backward and forward rule is written with NumPy calls, so it can be differentiated again.
"""

import numpy as np

from .._trace import apply, stop_gradient
from .reductions import expand_to, reduced_axes
from ._register import composite, forward_in_first, linear_forward, private_rule, rule

_NO = np._NoValue


def _refuse_out(name, out=None, where=_NO, initial=_NO):
    if out is not None or (where is not _NO and where is not True) or (initial is not _NO and initial is not None):
        raise TypeError(f"numpy.{name}: out=, where= and initial= are not supported on tracked values; "
                        "compute the plain result and select with np.where instead.")


def _count(shape, axis):
    """How many elements a reduction over `axis` combines (a Python int)."""
    n = 1
    for k in reduced_axes(axis, len(shape)):
        n *= shape[k]
    return n


def reverse_cumsum(g, axis):
    """`sum(g[i:])` along `axis` for every `i`: the transpose of cumsum."""
    return np.flip(np.cumsum(np.flip(g, axis), axis=axis), axis)


@rule(np.cumsum, args="a", notes="`axis=None` scans the flattened array.")
def cumsum_rule(a, axis=None, dtype=None, out=None):
    _refuse_out("cumsum", out)
    y = np.cumsum(a, axis=axis, dtype=dtype)
    shape = np.shape(a)

    def back(g):
        if axis is None:
            return (np.reshape(reverse_cumsum(g, 0), shape),)
        return (reverse_cumsum(g, axis),)

    return y, back


linear_forward(cumsum_rule, np.cumsum)


@rule(np.cumprod, args="a", notes="""Exact also where the input has zeros, to every order (the
      backward does one more scan per zero in a line).""")
def cumprod_rule(a, axis=None, dtype=None, out=None):
    _refuse_out("cumprod", out)
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


@forward_in_first(cumprod_rule)
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


@composite(np.nansum, args="a", notes="NaNs count as zero and get zero gradient.")
def nansum(a, axis=None, dtype=None, out=None, keepdims=_NO, initial=_NO, where=_NO):
    _refuse_out("nansum", out, where, initial)
    return np.sum(np.where(np.isnan(a), 0.0, a), axis=axis, dtype=dtype, keepdims=keepdims is True)


@composite(np.nanmean, args="a", notes="NaNs are left out of the mean and get zero gradient.")
def nanmean(a, axis=None, dtype=None, out=None, keepdims=_NO, *, where=_NO):
    _refuse_out("nanmean", out, where)
    keep = keepdims is True
    missing = np.isnan(a)
    count = np.sum(~missing, axis=axis, keepdims=keep)
    total = np.sum(np.where(missing, 0.0, a), axis=axis, dtype=dtype, keepdims=keep)
    return total / np.asarray(count, dtype=np.result_type(total.dtype, np.float16))


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
    _refuse_out("var", out)
    ddof = _ddof("var", ddof, correction, mean, where)
    keep = keepdims is True
    y = np.var(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keep)
    shape = np.shape(a)
    scale = 2.0 / (_count(shape, axis) - ddof)

    def back(g):
        centred = a - np.mean(a, axis=axis, keepdims=True)
        return (expand_to(g, shape, axis, keep) * centred * scale,)

    return y, back


@forward_in_first(var_rule)
def var_frule(t, a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, **options):
    y = var_rule(a, axis, dtype, out, ddof, keepdims, **options)[0]
    ddof = _ddof("var", ddof, options.get("correction", _NO), _NO, _NO)
    centred = a - np.mean(a, axis=axis, keepdims=True)
    scale = 2.0 / (_count(np.shape(a), axis) - ddof)
    return y, np.sum(centred * t, axis=axis, keepdims=keepdims is True) * scale


@rule(np.std, args="a", notes="Where the spread is zero the gradient is taken as 0 (the derivative does not exist).")
def std_rule(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, *, where=_NO, mean=_NO, correction=_NO):
    _refuse_out("std", out)
    ddof = _ddof("std", ddof, correction, mean, where)
    keep = keepdims is True
    y = np.std(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keep)
    shape = np.shape(a)
    count = float(_count(shape, axis) - ddof)

    def back(g):
        centred = a - np.mean(a, axis=axis, keepdims=True)
        spread = expand_to(y, shape, axis, keep)
        flat = spread == 0
        share = np.where(flat, 0.0, expand_to(g, shape, axis, keep) / np.where(flat, 1.0, spread * count))
        return (share * centred,)

    return y, back


@forward_in_first(std_rule)
def std_frule(t, a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, **options):
    y = std_rule(a, axis, dtype, out, ddof, keepdims, **options)[0]
    ddof = _ddof("std", ddof, options.get("correction", _NO), _NO, _NO)
    centred = a - np.mean(a, axis=axis, keepdims=True)
    count = float(_count(np.shape(a), axis) - ddof)
    flat = y == 0
    pairing = np.sum(centred * t, axis=axis, keepdims=keepdims is True)
    return y, np.where(flat, 0.0, pairing / np.where(flat, 1.0, y * count))


@composite(np.ptp, args="a", notes="max - min; ties share the gradient equally.")
def ptp(a, axis=None, out=None, keepdims=_NO):
    _refuse_out("ptp", out)
    keep = keepdims is True
    return np.max(a, axis=axis, keepdims=keep) - np.min(a, axis=axis, keepdims=keep)


@composite(np.trace, args="a", notes="Sum of `np.diagonal`.")
def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _refuse_out("trace", out)
    return np.sum(np.diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


@composite(np.linalg.trace, args="x", notes="Over the last two axes.")
def linalg_trace(x, /, *, offset=0, dtype=None):
    return trace(x, offset, -2, -1, dtype)


# --- norms ---------------------------------------------------------------------------
@private_rule
def _euclidean_rule(x, axis, keepdims):
    y = np.linalg.vector_norm(x, axis=axis, keepdims=keepdims)
    shape = np.shape(x)

    def back(g):
        norm = expand_to(y, shape, axis, keepdims)
        zero = norm == 0
        share = np.where(zero, 0.0, expand_to(g, shape, axis, keepdims) / np.where(zero, 1.0, norm))
        return (share * x, None, None)

    return y, back


@forward_in_first(_euclidean_rule)
def _euclidean_frule(t, x, axis, keepdims):
    y = np.linalg.vector_norm(x, axis=axis, keepdims=keepdims)
    zero = y == 0
    return y, np.where(zero, 0.0, np.sum(x * t, axis=axis, keepdims=keepdims) / np.where(zero, 1.0, y))


def _euclidean(x, axis, keepdims):
    return apply(_euclidean_rule, (x, axis, keepdims))


def _vector_norm(x, ord, axis, keepdims):
    if ord is None or ord == 2:
        return _euclidean(x, axis, keepdims)
    if ord == np.inf:
        return np.max(np.abs(x), axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return np.min(np.abs(x), axis=axis, keepdims=keepdims)
    if ord == 0:
        plain = stop_gradient(x)
        return np.sum(plain != 0, axis=axis, keepdims=keepdims).astype(plain.dtype)
    if ord == 1:
        return np.sum(np.abs(x), axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    return np.sum(np.abs(x) ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)


def _matrix_norm(x, ord, axes, keepdims):
    row, col = (k % np.ndim(x) for k in axes)
    if row == col:
        raise ValueError("Duplicate axes given.")
    if ord is None or ord == "fro":
        y = _euclidean(x, (row, col), keepdims)
        return y
    if ord in ("nuc", 2, -2):
        s = np.linalg.svd(np.moveaxis(x, (row, col), (-2, -1)), compute_uv=False)
        y = {"nuc": np.sum, 2: np.max, -2: np.min}[ord](s, axis=-1)
    elif ord in (1, -1):
        pick = np.max if ord == 1 else np.min
        y = pick(np.sum(np.abs(x), axis=row), axis=col - 1 if col > row else col)
    elif ord in (np.inf, -np.inf):
        pick = np.max if ord == np.inf else np.min
        y = pick(np.sum(np.abs(x), axis=col), axis=row - 1 if row > col else row)
    else:
        raise ValueError("Invalid norm order for matrices.")
    if keepdims:
        y = np.expand_dims(y, tuple(sorted((row, col))))
    return y


@composite(np.linalg.norm, args="x", notes="""All vector and matrix orders. At a zero vector the
      2-norm gets gradient 0 (a subgradient). Orders 2, -2 and 'nuc' go through the singular values
      (see svd); ord=0 counts nonzeros and has no gradient.""")
def norm(x, ord=None, axis=None, keepdims=False):
    ndim = np.ndim(x)
    if axis is None:
        if ord is None or (ord in ("f", "fro") and ndim == 2) or (ord == 2 and ndim == 1):
            return _euclidean(x, None, keepdims)
        axis = tuple(range(ndim))
        if ndim not in (1, 2):
            raise ValueError("Improper number of dimensions to norm.")
    elif not isinstance(axis, tuple):
        axis = (axis,)
    if len(axis) == 1:
        return _vector_norm(x, ord, axis[0], keepdims)
    if len(axis) == 2:
        return _matrix_norm(x, ord, axis, keepdims)
    raise ValueError("Improper number of dimensions to norm.")


@composite(np.linalg.vector_norm, args="x", notes="As `norm` for vectors; `axis` may be a tuple.")
def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    if ord in (None, 2):
        return _euclidean(x, axis, keepdims)
    if axis is None:
        result = _vector_norm(np.ravel(x), ord, 0, False)
        return np.reshape(result, (1,) * np.ndim(x)) if keepdims else result
    if isinstance(axis, tuple):
        moved = np.moveaxis(x, axis, tuple(range(-len(axis), 0)))
        flat = np.reshape(moved, np.shape(moved)[:np.ndim(x) - len(axis)] + (-1,))
        result = _vector_norm(flat, ord, -1, False)
        if keepdims:
            result = np.expand_dims(result, tuple(sorted(k % np.ndim(x) for k in axis)))
        return result
    return _vector_norm(x, ord, axis, keepdims)


@composite(np.linalg.matrix_norm, args="x", notes="As `norm` over the last two axes.")
def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    return _matrix_norm(x, ord, (-2, -1), keepdims)
