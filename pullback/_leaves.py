"""The differentiable leaves of a call's arguments: copy the arguments with those leaves replaced,
and read per-leaf results back into the arguments' shape.

Conventions (see the README's "How gradients look"):

- Every container in the arguments (positional and keyword) is copied for the call, so `f`
  may append to lists or set attributes without touching the caller's objects. Shared
  sub-objects stay shared and cycles stay cycles inside `f`.
- An array object is one leaf wherever it appears: inside `f` every place holds the same
  handle, so a write through one place is seen through the others. Its gradient (the total)
  is read back at its first trainable place; later places get `None`, so nothing is counted
  twice. Python floats and NumPy scalars are values: each place is its own leaf.
- Arrays that are not differentiated are passed as they are (not copied).
"""

import decimal
import fractions
import functools
import types
from collections import deque
from collections.abc import Mapping, Sequence, Set

import numpy as np

from . import tree
from ._arrays import as_numpy, as_type_of, dtype_kind, is_foreign_array, memory_key
from ._backward import fit  # the sweep's one broadcasting helper
from ._standins import converted, dtype_of, is_jit_float_or_complex, is_number_stand_in, is_stand_in, is_traced, traced_value
from ._values import stop_gradient


def describe_place(path, roots=None):
    """`path` (from the root pair (args, kwargs)) as a user reads it: `argument 0['w']`, or, with
    `roots`, the name given to each positional argument."""
    if len(path) < 2:
        return "the arguments"
    (side, _), (key, _) = path[0], path[1]
    rest = tree.Path(path[2:])
    if side == 1:
        return rest.format(f"keyword argument {key!r}")
    return rest.format(roots[key] if roots is not None else f"argument {key}")


class Where:
    """A place in the arguments, formatted only when it is printed (a walk makes many, prints few).

    It keeps the root names, not the `Arguments`, which holds it: no reference cycle, so a finished
    call's arguments are freed at once rather than by the garbage collector."""

    __slots__ = ("path", "roots", "_text")

    def __init__(self, path, roots):
        self.path, self.roots, self._text = path, roots, None

    def __str__(self):
        if self._text is None:
            self._text = describe_place(self.path, self.roots)
        return self._text

    def __format__(self, spec):
        return format(str(self), spec)


class Leaf:
    """One differentiable leaf: its number, its place (`.path`, e.g. `argument 0['w']`) and its value."""

    __slots__ = ("index", "where", "primal")

    def __init__(self, index, where, primal):
        self.index, self.where, self.primal = index, where, primal

    @property
    def path(self):
        return str(self.where)

    def __iter__(self):
        return iter((self.index, self.path, self.primal))


