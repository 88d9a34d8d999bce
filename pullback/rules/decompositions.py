"""Rules for the matrix decompositions of `numpy.linalg`, in both modes: cholesky, eigh and
eigvalsh, svd and qr (of real matrices), eig and eigvals (of real or complex ones).

All act on the last two axes and broadcast over the others. Functions that read only one
triangle of their input (cholesky, eigh, eigvalsh) get the exact derivative of what NumPy
computes: the gradient is zero in the triangle NumPy ignores, and for a symmetric input the
gradient with respect to the symmetric matrix is `(G + G.T) / 2` of it. Decompositions with
several outputs record one node per output over a single factorisation, so each backward
sees only its own cotangent.

The forward rules are the classical perturbation formulas (the eigenvector and singular vector
formulas with F_ij = 1 / (λ_j - λ_i), ...). Where a derivative does not exist (eigenvectors of a
repeated eigenvalue, to within rounding; columns beyond the first min(M, N) with `full_matrices=True`), the reverse
rule raises when a cotangent reaches it; the forward rule cannot know whether the tangent will
be used, so it gives NaN there.
"""

import numpy as np

from .._arrays import holds_foreign_array, like_input, type_name, zeros_as
from .._extend import primitive, rrule
from .._standins import dtype_of, is_stand_in
from .._values import stop_gradient
from ._register import composite, forward_in_first, with_numpy_value


def _t(a):
    return np.swapaxes(a, -1, -2)


def _real_only(a, name):
    """The Hermitian decompositions' rules are written for real matrices: refuse a complex one clearly."""
    if np.iscomplexobj(a):
        raise TypeError(f"numpy.linalg.{name} of a complex matrix is not differentiable by pullback (its rules are "
                        "written for real matrices). Use np.linalg.eig / eigvals, or work with the real matrix "
                        "[[Re, -Im], [Im, Re]] of the same linear map.")


class _Once:
    """Computes a factorisation once per input value, for the several output nodes that share it."""

    def __init__(self, compute):
        self.compute = compute
        self.key = self.value = None

    def __call__(self, a):
        if self.key is not a:
            self.value, self.key = self.compute(a), a
        return self.value


def _triangle_gradient(s, lower):
    """The gradient for a function that reads one triangle of a symmetric matrix, from `s`,
    its gradient with respect to the full matrix: off the diagonal both mirrored entries count.
    For a Hermitian matrix the mirrored entry is the conjugate, and the diagonal's real part counts."""
    both = s + (np.conjugate(_t(s)) if np.iscomplexobj(s) else _t(s))
    half_diagonal = 0.5 * np.triu(np.tril(both))
    return (np.tril(both) if lower else np.triu(both)) - half_diagonal


def _symmetric_part(t, lower):
    """The symmetric (Hermitian) matrix a function reading one triangle of its input sees in tangent `t`."""
    low, strict = (np.tril(t), np.tril(t, -1)) if lower else (np.triu(t), np.triu(t, 1))
    if not np.iscomplexobj(t):
        return low + _t(strict)
    # mirrored entries conjugated, the diagonal's imaginary part ignored (as LAPACK does)
    return low + np.conjugate(_t(strict)) - 1j * np.imag(np.triu(np.tril(t)))


def _values_unreadable(x):
    """Whether the values of `x` cannot be read here: another library's lazy array (Dask's), which a branch
    on its values would compute. pb.jit's stand-ins can be read: the trace guards such a branch."""
    plain = stop_gradient(x)
    return holds_foreign_array(plain) and not is_stand_in(plain)


def _nan_like(x, shape):
    return like_input(np.full(shape, np.nan, dtype=np.result_type(stop_gradient(x))), x)


# --- Cholesky -------------------------------------------------------------------------
@primitive
def cholesky_lower(a):
    """The lower Cholesky factor of `a`, reading its lower triangle."""
    return np.linalg.cholesky(a)


@primitive
def cholesky_upper(a):
    """The upper Cholesky factor of `a`, reading its upper triangle (NumPy's own, which rounds
    unlike the transpose of the lower factor of `a.T`)."""
    return np.linalg.cholesky(a, upper=True)


def _cholesky_lower_back(L, g):
    # A = L Lᵀ gives S = L⁻ᵀ Φ(Lᵀ Ḡ) L⁻¹ with Φ = lower triangle, halved diagonal.
    p = np.tril(_t(L) @ g)
    p = p - 0.5 * np.triu(p)
    s = _t(np.linalg.solve(_t(L), _t(np.linalg.solve(_t(L), p))))
    return _triangle_gradient(s, lower=True)


