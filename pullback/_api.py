"""`gradient`, `withgradient`, `pullback`, `grad`, `value_and_grad`: one engine, several spellings."""

from collections import deque, namedtuple
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import tree
from ._arrays import as_array_api, as_numpy, dtype_kind, is_foreign_array, memory_key
from ._backward import backward
from ._errors import caught_refusal
from ._leaves import Arguments, memory_of
from ._reverse import Tape, collector_paused
from ._standins import dtype_of, is_python_float
from ._tangents import ARRAY_TYPES
from ._values import (
    Traced,
    Tracked,
    conversion_refusal,
    is_handed_out,
    read_only_value,
    release_guarded,
    release_handed_out,
    write_refusal,
)

__all__ = ["gradient", "withgradient", "pullback", "vjp", "grad", "value_and_grad", "stop_gradient"]

WithGradient = namedtuple("WithGradient", ["val", "grad"])


def gradient(f: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """The gradient of scalar-valued `f` with respect to each positional argument.

    Gradients mirror the arguments: arrays for float arrays, `Tangent`s for objects,
    `None` wherever there is no gradient. Keyword arguments are not differentiated.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda x, n: np.sum(x ** n), np.array([1.0, 2.0]), 3)
    (array([ 3., 12.]), None)
    """
    with collector_paused():  # until the tape is released: see `_release`
        tape, out, plans = trace_call(f, args, kwargs, range(len(args)))
        try:
            if isinstance(out, tuple):
                raise TypeError("Output should be scalar, not a tuple; use withgradient to return auxiliary values.")
            return _gradients(tape, out, plans)
        finally:
            _release(tape)


def withgradient(f: Callable[..., Any], *args: Any, **kwargs: Any) -> "WithGradient":
    """Like `gradient`, also returning the value: a named tuple `(val, grad)`.

    If `f` returns a tuple, `val` is all of it and only the first element is differentiated.

    >>> import numpy as np, pullback as pb
    >>> val, (g,) = pb.withgradient(lambda x: (np.sum(x ** 2), "aux"), np.array([3.0]))
    >>> val, g
    ((np.float64(9.0), 'aux'), array([6.]))
    """
    with collector_paused():
        tape, out, plans = trace_call(f, args, kwargs, range(len(args)))
        try:
            grads = _gradients(tape, out[0] if isinstance(out, tuple) else out, plans)
            return WithGradient(untrack(out, tape, plans[0]), grads)
        finally:
            _release(tape)


def pullback(f: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
    """Run `f` and return `(y, back)`; `back(dy)` gives the cotangent of every positional argument.

    `dy` is shaped like `y` (tuples, lists and dicts may have `None` parts). `back` may be
    called many times; the recording lives as long as `back` does.

    `y` is the caller's to change (`y -= target; back(y)`): its arrays are copies of what the
    recording keeps (an array `f` returns from its arguments, `x` or a view of it, is that array).
    The arguments are not copied: `back` reads them as they are when it runs, so change an
    argument array in place only once the last `back` call is done (or pass `f` a copy). So too
    the plain arrays `f` used that `back` reads (`m` in `x * m`): read-only while `f` runs (a
    write there raises an error naming the fix), they are writable again when `pullback` returns.

    >>> import numpy as np, pullback as pb
    >>> y, back = pb.pullback(lambda x: x * 2.0, np.array([1.0, 2.0]))
    >>> back(np.array([1.0, 10.0]))
    (array([ 2., 20.]),)
    """
    tape, out, plan = trace_call(f, args, kwargs, range(len(args)))
    y = untrack(out, tape, plan[0])
    if plan[0].array_api_like is None:  # (array-API results are new arrays already)
        y = apart_from_tape(y, plan[0].given_arrays())

    def back(dy: Any) -> tuple[Any, ...]:
        seeds: dict[int, Any] = {}
        _collect_seeds(out, dy, tape, seeds)
        grads = backward(tape, seeds) if seeds else None
        return read_gradients(plan, grads, callers=tree.leaves(dy))

    return y, back


def vjp(f: Callable[..., Any], *primals: Any, **kwargs: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
    """JAX-style name for `pullback`: `(y, vjp_fn)`, where `vjp_fn(dy)` gives one cotangent per primal.

    >>> import numpy as np, pullback as pb
    >>> y, vjp_fn = pb.vjp(lambda x, w: x * w, np.array([1.0, 2.0]), 3.0)
    >>> vjp_fn(np.ones(2))
    (array([3., 3.]), 3.0)
    """
    return pullback(f, *primals, **kwargs)


def grad(f: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """JAX-style: a function returning the gradient of `f` with respect to `argnums`.

    With `has_aux`, `f` returns `(value, aux)` and the new function returns `(grad, aux)`.

    >>> import numpy as np, pullback as pb
    >>> pb.grad(lambda x, y: np.sum(x * y), argnums=1)(np.array([2.0]), np.array([5.0]))
    array([2.])
    """
    vg = value_and_grad(f, argnums, has_aux)

    def gradient_of_f(*args, **kwargs):
        value, g = vg(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return gradient_of_f


def value_and_grad(f: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """JAX-style: a function returning `(value, grad)`, or `((value, aux), grad)` with `has_aux`.

    >>> import numpy as np, pullback as pb
    >>> pb.value_and_grad(lambda x: np.sum(x ** 2))(np.array([3.0]))
    (np.float64(9.0), array([6.]))
    """
    single = isinstance(argnums, (int, np.integer))
    wanted = (argnums,) if single else tuple(argnums) if isinstance(argnums, Sequence) else ()
    if not wanted or not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in wanted):
        raise TypeError(f"argnums should be an int or a sequence of ints (positions of arguments), not {argnums!r}")

    def value_and_gradient_of_f(*args, **kwargs):
        positions = [a % len(args) if -len(args) <= a < len(args) else _bad_argnum(a, len(args)) for a in wanted]
        with collector_paused():
            # a position asked for twice is differentiated once and its gradient given at both places
            tape, out, plans = trace_call(f, args, kwargs, list(dict.fromkeys(positions)))
            try:
                if has_aux:
                    if not (isinstance(out, tuple) and len(out) == 2):
                        raise TypeError("With has_aux=True, f must return a pair (value, aux).")
                    primary = out[0]
                else:
                    primary = out
                grads = _gradients(tape, primary, plans)
                picked = tuple(grads[p] if p not in positions[:k] else _copy_of(grads[p]) for k, p in enumerate(positions))
                return untrack(out, tape, plans[0]), picked[0] if single else picked
            finally:
                _release(tape)

    return value_and_gradient_of_f


def stop_gradient(x: Any) -> Any:
    """The plain value of `x`, at every level of nesting: no gradient flows through it. `x` may
    also be a container or an object holding traced values (a dict, a list, a dataclass, a
    model, a deque, a tuple subclass): it comes back rebuilt around their plain values, the
    original untouched.

    Of an array being differentiated, the value is a read-only array of its own. Without pullback
    `stop_gradient(x)` is `x`: so every later write into `x` (or through any view of its memory)
    shows in the value and its views as in NumPy, and a write into the value, which would change
    `x` behind the gradient's back, raises a `ValueError` naming the fix (chained from NumPy's
    "assignment destination is read-only"). Write into a copy, `pb.stop_gradient(x).copy()`, or
    into `x` itself (a recorded write). Handed back to the caller, the value is writable, as
    without pullback. A write into the caller's array through another name (a global), which
    pullback does not see, does not show in the value.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda x: np.sum(x * pb.stop_gradient(x)), np.array([3.0]))
    (array([3.]),)
    >>> pb.gradient(lambda d: np.sum(pb.stop_gradient(d)["w"] * d["w"]), {"w": np.array([3.0])})
    ({'w': array([3.])},)
    """
    if tree.kind_of(x) is None and not isinstance(x, (tuple, deque)):  # an array, a number, a traced value
        return read_only_value(x)
    return tree.fmap_values(read_only_value, x)


def apart_from_tape(y, given):
    """`y`, what `f` returned, with each NumPy array made inside `f` replaced by a copy: the tape may
    keep that very array for `back` (np.exp keeps its output, `x * pb.stop_gradient(y)` that value),
    and the caller may change what it is handed (`y -= t`). Arrays sharing memory with `given` (the
    caller's own arrays, by `memory_key`) are the caller's and come back as they are; arrays of `y`
    that share memory still share it."""
    made = {}  # id(owner of the memory) -> the arrays of y on it

    def collect(v):
        if type(v) is np.ndarray and not any(np.may_share_memory(v, a) for a in given.get(memory_key(v), ())):
            made.setdefault(id(memory_of(v)), []).append(v)
        return v

    tree.fmap_values(collect, y)
    if not made:
        return y
    copies = {}
    for group in made.values():
        copies.update(_copies_sharing(group))
    return tree.fmap_values(lambda v: copies.get(id(v), v) if type(v) is np.ndarray else v, y)


def _copies_sharing(arrays):
    """`{id(a): copy of a}` for `arrays` on one memory, the copies sharing memory as the arrays do
    (views of one copy of the memory), or each its own copy where that memory cannot be copied whole."""
    owner = memory_of(arrays[0])
    if len(arrays) > 1 and (owner.flags.c_contiguous or owner.flags.f_contiguous):
        whole = np.copy(owner, order="K")
        buffer = whole if whole.flags.c_contiguous else whole.T  # the same bytes, read in order
        start = owner.__array_interface__["data"][0]
        try:
            views = {}
            for a in arrays:
                view = np.ndarray(a.shape, a.dtype, buffer=buffer, offset=a.__array_interface__["data"][0] - start,
                                  strides=a.strides)
                view.flags.writeable = _writeable_copied(a)
                views[id(a)] = view
            return views
        except (TypeError, ValueError):  # memory laid out as a buffer does not describe it
            pass
    return {id(a): _copy_keeping_flags(a) for a in arrays}


def _copy_keeping_flags(a):
    copy = np.copy(a, order="K")
    copy.flags.writeable = _writeable_copied(a)
    return copy


def _writeable_copied(a):
    """Whether a copy of `a` handed to the caller is writable: as `a` is, save where `a` is read-only
    only as pb.stop_gradient's value (NumPy's own read-only arrays, np.broadcast_to's, stay so)."""
    return bool(a.flags.writeable) or is_handed_out(a)


def _copy_of(grad):
    """A gradient handed out a second time: its arrays copied, so that no two results share memory."""
    return tree.fmap(lambda a: a.copy() if isinstance(a, np.ndarray) else a, grad)


def _bad_argnum(a, n):
    raise ValueError(f"argnums {a} is out of range for {n} positional arguments")


# --- the steps -----------------------------------------------------------------------
def trace_call(f, args, kwargs, positions):
    """Track the float leaves of `args[positions]` on a new tape and run `f` on copies of the arguments.

    Returns the tape, `f`'s output and the plan `(arguments, node ids of their leaves)`.
    """
    tape = Tape()
    arguments = Arguments(args, positions, kwargs)
    ids = []

    def make_leaf(x, path, companion):
        leaf = tape.leaf(x)
        ids.append(leaf._id)
        return leaf

    tracked, tracked_kwargs = arguments.track(make_leaf)
    leaf_index = {node: k for k, node in enumerate(ids)}
    tape.write_check = lambda node: (arguments.refuse_shared_write(leaf_index[node])
                                     if node in leaf_index else None)
    tape.guarded = {}  # plain arrays the tape's pullbacks keep are read-only while f runs (see `guard_kept`)
    try:
        with collector_paused():
            out = f(*tracked, **tracked_kwargs)
    except (ValueError, NotImplementedError) as error:
        refusal = conversion_refusal(error)
        if refusal is None:
            refusal = write_refusal(error)  # a write into an array pullback made read-only
            if refusal is None:
                raise
            raise refusal from error
        raise refusal from None  # pullback's message, at the user's line, in place of NumPy's
    else:
        refusal = caught_refusal(tape)
        if refusal is not None:
            raise refusal from tape.refused
    finally:
        release_guarded(tape)  # writable again: f has ended (pb.pullback: see its docstring)
        tape.close()
        # the check refers to the arguments, whose tracked copies refer to the tape: dropping it with
        # the recording breaks that cycle, so a tape `back` no longer needs is freed at once
        tape.write_check = None
    arguments.refuse_unseen_writes()
    return tape, out, (arguments, ids)


def read_gradients(plan, grads, callers=()):
    """The gradients of the arguments, from the sweep's cotangents `grads` (None: all zero)."""
    arguments, ids = plan
    results = [None] * len(ids) if grads is None else [grads[i] for i in ids]
    return arguments.read(results, callers=callers)


def _gradients(tape, out, plans):
    """Check that `out` is a real scalar, sweep backwards from it, read the gradients back."""
    seed_id = scalar_output_node(out, tape)
    if seed_id is None:
        return read_gradients(plans, None)
    grads = backward(tape, {seed_id: _one_like(tape.nodes[seed_id][0], out._value)})
    return read_gradients(plans, grads)


def scalar_output_node(out, tape):
    """The node id to seed, or None when `out` does not depend on this tape; errors if not scalar."""
    value = out._value if type(out) is Tracked and out._tape is tape else out
    other_library = is_foreign_array(value)  # a 0-d Dask or CuPy array is a scalar too
    if (other_library or isinstance(value, (np.ndarray, Traced))) and np.ndim(value) > 0:
        raise TypeError("Output is an array, so the gradient is not defined. Perhaps you wanted jacobian.")
    if (isinstance(value, (complex, np.complexfloating)) or (isinstance(value, np.ndarray) and value.dtype.kind == "c")
            or (other_library and dtype_kind(value) == "c")):
        raise TypeError("Output is complex, so the gradient is not defined. Return a real number (np.real(y), "
                        "np.abs(y) ** 2, ...); for derivatives of a complex function use pb.pullback, pb.jvp or pb.jacobian.")
    if not (other_library or isinstance(value, (int, float, np.number, np.bool_, np.ndarray, Traced))):
        raise TypeError(f"Output should be scalar; got {type(value).__name__}. Return a real number or a 0-d array.")
    return out._id if value is not out else None


def _one_like(spec, value):
    """A seed of 1 in the output's dtype and array type; `spec` is what the tape kept of the output `value`."""
    if is_python_float(spec):  # (a Python float's weak seed; also for pb.jit's stand-in of one)
        return 1.0
    if is_foreign_array(value) and type(value) not in ARRAY_TYPES:  # a Dask or CuPy output: a seed of its library
        return np.ones_like(value, shape=())
    # a constant, also for pb.jit's traced arrays: a replay of a gradient that does not return
    # the output then never computes it
    return np.ones((), dtype=spec[1] if type(spec) is tuple else dtype_of(spec))


def _collect_seeds(out, dy, tape, seeds):
    """Pair each tracked part of `out` with its part of `dy` (a value met twice is seeded twice)."""

    def leaf(v, parts, path):
        d = parts[0]
        if d is None or type(v) is not Tracked or v._tape is not tape:
            return
        d = as_numpy(d)  # an array-API-only cotangent (array_api_strict's) is read as NumPy's
        if type(d) is list or type(d) is tuple:
            d = np.asarray(d)  # numbers for an array output, as NumPy reads them
        elif type(d) is float or type(d) is int or type(d) is complex:
            d = np.complex128(d) if type(d) is complex else np.float64(d)  # NumPy's arithmetic in the rules (1/0 is inf)
        if np.shape(d) not in ((), np.shape(v)):
            raise ValueError(f"Cotangent of shape {np.shape(d)} does not match output{path} of shape {np.shape(v)}")
        if np.iscomplexobj(d) and not np.iscomplexobj(v._value):
            # Re(c * dy) would drop the imaginary part of c silently: a complex cotangent for a real
            # output is almost always a mistake (JAX refuses it too)
            raise TypeError(f"The cotangent of output{path} is complex, but the output is real ({dtype_of(v._value)}); "
                            "pass a real cotangent (np.real(c) if the imaginary part is meant to be dropped).")
        seeds[v._id] = d if v._id not in seeds else seeds[v._id] + d

    def node(v, kind, old, new, parts, path, shell):
        tree.check_mirrors(v, old, parts[0], f"The cotangent of output{path} (a {type(v).__name__})")

    tree.walk(out, leaf, node, ys=(dy,), repeat=lambda v, first, parts, path: leaf(v, parts, path),
              cycle=lambda *a: None)


def untrack(out, tape, arguments=None):
    """`out` with this tape's tracked values replaced by their plain values (outer levels kept).

    Where the differentiated `arguments` hold an array-API-only array (array_api_strict's), which
    is computed with as a NumPy array, a value computed from the arguments is given back as an
    array of that array's library and device, as `f` without pullback would return it."""
    like = getattr(arguments, "array_api_like", None)
    if like is not None:
        return tree.fmap_values(lambda v: as_array_api(v._value, like) if type(v) is Tracked and v._tape is tape else v, out)
    return tree.fmap_values(lambda v: v._value if type(v) is Tracked and v._tape is tape else v, out)


def _release(tape):
    """Drop everything the tape holds, so a finished gradient keeps nothing alive.

    Called while the garbage collector is still paused: the tape's containers are then freed
    before it resumes, instead of being scanned by the collection its resumption would start."""
    tape.nodes.clear()
    release_handed_out(tape)


# Older private spellings, kept while the checker moves to the public names.
_trace_call, _scalar_output = trace_call, scalar_output_node
