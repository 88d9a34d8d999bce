"""Cases a probe of NumPy's options found: under differentiation a function must give exactly the value
NumPy gives (same bits, dtype and shape), whatever the memory layout of its inputs, and the gradient
must agree with central differences."""

import numpy as np
import pytest

import pullback as pb
from pullback.testing import assert_gradient


def _value(f, *args):
    return pb.pullback(f, *args)[0]


def _same(a, b):
    assert type(a) is type(b) and np.asarray(a).dtype == np.asarray(b).dtype
    np.testing.assert_array_equal(a, b)


# --- polyint: the integration constants are NumPy's, not rounded or mixed with the coefficients ----
@pytest.mark.parametrize("p", [np.array([0.3, -1.2, 2.0], np.float32), np.array([np.nan, -1.2, 2.0]),
                               np.array([np.inf, 1.0])])
def test_polyint_constants_keep_their_value(p):
    f = lambda p: np.polyint(p, 2, k=[0.3, 0.1])  # noqa: E731
    _same(_value(f, p), f(p))


def test_polyint_one_constant_for_every_order():
    p = np.array([1.0, 2.0, 3.0])
    for k in ([0.3], np.array([0.3]), 0.3):
        f = lambda p, k=k: np.polyint(p, 3, k=k)  # noqa: E731
        _same(_value(f, p), f(p))
        assert_gradient(f, p)
    assert_gradient(lambda p, k: np.polyint(p, 2, k=k), p, np.array([0.4]))


# --- the value of a sum over an input whose layout NumPy copies --------------------------------
@pytest.mark.parametrize("fn", [np.nansum, np.nanprod])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_nan_reductions_of_broadcast_inputs_give_numpys_value(fn, axis):
    rng = np.random.default_rng(9)
    row = 1.0 + 0.01 * rng.normal(size=129)
    x = np.broadcast_to(row, (37, 129))
    f = lambda x: fn(x, axis=axis)  # noqa: E731
    _same(_value(f, x), f(x))


# --- np.dot of 2-D operands that are not contiguous ----------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_dot_of_strided_matrices_gives_numpys_value(dtype):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 80)).astype(dtype)
    v = rng.normal(size=80).astype(dtype)
    for f, args in [(np.dot, (x[::2], x[1::2].T)), (np.dot, (x[::2], x[::2].T)), (np.dot, (x[:, :50], x[:, :50].T)),
                    (np.dot, (x[:, ::2], v[::2]))]:
        _same(_value(f, *args), f(*args))
    if dtype != np.complex128:
        assert_gradient(np.dot, x[:6:2, :5], x[1:6:2, :5].T)


# --- trapezoid: N-D sample points fewer dimensions than y, broadcast as NumPy does ---------------
def test_trapezoid_with_sample_points_of_fewer_dimensions():
    rng = np.random.default_rng(12)
    y, x = rng.normal(size=(2, 3, 4)), np.sort(rng.normal(size=(3, 4)), axis=1)
    f = lambda y, x: np.trapezoid(y, x)  # noqa: E731
    _same(_value(f, y, x), f(y, x))
    assert_gradient(f, y, x)
