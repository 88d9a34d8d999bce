"""`scipy.linalg`, differentiable, with SciPy's signatures; SciPy is imported on first use.

- solves and factorizations: `solve`, `solve_triangular`, `inv`, `det`, `cholesky`,
  `cho_factor`, `cho_solve`, `lu`, `lu_factor`, `lu_solve`, `qr`, `eigh`, `eigvalsh`, `svd`,
  `svdvals`, `pinv`, `pinvh`, `lstsq`, `norm`, `polar`, `orthogonal_procrustes`, `matrix_balance`, `orth`,
  `subspace_angles`, `qr_multiply`;
- matrix functions: `expm`, `expm_frechet`, `sqrtm`, `logm`, `cosm`, `sinm`, `tanm`, `coshm`,
  `sinhm`, `tanhm`, `signm`, `fractional_matrix_power`;
- matrix equations: `solve_sylvester`, `solve_continuous_lyapunov` (`solve_lyapunov`),
  `solve_discrete_lyapunov`, `solve_continuous_are`, `solve_discrete_are`;
- banded and structured: `solve_banded`, `solveh_banded`, `cholesky_banded`,
  `cho_solve_banded`, `eig_banded`, `eigvals_banded`, `eigh_tridiagonal`,
  `eigvalsh_tridiagonal`, `solve_toeplitz`, `matmul_toeplitz`, `solve_circulant`,
  `toeplitz`, `circulant`, `hankel`, `block_diag`, `companion`, `leslie`, `fiedler`, `fiedler_companion`,
  `convolution_matrix`, `khatri_rao`, `diagsvd`.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy import linalg
>>> a = np.array([[4.0, 2.0], [2.0, 3.0]])
>>> pb.gradient(lambda b: np.sum(linalg.cho_solve(linalg.cho_factor(a), b)), np.array([1.0, 1.0]))[0]
array([0.125, 0.25 ])

The solves and factorizations take stacks of matrices in leading axes, as SciPy's do:

>>> stack = np.stack([a, 2.0 * a])
>>> pb.gradient(lambda b: np.sum(linalg.solve(stack, b, assume_a="pos")), np.array([1.0, 1.0]))[0]
array([0.1875, 0.375 ])
"""

from ..rules.linalg import expm
from ..rules.scipy_linalg import (
    block_diag,
    cho_factor,
    cho_solve,
    cho_solve_banded,
    cholesky,
    cholesky_banded,
    circulant,
    companion,
    convolution_matrix,
    coshm,
    cosm,
    det,
    diagsvd,
    eig_banded,
    eigh,
    eigh_tridiagonal,
    eigvals_banded,
    eigvalsh,
    eigvalsh_tridiagonal,
    expm_frechet,
    fiedler,
    fiedler_companion,
    fractional_matrix_power,
    hankel,
    inv,
    khatri_rao,
    leslie,
    logm,
    lstsq,
    lu,
    lu_factor,
    lu_solve,
    matmul_toeplitz,
    matrix_balance,
    norm,
    orth,
    orthogonal_procrustes,
    pinv,
    pinvh,
    polar,
    qr,
    qr_multiply,
    signm,
    sinhm,
    sinm,
    solve,
    solve_banded,
    solve_circulant,
    solve_continuous_are,
    solve_continuous_lyapunov,
    solve_discrete_are,
    solve_discrete_lyapunov,
    solve_sylvester,
    solve_toeplitz,
    solve_triangular,
    solveh_banded,
    sqrtm,
    subspace_angles,
    svd,
    svdvals,
    tanhm,
    tanm,
    toeplitz,
)

solve_lyapunov = solve_continuous_lyapunov  # SciPy's alias

__all__ = ["solve_triangular", "cho_factor", "cho_solve", "expm", "lu_factor", "lu_solve", "block_diag",
           "cho_solve_banded", "cholesky", "cholesky_banded", "circulant", "companion", "convolution_matrix", "cosm",
           "coshm", "det", "diagsvd", "eig_banded", "eigh", "eigh_tridiagonal", "eigvals_banded", "eigvalsh",
           "eigvalsh_tridiagonal", "expm_frechet", "fiedler", "fiedler_companion", "fractional_matrix_power", "hankel", "inv", "khatri_rao",
           "leslie", "logm", "lstsq", "lu", "matmul_toeplitz", "matrix_balance", "norm", "orth", "orthogonal_procrustes", "pinv", "pinvh", "polar",
           "qr", "qr_multiply", "signm", "sinhm", "sinm", "solve", "solve_banded", "solve_circulant", "solve_continuous_are",
           "solve_continuous_lyapunov", "solve_discrete_are", "solve_discrete_lyapunov", "solve_lyapunov", "solve_sylvester", "solve_toeplitz", "solveh_banded", "sqrtm",
           "subspace_angles", "svd", "svdvals", "tanhm", "tanm", "toeplitz"]
