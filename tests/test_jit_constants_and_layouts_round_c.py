"""pb.jit and plain arrays written while the trace runs: each recorded call replays the values it read
then (a private copy of it; where those copies would take too much memory, the trace is refused, naming the
array); writes keep the memory layout of the array written; a recorded call returning arrays and Python numbers
fixes the numbers by a guard; a jitted function called inside another's trace with only a Python number or
a generator argument is inlined; the fresh-entropy refusal names the constructor used. Each working case is
called three times with different argument values of one shape and compared with plain NumPy."""
import numpy as np
import pytest

import pullback as pb

_VALUES = [np.array([0.5, -1.0, 2.0]), np.array([-0.25, 3.0, 1.5]), np.array([1.0, 0.0, -2.0])]


def _as_numpy(f, jitted=None, values=_VALUES):
    """`pb.jit(f)` (or `jitted`) gives f's results at three calls with different arguments."""
    jitted = pb.jit(f) if jitted is None else jitted
    for x in values:
        want, got = f(x.copy()), jitted(x.copy())
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            np.testing.assert_array_equal(g, w)
    return jitted


# --- plain arrays written after a recorded call read them ------------------------------------------------
def _operand_written_after(x):
    c = np.arange(3.0)
    y = x + c
    c[1] = 100.0
    return y


def _full_slice(x):
    y = x.copy()
    c = np.ones(3)
    y[:] = c
    c[0] = 5.0
    return y * x


def _copyto(x):
    y = x.copy()
    c = np.ones(3)
    np.copyto(y, c)
    c[0] = 5.0
    return y * x


def _flat(x):
    y = x.copy()
    c = np.arange(3.0)
    y.flat = c
    c[:] = -1.0
    return y * x


def _out(x):
    y = x.copy()
    c = np.arange(3.0)
    np.add(c, 0.0, out=y)
    c[:] = 7.0
    return y * x


def _where(x):
    c = np.arange(3.0)
    y = np.where(x > 0, c, x)
    c[:] = -1.0
    return y * x


def _ellipsis_then_scaled(x):
    y = np.zeros_like(x)
    c = np.full(3, 2.0)
    y[...] = c
    c *= 10.0
    y += x
    return y * x


def _workspace(x):
    t = np.linspace(0.0, 1.0, 3)
    work = np.empty(3)
    total = np.zeros_like(x)
    for k in range(4):
        np.sin(t * (k + 1), out=work)  # plain NumPy: the same buffer rewritten each iteration
        total = total + x * work
    return total


_CASES = [_operand_written_after, _full_slice, _copyto, _flat, _out, _where, _ellipsis_then_scaled, _workspace]


@pytest.mark.parametrize("f", _CASES, ids=lambda f: f.__name__)
def test_a_plain_array_written_after_a_recorded_call_replays_the_values_read_then(f):
    jitted = _as_numpy(f)
    assert jitted.cache_info().traces == 1


@pytest.mark.parametrize("f", [f for f in _CASES if f is not _workspace], ids=lambda f: f.__name__)
def test_under_a_gradient_the_value_is_the_one_computed_with_the_values_read_then(f):
    def loss(x):
        return np.sum(f(x) ** 2)

    jitted = pb.jit(lambda x: pb.withgradient(loss, x))
    for x in _VALUES:
        got, want = jitted(x.copy()), pb.withgradient(loss, x.copy())
        assert got.val == loss(x.copy()) == want.val
        np.testing.assert_allclose(got.grad[0], want.grad[0])


def test_under_a_gradient_a_workspace_an_operation_keeps_is_not_rewritten():
    # `x * work` keeps `work` for the backward pass, which would read the last value written into it for every
    # iteration (a wrong gradient, with and without pb.jit): the rewrite is refused, naming the fix
    def loss(x):
        return np.sum(_workspace(x) ** 2)

    for call in (pb.jit(lambda x: pb.withgradient(loss, x)), lambda x: pb.withgradient(loss, x)):
        with pytest.raises(ValueError, match="wrote into a NumPy array"):
            call(_VALUES[0].copy())


def test_a_global_workspace_rewritten_inside_the_function_replays_each_value_read():
    work = np.zeros(3)

    def f(x):
        work[:] = np.arange(3.0)
        y = x * work
        work[:] = -1.0
        return y + x * work

    _as_numpy(f)


