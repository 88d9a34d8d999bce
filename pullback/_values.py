"""Traced values: what `gradient` (a `Tracked` value) and `jvp` (a `Dual` value) hand to user code.

A traced value speaks NumPy: ufuncs, array functions, operators, indexing and the common
ndarray methods all end in `apply`, which hands the operation to the innermost level among
its inputs. A level is a `Tape` (reverse mode, `pullback._reverse`) or a `ForwardLevel`
(forward mode, `pullback._forward`); each applies the operation in its own mode. Nested
calls make nested levels; an operation unwraps only the inputs of the innermost one, so the
rule's own arithmetic is recorded on the outer levels and the levels never mix.
"""

import dis
import functools
import itertools
import linecache
import math
import operator
import re
import sys
import threading
import types
import warnings
import weakref

import numpy as np

from . import _namespace
from ._arrays import is_dask_array, is_foreign_array_type, without_memmaps
from ._errors import (
    check_operand,
    conversion_error,
    foreign_error,
    lost_gradient,
    missing_rule,
    mixed_arrays_error,
    refused,
    subclass_error,
    ufunc_name,
    written_after_use,
)
from ._inplace import (
    FlatView,
    c_call_site,
    concrete_of,
    decided,
    detach,
    holds_array,
    in_place,
    note_in_place,
    rebind,
    root_positions,
    set_item,
    write_elementwise,
)
from ._registry import BUILDERS, FUNCTIONS, METHODS, NONDIFF_UFUNCS, NUMBER_OPERAND_RULES, REVERSE_RULES, UFUNC_RULES
from ._standins import (
    as_numpy_number,
    astype,
    converted,
    dtype_of,
    getitem,
    index_update,
    is_jit_float_or_complex,
    is_number_stand_in,
    is_stand_in,
    power,
)
from ._tangents import PerOperand

_level_numbers = itertools.count(1)
NO_KWARGS = {}


def new_level():
    """The number of a new level: a level made later is higher (innermost)."""
    return next(_level_numbers)


