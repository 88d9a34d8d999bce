"""Rules for array manipulation, in both modes: reshaping, transposing, joining (also append,
column_stack, dstack, block), splitting, flipping, rotating, rolling, tiling, repeating, padding,
deleting, inserting, resizing, trimming, copying and casting arrays, meshgrid, and the
`*_like` constructors; and the properties of an array (shape, size, ...), which carry no gradient.

All of these are linear, so each forward rule applies the same operation to the tangent.
"""

import numpy as np

from .._arrays import axis_index, like_input, size_of, speaks_nep18, type_name, values_deciding_shape, zeros_as
from .._compat import PAD_TAKES_A_DICT
from .._extend import primitive, rrule
from .._inplace import concrete_of, holds_array, plain_of, write_out
from .._registry import FUNCTIONS
from .._standins import astype, dtype_of, is_stand_in, is_traced
from .._values import Dual, Traced, stop_gradient, strip_all
from ._register import composite, describe, forward_rule, linear_forward, rule, without_gradient, zeros_if_none

_NO = np._NoValue



@rule(np.reshape, args="a", view=True)
def reshape_rule(x, shape=None, order="C", *, newshape=None, copy=None):
    shape = newshape if shape is None else shape
    copying = {} if copy is None else {"copy": copy}  # a copy is no view; copy=False may refuse, as in NumPy
    if order == "C":  # the default, spelled out only when not (Dask's reshape takes no order)
        y, old = np.reshape(x, shape, **copying), np.shape(x)
        return y, lambda g: (np.reshape(g, old),)
    y = np.reshape(x, shape, order=order, **copying)
    old, order = np.shape(x), _index_order(x, order)
    return y, lambda g: (np.reshape(g, old, order=order),)


@rule(np.ravel, args="a", view=True)
def ravel_rule(x, order="C"):
    if order == "C":  # as in reshape_rule
        y, old = np.ravel(x), np.shape(x)
        return y, lambda g: (np.reshape(g, old),)
    y = np.ravel(x, order=order)
    old, order = np.shape(x), _index_order(x, order)
    if order == "K":
        place = _memory_order_positions(x)
        return y, lambda g: (np.reshape(_unpermute(g, place), old),)
    return y, lambda g: (np.reshape(g, old, order=order),)


def _index_order(x, order):
    """The index order ("C" or "F") that `order` "A" or "K" reads `x` in, where one does; "K" for a
    layout that is neither. (NumPy's "A" and "K" follow the memory layout; the cotangent does not
    have it, so the backward pass needs the order spelled out.)"""
    order = str(order).upper()
    if order not in ("A", "K"):
        return order
    flags = getattr(x, "flags", None)
    if flags is None or flags.c_contiguous:
        return "C"
    if flags.f_contiguous:
        return "F"
    return "C" if order == "A" else "K"


def _memory_order_positions(x):
    """For each element of `np.ravel(x, order="K")`, its position in C order: NumPy visits the axes
    by decreasing stride size, and leaves axes of stride 0 (broadcast) where they are."""
    strides = [abs(s) if n > 1 else None for s, n in zip(x.strides, x.shape)]
    movable = [k for k, s in enumerate(strides) if s]  # length-1 and broadcast axes keep their places
    by_stride = iter(sorted(movable, key=lambda k: -strides[k]))
    axes = [next(by_stride) if k in movable else k for k in range(x.ndim)]
    return np.transpose(np.arange(x.size).reshape(x.shape), axes).ravel()


def _unpermute(g, place):
    """The cotangent `g` of `x.ravel("K")` in C order: element k of g belongs at `place[k]`."""
    out = np.zeros_like(g)
    out[place] = g
    return out


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
    if all(n == n for n in old):
        return np.squeeze(x, axis), lambda g: (np.reshape(g, old),)
    # a Dask array of lengths unknown until computed (NaN), which Dask cannot reshape: new axes put back by indexing
    gone = [k for k, n in enumerate(old) if n == 1] if axis is None else [axis_index(a, len(old)) for a in np.atleast_1d(axis)]
    back = tuple(None if k in gone else slice(None) for k in range(len(old)))
    return np.squeeze(x, axis), lambda g: (g[back],)


