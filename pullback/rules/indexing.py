"""Rules for indexing and selecting, in both modes: `x[index]`, in-place writes (as functional
updates), `where`, take, take_along_axis, diagonals (diagonal, diag, diagflat), triangles
(triu, tril), selecting by conditions (select, choose, compress, extract, piecewise), put_along_axis,
and apply_along_axis and apply_over_axes, which call the user's function on traced slices; ix_; and the
index helpers tril_indices_from, triu_indices_from and diag_indices_from, whose integer results carry no gradient."""

import functools
import weakref

import numpy as np

from .._arrays import (
    as_array_of_its_library,
    axis_index,
    dtype_kind,
    holds_foreign_array,
    indexable_by,
    is_dask_array,
    is_foreign_array,
    like_input,
    of_another_library,
    rechunked_like,
    speaks_nep18,
    stand_in_among,
    type_name,
    values_deciding_shape,
    zeros_as,
)
from .._extend import primitive, rrule
from .._inplace import mark_view, names_each_once, plain_of, write_out
from .._registry import FUNCTIONS, METHODS
from .._standins import dtype_of, getitem, index_update, is_stand_in
from .._tangents import InplaceableThunk, Thunk
from .._values import Traced, stop_gradient, strip_all
from ._register import composite, forward_rule, linear_forward, rule, without_gradient, zeros_if_none


def is_basic(index):
    """True when `x[index]` is a view: only ints, slices, None and Ellipsis, so no element repeats."""
    parts = index if type(index) is tuple else (index,)
    return all(p is None or p is Ellipsis or isinstance(p, (int, np.integer, slice)) for p in parts)


@primitive
def unindex(g, index, shape):
    """Zeros of `shape` with `g` added at `index`: the transpose of `x[index]`."""
    return _unindexed(g, index, shape)


def _unindexed(g, index, shape):
    if type(g) is not np.ndarray and is_dask_array(g):
        if is_basic(index):
            return _spread(g, index, shape)
        if not _has_foreign_arrays(index):
            return _placed_rows(g, index, shape)
        placed, whole = _foreign_rows_placed(g, index, shape, g)
        return _spread(placed, whole, shape)
    out = zeros_as(g, shape)  # of g's array type: NumPy's, Dask's, CuPy's
    return _add_at(out, index, g)


@rrule(unindex)
def unindex_rule(g, index, shape):
    return unindex(g, index, shape), lambda dy: (_at(dy, index),)


linear_forward(unindex)


def _at(a, index):
    """`a[index]`, also for a NumPy `a` and an index holding a `pb.jit` stand-in (a cotangent or tangent
    that is a constant of the trace)."""
    return indexable_by(a, index)[index]


def _add_at(buffer, index, g):
    if isinstance(g, Traced):  # a nested derivative: keep it on the outer tape
        return buffer + unindex(g, index, np.shape(buffer))
    if type(buffer) is np.ndarray and is_foreign_array(g):  # NumPy's buffer, Dask's cotangent: the sum is Dask's
        return buffer + _unindexed(g, index, np.shape(buffer))
    stand_in = stand_in_among(index)
    if type(buffer) is np.ndarray and stand_in is not None:  # NumPy's ufunc.at would convert a pb.jit stand-in
        return buffer + _add_at(np.zeros_like(stand_in, dtype=buffer.dtype, shape=np.shape(buffer)), index, g)
    if is_basic(index):
        if type(buffer) is not np.ndarray and is_dask_array(buffer):
            return buffer + _spread(g, index, np.shape(buffer))
        if type(buffer) is not np.ndarray and _has_new_axes(index):  # Dask writes through no new axis
            index = tuple(p for p in index if p is not None) if type(index) is tuple else ()
            g = np.reshape(g, np.shape(buffer[index]))  # the new axes have length 1
            if index == ():
                return buffer + g
        buffer[index] += g
    elif _has_foreign_arrays(index):  # a Dask array of indices: NumPy's ufunc.at cannot take it
        return _add_at_foreign_rows(buffer, index, g)
    elif type(buffer) is np.ndarray:
        np.add.at(buffer, index, g)  # repeated indices each add their share
    else:
        try:
            np.add.at(buffer, index, g)
        except TypeError:  # a library without ufunc.at (Dask)
            buffer = _add_at_by_rows(buffer, index, g)
    return buffer


