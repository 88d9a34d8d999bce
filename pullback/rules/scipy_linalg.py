"""Differentiable versions of more of `scipy.linalg`, public as `pullback.scipy.linalg` (with the
solves, Cholesky, LU and expm of `pullback.rules.linalg`). SciPy's functions convert their
input with `np.asarray`, so calls to them never reach pullback; these have SciPy's signatures
and call SciPy itself when nothing is being differentiated.

Three mechanisms, each general:

- SciPy's versions of NumPy's decompositions and solves (inv, solve, det, cholesky, eigh, svd,
  qr, lu, pinv, lstsq, norm, ...) run through NumPy's rules, on the matrix SciPy actually reads
  (`solve(assume_a="pos")` reads one triangle, ...). The result is SciPy's own value: SciPy
  computes it, eigenvector and singular vector signs follow SciPy's, and if the two ever
  disagree beyond rounding (a repeated eigenvalue, where the vectors are not unique) the call
  raises instead of differentiating a different answer.
- Matrix functions (sqrtm, logm, cosm, sinm, tanm, coshm, sinhm, tanhm, signm,
  fractional_matrix_power) are primitives: the Fréchet derivative L(A, E) of a primary matrix
  function f is the upper right block of f([[A, E], [0, A]]), and its adjoint is L(Aᵀ, ·).
- Sylvester's equation A X + X B = Q is a primitive: dX solves the same equation with
  dQ - dA X - X dB, and the adjoint solves it with Aᵀ and Bᵀ. The Lyapunov solvers are written
  with it, as SciPy writes them.

Structured matrices (toeplitz, circulant, hankel, block_diag, companion, ...) and the banded
solvers are written with differentiable indexing and the solves above.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy.linalg import sqrtm
>>> pb.gradient(lambda a: np.trace(sqrtm(a)), np.diag([4.0, 9.0]))[0]  # d tr √A / dA = ½ A^(-1/2)
array([[0.25      , 0.        ],
       [0.        , 0.16666667]])
"""

import functools

import numpy as np

from .._extend import frule, primitive, rrule
from .._jit_trace import JitError
from .._tangents import Thunk
from .._values import Traced, stop_gradient
from . import linalg as one_matrix
from ._register import add_tangents, describe, numpy_valued
from .linalg import (
    check_finite_values,
    cho_factor_matrix,
    cho_solve_with_flag,
    conjugate_transposed,
    is_transposed,
    matrix_exponential,
    pivot_permutation,
    triangular_solve,
    unit_scale,
)
from .special import RecordedModule, scipy_call, scipy_valued, stand_in_among


def _linalg():
    """`scipy.linalg`, its functions recorded whole inside `pb.jit`."""
    import scipy.linalg

    return RecordedModule(scipy.linalg)


def _any_tracked(*values):
    return any(isinstance(v, Traced) for v in values)


def _t(a):
    return np.swapaxes(a, -1, -2)


def _h(a):
    """The conjugate transpose (the transpose, for a real matrix)."""
    return np.conj(_t(a)) if np.iscomplexobj(stop_gradient(a)) else _t(a)


def _plain(value):
    return stop_gradient(value) if isinstance(value, Traced) else value


def _agree(value, exact, what, scale=None):
    """`value` (traced), carrying SciPy's `exact` value: the two must agree to rounding (relative to `scale`,
    by default the largest magnitude of `exact`). Inside `pb.jit` each replay checks its own values."""
    return numpy_valued(value, scipy_call(_checked, stop_gradient(value), exact, what, scale))


def _checked(plain, given, what, scale):
    """SciPy's value `given`, once the differentiated value `plain` is found to agree with it."""
    plain, exact = np.asarray(plain), np.asarray(given)
    if plain.shape != exact.shape:
        raise RuntimeError(f"pullback.scipy.linalg.{what}: shape {plain.shape} differs from SciPy's {exact.shape}.")
    # Loose enough for the rounding of an ill-conditioned problem solved two ways; tight enough to catch another
    # answer (a flipped or rotated basis where the result is not unique).
    tol = 1e-2 if np.finfo(np.result_type(plain.dtype, exact.dtype, np.float32)).bits <= 32 else 1e-6
    finite = np.isfinite(exact)
    if scale is None:
        scale = float(np.max(np.abs(exact[finite]))) if finite.any() else 0.0
    with np.errstate(invalid="ignore"):  # inf - inf where both overflowed: equal, so they agree
        close = (plain == exact) | (np.isnan(plain) & np.isnan(exact)) | (np.abs(plain - exact) <= tol * max(scale, 1e-300))
    if not np.all(close):
        gap = np.abs(plain - exact)[~close]
        raise RuntimeError(f"pullback.scipy.linalg.{what}: the value pullback differentiates differs from SciPy's "
                           f"(by {float(np.max(gap)):.3g}): the result is not unique here (a repeated "
                           "eigenvalue or singular value) or the problem is too ill-conditioned to differentiate.")
    return given  # SciPy's value and type (a NumPy scalar where SciPy gives one)


def _aligned(vectors, exact, axis=-2):
    """`vectors` with each vector's sign (phase, for complex ones) turned to match SciPy's `exact` (it is arbitrary)."""
    inner = np.sum(np.conj(stop_gradient(vectors)) * exact, axis=axis, keepdims=True)
    size = np.abs(inner)
    return vectors * np.where(size == 0, 1.0, inner / np.where(size == 0, 1.0, size))


def _square_2d(name, a):
    shape = np.shape(stop_gradient(a))
    if len(shape) != 2 or shape[0] != shape[1]:
        raise NotImplementedError(f"pullback.scipy.linalg.{name} on traced values takes one square 2-D matrix, "
                                  f"got shape {shape}.")


# --- SciPy's versions of NumPy's decompositions and solves ------------------------------------
_STRUCTURES = {"gen": "general", "general": "general", "sym": "symmetric", "symmetric": "symmetric",
               "her": "hermitian", "hermitian": "hermitian", "pos": "hermitian", "positive definite": "hermitian",
               "diagonal": "diagonal", "tridiagonal": "tridiagonal", "upper triangular": "upper",
               "lower triangular": "lower", "banded": "general"}


def _read(a, assume_a, lower):
    """The matrix SciPy's solvers read for `assume_a`: one triangle mirrored for symmetric kinds, ..."""
    kind = _STRUCTURES.get(assume_a if assume_a is not None else "gen")
    if kind is None:
        raise ValueError(f"{assume_a!r} is not a recognized matrix structure")
    if kind == "symmetric":
        return np.tril(a) + _t(np.tril(a, -1)) if lower else np.triu(a) + _t(np.triu(a, 1))
    if kind == "hermitian":
        return _hermitian(a, lower)
    if kind == "diagonal":
        return np.tril(np.triu(a))
    if kind == "tridiagonal":
        return np.tril(np.triu(a, -1), 1)
    if kind == "upper":
        return np.triu(a)
    if kind == "lower":
        return np.tril(a)
    return a


def _hermitian(a, lower):
    """The Hermitian matrix LAPACK's Hermitian routines read from one triangle of `a`: the other mirrored and
    conjugated, the diagonal's imaginary part ignored (symmetric, for a real matrix)."""
    strict = np.tril(a, -1) if lower else np.triu(a, 1)
    diagonal = np.tril(np.triu(a))
    if np.iscomplexobj(stop_gradient(a)):
        return strict + _h(strict) + np.real(diagonal)
    return strict + _t(strict) + diagonal


def inv(a, overwrite_a=False, check_finite=True, *, assume_a=None, lower=False):
    """`scipy.linalg.inv`, differentiable (in the part of `a` that `assume_a` reads)."""
    linalg = _linalg()
    # given only where set: SciPy 1.15's inv (the newest for Python 3.10) has neither, and raises its TypeError
    options = {} if assume_a is None and lower is False else {"assume_a": assume_a, "lower": lower}
    if not _any_tracked(a):
        return linalg.inv(a, overwrite_a, check_finite, **options)
    if check_finite:
        check_finite_values(a)
    exact = linalg.inv(stop_gradient(a), check_finite=check_finite, **options)
    return _agree(np.linalg.inv(_read(a, assume_a, lower)), exact, "inv")


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True, assume_a=None, transposed=False):
    """`scipy.linalg.solve`, differentiable in `a` (the part `assume_a` reads) and `b`; batched as SciPy's.

    >>> import numpy as np, pullback as pb
    >>> a = np.array([[2.0, 1.0], [9.0, 4.0]])  # assume_a="pos" reads the upper triangle only
    >>> pb.gradient(lambda a: np.sum(solve(a, np.ones(2), assume_a="pos")), a)[0]
    array([[-0.18367347, -0.12244898],
           [ 0.        , -0.02040816]])
    >>> stack = np.stack([np.eye(2), 4.0 * np.eye(2)])  # a stack of matrices, one right-hand side
    >>> pb.gradient(lambda b: np.sum(solve(stack, b)), np.ones(2))[0]
    array([1.25, 1.25])
    """
    linalg = _linalg()
    if not _any_tracked(a, b):
        return linalg.solve(a, b, lower, overwrite_a, overwrite_b, check_finite, assume_a, transposed)
    if check_finite:
        check_finite_values(a, b)
    exact = linalg.solve(_plain(a), _plain(b), lower, check_finite=check_finite, assume_a=assume_a, transposed=transposed)
    if np.size(_plain(a)) == 1:
        return _agree(_divided(a, b), exact, "solve")
    m = _read(a, assume_a, lower)
    return _agree(np.linalg.solve(_t(m) if transposed else m, b), exact, "solve")


