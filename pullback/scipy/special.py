"""`scipy.special`, differentiable: `logsumexp`, `softmax`, `log_softmax`, `polygamma` and `multigammaln` as
pullback's own versions, and the ufuncs that have rules (`erf`, `gammaln`, `expit`, `xlogy`, ...)
as SciPy's own, which work on traced values as they are. SciPy is imported on first use.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy import special
>>> pb.gradient(lambda x: special.softmax(x)[0], np.array([0.0, 0.0]))[0]
array([ 0.25, -0.25])
>>> pb.gradient(lambda x: special.gammaln(x), 1.0)[0]  # digamma(1) = -0.5772...
-0.5772156649015...
"""

from ..rules.special import RULES as _RULES
from ..rules.special import log_softmax, logsumexp, multigammaln, polygamma, softmax

__all__ = ["logsumexp", "softmax", "log_softmax", "polygamma", "multigammaln", *sorted(_RULES)]


def __getattr__(name):
    if name not in _RULES:
        raise AttributeError(
            f"pullback.scipy.special has no {name!r}: pullback differentiates {', '.join(__all__)}. "
            "Other scipy.special functions have no derivative rule; register one with pb.rrule."
        )
    import scipy.special

    return getattr(scipy.special, name)


def __dir__():
    return sorted(set(globals()) | set(__all__))
