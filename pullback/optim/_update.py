"""`update` and `update_`: one optimisation step over a whole model.

Three passes: pair each `Leaf` of the state with its array in the model and the sum of
its gradients over all the places it appears (and refuse gradient entries that name
nothing in the model); compute every step; then write the
results (into new arrays for `update`, into the old ones for `update_`). Nothing is
written until every step has been computed, so an error leaves everything as it was.
"""

import numpy as np

from .. import tree
from .._tangents import Tangent, Thunk, unthunk
from ._state import Leaf, copy_value, map_leaves
from ._walk import describe, is_param, join, model_children, node_children

__all__ = ["update", "update_"]


def update(state, model, grad):
    """One optimisation step: returns `(new_state, new_model)` and changes nothing it was given.

    `grad` mirrors `model` as `pb.gradient` returns it (`Tangent`s, tuples, dicts, arrays;
    `None` anywhere means "no gradient here": that part is left as it is). An entry that names
    no part of the model (a misspelt key, a field the object lacks, an extra list element) is
    an error, never silently ignored. A tied array gets
    the sum of its per-place gradients, one step, and the new array at every place.
    The returned model and state share no parameter or state arrays with the arguments,
    so changing either later (for instance with `update_`) cannot reach the other.

    >>> import numpy as np
    >>> from pullback import optim
    >>> model = (np.array([1.0, 2.0]),)
    >>> state = optim.setup(optim.Descent(0.1), model)
    >>> state, new = optim.update(state, model, (np.array([25.0, 33.0]),))
    >>> new, model
    ((array([-1.5, -1.3]),), (array([1., 2.]),))
    """
    steps = _steps(state, model, grad)
    replacements = {}
    renewed = {}
    for leaf, x, new_rule_state, delta in steps:
        if delta is None:
            replacements[id(x)] = x.copy()
            renewed[id(leaf)] = Leaf(leaf.rule, copy_value(leaf.state), leaf.frozen)
        else:
            replacements[id(x)] = _subtract(x, delta)
            renewed[id(leaf)] = Leaf(leaf.rule, _unshared(new_rule_state, leaf.state), leaf.frozen)
    new_model = tree.fmap(lambda a: replacements.get(id(a), a), model) if replacements else model
    return map_leaves(state, lambda leaf: renewed[id(leaf)]), new_model


def update_(state, model, grad):
    """Like `update`, but writes the new values into the model's arrays and the state, in place.

    Returns `(state, model)`: the same objects it was given.

    >>> import numpy as np
    >>> from pullback import optim
    >>> model = [np.array([1.0, 2.0])]
    >>> state = optim.setup(optim.Momentum(0.1, 0.9), model)
    >>> w = model[0]
    >>> optim.update_(state, model, [np.array([25.0, 33.0])])[1][0] is w, w
    (True, array([-1.5, -1.3]))
    """
    steps = _steps(state, model, grad, in_place=True)
    for leaf, x, new_rule_state, delta in steps:
        if delta is not None:
            np.subtract(x, delta, out=x, casting="unsafe")
            leaf.state = _write_into(leaf.state, new_rule_state)
    return state, model


# --- pass 1 and 2: pair, sum, compute ----------------------------------------------
def _steps(state, model, grad, in_place=False):
    """`[(leaf, array, new_rule_state, delta)]`, one per distinct leaf; delta None means "no step"."""
    entries = _pair(state, model, grad)
    _check_grad_keys(grad, model)
    steps = []
    for leaf, x, g, paths in entries.values():
        if leaf.frozen or g is None:
            steps.append((leaf, x, leaf.state, None))
            continue
        if in_place and not x.flags.writeable:
            raise ValueError(f"update_ cannot write into {paths[0]}: the array is read-only. Use update, which returns new arrays.")
        dx = g.astype(x.dtype, copy=False) if isinstance(g, np.ndarray) else np.asarray(g, dtype=x.dtype)
        new_rule_state, delta = leaf.rule.apply(leaf.state, x, dx)
        if np.shape(delta) != x.shape:
            raise ValueError(
                f"{type(leaf.rule).__name__}.apply returned a step of shape {np.shape(delta)} for {paths[0]}, "
                f"which has shape {x.shape}"
            )
        steps.append((leaf, x, new_rule_state, delta))
    return steps


