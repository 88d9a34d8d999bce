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

import importlib.abc
import importlib.util
import math
import sys
import warnings

import numpy as np

from .._extend import frule, nondifferentiable, primitive, rrule
from .._tangents import Thunk
from .._values import Traced, stop_gradient
from ._register import ENTRIES, add_tangents, describe

SQRT_PI = math.sqrt(math.pi)
SQRT_2PI = math.sqrt(2.0 * math.pi)

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


def _nary(name, partials, args, notes=""):
    """Register `scipy.special.<name>(*inputs)` with one partial derivative `d(g, *inputs, y, sp)` per input."""

    def rule(*inputs):
        sp = _scipy_special()
        y = getattr(sp, name)(*inputs)

        def back(g):
            return tuple(Thunk(lambda d=d: d(g, *inputs, y, sp)) for d in partials)

        return y, back

    def forward(primals, tangents):
        sp = _scipy_special()
        y = getattr(sp, name)(*primals)
        return y, add_tangents(*(None if t is None else d(t, *primals, y, sp) for d, t in zip(partials, tangents)))

    RULES[name], FORWARD[name] = _named(rule, name), forward
    describe(f"scipy.special.{name}", args, notes, kind="rule", rule=rule, name=f"scipy.special.{name}")


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


_unary("expit")(lambda g, x, y, sp: g * y * (1.0 - y))
_unary("logit")(lambda g, x, y, sp: g / (x * (1.0 - x)))
_unary("log_expit")(lambda g, x, y, sp: g * sp.expit(-x))
_unary("erf")(lambda g, x, y, sp: g * (2.0 / SQRT_PI) * np.exp(-x * x))
_unary("erfc")(lambda g, x, y, sp: g * (-2.0 / SQRT_PI) * np.exp(-x * x))
_unary("erfinv")(lambda g, x, y, sp: g * (SQRT_PI / 2.0) * np.exp(y * y))
_unary("erfcinv")(lambda g, x, y, sp: g * (-SQRT_PI / 2.0) * np.exp(y * y))
_unary("erfcx")(lambda g, x, y, sp: g * (2.0 * x * y - 2.0 / SQRT_PI))
_unary("gammaln", notes="Derivative digamma(x), also for negative x (gammaln is log|Γ|).")(
    lambda g, x, y, sp: g * sp.digamma(x))
_unary("gamma")(lambda g, x, y, sp: g * y * sp.digamma(x))
_unary("digamma", notes="Also reached as scipy.special.psi. Derivative polygamma(1, x).")(
    lambda g, x, y, sp: g * polygamma(1, x))
_unary("ndtr")(lambda g, x, y, sp: g * np.exp(-0.5 * x * x) / SQRT_2PI)
_unary("log_ndtr", notes="Stable for very negative x.")(
    lambda g, x, y, sp: g * np.exp(-0.5 * x * x - y) / SQRT_2PI)
_unary("ndtri")(lambda g, x, y, sp: g * SQRT_2PI * np.exp(0.5 * y * y))
_unary("i0")(lambda g, x, y, sp: g * sp.i1(x))
_unary("i1")(lambda g, x, y, sp: g * 0.5 * (sp.i0(x) + sp.iv(2.0, x)))
_unary("i0e")(lambda g, x, y, sp: g * (sp.i1e(x) - np.sign(x) * y))
_unary("i1e")(lambda g, x, y, sp: g * (0.5 * (sp.i0e(x) + sp.ive(2.0, x)) - np.sign(x) * y))


def _safe_ratio(x, y):
    """x / y, and 0 where x == 0 (so 0 * log 0 terms stay 0)."""
    zero = x == 0
    return np.where(zero, 0.0, x / np.where(zero, 1.0, y))


_binary("xlogy", lambda g, x, y, out, sp: g * np.log(y), lambda g, x, y, out, sp: g * _safe_ratio(x, y),
        "x, y", "x·log(y), with 0 where x == 0; d/dy is 0 there.")
_binary("xlog1py", lambda g, x, y, out, sp: g * np.log1p(y),
        lambda g, x, y, out, sp: g * _safe_ratio(x, 1.0 + y), "x, y")
