"""Probes of two pieces of `pb.jit`, each result checked against the same function run without it.

1. Segments run in parts and blocks with per-thread scratch (`pullback._jit_parallel`, `_emit_segment`
   in `pullback._jit_replay`): chains of elementwise ufunc calls over several dtypes and layouts, few
   rows, 0-d operands, views of intermediates, in-place writes, aliased arguments, floating-point
   errors met in several blocks under every `np.errstate` mode, gradients, threads, and alternating
   sizes (the scratch sized for one size, then another).
2. The plain-arguments signature (`_plain_signature` in `pullback._jit`): arrays and Python numbers in
   lists, tuples and dicts, where a wrong signature would replay a program traced for another
   structure (the same array twice, list or tuple, key order and types, int/float/bool, nested empty
   containers, mutated lists, dtype/shape/order, containers handed back, training steps, kwargs).

The `xfail(strict=True)` tests are bugs found here: they say how the code should behave.
"""

import contextlib
import re
import sys
import threading
import warnings

import numpy as np
import pytest

import pullback as pb
from test_jit import _sources, parts_for_small_arrays


def _segmented(jitted, scratch=False):
    sources = "\n".join(_sources(jitted))
    return "parts(" in sources and (not scratch or "_scratch.take(n)" in sources)


def _run(fn, *args, **kwargs):
    """(result or ('raised', type, message), [(category, message)]) of `fn(*args, **kwargs)`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fn(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - compared with the plain call's
            result = ("raised", type(error), str(error))
    return result, [(w.category, str(w.message)) for w in caught]


def _raised(result):
    return type(result) is tuple and len(result) == 3 and isinstance(result[0], str) and result[0] == "raised"


def _assert_same(got, want):
    """Equal structures, types, dtypes and bits (NaNs in the same places)."""
    if isinstance(want, np.ndarray):
        assert type(got) is np.ndarray, type(got)
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
        np.testing.assert_array_equal(got, want)
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), (type(got), type(want))
        for g, w in zip(got, want):
            _assert_same(g, w)
    elif isinstance(want, dict):
        assert type(got) is dict and list(got) == list(want)
        for k in want:
            _assert_same(got[k], want[k])
    elif isinstance(want, type):
        assert got is want
    else:
        assert type(got) is type(want) and (got == want or (got != got and want != want)), (got, want)


def _compare(f, make_args, calls=3, mode="ignore", scratch=None, raises=False, **parts):
    """Calls `pb.jit(f)` (in parts) and `f` on fresh `make_args(i)` for i < calls under `np.errstate(all=mode)`,
    and checks that results, warnings and the arguments afterwards are the same (and, unless `raises`, that
    `f` returned); returns the jitted function."""
    with parts_for_small_arrays(**parts):
        jf = pb.jit(f)
        for i in range(calls):
            mine, theirs = make_args(i), make_args(i)
            with np.errstate(all=mode):
                got, got_warned = _run(jf, *mine)
                want, want_warned = _run(f, *theirs)
            assert raises or not _raised(want), want
            _assert_same(got, want)
            assert got_warned == want_warned
            _assert_same(list(mine), list(theirs))  # the same effect on the arguments
    if scratch is not None:
        assert _segmented(jf, scratch)
    return jf


def _x(shape=(7, 3), dtype=np.float64, seed=0, scale=2.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


# --- segments: values, dtypes and layouts ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex128])
def test_a_chain_whose_forward_values_live_in_scratch_matches_eager(dtype):
    def f(x):
        y = np.sin(x) * 2.0
        z = np.exp(y) + x
        w = np.tanh(z) * y
        return w - np.cos(y)

    _compare(f, lambda i: (_x(dtype=dtype, seed=i),), scratch=True)


@pytest.mark.parametrize("count, block_bytes", [(2, 8), (3, 16), (4, 40), (5, 1 << 20)])
def test_uneven_parts_and_blocks_match_eager(count, block_bytes):
    def f(x, b):
        y = np.tanh(x * 1.5 + b)
        return np.sin(y) * y - np.cos(x)

    b = np.linspace(-1.0, 1.0, 3)
    _compare(f, lambda i: (_x((11, 3), seed=i), b), count=count, block_bytes=block_bytes, scratch=True)


def test_float16_int_bool_and_complex_mixed_in_one_segment():
    def f(x, k, m):
        y = x * k  # float16 times int8: float16
        z = y + m  # plus bool
        w = z / 3  # true divide, Python int
        c = w * (1 + 2j)  # complex
        return c.real + np.abs(c), y, np.sqrt(w)

    def make(i):
        return _x(dtype=np.float16, seed=i), np.arange(21, dtype=np.int8).reshape(7, 3) - 10, _x(seed=i + 7) > 0

    _compare(f, make, mode="warn", scratch=True)


def test_integer_segments_warn_on_division_by_zero_met_in_several_blocks():
    def f(a, b):
        q = (a + b) // b  # zeros of b in several blocks and parts
        r = (a * 3) % b
        return q - r, a < b

    def make(i):
        b = np.arange(24, dtype=np.int64).reshape(8, 3) % (3 + i)
        return np.arange(24, dtype=np.int64).reshape(8, 3) - 12, b

    _compare(f, make, mode="warn", scratch=True)


@pytest.mark.parametrize("layout", ["F", "broadcast", "reversed-rows", "reversed-both", "strided", "big-endian"])
def test_operands_of_every_layout_match_eager(layout):
    def lay(a):
        if layout == "F":
            return np.asfortranarray(a)
        if layout == "broadcast":
            return np.broadcast_to(a[:1], a.shape)
        if layout == "reversed-rows":
            return a[::-1]
        if layout == "reversed-both":
            return a[::-1, ::-1]
        if layout == "strided":
            return np.repeat(a, 2, axis=1)[:, ::2]
        return a.astype(">f8")

    def f(x, y):
        u = np.exp(x) * y
        return np.log1p(np.abs(u)) + np.arctan2(u, x)

    _compare(f, lambda i: (lay(_x((7, 3), seed=i)), _x((7, 3), seed=i + 5)), scratch=True)


@pytest.mark.parametrize("shape, count", [((2, 5), 4), ((3, 2, 2), 4), ((1, 5), 3), ((4,), 3), ((5, 1), 2)])
def test_fewer_rows_than_parts_and_single_rows_match_eager(shape, count):
    def f(x, y):
        return np.sin(x) * y + np.cos(y) * x

    _compare(f, lambda i: (_x(shape, seed=i), _x(shape, seed=i + 3)), count=count)


def test_zero_d_operands_are_read_whole():
    def f(x, s, t):
        y = np.sin(x) * s + t
        return np.exp(y) - s, y

    _compare(f, lambda i: (_x((6, 2), seed=i), np.array(1.5 + i), np.float32(0.25)), scratch=True)


def test_a_constant_array_of_the_results_shape_is_read_by_rows():
    def f(x):
        c = np.arange(21.0).reshape(7, 3)  # a constant of the trace, of the result's shape
        y = np.sin(x) * c
        return y * y + c

    jf = _compare(f, lambda i: (_x(seed=i),), scratch=True)
    assert re.search(r"= c\d+_\d+\[a:z\]", "\n".join(_sources(jf)))  # the constant read by rows


# --- segments: views, writes, aliases ---------------------------------------------------------------------


def test_views_of_intermediates_returned_or_read_later():
    def f(x):
        y = np.sin(x) * 2.0
        head = y[1:]  # a view handed out
        t = y.T  # a view read after the segment
        z = np.exp(y) + 1.0
        return head, z * t.T, t

    _compare(f, lambda i: (_x(seed=i),), scratch=False)


def test_in_place_writes_into_arguments_and_intermediates():
    def f(x, out):
        x *= 2.0  # an argument written
        y = np.sin(x)
        y *= 3.0  # an intermediate written in place
        y += x
        np.exp(y, out=out)  # into an argument through out=
        z = np.cos(out) + y
        z -= 1.0
        return z

    _compare(f, lambda i: (_x(seed=i), np.zeros((7, 3))), scratch=False)


def test_an_argument_written_before_a_segment_is_read_at_its_new_value():
    def f(x):
        x[0] = 5.0
        x[:, 1] += 1.0
        return np.sin(x) * x + np.cos(x)

    _compare(f, lambda i: (_x(seed=i),), scratch=True)


def test_a_raise_in_a_segment_leaves_the_argument_written_as_numpy_does():
    def f(x):
        x += 1.0  # written, then a segment that raises in one block
        return np.log(x) * 2.0 + x

    def make(i):
        x = np.abs(_x(seed=i)) + 1.0
        x[5, 2] = -5.0 if i else 1.0  # the first call traces on good values
        return (x,)

    _compare(f, make, mode="raise", scratch=False, raises=True)


@pytest.mark.parametrize("alias", ["same", "reversed", "equal copies"])
def test_aliased_arguments_read_in_a_segment(alias):
    def f(x, y):
        return np.sin(x) * y + np.cos(y) - x

    def make(i):
        a = _x(seed=i)
        return (a, a) if alias == "same" else (a, a[::-1]) if alias == "reversed" else (a, a.copy())

    _compare(f, make, scratch=True)


# --- segments: floating-point errors ------------------------------------------------------------------------


def _errors_function(x):
    y = np.exp(x)  # overflow at 800
    z = np.log(x)  # divide by zero at 0, invalid below
    return y * z + np.sqrt(x)


_ERRORS_X = np.array([[-1.0, 0.0], [1.0, 2.0], [800.0, 3.0], [4.0, -2.0], [0.0, 900.0], [5.0, 6.0], [7.0, -3.0]])


@pytest.mark.parametrize("mode", ["warn", "raise", "ignore", "call", "log"])
def test_errors_met_in_several_blocks_under_each_errstate_mode(mode):
    seen = []

    class Log:
        def write(self, message):
            seen.append(message)

    def run(fn):
        seen.clear()
        old = np.seterrcall(Log() if mode == "log" else (lambda kind, flag: seen.append(kind)))
        try:
            with np.errstate(all=mode):
                result = _run(fn, _ERRORS_X.copy())
        finally:
            np.seterrcall(old)
        return result, list(seen)

    with parts_for_small_arrays(count=3, block_bytes=16):
        jf = pb.jit(_errors_function)
        with np.errstate(all="ignore"):
            jf(_ERRORS_X + 0.5)
            jf(_ERRORS_X + 0.5)
        assert _segmented(jf)
        got = [run(jf) for _ in range(2)]
    want = run(_errors_function)
    for (result, warned), called in got:
        _assert_same(result, want[0][0])
        assert warned == want[0][1]
        assert called == want[1]
    if mode == "warn":  # one warning per call and error, in the order of the calls
        assert [m for _, m in want[0][1]] == ["overflow encountered in exp", "divide by zero encountered in log",
                                              "invalid value encountered in log", "invalid value encountered in sqrt"]


def test_warnings_turned_into_errors_raise_the_first_calls_warning():
    with parts_for_small_arrays():
        jf = pb.jit(_errors_function)
        with np.errstate(all="ignore"):
            jf(_ERRORS_X + 0.5)
            jf(_ERRORS_X + 0.5)
        for fn in (jf, _errors_function):
            with warnings.catch_warnings(), np.errstate(all="warn"):
                warnings.simplefilter("error")
                with pytest.raises(RuntimeWarning, match="overflow encountered in exp"):
                    fn(_ERRORS_X.copy())


def test_print_mode_prints_once_per_call_and_error(capfd):
    with parts_for_small_arrays(count=3, block_bytes=16):
        jf = pb.jit(_errors_function)
        with np.errstate(all="ignore"):
            jf(_ERRORS_X + 0.5)
            jf(_ERRORS_X + 0.5)
        capfd.readouterr()
        with np.errstate(all="print"):
            jf(_ERRORS_X.copy())
        got = capfd.readouterr()
    with np.errstate(all="print"):
        _errors_function(_ERRORS_X.copy())
    want = capfd.readouterr()
    assert want.out + want.err  # NumPy printed something
    assert (got.out, got.err) == (want.out, want.err)


def test_an_error_callback_that_calls_the_jitted_function_again():
    def f(x):
        y = np.exp(x)  # overflow in row 1: the callback runs between exp and sin
        w = np.sin(y) + 1.0
        return w * x

    x = np.array([[1.0, 2.0], [800.0, 3.0], [4.0, 5.0], [6.0, 7.0]])
    other = np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8]])

    def run(fn):
        inner = []

        def callback(kind, flag):
            if not inner:
                inner.append(fn(other))

        with np.errstate(all="call", under="ignore", call=callback):
            return fn(x), inner[0]

    with parts_for_small_arrays():
        jf = pb.jit(f)
        jf(other)
        jf(other)
        got = run(jf)
        assert _segmented(jf, scratch=True)
    want = run(f)
    _assert_same(list(got), list(want))


def _warn_then_raise(x):
    y = np.exp(x) * 2.0  # overflow: warned (or called back)
    s = y.sum()
    return np.log(y - y) + s  # invalid in the subtraction, then log(0): raised


@pytest.mark.xfail(strict=True, reason="a replay that raises is followed by a trace of the call (to take the "
                                       "function's own branch for the error, or raise it): the warnings and error-callback "
                                       "calls of the calls before the raise come twice")
@pytest.mark.parametrize("in_parts", [False, True])
def test_warnings_before_a_raising_call_are_given_once(in_parts):
    x = np.array([[1.0, 2.0], [800.0, 3.0], [4.0, 5.0], [6.0, 7.0]])

    def run(fn):
        called = []
        with np.errstate(over="call", invalid="warn", divide="raise", call=lambda kind, flag: called.append(kind)):
            return _run(fn, x), called

    with parts_for_small_arrays() if in_parts else contextlib.nullcontext():
        jf = pb.jit(_warn_then_raise)
        with np.errstate(all="ignore"):
            jf(x)
            jf(x)
        got = run(jf)
    want = run(_warn_then_raise)
    assert want == ((("raised", FloatingPointError, "divide by zero encountered in log"),
                     [(RuntimeWarning, "invalid value encountered in subtract")]), ["overflow"])
    assert got == want


@pytest.mark.xfail(strict=True, reason="a replay that raises is followed by a trace of the call (to take the "
                                       "function's own branch for the error, or raise it): an np.errstate 'call' callback "
                                       "that raises is called twice")
@pytest.mark.parametrize("in_parts", [False, True])
def test_an_error_callback_that_raises_is_called_once(in_parts):
    def f(x):
        return np.exp(x) * 2.0

    x = np.array([[1.0, 2.0], [800.0, 3.0], [4.0, 5.0]])
    calls = []

    def stop(kind, flag):
        calls.append(kind)
        raise ValueError(f"stop: {kind}")

    with parts_for_small_arrays() if in_parts else contextlib.nullcontext():
        for fn in (pb.jit(f), f):
            fn(np.ones((3, 2)))
            fn(np.ones((3, 2)))
            with np.errstate(over="call", call=stop), pytest.raises(ValueError, match="stop: overflow"):
                fn(x)
    assert calls == ["overflow", "overflow"]  # once under pb.jit, once without


@pytest.mark.xfail(strict=True, reason="under Python's default warning filter (once per place), a trace's NumPy warnings "
                                       "are all given at one line of pullback/_jit_trace.py: the second function's is lost")
def test_default_warning_filter_gives_each_functions_warning():
    def f(x):
        return np.exp(x) * 2.0

    def g(x):
        return np.exp(x) + 1.0

    x = np.array([1.0, 800.0])
    counts = []
    for first, second in ((pb.jit(f), pb.jit(g)), (f, g)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            first(x)
            second(x)
        counts.append(len(caught))
    assert counts[1] == 2
    assert counts[0] == counts[1]


@pytest.mark.xfail(strict=True, reason="NumPy's warnings under pb.jit are given at pullback's lines (_jit_trace.py, the "
                                       "generated program, a part function), so a filter by the caller's module misses them")
@pytest.mark.parametrize("in_parts", [False, True])
def test_a_warning_filter_by_the_callers_module_applies_under_jit(in_parts):
    def f(x):
        return np.exp(x) * 2.0

    x = np.array([[1.0, 800.0], [2.0, 3.0], [4.0, 900.0]])
    counts = []
    with parts_for_small_arrays() if in_parts else contextlib.nullcontext():
        for fn in (pb.jit(f), f):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                warnings.filterwarnings("ignore", category=RuntimeWarning, module=re.escape(__name__))
                for _ in range(3):
                    fn(x)
            counts.append(len(caught))
    assert counts == [0, 0]


@pytest.mark.parametrize("in_parts", [False, True])
def test_a_python_float_too_large_for_float16_warns_at_every_call(in_parts):
    def f(x):
        return np.sin(x) * 1e5 + 1.0  # 1e5 is inf in float16: NumPy warns of the cast at each call

    x = np.linspace(0.0, 1.0, 12).astype(np.float16).reshape(4, 3)
    want = _run(f, x)
    assert (RuntimeWarning, "overflow encountered in cast") in want[1]
    with parts_for_small_arrays() if in_parts else contextlib.nullcontext():
        jf = pb.jit(f)
        for _ in range(3):
            got = _run(jf, x)
            _assert_same(got[0], want[0])
            assert got[1] == want[1]


def _numpy_kernel_depends_on_block(x):
    """Whether NumPy's exp gives other bits for the 1-row slices of `x` than for the whole of it."""
    whole = np.exp(x)
    return any(np.exp(x[i:i + 1])[0, 0] != whole[i, 0] for i in range(len(x)))


