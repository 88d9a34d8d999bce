"""Forward mode and whole matrices of derivatives: jvp, jacobian, withjacobian, hessian, hvp."""

import contextlib
import contextvars
from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import tree
from ._api import gradient, trace_call, untrack
from ._arrays import as_array_api, as_numpy, is_foreign_array, like_input, same_shape, size_of
from ._backward import backward, fit
from ._errors import caught_refusal
from ._forward import ForwardLevel, fit_tangent
from ._leaves import Arguments, conversion_to_type_of, memory_of
from ._standins import converted, dtype_of, is_jit_float_or_complex, is_stand_in, is_traced, shape_of
from ._values import Dual, Tracked, conversion_refusal, release_handed_out, stop_gradient

__all__ = ["jvp", "jacobian", "withjacobian", "hessian", "hvp", "WithJacobian"]

_RUNNING_AGAIN: contextvars.ContextVar[str | None] = contextvars.ContextVar("pullback_running_again", default=None)


def runs_f_again():
    """The name of the derivative that is running f once per input or output element ("jacobian",
    "hessian"), or None. State that f updates (BatchNorm's running statistics in training mode)
    would be updated once per run, so a layer that updates state refuses then.

    >>> import numpy as np, pullback as pb
    >>> seen = []
    >>> _ = pb.hessian(lambda x: seen.append(runs_f_again()) or np.sum(x ** 3), np.ones(2))
    >>> seen
    ['hessian', 'hessian']
    """
    return _RUNNING_AGAIN.get()


class _RunningAgain:
    def __init__(self, name):
        self.name, self.token = name, None

    def __enter__(self):
        self.token = _RUNNING_AGAIN.set(self.name)

    def __exit__(self, *exc_info):
        _RUNNING_AGAIN.reset(self.token)


class WithJacobian(namedtuple("WithJacobian", ["val", "grad"])):
    """`(val, grad)` from `withjacobian`, named like `withgradient`'s result; `.jacobian` is `.grad`."""

    __slots__ = ()

    @property
    def jacobian(self):
        return self.grad