def test_a_plain_array_of_a_megabyte_written_after_a_call_read_it_replays_the_values_read_then():
    def f(x):
        c = np.arange(200_000.0)
        y = np.sum(x) + c
        c[::2] = -1.0
        return y

    _as_numpy(f)


@pytest.mark.parametrize("size, rounds", [(2_200_000, 1), (300_000, 10)], ids=["one large array", "many copies"])
def test_a_plain_array_written_after_a_call_read_it_is_refused_where_its_copies_would_be_too_large(size, rounds):
    def f(x):
        work = np.zeros(size)
        total = np.sum(x)
        for k in range(rounds):
            work[:] = k + 1.0
            total = total + work
        work[0] = -1.0
        return total

    with pytest.raises(pb.JitError, match=rf"shape \({size},\).*c = c\.copy\(\)"):
        pb.jit(f)(np.ones(3))


def test_a_large_plain_array_not_written_is_read_as_it_is():
    big = np.arange(200_000.0)

    def f(x):
        return np.sum(x) * big

    jitted = pb.jit(f)
    for x in _VALUES:
        np.testing.assert_array_equal(jitted(x), f(x))


# --- writes keep the array's memory layout ------------------------------------------------------------------
_W = np.arange(6.0)
_F = [np.asfortranarray(np.arange(6.0).reshape(3, 2) + s) for s in (0.0, 1.5, -3.0)]


def _in_memory_order(e):
    return np.sum(e.ravel(order="K") * _W)


def _empty_like_written(a):
    e = np.empty_like(a)
    e[...] = a
    return _in_memory_order(e)


def _copy_scaled(a):
    e = np.copy(a)
    e *= 2.0
    return _in_memory_order(e)


def _copy_k_row_written(a):
    e = a.copy(order="K")
    e[0] = a[1]
    return _in_memory_order(e)


def _zeros_like_column_written(a):
    e = np.zeros_like(a)
    e[:, 0] = a[:, 1]
    e += 1.0
    return _in_memory_order(e)


def _zeros_like_copyto(a):
    e = np.zeros_like(a)
    np.copyto(e, a * 2.0)
    return _in_memory_order(e)


_LAYOUTS = [_empty_like_written, _copy_scaled, _copy_k_row_written, _zeros_like_column_written, _zeros_like_copyto]


