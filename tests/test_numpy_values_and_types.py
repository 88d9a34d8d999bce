"""Under differentiation a NumPy function returns what NumPy returns: the same value bit for bit, dtype and
type (a NumPy scalar, a 0-d array or a Python number), the same errors and warnings. Each test asserts
NumPy's own answer."""

import warnings

import numpy as np
import pytest

import pullback as pb


def _value(f, *args):
    return pb.pullback(f, *args)[0]


def _same(got, want):
    assert type(got) is type(want), (type(got), type(want))
    assert np.result_type(got) == np.result_type(want)
    assert np.array_equal(got, want, equal_nan=True), (got, want)


# --- add / subtract / multiply of two Python numbers compute with Python's operators -------------
@pytest.mark.parametrize("ufunc", [np.add, np.subtract, np.multiply])
def test_arith_ufunc_of_python_floats_returns_numpy_scalar(ufunc):
    want = ufunc(2.0, 0.7)  # np.float64
    _same(_value(lambda x: ufunc(x, 0.7), 2.0), want)
    _same(pb.jvp(lambda x: ufunc(x, 0.7), (2.0,), (1.0,))[0], want)


def test_add_of_python_float_honours_dtype():
    _same(_value(lambda x: np.add(x, 3, dtype=np.float32), 2.0), np.add(2.0, 3, dtype=np.float32))


# --- np.dot / np.inner with a 0-d operand use weak (NEP 50) promotion, NumPy's do not ----------------
def test_dot_with_python_float_promotes_like_numpy():
    x = np.ones(2, np.float32)
    _same(_value(lambda x: np.dot(x, 0.1), x), np.dot(x, 0.1))  # float64


def test_inner_of_numpy_scalar_and_python_float():
    x = np.float32(3)
    _same(_value(lambda x: np.inner(x, 0.1), x), np.inner(x, 0.1))  # np.float64(0.30000000000000004)


def test_dot_of_python_floats_returns_numpy_scalar():
    _same(_value(lambda x: np.dot(x, 3.0), 2.0), np.dot(2.0, 3.0))


# --- nanmean is a composite without NumPy's value ------------------------------------------------
def test_nanmean_float16_counts_past_2048():
    x = np.full(3001, 0.5, np.float16)
    x[0] = 1.0
    _same(_value(np.nanmean, x), np.nanmean(x))  # NumPy 0.5, pullback 0.5005


def test_nanmean_complex64_value():
    x = (np.random.default_rng(1).uniform(0.1, 0.9, 12) + 0.3j).astype(np.complex64)
    _same(_value(np.nanmean, x), np.nanmean(x))


def test_nanmean_all_nan_warns_like_numpy():
    x = np.array([np.nan])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        _value(np.nanmean, x)
    assert any("Mean of empty slice" in str(m.message) for m in w), [str(m.message) for m in w]


# --- a 0-d array where NumPy gives a scalar, or the reverse ---------------------------------------
def test_nanmax_all_nan_returns_scalar():
    x = np.array([np.nan, np.nan])
    _same(_value(np.nanmax, x), np.nanmax(x))
    _same(_value(np.nanmin, x), np.nanmin(x))


@pytest.mark.parametrize("fn", [np.median, np.nanmedian, lambda a: np.nanquantile(a, 0.3),
                                lambda a: np.nanpercentile(a, 30)])
def test_order_statistic_of_empty_returns_scalar(fn):
    x = np.zeros(0)
    _same(_value(fn, x), fn(x))


@pytest.mark.parametrize("x", [np.float32(2.0), np.array(2.0), 2.0])
def test_nan_to_num_of_scalar_returns_scalar(x):
    _same(_value(np.nan_to_num, x), np.nan_to_num(x))


@pytest.mark.parametrize("x", [2.0, np.float32(2.0)])
def test_imag_of_real_scalar(x):
    _same(_value(np.imag, x), np.imag(x))


