"""select, compress, extract, choose, piecewise, put_along_axis, apply_along_axis, apply_over_axes,
and the set operations and unique_* functions (gathers) against central differences in both modes,
NumPy's values and float32."""

import numpy as np
import pytest

import pullback as pb
from numpy_coverage_checks import run_case, run_float32

rng = np.random.default_rng(15)
M = rng.normal(size=(3, 4))
# Distinct values, and none shared: central differences cannot move a value that has copies (or a value
# common to both sets) without splitting it, so those cases are derived by hand below.
D = np.array([3.0, 1.0, 2.0, 5.5, 4.0, 0.5])
E = np.array([2.5, 7.0, 1.5, 9.0])
CHOICE = np.array([[0, 1, 2, 1], [2, 2, 0, 1], [1, 0, 0, 2]])


def put_rows(x, v):
    y = x * 1.0
    np.put_along_axis(y, np.array([[1], [0], [3]]), v, axis=1)
    return y


def put_flat(x, v):
    y = x * 1.0
    np.put_along_axis(y, np.array([1, 7]), v, axis=None)
    return y


CASES = {
    "select": (lambda x: np.select([x > 0.5, x < -0.5], [x ** 2, 2.0 * x], default=-1.0), (M,)),
    "select default traced": (lambda x, d: np.select([x > 0.5], [x ** 2], default=d), (M, M[0])),
    "compress": (lambda x: np.compress([True, False, True], x, axis=0), (M,)),
    "compress negative axis": (lambda x: np.compress([0, 1, 1], x, axis=-1), (M,)),
    "compress flat": (lambda x: np.compress([1, 0, 1, 1], x), (M,)),
    "extract": (lambda x: np.extract(M > 0, x), (M,)),
    "choose": (lambda x, y: np.choose(CHOICE, [x, y, 3.0]), (M, M ** 2)),
    "choose wrap": (lambda x, y: np.choose(CHOICE + 3, [x, y, y[0]], mode="wrap"), (M, M ** 2)),
    "choose clip": (lambda x, y: np.choose(CHOICE * 2, [x, y], mode="clip"), (M, M ** 2)),
    "piecewise": (lambda x: np.piecewise(x, [x < 0, x > 0.5], [lambda v: v ** 2, np.sin, 7.0]), (M,)),
    "piecewise otherwise": (lambda x: np.piecewise(x, [x < 0], [np.exp, lambda v: 2.0 * v]), (M,)),
    "put_along_axis": (put_rows, (M, M[:, :1] ** 2)),
    "put_along_axis flat": (put_flat, (M, M[0, :2] * 3.0)),
    "apply_along_axis": (lambda x: np.apply_along_axis(lambda v: np.stack([np.sum(v ** 2), np.max(v)]), 1, x), (M,)),
    "apply_along_axis matrix": (lambda x: np.apply_along_axis(lambda v: np.outer(v, v), 0, x), (M,)),
    "apply_along_axis scalar": (lambda x: np.apply_along_axis(np.prod, -1, x), (M,)),
    "apply_along_axis 1-d": (lambda x: np.apply_along_axis(lambda v: np.cumsum(v) * v, 0, x), (M[0],)),
    "apply_along_axis 1-d scalar": (lambda x: np.apply_along_axis(lambda v: np.sum(v ** 2), -1, x), (M[1],)),
    "apply_over_axes": (lambda x: np.apply_over_axes(np.sum, x, [0, 1]), (M,)),
    "apply_over_axes mean": (lambda x: np.apply_over_axes(np.mean, x, 1), (M,)),
    "unique_values": (np.unique_values, (D,)),
    "unique_counts": (np.unique_counts, (D,)),
    "unique_inverse": (np.unique_inverse, (D.reshape(2, 3),)),
    "unique_all": (np.unique_all, (D,)),
    "union1d": (np.union1d, (D, E)),
    "setdiff1d": (np.setdiff1d, (D, E)),
    "setdiff1d unique": (lambda a, b: np.setdiff1d(a, b, assume_unique=True), (E, D)),
    "setxor1d": (np.setxor1d, (D, E)),
    "sort_complex": (lambda x: np.real(np.sort_complex(x)), (D * 1.5 + np.arange(6),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_central_differences_and_numpy(name):
    f, args = CASES[name]
    run_case(f, *args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32(name):
    f, args = CASES[name]
    run_float32(f, *args)


def test_copies_and_shared_values_take_their_gradient_from_the_first_occurrence():
    a, b = np.array([3.0, 1.0, 2.0, 3.0, 1.0, 5.0]), np.array([2.0, 7.0, 1.0, 9.0])
    weights = np.arange(1.0, 7.0)  # union: 1, 2, 3, 5, 7, 9
    g1, g2 = pb.gradient(lambda a, b: np.sum(np.union1d(a, b) * weights), a, b)
    np.testing.assert_array_equal(g1, [3.0, 1.0, 2.0, 0.0, 0.0, 4.0])
    np.testing.assert_array_equal(g2, [0.0, 5.0, 0.0, 6.0])
    g1, g2 = pb.gradient(lambda a, b: np.sum(np.intersect1d(a, b) * np.array([10.0, 20.0])), a, b)  # 1 and 2
    np.testing.assert_array_equal(g1, [0.0, 10.0, 20.0, 0.0, 0.0, 0.0])
    assert g2 is None
    # Moving every copy of a value together moves it: the sum of its copies' gradients is the derivative.
    g, = pb.gradient(lambda a: np.sum(np.unique_values(a) * np.arange(1.0, 5.0)), a)
    step = 1e-6
    moved = np.where(a == 3.0, 1.0, 0.0)
    fd = (np.sum(np.unique_values(a + step * moved) * np.arange(1.0, 5.0))
          - np.sum(np.unique_values(a - step * moved) * np.arange(1.0, 5.0))) / (2 * step)
    np.testing.assert_allclose(np.sum(g * moved), fd)
    counts = pb.pullback(np.unique_counts, a)[0]
    np.testing.assert_array_equal(counts.counts, [2, 1, 2, 1])
    g1, = pb.gradient(lambda a: np.sum(np.setdiff1d(a, b) * np.array([1.0, 2.0])), a)  # 3 and 5 are left
    np.testing.assert_array_equal(g1, [1.0, 0.0, 0.0, 0.0, 0.0, 2.0])


def test_put_along_axis_into_a_plain_array_with_a_traced_value_is_refused():
    with pytest.raises(TypeError, match="differentiated"):
        pb.gradient(lambda v: np.sum(np.put_along_axis(np.zeros((3, 4)), np.array([[1], [0], [3]]), v, 1)),
                    M[:, :1])


def test_apply_along_axis_with_an_empty_axis_runs_as_numpy():
    x = np.zeros((0, 3))
    np.testing.assert_array_equal(pb.pullback(lambda x: np.apply_along_axis(np.sum, 0, x), x)[0], np.zeros(3))
