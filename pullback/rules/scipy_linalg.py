"""Differentiable versions of `scipy.linalg`'s solve_triangular, cho_factor/cho_solve, expm and
lu_factor/lu_solve.

SciPy's functions convert their input with `np.asarray` before any NumPy dispatch, so a call
to them can never reach pullback. These have the same signatures, call SciPy when nothing is
being differentiated, and import SciPy only when called. They are public as
`pullback.scipy.linalg`; each rule has a forward rule next to it.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy.linalg import solve_triangular
>>> a = np.array([[2.0, 0.0], [1.0, 1.0]])
>>> pb.gradient(lambda b: np.sum(solve_triangular(a, b, lower=True)), np.array([1.0, 1.0]))[0]
array([0., 1.])
"""

import numpy as np

from .._extend import primitive, rrule
from .._tangents import Thunk
from .._trace import Traced, apply, stop_gradient
from ._register import add_tangents, describe, forward_in_first, forward_rule, private_rule


def _linalg():
    import scipy.linalg

    return scipy.linalg


def _any_tracked(*values):
    return any(isinstance(v, Traced) for v in values)


def _t(a):
    return np.swapaxes(a, -1, -2)


def _square_2d(name, a):
    shape = np.shape(a)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"scipy.linalg.{name} on tracked values takes one square 2-D matrix, got shape {shape}.")


def _transposed(trans):
    if trans in (0, "N"):
        return False
    if trans in (1, 2, "T", "C"):
        return True
    raise ValueError(f"Invalid trans argument {trans!r}")


@primitive
def triangular_solve(a, b, transposed, lower, unit_diagonal):
    """x with op(A) x = b, op(A) = A or Aᵀ, reading one triangle of `a`."""
    return _linalg().solve_triangular(a, b, trans=int(transposed), lower=lower, unit_diagonal=unit_diagonal)


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


@forward_rule(triangular_solve_rule)
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
    return triangular_solve(a, b, _transposed(trans), lower, unit_diagonal)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """`scipy.linalg.cholesky`-based `cho_factor`, differentiable in the triangle it reads.

    As SciPy does, the other triangle of `c` holds the input's entries.
    """
    if not _any_tracked(a):
        return _linalg().cho_factor(a, lower, overwrite_a, check_finite)
    _square_2d("cho_factor", a)
    if lower:
        return np.tril(np.linalg.cholesky(a)) + np.triu(a, 1), True
    return _t(np.linalg.cholesky(_t(a))) + np.tril(a, -1), False


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """`scipy.linalg.cho_solve`, differentiable in `c` (the factor's triangle) and `b`."""
    c, lower = c_and_lower
    if not _any_tracked(c, b):
        return _linalg().cho_solve(c_and_lower, b, overwrite_b, check_finite)
    _square_2d("cho_solve", c)
    if lower:  # A = L Lᵀ
        return triangular_solve(c, triangular_solve(c, b, False, True, False), True, True, False)
    return triangular_solve(c, triangular_solve(c, b, True, False, False), False, False, False)


def expm(A):
    """`scipy.linalg.expm`, differentiable; batches over leading axes as SciPy does.

    >>> import numpy as np, pullback as pb
    >>> from pullback.scipy.linalg import expm
    >>> pb.gradient(lambda t: np.trace(expm(t * np.eye(2))), 0.0)[0]
    2.0
    """
    return _expm(A)  # positionally, however A was given: a primitive tracks positional arguments


@primitive
def _expm(A):
    return _linalg().expm(A)


@rrule(_expm)
def expm_rule(A):
    # The adjoint of the Fréchet derivative of expm at A is the Fréchet derivative at Aᵀ.
    return _expm(A), lambda g: (_frechet(_t(A), g),)


def _frechet(A, E):
    """The Fréchet derivative of expm at A along E: the upper right block of expm([[A, E], [0, A]])."""
    n = np.shape(stop_gradient(A))[-1]
    zero = np.zeros(np.shape(stop_gradient(A)), dtype=np.result_type(stop_gradient(A)))
    block = np.concatenate([np.concatenate([A, E], axis=-1), np.concatenate([zero, A], axis=-1)], axis=-2)
    return _expm(block)[..., :n, n:]


@forward_in_first(expm_rule)
def expm_frule(t, A):
    return _expm(A), _frechet(A, t)


def _permutation(piv):
    """LAPACK's row swaps as a permutation: (P A)[i] = A[perm[i]]."""
    perm = np.arange(len(piv))
    for i, p in enumerate(piv):
        perm[i], perm[p] = perm[p], perm[i]
    return perm


@private_rule
def _lu_rule(a, pivots):
    lu, piv = lu_factor(a)
    pivots.append(stop_gradient(piv))

    def back(g):
        # P A = L U with lu = (L - I) + U. Writing X = L⁻¹ P dA U⁻¹: d lu = L·tril(X, -1) + triu(X)·U.
        n = np.shape(stop_gradient(a))[-1]
        eye = np.eye(n, dtype=np.result_type(stop_gradient(lu)))
        lower, upper = np.tril(lu, -1) + eye, np.triu(lu)
        gx = np.tril(_t(lower) @ g, -1) + np.triu(g @ _t(upper))
        permuted = _t(triangular_solve(lu, _t(triangular_solve(lu, gx, True, True, True)), False, False, False))
        return permuted[np.argsort(_permutation(pivots[0]))], None

    return lu, back


@forward_in_first(_lu_rule)
def _lu_frule(t, a, pivots):
    lu, piv = lu_factor(a)
    pivots.append(stop_gradient(piv))
    # P A = L U with lu = (L - I) + U. With X = L⁻¹ P dA U⁻¹: d lu = L·tril(X, -1) + triu(X)·U.
    n = np.shape(stop_gradient(a))[-1]
    lower = np.tril(lu, -1) + np.eye(n, dtype=np.result_type(stop_gradient(lu)))
    permuted = t[_permutation(stop_gradient(piv))]
    left = triangular_solve(lu, permuted, False, True, True)  # L⁻¹ P dA
    x = _t(triangular_solve(lu, _t(left), True, False, False))  # (U⁻ᵀ (L⁻¹ P dA)ᵀ)ᵀ = L⁻¹ P dA U⁻¹
    return lu, lower @ np.tril(x, -1) + np.triu(x) @ np.triu(lu)


def lu_factor(a, overwrite_a=False, check_finite=True):
    """`scipy.linalg.lu_factor`, differentiable in `a` (square) where the pivots do not change."""
    if not _any_tracked(a):
        return _linalg().lu_factor(a, overwrite_a, check_finite)
    _square_2d("lu_factor", a)
    pivots = []
    lu = apply(_lu_rule, (a, pivots))
    return lu, pivots[0]


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """`scipy.linalg.lu_solve`, differentiable in `lu` and `b`."""
    lu, piv = lu_and_piv
    if not _any_tracked(lu, b):
        return _linalg().lu_solve(lu_and_piv, b, trans, overwrite_b, check_finite)
    _square_2d("lu_solve", lu)
    perm = _permutation(stop_gradient(piv))
    if not _transposed(trans):  # L U x = P b
        return triangular_solve(lu, triangular_solve(lu, b[perm], False, True, True), False, False, False)
    w = triangular_solve(lu, triangular_solve(lu, b, True, False, False), True, True, True)  # Lᵀ w = U⁻ᵀ b
    return w[np.argsort(perm)]


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
