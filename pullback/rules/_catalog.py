"""Registration helpers that also record what each rule covers: the source of docs/coverage.md.

A rule file registers a function with `rule`, `composite`, `without_gradient` or
`refuse`, giving the differentiable arguments and notes right there; `pullback.rules.table`
reads `ENTRIES` back, so the documentation cannot drift from the registry.
"""

import collections
import functools

from .._registry import FUNCTIONS, NONDIFF_UFUNCS, UFUNC_RULES, qualified_name
from .._trace import Traced, apply, apply_rule, mark_view

Entry = collections.namedtuple("Entry", ["name", "args", "notes", "family"])

# key (the registered callable, or a name for rules registered later) -> Entry
ENTRIES = {}

# Callables these helpers registered although another file already had: a test keeps this empty.
OVERRIDDEN = []


def describe(fn, args, notes="", *, family, name=None):
    """Record the coverage-table row for `fn`: its differentiable arguments and notes."""
    if name is None:
        name = f"numpy.{fn.__name__}" if hasattr(fn, "nin") else qualified_name(fn)
    ENTRIES[fn] = Entry(name, args, " ".join(notes.split()), family)


def _family(obj):
    return obj.__module__.rpartition(".")[2]


def _claim(fn):
    if fn in FUNCTIONS or fn in UFUNC_RULES or fn in NONDIFF_UFUNCS:
        OVERRIDDEN.append(fn)


def rule(*fns, args, notes="", view=False):
    """Decorator: `rule(*args, **kwargs) -> (y, back)` serves each NumPy function in `fns`.

    With `view=True` the result is marked as sharing memory with the input, as NumPy's
    result does, so that an in-place write into either is refused instead of going astray.
    """

    def register(rule_fn):
        if view:
            def run(x, *rest, **kwargs):
                y = apply(rule_fn, (x,) + rest, kwargs)
                if isinstance(y, Traced) and isinstance(x, Traced):
                    mark_view(y, x)
                return y
        else:
            run = _call_with(rule_fn)
        for fn in fns:
            _claim(fn)
            FUNCTIONS[fn] = run
            describe(fn, args, notes, family=_family(rule_fn))
        return rule_fn

    return register


def _call_with(rule_fn):
    return functools.partial(apply_rule, rule_fn)


def composite(*fns, args, notes=""):
    """Decorator: the function, written with differentiable NumPy calls, runs in place of each of `fns`."""

    def register(impl):
        for fn in fns:
            _claim(fn)
            FUNCTIONS[fn] = impl
            describe(fn, args, notes, family=_family(impl))
        return impl

    return register


def without_gradient(*fns, notes="", family):
    """These functions return values that carry no gradient: run them on the plain values."""
    from .._trace import strip_all

    for fn in fns:
        _claim(fn)
        FUNCTIONS[fn] = functools.partial(_call_plain, fn, strip_all)
        describe(fn, "none", notes or "No gradient: the result is piecewise constant or not a float.", family=family)


def _call_plain(fn, strip_all, *args, **kwargs):
    return fn(*strip_all(args), **strip_all(kwargs))


def refuse(fn, reason, *, family):
    """Calling `fn` on a tracked value raises `reason`: for functions whose derivative pullback cannot give."""
    name = qualified_name(fn)

    def refused(*args, **kwargs):
        raise TypeError(f"{name} is not differentiable by pullback: {reason}")

    _claim(fn)
    FUNCTIONS[fn] = refused
    describe(fn, "refused", reason, family=family)
