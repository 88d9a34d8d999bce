"""Fused runs in `pb.jit` segments: a block's consecutive +, -, *, / calls as one compiled loop.

A segment's part (see `pullback._jit_parallel`) runs each NumPy call over a block of rows in a
pass of its own. Products and sums cost far less than the pass, so a run of them (the backward
products of a chain, `g * cos(x) * -sin(y) * (1 - t * t)`) costs mostly its passes. With numba
installed, a second version of the part computes each such run as one loop over the block, which
reads each input once and writes only the results read after the run. A call that is not fused
(`sin`, `tanh`) and neither reads what the run writes nor writes what it reads or writes runs
ahead of the run, so runs grow across such calls (`MAX_INPUTS` arrays at most).

The loop does the same IEEE operations as NumPy's calls, in the same order, in the dtype of
the arrays, so its results are the same bits. It reports no floating-point errors: it checks
that every value it computed is finite, and for a block where one is not (an overflow, a NaN,
a division by zero, or an input that was not finite), the NumPy calls of the run compute the block
again from its inputs, which the loop leaves as they were (it writes the results a later call
reads into arrays of their own), and NumPy warns or raises as it would. A part runs its fused
version under an `np.errstate` that ignores underflow (NumPy's default; the loop cannot see one),
once the loops are compiled, in a background thread, as `pullback._jit_fuse` compiles its kernels.

>>> import numpy as np
>>> SOURCE[np.multiply].format("a", "b")
'(a * b)'
"""

import threading

import numpy as np

from ._jit_fuse import SCALAR_SOURCE

# the fusible ufuncs as scalar expressions, each one IEEE operation (or none) on one dtype
SOURCE = {fn: SCALAR_SOURCE[fn] for fn in (np.add, np.subtract, np.multiply, np.true_divide, np.negative, np.positive,
                                           np.square, np.absolute)}
# arrays a loop reads at most. Measured on 262,144 float32 elements, a chain's backward step (two
# products, 1 - t * t and a product) took 0.046 ms in a loop reading 7 arrays against 0.124 ms as
# NumPy's calls; 0.10 against 0.17 ms reading 19 arrays; 0.25 against 0.22 ms reading 61
MAX_INPUTS = 8
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class Call:
    """One call of a part: `f{index}(reads..., out)`. `reads` are (slot or None, name) pairs;
    `operands`, for a fusible call, the loop's view of each read: ('array', None), ('number', its
    literal) or ('scalar', the source of a number read at each call); None for a call that is not
    fused. `memory` maps a name to what its memory is (two names of one buffer: the same key).
    `out_is_whole` marks a result written into a whole array of the segment (read after it), not
    into a scratch array."""

    def __init__(self, index, fn, reads, out_slot, out_name, positional, position, operands=None, dtype=None,
                 out_is_whole=False, memory=None):
        self.index, self.fn, self.reads = index, fn, reads
        self.out_slot, self.out_name, self.positional = out_slot, out_name, positional
        self.position = position  # the call's place in the segment: the order its warnings come in
        self.operands, self.dtype, self.out_is_whole = operands, dtype, out_is_whole
        self.memory = memory or {}
        self.read_memory = frozenset().union(*(self.memory_of(name) for _, name in reads))
        self.out_memory = self.memory_of(out_name)

    def memory_of(self, name):
        """The memory `name` is, as a set of keys: its planned buffers, or the name itself."""
        return self.memory.get(name) or frozenset({name})

    @property
    def fusible(self):
        return self.operands is not None

    def line(self, names):
        """The NumPy call's source, reading each slot under `names` (a slot -> name override)."""
        reads = [names.get(slot, name) for slot, name in self.reads]
        out = names.get(self.out_slot, self.out_name)
        return f"f{self.index}({', '.join(reads)}, {out if self.positional else 'out=' + out})"


