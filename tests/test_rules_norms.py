"""np.linalg.norm, vector_norm and matrix_norm, every order, against float64 central differences in
both modes over random shapes; the norm of zero, and second order."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from pullback._compat import EMPTY_NORMS_ARE_ZERO
from pullback.testing import numerical_gradient
from rule_checks import gradcheck, second_order, seeds

SETTINGS = settings(max_examples=12, deadline=None)
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)


VECTOR_ORDERS = [None, 1, 2, 3, 0.5, -1, -2.5, np.inf, -np.inf]
MATRIX_ORDERS = [None, "fro", "f", "nuc", 1, -1, 2, -2, np.inf, -np.inf]


@pytest.mark.parametrize("order", VECTOR_ORDERS, ids=str)
@SETTINGS
@given(shape=shapes, keepdims=st.booleans(), seed=seeds)
def test_vector_norms(order, shape, keepdims, seed):
    rng = np.random.default_rng(seed)
    x = (rng.permutation(int(np.prod(shape))) * 0.1 + 0.3).reshape(shape) * rng.choice([-1.0, 1.0], shape)
    axis = int(rng.integers(-len(shape), len(shape)))
    gradcheck(lambda x: np.linalg.norm(x, ord=order, axis=axis, keepdims=keepdims), x)
    np.testing.assert_allclose(pb.pullback(lambda x: np.linalg.norm(x, order, axis, keepdims), x)[0],
                               np.linalg.norm(x, order, axis, keepdims))
    if order is not None:
        axes = tuple(range(len(shape)))[-2:]
        gradcheck(lambda x: np.linalg.vector_norm(x, ord=order, axis=axes, keepdims=keepdims), x)


@pytest.mark.parametrize("order", MATRIX_ORDERS, ids=str)
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=4), keepdims=st.booleans(), seed=seeds)
def test_matrix_norms(order, shape, keepdims, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)  # ties between rows, columns or singular values have probability 0
    gradcheck(lambda x: np.linalg.norm(x, ord=order, axis=(-1, 0), keepdims=keepdims), x, rtol=1e-4)
    gradcheck(lambda x: np.linalg.matrix_norm(x, ord=order or "fro"), x, rtol=1e-4)


def test_norm_of_zero_has_zero_gradient_and_second_order():
    assert np.array_equal(pb.gradient(np.linalg.norm, np.zeros(3))[0], np.zeros(3))
    second_order(lambda x: np.linalg.norm(x), np.array([0.3, -1.2, 2.0]))
    second_order(lambda x: np.linalg.norm(x, "nuc"), np.array([[0.3, -1.2], [2.0, 0.7]]))


@pytest.mark.parametrize("shape, ord", [((0,), np.inf), ((0, 3), np.inf), ((0, 3), 2), ((3, 0), 1), ((0, 3), "nuc")])
def test_a_norm_of_an_empty_array_is_numpy_s_zero(shape, ord):
    x = np.ones(shape)
    if not EMPTY_NORMS_ARE_ZERO and ord != "nuc":  # NumPy 2.2 takes these maxima without initial=0: its error
        with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
            np.linalg.norm(x, ord)
        for mode in (lambda f: pb.withgradient(f, x), lambda f: pb.jvp(f, (x,), (x,))):
            with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
                mode(lambda x: np.linalg.norm(x, ord))
        return
    val, (g,) = pb.withgradient(lambda x: np.linalg.norm(x, ord), x)
    assert val == np.linalg.norm(x, ord) == 0.0
    assert g.shape == shape


@pytest.mark.parametrize("call", [
    lambda a: np.linalg.norm(a, "f", axis=(0, 1)),
    lambda a: np.linalg.norm(a, "f", axis=(1, 0), keepdims=True),
    lambda a: np.linalg.matrix_norm(a, ord="f"),
], ids=["norm", "norm keepdims", "matrix_norm"])
def test_ord_f_is_numpys_alias_of_the_frobenius_norm(call):
    x = np.arange(1.0, 13.0).reshape(4, 3)
    val, (g,) = pb.withgradient(lambda a: np.sum(call(a)), x)
    assert val == np.sum(call(x))
    np.testing.assert_allclose(g, x / np.sqrt(np.sum(x ** 2)), rtol=1e-12)
    y, t = pb.jvp(call, (x,), (x,))
    np.testing.assert_array_equal(y, call(x))
    np.testing.assert_allclose(t, call(x), rtol=1e-12)  # a norm is 1-homogeneous: its derivative along x is itself


def test_an_axis_numpy_converts_with_int_works_in_both_modes():
    x = np.arange(1.0, 7.0).reshape(2, 3)
    f = lambda a: np.linalg.norm(a, axis=1.0)
    y, t = pb.jvp(f, (x,), (x,))
    np.testing.assert_array_equal(y, f(x))
    np.testing.assert_allclose(t, f(x), rtol=1e-12)
    gradcheck(f, x)
    with pytest.raises(TypeError, match="axis"):
        pb.jvp(lambda a: np.linalg.norm(a, axis=[1]), (x,), (x,))  # as NumPy: int([1]) fails


@pytest.mark.parametrize("order", [-1, -2, -0.5])
def test_a_negative_order_norm_with_a_zero_entry_has_the_subgradient_zero(order):
    # (sum |x_i|^p)^(1/p), p < 0, is 0 with a zero entry and about |x_0| near it: central differences
    # give 0 for the other entries, and abs's subgradient at 0 is 0
    x = np.array([0.0, 1.0, 2.0])
    f = lambda a: np.linalg.norm(a, order)
    with np.errstate(divide="ignore"):
        val, (g,) = pb.withgradient(f, x)
        assert val == f(x) == 0.0
        np.testing.assert_allclose(g[1:], numerical_gradient(f, x)[0][1:], atol=1e-6)
        assert g[0] == 0.0
        y, t = pb.jvp(f, (x,), (np.ones(3),))
        assert y == 0.0 and t == 0.0
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):  # NumPy's own 1 / 0
        pb.gradient(f, x)
