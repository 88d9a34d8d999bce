"""pb.jit's fused kernels for small arrays: same results as eager pullback to float rounding."""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pullback as pb
from pullback import _jit_fuse, _jit_replay
from pullback.bench.workloads import chain

pytest.importorskip("numba")


def fused(jitted, *args):
    """`jitted`, called often enough to be fused, then waited for; its fused program's source."""
    for _ in range(_jit_replay.FUSE_AFTER_CALLS + 1):
        jitted(*args)
    assert jitted.wait_for_fusion(timeout=120) == 1
    (program, *_), = [v for variants in jitted._cache.values() for v in variants]
    return program.fused.source


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-4), (np.float64, 1e-12)])
def test_a_fused_chain_gradient_equals_eager_to_float_rounding(dtype, rtol):
    loss = lambda v: chain(v, 40, np)  # noqa: E731
    x = np.linspace(-1.0, 1.0, 10).astype(dtype)
    jf = pb.jit(lambda x: pb.withgradient(loss, x))
    source = fused(jf, x)
    assert source.count("# fused:") == 2  # the forward run and the backward run
    for point in (x, x * 0.5 + 0.1):
        val, (g,) = jf(point)
        ref_val, (ref_g,) = pb.withgradient(loss, point)
        assert g.dtype == ref_g.dtype == dtype
        assert val == pytest.approx(ref_val, rel=rtol)
        np.testing.assert_allclose(g, ref_g, rtol=rtol)
        np.testing.assert_allclose(g, pb.testing.numerical_gradient(loss, point.astype(np.float64))[0],
                                   rtol=1e-3 if dtype is np.float32 else 1e-7, atol=1e-3 * np.abs(ref_g).max())


# inputs inside each function's domain
UNARY_DOMAIN = {np.arccosh: (1.1, 3.0), np.arcsin: (-0.9, 0.9), np.arccos: (-0.9, 0.9), np.arctanh: (-0.9, 0.9),
                np.log: (0.1, 3.0), np.log2: (0.1, 3.0), np.log10: (0.1, 3.0), np.log1p: (0.1, 3.0),
                np.sqrt: (0.1, 3.0)}


SPECIAL = [-np.inf, -1e30, -3.5, -1.0, -0.5, -0.0, 0.0, 1e-30, 0.5, 1.0, 3.5, 1e30, np.inf, np.nan]


def assert_same_floats(got, expected, rtol):
    """Equal to `rtol`, and the same NaNs, infinities and signs of zero."""
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(expected)], expected[~finite & ~np.isnan(expected)])
    np.testing.assert_allclose(got[finite], expected[finite], rtol=rtol, atol=0)
    zeros = expected == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(expected[zeros]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ufunc", list(_jit_fuse.SCALAR_SOURCE), ids=lambda u: u.__name__)
def test_every_fusible_ufunc_computes_numpy_s_values(ufunc, dtype):
    lo, hi = UNARY_DOMAIN.get(ufunc, (-1.5, 1.5))
    x = np.linspace(lo, hi, 14).astype(dtype)
    y = np.linspace(0.5, 1.5, 14).astype(dtype)

    def f(x, y):
        a = x * 1.0  # exact: the segment starts before the function under test
        b = ufunc(a) if ufunc.nin == 1 else ufunc(a, y)
        return b * 2.0

    jf = pb.jit(f)
    assert "kernel" in fused(jf, x, y)
    rtol = 4e-7 if dtype is np.float32 else 1e-14
    assert_same_floats(jf(x, y), f(x, y), rtol)
    # every pair of special values (infinities, NaN, signed zeros, huge and tiny numbers)
    grid_x, grid_y = (np.array(v, dtype) for v in zip(*[(a, b) for a in SPECIAL for b in SPECIAL]))
    with np.errstate(all="ignore"):
        for x, y in zip(grid_x.reshape(-1, 14), grid_y.reshape(-1, 14)):
            assert_same_floats(jf(x, y), f(x, y), rtol)


def test_a_power_with_a_number_exponent_is_left_to_numpy():
    # NumPy computes x ** 0.5 as sqrt(x) (nan at -inf, where C's pow gives inf), x ** 2 as x * x
    def f(x):
        a = (x * 1.0 + 0.0) * 1.0  # a fused run before the powers
        return (a ** 0.5) * 1.0, (a ** 2) * 1.0, (a ** -1) * 1.0, np.power(a, 0.5) + 0.0

    x = np.array(SPECIAL)
    jf = pb.jit(f)
    with np.errstate(all="ignore"):
        source = fused(jf, x)
        assert not [line for line in source.splitlines() if "# fused:" in line and "power" in line]
        for got, expected in zip(jf(x), f(x)):
            assert_same_floats(got, expected, 1e-15)


def test_arithmetic_with_python_numbers_is_cast_as_numpy_casts_it():
    def f(x, c, k):
        return ((x * c + k) / c - 0.1) ** 2

    x = np.linspace(-1, 1, 16, dtype=np.float32)
    jf = pb.jit(f)
    assert "kernel" in fused(jf, x, 0.3, 2)
    for c, k in [(0.3, 2), (1e-3, -7), (3.7, 0), (0.5, 2**70)]:  # 2**70: beyond int64, as NumPy casts it
        got = jf(x, c, k)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, f(x, c, k))  # + - * / and ** 2 round the same in both
    with pytest.raises(OverflowError):  # too large for any float, as in NumPy
        jf(x, 0.5, 2**2000)


