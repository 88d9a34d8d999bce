"""np.interp against float64 central differences in both modes, in the points, the knots, the values
and the fill values outside; second order, and the refusals."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from pullback.testing import assert_gradient

SETTINGS = settings(max_examples=10, deadline=None)
seeds = st.integers(0, 2**32 - 1)


def gradcheck(f, *args, **tol):
    """Every element of f's derivative, in reverse and forward mode, against central differences."""
    return assert_gradient(f, *args, dense_up_to=None, **({"rtol": 1e-5, "atol": 1e-7} | tol)).gradient


def second_order(f, x, rtol=1e-4):
    """The derivatives of f's derivative maps (reverse and forward over each) against central differences."""
    gradcheck(f, x, order=2, rtol=rtol, atol=1e-6)


def project(y, seed=0):
    """A fixed random linear functional: a scalar loss that sees every element of y."""
    return np.sum(y * np.random.default_rng(seed).normal(size=np.shape(y)))


def check_against_numpy(fn, *args, dtype=np.float64):
    """fn's derivatives against central differences, and its traced value against NumPy."""
    gradcheck(fn, *args, **({"rtol": 1e-5, "atol": 1e-7} if dtype == np.float64 else {"rtol": 3e-3, "atol": 3e-4}))
    traced = pb.pullback(fn, *args)[0]
    expected = fn(*args)
    for got, want in zip(traced, expected) if isinstance(expected, (tuple, list)) else [(traced, expected)]:
        exact = dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-6 if exact else 1e-4, atol=1e-12 if exact else 1e-5)
        assert np.shape(got) == np.shape(want)


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
    with pytest.raises(NotImplementedError, match="period"):
        pb.gradient(lambda fp: np.sum(np.interp(x, xp, fp, period=2.0)), fp)
