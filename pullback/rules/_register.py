"""Shorthands the rule files register with, over the public registration functions of
`pullback._extend` (`rrule`, `frule`, `composite`, `nondifferentiable`); each also records the
function's row of docs/coverage.md (so the documentation cannot drift from the registry).

Reverse rules, `rule(*args, **kwargs) -> (y, back)`, and what else can serve a function:

- `rule(*fns, args=...)`: `pb.rrule` for each of `fns` (ufuncs or NumPy functions);
- `composite(*fns, args=...)`: a function written with differentiable NumPy calls runs instead;
- `without_gradient(*fns)` and `refuse(fn, reason)`: no gradient, or a clear error.

A rule that only a composite applies is registered with `pb.rrule` on a `pb.primitive`, which
the composite calls; it gets no row of its own.

Forward rules, `frule(primals, tangents, **kwargs) -> (y, y_dot)` (a None tangent is zero), are
written next to their reverse rule and registered for the same callables: `forward_rule(*fns)`
for any, `forward_in_first(*fns)` for a function differentiable in its first argument only,
`linear_forward(fn)` for a map also linear in it, and `bilinear_forward(fn)` for one linear in
each of its first two.

`args` names the differentiable arguments (a row's second column) and `notes` says what a
user should know; both end up in the coverage table, with whether a forward rule exists.
"""

import collections
import functools
import inspect
import re
import sys
import threading
import warnings

import numpy as np

from .._arrays import is_foreign_array_type, zeros_as
from .._extend import composite as run_in_place_of
from .._extend import frule, nondifferentiable, primitive, rrule, serve_named_later_arguments
from .._registry import FUNCTIONS, NONDIFF_UFUNCS, REVERSE_RULES, qualified_name
from .._standins import astype, getitem, index_update, is_stand_in, power, traced_value
from .._values import Dual, Traced, stop_gradient, strip_all

# kind: "rule" (its own reverse rule, `rule`), "composite", "none" (no gradient) or "refused";
# key: the callable the row is about (or its name, for a SciPy ufunc whose rules wait for SciPy).
Entry = collections.namedtuple("Entry", ["name", "args", "notes", "family", "kind", "rule", "key"])

# key -> Entry
ENTRIES = {}

# Callables registered twice: a test keeps this empty.
OVERRIDDEN = []

_STAND_INS = {getitem: "x[index]", index_update: "x[index] = value", astype: "x.astype(dtype)", power: "x ** y"}


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
    ENTRIES[key] = Entry(name or row_name(key), args, " ".join(notes.split()), family, kind, rule, key)


def _family_of_module(module_name):
    return module_name.rpartition(".")[2]


def _claim(fn):
    if fn in REVERSE_RULES or fn in FUNCTIONS or fn in NONDIFF_UFUNCS:
        OVERRIDDEN.append(fn)


# --- reverse rules and the rest -------------------------------------------------------------
def rule(*fns, args, notes="", view=False):
    """Decorator: `rule(*args, **kwargs) -> (y, back)` is the reverse rule of each of `fns`.

    The rule takes its arguments in the positions NumPy gives them. With `view=True` the
    result is marked as sharing memory with the input, as NumPy's result does.
    """

    def register(rule_fn):
        for fn in fns:
            _claim(fn)
            rrule(fn, view=view)(rule_fn)
            serve_named_later_arguments(fn, rule_fn, re.findall(r"\w+", args))
            describe(fn, args, notes, kind="rule", rule=rule_fn, family=_family_of_module(rule_fn.__module__))
        return rule_fn

    return register


def composite(*fns, args, notes="", kind="composite", numpy_value=False):
    """Decorator: the function, written with differentiable NumPy calls, runs in place of each of `fns`.

    Both modes go through the operations it is made of, so it needs no rule of its own.
    `kind="none"` marks one whose result carries no gradient (the `*_like` constructors).
    `numpy_value=True` is for one whose operations round differently from NumPy's own code:
    its traced results then hold the value NumPy's function computes (see `valued_as_numpy`).
    """

    def register(impl):
        for fn in fns:
            _claim(fn)
            run_in_place_of(fn)(valued_as_numpy(fn, impl) if numpy_value else impl)
            describe(fn, args, notes, kind=kind, family=_family_of_module(impl.__module__))
        return impl

    return register