def _spread(g, index, shape):
    """Dask cotangent `g` of `x[index]`, for a basic index and an `x` of `shape`, placed among zeros of `shape`
    without writes (Dask's setitem fails on lengths unknown until computed, and reads the data twice):
    concatenated with zeros along each axis the index slices."""
    parts = _without_ellipsis(index if type(index) is tuple else (index,), len(shape))
    if any(p is None or isinstance(p, (int, np.integer)) for p in parts):  # an integer's axis back, new axes gone
        g = g[tuple(0 if p is None else None if isinstance(p, (int, np.integer)) else slice(None) for p in parts)]
    parts = [_as_slice(p, n) for p, n in zip((p for p in parts if p is not None), shape)]
    for axis, (part, n) in enumerate(zip(parts, shape)):
        if part.start in (None, 0) and part.stop is None and part.step in (None, 1):
            continue
        start, stop, step = part.indices(n)
        m = len(range(start, stop, step))
        if step < 0:  # the same elements in increasing order
            g = g[(slice(None),) * axis + (slice(None, None, -1),)]
            start, step = start + (m - 1) * step, -step
        if m == 0:
            start = 0
        elif step > 1:  # each element followed by step - 1 zeros
            length = (m - 1) * step + 1
            g = np.repeat(g, step, axis=axis)[(slice(None),) * axis + (slice(0, length),)]
            kept = np.arange(length) % step == 0
            g = np.where(kept.reshape((-1,) + (1,) * (len(shape) - axis - 1)), g, 0)
        pieces = [p for p in (_zeros_along(g, axis, start), g, _zeros_along(g, axis, n - start - np.shape(g)[axis]))
                  if np.shape(p)[axis] != 0]
        g = _concatenate(pieces, axis) if len(pieces) > 1 else pieces[0] if pieces else g
    return g


def _zeros_along(g, axis, length):
    """Zeros of Dask array `g`'s dtype and chunks, but `length` along `axis`."""
    import dask.array as da

    chunks = g.chunks[:axis] + ((length,),) + g.chunks[axis + 1:]
    if all(n == n for n in np.shape(g)):
        return da.zeros(tuple(map(sum, chunks)), dtype=g.dtype, chunks=chunks)
    first = g.blocks[(slice(None),) * axis + (slice(0, 1),)]  # lengths unknown until computed: read from g's blocks
    return first.map_blocks(_zeros_block, axis, length, chunks=chunks, dtype=g.dtype)


def _zeros_block(block, axis, length):
    return np.zeros(block.shape[:axis] + (length,) + block.shape[axis + 1:], dtype=block.dtype)


def _concatenate(pieces, axis):
    """Dask arrays of one chunking but along `axis`, concatenated along it, also where lengths are unknown."""
    import dask.array as da

    return da.concatenate(pieces, axis=axis, allow_unknown_chunksizes=True)


def _has_new_axes(index):
    return index is None or (type(index) is tuple and any(p is None for p in index))


def _has_foreign_arrays(index):
    """Whether `index` holds another library's array; `pb.jit`'s stand-ins are NumPy's, with `np.add.at`."""
    return any(of_another_library(p) for p in (index if type(index) is tuple else (index,)))


def _add_at_foreign_rows(buffer, index, g):
    """`_add_at` for an index holding another library's integer array (a Dask array, as `np.argmax` of one
    gives) of at most one axis, the other parts basic: the rows of `g` are summed into place by a product
    with a 0/1 matrix, computed by that library."""
    placed, whole = _foreign_rows_placed(g, index, np.shape(buffer), buffer)
    if type(buffer) is np.ndarray:  # NumPy's buffer, another library's rows: the sum is of that library's type
        return buffer + _unindexed(placed, whole, np.shape(buffer))
    return _add_at(buffer, whole, placed)


def _foreign_rows_placed(g, index, shape, buffer):
    """`(placed, whole)` for `_add_at_foreign_rows` into `buffer` of `shape`: `g` with its rows summed into
    place along the index array's axis, and the basic index `whole` of `x` that `placed` is the cotangent of."""
    parts, k, lead, rest = _one_array_index(index, len(shape))
    rows = parts[k] if k < len(parts) else None
    if rows is not None and is_dask_array(rows) and dtype_kind(rows) == "b" and np.ndim(rows) == 1:
        placed = _unmasked(g, rows, _axis_in_result(parts, k)) if None not in lead else None
        if placed is None:
            raise _no_add_at(buffer)
        return placed, (*lead, slice(None), *rest)
    if rows is None or not is_foreign_array(rows) or dtype_kind(rows) not in "iu" or np.ndim(rows) > 1:
        raise _no_add_at(buffer)
    n = shape[len(lead) - sum(p is None for p in lead)]
    rows = np.reshape(rows, (-1,)) % n
    one_hot = like_input(np.arange(n), rows)[:, None] == rows[None, :]  # (n, len(rows)): row i gets g[j] where rows[j] == i
    at = _axis_in_result(parts, k)
    g = g if np.ndim(parts[k]) == 1 else g[(slice(None),) * at + (None,)]
    placed = np.moveaxis(np.tensordot(one_hot.astype(np.result_type(g)), g, axes=([1], [at])), 0, at)
    return placed, (*lead, slice(None), *rest)


def _unmasked(g, mask, axis):
    """Dask cotangent `g` of `x[..., mask]` (a Dask mask of axis `axis`) with zeros put back where the mask is
    false, block by block: Dask's `x[mask]` keeps one block of that axis for each block of the mask. None where
    `g`'s blocks do not pair with the mask's."""
    import dask.array as da

    if not is_dask_array(g) or g.numblocks[axis] != mask.numblocks[0]:
        return None
    ind = tuple(range(g.ndim))
    return da.blockwise(_unmask_block, ind, g, ind, mask, (axis,), axis=axis, dtype=g.dtype, align_arrays=False,
                        adjust_chunks={axis: mask.chunks[0]})


def _unmask_block(g, mask, axis):
    out = np.zeros(g.shape[:axis] + mask.shape + g.shape[axis + 1:], dtype=g.dtype)
    out[(slice(None),) * axis + (mask,)] = g
    return out


