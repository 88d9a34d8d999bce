"""The optimiser state: `Leaf` records, `setup`, `adjust`, `freeze` and `thaw`.

A state mirrors the model the way a gradient does (tuples for tuples, `Tangent`s for
objects, `None` where nothing is trained) with a `Leaf` at each trainable float array.
"""

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import Tangent, tree
from .._leaves import refuse_array_like, refuse_hidden_arrays
from ._walk import is_param, name, nothing
from .rules import Rule

__all__ = ["Leaf", "setup", "adjust", "freeze", "thaw"]


class Leaf:
    """The optimiser's record for one parameter array: its `rule`, the rule's `state`, and `frozen`.

    A tied array (one array object at several places of the model) has one `Leaf`, found at
    each of those places in the state.

    >>> import numpy as np
    >>> from pullback import optim
    >>> optim.setup(optim.Momentum(), {"w": np.zeros(3, np.float32)})["w"]
    Leaf(Momentum(lr=0.01, rho=0.9), state=(<float32 (3,)>,))
    """

    __slots__ = ("rule", "state", "frozen")

    def __init__(self, rule: Rule, state: Any, frozen: bool = False) -> None:
        self.rule = rule
        self.state = state
        self.frozen = frozen

    def __repr__(self):
        frozen = ", frozen=True" if self.frozen else ""
        return f"Leaf({self.rule!r}, state={summary(self.state)}{frozen})"


