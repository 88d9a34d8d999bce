"""The reverse sweep: walk a tape once, backwards, and accumulate cotangents per node."""

import numpy as np

from ._arrays import is_foreign_array_type
from ._registry import FUNCTIONS
from ._reverse import collector_paused
from ._standins import astype, dtype_of, is_number_stand_in, is_stand_in, is_traced, shape_of
from ._tangents import (
    ARRAY_TYPES,
    CARRIED,
    ELEMENTWISE_PULLBACKS,
    FACTOR_RANGE,
    MIN_SPARE_SIZE,
    SPARE,
    InplaceableThunk,
    PerOperand,
    Scaled,
    Tangent,
    Thunk,
    accum,
    is_spare,
)
from ._values import Traced, stop_gradient


def backward(tape, seeds):
    """Cotangents of every node given `seeds` ({node id: cotangent}); a list indexed by id.

    Iterative, so the tape length is not limited by Python's recursion depth. A node
    nobody sends a cotangent to is skipped, so the thunks meant for it never run.
    """
    with collector_paused():
        return _sweep(tape, seeds)


def _sweep(tape, seeds):
    nodes = tape.nodes
    grads = [None] * len(nodes)
    for i, seed in seeds.items():
        grads[i] = accum(grads[i], seed)
    owned = set()  # ids whose cotangent is a buffer this sweep allocated, safe to add into
    in_place = computes_plain_arrays(tape, seeds)  # whether a rule's InplaceableThunk may add into a NumPy buffer
    factors = {}  # id -> a real factor still to multiply into its cotangent (see `Scaled`)
    for i in range(len(nodes) - 1, -1, -1):
        g = grads[i]
        if g is None:
            continue
        like, back, in_ids = nodes[i]
        if back is None:  # an input: its cotangent is the result
            continue
        grads[i] = None
        if not (type(g) is np.ndarray and type(like) is tuple and g.shape == like[0]
                and (g.dtype is like[1] or g.dtype == like[1])):
            g = fit(g, like)
            if g is None:  # a thunk that turned out to be zero
                factors.pop(i, None)
                continue
        factor = 1.0
        if factors:
            factor = factors.pop(i, 1.0)
            if factor != 1.0 and not _carries(g, back, in_ids, nodes):
                g, factor = g * factor, 1.0
        unary = len(in_ids) == 1
        if (unary and type(g) is np.ndarray and g.size >= MIN_SPARE_SIZE
                and getattr(back, "__code__", None) in ELEMENTWISE_PULLBACKS):
            cotangents = ct = current = None  # the last node's references, one of which may be to `g`
            SPARE[0] = g if is_spare(g) else None
            try:
                cotangents = back(g)
            finally:
                SPARE[0] = None
        else:
            cotangents = back(g)
        if type(cotangents) is not tuple:
            cotangents = as_cotangents(back, cotangents)
        if unary:  # the common case, without the loop
            j = in_ids[0]
            try:
                ct = cotangents[0]
            except IndexError:
                raise missing_cotangents(back, cotangents, in_ids) from None
            if j >= 0 and ct is not None:
                if factor == 1.0 and type(ct) is not Scaled and j not in factors:
                    current = grads[j]
                    grads[j] = ct if current is None else _add(current, ct, nodes[j][0], j, owned, in_place)
                else:
                    _send(grads, nodes, owned, factors, j, ct, factor, in_place)
            continue
        if len(cotangents) < len(in_ids) and any(j >= 0 for j in in_ids[len(cotangents):]):
            raise missing_cotangents(back, cotangents, in_ids)
        for j, ct in zip(in_ids, cotangents):
            if j < 0 or ct is None:
                continue
            if factor == 1.0 and type(ct) is not Scaled and j not in factors:
                current = grads[j]
                grads[j] = ct if current is None else _add(current, ct, nodes[j][0], j, owned, in_place)
            else:
                _send(grads, nodes, owned, factors, j, ct, factor, in_place)
    for i, factor in factors.items():  # inputs whose cotangent has a factor pending
        grads[i] = Scaled(grads[i], factor)
    return grads


def as_cotangents(back, cotangents):
    """What a pullback returned, as the tuple of cotangents it must be (a list is taken as one);
    anything else is refused: read as a sequence, an array would give its rows as cotangents."""
    if isinstance(cotangents, (tuple, list)):
        return tuple(cotangents)
    raise TypeError(
        f"A reverse rule's pullback ({name_of(back)}) returned {_described(cotangents)}; a pullback returns a tuple of one "
        "cotangent per positional argument of the call, None where there is none: `lambda dy: (dx,)` for one argument.")


def _described(x):
    if x is None:
        return "None"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"an array of shape {x.shape}"
    return f"a {type(x).__name__}"


