"""Tracing for `pb.jit`: a stand-in array that records every NumPy call made on it.

A `Symbol` carries the concrete value it stands for (so shapes, dtypes and Python branches
resolve during the trace exactly as they would eagerly) and a slot number in its `Trace`.
Every NumPy function, ufunc, operator and method applied to it runs on the concrete values
and appends one `Node` to the trace, whose inputs name slots. Branches and conversions to
Python numbers (`bool(s)`, `float(s)`, `s.item()`) record a `Guard`: the replay recomputes
the value and retraces when it differs. Implicit conversion to a NumPy array (`np.asarray`)
is refused, because the replay could not follow it.

>>> import numpy as np
>>> trace = Trace()
>>> x = trace.input(np.array([1.0, 2.0]))
>>> y = np.sin(x) * 2.0
>>> [node.name for node in trace.nodes]
['sin', 'multiply']
"""

import functools
import inspect
import math
import operator
import weakref

import numpy as np

from . import _tangents

# ndarray methods that are NumPy functions with the array first
_METHODS = (
    "all", "any", "argmax", "argmin", "argsort", "clip", "conj", "conjugate", "cumprod", "cumsum", "diagonal",
    "dot", "max", "mean", "min", "nonzero", "prod", "ravel", "repeat", "round", "squeeze", "std", "sum",
    "swapaxes", "take", "trace", "var", "argpartition", "searchsorted", "ptp",
)
_OPERATORS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide, "floordiv": np.floor_divide,
    "mod": np.remainder, "pow": np.power, "matmul": np.matmul, "and": np.bitwise_and, "or": np.bitwise_or,
    "xor": np.bitwise_xor, "lshift": np.left_shift, "rshift": np.right_shift,
}
_COMPARISONS = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
                "ne": np.not_equal}
_UNARY = {"neg": np.negative, "pos": np.positive, "abs": np.absolute, "invert": np.invert}
_NUMBER_BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow,
}
_NUMBER_COMPARISONS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
                       "eq": operator.eq, "ne": operator.ne}
_NUMBER_UNARY = {"neg": operator.neg, "pos": operator.pos, "abs": operator.abs}


# argument types that hold no traced value
_LEAVES = frozenset((int, float, complex, bool, str, type(None), np.float32, np.float64))
# operands of an elementwise call that are recorded as they are
_NUMBERS = frozenset((int, float, complex, bool, np.float32, np.float64))

# functions whose result depends only on shapes, dtypes and types (fixed by the signature)
_STATIC = frozenset((np.ndim, np.shape, np.size, np.iscomplexobj, np.isrealobj, np.result_type))


class JitError(TypeError):
    """Code that `pb.jit` cannot trace faithfully (the message names the construct and the fix).

    >>> import numpy as np, pullback as pb
    >>> try:
    ...     pb.jit(lambda x: np.asarray(x) + 1.0)(np.ones(2))
    ... except pb.JitError as error:
    ...     print(str(error)[:66])
    pb.jit: a traced array was converted to a NumPy array (np.asarray,
    """


class Node:
    """One recorded call: `fn(*args, **kwargs)` whose Symbol inputs are slot numbers.

    `args`/`kwargs` hold `Ref(slot)` where a Symbol was; `outputs` are the slots of the
    results (one per output of a multi-output function, in its order, or a single slot)."""

    __slots__ = ("fn", "name", "args", "kwargs", "outputs", "structure", "elementwise", "aliases", "_read")

    def __init__(self, fn, name, args, kwargs, outputs, structure, elementwise, aliases=()):
        self.fn, self.name, self.args, self.kwargs = fn, name, args, kwargs
        self.outputs, self.structure, self.elementwise = outputs, structure, elementwise
        self.aliases = aliases  # the input slots whose memory the results may share (views)
        self._read = None

    def slots_read(self):
        """The slots the call reads (found once: a compilation asks many times)."""
        if self._read is None:
            found = []
            _collect_refs(self.args, found)
            _collect_refs(self.kwargs, found)
            self._read = tuple(found)
        return self._read


class Ref:
    """A slot named inside a node's arguments."""

    __slots__ = ("slot",)

    def __init__(self, slot):
        self.slot = slot

    def __repr__(self):
        return f"s{self.slot}"


