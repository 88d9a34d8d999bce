"""`scipy.spatial.distance`, differentiable: `cdist`, `pdist` and `squareform`, with SciPy's
signatures. SciPy is imported on first use.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy.spatial.distance import cdist
>>> pb.gradient(lambda a: np.sum(cdist(a, np.array([[0.0, 0.0]]), "cityblock")), np.array([[1.0, -2.0]]))[0]
array([[ 1., -1.]])
"""

from ...rules.scipy_spatial import cdist, pdist, squareform

__all__ = ["cdist", "pdist", "squareform"]
