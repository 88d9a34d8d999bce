"""Rules for reductions: sum, mean, prod, max, min, their aliases and their NaN-ignoring forms (nansum,
nanmax, nanmin, nanprod), in both modes; and
the reductions to a bool or a count (all, any, array_equiv, ...), which carry no gradient."""

import inspect
import math
import operator

import numpy as np

from .._arrays import holds_foreign_array
from .._standins import dtype_of, is_stand_in
from .._tangents import Thunk
from .._values import Traced, stop_gradient
from ._register import (
    add_tangents,
    composite,
    forward_in_first,
    forward_rule,
    linear_forward,
    numpy_valued,
    real_for_dtype,
    rule,
    without_gradient,
)

_NO = np._NoValue


def reduced_axes(axis, ndim):
    """`axis` as a sorted tuple of non-negative axes (None: all of them). NumPy's ufunc reductions take
    axis 0 or -1 of a 0-d array (having checked it), which reduces no axis."""
    if axis is None:
        return tuple(range(ndim))
    if ndim == 0:
        return ()
    if isinstance(axis, (tuple, list)):
        return tuple(sorted(a % ndim for a in axis))
    return (axis % ndim,)


def expand_to(g, shape, axis, keepdims, like=None):
    """Broadcast a reduced cotangent back over the reduced axes of `shape`, the shape of `like` (the input),
    which is needed where Dask does not know the shape (NaN lengths, after x[mask])."""
    if np.shape(g) == shape:  # nothing was reduced (a 0-d input, or no axes)
        return g
    unknown = any(math.isnan(n) for n in shape)  # lengths Dask does not know yet (after x[mask])
    if not keepdims and axis is not None:  # a full reduction's 0-d cotangent broadcasts as it is
        if unknown:  # new axes by indexing: Dask's reshape (and expand_dims) needs the lengths
            reduced = reduced_axes(axis, len(shape))
            g = g[tuple(None if k in reduced else slice(None) for k in range(len(shape)))]
        else:
            g = np.reshape(g, _kept_shape(shape, axis))
    if unknown:  # np.broadcast_to cannot make an unknown length: add to zeros of it
        if like is None:
            raise ValueError(f"The gradient of this reduction needs the shape of its input, {shape}, which Dask does "
                             "not know yet: call x.compute_chunk_sizes() on the input first.")
        return g + np.zeros_like(stop_gradient(like), dtype=np.result_type(g))
    return np.broadcast_to(g, shape)


def keeps_dims(keepdims):
    """Whether a reduction keeps its reduced axes, reading `keepdims` as NumPy's reductions do: as a C
    integer (True, 1, 2, np.int64(1)); np.True_, 1.0 and [1] raise NumPy's TypeError. np._NoValue is
    not given."""
    if keepdims is _NO:
        return False
    value = operator.index(keepdims)
    if not -(2 ** 63) <= value < 2 ** 63:
        raise OverflowError("Python int too large to convert to C long")
    return value != 0


def reduced_size(shape, axis):
    """How many elements a reduction over `axis` combines (a Python int)."""
    n = 1
    for k in reduced_axes(axis, len(shape)):
        n *= shape[k]
    return n


def refuse_out(name, out=None, where=_NO, initial=_NO):
    """Refuse `out=`, `where=` and `initial=` (given as anything but their defaults) on tracked values."""
    if out is not None:
        raise TypeError(f"numpy.{name}: out= is not supported on tracked values; drop out= and assign the result "
                        f"instead (y = np.{name}(...)), or write it into an existing array (z[...] = np.{name}(...)).")
    if (where is not _NO and where is not True) or (initial is not _NO and initial is not None):
        raise TypeError(f"numpy.{name}: where= and initial= are not supported on tracked values; compute the "
                        "plain result and select with np.where instead.")


def _kept_shape(shape, axis):
    axes = reduced_axes(axis, len(shape))
    return tuple(1 if k in axes else n for k, n in enumerate(shape))


_OPTIONS = ("`where=` and `initial=` as in NumPy; a traced `initial` needs a traced array (NumPy hands pullback "
            "the call for its array only).")


