"""`StrictArray`: a CPU stand-in for a GPU array type (CuPy), for testing array-type agnosticism.

It computes with NumPy underneath but behaves as a separate array library does: NumPy functions
and ufuncs dispatch to it (NEP 18), reductions give 0-d arrays of its own type, and it refuses
every implicit conversion to NumPy (`np.asarray(s)` raises `TypeError`, as CuPy's arrays do) and
every mix with NumPy arrays (`s * np.ones(2)` raises). Explicit transfers are `strict(a)` and
`s.get()`. Python numbers and NumPy scalars mix with it freely, as with CuPy.

>>> s = strict([1.0, 2.0])
>>> np.sum(np.sin(s) * 2.0)
StrictArray(3.501...)
"""

import numbers

import numpy as np

# NumPy functions that build a StrictArray from a NumPy array explicitly (like cupy.asarray).
_TRANSFERS = {np.asarray, np.array, np.asanyarray, np.ascontiguousarray}


class StrictArray:
    """An ndarray wrapper that NumPy dispatches to and that never turns into a NumPy array implicitly."""

    __slots__ = ("_data",)

    def __init__(self, data):
        if not isinstance(data, np.ndarray) or type(data) is not np.ndarray:
            data = np.asarray(data)
        self._data = data

    # --- explicit transfers, and the refusal of implicit ones ---------------------------------
    def get(self):
        """A NumPy copy (the explicit transfer, as `cupy.ndarray.get`)."""
        return self._data.copy()

    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a NumPy "
                        "array explicitly.")

    # --- NumPy protocols -----------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        try:
            inputs = tuple(_unwrap(x) for x in inputs)
            kwargs = {k: _unwrap(v) for k, v in kwargs.items()}  # out=(StrictArray,) writes into its data
        except _Defer:
            return NotImplemented
        out = getattr(ufunc, method)(*inputs, **kwargs)
        return _wrap(out)

    def __array_function__(self, func, types, args, kwargs):
        if not all(issubclass(t, (StrictArray, np.ndarray)) for t in types):
            return NotImplemented
        try:
            if func in _TRANSFERS:
                args, kwargs = _unwrap(args, transfer=True), _unwrap(kwargs, transfer=True)
            else:
                args, kwargs = _unwrap(args), _unwrap(kwargs)
        except _Defer:
            return NotImplemented
        return _wrap(func(*args, **kwargs))

    # --- attributes ----------------------------------------------------------------------------
    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype)
    ndim = property(lambda self: self._data.ndim)
    size = property(lambda self: self._data.size)
    nbytes = property(lambda self: self._data.nbytes)
    T = property(lambda self: StrictArray(self._data.T))
    mT = property(lambda self: StrictArray(np.swapaxes(self._data, -1, -2)))
    real = property(lambda self: StrictArray(self._data.real))
    imag = property(lambda self: StrictArray(self._data.imag))

    def __len__(self):
        return len(self._data)

    def __iter__(self):
        for i in range(len(self._data)):
            yield self[i]

    def __repr__(self):
        return f"StrictArray({np.array2string(self._data, separator=', ')})"

    # scalar conversions are explicit synchronisations in CuPy, and allowed
    def __float__(self):
        return float(self._data)

    def __int__(self):
        return int(self._data)

    def __index__(self):
        return self._data.__index__()

    def __bool__(self):
        return bool(self._data)

    def item(self, *args):
        return self._data.item(*args)

    def tolist(self):
        return self._data.tolist()

    # --- indexing ------------------------------------------------------------------------------
    def __getitem__(self, index):
        return _wrap(self._data[_unwrap(index, transfer=True)])

    def __setitem__(self, index, value):
        if isinstance(value, np.ndarray):
            raise TypeError(f"Unsupported type {type(value)}: assign a StrictArray, a scalar, or strict(values).")
        self._data[_unwrap(index, transfer=True)] = _unwrap(value)

    # --- methods -------------------------------------------------------------------------------
    def astype(self, dtype, copy=True, **kwargs):
        return StrictArray(self._data.astype(dtype, copy=copy, **kwargs))

    def copy(self, order="C"):
        return StrictArray(self._data.copy(order))

    def reshape(self, *shape, **kwargs):
        return StrictArray(self._data.reshape(*shape, **kwargs))

    def transpose(self, *axes):
        return StrictArray(self._data.transpose(*axes))

    def view(self, *args):
        return StrictArray(self._data.view(*args))

    def fill(self, value):
        self._data.fill(_unwrap(value))

    def __getattr__(self, name):
        method = getattr(np.ndarray, name, None)
        if name.startswith("_") or not callable(method):
            raise AttributeError(f"'StrictArray' object has no attribute {name!r}")

        def call(*args, **kwargs):
            return _wrap(method(self._data, *_unwrap(args), **_unwrap(kwargs)))

        return call

    __hash__ = None


