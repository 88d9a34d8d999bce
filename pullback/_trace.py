"""Tracked values and the tape that records what is done to them.

A `Tape` belongs to one call of `gradient` or `pullback`. Each trainable float leaf
of the arguments becomes a `Tracked` handle on a node of that tape. Every NumPy
operation on tracked values runs its rule on the plain values and appends a node
`(spec, back, in_ids)` to the tape.

Nested calls make nested tapes (and `jvp` makes forward levels, whose `Dual`
values carry tangents). A level made later is higher, and an operation unwraps only
the inputs that belong to the highest level among them; the others stay traced, so
the rule's own arithmetic is recorded on the outer levels and the levels never mix.
"""

import contextlib
import gc
import itertools
import threading
import weakref

import numpy as np

from ._registry import FUNCTIONS, NONDIFF_UFUNCS, UFUNC_RULES, qualified_name

_levels = itertools.count(1)
_NO_KWARGS = {}


class Tape:
    """The nodes of one recording, in order: `(spec, back, in_ids)`, with `back` None for inputs.

    A node's id is its index; `spec` is what the sweep needs of its value (see `_spec`);
    `back` maps the node's cotangent to those of the nodes `in_ids` (-1 for an argument
    that is not traced at this level).
    """

    __slots__ = ("level", "nodes", "closed", "__weakref__")

    def __init__(self):
        self.level = next(_levels)
        self.nodes = []
        self.closed = False

    def leaf(self, value):
        """A new input node holding `value`."""
        self.nodes.append((_spec(value), None, ()))
        return Tracked(value, self, len(self.nodes) - 1)

    def push(self, y, back, in_ids):
        """Record that `back` maps the cotangent of a new node `y` to those of `in_ids`."""
        if self.closed:
            raise RuntimeError(
                "A tracked value was used after the gradient call that tracked it had finished. "
                "Values escaping `f` through globals or closures carry no gradient; "
                "use pb.stop_gradient(x) to keep a plain copy."
            )
        nodes = self.nodes
        nodes.append((_spec(y), back, in_ids))
        return len(nodes) - 1

    def close(self):
        self.closed = True


_gc_lock = threading.Lock()
_gc_state = {"depth": 0, "was_enabled": False}


@contextlib.contextmanager
def collector_paused():
    """Hold Python's cyclic garbage collector while a tape is recorded or swept.

    A tape of many operations is many small containers (nodes, closures), and the collector
    would rescan all of them again and again as it grows, making a long tape cost more than
    linearly. Nothing on a tape forms a cycle, so collection can wait until the call ends.
    Re-entrant and thread-safe: the collector resumes (if it was on) when the last call ends.
    """
    with _gc_lock:
        if _gc_state["depth"] == 0:
            _gc_state["was_enabled"] = gc.isenabled()
            gc.disable()
        _gc_state["depth"] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_state["depth"] -= 1
            if _gc_state["depth"] == 0 and _gc_state["was_enabled"]:
                gc.enable()


def _spec(value):
    """What the tape keeps of a node's value: `(shape, dtype)` for an array, so the array itself
    is freed as soon as no rule needs it; other values (Python floats, NumPy scalars, values of
    outer levels) as they are; nothing for the tuple of a several-output operation."""
    if type(value) is np.ndarray:
        return value.shape, value.dtype
    if isinstance(value, tuple):
        return None
    return value


