"""Rules for the numpy.linalg functions built on others, in both modes: svdvals, cond, tensorinv and
tensorsolve, composed of svd, inv, solve and norm (which have rules of their own)."""

import math

import numpy as np

from .._arrays import size_of
from .._extend import frule, primitive, rrule
from .._values import stop_gradient
from ._register import composite


@composite(np.linalg.svdvals, args="x", numpy_value=True, notes="The singular values, as svd(x, compute_uv=False).")
def svdvals(x, /):
    return np.linalg.svd(x, compute_uv=False)


@composite(np.linalg.cond, args="x", numpy_value=True, notes="""The ratio of extreme singular values (p None, 2, -2), or
           norm(x, p) * norm(inv(x), p) for the other norms.""")
def cond(x, p=None):
    plain = np.linalg.cond(stop_gradient(x), p)  # NumPy checks the argument (and its shape)
    if p != -2 and np.any(np.isinf(plain)):
        return singular_cond(x, p)  # NumPy's inf, where the inverse does not exist
    if p is None or p == 2 or p == -2:
        s = np.linalg.svd(x, compute_uv=False)
        r = s[..., 0] / s[..., -1] if p != -2 else s[..., -1] / s[..., 0]
    else:
        r = np.linalg.norm(x, p, axis=(-2, -1)) * np.linalg.norm(np.linalg.inv(x), p, axis=(-2, -1))
    r = np.where(np.isnan(plain), plain, r) if np.any(np.isnan(plain)) else r
    return r if r.dtype == np.result_type(plain) else r.astype(np.result_type(plain))


@primitive
def singular_cond(x, p):
    """`np.linalg.cond(x, p)` where some matrix of `x` is singular (its condition number is inf)."""
    return np.linalg.cond(x, p)


def _no_derivative(*args, **kwargs):
    raise np.linalg.LinAlgError("np.linalg.cond of a singular matrix is inf (its inverse does not exist), and has "
                                "no derivative there.")


@rrule(singular_cond)
def _singular_cond_rule(x, p):
    return singular_cond(x, p), _no_derivative


frule(singular_cond)(_no_derivative)


@composite(np.linalg.tensorinv, args="a")
def tensorinv(a, ind=2):
    # NumPy's steps, so NumPy's errors: a non-square reshape fails in inv with LinAlgError
    if ind <= 0:
        raise ValueError("Invalid ind argument.")
    shape = np.shape(a)
    inverse = np.linalg.inv(np.reshape(a, (math.prod(shape[ind:]), -1)))
    return np.reshape(inverse, shape[ind:] + shape[:ind])


@composite(np.linalg.tensorsolve, args="a, b")
def tensorsolve(a, b, axes=None):
    ndim = np.ndim(a)
    if axes is not None:
        order = list(range(ndim))
        for k in axes:
            order.remove(k)
            order.insert(ndim, k)
        a = np.transpose(a, order)
    shape = np.shape(a)[-(ndim - np.ndim(b)):]
    n = int(np.prod(shape))
    if size_of(a) != n * n:
        raise np.linalg.LinAlgError("Input arrays must satisfy the requirement prod(a.shape[b.ndim:]) == "
                                    "prod(a.shape[:b.ndim])")
    x = np.linalg.solve(np.reshape(a, (n, n)), np.ravel(b))
    return np.reshape(x, shape)
