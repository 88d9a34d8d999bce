"""Rules for products of arrays, in both modes: matmul (and the `@` operator), dot, vdot, inner,
outer, tensordot, einsum (with diagonals and the sublist form), kron, cross, the vector gufuncs
vecdot, matvec and vecmat, numpy.linalg's array-API names, and the chains multi_dot and matrix_power.

Each product is linear in every operand, so its forward rule is the product rule:
d(a b) = da b + a db.
"""

import string

import numpy as np

from .._arrays import axis_index, size_of
from .._extend import primitive, rrule
from .._inplace import concrete_of, element_positions, mark_view, plain_of, write_out
from .._tangents import Thunk
from .._values import Traced, stop_gradient
from ._register import add_tangents, as_array, bilinear_forward, composite, forward_rule, rule, with_numpy_value
from .indexing import unindex


def _known_shape(a):
    """`a`'s shape for checking a call's shapes on empty arrays: a length Dask does not know yet (NaN, as after a
    boolean mask) as 1, which broadcasts against any."""
    return tuple(n if n == n else 1 for n in np.shape(a))


def _swap(a):
    return np.swapaxes(a, -1, -2)


# (new axes by indexing, `g[..., None]`, not np.expand_dims: Dask reshapes for that, which fails on a length
# it does not know yet, as after a boolean mask)
def _matmul_da(g, a, b):
    if np.ndim(b) == 1:
        return g[..., None] * b if np.ndim(a) > 1 else g * b
    if np.ndim(a) == 1:
        return (g[..., None, :] @ _swap(b))[..., 0, :]
    return g @ _swap(b)


def _matmul_db(g, a, b):
    if np.ndim(a) == 1:
        return a[..., None] * g[..., None, :] if np.ndim(b) > 1 else g * a
    if np.ndim(b) == 1:
        return (_swap(a) @ g[..., None])[..., 0]
    return _swap(a) @ g


_MATMUL_NOTES = "Batched and 1-D operands as in NumPy; also the `@` operator."


@rule(np.matmul, *([np.linalg.matmul] if hasattr(np.linalg, "matmul") else []), args="x1, x2",
      notes=_MATMUL_NOTES)
def matmul_rule(a, b):
    y = np.matmul(a, b)
    return y, lambda g: (Thunk(lambda: _matmul_da(g, a, b)), Thunk(lambda: _matmul_db(g, a, b)))


_matmul_forward = bilinear_forward(np.matmul)
if hasattr(np.linalg, "matmul"):  # the same rule, computing with np.matmul, which every array library has
    forward_rule(np.linalg.matmul)(_matmul_forward)


@composite(np.dot, args="a, b", notes="As matmul (or a product with a scalar, or tensordot for N-D `b`).")
def dot(a, b, out=None):
    if out is not None:  # computed, then written into out (NumPy's dot demands its dtype and a C-contiguous out)
        return write_out("numpy.dot", out, dot(a, b), lambda buffer: np.dot(plain_of(a), plain_of(b), out=buffer),
                         contiguous=True)
    if np.ndim(a) == 0 or np.ndim(b) == 0:  # NumPy's dtype: np.dot reads a Python number as an array (not weak)
        return with_numpy_value(np.multiply(a, b), np.dot, a, b)
    if np.ndim(a) == 1 and np.ndim(b) == 1:
        return with_numpy_value(np.matmul(a, b), np.dot, a, b)  # matmul adds up a vector product in another order
    if np.ndim(a) <= 2 and np.ndim(b) <= 2:  # matmul rounds as dot does unless an operand is strided in both orders
        product = np.matmul(a, b)
        return product if _contiguous(a) and _contiguous(b) else with_numpy_value(product, np.dot, a, b)
    # an N-D operand: NumPy makes one product of reshaped arrays, which rounds differently
    product = np.matmul(a, b) if np.ndim(b) <= 2 else np.tensordot(a, b, axes=([-1], [-2]))
    return with_numpy_value(product, np.dot, a, b)


def _contiguous(v):
    """Whether the plain value of `v` is C- or F-contiguous (a `pb.jit` stand-in or a Dask array counts as one)."""
    plain = stop_gradient(v)
    return not isinstance(plain, np.ndarray) or plain.flags.c_contiguous or plain.flags.f_contiguous


def _tensordot_axes(axes, nda, ndb):
    if isinstance(axes, (int, np.integer)):
        return list(range(nda - axes, nda)), list(range(axes))
    axes_a, axes_b = axes
    axes_a = [axes_a] if isinstance(axes_a, (int, np.integer)) else list(axes_a)
    axes_b = [axes_b] if isinstance(axes_b, (int, np.integer)) else list(axes_b)
    return [axis_index(k, nda) for k in axes_a], [axis_index(k, ndb) for k in axes_b]


