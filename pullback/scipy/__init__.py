"""Differentiable stand-ins for SciPy's Python-level functions, where pullback cannot reach SciPy's own.

SciPy's ufuncs (`scipy.special.erf`, `gammaln`, `expit`, ...) work on traced values directly.
Its Python-level functions (`scipy.special.logsumexp`, `scipy.linalg.expm`, ...) convert their
input with `np.asarray` before NumPy's dispatch could hand it to pullback, so their calls can
never be intercepted. Call these instead: same names and signatures, differentiable in both
modes and to any order, and SciPy itself when nothing is being differentiated.

- `pullback.scipy.special`: `logsumexp`, `softmax`, `log_softmax`, `polygamma`, and the
  differentiable `scipy.special` ufuncs under their own names;
- `pullback.scipy.linalg`: `solve_triangular`, `cho_factor`, `cho_solve`, `expm`,
  `lu_factor`, `lu_solve`.

SciPy stays optional: nothing here imports it until a function needs it.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy import linalg, special
>>> pb.gradient(lambda x: special.logsumexp(x), np.array([0.0, 0.0]))[0]
array([0.5, 0.5])
>>> pb.gradient(lambda t: np.trace(linalg.expm(t * np.eye(2))), 0.0)[0]
2.0
>>> pb.jvp(special.erf, (np.array([0.0]),), (np.array([1.0]),))[1]  # 2 / sqrt(pi)
array([1.12837917])
"""

from . import linalg, special

__all__ = ["linalg", "special"]
