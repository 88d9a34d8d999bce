"""See inside arbitrary Python objects, walk them and rebuild them: the one walker of pullback.

Builtin containers and their subclasses, namedtuples (and their subclasses' instance
attributes), dataclasses (frozen and slotted too), attrs classes and plain objects
(`__dict__`, `__slots__`, private `__x` slots as `_Cls__x`) need no registration; anything
else can be taught with `register`. A class may name its trainable fields with a method
`trainable(self)` returning field names (a staticmethod or classmethod will do); a tangent
given for a field it leaves out must be None, zero or the field's own value. Anything that
speaks NumPy's dispatch protocols (`__array_ufunc__`, `__array_function__`) is a leaf; a class
that sets `__array_ufunc__ = None` (NumPy's opt-out) is not.

A list or dict subclass is walked by its entries alone: one whose own attributes hold float
arrays is refused where it is differentiated (register it, naming them, to differentiate
them too); Python numbers there are settings (a timestamp, a rate), as the optimisers take
them, and get no gradient. A function kept in an object (`self.score = lambda x: ...`) is a
leaf; one whose closure or defaults hold a value being differentiated is refused, since it
would read the caller's value rather than the tracked one: make it a method.

The walk is iterative (no recursion limit) and identity-preserving: an object met at
several places is visited once, and a cycle is rebuilt as a cycle. Places are named by
key paths, printed one way everywhere: `.field` for an object's field (or a namedtuple's),
`[i]` for a sequence item, `['key']` for a dict entry.

>>> import numpy as np
>>> from pullback import tree
>>> tree.fmap(lambda v: v * 2 if isinstance(v, np.ndarray) else v, {"w": np.ones(2), "n": 3})
{'w': array([2., 2.]), 'n': 3}
"""

import copy
import dataclasses
import decimal
import enum
import fractions
import functools
import inspect
import io
import logging
import random
import types
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ._tangents import Tangent

__all__ = [
    "children", "fmap", "fmap_values", "leaves", "leaves_with_path", "register", "trainable_names",
    "kind_of", "Kind", "Path", "walk", "gradient_like", "child_of",
]


class Kind:
    """How to list the children of one kind of container and build a new one.

    `fields` says whether children are named fields (printed `.name` in paths) rather than items.
    """

    def __init__(self, children, rebuild, shell=None, fill=None, fields=False):
        self.children = children  # x -> {key: child}
        self.rebuild = rebuild  # (x, {key: child}) -> new object
        self.shell = shell  # x -> empty new object, for cyclic graphs (mutable kinds only)
        self.fill = fill  # (shell, {key: child}) -> None
        self.fields = fields


_REGISTERED: dict[type, Kind] = {}


def register(cls: type, children: Callable[[Any], dict], rebuild: Callable[[Any, dict], Any]) -> None:
    """Teach the tree functions (and so `gradient` and the optimisers) to see inside `cls`.

    `children(x)` returns a dict `{name: child}`; `rebuild(x, new_children)` returns a new
    object like `x` with those children. The children must be the objects `x` holds: a float
    array made at each call (a view `x.buf[:4]`, a copy) or a number in a container made at each
    call is refused, since pullback finds them by identity.

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

    A subclass is seen through its nearest registered base class unless it may hold storage the
    base's `children` could not know (slots of its own, or a `__dict__` its `__init__` may add to):
    one with a `__dict__` is walked as a plain object, field by field; one with slots only is a leaf
    until it is registered too, and refused where it is differentiated.
    """
    _REGISTERED[cls] = Kind(functools.partial(_stable_children, cls, children), rebuild, fields=True)
    _KIND_OF_CLASS.clear()


def _stable_children(cls, children, x):
    """`children(x)`, refused where a second call gives new float arrays (views or copies computed from
    the object's fields) or new containers holding numbers: every walk finds arrays and containers by
    identity, so those would silently get no gradient, or another's, or no optimiser step."""
    kids = children(x)
    moving = _moving_part(kids, children(x), ROOT)
    if moving is not None:
        place, what = moving
        raise TypeError(
            f"pb.tree.register({cls.__qualname__}, children, rebuild): children(x) makes a new {what} at "
            f"{place.format('x')} at each call. pullback finds arrays and containers by identity, so it would "
            "silently get no gradient (or another's) and no optimiser step. Return the objects the "
            f"{cls.__qualname__} holds (register the buffer a view is taken from, not the view), and compute "
            "views and copies inside its methods.")
    return kids


