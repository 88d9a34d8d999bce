"""Optimisation rules: what one step does to one parameter array.

A rule is a small frozen dataclass of hyperparameters with two methods:

- `init(x) -> state`: the rule's state for parameter `x` (a tuple of arrays and numbers);
- `apply(state, x, dx) -> (new_state, delta)`: one step; the new parameter is `x - delta`.

`apply` must not modify `state`, `x` or `dx`; it returns new arrays. `update` calls it with
`dx` already cast to `x.dtype`, and hyperparameters are Python floats, so float32 stays
float32. For a complex parameter `dx` is the conjugate of its gradient (pullback's gradient
is dL/dRe - i dL/dIm, so `x - lr * conj(g)` is the steepest-descent step), and the rules'
squares are squared moduli |dx|**2. Rules compose with `OptimiserChain`: each rule's `delta` is the next one's `dx`, and
the last `delta` is subtracted. So a chain without a learning-rate rule, such as
`OptimiserChain(ClipGrad(2), WeightDecay(0.1))`, subtracts the clipped, decayed gradient itself.

Write your own by subclassing `Rule` (decorate it with `@dataclasses.dataclass(frozen=True)`):

>>> import dataclasses, numpy as np
>>> from pullback import optim
>>> @dataclasses.dataclass(frozen=True)
... class SignDescent(optim.Rule):
...     lr: float = 0.01
...     def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
...         return state, self.lr * np.sign(dx)
>>> state = optim.setup(SignDescent(0.5), (np.array([1.0, 1.0]),))
>>> optim.update(state, (np.array([1.0, 1.0]),), (np.array([3.0, -2.0]),))[1]
(array([0.5, 1.5]),)
"""

import dataclasses
import math
from typing import Any

import numpy as np

from .._standins import traced_value

__all__ = [
    "Rule", "Descent", "Momentum", "Nesterov", "Adam", "AdamW", "RMSProp", "AdaGrad", "Lion",
    "ClipGrad", "ClipNorm", "WeightDecay", "OptimiserChain",
]

# Every Rule subclass by name, so a checkpoint can name a rule without storing code.
RULES: dict[str, type["Rule"]] = {}


def rule_name(cls: type) -> str:
    """The name a checkpoint stores for a rule class: short for the built-in rules."""
    if cls.__module__ == __name__:
        return cls.__qualname__
    return f"{cls.__module__}:{cls.__qualname__}"


@dataclasses.dataclass(frozen=True)
class Rule:
    """Base class of the optimisation rules (see the module docstring for the contract)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        RULES[rule_name(cls)] = cls

    def init(self, x: np.ndarray) -> tuple[Any, ...]:
        """The state this rule keeps for parameter `x`; stateless rules keep `()`."""
        return ()

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        """One step: `(new_state, delta)` with the new parameter `x - delta`."""
        raise NotImplementedError(f"{type(self).__name__} must define apply(self, state, x, dx)")

    def hyperparameters(self) -> dict[str, Any]:
        """The rule's hyperparameters by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_hyperparameters(cls, hyperparameters: dict[str, Any]) -> "Rule":
        """The rule with these hyperparameters (the inverse of `hyperparameters`)."""
        return cls(**hyperparameters)

    def adjusted(self, changes: dict[str, Any]) -> tuple["Rule", set[str]]:
        """`(new_rule, used)`: this rule with those `changes` that name its hyperparameters, and their names."""
        mine = {k: v for k, v in changes.items() if k in self.hyperparameters()}
        return (dataclasses.replace(self, **mine) if mine else self), set(mine)

    def _check(self, **requirements):
        """Store each named hyperparameter as a Python float and check it (`requirements[name]` is a kind)."""
        for name, kind in requirements.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"{type(self).__name__}: {name} must be a real number, got {value!r}")
            # a NumPy scalar would promote float32 parameters; a number pb.jit traces stays one (float()
            # would fix its value), so that a step with a new learning rate replays
            value = value + 0.0 if hasattr(type(value), "__pullback_value__") else float(value)
            ok, wanted = _KINDS[kind](value)
            if not ok:
                raise ValueError(f"{type(self).__name__}: {name} must be {wanted}, got {value!r}")
            object.__setattr__(self, name, value)

    def _check_flag(self, name):
        """Store the named hyperparameter as a Python bool, refusing anything but True and False."""
        value = getattr(self, name)
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{type(self).__name__}: {name} must be True or False, got {value!r}")
        object.__setattr__(self, name, bool(value))

    def _repr_without(self, defaults):
        """The dataclass repr, leaving out the options in `defaults` while they keep those values, so that a
        rule which does not use an option added later prints as it always has."""
        shown = (f"{k}={v!r}" for k, v in self.hyperparameters().items() if k not in defaults or v != defaults[k])
        return f"{type(self).__qualname__}({', '.join(shown)})"


