"""Rules for rearranging and selecting: flip, roll, tile, repeat, pad, split, take, diagonals,
triangles, sort, partition, unique, meshgrid, interp, and the small products kron, inner, vdot,
convolve and correlate.

Most are written with indexing and reshapes (whose rules already exist); the rest have rules
for both modes written with NumPy calls, so every one can be differentiated again. All but
interp and the products are linear, so their forward rule applies the same operation to the
tangent.
"""

import numpy as np

from .._extend import primitive, rrule
from .._tangents import Thunk
from .._trace import Traced, apply, stop_gradient, strip_all
from ._register import add_tangents, composite, forward_rule, linear_forward, private_rule, rule, without_gradient
from .indexing import unindex

_NO = np._NoValue


def _along(axis, ndim, index):
    """An index tuple that applies `index` on `axis` and takes everything elsewhere."""
    return (slice(None),) * (axis % ndim) + (index,)


@rule(np.flip, args="m", view=True)
def flip_rule(m, axis=None):
    return np.flip(m, axis), lambda g: (np.flip(g, axis),)


linear_forward(flip_rule, np.flip)


@rule(np.roll, args="a")
def roll_rule(a, shift, axis=None):
    back_shift = tuple(-s for s in shift) if isinstance(shift, (tuple, list)) else -shift
    return np.roll(a, shift, axis), lambda g: (np.roll(g, back_shift, axis), None)


linear_forward(roll_rule, np.roll)


@rule(np.tile, args="A")
def tile_rule(A, reps):
    y = np.tile(A, reps)
    shape = np.shape(A)
    reps = (reps,) if np.ndim(reps) == 0 else tuple(reps)
    d = max(len(shape), len(reps))
    base = (1,) * (d - len(shape)) + shape
    reps = (1,) * (d - len(reps)) + reps

    def back(g):
        interleaved = tuple(n for pair in zip(reps, base) for n in pair)
        g = np.sum(np.reshape(g, interleaved), axis=tuple(range(0, 2 * d, 2)))
        return (np.reshape(g, shape), None)

    return y, back


linear_forward(tile_rule, np.tile)


@primitive
def segment_sum(g, counts, axis):
    """Sums of consecutive runs of `counts[i]` elements along `axis`: the transpose of `np.repeat`."""
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    shape = list(np.shape(g))
    shape[axis] = len(counts)
    out = np.zeros(shape, dtype=np.result_type(g))
    used = counts > 0
    if np.any(used):
        out[_along(axis, len(shape), used)] = np.add.reduceat(g, starts[used], axis=axis)
    return out


@rrule(segment_sum)
def segment_sum_rule(g, counts, axis):
    return segment_sum(g, counts, axis), lambda dy: (np.repeat(dy, counts, axis), None, None)


linear_forward(segment_sum_rule, segment_sum)


@rule(np.repeat, args="a")
def repeat_rule(a, repeats, axis=None):
    repeats = stop_gradient(repeats)
    y = np.repeat(a, repeats, axis)
    shape = np.shape(a)
    ax = 0 if axis is None else axis % max(len(shape), 1)
    length = np.size(a) if axis is None else shape[ax]
    counts = np.broadcast_to(np.asarray(repeats, dtype=np.intp), (length,))

    def back(g):
        summed = segment_sum(g, counts, ax)
        return (np.reshape(summed, shape) if axis is None else summed, None)

    return y, back


linear_forward(repeat_rule, lambda t, repeats, axis=None: np.repeat(t, stop_gradient(repeats), axis))


@private_rule
def _pad_constant_rule(array, widths, constant_values):
    y = np.pad(array, widths, mode="constant", constant_values=constant_values)
    inner = tuple(slice(int(lo), int(lo) + n) for (lo, _), n in zip(widths, np.shape(array)))
    return y, lambda g: (g[inner], None, None)


linear_forward(_pad_constant_rule, lambda t, widths, constant_values: np.pad(t, widths))  # the constant is fixed


_GATHER_MODES = ("edge", "reflect", "symmetric", "wrap")