@rule(np.broadcast_to, args="array", view=True)
def broadcast_to_rule(x, shape, subok=False):
    # The engine sums the cotangent back down to x's shape.
    return np.broadcast_to(x, shape), lambda g: (g,)


for _fn in (np.transpose, np.swapaxes, np.moveaxis, np.expand_dims, np.squeeze, np.broadcast_to):
    linear_forward(_fn)
# The tangent as the value is computed, order="C" left out (Dask's reshape and ravel take no order).
linear_forward(np.reshape, lambda t, *args, **kwargs: reshape_rule(t, *args, **kwargs)[0])
linear_forward(np.ravel, lambda t, *args, **kwargs: ravel_rule(t, *args, **kwargs)[0])


# --- sliding windows: a read-only view whose windows overlap ------------------------------------
def _window_axes(window_shape, axis, ndim):
    """`(window_shape, axis)` of `sliding_window_view` as tuples of equal length (`axis` normalised)."""
    window_shape = tuple(window_shape) if np.iterable(window_shape) else (window_shape,)
    if axis is None:
        return window_shape, tuple(range(ndim))
    axis = tuple(axis) if np.iterable(axis) else (axis,)
    return window_shape, tuple(axis_index(a, ndim) for a in axis)


def _window_slot(offsets, shape, window_shape, axis):
    """The slice of an array of `shape` that the windows' elements at `offsets` (one per window axis) show."""
    starts = [0] * len(shape)
    for offset, a in zip(offsets, axis):
        starts[a] += offset
    trimmed = list(shape)
    for n, a in zip(window_shape, axis):
        trimmed[a] -= n - 1
    return tuple(slice(start, start + n) for start, n in zip(starts, trimmed))


@primitive
def unwindow(g, shape, window_shape, axis):
    """Zeros of `shape` with each window of `g` added where it was taken: the transpose of
    `sliding_window_view`, one slice added per position in the window."""
    out = zeros_as(g, shape)
    for offsets in np.ndindex(*window_shape):
        out[_window_slot(offsets, shape, window_shape, axis)] += g[(Ellipsis, *offsets)]
    return out


@rrule(unwindow)
def _unwindow_rule(g, shape, window_shape, axis):
    back = lambda dy: (np.lib.stride_tricks.sliding_window_view(dy, window_shape, axis), None, None, None)  # noqa: E731
    return unwindow(g, shape, window_shape, axis), back


linear_forward(unwindow)


@rule(np.lib.stride_tricks.sliding_window_view, args="x", view=True, notes="""A view, read-only unless
      `writeable=True`, as in NumPy; the gradient adds up each element's share from every window it is in. A write
      through writeable windows writes each element of the array once; two values for one element are refused.""")
def sliding_window_view_rule(x, window_shape, axis=None, *, subok=False, writeable=False):
    y = np.lib.stride_tricks.sliding_window_view(x, window_shape, axis, subok=subok, writeable=writeable)
    shape = np.shape(x)
    window_shape, axis = _window_axes(window_shape, axis, len(shape))
    return y, lambda g: (unwindow(g, shape, window_shape, axis), None, None)


linear_forward(np.lib.stride_tricks.sliding_window_view)


def _atleast(fn):
    def run(*arrays):
        results = [FUNCTIONS[np.reshape](a, fn(np.empty(np.shape(a), dtype=bool)).shape) for a in arrays]
        return results[0] if len(results) == 1 else tuple(results)

    return run


for _fn in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
    composite(_fn, args="*arys", notes="A reshape of each array.")(_atleast(_fn))


@rule(np.copy, args="a")
def copy_rule(x, order="K", subok=False):
    if speaks_nep18(type(x)) and not is_stand_in(x):  # Dask has no np.copy (NumPy's fallback would compute);
        return x.copy(), lambda g: (g,)  # every array has .copy() (pb.jit's stand-ins take np.copy: its layout)
    return np.copy(x, order=order), lambda g: (g,)


linear_forward(np.copy, lambda t, *args, **kwargs: copy_rule(t, *args, **kwargs)[0])  # as copy_rule copies Dask's


