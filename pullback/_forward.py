"""Forward mode: dual values carry a tangent, and each operation pushes it through a forward rule.

Forward rules are keyed, like reverse rules, on the callable they serve; the engine hands this
level an operation's reverse rule (every operation the tracer knows has one), and the registry
finds the forward rule registered for the same callable, so one dispatch path serves both
modes. An operation with only a reverse rule still works in forward mode, by transposing its
linear `back` map.
"""

import numpy as np

from ._arrays import is_foreign_array_type, like_input, same_shape, zeros_as
from ._backward import as_cotangents, backward, fit, missing_cotangents
from ._registry import FUNCTIONS, forward_rule_of, qualified_name
from ._reverse import Tape, like_outputs, several_outputs
from ._standins import as_numpy_number, astype, dtype_of, is_jit_float_or_complex, is_python_float, shape_of
from ._tangents import Tangent, unthunk
from ._values import Dual, Traced, Tracked, new_level, release_handed_out


class ForwardLevel:
    """The level of one `jvp` call: a Dual belongs to exactly one.

    >>> import numpy as np
    >>> level = ForwardLevel()
    >>> y = np.sin(Dual(np.zeros(2), np.ones(2), level))
    >>> y._tangent
    array([1., 1.])
    """

    __slots__ = ("level", "closed", "handed_out", "refused", "__weakref__")

    def __init__(self):
        self.level = new_level()
        self.closed = False
        self.handed_out = None  # stop_gradient's read-only copies of its values (see `read_only_value`)
        self.refused = None  # the first of pullback's refusals while `f` runs (see `_errors.refused`)

    def apply(self, rule, args, kwargs):
        return push_forward(self, rule, args, kwargs)

    def close(self):
        """End the level: nothing writes its values any more, so stop_gradient's copies of them become
        writable, as without pullback."""
        self.closed = True
        release_handed_out(self)


def push_forward(tag, rule, args, kwargs):
    """Apply the operation whose reverse rule is `rule` to `args`, carrying tangents of level `tag`."""
    if tag.closed:
        raise RuntimeError(
            "A dual value was used after the jvp call that created it had finished; "
            "use pb.stop_gradient(x) to keep a plain copy."
        )
    primals, tangents, moving = [], [], False
    for a in args:
        if type(a) is Dual and a._tape is tag:
            primals.append(a._value)
            tangents.append(a._tangent)
            moving = moving or a._tangent is not None
        else:
            primals.append(a)
            tangents.append(None)
    frule = forward_rule_of(rule)
    if not moving and not getattr(rule, "only_forward", False):
        y, y_dot = rule(*primals, **kwargs)[0], None  # zero tangents only (a buffer made by np.zeros_like(x))
    elif frule is not None:
        y, y_dot = frule(primals, tangents, **kwargs)
        return make_dual(tag, y, y_dot, frule)
    else:
        y, y_dot = _transposed(rule, primals, tangents, kwargs)
    return make_dual(tag, y, y_dot)


def make_dual(tag, y, y_dot, frule=None):
    """`y` carrying tangent `y_dot` (shaped and typed like `y`; None is zero), as a Dual of level `tag`
    when it is a float or complex value, as a tape records every such result in reverse mode: so a
    buffer made by `np.zeros_like(x)`, and its views, take traced writes in both modes. `frule`, the
    forward rule that gave `y_dot`, is named where it is malformed."""
    if several_outputs(y):
        parts = _tangent_parts(y, y_dot, frule)
        return like_outputs(y, [make_dual(tag, yi, ti, frule) for yi, ti in zip(y, parts)])
    if not _is_inexact(y):
        return y
    return Dual(y, None if y_dot is None else fit_tangent(y_dot, y, frule), tag)


def _is_inexact(value):
    """Whether `value` is a float or complex value (a tangent's carrier); text such as a label is not."""
    return not isinstance(value, (str, bytes)) and dtype_of(value).kind in "fc"


def _tangent_parts(y, y_dot, frule):
    """The tangents of the outputs `y` (a tuple) from `y_dot`: one per output, None where zero."""
    if y_dot is None:
        return (None,) * len(y)
    if not isinstance(y_dot, (tuple, list)) or len(y_dot) != len(y):
        raise TypeError(_malformed(frule, f"{_described(y_dot)} as the tangent of a tuple of {len(y)} outputs",
                                   "the tangent of a tuple of outputs is a tuple of one tangent per output, None "
                                   "where it is zero"))
    return y_dot