def test_a_reversed_column_cut_into_one_row_blocks_gives_numpys_bits():
    base = np.linspace(0.3, 0.9, 4001)
    column = base.reshape(-1, 1)[::-1]
    if not _numpy_kernel_depends_on_block(column):
        pytest.skip("NumPy's exp gives the same bits for any stride on this machine")

    def f(x):
        return np.exp(x) * 2.0

    with parts_for_small_arrays(count=2, block_bytes=8):  # one row a block
        jf = pb.jit(f)
        jf(column)
        got = jf(column)
        assert _segmented(jf)
    np.testing.assert_array_equal(got, f(column))


# --- segments: gradients, threads, sizes --------------------------------------------------------------------


def _chain(x):
    y = np.tanh(x) * np.sin(x) + np.exp(-x * x)
    return np.sum(y * y)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_gradients_of_an_elementwise_chain(dtype):
    _compare(lambda x: pb.withgradient(_chain, x), lambda i: (_x(dtype=dtype, seed=i),), scratch=True)
    _compare(lambda x: pb.gradient(_chain, x), lambda i: (_x(dtype=dtype, seed=i),), scratch=True)


def test_jvp_and_hessian_of_an_elementwise_chain():
    _compare(lambda x, v: pb.jvp(lambda a: np.tanh(a) * np.sin(a), (x,), (v,)), lambda i: (_x(seed=i), _x(seed=i + 9)), scratch=False)
    _compare(lambda x: pb.hessian(_chain, x), lambda i: (_x((3, 2), seed=i),), scratch=False)


