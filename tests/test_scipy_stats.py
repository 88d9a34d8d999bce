"""pullback.scipy.stats: for every distribution and method, the traced values against SciPy's
(positional and keyword parameters, broadcasting) to 1e-12, and the gradients in the data and
in every parameter against float64 central differences of SciPy's own function; forward mode,
SciPy's conventions outside the support, the refusals, and the multivariate distributions."""

import warnings

import numpy as np
import pytest

import pullback as pb
from rule_checks import gradcheck

scipy_stats = pytest.importorskip("scipy.stats")
stats = pytest.importorskip("pullback.scipy.stats")

VALUES = {"rtol": 1e-12, "atol": 0.0}
GRADS = {"rtol": 1e-6, "atol": 1e-9}


CONTINUOUS_METHODS = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]
DISCRETE_METHODS = ["logpmf", "pmf", "cdf", "logcdf", "sf", "logsf"]

# name -> (x, shape parameters, loc, scale): x of shape (3,), parameters of shape (2, 1) or (3,)
# (so the result broadcasts to (2, 3)), x inside the support after standardizing.
CONTINUOUS = {
    "norm": (np.array([-1.3, 0.2, 2.1]), (), 0.3, 1.7),
    "t": (np.array([-2.0, 0.3, 1.4]), (np.array([[0.8], [4.5]]),), 0.1, 1.3),
    "chi2": (np.array([0.4, 2.0, 6.5]), (np.array([[1.5], [5.0]]),), -0.2, 1.2),
    "beta": (np.array([0.15, 0.5, 0.8]), (np.array([[0.7], [2.5]]), np.array([1.8, 0.9, 3.0])), -0.1, 1.3),
    "gamma": (np.array([0.3, 1.5, 4.0]), (np.array([[0.6], [3.0]]),), 0.1, 1.5),
    "expon": (np.array([0.2, 1.0, 3.0]), (), -0.1, 0.8),
    "laplace": (np.array([-1.5, 0.4, 2.0]), (), 0.2, 1.1),
    "cauchy": (np.array([-3.0, 0.1, 0.9, 2.5]), (), 0.05, 0.7),
    "logistic": (np.array([-2.0, 0.5, 3.0]), (), 0.2, 1.4),
    "lognorm": (np.array([0.3, 1.0, 2.5]), (np.array([[0.5], [1.3]]),), 0.05, 1.2),
    "uniform": (np.array([0.2, 0.9, 1.6]), (), 0.1, 1.8),
    "vonmises": (np.array([-2.0, 0.3, 1.9]), (np.array([[0.5], [3.0]]),), 0.2, 1.1),
    "invgamma": (np.array([0.3, 1.0, 2.8]), (np.array([[0.8], [3.5]]),), 0.05, 0.9),
    # left-tail, central and right-tail intervals; points near either end take SciPy's other branch
    "truncnorm": (0.1 + 1.2 * np.array([-2.9, 0.1, 2.3]), (np.array([-3.0, -1.0, 0.5]), np.array([-0.5, 0.8, 2.5])),
                  0.1, 1.2),
}

# name -> (k, shape parameters, loc): integer k; integer parameters stay plain
DISCRETE = {
    "poisson": (np.array([1, 3, 6]), (np.array([[0.7], [4.2]]),), 1),
    "bernoulli": (np.array([0, 1, 1]), (np.array([[0.3], [0.8]]),), 0),
    "binom": (np.array([0, 3, 4]), (np.array([[5], [12]]), np.array([0.2, 0.5, 0.7])), 0),
    "nbinom": (np.array([0, 2, 7]), (np.array([[0.8], [3.5]]), np.array([0.3, 0.6, 0.9])), 0),
    "geom": (np.array([1, 2, 6]), (np.array([[0.2], [0.7]]),), 0),
}

SHAPES = {name: getattr(scipy_stats, name).shapes for name in list(CONTINUOUS) + list(DISCRETE)}


def traced_value(f, *args):
    """The value `f` computes while every float argument is being differentiated."""
    return pb.pullback(f, *args)[0]


def check_method(name, method, x, params, extra, keywords):
    """Values (positional and keyword) against SciPy, and gradients against central differences."""
    ours, theirs = getattr(getattr(stats, name), method), getattr(getattr(scipy_stats, name), method)
    expected = theirs(x, *params, *extra)
    positional = traced_value(lambda x, *p: ours(x, *p), x, *params, *extra)
    np.testing.assert_allclose(positional, expected, **VALUES)
    assert np.shape(positional) == np.shape(expected)
    by_keyword = traced_value(lambda x, *p: ours(x, **dict(zip(keywords, p))), x, *params, *extra)
    np.testing.assert_allclose(by_keyword, expected, **VALUES)
    assert np.all(np.isfinite(expected)), "the case should stay inside the support"
    gradcheck(lambda x, *p: ours(x, *p), x, *params, *extra, **GRADS)