class Traced:
    """What tracked (reverse mode) and dual (forward mode) values share: they speak NumPy.

    Ufuncs, array functions, operators, indexing and the common ndarray methods all
    end in `apply`, which hands the operation to the innermost level among its inputs.
    """

    __slots__ = ("_value", "_tape", "_base", "_views", "_read_only", "__weakref__")
    __array_priority__ = 100.0
    __hash__ = None
    pullback_traced = True

    # --- NumPy protocols -------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and not kwargs:
            rule = UFUNC_RULES.get(ufunc)
            if rule is not None:
                if len(inputs) == 1 and type(self) is Tracked:  # the common case, kept short
                    y, back = rule(self._value)
                    return self._tape.record(y, back, (self._id,))
                if len(inputs) == 2:
                    result = apply2(rule, inputs[0], inputs[1])
                    if type(self._value) is np.ndarray or ufunc.nout != 1 or not _python_numbers(*inputs):
                        return result
                    # the rules of + - * compute with Python's operators: a NumPy ufunc of two Python numbers
                    # gives a NumPy number (its warnings were given by the rule's own computation)
                    with np.errstate(all="ignore"):
                        return _as_python(result, ufunc(_as_numpy_operand(stop_gradient(inputs[0])),
                                                        _as_numpy_operand(stop_gradient(inputs[1]))))
                return apply(rule, tuple(_as_operand(x) for x in inputs))
        if method == "at":  # its index is no operand: read before anything reads it as an array
            return _ufunc_at(ufunc, inputs)
        return _ufunc_general(ufunc, method, tuple(_as_operand(x) for x in inputs), kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if np.memmap in types:  # it computes as an ndarray of its memory (np.load(..., mmap_mode="r") gives one)
            args, kwargs = without_memmaps(args), without_memmaps(kwargs)
            types = tuple(t for t in types if t is not np.memmap)
        for t in types:
            if (t is not Tracked and t is not np.ndarray and not issubclass(t, Traced) and not hasattr(t, "__stop_gradient__")
                    and not is_foreign_array_type(t)):  # Dask, CuPy, ...: the rule computes with them
                if issubclass(t, np.ndarray):
                    raise refused(self, subclass_error(next(a for a in _flat(args) if type(a) is t)))
                raise refused(self, foreign_error(f"{t.__module__}.{t.__qualname__}"))
        impl = FUNCTIONS.get(func)
        if impl is None:
            _refuse_as_numpy_function(func, args, kwargs)
            raise refused(self, missing_rule(func))
        return impl(*args, **kwargs)

    def __array__(self, dtype=None, copy=None):
        if dtype is not None and np.dtype(dtype).kind in "biu":  # np.int64(x), x.astype(int): no gradient to lose
            return np.array(stop_gradient(self), dtype=dtype)
        if _called_from(_AS_STRIDED, 3):
            raise TypeError(
                "numpy.lib.stride_tricks.as_strided builds a view from raw memory strides, which pullback cannot "
                "follow: the gradient would be lost. Use np.lib.stride_tricks.sliding_window_view(x, window_shape) "
                "for sliding windows, or indexing (x[index_array], x[::step]) for other layouts.")
        caller = _caller_outside_this_module()
        if caller.f_globals.get("__name__", "").startswith("scipy.sparse._"):
            if caller.f_code.co_name == "_matmul_dispatch":  # A @ x, A.dot(x), A * x: SciPy gives NotImplemented
                return np.empty((), object)  # for an object, and Python asks x.__rmatmul__(A) (x.__rmul__(A))
            raise refused(self, SparseOperands.conversion_error(self, caller))
        raise refused(self, conversion_error(self))

    # --- copies, pickling and other libraries -----------------------------------------
    def __copy__(self):
        """A copy of a tracked array is a recorded copy; a scalar is immutable, so it is itself."""
        return FUNCTIONS[np.copy](self) if holds_array(self) else self

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __reduce_ex__(self, protocol):
        raise TypeError(
            "Cannot pickle a value that is being differentiated: the copy would lose its gradient. "
            "Pickle pullback.stop_gradient(x) (its plain value) instead, or pickle outside the gradient call."
        )

    def __dask_tokenize__(self):
        raise TypeError(
            "A value being differentiated was handed to Dask as data (a dask.array function such as da.exp(x) or "
            "da.cumsum(x), da.from_array, dask.delayed, a task argument), where the gradient would be lost. Call "
            "NumPy's function instead (np.exp(x), np.cumsum(x)): on a Dask array pullback records it, and Dask "
            "computes it lazily. To differentiate with respect to Dask data, pass the Dask array itself to "
            "pb.gradient."
        )

    def __array_namespace__(self, *, api_version=None):
        """The array API namespace (NumPy's, keeping traced values traced), for array-API-aware libraries."""
        return _namespace

    @property
    def __class__(self):
        """What `isinstance` sees: a scalar answers as its plain value's type does (so `np.isscalar`,
        `isinstance(x, numbers.Number)` and `isinstance(x, float)` answer as without pullback)."""
        value = self._value
        if isinstance(value, np.ndarray) or is_foreign_array_type(type(value)):
            return type(self)
        return value.__class__

    def __float__(self):
        if _formatting_with_percent(_caller_outside_this_module()):
            return float(stop_gradient(self))  # `"%.3f" % x`: text carries no gradient, as with f"{x:.3f}"
        error = lost_gradient(
            "convert it to a Python float (float(x), the math module, or writing it into one element of a plain "
            "array such as np.zeros(n); start from np.zeros_like(x) of a traced x, or use np.stack; an argument "
            "not differentiated, or given no tangent, is a plain array, its copy too: differentiate with respect "
            "to it, or give it a zero tangent)"
        )
        error.pullback_conversion = True  # see `conversion_refusal`
        raise refused(self, error)

    def __int__(self):
        """`int(x)`: the plain integer, as without pullback (an integer carries no gradient)."""
        return int(stop_gradient(self))

    def __complex__(self):
        raise refused(self, lost_gradient("convert it to a Python complex"))

    def item(self, *args):
        raise refused(self, lost_gradient("call .item() on it"))

    def tolist(self):
        raise refused(self, lost_gradient("call .tolist() on it"))

    def __bool__(self):
        return bool(stop_gradient(self))

    def __pullback_convert__(self, kind):
        """`kind(x)` (float, complex, a NumPy scalar type, np.asarray) of the plain value, recorded as
        the identity at every level: the result stays traced, so derivatives flow through it."""
        return apply(_conversion_rule(kind), (self,))

    def __format__(self, spec):
        """`f"{x}"` and `f"{x:.3f}"` write the number as without pullback (text carries no gradient)."""
        return format(stop_gradient(self), spec)

    def __str__(self):
        """`str(x)`, `print(x)` and `"%s" % x` write the value as without pullback, as `f"{x}"` does."""
        return str(stop_gradient(self))

    def __repr__(self):
        return f"{type(self).__name__}({self._value!r})"

    # --- array attributes ------------------------------------------------------------
    # A Python number has none (`hasattr(x, "shape")` is False for 0.5, as without pullback); pullback's own
    # code is answered (see `_no_array_attribute`). The four read most test for an array before the call.
    @property
    def shape(self):
        value = self._value
        if type(value) is not np.ndarray:
            _no_array_attribute(value, "shape")
        return np.shape(value)

    @property
    def ndim(self):
        value = self._value
        if type(value) is not np.ndarray:
            _no_array_attribute(value, "ndim")
        return np.ndim(value)

    @property
    def size(self):
        value = self._value
        if type(value) is not np.ndarray:
            _no_array_attribute(value, "size")
        return getattr(value, "size", 1)  # np.size would make a Dask array compute

    @property
    def dtype(self):
        value = self._value
        if type(value) is not np.ndarray:
            _no_array_attribute(value, "dtype")
        return dtype_of(value)

    @property
    def real(self):
        return FUNCTIONS[np.real](self) if dtype_of(self).kind == "c" else self  # a real array is its own real part

    @property
    def imag(self):
        if dtype_of(self).kind == "c":
            return FUNCTIONS[np.imag](self)
        plain = stop_gradient(self)  # of a real number, its own `.imag` (0.0, or np.float32(0.0))
        if isinstance(plain, np.ndarray) or not hasattr(plain, "imag"):
            zeros = np.zeros_like(plain)
            if type(zeros) is np.ndarray:
                zeros.flags.writeable = False  # NumPy's `.imag` of a real array is read-only
            return zeros
        return plain.imag

    @real.setter
    def real(self, value):
        """`z.real = v`, as the write of the complex array of parts v and z.imag (the array itself, for a real one)."""
        if not holds_array(self):
            raise AttributeError("attribute 'real' of a NumPy scalar is not writable")
        if self.dtype.kind == "c":
            value = BUILDERS["complex"](value, FUNCTIONS[np.imag](self), self.dtype)
        self[...] = value

    @imag.setter
    def imag(self, value):
        """`z.imag = v`, as the write of the complex array of parts z.real and v."""
        if not holds_array(self):
            raise AttributeError("attribute 'imag' of a NumPy scalar is not writable")
        if self.dtype.kind != "c":
            raise TypeError("array does not have imaginary part to set")
        self[...] = BUILDERS["complex"](FUNCTIONS[np.real](self), value, self.dtype)

    @property
    def T(self):
        _no_array_attribute(self._value, "T")
        return FUNCTIONS[np.transpose](self)

    @property
    def mT(self):
        _no_array_attribute(self._value, "mT")
        return FUNCTIONS[np.swapaxes](self, -1, -2)

    def __len__(self):
        return len(self._value)

    def __iter__(self):
        for i in range(len(self._value)):
            yield self[i]

    # --- indexing and in-place writes ------------------------------------------------
    def __getitem__(self, index):
        row = FUNCTIONS[getitem](self, index)
        if type(index) is int and getattr(self._value, "ndim", 0) > 1:
            site = c_call_site(sys._getframe(1))
            if site is not None:  # (see `_detach_swapped_rows`)
                _note_row_asked_by_c(self, index, row, site)
        return row

    def view(self, dtype=None, type=None):
        """`x.view()`: the same values, sharing memory with `x` (a reinterpreting dtype is refused)."""
        if (dtype is not None and np.dtype(dtype) != self.dtype) or type is not None:
            raise TypeError(
                "x.view(dtype) reinterprets the bytes of a value being differentiated, which has no gradient; "
                "use x.astype(dtype) to convert the values."
            )
        if not holds_array(self):  # a NumPy scalar's view is a NumPy scalar (an immutable one: itself)
            return self
        return FUNCTIONS[getitem](self, Ellipsis)

    def fill(self, value):
        """`x.fill(v)`, as the functional update `x[...] = v`."""
        self[...] = value

    def sort(self, axis=-1, kind=None, order=None):
        """`x.sort()` in place, as the functional update `x = np.sort(x)`."""
        rebind(self, FUNCTIONS[np.sort](self, axis=axis, kind=kind, order=order))

    def partition(self, kth, axis=-1, kind="introselect", order=None):
        """`x.partition(k)` in place, as the functional update `x = np.partition(x, k)`."""
        rebind(self, FUNCTIONS[np.partition](self, kth, axis=axis, kind=kind, order=order))

    def compress(self, condition, axis=None, out=None):
        return FUNCTIONS[np.compress](condition, self, axis=axis, out=out)

    def put(self, indices, values, mode="raise"):
        """`x.put(indices, values)` in place, as `np.put(x, indices, values)`."""
        FUNCTIONS[np.put](self, indices, values, mode=mode)

    @property
    def strides(self):
        return stop_gradient(self).strides  # the plain value's (a Dask array has none, as without pullback)

    @property
    def device(self):
        _no_array_attribute(self._value, "device")
        return getattr(stop_gradient(self), "device", "cpu")

    def __getattr__(self, name):
        """Attributes of ndarray that a value being differentiated does not have: say so, and the way out.
        Methods of another library's arrays with a rule (Dask's `x.rechunk`) are answered by it."""
        if name in _NUMBER_METHODS and hasattr(stop_gradient(self), name):
            return _number_method(self, name)
        method = METHODS.get(name)
        if method is not None and hasattr(stop_gradient(self), name):
            return functools.partial(method, self)
        _no_array_attribute(self._value, name)
        if name in _DASK_ONLY and is_dask_array(stop_gradient(self)):
            caller = sys._getframe(1)
            within = f" (asked for by {caller.f_globals['__name__']}.{caller.f_code.co_name})" \
                if caller.f_globals.get("__name__", "").startswith("dask.") else ""
            raise TypeError(
                f"x.{name}{within} on a Dask array being differentiated would hand it to Dask outside the recorded "
                "operations, where the gradient would be lost. Write the computation with NumPy functions on x "
                "(np.cumsum(x), not da.cumsum(x): they stay lazy), or use pullback.stop_gradient(x) for a plain Dask "
                "array that carries no gradient.")
        if not name.startswith("_") and hasattr(np.ndarray, name):
            instead = f" np.{name}(x, ...) works on x itself." if callable(getattr(np, name, None)) else ""
            raise AttributeError(
                f"x.{name} is not available on a value being differentiated (its bytes, memory or buffer carry "
                f"no gradient): pullback.stop_gradient(x).{name} is the plain value's.{instead}"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def nbytes(self):
        _no_array_attribute(self._value, "nbytes")
        value = stop_gradient(self)
        return value.nbytes if hasattr(value, "nbytes") else np.asarray(value).nbytes

    @property
    def itemsize(self):
        _no_array_attribute(self._value, "itemsize")
        return self.dtype.itemsize

    @property
    def flags(self):
        """The flags of the plain value (read them; a traced value is never written in place)."""
        _no_array_attribute(self._value, "flags")
        value = stop_gradient(self)
        return value.flags if hasattr(value, "flags") else np.asarray(value).flags

    @property
    def flat(self):
        """`x.flat`: reading `x.flat[i]` gives a copy, writing `x.flat[i] = v` writes into `x`."""
        _no_array_attribute(self._value, "flat")
        return FlatView(self)

    @flat.setter
    def flat(self, value):
        """`x.flat = v`, as `x.flat[:] = v`: every element, `v` repeated as NumPy repeats it."""
        if not holds_array(self):
            raise AttributeError("attribute 'flat' of a NumPy scalar is not writable")
        FlatView(self)[:] = value

    @shape.setter
    def shape(self, shape):
        """`x.shape = s` reshapes NumPy's array in place; a value being differentiated keeps its shape."""
        if np.broadcast_to(False, self.shape).reshape(shape).shape == self.shape:  # NumPy's error for a bad shape
            return  # the shape it has: nothing to do, as in NumPy
        raise AttributeError(
            f"x.shape = {shape!r} reshapes an array in place, which pullback does not do to a value being "
            f"differentiated (its views and aliases keep their shapes). Write x = np.reshape(x, {shape!r}) "
            "(or x = x.reshape(...)) instead.")

    def __setitem__(self, index, value):
        if _ROWS_ASKED_BY_C and type(index) is int:
            _detach_swapped_rows(self, index, value)
        set_item(self, index, value)

    # --- binary operators (see _install_operators) -----------------------------------
    def __matmul__(self, other):
        return FUNCTIONS[np.matmul](self, other)

    def __rmatmul__(self, other):
        return FUNCTIONS[np.matmul](other, self)

    def __imatmul__(self, other):
        result = in_place(self, FUNCTIONS[np.matmul](self, other))
        note_in_place(result, other)
        return result

    def __neg__(self):
        result = apply((UFUNC_RULES[np.negative]), (self,))
        if type(self._value) is np.ndarray or not _python_numbers(self):
            return result
        return _as_python(result, -stop_gradient(self))

    def __pos__(self):
        return self

    def __abs__(self):
        result = apply(UFUNC_RULES[np.absolute], (self,))
        if type(self._value) is np.ndarray or not _python_numbers(self):
            return result
        return _as_python(result, abs(stop_gradient(self)))

    def __divmod__(self, other):
        return _divmod(self, other, self)

    def __rdivmod__(self, other):
        return _divmod(other, self, self)

    def __round__(self, ndigits=None):
        """`round(x)` of a number and `round(x, n)` of a Python number: Python's (no gradient); otherwise
        `np.round` (zero gradient almost everywhere)."""
        if (ndigits is None and np.ndim(self) == 0) or _python_numbers(self):
            return round(stop_gradient(self), ndigits)  # Python's (round(0.405, 2) is 0.41, np.round's 0.4)
        return FUNCTIONS[np.round](self, 0 if ndigits is None else ndigits)

    # math.floor(x), math.ceil(x), math.trunc(x): the plain integer, as without pullback (as int(x) is)
    def __floor__(self):
        return math.floor(stop_gradient(self))

    def __ceil__(self):
        return math.ceil(stop_gradient(self))

    def __trunc__(self):
        return math.trunc(stop_gradient(self))


class _ArrayMethod:
    """A method of arrays (`x.sum`, `x.reshape`, ...) that a Python number lacks: missing on a traced Python
    number too (AttributeError, so `hasattr` answers as without pullback)."""

    __slots__ = ("function", "name")

    def __init__(self, function, name):
        self.function, self.name = function, name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self.function
        _no_array_attribute(obj._value, self.name)
        return types.MethodType(self.function, obj)


class Tracked(Traced):
    """A value whose operations are recorded on a tape (reverse mode).

    User code never builds one: `gradient` and friends wrap the arguments' float leaves.
    """

    __slots__ = ("_id",)

    def __init__(self, value, tape, i):
        self._value = value
        self._tape = tape
        self._id = i

    def __hash__(self):
        # as JAX's tracers: a set, a dict key or a cache (functools.lru_cache) keyed by value would
        # hand a value of this gradient call to another, or find one of another call
        raise TypeError("unhashable type: a value being differentiated (a set, a dict key or a cache would keep it "
                        "apart from its gradient); use pullback.stop_gradient(x) there (pb.stop_gradient(x) in {3.0})")


class Dual(Traced):
    """A value carrying a tangent alongside (forward mode); `_tape` is its `ForwardLevel`."""

    __slots__ = ("_tangent",)

    def __init__(self, value, tangent, tag):
        self._value = value
        self._tangent = tangent
        self._tape = tag

    def __repr__(self):
        return f"Dual({self._value!r}, tangent={self._tangent!r})"

    # A value no tangent moves (np.sign(x), np.zeros_like(x)) has derivative zero at this level: its
    # conversions lose nothing, and give what they give without pullback (an outer level still checks).
    def __float__(self):
        return float(self._value) if self._tangent is None else Traced.__float__(self)

    def __complex__(self):
        return complex(self._value) if self._tangent is None else Traced.__complex__(self)

    def item(self, *args):
        if self._tangent is None:
            return self._value.item(*args) if hasattr(self._value, "item") else self._value
        return Traced.item(self, *args)

    def tolist(self):
        if self._tangent is None:
            return self._value.tolist() if hasattr(self._value, "tolist") else self._value
        return Traced.tolist(self)

    def __array__(self, dtype=None, copy=None):
        if self._tangent is None:
            return np.asarray(self._value, dtype=dtype)
        return Traced.__array__(self, dtype, copy)

    def __hash__(self):
        if self._tangent is None:
            return hash(self._value)
        raise TypeError("unhashable type: a value being differentiated (its tangent would be lost as a key); "
                        "use pullback.stop_gradient(x) as the key")


_PYTHON_SCALARS = (float, int, bool, complex)
_AS_STRIDED = np.lib.stride_tricks.as_strided.__code__


# NumPy's shuffle warns that an object other than an ndarray may end with duplicate rows (views); a traced array
# permutes as NumPy does an ndarray (see `_detach_swapped_rows`), which it does not warn of
warnings.filterwarnings("ignore", message="you are shuffling a '(Tracked|Dual)' object", category=UserWarning)


# The rows (views) of arrays of two or more dimensions that C code asked for by an integer and that are alive:
# `[weak reference to the array, weak reference to the row, its index, call site]`.
_ROWS_ASKED_BY_C = []
_rows_lock = threading.Lock()  # threads shuffling at once: each list rebuilt must keep the others' entries


def _note_row_asked_by_c(x, index, row, site):
    rows = _ROWS_ASKED_BY_C
    with _rows_lock:
        rows.append((weakref.ref(x), weakref.ref(row), index % len(x), site))
        if len(rows) > 32 and len(rows) & (len(rows) - 1) == 0:  # now and then, forget rows that died
            rows[:] = [entry for entry in rows if entry[1]() is not None]


def _detach_swapped_rows(x, index, value):
    """Before `x[index] = value` written by C code that, in the same call, asked for `value = x[j]` and then for
    `x[index]`: that row `x[index]` keeps its current value from now on, no longer a view of `x`.

    NumPy's shuffle of an object that is not an ndarray swaps rows in C as `x[i], x[j] = x[j], x[i]`: the row
    `x[i]` it holds, a view, would show the first write, and `x` end with two copies of row `j`. NumPy swaps an
    ndarray's memory, so that `x` is permuted: detaching `x[i]` does the same. Any other access keeps views."""
    site = c_call_site(sys._getframe(2))
    with _rows_lock:
        live = [entry for entry in _ROWS_ASKED_BY_C if entry[0]() is not None and entry[1]() is not None]
        _ROWS_ASKED_BY_C[:] = live
        if site is None:
            return
        mine = [entry for entry in live if entry[0]() is x and entry[3] == site]
        if len(mine) < 2 or mine[-2][1]() is not value or mine[-1][2] != index % len(x) or mine[-1][1]() is value:
            return
        _ROWS_ASKED_BY_C[:] = [entry for entry in live if entry is not mine[-1]]
    detach(mine[-1][1]())


def _called_from(code, depth):
    """Whether one of the `depth` Python frames below the caller runs `code`."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


# methods of a Dask array that would compute it or hand it to Dask's own task machinery
_DASK_ONLY = frozenset(("persist", "compute", "map_blocks", "map_overlap", "to_delayed", "blocks", "partitions",
                        "visualize", "store", "to_zarr"))
_PYTHON_ARITHMETIC = {"truediv": operator.truediv, "pow": operator.pow, "mod": operator.mod, "floordiv": operator.floordiv,
                      # a comparison of two Python numbers is a Python bool (`~(x < 1)` is -2, `(x < 1) is True`)
                      "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
                      "eq": operator.eq, "ne": operator.ne}


_NUMBER_METHODS = ("is_integer", "hex", "as_integer_ratio")


def _number_method(x, name):
    """`x.is_integer()` of a number, as without pullback; `x.hex()` and `x.as_integer_ratio()` are refused (their
    result would carry no gradient)."""
    if name == "is_integer":
        return getattr(stop_gradient(x), name)

    def refuse(*args, **kwargs):
        raise refused(x, lost_gradient(f"call .{name}() on it"))
    return refuse


def _no_array_attribute(value, name):
    """Raise Python's AttributeError when `value` (a traced value's `_value`) is, or traces, a Python number (a float
    has no `.shape`), so that code asking `hasattr(x, "shape")` takes the branch it takes without pullback.
    pullback's own code (rules computing with a traced number as with a 0-d array) is answered."""
    if type(value) is np.ndarray:  # the common case, checked first
        return
    plain = stop_gradient(value)
    if _is_python_number(plain) and not sys._getframe(2).f_globals.get("__name__", "").startswith("pullback."):
        raise AttributeError(f"{type(plain).__name__!r} object has no attribute {name!r}")


def _python_numbers(a, b=0):
    """Whether `a` and `b` are Python numbers (traced or not, at any nesting of derivatives; pb.jit's stand-ins too)."""
    return _is_python_number(stop_gradient(a)) and _is_python_number(stop_gradient(b))


def _is_python_number(x):
    return type(x) in _PYTHON_SCALARS or is_number_stand_in(x)


def _as_numpy_operand(x):
    """A ufunc operand of Python numbers as NumPy makes it: a pb.jit stand-in for a float as np.float64, recorded."""
    return as_numpy_number(x) if is_jit_float_or_complex(x) else x


def _divmod(a, b, traced):
    """`divmod(a, b)`, as Python computes it for two Python numbers (its errors, Python floats)."""
    quotient, remainder = FUNCTIONS[np.divmod](a, b)
    if not _python_numbers(traced, a if b is traced else b):
        return quotient, remainder
    python_quotient, python_remainder = divmod(stop_gradient(a), stop_gradient(b))
    return _as_python(quotient, python_quotient), _as_python(remainder, python_remainder)


def _python_arithmetic(python_op, rule, a, b):
    """`a / b` (`**`, `%`, `//`) of two Python numbers, one traced, as Python computes it: its errors
    (`1.0 / 0.0`, `10.0 ** 400`), and the complex power of a negative base (`(-8.0) ** (1/3)`)."""
    y = python_op(stop_gradient(a), stop_gradient(b))
    if rule is None:  # no derivative (`//`)
        return y
    if type(y) is not complex or type(stop_gradient(a)) is complex or type(stop_gradient(b)) is complex:
        result = apply2(rule, a, b)  # NumPy's arithmetic on two real (or complex) numbers rounds as Python's
    else:
        result = apply2(rule, a + 0j, b)  # a real number to a real power, complex: NumPy's complex power
    return _as_python(result, y)


def _as_python(result, y):
    """`result` holding the number `y` it stands for: Python's (NumPy computed the same number as a NumPy scalar,
    whose later arithmetic would follow NumPy: `np.float64(-4.0) ** 0.5` is nan where Python's is complex;
    NumPy's complex power may round differently in the last place), or NumPy's (a ufunc of Python numbers)."""
    if not isinstance(result, Traced):  # no derivative (`//`): Python's number itself
        return y
    inner = result
    while isinstance(inner._value, Traced):  # nested derivatives: the innermost level holds the number
        inner = inner._value
    inner._value = y
    return result


@functools.cache
def _conversion_rule(kind):
    """The rule of `kind(x)` for `Traced.__pullback_convert__`: the value converted level by level
    (`converted` of a value traced by an outer level converts it there), the cotangent passed on as it is."""
    def convert(x):
        return converted(x, kind), _identity_pullback
    return convert


def _identity_pullback(g):
    return (g,)


def _install_operators():
    """`a + b` and friends go straight to the ufunc's rule, skipping NumPy's dispatch."""
    pairs = {
        "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
        "pow": np.power, "mod": np.remainder, "floordiv": np.floor_divide,
        "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "eq": np.equal, "ne": np.not_equal,
    }
    reflected = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}

    def forward(ufunc, name):
        python_op = _PYTHON_ARITHMETIC.get(name)
        operator_fn = power if name == "pow" else ufunc  # `**` is not np.power (see _standins.power)

        def op(self, other):
            if type(other) in (list, tuple):
                answer = _with_sequence(name, self, other, False)
                if answer is not None:
                    return answer
            rule = REVERSE_RULES.get(operator_fn)
            if python_op is not None and type(self._value) is not np.ndarray and _python_numbers(self, other):
                return _python_arithmetic(python_op, rule, self, other)
            if rule is None:
                return ufunc(stop_gradient(self), stop_gradient(other))
            return apply2(rule, self, other)
        return op

    def backward(ufunc, name):
        python_op = _PYTHON_ARITHMETIC.get(name)
        operator_fn = power if name == "pow" else ufunc

        def op(self, other):
            if type(other) in (list, tuple):
                answer = _with_sequence(name, self, other, True)
                if answer is not None:
                    return answer
            rule = REVERSE_RULES.get(operator_fn)
            if python_op is not None and type(self._value) is not np.ndarray and _python_numbers(self, other):
                return _python_arithmetic(python_op, rule, other, self)
            if rule is None:
                return ufunc(stop_gradient(other), stop_gradient(self))
            return apply2(rule, other, self)
        return op

    def inplace(ufunc, name):
        def op(self, other):
            new = forward(ufunc, name)(self, other)
            if holds_array(self):
                _refuse_unsafe_cast(ufunc, (self, other), new, self.dtype, "same_kind", {})
            result = write_elementwise(self, new, (self, other))
            note_in_place(result, other)
            return result
        return op

    for name, ufunc in pairs.items():
        setattr(Traced, f"__{name}__", forward(ufunc, name))
        if name in reflected:
            continue
        setattr(Traced, f"__r{name}__", backward(ufunc, name))
        setattr(Traced, f"__i{name}__", inplace(ufunc, name))


