"""See inside arbitrary Python objects, walk them and rebuild them.

Builtin containers, namedtuples, dataclasses (frozen and slotted too), attrs classes
and plain objects (`__dict__`, `__slots__`) need no registration; anything else can
be taught with `register`. A class may name its trainable fields with a method
`trainable(self)` returning field names.

>>> import numpy as np
>>> from pullback import tree
>>> tree.fmap(lambda v: v * 2 if isinstance(v, np.ndarray) else v, {"w": np.ones(2), "n": 3})
{'w': array([2., 2.]), 'n': 3}
"""

import copy
import dataclasses
import enum
import functools
import types

import numpy as np

from ._tangents import Tangent
from ._trace import Traced

__all__ = ["children", "fmap", "leaves", "register", "trainable_names"]


class _Kind:
    """How to list the children of one kind of container and build a new one."""

    def __init__(self, children, rebuild, shell=None, fill=None):
        self.children = children  # x -> {key: child}
        self.rebuild = rebuild  # (x, {key: child}) -> new object
        self.shell = shell  # x -> empty new object, for cyclic graphs (mutable kinds only)
        self.fill = fill  # (shell, {key: child}) -> None


_REGISTERED = {}


def register(cls, children, rebuild):
    """Teach the tree functions (and so `gradient` and the optimisers) to see inside `cls`.

    `children(x)` returns a dict `{name: child}`; `rebuild(x, new_children)` returns a new
    object like `x` with those children.

    >>> import numpy as np
    >>> from pullback import tree
    >>> class Pair:
    ...     __slots__ = ()  # no visible fields: the default rules could not see inside
    ...     def __new__(cls, a, b):
    ...         self = object.__new__(cls); Pair.store[id(self)] = (a, b); return self
    ...     store = {}
    >>> tree.register(Pair, lambda p: dict(zip("ab", Pair.store[id(p)])), lambda p, kids: Pair(kids["a"], kids["b"]))
    >>> sorted(tree.children(Pair(1.0, 2.0)).items())
    [('a', 1.0), ('b', 2.0)]
    """
    _REGISTERED[cls] = _Kind(children, rebuild)


def _seq_children(x):
    return dict(enumerate(x))


def _list_fill(shell, kids):
    shell.extend(kids.values())


def _dict_fill(shell, kids):
    shell.update(kids)


_TUPLE = _Kind(_seq_children, lambda x, kids: tuple(kids.values()))
_NAMEDTUPLE = _Kind(lambda x: dict(zip(x._fields, x)), lambda x, kids: type(x)(*kids.values()))
_LIST = _Kind(_seq_children, lambda x, kids: list(kids.values()), lambda x: [], _list_fill)
_DICT = _Kind(dict, lambda x, kids: _dict_like(x, kids), lambda x: _dict_like(x, {}), _dict_fill)


def _dict_like(x, kids):
    if type(x) is dict:
        return dict(kids)
    new = copy.copy(x)  # keeps a subclass's own state (OrderedDict, defaultdict's factory)
    new.clear()
    new.update(kids)
    return new


# Objects that have a __dict__ but are not data containers.
_OPAQUE = (
    str, bytes, bytearray, int, float, complex, type(None), np.ndarray, np.generic, np.dtype, np.ufunc,
    type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
    types.CodeType, types.GeneratorType, functools.partial, range, slice, type(Ellipsis), enum.Enum,
    np.random.Generator, np.random.BitGenerator, np.random.RandomState, np.random.SeedSequence, Traced,
)


def _field_names(x):
    cls = type(x)
    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls)]
    elif hasattr(cls, "__attrs_attrs__"):
        names = [a.name for a in cls.__attrs_attrs__]
    else:
        names = [s for k in reversed(cls.__mro__) for s in _slots_of(k)]
    instance_dict = getattr(x, "__dict__", None)
    if instance_dict:
        names += [k for k in instance_dict if k not in names]
    return names


def _slots_of(cls):
    slots = cls.__dict__.get("__slots__", ())
    if isinstance(slots, str):
        slots = (slots,)
    return [s for s in slots if s not in ("__dict__", "__weakref__")]


_MISSING = object()


def _object_children(x):
    instance_dict = getattr(x, "__dict__", None) or {}
    kids = {}
    for name in _field_names(x):
        value = instance_dict.get(name, _MISSING)
        if value is _MISSING:
            value = getattr(x, name, _MISSING)  # a slot; an unset one is skipped
        if value is not _MISSING:
            kids[name] = value
    return kids


def _object_shell(x):
    """A new instance of `x`'s class with the same state, made without calling `__init__`."""
    cls = type(x)
    if cls.__new__ is not object.__new__:
        return copy.copy(x)
    new = object.__new__(cls)
    if hasattr(x, "__dict__"):
        new.__dict__.update(x.__dict__)
    for name in (s for k in cls.__mro__ for s in _slots_of(k)):
        value = getattr(x, name, _MISSING)
        if value is not _MISSING:
            object.__setattr__(new, name, value)
    return new


