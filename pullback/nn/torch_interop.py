"""Bring PyTorch weights across: `load_torch_weights(model, torch_module)`.

PyTorch stores images NCHW and filters `(out, in // groups, kh, kw)`; pullback stores
images NHWC and filters `(kh, kw, in // groups, out)`. The conversions:

| PyTorch                      | pullback                  | conversion                      |
| ---------------------------- | ------------------------- | ------------------------------- |
| `Linear.weight (out, in)`    | `Dense.weight (out, in)`  | none                            |
| `Conv2d.weight`              | `Conv.weight`             | `w.permute(2, 3, 1, 0)`         |
| `ConvTranspose2d.weight`     | `ConvTranspose.weight`    | `w.permute(2, 3, 1, 0)`         |
| `BatchNorm*.weight / bias`   | `BatchNorm.scale / shift` | none (running stats likewise)   |
| images `(n, c, h, w)`        | images `(n, h, w, c)`     | `x.permute(0, 2, 3, 1)`         |

A `Linear` after flattening images sees features in (c, h, w) order in PyTorch and
(h, w, c) order here: permute its input columns accordingly (global pooling, as in
ResNets, avoids the question). torch is never imported here.
"""

import numpy as np

from .. import tree
from .convlayers import Conv, ConvTranspose
from .layers import Dense, Embedding
from .normalise import BatchNorm, LayerNorm

__all__ = ["load_torch_weights"]

_PAIRS = {
    "Linear": Dense,
    "Conv2d": Conv,
    "ConvTranspose2d": ConvTranspose,
    "BatchNorm1d": BatchNorm,
    "BatchNorm2d": BatchNorm,
    "LayerNorm": LayerNorm,
    "Embedding": Embedding,
}


def _numpy(t, like):
    return np.array(t.detach().cpu().numpy(), dtype=like.dtype)


def _parameter_layers(model):
    """pullback's layers with parameters, in the order a depth-first walk meets them."""
    found, seen = [], set()

    def visit(node):
        if id(node) in seen or tree.kind_of(node) is None:
            return
        seen.add(id(node))
        if type(node) in (Dense, Conv, ConvTranspose, BatchNorm, LayerNorm, Embedding):
            found.append(node)
            return
        for child in tree.children(node).values():
            visit(child)

    visit(model)
    return found


def load_torch_weights(model, torch_module):
    """Copy the parameters of `torch_module` into `model` (same architecture), in place; returns `model`.

    Layers are paired in order: pullback's Dense/Conv/ConvTranspose/BatchNorm/LayerNorm/
    Embedding layers as a walk of `model` meets them, against the matching PyTorch modules
    in `torch_module.modules()` order. Kinds, shapes and convolution geometry must agree;
    otherwise nothing is copied and a ValueError names the first mismatch.
    """
    ours = _parameter_layers(model)
    theirs = [m for m in torch_module.modules() if type(m).__name__ in _PAIRS]
    if len(ours) != len(theirs):
        raise ValueError(
            f"The models do not match: {len(ours)} parametrised layers in the pullback model, "
            f"{len(theirs)} in the PyTorch module."
        )
    updates = [_converted(k, mine, other) for k, (mine, other) in enumerate(zip(ours, theirs))]
    for layer, fields in zip(ours, updates):
        for name, value in fields.items():
            setattr(layer, name, value)
    return model


def _converted(k, mine, other):
    kind = type(other).__name__
    if not isinstance(mine, _PAIRS[kind]) or (kind == "Conv2d" and type(mine) is ConvTranspose):
        raise ValueError(f"Layer {k}: PyTorch {kind} is paired with pullback {type(mine).__name__}")
    if kind in ("Conv2d", "ConvTranspose2d"):
        _check_geometry(k, mine, other)
        fields = {"weight": _numpy(other.weight.permute(2, 3, 1, 0), mine.weight)}
    elif kind in ("BatchNorm1d", "BatchNorm2d"):
        like = mine.running_mean
        fields = {"running_mean": _numpy(other.running_mean, like), "running_var": _numpy(other.running_var, like)}
        if other.weight is not None:
            fields.update(scale=_numpy(other.weight, like), shift=_numpy(other.bias, like))
        mine.eps, mine.momentum = other.eps, other.momentum
    elif kind == "LayerNorm":
        fields = {} if other.weight is None else {"scale": _numpy(other.weight, mine.scale)}
        if other.bias is not None:
            fields["shift"] = _numpy(other.bias, mine.shift)
        mine.eps = other.eps
    else:
        fields = {"weight": _numpy(other.weight, mine.weight)}
    if kind in ("Linear", "Conv2d", "ConvTranspose2d"):
        if (other.bias is None) != (mine.bias is None):
            raise ValueError(f"Layer {k}: bias present in one model but not the other ({kind} vs {mine!r})")
        if other.bias is not None:
            fields["bias"] = _numpy(other.bias, mine.bias)
    for name, value in fields.items():
        current = getattr(mine, name)
        if current is not None and current.shape != value.shape:
            raise ValueError(f"Layer {k} ({mine!r}): {name} has shape {current.shape}, PyTorch's converts to {value.shape}")
    return fields


def _check_geometry(k, mine, other):
    padding = other.padding
    if isinstance(padding, str):
        padding = None
    else:
        padding = tuple((p, p) for p in padding)
    theirs = {"stride": tuple(other.stride), "dilation": tuple(other.dilation), "groups": other.groups}
    if padding is not None:
        theirs["padding"] = padding
    for key, value in theirs.items():
        if getattr(mine, key) != value:
            raise ValueError(f"Layer {k} ({mine!r}): {key} is {getattr(mine, key)}, PyTorch's is {value}")
