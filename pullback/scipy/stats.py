"""`scipy.stats`, differentiable: the densities, mass functions and distribution functions of
common distributions, with SciPy's names, signatures and values.

- continuous: `norm`, `t`, `chi2`, `beta`, `gamma`, `expon`, `laplace`, `cauchy`, `logistic`,
  `lognorm`, `uniform`, `vonmises`, `invgamma`, `truncnorm`, with `logpdf`, `pdf`, `cdf`,
  `logcdf`, `sf` and `logsf`; shape parameters first, then `loc` and `scale`, positional or
  by keyword, as in SciPy; `dist(*params)` freezes them, as SciPy's does;
- discrete: `poisson`, `bernoulli`, `binom`, `nbinom`, `geom`, with `logpmf`, `pmf`, `cdf`,
  `logcdf`, `sf`, `logsf` and `loc`;
- multivariate: `multivariate_normal` (`logpdf`, `pdf`; `cdf`, `logcdf` on plain values only),
  `dirichlet` (`logpdf`, `pdf`), `multinomial` (`logpmf`, `pmf`).

Each method is differentiable, in both modes, in the data and in every real parameter, and
its values agree with SciPy's to 1e-12 relative (except where SciPy's own value is
ill-conditioned, such as the log of a probability within 1e-11 of 1). A call with no traced
argument is SciPy's own.
A traced call is written with NumPy and `scipy.special` operations that pullback
differentiates, following SciPy's own formulas and its conventions outside the support
(-inf, 0 or 1) and for invalid parameters (nan), where the gradient is zero.

Not differentiable, and refused with a clear error when traced: the values of a discrete
distribution (`k`, its `loc`), integer parameters (`binom`'s and `multinomial`'s `n`), and
`multivariate_normal.cdf` (a randomized integration). Derivatives in the shape parameters of
the incomplete gamma and beta functions (the cdf of `gamma`, `chi2`, `beta`, `t`, `invgamma`,
`poisson`, `nbinom`) and of the von Mises cdf in `kappa` are computed by numerical quadrature:
first derivatives only. SciPy is imported on first use.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy import stats
>>> x = np.array([0.5, 1.5, 2.0])
>>> pb.gradient(lambda mu, sigma: np.sum(stats.norm.logpdf(x, mu, sigma)), 1.0, 2.0)
(0.25, -1.3125)
>>> g = pb.gradient(lambda a: stats.gamma.cdf(2.0, a), 1.5)[0]  # d/da by quadrature
>>> round(g, 10)
-0.2774335642
>>> float(pb.jvp(lambda p: stats.binom.logpmf(3, 10, p), (0.5,), (1.0,))[1])  # 3/p - 7/(1-p)
-8.0
"""

import functools
import math

import numpy as np

from .._extend import frule, primitive, rrule
from .._standins import is_stand_in
from .._tangents import Thunk
from .._values import Traced, stop_gradient
from ..rules._register import numpy_valued
from ..rules.special import elementwise_of_scalars, lgamma_half_step, scipy_call, scipy_valued, student_log_kernel
from .linalg import solve_triangular

__all__ = ["norm", "t", "chi2", "beta", "gamma", "expon", "laplace", "cauchy", "logistic", "lognorm", "uniform",
           "vonmises", "invgamma", "truncnorm", "poisson", "bernoulli", "binom", "nbinom", "geom",
           "multivariate_normal", "dirichlet", "multinomial"]

_LOG_2PI = float(np.log(2 * np.pi))
_NORM_C = float(np.sqrt(2 * np.pi))
_NORM_LOG_C = float(np.log(_NORM_C))


def _sc():
    import scipy.special  # also registers pullback's rules for its ufuncs

    return scipy.special


def _scipy_stats():
    import scipy.stats

    return scipy.stats


def _tracked(*values):
    return any(isinstance(v, Traced) for v in values)


def _plain(v):
    """The plain value of `v` as an array (inside `pb.jit`, the trace's stand-in: branches on it become guards)."""
    v = stop_gradient(v)
    return v if is_stand_in(v) else np.asarray(v)


def _float64(v):
    v = _plain(v)
    return v.astype(np.float64) if is_stand_in(v) else np.asarray(v, dtype=np.float64)


def _stats_call(dist, method, *args, **kwargs):
    """SciPy's `scipy.stats.<dist>.<method>(*args, **kwargs)`, recorded whole inside `pb.jit`."""
    return scipy_call(getattr(getattr(_scipy_stats(), dist), method), *args, **kwargs)


def _keep(mask, value, safe):
    """`value` where `mask`, else the harmless `safe`: the parts a formula should not see are
    replaced before it runs, so that their gradients stay finite (and are then masked to zero)."""
    return value if np.all(mask) else np.where(mask, value, safe)


def _where(mask, a, b):
    if np.all(mask):
        return a
    if not np.any(mask):
        return b
    return np.where(mask, a, b)


def _log_of(cdf, sf):
    """log(cdf), or log1p(-sf) above the median, as SciPy's default `logcdf` computes it."""
    low = _plain(cdf) < 0.5
    return _where(low, _log_probability(_keep(low, cdf, 1.0)), np.log1p(-_keep(~low, sf, 0.0)))


def _log_probability(p):
    """log(p), and -inf with a zero gradient where p underflows to 0 (a tail: SciPy's value is -inf, without a
    warning): log(0) would warn "divide by zero", and its derivative p'/p = 0/0 reach the gradient as nan."""
    positive = _plain(p) != 0
    return _where(positive, np.log(_keep(positive, p, 1.0)), -np.inf)


