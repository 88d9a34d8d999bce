"""Array types besides NumPy's: which ones pullback accepts, and arrays built to match an input.

An array of any library that speaks NumPy's protocols (NEP 18: `__array_function__` and
`__array_ufunc__`, with `shape` and `dtype`), such as a Dask or CuPy array, flows through
pullback as it is: the rules call NumPy functions on it and its library computes. An array
that speaks only the array API standard (`__array_namespace__`, as array_api_strict's does) is
differentiated as a NumPy array (read through DLPack) and its gradient converted back.

Nothing here imports another array library.

>>> import numpy as np
>>> is_foreign_array(np.ones(2)), type(zeros_as(np.ones(2), (3,)))
(False, <class 'numpy.ndarray'>)
"""

import math
import operator

import numpy as np

from ._standins import is_stand_in

try:
    from numpy.lib.array_utils import normalize_axis_index
except ImportError:  # NumPy 1.x
    from numpy.core.multiarray import normalize_axis_index

_NEP18: dict[type, bool] = {}
_API_ONLY: dict[type, bool] = {}
_FOREIGN: dict[type, bool] = {np.ndarray: False, float: False, int: False}  # is_foreign_array_type, cached


def speaks_nep18(cls):
    """Whether instances of `cls` are arrays of another library that NumPy functions dispatch to.

    NumPy's own arrays and scalars, and pullback's traced values and containers, are not.
    """
    found = _NEP18.get(cls)
    if found is None:
        found = _NEP18[cls] = (
            hasattr(cls, "__array_function__") and hasattr(cls, "__array_ufunc__")
            and hasattr(cls, "shape") and hasattr(cls, "dtype")
            and not issubclass(cls, (np.ndarray, np.generic))
            and not getattr(cls, "pullback_traced", False) and not hasattr(cls, "__stop_gradient__")
        )
    return found


def speaks_array_api_only(cls):
    """Whether instances of `cls` are array-API arrays that NumPy functions do not dispatch to."""
    found = _API_ONLY.get(cls)
    if found is None:
        found = _API_ONLY[cls] = (
            hasattr(cls, "__array_namespace__") and hasattr(cls, "shape") and hasattr(cls, "dtype")
            and not speaks_nep18(cls) and not issubclass(cls, (np.ndarray, np.generic))
            and not getattr(cls, "pullback_traced", False)
        )
    return found


def is_foreign_array(x):
    """Whether `x` is an array of another library that pullback accepts (NEP 18 or array API).

    >>> is_foreign_array(np.float64(1.0)), is_foreign_array([1.0])
    (False, False)
    """
    found = _FOREIGN.get(type(x))
    return is_foreign_array_type(type(x)) if found is None else found


def is_foreign_array_type(cls):
    """`is_foreign_array` for the instances of `cls`."""
    found = _FOREIGN.get(cls)
    if found is None:
        found = _FOREIGN[cls] = speaks_nep18(cls) or speaks_array_api_only(cls)
    return found


def numpy_backed(x):
    """Whether `x` is a NumPy array, or `pb.jit`'s stand-in for one (its replay computes with
    NumPy): not a value being differentiated again, nor another library's array.

    >>> numpy_backed(np.ones(2)), numpy_backed(1.0)
    (True, False)
    """
    return type(x) is np.ndarray or getattr(type(x), "_concrete", None) is not None


def of_another_library(x):
    """Whether `x` is another library's array (Dask's, CuPy's): `is_foreign_array`, less `pb.jit`'s
    stand-ins, whose replay computes with NumPy (`np.add.at` and all)."""
    return is_foreign_array(x) and not is_stand_in(x)


def stand_in_among(parts):
    """The first of `parts` (an index tuple, or one part) that is a `pb.jit` stand-in, or None."""
    for p in parts if type(parts) is tuple else (parts,):
        if is_stand_in(p):
            return p
    return None


