"""Normalisation layers: BatchNorm (batch statistics, running averages) and LayerNorm.

Channels are the last axis (NHWC images, `(batch, features)` matrices), so batch
normalisation reduces over every other axis of a contiguous `(rows, channels)` view.
"""

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .._arrays import numpy_backed, size_of
from .._derivatives import runs_f_again
from .._extend import primitive, rrule
from .._jit_trace import JitError
from .._standins import is_stand_in
from .._tangents import Thunk
from .._values import stop_gradient
from .layers import check_sizes
from .modes import is_training

__all__ = ["BatchNorm", "LayerNorm", "batch_norm"]


def _moments(x2):
    """Mean and (biased) variance over axis 0 of a `(rows, channels)` array."""
    inv_m = 1.0 / x2.shape[0]
    mean = np.sum(x2, axis=0) * inv_m
    centred = x2 - mean
    if numpy_backed(centred):
        return mean, np.einsum("ij,ij->j", centred, centred) * inv_m
    return mean, np.sum(centred * centred, axis=0) * inv_m


def _affine(x2, mean, var, scale, shift, eps):
    """`(x2 - mean) / sqrt(var + eps) * scale + shift` as `x2 * a + b`: two passes over x2."""
    invstd = 1.0 / np.sqrt(var + eps)
    a = scale * invstd
    return x2 * a + (shift - mean * a), invstd


def _products(g2, x2):
    """Per-channel sums of g2 and of g2 * x2."""
    if numpy_backed(g2) and numpy_backed(x2):
        return np.sum(g2, axis=0), np.einsum("ij,ij->j", g2, x2)
    return np.sum(g2, axis=0), np.sum(g2 * x2, axis=0)


@primitive
def _batch_norm(x, scale, shift, *, mean, var, eps):
    """Normalise `x` over all axes but the last, with `mean` and `var` its own batch moments."""
    c = x.shape[-1]
    return _affine(x.reshape(-1, c), mean, var, scale, shift, eps)[0].reshape(x.shape)


@rrule(_batch_norm)
def _batch_norm_rule(x, scale, shift, *, mean, var, eps):
    shape, c = x.shape, x.shape[-1]
    x2 = np.reshape(x, (-1, c))
    if not numpy_backed(x):  # differentiated again: the moments must be functions of x
        mean, var = _moments(x2)
    y, invstd = _affine(x2, mean, var, scale, shift, eps)
    inv_m = 1.0 / x2.shape[0]

    def back(g):
        # With xhat = (x - mean) * invstd and k = scale * invstd, the textbook
        #   dx = k * (g - mean(g) - xhat * mean(g * xhat))
        # is g * k + x * alpha + beta for per-channel alpha and beta, and
        #   dscale = sum(g * xhat) = invstd * (sum(g * x) - mean * sum(g)),
        # so xhat is never formed: a few passes over the data instead of a dozen.
        g2 = np.reshape(g, (-1, c))
        dshift, gx = _products(g2, x2)
        dscale = invstd * (gx - mean * dshift)

        def dx():
            k = scale * invstd
            alpha = -k * invstd * (dscale * inv_m)
            beta = -k * (dshift * inv_m) - alpha * mean
            return np.reshape(g2 * k + (x2 * alpha + beta), shape)

        return Thunk(dx), dscale, dshift

    return np.reshape(y, shape), back


def _is_half(value):
    return getattr(value, "dtype", None) == np.float16


def _normalise_batch(x, scale, shift, eps):
    """`(y, mean, var)`: `x` normalised with its batch's own moments over all axes but the last.

    float16 values are normalised in float32 and the result given back in float16 (as PyTorch
    does): summed in float16, a few thousand values lose whole digits, and the moments with them.
    """
    half = _is_half(x) and all(_is_half(v) or not hasattr(v, "dtype") for v in (scale, shift))
    x, scale, shift = (v.astype(np.float32) if _is_half(v) else v for v in (x, scale, shift))
    mean, var = _moments(np.reshape(stop_gradient(x), (-1, np.shape(x)[-1])))
    y = _batch_norm(x, scale, shift, mean=mean, var=var, eps=eps)
    return (y.astype(np.float16) if half else y), mean, var


def batch_norm(x: Any, scale: Any, shift: Any, eps: float = 1e-5) -> Any:
    """Batch normalisation with the batch's own statistics over all axes but the last.

    >>> import numpy as np
    >>> y = batch_norm(np.array([[1.0], [3.0]]), np.ones(1), np.zeros(1), eps=0.0)
    >>> y[:, 0]
    array([-1.,  1.])
    """
    return _normalise_batch(x, scale, shift, eps)[0]


