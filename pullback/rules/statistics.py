"""Rules for statistics, in both modes: the weighted average, nanmean, var, std, nanvar, nanstd, ptp,
cov and corrcoef, and the order statistics (median, percentile, quantile and their NaN-ignoring forms).

Every backward and forward rule is written with NumPy calls, so it can be differentiated again.
"""

import numpy as np

from .._arrays import copy_laid_out_as, holds_foreign_array, like_input, of_another_library, size_of, zeros_as
from .._extend import primitive, rrule
from .._inplace import concrete_of, plain_of
from .._standins import dtype_of, is_stand_in
from .._values import Traced, stop_gradient
from ._register import as_array, composite, forward_in_first, rule
from .reductions import expand_to, given_options, keeps_dims, mask_of, masked, reduced_size, refuse_out, selected_count

_NO = np._NoValue


@composite(np.average, args="a, weights", numpy_value=True, notes="""Weights may be differentiated too; they may be
      1-D along `axis`, as in NumPy.""")
def average(a, axis=None, weights=None, returned=False, *, keepdims=_NO):
    keep = keeps_dims(keepdims)
    if isinstance(axis, list):  # NumPy reads a list of axes as a tuple
        axis = tuple(axis)
    if weights is None:
        avg = np.mean(a, axis=axis, keepdims=keep)
        if not returned:
            return avg
        scale = like_input(np.full(np.shape(avg), size_of(a) / max(size_of(avg), 1), dtype=avg.dtype), avg)
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


@composite(np.nanmean, args="a", numpy_value=True, notes="NaNs are left out of the mean and get zero gradient.")
def nanmean(a, axis=None, dtype=None, out=None, keepdims=_NO, *, where=_NO):
    refuse_out("nanmean", out, where)
    keep = keeps_dims(keepdims)
    missing = np.isnan(a)
    count = np.sum(~missing, axis=axis, keepdims=keep)
    total = np.sum(np.where(missing, 0.0, a), axis=axis, dtype=dtype, keepdims=keep)
    return total / count.astype(np.result_type(total.dtype, np.float16))  # not np.asarray: a Dask count stays lazy


def _ddof(name, ddof, correction, mean):
    if mean is not _NO:
        raise TypeError(f"numpy.{name}: mean= is not supported on tracked values; let NumPy compute the mean.")
    if correction is not _NO:
        if ddof != 0:
            raise ValueError("ddof and correction can't be provided simultaneously.")
        return correction
    return ddof


def _conj_if_complex(v):
    """conj(v) for complex v: the variance of complex values is the mean of |a - mean|**2."""
    return np.conj(v) if np.iscomplexobj(v) else v


def _centred(a, axis, ddof, where):
    """`(c, inverse, mean)`: conj(a - mean) over the elements `where` selects (zero elsewhere), 1 / (selected
    count - ddof) of each slice (a number without a mask, keepdims-shaped with one; NaN where no degree of
    freedom is left, as NumPy's variance is then NaN or inf), and the mean (keepdims-shaped)."""
    if where is True:
        n = reduced_size(np.shape(a), axis) - ddof
        mean = np.mean(a, axis=axis, keepdims=True)
        return _conj_if_complex(a - mean), (1.0 / n if n > 0 else np.nan), mean
    mean = np.mean(a, axis=axis, keepdims=True, where=where)
    centred = np.where(where, _conj_if_complex(a - mean), 0.0)
    n = selected_count(where, np.shape(a), axis) - ddof
    return centred, 1.0 / np.where(n > 0, n, np.nan), mean


def _times(g, factor):
    """`g * factor`, 0 where `g` is 0 also where `factor` is NaN (a slice with no degree of freedom left, whose
    NaN value a cotangent of 0 leaves out, as after np.nan_to_num: it sends nothing, not NaN)."""
    product = g * factor
    plain = stop_gradient(factor)
    if holds_foreign_array(plain) or np.any(np.isnan(plain)):  # (a Dask array's values are not looked at)
        return np.where(g == 0, 0.0, product)
    return product