def _cholesky_lower_tangent(L, t):
    # dL = L Φ(L⁻¹ dA L⁻ᵀ), Φ = lower triangle with halved diagonal; dA is what the lower triangle gives.
    inside = _t(np.linalg.solve(L, _t(np.linalg.solve(L, _symmetric_part(t, lower=True)))))
    return L @ (np.tril(inside) - 0.5 * np.triu(np.tril(inside)))


@rrule(cholesky_lower)
def _cholesky_rule(a):
    L = cholesky_lower(a)
    return L, lambda g: (_cholesky_lower_back(L, g),)


@rrule(cholesky_upper)
def _cholesky_upper_rule(a):
    U = cholesky_upper(a)  # Uᵀ is the lower factor of aᵀ
    return U, lambda g: (_t(_cholesky_lower_back(_t(U), _t(g))),)


@forward_in_first(cholesky_lower)
def _cholesky_frule(t, a):
    L = cholesky_lower(a)
    return L, _cholesky_lower_tangent(L, t)


@forward_in_first(cholesky_upper)
def _cholesky_upper_frule(t, a):
    U = cholesky_upper(a)
    return U, _t(_cholesky_lower_tangent(_t(U), _t(t)))


@composite(np.linalg.cholesky, args="a", notes="""Reads the lower triangle (the upper with
      `upper=True`); the gradient lies in that triangle. Needs a positive definite input.""")
def cholesky(a, /, *, upper=False):
    _real_only(a, "cholesky")
    if type_name(stop_gradient(a)).startswith("dask."):
        raise TypeError(
            "numpy.linalg.cholesky of a Dask array runs dask.array.linalg.cholesky, which returns the upper factor "
            "(NumPy returns the lower one) and reads both triangles of its blocks, so pullback does not differentiate "
            "it. Factor a NumPy array instead (x.compute()), or write the solve it serves with np.linalg.solve.")
    return cholesky_upper(a) if upper else cholesky_lower(a)


# --- symmetric eigendecomposition -----------------------------------------------------
_EIGH = type(np.linalg.eigh(np.eye(1)))


def _tied(w):
    """The off-diagonal pairs of values `w` (eigenvalues, or squared singular values) that count as tied: equal,
    or within 1e3 units in the last place of the larger of the two (at least 1e-10 of it). Values that nearly
    coincide are computed apart by rounding, and their vectors' derivative divides differences of rounded
    numbers by that gap: it would come out wrong (by percents, or as large as 1 / eps), not as an error."""
    plain = stop_gradient(w)
    closeness = max(1e-10, 1e3 * float(np.finfo(dtype_of(plain)).eps))
    size = np.abs(plain)
    gap = np.abs(plain[..., None, :] - plain[..., :, None])
    near = gap <= closeness * np.maximum(size[..., None, :], size[..., :, None])
    return near & ~np.eye(np.shape(plain)[-1], dtype=bool)


def _distinct_gaps(w, what, cotangent):
    """1 / (w_j - w_i) off the diagonal, for the derivative of the vectors of values `w`, whose cotangent
    `cotangent` has one column per vector. Where two values are tied (see `_tied`): 0 if both vectors' columns
    of `cotangent` are zero (the function does not use them), else a clear error, as the derivative does not
    exist there (the vectors jump as the values split) or cannot be found from the vectors' cotangents. NaN
    where tied for a Dask array, whose values are not known until computed."""
    if _values_unreadable(w):
        return _gaps_or_nan(w)
    tied = _tied(w)
    if np.any(tied):
        used = np.any(stop_gradient(cotangent) != 0, axis=-2)
        if np.any(tied & (used[..., None, :] | used[..., :, None])):
            raise ValueError(
                f"{what} are not unique where two eigenvalues or singular values coincide (or lie within rounding "
                "of each other), and this function depends on the vectors chosen for them, or on how those turn "
                "as the values split: its derivative does not exist there, or cannot be found from the vectors. "
                "Use a function of the values only (np.linalg.eigvalsh, np.linalg.svd(a, compute_uv=False)); for "
                "a matrix function V @ diag(f(w)) @ V.T, pullback.scipy.linalg's sqrtm, expm, logm, cosm, ..., "
                "fractional_matrix_power or matrix products (a @ a.T @ a); or perturb the input."
            )
    return _gaps_or_nan(w, fill=0.0, tied=tied)


