"""The benchmark's workloads: what is differentiated, at which size, and the data it runs on.

A `Workload` names a kind of problem (`chain`, `mlp`, `resnet`) and its sizes;
`make_problem(workload)` builds its inputs deterministically with NumPy alone, so a fresh
process can rebuild exactly the same problem. Every system receives the same problem and
returns its gradient as a list of arrays in one agreed order and layout.

>>> w = workloads(quick=True)["chain-small"]
>>> w.kind, w.sizes, w.per_op
('chain', {'elements': 10, 'ops': 100}, 100)
>>> make_problem(w)["x"].dtype
dtype('float32')
"""

from dataclasses import dataclass, field

import numpy as np

from . import resnets

# The chain cycles through these steps; each keeps values in a tame range.
CHAIN_STEPS = ("sin", "scale", "tanh", "shift", "cos")

MLP_SIZES = (784, 512, 512, 10)


@dataclass(frozen=True)
class Workload:
    """One timed problem. `per_op` divides times for display (µs per operation); `tolerance`
    is the largest relative gradient error (||g - ref|| / ||ref|| per array) against the
    float64 reference that still counts as the same gradient.

    The ResNets get 5e-2: with training-mode BatchNorm over 112x112 maps, a plain float32
    implementation (the hand-written floor itself) is about 1e-2 away from float64 in some
    arrays, while a wrong gradient (a transposed filter, a missing term) is off by O(1)."""

    name: str
    title: str
    kind: str
    sizes: dict = field(default_factory=dict)
    per_op: int = 0
    tolerance: float = 1e-3
    samples: int = 15
    fresh: bool = False  # also measure time-to-first-gradient and peak memory in fresh processes
    fresh_memory: bool = False  # the heap releases freed memory before each sample (see `heap`)


def workloads(quick=False):
    """All timed workloads by name; `quick` shrinks the big ones (CI checks that they run, not speed)."""
    chain_large = 100_000 if quick else 1_000_000
    image, batches = (64, (1, 2)) if quick else (224, (1, 8))
    found = [
        Workload("chain-small", "100-op elementwise chain, 10 float32 elements (µs per op)", "chain",
                 {"elements": 10, "ops": 100}, per_op=100, fresh=True),
        Workload("chain-large", f"100-op elementwise chain, {chain_large:,} float32 elements", "chain",
                 {"elements": chain_large, "ops": 100}, samples=11),
        Workload("chain-large-fresh", f"the same chain, {chain_large:,} elements, on fresh memory each call", "chain",
                 {"elements": chain_large, "ops": 100}, samples=11, fresh_memory=True),
        Workload("mlp", "MLP 784-512-512-10, batch 128, softmax cross-entropy", "mlp",
                 {"batch": 128}, samples=15, fresh=True),
    ]
    for tag, batch in zip(("b1", "b8"), batches):
        found.append(Workload(
            f"resnet18-{tag}", f"ResNet-18, {image}x{image}, batch {batch}, training-mode BatchNorm", "resnet",
            {"batch": batch, "image": image, "classes": 1000}, tolerance=5e-2, samples=7, fresh=True))
    return {w.name: w for w in found}


def make_problem(workload, dtype=np.float32):
    """The inputs of `workload` as plain NumPy arrays (seeded: the same in every process)."""
    rng = np.random.default_rng(0)
    sizes = workload.sizes
    if workload.kind == "chain":
        x = rng.uniform(-1, 1, sizes["elements"]).astype(dtype)
        return {"x": x, "ops": sizes["ops"]}
    if workload.kind == "mlp":
        params = []
        for fan_in, fan_out in zip(MLP_SIZES[:-1], MLP_SIZES[1:]):
            bound = np.sqrt(6.0 / (fan_in + fan_out))
            params += [rng.uniform(-bound, bound, (fan_in, fan_out)).astype(dtype),
                       rng.uniform(-0.1, 0.1, fan_out).astype(dtype)]
        x = rng.standard_normal((sizes["batch"], MLP_SIZES[0]), dtype=np.float32).astype(dtype)
        return {"params": params, "x": x, **_labels(rng, sizes["batch"], MLP_SIZES[-1], dtype)}
    if workload.kind == "resnet":
        spec = resnets.resnet18_spec(num_classes=sizes["classes"])
        params = resnets.resnet18_params(spec, rng, dtype)
        x = rng.standard_normal((sizes["batch"], sizes["image"], sizes["image"], 3), dtype=np.float32).astype(dtype)
        return {"spec": spec, "params": params, "x": x, **_labels(rng, sizes["batch"], sizes["classes"], dtype)}
    raise ValueError(f"unknown workload kind {workload.kind!r}; expected chain, mlp or resnet")


def _labels(rng, batch, classes, dtype):
    labels = rng.integers(0, classes, batch)
    return {"labels": labels, "onehot": np.eye(classes, dtype=dtype)[labels]}


def as_float64(problem):
    """The same problem in float64 (for the reference gradient)."""
    def convert(v):
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            return v.astype(np.float64)
        if isinstance(v, list):
            return [convert(a) for a in v]
        return v

    return {k: convert(v) for k, v in problem.items()}


def chain(x, n_ops, lib):
    """The elementwise chain written once for any NumPy-like module `lib` (np, autograd.numpy,
    mygrad, jax.numpy, torch): sin, *0.9, tanh, +0.1, cos, repeated; then the sum."""
    for k in range(n_ops):
        step = CHAIN_STEPS[k % len(CHAIN_STEPS)]
        if step == "sin":
            x = lib.sin(x)
        elif step == "scale":
            x = x * 0.9
        elif step == "tanh":
            x = lib.tanh(x)
        elif step == "shift":
            x = x + 0.1
        else:
            x = lib.cos(x)
    return lib.sum(x)