def _flat(spread, mean, y):
    """Where the standard deviation `spread` is zero, or no more than the rounding of the `mean` it was measured
    from (equal values whose mean rounds leave residues of a few units in the last place): there its derivative
    does not exist, and dividing those residues by their own spread would give one of about -1/n per element."""
    return spread <= 8 * float(np.finfo(dtype_of(y)).eps) * np.abs(mean)


def _real_if_complex_dtype(g, dtype):
    """The real part of the cotangent of a variance computed with a complex `dtype=` (its value is real)."""
    return np.real(g) if dtype is not None and np.dtype(dtype).kind == "c" else g


def _real_part_of_pairing(dot, a, t):
    """Re(sum(conj(a - mean) * t)): the variance of complex values moves by a real amount."""
    return np.real(dot) if np.iscomplexobj(a) or np.iscomplexobj(t) else dot


def _reduced_like(dot, y, keep):
    """A keepdims reduction `dot` shaped like the result `y`."""
    return dot if keep else np.reshape(dot, np.shape(y))


@rule(np.var, args="a", notes="`ddof`, `correction`, `axis`, `keepdims` and `where` as in NumPy; `mean=` is refused.")
def var_rule(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, *, where=_NO, mean=_NO, correction=_NO):
    refuse_out("var", out)
    ddof = _ddof("var", ddof, correction, mean)
    where = mask_of("var", where)
    keep = keeps_dims(keepdims)
    y = np.var(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keep, **given_options(where=where))
    shape = np.shape(a)

    def back(g):
        centred, inverse, _ = _centred(a, axis, ddof, where)
        g = _real_if_complex_dtype(g, dtype)
        return (masked(_times(expand_to(g, shape, axis, keep), 2.0 * inverse) * centred, where),)

    return y, back


@forward_in_first(np.var)
def var_frule(t, a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, **options):
    y = var_rule(a, axis, dtype, out, ddof, keepdims, **options)[0]
    ddof = _ddof("var", ddof, options.get("correction", _NO), _NO)
    centred, inverse, _ = _centred(a, axis, ddof, mask_of("var", options.get("where", _NO)))
    dot = _real_part_of_pairing(np.sum(centred * t, axis=axis, keepdims=True), a, t)
    return y, _reduced_like(_times(dot, 2.0 * inverse), y, keeps_dims(keepdims))


@rule(np.std, args="a", notes="Where the spread is zero the gradient is taken as 0 (the derivative does not exist).")
def std_rule(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, *, where=_NO, mean=_NO, correction=_NO):
    refuse_out("std", out)
    ddof = _ddof("std", ddof, correction, mean)
    where = mask_of("std", where)
    keep = keeps_dims(keepdims)
    y = np.std(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keep, **given_options(where=where))
    shape = np.shape(a)

    def back(g):
        centred, inverse, mean = _centred(a, axis, ddof, where)
        spread = expand_to(y, shape, axis, keep)
        flat = _flat(spread, mean, y)
        g = _real_if_complex_dtype(g, dtype)
        share = np.where(flat, 0.0, _times(expand_to(g, shape, axis, keep), inverse / np.where(flat, 1.0, spread)))
        return (masked(share * centred, where),)

    return y, back


@forward_in_first(np.std)
def std_frule(t, a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, **options):
    y = std_rule(a, axis, dtype, out, ddof, keepdims, **options)[0]
    ddof = _ddof("std", ddof, options.get("correction", _NO), _NO)
    centred, inverse, mean = _centred(a, axis, ddof, mask_of("std", options.get("where", _NO)))
    pairing = _real_part_of_pairing(np.sum(centred * t, axis=axis, keepdims=True), a, t)
    spread = np.reshape(y, np.shape(pairing))
    flat = _flat(spread, mean, y)
    tangent = np.where(flat, 0.0, _times(pairing, inverse / np.where(flat, 1.0, spread)))
    return y, _reduced_like(tangent, y, keeps_dims(keepdims))


