"""What the optimisers and `destructure` share: what a parameter is, the children of a gradient
or state node, and how places and values are named in messages. Every walk over a model is one
call into `pb.tree`; places are `tree.Path`s, printed from the root `model`."""

import numpy as np

from .. import tree
from .._arrays import dtype_kind, speaks_array_api_only, speaks_nep18, type_name
from .._jit_trace import Symbol
from .._values import stop_gradient  # the plain value itself (the public one hands out a read-only copy)

ROOT = "model"  # how messages name the model: model.layers[0].weight, model['w']


def is_param(x):
    """True for a float or complex array (NumPy's, or a library's that NumPy dispatches to, such as CuPy's):
    the only kinds of leaf an optimiser trains. A float array that only speaks the array API (array_api_strict's)
    gets a gradient but cannot be updated with NumPy calls, so it is refused rather than left untrained."""
    if speaks_array_api_only(type(x)) and dtype_kind(x) in "fc":
        raise TypeError(
            f"pb.optim trains NumPy arrays and arrays that NumPy functions dispatch to (CuPy, Dask), not "
            f"{type_name(x)}, which only speaks the array API. Keep the model's parameters as NumPy arrays "
            "(np.from_dlpack(x)) and convert them where the other library needs them, or update them yourself "
            "from pb.gradient's result."
        )
    return (isinstance(x, np.ndarray) or speaks_nep18(type(x))) and x.dtype.kind in "fc"


def is_array(x):
    """True for a NumPy array or an array of a library NumPy dispatches to (CuPy, Dask)."""
    return isinstance(x, np.ndarray) or speaks_nep18(type(x))


def is_traced_param(x):
    """True for a float array, plain, being differentiated (a traced value wrapping one) or a `pb.jit`
    stand-in for one: what `destructure` flattens."""
    x = stop_gradient(x)
    return isinstance(x, (np.ndarray, Symbol)) and x.dtype.kind == "f"


def nothing(*args):
    """A walk callback with no result (cycles, frozen fields, nodes whose result is not needed)."""
    return None


def entries(node):
    """The children of a gradient or state node as a dict: a `Tangent`'s entries, a container's children."""
    return tree.children(node)  # a Tangent's entries too (a field may be named `items`)


def name(path, root=ROOT):
    """`path` (a `tree.Path`, or a tuple of its steps) as messages print it: `model.layers[0].weight`."""
    return tree.Path(path).format(root)


def describe(x):
    """A short description of a value for error messages."""
    if is_array(x):
        return f"an array of dtype {x.dtype} and shape {x.shape}"
    if x is None:
        return "None"
    return f"a {type(x).__name__}"