@composite(np.pad, args="array", notes="""Modes constant (plain `constant_values`), edge, reflect,
      symmetric and wrap (`reflect_type='even'`). Other modes are refused.""")
def pad(array, pad_width, mode="constant", **kwargs):
    shape = np.shape(array)
    widths = np.broadcast_to(np.asarray(strip_all(pad_width), dtype=np.intp), (len(shape), 2))
    if mode == "constant":
        values = kwargs.pop("constant_values", 0)
        if kwargs or stop_gradient(values) is not values:
            raise TypeError("numpy.pad(mode='constant') on tracked values takes only a plain `constant_values`.")
        return apply(_pad_constant_rule, (array, widths, values))
    if mode in _GATHER_MODES and kwargs.get("reflect_type", "even") == "even" and set(kwargs) <= {"reflect_type"}:
        # Each padded element copies one input element: pad the positions and gather.
        positions = np.pad(np.arange(np.size(array)).reshape(shape), widths, mode=mode)
        return np.reshape(array, (-1,))[positions]
    options = "".join(f", {k}=..." for k in kwargs)
    raise NotImplementedError(
        f"numpy.pad(mode={mode!r}{options}) has no rule on tracked values; supported modes are "
        "'constant', 'edge', 'reflect', 'symmetric' and 'wrap' (reflect_type='even')."
    )


def _pieces(ary, indices_or_sections, axis, splitter):
    """`splitter`'s pieces of `ary`, as slices: NumPy computes the bounds (and raises its errors)."""
    axis = axis % np.ndim(ary)
    bounds = splitter(np.arange(np.shape(ary)[axis]), indices_or_sections)
    head = (slice(None),) * axis
    return [ary[head + (slice(int(b[0]), int(b[0]) + len(b)) if len(b) else slice(0, 0),)] for b in bounds]


@composite(np.split, args="ary", notes="Pieces are slices (views), as in NumPy.")
def split(ary, indices_or_sections, axis=0):
    return _pieces(ary, indices_or_sections, axis, np.split)


@composite(np.array_split, args="ary", notes="Pieces are slices (views), as in NumPy.")
def array_split(ary, indices_or_sections, axis=0):
    return _pieces(ary, indices_or_sections, axis, np.array_split)


@composite(np.hsplit, args="ary")
def hsplit(ary, indices_or_sections):
    if np.ndim(ary) == 0:
        raise ValueError("hsplit only works on arrays of 1 or more dimensions")
    return split(ary, indices_or_sections, 1 if np.ndim(ary) > 1 else 0)


@composite(np.vsplit, args="ary")
def vsplit(ary, indices_or_sections):
    if np.ndim(ary) < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return split(ary, indices_or_sections, 0)


@composite(np.dsplit, args="ary")
def dsplit(ary, indices_or_sections):
    if np.ndim(ary) < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return split(ary, indices_or_sections, 2)


@composite(np.take, args="a", notes="Indexing; repeated indices add up their gradients.")
def take(a, indices, axis=None, out=None, mode="raise"):
    if out is not None:
        raise TypeError("numpy.take(..., out=...) is not supported on tracked values")
    indices = stop_gradient(indices)
    if axis is None:
        a, axis = np.ravel(a), 0
    n = np.shape(a)[axis]
    if mode == "wrap":
        indices = np.mod(indices, n)
    elif mode == "clip":
        indices = np.clip(indices, 0, n - 1)
    return a[_along(axis, np.ndim(a), indices)]


@composite(np.take_along_axis, args="arr", notes="Indexing; repeated indices add up their gradients.")
def take_along_axis(arr, indices, axis=-1):
    indices = stop_gradient(indices)
    if axis is None:
        arr, axis = np.ravel(arr), 0
    ndim = np.ndim(arr)
    axis = axis % ndim
    if np.ndim(indices) != ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    index = tuple(
        indices if k == axis else np.arange(n).reshape((1,) * k + (n,) + (1,) * (ndim - k - 1))
        for k, n in enumerate(np.shape(arr))
    )
    return arr[index]