def _gaps_or_nan(w, fill=np.nan, tied=None):
    """1 / (w_j - w_i) off the diagonal, `fill` (NaN: no derivative) where two values are tied (see `_tied`)."""
    gaps = w[..., None, :] - w[..., :, None]
    tied = _tied(w) if tied is None else tied
    distinct = ~np.eye(np.shape(stop_gradient(w))[-1], dtype=bool) & ~tied
    return np.where(distinct, 1.0 / np.where(distinct, gaps, 1.0), np.where(tied, fill, 0.0))


@primitive
def eigh_values(a, once, lower):
    """The eigenvalues of the symmetric matrix in the `lower` (or upper) triangle of `a`, from `once(a)`."""
    return once(a)[0]


@primitive
def eigh_vectors(a, once, lower):
    """The eigenvectors of the symmetric matrix in the `lower` (or upper) triangle of `a`, from `once(a)`."""
    return once(a)[1]


@primitive
def eigh_vectors_any_phase(a, once, lower):
    """The eigenvectors, as eigh_vectors, for a use that no eigenvector's phase changes (the eigenvalues'
    own derivatives): their tangent is the one that turns no phase, Im(diag(Vᴴ dV)) = 0."""
    return once(a)[1]


def _phase_free_vectors(a, once, lower, v):
    """`v`, or for complex Hermitian `a` the same eigenvectors with a tangent in forward mode (eigh_vectors
    gives NaN there), for the eigenvalues' derivatives, which no phase changes."""
    return eigh_vectors_any_phase(a, once, lower) if np.iscomplexobj(v) else v


@rrule(eigh_values)
def _eigh_values_rule(a, once, lower):
    w, v = once(a)

    def back(g):  # conj(V) diag(g) Vᵀ: dw = Re(diag(Vᴴ dA V))
        u = _phase_free_vectors(a, once, lower, v)
        return (_triangle_gradient((_conj(u) * g[..., None, :]) @ _t(u), lower), None, None)

    return w, back


@forward_in_first(eigh_values)
def _eigh_values_frule(t, a, once, lower):
    w, v = once(a)
    u = _phase_free_vectors(a, once, lower, v)
    return w, np.real(np.sum(_conj(u) * (_symmetric_part(t, lower) @ u), axis=-2))  # diag(Vᴴ dA V)


@rrule(eigh_vectors)
def _eigh_vectors_rule(a, once, lower):
    w, v = once(a)

    def back(g):
        if np.iscomplexobj(v):
            _check_phase_invariant(g, v)
        s = _conj(v) @ (_distinct_gaps(w, "Eigenvectors", g) * (_t(v) @ g)) @ _t(v)
        return (_triangle_gradient(s, lower), None, None)

    return v, back


def _conj(v):
    return np.conjugate(v) if np.iscomplexobj(v) else v


def _check_phase_invariant(g, v):
    """Refuse a cotangent that depends on the phase of the eigenvectors of a complex Hermitian matrix.

    LAPACK fixes no phase for them (NumPy returns whatever it computed), so only functions invariant
    to each vector's phase have a derivative: turning v_k by e^(iθ) changes L by -θ Im(Σ_i g_ik v_ik).
    """
    g, v = stop_gradient(g), stop_gradient(v)
    turn = np.abs(np.imag(np.sum(g * v, axis=-2)))
    rounding = max(1e-8, 1e3 * float(np.finfo(np.result_type(dtype_of(g), dtype_of(v))).eps))  # complex64: ~1e-7
    if np.any(turn > rounding * (1.0 + np.max(np.abs(g), initial=0.0))):
        raise ValueError(
            "The eigenvectors of a complex Hermitian matrix are fixed only up to a phase each, which NumPy does "
            "not choose in any stated way, so a function that depends on that phase has no derivative. Use "
            "phase-invariant functions of them (|v|**2, V @ diag(f(w)) @ V.conj().T, ...)."
        )


@forward_in_first(eigh_vectors)
def _eigh_vectors_frule(t, a, once, lower):
    w, v = once(a)
    if np.iscomplexobj(v):  # the phase NumPy returns is not a stated function of the input: no tangent
        return v, _nan_like(v, np.shape(stop_gradient(v)))
    return v, v @ (_gaps_or_nan(w) * (_t(v) @ _symmetric_part(t, lower) @ v))  # V (F ∘ Vᵀ dA V)


@rrule(eigh_vectors_any_phase)
def _eigh_vectors_any_phase_rule(a, once, lower):
    w, v = once(a)
    u = _phase_free_vectors(a, once, lower, v)  # v itself, with tangents under an outer forward level

    def back(g):
        _check_phase_invariant(g, u)
        f = _distinct_gaps(w, "Eigenvectors", g)
        return (_triangle_gradient(_conj(u) @ (f * (_t(u) @ g)) @ _t(u), lower), None, None)

    return u, back