@rule(astype, args="x", notes="To another float dtype; the gradient comes back in x's dtype.")
def astype_rule(x, dtype):
    # The engine casts the cotangent back to x's dtype.
    return astype(x, dtype), lambda g: (g,)


linear_forward(astype)


# --- joining and splitting ---------------------------------------------------------------------
@primitive
def join(*arrays, axis=0):
    """`np.concatenate(arrays, axis)`, with each array a positional argument (so each is tracked)."""
    if axis is None:
        return np.concatenate([np.ravel(a) for a in arrays])
    return np.concatenate(arrays, axis=axis)


@rrule(join)
def _concatenate_rule(*arrays, axis=0):
    if axis is None:
        shapes = [np.shape(a) for a in arrays]
        y = np.concatenate([np.ravel(a) for a in arrays])
        sizes = [size_of(a) if all(n == n for n in s) else np.nan for a, s in zip(arrays, shapes)]
    else:
        y = np.concatenate(arrays, axis=axis)
        shapes = [np.shape(a) for a in arrays]
        sizes = [s[axis] for s in shapes]
    ax = 0 if axis is None else axis % np.ndim(y)
    if any(n != n for n in sizes):  # a Dask array of unknown length (after x[mask]): split g block by block
        return y, _split_by_blocks(arrays, ax, axis, y)
    bounds = np.cumsum([0] + sizes)

    def back(g):
        parts = []
        for k, shape in enumerate(shapes):
            part = g[(slice(None),) * ax + (slice(int(bounds[k]), int(bounds[k + 1])),)]
            parts.append(np.reshape(part, shape) if axis is None else part)
        return tuple(parts)

    return y, back


def _split_by_blocks(arrays, ax, axis, y):
    """The pullback of a Dask concatenation of parts of unknown length: each part's gradient is the blocks
    of `g` its own blocks became, which needs `g` in `y`'s blocks along the axis (as elementwise code
    and reductions leave it)."""
    as_dask = [np.asarray(np.ravel(a) if axis is None else a, like=y) for a in arrays]  # as Dask joins NumPy parts
    counts = [a.numblocks[0 if axis is None else ax] for a in as_dask]
    ends = np.cumsum(counts)

    def back(g):
        if not hasattr(g, "blocks") or g.numblocks[ax] != y.numblocks[ax]:
            raise ValueError(
                f"The gradient of np.concatenate of {type_name(y)}s of unknown length along axis {ax} (after "
                "x[mask]) can be split only block by block, and its gradient came in other blocks: call "
                "x.compute_chunk_sizes() on the masked arrays first.")
        parts = []
        for a, end, n in zip(arrays, ends, counts):
            part = g.blocks[(slice(None),) * ax + (slice(int(end - n), int(end)),)]
            parts.append(np.reshape(part, np.shape(a)) if axis is None and np.ndim(a) != 1 else part)
        return tuple(parts)

    return back


@forward_rule(join)
def _concatenate_frule(primals, tangents, axis=0):
    y = _concatenate_rule(*primals, axis=axis)[0]
    if all(t is None for t in tangents):
        return y, None
    parts = [zeros_if_none(t, p) for t, p in zip(tangents, primals)]
    return y, np.concatenate(parts, axis=axis) if axis is not None else np.concatenate([np.ravel(p) for p in parts])


@composite(np.concatenate, args="arrays")
def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    if out is not None:
        return _joined_into(np.concatenate, join, arrays, axis, out, dtype, casting)
    _check_casting(arrays, dtype, casting)
    return join(*_each_cast(arrays, dtype), axis=axis)


@primitive
def stack_along(*arrays, axis=0):
    """`np.stack(arrays, axis)`, with each array a positional argument (so each is tracked)."""
    return np.stack(arrays, axis=axis)


@rrule(stack_along)
def _stack_rule(*arrays, axis=0):
    y = stack_along(*arrays, axis=axis)
    ax = axis % np.ndim(y)
    return y, lambda g: tuple(g[(slice(None),) * ax + (k,)] for k in range(len(arrays)))


