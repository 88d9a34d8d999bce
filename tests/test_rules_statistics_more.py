"""median, percentile, quantile and their NaN-ignoring forms (every method), cov and corrcoef (rowvar,
bias, ddof, fweights, aweights), nanvar, nanstd, nanmax, nanmin and nanprod against central
differences in both modes, against NumPy's values, in float32, and at the odd cases."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from numpy_coverage_checks import run_case, run_float32
from rule_checks import draw_axis, second_order, seeds

rng = np.random.default_rng(13)
A = rng.normal(size=(4, 6))  # distinct values: no ties among order statistics
NAN = A.copy()
NAN[0, 1] = NAN[2, 4] = NAN[2, 0] = np.nan
METHODS = ["linear", "lower", "higher", "nearest", "midpoint", "inverted_cdf", "averaged_inverted_cdf",
           "closest_observation", "interpolated_inverted_cdf", "hazen", "weibull", "median_unbiased",
           "normal_unbiased"]
W = rng.uniform(0.5, 2.0, 6)

CASES = {
    **{f"quantile {m}": (lambda a, m=m: np.quantile(a, [0.13, 0.5, 0.91], axis=1, method=m), (A,)) for m in METHODS},
    **{f"nanquantile {m}": (lambda a, m=m: np.nanquantile(a, 0.37, axis=-1, method=m), (NAN,)) for m in METHODS},
    "quantile all": (lambda a: np.quantile(a, 0.3), (A,)),
    "quantile axes keepdims": (lambda a: np.quantile(a, [[0.2], [0.6]], axis=(0, 1), keepdims=True), (A,)),
    "percentile": (lambda a: np.percentile(a, [10.0, 75.0], axis=0), (A,)),
    "nanpercentile": (lambda a: np.nanpercentile(a, 40.0, axis=0, keepdims=True), (NAN,)),
    "median": (lambda a: np.median(a, axis=1), (A,)),
    "median odd": (lambda a: np.median(a[:, :5], axis=-1, keepdims=True), (A,)),
    "median all": (np.median, (A,)),
    "nanmedian": (lambda a: np.nanmedian(a, axis=1), (NAN,)),
    "cov": (np.cov, (A,)),
    "cov y rowvar bias": (lambda a, b: np.cov(a, b, rowvar=False, bias=True), (A[:, :3], A[:, 3:] ** 2)),
    "cov ddof": (lambda a: np.cov(a, ddof=3), (A,)),
    "cov weights": (lambda a, w: np.cov(a, fweights=[1, 2, 1, 3, 1, 1], aweights=w), (A, W)),
    "cov weights ddof 0": (lambda a, w: np.cov(a, ddof=0, aweights=w), (A, W)),
    "cov 1-d": (lambda a: np.cov(a), (A[0],)),
    "corrcoef": (np.corrcoef, (A,)),
    "corrcoef y": (lambda a, b: np.corrcoef(a, b, rowvar=False), (A[:, :2], A[:, 2:4] + A[:, :2])),
    "nanvar": (lambda a: np.nanvar(a, axis=1, ddof=1), (NAN,)),
    "nanvar all": (lambda a: np.nanvar(a, correction=1), (NAN,)),
    "nanstd": (lambda a: np.nanstd(a, axis=0, keepdims=True), (NAN,)),
    "nanmax": (lambda a: np.nanmax(a, axis=1), (NAN,)),
    "nanmin": (lambda a: np.nanmin(a, axis=0, keepdims=True), (NAN,)),
    "nanmax all": (np.nanmax, (NAN,)),
    "nanprod": (lambda a: np.nanprod(a, axis=-1), (NAN,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_central_differences_and_numpy(name):
    f, args = CASES[name]
    run_case(f, *args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32(name):
    f, args = CASES[name]
    run_float32(f, *args)


def test_median_gradient_splits_between_the_two_middle_elements():
    x = np.array([4.0, 1.0, 3.0, 2.0])
    np.testing.assert_array_equal(pb.gradient(np.median, x)[0], [0.0, 0.0, 0.5, 0.5])
    np.testing.assert_array_equal(pb.gradient(lambda x: np.percentile(x, 100.0), x)[0], [1.0, 0.0, 0.0, 0.0])


def test_nan_slices_give_nan_and_no_gradient_through_nans():
    x = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        y = pb.pullback(lambda x: np.nanmedian(x, axis=1), x)[0]
        np.testing.assert_array_equal(y, np.nanmedian(x, axis=1))
        g = pb.gradient(lambda x: np.nanmedian(x, axis=1)[0], x)[0]
        np.testing.assert_array_equal(g, [[0.5, 0.0, 0.5], [0.0, 0.0, 0.0]])
        assert np.isnan(pb.pullback(lambda x: np.median(x, axis=1), x)[0]).all()
        np.testing.assert_array_equal(pb.pullback(lambda x: np.nanmax(x, axis=1), x)[0], [3.0, np.nan])


def test_levels_and_weights_are_plain():
    with pytest.raises(TypeError, match="levels q"):
        pb.gradient(lambda q: np.quantile(A, q), 0.5)
    with pytest.raises(TypeError, match="weights="):
        pb.gradient(lambda a: np.quantile(a, 0.5, method="inverted_cdf", weights=np.ones(A.shape)), A)


def test_empty_and_zero_d():
    assert pb.pullback(lambda x: np.median(x), np.array(2.5))[0] == 2.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert np.isnan(pb.pullback(lambda x: np.nanmax(x), np.array([np.nan]))[0])


def test_order_statistics_of_empty_arrays_are_numpys_nans():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert np.isnan(pb.pullback(lambda x: np.median(x[:0]), A[0])[0])
        with pytest.raises(IndexError):  # as NumPy raises for an empty axis
            pb.pullback(lambda x: np.quantile(x[:0], 0.5, axis=0), A)


@pytest.mark.parametrize("f", [lambda x: np.cov(x), lambda x: np.corrcoef(x), lambda x: np.quantile(x, 0.3, axis=1),
                               lambda x: np.nanstd(x, axis=0)], ids=["cov", "corrcoef", "quantile", "nanstd"])
def test_second_order(f):
    second_order(lambda x: np.sum(f(x) ** 3), A[:3, :4])


@settings(max_examples=20, deadline=None)
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5), seed=seeds,
       method=st.sampled_from(METHODS), keepdims=st.booleans())
def test_quantile_random_shapes_axes_and_methods(shape, seed, method, keepdims):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=shape)  # distinct values almost surely
    axis = draw_axis(rng, len(shape))
    q = rng.uniform(0.0, 1.0, 2)
    run_case(lambda a: np.quantile(a, q, axis=axis, method=method, keepdims=keepdims), a)


def test_nanvar_and_nanstd_of_complex_values_are_real_as_numpy():
    x = A[:2, :4]
    for f in (lambda a: np.nanvar(np.fft.fft(a), axis=0), lambda a: np.nanstd(np.fft.fft(a), axis=1, ddof=1)):
        y = pb.pullback(f, x)[0]
        np.testing.assert_allclose(y, f(x), rtol=1e-12)
        assert y.dtype == np.float64
        run_case(f, x)


# --- overwrite_input=True: NumPy partitions the input in place; the array is left as NumPy leaves it ------
OVERWRITING = {
    "median": lambda y: np.median(y, overwrite_input=True),
    "median axis": lambda y: np.median(y, axis=1, overwrite_input=True),
    "median of a transpose": lambda y: np.median(y.T, axis=1, overwrite_input=True),  # the partition goes through
    "median of a transpose, all": lambda y: np.median(y.T, overwrite_input=True),  # ravel copies: y stays as it is
    "median of a slice": lambda y: np.median(y[:, ::2], axis=0, keepdims=True, overwrite_input=True),
    "percentile": lambda y: np.percentile(y, [30, 70], axis=0, overwrite_input=True),
    "quantile axes": lambda y: np.quantile(y, 0.3, axis=(0, 1), method="nearest", overwrite_input=True),
    "nanmedian": lambda y: np.nanmedian(y, axis=1, overwrite_input=True),
    "nanquantile": lambda y: np.nanquantile(y, 0.3, overwrite_input=True),
}


@pytest.mark.parametrize("name", list(OVERWRITING))
def test_overwrite_input_leaves_the_array_as_numpy_does(name):
    stat = OVERWRITING[name]

    def f(x):
        y = x * 1.0
        m = stat(y)
        shown = np.where(np.isnan(y), 0.0, y)  # the arrangement, NaNs included, with values central differences see
        return m, shown, np.sum(m) + 10 * shown[0, 0] + np.sum(shown[1] ** 2)  # later reads of y see NumPy's arrangement

    a = NAN if name.startswith("nan") else A  # distinct values: no ties among the order statistics
    run_case(f, a)


@pytest.mark.parametrize("stat", [lambda x: np.median(x * 2, overwrite_input=True),
                                  lambda x: np.percentile(x * 2, 50, overwrite_input=True),
                                  lambda x: np.nanmedian(x * 2, overwrite_input=True)],
                         ids=["median", "percentile", "nanmedian"])
def test_overwrite_input_on_a_temporary(stat):
    x = np.array([3.0, 1.0, 2.0, 5.0, 4.0])
    (g,) = pb.gradient(stat, x)
    np.testing.assert_array_equal(g, [2.0, 0.0, 0.0, 0.0, 0.0])
    assert pb.jvp(stat, (x,), (np.arange(5.0),))[1] == 0.0


def test_overwrite_input_under_jit_of_a_gradient_is_refused_naming_it():
    def f(x):
        y = x * 1.0
        return np.median(y, overwrite_input=True) + 10 * y[0]

    with pytest.raises(TypeError, match="overwrite_input=True.*pb.jit"):
        pb.jit(lambda x: pb.gradient(f, x))(np.array([5.0, 1.0, 4.0, 2.0, 3.0]))
