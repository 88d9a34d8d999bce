"""average, nanmean (and nansum), var, std, ptp and trace against float64 central differences in
both modes, over random shapes; hand-derived values, and second order through the composites."""

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
@given(sa=shape_axis(), keepdims=st.booleans(), dtype=dtypes, seed=seeds)
def test_nansum_nanmean(sa, keepdims, dtype, seed):
    shape, axis = sa
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    x.reshape(-1)[rng.integers(0, x.size, 1)] = np.nan
    (g,) = gradcheck(lambda x: np.nansum(x, axis=axis, keepdims=keepdims), x, **tolerance(dtype))
    assert np.all(g[np.isnan(x)] == 0.0)
    if np.all(np.any(~np.isnan(x), axis=axis)):  # no slice is all NaN
        (g,) = gradcheck(lambda x: np.nanmean(x, axis=axis, keepdims=keepdims), x, **tolerance(dtype))
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
        return np.average(x, axis=axis, weights=w, returned=returned)  # returned: (average, sum of the weights)

    w = {"none": None, "full": rng.uniform(0.5, 1.5, shape), "axis": rng.uniform(0.5, 1.5, shape[axis])}[weights]
    gradcheck(f, x, w)
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
    gradcheck(lambda x: np.var(x, axis=axis, ddof=ddof, keepdims=keepdims), x, **tolerance(dtype))
    if count > 1:
        gradcheck(lambda x: np.std(x, axis=axis, correction=ddof, keepdims=keepdims), x, **tolerance(dtype))
        gradcheck(lambda x: x.std(axis), x, **tolerance(dtype))


def test_std_of_a_constant_has_zero_gradient():
    assert np.array_equal(pb.gradient(np.std, np.full(3, 2.0))[0], np.zeros(3))


def test_var_and_std_second_order():
    x = np.random.default_rng(3).normal(size=(3, 4))
    second_order(lambda x: np.var(x, axis=0), x)
    second_order(lambda x: np.std(x, axis=1, ddof=1), x)


@SETTINGS
@given(sa=shape_axis(), seed=seeds)
def test_ptp_and_trace(sa, seed):
    shape, axis = sa
    rng = np.random.default_rng(seed)
    x = (rng.permutation(int(np.prod(shape))) * 0.1 + rng.uniform(0, 0.01)).reshape(shape)  # distinct values
    gradcheck(lambda x: np.ptp(x, axis=axis), x)
    if len(shape) >= 2:
        offset = int(rng.integers(-1, 2))
        gradcheck(lambda x: np.trace(x, offset, 0, -1), x)
        gradcheck(lambda x: np.linalg.trace(x), x)


def test_second_order_through_the_composites():
    x = np.random.default_rng(4).normal(size=(3, 4))
    w = np.random.default_rng(5).uniform(0.5, 1.5, 4)
    second_order(lambda x: np.diff(x, 2, axis=1) ** 3, x)
    second_order(lambda x: np.average(x ** 2, axis=1, weights=w) ** 2, x)
    second_order(lambda x: (np.nanmean(x ** 3, axis=0), np.nansum(x ** 3, axis=1)), x)
    second_order(lambda x: (np.ptp(x ** 3, axis=0), np.trace(x[:, :3] ** 3)), x)
    second_order(lambda w: np.sum(np.average(x, axis=1, weights=w ** 2) ** 2), w)


MASK = np.array([[True, False, True, True], [False, True, True, True]])
X24 = np.array([[0.3, -1.2, 0.8, 2.0], [0.5, 1.5, -0.7, 0.1]])


@pytest.mark.parametrize("call", [
    lambda x: np.var(x, where=MASK),
    lambda x: np.var(x, axis=1, where=MASK, ddof=1),
    lambda x: np.std(x, axis=1, where=MASK[0], keepdims=True),  # a mask that broadcasts
    lambda x: np.std(x, 1, None, None, 1, True, where=MASK),  # options by position
    lambda x: np.var(x * (1 + 2j), axis=1, where=MASK),  # complex: the mean of |a - mean|^2
    lambda x: x.std(axis=1, where=MASK),
], ids=["var", "var axis ddof", "std broadcast mask", "std positional", "var complex", "method std"])
def test_var_and_std_with_where_match_numpy_and_central_differences(call):
    result = pb.testing.check_gradient(call, X24, order=2)
    assert result, result
    assert np.array_equal(pb.pullback(call, X24)[0], call(X24))  # the very value NumPy computes


def test_var_with_where_by_hand_and_left_out_elements_get_zero_even_in_a_nan_slice():
    x = np.array([1.0, 5.0, 3.0, 2.0])
    (g,) = pb.gradient(lambda x: np.var(x, where=np.array([True, False, True, False])), x)
    np.testing.assert_array_equal(g, [-1.0, 0.0, 1.0, 0.0])  # 2 (x - 2) / 2 for the selected 1 and 3
    column_empty = np.array([True, False, True])
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):  # NumPy warns about the empty slice
        (g,) = pb.gradient(lambda x: np.sum(np.nan_to_num(np.std(x, axis=0, where=column_empty))), np.eye(3) + 1.0)
    assert np.all(np.isfinite(g)) and np.all(g[:, 1] == 0.0)


