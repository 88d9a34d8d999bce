"""Forward mode: dual values carry a tangent, and each operation pushes it through a forward rule.

Forward rules are keyed, like reverse rules, on the callable they serve; the engine hands this
level an operation's reverse rule (every operation the tracer knows has one), and the registry
finds the forward rule registered for the same callable, so one dispatch path serves both
modes. An operation with only a reverse rule still works in forward mode, by transposing its
linear `back` map.
"""

import numpy as np

from ._arrays import is_foreign_array_type, like_input, zeros_as
from ._backward import as_cotangents, backward, fit, missing_cotangents
from ._registry import FUNCTIONS, forward_rule_of
from ._reverse import Tape
from ._standins import astype, dtype_of
from ._tangents import unthunk
from ._values import Dual, Traced, Tracked, new_level


class ForwardLevel:
    """The level of one `jvp` call: a Dual belongs to exactly one.

    >>> import numpy as np
    >>> level = ForwardLevel()
    >>> y = np.sin(Dual(np.zeros(2), np.ones(2), level))
    >>> y._tangent
    array([1., 1.])
    """

    __slots__ = ("level", "closed")

    def __init__(self):
        self.level = new_level()
        self.closed = False

    def apply(self, rule, args, kwargs):
        return push_forward(self, rule, args, kwargs)

    def close(self):
        self.closed = True


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
    else:
        y, y_dot = _transposed(rule, primals, tangents, kwargs)
    return make_dual(tag, y, y_dot)


def make_dual(tag, y, y_dot):
    """`y` carrying tangent `y_dot` (shaped and typed like `y`; None is zero), as a Dual of level `tag`
    when it is a float or complex value, as a tape records every such result in reverse mode: so a
    buffer made by `np.zeros_like(x)`, and its views, take traced writes in both modes."""
    if isinstance(y, tuple):
        parts = y_dot if y_dot is not None else (None,) * len(y)
        duals = [make_dual(tag, yi, ti) for yi, ti in zip(y, parts)]
        return type(y)(*duals) if hasattr(y, "_fields") else type(y)(duals)
    kind = dtype_of(y).kind
    if kind != "f" and kind != "c":
        return y
    return Dual(y, None if y_dot is None else fit_tangent(y_dot, y), tag)


def fit_tangent(t, y):
    """Broadcast tangent `t` to `y`'s shape and give it `y`'s dtype (a Python float `y` is weak).

    The tangent of a real value is real: a complex tangent reaching one keeps its real part.
    """
    shape = np.shape(y)
    if np.shape(t) != shape:
        t = np.broadcast_to(t, shape)
    weak = type(y) is float or type(y) is complex
    if dtype_of(t).kind == "c" and (dtype_of(y).kind != "c"):
        t = FUNCTIONS[np.real](t) if isinstance(t, Traced) else np.real(t)
    if type(t) is float or type(t) is int or type(t) is complex:
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


def _transposed(rule, primals, tangents, kwargs):
    """The tangent from a reverse rule alone: `y_dot = J v` is the gradient of `u -> <J^T u, v>`."""
    y, back = rule(*primals, **kwargs)
    if all(t is None for t in tangents):
        return y, None
    if isinstance(y, tuple):
        raise NotImplementedError("This operation has several outputs and no forward rule; register one with pullback.frule.")

    def pairing(u):
        total = 0.0
        cotangents = as_cotangents(back, back(u))
        if any(t is not None for t in tangents[len(cotangents):]):
            raise missing_cotangents(back, cotangents, [-1 if t is None else k for k, t in enumerate(tangents)])
        for ct, t, p in zip(cotangents, tangents, primals):
            if t is not None and ct is not None:
                total = total + np.sum(fit(unthunk(ct), p) * t)
        return total

    zero = 0.0 if type(y) is float else zeros_as(y, np.shape(y), dtype_of(y))
    return y, _gradient_of(pairing, zero)


def _gradient_of(f, x):
    """The gradient of scalar `f` at `x`, by one reverse sweep (the transposition trick needs no more)."""
    tape = Tape()
    u = tape.leaf(x)
    out = f(u)
    tape.close()
    if type(out) is not Tracked or out._tape is not tape:
        return None
    grads = backward(tape, {out._id: like_input(np.ones((), dtype=dtype_of(out)), out)})
    return fit(grads[u._id], x) if grads[u._id] is not None else None


__all__ = ["ForwardLevel", "push_forward", "make_dual", "fit_tangent"]