class Guard:
    """A Python value the trace depended on: `convert(value of slot)` must equal `expected`."""

    __slots__ = ("slot", "convert", "expected", "after")

    def __init__(self, slot, convert, expected, after):
        self.slot, self.convert, self.expected, self.after = slot, convert, expected, after


def collect(x, kind, found):
    """Append to `found` each part of `x` of type `kind`, through tuples, lists, dicts and slices."""
    if isinstance(x, kind):
        found.append(x)
    elif isinstance(x, (tuple, list)):
        for v in x:
            collect(v, kind, found)
    elif isinstance(x, dict):
        for v in x.values():
            collect(v, kind, found)
    elif isinstance(x, slice):
        collect((x.start, x.stop, x.step), kind, found)


def _collect_refs(x, found):
    refs = []
    collect(x, Ref, refs)
    found.extend(ref.slot for ref in refs)


# a value no Symbol holds any more is kept as a stand-in of its shape and dtype when it is this large
_KEEP_BYTES = 1 << 16


class Trace:
    """The recording of one call: input slots, nodes, guards, and each slot's concrete value.

    Once no Symbol holds a slot, nothing reads its value again but for its shape and dtype, so
    a large one is replaced by a stand-in without memory (a trace then holds about what the
    eager call would, not every intermediate value)."""

    def __init__(self):
        self.values = []  # slot -> concrete value during the trace
        self.nodes = []
        self.guards = []
        self.inputs = []
        self.written_inputs = {}  # input slot -> the Symbol naming that array's current value
        self.symbols = []  # weak references to the Symbols user code may still hold
        self.holders = {}  # slot -> the number of Symbols naming it
        self.released_c_order = {}  # slot -> whether the large value let go of there was C-ordered

    def hold(self, symbol, slot):
        """Point `symbol` at `slot` instead of the one it named (an in-place write rebinds it)."""
        old = symbol.slot
        symbol.slot = slot
        self.holders[slot] = self.holders.get(slot, 0) + 1
        self.let_go(old)

    def rebind(self, symbol, slot):
        """`hold` for an in-place write: a write into an input array is remembered, so that the
        call writes the array's final value into the caller's array, as the call without pb.jit
        would have written into it."""
        if symbol.slot in self.inputs:
            self.written_inputs.setdefault(symbol.slot, symbol)
        self.hold(symbol, slot)

    def let_go(self, slot):
        left = self.holders[slot] = self.holders[slot] - 1
        value = self.values[slot]
        if not left and type(value) is np.ndarray and value.nbytes >= _KEEP_BYTES and slot not in self.inputs:
            self.released_c_order[slot] = value.flags.c_contiguous
            self.values[slot] = np.broadcast_to(np.zeros((), value.dtype), value.shape)

    def c_ordered(self, slot):
        """Whether the array traced at `slot` was C-ordered (also once let go of)."""
        released = self.released_c_order.get(slot)
        return self.values[slot].flags.c_contiguous if released is None else released

    def new_slot(self, value):
        self.values.append(value)
        return len(self.values) - 1

    def input(self, value):
        """A Symbol for one input array of the traced function (a RandomSource for a generator)."""
        slot = self.new_slot(value)
        self.inputs.append(slot)
        if isinstance(value, np.random.Generator):
            return RandomSource(self, slot)
        if type(value) in (int, float, complex):
            return Number(self, slot)
        return self.symbol(slot)

    def symbol(self, slot):
        symbol = Symbol(self, slot)
        self.symbols.append(weakref.ref(symbol))
        return symbol

    def shares_memory_with_live(self, target, besides=None):
        """Whether another Symbol still held shares memory with `target` (a view, or its base)."""
        mine = self.values[target.slot]
        self.symbols = [ref for ref in self.symbols if ref() is not None]
        return any(other is not target and other is not besides and other.slot != target.slot
                   and np.may_share_memory(self.values[other.slot], mine)
                   for other in (ref() for ref in self.symbols) if other is not None)

    def call(self, fn, name, args, kwargs, elementwise=False):
        """Run `fn` on concrete values, record it, and return Symbols for its array results.

        A Python-number argument (`Number`) is an operand of an elementwise call, replayed with
        each call's value; anywhere else (an axis, a shape, an index) it is fixed by a guard."""
        args = args if elementwise else self._freeze(args)
        kwargs = self._freeze(kwargs) if kwargs else kwargs
        concrete_args, ref_args = self._split(args)
        concrete_kwargs, ref_kwargs = self._split(kwargs) if kwargs else ({}, {})
        result = fn(*concrete_args, **concrete_kwargs)
        if isinstance(result, (bool, int, float, complex)) and not isinstance(result, np.generic):
            # A Python number computed from arrays (np.allclose, ...): replayed and guarded.
            value = self.call(_as_array(fn), name, args, kwargs)
            return self.guard(value, type(result))
        if result is None:
            raise JitError(f"pb.jit: np.{name} returned nothing, so it wrote into one of its arguments, which the "
                           "replay could not follow. Use a function that returns a new array instead.")
        outputs, structure, wrapped = self._wrap(result)
        if outputs is None:  # no array in the result (a shape, a dtype): nothing to replay
            return result
        # an elementwise ufunc (its `out` taken away) always returns new arrays
        aliases = () if elementwise else self._aliases(result, concrete_args, (ref_args, ref_kwargs))
        self.nodes.append(Node(fn, name, ref_args, ref_kwargs, outputs, structure, elementwise, aliases))
        if not elementwise and _shaped_by_values(fn, concrete_args):
            # the replay plans buffers of the trace's shapes and dtypes: where the values decide them, a
            # call that gets others traces again
            for slot in outputs if isinstance(outputs, tuple) else (outputs,):
                self.guards.append(Guard(slot, _layout, _layout(self.values[slot]), len(self.nodes)))
        return wrapped

    def ufunc_call(self, ufunc, inputs):
        """`call` for `ufunc(*inputs)` with no options, when each input is a Symbol of this trace or a
        plain number: the common case, kept short. None (nothing run) for any other input."""
        values, refs = [], []
        for x in inputs:
            kind = type(x)
            if kind is Symbol and x.owner is self:
                values.append(self.values[x.slot])
                refs.append(Ref(x.slot))
            elif kind in _NUMBERS:
                values.append(x)
                refs.append(x)
            else:
                return None
        outputs, structure, wrapped = self._wrap(ufunc(*values))
        self.nodes.append(Node(ufunc, ufunc.__name__, tuple(refs), {}, outputs, structure, True))
        return wrapped

    def _aliases(self, result, concrete_args, ref_args):
        """Input slots whose memory the result may share (views: x.T, x[1:], np.reshape, ...)."""
        refs = []
        _collect_refs(ref_args, refs)
        results = result if isinstance(result, (tuple, list)) else (result,)
        return [slot for slot in refs
                if any(isinstance(r, np.ndarray) and np.may_share_memory(r, self.values[slot]) for r in results)]

    def guard(self, symbol, convert):
        """The Python value `convert(concrete value)`, recorded so the replay can check it."""
        expected = convert(self.values[symbol.slot])
        self.guards.append(Guard(symbol.slot, convert, expected, len(self.nodes)))
        return expected

    def number_call(self, fn, name, args):
        """`fn(*args)` for Python-number arithmetic: a Number (or Symbol) for the result, recorded."""
        concrete, refs = self._split(args)
        result = fn(*concrete)
        if type(result) in (bool, int, float, complex):
            slot = self.new_slot(result)
            self.nodes.append(Node(fn, name, refs, {}, slot, None, False))
            number = Number(self, slot)
            # Python's arithmetic changes type with the values (2 ** -1 is a float, (-4.0) ** 0.5 complex):
            # a replay whose result has another type traces again
            self.guards.append(Guard(slot, type, type(result), len(self.nodes)))
            return number
        return self.call(fn, name, args, {})

    def _freeze(self, x):
        """`x` with each Number replaced by its value, guarded (so the replay checks it is unchanged)."""
        if isinstance(x, Number):
            return self.guard(x, _same)
        if type(x) in (tuple, list):
            return type(x)(self._freeze(v) for v in x)
        if type(x) is dict:
            return {k: self._freeze(v) for k, v in x.items()}
        if isinstance(x, slice):
            return slice(self._freeze(x.start), self._freeze(x.stop), self._freeze(x.step))
        return x

    def _split(self, x):
        """(concrete, with Refs) copies of an argument structure."""
        if type(x) is Symbol:  # the common case first
            if x.owner is not self:
                raise JitError("A value traced by another pb.jit call reached this one; "
                               "return it from the inner function instead of capturing it.")
            return self.values[x.slot], Ref(x.slot)
        if type(x) in _LEAVES:
            return x, x
        if isinstance(x, (Symbol, RandomSource, Number)):
            if x.owner is not self:
                raise JitError("A value traced by another pb.jit call reached this one; "
                               "return it from the inner function instead of capturing it.")
            return self.values[x.slot], Ref(x.slot)
        if isinstance(x, (tuple, list)):
            pairs = [self._split(v) for v in x]
            kind = type(x) if type(x) in (tuple, list) else (list if isinstance(x, list) else tuple)
            return kind(p[0] for p in pairs), kind(p[1] for p in pairs)
        if isinstance(x, dict):
            pairs = {k: self._split(v) for k, v in x.items()}
            return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
        if isinstance(x, slice) and any(isinstance(v, Symbol) for v in (x.start, x.stop, x.step)):
            raise JitError("A slice bound computed from a traced array; pb.jit needs slice bounds known "
                           "from shapes. Use int(...) on it outside the jitted function, or index with an array.")
        return x, x

    def _wrap(self, result):
        if isinstance(result, (np.ndarray, np.generic)):
            slot = self.new_slot(result)
            return slot, None, self.symbol(slot)
        if isinstance(result, (tuple, list)) and any(isinstance(r, (np.ndarray, np.generic)) for r in result):
            if not all(isinstance(r, (np.ndarray, np.generic)) for r in result):
                raise JitError(f"pb.jit: a NumPy function returned a mix of arrays and other values "
                               f"({type(result).__name__}), which the replay cannot rebuild.")
            slots = [self.new_slot(r) for r in result]
            symbols = [self.symbol(s) for s in slots]
            kind = type(result)
            rebuilt = kind(symbols) if kind in (tuple, list) else kind(*symbols)
            return tuple(slots), kind, rebuilt
        return None, None, result


