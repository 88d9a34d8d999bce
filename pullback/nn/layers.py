"""Core layers: Dense, Chain, Parallel, SkipConnection, Flatten, Embedding, Dropout.

Layers are plain classes: their parameters are public NumPy arrays, `trainable()` names
the fields that get gradients, and calling a layer runs it. Any object with array fields
and a `__call__` works just as well in a Chain or under `pb.gradient`.
"""

import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .._arrays import axis_index
from .._standins import traced_value
from . import init as initialisers
from .modes import is_training

__all__ = ["Dense", "Chain", "Parallel", "SkipConnection", "Flatten", "Embedding", "Dropout"]


def as_generator(rng: np.random.Generator | int | None) -> np.random.Generator:
    if rng is None:
        return np.random.default_rng()
    if isinstance(rng, (int, np.integer)):
        return np.random.default_rng(rng)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng should be a numpy.random.Generator, an int seed or None; got {type(rng).__name__}")
    return rng


def check_sizes(layer: str, usage: str, **sizes: Any) -> None:
    """Refuse a size that is not a positive int, showing the layer's argument order (`usage`).

    >>> check_sizes("Dense", "Dense(in_features, out_features)", in_features=(3,), out_features=2)
    Traceback (most recent call last):
    TypeError: Dense: in_features must be a positive int; got (3,). The order is Dense(in_features, out_features).
    """
    for name, n in sizes.items():
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise TypeError(f"{layer}: {name} must be a positive int; got {n!r}. The order is {usage}.")


def name_of(fn: Any) -> str:
    """A short name for an activation or connection in a repr."""
    return getattr(fn, "__name__", None) or repr(fn)


class Dense:
    """`activation(x @ weight.T + bias)` for inputs `(..., in_features)`.

    `weight` is `(out_features, in_features)` (as PyTorch's Linear and Flux's Dense), `bias`
    is `(out_features,)` or None. `init` is an initialiser from `pb.nn.init`.

    >>> import numpy as np, pullback as pb
    >>> layer = pb.nn.Dense(3, 2, pb.nn.relu, rng=np.random.default_rng(0))
    >>> layer, layer.weight.shape, layer(np.ones((5, 3), dtype=np.float32)).shape
    (Dense(3, 2, relu), (2, 3), (5, 2))
    """

    def __init__(
        self, in_features: int, out_features: int, activation: Callable[[Any], Any] | None = None, *, bias: bool = True,
        dtype: DTypeLike = np.float32, rng: np.random.Generator | int | None = None,
        init: initialisers.Initialiser = initialisers.glorot_uniform,
    ) -> None:
        check_sizes("Dense", "Dense(in_features, out_features, activation)", in_features=in_features,
                    out_features=out_features)
        self.weight = init(as_generator(rng), (out_features, in_features), dtype)
        self.bias = np.zeros(out_features, dtype=dtype) if bias else None
        self.activation = activation

    def trainable(self) -> tuple[str, ...]:
        return ("weight", "bias")

    def __call__(self, x: Any) -> Any:
        if np.shape(x)[-1:] != self.weight.shape[1:]:
            raise ValueError(f"{self!r} expects inputs (..., {self.weight.shape[1]}); got shape {np.shape(x)}")
        y = x @ self.weight.T
        if self.bias is not None:
            y = y + self.bias
        return y if self.activation is None else self.activation(y)

    def __repr__(self):
        out_features, in_features = self.weight.shape
        act = f", {name_of(self.activation)}" if self.activation is not None else ""
        return f"Dense({in_features}, {out_features}{act}{'' if self.bias is not None else ', bias=False'})"


def _show(item):
    """A layer's repr; functions (activations, connections) by name."""
    if isinstance(item, (types.FunctionType, types.BuiltinFunctionType, np.ufunc)):
        return name_of(item)
    return repr(item)


def _indent(item):
    return "\n".join("  " + line for line in _show(item).splitlines())


