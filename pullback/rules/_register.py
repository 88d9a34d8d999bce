"""How the rule files fill the tables in `pullback._registry`, recording each function's row of
docs/coverage.md as they go (so the documentation cannot drift from the registry).

Reverse rules, `rule(*args, **kwargs) -> (y, back)`:

- `ufunc_rule(ufunc, args=...)` and `rule(*fns, args=...)` register one for a ufunc or for
  NumPy functions; `private_rule` marks one that a composite applies itself with
  `apply(rule, args)` (it serves no NumPy function directly);
- `composite(*fns, args=...)`: a function written with differentiable NumPy calls runs instead;
- `without_gradient(*fns)` and `refuse(fn, reason)`: no gradient, or a clear error.

Forward rules, `frule(primals, tangents, **kwargs) -> (y, y_dot)` (a None tangent is zero), are
written next to their reverse rule and registered against it with `forward_rule(rule)`;
`forward_in_first(rule)` for a rule differentiable in its first argument only, and
`linear_forward(rule, fn)` for a map that is also linear in it.

`args` names the differentiable arguments (a row's second column) and `notes` says what a
user should know; both end up in the coverage table, with whether a forward rule exists.
"""

import collections
import functools
import inspect
import sys

import numpy as np

from .._registry import FORWARD_RULES, FUNCTIONS, NONDIFF_UFUNCS, UFUNC_RULES, qualified_name
from .._trace import Traced, _astype, _getitem, _index_update, apply, apply_rule, mark_view, strip_all

# kind: "rule" (its own reverse rule, `rule`), "composite", "none" (no gradient) or "refused"
Entry = collections.namedtuple("Entry", ["name", "args", "notes", "family", "kind", "rule"])

# key (the registered callable, or a name for rules registered later) -> Entry
ENTRIES = {}

# Rules that composites apply themselves: reachable from no table, so listed here for the tests.
PRIVATE_RULES = []

# Callables registered twice in the same table: a test keeps this empty.
OVERRIDDEN = []

_STAND_INS = {_getitem: "x[index]", _index_update: "x[index] = value", _astype: "x.astype(dtype)"}


def row_name(fn):
    """The name a coverage-table row shows for `fn`."""
    if fn in _STAND_INS:
        return _STAND_INS[fn]
    if isinstance(fn, np.ufunc):
        return f"numpy.{fn.__name__}"
    return qualified_name(fn)


def describe(key, args, notes="", *, kind, rule=None, name=None, family=None):
    """Record the coverage-table row for `key`: differentiable arguments, notes, and how it is served."""
    if family is None:
        family = _family_of_module(sys._getframe(1).f_globals.get("__name__", ""))
    ENTRIES[key] = Entry(name or row_name(key), args, " ".join(notes.split()), family, kind, rule)


def _family_of_module(module_name):
    return module_name.rpartition(".")[2]


def _claim(table, key):
    if key in table:
        OVERRIDDEN.append(key)


# --- reverse rules ------------------------------------------------------------------------
def ufunc_rule(ufunc, *, args, notes=""):
    """Decorator: `rule(*inputs) -> (y, back)` serves `ufunc(...)` on tracked inputs."""

    def register(rule_fn):
        _claim(UFUNC_RULES, ufunc)
        UFUNC_RULES[ufunc] = rule_fn
        describe(ufunc, args, notes, kind="rule", rule=rule_fn, family=_family_of_module(rule_fn.__module__))
        return rule_fn

    return register


def rule(*fns, args, notes="", view=False):
    """Decorator: `rule(*args, **kwargs) -> (y, back)` serves each NumPy function in `fns`.

    The rule takes its arguments in the positions NumPy gives them. With `view=True` the
    result is marked as sharing memory with the input, as NumPy's result does, so that an
    in-place write into either is refused instead of going astray.
    """

    def register(rule_fn):
        for fn in fns:
            _claim(FUNCTIONS, fn)
            FUNCTIONS[fn] = _RuleCall(apply_rule, rule_fn, names=_positional_names(fn), view=view)
            describe(fn, args, notes, kind="rule", rule=rule_fn, family=_family_of_module(rule_fn.__module__))
        return rule_fn

    return register


class _RuleCall(functools.partial):
    """`apply_rule(rule, *args, **kwargs)` for a NumPy function whose positional parameters are
    `names` (None for a positional-only one).

    Arguments the caller named (`np.sum(a=x, axis=0)`) move to their positions first: the engine
    tracks positional arguments only, and a rule binds its arguments by position. With `view`
    the result is marked as a view of the first argument, as NumPy's result is. A partial of
    `apply_rule`, so that `pb.rrule` and `pb.frule` find the rule it applies.
    """

    def __new__(cls, func, rule_fn, *, names, view):
        run = super().__new__(cls, func, rule_fn)
        run.names, run.view = names, view
        return run

    def __call__(self, *args, **kwargs):
        if kwargs and self.names:
            args, kwargs = _to_positions(self.names, args, kwargs)
        y = apply(self.args[0], args, kwargs)
        if self.view and isinstance(y, Traced) and args and isinstance(args[0], Traced):
            mark_view(y, args[0])
        return y