def _moving_part(kids, again, path, container=None, fields=True):
    """The first `(path, what)` where `again` (a second call's children) does not hold the same float array,
    or a container holding the same, as `kids`; None where every part is stable."""
    for k, v in kids.items():
        place = path.child(k, fields)
        if _is_number(v):
            if container is not None:  # in a new container: a number's place is found by its container's identity
                return path, f"{type(container).__name__} holding the number {v!r}"
            continue
        w = again.get(k, _MISSING) if isinstance(again, dict) else _MISSING
        if v is w:
            continue
        kind = kind_of(v)
        if kind is None:
            if _speaks_numpy(type(v)) and getattr(getattr(v, "dtype", None), "kind", None) in ("f", "c"):
                return place, f"{type(v).__name__} (a view or a copy)"
            continue
        if type(w) is not type(v):
            return place, type(v).__name__
        found = _moving_part(kind.children(v), kind.children(w), place, v, kind.fields)
        if found is not None:
            return found
    return None


def _is_number(v):
    """A float or complex value (Python's, NumPy's scalar, or one pb.jit traces): a leaf that is a value."""
    if isinstance(v, (float, complex, np.inexact)):
        return True
    return hasattr(type(v), "__pullback_value__") and v.__class__ in (float, complex)


def registered_base(cls: type) -> "type | None":
    """The registered class `cls` derives from, for a subclass that is not registered itself, or None."""
    if cls in _REGISTERED:
        return None
    return next((base for base in cls.__mro__[1:] if base in _REGISTERED), None)


def _registered_kind(cls):
    """The `Kind` registered for `cls`, or for its nearest registered base class when `cls` adds no storage."""
    kind = _REGISTERED.get(cls)
    base = registered_base(cls) if kind is None and _REGISTERED else None
    if base is None or _adds_storage(cls, base):
        return kind
    return _REGISTERED[base]


def _adds_storage(cls, base):
    """Whether instances of `cls` may hold state that the registration of its base class `base` does not
    list: slots of its own, or a `__dict__` (whose attributes a subclass's `__init__` may add to; such a
    class is walked as a plain object, field by field, as it was before `base` was registered)."""
    between = cls.__mro__[:cls.__mro__.index(base)]
    return any(_slots_of(k) for k in between) or cls.__dictoffset__ != 0


class Path:
    """A place inside an object: a sequence of `(key, is_field)` steps, printed the one way.

    Each path links to its parent, so a walk makes a child path in constant time however
    deep it goes; it reads like a tuple of steps (`len`, indexing, iteration, equality).

    >>> from pullback.tree import Path
    >>> str(Path(()).child("layers", True).child(1, False).child("w", True))
    '.layers[1].w'
    >>> Path(()).child("b", False).format("model")
    "model['b']"
    """

    __slots__ = ("parent", "key", "is_field", "length")
    parent: "Path | None"
    key: Any
    is_field: bool
    length: int

    def __init__(self, steps: Any = ()) -> None:
        if isinstance(steps, Path):
            self.parent, self.key, self.is_field, self.length = steps.parent, steps.key, steps.is_field, steps.length
            return
        self.parent, self.key, self.is_field, self.length = None, None, False, 0
        for key, is_field in steps:
            self.parent, self.key, self.is_field, self.length = Path(self), key, is_field, self.length + 1

    def child(self, key: Any, is_field: bool) -> "Path":
        path = object.__new__(Path)
        path.parent, path.key, path.is_field, path.length = self, key, is_field, self.length + 1
        return path

    def steps(self) -> tuple:
        """The `(key, is_field)` steps from the root."""
        found = []
        node = self
        while node.length:
            found.append((node.key, node.is_field))
            node = node.parent  # type: ignore[assignment]  # only the root (length 0) has no parent
        return tuple(reversed(found))

    @property
    def keys(self) -> tuple:
        """The keys alone, e.g. `('layers', 1, 'w')`."""
        return tuple(k for k, _ in self.steps())

    def format(self, root: str = "") -> str:
        parts = [root]
        for key, is_field in self.steps():
            parts.append(f".{key}" if is_field and isinstance(key, str) and key.isidentifier() else f"[{key!r}]")
        return "".join(parts)

    def __len__(self):
        return self.length

    def __iter__(self):
        return iter(self.steps())

    def __getitem__(self, index):
        return self.steps()[index]

    def __eq__(self, other):
        if isinstance(other, Path):
            return self.length == other.length and self.steps() == other.steps()
        return isinstance(other, tuple) and self.steps() == other

    def __hash__(self):
        return hash(self.steps())

    def __str__(self):
        return self.format()

    def __repr__(self):
        return f"Path({self.format()!r})"


ROOT = Path(())


def _seq_children(x):
    return dict(enumerate(x))


def _list_fill(shell, kids):
    shell.extend(kids.values())


def _dict_fill(shell, kids):
    shell.update(kids)


_TANGENT = Kind(lambda t: dict(t._entries), lambda t, kids: Tangent._make(t.primal_type, dict(kids)), fields=True)
_TUPLE = Kind(_seq_children, lambda x, kids: tuple(kids.values()))
_NAMEDTUPLE = Kind(lambda x: _namedtuple_children(x), lambda x, kids: _namedtuple_like(x, kids), fields=True)
_LIST = Kind(_seq_children, lambda x, kids: _list_like(x, kids), lambda x: _list_like(x, {}), _list_fill)
_DICT = Kind(dict, lambda x, kids: _dict_like(x, kids), lambda x: _dict_like(x, {}), _dict_fill)