class Arguments:
    """The positional arguments `args` (differentiated at `positions`) and keyword arguments of one call.

    `track(make_leaf)` returns copies with each differentiable leaf replaced by
    `make_leaf(primal, path, companion)`, and lists those leaves in `.leaves`;
    `read(results)` gives one structured result per positional argument.

    >>> import numpy as np
    >>> w = np.ones(2)
    >>> a = Arguments(({"a": w, "b": w, "s": 2.0},), [0])
    >>> (new,), _ = a.track(lambda x, path, c: ("tracked", path))
    >>> new["a"] is new["b"], [leaf.path for leaf in a.leaves]
    (True, ["argument 0['a']", "argument 0['s']"])
    >>> a.read([np.zeros(2), 5.0])
    ({'a': array([0., 0.]), 'b': None, 's': 5.0},)
    """

    def __init__(self, args, positions, kwargs=None, roots=None):
        self.args = tuple(args)
        self.positions = list(positions)
        self.kwargs = kwargs or {}
        self.roots = roots
        self.leaves = []
        # the common calls take short paths with the same results: arrays and numbers only (flat), or
        # differentiated dicts, lists and tuples of arrays beside them (shallow)
        self._flat = not any(tree.kind_of(a) is not None for a in (*self.args, *self.kwargs.values()))
        self._shallow = not self._flat and _shallow_call(self.args, self.positions, self.kwargs)
        self._trainable = (_flat_trainable_ids(self.args, self.positions) if self._flat or self._shallow
                           else _trainable_ids(self.args, self.positions))
        self._array_index = {}
        self._place_index = {}
        self.array_api_like = None  # the first array-API-only leaf (array_api_strict's): see `track`

    def describe(self, path):
        """`path` (from the root pair (args, kwargs)) as a user reads it: `argument 0['w']`."""
        return describe_place(path, self.roots)

    def track(self, make_leaf, companions=None):
        """Copies of the positional and keyword arguments, with leaves replaced by `make_leaf`."""
        self.leaves = []
        self._array_index = {}
        self._place_index = {}
        self._made = {}
        self._plain = []  # (path, array) for the arrays f is given as they are
        chosen = set(self.positions)
        trainable = self._trainable
        tangents = self._tangents_of_arrays(companions) if companions is not None else {}
        methods, rebound = [], set()  # bound methods met as leaves; those bound again to their object's copy
        functions = []  # functions met as leaves (a field `self.score = lambda x: ...`), with their places

        def wrap(x, path, companion):
            index = len(self.leaves)
            where = Where(path, self.roots)
            self.leaves.append(Leaf(index, where, x))
            plain = as_numpy(x)  # array-API-only arrays are read as NumPy's (a memmap as an ndarray)
            if plain is not x and self.array_api_like is None and not isinstance(x, np.ndarray):
                # results computed from it take its type and device
                self.array_api_like = x
            return make_leaf(plain, where, companion), index

        def leaf(x, parts, path):
            if id(x) in trainable:  # an array, made a leaf at its first trainable place, with the tangent given there
                new, index = wrap(x, trainable[id(x)], tangents.get(id(x)))
                self._array_index[id(x)] = index
                return new
            if _is_root_argument(path, chosen):
                return self._scalar(x, path, parts[0] if parts else None, wrap, (None, path[1][0]))
            if isinstance(x, np.ndarray):
                if parts:  # an integer array (numbers in containers are `node`'s)
                    _refuse_dropped_tangent(x, parts[0], Where(path, self.roots))
                self._plain.append((path, x))
            elif type(x) is types.MethodType:
                methods.append((path, x))
            elif type(x) is types.FunctionType:
                functions.append((path, x))
            return x

        def repeat(x, first, parts, path):
            # a tracked array met again at a place not differentiated (a keyword argument, a position
            # not in argnums) is a constant there; a container stays one copy wherever it is met
            if first is not x and not _in_chosen(path, chosen) and tree.kind_of(x) is None:
                if isinstance(x, np.ndarray):
                    self._plain.append((path, x))
                return x
            return first

        def node(x, kind, old, new, parts, path, shell):
            if parts and len(path) > 1:  # the root pair is ours, not the caller's
                tree.check_mirrors(x, old, parts[0], f"The tangent for {Where(path, self.roots)} (a {type(x).__name__})")
            if id(x) in trainable:
                names = tree.trainable_names(x, old)
                for k, child in old.items():
                    if names is not None and k not in names:
                        if parts:
                            self._refuse_frozen_tangent(x, child, tree.child_of(parts[0], k),
                                                        path.child(k, kind.fields), tangents)
                    elif type(child) is not np.ndarray:  # an array was a leaf of the walk: nothing left to do
                        part = tree.child_of(parts[0], k) if parts else None
                        new[k] = self._scalar(child, path.child(k, kind.fields), part, wrap, (id(x), k), new[k])
            if len(path) == 0:  # the root pair is ours, not the caller's
                return new
            copy = tree.copy_node(x, kind, new, shell)
            # `self.act = self.relu`: bound to the copy, as a copy of the object would be
            rebound.update(id(method) for method in tree.rebind_methods(x, copy, new))
            return copy

        if self._flat or (self._shallow and companions is None):
            args = [self._track_shallow_argument(i, a, chosen, wrap) if _shallow_container(a) else
                    self._track_flat_argument(i, a, companions, tangents, chosen, wrap) for i, a in enumerate(self.args)]
            self.tracked = (args, dict(self.kwargs))
            self._plain += [(tree.ROOT.child(1, False).child(k, False), a) for k, a in self.kwargs.items()
                            if isinstance(a, np.ndarray)]
            functions = [(tree.ROOT.child(side, False).child(k, False), a)
                         for side, given in ((0, enumerate(self.args)), (1, self.kwargs.items()))
                         for k, a in given if type(a) is types.FunctionType]
        else:
            # the differentiated arguments first: what they hold is tracked wherever else it is met
            order = [*sorted(chosen), *(i for i in range(len(self.args)) if i not in chosen)]
            ys = ((tuple(companions), None),) if companions is not None else ()
            new = tree.walk(({i: self.args[i] for i in order}, self.kwargs), leaf, node, ys=ys, repeat=repeat,
                            cycle=tree.copy_cycle)
            self.tracked = ([new[0][i] for i in range(len(self.args))], new[1])
            for path, method in methods:
                if id(method) not in rebound:
                    self._refuse_bound_method(path, method)
        self._refuse_functions_reaching_leaves(functions)
        self._watch_aliases()
        return self.tracked

    def _tangents_of_arrays(self, companions):
        """The tangent given for each differentiated array, from whichever of its trainable places has one:
        a tie's first place may be a frozen field, or an argument given no tangent. Two different
        tangents for one array are refused."""
        found = {}

        def visit(x, parts, path):
            t = parts[0]
            if t is not None and self._trainable.get(id(x)) is not None:
                first = found.setdefault(id(x), (t, path))[0]
                if first is not t and not (np.shape(first) == np.shape(t) and np.array_equal(first, t)):
                    raise ValueError(
                        f"Tangents are given at {self.describe(found[id(x)][1])} and at {self.describe(path)}, which "
                        "hold the same array object: one parameter, which moves along one tangent. Give it at one "
                        "place (None at the others), or pass a copy of the array (w.copy()) to make them two.")

        tree.walk((_chosen(self.args, self.positions),), visit, lambda *a: None, ys=((tuple(companions),),), trainable_only=True,
                  repeat=lambda x, first, parts, path: visit(x, parts, path), cycle=lambda *a: None)
        return {k: t for k, (t, _) in found.items()}

    def _refuse_frozen_tangent(self, owner, child, tangent, path, tangents):
        """Raise for a nonzero tangent given for `child`, a field `owner.trainable()` leaves out: it is not
        differentiated, so the tangent would be dropped silently. None, zeros, the field's own value (a
        tangent copied from the primals) and, for a tied array, the tangent of its trainable place say nothing."""
        if tangent is None:
            return

        def leaf(v, parts, sub):
            t = parts[0]
            if t is None or tree.kind_of(t) is not None or _same_value(t, v) or _is_zero(t):
                return
            tied = tangents.get(id(v))
            if tied is not None and _same_value(t, tied):
                return
            where = Where(tree.Path((*path.steps(), *sub.steps())), self.roots)
            raise TypeError(
                f"A nonzero tangent is given for {where}, which {type(owner).__name__}.trainable() leaves out: it "
                "is not differentiated, so the tangent would be dropped. Pass None (or the field's own value) as its "
                "tangent, or name the field in trainable() to move it.")

        tree.walk(child, leaf, lambda *a: None, ys=(tangent,), cycle=lambda *a: None)

    def _refuse_bound_method(self, path, method):
        """Raise for a bound method whose object is also among the differentiated arguments: inside `f` it
        would still call the caller's object, not the copy being differentiated, and lose its gradient."""
        if id(method.__self__) in self._trainable:
            raise TypeError(
                f"{_sentence_start(Where(path, self.roots))} is a bound method of a {type(method.__self__).__name__} "
                "that is being differentiated. Inside the function it would run on the caller's object, not on the "
                "tracked copy, so its parameters' gradient would be lost. Keep the object and call it "
                "(self.enc(x)), or define a method that does (def forward_fn(self, x): return self.enc(x)).")

    def _refuse_functions_reaching_leaves(self, functions):
        """Raise for a function among the arguments (a field `self.score = lambda x: ...`) whose closure or
        defaults hold a value being differentiated: inside `f` it would read the caller's value, not the
        tracked copy, so the gradient through it would be lost, silently. Each function and value they
        hold is looked into once (the layers of a model share their activation functions)."""
        differentiated, seen = None, set()
        for path, function in functions:
            if not function.__closure__ and not function.__defaults__ and not function.__kwdefaults__:
                continue
            if differentiated is None:
                differentiated = self._differentiated_ids()
            reached = _differentiated_reached_by(function, differentiated, seen)
            if reached is not None:
                key = path[-1][0]
                name = next((n for n in (key, function.__name__) if isinstance(n, str) and n.isidentifier()), "fn")
                raise TypeError(
                    f"{_sentence_start(Where(path, self.roots))} is a function whose closure or defaults hold "
                    f"{self._place_of(reached)}, which is being differentiated. Inside the function it would read "
                    "the caller's value, not the tracked copy, so the gradient through it would be lost. Define it "
                    f"as a method (def {name}(self, ...)), or pass what it uses as an argument; to use the value as "
                    "a constant, capture a copy (w.copy()).")

    def _differentiated_ids(self):
        """{id: the id of the differentiated array or container it is}: those of the arguments, and under
        pb.jit the caller's arrays that the traced ones stand for (what a closure holds is the caller's)."""
        ids = {ident: ident for ident in self._trainable}
        for leaf in self.leaves:
            if is_stand_in(leaf.primal):
                ids.setdefault(id(traced_value(leaf.primal)), id(leaf.primal))
        return ids

    def _place_of(self, ident):
        """Where the differentiated array or container `ident` first is, as a message prints it."""
        place = self._trainable.get(ident)
        if place is None:
            found = []
            tree.walk((_chosen(self.args, self.positions),), lambda *a: None,
                      lambda x, kind, old, new, parts, path, shell: found.append(path) if id(x) == ident else None,
                      trainable_only=True)
            place = found[0] if found else None
        return "an argument" if place is None else describe_place(place, self.roots)

    def _watch_aliases(self):
        """Note the differentiated arrays whose memory an array `f` is given as it is shares (a keyword
        view of one, a frozen field holding a view): `f` could change them by writing into it, unseen."""
        self._aliased = []
        if not self._plain:
            return
        by_memory = {}
        for path, a in self._plain:
            by_memory.setdefault(memory_key(a), []).append((path, a))
        for leaf in self.leaves:
            primal = leaf.primal
            if type(primal) is np.ndarray:
                for path, a in by_memory.get(memory_key(primal), ()):
                    if np.may_share_memory(primal, a):  # enough: only a write through an alias changes its bytes
                        self._aliased.append((leaf, path, primal.copy()))
                        break

    def given_arrays(self):
        """The NumPy arrays `f` was given, differentiated or not, by `memory_key`: a result sharing
        memory with one of them is the caller's memory, not the call's."""
        found = {}
        for a in [leaf.primal for leaf in self.leaves] + [a for _, a in self._plain]:
            if isinstance(a, np.ndarray):
                found.setdefault(memory_key(a), []).append(a)
        return found

    def refuse_unseen_writes(self):
        """Raise after `f` changed a differentiated array through an array it was given as it is (see
        `_watch_aliases`): the value would change without the gradient following, silently."""
        for leaf, path, before in self._aliased:
            if not np.array_equal(leaf.primal, before, equal_nan=True):
                raise ValueError(
                    f"The function wrote into {self.describe(path)}, which shares memory with {leaf.path}, a "
                    "differentiated array: the value changed, but pullback cannot follow a write into an array it "
                    "does not differentiate, so the gradient would not. Pass the array once and take the view "
                    "inside the function, or pass a copy (x.copy()).")

    def _track_flat_argument(self, i, x, companions, tangents, chosen, wrap):
        """`track` for argument `i` when no argument is a container: what the walk would do, directly."""
        companion = companions[i] if companions is not None else None
        if i not in chosen:  # a constant, even where it is the same array as a differentiated argument
            if isinstance(x, np.ndarray):
                self._plain.append((tree.ROOT.child(0, False).child(i, False), x))
            return x
        if id(x) in self._trainable:
            index = self._array_index.get(id(x))
            if index is None:
                new, index = wrap(x, self._trainable[id(x)], tangents.get(id(x)))
                self._array_index[id(x)] = index
                self._made[id(x)] = new
            return self._made[id(x)]
        return self._scalar(x, tree.ROOT.child(0, False).child(i, False), companion, wrap, (None, i))

    def _track_shallow_argument(self, i, x, chosen, wrap):
        """`track` for differentiated argument `i`, a dict, list or tuple of arrays (see `_shallow_call`)."""
        path = tree.ROOT.child(0, False).child(i, False)
        fields = tree.kind_of(x).fields
        new = {}
        for k, v in _items(x):
            if id(v) in self._trainable:
                if id(v) not in self._made:
                    made, self._array_index[id(v)] = wrap(v, self._trainable[id(v)], None)
                    self._made[id(v)] = made
                new[k] = self._made[id(v)]
            else:  # an integer array, given as it is
                self._plain.append((path.child(k, fields), v))
                new[k] = v
        return new if type(x) is dict else type(x)(new.values())

    def _scalar(self, x, path, companion, wrap, place, current=None):
        """A trainable place holding `x`: a tracked scalar, or `x` itself (refusing what cannot be tracked)."""
        if hasattr(type(x), "__pullback_value__"):  # a number pb.jit traces
            x = jit_number_to_track(x)
        if (type(x) is float or type(x) is complex or (isinstance(x, np.generic) and x.dtype.kind in "fc")
                or is_jit_float_or_complex(x)):
            new, index = wrap(x, path, companion)
            self._place_index[place] = index
            return new
        where = Where(path, self.roots)
        _refuse_untrackable(x, where)
        _refuse_dropped_tangent(x, companion, where)
        if current is None and isinstance(x, np.ndarray):  # an integer array, given as it is
            self._plain.append((path, x))
        return x if current is None else current

    def refuse_shared_write(self, index):
        """Raise before a write into leaf `index` whose array shares memory with another array among
        the arguments: `f` works on a copy of each differentiated array, so the other would not see
        the write, as it does without pullback (where it reads the same memory).

        >>> import numpy as np
        >>> b = np.arange(3.0)
        >>> a = Arguments((b, b[:2]), [0, 1])
        >>> _ = a.track(lambda x, path, c: x)
        >>> a.refuse_shared_write(0)
        Traceback (most recent call last):
        ValueError: The function writes into argument 0, which shares memory with argument 1: ...
        """
        leaf = self.leaves[index]
        primal = leaf.primal
        if not isinstance(primal, np.ndarray):
            return
        # the other differentiated arrays, and the arrays `f` was given as they are (the same array
        # at a place that is not differentiated, such as a keyword argument, counts too)
        others = [(other.where.path, other.primal) for other in self.leaves if other.index != index]
        others += self._plain
        for path, other in others:
            if np.shares_memory(primal, other):
                raise ValueError(
                    f"The function writes into {leaf.path}, which shares memory with {self.describe(path)}: "
                    "pullback differentiates a copy of each array it is given, so the write would not be "
                    "seen there, as it is without pullback. Pass the array once and take the view inside "
                    "the function, or pass a copy (x.copy()) for one of them.")

    def read(self, results, convert=None, callers=()):
        """One structured result per positional argument (None where it is not differentiated).

        `results[leaf.index]` is each leaf's raw result; `convert(result, primal, returned)` turns it
        into what the user sees (default: the gradient, fitted to the primal's shape and dtype,
        sharing memory with no argument and no other result); `callers` are arrays the caller
        passed in (cotangent seeds) that no result may share memory with.
        """
        returned = {id(memory_of(a)) for a in callers if isinstance(a, np.ndarray)}
        convert = convert or leaf_gradient

        def result(index, primal):
            r = results[index]
            primal = self.leaves[index].primal  # as tracked (a float subclass's value is a float)
            if hasattr(type(primal), "__pullback_value__"):  # a number pb.jit traces
                primal = jit_number_to_track(primal)
            return None if r is None else convert(r, primal, returned)

        if self._flat or self._shallow:  # (tracked by the walk or not: the same indices)
            grads, given = [None] * len(self.args), set()
            for i in self.positions:
                x = self.args[i]
                if _shallow_container(x):
                    grads[i] = self._read_shallow_argument(x, result, given)
                    continue
                index = self._place_index.get((None, i))
                if id(x) in self._array_index and id(x) not in given:
                    index = self._array_index[id(x)]
                    given.add(id(x))  # a tie's later places get None
                grads[i] = None if index is None else result(index, x)
            return tuple(grads)

        def leaf(x, parts, path):
            index = self._array_index.get(id(x))
            if index is None and len(path) == 2:
                index = self._place_index.get((None, path[1][0]))
            return None if index is None else result(index, x)

        def node(x, kind, old, new, parts, path, shell):
            if len(path) == 0:
                return new
            for k, child in old.items():
                index = self._place_index.get((id(x), k))
                if index is not None:
                    new[k] = result(index, child)
            if all(v is None for v in new.values()):
                return None
            return tree.mirror(x, new)

        chosen = {i: self.args[i] for i in self.positions}
        out = tree.walk(
            (chosen,), leaf, node, trainable_only=True,
            repeat=lambda *a: None, cycle=lambda *a: None, frozen=lambda *a: None,
        )
        grads = out[0] or {}
        return tuple(grads.get(i) for i in range(len(self.args)))


    def _read_shallow_argument(self, x, result, given):
        """`read` for a differentiated dict, list or tuple of arrays: a tied array's gradient at its first place."""
        new = {}
        for k, v in _items(x):
            index = self._array_index.get(id(v))
            if index is None or id(v) in given:
                new[k] = None
            else:
                given.add(id(v))
                new[k] = result(index, v)
        return None if all(g is None for g in new.values()) else tree.mirror(x, new)


