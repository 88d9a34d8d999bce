"""matmul, dot, tensordot, outer and einsum against central differences in both modes, for every ndim
combination; kron, inner, vdot, matrix_power and multi_dot; tensordot with positional axes in forward
mode (and so jacobian, hessian and hvp)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from matrices import well_conditioned
from pullback.testing import numerical_gradient
from rule_checks import check_against_numpy, dtypes, gradcheck, second_order, seeds

SETTINGS = settings(max_examples=25, deadline=None)
sides = st.integers(1, 4)


def tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-7} if dtype == np.float64 else {"rtol": 2e-3, "atol": 2e-4}


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

    grads = gradcheck(loss, *arrays, **tolerance(dtype))
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
    gradcheck(lambda a: np.sum((a @ b) * w), a, **tol)
    gradcheck(lambda b: np.sum((a @ b) * w), b, **tol)  # ndarray.__matmul__ meets a tracked right side
    gradcheck(lambda b: np.sum(np.matmul(a, b) * w), b, **tol)


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
    gradcheck(lambda a, c: np.einsum("ij,jk,k->i", a, b, c) @ np.array([1.0, -2.0]), a, c)


def test_einsum_trace_by_hand():
    # d trace(X) / dX = I; the diagonal of X is reached by a repeated index.
    np.testing.assert_array_equal(pb.gradient(lambda x: np.einsum("ii->", x), np.ones((2, 2)))[0], np.eye(2))


def test_products_by_hand():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    b = np.array([5.0, 6.0])
    ga, gb = pb.gradient(lambda a, b: np.sum(a @ b), a, b)
    np.testing.assert_array_equal(ga, [[5.0, 6.0], [5.0, 6.0]])  # d/dA sum(A b) = 1 b^T
    np.testing.assert_array_equal(gb, [4.0, 6.0])  # column sums of A
    ga, gb = pb.gradient(lambda a, b: np.sum(np.outer(a, b) * np.array([[1.0, 0.0]] * 4)), a, b)
    np.testing.assert_array_equal(ga, [[5.0, 5.0], [5.0, 5.0]])
    np.testing.assert_array_equal(gb, [10.0, 0.0])


# --- kron, inner, vdot, matrix_power, multi_dot -----------------------------------------------
@settings(max_examples=10, deadline=None)
@given(sa=hnp.array_shapes(min_dims=0, max_dims=3, max_side=3), sb=hnp.array_shapes(min_dims=0, max_dims=3, max_side=3),
       dtype=dtypes, seed=seeds)
def test_kron_inner_vdot(sa, sb, dtype, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=sa).astype(dtype), rng.normal(size=sb).astype(dtype)
    check_against_numpy(np.kron, a, b, dtype=dtype)
    if sa and sb:
        b_inner = rng.normal(size=sb[:-1] + sa[-1:]).astype(dtype)
        check_against_numpy(np.inner, a, b_inner, dtype=dtype)
    check_against_numpy(np.inner, a, np.asarray(dtype(1.5)), dtype=dtype)
    c = rng.normal(size=a.size).astype(dtype)
    check_against_numpy(np.vdot, a, c, dtype=dtype)


def test_kron_second_order():
    a, b = np.array([[1.0, 2.0], [0.5, -1.0]]), np.array([0.3, -0.2, 0.9])
    second_order(lambda a: np.kron(a, b) ** 2, a)


@settings(max_examples=8, deadline=None)
@given(batch=st.sampled_from([(), (2,), (2, 1)]), n=st.integers(1, 4), power=st.integers(-3, 5), seed=seeds)
def test_matrix_power_and_multi_dot(batch, n, power, seed):
    rng = np.random.default_rng(seed)
    a = well_conditioned(rng, batch + (n, n)) * 0.6
    gradcheck(lambda a: np.linalg.matrix_power(a, power), a)
    np.testing.assert_allclose(pb.pullback(lambda a: np.linalg.matrix_power(a, power), a)[0],
                               np.linalg.matrix_power(a, power), rtol=1e-10)
    chain = [rng.normal(size=n), rng.normal(size=(n, 3)), rng.normal(size=(3, 2)), rng.normal(size=2)]
    gradcheck(lambda *c: np.linalg.multi_dot(c), *chain)
    second_order(lambda a: np.linalg.matrix_power(a, 3), a[(0,) * len(batch)])


# --- np.tensordot with positional axes, in forward mode -----------------------------------------
RNG = np.random.default_rng(7)
A23, B32, C234 = RNG.normal(size=(2, 3)), RNG.normal(size=(3, 2)), RNG.normal(size=(2, 3, 4))


def central_jvp(f, args, tangents, eps=1e-6):
    plus = f(*[a + eps * t for a, t in zip(args, tangents)])
    minus = f(*[a - eps * t for a, t in zip(args, tangents)])
    return (plus - minus) / (2 * eps)


@pytest.mark.parametrize("axes", [([0, 1], [1, 0]), 1, ([1], [0]), (0, 1)], ids=str)
def test_tensordot_positional_axes_in_forward_mode(axes):
    f = lambda a, b: np.tensordot(a, b, axes)  # noqa: E731
    v = (RNG.normal(size=A23.shape), RNG.normal(size=B32.shape))
    y, dot = pb.jvp(f, (A23, B32), v)
    np.testing.assert_allclose(y, f(A23, B32), rtol=1e-14)
    np.testing.assert_allclose(dot, central_jvp(f, (A23, B32), v), rtol=1e-7, atol=1e-9)
    keyword = pb.jvp(lambda a, b: np.tensordot(a, b, axes=axes), (A23, B32), v)[1]
    np.testing.assert_allclose(dot, keyword, rtol=1e-14)


def test_tensordot_jacobian_in_forward_mode():
    x = RNG.normal(size=3)
    f = lambda x: np.tensordot(C234, np.outer(x, x[:2]), ([1, 0], [0, 1]))  # noqa: E731
    assert f(x).size > x.size  # so that jacobian takes forward mode
    (jac,) = pb.jacobian(f, x)
    expected = np.stack([numerical_gradient(lambda x: f(x)[i], x)[0] for i in range(4)])
    np.testing.assert_allclose(jac, expected, rtol=1e-7, atol=1e-9)


def test_hessian_through_tensordot_and_inner():
    m = RNG.normal(size=(3, 3))

    def f(x):
        q = np.tensordot(np.outer(x, x), m, ([0, 1], [1, 0]))  # x^T M^T x, written with positional axes
        return q * np.inner(x, np.sin(x)) + np.inner(np.tensordot(m, x, 1), x ** 2)

    x = np.array([0.4, -1.1, 0.7])
    expected = np.stack([numerical_gradient(lambda x: pb.gradient(f, x)[0][i], x)[0] for i in range(3)])
    np.testing.assert_allclose(pb.hessian(f, x), expected, rtol=1e-6, atol=1e-8)
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(pb.hvp(f, x, v), expected @ v, rtol=1e-6, atol=1e-8)


def test_einsum_of_one_operand_is_a_view_where_numpys_is():
    """NumPy's einsum('ii->i', a) is a writeable view of a's diagonal (adding to a diagonal in
    place is an idiom); writes into it reach the operand, in value and derivative."""
    def ridge(a, lam):
        m = a.reshape(2, 2) @ a.reshape(2, 2).T
        np.einsum("ii->i", m)[:] += lam
        return np.sum(np.linalg.inv(m))

    def swap(a):
        m = a.reshape(2, 2).copy()
        np.einsum("ij->ji", m)[0, 1] = 7.0 * a[0]  # writes m[1, 0]
        return m

    x = np.array([0.5, 1.5, -0.7, 2.0])
    assert pb.pullback(ridge, x, 0.3)[0] == ridge(x.copy(), 0.3)
    np.testing.assert_array_equal(pb.pullback(swap, x)[0], swap(x.copy()))
    assert pb.check_gradient(ridge, x, 0.3)
    assert pb.check_gradient(swap, x)
    assert pb.check_gradient(lambda a: np.einsum("ii->i", np.outer(a, a)) ** 2, x, order=2)
    np.testing.assert_array_equal(pb.jvp(lambda a: np.einsum("ii->i", np.outer(a, a)), (x,), (np.ones(4),))[1], 2.0 * x)