def _one_array_index(index, ndim):
    """`(parts, k, lead, rest)`: the parts of `index` (`...` spelled out) and the position of its one array,
    which `_add_at_by_rows` and `_add_at_foreign_rows` accept when the parts before it are slices and new
    axes, and the parts after it basic (slices and new axes only, where parts come before it, so that
    the array's axis stays in place); k is past the end for an index that is not of that form."""
    parts = _without_ellipsis(index if type(index) is tuple else (index,), ndim)
    k = next((i for i, p in enumerate(parts) if p is not None and not isinstance(p, (slice, int, np.integer))),
             len(parts))
    lead, rest = parts[:k], parts[k + 1:]
    if not is_basic(rest) or (lead and not all(p is None or isinstance(p, slice) for p in rest)):
        k = len(parts)
    elif not _integers_next_to(lead):  # NumPy would move the array's axis to the front, Dask would not
        k = len(parts)
    return parts, k, lead, rest


def _integers_next_to(lead):
    """Whether the integers among the parts before the index array come right before it, where NumPy and
    Dask give the array's axis the same place."""
    run = len(lead)
    while run and isinstance(lead[run - 1], (int, np.integer)):
        run -= 1
    return not any(isinstance(p, (int, np.integer)) for p in lead[:run])


def _axis_in_result(parts, k):
    """The axis of `x[parts]` that the index array at `parts[k]` gives, for another library's `x` (Dask's,
    which takes the integers before it as basic indices: each removes its axis)."""
    return k - sum(isinstance(p, (int, np.integer)) for p in parts[:k])


def _no_add_at(buffer):
    return TypeError(
        f"The gradient of x[index] for a {type_name(buffer)} x needs np.add.at, which that library does not "
        "provide, for this index (a boolean mask, integer arrays on several axes, or an index array of several "
        "axes). Index it with slices and one integer array of one axis, or select with np.where; or compute "
        "the index first (index.compute() for a Dask array)."
    )


def _add_at_by_rows(buffer, index, g):
    """`np.add.at(buffer, index, g)` for one integer array of one axis (x[[0, 2, 0]], x[:, [1, 1]]),
    without `ufunc.at`: repeated rows are summed first (a product with a 0/1 matrix), then added once each."""
    if is_dask_array(buffer):
        return buffer + _placed_rows(g, index, np.shape(buffer))
    parts, k, lead, rest, rows, g = _summed_rows(g, index, np.shape(buffer))
    # Dask writes through no new axis, nor through an integer next to an index array: both become length 1
    target = tuple(_as_slice(p, n) for p, n in zip((p for p in (*lead, rows, *rest) if p is not None),
                                                   np.shape(buffer)))
    if any(p is None or isinstance(p, (int, np.integer)) for p in parts):
        g = np.reshape(g, np.shape(buffer[target]))
    buffer[target] += g
    return buffer


def _summed_rows(g, index, shape):
    """`(parts, k, lead, rest, rows, g)` for `_add_at_by_rows` into an array of `shape`: the index array `parts[k]`
    as the integer `rows` it names, each once, and `g` with the rows going to one place summed."""
    parts, k, lead, rest = _one_array_index(index, len(shape))
    rows = np.asarray(parts[k]) if k < len(parts) and isinstance(parts[k], (list, np.ndarray)) else None
    if rows is not None and rows.dtype.kind == "b" and rows.ndim == 1:
        rows = np.flatnonzero(rows)  # a NumPy mask of one axis picks each of its rows once, in order
    if rows is None or rows.dtype.kind not in "iu" or rows.ndim != 1:
        raise _no_add_at(g)
    rows = rows % shape[len(lead) - sum(p is None for p in lead)]
    unique, inverse = np.unique(rows, return_inverse=True)
    if len(unique) < len(rows):
        ones = np.zeros((len(unique), len(rows)), dtype=np.result_type(g))
        ones[inverse, np.arange(len(rows))] = 1.0
        at = _axis_in_result(parts, k)
        g = np.moveaxis(np.tensordot(like_input(ones, g), g, axes=([1], [at])), 0, at)  # the rows going to one place, summed
        rows = unique  # g's rows are now in np.unique's (sorted) order; otherwise they stay in the index's
    return parts, k, lead, rest, rows, g


def _placed_rows(g, index, shape):
    """Dask cotangent `g` of `x[index]`, for one integer array of one axis, placed among zeros of x's `shape`
    without writes (Dask's setitem fails on lengths unknown until computed): each row of x gathers its row of `g`
    (or zero), then `_spread` places the rest."""
    parts, k, lead, rest, rows, g = _summed_rows(g, index, shape)
    n = shape[len(lead) - sum(p is None for p in lead)]
    at = _axis_in_result(parts, k)
    if len(rows) == 0:
        g = _zeros_along(g, at, n)
    else:
        hit, pick = np.zeros(n, dtype=bool), np.zeros(n, dtype=np.intp)
        hit[rows], pick[rows] = True, np.arange(len(rows))
        g = np.where(hit.reshape((-1,) + (1,) * (np.ndim(g) - at - 1)), np.take(g, pick, axis=at), 0)
    return _spread(g, (*lead, slice(None), *rest), shape)


