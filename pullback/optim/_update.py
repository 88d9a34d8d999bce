"""`update` and `update_`: one optimisation step over a whole model.

Three passes: pair each `Leaf` of the state with its array in the model and the sum of
its gradients over all the places it appears (and refuse gradient entries that name
nothing in the model); compute every step; then write the
results (into new arrays for `update`, into the old ones for `update_`). Nothing is
written until every step has been computed, so an error leaves everything as it was.
"""

import collections
from typing import Any, TypeVar

import numpy as np

from .. import Tangent, Thunk, tree, unthunk
from .._arrays import sharing_memory
from .._jit_trace import JitError, Symbol
from .._standins import converted, is_stand_in, traced_value
from ._state import Leaf, copy_value, mirror, summary
from ._walk import describe, entries, is_array, is_param, name, nothing
from .rules import OptimiserChain

__all__ = ["update", "update_"]

Model = TypeVar("Model")


def update(state: Any, model: Model, grad: Any) -> tuple[Any, Model]:
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
    replacements = {}  # id(array) -> (new array, new Leaf)
    for leaf, x, new_rule_state, delta in _steps(state, model, grad):
        if delta is None:
            replacements[id(x)] = x.copy(), Leaf(leaf.rule, copy_value(leaf.state), leaf.frozen)
        else:
            replacements[id(x)] = _subtract(x, delta), Leaf(leaf.rule, _unshared(new_rule_state, leaf.state), leaf.frozen)
    if not replacements:
        return state, model
    new_model = tree.fmap(lambda a: replacements[id(a)][0] if id(a) in replacements else a, model)
    new_state = mirror(model, lambda x, path: replacements[id(x)][1] if id(x) in replacements else None, named=False)
    return new_state, new_model


def update_(state: Any, model: Model, grad: Any) -> tuple[Any, Model]:
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
    steps, written = [], []
    for leaf, x, g, paths in pair(state, model, grad).values():
        if leaf.frozen or g is None:
            steps.append((leaf, x, leaf.state, None))
            continue
        if in_place and isinstance(x, Symbol):
            raise JitError("optim.update_ changes the state's objects in place, which a pb.jit replay cannot "
                           "repeat; inside pb.jit use optim.update and return the new state and model.")
        if in_place and isinstance(x, np.ndarray) and not x.flags.writeable:
            raise ValueError(f"update_ cannot write into {name(paths[0])}: the array is read-only. Use update, which returns new arrays.")
        _check_fits(leaf, x, paths[0])
        dx = g.astype(x.dtype, copy=False) if is_array(g) else np.asarray(g, dtype=x.dtype)
        if dx.dtype.kind == "c":
            dx = np.conj(dx)  # a complex gradient dL/dx - i dL/dy: steepest descent is along its conjugate
        new_rule_state, delta = leaf.rule.apply(leaf.state, x, dx)
        if np.shape(delta) != x.shape:
            raise ValueError(
                f"{type(leaf.rule).__name__}.apply returned a step of shape {np.shape(delta)} for {name(paths[0])}, "
                f"which has shape {x.shape}"
            )
        steps.append((leaf, x, new_rule_state, delta))
        written.append((x, paths[0]))
    if in_place:
        _refuse_overlaps(written)
    return steps


def _check_fits(leaf, x, path):
    """Refuse a rule state made for a parameter of another shape or dtype kind (a resized layer kept
    its old state): its arrays would broadcast against the new parameter's, silently. Only pullback's
    own rules are checked: their `init` makes zeros, which a stand-in parameter can be given (a user's
    `init` may compute from the parameter, or do more)."""
    probe = _probe(x)
    if probe is None or not _own_rule(leaf.rule):
        return
    expected = leaf.rule.init(probe)
    if not _agrees(leaf.state, expected):
        raise _state_error(
            f"its entry at {name(path)} was made for another parameter ({type(leaf.rule).__name__} keeps "
            f"{summary(leaf.state)} there), but the model holds {describe(x)}, which needs {summary(expected)}")


