"""Rules for NumPy's polynomial functions (coefficients highest power first), in both modes:
polyval (in the coefficients and x), polyadd, polysub, polymul, polydiv, polyder, polyint (in the
coefficients and the integration constants), polyfit (in x, y and the weights), poly (in the
roots) and roots (in the coefficients, where the roots are real and simple). Each is composed of
operations with rules of their own, except roots, which has its own pair.
"""

import numpy as np

from .._extend import primitive, rrule
from .._standins import is_stand_in
from .._tangents import Thunk
from .._values import Traced, stop_gradient, strip_all
from ._register import as_array, composite, forward_in_first


def _coefficients(p):
    p = np.atleast_1d(p)
    return p if isinstance(p, Traced) else np.asarray(p)


def _plain(p):
    """The plain value of coefficients `p` as NumPy reads them (a list as an array); a `pb.jit` stand-in as it is,
    so that the NumPy call made of it is recorded."""
    plain = stop_gradient(p)
    return plain if is_stand_in(plain) else np.asarray(plain)


def _plain_polynomial(*args):
    return any(isinstance(a, np.poly1d) for a in args)


@composite(np.polyval, args="p, x", notes="Horner's scheme.")
def polyval(p, x):
    if _plain_polynomial(p):
        p = np.asarray(p.coeffs)
    if isinstance(x, np.poly1d):
        raise TypeError("numpy.polyval(p, x) of an np.poly1d x (a composition of polynomials) is not differentiated "
                        "by pullback: evaluate at an array of points, or compose with np.polymul and np.polyadd of "
                        "the coefficients.")
    plain = np.polyval(_plain(p), stop_gradient(x))
    y = np.zeros(np.shape(plain), dtype=np.result_type(plain))
    for k in range(np.shape(p)[0]):
        y = y * x + p[k]
    y = np.reshape(y, np.shape(plain)) if np.shape(y) != np.shape(plain) else y
    return y if np.result_type(stop_gradient(y)) == plain.dtype else y.astype(plain.dtype)


def _padded(a, n):
    short = n - np.shape(a)[0]
    if short == 0:
        return a
    return np.concatenate([np.zeros(short, dtype=np.result_type(stop_gradient(a))), a])


def _add_or_subtract(sign):
    def run(a1, a2):
        a1, a2 = _coefficients(a1), _coefficients(a2)
        n = max(np.shape(a1)[0], np.shape(a2)[0])
        return _padded(a1, n) + sign * _padded(a2, n) if sign > 0 else _padded(a1, n) - _padded(a2, n)

    return run


composite(np.polyadd, args="a1, a2", notes="The shorter one padded with leading zeros.")(_add_or_subtract(1))
composite(np.polysub, args="a1, a2", notes="The shorter one padded with leading zeros.")(_add_or_subtract(-1))


def _leading_zeros(a):
    """How many leading entries np.poly1d drops from coefficients `a`: its leading zeros (all but one if all
    are zero). Under `pb.jit` the count is recorded and guarded: coefficients with another count trace again."""
    plain = _plain(a)
    if is_stand_in(plain):
        return int(plain.record_primitive(_zeros_dropped, "leading zeros", (plain,), {}))
    return _zeros_dropped(plain)


def _zeros_dropped(plain):
    nonzero = np.flatnonzero(plain)
    return int(nonzero[0]) if nonzero.size else np.shape(plain)[0] - 1


@composite(np.polymul, args="a1, a2", notes="""A convolution of the coefficients; the leading entries NumPy drops (its
           inputs' leading zeros) are dropped from the result, so a leading zero keeps its derivative.""")
def polymul(a1, a2):
    a1, a2 = _coefficients(a1), _coefficients(a2)
    # the full convolution's first entries are exact zeros where either input has leading zeros: dropped after
    # (not before, which would lose the derivative in those coefficients)
    return np.convolve(a1, a2)[_leading_zeros(a1) + _leading_zeros(a2):]


@composite(np.polyder, args="p")
def polyder(p, m=1):
    m = int(m)
    if m < 0:
        raise ValueError("Order of derivative must be positive (see polyint)")
    p = _coefficients(p)
    for _ in range(m):
        n = np.shape(p)[0] - 1
        p = p[:-1] * np.arange(n, 0, -1)
    return p


@composite(np.polyint, args="p, k", notes="The integration constants `k` are differentiable too.")
def polyint(p, m=1, k=None):
    m = int(m)
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    k = np.zeros(m) if k is None else np.atleast_1d(as_array(k))
    if np.shape(k)[0] == 1 and m > 1:  # one constant for every order, as in NumPy
        k = k[0] * np.ones(m)
    if np.shape(k)[0] < m:
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or >m.")
    p = _coefficients(p)
    for j in range(m):  # each constant as NumPy appends it: its own value, never mixed with the coefficients
        p = np.concatenate([p / np.arange(np.shape(p)[0], 0, -1), k[j:j + 1]])
    return p