def _no_method(dist, method):
    methods = [m for m in ("logpdf", "pdf", "logpmf", "pmf", "cdf", "logcdf", "sf", "logsf") if hasattr(type(dist), m)]
    return AttributeError(
        f"pullback.scipy.stats.{dist.name} has no {method!r}: it provides {', '.join(methods)}. "
        f"For other methods, call scipy.stats.{dist.name}.{method} on plain values (pb.stop_gradient).")


def _refuse_traced(name, argument, value):
    if _tracked(value):
        raise TypeError(f"{name}: `{argument}` takes integer values and has no derivative; pass it as a plain "
                        "array (pb.stop_gradient) or leave it out of the arguments being differentiated.")


# --- univariate distributions ------------------------------------------------------------------
class _Distribution:
    """A scipy.stats distribution: SciPy's own on plain arguments, a traced composition otherwise.

    Subclasses give the formulas of the standardized distribution (`_logpdf`, `_cdf`, ... as in
    SciPy), its shape parameter names, `_argcheck` and `_support`.
    """

    name = ""
    shapes = ()
    safe_shapes = ()  # valid stand-ins for invalid parameter values
    discrete = False

    def __call__(self, *args, **kwds):
        """Freeze the parameters, as `scipy.stats.<name>(*args, **kwds)` does."""
        return _Frozen(self, args, kwds)

    def __repr__(self):
        return f"<pullback.scipy.stats.{self.name}>"

    def __getattr__(self, method):
        raise _no_method(self, method)

    def _argcheck(self, *shapes):
        return functools.reduce(np.logical_and, [_plain(s) > 0 for s in shapes], np.True_)

    def _support(self, *shapes):
        return -np.inf, np.inf

    def _parse(self, method, args, kwds):
        names = self.shapes + (("loc",) if self.discrete else ("loc", "scale"))
        if len(args) > len(names):
            raise TypeError(f"{self.name}.{method}() takes at most {len(names) + 1} positional arguments "
                            f"({len(args) + 1} given)")
        values = dict(zip(names, args))
        for key, value in kwds.items():
            if key not in names:
                raise TypeError(f"{self.name}.{method}() got an unexpected keyword argument {key!r}")
            if key in values:
                raise TypeError(f"{self.name}.{method}() got multiple values for argument {key!r}")
            values[key] = value
        missing = [n for n in self.shapes if n not in values]
        if missing:
            raise TypeError(f"{self.name}.{method}() missing required argument(s): {', '.join(missing)}")
        return [values[n] for n in self.shapes], values.get("loc", 0.0), values.get("scale", 1.0)

    def _run(self, method, x, args, kwds):
        scipys = getattr(getattr(_scipy_stats(), self.name), method)
        if not _tracked(x, *args, *kwds.values()):
            return scipy_call(scipys, x, *args, **kwds)
        return scipy_valued(self._traced(method, x, args, kwds), scipys, x, *args, **kwds)  # SciPy's value, bit for bit

    def _traced(self, method, x, args, kwds):
        shapes, loc, scale = self._parse(method, args, kwds)
        _sc()
        plain_shapes = [_plain(s) for s in shapes]
        valid = self._argcheck(*plain_shapes)
        safe = [_keep(valid, s, d) for s, d in zip(shapes, self.safe_shapes)]
        lo, hi = self._support(*plain_shapes)
        safe_lo, safe_hi = self._support(*[_plain(s) for s in safe])
        if self.discrete:
            return self._run_discrete(method, x, loc, valid, shapes, safe, lo, hi, safe_lo)
        valid = valid & (_plain(scale) > 0)
        scale = _keep(valid, scale, 1.0)
        zp = _float64((_plain(x) - _plain(loc)) / _plain(scale))
        finite = np.isfinite(zp)  # nan and ±inf are filled in below, and pass no gradient
        z = (_keep(finite, x, 0.0) - _keep(finite, loc, 0.0)) / scale
        if _plain(z).dtype != np.float64:
            z = z.astype(np.float64)
        closed = method in ("logpdf", "pdf")
        inside = valid & ((lo <= zp) & (zp <= hi) & finite if closed else (lo < zp) & (zp < hi))  # x = ±inf: filled
        zs = _keep(inside, z, _interior_point(safe_lo, safe_hi))
        value = getattr(self, "_" + method)(zs, *safe)
        if method == "logpdf":
            value = value - np.log(scale)
        elif method == "pdf":
            value = value / scale
        fill = {"logpdf": -np.inf, "pdf": 0.0, "cdf": np.where(zp >= hi, 1.0, 0.0),
                "logcdf": np.where(zp >= hi, 0.0, -np.inf), "sf": np.where(zp <= lo, 1.0, 0.0),
                "logsf": np.where(zp <= lo, 0.0, -np.inf)}[method]
        fill = np.where(~valid | np.isnan(zp), np.nan, fill)
        return _where(inside, value, fill)

    def _run_discrete(self, method, k, loc, valid, shapes, safe, lo, hi, safe_lo):
        _refuse_traced(f"{self.name}.{method}", "k", k)
        _refuse_traced(f"{self.name}.{method}", "loc", loc)
        for name, value in zip(self.shapes, shapes):
            if name in self.integer_shapes:
                _refuse_traced(f"{self.name}.{method}", name, value)
        k = _float64(_plain(k) - _plain(loc))
        if method in ("logpmf", "pmf"):
            inside = valid & (lo <= k) & (k <= hi) & (np.floor(k) == k)
        else:
            inside = valid & (lo <= k) & (k < hi) & np.isfinite(k)
        ks = np.where(inside, np.floor(k), safe_lo)
        value = getattr(self, "_" + method)(ks, *safe)
        if method in ("pmf", "cdf", "sf"):
            value = np.clip(value, 0.0, 1.0)
        fill = {"logpmf": -np.inf, "pmf": 0.0, "cdf": np.where(k >= hi, 1.0, 0.0),
                "logcdf": np.where(k >= hi, 0.0, -np.inf), "sf": np.where(k < lo, 1.0, 0.0),
                "logsf": np.where(k < lo, 0.0, -np.inf)}[method]
        fill = np.where(~valid | np.isnan(k), np.nan, fill)
        return _where(inside, value, fill)

    # SciPy's defaults
    def _pdf(self, x, *s):
        return np.exp(self._logpdf(x, *s))

    def _logpdf(self, x, *s):
        return np.log(self._pdf(x, *s))

    def _sf(self, x, *s):
        return 1.0 - self._cdf(x, *s)

    def _logcdf(self, x, *s):
        return _log_of(self._cdf(x, *s), self._sf(x, *s))

    def _logsf(self, x, *s):
        return _log_of(self._sf(x, *s), self._cdf(x, *s))


