"""Weight initialisers. Each takes an explicit `np.random.Generator`, a shape and a dtype.

Fan-in and fan-out follow the layouts of the layers: a 2-d `(out, in)` matrix (Dense),
or `(kernel..., in, out)` for convolution filters (the kernel size multiplies both fans).

>>> import numpy as np
>>> w = glorot_uniform(np.random.default_rng(0), (3, 4))
>>> w.dtype, w.shape, bool(np.all(np.abs(w) <= np.sqrt(6 / 7)))
(dtype('float32'), (3, 4), True)
"""

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["fans", "glorot_uniform", "glorot_normal", "kaiming_uniform", "kaiming_normal", "normal", "zeros", "ones"]

# What a layer's `init` argument is called with: `init(rng, shape, dtype)`, returning the array.
Initialiser = Callable[[np.random.Generator, tuple[int, ...], DTypeLike], np.ndarray]


def fans(shape: Sequence[int]) -> tuple[int, int]:
    """`(fan_in, fan_out)` of a weight of this shape.

    >>> fans((10, 3)), fans((3, 3, 16, 32))
    ((3, 10), (144, 288))
    """
    shape = tuple(shape)
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[1], shape[0]
    receptive = int(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


def _check(rng):
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"initialisers take a numpy.random.Generator (np.random.default_rng(seed)); got {type(rng).__name__}")


def glorot_uniform(rng: np.random.Generator, shape: Sequence[int], dtype: DTypeLike = np.float32, gain: float = 1.0) -> np.ndarray:
    """Uniform on [-a, a] with a = gain * sqrt(6 / (fan_in + fan_out)) (Xavier; Flux's default)."""
    _check(rng)
    fan_in, fan_out = fans(shape)
    bound = gain * np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-bound, bound, size=shape).astype(dtype)


def glorot_normal(rng: np.random.Generator, shape: Sequence[int], dtype: DTypeLike = np.float32, gain: float = 1.0) -> np.ndarray:
    """Normal with std = gain * sqrt(2 / (fan_in + fan_out))."""
    _check(rng)
    fan_in, fan_out = fans(shape)
    return (gain * np.sqrt(2.0 / (fan_in + fan_out)) * rng.standard_normal(shape)).astype(dtype)


def kaiming_uniform(
    rng: np.random.Generator, shape: Sequence[int], dtype: DTypeLike = np.float32, gain: float = np.sqrt(2.0),
    mode: str = "fan_in",
) -> np.ndarray:
    """Uniform on [-a, a] with a = gain * sqrt(3 / fan) (He); `mode` picks fan_in or fan_out."""
    _check(rng)
    bound = gain * np.sqrt(3.0 / _fan(shape, mode))
    return rng.uniform(-bound, bound, size=shape).astype(dtype)


def kaiming_normal(
    rng: np.random.Generator, shape: Sequence[int], dtype: DTypeLike = np.float32, gain: float = np.sqrt(2.0),
    mode: str = "fan_in",
) -> np.ndarray:
    """Normal with std = gain / sqrt(fan) (He); `mode` picks fan_in or fan_out."""
    _check(rng)
    return (gain / np.sqrt(_fan(shape, mode)) * rng.standard_normal(shape)).astype(dtype)


def _fan(shape, mode):
    fan_in, fan_out = fans(shape)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f'mode should be "fan_in" or "fan_out"; got {mode!r}')
    return fan_in if mode == "fan_in" else fan_out


def normal(rng: np.random.Generator, shape: Sequence[int], dtype: DTypeLike = np.float32, std: float = 0.01) -> np.ndarray:
    """Normal with mean 0 and standard deviation `std`."""
    _check(rng)
    return (std * rng.standard_normal(shape)).astype(dtype)


def zeros(rng: np.random.Generator | None, shape: Sequence[int], dtype: DTypeLike = np.float32) -> np.ndarray:
    """All zeros (`rng` is accepted for a uniform signature and unused)."""
    return np.zeros(shape, dtype=dtype)


def ones(rng: np.random.Generator | None, shape: Sequence[int], dtype: DTypeLike = np.float32) -> np.ndarray:
    """All ones (`rng` is accepted for a uniform signature and unused)."""
    return np.ones(shape, dtype=dtype)
