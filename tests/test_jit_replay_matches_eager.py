"""pb.jit replays compute what the eager call computes (or refuse with a JitError): memory orders, views,
read-only results, value-decided shapes and dtypes, Python-number types, in-place methods, writes made before
an exception (also in parallel segments, into read-only arguments, and before a BaseException), errors raised
by unused calls (numpy.linalg's, indexing by a traced index), under np.errstate and under warnings filters
set inside. Each test asserts eager's result."""

import warnings

import numpy as np
import pytest

import pullback as pb
from pullback import _jit_replay


def _fused(jitted, *args):
    """Call `jitted` often enough to be fused, and wait for its fused version."""
    pytest.importorskip("numba")
    for _ in range(_jit_replay.FUSE_AFTER_CALLS + 1):
        jitted(*args)
    jitted.wait_for_fusion(timeout=120)  # fused, or left unfused where fusing would change the result


def test_a_fused_result_traced_in_fortran_order_reshaped_is_not_overwritten_by_the_next_call():
    # the fused kernel's result is a C-ordered row of its slab; the reshape, a copy at the trace,
    # is a view of the slab at the replay, and the next call overwrites it
    jf = pb.jit(lambda a: (np.sin(a.T) * 2.0 + 1.0).reshape(-1))
    _fused(jf, np.ones((3, 4)))
    first = jf(np.zeros((3, 4)))
    jf(np.ones((3, 4)))
    np.testing.assert_array_equal(first, np.ones(12))


def test_a_fused_result_traced_in_fortran_order_written_in_place_is_not_overwritten_by_the_next_call():
    def f(a):
        v = np.sin(a.T) * 2.0 + 1.0
        v[0] = 5.0
        return v

    jf = pb.jit(f)
    _fused(jf, np.ones((3, 4)))
    first = jf(np.zeros((3, 4)))
    jf(np.ones((3, 4)))
    np.testing.assert_array_equal(first, f(np.zeros((3, 4))))


def _write_through_reshape(a):
    v = np.sin(a.T) * 2.0 + 1.0
    r = v.reshape(-1)  # v is Fortran-ordered: a copy
    r[0] = 100.0
    return v, r


def test_a_write_into_a_reshaped_copy_of_a_fused_fortran_ordered_result_leaves_the_result():
    jf = pb.jit(_write_through_reshape)
    _fused(jf, np.ones((3, 4)))
    v, r = jf(np.ones((3, 4)))
    ev, er = _write_through_reshape(np.ones((3, 4)))
    np.testing.assert_array_equal(r, er)
    np.testing.assert_array_equal(v, ev)


def test_a_write_into_a_reshaped_copy_of_a_split_fortran_ordered_result_leaves_the_result():
    # large arrays: the segment's result is made C-ordered (`empty`), so the reshape is a view at the replay
    if _jit_replay.PARTS.count < 2:
        pytest.skip("one core: no split segments")
    jf = pb.jit(_write_through_reshape)
    a = np.ones((400, 400))
    jf(a)
    v, r = jf(a)
    ev, er = _write_through_reshape(a.copy())
    assert v[0, 0] == ev[0, 0]


def test_distinct_arguments_sharing_memory_at_a_replay_see_each_other_s_writes_as_eagerly():
    # traced with separate arrays; replayed with a view of the first as the second
    def f(a, b):
        a[1:] = 5.0
        b[:2] = 7.0
        return a + b

    jf = pb.jit(f)
    jf(np.zeros(4), np.zeros(4))
    jf(np.zeros(4), np.zeros(4))
    x = np.zeros(4)
    with pytest.raises(pb.JitError, match="share memory"):  # eager gives [7, 7, 5, 5]; the replay [7, 7, 0, 0]
        jf(x, x[:])
    np.testing.assert_array_equal(x, np.zeros(4))  # refused before anything is written
    with pytest.raises(pb.JitError, match="shares? memory"):  # and so is a trace with such arguments
        pb.jit(f)(x, x[:])
    np.testing.assert_array_equal(x, np.zeros(4))


@pytest.mark.parametrize("x, traced, replayed", [
    (np.ones(3), 4.0, -4.0),  # float ** 0.5 of a negative float is complex in Python
    (np.arange(3), 1, -1),  # int ** negative int is a float
])
def test_python_number_arithmetic_whose_type_changes_replays_as_eagerly(x, traced, replayed):
    def f(x, n):
        return (x * 2) * (n ** 0.5 if isinstance(n, float) else 2 ** n)

    jf = pb.jit(f)
    jf(x, traced)
    jf(x, traced)
    np.testing.assert_allclose(jf(x, replayed), f(x, replayed))  # jit: UFuncTypeError (out= buffer of the trace's dtype)


