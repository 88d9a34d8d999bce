"""Rules for scans and differences, in both modes: cumsum, cumprod, their NaN-ignoring and
cumulative_ forms, diff, ediff1d, np.gradient and the trapezoid rule.

Every backward and forward rule is written with NumPy calls, so it can be differentiated again.
"""

import numpy as np

from .._arrays import axis_index, holds_foreign_array, like_input, rechunked_like
from .._standins import dtype_of
from .._values import Traced, stop_gradient
from ._register import as_array, composite, forward_in_first, linear_forward, rule
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


def _shifted(v, shift, axis, fill):
    """`v` moved `shift` places along `axis`, the first `shift` entries `fill`."""
    head = [slice(None)] * np.ndim(v)
    head[axis] = slice(0, np.shape(v)[axis] - shift)
    pad = list(np.shape(v))
    pad[axis] = shift
    shifted = np.concatenate([np.full_like(stop_gradient(v), fill, shape=pad), v[tuple(head)]], axis=axis)
    return rechunked_like(shifted, v)  # Dask: the scans repeat this, so keep v's chunks


def _linear_scan(a, b, axis):
    """h along `axis` with h_j = a_j h_(j-1) + b_j, h_(-1) = 0: by doubling (log₂ n steps of whole-array
    products), with no division and no branch on values, so a Dask array stays lazy and zeros are exact."""
    shift = 1
    while shift < np.shape(b)[axis]:
        b = b + a * _shifted(b, shift, axis, 0.0)
        a = a * _shifted(a, shift, axis, 1.0)
        shift *= 2
    return b


def _exclusive_cumprod(x, axis):
    """prod_{k < j} x_k for every j (1 at the start)."""
    return _shifted(np.cumprod(x, axis=axis), 1, axis, 1.0)


def _below_normal(v):
    """Whether float `v` holds a value below the smallest normal one (0 or a subnormal: a product that
    underflowed), where dividing by it or into it loses digits."""
    plain = stop_gradient(v)
    kind = dtype_of(plain).kind
    return kind in "fc" and bool(np.any(np.abs(plain) < np.finfo(dtype_of(plain)).tiny))


def _cumprod_cotangent(g, x, y, axis):
    # d y_j / d x_i = prod_{k <= j, k != i} x_k for j >= i. Where x_i != 0 that is y_j / x_i.
    zero = stop_gradient(x) == 0
    if holds_foreign_array(x) or holds_foreign_array(g) or (not np.any(zero) and _below_normal(y)):
        # without counting zeros or dividing (y / x_i loses digits where y underflowed):
        # prod_{k<i} x_k · s_i, s_i = g_i + x_(i+1) s_(i+1), a scan from the end
        flip = lambda v: np.flip(v, axis)  # noqa: E731
        return _exclusive_cumprod(x, axis) * flip(_linear_scan(_shifted(flip(x), 1, axis, 0.0), flip(g), axis))
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
    if holds_foreign_array(x) or holds_foreign_array(t) or (not np.any(zero) and (_below_normal(x) or _below_normal(y))):
        # without counting zeros or dividing (t / x overflows at a subnormal x; y underflowed):
        # dy_j = x_j dy_(j-1) + t_j y_(j-1)
        return _linear_scan(x, t * _exclusive_cumprod(x, axis), axis)
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
    axis = axis_index(axis, np.ndim(a))
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


@composite(np.nancumsum, args="a", notes="NaNs count as zero and get zero gradient.")
def nancumsum(a, axis=None, dtype=None, out=None):
    refuse_out("nancumsum", out)
    return np.cumsum(np.where(np.isnan(a), 0.0, a), axis=axis, dtype=dtype)


@composite(np.nancumprod, args="a", notes="NaNs count as one and get zero gradient.")
def nancumprod(a, axis=None, dtype=None, out=None):
    refuse_out("nancumprod", out)
    return np.cumprod(np.where(np.isnan(a), 1.0, a), axis=axis, dtype=dtype)