def _as_slice(part, n):
    """An integer index of an axis of length `n` as a slice of length one; other parts as they are."""
    if isinstance(part, (int, np.integer)):
        start = int(part) % n if -n <= part < n else int(part)  # out of range: indexing raises NumPy's error
        return slice(start, start + 1)
    return part


def _without_ellipsis(parts, ndim):
    """The parts of an index with `...` spelled out as slices."""
    if not any(p is Ellipsis for p in parts):
        return parts
    at = next(i for i, p in enumerate(parts) if p is Ellipsis)
    taken = sum(1 for p in parts if p is not None and p is not Ellipsis)
    return (*parts[:at], *(slice(None),) * (ndim - taken), *parts[at + 1:])


@primitive
def gather(x, index):
    """`x[index]` (the index plain), as a primitive."""
    return x[index]


@rrule(gather)
def getitem_rule(x, index):
    y = x[index]
    shape = np.shape(x)

    def back(g):
        return InplaceableThunk(lambda buffer: _add_at(buffer, index, g), lambda: unindex(g, index, shape)), None

    return y, back


linear_forward(gather, lambda t, index: _at(t, index))


@composite(getitem, args="x", notes="""Basic and advanced indexing; repeated indices add up their
           gradients. A basic index gives a view, as in NumPy.""")
def subscript(x, index):
    index = _read_for_numpy(x, _plain_index(index))
    y = gather(x, index)
    if is_basic(index) and isinstance(y, Traced) and isinstance(x, Traced):
        mark_view(y, x)  # a basic index gives a view (a single element is a scalar, not a view)
    return y


def _plain_index(index):
    if type(index) is tuple:
        return tuple(stop_gradient(p) for p in index)
    return stop_gradient(index)


def _read_for_numpy(x, index):
    """`index` with each Dask array in it computed, where `x` is NumPy's: NumPy's `x[index]` (and `x[index] = v`)
    computes them once, and the gradient then reads the values NumPy read."""
    if type(index) is tuple:
        for p in index:
            if type(p) not in _PLAIN_PARTS and is_dask_array(p):
                break
        else:
            return index  # (the common index, of ints, slices and NumPy arrays, told by type alone)
        if holds_foreign_array(x):
            return index
        return tuple(values_deciding_shape(p) if is_dask_array(p) else p for p in index)
    if type(index) in _PLAIN_PARTS or not is_dask_array(index) or holds_foreign_array(x):
        return index
    return values_deciding_shape(index)


_PLAIN_PARTS = frozenset((int, slice, type(None), type(Ellipsis), np.ndarray, list, bool))


@primitive
def replace(x, index, value):
    """A copy of `x` with `x[index] = value` (the index plain), as a primitive."""
    return _update_plain(x, index, value)


@rrule(replace)
def index_update_rule(x, index, value):
    _refuse_repeats(np.shape(x), index)
    y = FUNCTIONS[index_update](x, index, value) if isinstance(x, Traced) or isinstance(value, Traced) else _update_plain(x, index, value)

    def back(g):
        return (Thunk(lambda: FUNCTIONS[index_update](indexable_by(g, index), index, 0.0)), None,
                Thunk(lambda: _at(g, index)))

    return y, back


def _update_plain(x, index, value):
    if is_stand_in(x):  # pb.jit's: a write keeps the array's memory layout, as NumPy's does
        y = np.copy(x, order="K")
    else:
        y = x.copy() if speaks_nep18(type(x)) else np.array(x, copy=True)  # np.array would convert a CuPy array
    y = indexable_by(y, index)
    y[index] = value
    return y


@forward_rule(replace)
def index_update_frule(primals, tangents):
    x, index, value = primals
    tx, _, tv = tangents
    y = index_update_rule(x, index, value)[0]
    if tx is None and tv is None:
        return y, None
    return y, FUNCTIONS[index_update](indexable_by(zeros_if_none(tx, x), index), index, 0.0 if tv is None else tv)


@composite(index_update, args="x, value", notes="""What `x[index] = value` does to a tracked `x`
           (or a plain `x` receiving a tracked value): a functional update, so earlier uses of `x`
           keep their gradient. A write through a view reaches its base, and every live view of that
           base sees it, as in NumPy. Writing the same element twice with different values is refused.""")
def assign(x, index, value):
    index = _read_for_numpy(x, _plain_index(index))
    root_written = _root_written_through(x, value)
    if root_written is not None:
        return root_written
    link = getattr(x, "_base", None)
    if link is not None and not link.readonly and _shows_elements_twice(link):
        return _write_through_view(x, link, index, value)
    return replace(x, index, value)


_REPEATED_WRITE = ("This indexed assignment writes the same element more than once; NumPy keeps only one "
                   "of the writes, so no gradient is well defined. Use unique indices.")


def _refuse_repeats(shape, index):
    if names_each_once(index):
        return
    positions = indexable_by(np.arange(int(np.prod(shape))).reshape(shape), index)[index]
    if np.unique(positions).size != np.size(positions):
        raise ValueError(_REPEATED_WRITE)


