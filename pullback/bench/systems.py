"""One adapter per system: pullback, the hand-written NumPy floor, and the peers.

An adapter turns a problem (see `workloads.make_problem`) into a `Prepared`: `step()`
computes one gradient to completion (the timed part; JAX results are waited for) and
`to_numpy(result)` turns what `step` returned into the agreed list of NumPy arrays.
Peers are imported only inside the adapters, so a missing peer is skipped cleanly;
an adapter without a version of a workload raises `Unsupported`.

>>> names = [s.name for s in SYSTEMS]
>>> names[:2], "pytorch-eager" in names
(['pullback', 'pullback-jit'], True)
>>> s = by_name("numpy-floor")
>>> p = s.prepare("chain", {"x": np.zeros(3, np.float32), "ops": 5})
>>> [g.shape for g in p.to_numpy(p.step())]
[(3,)]
"""

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import resnets
from .workloads import chain, chain_floor, chain_floor_recomputing, chain_forward_accumulation, mlp_floor, mlp_loss

MLP_KEYS = ("w1", "b1", "w2", "b2", "w3", "b3")


class Unsupported(Exception):
    """This system has no version of this workload (said in the report, not an error)."""


@dataclass
class Prepared:
    """`step()` computes the gradient; `to_numpy` turns it into the agreed list of arrays;
    `settle()`, if given, brings `step` to the state a long run would time (a JIT's replay
    compiled and fused). The steady-state timing settles first; a fresh process does not,
    so its first gradient is a cold one."""

    step: Callable[[], Any]
    to_numpy: Callable[[Any], list]
    settle: Callable[[], Any] | None = None


class System:
    """Base adapter: `library` is the module that must be importable for the system to run."""

    name = ""
    library = None

    def available(self):
        return self.library is None or importlib.util.find_spec(self.library) is not None

    def import_library(self):
        if self.library is not None:
            importlib.import_module(self.library)

    def prepare(self, kind, problem):
        build = getattr(self, kind, None)
        if build is None:
            raise Unsupported(f"{self.name} has no {kind} version in this suite")
        return build(problem)


def _as_list(values):
    return [np.asarray(v) for v in values]


class Pullback(System):
    name = "pullback"
    library = "pullback"

    def chain(self, problem):
        import pullback as pb

        x, n = problem["x"], problem["ops"]
        return Prepared(lambda: pb.gradient(lambda v: chain(v, n, np), x)[0], lambda g: [g])

    def mlp(self, problem):
        import pullback as pb

        # Plain NumPy code over a dict of arrays; the gradient comes back as a dict.
        params = dict(zip(MLP_KEYS, problem["params"]))
        x, onehot = problem["x"], problem["onehot"]

        def loss(p):
            return mlp_loss([p[k] for k in MLP_KEYS], x, onehot, np)

        return Prepared(lambda: pb.gradient(loss, params)[0], lambda g: [g[k] for k in MLP_KEYS])

    def resnet(self, problem):
        import pullback as pb

        nn = pullback_nn()
        spec, x, onehot = problem["spec"], problem["x"], problem["onehot"]
        model = nn.trainmode(nn.resnet(18, num_classes=spec.num_classes, rng=np.random.default_rng(0)))
        load_params(model, problem["params"])

        return Prepared(lambda: pb.gradient(lambda m: resnet_loss(m, x, onehot), model)[0],
                        lambda g: model_gradients(model, g))


def resnet_loss(model, x, onehot):
    """Mean cross-entropy of the model's logits, written in plain NumPy."""
    z = model(x)
    zmax = np.max(z, axis=1, keepdims=True)
    lse = np.log(np.sum(np.exp(z - zmax), axis=1, keepdims=True)) + zmax
    return np.sum((lse - z) * onehot) * (1.0 / z.shape[0])


class PullbackJit(System):
    """pullback's gradient under `pb.jit`: traced on the first call, replayed after."""

    name = "pullback-jit"
    library = "pullback"

    def chain(self, problem):
        import pullback as pb

        x, n = problem["x"], problem["ops"]
        step = pb.jit(lambda x: pb.gradient(lambda v: chain(v, n, np), x)[0])
        return _settled(step, [x], lambda g: [g])

    def mlp(self, problem):
        import pullback as pb

        params = dict(zip(MLP_KEYS, problem["params"]))
        x, onehot = problem["x"], problem["onehot"]

        def loss(p, x, onehot):
            return mlp_loss([p[k] for k in MLP_KEYS], x, onehot, np)

        step = pb.jit(lambda p, x, onehot: pb.gradient(loss, p, x, onehot)[0])
        return _settled(step, [params, x, onehot], lambda g: [g[k] for k in MLP_KEYS])

    def resnet(self, problem):
        import pullback as pb

        nn = pullback_nn()
        spec, x, onehot = problem["spec"], problem["x"], problem["onehot"]
        model = nn.trainmode(nn.resnet(18, num_classes=spec.num_classes, rng=np.random.default_rng(0)))
        load_params(model, problem["params"])
        step = pb.jit(lambda m, x, onehot: pb.gradient(lambda m: resnet_loss(m, x, onehot), m)[0])
        return _settled(step, [model, x, onehot], lambda g: model_gradients(model, g))