@pytest.mark.parametrize("method", CONTINUOUS_METHODS)
@pytest.mark.parametrize("name", CONTINUOUS)
def test_continuous(name, method):
    x, params, loc, scale = CONTINUOUS[name]
    keywords = SHAPES[name].split(", ") if SHAPES[name] else []
    check_method(name, method, x, params, (loc, scale), keywords + ["loc", "scale"])


@pytest.mark.parametrize("method", DISCRETE_METHODS)
@pytest.mark.parametrize("name", DISCRETE)
def test_discrete(name, method):
    k, params, loc = DISCRETE[name]
    if name == "bernoulli" and method in ("sf", "logsf"):
        k = np.zeros(3, dtype=int)  # sf(1) = 0
    check_method(name, method, k, params, (loc,), SHAPES[name].split(", ") + ["loc"])


def test_forward_mode_matches_central_differences():
    eps = 1e-6
    cases = [
        (lambda x, a: stats.gamma.cdf(x, a, scale=1.5), (np.array([0.5, 2.0]), np.array([0.7, 3.0]))),
        (lambda x, df: stats.t.logcdf(x, df), (np.array([-1.0, 0.4]), np.array([1.5, 6.0]))),
        (lambda x, k: stats.vonmises.cdf(x, k, loc=0.3), (np.array([-2.5, 1.0]), np.array([0.8, 2.0]))),
        (lambda p, n: stats.nbinom.logcdf(np.array([1, 4]), n, p), (np.array([0.3, 0.7]), np.array([0.9, 2.5]))),
        (lambda x, a, b: stats.beta.logsf(x, a, b), (np.array([0.2, 0.7]), np.array([0.6, 2.0]), np.array([1.5, 0.8]))),
    ]
    rng = np.random.default_rng(0)
    for f, args in cases:
        tangents = tuple(rng.normal(size=np.shape(a)) for a in args)
        value, tangent = pb.jvp(f, args, tangents)
        np.testing.assert_allclose(value, f(*args), **VALUES)
        moved = [f(*[a + s * eps * t for a, t in zip(args, tangents)]) for s in (1, -1)]
        np.testing.assert_allclose(tangent, (moved[0] - moved[1]) / (2 * eps), rtol=1e-6, atol=1e-9)


def test_multivariate_normal():
    rng = np.random.default_rng(1)
    m = rng.normal(size=(3, 3))
    cov, mean, x = m @ m.T + 3 * np.eye(3), rng.normal(size=3), rng.normal(size=(4, 3))
    for args in [(x, mean, cov), (x[0], mean, cov), (x, mean, np.array([1.0, 2.0, 0.5])), (x, mean, 1.7),
                 (np.array([0.3, 1.2]), 0.5, 2.0)]:  # one dimension: x is a batch of points
        for method in ("logpdf", "pdf"):
            value = traced_value(getattr(stats.multivariate_normal, method), *args)
            expected = getattr(scipy_stats.multivariate_normal, method)(*args)
            np.testing.assert_allclose(value, expected, **VALUES)
            assert np.shape(value) == np.shape(expected)
        # cov: SciPy reads its lower triangle, and so does the gradient
        gradcheck(lambda *a: stats.multivariate_normal.logpdf(*a), *args, **GRADS)
    value = traced_value(lambda c: stats.multivariate_normal.logpdf(0.3, cov=c), 2.0)  # mean=None
    np.testing.assert_allclose(value, scipy_stats.multivariate_normal.logpdf(0.3, cov=2.0), **VALUES)
    frozen = stats.multivariate_normal(mean, cov)
    np.testing.assert_allclose(traced_value(frozen.logpdf, x), scipy_stats.multivariate_normal(mean, cov).logpdf(x),
                               **VALUES)