_install_operators()


def _install_methods():
    """ndarray methods that forward to the matching NumPy function."""
    names = {
        "sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod,
        "var": np.var, "std": np.std, "cumsum": np.cumsum, "cumprod": np.cumprod,
        "swapaxes": np.swapaxes, "squeeze": np.squeeze,
        "ravel": np.ravel, "clip": np.clip,
        "dot": np.dot, "trace": np.trace, "diagonal": np.diagonal, "repeat": np.repeat,
        "take": np.take, "argmax": np.argmax, "argmin": np.argmin, "argsort": np.argsort,
        "nonzero": np.nonzero, "round": np.round,
        "all": np.all, "any": np.any,
        "argpartition": np.argpartition, "searchsorted": np.searchsorted,
    }
    for name, fn in names.items():
        setattr(Traced, name, _method(fn))

    def reshape(self, *shape, **kwargs):
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        return FUNCTIONS[np.reshape](self, shape, **kwargs)

    def transpose(self, *axes):
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = axes[0]
        return FUNCTIONS[np.transpose](self, axes or None)

    def copy(self, order="C"):  # C order by default, where np.copy keeps the layout ("K")
        if not holds_array(self):  # a NumPy scalar's copy is a NumPy scalar (an immutable one: itself)
            return self
        return FUNCTIONS[np.copy](self, order=order)

    def flatten(self, order="C"):
        return FUNCTIONS[np.copy](FUNCTIONS[np.ravel](self, order))  # a copy, unlike ravel

    def conj(self):
        return np.conjugate(self) if dtype_of(self).kind == "c" else self  # NumPy's x.conj() of a real x is x

    def astype_method(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        if not np.can_cast(dtype_of(self), dtype, casting):  # NumPy's error
            raise TypeError(f"Cannot cast array data from {dtype_of(self)!r} to {np.dtype(dtype)!r} according to the "
                            f"rule {casting!r}")
        if not copy and np.dtype(dtype) == self.dtype:
            return self  # NumPy returns the array itself, so later writes are seen through both
        return FUNCTIONS[astype](self, dtype)

    Traced.reshape, Traced.transpose, Traced.astype = reshape, transpose, astype_method
    Traced.flatten, Traced.conj, Traced.conjugate, Traced.copy = flatten, conj, conj, copy


def _method(fn):
    def method(self, *args, **kwargs):
        impl = FUNCTIONS.get(fn)
        if impl is None:
            raise refused(self, missing_rule(fn))
        return impl(self, *args, **kwargs)
    method.__name__ = fn.__name__
    return method


_install_methods()
for _name, _function in list(vars(Traced).items()):
    if isinstance(_function, types.FunctionType) and not _name.startswith("_") and not hasattr(0.0, _name):
        setattr(Traced, _name, _ArrayMethod(_function, _name))


# --- stand-ins for operations NumPy has no public function for ----------------------

# --- plain arrays a pullback keeps: read-only while `f` runs ------------------------------------------------
# A pullback that keeps a plain NumPy array the user's code made (`x * m` keeps `m`) reads it when the gradient
# is taken; a write into it in between would change the gradient silently. While a gradient call of user code
# runs, such an array is read-only (NumPy then refuses the write, and the call names the fix: see
# `_errors.written_after_use`); it is writable again when the call ends. Flags are the array's own, so they
# are process-wide: a tape holds each array it made read-only, and an array several tapes hold (nested calls,
# threads) is writable again when the last of them ends.
_guard_lock = threading.Lock()
GUARDED = {}  # id(array) -> [array, how many tapes hold it read-only]
_STUCK = []  # arrays whose writeable flag NumPy would not set back yet (a view whose base is read-only for now)
# id(array) -> how many rules running now were given it as the value of an operand their level traces: an
# outer level they call does not make those read-only (the engine's own values; see `run_mixed`)
_IN_RULE = {}
_SEARCH_DEPTH = 3  # how deep `_kept` looks through functions and containers a pullback holds
_SEARCH_WIDTH = 64  # and how many items of one container it looks at
_SEARCH_NODES = 512  # and how many objects in all


def guard_kept(held, back, operands, kwargs=None):
    """Make read-only, for as long as the gradient call whose tape holds `held` runs, each plain NumPy array
    among `operands` (and the values of `kwargs`, and arrays in lists and tuples among them) that `back` keeps:
    the array itself, or a view of it, is in its closure cells, its default arguments or a partial's arguments
    (those of each function of a `PerOperand` too). Writable arrays only: a read-only array is left as it is."""
    if back is None or (type(back) is types.FunctionType and back.__closure__ is None and back.__defaults__ is None):
        return  # (`x + c`: a pullback that keeps nothing)
    candidates = []
    for a in operands if not kwargs else (*operands, *kwargs.values()):
        kind = type(a)
        if kind is np.ndarray:
            candidates.append(a)
        elif (kind is list or kind is tuple) and len(a) <= _SEARCH_WIDTH:
            candidates.extend(v for v in a if type(v) is np.ndarray)
    with _guard_lock:  # (another thread's call may release an array between the two tests)
        candidates = [a for a in candidates if id(a) not in held and id(a) not in _IN_RULE
                      and (a.flags.writeable or id(a) in GUARDED or (a.base is not None and (_VIEW, id(a)) not in held))]
    if len(candidates) == 1 and _in_a_closure(back, candidates[0]):  # the common `lambda g: g * c`, found quickly
        _hold(held, candidates[0])
        return
    if candidates:
        kept = set()
        _kept(back, kept, [_SEARCH_NODES, 0])  # (objects left to look at, depth)
        for a in candidates:
            if id(a) in kept:
                _hold(held, a)


def _in_a_closure(back, a):
    """Whether `a` itself is in a closure cell of pullback `back` (of one of its functions, for a `PerOperand`)."""
    for fn in back if type(back) is PerOperand else (back,):
        if type(fn) is types.FunctionType and fn.__closure__ is not None:
            for cell in fn.__closure__:
                try:
                    if cell.cell_contents is a:
                        return True
                except ValueError:  # an empty cell
                    pass
    return False


def _kept(x, found, budget):
    """Add to `found` the ids of the NumPy arrays pullback `x` refers to, and of their bases: through closure
    cells, default arguments, partials (thunks), tuples (a PerOperand), lists, dicts and bound methods,
    `_SEARCH_DEPTH` deep, looking at `budget[0]` objects at most."""
    kind = type(x)
    if kind is np.ndarray:
        found.add(id(x))
        base = x.base
        if base is not None:
            found.add(id(base))
        return
    if kind in _NOTHING_KEPT or budget[0] <= 0 or budget[1] > _SEARCH_DEPTH:
        return
    budget[0] -= 1
    budget[1] += 1
    if kind is types.FunctionType:
        closure = x.__closure__
        if closure is not None:
            for cell in closure:
                try:
                    value = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                _kept(value, found, budget)
        if x.__defaults__ is not None:
            for value in x.__defaults__:
                _kept(value, found, budget)
    elif kind is PerOperand or kind is tuple or kind is list:
        for value in x[:_SEARCH_WIDTH]:
            _kept(value, found, budget)
    elif isinstance(x, functools.partial):  # a Thunk too
        _kept(x.func, found, budget)
        for value in x.args[:_SEARCH_WIDTH]:
            _kept(value, found, budget)
        for value in list(x.keywords.values())[:_SEARCH_WIDTH]:
            _kept(value, found, budget)
    elif kind is dict:
        for value in list(x.values())[:_SEARCH_WIDTH]:
            _kept(value, found, budget)
    elif kind is types.MethodType:
        _kept(x.__func__, found, budget)
    budget[1] -= 1


# what a pullback may hold that holds no array
_NOTHING_KEPT = frozenset((type(None), bool, int, float, complex, str, np.dtype, np.float64, np.float32,
                           types.BuiltinFunctionType, np.ufunc, type))


def _hold(held, a):
    """Note that the tape holding `held` keeps `a` read-only (making it so if no other tape does). A view whose
    memory another array can reach (its base, another view) is also copied, to be compared when `f` ends
    (see `release_guarded`): flagging the view does not stop writes through those."""
    if a.base is not None and (_VIEW, id(a)) not in held and _base_refs(a) > _SOLE_BASE_REFS:
        held[(_VIEW, id(a))] = (a, _distinct(a).copy())
    with _guard_lock:
        entry = GUARDED.get(id(a))
        if entry is not None and entry[0] is a:
            entry[1] += 1
        elif a.flags.writeable:
            a.flags.writeable = False
            GUARDED[id(a)] = [a, 1]
        else:
            return
    held[id(a)] = a


def release_guarded(tape):
    """Make writable again the arrays `tape` made read-only that no other tape still holds (the latest first:
    NumPy sets a view writable only while its base is). Then, where `f` returned, raise if the memory of a
    kept view was written meanwhile (through its base, another view, np.add.at): NumPy does not refuse those."""
    held, tape.guarded = tape.guarded or {}, None  # (a tape that has ended guards nothing more)
    if not held and not _STUCK:
        return
    views = [value for key, value in held.items() if type(key) is tuple]
    with _guard_lock:
        for key, a in reversed(list(held.items())):
            if type(key) is tuple:
                continue
            entry = GUARDED.get(key)
            if entry is None or entry[0] is not a:
                continue
            entry[1] -= 1
            if entry[1] == 0:
                del GUARDED[key]
                _set_writable(a)
        held.clear()
        if _STUCK:
            stuck = list(_STUCK)
            _STUCK.clear()
            for a in stuck:
                _set_writable(a)
    if views and any(_changed(a, copy) for a, copy in views) and not _raising(sys._getframe(1)):
        tape.close()
        tape.write_check = None
        raise _written_through_memory()


def _written_through_memory():
    error = ValueError(
        "f wrote into the memory of a NumPy array after an operation whose gradient reads it had used it: the "
        "operation was given a view (m[:3], m.T, m.reshape(...)), and the write went through its base m, through "
        "another view of that memory, or by np.add.at, which NumPy allows while the view is read-only; the gradient "
        "would silently use the new values. Give the operation a copy (m[:3].copy()), write into a copy "
        "(`m = m.copy()` before changing it), or build the new values without writing in place (np.where, "
        "np.concatenate, ...).")
    error.pullback_named = True
    return error


_VIEW = "view"  # held[(_VIEW, id(view))]: (the view, a copy of its distinct elements when the op used it)


def _base_refs(a):
    return sys.getrefcount(a.base)


def _sole_base_refs():
    """What `_base_refs` gives for a view whose base nothing else refers to."""
    view = np.zeros(2)[:1]
    return _base_refs(view)


_SOLE_BASE_REFS = _sole_base_refs()


def _distinct(a):
    """`a` without its broadcast axes (stride 0): each element of its memory once."""
    if 0 in a.strides:
        return a[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in a.strides)]
    return a