def operands_of(fn, values, traced, result, blocked, names):
    """The loop's view of a call's operands (see `Call`), or None if it cannot be fused: a listed ufunc
    on float32 or float64 whose operands are arrays of the result's shape and dtype read as blocks of
    rows (`blocked[k]`, under `names[k]` in the part) or numbers cast to the dtype as NumPy casts
    them. A number computed by the function or passed to it (`traced[k]`) is read at each call; one
    written in the code is a literal. An array whose elements all share one memory place (a gradient's
    seed of ones, broadcast) is read as a number, at each call.

    >>> x = np.ones(4, np.float32)
    >>> seed = np.broadcast_to(np.ones((), np.float32), 4)
    >>> operands_of(np.multiply, [x, seed], [True, False], x, [True, True], ["x0", "x1"])
    [('array', None), ('scalar', 'x1.item(0)')]
    >>> operands_of(np.add, [x, 0.5], [True, False], x, [True, False], ["x0", "c1"])
    [('array', None), ('number', 'float32(0.5)')]
    >>> operands_of(np.add, [x, 0.5], [True, True], x, [True, False], ["x0", "s1"])
    [('array', None), ('scalar', 's1')]
    """
    if fn not in SOURCE or result.dtype not in _DTYPES or len(values) != fn.nin:
        return None
    operands = []
    for value, is_traced, block, name in zip(values, traced, blocked, names):
        if type(value) is np.ndarray:
            if not (block and value.shape == result.shape and value.dtype == result.dtype):
                return None
            # (a traced value's trace-time stand-in may be a broadcast placeholder: only constants are looked at)
            one_place = not is_traced and value.size > 0 and not any(value.strides)
            operands.append(("scalar", f"{name}.item(0)") if one_place else ("array", None))
        elif type(value) is float or (isinstance(value, np.floating) and value.dtype == result.dtype):
            operands.append(("scalar", name) if is_traced else ("number", _literal(value, result.dtype)))
        elif type(value) is int and abs(value) <= 2 ** 24 and not is_traced:  # exact in float32 and float64
            operands.append(("number", _literal(value, result.dtype)))
        else:
            return None
    return operands


def _literal(value, dtype):
    value = float(value)
    text = repr(value) if np.isfinite(value) else "inf" if value > 0 else "-inf" if value < 0 else "nan"
    return f"{dtype.name}({text})"


def schedule(calls):
    """The calls in the order to run them, each run of at least two fusible calls as a list. A call
    that is not fused moves ahead of the run being gathered when it reads no name the run writes and
    writes no name the run reads or writes (names are memory: scratch arrays and blocks of rows)."""
    order, run = [], []

    def close():
        if len(run) >= 2:
            order.append(list(run))
        else:
            order.extend(run)
        run.clear()

    for call in calls:
        if call.fusible:
            if run and not _joins(run, call):
                close()
            run.append(call)
            continue
        if run and _conflicts(call, run):
            close()
        order.append(call)
    close()
    return order


def _inputs(run, names=None):
    """The names of the arrays a run reads that it does not compute, in order (a slot under its name in
    `names`, where it has one)."""
    names = names or {}
    made = {call.out_slot for call in run}
    return list(dict.fromkeys(names.get(slot, name) for call in run
                              for (slot, name), (kind, _) in zip(call.reads, call.operands)
                              if kind == "array" and (slot is None or slot not in made)))


def _joins(run, call):
    grown = run + [call]
    made = {c.out_slot for c in grown}
    read = frozenset().union(*(c.memory_of(name) for c in grown for (slot, name), (kind, _) in zip(c.reads, c.operands)
                               if kind == "array" and (slot is None or slot not in made)))
    whole_outputs = frozenset().union(*(c.out_memory for c in grown if c.out_is_whole))
    return call.dtype == run[0].dtype and len(_inputs(grown)) <= MAX_INPUTS and not whole_outputs & read


