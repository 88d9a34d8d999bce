"""pb.jit hands out arrays the caller owns (also a gradient made of constants), refuses only arguments that
share memory with one it writes, keeps a trace made after a LinAlgError out of the cache, and guards the
shapes of np.delete, np.histogram and boolean-scalar indexing."""
import numpy as np
import pytest

import pullback as pb


def test_read_only_arguments_sharing_memory_are_not_refused_when_another_is_written():
    # Only `stat` is written; `a` and `b` overlap but are only read, so a replay computes what eager
    # code does: only an overlap with a written argument is refused
    def f(stat, a, b):
        stat += a.mean()
        return a.sum() + b.sum()

    X = np.arange(12.0)
    jitted = pb.jit(f)
    s_eager, s_jit = np.zeros(1), np.zeros(1)
    for _ in range(3):
        expected = f(s_eager, X[:8], X[4:])
        got = jitted(s_jit, X[:8], X[4:])
        assert got == expected
        np.testing.assert_array_equal(s_jit, s_eager)


def test_gradient_independent_of_input_values_is_a_new_array_each_replay():
    # The gradient of sum(x * W) is W: the replay computes it from constants only (np.asarray of W is W),
    # so each call must hand out a copy, or a caller scaling one gradient in place changes the next call's
    # result (and W)
    W = np.arange(100_000.0)

    def loss(x):
        return (x * W).sum()

    step = pb.jit(pb.grad(loss))
    x = np.ones(100_000)
    step(x)  # traced
    first = step(x)  # replayed
    first *= -0.1  # an optimiser scaling its gradient in place, as it may with eager code
    second = step(x)
    assert second is not first
    np.testing.assert_array_equal(second, pb.grad(loss)(x))


def test_variant_traced_after_a_linalg_error_is_not_replayed_for_a_regular_matrix():
    # A replay meeting LinAlgError traces again, and the new trace (the except branch) is kept first
    # with no guard that the matrix is singular: a later regular matrix replays the except branch.
    def f(a):
        try:
            return np.linalg.inv(a)
        except np.linalg.LinAlgError:
            return np.zeros_like(a)

    jitted = pb.jit(f)
    regular, singular = np.array([[2.0, 1.0], [1.0, 3.0]]), np.ones((2, 2))
    for a in (regular, singular, regular):
        np.testing.assert_allclose(jitted(a), f(a))


def test_zero_dimensional_boolean_index_is_guarded():
    # x[cond] with a 0-d boolean keeps 1 or 0 rows: `_shaped_by_values` only guards ndarray masks
    # (the traced condition arrives as np.bool_), so the replay's buffer of the trace's shape fails.
    def f(x):
        return x[x.sum() > 0] * 2

    jitted = pb.jit(f)
    for x in (np.array([1.0, -2.0, 3.0]), np.array([-1.0, 2.0, -3.0])):
        np.testing.assert_array_equal(jitted(x), f(x))


def test_delete_with_a_boolean_mask_is_guarded():
    # np.delete(x, mask) keeps as many elements as the mask holds False; not in _VALUE_SHAPED.
    def f(x):
        return np.delete(x, x > 0) * 2

    jitted = pb.jit(f)
    for x in (np.array([1.0, -2.0, 3.0, -4.0]), np.array([1.0, 2.0, 3.0, -4.0])):
        np.testing.assert_array_equal(jitted(x), f(x))


def test_histogram_with_automatic_bins_is_guarded():
    # bins='auto' chooses the number of bins from the values; not in _VALUE_SHAPED.
    def f(x):
        return np.histogram(x, bins="auto")[0] * 1.0

    jitted = pb.jit(f)
    for x in (np.linspace(0.0, 1.0, 50), np.r_[np.linspace(0.0, 1.0, 49), 100.0]):
        np.testing.assert_array_equal(jitted(x), f(x))


@pytest.mark.parametrize("loss", [
    lambda w, beta: np.sum(w ** 2) * beta,
    lambda w, beta: np.sum(w ** 2) / beta,
    lambda w, beta: np.sum(np.sin(w) * beta),
    lambda w, beta: np.sum(w ** beta),
])
def test_a_python_number_factor_inside_a_gradient_replays_without_tracing_again(loss):
    # the seed of the sweep is a plain array: plain array * number was NumPy's, reading the number (a guard)
    jf = pb.jit(lambda w, beta: pb.gradient(lambda w: loss(w, beta), w))
    for beta in [1.5, 2.5, 3.5, 4.5]:
        w = np.array([1.0, 2.0, 3.0])
        np.testing.assert_allclose(jf(w, beta)[0], pb.gradient(lambda w: loss(w, beta), w)[0], rtol=1e-14)
    assert jf.cache_info().traces == 1


def test_numpy_arrays_and_scalars_beside_a_python_number_argument():
    # a float result is recorded with the number as an input; an integer or boolean one (which may index a
    # plain array) is NumPy's, at the number's value (a guard)
    table = np.arange(4.0)

    def values(x, n):
        return np.ones(2, np.float32) * n, np.float64(2.0) - n, n * np.ones(2), x ** n, np.arange(3) / n

    def indices(x, n):
        return x * table[np.arange(4) < n].sum(), x * table[np.arange(2) * int(n)].sum()

    for f, traces in ((values, 1), (indices, 5)):
        jf = pb.jit(f)
        for n in [0.5, 0.75, 1.5, 2.5, 3.5]:
            for got, want in zip(jf(np.ones(2), n), f(np.ones(2), n)):
                assert type(got) is type(want) and got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
        assert jf.cache_info().traces == traces
