"""How users and the built-in rule files teach pullback derivatives: the one registration path.

- `primitive(fn)` makes a function opaque to tracing, so that it can take rules of its own;
- `rrule(fn)` registers the reverse rule of a ufunc, a NumPy function or a primitive;
- `frule(fn)` registers its forward rule;
- `composite(fn)` makes a function written with differentiable NumPy calls run in place of `fn`;
- `nondifferentiable(*fns)` makes functions run on plain values, their results carrying no gradient.

Every table of `pullback._registry` is keyed on the callable a rule serves.
"""

import functools
import inspect

import numpy as np

from ._errors import missing_rule
from ._inplace import mark_view
from ._registry import FORWARD_RULES, FUNCTIONS, NONDIFF_UFUNCS, REVERSE_RULES, SERVED_BY, UFUNC_RULES, qualified_name
from ._standins import astype, getitem, index_update, power
from ._values import Traced, apply, strip_all

__all__ = ["primitive", "rrule", "frule", "composite", "nondifferentiable"]

# The engine's stand-ins for syntax (`x[i]`, `x[i] = v`, `x.astype(t)`, `x ** y`): keys like NumPy functions.
STAND_INS = (getitem, index_update, astype, power)


def primitive(fn):
    """Make `fn` opaque to tracing: tracked arguments go to the rule registered with `rrule`.

    The rule sees the values being differentiated that `fn` is given as positional arguments; one
    inside a list, tuple or dict argument (and not given on its own) would bypass it, so it is refused.

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

    names = positional_names(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs and any(isinstance(v, Traced) for v in kwargs.values()):
            args, kwargs = to_positions(names, args, kwargs)  # a traced argument given by name
            if any(isinstance(v, Traced) for v in kwargs.values()):
                raise TypeError(f"{qualified_name(fn)}: a traced value was passed as a keyword-only argument, which is "
                                "not differentiated; pass it positionally.")
        for a in args:
            if isinstance(a, Traced):
                rule = REVERSE_RULES.get(call)
                if rule is None:
                    raise missing_rule(fn)
                _refuse_traced_inside(fn, args, kwargs)
                return _marked(apply(rule, args, kwargs), args, call in VIEWS)
        _refuse_traced_inside(fn, args, kwargs)
        for a in (*args, *kwargs.values()):
            record = getattr(a, "record_primitive", None)  # a pb.jit Symbol: recorded whole
            if record is not None:
                return record(fn, qualified_name(fn), args, kwargs)
        return fn(*args, **kwargs)

    call._pullback_primitive = True
    return call


# The primitives whose rule was registered with `view=True`.
VIEWS = set()


def _refuse_traced_inside(fn, args, kwargs):
    """Raise for a traced value inside a list, tuple or dict argument of a user's primitive (not also given on its own):
    the rule is given plain arguments, so it would bypass the rule, whose derivative would be silently lost.
    (pullback's own primitives pass such containers on purpose: a shared computation keyed by its input.)"""
    if (getattr(fn, "__module__", None) or "").startswith("pullback."):
        return
    given = None
    for k, a in enumerate((*args, *kwargs.values())):
        kind = type(a)
        if kind is not list and kind is not tuple and kind is not dict:  # `self` is left to its method
            continue
        for key, v in (a.items() if kind is dict else enumerate(a)):  # one level: options are short tuples
            if isinstance(v, Traced):
                given = {id(p) for p in args if isinstance(p, Traced)} if given is None else given
                if id(v) in given:  # also passed as an argument of its own: the rule sees it
                    continue
                where = f"{f'argument {k}' if k < len(args) else f'keyword argument {list(kwargs)[k - len(args)]!r}'}[{key!r}]"
                raise TypeError(
                    f"{qualified_name(fn)} is a pullback.primitive, and {where} is a value being differentiated inside "
                    f"a {type(a).__name__}. A primitive's rule sees only the values it is given directly as positional "
                    "arguments, so this one's derivative would be lost. Pass it as a positional argument of its own "
                    "(a method's parameters included), or make the function a plain one, not a primitive.")


def _marked(y, args, view):
    """`y`, marked as a view of the first argument when the rule says so (`view=True`) and NumPy made one."""
    if view and isinstance(y, Traced) and args and isinstance(args[0], Traced):
        mark_view(y, args[0])
    return y


def rrule(fn, *, view=False):
    """Register the decorated function as the reverse rule of `fn`.

    `fn` is a NumPy ufunc, a NumPy function (anything that dispatches through
    `__array_function__`) or a `pb.primitive`. The rule takes the plain positional
    and keyword arguments of a call and returns `(y, back)`, where `back(dy)` returns one
    cotangent per positional argument: a value, `None`, a `pb.Thunk` or a
    `pb.InplaceableThunk`; or `back` is a `pb.PerOperand` of one function per positional
    argument, so that what only an untraced argument's gradient reads is not kept for the
    backward pass. Cotangents may keep the broadcast shape of `y`: pullback
    sums them down to each input's shape and casts them to its dtype. A cotangent missing for
    an argument being differentiated, or one smaller than its argument (a number for an
    array), is refused rather than read as zero or broadcast. Arguments a caller
    names (`np.sum(a=x, axis=0)`) reach the rule in their positions, as far as they
    continue the positional ones. With `view=True` the result is marked as sharing memory
    with the first argument, as NumPy's result does (reshape, transpose, ...), so that an
    in-place write into either is seen through the other, as in NumPy. A new reverse rule for
    an `fn` that had one also removes the forward rule that went with the old one: forward
    mode transposes the new rule until `frule` registers another.

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
        _refuse_composite(fn)
        previous = REVERSE_RULES.get(fn)
        if previous is not None and not getattr(previous, "only_forward", False):
            FORWARD_RULES.pop(fn, None)  # it went with the reverse rule being replaced
        _set_reverse_rule(fn, rule, view)
        return rule

    return register


def frule(fn):
    """Register the decorated function as the forward rule of `fn`.

    `fn` is anything `rrule` accepts. The rule takes `(primals, tangents, **kwargs)`, where
    `tangents[k]` is None when argument k carries no tangent, and returns `(y, y_dot)`
    (`y_dot` may be None, a zero tangent). An operation with only a reverse rule still
    works in forward mode, by transposing its `back`; one with only a forward rule raises
    a clear error in reverse mode.

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
        _refuse_composite(fn)
        if fn not in REVERSE_RULES:
            _set_reverse_rule(fn, _only_forward(fn), view=False)
        FORWARD_RULES[fn] = forward
        return forward

    return register


def composite(fn):
    """Register the decorated function, written with differentiable NumPy calls, to run in place
    of the NumPy function `fn` when a traced value reaches it.

    Both modes then go through the operations it is made of, so it needs no rule of its own.
    It replaces any rule registered for `fn`.

    >>> import numpy as np, pullback as pb
    >>> from pullback._extend import composite
    >>> @composite(np.fliplr)
    ... def fliplr(m):
    ...     return m[:, ::-1]
    >>> pb.gradient(lambda m: np.sum(np.fliplr(m) * np.array([1.0, 2.0])), np.ones((1, 2)))
    (array([[2., 1.]]),)
    """

    def register(impl):
        if isinstance(fn, np.ufunc):
            raise TypeError(f"{_name(fn)} is a ufunc: register its reverse rule with pullback.rrule({_name(fn)}).")
        _refuse_unreachable(fn)
        _forget(fn)
        FUNCTIONS[fn] = impl
        return impl

    return register


def nondifferentiable(*fns):
    """Make each of `fns` (NumPy functions or ufuncs) run on the plain values of its arguments
    when a traced value reaches it: its result carries no gradient.

    For functions whose result is piecewise constant or not a float (counts, indices,
    comparisons). It replaces any rule registered for them.

    >>> import numpy as np, pullback as pb
    >>> from pullback._extend import nondifferentiable
    >>> nondifferentiable(np.argwhere)
    >>> pb.gradient(lambda x: np.sum(x[np.argwhere(x)[:, 0]] ** 2), np.array([0.0, 2.0, 3.0]))
    (array([0., 4., 6.]),)
    """
    for fn in fns:
        if isinstance(fn, np.ufunc):
            _forget(fn)
            NONDIFF_UFUNCS.add(fn)
        else:
            _refuse_unreachable(fn)
            _forget(fn)
            FUNCTIONS[fn] = PlainCall(fn)


class RuleCall:
    """What runs when a traced value reaches a function with a reverse rule: `apply(rule, args, kwargs)`.

    Arguments the caller named (`np.sum(a=x, axis=0)`) move to their positions first: the engine
    tracks positional arguments only, and a rule binds its arguments by position. `names` are the
    function's positional parameters (None for a positional-only one). With `view` the result is
    marked as a view of the first argument, as NumPy's result is.
    """

    __slots__ = ("rule", "names", "view")

    def __init__(self, rule, names, view):
        self.rule, self.names, self.view = rule, names, view

    def __call__(self, *args, **kwargs):
        if kwargs and self.names:
            args, kwargs = to_positions(self.names, args, kwargs)
        return _marked(apply(self.rule, args, kwargs), args, self.view)


class PlainCall:
    """What runs when a traced value reaches a function without gradient: `fn` on the plain values."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*strip_all(args), **strip_all(kwargs))


def positional_names(fn):
    """The names of `fn`'s positional parameters, None for positional-only ones (() if unknown).

    >>> import numpy as np
    >>> positional_names(np.sum)
    ('a', 'axis', 'dtype', 'out', 'keepdims', 'initial', 'where')
    """
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name if p.kind is p.POSITIONAL_OR_KEYWORD else None for p in parameters
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def to_positions(names, args, kwargs):
    """Named arguments that continue `args` without a gap, moved to their positions.

    >>> to_positions(("a", "axis", "dtype", "out", "keepdims"), (), {"a": 1, "axis": 0, "keepdims": True})
    ((1, 0), {'keepdims': True})
    """
    args, kwargs = list(args), dict(kwargs)
    while len(args) < len(names) and names[len(args)] in kwargs:
        args.append(kwargs.pop(names[len(args)]))
    return tuple(args), kwargs


def _name(fn):
    return f"numpy.{fn.__name__}" if isinstance(fn, np.ufunc) else qualified_name(fn)


def _is_primitive(fn):
    return getattr(fn, "_pullback_primitive", False)


def _set_reverse_rule(fn, rule, view):
    if isinstance(fn, np.ufunc):
        UFUNC_RULES[fn] = rule
        NONDIFF_UFUNCS.discard(fn)
        FUNCTIONS[fn] = RuleCall(rule, (), False)  # the ufunc called as a function (the `@` operator is)
    elif _is_primitive(fn):
        if view:
            VIEWS.add(fn)
        else:
            VIEWS.discard(fn)
    else:
        _refuse_unreachable(fn)
        FUNCTIONS[fn] = RuleCall(rule, positional_names(fn), view)
    REVERSE_RULES[fn] = rule
    SERVED_BY[rule] = fn


def _forget(fn):
    """Remove every rule registered for `fn`."""
    for table in (REVERSE_RULES, FORWARD_RULES, UFUNC_RULES, FUNCTIONS):
        table.pop(fn, None)
    NONDIFF_UFUNCS.discard(fn)


def _refuse_composite(fn):
    impl = FUNCTIONS.get(fn)
    if impl is not None and fn not in REVERSE_RULES and not isinstance(impl, PlainCall):
        raise TypeError(
            f"{_name(fn)} is computed by composing other operations, whose rules give its "
            "derivatives in both modes; it takes no rule of its own."
        )


def _refuse_unreachable(fn):
    if hasattr(fn, "_implementation") or fn in STAND_INS:  # NumPy's __array_function__ dispatch reaches us
        return
    name = qualified_name(fn)
    if _is_primitive(fn):
        raise TypeError(f"{name} is a pullback.primitive: register its rules with pullback.rrule and pullback.frule.")
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

    rule.only_forward = True
    return rule
