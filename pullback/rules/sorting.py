"""Rules for sorting, in both modes: sort, partition, unique (and unique_*), the set operations and
sort_complex, whose gradients follow the elements; and the searching, counting and ordering functions (argsort, argmax,
nanargmax, lexsort, nonzero, argwhere, ...) and isin, which return indices or booleans and carry no gradient."""

import numpy as np

from .._arrays import axis_index, is_dask_array
from .._values import stop_gradient
from ._register import composite, pinned, without_gradient
from .indexing import take_along_axis


@composite(np.sort, args="a", notes="""Each output element takes the gradient of the input element
      it came from; among tied elements one is chosen (a valid one-sided derivative).""")
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        raise TypeError("numpy.sort(order=...) sorts structured arrays, which are never tracked")
    if axis is None:
        a, axis = np.ravel(a), -1
    plain = stop_gradient(a)
    result = take_along_axis(a, argsort(plain, axis, kind=kind, stable=stable), axis)
    if type(plain) is np.ndarray and plain.dtype.kind in "fc" and np.any(plain == 0):
        # NumPy's sort and argsort order tied zeros differently: -0.0 and 0.0 would swap places
        return pinned(result, np.sort(plain, axis, kind=kind, stable=stable))
    return result


def argsort(plain, axis, **options):
    """`np.argsort(plain, axis)`; of a Dask array (whose np.argsort computes it whole) lazily, block by block
    with `axis` in one chunk, as Dask's own topk and percentile do."""
    if is_dask_array(plain) and np.ndim(plain) > 0 and all(n == n for n in np.shape(plain)):
        axis = axis_index(axis, np.ndim(plain))
        return plain.rechunk({axis: -1}).map_blocks(np.argsort, axis=axis, dtype=np.intp, **options)
    return np.argsort(plain, axis=axis, **options)


@composite(np.partition, args="a", notes="As `sort`: gradients follow the elements.")
def partition(a, kth, axis=-1, kind="introselect", order=None):
    if order is not None:
        raise TypeError("numpy.partition(order=...) works on structured arrays, which are never tracked")
    if axis is None:
        a, axis = np.ravel(a), -1
    plain = stop_gradient(a)
    order = np.argpartition(plain, kth, axis=axis, kind=kind)
    want = np.partition(plain, kth, axis=axis, kind=kind)
    if not np.array_equal(np.take_along_axis(plain, order, axis), want, equal_nan=True):
        # NumPy's partition and argpartition place NaNs (and so the rest) differently: match the values of
        # NumPy's result to their positions in `a`, through both sorted orders (equal values in order)
        order = np.empty_like(order)
        np.put_along_axis(order, np.argsort(want, axis=axis, kind="stable"),
                          np.argsort(plain, axis=axis, kind="stable"), axis)
    # NumPy's values (its tied zeros keep their signs where partition put them)
    return pinned(take_along_axis(a, order, axis), want) if type(plain) is np.ndarray else \
        take_along_axis(a, order, axis)


@composite(np.unique, args="ar", notes="""Each unique value takes its gradient from its first
      occurrence in `ar` (the first such slice with `axis`); the other copies get none. Moving all
      copies together moves the value by their total, as it should; moving one copy alone splits
      it, and no derivative exists there. Index, inverse and counts are integers.""")
def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *, equal_nan=True,
           sorted=True):
    # options only where not the defaults: Dask's unique takes none of them, NumPy < 2.3 no `sorted`
    options = {name: value for name, value, default in (("axis", axis, None), ("equal_nan", equal_nan, True),
                                                        ("sorted", sorted, True)) if value is not default}
    plain = stop_gradient(ar)
    found = np.unique(plain, True, return_inverse, return_counts, **options)
    first = found[1]
    values = np.take(ar, first, axis=axis)  # ar flattened when axis is None, as np.unique does
    extras = ((first,) if return_index else ()) + tuple(found[2:])
    if type(plain) is np.ndarray and plain.dtype.kind in "fc" and not return_index and (
            not sorted or np.any(plain == 0)):
        # NumPy's own values where they differ from the first occurrences': asked for no index, it keeps
        # another of tied zeros (-0.0, 0.0), and asked for nothing else, it gives unsorted values in its own order
        want = np.unique(plain, False, return_inverse, return_counts, **options)
        want = want[0] if isinstance(want, tuple) else want
        if np.shape(want) == np.shape(found[0]) and not np.array_equal(want, found[0], equal_nan=True):
            values = values[np.searchsorted(found[0], want)]
        values = pinned(values, want)
    return (values,) + extras if extras else values