# --- writes through a view that shows one element of its root in several places -----------------
# (`sliding_window_view(y, n, writeable=True)`): NumPy writes memory, so such an element is written once, and
# every place showing it shows the new value. The view's new value is therefore read back from its root, and
# the write of that value into the root that follows (`_inplace.rebind`) is the root as already written.
_WRITTEN_THROUGH = {}  # id of a view's new value -> (weak reference to it, its root, the root as written)


def _shows_elements_twice(link):
    """Whether a view, tied to its root by `link`, shows some element of the root in more than one place."""
    positions = link.positions()
    return positions.size > 1 and np.ndim(link.root) > 0 and np.bincount(positions.ravel()).max() > 1


def _write_through_view(view, link, index, value):
    """`view[index] = value` for a view showing some elements of its root twice: each element of the root
    named is written once, from one element of `value`; the view's new value is read back from the root."""
    root, positions = link.root, link.positions()
    targets = indexable_by(positions, index)[index]
    try:
        sources = np.broadcast_to(np.arange(np.size(value)).reshape(np.shape(value)), np.shape(targets))
    except ValueError:
        return replace(view, index, value)  # NumPy's error for a value of the wrong shape
    targets, sources = _each_written_once(np.ravel(targets), np.ravel(sources))
    written = FUNCTIONS[index_update](root, np.unravel_index(targets, np.shape(root)), np.ravel(value)[sources])
    shown = FUNCTIONS[getitem](written, np.unravel_index(positions, np.shape(root)))
    for key in [k for k, (ref, _, _) in _WRITTEN_THROUGH.items() if ref() is None]:
        del _WRITTEN_THROUGH[key]
    _WRITTEN_THROUGH[id(shown)] = (weakref.ref(shown), root, written)
    return shown


def _each_written_once(targets, sources):
    """`(targets, sources)` naming each target once; refused where a target is written from different sources."""
    unique, first = np.unique(targets, return_index=True)
    if unique.size != targets.size:
        order = np.argsort(targets, kind="stable")
        repeated = targets[order][1:] == targets[order][:-1]
        if np.any(sources[order][1:][repeated] != sources[order][:-1][repeated]):
            raise ValueError(_REPEATED_WRITE)
    return unique, sources[first]


def _root_written_through(root, value):
    """The root as `_write_through_view` wrote it, when `value` is the view's new value it gave; else None."""
    if not _WRITTEN_THROUGH:
        return None
    entry = _WRITTEN_THROUGH.get(id(value))
    if entry is None or entry[0]() is not value or entry[1] is not root:
        return None
    del _WRITTEN_THROUGH[id(value)]
    return entry[2]


@primitive
def select(condition, a, b):
    """`np.where(condition, a, b)` with a plain condition, as a primitive."""
    return np.where(condition, a, b)


@rrule(select)
def where_rule(condition, a, b):
    y = np.where(condition, a, b)
    return y, lambda g: (None, Thunk(lambda: np.where(condition, g, 0.0)), Thunk(lambda: np.where(condition, 0.0, g)))


@forward_rule(select)
def where_frule(primals, tangents):
    condition, a, b = primals
    _, ta, tb = tangents
    y = np.where(condition, a, b)
    if ta is None and tb is None:
        return y, None
    return y, np.where(condition, 0.0 if ta is None else ta, 0.0 if tb is None else tb)


@composite(np.where, args="x, y", notes="The condition carries no gradient; one-argument `where` is `nonzero`.")
def where(condition, x=None, y=None):
    condition = stop_gradient(condition)
    if x is None and y is None:
        return np.nonzero(condition)
    if x is None or y is None:
        raise ValueError("either both or neither of x and y should be given")  # NumPy's error
    return select(condition, x, y)


def _integer_positions(indices):
    """Indices as NumPy's take and choose read them: booleans as the integers 0 and 1 (not a mask), and an empty
    list as no positions (np.asarray would make it float64)."""
    if isinstance(indices, (list, tuple)):
        indices = np.asarray(indices)
        if indices.size == 0:
            return indices.astype(np.intp)
    return indices.astype(np.intp) if dtype_of(indices).kind == "b" else indices


def _check_integer_array(indices):
    """take_along_axis and put_along_axis take integer indices only (a boolean array is no mask there)."""
    if dtype_of(indices).kind not in "iu":
        raise IndexError("`indices` must be an integer array")  # NumPy's error


def _along(axis, ndim, index):
    """An index tuple that applies `index` on `axis` and takes everything elsewhere."""
    return (slice(None),) * (axis % ndim) + (index,)


@composite(np.take, args="a", notes="Indexing; repeated indices add up their gradients.")
def take(a, indices, axis=None, out=None, mode="raise"):
    if out is not None:  # computed, then written into out
        return write_out("numpy.take", out, take(a, indices, axis, None, mode),
                         lambda buffer: np.take(plain_of(a), plain_of(indices), axis, buffer, mode))
    indices = _integer_positions(stop_gradient(indices))
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
    _check_integer_array(indices)
    if axis is None:
        arr, axis = np.ravel(arr), 0
    ndim = np.ndim(arr)
    axis = axis_index(axis, ndim)
    if np.ndim(indices) != ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    if ndim > 1 and (is_dask_array(stop_gradient(arr)) or is_dask_array(indices)):
        arr, indices = _broadcast_along(arr, indices, axis)
        return gather_along_axis(arr, indices, axis)
    return arr[_along_axis(indices, axis, np.shape(arr))]


