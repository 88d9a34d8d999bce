"""pb.jit's fused loops in segments (`pullback._jit_blocks`): runs of +, -, *, / in a part computed as one
numba loop, with the calls that are not fused moved ahead of them. Each test compares the replay that runs
the loops with the plain call: the same bits, the same warnings in the same order, the same errors."""

import warnings

import numpy as np
import pytest

import pullback as pb
from pullback import _jit_blocks
from pullback.bench.workloads import chain
from test_jit import parts_for_small_arrays
from test_probe_jit_segments import _assert_same, _run

pytest.importorskip("numba")


def _loops(jitted):
    return [loop for variants in jitted._cache.values() for program, *_ in variants
            for part in program.program.fused_parts for loop in part.loops]


class _Counted:
    """A loop's compiled function, counting its calls."""

    def __init__(self, function):
        self.function, self.calls = function, 0

    def __call__(self, *arrays):
        self.calls += 1
        return self.function(*arrays)


def _fused(f, *args, **parts):
    """`pb.jit(f)` with its segments' fused loops compiled, and the counters of their calls."""
    jf = pb.jit(f)
    with np.errstate(all="ignore"):
        jf(*args)
        jf(*args)
    assert jf.wait_for_fusion(start=True) >= 1
    loops = _loops(jf)
    assert loops and all(loop.function is not None for loop in loops)
    counted = []
    for loop in loops:
        loop.function = _Counted(loop.function)
        counted.append(loop.function)
    return jf, counted


def _compare(f, make_args, modes=("ignore",), count=3, block_bytes=64):
    """`f` jitted, with its loops compiled, against `f` itself under each `np.errstate(all=mode)` (underflow
    ignored, as by default), on fresh `make_args()`: results, warnings and errors alike. The loops run,
    except under "call" and "log" (a segment then runs whole, as NumPy's calls)."""
    with parts_for_small_arrays(count=count, block_bytes=block_bytes):
        jf, counted = _fused(f, *make_args())
        for mode in modes:
            before = sum(c.calls for c in counted)
            for _ in range(2):
                with np.errstate(all=mode, under="ignore"):
                    got = _run(jf, *make_args())
                    want = _run(f, *make_args())
                _assert_same(got[0], want[0])
                assert got[1] == want[1], (mode, got[1], want[1])
            assert (sum(c.calls for c in counted) > before) == (mode not in ("call", "log")), mode
    return want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_chain_gradient_with_fused_loops_gives_eagers_bits(dtype):
    x = np.linspace(-1.0, 1.0, 301).astype(dtype)
    grad = lambda x: pb.gradient(lambda v: chain(v, 40, np), x)[0]  # noqa: E731
    _compare(grad, lambda: (x,))
    with parts_for_small_arrays(count=2, block_bytes=256):
        jf, counted = _fused(grad, x)
        np.testing.assert_array_equal(jf(x * 0.5), grad(x * 0.5))
    assert sum(c.calls for c in counted) > 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_arrays_the_trace_let_go_of_are_read_as_arrays(dtype):
    # past 64 KiB a trace keeps a broadcast placeholder of a value no one holds any more: the loops must
    # read the value itself, not the placeholder's one memory place
    x = np.linspace(-1.0, 1.0, 20_011).astype(dtype)
    assert x.nbytes > 1 << 16
    grad = lambda x, s: pb.gradient(lambda v: np.sum(chain(v, 30, np) * s), x)[0]  # noqa: E731
    with parts_for_small_arrays(count=2, block_bytes=1 << 14):
        jf, counted = _fused(grad, x, 1.5)
        for scale, s in ((0.5, 1.5), (0.9, -2.0)):
            np.testing.assert_array_equal(jf(x * scale, s), grad(x * scale, s))
    assert sum(c.calls for c in counted) > 0


def test_the_loops_take_the_products_and_leave_the_transcendental_calls_to_numpy():
    x = np.linspace(-1.0, 1.0, 301, dtype=np.float32)
    with parts_for_small_arrays(count=2, block_bytes=256):
        jf, _ = _fused(lambda x: pb.gradient(lambda v: chain(v, 40, np), x)[0], x)
    loops = _loops(jf)
    # the backward pass's 24 products and 8 differences (1 - t²) are in loops, ahead of which the
    # backward's sin and cos calls ran
    fused = "\n".join(loop.source for loop in loops)
    assert fused.count(" * ") + fused.count(" - ") >= 24 and "sin" not in fused and "tanh" not in fused
    assert all(len(loop.inputs) <= _jit_blocks.MAX_INPUTS for loop in loops)


def _overflows(x):
    y = np.sin(x)
    return (x * 1e200) * (x * 1e200) + y * 2.0