def _namedtuple_children(x):
    kids = dict(zip(x._fields, x))
    kids.update(getattr(x, "__dict__", ()))  # a subclass without __slots__ = () has instance attributes
    return kids


def _namedtuple_like(x, kids):
    fields = x._fields
    new = type(x)._make([kids[k] for k in fields])  # _make, not __new__, which a subclass may redefine
    if len(kids) > len(fields):
        new.__dict__.update({k: v for k, v in kids.items() if k not in fields})
    return new


def _copy_of(x, new_empty):
    """A copy of container `x` by the copy protocol, so that a subclass keeps its own state; where
    `__copy__` gives `x` itself (as an immutable type's does), `new_empty(type(x))` with `x`'s attributes."""
    new = copy.copy(x)
    if new is x:
        new = new_empty(type(x))
        if hasattr(x, "__dict__") and x.__dict__ is not x:
            new.__dict__.update(x.__dict__)
    if getattr(x, "__dict__", None) is x:  # the AttrDict recipe, `self.__dict__ = self`: the copy is its own too
        new.__dict__ = new
    return new


def _dict_like(x, kids):
    if type(x) is dict:
        return dict(kids)
    new = _copy_of(x, dict.__new__)  # keeps a subclass's own state (OrderedDict, defaultdict's factory)
    new.clear()
    new.update(kids)
    return new


def _list_like(x, kids):
    if type(x) is list:
        return list(kids.values())
    new = _copy_of(x, list.__new__)  # a list subclass keeps its own attributes
    new[:] = kids.values()
    return new


# Objects that have a __dict__ or slots but are not data containers.
_OPAQUE = (
    str, bytes, bytearray, int, float, complex, type(None), np.ndarray, np.generic, np.dtype, np.ufunc,
    type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
    types.CodeType, types.GeneratorType, functools.partial, range, slice, type(Ellipsis), enum.Enum,
    np.random.Generator, np.random.BitGenerator, np.random.RandomState, np.random.SeedSequence,
    decimal.Decimal, fractions.Fraction, random.Random,
    io.IOBase, logging.Logger, logging.Handler, logging.Manager,  # streams and logging's shared objects, not data
)


@functools.lru_cache(maxsize=None)
def _declared_fields(cls):
    """The fields a class declares: dataclass or attrs fields, or slots."""
    slots = tuple(s for k in reversed(cls.__mro__) for s in _slots_of(k))
    if dataclasses.is_dataclass(cls):
        declared = tuple(f.name for f in dataclasses.fields(cls))
    elif hasattr(cls, "__attrs_attrs__"):
        declared = tuple(a.name for a in cls.__attrs_attrs__)
    else:
        return slots
    return declared + tuple(s for s in slots if s not in declared)  # slots a plain base class declares


def _attribute(x, name, default=None):
    """`getattr(x, name, default)` without the class's `__getattr__`, which a class may make raise what
    is not an AttributeError, or answer for every name."""
    if not hasattr(type(x), "__getattr__"):  # nothing of the class's to pass over: the builtin look-up
        return getattr(x, name, default)
    try:
        return object.__getattribute__(x, name)
    except AttributeError:
        return default


_MISSING = object()


def _instance_dict(x):
    """`x.__dict__`, or None (a slotted object; a class's `__getattr__` is not asked)."""
    try:
        return x.__dict__
    except AttributeError:
        return None
    except Exception:  # a __getattr__ raising what is not an AttributeError (asked where there is none)
        return _attribute(x, "__dict__")


def _field_names(x, instance_dict=_MISSING):
    declared = _declared_fields(type(x))
    instance_dict = _instance_dict(x) if instance_dict is _MISSING else instance_dict
    if not instance_dict:
        return declared
    if not declared:
        return tuple(instance_dict)
    return declared + tuple(k for k in instance_dict if k not in declared)


def _slots_of(cls):
    """The attribute names of the slots `cls` itself declares (`__w` is stored as `_Cls__w`)."""
    slots = cls.__dict__.get("__slots__", ())
    if isinstance(slots, str):
        slots = (slots,)
    prefix = "_" + cls.__name__.lstrip("_")
    return [prefix + s if s.startswith("__") and not s.endswith("__") and prefix != "_" else s
            for s in slots if s not in ("__dict__", "__weakref__")]


def _object_children(x):
    instance_dict = _instance_dict(x) or {}
    kids = {}
    for name in _field_names(x, instance_dict):
        value = instance_dict.get(name, _MISSING)
        if value is _MISSING:
            value = _attribute(x, name, _MISSING)  # a slot; an unset one is skipped
        if value is not _MISSING:
            kids[name] = value
    return kids


