"""np.convolve and np.correlate in every mode against float64 central differences in both modes, their
values against NumPy, and second order."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pullback as pb
from pullback.testing import assert_gradient

SETTINGS = settings(max_examples=10, deadline=None)
seeds = st.integers(0, 2**32 - 1)
dtypes = st.sampled_from([np.float64, np.float32])


def gradcheck(f, *args, **tol):
    """Every element of f's derivative, in reverse and forward mode, against central differences."""
    return assert_gradient(f, *args, dense_up_to=None, **({"rtol": 1e-5, "atol": 1e-7} | tol)).gradient


def second_order(f, x, rtol=1e-4):
    """The derivatives of f's derivative maps (reverse and forward over each) against central differences."""
    gradcheck(f, x, order=2, rtol=rtol, atol=1e-6)


def check_against_numpy(fn, *args, dtype=np.float64):
    """fn's derivatives against central differences, and its traced value against NumPy."""
    gradcheck(fn, *args, **({"rtol": 1e-5, "atol": 1e-7} if dtype == np.float64 else {"rtol": 3e-3, "atol": 3e-4}))
    traced = pb.pullback(fn, *args)[0]
    expected = fn(*args)
    for got, want in zip(traced, expected) if isinstance(expected, (tuple, list)) else [(traced, expected)]:
        exact = dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-6 if exact else 1e-4, atol=1e-12 if exact else 1e-5)
        assert np.shape(got) == np.shape(want)


@pytest.mark.parametrize("fn", [np.convolve, np.correlate])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@SETTINGS
@given(m=st.integers(1, 7), n=st.integers(1, 7), dtype=dtypes, seed=seeds)
def test_convolve_correlate(fn, mode, m, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a, v = rng.normal(size=m).astype(dtype), rng.normal(size=n).astype(dtype)
    check_against_numpy(lambda a, v: fn(a, v, mode), a, v, dtype=dtype)


def test_convolve_second_order():
    a, v = np.array([1.0, -2.0, 0.5, 3.0]), np.array([0.2, 0.7])
    second_order(lambda a: np.convolve(a, a, "same") * np.correlate(a, v, "full")[:4], a)