def _pair(state, model, grad):
    """Walk state, model and gradient together: `{id(leaf): [leaf, array, summed_grad, paths]}`."""
    entries = {}
    owners = {}  # id(array) -> leaf

    def walk(s, x, g, path):
        if s is None:
            return
        if isinstance(s, Leaf):
            if not is_param(x):
                raise ValueError(
                    f"The state does not match the model: it has an optimiser entry at {path}, "
                    f"but the model holds {describe(x)} there. Make the state with setup(rule, model)."
                )
            g = _leaf_gradient(g, x, path)
            entry = entries.get(id(s))
            if entry is None:
                other = owners.get(id(x))
                if other is not None:
                    raise ValueError(
                        f"{entries[id(other)][3][0]} and {path} are the same array in the model, but the state has "
                        "separate entries for them (it was set up before they were tied?). "
                        "Make the state with setup(rule, model)."
                    )
                owners[id(x)] = s
                entries[id(s)] = [s, x, g, [path]]
                return
            if entry[1] is not x:
                raise ValueError(
                    f"The state has one entry for {entry[3][0]} and {path} (they were the same array at setup), "
                    "but the model now holds different arrays there. Make the state with setup(rule, model)."
                )
            if g is not None:
                entry[2] = g if entry[2] is None else entry[2] + g
            entry[3].append(path)
            return
        _check_node(s, x, path)
        kids, _ = model_children(x)
        for k, sk in node_children(s).items():
            if sk is None:
                continue
            if k not in kids:
                raise ValueError(
                    f"The state does not match the model: it has an entry {join(path, x, k)}, which the model lacks. "
                    "Make the state with setup(rule, model)."
                )
            walk(sk, kids[k], _grad_child(g, k, x, path), join(path, x, k))

    walk(state, model, grad, "model")
    return entries


def _check_node(s, x, path):
    if isinstance(s, Tangent):
        if s.primal_type is not type(x):
            raise ValueError(
                f"The state does not match the model at {path}: the state is for a {s.primal_type.__name__}, "
                f"the model holds {describe(x)}. Make the state with setup(rule, model)."
            )
    elif not node_children(s):
        raise TypeError(f"Not an optimiser state at {path}: {describe(s)}. Make one with setup(rule, model).")


def _grad_child(g, key, x, path):
    """The part of gradient `g` (for model node `x`) at child `key`."""
    if g is None:
        return None
    if isinstance(g, Thunk):
        g = unthunk(g)
    if isinstance(g, Tangent):
        if g.primal_type is not type(x):
            raise ValueError(
                f"The gradient at {path} is for a {g.primal_type.__name__}, but the model holds {describe(x)} there."
            )
        return g._entries.get(key)
    if isinstance(g, (np.ndarray, np.generic, float, int)):
        raise ValueError(f"The gradient at {path} is {describe(g)}, but the model holds {describe(x)} there.")
    if isinstance(g, dict):
        return g.get(key)
    if isinstance(g, (tuple, list)) and isinstance(key, int) and not hasattr(type(g), "_fields"):
        if len(g) != len(x):
            raise ValueError(f"The gradient at {path} has {len(g)} entries, but the model has {len(x)} there.")
        return g[key]
    kids = node_children(g) or model_children(g)[0]
    if key not in kids:
        hint = ""
        if isinstance(g, tuple) and not isinstance(x, tuple):
            hint = " (pb.gradient returns one gradient per argument: pass the model's, e.g. grads[0])"
        raise ValueError(
            f"The gradient at {path} is {describe(g)}, which has no entry {key!r} for the model's {describe(x)}{hint}."
        )
    return kids[key]


