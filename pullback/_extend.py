"""How users (and the built-in rule files) teach pullback new derivatives."""

import functools

import numpy as np

from ._registry import FORWARD_RULES, FUNCTIONS, NONDIFF_UFUNCS, PRIMITIVE_RULES, UFUNC_RULES, qualified_name
from ._trace import Traced, apply, apply_rule, missing_rule

__all__ = ["primitive", "rrule", "frule"]


def primitive(fn):
    """Make `fn` opaque to tracing: tracked arguments go to the rule registered with `rrule`.

    >>> import numpy as np, pullback as pb
    >>> @pb.primitive
    ... def cube(x):
    ...     return x ** 3
    >>> @pb.rrule(cube)
    ... def cube_rule(x):
    ...     return cube(x), lambda dy: (dy * 3 * x ** 2,)
    >>> pb.gradient(lambda x: np.sum(cube(x)), np.array([1.0, 2.0]))
    (array([ 3., 12.]),)
    """

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if not any(isinstance(a, Traced) for a in args):
            if any(isinstance(v, Traced) for v in kwargs.values()):
                raise TypeError(f"{qualified_name(fn)}: keyword arguments are not differentiated; pass tracked values positionally.")
            return fn(*args, **kwargs)
        rule = PRIMITIVE_RULES.get(call)
        if rule is None:
            raise missing_rule(fn)
        return apply(rule, args, kwargs)

    call._pullback_primitive = True
    return call


def rrule(fn):
    """Register the decorated function as the reverse rule of `fn`.

    `fn` is a NumPy ufunc, a NumPy function (anything that dispatches through
    `__array_function__`) or a `pb.primitive`. The rule takes the plain positional
    and keyword arguments of a call and returns `(y, back)`, where `back(dy)` returns one
    cotangent per positional argument: a value, `None`, a `pb.Thunk` or a
    `pb.InplaceableThunk`. Cotangents may keep the broadcast shape of `y`: pullback
    sums them down to each input's shape and casts them to its dtype.

    >>> import numpy as np, pullback as pb
    >>> @pb.primitive
    ... def cube_root(x):
    ...     return np.cbrt(x)
    >>> @pb.rrule(cube_root)
    ... def cube_root_rule(x):
    ...     y = cube_root(x)
    ...     return y, lambda dy: (pb.Thunk(lambda: dy / (3 * y ** 2)),)
    >>> pb.gradient(lambda x: np.sum(cube_root(x)), np.array([8.0]))
    (array([0.08333333]),)
    """

    def register(rule):
        previous = _reverse_rule_of(fn)
        _set_reverse_rule(fn, rule)
        if getattr(previous, "_only_forward", False):  # a forward rule registered first moves over
            FORWARD_RULES[rule] = FORWARD_RULES.pop(previous)
        return rule

    return register


def frule(fn):
    """Register the decorated function as the forward rule of `fn`.

    `fn` is anything `rrule` accepts. The rule takes `(primals, tangents, **kwargs)`, where
    `tangents[k]` is None when argument k carries no tangent, and returns `(y, y_dot)`
    (`y_dot` may be None, a zero tangent). An operation with only a reverse rule still
    works in forward mode, by transposing its `back`.

    >>> import numpy as np, pullback as pb
    >>> @pb.primitive
    ... def double(x):
    ...     return 2.0 * x
    >>> @pb.frule(double)
    ... def double_frule(primals, tangents):
    ...     return double(primals[0]), None if tangents[0] is None else 2.0 * tangents[0]
    >>> pb.jvp(double, (np.ones(2),), (np.array([1.0, 3.0]),))[1]
    array([2., 6.])
    """

    def register(forward):
        rule = _reverse_rule_of(fn)
        if rule is None:
            rule = _only_forward(fn)
            _set_reverse_rule(fn, rule)
        FORWARD_RULES[rule] = forward
        return forward

    return register


def _reverse_rule_of(fn):
    if isinstance(fn, np.ufunc):
        return UFUNC_RULES.get(fn)
    if getattr(fn, "_pullback_primitive", False):
        return PRIMITIVE_RULES.get(fn)
    impl = FUNCTIONS.get(fn)
    if impl is None:
        return None
    if isinstance(impl, functools.partial) and impl.func is apply_rule:
        return impl.args[0]
    raise TypeError(
        f"{qualified_name(fn)} is computed by composing other operations, whose rules give its "
        "derivatives in both modes; it takes no rule of its own."
    )


def _set_reverse_rule(fn, rule):
    if isinstance(fn, np.ufunc):
        UFUNC_RULES[fn] = rule
        NONDIFF_UFUNCS.discard(fn)
    elif getattr(fn, "_pullback_primitive", False):
        PRIMITIVE_RULES[fn] = rule
    elif hasattr(fn, "_implementation"):  # NumPy's __array_function__ dispatch reaches us
        FUNCTIONS[fn] = functools.partial(apply_rule, rule)
    else:
        name = qualified_name(fn)
        raise TypeError(
            f"Calls to {name} never reach pullback (it is not a NumPy ufunc or array function). "
            f"Wrap it first, `f = pullback.primitive({name})`, call that, and register the rule on it."
        )


def _only_forward(fn):
    """The reverse rule of an operation that has only a forward rule: it says so."""

    def rule(*args, **kwargs):
        raise NotImplementedError(
            f"{qualified_name(fn)} has a forward rule but no reverse rule; register one with "
            f"@pullback.rrule({qualified_name(fn)}) to use it in gradient."
        )

    rule._only_forward = True
    return rule
