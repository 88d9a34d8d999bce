"""Rules for `scipy.special`, registered only once SciPy itself is imported.

Importing pullback never imports SciPy. If `scipy.special` is already imported, the rules
are registered right away; otherwise a one-shot import hook registers them the moment
`scipy.special` finishes importing, whichever module imports it. (The tables are keyed by
SciPy's ufunc objects, which do not exist before that.) `register()` does the same by hand.

The ufuncs (`erf`, `gammaln`, `expit`, ...) then work on tracked values directly. SciPy's
Python-level functions (`logsumexp`, `softmax`, `log_softmax`, `polygamma`) convert their
input with `np.asarray` before any NumPy dispatch, so calls to them can never reach pullback;
this module provides differentiable versions with the same signatures (public as
`pullback.scipy.special`), which call SciPy when nothing is being differentiated:

>>> import numpy as np, pullback as pb
>>> from pullback.rules.special import logsumexp
>>> pb.gradient(logsumexp, np.array([0.0, 0.0]))[0]
array([0.5, 0.5])

Every rule has a forward rule; for the ufuncs both come from one local derivative, as the
Jacobian of an elementwise map is diagonal.
"""

import functools
import importlib.abc
import importlib.util
import inspect
import math
import sys
import warnings

import numpy as np

from .._extend import frule, nondifferentiable, primitive, rrule
from .._jit_trace import JitError
from .._registry import qualified_name
from .._standins import as_numpy_number, is_jit_float_or_complex, is_stand_in
from .._tangents import Thunk
from .._values import Traced, stop_gradient, strip_all
from ._register import ENTRIES, add_tangents, describe, numpy_valued, with_numpy_value

SQRT_PI = math.sqrt(math.pi)
SQRT_2PI = math.sqrt(2.0 * math.pi)
SQRT_2 = math.sqrt(2.0)

# scipy.special ufunc name -> its reverse rule, and -> its forward rule; `register()` registers
# them for the ufunc of that name, with `pb.rrule` and `pb.frule`.
RULES = {}
FORWARD = {}


def _scipy_special():
    import scipy.special

    return scipy.special


def _named(rule_fn, name):
    rule_fn.__name__ = rule_fn.__qualname__ = f"{name}_rule"
    return rule_fn


def _unary(name, args="x", notes=""):
    """Register `scipy.special.<name>(x)` with local derivative `derivative(g, x, y, sp)`, linear in g."""

    def register(derivative):
        def rule(x):
            sp = _scipy_special()
            y = getattr(sp, name)(x)
            return y, lambda g: (derivative(g, x, y, sp),)

        def forward(primals, tangents):
            (x,), (t,) = primals, tangents
            sp = _scipy_special()
            y = getattr(sp, name)(x)
            return y, None if t is None else derivative(t, x, y, sp)

        RULES[name], FORWARD[name] = _named(rule, name), forward
        describe(f"scipy.special.{name}", args, notes, kind="rule", rule=rule, name=f"scipy.special.{name}")
        return derivative

    return register


def _ufunc_named(sp, name):
    """The ufunc `scipy.special.<name>`; a dotted name reaches a private one (`_ufuncs._zeta`)."""
    fn = sp
    for part in name.split("."):
        fn = getattr(fn, part)
    # SciPy 1.15 with SCIPY_ARRAY_API=1 wraps some ufuncs (erf, gammaln, ...) in a Python function
    return fn if isinstance(fn, np.ufunc) or not isinstance(getattr(fn, "__wrapped__", None), np.ufunc) else fn.__wrapped__


def _nary(name, partials, args, notes="", row=None):
    """Register `scipy.special.<name>(*inputs)` with one partial derivative `d(g, *inputs, y, sp)` per input
    (None for an input that carries no gradient: an integer count, a piecewise constant argument)."""

    def rule(*inputs):
        sp = _scipy_special()
        y = _ufunc_named(sp, name)(*inputs)

        def back(g):
            return tuple(None if d is None else Thunk(lambda d=d: d(g, *inputs, y, sp)) for d in partials)

        return y, back

    def forward(primals, tangents):
        sp = _scipy_special()
        y = _ufunc_named(sp, name)(*primals)
        return y, add_tangents(*(None if t is None or d is None else d(t, *primals, y, sp)
                                 for d, t in zip(partials, tangents)))

    RULES[name], FORWARD[name] = _named(rule, name), forward
    describe(f"scipy.special.{name}", args, notes, kind="rule", rule=rule, name=f"scipy.special.{row or name}")


def _binary(name, d_first, d_second, args, notes=""):
    """Register `scipy.special.<name>(a, b)` with partial derivatives `d_first(g, a, b, y, sp)` and `d_second`."""
    _nary(name, (d_first, d_second), args, notes)


def _no_order_derivative(name):
    def refuse(g, a, b, y, sp):
        raise NotImplementedError(
            f"scipy.special.{name}: the derivative with respect to the order is not available; "
            "pass the order as a plain number."
        )

    return refuse


def _truncated(derivative, *integers):
    """`derivative` with the inputs at positions `integers` (integer orders and counts) truncated toward
    zero, as SciPy's loops truncate a float there (kn(0.5, x) is kn(0, x), with a RuntimeWarning): the
    derivative of what SciPy computes, whose recurrences step to n - 1 and n + 1 of the truncated n."""

    def d(g, *inputs):
        return derivative(g, *(np.trunc(stop_gradient(v)) if i in integers else v for i, v in enumerate(inputs)))

    return d


_unary("expit")(lambda g, x, y, sp: g * y * sp.expit(-x))  # not 1 - y, which is 0 past x = 37
_unary("logit")(lambda g, x, y, sp: g / (x * (1.0 - x)))
_unary("log_expit")(lambda g, x, y, sp: g * sp.expit(-x))
_unary("erf")(lambda g, x, y, sp: g * (2.0 / SQRT_PI) * np.exp(-x * x))
_unary("erfc")(lambda g, x, y, sp: g * (-2.0 / SQRT_PI) * np.exp(-x * x))
_unary("erfinv")(lambda g, x, y, sp: g * (SQRT_PI / 2.0) * np.exp(y * y))
_unary("erfcinv")(lambda g, x, y, sp: g * (-SQRT_PI / 2.0) * np.exp(y * y))
_unary("erfcx")(lambda g, x, y, sp: g * _erfcx_prime(x, y))
_unary("gammaln", notes="Derivative digamma(x), also for negative x (gammaln is log|Γ|).")(
    lambda g, x, y, sp: g * sp.digamma(x))
_unary("gamma")(lambda g, x, y, sp: g * y * sp.digamma(x))
_unary("digamma", notes="Also reached as scipy.special.psi. Derivative polygamma(1, x), also for complex x.")(
    lambda g, x, y, sp: g * _any_polygamma(1, x))
_unary("ndtr")(lambda g, x, y, sp: g * np.exp(-0.5 * x * x) / SQRT_2PI)
# φ(x) / Φ(x), with Φ(x) = exp(-x²/2) erfcx(-x/√2) / 2: the exponentials cancel, so no digits are lost
# for very negative x (exp(-x²/2 - log Φ(x)) subtracts two huge numbers)
_unary("log_ndtr", notes="Stable for very negative x (the derivative is sqrt(2/π) / erfcx(-x/√2)).")(
    lambda g, x, y, sp: g * (SQRT_2PI / np.pi) / sp.erfcx(-x / SQRT_2))
_unary("ndtri")(lambda g, x, y, sp: g * SQRT_2PI * np.exp(0.5 * y * y))
_unary("i0")(lambda g, x, y, sp: g * sp.i1(x))
_unary("i1")(lambda g, x, y, sp: g * 0.5 * (sp.i0(x) + sp.iv(2.0, x)))
_unary("i0e")(lambda g, x, y, sp: g * (sp.i1e(x) - np.sign(x) * y))
_unary("i1e")(lambda g, x, y, sp: g * (0.5 * (sp.i0e(x) + sp.ive(2.0, x)) - np.sign(x) * y))


def _erfcx_prime(x, y):
    """erfcx'(x) = 2x erfcx(x) - 2/sqrt(pi); past x = 10, where those two terms cancel (to 0 from x = 1e8),
    by its asymptotic series -(2/sqrt(pi)) sum_n (-1)^(n+1) (2n - 1)!! u^n, u = 1 / (2x²)."""
    far = stop_gradient(x) > 10.0
    closed = 2.0 * x * y - 2.0 / SQRT_PI
    if not np.any(far):
        return closed
    safe = np.where(far, x, 20.0)
    u = 0.5 / safe / safe
    series = (-2.0 / SQRT_PI) * u * _polynomial(_ERFCX_SERIES, -u)
    return np.where(far, series, closed)


_ERFCX_SERIES = [float(math.prod(range(1, 2 * k + 2, 2))) for k in range(16)]  # (2k + 1)!!


def _log_ratio(x, y):
    """log(x / y), and log(x) - log(y) where x / y overflows or underflows while x and y do not."""
    with np.errstate(over="ignore", under="ignore"):
        ratio = x / y
    plain = np.abs(stop_gradient(ratio))
    off = (plain < np.finfo(plain.dtype).tiny) | (plain == np.inf)
    if not np.any(off):
        return np.log(ratio)
    return np.where(off, np.log(np.where(off, x, 1.0)) - np.log(np.where(off, y, 1.0)), np.log(np.where(off, 1.0, ratio)))


def _safe_ratio(x, y):
    """x / y, and 0 where x == 0 (so 0 * log 0 terms stay 0)."""
    zero = x == 0
    return np.where(zero, 0.0, x / np.where(zero, 1.0, y))


def _log_at_zero_quietly(y):
    """log y, -inf at 0 without NumPy's divide-by-zero warning (xlogy itself gives none there)."""
    with np.errstate(divide="ignore"):
        return np.log(y)


_binary("xlogy", lambda g, x, y, out, sp: g * _log_at_zero_quietly(y), lambda g, x, y, out, sp: g * _safe_ratio(x, y),
        "x, y", "x·log(y), with 0 where x == 0; d/dy is 0 there.")
_binary("xlog1py", lambda g, x, y, out, sp: g * np.log1p(y),
        lambda g, x, y, out, sp: g * _safe_ratio(x, 1.0 + y), "x, y")
_binary("betaln", lambda g, a, b, out, sp: g * (sp.digamma(a) - sp.digamma(a + b)),
        lambda g, a, b, out, sp: g * (sp.digamma(b) - sp.digamma(a + b)), "a, b")
_binary("iv", _no_order_derivative("iv"), lambda g, v, z, out, sp: g * 0.5 * (sp.iv(v - 1.0, z) + sp.iv(v + 1.0, z)),
        "z", "The order v must be plain (its derivative raises).")
def _real_z(name, scale, derivative):
    """`derivative`, refused for complex z: SciPy scales by `scale`, which has no complex derivative."""
    def d(g, v, z, out, sp):
        if np.iscomplexobj(stop_gradient(z)):
            base = name[:-1]
            raise TypeError(f"scipy.special.{name} of a complex z is not differentiable: SciPy scales it by {scale}, "
                            f"which has no complex derivative. Use {base}(v, z) times that factor, written with "
                            "np.abs, np.real and np.imag (or pass real z).")
        return derivative(g, v, z, out, sp)

    return d


_binary("ive", _no_order_derivative("ive"), _real_z("ive", "exp(-|Re z|)", lambda g, v, z, out, sp: g * (
    0.5 * (sp.ive(v - 1.0, z) + sp.ive(v + 1.0, z)) - np.sign(z) * out)),
        "z", "Real z. The order v must be plain (its derivative raises).")


# --- Gamma and beta functions, Bessel functions of the first and second kind ----------------
def _rgamma_derivative(x, y, sp):
    """d/dx 1/Γ(x) = -ψ(x)/Γ(x). At x = -n, where Γ has a pole, it is taken from the reflection
    formula 1/Γ(x) = Γ(1 - x) sin(πx)/π, whose derivative Γ(1 - x) (cos(πx) - ψ(1 - x) sin(πx)/π) is
    smooth there ((-1)^n n! at the pole), so higher derivatives are right too."""
    pole = _gamma_poles(stop_gradient(x))
    if not np.any(pole):
        return -y * sp.digamma(x)
    regular = -y * sp.digamma(np.where(pole, 0.5, x))
    z = np.where(pole, x, 0.0)
    # cos(πz) and sin(πz) as (-1)^n cos(πd) and (-1)^n sin(πd), d = z + n = 0 at the pole: exact there
    sign = np.where(np.remainder(np.real(stop_gradient(z)), 2.0) == 0.0, 1.0, -1.0)
    d = z - stop_gradient(z)
    reflected = sign * sp.gamma(1.0 - z) * (np.cos(np.pi * d) - sp.digamma(1.0 - z) * np.sin(np.pi * d) / np.pi)
    return np.where(pole, reflected, regular)


def _gamma_poles(x):
    """Where the plain `x` (real or complex) is a pole of Γ: 0, -1, -2, ..."""
    real = np.real(x)
    return (np.imag(x) == 0) & (real <= 0) & (np.floor(real) == real)


_unary("rgamma", notes="1/Γ(x), also complex; at the poles of Γ (x = 0, -1, -2, ...) the derivative is (-1)^n n!.")(
    lambda g, x, y, sp: g * _rgamma_derivative(x, y, sp))
_unary("cosm1", notes="cos(x) - 1, accurate near 0.")(lambda g, x, y, sp: -g * np.sin(x))
_unary("j0")(lambda g, x, y, sp: -g * sp.j1(x))
_unary("j1")(lambda g, x, y, sp: g * 0.5 * (sp.j0(x) - sp.jv(2.0, x)))
_unary("y0")(lambda g, x, y, sp: -g * sp.y1(x))
_unary("y1")(lambda g, x, y, sp: g * 0.5 * (sp.y0(x) - sp.yv(2.0, x)))


def _bessel_order(name):
    """d/dz of a Bessel function C_v(z) with C_v' = (C_{v-1} - C_{v+1}) / 2 (J and Y)."""
    return lambda g, v, z, out, sp: g * 0.5 * (getattr(sp, name)(v - 1, z) - getattr(sp, name)(v + 1, z))


_binary("jv", _no_order_derivative("jv"), _bessel_order("jv"), "z",
        "Also reached as scipy.special.jn. The order v must be plain (its derivative raises).")
_binary("yv", _no_order_derivative("yv"), _bessel_order("yv"), "z",
        "The order v must be plain (its derivative raises).")
_binary("yn", _no_order_derivative("yn"), _truncated(_bessel_order("yn"), 0), "x",
        "The order n is an integer (SciPy truncates a float one).")
_binary("beta", lambda g, a, b, out, sp: g * out * (sp.digamma(a) - sp.digamma(a + b)),
        lambda g, a, b, out, sp: g * out * (sp.digamma(b) - sp.digamma(a + b)), "a, b")
def _dpoch_dz(z, m, out, sp):
    """d/dz poch(z, m) = poch·(ψ(z + m) - ψ(z)), 0·inf where z is a pole of Γ (z = 0, -1, ...). There,
    poch = Γ(z + m)·(1/Γ)(z) gives Γ(z + m)·(1/Γ)'(z); and where z + m is a pole too (poch is then a
    finite product of negative integers), ψ(z + m) - ψ(z) = ψ(1 - z - m) - ψ(1 - z), by reflection.
    Written with traced operations, so that it differentiates again."""
    zp, mp = stop_gradient(z), stop_gradient(m)
    pole = (zp <= 0) & (np.floor(zp) == zp)
    if not np.any(pole):
        return out * (sp.digamma(z + m) - sp.digamma(z))
    both = pole & (zp + mp <= 0) & (np.floor(zp + mp) == zp + mp)
    one = pole & ~both
    z_away, m_away = np.where(pole, 0.5, z), np.where(pole, 0.5, m)  # harmless stand-ins off each branch
    regular = out * (sp.digamma(z_away + m_away) - sp.digamma(z_away))
    z_one, m_one = np.where(one, z, 0.0), np.where(one, m, 1.0)
    # the whole derivative of Γ(z + m)·(1/Γ)(z), whose first term is 0 at the pole but not its derivative
    recip = sp.rgamma(z_one)
    at_pole = sp.gamma(z_one + m_one) * (sp.digamma(z_one + m_one) * recip + _rgamma_derivative(z_one, recip, sp))
    z_both, m_both = np.where(both, z, 0.0), np.where(both, m, 0.0)
    at_poles = out * (sp.digamma(1.0 - z_both - m_both) - sp.digamma(1.0 - z_both))
    return np.where(both, at_poles, np.where(one, at_pole, regular))


_binary("poch", lambda g, z, m, out, sp: g * _dpoch_dz(z, m, out, sp),
        lambda g, z, m, out, sp: g * out * sp.digamma(z + m), "z, m",
        "Exact where z is a pole of Γ (poch is a polynomial in z there for integer m).")