@primitive
def undiagonal(g, offset, axis1, axis2, shape):
    """Zeros of `shape` with `g`'s last axis written on the diagonal: the transpose of `np.diagonal`."""
    out = np.zeros(shape, dtype=np.result_type(g))
    view = np.moveaxis(out, (axis1, axis2), (-2, -1))
    k = np.arange(np.shape(g)[-1])
    view[..., k + max(-offset, 0), k + max(offset, 0)] = g
    return out


@rrule(undiagonal)
def undiagonal_rule(g, offset, axis1, axis2, shape):
    y = undiagonal(g, offset, axis1, axis2, shape)
    return y, lambda dy: (np.diagonal(dy, offset, axis1, axis2), None, None, None, None)


linear_forward(undiagonal_rule, undiagonal)


@rule(np.diagonal, args="a", view=True)
def diagonal_rule(a, offset=0, axis1=0, axis2=1):
    shape = np.shape(a)
    axis1, axis2 = axis1 % len(shape), axis2 % len(shape)
    y = np.diagonal(a, offset, axis1, axis2)
    return y, lambda g: (undiagonal(g, offset, axis1, axis2, shape), None, None, None)


linear_forward(diagonal_rule, np.diagonal)


@composite(np.linalg.diagonal, args="x", notes="Over the last two axes.")
def linalg_diagonal(x, /, *, offset=0):
    return np.diagonal(x, offset, -2, -1)


@composite(np.diag, args="v", notes="Builds a diagonal matrix from 1-D input, or extracts a diagonal from 2-D input.")
def diag(v, k=0):
    if np.ndim(v) == 1:
        n = np.shape(v)[0] + abs(k)
        return undiagonal(v, k, 0, 1, (n, n))
    if np.ndim(v) == 2:
        return np.diagonal(v, k)
    raise ValueError("Input must be 1- or 2-d.")


@composite(np.diagflat, args="v")
def diagflat(v, k=0):
    return diag(np.ravel(v), k)


@rule(np.triu, args="m")
def triu_rule(m, k=0):
    return np.triu(m, k), lambda g: (np.triu(g, k), None)


linear_forward(triu_rule, np.triu)


@rule(np.tril, args="m")
def tril_rule(m, k=0):
    return np.tril(m, k), lambda g: (np.tril(g, k), None)


linear_forward(tril_rule, np.tril)


@composite(np.sort, args="a", notes="""Each output element takes the gradient of the input element
      it came from; among tied elements one is chosen (a valid one-sided derivative).""")
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        raise TypeError("numpy.sort(order=...) sorts structured arrays, which are never tracked")
    if axis is None:
        a, axis = np.ravel(a), -1
    return take_along_axis(a, np.argsort(stop_gradient(a), axis=axis, kind=kind, stable=stable), axis)


@composite(np.partition, args="a", notes="As `sort`: gradients follow the elements.")
def partition(a, kth, axis=-1, kind="introselect", order=None):
    if order is not None:
        raise TypeError("numpy.partition(order=...) works on structured arrays, which are never tracked")
    if axis is None:
        a, axis = np.ravel(a), -1
    return take_along_axis(a, np.argpartition(stop_gradient(a), kth, axis=axis, kind=kind), axis)


without_gradient(np.argpartition)


@composite(np.unique, args="ar", notes="""Each unique value takes its gradient from its first
      occurrence in `ar` (the first such slice with `axis`); the other copies get none. Moving all
      copies together moves the value by their total, as it should; moving one copy alone splits
      it, and no derivative exists there. Index, inverse and counts are integers.""")
def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *, equal_nan=True,
           sorted=True):
    options = {"equal_nan": equal_nan}
    if sorted is not True:  # only NumPy >= 2.3 knows `sorted`
        options["sorted"] = sorted
    found = np.unique(stop_gradient(ar), True, return_inverse, return_counts, axis, **options)
    first = found[1]
    values = np.take(ar, first, axis=axis)  # ar flattened when axis is None, as np.unique does
    extras = ((first,) if return_index else ()) + tuple(found[2:])
    return (values,) + extras if extras else values