def _forward(fn, name):
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    method.__name__ = name
    return method


class Symbol:
    """An array during a `pb.jit` trace (see the module docstring)."""

    __slots__ = ("owner", "slot", "view", "__weakref__")
    __array_priority__ = 1000.0

    def __init__(self, trace, slot):
        self.owner = trace
        self.slot = slot
        holders = trace.holders
        holders[slot] = holders.get(slot, 0) + 1
        self.view = None  # (weak reference to the base Symbol, index, the base's slot then) for x[index] views

    def __del__(self):
        try:
            self.owner.let_go(self.slot)
        except Exception:  # at interpreter exit, or a half-made Symbol: nothing to keep track of
            pass

    def _concrete(self):
        return self.owner.values[self.slot]

    def __pullback_traced_value__(self):
        """The value this stand-in had in the trace (its type tells a NumPy scalar from a 0-d array)."""
        return self.owner.values[self.slot]

    def __pullback_convert__(self, kind):
        """`kind(value)` (float, a NumPy scalar type, np.asarray), recorded: how pullback turns a result
        into the type its argument had, which `float(x)` (a guard) would fix at the traced value."""
        return self.owner.number_call(kind, getattr(kind, "__name__", "convert"), (self,))

    def record_primitive(self, fn, name, args, kwargs):
        """A `pb.primitive` called on this Symbol: recorded as one call of its NumPy code (which
        the replay runs on plain arrays), not traced through."""
        return self.owner.call(fn, name, args, kwargs)

    # --- NumPy's protocols -------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and not kwargs:
            recorded = self.owner.ufunc_call(ufunc, inputs)
            if recorded is not None:
                return recorded
        if any(_defers(x) for x in inputs + tuple(kwargs.get("out", None) or ())):
            return NotImplemented  # a differentiated value among the inputs: its type handles the call
        out = kwargs.pop("out", None)
        if method == "at":  # np.add.at(x, index, v) writes into x: record it as a new array
            result = self.owner.call(_ufunc_at, f"{ufunc.__name__}.at", (ufunc, *inputs), kwargs)
            _rebind(inputs[0], result, f"np.{ufunc.__name__}.at")
            return None
        fn = ufunc if method == "__call__" else getattr(ufunc, method)
        name = f"{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        if out is None:
            return self.owner.call(fn, name, inputs, kwargs, elementwise=method == "__call__")
        # NumPy writes into copies of the `out` arrays (so out's dtype, casting= and where= are
        # NumPy's), and each `out` names its copy from then on
        outs = out if isinstance(out, tuple) else (out,)
        if method == "__call__" and not kwargs:
            result = self.owner.call(fn, name, inputs, kwargs, elementwise=True)
            if _fits(outs, result):  # out's dtype and shape: recorded as a new array, which can be fused
                return _rebind(out, result, f"np.{ufunc.__name__}(..., out=...)")
            # otherwise that call is dead code, which the compiled program drops
        result = self.owner.call(_ufunc_written_into_copies, f"{name}(out=)", (fn, len(outs), *outs, *inputs),
                                 kwargs)
        results = result if isinstance(result, tuple) else (result,)
        for o, r in zip(outs, results):
            if o is not None:
                _rebind(o, r, f"np.{ufunc.__name__}(..., out=...)")
        results = tuple(r if o is None else o for o, r in zip(outs, results))
        return results if isinstance(result, tuple) else results[0]

    def __array_function__(self, func, types, args, kwargs):
        if any(t is not Symbol and not issubclass(t, np.ndarray) for t in types):
            return NotImplemented
        if func in _STATIC:  # known from shapes and dtypes, which the signature fixes
            return func(*self.owner._split(args)[0], **self.owner._split(kwargs)[0])
        name = getattr(func, "__name__", repr(func))
        out, args, kwargs = _out_apart(func, args, kwargs)
        if out is None:
            return self.owner.call(func, name, args, kwargs)
        # an in-place write made functional, as for a ufunc's out=: the replay writes into a copy of
        # `out`, and `out` names the copy from then on
        result = self.owner.call(_written_into_copy, f"{name}(out=)", (func, out, *args), kwargs)
        return _rebind(out, result, f"np.{name}(..., out=...)")

    def __array__(self, dtype=None, copy=None):
        raise JitError("pb.jit: a traced array was converted to a NumPy array (np.asarray, np.array, a library "
                       "that calls them, indexing a plain array with it as in np.eye(3)[labels], or writing it into "
                       "a plain array), which the replay could not follow. Keep the computation in NumPy calls on "
                       "the traced array (np.take(np.eye(3), labels, axis=0)), or move it outside the jitted function.")

    # --- metadata, known from the concrete value ----------------------------------------------
    shape = property(lambda self: self._concrete().shape)
    dtype = property(lambda self: self._concrete().dtype)
    ndim = property(lambda self: self._concrete().ndim)
    size = property(lambda self: self._concrete().size)
    itemsize = property(lambda self: self._concrete().itemsize)
    nbytes = property(lambda self: self._concrete().nbytes)

    def __len__(self):
        return len(self._concrete())

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        return f"Symbol(slot {self.slot}, shape={self.shape}, dtype={self.dtype})"

    # --- Python values: guards ----------------------------------------------------------------
    def __bool__(self):
        return self.owner.guard(self, bool)

    def __float__(self):
        return self.owner.guard(self, float)

    def __int__(self):
        return self.owner.guard(self, int)

    def __index__(self):
        return self.owner.guard(self, _as_index)

    def __complex__(self):
        return self.owner.guard(self, complex)

    def item(self, *args):
        return self.owner.guard(self, lambda v: v.item(*args))

    def tolist(self):
        return self.owner.guard(self, lambda v: v.tolist())

    # --- indexing, shape methods ----------------------------------------------------------------
    def __getitem__(self, index):
        result = self.owner.call(_getitem, "getitem", (self, index), {})
        if isinstance(result, Symbol) and np.may_share_memory(result._concrete(), self._concrete()):
            result.view = (weakref.ref(self), index, self.slot)
        return result

    def __setitem__(self, index, value):
        result = self.owner.call(setitem_copy, "setitem", (self, index, value), {})
        _rebind((self,), result, "x[index] = value")

    def reshape(self, *shape, **kwargs):
        shape = shape[0] if len(shape) == 1 else shape
        return np.reshape(self, shape, **kwargs)

    def transpose(self, *axes):
        return np.transpose(self, axes[0] if len(axes) == 1 else (axes or None))

    T = property(lambda self: np.transpose(self))
    mT = property(lambda self: np.matrix_transpose(self))
    real = property(lambda self: np.real(self))
    imag = property(lambda self: np.imag(self))

    def astype(self, dtype, *args, **kwargs):
        return self.owner.call(_astype, "astype", (self, dtype, *args), kwargs)

    def copy(self, order="C"):
        return np.copy(self, order=order)

    def flatten(self, order="C"):
        return np.copy(np.ravel(self, order=order))

    def fill(self, value):
        self[...] = value

    def sort(self, axis=-1, kind=None, order=None):
        """`x.sort()` sorts in place (and returns None), as ndarray's does."""
        self[...] = np.sort(self, axis=axis, kind=kind, order=order)

    def partition(self, kth, axis=-1, kind="introselect", order=None):
        self[...] = np.partition(self, kth, axis=axis, kind=kind, order=order)

    def compress(self, condition, axis=None, out=None):
        return np.compress(condition, self, axis=axis, out=out)  # the condition comes first in np.compress

    for _name in _METHODS:
        locals()[_name] = _forward(getattr(np, _name), _name)
    for _name, _fn in _OPERATORS.items():
        locals()[f"__{_name}__"] = _forward(_fn, _name)
        locals()[f"__r{_name}__"] = (lambda f: lambda self, other: f(other, self))(_fn)
        locals()[f"__i{_name}__"] = (lambda f: lambda self, other: _in_place(f, self, other))(_fn)
    for _name, _fn in {**_COMPARISONS, **_UNARY}.items():
        locals()[f"__{_name}__"] = _forward(_fn, _name)
    del _name, _fn

    __hash__ = None  # type: ignore[assignment]


