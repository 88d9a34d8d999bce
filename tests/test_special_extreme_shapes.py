"""Derivatives in the shape parameters of `gammainc`/`gammaincc` and `stdtr` at extreme shapes, against mpmath.

- `stdtr(df, t)` for df <= 1e-20: ψ(df/2) and 1/df overflow below df = 1e-308 (a ZeroDivisionError at
  df = 5e-324, where df/2 underflows to 0); the derivative, about log(df)/4, is finite there (closed form).
- `gammainc(a, x)` for a <= 1e-20 (NaN with hundreds of RuntimeWarnings at a = 5e-324, and chi2.cdf(x, 5e-324),
  whose shape df/2 underflows to 0, had NaN), for x <= 1/2 (the quadrature lost every digit at x = 1e-300), for
  x near the underflow threshold (an IntegrationWarning and 1e-2 relative at a = 1e-15, x = 700) and for a >= 1e4
  (0 instead of -4e-6 at a = 1e10, x = a; IntegrationWarnings from a = 1e6 on).
- `stdtr` for df >= 1e170: the derivative underflows to 0, which the quadrature reached with an overflow warning.

Under differentiation user code behaves as without it: where SciPy's plain call is silent, so is the gradient
(warnings are turned into errors around it).

References: mpmath, central differences with a step 1e-25 (1e-22 for large a) relative, at enough digits for the
difference to keep 50 of them.
"""

import math
import warnings

import pytest

import pullback as pb

mp = pytest.importorskip("mpmath")
sp = pytest.importorskip("scipy.special")
from pullback.scipy import stats  # noqa: E402


def _silent_gradient(f, x):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = f(x)
        (g,) = pb.gradient(f, x)
    return plain, float(g)


def _stdtr_ref(df, t):
    with mp.workdps(int(60 - math.log10(df) + 25)):
        def cdf(d):
            half = mp.betainc(d / 2, mp.mpf(1) / 2, 0, d / (d + mp.mpf(t) ** 2), regularized=True) / 2
            return half if t < 0 else 1 - half
        d, h = mp.mpf(df), mp.mpf(df) * mp.mpf("1e-25")
        return float((cdf(d + h) - cdf(d - h)) / (2 * h))


def _gammainc_ref(a, x, step="1e-25"):
    with mp.workdps(int(50 - math.log10(a) + 30)):
        def p(b):
            if x < a:
                return mp.gammainc(b, 0, x, regularized=True)
            return -mp.gammainc(b, x, mp.inf, regularized=True)  # 1 - Q: no cancellation where P is near 1
        b, h = mp.mpf(a), mp.mpf(a) * mp.mpf(step)
        return float((p(b + h) - p(b - h)) / (2 * h))


@pytest.mark.parametrize("df", [1e-300, 1e-320, 5e-324, 1e-20, 1e-15])
@pytest.mark.parametrize("t", [0.7, -3.0, 1e-5, 1e10, -1e300])
def test_stdtr_ddf_tiny_df(df, t):
    plain, g = _silent_gradient(lambda d: sp.stdtr(d, t), df)
    assert plain == sp.stdtr(df, t)
    assert g == pytest.approx(_stdtr_ref(df, t), rel=1e-13, abs=0.0)


@pytest.mark.parametrize("method", ["cdf", "logcdf", "sf", "logsf"])
def test_student_t_distribution_functions_at_df_5e_324(method):
    expected = _stdtr_ref(5e-324, 0.7)  # about 186.03
    _, g = _silent_gradient(lambda d: getattr(stats.t, method)(0.7, d), 5e-324)
    scale = {"cdf": 1.0, "sf": -1.0, "logcdf": 1.0 / sp.stdtr(5e-324, 0.7), "logsf": -1.0 / sp.stdtr(5e-324, -0.7)}
    assert g == pytest.approx(scale[method] * expected, rel=1e-13, abs=0.0)