class Traced:
    """What tracked (reverse mode) and dual (forward mode) values share: they speak NumPy.

    Ufuncs, array functions, operators, indexing and the common ndarray methods all
    end in `apply`, which hands the operation to the innermost level among its inputs.
    """

    __slots__ = ("_value", "_tape", "_base", "_views", "__weakref__")
    __array_priority__ = 100.0
    __hash__ = None

    # --- NumPy protocols -------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and not kwargs:
            rule = UFUNC_RULES.get(ufunc)
            if rule is not None:
                if len(inputs) == 1 and type(self) is Tracked:
                    return apply1(rule, self)
                if len(inputs) == 2:
                    return apply2(rule, inputs[0], inputs[1])
                return apply(rule, inputs)
        return _ufunc_general(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        for t in types:
            if t is not np.ndarray and not issubclass(t, Traced) and not hasattr(t, "__stop_gradient__"):
                if issubclass(t, np.ndarray):
                    raise subclass_error(next(a for a in _flat(args) if type(a) is t))
                raise foreign_error(f"{t.__module__}.{t.__qualname__}")
        impl = FUNCTIONS.get(func)
        if impl is None:
            raise missing_rule(func)
        return impl(*args, **kwargs)

    def __array__(self, dtype=None, copy=None):
        raise conversion_error(self)

    # --- copies, pickling and other libraries -----------------------------------------
    def __copy__(self):
        """A copy of a tracked array is a recorded copy; a scalar is immutable, so it is itself."""
        return FUNCTIONS[np.copy](self) if _holds_array(self) else self

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __reduce_ex__(self, protocol):
        raise TypeError(
            "Cannot pickle a value that is being differentiated: the copy would lose its gradient. "
            "Pickle pullback.stop_gradient(x) (its plain value) instead, or pickle outside the gradient call."
        )

    def __dask_tokenize__(self):
        raise foreign_error("dask.array.Array")

    @property
    def __class__(self):
        """What `isinstance` sees: a scalar answers as its plain value's type does (so `np.isscalar`,
        `isinstance(x, numbers.Number)` and `isinstance(x, float)` answer as without pullback)."""
        value = self._value
        return type(self) if isinstance(value, np.ndarray) else value.__class__

    def __float__(self):
        raise lost_gradient(
            "convert it to a Python float (float(x), the math module, or writing it into one element of a plain "
            "array such as np.zeros(n); start from np.zeros_like(x), which is traced, or use np.stack)"
        )

    def __int__(self):
        raise lost_gradient("convert it to a Python int")

    def __complex__(self):
        raise lost_gradient("convert it to a Python complex")

    def item(self, *args):
        raise lost_gradient("call .item() on it")

    def tolist(self):
        raise lost_gradient("call .tolist() on it")

    def __bool__(self):
        return bool(stop_gradient(self))

    def __format__(self, spec):
        return format(stop_gradient(self), spec)

    def __repr__(self):
        return f"{type(self).__name__}({self._value!r})"

    # --- array attributes ------------------------------------------------------------
    @property
    def shape(self):
        return np.shape(self._value)

    @property
    def ndim(self):
        return np.ndim(self._value)

    @property
    def size(self):
        return np.size(self._value)

    @property
    def dtype(self):
        return _dtype_of(self._value)

    @property
    def real(self):
        return self  # a real array is its own real part

    @property
    def imag(self):
        return np.zeros_like(stop_gradient(self))

    @property
    def T(self):
        return FUNCTIONS[np.transpose](self)

    @property
    def mT(self):
        return FUNCTIONS[np.swapaxes](self, -1, -2)

    def __len__(self):
        return len(self._value)

    def __iter__(self):
        for i in range(len(self._value)):
            yield self[i]

    # --- indexing and in-place writes ------------------------------------------------
    def __getitem__(self, index):
        return FUNCTIONS[_getitem](self, index)

    def view(self, dtype=None, type=None):
        """`x.view()`: the same values, sharing memory with `x` (a reinterpreting dtype is refused)."""
        if (dtype is not None and np.dtype(dtype) != self.dtype) or type is not None:
            raise TypeError(
                "x.view(dtype) reinterprets the bytes of a value being differentiated, which has no gradient; "
                "use x.astype(dtype) to convert the values."
            )
        return FUNCTIONS[_getitem](self, Ellipsis)

    def fill(self, value):
        """`x.fill(v)`, as the functional update `x[...] = v`."""
        self[...] = value

    def sort(self, axis=-1, kind=None, order=None):
        """`x.sort()` in place, as the functional update `x = np.sort(x)`."""
        _rebind(self, FUNCTIONS[np.sort](self, axis=axis, kind=kind, order=order))

    @property
    def nbytes(self):
        return np.asarray(stop_gradient(self)).nbytes

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def flags(self):
        """The flags of the plain value (read them; a traced value is never written in place)."""
        return np.asarray(stop_gradient(self)).flags

    def __setitem__(self, index, value):
        _rebind(self, FUNCTIONS[_index_update](self, index, value))

    # --- binary operators (see _install_operators) -----------------------------------
    def __matmul__(self, other):
        return FUNCTIONS[np.matmul](self, other)

    def __rmatmul__(self, other):
        return FUNCTIONS[np.matmul](other, self)

    def __imatmul__(self, other):
        return _in_place(self, FUNCTIONS[np.matmul](self, other))

    def __neg__(self):
        return apply((UFUNC_RULES[np.negative]), (self,))

    def __pos__(self):
        return self

    def __abs__(self):
        return apply(UFUNC_RULES[np.absolute], (self,))


class Tracked(Traced):
    """A value whose operations are recorded on a tape (reverse mode).

    User code never builds one: `gradient` and friends wrap the arguments' float leaves.
    """

    __slots__ = ("_id",)

    def __init__(self, value, tape, i):
        self._value = value
        self._tape = tape
        self._id = i


class Dual(Traced):
    """A value carrying a tangent alongside (forward mode); `_tape` is its `ForwardTag`."""

    __slots__ = ("_tangent",)

    def __init__(self, value, tangent, tag):
        self._value = value
        self._tangent = tangent
        self._tape = tag

    def __repr__(self):
        return f"Dual({self._value!r}, tangent={self._tangent!r})"


class ForwardTag:
    """The level of one `jvp` call: a Dual belongs to exactly one."""

    __slots__ = ("level", "closed")

    def __init__(self):
        self.level = next(_levels)
        self.closed = False

    def close(self):
        self.closed = True


def _install_operators():
    """`a + b` and friends go straight to the ufunc's rule, skipping NumPy's dispatch."""
    pairs = {
        "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
        "pow": np.power, "mod": np.remainder, "floordiv": np.floor_divide,
        "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "eq": np.equal, "ne": np.not_equal,
    }
    reflected = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}

    def forward(ufunc):
        def op(self, other):
            rule = UFUNC_RULES.get(ufunc)
            if rule is None:
                return ufunc(stop_gradient(self), stop_gradient(other))
            return apply2(rule, self, other)
        return op

    def backward(ufunc):
        def op(self, other):
            rule = UFUNC_RULES.get(ufunc)
            if rule is None:
                return ufunc(stop_gradient(other), stop_gradient(self))
            return apply2(rule, other, self)
        return op

    def inplace(ufunc):
        def op(self, other):
            return _in_place(self, forward(ufunc)(self, other))
        return op

    for name, ufunc in pairs.items():
        setattr(Traced, f"__{name}__", forward(ufunc))
        if name in reflected:
            continue
        setattr(Traced, f"__r{name}__", backward(ufunc))
        setattr(Traced, f"__i{name}__", inplace(ufunc))