def _along_axis(indices, axis, shape):
    """The index of `take_along_axis` into an array of `shape`: `indices` on `axis`, a range on every other."""
    ndim = len(shape)
    return tuple(indices if k == axis else np.arange(n).reshape((1,) * k + (n,) + (1,) * (ndim - k - 1))
                 for k, n in enumerate(shape))


def _broadcast_along(arr, indices, axis):
    """`arr` and `indices` broadcast against each other on every axis but `axis`."""
    def but_axis(shape):
        return shape[:axis] + (1,) + shape[axis + 1:]

    common = np.broadcast_shapes(but_axis(np.shape(arr)), but_axis(np.shape(indices)))

    def broadcast(a):
        shape = common[:axis] + np.shape(a)[axis:axis + 1] + common[axis + 1:]
        return a if np.shape(a) == shape else np.broadcast_to(a, shape)

    return broadcast(arr), broadcast(indices)


# --- take_along_axis on Dask arrays, which index with one index array at most: block by block, each
# block holding whole lines along the axis (as Dask's own sorting does) ---------------------------
@primitive
def gather_along_axis(arr, indices, axis):
    """`np.take_along_axis(arr, indices, axis)` of Dask arrays of one shape but along `axis`."""
    return blocks_along(_take_block, indices, arr, axis, arr.dtype)


@rrule(gather_along_axis)
def gather_along_axis_rule(arr, indices, axis):
    n = np.shape(arr)[axis]

    def back(dy):  # in `arr`'s chunks
        return rechunked_like(scatter_along_axis(dy, indices, axis, n), arr), None, None

    return gather_along_axis(arr, indices, axis), back


@primitive
def scatter_along_axis(g, indices, axis, n):
    """Zeros with `n` elements along `axis` and `g` added at `indices` there: the transpose of `gather_along_axis`."""
    return blocks_along(functools.partial(_add_block, n=n), g, indices, axis, g.dtype, n)


@rrule(scatter_along_axis)
def scatter_along_axis_rule(g, indices, axis, n):
    return scatter_along_axis(g, indices, axis, n), lambda dy: (gather_along_axis(dy, indices, axis), None, None, None)


linear_forward(gather_along_axis)
linear_forward(scatter_along_axis)


def _take_block(indices, arr, axis):
    return np.take_along_axis(arr, indices, axis)


def _add_block(g, indices, axis, n):
    shape = np.shape(g)
    out = np.zeros(shape[:axis] + (n,) + shape[axis + 1:], dtype=g.dtype)
    np.add.at(out, _along_axis(indices, axis, shape), g)
    return out


@primitive
def rechunk(x, chunks="auto", **options):
    """`x.rechunk(chunks, ...)` of a Dask array: a re-layout, whose gradient is rechunked back to `x`'s chunks."""
    return x.rechunk(chunks, **options)


@rrule(rechunk)
def rechunk_rule(x, chunks="auto", **options):
    return rechunk(x, chunks, **options), lambda dy: (rechunked_like(dy, x),)


linear_forward(rechunk)
METHODS["rechunk"] = rechunk


def blocks_along(fn, first, second, axis, dtype, length=None):
    """`fn(first_block, second_block, axis)` over Dask arrays (NumPy ones made Dask arrays) of one number of
    dimensions and one shape but along `axis`: `first` is rechunked to hold `axis` whole and `second` to
    `first`'s blocks, so each call sees whole lines. The result is chunked as `first`, with `length`
    (default: `first`'s) along `axis`."""
    import dask.array as da

    first = da.asarray(first).rechunk({axis: -1})
    second = da.asarray(second).rechunk(first.chunks[:axis] + ((np.shape(second)[axis],),) + first.chunks[axis + 1:])
    ind = tuple(range(first.ndim))
    adjust = {} if length is None else {axis: (length,)}
    return da.blockwise(fn, ind, first, ind, second, ind, axis=axis, dtype=dtype, align_arrays=False,
                        adjust_chunks=adjust)


@primitive
def undiagonal(g, offset, axis1, axis2, shape):
    """Zeros of `shape` with `g`'s last axis written on the diagonal: the transpose of `np.diagonal`."""
    out = zeros_as(g, shape)
    if type(out) is not np.ndarray:  # Dask writes through no view: g spread over the rows, times the diagonal's mask
        rows, columns = shape[axis1], shape[axis2]
        if np.shape(g)[-1] == 0:
            return out
        along = np.clip(np.arange(rows) - max(-offset, 0), 0, np.shape(g)[-1] - 1)  # row i holds g[..., i - first row]
        mask = like_input(np.eye(rows, columns, offset, dtype=bool), g)
        spread = np.where(mask, g[..., along][..., :, None], 0)
        return np.moveaxis(spread.astype(out.dtype), (-2, -1), (axis1, axis2))
    view = np.moveaxis(out, (axis1, axis2), (-2, -1))
    k = np.arange(np.shape(g)[-1])
    view[..., k + max(-offset, 0), k + max(offset, 0)] = g
    return out


