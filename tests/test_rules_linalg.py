"""matmul, dot, tensordot, outer and einsum against central differences, for every ndim combination."""

import functools
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
import fd
from fd import assert_gradient

SETTINGS = settings(max_examples=25, deadline=None)
dtypes = st.sampled_from([np.float64, np.float32])
seeds = st.integers(0, 2**32 - 1)
sides = st.integers(1, 4)


tolerance = functools.partial(fd.tolerance, float32=(2e-3, 2e-4))


def check(f, *shapes, seed, dtype):
    """Gradient of `sum(f(*arrays) * w)` with random arrays of `shapes` and random weights `w`."""
    rng = np.random.default_rng(seed)
    arrays = [rng.normal(size=s).astype(dtype) for s in shapes]
    y = f(*arrays)
    w = rng.normal(size=np.shape(y))
    seen = []

    def loss(*xs):
        out = f(*xs)
        seen.append(out.dtype)
        return np.sum(out * w)

    grads = assert_gradient(loss, *arrays, **tolerance(dtype))
    assert seen[0] == dtype
    return grads


@st.composite
def matmul_shapes(draw):
    """Operand shapes for every matmul case: 1-D x 1-D, 1-D x N-D, N-D x 1-D, and batches that broadcast."""
    n, k, m = draw(sides), draw(sides), draw(sides)
    batches = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3))
    batch_a, batch_b = batches.input_shapes
    a = draw(st.sampled_from([(k,), batch_a + (n, k)]))
    b = draw(st.sampled_from([(k,), batch_b + (k, m)]))
    return a, b


@SETTINGS
@given(shapes=matmul_shapes(), dtype=dtypes, seed=seeds, spelling=st.sampled_from(["np.matmul", "@", "linalg"]))
def test_matmul(shapes, dtype, seed, spelling):
    f = {"np.matmul": np.matmul, "@": lambda a, b: a @ b, "linalg": np.linalg.matmul}[spelling]
    check(f, *shapes, seed=seed, dtype=dtype)


@SETTINGS
@given(shapes=matmul_shapes(), dtype=dtypes, seed=seeds)
def test_matmul_with_one_plain_operand(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.normal(size=s).astype(dtype) for s in shapes)
    w = rng.normal(size=np.shape(a @ b))
    tol = tolerance(dtype)
    assert_gradient(lambda a: np.sum((a @ b) * w), a, **tol)
    assert_gradient(lambda b: np.sum((a @ b) * w), b, **tol)  # ndarray.__matmul__ meets a tracked right side
    assert_gradient(lambda b: np.sum(np.matmul(a, b) * w), b, **tol)


@st.composite
def dot_shapes(draw):
    """Operand shapes for np.dot: scalars, vectors, matrices and N-D stacks (N-D x N-D goes through tensordot)."""
    k = draw(sides)
    a = draw(st.sampled_from([(), (k,), (draw(sides), k), (draw(sides), draw(sides), k)]))
    if a == ():
        return a, draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=3))
    b = draw(st.sampled_from([(), (k,), (k, draw(sides)), (draw(sides), k, draw(sides)), (2, draw(sides), k, 2)]))
    return a, b


@SETTINGS
@given(shapes=dot_shapes(), dtype=dtypes, seed=seeds, method=st.booleans())
def test_dot(shapes, dtype, seed, method):
    # The method spelling needs an array on the left (central differences turn a 0-d array into a NumPy scalar).
    f = (lambda a, b: a.dot(b)) if method and shapes[0] else np.dot
    check(f, *shapes, seed=seed, dtype=dtype)


@st.composite
def tensordot_case(draw):
    """Shapes and an `axes` argument (an int, or a pair of sequences in any order, possibly negative)."""
    contracted = draw(st.lists(sides, min_size=0, max_size=2))
    free_a = draw(st.lists(sides, min_size=0, max_size=2))
    free_b = draw(st.lists(sides, min_size=0, max_size=2))
    if draw(st.booleans()):
        return tuple(free_a + contracted), tuple(contracted + free_b), len(contracted)
    # Scatter the contracted axes among the free ones, in a random pairing order.
    a_axes = draw(st.permutations(range(len(free_a) + len(contracted))))
    b_axes = draw(st.permutations(range(len(free_b) + len(contracted))))
    pos_a, pos_b = sorted(a_axes[: len(contracted)]), list(b_axes[: len(contracted)])
    shape_a, shape_b = [None] * len(a_axes), [None] * len(b_axes)
    for p, q, n in zip(pos_a, pos_b, contracted):
        shape_a[p], shape_b[q] = n, n
    free_a_iter, free_b_iter = iter(free_a), iter(free_b)
    shape_a = [next(free_a_iter) if s is None else s for s in shape_a]
    shape_b = [next(free_b_iter) if s is None else s for s in shape_b]
    negative = draw(st.booleans())
    pos_a = [p - len(shape_a) if negative else p for p in pos_a]
    axes = (pos_a, pos_b) if len(contracted) != 1 or draw(st.booleans()) else (pos_a[0], pos_b[0])
    return tuple(shape_a), tuple(shape_b), axes


