"""`gradient`, `withgradient`, `pullback`, `grad`, `value_and_grad`: one engine, several spellings."""

from collections import namedtuple

import numpy as np

from . import tree
from ._backward import backward, fit
from ._trace import Tape, Tracked

__all__ = ["gradient", "withgradient", "pullback", "grad", "value_and_grad"]

WithGradient = namedtuple("WithGradient", ["val", "grad"])


def gradient(f, *args, **kwargs):
    """The gradient of scalar-valued `f` with respect to each positional argument.

    Gradients mirror the arguments: arrays for float arrays, `Tangent`s for objects,
    `None` wherever there is no gradient. Keyword arguments are not differentiated.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda x, n: np.sum(x ** n), np.array([1.0, 2.0]), 3)
    (array([ 3., 12.]), None)
    """
    tape, out, plans = _trace_call(f, args, kwargs, range(len(args)))
    try:
        if isinstance(out, tuple):
            raise TypeError("Output should be scalar, not a tuple; use withgradient to return auxiliary values.")
        return _gradients(tape, out, plans)
    finally:
        _release(tape)


def withgradient(f, *args, **kwargs):
    """Like `gradient`, also returning the value: a named tuple `(val, grad)`.

    If `f` returns a tuple, `val` is all of it and only the first element is differentiated.

    >>> import numpy as np, pullback as pb
    >>> val, (g,) = pb.withgradient(lambda x: (np.sum(x ** 2), "aux"), np.array([3.0]))
    >>> val, g
    ((np.float64(9.0), 'aux'), array([6.]))
    """
    tape, out, plans = _trace_call(f, args, kwargs, range(len(args)))
    try:
        grads = _gradients(tape, out[0] if isinstance(out, tuple) else out, plans)
        return WithGradient(_untrack(out, tape), grads)
    finally:
        _release(tape)


def pullback(f, *args, **kwargs):
    """Run `f` and return `(y, back)`; `back(dy)` gives the cotangent of every positional argument.

    `dy` is shaped like `y` (tuples, lists and dicts may have `None` parts). `back` may be
    called many times; the recording lives as long as `back` does.

    >>> import numpy as np, pullback as pb
    >>> y, back = pb.pullback(lambda x: x * 2.0, np.array([1.0, 2.0]))
    >>> back(np.array([1.0, 10.0]))
    (array([ 2., 20.]),)
    """
    tape, out, plans = _trace_call(f, args, kwargs, range(len(args)))
    y = _untrack(out, tape)

    def back(dy):
        seeds = {}
        _collect_seeds(out, dy, tape, seeds)
        grads = backward(tape, seeds) if seeds else None
        return _read_all(plans, grads)

    return y, back


def grad(f, argnums=0, has_aux=False):
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


def value_and_grad(f, argnums=0, has_aux=False):
    """JAX-style: a function returning `(value, grad)`, or `((value, aux), grad)` with `has_aux`.

    >>> import numpy as np, pullback as pb
    >>> pb.value_and_grad(lambda x: np.sum(x ** 2))(np.array([3.0]))
    (np.float64(9.0), array([6.]))
    """
    single = isinstance(argnums, int)
    wanted = (argnums,) if single else tuple(argnums)

    def value_and_gradient_of_f(*args, **kwargs):
        positions = [a % len(args) if -len(args) <= a < len(args) else _bad_argnum(a, len(args)) for a in wanted]
        tape, out, plans = _trace_call(f, args, kwargs, positions)
        try:
            if has_aux:
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise TypeError("With has_aux=True, f must return a pair (value, aux).")
                primary = out[0]
            else:
                primary = out
            grads = _gradients(tape, primary, plans)
            picked = tuple(grads[p] for p in positions)
            return _untrack(out, tape), picked[0] if single else picked
        finally:
            _release(tape)

    return value_and_gradient_of_f


def _bad_argnum(a, n):
    raise ValueError(f"argnums {a} is out of range for {n} positional arguments")


# --- the steps -----------------------------------------------------------------------
def _trace_call(f, args, kwargs, positions):
    """Track the float leaves of `args[positions]` on a new tape and run `f` on the copies."""
    tape = Tape()
    tracked = list(args)
    plans = [None] * len(args)
    for i in positions:
        tracked[i], plans[i] = _track(args[i], tape, {}, f"argument {i}")
    try:
        out = f(*tracked, **kwargs)
    finally:
        tape.close()
    return tape, out, plans