class Chain:
    """Layers applied in order: `Chain(a, b)(x) == b(a(x))`. Indexing gives a layer or a sub-Chain.

    >>> import numpy as np, pullback as pb
    >>> m = pb.nn.Chain(pb.nn.Dense(2, 3, pb.nn.relu), pb.nn.Dense(3, 1))
    >>> len(m), m[0], m[1:]
    (2, Dense(2, 3, relu), Chain(Dense(3, 1)))
    """

    def __init__(self, *layers: Callable[[Any], Any]) -> None:
        for k, layer in enumerate(layers):
            if not callable(layer):
                raise TypeError(f"Chain: layer {k} ({type(layer).__name__}) is not callable")
        self.layers = tuple(layers)

    def __call__(self, x: Any) -> Any:
        for layer in self.layers:
            x = layer(x)
        return x

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return Chain(*self.layers[index])
        return self.layers[index]

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[Callable[[Any], Any]]:
        return iter(self.layers)

    def __repr__(self):
        if len(self.layers) <= 1:
            return f"Chain({', '.join(map(_show, self.layers))})"
        body = "\n".join(_indent(layer) + "," for layer in self.layers)
        return f"Chain(\n{body}\n)"


class Parallel:
    """`connection(layer_1(x), ..., layer_n(x))`; given a tuple of n inputs, layer k gets input k.

    >>> import numpy as np, pullback as pb
    >>> p = pb.nn.Parallel(np.add, np.sin, np.cos)
    >>> float(p(np.array(0.0)))
    1.0
    """

    def __init__(self, connection: Callable[..., Any], *layers: Callable[[Any], Any]) -> None:
        if not layers:
            raise ValueError("Parallel needs at least one layer")
        self.connection = connection
        self.layers = tuple(layers)

    def __call__(self, x: Any) -> Any:
        if isinstance(x, tuple):
            if len(x) != len(self.layers):
                raise ValueError(f"Parallel with {len(self.layers)} layers got a tuple of {len(x)} inputs")
            outputs = [layer(xk) for layer, xk in zip(self.layers, x)]
        else:
            outputs = [layer(x) for layer in self.layers]
        return self.connection(*outputs)

    def __getitem__(self, index: int) -> Callable[[Any], Any]:
        return self.layers[index]

    def __len__(self) -> int:
        return len(self.layers)

    def __repr__(self):
        body = "\n".join(_indent(layer) + "," for layer in self.layers)
        return f"Parallel(\n  {name_of(self.connection)},\n{body}\n)"


class SkipConnection:
    """`connection(layers(x), x)`: a residual block when `connection` is `np.add`.

    >>> import numpy as np, pullback as pb
    >>> float(pb.nn.SkipConnection(np.sin, np.add)(np.array(0.5)))  # sin(0.5) + 0.5
    0.979425538604203
    """

    def __init__(self, layers: Callable[[Any], Any], connection: Callable[[Any, Any], Any]) -> None:
        self.layers = layers
        self.connection = connection

    def __call__(self, x: Any) -> Any:
        return self.connection(self.layers(x), x)

    def __repr__(self):
        return f"SkipConnection(\n{_indent(self.layers)},\n  {name_of(self.connection)},\n)"


class Flatten:
    """Reshape `(batch, ...)` to `(batch, features)`. With NHWC images the feature order is (h, w, c).

    >>> import numpy as np, pullback as pb
    >>> pb.nn.Flatten()(np.zeros((2, 3, 4, 5))).shape
    (2, 60)
    """

    def __call__(self, x: Any) -> Any:
        return np.reshape(x, (np.shape(x)[0], -1))

    def __repr__(self):
        return "Flatten()"