def test_gradient_of_a_list_of_parameters_with_overflow_warnings():
    def loss(ps, x):
        w, b = ps
        return np.sum(np.exp(x * w + b) * w)

    _compare(lambda ps, x: pb.withgradient(loss, ps, x),
             lambda i: ([_x(seed=i), _x((3,), seed=i + 1)], _x(seed=i + 2) * 300.0), mode="warn", scratch=True)


def test_alternating_sizes_reuse_and_regrow_the_scratch():
    def f(x):
        y = np.sin(x) * 2.0
        return np.exp(y) * y + x

    sizes = [1, 2, 9, 3, 33, 2, 9, 1, 33]
    xs = [_x((n, 3), seed=n) for n in sizes]
    with parts_for_small_arrays(count=3, block_bytes=48):
        jf = pb.jit(f)
        for x in xs + xs[::-1]:
            _assert_same(jf(x), f(x))
        assert _segmented(jf, scratch=True)


def test_several_threads_call_one_jitted_function_with_several_sizes():
    def f(x, b):
        y = np.tanh(x * 1.5 + b)
        return np.sin(y) * y - np.cos(x)

    b = np.linspace(-1.0, 1.0, 3)
    # more than 64 elements each: called more than 20 times, a replay of small arrays is fused with numba,
    # which computes with the C library's functions, not NumPy's (see docs/jit.md)
    xs = [_x((n, 3), seed=n) for n in (22, 25, 30, 41, 23, 64)]
    want = [f(x, b) for x in xs]
    failures = []
    with parts_for_small_arrays(count=3, block_bytes=24):
        jf = pb.jit(f)
        for x in xs:
            jf(x, b)

        def work(t):
            try:
                for k in range(60):
                    j = (t + k) % len(xs)
                    if not np.array_equal(jf(xs[j], b), want[j]):
                        failures.append((t, k, j))
            except Exception as error:  # noqa: BLE001 - reported below
                failures.append(repr(error))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # threads taking turns between any two NumPy calls
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            sys.setswitchinterval(interval)
        assert _segmented(jf, scratch=True)
    assert failures == []


