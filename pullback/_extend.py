"""How users (and the built-in rule files) teach pullback new derivatives."""

import functools

import numpy as np

from ._registry import FUNCTIONS, NONDIFF_UFUNCS, PRIMITIVE_RULES, UFUNC_RULES, qualified_name
from ._trace import Tracked, apply, apply_rule, missing_rule

__all__ = ["primitive", "rrule"]


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
        if not any(type(a) is Tracked for a in args):
            if any(type(v) is Tracked for v in kwargs.values()):
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
    >>> @pb.rrule(np.cbrt)
    ... def cbrt_rule(x):
    ...     y = np.cbrt(x)
    ...     return y, lambda dy: (dy / (3 * y ** 2),)
    >>> pb.gradient(lambda x: np.sum(np.cbrt(x)), np.array([8.0]))
    (array([0.08333333]),)
    """

    def register(rule):
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
        return rule

    return register
