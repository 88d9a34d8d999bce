"""Rules for solving and inverting in `numpy.linalg`, in both modes: inv, solve, det, slogdet,
trace, pinv, lstsq (and matrix_rank, an integer); and the differentiable versions of
`scipy.linalg`'s solve_triangular, cho_factor/cho_solve, lu_factor/lu_solve and expm.

All act on the last two axes and broadcast over the others. The forward rules are the classical
perturbation formulas (dA⁻¹ = -A⁻¹ dA A⁻¹, d det A = det A · tr(A⁻¹ dA), ...).

SciPy's functions convert their input with `np.asarray` before any NumPy dispatch, so a call to
them can never reach pullback. The versions here have the same signatures, call SciPy when
nothing is being differentiated, and import SciPy only when called. They are public as
`pullback.scipy.linalg`.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy.linalg import solve_triangular
>>> a = np.array([[2.0, 0.0], [1.0, 1.0]])
>>> pb.gradient(lambda b: np.sum(solve_triangular(a, b, lower=True)), np.array([1.0, 1.0]))[0]
array([0., 1.])
"""

import numpy as np

from .._arrays import holds_foreign_array, like_input, size_of, zeros_as
from .._extend import primitive, rrule
from .._standins import is_stand_in
from .._tangents import Thunk
from .._values import Traced, stop_gradient
from ._register import add_tangents, as_array, composite, describe, forward_in_first, forward_rule, rule, without_gradient
from .reductions import refuse_out
from .special import RecordedModule, scipy_call, scipy_valued


def _t(a):
    return np.swapaxes(a, -1, -2)


def _eye_like(n, like):
    return like_input(np.eye(n, dtype=np.result_type(stop_gradient(like))), like)


def _trace(m):
    return np.trace(m, axis1=-2, axis2=-1)


def _as_matrix_scale(g):
    """A cotangent of one number per matrix, shaped to scale those matrices."""
    return np.reshape(g, np.shape(g) + (1, 1))


@rule(np.linalg.inv, args="a", notes="Singular matrices raise LinAlgError, as in NumPy.")
def inv_rule(a):
    y = np.linalg.inv(a)

    def back(g):
        yt = _t(y)
        return (-(yt @ g @ yt),)

    return y, back


@forward_in_first(np.linalg.inv)
def inv_frule(t, a):
    y = np.linalg.inv(a)
    return y, -(y @ t @ y)


@rule(np.linalg.solve, args="a, b", notes="NumPy 2 semantics: `b` is a vector only when 1-D.")
def solve_rule(a, b):
    y = np.linalg.solve(a, b)
    vector = np.ndim(b) == 1

    def back(g):
        def db():
            if vector:
                return np.linalg.solve(_t(a), g[..., None])[..., 0]
            return np.linalg.solve(_t(a), g)

        gb = Thunk(db)

        def da():
            if vector:
                return -(gb.unthunk()[..., :, None] * y[..., None, :])
            return -(gb.unthunk() @ _t(y))

        return Thunk(da), gb

    return y, back


@forward_rule(np.linalg.solve)
def solve_frule(primals, tangents):
    (a, b), (ta, tb) = primals, tangents
    y = np.linalg.solve(a, b)
    if ta is None and tb is None:
        return y, None
    vector = np.ndim(b) == 1  # then work with column matrices, so that batches broadcast
    column = (lambda v: v[..., None]) if vector else (lambda v: v)
    rhs = add_tangents(None if tb is None else column(tb), None if ta is None else -(ta @ column(y)))
    dot = np.linalg.solve(a, rhs)
    return y, dot[..., 0] if vector else dot


def adjugate(a, det):
    """adj(A) = det(A)·A⁻¹, also where A is singular (and A⁻¹ is not), or nearly so: there det(A)·A⁻¹
    rounds well, but its derivatives are differences of terms as large as 1/cond(A) times theirs."""
    try:
        inv = np.linalg.inv(a)
    except np.linalg.LinAlgError:
        return singular_adjugate(a)
    if _nearly_singular(a, inv):
        return singular_adjugate(a)
    return _as_matrix_scale(det) * inv