class RandomSource:
    """A `np.random.Generator` argument during a trace: each draw is recorded, so a replay draws
    afresh from the generator passed to that call (and advances it as an eager call would)."""

    __slots__ = ("owner", "slot")
    __array_ufunc__ = None  # not an array (NumPy's opt-out)
    __pullback_leaf__ = True  # but a leaf to pb.tree, as a generator is

    def __init__(self, trace, slot):
        self.owner, self.slot = trace, slot

    def __getattr__(self, name):
        if name in ("bit_generator", "spawn"):  # draws made through them would be hidden from the trace
            raise JitError(f"pb.jit: Generator.{name} of a generator argument is not followed: its draws would be "
                           "the trace's at every replay. Draw from the generator itself (rng.normal(...), "
                           "rng.integers(...)), or pass the generator you would make from it as an argument.")
        method = getattr(np.random.Generator, name)
        if not callable(method):
            return getattr(self.owner.values[self.slot], name)
        draw = _draw(name)
        return lambda *args, **kwargs: self.owner.call(draw, f"Generator.{name}", (self, *args), kwargs)


# A reverse sweep traced by pb.jit treats a Symbol as it does an array: it carries constant factors
# on it (see `pullback._tangents.Scaled`), so the replay makes the same few memory passes.
_tangents.ARRAY_TYPES.add(Symbol)