def test_dirichlet_and_multinomial():
    alpha = np.array([0.7, 2.0, 3.5])
    one, batch = np.array([0.2, 0.3, 0.5]), np.array([[0.2, 0.6], [0.3, 0.1], [0.5, 0.3]])
    for x in (one, one[:2], batch, batch[:2]):  # components along the first axis; the last may be left out
        for method in ("logpdf", "pdf"):
            value = traced_value(getattr(stats.dirichlet, method), x, alpha)
            np.testing.assert_allclose(value, getattr(scipy_stats.dirichlet, method)(x, alpha), **VALUES)
        gradcheck(lambda a: stats.dirichlet.logpdf(x, a), alpha, **GRADS)
        if x.shape[0] == 2:  # on the simplex, x can only move when its last entry is implied
            gradcheck(lambda x, a: stats.dirichlet.logpdf(x, a), x, alpha, **GRADS)
    p, x, n = np.array([0.2, 0.3, 0.5]), np.array([[1, 2, 3], [0, 4, 2], [1, 2, 4]]), np.array([6, 6, 6])
    for method in ("logpmf", "pmf"):  # the last row does not sum to n: -inf, 0
        value = traced_value(lambda p: getattr(stats.multinomial, method)(x, n, p), p)
        np.testing.assert_allclose(value, getattr(scipy_stats.multinomial, method)(x, n, p), **VALUES)
    # SciPy replaces p[-1] by 1 - sum(p[:-1]) whenever p leaves the simplex (with a FutureWarning):
    # the gradient is that of the replaced p, and agrees with central differences. SciPy 1.15 (the newest for
    # Python 3.10) replaces it without the warning: pullback warns where SciPy does
    with warnings.catch_warnings(record=True) as scipy_s:
        warnings.simplefilter("always")
        scipy_stats.multinomial.logpmf(x[0], 6, np.array([0.2, 0.3, 0.6]))
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        g = gradcheck(lambda p: stats.multinomial.logpmf(x[:2], n[:2], p), p, **GRADS)[0]
    assert any(issubclass(w.category, FutureWarning) for w in ours) == \
        any(issubclass(w.category, FutureWarning) for w in scipy_s)
    assert g[-1] == 0.0
    np.testing.assert_allclose(pb.gradient(lambda p: stats.multinomial.logpmf(x[0], 6, p), p)[0],
                               [1 / 0.2 - 3 / 0.5, 2 / 0.3 - 3 / 0.5, 0.0])


def test_outside_the_support_and_invalid_parameters():
    # SciPy's values (-inf, 0, 1, nan), and zero gradients there, finite elsewhere
    x = np.array([-1.0, 1.7, 0.5, 2.0, np.nan])  # below the support, inside, bad a, bad scale, nan
    a = np.array([2.0, 2.0, -1.0, 0.5, 2.0])
    scale = np.array([1.0, 1.0, 1.0, -1.0, 1.0])
    for method in CONTINUOUS_METHODS:
        f = getattr(stats.gamma, method)
        value = traced_value(f, x, a, 0.0, scale)
        np.testing.assert_allclose(value, getattr(scipy_stats.gamma, method)(x, a, 0.0, scale), **VALUES)
        grads = pb.gradient(lambda x, a, s: np.sum(_finite_part(f(x, a, scale=s))), x, a, scale)
        for g in grads:
            np.testing.assert_array_equal(g == 0.0, [True, False, True, True, True])
            assert np.all(np.isfinite(g))
    z = np.array([-2.0, 0.0, 1.0, 3.0])
    for method in CONTINUOUS_METHODS:
        value = traced_value(lambda z, a, b: getattr(stats.truncnorm, method)(z, a, b), z, -1.0, np.array(2.0))
        np.testing.assert_allclose(value, getattr(scipy_stats.truncnorm, method)(z, -1.0, 2.0), **VALUES)
    k = np.array([-1, 0, 2.5, 3, 9])
    for method in DISCRETE_METHODS:
        value = traced_value(lambda n, p: getattr(stats.nbinom, method)(k, n, p), np.array(2.0), np.array(0.4))
        np.testing.assert_allclose(value, getattr(scipy_stats.nbinom, method)(k, 2.0, 0.4), **VALUES)
        p = np.array([0.2, 0.5, 0.6, 1.5, 0.1])  # p = 1.5 is invalid: NaN, except where SciPy answers without p
        value = traced_value(lambda p: getattr(stats.binom, method)(k, 3, p), p)
        np.testing.assert_array_equal(value, getattr(scipy_stats.binom, method)(k, 3, p))
        assert np.isnan(value[3]) == (method != "logcdf")


def _finite_part(v):
    return np.where(np.isfinite(pb.stop_gradient(v)), v, 0.0)


