"""cumsum, cumprod and diff against float64 central differences in both modes, over random shapes;
their values, the refusals, and second order."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from rule_checks import dtypes, gradcheck, second_order, seeds

SETTINGS = settings(max_examples=12, deadline=None)
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)


def tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-7} if dtype == np.float64 else {"rtol": 3e-3, "atol": 3e-4}


@st.composite
def shape_axis(draw):
    shape = draw(shapes)
    return shape, draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))


@SETTINGS
@given(sa=shape_axis(), dtype=dtypes, seed=seeds)
def test_cumsum(sa, dtype, seed):
    shape, axis = sa
    x = np.random.default_rng(seed).normal(size=shape).astype(dtype)
    gradcheck(lambda x: np.cumsum(x, axis=axis), x, **tolerance(dtype))
    gradcheck(lambda x: x.cumsum(axis), x, **tolerance(dtype))


@SETTINGS
@given(sa=shape_axis(), dtype=dtypes, zeros=st.integers(0, 3), seed=seeds)
def test_cumprod(sa, dtype, zeros, seed):
    shape, axis = sa
    rng = np.random.default_rng(seed)
    x = rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 1.5, shape)
    x.reshape(-1)[rng.integers(0, x.size, zeros)] = 0.0  # exact zeros take the other branch
    x = x.astype(dtype)
    gradcheck(lambda x: np.cumprod(x, axis=axis), x, **tolerance(dtype))


def test_cumprod_second_order_with_zeros():
    x = np.array([[0.7, 0.0, 1.3, 0.0, -0.9], [0.0, 0.0, 0.5, 1.1, 2.0], [1.2, -0.8, 0.6, 1.5, 0.0]])
    second_order(lambda x: np.cumprod(x, axis=1), x)
    second_order(lambda x: np.cumprod(x), x)
    second_order(lambda x: np.cumsum(x, axis=0) ** 2, x)


def test_cumsum_and_cumprod_values_and_accumulate():
    x = np.array([1.0, 2.0, 3.0])
    assert np.array_equal(pb.gradient(lambda x: np.cumsum(x)[1], x)[0], [1.0, 1.0, 0.0])
    assert np.array_equal(pb.gradient(lambda x: np.cumprod(x)[2], x)[0], [6.0, 3.0, 2.0])
    assert np.array_equal(pb.gradient(lambda x: np.add.accumulate(x)[2], x)[0], [1.0, 1.0, 1.0])


@SETTINGS
@given(shape=shapes, n=st.integers(0, 3), extra=st.sampled_from(["none", "scalar", "array"]), seed=seeds)
def test_diff(shape, n, extra, seed):
    rng = np.random.default_rng(seed)
    axis = int(rng.integers(-len(shape), len(shape)))
    x = rng.normal(size=shape)
    edge = list(shape)
    edge[axis] = 2
    pre = {"none": np.nan, "scalar": 0.3, "array": rng.normal(size=edge)}[extra]
    if extra == "none":
        gradcheck(lambda x: np.diff(x, n=n, axis=axis), x)
    else:
        gradcheck(lambda x, p: np.diff(x, n=n, axis=axis, prepend=p, append=p), x, pre)
    np.testing.assert_allclose(pb.pullback(lambda x: np.diff(x, n=n, axis=axis), x)[0], np.diff(x, n=n, axis=axis))


def test_refusals_are_clear():
    x = np.ones(3)
    with pytest.raises(TypeError, match="out="):
        pb.gradient(lambda x: np.sum(np.cumsum(x, out=np.empty(3))), x)
    with pytest.raises(TypeError, match="mean="):
        pb.gradient(lambda x: np.var(x, mean=np.ones(1)), x)


def test_np_gradient_of_a_0d_array_is_an_empty_tuple_as_in_numpy():
    z = np.array(1.5)
    assert np.gradient(z) == ()
    y, t = pb.jvp(lambda x: np.gradient(x), (z,), (np.array(1.0),))
    assert y == () and t == ()
    y, t = pb.jvp(lambda x: (np.gradient(x, 2.0), x)[1] * 2.0, (z,), (np.array(1.0),))
    assert y == 3.0 and t == 2.0