def test_two_dimensional_arrays_and_operands_that_broadcast():
    def f(x, bias):
        a = np.tanh(np.sin(x) * 2.0 + 1.0)  # a fused run on (7, 4)
        b = a + bias  # a (4,) operand ends it
        return np.exp(np.cos(b) * 0.5 - 0.25), a.T  # a second run; a transposed view of the first

    x, bias = np.linspace(-1, 1, 28).reshape(7, 4), np.arange(4.0)
    jf = pb.jit(f)
    assert fused(jf, x, bias).count("# fused:") == 2
    for got, expected in zip(jf(x + 0.25, bias), f(x + 0.25, bias)):
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-14)


def test_a_constant_array_operand_ends_a_fused_run_and_the_rest_is_fused():
    weights = np.linspace(0.0, 1.0, 10)  # captured: a constant of the trace, not an input

    def f(x):
        return np.cos(np.tanh(np.sin(x) * 2.0 + 1.0) * weights) * 0.5 - x * x + 3.0

    x = np.linspace(-1.0, 1.0, 10)
    jf = pb.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failed fusion warns
        assert fused(jf, x).count("# fused:") == 2
    np.testing.assert_allclose(jf(x + 0.25), f(x + 0.25), rtol=1e-14)


def test_a_jitted_gradient_does_not_compute_the_loss_it_does_not_return():
    loss = lambda v: chain(v, 10, np)  # noqa: E731  (ends in cos, then sum: neither needed for the gradient)
    x = np.linspace(-1.0, 1.0, 10).astype(np.float32)
    jf = pb.jit(lambda x: pb.gradient(loss, x)[0])
    jf(x)
    jf(x)
    (program, *_), = [v for variants in jf._cache.values() for v in variants]
    # forward: the first group's cos only; backward: one cos for each sin (and no cos of the last step, no sum)
    assert program.source.count("# cos") == 3 and "# sum" not in program.source
    np.testing.assert_allclose(jf(x * 0.5), pb.gradient(loss, x * 0.5)[0], rtol=1e-6)
    assert fused(jf, x).count("# fused:") == 2
    np.testing.assert_allclose(jf(x * 0.5), pb.gradient(loss, x * 0.5)[0], rtol=2e-4)


def test_each_kernel_is_compiled_once_for_strided_broadcast_and_read_only_inputs():
    # A chain gradient's backward kernel reads the broadcast seed; callers may pass strided or
    # read-only arrays of the traced shape. No call after fusion compiles a kernel again (a
    # compilation in the caller's thread, seconds long).
    f = lambda x: pb.gradient(lambda v: np.sum(chain(v, 10, np)), x)[0]  # noqa: E731
    x = np.linspace(-1.0, 1.0, 10).astype(np.float32)
    jf = pb.jit(f)
    fused(jf, x)
    (program, *_), = [v for variants in jf._cache.values() for v in variants]
    kernels = [v for k, v in program.fused.run.__globals__.items() if k.startswith("kernel")]
    assert len(kernels) == 2
    read_only = x.copy()
    read_only.flags.writeable = False
    for point in (x, np.linspace(-1.0, 1.0, 20).astype(np.float32)[::2], read_only):
        np.testing.assert_allclose(jf(point), f(point), rtol=2e-4)
    assert [len(kernel.signatures) for kernel in kernels] == [1, 1]