@composite(np.ptp, args="a", notes="max - min; ties share the gradient equally.")
def ptp(a, axis=None, out=None, keepdims=_NO):
    refuse_out("ptp", out)
    keep = keeps_dims(keepdims)
    return np.max(a, axis=axis, keepdims=keep) - np.min(a, axis=axis, keepdims=keep)


def _given(**options):
    """The options a call was given (not left at np._NoValue), to pass on by keyword: another library's
    function (Dask's nanvar, median) may take fewer of them, or in another order."""
    return {k: v for k, v in options.items() if v is not _NO}


def _nan_moments(name, a, axis, dtype, out, ddof, keepdims, where, mean, correction):
    refuse_out(name, out, where)
    ddof = _ddof(name, ddof, correction, mean)
    keep = keeps_dims(keepdims)
    missing = np.isnan(a)
    count = np.sum(~missing, axis=axis, keepdims=True)
    present = np.where(missing, 0.0, a)  # NaNs out before any arithmetic, so none reaches a derivative
    centre = np.sum(present, axis=axis, dtype=dtype, keepdims=True) / np.maximum(count, 1)
    deviation = np.where(missing, 0.0, present - centre)
    square = np.real(deviation * np.conjugate(deviation)) if np.iscomplexobj(deviation) else deviation ** 2
    squares = np.sum(square, axis=axis, dtype=dtype, keepdims=keep)
    count = count if keep else np.reshape(count, np.shape(squares))
    left = count - ddof
    return np.where(left > 0, squares / np.where(left > 0, left, 1), np.nan)


@composite(np.nanvar, args="a", numpy_value=True, notes="NaNs are left out and get zero gradient; `ddof` and `correction` as in var.")
def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, *, where=_NO, mean=_NO, correction=_NO):
    plain = np.nanvar(stop_gradient(a), **_given(axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims, correction=correction))
    y = _nan_moments("nanvar", a, axis, dtype, out, ddof, keepdims, where, mean, correction)
    return y if y.dtype == plain.dtype else y.astype(plain.dtype)


@composite(np.nanstd, args="a", numpy_value=True, notes="""NaNs are left out and get zero gradient; where the spread is
           zero the gradient is taken as 0 (the derivative does not exist), as in std.""")
def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, *, where=_NO, mean=_NO, correction=_NO):
    plain = np.nanstd(stop_gradient(a), **_given(axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims, correction=correction))
    v = _nan_moments("nanstd", a, axis, dtype, out, ddof, keepdims, where, mean, correction)
    flat = stop_gradient(v) == 0
    y = np.where(flat, 0.0, np.sqrt(np.where(flat, 1.0, v)))
    return y if y.dtype == plain.dtype else y.astype(plain.dtype)