def _items(x):
    """The (key, value) pairs of a dict, list or tuple."""
    return x.items() if type(x) is dict else enumerate(x)


def _shallow_container(x):
    """Whether `x` is a non-empty dict, list or tuple (not a subclass) holding NumPy arrays only."""
    kind = type(x)
    if kind is dict:
        values = x.values()
    elif kind is list or kind is tuple:
        values = x
    else:
        return False
    return len(x) > 0 and all(type(v) is np.ndarray for v in values)


def _shallow_call(args, positions, kwargs):
    """Whether the call's differentiated arguments are arrays, numbers and `_shallow_container`s, and every other
    argument is a leaf: what `Arguments` then tracks and reads without walking."""
    chosen = set(positions)
    return (all(tree.kind_of(a) is None or (i in chosen and _shallow_container(a)) for i, a in enumerate(args))
            and all(tree.kind_of(v) is None for v in kwargs.values()))


def jit_number_to_track(x):
    """What is differentiated for `x`, a number pb.jit traces: a stand-in for a float or complex itself, so that
    the derivative is recorded and replayed at each call's value (the engine computes with it as with the number
    it stands for); for an int (not differentiated), its value, fixed by a guard."""
    return x if is_jit_float_or_complex(x) else x.__pullback_value__()


def _in_chosen(path, chosen):
    """Whether `path` lies in a differentiated positional argument."""
    return path[0][0] == 0 and path[1][0] in chosen