def _changed(a, copy):
    distinct = _distinct(a)
    return not np.array_equal(distinct, copy, equal_nan=distinct.dtype.kind in "fc")


def _raising(frame):
    """Whether the exception being handled now is passing through `frame` (the call of `f` raised)."""
    error = sys.exc_info()[1]
    return error is not None and error.__traceback__ is not None and error.__traceback__.tb_frame is frame


def _set_writable(a):
    try:
        a.flags.writeable = True
    except ValueError:  # its base is read-only now (another call holds it): set it back once that call ends
        _STUCK.append(a)


def run_mixed(rule, values, kwargs, traced_values):
    """`rule(*values, **kwargs)`, where `traced_values` (plain values of operands this level traces) meet
    values an outer level traces: the outer level the rule calls records them as plain operands, and must not
    make them read-only (the engine's own arrays: views of them record writes through them as read-only)."""
    keys = [id(v) for v in traced_values if type(v) is np.ndarray]
    if not keys:
        return rule(*values, **kwargs)
    with _guard_lock:
        for key in keys:
            _IN_RULE[key] = _IN_RULE.get(key, 0) + 1
    try:
        return rule(*values, **kwargs)
    finally:
        with _guard_lock:
            for key in keys:
                left = _IN_RULE.pop(key) - 1
                if left:
                    _IN_RULE[key] = left


# --- how an operation reaches its level ---------------------------------------------
def apply(rule, args, kwargs=NO_KWARGS):
    """Run `rule` for the innermost level among `args`: record it on a tape, or push tangents forward."""
    tape = None
    for a in args:
        kind = type(a)
        if kind is Tracked or kind is Dual:
            t = a._tape
            if tape is None or t.level > tape.level:
                tape = t
        elif kind not in _PLAIN:
            check_operand(a)
            if is_sparse(a):
                rule = _sparse_rule(rule, args)
    if _HANDED_IDS and tape is not None:
        args, kwargs = _kept_as_now(args), {k: _kept_as_now(v) for k, v in kwargs.items()}
    try:
        if tape is None:
            return rule(*args, **kwargs)[0]
        return tape.apply(rule, args, kwargs)
    except (TypeError, ValueError) as error:
        named = None if raised_by_pullback(error) else mixed_arrays_error(rule, args, error)
        if named is None:
            raise
        raise named from error


