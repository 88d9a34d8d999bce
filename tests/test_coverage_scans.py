"""cumsum, cumprod, diff, nansum, nanmean, average, var, std, ptp, trace and the norms against
float64 central differences, over random shapes; a second-order check per family."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from fd import assert_gradient, project, tolerance

SETTINGS = settings(max_examples=12, deadline=None)
seeds = st.integers(0, 2**32 - 1)
dtypes = st.sampled_from([np.float64, np.float32])
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)




def second_order(f, x, seed=1):
    """Check the gradient of <grad f(x), v> (a nested pb.gradient) against central differences."""
    v = np.random.default_rng(seed).normal(size=np.shape(x))
    assert_gradient(lambda x: np.sum(pb.gradient(f, x)[0] * v), x, rtol=1e-4, atol=1e-6)


@st.composite
def shape_axis(draw):
    shape = draw(shapes)
    return shape, draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))


@SETTINGS
@given(sa=shape_axis(), dtype=dtypes, seed=seeds)
def test_cumsum(sa, dtype, seed):
    shape, axis = sa
    x = np.random.default_rng(seed).normal(size=shape).astype(dtype)
    assert_gradient(lambda x: project(np.cumsum(x, axis=axis)), x, **tolerance(dtype))
    assert_gradient(lambda x: project(x.cumsum(axis)), x, **tolerance(dtype))


@SETTINGS
@given(sa=shape_axis(), dtype=dtypes, zeros=st.integers(0, 3), seed=seeds)
def test_cumprod(sa, dtype, zeros, seed):
    shape, axis = sa
    rng = np.random.default_rng(seed)
    x = rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 1.5, shape)
    x.reshape(-1)[rng.integers(0, x.size, zeros)] = 0.0  # exact zeros take the other branch
    x = x.astype(dtype)
    assert_gradient(lambda x: project(np.cumprod(x, axis=axis)), x, **tolerance(dtype))


def test_cumprod_second_order_with_zeros():
    x = np.array([[0.7, 0.0, 1.3, 0.0, -0.9], [0.0, 0.0, 0.5, 1.1, 2.0], [1.2, -0.8, 0.6, 1.5, 0.0]])
    second_order(lambda x: project(np.cumprod(x, axis=1)), x)
    second_order(lambda x: project(np.cumprod(x)), x)
    second_order(lambda x: project(np.cumsum(x, axis=0) ** 2), x)


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
        assert_gradient(lambda x: project(np.diff(x, n=n, axis=axis)), x)
    else:
        assert_gradient(lambda x, p: project(np.diff(x, n=n, axis=axis, prepend=p, append=p)), x, pre)
    np.testing.assert_allclose(pb.pullback(lambda x: np.diff(x, n=n, axis=axis), x)[0], np.diff(x, n=n, axis=axis))


@SETTINGS
@given(sa=shape_axis(), keepdims=st.booleans(), dtype=dtypes, seed=seeds)
def test_nansum_nanmean(sa, keepdims, dtype, seed):
    shape, axis = sa
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    x.reshape(-1)[rng.integers(0, x.size, 1)] = np.nan
    (g,) = assert_gradient(lambda x: project(np.nansum(x, axis=axis, keepdims=keepdims)), x, **tolerance(dtype))
    assert np.all(g[np.isnan(x)] == 0.0)
    if np.all(np.any(~np.isnan(x), axis=axis)):  # no slice is all NaN
        (g,) = assert_gradient(lambda x: project(np.nanmean(x, axis=axis, keepdims=keepdims)), x, **tolerance(dtype))
        assert np.all(g[np.isnan(x)] == 0.0)


def test_nanmean_ignores_nans_in_the_count():
    x = np.array([1.0, np.nan, 3.0])
    assert np.array_equal(pb.gradient(np.nanmean, x)[0], [0.5, 0.0, 0.5])


@SETTINGS
@given(shape=shapes, weights=st.sampled_from(["none", "full", "axis"]), returned=st.booleans(), seed=seeds)
def test_average(shape, weights, returned, seed):
    rng = np.random.default_rng(seed)
    axis = int(rng.integers(0, len(shape)))
    x = rng.normal(size=shape)

    def f(x, w):
        out = np.average(x, axis=axis, weights=w, returned=returned)
        return project(out[0]) + project(out[1], 1) if returned else project(out)

    w = {"none": None, "full": rng.uniform(0.5, 1.5, shape), "axis": rng.uniform(0.5, 1.5, shape[axis])}[weights]
    assert_gradient(f, x, w)
    value = pb.pullback(lambda x: np.average(x, axis=axis, weights=w, returned=returned), x)[0]
    expected = np.average(x, axis=axis, weights=w, returned=returned)
    for got, want in zip(value if returned else [value], expected if returned else [expected]):
        np.testing.assert_allclose(got, want)


@SETTINGS
@given(sa=shape_axis(), ddof=st.integers(0, 1), keepdims=st.booleans(), dtype=dtypes, seed=seeds)
def test_var_std(sa, ddof, keepdims, dtype, seed):
    shape, axis = sa
    count = int(np.prod(shape)) if axis is None else shape[axis]
    if count <= ddof:
        return
    x = np.random.default_rng(seed).normal(size=shape).astype(dtype)
    assert_gradient(lambda x: project(np.var(x, axis=axis, ddof=ddof, keepdims=keepdims)), x, **tolerance(dtype))
    if count > 1:
        assert_gradient(lambda x: project(np.std(x, axis=axis, correction=ddof, keepdims=keepdims)), x,
                        **tolerance(dtype))
        assert_gradient(lambda x: project(x.std(axis)), x, **tolerance(dtype))


def test_std_of_a_constant_has_zero_gradient():
    assert np.array_equal(pb.gradient(np.std, np.full(3, 2.0))[0], np.zeros(3))


def test_var_and_std_second_order():
    x = np.random.default_rng(3).normal(size=(3, 4))
    second_order(lambda x: project(np.var(x, axis=0)), x)
    second_order(lambda x: project(np.std(x, axis=1, ddof=1)), x)


@SETTINGS
@given(sa=shape_axis(), seed=seeds)
def test_ptp_and_trace(sa, seed):
    shape, axis = sa
    rng = np.random.default_rng(seed)
    x = (rng.permutation(int(np.prod(shape))) * 0.1 + rng.uniform(0, 0.01)).reshape(shape)  # distinct values
    assert_gradient(lambda x: project(np.ptp(x, axis=axis)), x)
    if len(shape) >= 2:
        offset = int(rng.integers(-1, 2))
        assert_gradient(lambda x: project(np.trace(x, offset, 0, -1)), x)
        assert_gradient(lambda x: project(np.linalg.trace(x)), x)


VECTOR_ORDERS = [None, 1, 2, 3, 0.5, np.inf, -np.inf]
MATRIX_ORDERS = [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]


@pytest.mark.parametrize("order", VECTOR_ORDERS, ids=str)
@SETTINGS
@given(shape=shapes, keepdims=st.booleans(), seed=seeds)
def test_vector_norms(order, shape, keepdims, seed):
    rng = np.random.default_rng(seed)
    x = (rng.permutation(int(np.prod(shape))) * 0.1 + 0.3).reshape(shape) * rng.choice([-1.0, 1.0], shape)
    axis = int(rng.integers(-len(shape), len(shape)))
    assert_gradient(lambda x: project(np.linalg.norm(x, ord=order, axis=axis, keepdims=keepdims)), x)
    np.testing.assert_allclose(pb.pullback(lambda x: np.linalg.norm(x, order, axis, keepdims), x)[0],
                               np.linalg.norm(x, order, axis, keepdims))
    if order is not None:
        axes = tuple(range(len(shape)))[-2:]
        assert_gradient(lambda x: project(np.linalg.vector_norm(x, ord=order, axis=axes, keepdims=keepdims)), x)


@pytest.mark.parametrize("order", MATRIX_ORDERS, ids=str)
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=4), keepdims=st.booleans(), seed=seeds)
def test_matrix_norms(order, shape, keepdims, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)  # ties between rows, columns or singular values have probability 0
    assert_gradient(lambda x: project(np.linalg.norm(x, ord=order, axis=(-1, 0), keepdims=keepdims)), x, rtol=1e-4)
    assert_gradient(lambda x: project(np.linalg.matrix_norm(x, ord=order or "fro")), x, rtol=1e-4)


def test_norm_of_zero_has_zero_gradient_and_second_order():
    assert np.array_equal(pb.gradient(np.linalg.norm, np.zeros(3))[0], np.zeros(3))
    second_order(lambda x: np.linalg.norm(x), np.array([0.3, -1.2, 2.0]))
    second_order(lambda x: np.linalg.norm(x, "nuc"), np.array([[0.3, -1.2], [2.0, 0.7]]))


def test_refusals_are_clear():
    x = np.ones(3)
    with pytest.raises(TypeError, match="out="):
        pb.gradient(lambda x: np.sum(np.cumsum(x, out=np.empty(3))), x)
    with pytest.raises(TypeError, match="mean="):
        pb.gradient(lambda x: np.var(x, mean=np.ones(1)), x)


def test_second_order_through_the_composites():
    x = np.random.default_rng(4).normal(size=(3, 4))
    w = np.random.default_rng(5).uniform(0.5, 1.5, 4)
    second_order(lambda x: project(np.diff(x, 2, axis=1) ** 3), x)
    second_order(lambda x: project(np.average(x ** 2, axis=1, weights=w) ** 2), x)
    second_order(lambda x: project(np.nanmean(x ** 3, axis=0)) + project(np.nansum(x ** 3, axis=1), 1), x)
    second_order(lambda x: project(np.ptp(x ** 3, axis=0)) + np.trace(x[:, :3] ** 3), x)
    second_order(lambda w: np.sum(np.average(x, axis=1, weights=w ** 2) ** 2), w)