def _divided(a, b):
    """SciPy's `solve` for an `a` of one element, whatever `assume_a` says: b / a, for a `b` of any length."""
    a = a if np.ndim(_plain(a)) >= 2 else np.reshape(a, (1, 1))
    if np.ndim(_plain(b)) >= 2:
        return b / a
    return (np.reshape(b, (-1, 1)) / a)[..., 0]


# --- stacks for the triangular, Cholesky and LU solves ---------------------------------------------
# pullback.rules.linalg's versions take one matrix; SciPy's take stacks of them in leading axes, broadcast against
# b's (a 1-D b is one vector for every matrix). A stack goes through the same triangular solves, batched (their
# rules take a stack of matrices with a stack of matrices, so a vector b is solved as a column), or, for LU, whose
# pivots differ from matrix to matrix, one matrix at a time, as SciPy does; one matrix goes to those versions.
def _stacked(value):
    return np.ndim(_plain(value)) > 2


def _on_columns(solve, b):
    """`solve(b)`, with a vector `b` solved as a column."""
    if np.ndim(_plain(b)) != 1:
        return solve(b)
    return solve(np.expand_dims(b, -1))[..., 0]


def _triangular(a, b, *, trans, lower, unit_diagonal):
    if conjugate_transposed(trans, a):
        return np.conj(triangular_solve(a, np.conj(b), True, lower, unit_diagonal))
    is_transposed(trans)  # SciPy's error for another value
    # SciPy's own code passed on: for a real `a`, 2 ("C") solves with Aᵀ as 1 does, but SciPy rounds it otherwise
    return triangular_solve(a, b, {"N": 0, "T": 1, "C": 2}.get(trans, trans), lower, unit_diagonal)


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, check_finite=True):
    """`scipy.linalg.solve_triangular`, differentiable in `a` (its triangle) and `b`; batched as SciPy's.

    >>> import numpy as np, pullback as pb
    >>> a = np.array([[[2.0, 0.0], [1.0, 1.0]], [[1.0, 0.0], [0.0, 4.0]]])
    >>> pb.gradient(lambda b: np.sum(solve_triangular(a, b, lower=True)), np.array([1.0, 1.0]))[0]
    array([1.  , 1.25])
    """
    if not _any_tracked(a, b):
        return one_matrix.solve_triangular(a, b, trans, lower, unit_diagonal, overwrite_b, check_finite)
    if check_finite:
        check_finite_values(a, b)
    solve = functools.partial(_triangular, a, trans=trans, lower=lower, unit_diagonal=unit_diagonal)
    return _on_columns(solve, b) if _stacked(a) else solve(b)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """`scipy.linalg.cho_factor`, differentiable in the triangle it reads; for a stack, SciPy's `[c, flags]`.

    >>> import numpy as np, pullback as pb
    >>> stack = np.stack([4.0 * np.eye(2), 9.0 * np.eye(2)])
    >>> pb.gradient(lambda s: np.sum(cho_factor(s, lower=True)[0]), stack)[0][1]  # L = [[√s₀₀, 0], [s₁₀/√s₀₀, ...]]
    array([[0.16666667, 1.        ],
           [0.33333333, 0.16666667]])
    """
    if not _any_tracked(a) or not _stacked(a):
        return one_matrix.cho_factor(a, lower, overwrite_a, check_finite)
    if check_finite:
        check_finite_values(a)
    # as SciPy's, the other triangle of c holds the input's entries
    factor = np.tril(np.linalg.cholesky(a)) + np.triu(a, 1) if lower else _t(np.linalg.cholesky(_t(a))) + np.tril(a, -1)
    c = scipy_valued(factor, cho_factor_matrix, a, lower, check_finite=check_finite)
    return [c, np.full(np.shape(_plain(a))[:-2], lower)]


def _one_flag(lower):
    """The `lower` of a stack's Cholesky factors: SciPy's batched cho_factor gives one flag per matrix."""
    flags = np.unique(np.asarray(lower))
    if flags.size != 1:
        raise ValueError("pullback.scipy.linalg.cho_solve: the Cholesky factors of the stack hold both triangles "
                         f"(flags {flags.tolist()}); factor the whole stack with one cho_factor(a, lower) call.")
    return bool(flags[0])


def _cholesky_solve(c, b, lower):
    if lower:  # A = L Lᵀ
        return triangular_solve(c, triangular_solve(c, b, False, True, False), True, True, False)
    return triangular_solve(c, triangular_solve(c, b, True, False, False), False, False, False)


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """`scipy.linalg.cho_solve`, differentiable in `c` (the factor's triangle) and `b`; batched as SciPy's.

    >>> import numpy as np, pullback as pb
    >>> factors = cho_factor(np.stack([4.0 * np.eye(2), np.eye(2)]))
    >>> pb.gradient(lambda b: np.sum(cho_solve(factors, b)), np.ones(2))[0]
    array([1.25, 1.25])
    """
    c, lower = c_and_lower
    if not _any_tracked(c, b) or not _stacked(c):
        return one_matrix.cho_solve(c_and_lower, b, overwrite_b, check_finite)
    lower = _one_flag(lower)
    if check_finite:
        check_finite_values(b, c)
    if np.iscomplexobj(_plain(c)) or np.iscomplexobj(_plain(b)):
        raise TypeError("pullback.scipy.linalg.cho_solve of complex values is not differentiable by pullback (its rule "
                        "solves with A = L Lᵀ, not L Lᴴ); use np.linalg.solve on the complex matrices.")
    x = _on_columns(lambda b: _cholesky_solve(c, b, lower), b)
    # SciPy's own value: one LAPACK call rounds unlike two triangular solves
    return scipy_valued(x, cho_solve_with_flag, c, b, lower, check_finite=check_finite)


def _batch(name, *shapes):
    """The broadcast batch shape of the stacks, refused where empty, as SciPy refuses it."""
    batch = np.broadcast_shapes(*shapes)
    if 0 in batch:
        raise ValueError(f"`{name}` does not support zero-size batches.")
    return batch


def lu_factor(a, overwrite_a=False, check_finite=True):
    """`scipy.linalg.lu_factor`, differentiable in `a` (square matrices) where the pivots do not change; for a stack,
    SciPy's `[lu, piv]`.

    >>> import numpy as np, pullback as pb
    >>> stack = np.stack([2.0 * np.eye(2), 3.0 * np.eye(2)])
    >>> pb.gradient(lambda a: np.sum(lu_solve(lu_factor(a), np.ones(2))), stack)[0][1]  # -inv(a)ᵀ 1 (inv(a) 1)ᵀ
    array([[-0.11111111, -0.11111111],
           [-0.11111111, -0.11111111]])
    """
    if not _any_tracked(a) or not _stacked(a):
        return one_matrix.lu_factor(a, overwrite_a, check_finite)
    shape = np.shape(_plain(a))
    if shape[-1] != shape[-2]:
        raise ValueError(f"pullback.scipy.linalg.lu_factor on traced values takes square matrices, got shape {shape}; "
                         "for rectangular ones use pullback.scipy.linalg.lu.")
    if check_finite:
        check_finite_values(a)
    batch = _batch("lu_factor", shape[:-2])
    parts = [one_matrix.lu_factor(a[index], check_finite=False) for index in np.ndindex(batch)]
    packed = np.reshape(np.stack([lu for lu, _ in parts]), shape)
    return [packed, np.reshape(np.stack([piv for _, piv in parts]), shape[:-1])]


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """`scipy.linalg.lu_solve`, differentiable in `lu` and `b`; batched as SciPy's (see `lu_factor`)."""
    lu, piv = lu_and_piv
    if not _any_tracked(lu, b):
        return one_matrix.lu_solve(lu_and_piv, b, trans, overwrite_b, check_finite)
    if isinstance(trans, str) or trans not in (0, 1, 2):  # as SciPy's LAPACK wrapper refuses them
        raise ValueError(f"scipy.linalg.lu_solve takes trans 0, 1 or 2, not {trans!r}: pass 0 for 'N', 1 for 'T', "
                         "2 for 'C'.")
    core = 2 if np.ndim(_plain(b)) >= 2 else 1
    if not (_stacked(lu) or np.ndim(_plain(piv)) > 1 or np.ndim(_plain(b)) > 2):
        return one_matrix.lu_solve(lu_and_piv, b, trans, overwrite_b, check_finite)
    if check_finite:
        check_finite_values(b)  # (SciPy checks b alone)
    shapes = [np.shape(_plain(v)) for v in (lu, piv, b)]
    if shapes[2][-core] != shapes[0][-1]:  # SciPy's error
        raise ValueError(f"Shapes of lu {shapes[0][-2:]} and b {shapes[2][-core:]} are incompatible")
    batch = _batch("lu_solve", shapes[0][:-2], shapes[1][:-1], shapes[2][:-core])
    lu, piv, b = (np.broadcast_to(v, batch + shape[len(shape) - k:])
                  for v, shape, k in zip((lu, piv, b), shapes, (2, 1, core)))
    parts = [one_matrix.lu_solve((lu[index], piv[index]), b[index], trans, check_finite=False)
             for index in np.ndindex(batch)]
    return np.reshape(np.stack(parts), batch + np.shape(_plain(parts[0])))