def apply_rule(rule, *args, **kwargs):
    """`apply` with the call's own arguments: what a registered NumPy function runs."""
    return apply(rule, args, kwargs)


def apply2(rule, a, b):
    """`apply` for two inputs, at least one of them traced; the common reverse-mode cases kept short."""
    kind_a, kind_b = type(a), type(b)
    plain = None  # a plain NumPy operand, which the pullback may keep (see `guard_kept`)
    if _HANDED_IDS and (id(a) in _HANDED_IDS or id(b) in _HANDED_IDS or kind_a is np.ndarray or kind_b is np.ndarray):
        a, b = _kept_as_now((a, b))
    try:
        if kind_a is Tracked and kind_b is not Dual:
            tape = a._tape
            if kind_b is Tracked and b._tape is tape:
                y, back = rule(a._value, b._value)
                ids = (a._id, b._id)
            elif kind_b is Tracked and b._tape.level > tape.level:
                tape = b._tape
                y, back = run_mixed(rule, (a, b._value), NO_KWARGS, (b._value,))
                ids = (-1, b._id)
            elif kind_b is float or kind_b is int:
                number_rules = NUMBER_OPERAND_RULES.get(rule)
                y, back = (rule if number_rules is None else number_rules[0])(a._value, b)
                ids = (a._id, -1)
            elif kind_b not in _PLAIN and kind_b is not Tracked:
                if _foreign(b):
                    return NotImplemented
                if is_sparse(b):
                    return apply(rule, (a, b))
                y, back = rule(a._value, _as_operand(b))
                ids = (a._id, -1)
            elif kind_b is Tracked:  # traced by an outer level
                y, back = run_mixed(rule, (a._value, b), NO_KWARGS, (a._value,))
                ids = (a._id, -1)
            else:
                y, back = rule(a._value, b)
                ids = (a._id, -1)
                if kind_b is np.ndarray:  # a plain array the pullback may keep
                    plain = b
        elif kind_b is Tracked and kind_a is not Dual:
            tape = b._tape
            if kind_a is float or kind_a is int:
                number_rules = NUMBER_OPERAND_RULES.get(rule)
                y, back = (rule if number_rules is None else number_rules[1])(a, b._value)
            else:
                if kind_a not in _PLAIN:
                    if _foreign(a):
                        return NotImplemented
                    if is_sparse(a):
                        return apply(rule, (a, b))
                    a = _as_operand(a)
                y, back = rule(a, b._value)
                if kind_a is np.ndarray:  # a plain array the pullback may keep
                    plain = a
            ids = (-1, b._id)
        else:
            return apply(rule, (_as_operand(a), _as_operand(b)))
        if type(back) is PerOperand and -1 in ids:
            back = back.traced_only(ids)
        if plain is not None:
            held = tape.guarded
            if held is not None and id(plain) not in held:
                guard_kept(held, back, (plain,))
    except (TypeError, ValueError) as error:  # arrays of two libraries, or shapes that do not line up
        named = None if raised_by_pullback(error) else mixed_arrays_error(rule, (a, b), error)
        if named is None:
            raise
        raise named from error
    return tape.record(y, back, ids)


_PLAIN = frozenset((float, int, bool, np.ndarray, np.float64, np.float32, np.int64))
_RAISE = dis.opmap["RAISE_VARARGS"]
# `a % b` and `a %= b` in bytecode, (opcode, argument): the operator whose C code (the formatting of str and
# bytes) asks an operand for float()
_PERCENT = {(ins.opcode, ins.arg or 0) for source in ("a % b", "a %= b")
            for ins in dis.get_instructions(compile(source, "<percent>", "exec"))
            if ins.opname in ("BINARY_OP", "BINARY_MODULO", "INPLACE_MODULO")}


def _caller_outside_this_module():
    frame = sys._getframe(2)
    while frame.f_globals is globals():  # `Dual.__float__` calling `Traced.__float__`
        frame = frame.f_back
    return frame


def _formatting_with_percent(frame):
    """Whether `frame` (the Python code that asked for float(x)) is running `text % x` (or `%=`): no Python code
    runs between it and the call, so only the formatting of a str or bytes asks for the number there."""
    code = frame.f_code.co_code
    return (code[frame.f_lasti], code[frame.f_lasti + 1]) in _PERCENT


def raised_by_pullback(error):
    """Whether `error` comes from a `raise` statement of pullback's own code (a rule's refusal, which names
    the construct and the fix), not from NumPy or another library that a rule called."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "")
    if module != "pullback" and not module.startswith("pullback."):
        return False
    # an error of a C function a rule called (a ufunc's broadcasting) is raised at the call, not a `raise`
    return tb.tb_frame.f_code.co_code[tb.tb_lasti] == _RAISE


def _with_sequence(name, traced, sequence, reflected):
    """What Python's operator `name` gives for the plain value of `traced` and a list or tuple, where
    that is not an array computed from them: NotImplemented where it raises (0.5 + [1.0] is a
    TypeError, and so is np.float64(2.0) * [1.0]), or its plain answer (0.5 == [1.0] is False).
    None where the operation reads the sequence as an array, as arrays and most NumPy scalars do."""
    plain = stop_gradient(traced)
    if isinstance(plain, np.ndarray) or (is_stand_in(plain) and not is_number_stand_in(plain)):  # pb.jit's arrays too
        return None
    op = getattr(operator, name)
    try:
        result = op(sequence, plain) if reflected else op(plain, sequence)
    except TypeError:
        return NotImplemented
    return None if isinstance(result, np.ndarray) else result


def _as_operand(x):
    """A ufunc operand as NumPy reads it: a list or tuple of numbers becomes an array (np.power([2, 3], x)), and
    a `np.memmap` an ndarray of its memory (its results are ndarrays, but its views would keep its type)."""
    if type(x) is list or type(x) is tuple:
        return np.asarray(x)
    return x.view(np.ndarray) if type(x) is np.memmap else x


class SparseOperands:
    """How operations serve a constant scipy.sparse operand (`A @ x`); pullback.rules.scipy_sparse sets these."""

    rule_for = None  # rule_for(rule): the rule serving `rule` where an operand is a scipy.sparse matrix or array
    conversion_error = None  # conversion_error(x, frame): the error for SciPy's sparse code converting a traced x
    refuse_function = None  # refuse_function(ufunc, args): raises for a NumPy function given a sparse operand


def is_sparse(x):
    """Whether `x` is a scipy.sparse matrix or array (without importing SciPy: none exists before it is)."""
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and sparse.issparse(x)


def _sparse_rule(rule, args):
    """The rule serving `rule` in `apply` where an operand is a scipy.sparse matrix or array; a NumPy function's
    (`np.matmul(A, x)`, reached through `__array_ufunc__`, which NumPy cannot compute) is refused."""
    frame = sys._getframe(2)  # what called `apply`: `apply2` or an operator, or the ufunc protocol
    for _ in range(2):
        if frame is None:
            break
        if frame.f_code is _ARRAY_UFUNC:
            SparseOperands.refuse_function(frame.f_locals["ufunc"], args)
        frame = frame.f_back
    return SparseOperands.rule_for(rule)


_ARRAY_UFUNC = Traced.__array_ufunc__.__code__


def _foreign(x):
    """True for pullback's own differentiable containers, which take the operation over;
    raises for an operand that cannot be differentiated alongside a traced value."""
    check_operand(x)
    return hasattr(type(x), "__stop_gradient__")


def conversion_refusal(error):
    """The error to raise in place of `error`, raised by the function being differentiated, where NumPy's own
    message does not name the fix; None for other errors.

    For NumPy's "setting an array element with a sequence" raised by a write of a traced scalar into one
    element of a plain float array (`a[i, j] = x`, `a.fill(x)`): pullback's own refusal, which NumPy chains
    as the cause (a traced value has `__getitem__`, so NumPy takes it for a sequence). For NumPy's refusals of
    an object that is not an ndarray (a traced array is not one), NumPy's message and the fix."""
    cause = error.__cause__
    if type(error) is ValueError and getattr(cause, "pullback_conversion", False):
        return TypeError(str(cause)).with_traceback(error.__traceback__)
    fix = _NOT_AN_NDARRAY.get((type(error), str(error)))
    return None if fix is None else type(error)(f"{error} {fix}").with_traceback(error.__traceback__)


def write_refusal(error):
    """pullback's error in place of NumPy's refusal of a write into a read-only array, raised by the function being
    differentiated while pullback holds arrays read-only (a plain array a pullback keeps, see `guard_kept`, or
    pb.stop_gradient's value): it names the construct and the fix. None for other errors. Which of the two was
    written is read from the arrays the writing frame names; where it names neither, both are named."""
    # NumPy's messages end so ("assignment destination is read-only", "output array is read-only", ...); pullback's
    # own refusals that name a fix (a write through np.diagonal's view) go on
    if type(error) is not ValueError or getattr(error, "pullback_named", False) or not str(error).endswith("read-only"):
        return None
    if not GUARDED and not _HANDED_IDS:
        return None
    kept, handed, other = _read_only_named(error)
    if not kept and not handed:
        if other:  # only read-only arrays of NumPy's own (np.broadcast_to's): NumPy's error stands
            return None
        kept, handed = bool(GUARDED), bool(_HANDED_IDS)
    return written_after_use(kept, handed)


def _read_only_named(error):
    """Whether the innermost frame of user code `error` passed through names an array a pullback keeps
    read-only, whether it names pb.stop_gradient's value or a view of it, and whether it names another
    read-only array."""
    frame = line = None
    tb = error.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if module.partition(".")[0] not in ("pullback", "numpy"):
            frame, line = tb.tb_frame, linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    names = frame.f_locals if frame is not None else {}
    if line:  # the names on the line that wrote, where its source is at hand
        names = {name: names[name] for name in re.findall(r"[A-Za-z_]\w*", line) if name in names}
    kept = handed = other = False
    for value in list(names.values()):
        if type(value) is np.ndarray and not value.flags.writeable:
            entry = GUARDED.get(id(value))
            if entry is not None and entry[0] is value:
                kept = True
            elif is_handed_out(value) or _handed_out_base(value.base) is not None:
                handed = True
            else:
                other = True
    return kept, handed, other