def _big_x():
    x = np.linspace(-3.0, 3.0, 200)
    x[[3, 150]] = 1e150  # overflow in the run at two rows, in different blocks and parts
    return (x,)


def test_an_overflow_in_a_loop_warns_and_raises_as_numpy_does():
    want = _compare(_overflows, _big_x, modes=("warn", "raise", "ignore", "call", "log"))
    assert want[1] == []  # under "log" (the last mode) NumPy logs instead


def test_an_overflow_warning_in_a_loop_comes_once_in_the_order_of_the_calls():
    def f(x):
        y = np.log(x - 2.0)  # invalid below 2, before the run
        return (x * 1e200) * (x * 1e200) + np.exp(x) * y

    x = np.linspace(-3.0, 3.0, 200)
    x[7] = 1e150
    with parts_for_small_arrays(count=3, block_bytes=64):
        jf, counted = _fused(f, x)
        with np.errstate(all="warn", under="ignore"):
            got = _run(jf, x.copy())
    want = _run(f, x.copy())
    _assert_same(got[0], want[0])
    assert got[1] == want[1] and [m for _, m in want[1]] == [  # (the run's three products overflow there)
        "invalid value encountered in log"] + ["overflow encountered in multiply"] * 3 + ["overflow encountered in exp"]
    assert sum(c.calls for c in counted) > 0


@pytest.mark.parametrize("values", [
    [np.nan, 1.0, np.inf],  # a NaN input: no warning; inf - inf: invalid
    [1.0, 2.0, 1.0],  # a division by zero
    [-np.inf, 0.0, -0.0],  # infinities and signed zeros
])
def test_special_values_in_a_loop_give_numpys_values_and_warnings(values):
    def f(x):
        s = np.cos(x)
        return (x * 2.0 - x) / (x - 1.0) + s * x

    def make():
        x = np.linspace(-2.0, 2.0, 120)
        x[[5, 60, 100]] = values
        return (x,)

    _compare(f, make, modes=("warn", "raise", "ignore"))


def test_underflow_not_ignored_runs_numpys_calls():
    def f(x):
        return (x * 1e-200) * 1e-200 + np.sin(x)

    def make():
        return (np.linspace(0.5, 2.0, 100),)

    with parts_for_small_arrays(count=2, block_bytes=64):
        jf, counted = _fused(f, *make())
        for mode in ("warn", "raise"):
            with np.errstate(all="ignore", under=mode):
                got, want = _run(jf, *make()), _run(f, *make())
            _assert_same(got[0], want[0])
            assert got[1] == want[1]
        assert sum(c.calls for c in counted) == 0
        with np.errstate(all="ignore"):
            _assert_same(jf(*make()), f(*make()))
    assert sum(c.calls for c in counted) > 0


@pytest.mark.parametrize("layout", ["strided", "transposed"])
def test_arguments_of_every_layout_give_numpys_bits(layout):
    def f(x, w):
        return np.tanh((x * w + 1.0) * (x - w)) * 3.0 - x * x

    rng = np.random.default_rng(0)
    base = rng.standard_normal((40, 18))
    w = rng.standard_normal((18, 9))
    x = {"strided": base[::2, ::2][:18], "transposed": base[:9, :18].T}[layout]
    assert x.shape == w.shape and not x.flags.c_contiguous
    _compare(f, lambda: (x, w))


def test_a_result_read_after_the_segment_is_written_by_the_loop():
    def f(x):
        y = x * 2.0 + 1.0  # returned: the loop writes it into the whole result
        z = y * y - x
        return y, np.sin(z) * z

    _compare(f, lambda: (np.linspace(-1.0, 1.0, 150),))


@pytest.mark.parametrize("fill", [3.0, "signed zeros", "mixed"])
def test_a_constant_array_read_in_a_loop_is_read_as_it_is_at_each_call(fill):
    c = np.full(140, 3.0) if fill == 3.0 else np.where(np.arange(140) % 2, 0.0, -0.0)
    if fill == "mixed":
        c[7] = 2.0

    def f(x):
        return np.sin(x) * (x * c - c)  # c, a constant of the trace: all one value, or not

    x = np.linspace(-2.0, 2.0, 140)
    _compare(f, lambda: (x.copy(),), modes=("warn", "ignore"))
    with parts_for_small_arrays(count=2, block_bytes=64):
        jf, counted = _fused(f, x)
        c[:] = 5.0  # a constant the trace read is written: the next call traces again, and reads 5
        np.testing.assert_array_equal(jf(x), f(x))
        jf.wait_for_fusion(start=True)
        np.testing.assert_array_equal(jf(x), np.sin(x) * (x * 5.0 - 5.0))


