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
import types

import numpy as np

from . import tree
from ._arrays import is_foreign_array
from ._backward import as_cotangents, missing_cotangents, name_of, own_pullback, within_count
from ._errors import missing_rule, refused
from ._inplace import call_into_out, mark_view, out_of
from ._registry import FORWARD_RULES, FUNCTIONS, NONDIFF_UFUNCS, REVERSE_RULES, SERVED_BY, UFUNC_RULES, qualified_name
from ._reverse import like_outputs, several_outputs
from ._standins import astype, dtype_of, getitem, index_update, is_stand_in, is_traced, power
from ._tangents import ELEMENTWISE_PULLBACKS, SPARE, PerOperand, Thunk, accum
from ._values import Traced, apply, strip_all

__all__ = ["primitive", "rrule", "frule", "composite", "nondifferentiable"]

# The engine's stand-ins for syntax (`x[i]`, `x[i] = v`, `x.astype(t)`, `x ** y`): keys like NumPy functions.
STAND_INS = (getitem, index_update, astype, power)


def primitive(fn):
    """Make `fn` opaque to tracing: tracked arguments go to the rule registered with `rrule`.

    The rule sees the values being differentiated that `fn` is given as positional arguments,
    and those inside an object given as one (`self` of a primitive method included): the rule
    gets the object holding plain values, and its pullback returns the object's cotangent as a
    `pb.Tangent` (None where there is none); in forward mode that reverse rule is transposed. One
    inside a list, tuple or dict argument (and not given on its own) would bypass the rule, so it
    is refused.

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
    own = (getattr(fn, "__module__", None) or "").startswith("pullback.")  # passes containers on purpose

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs and any(isinstance(v, Traced) or (not own and _holds_traced(v)) for v in kwargs.values()):
            args, kwargs = to_positions(names, args, kwargs)  # a traced argument given by name
            if any(isinstance(v, Traced) or (not own and _holds_traced(v)) for v in kwargs.values()):
                raise TypeError(f"{qualified_name(fn)}: a traced value was passed as a keyword-only argument, which is "
                                "not differentiated; pass it positionally.")
        holders = () if own else _holders(fn, args)
        rule = REVERSE_RULES.get(call)
        direct = any(isinstance(a, Traced) for a in args)
        # values reached only through an object: its reverse rule takes them; without one the body runs
        # (traced, as a plain function: no rule is bypassed)
        through_objects = holders and rule is not None and not getattr(rule, "only_forward", False)
        if direct or through_objects:
            if rule is None:
                raise refused(next((a for a in args if isinstance(a, Traced)), None), missing_rule(fn))
            if kwargs and not own:  # named arguments reach the rules in their positions (pullback's own rules
                args, kwargs = to_positions(names, args, kwargs)  # take their options by name)
            if holders:
                if getattr(rule, "only_forward", False):
                    raise TypeError(
                        f"{qualified_name(fn)} is a pullback.primitive with only a forward rule, and argument "
                        f"{holders[0][0]} is an object holding values being differentiated, which only its reverse "
                        "rule takes; register one with pullback.rrule, or pass those values as positional arguments.")
                return apply_through_objects(rule, args, kwargs, holders)
            return _marked(apply(rule, args, kwargs), args, call in VIEWS)
        for a in (*args, *kwargs.values()):
            record = getattr(a, "record_primitive", None)  # a pb.jit Symbol: recorded whole
            if record is not None:
                return record(fn, qualified_name(fn), args, kwargs)
        return fn(*args, **kwargs)

    call._pullback_primitive = True
    return call


# The primitives whose rule was registered with `view=True`.
VIEWS = set()

# Argument types that hold nothing to look inside, checked first.
_LEAF_TYPES = frozenset((float, int, bool, str, type(None), np.ndarray, np.float64, np.float32, np.int64))


def _traced_places(x):
    """`(path, value)` for every place inside `x` that holds a traced value (a tied one at each of its places)."""
    found = []

    def leaf(v, parts, path):
        if isinstance(v, Traced):
            found.append((path, v))

    tree.walk(x, leaf, lambda *a: None, repeat=lambda v, first, parts, path: leaf(v, parts, path),
              cycle=lambda *a: None)
    return found


def _holds_traced(x):
    """Whether `x`, not a traced value itself, holds one."""
    return type(x) not in _LEAF_TYPES and tree.kind_of(x) is not None and bool(_traced_places(x))


def _holders(fn, args):
    """`(position, places)` of the positional arguments that are objects holding traced values (see
    `apply_through_objects`). A traced value inside a list, tuple or dict argument, and not also given on
    its own, is refused: the rule would not see it, and its derivative would be silently lost."""
    found = []
    for k, a in enumerate(args):
        kind = type(a)
        if kind in _LEAF_TYPES or isinstance(a, Traced) or tree.kind_of(a) is None:
            continue
        places = _traced_places(a)
        if not places:
            continue
        if kind is list or kind is tuple or kind is dict:
            _refuse_traced_inside(fn, args, k, places)
        else:
            found.append((k, places))
    return found


def _refuse_traced_inside(fn, args, k, places):
    """Raise for a traced value at one of `places` inside container argument `k`, unless also given on its own."""
    given = {id(p) for p in args if isinstance(p, Traced)}
    for path, v in places:
        if id(v) not in given:  # also passed as an argument of its own: the rule sees it
            raise TypeError(
                f"{qualified_name(fn)} is a pullback.primitive, and argument {k}{path} is a value being differentiated "
                f"inside a {type(args[k]).__name__}. A primitive's rule sees only the values it is given directly as "
                "positional arguments (or inside an object given as one), so this one's derivative would be lost. "
                "Pass it as a positional argument of its own, or make the function a plain one, not a primitive.")


def apply_through_objects(rule, args, kwargs, holders):
    """Apply `rule` to `args`, of which those at the positions `holders` lists are objects holding traced values.

    The traced values are passed on as extra positional arguments, so the engine tracks them as any
    other; the rule gets each object rebuilt around their plain values, and the cotangent its pullback
    gives for the object (a `pb.Tangent`) is read at each place to give theirs.
    """
    n = len(args)
    extra, index, plans = [], {}, []
    for k, places in holders:
        for path, v in places:
            if id(v) not in index:
                index[id(v)] = n + len(extra)
                extra.append(v)
        plans.append((k, [(path.keys, index[id(v)]) for path, v in places]))
    objects = {k: args[k] for k, _ in holders}  # read when the rule runs, never kept for the pullback
    required = [k in objects or isinstance(a, Traced) for k, a in enumerate(args)]  # a cotangent is due

    def through_objects(*values, **kw):
        plain = {id(v): values[index[id(v)]] for v in extra}
        given = list(values[:n])
        for k, obj in objects.items():
            given[k] = tree.fmap(lambda v: plain.get(id(v), v), obj)
        y, back = rule(*given, **kw)
        return y, _objects_back(back, required, len(extra), plans, given)

    through_objects.__qualname__ = getattr(rule, "__qualname__", "rule")
    return apply(through_objects, (*args, *extra), kwargs)


def _objects_back(back, required, count, plans, given):
    """The pullback of `apply_through_objects`: a rule's, with each object's cotangent read at its
    traced places. Named as `back` is, and linear only where `back` is pullback's own."""
    kids = {k: dict.fromkeys(tree.children(given[k])) for k, _ in plans}  # what its cotangent must mirror
    name = name_of(back)

    def objects_back(dy):
        cotangents = list(as_cotangents(back, back(dy)))
        n = len(required)
        if len(cotangents) < n and any(required[len(cotangents):]):
            raise missing_cotangents(back, cotangents, [0 if r else -1 for r in required])
        cotangents += [None] * (n - len(cotangents) + count)
        for k, places in plans:
            part = cotangents[k]
            cotangents[k] = None
            if isinstance(part, Thunk):
                part = part.unthunk()
            tree.check_mirrors(None, kids[k], part, f"The cotangent a rule's pullback ({name}) "
                               f"gave for argument {k}, an object,")
            for keys, j in places:
                ct = part
                for key in keys:
                    ct = tree.child_of(ct, key)
                cotangents[j] = accum(cotangents[j], ct)
        return tuple(cotangents)

    return _named_like(objects_back, back, own_pullback(back))