def chain_floor(x, n_ops):
    """Hand-written reverse mode of `chain`, as a careful person writes it: the cost with no AD
    machinery at all. The forward pass keeps each step's local derivative (cos x for sin,
    1 - t² from tanh's own output t, -sin x for cos; the constant scales fold into one number)
    and updates x in place; the backward pass multiplies the saved factors into one buffer.

    >>> x = np.array([0.3, -0.2])
    >>> h = 1e-6
    >>> fd = (chain(x + h, 7, np) - chain(x - h, 7, np)) / (2 * h)  # x + h moves both entries
    >>> bool(np.isclose(chain_floor(x, 7).sum(), fd))
    True
    """
    x = x.copy()
    factors = []
    scale = 1.0
    for k in range(n_ops):
        step = CHAIN_STEPS[k % len(CHAIN_STEPS)]
        if step == "sin":
            factors.append(np.cos(x))
            np.sin(x, out=x)
        elif step == "scale":
            x *= 0.9
            scale *= 0.9
        elif step == "tanh":
            np.tanh(x, out=x)
            d = x * x
            factors.append(np.subtract(1, d, out=d))
        elif step == "shift":
            x += 0.1
        else:
            d = np.sin(x)
            factors.append(np.negative(d, out=d))
            np.cos(x, out=x)
    g = factors.pop() if factors else np.ones_like(x)
    while factors:
        g *= factors.pop()
    g *= x.dtype.type(scale)
    return g


def chain_floor_recomputing(x, n_ops):
    """Hand-written reverse mode of `chain` that saves each step's input and recomputes tanh,
    sin and cos in the backward pass (a slower floor, kept for comparison).

    >>> x = np.array([0.3, -0.2])
    >>> bool(np.allclose(chain_floor_recomputing(x, 7), chain_floor(x, 7)))
    True
    """
    saved = []
    for k in range(n_ops):
        step = CHAIN_STEPS[k % len(CHAIN_STEPS)]
        saved.append(x)
        if step == "sin":
            x = np.sin(x)
        elif step == "scale":
            x = x * 0.9
        elif step == "tanh":
            x = np.tanh(x)
        elif step == "shift":
            x = x + 0.1
        else:
            x = np.cos(x)
    g = np.ones_like(x)
    for k in reversed(range(n_ops)):
        step = CHAIN_STEPS[k % len(CHAIN_STEPS)]
        v = saved[k]
        if step == "sin":
            g = g * np.cos(v)
        elif step == "scale":
            g = g * 0.9
        elif step == "tanh":
            t = np.tanh(v)
            g = g * (1 - t * t)
        elif step == "cos":
            g = -g * np.sin(v)
    return g


def chain_forward_accumulation(x, n_ops):
    """The chain's derivative accumulated during the forward pass, in place, saving nothing:
    possible only because every step is elementwise (one input, one output of the same shape),
    so it is no reverse mode a general program could use; kept to show the floor's margin.

    >>> x = np.array([0.3, -0.2])
    >>> bool(np.allclose(chain_forward_accumulation(x, 7), chain_floor(x, 7)))
    True
    """
    x = x.copy()
    d = np.ones_like(x)
    t = np.empty_like(x)
    scale = 1.0
    for k in range(n_ops):
        step = CHAIN_STEPS[k % len(CHAIN_STEPS)]
        if step == "sin":
            d *= np.cos(x, out=t)
            np.sin(x, out=x)
        elif step == "scale":
            x *= 0.9
            scale *= 0.9
        elif step == "tanh":
            np.tanh(x, out=x)
            np.multiply(x, x, out=t)
            d *= np.subtract(1, t, out=t)
        elif step == "shift":
            x += 0.1
        else:
            d *= np.negative(np.sin(x, out=t), out=t)
            np.cos(x, out=x)
    d *= x.dtype.type(scale)
    return d


def mlp_loss(params, x, onehot, lib):
    """Softmax cross-entropy of the MLP, for any NumPy-like `lib`; `params` is [w1, b1, w2, b2, w3, b3]."""
    w1, b1, w2, b2, w3, b3 = params
    h = lib.maximum(x @ w1 + b1, 0.0)
    h = lib.maximum(h @ w2 + b2, 0.0)
    z = h @ w3 + b3
    zmax = lib.max(z, axis=1, keepdims=True)
    lse = lib.log(lib.sum(lib.exp(z - zmax), axis=1, keepdims=True)) + zmax
    return lib.sum((lse - z) * onehot) * (1.0 / x.shape[0])


def mlp_floor(params, x, onehot):
    """Hand-written backpropagation through the MLP: gradients of [w1, b1, w2, b2, w3, b3].

    >>> p = make_problem(workloads()["mlp"])
    >>> g = mlp_floor(p["params"], p["x"][:4], p["onehot"][:4])
    >>> [a.shape for a in g[-2:]], g[0].dtype
    ([(512, 10), (10,)], dtype('float32'))
    """
    w1, b1, w2, b2, w3, b3 = params
    a1 = x @ w1 + b1
    h1 = np.maximum(a1, 0)
    a2 = h1 @ w2 + b2
    h2 = np.maximum(a2, 0)
    z = h2 @ w3 + b3
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dz = (p - onehot) * (1.0 / x.shape[0])
    dh2 = (dz @ w3.T) * (a2 > 0)
    dh1 = (dh2 @ w2.T) * (a1 > 0)
    return [x.T @ dh1, dh1.sum(axis=0), h1.T @ dh2, dh2.sum(axis=0), h2.T @ dz, dz.sum(axis=0)]