_install_operators()


def _install_methods():
    """ndarray methods that forward to the matching NumPy function."""
    names = {
        "sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod,
        "var": np.var, "std": np.std, "cumsum": np.cumsum, "cumprod": np.cumprod,
        "swapaxes": np.swapaxes, "squeeze": np.squeeze,
        "ravel": np.ravel, "copy": np.copy, "clip": np.clip,
        "dot": np.dot, "trace": np.trace, "diagonal": np.diagonal, "repeat": np.repeat,
        "take": np.take, "argmax": np.argmax, "argmin": np.argmin, "argsort": np.argsort,
        "nonzero": np.nonzero, "round": np.round, 
        "all": np.all, "any": np.any, "ptp": np.ptp,
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

    def flatten(self, order="C"):
        return FUNCTIONS[np.copy](FUNCTIONS[np.ravel](self, order))  # a copy, unlike ravel

    def conj(self):
        return np.conjugate(self)

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        if not copy and np.dtype(dtype) == self.dtype:
            return self  # NumPy returns the array itself, so later writes are seen through both
        return FUNCTIONS[_astype](self, dtype)

    Traced.reshape, Traced.transpose, Traced.astype = reshape, transpose, astype
    Traced.flatten, Traced.conj, Traced.conjugate = flatten, conj, conj


def _method(fn):
    def method(self, *args, **kwargs):
        impl = FUNCTIONS.get(fn)
        if impl is None:
            raise missing_rule(fn)
        return impl(self, *args, **kwargs)
    method.__name__ = fn.__name__
    return method


_install_methods()


# --- stand-ins for operations NumPy has no public function for ----------------------
def _getitem(x, index):
    """`x[index]`, as a function the rule tables can key on."""
    return x[index]


def _index_update(x, index, value):
    """A copy of `x` with `x[index] = value`: the functional form of an in-place write."""
    y = x.copy()
    y[index] = value
    return y


def _astype(x, dtype):
    """`x.astype(dtype)` as a function."""
    return x.astype(dtype)


# --- recording ---------------------------------------------------------------------
def apply(rule, args, kwargs=_NO_KWARGS):
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
    if tape is None:
        return rule(*args, **kwargs)[0]
    if type(tape) is ForwardTag:
        return push_forward(tape, rule, args, kwargs)
    values = []
    ids = []
    for a in args:
        if type(a) is Tracked and a._tape is tape:
            values.append(a._value)
            ids.append(a._id)
        else:
            values.append(a)
            ids.append(-1)
    y, back = rule(*values, **kwargs)
    return record(tape, y, back, ids)


def apply_rule(rule, *args, **kwargs):
    """`apply` with the call's own arguments: what a registered NumPy function runs."""
    return apply(rule, args, kwargs)


def apply1(rule, x):
    """`apply` for one tracked input: the common case, kept short."""
    y, back = rule(x._value)
    tape = x._tape
    if type(y) is np.ndarray and y.dtype.kind == "f" and not tape.closed:  # `record`, inlined
        nodes = tape.nodes
        nodes.append(((y.shape, y.dtype), back, (x._id,)))
        return Tracked(y, tape, len(nodes) - 1)
    return record(tape, y, back, (x._id,))


def apply2(rule, a, b):
    """`apply` for two inputs, at least one of them traced; the common reverse-mode cases kept short."""
    kind_a, kind_b = type(a), type(b)
    if kind_a is Tracked and kind_b is not Dual:
        tape = a._tape
        if kind_b is Tracked and b._tape is tape:
            y, back = rule(a._value, b._value)
            ids = (a._id, b._id)
        elif kind_b is Tracked and b._tape.level > tape.level:
            tape = b._tape
            y, back = rule(a, b._value)
            ids = (-1, b._id)
        elif kind_b not in _PLAIN and kind_b is not Tracked and _foreign(b):
            return NotImplemented
        else:
            y, back = rule(a._value, b)
            ids = (a._id, -1)
    elif kind_b is Tracked and kind_a is not Dual:
        if kind_a not in _PLAIN and _foreign(a):
            return NotImplemented
        tape = b._tape
        y, back = rule(a, b._value)
        ids = (-1, b._id)
    else:
        return apply(rule, (a, b))
    if type(y) is np.ndarray and y.dtype.kind == "f" and not tape.closed:  # `record`, inlined
        nodes = tape.nodes
        nodes.append(((y.shape, y.dtype), back, ids))
        return Tracked(y, tape, len(nodes) - 1)
    return record(tape, y, back, ids)


_PLAIN = frozenset((float, int, bool, np.ndarray, np.float64, np.float32, np.int64))


def _foreign(x):
    """True for pullback's own differentiable containers, which take the operation over;
    raises for an operand that cannot be differentiated alongside a traced value."""
    check_operand(x)
    return hasattr(type(x), "__stop_gradient__")


def record(tape, y, back, ids):
    """Put `y` on the tape if it can carry a gradient; return what the user sees."""
    if type(y) is np.ndarray:
        kind = y.dtype.kind
        if kind == "f" and not tape.closed:  # Tape.push, inlined: this is the hot path
            nodes = tape.nodes
            nodes.append(((y.shape, y.dtype), back, ids))
            return Tracked(y, tape, len(nodes) - 1)
        if kind == "f":
            tape.push(y, back, ids)  # raises the closed-tape error
    elif isinstance(y, (Traced, float, np.floating)):
        if _dtype_of(y).kind == "f":
            return Tracked(y, tape, tape.push(y, back, ids))
        kind = _dtype_of(y).kind
    elif isinstance(y, tuple):
        return _record_many(tape, y, back, ids)
    else:
        kind = _dtype_of(y).kind
    if kind == "c":
        raise TypeError(
            "An operation on tracked values produced complex numbers; pullback differentiates "
            "real-valued code only. Split complex quantities into real and imaginary parts."
        )
    return y  # integers and booleans carry no gradient


def _record_many(tape, ys, back, ids):
    """Several outputs (e.g. `eigh`): one node for the tuple, one per float element."""
    group = tape.push(ys, back, ids)
    outs = []
    for j, y in enumerate(ys):
        outs.append(record(tape, y, _select(j, len(ys)), (group,)))
    if hasattr(ys, "_fields"):
        return type(ys)(*outs)
    return type(ys)(outs)


def _select(j, n):
    def back(g):
        parts = [None] * n
        parts[j] = g
        return (tuple(parts),)
    return back


def _dtype_of(x):
    dtype = getattr(x, "dtype", None)
    if dtype is not None:
        return dtype
    return np.result_type(x)


def stop_gradient(x):
    """The plain value inside `x`, at every level of nesting: no gradient flows through it.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda x: np.sum(x * pb.stop_gradient(x)), np.array([3.0]))
    (array([3.]),)
    """
    while type(x) is Tracked or type(x) is Dual:
        x = x._value
    if hasattr(type(x), "__stop_gradient__"):  # other differentiable containers, e.g. complex pairs
        return x.__stop_gradient__()
    return x


def strip_all(x):
    """`stop_gradient` through tuples, lists and dicts (for keyword arguments and masks)."""
    if type(x) is Tracked or type(x) is Dual:
        return stop_gradient(x)
    if type(x) in (tuple, list):
        return type(x)(strip_all(v) for v in x)
    if type(x) is dict:
        return {k: strip_all(v) for k, v in x.items()}
    return x


def mark_view(view, base):
    """Record that `view` shares memory with `base` (both traced), so in-place writes can be refused."""
    view._base = base
    try:
        base._views.append(weakref.ref(view))
    except AttributeError:
        base._views = [weakref.ref(view)]


def _has_live_views(x):
    views = getattr(x, "_views", None)
    return bool(views) and any(ref() is not None for ref in views)


def _holds_array(x):
    """Whether traced `x` stands for a (mutable) NumPy array rather than an immutable scalar."""
    while isinstance(x, Traced):
        x = x._value
    return isinstance(x, np.ndarray)


def _in_place(handle, new):
    """`handle op= value`. An array handle takes the new value, so every alias of it sees the
    change as in NumPy; a scalar is immutable, so only the name is rebound (to `new`)."""
    if not _holds_array(handle):
        return new
    _rebind(handle, new)
    return handle


def _rebind(handle, new):
    """Make `handle` (a traced value the user holds) refer to `new`: how in-place writes work."""
    if getattr(handle, "_base", None) is not None or _has_live_views(handle):
        raise ValueError(
            "In-place write to a traced array that shares memory with another one still in use "
            "(a view such as x[1:], x.T or x.reshape(...), or an array such a view was taken of). "
            "NumPy would write through to both, which pullback does not follow. "
            "Write into a copy (y = x.copy()) or build the result with np.where / np.concatenate."
        )
    if type(new) is not type(handle):
        raise TypeError(
            "In-place write would mix forward-mode and reverse-mode values in one array; "
            "assign to a new variable instead (y = x + v)."
        )
    if new.shape != handle.shape:
        raise ValueError(f"In-place operation would change the shape from {handle.shape} to {new.shape}")
    if new.dtype != handle.dtype:
        new = FUNCTIONS[_astype](new, handle.dtype)
    for name in type(handle).__slots__ + ("_value", "_tape"):
        setattr(handle, name, getattr(new, name))


def _ufunc_general(ufunc, method, inputs, kwargs):
    """Every ufunc call that is not a plain `ufunc(*tracked_inputs)`."""
    if ufunc in NONDIFF_UFUNCS:
        return getattr(ufunc, method)(*strip_all(inputs), **strip_all(kwargs))
    name = ufunc_name(ufunc)
    out = kwargs.get("out", 0)
    if out is None or (type(out) is tuple and all(o is None for o in out)):
        del kwargs["out"]  # NumPy's default, spelled out
    if kwargs.get("where", None) is True:
        del kwargs["where"]
    if "out" in kwargs:
        return _into_out(ufunc, method, inputs, kwargs, name)
    if "where" in kwargs:
        raise TypeError(f"{name}(..., where=...) is not supported on tracked values; use np.where(mask, {ufunc.__name__}(x), fallback).")
    if method == "__call__":
        dtype = kwargs.pop("dtype", None)
        if kwargs:
            raise TypeError(f"{name} got keyword arguments pullback does not support on tracked values: {sorted(kwargs)}")
        rule = UFUNC_RULES.get(ufunc)
        if rule is None:
            raise missing_rule(ufunc)
        y = apply(rule, inputs)
        return y if dtype is None else FUNCTIONS[_astype](y, dtype)
    if method == "reduce":
        reduction = _REDUCTIONS.get(ufunc)
        if reduction is not None:
            kwargs.setdefault("axis", 0)
            dtype = kwargs.pop("dtype", None)
            if kwargs.get("initial", np._NoValue) is np._NoValue:
                kwargs.pop("initial", None)
            y = FUNCTIONS[reduction](*inputs, **kwargs)
            return y if dtype is None else FUNCTIONS[_astype](y, dtype)
    if method == "outer" and ufunc in UFUNC_RULES:
        a, b = inputs
        return ufunc(FUNCTIONS[np.reshape](a, np.shape(a) + (1,) * np.ndim(b)), b)
    if method == "accumulate":
        scan = _SCANS.get(ufunc)
        if scan is not None:
            kwargs.setdefault("axis", 0)
            return FUNCTIONS[scan](*inputs, **kwargs)
    raise TypeError(
        f"{name}.{method} is not supported on tracked values"
        + (": it writes in place; build the result with np.where or indexing instead." if method == "at" else ".")
    )


def _into_out(ufunc, method, inputs, kwargs, name):
    """`ufunc(..., out=y)` with `y` traced: the functional update `y[...] = ufunc(...)`, seen through every alias."""
    out = kwargs.pop("out")
    out = out if isinstance(out, tuple) else (out,)
    if len(out) != 1 or not isinstance(out[0], Traced):
        raise TypeError(
            f"{name}(..., out=...) would write a result that is being differentiated into a plain array, "
            "losing the gradient (this is also what `a += x` does when `a` is a plain array). "
            "Assign the result instead (a = a + x), or start from a traced array (np.zeros_like(x))."
        )
    result = ufunc(*inputs, **kwargs) if method == "__call__" else getattr(ufunc, method)(*inputs, **kwargs)
    target = out[0]
    if np.shape(result) != target.shape:
        raise ValueError(f"{name}(..., out=...): the result has shape {np.shape(result)}, but out has shape {target.shape}")
    return _in_place(target, result if isinstance(result, Traced) else FUNCTIONS[_index_update](target, Ellipsis, result))


_REDUCTIONS = {np.add: np.sum, np.multiply: np.prod, np.maximum: np.max, np.minimum: np.min}
_SCANS = {np.add: np.cumsum, np.multiply: np.cumprod}


def ufunc_name(ufunc):
    """`numpy.sin`, or `scipy.special.j0` for a SciPy ufunc: where the user found it."""
    import sys

    for module_name in ("numpy", "scipy.special"):
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, ufunc.__name__, None) is ufunc:
            return f"{module_name}.{ufunc.__name__}"
    return f"numpy.{ufunc.__name__}" if getattr(np, ufunc.__name__, None) is ufunc else f"the ufunc {ufunc.__name__}"