def jvp(f: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
    """`(y, y_dot)`: `f(*primals)` and its derivative along `tangents`, by forward mode.

    `tangents` mirrors `primals` (None parts are zero); `y_dot` mirrors `y`, with None
    where the output does not depend on the inputs.

    >>> import numpy as np, pullback as pb
    >>> pb.jvp(np.sin, (np.array([0.0, np.pi]),), (np.array([1.0, 2.0]),))[1]
    array([ 1., -2.])
    """
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp got {len(primals)} primals but {len(tangents)} tangents")
    arguments = Arguments(primals, range(len(primals)), roots=[f"primal {i}" for i in range(len(primals))])
    out, tag = run_forward(f, arguments, lambda index, x, path, t: t, tangents)
    y, y_dot = primal_part(out, tag), _not_sharing(tangent_part(out, tag), tangents)
    like = arguments.array_api_like
    if like is not None:  # array_api_strict's arrays, computed with as NumPy's: results of their type and device
        y = tree.fmap(lambda v: as_array_api(v._value, like) if type(v) is Dual and v._tape is tag else v, out)
        y_dot = tree.fmap(lambda v: None if v is None else as_array_api(v, like), y_dot)
    return y, y_dot


def run_forward(f, arguments, tangent_for, companions=None, again=False):
    """Run `f` on copies of `arguments` whose leaf number `index` carries `tangent_for(index, leaf, path, companion)`.

    `again`: f runs more than once (jacobian), so a leaf without a tangent is given as a copy, which an
    in-place update in f cannot change for the next run (or for the caller)."""
    tag = ForwardLevel()

    def make_leaf(x, path, companion):
        t = tangent_for(len(arguments.leaves) - 1, x, path, companion)
        if t is None:
            return x.copy() if again and type(x) is np.ndarray else x
        if type(t) is list or type(t) is tuple:
            t = np.asarray(t)  # numbers for an array primal, as NumPy reads them
        t = as_numpy(t)  # an array-API-only tangent (array_api_strict's) is read as NumPy's
        if not same_shape(shape_of(t), shape_of(x)):  # (a Dask length unknown until computed is NaN)
            raise ValueError(f"The tangent for {path} has shape {np.shape(t)}, but its primal has shape {np.shape(x)}")
        if dtype_of(t).kind == "c" and dtype_of(x).kind != "c":
            raise TypeError(f"The tangent for {path} is complex, but its primal is real (a real value moves only along "
                            "the real line). Pass a real tangent, or make the primal complex (x + 0j).")
        return Dual(x, fit_tangent(t, x), tag)

    args, kwargs = arguments.track(make_leaf, companions)
    try:
        out = f(*args, **kwargs)
    except (ValueError, NotImplementedError) as error:
        refusal = conversion_refusal(error)
        if refusal is None:
            raise
        raise refusal from None  # pullback's message, at the user's line, in place of NumPy's
    else:
        refusal = caught_refusal(tag)
        if refusal is not None:
            raise refusal from tag.refused
    finally:
        tag.close()
    arguments.refuse_unseen_writes()
    return out, tag


def primal_part(out, tag):
    return tree.fmap(lambda v: v._value if type(v) is Dual and v._tape is tag else v, out)


def tangent_part(out, tag):
    def tangent(v):
        if type(v) is not Dual or v._tape is not tag or v._tangent is None:
            return None
        t = v._tangent
        convert = conversion_to_type_of(v._value)  # a Python number's tangent is one too, a 0-d array's one too
        if convert is not None:
            return converted(t, convert)
        return np.array(t) if isinstance(t, np.ndarray) and not t.flags.writeable else t

    return tree.fmap(tangent, out)


def _not_sharing(y_dot, tangents):
    """`y_dot` with each array that shares memory with one of the caller's `tangents` copied (the tangent of
    `x`, `x[1:]` or `x.T` would otherwise be the caller's own array, or a view of it)."""
    given = {id(memory_of(t)) for t in tree.leaves(tangents) if isinstance(t, np.ndarray)}
    if not given:
        return y_dot
    return tree.fmap(lambda t: t.copy() if isinstance(t, np.ndarray) and id(memory_of(t)) in given else t, y_dot)


def withjacobian(f: Callable[..., Any], *args: Any) -> WithJacobian:
    """`(val, grad)`: `f(*args)` and one Jacobian per positional argument, shaped like the argument.

    For an array argument the Jacobian has shape `y.shape + x.shape`; for a structured
    argument each float leaf gets such an array; `None` where there is no dependence.
    Forward mode is used when the inputs are fewer than the outputs, reverse otherwise.
    With complex values (forward mode) the entries are complex derivatives: of a real input,
    dy/dx; of a complex input, f'(z), which exists only where f is holomorphic (otherwise a
    TypeError names the fix: pass real and imaginary parts as separate float arguments).

    >>> import numpy as np, pullback as pb
    >>> pb.withjacobian(lambda x: x ** 2, np.array([1.0, 2.0])).grad[0]
    array([[2., 0.],
           [0., 4.]])
    """
    like, args = _array_api_as_numpy(args)
    if like is not None:  # array_api_strict's arrays: computed with as NumPy's, results of their type and device
        val, grad = withjacobian(f, *args)
        return WithJacobian(as_array_api(val, like), tree.fmap(lambda r: as_array_api(r, like), grad))
    with _RunningAgain("jacobian"):
        return _withjacobian(f, args)


def _withjacobian(f, args):
    # A first run gives f's value (and picks the mode); then one run per input element in forward mode, or
    # one recorded run swept once per output element in reverse mode. Each run must give the first's value.
    arguments = Arguments(args, range(len(args)))
    y = primal_part(*run_forward(f, arguments, lambda k, x, path, c: None, again=True))
    if not _is_float_output(y):
        if hasattr(y, "dtype"):
            got = f"an array of dtype {y.dtype}, which carries no derivative"
        else:
            got = (f"a {type(y).__name__}; for several outputs, return one array "
                   "(np.concatenate([np.ravel(a), np.ravel(b)])) or take one Jacobian per output")
        raise TypeError(f"jacobian needs f to return one real array or number (float or complex); got {got}.")
    leaves = arguments.leaves
    n_in = sum(size_of(leaf.primal) for leaf in leaves)
    # complex values: forward mode, which gives the complex derivative (see _forward_columns)
    forward = n_in <= size_of(y) or np.iscomplexobj(y) or any(np.iscomplexobj(leaf.primal) for leaf in leaves)
    if forward:
        parts_of = _forward_columns(f, arguments, y)
    else:
        tape, out, (traced, ids) = trace_call(f, args, {}, range(len(args)))
        _check_same_value(y, untrack(out, tape))
        y = untrack(out, tape)  # the value of the run the rows are the derivatives of
        parts_of = _reverse_rows(tape, out, traced, ids, y)
        tape.nodes.clear()
        release_handed_out(tape)
    results = [None] * len(leaves)
    for key, _, primal in leaves:
        parts = parts_of[key]
        dtype = _jacobian_dtype(y, primal)
        if not parts:  # an empty input (forward) or output (reverse): a Jacobian of no entries, not None
            results[key] = np.zeros(np.shape(y) + np.shape(primal), dtype)
            continue
        if all(p is None for p in parts):
            continue
        blank = np.zeros(np.shape(y) if forward else np.shape(primal), dtype)
        parts = [blank if p is None else _as_dtype(p, dtype) for p in parts]
        # forward: one column per input element; reverse: one row per output element
        matrix = np.stack(parts, axis=-1 if forward else 0)
        results[key] = _typed_like_gradient(matrix.reshape(np.shape(y) + np.shape(primal)), y, primal)
    return WithJacobian(y, arguments.read(results, lambda r, primal, returned: r))


def jacobian(f: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """One Jacobian per positional argument; see `withjacobian`.

    >>> import numpy as np, pullback as pb
    >>> pb.jacobian(lambda x: x[::-1] * 2.0, np.zeros(3))[0]
    array([[0., 0., 2.],
           [0., 2., 0.],
           [2., 0., 0.]])
    """
    return withjacobian(f, *args).grad


def _array_api_as_numpy(args):
    """`(like, args)`: the first array-API-only array (array_api_strict's) among `args`, and `args`
    with each such array read as a NumPy array (one array for one object, so ties stay ties);
    `(None, args)` when there is none."""
    found, seen = [], {}

    def read(v):
        plain = as_numpy(v)
        if plain is v or isinstance(v, np.ndarray):  # a memmap is read as an ndarray; results stay NumPy's
            return plain
        found.append(v)
        return seen.setdefault(id(v), plain)

    args = tree.fmap(read, args)
    return (found[0], args) if found else (None, args)


def _forward_columns(f, arguments, y):
    """For each leaf, the output tangent for each basis direction of that leaf (forward mode), from
    one run of f per direction; each run must give `y`, the value of f's first call."""
    columns = {}
    for key, _, primal in list(arguments.leaves):
        columns[key] = []
        for j in range(size_of(primal)):
            basis = _basis(primal, j)
            out, tag = run_forward(f, arguments, lambda k, x, path, c, key=key, basis=basis: basis if k == key else None,
                                   again=True)
            _check_same_value(y, primal_part(out, tag))
            columns[key].append(tangent_part(out, tag))
            if np.iscomplexobj(primal):
                out, tag = run_forward(f, arguments, lambda k, x, path, c, key=key, basis=basis: 1j * basis if k == key else None,
                                       again=True)
                _check_holomorphic(columns[key][-1], tangent_part(out, tag), arguments.leaves[key].path)
    return columns


def _check_same_value(first, again, name="jacobian"):
    """Raise where a later run of f gave another value than its first (it draws random numbers, or reads
    state it updates): the Jacobian's columns would be derivatives of different functions."""
    a, b = stop_gradient(first), stop_gradient(again)
    jitted = is_stand_in(a) or is_stand_in(b)  # pb.jit's stand-ins: the comparison is a guard
    if not jitted and not all(type(v) in (float, complex) or isinstance(v, (np.ndarray, np.generic)) for v in (a, b)):
        return  # another library's arrays (Dask: comparing them would compute them)
    scale = np.max(np.abs(np.where(np.isfinite(a), a, 0.0)), initial=0.0)
    if np.shape(a) != np.shape(b) or not np.allclose(a, b, rtol=1e-6, atol=1e-9 * (1.0 + scale), equal_nan=True):
        raise RuntimeError(
            f"{name}: f gave a different {'value' if name == 'jacobian' else 'gradient'} when run again (it draws random numbers, or reads state it "
            f"updates), so its {name.capitalize()} is not defined. {'Forward mode runs' if name == 'jacobian' else 'It runs'} "
            "f once per input element: make f "
            f"deterministic (a seeded np.random.default_rng(seed) created inside f), or compute the {name.capitalize()} "
            "of one fixed draw by passing the random values as an argument.")


def _check_holomorphic(along_real, along_imaginary, path):
    """The complex derivative exists where the derivative along i is i times the one along 1 (Cauchy-Riemann)."""
    a = 0.0 if along_real is None else along_real  # not np.asarray: pb.jit's stand-ins compare as arrays
    b = 0.0 if along_imaginary is None else along_imaginary
    if not np.allclose(b, 1j * a, rtol=1e-6, atol=1e-9 * (1.0 + np.max(np.abs(a), initial=0.0))):
        raise TypeError(
            f"jacobian: f is not holomorphic in {path} (its derivative along the imaginary direction is not i times "
            "the one along the real direction), so it has no complex Jacobian. For the Jacobian of the real map, "
            "pass the real and imaginary parts as separate float arrays (x, y) and build z = x + 1j * y inside f."
        )


def _reverse_rows(tape, out, arguments, ids, y):
    """For each leaf key, the gradient of each output element: one sweep of `tape` (f's recorded call,
    whose output is `out`) per element."""
    leaves = [(leaf.index, node, leaf.primal) for leaf, node in zip(arguments.leaves, ids)]
    # the leaves come in the same walk order as the caller's
    rows = {k: [] for k in range(len(leaves))}
    for i in range(size_of(y)):
        if type(out) is Tracked and out._tape is tape:
            seed = np.zeros(np.shape(y), dtype_of(y))
            seed.reshape(-1)[i] = 1.0
            grads = backward(tape, {out._id: seed.reshape(np.shape(y))})
        else:
            grads = None
        for k, (_, node, primal) in enumerate(leaves):
            g = None if grads is None else grads[node]
            rows[k].append(None if g is None else fit(g, primal))
    return rows


def _jacobian_dtype(y, primal):
    """The dtype of the Jacobian of `y` at `primal`: both promoted, a Python number weak (float32 stays float32)."""
    if type(primal) is float or type(primal) is complex or is_jit_float_or_complex(primal):
        return np.result_type(dtype_of(y), 0j if primal.__class__ is complex else 0.0)
    return np.result_type(dtype_of(y), dtype_of(primal))


def _typed_like_gradient(matrix, y, primal):
    """The Jacobian of a scalar `y` typed like the gradient at `primal`: a float for a Python float."""
    if np.shape(y) != ():
        return matrix
    convert = conversion_to_type_of(primal)
    if isinstance(convert, type) and issubclass(convert, np.generic):
        convert = dtype_of(matrix).type  # a NumPy scalar of the Jacobian's dtype
    return matrix if convert is None or convert is np.asarray else converted(matrix, convert)


def _basis(primal, j):
    if type(primal) is float or type(primal) is complex or is_jit_float_or_complex(primal):
        return primal.__class__(1.0)
    e = np.zeros(np.shape(primal), dtype=dtype_of(primal))
    e.reshape(-1)[j] = 1.0
    return e


def _as_dtype(p, dtype):
    """`p` (plain, traced by an outer derivative, or a pb.jit stand-in) as an array of `dtype`."""
    if not is_traced(p) and (isinstance(p, (int, float, complex, np.generic)) or type(p) is np.ndarray):
        return np.asarray(p, dtype)
    return p.astype(dtype) if dtype_of(p) != dtype else p


def _is_float_output(y):
    return type(y) in (float, complex) or is_jit_float_or_complex(y) or (
        isinstance(y, (np.ndarray, np.generic)) and y.dtype.kind in "fc") or (
        hasattr(type(y), "__array_function__") and getattr(dtype_of(y), "kind", "?") in "fc")  # Dask, CuPy, traced


def hvp(f: Callable[..., Any], x: Any, v: Any) -> Any:
    """The Hessian of scalar `f` at `x` times `v`, without forming the Hessian (forward over reverse).

    Shaped and typed like the gradient at `x`: a float for a Python float, a 0-d array for a 0-d array.

    >>> import numpy as np, pullback as pb
    >>> pb.hvp(lambda x: np.sum(x ** 3), np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    array([6., 0.])
    """
    if isinstance(x, (np.ndarray, np.generic)):
        _check_float_argument("hvp", x)
    return _gradient_and_hvp(f, x, v)[1]


def _gradient_and_hvp(f, x, v):
    """The gradient of scalar `f` at `x`, and the Hessian times `v` (one run of f, forward over reverse)."""
    structured = tree.kind_of(x) is not None  # a dict, a list, a model: no gradient is None, the only zero

    def gradient_of_f(x):
        (g,) = gradient(f, x)
        return _zero_like(x) if g is None and not structured else g

    g, h_v = jvp(gradient_of_f, (x,), (v,))
    if h_v is None and not structured:
        return g, _zero_like(x)
    return g, h_v


def _zero_like(x):
    """A zero derivative at `x` (which may be traced), of its shape and type: a float for a Python float."""
    zero = np.zeros_like(x)
    convert = conversion_to_type_of(x)
    return zero if convert is None else converted(zero, convert)


def _check_float_argument(name, x):
    """Refuse an array `x` that carries no derivative: integers (whose Hessian would come out
    as zeros), booleans, or objects (a dict or a list of arrays turned into one)."""
    kind = dtype_of(x).kind
    if kind == "O":
        raise TypeError(f"{name} takes one float array or float; for a dict, list or object of arrays, "
                        "use pb.hvp (which takes any structure) or concatenate them into one array.")
    if kind not in "fc":
        raise TypeError(f"{name}: x has dtype {dtype_of(x)}, which carries no derivative (its Hessian would "
                        "read as zeros); pass floats, e.g. x.astype(float).")


def hessian(f: Callable[..., Any], x: Any) -> Any:
    """The Hessian of scalar `f` at array (or float) `x`, shaped `x.shape + x.shape`.

    Typed like the gradient: a float for a Python float, a NumPy float for a NumPy float, a 0-d
    array for a 0-d array.

    >>> import numpy as np, pullback as pb
    >>> pb.hessian(lambda x: x[0] * x[1], np.array([1.0, 2.0]))
    array([[0., 1.],
           [1., 0.]])
    """
    like, (x,) = _array_api_as_numpy((x,))
    if like is not None:  # an array_api_strict array: computed with as a NumPy array, the Hessian of its type and device
        return as_array_api(hessian(f, x), like)
    plain = stop_gradient(x)
    if isinstance(plain, float) and not isinstance(plain, np.generic):  # a Python float (also pb.jit's stand-in)
        return hvp(f, x, 1.0)  # a float, as the gradient is (traced where an outer derivative traces x)
    convert = conversion_to_type_of(x)  # a NumPy float (traced, or a pb.jit stand-in): the Hessian is one too
    if isinstance(convert, type) and issubclass(convert, np.floating):
        return hvp(f, x, 1.0)
    if not (isinstance(x, np.ndarray) or is_traced(x) or is_foreign_array(x)):  # a list, a NumPy scalar
        try:
            x = np.asarray(x)
        except ValueError:  # a ragged list of arrays
            x = np.asarray(None)
    if dtype_of(x).kind == "c":
        raise TypeError("hessian: x is complex, and a real function of a complex argument has no complex Hessian. "
                        "Pass the real and imaginary parts as separate float arrays and build z = x + 1j * y inside f.")
    _check_float_argument("hessian", x)
    if size_of(x) == 0:
        return np.zeros(np.shape(x) * 2, dtype_of(x))
    columns, first = [], None
    with _RunningAgain("hessian") if size_of(x) > 1 else contextlib.nullcontext():
        for j in range(size_of(x)):  # a Dask x: Dask directions, Dask columns
            g, column = _gradient_and_hvp(f, x, like_input(_basis(x, j), x))
            first = g if first is None else first
            _check_same_value(first, g, "hessian")  # one run of f per column: each must be the same function
            columns.append(column)
    return np.stack([np.reshape(c, (-1,)) for c in columns], axis=-1).reshape(np.shape(x) * 2)  # Dask's reshape takes no int


# Older private spellings, kept while the checker moves to the public names.
_push, _tangent_part = run_forward, tangent_part
