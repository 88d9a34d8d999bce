"""Rules for sorting, in both modes: sort, partition and unique, whose gradients follow the
elements; and the searching, counting and ordering functions (argsort, argmax, nonzero, ...),
which return indices and carry no gradient."""

import numpy as np

from .._values import stop_gradient
from ._register import composite, without_gradient
from .indexing import take_along_axis


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


without_gradient(np.argsort, np.argpartition, np.argmax, np.argmin, np.nonzero, np.flatnonzero, np.searchsorted,
                 np.digitize)
