"""Cotangent values: lazy thunks, structural tangents, and accumulation.

`None` is the only zero: adding `None` to anything returns that thing unchanged.
"""

import functools
import operator
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["Thunk", "InplaceableThunk", "PerOperand", "unthunk", "accum", "Tangent"]


class Thunk(functools.partial):
    """A cotangent computed only when somebody asks for it: `Thunk(fn, *args)` stands for `fn(*args)`.

    (A `functools.partial`, so making one and evaluating it cost little: rules make many.)

    >>> import numpy as np, pullback as pb
    >>> t = pb.Thunk(lambda: np.ones(2))
    >>> pb.unthunk(t)
    array([1., 1.])
    """

    __slots__ = ()

    def unthunk(self):
        value = self()
        while isinstance(value, Thunk):  # a rule may hand back a thunk from its thunk
            value = value()
        return value

    def __repr__(self):
        return f"{type(self).__name__}({getattr(self.func, '__qualname__', 'fn')})"


class InplaceableThunk(Thunk):
    """A thunk that can also add itself into an existing buffer without allocating.

    `add_into(buffer)` must add the cotangent into `buffer` in place and return it;
    `fn()` computes the cotangent on its own. The sweep calls `add_into` only with a NumPy
    buffer, and only where it computes plain NumPy values; at higher order (the cotangent is
    itself differentiated) and under `pb.jit` it adds `fn()`'s value instead.

    >>> import numpy as np, pullback as pb
    >>> t = pb.InplaceableThunk(lambda buf: np.add(buf, 1.0, out=buf), lambda: np.ones(2))
    >>> t.add_into(np.zeros(2))
    array([1., 1.])
    """

    def __new__(cls, add_into, fn):
        self = super().__new__(cls, fn)
        self.add_into = add_into
        return self


class PerOperand(tuple):
    """A rule's pullback made of one function per operand, `g -> cotangent` (None: no gradient).

    The tape keeps only the functions of the operands it traces (`traced_only`), so a value
    that only an untraced operand's gradient reads is freed with the forward pass: in
    `x * 0.5` or `x * mask`, `x` is needed only for the gradient of the constant, so it is not
    kept.

    A reverse rule of `a * b` (see `pb.rrule`) that keeps `a` only while `b` is traced:

    >>> import numpy as np, pullback as pb
    >>> @pb.primitive
    ... def times(a, b):
    ...     return a * b
    >>> @pb.rrule(times)
    ... def times_rule(a, b):
    ...     return a * b, pb.PerOperand([lambda g: g * b, lambda g: g * a])
    >>> pb.gradient(lambda x: np.sum(times(np.sin(x), 2.0)), np.zeros(2))
    (array([2., 2.]),)
    """

    __slots__ = ()

    def __call__(self, g):
        if len(self) == 2:  # the common case, without the loop
            back_a, back_b = self
            return None if back_a is None else back_a(g), None if back_b is None else back_b(g)
        return tuple([None if back is None else back(g) for back in self])

    def traced_only(self, ids):
        """A copy without the functions of the operands whose id is -1 (not traced at this level);
        a copy, so that a pullback a rule hands out more than once is never changed."""
        if len(self) == 2 and len(ids) == 2:  # the common case, without the loop
            return PerOperand((self[0] if ids[0] >= 0 else None, self[1] if ids[1] >= 0 else None))
        return PerOperand([back if j >= len(ids) or ids[j] >= 0 else None for j, back in enumerate(self)])


# dtypes a pending factor may be carried on: wide enough that leaving a cotangent unscaled for a
# while cannot overflow where the scaled one would not (float16 is not)
CARRIED = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))
# the largest factor carried, and the smallest (by magnitude)
FACTOR_RANGE = (2.0 ** -10, 2.0 ** 10)
# below this many elements a multiplication costs less than carrying its factor
MIN_CARRIED_SIZE = 1 << 14
# the array types that act as NumPy's do in a sweep (shape, dtype, `.real`, `.astype`, arithmetic):
# NumPy's, and pb.jit's traced arrays (which add theirs). Factors are carried on them, and the
# sweep fits their cotangents by NumPy's short path.
ARRAY_TYPES = {np.ndarray}


# A large cotangent that the reverse sweep hands to the pullback of an elementwise function of one
# array while holding the only reference to it: the derivative may write its result into it (see
# `times_of`) instead of into fresh memory. Compared by identity, so another thread's sweep can
# never match it. Only the pullbacks whose code is in `ELEMENTWISE_PULLBACKS` get one: they use their
# cotangent once, in NumPy arithmetic, and run no other sweep (a user's rule may do both).
SPARE: list[Any] = [None]
MIN_SPARE_SIZE = 1 << 16
ELEMENTWISE_PULLBACKS: set[Any] = set()