def _marked(y, args, view):
    """`y`, marked as a view of the first argument when the rule says so (`view=True`) and NumPy made one."""
    if view and isinstance(y, Traced) and args and isinstance(args[0], Traced):
        mark_view(y, args[0])
    return y


def rrule(fn, *, view=False):
    """Register the decorated function as the reverse rule of `fn`.

    `fn` is a NumPy ufunc, a NumPy function (anything that dispatches through
    `__array_function__`) or a `pb.primitive`. The rule takes the plain positional
    and keyword arguments of a call and returns `(y, back)`, where `back(dy)` returns a tuple of one
    cotangent per positional argument: a value, `None`, a `pb.Thunk` or a
    `pb.InplaceableThunk` (a `pb.Tangent` for an object holding values being differentiated, as
    `self` of a primitive method); or `back` is a `pb.PerOperand` of one function per positional
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
    mode transposes the new rule until `frule` registers another. A pullback gets a cotangent
    of its own, which it may write into (`g[x < 0] = 0`), and a cotangent it returns past the
    last argument must be None, save one for a parameter the caller left at its default (a
    constant: dropped). A rule with several outputs (a tuple, namedtuple or list) gets their
    cotangent in that container, with zeros for outputs nothing used. The decorator returns the
    rule as registered, which holds its pullbacks to this (see `users_rule`).

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
        if not _is_own(rule) and not getattr(rule, "holds_pullbacks", False):
            rule = users_rule(rule)
        _set_reverse_rule(fn, rule, view)
        return rule

    return register


def _is_own(fn):
    """Whether pullback's own code defines `fn` (its rules keep the contract by construction)."""
    return (getattr(fn, "__module__", None) or "").startswith("pullback.")


