"""`scipy.sparse.linalg`, differentiable: `spsolve(A, b)` of a constant sparse `A`, in `b`, with SciPy's
signature (SciPy's own converts `b` with `np.asarray`).

>>> import numpy as np, pullback as pb, scipy.sparse as sp
>>> from pullback.scipy.sparse.linalg import spsolve
>>> A = sp.csr_array([[4.0, 1.0], [0.0, 2.0]])
>>> pb.gradient(lambda b: np.sum(spsolve(A, b) ** 2), np.array([1.0, 2.0]))[0]  # 2 A⁻ᵀ A⁻¹ b
array([0., 1.])
"""

from ...rules.scipy_sparse import spsolve

__all__ = ["spsolve"]
