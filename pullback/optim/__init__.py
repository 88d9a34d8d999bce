"""Optimisers with Optimisers.jl semantics over gradients shaped like the model.

`setup(rule, model)` makes a state that mirrors the model's trainable float arrays;
`update(state, model, grad)` returns a new state and a new model and changes nothing it was
given; `update_` does the same step in place. `adjust` changes hyperparameters, `freeze`
and `thaw` hold parameters still, and `destructure` flattens a model into one vector.

What is trained: every float `numpy.ndarray` in a trainable field (a class may list its
trainable fields with a `trainable(self)` method). Python floats and integer arrays are
left alone; to train a scalar, store it as a 0-d array. A tied array (one array object at
several places) is trained once, with the sum of its gradients, and stays tied.

>>> import numpy as np, pullback as pb
>>> class Line:
...     def __init__(self): self.w, self.b = np.array([0.0]), np.array([0.0])
>>> model = Line()
>>> state = pb.optim.setup(pb.optim.Adam(0.1), model)
>>> x, y = np.array([0.0, 1.0, 2.0]), np.array([1.0, 3.0, 5.0])
>>> for _ in range(300):
...     g, = pb.gradient(lambda m: np.mean((m.w * x + m.b - y) ** 2), model)
...     state, model = pb.optim.update(state, model, g)
>>> np.round(model.w, 2), np.round(model.b, 2)
(array([2.]), array([1.]))
"""

from ._destructure import Restructure, destructure
from ._state import Leaf, adjust, freeze, setup, thaw
from ._update import update, update_
from .rules import (
    AdaGrad,
    Adam,
    AdamW,
    ClipGrad,
    ClipNorm,
    Descent,
    Lion,
    Momentum,
    Nesterov,
    OptimiserChain,
    RMSProp,
    Rule,
    WeightDecay,
)

__all__ = [
    "setup", "update", "update_", "adjust", "freeze", "thaw", "Leaf", "destructure", "Restructure",
    "Rule", "Descent", "Momentum", "Nesterov", "Adam", "AdamW", "RMSProp", "AdaGrad", "Lion",
    "ClipGrad", "ClipNorm", "WeightDecay", "OptimiserChain",
]