def _refuse_dropped_tangent(x, tangent, where):
    """Raise for a nonzero tangent given for `x`, a value that is not differentiated (an int, an integer
    array): it would be dropped silently, and the derivative computed as if it were zero. The value itself (or
    a copy of it) in its own place, as in a tangent tree copied from the primals with its floats replaced,
    says no tangent."""
    if tangent is None or tree.kind_of(tangent) is not None or _is_float_array(x) or _same_value(tangent, x):
        return  # (a float array traced by an outer derivative is differentiated: its leaf was made already)
    zero = isinstance(tangent, (int, float, complex, np.ndarray, np.generic)) and not np.any(tangent)
    if not zero:
        raise TypeError(
            f"A nonzero tangent is given for {where}, a {type(x).__name__}{_dtype_note(x)}, which is not "
            "differentiated (only float and complex values are): it would be dropped. Pass None as its tangent, "
            "or pass the value as a float (float(n), n.astype(float)) to move it.")


def _same_value(tangent, x):
    """Whether `tangent` is the primal `x` or a copy of it (a tangent tree copied from the primals, its floats replaced)."""
    if tangent is x:
        return True
    try:
        return type(tangent) is type(x) and bool(np.array_equal(tangent, x))
    except (TypeError, ValueError):
        return False


def _is_zero(t):
    """Whether tangent `t` is a number or array of zeros."""
    return isinstance(t, (int, float, complex, np.ndarray, np.generic)) and not np.any(t)