def summary(value):
    """A rule's state for messages: arrays as `<float32 (3,)>`."""
    if isinstance(value, np.ndarray):
        return f"<{value.dtype} {value.shape}>"
    if isinstance(value, tuple):
        inner = ", ".join(summary(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


def setup(rule: Rule, model: Any) -> Any:
    """The initial optimiser state for training `model` with `rule`.

    Only trainable float arrays get a `Leaf` (a class's `trainable()` method is respected);
    everything else is `None`, and containers with nothing to train collapse to `None`.

    >>> import numpy as np
    >>> from pullback import optim
    >>> optim.setup(optim.Descent(0.1), (np.array([1.0, 2.0]), np.array([1, 2]), "name"))
    (Leaf(Descent(lr=0.1), state=()), None, None)
    """
    if not isinstance(rule, Rule):
        if isinstance(rule, type) and issubclass(rule, Rule):
            raise TypeError(f"setup needs a rule instance such as {rule.__name__}(), not the class {rule.__name__}")
        raise TypeError(f"setup(rule, model): the first argument must be an optimisation rule such as Adam(), got {rule!r}")
    return mirror(model, lambda x, path: Leaf(rule, rule.init(x)), named=False)


def mirror(model: Any, make_leaf: Callable[[np.ndarray, Any], Any], named: bool = True) -> Any:
    """A state-shaped tree for `model`: `make_leaf(array, path)` at each trainable float array.

    `path` is the array's first trainable place, printed like `model.layers[0].weight`
    (a `tree.Path` when not `named`). An array or sub-object met twice gives the same result
    (ties stay ties); a reference back to an object being walked (a cycle) and every other
    leaf give `None`, and a container holding nothing but `None` is `None`.
    """

    def leaf(x, parts, path):
        if is_param(x):
            return make_leaf(x, name(path) if named else path)
        refuse_hidden_arrays(x, name(path))  # a deque or a partial holding weights: nothing would train them
        refuse_array_like(x, name(path))
        return None

    def node(x, kind, old, new, parts, path, shell):
        if not old:
            refuse_array_like(x, name(path))  # a torch tensor: nothing would train it
        return None if all(v is None for v in new.values()) else tree.mirror(x, new)

    return tree.walk(model, leaf, node, trainable_only=True, cycle=nothing, frozen=nothing)


def is_leaf(x):
    return isinstance(x, Leaf)


def map_leaves(state, f):
    """`state` with each `Leaf` replaced by `f(leaf)`; shared leaves and nodes stay shared."""
    return tree.fmap(lambda x: f(x) if isinstance(x, Leaf) else x, state, exclude=is_leaf)


def state_leaves(state):
    """The distinct `Leaf`s of a state (or part of one), in walk order."""
    return [x for x in tree.leaves(state, exclude=is_leaf) if isinstance(x, Leaf)]


def copy_value(value):
    """A copy of a rule's state: new arrays, the same numbers."""
    return tree.fmap(lambda x: x.copy() if isinstance(x, np.ndarray) else x, value)


def adjust(state: Any, lr: float | None = None, **hyperparameters: Any) -> Any:
    """A new state whose rules have new hyperparameters: `adjust(state, lr=1e-4)`, `adjust(state, beta1=0.8)`.

    Every rule that has a hyperparameter of that name takes the new value (inside
    `OptimiserChain`s too); rules without it are left alone. The rules' accumulated state
    (moments, step counters) is kept, copied into the new state. A name that no rule in the
    state has is an error, so a typo cannot pass silently.

    >>> import numpy as np
    >>> from pullback import optim
    >>> state = optim.setup(optim.OptimiserChain(optim.ClipGrad(1.0), optim.Adam()), [np.zeros(2)])
    >>> optim.adjust(state, lr=0.1)[0].rule
    OptimiserChain(ClipGrad(delta=1.0), Adam(lr=0.1, beta1=0.9, beta2=0.999, eps=1e-08))
    """
    changes = dict(hyperparameters)
    if lr is not None:
        changes["lr"] = lr
    if not changes:
        raise TypeError("adjust needs at least one hyperparameter, e.g. adjust(state, lr=1e-4)")
    used: set[str] = set()
    new_rules: dict[int, Rule] = {}

    def renew(leaf):
        rule = new_rules.get(id(leaf.rule))
        if rule is None:
            rule, names = leaf.rule.adjusted(changes)
            new_rules[id(leaf.rule)] = rule
            used.update(names)
        return Leaf(rule, copy_value(leaf.state), leaf.frozen)

    new_state = map_leaves(state, renew)
    unknown = sorted(set(changes) - used)
    if unknown:
        available = sorted({name for leaf in state_leaves(state) for name in _all_hyperparameters(leaf.rule)})
        raise ValueError(
            f"adjust: no rule in this state has a hyperparameter named {', '.join(map(repr, unknown))}; "
            f"the rules here have {', '.join(available) or 'none'}"
        )
    return new_state


def _all_hyperparameters(rule):
    names = set(rule.hyperparameters())
    for inner in getattr(rule, "rules", ()):
        names |= _all_hyperparameters(inner)
    return names - {"rules"}


def freeze(state_part: Any) -> None:
    """Mark every parameter in `state_part` (a part of a state, or all of it) as frozen, in place.

    `update` and `update_` then leave those parameters and their rule states unchanged until
    `thaw`. Like Optimisers.jl's `freeze!`, this marks the `Leaf`s themselves, so it acts on
    the whole state the part belongs to; it is the one function here that changes a state.
    Returns None.

    >>> import numpy as np
    >>> from pullback import optim
    >>> model = {"a": np.array([1.0]), "b": np.array([1.0])}
    >>> state = optim.setup(optim.Descent(0.5), model)
    >>> optim.freeze(state["a"])
    >>> optim.update(state, model, {"a": np.array([1.0]), "b": np.array([1.0])})[1]
    {'a': array([1.]), 'b': array([0.5])}
    """
    _set_frozen(state_part, True, "freeze")


def thaw(state_part: Any) -> None:
    """Undo `freeze` for every parameter in `state_part`, in place. Returns None.

    >>> import numpy as np
    >>> from pullback import optim
    >>> state = optim.setup(optim.Descent(0.5), [np.array([1.0])])
    >>> optim.freeze(state); optim.thaw(state); state[0].frozen
    False
    """
    _set_frozen(state_part, False, "thaw")


def _set_frozen(state_part, frozen, name):
    if state_part is not None and not isinstance(state_part, (Leaf, Tangent, tuple, list, dict)):
        raise TypeError(f"{name} takes a state from setup (or a part of one), got {type(state_part).__name__}")
    for leaf in state_leaves(state_part):
        leaf.frozen = frozen