def _check_plain(name, out, where=True):
    """Refuse `out=`, and a `where=` that is being differentiated."""
    refuse_out(name, out)
    mask_of(name, where)


def mask_of(name, where):
    """`where=` as a mask (True when not given); refused when it is a value being differentiated."""
    if isinstance(where, Traced):
        raise TypeError(f"numpy.{name}: where= takes a boolean mask, not a value being differentiated.")
    return True if where is _NO else where


def reduce_from(reduce, combine, x, initial, where, identity=None, **options):
    """`reduce(x, initial=initial, where=where, **options)`. An `initial` traced at an outer level (nested
    derivatives) is one NumPy would not take (it dispatches on `x` only): there the reduction from
    `identity` is `combine`d with it, holding NumPy's value."""
    if not isinstance(initial, Traced):
        return reduce(x, **options, **given_options(initial, where))
    plain = reduce(stop_gradient(x), **options, **given_options(stop_gradient(initial), where))
    return numpy_valued(combine(reduce(x, **options, **given_options(identity, where)), initial), plain)


def given_options(initial=None, where=True):
    """`initial=` and `where=` for NumPy, only where given: initial=None would drop a sum's identity,
    and other array libraries (Dask) take neither."""
    options = {} if initial is None else {"initial": initial}
    if where is not True:
        options["where"] = where
    return options


def masked(g, where):
    """`g` where the mask selects, zero elsewhere (the mask broadcasts over `g`): elements left out
    of a reduction get no gradient, also when their slice's result is NaN."""
    return g if where is True else np.where(where, g, 0.0)


def selected_count(where, shape, axis):
    """How many elements of each slice the mask selects (keepdims shape), as an int64 array."""
    return np.sum(np.broadcast_to(where, shape), axis=axis, keepdims=True, dtype=np.int64)