class _Defer(Exception):
    """An operand of a type StrictArray does not know: let that type's protocol handle the call."""


def _unwrap(x, transfer=False):
    """The NumPy value inside `x` (through tuples, lists and dicts); NumPy arrays are refused unless `transfer`."""
    kind = type(x)
    if kind is StrictArray:
        return x._data
    if kind is tuple or kind is list:
        return kind(_unwrap(v, transfer) for v in x)
    if kind is dict:
        return {k: _unwrap(v, transfer) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        if transfer or x.dtype.kind in "biu" or x.dtype == object:
            return x
        raise TypeError(f"Unsupported type {type(x)}: a StrictArray does not mix with NumPy arrays; "
                        "transfer them explicitly with strict(a).")
    if x is None or isinstance(x, (numbers.Number, np.generic, str, slice, type(Ellipsis), np.dtype, type)):
        return x
    if callable(x) or isinstance(x, (range, bytes)):
        return x
    if hasattr(type(x), "__array_function__") or hasattr(type(x), "__array_ufunc__"):
        raise _Defer
    return x


def _wrap(y):
    """NumPy results as StrictArrays (0-d ones for NumPy scalars, as CuPy's reductions give)."""
    if type(y) is np.ndarray:
        return StrictArray(y)
    if isinstance(y, np.generic) and y.dtype.kind in "fciub":
        return StrictArray(np.asarray(y))
    if type(y) is tuple or type(y) is list:
        return type(y)(_wrap(v) for v in y)
    if isinstance(y, tuple) and hasattr(y, "_fields"):
        return type(y)(*(_wrap(v) for v in y))
    return y


def strict(a, dtype=None):
    """`a` transferred to a StrictArray (a copy)."""
    return StrictArray(np.array(a.get() if type(a) is StrictArray else a, dtype=dtype))


def _install_operators():
    pairs = {
        "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide, "pow": np.power,
        "mod": np.remainder, "floordiv": np.floor_divide, "matmul": np.matmul,
        "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
        "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
    }
    reflected = {"lt", "le", "gt", "ge", "eq", "ne"}

    def known(other):
        return type(other) is StrictArray or isinstance(other, (numbers.Number, np.generic, np.ndarray))

    def forward(ufunc):
        def op(self, other):
            return ufunc(self, other) if known(other) else NotImplemented
        return op

    def backward(ufunc):
        def op(self, other):
            return ufunc(other, self) if known(other) else NotImplemented
        return op

    def inplace(ufunc):
        def op(self, other):
            if not known(other):
                return NotImplemented
            ufunc(self, other, out=(self,))
            return self
        return op

    for name, ufunc in pairs.items():
        setattr(StrictArray, f"__{name}__", forward(ufunc))
        if name in reflected:
            continue
        setattr(StrictArray, f"__r{name}__", backward(ufunc))
        setattr(StrictArray, f"__i{name}__", inplace(ufunc))
    StrictArray.__neg__ = lambda self: np.negative(self)
    StrictArray.__pos__ = lambda self: self
    StrictArray.__abs__ = lambda self: np.absolute(self)
    StrictArray.__invert__ = lambda self: np.invert(self)


_install_operators()