# --- the plain-arguments signature --------------------------------------------------------------------------


def _compare_calls(f, arguments, rounds=2, raises=False):
    """`pb.jit(f)` and `f` called on each of `arguments` (functions making fresh `(args, kwargs)`), in turn, twice:
    the same results and the same arguments afterwards."""
    jf = pb.jit(f)
    for _ in range(rounds):
        for make in arguments:
            (args, kwargs), (args2, kwargs2) = make(), make()
            got, got_warned = _run(jf, *args, **kwargs)
            want, want_warned = _run(f, *args2, **kwargs2)
            assert raises or not _raised(want), want
            _assert_same(got, want)
            assert got_warned == want_warned
            _assert_same([args, kwargs], [args2, kwargs2])
    return jf


def _a(*values):
    return np.array(values, dtype=float)


def test_the_same_array_twice_is_not_two_equal_arrays():
    def f(xs):
        xs[0] += 1.0  # a write seen through the second element when it is the same array
        return xs[1] * 2.0

    def twice():
        a = _a(1, 2)
        return ([[a, a]], {})

    _compare_calls(f, [lambda: ([[_a(1, 2), _a(1, 2)]], {}), twice])
    # in a tuple: the array is written, then the tuple's item assignment raises TypeError
    _compare_calls(f, [lambda: ([(_a(1, 2), _a(1, 2))], {})], raises=True)

    def g(d):
        d["x"] *= 3.0
        return d["y"] + 1.0

    def same_in_dict():
        a = _a(1, 2)
        return ([{"x": a, "y": a}], {})

    _compare_calls(g, [lambda: ([{"x": _a(1, 2), "y": _a(1, 2)}], {}), same_in_dict])