def det(a, overwrite_a=False, check_finite=True):
    """`scipy.linalg.det`, differentiable; batched."""
    if not _any_tracked(a):
        return _linalg().det(a, overwrite_a, check_finite)
    if check_finite:
        check_finite_values(a)
    exact = _linalg().det(stop_gradient(a), check_finite=check_finite)
    if np.result_type(exact) != np.result_type(stop_gradient(a)):
        a = a.astype(np.result_type(exact))  # SciPy computes a float32 determinant in float64: it may not fit in float32
    return _agree(np.linalg.det(a), exact, "det")


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """`scipy.linalg.cholesky`: the upper factor by default, reading the triangle it returns."""
    if not _any_tracked(a):
        return _linalg().cholesky(a, lower, overwrite_a, check_finite)
    if check_finite:
        check_finite_values(a)
    factor = np.linalg.cholesky(a) if lower else np.linalg.cholesky(a, upper=True)
    return _agree(factor, _linalg().cholesky(stop_gradient(a), lower, check_finite=check_finite), "cholesky")


def _subset(a, subset_by_index, subset_by_value, b, type, name):
    if b is not None or type != 1:
        raise NotImplementedError(f"pullback.scipy.linalg.{name}: the generalized problem (b=, type=) is not "
                                  "differentiable here; reduce it with a Cholesky factor of b.")
    if subset_by_value is not None:
        raise NotImplementedError(f"pullback.scipy.linalg.{name}: subset_by_value selects a number of eigenvalues "
                                  "that changes with the matrix; use subset_by_index.")
    n = np.shape(stop_gradient(a))[-1]
    if subset_by_index is None:
        return slice(0, n)
    first, last = (int(k) for k in subset_by_index)
    return slice(first, last + 1)


def eigh(a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False, type=1,
         check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    """`scipy.linalg.eigh` for the standard problem, differentiable (eigenvectors where eigenvalues are distinct)."""
    linalg = _linalg()
    options = dict(lower=lower, eigvals_only=eigvals_only, type=type, check_finite=check_finite,
                   subset_by_index=subset_by_index, subset_by_value=subset_by_value, driver=driver)
    if not _any_tracked(a, b):
        return linalg.eigh(a, b, overwrite_a=overwrite_a, overwrite_b=overwrite_b, **options)
    window = _subset(a, subset_by_index, subset_by_value, b, type, "eigh")
    if check_finite:
        check_finite_values(a)
    exact = linalg.eigh(stop_gradient(a), **options)
    uplo = "L" if lower else "U"
    if eigvals_only:
        return _agree(np.linalg.eigvalsh(a, uplo)[..., window], exact, "eigh")
    w, v = np.linalg.eigh(a, uplo)
    w, v = w[..., window], v[..., window]
    return _agree(w, exact[0], "eigh"), _agree(_aligned(v, exact[1]), exact[1], "eigh")


def eigvalsh(a, b=None, *, lower=True, overwrite_a=False, overwrite_b=False, type=1, check_finite=True,
             subset_by_index=None, subset_by_value=None, driver=None):
    """`scipy.linalg.eigvalsh` for the standard problem, differentiable."""
    return eigh(a, b, lower=lower, eigvals_only=True, overwrite_a=overwrite_a, overwrite_b=overwrite_b, type=type,
                check_finite=check_finite, subset_by_index=subset_by_index, subset_by_value=subset_by_value,
                driver=driver)


def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True, lapack_driver="gesdd"):
    """`scipy.linalg.svd`, differentiable (singular vectors where singular values are distinct and nonzero)."""
    linalg = _linalg()
    if not _any_tracked(a):
        return linalg.svd(a, full_matrices, compute_uv, overwrite_a, check_finite, lapack_driver)
    if check_finite:
        check_finite_values(a)
    exact = linalg.svd(stop_gradient(a), full_matrices, compute_uv, check_finite=check_finite,
                       lapack_driver=lapack_driver)
    if not compute_uv:
        return _agree(np.linalg.svd(a, compute_uv=False), exact, "svd")
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    k = np.shape(stop_gradient(s))[-1]
    # u's columns and vh's rows flip together for the first k; beyond k (full_matrices) each on its own
    u_signs = np.sign(np.sum(stop_gradient(u) * exact[0], axis=-2))
    v_signs = np.sign(np.sum(stop_gradient(vh) * exact[2], axis=-1))
    v_signs = np.concatenate([u_signs[..., :k], v_signs[..., k:]], axis=-1)
    u = u * np.where(u_signs == 0, 1.0, u_signs)[..., None, :]
    vh = vh * np.where(v_signs == 0, 1.0, v_signs)[..., :, None]
    return _agree(u, exact[0], "svd"), _agree(s, exact[1], "svd"), _agree(vh, exact[2], "svd")


def svdvals(a, overwrite_a=False, check_finite=True):
    """`scipy.linalg.svdvals`, differentiable everywhere (the singular values)."""
    if not _any_tracked(a):
        return _linalg().svdvals(a, overwrite_a, check_finite)
    if check_finite:
        check_finite_values(a)
    exact = _linalg().svdvals(stop_gradient(a), check_finite=check_finite)
    return _agree(np.linalg.svd(a, compute_uv=False), exact, "svdvals")


def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """`scipy.linalg.qr` in modes 'full', 'economic' and 'r', differentiable where `a` has full rank."""
    linalg = _linalg()
    if not _any_tracked(a):
        return linalg.qr(a, overwrite_a, lwork, mode, pivoting, check_finite)
    if pivoting or mode == "raw":
        raise NotImplementedError("pullback.scipy.linalg.qr: pivoting and mode='raw' are not differentiable here.")
    if check_finite:
        check_finite_values(a)
    exact = linalg.qr(stop_gradient(a), mode=mode, check_finite=check_finite)
    if mode == "r":
        return (_agree(np.linalg.qr(a, "complete" if _rows_exceed(a) else "reduced")[1], exact[0], "qr"),)
    q, r = np.linalg.qr(a, "complete" if mode == "full" else "reduced")
    return _agree(q, exact[0], "qr"), _agree(r, exact[1], "qr")


def _rows_exceed(a):
    shape = np.shape(stop_gradient(a))
    return shape[-2] > shape[-1]


def lu(a, permute_l=False, overwrite_a=False, check_finite=True, p_indices=False):
    """`scipy.linalg.lu` of a square 2-D matrix, differentiable where the pivot order is locally constant."""
    linalg = _linalg()
    if not _any_tracked(a):
        return linalg.lu(a, permute_l, overwrite_a, check_finite, p_indices)
    _square_2d("lu", a)
    if check_finite:
        check_finite_values(a)
    exact = linalg.lu(stop_gradient(a), permute_l, check_finite=check_finite, p_indices=p_indices)
    packed, piv = one_matrix.lu_factor(a, check_finite=False)  # (checked by SciPy's call)
    n = np.shape(stop_gradient(a))[0]
    lower = np.tril(packed, -1) + np.eye(n, dtype=np.result_type(stop_gradient(packed)))
    upper = np.triu(packed)
    if permute_l:
        rows = np.argsort(pivot_permutation(piv))  # a = lower[rows] @ upper
        return _agree(lower[rows], exact[0], "lu"), _agree(upper, exact[1], "lu")
    return exact[0], _agree(lower, exact[1], "lu"), _agree(upper, exact[2], "lu")  # SciPy's P: it has no gradient


def pinv(a, *, atol=None, rtol=None, return_rank=False, check_finite=True):
    """`scipy.linalg.pinv`, differentiable where the rank is locally constant."""
    linalg = _linalg()
    if not _any_tracked(a):
        return linalg.pinv(a, atol=atol, rtol=rtol, return_rank=return_rank, check_finite=check_finite)
    if check_finite:
        check_finite_values(a)
    exact, rank = linalg.pinv(stop_gradient(a), atol=atol, rtol=rtol, return_rank=True, check_finite=check_finite)
    s = np.linalg.svd(stop_gradient(a), compute_uv=False)
    largest = float(np.max(s)) if s.size else 0.0
    shape = np.shape(stop_gradient(a))
    atol = 0.0 if atol is None else atol
    rtol = (max(shape[-2:]) * np.finfo(exact.dtype).eps if atol == 0 else 0.0) if rtol is None else rtol
    cutoff = atol + rtol * largest
    relative = cutoff / largest if largest > 0 else 0.0
    value = _agree(np.linalg.pinv(a, rcond=relative), exact, "pinv")
    return (value, rank) if return_rank else value