def _cumulative(name, scan, identity):
    def run(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        refuse_out(name, out)
        if np.ndim(x) == 0:
            x = np.reshape(x, (1,))  # NumPy scans a 0-d array as one element
        if axis is None:
            if np.ndim(x) != 1:
                raise ValueError("For arrays which have more than one dimension ``axis`` argument is required.")
            axis = 0
        y = scan(x, axis=axis, dtype=dtype)
        if not include_initial:
            return y
        shape = list(np.shape(y))
        shape[axis] = 1
        return np.concatenate([like_input(np.full(shape, identity, dtype=y.dtype), y), y], axis=axis)

    return run


composite(np.cumulative_sum, args="x", notes="As cumsum; `include_initial` prepends zeros.")(
    _cumulative("cumulative_sum", np.cumsum, 0.0))
composite(np.cumulative_prod, args="x", notes="As cumprod (exact at zeros); `include_initial` prepends ones.")(
    _cumulative("cumulative_prod", np.cumprod, 1.0))


@composite(np.ediff1d, args="ary, to_end, to_begin", numpy_value=True, notes="Differences of the flattened array, with the ends joined.")
def ediff1d(ary, to_end=None, to_begin=None):
    np.ediff1d(stop_gradient(ary), stop_gradient(to_end), stop_gradient(to_begin))  # NumPy checks the casts
    flat = np.ravel(ary)
    parts = [flat[1:] - flat[:-1]]
    if to_begin is not None:
        parts.insert(0, np.ravel(to_begin))
    if to_end is not None:
        parts.append(np.ravel(to_end))
    y = np.concatenate(parts) if len(parts) > 1 else parts[0]
    dtype = np.result_type(stop_gradient(ary))
    return y if y.dtype == dtype or dtype.kind != "f" else y.astype(dtype)


@composite(np.trapezoid, args="y, x, dx", notes="Sample points `x` (1-D along `axis`, or shaped like `y`) or a spacing `dx`.")
def trapezoid(y, x=None, dx=1.0, axis=-1):
    ndim, given = np.ndim(y), axis
    axis = axis_index(axis, ndim)
    if x is None:
        d = dx
    else:
        x = as_array(x)
        if np.ndim(x) == 1:
            d = x[1:] - x[:-1]
            d = np.reshape(d, (-1,) + (1,) * (ndim - 1 - axis))
        else:
            d = np.diff(x, axis=given)  # NumPy's axis counts in x's dimensions, which broadcast against y's
    head = (slice(None),) * axis
    upper, lower = y[head + (slice(1, None),)], y[head + (slice(None, -1),)]
    return np.sum(d * (upper + lower) / 2.0, axis=axis)


def _spacings(f, varargs, axes):
    """One spacing per axis: a scalar, or a 1-D array of coordinates (NumPy checks their shapes)."""
    n = len(axes)
    if not varargs:
        return [1.0] * n
    if len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        return [varargs[0]] * n
    if len(varargs) != n:
        raise TypeError("invalid number of arguments")
    return [v if np.ndim(v) == 0 else (v if isinstance(v, Traced) else np.asarray(v, dtype=np.float64))
            for v in varargs]


def _gradient_along(f, axis, spacing, edge_order):
    """np.gradient of `f` along one axis: second-order central differences inside, one-sided at the ends."""
    ndim = np.ndim(f)

    def at(index):
        return f[(slice(None),) * axis + (index,)]

    def shaped(v):  # coordinates differences along `axis`
        return np.reshape(v, (-1,) + (1,) * (ndim - 1 - axis)) if np.ndim(v) else v

    n = np.shape(f)[axis]
    if np.ndim(spacing) == 0:
        h = spacing
        inside = (at(slice(2, None)) - at(slice(None, -2))) / (2.0 * h)
        if edge_order == 1:
            first = (at(slice(1, 2)) - at(slice(0, 1))) / h
            last = (at(slice(n - 1, n)) - at(slice(n - 2, n - 1))) / h
        else:
            first = -(1.5 * at(slice(0, 1)) - 2.0 * at(slice(1, 2)) + 0.5 * at(slice(2, 3))) / h
            last = (0.5 * at(slice(n - 3, n - 2)) - 2.0 * at(slice(n - 2, n - 1)) + 1.5 * at(slice(n - 1, n))) / h
        return np.concatenate([first, inside, last], axis=axis)
    dx = spacing[1:] - spacing[:-1]
    left, right = shaped(dx[:-1]), shaped(dx[1:])
    inside = ((left ** 2) * at(slice(2, None)) + (right ** 2 - left ** 2) * at(slice(1, -1))
              - (right ** 2) * at(slice(None, -2))) / (left * right * (left + right))
    if edge_order == 1:
        first = (at(slice(1, 2)) - at(slice(0, 1))) / shaped(dx[:1])
        last = (at(slice(n - 1, n)) - at(slice(n - 2, n - 1))) / shaped(dx[-1:])
    else:
        d1, d2 = shaped(dx[:1]), shaped(dx[1:2])
        first = (-(2.0 * d1 + d2) / (d1 * (d1 + d2)) * at(slice(0, 1)) + (d1 + d2) / (d1 * d2) * at(slice(1, 2))
                 - d1 / (d2 * (d1 + d2)) * at(slice(2, 3)))
        d1, d2 = shaped(dx[-2:-1]), shaped(dx[-1:])
        last = (d2 / (d1 * (d1 + d2)) * at(slice(n - 3, n - 2)) - (d2 + d1) / (d1 * d2) * at(slice(n - 2, n - 1))
                + (2.0 * d2 + d1) / (d2 * (d1 + d2)) * at(slice(n - 1, n)))
    return np.concatenate([first, inside, last], axis=axis)


@composite(np.gradient, args="f, *varargs", numpy_value=True, notes="""Scalar spacings and coordinate arrays (both
           differentiable), `axis`, `edge_order` 1 and 2. The result keeps `f`'s float dtype.""")
def gradient(f, *varargs, axis=None, edge_order=1):
    plain = np.gradient(stop_gradient(f), *(stop_gradient(v) for v in varargs), axis=axis, edge_order=edge_order)
    if isinstance(plain, tuple) and not plain:  # a 0-d array has no axis to differentiate along
        return plain
    ndim = np.ndim(f)
    axes = tuple(range(ndim)) if axis is None else tuple(a % ndim for a in (axis if isinstance(axis, (tuple, list))
                                                                          else (axis,)))
    dtype = plain[0].dtype if isinstance(plain, tuple) else plain.dtype
    if np.result_type(stop_gradient(f)) != dtype:
        f = f.astype(dtype) if isinstance(f, Traced) else np.asarray(f, dtype=dtype)
    results = []
    for ax, spacing in zip(axes, _spacings(f, varargs, axes)):
        g = _gradient_along(f, ax, spacing, edge_order)
        results.append(g if g.dtype == dtype else g.astype(dtype))
    return tuple(results) if len(results) > 1 else results[0]