@composite(np.meshgrid, args="*xi")
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    ndim = len(xi)
    shapes = [[1] * ndim for _ in xi]
    for i, shape in enumerate(shapes):
        shape[i] = -1
    if indexing == "xy" and ndim > 1:
        shapes[0][:2], shapes[1][:2] = [1, -1], [-1, 1]
    grids = [np.reshape(x, tuple(shape)) for x, shape in zip(xi, shapes)]
    if not sparse:
        full = np.broadcast_shapes(*(np.shape(g) for g in grids))
        grids = [np.broadcast_to(g, full) for g in grids]
    if copy:
        grids = [np.copy(g) for g in grids]
    return tuple(grids)


@composite(np.interp, args="x, xp, fp, left, right", notes="""Piecewise linear: at a knot the slope
      of the segment to the right is used. `xp` must be strictly increasing with at least two
      points; `period` is not supported.""")
def interp(x, xp, fp, left=None, right=None, period=None):
    if period is not None:
        raise NotImplementedError(
            "numpy.interp(period=...) has no rule on tracked values; map x into one period first."
        )
    xp, fp = (v if isinstance(v, Traced) else np.asarray(v) for v in (xp, fp))
    if np.shape(xp) != np.shape(fp) or np.ndim(xp) != 1 or np.shape(xp)[0] < 2:
        raise ValueError("numpy.interp on tracked values needs 1-D xp and fp of the same length, at least 2.")
    return apply(_interp_rule, (x, xp, fp, left, right))


def _interp_segments(x, xp):
    """For each x: its segment j (xp[j] <= x < xp[j + 1], clipped to the ends) and where it lies."""
    plain_x, plain_xp = stop_gradient(x), stop_gradient(xp)
    n = np.shape(plain_xp)[0]
    j = np.clip(np.searchsorted(plain_xp, plain_x, side="right") - 1, 0, n - 2)
    below, above = plain_x < plain_xp[0], plain_x > plain_xp[-1]
    return j, below, above, ~(below | above)


@private_rule
def _interp_rule(x, xp, fp, left, right):
    y = np.interp(x, xp, fp, left, right)

    def back(g):
        j, below, above, inside = _interp_segments(x, xp)
        n = np.shape(stop_gradient(xp))[0]
        lo_x, hi_x, lo_f, hi_f = xp[j], xp[j + 1], fp[j], fp[j + 1]
        width = hi_x - lo_x
        slope = (hi_f - lo_f) / width
        t = (x - lo_x) / width
        g_in = np.where(inside, g, 0.0)

        def d_fp():
            total = unindex(g_in * (1.0 - t), j, (n,)) + unindex(g_in * t, j + 1, (n,))
            if left is None:
                total = total + unindex(np.where(below, g, 0.0), np.zeros_like(j), (n,))
            if right is None:
                total = total + unindex(np.where(above, g, 0.0), np.full_like(j, n - 1), (n,))
            return total

        def d_xp():
            weight = g_in * slope / width
            return unindex(weight * (x - hi_x), j, (n,)) - unindex(weight * (x - lo_x), j + 1, (n,))

        return (
            Thunk(lambda: g_in * slope),
            Thunk(d_xp),
            Thunk(d_fp),
            None if left is None else Thunk(lambda: np.where(below, g, 0.0)),
            None if right is None else Thunk(lambda: np.where(above, g, 0.0)),
        )

    return y, back


@forward_rule(_interp_rule)
def _interp_frule(primals, tangents):
    (x, xp, fp, left, right), (tx, txp, tfp, tleft, tright) = primals, tangents
    y = np.interp(x, xp, fp, left, right)
    if all(t is None for t in tangents):
        return y, None
    j, below, above, inside = _interp_segments(x, xp)
    n = np.shape(stop_gradient(xp))[0]
    lo_x, hi_x = xp[j], xp[j + 1]
    width = hi_x - lo_x
    slope = (fp[j + 1] - fp[j]) / width
    t = (x - lo_x) / width
    dot = add_tangents(
        None if tx is None else slope * tx,
        None if tfp is None else (1.0 - t) * tfp[j] + t * tfp[j + 1],
        None if txp is None else -slope * ((1.0 - t) * txp[j] + t * txp[j + 1]),
    )
    dot = None if dot is None else np.where(inside, dot, 0.0)
    outside_left = tleft if left is not None else None if tfp is None else tfp[np.zeros_like(j)]
    outside_right = tright if right is not None else None if tfp is None else tfp[np.full_like(j, n - 1)]
    return y, add_tangents(dot, None if outside_left is None else np.where(below, outside_left, 0.0),
                           None if outside_right is None else np.where(above, outside_right, 0.0))