def _count_in_callee(g):
    return sys.getrefcount(g) - 1


def _count_of_one_reference():
    """What `is_spare` counts for an array its caller's one local variable refers to, measured as it counts
    (a call of a Python function: Python 3.10's caller keeps the argument on its stack too, 3.11's does not)."""
    held = [np.empty(1)]
    a = held[0]
    held[0] = None
    return _count_in_callee(a)


# what sys.getrefcount reports for an array only one local variable refers to (CPython; a build
# without the GIL counts references per thread, so nothing is spare there)
_ONE_REFERENCE = _count_of_one_reference() if getattr(sys, "_is_gil_enabled", lambda: True)() else -1


def is_spare(g):
    """Whether only the caller's one local variable refers to array `g` and it owns its writable memory."""
    return sys.getrefcount(g) - 1 == _ONE_REFERENCE and g.base is None and g.flags.writeable


def _times(g, factor):
    return np.multiply(g.unthunk() if isinstance(g, Thunk) else g, factor)


class Scaled(Thunk):
    """The cotangent `base * factor` for a real Python float `factor`, not yet multiplied out.

    Pullbacks are linear, so the reverse sweep passes the factor on to the cotangents the next
    rules compute from `base` and multiplies the product of many factors in once: a chain of
    constant scales and negations costs no memory pass. Anything else evaluates it as a thunk.
    Make one with `scaled`.
    """

    __slots__ = ()

    def __new__(cls, base, factor):
        return super().__new__(cls, _times, base, factor)


def scaled(g, factor):
    """The cotangent `g * factor`: at once for a small array, lazily for a large one (a `Scaled` when
    the sweep can carry `factor` on: a Python float on a float32/float64 array), else a thunk.

    >>> import numpy as np
    >>> type(scaled(np.ones(1 << 14, np.float32), -1.0)).__name__
    'Scaled'
    >>> scaled(np.ones(2, np.float32), -1.0)  # small: multiplied at once
    array([-1., -1.], dtype=float32)
    """
    if type(g) in ARRAY_TYPES and g.dtype in CARRIED:
        if g.size < MIN_CARRIED_SIZE:  # cheaper to multiply now than to make and later run a thunk
            return np.negative(g) if type(factor) is float and factor == -1.0 else g * factor
        if type(factor) is float and FACTOR_RANGE[0] <= abs(factor) <= FACTOR_RANGE[1]:
            return Scaled(g, factor)
    return Thunk(operator.mul, g, factor)


def unthunk(x):
    """Evaluate every thunk in `x`, recursing through tuples, lists, dicts and Tangents.

    >>> import pullback as pb
    >>> pb.unthunk((pb.Thunk(lambda: 2.0), [None, pb.Thunk(lambda: 3.0)]))
    (2.0, [None, 3.0])
    """
    if isinstance(x, Thunk):
        x = x.unthunk()  # what it returns may hold thunks too
    kind = type(x)
    if kind is tuple or kind is list:
        return kind(unthunk(v) for v in x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return kind._make(unthunk(v) for v in x)
    if isinstance(x, dict):  # a subclass too, as a dict: the kind that mirrors one (see `pb.tree.mirror`)
        return {k: unthunk(v) for k, v in x.items()}
    if isinstance(x, Tangent):
        return Tangent._make(x.primal_type, {k: unthunk(v) for k, v in x._entries.items()})
    return x


def accum(a, b):
    """Add two cotangents. `None` is the identity and a lone thunk is passed through untouched.

    >>> import numpy as np, pullback as pb
    >>> t = pb.Thunk(lambda: np.ones(2))
    >>> pb.accum(t, None) is t
    True
    >>> pb.accum(t, np.ones(2))
    array([2., 2.])
    """
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, Thunk) or isinstance(b, Thunk):
        return accum(unthunk(a), unthunk(b))
    kind = type(a)
    if isinstance(a, (tuple, list, dict, Tangent)) or isinstance(b, Tangent):
        _check_same_kind(a, b)
    if kind is tuple or kind is list:
        return kind(accum(x, y) for x, y in zip(a, b))
    if isinstance(a, tuple) and hasattr(a, "_fields"):
        return kind._make(accum(x, y) for x, y in zip(a, b))
    if kind is dict:
        keys = dict.fromkeys([*a, *b])
        return {k: accum(a.get(k), b.get(k)) for k in keys}
    if isinstance(a, Tangent):
        keys = dict.fromkeys([*a._entries, *b._entries])
        return Tangent._make(a.primal_type, {k: accum(a._entries.get(k), b._entries.get(k)) for k in keys})
    return a + b


