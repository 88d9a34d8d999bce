"""Forward rules for the operations in reductions, shape, indexing and linalg.

Each frule takes `(primals, tangents, **kwargs)`, where `tangents[k]` is None for an
argument that carries no tangent, and returns `(y, y_dot)`. They are written apart from
the reverse rules, so the dot-product test `<J v, u> == <v, J^T u>` checks one against
the other. (Elementwise ufuncs share one table of local derivatives; see ufuncs.py.)
"""

import numpy as np

from .._registry import FORWARD_RULES, FUNCTIONS
from .._trace import _astype, _getitem, _index_update
from . import indexing, linalg, reductions, shape, ufuncs


def forward_rule(*rules):
    def register(frule):
        for rule in rules:
            FORWARD_RULES[rule] = frule
        return frule

    return register


def _add(a, b):
    """Sum of two tangents where None is zero."""
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _or_zeros(t, primal):
    return np.zeros_like(primal) if t is None else t


def linear_in_first(rule, fn):
    """`fn` is linear in its first argument: the tangent goes through `fn` unchanged."""

    def frule(primals, tangents, **kwargs):
        y = fn(*primals, **kwargs)
        t = tangents[0]
        return y, None if t is None else fn(t, *primals[1:], **kwargs)

    FORWARD_RULES[rule] = frule


for _rule, _fn in (
    (reductions.sum_rule, np.sum), (reductions.mean_rule, np.mean),
    (shape.reshape_rule, np.reshape), (shape.ravel_rule, np.ravel), (shape.transpose_rule, np.transpose),
    (shape.swapaxes_rule, np.swapaxes), (shape.moveaxis_rule, np.moveaxis),
    (shape.expand_dims_rule, np.expand_dims), (shape.squeeze_rule, np.squeeze),
    (shape.broadcast_to_rule, np.broadcast_to), (shape.copy_rule, np.copy),
    (indexing.getitem_rule, _getitem), (indexing.unindex_rule, indexing.unindex),
):
    linear_in_first(_rule, _fn)


@forward_rule(shape.astype_rule)
def astype_frule(primals, tangents):
    x, dtype = primals
    y = FUNCTIONS[_astype](x, dtype)
    return y, None if tangents[0] is None else FUNCTIONS[_astype](tangents[0], dtype)


@forward_rule(ufuncs.add_rule)
def add_frule(primals, tangents):
    a, b = primals
    return a + b, _add(tangents[0], tangents[1])


@forward_rule(ufuncs.subtract_rule)
def subtract_frule(primals, tangents):
    a, b = primals
    ta, tb = tangents
    return a - b, _add(ta, None if tb is None else -tb)


def _extreme_frule(reduce):
    def frule(primals, tangents, axis=None, out=None, keepdims=False, initial=None, where=True):
        (x,), (t,) = primals, tangents
        kept = reduce(x, axis=axis, keepdims=True)
        y = kept if keepdims else np.reshape(kept, np.shape(reduce(np.zeros(np.shape(x)), axis=axis)))
        if t is None:
            return y, None
        hit = x == kept  # ties share the tangent equally, matching the reverse subgradient
        dot = np.sum(np.where(hit, t, 0.0), axis=axis, keepdims=True) / np.sum(hit, axis=axis, keepdims=True)
        return y, dot if keepdims else np.reshape(dot, np.shape(y))

    return frule


FORWARD_RULES[reductions.max_rule] = _extreme_frule(np.max)
FORWARD_RULES[reductions.min_rule] = _extreme_frule(np.min)


@forward_rule(reductions.prod_rule)
def prod_frule(primals, tangents, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    (x,), (t,) = primals, tangents
    y = np.prod(x, axis=axis, dtype=dtype, keepdims=keepdims)
    if t is None:
        return y, None
    return y, np.sum(t * reductions.product_of_others(x, axis), axis=axis, keepdims=keepdims)


@forward_rule(shape._concatenate_rule)
def concatenate_frule(primals, tangents, axis=0):
    y = np.concatenate(primals, axis=axis) if axis is not None else np.concatenate([np.ravel(p) for p in primals])
    if all(t is None for t in tangents):
        return y, None
    parts = [_or_zeros(t, p) for t, p in zip(tangents, primals)]
    return y, np.concatenate(parts, axis=axis) if axis is not None else np.concatenate([np.ravel(p) for p in parts])


@forward_rule(shape._stack_rule)
def stack_frule(primals, tangents, axis=0):
    y = np.stack(primals, axis=axis)
    if all(t is None for t in tangents):
        return y, None
    return y, np.stack([_or_zeros(t, p) for t, p in zip(tangents, primals)], axis=axis)


@forward_rule(indexing.index_update_rule)
def index_update_frule(primals, tangents):
    x, index, value = primals
    tx, _, tv = tangents
    y = FUNCTIONS[_index_update](x, index, value)
    if tx is None and tv is None:
        return y, None
    return y, FUNCTIONS[_index_update](_or_zeros(tx, x), index, 0.0 if tv is None else tv)


@forward_rule(indexing.where_rule)
def where_frule(primals, tangents):
    condition, a, b = primals
    _, ta, tb = tangents
    y = np.where(condition, a, b)
    if ta is None and tb is None:
        return y, None
    return y, np.where(condition, 0.0 if ta is None else ta, 0.0 if tb is None else tb)


@forward_rule(indexing.clip_rule)
def clip_frule(primals, tangents):
    x, low, high = primals
    tx, tlow, thigh = tangents
    y = np.clip(x, low, high)
    # np.clip is min(max(x, low), high): `high` wins wherever it binds, even when low > high.
    below = False if low is None else x < low
    if high is None:
        above = False
    else:
        above = x > high if low is None else np.where(below, low > high, x > high)
    dot = None if tx is None else np.where(np.logical_or(below, above), 0.0, tx)
    if tlow is not None:
        dot = _add(dot, np.where(np.logical_and(below, np.logical_not(above)), tlow, 0.0))
    if thigh is not None:
        dot = _add(dot, np.where(above, thigh, 0.0))
    return y, dot


def _bilinear(fn):
    """Forward rule of a map linear in each of its two arguments: d(a*b) = da*b + a*db."""

    def frule(primals, tangents, **kwargs):
        a, b = primals[:2]
        ta, tb = tangents[:2]
        y = fn(a, b, **kwargs)
        return y, _add(None if ta is None else fn(ta, b, **kwargs), None if tb is None else fn(a, tb, **kwargs))

    return frule


FORWARD_RULES[linalg.matmul_rule] = _bilinear(np.matmul)
FORWARD_RULES[linalg.tensordot_rule] = _bilinear(np.tensordot)
FORWARD_RULES[linalg.outer_rule] = _bilinear(np.outer)


@forward_rule(linalg._einsum_rule)
def einsum_frule(primals, tangents, optimize=False):
    subscripts, operands = primals[0], primals[1:]
    y = np.einsum(subscripts, *operands, optimize=optimize)
    dot = None
    for k, t in enumerate(tangents[1:]):
        if t is not None:
            replaced = list(operands)
            replaced[k] = t
            dot = _add(dot, np.einsum(subscripts, *replaced, optimize=optimize))
    return y, dot