_KINDS = {
    "nonnegative": lambda v: (0 <= v < math.inf, "a finite number >= 0"),  # comparisons: pb.jit guards their outcome
    "positive": lambda v: (v > 0, "> 0"),
    "fraction": lambda v: (0 <= v < 1, "in [0, 1)"),
    "unit": lambda v: (0 <= v <= 1, "in [0, 1]"),
    "order": lambda v: (v >= 1, ">= 1 (or inf)"),
}


def _zeros(x):
    return np.zeros_like(x)


def _squared(dx):
    """dx**2 elementwise, |dx|**2 for a complex dx (real, so square roots and maxima mean what they say)."""
    return (dx * np.conj(dx)).real if dx.dtype.kind == "c" else dx * dx


@dataclasses.dataclass(frozen=True)
class Descent(Rule):
    """Plain gradient descent: `x -= lr * dx`.

    >>> import numpy as np
    >>> from pullback import optim
    >>> optim.update(optim.setup(optim.Descent(0.1), [np.array([1.0])]), [np.array([1.0])], [np.array([5.0])])[1]
    [array([0.5])]
    """

    lr: float = 0.1

    def __post_init__(self):
        self._check(lr="nonnegative")

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        return state, self.lr * dx


@dataclasses.dataclass(frozen=True)
class Momentum(Rule):
    """Gradient descent with momentum: `v = rho * v + lr * dx; x -= v`.

    (The same steps as PyTorch's SGD with momentum for a constant learning rate.) With PyTorch's
    `dampening` `d`, every step after the first adds less of the gradient:
    `v = rho * v + (1 - d) * lr * dx`; the first is `v = lr * dx`, as PyTorch's velocity starts
    at the first gradient, undamped. The state is then `(v, steps)`. With `rho = 0` there is no
    velocity and `dampening` does nothing, as in PyTorch.

    >>> import numpy as np
    >>> from pullback import optim
    >>> optim.Momentum(0.1, 0.9)
    Momentum(lr=0.1, rho=0.9)
    >>> rule, x, dx = optim.Momentum(1.0, 0.9, dampening=0.5), np.zeros(1), np.ones(1)
    >>> state, v = rule.apply(rule.init(x), x, dx)  # v = lr * dx = 1
    >>> rule.apply(state, x, dx)[1]  # v = 0.9 * 1 + (1 - 0.5) * 1
    array([1.4])
    """

    lr: float = 0.01
    rho: float = 0.9
    dampening: float = 0.0

    def __post_init__(self):
        self._check(lr="nonnegative", rho="fraction", dampening="unit")

    def __repr__(self):
        return self._repr_without({"dampening": 0.0})

    def init(self, x: np.ndarray) -> tuple[Any, ...]:
        return (_zeros(x), 0) if self.dampening else (_zeros(x),)

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        v = state[0]
        if not self.dampening:
            v = self.rho * v + self.lr * dx
            return (v,), v
        # a state made without dampening (set later by `adjust`) has no step count: it counts as begun
        steps = state[1] if len(state) > 1 else 1
        share = 1 - self.dampening if steps and self.rho else 1.0
        v = self.rho * v + (share * self.lr) * dx
        return (v, steps + 1), v


