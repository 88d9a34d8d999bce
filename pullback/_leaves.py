"""Wrap the float leaves of the arguments for differentiation, and read results back into their shape."""

import numpy as np

from . import tree
from ._backward import fit
from ._trace import Traced


def wrap_leaves(x, make_leaf, path, companion=None):
    """A copy of `x` whose float leaves are replaced by `make_leaf(leaf, path, companion_part)`.

    `make_leaf` returns `(new_leaf, key)`. Returns the copy and a plan to read results back:
    None (nothing differentiable), `("leaf", key, primal)` or `("node", x, {child: plan})`.
    Only trainable fields are wrapped. Each place gets its own leaf, so a tied array gets one
    partial result per place. A reference back to an object being walked (a cycle) shares
    that object's copy and reads back as None.
    """
    return _wrap(x, make_leaf, {}, path, companion)


def _wrap(x, make_leaf, ancestors, path, companion):
    if is_float(x):
        new, key = make_leaf(x, path, companion)
        return new, ("leaf", key, x)
    if is_complex(x):
        raise TypeError(
            f"{path} is complex; pullback differentiates real-valued code only. "
            "Pass the real and imaginary parts as separate float arrays."
        )
    kind = tree.kind_of(x)
    if kind is None:
        return x, None
    key = id(x)
    if key in ancestors:
        return ancestors[key], None
    shell = kind.shell(x) if kind.shell is not None else None
    ancestors[key] = shell if shell is not None else x
    names = tree.trainable_names(x)
    kids = kind.children(x)
    new, plans = {}, {}
    for k, v in kids.items():
        if names is not None and k not in names:
            new[k], plans[k] = v, None
        else:
            where = f"{path}.{k}" if kind is tree._OBJECT else f"{path}[{k!r}]"
            new[k], plans[k] = _wrap(v, make_leaf, ancestors, where, tree._child(companion, k))
    del ancestors[key]
    if all(p is None for p in plans.values()) and all(new[k] is v for k, v in kids.items()):
        return x, None
    if shell is not None:
        kind.fill(shell, new)
        return shell, ("node", x, plans)
    return kind.rebuild(x, new), ("node", x, plans)


def is_float(x):
    if type(x) is float:
        return True
    if isinstance(x, (np.ndarray, np.generic, Traced)):
        return x.dtype.kind == "f"
    return False


def is_complex(x):
    if type(x) is complex:
        return True
    return isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind == "c"


def plan_leaves(plan, found=None):
    """The `("leaf", key, primal)` entries of a plan, in walk order."""
    found = [] if found is None else found
    if plan is None:
        return found
    if plan[0] == "leaf":
        found.append(plan)
    else:
        for p in plan[2].values():
            plan_leaves(p, found)
    return found


def read_all(plans, results, convert=None, callers=()):
    """One structured result per plan; `results[key]` holds each leaf's raw result.

    `callers` are arrays the caller passed in (cotangent seeds): no result shares their memory.
    """
    returned = {id(memory_of(a)) for a in callers if isinstance(a, np.ndarray)}
    convert = convert or _leaf_gradient
    return tuple(read(p, results, returned, convert) for p in plans)


def read(plan, results, returned, convert):
    """Arrays, Tangents and containers shaped like the argument; `None` where all parts are None."""
    if plan is None or results is None:
        return None
    if plan[0] == "leaf":
        return convert(results[plan[1]], plan[2], returned)
    _, x, plans = plan
    kids = {k: read(p, results, returned, convert) for k, p in plans.items()}
    if all(v is None for v in kids.values()):
        return None
    if type(x) in (tuple, list):
        return type(x)(kids.values())
    if isinstance(x, tuple):
        return type(x)(*kids.values())
    if isinstance(x, dict):
        return dict(kids)
    return tree.Tangent._make(type(x), kids)


def _leaf_gradient(g, primal, returned):
    if g is None:
        return None
    g = fit(g, primal)
    if isinstance(g, Traced):  # a nested call: this result is itself being differentiated
        return g
    if type(primal) is float:
        return float(g)
    if isinstance(primal, np.generic):
        return primal.dtype.type(g)
    return fresh_array(g, primal, returned)


def fresh_array(g, primal, returned):
    """`g` as an array the caller may own: its memory is shared with no argument and no other result.

    `returned` holds the ids of the memory (base arrays) already handed out, or owned by the caller.
    """
    g = np.asarray(g)
    root = memory_of(g)
    if not g.flags.writeable or id(root) in returned or (isinstance(primal, np.ndarray) and root is memory_of(primal)):
        g = g.copy()
        root = g
    returned.add(id(root))
    return g


def memory_of(a):
    """The array that owns `a`'s memory (`a` itself unless it is a view)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a