def _object_fill(new, kids):
    instance_dict = getattr(new, "__dict__", None)
    for name, value in kids.items():
        if instance_dict is not None and name in instance_dict:
            instance_dict[name] = value  # bypasses frozen dataclasses and properties
        else:
            object.__setattr__(new, name, value)


def _object_rebuild(x, kids):
    new = _object_shell(x)
    _object_fill(new, kids)
    return new


_OBJECT = _Kind(_object_children, _object_rebuild, _object_shell, _object_fill)


def kind_of(x):
    """The `_Kind` that sees inside `x`, or None when `x` is a leaf."""
    cls = type(x)
    kind = _REGISTERED.get(cls)
    if kind is not None:
        return kind
    if cls is tuple:
        return _TUPLE
    if cls is list:
        return _LIST
    if cls is dict:
        return _DICT
    if isinstance(x, tuple) and hasattr(cls, "_fields"):
        return _NAMEDTUPLE
    if isinstance(x, dict):
        return _DICT
    if isinstance(x, (_OPAQUE, list, tuple)):
        return None
    if hasattr(x, "__dict__") or any(_slots_of(k) for k in cls.__mro__):
        return _OBJECT
    return None


def children(x):
    """The children of `x` as a dict `{name: child}` (indices for sequences); `{}` for a leaf.

    >>> from pullback import tree
    >>> tree.children((1, [2]))
    {0: 1, 1: [2]}
    """
    kind = kind_of(x)
    return {} if kind is None else kind.children(x)


def trainable_names(x):
    """The field names `x` declares trainable through a `trainable(self)` method, or None (all)."""
    method = getattr(type(x), "trainable", None)
    if not callable(method) or isinstance(method, type):
        return None
    names = set(method(x))
    unknown = names - set(children(x))
    if unknown:
        raise ValueError(f"{type(x).__name__}.trainable() names {sorted(unknown)}, which are not fields of the object")
    return names


def _is_cacheable(x):
    return isinstance(x, np.ndarray) or kind_of(x) is not None


def fmap(f, x, *ys, exclude=None):
    """Apply `f(leaf, *matching_leaves_of_ys)` to every leaf of `x` and rebuild `x` around the results.

    Containers whose leaves are all unchanged come back as the same objects. The same
    array or sub-object met twice is visited once and both places get the same result
    (so ties survive); a cycle through mutable objects is rebuilt as a cycle of the new
    objects. `ys` are trees shaped like `x` (or gradients of it:
    `None` and `Tangent` parts are fine). `exclude(node)` marks extra nodes as leaves.

    >>> import numpy as np
    >>> from pullback import tree
    >>> w = np.ones(2)
    >>> new = tree.fmap(lambda a, g: a - g if g is not None else a, (w, w, 1), (None, np.ones(2), None))
    >>> new[0] is new[1]  # the tie survives; the first place's gradient (None) was used
    True
    """
    cache = {}
    in_progress = set()
    shells = {}  # objects met again while still being walked (cycles): their copies, made early

    def walk(x, ys):
        key = id(x)
        if key in cache:
            return cache[key]
        kind = None if exclude is not None and exclude(x) else kind_of(x)
        if kind is None:
            result = f(x, *ys)
        else:
            if key in in_progress:
                if kind.shell is None:
                    return x  # an immutable container in a cycle keeps pointing at the original
                if key not in shells:
                    shells[key] = kind.shell(x)
                return shells[key]
            in_progress.add(key)
            kids = kind.children(x)
            new = {k: walk(v, [_child(y, k) for y in ys]) for k, v in kids.items()}
            in_progress.discard(key)
            shell = shells.pop(key, None)
            if shell is not None:
                kind.fill(shell, new)
                result = shell
            elif any(new[k] is not v for k, v in kids.items()):
                result = kind.rebuild(x, new)
            else:
                result = x
        if _is_cacheable(x):
            cache[key] = result
        return result

    return walk(x, list(ys))


def _child(y, key):
    """The part of `y` (a tree or a gradient of one) at `key`."""
    if y is None:
        return None
    if isinstance(y, Tangent):
        return y._entries.get(key)
    if isinstance(y, dict):
        return y.get(key)
    if isinstance(y, (tuple, list)) and isinstance(key, int):
        return y[key] if key < len(y) else None
    return children(y).get(key)


def leaves(x, exclude=None):
    """The leaves of `x` in walk order; the same object met twice is listed once.

    >>> import numpy as np
    >>> from pullback import tree
    >>> w = np.zeros(1)
    >>> len(tree.leaves({"a": w, "b": [w, 2.0]}))
    2
    """
    found = []
    seen = set()

    def visit(leaf):
        if not _is_cacheable(leaf) or id(leaf) not in seen:
            seen.add(id(leaf))
            found.append(leaf)
        return leaf

    fmap(visit, x, exclude=exclude)
    return found
