"""Training versus evaluation mode, for layers that behave differently (BatchNorm, Dropout).

Each such layer has a field `training`:

- `None` (the default, "auto", as in Flux): the layer trains when it is being
  differentiated, that is when its input (or, for BatchNorm, one of its parameters) is a
  tracked value inside `pb.gradient` and friends (or a dual value inside `pb.jvp`);
  otherwise it evaluates.
- `True` / `False`: always train / always evaluate (PyTorch's `model.train()` / `model.eval()`).

`trainmode(model)` and `testmode(model)` set the field on every such layer of a model, in
place, and return the model; `trainmode(model, "auto")` restores the default.
"""

from typing import Any, Literal, TypeVar

from .. import tree
from .._values import Traced

__all__ = ["trainmode", "testmode", "is_training"]

_MODES = (True, False, None)

Model = TypeVar("Model")


def is_training(layer: Any, *values: Any) -> bool:
    """Whether `layer` trains now: its `training` field, or (when None) whether any of `values` is traced."""
    mode = layer.training
    if mode is None:
        return any(isinstance(v, Traced) for v in values)
    return bool(mode)


def _mode(mode):
    if mode == "auto":
        return None
    if mode not in _MODES:
        raise ValueError(f'mode should be True, False or "auto"; got {mode!r}')
    return mode


def trainmode(model: Model, mode: bool | Literal["auto"] = True) -> Model:
    """Put every mode-dependent layer of `model` in training mode (in place); returns `model`.

    `mode=False` means evaluation mode and `mode="auto"` the automatic default.

    >>> import pullback as pb
    >>> m = pb.nn.Chain(pb.nn.Dense(2, 2), pb.nn.Dropout(0.5))
    >>> pb.nn.trainmode(m)[1].training
    True
    """
    mode = _mode(mode)
    _set_modes(model, mode)
    return model


def testmode(model: Model, mode: bool | Literal["auto"] = True) -> Model:
    """Put every mode-dependent layer of `model` in evaluation mode (in place); returns `model`.

    >>> import pullback as pb
    >>> pb.nn.testmode(pb.nn.BatchNorm(3)).training
    False
    """
    mode = _mode(mode)
    _set_modes(model, None if mode is None else not mode)
    return model


def _set_modes(model, mode):
    """Set `training` on every object of `model` that has the field (each once, cycles included)."""

    def node(x, kind, old, new, parts, path, shell):
        if hasattr(x, "training") and not isinstance(x, (dict, list, tuple)):
            x.training = mode

    tree.walk(model, _nothing, node, cycle=_nothing)


def _nothing(*args):
    return None