@pytest.mark.parametrize("x", [2.0, np.float64(2.0)])
def test_real_if_close_of_scalar_returns_0d_array(x):
    _same(_value(np.real_if_close, x), np.real_if_close(x))


# --- np.average(returned=True): the sum of weights has NumPy's result dtype and type -------------
def test_average_returned_scale_without_weights_is_scalar():
    x = np.ones(3, np.float32)
    got, want = _value(lambda x: np.average(x, returned=True), x), np.average(x, returned=True)
    _same(got[1], want[1])


def test_average_returned_scale_with_int_weights_is_float():
    x = np.ones(3, np.float32)
    got = _value(lambda x: np.average(x, weights=[1, 2, 3], returned=True), x)
    _same(got[1], np.average(x, weights=[1, 2, 3], returned=True)[1])


def test_average_returned_scale_with_float32_weights_of_int_data():
    w, a = np.ones(3, np.float32), np.arange(3)
    got = _value(lambda w: np.average(a, weights=w, returned=True), w)
    _same(got[1], np.average(a, weights=w, returned=True)[1])


# --- cumulative_sum / cumulative_prod of a 0-d array ----------------------------------------------
@pytest.mark.parametrize("fn", [np.cumulative_sum, np.cumulative_prod])
def test_cumulative_of_0d(fn):
    x = np.array(0.5)
    _same(_value(fn, x), fn(x))


# --- composites whose value is not NumPy's ----------------------------------------------------------
def test_bincount_float32_weights_summed_in_float64():
    x = np.array([0.1, 0.7, 0.3, 0.9, 0.2], np.float32)
    idx = [0, 1, 1, 0, 1]
    # NumPy casts the weights to float64 before summing: [0.99999998, 1.2]; pullback sums in float32
    _same(_value(lambda w: np.bincount(idx, weights=w), x), np.bincount(idx, weights=x))


@pytest.mark.parametrize("kw", [{"to_end": [1.0]}, {"to_begin": 1.0}])
def test_ediff1d_complex64_keeps_dtype(kw):
    c = np.array([1 + 1j, 2 - 1j, 0.5j], np.complex64)
    _same(_value(lambda c: np.ediff1d(c, **kw), c), np.ediff1d(c, **kw))  # complex64, not complex128


@pytest.mark.parametrize("fn", [np.linspace, np.logspace])
def test_linspace_logspace_float32_ends_value(fn):
    a, b = np.float32(-0.3), np.float32(1.7)
    _same(_value(lambda a: fn(a, b, 37), a), fn(a, b, 37))


def test_average_float32_weights_summed_in_result_dtype():
    rng = np.random.default_rng(9)
    a, w = rng.standard_normal(97), np.abs(rng.standard_normal(97)).astype(np.float32)
    # NumPy sums the weights with dtype=result_type(a, w) (float64); pullback sums them in float32
    _same(_value(lambda a: np.average(a, weights=w), a), np.average(a, weights=w))


def test_interp_period_float32_x_wrapped_in_float64():
    rng = np.random.default_rng(11)
    fp = rng.standard_normal(6)
    xp = np.sort(fp)
    x = rng.standard_normal(6).astype(np.float32)
    # NumPy converts x to float64 before np.mod(x, period); pullback wraps it in float32
    _same(_value(lambda x: np.interp(x, xp, fp, period=3.0), x), np.interp(x, xp, fp, period=3.0))


# --- writes NumPy refuses (float64 values into a float32 array, casting='safe') --------------------
@pytest.mark.parametrize("write", [np.place, np.putmask])
def test_place_putmask_refuse_unsafe_cast_like_numpy(write):
    y = np.ones(4, np.float32)
    mask, vals = np.array([True, False, True, False]), np.array([2.0, 3.0])
    with pytest.raises(TypeError):
        write(y.copy(), mask, vals)  # NumPy: Cannot cast array data from float64 to float32 ('safe')

    def f(x):
        z = x * 1
        write(z, mask, vals)
        return z

    with pytest.raises(TypeError):
        pb.pullback(f, y)