@forward_rule(stack_along)
def _stack_frule(primals, tangents, axis=0):
    y = stack_along(*primals, axis=axis)
    if all(t is None for t in tangents):
        return y, None
    return y, np.stack([zeros_if_none(t, p) for t, p in zip(tangents, primals)], axis=axis)


@composite(np.stack, args="arrays")
def stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    if out is not None:
        return _joined_into(np.stack, stack_along, arrays, axis, out, dtype, casting)
    _check_casting(arrays, dtype, casting)
    return stack_along(*_each_cast(arrays, dtype), axis=axis)


def _each_cast(arrays, dtype):
    """`arrays`, each cast to `dtype` (once, as NumPy casts them: joined first in their common type, an int64
    beside a float32 would round to float64 and then again to float32)."""
    if dtype is None:
        return arrays
    return [FUNCTIONS[astype](a, dtype) if isinstance(a, Traced) or is_stand_in(a)
            else (a if hasattr(a, "astype") else np.asarray(a)).astype(dtype) for a in arrays]  # (Dask's: lazily)


def _check_casting(arrays, dtype, casting):
    """NumPy's error where it refuses to cast the joined arrays (to `dtype`, or to their common type) under `casting`."""
    if dtype is not None or casting != "same_kind":
        plain = [strip_all(a) for a in arrays]
        dtypes = [p.dtype if hasattr(p, "dtype") else np.asarray(p).dtype for p in plain]
        np.concatenate([np.empty(0, d) for d in dtypes], dtype=dtype, casting=casting)


def _joined_into(numpy_join, traced_join, arrays, axis, out, dtype, casting):
    """`numpy_join(arrays, axis, out=out, ...)` on traced values: the join computed, then written into
    `out` (NumPy's own error where it refuses `out`, or `out` together with `dtype`)."""
    plain_arrays = [plain_of(a) for a in arrays]
    call = lambda buffer: numpy_join(plain_arrays, axis, buffer, dtype=dtype, casting=casting)  # noqa: E731
    if dtype is not None:
        call(np.empty(np.shape(plain_of(out)), np.result_type(plain_of(out))))
    if is_traced(out) and _reads_memory_of(arrays, out):  # NumPy copies part by part: later parts read earlier writes
        numpy_join([concrete_of(a) for a in arrays], axis, np.empty_like(concrete_of(out)),
                   casting=casting)  # NumPy's errors for this out=, on the values it has now
        for part, slot in zip(arrays, _slots_of_parts(numpy_join, arrays, axis, np.ndim(out))):
            out[slot] = part if axis is not None else np.ravel(part)
        return out
    return write_out(f"numpy.{numpy_join.__name__}", out, traced_join(*arrays, axis=axis), call)


def _reads_memory_of(arrays, out):
    """Whether one of `arrays` may share memory with `out` (a view of it, or `out` itself)."""
    target = concrete_of(out)
    return any(isinstance(concrete_of(a), np.ndarray) and np.may_share_memory(concrete_of(a), target) for a in arrays)


def _slots_of_parts(numpy_join, arrays, axis, ndim):
    """The index of `out` that each of `arrays` fills in `numpy_join(arrays, axis, out=out)`."""
    if numpy_join is np.stack:
        ax = axis_index(axis, ndim)
        return [(slice(None),) * ax + (k,) for k in range(len(arrays))]
    if axis is None:  # the parts flattened, one after another
        ax, lengths = 0, [size_of(a) for a in arrays]
        reshape = True
    else:
        ax, reshape = axis_index(axis, ndim), False
        lengths = [np.shape(a)[ax] for a in arrays]
    ends = np.cumsum(lengths)
    return [(slice(None),) * ax + (slice(int(end - n), int(end)),) if not reshape else slice(int(end - n), int(end))
            for n, end in zip(lengths, ends)]


@composite(np.vstack, args="tup")
def vstack(tup, *, dtype=None, casting="same_kind"):
    return concatenate([np.atleast_2d(a) for a in tup], axis=0, dtype=dtype, casting=casting)


@composite(np.hstack, args="tup")
def hstack(tup, *, dtype=None, casting="same_kind"):
    arrays = [np.atleast_1d(a) for a in tup]
    return concatenate(arrays, axis=0 if np.ndim(arrays[0]) == 1 else 1, dtype=dtype, casting=casting)