def missing_rule(fn):
    name = ufunc_name(fn) if isinstance(fn, np.ufunc) else qualified_name(fn)
    return NotImplementedError(
        f"pullback has no derivative rule for {name}. Register one with "
        f"@pullback.rrule({name}) on a function returning (y, back), or call it on "
        "pullback.stop_gradient(x) if no gradient should flow through it."
    )


def conversion_error(x):
    """The error for turning a traced value into a plain array: says who asked, and what to do instead."""
    if x._tape.closed:
        return RuntimeError(
            "This value was being differentiated by a gradient (or jvp) call that has already finished, "
            "so it cannot become a plain array. Values escaping `f` through globals or closures carry no "
            "gradient: keep pullback.stop_gradient(x) inside `f` if you need the plain value afterwards."
        )
    library = _library_caller()
    if library == "numpy.ma":
        return TypeError(subclass_error(np.ma.masked_array([0.0])).args[0])
    if library is not None:
        return TypeError(library_advice(library))
    return TypeError(
        "Cannot convert a value that is being differentiated into a plain NumPy array (np.asarray, np.array, "
        "np.r_, a Python list of traced values given to NumPy, or writing it into a plain array such as "
        "np.zeros(n)): the gradient would be lost. Build arrays from traced values with np.stack([...]) or "
        "np.concatenate([...]); fill one element by element starting from np.zeros_like(x), which is traced; "
        "or compute the result functionally (np.where, indexing). pullback.stop_gradient(x) gives a plain "
        "value that carries no gradient, if that is what you want."
    )


