"""Probes of pb.jit's fused loops in segments (`pullback._jit_blocks`) the way real code meets them:
aliases, in-place operators, mixed dtypes and numbers, special values, error modes, layouts,
gradients, threads, retraces and constants. Each test compiles the loops, checks that they ran
(their counters), and compares the jitted function with the plain one: results (bits, dtypes),
warnings, errors and the arguments afterwards.

The tests named for a bug were failures when written (a literal baked in for a number read at each call,
names of one buffer taken for two, a float argument's cast): each says what the code does now."""

import threading
import warnings

import numpy as np
import pytest

import pullback as pb
from test_jit import parts_for_small_arrays
from test_jit_fused_loops import _Counted, _fused, _loops
from test_probe_jit_segments import _assert_same, _run

pytest.importorskip("numba")


def _calls_in_threads(jf, inputs, wants, threads, rounds):
    """`jf` called from `threads` threads at once, each `rounds` times over `inputs` in its own order; the
    indices of the calls whose result was not `wants`' (NaN equal to NaN)."""
    failures = []

    def worker(start):
        with np.errstate(all="ignore"):
            for k in range(rounds):
                j = (start + k) % len(inputs)
                if not np.array_equal(jf(*inputs[j]), wants[j], equal_nan=True):
                    failures.append(j)

    started = [threading.Thread(target=worker, args=(s,)) for s in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    return failures


def _calls(counted):
    return sum(c.calls for c in counted)


def _count_new(jf, counted):
    """Wrap the loops of traces made since `counted` was filled (a retrace) in counters too."""
    for loop in _loops(jf):
        if loop.function is not None and not isinstance(loop.function, _Counted):
            loop.function = _Counted(loop.function)
            counted.append(loop.function)
    return counted


def _same(f, make_args, modes=("ignore",), count=3, block_bytes=64, loops=True, warm=False):
    """`_compare`, also comparing the arguments after each call (the jitted and the plain function each get
    fresh `make_args()`), and checking the loops ran (or, with `loops=False`, did not) under every mode. With
    `warm`, a call under each mode first, and its trace's loops compiled (a function whose trace depends on the
    caller's error modes: an np.errstate inside it)."""
    with parts_for_small_arrays(count=count, block_bytes=block_bytes):
        jf, counted = _fused(f, *make_args())
        for mode in modes:
            errstate = dict(all=mode, under="ignore") if isinstance(mode, str) else dict(mode)
            if warm:
                with warnings.catch_warnings(), np.errstate(**errstate):
                    warnings.simplefilter("ignore")
                    _run(jf, *make_args())
                jf.wait_for_fusion(start=True)
                _count_new(jf, counted)
            before = _calls(counted)
            for _ in range(2):
                got_args, want_args = make_args(), make_args()
                with np.errstate(**errstate):
                    got = _run(jf, *got_args)
                    want = _run(f, *want_args)
                _assert_same(got[0], want[0])
                assert got[1] == want[1], (mode, got[1], want[1])
                _assert_same(list(got_args), list(want_args))
            assert (_calls(counted) > before) == loops, (mode, _calls(counted), before)
    return want


# --- aliases and in-place operators ---------------------------------------------------------------------
def test_the_same_array_passed_twice():
    def f(x, y):
        return (x * y + x) * (y - 1.0) + np.sin(x) * y

    def make():
        x = np.linspace(-2.0, 2.0, 150)
        return x, x

    _same(f, make, modes=("ignore", "warn"))


def test_overlapping_views_of_one_array_as_two_arguments():
    def f(a, b):
        return (a * b - a) / (b * b + 1.0) + np.cos(a) * b

    def make():
        base = np.linspace(-3.0, 3.0, 41 * 9).reshape(41, 9)
        return base[1:], base[:-1]

    _same(f, make, modes=("ignore", "warn"))


def test_in_place_operators_on_intermediates():
    def f(x):
        y = x * 2.0
        y *= 3.0
        y += x
        z = np.tanh(y)
        z *= y
        z -= x * x
        z /= 1.5
        return z

    _same(f, lambda: (np.linspace(-2.0, 2.0, 160),), modes=("ignore", "warn", "raise"))


def test_in_place_operators_on_arguments():
    def f(x, w):
        x *= 2.0
        x += w
        y = x * x - np.cos(x) * w
        w *= 0.5
        return y * w + x

    def make():
        return np.linspace(-2.0, 2.0, 150), np.linspace(1.0, 3.0, 150)

    _same(f, make, modes=("ignore", "warn"))


def test_out_arguments_into_intermediates_and_arguments():
    def f(x, out):
        t = np.empty_like(x)
        np.multiply(x, x, out=t)
        np.add(t, 1.0, out=t)
        u = t * x - np.sin(t)
        np.multiply(u, 2.0, out=out)
        return u * u + out

    def make():
        return np.linspace(-1.0, 1.0, 150), np.zeros(150)

    _same(f, make, modes=("ignore",))


def test_results_returned_are_also_read_later_in_the_run():
    def f(x):
        y = x * 2.0 + 1.0
        z = y * y
        w = z - y
        v = np.sin(w) * w + y
        return y, z, w, v

    _same(f, lambda: (np.linspace(-1.0, 1.0, 150),), modes=("ignore", "warn"))


def test_results_returned_when_a_block_falls_back_to_numpy():
    def f(x):
        y = x * 2.0 + 1.0
        z = y * y * 1e200
        w = z - y
        return y, z, w, np.sin(x) * w

    def make():
        x = np.linspace(-1.0, 1.0, 150)
        x[[4, 77, 140]] = [1e150, np.nan, -np.inf]
        return (x,)

    _same(f, make, modes=("ignore", "warn"))


# --- mixed dtypes and numbers ---------------------------------------------------------------------------
def test_float16_complex_and_int_values_beside_runs():
    def f(x, h, c, i):
        a = x * 3.0 - x * x  # float32: a loop
        b = a * h + 1.0  # float16 array: float32 result, no loop for it
        k = a * i + a  # int32 array: float64
        z = c * a + 1.0  # complex64
        return a * a - np.sin(a), b, k * k, z * z

    def make():
        return (np.linspace(-2.0, 2.0, 150, dtype=np.float32), np.linspace(0.0, 1.0, 150).astype(np.float16),
                (np.linspace(0.0, 1.0, 150) + 1j).astype(np.complex64), np.arange(150, dtype=np.int32))

    _same(f, make, modes=("ignore", "warn"))


def test_numpy_scalars_of_other_dtypes_in_a_run():
    def f(x, y):
        a = x * np.float32(1.1) + np.float32(0.3)  # float32: fused
        b = a * np.float64(1.1) + x  # float64 result
        c = y * np.float32(1.1) - np.float16(0.1)  # float64 array, float32 and float16 scalars
        d = a * np.int32(3) + np.int8(1)  # int scalars beside float32
        e = y * np.uint64(2 ** 60) + y  # a uint64 scalar beside float64
        return a * a - a, b * b, c * c - c, d * d - a, e * e

    def make():
        return np.linspace(-2.0, 2.0, 150, dtype=np.float32), np.linspace(-1.0, 1.0, 150)

    _same(f, make, modes=("ignore", "warn"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_python_ints_beyond_two_to_the_24_in_a_run(dtype):
    def f(x):
        a = x * 3 - 1  # small ints: numbers in the loop
        b = a * (2 ** 24 + 1) + 16777217  # not exact in float32
        c = b * (2 ** 53 + 1) - (2 ** 62 + 3)
        return a * a + b - c * 1e-20, np.cos(c) * a

    _same(f, lambda: (np.linspace(-2.0, 2.0, 150, dtype=dtype),), modes=("ignore", "warn"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_signed_zeros_and_subnormals(dtype):
    tiny = np.finfo(dtype).smallest_subnormal

    def f(x):
        a = x * -0.0 + 0.0  # -0.0 * x: zeros of both signs
        b = (x - 0.0) * 0.5 - x * 0.5
        c = x * float(tiny) * 0.5  # subnormal results (underflow: ignored)
        d = -x + 0.0
        e = np.abs(-x) * np.square(x * 1e-160)
        return a * 1.0, b + a, c - a, d, e - np.sin(x)

    def make():
        x = np.linspace(-1.0, 1.0, 150).astype(dtype)
        x[[3, 50, 90]] = [-0.0, 0.0, tiny]
        x[[110, 120]] = [-tiny, tiny * 3]
        return (x,)

    _same(f, make, modes=("ignore", "warn"))


def test_float32_products_of_python_floats_that_round():
    def f(x):
        return ((x * 0.1 + 0.2) * (1.0 / 3.0) - 0.7) * (x + 1e-10) - np.sin(x) * 0.3

    _same(f, lambda: (np.linspace(-3.0, 3.0, 151, dtype=np.float32),), modes=("ignore",))


# --- special values and errors --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_and_inf_inputs_in_many_blocks(dtype):
    def f(x, y):
        a = x * y - y
        b = a / (x - 1.0) + np.exp(y)
        return a * b - x, b

    def make():
        x = np.linspace(-2.0, 2.0, 200).astype(dtype)
        y = np.linspace(1.0, -1.0, 200).astype(dtype)
        x[[0, 13, 99, 150, 199]] = [np.nan, np.inf, -np.inf, 1.0, np.nan]
        y[[1, 13, 100, 180]] = [np.inf, 0.0, np.nan, -np.inf]
        return x, y

    _same(f, make, modes=("ignore", "warn", "raise"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_overflow_in_only_some_blocks(dtype):
    big = float(np.sqrt(np.finfo(dtype).max)) * 4

    def f(x):
        s = np.sin(x)
        y = (x * big) * (x * big) - s
        return y * 0.5 + s, y / (s * s)

    def make():
        x = np.linspace(0.1, 2.0, 300).astype(dtype)
        x[[5, 6, 270]] = [3.0, -4.0, 1e-30]  # the division overflows at 270
        return (x,)

    _same(f, make, modes=("ignore", "warn", "raise"))


@pytest.mark.parametrize("mode", [dict(over="raise", invalid="warn", divide="ignore", under="ignore"),
                                  dict(over="warn", invalid="ignore", divide="raise", under="ignore"),
                                  dict(over="ignore", invalid="raise", divide="warn", under="ignore")])
def test_mixed_error_modes(mode):
    def f(x, w):
        v = np.log(w)  # invalid where w < 0: moves ahead of the run
        a = (x * 1e200) * 1e200  # overflow at one row
        b = a / (x - 1.0) + v  # divide by zero at x == 1
        return b * b - a

    def make():
        x = np.linspace(-2.0, 2.0, 200)
        x[[40, 160]] = [1e150, 1.0]
        w = np.linspace(1.0, 2.0, 200)
        w[120] = -1.0
        return x, w

    _same(f, make, modes=(mode, dict(all="ignore")))


def test_errors_raised_in_every_part_under_raise():
    def f(x):
        return (x * 1e300) * (x * 1e300) + np.cos(x)

    def make():
        x = np.linspace(-1.0, 1.0, 300)
        x[[10, 150, 290]] = 10.0
        return (x,)

    _same(f, make, modes=("raise", "warn"), count=4)


def test_warnings_turned_into_errors_by_a_filter():
    def f(x):
        y = np.log(x + 3.0)  # invalid below -3
        return (x * 1e200) * (x * 1e200) + y * x

    def make():
        x = np.linspace(-2.0, 2.0, 200)
        x[[30, 170]] = [1e160, -5.0]
        return (x,)

    with parts_for_small_arrays(count=3, block_bytes=64):
        jf, counted = _fused(f, *make())
        results = []
        for fn in (jf, f):
            with warnings.catch_warnings(record=True) as caught, np.errstate(all="warn", under="ignore"):
                warnings.simplefilter("error")
                try:
                    result = fn(*make())
                except Exception as error:  # noqa: BLE001 - compared with the plain call's
                    result = ("raised", type(error), str(error))
            results.append((result, [str(w.message) for w in caught]))
        assert _calls(counted) > 0
    assert results[1][0] == ("raised", RuntimeWarning, "invalid value encountered in log")
    assert results[0] == results[1]


# --- layouts --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ndim", [2, 3])
def test_2d_and_3d_arrays(ndim):
    shape = (13, 11) if ndim == 2 else (7, 5, 6)

    def f(x, y):
        a = x * y + x
        b = np.tanh(a) * (y - x * 0.5)
        return a * b - y, b.sum(axis=-1)

    def make():
        n = int(np.prod(shape))
        return np.linspace(-2.0, 2.0, n).reshape(shape), np.linspace(1.0, -1.0, n).reshape(shape)

    _same(f, make, modes=("ignore", "warn"))


@pytest.mark.parametrize("layout", ["transposed", "strided", "reversed", "broadcast row", "broadcast whole",
                                    "fortran"])
def test_argument_layouts(layout):
    def f(x, w):
        a = x * w + 1.0
        b = (a - x) * (x * x)
        return np.sin(b) * b - a * w, a

    def make():
        rng = np.random.default_rng(3)
        base = rng.standard_normal((30, 24))
        w = rng.standard_normal((12, 10))
        x = {"transposed": base[:10, :12].T, "strided": base[::2, ::2][:12, :10], "reversed": base[:12, :10][::-1],
             "broadcast row": np.broadcast_to(base[0, :10], (12, 10)), "fortran": np.asfortranarray(base[:12, :10]),
             "broadcast whole": base[:12, :10]}[layout]
        if layout == "broadcast whole":
            w = w[0]  # (10,) broadcast along the rows: read whole
        return x, w

    # a reversed argument ends the segment (NumPy's kernel differs on a contiguous block): the products of x
    # and x with themselves are still a run in a segment of their own
    _same(f, make, modes=("ignore",))


# --- gradients ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradient_of_a_chain_of_products(dtype):
    def loss(v, w):
        a = v * w
        b = a * a * v - w / (v * v + 1.0)
        c = np.tanh(b) * a * (1.0 - v)
        return np.sum(c * c * w)

    def grads(v, w):
        return pb.gradient(loss, v, w)

    def make():
        return (np.linspace(-1.0, 1.0, 150).astype(dtype), np.linspace(0.5, 1.5, 150).astype(dtype))

    _same(grads, make, modes=("ignore", "warn"))


def test_withgradient_of_products_with_overflow_in_a_block():
    def loss(v):
        return np.sum(np.sin(v) * (v * v * v) * v)

    def f(v):
        return pb.withgradient(loss, v)

    def make():
        v = np.linspace(-1.0, 1.0, 150)
        v[[9, 100]] = [1e100, -1e80]
        return (v,)

    _same(f, make, modes=("ignore", "warn", "raise"))


# --- threads, retraces, changing values -----------------------------------------------------------------
def test_several_threads_call_one_jitted_function():
    def f(x, y):
        a = x * y - x
        return np.cos(a) * a * (y + 1.0) - a / (y * y + 1.0)

    rng = np.random.default_rng(5)
    inputs = [(rng.standard_normal(160), rng.standard_normal(160)) for _ in range(16)]
    inputs[3][0][17] = 1e300  # one falls back in a block
    wants = []
    with np.errstate(all="ignore"):
        wants = [f(*args) for args in inputs]
    with parts_for_small_arrays(count=3, block_bytes=64):
        jf, counted = _fused(f, *inputs[0])
        failures = _calls_in_threads(jf, inputs, wants, threads=6, rounds=40)
    assert not failures
    assert _calls(counted) > 0


def test_calling_again_with_other_shapes_retraces():
    def f(x):
        return (x * x - 1.0) * (x + 2.0) - np.sin(x) * x

    shapes = [(150,), (12, 13), (7, 5, 4), (151,)]
    with parts_for_small_arrays(count=3, block_bytes=64):
        jf, counted = _fused(f, np.linspace(-1.0, 1.0, 150))
        for shape in shapes:
            x = np.linspace(-1.5, 1.5, int(np.prod(shape))).reshape(shape)
            with np.errstate(all="ignore"):
                jf(x)
                jf(x)
            jf.wait_for_fusion(start=True)
            _count_new(jf, counted)
            before = _calls(counted)
            for k in range(3):
                x = np.linspace(-1.5, 1.5, int(np.prod(shape))).reshape(shape) * (k + 1)
                _assert_same(jf(x), f(x))
            assert _calls(counted) > before, shape


def test_arrays_whose_values_change_between_calls():
    def f(x, y):
        return (x * y + 1.0) * (x - y) - np.exp(-x * x) * y

    rng = np.random.default_rng(7)
    x, y = rng.standard_normal(150), rng.standard_normal(150)
    with parts_for_small_arrays(count=3, block_bytes=64):
        jf, counted = _fused(f, x, y)
        for k in range(6):
            x[:] = rng.standard_normal(150) * 10.0 ** (k * 60)  # up to overflow
            y[::3] = k - 2.5
            with np.errstate(all="warn", under="ignore"):
                got, want = _run(jf, x, y), _run(f, x, y)
            _assert_same(got[0], want[0])
            assert got[1] == want[1], k
    assert _calls(counted) > 0


def test_a_small_closure_constant_mutated_between_calls():
    c = np.full(150, 2.0)  # all one value: a number in the loop

    def f(x):
        return (x * c - c) * (x + c) - np.sin(x)

    x = np.linspace(-2.0, 2.0, 150)
    with parts_for_small_arrays(count=3, block_bytes=64):
        jf, counted = _fused(f, x)
        for value in (3.0, -0.0, np.nan):
            c[:] = value
            _assert_same(jf(x), f(x))
            jf.wait_for_fusion(start=True)
            _count_new(jf, counted)
            before = _calls(counted)
            with np.errstate(all="ignore"):
                _assert_same(jf(x), f(x))
            assert _calls(counted) > before
        c[17] = 1.0  # no longer one value: an array in the loop
        _assert_same(jf(x), f(x))
        jf.wait_for_fusion(start=True)
        _count_new(jf, counted)
        before = _calls(counted)
        _assert_same(jf(x), f(x))
        assert _calls(counted) > before


# --- bugs -----------------------------------------------------------------------------------------------
def test_a_large_closure_constant_written_between_calls_is_read_anew():
    c = np.full((50, 100), 3.0)

    def f(x):
        return np.sin(x) * (x * c - c)

    x = np.linspace(-2.0, 2.0, 5000).reshape(50, 100)
    with parts_for_small_arrays(count=2, block_bytes=800):
        unfused = pb.jit(f)
        unfused(x)
        jf, counted = _fused(f, x)
        _assert_same(jf(x), f(x))
        c[:] = 5.0
        _assert_same(unfused(x), f(x))  # the replay without the loops reads 5
        got = jf(x)
    assert _calls(counted) > 0
    _assert_same(got, f(x))


def _alias_after_fallback(x):
    a = x * 3.0 + 1.0  # planned into a buffer b0
    m = np.sum(a)  # ends the segment
    c = a * a  # (in b0, in place: a dies here) -- a scratch array in the part
    e = c * 2.0  # (b0)
    d = e - 1.0  # b0 again, read after the segment: written by the loop over a's rows
    return d.copy(), m


@pytest.mark.parametrize("bad", [np.nan, 1e200])  # a NaN input; an overflow in a * a (its warning is lost too)
def test_a_block_that_falls_back_reads_its_inputs_as_they_were(bad):
    def make():
        x = np.linspace(-1.0, 1.0, 120)
        x[50] = bad  # the block of rows 48..55 falls back
        return (x,)

    want = _same(_alias_after_fallback, make, modes=("warn", "ignore"), count=2)
    assert np.isfinite(want[0][0][49])


def test_the_same_buffer_case_without_a_fallback_is_right():
    # the loop reads each element before it writes it, so without a fallback the aliasing is harmless
    _same(_alias_after_fallback, lambda: (np.linspace(-1.0, 1.0, 120),), modes=("ignore", "warn"), count=2)


def _alias_moved_ahead(x):
    a = x * 3.0 + 1.0  # in buffer b0
    m = np.sum(a)  # ends the segment
    c = a * a  # the run begins, reading a
    s = np.sin(a)  # a dies here: s goes into b0, and is read after the segment
    e = c * 2.0  # joins the run
    return s.copy(), e.copy(), m


def test_a_call_moved_ahead_of_a_run_does_not_overwrite_what_the_run_reads():
    _same(_alias_moved_ahead, lambda: (np.linspace(-1.0, 1.0, 120),), modes=("ignore",), count=2)


def _scaled(x, s, n):
    return (x * s + n) * x - np.sin(x) * s


@pytest.mark.parametrize("kind", [float, np.float64])
def test_number_arguments_are_read_at_each_call(kind):
    x = np.linspace(-1.0, 1.0, 150)
    numbers = [(kind(2.5), 3), (kind(7.5), 9), (kind(-1.0), 0)]
    with parts_for_small_arrays(count=2, block_bytes=64):
        jf, counted = _fused(_scaled, x, *numbers[0])
        got = [jf(x, s, n) for s, n in numbers]
    assert _calls(counted) > 0 and jf._counts["traces"] == 1
    _assert_same(got, [_scaled(x, s, n) for s, n in numbers])


def _scaled_by_its_max(x):
    m = np.max(x)  # a NumPy scalar computed by the function
    return (x * m + 1.0) * x - np.cos(x)


def test_a_scalar_computed_by_the_function_is_read_at_each_call():
    def make(k):
        x = np.linspace(-1.0, 1.0, 150) * k
        return (x,)

    with parts_for_small_arrays(count=2, block_bytes=64):
        jf, counted = _fused(_scaled_by_its_max, *make(1.0))
        got = [jf(*make(k)) for k in (1.0, 3.0, -2.0)]
    assert _calls(counted) > 0
    _assert_same(got, [_scaled_by_its_max(*make(k)) for k in (1.0, 3.0, -2.0)])


def test_gradient_of_a_product_of_sums_with_values_that_change():
    # the backward pass's scalars (the sums) come into the runs as broadcast arrays, read at each call
    def loss(v, w):
        return np.sum(v * w) * np.sum(v * v) + np.sum(np.sin(v) * w * v)

    def grads(v, w):
        return pb.gradient(loss, v, w)

    v, w = np.linspace(-1.0, 1.0, 150), np.linspace(0.5, 1.5, 150)
    with parts_for_small_arrays(count=2, block_bytes=64):
        jf, counted = _fused(grads, v, w)
        for k in (1.0, 3.0, -0.5):
            _assert_same(jf(v * k, w + k), grads(v * k, w + k))
    assert _calls(counted) > 0


def test_a_python_float_argument_too_large_for_float32_warns_of_the_cast():
    def f(x, s):
        return (x * s + 1.0) * x - np.sin(x)

    _same(f, lambda: (np.linspace(-1.0, 1.0, 150, dtype=np.float32), 1e300), modes=("warn", "ignore"))


@pytest.mark.parametrize("views", ["same", "halves"])  # (overlapping views and a.T: pb.jit refuses, naming it)
def test_in_place_writes_into_an_argument_another_argument_views(views):
    def f(a, b):
        a *= 2.0
        a += 1.0
        return (a * b + b) * (a - b) - np.cos(b) * a

    def make():
        base = np.linspace(-1.0, 1.0, 12 * 12).reshape(12, 12)
        return {"same": (base, base), "halves": (base[:6], base[6:])}[views]

    _same(f, make, modes=("ignore", "warn"))


def test_unaligned_and_read_only_arguments():
    def f(x, y):
        y2 = np.exp(x) * 2.0
        m = np.sum(y2)  # (a segment that warns before the loops)
        return (x * y + 1.0) * x - np.sin(x) * y, m

    def make():
        buf = np.zeros(150 * 8 + 8, np.uint8)
        x = np.ndarray((150,), np.float64, buf, offset=1)  # not aligned
        x[:] = np.linspace(-1.0, 1.0, 150)
        x[5] = 1e200
        y = np.linspace(2.0, 3.0, 150)
        y.flags.writeable = False
        return x, y

    assert not make()[0].flags.aligned
    _same(f, make, modes=("warn", "ignore"))


def test_runs_reading_more_arrays_than_a_loop_takes():
    def f(*xs):
        acc = xs[0] * xs[1]
        for k, x in enumerate(xs[2:]):
            acc = acc * x + x if k % 2 else acc - x * x
        return np.tanh(acc) * acc + xs[0] / (xs[1] * xs[1] + 1.0)

    def make():
        xs = [np.linspace(-1.0, 1.0, 150) * (1.0 + 0.1 * k) for k in range(13)]
        xs[7][[20, 140]] = [1e200, np.nan]  # falls back in two blocks, in the later of the runs
        return tuple(xs)

    _same(f, make, modes=("ignore", "warn", "raise"))


def test_an_argument_written_before_a_run_that_raises():
    def f(x, w):
        x *= 2.0
        x += w  # written into the argument before the run
        y = (x * 1e200) * (x * 1e200) - w
        w *= 0.5  # and after it
        return y * w + x

    def make():
        x = np.linspace(-1.0, 1.0, 150)
        x[[12, 133]] = [1e150, -1e150]
        return x, np.linspace(1.0, 2.0, 150)

    _same(f, make, modes=("raise", "warn", "ignore"))


def test_a_large_closure_constant_of_many_values_written_between_calls_is_read_anew():
    # the contrast to the test above: a constant that is not one value is an array the loop reads
    c = np.full((50, 100), 3.0)
    c[0, 0] = 2.0

    def f(x):
        return np.sin(x) * (x * c - c)

    x = np.linspace(-2.0, 2.0, 5000).reshape(50, 100)
    with parts_for_small_arrays(count=2, block_bytes=800):
        jf, counted = _fused(f, x)
        _assert_same(jf(x), f(x))
        before = _calls(counted)
        c[:] = 5.0
        _assert_same(jf(x), f(x))
    assert _calls(counted) > before


def test_gradient_of_a_normalisation_with_values_that_change():
    def loss(v):
        n = v / np.sum(v * v)
        return np.sum(np.sin(n) * n * v)

    def f(v):
        return pb.withgradient(loss, v)

    v = np.linspace(0.1, 1.0, 150)
    with parts_for_small_arrays(count=2, block_bytes=64):
        jf, counted = _fused(f, v)
        got = [jf(v * k) for k in (1.0, 3.0, 0.5)]
    assert _calls(counted) > 0
    _assert_same(got, [f(v * k) for k in (1.0, 3.0, 0.5)])


def test_a_branch_on_the_values_takes_each_traced_variant():
    def f(x):
        if np.sum(x) > 0:  # a guard: each branch is a trace of its own
            return (x * x - 1.0) * (x + 0.5) - np.sin(x)
        return (x * 3.0 + x) / (x * x + 1.0) + np.cos(x)

    x = np.linspace(-1.0, 2.0, 150)
    with parts_for_small_arrays(count=3, block_bytes=64):
        jf, counted = _fused(f, x)
        with np.errstate(all="ignore"):
            jf(-x)
            jf(-x)
        jf.wait_for_fusion(start=True)
        _count_new(jf, counted)
        for k in range(6):
            y = x * (k + 1) * (-1) ** k
            _assert_same(jf(y), f(y))
    assert len(counted) >= 2 and all(c.calls > 0 for c in counted)


def test_a_returned_intermediate_written_in_place_afterwards():
    def f(x):
        y = x * 2.0 + 1.0
        first = y  # the same array as y: the writes below reach it
        z = y * y - x
        y *= 3.0
        y -= z
        w = np.tanh(y) * y + z
        return first, z, w

    _same(f, lambda: (np.linspace(-1.0, 1.0, 150),), modes=("ignore", "warn"))


def test_threads_calling_while_the_loops_compile_after_twenty_calls():
    def f(x, y):
        a = (x * y + 1.0) * (x - y) + np.sin(x) * 0.25
        return a * a - y / (x * x + 2.0)

    rng = np.random.default_rng(11)
    inputs = [(rng.standard_normal(150), rng.standard_normal(150)) for _ in range(8)]
    inputs[5][1][90] = np.inf
    with np.errstate(all="ignore"):
        wants = [f(*args) for args in inputs]
    with parts_for_small_arrays(count=3, block_bytes=64):
        jf = pb.jit(f)
        failures = _calls_in_threads(jf, inputs, wants, threads=4, rounds=30)
        assert jf.wait_for_fusion() >= 1  # started by the calls themselves
        counted = _count_new(jf, [])
        with np.errstate(all="ignore"):
            for args, want in zip(inputs, wants):
                np.testing.assert_array_equal(jf(*args), want)
    assert not failures
    assert counted and _calls(counted) > 0


def _errstate_inside(x, keep_a=False):
    a = (x * 1e200) * (x * 1e200) - x  # the caller's modes
    with np.errstate(over="ignore", invalid="ignore"):
        b = (a * 1e200) * a + x  # ignored here
    with np.errstate(under="warn"):
        c = (x * 1e-200) * 1e-200 + b  # underflow warned
    return (a * b - c * x, a, b, c) if keep_a else a * b - c * x


def _errstate_inside_keeping_a(x):
    return _errstate_inside(x, keep_a=True)  # (a, b and c are read after: their buffers are not reused)


def _errstate_inside_args():
    x = np.linspace(-1.0, 1.0, 150)
    x[[20, 120]] = [1e150, 1e-150]
    return (x,)


def test_an_errstate_inside_the_function_around_part_of_a_run():
    _same(_errstate_inside_keeping_a, _errstate_inside_args, modes=("warn", "ignore"), warm=True)


def test_an_errstate_inside_the_function_and_a_result_in_an_inputs_buffer():
    _same(_errstate_inside, _errstate_inside_args, modes=("warn", "ignore"), warm=True)


def test_in_place_writes_through_views_of_intermediates():
    def f(x):
        y = x * 2.0 + 1.0
        v = y[::2]  # a view of the run's result
        v *= 3.0
        z = (y * y - x) * y
        z[:, :5] = 0.0  # (a write through z.reshape(-1) pb.jit refuses, naming it)
        return z * x + np.sin(z), y

    _same(f, lambda: (np.linspace(-1.0, 1.0, 12 * 13).reshape(12, 13),), modes=("ignore", "warn"))