@pytest.mark.parametrize("df", [1e170, 1e200, 1e300])
@pytest.mark.parametrize("t", [0.7, -3.0, 1e10, 1e-300])
def test_stdtr_ddf_huge_df_underflows_silently(df, t):
    # |d/d(df) stdtr| <= about (1 + 2t² + t⁴)φ(t)/(4df²) < 1e-320: the derivative is 0 in float64
    _, g = _silent_gradient(lambda d: sp.stdtr(d, t), df)
    assert g == 0.0
    _, g = _silent_gradient(lambda d: stats.t.cdf(t, d), df)
    assert g == 0.0


@pytest.mark.parametrize("a, x", [(a, x) for a in [5e-324, 1e-320, 1e-300, 1e-100, 1e-25, 1e-19, 1e-10, 1e-3]
                                  for x in [5e-324, 1e-300, 1e-5, 0.4, 0.75, 3.0, 100.0, 700.0]
                                  if not (a <= 1e-300 and x <= 1e-300)])  # (mpmath takes 30 s for each of those)
def test_gammainc_da_small_shapes(a, x):
    plain, g = _silent_gradient(lambda s: sp.gammainc(s, x), a)
    assert plain == sp.gammainc(a, x)
    assert g == pytest.approx(_gammainc_ref(a, x), rel=1e-12, abs=0.0)
    _, g_upper = _silent_gradient(lambda s: sp.gammaincc(s, x), a)
    assert g_upper == -g


def test_chi2_cdf_at_df_5e_324():
    # chi2.cdf(x, k) = gammainc(k/2, x/2), with k/2 = 0 in float64: the one-sided derivative 0.5·(-E1(x/2))
    expected = float(-mp.e1(0.75) / 2)  # -0.17017...
    _, g = _silent_gradient(lambda k: stats.chi2.cdf(1.5, k), 5e-324)
    assert g == pytest.approx(expected, rel=1e-14, abs=0.0)
    _, g = _silent_gradient(lambda k: stats.chi2.sf(1.5, k), 5e-324)
    assert g == pytest.approx(-expected, rel=1e-14, abs=0.0)


@pytest.mark.parametrize("a, z", [(a, z) for a in [1e4, 3e4, 1e6] for z in [-30.0, -3.0, -0.3, 0.0, 1.0, 5.0, 30.0]
                                  if (a, z) != (1e6, 30.0)])  # (where mpmath's series does not converge)
def test_gammainc_da_large_shapes(a, z):
    x = a + z * math.sqrt(a)
    _, g = _silent_gradient(lambda s: sp.gammainc(s, x), a)
    assert g == pytest.approx(_gammainc_ref(a, x, step="1e-22"), rel=1e-12, abs=0.0)


@pytest.mark.parametrize("a, z", [(a, z) for a in [1e40, 1e44] for z in [-3.0, 0.0, 1e-10, 1.0, 5.0]]
                         + [(1e100, 0.0), (1e300, 0.0)])
def test_gammainc_da_huge_shapes_normal_limit(a, z):
    # gammainc(a, a + z√a) = Φ(z) + O(1/√a): the derivative in a is -φ(z)/√a (1 + O(1/√a))
    x = a + z * math.sqrt(a)
    z = (x - a) / math.sqrt(a)  # x as rounded
    _, g = _silent_gradient(lambda s: sp.gammainc(s, x), a)
    assert g == pytest.approx(-math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi * a), rel=1e-12, abs=0.0)


@pytest.mark.parametrize("a", [1e20, 1e100, 1e300, 5e-324])
@pytest.mark.parametrize("x", [0.7, 1e10, 1e300, 5e-324, "a/2", "a", "2a"])
def test_gammainc_da_extreme_shapes_are_silent(a, x):
    x = {"a/2": a / 2, "a": a, "2a": 2 * a}.get(x, x)
    _, g = _silent_gradient(lambda s: sp.gammainc(s, x), a)
    assert math.isfinite(g)
