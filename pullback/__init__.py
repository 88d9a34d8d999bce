"""pullback: gradients of plain NumPy code, shaped like your own objects.

>>> import numpy as np, pullback as pb
>>> pb.gradient(lambda x: np.sum(np.sin(x)), np.array([0.0]))
(array([1.]),)
"""

from . import rules as _rules  # noqa: F401  (registers the built-in rules)
from . import tree
from ._api import WithGradient, grad, gradient, pullback, value_and_grad, withgradient
from ._check import GradientCheck, check_gradient
from ._derivatives import WithJacobian, hessian, hvp, jacobian, jvp, withjacobian
from ._extend import frule, primitive, rrule
from ._tangents import InplaceableThunk, Tangent, Thunk, accum, unthunk
from ._trace import stop_gradient

__version__ = "0.1.0"

__all__ = [
    "gradient", "withgradient", "pullback", "grad", "value_and_grad", "WithGradient",
    "check_gradient", "GradientCheck", "jvp", "jacobian", "withjacobian", "WithJacobian", "hessian", "hvp",
    "primitive", "rrule", "frule", "stop_gradient",
    "Thunk", "InplaceableThunk", "unthunk", "accum", "Tangent", "tree",
]
