"""Rules for norms: `np.linalg.norm`, `vector_norm` and `matrix_norm`, every order, in both modes.

The 2-norm (and the Frobenius norm) is one primitive with rules of its own; the other orders are
written with abs, sums, max and min, and the singular values (see decompositions.py).
"""

import numpy as np

from .._arrays import speaks_nep18
from .._compat import EMPTY_NORMS_ARE_ZERO
from .._extend import primitive, rrule
from .._standins import is_traced
from .._values import stop_gradient
from ._register import composite, forward_in_first, refuse_second_order_at_kink, with_numpy_value
from .reductions import expand_to


@primitive
def euclidean_norm(x, axis, keepdims, vector=False):
    """The 2-norm of `x` over `axis` (None: all of it; a tuple: several axes, Frobenius for two), as
    `np.linalg.norm` computes it, or `np.linalg.vector_norm` with `vector` (they round differently)."""
    if speaks_nep18(type(x)):  # Dask has no vector_norm (NumPy's would compute it); CuPy computes this as fast
        return np.sqrt(np.sum(np.real(x * np.conjugate(x)), axis=axis, keepdims=keepdims))
    if vector:
        return np.linalg.vector_norm(x, axis=axis, keepdims=keepdims)
    return np.linalg.norm(x, axis=axis, keepdims=keepdims)


@rrule(euclidean_norm)
def _euclidean_rule(x, axis, keepdims, vector=False):
    y = euclidean_norm(x, axis, keepdims, vector)
    shape = np.shape(x)

    def back(g):
        norm = expand_to(y, shape, axis, keepdims)
        zero = norm == 0
        refuse_second_order_at_kink(x, lambda: zero, "the 2-norm (np.linalg.norm)")
        share = np.where(zero, 0.0, expand_to(g, shape, axis, keepdims) / np.where(zero, 1.0, norm))
        return (share * (np.conjugate(x) if np.iscomplexobj(x) else x), None, None, None)

    return y, back


@forward_in_first(euclidean_norm)
def _euclidean_frule(t, x, axis, keepdims, vector=False):
    y = euclidean_norm(x, axis, keepdims, vector)
    zero = y == 0
    refuse_second_order_at_kink(x, lambda: expand_to(zero, np.shape(x), axis, keepdims), "the 2-norm (np.linalg.norm)")
    pairing = np.real(np.sum(np.conjugate(x) * t, axis=axis, keepdims=keepdims)) if np.iscomplexobj(x) else \
        np.sum(x * t, axis=axis, keepdims=keepdims)
    return y, np.where(zero, 0.0, pairing / np.where(zero, 1.0, y))