def _dtype_note(x):
    return f" of dtype {x.dtype}" if isinstance(x, np.ndarray) else ""


def _is_root_argument(path, chosen):
    """Whether `path` is a differentiated positional argument itself."""
    return len(path) == 2 and _in_chosen(path, chosen)


def _chosen(args, positions):
    """`args` with the arguments not at `positions` left out (None), so that a walk names places alike."""
    chosen = set(positions)
    return tuple(a if i in chosen else None for i, a in enumerate(args))


def _flat_trainable_ids(args, positions):
    """`_trainable_ids` for arguments that are leaves or `_shallow_container`s."""
    found = {}
    for i in sorted(positions):  # a tie's first place in the order the arguments come
        x = args[i]
        if _shallow_container(x):
            path = tree.ROOT.child(0, False).child(i, False)
            fields = tree.kind_of(x).fields
            for k, v in _items(x):
                if v.dtype.kind in "fc":
                    found.setdefault(id(v), path.child(k, fields))
                else:
                    _refuse_untrackable(v, _argument_place(path.child(k, fields)))
            found[id(x)] = None
        elif isinstance(x, (np.ndarray, np.generic)) or _is_tracked_value(x) or is_foreign_array(x):
            if _is_float_array(x):
                found.setdefault(id(x), tree.ROOT.child(0, False).child(i, False))
            else:
                _refuse_untrackable(x, f"argument {i}")
        elif type(x) is types.MethodType:
            refuse_method_holding_arrays(x, f"argument {i}")
        else:
            refuse_hidden_arrays(x, f"argument {i}")
            refuse_array_like(x, f"argument {i}")
    return found