class BatchNorm:
    """Batch normalisation over the last (channel) axis, then `activation`.

    Trainable: `scale` and `shift` (PyTorch's weight and bias; None when `affine=False`).
    `running_mean` and `running_var` are not trainable: in training mode they are
    updated in place, `running = (1 - momentum) * running + momentum * batch` (the batch
    variance unbiased), as in PyTorch and Flux; in evaluation mode they normalise.
    See `pb.nn.modes` for when a layer is in training mode.

    >>> import numpy as np, pullback as pb
    >>> bn = pb.nn.BatchNorm(2)
    >>> bn
    BatchNorm(2)
    >>> y = pb.nn.trainmode(bn)(np.array([[1.0, 0.0], [3.0, 0.0]], dtype=np.float32))
    >>> bn.running_mean
    array([0.2, 0. ], dtype=float32)
    """

    def __init__(
        self, channels: int, activation: Callable[[Any], Any] | None = None, *, eps: float = 1e-5, momentum: float = 0.1,
        affine: bool = True, dtype: DTypeLike = np.float32, training: bool | None = None,
    ) -> None:
        check_sizes("BatchNorm", "BatchNorm(channels, activation)", channels=channels)
        _check_momentum(momentum)
        self.scale = np.ones(channels, dtype=dtype) if affine else None
        self.shift = np.zeros(channels, dtype=dtype) if affine else None
        self.running_mean = np.zeros(channels, dtype=dtype)
        self.running_var = np.ones(channels, dtype=dtype)
        self.activation = activation
        self.eps = eps
        self.momentum = momentum
        self.training = training

    def trainable(self) -> tuple[str, ...]:
        return ("scale", "shift")

    def __call__(self, x: Any) -> Any:
        c = self.running_mean.shape[0]
        if np.shape(x)[-1] != c:
            raise ValueError(f"BatchNorm({c}) got input with {np.shape(x)[-1]} channels (last axis) in shape {np.shape(x)}")
        scale = self.scale if self.scale is not None else np.ones(c, dtype=self.running_mean.dtype)
        shift = self.shift if self.shift is not None else np.zeros(c, dtype=self.running_mean.dtype)
        if is_training(self, x, self.scale, self.shift):
            if size_of(x) // max(c, 1) < 2:  # the unbiased variance for the running average is undefined
                raise ValueError(f"BatchNorm({c}) in training mode needs more than one value per channel; got input "
                                 f"of shape {np.shape(x)}. Use a larger batch, or evaluation mode (pb.nn.testmode).")
            y, mean, var = _normalise_batch(x, scale, shift, self.eps)
            self._update_running(mean, var, size_of(x) // c)
        else:
            a = scale / np.sqrt(self.running_var + self.eps)
            y = x * a + (shift - self.running_mean * a)
        return y if self.activation is None else self.activation(y)

    def _update_running(self, mean, var, m):
        keep, new = 1.0 - self.momentum, self.momentum
        unbiased = var * (m / max(m - 1, 1))
        again = runs_f_again()
        if again is not None:
            raise RuntimeError(
                f"pb.{again} runs f once per input or output element, and a BatchNorm layer in training mode updates its "
                "running statistics at every run: they would move many times instead of once. Call the model in "
                "evaluation mode inside f (pb.nn.testmode(model), or training=False on the layer), and call it once "
                "outside to update the statistics.")
        # In place: inside a gradient call this layer is a copy, but these arrays are the user's.
        if type(self.running_mean) is np.ndarray and is_stand_in(mean):
            raise JitError("pb.jit: a BatchNorm layer in training mode writes its running statistics into arrays "
                           "of a model the jitted function does not get as an argument (held in a global or a "
                           "closure), which a replay could not update. Pass the model as an argument (its "
                           "statistics are then written at every call), or call it in evaluation mode.")
        self.running_mean[...] = keep * self.running_mean + new * mean
        self.running_var[...] = keep * self.running_var + new * unbiased

    def __repr__(self):
        c = self.running_mean.shape[0]
        parts = [str(c)] + ([_name(self.activation)] if self.activation is not None else [])
        if self.scale is None:
            parts.append("affine=False")
        if self.training is not None:
            parts.append(f"training={self.training}")
        return f"BatchNorm({', '.join(parts)})"


def _check_momentum(momentum):
    """Refuse a momentum the running averages cannot use (PyTorch's momentum=None among them)."""
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float, np.integer, np.floating)):
        raise TypeError(f"BatchNorm: momentum must be a number in [0, 1], got {momentum!r}; PyTorch's momentum=None "
                        "(a cumulative average) is not available: give a number such as 0.1.")
    if not 0 <= momentum <= 1:
        raise ValueError(f"BatchNorm: momentum must be in [0, 1], got {momentum!r} "
                         "(running = (1 - momentum) * running + momentum * batch).")


class LayerNorm:
    """Normalise over the last `len(shape)` axes of each sample, then scale, shift and `activation`.

    >>> import numpy as np, pullback as pb
    >>> ln = pb.nn.LayerNorm(2)
    >>> ln(np.array([[1.0, 3.0]]))
    array([[-0.99999..., 0.99999...]])
    """

    def __init__(
        self, shape: int | Iterable[int], activation: Callable[[Any], Any] | None = None, *, eps: float = 1e-5,
        affine: bool = True, dtype: DTypeLike = np.float32,
    ) -> None:
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        self.scale = np.ones(shape, dtype=dtype) if affine else None
        self.shift = np.zeros(shape, dtype=dtype) if affine else None
        self.activation = activation
        self.eps = eps
        self.shape = shape

    def trainable(self) -> tuple[str, ...]:
        return ("scale", "shift")

    def __call__(self, x: Any) -> Any:
        k = len(self.shape)
        if tuple(np.shape(x)[-k:]) != self.shape:
            raise ValueError(f"LayerNorm{self.shape} got input of shape {np.shape(x)}; its last axes should be {self.shape}")
        axes = tuple(range(-k, 0))
        centred = x - np.mean(x, axis=axes, keepdims=True)
        var = np.mean(centred * centred, axis=axes, keepdims=True)
        y = centred / np.sqrt(var + self.eps)
        if self.scale is not None:  # each may be None on its own (PyTorch's LayerNorm(bias=False))
            y = y * self.scale
        if self.shift is not None:
            y = y + self.shift
        return y if self.activation is None else self.activation(y)

    def __repr__(self):
        size = self.shape[0] if len(self.shape) == 1 else self.shape
        act = f", {_name(self.activation)}" if self.activation is not None else ""
        if self.scale is None and self.shift is None:
            act += ", affine=False"
        elif self.shift is None:
            act += ", shift=None"
        elif self.scale is None:
            act += ", scale=None"
        return f"LayerNorm({size}{act})"


def _name(fn):
    return getattr(fn, "__name__", None) or repr(fn)