def _object_shell(x):
    """A new instance of `x`'s class with the same state, made without calling `__init__`.

    A class whose `__new__` needs arguments is copied through the copy protocol (`__copy__`,
    `__reduce_ex__`, `__getnewargs__`), and failing that made by `object.__new__`.
    """
    cls = type(x)
    if cls.__new__ is not object.__new__:
        try:
            new = copy.copy(x)
        except TypeError as error:
            try:
                new = object.__new__(cls)
            except TypeError:
                raise TypeError(
                    f"Cannot rebuild a {cls.__qualname__} to differentiate it: its __new__ needs arguments "
                    f"({error}). Give the class a __getnewargs__ or __copy__ method, or teach pullback its "
                    "fields with pullback.tree.register(cls, children, rebuild)."
                ) from error
        if new is not x:
            return new
    new = object.__new__(cls)  # also where __copy__ gives the object itself
    instance_dict = _attribute(x, "__dict__")
    if instance_dict is not None:
        object.__getattribute__(new, "__dict__").update(instance_dict)
    for name in (s for k in cls.__mro__ for s in _slots_of(k)):
        value = _attribute(x, name, _MISSING)
        if value is not _MISSING:
            object.__setattr__(new, name, value)
    return new


def _object_fill(new, kids):
    instance_dict = _attribute(new, "__dict__")
    for name, value in kids.items():
        if instance_dict is not None and name in instance_dict:
            instance_dict[name] = value  # bypasses frozen dataclasses and properties
        else:
            object.__setattr__(new, name, value)


def _object_rebuild(x, kids):
    new = _object_shell(x)
    _object_fill(new, kids)
    return new


_OBJECT = Kind(_object_children, _object_rebuild, _object_shell, _object_fill, fields=True)


def kind_of(x: Any) -> "Kind | None":
    """The `Kind` that sees inside `x`, or None when `x` is a leaf.

    >>> from pullback import tree
    >>> tree.kind_of([1]) is not None, tree.kind_of(1.0)
    (True, None)
    """
    cls = type(x)
    try:
        return _KIND_OF_CLASS[cls]
    except KeyError:
        pass
    except TypeError:  # an unhashable class
        return _kind_of_class(cls, x)
    kind = _KIND_OF_CLASS[cls] = _kind_of_class(cls, x)
    return kind


_KIND_OF_CLASS: dict[type, "Kind | None"] = {}


def _kind_of_class(cls, x):
    """`kind_of` for an instance `x` of `cls`; it depends only on the class, so `kind_of` keeps it."""
    kind = _registered_kind(cls)
    if kind is not None:
        return kind
    if cls is tuple:
        return _TUPLE
    if cls is list:
        return _LIST
    if cls is dict:
        return _DICT
    if cls is Tangent:
        return _TANGENT
    if isinstance(x, tuple) and hasattr(cls, "_fields"):
        return _NAMEDTUPLE
    if isinstance(x, dict):
        return _DICT
    if isinstance(x, list):
        return _LIST
    if isinstance(x, (_OPAQUE, tuple)) or _speaks_numpy(cls) or hasattr(cls, "__dlpack__"):  # (a torch tensor)
        return None
    if _attribute(x, "__dict__") is not None or any(_slots_of(k) for k in cls.__mro__):
        return _OBJECT
    return None


def _speaks_numpy(cls: Any) -> bool:
    """Array types of any library, pullback's own traced values, and the numbers `pb.jit` traces
    (which define `__pullback_value__`) are leaves."""
    found = _SPEAKS_NUMPY.get(cls)
    if found is None:
        found = _SPEAKS_NUMPY[cls] = (
            # `__array_ufunc__ = None` is NumPy's opt-out (NEP 13): an object that is not an array
            getattr(cls, "__array_ufunc__", None) is not None or hasattr(cls, "__array_function__")
            or hasattr(cls, "__array_namespace__") or hasattr(cls, "__pullback_value__")
            or getattr(cls, "__pullback_leaf__", False))  # pb.jit's stand-in for a random generator
    return found


_SPEAKS_NUMPY: dict[Any, bool] = {}


def children(x: Any) -> dict:
    """The children of `x` as a dict `{name: child}` (indices for sequences); `{}` for a leaf.

    >>> from pullback import tree
    >>> tree.children((1, [2]))
    {0: 1, 1: [2]}
    """
    kind = kind_of(x)
    return {} if kind is None else kind.children(x)