def _check_grad_keys(grad, model):
    """Refuse a gradient entry that names no part of the model (a misspelt key, a field the object
    lacks, an extra list element), anywhere in the gradient, trained or not: it would be ignored."""
    seen = set()

    def walk(g, x, path):
        if g is None or (id(g), id(x)) in seen:
            return
        seen.add((id(g), id(x)))
        kids = model_children(x)[0]
        if isinstance(g, Thunk):
            if not kids:
                return  # a lazily computed leaf gradient: evaluated (and checked) only where it is used
            g = unthunk(g)
        if isinstance(g, (np.ndarray, np.generic, float, int, complex)):
            return
        if isinstance(g, Tangent) and g.primal_type is not type(x):
            raise ValueError(
                f"The gradient at {path} is for a {g.primal_type.__name__}, but the model holds {describe(x)} there."
            )
        gkids = node_children(g) or model_children(g)[0]
        unknown = [k for k in gkids if k not in kids]
        if unknown:
            places = ", ".join(join(path, x, k) for k in unknown[:10]) + (", ..." if len(unknown) > 10 else "")
            hint = ""
            if isinstance(g, tuple) and not isinstance(x, tuple):
                hint = " (pb.gradient returns one gradient per argument: pass the model's, e.g. grads[0])"
            fix = "Remove the extra entries" if _is_sequence(x) else "Fix the name or remove the entry"
            raise ValueError(
                f"The gradient has {'an entry' if len(unknown) == 1 else 'entries'} {places}, which the model lacks: "
                f"{_what_is_there(x, kids, path)}. {fix}, so that every gradient entry names a part of the "
                f"model{hint}."
            )
        for k, gk in gkids.items():
            walk(gk, kids[k], join(path, x, k))

    walk(grad, model, "model")


def _what_is_there(x, kids, path):
    """`the dict at model has keys 'a', 'b'`: the model's keys at `path`, for error messages."""
    if not kids:
        return f"it holds {describe(x)} at {path}, which has no entries"
    shown = list(kids)[:20]
    more = ", ..." if len(kids) > 20 else ""
    where = f"the {type(x).__name__} at {path}"
    if _is_sequence(x):
        return f"{where} has {len(kids)} entries (indices 0 to {len(kids) - 1})" if len(kids) > 1 else f"{where} has 1 entry (index 0)"
    if isinstance(x, dict):
        return f"{where} has keys {', '.join(map(repr, shown))}{more}"
    return f"{where} has fields {', '.join(map(str, shown))}{more}"


def _is_sequence(x):
    return isinstance(x, (list, tuple)) and not hasattr(type(x), "_fields")


def _leaf_gradient(g, x, path):
    if isinstance(g, Thunk):
        g = unthunk(g)
    if g is None:
        return None
    if not isinstance(g, (np.ndarray, np.generic, float, int)) or isinstance(g, bool):
        raise ValueError(f"The gradient at {path} is {describe(g)}, but the parameter there is {describe(x)}.")
    if np.shape(g) != x.shape:
        raise ValueError(f"The gradient at {path} has shape {np.shape(g)}, but the parameter has shape {x.shape}.")
    return g


# --- pass 3: write -----------------------------------------------------------------
def _subtract(x, delta):
    new = x - delta
    if not isinstance(new, np.ndarray):
        new = np.asarray(new)  # NumPy turns 0-d results into scalars
    return new if new.dtype == x.dtype else new.astype(x.dtype)  # also keeps a non-native byte order


def _unshared(new, old):
    """`new` (a rule's new state) with fresh arrays: any array also in `old` is copied, and a
    NumPy scalar where `old` had an array (arithmetic on 0-d arrays gives scalars) becomes one again."""
    old_ids = set()
    _collect_array_ids(old, old_ids)

    def fresh(value, before):
        if isinstance(value, np.ndarray):
            return value.copy() if id(value) in old_ids else value
        if isinstance(value, np.generic) and isinstance(before, np.ndarray):
            return np.asarray(value)
        if type(value) is tuple or type(value) is list:
            if type(before) is type(value) and len(before) == len(value):
                return type(value)(fresh(v, b) for v, b in zip(value, before))
            return type(value)(fresh(v, None) for v in value)
        return value

    return fresh(new, old)


def _collect_array_ids(value, ids):
    if isinstance(value, np.ndarray):
        ids.add(id(value))
    elif type(value) is tuple or type(value) is list:
        for v in value:
            _collect_array_ids(v, ids)


def _write_into(old, new):
    """`new` with its arrays written into the matching arrays of `old` (so they stay the same objects)."""
    if isinstance(old, np.ndarray) and isinstance(new, (np.ndarray, np.generic)):
        same_type = old.dtype.kind == new.dtype.kind and old.dtype.itemsize == new.dtype.itemsize
        if old.shape == new.shape and same_type and old.flags.writeable:
            if old is not new:
                np.copyto(old, new)
            return old
        return new if isinstance(new, np.ndarray) else np.asarray(new)
    if type(old) in (tuple, list) and type(new) is type(old) and len(old) == len(new):
        return type(old)(_write_into(o, n) for o, n in zip(old, new))
    return new