def _settled(step, args, to_numpy):
    """Prepared `step(*args)`, whose settling replays it once (compiling the trace) and fuses it
    where it can be (see `Jitted.wait_for_fusion`), so the timings are of the replay a long run uses."""
    def settle():
        step(*args)
        step(*args)
        step.wait_for_fusion(start=True)

    return Prepared(lambda: step(*args), to_numpy, settle)


def pullback_nn():
    """`pullback.nn`, or Unsupported with a clear note while its ResNet does not exist yet."""
    try:
        nn = importlib.import_module("pullback.nn")
    except ImportError as e:
        raise Unsupported(f"pullback.nn cannot be imported ({e}); the ResNet workloads need pb.nn.resnet") from None
    if not hasattr(nn, "resnet"):
        raise Unsupported("pb.nn.resnet does not exist yet; the ResNet workloads need it")
    return nn


def parameter_layers(model, grad=None):
    """(layer, gradient of that layer) pairs for the Conv, BatchNorm and Dense layers, in walk order."""
    import pullback as pb

    nn = pullback_nn()

    def is_layer(x):
        return isinstance(x, (nn.Conv, nn.BatchNorm, nn.Dense))

    found = []

    def leaf(x, parts, path):
        if is_layer(x):
            found.append((x, parts[0]))

    pb.tree.walk(model, leaf, lambda *args: None, ys=(grad,), exclude=is_layer, cycle=lambda *args: None)
    return found


_FIELDS = {"Conv": ("weight",), "BatchNorm": ("scale", "shift"), "Dense": ("weight", "bias")}


def load_params(model, params):
    """Put the flat parameter list into a `pb.nn.resnet(18)` model, in place (shapes checked)."""
    slots = [(layer, f) for layer, _ in parameter_layers(model) for f in _FIELDS[type(layer).__name__]]
    if len(slots) != len(params):
        raise ValueError(f"pb.nn.resnet(18) has {len(slots)} parameter arrays; the benchmark's ResNet-18 has {len(params)}")
    for (layer, field), value in zip(slots, params):
        if getattr(layer, field).shape != value.shape:
            raise ValueError(f"{layer!r}.{field} has shape {getattr(layer, field).shape}; expected {value.shape}")
        setattr(layer, field, value)


def model_gradients(model, grad):
    """The gradient of a `pb.nn.resnet` model as the flat list (order of `load_params`)."""
    out = []
    for layer, g in parameter_layers(model, grad):
        for field in _FIELDS[type(layer).__name__]:
            out.append(None if g is None else getattr(g, field))
    return out


class NumpyFloor(System):
    name = "numpy-floor"

    def chain(self, problem):
        x, n = problem["x"], problem["ops"]
        return Prepared(lambda: chain_floor(x, n), lambda g: [g])

    def mlp(self, problem):
        params, x, onehot = problem["params"], problem["x"], problem["onehot"]
        return Prepared(lambda: mlp_floor(params, x, onehot), list)

    def resnet(self, problem):
        spec, params, x, onehot = problem["spec"], problem["params"], problem["x"], problem["onehot"]
        return Prepared(lambda: resnets.numpy_gradient(spec, params, x, onehot), list)


class NumpyFloorRecomputing(System):
    """The chain's slower hand-written reverse mode (recomputes in its backward pass)."""

    name = "numpy-recompute"

    def chain(self, problem):
        x, n = problem["x"], problem["ops"]
        return Prepared(lambda: chain_floor_recomputing(x, n), lambda g: [g])


class NumpyForwardAccumulation(System):
    """The chain's derivative accumulated in its forward pass (elementwise chains only)."""

    name = "numpy-forward-acc"

    def chain(self, problem):
        x, n = problem["x"], problem["ops"]
        return Prepared(lambda: chain_forward_accumulation(x, n), lambda g: [g])