def trainable_names(x: Any, kids: dict | None = None) -> "set[str] | None":
    """The field names `x` declares trainable through a `trainable(self)` method, or None (all).

    >>> from pullback import tree
    >>> class Layer:
    ...     def __init__(self): self.w, self.stats = 1.0, 2.0
    ...     def trainable(self): return ("w",)
    >>> tree.trainable_names(Layer())
    {'w'}
    """
    method = getattr(type(x), "trainable", None)
    if method is None or isinstance(method, type):
        return None
    if not callable(method):  # `trainable = ("w",)` or a property: read as "all fields" it would train frozen ones
        if "trainable" in (children(x) if kids is None else kids):
            return None  # a field of that name (a dataclass's `trainable: bool`) is data, not a declaration
        raise TypeError(f"{type(x).__name__}.trainable is {type(method).__name__} {method!r}, not a method; declare "
                        "the trainable fields with a method: def trainable(self): return ('w', 'b')")
    # a plain function is a method, called with x (the common case, kept fast); other descriptors bound as Python does
    declared = method(x) if type(method) is types.FunctionType and not _static(type(x)) else _bound_to(x, "trainable")()
    if isinstance(declared, str):  # set("wb") would be {"w", "b"}
        raise TypeError(f"{type(x).__name__}.trainable() returned the string {declared!r}; it should return a "
                        f"tuple of field names, such as ({declared!r},)")
    names = set(declared)
    unknown = names - set(children(x) if kids is None else kids)
    if unknown:
        raise ValueError(f"{type(x).__name__}.trainable() names {sorted(unknown)}, which are not fields of the object")
    return names


def _static(cls):
    """Whether `cls.trainable` is a staticmethod (class access gives its plain function, not to be given x)."""
    raw = vars(cls).get("trainable")  # defined by the class itself: the common case, one look-up
    if raw is None:
        raw = next((vars(k)["trainable"] for k in cls.__mro__ if "trainable" in vars(k)), None)
    return isinstance(raw, staticmethod)


def _bound_to(x, name):
    """The class attribute `name` as `x.name` binds it (a staticmethod or classmethod too), without an
    instance attribute of that name shadowing it; a callable without `__get__` is given `x`."""
    cls = type(x)
    raw = next((vars(k)[name] for k in cls.__mro__ if name in vars(k)), None)  # inspect.getattr_static's answer,
    if raw is None:                                                          # for the common case, cheaply
        raw = inspect.getattr_static(cls, name, None)
    if raw is None:  # given by the metaclass's __getattr__: as `type(x).name` gives it, bound to x as Python would
        raw = getattr(cls, name)
        return raw if inspect.ismethod(raw) else functools.partial(raw, x)
    get = getattr(type(raw), "__get__", None)
    return get(raw, x, cls) if get is not None else functools.partial(raw, x)


def is_cacheable(x):
    """Whether `x` has an identity worth keeping: arrays and containers (not numbers or strings)."""
    return isinstance(x, np.ndarray) or _speaks_numpy(type(x)) or kind_of(x) is not None


def child_of(y: Any, key: Any) -> Any:
    """The part of `y` (a tree or a gradient of one) at `key`; None where it has none.

    >>> from pullback import tree
    >>> tree.child_of({"a": 1}, "a"), tree.child_of(None, "a")
    (1, None)
    """
    if y is None:
        return None
    if isinstance(y, Tangent):
        return y._entries.get(key)
    if isinstance(y, dict):
        return y.get(key)
    if isinstance(y, (tuple, list)) and isinstance(key, int) and not hasattr(type(y), "_fields"):
        return y[key] if key < len(y) else None
    return children(y).get(key)


def check_mirrors(value: Any, kids: dict, part: Any, what: str) -> None:
    """Refuse `part`, a cotangent or tangent given for the container `value` (children `kids`),
    unless it has exactly `value`'s entries: a missing one would count as zero and an extra one
    (a misspelt key) be dropped, both silently. A None part, or None entries, say zero.

    >>> from pullback import tree
    >>> tree.check_mirrors({"a": 1.0}, {"a": 1.0}, {"b": 2.0}, "the cotangent of the output")
    Traceback (most recent call last):
    TypeError: the cotangent of the output should have one part for each of ['a'] (None where it is zero); got a dict of ['b'].
    """
    if part is None:
        return
    if isinstance(part, Tangent):
        same = set(part._entries) <= set(kids)  # a Tangent leaves out the fields that carry nothing
    elif isinstance(part, dict):
        same = set(part) == set(kids)
    elif isinstance(part, (tuple, list)) and not hasattr(type(part), "_fields"):
        same = list(range(len(part))) == list(kids)
    else:
        same = kind_of(part) is not None and set(children(part)) == set(kids)
    if not same:
        got = list(part._entries) if isinstance(part, Tangent) else list(part) if isinstance(part, dict) else None
        described = (f"a {type(part).__name__} of {got}" if got is not None
                     else f"a {type(part).__name__} of {len(part)}" if isinstance(part, (tuple, list))
                     else f"a {type(part).__name__}")
        raise TypeError(f"{what} should have one part for each of {list(kids)} (None where it is zero); got {described}.")


# --- the walker ------------------------------------------------------------------------------
_ENTER, _EXIT = 0, 1