def test_lists_tuples_and_dict_keys_are_told_apart():
    def f(xs, d):
        return type(xs), xs[0] + xs[-1], list(d), [type(k) for k in d], [v * 2 for v in d.values()]

    _compare_calls(f, [
        lambda: ([[_a(1), _a(2)], {"a": _a(1), "b": _a(2)}], {}),
        lambda: ([(_a(1), _a(2)), {"b": _a(2), "a": _a(1)}], {}),
        lambda: ([[_a(1), _a(2)], {1: _a(1), 2: 3.0}], {}),
        lambda: ([[_a(1), _a(2)], {1.0: _a(1), 2: 3.0}], {}),
        lambda: ([[_a(1), _a(2)], {True: _a(1), 2: 3.0}], {}),
    ])


def test_ints_floats_and_bools_in_containers():
    def f(xs, a):
        kinds = [(isinstance(v, bool), isinstance(v, int), isinstance(v, float)) for v in xs]
        return kinds, [a * v for v in xs], [v * 3 for v in xs]

    ints = np.arange(4, dtype=np.int8)
    _compare_calls(f, [
        lambda: ([[1, 2.0], ints], {}),
        lambda: ([[1.0, 2], ints], {}),
        lambda: ([[True, 2], ints], {}),
        lambda: ([[1, 2], ints], {}),
        lambda: ([[1, 2], ints.astype(np.float32)], {}),
        lambda: ([[2 ** 40, 1], ints.astype(np.int64)], {}),
    ])