def _lambertw_slope(z, w):
    """W'(z) = W / (z (1 + W)). At z = 0, where that is 0/0, the same function written exp(-W) / (1 + W) (as
    z = W exp(W)): 1 on the principal branch, and differentiable again there. Each branch of `np.where` is fed
    harmless values where it is not taken, so that its derivative there stays finite."""
    zero = stop_gradient(z) == 0
    if not np.any(zero):
        return w / (z * (1.0 + w))
    at_zero, away = np.where(zero, w, 0.0), np.where(zero, 0.0, w)
    return np.where(zero, np.exp(-at_zero) / (1.0 + at_zero), away / (np.where(zero, 1.0, z) * (1.0 + away)))


# SciPy's lambertw(z, k, tol) calls this ufunc (complex-valued, holomorphic in z), so it works on traced values.
_nary("_ufuncs._lambertw", (lambda g, z, k, tol, w, sp: g * _lambertw_slope(z, w), None, None), "z",
      "Complex-valued, also of real z (whose gradient is real, as for other complex results). W'(z) = "
      "W / (z (1 + W)), 1 at z = 0 on the principal branch; infinite at the branch point z = -1/e (NaN where "
      "SciPy's W is, as at the float nearest -1/e). The branch k and tol carry no gradient.", row="lambertw")

# Ufuncs whose results carry no gradient (piecewise constant): name -> why. Registered with the
# other ufuncs, once SciPy is imported.
NO_GRADIENT = {
    "gammasgn": "No gradient: the sign of Γ(x) is piecewise constant.",
    "round": "No gradient: rounding to the nearest integer is piecewise constant.",
}
for _name, _why in NO_GRADIENT.items():
    describe(f"scipy.special.{_name}", "none", _why, kind="none", name=f"scipy.special.{_name}")


# --- Regularized incomplete gamma and beta functions --------------------------------------
# The derivatives in the argument x are densities, in closed form. Those in the shape
# parameters have none: they are integrals of the density times a score,
#     dP(a, x)/da = ∫_0^x (log t - ψ(a)) t^(a-1) e^(-t) / Γ(a) dt,
# computed by adaptive quadrature (scipy.integrate.quad) over whichever side of x keeps the
# score of one sign (dP/da = -∫_x^∞ ... on the other), so that nothing cancels; near an
# integrable endpoint singularity t^(a-1) the weight goes to QUADPACK's algebraic-logarithmic
# rule. Accurate to about 1e-12 relative; first derivatives only.
def _gamma_density(a, x, sp):
    """x^(a-1) e^(-x) / Γ(a): d/dx of gammainc(a, x)."""
    return np.exp(sp.xlogy(a - 1.0, x) - x - sp.gammaln(a))


def _beta_density(a, b, x, sp):
    """x^(a-1) (1-x)^(b-1) / B(a, b): d/dx of betainc(a, b, x)."""
    return np.exp(sp.xlogy(a - 1.0, x) + sp.xlog1py(b - 1.0, -x) - sp.betaln(a, b))


def _quad(f, lo, hi, **weight):
    from scipy import integrate

    return integrate.quad(f, lo, hi, epsabs=0.0, epsrel=1e-12, limit=200, **weight)[0]


def _gammainc_da(a, x):
    """d/da gammainc(a, x) for scalars, by quadrature."""
    if not (a >= 0 and x >= 0):
        return math.nan
    if x == 0 or math.isinf(x):
        return 0.0
    sp = _scipy_special()
    if a <= 1e-20:
        # (a = 0 included: SciPy's gammainc(0, x) = 1 is the limit a -> 0+, and a shape reaches 0 by underflow, as
        # in chi2.cdf(x, 5e-324), whose gammainc(df/2, x/2) has df/2 = 0: the one-sided derivative, -E1(x))
        # gammaincc(a, x) = a·Γ(a, x)/Γ(a + 1), and Γ(a, x) = E1(x) + O(a log²x): its derivative in a is
        # E1(x)(1 + O(a log²x)), under 1e-16 relative for a <= 1e-20 (|log x| <= 745). The quadrature there failed:
        # ψ(a) overflows to -inf for a < 1e-308 (nan, with warnings) and e^(-x)/Γ(a) underflows for large x (0
        # instead of -E1(100) = -3.7e-46 at a = 1e-300). Checked against mpmath (50 digits).
        return -float(sp.exp1(x))
    if x <= 0.5:
        return _gammainc_da_series(a, x, sp)
    if a >= _GAMMAINC_LARGE_A:
        return _gammainc_da_large(a, x)
    c, log_gamma = sp.digamma(a), sp.gammaln(a)

    def integrand(t):
        return (math.log(t) - c) * math.exp((a - 1.0) * math.log(t) - t - log_gamma) if t > 0 else 0.0

    if math.log(x) > c:  # the score log t - ψ(a) is positive on all of (x, ∞)
        # t = x + u, the density scaled by its value at x (its largest on [x, ∞), as x > a - 1 here): QUADPACK
        # never sees numbers near the underflow threshold (at a = 1e-15, x = 700 it warned and lost 1e-2 relative)
        log_scale = (a - 1.0) * math.log(x) - x - log_gamma
        inner = _quad(lambda u: (math.log(x + u) - c) * math.exp((a - 1.0) * math.log1p(u / x) - u), 0.0, math.inf)
        return -math.exp(log_scale + math.log(inner)) if inner > 0 else -0.0
    if a < 2:  # t^(a-1) log t at 0: the weighted rule integrates it exactly
        weighted = _quad(lambda t: math.exp(-t - log_gamma), 0.0, x, weight="alg-loga", wvar=(a - 1.0, 0.0))
        return weighted - c * sp.gammainc(a, x)
    return _quad(integrand, 0.0, x)


_GAMMAINC_LARGE_A = 1e4


def _gammainc_da_large(a, x):
    """d/da gammainc(a, x) for a >= 1e4: the integral of (log t - ψ(a)) t^(a-1) e^(-t)/Γ(a) over t < x in the
    variable w, t = a + √a w, with the log of the density written as
        -a(μ - log1p(μ)) - log1p(μ) - log(2π)/2 - stirlerr(a),  μ = w/√a,
    (a(μ - log1p(μ)) = w²(1/2 - μ/3 + μ²/4 - ...) by its series for small μ) and log t - ψ(a) as
    log1p(μ) + (log a - ψ(a)) by its asymptotic series. The plain quadrature in t lost everything there: its
    exponent (a - 1) log t - t - log Γ(a) cancels to about 1e-16·a log a absolute (0 instead of -4e-6 at a = 1e10,
    x = a, and IntegrationWarnings from a = 1e6 on). Integrated, as there, on the side of x where the score keeps
    its sign, scaled by the density at x (its largest on that side)."""
    sqa, inv_a = math.sqrt(a), 1.0 / a
    inv_a2 = inv_a * inv_a  # (not 1/(a·a): a·a overflows, and np.vectorize reports the flag as a RuntimeWarning)
    stirlerr = (1.0 / 12.0 - (1.0 / 360.0 - inv_a2 / 1260.0) * inv_a2) * inv_a
    log_a_minus_psi = (0.5 + (1.0 / 12.0 - inv_a2 / 120.0) * inv_a) * inv_a

    def log_g(w, t):  # log of the density in w, at t = a + √a w
        mu = w / sqa
        log1p_mu = math.log1p(mu) if mu > -0.5 else math.log(t / a)  # t/a, not 1 + μ, for t << a
        if abs(mu) < 0.1:
            series, power = 0.0, 1.0
            for k in range(2, 20):
                series += power / k
                power *= -mu
            a_phi = w * w * series
        else:
            a_phi = a * (mu - log1p_mu)
        return -a_phi - log1p_mu - 0.5 * math.log(2.0 * math.pi) - stirlerr

    def score(w):
        return math.log1p(w / sqa) + log_a_minus_psi

    z = (x - a) / sqa
    log_g0 = log_g(z, x)
    if log_g0 < -800.0:  # the derivative underflows
        return 0.0

    def integrand(w):
        if w <= -sqa:
            return 0.0
        log_ratio = log_g(w, a + sqa * w) - log_g0
        return score(w) * math.exp(log_ratio) if log_ratio > -746.0 else 0.0

    if score(z) >= 0.0:  # positive on [z, ∞)
        inner = -_quad(integrand, z, math.inf)
    else:
        inner = _quad(integrand, -math.inf, z)
    if inner == 0.0:
        return 0.0
    return math.copysign(math.exp(log_g0 + math.log(abs(inner))), inner)


def _gammainc_da_series(a, x, sp):
    """d/da gammainc(a, x) for x <= 1/2 by the series gammainc(a, x) = x^a T/Γ(a + 1), T = 1 + a Σ_{n>=1} (-x)^n/(n!(a + n)):
        d/da gammainc = gammainc · (log x - ψ(a + 1) + T'/T),  T' = Σ_{n>=1} (-x)^n n/(n!(a + n)²).
    The three terms are negative for x <= 1/2 (no cancellation), and the series converge fast. The quadrature it
    replaces lost all digits at tiny x (-37.19 for -690.2 at a = 1e-10, x = 1e-300, with an IntegrationWarning)."""
    s = ds = 0.0
    term = 1.0  # (-x)^n/n!
    for n in range(1, 60):
        term *= -x / n
        s += term / (a + n)
        ds += term * n / ((a + n) * (a + n))
        if abs(term) < 1e-18 * n:
            break
    t_ratio = ds / (1.0 + a * s)
    return float(sp.gammainc(a, x)) * (math.log(x) - float(sp.digamma(a + 1.0)) + t_ratio)


def _betainc_dshape(a, b, x, second):
    """d/da (or d/db when `second`) betainc(a, b, x) for scalars, by quadrature."""
    if not (a > 0 and b > 0 and 0 <= x <= 1):
        return math.nan
    if x == 0 or x == 1:
        return 0.0
    sp = _scipy_special()
    log_beta = sp.betaln(a, b)
    if second:
        c = sp.digamma(b) - sp.digamma(a + b)
        score, left = (lambda t: math.log1p(-t) - c), math.log1p(-x) >= c
    else:
        c = sp.digamma(a) - sp.digamma(a + b)
        score, left = (lambda t: math.log(t) - c), math.log(x) <= c
    if left and a < 2:  # singular weight t^(a-1) at 0
        rest = lambda t: math.exp((b - 1.0) * math.log1p(-t) - log_beta)  # noqa: E731
        if not second:
            return _quad(rest, 0.0, x, weight="alg-loga", wvar=(a - 1.0, 0.0)) - c * sp.betainc(a, b, x)
        return _quad(lambda t: score(t) * rest(t), 0.0, x, weight="alg", wvar=(a - 1.0, 0.0))
    if not left and b < 2:  # singular weight (1-t)^(b-1) at 1
        rest = lambda t: math.exp((a - 1.0) * math.log(t) - log_beta)  # noqa: E731
        if second:
            return c * sp.betaincc(a, b, x) - _quad(rest, x, 1.0, weight="alg-logb", wvar=(0.0, b - 1.0))
        return -_quad(lambda t: score(t) * rest(t), x, 1.0, weight="alg", wvar=(0.0, b - 1.0))

    def integrand(t):
        if t <= 0 or t >= 1:
            return 0.0
        return score(t) * math.exp((a - 1.0) * math.log(t) + (b - 1.0) * math.log1p(-t) - log_beta)

    return _quad(integrand, 0.0, x) if left else -_quad(integrand, x, 1.0)


# ψ(a + 1/2) - ψ(a) - 1/(2a) ~ Σ_k d_k a^(-2k) for large a (the Stirling series of log Γ(a + 1/2) - log Γ(a)); the
# coefficients are exact, and these 11 terms reach 1e-17 relative from a = 10 on, where the difference of digammas
# loses more and more digits (ψ(a) ~ log a against 1/(8a²)).
_HALF_STEP = (1 / 8, -1 / 64, 1 / 128, -17 / 2048, 31 / 2048, -691 / 16384, 5461 / 32768, -929569 / 1048576,
              3202291 / 524288, -221930581 / 4194304, 4722116521 / 8388608)
_HALF_STEP_LOG = tuple(-d / (2 * k + 1) for k, d in enumerate(_HALF_STEP))  # those of lgamma_half_step(a)·a
_LOG1P_SERIES = tuple(-1.0 / k for k in range(2, 16))  # log(1 - u) + u = u² Σ_k c_k u^k, to 1e-19 for u < 0.05
_LOG1P_RATIO = tuple(1.0 / (k + 1) for k in range(14))  # log1p(z)/z = Σ_k (-z)^k / (k + 1), to 1e-19 for z < 0.05
_SERIES_RATIO = math.sqrt(0.05)  # |t|/√df below which z = t²/df < 0.05


def lgamma_half_step(a):
    """log Γ(a + 1/2) - log Γ(a) - log(a)/2 for a > 0 (about -1/(8a) for large a), written with traced operations:
    from a = 10 on by its asymptotic series, so that its derivatives ψ(a + 1/2) - ψ(a) - 1/(2a), ... keep their
    digits for large a."""
    sp = _scipy_special()
    big = stop_gradient(a) >= 10.0
    if np.all(big):
        return _polynomial(_HALF_STEP_LOG, 1.0 / (a * a)) / a
    small, large = np.where(big, 1.0, a), np.where(big, a, 10.0)
    direct = sp.gammaln(small + 0.5) - sp.gammaln(small) - 0.5 * np.log(small)
    return np.where(big, _polynomial(_HALF_STEP_LOG, 1.0 / (large * large)) / large, direct)


def student_log_kernel(t, df):
    """(df + 1)/2 · log1p(z), z = t²/df, written with traced operations, in three forms whose derivatives (first
    and second, in t, in df and mixed) keep their digits:
    - z < 0.05: log1p(z)/2 + (t²/2)·log1p(z)/z with the series of log1p(z)/z: the derivative in df,
      (log1p(z) - z/(1 + z))/2 - z/(2df(1 + z)), would otherwise cancel;
    - z > 1: (df + 1)/2 · (2 log|t| - log df + log1p(w)), w = df/t², with w as (df/t)/t: the derivatives of
      log1p(t²/df) go through 1/(1 + z)² and t²/df², which overflow or underflow for |t| ≳ 1e77 (at t = 1e150
      d²/(dt d(df)) came out as +1e-149 instead of -1e-150, and nan where t² overflows);
    - between them, directly.
    Which form applies is decided on |t|/√df, which does not overflow."""
    def series(t):
        z = t * t / df
        return 0.5 * np.log1p(z) + 0.5 * t * t * _polynomial(_LOG1P_RATIO, -z)

    def direct(t):
        return 0.5 * (df + 1.0) * np.log1p(t * t / df)

    def far(t):
        return 0.5 * (df + 1.0) * (2.0 * np.log(np.abs(t)) - np.log(df) + np.log1p(df / t / t))

    plain_df = stop_gradient(df)
    with np.errstate(invalid="ignore", divide="ignore"):  # an invalid df (< 0, nan) falls in no branch: nan below
        ratio = np.abs(stop_gradient(t)) / np.sqrt(plain_df)
    small, large = ratio < _SERIES_RATIO, ratio > 1.0
    if np.all(small):
        return series(t)
    if np.all(large):
        return far(t)
    middle = ~(small | large)
    if np.all(middle):
        return direct(t)
    one = np.sqrt(np.where(plain_df > 0, plain_df, 1.0))  # where z = 1, a harmless point for each form
    return np.where(small, series(np.where(small, t, 0.0)),
                    np.where(large, far(np.where(large, t, 2.0 * one)), direct(np.where(middle, t, one))))


def _digamma_half_step(a):
    """ψ(a + 1/2) - ψ(a) - 1/(2a) for a scalar a > 0: the derivative of `lgamma_half_step`."""
    if a >= 10.0:
        return _polynomial(_HALF_STEP, 1.0 / (a * a)) / (a * a)
    sp = _scipy_special()
    return float(sp.digamma(a + 0.5) - sp.digamma(a)) - 0.5 / a


_TINY_DF = 1e-20  # below it, `_stdtr_ddf_tiny`: its neglected terms are O(df log²x), under 1e-16 relative
_HUGE_DF = 1e170  # above it the derivative, about f(t)(1 + 2t² - t⁴)/(4df²), is below 1e-320: 0


def _stdtr_ddf_tiny(df, t):
    """d/d(df) stdtr(df, t) for 0 < df <= 1e-20, in closed form (the quadrature there would integrate a tail of
    length 1/df, and ψ(df/2) or 1/df overflow for df < 1e-308). With a = df/2 and x = df/(df + t²),
        stdtr(df, -|t|) = I_x(a, 1/2)/2 = x^a Γ(a + 1/2)/(Γ(a + 1)Γ(1/2)) · ₂F₁(a, 1/2; a + 1; x)/2,
    and ₂F₁ = 1 + a·2 log(2/(1 + √(1-x))) + O(a²), so that to first order in a (x depending on a)
        d/d(df) stdtr(df, -|t|) = (s - 2 atanh(s))/4,  s = √(1 - x) = |t|/√(df + t²),
    written as (s - 2 log1p(s) + log x)/4 for s >= 1/2 (no cancellation either way). The value is finite (about
    log(df)/4) and representable down to df = 5e-324; checked against mpmath (50 digits) to 1e-16 relative."""
    log_r = math.log(abs(t)) - 0.5 * math.log(df)  # r = |t|/√df, which can overflow
    if log_r > 0.0:
        inv_r2 = math.exp(-2.0 * log_r)
        s, log_x = 1.0 / math.sqrt(1.0 + inv_r2), -(2.0 * log_r + math.log1p(inv_r2))
    else:
        r2 = math.exp(2.0 * log_r)
        s, log_x = math.sqrt(r2 / (1.0 + r2)), -math.log1p(r2)
    lower = 0.25 * (s - 2.0 * math.atanh(s) if s < 0.5 else s - 2.0 * math.log1p(s) + log_x)
    return lower if t < 0 else -lower