@forward_in_first(eigh_vectors_any_phase)
def _eigh_vectors_any_phase_frule(t, a, once, lower):
    w, v = once(a)
    u = _phase_free_vectors(a, once, lower, v)  # V (F ∘ Vᴴ dA V): F's zero diagonal turns no phase
    return u, u @ (_gaps_or_nan(w) * (_conj(_t(u)) @ _symmetric_part(t, lower) @ u))


@composite(np.linalg.eigh, args="a", notes="""Reads the `UPLO` triangle. Eigenvalue gradients
      exist everywhere; eigenvector gradients need distinct eigenvalues (values equal, or
      within rounding of each other, raise where their vectors are used; in forward mode their
      tangents are NaN). Each eigenvector is
      fixed up to sign, so use sign-invariant functions of them. Complex Hermitian input: each
      eigenvector is fixed up to a phase; reverse mode takes phase-invariant functions of them
      (others raise), forward mode gives NaN tangents for them.""")
def eigh(a, UPLO="L"):
    once = _Once(lambda m: tuple(np.linalg.eigh(m, UPLO)))
    lower = UPLO.upper() == "L"
    return _EIGH(eigh_values(a, once, lower), eigh_vectors(a, once, lower))


@composite(np.linalg.eigvalsh, args="a", numpy_value=True, notes="""Reads the `UPLO` triangle (real or complex
           Hermitian); differentiable everywhere.""")
def eigvalsh(a, UPLO="L"):
    once = _Once(lambda m: tuple(np.linalg.eigh(m, UPLO)))
    return eigh_values(a, once, UPLO.upper() == "L")


# --- general eigendecomposition --------------------------------------------------------
# A = V diag(w) V⁻¹, complex in general. With P = V⁻¹ dA V: dw = diag(P), and dV = V (F ∘ P)
# (F_ij = 1 / (w_j - w_i)) moved along each column to keep NumPy's normalisation: unit norm
# (subtract V Re(diag(Vᴴ dV))), and the largest component (in modulus) real (add i θ_k v_k).
# Each step is written out in both modes; cotangents follow dz -> Re(c * dz).
_EIG = type(np.linalg.eig(np.eye(1)))


def _largest(v):
    """Row index of each column's largest component (which LAPACK makes real), as a one-hot mask."""
    plain = stop_gradient(v)
    if np.shape(plain)[-2] == 0:  # no components (argmax of none raises)
        return np.zeros(np.shape(plain), dtype=bool)
    m = np.argmax(np.abs(plain), axis=-2)
    return np.arange(plain.shape[-1])[:, None] == m[..., None, :]


def _at_largest(x, mask):
    return np.sum(np.where(mask, x, 0.0), axis=-2)


def _eig_values_back(g, v):
    return _t(np.linalg.inv(v)) @ (g[..., :, None] * _t(v))


def _check_eigenvalue_derivative(w, v, g=None):
    """Refuse where the eigenvalues' derivative does not exist or is not the one computed: a defective
    matrix (its eigenvectors do not span), and a repeated eigenvalue, where the individual eigenvalues move
    apart along the direction taken (forward mode: `g` None), or where the cotangent `g` weighs the tied
    eigenvalues differently (a function that is not symmetric in them)."""
    w, v = stop_gradient(w), stop_gradient(v)
    if np.size(v) == 0:  # no eigenvalues (np.linalg.cond refuses empty matrices)
        return
    if np.any(np.linalg.cond(v) > 1e10):
        raise ValueError("The eigenvalues of a defective matrix (a repeated eigenvalue without as many eigenvectors) "
                         "have no derivative there. Perturb the matrix, or differentiate np.trace or np.linalg.det.")
    n = np.shape(w)[-1]
    tied = np.abs(w[..., :, None] - w[..., None, :]) <= 1e-10 * _at_least_one(np.max(np.abs(w), initial=0.0))
    tied = tied & ~np.eye(n, dtype=bool)
    if not np.any(tied):
        return
    if g is not None:
        g = stop_gradient(g)
        scale = _at_least_one(np.max(np.abs(g), initial=0.0))
        if not np.any(tied & (np.abs(g[..., :, None] - g[..., None, :]) > 1e-12 * scale)):
            return  # a symmetric function of the tied eigenvalues: its gradient exists and is the one computed
    raise ValueError("At a repeated eigenvalue the individual eigenvalues have no derivative: they split apart in a "
                     "way that depends on the direction. A function symmetric in the tied eigenvalues (their sum, "
                     "product) is differentiable in reverse mode; or perturb the matrix.")


