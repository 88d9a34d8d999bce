"""Activation functions: elementwise (or along one axis for softmax), dtype-preserving.

Each works on plain arrays and on values being differentiated. `relu` and `sigmoid`
are primitives with short rules (one pass backwards), and so is the complementary error
function behind the exact `gelu`; the rest are written with NumPy calls, so their
derivatives come from the rules of those calls.
"""

import functools
import math
from typing import Any, Literal

import numpy as np

from .._extend import frule, primitive, rrule
from .._values import stop_gradient

__all__ = ["relu", "gelu", "sigmoid", "tanh", "softplus", "elu", "leaky_relu", "softmax", "logsoftmax"]

tanh = np.tanh


@primitive
def relu(x: Any) -> Any:
    """max(x, 0).

    >>> import numpy as np
    >>> relu(np.array([-1.0, 2.0]))
    array([0., 2.])
    """
    return np.maximum(x, 0)


@rrule(relu)
def _relu_rule(x):
    y = relu(x)
    return y, lambda g: (g * (stop_gradient(y) > 0),)


@frule(relu)
def _relu_frule(primals, tangents):
    (x,), (dx,) = primals, tangents
    y = relu(x)
    return y, None if dx is None else dx * (stop_gradient(y) > 0)


@primitive
def sigmoid(x: Any) -> Any:
    """The logistic function 1 / (1 + exp(-x)), computed without overflow.

    >>> import numpy as np
    >>> sigmoid(np.array([0.0, 1000.0, -1000.0]))
    array([0.5, 1. , 0. ])
    """
    return np.exp(-np.logaddexp(0, -x))


def _sigmoid_with_log(x):
    """sigmoid(x), computed as `sigmoid` computes it, and its logarithm."""
    log_y = -np.logaddexp(0, -x)
    return np.exp(log_y), log_y


def _sigmoid_slope(y, log_y):
    """sigmoid'(x) = y (1 - y), with 1 - y as -expm1(log y): exact where y rounds to 1 (x past 37), where 1 - y is 0."""
    return y * -np.expm1(log_y)


@rrule(sigmoid)
def _sigmoid_rule(x):
    y, log_y = _sigmoid_with_log(x)
    return y, lambda g: (g * _sigmoid_slope(y, log_y),)


@frule(sigmoid)
def _sigmoid_frule(primals, tangents):
    (x,), (dx,) = primals, tangents
    y, log_y = _sigmoid_with_log(x)
    return y, None if dx is None else dx * _sigmoid_slope(y, log_y)


@functools.cache
def _scipy_erfc():
    """SciPy's erfc ufunc, or None without SciPy (imported at the first exact gelu, not with pullback)."""
    try:
        from scipy.special import erfc
    except ImportError:
        return None
    return erfc


def _plain_erfc(x):
    """erfc of a plain array, in its dtype: SciPy's ufunc where SciPy is installed, else `math.erfc` per element."""
    dtype = np.result_type(getattr(x, "dtype", np.float64), np.float16)  # a Python number is float64, not weak
    erfc = _scipy_erfc()
    y = np.asarray(np.frompyfunc(math.erfc, 1, 1)(x)) if erfc is None else erfc(x)
    return y if y.dtype == dtype else y.astype(dtype)  # SciPy computes float16 in float64


@primitive
def _erfc(x):
    """The complementary error function 1 - erf(x), exact in both tails."""
    return _plain_erfc(x)


def _erfc_slope(x):
    """erfc'(x) = -2/sqrt(pi) exp(-x**2). Past |x| = 30 it is exactly 0 in every float dtype, so clipping
    first changes nothing and keeps x**2 from overflowing (whose inf would reach the gradient as inf * 0)."""
    inner = np.clip(x, -30.0, 30.0)
    return -1.1283791670955126 * np.exp(-inner * inner)


@rrule(_erfc)
def _erfc_rule(x):
    return _erfc(x), lambda g: (g * _erfc_slope(x),)


@frule(_erfc)
def _erfc_frule(primals, tangents):
    (x,), (dx,) = primals, tangents
    return _erfc(x), None if dx is None else dx * _erfc_slope(x)


def gelu(x: Any, *, approximate: Literal["tanh", "none"] = "tanh") -> Any:
    """Gaussian error linear unit: by default the tanh approximation (as Flux's `gelu` and PyTorch's
    `approximate="tanh"`); `approximate="none"` gives the exact form x * Phi(x), PyTorch's default.

    The exact form is computed as 0.5 * x * erfc(-x / sqrt(2)), which keeps its digits for negative x
    where PyTorch's 0.5 * x * (1 + erf(x / sqrt(2))) cancels.

    >>> import numpy as np
    >>> gelu(np.array([0.0, 1.0]))
    array([0.        , 0.84119199])
    >>> gelu(np.array([0.0, 1.0]), approximate="none")
    array([0.        , 0.84134475])
    """
    if approximate == "none":
        return _half_x_times(x, lambda x: _erfc(x * -0.7071067811865476))
    if approximate != "tanh":
        raise ValueError(f'gelu: approximate must be "tanh" (the default) or "none" (the exact erf form), '
                         f"as in PyTorch; got {approximate!r}")
    # Past |x| = 10 the tanh is exactly ±1 in every float dtype, so clipping x inside the cubic changes
    # no value and no derivative, and x**3 (and its derivative 3 x**2) cannot overflow to inf * 0 = nan.
    def factor(x):
        inner = np.clip(x, -10.0, 10.0)
        return 1 + np.tanh(0.7978845608028654 * (inner + 0.044715 * inner**3))

    return _half_x_times(x, factor)