@rule(np.tensordot, args="a, b")
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
        return np.transpose(r, tuple(int(k) for k in np.argsort(free_a + paired)))  # Dask takes no array of axes

    def grad_b(g):
        r = np.tensordot(g, a, (g_a_part, free_a))
        paired = [axes_b[axes_a.index(k)] for k in sorted(axes_a)]
        return np.transpose(r, tuple(int(k) for k in np.argsort(free_b + paired)))

    return y, lambda g: (Thunk(lambda: grad_a(g)), Thunk(lambda: grad_b(g)))


bilinear_forward(np.tensordot)


@rule(np.outer, args="a, b", notes="Inputs of any shape are flattened, as in NumPy.")
def outer_rule(a, b, out=None):
    if out is not None:
        raise TypeError("numpy.outer: out= is not supported on tracked values; drop out= and assign the result "
                        "instead (y = np.outer(a, b)), or write it into an existing array (z[...] = np.outer(a, b)).")
    y = np.outer(a, b)
    shape_a, shape_b = np.shape(a), np.shape(b)
    return y, lambda g: (
        Thunk(lambda: np.reshape(g @ np.ravel(b), shape_a)),
        Thunk(lambda: np.reshape(np.ravel(a) @ g, shape_b)),
    )


bilinear_forward(np.outer)


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
    return terms, output