_binary("betaln", lambda g, a, b, out, sp: g * (sp.digamma(a) - sp.digamma(a + b)),
        lambda g, a, b, out, sp: g * (sp.digamma(b) - sp.digamma(a + b)), "a, b")
_binary("iv", _no_order_derivative("iv"), lambda g, v, z, out, sp: g * 0.5 * (sp.iv(v - 1.0, z) + sp.iv(v + 1.0, z)),
        "z", "The order v must be plain (its derivative raises).")
_binary("ive", _no_order_derivative("ive"),
        lambda g, v, z, out, sp: g * (0.5 * (sp.ive(v - 1.0, z) + sp.ive(v + 1.0, z)) - np.sign(z) * out),
        "z", "The order v must be plain (its derivative raises).")


# --- Gamma and beta functions, Bessel functions of the first and second kind ----------------
def _rgamma_derivative(x, y, sp):
    """d/dx 1/Γ(x) = -ψ(x)/Γ(x); at x = -n, where Γ has a pole, it is (-1)^n n! = (-1)^n Γ(1 - x)."""
    pole = (stop_gradient(x) <= 0) & (np.floor(stop_gradient(x)) == stop_gradient(x))
    if not np.any(pole):
        return -y * sp.digamma(x)
    sign = np.where(np.remainder(stop_gradient(x), 2.0) == 0.0, 1.0, -1.0)
    regular = -y * sp.digamma(np.where(pole, 0.5, x))
    return np.where(pole, sign * sp.gamma(1.0 - np.where(pole, x, 0.0)), regular)