# --- maximum / minimum / fmax / fmin of a Python complex: NumPy orders it lexicographically ----------
@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum, np.fmax, np.fmin])
def test_extremum_of_python_complex(ufunc):
    want = ufunc(1.5 + 1j, 0.5j)
    _same(_value(lambda z: ufunc(z, 0.5j), 1.5 + 1j), want)  # pullback: TypeError '>' between complex
    _same(pb.jvp(lambda z: ufunc(z, 0.5j), (1.5 + 1j,), (1.0 + 0j,))[0], want)


# --- pullback.scipy stand-ins: SciPy's scalar comes back as a 0-d array ------------------------------
def test_scipy_linalg_det_returns_scipy_scalar():
    sl = pytest.importorskip("scipy.linalg")
    import pullback.scipy as ps

    a = np.array([[2.0, 1.0], [0.5, 3.0]])
    _same(_value(ps.linalg.det, a), sl.det(a))  # np.float64(5.5), pullback array(5.5)


@pytest.mark.parametrize("shape", [(2, 2), (3,)])
def test_scipy_linalg_norm_returns_scipy_scalar(shape):
    sl = pytest.importorskip("scipy.linalg")
    import pullback.scipy as ps

    a = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
    _same(_value(ps.linalg.norm, a), sl.norm(a))  # np.float64 / Python float, pullback a 0-d array


def test_scipy_logsumexp_return_sign_scalar():
    sp = pytest.importorskip("scipy.special")
    import pullback.scipy as ps

    x = np.array([0.1, 0.5, -0.3])
    got = _value(lambda x: ps.special.logsumexp(x, b=[1, 2, 3], return_sign=True), x)
    want = sp.logsumexp(x, b=[1, 2, 3], return_sign=True)
    _same(got[1], want[1])


@pytest.mark.parametrize("dist, method, args", [("expon", "pdf", ()), ("gamma", "logpdf", (2.0,)), ("gamma", "cdf", (2.0,))])
def test_scipy_stats_outside_support_returns_scalar(dist, method, args):
    st = pytest.importorskip("scipy.stats")
    import pullback.scipy as ps

    want = getattr(getattr(st, dist), method)(-0.3, *args)  # np.float64(0.0) / -inf
    got = _value(lambda v: getattr(getattr(ps.stats, dist), method)(v, *args), -0.3)  # pullback: a 0-d array
    _same(got, want)


def test_a_python_number_given_to_back_divides_by_zero_as_numpy_does():
    _, back = pb.pullback(np.mean, np.zeros(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        (g,) = back(1.0)  # a mean over nothing: 1.0 / 0 is a NumPy division (it raised ZeroDivisionError)
    assert g.shape == (0,) and g.dtype == np.float64
    _, back = pb.pullback(np.log, 0.0)
    with np.errstate(divide="ignore"):
        assert back(1.0) == (np.inf,)


def test_the_operators_of_python_numbers_stay_python_and_numpy_ufuncs_give_numpy_numbers():
    seen = {}

    def f(x):
        seen["operator"], seen["ufunc"] = type(pb.stop_gradient(x * 0.7)), type(pb.stop_gradient(np.multiply(x, 0.7)))
        return x * 1.0

    pb.gradient(f, 2.0)
    assert seen == {"operator": float, "ufunc": np.float64}


def test_nan_to_num_without_copying_returns_its_argument_itself():
    def f(y):
        z = np.nan_to_num(y, copy=False)
        return np.sum(z * np.array([2.0, 3.0])), z is y

    (value, same), (g,) = pb.withgradient(f, np.array([np.nan, 1.0]))
    assert same and f(np.array([np.nan, 1.0])) == (value, True)
    np.testing.assert_array_equal(g, [0.0, 3.0])  # the NaN was replaced by a constant