_NOT_LIBRARIES = ("numpy", "pullback", "builtins", "copy", "functools", "contextlib")


def _library_caller():
    """The public name of the installed library function (SciPy, scikit-learn, ...) that converted a traced
    value, found on the call stack just below the user's code; None when the user's code did it."""
    import sys

    frame = sys._getframe(2)
    found = None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("numpy.ma"):
            return "numpy.ma"
        top = module.partition(".")[0]
        if top not in _NOT_LIBRARIES:
            path = frame.f_code.co_filename
            if top == "scipy" or "site-packages" in path or "dist-packages" in path:
                found = frame
            else:
                break
        frame = frame.f_back
    return None if found is None else _public_name(found)


def _public_name(frame):
    """`scipy.special.logsumexp` for a frame in `scipy.special._logsumexp`; `scipy.stats.norm.logpdf`
    for a method of SciPy's `norm_gen` object."""
    parts = []
    for part in frame.f_globals.get("__name__", "").split("."):
        if part.startswith("_"):
            break
        parts.append(part)
    name = frame.f_code.co_name
    owner = frame.f_locals.get("self")
    if owner is not None and not isinstance(owner, type):
        owner_name = getattr(owner, "name", None) or type(owner).__name__.removesuffix("_gen")
        name = f"{owner_name}.{name}"
    return ".".join(parts + [name])


