"""Rules for NumPy's elementwise functions that are not plain one-output ufuncs, in both modes:
sinc, i0 (with the Bessel function I1 its derivative needs), nan_to_num, real_if_close, fix,
unwrap, and the ufuncs with two outputs divmod, modf and frexp; the functions of `np.emath`, which
are complex where their real input leaves the real domain; and the tests of a value (iscomplex, isreal,
isneginf, isposinf), which carry no gradient.
"""

import math

import numpy as np

from .._extend import primitive, rrule
from .._inplace import concrete_of, holds_array
from .._standins import dtype_of
from .._tangents import Thunk
from .._values import Traced, stop_gradient
from ._register import add_tangents, as_array, composite, forward_in_first, forward_rule, rule, without_gradient

_SMALL = 1e-3  # below it, sinc's Taylor polynomial is exact to rounding, with all its derivatives


@composite(np.sinc, args="x", numpy_value=True, notes="sin(πx)/(πx); a Taylor polynomial near 0, so every derivative is right there.")
def sinc(x):
    small = np.abs(stop_gradient(x)) < _SMALL
    z = math.pi * x
    z2 = z * z
    series = 1.0 - z2 / 6.0 + z2 * z2 / 120.0
    safe = math.pi * np.where(small, 1.0, x)
    return np.where(small, series, np.sin(safe) / safe)


@primitive
def bessel_i1(x):
    """The modified Bessel function of the first kind of order one (the derivative of np.i0), by its
    power series, whose terms are all positive (no cancellation)."""
    x = np.asarray(x, dtype=np.result_type(dtype_of(x), np.float16))  # a Python float is float64, not weak
    half_square = (x / 2.0) ** 2
    term = x / 2.0
    total = term
    for k in range(int(np.max(np.abs(x), initial=0.0)) + 40):
        term = term * half_square / ((k + 1) * (k + 2))
        total = total + term
    return total


@rrule(bessel_i1)
def bessel_i1_rule(x):
    y = bessel_i1(x)
    return y, lambda g: (Thunk(lambda: g * _i1_slope(x, y)),)


def _i1_slope(x, y):
    # I1'(x) = I0(x) - I1(x) / x, with the limit 1/2 at 0.
    zero = stop_gradient(x) == 0
    return np.where(zero, 0.5, np.i0(x) - y / np.where(zero, 1.0, x))


@forward_in_first(bessel_i1)
def bessel_i1_frule(t, x):
    y = bessel_i1(x)
    return y, t * _i1_slope(x, y)


@rule(np.i0, args="x", notes="Its derivative is the Bessel function I1, computed by its power series.")
def i0_rule(x):
    y = np.i0(x)
    return y, lambda g: (Thunk(lambda: g * bessel_i1(x)),)


@forward_in_first(np.i0)
def i0_frule(t, x):
    return np.i0(x), t * bessel_i1(x)


@composite(np.nan_to_num, args="x, nan, posinf, neginf", numpy_value=True, notes="""Gradient 1 where x is finite, 0 where a
           value is replaced (the replacements are differentiable). `copy=False` writes into x, as in NumPy.""")
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    plain = stop_gradient(x)
    if not isinstance(x, Traced) or dtype_of(plain).kind not in "fc":
        return np.nan_to_num(plain, copy=copy, nan=stop_gradient(nan), posinf=stop_gradient(posinf),
                             neginf=stop_gradient(neginf))
    if not copy and not holds_array(x):  # a number: NumPy makes no array of it without a copy, and says so
        np.nan_to_num(concrete_of(x), copy=False)
    if np.iscomplexobj(plain):  # NumPy replaces in the real and imaginary parts apart
        parts = (_replaced(np.real(x), nan, posinf, neginf), _replaced(np.imag(x), nan, posinf, neginf))
        y = parts[0] + 1j * parts[1]
    else:
        y = _replaced(x, nan, posinf, neginf)
    y = y if y.dtype == x.dtype else y.astype(x.dtype)
    if not copy and holds_array(x):
        x[...] = y
        return x if x.ndim else x[()]  # (of a 0-d array, NumPy's scalar)
    return y


def _replaced(x, nan, posinf, neginf):
    plain = stop_gradient(x)
    limits = np.finfo(dtype_of(plain))
    big = limits.max if posinf is None else posinf
    small = limits.min if neginf is None else neginf
    return np.where(np.isnan(plain), nan, np.where(np.isposinf(plain), big, np.where(np.isneginf(plain), small, x)))


@composite(np.real_if_close, args="a", numpy_value=True, notes="Real input: the input itself. Complex input close to real: its real part.")
def real_if_close(a, tol=100):
    plain = np.real_if_close(stop_gradient(a), tol)
    if np.iscomplexobj(plain) or not np.iscomplexobj(stop_gradient(a)):
        return a
    return np.real(a)