def _pieces(ary, indices_or_sections, axis, splitter):
    """`splitter`'s pieces of `ary`, as slices: NumPy computes the bounds (and raises its errors)."""
    axis = axis_index(axis, np.ndim(ary))
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


# --- flipping, rolling, tiling, repeating and padding ------------------------------------------
def _along(axis, ndim, index):
    """An index tuple that applies `index` on `axis` and takes everything elsewhere."""
    return (slice(None),) * (axis % ndim) + (index,)


@rule(np.flip, args="m", view=True)
def flip_rule(m, axis=None):
    return np.flip(m, axis), lambda g: (np.flip(g, axis),)


linear_forward(np.flip)


@rule(np.roll, args="a")
def roll_rule(a, shift, axis=None):
    back_shift = tuple(-s for s in shift) if isinstance(shift, (tuple, list)) else -shift
    return np.roll(a, shift, axis), lambda g: (np.roll(g, back_shift, axis), None)


linear_forward(np.roll)


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


linear_forward(np.tile)


@primitive
def segment_sum(g, counts, axis):
    """Sums of consecutive runs of `counts[i]` elements along `axis`: the transpose of `np.repeat`."""
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    shape = list(np.shape(g))
    shape[axis] = len(counts)
    out = zeros_as(g, shape)
    if type(out) is not np.ndarray:  # Dask has no ufunc.reduceat: a product with the 0/1 matrix of the runs
        runs = np.repeat(np.arange(len(counts)), counts)
        ones = like_input((np.arange(len(counts))[:, None] == runs[None, :]).astype(np.result_type(g)), g)
        return np.moveaxis(np.tensordot(ones, g, axes=([1], [axis])), 0, axis)
    used = counts > 0
    if np.any(used):
        out[_along(axis, len(shape), used)] = np.add.reduceat(g, starts[used], axis=axis)
    return out


@rrule(segment_sum)
def segment_sum_rule(g, counts, axis):
    return segment_sum(g, counts, axis), lambda dy: (np.repeat(dy, counts, axis), None, None)


linear_forward(segment_sum)


@rule(np.repeat, args="a")
def repeat_rule(a, repeats, axis=None):
    repeats = stop_gradient(repeats)
    y = np.repeat(a, repeats, axis)
    repeats = values_deciding_shape(repeats, np.intp)
    shape = np.shape(a)
    ax = 0 if axis is None else axis % max(len(shape), 1)
    length = size_of(a) if axis is None else shape[ax]
    counts = np.broadcast_to(repeats, (length,))

    def back(g):
        summed = segment_sum(g, counts, ax)
        return (np.reshape(summed, shape) if axis is None else summed, None)

    return y, back


linear_forward(np.repeat, lambda t, repeats, axis=None: np.repeat(t, stop_gradient(repeats), axis))


@primitive
def pad_constant(array, widths, constant_values):
    """`np.pad(array, widths, constant_values=constant_values)`: the padded margin is the constant."""
    return np.pad(array, widths, mode="constant", constant_values=constant_values)


@rrule(pad_constant)
def _pad_constant_rule(array, widths, constant_values):
    y = pad_constant(array, widths, constant_values)
    inner = tuple(slice(int(lo), int(lo) + n) for (lo, _), n in zip(widths, np.shape(array)))
    return y, lambda g: (g[inner], None, None)


linear_forward(pad_constant, lambda t, widths, constant_values: np.pad(t, widths))  # the constant is fixed


_GATHER_MODES = ("edge", "reflect", "symmetric", "wrap")


def gather_flat(a, positions):
    """`np.ravel(a)[positions]` for an integer array `positions` of any shape (Dask gathers along one axis only)."""
    flat = np.reshape(a, (-1,))
    if np.ndim(positions) == 1:
        return flat[positions]
    return np.reshape(flat[np.reshape(positions, (-1,))], np.shape(positions))


@composite(np.pad, args="array", notes="""Modes constant (plain `constant_values`), edge, reflect,
      symmetric and wrap (`reflect_type='even'`). Other modes are refused.""")
