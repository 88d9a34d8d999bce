"""Loss functions. Classes lie along `axis` (the last one by default, as in `(batch, classes)`).

`agg` says how per-element (or per-sample) losses are combined: `"mean"` (default),
`"sum"`, `"none"` (return them all) or any function of one array, such as
`lambda l: np.sum(l * weights)` (Flux's `agg`; the strings are PyTorch's `reduction`).
Targets `y` may be probabilities / one-hot arrays shaped like the prediction (boolean or
integer one-hot arrays too), or, for the cross-entropies, integer class labels shaped like the
prediction without the class axis. The elementwise losses (`mse` and the binary ones) let a
target broadcast against the prediction only into the shape of one of them: `(n, 1)`
predictions against `(n,)` targets, which would average over all `n * n` pairs, are refused.

The cross-entropies take PyTorch's options of `torch.nn.functional.cross_entropy`: class
`weight`, `ignore_index` and `label_smoothing`, with its weighted mean.
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


def _aggregate(losses, agg, total=None):
    """Combine `losses` as `agg` says; `total`, where given, divides their sum for "mean" in place of their count."""
    if callable(agg):
        return agg(losses)
    if agg == "mean":
        return np.mean(losses) if total is None else np.sum(losses) / total
    if agg == "sum":
        return np.sum(losses)
    if agg == "none":
        return losses
    raise ValueError(f'agg should be "mean", "sum", "none" or a function; got {agg!r}')


def _targets(y, like, axis, ignore_index=None):
    """`(targets, kept)`: `y` as probabilities shaped like `like`, and for labels with an `ignore_index` the boolean
    mask of the samples kept (else None). Integer labels become a boolean one-hot mask (see `_picked`), all False
    for an ignored sample, and a boolean or integer array shaped like `like` (a one-hot array) takes `like`'s dtype."""
    y_plain = stop_gradient(y)
    if getattr(getattr(y_plain, "dtype", None), "kind", "") not in ("i", "u", "b"):  # any array type
        if np.shape(y) != np.shape(like):
            raise ValueError(f"targets of shape {np.shape(y)} do not match predictions of shape {np.shape(like)}")
        _refuse_ignore_index(ignore_index)
        return y, None
    if np.shape(y_plain) == np.shape(like):
        _refuse_ignore_index(ignore_index)
        return y_plain.astype(like.dtype), None
    classes = np.shape(like)[axis]
    expected = tuple(int(n) for k, n in enumerate(np.shape(like)) if k != axis % np.ndim(like))
    if y_plain.shape != expected:
        raise ValueError(f"integer labels should have shape {expected} for predictions of shape {np.shape(like)} "
                         f"(or pass one-hot targets of that shape); got {y_plain.shape}")
    kept = None if ignore_index is None else y_plain != ignore_index
    if y_plain.size:
        labels = y_plain if kept is None else np.where(kept, y_plain, 0)
        low, high = labels.min(), labels.max()
        if low < 0 or high >= classes:  # under pb.jit a guard on the labels' range; the message shows the values
            allowed = f"lie in 0..{classes - 1}" + ("" if ignore_index is None else f" or be {ignore_index}")
            hint = " (to skip samples by label, pass ignore_index)" if ignore_index is None else ""
            raise ValueError(f"labels must {allowed}; got values from {traced_value(low)} to {traced_value(high)}{hint}")
    onehot = np.expand_dims(y_plain, -1) == np.arange(classes)
    if kept is not None:
        onehot = onehot & np.expand_dims(kept, -1)
    return np.moveaxis(onehot, -1, axis), kept


def _refuse_ignore_index(ignore_index):
    """Probability targets have no labels to ignore: a non-negative `ignore_index` is refused, as PyTorch refuses it
    (a negative one matches no class, and PyTorch's default is -100)."""
    if ignore_index is not None and ignore_index >= 0:
        raise ValueError(f"ignore_index={ignore_index} applies to integer labels, but these targets are probabilities "
                         "(or one-hot); drop the samples to skip, or pass their labels instead")


