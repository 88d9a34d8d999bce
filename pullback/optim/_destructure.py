"""`destructure`: all of a model's trainable parameters as one flat vector, and the way back."""

from typing import Any

import numpy as np

from .. import tree
from .._jit_trace import Symbol
from .._leaves import refuse_array_like, refuse_hidden_arrays
from .._values import stop_gradient  # the plain value itself (the public one hands out a read-only copy)
from ._walk import is_traced_param, name

__all__ = ["destructure", "Restructure"]


def destructure(model: Any) -> tuple[Any, "Restructure"]:
    """`(flat, rebuild)`: the trainable float arrays of `model` as one vector, and its inverse.

    `flat` concatenates the arrays (C order, in the order `pb.tree` walks the model; a tied
    array once) in their common dtype. `rebuild(vector)` returns a model like `model` with
    those arrays replaced by slices of `vector`, reshaped and cast back to each array's
    dtype; ties stay ties and everything else is kept. Both directions are differentiable,
    so any model can be handed to a flat-vector optimiser such as `scipy.optimize.minimize`.

    >>> import numpy as np, pullback as pb
    >>> model = {"w": np.ones((2, 2)), "b": np.zeros(2), "steps": np.array([3])}
    >>> flat, rebuild = pb.optim.destructure(model)
    >>> flat
    array([1., 1., 1., 1., 0., 0.])
    >>> rebuild(np.arange(6.0))["w"]
    array([[0., 1.],
           [2., 3.]])
    >>> pb.gradient(lambda v: np.sum(rebuild(v)["w"] ** 2), flat)[0]
    array([2., 2., 2., 2., 0., 0.])
    """
    params = _trainable_arrays(model)
    dtype = np.result_type(*[p.dtype for p in params]) if params else np.dtype(np.float64)
    parts = [np.ravel(p if p.dtype == dtype else p.astype(dtype)) for p in params]
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype)
    return flat, Restructure(model, params)


def _key(x):
    """Identity of a parameter; a value being differentiated is keyed by the array it wraps, so the
    places of a tied array (each traced separately) still count as one parameter."""
    return id(stop_gradient(x))


def _trainable_arrays(model):
    """The distinct trainable float arrays of `model`, each at its first trainable place."""
    found = {}
    for path, x in tree.leaves_with_path(model, trainable_only=True):
        if is_traced_param(x):
            found.setdefault(_key(x), x)
        else:  # a deque or a torch tensor holding weights: they would be left out of the vector
            refuse_hidden_arrays(x, name(path))
            refuse_array_like(x, name(path))
    return list(found.values())


class Restructure:
    """The `rebuild` half of `destructure`: call it with a vector of length `length`.

    >>> import numpy as np, pullback as pb
    >>> pb.optim.destructure([np.ones(2), np.ones((1, 3))])[1]
    Restructure(list, length=5)
    """

    def __init__(self, model: Any, params: list[Any]) -> None:
        self._model = model
        self._params = params  # keeps the arrays alive, so their ids stay theirs
        self._keys = [_key(p) for p in params]
        self._shapes = [tuple(p.shape) for p in params]
        self._dtypes = [p.dtype for p in params]
        sizes = [int(np.prod(s, dtype=np.int64)) for s in self._shapes]
        self._offsets = np.cumsum([0] + sizes).tolist()
        self.length = self._offsets[-1]

    def __call__(self, flat: Any) -> Any:
        traced = stop_gradient(flat) is not flat
        if not traced and not isinstance(flat, Symbol):  # a pb.jit stand-in is sliced as it is
            flat = np.asarray(flat)
        if np.ndim(flat) != 1 or np.shape(flat)[0] != self.length:
            raise ValueError(
                f"rebuild expects a vector of length {self.length} (the model's trainable parameters), "
                f"got shape {np.shape(flat)}"
            )
        pieces = {}
        for key, shape, dtype, start, stop in zip(self._keys, self._shapes, self._dtypes, self._offsets, self._offsets[1:]):
            piece = flat[start:stop].reshape(shape)
            if piece.dtype != dtype:
                piece = piece.astype(dtype)
            elif not traced:
                piece = piece.copy()  # the rebuilt model must not write through into `flat`
            pieces[key] = piece
        return tree.fmap(lambda leaf: pieces.get(_key(leaf), leaf) if is_traced_param(leaf) else leaf, self._model)

    def __repr__(self):
        return f"Restructure({type(self._model).__name__}, length={self.length})"