def as_array_of_its_library(x, dtype=None):
    """`np.asarray(x, dtype)`, but another library's array or a `pb.jit` stand-in stays of its type
    (cast with `astype` where its dtype differs), so that no value is read.

    >>> as_array_of_its_library([1, 2], np.intp).dtype == np.intp
    True
    """
    if is_foreign_array(x):
        return x if dtype is None or x.dtype == dtype else x.astype(dtype)
    return np.asarray(x, dtype=dtype)


def values_deciding_shape(x, dtype=None):
    """`as_array_of_its_library(x, dtype)` for values that decide the shape of a result (np.compress's condition,
    np.repeat's counts): a Dask array is computed, since a shape read from a lazy one is unknown (NaN); a `pb.jit`
    stand-in stays, its values read by recorded calls.

    >>> values_deciding_shape([True, False]).dtype
    dtype('bool')
    """
    if is_dask_array(x):
        return np.asarray(x, dtype=dtype)
    return as_array_of_its_library(x, dtype)


def indexable_by(a, index):
    """Array `a`, to be indexed by `index`: a NumPy array becomes a `pb.jit` stand-in when `index` holds one, since
    indexing a NumPy array with a stand-in would read its values, which the replay could not follow.

    >>> indexable_by(np.arange(3), [0, 2])[[0, 2]]
    array([0, 2])
    """
    stand_in = stand_in_among(index) if type(a) is np.ndarray else None
    return a if stand_in is None else np.asarray(a, like=stand_in)


def dtype_kind(x):
    """The NumPy dtype kind (`"f"`, `"c"`, `"i"`, ...) of an array of another library.

    >>> dtype_kind(np.ones(2, np.float32))
    'f'
    """
    dtype = x.dtype
    if isinstance(dtype, np.dtype):
        return dtype.kind
    try:
        return np.dtype(dtype).kind
    except TypeError:  # an array-API dtype object NumPy does not know
        xp = x.__array_namespace__()
        for kind, name in (("f", "real floating"), ("c", "complex floating"), ("b", "bool")):
            if xp.isdtype(dtype, name):
                return kind
        return "i"


def type_name(x):
    """`numpy.ndarray`, `dask.array.core.Array`: the array type of `x` as messages name it."""
    cls = type(x)
    return f"{cls.__module__}.{cls.__qualname__}"


def zeros_as(like, shape, dtype=None):
    """Zeros of `shape` of `like`'s array type (a NumPy array when `like` is NumPy's, or a number).

    >>> zeros_as(np.ones(2, np.float32), (2, 2)).dtype
    dtype('float32')
    """
    if type(like) in (list, tuple):  # a nested sequence of numbers (np.result_type would read it as a dtype spec)
        like = np.asarray(like)
    if type(like) is np.ndarray or not speaks_nep18(type(like)):
        return np.zeros(shape, dtype=np.result_type(like) if dtype is None else dtype)
    if not all(n == n for n in shape):  # a Dask length unknown until computed: only like's own chunks can give it
        if not same_shape(np.shape(like), tuple(shape)):
            raise ValueError(f"Zeros of shape {shape}, holding a length unknown until computed, cannot be made "
                             f"from an array of shape {np.shape(like)}: call x.compute_chunk_sizes() first.")
        return np.zeros_like(like, dtype=dtype)
    return np.zeros_like(like, shape=shape, dtype=dtype)


def like_input(a, like):
    """The NumPy constant `a` (an identity matrix, weights) as an array of `like`'s type, to combine with it.

    >>> like_input(np.eye(2), np.ones(3)) is not None
    True
    """
    while getattr(type(like), "pullback_traced", False):  # the plain value inside a traced one
        like = like._value
    if type(like) is np.ndarray or not speaks_nep18(type(like)):
        return a
    return np.asarray(a, like=like)


def as_type_of(g, primal):
    """`g` as an array of `primal`'s array type, when `g` is a NumPy array and `primal` another library's.

    >>> as_type_of(np.ones(1), np.zeros(2))
    array([1.])
    """
    cls = type(primal)
    if cls is np.ndarray:
        return g
    if not isinstance(g, (np.ndarray, np.generic, float)):
        return in_chunks_of(g, primal)
    if speaks_nep18(cls):
        return in_chunks_of(np.asarray(g, like=primal), primal)
    if speaks_array_api_only(cls):
        return as_array_api(g, primal, primal.dtype)
    return g