def test_mixed_dtypes_and_python_numbers_in_a_run():
    def f(x, i):
        a = x * 3 + 0.25  # a Python int and float, cast to float32 as NumPy casts them
        b = a * i  # float32 * int64 array: float64, no loop
        return np.cos(a) * a - 1.5, b * b + 1.0

    make = lambda: (np.linspace(-2, 2, 130, dtype=np.float32), np.arange(130))  # noqa: E731
    _compare(f, make, modes=("warn", "ignore"))


def test_random_programs_of_products_and_functions_give_numpys_bits():
    rng = np.random.default_rng(1)
    cheap = [lambda a, b: a * b, lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a / (b * b + 1.0),
             lambda a, b: -a * 0.5, lambda a, b: np.square(a) - b, lambda a, b: np.abs(a) + 0.1]
    functions = [np.sin, np.cos, np.tanh, np.exp, np.arctan]
    for trial in range(6):
        steps = [(rng.integers(len(cheap)), rng.random() < 0.3, rng.integers(len(functions)), rng.integers(3))
                 for _ in range(14)]

        def f(x, steps=steps):
            values = [x, np.sin(x)]
            for op, apply, fn, back in steps:
                a, b = values[-1], values[-1 - min(back, len(values) - 1)]
                v = cheap[op](a, b)
                values.append(functions[fn](v) * 0.5 if apply else v)
            return np.sum(values[-1]) if trial % 2 else values[-1]

        x = np.linspace(-1.0, 1.0, 97 + trial, dtype=np.float32 if trial % 3 else np.float64)
        grad = (lambda x, f=f: pb.gradient(lambda v: np.sum(f(v)), x)[0]) if trial % 2 else f
        _compare(grad, lambda x=x: (x.copy(),), modes=("ignore",), block_bytes=128)


def test_a_loop_that_fails_to_compile_leaves_the_replay_unfused(monkeypatch):
    def refuse(self):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(_jit_blocks.Loop, "compile", refuse)
    monkeypatch.setattr(_jit_blocks.Loop, "_compiled", {})
    x = np.linspace(-1.0, 1.0, 150)
    f = lambda x: np.cos(x * 2.0 + 1.0) * (x - 3.0) * x  # noqa: E731
    with parts_for_small_arrays(count=2, block_bytes=64):
        jf = pb.jit(f)
        jf(x)
        jf(x)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert jf.wait_for_fusion(start=True) == 0
        np.testing.assert_array_equal(jf(x * 0.5), f(x * 0.5))
    assert any("fusing a replay's operations failed" in str(w.message) for w in caught)


# --- the schedule ----------------------------------------------------------------------------------------
def _call(index, fn, reads, out, fusible=True):
    operands = [("array", None) for _ in reads] if fusible else None
    return _jit_blocks.Call(index, fn, [(slot, name) for slot, name in reads], out[0], out[1], True, index,
                            operands, np.dtype(np.float64))


def _shape(order):
    return [[c.index for c in item] if type(item) is list else item.index for item in order]


def test_a_call_not_fused_moves_ahead_of_a_run_it_does_not_touch():
    calls = [_call(0, np.multiply, [(1, "g"), (2, "a")], (3, "g")),
             _call(1, np.sin, [(4, "b")], (5, "b"), fusible=False),
             _call(2, np.multiply, [(3, "g"), (5, "b")], (6, "g"))]
    assert _shape(_jit_blocks.schedule(calls)) == [1, [0, 2]]


@pytest.mark.parametrize("sin_call", [
    ((3, "g"), (5, "b")),  # reads what the run wrote
    ((4, "b"), (5, "a")),  # writes what the run reads
    ((4, "b"), (5, "g")),  # writes what the run writes
])
def test_a_call_not_fused_that_touches_the_run_closes_it(sin_call):
    read, out = sin_call
    calls = [_call(0, np.multiply, [(1, "g"), (2, "a")], (3, "g")),
             _call(1, np.add, [(3, "g"), (2, "a")], (7, "g")),
             _call(2, np.sin, [read], out, fusible=False),
             _call(3, np.multiply, [(7, "g"), (8, "c")], (9, "g"))]
    assert _shape(_jit_blocks.schedule(calls)) == [[0, 1], 2, 3]


def test_a_run_reads_at_most_max_inputs_arrays():
    n = _jit_blocks.MAX_INPUTS + 3
    calls = [_call(0, np.multiply, [(100, "g"), (0, "a0")], (200, "g"))]
    calls += [_call(k, np.multiply, [(199 + k, "g"), (k, f"a{k}")], (200 + k, "g")) for k in range(1, n)]
    order = _jit_blocks.schedule(calls)
    assert [len(item) for item in order] == [_jit_blocks.MAX_INPUTS - 1, n - _jit_blocks.MAX_INPUTS + 1]
    assert all(len(_jit_blocks._inputs(item)) <= _jit_blocks.MAX_INPUTS for item in order)
