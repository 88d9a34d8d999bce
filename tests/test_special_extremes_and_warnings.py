"""Derivatives of densities at extreme arguments, against mpmath; and rules that leaked warnings.

- Student's t (`t.logpdf`, `t.pdf`, and `stdtr`'s derivatives in t, which share its log density): every first and
  second derivative, in x, in df and mixed, reverse over reverse and forward over reverse, for |x| from 1e-300 to
  1e300 and df from 0.1 to 1e12. The derivatives of log1p(x²/df) went through 1/(1 + x²/df)² and x²/df², which
  underflow or overflow for |x| ≳ 1e77: at x = 1e150, d²/(dx d(df)) of t.logpdf was +1e-149 instead of -1e-150, and
  NaN where x² overflows.
- `cauchy` and `logistic`, the other families whose log density is a log1p of a square or of an exponential: the
  second derivative at x = 0 (through |x|'s kink: 0, or refused), the logistic's first derivative near 0 (a
  cancellation: 8e-8 relative at 1e-10) and the Cauchy density's derivatives past |x| = 1e77 (subnormal
  intermediates: 4e-4 relative at 1e80).
- Under differentiation user code behaves as without it, warnings included: a rule must not emit a warning that
  SciPy's plain call does not.

References: mpmath at 90 digits, from closed forms (checked against mpmath's numerical derivatives).
"""

import functools
import math
import warnings

import numpy as np
import pytest

import pullback as pb

mp = pytest.importorskip("mpmath")
sp = pytest.importorskip("scipy.special")
scipy_stats = pytest.importorskip("scipy.stats")
from pullback.scipy import stats  # noqa: E402

MAGNITUDES = [0.0, 1e-300, 1e-10, 0.3, 1.5, 10.0, 1e3, 1e10, 1e100, 1e150, 1e300]
XS = MAGNITUDES + [-x for x in MAGNITUDES if x]
DFS = [0.1, 1.0, 2.5, 1e3, 1e8, 1e12]
RTOL = 1e-12
TINY = 1e-300  # below this a derivative underflows in float64: compared absolutely
DPS = 90


@functools.lru_cache(maxsize=None)
def student(x, df):
    """mpmath: {derivative: value} of the log density L and of the density P = e^L of Student's t."""
    with mp.workdps(DPS):
        x, v = mp.mpf(x), mp.mpf(df)
        q = v + x * x
        log_p = mp.loggamma((v + 1) / 2) - mp.loggamma(v / 2) - mp.log(mp.pi * v) / 2 - (v + 1) / 2 * mp.log(q / v)
        lx = -(v + 1) * x / q
        lxx = -(v + 1) * (v - x * x) / q**2
        ld = ((mp.digamma((v + 1) / 2) - mp.digamma(v / 2)) / 2 - 1 / (2 * v) - mp.log(q / v) / 2
              + (v + 1) * x * x / (2 * v * q))
        lxd = x * (1 - x * x) / q**2
        ldd = ((mp.psi(1, (v + 1) / 2) - mp.psi(1, v / 2)) / 4 + 1 / (2 * v**2) + x * x / (2 * v * q)
               + x * x / 2 * (1 / (v * q) - (v + 1) * (2 * v + x * x) / (v**2 * q**2)))
        p = mp.exp(log_p)
        logpdf = {"x": lx, "df": ld, "xx": lxx, "x,df": lxd, "df,df": ldd}
        pdf = {"x": p * lx, "df": p * ld, "xx": p * (lxx + lx**2), "x,df": p * (lxd + lx * ld),
               "df,df": p * (ldd + ld**2)}
        return {"logpdf": {k: float(w) for k, w in logpdf.items()}, "pdf": {k: float(w) for k, w in pdf.items()},
                "density": float(p)}


def assert_close(got, want, where):
    got = 0.0 if got is None else float(got)
    assert abs(got - want) <= RTOL * abs(want) + TINY, (where, got, want)