def _at_least_one(x):
    """max(1, x), as an array: under pb.jit, Python's float of a traced value would be a guard on that value."""
    return np.maximum(x, 1.0)


def _eig_vectors_tangent(t, w, v, gaps):
    p = np.linalg.solve(v, t @ v)
    dv = v @ (gaps * p)
    dv = dv - v * np.real(np.sum(np.conjugate(v) * dv, axis=-2))[..., None, :]
    if np.iscomplexobj(v):
        mask = _largest(v)
        theta = -np.imag(_at_largest(dv, mask)) / np.real(_at_largest(v, mask))
        dv = dv + 1j * v * theta[..., None, :]
    return p, dv


@primitive
def eig_values(a, once):
    """The eigenvalues of `a`, from `once(a)`."""
    return once(a)[0]


@primitive
def eig_vectors(a, once):
    """The unit eigenvectors of `a` (columns), from `once(a)`."""
    return once(a)[1]


@rrule(eig_values)
def _eig_values_rule(a, once):
    w, v = once(a)

    def back(g):
        _check_eigenvalue_derivative(w, v, g)
        return _eig_values_back(g, v), None

    return w, back


@forward_in_first(eig_values)
def _eig_values_frule(t, a, once):
    w, v = once(a)
    _check_eigenvalue_derivative(w, v)
    return w, np.diagonal(np.linalg.solve(v, t @ v), axis1=-2, axis2=-1)


@rrule(eig_vectors)
def _eig_vectors_rule(a, once):
    w, v = once(a)

    def back(g):
        gaps = _distinct_gaps(w, "Eigenvectors", g)
        if np.iscomplexobj(v):
            mask = _largest(v)
            turn = np.real(1j * np.sum(g * v, axis=-2)) / np.real(_at_largest(v, mask))
            g = g + 1j * np.where(mask, turn[..., None, :], 0.0)
        g = g - np.conjugate(v) * np.real(np.sum(g * v, axis=-2))[..., None, :]
        return _t(np.linalg.inv(v)) @ (gaps * (_t(v) @ g)) @ _t(v), None

    return v, back


@forward_in_first(eig_vectors)
def _eig_vectors_frule(t, a, once):
    w, v = once(a)
    return v, _eig_vectors_tangent(t, w, v, _gaps_or_nan(w))[1]


@composite(np.linalg.eig, args="a", notes="""Real or complex input. Eigenvalue gradients need a
      diagonalisable matrix; eigenvector gradients need distinct eigenvalues (ties, to within
      rounding, raise where their vectors are used; in forward mode their tangents are NaN). The
      eigenvectors are differentiated as NumPy returns them: unit norm, largest component (in
      modulus) real.""")
def eig(a):
    once = _Once(lambda m: tuple(np.linalg.eig(m)))
    return _EIG(eig_values(a, once), eig_vectors(a, once))


@primitive
def eigenvalues(a):
    """`np.linalg.eigvals(a)`."""
    return np.linalg.eigvals(a)


def _matched_vectors(a, w):
    """The eigenvectors of `a`, one column per value of `w` (eigvals and eig may order them differently)."""
    values, v = np.linalg.eig(a)
    if np.shape(v)[-1] == 0:  # no eigenvalues to match (argmin of none raises)
        return v
    distance = np.abs(stop_gradient(w)[..., :, None] - stop_gradient(values)[..., None, :])
    order = np.argmin(distance, axis=-1)
    if np.any(np.sort(order, axis=-1) != np.arange(np.shape(order)[-1])):  # a repeated value: one column each
        order = _nearest_one_to_one(distance)
    return np.take_along_axis(v, order[..., None, :], axis=-1)


def _nearest_one_to_one(distance):
    """For each row of each (n, n) matrix of distances, a column, no column twice: closest pairs first.
    Whole-array NumPy calls on all the matrices at once, so that pb.jit records them."""
    shape = np.shape(distance)
    n = shape[-1]
    index = np.arange(n)
    order = np.zeros(shape[:-1], dtype=np.intp)
    for _ in range(n):
        closest = np.argmin(np.reshape(distance, shape[:-2] + (n * n,)), axis=-1)
        row, column = closest[..., None] // n, closest[..., None] % n
        order = np.where(index == row, column, order)
        taken = (index[:, None] == row[..., None]) | (index == column[..., None])
        distance = np.where(taken, np.inf, distance)
    return order