@dataclasses.dataclass(frozen=True)
class Nesterov(Rule):
    """Nesterov's accelerated gradient: `v = rho * v - lr * dx; x += rho * v - lr * dx`.

    `dampening` must be 0: PyTorch's SGD refuses `nesterov=True` with dampening, and so does this
    rule (use `Momentum` for damped momentum).

    >>> from pullback import optim
    >>> optim.Nesterov()
    Nesterov(lr=0.001, rho=0.9)
    """

    lr: float = 0.001
    rho: float = 0.9
    dampening: float = 0.0

    def __post_init__(self):
        self._check(lr="nonnegative", rho="fraction", dampening="unit")
        if self.dampening:
            raise ValueError(f"Nesterov: dampening must be 0, got {self.dampening!r} (PyTorch's SGD refuses nesterov=True "
                             "with dampening too); for damped momentum use Momentum(lr, rho, dampening=...)")

    def __repr__(self):
        return self._repr_without({"dampening": 0.0})

    def init(self, x: np.ndarray) -> tuple[Any, ...]:
        return (_zeros(x),)

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        (v,) = state
        v = self.rho * v - self.lr * dx
        return (v,), self.lr * dx - self.rho * v


@dataclasses.dataclass(frozen=True)
class Adam(Rule):
    """Adam (Kingma and Ba, 2015) with bias correction; the state holds `(m, v, step)`.

    With `amsgrad=True` (PyTorch's AMSGrad) the state also keeps `v_max`, the elementwise maximum
    of every `v` so far, and the step divides by `sqrt(v_max / (1 - beta2**step)) + eps`: the
    maximum is taken of the uncorrected moments, then corrected with this step's factor, in
    PyTorch's order.

    >>> from pullback import optim
    >>> optim.Adam()
    Adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08)
    >>> optim.Adam(amsgrad=True)
    Adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08, amsgrad=True)
    """

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    amsgrad: bool = False

    def __post_init__(self):
        self._check(lr="nonnegative", beta1="fraction", beta2="fraction", eps="nonnegative")
        self._check_flag("amsgrad")

    def __repr__(self):
        return self._repr_without({"amsgrad": False})

    def init(self, x: np.ndarray) -> tuple[Any, ...]:
        return _adam_init(self, x)

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        return _adam_step(self, state, dx)


def _adam_init(rule, x):
    return (_zeros(x), _zeros(x), 0, _zeros(x)) if rule.amsgrad else (_zeros(x), _zeros(x), 0)


def _adam_step(rule, state, dx):
    m, v, t = state[:3]
    t += 1
    m = rule.beta1 * m + (1 - rule.beta1) * dx
    v = rule.beta2 * v + (1 - rule.beta2) * _squared(dx)
    m_hat = m / (1 - rule.beta1**t)
    if not rule.amsgrad:
        v_hat = v / (1 - rule.beta2**t)
        return (m, v, t), rule.lr * m_hat / (np.sqrt(v_hat) + rule.eps)
    # `adjust(state, amsgrad=True)` starts the maximum at this step's v
    v_max = np.maximum(state[3], v) if len(state) > 3 else v
    v_hat = v_max / (1 - rule.beta2**t)
    return (m, v, t, v_max), rule.lr * m_hat / (np.sqrt(v_hat) + rule.eps)


@dataclasses.dataclass(frozen=True)
class AdamW(Rule):
    """Adam with decoupled weight decay (Loshchilov and Hutter), as in PyTorch and Optax:
    `x -= lr * (adam_direction + weight_decay * x)`.

    `amsgrad=True` keeps the maximum of the second moments, as in `Adam`.

    >>> from pullback import optim
    >>> optim.AdamW(weight_decay=0.1)
    AdamW(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0.1)
    """

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 1e-2
    amsgrad: bool = False

    def __post_init__(self):
        self._check(lr="nonnegative", beta1="fraction", beta2="fraction", eps="nonnegative", weight_decay="nonnegative")
        self._check_flag("amsgrad")

    def __repr__(self):
        return self._repr_without({"amsgrad": False})

    def init(self, x: np.ndarray) -> tuple[Any, ...]:
        return _adam_init(self, x)

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        state, delta = _adam_step(self, state, dx)
        return state, delta + (self.lr * self.weight_decay) * x


