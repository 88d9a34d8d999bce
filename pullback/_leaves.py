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
from collections import deque
from collections.abc import Mapping, Sequence, Set

import numpy as np

from . import tree
from ._arrays import as_numpy, as_type_of, dtype_kind, is_foreign_array


class Where:
    """A place in the arguments, formatted only when it is printed (a walk makes many, prints few)."""

    __slots__ = ("path", "describe", "_text")

    def __init__(self, path, describe):
        self.path, self.describe, self._text = path, describe, None

    def __str__(self):
        if self._text is None:
            self._text = self.describe(self.path)
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
        # the common call, arrays and numbers only, takes a short path with the same results
        self._flat = not any(tree.kind_of(a) is not None for a in (*self.args, *self.kwargs.values()))
        chosen = tuple(self.args[i] for i in self.positions)
        self._trainable = (_flat_trainable_ids(chosen, self.positions) if self._flat
                           else _trainable_ids(chosen, self.positions))
        self._array_index = {}
        self._place_index = {}
        self.array_api_like = None  # the first array-API-only leaf (array_api_strict's): see `track`

    def describe(self, path):
        """`path` (from the root pair (args, kwargs)) as a user reads it: `argument 0['w']`."""
        if len(path) < 2:
            return "the arguments"
        (side, _), (key, _) = path[0], path[1]
        rest = tree.Path(path[2:])
        if side == 1:
            return rest.format(f"keyword argument {key!r}")
        root = self.roots[key] if self.roots is not None else f"argument {key}"
        return rest.format(root)

    def track(self, make_leaf, companions=None):
        """Copies of the positional and keyword arguments, with leaves replaced by `make_leaf`."""
        self.leaves = []
        self._array_index = {}
        self._place_index = {}
        self._made = {}
        chosen = set(self.positions)
        trainable = self._trainable

        def wrap(x, path, companion):
            index = len(self.leaves)
            where = Where(path, self.describe)
            self.leaves.append(Leaf(index, where, x))
            plain = as_numpy(x)  # array-API-only arrays are read as NumPy's
            if plain is not x and self.array_api_like is None:  # results computed from it take its type and device
                self.array_api_like = x
            return make_leaf(plain, where, companion), index

        def leaf(x, parts, path):
            if id(x) in trainable:
                new, index = wrap(x, path, parts[0] if parts else None)
                self._array_index[id(x)] = index
                return new
            if _is_root_argument(path, chosen):
                return self._scalar(x, path, parts[0] if parts else None, wrap, (None, path[1][0]))
            return x

        def node(x, kind, old, new, parts, path, shell):
            if parts and len(path) > 1:  # the root pair is ours, not the caller's
                tree.check_mirrors(x, old, parts[0], f"The tangent for {Where(path, self.describe)} (a {type(x).__name__})")
            if id(x) in trainable:
                names = tree.trainable_names(x, old)
                for k, child in old.items():
                    if type(child) is np.ndarray:  # an array was a leaf of the walk: nothing left to do
                        continue
                    if names is None or k in names:
                        part = tree.child_of(parts[0], k) if parts else None
                        new[k] = self._scalar(child, path.child(k, kind.fields), part, wrap, (id(x), k), new[k])
            if len(path) == 0:  # the root pair is ours, not the caller's
                return new
            return tree.copy_node(x, kind, new, shell)

        if self._flat:
            args = [self._track_flat_argument(i, a, companions, chosen, wrap) for i, a in enumerate(self.args)]
            self.tracked = (args, dict(self.kwargs))
            return self.tracked
        ys = ((tuple(companions), None),) if companions is not None else ()
        new = tree.walk((self.args, self.kwargs), leaf, node, ys=ys, cycle=tree.copy_cycle)
        self.tracked = (list(new[0]), new[1])
        return self.tracked

    def _track_flat_argument(self, i, x, companions, chosen, wrap):
        """`track` for argument `i` when no argument is a container: what the walk would do, directly."""
        companion = companions[i] if companions is not None else None
        if id(x) in self._trainable:
            index = self._array_index.get(id(x))
            if index is None:
                new, index = wrap(x, tree.ROOT.child(0, False).child(i, False), companion)
                self._array_index[id(x)] = index
                self._made[id(x)] = new
            return self._made[id(x)]
        if i in chosen:
            return self._scalar(x, tree.ROOT.child(0, False).child(i, False), companion, wrap, (None, i))
        return x

    def _scalar(self, x, path, companion, wrap, place, current=None):
        """A trainable place holding `x`: a tracked scalar, or `x` itself (refusing what cannot be tracked)."""
        if hasattr(type(x), "__pullback_value__"):  # a number pb.jit traces: differentiated at its value, guarded
            x = x.__pullback_value__()
        if type(x) is float or type(x) is complex or (isinstance(x, np.generic) and x.dtype.kind in "fc"):
            new, index = wrap(x, path, companion)
            self._place_index[place] = index
            return new
        _refuse_untrackable(x, Where(path, self.describe))
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
        others += [(path, a) for path, a in tree.leaves_with_path(self.tracked) if isinstance(a, np.ndarray)]
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
            if hasattr(type(primal), "__pullback_value__"):  # a number pb.jit traces
                primal = primal.__pullback_value__()
            return None if r is None else convert(r, primal, returned)

        if self._flat:
            grads, given = [None] * len(self.args), set()
            for i in self.positions:
                x = self.args[i]
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