@rrule(eigenvalues)
def _eigenvalues_rule(a):
    w = eigenvalues(a)

    def back(g):
        v = _matched_vectors(a, w)
        _check_eigenvalue_derivative(w, v, g)
        return (_eig_values_back(g, v),)

    return w, back


@forward_in_first(eigenvalues)
def _eigenvalues_frule(t, a):
    w = eigenvalues(a)
    v = _matched_vectors(a, w)
    _check_eigenvalue_derivative(w, v)
    return w, np.diagonal(np.linalg.solve(v, t @ v), axis1=-2, axis2=-1)


@composite(np.linalg.eigvals, args="a", notes="Real or complex input; needs a diagonalisable matrix.")
def eigvals(a):
    return eigenvalues(a)


# --- singular value decomposition -----------------------------------------------------
_SVD = type(np.linalg.svd(np.eye(1)))


def _thin(u, s, vh):
    k = np.shape(stop_gradient(s))[-1]
    return u[..., :, :k], vh[..., :k, :]


def _check_unused_columns(g, k, axis, what):
    if np.shape(stop_gradient(g))[axis] == k:  # full_matrices=False: there are none (and a Dask g stays lazy)
        return
    extra = stop_gradient(g)[..., :, k:] if axis == -1 else stop_gradient(g)[..., k:, :]
    if np.any(extra != 0):
        raise ValueError(
            f"{what} beyond the first min(M, N) are not unique (full_matrices=True), so no gradient "
            "flows through them. Use full_matrices=False, or only the first min(M, N) of them."
        )


@primitive
def svd_values(a, once):
    """The singular values of `a`, from `once(a) = (u, s, vh)`."""
    return once(a)[1]


@primitive
def svd_u(a, once):
    """The left singular vectors of `a`, from `once(a) = (u, s, vh)`."""
    return once(a)[0]


@primitive
def svd_vh(a, once):
    """The right singular vectors of `a` (as rows), from `once(a) = (u, s, vh)`."""
    return once(a)[2]


@rrule(svd_values)
def _svd_values_rule(a, once):
    u, s, vh = once(a)

    def back(g):
        u_k, vh_k = _thin(u, s, vh)
        if np.iscomplexobj(u):  # ds = Re(diag(Uᴴ dA V)): the conjugate of the real formula
            return (np.conjugate((u_k * g[..., None, :]) @ vh_k), None)
        return ((u_k * g[..., None, :]) @ vh_k, None)

    return s, back


@forward_in_first(svd_values)
def _svd_values_frule(t, a, once):
    u, s, vh = once(a)
    u_k, vh_k = _thin(u, s, vh)
    if np.iscomplexobj(u):
        return s, np.real(np.sum(np.conjugate(u_k) * (t @ _t(np.conjugate(vh_k))), axis=-2))  # Re(diag(Uᴴ dA V))
    return s, np.sum(u_k * (t @ _t(vh_k)), axis=-2)  # diag(Uᵀ dA V)


def _svd_vector_tangent(t, u_k, s, v_k):
    """dU of the thin SVD A = U S Vᵀ along dA = `t` (for dV, pass Aᵀ's factors and tangent)."""
    dp = _t(u_k) @ t @ v_k  # Uᵀ dA V
    dot = u_k @ (_gaps_or_nan(s * s) * (dp * s[..., None, :] + s[..., :, None] * _t(dp)))
    if np.shape(stop_gradient(u_k))[-2] > np.shape(stop_gradient(s))[-1]:  # the part outside the span of U
        zero = stop_gradient(s) == 0  # no derivative there: NaN
        inverse = np.where(zero, np.nan, 1.0 / np.where(zero, 1.0, s))
        dot = dot + (t @ v_k - u_k @ dp) * inverse[..., None, :]
    return dot


def _with_nan_columns(dot, like):
    """`dot`, widened with NaN columns to the shape of `like` (columns that have no derivative)."""
    extra = np.shape(stop_gradient(like))[-1] - np.shape(stop_gradient(dot))[-1]
    if extra == 0:
        return dot
    return np.concatenate([dot, _nan_like(like, np.shape(stop_gradient(like))[:-1] + (extra,))], axis=-1)


@rrule(svd_u)
def _svd_u_rule(a, once):
    u, s, vh = once(a)

    def back(g):
        m, k = np.shape(stop_gradient(u))[-2], np.shape(stop_gradient(s))[-1]
        _check_unused_columns(g, k, -1, "Columns of U")
        u_k, vh_k = _thin(u, s, vh)
        g = g[..., :, :k]
        ut_g = _t(u_k) @ g
        inner = (_distinct_gaps(s * s, "Singular vectors", g) * (ut_g - _t(ut_g))) * s[..., None, :]
        grad = u_k @ inner @ vh_k
        if m > k:  # the part of g outside the span of U
            grad = grad + ((g - u_k @ ut_g) / _nonzero_singular(s)[..., None, :]) @ vh_k
        return (grad, None)

    return u, back