def missing_cotangents(back, cotangents, in_ids):
    """The error for a pullback that gave no cotangent for an input being differentiated: read as
    zero, its gradient would be silently missing."""
    missing = [k for k, j in enumerate(in_ids) if j >= 0 and k >= len(cotangents)]
    return ValueError(
        f"A reverse rule's pullback ({name_of(back)}) returned {len(cotangents)} cotangent(s) for {len(in_ids)} argument(s), "
        f"none for argument {missing[0]}, which is being differentiated. A pullback returns one cotangent per "
        "positional argument of the call, None where there is none.")


def within_count(back, cotangents, count, parameters=None):
    """`cotangents` (a tuple or list a pullback returned) cut to the first `count`, one per argument
    of the call. Past them, up to `parameters` (the rule's positional parameters, some left at their
    defaults by the caller) cotangents are dropped: a default is a constant. One past those that is
    not None is refused: a rule whose cotangents are off by one (as if for a `self`) would give each
    argument its neighbour's gradient."""
    if len(cotangents) <= count:
        return cotangents
    first = max(count, parameters or 0)
    extra = next((k for k in range(first, len(cotangents)) if cotangents[k] is not None), None)
    if extra is not None:
        raise ValueError(
            f"A reverse rule's pullback ({name_of(back)}) returned {len(cotangents)} cotangents for {count} "
            f"argument(s), and cotangent {extra}, past the last parameter, is not None. A pullback returns one "
            "cotangent per positional argument of the call, in order (None where there is none), and no more.")
    return tuple(cotangents[:count])


def name_of(back):
    """How messages name a pullback: its function's qualified name (a `PerOperand`'s, its functions')."""
    if type(back) is PerOperand:
        return "PerOperand of " + ", ".join(name_of(b) for b in back if b is not None)
    return getattr(back, "__qualname__", type(back).__name__)


def _carries(g, back, in_ids, nodes):
    """Whether a factor pending on `g` may be passed on to the cotangents computed from it: `back`
    is linear, and `g` and the inputs it goes to are arrays (of `ARRAY_TYPES`) of a dtype in `CARRIED`."""
    if type(g) not in ARRAY_TYPES or g.dtype not in CARRIED or not own_pullback(back):
        return False
    return all(j < 0 or (type(nodes[j][0]) is tuple and nodes[j][0][1] in CARRIED) for j in in_ids)


def own_pullback(back):
    """Whether pullback's own rules made `back`: their pullbacks are linear; a user's rule may not
    be (JAX's `clip_gradient` clips its cotangent), so it gets the cotangent multiplied out. A
    wrapper of a user's pullback is in no module of pullback's (see `_extend._named_like`)."""
    if type(back) is PerOperand:
        return all(b is None or own_pullback(b) for b in back)
    return (getattr(back, "__module__", None) or "").startswith("pullback.")


def _send(grads, nodes, owned, factors, j, ct, factor, in_place):
    """Add cotangent `ct`, with `factor` pending on it, into node `j`'s.

    The first cotangent sent to `j` sets the factor pending on `j`; a later one with the same
    factor is added as it is; with another, both factors are multiplied out first. A factor out
    of `FACTOR_RANGE`, or sent to a node whose dtype is not in `CARRIED`, is multiplied out."""
    if type(ct) is Scaled:
        ct, factor = ct.args[0], ct.args[1] * factor
    like = nodes[j][0]
    if factor != 1.0 and not (FACTOR_RANGE[0] <= abs(factor) <= FACTOR_RANGE[1]
                              and type(like) is tuple and like[1] in CARRIED):
        ct, factor = Scaled(ct, factor), 1.0
    current = grads[j]
    if current is None:
        grads[j] = ct
        if factor != 1.0:
            factors[j] = factor
        return
    pending = factors.get(j, 1.0)
    if pending != factor:
        if pending != 1.0:
            current = Scaled(current, factors.pop(j))
        if factor != 1.0:
            ct = Scaled(ct, factor)
    grads[j] = _add(current, ct, like, j, owned, in_place)


def _add(current, ct, like, j, owned, in_place):
    """`current + ct` for node `j`, in place when `current` is a buffer this sweep owns. An
    `InplaceableThunk` adds itself into a NumPy buffer only where the sweep computes plain NumPy arrays
    (`in_place`); otherwise its cotangent may be traced, which a NumPy buffer cannot hold, and is added."""
    if j in owned:
        if in_place and isinstance(ct, InplaceableThunk) and type(current) is np.ndarray:
            total = _add_into(ct, current)
            if total is not None:
                return total
        ct = fit(ct, like)
        if ct is None:
            return current
        if type(current) is np.ndarray and (type(ct) is np.ndarray or isinstance(ct, _PLAIN_NUMBERS)):
            # (a cotangent pb.jit traces, or another library's array, is added by `accum`: not into NumPy memory)
            return np.add(current, ct, out=current)
        return accum(current, ct)
    a = fit(current, like)
    if a is None:
        return ct
    inplaceable = in_place and type(a) is np.ndarray and isinstance(ct, InplaceableThunk)
    total = _add_into(ct, a.copy()) if inplaceable else None
    if total is None:
        b = fit(ct, like)
        if b is None:
            return a
        total = accum(a, b)  # elementwise for the tuple cotangent of a several-output operation
    if type(total) is np.ndarray:
        owned.add(j)
    return total