def _same(value):
    return value


def _number_method(fn, reflected=False):
    def method(self, other):
        if isinstance(other, Symbol):
            return NotImplemented  # the array's own operator records a NumPy call
        return self.owner.number_call(fn, fn.__name__, (other, self) if reflected else (self, other))

    return method


class Number:
    """A Python int, float or complex argument during a trace. Arithmetic on it is recorded with
    Python's own operators (so a replay computes with each call's value, exactly as Python would,
    weak typing included); as an operand of a NumPy ufunc beside a traced array it is replayed
    too. Used for anything else (a shape, an axis, an index, a branch, `int(n)`, a value to
    differentiate, an operand of NumPy on plain arrays) its value is fixed by a guard."""

    __slots__ = ("owner", "slot")

    def __init__(self, trace, slot):
        self.owner, self.slot = trace, slot

    def _value(self, convert=_same):
        return self.owner.guard(self, convert)

    def __pullback_value__(self):
        """The value, fixed by a guard: what pullback's engine (and any NumPy conversion) sees."""
        return self._value()

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._value(), dtype=dtype)

    def __bool__(self):
        return self._value(bool)

    def __int__(self):
        return self._value(int)

    def __float__(self):
        return self._value(float)

    def __complex__(self):
        return self._value(complex)

    def __index__(self):
        return self._value(_as_index)

    def __hash__(self):
        return self._value(hash)

    # Text, rounding and divmod see the value, fixed by a guard, as for int() and bool()
    def __str__(self):
        return self._value(str)

    def __repr__(self):
        return self._value(repr)

    def __format__(self, spec):
        return self._value(lambda v: format(v, spec))

    def __round__(self, ndigits=None):
        return self._value(lambda v: round(v) if ndigits is None else round(v, ndigits))

    def __trunc__(self):
        return self._value(math.trunc)

    def __floor__(self):
        return self._value(math.floor)

    def __ceil__(self):
        return self._value(math.ceil)

    def __divmod__(self, other):
        return self._value(lambda v: divmod(v, other))

    def __rdivmod__(self, other):
        return self._value(lambda v: divmod(other, v))

    @property
    def __class__(self):
        """The class of the value (float, int or complex), so that `isinstance(n, float)` and
        `np.isscalar(n)` answer as for the number itself; the signature already fixes the type."""
        return type(self.owner.values[self.slot])

    def __getattr__(self, name):  # .real, .is_integer(), ...: fixed by a guard
        attribute = getattr(self.owner.values[self.slot], name)
        if callable(attribute):
            return lambda *args, **kwargs: self._value(lambda v: getattr(v, name)(*args, **kwargs))
        return self._value(lambda v: getattr(v, name))

    for _name, _fn in {**_NUMBER_BINARY, **_NUMBER_COMPARISONS}.items():
        locals()[f"__{_name}__"] = _number_method(_fn)
        if _name in _NUMBER_BINARY:
            locals()[f"__r{_name}__"] = _number_method(_fn, reflected=True)
    for _name, _fn in _NUMBER_UNARY.items():
        locals()[f"__{_name}__"] = (lambda f: lambda self: self.owner.number_call(f, f.__name__, (self,)))(_fn)
    del _name, _fn