def _check_same_kind(a, b):
    """Refuse to add cotangents that mirror different objects (zip would drop the extra entries)."""
    if isinstance(b, Tangent) and not isinstance(a, Tangent):
        same = False  # `1.0 + g` would come back to `g.__radd__`
    elif isinstance(a, Tangent):
        same = isinstance(b, Tangent) and b.primal_type is a.primal_type
    elif type(a) is dict:
        same = type(b) is dict
    else:  # a tuple, list or namedtuple: any of them, of the same length
        same = isinstance(b, (tuple, list)) and len(a) == len(b)
    if not same:
        raise TypeError(f"accum: cannot add {_shape_of(a)} and {_shape_of(b)}: cotangents added together must mirror "
                        "the same object")


def _shape_of(x):
    if isinstance(x, Tangent):
        return f"a Tangent[{x.primal_type.__name__}]"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)}"
    return f"a {type(x).__name__}"


class Tangent:
    """The gradient of an object that is not a tuple, list or dict: one entry per child.

    Read-only; entries are reached as attributes or items, in the object's own order, and an
    entry wins over the mapping methods: the gradient of a field `values` is `g.values`.
    `.primal_type` is the object's type (an entry of that name is `g["primal_type"]`).
    `pb.tree.children(g)` gives the entries as a dict; `for name in g`, `len(g)` and `name in g`
    work as for a dict, and so do `g.keys()`, `g.values()` and `g.items()` where no entry
    has that name. Gradients of one object add with `+` and `sum(...)` (that is `pb.accum`).

    >>> import numpy as np, pullback as pb
    >>> class Affine:
    ...     def __init__(self): self.w, self.name = np.ones(2), "a"
    >>> (g,) = pb.gradient(lambda m: np.sum(m.w * 3.0), Affine())
    >>> g
    Tangent[Affine](w=array([3., 3.]), name=None)
    >>> g.w is g["w"], g.primal_type is Affine
    (True, True)
    """

    __slots__ = ("primal_type", "_entries")
    primal_type: type
    _entries: dict[str, Any]

    def __init__(self, primal_type: type, **entries: Any) -> None:
        object.__setattr__(self, "primal_type", primal_type)
        object.__setattr__(self, "_entries", entries)

    @classmethod
    def _make(cls, primal_type, entries):
        t = object.__new__(cls)
        object.__setattr__(t, "primal_type", primal_type)
        object.__setattr__(t, "_entries", entries)
        return t

    def __reduce__(self):  # pickling and copying (gradients sent to other processes)
        return Tangent._make, (self.primal_type, self._entries)

    def __getattr__(self, name: str) -> Any:
        entries = self._entries
        try:
            return entries[name]
        except KeyError:
            if name in _MAPPING_METHODS:  # only where no entry has the name: entries mirror the object's fields
                return getattr(entries, name)
            raise AttributeError(f"Tangent[{self.primal_type.__name__}] has no entry {name!r}") from None

    def __getitem__(self, key: str) -> Any:
        try:
            return self._entries[key]
        except KeyError:
            raise KeyError(f"Tangent[{self.primal_type.__name__}] has no entry {key!r}") from None

    def __add__(self, other: Any) -> "Tangent":
        """`g1 + g2` is `pb.accum(g1, g2)`: entry by entry, None adding as zero."""
        return accum(self, other)

    def __radd__(self, other: Any) -> "Tangent":
        if other is None or (type(other) is int and other == 0):  # sum(gradients) starts from 0
            return self
        return accum(other, self)

    def __setattr__(self, name, value):
        raise AttributeError("Tangent is read-only")

    def __delattr__(self, name):
        raise AttributeError("Tangent is read-only")

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tangent) or other.primal_type is not self.primal_type:
            return NotImplemented
        if self._entries.keys() != other._entries.keys():
            return False
        return all(_same(a, other._entries[k]) for k, a in self._entries.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self):
        body = ", ".join(f"{k}={v!r}" for k, v in self._entries.items())
        return f"Tangent[{self.primal_type.__name__}]({body})"


# what `g.keys()` and the like give where no entry has the name (see `Tangent.__getattr__`)
_MAPPING_METHODS = frozenset(("keys", "values", "items"))


def _same(a, b):
    """Whether two entries of gradients are equal, looking into the lists, tuples and dicts that hold arrays."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.shape(a) == np.shape(b) and bool(np.all(a == b))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    return bool(a == b)

