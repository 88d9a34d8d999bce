"""Rules that once gave a wrong derivative (or a misleading error), each checked against central
differences: np.unique, np.heaviside, np.tensordot with positional axes (forward mode, and so
jacobian, hessian and hvp), and np.full_like with a tracked fill value."""

import numpy as np
import pytest

import pullback as pb
from fd import assert_gradient, numerical_gradient


def directional_difference(f, x, v, eps=1e-6):
    """d/dt f(x + t v) at t = 0, by central differences."""
    return (f(x + eps * v) - f(x - eps * v)) / (2 * eps)


# --- np.unique ----------------------------------------------------------------------------------
WEIGHTS = np.array([0.5, -1.0, 2.0, 1.5, -0.25, 3.0])


def weighted_unique(x):
    u = np.unique(x)
    return np.sum(WEIGHTS[: np.size(u)] * u ** 2)


def test_unique_of_distinct_values():
    x = np.array([[0.3, -1.2, 2.5], [1.1, -0.4, 0.9]])
    grads = assert_gradient(weighted_unique, x)
    order = np.argsort(x, axis=None)
    expected = np.zeros(6)
    expected[order] = WEIGHTS * 2.0 * np.sort(x, axis=None)  # u = sort(x): u_k comes from x[order[k]]
    np.testing.assert_allclose(grads[0].ravel(), expected, rtol=1e-12)


def test_unique_with_repeats_gives_each_value_to_its_first_occurrence():
    x = np.array([3.0, 1.0, 3.0, 2.0, 1.0, 3.0])
    (g,) = pb.gradient(weighted_unique, x)
    # u = [1, 2, 3] from positions 1, 3 and 0 (first occurrences); the copies get nothing.
    np.testing.assert_array_equal(g, [2.0 * 3.0 * 2.0, 0.5 * 2.0 * 1.0, 0.0, -1.0 * 2.0 * 2.0, 0.0, 0.0])
    # Moving all copies of a value together keeps the ties: there the derivative exists, and the
    # gradient's total over each group of copies gives it.
    groups = [x == value for value in (1.0, 2.0, 3.0)]
    for v in [groups[0] * 1.0, groups[2] * 1.0, groups[0] * 0.3 - groups[1] * 2.0 + groups[2] * 0.7]:
        expected = directional_difference(weighted_unique, x, v)
        np.testing.assert_allclose(np.sum(g * v), expected, rtol=1e-6)
        np.testing.assert_allclose(pb.jvp(weighted_unique, (x,), (v,))[1], expected, rtol=1e-6)


def test_unique_extra_outputs_are_numpys_integers():
    x = np.array([2.0, -1.0, 2.0, 0.5])
    weights = np.array([1.0, -2.0, 3.0])

    def f(x):
        values, index, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
        assert all(type(a) is np.ndarray and a.dtype.kind == "i" for a in (index, inverse, counts))
        for mine, numpys in zip((index, inverse, counts), np.unique(pb.stop_gradient(x), True, True, True)[1:]):
            np.testing.assert_array_equal(mine, numpys)
        return np.sum(weights * values * counts)

    # u = [-1, 0.5, 2] from positions 1, 3 and 0, counts [1, 1, 2]: d/du = weights * counts.
    np.testing.assert_array_equal(pb.gradient(f, x)[0], [3.0 * 2.0, 1.0, 0.0, -2.0])
    assert_gradient(f, np.array([2.0, -1.0, 0.5]))


def test_unique_rows():
    x = np.array([[1.0, 2.0], [0.0, 1.0], [1.0, 2.0], [0.5, -1.0]])
    weights = np.array([[1.0, -1.0], [2.0, 0.5], [-3.0, 1.5]])

    def f(x):
        rows, index = np.unique(x, return_index=True, axis=0)
        np.testing.assert_array_equal(index, [1, 3, 0])
        return np.sum(weights * rows ** 3)

    (g,) = pb.gradient(f, x)
    # d(r ** 3) = 3 r ** 2 times the weight, on the first copy of each row: rows 1, 3 and 0.
    np.testing.assert_allclose(g, [[-9.0, 18.0], [0.0, -3.0], [0.0, 0.0], [1.5, 1.5]], rtol=1e-12)
    # Moving both copies of the row [1, 2] together:
    v = np.zeros_like(x)
    v[[0, 2]] = [0.3, -0.8]
    np.testing.assert_allclose(np.sum(g * v), directional_difference(f, x, v), rtol=1e-6)


# --- np.heaviside -------------------------------------------------------------------------------
def test_heaviside_value_at_zero_is_differentiable():
    x = np.array([-1.5, 0.0, 2.0, 0.0, -0.0])
    weights = np.array([1.0, 2.0, 3.0, -4.0, 0.5])
    f = lambda h: np.sum(weights * np.heaviside(x, h) ** 2)  # noqa: E731
    h = np.array([0.3, 0.4, 0.5, 0.6, 0.7])
    (g,) = assert_gradient(f, h)
    np.testing.assert_allclose(g, [0.0, 2.0 * 2.0 * 0.4, 0.0, -4.0 * 2.0 * 0.6, 0.5 * 2.0 * 0.7], rtol=1e-12)
    assert_gradient(lambda h: np.sum(np.heaviside(x, h)), 0.25)  # a Python float, broadcast
    v = np.array([1.0, -1.0, 2.0, 0.5, 3.0])
    np.testing.assert_allclose(pb.jvp(f, (h,), (v,))[1], np.sum(g * v), rtol=1e-12)