def users_rule(rule):
    """A user's reverse rule `rule`, registered as it is but with each pullback it returns made a
    `users_pullback`, which holds it to the contract the sweep relies on. Pullback's own rules
    are registered unwrapped, so they pay nothing for it."""
    parameters = positional_count(rule)

    @functools.wraps(rule)
    def registered(*args, **kwargs):
        y, back = rule(*args, **kwargs)
        return y, users_pullback(back, len(args), parameters, output_zeros(y))

    registered.holds_pullbacks = True  # registered again (for another function), it is not wrapped twice
    return registered


def positional_count(fn):
    """How many positional parameters `fn` has (0 where its signature cannot be read)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 0
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def users_pullback(back, count, parameters=0, zeros=None):
    """`back`, the pullback a user's rule returned for a call of `count` positional arguments, as
    the sweep calls it: it gets a cotangent of its own, which it may write into (NumPy backprop code
    does: `g[x < 0] = 0`) without changing the cotangent of another branch or a read-only array;
    and a cotangent it returns past the last argument is dropped where it is for a parameter left
    at its default (the rule has `parameters` positional ones), refused past those, never shifted.
    For several outputs, the cotangent has the zeros `zeros` gives (see `output_zeros`) for the
    outputs nothing used.

    A `PerOperand`'s functions are checked here, and each gets its own cotangent."""
    if type(back) is PerOperand:
        within_count(back, back, count, parameters)
        return PerOperand([None if b is None else _given_own_cotangent(b, zeros) for b in back[:count]])
    if not callable(back):
        return back  # the sweep names the rule's mistake
    return _users_back(back, count, parameters, zeros)


def output_zeros(y):
    """For several outputs `y` (a tuple, namedtuple or list), a function filling a cotangent's None
    parts with zeros like the float outputs there; None for one output, whose cotangent never is None."""
    if not several_outputs(y):
        return None
    blanks = [_zero_like(part) for part in y]
    if all(b is None for b in blanks):
        return None

    def filled(g):
        if not several_outputs(g) or len(g) != len(blanks):
            return g  # the sweep names the mistake
        return like_outputs(g, [b() if part is None and b is not None else part for part, b in zip(g, blanks)])

    return filled


def _zero_like(part):
    """A function making a zero cotangent for the output `part`, None where it has none (an integer)."""
    if part is None or several_outputs(part) or isinstance(part, (str, bytes, dict)):
        return None
    plain = strip_all(part)  # a value of an outer level: its zero is a constant
    if type(plain) is float:
        return lambda: 0.0
    try:
        dtype = np.dtype(dtype_of(plain))
    except TypeError:
        return None
    if dtype.kind not in "fc":
        return None
    shape, array = np.shape(plain), isinstance(plain, np.ndarray)  # (not `plain`: kept, it would stay alive)
    return lambda: np.zeros(shape, dtype) if shape or array else dtype.type(0)


def _users_back(back, count, parameters, zeros):
    """`back` given a cotangent of its own and held to `count` cotangents (see `users_pullback`)."""

    def users_back(g):
        if SPARE[0] is g:  # the sweep holds `g` alone and hands it over (see `SPARE`)
            SPARE[0] = None  # before the user's code runs, which may run a sweep of its own
        else:
            g = writable_copy(g)
        if zeros is not None:
            g = zeros(g)
        cotangents = back(g)
        if (type(cotangents) is tuple or type(cotangents) is list) and len(cotangents) > count:
            return within_count(back, cotangents, count, parameters)
        return cotangents

    return _named_like(users_back, back, own=False)