def _track(x, tape, ancestors, path):
    """A copy of `x` whose float leaves are tracked, and a plan to read its gradient back.

    A plan is None (no gradient), `("leaf", node_id, primal)` or `("node", x, {key: plan})`.
    Each place gets its own tracked leaf, so a tied array gets one partial gradient per place.
    """
    if _is_float(x):
        leaf = tape.leaf(x)
        return leaf, ("leaf", leaf._id, x)
    if _is_complex(x):
        raise TypeError(
            f"{path} is complex; pullback differentiates real-valued code only. "
            "Pass the real and imaginary parts as separate float arrays."
        )
    kind = tree.kind_of(x)
    if kind is None:
        return x, None
    key = id(x)
    if key in ancestors:  # a cycle: point at the copy being built, and count no gradient here
        return ancestors[key], None
    shell = kind.shell(x) if kind.shell is not None else None
    ancestors[key] = shell if shell is not None else x
    names = tree.trainable_names(x)
    kids = kind.children(x)
    new, plans = {}, {}
    for k, v in kids.items():
        if names is not None and k not in names:
            new[k], plans[k] = v, None
        else:
            where = f"{path}.{k}" if kind is tree._OBJECT else f"{path}[{k!r}]"
            new[k], plans[k] = _track(v, tape, ancestors, where)
    del ancestors[key]
    if all(p is None for p in plans.values()) and all(new[k] is v for k, v in kids.items()):
        return x, None
    if shell is not None:
        kind.fill(shell, new)
        copy = shell
    else:
        copy = kind.rebuild(x, new)
    return copy, ("node", x, plans)


def _is_float(x):
    if type(x) is float:
        return True
    if isinstance(x, (np.ndarray, np.generic, Tracked)):
        return x.dtype.kind == "f"
    return False


def _is_complex(x):
    if type(x) is complex:
        return True
    return isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind == "c"


def _gradients(tape, out, plans):
    """Check that `out` is a real scalar, sweep backwards from it, read the gradients back."""
    seed_id = _scalar_output(out, tape)
    if seed_id is None:
        return tuple(None for _ in plans)
    grads = backward(tape, {seed_id: _one_like(tape.values[seed_id])})
    return _read_all(plans, grads)


def _scalar_output(out, tape):
    """The node id to seed, or None when `out` does not depend on this tape; errors if not scalar."""
    value = out._value if type(out) is Tracked and out._tape is tape else out
    if isinstance(value, (np.ndarray, Tracked)) and np.ndim(value) > 0:
        raise TypeError("Output is an array, so the gradient is not defined. Perhaps you wanted jacobian.")
    if isinstance(value, (complex, np.complexfloating)) or (isinstance(value, np.ndarray) and value.dtype.kind == "c"):
        raise TypeError("Output is complex, so the gradient is not defined.")
    if not isinstance(value, (int, float, np.number, np.bool_, np.ndarray, Tracked)):
        raise TypeError(f"Output should be scalar; got {type(value).__name__}. Return a real number or a 0-d array.")
    return out._id if value is not out else None


def _one_like(v):
    if type(v) is float:
        return 1.0
    return np.ones((), dtype=v.dtype)


def _collect_seeds(out, dy, tape, seeds):
    """Pair each tracked part of `out` with its part of `dy`."""
    if dy is None:
        return
    if type(out) is Tracked:
        if out._tape is tape:
            if np.shape(dy) not in ((), out.shape):
                raise ValueError(f"Cotangent of shape {np.shape(dy)} does not match output of shape {out.shape}")
            seeds[out._id] = dy if out._id not in seeds else seeds[out._id] + dy
        return
    kind = tree.kind_of(out)
    if kind is None:
        return
    for k, part in kind.children(out).items():
        _collect_seeds(part, tree._child(dy, k), tape, seeds)


def _read_all(plans, grads):
    returned = set()
    return tuple(_read(p, grads, returned) for p in plans)


def _read(plan, grads, returned):
    """Gradient for one plan: arrays, Tangents and containers, `None` where all parts are None."""
    if plan is None or grads is None:
        return None
    if plan[0] == "leaf":
        return _leaf_gradient(grads[plan[1]], plan[2], returned)
    _, x, plans = plan
    kids = {k: _read(p, grads, returned) for k, p in plans.items()}
    if all(v is None for v in kids.values()):
        return None
    if type(x) in (tuple, list):
        return type(x)(kids.values())
    if isinstance(x, tuple):
        return type(x)(*kids.values())
    if isinstance(x, dict):
        return dict(kids)
    return tree.Tangent._make(type(x), kids)


def _leaf_gradient(g, primal, returned):
    if g is None:
        return None
    g = fit(g, primal)
    if type(g) is Tracked:  # a nested call: this gradient is itself being differentiated
        return g
    if type(primal) is float:
        return float(g)
    if isinstance(primal, np.generic):
        return primal.dtype.type(g)
    g = np.asarray(g)
    # Never hand out a read-only broadcast, a view, the caller's own array, or one array twice.
    if id(g) in returned or g is primal or g.base is not None or not g.flags.writeable:
        g = g.copy()
    returned.add(id(g))
    return g


def _untrack(out, tape):
    """`out` with this tape's tracked values replaced by their plain values (outer levels kept)."""
    return tree.fmap(lambda v: v._value if type(v) is Tracked and v._tape is tape else v, out)


def _release(tape):
    """Drop everything the tape holds, so a finished gradient keeps nothing alive."""
    tape.values.clear()
    tape.entries.clear()