def pinvh(a, atol=None, rtol=None, lower=True, return_rank=False, check_finite=True):
    """`scipy.linalg.pinvh`, differentiable where the rank is locally constant; reads one triangle."""
    linalg = _linalg()
    if not _any_tracked(a):
        return linalg.pinvh(a, atol, rtol, lower, return_rank, check_finite)
    if check_finite:
        check_finite_values(a)
    exact, rank = linalg.pinvh(stop_gradient(a), atol, rtol, lower, True, check_finite)
    symmetric = _read(a, "her", lower)
    w = np.linalg.eigvalsh(stop_gradient(symmetric))
    largest = float(np.max(np.abs(w))) if w.size else 0.0
    keep = np.sort(np.abs(w))[::-1][rank - 1] if rank > 0 else largest
    relative = 0.5 * keep / largest if largest > 0 else 0.0  # between the kept and the dropped eigenvalues
    value = _agree(np.linalg.pinv(symmetric, rcond=relative), exact, "pinvh")
    return (value, rank) if return_rank else value


def lstsq(a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True, lapack_driver=None):
    """`scipy.linalg.lstsq`, differentiable in `a` and `b` where `a` has full rank."""
    linalg = _linalg()
    if not _any_tracked(a, b):
        return linalg.lstsq(a, b, cond, overwrite_a, overwrite_b, check_finite, lapack_driver)
    if check_finite:
        check_finite_values(a, b)
    x0, residues0, rank, s0 = linalg.lstsq(_plain(a), _plain(b), cond, check_finite=check_finite,
                                           lapack_driver=lapack_driver)
    x = _agree(np.linalg.lstsq(a, b, rcond=cond)[0], x0, "lstsq")
    if np.size(residues0):
        residual = b - a @ x
        squares = np.real(residual * np.conj(residual)) if np.iscomplexobj(x0) else residual ** 2
        # a residual rounds relative to b (an exact fit leaves about 1e-32 either way), not to itself
        residues = _agree(np.sum(squares, axis=0), residues0, "lstsq", scale=float(np.sum(np.abs(_plain(b)) ** 2)))
    else:
        residues = residues0
    s = None if s0 is None else _agree(np.linalg.svd(a, compute_uv=False), s0, "lstsq")
    return x, residues, rank, s


def norm(a, ord=None, axis=None, keepdims=False, check_finite=True):
    """`scipy.linalg.norm`, differentiable (through numpy.linalg.norm)."""
    if not _any_tracked(a):
        return _linalg().norm(a, ord, axis, keepdims, check_finite)
    if check_finite:
        check_finite_values(a)
    exact = _linalg().norm(stop_gradient(a), ord, axis, keepdims, check_finite)
    return _agree(np.linalg.norm(a, ord, axis, keepdims), exact, "norm")


def orthogonal_procrustes(A, B, check_finite=True):
    """`scipy.linalg.orthogonal_procrustes`: (R, scale), differentiable where the singular values of BᵀA are distinct."""
    linalg = _linalg()
    if not _any_tracked(A, B):
        return linalg.orthogonal_procrustes(A, B, check_finite)
    if check_finite:
        check_finite_values(A, B)
    exact = linalg.orthogonal_procrustes(_plain(A), _plain(B), check_finite)
    u, w, vt = svd(_t(_t(B) @ A))
    return _agree(u @ vt, exact[0], "orthogonal_procrustes"), _agree(np.sum(w), exact[1], "orthogonal_procrustes")


def polar(a, side="right"):
    """`scipy.linalg.polar`: (u, p), differentiable where the singular values are distinct."""
    linalg = _linalg()
    if not _any_tracked(a):
        return linalg.polar(a, side)
    exact = linalg.polar(stop_gradient(a), side)
    w, s, vh = svd(a, full_matrices=False)
    u = w @ vh
    p = (_t(vh) * s) @ vh if side == "right" else (w * s) @ _t(w)
    return _agree(u, exact[0], "polar"), _agree(p, exact[1], "polar")


def matrix_balance(A, permute=True, scale=True, separate=False, overwrite_a=False):
    """`scipy.linalg.matrix_balance`: B = T⁻¹ A T, differentiable in `A` for the (piecewise constant) T SciPy picks."""
    linalg = _linalg()
    if not _any_tracked(A):
        return linalg.matrix_balance(A, permute, scale, separate, overwrite_a)
    exact, transform = linalg.matrix_balance(stop_gradient(A), permute, scale, False)
    balanced = _agree(np.linalg.inv(transform) @ A @ transform, exact, "matrix_balance")
    if separate:
        return balanced, linalg.matrix_balance(stop_gradient(A), permute, scale, True)[1]
    return balanced, transform


def orth(A, rcond=None):
    """`scipy.linalg.orth`: the left singular vectors of the nonzero singular values, differentiable where
    they are distinct (signs as SciPy's)."""
    linalg = _linalg()
    if not _any_tracked(A):
        return linalg.orth(A, rcond)
    exact = linalg.orth(stop_gradient(A), rcond)
    u = svd(A, full_matrices=False)[0]
    return _agree(u[:, :np.shape(exact)[1]], exact, "orth")


def subspace_angles(A, B):
    """`scipy.linalg.subspace_angles`, differentiable (SciPy's algorithm, on the differentiable SVDs)."""
    linalg = _linalg()
    if not _any_tracked(A, B):
        return linalg.subspace_angles(A, B)
    exact = linalg.subspace_angles(_plain(A), _plain(B))
    qa, qb = orth(A), orth(B)
    cross = _t(qa) @ qb
    sigma = svdvals(cross)
    wider = np.shape(stop_gradient(qa))[1] >= np.shape(stop_gradient(qb))[1]
    rest = qb - qa @ cross if wider else qa - qb @ _t(cross)
    mask = stop_gradient(sigma) ** 2 >= 0.5
    # each branch sees a harmless input where the other is taken (arcsin and arccos are steep at ±1)
    sines = np.where(mask, np.clip(svdvals(rest), -1.0, 1.0), 0.0) if mask.any() else np.zeros(np.shape(mask))
    cosines = np.where(mask, 0.0, np.clip(sigma[::-1], -1.0, 1.0))
    return _agree(np.where(mask, np.arcsin(sines), np.arccos(cosines)), exact, "subspace_angles")


def qr_multiply(a, c, mode="right", pivoting=False, conjugate=False, overwrite_a=False, overwrite_c=False):
    """`scipy.linalg.qr_multiply` without pivoting: (Q c or c Q, R), differentiable where `a` has full rank."""
    linalg = _linalg()
    if not _any_tracked(a, c):
        return linalg.qr_multiply(a, c, mode, pivoting, conjugate, overwrite_a, overwrite_c)
    if pivoting or overwrite_c:
        raise NotImplementedError("pullback.scipy.linalg.qr_multiply: pivoting and overwrite_c are not differentiable "
                                  "here.")
    exact = linalg.qr_multiply(_plain(a), _plain(c), mode, False, conjugate)
    q, r = qr(a, mode="economic")
    if mode == "left":
        product = q @ (c if np.ndim(stop_gradient(c)) > 1 else np.reshape(c, (-1, 1)))
    else:
        product = (c if np.ndim(stop_gradient(c)) > 1 else np.reshape(c, (1, -1))) @ q
    return _agree(np.reshape(product, np.shape(exact[0])), exact[0], "qr_multiply"), _agree(r, exact[1], "qr_multiply")


# --- matrix functions -------------------------------------------------------------------------
_MATRIX_FUNCTIONS = ("sqrtm", "logm", "cosm", "sinm", "tanm", "coshm", "sinhm", "tanhm", "signm",
                     "fractional_matrix_power")


@primitive
def matrix_function(a, name, power):
    """`scipy.linalg.<name>(a)` (`fractional_matrix_power(a, power)`): real for a real `a`, or an error."""
    linalg = _linalg()
    y = linalg.fractional_matrix_power(a, power) if name == "fractional_matrix_power" else getattr(linalg, name)(a)
    if isinstance(y, tuple):  # sqrtm, logm and signm with disp=False give (value, error estimate)
        y = y[0]
    if np.iscomplexobj(y) and not np.iscomplexobj(a):  # SciPy may return a complex array for a real result (imaginary parts at rounding level)
        if np.any(np.abs(np.imag(y)) > 1e-10 * max(float(np.max(np.abs(y))), 1e-300)):
            raise ValueError(f"pullback.scipy.linalg.{name}: the result is complex (the matrix has eigenvalues on the "
                             "negative real axis); pullback differentiates real matrix functions only.")
        y = np.real(y)
    return y


def _frechet(a, e, name, power):
    """L_f(a, e), the Fréchet derivative of the matrix function at a along e: the upper right block of
    f([[a, e], [0, a]])."""
    n = np.shape(stop_gradient(a))[-1]
    e, scale = unit_scale(e)
    zero = np.zeros((n, n), dtype=np.result_type(stop_gradient(a), stop_gradient(e)))
    block = np.concatenate([np.concatenate([a, e], axis=-1), np.concatenate([zero, a], axis=-1)], axis=-2)
    return matrix_function(block, name, power)[:n, n:] * scale


@rrule(matrix_function)
def matrix_function_rule(a, name, power):
    # f has real coefficients, so f(Aᵀ) = f(A)ᵀ and the transpose of L_f(A, ·) is L_f(Aᵀ, ·) (for complex A too).
    return matrix_function(a, name, power), lambda g: (Thunk(lambda: _frechet(_t(a), g, name, power)), None, None)


