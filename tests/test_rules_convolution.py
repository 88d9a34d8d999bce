"""np.convolve and np.correlate in every mode against float64 central differences in both modes, their
values against NumPy, and second order."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rule_checks import check_against_numpy, dtypes, second_order, seeds

SETTINGS = settings(max_examples=10, deadline=None)


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
