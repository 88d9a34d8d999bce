"""Check derivatives: reverse mode, forward mode and float64 central differences, leaf by leaf.

- `check_gradient(f, *args)` compares, for every float leaf of the arguments (arrays,
  floats, fields of objects, entries of dicts and lists), the reverse-mode derivative
  (`pb.pullback`), the forward-mode derivative (`pb.jvp`) and float64 central differences
  along a few directions, and checks that the two modes are each other's transpose:
  `<J v, u> == <v, Jᵀ u>`. With `order=2` it also checks the derivative maps themselves
  (the function `(args, u) -> Jᵀ u` and the function `(args, v) -> J v`), as autograd's
  `check_grads` does. It returns a `GradientCheck`, truthy when everything agrees, which
  prints as a table naming each leaf by its path (`layers[1].weight`).
- `assert_gradient` is the same check raising `AssertionError` with that table.
- `check_transpose` is the transposition test alone, for points where finite
  differences mean nothing (kinks, ties).
- `numerical_gradient` is the float64 central-difference gradient, shaped like `pb.gradient`'s.

>>> import numpy as np
>>> from pullback import testing
>>> model = {"w": np.array([1.0, 2.0]), "scale": 3.0}
>>> result = testing.check_gradient(lambda m: np.sum(np.sin(m["w"]) * m["scale"]), model, order=2)
>>> bool(result), [leaf.path for leaf in result.leaves if leaf.of == "f"]
(True, ["['w']", "['scale']"])
"""

from dataclasses import dataclass

import numpy as np

from . import tree
from ._api import pullback
from ._arrays import as_array_api, as_numpy, as_type_of, dtype_kind, is_foreign_array, size_of, speaks_array_api_only
from ._derivatives import jvp
from ._leaves import Arguments

__all__ = [
    "check_gradient", "assert_gradient", "check_transpose", "numerical_gradient",
    "GradientCheck", "LeafCheck", "TransposeCheck",
]

MODES = ("rev", "fwd")


@dataclass(frozen=True)
class LeafCheck:
    """How one float leaf fared: the largest errors of reverse and forward mode against finite differences.

    `of` names the function differentiated: `"f"`, or at order 2 `"vjp of f"` (the map
    `(args, u) -> Jᵀ u`) and `"jvp of f"` (the map `(args, v) -> J v`). Errors of a mode
    not checked are None; `wrong` names the modes that disagree with central differences,
    `note` what else was wrong (a gradient of the wrong shape or dtype).
    """

    path: str
    directions: int
    reverse_abs: float | None
    reverse_rel: float | None
    forward_abs: float | None
    forward_rel: float | None
    ok: bool
    of: str = "f"
    wrong: tuple = ()
    note: str = ""


@dataclass(frozen=True)
class TransposeCheck:
    """The transposition test `<J v, u> == <v, Jᵀ u>` for random `v` and `u`; truthy when it holds.

    `forward` is `<J v, u>` (forward mode), `reverse` is `<v, Jᵀ u>` (reverse mode), `scale`
    the sum of the absolute values of all the products summed (zero when the function does not
    depend on its arguments); it holds when both are finite and
    `|forward - reverse| <= rtol * scale + atol`.
    """

    forward: float
    reverse: float
    scale: float
    rtol: float
    atol: float
    ok: bool
    of: str = "f"

    def __bool__(self):
        return self.ok

    def __str__(self):
        verdict = "holds" if self.ok else "FAILS"
        return (f"transposition <J v, u> == <v, Jᵀ u> of {self.of} {verdict}: forward {self.forward:.17g}, "
                f"reverse {self.reverse:.17g}, difference {abs(self.forward - self.reverse):.2e}, "
                f"allowed {self.rtol * self.scale + self.atol:.2e}")

    __repr__ = __str__


