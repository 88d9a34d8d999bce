"""`scipy.sparse`, differentiable: products of a constant sparse matrix with traced arrays (`A @ x`,
`x @ A`, `A.dot(x)`) work as they are; `pullback.scipy.sparse.linalg` has `spsolve`, differentiable in `b`.
SciPy is imported on first use.

>>> import numpy as np, pullback as pb, scipy.sparse as sp
>>> from pullback.scipy.sparse import linalg
>>> A = sp.csc_array([[2.0, 0.0], [1.0, 4.0]])
>>> pb.gradient(lambda b: np.sum(linalg.spsolve(A, b)), np.ones(2))[0]
array([0.375, 0.25 ])
"""

from . import linalg

__all__ = ["linalg"]