@frule(matrix_function)
def matrix_function_frule(primals, tangents):
    (a, name, power), t = primals, tangents[0]
    return matrix_function(a, name, power), None if t is None else _frechet(a, t, name, power)


_DRAWS_RANDOM = ("logm", "fractional_matrix_power")  # SciPy's 1-norm estimate draws from NumPy's global generator


def _refuse_random_in_jit(name, A):
    if name in _DRAWS_RANDOM and stand_in_among(stop_gradient(A)) is not None:
        raise JitError(f"pullback.scipy.linalg.{name} inside pb.jit: SciPy's {name} draws from NumPy's global random "
                       "generator (to estimate a 1-norm), which a replay cannot repeat. Call it outside the jitted "
                       "function.")


def _matrix_function_standin(name):
    def standin(A, *args, **kwargs):
        _refuse_random_in_jit(name, A)
        linalg = _linalg()
        if not _any_tracked(A):
            return getattr(linalg, name)(A, *args, **kwargs)
        _square_2d(name, A)
        value = matrix_function(A, name, None)
        if args or kwargs:  # SciPy checks its options; disp=False adds an error estimate to the result
            exact = getattr(linalg, name)(stop_gradient(A), *args, **kwargs)
            return (value, exact[1]) if isinstance(exact, tuple) else value
        return value

    standin.__name__ = standin.__qualname__ = name
    standin.__module__ = __name__
    standin.__doc__ = (f"`scipy.linalg.{name}`, differentiable in both modes and to any order (complex matrices too; "
                       "a real matrix must have a real result).")
    return standin


sqrtm, logm, cosm, sinm, tanm, coshm, sinhm, tanhm, signm = (
    _matrix_function_standin(name) for name in _MATRIX_FUNCTIONS[:-1])


def fractional_matrix_power(A, t):
    """`scipy.linalg.fractional_matrix_power(A, t)`, differentiable in `A` (t is a plain number; real results)."""
    _refuse_random_in_jit("fractional_matrix_power", A)
    if not _any_tracked(A, t):
        return _linalg().fractional_matrix_power(A, t)
    if isinstance(t, Traced):
        raise NotImplementedError("pullback.scipy.linalg.fractional_matrix_power: the power t must be plain.")
    _square_2d("fractional_matrix_power", A)
    return matrix_function(A, "fractional_matrix_power", float(t))


def expm_frechet(A, E, method=None, compute_expm=True, check_finite=True):
    """`scipy.linalg.expm_frechet`: (expm(A), L(A, E)), differentiable in `A` and `E`."""
    linalg = _linalg()
    if not _any_tracked(A, E):
        return linalg.expm_frechet(A, E, method, compute_expm, check_finite)
    if check_finite:
        check_finite_values(A, E)
    exact = linalg.expm_frechet(_plain(A), _plain(E), method, True, check_finite)
    n = np.shape(stop_gradient(A))[-1]
    zero = np.zeros((n, n), dtype=np.result_type(stop_gradient(A), stop_gradient(E)))
    block = matrix_exponential(np.concatenate([np.concatenate([A, E], axis=-1), np.concatenate([zero, A], axis=-1)], -2))
    frechet = _agree(block[:n, n:], exact[1], "expm_frechet")
    return (_agree(block[:n, :n], exact[0], "expm_frechet"), frechet) if compute_expm else frechet


# --- Sylvester and Lyapunov equations ---------------------------------------------------------
@primitive
def sylvester(a, b, q):
    """X with A X + X B = Q (`scipy.linalg.solve_sylvester`)."""
    return _linalg().solve_sylvester(a, b, q)


@rrule(sylvester)
def sylvester_rule(a, b, q):
    x = sylvester(a, b, q)

    def back(g):
        gq = Thunk(lambda: sylvester(_t(a), _t(b), g))
        return Thunk(lambda: -(gq.unthunk() @ _t(x))), Thunk(lambda: -(_t(x) @ gq.unthunk())), gq

    return x, back


@frule(sylvester)
def sylvester_frule(primals, tangents):
    (a, b, q), (ta, tb, tq) = primals, tangents
    x = sylvester(a, b, q)
    rhs = add_tangents(tq, None if ta is None else -(ta @ x), None if tb is None else -(x @ tb))
    return x, None if rhs is None else sylvester(a, b, rhs)


def solve_sylvester(a, b, q):
    """`scipy.linalg.solve_sylvester`, differentiable in `a`, `b` and `q`.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda q: np.sum(solve_sylvester(np.eye(2), np.eye(2), q)), np.ones((2, 2)))[0]
    array([[0.5, 0.5],
           [0.5, 0.5]])
    """
    if not _any_tracked(a, b, q):
        return _linalg().solve_sylvester(a, b, q)
    return sylvester(a, b, q)


def solve_continuous_lyapunov(a, q):
    """`scipy.linalg.solve_continuous_lyapunov` (also `solve_lyapunov`): X with A X + X Aᴴ = Q, differentiable."""
    linalg = _linalg()
    if not _any_tracked(a, q):
        return linalg.solve_continuous_lyapunov(a, q)
    return _agree(sylvester(a, _h(a), q), linalg.solve_continuous_lyapunov(_plain(a), _plain(q)),
                  "solve_continuous_lyapunov")


def solve_discrete_lyapunov(a, q, method=None):
    """`scipy.linalg.solve_discrete_lyapunov`: X with A X Aᴴ - X + Q = 0, differentiable, by SciPy's two methods."""
    linalg = _linalg()
    if not _any_tracked(a, q):
        return linalg.solve_discrete_lyapunov(a, q, method)
    exact = linalg.solve_discrete_lyapunov(_plain(a), _plain(q), method)
    n = np.shape(stop_gradient(a))[0]
    if method is None:
        method = "direct" if n < 10 else "bilinear"
    if method == "direct":
        lhs = np.eye(n * n) - np.kron(a, np.conj(a) if np.iscomplexobj(exact) else a)
        x = np.reshape(np.linalg.solve(lhs, np.reshape(q, (-1,))), np.shape(stop_gradient(q)))
    elif method == "bilinear":
        eye = np.eye(n)
        inverse_ah = np.linalg.inv(_h(a) + eye)
        b = (_h(a) - eye) @ inverse_ah
        c = 2.0 * np.linalg.inv(a + eye) @ q @ inverse_ah
        x = sylvester(_h(b), b, -c)
    else:
        raise ValueError(f"Unknown solve_discrete_lyapunov method {method!r}")
    return _agree(x, exact, "solve_discrete_lyapunov")


# --- structured matrices ------------------------------------------------------------------------
def _gather(values, index):
    """values[..., index]: the entries of the last axis at `index` (an integer array of any shape)."""
    return values[..., index]


def toeplitz(c, r=None):
    """`scipy.linalg.toeplitz`, differentiable in `c` and `r` (batched over leading axes, as SciPy's)."""
    linalg = _linalg()
    if not _any_tracked(c, r):
        return linalg.toeplitz(c, r)
    exact = linalg.toeplitz(_plain(c), _plain(r))
    if np.ndim(exact) == 2 and max(np.ndim(_plain(c)), np.ndim(_plain(r))) > 1:  # SciPy 1.15 flattens them
        c, r = np.ravel(c), (None if r is None else np.ravel(r))
    c = np.atleast_1d(c)
    r = np.conj(c) if r is None and np.iscomplexobj(exact) else c if r is None else np.atleast_1d(r)
    n, m = np.shape(stop_gradient(c))[-1], np.shape(stop_gradient(r))[-1]
    values = np.concatenate([np.broadcast_to(r[..., :0:-1], np.shape(stop_gradient(c))[:-1] + (m - 1,)), c], axis=-1)
    index = (m - 1) + np.arange(n)[:, None] - np.arange(m)[None, :]
    return _agree(_gather(values, index), exact, "toeplitz")


def circulant(c):
    """`scipy.linalg.circulant`, differentiable (batched over leading axes)."""
    if not _any_tracked(c):
        return _linalg().circulant(c)
    c = np.atleast_1d(c)
    n = np.shape(stop_gradient(c))[-1]
    index = (np.arange(n)[:, None] - np.arange(n)[None, :]) % n
    return _agree(_gather(c, index), _linalg().circulant(stop_gradient(c)), "circulant")


def hankel(c, r=None):
    """`scipy.linalg.hankel`, differentiable in `c` and `r` (r defaults to zeros)."""
    linalg = _linalg()
    if not _any_tracked(c, r):
        return linalg.hankel(c, r)
    exact = linalg.hankel(_plain(c), _plain(r))
    c = np.atleast_1d(c)
    r = np.zeros_like(stop_gradient(c)) if r is None else np.atleast_1d(r)
    n, m = np.shape(stop_gradient(c))[-1], np.shape(stop_gradient(r))[-1]
    values = np.concatenate([c, np.broadcast_to(r[..., 1:], np.shape(stop_gradient(c))[:-1] + (m - 1,))], axis=-1)
    index = np.arange(n)[:, None] + np.arange(m)[None, :]
    return _agree(_gather(values, index), exact, "hankel")