@forward_in_first(svd_u)
def _svd_u_frule(t, a, once):
    u, s, vh = once(a)
    u_k, vh_k = _thin(u, s, vh)
    return u, _with_nan_columns(_svd_vector_tangent(t, u_k, s, _t(vh_k)), u)


@rrule(svd_vh)
def _svd_vh_rule(a, once):
    u, s, vh = once(a)

    def back(g):
        n, k = np.shape(stop_gradient(vh))[-1], np.shape(stop_gradient(s))[-1]
        _check_unused_columns(g, k, -2, "Rows of Vh")
        u_k, vh_k = _thin(u, s, vh)
        gv = _t(g[..., :k, :])
        v_k = _t(vh_k)
        vt_g = _t(v_k) @ gv
        inner = s[..., :, None] * (_distinct_gaps(s * s, "Singular vectors", gv) * (vt_g - _t(vt_g)))
        grad = u_k @ inner @ vh_k
        if n > k:
            grad = grad + u_k @ (_t(gv - v_k @ vt_g) / _nonzero_singular(s)[..., :, None])
        return (grad, None)

    return vh, back


@forward_in_first(svd_vh)
def _svd_vh_frule(t, a, once):
    u, s, vh = once(a)
    u_k, vh_k = _thin(u, s, vh)
    return vh, _t(_with_nan_columns(_svd_vector_tangent(_t(t), _t(vh_k), s, u_k), _t(vh)))


def _nonzero_singular(s):
    """`s`, refused where a singular value is zero (NaN there for a Dask array, which is not computed here)."""
    if _values_unreadable(s):
        return np.where(stop_gradient(s) == 0, np.nan, s)
    if np.any(stop_gradient(s) == 0):
        raise ValueError(
            "Singular vectors of a non-square matrix with a zero singular value have no derivative; "
            "use a function of the singular values only, or perturb the input."
        )
    return s


@composite(np.linalg.svd, args="a", notes="""Singular values are differentiable everywhere;
      singular vectors need distinct singular values (ties, to within rounding, raise where
      their vectors are used), and for a non-square
      matrix nonzero ones. With `full_matrices=True` only the first min(M, N) columns of U /
      rows of Vh may carry gradient. Use sign-invariant functions of the vectors (e.g.
      U @ diag(f(s)) @ Vh). In forward mode the tangents that do not exist are NaN.
      `hermitian=True` is refused. Of a complex matrix, the singular values only.""")
def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    if compute_uv:
        _real_only(a, "svd")
    if hermitian:
        raise TypeError("numpy.linalg.svd(hermitian=True) is not supported on tracked values; "
                        "use hermitian=False (same values) or np.linalg.eigh.")
    full = full_matrices and compute_uv  # the values alone need no full U and Vh (Dask's svd makes none)
    once = _Once(lambda m: tuple(np.linalg.svd(m, full_matrices=full)))
    s = svd_values(a, once)
    if not compute_uv:  # LAPACK's values-only routine rounds differently from the full one
        return with_numpy_value(s, np.linalg.svd, a, compute_uv=False)
    return _SVD(svd_u(a, once), s, svd_vh(a, once))


# --- QR -------------------------------------------------------------------------------
_QR = type(np.linalg.qr(np.eye(1)))


def _copy_lower_to_upper(m):
    low = np.tril(m, -1)
    return low + _t(low) + np.triu(np.tril(m))


def _qr_square_back(q, r, gq, gr):
    """Cotangent of X = Q R for X with M >= N (R square, invertible), from those of Q and R."""
    m = -(_t(gq) @ q) if gr is None else r @ _t(gr) - _t(gq) @ q
    b = gq + q @ _copy_lower_to_upper(m)
    try:
        return _t(np.linalg.solve(r, _t(b)))
    except np.linalg.LinAlgError as e:
        raise np.linalg.LinAlgError(
            "The derivative of numpy.linalg.qr is taken here for a matrix of full column rank (R invertible); this "
            "one is rank-deficient (a zero on R's diagonal), where Q is not unique. Perturb the matrix, or "
            "differentiate a function of it that does not go through its QR factors.") from e