def _given_own_cotangent(back, zeros):
    """`back`, one function of a user's `PerOperand`, given a cotangent of its own (see `users_pullback`)."""

    def own_cotangent(g):
        g = writable_copy(g)
        return back(g if zeros is None else zeros(g))

    return _named_like(own_cotangent, back, own=False)


def _named_like(wrapper, back, own):
    """`wrapper`, named as the user's `back` is, so that messages name the user's function; and in
    pullback's modules (which marks pullback's own pullbacks, linear: the sweep may carry a factor past
    them) only if `own` (a user's `PerOperand` reads as one of pullback's modules: its class's)."""
    module = getattr(back, "__module__", None)
    wrapper.__module__ = module if own or not (module or "").startswith("pullback.") else None
    wrapper.__qualname__ = name_of(back)
    return wrapper


# A users_back may be handed the sweep's own large cotangent: it takes it before any user code runs.
ELEMENTWISE_PULLBACKS.update(c for c in _users_back.__code__.co_consts if isinstance(c, types.CodeType))


def writable_copy(g):
    """A copy of cotangent `g` that may be written into without changing anything else: an array
    (NumPy's, another library's, a traced one) is copied, a tuple (list, namedtuple) of them part by part; a number,
    which no code can write into, is given as it is."""
    kind = type(g)
    if kind is tuple or kind is list:
        return kind(writable_copy(part) for part in g)
    if isinstance(g, tuple) and hasattr(g, "_fields"):  # the cotangent of a namedtuple of outputs
        return kind._make(writable_copy(part) for part in g)
    if isinstance(g, np.ndarray) or is_traced(g) or is_stand_in(g) or is_foreign_array(g):
        return g.copy()  # a 0-d one too: `g *= 2` writes into it
    return g


def frule(fn):
    """Register the decorated function as the forward rule of `fn`.

    `fn` is anything `rrule` accepts. The rule takes `(primals, tangents, **kwargs)`, where
    `tangents[k]` is None when argument k carries no tangent, and returns `(y, y_dot)`:
    `y_dot` is an array or number in `y`'s shape (or one that broadcasts to it), a tuple of
    one per output for several outputs, or None, a zero tangent; anything else is refused,
    naming the rule. Arguments a caller names reach it in their positions,
    as they reach the reverse rule. An operation with only a reverse rule still
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


class PositionedCall(RuleCall):
    """`RuleCall` for a function differentiable in a later argument (np.sum's `initial`): where the caller
    names it and it is traced (np.sum(x, initial=i); a ufunc's reduce hands every option over by name),
    it moves to its position, the parameters skipped before it taking the rule's defaults, as the
    engine tracks positional arguments only."""

    __slots__ = ("later", "defaults")

    def __init__(self, call, later, defaults):
        super().__init__(call.rule, call.names, call.view)
        self.later, self.defaults = later, defaults

    def __call__(self, *args, **kwargs):
        if kwargs:
            traced = [self.names.index(name) for name in self.later if isinstance(kwargs.get(name), Traced)]
            if traced:
                args, kwargs = list(args), dict(kwargs)
                for name in self.names[len(args):max(traced) + 1]:
                    args.append(kwargs.pop(name) if name in kwargs else self.defaults[name])
        return RuleCall.__call__(self, *args, **kwargs)


def serve_named_later_arguments(fn, rule, differentiable):
    """Let the caller name the differentiable arguments of `fn` (names in `differentiable`) that come
    after its second parameter, where every parameter between has a default in `rule` (a `PositionedCall`)."""
    call = FUNCTIONS.get(fn)
    if type(call) is not RuleCall or not call.names:
        return
    defaults = {name: p.default for name, p in inspect.signature(rule).parameters.items() if p.default is not p.empty}
    later = tuple(name for name in differentiable if name in call.names[2:]  # (a second one needs none)
                  and all(k in defaults for k in call.names[1:call.names.index(name)]))
    if later:
        FUNCTIONS[fn] = PositionedCall(call, later, defaults)


class PlainCall:
    """What runs when a traced value reaches a function without gradient: `fn` on the plain values.
    Where `fn` has an `out` parameter and is given a traced one (np.round(y, out=y)), NumPy's value
    is written into it as a recorded write: NumPy writing into its plain memory would change values
    the recording keeps, unseen."""

    __slots__ = ("fn", "out_at")

    def __init__(self, fn):
        self.fn = fn
        names = positional_names(fn)
        self.out_at = names.index("out") if "out" in names else None

    def __call__(self, *args, **kwargs):
        if self.out_at is not None and is_traced(out_of(self.out_at, args, kwargs)):
            return call_into_out(self.fn, qualified_name(self.fn), self.out_at, args, kwargs)
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
