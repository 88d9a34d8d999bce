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

from .._extend import primitive, rrule
from .._registry import UFUNC_RULES
from .._tangents import Thunk
from .._trace import Traced, stop_gradient
from ._register import add_tangents, describe, forward_rule

SQRT_PI = math.sqrt(math.pi)
SQRT_2PI = math.sqrt(2.0 * math.pi)

# scipy.special ufunc name -> its reverse rule; `register()` puts them in the ufunc table.
RULES = {}


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

        @forward_rule(_named(rule, name))
        def frule(primals, tangents):
            (x,), (t,) = primals, tangents
            sp = _scipy_special()
            y = getattr(sp, name)(x)
            return y, None if t is None else derivative(t, x, y, sp)

        RULES[name] = rule
        describe(f"scipy.special.{name}", args, notes, kind="rule", rule=rule, name=f"scipy.special.{name}")
        return derivative

    return register


def _binary(name, d_first, d_second, args, notes=""):
    """Register `scipy.special.<name>(a, b)` with partial derivatives `d_first(g, a, b, y, sp)` and `d_second`."""

    def rule(a, b):
        sp = _scipy_special()
        y = getattr(sp, name)(a, b)

        def back(g):
            return Thunk(lambda: d_first(g, a, b, y, sp)), Thunk(lambda: d_second(g, a, b, y, sp))

        return y, back

    @forward_rule(_named(rule, name))
    def frule(primals, tangents):
        (a, b), (ta, tb) = primals, tangents
        sp = _scipy_special()
        y = getattr(sp, name)(a, b)
        return y, add_tangents(None if ta is None else d_first(ta, a, b, y, sp),
                               None if tb is None else d_second(tb, a, b, y, sp))

    RULES[name] = rule
    describe(f"scipy.special.{name}", args, notes, kind="rule", rule=rule, name=f"scipy.special.{name}")


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


_registered = False


def register():
    """Register the rules for `scipy.special`'s ufuncs (imports SciPy; safe to call twice)."""
    global _registered
    if _registered:
        return
    sp = _scipy_special()
    for name, rule in RULES.items():
        UFUNC_RULES[getattr(sp, name)] = rule
    _registered = True


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


@forward_rule(polygamma_rule)
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


describe(logsumexp, "a, b", _PYTHON_LEVEL.format("logsumexp") + " `return_sign` supported.", kind="composite",
         name="scipy.special.logsumexp")
describe(softmax, "x", _PYTHON_LEVEL.format("softmax"), kind="composite", name="scipy.special.softmax")
describe(log_softmax, "x", _PYTHON_LEVEL.format("log_softmax"), kind="composite", name="scipy.special.log_softmax")