@dataclasses.dataclass(frozen=True)
class RMSProp(Rule):
    """RMSProp: `s = rho * s + (1 - rho) * dx**2; x -= lr * dx / (sqrt(s) + eps)`.

    With `centred=True` it also tracks the mean gradient `g` and divides by `sqrt(s - g**2) + eps`.

    >>> from pullback import optim
    >>> optim.RMSProp(centred=True)
    RMSProp(lr=0.001, rho=0.9, eps=1e-08, centred=True)
    """

    lr: float = 1e-3
    rho: float = 0.9
    eps: float = 1e-8
    centred: bool = False

    def __post_init__(self):
        self._check(lr="nonnegative", rho="fraction", eps="nonnegative")
        if not isinstance(self.centred, (bool, np.bool_)):
            raise TypeError(f"RMSProp: centred must be True or False, got {self.centred!r}")
        object.__setattr__(self, "centred", bool(self.centred))

    def init(self, x: np.ndarray) -> tuple[Any, ...]:
        return (_zeros(x), _zeros(x)) if self.centred else (_zeros(x),)

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        rho = self.rho
        s = rho * state[0] + (1 - rho) * _squared(dx)
        if self.centred:
            mean = state[1] if len(state) > 1 else 0.0  # `adjust(state, centred=True)` starts the mean at zero
            g = rho * mean + (1 - rho) * dx
            spread = np.maximum(np.real(s) - _squared(g), 0.0)  # >= 0 exactly; rounding could dip below
            return (s, g), self.lr * dx / (np.sqrt(spread) + self.eps)
        return (s,), self.lr * dx / (np.sqrt(s) + self.eps)


@dataclasses.dataclass(frozen=True)
class AdaGrad(Rule):
    """AdaGrad: `acc += dx**2; x -= lr * dx / (sqrt(acc) + eps)`, the accumulator starting at zero.

    >>> from pullback import optim
    >>> optim.AdaGrad()
    AdaGrad(lr=0.1, eps=1e-08)
    """

    lr: float = 0.1
    eps: float = 1e-8

    def __post_init__(self):
        self._check(lr="nonnegative", eps="nonnegative")

    def init(self, x: np.ndarray) -> tuple[Any, ...]:
        return (_zeros(x),)

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        acc = state[0] + _squared(dx)
        return (acc,), self.lr * dx / (np.sqrt(acc) + self.eps)


@dataclasses.dataclass(frozen=True)
class Lion(Rule):
    """Lion (Chen et al., 2023): `x -= lr * (sign(beta1 * m + (1 - beta1) * dx) + weight_decay * x)`,
    then `m = beta2 * m + (1 - beta2) * dx`.

    >>> from pullback import optim
    >>> optim.Lion()
    Lion(lr=0.0001, beta1=0.9, beta2=0.99, weight_decay=0.0)
    """

    lr: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.99
    weight_decay: float = 0.0

    def __post_init__(self):
        self._check(lr="nonnegative", beta1="fraction", beta2="fraction", weight_decay="nonnegative")

    def init(self, x: np.ndarray) -> tuple[Any, ...]:
        return (_zeros(x),)

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        (m,) = state
        direction = np.sign(self.beta1 * m + (1 - self.beta1) * dx)
        if self.weight_decay:
            direction = direction + self.weight_decay * x
        return (self.beta2 * m + (1 - self.beta2) * dx,), self.lr * direction


@dataclasses.dataclass(frozen=True)
class ClipGrad(Rule):
    """Clip each gradient entry to `[-delta, delta]`.

    >>> from pullback import optim
    >>> optim.ClipGrad(2)
    ClipGrad(delta=2.0)
    """

    delta: float = 10.0

    def __post_init__(self):
        self._check(delta="positive")

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        if dx.dtype.kind == "c":  # each part on its own (np.clip would order complex values lexicographically)
            return state, np.clip(dx.real, -self.delta, self.delta) + 1j * np.clip(dx.imag, -self.delta, self.delta)
        return state, np.clip(dx, -self.delta, self.delta)


