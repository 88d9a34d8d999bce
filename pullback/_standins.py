"""Plain-NumPy helpers that the engine and the rule tables share.

`getitem`, `index_update`, `astype` and `power` are the operations NumPy has no public function for
(`x[i]`, `x[i] = v`, `x.astype(t)`, `x ** y`), written as functions so the rule tables can key on them.

>>> import numpy as np
>>> index_update(np.zeros(3), 1, 5.0)
array([0., 5., 0.])
"""

import numpy as np


def getitem(x, index):
    """`x[index]`, as a function the rule tables can key on."""
    return x[index]


def index_update(x, index, value):
    """A copy of `x` with `x[index] = value`: the functional form of an in-place write, which keeps x's memory
    order as NumPy's write does (another library's array is copied by its own `copy()`)."""
    y = x.copy(order="K") if isinstance(x, np.ndarray) or is_stand_in(x) else x.copy()
    y[index] = value
    return y


def astype(x, dtype):
    """`x.astype(dtype)` as a function (of a Python number too: the NumPy number of that dtype)."""
    return x.astype(dtype) if hasattr(x, "astype") else np.dtype(dtype).type(x)


def power(x, y):
    """`x ** y`: NumPy's operator takes shortcuts np.power does not (`x ** 2` is np.square, `x ** 0.5`
    np.sqrt, `x ** -1` np.reciprocal; a NumPy scalar's is the C library's pow), which round differently."""
    return x ** y


def dtype_of(x):
    """The dtype of an array, a traced value or a Python number (NumPy's rules for the latter)."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None:
        return dtype
    kind = x.__class__
    if kind is not type(x):  # a `pb.jit` stand-in for a Python number: the dtype depends on its type alone
        return np.result_type(kind(0))
    return np.result_type(x)


def is_python_float(x):
    """Whether `x` is a Python float, or a `pb.jit` stand-in for one (`isinstance(x, float)` holds for it, but its
    type is its own; NumPy's float64, a subclass of float, is neither)."""
    return type(x) is float or (is_number_stand_in(x) and x.__class__ is float)


def is_number_stand_in(x):
    """Whether `x` is a `pb.jit` stand-in for a Python int, float or complex."""
    return hasattr(type(x), "__pullback_value__")


def is_jit_float_or_complex(x):
    """Whether `x` is a `pb.jit` stand-in for a Python float or complex: differentiated as it is, so that the
    recorded derivative is replayed at each call's value."""
    return is_number_stand_in(x) and x.__class__ in (float, complex)


# adding a negative zero (of both parts, for a complex) changes no number, the sign of a zero included
_NEGATIVE_ZEROS = {float: np.float64(-0.0), complex: np.complex128(complex(-0.0, -0.0))}


def as_numpy_number(x):
    """A `pb.jit` stand-in for a Python float or complex as the NumPy number a ufunc makes of it (np.float64,
    np.complex128), recorded: NumPy would read its value, fixed by a guard."""
    return x + _NEGATIVE_ZEROS[x.__class__]


def shape_of(x):
    """`np.shape(x)`, where `x` may be a `pb.jit` stand-in for a Python number (a scalar: NumPy would read its
    value, fixed by a guard)."""
    return () if is_number_stand_in(x) else np.shape(x)


def is_traced(x):
    """Whether `x` is a value pullback is differentiating (reverse or forward mode)."""
    return getattr(type(x), "pullback_traced", False)


def is_stand_in(x):
    """Whether `x` is a `pb.jit` stand-in for an array (a Symbol of a trace)."""
    return hasattr(type(x), "__pullback_traced_value__")


def traced_value(x):
    """The value a `pb.jit` stand-in `x` had in its trace (its type tells a NumPy scalar from a 0-d
    array); `x` itself otherwise."""
    return x.__pullback_traced_value__() if is_stand_in(x) else x


def converted(x, kind):
    """`kind(x)` (float, a NumPy scalar type, np.asarray); for a `pb.jit` stand-in, recorded, so that each
    replay converts its own value (`float(x)` would fix the traced one by a guard)."""
    convert = getattr(type(x), "__pullback_convert__", None)
    return kind(x) if convert is None else convert(x, kind)