def _positional_names(fn):
    """The names of `fn`'s positional parameters, None for positional-only ones (() if unknown)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name if p.kind is p.POSITIONAL_OR_KEYWORD else None for p in parameters
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _to_positions(names, args, kwargs):
    """Named arguments that continue `args` without a gap, moved to their positions.

    >>> _to_positions(("a", "axis", "dtype", "out", "keepdims"), (), {"a": 1, "axis": 0, "keepdims": True})
    ((1, 0), {'keepdims': True})
    """
    args, kwargs = list(args), dict(kwargs)
    while len(args) < len(names) and names[len(args)] in kwargs:
        args.append(kwargs.pop(names[len(args)]))
    return tuple(args), kwargs


def private_rule(rule_fn):
    """Decorator: a rule that a composite applies with `apply(rule, args)`, serving no NumPy function itself."""
    PRIVATE_RULES.append(rule_fn)
    return rule_fn


def composite(*fns, args, notes=""):
    """Decorator: the function, written with differentiable NumPy calls, runs in place of each of `fns`.

    Both modes go through the operations it is made of, so it needs no rule of its own.
    """

    def register(impl):
        for fn in fns:
            _claim(FUNCTIONS, fn)
            FUNCTIONS[fn] = impl
            describe(fn, args, notes, kind="composite", family=_family_of_module(impl.__module__))
        return impl

    return register


def without_gradient(*fns, notes=""):
    """These functions or ufuncs return values that carry no gradient: they run on the plain values."""
    family = _family_of_module(sys._getframe(1).f_globals.get("__name__", ""))
    for fn in fns:
        if isinstance(fn, np.ufunc):
            _claim(NONDIFF_UFUNCS, fn)
            NONDIFF_UFUNCS.add(fn)
        else:
            _claim(FUNCTIONS, fn)
            FUNCTIONS[fn] = functools.partial(_call_plain, fn)
        describe(fn, "none", notes or "No gradient: the result is piecewise constant or not a float.",
                 kind="none", family=family)


def _call_plain(fn, *args, **kwargs):
    return fn(*strip_all(args), **strip_all(kwargs))


def refuse(fn, reason):
    """Calling `fn` on a tracked value raises `reason`: for functions whose derivative pullback cannot give."""
    name = qualified_name(fn)

    def refused(*args, **kwargs):
        raise TypeError(f"{name} is not differentiable by pullback: {reason}")

    _claim(FUNCTIONS, fn)
    FUNCTIONS[fn] = refused
    describe(fn, "refused", reason, kind="refused", family=_family_of_module(sys._getframe(1).f_globals["__name__"]))


# --- forward rules --------------------------------------------------------------------------
def forward_rule(*rules):
    """Decorator: `frule(primals, tangents, **kwargs) -> (y, y_dot)` is the forward rule of each of `rules`.

    `tangents[k]` is None where argument k carries no tangent; `y_dot` may be None (zero).
    Write it with NumPy calls, like a reverse rule, so that it can be differentiated again.
    """

    def register(frule):
        for rule_fn in rules:
            FORWARD_RULES[rule_fn] = frule
        return frule

    return register


def forward_in_first(rule_fn):
    """Decorator for the forward rule of `rule_fn`, differentiable in its first argument only:
    `frule(t, *args, **kwargs) -> (y, y_dot)` gets that argument's tangent `t` (never None),
    then the call's own arguments, bound as the reverse rule binds them."""

    def register(inner):
        def frule(primals, tangents, **kwargs):
            if any(t is not None for t in tangents[1:]):
                raise TypeError(f"{qualified_name(rule_fn)} is differentiable in its first argument only; "
                                "pass the others as plain values (pb.stop_gradient).")
            if tangents[0] is None:
                return rule_fn(*primals, **kwargs)[0], None
            return inner(tangents[0], *primals, **kwargs)

        FORWARD_RULES[rule_fn] = frule
        return inner

    return register


def linear_forward(rule_fn, fn):
    """Register the forward rule of `rule_fn`, a map linear in its first argument (the only one
    with a tangent): the value comes from the rule (with its argument checks), the tangent is
    `fn(tangent, *other_args, **kwargs)`."""

    @forward_in_first(rule_fn)
    def frule(t, *args, **kwargs):
        return rule_fn(*args, **kwargs)[0], fn(t, *args[1:], **kwargs)

    return frule


def add_tangents(*tangents):
    """The sum of the tangents that are not None (None when all are)."""
    total = None
    for t in tangents:
        if t is not None:
            total = t if total is None else total + t
    return total


def zeros_if_none(t, primal):
    """`t`, or a zero tangent shaped like `primal` where there is none (for joining several)."""
    return np.zeros(np.shape(primal), dtype=np.result_type(strip_all(primal))) if t is None else t
