"""`scipy.spatial`, differentiable: `pullback.scipy.spatial.distance` has `cdist`, `pdist` and
`squareform`, with SciPy's signatures.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy.spatial import distance
>>> pb.gradient(lambda x: np.sum(distance.pdist(x)), np.array([[0.0], [2.0]]))[0]
array([[-1.],
       [ 1.]])
"""

from . import distance

__all__ = ["distance"]