@pytest.mark.parametrize("f", _LAYOUTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("mode", ["jit", "gradient", "jvp"])
def test_a_write_keeps_the_memory_layout_of_the_array_written(f, mode):
    jitted = {"jit": pb.jit(f), "gradient": pb.jit(lambda a: pb.withgradient(f, a).val),
              "jvp": pb.jit(lambda a: pb.jvp(f, (a,), (a,))[0])}[mode]
    wants = [f(a.copy(order="K")) for a in _F]
    assert len(set(wants)) == 3
    assert [float(jitted(a.copy(order="K"))) for a in _F] == wants


def test_index_update_keeps_the_layout_of_the_array_written():
    from pullback._standins import index_update

    a = np.asfortranarray(np.arange(6.0).reshape(3, 2))
    y = index_update(a, (0, 1), 9.0)
    assert y.strides == a.strides and y[0, 1] == 9.0 and a[0, 1] == 1.0


# --- a recorded call returning arrays and Python numbers ---------------------------------------------------
@pb.primitive
def _with_count(x):
    """An array and a Python int computed from the values (SciPy's pinvh(return_rank=True) returns such)."""
    return x * 2.0, int(np.sum(x > 0))


def test_a_recorded_call_returning_arrays_and_python_numbers_fixes_the_numbers_by_a_guard():
    def f(x):
        y, count = _with_count(x)
        assert type(count) is int
        return y + count, count

    jitted = pb.jit(f)
    values = [np.array([0.5, -1.0, 2.0]), np.array([-0.25, -3.0, 1.5]), np.array([1.0, 3.0, 2.0])]
    values.append(values[0] + 0.125)  # the count of the first: replayed
    _as_numpy(f, jitted, values)
    assert jitted.cache_info().traces == 3 and jitted.cache_info().replays == 1


@pytest.mark.parametrize("name", ["pinvh", "lstsq"])
def test_scipy_pinvh_and_lstsq_under_jit_of_a_gradient(name):
    from pullback.scipy import linalg

    def f(a, b):
        if name == "pinvh":
            return np.sum(linalg.pinvh(a.T @ a) @ (a.T @ b))
        x, residues, rank, s = linalg.lstsq(a, b)
        return np.sum(x ** 2) + np.sum(residues) + np.sum(s) + rank

    rng = np.random.default_rng(0)
    a0, b0 = rng.standard_normal((4, 3)), rng.standard_normal(4)
    jitted = pb.jit(lambda a, b: pb.gradient(f, a, b))
    for s in range(3):
        a, b = a0 + 0.1 * s, b0 - 0.2 * s
        for got, want in zip(jitted(a, b), pb.gradient(f, a, b)):
            np.testing.assert_allclose(got, want, rtol=1e-10)


def test_pinv_with_a_cutoff_computed_from_the_values_under_jit_of_a_gradient():
    # as pullback.scipy.linalg.pinvh computes its own: the check that the cutoff drops nothing is recorded
    from pullback.testing import assert_gradient

    rng = np.random.default_rng(2)
    a0, w = rng.standard_normal((4, 3)), rng.standard_normal((3, 4))

    def f(a):
        s = np.linalg.svd(pb.stop_gradient(a), compute_uv=False)
        return np.sum(w * np.linalg.pinv(a, rcond=0.5 * s[-1] / s[0]))

    assert_gradient(f, a0)
    jitted = pb.jit(lambda a: pb.withgradient(f, a))
    for s in range(3):
        a = a0 + 0.1 * s
        got, want = jitted(a), pb.withgradient(f, a)
        assert got.val == f(a) == want.val
        np.testing.assert_array_equal(got.grad[0], want.grad[0])
    assert jitted.cache_info().traces == 1


def test_numpy_lstsq_with_its_rank_and_singular_values_under_jit_of_a_gradient():
    def f(a, b):
        x, residuals, rank, s = np.linalg.lstsq(a, b, rcond=None)
        return np.sum(x ** 2) + np.sum(residuals) + np.sum(s) * rank

    rng = np.random.default_rng(1)
    a0, b0 = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    jitted = pb.jit(lambda a, b: pb.withgradient(f, a, b))
    for s in range(3):
        a, b = a0 + 0.1 * s, b0 - 0.2 * s
        got, want = jitted(a, b), pb.withgradient(f, a, b)
        np.testing.assert_allclose(got.val, f(a, b), rtol=1e-12)
        for g, w in zip(got.grad, want.grad):
            np.testing.assert_allclose(g, w, rtol=1e-10)


# --- a jitted function called inside another's trace --------------------------------------------------------
def test_a_jitted_function_given_only_a_python_number_inside_another_trace_is_inlined():
    inner = pb.jit(lambda s: s * 2.0)
    outer = pb.jit(lambda x, s: x + inner(s))
    for s in (0.5, 1.5, -2.0):
        np.testing.assert_array_equal(outer(np.ones(2), s), np.ones(2) + s * 2.0)
    assert outer.cache_info().traces == 1 and inner.cache_info().traces == 0


def test_a_jitted_function_given_only_a_generator_inside_another_trace_is_inlined():
    inner = pb.jit(lambda rng: rng.normal(size=2))
    outer = pb.jit(lambda x, rng: x + inner(rng))
    mine, theirs = np.random.default_rng(7), np.random.default_rng(7)
    results = []
    for _ in range(3):
        got, want = outer(np.ones(2), mine), np.ones(2) + theirs.normal(size=2)
        np.testing.assert_array_equal(got, want)
        results.append(got)
    assert not np.array_equal(results[0], results[1])
    assert mine.bit_generator.state == theirs.bit_generator.state
    assert outer.cache_info().traces == 1


# --- the fresh-entropy refusal names the constructor ---------------------------------------------------------
@pytest.mark.parametrize("make, named", [
    (lambda: np.random.Generator(np.random.PCG64()), "np.random.PCG64()"),
    (lambda: np.random.Generator(np.random.MT19937()), "np.random.MT19937()"),
    (lambda: np.random.RandomState(), "np.random.RandomState()"),
    (lambda: np.random.default_rng(), "np.random.default_rng()"),
])
def test_the_fresh_entropy_refusal_names_the_constructor_used(make, named):
    def f(x):
        return x + make().standard_normal(3)

    with pytest.raises(pb.JitError) as refused:
        pb.jit(f)(np.ones(3))
    assert f"fresh entropy ({named} without a seed, or from a np.random.SeedSequence() made" in str(refused.value)