def block_diag(*arrs):
    """`scipy.linalg.block_diag`, differentiable in every block."""
    linalg = _linalg()
    if not _any_tracked(*arrs):
        return linalg.block_diag(*arrs)
    exact = linalg.block_diag(*(_plain(a) for a in arrs))
    blocks = [np.atleast_2d(a) for a in arrs]
    widths = [np.shape(stop_gradient(b))[1] for b in blocks]
    rows, start = [], 0
    for block, width in zip(blocks, widths):
        pad = ((0, 0), (start, sum(widths) - start - width))
        rows.append(np.pad(block.astype(exact.dtype) if block.dtype != exact.dtype else block, pad))
        start += width
    if not rows:
        return exact
    return _agree(np.concatenate(rows, axis=0), exact, "block_diag")


def companion(a):
    """`scipy.linalg.companion`, differentiable in the polynomial's coefficients."""
    if not _any_tracked(a):
        return _linalg().companion(a)
    exact = _linalg().companion(stop_gradient(a))
    n = np.shape(stop_gradient(a))[-1]
    first = -a[..., 1:] / a[..., :1]
    ones = np.eye(n - 2, n - 1, dtype=exact.dtype)
    rest = np.broadcast_to(ones, np.shape(exact)[:-2] + (n - 2, n - 1))
    return _agree(np.concatenate([first[..., None, :], rest], axis=-2), exact, "companion")


def leslie(f, s):
    """`scipy.linalg.leslie`, differentiable in the fecundities `f` and survival rates `s`."""
    if not _any_tracked(f, s):
        return _linalg().leslie(f, s)
    exact = _linalg().leslie(_plain(f), _plain(s))
    n = np.shape(stop_gradient(f))[-1]
    below = np.concatenate([np.eye(n - 1, dtype=exact.dtype) * s[..., :, None],
                            np.zeros(np.shape(stop_gradient(s)) + (1,), dtype=exact.dtype)], axis=-1)
    return _agree(np.concatenate([f[..., None, :] * np.ones((1, 1), exact.dtype), below], axis=-2), exact, "leslie")


def fiedler_companion(a):
    """`scipy.linalg.fiedler_companion` of a 1-D coefficient vector, differentiable in the coefficients."""
    linalg = _linalg()
    if not _any_tracked(a):
        return linalg.fiedler_companion(a)
    exact = linalg.fiedler_companion(stop_gradient(a))
    if np.ndim(stop_gradient(a)) != 1:
        raise NotImplementedError("pullback.scipy.linalg.fiedler_companion: 1-D coefficients on traced values.")
    size = np.shape(stop_gradient(a))[0]
    if size <= 1:
        return exact
    a = a / a[0]
    if size == 2:
        return _agree(np.reshape(-a[-1], (1, 1)), exact, "fiedler_companion")
    n = size - 1
    # where each entry comes from, in [0, 1, -a[0], -a[1], ...]: SciPy's assignments, replayed on indices
    index = np.zeros((n, n), dtype=np.intp)
    index[range(3, n, 2), range(1, n - 2, 2)] = 1
    index[range(2, n, 2), range(1, n - 1, 2)] = 2 + np.arange(3, size, 2)
    index[range(0, n - 2, 2), range(2, n, 2)] = 1
    index[range(0, n - 1, 2), range(1, n, 2)] = 2 + np.arange(2, size, 2)
    index[[0, 1], 0] = [2 + 1, 1]
    values = np.concatenate([np.zeros(1, dtype=exact.dtype), np.ones(1, dtype=exact.dtype), -a])
    return _agree(values[index], exact, "fiedler_companion")


def fiedler(a):
    """`scipy.linalg.fiedler`, |a_i - a_j|, differentiable (subgradient 0 on ties)."""
    if not _any_tracked(a):
        return _linalg().fiedler(a)
    return _agree(np.abs(a[..., :, None] - a[..., None, :]), _linalg().fiedler(stop_gradient(a)), "fiedler")