def _draw(name):
    def draw(generator, *args, **kwargs):
        result = getattr(generator, name)(*args, **kwargs)
        return np.asarray(result)[()] if isinstance(result, (float, int, bool, complex)) else result

    draw.__name__ = name
    return draw


def _defers(x):
    """Whether `x` is another array type that handles NumPy's protocols itself (pullback's traced values)."""
    kind = type(x)
    return kind is not Symbol and not issubclass(kind, np.ndarray) and getattr(kind, "__array_ufunc__", None) is not None


def _rebind(out, result, construct):
    """An in-place write, made functional: each `out` Symbol now names the new result."""
    outs = out if isinstance(out, tuple) else (out,)
    results = result if isinstance(result, tuple) else (result,)
    for target, new in zip(outs, results):
        if not isinstance(target, Symbol):
            raise JitError(f"pb.jit: {construct} writes a traced value into a NumPy array, which the replay "
                           "could not follow. Build the result with NumPy calls instead (np.where, np.concatenate).")
        base = _write_through(target, new)
        if target.owner.shares_memory_with_live(target, besides=base):
            raise JitError(f"pb.jit: {construct} writes into an array that shares memory with another (a view); "
                           "the replay could not keep them in step. Write y = x + v (a new array) instead.")
        target.owner.rebind(target, new.slot)
    return outs[0] if len(outs) == 1 else outs