class Embedding:
    """Look up rows of `weight` `(num_embeddings, dim)` for integer indices: `(...)` -> `(..., dim)`.

    >>> import numpy as np, pullback as pb
    >>> e = pb.nn.Embedding(10, 4, rng=np.random.default_rng(0))
    >>> e, e(np.array([[1, 2, 3]])).shape
    (Embedding(10, 4), (1, 3, 4))
    """

    def __init__(
        self, num_embeddings: int, dim: int, *, dtype: DTypeLike = np.float32, rng: np.random.Generator | int | None = None,
        init: initialisers.Initialiser | None = None,
    ) -> None:
        check_sizes("Embedding", "Embedding(num_embeddings, dim)", num_embeddings=num_embeddings, dim=dim)
        rng = as_generator(rng)
        shape = (num_embeddings, dim)
        self.weight = rng.standard_normal(shape).astype(dtype) if init is None else init(rng, shape, dtype)

    def trainable(self) -> tuple[str, ...]:
        return ("weight",)

    def __call__(self, indices: ArrayLike) -> Any:
        # a list as an array; an array (also pb.jit's stand-in) as it is
        ids: Any = indices if hasattr(indices, "dtype") else np.asarray(indices)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"Embedding takes integer indices; got dtype {ids.dtype}")
        n = self.weight.shape[0]
        if ids.size:
            low, high = ids.min(), ids.max()
            if low < 0 or high >= n:  # under pb.jit a guard on the indices' range; the message shows the values
                raise IndexError(f"Embedding indices must lie in 0..{n - 1}; got {traced_value(low)}..{traced_value(high)}")
        return self.weight[ids]

    def __repr__(self):
        return f"Embedding({self.weight.shape[0]}, {self.weight.shape[1]})"


def _as_axes(dims: "int | Iterable[int]") -> tuple[int, ...]:
    """Dropout's `dims` as a tuple of ints (one int is one axis, as in Flux's `dims=1`)."""
    if isinstance(dims, (int, np.integer)) and not isinstance(dims, bool):
        return (int(dims),)
    try:
        axes = tuple(dims)  # type: ignore[arg-type]  # a bool or a float is refused here
    except TypeError:
        raise TypeError(f"Dropout: dims should be an axis or axes (ints), such as dims=(0, 3); got {dims!r}") from None
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in axes):
        raise TypeError(f"Dropout: dims should be axes (ints), such as dims=(0, 3); got {axes!r}")
    return tuple(int(d) for d in axes)


class Dropout:
    """Zero each element with probability `p` in training mode and scale the rest by 1 / (1 - p).

    `rng` (a `np.random.Generator`, or an int seed) draws the masks: pass one for
    reproducible runs. `dims` names the axes along which the mask varies (None: all; negative
    ones count from the end); for NHWC images, `dims=(0, 3)` drops whole channels. In
    evaluation mode it is the identity. See `pb.nn.modes` for when a layer is in training mode.

    >>> import numpy as np, pullback as pb
    >>> d = pb.nn.Dropout(0.5, rng=np.random.default_rng(0), training=True)
    >>> d(np.ones(6))
    array([2., 0., 0., 0., 2., 2.])
    """

    def __init__(
        self, p: float, *, dims: int | Iterable[int] | None = None, rng: np.random.Generator | int | None = None,
        training: bool | None = None,
    ) -> None:
        if not 0 <= p < 1:
            raise ValueError(f"Dropout probability p must be in [0, 1); got {p}")
        self.p = p
        self.dims = None if dims is None else _as_axes(dims)
        self.rng = as_generator(rng)
        self.training = training

    def trainable(self) -> tuple[str, ...]:
        return ()

    def __call__(self, x: Any) -> Any:
        if self.p == 0 or not is_training(self, x):
            return x
        shape = np.shape(x)
        if self.dims is not None:
            axes = self._axes(shape)
            shape = tuple(n if k in axes else 1 for k, n in enumerate(shape))
        keep = (self.rng.random(shape) >= self.p).astype(x.dtype)
        return x * (keep * (1.0 / (1.0 - self.p)))

    def _axes(self, shape):
        """`dims` as axes of an input of `shape` (negative ones count from the end, as in NumPy)."""
        ndim = len(shape)
        for d in self.dims:
            if not -ndim <= d < ndim:
                raise ValueError(f"Dropout(dims={self.dims}): inputs of shape {shape} have no axis {d}; "
                                 f"give axes in {-ndim}..{ndim - 1}")
        return {axis_index(d, ndim) for d in self.dims}

    def __repr__(self):
        extra = f", dims={self.dims}" if self.dims is not None else ""
        mode = f", training={self.training}" if self.training is not None else ""
        return f"Dropout({self.p}{extra}{mode})"