@composite(np.kron, args="a, b", notes="Written as a broadcast product and a reshape.")
def kron(a, b):
    nd = max(np.ndim(a), np.ndim(b))
    sa = (1,) * (nd - np.ndim(a)) + np.shape(a)
    sb = (1,) * (nd - np.ndim(b)) + np.shape(b)
    spread_a = tuple(n for k in sa for n in (k, 1))
    spread_b = tuple(n for k in sb for n in (1, k))
    product = np.reshape(a, spread_a) * np.reshape(b, spread_b)
    return np.reshape(product, tuple(m * n for m, n in zip(sa, sb)))


@composite(np.inner, args="a, b", notes="`np.tensordot` over the last axes.")
def inner(a, b):
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return a * b
    return np.tensordot(a, b, axes=([-1], [-1]))


@composite(np.vdot, args="a, b", notes="Real arrays only (complex values are refused by pullback).")
def vdot(a, b):
    if np.size(a) != np.size(b):
        raise ValueError("cannot reshape array: vdot needs arrays of the same size")
    return np.sum(np.ravel(a) * np.ravel(b))


@primitive
def convolve_full(a, v):
    """`np.convolve(a, v, 'full')` for 1-D arrays, as a primitive whose rule uses itself."""
    return np.convolve(a, v, "full")


@rrule(convolve_full)
def convolve_full_rule(a, v):
    na, nv = np.shape(a)[0], np.shape(v)[0]
    y = convolve_full(a, v)

    def back(g):
        return (
            Thunk(lambda: convolve_full(g, np.flip(v))[nv - 1:nv - 1 + na]),
            Thunk(lambda: convolve_full(g, np.flip(a))[na - 1:na - 1 + nv]),
        )

    return y, back


@forward_rule(convolve_full_rule)
def convolve_full_frule(primals, tangents):
    (a, v), (ta, tv) = primals, tangents
    return convolve_full(a, v), add_tangents(None if ta is None else convolve_full(ta, v),
                                             None if tv is None else convolve_full(a, tv))


def _mode_window(full, m, n, mode, flipped):
    short = min(m, n)
    if mode == "full":
        return full
    if mode == "valid":
        start, length = short - 1, max(m, n) - short + 1
    elif mode == "same":
        start = short // 2 if flipped and n > m else short - 1 - short // 2
        length = max(m, n)
    else:
        raise ValueError(f"mode must be one of 'valid', 'same' or 'full' (got {mode!r})")
    return full[start:start + length]


def _check_1d(a, v):
    a, v = np.atleast_1d(a), np.atleast_1d(v)
    if np.ndim(a) != 1 or np.ndim(v) != 1:
        raise ValueError("object too deep for desired array: convolve and correlate take 1-D arrays")
    if np.size(a) == 0 or np.size(v) == 0:
        raise ValueError("convolve and correlate need non-empty arrays")
    return a, v


@composite(np.convolve, args="a, v", notes="1-D, all three modes.")
def convolve(a, v, mode="full"):
    a, v = _check_1d(a, v)
    return _mode_window(convolve_full(a, v), np.shape(a)[0], np.shape(v)[0], mode, False)


@composite(np.correlate, args="a, v", notes="1-D, all three modes; real arrays (no conjugation needed).")
def correlate(a, v, mode="valid"):
    a, v = _check_1d(a, v)
    return _mode_window(convolve_full(a, np.flip(v)), np.shape(a)[0], np.shape(v)[0], mode, True)