def test_outputs_are_not_overwritten_by_the_next_call():
    jf = pb.jit(lambda x: (np.sin(x) * 2.0 + 1.0, (np.sin(x) * 2.0 + 1.0).reshape(2, 2)))
    x = np.linspace(0, 1, 4)
    fused(jf, x)
    first, first_view = jf(x)
    kept, kept_view = first.copy(), first_view.copy()
    jf(x + 10.0)
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(first_view, kept_view)


def test_a_raising_errstate_runs_the_replay_unfused_so_numpy_raises():
    jf = pb.jit(lambda x, y: np.sin(x) / (y * 0.0) + 1.0)
    x = np.linspace(0.5, 1, 4)
    fused(jf, x, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert np.isinf(jf(x, x)).all()  # fused: the same infinities as NumPy's
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        jf(x, x)


def test_without_numba_nothing_is_fused(monkeypatch):
    monkeypatch.setattr(_jit_fuse, "available", lambda: False)
    jf = pb.jit(lambda x: np.tanh(np.sin(x) * 2.0 + 1.0))
    for _ in range(_jit_replay.FUSE_AFTER_CALLS + 2):
        jf(np.ones(4))
    assert jf.wait_for_fusion() == 0


def test_a_large_trace_is_not_kept_for_fusion():
    # small fusible arrays beside a large one: keeping the trace would hold the large values
    jf = pb.jit(lambda x, big: (np.tanh(np.sin(x) * 2.0 + 1.0), big @ big))
    big = np.ones((400, 400))
    for _ in range(_jit_replay.FUSE_AFTER_CALLS + 2):
        jf(np.ones(4), big)
    assert jf.wait_for_fusion() == 0


def test_a_failed_fusion_warns_and_the_replay_goes_on_unfused(monkeypatch):
    def broken(self, trace):
        raise RuntimeError("no compiler")

    monkeypatch.setattr(_jit_fuse.Kernel, "compile", broken)
    f = lambda x: np.tanh(np.sin(x) * 2.0 + 1.0)  # noqa: E731
    jf = pb.jit(f)
    with pytest.warns(RuntimeWarning, match="stays unfused: RuntimeError: no compiler"):
        for _ in range(_jit_replay.FUSE_AFTER_CALLS + 1):
            jf(np.ones(4))
        jf.wait_for_fusion()
    np.testing.assert_array_equal(jf(np.ones(4) * 0.5), f(np.ones(4) * 0.5))


OPS = [lambda x, c: np.sin(x) * c, lambda x, c: np.tanh(x) + c, lambda x, c: x * x - c,
       lambda x, c: np.exp(-x * x), lambda x, c: np.cos(x) / (1.0 + c), lambda x, c: np.sqrt(x * x + c),
       lambda x, c: x[::-1] * c + x, lambda x, c: np.log1p(x * x) * c]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(st.sampled_from(range(len(OPS))), min_size=3, max_size=10), seed=st.integers(0, 10_000))
def test_random_programs_fused_give_eager_results(program, seed):
    def loss(x, c):
        for op in program:
            x = OPS[op](x, c)
        return np.sum(x * x)

    rng = np.random.default_rng(seed)
    x, c = rng.uniform(-1.0, 1.0, 6), float(rng.uniform(0.2, 0.9))
    jf = pb.jit(lambda x, c: pb.withgradient(loss, x, c))
    for _ in range(_jit_replay.FUSE_AFTER_CALLS + 1):
        jf(x, c)
    jf.wait_for_fusion(timeout=120)
    val, (g, gc) = jf(x * 0.9, c)
    ref_val, (ref_g, ref_gc) = pb.withgradient(loss, x * 0.9, c)
    assert val == pytest.approx(ref_val, rel=1e-12, abs=1e-300)
    np.testing.assert_allclose(g, ref_g, rtol=1e-11, atol=1e-300)
    assert gc == pytest.approx(ref_gc, rel=1e-11, abs=1e-300)


def test_the_interpreter_waits_at_exit_for_a_fusion_in_progress():
    # a thread stopped inside the compiler as the interpreter shuts down can abort the process
    import subprocess
    import sys

    script = """
import atexit
alive = []
atexit.register(lambda: print("fusing at exit:", any(t.is_alive() for t in alive)))  # runs after pullback's
import numpy as np, pullback as pb
from pullback import _jit_replay
from pullback.bench.workloads import chain
j = pb.jit(lambda x: pb.gradient(lambda v: chain(v, 60, np), x)[0])
x = np.linspace(-1, 1, 10)
j(x); j(x)
j.wait_for_fusion(timeout=0, start=True)
alive += list(_jit_replay._FUSING)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "fusing at exit: False" in done.stdout