def test_a_write_through_a_view_that_only_fortran_order_makes_replays_as_eagerly():
    # traced C-ordered, then given the same shape Fortran-ordered: eagerly v is Fortran-ordered,
    # v.T.reshape(-1) is a view and the write changes v; the replay computes v into a C-ordered buffer
    def f(x):
        v = np.sin(x)
        r = v.T.reshape(-1)
        r[0] = 100.0
        return v

    jf = pb.jit(f)
    jf(np.ones((3, 4)))
    jf(np.ones((3, 4)))
    x = np.asfortranarray(np.ones((3, 4)))
    # the memory order is part of the signature: a Fortran-ordered argument is traced anew, and that
    # trace refuses the write through a view that NumPy's order makes (the replay could not follow it)
    with pytest.raises(pb.JitError, match="shares memory with another"):
        jf(x)
    np.testing.assert_array_equal(jf(np.ones((3, 4))), f(np.ones((3, 4))))


@pytest.mark.parametrize("f", [
    lambda x: x[x > 0] * 2.0 + 1.0,  # boolean-mask indexing
    lambda x: np.unique(x) * 2.0 + 1.0,
    lambda x: np.sin(x[np.nonzero(x)]) * 2.0,
    lambda x: pb.gradient(lambda x: np.sum(x[x > 0] ** 2), x)[0],
])
def test_a_result_whose_shape_depends_on_values_replays_as_eagerly(f):
    # the trace's shape is planned into out= buffers; a call with another count raises ValueError
    jf = pb.jit(f)
    jf(np.array([1.0, -1.0, 0.0]))
    jf(np.array([1.0, -1.0, 0.0]))
    x = np.array([1.0, 1.0, 2.0])
    np.testing.assert_allclose(jf(x), f(x.copy()))


def test_a_fused_result_whose_shape_depends_on_values_replays_as_eagerly():
    # fused with the trace's element count: fewer elements read past the array's end (silently)
    f = lambda x: np.sin(np.cos(x[x > 0]) * 2.0) + 1.0  # noqa: E731
    jf = pb.jit(f)
    _fused(jf, np.array([1.0, 2.0, 3.0, -1.0]))
    x = np.array([1.0, 2.0, -3.0, -1.0])
    result = jf(x)
    assert result.shape == (2,)
    np.testing.assert_allclose(result, f(x))


def test_a_result_whose_dtype_depends_on_values_replays_as_eagerly():
    # eigvals of a real matrix is float64 or complex128 by its values; jit: UFuncTypeError (float64 out= buffer)
    f = lambda a: np.linalg.eigvals(a) * 2.0 + 1.0  # noqa: E731
    jf = pb.jit(f)
    symmetric, rotation = np.array([[2.0, 1.0], [1.0, 3.0]]), np.array([[0.0, -1.0], [1.0, 0.0]])
    jf(symmetric)
    jf(symmetric)
    np.testing.assert_allclose(jf(rotation), f(rotation))


def _inverse_or_square(a):
    try:
        return np.sum(np.linalg.inv(a))
    except np.linalg.LinAlgError:
        return np.sum(a * a)


@pytest.mark.parametrize("f", [
    lambda a: pb.gradient(_inverse_or_square, a)[0],  # user code catching LinAlgError on a differentiated value
    lambda a: pb.hessian(np.linalg.det, a),  # the det rule's adjugate catches it too
])
def test_a_linalg_error_of_a_differentiated_traced_value_is_still_a_linalg_error(f):
    # under pb.jit the LinAlgError of a Symbol inside a tracked value is renamed into a plain ValueError
    # (_errors.mixed_arrays_error takes the Symbol for a foreign array), so `except LinAlgError` misses it
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    np.testing.assert_allclose(pb.jit(f)(singular), f(singular.copy()))


def test_a_view_of_an_array_passed_by_keyword_is_not_overwritten_by_a_reused_buffer():
    # Trace._aliases looks for views among the positional arguments only: np.transpose(a=v)
    # is not known to view v's buffer, which cos(x) * 2 then reuses
    def f(x):
        v = np.sin(x)
        t = np.transpose(a=v)
        w = np.cos(x) * 2.0
        return t + w.T

    jf = pb.jit(f)
    x = np.linspace(0.0, 1.0, 12).reshape(3, 4)
    jf(x)
    np.testing.assert_allclose(jf(x), f(x))


def test_a_view_returned_of_an_array_passed_by_keyword_is_not_overwritten_by_the_next_call():
    jf = pb.jit(lambda x: np.swapaxes(a=np.sin(x) * 2.0, axis1=0, axis2=1))
    jf(np.ones((3, 4)))
    first = jf(np.zeros((3, 4)))
    jf(np.ones((3, 4)))
    np.testing.assert_array_equal(first, np.zeros((4, 3)))