def _qr_back(a, q, r, gq, gr):
    rows, cols = np.shape(stop_gradient(a))[-2:]
    k = min(rows, cols)
    q, r = q[..., :, :k], r[..., :k, :]
    if gq is None:
        gq = zeros_as(stop_gradient(q), np.shape(stop_gradient(q)))
    else:
        _check_unused_columns(gq, k, -1, "Columns of Q")
        gq = gq[..., :, :k]
    if gr is not None:
        gr = gr[..., :k, :]
    if rows >= cols:
        return _qr_square_back(q, r, gq, gr)
    # A = [X | Y] with X square: R = [U | Qᵀ Y].
    y_part = a[..., :, rows:]
    gu = None if gr is None else gr[..., :, :rows]
    gv = None if gr is None else gr[..., :, rows:]
    if gv is not None:
        gq = gq + y_part @ _t(gv)
    gx = _qr_square_back(q, r[..., :, :rows], gq, gu)
    gy = zeros_as(stop_gradient(y_part), np.shape(stop_gradient(y_part)), np.result_type(stop_gradient(a))) if gv is None else q @ gv
    return np.concatenate([gx, gy], axis=-1)


def _qr_square_tangent(q, r, t):
    """(dQ, dR) for A = Q R with M >= N (R square, invertible) along dA = `t`."""
    # X = Qᵀ dA R⁻¹ = Qᵀ dQ + dR R⁻¹: a skew-symmetric part Ω and an upper triangular one.
    t_r = _t(np.linalg.solve(_t(r), _t(t)))  # dA R⁻¹
    x = _t(q) @ t_r
    low = np.tril(x, -1)
    upper = x - (low - _t(low))  # dR R⁻¹
    return t_r - q @ upper, upper @ r


def _qr_tangent(a, q, r, t):
    """(dQ, dR) of the reduced QR of `a` (the first min(M, N) columns of Q and rows of R)."""
    rows, cols = np.shape(stop_gradient(a))[-2:]
    k = min(rows, cols)
    q, r = q[..., :, :k], r[..., :k, :]
    if rows >= cols:
        return _qr_square_tangent(q, r, t)
    # A = [X | Y] with X square: R = [U | Qᵀ Y].
    dq, du = _qr_square_tangent(q, r[..., :, :rows], t[..., :, :rows])
    dv = _t(dq) @ a[..., :, rows:] + _t(q) @ t[..., :, rows:]
    return dq, np.concatenate([du, dv], axis=-1)


@primitive
def qr_q(a, once):
    """Q of the QR decomposition of `a`, from `once(a) = (q, r)`."""
    return once(a)[0]


@primitive
def qr_r(a, once):
    """R of the QR decomposition of `a`, from `once(a) = (q, r)`."""
    return once(a)[1]


@rrule(qr_q)
def _qr_q_rule(a, once):
    q, r = once(a)
    return q, lambda g: (_qr_back(a, q, r, g, None), None)


@forward_in_first(qr_q)
def _qr_q_frule(t, a, once):
    q, r = once(a)
    return q, _with_nan_columns(_qr_tangent(a, q, r, t)[0], q)


@rrule(qr_r)
def _qr_r_rule(a, once):
    q, r = once(a)
    return r, lambda g: (_qr_back(a, q, r, None, g), None)


@forward_in_first(qr_r)
def _qr_r_frule(t, a, once):
    q, r = once(a)
    dr = _qr_tangent(a, q, r, t)[1]
    extra = np.shape(stop_gradient(r))[-2] - np.shape(stop_gradient(dr))[-2]
    if extra:  # mode 'complete' with M > N: the rows below are zero whatever A is
        zero = zeros_as(stop_gradient(r), np.shape(stop_gradient(r))[:-2] + (extra, np.shape(stop_gradient(r))[-1]))
        dr = np.concatenate([dr, zero], axis=-2)
    return r, dr


@composite(np.linalg.qr, args="a", notes="""Modes 'reduced', 'complete' and 'r'; needs full rank
      (min(M, N) nonzero diagonal entries of R). With 'complete' only the first min(M, N) columns
      of Q may carry gradient (in forward mode the others' tangents are NaN). Mode 'raw' is refused.""")
def qr(a, mode="reduced"):
    _real_only(a, "qr")
    if mode not in ("reduced", "complete", "r"):
        raise TypeError(f"numpy.linalg.qr(mode={mode!r}) is not supported on tracked values; use 'reduced'.")
    # mode left out unless 'complete': Dask's qr takes none
    once = _Once(lambda m: tuple(np.linalg.qr(m, mode="complete") if mode == "complete" else np.linalg.qr(m)))
    r = qr_r(a, once)
    if mode == "r":
        return r
    return _QR(qr_q(a, once), r)