_unary("rgamma", notes="1/Γ(x); at the poles of Γ (x = 0, -1, -2, ...) the derivative is (-1)^n n!.")(
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
_binary("yn", _no_order_derivative("yn"), _bessel_order("yn"), "x", "The order n is an integer.")
_binary("beta", lambda g, a, b, out, sp: g * out * (sp.digamma(a) - sp.digamma(a + b)),
        lambda g, a, b, out, sp: g * out * (sp.digamma(b) - sp.digamma(a + b)), "a, b")
_binary("poch", lambda g, z, m, out, sp: g * out * (sp.digamma(z + m) - sp.digamma(z)),
        lambda g, z, m, out, sp: g * out * sp.digamma(z + m), "z, m")

# gammasgn(x) is ±1: no gradient. Registered with the ufuncs, once SciPy is imported.
describe("scipy.special.gammasgn", "none", "No gradient: the sign of Γ(x) is piecewise constant.", kind="none",
         name="scipy.special.gammasgn")


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
    if not (a > 0 and x >= 0):
        return math.nan
    if x == 0 or math.isinf(x):
        return 0.0
    sp = _scipy_special()
    c, log_gamma = sp.digamma(a), sp.gammaln(a)

    def integrand(t):
        return (math.log(t) - c) * math.exp((a - 1.0) * math.log(t) - t - log_gamma) if t > 0 else 0.0

    if math.log(x) > c:  # the score log t - ψ(a) is positive on all of (x, ∞)
        return -_quad(integrand, x, math.inf)
    if a < 2:  # t^(a-1) log t at 0: the weighted rule integrates it exactly
        weighted = _quad(lambda t: math.exp(-t - log_gamma), 0.0, x, weight="alg-loga", wvar=(a - 1.0, 0.0))
        return weighted - c * sp.gammainc(a, x)
    return _quad(integrand, 0.0, x)


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


def _stdtr_ddf(df, t):
    """d/d(df) stdtr(df, t) for scalars: stdtr = 1/2 + sign(t)/2 · betainc(1/2, df/2, w), w = t²/(df+t²),
    or (1 - sign(t))/2 + sign(t)/2 · betaincc(df/2, 1/2, 1 - w), whichever of w and 1 - w is the smaller."""
    if not (df > 0) or math.isnan(t):
        return math.nan
    if t == 0 or math.isinf(t) or math.isinf(df):
        return 0.0
    sp = _scipy_special()
    s = t * t + df
    w, u = t * t / s, df / s  # w + u = 1, each computed without cancellation
    dw = -t * t / (s * s)  # dw/d(df) = -du/d(df)
    if w <= u:
        d = 0.5 * _betainc_dshape(0.5, 0.5 * df, w, True) + _beta_density(0.5, 0.5 * df, w, sp) * dw
    else:
        d = -(0.5 * _betainc_dshape(0.5 * df, 0.5, u, False) - _beta_density(0.5 * df, 0.5, u, sp) * dw)
    return math.copysign(0.5, t) * d


def _by_quadrature(name, argument, scalar_fn, *values):
    """`scalar_fn` elementwise over the broadcast plain `values` (a first derivative by quadrature)."""
    if any(isinstance(v, Traced) for v in values):
        raise NotImplementedError(
            f"scipy.special.{name}: the derivative with respect to {argument} is computed by numerical quadrature "
            "and cannot itself be differentiated (no second derivatives in that argument). Differentiate once, "
            "or pass that argument through pb.stop_gradient.")
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
    finite = np.isfinite(stop_gradient(df))
    if not np.all(finite):
        df = np.where(finite, df, 1.0)
    density = np.exp(sp.gammaln(0.5 * (df + 1.0)) - sp.gammaln(0.5 * df) - 0.5 * np.log(df * math.pi)
                     - 0.5 * (df + 1.0) * np.log1p(t * t / df))
    return density if np.all(finite) else np.where(finite, density, np.exp(-0.5 * t * t) / SQRT_2PI)


_binary("stdtr", lambda g, df, t, out, sp: g * _by_quadrature("stdtr", "df", _stdtr_ddf, df, t),
        lambda g, df, t, out, sp: g * _student_density(df, t, sp), "df, t",
        "Student's t distribution function. " + _SHAPE_NOTE.replace("shape parameters", "degrees of freedom df"))


_registered = False


def register():
    """Register the rules for `scipy.special`'s ufuncs (imports SciPy; safe to call twice)."""
    global _registered
    if _registered:
        return
    sp = _scipy_special()
    for name, rule in RULES.items():
        ufunc = getattr(sp, name)
        rrule(ufunc)(rule)
        frule(ufunc)(FORWARD[name])
        _row_for(name, ufunc)
    nondifferentiable(sp.gammasgn)
    _row_for("gammasgn", sp.gammasgn)
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
    if not _any_tracked(a, b):
        import scipy.special as sp

        return sp.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
    peak = np.max(stop_gradient(a), axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    terms = np.exp(a - peak)
    if b is not None:
        terms = terms * b
    total = np.sum(terms, axis=axis, keepdims=True)
    if return_sign:
        sign = np.sign(stop_gradient(total))
        out = np.log(np.abs(total)) + peak
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
    if not _any_tracked(x):
        import scipy.special as sp

        return sp.log_softmax(x, axis=axis)
    return x - logsumexp(x, axis=axis, keepdims=True)


def softmax(x, axis=None):
    """`scipy.special.softmax`, differentiable.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda x: softmax(x)[0], np.array([0.0, 0.0]))[0]
    array([ 0.25, -0.25])
    """
    if not _any_tracked(x):
        import scipy.special as sp

        return sp.softmax(x, axis=axis)
    return np.exp(log_softmax(x, axis=axis))


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
        return sp.multigammaln(a, d)
    sp.multigammaln(stop_gradient(a), d)  # SciPy's checks of d and of a > (d - 1) / 2, with its messages
    d = int(d)
    terms = sp.gammaln(np.stack([a - (j - 1.0) / 2 for j in range(1, d + 1)]))
    return (d * (d - 1) * 0.25) * np.log(np.pi) + np.sum(terms, axis=0)


describe(logsumexp, "a, b", _PYTHON_LEVEL.format("logsumexp") + " `return_sign` supported.", kind="composite",
         name="scipy.special.logsumexp")
describe(softmax, "x", _PYTHON_LEVEL.format("softmax"), kind="composite", name="scipy.special.softmax")
describe(log_softmax, "x", _PYTHON_LEVEL.format("log_softmax"), kind="composite", name="scipy.special.log_softmax")
describe(multigammaln, "a", _PYTHON_LEVEL.format("multigammaln") + " The dimension d is a plain integer.",
         kind="composite", name="scipy.special.multigammaln")
