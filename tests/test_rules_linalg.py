"""Solving and inverting: numpy.linalg inv, solve, det, slogdet, pinv and lstsq on well-conditioned
random inputs (batched and broadcast), and the differentiable scipy.linalg functions (solve_triangular,
cho_factor/cho_solve, expm, lu_factor/lu_solve), against float64 central differences in both modes
and SciPy's own values, with a second-order check per function."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pullback as pb
from matrices import well_conditioned
from pullback.rules import linalg as ours
from pullback.testing import assert_gradient
from rule_checks import dtypes, gradcheck, second_order, seeds

try:
    import scipy.linalg as sl
except ImportError:  # the numpy.linalg tests run without SciPy
    sl = None
needs_scipy = pytest.mark.skipif(sl is None, reason="needs SciPy")

SETTINGS = settings(max_examples=8, deadline=None)
batches = st.sampled_from([(), (2,), (2, 1)])
sizes = st.integers(1, 4)


def tolerance(dtype):
    return {"rtol": 1e-4, "atol": 1e-6} if dtype == np.float64 else {"rtol": 1e-2, "atol": 1e-3}


def project(y, seed=0):
    """A fixed random linear functional: a scalar loss that sees every element of y."""
    return np.sum(y * np.random.default_rng(seed).normal(size=np.shape(y)))


def check_against_scipy(ours_fn, scipy_fn, *args, dtype=np.float64):
    """ours_fn's derivatives against central differences, and its values against SciPy's."""
    tol = {"rtol": 1e-5, "atol": 1e-7} if dtype == np.float64 else {"rtol": 1e-2, "atol": 1e-3}
    gradcheck(ours_fn, *args, **tol)
    np.testing.assert_allclose(pb.pullback(ours_fn, *args)[0], scipy_fn(*args), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours_fn(*args), scipy_fn(*args))  # plain input: SciPy itself


def spd(rng, n):
    m = rng.normal(size=(n, n))
    return m @ m.T + n * np.eye(n)


# --- numpy.linalg -------------------------------------------------------------------------------
@SETTINGS
@given(batch=batches, n=sizes, dtype=dtypes, seed=seeds)
def test_inv_det_slogdet(batch, n, dtype, seed):
    a = well_conditioned(np.random.default_rng(seed), batch + (n, n)).astype(dtype)
    gradcheck(np.linalg.inv, a, **tolerance(dtype))
    gradcheck(np.linalg.det, a, **tolerance(dtype))
    signed = lambda a: np.linalg.slogdet(a).logabsdet * np.linalg.slogdet(a).sign  # noqa: E731
    gradcheck(signed, a, **tolerance(dtype))


def test_det_of_a_singular_matrix_has_its_adjugate_as_derivative():
    """NumPy gives det = 0 without an error; the derivative, the adjugate (transposed), exists
    there too, in both modes, and for a batch holding singular and regular matrices."""
    s = np.array([[1.0, 2.0], [2.0, 4.0]])
    (g,) = pb.gradient(np.linalg.det, s)
    np.testing.assert_allclose(g, [[4.0, -2.0], [-2.0, 1.0]], atol=1e-14)  # the cofactors, by hand
    np.testing.assert_allclose(pb.jvp(np.linalg.det, (s,), (np.eye(2),))[1], 5.0)  # tr adj(s)
    rank_two = np.diag([2.0, 3.0, 0.0])
    np.testing.assert_allclose(pb.gradient(np.linalg.det, rank_two)[0], np.diag([0.0, 0.0, 6.0]), atol=1e-14)
    rank_one = np.diag([2.0, 0.0, 0.0])
    np.testing.assert_allclose(pb.gradient(np.linalg.det, rank_one)[0], np.zeros((3, 3)), atol=1e-14)
    rng = np.random.default_rng(0)
    r = rng.standard_normal((4, 4))
    r[:, 3] = r[:, 0] + r[:, 1]
    batch = np.stack([r, np.eye(4), np.diag([1.0, 2.0, 3.0, 0.0])])
    assert pb.check_gradient(np.linalg.det, batch)
    c = r + 1j * rng.standard_normal((4, 4))
    c[:, 3] = c[:, 0] + 2.0 * c[:, 1]
    assert pb.check_gradient(lambda c: np.real(np.linalg.det(c) * (1.0 - 2.0j)), c)


def test_slogdet_of_a_singular_matrix_is_numpys_and_its_derivative_says_why_it_is_missing():
    s = np.array([[1.0, 2.0], [2.0, 4.0]])
    assert pb.pullback(lambda a: np.linalg.slogdet(a)[1], s)[0] == -np.inf
    with pytest.raises(np.linalg.LinAlgError, match=r"slogdet of a singular matrix.*-inf.*np\.linalg\.det has one"):
        pb.gradient(lambda a: np.linalg.slogdet(a)[1], s)


@SETTINGS
@given(batch=batches, n=sizes, k=st.sampled_from([None, 1, 3]), broadcast=st.booleans(), dtype=dtypes, seed=seeds)
def test_solve(batch, n, k, broadcast, dtype, seed):
    rng = np.random.default_rng(seed)
    a = well_conditioned(rng, (n, n) if broadcast else batch + (n, n)).astype(dtype)
    b = rng.normal(size=(n,) if k is None else batch + (n, k)).astype(dtype)
    gradcheck(np.linalg.solve, a, b, **tolerance(dtype))


def test_inv_solve_det_second_order():
    a = well_conditioned(np.random.default_rng(0), (3, 3))
    b = np.random.default_rng(1).normal(size=3)
    second_order(lambda a: np.linalg.inv(a), a)
    second_order(lambda a: np.linalg.solve(a, b), a)
    second_order(lambda a: np.linalg.det(a), a)
    second_order(lambda a: np.linalg.slogdet(a)[1], a)


@SETTINGS
@given(m=sizes, n=sizes, dtype=dtypes, seed=seeds)
def test_pinv_lstsq(m, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = (rng.normal(size=(m, n)) + 1.5 * np.eye(m, n)).astype(dtype)  # full rank
    gradcheck(np.linalg.pinv, a, **tolerance(dtype))
    b = rng.normal(size=(m,)).astype(dtype)

    def fit(a, b):
        x, residuals, rank, s = np.linalg.lstsq(a, b)
        assert rank == min(m, n)
        return x, residuals, s

    gradcheck(fit, a, b, **tolerance(dtype))
    gradcheck(lambda a, b: np.linalg.lstsq(a, b)[0], a, rng.normal(size=(m, 2)).astype(dtype), **tolerance(dtype))


def test_pinv_lstsq_second_order():
    a = np.random.default_rng(7).normal(size=(4, 2))
    b = np.random.default_rng(8).normal(size=4)
    second_order(lambda a: np.linalg.pinv(a), a)
    second_order(lambda a: np.linalg.lstsq(a, b)[0], a)


# --- scipy.linalg -------------------------------------------------------------------------------
@needs_scipy
@SETTINGS
@given(n=sizes, vector=st.booleans(), trans=st.sampled_from([0, 1, "T", "C", "N"]), lower=st.booleans(),
       unit=st.booleans(), dtype=dtypes, seed=seeds)
def test_solve_triangular(n, vector, trans, lower, unit, dtype, seed):
    rng = np.random.default_rng(seed)
    a = (rng.normal(size=(n, n)) + 3.0 * np.eye(n)).astype(dtype)  # the other triangle is read by no one
    b = rng.normal(size=(n,) if vector else (n, 2)).astype(dtype)
    kw = dict(trans=trans, lower=lower, unit_diagonal=unit)
    check_against_scipy(lambda a, b: ours.solve_triangular(a, b, **kw), lambda a, b: sl.solve_triangular(a, b, **kw),
                        a, b, dtype=dtype)
    (g,) = pb.gradient(lambda a: project(ours.solve_triangular(a, b, **kw)), a)
    ignored = np.triu(g, 0 if unit else 1) if lower else np.tril(g, 0 if unit else -1)
    assert np.all(ignored == 0)


@needs_scipy
@SETTINGS
@given(n=sizes, lower=st.booleans(), seed=seeds)
def test_cho_factor_and_cho_solve(n, lower, seed):
    rng = np.random.default_rng(seed)
    s, b = spd(rng, n), rng.normal(size=(n, 2))
    check_against_scipy(lambda s: ours.cho_factor(s, lower=lower)[0], lambda s: sl.cho_factor(s, lower=lower)[0], s)
    check_against_scipy(lambda s, b: ours.cho_solve(ours.cho_factor(s, lower=lower), b),
                        lambda s, b: sl.cho_solve(sl.cho_factor(s, lower=lower), b), s, b)
    assert pb.pullback(lambda s: ours.cho_factor(s, lower=lower)[1], s)[0] is lower


@needs_scipy
@SETTINGS
@given(batch=st.sampled_from([(), (2,)]), n=sizes, dtype=dtypes, seed=seeds)
def test_expm(batch, n, dtype, seed):
    a = (np.random.default_rng(seed).normal(size=batch + (n, n)) / 2.0).astype(dtype)
    check_against_scipy(ours.expm, sl.expm, a, dtype=dtype)


@needs_scipy
@SETTINGS
@given(n=sizes, trans=st.sampled_from([0, 1, 2]), seed=seeds)
def test_lu_factor_and_lu_solve(n, trans, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(n, n)) + 3.0 * np.eye(n), rng.normal(size=(n, 2))  # well conditioned: finite differences stay accurate
    check_against_scipy(lambda a: ours.lu_factor(a)[0], lambda a: sl.lu_factor(a)[0], a)
    check_against_scipy(lambda a, b: ours.lu_solve(ours.lu_factor(a), b, trans=trans),
                        lambda a, b: sl.lu_solve(sl.lu_factor(a), b, trans=trans), a, b)
    np.testing.assert_array_equal(pb.pullback(lambda a: ours.lu_factor(a)[1], a)[0], sl.lu_factor(a)[1])


@needs_scipy
def test_scipy_functions_second_order():
    rng = np.random.default_rng(3)
    a, s, b = rng.normal(size=(3, 3)) + 2 * np.eye(3), spd(rng, 3), rng.normal(size=3)
    second_order(lambda a: ours.solve_triangular(a, b, lower=True), a)
    second_order(lambda s: ours.cho_solve(ours.cho_factor(s), b), s)
    second_order(lambda a: ours.expm(a / 3.0), a)
    second_order(lambda a: ours.lu_solve(ours.lu_factor(a), b), a)
    second_order(lambda a: ours.lu_factor(a)[0], a)


@needs_scipy
def test_batched_triangular_input_is_refused_clearly():
    with pytest.raises(ValueError, match="square 2-D"):
        pb.gradient(lambda a: np.sum(ours.solve_triangular(a, np.ones(2))), np.ones((2, 2, 2)))


def test_a_cutoff_that_drops_nonzero_singular_values_is_refused():
    # the rank-constant formulas would differentiate pinv(a), not the truncated pseudo-inverse
    rng = np.random.default_rng(0)
    a, w, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)
    assert np.linalg.svd(a, compute_uv=False).min() / np.linalg.svd(a, compute_uv=False).max() < 0.5
    for f in (lambda a: np.sum(w * np.linalg.pinv(a, rcond=0.5)), lambda a: np.sum(w * np.linalg.pinv(a, rtol=0.5)),
              lambda a: np.sum(np.linalg.lstsq(a, b, rcond=0.5)[0] ** 2)):
        with pytest.raises(ValueError, match="drops singular values of the matrix that are not zero"):
            pb.gradient(f, a)
        with pytest.raises(ValueError, match="drops singular values"):
            pb.jvp(f, (a,), (np.ones_like(a),))
    # a cutoff that keeps every singular value, and the default on an exactly rank-deficient matrix
    assert_gradient(lambda a: np.sum(w * np.linalg.pinv(a, rcond=1e-3)), a)
    assert_gradient(lambda a: np.sum(np.linalg.lstsq(a, b, rcond=1e-3)[0] ** 2), a)
    rank_one = np.outer(rng.standard_normal(4), rng.standard_normal(3))
    (g,) = pb.gradient(lambda a: np.sum(w * np.linalg.pinv(a, rtol=1e-8)), rank_one)
    np.testing.assert_array_equal(g, pb.gradient(lambda a: np.sum(w * np.linalg.pinv(a)), rank_one)[0])
    jitted = pb.jit(lambda a: pb.gradient(lambda a: np.sum(w * np.linalg.pinv(a, rcond=0.5)), a)[0])
    with pytest.raises(ValueError, match="drops singular values"):
        jitted(a)


def _cases_numpy_computes_its_own_way():
    rng = np.random.default_rng(0)
    square, tall = rng.standard_normal((3, 3)), rng.standard_normal((4, 3))
    return {
        "svd values only": (lambda a: np.linalg.svd(a, compute_uv=False), (tall,)),
        "complex svd values only": (lambda a: np.linalg.svd(a, compute_uv=False), (tall + 1j * tall[::-1],)),
        "cube": (lambda a: np.linalg.matrix_power(a, 3), (square,)),
        "inverse cube": (lambda a: np.linalg.matrix_power(a, -3), (square,)),
        "fifth power": (lambda a: np.linalg.matrix_power(a, 5), (square,)),
        "multi_dot of three": (lambda a: np.linalg.multi_dot([a, a, a]), (square,)),
        "multi_dot chain": (lambda a, b: np.linalg.multi_dot([a, b, a[:, 0]]),
                            (rng.standard_normal((10, 2)), rng.standard_normal((2, 10)))),
        "dot of 3-D and 2-D": (np.dot, (rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 3)))),
        "dot of 3-D and vector": (np.dot, (rng.standard_normal((3, 4, 50)), rng.standard_normal(50))),
        "dot of 2-D and 3-D": (np.dot, (rng.standard_normal((3, 4)), rng.standard_normal((2, 4, 3)))),
        "lstsq": (np.linalg.lstsq, (rng.standard_normal((5, 3)), rng.standard_normal((5, 2)))),
        "complex lstsq": (np.linalg.lstsq, (square + 1j * square.T, rng.standard_normal(3) + 0j)),
    }


@pytest.mark.parametrize("name", sorted(_cases_numpy_computes_its_own_way()))
def test_values_numpy_computes_its_own_way_are_numpy_s(name):
    f, args = _cases_numpy_computes_its_own_way()[name]
    expected = f(*args)
    got = pb.pullback(f, *args)[0]
    for e, g in zip(expected if isinstance(expected, tuple) else (expected,), got if isinstance(got, tuple) else (got,)):
        assert np.asarray(g).dtype == np.asarray(e).dtype
        np.testing.assert_array_equal(g, e)


def test_matrix_power_of_a_non_square_matrix_raises_numpy_s_error():
    for n in (0, 1, 2, -1):
        with pytest.raises(np.linalg.LinAlgError, match="must be square"):
            pb.gradient(lambda a: np.sum(np.linalg.matrix_power(a, n)), np.ones((2, 3)))


# --- eig and eigvals: ties and empty matrices, eagerly and under pb.jit ------------------------------------
def _sum_of_eigenvalues(a):
    return np.real(np.sum(np.linalg.eigvals(a)))  # the trace: its gradient is the identity everywhere


def test_eigvals_gradient_at_a_repeated_eigenvalue_under_jit_is_eager_s():
    tied, distinct = np.diag([1.0, 1.0, 2.0]), np.diag([1.0, 3.0, 2.0])
    np.testing.assert_allclose(pb.gradient(_sum_of_eigenvalues, tied)[0], np.eye(3))
    traced_at_tie = pb.jit(lambda a: pb.gradient(_sum_of_eigenvalues, a))
    np.testing.assert_allclose(traced_at_tie(tied)[0], np.eye(3))
    np.testing.assert_allclose(traced_at_tie(tied)[0], np.eye(3))
    traced_apart = pb.jit(lambda a: pb.gradient(_sum_of_eigenvalues, a))
    np.testing.assert_allclose(traced_apart(distinct)[0], np.eye(3))
    np.testing.assert_allclose(traced_apart(tied)[0], np.eye(3))
    batch = np.stack([tied, np.diag([3.0, 2.0, 3.0])])
    np.testing.assert_allclose(traced_apart(batch)[0], np.broadcast_to(np.eye(3), batch.shape))


def test_eigvals_gradient_of_a_defective_matrix_under_jit_raises_as_eager():
    defective = np.array([[1.0, 1.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="defective"):
        pb.gradient(_sum_of_eigenvalues, defective)
    jitted = pb.jit(lambda a: pb.gradient(_sum_of_eigenvalues, a))
    with pytest.raises(ValueError, match="defective"):
        jitted(defective)
    np.testing.assert_allclose(jitted(np.diag([1.0, 2.0]))[0], np.eye(2))
    with pytest.raises(ValueError, match="defective"):
        jitted(defective)


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0)])
@pytest.mark.parametrize("which", ["eig", "eigvals"])
def test_eig_of_an_empty_matrix_has_an_empty_gradient_and_tangent(shape, which):
    fn = (lambda a: np.linalg.eig(a)[0]) if which == "eig" else np.linalg.eigvals
    f = lambda a: np.sum(np.abs(fn(a)))
    a = np.zeros(shape)
    val, (g,) = pb.withgradient(f, a)
    assert val == f(a) == 0.0
    assert g is None or (g.shape == shape and g.dtype == a.dtype)
    y, t = pb.jvp(fn, (a,), (a,))
    assert y.shape == t.shape == fn(a).shape == shape[:-1]


@pytest.mark.parametrize("f", [
    lambda a: np.sum(np.linalg.eigh(a)[1][:, 0] ** 4),
    lambda a: np.sum(np.linalg.svd(a)[0][:, 1] ** 4),  # (column 0 is the simple singular value 2's)
    lambda a: np.sum(np.abs(np.linalg.eig(a)[1][:, 0]) ** 4),
], ids=["eigh", "svd", "eig"])
def test_eigenvector_gradient_at_a_tie_under_jit_refuses_as_eager(f):
    tied = np.diag([1.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="not unique"):
        pb.gradient(f, tied)
    jitted = pb.jit(lambda a: pb.gradient(f, a))
    apart = np.diag([1.0, 3.0, 2.0]) + 0.1
    np.testing.assert_allclose(jitted(apart)[0], pb.gradient(f, apart)[0])
    with pytest.raises(ValueError, match="not unique"):
        jitted(tied)
    with pytest.raises(ValueError, match="not unique"):
        pb.jit(lambda a: pb.gradient(f, a))(tied)


def test_singular_vectors_of_a_non_square_matrix_with_a_zero_singular_value_under_jit_refuse_as_eager():
    f = lambda a: np.sum(np.linalg.svd(a, full_matrices=False)[0] ** 3)
    rank_one = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="zero singular value"):
        pb.gradient(f, rank_one)
    jitted = pb.jit(lambda a: pb.gradient(f, a))
    full_rank = np.array([[2.0, 0.1], [0.3, 1.0], [0.5, 0.2]])
    np.testing.assert_allclose(jitted(full_rank)[0], pb.gradient(f, full_rank)[0])
    with pytest.raises(ValueError, match="zero singular value"):
        jitted(rank_one)


# --- tensorinv ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, ind", [((2, 1, 1), 1), ((2, 3, 6), 1), ((2, 2), 3)])
def test_tensorinv_of_a_non_square_tensor_raises_numpy_s_linalgerror(shape, ind):
    a = np.ones(shape)
    with pytest.raises(np.linalg.LinAlgError, match="square"):
        np.linalg.tensorinv(a, ind)
    with pytest.raises(np.linalg.LinAlgError, match="square"):
        pb.gradient(lambda a: np.sum(np.linalg.tensorinv(a, ind)), a)
    with pytest.raises(ValueError, match="ind"):
        pb.gradient(lambda a: np.sum(np.linalg.tensorinv(a, 0)), np.eye(2))


@pytest.mark.parametrize("shape, ind", [((6, 2, 3), 1), ((2, 3, 6), 2), ((2, 2, 2, 2), 2)])
def test_tensorinv(shape, ind):
    a = np.random.default_rng(0).standard_normal(shape)
    np.testing.assert_array_equal(pb.pullback(lambda a: np.linalg.tensorinv(a, ind), a)[0], np.linalg.tensorinv(a, ind))
    gradcheck(lambda a: project(np.linalg.tensorinv(a, ind)), a)


def test_cross_product_gradient_under_jit_is_eager_s():
    f = lambda x: pb.withgradient(lambda x: np.sum(np.linalg.cross(x, x[::-1]) ** 2), x)
    jitted = pb.jit(f)
    for x in (np.random.default_rng(0).standard_normal((4, 3)), np.random.default_rng(1).standard_normal((4, 3))):
        (val, (g,)), (want_val, (want_g,)) = jitted(x), f(x)
        assert val == want_val
        np.testing.assert_allclose(g, want_g, rtol=1e-12)
    gradcheck(lambda x: project(np.linalg.cross(x, x[::-1])), np.random.default_rng(2).standard_normal((4, 3)))