def _write_through(view, new):
    """For `x[index] += v` and friends: a write into a live `x[index]` view also writes `x`
    (recorded as `x = x with x[index] = new`). Returns the base Symbol written, or None."""
    if view.view is None:
        return None
    base_ref, index, base_slot = view.view
    base = base_ref()
    if base is None or base.slot != base_slot:  # the base is gone, or was rebound since
        return None
    written = base.owner.call(setitem_copy, "setitem", (base, index, new), {})
    base.owner.rebind(base, written.slot)
    # the other live views of `base` (`c[1]` beside this `c[0]`) are views of its new value: one
    # that shares memory with this view is refused by the caller
    for other in (ref() for ref in base.owner.symbols):
        if other is not None and other.view is not None and other.view[0]() is base and other.view[2] == base_slot:
            other.view = (other.view[0], other.view[1], base.slot)
    view.view = (base_ref, index, base.slot)
    return base


def _as_array(fn):
    def as_array(*args, **kwargs):
        return np.asarray(fn(*args, **kwargs))

    return as_array


def _out_apart(func, args, kwargs):
    """`(out, args, kwargs)` of a call of NumPy function `func`: its `out=` argument (None if not given),
    and the other arguments, those after a positional `out` moved to their keywords."""
    if "out" in kwargs:
        kwargs = dict(kwargs)
        return kwargs.pop("out"), args, kwargs
    names = _positional_names(func)
    position = names.index("out") if "out" in names else len(args)
    if len(args) <= position or args[position] is None:
        return None, args, kwargs
    return args[position], args[:position], {**kwargs, **dict(zip(names[position + 1:], args[position + 1:]))}