def test_heaviside_step_has_no_gradient_away_from_zero():
    x = np.array([-1.5, 0.2, 2.0, -0.3])
    h = np.array([0.3, 0.4, 0.5, 0.6])
    f = lambda x, h: np.sum(np.heaviside(x, h) * np.array([1.0, 2.0, 3.0, 4.0]))  # noqa: E731
    assert_gradient(f, x, h)
    _, dot = pb.jvp(f, (x, h), (np.ones(4), np.ones(4)))
    assert dot is None or dot == 0.0


# --- np.tensordot with positional axes, in forward mode -----------------------------------------
RNG = np.random.default_rng(7)
A23, B32, C234 = RNG.normal(size=(2, 3)), RNG.normal(size=(3, 2)), RNG.normal(size=(2, 3, 4))


def central_jvp(f, args, tangents, eps=1e-6):
    plus = f(*[a + eps * t for a, t in zip(args, tangents)])
    minus = f(*[a - eps * t for a, t in zip(args, tangents)])
    return (plus - minus) / (2 * eps)


@pytest.mark.parametrize("axes", [([0, 1], [1, 0]), 1, ([1], [0]), (0, 1)], ids=str)
def test_tensordot_positional_axes_in_forward_mode(axes):
    f = lambda a, b: np.tensordot(a, b, axes)  # noqa: E731
    v = (RNG.normal(size=A23.shape), RNG.normal(size=B32.shape))
    y, dot = pb.jvp(f, (A23, B32), v)
    np.testing.assert_allclose(y, f(A23, B32), rtol=1e-14)
    np.testing.assert_allclose(dot, central_jvp(f, (A23, B32), v), rtol=1e-7, atol=1e-9)
    keyword = pb.jvp(lambda a, b: np.tensordot(a, b, axes=axes), (A23, B32), v)[1]
    np.testing.assert_allclose(dot, keyword, rtol=1e-14)


def test_tensordot_jacobian_in_forward_mode():
    x = RNG.normal(size=3)
    f = lambda x: np.tensordot(C234, np.outer(x, x[:2]), ([1, 0], [0, 1]))  # noqa: E731
    assert f(x).size > x.size  # so that jacobian takes forward mode
    (jac,) = pb.jacobian(f, x)
    expected = np.stack([numerical_gradient(lambda x: f(x)[i], [x], 0) for i in range(4)])
    np.testing.assert_allclose(jac, expected, rtol=1e-7, atol=1e-9)


def test_hessian_through_tensordot_and_inner():
    m = RNG.normal(size=(3, 3))

    def f(x):
        q = np.tensordot(np.outer(x, x), m, ([0, 1], [1, 0]))  # x^T M^T x, written with positional axes
        return q * np.inner(x, np.sin(x)) + np.inner(np.tensordot(m, x, 1), x ** 2)

    x = np.array([0.4, -1.1, 0.7])
    expected = np.stack([numerical_gradient(lambda x: pb.gradient(f, x)[0][i], [x], 0) for i in range(3)])
    np.testing.assert_allclose(pb.hessian(f, x), expected, rtol=1e-6, atol=1e-8)
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(pb.hvp(f, x, v), expected @ v, rtol=1e-6, atol=1e-8)


# --- np.full_like with a tracked fill value -----------------------------------------------------
def test_full_like_is_differentiable_in_the_fill_value():
    weights = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]])
    x = np.array([[0.7, -0.2, 1.3], [0.4, 2.0, -0.6]])
    f = lambda x: np.sum(weights * np.full_like(x, x[0, 2]) ** 2)  # noqa: E731
    (g,) = assert_gradient(f, x)
    np.testing.assert_allclose(g[0, 2], np.sum(weights) * 2.0 * 1.3, rtol=1e-12)  # the cotangent's sum
    v = RNG.normal(size=x.shape)
    np.testing.assert_allclose(pb.jvp(f, (x,), (v,))[1], np.sum(g * v), rtol=1e-12)
    # A float32 row, broadcast into another shape and cast to float64; the result takes tracked writes.
    def g_of(x, row):
        h = np.full_like(x, row, np.float64, shape=(2, 2, 3))
        assert h.dtype == np.float64
        h[1, 0] = x[1] * row
        return np.sum(weights * h)

    grads = assert_gradient(g_of, x, np.array([0.5, -1.5, 2.0], dtype=np.float32), rtol=1e-6)
    # Slices (0, 0), (0, 1) and (1, 1) hold the row; slice (1, 0) holds x[1] * row.
    np.testing.assert_allclose(grads[1], weights[0] + 2.0 * weights[1] + weights[0] * x[1], rtol=1e-6)


def test_full_like_on_a_plain_prototype_says_what_to_write():
    with pytest.raises(TypeError, match=r"np\.full_like\(a, v\) with a plain `a`.*v \* np\.ones_like\(a\)"):
        pb.gradient(lambda v: np.sum(np.full_like(np.zeros(3), v)), np.array(2.0))
    # ... and that works:
    assert_gradient(lambda v: np.sum(np.arange(3.0) * (v * np.ones_like(np.zeros(3)))), np.array(2.0))
