"""Bring PyTorch weights across: `load_torch_weights(model, torch_module)`, or from a state
dict of NumPy arrays (for instance a safetensors file): `load_torch_state_dict(model, state)`.

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

import re
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

import numpy as np

from .. import tree
from .._rng_states import copies
from .conv import normalise_padding
from .convlayers import Conv, ConvTranspose
from .layers import Dense, Embedding
from .normalise import BatchNorm, LayerNorm

__all__ = ["load_torch_weights", "load_torch_state_dict"]

Model = TypeVar("Model")

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


_LAYERS = (Dense, Conv, ConvTranspose, BatchNorm, LayerNorm, Embedding)


def _is_layer(x):
    return type(x) in _LAYERS


def parameter_layers(model: Any) -> list[Any]:
    """pullback's layers with parameters, in walk order (each once; their insides are not walked).

    >>> import pullback as pb
    >>> from pullback.nn.torch_interop import parameter_layers
    >>> [type(layer).__name__ for layer in parameter_layers(pb.nn.Chain(pb.nn.Dense(2, 3), pb.nn.Dropout(0.1)))]
    ['Dense']
    """
    return [x for x in tree.leaves(model, exclude=_is_layer) if _is_layer(x)]




def load_torch_weights(model: Model, torch_module: Any) -> Model:
    """Copy the parameters of `torch_module` into `model` (same architecture), in place; returns `model`.

    Layers are paired in order: pullback's Dense/Conv/ConvTranspose/BatchNorm/LayerNorm/
    Embedding layers as a walk of `model` meets them, against the matching PyTorch modules
    in `torch_module.modules()` order. Kinds, shapes and convolution geometry must agree;
    otherwise nothing is copied and a ValueError names the first mismatch. A PyTorch module
    holding parameters or buffers that no pullback layer takes (PReLU, GroupNorm, ...), and
    options pullback's layers lack (an Embedding's `padding_idx`), are refused the same way.
    """
    _check_nothing_dropped(torch_module)
    ours = parameter_layers(model)
    theirs = [m for m in torch_module.modules() if type(m).__name__ in _PAIRS]
    if len(ours) != len(theirs):
        raise ValueError(
            f"The models do not match: {len(ours)} parametrised layers in the pullback model, "
            f"{len(theirs)} in the PyTorch module."
        )
    updates = [_converted(k, mine, other) for k, (mine, other) in enumerate(zip(ours, theirs))]
    for layer, fields in zip(ours, updates):  # every layer checked: now copy
        for name, value in fields.items():
            setattr(layer, name, value)
    return model


def _check_nothing_dropped(torch_module):
    """Refuse a module holding parameters or buffers (its state dict's entries) that no pullback
    layer takes, such as PReLU's weight or GroupNorm's: loading would silently lose them."""
    modules = dict(torch_module.named_modules(remove_duplicate=False))
    for key in torch_module.state_dict(keep_vars=True):
        kind = type(modules[key.rpartition(".")[0]]).__name__
        if kind not in _PAIRS:
            raise ValueError(
                f"The PyTorch module's {key} belongs to a {kind}, which no pullback layer takes (pullback pairs "
                f"{', '.join(_PAIRS)}), so loading would drop it. Leave the {kind} out of the PyTorch model, or load "
                "the other weights with load_torch_state_dict from a state dict without its entries.")


def _converted(k, mine, other):
    """The fields to set on `mine` (arrays, and `eps`/`momentum` of the normalisations), checked."""
    kind = type(other).__name__
    settings = {}
    if not isinstance(mine, _PAIRS[kind]) or (kind == "Conv2d" and type(mine) is ConvTranspose):
        raise ValueError(f"Layer {k}: PyTorch {kind} is paired with pullback {type(mine).__name__}")
    if kind in ("Conv2d", "ConvTranspose2d"):
        _check_geometry(k, mine, other)
        fields = {"weight": _numpy(other.weight.permute(2, 3, 1, 0), mine.weight)}
    elif kind in ("BatchNorm1d", "BatchNorm2d"):
        if other.running_mean is None:
            raise ValueError(
                f"Layer {k}: PyTorch's BatchNorm has track_running_stats=False (it normalises with the batch's own "
                "statistics even in evaluation), which pullback's BatchNorm does not do; its running statistics "
                "would decide the output in test mode. Keep the model in training mode, or track the statistics.")
        _check_affine(k, mine, other)
        like = mine.running_mean
        fields = {"running_mean": _numpy(other.running_mean, like), "running_var": _numpy(other.running_var, like)}
        if other.weight is not None:
            fields.update(scale=_numpy(other.weight, like), shift=_numpy(other.bias, like))
        if other.momentum is None:
            raise ValueError(
                f"Layer {k}: PyTorch's BatchNorm has momentum=None (a cumulative average of the batch statistics), "
                "which pullback's BatchNorm does not have; give the PyTorch module a momentum, or set the "
                "pullback layer's momentum after loading.")
        settings = {"eps": other.eps, "momentum": other.momentum}
    elif kind == "LayerNorm":
        _check_affine(k, mine, other)
        fields = {} if other.weight is None else {"scale": _numpy(other.weight, mine.scale)}
        if other.bias is not None:
            fields["shift"] = _numpy(other.bias, mine.shift)
        settings = {"eps": other.eps}
    else:
        if kind == "Embedding":
            _check_embedding(k, mine, other)
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
    return {**fields, **settings}


def _check_affine(k, mine, other):
    """A normalisation's scale and shift exist in both models or in neither (a kept one would act unseen)."""
    for theirs, ours in (("weight", "scale"), ("bias", "shift")):
        if (getattr(other, theirs) is None) != (getattr(mine, ours) is None):
            raise ValueError(f"Layer {k} ({mine!r}): PyTorch's {theirs} is {'absent' if getattr(other, theirs) is None else 'present'}"
                             f" but pullback's {ours} is {'absent' if getattr(mine, ours) is None else 'present'}; "
                             "give the pullback layer the same parameters (affine=..., or set the field to None)")


def _check_embedding(k, mine, other):
    """PyTorch's Embedding options that change training, which pullback's Embedding does not have."""
    options = {"padding_idx": (other.padding_idx, None, "its row gets no gradient"),
               "max_norm": (other.max_norm, None, "looked-up rows are renormalised"),
               "scale_grad_by_freq": (other.scale_grad_by_freq, False, "gradients are scaled by the indices' counts")}
    for option, (value, plain, effect) in options.items():
        if value != plain:
            raise ValueError(f"Layer {k} ({mine!r}): PyTorch's Embedding has {option}={value!r} ({effect}), which "
                             f"pullback's Embedding does not do; training the loaded model would differ. Make the "
                             f"PyTorch module without {option}, or copy its weight by hand.")


def _check_geometry(k, mine, other):
    """Everything that shapes the convolution's output, PyTorch's against `mine`'s."""
    if getattr(other, "padding_mode", "zeros") != "zeros":
        raise ValueError(f"Layer {k} ({mine!r}): PyTorch's padding_mode is {other.padding_mode!r}; pullback's "
                         "convolutions pad with zeros only (pad the input with np.pad(..., mode=...) before a "
                         "padding=0 Conv instead)")
    padding = other.padding
    if isinstance(padding, str):  # "valid" or "same" (stride 1), as PyTorch computes it
        padding = normalise_padding(padding, tuple(other.kernel_size), tuple(other.dilation))
    else:
        padding = tuple((p, p) for p in padding)
    theirs = {"stride": tuple(other.stride), "dilation": tuple(other.dilation), "groups": other.groups,
              "padding": padding}
    if isinstance(mine, ConvTranspose):
        theirs["output_padding"] = tuple(other.output_padding)
    for key, value in theirs.items():
        if getattr(mine, key) != value:
            raise ValueError(f"Layer {k} ({mine!r}): {key} is {getattr(mine, key)}, PyTorch's is {value}")


# --- from a state dict of arrays -----------------------------------------------------------
def load_torch_state_dict(
    model: Model, state_dict: Mapping[str, np.ndarray], *, key_order: Literal["given", "natural"] = "given"
) -> Model:
    """A copy of `model` holding the arrays of a PyTorch state dict; `model` is not changed.

    `state_dict` maps PyTorch keys (``"layer1.0.conv1.weight"``) to NumPy arrays, as
    ``{k: v.numpy() for k, v in module.state_dict().items()}`` or a safetensors file gives.
    Keys are grouped by module (``"layer1.0.conv1"``). Each parametrised pullback layer, in
    the order `load_torch_weights` uses, takes the next unused module with the parameter
    names and shapes it needs (PyTorch's layout: a convolution's `(out, in, kh, kw)`),
    taking modules in the dict's order (``key_order="given"``: right for
    `module.state_dict()`, which lists modules in `modules()` order) or in natural key
    order, numbers compared as numbers (``key_order="natural"``: for files such as
    safetensors, which do not keep PyTorch's order; this is module order for torchvision's
    ResNets). Arrays are converted as in the table above and cast to the layer's float
    dtype. Every layer must be paired and every array used (``num_batches_tracked``
    aside); otherwise a ValueError names the first problem, before any array is converted.
    Only arrays travel: strides, padding, `eps` and `momentum` come from `model`. The arrays are
    copied, so the new model shares no memory with `state_dict`; its random generators (a
    Dropout's) are copies of `model`'s, as `pb.load_state_dict` gives, so drawing from one does not
    advance the other.

    >>> import numpy as np, pullback as pb
    >>> from pullback.nn.torch_interop import load_torch_state_dict
    >>> model = pb.nn.Dense(2, 1)
    >>> load_torch_state_dict(model, {"weight": np.array([[1.0, 2.0]]), "bias": np.array([0.5])}).weight
    array([[1., 2.]], dtype=float32)
    """
    if key_order not in ("given", "natural"):
        raise ValueError(f"key_order must be 'given' or 'natural', not {key_order!r}")
    modules: dict[str, dict[str, np.ndarray]] = {}
    for key, value in state_dict.items():
        prefix, _, name = key.rpartition(".")
        if name != "num_batches_tracked":
            modules.setdefault(prefix, {})[name] = value
    order = list(modules) if key_order == "given" else sorted(modules, key=_natural)
    waiting: dict[frozenset, deque[str]] = {}
    for prefix in order:
        waiting.setdefault(_signature({n: tuple(v.shape) for n, v in modules[prefix].items()}), deque()).append(prefix)
    pairs = []
    for k, layer in enumerate(parameter_layers(model)):
        needs = _torch_names(layer)
        if not needs:  # a layer without arrays (LayerNorm(affine=False)) takes nothing from the state dict
            continue
        queue = waiting.get(_signature({n: shape for n, (_, shape) in needs.items()}))
        if not queue:
            wanted = ", ".join(f"{n} {shape}" for n, (_, shape) in needs.items())
            raise ValueError(
                f"Layer {k} ({layer!r}) needs a PyTorch module with {wanted}, and the state dict has none "
                "(left); the architectures differ."
            )
        pairs.append((layer, needs, queue.popleft()))
    unused = [prefix for prefix in order if any(prefix in queue for queue in waiting.values())]
    if unused:
        names = ", ".join(f"{unused[0]}.{n}" if unused[0] else n for n in modules[unused[0]])
        raise ValueError(f"The state dict has {names}, which no layer of the model takes; the architectures differ.")
    replacements = {}
    for layer, needs, prefix in pairs:
        for name, (field, _) in needs.items():
            current = getattr(layer, field)
            replacements[id(current)] = _from_torch(np.asarray(modules[prefix][name]), current, type(layer), f"{prefix}.{name}")
    replacements |= copies(model)  # new generators (a Dropout's), as pb.load_state_dict gives: ties kept
    return tree.fmap(lambda a: replacements.get(id(a), a), model)


def _torch_names(layer):
    """`{PyTorch parameter name: (field of layer, PyTorch shape)}` for one pullback layer."""
    kind = type(layer)
    if kind in (Conv, ConvTranspose):
        h, w, i, o = layer.weight.shape
        names = {"weight": ("weight", (o, i, h, w))}
    elif kind is BatchNorm:
        names = {"running_mean": ("running_mean", layer.running_mean.shape), "running_var": ("running_var", layer.running_var.shape)}
    else:
        names = {}
    for torch_name, field in (("weight", "weight"), ("weight", "scale"), ("bias", "bias"), ("bias", "shift")):
        value = getattr(layer, field, None)
        if torch_name not in names and value is not None:
            names[torch_name] = (field, value.shape)
    return names


def _signature(shapes):
    return frozenset((name, tuple(shape)) for name, shape in shapes.items())


def _natural(key):
    """Sort key comparing the runs of digits in `key` as numbers: "layer2" < "layer10"."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", key) if part]


def _from_torch(value, like, kind, key):
    if value.dtype.kind != "f" and value.dtype != like.dtype:
        raise ValueError(f"{key} has dtype {value.dtype}; the layer's {like.dtype} takes floating-point arrays only.")
    if kind in (Conv, ConvTranspose) and value.ndim == 4:  # the filter (OIHW to HWIO), not the bias
        value = value.transpose(2, 3, 1, 0)
    return np.array(value, dtype=like.dtype, order="C")  # a copy: the caller's arrays stay the caller's