def test_nested_empty_containers():
    def f(x, xs):
        return repr(xs), len(xs[0]), x * len(xs[1])

    _compare_calls(f, [
        lambda: ([_a(1), [[], ()]], {}),
        lambda: ([_a(1), [(), []]], {}),
        lambda: ([_a(1), [{}, []]], {}),
        lambda: ([_a(1), [[[]], []]], {}),
        lambda: ([_a(1), [[], [[]]]], {}),
        lambda: ([_a(1), [[], [{}]]], {}),
    ])


def test_a_list_changed_between_calls():
    def f(xs):
        return [x * 2 for x in xs], len(xs)

    jf = pb.jit(f)
    xs = [_a(1), _a(2)]
    changes = [lambda: xs.append(_a(3)), lambda: xs.__setitem__(0, _a(7, 8)), lambda: xs.__setitem__(1, 5.0),
               lambda: xs.__setitem__(1, 5), lambda: xs.pop(), lambda: xs.__setitem__(0, np.arange(2))]
    for change in [lambda: None] + changes:
        change()
        _assert_same(jf(xs), f(xs))


@pytest.mark.parametrize("wrap", [False, True])
def test_an_arrays_dtype_shape_and_order_make_another_signature(wrap):
    def f(x):
        if isinstance(x, list):
            x = x[0]
        return x.T.reshape(-1), np.sin(x) * 2, x.dtype, x.shape  # the first a view of x or a copy, by x's order

    base = np.arange(6.0).reshape(2, 3)
    arrays = [lambda: base.copy(), lambda: np.asfortranarray(base), lambda: base.astype(np.float32),
              lambda: base.reshape(3, 2).copy(), lambda: np.repeat(base, 2, axis=1)[:, ::2], lambda: base.astype(">f8"),
              lambda: np.asfortranarray(base.reshape(3, 2))]
    jf = pb.jit(f)
    for _ in range(2):
        for make in arrays:
            mine, theirs = make(), make()
            got, want = jf([mine] if wrap else mine), f([theirs] if wrap else theirs)
            _assert_same(got, want)
            got[0][0] = -1.0  # reaches the argument where the result is a view of it
            want[0][0] = -1.0
            _assert_same(mine, theirs)