def as_array(v):
    """An argument as a composite computes with it: a traced value (or a `pb.jit` stand-in) as it is,
    anything else (a list, a tuple, a number) as NumPy reads it."""
    return v if isinstance(v, Traced) or is_stand_in(v) else np.asarray(v)


# --- composites that keep NumPy's value --------------------------------------------------------
@primitive
def numpy_valued(y, plain):
    """`plain`, NumPy's value of the result `y` of a composite, carrying `y`'s derivative."""
    return plain


@rrule(numpy_valued)
def _numpy_valued_rule(y, plain):
    return numpy_valued(y, plain), lambda g: (g, None)


@frule(numpy_valued)
def _numpy_valued_forward(primals, tangents):
    return numpy_valued(*primals), tangents[0]


def _plain(arguments):
    """Whether NumPy can run on these stripped arguments itself: no pb.jit symbols, no Dask or CuPy arrays."""
    if type(arguments) in (tuple, list):
        return all(_plain(a) for a in arguments)
    if type(arguments) is dict:
        return all(_plain(a) for a in arguments.values())
    t = type(arguments)
    return not (issubclass(t, Traced) or hasattr(t, "record_primitive") or is_foreign_array_type(t))


def pinned(y, plain):
    """`y` with each part holding the matching part of NumPy's result `plain`: its value, dtype and type (a
    NumPy scalar where NumPy gives one, not a 0-d array); a traced part keeps its derivative."""
    if isinstance(y, tuple) and isinstance(plain, tuple) and len(y) == len(plain):
        parts = [pinned(a, b) for a, b in zip(y, plain)]
        return type(y)(*parts) if hasattr(y, "_fields") else type(y)(parts)
    if np.shape(stop_gradient(y)) != np.shape(plain) or not isinstance(plain, (np.ndarray, np.generic, float, complex)):
        return y
    return numpy_valued(y, plain) if isinstance(y, Traced) else plain


# warnings.filters is process-wide: threads entering and leaving catch_warnings at once would put back
# each other's copies, leaving a filter in place for good
_FILTERS_LOCK = threading.RLock()


def valued_as_numpy(fn, impl):
    """`impl`, whose traced results hold the value NumPy's `fn` computes on the plain arguments.

    A composite's operations give the derivative, but may round differently from NumPy's own
    code (a sum taken in another order, a product of a reciprocal): the value it returns is
    NumPy's, bit for bit, so code computes the same with and without differentiation. The
    plain call costs one more forward evaluation. Inside a pb.jit trace, and for Dask or CuPy
    arrays, the composite's own value stands.
    """

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a ufunc
        signature = None
    # NumPy's call must not write into the traced values' arrays (copy=False, overwrite_input=True, out=)
    in_place = {name: value for name, value in (("copy", True), ("overwrite_input", False), ("out", None))
                if signature is not None and name in signature.parameters}

    @functools.wraps(impl)
    def run(*args, **kwargs):
        plain_args, plain_kwargs = strip_all(args), strip_all(kwargs)
        if not (_plain(plain_args) and _plain(plain_kwargs)):
            return _scalar_where_numpy_gives_one(impl(*args, **kwargs), fn, plain_args, plain_kwargs, in_place)
        if in_place:  # NumPy's call must not write into an argument (copy=False, overwrite_input=True, out=)
            bound = signature.bind(*plain_args, **plain_kwargs)
            bound.arguments.update(in_place)
            plain_args, plain_kwargs = bound.args, bound.kwargs
        plain = fn(*plain_args, **plain_kwargs)  # NumPy's value, and its errors and warnings, first
        with _FILTERS_LOCK, np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the composite's own: NumPy's were given
            y = impl(*args, **kwargs)
        if any(y is a for a in args) and isinstance(stop_gradient(y), np.ndarray):  # the array itself, as NumPy gives it
            return y
        return pinned(y, plain)

    return run


