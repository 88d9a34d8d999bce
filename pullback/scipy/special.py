"""`scipy.special`, differentiable.

- pullback's own versions of SciPy's Python-level functions, which convert their input with
  `np.asarray` (so SciPy's own never reach pullback): `logsumexp`, `softmax`, `log_softmax`,
  `polygamma`, `multigammaln`, `diric`, `spherical_jn`, `spherical_yn`, `spherical_in`,
  `spherical_kn`, and the ufuncs with several outputs (`sici`, `shichi`, `fresnel`, `airy`, `airye`,
  `itairy`, `itj0y0`, `iti0k0`, `it2j0y0`, `it2i0k0`, `ellipj`, `pbdv`, `pbvv`, `pbwa`);
- SciPy's own ufuncs that have rules (`erf`, `gammaln`, `kv`, `hyp2f1`, `betaincinv`, ...) and
  the Python-level functions that compute with them (`zeta`, `softplus`, `jvp`, `lambertw`, ...),
  which work on traced values as they are.

SciPy is imported on first use. The [coverage table](coverage.md) lists every function and its
differentiable arguments.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy import special
>>> pb.gradient(lambda x: special.softmax(x)[0], np.array([0.0, 0.0]))[0]
array([ 0.25, -0.25])
>>> pb.gradient(lambda x: special.gammaln(x), 1.0)[0]  # digamma(1) = -0.5772...
-0.5772156649015...
>>> round(pb.gradient(lambda x: special.sici(x)[1], 1.0)[0], 12)  # cos(x) / x
0.540302305868
>>> pb.gradient(lambda x: special.lambertw(x).real, 0.0)[0]  # W'(0) = 1; complex W, real x: a real gradient
1.0
"""

from ..rules.special import NO_GRADIENT as _NO_GRADIENT
from ..rules.special import RULES as _RULES
from ..rules.special import (
    airy,
    airye,
    diric,
    ellipj,
    fresnel,
    it2i0k0,
    it2j0y0,
    itairy,
    iti0k0,
    itj0y0,
    log_softmax,
    logsumexp,
    multigammaln,
    pbdv,
    pbvv,
    pbwa,
    polygamma,
    shichi,
    sici,
    softmax,
    spherical_in,
    spherical_jn,
    spherical_kn,
    spherical_yn,
)

__all__ = ["logsumexp", "softmax", "log_softmax", "polygamma", "multigammaln", "diric", "spherical_jn", "spherical_yn",
           "spherical_in", "spherical_kn", "sici", "shichi", "fresnel", "airy", "airye", "itairy", "itj0y0", "iti0k0", "it2j0y0",
           "it2i0k0", "ellipj", "pbdv", "pbvv", "pbwa"]
# SciPy's own: the ufuncs with rules, and Python-level functions that compute with them
_SCIPYS = sorted({name for name in _RULES if not name.startswith("_")} | set(_NO_GRADIENT)
                 | {"zeta", "softplus", "assoc_laguerre", "jvp", "yvp", "ivp", "kvp", "psi", "jn", "lambertw"})
__all__ += _SCIPYS


def __getattr__(name):
    if name not in _SCIPYS:
        raise AttributeError(
            f"pullback.scipy.special has no {name!r}: pullback differentiates {', '.join(__all__)}. "
            "Other scipy.special functions have no derivative rule; register one with pb.rrule."
        )
    import scipy.special

    return getattr(scipy.special, name)


def __dir__():
    return sorted(set(globals()) | set(__all__))