def pad(array, pad_width, mode="constant", **kwargs):
    shape = np.shape(array)
    if shape == ():  # NumPy gives a copy of a 0-d array, whatever the widths and the mode
        np.pad(np.zeros((), np.result_type(stop_gradient(array))), strip_all(pad_width), mode, **strip_all(kwargs))
        return np.copy(array)
    widths = _pad_widths(strip_all(pad_width), len(shape))
    if isinstance(mode, str):  # NumPy's errors for a mode it does not know, or options another mode takes
        if mode not in _PAD_OPTIONS:
            raise ValueError(f"mode '{mode}' is not supported")
        unsupported = set(kwargs) - set(_PAD_OPTIONS[mode])
        if unsupported:
            raise ValueError(f"unsupported keyword arguments for mode '{mode}': {unsupported}")
    if mode == "constant":
        values = kwargs.pop("constant_values", 0)
        if kwargs or stop_gradient(values) is not values:
            raise TypeError("numpy.pad(mode='constant') on tracked values takes only a plain `constant_values`.")
        return pad_constant(array, tuple(map(tuple, widths.tolist())), values)  # Dask's pad takes Python ints
    if mode in _GATHER_MODES and kwargs.get("reflect_type", "even") == "even" and set(kwargs) <= {"reflect_type"}:
        # Each padded element copies one input element: pad the positions and gather.
        positions = np.pad(np.arange(size_of(array)).reshape(shape), widths, mode=mode)
        return gather_flat(array, positions)
    options = "".join(f", {k}=..." for k in kwargs)
    raise NotImplementedError(
        f"numpy.pad(mode={mode!r}{options}) has no rule on tracked values; supported modes are "
        "'constant', 'edge', 'reflect', 'symmetric' and 'wrap' (reflect_type='even')."
    )



# np.pad's modes and the options each takes
_PAD_OPTIONS = {"constant": ("constant_values",), "edge": (), "empty": (), "linear_ramp": ("end_values",),
                "maximum": ("stat_length",), "mean": ("stat_length",), "median": ("stat_length",),
                "minimum": ("stat_length",), "reflect": ("reflect_type",), "symmetric": ("reflect_type",), "wrap": ()}


def _pad_widths(pad_width, ndim):
    """`pad_width` as an `(ndim, 2)` array of (before, after), checked as `np.pad` checks it (a dict
    maps axes to widths, as in NumPy 2.3 and later; NumPy 2.2 refuses it as a width that is not an integer)."""
    if isinstance(pad_width, dict) and PAD_TAKES_A_DICT:
        widths = np.zeros((ndim, 2), dtype=np.intp)
        for axis, width in pad_width.items():
            widths[axis_index(axis, ndim)] = _pad_widths(width, 1)[0]
        return widths
    given = np.asarray(pad_width)
    if given.dtype.kind != "i":  # as NumPy: unsigned and empty (float) widths too
        raise TypeError("`pad_width` must be of integral type.")
    if np.any(given < 0):
        raise ValueError("index can't contain negative values")
    return np.broadcast_to(given.astype(np.intp), (ndim, 2))


# --- more joining, rotating and rearranging, as compositions of the above --------------------
@composite(np.append, args="arr, values", notes="Flattens both when `axis` is None, as NumPy does.")
def append(arr, values, axis=None):
    if axis is None:
        return join(np.ravel(arr), np.ravel(values))
    return join(arr, values, axis=axis)


@composite(np.column_stack, args="tup")
def column_stack(tup):
    columns = [a if np.ndim(a) >= 2 else np.reshape(a, (-1, 1)) for a in tup]
    return join(*columns, axis=1)


@composite(np.dstack, args="tup")
def dstack(tup):
    return join(*[np.atleast_3d(a) for a in tup], axis=2)


def _block_depth(arrays):
    depth, part = 0, arrays
    while type(part) is list:
        if not part:
            return depth + 1
        depth, part = depth + 1, part[0]
    return depth


def _block_join(arrays, depth, ndim):
    if type(arrays) is not list:
        return np.reshape(arrays, (1,) * (ndim - np.ndim(arrays)) + np.shape(arrays))
    parts = [_block_join(a, depth - 1, ndim) for a in arrays]
    return join(*parts, axis=-depth)