def _scalar_where_numpy_gives_one(y, fn, plain_args, plain_kwargs, in_place):
    """Under `pb.jit`, the composite's 0-d result `y` as a NumPy scalar (recorded) where NumPy's `fn` gives
    one (np.median, np.nanmax), not where it gives a 0-d array (np.cov of one variable): learnt from NumPy's
    call on the values of the trace, once."""
    plain = stop_gradient(y)
    if not is_stand_in(plain) or np.ndim(plain) != 0:  # (a tuple of results: as it is)
        return y
    values = _trace_values((plain_args, plain_kwargs))
    if not (_plain(values[0]) and _plain(values[1])):  # (a Dask argument beside the stand-ins)
        return y
    if in_place:
        bound = inspect.signature(fn).bind(*values[0], **values[1])
        bound.arguments.update(in_place)
        values = (bound.args, bound.kwargs)
    with _FILTERS_LOCK, np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        given = fn(*values[0], **values[1])
    return y[()] if isinstance(given, np.generic) else y


def _trace_values(x):
    """`x` with each `pb.jit` stand-in replaced by the value it has in the trace."""
    if type(x) in (tuple, list):
        return type(x)(_trace_values(v) for v in x)
    if type(x) is dict:
        return {k: _trace_values(v) for k, v in x.items()}
    return traced_value(x)


def with_numpy_value(result, fn, /, *args, **kwargs):
    """`result`, a composite's for `fn(*args, **kwargs)`, holding the value NumPy's `fn` gives."""
    plain_args, plain_kwargs = strip_all(args), strip_all(kwargs)
    if not (_plain(plain_args) and _plain(plain_kwargs)):
        return result
    return pinned(result, fn(*plain_args, **plain_kwargs))


def without_gradient(*fns, notes=""):
    """These functions or ufuncs return values that carry no gradient: they run on the plain values."""
    family = _family_of_module(sys._getframe(1).f_globals.get("__name__", ""))
    for fn in fns:
        _claim(fn)
        nondifferentiable(fn)
        describe(fn, "none", notes or "No gradient: the result is piecewise constant or not a float.",
                 kind="none", family=family)


def refuse(fn, reason):
    """Calling `fn` on a tracked value raises `reason`: for functions whose derivative pullback cannot give."""
    name = qualified_name(fn)

    def refused(*args, **kwargs):
        raise TypeError(f"{name} is not differentiable by pullback: {reason}")

    _claim(fn)
    run_in_place_of(fn)(refused)
    describe(fn, "refused", reason, kind="refused", family=_family_of_module(sys._getframe(1).f_globals["__name__"]))


# --- forward rules --------------------------------------------------------------------------
def forward_rule(*fns):
    """Decorator: `frule(primals, tangents, **kwargs) -> (y, y_dot)` is the forward rule of each of `fns`.

    `tangents[k]` is None where argument k carries no tangent; `y_dot` may be None (zero).
    Write it with NumPy calls, like a reverse rule, so that it can be differentiated again.
    """

    def register(forward):
        for fn in fns:
            frule(fn)(forward)
        return forward

    return register


def forward_in_first(*fns):
    """Decorator for the forward rule of each of `fns`, differentiable in its first argument only:
    `inner(t, *args, **kwargs) -> (y, y_dot)` gets that argument's tangent `t` (never None),
    then the call's own arguments, bound as the reverse rule binds them."""

    def register(inner):
        for fn in fns:
            frule(fn)(_first_only(fn, inner))
        return inner

    return register


def _first_only(fn, inner):
    def forward(primals, tangents, **kwargs):
        if any(t is not None for t in tangents[1:]):
            raise TypeError(f"{row_name(fn)} is differentiable in its first argument only; "
                            "pass the others as plain values (pb.stop_gradient).")
        if tangents[0] is None:
            return REVERSE_RULES[fn](*primals, **kwargs)[0], None
        return inner(tangents[0], *primals, **kwargs)

    return forward


