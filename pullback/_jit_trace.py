"""Tracing for `pb.jit`: a stand-in array that records every NumPy call made on it.

A `Symbol` carries the concrete value it stands for (so shapes, dtypes and Python branches
resolve during the trace exactly as they would eagerly) and a slot number in its `Trace`.
Every NumPy function, ufunc, operator and method applied to it runs on the concrete values
and appends one `Node` to the trace, whose inputs name slots. Branches and conversions to
Python numbers (`bool(s)`, `float(s)`, `s.item()`) record a `Guard`: the replay recomputes
the value and retraces when it differs. Implicit conversion to a NumPy array (`np.asarray`)
is refused, because the replay could not follow it. A plain array a recorded call reads is read by
reference; one the function writes later in the trace is replayed from a copy of what the call read
(see `Trace.constants_as_read`).

>>> import numpy as np
>>> trace = Trace()
>>> x = trace.input(np.array([1.0, 2.0]))
>>> y = np.sin(x) * 2.0
>>> [node.name for node in trace.nodes]
['sin', 'multiply']
"""

import functools
import math
import operator
import sys
import threading
import warnings
import weakref
import zlib

import numpy as np

from . import _tangents
from ._compat import POWER_OF_A_HALF_IS_SQRT, signature_of
from ._inplace import c_call_site
from ._standins import is_traced

try:  # NumPy 2: a new object each time np.errstate is entered or left
    from numpy._core._ufunc_config import _extobj_contextvar

    errors_token = _extobj_contextvar.get
except ImportError:  # NumPy 1: the settings themselves
    def errors_token():
        """What tells NumPy's floating-point error handling in force from another."""
        return tuple(sorted(np.geterr().items())), np.geterrcall()

# ndarray methods that are NumPy functions with the array first
_METHODS = (
    "all", "any", "argmax", "argmin", "argsort", "cumprod", "cumsum", "diagonal",
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
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "and": operator.and_,
    "or": operator.or_, "xor": operator.xor, "lshift": operator.lshift, "rshift": operator.rshift,
}
_NUMBER_COMPARISONS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
                       "eq": operator.eq, "ne": operator.ne}
_NUMBER_UNARY = {"neg": operator.neg, "pos": operator.pos, "abs": operator.abs, "invert": operator.invert}
# the ufunc each of Python's operators is on a NumPy operand
_NUMBER_UFUNCS = {**{name: _OPERATORS[name] for name in _NUMBER_BINARY}, **_COMPARISONS, "divmod": np.divmod}


def _power(x, exponent, **kwargs):
    """`x ** exponent` of a traced array as NumPy 2.2's operator computes it: `x ** 0.5` of a float or complex
    array is np.sqrt(x) there (nan at -inf), where its np.power gives C's pow (inf); else np.power."""
    kind = type(exponent)  # (not isinstance: a Number argument says it is a float, and == on it is a guard)
    if kind is Number and not kwargs and isinstance(x, Symbol):  # a Python float argument: chosen at each replay
        return x.owner.call(_power, "power", (x, exponent), {}, elementwise=True)
    if ((kind is float or issubclass(kind, np.floating)) and exponent == 0.5
            and getattr(getattr(x, "dtype", None), "kind", None) in ("f", "c")):
        return np.sqrt(x, **kwargs)
    return np.power(x, exponent, **kwargs)


# the operators of a Symbol: NumPy's ufuncs (np.power is `**` from NumPy 2.3)
_SYMBOL_OPERATORS = _OPERATORS if POWER_OF_A_HALF_IS_SQRT else {**_OPERATORS, "pow": _power}


# argument types that hold no traced value
_LEAVES = frozenset((int, float, complex, bool, str, type(None), np.float32, np.float64))
# operands of an elementwise call that are recorded as they are
_NUMBERS = frozenset((int, float, complex, bool, np.float32, np.float64))
_PYTHON_NUMBERS = frozenset((int, float, complex, bool))

# NumPy functions that write into their first argument and return None
_WRITES_FIRST = frozenset((np.putmask, np.place, np.put, np.copyto, np.fill_diagonal, np.put_along_axis))
# NumPy's errors for a write into a read-only array by those that do not say "assignment destination is read-only"
_READ_ONLY_ERRORS = {np.put: "put: output array is read-only", np.putmask: "putmask: output array is read-only",
                     np.place: "WRITEBACKIFCOPY base is read-only", np.fill_diagonal: "underlying array is read-only"}
# NumPy functions that write into their first argument, and return it, when the keyword named is False
_WRITES_FIRST_UNLESS = {np.nan_to_num: "copy"}

# functions whose result depends only on shapes, dtypes and types (fixed by the signature)
_STATIC = frozenset((np.ndim, np.shape, np.size, np.iscomplexobj, np.isrealobj, np.result_type, np.einsum_path))


class Retrace(Exception):
    """A guard of the replayed trace failed: the function must be traced again."""


class JitError(TypeError):
    """Code that `pb.jit` cannot trace faithfully (the message names the construct and the fix).

    >>> import numpy as np, pullback as pb
    >>> try:
    ...     pb.jit(lambda x: np.asarray(x) + 1.0)(np.ones(2))
    ... except pb.JitError as error:
    ...     print(str(error)[:66])
    pb.jit: a traced array was converted to a NumPy array (np.asarray,
    """

    def __init__(self, *args):
        super().__init__(*args)
        made = getattr(_REFUSALS, "made", None)
        if made is not None and not made:
            made.append(self)


# the first JitError made while a trace runs the function, per thread (see `refusals_watched`)
_REFUSALS = threading.local()


class refusals_watched:
    """`with refusals_watched() as made:` lists the first JitError made inside, so that one the traced function
    caught itself (`try: np.asarray(x) except TypeError:`) can still be raised: the function went on with other
    values than it computes without pb.jit."""

    def __enter__(self):
        self.outer = getattr(_REFUSALS, "made", None)
        _REFUSALS.made = []
        return _REFUSALS.made

    def __exit__(self, *exc):
        _REFUSALS.made = self.outer
        return False


class Node:
    """One recorded call: `fn(*args, **kwargs)` whose Symbol inputs are slot numbers.

    `args`/`kwargs` hold `Ref(slot)` where a Symbol was; `outputs` are the slots of the
    results (one per output of a multi-output function, in its order, or a single slot)."""

    __slots__ = ("fn", "name", "args", "kwargs", "outputs", "structure", "elementwise", "aliases", "errors", "filters",
                 "read_only_view", "_read")

    def __init__(self, fn, name, args, kwargs, outputs, structure, elementwise, aliases=()):
        self.fn, self.name, self.args, self.kwargs = fn, name, args, kwargs
        self.outputs, self.structure, self.elementwise = outputs, structure, elementwise
        self.aliases = aliases  # the input slots whose memory the results may share (views)
        # the floating-point error handling (`np.geterr()`, `np.geterrcall()`) the function set around the
        # call with np.errstate, or None where it is the caller's
        self.errors = None
        # the warnings filters (`warnings.filters`) in force at the call where the function set its own
        # (warnings.catch_warnings with simplefilter), or None where they are the caller's
        self.filters = None
        # whether the call is the function's own NumPy call that made a read-only view (np.broadcast_to,
        # np.diagonal): handed out read-only, as without pb.jit (the same call in pullback's rules is not)
        self.read_only_view = False
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


class RaisesAgain:
    """A call that raised at the trace, where the function caught the error and went on: each replay runs it
    again and goes on only where it raises the same error (its type and arguments: the code may read its
    message), as the code then takes the same branch; otherwise the function is traced again."""

    __slots__ = ("fn", "error", "args")

    def __init__(self, fn, error):
        self.fn, self.error, self.args = fn, type(error), error.args

    def __call__(self, *args, **kwargs):
        try:
            self.fn(*args, **kwargs)
        except Exception as error:
            if type(error) is self.error and _same_arguments(error.args, self.args):
                return None
        raise Retrace


def _same_arguments(a, b):
    try:
        return bool(a == b)
    except Exception:  # arguments that compare elementwise (arrays)
        return False


# the copies made by `_copy_to_write` in this thread while a `PartlyWritten` call runs (else None)
_copies = threading.local()


