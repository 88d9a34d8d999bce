"""pb.jit hands out arrays the caller owns (also a gradient made of constants), refuses only arguments that
share memory with one it writes, keeps a trace made after a LinAlgError out of the cache, and guards the
shapes of np.delete, np.histogram and boolean-scalar indexing."""
import numpy as np

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