@composite(np.block, args="arrays", notes="Nested lists of arrays, joined innermost list along the last axis.")
def block(arrays):
    expected = np.block(strip_all(arrays))  # NumPy checks the nesting and the shapes
    depth = _block_depth(arrays)
    y = _block_join(arrays, depth, max(np.ndim(expected), depth))
    return np.reshape(y, np.shape(expected))


@rule(np.flipud, args="m", view=True)
def flipud_rule(m):
    if np.ndim(m) < 1:
        raise ValueError("Input must be >= 1-d.")
    return np.flip(m, 0), lambda g: (np.flip(g, 0),)


@rule(np.fliplr, args="m", view=True)
def fliplr_rule(m):
    if np.ndim(m) < 2:
        raise ValueError("Input must be >= 2-d.")
    return np.flip(m, 1), lambda g: (np.flip(g, 1),)


linear_forward(np.flipud, lambda t: np.flip(t, 0))
linear_forward(np.fliplr, lambda t: np.flip(t, 1))


@composite(np.rot90, args="m", notes="Any `k` and `axes`; flips and a transpose, views as in NumPy.")
def rot90(m, k=1, axes=(0, 1)):
    np.rot90(np.empty(np.shape(m), dtype=bool), k, axes)  # NumPy checks the axes
    ndim = np.ndim(m)
    first, second = (a % ndim for a in axes)
    k %= 4
    if k == 0:
        return m[...]
    if k == 2:
        return np.flip(np.flip(m, first), second)
    order = list(range(ndim))
    order[first], order[second] = order[second], order[first]
    if k == 1:
        return np.transpose(np.flip(m, second), order)
    return np.flip(np.transpose(m, order), second)


@composite(np.rollaxis, args="a", notes="A transpose (a view), as in NumPy.")
def rollaxis(a, axis, start=0):
    ndim = np.ndim(a)
    np.rollaxis(np.empty((0,) * ndim), axis, start)  # NumPy checks the axes
    axis %= ndim
    start = start + ndim if start < 0 else start
    if axis < start:
        start -= 1
    if axis == start:
        return a[...]
    order = [k for k in range(ndim) if k != axis]
    order.insert(start, axis)
    return np.transpose(a, order)


def _matrix_transpose(x):
    if np.ndim(x) < 2:
        raise ValueError(f"Input array must be at least 2-dimensional, but it is {np.ndim(x)}")
    return np.swapaxes(x, -1, -2)


composite(np.matrix_transpose, np.linalg.matrix_transpose, args="x", notes="Swaps the last two axes (a view).")(
    _matrix_transpose)


@composite(np.unstack, args="x", notes="Each piece is a view, as in NumPy.")
def unstack(x, /, *, axis=0):
    if np.ndim(x) == 0:
        raise ValueError("Input array must be at least 1-d.")
    moved = np.moveaxis(x, axis, 0)
    return tuple(moved[k] for k in range(np.shape(moved)[0]))


@composite(np.broadcast_arrays, args="*args", notes="Each result is `np.broadcast_to` of its argument.")
def broadcast_arrays(*args, subok=False):
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    # (an array of that shape as it is; anything else, a number too, as the array NumPy makes of it)
    return tuple(a if np.shape(a) == shape and isinstance(a, Traced) and holds_array(a) else np.broadcast_to(a, shape)
                 for a in args)


def _labels(shape):
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.intp).reshape(shape)


@composite(np.delete, args="arr", notes="A gather of the elements kept.")
def delete(arr, obj, axis=None):
    kept = np.delete(_labels(np.shape(arr)), stop_gradient(obj), axis)
    return np.reshape(arr, (-1,))[kept]


@composite(np.insert, args="arr, values", notes="""A gather from `arr` and `values` (cast to
           `arr`'s dtype, as NumPy casts them).""")