def _stdtr_ddf(df, t):
    """d/d(df) stdtr(df, t) for scalars, by quadrature: the integral of ∂f/∂df = f·S over s <= -|t| (by symmetry,
    the derivative at |t| is minus that at -|t|), where f is the density and
        S = (ψ(df/2 + 1/2) - ψ(df/2) - 1/df)/2 + u/(2df) + (u + log(1 - u))/2,  u = s²/(df + s²).
    Each term is computed without cancellation (`_digamma_half_step`, and u + log(1 - u) by its series for small u),
    so S keeps its digits for large df, where it is about (1 + 2s² - s⁴)/(4df²). S > 0 for |s| below some s0 > 1 and
    S < 0 beyond: where S(-|t|) > 0 the integral is taken as minus that over [-|t|, 0] (stdtr(df, 0) = 1/2 for every
    df), so that the integrand keeps one sign. The variable is v, s = -|t| e^v, in which the heavy tails of small df
    (f ~ |s|^-(df+1)) decay exponentially."""
    if not (df > 0) or math.isnan(t):
        return math.nan
    if t == 0 or math.isinf(t) or math.isinf(df):
        return 0.0
    if df <= _TINY_DF:
        return _stdtr_ddf_tiny(df, t)
    if df >= _HUGE_DF:  # |derivative| <= about 1/df² (see above): it underflows to 0
        return 0.0
    d = _digamma_half_step(0.5 * df)
    log_c = float(lgamma_half_step(0.5 * df)) - 0.5 * math.log(2.0 * math.pi)  # f(s) = c (1 + s²/df)^(-(df+1)/2)
    log_t = math.log(abs(t))

    def log_f_and_score(v):  # at s = -|t| e^v: log(f(s) |ds/dv|), and S(s)
        log_z = 2.0 * (v + log_t) - math.log(df)  # z = s²/df
        if log_z > 700.0:  # log1p(z) = log z, u = 1
            log1p_z, u = log_z, 1.0
        else:
            z = math.exp(log_z)
            log1p_z, u = math.log1p(z), z / (1.0 + z)
        u_log = u * u * _polynomial(_LOG1P_SERIES, u) if u < 0.05 else u - log1p_z  # u + log(1 - u)
        return log_c - 0.5 * (df + 1.0) * log1p_z + v + log_t, 0.5 * (d + u / df + u_log)

    # the integrand is largest at v = 0 (|s| f(s) peaks at |s| = 1, and the interval lies on the far side of |t|
    # from it): scaled by its value there, so that QUADPACK never works with numbers near the underflow threshold
    # (at |t| = 1e-300 or 1e300 it would, raising overflow flags that np.vectorize reports as RuntimeWarnings)
    log_f0, score0 = log_f_and_score(0.0)
    if log_f0 < -800.0:  # the derivative underflows (QUADPACK, given a spike of width 1/df, would warn for nothing)
        return 0.0

    def integrand(v):
        log_f, score = log_f_and_score(v)
        return math.exp(log_f - log_f0) * score if log_f - log_f0 > -746.0 else 0.0

    lower = _quad(integrand, 0.0, math.inf) if score0 <= 0.0 else -_quad(integrand, -math.inf, 0.0)
    lower = lower * math.exp(log_f0)
    return lower if t < 0 else -lower


def _by_quadrature(name, argument, scalar_fn, *values):
    """`scalar_fn` elementwise over the broadcast plain `values` (a first derivative by quadrature)."""
    if any(isinstance(v, Traced) for v in values):
        raise NotImplementedError(
            f"scipy.special.{name}: the derivative with respect to {argument} is computed by numerical quadrature "
            "and cannot itself be differentiated (no second derivatives in that argument). Differentiate once, "
            "or pass that argument through pb.stop_gradient.")
    return scipy_call(elementwise_of_scalars, scalar_fn, *values)


def elementwise_of_scalars(scalar_fn, *values):
    """`scalar_fn` over the broadcast arrays `values`, as float64 (one recorded call inside `pb.jit`)."""
    return np.vectorize(scalar_fn, otypes=[np.float64])(*values)


_SHAPE_NOTE = ("The derivatives in the shape parameters have no closed form: they are computed by "
               "numerical quadrature (about 1e-12 relative) and are first derivatives only.")

_binary("gammainc", lambda g, a, x, out, sp: g * _by_quadrature("gammainc", "a", _gammainc_da, a, x),
        lambda g, a, x, out, sp: g * _gamma_density(a, x, sp), "a, x", _SHAPE_NOTE)
_binary("gammaincc", lambda g, a, x, out, sp: -g * _by_quadrature("gammaincc", "a", _gammainc_da, a, x),
        lambda g, a, x, out, sp: -g * _gamma_density(a, x, sp), "a, x", _SHAPE_NOTE)


def _d_betainc(name, sign):
    return (
        lambda g, a, b, x, out, sp: sign * g * _by_quadrature(
            name, "a", lambda a, b, x: _betainc_dshape(a, b, x, False), a, b, x),
        lambda g, a, b, x, out, sp: sign * g * _by_quadrature(
            name, "b", lambda a, b, x: _betainc_dshape(a, b, x, True), a, b, x),
        lambda g, a, b, x, out, sp: sign * g * _beta_density(a, b, x, sp),
    )


_nary("betainc", _d_betainc("betainc", 1.0), "a, b, x", _SHAPE_NOTE)
_nary("betaincc", _d_betainc("betaincc", -1.0), "a, b, x", _SHAPE_NOTE)


def _student_density(df, t, sp):
    """d/dt stdtr(df, t): Student's t density (the normal density where df is infinite)."""
    plain = stop_gradient(df)
    finite = (plain > 0) & (plain < np.inf)
    if np.all(finite):
        return np.exp(lgamma_half_step(0.5 * df) - student_log_kernel(t, df)) / SQRT_2PI  # no digits lost for large df
    # an invalid df (SciPy's value is nan: so is the derivative, without the warnings of log(df < 0)), or df = inf
    density = np.exp(lgamma_half_step(0.5 * np.where(finite, df, 1.0)) - student_log_kernel(t, np.where(finite, df, 1.0)))
    central = np.abs(stop_gradient(t)) < 40.0  # the normal density underflows beyond (and t² overflows past 1e154)
    t_normal = np.where(central, t, 40.0)
    normal = np.where(central, np.exp(-0.5 * t_normal * t_normal), 0.0)
    return np.where(finite, density / SQRT_2PI, np.where(plain == np.inf, normal / SQRT_2PI, t * np.nan))


_binary("stdtr", lambda g, df, t, out, sp: g * _by_quadrature("stdtr", "df", _stdtr_ddf, df, t),
        lambda g, df, t, out, sp: g * _student_density(df, t, sp), "df, t",
        "Student's t distribution function. " + _SHAPE_NOTE.replace("shape parameters", "degrees of freedom df"))


# --- More of scipy.special's ufuncs ---------------------------------------------------------
# Formulas: DLMF (dlmf.nist.gov) and the defining relations of each function. Arguments that
# are orders, degrees or counts are plain: their partial derivative raises (`_plain`), or is
# None where the function is piecewise constant in them (it floors them).
DEG = math.pi / 180.0


def _plain(name, what):
    def refuse(g, *inputs):
        raise NotImplementedError(f"scipy.special.{name}: the derivative with respect to {what} is not available; "
                                  f"pass {what} as a plain number (pb.stop_gradient).")

    return refuse


def _split(x, close, near, far, safe=0.5, inside=0.0):
    """near(x) where the plain mask `close` holds, far(x) elsewhere. Each branch sees a harmless stand-in at
    the other's points (`inside` for near, `safe` for far), so neither divides by zero nor poisons the derivative."""
    if not np.any(close):
        return far(x)
    if np.all(close):
        return near(x)
    return np.where(close, near(np.where(close, x, inside)), far(np.where(close, safe, x)))


# 20-point Gauss–Legendre on [0, 1]. The integrands below are analytic in a wide strip around the
# interval, so it is exact to rounding; written with traced operations, it differentiates again.
_GAUSS_NODES, _GAUSS_WEIGHTS = np.polynomial.legendre.leggauss(20)
_GAUSS_NODES, _GAUSS_WEIGHTS = 0.5 * (_GAUSS_NODES + 1.0), 0.5 * _GAUSS_WEIGHTS


def _gauss(integrand, upper, pieces=1):
    """∫_0^upper integrand(t) dt, by the 20-point rule on `pieces` equal pieces; `integrand` gets t with a
    trailing axis of nodes."""
    nodes = (np.arange(pieces)[:, None] + _GAUSS_NODES).ravel() / pieces
    weights = np.tile(_GAUSS_WEIGHTS, pieces) / pieces
    return np.sum(weights * integrand(np.expand_dims(upper, -1) * nodes), axis=-1) * upper


def _polynomial(coefficients, u):
    """Σ_k coefficients[k] u^k, by Horner's rule."""
    total = coefficients[-1]
    for c in coefficients[-2::-1]:
        total = total * u + c
    return total


def _exprel_prime(u):
    """d/du (e^u - 1)/u = ((u - 1) e^u + 1)/u², by its Taylor series near 0 (where that cancels)."""
    small = np.abs(stop_gradient(u)) < 1e-2
    safe = np.where(small, 1.0, u)
    closed = ((safe - 1.0) * np.exp(safe) + 1.0) / (safe * safe)
    series = 0.5 + u * (1.0 / 3.0 + u * (1.0 / 8.0 + u * (1.0 / 30.0 + u / 144.0)))
    return np.where(small, series, closed)


_unary("expm1")(lambda g, x, y, sp: g * np.exp(x))  # not y + 1, which cancels for x < 0
_unary("log1p")(lambda g, x, y, sp: g / (1.0 + x))
_unary("exp2")(lambda g, x, y, sp: g * y * math.log(2.0))
_unary("exp10")(lambda g, x, y, sp: g * y * math.log(10.0))
_unary("cbrt", notes="The derivative is infinite at 0.")(lambda g, x, y, sp: g / (3.0 * y * y))
_unary("sindg", notes="Argument in degrees.")(lambda g, x, y, sp: g * sp.cosdg(x) * DEG)
_unary("cosdg", notes="Argument in degrees.")(lambda g, x, y, sp: -g * sp.sindg(x) * DEG)
_unary("tandg", notes="Argument in degrees.")(lambda g, x, y, sp: g * (1.0 + y * y) * DEG)
_unary("cotdg", notes="Argument in degrees.")(lambda g, x, y, sp: -g * (1.0 + y * y) * DEG)
_unary("dawsn")(lambda g, x, y, sp: g * (1.0 - 2.0 * x * y))
_unary("erfi")(lambda g, x, y, sp: g * (2.0 / SQRT_PI) * np.exp(x * x))
_unary("exp1", notes="Real x > 0.")(lambda g, x, y, sp: -g * np.exp(-x) / x)
_unary("expi")(lambda g, x, y, sp: g * np.exp(x) / x)
_unary("entr", notes="-x·log(x); the derivative -log(x) - 1 is +inf at 0.")(lambda g, x, y, sp: -g * (np.log(x) + 1.0))
_unary("exprel", notes="(e^x - 1)/x; its derivative by a series near 0.")(lambda g, x, y, sp: g * _exprel_prime(x))
_unary("loggamma", notes="Real x > 0 (complex arguments are not supported).")(lambda g, x, y, sp: g * sp.digamma(x))
_unary("ndtri_exp", notes="ndtri(exp(y)), stable for very negative y.")(
    lambda g, x, y, sp: g * SQRT_2PI * np.exp(x + 0.5 * y * y))
_unary("k0")(lambda g, x, y, sp: -g * sp.k1(x))
_unary("k1")(lambda g, x, y, sp: -g * 0.5 * (sp.k0(x) + sp.kv(2.0, x)))
_unary("k0e")(lambda g, x, y, sp: g * (y - sp.k1e(x)))
_unary("k1e")(lambda g, x, y, sp: g * (y - 0.5 * (sp.k0e(x) + sp.kve(2.0, x))))
_unary("wrightomega", notes="Real x.")(lambda g, x, y, sp: g * y / (1.0 + y))


def _dspence(z):
    """d/dz spence(z) = log(z)/(1 - z) = -∫_0^1 dt / (1 + t(z - 1)), by quadrature near z = 1 (where the
    quotient cancels)."""
    return _split(z, np.abs(stop_gradient(z) - 1.0) <= 0.5,
                  lambda z: -_gauss(lambda t: 1.0 / (1.0 + np.expand_dims(z - 1.0, -1) * t), 1.0),
                  lambda z: np.log(z) / (1.0 - z), safe=2.0, inside=1.0)  # log z, not log((z - 1) + 1)


_unary("spence", notes="Real z ≥ 0; the derivative log(z)/(1 - z) is -1 at z = 1.")(lambda g, x, y, sp: g * _dspence(x))


# The closed forms of the elliptic integrals' m-derivatives cancel near m = 0 (their numerators vanish
# with m), and near φ = jπ (with sin φ). There they are the integrals differentiated under the integral sign,
#     ∂F(φ|m)/∂m = ½ ∫_0^φ sin²θ (1 - m sin²θ)^(-3/2) dθ,   ∂E(φ|m)/∂m = -½ ∫_0^φ sin²θ (1 - m sin²θ)^(-1/2) dθ
# (K and E: φ = π/2), by quadrature where the integrand is smooth on the interval: exact to rounding at
# every order, m = 0 included.
def _small(m):
    return np.abs(stop_gradient(m)) <= 0.5


def _sin2_integral(phi, m, power):
    """∫_0^φ sin²θ (1 - m sin²θ)^power dθ, by quadrature."""
    return _gauss(lambda t: np.sin(t) ** 2 * (1.0 - np.expand_dims(m, -1) * np.sin(t) ** 2) ** power, phi)


def _dellipk(m, sp):
    """dK/dm = (E - (1 - m) K) / (2 m (1 - m))."""
    return _split(m, _small(m), lambda m: 0.5 * _sin2_integral(np.pi / 2, m, -1.5),
                  lambda m: (sp.ellipe(m) - (1.0 - m) * sp.ellipk(m)) / (2.0 * m * (1.0 - m)))


def _dellipe(m, sp):
    """dE/dm = (E - K) / (2m)."""
    return _split(m, _small(m), lambda m: -0.5 * _sin2_integral(np.pi / 2, m, -0.5),
                  lambda m: (sp.ellipe(m) - sp.ellipk(m)) / (2.0 * m))


def _dellipkm1(p, y, sp):
    """d/dp K(1 - p) = -(E(1 - p) - p K(1 - p)) / (2 (1 - p) p)."""
    return _split(p, _small(1.0 - stop_gradient(p)), lambda p: -0.5 * _sin2_integral(np.pi / 2, 1.0 - p, -1.5),
                  lambda p: -(_ellipe_complement(p) - p * y) / (2.0 * (1.0 - p) * p), safe=0.25, inside=1.0)


@primitive
def _ellipe_complement(p):
    """E(1 - p), differentiated in p itself: E's own derivative at m = 1 - p would read K(m), and m
    rounds to 1 for p < 1e-16 (K(1) = inf), keeping few digits of p well before that."""
    return _scipy_special().ellipe(1.0 - p)


def _d_ellipe_complement(p):
    """d/dp E(1 - p) = (K(1 - p) - E(1 - p)) / (2 (1 - p)), with K(1 - p) = ellipkm1(p); -dE/dm's
    quadrature where 1 - p is small."""
    sp = _scipy_special()
    return _split(p, _small(1.0 - stop_gradient(p)), lambda p: -_dellipe(1.0 - p, sp),
                  lambda p: (sp.ellipkm1(p) - _ellipe_complement(p)) / (2.0 * (1.0 - p)), safe=0.25, inside=1.0)


@rrule(_ellipe_complement)
def _ellipe_complement_rule(p):
    return _ellipe_complement(p), lambda g: (g * _d_ellipe_complement(p),)


@frule(_ellipe_complement)
def _ellipe_complement_frule(primals, tangents):
    (p,), (t,) = primals, tangents
    return _ellipe_complement(p), None if t is None else t * _d_ellipe_complement(p)


def _smooth_on(r, m):
    """Whether (1 - m sin²θ)^power is analytic inside the Bernstein ellipse ρ = 3 of [0, |r|], so that the
    20-point rule is exact to rounding (3^-40 ≈ 1e-19): its nearest singularity is θ = arcsin(1/√m)."""
    half = np.abs(stop_gradient(r)) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        w = (np.arcsin(1.0 / np.sqrt(stop_gradient(m) + 0j)) - half) / half
        root = np.sqrt(w - 1.0) * np.sqrt(w + 1.0)
        return ~(np.maximum(np.abs(w + root), np.abs(w - root)) < 3.0)  # NaN (m = 0 or r = 0): smooth


