"""np.interp against float64 central differences in both modes, in the points, the knots, the values
and the fill values outside; second order, and the refusals."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from rule_checks import check_against_numpy, gradcheck, second_order, seeds

SETTINGS = settings(max_examples=10, deadline=None)


def project(y, seed=0):
    """A fixed random linear functional: a scalar loss that sees every element of y."""
    return np.sum(y * np.random.default_rng(seed).normal(size=np.shape(y)))


@SETTINGS
@given(points=st.integers(2, 6), queries=hnp.array_shapes(min_dims=0, max_dims=2, max_side=4), ends=st.booleans(),
       seed=seeds)
def test_interp(points, queries, ends, seed):
    rng = np.random.default_rng(seed)
    xp = np.cumsum(rng.uniform(0.3, 1.0, points))
    fp = rng.normal(size=points)
    x = rng.uniform(xp[0] - 1.0, xp[-1] + 1.0, queries)
    x = np.where(np.min(np.abs(x[..., None] - xp), axis=-1) < 1e-3, x + 0.01, x)  # away from the kinks
    if ends:
        check_against_numpy(lambda x, xp, fp, left, right: np.interp(x, xp, fp, left, right), x, xp, fp, -0.5, 0.25)
    else:
        check_against_numpy(lambda x, xp, fp: np.interp(x, xp, fp), x, xp, fp)


def test_interp_second_order_and_refusals():
    xp, fp = np.array([0.0, 1.0, 2.5]), np.array([1.0, -1.0, 2.0])
    x = np.array([0.3, 1.7, 2.2])
    gradcheck(lambda xp: np.sum(pb.gradient(lambda fp: project(np.interp(x, xp, fp) ** 2), fp)[0]), xp, rtol=1e-4)
    second_order(lambda fp: np.interp(x, xp, fp) ** 2, fp)
    with pytest.raises(ValueError, match="period must be a non-zero value"):  # NumPy's own message
        pb.gradient(lambda fp: np.sum(np.interp(x, xp, fp, period=0)), fp)


@pytest.mark.parametrize("period", [5.0, -5.0])
def test_interp_with_a_period_matches_numpy_and_central_differences(period):
    # knots in any order, points in several periods: NumPy wraps and sorts, and so does the rule
    x = np.array([-1.3, 0.2, 2.7, 4.1, 7.9])
    xp, fp = np.array([2.5, 0.0, 1.0, 4.0]), np.array([1.0, 3.0, 2.0, -1.0])
    check_against_numpy(lambda x, xp, fp: np.interp(x, xp, fp, period=period), x, xp, fp)
    assert np.array_equal(pb.pullback(lambda x: np.interp(x, xp, fp, period=period), x)[0],
                          np.interp(x, xp, fp, period=period))
    (g,) = pb.gradient(lambda x: np.sum(np.interp(x, [1.0], [2.0], period=3.0)), x)  # one knot: a constant
    np.testing.assert_array_equal(g, np.zeros(5))


def test_only_left_or_right_traced_names_interp_and_the_fix():
    # NumPy hands np.interp over on x, xp and fp only: a traced `left` alone reaches NumPy's float().
    x, xp, fp = np.array([-1.0, 0.5, 5.0]), np.array([0.0, 1.0]), np.array([0.0, 2.0])
    with pytest.raises(TypeError, match=r"numpy\.interp converted it.*make one of those traced"):
        pb.gradient(lambda left: np.sum(np.interp(x, xp, fp, left, 3.0)), 2.0)
    # The fix it names: a traced array argument, and the fill values are differentiated.
    g = pb.gradient(lambda left, right: np.sum(np.interp(x, xp, fp + 0.0 * left, left, right)), 2.0, 3.0)
    assert g == (1.0, 1.0)