def fit_tangent(t, y, frule=None):
    """Broadcast tangent `t` to `y`'s shape and give it `y`'s dtype (a Python float `y` is weak).

    The tangent of a real value is real: a complex tangent reaching one keeps its real part. A
    tangent that is no array or number, or does not broadcast to `y`'s shape, is refused, naming
    `frule`, the forward rule that gave it.
    """
    shape = shape_of(y)
    if type(t) is not np.ndarray and isinstance(t, (tuple, list, dict, Tangent)):
        raise TypeError(_malformed(frule, f"{_described(t)} as the tangent of {_described(y)}", "the tangent of an "
                                   "array or number is an array or number like it (np.asarray(...) of a list)"))
    if not same_shape(shape_of(t), shape):  # (a Dask length unknown until computed is NaN)
        try:
            t = np.broadcast_to(t, shape)
        except ValueError:
            raise ValueError(_malformed(frule, f"a tangent of shape {np.shape(t)} for a value of shape {shape}",
                                        "a tangent has its value's shape, or one that broadcasts to it")) from None
    weak = type(y) is float or type(y) is complex or is_jit_float_or_complex(y)
    if dtype_of(t).kind == "c" and (dtype_of(y).kind != "c"):
        t = FUNCTIONS[np.real](t) if isinstance(t, Traced) else np.real(t)
    if is_jit_float_or_complex(t):
        t = astype(as_numpy_number(t), np.complex128 if dtype_of(y).kind == "c" else np.float64)
    elif type(t) is float or type(t) is int or type(t) is complex:
        # a NumPy number: the derivatives then follow NumPy's arithmetic (1/0 is inf), as in reverse mode,
        # not Python's, which a traced Python number follows (see _values._python_arithmetic)
        t = np.complex128(t) if dtype_of(y).kind == "c" else np.float64(t)
    if not weak:
        dtype = dtype_of(y)
        if dtype_of(t) != dtype:
            if isinstance(t, Traced):
                t = FUNCTIONS[astype](t, dtype)
            else:  # an array of another library (Dask, CuPy) converts itself
                t = t.astype(dtype) if is_foreign_array_type(type(t)) else np.asarray(t, dtype=dtype)
    return t


def _malformed(frule, what, contract):
    name = "A forward rule" if frule is None else f"The forward rule {qualified_name(frule)}"
    return f"{name} gave {what}; {contract}. Check the rules registered with pb.frule."


def _described(x):
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"an array of shape {x.shape}"
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of {len(x)}"
    return f"a {type(x).__name__}"


def _transposed(rule, primals, tangents, kwargs):
    """The tangent from a reverse rule alone: `y_dot = J v` is the gradient of `u -> <J^T u, v>`."""
    y, back = rule(*primals, **kwargs)
    if all(t is None for t in tangents):
        return y, None

    def pairing(u):
        total = 0.0
        # Its value at u = 0 is never used, only its gradient (the tangent, whose own warnings NumPy gives as
        # usual): what that value meets, 0 * inf where a derivative is infinite, is not the user's arithmetic.
        with np.errstate(all="ignore"):
            cotangents = as_cotangents(back, back(u))
            if any(t is not None for t in tangents[len(cotangents):]):
                raise missing_cotangents(back, cotangents, [-1 if t is None else k for k, t in enumerate(tangents)])
            for ct, t, p in zip(cotangents, tangents, primals):
                if t is not None and ct is not None:
                    total = total + np.sum(fit(unthunk(ct), p) * t)
        return total

    return y, _gradient_of(pairing, _zero_cotangent(y))


def _zero_cotangent(y):
    """A zero cotangent for the output `y`: for several outputs one of them each, in their container
    (a tuple, a namedtuple, a list), as the pullback of such an operation takes it, with None for an
    output that carries none (an integer)."""
    if several_outputs(y):
        return like_outputs(y, [_zero_cotangent(part) if _has_cotangent(part) else None for part in y])
    if is_python_float(y):
        return 0.0
    return zeros_as(y, shape_of(y), dtype_of(y))


def _has_cotangent(part):
    return several_outputs(part) or (part is not None and _is_inexact(part))


def _gradient_of(f, x):
    """The gradient of scalar `f` at `x` (a value, or a tuple of them with None where there is none),
    by one reverse sweep (the transposition trick needs no more)."""
    tape = Tape()
    u = _leaves(tape, x)
    out = f(u)
    tape.close()
    if type(out) is not Tracked or out._tape is not tape:
        return None
    grads = backward(tape, {out._id: like_input(np.ones((), dtype=dtype_of(out)), out)})
    return _read_gradient(grads, u, x)


def _leaves(tape, x):
    if several_outputs(x):
        return like_outputs(x, [_leaves(tape, part) for part in x])
    return None if x is None else tape.leaf(x)


def _read_gradient(grads, u, x):
    if several_outputs(x):
        return tuple(_read_gradient(grads, ui, xi) for ui, xi in zip(u, x))
    g = None if u is None else grads[u._id]
    return None if g is None else fit(g, x)


__all__ = ["ForwardLevel", "push_forward", "make_dual", "fit_tangent"]