@composite(np.cov, args="m, y, aweights", numpy_value=True, notes="""`rowvar`, `bias`, `ddof`, `fweights` (integers)
           and `aweights` (differentiable) as in NumPy. Float32 input gives float64, as in NumPy.""")
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    if isinstance(fweights, Traced):
        raise TypeError("numpy.cov: fweights are whole counts of repetitions, which have no derivative; pass them as "
                        "a plain array (pb.stop_gradient(fweights)), or weights to differentiate as aweights.")
    plain = np.cov(stop_gradient(m), stop_gradient(y), rowvar, bias, ddof, fweights, stop_gradient(aweights),
                   dtype=dtype)  # NumPy checks the arguments (and warns where it warns)
    dtype = plain.dtype
    X = _as_float(np.atleast_2d(m), dtype)
    if not rowvar and np.shape(X)[0] != 1:
        X = X.T
    if np.shape(X)[0] == 0:
        return plain
    if y is not None:
        Y = _as_float(np.atleast_2d(y), dtype)
        if not rowvar and np.shape(Y)[0] != 1:
            Y = Y.T
        X = np.concatenate([X, Y], axis=0)
    ddof = (0 if bias else 1) if ddof is None else ddof
    w = None if fweights is None else np.asarray(fweights, dtype=np.float64)
    if aweights is not None:
        aweights = as_array(aweights)
        w = aweights if w is None else w * aweights
    avg, w_sum = np.average(X, axis=1, weights=w, returned=True)
    w_sum = w_sum[0]
    if w is None:
        fact = np.shape(X)[1] - ddof
    elif ddof == 0:
        fact = w_sum
    elif aweights is None:
        fact = w_sum - ddof
    else:
        fact = w_sum - ddof * np.sum(w * aweights) / w_sum
    X = X - avg[:, None]
    X_T = (X * w).T if w is not None else X.T
    product = X @ (np.conjugate(X_T) if np.iscomplexobj(X_T) else X_T)  # NumPy conjugates complex values
    c = _no_degrees_left(product) if stop_gradient(fact) <= 0 else product / fact
    return _as_float(np.reshape(c, np.shape(plain)), dtype)