@composite(np.fix, args="none", kind="none", notes="Rounds toward zero: piecewise constant, no gradient.")
def fix(x, out=None):
    if out is not None:
        raise TypeError("numpy.fix: out= is not supported on tracked values; drop out= and assign the result "
                        "instead (y = np.fix(x)), or write it into an existing array (z[...] = np.fix(x)).")
    return np.fix(stop_gradient(x))


@composite(np.unwrap, args="p", notes="""Adds multiples of the period (piecewise constant, no gradient), so the
           gradient of each element is 1; `discont` and `period` are plain.""")
def unwrap(p, discont=None, axis=-1, *, period=2 * math.pi):
    plain = stop_gradient(p)
    unwrapped = np.unwrap(plain, discont, axis, period=stop_gradient(period))
    shift = unwrapped - plain
    return p + shift if shift.dtype == np.result_type(p) else (p + shift).astype(unwrapped.dtype)


# --- the ufuncs with two outputs -------------------------------------------------------------------
@rule(np.divmod, args="x1, x2", notes="""The quotient is piecewise constant (no gradient); the remainder's
      derivatives are those of np.remainder.""")
def divmod_rule(a, b):
    q, r = np.divmod(a, b)

    def back(gs):
        g = gs[1]
        if g is None:
            return None, None
        return g, Thunk(lambda: -g * q)

    return (q, r), back


@forward_rule(np.divmod)
def divmod_frule(primals, tangents):
    (a, b), (ta, tb) = primals, tangents
    q, r = np.divmod(a, b)
    dot = add_tangents(ta, None if tb is None else -tb * q)
    return (q, r), (None if dot is None else np.zeros(np.shape(q), dtype=np.result_type(q)), dot)


@rule(np.modf, args="x", notes="The fractional part has derivative 1; the integral part none.")
def modf_rule(x):
    parts = np.modf(x)
    return parts, lambda gs: (gs[0],)


@forward_in_first(np.modf)
def modf_frule(t, x):
    frac, whole = np.modf(x)
    return (frac, whole), (t + 0.0 * frac, np.zeros(np.shape(whole), dtype=np.result_type(whole)))


@rule(np.frexp, args="x", notes="The mantissa x / 2**e has derivative 2**-e; the exponent is an integer.")
def frexp_rule(x):
    mantissa, exponent = np.frexp(x)
    return (mantissa, exponent), lambda gs: (None if gs[0] is None else np.ldexp(gs[0], -exponent),)


@forward_in_first(np.frexp)
def frexp_frule(t, x):
    mantissa, exponent = np.frexp(x)
    return (mantissa, exponent), (np.ldexp(t, -exponent), None)



# --- np.emath: the complex function where a real input leaves the real domain --------------------------
# Each converts its input as NumPy's does, then applies the ufunc, whose (complex) rules differentiate it.
_EMATH_NOTES = """As NumPy computes it: the complex function where a real input is out of the real
      function's domain (the choice of complex or real is piecewise constant), so its derivative is the
      complex function's."""
# the real and complex types NumPy's np.emath makes complex64 (others become complex128)
_TO_COMPLEX64 = (np.single, np.byte, np.short, np.ubyte, np.ushort, np.csingle)


def _complex_where(x, outside):
    """`x` as np.emath passes it on: complex if some real entry is `outside` the real function's domain."""
    x = as_array(x)
    plain = stop_gradient(x)
    if np.any(np.isreal(plain) & outside(plain)):
        dtype = np.complex64 if issubclass(np.result_type(plain).type, _TO_COMPLEX64) else np.complex128
        return x.astype(dtype)
    return x


def _below_zero(x):
    return x < 0


def _beyond_one(x):
    return np.abs(x) > 1


def _emath_of(ufunc, outside):
    """np.emath's form of the one-argument `ufunc`: `ufunc` of the input made complex where a real entry
    is `outside` the real function's domain."""
    def emath_form(x):
        return ufunc(_complex_where(x, outside))
    emath_form.__name__ = emath_form.__qualname__ = f"emath_{ufunc.__name__}"
    return emath_form


for _name, _outside in (("sqrt", _below_zero), ("log", _below_zero), ("log2", _below_zero), ("log10", _below_zero),
                        ("arctanh", _beyond_one), ("arcsin", _beyond_one), ("arccos", _beyond_one)):
    composite(getattr(np.emath, _name), args="x", notes=_EMATH_NOTES)(_emath_of(getattr(np, _name), _outside))


@composite(np.emath.logn, args="n, x", notes=_EMATH_NOTES)
def emath_logn(n, x):
    x = _complex_where(x, _below_zero)
    return np.log(x) / np.log(_complex_where(n, _below_zero))


@composite(np.emath.power, args="x, p", notes=_EMATH_NOTES + " A negative integer power is taken as a float.")
def emath_power(x, p):
    x = _complex_where(x, _below_zero)
    p = as_array(p)
    plain = stop_gradient(p)
    if np.any(np.isreal(plain) & (plain < 0)):  # as NumPy: an integer power below zero as a float
        p = p * 1.0
    return np.power(x, p)


without_gradient(np.iscomplex, np.isreal, np.isneginf, np.isposinf)