_NOT_AN_NDARRAY = {
    (NotImplementedError, "Axis argument is only supported on ndarray objects"): (
        "NumPy's rng.shuffle(y, axis=k) shuffles along another axis than 0 only an ndarray, and an array being "
        "differentiated is not one. Write y = y[:, rng.permutation(y.shape[1])] (for any k: y = np.take(y, "
        "rng.permutation(y.shape[k]), axis=k)), which draws the same permutation."),
    (ValueError, "Supplied output array must be contiguous, writable, aligned, and in machine byte-order."): (
        "If out is an array being differentiated (np.zeros_like(x) of a traced x is one): NumPy's random "
        "generators write only into an ndarray. Draw, then assign: v = rng.random(x.shape) (out[...] = v)."),
}


def stop_gradient(x):
    """The plain value inside `x`, at every level of nesting: no gradient flows through it.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda x: np.sum(x * pb.stop_gradient(x)), np.array([3.0]))
    (array([3.]),)
    """
    while type(x) is Tracked or type(x) is Dual:
        x = x._value
    return x


def read_only_value(x):
    """The plain value of traced `x` as user code gets it from `pullback.stop_gradient`. Of an array, a
    read-only copy of it (the same copy while `x` holds that value and the copy is in use), registered on
    `x`'s root: without pullback `stop_gradient(x)` is `x` itself, so each later write into that root, through
    `x` or any view of it, is copied into the copy too (see `_inplace.update_copies`), which with its views
    shows the write as in NumPy. A write into the copy, which the recording could not see, is refused by
    NumPy (read-only); once the outermost level `x` is traced by ends, it is writable (`release_handed_out`).

    An operation given the value, or a view of it, keeps a copy of what it read (`_kept_as_now`). A write into
    the caller's array through another name (a global), which is not recorded, does not reach the copy.

    Under `pb.jit` (a stand-in `plain`) the value is a read-only view of a writable copy, which the root
    keeps for good (a view of the value, `s.T`, does not keep a stand-in alive): the trace keeps the value
    and its `s[index]` views in step with the copy, and refuses a write into it while another view is alive."""
    plain = stop_gradient(x)
    if plain is x or (type(plain) is not np.ndarray and not is_stand_in(plain)):
        return plain
    link = getattr(x, "_base", None)
    if link is None and not plain.flags.writeable:  # (a read-only view of a root, np.diagonal(y), is copied:
        return plain                                 # writes into y show in it)
    root = x if link is None else link.root
    copies = getattr(root, "_read_only", None)
    if copies is None:
        copies = root._read_only = []
    for _, was, ref, _, _ in copies:
        value = ref()
        if was is plain and value is not None:
            return value
    private = None
    if is_stand_in(plain):
        private = np.copy(plain, order="K")
        value = private.view()
    else:
        value = np.copy(plain, order="K")
    value.flags.writeable = False
    # where x's elements are in the root (and the real or imaginary part's `derive`): no reference to x,
    # which refers to the root (a cycle; the collector is paused while a gradient is recorded)
    where = None if link is None else (link.positions(), getattr(link, "derive", None))
    copies[:] = [entry for entry in copies if entry[3] is not None or entry[2]() is not None]
    for entry in copies:
        entry[4] = None
    # the latest copy is kept until the root is written (`stop_gradient(x)[i]` in a loop copies x once)
    copies.append([where, plain, weakref.ref(value), private, value])
    _HANDED_OUT[id(value)] = value
    _hand_out(_outermost_level(x), value)
    return value


# The read-only copies `read_only_value` handed out that are still alive, by id.
_HANDED_OUT = weakref.WeakValueDictionary()
_HANDED_IDS = _HANDED_OUT.data  # (its keys, for a quick test on every operation)


def _kept_as_now(operands):
    """`operands` (a tuple, a list or one value) with each read-only value `read_only_value` handed out, and each
    NumPy view of one (`s.T`, `s[1:]`, `np.broadcast_to(s, ...)`), copied: the value shows later writes into its
    array, as without pullback, but a rule keeps its operands for the backward sweep, which must read them as
    the operation did."""
    if type(operands) is tuple or type(operands) is list:
        return type(operands)(_kept_as_now(v) for v in operands)
    if is_handed_out(operands):
        return np.copy(operands, order="K")  # (under pb.jit, a stand-in: a recorded copy)
    if type(operands) is np.ndarray and operands.base is not None:
        owner = _handed_out_base(operands.base)
        if owner is not None:
            return _view_of_a_copy(operands, owner)
    return operands


def _handed_out_base(base):
    """The value `read_only_value` handed out whose memory an array with NumPy base `base` shows, or None."""
    while base is not None:
        if is_handed_out(base):
            return base
        base = getattr(base, "base", None)  # (as_strided's views have a base of their own kind)
    return None


def _view_of_a_copy(view, owner):
    """`view` of `owner` (an array of its own, dense) as the same view of a copy of `owner`: its strides too, so
    that NumPy computes with it exactly as with `view` (a copy of a broadcast view would be laid out anew)."""
    memory = np.copy(owner, order="K").ravel(order="K")  # (a view: the copy is laid out as `owner`)
    offset = view.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
    return np.ndarray(view.shape, view.dtype, buffer=memory, offset=offset, strides=view.strides)


def is_handed_out(a):
    """Whether `a` is a read-only copy `pullback.stop_gradient` handed out (not NumPy's own read-only array)."""
    return a is not None and _HANDED_OUT.get(id(a)) is a


def _outermost_level(x):
    """The outermost level among those traced `x` is nested in: the last that may write into `x`."""
    level = None
    while type(x) is Tracked or type(x) is Dual:
        level, x = x._tape, x._value
    return level


def _hand_out(level, copy):
    """Note `copy` among those handed out of values `level` owns: writable once it ends."""
    handed = getattr(level, "handed_out", False)
    if handed is None:  # the first: the level's end, however it comes, releases them
        handed = level.handed_out = []
        weakref.finalize(level, _make_writable, handed)
    if handed is not False:  # (a level of another kind keeps them read-only)
        handed.append(weakref.ref(copy))


def release_handed_out(level):
    """Make writable the read-only copies `read_only_value` handed out of values `level` owned, now that it
    has ended: nothing writes into those values any more, and without pullback they are writable."""
    handed = getattr(level, "handed_out", None)
    if handed:
        _make_writable(handed)


def _make_writable(handed):
    for ref in handed:
        copy = ref()
        if copy is not None:
            _HANDED_OUT.pop(id(copy), None)  # (no longer read-only: nothing to keep apart)
            copy.flags.writeable = True  # (its own memory)
    handed.clear()


def strip_all(x):
    """`stop_gradient` through tuples, lists and dicts (for keyword arguments and masks)."""
    if type(x) is Tracked or type(x) is Dual:
        return stop_gradient(x)
    if type(x) in (tuple, list):
        return type(x)(strip_all(v) for v in x)
    if type(x) is dict:
        return {k: strip_all(v) for k, v in x.items()}
    return x

def _ufunc_general(ufunc, method, inputs, kwargs):
    """Every ufunc call that is not a plain `ufunc(*tracked_inputs)`."""
    if ufunc in NONDIFF_UFUNCS:
        if any(isinstance(o, Traced) for o in _outputs(kwargs)):
            return _constant_into_out(ufunc, method, inputs, kwargs)
        return getattr(ufunc, method)(*strip_all(inputs), **strip_all(kwargs))
    name = ufunc_name(ufunc)
    out = kwargs.get("out", 0)
    if out is None or (type(out) is tuple and all(o is None for o in out)):
        del kwargs["out"]  # NumPy's default, spelled out
    if kwargs.get("where", None) is True:
        del kwargs["where"]
    if "out" in kwargs:
        return _into_out(ufunc, method, inputs, kwargs, name)
    if "where" in kwargs and method == "__call__":
        raise TypeError(
            f"{name}(..., where=...) without out= leaves the elements where the mask is False uninitialised in "
            f"NumPy (whatever the memory held). Pass out= (an array to keep there, e.g. out=np.zeros_like(x)), or "
            f"write np.where(mask, np.{ufunc.__name__}(...), fallback).")
    if method == "__call__":
        return _ufunc_call(ufunc, name, inputs, kwargs)
    if method == "reduce":
        reduction = _REDUCTIONS.get(ufunc)
        if reduction is not None:
            kwargs.setdefault("axis", 0)
            dtype = kwargs.pop("dtype", None)
            if kwargs.get("initial", np._NoValue) is np._NoValue:
                kwargs.pop("initial", None)
            if dtype is not None and reduction in (np.sum, np.prod):  # NumPy's own reduction in that dtype
                kwargs["dtype"] = dtype
            elif dtype is not None:  # max and min are exact: casting first gives NumPy's values
                inputs = (FUNCTIONS[astype](inputs[0], dtype),) + inputs[1:]
            return FUNCTIONS[reduction](*inputs, **kwargs)
    if method == "outer" and ufunc in UFUNC_RULES:
        a, b = inputs
        return ufunc(FUNCTIONS[np.reshape](a, np.shape(a) + (1,) * np.ndim(b)), b, **kwargs)
    if method == "accumulate":
        scan = _SCANS.get(ufunc)
        if scan is not None:
            kwargs.setdefault("axis", 0)
            # NumPy's own errors (a 0-d array, axis=None, an axis out of range), from an empty array of as many axes
            empty = np.empty((0,) * np.ndim(inputs[0]), dtype=dtype_of(stop_gradient(inputs[0])))
            ufunc.accumulate(empty, axis=kwargs["axis"], **{k: v for k, v in kwargs.items() if k == "dtype"})
            if isinstance(kwargs["axis"], tuple):  # NumPy takes one axis as a tuple too
                kwargs["axis"] = kwargs["axis"][0]
            return FUNCTIONS[scan](*inputs, **kwargs)
    raise TypeError(f"{name}.{method} is not supported on tracked values: {_ufunc_method_fix(ufunc, method)}")


def _ufunc_call(ufunc, name, inputs, kwargs):
    """`ufunc(*inputs, **kwargs)` with NumPy's call options (dtype, signature, casting, order, subok, and the
    axes, axis and keepdims of a generalised ufunc such as matmul): the same loop and layout as NumPy's."""
    options = {k: kwargs.pop(k) for k in _CALL_OPTIONS if k in kwargs}
    if kwargs:
        raise TypeError(f"{name} got keyword arguments pullback does not support on tracked values: {sorted(kwargs)}")
    rule = UFUNC_RULES.get(ufunc)
    if rule is None:
        _refuse_as_numpy(ufunc, inputs)
        raise refused(next((a for a in inputs if isinstance(a, Traced)), None), missing_rule(ufunc))
    if options:  # NumPy's own errors for options it refuses (a cast the casting rule forbids, bad axes)
        with np.errstate(all="ignore"):
            expected = ufunc(*strip_all(inputs), **strip_all(options))
    if options.get("order") == "A":
        options["order"] = _any_order(inputs)
    if any(k in options for k in ("axes", "axis", "keepdims")):
        result = _gufunc_with_axes(ufunc, inputs, options, np.shape(expected))
    else:
        if any(k in options for k in ("dtype", "signature")):
            inputs = _cast_to_loop(ufunc, inputs, options.get("dtype"), options.get("signature"), options.get("casting"))
        result = _in_order(apply(rule, inputs), options.get("order", "K"))
    if ufunc.nout != 1 or not all(_is_python_number(stop_gradient(x)) for x in inputs):
        return result
    with np.errstate(all="ignore"):  # a NumPy number, as the ufunc gives for Python numbers
        return _as_python(result, ufunc(*(_as_numpy_operand(x) for x in strip_all(inputs))))