def walk(x: Any, leaf: Callable[..., Any], node: Callable[..., Any], *, ys: tuple = (), exclude: Callable[[Any], bool] | None = None,
         trainable_only: bool = False, repeat: Callable[..., Any] | None = None, cycle: Callable[..., Any] | None = None,
         frozen: Callable[..., Any] | None = None) -> Any:
    """The one walk every other tree function is made of: post-order, iterative, identity-preserving.

    - `leaf(value, ys, path)` gives the result for a leaf (`ys`: the matching parts of `ys`);
    - `node(value, kind, old_children, new_children, ys, path, shell)` gives a container's result
      from its children's results; `shell` is the placeholder handed out for a cycle, or None;
    - `repeat(value, first_result, ys, path)` gives the result at a later place of an array or
      container already visited (default: the same result, so ties survive);
    - `cycle(value, kind, path)` gives the placeholder for a reference back to a container still
      being walked (default: `kind.shell(value)`, or the value itself for immutable kinds);
    - `frozen(value, ys, path)` gives the result for a child its parent's `trainable()` leaves out,
      when `trainable_only` (default: the child unchanged, not walked).

    >>> from pullback import tree
    >>> tree.walk([1, (2, 3)], lambda v, ys, p: str(p), lambda v, k, old, new, ys, p, s: list(new.values()))
    ['[0]', ['[1][0]', '[1][1]']]
    """
    cache = {}
    alive: list[dict] = []
    in_progress: set[int] = set()
    shells: dict[int, Any] = {}
    box: dict[Any, Any] = {}
    stack: list[tuple[Any, ...]] = [(_ENTER, x, tuple(ys), ROOT, box, None)]
    while stack:
        item = stack.pop()
        if item[0] == _EXIT:
            _, value, kind, old, new, parts, path, dest, key, reorder = item
            ident = id(value)
            in_progress.discard(ident)
            if reorder:  # frozen children arrived first; restore the order
                new = {k: new[k] for k in old}
            result = node(value, kind, old, new, parts, path, shells.pop(ident, None))
            cache[ident] = result
            alive.append(old)  # ids are the cache's keys: children made by a call must outlive the walk
            dest[key] = result
            continue
        _, value, parts, path, dest, key = item
        ident = id(value)
        if ident in cache:
            first = cache[ident]
            dest[key] = first if repeat is None else repeat(value, first, parts, path)
            continue
        kind = None if exclude is not None and exclude(value) else kind_of(value)
        if kind is None:
            result = leaf(value, parts, path)
            if _speaks_numpy(type(value)) or (exclude is not None and kind_of(value) is not None):
                cache[ident] = result  # arrays (and containers taken as leaves) keep their identity
            dest[key] = result
            continue
        if ident in in_progress:
            if ident not in shells:
                shells[ident] = _placeholder(value, kind, path, cycle)
            dest[key] = shells[ident]
            continue
        in_progress.add(ident)
        old = kind.children(value)
        names = trainable_names(value, old) if trainable_only else None
        new = {}
        reorder = names is not None and any(k not in names for k in old)
        stack.append((_EXIT, value, kind, old, new, parts, path, dest, key, reorder))
        for k in reversed(list(old)):
            child = old[k]
            child_path = path.child(k, kind.fields)
            child_parts = tuple([child_of(y, k) for y in parts]) if parts else ()
            if names is not None and k not in names:
                new[k] = child if frozen is None else frozen(child, child_parts, child_path)
            else:
                stack.append((_ENTER, child, child_parts, child_path, new, k))
    return box[None]


def _placeholder(value, kind, path, cycle):
    if cycle is not None:
        return cycle(value, kind, path)
    return kind.shell(value) if kind.shell is not None else value


def _rebuild_node(value, kind, old, new, parts, path, shell):
    """A container's copy holding `new` children; the container itself when nothing changed."""
    if shell is not None and shell is not value:
        kind.fill(shell, new)
        rebind_methods(value, shell, new)
        return shell
    if any(new[k] is not v for k, v in old.items()):
        copy = kind.rebuild(value, new)
        rebind_methods(value, copy, new)
        return copy
    return value


def rebind_methods(value: Any, copy: Any, kids: dict) -> list:
    """Bind the methods `copy`'s fields hold that are bound to `value` (`self.act = self.relu`) to
    `copy` instead, as a copy of the object made by Python would; returns those methods.

    >>> from pullback import tree
    >>> class Net:
    ...     def __init__(self): self.w, self.act = 1.0, self.relu
    ...     def relu(self, z): return max(z, 0.0)
    >>> net = Net()
    >>> new = tree.fmap(lambda v: 2.0 if v == 1.0 else v, net)
    >>> new.act.__self__ is new
    True
    """
    found = []
    for k, child in kids.items():
        if type(child) is types.MethodType and child.__self__ is value and copy is not value:
            found.append(child)
            method = types.MethodType(child.__func__, copy)
            if isinstance(copy, dict):
                copy[k] = method
            elif not isinstance(copy, (tuple, list)):
                object.__setattr__(copy, k, method)
    return found