def _own_rule(rule):
    """Whether `rule` is one of pullback's own (an OptimiserChain of them included)."""
    if isinstance(rule, OptimiserChain):
        return all(_own_rule(r) for r in rule.rules)
    return type(rule).__module__ == OptimiserChain.__module__


def _probe(x):
    """What `rule.init` is given to see the state `x` needs: for a NumPy array or a `pb.jit` stand-in,
    a read-only plain array of zeros of its shape and dtype, which costs no memory and records nothing;
    another library's array itself; None where the shape is not known (a Dask array's may not be)."""
    shape = tuple(getattr(x, "shape", ()))
    if not all(isinstance(n, (int, np.integer)) for n in shape):
        return None
    if isinstance(x, np.ndarray) or is_stand_in(x):
        return np.broadcast_to(np.zeros((), dtype=x.dtype), shape)
    return x


def _agrees(state, expected):
    """Whether the arrays and numbers of a rule's `state` have the shapes and the kind (complex or
    real) of those at the same places in `expected`. Places only one of them has are not compared:
    a rule may change its state's structure (`adjust(state, centred=True)` adds a moment)."""
    if tree.kind_of(state) is not None and tree.kind_of(expected) is not None:
        theirs = tree.children(expected)
        return all(key not in theirs or _agrees(child, theirs[key]) for key, child in tree.children(state).items())
    mine, wanted = _layout(state), _layout(expected)
    return mine is None or wanted is None or mine == wanted


def _layout(value):
    """A number's or an array's shape and whether it is complex; None for anything else."""
    if isinstance(value, (int, float, complex)):
        return (), isinstance(value, complex)
    dtype = getattr(value, "dtype", None)
    if dtype is None or tree.kind_of(value) is not None:
        return None
    return tuple(getattr(value, "shape", ())), dtype.kind == "c"


def _refuse_overlaps(written):
    """`update_` writes each step into its array: two arrays sharing memory would each take both steps."""
    shared = sharing_memory([x for x, _ in written])
    if shared is not None:
        path, other = written[shared[0]][1], written[shared[1]][1]
        raise ValueError(
            f"update_ would write the steps of {name(path)} and {name(other)} into shared memory (one is a "
            "view of the other), so each would take both steps. Use optim.update, which returns new arrays, "
            "or keep one of them in the model and make the other from it where it is used.")


