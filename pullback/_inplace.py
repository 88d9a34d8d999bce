"""In-place writes on traced values: a write makes the handle the user holds refer to a new value.

A traced array is a handle. `x[i] = v`, `x += y` and `ufunc(..., out=x)` compute the new value
functionally and rebind the handle to it, so every alias of the handle sees the change, as
in NumPy. A write into a handle that shares memory with another one still in use (a view)
is refused, since NumPy would write through to both.
"""

import weakref

import numpy as np

from ._registry import FUNCTIONS
from ._standins import astype, is_traced


def mark_view(view, base):
    """Record that `view` shares memory with `base` (both traced), so in-place writes can be refused."""
    view._base = base
    try:
        base._views.append(weakref.ref(view))
    except AttributeError:
        base._views = [weakref.ref(view)]


def _has_live_views(x):
    views = getattr(x, "_views", None)
    return bool(views) and any(ref() is not None for ref in views)


def holds_array(x):
    """Whether traced `x` stands for a (mutable) NumPy array rather than an immutable scalar."""
    while is_traced(x):
        x = x._value
    return isinstance(x, np.ndarray)


def in_place(handle, new):
    """`handle op= value`. An array handle takes the new value, so every alias of it sees the
    change as in NumPy; a scalar is immutable, so only the name is rebound (to `new`)."""
    if not holds_array(handle):
        return new
    rebind(handle, new)
    return handle


def rebind(handle, new):
    """Make `handle` (a traced value the user holds) refer to `new`: how in-place writes work."""
    if getattr(handle, "_base", None) is not None or _has_live_views(handle):
        raise ValueError(
            "In-place write to a traced array that shares memory with another one still in use "
            "(a view such as x[1:], x.T or x.reshape(...), or an array such a view was taken of). "
            "NumPy would write through to both, which pullback does not follow. "
            "Write into a copy (y = x.copy()) or build the result with np.where / np.concatenate."
        )
    if type(new) is not type(handle):
        raise TypeError(
            "In-place write would mix forward-mode and reverse-mode values in one array; "
            "assign to a new variable instead (y = x + v)."
        )
    if new.shape != handle.shape:
        raise ValueError(f"In-place operation would change the shape from {handle.shape} to {new.shape}")
    if new.dtype != handle.dtype:
        new = FUNCTIONS[astype](new, handle.dtype)
    for name in type(handle).__slots__ + ("_value", "_tape"):
        setattr(handle, name, getattr(new, name))
