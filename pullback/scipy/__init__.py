"""Differentiable stand-ins for SciPy's Python-level functions, where pullback cannot reach SciPy's own.

SciPy's ufuncs (`scipy.special.erf`, `gammaln`, `expit`, ...) work on traced values directly.
Its Python-level functions (`scipy.special.logsumexp`, `scipy.linalg.expm`, ...) convert their
input with `np.asarray` before NumPy's dispatch could hand it to pullback, so their calls can
never be intercepted. Call these instead: same names and signatures, differentiable in both
modes and to any order, and SciPy itself when nothing is being differentiated.

- `pullback.scipy.special`: `logsumexp`, `softmax`, `log_softmax`, `polygamma`, `multigammaln`,
  `diric`, the spherical Bessel functions and the ufuncs with several outputs (`sici`, `airy`,
  ...), and the differentiable `scipy.special` ufuncs under their own names;
- `pullback.scipy.linalg`: SciPy's solves and decompositions (`solve`, `solve_triangular`,
  `cho_factor`/`cho_solve`, `lu_factor`/`lu_solve`, `inv`, `det`, `cholesky`, `eigh`, `svd`,
  `qr`, `lu`, `pinv`, `lstsq`, ...), matrix functions (`expm`, `sqrtm`, `logm`, ...),
  Sylvester and Lyapunov solvers, banded solvers and structured matrices;
- `pullback.scipy.signal` (imported on first use): `convolve`, `correlate`, `fftconvolve`, `lfilter`;
- `pullback.scipy.spatial.distance` (imported on first use): `cdist`, `pdist`, `squareform`;
- `pullback.scipy.sparse.linalg` (imported on first use): `spsolve`, differentiable in `b` (products of
  a constant sparse matrix with traced arrays need no stand-in: `A @ x` works as it is);
- `pullback.scipy.stats` (imported on first use): SciPy's distributions (`norm`, `gamma`,
  `poisson`, `multivariate_normal`, ...) with their `logpdf`, `pdf`, `cdf`, ... methods;
- `pullback.scipy.integrate` (imported on first use): `odeint` and `solve_ivp`, differentiable
  once (adjoint method) in the initial state (real or complex), the times and the parameters in `args`;
  `quad` (once, in its limits and `args`), `trapezoid`, `cumulative_trapezoid` and `simpson`.

Inside `pb.jit`, a call with nothing being differentiated runs SciPy's own function as one recorded
step, which each replay runs on its own values; the derivatives are traced as usual. Refused there, by
name: `linalg.logm` and `fractional_matrix_power` (SciPy draws random numbers in them) and the
derivatives of `integrate.odeint`, `solve_ivp` and `quad`.

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

__all__ = ["linalg", "special", "signal", "sparse", "spatial", "stats", "integrate"]


def __getattr__(name):
    if name not in ("signal", "sparse", "spatial", "stats", "integrate"):
        raise AttributeError(f"module 'pullback.scipy' has no attribute {name!r}")
    import importlib

    return importlib.import_module(f"{__name__}.{name}")