def _trainable_ids(args, positions):
    """The arrays (float, at trainable places) and containers reachable trainably from the arguments at
    `positions`: {id: the array's first trainable place, or None for a container}."""
    found = {}
    methods = []

    def leaf(x, parts, path):
        if isinstance(x, np.ndarray) or isinstance(x, np.generic) or _is_tracked_value(x) or is_foreign_array(x):
            if _is_float_array(x):
                found[id(x)] = path
            else:
                _refuse_untrackable(x, _argument_place(path))
        elif type(x) is types.MethodType:
            methods.append((x, path))  # known once the walk has found every differentiated object
        elif type(x) not in _PLAIN_LEAVES:
            refuse_hidden_arrays(x, _argument_place(path))
            refuse_array_like(x, _argument_place(path))

    def node(x, kind, old, new, parts, path, shell):
        found[id(x)] = None
        if isinstance(x, (list, dict)) and not kind.fields:
            _refuse_attributes_of_item_container(x, path)
        if not old:
            refuse_array_like(x, _argument_place(path))

    root = (_chosen(args, positions),)  # paths as `Arguments.track` names them: (0, position), ...
    tree.walk(root, leaf, node, trainable_only=True)
    found.pop(id(root), None)
    found.pop(id(root[0]), None)
    for method, path in methods:
        if id(method.__self__) not in found:  # a method of a differentiated object: see `Arguments.track`
            refuse_method_holding_arrays(method, _argument_place(path))
    return found


# leaves that hold nothing (the common fields of a layer): no check to run
_PLAIN_LEAVES = frozenset((int, float, bool, str, type(None), complex, types.FunctionType, np.ufunc))


def _argument_place(path):
    """A walk's `path` from the root pair as messages print it: `argument 0.layers[1]`."""
    return tree.Path(path[2:]).format(f"argument {path[1][0]}")


def _is_tracked_value(x):
    return hasattr(type(x), "_tape")


def _is_float_array(x):
    """A float or complex NumPy array (not a subclass), or a traced value of an outer level holding one."""
    if type(x) is np.ndarray or type(x) is np.memmap:  # a memmap is tracked as an ndarray of its memory
        return x.dtype.kind in "fc"
    if is_foreign_array(x):  # a Dask, CuPy or array-API array: tracked as it is
        return dtype_kind(x) in "fc"
    return _is_tracked_value(x) and dtype_of(x).kind in "fc" and not isinstance(x, np.generic)


def refuse_hidden_arrays(x, where):
    """Raise for a container `pb.tree` does not see inside (a deque, a tuple subclass, a read-only
    mapping, a functools.partial) that holds float arrays at a differentiated place: they would silently get
    no gradient. (The numbers a partial holds are taken as options, as a function's defaults are.)"""
    if type(x) is functools.partial:  # a model written as a function with its weights bound (numbers are options)
        if any(_is_float_array(v) for v in tree.leaves((x.args, x.keywords))):
            _refuse_container(x, where)
        return
    base = tree.registered_base(type(x))
    if base is not None:
        _refuse_registered_subclass(type(x), base, where)
    if isinstance(x, (str, bytes)) or not isinstance(x, (Mapping, Sequence, Set, deque)):
        return
    try:
        held = list(x.values()) if isinstance(x, Mapping) else list(x)
    except TypeError:
        return
    if any(_is_float_array(v) or type(v) is float or tree.kind_of(v) is not None for v in held):
        _refuse_container(x, where)


def refuse_array_like(x, where):
    """Raise for an array of a library NumPy does not dispatch to (a torch or TensorFlow tensor: it converts
    with `__array__` or `__dlpack__`) holding floats: pb.tree sees no fields in it, so it would silently get
    no gradient and no optimiser step."""
    cls = type(x)
    if not (hasattr(cls, "__array__") or hasattr(cls, "__dlpack__")) or tree._speaks_numpy(cls):
        return
    dtype = str(getattr(x, "dtype", ""))
    if "float" not in dtype and "complex" not in dtype:
        return
    raise TypeError(
        f"{_sentence_start(where)} is a {cls.__module__}.{cls.__qualname__} of dtype {dtype}, an array of a library "
        "that pullback does not differentiate (it tracks NumPy arrays and arrays NumPy dispatches to), so it would "
        "get no gradient and no optimiser step. Convert it to a NumPy array (np.asarray(t), t.numpy()); for a "
        "constant, pass it by keyword or keep it in a field that trainable() leaves out.")