def pair(state, model, grad):
    """`{id(leaf): [leaf, array, gradient, places]}`: each `Leaf` of `state` with its array in `model`,
    the sum of that array's gradients over every place it appears, and the places (`tree.Path`s)
    where the state has it.

    One walk of the model carries the state and the gradient along. A shared sub-object whose
    later place has a state or a gradient of its own is walked again from there, so every place
    counts. A mismatch between the three (an entry that names no part of the model, a state made
    for another model, a gradient of the wrong kind) is refused, the outermost first.
    """
    found = {}  # id(leaf) -> [leaf, array, summed gradient, places]
    owner = {}  # id(array) -> leaf
    grads = {}  # id(array) -> [(gradient, place)] at every place of the array
    problems = []  # (depth, error)
    pending = collections.deque([(model, state, grad, None)])
    start = None  # where the current walk starts: None for the model itself, else a later place of a shared object

    def full(path):
        """`path`, relative to the current walk's start, as a place in the model."""
        if start is None:
            return path
        place = start
        for key, is_field in path:
            place = place.child(key, is_field)
        return place

    def refuse(path, error):
        problems.append((len(path), error))

    def leaf(x, parts, path):
        s, g = parts
        if isinstance(s, Leaf):
            if is_param(x):
                claim(s, x, full(path))
            else:
                refuse(full(path), _state_error(f"it has an optimiser entry at {name(full(path))}, but the model holds {describe(x)} there"))
        elif s is not None:
            check_state(s, x, {}, path)
        if g is not None and not isinstance(g, Thunk):
            check_grad(g, x, {}, s, path)
        if g is not None and is_param(x):
            grads.setdefault(id(x), []).append((g, start, path))
        return s

    def claim(s, x, place):
        entry = found.get(id(s))
        if entry is None:
            other = owner.setdefault(id(x), s)
            if other is not s:
                refuse(place, ValueError(
                    f"{name(found[id(other)][3][0])} and {name(place)} are the same array in the model, but the state has "
                    "separate entries for them (it was set up before they were tied?). Make the state with setup(rule, model)."
                ))
            found[id(s)] = [s, x, None, [place]]
        elif entry[1] is not x:
            refuse(place, ValueError(
                f"The state has one entry for {name(entry[3][0])} and {name(place)} (they were the same array at setup), "
                "but the model now holds different arrays there. Make the state with setup(rule, model)."
            ))
        elif place not in entry[3]:
            entry[3].append(place)

    def node(x, kind, old, new, parts, path, shell):
        s, g = parts
        if isinstance(s, Leaf):
            refuse(full(path), _state_error(f"it has an optimiser entry at {name(full(path))}, but the model holds {describe(x)} there"))
        elif s is not None:
            check_state(s, x, old, path)
        if isinstance(g, Thunk):
            g = unthunk(g)  # its parts were not seen yet: walk this part again with them
            if g is not None:
                pending.append((x, s, g, full(path)))
        elif g is not None:
            check_grad(g, x, old, s, path)
        return s

    def again(x, first, parts, path):
        s, g = parts
        if tree.kind_of(x) is None:
            return leaf(x, parts, path)  # a tied array: pair it and take its gradient here too
        if s is not None or g is not None:
            pending.append((x, s, g, full(path)))
        return first

    def check_state(s, x, kids, path):
        if isinstance(s, Tangent) and s.primal_type is not type(x):
            refuse(full(path), _state_error(f"at {name(full(path))} the state is for a {s.primal_type.__name__}, the model holds {describe(x)}"))
        elif not isinstance(s, (Tangent, tuple, list, dict)):
            refuse(full(path), TypeError(f"Not an optimiser state at {name(full(path))}: {describe(s)}. Make one with setup(rule, model)."))
        else:
            extra = [k for k, v in entries(s).items() if v is not None and k not in kids]
            if extra:
                refuse(full(path), _state_error(f"it has an entry {name(_child(full(path), x, s, extra[0]))}, which the model lacks"))

    def check_grad(g, x, kids, s, path):
        if isinstance(g, Tangent) and g.primal_type is not type(x):
            refuse(full(path), ValueError(
                f"The gradient at {name(full(path))} is for a {g.primal_type.__name__}, but the model holds {describe(x)} there."
            ))
            return
        if not isinstance(g, Tangent) and tree.kind_of(g) is None:
            if kids:
                refuse(full(path), ValueError(f"The gradient at {name(full(path))} is {describe(g)}, but the model holds {describe(x)} there."))
            return
        unknown = [k for k in entries(g) if k not in kids]
        if unknown:
            refuse(full(path), _unknown_entries(g, x, kids, full(path), unknown))
        elif s is not None and _is_sequence(g) and _is_sequence(x) and len(g) < len(x):
            refuse(full(path), ValueError(f"The gradient at {name(full(path))} has {len(g)} entries, but the model has {len(x)} there."))

    while pending:
        x, s, g, start = pending.popleft()
        tree.walk(x, leaf, node, ys=(s, g), repeat=again, cycle=nothing)
    if problems:
        raise min(problems, key=lambda problem: problem[0])[1]
    for entry in found.values():
        x = entry[1]
        for g, start, path in grads.get(id(x), ()):
            g = _leaf_gradient(g, x, full(path))
            if g is not None:
                entry[2] = g if entry[2] is None else entry[2] + g
    return found




def _state_error(what):
    return ValueError(f"The state does not match the model: {what}. Make the state with setup(rule, model).")


def _child(path, x, node, key):
    """The path of child `key` of model node `x` (or, where `x` has none, of the state or gradient `node`)."""
    kind = tree.kind_of(x)
    is_field = kind.fields if kind is not None else isinstance(node, Tangent)
    return tree.Path(path).child(key, is_field)