def _nearly_singular(a, inv):
    """Whether some matrix of `a` has a reciprocal condition number (1-norm) below eps ** (1/3), where
    the derivatives of det(A)·A⁻¹ lose most digits by the third order."""
    plain, plain_inv = stop_gradient(a), stop_gradient(inv)
    if holds_foreign_array(plain) and not is_stand_in(plain):  # a Dask array: no branch on its values
        return False
    if size_of(plain) == 0:
        return False
    norms = np.linalg.norm(plain, 1, axis=(-2, -1)) * np.linalg.norm(plain_inv, 1, axis=(-2, -1))
    limit = np.finfo(np.result_type(plain_inv)).eps ** (-1.0 / 3.0)
    return bool(np.any(norms > limit))


@primitive
def singular_adjugate(a):
    """adj(A) of a singular A from the SVD A = U S Vᴴ: det(U) det(Vᴴ) · V diag(∏_{j≠i} s_j) Uᴴ, which has
    no division."""
    u, s, vh = np.linalg.svd(a)
    ones = np.ones_like(s[..., :1])
    before = np.cumprod(np.concatenate([ones, s[..., :-1]], axis=-1), axis=-1)  # s_0 ... s_{i-1}
    after = np.cumprod(np.concatenate([ones, s[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]  # s_{i+1} ... s_{n-1}
    phase = np.linalg.det(u) * np.linalg.det(vh)
    return _as_matrix_scale(phase) * ((np.conj(_t(vh)) * (before * after)[..., None, :]) @ np.conj(_t(u)))


# adj is a polynomial in A's entries, so the derivative of adj at A + sI is one in s, of degree n - 2: its
# value at s = 0 (a singular A, where the SVD's derivatives divide by gaps between singular values) is the
# mean over n points s_k = r e^(i(2πk/n + θ)), where A + s_k I is invertible and adj' has a closed form.
# Written with traced operations, the mean differentiates again.
def _shifted(a):
    """[A + s_k I], k < n, with r = |A|_F (1 for A = 0) and a phase θ that no real eigenvalue lies on."""
    n = np.shape(a)[-1]
    size = np.sqrt(np.sum(np.abs(stop_gradient(a)) ** 2, axis=(-2, -1), keepdims=True))
    r = np.where(size > 0, size, 1.0)
    identity = like_input(np.eye(n), a)
    return [a + (r * np.exp(1j * (2.0 * np.pi * k / n + 0.7))) * identity for k in range(n)]


def _mean_over_shifts(a, at_invertible):
    values = [at_invertible(b, np.linalg.inv(b), np.linalg.det(b)) for b in _shifted(a)]
    mean = sum(values[1:], values[0]) / len(values)
    return mean if np.iscomplexobj(stop_gradient(a)) else np.real(mean)


@rrule(singular_adjugate)
def singular_adjugate_rule(a):
    def back(g):
        # d adj = det·(tr(A⁻¹ dA) A⁻¹ - A⁻¹ dA A⁻¹), transposed (plain, as adj is holomorphic)
        def at_invertible(b, inv, det):
            inv_t = _t(inv)
            paired = np.sum(g * inv, axis=(-2, -1), keepdims=True)
            return _as_matrix_scale(det) * (paired * inv_t - inv_t @ g @ inv_t)

        return (Thunk(lambda: _mean_over_shifts(a, at_invertible)),)

    return singular_adjugate(a), back


@forward_in_first(singular_adjugate)
def singular_adjugate_frule(t, a):
    def at_invertible(b, inv, det):
        return _as_matrix_scale(det) * (_as_matrix_scale(_trace(inv @ t)) * inv - inv @ t @ inv)

    return singular_adjugate(a), _mean_over_shifts(a, at_invertible)


@rule(np.linalg.det, args="a", notes="""The adjugate det(A)·A⁻ᵀ, from the SVD where A is singular
      (where A⁻¹ does not exist but the derivative does).""")
def det_rule(a):
    y = np.linalg.det(a)
    return y, lambda g: (_as_matrix_scale(g) * _t(adjugate(a, y)),)


@forward_in_first(np.linalg.det)
def det_frule(t, a):
    y = np.linalg.det(a)
    return y, _trace(adjugate(a, y) @ t)


_SLOGDET = type(np.linalg.slogdet(np.eye(1)))


@primitive
def logabsdet(a):
    """log |det a|, the second part of `np.linalg.slogdet(a)`."""
    return np.linalg.slogdet(a)[1]


def _inverse_for_slogdet(a):
    try:
        return np.linalg.inv(a)
    except np.linalg.LinAlgError:
        raise np.linalg.LinAlgError(
            "np.linalg.slogdet of a singular matrix: log|det A| is -inf there and has no derivative "
            "(np.linalg.det has one, the adjugate).") from None


@rrule(logabsdet)
def _logabsdet_rule(a):
    y = logabsdet(a)
    return y, lambda g: (_as_matrix_scale(g) * _t(_inverse_for_slogdet(a)),)


@forward_in_first(logabsdet)
def _logabsdet_frule(t, a):
    return logabsdet(a), _trace(_inverse_for_slogdet(a) @ t)


@primitive
def det_phase(a):
    """det a / |det a| of a complex matrix, the first part of `np.linalg.slogdet(a)`."""
    return np.linalg.slogdet(a)[0]


@rrule(det_phase)
def _det_phase_rule(a):
    s = det_phase(a)

    def back(g):
        # ds = s i Im(tr(A⁻¹ dA)), so Re(g ds) = Re(-i r tr(A⁻¹ dA)) with r = Re(i g s)
        return (_as_matrix_scale(-1j * np.real(1j * g * s)) * _t(_inverse_for_slogdet(a)),)

    return s, back


@forward_in_first(det_phase)
def _det_phase_frule(t, a):
    s = det_phase(a)
    return s, s * (1j * np.imag(_trace(_inverse_for_slogdet(a) @ t)))


@composite(np.linalg.slogdet, args="a", notes="""`logabsdet` is differentiable (a singular matrix,
      where it is -inf, raises in the derivative only); `sign` has no gradient for a real matrix,
      and is det / |det| (differentiable) for a complex one.""")
def slogdet(a):
    sign = det_phase(a) if np.iscomplexobj(a) else np.linalg.slogdet(stop_gradient(a))[0]
    return _SLOGDET(sign, logabsdet(a))


@composite(np.trace, args="a", notes="Sum of `np.diagonal`.")
def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    refuse_out("trace", out)
    return np.sum(np.diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


@composite(np.linalg.trace, args="x", notes="Over the last two axes.")
def linalg_trace(x, /, *, offset=0, dtype=None):
    return trace(x, offset, -2, -1, dtype)


# --- pseudo-inverse and least squares ---------------------------------------------------------
def _pinv_cotangent(a, p, g):
    """Cotangent of A from that of P = pinv(A), valid where the rank of A is locally constant."""
    m, n = np.shape(stop_gradient(a))[-2:]
    pt = _t(p)
    grad = -(pt @ g @ pt)
    if np.iscomplexobj(a):  # the last two terms hold dAᴴ: their transposes are conjugated
        ph = np.conjugate(pt)
        grad = grad + np.conjugate((_eye_like(m, a) - a @ p) @ _t(g) @ p @ ph)
        return grad + np.conjugate(ph @ p @ _t(g) @ (_eye_like(n, a) - p @ a))
    grad = grad + (_eye_like(m, a) - a @ p) @ _t(g) @ p @ pt
    grad = grad + pt @ p @ _t(g) @ (_eye_like(n, a) - p @ a)
    return grad


def _refuse_truncation(a, cutoff, name):
    """Raise where the relative `cutoff` (`rcond`/`rtol`, None: NumPy's default) drops singular values
    of `a` that are not numerically zero: the rank-constant formulas differentiate pinv(a), not the
    pseudo-inverse of the truncated matrix that the cutoff makes. Inside pb.jit the check is recorded (a
    cutoff computed from the values, as `pinvh`'s is, included), and its answer fixed by a guard."""
    if cutoff is None:
        return
    m, n = np.shape(a)[-2:]
    default = max(m, n) * np.finfo(np.result_type(np.dtype(a.dtype), np.float32)).eps
    cutoff = stop_gradient(cutoff)
    cutoff = cutoff.astype(np.float64) if is_stand_in(cutoff) else np.asarray(cutoff, dtype=np.float64)
    if not np.any(cutoff > default):
        return
    plain = stop_gradient(a)
    if type(plain) is np.ndarray or is_stand_in(plain):
        s = np.linalg.svd(plain, compute_uv=False)
        largest = np.max(s, axis=-1, keepdims=True) if s.size else s
        if not np.any((s <= cutoff[..., None] * largest) & (s > default * largest)):
            return
    raise ValueError(
        f"{name}: the cutoff (rcond or rtol) drops singular values of the matrix that are not zero, and "
        "pullback differentiates the pseudo-inverse only where its rank stays the same, not the truncated "
        "one. Leave the cutoff at its default, or truncate explicitly: u, s, vh = np.linalg.svd(a, "
        "full_matrices=False), then keep the first k of each (differentiable while the singular values are distinct)."
    )


@rule(np.linalg.pinv, args="a", notes="""Exact where the rank is locally constant (e.g. full rank);
      at a rank-deficient matrix pinv is discontinuous. `hermitian=True` is refused, and so is a cutoff
      (`rcond`, `rtol`) that drops singular values that are not zero.""")
def pinv_rule(a, rcond=None, hermitian=False, **kwargs):
    if hermitian:
        raise TypeError("numpy.linalg.pinv(hermitian=True) is not supported on tracked values; use hermitian=False.")
    _refuse_truncation(a, rcond if rcond is not None else kwargs.get("rtol"), "numpy.linalg.pinv")
    p = np.linalg.pinv(a, rcond, **kwargs) if rcond is not None else np.linalg.pinv(a, **kwargs)
    return p, lambda g: (_pinv_cotangent(a, p, g), None)  # none for a cutoff: pinv is flat in it


def _pinv_tangent(a, p, t):
    """dP for P = pinv(A) along dA = `t`, valid where the rank of A is locally constant."""
    m, n = np.shape(stop_gradient(a))[-2:]
    pt, tt = _t(p), _t(t)
    if np.iscomplexobj(a):  # dP = -P dA P + P Pᴴ dAᴴ (I - A P) + (I - P A) dAᴴ Pᴴ P
        pt, tt = np.conjugate(pt), np.conjugate(tt)
    dot = -(p @ t @ p)
    dot = dot + p @ pt @ tt @ (_eye_like(m, a) - a @ p)
    return dot + (_eye_like(n, a) - p @ a) @ tt @ pt @ p


@forward_in_first(np.linalg.pinv)
def pinv_frule(t, a, rcond=None, hermitian=False, **kwargs):
    p = pinv_rule(a, rcond, hermitian, **kwargs)[0]
    return p, _pinv_tangent(a, p, t)


@primitive
def least_squares(a, b, rcond):
    """The solution `x` of `np.linalg.lstsq(a, b, rcond)`."""
    return _lstsq(a, b, rcond)[0]


def _lstsq(a, b, rcond):
    """`np.linalg.lstsq(a, b, rcond)`, the default rcond left out: Dask's lstsq takes none."""
    return np.linalg.lstsq(a, b) if rcond is None else np.linalg.lstsq(a, b, rcond=rcond)


@rrule(least_squares)
def _lstsq_rule(a, b, rcond):
    _refuse_truncation(a, None if rcond == -1 else rcond, "numpy.linalg.lstsq")
    x = least_squares(a, b, rcond)

    def back(g):
        p = Thunk(lambda: _solving_pinv(a, rcond))

        def da():
            gp = g[:, None] * b[None, :] if np.ndim(g) == 1 else g @ _t(b)
            return _pinv_cotangent(a, p.unthunk(), gp)

        return Thunk(da), Thunk(lambda: _t(p.unthunk()) @ g), None

    return x, back


@forward_rule(least_squares)
def _lstsq_frule(primals, tangents):
    (a, b, rcond), (ta, tb) = primals, tangents[:2]
    _refuse_truncation(a, None if rcond == -1 else rcond, "numpy.linalg.lstsq")
    x = least_squares(a, b, rcond)
    if ta is None and tb is None:
        return x, None
    p = _solving_pinv(a, rcond)
    return x, add_tangents(None if ta is None else _pinv_tangent(a, p, ta) @ b, None if tb is None else p @ tb)


def _solving_pinv(a, rcond):
    """The pseudo-inverse that `lstsq(a, b, rcond)` solves with: singular values up to `rcond` times the largest
    count as zero (machine precision for a negative `rcond`, as LAPACK reads it; NumPy's default for None)."""
    if rcond is None:
        return np.linalg.pinv(a)
    if rcond < 0:
        rcond = float(np.finfo(np.result_type(stop_gradient(a).dtype, np.float32)).eps)
    return np.linalg.pinv(a, rcond=rcond)


@composite(np.linalg.lstsq, args="a, b", numpy_value=True, notes="""`x` through pinv(a) @ b, exact for full-rank `a`;
      residuals and singular values are differentiable too, `rank` is an int.""")
def lstsq(a, b, rcond=None):
    b = as_array(b)  # (a list, as NumPy reads it)
    x = least_squares(a, b, rcond)
    # The rank, from NumPy's own solve of the plain values (an int: inside pb.jit, a guard), decides
    # whether there are residuals, as in NumPy: a full column rank and more rows than columns.
    _, plain_residuals, rank, _ = _lstsq(stop_gradient(a), stop_gradient(b), rcond)
    rows, columns = np.shape(a)[-2:]
    if holds_foreign_array(rank) and not is_stand_in(rank):
        # a lazy rank (Dask's; pb.jit's stand-in is read as an int, a guard): the library's own shape decides
        has_residuals = size_of(plain_residuals) > 0
    else:
        has_residuals = int(rank) == columns and rows > columns
    if has_residuals:
        r = b - a @ x
        residuals = np.sum(np.abs(r) ** 2 if np.iscomplexobj(r) else r ** 2, axis=0)
        if np.ndim(b) == 1:
            residuals = np.reshape(residuals, (1,))
    else:
        residuals = zeros_as(np.real(stop_gradient(x)), (0,))  # real, as NumPy's
    return x, residuals, rank, np.linalg.svd(a, compute_uv=False)


without_gradient(np.linalg.matrix_rank, notes="No gradient: an integer.")


# --- scipy.linalg ------------------------------------------------------------------------------
def _linalg():
    """`scipy.linalg`, its functions recorded whole inside `pb.jit` (SciPy converts its input with `np.asarray`)."""
    import scipy.linalg

    return RecordedModule(scipy.linalg)


def _scipy_linalg():
    """`scipy.linalg` itself, for functions that `scipy_call` and `scipy_valued` record whole."""
    import scipy.linalg

    return scipy.linalg


def _any_tracked(*values):
    return any(isinstance(v, Traced) for v in values)


def check_finite_values(*arrays):
    """SciPy's `check_finite=True` on traced arrays, with NumPy's words (`np.asarray_chkfinite`): the solves and
    factorizations inside then compute without checking, as SciPy's do with `check_finite=False`."""
    for a in arrays:
        if a is not None and not np.all(np.isfinite(stop_gradient(a))):  # (under pb.jit, a guard each replay checks)
            raise ValueError("array must not contain infs or NaNs")


def _square_2d(name, a):
    shape = np.shape(a)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"scipy.linalg.{name} on tracked values takes one square 2-D matrix, got shape {shape}.")


def is_transposed(trans):
    """Whether SciPy's `trans` asks for a transposed matrix (1, 2, "T" or "C"); SciPy's error for another value."""
    if trans in (0, "N"):
        return False
    if trans in (1, 2, "T", "C"):
        return True
    raise ValueError(f"Invalid trans argument {trans!r}")


def conjugate_transposed(trans, a):
    """Whether `trans` asks for Aᴴ of a complex `a`: solved as conj(x) from Aᵀ conj(x) = conj(b)."""
    return trans in (2, "C") and np.iscomplexobj(stop_gradient(a))


@primitive
def triangular_solve(a, b, transposed, lower, unit_diagonal):
    """x with op(A) x = b, op(A) = A or Aᵀ, reading one triangle of `a`."""
    return _linalg().solve_triangular(a, b, trans=int(transposed), lower=lower, unit_diagonal=unit_diagonal,
                                      check_finite=False)


@rrule(triangular_solve)
def triangular_solve_rule(a, b, transposed, lower, unit_diagonal):
    x = triangular_solve(a, b, transposed, lower, unit_diagonal)

    def back(g):
        gb = Thunk(lambda: triangular_solve(a, g, not transposed, lower, unit_diagonal))

        def da():
            u, v = (x, gb.unthunk()) if transposed else (gb.unthunk(), x)
            full = -(u[:, None] * v[None, :] if np.ndim(u) == 1 else u @ _t(v))
            k = 0 if not unit_diagonal else (-1 if lower else 1)
            return np.tril(full, k) if lower else np.triu(full, k)

        return Thunk(da), gb, None, None, None

    return x, back


def _read_triangle(t, lower, unit_diagonal):
    """The part of `t` in the triangle a triangular solve reads (strictly, with a unit diagonal)."""
    k = 0 if not unit_diagonal else (-1 if lower else 1)
    return np.tril(t, k) if lower else np.triu(t, k)


@forward_rule(triangular_solve)
def triangular_solve_frule(primals, tangents):
    (a, b, transposed, lower, unit_diagonal), (ta, tb) = primals, tangents[:2]
    x = triangular_solve(a, b, transposed, lower, unit_diagonal)
    if ta is None and tb is None:
        return x, None
    # op(A) x = b gives op(A) dx = db - op(dA) x.
    if ta is not None:
        da = _read_triangle(ta, lower, unit_diagonal)
        ta = _t(da) @ x if transposed else da @ x
    rhs = add_tangents(tb, None if ta is None else -ta)
    return x, triangular_solve(a, rhs, transposed, lower, unit_diagonal)


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, check_finite=True):
    """`scipy.linalg.solve_triangular`, differentiable in `a` (its triangle) and `b`."""
    if not _any_tracked(a, b):
        return _linalg().solve_triangular(a, b, trans, lower, unit_diagonal, overwrite_b, check_finite)
    _square_2d("solve_triangular", a)
    if check_finite:
        check_finite_values(a, b)
    if conjugate_transposed(trans, a):
        return np.conj(triangular_solve(a, np.conj(b), True, lower, unit_diagonal))
    return triangular_solve(a, b, is_transposed(trans), lower, unit_diagonal)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """`scipy.linalg.cholesky`-based `cho_factor`, differentiable in the triangle it reads.

    As SciPy does, the other triangle of `c` holds the input's entries.
    """
    if not _any_tracked(a):
        if not is_stand_in(a):  # SciPy's own result (for a stack of matrices, a list with an array of flags)
            return _scipy_linalg().cho_factor(a, lower, overwrite_a, check_finite)
        # only the matrix is recorded: a replay rebuilds arrays, not a tuple holding the flag
        return scipy_call(cho_factor_matrix, a, lower, overwrite_a, check_finite), lower
    _square_2d("cho_factor", a)
    if check_finite:
        check_finite_values(a)
    factor = np.tril(np.linalg.cholesky(a)) + np.triu(a, 1) if lower else _t(np.linalg.cholesky(_t(a))) + np.tril(a, -1)
    # SciPy's own factor, which may round unlike NumPy's
    return scipy_valued(factor, cho_factor_matrix, a, lower, check_finite=check_finite), lower  # SciPy's flag, as given


def cho_factor_matrix(a, lower=False, overwrite_a=False, check_finite=True):
    """The matrix `c` of `scipy.linalg.cho_factor(a, lower)`."""
    return _scipy_linalg().cho_factor(a, lower, overwrite_a, check_finite)[0]


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """`scipy.linalg.cho_solve`, differentiable in `c` (the factor's triangle) and `b`."""
    c, lower = c_and_lower
    if not _any_tracked(c, b):
        return _linalg().cho_solve(c_and_lower, b, overwrite_b, check_finite)
    _square_2d("cho_solve", c)
    if check_finite:
        check_finite_values(b, c)
    if np.iscomplexobj(c) or np.iscomplexobj(b):
        raise TypeError("pullback.scipy.linalg.cho_solve of complex values is not differentiable by pullback (its rule "
                        "solves with A = L Lᵀ, not L Lᴴ); use np.linalg.solve on the complex matrix.")
    if lower:  # A = L Lᵀ
        x = triangular_solve(c, triangular_solve(c, b, False, True, False), True, True, False)
    else:
        x = triangular_solve(c, triangular_solve(c, b, True, False, False), False, False, False)
    # SciPy's own value: one LAPACK call rounds unlike two triangular solves
    return scipy_valued(x, cho_solve_with_flag, c, b, lower, check_finite=check_finite)


def cho_solve_with_flag(c, b, lower, check_finite=True):
    """`scipy.linalg.cho_solve((c, lower), b)`, with the factor and its flag as separate arguments."""
    return _scipy_linalg().cho_solve((c, lower), b, check_finite=check_finite)


def expm(A):
    """`scipy.linalg.expm`, differentiable; batches over leading axes as SciPy does.

    >>> import numpy as np, pullback as pb
    >>> from pullback.scipy.linalg import expm
    >>> pb.gradient(lambda t: np.trace(expm(t * np.eye(2))), 0.0)[0]
    2.0
    """
    return matrix_exponential(A)  # positionally, however A was given: a primitive tracks positional arguments


@primitive
def matrix_exponential(A):
    """`scipy.linalg.expm(A)`, as a primitive."""
    return _linalg().expm(A)


@rrule(matrix_exponential)
def expm_rule(A):
    # The adjoint of the Fréchet derivative of expm at A is the Fréchet derivative at Aᵀ.
    return matrix_exponential(A), lambda g: (_frechet(_t(A), g),)


def unit_scale(E):
    """(E / s, s) with s = max |E| over each matrix (1 where that is 0 or not finite): the block form of a
    Fréchet derivative is linear in E, but its scaling and squaring reads the norm of the whole block, so a
    large E would cost A's digits (relative error 0.9 for |E| = 1e20)."""
    if size_of(stop_gradient(E)) == 0:  # (no maximum to take)
        return E, 1.0
    s = np.max(np.abs(stop_gradient(E)), axis=(-2, -1), keepdims=True)
    s = np.where(np.isfinite(s) & (s > 0), s, 1.0)
    return E / s, s


def _frechet(A, E):
    """The Fréchet derivative of expm at A along E: the upper right block of expm([[A, E], [0, A]])."""
    n = np.shape(stop_gradient(A))[-1]
    E, scale = unit_scale(E)
    zero = np.zeros(np.shape(stop_gradient(A)), dtype=np.result_type(stop_gradient(A)))
    block = np.concatenate([np.concatenate([A, E], axis=-1), np.concatenate([zero, A], axis=-1)], axis=-2)
    return matrix_exponential(block)[..., :n, n:] * scale


@forward_in_first(matrix_exponential)
def expm_frule(t, A):
    return matrix_exponential(A), _frechet(A, t)


@primitive
def pivot_permutation(piv):
    """LAPACK's row swaps as a permutation: (P A)[i] = A[perm[i]]. A primitive, so that `pb.jit` records
    the loop over the pivots whole and each replay runs it on its own pivots."""
    perm = np.arange(len(piv))
    for i, p in enumerate(piv):
        perm[i], perm[p] = perm[p], perm[i]
    return perm


def _rows(x, index):
    """`x[index]` for integer row indices, through a NumPy call: inside `pb.jit` the indices may be traced while
    `x` is a plain array (a constant right-hand side or tangent), which `x[index]` cannot index."""
    return np.take_along_axis(x, np.reshape(index, (-1,) + (1,) * (np.ndim(x) - 1)), axis=0)


@primitive
def lu_packed(a):
    """`scipy.linalg.lu_factor(a)`: the packed L and U factors, and the pivots (which carry no gradient)."""
    return _scipy_linalg().lu_factor(a, check_finite=False)


@rrule(lu_packed)
def _lu_rule(a):
    lu, piv = lu_factor(a, check_finite=False)

    def back(g):
        g_lu = g[0]
        if g_lu is None:
            return (None,)
        # P A = L U with lu = (L - I) + U. Writing X = L⁻¹ P dA U⁻¹: d lu = L·tril(X, -1) + triu(X)·U.
        n = np.shape(stop_gradient(a))[-1]
        eye = np.eye(n, dtype=np.result_type(stop_gradient(lu)))
        lower, upper = np.tril(lu, -1) + eye, np.triu(lu)
        gx = np.tril(_t(lower) @ g_lu, -1) + np.triu(g_lu @ _t(upper))
        permuted = _t(triangular_solve(lu, _t(triangular_solve(lu, gx, True, True, True)), False, False, False))
        return (_rows(permuted, np.argsort(pivot_permutation(stop_gradient(piv)))),)

    return (lu, piv), back


@forward_in_first(lu_packed)
def _lu_frule(t, a):
    lu, piv = lu_factor(a, check_finite=False)
    # P A = L U with lu = (L - I) + U. With X = L⁻¹ P dA U⁻¹: d lu = L·tril(X, -1) + triu(X)·U.
    n = np.shape(stop_gradient(a))[-1]
    lower = np.tril(lu, -1) + np.eye(n, dtype=np.result_type(stop_gradient(lu)))
    permuted = _rows(t, pivot_permutation(stop_gradient(piv)))
    left = triangular_solve(lu, permuted, False, True, True)  # L⁻¹ P dA
    x = _t(triangular_solve(lu, _t(left), True, False, False))  # (U⁻ᵀ (L⁻¹ P dA)ᵀ)ᵀ = L⁻¹ P dA U⁻¹
    return (lu, piv), (lower @ np.tril(x, -1) + np.triu(x) @ np.triu(lu), None)


def lu_factor(a, overwrite_a=False, check_finite=True):
    """`scipy.linalg.lu_factor`, differentiable in `a` (square) where the pivots do not change."""
    if not _any_tracked(a):
        return _linalg().lu_factor(a, overwrite_a, check_finite)
    _square_2d("lu_factor", a)
    if check_finite:
        check_finite_values(a)
    lu, piv = lu_packed(a)
    return lu, stop_gradient(piv)


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """`scipy.linalg.lu_solve`, differentiable in `lu` and `b`."""
    lu, piv = lu_and_piv
    if not _any_tracked(lu, b):
        return _linalg().lu_solve(lu_and_piv, b, trans, overwrite_b, check_finite)
    _square_2d("lu_solve", lu)
    if check_finite:
        check_finite_values(b)  # (SciPy checks b alone)
    perm = pivot_permutation(stop_gradient(piv))
    if not is_transposed(trans):  # L U x = P b
        return triangular_solve(lu, triangular_solve(lu, _rows(b, perm), False, True, True), False, False, False)
    if conjugate_transposed(trans, lu):
        return np.conj(lu_solve(lu_and_piv, np.conj(b), 1, check_finite=False))
    w = triangular_solve(lu, triangular_solve(lu, b, True, False, False), True, True, True)  # Lᵀ w = U⁻ᵀ b
    return _rows(w, np.argsort(perm))


_NOTE = "Call pullback.scipy.linalg.{} (SciPy's own converts its input with np.asarray). "
describe(solve_triangular, "a, b", _NOTE.format("solve_triangular") + "2-D `a`; the gradient of `a` lies in the "
         "triangle read (strictly, with unit_diagonal).", kind="composite", name="scipy.linalg.solve_triangular")
describe(cho_factor, "a", _NOTE.format("cho_factor") + "Through np.linalg.cholesky of the triangle read.",
         kind="composite", name="scipy.linalg.cho_factor")
describe(cho_solve, "c, b", _NOTE.format("cho_solve") + "Two triangular solves.", kind="composite",
         name="scipy.linalg.cho_solve")
describe(expm, "A", _NOTE.format("expm") + "Both modes through the block-matrix form of the Fréchet derivative; "
         "batched.", kind="rule", rule=expm_rule, name="scipy.linalg.expm")
describe(lu_factor, "a", _NOTE.format("lu_factor") + "Square `a`; exact while the pivot order is locally "
         "constant (it is piecewise constant). `piv` has no gradient.", kind="composite",
         name="scipy.linalg.lu_factor")
describe(lu_solve, "lu, b", _NOTE.format("lu_solve") + "Two triangular solves.", kind="composite",
         name="scipy.linalg.lu_solve")
