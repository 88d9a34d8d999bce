"""Products of a constant `scipy.sparse` matrix or array `A` with a traced dense array, in both modes and at any
order: `A @ x`, `x @ A`, `A.dot(x)`, `A.T @ x`, and `A * x` and `x * A` of a `*_matrix` (a matrix product there),
for every format (csr, csc, coo, bsr, dia, lil, dok) and for complex matrices. `A` is a constant:
its values are not differentiated.

SciPy's `A @ x` asks for `x` as an array; a traced `x` answers so that SciPy returns NotImplemented and Python calls
`x.__rmatmul__(A)` (see `Traced.__array__`). An operation meeting a sparse operand is then served by the rule
`_rule_for` gives it: the products by `sparse_matmul`, SciPy's own `@` (its values are SciPy's, bit for bit), whose
pullback is `A.T @ g` for `A @ x` and `g @ A.T` for `x @ A`, without conjugation, as np.matmul's (see
docs/conventions.md, "Complex numbers"). Other operations with a sparse operand are refused, naming the fix, and so
are NumPy's functions given one (`np.matmul(A, x)`), which NumPy cannot compute.

SciPy is never imported here: a value is sparse only once the user's code has imported scipy.sparse.

>>> import numpy as np, pullback as pb, scipy.sparse as sp
>>> A = sp.csr_array([[1.0, 0.0], [2.0, 3.0]])
>>> pb.gradient(lambda x: np.sum(A @ x), np.ones(2))[0]  # A.T @ [1, 1]
array([3., 3.])
"""

import numpy as np

from .._compat import qualname_of
from .._errors import ufunc_name
from .._extend import frule, primitive, rrule
from .._registry import REVERSE_RULES, SERVED_BY, qualified_name
from .._tangents import Thunk
from .._values import SparseOperands, is_sparse
from . import products, ufuncs  # noqa: F401  (the rules of np.matmul and np.multiply, served here)

_PRODUCTS = "A @ x, x @ A, A.dot(x), A.T @ x, and A * x or x * A of a scipy.sparse *_matrix (a matrix product there)"


@primitive
def sparse_matmul(a, b):
    """`a @ b`, SciPy's product of a scipy.sparse matrix or array and a dense array (one of `a`, `b` each); what
    `A @ x` and `x @ A` run on a value being differentiated.

    >>> import numpy as np, pullback as pb, scipy.sparse as sp
    >>> A = sp.coo_matrix([[0.0, 1.0], [2.0, 0.0]])
    >>> pb.jvp(lambda x: sparse_matmul(x, A), (np.ones(2),), (np.array([1.0, 0.0]),))[1]  # [1, 0] @ A
    array([0., 1.])
    """
    return a @ b


@rrule(sparse_matmul)
def _sparse_matmul_rule(a, b):
    y = sparse_matmul(a, b)
    return y, _back_of_right(a, np.shape(b)) if is_sparse(a) else _back_of_left(np.shape(a), b)


def _back_of_right(A, shape):
    """The pullback of `A @ x`, A sparse, to x: `A.T @ g` (a 1-D A as one row)."""
    _refuse_batches(A)
    if A.ndim == 1:
        row = A.reshape(1, -1)
        return lambda g: (None, Thunk(lambda: np.reshape(sparse_matmul(row.T, np.reshape(g, (1, -1))), shape)))
    return lambda g: (None, Thunk(lambda: sparse_matmul(A.T, g)))


def _back_of_left(shape, A):
    """The pullback of `x @ A`, A sparse, to x: `g @ A.T` (a 1-D A as one column)."""
    _refuse_batches(A)
    if A.ndim == 1:
        column = A.reshape(-1, 1)
        return lambda g: (Thunk(lambda: np.reshape(sparse_matmul(np.reshape(g, (-1, 1)), column.T), shape)), None)
    return lambda g: (Thunk(lambda: sparse_matmul(g, A.T)), None)


def _refuse_batches(A):
    if A.ndim > 2:
        raise TypeError(f"A product with a scipy.sparse {type(A).__name__} of {A.ndim} dimensions: pullback "
                        "differentiates products with 1-D and 2-D sparse matrices; multiply each 2-D slice.")


@frule(sparse_matmul)
def _sparse_matmul_frule(primals, tangents):
    (a, b), (ta, tb) = primals, tangents
    y = sparse_matmul(a, b)
    if is_sparse(a):
        return y, None if tb is None else sparse_matmul(a, tb)
    return y, None if ta is None else sparse_matmul(ta, b)


@primitive
def _sparse_multiply(a, b):
    """`a * b` with a scipy.sparse operand: for a `*_matrix`, SciPy's matrix product; a `*_array` is refused."""
    return a * b


def matrix_product_only(a, b):
    """Raise for `a * b` whose sparse operand is a `*_array` (an elementwise product, sparse), naming the fix."""
    sparse = a if is_sparse(a) else b
    if not _is_spmatrix(sparse):
        kind = type(sparse).__name__
        raise TypeError(
            f"A * x with a scipy.sparse {kind} (a sparse array, not a *_matrix) multiplies elementwise and gives a "
            "sparse result, which pullback does not trace. Write A @ x for the matrix product, or A.toarray() * x for "
            f"the elementwise product (a dense result). pullback differentiates {_PRODUCTS}.")


def _is_spmatrix(x):
    import scipy.sparse  # imported already: `x` is one of its matrices

    return isinstance(x, scipy.sparse.spmatrix)


@rrule(_sparse_multiply)
def _sparse_multiply_rule(a, b):
    matrix_product_only(a, b)
    return _sparse_matmul_rule(a, b)