def _check_ignore_index(ignore_index):
    if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer))):
        raise TypeError(f"ignore_index must be an integer label (or None, to ignore nothing); got {ignore_index!r}")


def _check_smoothing(label_smoothing):
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float, np.integer, np.floating)):
        raise TypeError(f"label_smoothing must be a number in [0, 1]; got {label_smoothing!r}")
    if not 0 <= label_smoothing <= 1:
        raise ValueError(f"label_smoothing must be in [0, 1] (the share of the target spread evenly over the classes; "
                         f"0, the default, turns it off); got {label_smoothing!r}")


def _class_weights(weight, like, axis):
    """`weight`, one number per class, in `like`'s dtype and shaped to broadcast along `axis` of `like`."""
    classes = np.shape(like)[axis]
    if np.shape(weight) != (classes,):
        raise ValueError(f"weight must hold one number per class, shape ({classes},) for predictions of shape "
                         f"{np.shape(like)} (classes along axis={axis}); got shape {np.shape(weight)}")
    if not hasattr(weight, "dtype"):
        weight = np.asarray(weight)
    if weight.dtype != like.dtype:
        weight = weight.astype(like.dtype)
    shape = [1] * np.ndim(like)
    shape[axis] = classes
    return np.reshape(weight, shape)


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


def _default_eps(yhat):
    """The machine epsilon of `yhat`'s dtype; a Python number is float64. Read from the plain value: a Python float
    being differentiated has a dtype, the plain float none (which raised AttributeError on plain calls alone)."""
    return np.finfo(getattr(stop_gradient(yhat), "dtype", np.float64)).eps


def mse(yhat: Any, y: Any, *, agg: Aggregation = "mean") -> Any:
    """Mean squared error: agg((yhat - y) ** 2).

    >>> import numpy as np
    >>> mse(np.array([1.0, 2.0]), np.array([1.0, 4.0]))
    np.float64(2.0)
    """
    y = _elementwise_targets(y, yhat)
    return _aggregate((yhat - y) ** 2, agg)


def _cross_entropy(y, like, axis, agg, weight, ignore_index, label_smoothing, log_probs, picked_log_probs):
    """The cross-entropies with PyTorch's options: `log_probs()` gives every class's log-probability and
    `picked_log_probs(mask, kept)` the labelled class's alone (`mask` and `kept` from `_targets`)."""
    _check_ignore_index(ignore_index)
    _check_smoothing(label_smoothing)
    targets, kept = _targets(y, like, axis, ignore_index)
    classes = np.shape(like)[axis]
    w = None if weight is None else _class_weights(weight, like, axis)
    if getattr(stop_gradient(targets), "dtype", None) != np.bool_:  # probabilities: "mean" is over samples
        if label_smoothing:
            targets = targets * (1 - label_smoothing) + label_smoothing / classes
        if w is not None:
            targets = targets * w
        return _aggregate(-np.sum(targets * log_probs(), axis=axis), agg)
    losses = -picked_log_probs(targets, kept)
    total = None
    if w is not None:
        picked_weights = _picked(targets, w, axis)  # 0 for an ignored sample
        losses = losses * picked_weights
        total = np.sum(picked_weights)
    elif kept is not None:
        total = np.sum(kept, dtype=like.dtype)
    if label_smoothing:
        spread = -np.sum(log_probs() if w is None else log_probs() * w, axis=axis)
        losses = (1 - label_smoothing) * losses + (label_smoothing / classes) * spread
    if kept is not None:
        losses = np.where(kept, losses, 0)
    return _aggregate(losses, agg, total)