@rrule(undiagonal)
def undiagonal_rule(g, offset, axis1, axis2, shape):
    y = undiagonal(g, offset, axis1, axis2, shape)
    return y, lambda dy: (np.diagonal(dy, offset, axis1, axis2), None, None, None, None)


linear_forward(undiagonal)


@rule(np.diagonal, args="a", view=True)
def diagonal_rule(a, offset=0, axis1=0, axis2=1):
    shape = np.shape(a)
    axis1, axis2 = axis_index(axis1, len(shape)), axis_index(axis2, len(shape))
    y = np.diagonal(a, offset, axis1, axis2)
    return y, lambda g: (undiagonal(g, offset, axis1, axis2, shape), None, None, None)


linear_forward(np.diagonal)


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


linear_forward(np.triu)


@rule(np.tril, args="m")
def tril_rule(m, k=0):
    return np.tril(m, k), lambda g: (np.tril(g, k), None)


linear_forward(np.tril)


# --- selecting by conditions, and functions applied along axes ---------------------------------
@composite(np.select, args="choicelist, default", notes="The first true condition picks; conditions carry no gradient.")
def select_by_conditions(condlist, choicelist, default=0):
    plain = np.select([stop_gradient(c) for c in condlist], [stop_gradient(c) for c in choicelist], stop_gradient(default))
    y = default
    for condition, choice in reversed(list(zip(condlist, choicelist))):
        y = np.where(stop_gradient(condition), choice, y)
    y = np.broadcast_to(y, np.shape(plain)) if np.shape(y) != np.shape(plain) else y
    if not isinstance(y, Traced):
        return plain
    return y.astype(plain.dtype) if y.dtype != plain.dtype else np.copy(y)


@composite(np.compress, args="a", notes="A gather of the selected elements.")
def compress(condition, a, axis=None, out=None):
    if out is not None:  # computed, then written into out
        return write_out("numpy.compress", out, compress(condition, a, axis),
                         lambda buffer: np.compress(plain_of(condition), plain_of(a), axis, buffer))
    if np.ndim(stop_gradient(condition)) != 1:
        raise ValueError("condition must be a 1-d array")  # NumPy's error
    if axis is None:
        a, axis = np.ravel(a), 0
    n = np.shape(a)[axis]
    chosen = np.flatnonzero(values_deciding_shape(stop_gradient(condition), bool))
    if chosen.size and chosen[-1] >= n:
        np.compress(stop_gradient(condition), np.empty(np.shape(a)), axis)  # NumPy's error
    return a[_along(axis, np.ndim(a), chosen)]


@composite(np.extract, args="arr", notes="A gather of the elements where the condition is true.")
def extract(condition, arr):
    return np.take(np.ravel(arr), np.flatnonzero(np.ravel(values_deciding_shape(stop_gradient(condition)))))


@composite(np.choose, args="choices", notes="Each element is gathered from the choice its index names.")
def choose(a, choices, out=None, mode="raise"):
    if out is not None:  # computed, then written into out
        return write_out("numpy.choose", out, choose(a, choices, None, mode),
                         lambda buffer: np.choose(plain_of(a), [plain_of(c) for c in choices], buffer, mode))
    index = _integer_positions(as_array_of_its_library(stop_gradient(a)))
    plain_choices = [stop_gradient(c) for c in choices]
    plain = np.choose(index, plain_choices) if mode == "raise" else np.choose(index, plain_choices, mode=mode)  # Dask's takes no mode
    n = len(choices)
    if mode == "wrap":
        index = np.mod(index, n)
    elif mode == "clip":
        index = np.clip(index, 0, n - 1)
    lazy = any(of_another_library(c) for c in plain_choices)
    if mode == "raise" and (lazy or of_another_library(index)):
        # the index itself where in range, and choose's error (when a Dask index is computed) where not: the
        # gathers below would raise another, or none
        index = np.choose(index, np.arange(n))
    if lazy:  # Dask gathers along one axis only: a where per choice
        y = choices[n - 1]
        for k in range(n - 2, -1, -1):
            y = np.where(index == k, choices[k], y)
        y = y + zeros_as(plain, np.shape(plain)) if np.shape(y) != np.shape(plain) else y
        return y if y.dtype == plain.dtype else y.astype(plain.dtype)
    stacked = np.stack(np.broadcast_arrays(*choices, index)[:-1], axis=0)
    y = take_along_axis(stacked, np.broadcast_to(index, np.shape(stacked)[1:])[None], 0)[0]
    return y if y.dtype == plain.dtype else y.astype(plain.dtype)


@composite(np.piecewise, args="x, the functions' outputs", notes="""Each function runs on the elements
           its condition selects (traced), as in NumPy; constants are plain.""")
