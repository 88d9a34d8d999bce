"""Loss functions. Classes lie along `axis` (the last one by default, as in `(batch, classes)`).

`agg` says how per-element (or per-sample) losses are combined: `"mean"` (default),
`"sum"`, `"none"` (return them all) or any function of one array, such as
`lambda l: np.sum(l * weights)` (Flux's `agg`; the strings are PyTorch's `reduction`).
Targets `y` may be probabilities / one-hot arrays shaped like the prediction (boolean or
integer one-hot arrays too), or, for the cross-entropies, integer class labels shaped like the
prediction without the class axis. The elementwise losses (`mse` and the binary ones) let a
target broadcast against the prediction only into the shape of one of them: `(n, 1)`
predictions against `(n,)` targets, which would average over all `n * n` pairs, are refused.
"""

from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from .._standins import traced_value
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
    """`y` as probabilities shaped like `like`: integer labels become a boolean one-hot mask (see `_picked`), and
    a boolean or integer array shaped like `like` (a one-hot array) takes `like`'s dtype."""
    y_plain = stop_gradient(y)
    if getattr(getattr(y_plain, "dtype", None), "kind", "") not in ("i", "u", "b"):  # any array type
        if np.shape(y) != np.shape(like):
            raise ValueError(f"targets of shape {np.shape(y)} do not match predictions of shape {np.shape(like)}")
        return y
    if np.shape(y_plain) == np.shape(like):
        return y_plain.astype(like.dtype)
    classes = np.shape(like)[axis]
    expected = tuple(int(n) for k, n in enumerate(np.shape(like)) if k != axis % np.ndim(like))
    if y_plain.shape != expected:
        raise ValueError(f"integer labels should have shape {expected} for predictions of shape {np.shape(like)} "
                         f"(or pass one-hot targets of that shape); got {y_plain.shape}")
    if y_plain.size:
        low, high = y_plain.min(), y_plain.max()
        if low < 0 or high >= classes:  # under pb.jit a guard on the labels' range; the message shows the values
            raise ValueError(f"labels must lie in 0..{classes - 1}; got values from {traced_value(low)} to {traced_value(high)}")
    onehot = np.expand_dims(y_plain, -1) == np.arange(classes)
    return np.moveaxis(onehot, -1, axis)


def _picked(y, values, axis):
    """sum(y * values) along `axis`; for labels (a boolean mask from `_targets`) the labelled entry alone, as
    PyTorch's gather: another class's -inf log-probability (a masked logit) gives no 0 * -inf = nan."""
    if getattr(stop_gradient(y), "dtype", None) == np.bool_:
        return np.sum(np.where(y, values, 0), axis=axis)
    return np.sum(y * values, axis=axis)


def _elementwise_targets(y, like):
    """`y` (booleans as numbers), refused where it would broadcast against the predictions into a shape neither has:
    (n, 1) predictions against (n,) targets would give the mean over all n * n pairs."""
    try:
        shape = np.broadcast_shapes(np.shape(y), np.shape(like))
    except ValueError:
        shape = None
    if shape not in (np.shape(y), np.shape(like)):
        raise ValueError(f"targets of shape {np.shape(y)} do not match predictions of shape {np.shape(like)}; "
                         "give them one shape (for (n, 1) predictions and (n,) targets: y[:, None])")
    if getattr(getattr(y, "dtype", None), "kind", None) == "b":  # boolean labels: 0 and 1 in the predictions' dtype
        y = y.astype(like.dtype)
    return y


def mse(yhat: Any, y: Any, *, agg: Aggregation = "mean") -> Any:
    """Mean squared error: agg((yhat - y) ** 2).

    >>> import numpy as np
    >>> mse(np.array([1.0, 2.0]), np.array([1.0, 4.0]))
    np.float64(2.0)
    """
    y = _elementwise_targets(y, yhat)
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
    if getattr(stop_gradient(y), "dtype", None) == np.bool_:  # labels: the log of the labelled probability only
        return _aggregate(-np.log(_picked(y, yhat, axis) + eps), agg)
    return _aggregate(-np.sum(y * np.log(yhat + eps), axis=axis), agg)


def logitcrossentropy(logits: Any, y: Any, *, axis: int = -1, agg: Aggregation = "mean") -> Any:
    """Cross-entropy of softmax(logits), computed stably: agg(-sum(y * logsoftmax(logits), axis)).

    >>> import numpy as np
    >>> round(float(logitcrossentropy(np.array([[0.0, np.log(3.0)]]), np.array([1]))), 6)
    0.287682
    """
    y = _targets(y, logits, axis)
    return _aggregate(-_picked(y, logsoftmax(logits, axis=axis), axis), agg)


def binary_crossentropy(yhat: Any, y: Any, *, agg: Aggregation = "mean", eps: float | None = None) -> Any:
    """Binary cross-entropy of probabilities: agg(-y log(yhat + eps) - (1 - y) log(1 - yhat + eps)).

    >>> import numpy as np
    >>> round(float(binary_crossentropy(np.array([0.75]), np.array([1.0]))), 6)
    0.287682
    """
    y = _elementwise_targets(y, yhat)
    eps = np.finfo(yhat.dtype).eps if eps is None else eps
    return _aggregate(-y * np.log(yhat + eps) - (1 - y) * np.log(1 - yhat + eps), agg)


def logitbinarycrossentropy(logits: Any, y: Any, *, agg: Aggregation = "mean") -> Any:
    """Binary cross-entropy of sigmoid(logits), computed stably: agg((1 - y) * logits + softplus(-logits)).

    >>> import numpy as np
    >>> round(float(logitbinarycrossentropy(np.array([np.log(3.0)]), np.array([1.0]))), 6)
    0.287682
    """
    y = _elementwise_targets(y, logits)
    return _aggregate((1 - y) * logits + softplus(-logits), agg)