def library_advice(name):
    """What to tell a user whose library function `name` converted a traced value."""
    stand_in = _stand_in(name)
    head = (f"{name} converts its input to a plain NumPy array, so pullback cannot differentiate through it "
            "(the gradient would be lost). ")
    if stand_in is not None:
        return head + f"Use {stand_in} instead: a differentiable stand-in with the same signature."
    return head + (
        f"pullback has no stand-in for it yet: make it opaque with `g = pullback.primitive({name})`, call g, "
        "and give g a derivative with @pullback.rrule(g) (see the README, \"Your own rules\"). "
        "Or write the computation with NumPy functions in your own code."
    )


def _stand_in(name):
    """`pullback.scipy.special.logsumexp` when pullback has a stand-in for `scipy.special.logsumexp`."""
    import importlib

    parts = name.split(".")
    if parts[0] != "scipy" or len(parts) < 3:
        return None
    try:
        target = importlib.import_module("pullback." + ".".join(parts[:2]))
    except ImportError:
        return None
    for part in parts[2:]:
        target = getattr(target, part, None)
        if target is None:
            return None
    return "pullback." + name


def foreign_error(type_name):
    return TypeError(
        f"An array of type {type_name} met a value that pullback is differentiating. pullback differentiates "
        "NumPy arrays only, and would silently lose or corrupt the gradient through this array type. Convert it to a NumPy "
        "array first (np.asarray(a); for a Dask array, a.compute()), or keep it out of the differentiated code."
    )