@dataclasses.dataclass(frozen=True)
class ClipNorm(Rule):
    """Rescale each array's gradient so its `p`-norm is at most `max_norm` (per array, as in
    Optimisers.jl; a non-finite norm is an error, since rescaling cannot repair it).

    >>> from pullback import optim
    >>> optim.ClipNorm(1.0)
    ClipNorm(max_norm=1.0, p=2.0)
    """

    max_norm: float = 10.0
    p: float = 2.0

    def __post_init__(self):
        self._check(max_norm="positive", p="order")

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        # The norm stays an array (no float()): under pb.jit a float would fix its value by a guard,
        # tracing again at every step; the finiteness check is a guard whose outcome rarely changes.
        flat = np.ravel(dx).astype(np.complex128 if dx.dtype.kind == "c" else np.float64)
        # an empty gradient's p-norm is 0 for every p >= 1 (NumPy 2.2 raises for p = inf)
        norm = np.linalg.norm(flat, ord=self.p) if flat.size else np.float64(0.0)
        if not np.isfinite(norm):
            raise ValueError(
                f"ClipNorm: the gradient's {self.p:g}-norm is {float(traced_value(norm))}; it contains inf or nan. "
                "Find where the loss overflows (or skip this step) before clipping."
            )
        # No branch on the norm: under pb.jit it would be a guard per array, and steps clipped now and then
        # would trace again. Unclipped, the factor is exactly 1 and dx * 1 is dx. The factor is in dx's real
        # dtype, so a float32 gradient stays float32 (as a Python float keeps it).
        factor = self.max_norm / np.maximum(norm, self.max_norm)
        return state, dx * factor.astype(np.finfo(dx.dtype).dtype)


@dataclasses.dataclass(frozen=True)
class WeightDecay(Rule):
    """Add `lam * x` to the gradient (L2 regularisation; put it before the rule that scales by lr).

    >>> from pullback import optim
    >>> optim.WeightDecay()
    WeightDecay(lam=0.0005)
    """

    lam: float = 5e-4

    def __post_init__(self):
        self._check(lam="nonnegative")

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        return state, dx + self.lam * x


@dataclasses.dataclass(frozen=True, init=False, repr=False)
class OptimiserChain(Rule):
    """Apply rules one after another: each one's `delta` is the next one's `dx`.

    The state is a tuple with one entry per rule.

    >>> from pullback import optim
    >>> optim.OptimiserChain(optim.ClipNorm(1.0), optim.Adam())
    OptimiserChain(ClipNorm(max_norm=1.0, p=2.0), Adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08))
    """

    rules: tuple[Rule, ...] = ()

    def __init__(self, *rules: Rule) -> None:
        for r in rules:
            if not isinstance(r, Rule):
                hint = " (an instance is needed: add parentheses)" if isinstance(r, type) else ""
                raise TypeError(f"OptimiserChain takes rules, got {r!r}{hint}")
        object.__setattr__(self, "rules", tuple(rules))

    def __repr__(self):
        return f"OptimiserChain({', '.join(map(repr, self.rules))})"

    @classmethod
    def from_hyperparameters(cls, hyperparameters: dict[str, Any]) -> "OptimiserChain":
        return cls(*hyperparameters["rules"])

    def init(self, x: np.ndarray) -> tuple[Any, ...]:
        return tuple(r.init(x) for r in self.rules)

    def apply(self, state: tuple[Any, ...], x: np.ndarray, dx: np.ndarray) -> tuple[tuple[Any, ...], np.ndarray]:
        new_state = []
        for rule, s in zip(self.rules, state):
            s, dx = rule.apply(s, x, dx)
            new_state.append(s)
        return tuple(new_state), dx

    def adjusted(self, changes: dict[str, Any]) -> tuple[Rule, set[str]]:
        used: set[str] = set()
        rules = []
        for r in self.rules:
            r, u = r.adjusted(changes)
            rules.append(r)
            used |= u
        return (OptimiserChain(*rules) if used else self), used
