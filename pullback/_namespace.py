"""The array API namespace of values being differentiated: what `x.__array_namespace__()` returns.

Array-API-aware libraries (SciPy with `SCIPY_ARRAY_API=1`, scikit-learn with
`array_api_dispatch=True`) ask an array for its namespace and call that namespace's functions.
NumPy 2's main namespace follows the standard, and its functions reach pullback's rules through
NumPy's dispatch, so this namespace is NumPy's, with the few functions that would convert a traced
value (or that NumPy lacks) written to keep it traced.

>>> import numpy as np, pullback as pb
>>> def logsumexp(x):
...     xp = x.__array_namespace__()
...     m = xp.max(x)
...     return m + xp.log(xp.sum(xp.exp(x - m)))
>>> pb.gradient(logsumexp, np.array([0.0, 0.0]))
(array([0.5, 0.5]),)
"""

import numpy as np

__array_api_version__ = getattr(np, "__array_api_version__", "2023.12")


def _is_traced(x):
    return getattr(type(x), "pullback_traced", False)


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """`obj` as an array: a traced value stays traced (converted to `dtype` if one is given)."""
    if _is_traced(obj):
        if dtype is not None and np.dtype(dtype) != obj.dtype:
            return obj.astype(dtype)
        return obj.copy() if copy else obj
    if isinstance(obj, (list, tuple)) and any(_is_traced(v) for v in obj):
        return np.stack([asarray(v, dtype=dtype) for v in obj])
    return np.asarray(obj, dtype=dtype, copy=copy)


def astype(x, dtype, /, *, copy=True, device=None):
    """`x.astype(dtype)`, traced or not."""
    if not copy and np.dtype(dtype) == x.dtype:
        return x
    return x.astype(dtype)


def __getattr__(name):
    """Every other name of the standard is NumPy's (its functions dispatch traced values to pullback's rules)."""
    try:
        return getattr(np, name)
    except AttributeError:
        raise AttributeError(f"module 'pullback' array namespace has no attribute {name!r}") from None