def computes_plain_arrays(tape, seeds):
    """Whether a sweep of `tape` from `seeds` computes plain NumPy values only: nothing recorded is
    traced by another level or stands in for a value under pb.jit, and no seed is."""
    return not tape.holds_traced and not any(is_traced(s) or is_stand_in(s) for s in seeds.values())


_PLAIN_NUMBERS = (np.generic, float, int, complex)


def _add_into(ct, buffer):
    """`ct.add_into(buffer)`, or None where the cotangent it adds keeps the broadcast shape of the
    rule's output (which rules may return) and so does not fit the argument-shaped buffer."""
    try:
        return ct.add_into(buffer)
    except ValueError:
        if np.shape(ct()) == buffer.shape:  # another error: the rule's own
            raise
        return None


def fit(g, like):
    """Make cotangent `g` match its primal `like`: evaluate thunks, undo broadcasting, restore dtype.

    This is the one place broadcasting is undone, so rules may return cotangents
    shaped like their (broadcast) output. It is also the one place a complex cotangent
    meets a real primal (a real value used in complex arithmetic): a cotangent `c` stands
    for `dz -> Re(c * dz)`, so for a real `dz` only its real part counts, and that is kept.
    """
    if isinstance(g, Thunk):
        g = g.unthunk()
    if type(like) is tuple:  # an array's (shape, dtype): how the tape remembers it without keeping it
        shape, dtype = like
        if type(g) is np.ndarray and g.dtype is dtype:  # the common case, without the checks below
            return g if g.shape == shape else unbroadcast(g, shape)
        real = dtype.kind != "c"
    elif like is None or g is None:  # the group node of a several-output operation
        return g
    else:
        shape = _shape(like)
        kind = like.__class__ if is_number_stand_in(like) else type(like)  # pb.jit's stand-in: the number's type
        weak = kind is float or kind is complex  # a Python number is weak
        dtype = None if weak else dtype_of(like)
        real = kind is float if weak else dtype.kind != "c"
    if type(g) in ARRAY_TYPES:
        if g.shape != shape:
            g = unbroadcast(g, shape)
        if real and g.dtype.kind == "c":
            g = g.real
        if dtype is not None and g.dtype != dtype:
            g = g.astype(dtype)
        return g
    if isinstance(g, (tuple, list, dict, Tangent)):
        raise TypeError(
            f"A reverse rule's pullback gave {_described(g)} as the cotangent of {_described_like(like)}; the cotangent of "
            "an array or number is an array or number like it (np.asarray(...) of a list); check the rules registered "
            "with pb.rrule.")
    if _shape(g) != shape:  # (always so where a length is NaN: a Dask array's, unknown until computed)
        g = unbroadcast(g, shape)
    if real and dtype_of(g).kind == "c":
        g = FUNCTIONS[np.real](g) if isinstance(g, Traced) else np.real(g)
    if dtype is not None and dtype_of(g) != dtype:
        if isinstance(g, Traced):
            g = FUNCTIONS[astype](g, dtype)
        else:  # an array of another library (Dask, CuPy) converts itself; np.asarray would compute or refuse
            g = g.astype(dtype) if is_foreign_array_type(type(g)) else np.asarray(g, dtype=dtype)
    return g


def _shape(x):
    """The shape of a value (a scalar's is ()), traced or not, without reading a pb.jit number's value."""
    return shape_of(stop_gradient(x))


def _described_like(like):
    if type(like) is tuple:
        return f"an array of shape {like[0]} and dtype {like[1]}"
    return f"a {type(like).__name__}"


def unbroadcast(g, shape):
    """Sum `g` over the axes that broadcasting added or stretched, to get `shape`.

    >>> import numpy as np
    >>> unbroadcast(np.ones((2, 3)), (1, 3))
    array([[2., 2., 2.]])
    """
    g_shape = np.shape(g)
    extra = len(g_shape) - len(shape)
    # (a NaN length, unknown until a Dask array is computed, matches any length but 1)
    if extra < 0 or any(n != 1 and m != n and m == m and n == n for m, n in zip(g_shape[extra:], shape)):
        # Broadcasting `g` up would make one number stand for many gradients: a rule's mistake, refused.
        raise ValueError(
            f"A cotangent of shape {g_shape} was given for a value of shape {shape}. A reverse rule returns each "
            "cotangent in its argument's shape, or in a shape broadcasting made from it, which pullback sums down; "
            "check the rules registered with pb.rrule.")
    axes = tuple(range(extra)) + tuple(extra + k for k, n in enumerate(shape) if n == 1 and g_shape[extra + k] != 1)
    if axes:
        g = np.sum(g, axis=axes, keepdims=True)
    if extra:  # (by indexing where a length is unknown: Dask's reshape needs them all)
        g = np.reshape(g, shape) if all(n == n for n in shape) else g[(0,) * extra]
    return g