def _vector_norm(x, ord, axis, keepdims, vector=False):
    if is_traced(ord):  # a learned order: the general formula, whose derivative in the order the others lack
        return _learned_order_norm(x, ord, axis, keepdims)
    if ord is None or ord == 2:
        return euclidean_norm(x, axis, keepdims, vector)
    if ord == np.inf:
        return _largest(np.abs(x), axis, keepdims)
    if ord == -np.inf:
        return np.min(np.abs(x), axis=axis, keepdims=keepdims)
    if ord == 0:
        plain = stop_gradient(x)
        return np.sum(plain != 0, axis=axis, keepdims=keepdims).astype(plain.real.dtype)
    if ord == 1:
        return np.sum(np.abs(x), axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    return _power_norm(x, ord, axis, keepdims)


def _power_norm(x, ord, axis, keepdims):
    """(sum |x|^ord)^(1/ord) for a finite, nonzero `ord`."""
    if ord < 0:
        return _negative_order_norm(x, ord, axis, keepdims)
    total = np.sum(np.abs(x) ** ord, axis=axis, keepdims=keepdims)
    if ord < 1:
        return total ** (1.0 / ord)
    # at a zero vector, total^(1/p - 1) is inf and |x|^(p-1) is 0: the subgradient 0, as the 2-norm's
    zero = stop_gradient(total) == 0
    return (total + zero) ** (1.0 / ord) * ~zero  # arithmetic, not np.where: a number stays a NumPy scalar


def _learned_order_norm(x, ord, axis, keepdims):
    """The p-norm of `x` for an order `ord` being differentiated (as in generalized-mean pooling)."""
    p = stop_gradient(ord)
    if np.ndim(p) != 0 or not np.isfinite(p) or p == 0:
        raise ValueError(f"A norm's order being differentiated must be one finite, nonzero number, not {p!r}: "
                         "the norms of order inf, -inf and 0 do not vary smoothly with the order.")
    return _power_norm(x, ord, axis, keepdims)


def _negative_order_norm(x, ord, axis, keepdims):
    """(sum |x|^ord)^(1/ord) for ord < 0. A zero entry (or one whose power overflows) makes the sum inf and
    the norm 0; near there the norm is about that entry's |x_i|, so every entry gets abs's subgradient at
    0, which is 0 (the formula would give inf * 0)."""
    infinite = np.isinf(np.sum(np.abs(stop_gradient(x)) ** ord, axis=axis, keepdims=True))  # NumPy's warnings
    total = np.sum(np.where(infinite, 1.0, np.abs(x)) ** ord, axis=axis, keepdims=keepdims)
    finite = ~(infinite if keepdims else np.squeeze(infinite, axis=axis))
    return total ** (1.0 / ord) * finite  # arithmetic, not np.where: a number stays a NumPy scalar


def _largest(y, axis, keepdims=False):
    """`np.max` along `axis`, 0 for an empty axis (NumPy's norms take their maxima with initial=0 from NumPy
    2.3; NumPy 2.2's raise there, and so does this)."""
    if np.shape(y)[axis] == 0 and EMPTY_NORMS_ARE_ZERO:
        return np.max(y, axis=axis, keepdims=keepdims, initial=0.0)
    return np.max(y, axis=axis, keepdims=keepdims)


def _matrix_norm(x, ord, axes, keepdims):
    if is_traced(ord):
        raise ValueError("A matrix norm's order takes one of a few values (1, 2, inf, -1, -2, -inf, 'fro', 'nuc'), "
                         "so it has no derivative: pass it as a plain number, or take a vector norm (axis=...) for "
                         "an order being differentiated.")
    row, col = (k % np.ndim(x) for k in axes)
    if row == col:
        raise ValueError("Duplicate axes given.")
    if ord is None or ord in ("fro", "f"):  # 'f': NumPy's alias of 'fro'
        return euclidean_norm(x, (row, col), keepdims)
    if ord in ("nuc", 2, -2):  # NumPy's own value: the singular values alone round differently from svd's
        s = np.linalg.svd(np.moveaxis(x, (row, col), (-2, -1)), compute_uv=False)
        y = {"nuc": np.sum, 2: _largest, -2: np.min}[ord](s, axis=-1)
        y = with_numpy_value(y, np.linalg.norm, x, ord, (row, col))
    elif ord in (1, -1):
        pick = _largest if ord == 1 else np.min
        y = pick(np.sum(np.abs(x), axis=row), axis=col - 1 if col > row else col)
    elif ord in (np.inf, -np.inf):
        pick = _largest if ord == np.inf else np.min
        y = pick(np.sum(np.abs(x), axis=col), axis=row - 1 if row > col else row)
    else:
        raise ValueError("Invalid norm order for matrices.")
    if keepdims:
        y = np.expand_dims(y, tuple(sorted((row, col))))
    return y


@composite(np.linalg.norm, args="x", notes="""All vector and matrix orders. At a zero vector the
      2-norm gets gradient 0 (a subgradient), and a Hessian through it raises. Orders 2, -2 and 'nuc'
      go through the singular values (see svd); ord=0 counts nonzeros and has no gradient.""")
def norm(x, ord=None, axis=None, keepdims=False):
    if is_traced(ord):  # a learned order: NumPy's value, and the formula's derivative (in the order too)
        return with_numpy_value(_norm(x, ord, axis, keepdims), np.linalg.norm, x, ord, axis, keepdims)
    return _norm(x, ord, axis, keepdims)


def _norm(x, ord, axis, keepdims):
    ndim = np.ndim(x)
    if axis is None:
        if ord is None or (not is_traced(ord) and ((ord in ("f", "fro") and ndim == 2) or (ord == 2 and ndim == 1))):
            return euclidean_norm(x, None, keepdims)
        axis = tuple(range(ndim))
        if ndim not in (1, 2):
            raise ValueError("Improper number of dimensions to norm.")
    elif not isinstance(axis, tuple):
        axis = (_as_axis(axis),)
    if len(axis) == 1:
        return _vector_norm(x, ord, axis[0], keepdims)
    if len(axis) == 2:
        return _matrix_norm(x, ord, axis, keepdims)
    raise ValueError("Improper number of dimensions to norm.")


def _as_axis(axis):
    """One axis, converted with int() as np.linalg.norm converts it (axis=1.0 is axis 1)."""
    try:
        return int(axis)
    except Exception as e:
        raise TypeError("'axis' must be None, an integer or a tuple of integers") from e


@composite(np.linalg.vector_norm, args="x", notes="As `norm` for vectors; `axis` may be a tuple.")
def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    if is_traced(ord):  # a learned order: NumPy's value, and the formula's derivative (in the order too)
        return with_numpy_value(_vector_norm_of(x, axis, keepdims, ord), np.linalg.vector_norm, x, axis=axis,
                                keepdims=keepdims, ord=ord)
    return _vector_norm_of(x, axis, keepdims, ord)


def _vector_norm_of(x, axis, keepdims, ord):
    if ord is None or (not is_traced(ord) and ord == 2):
        return euclidean_norm(x, axis, keepdims, True)
    if axis is None:
        result = _vector_norm(np.ravel(x), ord, 0, False, True)
        return np.reshape(result, (1,) * np.ndim(x)) if keepdims else result
    if isinstance(axis, tuple):  # as NumPy does it: the axes moved first and merged into one
        axes = tuple(k % np.ndim(x) for k in axis)
        rest = tuple(k for k in range(np.ndim(x)) if k not in axes)
        moved = np.transpose(x, axes + rest)
        flat = np.reshape(moved, (-1,) + tuple(np.shape(x)[k] for k in rest))
        result = _vector_norm(flat, ord, 0, False, True)
        if keepdims:
            result = np.expand_dims(result, tuple(sorted(k % np.ndim(x) for k in axis)))
        return result
    return _vector_norm(x, ord, axis, keepdims, True)


@composite(np.linalg.matrix_norm, args="x", notes="As `norm` over the last two axes.")
def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    return _matrix_norm(x, ord, (-2, -1), keepdims)
