"""Rules for products: matmul, dot, tensordot, outer and einsum."""

import string

import numpy as np

from .._registry import FUNCTIONS
from .._tangents import Thunk
from .._trace import apply
from ._register import function_rule, implements, ufunc_rule


def _swap(a):
    return np.swapaxes(a, -1, -2)


def _matmul_da(g, a, b):
    if np.ndim(b) == 1:
        return np.expand_dims(g, -1) * b if np.ndim(a) > 1 else g * b
    if np.ndim(a) == 1:
        return np.squeeze(np.expand_dims(g, -2) @ _swap(b), -2)
    return g @ _swap(b)


def _matmul_db(g, a, b):
    if np.ndim(a) == 1:
        return np.expand_dims(a, -1) * np.expand_dims(g, -2) if np.ndim(b) > 1 else g * a
    if np.ndim(b) == 1:
        return np.squeeze(_swap(a) @ np.expand_dims(g, -1), -1)
    return _swap(a) @ g


@ufunc_rule(np.matmul)  # np.matmul(a, b) and `plain @ tracked` arrive as a ufunc call
@function_rule(np.matmul)  # `tracked @ b` comes straight here
def matmul_rule(a, b):
    y = np.matmul(a, b)
    return y, lambda g: (Thunk(lambda: _matmul_da(g, a, b)), Thunk(lambda: _matmul_db(g, a, b)))


@implements(np.dot)
def dot(a, b, out=None):
    if out is not None:
        raise TypeError("numpy.dot(..., out=...) is not supported on tracked values")
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return np.multiply(a, b)
    if np.ndim(b) <= 2:
        return np.matmul(a, b)
    return np.tensordot(a, b, axes=([-1], [-2]))


def _tensordot_axes(axes, nda, ndb):
    if isinstance(axes, (int, np.integer)):
        return list(range(nda - axes, nda)), list(range(axes))
    axes_a, axes_b = axes
    axes_a = [axes_a] if isinstance(axes_a, (int, np.integer)) else list(axes_a)
    axes_b = [axes_b] if isinstance(axes_b, (int, np.integer)) else list(axes_b)
    return [k % nda for k in axes_a], [k % ndb for k in axes_b]


@function_rule(np.tensordot)
def tensordot_rule(a, b, axes=2):
    axes_a, axes_b = _tensordot_axes(axes, np.ndim(a), np.ndim(b))
    y = np.tensordot(a, b, (axes_a, axes_b))
    free_a = [k for k in range(np.ndim(a)) if k not in axes_a]
    free_b = [k for k in range(np.ndim(b)) if k not in axes_b]
    g_a_part = list(range(len(free_a)))
    g_b_part = list(range(len(free_a), len(free_a) + len(free_b)))

    def grad_a(g):
        # Contract g with b over b's free axes; what is left of b pairs with a's contracted axes.
        r = np.tensordot(g, b, (g_b_part, free_b))
        paired = [axes_a[axes_b.index(k)] for k in sorted(axes_b)]
        return np.transpose(r, np.argsort(free_a + paired))

    def grad_b(g):
        r = np.tensordot(g, a, (g_a_part, free_a))
        paired = [axes_b[axes_a.index(k)] for k in sorted(axes_a)]
        return np.transpose(r, np.argsort(free_b + paired))

    return y, lambda g: (Thunk(lambda: grad_a(g)), Thunk(lambda: grad_b(g)))


@function_rule(np.outer)
def outer_rule(a, b, out=None):
    y = np.outer(a, b)
    shape_a, shape_b = np.shape(a), np.shape(b)
    return y, lambda g: (
        Thunk(lambda: np.reshape(g @ np.ravel(b), shape_a)),
        Thunk(lambda: np.reshape(np.ravel(a) @ g, shape_b)),
    )


def _parse_einsum(subscripts, shapes):
    """Explicit subscripts for each operand and the output, with `...` spelled out in letters."""
    subscripts = subscripts.replace(" ", "")
    inputs, arrow, output = subscripts.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum subscripts {subscripts!r} name {len(terms)} operands, got {len(shapes)}")
    used = set(subscripts) - set(".,->")
    spare = [c for c in string.ascii_letters if c not in used]
    widths = [len(shape) - len(t.replace("...", "")) for t, shape in zip(terms, shapes)]
    width = max([w for t, w in zip(terms, widths) if "..." in t], default=0)
    ellipsis = "".join(spare[:width])
    terms = [t.replace("...", ellipsis[width - w:]) for t, w in zip(terms, widths)]
    if not arrow:
        counts = {c: "".join(terms).count(c) for c in "".join(terms)}
        output = ellipsis + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ellipsis))
    else:
        output = output.replace("...", ellipsis)
    for t in terms:
        if len(set(t)) != len(t):
            raise NotImplementedError(
                f"einsum with a repeated index inside one operand ({t!r}, a diagonal) has no rule yet; "
                "take np.diagonal first."
            )
    return terms, output


def _einsum_rule(subscripts, *operands, optimize=False):
    y = np.einsum(subscripts, *operands, optimize=optimize)
    terms, output = _parse_einsum(subscripts, [np.shape(op) for op in operands])

    def grad(k, g):
        others = terms[:k] + terms[k + 1:] + [output]
        arrays = list(operands[:k]) + list(operands[k + 1:]) + [g]
        present = set("".join(others))
        kept = "".join(c for c in terms[k] if c in present)
        r = np.einsum(",".join(others) + "->" + kept, *arrays, optimize=optimize)
        if kept != terms[k]:  # an index summed in operand k alone: broadcast back over it
            shape = np.shape(operands[k])
            r = np.broadcast_to(np.reshape(r, [n if c in present else 1 for c, n in zip(terms[k], shape)]), shape)
        return r

    return y, lambda g: (None,) + tuple(Thunk(lambda k=k: grad(k, g)) for k in range(len(operands)))


@implements(np.einsum)
def einsum(*operands, out=None, optimize=False, **kwargs):
    if out is not None or kwargs or not isinstance(operands[0], str):
        raise TypeError(
            "numpy.einsum on tracked values takes a subscripts string and operands "
            "(out=, dtype= and the interleaved operand/sublist form are not supported)"
        )
    return apply(_einsum_rule, operands, {"optimize": optimize})


if hasattr(np.linalg, "matmul"):
    FUNCTIONS[np.linalg.matmul] = FUNCTIONS[np.matmul]