@primitive
def _no_degrees_left(product):
    """A covariance with no degree of freedom left: `product` divided by 0, NumPy's inf and NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return product * np.inf


@rrule(_no_degrees_left)
def _no_degrees_left_rule(product):
    return _no_degrees_left(product), lambda g: (_times(g, np.nan),)  # nothing for a cotangent of 0, else NaN


@forward_in_first(_no_degrees_left)
def _no_degrees_left_frule(t, product):
    return _no_degrees_left(product), _times(t, np.nan)


def _as_float(x, dtype):
    if isinstance(x, Traced):
        return x if x.dtype == dtype else x.astype(dtype)
    return np.asarray(x, dtype=dtype)


@composite(np.corrcoef, args="x, y", numpy_value=True, notes="cov scaled by the standard deviations, clipped to [-1, 1] as in NumPy.")
def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    c = cov(x, y, rowvar, dtype=dtype)
    if np.ndim(c) == 0:
        return c / c
    variance = np.real(np.diagonal(c))
    # A constant variable (variance 0) has NaN correlations, as in NumPy, which send no gradient: through its
    # zero standard deviation the others' would get 0 * inf = NaN.
    constant = stop_gradient(variance) == 0
    d = np.sqrt(np.where(constant, 1.0, variance))
    c = c / d[:, None] / d[None, :]
    if holds_foreign_array(constant) or np.any(constant):  # (a Dask array's values are not looked at)
        c = np.where(constant[:, None] | constant[None, :], np.nan, c)
    if np.iscomplexobj(c):  # NumPy clips each part (np.clip would order complex values lexicographically)
        return np.clip(np.real(c), -1.0, 1.0) + 1j * np.clip(np.imag(c), -1.0, 1.0)
    return np.clip(c, -1.0, 1.0)


# --- order statistics: median, percentile, quantile and their NaN-ignoring forms -------------------
def _positions(count, q, method, percent):
    """Where each quantile (percentile if `percent`) lies among `count` sorted values: NumPy's own answer on
    0, 1, ..., count - 1 (for every method one order statistic or a mix of two neighbours), reached as NumPy
    reaches it, in the dtype of `q` (a float32 level is not a float64 one)."""
    return (np.percentile if percent else np.quantile)(np.arange(count, dtype=np.float64), q, method=method)


def _or(option, default):
    """An option as given, or its default where it was left out."""
    return default if option is _NO else option


def _order_statistics(a, q, axis, method, skip_nan, plain, percent=False):
    if size_of(a) == 0:
        return plain  # NaNs (or an empty result): nothing to differentiate
    q = np.asarray(q)
    ndim = np.ndim(a)
    axes = tuple(range(ndim)) if axis is None else tuple(
        k % max(ndim, 1) for k in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    kept = [k for k in range(ndim) if k not in axes]
    moved = np.transpose(a, kept + list(axes))
    rest = tuple(np.shape(a)[k] for k in kept)
    lines = np.reshape(moved, rest + (-1,))
    values = np.sort(lines, axis=-1)  # NaNs sort last
    missing = np.isnan(stop_gradient(lines))
    n = np.shape(lines)[-1]
    counts = np.sum(~missing, axis=-1) if skip_nan else np.full(rest, n)
    if skip_nan and of_another_library(counts):  # each line's positions follow its count: computed, as the order is
        counts = np.asarray(counts)
    # a pb.jit stand-in's distinct counts are read (guarded), and its lines' positions written by recorded calls
    low = zeros_as(counts, rest + (q.size,), np.intp)
    weight = zeros_as(counts, rest + (q.size,), np.float64)
    for c in np.unique(counts):
        if c == 0:
            continue
        at = counts == c
        pos = np.ravel(_positions(int(c), q, method, percent))
        low[at] = np.floor(pos).astype(np.intp)
        weight[at] = pos - np.floor(pos)
    high = np.minimum(low + 1, np.maximum(counts, 1)[..., None] - 1)
    below = np.take_along_axis(values, low, axis=-1)
    # the neighbour above only where it has weight (an infinite one would make inf * 0, NaN, and a warning)
    alone = weight == 0
    above = np.where(alone, 0.0, np.take_along_axis(values, high, axis=-1))
    y = np.where(alone, below, below * (1.0 - weight) + above * weight)
    undefined = counts == 0 if skip_nan else np.any(missing, axis=-1)
    if holds_foreign_array(undefined) or np.any(undefined):  # a Dask array's NaNs are not looked for: that computes
        y = np.where(undefined[..., None], np.nan, y)
    y = np.moveaxis(y, -1, 0)
    shape = np.shape(plain)
    y = np.reshape(y, shape)
    return y if y.dtype == plain.dtype else y.astype(plain.dtype)


def _plain_and_arrangement(numpy_call, a, overwrite_input):
    """NumPy's value of the statistic of `a`, and with overwrite_input=True on a traced NumPy array the arrangement
    NumPy leaves in it (it partially sorts its input in place), found on a copy laid out as `a` is; else None."""
    value = concrete_of(a)
    if not (overwrite_input and isinstance(a, Traced) and type(value) is np.ndarray):
        return numpy_call(stop_gradient(a)), None
    if is_stand_in(plain_of(a)):
        raise TypeError("overwrite_input=True on an array being differentiated under pb.jit: the order NumPy leaves "
                        "in the array depends on its values, which a replay could not follow. Drop overwrite_input "
                        "(the statistic is the same), and sort the array yourself if the code reads it afterwards.")
    scratch = copy_laid_out_as(value)
    plain = numpy_call(scratch, overwrite_input=True)
    return plain, _arrangement(value, scratch)


def _arrangement(before, after):
    """Positions `p` with `after.ravel() == before.ravel()[p]` bit for bit, for `after` holding `before`'s values
    rearranged (the NaN-skipping functions also copy values over NaNs); None where nothing moved. Equal values are
    matched in order, so that a permutation is found as one."""
    old_key, new_key = _bit_keys(before.ravel(), after.ravel())
    count = np.bincount(old_key, minlength=new_key.max(initial=-1) + 1)
    if np.any(count[new_key] == 0):
        raise TypeError("overwrite_input=True: NumPy left values in the array that were not in it, which pullback "
                        "cannot follow. Drop overwrite_input (the statistic is the same).")
    old_order, new_order = np.argsort(old_key, kind="stable"), np.argsort(new_key, kind="stable")
    first = np.cumsum(count) - count  # where each value's run starts in old_order
    keys = new_key[new_order]
    rank = np.arange(keys.size) - np.searchsorted(keys, keys)  # the how-manieth of its value in `after`
    p = np.empty(keys.size, np.intp)
    p[new_order] = old_order[first[keys] + rank % count[keys]]
    return None if np.array_equal(p, np.arange(p.size)) else p


def _bit_keys(old, new):
    """One integer per element of flat arrays `old` and `new`, equal where their bits are (-0.0 is not 0.0)."""
    both = np.concatenate([old, new])
    size = both.itemsize
    bits = both.view(f"u{size}") if size in (1, 2, 4, 8) else both.view(np.uint8).reshape(both.size, size)
    inverse = np.unique(bits, axis=0, return_inverse=True)[1].reshape(-1)
    return inverse[:old.size], inverse[old.size:]


def _rearrange(a, moved):
    """`a[...] = a.flat[moved]`, recorded: a gather of `a`'s own elements, so later reads of `a` keep their gradients."""
    if moved is not None:
        a[...] = np.reshape(np.ravel(a)[moved], np.shape(a))


