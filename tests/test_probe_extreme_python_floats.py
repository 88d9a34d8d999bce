"""Extreme Python floats (and 0-d arrays) through pullback's own formulas in `pullback.scipy.stats` and `pb.nn`:
under pb.gradient and pb.jvp a call gives the plain call's value, raises only where the plain call raises, adds no
warning the plain call does not give, and its gradient agrees with the derivative where that is finite."""

import math
import warnings

import numpy as np
import pytest

import pullback as pb
from pullback import nn

st = pytest.importorskip("scipy.stats")

from pullback.scipy import stats as pst  # noqa: E402


def _run(fn):
    """`(value, exception, warnings)` of `fn()`, every warning recorded."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return fn(), None, {(w.category, str(w.message)) for w in caught}
        except Exception as error:  # noqa: BLE001 - compared with the plain call's
            return None, error, {(w.category, str(w.message)) for w in caught}


def _same(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def _as_float(g):
    return 0.0 if g is None else float(np.asarray(g))


def _check_like_plain(plain, traced, args, i):
    """pb.jvp and pb.gradient of `traced` in argument `i`, against `plain(*args)`; returns (tangent, gradient)."""
    value, error, plain_warnings = _run(lambda: plain(*args))

    def at(a):
        return traced(*args[:i], a, *args[i + 1:])

    (jv, je, jw), (gv, ge, gw) = _run(lambda: pb.jvp(at, (args[i],), (1.0,))), _run(lambda: pb.gradient(at, args[i]))
    for got_error, got_warnings in ((je, jw), (ge, gw)):
        assert type(got_error) is type(error), (got_error, error)
        assert got_warnings <= plain_warnings, got_warnings - plain_warnings
    if error is not None:
        return None, None
    assert _same(jv[0], value), (jv[0], value)
    tangent, gradient = _as_float(jv[1]), _as_float(gv[0])
    assert _same(tangent, gradient) or tangent == pytest.approx(gradient, rel=1e-12, abs=0.0)
    return tangent, gradient


# --- the cases that were wrong ------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["logpdf", "pdf"])
@pytest.mark.parametrize("s", [1e200, 1e300])
def test_lognorm_large_python_float_shape(method, s):
    # s**2 of a Python float raised OverflowError; SciPy computes in float64
    _, gradient = _check_like_plain(getattr(st.lognorm, method), getattr(pst.lognorm, method), [1.5, s, 0.1, 1.3], 1)
    if method == "logpdf":  # -log(s) - log(z)²/(2s²) - ...: -1/s
        assert gradient == pytest.approx(-1.0 / s, rel=1e-12, abs=0.0)


@pytest.mark.parametrize("method", ["logpdf", "pdf"])
@pytest.mark.parametrize("args, i", [([1.5, 2.0, 0.1, math.inf], 0), ([1.5, 2.0, 0.1, math.inf], 1),
                                     ([0.0, 2.0], 0), ([0.1, 2.0, 0.1, 1.3], 0), ([0.1, 2.0, 0.1, 1.3], 2)])
def test_invgamma_at_zero_with_python_floats(method, args, i):
    # z = 0 (scale inf, or x = loc) reached 1.0 / z with Python floats: ZeroDivisionError; SciPy gives -inf / 0
    _check_like_plain(getattr(st.invgamma, method), getattr(pst.invgamma, method), args, i)


@pytest.mark.parametrize("method, x, slope", [
    ("logpdf", 1000.0, -1 / 1.3), ("logpdf", -1000.0, 1 / 1.3), ("logpdf", 1e200, -1 / 1.3), ("logpdf", -1e300, 1 / 1.3),
    ("logcdf", -1000.0, 1 / 1.3), ("logcdf", -1e300, 1 / 1.3), ("logsf", 1000.0, -1 / 1.3), ("logsf", 1e300, -1 / 1.3)])
def test_laplace_log_functions_in_the_tails(method, x, slope):
    # log(pdf) and log(cdf) of an underflowed 0: a nan gradient (and warnings) where the slope is ∓1/scale
    for arg in (x, np.array(x)):
        tangent, gradient = _check_like_plain(getattr(st.laplace, method), getattr(pst.laplace, method),
                                              [arg, 0.1, 1.3], 0)
        assert gradient == pytest.approx(slope, rel=1e-12)


@pytest.mark.parametrize("dist, method, args", [
    ("t", "logsf", [1e200, 3.0]), ("t", "logcdf", [-1e300, 3.0]), ("gamma", "logsf", [1e200, 2.0]),
    ("chi2", "logsf", [1e300, 3.0]), ("invgamma", "logsf", [1e200, 2.0]), ("vonmises", "logsf", [0.5, 800.0]),
])
def test_log_of_an_underflowed_tail_probability(dist, method, args):
    # log(cdf) of a cdf that underflowed to 0: "divide by zero encountered in log", and nan gradients with more warnings
    for i in range(len(args)):
        _check_like_plain(getattr(getattr(st, dist), method), getattr(getattr(pst, dist), method), [*args, 0.1, 1.3], i)


def test_log_of_an_underflowed_discrete_tail():
    for method, mu in (("logsf", 1e-100), ("logcdf", 1e4)):
        _check_like_plain(lambda mu: getattr(st.poisson, method)(3, mu), lambda mu: getattr(pst.poisson, method)(3, mu),
                          [mu], 0)


def test_binary_crossentropy_of_a_python_float():
    # the plain call read yhat.dtype of a float (AttributeError), the differentiated one did not
    for y in (1.0, np.array([1.0]), 0.0):
        tangent, gradient = _check_like_plain(nn.binary_crossentropy, nn.binary_crossentropy, [0.3, y], 0)
        eps = np.finfo(np.float64).eps
        y1 = float(np.sum(y))
        assert gradient == pytest.approx(-y1 / (0.3 + eps) + (1 - y1) / (0.7 + eps), rel=1e-12)


@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("x", [math.inf, -math.inf, np.array(math.inf), np.array([math.inf, 1.0, -math.inf], np.float32)])
def test_gelu_at_infinity(approximate, x):
    # the product rule's x * factor'(x) was inf * 0: a nan tangent (the gradient said 1) and a RuntimeWarning
    def f(x):
        return nn.gelu(x, approximate=approximate)

    plain, _, plain_warnings = _run(lambda: f(x))
    (value, tangent), _, jw = _run(lambda: pb.jvp(f, (x,), (np.ones_like(x),)))
    gradient, _, gw = _run(lambda: pb.gradient(lambda x: np.sum(f(x)), x))
    assert jw <= plain_warnings and gw <= plain_warnings
    assert _same(value, plain) and type(value) is type(plain) and np.asarray(value).dtype == np.asarray(plain).dtype
    far = ~np.isfinite(x)  # the slope far out: 1 to the right, 0 to the left (where the value is nan)
    expected = np.where(np.asarray(x) > 0, 1.0, 0.0)[far]
    np.testing.assert_array_equal(np.asarray(tangent, np.float64)[far], expected)
    np.testing.assert_array_equal(np.asarray(gradient[0], np.float64)[far], expected)
    if not np.all(far):  # the finite entries as before: their slope, from the finite values alone
        finite = np.asarray(x)[~far]
        np.testing.assert_array_equal(np.asarray(tangent)[~far], pb.jvp(f, (finite,), (np.ones_like(finite),))[1])


# --- a representative sweep ---------------------------------------------------------------------------------------

EXTREMES = [0.0, -0.0, 1e-300, 5e-324, 1e200, 1e300, -1e300, math.inf, -math.inf, math.nan]
CONTINUOUS = {"norm": (), "t": (3.0,), "chi2": (3.0,), "beta": (2.0, 3.0), "gamma": (2.0,), "expon": (),
              "laplace": (), "cauchy": (), "logistic": (), "lognorm": (0.7,), "uniform": (), "vonmises": (2.0,),
              "invgamma": (2.0,), "truncnorm": (-1.0, 2.0)}
METHODS = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]


@pytest.mark.parametrize("name", sorted(CONTINUOUS))
def test_sweep_extreme_data_and_loc(name):
    """Each method at extreme Python floats x and loc (scale 1.3): the plain value, no new error or warning."""
    shapes = CONTINUOUS[name]
    for method in METHODS:
        plain, traced = getattr(getattr(st, name), method), getattr(getattr(pst, name), method)
        for v in EXTREMES:
            for i in (0, len(shapes) + 1):  # x, loc
                args = [0.3, *shapes, 0.1, 1.3]
                args[i] = v
                _check_like_plain(plain, traced, args, i)


@pytest.mark.parametrize("name", ["lognorm", "invgamma", "gamma", "beta", "t"])
def test_sweep_large_python_float_shapes(name):
    shapes = CONTINUOUS[name]
    for method in ("logpdf", "pdf"):
        plain, traced = getattr(getattr(st, name), method), getattr(getattr(pst, name), method)
        for v in (1e200, 1e300, 0.0, -1.0, math.nan):
            for i in range(1, len(shapes) + 1):
                args = [0.3, *shapes, 0.1, 1.3]
                args[i] = v
                _check_like_plain(plain, traced, args, i)


ACTIVATIONS = {"relu": nn.relu, "sigmoid": nn.sigmoid, "tanh": nn.tanh, "gelu": nn.gelu,
               "gelu exact": lambda x: nn.gelu(x, approximate="none"), "softplus": nn.softplus,
               "softplus beta": lambda x: nn.softplus(x, beta=2.0), "softplus threshold": lambda x: nn.softplus(x, threshold=20.0),
               "elu": nn.elu, "leaky_relu": nn.leaky_relu, "mse": lambda x: nn.mse(x, 0.5),
               "logitbinarycrossentropy": lambda x: nn.logitbinarycrossentropy(x, np.array([1.0]))}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_sweep_activations_and_losses(name):
    f = ACTIVATIONS[name]
    for v in [*EXTREMES, 40.0, 800.0, -800.0]:
        for x in (v, np.array(v)):
            _check_like_plain(f, f, [x], 0)