@pytest.mark.parametrize("method", ["sort", "partition"])
def test_the_in_place_sort_and_partition_methods_sort_in_place(method):
    # Symbol forwards ndarray.sort/partition (in place, returning None) to np.sort/np.partition
    # (a new array), so the array stays unsorted, at the trace already
    def f(x):
        y = x * 1.0
        getattr(y, method)(*([1] if method == "partition" else []))
        return y

    x = np.array([3.0, 1.0, 2.0])
    np.testing.assert_array_equal(pb.jit(f)(x), f(x))


def test_sorting_an_argument_in_place_sorts_the_caller_s_array():
    def f(x):
        x.sort()
        return x * 2.0

    x, ex = np.array([3.0, 1.0, 2.0]), np.array([3.0, 1.0, 2.0])
    np.testing.assert_array_equal(pb.jit(f)(x), f(ex))
    np.testing.assert_array_equal(x, ex)


def test_the_compress_method_takes_the_condition_first():
    # ndarray.compress(condition) is forwarded as np.compress(array, condition): the array becomes the condition
    f = lambda x: x.compress([True, False, True]) * 1.0  # noqa: E731
    x = np.array([3.0, 0.0, 2.0])
    np.testing.assert_array_equal(pb.jit(f)(x), f(x))


def test_a_write_through_a_view_that_only_a_strided_fortran_like_layout_makes_replays_as_eagerly():
    # both arguments are neither C- nor F-contiguous (one signature); eagerly sin(x) follows x's layout
    # (Fortran-like for the second), so v.T.reshape(-1) is a view and the write changes v
    def f(x):
        v = np.sin(x)
        r = v.T.reshape(-1)
        r[0] = 100.0
        return v

    jf = pb.jit(f)
    c_like = np.ones((3, 8))[:, ::2]
    jf(c_like)
    jf(c_like)
    f_like = np.asfortranarray(np.ones((3, 8)))[:, ::2]
    # the strides are part of the signature: traced anew, and the write through NumPy's view is refused
    with pytest.raises(pb.JitError, match="shares memory with another"):
        jf(f_like)
    np.testing.assert_array_equal(jf(c_like), f(np.ones((3, 8))[:, ::2]))


@pytest.mark.parametrize("f, traced, replayed", [
    (lambda x: np.bincount(x) * 2 + 1, np.array([1, 2, 2, 0]), np.array([3, 1, 5, 4])),  # length = max + 1
    (lambda x: np.repeat(x * 1.0, x) * 2 + 1, np.array([1, 2, 2, 0]), np.array([3, 1, 5, 4])),  # counts from values
    (lambda x: x.reshape(2, 2)[np.ix_(x[:2] > 1.5, x[2:] > 1.5)] * 2 + 1,  # np.ix_ of boolean masks
     np.array([1.0, 2.0, 2.0, 0.0]), np.array([3.0, 1.0, 5.0, 4.0])),
])
def test_more_results_whose_shape_depends_on_values_replay_as_eagerly(f, traced, replayed):
    jf = pb.jit(f)
    jf(traced)
    jf(traced)
    np.testing.assert_allclose(jf(replayed), f(replayed.copy()))


# --- memory order after a recorded write --------------------------------------------------------

def _f_ordered(seed):
    return np.asfortranarray(np.random.default_rng(seed).normal(size=(3, 4)))


def test_a_flat_write_keeps_the_memory_order():
    # `y.flat[i] = v` writes into y in place: an F-ordered y stays F-ordered, so ravel(order="K") reads it
    # in memory order
    def f(x):
        y = x * 2.0
        y.flat[0] = 0.0
        return np.ravel(y, order="K")

    jf = pb.jit(f)
    for seed in range(3):
        np.testing.assert_array_equal(jf(_f_ordered(seed)), f(_f_ordered(seed)))


@pytest.mark.parametrize("write", [
    lambda y: y.__setitem__((0, 0), 0.0),
    lambda y: np.add.at(y, (0, 0), 1.0),
    lambda y: np.putmask(y, y > 0, 0.0),
    lambda y: np.sin(y[:, :2], out=y[:, 2:]),
], ids=["setitem", "ufunc.at", "putmask", "out="])
def test_flags_and_strides_after_a_write_match_numpy(write):
    # a write into an F-ordered array leaves it F-ordered, at every call
    def f(x):
        y = x * 2.0
        write(y)
        return bool(y.flags.f_contiguous), y.strides, np.ravel(y, order="K")

    jf = pb.jit(f)
    for seed in range(3):
        (flag, strides, values), (want_flag, want_strides, want) = jf(_f_ordered(seed)), f(_f_ordered(seed))
        assert (flag, strides) == (want_flag, want_strides) == (True, (8, 24))
        np.testing.assert_array_equal(values, want)


# --- divmod with a Python number argument -------------------------------------------------------