def _refuse_container(x, where):
    how = ("its arguments to the function as arguments of the call, f(w, x), differentiated in w"
           if isinstance(x, functools.partial) else "its contents as a list, tuple or dict")
    raise TypeError(
        f"{_sentence_start(where)} is a {type(x).__name__}, which pb.tree does not look inside, so the values it holds would "
        f"get no gradient. Register the type with pb.tree.register (see docs/api-tree.md), or pass {how}.")


def _has_float_fields(dtype):
    """Whether structured `dtype` has a float or complex field, at any depth (fields of fields, sub-arrays)."""
    return bool(dtype.fields) and any(np.dtype(field[0]).base.kind in "fc" or _has_float_fields(np.dtype(field[0]).base)
                                      for field in dtype.fields.values())


def _differentiated_reached_by(function, differentiated, seen):
    """The id of a differentiated array or container that `function` holds in its closure or defaults, looking
    into containers and the functions found there (`differentiated`: {id met: the id to report}); None if none.
    `seen` holds the ids of the functions and values already looked into (and found to hold none)."""
    pending = [function]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for value in _captured_values(current):
            if id(value) in differentiated:
                return differentiated[id(value)]
            if type(value) is types.FunctionType:
                pending.append(value)  # looked into when its turn comes
                continue
            if id(value) in seen or tree.kind_of(value) is None:  # (a leaf not differentiated: a number, a module)
                continue
            seen.add(id(value))
            hits = []

            def leaf(v, parts, path):
                if id(v) in differentiated:
                    hits.append(differentiated[id(v)])
                elif type(v) is types.FunctionType:
                    pending.append(v)

            def node(v, kind, old, new, parts, path, shell):
                if id(v) in differentiated:
                    hits.append(differentiated[id(v)])

            tree.walk(value, leaf, node, cycle=lambda *a: None)
            if hits:
                return hits[0]
    return None