def _sinh_integral(r, m, power):
    """∫_0^r sin²θ (1 - m sin²θ)^power dθ for |r| ≤ π/2, as ∫_0^U sinh²u cosh^(-3-2·power)u (1 + (1 - m)
    sinh²u)^power du with θ = arctan(sinh u), U = arcsinh(tan r). For m near 1 the θ-integrand has a spike
    at π/2; the u-integrand has its singularities π/2 off the real axis (m ≤ 1), so pieces of length ≤ 2
    make the 20-point rule exact to rounding (Bernstein ρ ≥ 3.4)."""
    upper = np.arcsinh(np.tan(r))
    pieces = max(1, math.ceil(float(np.max(np.abs(stop_gradient(upper)), initial=0.0)) / 2.0))
    eps = np.expand_dims(1.0 - m, -1)
    return _gauss(lambda u: np.sinh(u) ** 2 * np.cosh(u) ** (-3.0 - 2.0 * power) * (1.0 + eps * np.sinh(u) ** 2) ** power,
                  upper, pieces)


def _sinh_fits(r, m):
    """Where `_sinh_integral` is exact: 1/2 < m ≤ 1, or m > 1 with its real singularity arcsinh(1/√(m - 1))
    outside the Bernstein ellipse ρ = 3 of the last piece."""
    m = stop_gradient(m)
    upper = np.abs(np.arcsinh(np.tan(stop_gradient(r))))
    half = np.maximum(upper, 1e-300) / (2.0 * max(1, math.ceil(float(np.max(upper, initial=0.0)) / 2.0)))
    with np.errstate(divide="ignore", invalid="ignore"):
        w = (np.arcsinh(1.0 / np.sqrt(m - 1.0)) - (upper - half)) / half
        return (m > 0.5) & ((m <= 1.0) | (w >= 5.0 / 3.0))


def _incomplete_dm(phi, m, power, complete, formula, sp):
    """∂/∂m of F(φ|m) (power -3/2, `complete` dK/dm) or E(φ|m) (power -1/2, dE/dm) with φ = jπ + r, |r| ≤ π/2:
    where the integrand is smooth on [0, r], the quadrature plus 2j times `complete(m)`; where m is near 1
    (the closed form cancels there, as 1/(1 - m) terms), the same after θ = arctan(sinh u); else `formula(m)`."""
    turns = np.round(stop_gradient(phi) / np.pi)
    r = phi - np.pi * turns
    close = _small(m) | _smooth_on(r, m)
    half = 0.5 if power == -1.5 else -0.5

    def integral(rule):
        def near(m):
            value = half * rule(r, m, power)
            if not np.any(turns):
                return value
            # `complete` only where φ wraps: it is infinite at m = 1, where F(r|1) is not
            return value + 2.0 * turns * _split(m, turns != 0, lambda m: complete(m, sp), lambda m: 0.0 * m)

        return near

    return _split(m, close, integral(_sin2_integral),
                  lambda m: _split(m, _sinh_fits(r, m) & ~close, integral(_sinh_integral), formula))


_unary("ellipk", args="m", notes="Parameter m < 1.")(lambda g, m, y, sp: g * _dellipk(m, sp))
_unary("ellipkm1", args="p", notes="K(1 - p), accurate for small p > 0.")(lambda g, p, y, sp: g * _dellipkm1(p, y, sp))
_unary("ellipe", args="m", notes="Parameter m ≤ 1; -π/8 at m = 0.")(lambda g, m, y, sp: g * _dellipe(m, sp))

