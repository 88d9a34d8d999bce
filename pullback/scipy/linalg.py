"""`scipy.linalg`, differentiable: `solve_triangular`, `cho_factor`, `cho_solve`, `expm`,
`lu_factor` and `lu_solve`, with SciPy's signatures. SciPy is imported on first use.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy import linalg
>>> a = np.array([[4.0, 2.0], [2.0, 3.0]])
>>> pb.gradient(lambda b: np.sum(linalg.cho_solve(linalg.cho_factor(a), b)), np.array([1.0, 1.0]))[0]
array([0.125, 0.25 ])
"""

from ..rules.linalg import cho_factor, cho_solve, expm, lu_factor, lu_solve, solve_triangular

__all__ = ["solve_triangular", "cho_factor", "cho_solve", "expm", "lu_factor", "lu_solve"]