def warnings_of_plain(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return caught


def derivatives(f, x, df):
    """Every first and second derivative of f(x, df): {name: [one per mode]}."""
    def in_x(a, b):
        return pb.gradient(lambda y: f(y, b), a)[0]

    def in_df(a, b):
        return pb.gradient(lambda d: f(a, d), b)[0]

    return {
        "x": [in_x(x, df), pb.jvp(lambda y: f(y, df), (x,), (1.0,))[1]],
        "df": [in_df(x, df), pb.jvp(lambda d: f(x, d), (df,), (1.0,))[1]],
        "xx": [pb.gradient(lambda y: in_x(y, df), x)[0], pb.jvp(lambda y: in_x(y, df), (x,), (1.0,))[1]],
        "df,df": [pb.gradient(lambda d: in_df(x, d), df)[0], pb.jvp(lambda d: in_df(x, d), (df,), (1.0,))[1]],
        "x,df": [pb.gradient(lambda d: in_x(x, d), df)[0], pb.jvp(lambda d: in_x(x, d), (df,), (1.0,))[1],
                 pb.gradient(lambda y: in_df(y, df), x)[0], pb.jvp(lambda y: in_df(y, df), (x,), (1.0,))[1]],
    }


# --- Student's t -----------------------------------------------------------------------------------------
def test_mixed_derivative_of_t_logpdf_at_1e150_has_the_right_sign():
    # exact: x (1 - x²)/(df + x²)² = -1e-150 (to 1e-300 relative); it came out as +1.0000000000000002e-149
    g = pb.gradient(lambda d: pb.gradient(lambda z: stats.t.logpdf(z, d), 1e150)[0], 0.1)[0]
    assert g == pytest.approx(-1e-150, rel=1e-14, abs=0.0)
    g = pb.gradient(lambda z: pb.gradient(lambda d: stats.t.logpdf(z, d), 0.1)[0], -1e150)[0]
    assert g == pytest.approx(1e-150, rel=1e-14, abs=0.0)


@pytest.mark.parametrize("df", DFS)
@pytest.mark.parametrize("method", ["logpdf", "pdf"])
def test_t_derivatives_at_extreme_arguments_against_mpmath(method, df):
    f = getattr(stats.t, method)
    for x in XS:
        plain = warnings_of_plain(lambda: getattr(scipy_stats.t, method)(x, df))
        with warnings.catch_warnings():
            # SciPy's own value warns where x² overflows (it is -inf, or 0, there); elsewhere nothing may warn
            warnings.simplefilter("ignore" if plain else "error")
            value, _ = pb.jvp(lambda y: f(y, df), (x,), (1.0,))
            want_value = getattr(scipy_stats.t, method)(x, df)
            assert value == want_value or (np.isnan(value) and np.isnan(want_value)), (x, df)  # SciPy's, bit for bit
            for name, got in derivatives(f, x, df).items():
                for mode, g in enumerate(got):
                    assert_close(g, student(x, df)[method][name], (method, x, df, name, mode))


@pytest.mark.parametrize("df", [0.1, 2.5, 1e8])
def test_stdtr_derivatives_in_t_at_extreme_arguments_against_mpmath(df):
    # d/dt stdtr is the density, computed from the same log density as t.logpdf
    def in_t(d, y):
        return pb.gradient(lambda z: sp.stdtr(d, z), y)[0]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in [0.0, 1e-300, -1e-10, 1.5, 1e10, -1e100, 1e150, -1e300]:
            want = student(x, df)
            assert_close(in_t(df, x), want["density"], (x, df))
            assert_close(pb.gradient(lambda y: in_t(df, y), x)[0], want["pdf"]["x"], (x, df, "t, t"))
            assert_close(pb.jvp(lambda y: in_t(df, y), (x,), (1.0,))[1], want["pdf"]["x"], (x, df, "t, t forward"))
            assert_close(pb.gradient(lambda d: in_t(d, x), df)[0], want["pdf"]["df"], (x, df, "t, df"))
            assert_close(pb.jvp(lambda d: in_t(d, x), (df,), (1.0,))[1], want["pdf"]["df"], (x, df, "t, df forward"))


def _stdtr_ddf_reference(df, t):
    """d/d(df) stdtr(df, t) with mpmath: t·c'(df) for a tiny t (c the density at 0), else from the incomplete
    beta function of the lower tail."""
    with mp.workdps(50):
        nu, tm = mp.mpf(df), mp.mpf(t)
        if abs(t) < 1e-100:
            c = mp.exp(mp.loggamma((nu + 1) / 2) - mp.loggamma(nu / 2)) / mp.sqrt(mp.pi * nu)
            return float(tm * c * ((mp.digamma((nu + 1) / 2) - mp.digamma(nu / 2)) / 2 - 1 / (2 * nu)))
        lower = mp.diff(lambda v: mp.betainc(v / 2, mp.mpf(1) / 2, 0, v / (v + tm * tm), regularized=True) / 2, nu)
        return float(lower if t < 0 else -lower)


@pytest.mark.parametrize("df, t", [(0.1, 1e-300), (1.0, -1e-300), (2.5, 1e-300), (1e8, -1e-300), (1.0, 1e300),
                                   (0.1, -1e300), (1.0, 1e150), (1e5, 1e3), (1e5, -1e10), (1e8, 1e150)])
def test_stdtr_derivative_in_df_at_extreme_t_is_right_and_silent(df, t):
    # the quadrature worked with numbers near the underflow threshold (|t| = 1e-300, 1e300): QUADPACK raised
    # overflow and invalid flags, which np.vectorize turned into RuntimeWarnings; where the derivative underflows
    # (df = 1e5, t = 1e3) it warned "The algorithm does not converge" (an IntegrationWarning)
    assert not warnings_of_plain(lambda: sp.stdtr(df, t))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = pb.gradient(lambda d: sp.stdtr(d, t), df)[0]
    want = _stdtr_ddf_reference(df, t)
    assert abs(got - want) <= 1e-11 * abs(want) + TINY, (got, want)


# --- the other log densities with a log1p: cauchy, logistic ------------------------------------------------
WIDE = sorted(set(XS + [1e77, 1e80, -1e80, 1e120, 1e200, 0.999, 1.0, -1.001, 30.0, 700.0, -800.0]))


def _cauchy(x):
    q = 1 + x * x
    first, second, density = -2 * x / q, -2 * (1 - x * x) / q**2, 1 / (mp.pi * q)
    return first, second, density


def _logistic(x):
    first, second = -mp.tanh(x / 2), -mp.sech(x / 2) ** 2 / 2
    return first, second, mp.exp(-abs(x) - 2 * mp.log1p(mp.exp(-abs(x))))


@pytest.mark.parametrize("name, reference", [("cauchy", _cauchy), ("logistic", _logistic)])
def test_log1p_densities_at_extreme_arguments_against_mpmath(name, reference):
    dist, plain = getattr(stats, name), getattr(scipy_stats, name)
    for x in WIDE:
        with mp.workdps(DPS):
            first, second, density = reference(mp.mpf(x))
            want = {"logpdf": (float(first), float(second)),
                    "pdf": (float(density * first), float(density * (second + first**2)))}
        for method in ("logpdf", "pdf"):
            f = getattr(dist, method)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                value, tangent = pb.jvp(f, (x,), (1.0,))
                assert value == getattr(plain, method)(x)  # SciPy's, bit for bit
                assert_close(tangent, want[method][0], (name, method, x, "forward"))
                assert_close(pb.gradient(f, x)[0], want[method][0], (name, method, x))
                assert_close(pb.gradient(lambda y: pb.gradient(f, y)[0], x)[0], want[method][1], (name, method, x))
                assert_close(pb.hessian(f, x), want[method][1], (name, method, x, "forward over reverse"))


def test_log1p_densities_on_arrays_mixing_their_branches():
    x = np.array([-3.0, -0.5, 0.0, 0.25, 2.0, 1e100])
    for dist in (stats.cauchy, stats.logistic, stats.t):
        args = (2.5,) if dist is stats.t else ()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            value, tangent = pb.jvp(lambda y: dist.logpdf(y, *args), (x,), (np.ones_like(x),))
            np.testing.assert_array_equal(value, getattr(scipy_stats, dist.name).logpdf(x, *args))
            want = [pb.gradient(lambda y: dist.logpdf(y, *args), v)[0] for v in x]
            np.testing.assert_allclose(tangent, want, rtol=1e-15)


# --- rules that leaked warnings ----------------------------------------------------------------------------
def test_eval_sh_jacobi_at_a_pole_of_its_normalization_is_nan_without_a_warning():
    # G_n^(p,q)(x) = P_n^(p-q, q-1)(2x - 1)/binom(2n + p - 1, n): at n = -2.5, p = 2.5 the binomial is 0 (SciPy's
    # value is not finite, without a warning); the derivative divided 0 by 0 ("invalid value in scalar divide")
    def f(x):
        return sp.eval_sh_jacobi(-2.5, 2.5, 1.2, x)

    assert not warnings_of_plain(lambda: f(0.3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(pb.gradient(f, 0.3)[0])
        assert np.isnan(pb.jvp(f, (0.3,), (1.0,))[1])
        assert np.isnan(pb.hessian(f, 0.3))
        g = pb.jacobian(lambda x: sp.eval_sh_jacobi(np.array([-2.5, 1.5]), 2.5, 1.2, x), 0.3)[0]
    assert np.isnan(g[0]) and g[1] == pytest.approx(
        (sp.eval_sh_jacobi(1.5, 2.5, 1.2, 0.3 + 1e-6) - sp.eval_sh_jacobi(1.5, 2.5, 1.2, 0.3 - 1e-6)) / 2e-6, rel=1e-8)


def test_elliprf_hessian_at_a_zero_argument_is_silent_and_finite_in_the_others():
    # the infinite slope in x at x = 0 was -√x, whose derivative 1/(2√x) divided by 0 ("divide by zero"), and
    # gave 0/0 = nan for every direction that does not move x: the derivatives in y and z, which are finite
    assert not warnings_of_plain(lambda: sp.elliprf(0.0, 1.0, 2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pb.gradient(lambda x: sp.elliprf(x, 1.0, 2.0), 0.0)[0] == -np.inf
        h = pb.hessian(lambda v: sp.elliprf(v[0], v[1], v[2]), np.array([0.0, 1.0, 2.0]))
        in_yz = pb.hessian(lambda v: sp.elliprf(0.0, v[0], v[1]), np.array([1.0, 2.0]))
        _, along_second = pb.jvp(lambda x: pb.gradient(lambda y: np.sum(sp.elliprf(y, 1.0, 2.0)), x)[0],
                                 (np.array([0.0, 1.0]),), (np.array([0.0, 1.0]),))
    assert not np.any(np.isfinite(h[0])) and not np.any(np.isfinite(h[:, 0]))
    np.testing.assert_allclose(h[1:, 1:], in_yz, rtol=1e-14)
    with mp.workdps(30):  # d²/dy² and d²/dydz of R_F(0, y, z) at (1, 2), and d²/dx² of R_F(x, 1, 2) at x = 1
        want_yz = [[float(mp.diff(lambda y, z: mp.elliprf(0, y, z), (1, 2), (2, 0))),
                    float(mp.diff(lambda y, z: mp.elliprf(0, y, z), (1, 2), (1, 1)))],
                   [float(mp.diff(lambda y, z: mp.elliprf(0, y, z), (1, 2), (1, 1))),
                    float(mp.diff(lambda y, z: mp.elliprf(0, y, z), (1, 2), (0, 2)))]]
        want_xx = float(mp.diff(lambda x: mp.elliprf(x, 1, 2), 1, 2))
    np.testing.assert_allclose(in_yz, want_yz, rtol=1e-12)
    assert along_second[0] == 0.0 and along_second[1] == pytest.approx(want_xx, rel=1e-12, abs=0.0)


def test_extreme_t_logpdf_derivatives_are_silent():
    # nothing in the traced formula may overflow where SciPy's own value does not (|x| ≤ 1e154)
    for x in (1e-300, 1e150, -1e150):
        assert not warnings_of_plain(lambda: scipy_stats.t.logpdf(x, 0.1))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pb.hessian(lambda v: stats.t.logpdf(v[0], v[1]), np.array([x, 0.1]))
            pb.gradient(lambda d: pb.gradient(lambda z: stats.t.pdf(z, d), x)[0], 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # SciPy's own: its value is -inf there (x² overflows)
        assert math.isfinite(pb.gradient(lambda d: stats.t.logpdf(1e300, d), 2.0)[0])


@pytest.mark.parametrize("name, args", [("norm", ()), ("t", (2.0,)), ("cauchy", ()), ("logistic", ()), ("laplace", ())])
def test_densities_at_infinite_x_pass_no_gradient(name, args):
    # SciPy's logpdf (pdf) at x = ±inf is the constant -inf (0); the traced formula ran at the stand-in x = 0, so
    # the derivative in scale (and df) was that at x = 0 (-0.5 for norm.logpdf, scale 2): now filled, as nan is
    for method in ("logpdf", "pdf"):
        def f(s):
            return getattr(stats, name)(*args, 0.0, s).__getattr__(method)(np.array([np.inf, -np.inf, 0.5]))

        value, tangent = pb.jvp(f, (2.0,), (1.0,))
        np.testing.assert_array_equal(value, getattr(getattr(scipy_stats, name), method)(
            np.array([np.inf, -np.inf, 0.5]), *args, 0.0, 2.0))
        assert tangent[0] == 0.0 and tangent[1] == 0.0 and tangent[2] != 0.0
        assert pb.gradient(lambda s: getattr(getattr(stats, name), method)(np.inf, *args, 0.0, s), 2.0)[0] in (None, 0.0)


def test_stdtr_derivatives_in_t_for_an_invalid_df_are_nan_and_silent():
    # SciPy's stdtr is nan for df <= 0 or nan, without a warning. The density treated a nan df as infinite (the
    # normal density: 0.352 at t = 0.5, a number for a nan-valued function), and log(df) of df <= 0 warned
    df = np.array([np.inf, 2.0, -1.0, 0.0, np.nan])
    assert not warnings_of_plain(lambda: sp.stdtr(df, 0.5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = pb.jacobian(lambda y: sp.stdtr(df, y), 0.5)[0]
        second = pb.jacobian(lambda y: pb.jacobian(lambda z: sp.stdtr(df, z), y)[0], 0.5)[0]
        forward = pb.jvp(lambda y: sp.stdtr(df, y), (0.5,), (1.0,))[1]
    normal = math.exp(-0.125) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(first[:2], [normal, scipy_stats.t.pdf(0.5, 2.0)], rtol=1e-14)
    np.testing.assert_allclose(second[:2], [-0.5 * normal, -3 * 0.5 / (2 + 0.25) * scipy_stats.t.pdf(0.5, 2.0)],
                               rtol=1e-14)  # -(df + 1) t/(df + t²) times the density
    np.testing.assert_array_equal(forward, first)
    assert np.all(np.isnan(first[2:])) and np.all(np.isnan(second[2:]))