def _diagonals(term, operand):
    """`operand` with each index repeated in `term` reduced to one (by np.diagonal), and its new term."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        first = term.index(c)
        second = term.index(c, first + 1)
        operand = np.diagonal(operand, 0, first, second)
        term = "".join(x for k, x in enumerate(term) if k not in (first, second)) + c
    return term, operand


def _sublist_subscripts(operands):
    """The interleaved form `einsum(a, [0, 1], b, [1, 2], [0, 2])` as a subscripts string and operands."""
    operands = list(operands)
    output = operands.pop() if len(operands) % 2 else None

    def letters(sublist):
        return "".join("..." if k is Ellipsis else string.ascii_letters[k] for k in sublist)

    terms = ",".join(letters(s) for s in operands[1::2])
    return terms + ("" if output is None else "->" + letters(output)), operands[0::2]


@primitive
def contract(subscripts, *operands, optimize=False):
    """`np.einsum(subscripts, *operands)` with explicit subscripts, each operand a positional argument."""
    return np.einsum(subscripts, *operands, optimize=optimize)


@rrule(contract)
def _einsum_rule(subscripts, *operands, optimize=False):
    y = contract(subscripts, *operands, optimize=optimize)
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


@forward_rule(contract)
def _einsum_frule(primals, tangents, optimize=False):
    subscripts, operands = primals[0], primals[1:]
    y = contract(subscripts, *operands, optimize=optimize)
    dot = None
    for k, t in enumerate(tangents[1:]):
        if t is not None:
            replaced = list(operands)
            replaced[k] = t
            dot = add_tangents(dot, np.einsum(subscripts, *replaced, optimize=optimize))
    return y, dot


@primitive
def einsum_view(subscripts, operand, optimize=False):
    """`np.einsum(subscripts, operand)` where NumPy returns a view of the operand (a diagonal,
    'ii->i', or a transpose): a write into the result reaches the operand, as in NumPy."""
    return np.einsum(subscripts, operand, optimize=optimize)


@rrule(einsum_view)
def _einsum_view_rule(subscripts, operand, optimize=False):
    y = einsum_view(subscripts, operand, optimize=optimize)
    positions = np.ravel(element_positions(concrete_of(y), concrete_of(operand)))  # where each element sits in the operand
    shape = np.shape(operand)

    def back(g):
        return None, Thunk(lambda: np.reshape(unindex(np.ravel(g), positions, (int(np.prod(shape)),)), shape))

    return y, back


@forward_rule(einsum_view)
def _einsum_view_frule(primals, tangents, optimize=False):
    (subscripts, operand), (_, t) = primals, tangents
    y = einsum_view(subscripts, operand, optimize=optimize)
    return y, None if t is None else np.einsum(subscripts, t, optimize=optimize).copy()


@composite(np.einsum, args="*operands", notes="""A subscripts string and operands, or the interleaved
           operand/sublist form; an index repeated within one operand takes its diagonal ('ii->i',
           'ii', 'iij,jk->ik'). Where NumPy returns a view of a single operand ('ii->i', 'ij->ji'), so
           does pullback: writes into it reach the operand.""")
def einsum(*operands, out=None, optimize=False, **kwargs):
    if kwargs:
        raise TypeError(f"numpy.einsum: {', '.join(f'{k}=' for k in kwargs)} is not supported on tracked values; drop "
                        "it and convert the result instead (np.einsum(...).astype(dtype)).")
    if out is not None:  # computed, then written into out
        plain_operands = [plain_of(v) for v in operands]
        return write_out("numpy.einsum", out, einsum(*operands, optimize=optimize),
                         lambda buffer: np.einsum(*plain_operands, out=buffer, optimize=optimize))
    if isinstance(operands[0], str):
        subscripts, arrays = operands[0], list(operands[1:])
    else:
        subscripts, arrays = _sublist_subscripts(operands)
    np.einsum(subscripts, *(np.empty(_known_shape(a), dtype=bool) for a in arrays))  # NumPy checks the subscripts
    if len(arrays) == 1 and type(concrete_of(arrays[0])) is np.ndarray:
        plain = concrete_of(arrays[0])
        if np.may_share_memory(np.einsum(subscripts, plain, optimize=optimize), plain):
            view = einsum_view(subscripts, arrays[0], optimize=optimize)
            if isinstance(view, Traced) and isinstance(arrays[0], Traced):
                mark_view(view, arrays[0])
            return view
    terms, output = _parse_einsum(subscripts, [np.shape(a) for a in arrays])
    pairs = [_diagonals(t, a) for t, a in zip(terms, arrays)]
    explicit = ",".join(t for t, _ in pairs) + "->" + output
    return contract(explicit, *(a for _, a in pairs), optimize=optimize)


@composite(np.kron, args="a, b", numpy_value=True, notes="Written as a broadcast product and a reshape.")
def kron(a, b):
    nd = max(np.ndim(a), np.ndim(b))
    sa = (1,) * (nd - np.ndim(a)) + np.shape(a)
    sb = (1,) * (nd - np.ndim(b)) + np.shape(b)
    spread_a = tuple(n for k in sa for n in (k, 1))
    spread_b = tuple(n for k in sb for n in (1, k))
    product = np.reshape(a, spread_a) * np.reshape(b, spread_b)
    return np.reshape(product, tuple(m * n for m, n in zip(sa, sb)))


@composite(np.inner, args="a, b", numpy_value=True, notes="`np.tensordot` over the last axes.")
def inner(a, b):
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return a * b
    return np.tensordot(a, b, axes=([-1], [-1]))


@composite(np.vdot, args="a, b", numpy_value=True, notes="Conjugates its first argument when it is complex, as NumPy does.")
def vdot(a, b):
    if size_of(a) != size_of(b):
        raise ValueError("cannot reshape array: vdot needs arrays of the same size")
    return np.sum(np.ravel(np.conjugate(a) if np.iscomplexobj(a) else a) * np.ravel(b))


@composite(np.linalg.matrix_power, args="a", notes="Repeated squaring with matmul; negative powers through inv.")
def matrix_power(a, n):
    if not isinstance(n, (int, np.integer)):
        raise TypeError("exponent must be an integer")
    shape = np.shape(a)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        np.linalg.matrix_power(stop_gradient(a), n)  # NumPy's own LinAlgError
    if n == 0:
        plain = stop_gradient(a)
        return np.broadcast_to(np.eye(np.shape(plain)[-1], dtype=plain.dtype), np.shape(plain)).copy()
    if n < 0:
        a, n = np.linalg.inv(a), -n
    if n == 3:  # NumPy's order for a cube
        return (a @ a) @ a
    result = None
    while n:
        if n & 1:
            result = a if result is None else result @ a
        n >>= 1
        if n:
            a = a @ a
    return np.copy(result)


@composite(np.linalg.multi_dot, args="arrays", numpy_value=True,
           notes="A chain of matmul, left to right (the value is NumPy's, which picks the cheapest order).")
def multi_dot(arrays, *, out=None):
    if out is not None:
        raise TypeError("numpy.linalg.multi_dot: out= is not supported on tracked values; drop out= and assign the "
                        "result instead (y = np.linalg.multi_dot(arrays)), or write it into an existing array "
                        "(z[...] = np.linalg.multi_dot(arrays)).")
    arrays = list(arrays)
    if len(arrays) < 2:
        raise ValueError("Expecting at least two arrays.")
    result = arrays[0]
    for m in arrays[1:]:
        result = result @ m
    return result


# --- the vector products of NumPy 2 (gufuncs) and numpy.linalg's array-API names -------------------
_GUFUNC_NOTES = "A complex x1 is conjugated, as in NumPy; the `axes=`/`axis=` keywords are not supported on tracked values."


@rule(np.vecdot, args="x1, x2", notes=_GUFUNC_NOTES)
def vecdot_rule(a, b):
    y = np.vecdot(a, b)  # sum(conj(a) * b): NumPy conjugates a complex x1
    if np.iscomplexobj(a):
        return y, lambda g: (Thunk(lambda: np.conjugate(g[..., None] * b)), Thunk(lambda: g[..., None] * np.conjugate(a)))
    return y, lambda g: (Thunk(lambda: g[..., None] * b), Thunk(lambda: g[..., None] * a))


@rule(np.matvec, args="x1, x2", notes="The `axes=`/`axis=` keywords are not supported on tracked values.")
def matvec_rule(a, x):
    y = np.matvec(a, x)
    return y, lambda g: (Thunk(lambda: g[..., :, None] * x[..., None, :]), Thunk(lambda: np.sum(a * g[..., :, None], -2)))


@rule(np.vecmat, args="x1, x2", notes=_GUFUNC_NOTES)
def vecmat_rule(x, a):
    y = np.vecmat(x, a)  # conj(x) @ a: NumPy conjugates a complex x1
    if np.iscomplexobj(x):
        return y, lambda g: (Thunk(lambda: np.conjugate(np.sum(a * g[..., None, :], -1))),
                             Thunk(lambda: np.conjugate(x)[..., :, None] * g[..., None, :]))
    return y, lambda g: (Thunk(lambda: np.sum(a * g[..., None, :], -1)), Thunk(lambda: x[..., :, None] * g[..., None, :]))


for _fn in (np.vecdot, np.matvec, np.vecmat):
    bilinear_forward(_fn)


@composite(np.linalg.vecdot, args="x1, x2", numpy_value=True, notes="Products summed along `axis`.")
def linalg_vecdot(x1, x2, /, *, axis=-1):
    np.linalg.vecdot(np.empty(_known_shape(x1)), np.empty(_known_shape(x2)), axis=axis)  # NumPy checks the shapes
    x1 = np.conjugate(x1) if np.iscomplexobj(x1) else x1  # as NumPy does
    return np.sum(np.moveaxis(x1, axis, -1) * np.moveaxis(x2, axis, -1), axis=-1)


@composite(np.linalg.outer, args="x1, x2", notes="1-D vectors only, as in numpy.linalg.")
def linalg_outer(x1, x2, /):
    if np.ndim(x1) != 1 or np.ndim(x2) != 1:
        raise ValueError("Input arrays must be one-dimensional")
    return np.outer(x1, x2)


@composite(np.linalg.tensordot, args="x1, x2")
def linalg_tensordot(x1, x2, /, *, axes=2):
    return np.tensordot(x1, x2, axes)


def _cross_last(a, b):
    """The cross product of the last axes (length 2 or 3 each), broadcast over the others."""
    def part(v, k):
        return v[..., k] if k < np.shape(v)[-1] else None

    a0, a1, a2 = (part(a, k) for k in range(3))
    b0, b1, b2 = (part(b, k) for k in range(3))
    if a2 is None and b2 is None:
        return a0 * b1 - a1 * b0
    zero = 0.0
    a2 = zero if a2 is None else a2
    b2 = zero if b2 is None else b2
    return np.stack(np.broadcast_arrays(a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0), axis=-1)


@composite(np.cross, args="a, b", numpy_value=True, notes="Vectors of length 2 or 3, every `axisa`, `axisb`, `axisc` and `axis`.")
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    # NumPy's checks, shape and dtype (under pb.jit, of its stand-ins: no conversion)
    plain = np.cross(stop_gradient(as_array(a)), stop_gradient(as_array(b)), axisa, axisb, axisc, axis)
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = np.moveaxis(a, axisa, -1), np.moveaxis(b, axisb, -1)
    y = _cross_last(a, b)
    if 3 in (np.shape(a)[-1], np.shape(b)[-1]):  # a vector result: its components go to axisc
        y = np.moveaxis(y, -1, axisc)
    y = np.reshape(y, np.shape(plain))
    return y if y.dtype == plain.dtype else y.astype(plain.dtype)


@composite(np.linalg.cross, args="x1, x2", numpy_value=True, notes="3-vectors along `axis`, as in numpy.linalg.")
def linalg_cross(x1, x2, /, *, axis=-1):
    np.linalg.cross(np.empty(_known_shape(x1)), np.empty(_known_shape(x2)), axis=axis)  # NumPy checks the shapes
    return cross(x1, x2, axis=axis)