@pytest.mark.parametrize("traced", [True, False], ids=["traced-array", "plain-array"])
def test_divmod_of_a_number_argument_and_an_array_replays(traced):
    def f(x, n):
        a = x if traced else np.array([1.5, 2.0, 4.0])
        q, r = divmod(n, a)
        return x * 0.0 + q, r

    jf = pb.jit(f)
    x = np.array([1.5, 2.0, 4.0])
    for n in [7.0, 7.0, 9.0]:
        for g, e in zip(jf(x.copy(), n), f(x.copy(), n)):
            np.testing.assert_array_equal(g, e)
    assert jf.cache_info().traces == 1  # the number is an input, not a guard


# --- sharing between results and inputs ---------------------------------------------------------

def test_results_viewing_one_intermediate_share_memory_at_the_first_call():
    def f(x):
        y = x * 2.0
        return y[:2], y[1:]

    jf = pb.jit(f)
    for seed in range(3):
        x = np.random.default_rng(seed).normal(size=(3, 2))
        a, b = f(x.copy())
        ja, jb = jf(x.copy())
        np.testing.assert_array_equal(ja, a)
        np.testing.assert_array_equal(jb, b)
        assert np.shares_memory(a, b) and np.shares_memory(ja, jb), f"call {seed}"
        ja[1] = 0.0  # one array under both, as eagerly
        assert jb[0, 0] == 0.0


def test_a_returned_row_of_a_written_argument_by_a_traced_index_is_a_view_of_it():
    def f(x):
        i = np.argmax(x[:, 0])
        x += 1.0
        return x[i]

    jf = pb.jit(f)
    for seed in range(3):
        x1 = np.random.default_rng(seed).normal(size=(3, 2))
        x2 = x1.copy()
        r1, r2 = f(x1), jf(x2)
        np.testing.assert_array_equal(r2, r1)
        np.testing.assert_array_equal(x2, x1)
        assert np.shares_memory(r2, x2), f"call {seed}"


def test_a_result_the_function_made_read_only_stays_read_only():
    def f(x):
        z = x * 2
        z.flags.writeable = False
        return z

    jf = pb.jit(f)
    for i in range(3):
        expected, got = f(np.arange(3.0) + i), jf(np.arange(3.0) + i)
        np.testing.assert_array_equal(got, expected)
        assert got.flags.writeable == expected.flags.writeable


def test_a_read_only_view_result_shares_memory_with_another_view_at_every_call():
    def f(x):
        y = x * 2
        z = y[1:]
        z.flags.writeable = False
        return z, y[:2]

    jf = pb.jit(f)
    for i in range(3):
        ze, ye = f(np.arange(6.0) + i)
        zj, yj = jf(np.arange(6.0) + i)
        np.testing.assert_array_equal(zj, ze)
        np.testing.assert_array_equal(yj, ye)
        assert np.shares_memory(zj, yj) == np.shares_memory(ze, ye)
        assert zj.flags.writeable == ze.flags.writeable


def test_views_of_a_large_intermediate_share_memory_at_every_call():
    def f(x):
        y = np.ones(300_000) * x.sum()
        return y[:5], y[3:]

    jf = pb.jit(f)
    for i in range(3):
        a, b = jf(np.arange(6.0) + i)
        ae, be = f(np.arange(6.0) + i)
        np.testing.assert_array_equal(b, be)
        assert np.shares_memory(a, b) == np.shares_memory(ae, be)
        b[0] = -1.0
        be[0] = -1.0
        np.testing.assert_array_equal(a, ae)


# --- writes before an exception -----------------------------------------------------------------

def test_writes_before_an_exception_raised_in_a_replay_reach_the_caller():
    # the IndexError is raised after the write, which reaches the caller's x without pb.jit
    def f(x, idx):
        x += 1.0
        t = x * 2.0
        u = t[idx]
        x[...] = np.sin(t)  # another value written after it
        return u + x

    jf = pb.jit(f)
    for i in [0, 1, 5, 0, 7]:
        x1, x2 = np.arange(3.0), np.arange(3.0)
        raised = []
        for fn, x in ((f, x1), (jf, x2)):
            try:
                fn(x, np.array([i]))
            except IndexError:
                raised.append(fn)
        assert raised in ([], [f, jf])
        np.testing.assert_array_equal(x2, x1, err_msg=f"index {i}")


def test_a_raise_in_a_parallel_segment_leaves_the_argument_the_value_written_before_it():
    # x is written, then a call on x raises (an invalid sqrt under np.errstate), then x is written again; on
    # more than 131,072 elements the calls run in parts on every core
    n = 200_000

    def f(x):
        x += 1
        z = np.sqrt(x) + 1
        x *= 2
        return z

    jf = pb.jit(f)
    jf(np.arange(n) + 1.0)
    jf(np.arange(n) + 1.0)
    for bad in (1, n - 1):
        x = np.arange(n) + 1.0
        x[bad] = -5.0
        xe, xj = x.copy(), x.copy()
        with np.errstate(invalid="raise"):
            with pytest.raises(FloatingPointError):
                f(xe)
            with pytest.raises(FloatingPointError):
                jf(xj)
        np.testing.assert_array_equal(xj, xe)