@SETTINGS
@given(case=tensordot_case(), dtype=dtypes, seed=seeds)
def test_tensordot(case, dtype, seed):
    shape_a, shape_b, axes = case
    check(lambda a, b: np.tensordot(a, b, axes=axes), shape_a, shape_b, seed=seed, dtype=dtype)


def test_tensordot_default_axes():
    check(np.tensordot, (2, 3, 4), (3, 4, 5), seed=0, dtype=np.float64)


@SETTINGS
@given(
    shape_a=hnp.array_shapes(min_dims=0, max_dims=2, max_side=3),
    shape_b=hnp.array_shapes(min_dims=0, max_dims=2, max_side=3),
    dtype=dtypes,
    seed=seeds,
)
def test_outer(shape_a, shape_b, dtype, seed):
    check(np.outer, shape_a, shape_b, seed=seed, dtype=dtype)


# --- einsum ----------------------------------------------------------------------------------
EINSUMS = {
    "ij,jk->ik": [(2, 3), (3, 4)],
    "ij,jk": [(2, 3), (3, 4)],  # implicit output
    "ij,kj": [(2, 3), (4, 3)],  # implicit output, letters sorted
    "i,i->": [(3,), (3,)],
    "i,j->ij": [(3,), (2,)],
    "ij->": [(2, 3)],
    "ij->ji": [(2, 3)],
    "ij,jk->i": [(2, 3), (3, 4)],  # k appears in one operand only and is summed away
    "ijk,j->": [(2, 3, 4), (3,)],  # i and k summed inside the first operand alone
    "ij,jk,kl->il": [(2, 3), (3, 4), (4, 2)],
    "ij,jk,kl": [(2, 3), (3, 4), (4, 2)],
    "a,ab,bc->ca": [(2,), (2, 3), (3, 2)],
    "...ij,...jk->...ik": [(5, 2, 3), (5, 3, 4)],
    "...ij,...jk": [(2, 1, 2, 3), (4, 3, 2)],  # ellipsis dims that broadcast, implicit output
    "bij,jk->bik": [(3, 2, 3), (3, 2)],
    "i...->...": [(3, 2, 2)],
    "...i,...i->...": [(2, 3), (3,)],
}


@pytest.mark.parametrize("subscripts", EINSUMS)
@pytest.mark.parametrize("optimize", [False, True])
@settings(max_examples=10, deadline=None)
@given(dtype=dtypes, seed=seeds)
def test_einsum(subscripts, optimize, dtype, seed):
    check(lambda *ops: np.einsum(subscripts, *ops, optimize=optimize), *EINSUMS[subscripts], seed=seed, dtype=dtype)


def test_einsum_with_a_plain_operand():
    rng = np.random.default_rng(3)
    a, b, c = rng.normal(size=(2, 3)), rng.normal(size=(3, 4)), rng.normal(size=(4,))
    assert_gradient(lambda a, c: np.einsum("ij,jk,k->i", a, b, c) @ np.array([1.0, -2.0]), a, c)


def test_einsum_diagonal_is_refused_clearly():
    with pytest.raises(NotImplementedError, match="diagonal"):
        pb.gradient(lambda x: np.einsum("ii->", x), np.eye(2))


def test_products_by_hand():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    b = np.array([5.0, 6.0])
    ga, gb = pb.gradient(lambda a, b: np.sum(a @ b), a, b)
    np.testing.assert_array_equal(ga, [[5.0, 6.0], [5.0, 6.0]])  # d/dA sum(A b) = 1 b^T
    np.testing.assert_array_equal(gb, [4.0, 6.0])  # column sums of A
    ga, gb = pb.gradient(lambda a, b: np.sum(np.outer(a, b) * np.array([[1.0, 0.0]] * 4)), a, b)
    np.testing.assert_array_equal(ga, [[5.0, 5.0], [5.0, 5.0]])
    np.testing.assert_array_equal(gb, [10.0, 0.0])