def _half_x_times(x, factor):
    """0.5 * x * factor(x), for a factor that is constant far out (2 or 0): at x = ±inf the product rule's
    x * factor'(x) would be inf * 0 = nan (with a RuntimeWarning the plain call does not give), so there the
    factor is held constant, and the finite values see a finite x. The same values, bit for bit."""
    finite = np.isfinite(stop_gradient(x))
    if np.all(finite):
        return 0.5 * x * factor(x)
    y = np.where(finite, 0.5 * np.where(finite, x, 0) * factor(np.where(finite, x, 0)), 0.5 * x * stop_gradient(factor(x)))
    return y[()] if np.ndim(y) == 0 else y  # a number for a number, as 0.5 * x * factor(x) gives


def softplus(x: Any, beta: float = 1.0, threshold: float | None = None) -> Any:
    """log(1 + exp(beta * x)) / beta, without overflow; with a `threshold`, x itself where beta * x > threshold.

    `beta` and `threshold` are PyTorch's. PyTorch's default threshold is 20 (pass `threshold=20` for its
    values to the last digit); here the default is none, so the curve is exact everywhere and the slope
    is sigmoid(beta * x), where PyTorch's is 1 past the threshold.

    >>> import numpy as np
    >>> softplus(np.array([0.0, 50.0]))
    array([ 0.69314718, 50.        ])
    >>> softplus(np.array([0.0, 1.0]), beta=2.0, threshold=1.0)
    array([0.34657359, 1.        ])
    """
    if beta == 0:
        raise ValueError("softplus: beta must not be 0 (it divides by beta); use a positive number, 1 by default")
    if beta == 1:
        y = np.logaddexp(x, 0)
        return y if threshold is None else np.where(stop_gradient(x) > threshold, x, y)
    scaled, y = _scaled_softplus(x, beta)
    # past beta * x = 40, log1p(exp(-beta * x)) / beta is below x's last digit and the slope rounds to 1:
    # x itself is exact there, and stays finite where beta * x would overflow
    limit = 40.0 if threshold is None else min(threshold, 40.0)
    return np.where(stop_gradient(scaled) > limit, x, y)


def _scaled_softplus(x, beta):
    """`(beta * x, log(1 + exp(beta * x)) / beta)`, with x clipped to beta * x in ±800 first: exp(-800) is 0 in every
    float dtype, so the clip changes no value and no slope below, and above it `softplus` takes x itself."""
    bound = 800.0 / abs(beta)
    scaled = np.clip(x, -bound, bound) * beta
    return scaled, np.logaddexp(scaled, 0) / beta


def elu(x: Any, alpha: float = 1.0) -> Any:
    """x for x > 0, alpha * (exp(x) - 1) otherwise.

    >>> import numpy as np
    >>> elu(np.array([-1.0, 2.0]))
    array([-0.63212056,  2.        ])
    """
    # expm1 only sees non-positive values, so no inf (and no inf * 0 = nan in the gradient); at 0 the
    # derivative is alpha, the left side's, as in PyTorch (np.minimum would split it at the tie).
    positive = stop_gradient(x) > 0
    return np.where(positive, x, alpha * np.expm1(np.where(positive, 0.0, x)))


def leaky_relu(x: Any, slope: float = 0.01) -> Any:
    """x for x > 0, slope * x otherwise.

    >>> import numpy as np
    >>> leaky_relu(np.array([-1.0, 2.0]))
    array([-0.01,  2.  ])
    """
    return np.where(stop_gradient(x) > 0, x, slope * x)


def logsoftmax(x: Any, axis: int = -1) -> Any:
    """log(softmax(x)) along `axis`, computed stably.

    >>> import numpy as np
    >>> np.exp(logsoftmax(np.array([[1.0, 1.0]])))
    array([[0.5, 0.5]])
    """
    shifted = x - stop_gradient(np.max(stop_gradient(x), axis=axis, keepdims=True))
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def softmax(x: Any, axis: int = -1) -> Any:
    """exp(x) normalised to sum to one along `axis`.

    >>> import numpy as np
    >>> softmax(np.array([[0.0, np.log(3.0)]]))
    array([[0.25, 0.75]])
    """
    e = np.exp(x - stop_gradient(np.max(stop_gradient(x), axis=axis, keepdims=True)))
    return e / np.sum(e, axis=axis, keepdims=True)