def _read_only_copy(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


def test_a_read_only_argument_at_a_replay_raises_where_it_is_written_after_the_writes_before():
    def f(a, b):
        b += 1
        a += 1
        b += 1
        return a + b

    jf = pb.jit(f)
    jf(np.ones(3), np.ones(3))
    jf(np.ones(3), np.ones(3))
    be, bj = np.ones(3), np.ones(3)
    with pytest.raises(ValueError) as eager:
        f(_read_only_copy(np.ones(3)), be)
    with pytest.raises(ValueError) as jitted:
        jf(_read_only_copy(np.ones(3)), bj)
    assert str(jitted.value) == str(eager.value)
    np.testing.assert_array_equal(bj, be)
    np.testing.assert_array_equal(jf(np.ones(3), np.ones(3)), f(np.ones(3), np.ones(3)))


@pytest.mark.parametrize("write", [
    lambda a: a.__setitem__(0, 1.0),
    lambda a: np.put(a, [0], 2.0),
    lambda a: a.flat.__setitem__(0, 3.0),
    lambda a: np.sin(a, out=a),
    lambda a: np.putmask(a, a > 0, 1.0),
], ids=["setitem", "put", "flat", "out=", "putmask"])
def test_a_write_into_a_read_only_argument_raises_numpy_s_error(write):
    def f(a):
        write(a)
        return a * 2

    jf = pb.jit(f)
    jf(np.ones(3))
    jf(np.ones(3))
    with pytest.raises(ValueError) as eager:
        f(_read_only_copy(np.ones(3)))
    with pytest.raises(ValueError) as jitted:
        jf(_read_only_copy(np.ones(3)))
    assert str(jitted.value) == str(eager.value)


def test_a_branch_on_a_failed_write_into_a_read_only_argument_follows_each_call():
    def f(a, b):
        b += 1
        try:
            a += 1
        except ValueError:
            b *= 10
        return a + b

    jf = pb.jit(f)
    for a in (_read_only_copy(np.ones(3)), np.ones(3), _read_only_copy(np.ones(3)), np.ones(3)):
        be, bj = np.ones(3), np.ones(3)
        ae, aj = np.array(a), np.array(a)
        ae.flags.writeable = aj.flags.writeable = a.flags.writeable
        np.testing.assert_array_equal(jf(aj, bj), f(ae, be))
        np.testing.assert_array_equal(bj, be)
        np.testing.assert_array_equal(aj, ae)


class _Stop(BaseException):
    """A KeyboardInterrupt-like exception (not an Exception)."""


def _stop(kind, flag):
    raise _Stop()


@pytest.mark.parametrize("replay", [False, True])
def test_writes_before_a_base_exception_reach_the_caller(replay):
    def f(x, y):
        x += 1
        z = 1.0 / y
        return z + x

    jf = pb.jit(f)
    if replay:
        jf(np.ones(3), np.ones(3))
        jf(np.ones(3), np.ones(3))
    xe, xj = np.zeros(3), np.zeros(3)
    y = np.array([1.0, 0.0, 1.0])
    with np.errstate(divide="call", call=_stop):
        with pytest.raises(_Stop):
            f(xe, y)
        with pytest.raises(_Stop):
            jf(xj, y)
    np.testing.assert_array_equal(xj, xe)


# --- in-place writes ------------------------------------------------------------------------------

def test_nan_to_num_without_copying_writes_into_its_argument():
    def f(x):
        np.nan_to_num(x, copy=False)
        return x.sum()

    jf = pb.jit(f)
    for v in [1.0, np.nan, 3.0, -np.inf]:
        x1 = np.array([1.0, np.nan, v, np.inf])
        x2 = x1.copy()
        assert jf(x2) == f(x1)
        np.testing.assert_array_equal(x2, x1)


def test_nan_to_num_without_copying_returns_its_argument():
    jf = pb.jit(lambda x: np.nan_to_num(x, copy=False, nan=-1.0))
    for _ in range(3):
        x = np.array([np.nan, 1.0])
        assert jf(x) is x
        np.testing.assert_array_equal(x, [-1.0, 1.0])


def test_a_view_of_a_view_made_in_passing_is_written_through():
    def f(x):
        b = x[1:][1:]
        b[...] = 0.0
        return x

    jf = pb.jit(f)
    for seed in range(3):
        x1 = np.random.default_rng(seed).normal(size=(4, 2))
        x2 = x1.copy()
        np.testing.assert_array_equal(jf(x2), f(x1))
        np.testing.assert_array_equal(x2, x1)


@pytest.mark.parametrize("write", [
    lambda y: y.__setitem__(0, 1.0),
    lambda y: np.add(y, 1.0, out=y),
    lambda y: np.putmask(y, y > 0, 0.0),
], ids=["setitem", "out=", "putmask"])
def test_a_write_into_a_read_only_view_raises_as_numpy_does(write):
    def f(x):
        y = np.diagonal(np.outer(x, x))  # a read-only view
        write(y)
        return y

    jf = pb.jit(f)
    for v in [1.0, 2.0, 3.0]:
        with pytest.raises(ValueError, match="read-only"):
            f(np.full(3, v))
        with pytest.raises(ValueError, match="read-only"):
            jf(np.full(3, v))


# --- calls a replay must not drop or run otherwise ------------------------------------------------

def test_an_unused_call_that_raises_still_raises_at_replays():
    def f(x):
        np.linalg.inv(x)  # called to check x: its result is unused
        return x * 2.0

    jf = pb.jit(f)
    jf(np.eye(2))
    jf(np.eye(2))
    with pytest.raises(np.linalg.LinAlgError):
        f(np.ones((2, 2)))
    with pytest.raises(np.linalg.LinAlgError):
        jf(np.ones((2, 2)))
    np.testing.assert_array_equal(jf(np.eye(2)), f(np.eye(2)))


def test_np_errstate_entered_inside_the_function_holds_at_replays():
    def f(x, y):
        with np.errstate(over="raise"):
            return x * y

    jf = pb.jit(f)
    jf(np.ones(3), np.ones(3))
    np.testing.assert_array_equal(jf(np.ones(3), np.full(3, 2.0)), f(np.ones(3), np.full(3, 2.0)))
    with pytest.raises(FloatingPointError):
        f(np.full(3, 1e308), np.full(3, 10.0))
    with pytest.raises(FloatingPointError):
        jf(np.full(3, 1e308), np.full(3, 10.0))


def test_np_errstate_inside_the_function_keeps_the_caller_s_other_settings():
    # the function sets `over` only: `divide` is the caller's, at each call
    def f(x):
        with np.errstate(over="raise"):
            return 1.0 / x

    jf = pb.jit(f)
    np.testing.assert_array_equal(jf(np.ones(2)), f(np.ones(2)))
    np.testing.assert_array_equal(jf(np.ones(2)), f(np.ones(2)))
    with np.errstate(divide="raise"):
        with pytest.raises(FloatingPointError):
            f(np.zeros(2))
        with pytest.raises(FloatingPointError):
            jf(np.zeros(2))
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(jf(np.zeros(2)), f(np.zeros(2)))


@pytest.mark.parametrize("index", [
    lambda x, i: x[i],
    lambda x, i: np.take(x, i),
    lambda x, i: x.flat[i],
    lambda x, i: np.add.at(x.copy(), i, 1.0),
], ids=["getitem", "take", "flat", "add.at"])
def test_an_unused_index_by_a_traced_index_still_raises_at_replays(index):
    def f(x, i):
        index(x, i)
        return x * 2

    jf = pb.jit(f)
    jf(np.ones(3), np.array(1))
    jf(np.ones(3), np.array(2))
    with pytest.raises(IndexError):
        f(np.ones(3), np.array(7))
    with pytest.raises(IndexError):
        jf(np.ones(3), np.array(7))
    np.testing.assert_array_equal(jf(np.ones(3), np.array(0)), f(np.ones(3), np.array(0)))


def test_an_unused_gradient_of_indexing_by_labels_is_dropped():
    # the forward pass's w[labels] checks the labels: the unused backward pass is not computed to check them
    step = pb.jit(lambda w, labels: pb.withgradient(lambda w: np.sum(w[labels] ** 2), w)[0])
    w, labels = np.ones((4, 2)), np.array([1, 3])
    step(w, labels)
    assert step(w, labels) == pb.withgradient(lambda w: np.sum(w[labels] ** 2), w)[0]
    program = step._cache[next(iter(step._cache))][0][0]
    assert "unindex" not in program.source and "add.at" not in program.source


_NAN = np.full((2, 2), np.nan)
_SINGULAR = np.zeros((2, 2))


@pytest.mark.parametrize("check, failing", [
    (lambda m: np.linalg.norm(m, 2), _NAN),  # by an SVD
    (lambda m: np.linalg.cond(m), _NAN),
    (lambda m: np.linalg.matrix_power(m, -1), _SINGULAR),  # by an inverse
    (lambda m: np.linalg.inv(m), _SINGULAR),
    (lambda m: np.linalg.det(m), None),  # never raises on values
    (lambda m: np.linalg.slogdet(m), None),
    (lambda m: np.linalg.norm(m), None),
    (lambda m: np.linalg.multi_dot([m, m]), None),
    (lambda m: np.linalg.matrix_power(m, 2), None),
], ids=["norm-2", "cond", "matrix_power-1", "inv", "det", "slogdet", "norm", "multi_dot", "matrix_power2"])
def test_an_unused_linalg_call_is_kept_only_where_it_raises_on_some_values(check, failing):
    def f(m):
        check(m)
        return m * 2.0

    jf = pb.jit(f)
    jf(np.eye(2))
    np.testing.assert_array_equal(jf(np.eye(2) * 2), f(np.eye(2) * 2))
    program = jf._cache[next(iter(jf._cache))][0][0]
    assert program.n_nodes == (1 if failing is None else 2)  # a dead call that cannot raise is not run
    if failing is not None:
        with pytest.raises(np.linalg.LinAlgError):
            f(failing)
        with pytest.raises(np.linalg.LinAlgError):
            jf(failing)


def test_a_warnings_filter_set_inside_the_function_holds_at_replays():
    def f(x):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return np.log(x)

    jf = pb.jit(f)
    jf(np.array([1.0, 2.0]))
    jf(np.array([1.0, 2.0]))
    with pytest.raises(RuntimeWarning):
        f(np.array([0.0, 2.0]))
    with pytest.raises(RuntimeWarning):
        jf(np.array([0.0, 2.0]))


def test_warnings_ignored_inside_the_function_are_not_shown_at_replays():
    def f(x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.log(x)

    jf = pb.jit(f)
    jf(np.array([1.0, 2.0]))
    jf(np.array([1.0, 2.0]))
    for _ in range(2):  # the caller's filters changed (a trace), then as they were (a replay)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            f(np.array([0.0, 2.0]))
            n_eager = len(got)
            jf(np.array([0.0, 2.0]))
        assert len(got) - n_eager == n_eager == 0


def test_warnings_filters_set_inside_keep_the_caller_s_other_filters():
    def f(x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return np.log(x)

    jf = pb.jit(f)
    jf(np.array([1.0, 2.0]))
    jf(np.array([1.0, 2.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(RuntimeWarning):
            f(np.array([0.0, 2.0]))
        with pytest.raises(RuntimeWarning):
            jf(np.array([0.0, 2.0]))


# --- strides and flags of an argument's memory: the caller's at each call, fixed by a guard when read -


def _read_only(a):
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("f, first, second", [
    (lambda x: x * (2.0 if x.flags.writeable else 3.0), np.ones(2), _read_only(np.ones(2))),
    (lambda x: x * (2.0 if x.flags.owndata else 3.0), np.arange(4.0), np.arange(8.0)[:4]),
    # both C-contiguous, of one shape: strides (24, 8) and (48, 8)
    (lambda x: x * float(x.strides[0]), np.ones((1, 3)), np.ones((3, 3))[::2][:1]),
    (lambda x: x[0] * float(x[0:1].strides[0]), np.ones((1, 3)), np.ones((3, 3))[::2][:1]),  # of a view of one
    (lambda x: x * (2.0 if x[:1].flags["WRITEABLE"] else 3.0), np.ones(2), _read_only(np.ones(2))),
], ids=["flags.writeable", "flags.owndata", "strides", "strides of a view", "flags[key] of a view"])
def test_a_branch_on_the_memory_of_an_argument_follows_each_call(f, first, second):
    jitted = pb.jit(f)
    for x in (first, second, first, second):
        np.testing.assert_array_equal(jitted(x), f(x))
    assert jitted.cache_info().traces == 2  # one per outcome, each replayed since


def test_the_flags_of_an_argument_written_into_are_the_caller_s_array_s():
    def f(x):
        x[0] = 5.0
        return x * (2.0 if x.flags.owndata else 3.0)

    jitted = pb.jit(f)
    for make in (lambda: np.arange(4.0), lambda: np.arange(8.0)[:4], lambda: np.arange(4.0)):
        a, b = make(), make()
        np.testing.assert_array_equal(jitted(a), f(b))
        np.testing.assert_array_equal(a, b)


def test_the_memory_of_an_argument_is_no_part_of_the_signature_where_the_function_does_not_read_it():
    jitted = pb.jit(lambda x: np.sum(x * 2.0))
    assert jitted(np.ones(2)) == jitted(_read_only(np.ones(2))) == jitted(np.ones(4)[:2]) == 4.0
    assert jitted.cache_info().traces == 1


def test_a_view_the_function_makes_read_only_refuses_writes_at_every_call():
    def f(x):
        v = x * 2.0
        w = v[1:]
        w.flags.writeable = False
        v[0] = 5.0  # the base stays writable; w, made again from it, stays read-only
        try:
            w[0] = 1.0
        except ValueError as error:
            return v + w.sum(), str(error)
        return v, "written"

    jitted = pb.jit(f)
    for x in (np.ones(3), np.arange(3.0), np.ones(3)):
        (got, message), (expected, eager_message) = jitted(x), f(x)
        np.testing.assert_array_equal(got, expected)
        assert message == eager_message and "read-only" in message


def test_setting_a_flag_of_an_argument_is_refused():
    def f(x):
        x.flags.writeable = False
        return x

    with pytest.raises(pb.JitError, match="flags.writeable of an argument"):
        pb.jit(f)(np.ones(2))


@pytest.mark.parametrize("write", [
    lambda y: np.concatenate((y[1:], y[:1]), out=y),
    lambda y: np.concatenate((y[1:], y[:1]), 0, y),  # axis and out by position
    lambda y: np.concatenate((y[2:], y[:2]), axis=None, out=y) if y.ndim == 1 else None,
    lambda y: np.concatenate((y[:, 1:], y[:, :1]), axis=-1, out=y) if y.ndim == 2 else None,
    lambda y: np.stack((y[1], y[0]), out=y[:2]) if y.ndim == 2 else None,
], ids=["concatenate", "positional", "flattened", "last-axis", "stack"])
@pytest.mark.parametrize("shape", [(6,), (3, 4)])
def test_concatenating_views_of_out_into_out_reads_each_piece_when_numpy_does(write, shape):
    # NumPy copies the pieces in order: y[:1] is read after y[1:] was written over it
    def f(x):
        y = x * 1.0
        write(y)
        return y * 1.0

    x = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
    compiled = pb.jit(f)
    for call in range(2):
        np.testing.assert_array_equal(compiled(x + call), f(x + call))


def test_concatenating_views_of_out_into_out_keeps_numpy_s_casting_error():
    def f(x):
        y = x * 1.0
        np.concatenate((y[1:], y[:1].astype(complex)), out=y)
        return y

    with pytest.raises(TypeError, match="same_kind"):
        pb.jit(f)(np.arange(4.0))


def test_a_refused_concatenation_into_a_transposed_out_names_np_concatenate():
    f = lambda x: np.concatenate([x[:, :1].T, x[:, 1:].T], out=x.T)  # noqa: E731
    with pytest.raises(pb.JitError, match=r"np\.concatenate\(\.\.\., out=\.\.\.\) writes into an array that shares"):
        pb.jit(f)(np.arange(4.0).reshape(2, 2))


@pytest.mark.parametrize("f", [
    lambda w: np.max(w ** 2), lambda w: w.min(), np.median, lambda w: np.percentile(w, 30), np.nanmax, np.cov,
    lambda w: np.average(w, weights=np.arange(4.0)), lambda w: np.interp(0.3, np.arange(4.0), w),
], ids=["max", "min method", "median", "percentile", "nanmax", "cov (a 0-d array)", "average", "interp"])
def test_a_reduction_s_value_under_jit_of_a_gradient_has_numpy_s_type(f):
    # a NumPy scalar where NumPy gives one (a 0-d array is mutable: `v += 1` would change a stored loss)
    w = np.array([0.5, -2.0, 1.0, 3.0])
    step = pb.jit(lambda w: pb.withgradient(f, w))
    for x in (w, w + 1.0):
        value = step(x)[0]
        assert type(value) is type(f(x)) is type(pb.withgradient(f, x)[0])
        np.testing.assert_allclose(value, f(x), rtol=1e-12)
    jvp_value = pb.jit(lambda w: pb.jvp(f, (w,), (np.ones(4),)))(w)[0]
    assert type(jvp_value) is type(f(w))


@pytest.mark.parametrize("f", [
    lambda a: np.sum(np.concatenate([a, np.sin(a)])) + np.sum(a),
    lambda a: np.sum(np.stack([a, a ** 2])) + np.sum(np.cos(a)),
], ids=["concatenate", "stack"])
def test_a_gradient_gathered_from_several_uses_replays_under_jit(f):
    a = np.arange(12.0).reshape(3, 4) / 7
    step = pb.jit(lambda a: pb.gradient(f, a)[0])
    for x in (a, a + 1.0):
        np.testing.assert_allclose(step(x), pb.gradient(f, x)[0], rtol=1e-14)
        np.testing.assert_allclose(step(x), pb.testing.numerical_gradient(f, x)[0], rtol=1e-7)


@pytest.mark.parametrize("f", [
    lambda p: np.sum(np.polyval(p, np.array([0.5, 1.5]))),
    lambda p: np.sum(np.polymul(p, np.array([0.5, -1.0])) ** 2),
    lambda p: np.sum(np.polydiv(p, np.array([0.5, -1.0]))[0] ** 2),
], ids=["polyval", "polymul", "polydiv"])
def test_polynomial_gradients_replay_under_jit_with_leading_zeros_that_come_and_go(f):
    step = pb.jit(lambda p: pb.withgradient(f, p))
    for p in ([1.0, 2.0, 3.0], [0.0, 2.0, 3.0], [2.0, -1.0, 0.5], [0.0, 0.0, 3.0]):
        p = np.array(p)
        value, (g,) = step(p)
        assert value == f(p)
        np.testing.assert_allclose(g, pb.gradient(f, p)[0], rtol=1e-14)
        np.testing.assert_allclose(g, pb.testing.numerical_gradient(f, p)[0], rtol=1e-6, atol=1e-9)