@frule(_sparse_multiply)
def _sparse_multiply_frule(primals, tangents):
    matrix_product_only(*primals)
    return _sparse_matmul_frule(primals, tangents)


@primitive
def spsolve(A, b, permc_spec=None, use_umfpack=True):
    """`scipy.sparse.linalg.spsolve(A, b)`, differentiable in a dense `b`; `A` is a constant sparse matrix. SciPy's
    own converts `b` with `np.asarray`. The pullback is `spsolve(A.T, g)` (no conjugation, as np.linalg.solve's).

    >>> import numpy as np, pullback as pb, scipy.sparse as sp
    >>> A = sp.csc_array([[2.0, 0.0], [1.0, 4.0]])
    >>> pb.gradient(lambda b: np.sum(spsolve(A, b)), np.ones(2))[0]  # solve(A.T, [1, 1])
    array([0.375, 0.25 ])
    """
    import scipy.sparse.linalg

    return scipy.sparse.linalg.spsolve(A, b, permc_spec, use_umfpack)


@rrule(spsolve)
def _spsolve_rule(A, b, *options):
    if not is_sparse(A):
        raise TypeError("pullback's spsolve takes a constant scipy.sparse matrix A; a dense or traced A: use "
                        "np.linalg.solve(A, b), differentiable in both.")
    transposed = A.T if A.format in ("csr", "csc") else A.T.tocsc()  # SciPy warns of other formats
    shape = np.shape(b)

    def back(g):
        return (None, Thunk(lambda: np.reshape(spsolve(transposed, g, *options), shape))) + (None,) * len(options)

    return spsolve(A, b, *options), back


@frule(spsolve)
def _spsolve_frule(primals, tangents):
    A, b, *options = primals
    y = _spsolve_rule(A, b, *options)[0]
    return y, None if tangents[1] is None else spsolve(A, tangents[1], *options)


_SPARSE_RULES = {REVERSE_RULES[np.matmul]: REVERSE_RULES[sparse_matmul],
                 REVERSE_RULES[np.multiply]: REVERSE_RULES[_sparse_multiply]}


def _rule_for(rule):
    """The rule serving `rule` where an operand is a scipy.sparse matrix or array: the sparse product, the rule
    itself for a `pb.primitive` (it takes what it is given), or one that refuses, naming the fix."""
    sparse_rule = _SPARSE_RULES.get(rule)
    if sparse_rule is not None:
        return sparse_rule
    fn = SERVED_BY.get(rule)
    if getattr(fn, "_pullback_primitive", False):
        return rule

    def refuse(*args, **kwargs):
        raise TypeError(
            f"{_name(rule)} got a scipy.sparse {_sparse_type(args)} as an operand of a value being differentiated, "
            f"which it cannot compute with. pullback differentiates the products {_PRODUCTS}, with A a constant; for "
            "other operations convert the matrix to a dense array first (A.toarray()).")

    return refuse


def _refuse_function(ufunc, args):
    """Raise for a NumPy function (np.matmul, np.dot, np.multiply) called with a scipy.sparse operand: NumPy reads
    the matrix as a 0-d object array, so that its own result is an error or an array of matrices."""
    raise TypeError(
        f"{ufunc_name(ufunc)} got a scipy.sparse {_sparse_type(args)} and a value being differentiated: NumPy's functions "
        "cannot compute with a sparse matrix (NumPy reads it as a 0-d object array). Write the product with SciPy's "
        f"operator or method instead: pullback differentiates {_PRODUCTS}.")


def _name(rule):
    fn = SERVED_BY.get(rule)
    return ufunc_name(fn) if isinstance(fn, np.ufunc) else qualified_name(fn) if fn is not None else "an operation"


def _sparse_type(args):
    return next(type(a).__name__ for a in args if is_sparse(a))


def _conversion_error(x, frame):
    """The error for SciPy's sparse code, running `frame`, converting the traced `x` into a plain array: SciPy
    computing with a sparse matrix whose values are being differentiated, or a sparse operation other than a
    product given a traced operand."""
    where = f"{frame.f_globals.get('__name__')}.{qualname_of(frame)}"
    head = f"SciPy's sparse code ({where}) converts a value being differentiated into a plain NumPy array, so the " \
           "gradient would be lost. "
    owner = frame.f_locals.get("self")
    if frame.f_code.co_name == "dot":  # coo's own dot, which takes n-D operands
        return TypeError(head + f"Write A @ x, the same product for a 1-D or 2-D {type(owner).__name__}, which "
                         f"pullback differentiates (as {_PRODUCTS}).")
    if is_sparse(owner) and any(v is x for v in getattr(owner, "__dict__", {}).values()):
        return TypeError(
            head + f"It is a value of the scipy.sparse {type(owner).__name__} itself: pullback differentiates "
            "products with a constant sparse matrix, not with respect to its values. Pass the values as a dense "
            "array and compute with them: with C = A.tocoo() and values = C.data an argument of f, A @ x is "
            "np.bincount(C.row, weights=values * x[C.col], minlength=A.shape[0]), differentiable in values and x; "
            "or differentiate the dense matrix, A.toarray().")
    return TypeError(
        head + f"pullback differentiates the products {_PRODUCTS}, with A a constant. A * x of a sparse *_array "
        "multiplies elementwise: write A.toarray() * x (or A @ x for the matrix product). Other sparse operations "
        "need a dense operand (A.toarray()) or a stand-in of your own (pb.primitive with pb.rrule).")


SparseOperands.rule_for = _rule_for
SparseOperands.refuse_function = _refuse_function
SparseOperands.conversion_error = _conversion_error