def subclass_error(x):
    name = f"{type(x).__module__}.{type(x).__qualname__}"
    return TypeError(
        f"An array of type {name} met a value that pullback is differentiating. It is a NumPy array subclass whose "
        "operations differ from ndarray's (np.matrix's * is a matrix product; a masked array skips masked "
        "values), which pullback does not follow. Use plain arrays: np.asarray(m) and x @ y for np.matrix; "
        "for a masked array, select the valid values (x[~mask]) or use np.where(mask, 0, x)."
    )


def _flat(args):
    """The arguments of a NumPy call, with lists and tuples opened one level (np.concatenate([a, b]))."""
    for a in args:
        if type(a) in (list, tuple):
            yield from a
        else:
            yield a


def check_operand(x):
    """Refuse an operand that pullback cannot differentiate alongside a traced value (never a silent result)."""
    if isinstance(x, np.ndarray):
        if type(x) is not np.ndarray:
            raise subclass_error(x)
        return
    cls = type(x)
    speaks_arrays = hasattr(cls, "__array_ufunc__") or hasattr(cls, "__array_function__") or hasattr(cls, "__array_namespace__")
    if speaks_arrays and not isinstance(x, (np.generic, Traced)):
        if hasattr(cls, "__stop_gradient__"):  # pullback's own differentiable containers
            return
        raise foreign_error(f"{cls.__module__}.{cls.__qualname__}")


def lost_gradient(action):
    return TypeError(
        f"Cannot {action}: the value is being differentiated, and the gradient would be lost. "
        "Keep using NumPy operations on it, or take pullback.stop_gradient(x) if you want a plain value "
        "that carries no gradient."
    )


from ._forward import push_forward  # noqa: E402  (forward mode builds on the classes above)