def fmap(f: Callable[..., Any], x: Any, *ys: Any, exclude: Callable[[Any], bool] | None = None, trainable_only: bool = False,
         check: bool = True) -> Any:
    """Apply `f(leaf, *matching_leaves_of_ys)` to every leaf of `x` and rebuild `x` around the results.

    Containers whose leaves are all unchanged come back as the same objects. The same
    array or sub-object met twice is visited once and both places get the same result
    (so ties survive); a cycle through mutable objects is rebuilt as a cycle of the new
    objects. `ys` are trees shaped like `x` (or gradients of it: `None` and `Tangent`
    parts are fine). `exclude(node)` marks extra nodes as leaves; with `trainable_only`
    the fields a `trainable()` method leaves out are kept as they are. A part of `ys` with an
    entry its container in `x` lacks (a misspelt key, a longer list) is refused, naming the
    place, rather than dropped (`check=False` lets it pass: an old optimiser state read alongside
    one whose rule changed its layout); an entry it lacks is read as None.

    >>> import numpy as np
    >>> from pullback import tree
    >>> w = np.ones(2)
    >>> new = tree.fmap(lambda a, g: a - g if g is not None else a, (w, w, 1), (None, np.ones(2), None))
    >>> new[0] is new[1]  # the tie survives; the first place's gradient (None) was used
    True
    >>> tree.fmap(lambda a, g: a - g, {"w": 1.0}, {"w": 1.0, "bias": 5.0})
    Traceback (most recent call last):
    TypeError: The part of tree 2 at x has an entry ['bias'] that the dict there lacks, which would be dropped; it has ['w'].
    """
    node = _rebuild_matched_node if ys and check else _rebuild_node
    return walk(x, lambda v, parts, path: f(v, *parts), node, ys=ys, exclude=exclude, trainable_only=trainable_only)


def _rebuild_matched_node(value, kind, old, new, parts, path, shell):
    """`_rebuild_node`, once the parts of the other trees have been checked to have no entry `value` lacks."""
    for j, part in enumerate(parts):
        if part is not None and not isinstance(part, Tangent) and kind_of(part) is None:
            raise TypeError(f"The part of tree {j + 2} at {path.format('x')} is a {type(part).__name__}, where tree 1 "
                            f"has a {type(value).__name__}: it would be dropped.")
        extra = [k for k in _entries(part) if k not in old]
        if extra:
            raise TypeError(f"The part of tree {j + 2} at {path.format('x')} has an entry {extra} that the "
                            f"{type(value).__name__} there lacks, which would be dropped; it has {list(old)}.")
    return _rebuild_node(value, kind, old, new, parts, path, shell)


def _entries(part):
    """The keys of a part of a tree `fmap` reads alongside (none for a leaf or None)."""
    if isinstance(part, Tangent):
        return list(part._entries)
    if isinstance(part, dict):
        return list(part)
    if isinstance(part, (tuple, list)) and not hasattr(type(part), "_fields"):
        return list(range(len(part)))
    return list(children(part))


def fmap_values(f: Callable[[Any], Any], x: Any) -> Any:
    """`fmap(f, x)` that also rebuilds the containers pb.tree does not see inside (a deque, a tuple
    subclass that is not a namedtuple) when `f` changes what they hold: for what a function returns,
    where a traced value must not come back hidden in one. One that cannot be rebuilt is refused.

    >>> from collections import deque
    >>> from pullback import tree
    >>> tree.fmap_values(lambda v: v * 2 if isinstance(v, float) else v, {"q": deque([1.0], maxlen=3)})
    {'q': deque([2.0], maxlen=3)}
    """
    # the hidden containers being mapped: one that holds itself is left as it is
    return fmap(functools.partial(_value_leaf, f, set()), x)


def _value_leaf(f, active, v):
    """`fmap_values`'s leaf function (a module function: a closure calling itself would be a reference cycle)."""
    items = _hidden_items(v)
    if items is None:
        return f(v)
    if id(v) in active:
        return v
    active.add(id(v))
    try:
        new = [fmap(functools.partial(_value_leaf, f, active), item) for item in items]
    finally:
        active.discard(id(v))
    return v if all(a is b for a, b in zip(new, items)) else _rebuild_hidden(v, new)


def _hidden_items(v):
    """The items of a container pb.tree does not see inside and `fmap_values` rebuilds, else None."""
    if isinstance(v, deque) or (isinstance(v, tuple) and kind_of(v) is None):
        return list(v)
    return None


def _rebuild_hidden(v, items):
    """A container like `v` (a deque, a tuple subclass) holding `items`, keeping its type and attributes."""
    if isinstance(v, deque):
        new = copy.copy(v)  # keeps maxlen and a subclass's state
        new.clear()
        new.extend(items)
        return new
    try:
        new = type(v)(items)
    except Exception as error:
        new = error
    # compared by identity: == of arrays is elementwise
    if not isinstance(new, tuple) or len(new) != len(items) or any(a is not b for a, b in zip(new, items)):
        raise TypeError(
            f"A {type(v).__qualname__} (a tuple subclass) holds values being differentiated, and cannot be rebuilt "
            f"as {type(v).__qualname__}(items) around their plain values. Return a tuple, or register the class "
            "with pb.tree.register.")
    if getattr(v, "__dict__", None):
        new.__dict__.update(v.__dict__)
    return new