def _is_root_argument(path, chosen):
    """Whether `path` is a differentiated positional argument itself."""
    return len(path) == 2 and path[0][0] == 0 and path[1][0] in chosen


def _flat_trainable_ids(values, positions):
    """`_trainable_ids` for arguments that are all leaves."""
    found = set()
    for x, i in zip(values, positions):
        if isinstance(x, (np.ndarray, np.generic)) or _is_tracked_value(x) or is_foreign_array(x):
            if _is_float_array(x):
                found.add(id(x))
            else:
                _refuse_untrackable(x, f"argument {i}")
        else:
            _refuse_hidden_arrays(x, f"argument {i}")
    return found


def _trainable_ids(roots, positions):
    """Ids of the arrays (float, at trainable places) and containers reachable trainably from `roots`,
    the arguments at `positions`."""
    found = set()

    def leaf(x, parts, path):
        if isinstance(x, np.ndarray) or isinstance(x, np.generic) or _is_tracked_value(x) or is_foreign_array(x):
            if _is_float_array(x):
                found.add(id(x))
            else:
                _refuse_untrackable(x, tree.Path(path[1:]).format(f"argument {positions[path[0][0]]}"))
        else:
            _refuse_hidden_arrays(x, tree.Path(path[1:]).format(f"argument {positions[path[0][0]]}"))

    def node(x, kind, old, new, parts, path, shell):
        found.add(id(x))

    tree.walk(roots, leaf, node, trainable_only=True)
    found.discard(id(roots))
    return found


def _is_tracked_value(x):
    return hasattr(type(x), "_tape")


def _is_float_array(x):
    """A float or complex NumPy array (not a subclass), or a traced value of an outer level holding one."""
    if type(x) is np.ndarray or type(x) is np.memmap:  # a memmap is tracked as an ndarray of its memory
        return x.dtype.kind in "fc"
    if is_foreign_array(x):  # a Dask, CuPy or array-API array: tracked as it is
        return dtype_kind(x) in "fc"
    return _is_tracked_value(x) and x.dtype.kind in "fc" and not isinstance(x, np.generic)


def _refuse_hidden_arrays(x, where):
    """Raise for a container `pb.tree` does not see inside (a deque, a tuple subclass, a read-only
    mapping) that holds float arrays at a differentiated place: they would silently get no gradient."""
    if isinstance(x, (str, bytes)) or not isinstance(x, (Mapping, Sequence, Set, deque)):
        return
    try:
        held = list(x.values()) if isinstance(x, Mapping) else list(x)
    except TypeError:
        return
    if any(_is_float_array(v) or type(v) is float or tree.kind_of(v) is not None for v in held):
        raise TypeError(
            f"{_sentence_start(where)} is a {type(x).__name__}, which pb.tree does not look inside, so the values it holds would "
            "get no gradient. Register the type with pb.tree.register (see docs/api-tree.md), or pass its contents "
            "as a list, tuple or dict.")


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
    if type(x) is np.ndarray and x.dtype == object and any(isinstance(v, (float, complex, np.inexact)) for v in x.flat):
        raise TypeError(
            f"{_sentence_start(where)} is a NumPy array of dtype object holding floats, which pullback cannot differentiate (it "
            "tracks float and complex arrays). Convert it with x.astype(float), or pass it by keyword if it is a constant."
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


def leaf_gradient(g, primal, returned):
    """The user-facing gradient of a leaf: fitted to the primal's shape and dtype, an array the caller owns."""
    from ._backward import fit  # the sweep's one broadcasting helper

    like = (primal.shape, primal.dtype) if type(primal) is np.ndarray else as_numpy(primal)  # the sweep's fast form
    g = fit(g, like)
    if g is None or _is_tracked_value(g):  # a nested call: this result is itself being differentiated
        return g
    convert = getattr(type(g), "__pullback_convert__", None)
    if convert is not None:  # a pb.jit stand-in: the conversions below, recorded
        traced = getattr(type(primal), "__pullback_traced_value__", None)
        kind = primal if traced is None else traced(primal)  # the argument, or the value it stands for
        if type(kind) is float or type(kind) is complex:
            return convert(g, type(kind))
        if isinstance(kind, np.generic):
            return convert(g, kind.dtype.type)
        if type(kind) is np.ndarray and kind.ndim == 0:
            return convert(g, np.asarray)  # NumPy's arithmetic on 0-d arrays gives scalars
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
