"""Fused kernels for `pb.jit` replays of small arrays: one compiled loop for a run of ufuncs.

On small arrays a NumPy ufunc call costs far more than its arithmetic (about 0.4 µs for 10
elements), so a gradient of a long chain of elementwise operations is mostly call overhead.
A replay that a signature has used often (see `Program` in `pullback._jit_replay`) is compiled
again in a background thread, with each run of consecutive elementwise float ufunc calls on
small arrays of one shape and dtype (a segment) turned into one numba function, which computes
every call of the segment in turn into its own row of one arena array per dtype and size (a
slab), so that a kernel call passes few arguments and no call goes through NumPy's dispatch.
The replay keeps running unfused until the kernels are ready.

numba is optional (`pip install "pullback[jit]"`); without it replays stay unfused. A fused
kernel computes with the C library's functions, not NumPy's vectorised ones, so its results can
differ from NumPy's in the last bits (float rounding), and it does not report floating-point
errors: a replay called under a non-default `np.errstate` runs unfused.

Measured on 2 cores, float32, 10 elements: the gradient of the 100-operation chain takes about
0.2 µs per operation fused against 1.45 µs unfused; by 1,000 elements the C library's scalar
`sin` and `tanh` cost more than NumPy's calls (so only arrays up to `MAX_SIZE` elements fuse).

>>> import numpy as np
>>> SCALAR_SOURCE[np.multiply].format("a", "b"), SCALAR_SOURCE[np.tanh].format("a")
('(a * b)', 'np.tanh(a)')
"""

import functools
import importlib.util

import numpy as np

from ._jit_trace import Ref

# elements per array: above this NumPy's vectorised kernels beat a scalar loop (measured above)
MAX_SIZE = 64
# a segment shorter than this saves too few calls to pay for a kernel's own call
MIN_LENGTH = 3
# a trace is kept (for its fused version) only when its values take at most this many bytes
MAX_TRACE_BYTES = 1 << 20

# each fusible ufunc as a scalar expression of its operands, in numba's dialect
SCALAR_SOURCE = {
    np.add: "({0} + {1})",
    np.subtract: "({0} - {1})",
    np.multiply: "({0} * {1})",
    np.true_divide: "({0} / {1})",
    np.negative: "(-{0})",
    np.positive: "(+{0})",
    np.square: "({0} * {0})",
    np.absolute: "abs({0})",
    np.power: "({0} ** {1})",
    **{ufunc: f"np.{ufunc.__name__}({{0}})" for ufunc in (
        np.sin, np.cos, np.tan, np.arcsin, np.arccos, np.arctan, np.sinh, np.cosh, np.tanh,
        np.arcsinh, np.arccosh, np.arctanh, np.exp, np.exp2, np.expm1, np.log, np.log2,
        np.log10, np.log1p, np.sqrt)},
}


@functools.cache
def available():
    """Whether numba is installed (found without importing it: importing costs a fifth of a second)."""
    return importlib.util.find_spec("numba") is not None


def worth_keeping(trace):
    """Whether a trace is small enough to keep until its replay is fused."""
    return sum(v.nbytes for v in trace.values if type(v) is np.ndarray) <= MAX_TRACE_BYTES


def fusible(node, trace):
    """Whether `node` can be part of a fused kernel: a listed ufunc on a small float array whose
    operands are arrays of its shape and dtype or numbers (cast to the dtype, as NumPy does)."""
    if node.fn not in SCALAR_SOURCE or node.kwargs or isinstance(node.outputs, tuple) or len(node.args) != node.fn.nin:
        return False
    result = trace.values[node.outputs]
    if not (type(result) is np.ndarray and result.dtype in (np.float32, np.float64) and 0 < result.size <= MAX_SIZE):
        return False
    kinds = [_operand_kind(arg, trace, result) for arg in node.args]
    if node.fn is np.power and kinds[1] != "array":
        return False  # NumPy computes x ** 0.5, x ** 2, x ** -1 as sqrt, square, reciprocal (sqrt(-inf) is nan)
    return None not in kinds


