"""Rules for 1-D convolution and correlation, in all three modes ('full', 'same', 'valid'), in
both modes of differentiation. Both are windows of one full convolution, a primitive whose rules
are convolutions again (so they can be differentiated again)."""

import numpy as np

from .._extend import primitive, rrule
from .._tangents import Thunk
from ._register import add_tangents, composite, forward_rule


@primitive
def convolve_full(a, v):
    """`np.convolve(a, v, 'full')` for 1-D arrays, as a primitive whose rule uses itself."""
    return np.convolve(a, v, "full")


@rrule(convolve_full)
def convolve_full_rule(a, v):
    na, nv = np.shape(a)[0], np.shape(v)[0]
    y = convolve_full(a, v)

    def back(g):
        return (
            Thunk(lambda: convolve_full(g, np.flip(v))[nv - 1:nv - 1 + na]),
            Thunk(lambda: convolve_full(g, np.flip(a))[na - 1:na - 1 + nv]),
        )

    return y, back


@forward_rule(convolve_full)
def convolve_full_frule(primals, tangents):
    (a, v), (ta, tv) = primals, tangents
    return convolve_full(a, v), add_tangents(None if ta is None else convolve_full(ta, v),
                                             None if tv is None else convolve_full(a, tv))


_MODES_BY_NUMBER = {0: "valid", 1: "same", 2: "full"}


def _mode_window(full, m, n, mode, flipped):
    mode = _MODES_BY_NUMBER.get(mode, mode) if isinstance(mode, int) else mode  # NumPy takes 0, 1, 2 too
    short = min(m, n)
    if mode == "full":
        return full
    if mode == "valid":
        start, length = short - 1, max(m, n) - short + 1
    elif mode == "same":
        start = short // 2 if flipped and n > m else short - 1 - short // 2
        length = max(m, n)
    else:
        raise ValueError(f"mode must be one of 'valid', 'same' or 'full' (got {mode!r})")
    return full[start:start + length]


def _check_1d(a, v):
    a, v = np.atleast_1d(a), np.atleast_1d(v)
    if np.ndim(a) != 1 or np.ndim(v) != 1:
        raise ValueError("object too deep for desired array: convolve and correlate take 1-D arrays")
    if np.size(a) == 0 or np.size(v) == 0:
        raise ValueError("convolve and correlate need non-empty arrays")
    return a, v


@composite(np.convolve, args="a, v", numpy_value=True, notes="1-D, all three modes.")
def convolve(a, v, mode="full"):
    a, v = _check_1d(a, v)
    return _mode_window(convolve_full(a, v), np.shape(a)[0], np.shape(v)[0], mode, False)


@composite(np.correlate, args="a, v", numpy_value=True, notes="1-D, all three modes; a complex `v` is conjugated, as in NumPy.")
def correlate(a, v, mode="valid"):
    a, v = _check_1d(a, v)
    v = np.conjugate(v) if np.iscomplexobj(v) else v
    return _mode_window(convolve_full(a, np.flip(v)), np.shape(a)[0], np.shape(v)[0], mode, True)