def insert(arr, obj, values, axis=None):
    plain = np.insert(stop_gradient(arr), stop_gradient(obj), stop_gradient(values), axis)
    if plain.dtype.kind == "O" and np.result_type(plain_of(arr)).kind in "fc":  # Dask inserts a list of values so
        raise TypeError(f"np.insert of {type(values).__name__} values into a {type_name(plain_of(arr))} gives "
                        "an object array, which cannot be differentiated: pass float values as an array of arr's "
                        "type (da.asarray(values) for a Dask arr) or as one number")
    if plain.dtype.kind not in "fc":
        return plain
    sources = _labels(np.shape(arr))
    value_labels = -1 - _labels(np.shape(values))
    positions = np.insert(sources, stop_gradient(obj), value_labels, axis)
    if not isinstance(values, Traced):
        values = np.asarray(values, dtype=plain.dtype)
    elif values.dtype != plain.dtype:
        values = FUNCTIONS[astype](values, plain.dtype)
    pool = join(np.reshape(arr, (-1,)), np.reshape(values, (-1,)))
    return pool[np.where(positions >= 0, positions, np.size(sources) - 1 - positions)]


@composite(np.resize, args="a", notes="A gather: the flattened input repeated cyclically.")
def resize(a, new_shape):
    positions = np.resize(_labels(np.shape(a)), new_shape)
    if size_of(a) == 0:
        return np.resize(stop_gradient(a), new_shape)  # zeros: nothing to differentiate
    return gather_flat(a, positions)


@composite(np.trim_zeros, args="filt", notes="A slice of the input (a view), as in NumPy.")
def trim_zeros(filt, trim="fb", axis=None):
    plain = stop_gradient(filt)
    trimmed = np.trim_zeros(plain, trim, axis)  # NumPy checks `trim` and `axis`
    if np.ndim(plain) == 0:
        return filt[...]
    index = []
    for k, n in enumerate(np.shape(trimmed)):
        others = tuple(j for j in range(np.ndim(plain)) if j != k)
        used = np.flatnonzero(np.any(plain != 0, axis=others)) if n else ()
        start = int(used[0]) if n and "f" in trim.lower() and n != np.shape(plain)[k] else 0
        index.append(slice(start, start + n))
    return filt[tuple(index)]


@composite(np.astype, args="x", notes="As `x.astype(dtype)`; with `copy=False`, `x` itself where it has that dtype.")
def astype_function(x, dtype, /, *, copy=True, device=None):
    if not copy and np.dtype(dtype) == dtype_of(x):  # the input itself, as NumPy returns it
        return x
    return FUNCTIONS[astype](x, dtype)

# --- grids and constructors ----------------------------------------------------------------
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



def _constant_like(prototype, value):
    """`value`, made by `np.zeros_like(prototype)` or the like: a constant living on the prototype's
    tape (or level), so that tracked values can be written into it (`h[i] = f(x)`)."""
    if not isinstance(prototype, Traced) or value.dtype.kind not in "fc":
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
    composite(_make, args="none", kind="none", notes="""A constant: no gradient flows from the prototype. On a
              tracked prototype the result is tracked too, so tracked values can be written into it.""")(
        _like(_make, _name))


@composite(np.full_like, args="fill_value", notes="""The fill value is differentiable (its gradient
           sums the result's); none flows from the prototype. On a tracked prototype the result is
           tracked, so tracked values can be written into it. With a plain prototype NumPy never
           hands the call over: pass a tracked prototype, or write `v * np.ones_like(a)`.""")
def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kwargs):
    value = np.full_like(stop_gradient(a), stop_gradient(fill_value), dtype, order, subok, shape, **kwargs)
    if not isinstance(fill_value, Traced) or value.dtype.kind not in "fc":
        return _constant_like(a, value)
    if fill_value.dtype != value.dtype:
        fill_value = FUNCTIONS[astype](fill_value, value.dtype)
    return np.copy(np.broadcast_to(fill_value, value.shape))  # a copy, not a view of the fill value



# --- properties of an array ------------------------------------------------------------------
without_gradient(np.shape, np.ndim, np.size, np.result_type, np.iscomplexobj, np.isrealobj, np.may_share_memory,
                 np.shares_memory)

# np.row_stack (deprecated) is not an array function: it calls np.vstack, which is covered.
describe(np.row_stack, "tup", "A deprecated alias that calls numpy.vstack (covered above).", kind="composite")
