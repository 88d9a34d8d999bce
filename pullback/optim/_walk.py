"""Small helpers shared by the optimisers, `destructure` and checkpoints: what a parameter is,
how a place inside a model is named, and how to walk a state tree."""

import numpy as np

from .. import tree
from .._tangents import Tangent
from .._trace import stop_gradient


def is_param(x):
    """True for a float NumPy array: the only kind of leaf an optimiser trains."""
    return isinstance(x, np.ndarray) and x.dtype.kind == "f"


def is_traced_param(x):
    """True for a float array, plain or being differentiated (a traced value wrapping one)."""
    return is_param(stop_gradient(x))


def join(path, container, key):
    """The name of child `key` of `container` at `path`: `path.name` for fields, `path[key]` otherwise."""
    is_sequence_or_dict = isinstance(container, (list, dict)) or (
        isinstance(container, tuple) and not hasattr(type(container), "_fields")
    )
    if not is_sequence_or_dict and isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def mirror_node(x, kids):
    """A node of a tree shaped like a gradient of `x`, holding `kids` (the way `pb.gradient` mirrors `x`)."""
    cls = type(x)
    if cls is tuple or cls is list:
        return cls(kids.values())
    if isinstance(x, tuple):
        return cls(*kids.values())
    if isinstance(x, dict):
        return dict(kids)
    return Tangent._make(cls, kids)


def node_children(node):
    """The children of a node of a state (or gradient) tree as a dict; `{}` for anything else."""
    if isinstance(node, Tangent):
        return dict(node.items())
    cls = type(node)
    if cls is tuple or cls is list:
        return dict(enumerate(node))
    if isinstance(node, tuple) and hasattr(cls, "_fields"):
        return dict(zip(cls._fields, node))
    if isinstance(node, dict):
        return dict(node)
    return {}


def rebuild_node(node, kids):
    """`node` (a state or gradient tree node) with new children."""
    if isinstance(node, Tangent):
        return Tangent._make(node.primal_type, kids)
    cls = type(node)
    if cls is tuple or cls is list:
        return cls(kids.values())
    if isinstance(node, tuple):
        return cls(*kids.values())
    return dict(kids)


def model_children(x):
    """The children of a model node (everything, trainable or not) and the set of trainable names (None: all)."""
    kind = tree.kind_of(x)
    if kind is None:
        return {}, None
    return kind.children(x), tree.trainable_names(x)


def describe(x):
    """A short description of a value for error messages."""
    if isinstance(x, np.ndarray):
        return f"an array of dtype {x.dtype} and shape {x.shape}"
    if x is None:
        return "None"
    return f"a {type(x).__name__}"