@rule(np.sum, args="a, initial", notes=_OPTIONS)
def sum_rule(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    _check_plain("sum", out, where)
    y = reduce_from(np.sum, np.add, x, initial, where, axis=axis, dtype=dtype, keepdims=keepdims)
    shape = np.shape(x)
    like = _unknown_shape(x)  # kept by the pullback only where Dask does not know the shape
    if initial is None:
        return y, lambda g: (masked(expand_to(g, shape, axis, keepdims, like), where),)
    # initial (position 5) is added once to every result element
    return y, lambda g: (masked(expand_to(g, shape, axis, keepdims, like), where), None, None, None, None, Thunk(np.sum, g))


def _unknown_shape(x):
    """`x` where its shape has lengths Dask does not know yet (NaN), else None: what `expand_to` needs."""
    return x if any(math.isnan(n) for n in np.shape(x)) else None


def forward_in_a_and_initial(*fns):
    """Decorator for the forward rule of reductions differentiable in their first argument and in `initial=`
    (`inner(t, t_initial, *args, **kwargs) -> (y, y_dot)`, either tangent None where it is zero)."""

    def register(inner):
        at = list(inspect.signature(inner).parameters).index("initial") - 2  # after inner's (t, t_initial)

        def forward(primals, tangents, **kwargs):
            if any(t is not None for k, t in enumerate(tangents) if k not in (0, at)):
                raise TypeError(f"numpy.{fns[0].__name__} is differentiable in a and initial only; pass the "
                                "others as plain values (pb.stop_gradient).")
            return inner(tangents[0], tangents[at] if len(tangents) > at else None, *primals, **kwargs)

        forward_rule(*fns)(forward)
        return inner

    return register


@forward_in_a_and_initial(np.sum)
def sum_frule(t, t_initial, x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    y = sum_rule(x, axis, dtype, out, keepdims, initial, where)[0]
    dot = None if t is None else np.sum(real_for_dtype(t, dtype), axis=axis, dtype=dtype, keepdims=keepdims,
                                        **given_options(where=where))
    return y, add_tangents(dot, t_initial)  # initial is added to every result element


@rule(np.mean, args="a", notes="`where=` as in NumPy; an empty slice sends no gradient.")
def mean_rule(x, axis=None, dtype=None, out=None, keepdims=False, where=True):
    _check_plain("mean", out, where=where)
    y = np.mean(x, axis=axis, dtype=dtype, keepdims=keepdims, **given_options(where=where))
    shape = np.shape(x)
    if where is True:
        count = np.prod([shape[k] for k in reduced_axes(axis, len(shape))])
        if math.isnan(count):  # lengths Dask does not know yet (after x[mask]): counted lazily
            count = np.sum(np.ones_like(stop_gradient(x)), axis=axis, keepdims=keepdims)
            return y, lambda g: (expand_to(g / count, shape, axis, keepdims, x),)
        like = _unknown_shape(x)
        return y, lambda g: (expand_to(g / float(count), shape, axis, keepdims, like),)
    # an empty slice's mean is NaN, and no element of it is selected: it sends no gradient
    count = np.maximum(selected_count(where, shape, axis), 1)
    like = _unknown_shape(x)
    return y, lambda g: (masked(expand_to(g, shape, axis, keepdims, like) / count, where),)


linear_forward(np.mean)

_TIES = "Tied extreme elements share the gradient equally (a subgradient), with `initial=` where it ties. " + _OPTIONS


@rule(np.max, np.amax, args="a, initial", notes=_TIES)
def max_rule(x, axis=None, out=None, keepdims=False, initial=None, where=True):
    return _extreme(np.max, x, axis, keepdims, out, initial, where)


@rule(np.min, np.amin, args="a, initial", notes=_TIES)
def min_rule(x, axis=None, out=None, keepdims=False, initial=None, where=True):
    return _extreme(np.min, x, axis, keepdims, out, initial, where)


def _extreme(reduce, x, axis, keepdims, out, initial, where):
    _check_plain(reduce.__name__, out, where)
    kept = _kept_extreme(reduce, x, axis, initial, where)
    keepdims = keeps_dims(keepdims)
    y = kept if keepdims else _dropped(kept, axis)
    if (type(y) is np.ndarray or is_stand_in(y)) and np.ndim(y) == 0:
        y = y[()]  # a NumPy scalar, as NumPy's own reduction returns (recorded under pb.jit)

    def back(g):
        # Ties share the cotangent equally (initial= too, where it ties), so the result is a valid subgradient.
        hit, share = _ties(x, kept, axis, initial, where)
        g = g if keepdims else _kept_again(g, kept, axis)
        if initial is None:
            return (np.where(hit, g / share, 0.0),)
        return (np.where(hit, g / share, 0.0), None, None, None,
                Thunk(lambda: np.sum(np.where(kept == initial, g / share, 0.0))))

    return y, back


def _kept_extreme(reduce, x, axis, initial, where):
    """The extreme of each slice, keepdims-shaped."""
    combine, identity = (np.maximum, -np.inf) if reduce is np.max else (np.minimum, np.inf)
    return reduce_from(reduce, combine, x, initial, where, identity, axis=axis, keepdims=True)


def _ties(x, kept, axis, initial, where):
    """The elements equal to the extreme `kept` (NaNs, where it is NaN), and how many share it in each slice
    (initial= counts as one where it ties; a float count, at least 1, keeps the cotangent's dtype)."""
    hit = x == kept
    if holds_foreign_array(kept) or np.any(np.isnan(kept)):  # NumPy's extreme is the NaN: it takes the gradient
        hit = hit | (np.isnan(x) & np.isnan(kept))
    if where is not True:
        hit = hit & where
    share = np.sum(hit, axis=axis, keepdims=True, dtype=kept.dtype)
    if initial is not None:
        share = share + (kept == initial)
    return hit, share if initial is None and where is True else np.maximum(share, 1)


def _extreme_frule(rule_fn, reduce, *fns):
    @forward_in_a_and_initial(*fns)
    def frule(t, t_initial, x, axis=None, out=None, keepdims=False, initial=None, where=True):
        y = rule_fn(x, axis, out, keepdims, initial, where)[0]
        kept = _kept_extreme(reduce, x, axis, initial, where)
        hit, share = _ties(x, kept, axis, initial, where)  # the tangent splits as the reverse subgradient does
        dot = add_tangents(None if t is None else np.sum(np.where(hit, t, 0.0), axis=axis, keepdims=True),
                           None if t_initial is None else np.where(kept == initial, t_initial, 0.0)) / share
        return y, dot if keeps_dims(keepdims) else np.reshape(dot, np.shape(y))


_extreme_frule(max_rule, np.max, np.max, np.amax)
_extreme_frule(min_rule, np.min, np.min, np.amin)


def _dropped(kept, axis):
    """A keepdims-shaped reduction `kept` without its reduced axes: by reshape, or by indexing where a length
    is unknown until computed (a Dask array's NaN, which its reshape cannot take)."""
    shape = np.shape(kept)
    if all(n == n for n in shape):
        return np.reshape(kept, _reduced_shape(shape, axis))
    axes = reduced_axes(axis, len(shape))
    return kept[tuple(0 if k in axes else slice(None) for k in range(len(shape)))]


def _kept_again(g, kept, axis):
    """`g`, shaped as a reduction without its reduced axes, back in the keepdims shape of `kept`."""
    shape = np.shape(kept)
    if all(n == n for n in shape):
        return np.reshape(g, shape)
    axes = reduced_axes(axis, len(shape))
    return g[tuple(None if k in axes else slice(None) for k in range(len(shape)))]


def _reduced_shape(shape, axis):
    axes = reduced_axes(axis, len(shape))
    return tuple(n for k, n in enumerate(shape) if k not in axes)


@rule(np.prod, args="a, initial", notes="Exact also where the input has zeros, to every order. " + _OPTIONS)
def prod_rule(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    _check_plain("prod", out, where)
    y = reduce_from(np.prod, np.multiply, x, initial, where, axis=axis, dtype=dtype, keepdims=keepdims)
    shape = np.shape(x)

    def back(g):
        factors = x if where is True else np.where(where, x, 1.0)  # unselected elements count as one
        others = product_of_others(factors, axis)
        g_x = expand_to(g, shape, axis, keepdims, x) * (others if initial is None else others * initial)
        if initial is None:
            return (masked(g_x, where),)
        # initial (position 5) multiplies every result element
        return masked(g_x, where), None, None, None, None, Thunk(
            lambda: np.sum(g * np.prod(factors, axis=axis, dtype=dtype, keepdims=keepdims)))

    return y, back


@forward_in_a_and_initial(np.prod)
def prod_frule(t, t_initial, x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    y = prod_rule(x, axis, dtype, out, keepdims, initial, where)[0]
    factors = x if where is True else np.where(where, x, 1.0)
    dot = None
    if t is not None:
        dot = np.sum(masked(t * product_of_others(factors, axis), where), axis=axis, keepdims=keepdims)
        dot = dot if initial is None else dot * initial
    if t_initial is not None:  # initial multiplies every result element
        dot = add_tangents(dot, t_initial * np.prod(factors, axis=axis, dtype=dtype, keepdims=keepdims))
    return y, dot


def product_of_others(x, axis):
    """d prod(x) / d x_i: the product of all the other elements along `axis`, safe when some are zero.

    Away from zeros it is the quotient prod / x_i (0 / x_i in a slice with a zero, which still has
    the right derivatives). At the q-th zero of each slice it is the product that skips that factor,
    one more reduction per zero and no division, so higher derivatives stay exact at zeros too.
    """
    if holds_foreign_array(x):  # a Dask array: no branch on its values, which would compute it
        return _others_by_scans(x, axis)
    zero = x == 0
    whole = np.prod(x, axis=axis, keepdims=True)
    if not np.any(zero):
        if dtype_of(whole).kind in "fc" and not np.all(np.abs(whole) >= np.finfo(dtype_of(whole)).tiny):
            return _others_by_scans(x, axis)  # the product underflowed (or is subnormal): whole / x would lose it
        return whole / x
    others = whole / np.where(zero, 1.0, x)
    rank = _zero_ranks(zero, axis)
    for q in range(1, int(np.max(rank)) + 1):
        at = rank == q
        others = np.where(at, np.prod(np.where(at, 1.0, x), axis=axis, keepdims=True), others)
    return others


def _others_by_scans(x, axis):
    """`product_of_others` without a branch on the values: the product of the elements before each
    one times the product of those after it (scans along each slice), exact at zeros too."""
    shape = np.shape(x)
    reduced = reduced_axes(axis, len(shape))
    order = [k for k in range(len(shape)) if k not in reduced] + list(reduced)
    lines = np.reshape(np.transpose(x, order), [shape[k] for k in order[: len(order) - len(reduced)]] + [-1])
    ones = np.ones_like(lines[..., :1])
    before = np.concatenate([ones, np.cumprod(lines[..., :-1], axis=-1)], axis=-1)
    after = np.flip(np.concatenate([ones, np.cumprod(np.flip(lines, -1)[..., :-1], axis=-1)], axis=-1), -1)
    others = np.reshape(before * after, [shape[k] for k in order])
    return np.transpose(others, tuple(int(k) for k in np.argsort(order)))


def _zero_ranks(zero, axis):
    """1, 2, ... at the first, second, ... True of each slice along `axis`; 0 elsewhere."""
    shape = np.shape(zero)
    reduced = reduced_axes(axis, len(shape))
    order = [k for k in range(len(shape)) if k not in reduced] + list(reduced)
    lines = np.reshape(np.transpose(zero, order), [shape[k] for k in order[: len(order) - len(reduced)]] + [-1])
    ranks = np.cumsum(lines, axis=-1) * lines
    return np.transpose(np.reshape(ranks, [shape[k] for k in order]), np.argsort(order))


@composite(np.nansum, args="a", numpy_value=True, notes="NaNs count as zero and get zero gradient.")
def nansum(a, axis=None, dtype=None, out=None, keepdims=_NO, initial=_NO, where=_NO):
    refuse_out("nansum", out, where, initial)
    return np.sum(np.where(np.isnan(a), 0.0, a), axis=axis, dtype=dtype, keepdims=keeps_dims(keepdims))


without_gradient(np.all, np.any, np.count_nonzero, np.allclose, np.array_equal, np.array_equiv)


def _nan_extreme(numpy_fn, name):
    """The rules of np.nanmax / np.nanmin: NumPy's value; the cotangent shared by the elements equal to it,
    NaNs left out (filled with -inf, a NaN would tie with an infinite maximum and take a share)."""

    def hits(a, y, axis, keep):
        plain = stop_gradient(a)
        hit = (plain == expand_to(stop_gradient(y), np.shape(plain), axis, keep, like=plain)) & ~np.isnan(plain)
        return hit, np.maximum(np.sum(hit, axis=axis, keepdims=True, dtype=dtype_of(plain)), 1)

    @rule(numpy_fn, args="a", notes="NaNs are left out and get zero gradient; ties share it, as in max.")
    def reverse(a, axis=None, out=None, keepdims=_NO, initial=_NO, where=_NO):
        refuse_out(name, out, where, initial)
        keep = keeps_dims(keepdims)
        y = numpy_fn(a, axis=axis, keepdims=keep)

        def back(g):
            hit, share = hits(a, y, axis, keep)
            return (np.where(hit, expand_to(g, np.shape(a), axis, keep, like=a) / share, 0.0),)

        return y, back

    @forward_in_first(numpy_fn)
    def forward(t, a, axis=None, out=None, keepdims=_NO, initial=_NO, where=_NO):
        y = reverse(a, axis, out, keepdims, initial, where)[0]
        keep = keeps_dims(keepdims)
        hit, share = hits(a, y, axis, keep)
        dot = np.sum(np.where(hit, t, 0.0), axis=axis, keepdims=True) / share
        return y, dot if keep else np.reshape(dot, np.shape(y))


_nan_extreme(np.nanmax, "nanmax")
_nan_extreme(np.nanmin, "nanmin")


@composite(np.nanprod, args="a", numpy_value=True, notes="NaNs count as one and get zero gradient.")
def nanprod(a, axis=None, dtype=None, out=None, keepdims=_NO, initial=_NO, where=_NO):
    refuse_out("nanprod", out, where, initial)
    return np.prod(np.where(np.isnan(a), 1.0, a), axis=axis, dtype=dtype, keepdims=keeps_dims(keepdims))