class Autograd(System):
    name = "autograd"
    library = "autograd"

    def chain(self, problem):
        import autograd
        import autograd.numpy as anp

        x, n = problem["x"], problem["ops"]
        grad = autograd.grad(lambda v: chain(v, n, anp))
        return Prepared(lambda: grad(x), lambda g: [g])

    def mlp(self, problem):
        import autograd
        import autograd.numpy as anp

        params, x, onehot = problem["params"], problem["x"], problem["onehot"]
        grad = autograd.grad(lambda p: mlp_loss(p, x, onehot, anp))
        return Prepared(lambda: grad(params), _as_list)


class MyGrad(System):
    name = "mygrad"
    library = "mygrad"

    def chain(self, problem):
        import mygrad as mg

        x, n = problem["x"], problem["ops"]

        def step():
            t = mg.tensor(x, copy=False)
            chain(t, n, mg).backward()
            return t.grad

        return Prepared(step, lambda g: [g])

    def mlp(self, problem):
        import mygrad as mg

        params, x, onehot = problem["params"], problem["x"], problem["onehot"]

        def step():
            ts = [mg.tensor(p, copy=False) for p in params]
            mlp_loss(ts, x, onehot, mg).backward()
            return [t.grad for t in ts]

        return Prepared(step, _as_list)


class TorchEager(System):
    name = "pytorch-eager"
    library = "torch"

    def chain(self, problem):
        import torch

        t = torch.from_numpy(problem["x"]).requires_grad_()
        n = problem["ops"]
        return Prepared(lambda: torch.autograd.grad(chain(t, n, torch), t)[0], lambda g: [g.numpy()])

    def mlp(self, problem):
        import torch
        import torch.nn.functional as F

        w1, b1, w2, b2, w3, b3 = ts = [torch.from_numpy(p).requires_grad_() for p in problem["params"]]
        x, labels = torch.from_numpy(problem["x"]), torch.from_numpy(problem["labels"])

        def step():
            h = torch.relu(torch.addmm(b1, x, w1))
            h = torch.relu(torch.addmm(b2, h, w2))
            return torch.autograd.grad(F.cross_entropy(torch.addmm(b3, h, w3), labels), ts)

        return Prepared(step, lambda gs: [g.numpy() for g in gs])

    def resnet(self, problem):
        import torch
        import torch.nn.functional as F

        model = resnets.torch_model(problem["spec"], problem["params"])
        params = list(model.parameters())
        x = torch.from_numpy(np.ascontiguousarray(problem["x"].transpose(0, 3, 1, 2)))
        labels = torch.from_numpy(problem["labels"])
        return Prepared(lambda: torch.autograd.grad(F.cross_entropy(model(x), labels), params),
                        resnets.torch_gradients_as_numpy)


class JaxJit(System):
    name = "jax-jit"
    library = "jax"
    jit = True

    def _compile(self, fn):
        import jax

        grad = jax.grad(fn)
        return jax.jit(grad) if self.jit else grad

    def _prepared(self, grad, *args):
        import jax

        return Prepared(lambda: jax.block_until_ready(grad(*args)), _as_list)

    def chain(self, problem):
        import jax.numpy as jnp

        n = problem["ops"]
        prepared = self._prepared(self._compile(lambda v: chain(v, n, jnp)), jnp.asarray(problem["x"]))
        return Prepared(prepared.step, lambda g: [np.asarray(g)])

    def mlp(self, problem):
        import jax.numpy as jnp

        grad = self._compile(lambda p, x, onehot: mlp_loss(p, x, onehot, jnp))
        params = [jnp.asarray(p) for p in problem["params"]]
        return self._prepared(grad, params, jnp.asarray(problem["x"]), jnp.asarray(problem["onehot"]))

    def resnet(self, problem):
        import jax.numpy as jnp

        grad = self._compile(resnets.jax_loss(problem["spec"]))
        params = [jnp.asarray(p) for p in problem["params"]]
        return self._prepared(grad, params, jnp.asarray(problem["x"]), jnp.asarray(problem["onehot"]))


class JaxEager(JaxJit):
    name = "jax-eager"
    jit = False


SYSTEMS = (Pullback(), PullbackJit(), NumpyFloor(), NumpyFloorRecomputing(), NumpyForwardAccumulation(), Autograd(), MyGrad(), TorchEager(), JaxJit(), JaxEager())


def by_name(name):
    """The adapter called `name` (hyphens or spaces; e.g. `pytorch-eager`)."""
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    for s in SYSTEMS:
        if s.name == key:
            return s
    raise ValueError(f"unknown system {name!r}; choose from {', '.join(s.name for s in SYSTEMS)}")
