"""Activation functions: elementwise (or along one axis for softmax), dtype-preserving.

Each works on plain arrays and on values being differentiated. `relu` and `sigmoid`
are primitives with short rules (one pass backwards); the rest are written with NumPy
calls, so their derivatives come from the rules of those calls.
"""

from typing import Any

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


def gelu(x: Any) -> Any:
    """Gaussian error linear unit, tanh approximation (as Flux's `gelu` and PyTorch's `approximate="tanh"`).

    >>> import numpy as np
    >>> gelu(np.array([0.0, 1.0]))
    array([0.        , 0.84119199])
    """
    # Past |x| = 10 the tanh is exactly ±1 in every float dtype, so clipping x inside the cubic changes
    # no value and no derivative, and x**3 (and its derivative 3 x**2) cannot overflow to inf * 0 = nan.
    inner = np.clip(x, -10.0, 10.0)
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (inner + 0.044715 * inner**3)))


def softplus(x: Any) -> Any:
    """log(1 + exp(x)), without overflow.

    >>> import numpy as np
    >>> softplus(np.array([0.0, 50.0]))
    array([ 0.69314718, 50.        ])
    """
    return np.logaddexp(x, 0)


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
