"""sort, partition and unique: gradients that follow the elements, against float64 central differences
in both modes (where the elements are distinct) and by hand (where they tie); and the functions with
integer or boolean results (nanargmax, lexsort, isin, the index helpers, ...): NumPy's own results, or
NumPy's own errors, in both modes."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra import numpy as hnp

import pullback as pb
from rule_checks import check_against_numpy, draw_axis, gradcheck, seeds

SETTINGS = settings(max_examples=10, deadline=None)
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)


def directional_difference(f, x, v, eps=1e-6):
    """d/dt f(x + t v) at t = 0, by central differences."""
    return (f(x + eps * v) - f(x - eps * v)) / (2 * eps)


@SETTINGS
@given(shape=shapes, seed=seeds)
def test_sort_and_partition(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)  # distinct with probability 1
    axis = draw_axis(rng, len(shape))
    check_against_numpy(lambda x: np.sort(x, axis=axis), x)
    check_against_numpy(lambda x: np.sort(x, axis=None), x)
    kth = int(rng.integers(0, shape[axis]))
    # Only the kth element's position is defined by NumPy; its value is what we compare.
    take_kth = lambda y: np.take(y, [kth], axis=axis)  # noqa: E731
    check_against_numpy(lambda x: take_kth(np.partition(x, kth, axis=axis)), x)


def test_sort_with_ties_gives_each_element_one_gradient():
    g = pb.gradient(lambda x: np.sort(x)[0] * 1.0 + np.sort(x)[1] * 10.0, np.array([2.0, 2.0, 3.0]))[0]
    assert sorted(g.tolist()) == [0.0, 1.0, 10.0]


# --- np.unique ----------------------------------------------------------------------------------
WEIGHTS = np.array([0.5, -1.0, 2.0, 1.5, -0.25, 3.0])


def weighted_unique(x):
    u = np.unique(x)
    return np.sum(WEIGHTS[: np.size(u)] * u ** 2)


def test_unique_of_distinct_values():
    x = np.array([[0.3, -1.2, 2.5], [1.1, -0.4, 0.9]])
    grads = gradcheck(weighted_unique, x)
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
    gradcheck(f, np.array([2.0, -1.0, 0.5]))


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


# --- functions with integer or boolean results: NumPy's plain result, no gradient, in both modes ----
@pytest.mark.parametrize("fn", [np.nanargmax, np.nanargmin])
def test_nanargmax_of_tracked_value_gives_plain_index(fn):
    x = np.array([0.3, np.nan, 0.9, 0.1])
    expected = np.zeros(4)
    expected[fn(x)] = 2.0
    np.testing.assert_array_equal(pb.gradient(lambda a: a[fn(a)] * 2.0, x)[0], expected)
    np.testing.assert_array_equal(pb.jvp(lambda a: a[fn(a)] * 2.0, (x,), (np.ones(4),))[1], 2.0)


M = np.array([[0.3, 0.9, 0.1], [0.5, 0.2, 0.7]])
INTEGER_RESULTS = {
    "nanargmax": lambda a: np.nanargmax(a, axis=1),
    "nanargmin": lambda a: np.nanargmin(a),
    "lexsort": lambda a: np.lexsort(a),
    "lexsort of a tuple": lambda a: np.lexsort((a[0], a[1])),
    "argwhere": lambda a: np.argwhere(a),
    "isin": lambda a: np.isin(a, [0.3, 0.7]),
    "isin of traced test elements": lambda a: np.isin([0.3, 0.4], a),
    "array_equiv": lambda a: np.array_equiv(a, a[0]),
    "tril_indices_from": lambda a: np.tril_indices_from(a[:, :2]),
    "triu_indices_from": lambda a: np.triu_indices_from(a[:, :2], 1),
    "diag_indices_from": lambda a: np.diag_indices_from(a[:, :2]),
    "isfortran": np.isfortran,
    "isscalar": np.isscalar,
    "iterable": np.iterable,
}
# integer-only ufuncs: a traced value is a float, so NumPy's own error, as without pullback
NUMPY_ERRORS = {
    "bitwise_and": lambda a: np.bitwise_and(a, a),
    "bitwise_count": np.bitwise_count,
    "invert": np.invert,
    "left_shift": lambda a: np.left_shift(a, 1),
    "gcd": lambda a: np.gcd(a, a),
    "lcm": lambda a: np.lcm(a, 2),
    "isnat": np.isnat,
}


def _in_both_modes(call):
    """What `call` gives on M traced, in reverse and in forward mode."""
    seen = []

    def f(a):
        seen.append(call(a))
        return np.sum(a)

    pb.gradient(f, M)
    pb.jvp(f, (M,), (np.ones_like(M),))
    return seen


@pytest.mark.parametrize("name", list(INTEGER_RESULTS))
def test_integer_and_boolean_results_are_numpys_in_both_modes(name):
    expected = INTEGER_RESULTS[name](M.copy())
    for got in _in_both_modes(INTEGER_RESULTS[name]):
        assert type(got) is type(expected)
        for g, e in zip(got, expected) if type(expected) is tuple else [(got, expected)]:
            np.testing.assert_array_equal(g, e, strict=True)


@pytest.mark.parametrize("name", list(NUMPY_ERRORS))
def test_integer_only_ufuncs_of_a_traced_float_raise_numpys_error(name):
    with pytest.raises(TypeError) as plain:
        NUMPY_ERRORS[name](M.copy())
    for mode in (lambda f: pb.gradient(f, M), lambda f: pb.jvp(f, (M,), (np.ones_like(M),))):
        with pytest.raises(type(plain.value), match="^" + re.escape(str(plain.value)) + "$"):
            mode(lambda a: np.sum(NUMPY_ERRORS[name](a)) * a)


def test_ix_of_float_arrays_keeps_their_gradient():
    """np.ix_ passes a float array on, reshaped (NumPy makes index grids of integer and boolean ones only)."""
    a, b = np.array([0.5, 2.0]), np.array([1.5, -1.0, 3.0])
    assert np.shape(pb.pullback(lambda a, b: np.ix_(a, b)[1], a, b)[0]) == (1, 3)
    gradcheck(lambda a, b: np.ix_(a, b)[0] * np.ix_(a, b)[1], a, b)
    grids = pb.pullback(lambda a: np.ix_(a, [True, False, True], np.array([], dtype=float)), a)[0]
    for got, want in zip(grids, np.ix_(a, [True, False, True], np.array([], dtype=float))):
        np.testing.assert_array_equal(pb.stop_gradient(got), want, strict=True)
