"""NumPy functions that write into an array in place: fill_diagonal, copyto, put, place, putmask.

Into a tracked array each is a functional update of that array, seen through every view of it
and every alias, as `x[index] = value` is. Writing a tracked value into a plain array would lose
its gradient, so that is refused with an error naming the function and the fix.
"""

import numpy as np

from .._arrays import as_array_of_its_library, holds_foreign_array, indexable_by
from .._inplace import rebind, write_flat
from .._registry import FUNCTIONS
from .._standins import index_update
from .._values import Traced, stop_gradient
from ._register import composite


def _target(name, array, values, hint=""):
    """`array` if it is traced; otherwise a clear error when a traced value would be written into it."""
    if isinstance(array, Traced):
        return array
    if any(isinstance(v, Traced) for v in values):
        raise TypeError(
            f"{name} would write a value that is being differentiated into a plain array, losing its gradient. "
            "Start from a traced array (np.zeros_like(x), x.copy()), or build the result functionally "
            f"(np.where, x[index] = v on a traced x).{hint}"
        )
    return None


_FULL_HINT = (" np.full_like(a, v) with a plain `a`, and np.full(shape, v, dtype), call np.copyto when the fill value v "
              "is tracked: write `v * np.ones_like(a)` (or `v * np.ones(shape)`), or pass a tracked prototype to "
              "np.full_like.")


@composite(np.fill_diagonal, args="a, val", notes="""Writes into `a` (seen through its views), as in NumPy; `val` is
           repeated along the diagonal as NumPy repeats it.""")
def fill_diagonal(a, val, wrap=False):
    target = _target("np.fill_diagonal", a, (val,))
    if target is None:
        return np.fill_diagonal(a, val, wrap)
    mask = np.zeros(target.shape, dtype=bool)
    np.fill_diagonal(mask, True, wrap)  # NumPy says which elements (and raises its own errors)
    write_flat(target, np.flatnonzero(mask), val, reads_as_written=True)  # NumPy writes a.flat[...] = val


@composite(np.copyto, args="dst, src", notes="""Writes `src` (broadcast) into `dst` where `where` holds, seen
           through the views of `dst`. A tracked `src` into a plain `dst` is refused (np.full_like with a plain
           prototype and a tracked fill value does that: write `v * np.ones_like(a)`).""")
def copyto(dst, src, casting="same_kind", where=True):
    target = _target("np.copyto", dst, (src,), _FULL_HINT)
    if target is None:
        if isinstance(where, Traced):
            where = stop_gradient(where)
        return np.copyto(dst, src, casting=casting, where=where)
    src_dtype = np.result_type(stop_gradient(src))
    if not np.can_cast(src_dtype, target.dtype, casting):
        raise TypeError(f"Cannot cast array data from {src_dtype!r} to {target.dtype!r} according to the rule {casting!r}")
    where = stop_gradient(where)
    if where is True:
        rebind(target, FUNCTIONS[index_update](target, Ellipsis, src))
        return
    rebind(target, np.where(np.broadcast_to(where, target.shape), src, target))


@composite(np.put, args="a, v", notes="""Writes into `a.flat` at `ind` (with NumPy's `mode`), `v` repeated as
           needed; an index given twice is refused.""")
def put(a, ind, v, mode="raise"):
    target = _target("np.put", a, (v,))
    ind = stop_gradient(ind)
    if target is None:
        return np.put(a, ind, v, mode=mode)
    positions = np.take(indexable_by(np.arange(target.size), ind), ind, mode=mode)
    write_flat(target, positions, v)


def _refuse_unsafe_values(name, values, target):
    """NumPy's `place` and `putmask` cast an array of values with casting='safe' (0-d too; Python numbers and
    NumPy scalars are cast as they are)."""
    plain = stop_gradient(values)
    if isinstance(plain, np.ndarray) and not np.can_cast(plain.dtype, target.dtype, "safe"):
        raise TypeError(f"{name}: cannot cast array data from {plain.dtype!r} to {target.dtype!r} according to "
                        "the rule 'safe', as NumPy's own refuses; convert the values with .astype first")


@composite(np.place, args="arr, vals", notes="""Writes `vals` (repeated as needed) into `arr` where `mask` holds.""")
def place(arr, mask, vals):
    target = _target("np.place", arr, (vals,))
    mask = stop_gradient(mask)
    if target is None:
        return np.place(arr, mask, vals)
    _refuse_unsafe_values("place", vals, target)
    mask = as_array_of_its_library(mask, bool)
    if _size(mask) != _size(target):
        raise ValueError("place: mask and data must be the same size")
    if _size(vals) == 0 and np.any(mask):
        raise ValueError("Cannot insert from an empty array!")
    if holds_foreign_array(mask):  # a Dask mask, or pb.jit's stand-in: a select that never reads its values
        _place_by_select(target, mask, vals)
        return None
    write_flat(target, np.flatnonzero(mask), vals)


def _place_by_select(target, mask, vals):
    """`np.place(target, mask, vals)` as a select: the k-th element where `mask` holds (in C order) takes
    `vals.flat[k % vals.size]`."""
    if _size(vals) == 0:
        return
    flat_mask = np.ravel(mask)
    rank = np.cumsum(flat_mask.astype(np.intp)) - 1
    chosen = np.take(np.ravel(vals), np.maximum(rank, 0) % _size(vals))
    rebind(target, np.where(np.reshape(flat_mask, target.shape), np.reshape(chosen, target.shape), target))


def _size(a):
    """The number of elements of `a` (an array of any library, or a list), without np.size (Dask has none)."""
    return a.size if hasattr(a, "size") else np.size(a)


@composite(np.putmask, args="a, values", notes="""Writes `values.flat[n % values.size]` into `a.flat[n]` where
           `mask.flat[n]` holds, as NumPy does.""")
def putmask(a, mask, values):
    target = _target("np.putmask", a, (values,))
    mask = stop_gradient(mask)
    if target is None:
        return np.putmask(a, mask, values)
    _refuse_unsafe_values("putmask", values, target)
    if holds_foreign_array(mask):  # a Dask mask, or pb.jit's stand-in: a select that never reads its values
        if _size(values) == 1:
            rebind(target, np.where(mask, values, target))
            return None
        if _size(mask) != _size(target):
            raise ValueError("putmask: mask and data must be the same size")
        shape = target.shape
        cycled = np.take(np.ravel(values), np.arange(_size(target)) % _size(values))
        rebind(target, np.where(np.reshape(mask, shape), np.reshape(cycled, shape), target))
        return None
    mask = np.asarray(mask, dtype=bool)
    if mask.size != target.size:
        raise ValueError("putmask: mask and data must be the same size")
    positions = np.flatnonzero(mask)
    write_flat(target, positions, values, cycle=positions)