# Kelvin functions: ber + i·bei solves x² w'' + x w' - i x² w = 0 (and ker + i·kei too).
_unary("ber")(lambda g, x, y, sp: g * sp.berp(x))
_unary("bei")(lambda g, x, y, sp: g * sp.beip(x))
_unary("ker", notes="x > 0.")(lambda g, x, y, sp: g * sp.kerp(x))
_unary("kei", notes="x > 0.")(lambda g, x, y, sp: g * sp.keip(x))
# berp(x)/x and beip(x)/x as power series in t = x²/4 near 0, where the quotients are 0/0
# (ber = Σ (-1)^j t^(2j) / (2j)!², bei = Σ (-1)^j t^(2j+1) / (2j+1)!²)
_BERP_OVER_X = [0.0 if k % 2 == 0 else (-1) ** ((k + 1) // 2) * ((k + 1) // 2) / math.factorial(k + 1) ** 2
                for k in range(18)]
_BEIP_OVER_X = [0.0 if k % 2 else (-1) ** (k // 2) * (k + 1) / (2.0 * math.factorial(k + 1) ** 2) for k in range(18)]


def _kelvin_over_x(x, y, series):
    return _split(x, np.abs(stop_gradient(x)) < 2.0, lambda x: _polynomial(series, 0.25 * x * x), lambda x: y / x)


_unary("berp")(lambda g, x, y, sp: g * (-_kelvin_over_x(x, y, _BERP_OVER_X) - sp.bei(x)))
_unary("beip")(lambda g, x, y, sp: g * (-_kelvin_over_x(x, y, _BEIP_OVER_X) + sp.ber(x)))
_unary("kerp", notes="x > 0.")(lambda g, x, y, sp: g * (-y / x - sp.kei(x)))
_unary("keip", notes="x > 0.")(lambda g, x, y, sp: g * (-y / x + sp.ker(x)))


def _order_binary(name, d_second, arg="z", what="the order v", notes=""):
    _binary(name, _plain(name, what), d_second, arg, (notes + f" {what[0].upper() + what[1:]} must be plain.").strip())


def _bessel_k(name):
    return lambda g, v, z, out, sp: -g * 0.5 * (getattr(sp, name)(v - 1, z) + getattr(sp, name)(v + 1, z))


_order_binary("kv", _bessel_k("kv"))
_order_binary("kn", _truncated(_bessel_k("kn"), 0), "x", "the order n", "SciPy truncates a float order n.")
_order_binary("kve", lambda g, v, z, out, sp: g * (out - 0.5 * (sp.kve(v - 1, z) + sp.kve(v + 1, z))))
_order_binary("jve", _real_z("jve", "exp(-|Im z|)", _bessel_order("jve")), notes="Real z (where it equals jv).")
_order_binary("yve", _real_z("yve", "exp(-|Im z|)", _bessel_order("yve")), notes="Real z (where it equals yv).")
# DLMF 11.4.24 and 11.4.26, which do not divide by x (the functions are smooth at 0)
def _struve_term(v, x):
    return (x / 2.0) ** v * _scipy_special().rgamma(v + 1.5) / (2.0 * SQRT_PI)  # 1/Γ is 0 at Γ's poles


_order_binary("struve", lambda g, v, x, out, sp: g * (
    0.5 * (sp.struve(v - 1.0, x) - sp.struve(v + 1.0, x)) + _struve_term(v, x)), "x")
_order_binary("modstruve", lambda g, v, x, out, sp: g * (
    0.5 * (sp.modstruve(v - 1.0, x) + sp.modstruve(v + 1.0, x)) + _struve_term(v, x)), "x")
_order_binary("expn", _truncated(lambda g, n, x, out, sp: -g * np.where(
    n == 0, np.exp(-x) * (x + 1.0) / (x * x), sp.expn(np.maximum(n - 1, 0), x)), 0), "x", "the order n",
    "SciPy truncates a float order n.")
_order_binary("hyp0f1", lambda g, v, z, out, sp: g * sp.hyp0f1(v + 1.0, z) / v, "z", "v")
_nary("hyp1f1", (_plain("hyp1f1", "a"), _plain("hyp1f1", "b"),
                 lambda g, a, b, x, out, sp: g * a / b * sp.hyp1f1(a + 1.0, b + 1.0, x)), "x", "a and b must be plain.")
_nary("hyperu", (_plain("hyperu", "a"), _plain("hyperu", "b"),
                 lambda g, a, b, x, out, sp: -g * a * sp.hyperu(a + 1.0, b + 1.0, x)), "x", "a and b must be plain.")
_nary("hyp2f1", (_plain("hyp2f1", "a"), _plain("hyp2f1", "b"), _plain("hyp2f1", "c"),
                 lambda g, a, b, c, z, out, sp: g * a * b / c * sp.hyp2f1(a + 1.0, b + 1.0, c + 1.0, z)), "z",
      "a, b and c must be plain.")
_nary("wright_bessel", (_plain("wright_bessel", "a"), _plain("wright_bessel", "b"),
                        lambda g, a, b, x, out, sp: g * sp.wright_bessel(a, a + b, x)), "x", "a and b must be plain.")
_nary("log_wright_bessel", (_plain("log_wright_bessel", "a"), _plain("log_wright_bessel", "b"),
                            lambda g, a, b, x, out, sp: g * np.exp(sp.log_wright_bessel(a, a + b, x) - out)), "x",
      "a and b must be plain.")

_binary("kl_div", lambda g, x, y, out, sp: g * _log_ratio(x, y), lambda g, x, y, out, sp: g * (1.0 - x / y), "x, y")
_binary("rel_entr", lambda g, x, y, out, sp: g * (_log_ratio(x, y) + 1.0), lambda g, x, y, out, sp: -g * _safe_ratio(x, y),
        "x, y", "d/dy is 0 where x == 0.")
_binary("huber", lambda g, d, r, out, sp: g * np.where(np.abs(r) <= d, 0.0, np.abs(r) - d),
        lambda g, d, r, out, sp: g * np.where(np.abs(r) <= d, r, d * np.sign(r)), "delta, r")


def _pseudo_huber_root(d, r):
    return np.sqrt(1.0 + (r / d) ** 2)


_binary("pseudo_huber", lambda g, d, r, out, sp: g * (2.0 * d * (_pseudo_huber_root(d, r) - 1.0)
                                                      - r * r / (d * _pseudo_huber_root(d, r))),
        lambda g, d, r, out, sp: g * r / _pseudo_huber_root(d, r), "delta, r")
_binary("powm1", lambda g, x, y, out, sp: g * y * np.power(x, y - 1.0), lambda g, x, y, out, sp: g * (out + 1.0) * np.log(x),
        "x, y", "x^y - 1, for x > 0.")
_binary("boxcox", lambda g, x, lm, out, sp: g * np.power(x, lm - 1.0),
        lambda g, x, lm, out, sp: g * np.log(x) ** 2 * _exprel_prime(lm * np.log(x)), "x, lmbda",
        "The derivative in lmbda is taken by a series near lmbda·log(x) = 0, so it is accurate there.")
_binary("boxcox1p", lambda g, x, lm, out, sp: g * np.power(1.0 + x, lm - 1.0),
        lambda g, x, lm, out, sp: g * np.log1p(x) ** 2 * _exprel_prime(lm * np.log1p(x)), "x, lmbda")


def _inverse_boxcox(log_of):
    def d_y(g, y, lm, x, sp):
        return g * np.power(x if log_of is np.log else 1.0 + x, 1.0 - lm)

    def d_lmbda(g, y, lm, x, sp):
        t = log_of(x)
        return -g * t * t * _exprel_prime(lm * t) * np.exp((1.0 - lm) * t)

    return d_y, d_lmbda


_binary("inv_boxcox", *_inverse_boxcox(np.log), "y, lmbda")
_binary("inv_boxcox1p", *_inverse_boxcox(np.log1p), "y, lmbda")
_binary("owens_t", lambda g, h, a, out, sp: -g * np.exp(-0.5 * h * h) / SQRT_2PI * 0.5 * sp.erf(a * h / math.sqrt(2.0)),
        lambda g, h, a, out, sp: g * np.exp(-0.5 * h * h * (1.0 + a * a)) / (2.0 * math.pi * (1.0 + a * a)), "h, a")
_binary("binom", lambda g, n, k, out, sp: g * out * (sp.digamma(n + 1.0) - sp.digamma(n - k + 1.0)),
        lambda g, n, k, out, sp: g * out * (sp.digamma(n - k + 1.0) - sp.digamma(k + 1.0)), "n, k",
        "Through Γ(n+1)/(Γ(k+1)Γ(n-k+1)): the derivatives are NaN where a Γ has a pole (negative integers).")
_nary("radian", tuple(lambda g, d, m, s, out, sp, c=c: g * c for c in (DEG, DEG / 60.0, DEG / 3600.0)), "d, m, s")


def _agm_partials(x, sp):
    """(f(x), f'(x)) for f(x) = agm(1, x) = π / (2 K(1 - x²)), 0 < x ≤ 1. For x < 1/2, K(1 - p) with p = x²
    itself (1 - m would keep few digits of it), and below 1e-100 (where x² underflows) K = log(4/x), exact
    to rounding there."""
    def moderate(x):
        m = 1.0 - x * x
        k = sp.ellipk(m)
        return math.pi / (2.0 * k), math.pi * x * _dellipk(m, sp) / (k * k)

    def small(x):
        k = sp.ellipkm1(x * x)
        return math.pi / (2.0 * k), -math.pi * x * _dellipkm1(x * x, k, sp) / (k * k)

    def tiny(x):
        log = np.log(4.0 / x)
        return math.pi / (2.0 * log), math.pi / (2.0 * x * log * log)

    plain = stop_gradient(x)
    parts = [lambda x, i=i: _split(x, plain < 1e-100, lambda x: tiny(x)[i], lambda x: small(x)[i], safe=0.25, inside=1e-101)
             for i in (0, 1)]
    return tuple(_split(x, plain < 0.5, parts[i], lambda x, i=i: moderate(x)[i], safe=0.75, inside=0.25) for i in (0, 1))


def _agm_d(first):
    def d(g, a, b, out, sp):
        # agm(a, b) = big·f(small/big) (homogeneous of degree 1, symmetric), with the ratio x ≤ 1
        b_smaller = stop_gradient(b) <= stop_gradient(a)
        x = np.where(b_smaller, b / a, a / b)
        f, df = _agm_partials(x, sp)
        of_big, of_small = f - x * df, df
        return g * (np.where(b_smaller, of_big, of_small) if first else np.where(b_smaller, of_small, of_big))

    return d


_binary("agm", _agm_d(True), _agm_d(False), "a, b", "Positive a and b.")


def _dellipkinc_dm(phi, m, sp):
    """∂F(φ|m)/∂m."""
    def formula(m):
        delta = np.sqrt(1.0 - m * np.sin(phi) ** 2)
        return ((sp.ellipeinc(phi, m) - (1.0 - m) * sp.ellipkinc(phi, m)) / (2.0 * m * (1.0 - m))
                - np.sin(2.0 * phi) / (4.0 * (1.0 - m) * delta))

    return _incomplete_dm(phi, m, -1.5, _dellipk, formula, sp)


_binary("ellipkinc", lambda g, phi, m, out, sp: g / np.sqrt(1.0 - m * np.sin(phi) ** 2),
        lambda g, phi, m, out, sp: g * _dellipkinc_dm(phi, m, sp), "phi, m")
_binary("ellipeinc", lambda g, phi, m, out, sp: g * np.sqrt(1.0 - m * np.sin(phi) ** 2),
        lambda g, phi, m, out, sp: g * _incomplete_dm(
            phi, m, -0.5, _dellipe, lambda m: (out - sp.ellipkinc(phi, m)) / (2.0 * m), sp), "phi, m")
# Carlson's symmetric integrals: ∂R_F(x, y, z)/∂z = -R_D(x, y, z)/6, and R_C(x, y) = R_F(x, y, y).
# R_D is infinite where its last argument is 0: a direction that does not move that argument gets 0 (not 0·inf).
_nary("elliprf", (lambda g, x, y, z, out, sp: _zero_safe_product(g, _elliprd(y, z, x) / -6.0),
                  lambda g, x, y, z, out, sp: _zero_safe_product(g, _elliprd(x, z, y) / -6.0),
                  lambda g, x, y, z, out, sp: _zero_safe_product(g, _elliprd(x, y, z) / -6.0)), "x, y, z",
      "Real arguments; higher derivatives by quadrature of Carlson-type integrals (about 1e-14 relative).")
_binary("elliprc", lambda g, x, y, out, sp: _zero_safe_product(g, _elliprd(y, y, x) / -6.0),
        lambda g, x, y, out, sp: _zero_safe_product(g, _elliprd(x, y, y) / -3.0), "x, y",
        "Real arguments with y > 0; higher derivatives by quadrature of Carlson-type integrals (about 1e-14 relative).")


def _elliprd(x, y, z):
    """R_D = (3/2) ∫ (t+x)^-1/2 (t+y)^-1/2 (t+z)^-3/2 dt: SciPy's elliprd of plain arguments (first derivatives
    of elliprf and elliprc); of traced ones (a second derivative), the quadrature, which differentiates again."""
    if any(isinstance(v, Traced) for v in (x, y, z)):
        return 1.5 * _carlson_integral((x, y, z), (0.5, 0.5, 1.5))
    return _scipy_special().elliprd(x, y, z)


def _carlson_integral(xs, powers):
    """∫_0^∞ Π (t + x_i)^-b_i dt for x_i ≥ 0 (Σ b_i > 1), by Gauss–Legendre in s = √t: on [0, s_0], on pieces
    from s_0 = √(least positive x_i)/2 to S = 2√(largest x_i), each at most twice the last, and on [S, ∞) in
    u = 1/s. No singularity comes near a piece, so each is exact to rounding; written with traced operations
    (the pieces from plain values), it differentiates again. Infinite where an x_i = 0 has b_i ≥ 1, and its
    slope in an x_i = 0 is infinite (the integral's in x_i diverges)."""
    plain = np.broadcast_arrays(*(np.asarray(stop_gradient(x), dtype=float) for x in xs))
    largest = np.max(plain, axis=0)
    least = np.min([np.where(x > 0, x, np.inf) for x in plain], axis=0)
    s0, s_end = 0.5 * np.sqrt(np.where(np.isfinite(least), least, 1.0)), 2.0 * np.sqrt(np.where(largest > 0, largest, 1.0))
    pieces = int(np.max(np.ceil(np.log2(np.maximum(s_end / s0, 2.0))), initial=1.0))
    ratio = (s_end / s0) ** (1.0 / pieces)

    def in_s(s):
        out = 2.0 * s
        for x, b in zip(xs, powers):
            out = out * (s * s + np.expand_dims(x, -1)) ** -b
        return out

    def in_u(u):
        out = 2.0 * u ** (2.0 * sum(powers) - 3.0)
        for x, b in zip(xs, powers):
            out = out * (1.0 + np.expand_dims(x, -1) * u * u) ** -b
        return out

    total = _gauss(in_s, s0) + _gauss(in_u, 1.0 / s_end)
    for k in range(pieces):
        start = s0 * ratio ** k
        total = total + _gauss(lambda s, start=start: in_s(np.expand_dims(start, -1) + s), start * (ratio - 1.0))
    for x, at in zip(xs, plain):  # at x_i = 0 the slope in x_i is infinite: -√x_i adds it, and 0 to the value
        if np.any(at == 0):
            total = total + _root_edge(np.where(at == 0, x, 0.0), at == 0, 0)
    divergent = np.any([(x == 0) & (b >= 1) for x, b in zip(plain, powers)], axis=0)
    if np.any(divergent):  # infinite there, and so are its derivatives
        total = _zero_safe_product(total, np.where(divergent, np.inf, 1.0))
    return total


# -√x at x = 0 and its derivatives, with 0·inf = 0: a direction (tangent or cotangent) that does not move x gives 0.
# Through np.sqrt the derivative was g/(2√x): 0/0 = nan, with a RuntimeWarning, for every zero tangent (the other
# arguments' directions of a Hessian: R_F(0, y, z)'s second derivatives in y and z came out nan, not finite).
@primitive
def _zero_safe_product(a, b):
    """a·b, 0 where either is 0 (even where the other is infinite)."""
    with np.errstate(invalid="ignore"):  # 0·inf, replaced
        return np.where((a == 0) | (b == 0), 0.0, a * b)


@rrule(_zero_safe_product)
def _zero_safe_product_rule(a, b):
    return _zero_safe_product(a, b), lambda g: (_zero_safe_product(g, b), _zero_safe_product(g, a))


@frule(_zero_safe_product)
def _zero_safe_product_frule(primals, tangents):
    (a, b), (ta, tb) = primals, tangents
    return _zero_safe_product(a, b), add_tangents(None if ta is None else _zero_safe_product(ta, b),
                                                  None if tb is None else _zero_safe_product(a, tb))


@primitive
def _root_edge(x, at, k):
    """The k-th derivative of -√x where the plain mask `at` holds (x = 0 there): 0, -inf, +inf, -inf, ...; 0
    elsewhere."""
    shape = np.broadcast_shapes(np.shape(stop_gradient(x)), np.shape(at))
    return np.zeros(shape) if k == 0 else np.where(at, (-1.0) ** k * np.inf, 0.0) * np.ones(shape)


@rrule(_root_edge)
def _root_edge_rule(x, at, k):
    return _root_edge(x, at, k), lambda g: (_zero_safe_product(g, _root_edge(x, at, k + 1)), None, None)


@frule(_root_edge)
def _root_edge_frule(primals, tangents):
    (x, at, k), (t, _, _) = primals, tangents
    return _root_edge(x, at, k), None if t is None else _zero_safe_product(t, _root_edge(x, at, k + 1))


def _tukey_lambda_quantile_dlmbda(p, lm):
    """∂Q/∂λ for Q(p) = (p^λ - (1-p)^λ)/λ = log p·exprel(λ log p) - log(1-p)·exprel(λ log(1-p))."""
    lp, lq = np.log(p), np.log1p(-p)
    return lp * lp * _exprel_prime(lm * lp) - lq * lq * _exprel_prime(lm * lq)


def _tukey_lambda_density(p, lm):
    """1/Q'(p), Q'(p) = p^(λ-1) + (1-p)^(λ-1): the density at the quantile Q(p)."""
    return 1.0 / (np.power(p, lm - 1.0) + np.power(1.0 - p, lm - 1.0))


def _inside_support(p, derivative):
    """derivative(p) where the cdf p is strictly between 0 and 1; 0 outside the support, where the cdf is the
    constant 0 or 1 (the formulas, at p = 0 or 1, would give a density or a NaN there)."""
    plain = stop_gradient(p)
    return _split(p, (plain == 0) | (plain == 1), lambda p: 0.0 * p, derivative)


_binary("tklmbda", lambda g, x, lm, p, sp: g * _inside_support(p, lambda p: _tukey_lambda_density(p, lm)),
        lambda g, x, lm, p, sp: -g * _inside_support(
            p, lambda p: _tukey_lambda_quantile_dlmbda(p, lm) * _tukey_lambda_density(p, lm)), "x, lmbda",
        "The derivatives come from the quantile function inside the support (0 < cdf < 1), and are 0 outside it.")

# Riemann and Hurwitz zeta: SciPy's zeta(x, q=None) calls these two ufuncs, so it works on traced values.
_nary("_ufuncs._riemann_zeta", (lambda g, x, out, sp: g * _by_quadrature("zeta", "x", _zeta_ds, x, 1.0),),
      "x", "ζ(x); ∂/∂x by an Euler–Maclaurin sum (and the reflection formula for x < 1/2), about 1e-13 "
      "relative; first derivatives only.", row="zeta")
_nary("_ufuncs._zeta", (lambda g, x, q, out, sp: g * _by_quadrature("zeta", "x", _zeta_ds, x, q),
                        lambda g, x, q, out, sp: -g * x * sp.zeta(x + 1.0, q)), "x, q",
      "Hurwitz ζ(x, q), reached through zeta(x, q). ∂/∂q = -x ζ(x + 1, q); ∂/∂x by an Euler–Maclaurin "
      "sum (about 1e-13 relative), first derivatives only.", row="zeta(x, q)")

_nary("zetac", (lambda g, x, out, sp: g * _by_quadrature("zetac", "x", _zeta_ds, x, 1.0),), "x",
      "ζ(x) - 1; ∂/∂x as zeta's, first derivatives only.")
_unary("itstruve0", notes="∫_0^x H_0(t) dt.")(lambda g, x, y, sp: g * sp.struve(0.0, x))
_unary("it2struve0", notes="∫_x^∞ H_0(t)/t dt, x > 0.")(lambda g, x, y, sp: -g * sp.struve(0.0, x) / x)
_unary("itmodstruve0", notes="∫_0^x L_0(t) dt.")(lambda g, x, y, sp: g * sp.modstruve(0.0, x))

# Associated Legendre P_v^m(x), |x| < 1: (x² - 1) dP/dx = v x P_v^m - (v + m) P_{v-1}^m (DLMF 14.10.5)
_nary("lpmv", (_plain("lpmv", "the order m"), _plain("lpmv", "the degree v"),
               lambda g, m, v, x, out, sp: g * (v * x * out - (v + m) * sp.lpmv(m, v - 1.0, x)) / (x * x - 1.0)),
      "x", "|x| < 1; the order m and degree v must be plain.")


def _voigt_partials(x, sigma, gamma):
    """(∂V/∂x, ∂V/∂sigma, ∂V/∂gamma) of the Voigt profile V = Re w(z) / (σ√(2π)), z = (x + iγ)/(σ√2),
    with w' = -2 z w + 2i/√π (w: the Faddeeva function); plain values, first derivatives only."""
    sp = _scipy_special()
    z = (x + 1j * gamma) / (sigma * math.sqrt(2.0))
    w = sp.wofz(z)
    dw = -2.0 * z * w + 2j / SQRT_PI
    scale = 1.0 / (sigma * SQRT_2PI)
    dz = 1.0 / (sigma * math.sqrt(2.0))
    value = np.real(w) * scale
    return (np.real(dw) * dz * scale, -value / sigma - np.real(z * dw) * scale / sigma,
            np.real(1j * dw) * dz * scale)


def _voigt(k):
    def d(g, x, sigma, gamma, out, sp):
        if any(isinstance(v, Traced) for v in (x, sigma, gamma)):
            raise NotImplementedError("scipy.special.voigt_profile: its derivatives go through the complex Faddeeva "
                                      "function and cannot themselves be differentiated (first derivatives only).")
        return g * _voigt_partials(x, sigma, gamma)[k]

    return d


_nary("voigt_profile", tuple(_voigt(k) for k in range(3)), "x, sigma, gamma",
      "Through the Faddeeva function w (computed by scipy.special.wofz): first derivatives only.")

# Kolmogorov–Smirnov. K'(y) is summed here, with traced operations, so that it differentiates again (SciPy's
# _kolmogp is off by up to 2e-8 relative near y = 0.83); smirnov's derivative is SciPy's _smirnovp, refused below.
def _kolmogorov_slope(y):
    """K'(y) for K = scipy.special.kolmogorov: for y ≥ 0.8 from K = 2 Σ (-1)^(j-1) exp(-2j²y²), below from
    K = 1 - √(2π)/y Σ exp(-a_j/y²), a_j = (2j-1)²π²/8, whose terms fall fast there; 0 for y ≤ 0 (K = 1)."""
    def large(y):  # terms of Python numbers: y may be any library's array
        return -8.0 * sum((-1.0) ** (j - 1) * (j * j) * y * np.exp(-2.0 * (j * j) * y * y) for j in range(1, 13))

    def small(y):
        terms = (np.exp(-a / (y * y) - 4.0 * np.log(y)) * (2.0 * a - y * y)
                 for a in ((2 * j - 1) ** 2 * (math.pi ** 2 / 8.0) for j in range(1, 6)))
        return -SQRT_2PI * sum(terms)

    plain = stop_gradient(y)
    return _split(y, plain <= 0, lambda y: 0.0 * y,
                  lambda y: _split(y, plain < 0.8, small, large, safe=1.0, inside=0.5), safe=0.5)


_unary("kolmogorov", args="y", notes="The survival function of the Kolmogorov distribution.")(
    lambda g, y, out, sp: g * _kolmogorov_slope(y))
_unary("kolmogi", args="p", notes="The inverse of kolmogorov.")(lambda g, p, y, sp: g / _kolmogorov_slope(y))


def _smirnovp(n, d):
    """∂smirnov/∂d, by SciPy's _smirnovp, which has no derivative here: refused for traced arguments, by the names
    the user called."""
    if any(isinstance(v, Traced) for v in (n, d)):
        raise NotImplementedError("scipy.special.smirnov and smirnovi are differentiable once: their derivative is "
                                  "SciPy's _smirnovp, which has none here, so second derivatives (hessian, a gradient "
                                  "of a gradient) are not available. Use finite differences of pb.gradient.")
    return _scipy_special()._ufuncs._smirnovp(n, d)


_binary("smirnov", None, lambda g, n, d, out, sp: g * _smirnovp(n, d), "d",
        "The one-sided Kolmogorov–Smirnov survival function; n is an integer; first derivatives only.")
_binary("smirnovi", None, lambda g, n, p, d, sp: g / _smirnovp(n, d), "p",
        "The inverse of smirnov; n is an integer; first derivatives only.")

# besselpoly(a, λ, ν) = ∫_0^1 x^λ J_ν(2 a x) dx; J_ν' = (J_{ν-1} - J_{ν+1}) / 2
_nary("besselpoly", (lambda g, a, lm, nu, out, sp: g * (sp.besselpoly(a, lm + 1.0, nu - 1.0)
                                                        - sp.besselpoly(a, lm + 1.0, nu + 1.0)),
                     _plain("besselpoly", "lmb"), _plain("besselpoly", "nu")), "a", "lmb and nu must be plain.")


# Noncentral chi-square: ∂F/∂x is the density, ∂F/∂nc = (F(x; df + 2, nc) - F(x; df, nc)) / 2; df has no closed form.
def _noncentral_chi2_density(x, df, nc, sp):
    """0.5 e^(-(x + nc)/2) (x/nc)^(df/4 - 1/2) I_(df/2 - 1)(√(nc x)), and the central density at nc = 0."""
    zero = stop_gradient(nc) == 0
    safe = np.where(zero, 1.0, nc)
    root = np.sqrt(safe * x)
    noncentral = 0.5 * np.exp(-0.5 * (x + safe) + root) * (x / safe) ** (0.25 * df - 0.5) * sp.ive(0.5 * df - 1.0, root)
    return np.where(zero, 0.5 * _gamma_density(0.5 * df, 0.5 * x, sp), noncentral) if np.any(zero) else noncentral


def _chndtr_dnc(x, df, nc, out, sp):
    return 0.5 * (sp.chndtr(x, df + 2.0, nc) - out)


_nary("chndtr", (lambda g, x, df, nc, out, sp: g * _noncentral_chi2_density(x, df, nc, sp), _plain("chndtr", "df"),
                 lambda g, x, df, nc, out, sp: g * _chndtr_dnc(x, df, nc, out, sp)), "x, nc",
      "df must be plain (its derivative has no closed form).")
_nary("chndtrix", (lambda g, p, df, nc, x, sp: g / _noncentral_chi2_density(x, df, nc, sp), _plain("chndtrix", "df"),
                   lambda g, p, df, nc, x, sp: -g * _chndtr_dnc(x, df, nc, p, sp) / _noncentral_chi2_density(x, df, nc, sp)),
      "p, nc", "The inverse of chndtr in x; df must be plain.")
_nary("chndtrinc", (lambda g, x, df, p, nc, sp: -g * _noncentral_chi2_density(x, df, nc, sp) / _chndtr_dnc(x, df, nc, p, sp),
                    _plain("chndtrinc", "df"), lambda g, x, df, p, nc, sp: g / _chndtr_dnc(x, df, nc, p, sp)), "x, p",
      "The inverse of chndtr in nc; df must be plain.")


def _zeta_ds(s, q):
    """∂ζ(s, q)/∂s for scalars s > 1 (or q > 0 and any s ≠ 1 for the Riemann case q = 1), by Euler–Maclaurin:
    ζ(s, q) = Σ_{n<N} (n+q)^-s + (N+q)^(1-s)/(s-1) + (N+q)^-s/2 + Σ_k B_2k/(2k)! (s)_(2k-1) (N+q)^(-s-2k+1) + R."""
    if math.isnan(s) or math.isnan(q) or s == 1 or q <= 0:
        return math.nan
    if s < 1 and q != 1:
        return math.nan
    if q == 1 and s == 0:
        return -0.5 * math.log(2.0 * math.pi)
    if q == 1 and s < 0.5:  # the reflection ζ(s) = A(s) ζ(1 - s), A(s) = 2^s π^(s-1) sin(πs/2) Γ(1-s): no cancellation
        sp = _scipy_special()
        scale = 2.0 ** s * math.pi ** (s - 1.0) * math.gamma(1.0 - s)
        a, da = scale * math.sin(0.5 * math.pi * s), scale * (
            math.sin(0.5 * math.pi * s) * (math.log(2.0 * math.pi) - sp.digamma(1.0 - s)) + 0.5 * math.pi * math.cos(0.5 * math.pi * s))
        return da * sp.zeta(1.0 - s) - a * _zeta_ds(1.0 - s, 1.0)
    n_terms = 40
    a = n_terms + q
    la = math.log(a)
    total = -sum(math.log(n + q) * (n + q) ** -s for n in range(n_terms))
    # d/ds of a^(1-s)/(s-1)
    total += -la * a ** (1.0 - s) / (s - 1.0) - a ** (1.0 - s) / (s - 1.0) ** 2
    total += -0.5 * la * a ** -s
    bernoulli = (1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6, -3617.0 / 510)
    rising, d_rising = 1.0, 0.0  # (s)_(2k-1) and its s-derivative
    for k, b in enumerate(bernoulli, start=1):
        for j in ((0,) if k == 1 else (2 * k - 3, 2 * k - 2)):
            d_rising = d_rising * (s + j) + rising
            rising *= s + j
        c = b / math.factorial(2 * k)
        power = a ** (-s - 2 * k + 1)
        total += c * (d_rising * power - rising * la * power)
    return total


# Distribution functions and their inverses, through the incomplete gamma and beta functions:
# derivatives in the argument are densities; in shape parameters, quadrature (first order only);
# the inverse x(θ, y) of y = F(θ, x) has ∂x/∂y = 1/F_x and ∂x/∂θ = -F_θ/F_x.
def _da_gammainc(name, what, a, x):
    return _by_quadrature(name, what, _gammainc_da, a, x)


def _db_betainc(name, what, a, b, x, second):
    return _by_quadrature(name, what, lambda a, b, x: _betainc_dshape(a, b, x, second), a, b, x)


_binary("gammaincinv", lambda g, a, y, x, sp: -g * _da_gammainc("gammaincinv", "a", a, x) / _gamma_density(a, x, sp),
        lambda g, a, y, x, sp: g / _gamma_density(a, x, sp), "a, y", _SHAPE_NOTE)
_binary("gammainccinv", lambda g, a, y, x, sp: -g * _da_gammainc("gammainccinv", "a", a, x) / _gamma_density(a, x, sp),
        lambda g, a, y, x, sp: -g / _gamma_density(a, x, sp), "a, y", _SHAPE_NOTE)


def _d_betaincinv(name, sign):
    return (lambda g, a, b, y, x, sp: -g * _db_betainc(name, "a", a, b, x, False) / _beta_density(a, b, x, sp),
            lambda g, a, b, y, x, sp: -g * _db_betainc(name, "b", a, b, x, True) / _beta_density(a, b, x, sp),
            lambda g, a, b, y, x, sp: sign * g / _beta_density(a, b, x, sp))


_nary("betaincinv", _d_betaincinv("betaincinv", 1.0), "a, b, y", _SHAPE_NOTE)
_nary("betainccinv", _d_betaincinv("betainccinv", -1.0), "a, b, y", _SHAPE_NOTE)

# chi-square: chdtr(v, x) = gammainc(v/2, x/2)
_binary("chdtr", lambda g, v, x, out, sp: 0.5 * g * _da_gammainc("chdtr", "v", 0.5 * v, 0.5 * x),
        lambda g, v, x, out, sp: 0.5 * g * _gamma_density(0.5 * v, 0.5 * x, sp), "v, x", _SHAPE_NOTE)
_binary("chdtrc", lambda g, v, x, out, sp: -0.5 * g * _da_gammainc("chdtrc", "v", 0.5 * v, 0.5 * x),
        lambda g, v, x, out, sp: -0.5 * g * _gamma_density(0.5 * v, 0.5 * x, sp), "v, x", _SHAPE_NOTE)
_binary("chdtri", lambda g, v, p, x, sp: -g * _da_gammainc("chdtri", "v", 0.5 * v, 0.5 * x)
        / _gamma_density(0.5 * v, 0.5 * x, sp),
        lambda g, v, p, x, sp: -2.0 * g / _gamma_density(0.5 * v, 0.5 * x, sp), "v, p",
        "The inverse of chdtrc in x. " + _SHAPE_NOTE)
# Poisson: pdtr(k, m) = gammaincc(floor(k) + 1, m); k carries no gradient
_COUNT_NOTE = "Counts (k, n) are floored by SciPy: piecewise constant, no gradient."
_binary("pdtr", None, lambda g, k, m, out, sp: -g * _gamma_density(np.floor(k) + 1.0, m, sp), "m", _COUNT_NOTE)
_binary("pdtrc", None, lambda g, k, m, out, sp: g * _gamma_density(np.floor(k) + 1.0, m, sp), "m", _COUNT_NOTE)
_binary("pdtri", None, lambda g, k, y, m, sp: -g / _gamma_density(np.floor(k) + 1.0, m, sp), "y",
        "The inverse of pdtr in m. " + _COUNT_NOTE)


# binomial: bdtr(k, n, p) = betainc(n - k, k + 1, 1 - p) with k floored
def _binomial_density(k, n, p, sp):
    k = np.floor(k)
    return _beta_density(k + 1.0, n - k, p, sp)


_nary("bdtr", (None, None, _truncated(lambda g, k, n, p, out, sp: -g * _binomial_density(k, n, p, sp), 1)), "p",
      _COUNT_NOTE)
_nary("bdtrc", (None, None, _truncated(lambda g, k, n, p, out, sp: g * _binomial_density(k, n, p, sp), 1)), "p",
      _COUNT_NOTE)
_nary("bdtri", (None, None, _truncated(lambda g, k, n, y, p, sp: -g / _binomial_density(k, n, p, sp), 1)), "y",
      "The inverse of bdtr in p. " + _COUNT_NOTE)
# negative binomial: nbdtr(k, n, p) = betainc(n, k + 1, p)
_nary("nbdtr", (None, None, _truncated(lambda g, k, n, p, out, sp: g * _beta_density(n, k + 1.0, p, sp), 0, 1)),
      "p", _COUNT_NOTE)
_nary("nbdtrc", (None, None, _truncated(lambda g, k, n, p, out, sp: -g * _beta_density(n, k + 1.0, p, sp), 0, 1)),
      "p", _COUNT_NOTE)
_nary("nbdtri", (None, None, _truncated(lambda g, k, n, y, p, sp: g / _beta_density(n, k + 1.0, p, sp), 0, 1)), "y",
      "The inverse of nbdtr in p. " + _COUNT_NOTE)


# F: fdtr(dfn, dfd, x) = betainc(dfn/2, dfd/2, w), w = dfn·x / (dfd + dfn·x)
def _f_partials(name, dfn, dfd, x, sp):
    """(∂F/∂dfn, ∂F/∂dfd, ∂F/∂x) of fdtr, each a thunk."""
    s = dfd + dfn * x
    w = dfn * x / s
    a, b = 0.5 * dfn, 0.5 * dfd
    density = lambda: _beta_density(a, b, w, sp)  # noqa: E731
    return (lambda: 0.5 * _db_betainc(name, "dfn", a, b, w, False) + density() * x * dfd / (s * s),
            lambda: 0.5 * _db_betainc(name, "dfd", a, b, w, True) - density() * dfn * x / (s * s),
            lambda: density() * dfn * dfd / (s * s))


def _f_rule(name, sign):
    return tuple(lambda g, dfn, dfd, x, out, sp, j=j: sign * g * _f_partials(name, dfn, dfd, x, sp)[j]()
                 for j in range(3))


_nary("fdtr", _f_rule("fdtr", 1.0), "dfn, dfd, x", _SHAPE_NOTE.replace("shape parameters", "degrees of freedom"))
_nary("fdtrc", _f_rule("fdtrc", -1.0), "dfn, dfd, x", _SHAPE_NOTE.replace("shape parameters", "degrees of freedom"))
_nary("fdtri", tuple(
    (lambda g, dfn, dfd, p, x, sp, j=j: -g * _f_partials("fdtri", dfn, dfd, x, sp)[j]()
     / _f_partials("fdtri", dfn, dfd, x, sp)[2]()) for j in range(2))
      + (lambda g, dfn, dfd, p, x, sp: g / _f_partials("fdtri", dfn, dfd, x, sp)[2](),), "dfn, dfd, p",
      "The inverse of fdtr in x. " + _SHAPE_NOTE.replace("shape parameters", "degrees of freedom"))


# gamma: gdtr(a, b, x) = gammainc(b, a·x), a the rate
def _g_rule(name, sign):
    return (lambda g, a, b, x, out, sp: sign * g * x * _gamma_density(b, a * x, sp),
            lambda g, a, b, x, out, sp: sign * g * _da_gammainc(name, "b", b, a * x),
            lambda g, a, b, x, out, sp: sign * g * a * _gamma_density(b, a * x, sp))


_nary("gdtr", _g_rule("gdtr", 1.0), "a, b, x", _SHAPE_NOTE)
_nary("gdtrc", _g_rule("gdtrc", -1.0), "a, b, x", _SHAPE_NOTE)
_nary("gdtrix", (lambda g, a, b, p, x, sp: -g * x / a,
                 lambda g, a, b, p, x, sp: -g * _da_gammainc("gdtrix", "b", b, a * x) / (a * _gamma_density(b, a * x, sp)),
                 lambda g, a, b, p, x, sp: g / (a * _gamma_density(b, a * x, sp))), "a, b, p",
      "The inverse of gdtr in x. " + _SHAPE_NOTE)
_binary("stdtrit", lambda g, df, p, t, sp: -g * _by_quadrature("stdtrit", "df", _stdtr_ddf, df, t)
        / _student_density(df, t, sp),
        lambda g, df, p, t, sp: g / _student_density(df, t, sp), "df, p",
        "The inverse of stdtr in t. " + _SHAPE_NOTE.replace("shape parameters", "degrees of freedom df"))
# normal: nrdtrimn(p, std, x) = x - std·ndtri(p); nrdtrisd(mn, p, x) = (x - mn)/ndtri(p)
_nary("nrdtrimn", (lambda g, p, sd, x, out, sp: -g * sd * SQRT_2PI * np.exp(0.5 * sp.ndtri(p) ** 2),
                   lambda g, p, sd, x, out, sp: -g * sp.ndtri(p),
                   lambda g, p, sd, x, out, sp: g * np.ones_like(stop_gradient(out))), "p, std, x")
_nary("nrdtrisd", (lambda g, mn, p, x, out, sp: -g / sp.ndtri(p),
                   lambda g, mn, p, x, out, sp: -g * out / sp.ndtri(p) * SQRT_2PI * np.exp(0.5 * sp.ndtri(p) ** 2),
                   lambda g, mn, p, x, out, sp: g / sp.ndtri(p)), "mn, p, x")


# Inverses in a shape parameter: θ_s(y, ...) solving F(..., θ_s, ...) = y, with ∂θ_s/∂y = 1/F_s and
# ∂θ_s/∂θ_j = -F_j/F_s, where F's partials are those above (by quadrature in shape parameters).
def _implicit(name, inputs, solved, partials, notes):
    """Register the inverse `name`, whose inputs are `inputs` ("y" or the index of F's argument), solving for F's
    argument `solved`; `partials[j](args, sp)` is ∂F/∂(argument j) at F's arguments `args`."""
    def forward_args(values, out):
        args = {j: v for j, v in zip(inputs, values) if j != "y"}
        args[solved] = out
        return tuple(args[j] for j in range(len(partials)))

    def partial(position):
        def d(g, *values_and_rest):
            *values, out, sp = values_and_rest
            args = forward_args(values, out)
            f_s = partials[solved](args, sp)
            if inputs[position] == "y":
                return g / f_s
            return -g * partials[inputs[position]](args, sp) / f_s

        return d

    _nary(name, tuple(partial(k) for k in range(len(inputs))), ", ".join(
        "y" if j == "y" else f"arg{j}" for j in inputs), notes)


def _quadrature_note(inverse_of):
    return f"The inverse of {inverse_of}. " + _SHAPE_NOTE


_CHI2 = (lambda a, sp: 0.5 * _da_gammainc("chdtriv", "v", 0.5 * a[0], 0.5 * a[1]),
         lambda a, sp: 0.5 * _gamma_density(0.5 * a[0], 0.5 * a[1], sp))
_GAMMA = (lambda a, sp: a[2] * _gamma_density(a[1], a[0] * a[2], sp),
          lambda a, sp: _da_gammainc("gdtri*", "b", a[1], a[0] * a[2]),
          lambda a, sp: a[0] * _gamma_density(a[1], a[0] * a[2], sp))
_BETA = (lambda a, sp: _db_betainc("btdtri*", "a", a[0], a[1], a[2], False),
         lambda a, sp: _db_betainc("btdtri*", "b", a[0], a[1], a[2], True),
         lambda a, sp: _beta_density(a[0], a[1], a[2], sp))
_STUDENT = (lambda a, sp: _by_quadrature("stdtridf", "df", _stdtr_ddf, a[0], a[1]),
            lambda a, sp: _student_density(a[0], a[1], sp))
# Poisson with a real count: pdtr(k, m) = gammaincc(k + 1, m)
_POISSON = (lambda a, sp: -_da_gammainc("pdtrik", "k", a[0] + 1.0, a[1]),
            lambda a, sp: -_gamma_density(a[0] + 1.0, a[1], sp))
# binomial with a real count: bdtr(k, n, p) = betainc(n - k, k + 1, 1 - p)
_BINOMIAL = (lambda a, sp: (_db_betainc("bdtri*", "k", a[1] - a[0], a[0] + 1.0, 1.0 - a[2], True)
                            - _db_betainc("bdtri*", "k", a[1] - a[0], a[0] + 1.0, 1.0 - a[2], False)),
             lambda a, sp: _db_betainc("bdtri*", "n", a[1] - a[0], a[0] + 1.0, 1.0 - a[2], False),
             lambda a, sp: -_beta_density(a[1] - a[0], a[0] + 1.0, 1.0 - a[2], sp))
# negative binomial with a real count: nbdtr(k, n, p) = betainc(n, k + 1, p)
_NEGATIVE_BINOMIAL = (lambda a, sp: _db_betainc("nbdtri*", "k", a[1], a[0] + 1.0, a[2], True),
                      lambda a, sp: _db_betainc("nbdtri*", "n", a[1], a[0] + 1.0, a[2], False),
                      lambda a, sp: _beta_density(a[1], a[0] + 1.0, a[2], sp))
_F = tuple((lambda a, sp, j=j: _f_partials("fdtridfd", a[0], a[1], a[2], sp)[j]()) for j in range(3))

_implicit("chdtriv", ("y", 1), 0, _CHI2, _quadrature_note("chdtr in v"))
_implicit("gdtria", ("y", 1, 2), 0, _GAMMA, _quadrature_note("gdtr in a"))
_implicit("gdtrib", (0, "y", 2), 1, _GAMMA, _quadrature_note("gdtr in b"))
_implicit("btdtria", ("y", 1, 2), 0, _BETA, _quadrature_note("betainc in a"))
_implicit("btdtrib", (0, "y", 2), 1, _BETA, _quadrature_note("betainc in b"))
_implicit("stdtridf", ("y", 1), 0, _STUDENT, _quadrature_note("stdtr in df"))
_implicit("pdtrik", ("y", 1), 0, _POISSON, _quadrature_note("pdtr in k (a real count)"))
_implicit("bdtrik", ("y", 1, 2), 0, _BINOMIAL, _quadrature_note("bdtr in k (a real count)"))
_implicit("bdtrin", (0, "y", 2), 1, _BINOMIAL, _quadrature_note("bdtr in n"))
_implicit("nbdtrik", ("y", 1, 2), 0, _NEGATIVE_BINOMIAL, _quadrature_note("nbdtr in k (a real count)"))
_implicit("nbdtrin", (0, "y", 2), 1, _NEGATIVE_BINOMIAL, _quadrature_note("nbdtr in n"))
_implicit("fdtridfd", (0, "y", 2), 1, _F, _quadrature_note("fdtr in dfd"))


# Orthogonal polynomials: derivatives in x from d/dx C_n^(α)(x) = 2α C_{n-1}^(α+1)(x) (DLMF 18.9.19)
# and its relatives; the degree n and the parameters are plain.
def _lower_degree(n, value):
    """`value` (a polynomial of degree n - 1) where n ≥ 1, and 0 for n = 0: for integer degrees only."""
    return np.where(stop_gradient(n) >= 1, value, 0.0)


def _below(n, name, reflect=False, poles=True):
    """The lowered degree n - 1 of the derivative identities f_n' = c·g_(n-1). They hold for every real
    degree (SciPy's non-integer degrees are hypergeometric functions, and the identities are 2F1's own
    derivative). A degree -1 function is 0 (a factor 1/Γ(0)): its derivative's lowered degree is a harmless
    0, zeroed by `_alive`. Below that, negative integer degrees put g on a pole (`poles`): Legendre degrees
    reflect (P_ν = P_(-ν-1)), other families are refused; Chebyshev T's identity holds there."""
    n = stop_gradient(n)
    if reflect:
        n = np.where(n < 0, -n - 1.0, n)
    elif poles and np.any((n <= -2) & (n == np.round(n))):
        raise NotImplementedError(f"scipy.special.{name}: the derivative at a negative integer degree is not "
                                  "available; pass a degree n ≥ 0 (or a non-integer one).")
    lowered = np.where(n == -1, 0.0, n - 1.0) if poles else n - 1.0
    return float(lowered) if np.ndim(lowered) == 0 else lowered  # a number mixes with any array type (CuPy's)


def _alive(n):
    """0 where the degree is -1 (the function is 0 there), else 1."""
    alive = (stop_gradient(n) != -1) * 1.0
    return float(alive) if np.ndim(alive) == 0 else alive


def _poly(name, dx, params=(), notes=""):
    what = ("the degree n",) + tuple(f"the parameter {p}" for p in params)
    _nary(name, tuple(_plain(name, w) for w in what) + (dx,), "x",
          ("The degree n" + "".join(f" and {p}" for p in params) + " must be plain. " + notes).strip())


_poly("eval_legendre", lambda g, n, x, out, sp: g * sp.eval_gegenbauer(_below(n, "", reflect=True), 1.5, x))
_poly("eval_chebyt", lambda g, n, x, out, sp: g * n * sp.eval_chebyu(_below(n, "", poles=False), x))
_poly("eval_chebyu", lambda g, n, x, out, sp: g * 2.0 * _alive(n) * sp.eval_gegenbauer(_below(n, "eval_chebyu"), 2.0, x))
_poly("eval_chebyc", lambda g, n, x, out, sp: g * n * sp.eval_chebyu(_below(n, "", poles=False), 0.5 * x))
_poly("eval_chebys", lambda g, n, x, out, sp: g * _alive(n) * sp.eval_gegenbauer(_below(n, "eval_chebys"), 2.0, 0.5 * x))
_poly("eval_sh_legendre", lambda g, n, x, out, sp: g * 2.0 * sp.eval_gegenbauer(_below(n, "", reflect=True), 1.5,
                                                                                  2.0 * x - 1.0))
_poly("eval_sh_chebyt", lambda g, n, x, out, sp: g * 2.0 * n * sp.eval_chebyu(_below(n, "", poles=False), 2.0 * x - 1.0))
_poly("eval_sh_chebyu", lambda g, n, x, out, sp: g * 4.0 * _alive(n) * sp.eval_gegenbauer(
    _below(n, "eval_sh_chebyu"), 2.0, 2.0 * x - 1.0))
_poly("eval_hermite", lambda g, n, x, out, sp: g * 2.0 * n * _lower_degree(n, sp.eval_hermite(np.maximum(n - 1, 0), x)),
      notes="Integer n.")
_poly("eval_hermitenorm", lambda g, n, x, out, sp: g * n * _lower_degree(
    n, sp.eval_hermitenorm(np.maximum(n - 1, 0), x)), notes="Integer n.")
_poly("eval_laguerre", lambda g, n, x, out, sp: -g * _alive(n) * sp.eval_genlaguerre(_below(n, "eval_laguerre"), 1.0, x))
_poly("eval_genlaguerre", lambda g, n, alpha, x, out, sp: -g * _alive(n) * sp.eval_genlaguerre(
    _below(n, "eval_genlaguerre"), alpha + 1.0, x), ("alpha",))
_poly("eval_gegenbauer", lambda g, n, alpha, x, out, sp: g * 2.0 * alpha * _alive(n) * sp.eval_gegenbauer(
    _below(n, "eval_gegenbauer"), alpha + 1.0, x), ("alpha",))
_poly("eval_jacobi", lambda g, n, alpha, beta, x, out, sp: g * 0.5 * (n + alpha + beta + 1.0) * _alive(n) * sp.eval_jacobi(
    _below(n, "eval_jacobi"), alpha + 1.0, beta + 1.0, x), ("alpha", "beta"))


def _shifted_jacobi_derivative(g, n, p, q, x, out, sp):
    """d/dx G_n^(p,q)(x), G_n^(p,q)(x) = P_n^(p-q, q-1)(2x - 1) / binom(2n + p - 1, n)."""
    lower = sp.eval_jacobi(_below(n, "eval_sh_jacobi"), p - q + 1.0, q, 2.0 * x - 1.0)
    norm = sp.binom(2.0 * stop_gradient(n) + stop_gradient(p) - 1.0, stop_gradient(n))
    pole = norm == 0  # G_n is infinite or nan there (SciPy divides by 0): so are its derivatives, without the warning
    if np.any(pole):  # (0/0 where n + p = 0 raised "invalid value encountered in divide")
        norm = np.where(pole, np.nan, norm)
    return g * _alive(n) * (n + p) * lower / norm


_poly("eval_sh_jacobi", _shifted_jacobi_derivative, ("p", "q"))


# Spherical Bessel functions: SciPy's spherical_jn(n, z, derivative) calls one of two ufuncs, so it
# works on traced z. The value's derivative is the `derivative=True` ufunc; that one's comes from the
# recurrence f_n' = c (n f_{n-1} + b (n+1) f_{n+1}) / (2n + 1) (DLMF 10.51.2, 10.51.5), which does not
# divide by z: (c, b) = (1, -1) for j and y, (1, 1) for i, (-1, 1) for k.
# For j and i, where z² < n + 1, the derivatives are their power series instead: SciPy's derivative
# ufunc computes j_{n-1} - (n+1) j_n / z, which is wrong once j_n underflows (z^n/(2n+1)!! < 1e-308 while
# its derivative is not: z = 1e-30 for n = 10) and NaN at the smallest subnormals.
def _spherical_series(n, z, sign, d, terms=20):
    """d-th derivative of Σ_k sign^k z^(n+2k) / (k! 2^k (2n+2k+1)!!) (j_n: sign -1, i_n: +1), as
    z^low Σ_j A_j (z²)^j with `low` its lowest power; accurate to rounding for z² < n + 1."""
    from scipy.special import gammaln

    n = np.asarray(stop_gradient(n), dtype=float)
    low = np.where(n >= d, n - d, (n - d) % 2)
    coefficients = []
    for j in range(terms):
        k = (low + d - n) / 2.0 + j
        p = n + 2.0 * k
        falling = p if d == 1 else p * (p - 1.0)
        # 1/(k! 2^k (2n+2k+1)!!) = √π / (k! 2^(n+2k+1) Γ(n+k+3/2))
        size = np.exp(0.5 * math.log(math.pi) - gammaln(k + 1.0) - (n + 2.0 * k + 1.0) * math.log(2.0)
                      - gammaln(n + k + 1.5))
        coefficients.append(np.where(k % 2 == 0, 1.0, sign) * size * falling)
    power = np.where(low > 0, z ** np.maximum(low, 1.0), 1.0)
    return power * _polynomial(coefficients, z * z)


def _spherical(kind, c, b, sign):
    value, slope = f"_ufuncs._spherical_{kind}", f"_ufuncs._spherical_{kind}_d"
    note = f"The ufunc pullback.scipy.special.spherical_{kind} calls. The order n is an integer."

    def curvature(n, z, sp):
        lower = np.where(stop_gradient(n) >= 1, _ufunc_named(sp, slope)(np.maximum(n - 1, 0), z), 0.0)
        return c * (n * lower + b * (n + 1.0) * _ufunc_named(sp, slope)(n + 1, z)) / (2.0 * n + 1.0)

    def near_zero(d, far):
        if sign is None:
            return far

        def derivative(n, z, sp):
            close = np.abs(stop_gradient(z)) < np.sqrt(np.maximum(np.asarray(stop_gradient(n), dtype=float) + 1.0, 0.0))
            safe = math.sqrt(float(np.max(np.asarray(stop_gradient(n), dtype=float), initial=0.0)) + 1.0) + 1.0
            return _split(z, close, lambda z: _spherical_series(n, z, sign, d), lambda z: far(n, z, sp), safe=safe)

        return derivative

    first = near_zero(1, lambda n, z, sp: _ufunc_named(sp, slope)(n, z))
    second = near_zero(2, curvature)
    _nary(value, (None, lambda g, n, z, out, sp: g * first(n, z, sp)), "z", note)
    _nary(slope, (None, lambda g, n, z, out, sp: g * second(n, z, sp)), "z", note)


for _kind, _c, _b, _sign in (("jn", 1.0, -1.0, -1.0), ("yn", 1.0, -1.0, None), ("in", 1.0, 1.0, 1.0),
                             ("kn", -1.0, 1.0, None)):
    _spherical(_kind, _c, _b, _sign)

# SciPy functions that compute with the differentiable ufuncs above, and so work on traced values as they are.
for _name, _args, _how in (("softplus", "x", "np.logaddexp(0, x)"), ("assoc_laguerre", "x", "eval_genlaguerre(n, k, x)"),
                           ("jvp", "z", "jv"), ("yvp", "z", "yv"), ("ivp", "z", "iv"), ("kvp", "z", "kv")):
    describe(f"scipy.special.{_name}", _args, f"SciPy's own works on traced values: it computes with {_how}.",
             kind="composite", name=f"scipy.special.{_name}")


_registered = False


def register():
    """Register the rules for `scipy.special`'s ufuncs (imports SciPy; safe to call twice)."""
    global _registered
    if _registered:
        return
    sp = _scipy_special()
    for name, rule in RULES.items():
        ufunc = _ufunc_named(sp, name)
        rrule(ufunc)(rule)
        frule(ufunc)(FORWARD[name])
        _row_for(name, ufunc)
    for name in NO_GRADIENT:
        nondifferentiable(_ufunc_named(sp, name))
        _row_for(name, _ufunc_named(sp, name))
    _registered = True


def _row_for(name, ufunc):
    """Key the coverage-table row recorded under `scipy.special.<name>` on the ufunc itself."""
    row = ENTRIES.pop(f"scipy.special.{name}", None)
    if row is not None:
        ENTRIES[ufunc] = row._replace(key=ufunc)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `callback` once, right after the module `name` has been executed."""

    def __init__(self, name, callback):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute, callback = spec.loader.exec_module, self.callback

        def exec_module(module):
            execute(module)
            try:
                callback()
            except Exception as error:  # never break the user's import of SciPy
                warnings.warn(f"pullback could not register its scipy.special rules: {error!r}", stacklevel=2)

        spec.loader.exec_module = exec_module
        return spec


if "scipy.special" in sys.modules:
    register()
else:
    sys.meta_path.insert(0, _AfterImport("scipy.special", register))


# --- SciPy's Python-level functions, made differentiable --------------------------------
def _any_tracked(*values):
    return any(isinstance(v, Traced) for v in values)


def _stacked(x):
    """A list or tuple holding values being differentiated, as one traced array (as NumPy would read the list)."""
    if isinstance(x, (list, tuple)) and _holds_traced(x):
        return np.stack([_stacked(part) for part in x])
    return x


def _holds_traced(x):
    if isinstance(x, (list, tuple)):
        return any(_holds_traced(part) for part in x)
    return isinstance(x, Traced)


def stand_in_among(x):
    """The first `pb.jit` stand-in inside `x` (through tuples, lists and dicts), or None."""
    if is_stand_in(x):
        return x
    parts = x.values() if isinstance(x, dict) else x if isinstance(x, (tuple, list)) else ()
    for part in parts:
        found = stand_in_among(part)
        if found is not None:
            return found
    return None


def _without_overwrite(fn, args, kwargs):
    """The arguments with every `overwrite_*` flag off: a recorded call must not write into the trace's arrays."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return args, kwargs
    for name in bound.arguments:
        if name.startswith("overwrite_"):
            bound.arguments[name] = False
    return bound.args, bound.kwargs


def scipy_call(fn, /, *args, **kwargs):
    """`fn(*args, **kwargs)` for a SciPy function of plain values. Given a `pb.jit` stand-in, the call is
    recorded whole and each replay runs it on its own values: SciPy converts its input with `np.asarray`,
    which a trace cannot follow."""
    if any(is_jit_float_or_complex(a) for a in (*args, *kwargs.values())):  # SciPy reads a number as NumPy's
        args = tuple(as_numpy_number(a) if is_jit_float_or_complex(a) else a for a in args)
        kwargs = {k: as_numpy_number(a) if is_jit_float_or_complex(a) else a for k, a in kwargs.items()}
    stand_in = stand_in_among((args, kwargs))
    if stand_in is None:
        return fn(*args, **kwargs)
    args, kwargs = _without_overwrite(fn, args, kwargs)
    result = stand_in.record_primitive(fn, qualified_name(fn), args, kwargs)
    if not _replayable(result):
        raise JitError(f"{qualified_name(fn)} inside pb.jit returned an object of type {type(result).__name__}, which "
                       "a replay cannot rebuild from its arrays. Call it outside the jitted function.")
    return result


def _replayable(result):
    """Whether each replay recomputes a recorded call's result: the trace's arrays (alone or in one flat tuple or
    list), or a Python number (which the trace guards). A number inside a tuple would be a constant of the trace."""
    if isinstance(result, (tuple, list)):  # a number among the arrays is fixed by a guard (see `Trace._guard_numbers`)
        return all(is_stand_in(part) or isinstance(part, (bool, int, float, complex)) for part in result)
    return is_stand_in(result) or isinstance(result, (bool, int, float, complex))


def scipy_valued(result, fn, /, *args, **kwargs):
    """`result`, a composite's for SciPy's `fn(*args, **kwargs)`, holding SciPy's value, inside `pb.jit` too."""
    plain_args, plain_kwargs = strip_all(args), strip_all(kwargs)
    jit_number = any(is_jit_float_or_complex(a) for a in (*plain_args, *plain_kwargs.values()))
    if stand_in_among((plain_args, plain_kwargs)) is None and not jit_number:
        return with_numpy_value(result, fn, *args, **kwargs)
    return _holding(result, scipy_call(fn, *plain_args, **plain_kwargs))  # a jitted Python float: recorded there


def _holding(y, exact):
    if isinstance(y, tuple):
        return tuple(_holding(part, value) for part, value in zip(y, exact))
    return numpy_valued(y, exact) if isinstance(y, Traced) else exact


class RecordedModule:
    """A SciPy module whose functions go through `scipy_call`, so that they work inside `pb.jit`."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if not callable(value) or isinstance(value, type):
            return value
        return functools.partial(scipy_call, value)


@primitive
def polygamma(n, x):
    """`scipy.special.polygamma(n, x)`, differentiable in `x` (`n` is a plain integer).

    >>> import numpy as np, pullback as pb
    >>> from pullback.scipy.special import polygamma
    >>> round(pb.gradient(lambda x: polygamma(0, x), 1.0)[0], 12)  # trigamma(1) = pi**2 / 6
    1.644934066848
    """
    import scipy.special as sp

    return sp.polygamma(n, x)


def _order_has_no_derivative():
    raise NotImplementedError("polygamma: the derivative with respect to the order n does not exist; "
                              "pass n as a plain integer.")


@rrule(polygamma)
def polygamma_rule(n, x):
    return polygamma(n, x), lambda g: (Thunk(_order_has_no_derivative), g * polygamma(np.add(n, 1), x))


@frule(polygamma)
def polygamma_frule(primals, tangents):
    (n, x), (t_n, t_x) = primals, tangents
    if t_n is not None:
        _order_has_no_derivative()
    return polygamma(n, x), None if t_x is None else t_x * polygamma(np.add(n, 1), x)


# ψ^(n)(z) for complex z (SciPy's polygamma is real only): ψ^(n)(z) = ψ^(n)(z + N) + (-1)^(n+1) n! Σ_k<N (z + k)^-(n+1),
# with z + N far enough right for the asymptotic series (DLMF 5.15.8) in the Bernoulli numbers B_2 ... B_20.
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510, 43867 / 798, -174611 / 330)


def _any_polygamma(n, x):
    """polygamma(n, x), for complex x too (as the derivatives of digamma of a complex argument need it)."""
    return _complex_polygamma(n, x) if np.iscomplexobj(stop_gradient(x)) else polygamma(n, x)


def _complex_polygamma(n, z):
    """ψ^(n)(z), n ≥ 1, for complex z: the recurrence up to Re z ≥ 20 + n, then the asymptotic series (its
    first omitted term is below 1e-17 relative there). Traced operations: it differentiates again."""
    shift = np.maximum(np.ceil(20.0 + n - np.real(stop_gradient(z))), 0.0)
    total = 0.0 * z
    for k in range(int(np.max(shift, initial=0.0))):
        total = total + np.where(k < shift, np.where(k < shift, z + k, 1.0) ** -(n + 1.0), 0.0)
    w = z + shift
    series = math.factorial(n - 1) / w ** n + math.factorial(n) / (2.0 * w ** (n + 1))
    for k, b in enumerate(_BERNOULLI, start=1):
        series = series + b * math.factorial(2 * k + n - 1) / math.factorial(2 * k) / w ** (2 * k + n)
    return (-1.0) ** (n + 1) * (math.factorial(n) * total + series)


_PYTHON_LEVEL = ("Call pullback.scipy.special.{} (SciPy's own converts its input with np.asarray, so it never "
                 "reaches pullback).")
describe(polygamma, "x", _PYTHON_LEVEL.format("polygamma") + " The order n must be plain.", kind="rule",
         rule=polygamma_rule, name="scipy.special.polygamma")


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """`scipy.special.logsumexp`, differentiable in `a` and `b`.

    >>> import numpy as np, pullback as pb
    >>> g = pb.gradient(lambda a: logsumexp(a, b=np.array([1.0, 3.0])), np.array([0.0, 0.0]))[0]
    >>> g
    array([0.25, 0.75])
    """
    import scipy.special as sp

    a, b = _stacked(a), _stacked(b)
    if not _any_tracked(a, b):
        return scipy_call(sp.logsumexp, a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
    if keepdims and np.ndim(stop_gradient(a)) == 0 and np.ndim(stop_gradient(b)) == 0:  # SciPy's result: shape (1,)
        a, b = np.reshape(a, (1,)), None if b is None else np.reshape(b, (1,))
    out = _logsumexp(a, axis, b, keepdims, return_sign)
    return scipy_valued(out, sp.logsumexp, a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)


def _logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    # shifted by the largest real part, as SciPy's is (a complex maximum would rotate the sum)
    peak = np.max(np.real(stop_gradient(a)), axis=axis, keepdims=True, initial=-np.inf)  # -inf: no terms
    peak = np.where(np.isfinite(peak), peak, 0.0)
    terms = np.exp(a - peak)
    if b is not None:
        terms = terms * b
    total = np.sum(terms, axis=axis, keepdims=True)
    if return_sign:
        magnitude = np.abs(total)
        # a real sign is piecewise constant; a complex one, total / |total|, moves with a and b
        if np.iscomplexobj(stop_gradient(total)):
            sign = total / np.where(stop_gradient(magnitude) == 0, 1.0, magnitude)  # 0 for a zero sum, as SciPy's
        else:
            sign = np.sign(stop_gradient(total))
        out = np.log(magnitude) + peak
    else:
        out = np.log(total) + peak
    if not keepdims:
        out = np.squeeze(out, axis=axis)
        if return_sign:
            sign = np.squeeze(sign, axis=axis)
    return (out, sign) if return_sign else out


def log_softmax(x, axis=None):
    """`scipy.special.log_softmax`, differentiable.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda x: log_softmax(x)[0], np.array([0.0, 0.0]))[0]
    array([ 0.5, -0.5])
    """
    import scipy.special as sp

    x = _stacked(x)
    if not _any_tracked(x):
        return scipy_call(sp.log_softmax, x, axis=axis)
    return scipy_valued(x - _logsumexp(x, axis=axis, keepdims=True), sp.log_softmax, x, axis=axis)


def softmax(x, axis=None):
    """`scipy.special.softmax`, differentiable.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda x: softmax(x)[0], np.array([0.0, 0.0]))[0]
    array([ 0.25, -0.25])
    """
    import scipy.special as sp

    x = _stacked(x)
    if not _any_tracked(x):
        return scipy_call(sp.softmax, x, axis=axis)
    return scipy_valued(np.exp(x - _logsumexp(x, axis=axis, keepdims=True)), sp.softmax, x, axis=axis)


def multigammaln(a, d):
    """`scipy.special.multigammaln(a, d)`, the log of the multivariate gamma function, differentiable in `a`.

    >>> import numpy as np, pullback as pb
    >>> from pullback.scipy.special import multigammaln
    >>> g = pb.gradient(lambda a: multigammaln(a, 2), 3.0)[0]  # digamma(3) + digamma(2.5)
    >>> round(g, 12)
    1.625940975744
    """
    import scipy.special as sp

    if not _any_tracked(a):
        return scipy_call(sp.multigammaln, a, d)
    scipy_call(sp.multigammaln, stop_gradient(a), d)  # SciPy's checks of d and of a > (d - 1) / 2, with its messages
    d = int(d)
    terms = sp.gammaln(np.stack([a - (j - 1.0) / 2 for j in range(1, d + 1)]))
    return (d * (d - 1) * 0.25) * np.log(np.pi) + np.sum(terms, axis=0)


describe(logsumexp, "a, b", _PYTHON_LEVEL.format("logsumexp") + " `return_sign` supported.", kind="composite",
         name="scipy.special.logsumexp")
describe(softmax, "x", _PYTHON_LEVEL.format("softmax"), kind="composite", name="scipy.special.softmax")
describe(log_softmax, "x", _PYTHON_LEVEL.format("log_softmax"), kind="composite", name="scipy.special.log_softmax")
describe(multigammaln, "a", _PYTHON_LEVEL.format("multigammaln") + " The dimension d is a plain integer.",
         kind="composite", name="scipy.special.multigammaln")


# --- SciPy's ufuncs with several outputs, and other Python-level functions ----------------
# The tape records one output per operation, so each output of sici, fresnel, airy, ... is a
# primitive of its own; the stand-in returns them together, as SciPy does.
def _split_outputs(name, labels, wrt, derivatives, what=None):
    """Primitives `name_<label>(*args)`, output k of `scipy.special.<name>`, differentiable in argument `wrt`;
    `derivatives[k](args, outputs, sp)` is d output_k / d args[wrt], `outputs[j]()` output j (differentiable)."""
    outputs = []
    for k, label in enumerate(labels):
        def value(*args, k=k):
            return getattr(_scipy_special(), name)(*args)[k]

        value.__name__ = value.__qualname__ = f"{name}_{label}"
        outputs.append(primitive(value))

    def others(args):
        return [lambda j=j: outputs[j](*args) for j in range(len(outputs))]

    for k, (output, derivative) in enumerate(zip(outputs, derivatives)):
        def rule(*args, output=output, derivative=derivative):
            def back(g):
                return tuple(Thunk(lambda: g * derivative(args, others(args), _scipy_special())) if j == wrt
                             else Thunk(lambda j=j: _not_differentiable(name, j, what)) for j in range(len(args)))

            return output(*args), back

        def forward(primals, tangents, output=output, derivative=derivative):
            if any(t is not None for j, t in enumerate(tangents) if j != wrt):
                _not_differentiable(name, next(j for j, t in enumerate(tangents) if j != wrt and t is not None), what)
            t = tangents[wrt]
            return output(*primals), None if t is None else t * derivative(primals, others(primals), _scipy_special())

        rrule(output)(_named(rule, f"{name}_{labels[k]}"))
        frule(output)(forward)
    return outputs


def _not_differentiable(name, position, what):
    raise NotImplementedError(f"scipy.special.{name}: argument {position} ({(what or {}).get(position, 'a parameter')}) "
                              "has no derivative here; pass it as a plain number.")


def _standin_of_outputs(name, outputs, real_only=None):
    def standin(*args):
        if not _any_tracked(*args):
            return scipy_call(getattr(_scipy_special(), name), *args)
        if real_only and any(np.iscomplexobj(stop_gradient(a)) for a in args):
            raise TypeError(f"scipy.special.{name} of complex values is not differentiable by pullback: {real_only}")
        return tuple(output(*args) for output in outputs)

    standin.__name__ = standin.__qualname__ = name
    standin.__module__ = __name__
    return standin


_SINC = lambda x: np.where(stop_gradient(x) == 0, 1.0, np.sin(x) / np.where(stop_gradient(x) == 0, 1.0, x))  # noqa: E731
sici = _standin_of_outputs("sici", _split_outputs("sici", ("si", "ci"), 0, (
    lambda a, o, sp: _SINC(a[0]), lambda a, o, sp: np.cos(a[0]) / a[0])))
shichi = _standin_of_outputs("shichi", _split_outputs("shichi", ("shi", "chi"), 0, (
    lambda a, o, sp: np.where(stop_gradient(a[0]) == 0, 1.0, np.sinh(a[0]) / np.where(stop_gradient(a[0]) == 0, 1.0, a[0])),
    lambda a, o, sp: np.cosh(a[0]) / a[0])))
fresnel = _standin_of_outputs("fresnel", _split_outputs("fresnel", ("s", "c"), 0, (
    lambda a, o, sp: np.sin(0.5 * math.pi * a[0] ** 2), lambda a, o, sp: np.cos(0.5 * math.pi * a[0] ** 2))))
airy = _standin_of_outputs("airy", _split_outputs("airy", ("ai", "aip", "bi", "bip"), 0, (
    lambda a, o, sp: o[1](), lambda a, o, sp: a[0] * o[0](), lambda a, o, sp: o[3](), lambda a, o, sp: a[0] * o[2]())))
itairy = _standin_of_outputs("itairy", _split_outputs("itairy", ("apt", "bpt", "ant", "bnt"), 0, (
    lambda a, o, sp: airy(a[0])[0], lambda a, o, sp: airy(a[0])[2], lambda a, o, sp: airy(-a[0])[0],
    lambda a, o, sp: airy(-a[0])[2])))
itj0y0 = _standin_of_outputs("itj0y0", _split_outputs("itj0y0", ("j0int", "y0int"), 0, (
    lambda a, o, sp: sp.j0(a[0]), lambda a, o, sp: sp.y0(a[0]))))
iti0k0 = _standin_of_outputs("iti0k0", _split_outputs("iti0k0", ("i0int", "k0int"), 0, (
    lambda a, o, sp: sp.i0(a[0]), lambda a, o, sp: sp.k0(a[0]))))
# (1 - J0(x))/x and (I0(x) - 1)/x cancel near 0 (0/0 at 0): there, (x/4) Σ_j (∓x²/4)^j / ((j + 1)!)²
_ONE_MINUS_J0_OVER_X = [(-1) ** j / math.factorial(j + 1) ** 2 for j in range(14)]
_I0_MINUS_ONE_OVER_X = [1.0 / math.factorial(j + 1) ** 2 for j in range(14)]


def _bessel0_difference_over_x(x, closed, series):
    return _split(x, np.abs(stop_gradient(x)) < 1.0, lambda x: 0.25 * x * _polynomial(series, 0.25 * x * x), closed,
                  safe=2.0)


it2j0y0 = _standin_of_outputs("it2j0y0", _split_outputs("it2j0y0", ("j0int", "y0int"), 0, (
    lambda a, o, sp: _bessel0_difference_over_x(a[0], lambda x: (1.0 - sp.j0(x)) / x, _ONE_MINUS_J0_OVER_X),
    lambda a, o, sp: -sp.y0(a[0]) / a[0])))
it2i0k0 = _standin_of_outputs("it2i0k0", _split_outputs("it2i0k0", ("i0int", "k0int"), 0, (
    lambda a, o, sp: _bessel0_difference_over_x(a[0], lambda x: (sp.i0(x) - 1.0) / x, _I0_MINUS_ONE_OVER_X),
    lambda a, o, sp: -sp.k0(a[0]) / a[0])))
ellipj = _standin_of_outputs("ellipj", _split_outputs("ellipj", ("sn", "cn", "dn", "ph"), 0, (
    lambda a, o, sp: o[1]() * o[2](), lambda a, o, sp: -o[0]() * o[2](), lambda a, o, sp: -a[1] * o[0]() * o[1](),
    lambda a, o, sp: o[2]()), {1: "the parameter m"}))
pbdv = _standin_of_outputs("pbdv", _split_outputs("pbdv", ("d", "dp"), 1, (
    lambda a, o, sp: o[1](), lambda a, o, sp: (0.25 * a[1] ** 2 - a[0] - 0.5) * o[0]()), {0: "the order v"}))
# airye: Ai·e^ζ, Ai'·e^ζ, Bi·e^(-ζ), Bi'·e^(-ζ) with ζ = (2/3) x^(3/2) for x > 0 (no scaling below 0), ζ' = √x
def _airye_root(x):
    """ζ' = √x for x > 0, 0 below. ζ'' = 1/(2√x) is infinite as x → 0+, so no output has a second derivative at 0."""
    if isinstance(x, Traced) and np.any(stop_gradient(x) == 0):
        raise ValueError("scipy.special.airye: the second derivatives do not exist at z = 0 (the scaling "
                         "exp(±(2/3) z^(3/2)) makes them infinite as z → 0+). Differentiate once there, or use airy(z).")
    positive = stop_gradient(x) > 0
    return np.where(positive, np.sqrt(np.where(positive, x, 1.0)), 0.0)


airye = _standin_of_outputs("airye", _split_outputs("airye", ("eai", "eaip", "ebi", "ebip"), 0, (
    lambda a, o, sp: o[1]() + _airye_root(a[0]) * o[0](), lambda a, o, sp: a[0] * o[0]() + _airye_root(a[0]) * o[1](),
    lambda a, o, sp: o[3]() - _airye_root(a[0]) * o[2](), lambda a, o, sp: a[0] * o[2]() - _airye_root(a[0]) * o[3]())),
    real_only="for complex z SciPy scales Bi by exp(-|Re ζ|), which has no complex derivative. Use airy(z) times "
              "np.exp of the scale you need.")
pbvv = _standin_of_outputs("pbvv", _split_outputs("pbvv", ("v", "vp"), 1, (
    lambda a, o, sp: o[1](), lambda a, o, sp: (0.25 * a[1] ** 2 - a[0] - 0.5) * o[0]()), {0: "the order v"}))
pbwa = _standin_of_outputs("pbwa", _split_outputs("pbwa", ("w", "wp"), 1, (
    lambda a, o, sp: o[1](), lambda a, o, sp: (a[0] - 0.25 * a[1] ** 2) * o[0]()), {0: "the parameter a"}))

_MULTI = {sici: "x", shichi: "x", fresnel: "z", airy: "z", itairy: "x", itj0y0: "x", iti0k0: "x", it2j0y0: "x",
          it2i0k0: "x", ellipj: "u (m must be plain)", pbdv: "x (v must be plain)", pbvv: "x (v must be plain)",
          pbwa: "x (a must be plain)",
          airye: "z Its second derivatives do not exist at z = 0 (they are infinite as z → 0+): they raise there."}
for _fn, _args in _MULTI.items():
    describe(_fn, _args.split(" ")[0], _PYTHON_LEVEL.replace(" (SciPy's own converts its input with np.asarray, so it "
                                                              "never reaches pullback).", "").format(_fn.__name__)
             + " SciPy's own is a ufunc with several outputs; each output is differentiable. " + _args.partition(" ")[2],
             kind="composite", name=f"scipy.special.{_fn.__name__}")


def _spherical_standin(kind, sign_n_even):
    def standin(n, z, derivative=False):
        sp = _scipy_special()
        if not _any_tracked(n, z):
            return scipy_call(getattr(sp, f"spherical_{kind}"), n, z, derivative)
        n = np.asarray(stop_gradient(n), dtype=np.dtype("long"))
        ufunc = getattr(sp._ufuncs, f"_spherical_{kind}" + ("_d" if derivative else ""))
        negative = stop_gradient(z) < 0
        if not np.any(negative):
            value = ufunc(n, z)
            # SciPy's reflection multiplies by an integer sign array (also where z ≥ 0): float32 comes back float64
            real = sign_n_even is not None and not np.iscomplexobj(stop_gradient(value))
            return value.astype(np.result_type(stop_gradient(value), np.int64)) if real else value
        if sign_n_even is None:
            raise ValueError(f"pullback.scipy.special.spherical_{kind}: negative z gives a complex intermediate in SciPy; "
                             "it is not supported on traced values.")
        sign = np.where(n % 2 == 0, sign_n_even, -sign_n_even) * (-1.0 if derivative else 1.0)
        # SciPy's reflection: -z where z < 0 (np.abs would have slope 0 at z = 0, and turn -0.0 into 0.0)
        return ufunc(n, np.where(negative, -z, z)) * np.where(negative, sign, 1.0)

    standin.__name__ = standin.__qualname__ = f"spherical_{kind}"
    standin.__doc__ = (f"`scipy.special.spherical_{kind}(n, z, derivative=False)`, differentiable in `z` to any order "
                       "(SciPy's own converts z with np.asarray).")
    return standin


spherical_jn = _spherical_standin("jn", 1.0)
spherical_yn = _spherical_standin("yn", -1.0)
spherical_in = _spherical_standin("in", 1.0)
spherical_kn = _spherical_standin("kn", None)
for _kind in ("jn", "yn", "in", "kn"):
    describe(globals()[f"spherical_{_kind}"], "z", _PYTHON_LEVEL.format(f"spherical_{_kind}")
             + " Any order of derivative, through the derivative=True function and the differential equation."
             + (" z ≥ 0 only." if _kind == "kn" else ""), kind="composite", name=f"scipy.special.spherical_{_kind}")


def diric(x, n):
    """`scipy.special.diric(x, n)`, the periodic sinc sin(n x / 2) / (n sin(x / 2)), differentiable in `x`.

    >>> import numpy as np, pullback as pb
    >>> round(pb.gradient(lambda x: diric(x, 3), 0.5)[0], 12)
    -0.319617025736
    """
    sp = _scipy_special()
    if not _any_tracked(x):
        return scipy_call(sp.diric, x, n)
    n = stop_gradient(n)
    plain = scipy_call(sp.diric, stop_gradient(x), n)  # SciPy's value, with its NaN for invalid n
    bad = np.isnan(plain)  # NaN x, or an n that is not a positive integer: the derivatives are NaN too
    order = np.where(bad, 1, n)  # the expression below sees a valid n there (no warnings)
    # x/2 = kπ + d with |d| ≤ π/2, reduced exactly by libm's sin and cos; diric = (-1)^(k(n-1)) sin(nd)/(n sin d)
    half = stop_gradient(x) / 2.0
    flip = np.where(np.cos(half) < 0, -1.0, 1.0)
    d = np.arctan2(flip * np.sin(half), np.abs(np.cos(half))) + (x - stop_gradient(x)) / 2.0
    close = np.abs(order * stop_gradient(d)) < 1.0  # the quotient's derivatives cancel there: its series in nd instead
    value = flip ** (order - 1) * _split(d, close, lambda d: _polynomial(_dirichlet_series(order), (order * d) ** 2),
                                         lambda d: np.sin(order * d) / (order * np.sin(d)))
    return scipy_valued(np.where(bad, np.exp(x * np.where(bad, plain, 0.0)), value), sp.diric, x, n)  # SciPy's value


def _dirichlet_series(n, terms=14):
    """b_k with sin(nd)/(n sin d) = Σ_k b_k (nd)^(2k), from sin d · Σ_k b_k n^(2k) d^(2k) = sin(nd)/n."""
    n = np.where(n >= 1, n, 1.0)  # invalid n: SciPy's NaN is handed out
    odd = [(-1) ** k / math.factorial(2 * k + 1) for k in range(terms)]  # sin's Taylor coefficients
    b = [np.ones_like(n, dtype=float)]
    for k in range(1, terms):
        b.append(odd[k] - sum(odd[i] * b[k - i] / n ** (2 * i) for i in range(1, k + 1)))
    return b


describe(diric, "x", _PYTHON_LEVEL.format("diric") + " n is a plain positive integer.", kind="composite",
         name="scipy.special.diric")
