"""Small helpers the rule files use to fill the tables in `pullback._registry`."""

import functools

from .._registry import FUNCTIONS, NONDIFF_UFUNCS, UFUNC_RULES
from .._trace import apply_rule, strip_all


def ufunc_rule(ufunc):
    """Decorator: `rule(*inputs) -> (y, back)` serves `ufunc(...)` on tracked inputs."""

    def register(rule):
        UFUNC_RULES[ufunc] = rule
        return rule

    return register


def function_rule(*fns):
    """Decorator: `rule(*args, **kwargs) -> (y, back)` serves each NumPy function in `fns`."""

    def register(rule):
        for fn in fns:
            FUNCTIONS[fn] = functools.partial(apply_rule, rule)
        return rule

    return register


def implements(*fns):
    """Decorator: the function itself runs when a tracked value reaches any of `fns`.

    For functions whose NumPy signature does not map one-to-one onto a rule
    (sequences of arrays, composites written with other NumPy calls).
    """

    def register(impl):
        for fn in fns:
            FUNCTIONS[fn] = impl
        return impl

    return register


def no_gradient(*fns):
    """These NumPy functions or ufuncs return values that carry no gradient: run them on plain values."""
    for fn in fns:
        if hasattr(fn, "nin"):
            NONDIFF_UFUNCS.add(fn)
        else:
            FUNCTIONS[fn] = functools.partial(_call_plain, fn)


def _call_plain(fn, *args, **kwargs):
    return fn(*strip_all(args), **strip_all(kwargs))
