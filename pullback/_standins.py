"""Plain-NumPy helpers that the engine and the rule tables share.

`getitem`, `index_update` and `astype` are the operations NumPy has no public function for
(`x[i]`, `x[i] = v`, `x.astype(t)`), written as functions so the rule tables can key on them.

>>> import numpy as np
>>> index_update(np.zeros(3), 1, 5.0)
array([0., 5., 0.])
"""

import numpy as np


def getitem(x, index):
    """`x[index]`, as a function the rule tables can key on."""
    return x[index]


def index_update(x, index, value):
    """A copy of `x` with `x[index] = value`: the functional form of an in-place write."""
    y = x.copy()
    y[index] = value
    return y


def astype(x, dtype):
    """`x.astype(dtype)` as a function."""
    return x.astype(dtype)


def dtype_of(x):
    """The dtype of an array, a traced value or a Python number (NumPy's rules for the latter)."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None:
        return dtype
    return np.result_type(x)


def is_traced(x):
    """Whether `x` is a value pullback is differentiating (reverse or forward mode)."""
    return getattr(type(x), "pullback_traced", False)