def _in_order(result, order):
    """A ufunc's output (each of a tuple of them) laid out in `order`, as NumPy lays out the arrays it makes."""
    if type(result) is tuple:
        return tuple(_in_order(part, order) for part in result)
    if order not in ("C", "F") or np.ndim(result) < 2 or _laid_out(concrete_of(result), order):
        return result
    return FUNCTIONS[np.copy](result, order=order) if isinstance(result, Traced) else np.copy(result, order=order)


def _any_order(inputs):
    """What NumPy's order="A" means for these inputs: "F" where each is Fortran-contiguous (a number is), else "C"."""
    plains = (concrete_of(x) for x in inputs)
    return "F" if all(not isinstance(p, np.ndarray) or _laid_out(p, "F") for p in plains) else "C"


def _laid_out(plain, order):
    """Whether plain array `plain` is contiguous in `order` ("C" or "F")."""
    flags = getattr(plain, "flags", None)
    return flags is not None and flags["C_CONTIGUOUS" if order == "C" else "F_CONTIGUOUS"]


def _without_axis(shape, axis):
    """`shape` without the entry at `axis`."""
    axis = axis % len(shape)
    return shape[:axis] + shape[axis + 1:]


_CALL_OPTIONS = ("dtype", "signature", "casting", "order", "subok", "axes", "axis", "keepdims")


def _gufunc_with_axes(ufunc, inputs, options, shape):
    """A generalised ufunc (matmul, vecdot, ...) with its core dimensions at `axes` (or `axis`): the call
    with those axes moved last, and the output's core axes moved where `axes` puts them."""
    if options.get("keepdims"):
        if options.get("axes") is not None:
            raise TypeError(f"{ufunc_name(ufunc)}(..., axes=..., keepdims=True) is not supported on tracked values; "
                            "call it without keepdims and restore the axis with np.expand_dims(y, axis).")
        # the core axis is kept at `axis` (by default the last), counted in the result's dimensions
        axis = options.get("axis", -1)
        unkept = {k: v for k, v in options.items() if k != "keepdims"} | {"axis": axis}
        return FUNCTIONS[np.expand_dims](_gufunc_with_axes(ufunc, inputs, unkept, _without_axis(shape, axis)), axis)
    axes = options.get("axes")
    if axes is None:  # axis=k: the one core axis of every operand that has one
        axis = options["axis"]
        axes = [(axis,)] * ufunc.nin + ([] if len(shape) < max(np.ndim(x) for x in inputs) else [(axis,)])
    entries = [(a,) if isinstance(a, (int, np.integer)) else tuple(a) for a in axes]
    moved = tuple(FUNCTIONS[np.moveaxis](x, entry, tuple(range(-len(entry), 0))) if entry else x
                  for x, entry in zip(inputs, entries))
    result = ufunc(*moved, **{k: v for k, v in options.items() if k in ("dtype", "signature", "casting")})
    # NumPy lays out the output with its core axes last, then moves them
    result = _in_order(result, options.get("order", "K"))
    out = entries[ufunc.nin] if len(entries) > ufunc.nin else ()
    if out:
        result = FUNCTIONS[np.moveaxis](result, tuple(range(-len(out), 0)), out)
    if np.shape(result) != shape:  # a layout this does not cover: never a silently different result
        raise TypeError(f"{ufunc_name(ufunc)}(..., axes={axes!r}) is not supported on tracked values here; move the "
                        "core axes last yourself (np.moveaxis) and call it without axes=.")
    return result


UFUNC_AT = {}  # ufunc -> f(a, flat positions, flat values): the new `a` after `ufunc.at` (see rules/ufuncs.py)


def _ufunc_at(ufunc, inputs):
    """`np.add.at(a, index, values)` (and subtract's) into a traced `a`: a functional update, each repeated
    index adding again, as NumPy's unbuffered write does; seen through every view and alias of `a`."""
    at = UFUNC_AT.get(ufunc)
    a, index, values = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
    unsupported = TypeError(
        f"{ufunc_name(ufunc)}.at is not supported on tracked values (np.add.at and np.subtract.at are): it writes in "
        "place; build the result with np.where or indexing instead (unique indices), or combine repeated entries first.")
    if at is None or values is None:
        raise unsupported
    if not isinstance(a, Traced):
        raise TypeError(f"{ufunc_name(ufunc)}.at would write a value being differentiated into a plain array, losing "
                        "its gradient. Start from a traced array (np.zeros_like(x)), which np.add.at writes into.")
    if not holds_array(a):
        if np.ndim(a) == 0:  # a NumPy scalar: no element to add at
            raise unsupported
        raise TypeError(f"{ufunc_name(ufunc)}.at writes in place into NumPy arrays; a {type(concrete_of(a)).__name__} "
                        "has no such write. Build the sum with indexing instead (a one-hot matrix product, or "
                        "xp.where), or convert to NumPy first.")
    index = strip_all(index) if type(index) is tuple else stop_gradient(index)
    positions = _positions_at(a.shape, index)
    _refuse_reading_what_is_written(ufunc, a, positions, values)
    flat_values = np.ravel(np.broadcast_to(values, positions.shape))
    rebind(a, at(a, positions.reshape(-1), flat_values))


def _positions_at(shape, index):
    """For each element `a[index]` names, `a` of `shape`, its position in `a.ravel()`. An index that is a
    `pb.jit` stand-in (an argument, or computed inside) is recorded, so that each replay uses its own."""
    parts = index if type(index) is tuple else (index,)
    stand_in = next((p for p in parts if is_stand_in(p)), None)
    if stand_in is None:
        return _flat_positions(shape, index)
    # a mask's count of True decides the positions' shape: the trace checks it on a replay of np.nonzero,
    # not of a call of its own
    parts = tuple(q for p in parts for q in (np.nonzero(p) if _is_stand_in_mask(p) else (p,)))
    return stand_in.record_primitive(_flat_positions, "np.add.at's positions", (shape, parts), {})


def _is_stand_in_mask(part):
    return is_stand_in(part) and part.dtype == bool and part.ndim > 0


def _flat_positions(shape, index):
    """`np.arange(size).reshape(shape)[index]`: the flat positions of the elements `index` names."""
    return np.arange(int(np.prod(shape))).reshape(shape)[index]


def _refuse_reading_what_is_written(ufunc, a, positions, values):
    """Refuse `ufunc.at(a, index, v)` where `v` shows elements of `a`'s memory that it writes: NumPy reads `v`
    while it writes `a`, so whether such an element is read before or after its write is NumPy's inner loop's."""
    if not isinstance(values, Traced) or not holds_array(values):
        return
    (root, shown), (values_root, read) = root_positions(a), root_positions(values)
    if values_root is root and decided(_reads_written, shown.reshape(-1), positions, read):
        raise ValueError(f"{ufunc_name(ufunc)}.at(a, index, v) with v a view of the elements of a that it writes: "
                         "NumPy reads v while it writes a, so some values may be read after they were changed. "
                         "Pass a copy: v.copy().")


def _reads_written(shown, positions, read):
    """Whether root elements `read` include one of those that `shown[positions]` names."""
    return np.intersect1d(shown[positions], read).size > 0


def _ufunc_method_fix(ufunc, method):
    """What to write instead of `ufunc.method` (one pullback has no rule for), in a message."""
    if method == "at":
        return "it writes in place; build the result with np.where or indexing instead."
    if ufunc in (np.logaddexp, np.logaddexp2) and method == "reduce":
        return ("write it as scipy.special.logsumexp(x, axis) (logaddexp2's: of x * ln 2, divided by ln 2), "
                "or m + np.log(np.sum(np.exp(x - m), axis)) with m = np.max(x, axis), which pullback differentiates.")
    name = ufunc.__name__
    if method == "reduceat":
        return (f"write each slice's reduction as a loop of np.{name} calls over its rows (x[i:j]), then "
                "np.stack the results; pullback differentiates each call.")
    steps = " (np.stack the steps for accumulate)" if method == "accumulate" else ""
    return (f"write it as a loop of np.{name} calls along the axis{steps}, e.g. y = x[0]; "
            f"for row in x[1:]: y = np.{name}(y, row); pullback differentiates each call.")


def _refuse_as_numpy(ufunc, inputs):
    """Raise NumPy's own error where `ufunc` fails on these inputs (np.bitwise_and or np.gcd of floats, which
    a traced value is): then no derivative rule is missing, as the call fails without pullback too."""
    with np.errstate(all="ignore"):
        ufunc(*strip_all(inputs))


_WRITES_FILES = frozenset((np.save, np.savez, np.savez_compressed, np.savetxt))


def _refuse_as_numpy_function(func, args, kwargs):
    """Raise NumPy's own error where `func` fails on copies of the plain values (np.ravel_multi_index of floats):
    then no derivative rule is missing, as the call fails without pullback too (and code catching that error
    goes on as it does without pullback). Functions that write files are not run."""
    if func in _WRITES_FILES:
        return

    def copied(x):
        x = strip_all(x)
        if type(x) in (tuple, list):
            return type(x)(copied(v) for v in x)
        if type(x) is dict:
            return {k: copied(v) for k, v in x.items()}
        return x.copy() if type(x) is np.ndarray else x

    with np.errstate(all="ignore"):
        func(*copied(args), **copied(kwargs))


def _cast_to_loop(ufunc, inputs, dtype, signature=None, casting=None):
    """`inputs` cast to the dtypes of the loop NumPy picks for `ufunc(*inputs, dtype=dtype)` (or
    `signature=`): NumPy casts the inputs and computes in that loop, so the values come out the same."""
    def described(x):  # Python numbers stay weak, as NumPy reads them
        value = stop_gradient(x)
        return type(value) if type(value) in (int, float, complex) else dtype_of(value)

    given = tuple(described(x) for x in inputs)
    wanted = (None,) * ufunc.nin + (np.dtype(dtype),) * ufunc.nout if signature is None else signature
    try:
        loop = ufunc.resolve_dtypes(given + (None,) * ufunc.nout, signature=_signature_tuple(ufunc, wanted),
                                    **({} if casting is None else {"casting": casting}))
    except (TypeError, ValueError):  # let NumPy raise its own error
        options = {"dtype": dtype, "signature": signature, "casting": casting}
        ufunc(*strip_all(inputs), **{k: v for k, v in options.items() if v is not None})
        raise
    # Python numbers too: the loop computes in its dtype (and a tangent then has that dtype)
    return tuple(x if not isinstance(g, type) and g == want else FUNCTIONS[astype](x, want) if isinstance(x, Traced)
                 else want.type(x) for x, g, want in zip(inputs, given, loop))