def _interior_point(lo, hi):
    """A point strictly inside [lo, hi]."""
    finite_lo, finite_hi = np.isfinite(lo), np.isfinite(hi)
    with np.errstate(invalid="ignore"):
        return np.where(finite_lo & finite_hi, (lo + hi) / 2.0,
                        np.where(finite_lo, lo + 1.0, np.where(finite_hi, hi - 1.0, 0.0)))


def _method(method):
    def run(self, x, *args, **kwds):
        return self._run(method, x, args, kwds)

    run.__name__ = method
    run.__doc__ = f"`scipy.stats.<distribution>.{method}`, differentiable; same arguments as SciPy's."
    return run


class _Continuous(_Distribution):
    logpdf, pdf, cdf, logcdf, sf, logsf = (_method(m) for m in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"))


class _Discrete(_Distribution):
    discrete = True
    integer_shapes = ()
    logpmf, pmf, cdf, logcdf, sf, logsf = (_method(m) for m in ("logpmf", "pmf", "cdf", "logcdf", "sf", "logsf"))

    def _support(self, *shapes):
        return 0.0, np.inf

    def _pmf(self, k, *s):
        return np.exp(self._logpmf(k, *s))

    def _pmf_at_edges(self, k, edge, shapes, inside, product):
        """exp(logpmf), and at the parameter's `edge` points (p = 0, mu = 0, ...) the mass as a `product` of
        powers: there logpmf is -inf for the masses that are 0, whose derivative exp(logpmf)·logpmf' is 0·inf,
        while the power rule gives k·p^(k-1). Each form sees a harmless `inside` value at the other's points."""
        if not np.any(edge):
            return np.exp(self._logpmf(k, *shapes))
        at_edge = [np.where(edge, v, inside) for v in shapes]
        away = [np.where(edge, inside, v) for v in shapes]
        return np.where(edge, product(k, *at_edge), np.exp(self._logpmf(k, *away)))

    def _logcdf(self, k, *s):
        return _log_probability(self._cdf(k, *s))

    def _logsf(self, k, *s):
        return _log_probability(self._sf(k, *s))


class _Frozen:
    """A distribution with its parameters fixed: `norm(1.0, 2.0).logpdf(x)`."""

    def __init__(self, dist, args, kwds):
        self.dist, self.args, self.kwds = dist, args, kwds

    def __getattr__(self, method):
        if method.startswith("_") or not hasattr(type(self.dist), method):
            raise _no_method(self.dist, method)
        fn = getattr(self.dist, method)
        return lambda x: fn(x, *self.args, **self.kwds)


# --- continuous distributions -------------------------------------------------------------------
class norm_gen(_Continuous):
    name = "norm"

    def _logpdf(self, x):
        return -(x * x) / 2.0 - _NORM_LOG_C  # not x**2, which raises OverflowError for a large Python float

    def _pdf(self, x):
        return np.exp(-(x * x) / 2.0) / _NORM_C

    def _cdf(self, x):
        return _sc().ndtr(x)

    def _sf(self, x):
        return _sc().ndtr(-x)

    def _logcdf(self, x):
        return _sc().log_ndtr(x)

    def _logsf(self, x):
        return _sc().log_ndtr(-x)


class t_gen(_Continuous):
    name, shapes, safe_shapes = "t", ("df",), (1.0,)

    def _logpdf(self, x, df):
        # log Γ((df+1)/2) - log Γ(df/2) - log(π df)/2 - (df+1)/2 log1p(x²/df), with both groups in forms whose
        # derivatives in df (O(1/df²) differences of O(1/df) terms) keep their digits for large df
        finite = _plain(df) != np.inf
        df = _keep(finite, df, 1.0)
        student = lgamma_half_step(0.5 * df) - 0.5 * _LOG_2PI - student_log_kernel(x, df)
        return _where(finite, student, norm._logpdf(x))

    def _pdf(self, x, df):
        return _where(_plain(df) != np.inf, np.exp(self._logpdf(x, df)), norm._pdf(x))

    def _cdf(self, x, df):
        return _sc().stdtr(df, x)

    def _sf(self, x, df):
        return _sc().stdtr(df, -x)


class chi2_gen(_Continuous):
    name, shapes, safe_shapes = "chi2", ("df",), (1.0,)

    def _support(self, df):
        return 0.0, np.inf

    def _logpdf(self, x, df):
        sc = _sc()
        return sc.xlogy(df / 2.0 - 1, x) - x / 2.0 - sc.gammaln(df / 2.0) - (np.log(2) * df) / 2.0

    def _cdf(self, x, df):  # chdtr(df, x)
        return _sc().gammainc(df / 2.0, x / 2.0)

    def _sf(self, x, df):
        return _sc().gammaincc(df / 2.0, x / 2.0)


class beta_gen(_Continuous):
    name, shapes, safe_shapes = "beta", ("a", "b"), (1.0, 1.0)

    def _support(self, a, b):
        return 0.0, 1.0

    def _logpdf(self, x, a, b):
        sc = _sc()
        return sc.xlog1py(b - 1.0, -x) + sc.xlogy(a - 1.0, x) - sc.betaln(a, b)

    def _cdf(self, x, a, b):
        return _sc().betainc(a, b, x)

    def _sf(self, x, a, b):
        return _sc().betaincc(a, b, x)


class gamma_gen(_Continuous):
    name, shapes, safe_shapes = "gamma", ("a",), (1.0,)

    def _support(self, a):
        return 0.0, np.inf

    def _logpdf(self, x, a):
        sc = _sc()
        return sc.xlogy(a - 1.0, x) - x - sc.gammaln(a)

    def _cdf(self, x, a):
        return _sc().gammainc(a, x)

    def _sf(self, x, a):
        return _sc().gammaincc(a, x)


class expon_gen(_Continuous):
    name = "expon"

    def _support(self):
        return 0.0, np.inf

    def _logpdf(self, x):
        return -x

    def _pdf(self, x):
        return np.exp(-x)

    def _cdf(self, x):
        return -np.expm1(-x)

    def _sf(self, x):
        return np.exp(-x)

    def _logsf(self, x):
        return -x


class laplace_gen(_Continuous):
    name = "laplace"

    def _pdf(self, x):
        return 0.5 * np.exp(-np.abs(x))

    def _logpdf(self, x):  # not log(pdf): past |x| = 745 the pdf underflows to 0 (log 0, and a nan gradient)
        return -math.log(2.0) - np.abs(x)

    def _logcdf(self, x):
        right = _plain(x) > 0
        return _where(right, np.log1p(-0.5 * np.exp(-_keep(right, x, 1.0))), _keep(~right, x, -1.0) - math.log(2.0))

    def _logsf(self, x):
        return self._logcdf(-x)

    def _cdf(self, x):
        right = _plain(x) > 0
        return _where(right, 1.0 - 0.5 * np.exp(-_keep(right, x, 1.0)), 0.5 * np.exp(_keep(~right, x, -1.0)))

    def _sf(self, x):
        return self._cdf(-x)


class cauchy_gen(_Continuous):
    name = "cauchy"

    # SciPy's formulas, but without |x| where |x| < 1 (whose kink at 0 made the second derivative 0 there, not -2)
    # and, for the density, in u = 1/x where |x| > 1: the derivative of 1/(1 + x²) went through a subnormal
    # 1/(π(1 + x²))² past |x| = 1e77 (4e-4 relative at 1e80, 0 from 1e100)
    def _pdf(self, x):
        near = _plain(np.abs(x)) < 1
        xn = _keep(near, x, 0.0)
        u = 1.0 / _keep(~near, x, 2.0)
        return _where(near, 1.0 / np.pi / (1.0 + xn * xn), u * u / np.pi / (1.0 + u * u))

    def _logpdf(self, x):
        absx = np.abs(x)
        near = _plain(absx) < 1
        far = _keep(~near, absx, 2.0)
        xn = _keep(near, x, 0.0)
        return _where(near, -math.log(math.pi) - np.log1p(xn * xn),
                      -math.log(math.pi) - (2 * np.log(far) + np.log1p((1 / far)**2)))

    def _cdf(self, x):
        return np.arctan2(1, -x) / np.pi

    def _sf(self, x):
        return np.arctan2(1, x) / np.pi

    def _logcdf(self, x):
        # below x = -1, log(arctan(u)/π) with u = -1/x as -log(-x) + log(arctan(u)/u) - log π: in log(cdf) the slope
        # 1/(1 + x²) underflows past |x| = 1e154, and pb.jvp lost the whole derivative, about -1/x; here that comes
        # from log(-x), and the ratio's share (about 2u²/3 of it) is held constant where it is below the last digit
        far = _plain(x) < -1
        if not np.any(far):
            return _log_of(self._cdf(x), self._sf(x))
        xf = _keep(far, x, -2.0)
        u = -1.0 / xf
        small = _plain(u) < 1e-8
        us = _keep(~small, u, 0.5)
        ratio = _where(small, stop_gradient(np.log(np.arctan(u) / u)), np.log(np.arctan(us) / us))
        near = _keep(~far, x, 0.0)
        return _where(far, ratio - np.log(-xf) - math.log(math.pi), _log_of(self._cdf(near), self._sf(near)))

    def _logsf(self, x):
        return self._logcdf(-x)


class logistic_gen(_Continuous):
    name = "logistic"

    def _logpdf(self, x):
        # SciPy's -|x| - 2 log1p(e^-|x|), but where |x| < 1 as -2 log(2 cosh(x/2)): there the derivative of SciPy's
        # form, -sign(x)(1 - 2e^-|x|/(1 + e^-|x|)), cancels (8e-8 relative at x = 1e-10), and its second derivative
        # at the kink of |x| was 0, not -1/2
        near = _plain(np.abs(x)) < 1
        y = -np.abs(_keep(~near, x, 2.0))
        return _where(near, -2.0 * (math.log(2.0) + np.log(np.cosh(0.5 * _keep(near, x, 0.0)))),
                      y - 2.0 * np.log1p(np.exp(y)))

    def _cdf(self, x):
        return _sc().expit(x)

    def _sf(self, x):
        return _sc().expit(-x)

    def _logcdf(self, x):
        return _sc().log_expit(x)

    def _logsf(self, x):
        return _sc().log_expit(-x)


class lognorm_gen(_Continuous):
    name, shapes, safe_shapes = "lognorm", ("s",), (1.0,)

    def _support(self, s):
        return 0.0, np.inf

    def _logpdf(self, x, s):
        nonzero = _plain(x) != 0
        x = _keep(nonzero, x, 1.0)
        log_x = np.log(x)  # s * s, not s**2: that raises OverflowError for a large Python float s
        return _where(nonzero, -(log_x * log_x) / (2 * (s * s)) - np.log(s * x * math.sqrt(2 * math.pi)), -np.inf)

    def _cdf(self, x, s):
        return _sc().ndtr(np.log(x) / s)

    def _sf(self, x, s):
        return _sc().ndtr(-(np.log(x) / s))

    def _logcdf(self, x, s):
        return _sc().log_ndtr(np.log(x) / s)

    def _logsf(self, x, s):
        return _sc().log_ndtr(-(np.log(x) / s))


class uniform_gen(_Continuous):
    name = "uniform"

    def _support(self):
        return 0.0, 1.0

    def _pdf(self, x):
        return 1.0 * (x == x)

    def _cdf(self, x):
        return x


class invgamma_gen(_Continuous):
    name, shapes, safe_shapes = "invgamma", ("a",), (1.0,)

    def _support(self, a):
        return 0.0, np.inf

    def _logpdf(self, x, a):
        # x = 0 (loc = x, or scale = inf) is kept out of the formula: for a Python float 1.0 / x raises ZeroDivisionError
        positive = _plain(x) > 0
        x = _keep(positive, x, 1.0)
        return _where(positive, -(a + 1) * np.log(x) - _sc().gammaln(a) - 1.0 / x, -np.inf)

    def _cdf(self, x, a):
        return _sc().gammaincc(a, 1.0 / x)

    def _sf(self, x, a):
        return _sc().gammainc(a, 1.0 / x)


class vonmises_gen(_Continuous):
    name, shapes, safe_shapes = "vonmises", ("kappa",), (1.0,)

    def _argcheck(self, kappa):
        return kappa >= 0

    def _logpdf(self, x, kappa):
        sc = _sc()
        return kappa * sc.cosm1(x) - np.log(2 * np.pi) - np.log(_i0e_of_nonnegative(kappa))

    def _pdf(self, x, kappa):
        sc = _sc()
        return np.exp(kappa * sc.cosm1(x)) / (2 * np.pi * _i0e_of_nonnegative(kappa))

    def _cdf(self, x, kappa):
        return _vonmises_cdf(x, kappa)


def _i0e_of_nonnegative(kappa):
    """SciPy's i0e(κ) = e^(-|κ|) I0(κ) for κ ≥ 0, differentiated as e^(-κ) I0(κ), which is smooth at 0 (i0e
    has a kink there: at κ = 0 its derivative is the right one, -1, not the kink's 0)."""
    sc = _sc()
    plain = stop_gradient(kappa)
    small = plain < 100.0  # i0 overflows near 700; e^(-κ) I0(κ) is i0e's own value away from 0
    smooth = np.where(small, np.exp(-kappa) * sc.i0(np.where(small, kappa, 0.0)), sc.i0e(np.where(small, 100.0, kappa)))
    return sc.i0e(plain) + (smooth - stop_gradient(smooth))  # SciPy's value, the smooth function's derivatives


@primitive
def _vonmises_cdf(x, kappa):
    """The standard von Mises distribution function (SciPy's), continued past ±π by whole turns."""
    return _scipy_stats().vonmises.cdf(x, kappa)


def _vonmises_dkappa(x, kappa):
    """d/dκ of the von Mises cdf at a scalar x: ∫_{-π}^{x} (cos t - I1(κ)/I0(κ)) pdf(t) dt, whole turns
    removed (each adds 1, whatever κ), integrated from the nearer end of [-π, π] (the whole turn gives 0)."""
    from scipy import integrate

    if not (kappa >= 0) or math.isnan(x):
        return math.nan
    sc = _sc()
    x = x - 2 * math.pi * round(x / (2 * math.pi))
    mean_cos, norm_ = sc.i1e(kappa) / sc.i0e(kappa), 2 * math.pi * sc.i0e(kappa)

    def integrand(t):
        return (math.cos(t) - mean_cos) * math.exp(kappa * sc.cosm1(t)) / norm_

    lo, hi, sign = (-math.pi, x, 1.0) if x <= 0 else (x, math.pi, -1.0)
    return sign * integrate.quad(integrand, lo, hi, epsabs=0.0, epsrel=1e-12, limit=200)[0]


def _vonmises_dkappa_array(x, kappa):
    if _tracked(x, kappa):
        raise NotImplementedError(
            "vonmises.cdf: the derivative with respect to kappa is computed by numerical quadrature and cannot "
            "itself be differentiated (no second derivatives in kappa). Differentiate once, or pass kappa through "
            "pb.stop_gradient.")
    return scipy_call(elementwise_of_scalars, _vonmises_dkappa, x, kappa)


@rrule(_vonmises_cdf)
def _vonmises_cdf_rule(x, kappa):
    def back(g):
        return (Thunk(lambda: g * vonmises._pdf(x, kappa)), Thunk(lambda: g * _vonmises_dkappa_array(x, kappa)))

    return _vonmises_cdf(x, kappa), back


@frule(_vonmises_cdf)
def _vonmises_cdf_frule(primals, tangents):
    (x, kappa), (tx, tk) = primals, tangents
    dx = None if tx is None else tx * vonmises._pdf(x, kappa)
    dk = None if tk is None else tk * _vonmises_dkappa_array(x, kappa)
    return _vonmises_cdf(x, kappa), dx if dk is None else dk if dx is None else dx + dk


class truncnorm_gen(_Continuous):
    name, shapes, safe_shapes = "truncnorm", ("a", "b"), (-1.0, 1.0)

    def _argcheck(self, a, b):
        return a < b

    def _support(self, a, b):
        return a, b

    def _logpdf(self, x, a, b):
        return norm._logpdf(x) - _log_gauss_mass(a, b)

    def _logcdf(self, x, a, b):
        return _log_mass_ratio(_log_gauss_mass(a, x), _log_gauss_mass(x, b), _log_gauss_mass(a, b))

    def _logsf(self, x, a, b):
        return _log_mass_ratio(_log_gauss_mass(x, b), _log_gauss_mass(a, x), _log_gauss_mass(a, b))

    def _cdf(self, x, a, b):
        return np.exp(self._logcdf(x, a, b))

    def _sf(self, x, a, b):
        return np.exp(self._logsf(x, a, b))


def _log_mass_ratio(log_part, log_rest, log_total):
    """log(part / total), or log1p(-rest / total) where that is above -0.1 (SciPy's guard
    against cancellation)."""
    log_ratio = log_part - log_total
    near_one = _plain(log_ratio) > -0.1
    return _where(near_one, np.log1p(-np.exp(_keep(near_one, log_rest - log_total, -1.0))), log_ratio)


def _log_gauss_mass(a, b):
    """log(ndtr(b) - ndtr(a)), as SciPy computes it: in the left tail, mirrored into it, or
    from both tails when the interval holds 0."""
    sc = _sc()
    a_p, b_p = np.broadcast_arrays(_plain(a), _plain(b))
    left, right = b_p <= 0, a_p > 0
    central = ~(left | right)

    def log_diff(log_p, log_q):  # log(exp(log_p) - exp(log_q)), log_p > log_q
        return log_p + np.log1p(-np.exp(log_q - log_p))

    out = np.log1p(-sc.ndtr(_keep(central, a, -1.0)) - sc.ndtr(-_keep(central, b, 1.0)))
    if np.any(left):
        out = _where(left, log_diff(sc.log_ndtr(_keep(left, b, -1.0)), sc.log_ndtr(_keep(left, a, -2.0))), out)
    if np.any(right):
        out = _where(right, log_diff(sc.log_ndtr(-_keep(right, a, 1.0)), sc.log_ndtr(-_keep(right, b, 2.0))), out)
    return out


# --- discrete distributions ---------------------------------------------------------------------
class poisson_gen(_Discrete):
    name, shapes, safe_shapes = "poisson", ("mu",), (1.0,)

    def _argcheck(self, mu):
        return mu >= 0

    def _logpmf(self, k, mu):
        sc = _sc()
        return sc.xlogy(k, mu) - sc.gammaln(k + 1) - mu

    def _pmf(self, k, mu):
        sc = _sc()
        return self._pmf_at_edges(k, stop_gradient(mu) == 0, (mu,), 0.5,
                                  lambda k, mu: mu ** k * np.exp(-mu - sc.gammaln(k + 1)))

    def _cdf(self, k, mu):  # pdtr(k, mu)
        return _sc().gammaincc(k + 1.0, mu)

    def _sf(self, k, mu):  # pdtrc(k, mu)
        return _sc().gammainc(k + 1.0, mu)


class binom_gen(_Discrete):
    name, shapes, safe_shapes, integer_shapes = "binom", ("n", "p"), (1.0, 0.5), ("n",)

    def _argcheck(self, n, p):
        return (n >= 0) & (np.floor(n) == n) & (p >= 0) & (p <= 1)

    def _support(self, n, p):
        return 0.0, n

    def _logpmf(self, k, n, p):
        sc = _sc()
        combiln = sc.gammaln(n + 1) - (sc.gammaln(k + 1) + sc.gammaln(n - k + 1))
        return combiln + sc.xlogy(k, p) + sc.xlog1py(n - k, -p)

    def _pmf(self, k, n, p):
        sc = _sc()
        plain = stop_gradient(p)

        def powers(k, n, p):
            return np.exp(sc.gammaln(n + 1) - (sc.gammaln(k + 1) + sc.gammaln(n - k + 1))) * p ** k * (1 - p) ** (n - k)

        return self._pmf_at_edges(k, (plain == 0) | (plain == 1), (n, p), 0.5, powers)

    def _cdf(self, k, n, p):
        return _sc().betainc(n - k, k + 1.0, 1.0 - p)

    def _sf(self, k, n, p):
        return _sc().betainc(k + 1.0, n - k, p)


class bernoulli_gen(_Discrete):
    name, shapes, safe_shapes = "bernoulli", ("p",), (0.5,)

    def _argcheck(self, p):
        return (p >= 0) & (p <= 1)

    def _support(self, p):
        return 0.0, 1.0

    def _logpmf(self, k, p):
        return binom._logpmf(k, 1, p)

    def _pmf(self, k, p):
        return binom._pmf(k, 1, p)

    def _cdf(self, k, p):
        return binom._cdf(k, 1, p)

    def _sf(self, k, p):
        return binom._sf(k, 1, p)


class nbinom_gen(_Discrete):
    name, shapes, safe_shapes = "nbinom", ("n", "p"), (1.0, 0.5)

    def _argcheck(self, n, p):
        return (n > 0) & (p > 0) & (p <= 1)

    def _logpmf(self, k, n, p):
        sc = _sc()
        return sc.gammaln(n + k) - sc.gammaln(k + 1) - sc.gammaln(n) + n * np.log(p) + sc.xlog1py(k, -p)

    def _cdf(self, k, n, p):
        return _sc().betainc(n, k + 1.0, p)

    def _sf(self, k, n, p):  # agrees with SciPy's to the last bit more often than betaincc(n, k + 1, p)
        return _sc().betainc(k + 1.0, n, 1.0 - p)

    def _logcdf(self, k, n, p):
        cdf = self._cdf(k, n, p)
        high = _plain(cdf) > 0.5
        return _where(high, np.log1p(-_keep(high, _sc().betainc(k + 1.0, n, 1.0 - p), 0.0)),
                      np.log(_keep(~high, cdf, 1.0)))


class geom_gen(_Discrete):
    name, shapes, safe_shapes = "geom", ("p",), (0.5,)

    def _argcheck(self, p):
        return (p <= 1) & (p > 0)

    def _support(self, p):
        return 1.0, np.inf

    def _pmf(self, k, p):
        return np.power(1 - p, k - 1) * p

    def _logpmf(self, k, p):
        return _sc().xlog1py(k - 1, -p) + np.log(p)

    def _cdf(self, k, p):
        return -np.expm1(np.log1p(-p) * k)

    def _sf(self, k, p):
        return np.exp(self._logsf(k, p))

    def _logsf(self, k, p):
        return k * np.log1p(-p)


norm, t, chi2, beta, gamma = norm_gen(), t_gen(), chi2_gen(), beta_gen(), gamma_gen()
expon, laplace, cauchy, logistic, lognorm = expon_gen(), laplace_gen(), cauchy_gen(), logistic_gen(), lognorm_gen()
uniform, vonmises, invgamma, truncnorm = uniform_gen(), vonmises_gen(), invgamma_gen(), truncnorm_gen()
poisson, bernoulli, binom, nbinom, geom = poisson_gen(), bernoulli_gen(), binom_gen(), nbinom_gen(), geom_gen()


# --- multivariate distributions -----------------------------------------------------------------
class multivariate_normal_gen:
    """`scipy.stats.multivariate_normal`: `logpdf` and `pdf` differentiable in `x`, `mean` and `cov`
    (its lower triangle, which SciPy reads); `cov` a number, a diagonal or a positive definite
    matrix. `cdf` and `logcdf` are SciPy's, on plain values only."""

    name = "multivariate_normal"
    __getattr__ = _Distribution.__getattr__

    def __call__(self, mean=None, cov=1, allow_singular=False):
        return _Frozen(self, (), {"mean": mean, "cov": cov, "allow_singular": allow_singular})

    def logpdf(self, x, mean=None, cov=1, allow_singular=False):
        """`scipy.stats.multivariate_normal.logpdf`, differentiable."""
        if not _tracked(x, mean, cov):
            return _stats_call("multivariate_normal", "logpdf", x, mean, cov, allow_singular)
        # SciPy checks the arguments (and refuses a singular cov unless allowed)
        _stats_call("multivariate_normal", "logpdf", _plain(x), None if mean is None else _plain(mean), _plain(cov),
                    allow_singular)
        x_given, mean_given, cov_given = x, mean, cov
        dim = np.size(mean) if mean is not None else (1 if np.ndim(cov) < 2 else np.shape(cov)[0])
        mean = np.zeros(dim) if mean is None else mean
        if dim == 1:
            mean, cov = np.reshape(mean, (1,)), np.reshape(cov, (1, 1))
        if np.ndim(cov) < 2:
            cov = cov * np.eye(dim)  # cov times the identity, or the diagonal matrix of cov
        try:
            np.linalg.cholesky(_plain(cov))
        except np.linalg.LinAlgError:
            raise NotImplementedError(
                "multivariate_normal.logpdf: cov is singular; pullback differentiates the density only for a "
                "positive definite cov (SciPy's pseudo-inverse for allow_singular=True has no derivative here)."
            ) from None
        if np.ndim(x) == 0:
            x = np.reshape(x, (1,))
        elif np.ndim(x) == 1:
            x = np.reshape(x, (-1, 1) if dim == 1 else (1, -1))
        chol = np.linalg.cholesky(cov)
        dev = np.reshape(x - mean, (-1, dim))
        white = solve_triangular(chol, np.transpose(dev), lower=True)
        maha = np.reshape(np.sum(white**2, axis=0), np.shape(x)[:-1])
        log_det = 2.0 * np.sum(np.log(np.diagonal(chol)))
        value = np.squeeze(-0.5 * (dim * _LOG_2PI + log_det + maha))
        # SciPy's own value, bit for bit (it factorises cov its own way)
        return scipy_valued(value, _scipy_stats().multivariate_normal.logpdf, x_given, mean_given, cov_given,
                                allow_singular)

    def pdf(self, x, mean=None, cov=1, allow_singular=False):
        """`scipy.stats.multivariate_normal.pdf`, differentiable."""
        if not _tracked(x, mean, cov):
            return _stats_call("multivariate_normal", "pdf", x, mean, cov, allow_singular)
        return scipy_valued(np.exp(self.logpdf(x, mean, cov, allow_singular)),
                                _scipy_stats().multivariate_normal.pdf, x, mean, cov, allow_singular)

    def cdf(self, x, *args, **kwds):
        """`scipy.stats.multivariate_normal.cdf` on plain values (no derivative)."""
        return self._plain_only("cdf", x, args, kwds)

    def logcdf(self, x, *args, **kwds):
        """`scipy.stats.multivariate_normal.logcdf` on plain values (no derivative)."""
        return self._plain_only("logcdf", x, args, kwds)

    def _plain_only(self, method, x, args, kwds):
        if _tracked(x, *args, *kwds.values()):
            raise NotImplementedError(
                f"multivariate_normal.{method} is computed by randomized quasi-Monte Carlo integration, which "
                "pullback cannot differentiate; call it on plain values (pb.stop_gradient), or use a "
                "differentiable bound or a product of univariate norm.cdf where the covariance is diagonal.")
        return _stats_call("multivariate_normal", method, x, *args, **kwds)


class dirichlet_gen:
    """`scipy.stats.dirichlet`: `logpdf` and `pdf` differentiable in `x` and `alpha`. As in SciPy,
    `x` holds the components along its first axis, and may leave out the last one."""

    name = "dirichlet"
    __getattr__ = _Distribution.__getattr__

    def __call__(self, alpha):
        return _Frozen(self, (alpha,), {})

    def logpdf(self, x, alpha):
        """`scipy.stats.dirichlet.logpdf`, differentiable."""
        if not _tracked(x, alpha):
            return _stats_call("dirichlet", "logpdf", x, alpha)
        _stats_call("dirichlet", "logpdf", _plain(x), _plain(alpha))  # SciPy checks the arguments
        sc = _sc()
        if np.shape(x)[0] != np.shape(alpha)[0]:
            x = np.concatenate([x, (1 - np.sum(x, axis=0))[np.newaxis]], axis=0)
        log_b = np.sum(sc.gammaln(alpha)) - sc.gammaln(np.sum(alpha))
        return np.squeeze(-log_b + np.sum(np.transpose(sc.xlogy(alpha - 1, np.transpose(x))), axis=0))

    def pdf(self, x, alpha):
        """`scipy.stats.dirichlet.pdf`, differentiable."""
        if not _tracked(x, alpha):
            return _stats_call("dirichlet", "pdf", x, alpha)
        return np.exp(self.logpdf(x, alpha))


class multinomial_gen:
    """`scipy.stats.multinomial`: `logpmf` and `pmf` differentiable in `p` (`x` and `n` are counts).

    When `p` is off the simplex SciPy replaces its last entry by 1 - the sum of the others; the
    derivative does the same everywhere, so that it agrees with finite differences: the last
    entry of `p` gets a zero gradient, and directions along the simplex are exact."""

    name = "multinomial"
    __getattr__ = _Distribution.__getattr__

    def __call__(self, n, p):
        return _Frozen(self, (n, p), {})

    def logpmf(self, x, n, p):
        """`scipy.stats.multinomial.logpmf`, differentiable in `p`."""
        if not _tracked(x, n, p):
            return _stats_call("multinomial", "logpmf", x, n, p)
        _refuse_traced("multinomial.logpmf", "x", x)
        _refuse_traced("multinomial.logpmf", "n", n)
        exact = _stats_call("multinomial", "logpmf", x, n, _plain(p))
        expected = _plain(exact)  # SciPy checks, and marks -inf, nan
        sc = _sc()
        p_plain = _plain(p).astype(np.float64)
        rest = 1.0 - np.sum(p[..., :-1], axis=-1)
        adjusted = np.abs(1 - p_plain.sum(axis=-1)) > np.finfo(np.result_type(p_plain, np.float32)).eps * 10
        last = np.where(adjusted, _plain(rest), p_plain[..., -1]) + (rest - _plain(rest))
        bad_p = np.any((p_plain < 0) | (p_plain > 1), axis=-1, keepdims=True)
        p = _keep(~bad_p, np.concatenate([p[..., :-1], last[..., np.newaxis]], axis=-1), 0.5)
        x = _plain(x).astype(int)
        n = _plain(n).astype(int)
        value = sc.gammaln(n + 1) + np.sum(sc.xlogy(x, p) - sc.gammaln(x + 1), axis=-1)
        value = _where(np.isfinite(expected), value, expected)
        return numpy_valued(value, exact) if isinstance(value, Traced) else exact  # SciPy's type (a 0-d array)

    def pmf(self, x, n, p):
        """`scipy.stats.multinomial.pmf`, differentiable in `p`."""
        if not _tracked(x, n, p):
            return _stats_call("multinomial", "pmf", x, n, p)
        value = np.exp(self.logpmf(x, n, p))
        exact = _stats_call("multinomial", "pmf", x, n, _plain(p))
        return numpy_valued(value, exact) if isinstance(value, Traced) else exact  # SciPy's type (a NumPy scalar)


multivariate_normal, dirichlet, multinomial = multivariate_normal_gen(), dirichlet_gen(), multinomial_gen()
