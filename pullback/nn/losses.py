"""Loss functions. Classes lie along `axis` (the last one by default, as in `(batch, classes)`).

`agg` says how per-element (or per-sample) losses are combined: `"mean"` (default),
`"sum"`, `"none"` (return them all) or any function of one array, such as
`lambda l: np.sum(l * weights)` (Flux's `agg`; the strings are PyTorch's `reduction`).
Targets `y` may be probabilities / one-hot arrays shaped like the prediction, or, for the
cross-entropies, integer class labels shaped like the prediction without the class axis.
"""

from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from .._values import stop_gradient
from .activations import logsoftmax, softplus

__all__ = ["mse", "crossentropy", "logitcrossentropy", "binary_crossentropy", "logitbinarycrossentropy"]

# How per-element losses are combined: a name or a function of the array of losses.
Aggregation = Literal["mean", "sum", "none"] | Callable[[Any], Any]


def _aggregate(losses, agg):
    if callable(agg):
        return agg(losses)
    if agg == "mean":
        return np.mean(losses)
    if agg == "sum":
        return np.sum(losses)
    if agg == "none":
        return losses
    raise ValueError(f'agg should be "mean", "sum", "none" or a function; got {agg!r}')


def _targets(y, like, axis):
    """`y` as probabilities shaped like `like` (integer labels become one-hot of `like`'s dtype)."""
    y_plain = stop_gradient(y)
    if getattr(getattr(y_plain, "dtype", None), "kind", "") in ("i", "u", "b"):  # any array type
        classes = np.shape(like)[axis]
        expected = tuple(np.delete(np.shape(like), axis % np.ndim(like)))
        if y_plain.shape != expected:
            raise ValueError(f"integer labels should have shape {expected} for predictions of shape {np.shape(like)}; got {y_plain.shape}")
        if y_plain.size and (y_plain.min() < 0 or y_plain.max() >= classes):
            raise ValueError(f"labels must lie in 0..{classes - 1}; got values from {y_plain.min()} to {y_plain.max()}")
        onehot = np.expand_dims(y_plain, -1) == np.arange(classes)
        return np.moveaxis(onehot, -1, axis).astype(like.dtype)
    if np.shape(y) != np.shape(like):
        raise ValueError(f"targets of shape {np.shape(y)} do not match predictions of shape {np.shape(like)}")
    return y


def mse(yhat: Any, y: Any, *, agg: Aggregation = "mean") -> Any:
    """Mean squared error: agg((yhat - y) ** 2).

    >>> import numpy as np
    >>> mse(np.array([1.0, 2.0]), np.array([1.0, 4.0]))
    np.float64(2.0)
    """
    return _aggregate((yhat - y) ** 2, agg)


def crossentropy(yhat: Any, y: Any, *, axis: int = -1, agg: Aggregation = "mean", eps: float | None = None) -> Any:
    """Cross-entropy of predicted probabilities `yhat`: agg(-sum(y * log(yhat + eps), axis)).

    `eps` defaults to the machine epsilon of `yhat`'s dtype (as Flux), keeping log finite.

    >>> import numpy as np
    >>> round(float(crossentropy(np.array([[0.25, 0.75]]), np.array([1]))), 6)
    0.287682
    """
    y = _targets(y, yhat, axis)
    eps = np.finfo(yhat.dtype).eps if eps is None else eps
    return _aggregate(-np.sum(y * np.log(yhat + eps), axis=axis), agg)


def logitcrossentropy(logits: Any, y: Any, *, axis: int = -1, agg: Aggregation = "mean") -> Any:
    """Cross-entropy of softmax(logits), computed stably: agg(-sum(y * logsoftmax(logits), axis)).

    >>> import numpy as np
    >>> round(float(logitcrossentropy(np.array([[0.0, np.log(3.0)]]), np.array([1]))), 6)
    0.287682
    """
    y = _targets(y, logits, axis)
    return _aggregate(-np.sum(y * logsoftmax(logits, axis=axis), axis=axis), agg)


def binary_crossentropy(yhat: Any, y: Any, *, agg: Aggregation = "mean", eps: float | None = None) -> Any:
    """Binary cross-entropy of probabilities: agg(-y log(yhat + eps) - (1 - y) log(1 - yhat + eps)).

    >>> import numpy as np
    >>> round(float(binary_crossentropy(np.array([0.75]), np.array([1.0]))), 6)
    0.287682
    """
    eps = np.finfo(yhat.dtype).eps if eps is None else eps
    return _aggregate(-y * np.log(yhat + eps) - (1 - y) * np.log(1 - yhat + eps), agg)


def logitbinarycrossentropy(logits: Any, y: Any, *, agg: Aggregation = "mean") -> Any:
    """Binary cross-entropy of sigmoid(logits), computed stably: agg((1 - y) * logits + softplus(-logits)).

    >>> import numpy as np
    >>> round(float(logitbinarycrossentropy(np.array([np.log(3.0)]), np.array([1.0]))), 6)
    0.287682
    """
    return _aggregate((1 - y) * logits + softplus(-logits), agg)