@pytest.mark.parametrize("wrap", [False, True])
def test_structured_dtypes_of_one_size_are_different_signatures(wrap):
    def f(x):
        if isinstance(x, list):
            x = x[0]
        return x["a"] * 2 + 1

    floats = np.zeros(3, [("a", "<f8"), ("b", "<f8")])
    floats["a"] = 1.5
    ints = np.zeros(3, [("a", "<i8"), ("b", "<f8")])
    ints["a"] = 7
    jf = pb.jit(f)
    for x in (floats, floats, ints):
        _assert_same(jf([x] if wrap else x), f(x))


def test_argument_containers_handed_back_are_the_callers():
    def f(a, b, ps):
        return b, a, [p * 2 for p in ps], ps

    jf = pb.jit(f)
    for _ in range(3):
        l1, l2, ps = [_a(1)], (_a(2),), [_a(3), _a(4)]
        out = jf(l1, l2, ps)
        assert out[0] is l2 and out[1] is l1 and out[3] is ps
        _assert_same(out[2], [_a(6), _a(8)])
        out = jf(ps, l1, l2)  # another signature: the containers by their new places
        assert out[0] is l1 and out[1] is ps and out[3] is l2
        _assert_same(out[2], [_a(4)])


def test_a_training_step_passing_its_parameters_through():
    def loss(ps, x):
        return np.sum(np.tanh(x * ps[0] + ps[1]) ** 2)

    def step(ps, x, lr):
        g = pb.gradient(loss, ps, x)[0]
        for p, gp in zip(ps, g):
            p -= lr * gp
        return ps, loss(ps, x)

    jf = pb.jit(step)
    mine, theirs = [_x((5, 3), seed=1), _x((3,), seed=2)], [_x((5, 3), seed=1), _x((3,), seed=2)]
    for k in range(4):
        x = _x((5, 3), seed=10 + k)
        lr = 0.1 if k % 2 else 0.05
        got, want = jf(mine, x, lr), step(theirs, x, lr)
        assert got[0] is mine
        _assert_same(mine, theirs)
        _assert_same(got[1], want[1])