def as_array_api(a, like, dtype=None):
    """NumPy value `a` as an array of array-API-only array `like`'s library, on `like`'s device
    (array_api_strict has several; a GPU library's would be the argument's GPU). Other values
    (a traced value of an outer level, an object) are returned as they are."""
    if not isinstance(a, (np.ndarray, np.generic, float, complex)):
        return a
    device = getattr(like, "device", None)
    options = {} if device is None else {"device": device}
    return like.__array_namespace__().asarray(np.asarray(a), dtype=dtype, **options)


def as_numpy(x):
    """An array-API-only array `x` as a NumPy array (through DLPack, without copying on the CPU), a `np.memmap`
    as an ndarray of its memory (it computes as one, but its views keep its type); others as they are."""
    if type(x) is np.memmap:
        return x.view(np.ndarray)
    if _FOREIGN.get(type(x)) is not False and speaks_array_api_only(type(x)):
        try:
            return np.from_dlpack(x)
        except (TypeError, BufferError, RuntimeError):
            return np.asarray(x)
    return x


def without_memmaps(args):
    """`args` of a NumPy call with each `np.memmap` in it, or in a list, tuple or dict in it, read as an ndarray.

    >>> import tempfile, os
    >>> m = np.memmap(os.path.join(tempfile.mkdtemp(), "m"), mode="w+", shape=(2,))
    >>> [type(a).__name__ for a in without_memmaps(([m, 1.0], m))]
    ['list', 'ndarray']
    """
    if type(args) is np.memmap:
        return args.view(np.ndarray)
    if type(args) in (list, tuple):
        return type(args)(without_memmaps(a) for a in args)
    if type(args) is dict:
        return {k: without_memmaps(v) for k, v in args.items()}
    return args


def holds_foreign_array(x):
    """Whether `x`, or the plain value inside a traced `x`, is another library's array: a branch on
    its values (`if np.any(x == 0)`) would make a Dask array compute, so take the branch that is
    right either way.

    >>> holds_foreign_array(np.ones(2))
    False
    """
    while getattr(type(x), "pullback_traced", False):
        x = x._value
    return is_foreign_array(x)


def rechunked_like(a, like):
    """Dask array `a` in the chunks of Dask array `like` of the same shape, where they differ (as a concatenation
    leaves them: repeated, the chunks would only get smaller); other values as they are."""
    chunks = getattr(like, "chunks", None)
    if chunks is None or not hasattr(a, "rechunk") or getattr(a, "chunks", None) == chunks:
        return a
    return a.rechunk(chunks)


def in_chunks_of(g, primal):
    """Dask gradient `g` in the chunks of Dask array `primal` of the same shape: the rules leave a gradient in
    the chunks their products, broadcasts and gathers made (one chunk, or slivers), and the gradient of an
    argument is read, and added to it, block by block. Other values as they are."""
    chunks = getattr(primal, "chunks", None)
    if (chunks is None or not is_dask_array(g) or not is_dask_array(primal) or g.chunks == chunks
            or g.shape != primal.shape or not all(n == n for n in primal.shape)):
        return g
    return g.rechunk(chunks)


def is_dask_array(x):
    """Whether `x` is a Dask array: its `x[i, j]` takes one index array at most ("nd fancy indexing"),
    and NumPy's sort computes it whole.

    >>> is_dask_array(np.ones(2))
    False
    """
    return type(x).__module__.startswith("dask.") and hasattr(x, "chunks")


def same_shape(a, b):
    """Whether shapes `a` and `b` are equal, a length unknown until computed (NaN, a Dask array's) equal to
    another unknown one.

    >>> same_shape((float("nan"), 2), (float("nan"), 2)), same_shape((3, 2), (2, 3))
    (True, False)
    """
    return a == b or (len(a) == len(b) and all(m == n or (m != m and n != n) for m, n in zip(a, b)))