def _signature_tuple(ufunc, signature):
    """A ufunc's `signature=` as a tuple of dtypes (or None) per operand: NumPy also takes "dd->d"."""
    if not isinstance(signature, str):
        return tuple(None if d is None else np.dtype(d) for d in signature)
    ins, _, outs = signature.replace(",", "").replace(" ", "").partition("->")
    return tuple(np.dtype(c) for c in ins + outs)


def _outputs(kwargs):
    out = kwargs.get("out")
    return () if out is None else out if isinstance(out, tuple) else (out,)


def _refuse_scalar_outputs(outs):
    """NumPy's error for an `out=` that is a traced NumPy scalar (`y = x * 1.0` of a 0-d `x`), which it
    cannot write into."""
    if any(isinstance(o, Traced) and not holds_array(o) for o in outs):
        raise TypeError("return arrays must be of ArrayType")


def _constant_into_out(ufunc, method, inputs, kwargs):
    """A ufunc without a derivative (floor, isnan, ...) writing into traced `out=` arrays: each takes
    the result as a constant, so its derivative is zero from here on, as the values say."""
    others = {k: v for k, v in strip_all(kwargs).items() if k != "out"}
    _refuse_scalar_outputs(_outputs(kwargs))
    where = others.pop("where", True)
    if where is not True and method != "__call__":
        raise TypeError(f"{ufunc_name(ufunc)}.{method}(..., out=..., where=...) is not supported on tracked values; "
                        f"use np.where(mask, np.{ufunc.__name__}.{method}(...), out) instead.")
    casting = others.pop("casting", "same_kind")
    _refuse_shared_outputs(ufunc_name(ufunc), _outputs(kwargs))
    results = getattr(ufunc, method)(*strip_all(inputs), **others)
    results = results if isinstance(results, tuple) else (results,)
    for target, result in zip(_outputs(kwargs), results):
        if isinstance(target, Traced):
            _refuse_unsafe_cast(getattr(ufunc, method), inputs, result, target.dtype, casting, others)
            _write_constant(target, result, where)
        else:
            np.copyto(target, result, casting=casting, where=where)
    outs = kwargs["out"]
    return outs[0] if type(outs) is tuple and len(outs) == 1 else outs  # NumPy gives the array of a one-output ufunc


def _write_constant(target, result, where):
    """Constant `result` written into traced `target` where `where` holds (elsewhere `target` keeps its values,
    as NumPy's where= does), element by element: into a window too where each place takes one value."""
    if where is True:
        write_elementwise(target, _broadcast_to_shape(result, target.shape), ())
    else:
        write_elementwise(target, np.where(where, result, target), (result, where, target))


def _broadcast_to_shape(x, shape):
    return x if np.shape(x) == shape else np.broadcast_to(x, shape)


def _refuse_unsafe_cast(call, inputs, result, dtype, casting, kwargs, place=(0, 1)):
    """Raise NumPy's own error where writing `result` into an array of `dtype` breaks the `casting`
    rule (a complex result into a real array): NumPy refuses it, and a silent cast would drop a part.
    `place` is `(k, n)`: `result` is output `k` of the `n` the call gives."""
    given = dtype_of(result)
    if given == dtype or np.can_cast(given, dtype, casting=casting):
        return
    k, n = place
    plain_out = np.empty(np.shape(result), dtype)
    out = plain_out if n == 1 else tuple(plain_out if j == k else None for j in range(n))
    call(*strip_all(inputs), out=out, casting=casting, **strip_all(kwargs))
    raise TypeError(f"Cannot cast the output from {given} to {dtype} with casting rule {casting!r}")


def _into_out(ufunc, method, inputs, kwargs, name):
    """`ufunc(..., out=y)` with `y` traced: the functional update `y[...] = ufunc(...)`, seen through every alias.
    Each traced array of an `out` tuple (np.divmod, np.modf) takes its output so."""
    out = kwargs.pop("out")
    out = out if isinstance(out, tuple) else (out,)
    _refuse_scalar_outputs(out)
    _refuse_shared_outputs(name, out)
    casting = kwargs.pop("casting", "same_kind")  # the write below casts, as NumPy's output does
    call = ufunc if method == "__call__" else getattr(ufunc, method)
    where = stop_gradient(kwargs.pop("where")) if method == "__call__" and "where" in kwargs else True
    result = call(*inputs, **kwargs) if where is True else _masked_call(ufunc, inputs, kwargs, out, where, casting)
    results = result if type(result) is tuple else (result,)
    if len(out) != len(results):
        raise ValueError(f"{name}(..., out=...): out has {len(out)} entries, the call gives {len(results)} outputs")
    written = tuple(_write_output(call, inputs, kwargs, name, target, part, casting, (k, len(out)), where)
                    for k, (target, part) in enumerate(zip(out, results)))
    return written if type(result) is tuple else written[0]


def _masked_call(ufunc, inputs, kwargs, out, mask, casting):
    """`ufunc(*inputs)` for `ufunc(*inputs, out=out, where=mask)`, whose result is kept only where `mask` holds.

    NumPy computes only there. Elsewhere each array input is given its value at the first place where `mask`
    holds, where NumPy computes too: so no derivative there is infinite (its zero cotangent times inf would be
    NaN), at any order, and the inputs get a zero gradient there. On NumPy's arrays (not inside `pb.jit`) NumPy's
    own call comes first, for its errors and warnings; where `mask` holds nowhere nothing is computed (the outputs
    are as they were).
    """
    plain = strip_all(inputs)
    eager = not is_stand_in(mask) and _numpy_only((plain, mask, strip_all(out), strip_all(kwargs)))
    if eager:
        mask = np.asarray(mask)
        copies = tuple(None if o is None else np.array(stop_gradient(o), copy=True) for o in out)
        ufunc(*plain, out=copies, where=mask, casting=casting, **strip_all(kwargs))
        if not mask.any():
            return out if len(out) > 1 else out[0]
    shape = np.broadcast_shapes(np.shape(mask), *(np.shape(p) for p in plain))
    first = np.argmax(np.reshape(np.broadcast_to(mask, shape), -1))
    inputs = tuple(FUNCTIONS[np.where](mask, x, np.reshape(np.broadcast_to(p, shape), -1)[first])
                   if np.ndim(p) > 0 else x for x, p in zip(inputs, plain))
    if not eager:
        return ufunc(*inputs, **kwargs)
    with np.errstate(all="ignore"):  # (NumPy's own call gave them)
        return ufunc(*inputs, **kwargs)


def _numpy_only(x):
    """Whether `x` (nested in tuples and dicts) holds NumPy's arrays, numbers and None only."""
    if type(x) is tuple or type(x) is list:
        return all(_numpy_only(v) for v in x)
    if type(x) is dict:
        return all(_numpy_only(v) for v in x.values())
    return x is None or isinstance(x, (np.ndarray, np.generic, int, float, complex, str, np.dtype, type))


def _refuse_shared_outputs(name, outs):
    """Refuse an `out` tuple with two entries in one memory (np.divmod(a, b, out=(q, q))): which output
    NumPy leaves there depends on its inner loop (the quotient of floats, the remainder of integers)."""
    arrays = [concrete_of(o) for o in outs if o is not None]
    arrays = [a for a in arrays if isinstance(a, np.ndarray)]
    if any(np.shares_memory(a, b) for k, a in enumerate(arrays) for b in arrays[k + 1:]):  # an element in common
        raise ValueError(
            f"{name}(..., out=...): two outputs are written into one array (or overlapping views of one); "
            "which of them NumPy leaves there depends on its inner loop (np.divmod of floats leaves the "
            "quotient, of integers the remainder). Pass a separate array for each output: out=(q, r).")


def _write_output(call, inputs, kwargs, name, target, part, casting, place, where=True):
    """Output `part` of a ufunc call written into its `out=` entry `target` (None: `part` itself), where
    `where` holds (elsewhere `target` keeps its values, as NumPy's `where=` does)."""
    if target is None:
        if where is not True:
            raise TypeError(f"{name}(..., out=(..., None), where=...): NumPy leaves the output it allocates "
                            "uninitialised where the mask is False. Pass an array for every output.")
        return part
    if not isinstance(target, Traced):
        if isinstance(part, Traced) and np.result_type(target).kind in "biu":  # no gradient to lose (as x.astype(int))
            k, n = place
            out = target if n == 1 else tuple(target if j == k else None for j in range(n))
            options = {} if where is True else {"where": where}
            if isinstance(call, np.ufunc):  # the methods (reduce, accumulate) take no casting=
                options["casting"] = casting
            call(*strip_all(inputs), out=out, **options, **strip_all(kwargs))  # NumPy's own write
            return target
        if isinstance(part, Traced):
            raise TypeError(
                f"{name}(..., out=...) would write a result that is being differentiated into a plain array, "
                "losing the gradient (this is also what `a += x` does when `a` is a plain array). "
                "Assign the result instead (a = a + x), or start from a traced array (np.zeros_like(x))."
            )
        np.copyto(target, part, casting=casting, where=where)  # no gradient (np.frexp's exponent): NumPy's write
        return target
    _refuse_unsafe_cast(call, inputs, part, target.dtype, casting, kwargs, place)
    for shape in (np.shape(part), np.shape(where)):  # NumPy broadcasts the inputs and the mask to out's shape
        if np.broadcast_shapes(shape, target.shape) != target.shape:
            raise ValueError(f"{name}(..., out=...): shape {shape} does not broadcast to the shape of out, {target.shape}")
    operands = inputs
    if where is not True:
        part, operands = np.where(where, part, target), inputs + (where, target)
    elif np.shape(part) != target.shape:
        part = np.broadcast_to(part, target.shape)
    if isinstance(call, np.ufunc):  # elementwise: each output element reads its own elements of the inputs
        return write_elementwise(target, part, operands)
    return in_place(target, part if isinstance(part, Traced) else FUNCTIONS[index_update](target, Ellipsis, part))


_REDUCTIONS = {np.add: np.sum, np.multiply: np.prod, np.maximum: np.max, np.minimum: np.min}
_SCANS = {np.add: np.cumsum, np.multiply: np.cumprod}


def _flat(args):
    """The arguments of a NumPy call, with lists and tuples opened one level (np.concatenate([a, b]))."""
    for a in args:
        if type(a) in (list, tuple):
            yield from a
        else:
            yield a
