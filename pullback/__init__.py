"""pullback: gradients of plain NumPy code, shaped like your own objects.

>>> import numpy as np, pullback as pb
>>> pb.gradient(lambda x: np.sum(np.sin(x)), np.array([0.0]))
(array([1.]),)
"""

from . import rules as _rules  # noqa: F401  (registers the built-in rules)
from . import testing, tree
from ._api import WithGradient, grad, gradient, pullback, stop_gradient, value_and_grad, vjp, withgradient
from ._derivatives import WithJacobian, hessian, hvp, jacobian, jvp, withjacobian
from ._extend import composite, frule, nondifferentiable, primitive, rrule
from ._jit import JitError, jit
from ._tangents import InplaceableThunk, PerOperand, Tangent, Thunk, accum, unthunk
from .testing import GradientCheck, check_gradient

__version__ = "0.1.0"

# Heavier parts load on first use, so `import pullback` stays fast.
_LAZY = {
    "optim": ("pullback.optim", None),
    "destructure": ("pullback.optim", "destructure"),
    "save": ("pullback.saving", "save"),
    "load": ("pullback.saving", "load"),
    "state_dict": ("pullback.checkpoint", "state_dict"),
    "load_state_dict": ("pullback.checkpoint", "load_state_dict"),
    "nn": ("pullback.nn", None),
    "scipy": ("pullback.scipy", None),
    "distributed": ("pullback.distributed", None),
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'pullback' has no attribute {name!r}")
    import importlib

    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "gradient", "withgradient", "pullback", "vjp", "grad", "value_and_grad", "WithGradient",
    "check_gradient", "GradientCheck", "jvp", "jacobian", "withjacobian", "WithJacobian", "hessian", "hvp",
    "primitive", "rrule", "frule", "composite", "nondifferentiable", "stop_gradient",
    "Thunk", "InplaceableThunk", "PerOperand", "unthunk", "accum", "Tangent", "tree", "testing",
    "optim", "destructure", "save", "load", "state_dict", "load_state_dict", "nn", "scipy", "distributed",
    "jit", "JitError",
]