def test_refusals_name_the_argument_and_the_fix():
    with pytest.raises(TypeError, match=r"poisson.logpmf: `k` takes integer values.*plain"):
        pb.gradient(lambda k: stats.poisson.logpmf(k, 2.0), 3.0)
    with pytest.raises(TypeError, match=r"binom.cdf: `n` takes integer values"):
        pb.gradient(lambda n: stats.binom.cdf(2, n, 0.5), 5.0)
    with pytest.raises(TypeError, match="`x` takes integer values"):
        pb.gradient(lambda x: stats.multinomial.logpmf(x, 3, [0.5, 0.5]), np.array([1.0, 2.0]))
    with pytest.raises(NotImplementedError, match="multivariate_normal.cdf.*quasi-Monte Carlo.*plain"):
        pb.gradient(lambda m: stats.multivariate_normal.cdf(np.zeros(2), m), np.zeros(2))
    with pytest.raises(NotImplementedError, match="cov is singular"):
        pb.gradient(lambda m: stats.multivariate_normal.logpdf(np.zeros(2), m, np.ones((2, 2)), allow_singular=True),
                    np.zeros(2))
    with pytest.raises(NotImplementedError, match="gammainc: the derivative with respect to a .* quadrature"):
        pb.hessian(lambda a: stats.gamma.cdf(1.5, a), 2.0)
    with pytest.raises(NotImplementedError, match="vonmises.cdf: the derivative with respect to kappa"):
        pb.hessian(lambda k: stats.vonmises.cdf(1.0, k), 2.0)
    with pytest.raises(TypeError, match="missing required argument"):
        pb.gradient(lambda x: stats.gamma.logpdf(x), 1.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'mu'"):
        pb.gradient(lambda x: stats.norm.logpdf(x, mu=1.0), 1.0)
    assert stats.multivariate_normal.cdf(np.zeros(2), np.zeros(2)) == pytest.approx(0.25, abs=1e-4)  # plain: SciPy


def test_second_derivatives_frozen_float32_and_plain_calls():
    # d²/dx² of the normal log density is -1/scale²; of the gamma cdf, the derivative of its density
    h = pb.hessian(lambda x: stats.norm.logpdf(x, 1.0, 2.0), 0.3)
    np.testing.assert_allclose(h, -0.25)
    x, a = np.array([0.5, 2.0]), 2.5
    gradcheck(lambda x: np.sum(pb.gradient(lambda y: np.sum(stats.gamma.cdf(y, a)), x)[0]), x, **GRADS)
    gradcheck(lambda m: np.sum(pb.gradient(lambda y: np.sum(stats.t.logpdf(y, m)), x)[0]), 3.0, **GRADS)
    frozen = stats.gamma(a, scale=2.0)
    np.testing.assert_allclose(traced_value(frozen.logcdf, x), scipy_stats.gamma(a, scale=2.0).logcdf(x), **VALUES)
    value, (g,) = pb.withgradient(lambda x: np.sum(stats.norm.logpdf(x)), x.astype(np.float32))
    assert g.dtype == np.float32 and np.allclose(g, -x)  # SciPy computes in float64, the gradient has x's dtype
    assert stats.norm.logpdf(1.0) == scipy_stats.norm.logpdf(1.0)
    assert stats.norm(0.0, 2.0).cdf(1.0) == scipy_stats.norm(0.0, 2.0).cdf(1.0)


def test_infinite_degrees_of_freedom_is_the_normal_distribution():
    x = np.array([-0.7, 0.3, 2.0])
    for method in ("logpdf", "pdf", "cdf", "logsf"):
        value, (g,) = pb.withgradient(lambda x: np.sum(getattr(stats.t, method)(x, np.inf)), x)
        np.testing.assert_allclose(value, np.sum(getattr(scipy_stats.t, method)(x, np.inf)), **VALUES)
        np.testing.assert_allclose(g, pb.gradient(lambda x: np.sum(getattr(stats.norm, method)(x)), x)[0],
                                   rtol=1e-12)


def test_names_and_lazy_import():
    import subprocess
    import sys

    code = ("import sys; import pullback as pb; from pullback.scipy import stats; print('scipy' in sys.modules); "
            "print(pb.scipy.stats is stats, round(pb.gradient(lambda m: stats.norm.logpdf(1.0, m), 0.5)[0], 12))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "0.5"]
    assert set(stats.__all__) == set(CONTINUOUS) | set(DISCRETE) | {"multivariate_normal", "dirichlet", "multinomial"}
    with pytest.raises(AttributeError, match=r"norm has no 'ppf': it provides logpdf, pdf, cdf.*scipy.stats.norm.ppf"):
        stats.norm.ppf
    with pytest.raises(AttributeError, match="poisson has no 'rvs'"):
        stats.poisson(2.0).rvs


@pytest.mark.parametrize("method", ["logpdf", "pdf"])
def test_multivariate_normal_values_are_scipy_s_own(method):
    rng = np.random.default_rng(0)
    x, mean, a = rng.standard_normal((5, 3)), rng.standard_normal(3), rng.standard_normal((3, 3))
    cov = a @ a.T + np.eye(3)
    expected = getattr(scipy_stats.multivariate_normal, method)(x, mean, cov)
    got = pb.pullback(lambda x: getattr(stats.multivariate_normal, method)(x, mean, cov), x)[0]
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == expected.dtype