def _unknown_entries(g, x, kids, path, unknown):
    """The error for gradient entries that name no part of the model: they would be silently ignored."""
    places = ", ".join(name(_child(path, x, g, k)) for k in unknown[:10]) + (", ..." if len(unknown) > 10 else "")
    hint = ""
    if isinstance(g, tuple) and not isinstance(x, tuple):
        hint = " (pb.gradient returns one gradient per argument: pass the model's, e.g. grads[0])"
    fix = "Remove the extra entries" if _is_sequence(x) else "Fix the name or remove the entry"
    return ValueError(
        f"The gradient has {'an entry' if len(unknown) == 1 else 'entries'} {places}, which the model lacks: "
        f"{_what_is_there(x, kids, path)}. {fix}, so that every gradient entry names a part of the model{hint}."
    )


def _what_is_there(x, kids, path):
    """`the dict at model has keys 'a', 'b'`: the model's keys at `path`, for error messages."""
    if not kids:
        return f"it holds {describe(x)} at {name(path)}, which has no entries"
    shown = list(kids)[:20]
    more = ", ..." if len(kids) > 20 else ""
    where = f"the {type(x).__name__} at {name(path)}"
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
    if not (isinstance(g, (np.ndarray, np.generic, float, int, complex)) or is_array(g)) or isinstance(g, bool):
        raise ValueError(f"The gradient at {name(path)} is {describe(g)}, but the parameter there is {describe(x)}.")
    if np.shape(g) != x.shape:
        raise ValueError(f"The gradient at {name(path)} has shape {np.shape(g)}, but the parameter has shape {x.shape}.")
    if (isinstance(g, complex) or getattr(getattr(g, "dtype", None), "kind", None) == "c") and x.dtype.kind != "c":
        raise ValueError(
            f"The gradient at {name(path)} is complex ({np.result_type(g)}), but the parameter is real ({x.dtype}): casting it "
            "would drop its imaginary part. Pass np.real(g) if that part is meant to be dropped, or make the "
            "parameter complex.")
    return g


# --- pass 3: write -----------------------------------------------------------------
def _subtract(x, delta):
    new = _array_again(x - delta, x)
    return new if new.dtype == x.dtype else new.astype(x.dtype)  # also keeps a non-native byte order


def _array_again(value, before):
    """`value` as a 0-d array where it is a NumPy scalar and `before` was an array (NumPy's arithmetic
    on 0-d arrays gives scalars); under pb.jit the conversion is recorded, so each replay makes it."""
    if isinstance(traced_value(value), np.generic) and isinstance(traced_value(before), np.ndarray):
        return converted(value, np.asarray)
    return value if is_array(value) else np.asarray(value)


def _unshared(new, old):
    """`new` (a rule's new state) with fresh arrays: any array also in `old` is copied, and a
    NumPy scalar where `old` had an array (arithmetic on 0-d arrays gives scalars) becomes one again."""
    old_ids = {id(a) for a in tree.leaves(old) if isinstance(a, np.ndarray)}

    def fresh(value, before):
        if isinstance(value, np.ndarray):
            return value.copy() if id(value) in old_ids else value
        if isinstance(value, np.generic) or is_stand_in(value):
            return _array_again(value, before)
        return value

    return tree.fmap(fresh, new, old, check=False)  # `adjust` may have changed the state's layout


def _write_into(old, new):
    """`new` with its arrays written into the matching arrays of `old` (so they stay the same objects)."""

    def write(value, before):
        if not isinstance(before, np.ndarray) or not isinstance(value, (np.ndarray, np.generic)):
            return value
        same_type = before.dtype.kind == value.dtype.kind and before.dtype.itemsize == value.dtype.itemsize
        if before.shape == value.shape and same_type and before.flags.writeable:
            if before is not value:
                np.copyto(before, value)
            return before
        return value if isinstance(value, np.ndarray) else np.asarray(value)

    return tree.fmap(write, new, old, check=False)