def test_var_refuses_mean_and_a_traced_mask_with_the_fix():
    x = np.array([1.0, 2.0, 4.0])
    with pytest.raises(TypeError, match="mean= is not supported"):
        pb.gradient(lambda x: np.var(x, mean=np.mean(x, keepdims=True)), x)


# --- keepdims given as any true value (1, or by position), as NumPy reads it ---------------------------
_X = np.array([[0.3, 1.7, -0.4, 2.2], [0.9, -1.1, 0.5, 1.3], [2.0, 0.1, -0.7, 0.6]])
KEEPDIMS_ONE = {
    "var": lambda x: np.var(x, axis=1, keepdims=1),
    "std": lambda x: np.std(x, axis=1, keepdims=1),
    "average": lambda x: np.average(x, axis=1, keepdims=1),
    "average weights returned": lambda x: np.average(x, axis=1, weights=np.arange(1.0, 5.0) + x, returned=True,
                                                     keepdims=1)[1],
    "nanmean": lambda x: np.nanmean(x, axis=1, keepdims=1),
    "nansum": lambda x: np.nansum(x, axis=1, keepdims=1),
    "nanprod": lambda x: np.nanprod(x, axis=1, keepdims=1),
    "nanvar": lambda x: np.nanvar(x, axis=1, keepdims=1),
    "nanstd": lambda x: np.nanstd(x, axis=1, keepdims=1),
    "nanmax": lambda x: np.nanmax(x, axis=1, keepdims=1),
    "nanmin": lambda x: np.nanmin(x, axis=1, keepdims=2),
    "ptp": lambda x: np.ptp(x, axis=1, keepdims=1),
    "var by position": lambda x: np.var(x, 1, None, None, 0, 1),
    "std by position": lambda x: np.std(x, 1, None, None, 1, 1),
}


@pytest.mark.parametrize("name", sorted(KEEPDIMS_ONE))
def test_keepdims_one_keeps_the_axis_as_numpy_does(name):
    f = KEEPDIMS_ONE[name]
    expected = f(_X.copy())
    assert np.shape(expected) == (3, 1)  # NumPy reads keepdims=1 as True
    y, _ = pb.jvp(f, (_X,), (np.ones_like(_X),))
    assert np.shape(y) == (3, 1)
    np.testing.assert_allclose(y, expected, rtol=1e-14)
    weights = np.arange(1.0, 13.0).reshape(3, 4)  # a centred loss: a (3,) result would broadcast along rows
    gradcheck(lambda x: np.sum((x - f(x)) ** 2 * weights), _X)


def test_keepdims_one_centring_is_not_silently_transposed():
    x = np.arange(9.0).reshape(3, 3) ** 1.5
    f = lambda x: np.sum((x - np.nanmean(x, axis=1, keepdims=1)) ** 2)  # noqa: E731
    val, (g,) = pb.withgradient(f, x)
    assert val == pytest.approx(f(x), rel=1e-12)
    np.testing.assert_allclose(g, 2.0 * (x - np.mean(x, axis=1, keepdims=True)), rtol=1e-12, atol=1e-12)


# --- keepdims that NumPy's reductions refuse: they read it as a C integer -------------------------------
KEEPDIMS_REFUSED = {
    "max": np.max, "min": np.min, "var": np.var, "std": np.std, "ptp": np.ptp, "nansum": np.nansum,
    "nanprod": np.nanprod, "nanmean": np.nanmean, "average": np.average,
}


@pytest.mark.parametrize("keepdims", [np.True_, 1.0, [1], np.array(True)], ids=["np.True_", "1.0", "[1]", "bool array"])
@pytest.mark.parametrize("name", sorted(KEEPDIMS_REFUSED))
def test_keepdims_numpy_refuses_is_refused_in_both_modes(name, keepdims):
    f = lambda x: KEEPDIMS_REFUSED[name](x, axis=1, keepdims=keepdims)  # noqa: E731
    if keepdims is np.True_ and np.lib.NumpyVersion(np.__version__) < "2.3.0":  # NumPy 2.2 reads it as True
        expected = f(_X.copy())
        np.testing.assert_array_equal(pb.vjp(f, _X)[0], expected, strict=True)
        np.testing.assert_array_equal(pb.jvp(f, (_X,), (np.ones_like(_X),))[0], expected, strict=True)
        return
    with pytest.raises(TypeError, match="integer"):  # NumPy's wording depends on the value's type
        f(_X.copy())
    with pytest.raises(TypeError, match="integer"):
        pb.vjp(f, _X)
    with pytest.raises(TypeError, match="integer"):
        pb.jvp(f, (_X,), (np.ones_like(_X),))


@pytest.mark.parametrize("keepdims", [np.int64(1), np.array(1), 2, False], ids=["np.int64", "int array", "2", "False"])
@pytest.mark.parametrize("name", sorted(KEEPDIMS_REFUSED))
def test_keepdims_numpy_reads_as_an_integer_is_read_so(name, keepdims):
    f = lambda x: KEEPDIMS_REFUSED[name](x, axis=1, keepdims=keepdims)  # noqa: E731
    y, _ = pb.jvp(f, (_X,), (np.ones_like(_X),))
    assert np.shape(y) == np.shape(f(_X.copy()))
    np.testing.assert_allclose(y, f(_X.copy()), rtol=1e-14)