def test_optim_update_with_a_list_of_parameters():
    def loss(ps, x):
        return np.sum(np.sin(x * ps[0]) + ps[1] ** 2)

    def train(state, ps, x):
        g = pb.gradient(loss, ps, x)[0]
        return pb.optim.update(state, ps, g)

    results = []
    for fn in (pb.jit(train), train):
        ps = [_x((4,), seed=1), _x((4,), seed=2)]
        state = pb.optim.setup(pb.optim.Adam(0.01), ps)
        for k in range(4):
            state, ps = fn(state, ps, _x((4,), seed=20 + k))
        results.append(ps)
    _assert_same(results[0], results[1])


def test_keyword_arguments_by_name_order_and_type():
    def f(x, *, scale=1.0, ps=()):
        return x * scale + sum(ps), [np.shape(p) for p in ps]

    _compare_calls(f, [
        lambda: ([_a(1, 2)], {"scale": 2.0}),
        lambda: ([_a(1, 2)], {"scale": 2}),
        lambda: ([_a(1, 2)], {"ps": [_a(1, 1), 2.0]}),
        lambda: ([_a(1, 2)], {"ps": [_a(1, 1), 2.0], "scale": 3.0}),
        lambda: ([_a(1, 2)], {"scale": 3.0, "ps": (_a(1, 1), 2)}),
        lambda: ([], {"x": _a(1, 2), "scale": np.float32(3.0)}),
    ])


def test_python_ints_beyond_an_arrays_range_raise_as_numpy_does():
    def f(xs, n):
        return xs[0] * n, xs[1] + n

    ints, floats = np.arange(4, dtype=np.int8), np.ones(2)
    _compare_calls(f, [(lambda n=n: ([[ints, floats], n], {})) for n in (2, 300, 2 ** 70, -129, 1.5, float("nan"), 127)],
                   raises=True)


def test_an_array_passed_itself_and_inside_a_list():
    def f(x, xs):
        x += 1.0  # seen through xs[0] when it is x
        return xs[0] * 2.0

    def itself():
        a = _a(1, 2)
        return ([a, [a]], {})

    _compare_calls(f, [itself, lambda: ([_a(1, 2), [_a(1, 2)]], {}), itself])


def test_containers_nested_in_arguments_handed_back():
    def f(d, t):
        return d["ps"], d, t[1], [p * 2 for p in d["ps"]]

    jf = pb.jit(f)
    for _ in range(3):
        ps, inner = [_a(1, 1), _a(0)], [_a(1)]
        d, t = {"ps": ps, "k": 1.0}, (_a(1), inner)
        out = jf(d, t)
        assert out[0] is ps and out[1] is d and out[2] is inner
        _assert_same(out[3], [_a(2, 2), _a(0)])


def test_a_function_that_changes_an_argument_list_is_refused_by_name():
    def f(ps):
        ps.append(ps[0] * 2)
        return ps

    ps = [_a(1, 2)]
    with pytest.raises(pb.JitError, match=r"changed args\[0\]\[1\]"):
        pb.jit(f)(ps)
    _assert_same(ps, [_a(1, 2)])  # left as it was found