def _captured_values(function):
    """The values `function` holds: its closure variables and its defaults."""
    cells = []
    for cell in function.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # a variable not assigned yet
            pass
    return [*cells, *(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values()]


def _refuse_attributes_of_item_container(x, path):
    """Raise for a list or dict subclass whose own attributes hold values to differentiate: pb.tree walks
    its items only, so those values would silently get no gradient."""
    attributes = getattr(x, "__dict__", None)
    if not attributes or attributes is x:  # `self.__dict__ = self`: the attributes are the entries
        return
    held = [name for name, value in attributes.items() if _holds_differentiable(value)]
    if held:
        name, base = type(x).__qualname__, "list" if isinstance(x, list) else "dict"
        raise TypeError(
            f"{_sentence_start(_argument_place(path))} is a {name}, a {base} subclass whose attribute "
            f"{', '.join('.' + h for h in held)} holds values to differentiate; pb.tree walks a {base}'s entries "
            f"only, so they would get no gradient. Keep them among the entries, or register {name} with "
            f"pb.tree.register({name}, children, rebuild), naming its attributes too.")


def _holds_differentiable(value):
    """Whether `value` is, or holds, a float or complex array. (Python numbers there are taken as settings, a
    timestamp or a rate, as the optimisers take a Python float: to train a number, keep it as a 0-d array.)"""
    return any(_is_float_array(v) for v in tree.leaves(value))


def refuse_method_holding_arrays(method, where):
    """Raise for a bound method at a differentiated place whose object holds float arrays and is not
    differentiated itself (`model.loss`): the arrays would silently get no gradient."""
    if not any(_is_float_array(v) for v in tree.leaves(method.__self__)):
        return
    name = type(method.__self__).__name__
    raise TypeError(
        f"{_sentence_start(where)} is a bound method of a {name} holding float arrays, which are not an argument of "
        f"the call, so they would get no gradient. Pass the {name} and call its method inside the function "
        f"(pb.gradient(lambda m, x: m.{method.__func__.__name__}(x), model, x)), or pass the arrays as arguments.")


def _refuse_registered_subclass(cls, base, where):
    raise TypeError(
        f"{_sentence_start(where)} is a {cls.__qualname__}, a subclass of {base.__qualname__} (registered with "
        f"pb.tree.register) with storage of its own, which {base.__qualname__}'s registration does not know, "
        f"so pb.tree does not look inside it. Register {cls.__qualname__} with pb.tree.register too.")


def _sentence_start(where):
    """A place (or None: "an argument") to begin a message with."""
    where = str(where) if where is not None else "an argument"
    return where[0].upper() + where[1:]


def _refuse_untrackable(x, where):
    """Raise for a value at a differentiated place whose gradient pullback cannot give (never a silent None).

    `where` names the place (formatted only when an error is raised).
    """
    subclass = isinstance(x, np.ndarray) and type(x) is not np.ndarray and type(x) is not np.memmap
    other_number = isinstance(x, (fractions.Fraction, decimal.Decimal))
    if type(x) is np.ndarray and x.dtype == object and any(
            isinstance(v, (float, complex, np.inexact)) or _is_float_array(v) for v in x.flat):
        raise TypeError(
            f"{_sentence_start(where)} is a NumPy array of dtype object holding floats or float arrays, which pullback "
            "cannot differentiate (it tracks float and complex arrays). Convert it with x.astype(float), pass the "
            "arrays it holds as a list or tuple, or pass it by keyword if it is a constant."
        )
    if isinstance(x, (np.ndarray, np.void)) and _has_float_fields(x.dtype):
        raise TypeError(
            f"{_sentence_start(where)} is a structured NumPy array with float fields, which pullback cannot "
            "differentiate (it tracks float and complex arrays). Pass its fields as separate float arrays "
            "(x['a'], x['b'], ... in a dict), or pass it by keyword if it is a constant."
        )
    if _number_subclass(type(x)):  # its tracked value would be a plain float: isinstance and its methods would change
        raise TypeError(
            f"{_sentence_start(where)} is a {type(x).__qualname__}, a subclass of {_number_base(type(x)).__name__}, which "
            "pullback cannot track as itself (its methods and isinstance checks would see a plain number). Pass "
            f"{_number_base(type(x)).__name__}(x) to differentiate it, or pass it by keyword if it is a constant."
        )
    if not (subclass or other_number):
        return
    where = str(where) if where is not None else "an argument"
    if subclass:
        raise TypeError(
            f"{where} is a {type(x).__module__}.{type(x).__qualname__}, a NumPy array subclass whose operations "
            "differ from ndarray's (np.matrix's * is a matrix product; a masked array skips masked values), which "
            "pullback does not follow. Use plain arrays: np.asarray(m) and x @ y for np.matrix; for a masked "
            "array, select the valid values (x[~mask]) or use np.where(mask, 0, x)."
        )
    raise TypeError(
        f"{where} is a {type(x).__name__}, which pullback cannot differentiate (it tracks float and complex values). "
        "Pass float(x) to differentiate it, or pass it by keyword if it is a constant."
    )


def _number_subclass(cls):
    """Whether `cls` is a subclass of float or complex of the user's (not NumPy's scalars)."""
    return issubclass(cls, (float, complex)) and cls is not float and cls is not complex and not issubclass(cls, np.generic)


def _number_base(cls):
    return complex if issubclass(cls, complex) else float


def leaf_gradient(g, primal, returned):
    """The user-facing gradient of a leaf: fitted to the primal's shape and dtype, an array the caller owns."""
    if type(g) is np.ndarray and type(primal) is np.ndarray and g.dtype is primal.dtype and g.shape == primal.shape:
        return fresh_array(g, primal, returned)  # the common case: nothing to fit or convert
    if is_jit_float_or_complex(primal):
        return _number_gradient(g, primal)
    like = (primal.shape, primal.dtype) if type(primal) is np.ndarray else as_numpy(primal)  # the sweep's fast form
    g = fit(g, like)
    if g is None:
        return g
    primal = stop_gradient(primal)  # traced by an outer level: the derivative is at its value
    if is_traced(g) or is_stand_in(g) or is_stand_in(primal):
        # a nested call (this result is itself being differentiated) or pb.jit's: a recorded conversion
        convert = conversion_to_type_of(primal)
        if convert is not None:
            return converted(g, convert)
        if is_traced(g):
            return g
    if is_jit_float_or_complex(primal):  # traced by an outer level (a jvp of a gradient), its gradient a constant
        return _number_gradient(g, primal)
    if is_foreign_array(primal) or is_foreign_array(g):  # its library's array, as the rules left it
        g = as_type_of(g, primal)
        if g is primal or id(g) in returned:  # one gradient object per leaf, as with NumPy arrays
            g = g.copy()
        returned.add(id(g))
        return g
    if type(primal) is float:
        return float(g)
    if type(primal) is complex:
        return complex(g)
    if isinstance(primal, np.generic):
        return primal.dtype.type(g)
    return fresh_array(g, primal, returned)


def _number_gradient(g, primal):
    """The gradient at a `pb.jit` stand-in for a Python float or complex: a number of its type, recorded, so that
    each replay converts its own value (its value would be fixed by a guard)."""
    kind = primal.__class__
    if is_number_stand_in(g) and (g.__class__ is kind or kind is complex or g.__class__ is int):
        # a Python number computed from stand-ins (recorded): made the primal's type by Python's arithmetic too
        return g if g.__class__ is kind else g + (0j if kind is complex else 0.0)
    g = fit(g, ((), np.result_type(kind(0))))
    return None if g is None else converted(g, kind)


def conversion_to_type_of(value):
    """What makes a derivative at `value` the type of value it is: float or complex for a Python number,
    its type for a NumPy scalar, np.asarray for a 0-d array (NumPy's arithmetic on 0-d arrays gives
    scalars); None for an array of one or more axes. `value` may be traced, or a pb.jit stand-in."""
    value = traced_value(stop_gradient(value))  # the plain value, or the value a stand-in stands for
    if is_jit_float_or_complex(value):
        return value.__class__
    if type(value) is float or type(value) is complex:
        return type(value)
    if isinstance(value, np.generic):
        return value.dtype.type
    if type(value) is np.ndarray and value.ndim == 0:
        return np.asarray
    return None


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