def _operand_kind(arg, trace, result):
    """'array' (a value of the trace with the result's shape and dtype), 'number' (a Python number,
    or a NumPy scalar of the result's dtype), or None (a constant array among them: its call stays
    a NumPy call)."""
    value = trace.values[arg.slot] if isinstance(arg, Ref) else arg
    if type(value) is np.ndarray:
        fits = isinstance(arg, Ref) and value.shape == result.shape and value.dtype == result.dtype
        return "array" if fits else None
    if type(value) is float or (type(value) is int and abs(value) <= 2**53) \
            or (isinstance(value, np.floating) and value.dtype == result.dtype):
        return "number"
    return None


class Slabs:
    """The arena arrays fused kernels keep their stored results in: one 2-D array per dtype and
    size, a row per result (so a kernel gets one array however many results it reads or stores)."""

    def __init__(self):
        self.rows = {}  # (dtype, size) -> {slot: row}

    def name(self, key):
        return f"slab{list(self.rows).index(key)}"

    def specs(self):
        """(names, (shape, dtype) of each slab) for the program's arena."""
        return ([self.name(key) for key in self.rows],
                [((len(rows), size), dtype) for (dtype, size), rows in self.rows.items()])


class Kernel:
    """One segment as a numba function `kernel(slab, inputs..., n)`: each call of the segment in
    turn, as a loop over the elements writing its own row of the slab (a loop per call, not a
    call per element: the elements' computations then overlap in the processor). It reads
    `inputs` (arrays, flattened, and numbers, cast to its dtype: see `arguments`) from outside
    the slab and earlier kernels' rows; `rows` maps each result to its row."""

    def __init__(self, members, trace, slabs):
        result = trace.values[members[0][1].outputs]
        self.shape, self.dtype, self.size = result.shape, result.dtype, result.size
        self.key = (self.dtype, self.size)
        rows = slabs.rows.setdefault(self.key, {})
        self.slab = slabs.name(self.key)
        produced = {node.outputs for _, node in members}
        self.inputs = list(dict.fromkeys(slot for _, node in members for slot in node.slots_read()
                                         if slot not in produced and slot not in rows))
        dtype = self.dtype.name
        lines = [f"def kernel(slab, {''.join(f'i{slot}, ' for slot in self.inputs)}n):"]
        operand = {slot: f"i{slot}[i]" if type(trace.values[slot]) is np.ndarray else f"i{slot}"
                   for slot in self.inputs}
        for _, node in members:
            operands = [operand.get(arg.slot, f"slab[{rows.get(arg.slot)}, i]") if isinstance(arg, Ref)
                        else _literal(arg, dtype) for arg in node.args]
            rows[node.outputs] = len(rows)
            lines += ["    for i in range(n):",
                      f"        slab[{rows[node.outputs]}, i] = {SCALAR_SOURCE[node.fn].format(*operands)}  # {node.name}"]
        self.rows = {node.outputs: rows[node.outputs] for _, node in members}
        self.source = "\n".join(lines)
        self.function = None

    def arguments(self, trace):
        """The source of a call's arguments after the slab, reading slot `k` as `sk`: each array
        flattened, each number cast to the kernel's dtype (named by its name) as NumPy casts a
        weakly typed scalar, so a Python int of any size converts, or overflows, as in NumPy."""
        flat = "" if len(self.shape) == 1 else ".reshape(-1)"
        return [f"s{slot}{flat}" if type(trace.values[slot]) is np.ndarray else f"{self.dtype.name}(s{slot})"
                for slot in self.inputs]

    def compile(self, trace):
        """The numba function, compiled now, once: for any 1-D array inputs of the trace's dtypes
        (strided, broadcast or read-only alike, as a replay may pass) and numbers of its dtype."""
        import numba
        from numba import types

        namespace = {"np": np, self.dtype.name: self.dtype.type}
        exec(compile(self.source, "<pb.jit fused kernel>", "exec"), namespace)
        number = numba.from_dtype(self.dtype)
        inputs = [types.Array(numba.from_dtype(value.dtype), 1, "A", readonly=True) if type(value) is np.ndarray
                  else number for value in (trace.values[slot] for slot in self.inputs)]
        signature = (types.Array(number, 2, "C"), *inputs, types.int64)
        self.function = numba.njit(signature, nogil=True, error_model="numpy")(namespace["kernel"])
        return self.function


def _literal(value, dtype):
    """A number as a scalar of the kernel's dtype (a bare literal would be float64 in numba)."""
    value = float(value)
    text = repr(value) if np.isfinite(value) else "np.nan" if value != value else "np.inf" if value > 0 else "-np.inf"
    return f"{dtype}({text})"