def linear_forward(fn, tangent_map=None):
    """Register the forward rule of `fn`, a map linear in its first argument (the only one with a
    tangent): the value comes from its reverse rule (with its argument checks), the tangent is
    `tangent_map(tangent, *other_args, **kwargs)` (`tangent_map` is `fn` itself by default)."""
    tangent_map = fn if tangent_map is None else tangent_map

    try:
        names = list(inspect.signature(REVERSE_RULES[fn]).parameters)
    except (TypeError, ValueError, KeyError):
        names = []
    at = names.index("dtype") if "dtype" in names else None  # where a positional dtype= lies in the call

    @forward_in_first(fn)
    def forward(t, *args, **kwargs):
        dtype = kwargs.get("dtype", args[at] if at is not None and at < len(args) else None)
        return REVERSE_RULES[fn](*args, **kwargs)[0], tangent_map(real_for_dtype(t, dtype), *args[1:], **kwargs)

    return forward


def real_for_dtype(t, dtype):
    """The tangent `t` of a call with `dtype=`: its real part for a real `dtype` (the cast takes that part,
    and NumPy warned of it when the value was computed; casting again would warn again)."""
    if dtype is not None and np.iscomplexobj(t) and np.dtype(dtype).kind != "c":
        return np.real(t)
    return t


def bilinear_forward(fn):
    """Register the forward rule of `fn(a, b, *options, **kwargs)`, linear in `a` and in `b`. The
    value comes from its reverse rule (with its argument checks); the options, positional or
    keyword, go to every call."""

    @forward_rule(fn)
    def forward(primals, tangents, **kwargs):
        (a, b, *options), (ta, tb, *_) = primals, tangents
        y = REVERSE_RULES[fn](*primals, **kwargs)[0]
        return y, add_tangents(None if ta is None else fn(ta, b, *options, **kwargs),
                               None if tb is None else fn(a, tb, *options, **kwargs))

    return forward


def add_tangents(*tangents):
    """The sum of the tangents that are not None (None when all are)."""
    total = None
    for t in tangents:
        if t is not None:
            total = t if total is None else total + t
    return total


def zeros_if_none(t, primal):
    """`t`, or a zero tangent shaped like `primal` where there is none (for joining several)."""
    return zeros_as(strip_all(primal), np.shape(primal)) if t is None else t


def refuse_second_order_at_kink(x, at_kink, construct):
    """Raise where a forward-mode level moves `x` (a Dual: a Hessian, forward over reverse, or forward over
    forward) at an element where the mask `at_kink()` holds (made only then, not for a first derivative): there the rule's derivative is a subgradient (0 for np.abs at
    0), and its own derivative, 0, is not that of a smooth function built on it (`np.abs(a) ** 2` has 2 at 0).
    A first derivative (a plain `x`), and an element the level does not move (a structural zero, as below the
    diagonal of QR's R), are never refused."""
    if type(x) is not Dual or x._tangent is None:
        return
    moved = np.logical_and(stop_gradient(at_kink()), stop_gradient(x._tangent) != 0)
    if np.any(moved):
        raise ValueError(
            f"A second derivative through {construct} at its kink (at {int(np.sum(moved))} element(s)): there its "
            "first derivative is a subgradient, whose own derivative is not the one a smooth function built on it "
            "has (np.abs(a) ** 2 and np.linalg.norm(a) ** 2 have second derivative 2 at a = 0, where the "
            "subgradient would give 0). Write the function without the kink where second derivatives are taken at "
            "it: a * a or np.square(a) for np.abs(a) ** 2, (z * z.conj()).real for complex z, np.sum(a * a) for "
            "np.linalg.norm(a) ** 2, a * a + b * b for np.hypot(a, b) ** 2; or take them at another point.")