class GradientCheck:
    """The result of `check_gradient`: truthy when every leaf, every transposition test and every
    gradient's form agree; prints as a table, failures first.

    `leaves` holds one `LeafCheck` per leaf (and per derivative map at order 2), `transposes` the
    transposition tests, `problems` what was wrong with the form of the gradients, and `gradient`
    the reverse-mode gradient of `f` (shaped like the arguments, as `pb.gradient` gives it for a
    scalar `f`; None when reverse mode was not checked).
    """

    def __init__(self, leaves, transposes=(), problems=(), gradient=None, rtol=None, atol=1e-6, modes=MODES, order=1):
        self.leaves = tuple(leaves)
        self.transposes = tuple(transposes)
        self.problems = tuple(problems)
        self.gradient = gradient
        self.rtol, self.atol = rtol, atol  # rtol None: chosen per leaf dtype
        self.modes, self.order = tuple(modes), order

    def __bool__(self):
        return not self.failures and all(self.transposes) and not self.problems

    @property
    def failures(self):
        """The leaves whose derivatives disagree."""
        return tuple(leaf for leaf in self.leaves if not leaf.ok)

    def __str__(self):
        verdict = "; ".join(
            ([f"{len(self.failures)} of {len(self.leaves)} disagree"] if self.failures else [])
            + (["the transposition test fails"] if not all(self.transposes) else [])
            + ([f"{len(self.problems)} problems with the gradient's form"] if self.problems else [])) or "all agree"
        rtol = "1e-5 float64 / 2e-3 float32" if self.rtol is None else format(self.rtol, "g")
        lines = [f"gradient check ({', '.join(self.modes)} against float64 central differences, order {self.order}), "
                 f"{len(self.leaves)} leaves: {verdict} (rtol={rtol}, atol={self.atol:g})"]
        lines += [f"- {line}" for line in self._complaints()]
        orders = self.order > 1
        lines += [
            "| " + ("derivative of | " if orders else "") + "leaf | directions | reverse abs err | reverse rel err "
            "| forward abs err | forward rel err | ok |",
            "| " + ("--- | " if orders else "") + "--- | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for leaf in self.leaves:
            errors = " | ".join("-" if e is None else f"{e:.2e}" for e in
                                (leaf.reverse_abs, leaf.reverse_rel, leaf.forward_abs, leaf.forward_rel))
            lines.append("| " + (f"{leaf.of} | " if orders else "") + f"{leaf.path} | {leaf.directions} | {errors} | "
                         f"{'yes' if leaf.ok else 'NO'} |")
        lines += [str(t) for t in self.transposes]
        return "\n".join(lines)

    __repr__ = __str__

    def _complaints(self):
        """One line per failure, saying which derivative of which leaf is wrong."""
        for leaf in self.failures:
            of = "" if leaf.of == "f" else f" ({leaf.of})"
            for mode, err, rel in (("reverse", leaf.reverse_abs, leaf.reverse_rel),
                                   ("forward", leaf.forward_abs, leaf.forward_rel)):
                if mode in leaf.wrong:
                    rule = "rrule" if mode == "reverse" else "frule"
                    hint = (f"check the {rule} of the operations this leaf flows through" if leaf.of == "f" else
                            "check the derivatives of what the rules of the operations this leaf flows through compute")
                    yield (f"{leaf.path}{of}: {mode} mode differs from central differences by {err:.2e} "
                           f"(relative {rel:.2e}); {hint}")
            if leaf.note:
                yield f"{leaf.path}{of}: {leaf.note}"
        for t in self.transposes:
            if not t:
                yield (f"forward and reverse mode of {t.of} are not each other's transpose: a forward rule (frule) "
                       "disagrees with its reverse rule (rrule)")
        yield from self.problems


# --- the checks -----------------------------------------------------------------------------------
def check_gradient(f, *args, modes=MODES, order=1, rtol=None, atol=1e-6, eps=1e-6, directions=3, dense_up_to=6,
                   seed=0, transpose_rtol=None):
    """Compare reverse mode, forward mode and float64 central differences for each float leaf of `args`.

    `f` may return a number, an array, or a tuple, list or dict of them; a non-scalar output
    is seen through a fixed random cotangent `u` (the check compares `<u, J v>`). Leaves with
    at most `dense_up_to` elements are checked along every axis direction, so each element
    of the gradient is compared; larger ones along `directions` random unit directions
    (`dense_up_to=None` checks every element of every leaf). Central differences take steps
    of `eps` in float64 copies of the arguments. A derivative passes where
    `|derivative - difference| <= atol + rtol * |difference|`; the default `rtol` is 1e-5 for
    float64 leaves and 2e-3 for lower precision. `seed` (an int or a `np.random.Generator`)
    draws the random directions and cotangents. `modes` picks the modes checked; with both,
    the transposition test `<J v, u> == <v, Jᵀ u>` runs too (see `check_transpose`,
    `transpose_rtol` is its `rtol`). `order=2` also checks the derivative maps
    `(args, u) -> Jᵀ u` ("vjp of f") and `(args, v) -> J v` ("jvp of f") in the same modes.

    >>> import numpy as np
    >>> from pullback import testing
    >>> model = {"w": np.array([1.0, 2.0]), "scale": 3.0}
    >>> result = testing.check_gradient(lambda m: np.sum(np.sin(m["w"]) * m["scale"]), model)
    >>> bool(result), [leaf.path for leaf in result.leaves]
    (True, ["['w']", "['scale']"])
    >>> result.gradient[0]["w"]  # pb.gradient's value: 3 cos(w)
    array([ 1.62090692, -1.24844051])
    """
    modes = _modes(modes)
    if not (isinstance(order, int) and order >= 1):
        raise ValueError(f"order must be a positive integer (1: first derivatives, 2: also theirs); got {order!r}")
    rng = np.random.default_rng(seed)
    options = dict(rtol=rtol, atol=atol, eps=eps, directions=directions, dense_up_to=dense_up_to,
                   transpose_rtol=transpose_rtol)
    roots = [""] if len(args) == 1 else [f"args[{i}]" for i in range(len(args))]
    _refuse_automatic_modes(args, roots)
    leaves, transposes, problems, gradient = _check(f, args, roots, modes, order, options, rng, "f")
    return GradientCheck(leaves, transposes, problems, gradient, rtol, atol, modes, order)


def assert_gradient(f, *args, **options):
    """`check_gradient`, raising `AssertionError` with its table unless everything agrees; returns the result.

    >>> import numpy as np
    >>> from pullback import testing
    >>> testing.assert_gradient(lambda x: np.sum(x ** 3), np.array([1.0, -2.0]), dense_up_to=None).gradient
    (array([ 3., 12.]),)
    """
    result = check_gradient(f, *args, **options)
    if not result:
        raise AssertionError(str(result))
    return result


def check_transpose(f, *args, rtol=None, atol=1e-13, seed=0):
    """The transposition test `<J v, u> == <v, Jᵀ u>`: forward mode against reverse mode, no finite differences.

    `v` is random and shaped like the float leaves of `args`, `u` random and shaped like the
    output. Forward and reverse rules are written apart, so each checks the other, and the
    test holds even where finite differences mean nothing (at a kink, a tie). `rtol` is
    relative to the sum of the absolute values of the products summed; by default 1e-10 when
    everything is float64, `1000 * eps` of the lowest precision otherwise.

    >>> import numpy as np
    >>> from pullback import testing
    >>> result = testing.check_transpose(lambda x: np.cumsum(np.abs(x)), np.array([0.0, -1.0, 2.0]))
    >>> bool(result), result.scale > 0
    (True, True)
    """
    return _transpose(f, args, np.random.default_rng(seed), rtol, atol, "f")


def numerical_gradient(f, *args, eps=1e-6):
    """The gradient of scalar `f` by float64 central differences, shaped like `pb.gradient`'s.

    Float leaves are moved one element at a time in float64 copies; each gets a float64
    array (or a float); arguments without float leaves get None.

    >>> import numpy as np
    >>> from pullback import testing
    >>> g, n = testing.numerical_gradient(lambda x, n: np.sum(x ** n), np.array([1.0, 2.0]), 3)
    >>> np.round(g, 6), n
    (array([ 3., 12.]), None)

    A complex leaf `z = x + iy` gets `df/dx - i df/dy`, as `pb.gradient` gives it.
    """
    arguments = Arguments(args, range(len(args)))
    arguments.track(lambda x, path, companion: x)
    wide = _Moves(args)
    results = []
    for leaf in arguments.leaves:
        size = size_of(leaf.primal)
        values = [wide.difference(f, leaf.index, _basis(leaf.primal, j), eps, None) for j in range(size)]
        if _is_complex_leaf(leaf.primal):  # the gradient of a real f at z = x + iy is df/dx - i df/dy
            values = [v - 1j * wide.difference(f, leaf.index, 1j * _basis(leaf.primal, j), eps, None)
                      for j, v in enumerate(values)]
        results.append(values[0] if type(leaf.primal) in (float, complex) else np.reshape(values, np.shape(leaf.primal)))
    return arguments.read(results, lambda r, primal, returned: r)


# --- one function, one order ------------------------------------------------------------------------
def _refuse_automatic_modes(args, roots):
    """Raise for a layer of `args` in the automatic mode (`training` None: `pb.nn.BatchNorm`, `Dropout`): it
    trains where it is differentiated and evaluates on the plain values central differences run it on, so
    every derivative would be reported as disagreeing, wrongly."""
    for root, arg in zip(roots, args):
        found = _automatic_layer(arg)
        if found is not None:
            path, layer = found
            raise ValueError(
                f"check_gradient: {path.format(root or 'the argument')} (a {type(layer).__name__}) is in the automatic "
                "mode: it trains where it is differentiated and evaluates on the plain values central differences "
                "use, so the two would disagree. Fix the mode first: pb.nn.trainmode(model) to check the training "
                "computation, pb.nn.testmode(model) for evaluation.")


def _automatic_layer(arg):
    """`(path, layer)` of the first object in `arg` whose `training` is None, or None."""
    found = []

    def node(x, kind, old, new, parts, path, shell):
        if not found and not isinstance(x, (dict, list, tuple)) and getattr(x, "training", False) is None:
            found.append((path, x))

    tree.walk(arg, lambda *a: None, node, cycle=lambda *a: None)
    return found[0] if found else None


def _check(f, args, roots, modes, order, options, rng, of):
    """Rows, transposition tests, problems and the reverse gradient of `f`, then of its derivative maps."""
    arguments = Arguments(args, range(len(args)), roots=roots)
    arguments.track(lambda x, path, companion: x)
    leaves = list(arguments.leaves)
    y, back = pullback(f, *args) if "rev" in modes else (f(*args), None)
    _refuse_complex(y, of)
    u = _cotangent_like(y, rng, scalar_one=True)
    problems, notes, gradient, reverse = [], {}, None, None
    if "rev" in modes:
        gradient = back(u)
        reverse = _leaf_values(args, gradient)
        notes, problems = _form_problems(args, leaves, gradient, reverse)
    wide = _Moves(args)
    rows = []
    for leaf in leaves:
        primal = leaf.primal
        rtol = options["rtol"]
        if rtol is None:
            rtol = 1e-5 if _dtype(primal) == np.float64 else 2e-3
        found = {mode: [] for mode in modes}  # (derivative, central difference) along each direction
        vs = _directions(primal, rng, options["directions"], options["dense_up_to"])
        for v in vs:
            by_fd = wide.difference(f, leaf.index, v, options["eps"], u)
            if "rev" in modes:
                g = reverse[leaf.index]
                found["rev"].append((0.0 if g is None else _along(g, v), by_fd))
            if "fwd" in modes:
                found["fwd"].append((_inner(u, _forward(f, args, arguments, leaf.index, _like(v, primal))), by_fd))
        summary = {mode: _worst(pairs, options["atol"], rtol) for mode, pairs in found.items()}
        wrong = tuple("reverse" if mode == "rev" else "forward" for mode in modes if not summary[mode][2])
        note = notes.get(leaf.index, "")
        rev, fwd = summary.get("rev", (None, None, True))[:2], summary.get("fwd", (None, None, True))[:2]
        rows.append(LeafCheck(_shown(leaf.path), len(vs), *rev, *fwd, not wrong and not note, of, wrong, note))
    transposes = [_transpose(f, args, rng, options["transpose_rtol"], 1e-13, of)] if len(modes) == 2 else []
    if order > 1:
        for mode in modes:
            derived, derived_args, derived_roots = _derivative_map(mode, f, args, roots, y, u, rng)
            more = _check(derived, derived_args, derived_roots, modes, order - 1, options, rng,
                          f"{'vjp' if mode == 'rev' else 'jvp'} of {of}")
            rows += more[0]
            transposes += more[1]
            problems += more[2]
    return rows, transposes, problems, gradient


def _worst(pairs, atol, rtol):
    """The largest absolute and relative error of (derivative, difference) pairs, and whether all pass."""
    values = np.array(pairs or [(0.0, 0.0)], np.float64)  # an empty leaf has no direction and no error
    err, size = np.abs(values[:, 0] - values[:, 1]), np.abs(values[:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(err == 0, 0.0, err / size)  # inf where the difference is 0
    return float(np.max(err)), float(np.max(relative)), bool(np.all(err <= atol + rtol * size))  # NaN fails


def _modes(modes):
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    if not modes or any(m not in MODES for m in modes) or len(set(modes)) != len(modes):
        raise ValueError(f"modes must name 'rev' (reverse mode) and/or 'fwd' (forward mode); got {modes!r}")
    return tuple(m for m in MODES if m in modes)


def _shown(path):
    """A leaf's path as the report prints it: `layers[1].weight`, `['w']`, `args[0]`."""
    return path.lstrip(".") or "args[0]"


def _forward(f, args, arguments, key, v):
    """The output tangent of `f` along `v` at leaf `key`; `arguments` has tracked `args`.

    The other leaves carry zero tangents, so that every leaf is traced, as in reverse mode.
    """
    values = [_like(np.zeros(np.shape(leaf.primal)), leaf.primal) for leaf in arguments.leaves]
    values[key] = v
    tangents = arguments.read(values, lambda r, primal, returned: r)  # shaped like a gradient of args
    return jvp(f, args, tangents)[1]


def _transpose(f, args, rng, rtol, atol, of):
    """`<J v, u>` by forward mode against `<v, Jᵀ u>` by reverse mode, for random `v` and `u`."""
    arguments = Arguments(args, range(len(args)))
    vs = []

    def random_like(index, x):
        vs.append(_like(_random_direction(rng, x), x))
        return vs[-1]

    tangents = _replace_leaves(arguments, random_like)
    y, y_dot = jvp(f, args, tangents)
    _refuse_complex(y, of)
    u = _cotangent_like(y, rng, scalar_one=False)
    _, back = pullback(f, *args)
    cotangents = _leaf_values(args, back(u))
    forward_terms = [np.ravel(np.asarray(a, np.float64) * np.asarray(b, np.float64))
                     for a, b in _pairs(u, y_dot) if a is not None and b is not None]
    reverse_terms = [np.ravel(np.real(np.asarray(c) * np.asarray(v))) for c, v in zip(cotangents, vs) if c is not None]
    forward = float(sum(np.sum(t) for t in forward_terms))
    reverse = float(sum(np.sum(t) for t in reverse_terms))
    scale = float(sum(np.sum(np.abs(t)) for t in forward_terms + reverse_terms))
    if rtol is None:
        values = [leaf.primal for leaf in arguments.leaves] + _floats(y)
        coarsest = max((np.finfo(_dtype(x)).eps for x in values), default=np.finfo(np.float64).eps)
        rtol = max(1e-10, 1000 * float(coarsest))
    finite = np.isfinite(forward) and np.isfinite(reverse) and np.isfinite(scale)
    ok = finite and abs(forward - reverse) <= rtol * scale + atol
    return TransposeCheck(forward, reverse, scale, rtol, atol, bool(ok), of)


def _derivative_map(mode, f, args, roots, y, u, rng):
    """The map `(args, u) -> Jᵀ u` (rev) or `(args, v) -> J v` (fwd), its arguments and their roots."""
    n = len(args)
    if mode == "rev":
        def vjp_of_f(*xs):
            _, back = pullback(f, *xs[:n])
            cotangents = _leaf_values(xs[:n], back(xs[n]))
            parts = []
            for c, x in zip(cotangents, _primals(xs[:n])):
                c = _zero_if_none(c, x)
                parts += [np.real(c), np.imag(c)] if _is_complex_leaf(x) else [c]  # checked as real outputs
            return tuple(parts)

        return vjp_of_f, (*args, u), [*roots, "cotangent"]

    template = _floats(y)

    def jvp_of_f(*xs):
        _, y_dot = jvp(f, xs[:n], xs[n:])
        tangents = [t for _, t in _pairs(y, y_dot, floats=True)]  # at the float leaves of the output
        return tuple(_zero_if_none(t, x) for x, t in zip(template, tangents))

    tangents = _replace_leaves(Arguments(args, range(n)), lambda index, x: _like(_random_direction(rng, x), x))
    tangent_roots = ["tangent" if not r else r.replace("args[", "tangents[") if r.startswith("args[")
                     else f"tangent of {r}" for r in roots]
    return jvp_of_f, (*args, *tangents), [*roots, *tangent_roots]


# --- leaves of the arguments --------------------------------------------------------------------------
def _replace_leaves(arguments, make):
    """Copies of the positional arguments with leaf number `index` replaced by `make(index, leaf)`."""
    new, _ = arguments.track(lambda x, path, companion: make(len(arguments.leaves) - 1, x))
    return new


def _leaf_values(args, structured):
    """The parts of `structured` (shaped like `args`, e.g. a gradient) at each float leaf of `args`, in leaf order."""
    found = []
    Arguments(args, range(len(args))).track(lambda x, path, companion: found.append(companion), structured)
    return found


def _primals(args):
    arguments = Arguments(args, range(len(args)))
    arguments.track(lambda x, path, companion: x)
    return [leaf.primal for leaf in arguments.leaves]


def _form_problems(args, leaves, gradient, values):
    """What is wrong with the form of the reverse gradient: {leaf index: note} for its leaves,
    and a list of problems with whole arguments (a gradient for an argument with no float leaves)."""
    notes = {}
    for leaf, g in zip(leaves, values):
        primal = leaf.primal
        if g is None:
            continue
        if np.shape(g) != np.shape(primal):
            notes[leaf.index] = f"the gradient has shape {np.shape(g)}, but the leaf has shape {np.shape(primal)}"
        elif isinstance(primal, np.ndarray) and not isinstance(g, np.ndarray) and not hasattr(type(g), "__array_function__"):
            notes[leaf.index] = f"the gradient is a {type(g).__name__}, but the leaf is an array of {primal.dtype}"
        elif isinstance(primal, np.ndarray) and g.dtype != primal.dtype:
            notes[leaf.index] = f"the gradient has dtype {g.dtype}, but the leaf has dtype {primal.dtype}"
        elif type(primal) is float and type(g) is not float:
            notes[leaf.index] = f"the gradient is a {type(g).__name__}, but the leaf is a float"
    problems = [f"argument {k} has no float leaves, but its gradient is {g!r} (it should be None)"
                for k, (a, g) in enumerate(zip(args, gradient)) if g is not None and not _primals((a,))]
    return notes, problems


class _Moves:
    """Float64 copies of the arguments, to move one leaf along a direction for central differences."""

    def __init__(self, args):
        # one walk over all the arguments, so that an array passed twice stays one array (a tie)
        self.arguments = Arguments(tuple(tree.fmap(_to_float64, tuple(args))), range(len(args)))

    def at(self, f, key, step):
        def move(index, x):
            if index == key and isinstance(x, np.ndarray) and np.result_type(x, step) == x.dtype:
                moved = x.copy(order="K")  # laid out as x (f may read the layout, as ravel(order="A")), and a 0-d
                moved += step  # array stays one (x + step would be a NumPy scalar)
                x = moved
            elif index == key:
                x = np.asarray(x + step) if isinstance(x, np.ndarray) else x + step
            elif isinstance(x, np.ndarray):
                x = x.copy(order="K")  # f may write into its arguments
            return as_type_of(x, self.arguments.leaves[index].primal)  # an array API leaf is read as NumPy's: back

        return f(*_replace_leaves(self.arguments, move))

    def difference(self, f, key, v, eps, u):
        """d/dt <u, f(x + t v)> at t = 0, v moving leaf `key` (u None: f is a scalar)."""
        plus, minus = self.at(f, key, eps * _as_step(v)), self.at(f, key, -eps * _as_step(v))
        if u is None:
            return (_scalar(plus) - _scalar(minus)) / (2 * eps)
        return (_inner(u, plus) - _inner(u, minus)) / (2 * eps)


def _as_step(v):
    if np.iscomplexobj(v):
        return complex(v) if np.ndim(v) == 0 else np.asarray(v, np.complex128)
    return float(v) if np.ndim(v) == 0 else np.asarray(v, np.float64)


def _scalar(y):
    try:
        return float(y)
    except TypeError:
        raise TypeError(f"numerical_gradient needs f to return a real number; it returned {type(y).__name__}. Reduce "
                        "the output to a number first (for example np.sum(y * w) with fixed weights w).") from None


def _directions(primal, rng, count, dense_up_to):
    """Axis directions (every element) for small leaves, `count` random unit directions for larger ones;
    for a complex leaf, along the real and the imaginary axis of each element."""
    size = size_of(primal)
    if dense_up_to is None or size <= dense_up_to:
        axes = [_as_float64(_basis(primal, j)) for j in range(size)]
        return axes + [1j * e for e in axes] if _is_complex_leaf(primal) else axes
    vs = []
    for _ in range(count):
        v = _random_direction(rng, primal)
        vs.append(_widened(_like(v / np.linalg.norm(v), primal)))  # rounded as the leaf's dtype would
    return vs


def _random_direction(rng, x):
    v = rng.standard_normal(np.shape(x))
    return v + 1j * rng.standard_normal(np.shape(x)) if _is_complex_leaf(x) else v


def _is_complex_leaf(x):
    return type(x) is complex or np.iscomplexobj(x)


def _along(g, v):
    """The derivative along direction `v` that gradient `g` gives: Re(sum(g v)) (a cotangent c of z
    stands for dz -> Re(c dz); for real leaves this is the plain sum)."""
    return float(np.real(np.sum(as_numpy(g) * np.asarray(v))))


def _widened(v):
    return np.asarray(v, np.complex128) if np.iscomplexobj(v) else _as_float64(v)


def _basis(primal, j):
    e = np.zeros(np.shape(primal))
    e.reshape(-1)[j] = 1.0
    return e


def _as_float64(v):
    return np.asarray(v, np.float64)


def _like(v, x):
    """`v` in the form of leaf `x`: a float for a float (a complex for a complex), else an array of its dtype."""
    if type(x) is float:
        return float(v)
    if type(x) is complex:
        return complex(v)
    if isinstance(x, np.ndarray) or is_foreign_array(x):
        return as_type_of(np.asarray(v, dtype=_dtype(x)), x)  # an array API array's on its own device
    return x.dtype.type(v)


def _to_float64(x):
    if speaks_array_api_only(type(x)) and dtype_kind(x) in "fc":
        return as_array_api(_to_float64(as_numpy(x)), x)
    if isinstance(x, np.ndarray) and x.dtype.kind in "fc":
        return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    if isinstance(x, np.floating):
        return np.float64(x)
    if isinstance(x, np.complexfloating):
        return np.complex128(x)
    return x


def _zero_if_none(t, x):
    return (0.0 if type(x) is float else np.zeros(np.shape(x), _dtype(x))) if t is None else t


def _dtype(x):
    """The NumPy dtype of leaf `x` (an array-API-only array's read through DLPack)."""
    return as_numpy(x).dtype if speaks_array_api_only(type(x)) else np.dtype(getattr(x, "dtype", np.float64))


# --- outputs ------------------------------------------------------------------------------------------
def _is_float(x):
    return type(x) is float or (isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind == "f") or (
        is_foreign_array(x) and dtype_kind(x) == "f")  # Dask, CuPy, array API


def _pairs(y, t, floats=False):
    """(part of y, matching part of t) for each leaf of output `y`, every place counted (no tie sharing)."""
    kind = tree.kind_of(y)
    if kind is None:
        if not floats or _is_float(y):
            yield y, t
        return
    for key, child in kind.children(y).items():
        yield from _pairs(child, tree.child_of(t, key), floats)


def _floats(y):
    return [x for x, _ in _pairs(y, None, floats=True)]


def _cotangent_like(y, rng, scalar_one):
    """A random cotangent shaped like output `y` (1 for a scalar output when `scalar_one`); None off float leaves."""
    kind = tree.kind_of(y)
    if kind is None:
        if not _is_float(y):
            return None
        if np.ndim(y) == 0 and scalar_one:
            return 1.0 if type(y) is float else _like(1.0, y) if is_foreign_array(y) else y.dtype.type(1.0)
        return _like(rng.normal(size=np.shape(y)), y)
    return kind.rebuild(y, {k: _cotangent_like(c, rng, scalar_one) for k, c in kind.children(y).items()})


def _inner(u, t):
    """<u, t> in float64 over the float leaves of `u` (None parts are zero)."""
    total = 0.0
    for a, b in _pairs(u, t):
        if a is not None and b is not None:
            total += float(np.sum(np.asarray(as_numpy(a), np.float64) * np.asarray(as_numpy(b), np.float64)))
    return total


def _refuse_complex(y, of):
    for x, _ in _pairs(y, None):
        if type(x) is complex or (isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind == "c"):
            raise TypeError(f"check_gradient compares real outputs, but {of} returned a complex value. "
                            "Return its real and imaginary parts (np.real(z), np.imag(z)) or np.abs(z) instead.")