class PartlyWritten:
    """`fn`, one of the recorded writes into a copy of an array (`x[i] = v`, `np.put`, a ufunc's `out=`), that
    raised: the copies as the write left them, as NumPy leaves the arrays it writes into where it raises (np.put
    writes the indices before a bad one; a ufunc under np.errstate(divide="raise") writes its whole result, then
    raises). Run with floating-point errors ignored, which change no value written."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args, **kwargs):
        outer, _copies.made = getattr(_copies, "made", None), []
        made = _copies.made
        try:
            with np.errstate(all="ignore"):
                self.fn(*args, **kwargs)
        except Exception:  # the error the write raised: what it wrote before is in `made`
            pass
        finally:
            _copies.made = outer
        return made[0] if len(made) == 1 else tuple(made)


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


def _replaced(x, copies):
    """An argument structure with each array whose id is among `copies` replaced by its copy there."""
    if isinstance(x, np.ndarray):
        return copies.get(id(x), x)
    if type(x) in (tuple, list):
        return type(x)(_replaced(v, copies) for v in x)
    if type(x) is dict:
        return {k: _replaced(v, copies) for k, v in x.items()}
    return x


class _Read:
    """A plain array that recorded calls read, and what it held at each read: its bytes are compared with a copy
    of them (a checksum, past `_COPIED_BYTES`), and `version` counts the changes seen (see
    `Trace.constants_as_read`); each version read is kept as a copy while the trace's copies take at most
    `_COPIED_BYTES` in all."""

    __slots__ = ("array", "copy", "checksum", "version")

    def __init__(self, a):
        self.array, self.version = a, 0
        self.copy = a.copy(order="K") if a.nbytes <= _COPIED_BYTES else None
        self.checksum = None if self.copy is not None else _checksum(a)

    def note(self, trace, keep=True):
        """The version the array holds now: a new one where its bytes changed since the last read (kept as a copy
        where `keep` and the trace's copies allow; else its reads are not compared again: the trace is refused)."""
        a = self.array
        if self.copy is not None:
            if _same_bytes(a, self.copy):
                return self.version
            trace.copied += a.nbytes if keep else 0
            self.copy = a.copy(order="K") if keep and trace.copied <= _COPIED_BYTES else None
        elif self.checksum is not None:
            checksum = _checksum(a)
            if checksum == self.checksum:
                return self.version
            self.checksum = checksum
        self.version += 1
        return self.version


def _same_bytes(a, b):
    """Whether two arrays of one dtype, shape and order hold the same bytes (-0.0 is not 0.0, a NaN is itself)."""
    if a.nbytes <= 4096 or a.dtype.hasobject or a.itemsize not in (1, 2, 4, 8):
        return a.tobytes() == b.tobytes()
    kind = np.dtype(f"u{a.itemsize}")
    return bool(np.array_equal(a.view(kind), b.view(kind)))


def _checksum(a):
    """A checksum of the bytes of an array too large to copy, read in place where its memory is contiguous."""
    contiguous = a if a.flags.c_contiguous else a.T if a.flags.f_contiguous else None
    return zlib.crc32(a.tobytes() if contiguous is None or a.dtype.hasobject else contiguous.data)


def _collect_refs(x, found):
    refs = []
    collect(x, Ref, refs)
    found.extend(ref.slot for ref in refs)


# a value no Symbol holds any more is kept as a stand-in of its shape and dtype when it is this large
_KEEP_BYTES = 1 << 16
# a plain array a recorded call reads is compared at each read with a copy of its bytes when it is at most this
# large (else with a checksum); one written before the trace ends is replayed from copies of the values its calls
# read, while those take at most this much in all (else the trace is refused)
_COPIED_BYTES = 1 << 24


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
        self.released_read_only = set()  # the slots of those that were read-only
        self.writeable_guarded = set()  # the input slots whose flags.writeable a guard fixes
        self.versions = {}  # written input slot -> the slots of the values written into it, in order
        self.errors_outside = errors_token()  # the caller's floating-point error handling
        self.errors_at_start = (np.geterr(), np.geterrcall())
        # the caller's warnings filters: the list (catch_warnings puts a copy in its place) and what it holds
        self.filters_list, self.filters_outside = warnings.filters, list(warnings.filters)
        self.constant_read = False  # whether `_split` met a plain array since the last node was recorded
        # the plain arrays the recorded calls read: [(node, array, its `_Read`, the version read, a copy of it)],
        # and the `_Read` of each memory read (by address, shape, strides and dtype: `x.T` made twice is one)
        self.reads, self._read, self.copied = [], {}, 0
        # the rows (views) C code asked for by an integer: [(weak reference to the array, to the row, the
        # row's index, the call site)] (see `_detach_swapped_row`)
        self.rows_asked_by_c = []

    def _append(self, node):
        """Record `node`, with the floating-point error handling (np.errstate) and the warnings filters
        (warnings.catch_warnings) the function set around it."""
        if errors_token() != self.errors_outside:
            node.errors = (np.geterr(), np.geterrcall())
        filters = warnings.filters
        if filters is not self.filters_list or filters != self.filters_outside:
            node.filters = tuple(filters)
        self.nodes.append(node)
        if self.constant_read:
            self.constant_read = False
            self._note_reads(node)

    def _note_reads(self, node):
        """Note what each plain array `node` reads holds now: the replay reads it by reference, so one the
        function writes later in the trace must be replayed from what the call read (see `constants_as_read`)."""
        arrays = []
        collect((node.args, node.kwargs), np.ndarray, arrays)
        for a in {id(a): a for a in arrays if a.size}.values():
            key = (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str)
            read = self._read.get(key)
            if read is None:
                read, version = _Read(a), 0
                self._read[key] = read
            else:
                version = read.note(self)
            self.reads.append((node, a, read, version, read.copy))

    def constants_as_read(self):
        """At the end of the trace: each recorded call that read a plain array the function wrote afterwards
        reads a private copy of what it read then, as the call without pb.jit did; where no copy was kept (a
        large array, see `_COPIED_BYTES`), the trace is refused, naming it."""
        final, copies = {}, {}
        for node, a, read, version, copy in self.reads:
            if id(read) not in final:
                final[id(read)] = read.note(self, keep=False)
            if version == final[id(read)]:
                continue
            if copy is None:
                raise JitError(f"pb.jit: the function wrote into a plain NumPy array (of shape {a.shape} and dtype "
                               f"{a.dtype}) after the recorded call {node.name} read it; a replay reads the array by "
                               "reference, so it would read the written values, and the values the calls read take "
                               "too much memory to keep. Copy it before writing (c = c.copy()), write into a new "
                               "array, or make it from the arguments.")
            copies.setdefault(id(node), (node, {}))[1][id(a)] = copy
        for node, replaced in copies.values():
            node.args, node.kwargs = _replaced(node.args, replaced), _replaced(node.kwargs, replaced)
        self.reads, self._read = [], {}

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
        for written, holder in self.written_inputs.items():
            if holder is symbol:
                self.versions.setdefault(written, []).append(slot)
        self.hold(symbol, slot)

    def let_go(self, slot):
        left = self.holders[slot] = self.holders[slot] - 1
        value = self.values[slot]
        if not left and type(value) is np.ndarray and value.nbytes >= _KEEP_BYTES and slot not in self.inputs:
            self.released_c_order[slot] = value.flags.c_contiguous
            if not value.flags.writeable:
                self.released_read_only.add(slot)
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

    def live_symbols(self):
        """The Symbols user code still holds."""
        self.symbols = [ref for ref in self.symbols if ref() is not None]
        return [symbol for symbol in (ref() for ref in self.symbols) if symbol is not None]

    def shares_memory_with_live(self, target, besides=()):
        """Whether another Symbol still held (not one of `besides`, by id) shares memory with `target`."""
        mine = self.values[target.slot]
        return any(other is not target and id(other) not in besides and other.slot != target.slot
                   and np.may_share_memory(self.values[other.slot], mine) for other in self.live_symbols())

    def call(self, fn, name, args, kwargs, elementwise=False):
        """Run `fn` on concrete values, record it, and return Symbols for its array results.

        A Python-number argument (`Number`) is an operand of an elementwise call, replayed with
        each call's value; anywhere else (an axis, a shape, an index) it is fixed by a guard."""
        args = args if elementwise else self._freeze(args)
        kwargs = self._freeze(kwargs) if kwargs else kwargs
        concrete_args, ref_args = self._split(args)
        concrete_kwargs, ref_kwargs = self._split(kwargs) if kwargs else ({}, {})
        try:
            result = fn(*concrete_args, **concrete_kwargs)
        except Exception as error:
            self.raised(fn, name, ref_args, ref_kwargs, error)
            raise
        if isinstance(result, (bool, int, float, complex)) and not isinstance(result, np.generic):
            # A Python number computed from arrays (np.allclose, ...): replayed and guarded.
            value = self.call(_as_array(fn), name, args, kwargs)
            return self.guard(value, type(result))
        if result is None:
            raise JitError(f"pb.jit: np.{name} returned nothing, so it wrote into one of its arguments, which the "
                           "replay could not follow. Use a function that returns a new array instead.")
        outputs, structure, wrapped = self._wrap(result, name)
        if outputs is None:  # no array in the result: text, a tuple of numbers, computed from the values
            return self._plain_result(fn, name, ref_args, ref_kwargs, result)
        # an elementwise ufunc (its `out` taken away) always returns new arrays
        aliases = () if elementwise else self._aliases(result, concrete_args, (ref_args, ref_kwargs))
        self._append(Node(fn, name, ref_args, ref_kwargs, outputs, structure, elementwise, aliases))
        self._guard_numbers(outputs)
        if not elementwise and (_shaped_by_values(fn, concrete_args) or _given_a_generator((concrete_args, concrete_kwargs))):
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
        try:
            result = ufunc(*values)
        except Exception as error:  # under np.errstate(divide="raise"), say
            self.raised(ufunc, ufunc.__name__, tuple(refs), {}, error)
            raise
        outputs, structure, wrapped = self._wrap(result)
        self._append(Node(ufunc, ufunc.__name__, tuple(refs), {}, outputs, structure, True))
        return wrapped

    def raised(self, fn, name, ref_args, ref_kwargs, error):
        """Record that `fn(*ref_args, **ref_kwargs)` raised `error`: where the function catches it and goes on,
        a replay goes on only where the call raises it again (see `RaisesAgain`)."""
        if isinstance(error, JitError):
            return
        slot = self.new_slot(None)
        self._append(Node(RaisesAgain(fn, error), f"{name} (raised {type(error).__name__})", ref_args,
                          ref_kwargs, slot, None, False))

    def _aliases(self, result, concrete_args, ref_args):
        """Input slots whose memory the result may share (views: x.T, x[1:], np.reshape, ...)."""
        refs = []
        _collect_refs(ref_args, refs)
        results = result if isinstance(result, (tuple, list)) else (result,)
        return [slot for slot in refs
                if any(isinstance(r, np.ndarray) and np.may_share_memory(r, self.values[slot]) for r in results)]

    def guard(self, symbol, convert):
        """The Python value `convert(concrete value)`, recorded so the replay can check it."""
        return self.guard_at(symbol.slot, convert)

    def guard_at(self, slot, convert):
        """`guard` of the value at `slot`."""
        expected = convert(self.values[slot])
        self.guards.append(Guard(slot, convert, expected, len(self.nodes)))
        return expected

    def number_call(self, fn, name, args):
        """`fn(*args)` for Python-number arithmetic: a Number (or Symbol) for the result, recorded."""
        concrete, refs = self._split(args)
        result = fn(*concrete)
        first = result[0] if type(result) is tuple and result else result  # divmod's quotient
        if isinstance(first, (np.ndarray, np.generic)) and name in _NUMBER_UFUNCS:
            # a NumPy array or scalar operand. A float or complex result (`np.ones(3) * n`, the seed of a gradient
            # times a factor) is a value: the operator's ufunc, recorded with the number as an input, as beside a
            # traced array. An integer or boolean one may index plain arrays: NumPy's, at the number's value
            if first.dtype.kind in "fc" and isinstance(first, np.ndarray):
                return self.call(_NUMBER_UFUNCS[name], name, args, {}, elementwise=True)
            if first.dtype.kind in "fc":  # of NumPy scalars: the operator itself (a float32's ** rounds as
                return self.call(fn, name, args, {}, elementwise=True)  # NumPy's scalar power, not np.power)
            return fn(*self._freeze(args))
        if type(result) in (bool, int, float, complex):
            slot = self.new_slot(result)
            self._append(Node(fn, name, refs, {}, slot, None, False))
            number = Number(self, slot)
            # Python's arithmetic changes type with the values (2 ** -1 is a float, (-4.0) ** 0.5 complex):
            # a replay whose result has another type traces again
            self.guards.append(Guard(slot, type, type(result), len(self.nodes)))
            return number
        return self.call(fn, name, args, {})

    def draw(self, source, method, args, kwargs):
        """`Generator.method(*args, **kwargs)` of the generator argument `source`, recorded so that a replay
        draws afresh: a Symbol for an array drawn, a Number for a Python number (weakly typed, as without
        pb.jit). A draw that gives neither (bytes) or writes into `out=` is refused; `shuffle` is a drawn
        permutation written into its array (see `_shuffle`)."""
        fn, name = _draw(method), f"Generator.{method}"
        if method == "shuffle":
            return _shuffle(self, source, *args, **kwargs)
        if kwargs.get("out") is not None:
            raise JitError(f"pb.jit: {name}(..., out=...) of a generator argument writes into an array in place, "
                           "which the replay could not follow. Use the draw's result: x[...] = rng.random(x.shape).")
        args, kwargs = self._freeze(args), self._freeze(kwargs)
        (concrete_args, ref_args), (concrete_kwargs, ref_kwargs) = self._split((source, *args)), self._split(kwargs)
        result = fn(*concrete_args, **concrete_kwargs)
        if type(result) in (bool, int, float, complex):
            slot = self.new_slot(result)
            self._append(Node(fn, name, ref_args, ref_kwargs, slot, None, False))
            return Number(self, slot)
        outputs, structure, wrapped = self._wrap(result)
        if outputs is None:
            raise JitError(f"pb.jit: {name} of a generator argument gave a {type(result).__name__}, not an array "
                           "nor a number, so a replay could not draw it afresh (it would repeat the trace's draw). "
                           "Draw an array instead: rng.integers(0, 256, n, dtype=np.uint8) for bytes.")
        aliases = self._aliases(result, concrete_args, (ref_args, ref_kwargs))
        self._append(Node(fn, name, ref_args, ref_kwargs, outputs, structure, False, aliases))
        self._guard_numbers(outputs)
        return wrapped

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
        if isinstance(x, np.ndarray):
            self.constant_read = True
        elif isinstance(x, slice) and any(isinstance(v, Symbol) for v in (x.start, x.stop, x.step)):
            raise JitError("pb.jit: a slice bound computed from a traced array (x[:k], with k drawn or computed from "
                           "an array), which a replay could not follow. Write int(k) inside the function: its value "
                           "is then fixed by a guard, so a call where it differs traces again. Or index with an array.")
        return x, x

    def _plain_result(self, fn, name, ref_args, ref_kwargs, result):
        """A recorded call's result that holds no array: Python data (`np.array2string`'s text, a tuple of
        numbers) is the trace's, fixed by a guard that the replay recomputes; another object is refused."""
        if not _plain_data(result):
            raise JitError(f"pb.jit: {name} inside pb.jit returned an object of type {type(result).__name__}, which "
                           "a replay cannot rebuild from its arrays (it would give the trace's). Call it outside the "
                           "jitted function, or use a function that returns arrays.")
        holder = np.empty((), dtype=object)
        holder[()] = result
        slot = self.new_slot(holder)
        self._append(Node(_held(fn), name, ref_args, ref_kwargs, slot, None, False))
        self.guard_at(slot, _exact_held)
        return result

    def _wrap(self, result, name="a NumPy function"):
        if isinstance(result, (np.ndarray, np.generic)):
            slot = self.new_slot(result)
            return slot, None, self.symbol(slot)
        if isinstance(result, (tuple, list)) and any(isinstance(r, (np.ndarray, np.generic)) for r in result):
            if not all(isinstance(r, (np.ndarray, np.generic)) or type(r) in _PYTHON_NUMBERS for r in result):
                raise JitError(f"pb.jit: {name} returned a mix of arrays and other values "
                               f"({type(result).__name__} of {', '.join(type(r).__name__ for r in result)}), which the "
                               "replay cannot rebuild. Call it outside the jitted function, or a function that returns "
                               "arrays only.")
            slots = [self.new_slot(r) for r in result]
            # a Python number among them (a rank) is the trace's, fixed by a guard (see `_guard_numbers`)
            parts = [r if type(r) in _PYTHON_NUMBERS else self.symbol(s) for s, r in zip(slots, result)]
            kind = type(result)
            rebuilt = kind(parts) if kind in (tuple, list) else kind(*parts)
            return tuple(slots), kind, rebuilt
        return None, None, result

    def _guard_numbers(self, outputs):
        """Fix by a guard each Python number among a recorded call's results (`outputs`, their slots), as a
        Python number a NumPy function returns is fixed: a replay where it differs traces again."""
        for slot in outputs if isinstance(outputs, tuple) else ():
            if type(self.values[slot]) in _PYTHON_NUMBERS:
                self.guard_at(slot, _exact)


def _forward(fn, name):
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    method.__name__ = name
    return method


def _sparse_aware(method, name):
    """Operator `name` (matmul, rmatmul, mul, rmul) of a Symbol, recording SciPy's product `A @ x` (`x @ A`) where
    the other operand is a scipy.sparse matrix or array, as `sparse_matmul`; else `method`."""
    reflected, product = name.startswith("r"), name.endswith("matmul")

    def operator_method(self, other):
        sparse = sys.modules.get("scipy.sparse")
        if sparse is None or not sparse.issparse(other):
            return method(self, other)
        from .rules.scipy_sparse import matrix_product_only, sparse_matmul

        operands = (other, self) if reflected else (self, other)
        if not product:
            matrix_product_only(*operands)  # `*` is a matrix product for a *_matrix only
        return self.owner.call(sparse_matmul, "sparse_matmul", operands, {})

    operator_method.__name__ = f"__{name}__"
    return operator_method


def _array_method(fn, name):
    """`x.name(...)` as `fn(x, ...)`, raising NumPy's AttributeError where the value has no such method
    (a NumPy scalar's `dot`)."""
    def method(self, *args, **kwargs):
        value = self._concrete()
        if not hasattr(value, name):
            kind = type(value)
            raise AttributeError(f"'{kind.__module__}.{kind.__name__}' object has no attribute '{name}'")
        return fn(self, *args, **kwargs)

    method.__name__ = name
    return method


class Symbol:
    """An array during a `pb.jit` trace (see the module docstring)."""

    __slots__ = ("owner", "slot", "viewed", "__weakref__")
    __array_priority__ = 1000.0

    def __init__(self, trace, slot):
        self.owner = trace
        self.slot = slot
        holders = trace.holders
        holders[slot] = holders.get(slot, 0) + 1
        # (the base Symbol, index, the base's slot then) for x[index] views; the base is held, as NumPy's view holds
        # its base, so that a write into a view of a view made in passing (x[1:][1:]) reaches x
        self.viewed = None

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
            _about_to_write(inputs[0])
            result = _write_call(self.owner, _ufunc_at, f"{ufunc.__name__}.at", (ufunc, *inputs), kwargs, (inputs[0],),
                                 f"np.{ufunc.__name__}.at")
            _rebind(inputs[0], result, f"np.{ufunc.__name__}.at")
            return None
        fn = ufunc if method == "__call__" else getattr(ufunc, method)
        name = f"{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        if out is None:
            return self.owner.call(fn, name, inputs, kwargs, elementwise=method == "__call__")
        # NumPy writes into copies of the `out` arrays (so out's dtype, casting= and where= are
        # NumPy's), and each `out` names its copy from then on
        outs = out if isinstance(out, tuple) else (out,)
        _about_to_write(*outs)
        construct = f"np.{ufunc.__name__}(..., out=...)"
        if method == "__call__" and not kwargs:
            result = _write_call(self.owner, fn, name, inputs, kwargs, outs, construct, elementwise=True,
                                 copied=(_ufunc_written_into_copies, (fn, len(outs), *outs, *inputs)))
            if _fits(outs, result):  # out's dtype and shape: recorded as a new array, which can be fused
                return _rebind(out, result, f"np.{ufunc.__name__}(..., out=...)")
            # otherwise that call is dead code, which the compiled program drops
        result = _write_call(self.owner, _ufunc_written_into_copies, f"{name}(out=)", (fn, len(outs), *outs, *inputs),
                             kwargs, outs, construct)
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
        if func in _WRITES_FIRST and args:  # np.putmask(a, ...): a write into `a`, made functional as x[i] = v is
            _about_to_write(args[0])
            result = _write_call(self.owner, _applied_to_copy, name, (func, *args), kwargs, (args[0],), f"np.{name}")
            _rebind(args[0], result, f"np.{name}")
            return None
        if func in _WRITES_FIRST_UNLESS and args and _writes_first(func, args, kwargs):
            return _written_and_returned(func, name, args, kwargs)
        out, args, kwargs = _out_apart(func, args, kwargs)
        if out is None:
            return _noting_read_only_view(self.owner, self.owner.call(func, name, args, kwargs))
        if func in _PIECEWISE and isinstance(out, Symbol) and _reads_from(args, out):
            return _written_piecewise(func, out, args, kwargs)
        # an in-place write made functional, as for a ufunc's out=: the replay writes into a copy of
        # `out`, and `out` names the copy from then on
        _about_to_write(out)
        result = _write_call(self.owner, _written_into_copy, f"{name}(out=)", (func, out, *args), kwargs, (out,),
                             f"np.{name}(..., out=...)")
        return _rebind(out, result, f"np.{name}(..., out=...)")

    def __array__(self, dtype=None, copy=None):
        caller = sys._getframe(1)
        if caller.f_globals.get("__name__", "").startswith("scipy.sparse"):
            if caller.f_code.co_name == "_matmul_dispatch":  # `A @ x`: SciPy gives NotImplemented, then x.__rmatmul__(A)
                return np.empty((), object)
            raise JitError(f"pb.jit: scipy.sparse's {caller.f_code.co_name} converted a traced array to a NumPy array, "
                           "which the replay could not follow. pb.jit records the products A @ x, x @ A, A.dot(x) "
                           "and, for a *_matrix, A * x; for another operation (A * x of a *_array multiplies "
                           "elementwise) convert the matrix first (A.toarray()).")
        raise JitError("pb.jit: a traced array was converted to a NumPy array (np.asarray, np.array, a library "
                       "that calls them, indexing a plain array with it as in np.eye(3)[labels] or np.take(table, "
                       "labels), or writing it into a plain array), which the replay could not follow. Keep the "
                       "computation in NumPy calls on the traced array (rows of a plain table: "
                       "np.take_along_axis(table, labels[:, None], axis=0); a one-hot: "
                       "(labels[:, None] == np.arange(3)).astype(float)), or move it outside the jitted function. "
                       "A random draw from a generator pb.jit does not record (one made inside the function, "
                       "NumPy's global one) reads its arguments so too "
                       "(rng.permutation(x), rng.permuted(x), rng.choice(x), rng.normal(mu)): index by drawn "
                       "positions (x[rng.permutation(len(x))], np.take(x, rng.permutation(x.shape[k]), axis=k)), "
                       "transform standard draws (mu + rng.standard_normal(shape)), or pass the generator in as an "
                       "argument, whose draws pb.jit records.")

    # --- metadata, known from the concrete value ----------------------------------------------
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
            result.viewed = (self, index, self.slot)
            if type(index) is int:
                site = _c_call_site(sys._getframe(1))
                if site is not None:  # (see `_detach_swapped_row`)
                    _note_row_asked_by_c(self, index, result, site)
        return result

    def __setitem__(self, index, value):
        by_c = type(index) is int and _c_call_site(sys._getframe(1)) is not None
        if by_c and self.owner.rows_asked_by_c:
            _detach_swapped_row(self, index, value)
        _about_to_write(self)
        result = _write_call(self.owner, setitem_copy, "setitem", (self, index, value), {}, (self,), "x[index] = value")
        try:
            _rebind((self,), result, "x[index] = value")
        except JitError as error:
            if by_c and "shares memory" in str(error):  # name the call the user wrote
                raise JitError(_SHUFFLED_VIEW) from None
            raise

    def reshape(self, *shape, **kwargs):
        shape = shape[0] if len(shape) == 1 else shape
        return np.reshape(self, shape, **kwargs)

    def transpose(self, *axes):
        return np.transpose(self, axes[0] if len(axes) == 1 else (axes or None))

    T = property(lambda self: np.transpose(self))
    mT = property(lambda self: np.matrix_transpose(self))

    def _set_real(self, value):
        """`z.real = v`, as the write `z[...] = v + 1j * z.imag` (the array itself, for a real one)."""
        self[...] = value + 1j * np.imag(self) if self.dtype.kind == "c" else value

    def _set_imag(self, value):
        """`z.imag = v`, as the write `z[...] = z.real + 1j * v`."""
        if self.dtype.kind != "c":
            raise TypeError("array does not have imaginary part to set")
        self[...] = np.real(self) + 1j * value

    real = property(lambda self: np.real(self), _set_real)
    imag = property(lambda self: np.imag(self), _set_imag)

    def astype(self, dtype, *args, **kwargs):
        return self.owner.call(_astype, "astype", (self, dtype, *args), kwargs)

    def copy(self, order="C"):
        if isinstance(self._concrete(), np.generic):  # a NumPy scalar's copy is a NumPy scalar
            return self.owner.call(_copy_method, "copy", (self,), {"order": order})
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

    def clip(self, min=None, max=None, out=None, **kwargs):
        """`x.clip(lo)`, `x.clip(max=hi)`: either bound may be left out, as ndarray's."""
        return np.clip(self, min, max, out=out, **kwargs)

    def put(self, indices, values, mode="raise"):
        """`x.put(...)` writes into x, as np.put does (recorded)."""
        np.put(self, indices, values, mode=mode)

    def view(self, *args, **kwargs):
        """`x.view()`, `x.view(dtype)`: a view of the same memory, recorded. A view with x's dtype is
        written through as `x[...]` is; an ndarray subclass (`x.view(np.matrix)`) is refused."""
        if any(isinstance(a, type) and issubclass(a, np.ndarray) and a is not np.ndarray
               for a in (*args, *kwargs.values())):
            raise JitError("pb.jit: x.view(subclass) of a traced array makes an ndarray subclass, whose behaviour "
                           "the replay would not keep. Call the subclass's code outside the jitted function.")
        result = self.owner.call(_view_of, "view", (self, *args), kwargs)
        if isinstance(result, Symbol) and result.dtype == self.dtype and result.shape == self.shape:
            result.viewed = (self, Ellipsis, self.slot)
        return result

    def __copy__(self):
        """copy.copy(x), copy.deepcopy(x): a recorded copy (NumPy's keeps the memory order)."""
        return self.copy(order="K")

    def __deepcopy__(self, memo):
        return self.copy(order="K")

    # --- Python's own protocols on a NumPy scalar or array ------------------------------------------
    def __format__(self, spec):
        """f"{loss:.3f}": the text, fixed by a guard (as `float(loss)` is); f"{x}" gives the stand-in's repr."""
        return self.owner.guard(self, lambda v: format(v, spec)) if spec else repr(self)

    def __round__(self, ndigits=None):
        """round(x) of a NumPy scalar is a Python int (a guard); round(x, n) is np.round, recorded. An
        ndarray has no round(), as in NumPy."""
        if not isinstance(self._concrete(), np.generic):
            raise TypeError("type numpy.ndarray doesn't define __round__ method")
        if ndigits is None:
            return self.owner.guard(self, round)
        return np.round(self, ndigits)

    def __divmod__(self, other):
        return np.divmod(self, other)

    def __rdivmod__(self, other):
        return np.divmod(other, self)

    # --- memory: what the replay can follow, and what it refuses ----------------------------------
    flags = property(lambda self: _Flags(self))

    @property
    def strides(self):
        return _memory_attribute(self, operator.attrgetter("strides"))
    device = property(lambda self: "cpu")

    @property
    def flat(self):
        """`x.flat[i]` reads a copy and `x.flat[i] = v` writes into x, recorded, as in NumPy."""
        return _Flat(self)

    @flat.setter
    def flat(self, value):
        """`x.flat = v`, as `x.flat[:] = v` (v repeated as NumPy repeats it)."""
        _Flat(self)[:] = value

    @property
    def shape(self):
        return self._concrete().shape

    @shape.setter
    def shape(self, shape):
        """`x.shape = s`: this name now stands for a view of x in shape s (NumPy's error where it would copy).
        On an argument it would change the caller's array, which a replay cannot: refused."""
        if _is_argument(self):
            raise JitError("pb.jit: setting x.shape of an argument changes the caller's array, which a replay "
                           "cannot do. Use x = x.reshape(shape) (a view) inside the jitted function.")
        reshaped = self.owner.call(_with_shape, "shape=", (self, shape), {})
        self.owner.hold(self, reshaped.slot)
        self.viewed = None

    @property
    def base(self):
        raise _memory_refused("x.base", "test np.shares_memory(x, y) instead (a guard)")

    @property
    def data(self):
        raise _memory_refused("x.data (a buffer)", "keep the computation in NumPy calls on x")

    def resize(self, *args, **kwargs):
        raise _memory_refused("x.resize(...) (in place)", "use x = np.resize(x, shape) or x.reshape(shape)")

    def conj(self):
        return np.conjugate(self) if self.dtype.kind == "c" else self  # NumPy's x.conj() of a real x is x

    conjugate = conj

    def tobytes(self, order="C"):
        """The bytes of the value, fixed by a guard (as `x.tolist()` is)."""
        return self.owner.guard(self, lambda v: v.tobytes(order))

    for _name in _METHODS:
        if hasattr(np.ndarray, _name):  # NumPy 2's ndarray has no ptp
            locals()[_name] = _array_method(getattr(np, _name), _name)
    for _name, _fn in _SYMBOL_OPERATORS.items():
        locals()[f"__{_name}__"] = _forward(_fn, _name)
        locals()[f"__r{_name}__"] = (lambda f: lambda self, other: f(other, self))(_fn)
        locals()[f"__i{_name}__"] = (lambda f: lambda self, other: _in_place(f, self, other))(_fn)
    for _name, _fn in {**_COMPARISONS, **_UNARY}.items():
        locals()[f"__{_name}__"] = _forward(_fn, _name)
    for _name in ("matmul", "rmatmul", "mul", "rmul"):  # a scipy.sparse operand: SciPy's product, recorded
        locals()[f"__{_name}__"] = _sparse_aware(locals()[f"__{_name}__"], _name)
    del _name, _fn

    __hash__ = None  # type: ignore[assignment]


class RandomSource:
    """A `np.random.Generator` argument during a trace: each draw is recorded, so a replay draws
    afresh from the generator passed to that call (and advances it as an eager call would). It is a
    Generator to `isinstance` (so code that checks, as `pb.nn.Dropout` and SciPy's `random_state=` do,
    takes it), though `type(rng)` is its own."""

    __slots__ = ("owner", "slot")
    __pullback_leaf__ = True  # a leaf to pb.tree, as a generator is

    def __init__(self, trace, slot):
        self.owner, self.slot = trace, slot

    @property
    def __class__(self):
        return np.random.Generator

    def __getattr__(self, name):
        if name in ("bit_generator", "spawn"):  # draws made through them would be hidden from the trace
            raise JitError(f"pb.jit: Generator.{name} of a generator argument is not followed: its draws would be "
                           "the trace's at every replay. Draw from the generator itself (rng.normal(...), "
                           "rng.integers(...)), or pass the generator you would make from it as an argument.")
        method = getattr(np.random.Generator, name)
        if not callable(method):
            return getattr(self.owner.values[self.slot], name)
        return lambda *args, **kwargs: self.owner.draw(self, name, args, kwargs)

    def __copy__(self):
        raise JitError("pb.jit: a copy of a generator argument (copy.copy, copy.deepcopy, pickle) is not followed: its "
                       "draws would be the trace's at every replay. Draw from the generator itself, or pass the copy "
                       "in as another argument.")

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __reduce_ex__(self, protocol):
        return self.__copy__()


def _given_a_generator(x):
    """Whether a generator is among the concrete arguments `x` of a recorded call (a `pb.primitive` that draws
    from a generator argument). Its results' layout may depend on the draws, so it is guarded, and the guard
    keeps the call in every replay: the generator advances as eagerly, whether its results are used or not."""
    if isinstance(x, np.random.Generator):
        return True
    if type(x) in (tuple, list):
        return any(_given_a_generator(v) for v in x)
    return type(x) is dict and any(_given_a_generator(v) for v in x.values())


# A reverse sweep traced by pb.jit treats a Symbol as it does an array: it carries constant factors
# on it (see `pullback._tangents.Scaled`), so the replay makes the same few memory passes.
_tangents.ARRAY_TYPES.add(Symbol)


def _same(value):
    return value


def _number_method(fn, reflected=False):
    def method(self, other):
        if isinstance(other, Symbol) or is_traced(other):
            # the array's own operator records a NumPy call; a value being differentiated applies its rule
            return NotImplemented
        name = fn.__name__.rstrip("_")  # operator.and_ is `and`
        return self.owner.number_call(fn, name, (other, self) if reflected else (self, other))

    return method


class Number:
    """A Python int, float or complex argument during a trace. Arithmetic on it is recorded with
    Python's own operators (so a replay computes with each call's value, exactly as Python would,
    weak typing included); as an operand of a NumPy ufunc beside a traced array, or of an operator
    beside a plain array whose result is floating (`np.ones(3) * n`), it is replayed too. Used for
    anything else (a shape, an axis, an index, a branch, `int(n)`, a value to differentiate, a
    NumPy function's argument on plain arrays) its value is fixed by a guard."""

    __slots__ = ("owner", "slot")
    # above NumPy's: `array * n` gives way to this class's operators (see `Trace.number_call`), where NumPy
    # would read the number's value (a guard)
    __array_priority__ = 1e6

    def __init__(self, trace, slot):
        self.owner, self.slot = trace, slot

    def __copy__(self):
        return self  # a number is immutable

    def __deepcopy__(self, memo):
        return self

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
        return self._divmod(other, reflected=False)

    def __rdivmod__(self, other):
        return self._divmod(other, reflected=True)

    def _divmod(self, other, reflected):
        """divmod beside an array is np.divmod, recorded as the other operators are (with a traced array, by
        its own `__rdivmod__`); beside a number, its value, fixed by a guard."""
        if isinstance(other, Symbol):
            return NotImplemented
        if isinstance(other, (np.ndarray, np.generic)):
            return self.owner.number_call(divmod, "divmod", (other, self) if reflected else (self, other))
        return self._value(lambda v: divmod(other, v) if reflected else divmod(v, other))

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


# NumPy's shuffle warns that an object other than an ndarray may end with duplicate rows (views); a Symbol
# permutes as NumPy does an ndarray (see `_detach_swapped_row`), which it does not warn of
warnings.filterwarnings("ignore", message="you are shuffling a 'Symbol' object", category=UserWarning)


def _c_call_site(frame):
    """`c_call_site(frame)` of the user's frame (None for pullback's own frames, whose rows are its own business)."""
    if frame.f_globals.get("__name__", "").startswith("pullback."):
        return None
    return c_call_site(frame)


def _note_row_asked_by_c(x, index, row, site):
    rows = x.owner.rows_asked_by_c
    rows.append((weakref.ref(x), weakref.ref(row), index % len(x), site))
    if len(rows) > 32 and len(rows) & (len(rows) - 1) == 0:  # now and then, forget rows that died
        rows[:] = [entry for entry in rows if entry[1]() is not None]


def _detach_swapped_row(x, index, value):
    """Before `x[index] = value` written by C code that, in the same call, asked for `value = x[j]` and then for
    `x[index]`: that row `x[index]` keeps its current value from now on (a recorded copy), no longer a view of x.

    NumPy's shuffle of an object that is not an ndarray (a Generator or RandomState made inside the function
    shuffling a traced array) swaps rows in C as `x[i], x[j] = x[j], x[i]`: the row `x[i]` it holds, a view,
    would show the first write, and x end with two copies of row j. NumPy swaps an ndarray's memory, so that x
    is permuted: detaching `x[i]` does the same. Any other access keeps views, as in NumPy."""
    trace = x.owner
    site = _c_call_site(sys._getframe(2))
    live = [entry for entry in trace.rows_asked_by_c if entry[0]() is not None and entry[1]() is not None]
    trace.rows_asked_by_c[:] = live
    if site is None:
        return
    mine = [entry for entry in live if entry[0]() is x and entry[3] == site]
    if len(mine) < 2 or mine[-2][1]() is not value or mine[-1][2] != index % len(x) or mine[-1][1]() is value:
        return
    row = mine[-1][1]()
    copied = trace.call(np.copy, "copy", (row,), {})
    row.viewed = None
    trace.hold(row, copied.slot)
    trace.rows_asked_by_c[:] = [entry for entry in live if entry is not mine[-1]]


_SHUFFLED_VIEW = (
    "pb.jit: rng.shuffle(v) writes into v, a view of an array that is not x[index] of it (x.T, a reshape), which "
    "the replay could not keep in step with that array (NumPy's shuffle of a stand-in swaps its rows one by one: "
    "v[i], v[j] = v[j], v[i]). Permute by indexing instead, which draws the same permutation: "
    "y = y[:, rng.permutation(y.shape[1])] in place of rng.shuffle(y.T) (in general y = np.take(y, "
    "rng.permutation(y.shape[k]), axis=k)), or shuffle a copy (v = y.T.copy(); rng.shuffle(v)).")
_SCRATCH_GENERATOR = np.random.Generator(np.random.PCG64(0))


def _shuffle(trace, source, x, axis=0):
    """`rng.shuffle(x, axis)` of the generator argument `source`: NumPy's permutation of x along `axis` drawn as
    `rng.permutation(n)` (the same draws, leaving the generator in the same state), recorded so that a replay
    draws afresh, and written into x as `x[...] = np.take(x, order, axis)`. NumPy's errors are NumPy's (from a
    shuffle of a stand-in without memory, by another generator). A Python list (or another object) reordered
    in place, or a plain array, is refused: a replay could not follow either."""
    if isinstance(x, Symbol):
        value = x._concrete()
        if isinstance(value, np.ndarray):
            value = np.lib.stride_tricks.as_strided(np.zeros(1, value.dtype), value.shape, (0,) * value.ndim,
                                                    writeable=bool(value.flags.writeable))
        _SCRATCH_GENERATOR.shuffle(value, axis=axis)  # NumPy's errors (an axis out of bounds, a read-only array)
        axis = operator.index(axis) % x.ndim
        n = x.shape[axis] if x.size else 0  # NumPy draws nothing for an empty array
        if n > 1:
            order = trace.draw(source, "permutation", (n,), {})
            try:
                x[...] = x[order] if axis == 0 else np.take(x, order, axis=axis)
            except JitError as error:
                if "shares memory" in str(error):
                    raise JitError(_SHUFFLED_VIEW) from None
                raise
        return None
    if is_traced(x) and not isinstance(x, np.ndarray):  # a value being differentiated, holding a Symbol
        if axis != 0:
            raise NotImplementedError("Axis argument is only supported on ndarray objects")
        n = len(x) if np.size(x) else 0
        if n > 1:
            order = trace.draw(source, "permutation", (n,), {})
            x[...] = x[order]
        return None
    if isinstance(x, np.ndarray):
        raise JitError("pb.jit: Generator.shuffle of a plain NumPy array by a generator argument writes the draws "
                       "into that array in place, which a replay could not follow (it would keep the trace's "
                       "order). Use the draw's result: order = rng.permutation(n) (or x = rng.permutation(x)).")
    raise JitError(f"pb.jit: Generator.shuffle of a {type(x).__name__} by a generator argument reorders it in place "
                   "by the trace's draws, which a replay could not follow. Stack the arrays and shuffle the stack: "
                   "y = np.stack(items); rng.shuffle(y) (or y = np.stack(items)[rng.permutation(len(items))]).")


@functools.lru_cache(maxsize=None)
def _draw(name):
    def draw(generator, *args, **kwargs):
        return getattr(generator, name)(*args, **kwargs)

    draw.__name__ = name
    return draw


def _defers(x):
    """Whether `x` is another array type that handles NumPy's protocols itself (pullback's traced values)."""
    kind = type(x)
    return kind is not Symbol and not issubclass(kind, np.ndarray) and getattr(kind, "__array_ufunc__", None) is not None


def _rebind(out, result, construct):
    """An in-place write, made functional: each `out` Symbol now names the new result. A write into a view
    `x[index]` writes `x` (and the view whose base it is, up to the array that views nothing), and every
    live view `x[index]` of an array written is made again from its new value, so that views and bases
    stay in step as in NumPy; any other live array sharing memory with `out` is refused."""
    outs = out if isinstance(out, tuple) else (out,)
    results = result if isinstance(result, tuple) else (result,)
    for target, new in zip(outs, results):
        if not isinstance(target, Symbol):
            raise JitError(f"pb.jit: {construct} writes a traced value into a NumPy array, which the replay "
                           "could not follow. Build the result with NumPy calls instead (np.where, np.concatenate).")
        trace = target.owner
        if trace.shares_memory_with_live(target, besides=_family(trace, target)):
            raise JitError(f"pb.jit: {construct} writes into an array that shares memory with another that is not "
                           "x[index] of it (x.T, a reshape); the replay could not keep them in step. Write "
                           "y = x + v (a new array) instead, or make the view after the write.")
        _write(target, new)
    return outs[0] if len(outs) == 1 else outs


def _write_call(trace, fn, name, args, kwargs, targets, construct, elementwise=False, copied=None):
    """`trace.call(fn, name, args, kwargs)` of a write into copies of the arrays `targets` (see `_rebind`). Where
    it raises, each target is first rebound to what the write left in it (see `PartlyWritten`; `copied` is
    `(fn, args)` of the call writing into copies, where `fn` writes into none), so that the function's caller,
    or its own `except`, finds the arrays as NumPy leaves them."""
    try:
        return trace.call(fn, name, args, kwargs, elementwise=elementwise)
    except JitError:
        raise
    except BaseException:  # an np.errstate(call=...) callback may raise any (NumPy calls it after the write)
        _keep_partial_write(trace, *(copied or (fn, args)), kwargs, targets, construct, name)
        raise


def _keep_partial_write(trace, fn, args, kwargs, targets, construct, name):
    """Rebind `targets` to what the write `fn(*args, **kwargs)`, which raised, left in them, where it had
    copied them to write into (recorded, also where it wrote nothing: a replay that gets there, at other
    values, may write part of them)."""
    partial = PartlyWritten(fn)
    made = partial(*trace._split(args)[0], **trace._split(kwargs)[0])
    targets = tuple(t for t in targets if t is not None)
    if len(made if isinstance(made, tuple) else (made,)) != len(targets):  # raised before copying (read-only)
        return
    result = trace.call(partial, f"{name} (until it raised)", args, kwargs)
    _rebind(targets, result, construct)


def _base_of(view):
    """The live Symbol that `view` is `x[index]` of (of its current value), or None."""
    if view.viewed is None:
        return None
    base = view.viewed[0]
    return base if base.slot == view.viewed[2] else None


def _family(trace, symbol):
    """The ids of the live Symbols a write into `symbol` keeps in step: the array it is a view of (through
    x[index], repeatedly) and every such view of that array."""
    root = symbol
    while (base := _base_of(root)) is not None:
        root = base
    views = {}
    for other in trace.live_symbols():
        base = _base_of(other)
        if base is not None:
            views.setdefault(id(base), []).append(other)
    family, todo = set(), [root]
    while todo:
        member = todo.pop()
        family.add(id(member))
        todo += views.get(id(member), ())
    return family


def _write(target, new):
    """`target` (a Symbol) now holds the value of Symbol `new`: a view writes its base with
    `x[index] = new`, the array that views nothing is rebound, and its views are made again."""
    base = _base_of(target)
    if base is not None:
        _write(base, base.owner.call(setitem_copy, "setitem", (base, target.viewed[1], new), {}))
        return  # `target`, a view of `base`, was made again from its new value
    old = target.slot
    target.owner.rebind(target, new.slot)
    _renew_views(target, old)


def _renew_views(base, old):
    """Make each live `base[index]` view of the value `base` had at slot `old` again from its new value."""
    trace = base.owner
    for view in trace.live_symbols():
        if view.viewed is not None and view.viewed[0] is base and view.viewed[2] == old:
            renewed = trace.call(_getitem, "getitem", (base, view.viewed[1]), {})
            previous = view.slot
            read_only = _is_read_only(trace.values[previous]) and not _is_read_only(renewed._concrete())
            view.viewed = (view.viewed[0], view.viewed[1], base.slot)
            trace.hold(view, renewed.slot)
            if read_only:  # a view made read-only (x.flags.writeable = False) stays so
                _set_writeable(view, False)
            _renew_views(view, previous)


def _is_read_only(value):
    return isinstance(value, np.ndarray) and not value.flags.writeable


def _writes_first(func, args, kwargs):
    """Whether `func(*args, **kwargs)`, one of `_WRITES_FIRST_UNLESS`, writes into its first argument: its
    keyword (np.nan_to_num's `copy`) is False, and the argument is an array (NumPy makes a scalar anew)."""
    keyword = _WRITES_FIRST_UNLESS[func]
    names = _positional_names(func)
    given = args[names.index(keyword)] if keyword in names and len(args) > names.index(keyword) else \
        kwargs.get(keyword, True)
    return not given and isinstance(args[0], Symbol) and isinstance(args[0]._concrete(), np.ndarray)


def _written_and_returned(func, name, args, kwargs):
    """`func(a, ...)` that writes into the array `a` and returns it (np.nan_to_num(a, copy=False)): recorded as
    a write into `a`, as `a[...] = v` is; the result is `a` itself (its 0-d value read out, as NumPy's)."""
    a = args[0]
    _about_to_write(a)
    result = _write_call(a.owner, _applied_to_copy, name, (func, *args), kwargs, (a,), f"np.{name}")
    _rebind((a,), result, f"np.{name}")
    return a if a.ndim else a[()]


# functions that copy their arrays into `out` one after another, each piece read when its turn comes
_PIECEWISE = frozenset((np.concatenate, np.stack))


def _reads_from(args, out):
    """Whether one of the arrays (the first argument) shares memory with `out`."""
    arrays = args[0] if args else ()
    return any(isinstance(a, Symbol) and np.shares_memory(a._concrete(), out._concrete()) for a in arrays)


def _written_piecewise(func, out, args, kwargs):
    """np.concatenate or np.stack into an `out` that some of its arrays view: NumPy copies the arrays into
    `out` in order, so a view of `out` is read after the earlier arrays were written into it; the trace
    makes the same writes in the same order (x[index] = piece), after NumPy's own checks of shapes,
    dtypes and casting on a scratch copy."""
    owner = out.owner
    func(*owner._split(args)[0], out=np.empty_like(out._concrete()), **owner._split(kwargs)[0])
    try:
        return _write_pieces(func, out, args, kwargs)
    except JitError as error:  # name the call the user wrote, not the writes it is made of
        raise JitError(str(error).replace("x[index] = value", f"np.{func.__name__}(..., out=...)")) from None


def _write_pieces(func, out, args, kwargs):
    arrays, options = args[0], {**dict(zip(("axis",), args[1:2])), **kwargs}
    axis = options.get("axis", 0)
    if func is np.stack:
        axis = axis % out.ndim
        for i, piece in enumerate(arrays):
            out[(slice(None),) * axis + (i,)] = piece
        return out
    axis = None if axis is None else axis % out.ndim
    start = 0
    for piece in arrays:
        if axis is None:
            size = np.size(piece)
            out[start:start + size] = piece.flatten() if isinstance(piece, Symbol) else np.ravel(piece)
        else:
            size = np.shape(piece)[axis]
            out[(slice(None),) * axis + (slice(start, start + size),)] = piece
        start += size
    return out


def _noting_read_only_view(trace, result):
    """`result`, a NumPy function's: where it is a read-only view the function's own code made (np.broadcast_to,
    np.diagonal), its node says so (see `Node.read_only_view`)."""
    if isinstance(result, Symbol) and _is_read_only(result._concrete()) and _called_by_user():
        node = trace.nodes[-1] if trace.nodes else None
        if node is not None and node.outputs == result.slot:
            node.read_only_view = True
    return result


def _called_by_user():
    """Whether the NumPy call being recorded was made by code outside pullback (the jitted function's own), or
    by a rule computing the value of the function's own NumPy call on a differentiated value (`np.broadcast_to`
    of `x * 2` inside `pb.jvp`, whose value pullback hands out as it is); not by pullback's other code (a
    gradient, a tangent), whose read-only results pullback hands out as copies. Frames of this module (an
    ndarray method's forwarding) are passed over."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in (__name__, "numpy._core.overrides"):
        frame = frame.f_back
    if not _in_pullback(frame):
        return True
    return _rule_value_of_user_call(frame)


def _in_pullback(frame):
    module = frame.f_globals.get("__name__", "") if frame is not None else ""
    return module == "pullback" or module.startswith("pullback.")


# (module, function) of the frames that apply a rule to compute the value of a call, and of those that
# dispatch a user's NumPy call on a differentiated value to them
_RULE_CALLERS = frozenset((("pullback.rules._register", "forward"), ("pullback._reverse", "apply")))
_DISPATCH_MODULES = frozenset(("pullback._values", "pullback._extend", "pullback._forward", "pullback._reverse",
                               "pullback.rules._register"))


def _place(frame):
    return (frame.f_globals.get("__name__", ""), frame.f_code.co_name) if frame is not None else None


def _rule_value_of_user_call(frame):
    """Whether `frame` (pullback's, making the NumPy call) is a rule's own code computing its value, applied
    by the dispatch of a call the user's code made (through the rules of enclosing levels computing their
    values: `pb.jvp` of `pb.vjp`), with nothing else of pullback's in between."""
    while True:
        while _is_rule(frame) and _place(frame.f_back) not in _RULE_CALLERS:
            frame = frame.f_back  # a helper of the rule
        if not _is_rule(frame):
            return False
        frame = frame.f_back
        while frame is not None and frame.f_globals.get("__name__") in _DISPATCH_MODULES:
            frame = frame.f_back
        if frame is None:
            return False
        if not _in_pullback(frame):
            return True


def _is_rule(frame):
    module = frame.f_globals.get("__name__", "") if frame is not None else ""
    return module.startswith("pullback.rules.") and module != "pullback.rules._register"


def _plain_data(value, depth=0):
    """Whether `value` is Python data a guard can compare: text, numbers, dtypes, and tuples, lists and
    dicts of them."""
    if isinstance(value, (str, bytes, bool, int, float, complex, np.generic, np.dtype, type(None))):
        return True
    if isinstance(value, (tuple, list)) and depth < 8:
        return all(_plain_data(v, depth + 1) for v in value)
    if type(value) is dict and depth < 8:
        return all(_plain_data(k, depth + 1) and _plain_data(v, depth + 1) for k, v in value.items())
    return False


def _held(fn):
    """`fn` with its result held in a 0-d object array: a Python value the replay recomputes for a guard."""
    def held(*args, **kwargs):
        holder = np.empty((), dtype=object)
        holder[()] = fn(*args, **kwargs)
        return holder

    return held


def _exact_held(holder):
    """The value `_held` holds, as a key equal only for equal values of equal types (a float by its text,
    so -0.0 is not 0.0 and a NaN is a NaN)."""
    return _exact(holder[()])


def _exact(value):
    if isinstance(value, (float, complex, np.inexact)):
        return type(value), repr(value)
    if isinstance(value, (tuple, list)):
        return type(value), tuple(_exact(v) for v in value)
    if type(value) is dict:
        return dict, tuple((_exact(k), _exact(v)) for k, v in value.items())
    return type(value), value


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
        parameters = signature_of(func).parameters.values()  # (np.dot's, np.concatenate's before NumPy 2.4 too)
    except (TypeError, ValueError):
        return ()
    names = []
    for p in parameters:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break
        names.append(p.name)
    return tuple(names)


def _fits(outs, results):
    """Whether each of `outs` (Symbols) has the dtype, shape and layout of its result (a Symbol of a NumPy array),
    and can be written."""
    results = results if isinstance(results, tuple) else (results,)
    return all(isinstance(o, Symbol) and isinstance(r, Symbol) and isinstance(o._concrete(), np.ndarray)
               and isinstance(r._concrete(), np.ndarray) and o._concrete().dtype == r._concrete().dtype
               and o._concrete().shape == r._concrete().shape and o._concrete().flags.writeable
               and o._concrete().strides == r._concrete().strides  # the write keeps out's layout
               for o, r in zip(outs, results))


def _in_place(fn, x, other):
    """`x op= other`: a write into `x`, or where `x` is a NumPy scalar (`c[1]` of a 1-d `c`), as in
    NumPy, a new value that `x`'s name is bound to."""
    if isinstance(x, Symbol) and not isinstance(x._concrete(), np.ndarray):
        return fn(x, other)
    return fn(x, other, out=(x,))


def _ufunc_written_into_copies(fn, n_out, *args, **kwargs):
    """`fn(*inputs, out=outs, **kwargs)` (`args` is `*outs, *inputs`) writing into copies of the `out`
    arrays given (None: a new array), which it returns as NumPy does."""
    outs = tuple(None if o is None else _copy_of_out(o, "output array is read-only") for o in args[:n_out])
    return fn(*args[n_out:], out=outs if n_out > 1 else outs[0], **kwargs)


def _copy_of_out(out, read_only_error=None):
    if not isinstance(out, np.ndarray):  # x[i] of a 1-d x is a NumPy scalar: NumPy refuses to write into it
        raise TypeError("return arrays must be of ArrayType")
    return _copy_to_write(out, read_only_error)


def _copy_to_write(x, read_only_error=None):
    """A copy of `x` standing for x after a write NumPy makes into x itself: in x's memory order (the write
    keeps x's layout), and NumPy's error (`read_only_error`, the message of the write made) where x is
    read-only (np.diagonal, np.broadcast_to, a read-only argument)."""
    if not isinstance(x, np.ndarray):
        return x.copy() if isinstance(x, np.generic) else np.copy(x)
    if not x.flags.writeable:
        raise ValueError(read_only_error or "assignment destination is read-only")
    copy = x.copy(order="K")
    made = getattr(_copies, "made", None)
    if made is not None:  # a `PartlyWritten` call: the copy is what it gives back
        made.append(copy)
    return copy


def _written_into_copy(func, out, *args, **kwargs):
    """`func(*args, out=out, **kwargs)` writing into a copy of `out`, which it returns (NumPy's casting
    and its errors included)."""
    if isinstance(out, np.generic):  # a NumPy scalar: NumPy's own error, worded by function and version
        func(*args, out=out, **kwargs)
    written = _copy_of_out(out)
    func(*args, out=written, **kwargs)
    return written


def _ufunc_at(ufunc, x, *args):
    y = _copy_to_write(x)
    ufunc.at(y, *args)
    return y


def _as_index(v):
    return v.__index__()


# functions whose result's shape (or dtype: real or complex) depends on the values of their arguments
_VALUE_SHAPED = {np.nonzero, np.flatnonzero, np.argwhere, np.unique, np.unique_values, np.unique_counts,
                 np.unique_inverse, np.unique_all, np.extract, np.compress, np.trim_zeros, np.roots,
                 np.linalg.eig, np.linalg.eigvals, np.setdiff1d, np.intersect1d, np.union1d, np.setxor1d,
                 np.real_if_close, np.polymul, np.polydiv, np.emath.sqrt, np.emath.log, np.emath.log2, np.emath.log10,
                 np.emath.logn, np.emath.power, np.emath.arccos, np.emath.arcsin, np.emath.arctanh, np.bincount, np.ix_,
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
    y = _copy_to_write(x)
    y[index] = value
    return y


def _astype(x, dtype, *args, **kwargs):
    return x.astype(dtype, *args, **kwargs)


def _copy_method(x, order="C"):
    return x.copy(order=order)


def _applied_to_copy(func, a, *args, **kwargs):
    """`func(a, ...)`, which writes into `a`, applied to a copy of `a` (in its memory order), returned."""
    y = _copy_to_write(a, _READ_ONLY_ERRORS.get(func))
    func(y, *args, **kwargs)
    return y


def _view_of(x, *args, **kwargs):
    return x.view(*args, **kwargs)


def _with_shape(x, shape):
    """`x.shape = shape` on a view of x: NumPy's error where the memory does not allow it."""
    y = x.view()
    y.shape = shape
    return y


def _flat_read(x, index):
    return x.flat[index]


def _flat_written(x, index, value):
    """`x.flat[index] = value` as a function: a copy of x with the write."""
    y = _copy_to_write(x, "underlying array is read-only")
    y.flat[index] = value
    return y


# the recorded calls that index an array by an index that may be traced: (kind, position of the indexed array,
# position of the index); calls of one kind raise IndexError at the same indices of arrays of the same shape
_INDEXING = {_getitem: ("x[i]", 0, 1), setitem_copy: ("x[i]", 0, 1), _ufunc_at: ("x[i]", 1, 2),
             _flat_read: ("x.flat[i]", 0, 1), _flat_written: ("x.flat[i]", 0, 1), np.take: (np.take, 0, 1),
             np.take_along_axis: (np.take_along_axis, 0, 1), np.choose: (np.choose, 1, 0), np.delete: (np.delete, 0, 1)}
# those recorded as `_applied_to_copy(func, a, index, ...)`
_INDEXING_WRITES = {np.put: (np.put, 1, 2), np.put_along_axis: (np.put_along_axis, 1, 2)}


def index_check(node, trace):
    """For a call that indexes an array by a traced integer index (`x[i]`, `x[i] = v`, `np.add.at(x, i, v)`,
    `np.take(x, i)`, ...), which raises IndexError at some values of the index, a key that two such calls
    share when they raise at the same values (the same kind of call, the indexed array's shape, the same
    index); None for any other call."""
    try:
        where = _INDEXING_WRITES.get(node.args[0]) if node.fn is _applied_to_copy else _INDEXING.get(node.fn)
    except TypeError:  # an unhashable callable: a user's
        return None
    kind, array, at = where or (None, 0, 0)
    if kind is None or len(node.args) <= max(array, at):
        return None
    refs = []
    collect(node.args[at], Ref, refs)
    if not any(getattr(getattr(trace.values[ref.slot], "dtype", None), "kind", "?") in "iu" for ref in refs):
        return None  # the signature fixes the shapes: only integer values may fall outside them
    index = (node.args[at],) if kind == "x[i]" and type(node.args[at]) is not tuple else node.args[at]  # x[i] is x[(i,)]
    others = () if kind in ("x[i]", "x.flat[i]") else (node.args[at + 1:], node.kwargs)
    shape = np.shape(trace.values[node.args[array].slot] if isinstance(node.args[array], Ref) else node.args[array])
    return kind, shape, _hashable(index), _hashable(others)


def _hashable(x):
    """A key of an argument structure: a slot by its number, a constant array by its identity."""
    if isinstance(x, Ref):
        return "s", x.slot
    if isinstance(x, (tuple, list)):
        return type(x).__name__, tuple(_hashable(v) for v in x)
    if isinstance(x, dict):
        return "dict", tuple((k, _hashable(v)) for k, v in x.items())
    if isinstance(x, slice):
        return "slice", _hashable((x.start, x.stop, x.step))
    try:
        hash(x)
    except TypeError:
        return "id", id(x)
    return type(x), x


def _memory_refused(construct, fix):
    return JitError(f"pb.jit: {construct} of a traced array reads its memory, which is not the replay's. Write the "
                    f"code without it: {fix}.")


class _Flat:
    """`x.flat` of a traced array `x`: indexing reads (a copy) and writes (into x) are recorded."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index):
        return self.array.owner.call(_flat_read, "flat[]", (self.array, index), {})

    def __setitem__(self, index, value):
        _about_to_write(self.array)
        result = _write_call(self.array.owner, _flat_written, "flat[]=", (self.array, index, value), {}, (self.array,),
                             "x.flat[index] = value")
        _rebind((self.array,), result, "x.flat[index] = value")

    def __len__(self):
        return self.array.size

    def __iter__(self):
        return iter(np.ravel(self.array))

    def copy(self):
        return np.ravel(self.array).copy()

    @property
    def base(self):
        """The array it iterates over, as `flatiter.base`."""
        return self.array

    def __array__(self, dtype=None, copy=None):
        return self.array.__array__()  # refused, naming the fix


def _is_argument(symbol):
    """Whether `symbol` stands for an argument array itself (written into or not)."""
    trace = symbol.owner
    return symbol.slot in trace.inputs or any(s is symbol for s in trace.written_inputs.values())


def _set_writeable(symbol, flag):
    """`symbol.flags.writeable = flag`: `symbol` now names a view of its value with that flag (NumPy's error
    where its memory is read-only)."""
    made = symbol.owner.call(with_writeable, "flags.writeable=", (symbol, bool(flag)), {})
    symbol.owner.hold(symbol, made.slot)


def with_writeable(x, flag):
    """A view of `x` with `flags.writeable` set to `flag` (recorded for `x.flags.writeable = flag`)."""
    y = x.view()
    y.flags.writeable = flag
    return y


def _argument_memory_slot(symbol):
    """The slot whose value has the memory `symbol` has without pb.jit, where that memory is an argument's
    (the argument itself, written into or not, or a view of one), so that its strides and flags are the
    caller's; None for an array the function made, whose strides and flags its calls decide."""
    trace = symbol.owner
    for slot, holder in trace.written_inputs.items():
        if holder is symbol:  # the caller's array, which the trace's copy stands for
            return slot
    value = trace.values[symbol.slot]
    if type(value) is not np.ndarray:
        return None
    root = _memory_root(value)
    if any(type(trace.values[s]) is np.ndarray and _memory_root(trace.values[s]) is root for s in trace.inputs):
        return symbol.slot
    return None


def _about_to_write(*targets):
    """Before a write into `targets`: fix by a guard, once per slot, whether each one whose memory is an
    argument's can be written. Without pb.jit a write into a read-only argument raises NumPy's error there,
    after the writes before it; a replay writes into the caller's arrays only once it has finished, so a
    call whose argument answers otherwise traces again, which raises where the function does."""
    for target in targets:
        if isinstance(target, Symbol):
            slot = _argument_of(target)
            trace = target.owner
            if slot is not None and slot not in trace.writeable_guarded:
                trace.writeable_guarded.add(slot)
                trace.guard_at(slot, _writeable)


def _argument_of(symbol):
    """The input slot of the argument whose memory `symbol` is (the argument, written into or not, or a view
    of it: its flags follow the argument's), or None."""
    trace = symbol.owner
    for slot, holder in trace.written_inputs.items():
        if holder is symbol:
            return slot
    value = trace.values[symbol.slot]
    if type(value) is not np.ndarray:
        return None
    root = _memory_root(value)
    return next((s for s in trace.inputs if type(trace.values[s]) is np.ndarray
                 and _memory_root(trace.values[s]) is root), None)


def _writeable(value):
    return value.flags.writeable


def _memory_root(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _memory_attribute(symbol, read):
    """`read(value)` of an attribute that depends on memory, not only on shape and dtype (`x.strides`,
    `x.flags.writeable`): of an argument's memory, the caller's at each call, fixed by a guard; of an
    array the function made, the trace's."""
    slot = _argument_memory_slot(symbol)
    if slot is None:
        return read(symbol._concrete())
    return symbol.owner.guard_at(slot, read)


class _Flags:
    """`x.flags` of a traced array, read only (setting one would change no replay): each flag read of an
    argument's memory is fixed by a guard (see `_memory_attribute`)."""

    __slots__ = ("_symbol",)

    def __init__(self, symbol):
        object.__setattr__(self, "_symbol", symbol)

    def __getattr__(self, name):
        return _memory_attribute(self._symbol, operator.attrgetter(f"flags.{name}"))

    def __getitem__(self, key):
        return _memory_attribute(self._symbol, lambda value: value.flags[key])

    def __setattr__(self, name, value):
        """`x.flags.writeable = v` of an array the function made (`pb.stop_gradient` makes its value read-only
        so): x stands for a view of its value with that flag from then on, recorded. Other flags, and any of
        an argument (the caller's array, which a replay would not change), are refused."""
        symbol = self._symbol
        if name not in ("writeable", "WRITEABLE", "W") or _is_argument(symbol):
            raise JitError(f"pb.jit: setting x.flags.{name} of {'an argument' if _is_argument(symbol) else 'a traced array'} "
                           "is not followed by the replay. Set it outside the jitted function, or copy the array "
                           "(x.copy()).")
        _set_writeable(symbol, value)

    __setitem__ = __setattr__

    def __repr__(self):
        return _memory_attribute(self._symbol, lambda value: repr(value.flags))