def _conflicts(call, run):
    written = frozenset().union(*(c.out_memory for c in run))
    read = frozenset().union(*(c.read_memory for c in run))
    return bool(written & call.read_memory or call.out_memory & (written | read))


class Loop:
    """One run as a numba function `loop(inputs..., outputs..., numbers...) -> all finite`, compiled once per
    source and dtype (identical runs of a chain share it); `function` is None until compiled."""

    _compiled = {}  # (source, dtype) -> the numba function
    _lock = threading.Lock()

    def __init__(self, run, stored, names):
        self.dtype = run[0].dtype
        self.inputs = _inputs(run, names)  # the arrays it reads, by their names in the part
        self.stored = stored  # the slots it writes out, in order
        # the numbers it reads at each call, by their source in the part
        self.scalars = list(dict.fromkeys(value for call in run for kind, value in call.operands if kind == "scalar"))
        local = {}  # slot -> the loop's name for its value
        lines = ["    ok = True", "    for k in range(o0.shape[0]):"]
        lines += [f"        v{j} = i{j}[k]" for j in range(len(self.inputs))]
        position = {name: j for j, name in enumerate(self.inputs)}
        scalar = {source: f"p{j}" for j, source in enumerate(self.scalars)}
        for n, call in enumerate(run):
            operands = [local[slot] if kind == "array" and slot in local
                        else f"v{position[names.get(slot, name)]}" if kind == "array"
                        else scalar[value] if kind == "scalar" else value
                        for (slot, name), (kind, value) in zip(call.reads, call.operands)]
            local[call.out_slot] = f"r{n}"
            lines.append(f"        r{n} = {SOURCE[call.fn].format(*operands)}")
        lines += [f"        o{m}[k] = {local[slot]}" for m, slot in enumerate(stored)]
        checks = " & ".join(f"(abs(r{n}) <= most)" for n in range(len(run)))
        lines += [f"        ok = ok & {checks}", "    return ok"]
        parameters = [f"i{j}" for j in range(len(self.inputs))] + [f"o{m}" for m in range(len(stored))]
        parameters += [f"p{j}" for j in range(len(self.scalars))]
        self.source = "\n".join([f"def loop({', '.join(parameters)}):"] + lines)
        self.function = Loop._compiled.get((self.source, self.dtype))

    def compile(self):
        """Compile the loop now (for contiguous 1-D arrays of its dtype), unless done already."""
        key = (self.source, self.dtype)
        with Loop._lock:
            if key not in Loop._compiled:
                import numba
                from numba import types

                namespace = {self.dtype.name: self.dtype.type, "inf": np.inf, "nan": np.nan,
                             "most": self.dtype.type(np.finfo(self.dtype).max)}
                exec(compile(self.source, "<pb.jit fused loop>", "exec"), namespace)
                number = numba.from_dtype(self.dtype)
                inputs = [types.Array(number, 1, "C", readonly=True)] * len(self.inputs)
                outputs = [types.Array(number, 1, "C")] * len(self.stored)
                signature = types.boolean(*inputs, *outputs, *[number] * len(self.scalars))
                Loop._compiled[key] = numba.njit(signature, nogil=True, error_model="numpy")(namespace["loop"])
            self.function = Loop._compiled[key]


class FusedPart:
    """A part function's fused version (`part`) and the loops it calls; `ready()` once they are compiled."""

    def __init__(self, loops):
        self.loops, self.part = loops, None

    def ready(self):
        return all(loop.function is not None for loop in self.loops)

    def compile(self):
        for loop in self.loops:
            loop.compile()


def flat_input(a):
    """A block as the contiguous 1-D array a loop reads (a copy where it is strided)."""
    return np.ascontiguousarray(a).reshape(-1)


def flat_output(a):
    """A block a loop writes, as a 1-D view of the same memory."""
    if not a.flags.c_contiguous:  # (a copy would take the loop's results away from the block)
        raise AssertionError("pb.jit: a fused loop's output block is not contiguous")
    return a.reshape(-1)
