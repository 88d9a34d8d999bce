"""Rules for arrays built from differentiable numbers, in both modes: linspace, logspace and
geomspace (in start and stop, and logspace's base), vander (in x) and bincount (in its weights).
All are compositions of operations that have rules of their own.
"""

import numpy as np

from .._arrays import as_array_of_its_library
from .._values import Traced, stop_gradient, strip_all
from ._register import composite
from .indexing import unindex


def _even_steps(start, stop, num, endpoint, axis):
    """`start + k/div * (stop - start)` for k = 0 .. num-1 along a new first axis, the last one `stop`
    exactly with `endpoint`, as NumPy computes; and the step."""
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    delta = stop - start
    div = num - 1 if endpoint else num
    shape = (-1,) + (1,) * np.ndim(delta)
    k = np.reshape(np.arange(num, dtype=np.float64), shape)
    if div > 0:
        step = delta / div
        y = start + k * step
        if endpoint and num > 1:
            y = np.concatenate([y[:-1], np.broadcast_to(stop, np.shape(y[-1:]))], axis=0)
    else:
        step = np.nan  # as NumPy: no step between fewer than two samples
        y = start + k * delta * 0.0
    return y, step


def _finish(y, plain, axis):
    y = np.moveaxis(y, 0, axis) if np.ndim(y) > 1 else y
    if np.result_type(plain).kind not in "fc":
        return plain  # integer samples: piecewise constant
    return y if y.dtype == plain.dtype else y.astype(plain.dtype)


@composite(np.linspace, args="start, stop", numpy_value=True, notes="""Every `num`, `endpoint`, `axis` and `retstep` (the step
           is differentiable too); with `endpoint` the last sample is `stop` exactly, as in NumPy.""")
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    plain, plain_step = np.linspace(stop_gradient(start), stop_gradient(stop), num, endpoint, True, dtype, axis)
    y, step = _even_steps(start, stop, int(num), endpoint, axis)
    y = _finish(y, plain, axis)
    if not retstep:
        return y
    if np.result_type(plain_step).kind == "f" and isinstance(step, Traced) and step.dtype != np.result_type(plain_step):
        step = step.astype(np.result_type(plain_step))
    return y, step


@composite(np.logspace, args="start, stop, base", numpy_value=True, notes="`base ** linspace(start, stop)`; the base is differentiable.")
def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    plain = np.logspace(stop_gradient(start), stop_gradient(stop), num, endpoint, stop_gradient(base), dtype, axis)
    y, _ = _even_steps(start, stop, int(num), endpoint, 0)
    if np.ndim(base) > 0:
        base = np.expand_dims(base, 0)
    y = np.power(base, y)
    return _finish(y, plain, axis)


@composite(np.geomspace, args="start, stop", numpy_value=True, notes="""Real start and stop of the same sign; the ends are
           `start` and `stop` exactly, as in NumPy.""")
def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    plain = np.geomspace(stop_gradient(start), stop_gradient(stop), num, endpoint, dtype, axis)
    if plain.dtype.kind == "c":
        raise TypeError("numpy.geomspace of complex values is not differentiable by pullback (its rule is written for "
                        "real ends); write start * (stop / start) ** (np.arange(num) / (num - 1)) instead.")
    num = int(num)
    div = num - 1 if endpoint else num
    ratio = stop / start
    shape = (-1,) + (1,) * np.ndim(ratio)
    k = np.reshape(np.arange(num, dtype=np.float64), shape)
    y = start * np.abs(ratio) ** (k / max(div, 1)) if div > 0 else start + 0.0 * k * ratio
    if num > 0:
        y = np.concatenate([np.broadcast_to(start + 0.0 * ratio, np.shape(y[:1])), y[1:]], axis=0)
    if endpoint and num > 1:
        y = np.concatenate([y[:-1], np.broadcast_to(stop + 0.0 * ratio, np.shape(y[-1:]))], axis=0)
    return _finish(y, plain, axis)


@composite(np.vander, args="x", numpy_value=True, notes="Powers of x with integer exponents.")
def vander(x, N=None, increasing=False):
    plain = np.vander(stop_gradient(x), N, increasing)
    n = np.shape(plain)[1]
    powers = np.arange(n) if increasing else np.arange(n - 1, -1, -1)
    if np.shape(x)[0] == 0 or n == 0 or plain.dtype.kind not in "fc":
        return plain
    y = np.power(np.reshape(x, (-1, 1)), powers)
    return y if y.dtype == plain.dtype else y.astype(plain.dtype)


@composite(np.bincount, args="weights", numpy_value=True, notes="The weights summed per bin; the counts themselves are integers.")
def bincount(x, /, weights=None, minlength=0):
    plain = np.bincount(stop_gradient(x), strip_all(weights), minlength)
    if not isinstance(weights, Traced):
        return plain
    y = unindex(weights, as_array_of_its_library(stop_gradient(x), np.intp), np.shape(plain))
    return y if y.dtype == plain.dtype else y.astype(plain.dtype)