@composite(np.polydiv, args="u, v", numpy_value=True, notes="Long division; the remainder's leading near-zeros are dropped, as in NumPy.")
def polydiv(u, v):
    plain_q, plain_r = np.polydiv(_plain(u), _plain(v))  # NumPy's checks (and the remainder's length)
    u, v = _coefficients(u) * 1.0, _coefficients(v) * 1.0
    m, n = np.shape(u)[0] - 1, np.shape(v)[0] - 1
    quotient, r = [], u
    for k in range(max(m - n + 1, 0)):
        d = r[k] / v[0]
        quotient.append(d)
        r = np.concatenate([r[:k], r[k:k + n + 1] - d * v, r[k + n + 1:]])
    q = np.stack(quotient) if quotient else np.zeros(1)
    r = r[np.shape(r)[0] - np.shape(plain_r)[0]:]
    return q, r


@composite(np.polyfit, args="x, y, w", numpy_value=True, notes="""Least squares through numpy.linalg.lstsq, scaled as NumPy
           scales it; `full` and `cov` as in NumPy (the rank and singular values carry no gradient).""")
def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    np.polyfit(stop_gradient(x), stop_gradient(y), deg, rcond, full, stop_gradient(w), cov)  # NumPy's checks
    order = int(deg) + 1
    x, y = as_array(x) * 1.0, as_array(y) * 1.0
    w = None if w is None else as_array(w)
    rcond = len(x) * np.finfo(np.result_type(stop_gradient(x))).eps if rcond is None else rcond
    lhs = np.vander(x, order)
    rhs = y
    if w is not None:
        lhs = lhs * w[:, None]
        rhs = rhs * (w if np.ndim(rhs) == 1 else w[:, None])
    scale = np.sqrt(np.sum(lhs * lhs, axis=0))
    lhs = lhs / scale
    c, residuals, rank, s = np.linalg.lstsq(lhs, rhs, rcond)
    c = (c.T / scale).T
    if full:
        return c, residuals, rank, s, rcond
    if not cov:
        return c
    base = np.linalg.inv(lhs.T @ lhs) / np.outer(scale, scale)
    if cov == "unscaled":
        factor = 1.0
    else:
        if len(stop_gradient(x)) <= order:
            raise ValueError("the number of data points must exceed order to scale the covariance matrix")
        factor = residuals / (len(stop_gradient(x)) - order)
    if np.ndim(y) == 1:
        return c, base * factor
    return c, base[:, :, None] * factor


@composite(np.poly, args="seq_of_zeros", numpy_value=True, notes="""From real roots: a product of (x - r). From a square
           matrix: refused (its eigenvalues may be complex).""")
def poly(seq_of_zeros):
    plain = np.poly(strip_all(seq_of_zeros))  # NumPy's checks (of plain values: a list may hold traced ones)
    if np.ndim(seq_of_zeros) != 1:
        raise NotImplementedError("numpy.poly of a tracked matrix is not supported: pass its (real) eigenvalues.")
    y = np.ones(1)
    for k in range(np.shape(seq_of_zeros)[0]):
        y = np.convolve(y, np.stack([1.0 + 0.0 * seq_of_zeros[k], -seq_of_zeros[k]]))
    return y if y.dtype == np.result_type(plain) else y.astype(np.result_type(plain))


@primitive
def real_roots(p):
    """`np.roots(p)` when every root is real (and simple, for a derivative to exist)."""
    r = np.roots(p)
    if np.iscomplexobj(r):
        raise NotImplementedError("numpy.roots of tracked coefficients: some roots are complex, which pullback "
                                  "does not differentiate here; only real roots are supported.")
    return r


def _root_sensitivity(p, r):
    """-r_i ** (N-1-k) / p'(r_i): how root i moves with coefficient k (the implicit function theorem)."""
    n = np.shape(p)[0]
    slope = np.polyval(np.polyder(p), r)
    if np.any(stop_gradient(slope) == 0):
        raise ValueError("numpy.roots: a repeated root has no derivative (it moves as the square root of a change of "
                         "the coefficients). Symmetric functions of the roots have one: their sum is -p[1] / p[0], "
                         "their product (-1)**n * p[n] / p[0]; compute those from the coefficients.")
    return -np.vander(r, n) / slope[:, None]


@rrule(real_roots)
def real_roots_rule(p):
    r = real_roots(p)
    return r, lambda g: (Thunk(lambda: g @ _root_sensitivity(p, r)),)


@forward_in_first(real_roots)
def real_roots_frule(t, p):
    r = real_roots(p)
    return r, _root_sensitivity(p, r) @ t


@composite(np.roots, args="p", notes="""Real, simple roots: dr = -(Σ r^(n-k) dp_k) / p'(r). Complex roots
           are refused; at a repeated root the derivative does not exist (an error).""")
def roots(p):
    p = _coefficients(p)
    if np.ndim(p) != 1:
        raise ValueError("Input must be a rank-1 array.")
    if np.size(p) == 0 or not np.any(stop_gradient(p)):
        return np.roots(stop_gradient(p))
    return real_roots(p)