without_gradient(np.argsort, np.argpartition, np.argmax, np.argmin, np.nanargmax, np.nanargmin, np.lexsort,
                 np.nonzero, np.flatnonzero, np.argwhere, np.searchsorted, np.digitize, np.isin)


# --- the array-API unique functions and the set operations: gathers of first occurrences ----------
def _unique_result(name, x, **options):
    found = getattr(np, name)(stop_gradient(x))
    values = unique(np.ravel(x), True, **options)[0]
    plain = found.values if hasattr(found, "_replace") else found
    if np.shape(plain) == np.shape(values) and not np.array_equal(plain, stop_gradient(values), equal_nan=True):
        values = values[np.searchsorted(stop_gradient(values), plain)]  # NumPy's unsorted order (complex values)
    return found._replace(values=values) if hasattr(found, "_replace") else values


_SET_NOTES = """Each value takes its gradient from its first occurrence (in `ar1` before `ar2`),
      as in unique; the other copies get none."""

composite(np.unique_values, args="x", notes="As unique.")(lambda x: _unique_result("unique_values", x))
composite(np.unique_counts, args="x", notes="As unique; the counts are integers.")(
    lambda x: _unique_result("unique_counts", x))
composite(np.unique_inverse, args="x", notes="As unique; the inverse indices are integers.")(
    lambda x: _unique_result("unique_inverse", x))
composite(np.unique_all, args="x", notes="As unique; indices, inverse and counts are integers.")(
    lambda x: _unique_result("unique_all", x))


def _pool(*arrays):
    return np.concatenate([np.ravel(a) for a in arrays])


@composite(np.union1d, args="ar1, ar2", notes=_SET_NOTES)
def union1d(ar1, ar2):
    return unique(_pool(ar1, ar2))


@composite(np.intersect1d, args="ar1, ar2", notes=_SET_NOTES)
def intersect1d(ar1, ar2, assume_unique=False, return_indices=False):
    found = np.intersect1d(stop_gradient(ar1), stop_gradient(ar2), assume_unique, True)
    values = np.take(np.ravel(ar1), found[1])
    return (values,) + tuple(found[1:]) if return_indices else values


@composite(np.setdiff1d, args="ar1", notes=_SET_NOTES)
def setdiff1d(ar1, ar2, assume_unique=False):
    flat = np.ravel(ar1)
    plain = stop_gradient(flat)
    kept = ~np.isin(plain, stop_gradient(ar2), assume_unique=assume_unique)
    if assume_unique:
        return flat[kept]
    return unique(flat[kept])


@composite(np.setxor1d, args="ar1, ar2", notes=_SET_NOTES)
def setxor1d(ar1, ar2, assume_unique=False):
    plain = np.setxor1d(stop_gradient(ar1), stop_gradient(ar2), assume_unique)
    pool = _pool(ar1, ar2)
    first = np.unique(stop_gradient(pool), return_index=True)[1]
    values = np.take(pool, first)
    return values[np.isin(stop_gradient(values), plain)]


@composite(np.sort_complex, args="a", notes="As sort, with the result complex (its imaginary part carries no gradient for real input).")
def sort_complex(a):
    plain = np.sort_complex(stop_gradient(a))
    b = sort(a)
    return b if b.dtype == plain.dtype else b.astype(plain.dtype)