def crossentropy(yhat: Any, y: Any, *, axis: int = -1, agg: Aggregation = "mean", eps: float | None = None,
                 weight: Any = None, ignore_index: int | None = None, label_smoothing: float = 0.0) -> Any:
    """Cross-entropy of predicted probabilities `yhat`: agg(-sum(y * log(yhat + eps), axis)).

    `eps` defaults to the machine epsilon of `yhat`'s dtype (as Flux), keeping log finite.
    `weight`, `ignore_index` and `label_smoothing` are those of `logitcrossentropy`, with
    log(yhat + eps) in place of logsoftmax(logits).

    >>> import numpy as np
    >>> round(float(crossentropy(np.array([[0.25, 0.75]]), np.array([1]))), 6)
    0.287682
    >>> round(float(crossentropy(np.array([[0.25, 0.75]]), np.array([1]), label_smoothing=0.2, eps=0.0)), 6)  # targets 0.1, 0.9
    0.397543
    """
    eps = _default_eps(yhat) if eps is None else eps

    def picked_log_probs(mask, kept):
        picked = _picked(mask, yhat, axis) + eps
        # an ignored sample picks nothing: log 1 = 0 there, where log(0 + eps) would be -inf for eps = 0
        return np.log(picked if kept is None else np.where(kept, picked, 1))

    return _cross_entropy(y, yhat, axis, agg, weight, ignore_index, label_smoothing,
                          lambda: np.log(yhat + eps), picked_log_probs)


def logitcrossentropy(logits: Any, y: Any, *, axis: int = -1, agg: Aggregation = "mean", weight: Any = None,
                      ignore_index: int | None = None, label_smoothing: float = 0.0) -> Any:
    """Cross-entropy of softmax(logits), computed stably: agg(-sum(y * logsoftmax(logits), axis)).

    The options are PyTorch's (`torch.nn.functional.cross_entropy`):

    - `weight`: one number per class (taken in the predictions' dtype). With labels a sample's
      loss is multiplied by its label's weight and `agg="mean"` divides the sum by the sum of
      those weights; with probability targets each class's term is weighted and "mean" divides
      by the number of samples, as in PyTorch.
    - `ignore_index`: samples with this label add nothing and are not counted by "mean" (all of
      them ignored: nan, as in PyTorch); their entry of `agg="none"` is 0. None (the default)
      ignores nothing; PyTorch's default is -100.
    - `label_smoothing`: `s` in [0, 1] mixes the target with the uniform distribution:
      `y * (1 - s) + s / classes`.

    >>> import numpy as np
    >>> round(float(logitcrossentropy(np.array([[0.0, np.log(3.0)]]), np.array([1]))), 6)
    0.287682
    >>> logits = np.array([[0.0, np.log(3.0)], [9.0, 0.0]])
    >>> round(float(logitcrossentropy(logits, np.array([1, -100]), ignore_index=-100)), 6)
    0.287682
    """
    log_probs = logsoftmax(logits, axis=axis)
    return _cross_entropy(y, logits, axis, agg, weight, ignore_index, label_smoothing,
                          lambda: log_probs, lambda mask, kept: _picked(mask, log_probs, axis))


def binary_crossentropy(yhat: Any, y: Any, *, agg: Aggregation = "mean", eps: float | None = None) -> Any:
    """Binary cross-entropy of probabilities: agg(-y log(yhat + eps) - (1 - y) log(1 - yhat + eps)).

    >>> import numpy as np
    >>> round(float(binary_crossentropy(np.array([0.75]), np.array([1.0]))), 6)
    0.287682
    """
    y = _elementwise_targets(y, yhat)
    eps = _default_eps(yhat) if eps is None else eps
    return _aggregate(-y * np.log(yhat + eps) - (1 - y) * np.log(1 - yhat + eps), agg)


def logitbinarycrossentropy(logits: Any, y: Any, *, agg: Aggregation = "mean") -> Any:
    """Binary cross-entropy of sigmoid(logits), computed stably: agg((1 - y) * logits + softplus(-logits)).

    >>> import numpy as np
    >>> round(float(logitbinarycrossentropy(np.array([np.log(3.0)]), np.array([1.0]))), 6)
    0.287682
    """
    y = _elementwise_targets(y, logits)
    return _aggregate((1 - y) * logits + softplus(-logits), agg)