def copy_node(value, kind, new, shell):
    """A new container like `value` holding `new` (filling `shell` when a cycle needed one early)."""
    if shell is not None and shell is not value:
        kind.fill(shell, new)
        return shell
    return kind.rebuild(value, new)


def copy_cycle(value, kind, path):
    """The placeholder for a back reference met while copying: an empty new container."""
    if kind.shell is None:
        raise TypeError(
            f"The object at {path.format('x')} is an immutable container ({type(value).__name__}) that "
            "contains itself through a mutable one; it cannot be copied."
        )
    return kind.shell(value)


def copy_containers(x: Any, f: Callable[[Any, "Path"], Any]) -> Any:
    """A copy of `x` in which every container is new and each leaf is `f(leaf, path)`.

    Shared sub-objects stay shared (one copy each) and cycles stay cycles, so the copy
    behaves like the original under mutation, without touching it.

    >>> from pullback import tree
    >>> inner = [1]
    >>> outer = [inner, inner]
    >>> new = tree.copy_containers(outer, lambda v, path: v)
    >>> new[0] is new[1], new[0] is inner
    (True, False)
    """

    def node(value, kind, old, new, parts, path, shell):
        return copy_node(value, kind, new, shell)

    return walk(x, lambda v, parts, path: f(v, path), node, cycle=copy_cycle)


def leaves_with_path(x: Any, exclude: Callable[[Any], bool] | None = None, trainable_only: bool = False) -> "list[tuple[Path, Any]]":
    """`(path, leaf)` pairs in walk order; an array or object met twice is listed at its first place.

    >>> import numpy as np
    >>> from pullback import tree
    >>> [(str(p), v) for p, v in tree.leaves_with_path({"a": 1.0, "b": [2.0]})]
    [("['a']", 1.0), ("['b'][0]", 2.0)]
    """
    found = []

    def visit(v, parts, path):
        found.append((path, v))

    walk(x, visit, lambda *a: None, exclude=exclude, trainable_only=trainable_only, cycle=lambda *a: None)
    return found


def leaves(x: Any, exclude: Callable[[Any], bool] | None = None, trainable_only: bool = False) -> list:
    """The leaves of `x` in walk order; the same object met twice is listed once.

    >>> import numpy as np
    >>> from pullback import tree
    >>> w = np.zeros(1)
    >>> len(tree.leaves({"a": w, "b": [w, 2.0]}))
    2
    """
    return [v for _, v in leaves_with_path(x, exclude, trainable_only)]


def mirror(x: Any, kids: dict) -> Any:
    """A node shaped like a gradient of `x`, holding `kids`: tuple, list, namedtuple, dict or `Tangent`.

    >>> from pullback import tree
    >>> tree.mirror((1, 2), {0: None, 1: 3.0})
    (None, 3.0)
    """
    cls = type(x)
    if cls is tuple or cls is list:
        return cls(kids.values())
    if _registered_kind(cls) is not None and not (isinstance(x, (tuple, list)) and _are_items(x, kids)):
        return Tangent._make(cls, kids)  # named children, even for a registered list or dict subclass
    if isinstance(x, tuple) and hasattr(cls, "_fields"):
        return _namedtuple_like(x, kids)
    if isinstance(x, tuple):
        return tuple(kids.values())
    if isinstance(x, list):
        return list(kids.values())
    if isinstance(x, dict):
        return dict(kids)
    return Tangent._make(x.primal_type if cls is Tangent else cls, kids)


def _are_items(x, kids):
    """Whether the children of sequence `x` are its items, in order (the gradient may then be a sequence)."""
    return len(kids) == len(x) and all(k == i for i, k in enumerate(kids))


def gradient_like(x: Any, f: Callable[[Any, "Path"], Any], exclude: Callable[[Any], bool] | None = None) -> Any:
    """A tree shaped like a gradient of `x`: `f(leaf, path)` at each trainable leaf.

    An array or object met at several places gets its result at the first place and `None`
    at the others (so nothing is counted twice); a container whose parts are all `None` is
    `None`; objects become `Tangent`s. Fields a `trainable()` method leaves out are `None`.

    >>> import numpy as np
    >>> from pullback import tree
    >>> w = np.ones(1)
    >>> tree.gradient_like({"a": w, "b": w, "n": "s"}, lambda v, path: str(path) if v is w else None)
    {'a': "['a']", 'b': None, 'n': None}
    """

    def node(value, kind, old, new, parts, path, shell):
        if all(v is None for v in new.values()):
            return None
        return mirror(value, new)

    return walk(
        x, lambda v, parts, path: f(v, path), node, exclude=exclude, trainable_only=True,
        repeat=lambda v, first, parts, path: None, cycle=lambda v, kind, path: None,
        frozen=lambda v, parts, path: None,
    )
