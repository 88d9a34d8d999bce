"""What the rule tests share: strategies and the gradient checks they run through `pullback.testing`."""

import numpy as np
from hypothesis import strategies as st

import pullback as pb
from pullback.testing import assert_gradient

seeds = st.integers(0, 2**32 - 1)
dtypes = st.sampled_from([np.float64, np.float32])


def gradcheck(f, *args, **tol):
    """Every element of f's derivative, in reverse and forward mode, against central differences."""
    return assert_gradient(f, *args, dense_up_to=None, **({"rtol": 1e-5, "atol": 1e-7} | tol)).gradient


def second_order(f, x, rtol=1e-4):
    """The derivatives of f's derivative maps (reverse and forward over each) against central differences."""
    gradcheck(f, x, order=2, rtol=rtol, atol=1e-6)


def check_against_numpy(fn, *args, dtype=np.float64):
    """fn's derivatives against central differences, and its traced value against NumPy's, bit for bit."""
    gradcheck(fn, *args, **({"rtol": 1e-5, "atol": 1e-7} if dtype == np.float64 else {"rtol": 3e-3, "atol": 3e-4}))
    traced = pb.pullback(fn, *args)[0]
    expected = fn(*args)
    for got, want in zip(traced, expected) if isinstance(expected, (tuple, list)) else [(traced, expected)]:
        np.testing.assert_array_equal(got, want, strict=True)


def draw_axis(rng, ndim):
    return int(rng.integers(-ndim, ndim))
