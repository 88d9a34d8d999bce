"""Derivatives in the degrees of freedom df of Student's t, against mpmath, from small df to df = 1e12 and inf.

For large df they are O(1/df²) differences of O(1/df) terms (ψ(df/2 + 1/2) - ψ(df/2) against 1/df, log1p(x²/df)
against x²/(df + x²)), which the rules must compute without cancellation.
"""

import functools
import warnings

import numpy as np
import pytest

import pullback as pb

mp = pytest.importorskip("mpmath")
sp = pytest.importorskip("scipy.special")
scipy_stats = pytest.importorskip("scipy.stats")
from pullback.scipy import stats  # noqa: E402

DFS = [0.1, 1.0, 2.5, 1e3, 1e5, 1e8, 1e12]
XS = [0.0, 0.3, -0.3, 1.5, -1.5, 10.0, -10.0, 1e3, -1e3]
GRID = [(df, x) for df in DFS for x in XS]
RTOL = 1e-10
DPS = 30


def _log_density(df, x):
    return mp.loggamma((df + 1) / 2) - mp.loggamma(df / 2) - mp.log(mp.pi * df) / 2 - (df + 1) / 2 * mp.log1p(x * x / df)


def _dlog_density(df, x):
    """d/d(df) of the log density, in closed form."""
    return ((mp.digamma((df + 1) / 2) - mp.digamma(df / 2)) / 2 - 1 / (2 * df) - mp.log1p(x * x / df) / 2
            + (df + 1) * x * x / (2 * df * (df + x * x)))


def _lower_tail(df, t):
    """stdtr(df, t) for t <= 0: the incomplete beta function where it is small, else 1/2 + t·c·2F1(...)."""
    y = df / (df + t * t)
    if y < 0.5:
        return mp.betainc(df / 2, mp.mpf(1) / 2, 0, y, regularized=True) / 2
    c = mp.exp(mp.loggamma((df + 1) / 2) - mp.loggamma(df / 2)) / mp.sqrt(mp.pi * df)
    return mp.mpf(1) / 2 + t * c * mp.hyp2f1(mp.mpf(1) / 2, (df + 1) / 2, mp.mpf(3) / 2, -t * t / df)


@functools.lru_cache(maxsize=None)
def reference(df, x):
    """mpmath: (d/d(df) of logpdf, its second derivative, logpdf, cdf, d/d(df) of cdf), 0 for a tail that
    underflows in float64."""
    with mp.workdps(DPS + 10):
        nu, xm = mp.mpf(df), mp.mpf(x)
        log_f = _log_density(nu, xm)
        d1 = _dlog_density(nu, xm)
        d2 = mp.diff(lambda v: _dlog_density(v, xm), nu)
        if log_f < -800:
            return d1, d2, log_f, mp.mpf(x > 0), mp.mpf(0)
    # 1/2 + t·c·2F1 loses digits against 1/2 (as many as the tail is small), and its derivative is O(1/df²)
    with mp.workdps(DPS + 10 + int(-log_f / 2.3) + 2 * int(mp.log10(max(df, 1)))):
        t = -abs(mp.mpf(x))
        lower = _lower_tail(nu, t)
        dlower = mp.diff(lambda v: _lower_tail(v, t), nu) if x != 0 else mp.mpf(0)
        cdf, dcdf = (lower, dlower) if x <= 0 else (1 - lower, -dlower)
        return d1, d2, log_f, +cdf, +dcdf


def expected(method, df, x):
    d1, d2, log_f, cdf, dcdf = reference(df, x)
    with mp.workdps(DPS + 10):
        return float({"logpdf": d1, "pdf": d1 * mp.exp(log_f), "cdf": dcdf, "sf": -dcdf,
                      "logcdf": dcdf / cdf if cdf else mp.nan, "logsf": -dcdf / (1 - cdf) if cdf != 1 else mp.nan}[method])


def assert_close(got, want, where):
    if abs(want) < 1e-300:  # underflows in float64: only a tiny (or zero) derivative is right
        assert got is None or abs(got) < 1e-290, where
    else:
        assert got == pytest.approx(want, rel=RTOL, abs=0.0), where


