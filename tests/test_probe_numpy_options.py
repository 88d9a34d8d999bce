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


# --- joins: dtype= and casting= as NumPy checks them ------------------------------------------------
@pytest.mark.parametrize("f", [
    lambda x, y: np.concatenate([x, x], dtype=np.int64),
    lambda x, y: np.concatenate([x, y], casting="no"),
    lambda x, y: np.stack([x, x], dtype=np.float32, casting="safe"),
    lambda x, y: np.vstack([x, x], dtype=np.int32),
    lambda x, y: np.hstack([x, y], casting="equiv"),
])
def test_joins_refuse_the_casts_numpy_refuses(f):
    x, y = np.array([1.5, 2.5]), np.array([1.0, 2.0], np.float32)
    with pytest.raises(TypeError, match="Cannot cast"):
        f(x, y)
    with pytest.raises(TypeError, match="Cannot cast"):
        pb.pullback(f, x, y)


def test_joins_cast_as_numpy_allows():
    x, y = np.array([1.5, 2.5]), np.array([1.0, 2.0], np.float32)
    for f in (lambda x, y: np.concatenate([x, y], dtype=np.float32), lambda x, y: np.stack([x, y], casting="unsafe", dtype=int),
              lambda x, y: np.hstack([y, y], casting="no"), lambda x, y: np.vstack([x, y], dtype=np.float64, casting="safe")):
        _same(_value(f, x, y), f(x, y))


# --- reshape(copy=...): a copy is not a view, and copy=False refuses as NumPy does --------------------
@pytest.mark.parametrize("order", ["C", "F"])
def test_reshape_copy_true_gives_a_copy_that_writes_stay_in(order):
    def f(x):
        z = x * 1.0
        y = np.reshape(z, (4, 3), order=order, copy=True)
        y[0] = 0.0
        return np.sum(z * z)

    x = np.arange(12.0).reshape(3, 4)
    assert pb.withgradient(f, x)[0] == f(x)
    assert_gradient(f, x)


def test_reshape_copy_false_refuses_as_numpy():
    f = lambda x: np.reshape(x.T, (12,), copy=False)  # noqa: E731
    x = np.arange(12.0).reshape(3, 4)
    with pytest.raises(ValueError):
        f(x)
    with pytest.raises(ValueError):
        pb.pullback(f, x)


# --- functions that return their input itself: writes through the result reach the input ---------------
@pytest.mark.parametrize("op", [lambda z: np.astype(z, np.float64, copy=False), lambda z: np.real_if_close(z),
                                lambda z: z.astype(np.float64, copy=False)])
def test_a_function_returning_its_input_returns_it_under_differentiation(op):
    def f(x):
        z = x * 1.0
        y = op(z)
        y[0, 0] = 100.0
        return np.sum(z * z)

    x = np.arange(12.0).reshape(3, 4) - 3.5
    assert pb.withgradient(f, x)[0] == f(x)
    assert_gradient(f, x)


def test_astype_function_copies_by_default():
    def f(x):
        z = x * 1.0
        y = np.astype(z, np.float64)
        y[0, 0] = 100.0
        return np.sum(z * z)

    x = np.arange(12.0).reshape(3, 4) - 3.5
    assert pb.withgradient(f, x)[0] == f(x)