def piecewise(x, condlist, funclist, *args, **kw):
    plain_x = stop_gradient(x)
    plain_x = plain_x if is_foreign_array(plain_x) else np.asarray(plain_x)  # Dask's stays lazy
    # NumPy checks the lists (and gives the value) with functions whose results are plain: one may close over
    # another value being differentiated (a learned slope, `lambda t: t * s`)
    plain_functions = [_plain_results(f) if callable(f) else f for f in funclist]
    plain = np.piecewise(plain_x, strip_all(condlist), plain_functions, *args, **kw)
    if np.isscalar(condlist) or (not isinstance(condlist[0], (list, np.ndarray)) and not is_foreign_array(condlist[0])
                                 and np.ndim(plain_x) != 0):
        condlist = [condlist]
    conditions = [c.astype(bool) if is_foreign_array(c) else np.asarray(c, dtype=bool) for c in strip_all(condlist)]
    if len(conditions) == len(funclist) - 1:  # the last function takes what no condition does
        conditions.append(~np.any(np.stack(conditions), axis=0))
    if not isinstance(x, Traced) or plain.dtype.kind not in "fc":
        return plain
    if np.ndim(x) == 0 and not is_foreign_array(plain_x):  # a number: NumPy reads it as a 0-d array
        x = np.reshape(x, ())
    y = x * 0.0  # NumPy starts from zeros_like(x)
    for condition, f in zip(conditions, funclist):
        if not callable(f):
            y = np.where(condition, f, y)
        elif holds_foreign_array(condition):
            # Dask cannot write back x[condition], of unknown length, so f (elementwise, as Dask's piecewise runs it
            # on blocks) runs on all of x; the elements not selected carry no gradient into f, which may not be
            # differentiable there
            selected = np.where(condition, x, stop_gradient(x))
            y = np.where(condition, f(selected, *args, **kw), y)
        elif np.any(condition):
            y = assign_into(y, condition, f(x[condition], *args, **kw))
    return y if y.dtype == plain.dtype else y.astype(plain.dtype)


def _plain_results(f):
    return lambda *args, **kwargs: strip_all(f(*args, **kwargs))


def assign_into(y, mask, values):
    """A copy of `y` with `values` written where `mask` is true (differentiable in both)."""
    return replace(y, mask, values)


@composite(np.put_along_axis, args="arr, values", notes="""In place, as in NumPy: a functional update of
           the tracked `arr` (earlier uses keep their gradient). Writing one element twice is refused.""")
def put_along_axis(arr, indices, values, axis):
    indices = as_array_of_its_library(stop_gradient(indices))
    _check_integer_array(indices)
    if axis is None:
        if np.ndim(indices) != 1:
            raise ValueError("when axis=None, `indices` must have a single dimension.")
        target, axis = np.ravel(stop_gradient(arr)), 0
        positions = indices
    else:
        ndim = np.ndim(arr)
        axis = axis_index(axis, ndim)
        positions = tuple(indices if k == axis else np.arange(n).reshape((1,) * k + (-1,) + (1,) * (ndim - k - 1))
                          for k, n in enumerate(np.shape(arr)))
        target = None
    if target is not None:
        size = np.size(target)
        if type(positions) is np.ndarray and np.any((positions >= size) | (positions < -size)):
            bad = positions[(positions >= size) | (positions < -size)][0]
            raise IndexError(f"index {bad} is out of bounds for axis 0 with size {size}")  # as NumPy's
        positions = np.unravel_index(np.mod(positions, size), np.shape(arr))  # (negative positions count back)
    arr[positions] = values


@composite(np.apply_along_axis, args="arr, *args", notes="""Calls `func1d` on each 1-D slice (traced) and
           stacks the results, as NumPy does.""")
def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    ndim = np.ndim(arr)
    axis = axis_index(axis, ndim)
    moved = np.moveaxis(arr, axis, -1)
    outer = np.shape(moved)[:-1]
    if 0 in outer:  # NumPy's own error: there is nothing to call func1d on
        return np.apply_along_axis(func1d, axis, stop_gradient(arr), *args, **kwargs)
    results = [np.asarray(r) if not isinstance(r, Traced) else r
               for r in (func1d(moved[index], *args, **kwargs) for index in np.ndindex(*outer))]
    stacked = np.stack(results, axis=0)
    stacked = np.reshape(stacked, outer + np.shape(results[0]))
    extra = np.ndim(results[0])
    # The result's own axes replace the one consumed, as in NumPy.
    order = list(range(axis)) + list(range(len(outer), len(outer) + extra)) + list(range(axis, len(outer)))
    return np.transpose(stacked, order)


@composite(np.apply_over_axes, args="a", notes="Calls `func(a, axis)` for each axis in turn, as NumPy does.")
def apply_over_axes(func, a, axes):
    ndim = np.ndim(a)
    for axis in (axes if np.ndim(axes) else (axes,)):
        axis = axis_index(axis, ndim)
        result = func(a, axis)
        if np.ndim(result) == ndim:
            a = result
        elif np.ndim(result) == ndim - 1:
            a = np.expand_dims(result, axis)
        else:
            raise ValueError("function is not returning an array of the correct shape")
    return a


@composite(np.ix_, args="*args", notes="""NumPy's index grids; a float array, which NumPy passes on reshaped,
           keeps its gradient.""")
def ix_(*args):
    grids = np.ix_(*strip_all(args))  # NumPy's checks, and its integer and boolean results
    return tuple(np.reshape(a, np.shape(g)) if isinstance(a, Traced) and g.dtype.kind in "fc" else g
                 for a, g in zip(args, grids))


without_gradient(np.tril_indices_from, np.triu_indices_from, np.diag_indices_from)
