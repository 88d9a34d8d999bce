"""`check_gradient`: reverse mode, forward mode and float64 finite differences, leaf by leaf."""

from dataclasses import dataclass

import numpy as np

from . import tree
from ._api import _scalar_output, _trace_call
from ._backward import backward, fit
from ._derivatives import _push, _tangent_part
from ._leaves import Arguments
from ._trace import stop_gradient

__all__ = ["check_gradient", "GradientCheck", "LeafCheck"]


@dataclass(frozen=True)
class LeafCheck:
    """How one float leaf fared: largest errors of reverse and forward mode against finite differences."""

    path: str
    directions: int
    reverse_abs: float
    reverse_rel: float
    forward_abs: float
    forward_rel: float
    ok: bool


class GradientCheck:
    """The result of `check_gradient`: truthy when every leaf agrees; prints as a table."""

    def __init__(self, leaves, rtol, atol):
        self.leaves = tuple(leaves)
        self.rtol, self.atol = rtol, atol  # rtol None: chosen per leaf dtype

    def __bool__(self):
        return all(leaf.ok for leaf in self.leaves)

    @property
    def failures(self):
        return tuple(leaf for leaf in self.leaves if not leaf.ok)

    def __str__(self):
        bad = len(self.failures)
        verdict = "all agree" if not bad else f"{bad} of {len(self.leaves)} disagree"
        lines = [
            f"gradient check, {len(self.leaves)} leaves: {verdict} "
            f"(rtol={'1e-5 float64 / 2e-3 float32' if self.rtol is None else format(self.rtol, 'g')}, atol={self.atol:g})",
            "| leaf | directions | reverse abs err | reverse rel err | forward abs err | forward rel err | ok |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for leaf in self.leaves:
            lines.append(
                f"| {leaf.path} | {leaf.directions} | {leaf.reverse_abs:.2e} | {leaf.reverse_rel:.2e} "
                f"| {leaf.forward_abs:.2e} | {leaf.forward_rel:.2e} | {'yes' if leaf.ok else 'NO'} |"
            )
        return "\n".join(lines)

    __repr__ = __str__


def check_gradient(f, *args, rtol=None, atol=1e-6, eps=1e-6, directions=3, dense_up_to=6, seed=0):
    """Compare reverse mode, forward mode and float64 central differences for each float leaf of `args`.

    Leaves with at most `dense_up_to` elements are checked along every axis direction;
    larger ones along `directions` random unit directions, so the check stays fast. The
    default `rtol` is 1e-5 for float64 leaves and 2e-3 for lower precision.

    >>> import numpy as np, pullback as pb
    >>> model = {"w": np.array([1.0, 2.0]), "scale": 3.0}
    >>> result = pb.check_gradient(lambda m: np.sum(np.sin(m["w"]) * m["scale"]), model)
    >>> bool(result), [leaf.path for leaf in result.leaves]
    (True, ["['w']", "['scale']"])
    """
    rng = np.random.default_rng(seed)
    roots = [""] if len(args) == 1 else [f"args[{i}]" for i in range(len(args))]
    arguments = Arguments(args, range(len(args)), roots=roots)
    arguments.track(lambda x, path, companion: x)
    leaves = [(leaf.index, leaf.primal) for leaf in arguments.leaves]
    paths = [leaf.path.lstrip(".") for leaf in arguments.leaves]
    reverse = _reverse_gradients(f, args)
    wide = Arguments(tuple(tree.fmap(_to_float64, a) for a in args), range(len(args)))

    checks = []
    for key, primal in leaves:
        tol = rtol if rtol is not None else (1e-5 if np.result_type(primal) == np.float64 else 2e-3)
        worst = [0.0, 0.0, 0.0, 0.0]  # reverse abs, reverse rel, forward abs, forward rel
        ok = True
        vs = _directions(primal, rng, directions, dense_up_to)
        for v in vs:
            g = reverse[key]
            by_reverse = 0.0 if g is None else float(np.sum(np.asarray(g, np.float64) * v))
            out, tag = _push(f, arguments, lambda k, x, path, c, key=key, v=v: _like(v, x) if k == key else None)
            t = _tangent_part(out, tag)
            by_forward = 0.0 if t is None else float(t)
            by_fd = _central_difference(f, wide, key, v, eps)
            for slot, value in ((0, by_reverse), (2, by_forward)):
                err = abs(value - by_fd)
                worst[slot] = max(worst[slot], err)
                worst[slot + 1] = max(worst[slot + 1], err / max(abs(by_fd), 1e-300))
                ok = ok and err <= atol + tol * abs(by_fd)
        checks.append(LeafCheck(paths[key], len(vs), *worst, ok))
    return GradientCheck(checks, rtol, atol)


def _reverse_gradients(f, args):
    """The raw reverse-mode gradient of each leaf, in walk order."""
    tape, out, (arguments, nodes) = _trace_call(f, args, {}, range(len(args)))
    primals = [leaf.primal for leaf in arguments.leaves]
    seed = _scalar_output(out, tape)
    if seed is None:
        return [None] * len(nodes)
    grads = backward(tape, {seed: np.ones((), dtype=getattr(out, "dtype", np.float64))})
    return [None if grads[n] is None else fit(grads[n], p) for n, p in zip(nodes, primals)]


def _directions(primal, rng, count, dense_up_to):
    size = int(np.size(primal))
    shape = np.shape(primal)
    if size <= dense_up_to:
        return [np.eye(size)[j].reshape(shape) for j in range(size)]
    vs = []
    for _ in range(count):
        v = rng.standard_normal(shape)
        vs.append(v / np.linalg.norm(v))
    return vs


def _like(v, x):
    return float(v) if type(x) is float else np.asarray(v, dtype=x.dtype)


def _to_float64(x):
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return x.astype(np.float64)
    if isinstance(x, np.floating):
        return np.float64(x)
    return x


def _central_difference(f, wide, key, v, eps):
    def at(step):
        def move(x, path, companion):
            return x + step * v if len(wide.leaves) - 1 == key else x

        moved, _ = wide.track(move)
        return float(stop_gradient(f(*moved)))

    return (at(eps) - at(-eps)) / (2 * eps)