@functools.lru_cache(maxsize=512)
def _positional_names(func):
    """The names of the parameters `func` takes by position (none after a `*args`)."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return ()
    names = []
    for p in parameters:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break
        names.append(p.name)
    return tuple(names)


def _fits(outs, results):
    """Whether each of `outs` (Symbols) has the dtype and shape of its result (a Symbol of a NumPy array)."""
    results = results if isinstance(results, tuple) else (results,)
    return all(isinstance(o, Symbol) and isinstance(r, Symbol) and isinstance(o._concrete(), np.ndarray)
               and isinstance(r._concrete(), np.ndarray) and o._concrete().dtype == r._concrete().dtype
               and o._concrete().shape == r._concrete().shape for o, r in zip(outs, results))


def _in_place(fn, x, other):
    """`x op= other`: a write into `x`, or where `x` is a NumPy scalar (`c[1]` of a 1-d `c`), as in
    NumPy, a new value that `x`'s name is bound to."""
    if isinstance(x, Symbol) and not isinstance(x._concrete(), np.ndarray):
        return fn(x, other)
    return fn(x, other, out=(x,))


def _ufunc_written_into_copies(fn, n_out, *args, **kwargs):
    """`fn(*inputs, out=outs, **kwargs)` (`args` is `*outs, *inputs`) writing into copies of the `out`
    arrays given (None: a new array), which it returns as NumPy does."""
    outs = tuple(None if o is None else _copy_of_out(o) for o in args[:n_out])
    return fn(*args[n_out:], out=outs if n_out > 1 else outs[0], **kwargs)


def _copy_of_out(out):
    if not isinstance(out, np.ndarray):  # x[i] of a 1-d x is a NumPy scalar: NumPy refuses to write into it
        raise TypeError("return arrays must be of ArrayType")
    return np.array(out, copy=True)


def _written_into_copy(func, out, *args, **kwargs):
    """`func(*args, out=out, **kwargs)` writing into a copy of `out`, which it returns (NumPy's casting
    and its errors included)."""
    written = _copy_of_out(out)
    func(*args, out=written, **kwargs)
    return written


def _ufunc_at(ufunc, x, *args):
    y = x.copy()
    ufunc.at(y, *args)
    return y


def _as_index(v):
    return v.__index__()


# functions whose result's shape (or dtype: real or complex) depends on the values of their arguments
_VALUE_SHAPED = {np.nonzero, np.flatnonzero, np.argwhere, np.unique, np.unique_values, np.unique_counts,
                 np.unique_inverse, np.unique_all, np.extract, np.compress, np.trim_zeros, np.roots,
                 np.linalg.eig, np.linalg.eigvals, np.setdiff1d, np.intersect1d, np.union1d, np.setxor1d,
                 np.real_if_close, np.emath.sqrt, np.emath.log, np.emath.log2, np.emath.log10, np.emath.logn,
                 np.emath.power, np.emath.arccos, np.emath.arcsin, np.emath.arctanh, np.bincount, np.ix_,
                 np.delete, np.histogram, np.histogram_bin_edges}


def _shaped_by_values(fn, args):
    if fn in _VALUE_SHAPED:
        return True
    if fn is np.where:
        return len(args) == 1
    if fn is np.repeat:  # repeats given per element
        return len(args) > 1 and np.ndim(args[1]) > 0
    if fn is _getitem:  # a boolean mask picks as many elements as it holds True
        index = args[1] if isinstance(args[1], tuple) else (args[1],)
        return any(isinstance(part, (np.ndarray, np.bool_)) and part.dtype == bool for part in index)
    return False


def _layout(value):
    return np.shape(value), np.result_type(value)


def _getitem(x, index):
    return x[index]


def setitem_copy(x, index, value):
    """`x[index] = value` as a function: a copy of x with the write (the replay writes in place
    where x is no longer read)."""
    y = x.copy()
    y[index] = value
    return y


def _astype(x, dtype, *args, **kwargs):
    return x.astype(dtype, *args, **kwargs)