def both_modes(f, df):
    """(reverse-mode derivative, forward-mode value, forward-mode derivative) of f at df."""
    value, tangent = pb.jvp(f, (df,), (1.0,))
    return pb.gradient(f, df)[0], value, tangent


def test_stdtr_derivative_in_df_against_mpmath():
    for df, x in GRID:
        got, value, tangent = both_modes(lambda d: sp.stdtr(d, x), df)
        assert value == sp.stdtr(df, x)
        want = expected("cdf", df, x)
        assert_close(got, want, (df, x))
        assert_close(tangent, want, (df, x, "forward"))


@pytest.mark.parametrize("method", ["logpdf", "pdf", "cdf", "sf", "logcdf", "logsf"])
def test_t_distribution_derivatives_in_df_against_mpmath(method):
    scipys = getattr(scipy_stats.t, method)
    for df, x in GRID:
        value = scipys(x, df)
        if not np.isfinite(value):  # logcdf and logsf of a tail that underflows
            continue
        got, traced_value, tangent = both_modes(lambda d: getattr(stats.t, method)(x, d), df)
        assert traced_value == value  # SciPy's own value, bit for bit
        want = expected(method, df, x)
        assert_close(got, want, (method, df, x))
        assert_close(tangent, want, (method, df, x, "forward"))


def test_t_logpdf_second_derivative_in_df_against_mpmath():
    for df, x in GRID:
        def first(d):
            return pb.gradient(lambda e: stats.t.logpdf(x, e), d)[0]

        want = float(reference(df, x)[1])
        assert_close(pb.gradient(first, df)[0], want, (df, x))
        assert_close(pb.jvp(first, (df,), (1.0,))[1], want, (df, x, "forward over reverse"))


def test_stdtr_derivatives_in_t_against_mpmath():
    # d/dt stdtr is the density, whose log Γ((df+1)/2) - log Γ(df/2) lost digits for large df (2e-4 at 1e12);
    # the density's own derivatives in t and df (second derivatives of stdtr) are checked too
    def in_t(d, y):
        return pb.gradient(lambda z: sp.stdtr(d, z), y)[0]

    for df, x in GRID:
        _, _, log_f, _, _ = reference(df, x)
        with mp.workdps(DPS + 10):
            density = mp.exp(log_f)
            want_t = float(density)
            want_tt = float(-(df + 1) * mp.mpf(x) / (df + mp.mpf(x) ** 2) * density)
            want_tdf = float(reference(df, x)[0] * density)
        assert_close(in_t(df, x), want_t, (df, x))
        assert_close(pb.jvp(lambda y: sp.stdtr(df, y), (x,), (1.0,))[1], want_t, (df, x, "forward"))
        assert_close(pb.gradient(lambda y: in_t(df, y), x)[0], want_tt, (df, x, "in t, t"))
        assert_close(pb.gradient(lambda d: in_t(d, x), df)[0], want_tdf, (df, x, "in t, df"))
        assert_close(pb.jvp(lambda d: in_t(d, x), (df,), (1.0,))[1], want_tdf, (df, x, "in t, df, forward"))


@pytest.mark.parametrize("x", [0.0, 0.3, -1.5, 10.0, -1e3])
def test_derivatives_in_df_vanish_at_infinite_df(x):
    # SciPy's values at df = inf are the normal distribution's; the derivatives in df tend to 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for f in (lambda d: sp.stdtr(d, x), lambda d: stats.t.logpdf(x, d), lambda d: stats.t.cdf(x, d),
                  lambda d: stats.t.pdf(x, d)):
            g = pb.gradient(f, np.inf)[0]
            assert g is None or g == 0.0
            assert pb.jvp(f, (np.inf,), (1.0,))[1] in (None, 0.0)


def test_huge_python_float_does_not_raise():
    # t.logpdf always evaluates the normal's formula (for df = inf), whose x**2 raised OverflowError on a traced
    # Python float past 1e154 (Python's float power raises where NumPy's gives inf); SciPy's own values are -inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert pb.gradient(lambda y: stats.norm.logpdf(y), 1e200)[0] == -1e200
        assert stats.t.logpdf(1e200, 2.0) == scipy_stats.t.logpdf(1e200, 2.0)
        pb.gradient(lambda d: stats.t.logpdf(1e200, d), 2.0)  # SciPy's value is -inf (it overflows too): no raise