def size_of(x):
    """`np.size(x)` read from the shape, where that is known: `np.size` of a Dask array computes the array.

    >>> size_of(np.ones((2, 3)))
    6
    """
    shape = np.shape(x)
    if all(n == n for n in shape):  # a NaN: a Dask array's size unknown until computed
        return math.prod(shape)
    return np.size(x)


def copy_laid_out_as(a):
    """A copy of NumPy array `a` in memory of its own, with `a`'s strides (and writeable flag): NumPy's
    choices between a view and a copy (`ravel`, `reshape`) are the same for it as for `a`.

    >>> x = np.arange(6.0).reshape(2, 3).T
    >>> c = copy_laid_out_as(x)
    >>> c.strides == x.strides, np.shares_memory(c, x), bool((c == x).all())
    (True, False, True)
    """
    if a.size == 0:
        return a.copy(order="K")
    reach = [(n - 1) * stride for n, stride in zip(a.shape, a.strides)]
    lowest, highest = sum(min(r, 0) for r in reach), sum(max(r, 0) for r in reach)
    memory = np.empty(highest - lowest + a.itemsize, np.uint8)
    copy = np.ndarray(a.shape, a.dtype, memory, offset=-lowest, strides=a.strides)
    copy[...] = a
    copy.flags.writeable = a.flags.writeable
    return copy


def axis_index(axis, ndim):
    """`axis` (negative counts from the end) as an index below `ndim`; NumPy's AxisError if out of range.

    >>> axis_index(-1, 3)
    2
    """
    return normalize_axis_index(operator.index(axis), ndim)


def sharing_memory(arrays, among=None):
    """Two positions in `arrays` whose NumPy arrays share memory (one of them in `among`, if given), or None:
    a sweep of their byte spans, then NumPy's exact check on the spans that overlap.

    >>> x = np.arange(6.0)
    >>> sharing_memory([x[:3], np.ones(2), x[2:]])
    (0, 2)
    """
    # Arrays whose memory NumPy allocated overlap only when one owner holds it: only those groups (and
    # arrays on memory NumPy did not allocate, which any of them may hold) are swept.
    groups = {}
    for k, a in enumerate(arrays):
        if type(a) is np.ndarray and a.size:
            groups.setdefault(memory_key(a), []).append(k)
    for members in groups.values():
        if len(members) > 1:
            found = _overlapping(arrays, members, among)
            if found is not None:
                return found
    return None


def memory_key(a):
    """The id of the array that allocated NumPy array `a`'s memory (through views, and memoryviews of
    arrays), or None for memory NumPy did not allocate (a bytes object, a mapped file): two arrays share
    memory only if their keys are equal.

    >>> x = np.arange(4.0)
    >>> memory_key(x[1:]) == memory_key(x.reshape(2, 2).T) == id(x), memory_key(np.frombuffer(b"12345678"))
    (True, None)
    """
    while True:
        base = a.base if isinstance(a, np.ndarray) else getattr(a, "obj", None)  # a memoryview's object
        if base is None:
            return id(a) if isinstance(a, np.ndarray) else None
        a = base


def _overlapping(arrays, members, among):
    """`sharing_memory` for the arrays at positions `members`: a sweep of their byte spans."""
    spans = []
    for k in members:
        a = arrays[k]
        start = end = a.__array_interface__["data"][0]
        for n, stride in zip(a.shape, a.strides):
            start, end = start + min((n - 1) * stride, 0), end + max((n - 1) * stride, 0)
        spans.append((start, end + a.itemsize, k))
    spans.sort()
    for i, (_, end, k) in enumerate(spans):
        for start, _, j in spans[i + 1:]:
            if start >= end:
                break
            if (among is None or k in among or j in among) and np.shares_memory(arrays[k], arrays[j]):
                return min(k, j), max(k, j)
    return None