_ORDER_NOTES = """Every `method` (NumPy's default 'linear' and the ones that select or average order
    statistics); the gradient goes to the order statistics used, as in sort. `q` and `weights=` are
    not differentiated (`weights=` is refused). With `overwrite_input=True` the array is left as NumPy leaves it
    (refused under `pb.jit`)."""


def _quantile_like(name, percent, skip_nan):
    numpy_fn = getattr(np, name)

    def run(a, q, axis=_NO, out=None, overwrite_input=False, method=_NO, keepdims=_NO, *, weights=None,
            interpolation=None):
        if out is not None or weights is not None or interpolation is not None:
            fixes = {"out": f"drop out= and assign the result instead (y = np.{name}(a, q)), or write it into an "
                            f"existing array (z[...] = np.{name}(a, q))",
                     "weights": "compute a weighted one from np.sort of a and np.cumsum of its weights",
                     "interpolation": "pass method= (interpolation='linear' is method='linear')"}
            key = "out" if out is not None else "weights" if weights is not None else "interpolation"
            raise TypeError(f"numpy.{name}: {key}= is not supported on tracked values; {fixes[key]}.")
        if isinstance(q, Traced):
            raise TypeError(f"numpy.{name}: the levels q carry no gradient in pullback; pass them as plain values.")
        given = _given(axis=axis, method=method, keepdims=keepdims)
        plain, moved = _plain_and_arrangement(lambda v, **over: numpy_fn(v, q, **over, **given), a, overwrite_input)
        y = _order_statistics(a, q, _or(axis, None), _or(method, "linear"), skip_nan, plain, percent)
        _rearrange(a, moved)
        return y

    return run


for _name, _percent, _skip in (("quantile", False, False), ("percentile", True, False), ("nanquantile", False, True),
                               ("nanpercentile", True, True)):
    composite(getattr(np, _name), args="a", numpy_value=True, notes=_ORDER_NOTES)(_quantile_like(_name, _percent, _skip))


def _median_like(name, skip_nan):
    numpy_fn = getattr(np, name)

    def run(a, axis=_NO, out=None, overwrite_input=False, keepdims=_NO):
        if out is not None:
            raise TypeError(f"numpy.{name}: out= is not supported on tracked values; drop out= and assign the result "
                            f"instead (y = np.{name}(a)), or write it into an existing array (z[...] = np.{name}(a)).")
        given = _given(axis=axis, keepdims=keepdims)
        plain, moved = _plain_and_arrangement(lambda v, **over: numpy_fn(v, **over, **given), a, overwrite_input)
        y = _order_statistics(a, 0.5, _or(axis, None), "linear", skip_nan, plain)
        _rearrange(a, moved)
        return y

    return run


composite(np.median, args="a", numpy_value=True,
          notes="""The middle element, or the mean of the two middle ones; as in sort. With
          `overwrite_input=True` the array is left as NumPy leaves it (refused under `pb.jit`).""")(
    _median_like("median", False))
composite(np.nanmedian, args="a", numpy_value=True, notes="NaNs are left out; as median.")(
    _median_like("nanmedian", True))