def convolution_matrix(a, n, mode="full"):
    """`scipy.linalg.convolution_matrix`, differentiable in `a` (a Toeplitz matrix of its entries)."""
    if not _any_tracked(a):
        return _linalg().convolution_matrix(a, n, mode)
    exact = _linalg().convolution_matrix(stop_gradient(a), n, mode)
    k = np.shape(stop_gradient(a))[-1]
    start = {"full": 0, "same": (min(n, k) - 1) // 2, "valid": min(n, k) - 1}[mode]  # as numpy.convolve's modes
    padded = np.concatenate([np.zeros(1, dtype=exact.dtype), a], axis=-1)
    i = np.arange(np.shape(exact)[-2])[:, None] + start
    j = np.arange(n)[None, :]
    lag = i - j
    index = np.where((lag >= 0) & (lag < k), lag + 1, 0)
    return _agree(padded[index], exact, "convolution_matrix")


def khatri_rao(a, b):
    """`scipy.linalg.khatri_rao`, the column-wise Kronecker product, differentiable in `a` and `b`."""
    if not _any_tracked(a, b):
        return _linalg().khatri_rao(a, b)
    exact = _linalg().khatri_rao(_plain(a), _plain(b))
    k = np.shape(exact)[-1]
    return _agree(np.reshape(a[:, None, :] * b[None, :, :], (-1, k)), exact, "khatri_rao")


def diagsvd(s, M, N):
    """`scipy.linalg.diagsvd`: the M×N matrix with `s` on its diagonal, differentiable in `s`."""
    if not _any_tracked(s):
        return _linalg().diagsvd(s, M, N)
    exact = _linalg().diagsvd(stop_gradient(s), M, N)
    k = np.shape(stop_gradient(s))[-1]
    return _agree(np.pad(np.diag(s), ((0, M - k), (0, N - k))), exact, "diagsvd")


# --- banded and structured solves -----------------------------------------------------------------
def _dense_from_band(ab, lower_count, upper_count, n):
    """The n×n matrix of LAPACK's band storage: a[i, j] = ab[upper + i - j, j] inside the band, 0 outside."""
    rows = np.shape(stop_gradient(ab))[0]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    row = upper_count + i - j
    inside = (i - j <= lower_count) & (j - i <= upper_count) & (row >= 0) & (row < rows)
    flat = np.concatenate([np.zeros(1, dtype=np.result_type(stop_gradient(ab))), np.reshape(ab, (-1,))])
    return flat[np.where(inside, row * n + j + 1, 0)]


def _symmetric_from_band(ab, lower, n):
    """The Hermitian (real: symmetric) matrix of one triangle in band storage."""
    u = np.shape(stop_gradient(ab))[0] - 1
    return _hermitian(_dense_from_band(ab, u, 0, n) if lower else _dense_from_band(ab, 0, u, n), lower)


def solve_banded(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    """`scipy.linalg.solve_banded`, differentiable in the band `ab` and `b`."""
    linalg = _linalg()
    if not _any_tracked(ab, b):
        return linalg.solve_banded(l_and_u, ab, b, overwrite_ab, overwrite_b, check_finite)
    if check_finite:
        check_finite_values(ab, b)
    exact = linalg.solve_banded(l_and_u, _plain(ab), _plain(b), check_finite=check_finite)
    n = np.shape(stop_gradient(ab))[-1]
    a = _dense_from_band(ab, int(l_and_u[0]), int(l_and_u[1]), n)
    return _agree(np.linalg.solve(a, b), exact, "solve_banded")


def solveh_banded(ab, b, overwrite_ab=False, overwrite_b=False, lower=False, check_finite=True):
    """`scipy.linalg.solveh_banded`, differentiable in the band `ab` and `b`."""
    linalg = _linalg()
    if not _any_tracked(ab, b):
        return linalg.solveh_banded(ab, b, overwrite_ab, overwrite_b, lower, check_finite)
    if check_finite:
        check_finite_values(ab, b)
    exact = linalg.solveh_banded(_plain(ab), _plain(b), lower=lower, check_finite=check_finite)
    a = _symmetric_from_band(ab, lower, np.shape(stop_gradient(ab))[-1])
    return _agree(np.linalg.solve(a, b), exact, "solveh_banded")


def cholesky_banded(ab, overwrite_ab=False, lower=False, check_finite=True):
    """`scipy.linalg.cholesky_banded`, differentiable: the band of the Cholesky factor, in the same storage."""
    linalg = _linalg()
    if not _any_tracked(ab):
        return linalg.cholesky_banded(ab, overwrite_ab, lower, check_finite)
    if check_finite:
        check_finite_values(ab)
    exact = linalg.cholesky_banded(stop_gradient(ab), lower=lower, check_finite=check_finite)
    rows, n = np.shape(stop_gradient(ab))
    a = _symmetric_from_band(ab, lower, n)
    factor = np.linalg.cholesky(a) if lower else np.linalg.cholesky(a, upper=True)
    k, j = np.arange(rows)[:, None], np.arange(n)[None, :]
    i = j + k if lower else j - (rows - 1) + k  # the row of band entry (k, j)
    inside = (i >= 0) & (i < n)
    # LAPACK leaves the band's unused corner as it was: those entries pass through
    flat = np.concatenate([np.reshape(factor, (-1,)), np.reshape(ab, (-1,))])
    index = np.where(inside, np.clip(i, 0, n - 1) * n + j, n * n + k * n + j)
    return _agree(flat[index], exact, "cholesky_banded")


def cho_solve_banded(cb_and_lower, b, overwrite_b=False, check_finite=True):
    """`scipy.linalg.cho_solve_banded`, differentiable in the banded factor and `b`."""
    cb, lower = cb_and_lower
    linalg = _linalg()
    if not _any_tracked(cb, b):
        return linalg.cho_solve_banded(cb_and_lower, b, overwrite_b, check_finite)
    if check_finite:
        check_finite_values(cb, b)
    exact = linalg.cho_solve_banded((_plain(cb), lower), _plain(b), check_finite=check_finite)
    rows, n = np.shape(stop_gradient(cb))
    factor = _dense_from_band(cb, rows - 1, 0, n) if lower else _dense_from_band(cb, 0, rows - 1, n)
    conjugate = np.conj(factor) if np.iscomplexobj(exact) else factor
    if lower:  # A = L Lᴴ
        x = triangular_solve(conjugate, triangular_solve(factor, b, False, True, False), True, True, False)
    else:  # A = Uᴴ U
        x = triangular_solve(factor, triangular_solve(conjugate, b, True, False, False), False, False, False)
    return _agree(x, exact, "cho_solve_banded")


def _check_select(select, name):
    if select not in ("a", "all", 0):
        raise NotImplementedError(f"pullback.scipy.linalg.{name}: only select='a' is differentiable here.")


def eig_banded(a_band, lower=False, eigvals_only=False, overwrite_a_band=False, select="a", select_range=None,
               max_ev=0, check_finite=True):
    """`scipy.linalg.eig_banded` (select='a'), differentiable where the eigenvalues are distinct."""
    linalg = _linalg()
    if not _any_tracked(a_band):
        return linalg.eig_banded(a_band, lower, eigvals_only, overwrite_a_band, select, select_range, max_ev,
                                 check_finite)
    _check_select(select, "eig_banded")
    if check_finite:
        check_finite_values(a_band)
    exact = linalg.eig_banded(stop_gradient(a_band), lower, eigvals_only, check_finite=check_finite)
    a = _symmetric_from_band(a_band, lower, np.shape(stop_gradient(a_band))[-1])
    if eigvals_only:
        return _agree(np.linalg.eigvalsh(a), exact, "eig_banded")
    w, v = np.linalg.eigh(a)
    return _agree(w, exact[0], "eig_banded"), _agree(_aligned(v, exact[1]), exact[1], "eig_banded")


def eigvals_banded(a_band, lower=False, overwrite_a_band=False, select="a", select_range=None, check_finite=True):
    """`scipy.linalg.eigvals_banded` (select='a'), differentiable."""
    if not _any_tracked(a_band):
        return _linalg().eigvals_banded(a_band, lower, overwrite_a_band, select, select_range, check_finite)
    return eig_banded(a_band, lower, True, select=select, select_range=select_range, check_finite=check_finite)


def _tridiagonal(d, e):
    return np.diag(d) + np.diag(e, 1) + np.diag(e, -1)


def eigh_tridiagonal(d, e, eigvals_only=False, select="a", select_range=None, check_finite=True, tol=0.0,
                     lapack_driver="auto"):
    """`scipy.linalg.eigh_tridiagonal` (select='a'), differentiable in `d` and `e`."""
    linalg = _linalg()
    if not _any_tracked(d, e):
        return linalg.eigh_tridiagonal(d, e, eigvals_only, select, select_range, check_finite, tol, lapack_driver)
    _check_select(select, "eigh_tridiagonal")
    if check_finite:
        check_finite_values(d, e)
    exact = linalg.eigh_tridiagonal(_plain(d), _plain(e), eigvals_only, check_finite=check_finite, tol=tol,
                                    lapack_driver=lapack_driver)
    a = _tridiagonal(d, e)
    if eigvals_only:
        return _agree(np.linalg.eigvalsh(a), exact, "eigh_tridiagonal")
    w, v = np.linalg.eigh(a)
    return _agree(w, exact[0], "eigh_tridiagonal"), _agree(_aligned(v, exact[1]), exact[1], "eigh_tridiagonal")


def eigvalsh_tridiagonal(d, e, select="a", select_range=None, check_finite=True, tol=0.0, lapack_driver="auto"):
    """`scipy.linalg.eigvalsh_tridiagonal` (select='a'), differentiable in `d` and `e`."""
    if not _any_tracked(d, e):
        return _linalg().eigvalsh_tridiagonal(d, e, select, select_range, check_finite, tol, lapack_driver)
    return eigh_tridiagonal(d, e, True, select, select_range, check_finite, tol, lapack_driver)


def _c_and_r(c_or_cr):
    if isinstance(c_or_cr, tuple):
        return c_or_cr
    return c_or_cr, None


def solve_toeplitz(c_or_cr, b, check_finite=True):
    """`scipy.linalg.solve_toeplitz`, differentiable in `c`, `r` and `b` (through the dense matrix)."""
    c, r = _c_and_r(c_or_cr)
    linalg = _linalg()
    if not _any_tracked(c, r, b):
        return linalg.solve_toeplitz(c_or_cr, b, check_finite)
    if check_finite:
        check_finite_values(c, r, b)
    exact = linalg.solve_toeplitz((_plain(c), _plain(r)) if r is not None else _plain(c), _plain(b), check_finite)
    return _agree(np.linalg.solve(toeplitz(c, r), b), exact, "solve_toeplitz")


def matmul_toeplitz(c_or_cr, x, check_finite=False, workers=None):
    """`scipy.linalg.matmul_toeplitz`, differentiable in `c`, `r` and `x` (through the dense matrix)."""
    c, r = _c_and_r(c_or_cr)
    linalg = _linalg()
    if not _any_tracked(c, r, x):
        return linalg.matmul_toeplitz(c_or_cr, x, check_finite, workers)
    if check_finite:
        check_finite_values(c, r, x)
    exact = linalg.matmul_toeplitz((_plain(c), _plain(r)) if r is not None else _plain(c), _plain(x), check_finite)
    return _agree(np.reshape(toeplitz(c, r) @ x, np.shape(exact)), exact, "matmul_toeplitz")


def solve_circulant(c, b, singular="raise", tol=None, caxis=-1, baxis=0, outaxis=0):
    """`scipy.linalg.solve_circulant` for 1-D `c`, differentiable in `c` and `b` (through the dense matrix)."""
    linalg = _linalg()
    if not _any_tracked(c, b):
        return linalg.solve_circulant(c, b, singular, tol, caxis, baxis, outaxis)
    if np.ndim(stop_gradient(c)) != 1 or baxis != 0 or outaxis != 0:
        raise NotImplementedError("pullback.scipy.linalg.solve_circulant: 1-D c and the default axes on traced values.")
    exact = linalg.solve_circulant(_plain(c), _plain(b), singular, tol)
    return _agree(np.linalg.solve(circulant(c), b), exact, "solve_circulant")


_NOTE = "Call pullback.scipy.linalg.{} (SciPy's own converts its input with np.asarray). "
_AGREE = " Gives SciPy's value; raises where pullback's and SciPy's answers differ beyond rounding."
_ROWS = {
    inv: ("a", "Through numpy.linalg.inv of the part `assume_a` reads." + _AGREE),
    solve: ("a, b", "Batched as SciPy's (leading axes of `a` and `b` broadcast; a 1-D `b` is one vector for every "
                    "matrix); `assume_a` (sym/pos/her read the `lower` triangle, diagonal, tridiagonal, triangular), "
                    "`transposed`." + _AGREE),
    det: ("a", "Batched." + _AGREE),
    cholesky: ("a", "Upper factor by default; reads the triangle it returns." + _AGREE),
    eigh: ("a", "Standard problem (b= is refused); `lower`, `eigvals_only`, `subset_by_index`. Eigenvector signs as "
                "SciPy's." + _AGREE),
    eigvalsh: ("a", "Standard problem; `subset_by_index`." + _AGREE),
    svd: ("a", "`full_matrices`, `compute_uv`; singular vector signs as SciPy's." + _AGREE),
    svdvals: ("a", "Differentiable everywhere." + _AGREE),
    qr: ("a", "Modes full, economic, r (pivoting and raw refused); full rank." + _AGREE),
    lu: ("a", "Square 2-D; `permute_l`, `p_indices` (the permutation has no gradient); exact while the pivot order "
              "is locally constant." + _AGREE),
    pinv: ("a", "`atol`, `rtol`, `return_rank`; exact where the rank is locally constant." + _AGREE),
    pinvh: ("a", "Reads the `lower` triangle; exact where the rank is locally constant." + _AGREE),
    lstsq: ("a, b", "x, residues and singular values; full rank `a`." + _AGREE),
    norm: ("a", "Through numpy.linalg.norm." + _AGREE),
    orth: ("A", "The left singular vectors of the nonzero singular values: distinct singular values." + _AGREE),
    subspace_angles: ("A, B", "SciPy's algorithm on the differentiable SVDs." + _AGREE),
    qr_multiply: ("a, c", "Without pivoting; full rank `a`." + _AGREE),
    matrix_balance: ("A", "B = T⁻¹ A T for SciPy's T (a permutation and powers of 2: piecewise constant, no "
                          "gradient)." + _AGREE),
    orthogonal_procrustes: ("A, B", "Through the SVD of BᵀA: distinct singular values." + _AGREE),
    polar: ("a", "Through the SVD: distinct singular values." + _AGREE),
    fractional_matrix_power: ("A", "The power t is plain. Fréchet derivative by the block-triangular method. Real "
                                   "results only: where SciPy returns a complex array whose imaginary part is zero to "
                                   "rounding, the real part; otherwise an error."),
    expm_frechet: ("A, E", "Through expm of [[A, E], [0, A]]." + _AGREE),
    solve_sylvester: ("a, b, q", "Its own rule: the adjoint solves the transposed equation."),
    solve_continuous_lyapunov: ("a, q", "Also reached as solve_lyapunov. Through solve_sylvester." + _AGREE),
    solve_discrete_lyapunov: ("a, q", "SciPy's methods 'direct' (Kronecker) and 'bilinear' (Sylvester)." + _AGREE),
    toeplitz: ("c, r", "Batched, as SciPy's."), circulant: ("c", "Batched, as SciPy's."), hankel: ("c, r", ""),
    block_diag: ("*arrs", ""), companion: ("a", ""), leslie: ("f, s", ""),
    fiedler: ("a", "Subgradient 0 where two entries are equal."), fiedler_companion: ("a", "1-D coefficients."), convolution_matrix: ("a", "Modes full, same, valid."),
    khatri_rao: ("a, b", ""), diagsvd: ("s", ""),
    solve_banded: ("ab, b", "Through the dense matrix." + _AGREE),
    solveh_banded: ("ab, b", "Through the dense symmetric matrix." + _AGREE),
    cholesky_banded: ("ab", "Through the dense Cholesky factor." + _AGREE),
    cho_solve_banded: ("cb, b", "Two triangular solves with the dense factor." + _AGREE),
    eig_banded: ("a_band", "select='a' only; through eigh of the dense matrix." + _AGREE),
    eigvals_banded: ("a_band", "select='a' only." + _AGREE),
    eigh_tridiagonal: ("d, e", "select='a' only; through eigh of the dense matrix." + _AGREE),
    eigvalsh_tridiagonal: ("d, e", "select='a' only." + _AGREE),
    solve_toeplitz: ("c, r, b", "Through the dense matrix." + _AGREE),
    matmul_toeplitz: ("c, r, x", "Through the dense matrix." + _AGREE),
    solve_circulant: ("c, b", "1-D c and the default axes; through the dense matrix." + _AGREE),
}
for _fn, (_args, _notes) in _ROWS.items():
    describe(_fn, _args, _NOTE.format(_fn.__name__) + _notes, kind="composite", name=f"scipy.linalg.{_fn.__name__}")
# These rows are keyed on pullback.rules.linalg's one-matrix versions (which record them first); they describe the
# versions above, which pullback.scipy.linalg exports.
_BATCHED = "Batched as SciPy's (leading axes broadcast against `b`'s; a 1-D `b` is one vector for every matrix). "
_STACKS = {
    one_matrix.solve_triangular: ("a, b", _BATCHED + "The gradient of `a` lies in the triangle read (strictly, with "
                                  "unit_diagonal); `trans` 0, 1, 2 (N, T, C)."),
    one_matrix.cho_factor: ("a", "Through np.linalg.cholesky of the triangle read; a stack gives SciPy's "
                            "`[c, flags]`."),
    one_matrix.cho_solve: ("c, b", _BATCHED + "Two triangular solves; real values (complex ones are refused)."),
    one_matrix.lu_factor: ("a", "Square matrices, a stack one matrix at a time as SciPy's (`[lu, piv]`); exact while "
                           "the pivot order is locally constant (it is piecewise constant). `piv` has no gradient."),
    one_matrix.lu_solve: ("lu, b", _BATCHED + "Two triangular solves; `trans` 0, 1 or 2, as SciPy's (which refuses "
                          "'N', 'T', 'C')."),
}
for _fn, (_args, _notes) in _STACKS.items():
    describe(_fn, _args, _NOTE.format(_fn.__name__) + _notes, kind="composite", name=f"scipy.linalg.{_fn.__name__}",
             family="linalg")
for _fn in (sqrtm, logm, cosm, sinm, tanm, coshm, sinhm, tanhm, signm):
    describe(_fn, "A", _NOTE.format(_fn.__name__) + "Fréchet derivative by the block-triangular method, in both modes "
             "and to any order; real results only.", kind="rule", rule=matrix_function_rule,
             name=f"scipy.linalg.{_fn.__name__}")
describe(solve_sylvester, "a, b, q", _NOTE.format("solve_sylvester") + _ROWS[solve_sylvester][1], kind="rule",
         rule=sylvester_rule, name="scipy.linalg.solve_sylvester")
describe("scipy.linalg.solve_lyapunov", "a, q", "SciPy's alias of solve_continuous_lyapunov; call "
         "pullback.scipy.linalg.solve_lyapunov.", kind="composite", name="scipy.linalg.solve_lyapunov")


# --- algebraic Riccati equations ----------------------------------------------------------------
# With the optimal gain K and the closed loop Acl = A - B K, the continuous equation reads
# Aclᵀ X + X Acl + Kᵀ R K + Q = 0 (K = R⁻¹ Bᵀ X) and the discrete one X = Aclᵀ X Acl + Kᵀ R K + Q
# (K = (R + Bᵀ X B)⁻¹ Bᵀ X A). K is optimal, so its own change drops out, and
#     dE = (dA - dB K)ᵀ X (Acl) + (Aclᵀ) X (dA - dB K) + Kᵀ dR K + dQ
# drives dX through a Sylvester (continuous) or Stein (discrete) equation in Acl.
def _stein(a, q):
    """X with a X aᵀ - X + q = 0, by the Kronecker form (differentiable)."""
    n = np.shape(stop_gradient(a))[0]
    lhs = np.eye(n * n) - np.kron(a, a)
    return np.reshape(np.linalg.solve(lhs, np.reshape(q, (-1,))), (n, n))


def _gain(a, b, r, x, discrete):
    if discrete:
        return np.linalg.solve(r + _t(b) @ x @ b, _t(b) @ x @ a)
    return np.linalg.solve(r, _t(b) @ x)


@primitive
def riccati(a, b, q, r, discrete):
    """X solving the continuous (or discrete) algebraic Riccati equation, by SciPy."""
    linalg = _linalg()
    return (linalg.solve_discrete_are if discrete else linalg.solve_continuous_are)(a, b, q, r)


@rrule(riccati)
def riccati_rule(a, b, q, r, discrete):
    x = riccati(a, b, q, r, discrete)

    def back(g):
        k = _gain(a, b, r, x, discrete)
        closed = a - b @ k
        if discrete:
            w = _stein(closed, g)
            ga = x @ closed @ _t(w) + _t(x) @ closed @ w
            return ga, -(ga @ _t(k)), w, k @ w @ _t(k), None
        w = sylvester(closed, _t(closed), g)
        ga = -(x @ _t(w) + _t(x) @ w)
        return ga, -(ga @ _t(k)), -w, -(k @ w @ _t(k)), None

    return x, back


@frule(riccati)
def riccati_frule(primals, tangents):
    (a, b, q, r, discrete), (ta, tb, tq, tr) = primals, tangents[:4]
    x = riccati(a, b, q, r, discrete)
    if ta is None and tb is None and tq is None and tr is None:
        return x, None
    k = _gain(a, b, r, x, discrete)
    closed = a - b @ k
    move = add_tangents(ta, None if tb is None else -(tb @ k))  # dA - dB K
    left = None if move is None else (_t(move) @ x @ closed if discrete else _t(move) @ x)
    right = None if move is None else (_t(closed) @ x @ move if discrete else x @ move)
    drive = add_tangents(left, right, None if tr is None else _t(k) @ tr @ k, tq)
    return x, _stein(_t(closed), drive) if discrete else sylvester(_t(closed), closed, -drive)


def _riccati_standin(name, discrete):
    def standin(a, b, q, r, e=None, s=None, balanced=True):
        linalg = _linalg()
        if not _any_tracked(a, b, q, r, e, s):
            return getattr(linalg, name)(a, b, q, r, e, s, balanced)
        if e is not None or s is not None:
            raise NotImplementedError(f"pullback.scipy.linalg.{name}: e= and s= are not differentiable here.")
        x = riccati(a, b, q, r, discrete)  # balanced=False: SciPy's value for it (rounded differently), same derivative
        return x if balanced else _agree(x, getattr(linalg, name)(*(_plain(v) for v in (a, b, q, r)), balanced=False), name)

    standin.__name__ = standin.__qualname__ = name
    standin.__module__ = __name__
    standin.__doc__ = (f"`scipy.linalg.{name}`, differentiable in a, b, q and r (without e and s); SciPy's value.")
    return standin


solve_continuous_are = _riccati_standin("solve_continuous_are", False)
solve_discrete_are = _riccati_standin("solve_discrete_are", True)
for _fn in (solve_continuous_are, solve_discrete_are):
    describe(_fn, "a, b, q, r", _NOTE.format(_fn.__name__) + "Its own rule: the derivative solves a Sylvester "
             "(continuous) or Stein (discrete) equation in the closed loop A - B K. e= and s= are refused.",
             kind="rule", rule=riccati_rule, name=f"scipy.linalg.{_fn.__name__}")
