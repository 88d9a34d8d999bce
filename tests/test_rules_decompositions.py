"""numpy.linalg cholesky, eigh, eigvalsh, svd and qr against float64 central differences in both modes,
on well-conditioned random inputs (batched), with gauge-invariant losses for eigen- and singular
vectors, the refusals where no derivative exists, and second order."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pullback as pb
from matrices import spd
from rule_checks import dtypes, gradcheck, second_order, seeds

SETTINGS = settings(max_examples=8, deadline=None)
batches = st.sampled_from([(), (2,), (2, 1)])
sizes = st.integers(1, 4)


def tolerance(dtype):
    return {"rtol": 1e-4, "atol": 1e-6} if dtype == np.float64 else {"rtol": 1e-2, "atol": 1e-3}


def project(y, seed=0):
    """A fixed random linear functional: a scalar loss that sees every element of y."""
    return np.sum(y * np.random.default_rng(seed).normal(size=np.shape(y)))


@SETTINGS
@given(batch=batches, n=sizes, upper=st.booleans(), dtype=dtypes, seed=seeds)
def test_cholesky(batch, n, upper, dtype, seed):
    a = spd(np.random.default_rng(seed), batch + (n, n)).astype(dtype)
    # Central differences move one entry at a time, so they see that NumPy reads one triangle only.
    gradcheck(lambda a: np.linalg.cholesky(a, upper=upper), a, **tolerance(dtype))
    (g,) = pb.gradient(lambda a: project(np.linalg.cholesky(a, upper=upper)), a)
    assert np.all((np.triu(g, 1) if not upper else np.tril(g, -1)) == 0)


def test_cholesky_through_a_symmetric_parametrisation():
    b = np.random.default_rng(2).normal(size=(3, 3))
    gradcheck(lambda b: np.linalg.cholesky(b @ b.T + np.eye(3)), b)
    second_order(lambda b: np.linalg.cholesky(b @ b.T + np.eye(3)), b)



def test_upper_cholesky_is_numpys_own_factor_in_both_modes():
    # LAPACK's upper factorisation rounds unlike the transpose of the lower factor of a.T
    rng = np.random.default_rng(0)
    rng.normal(size=17)
    a = spd(rng, (4, 4))
    expected = np.linalg.cholesky(a, upper=True)
    assert not np.array_equal(expected, np.linalg.cholesky(a.T).T)  # the case this test is about
    seen = []
    pb.gradient(lambda a: project(seen.append(pb.stop_gradient(np.linalg.cholesky(a, upper=True))) or
                                  np.linalg.cholesky(a, upper=True)), a)
    assert np.array_equal(seen[0], expected)
    value, _ = pb.jvp(lambda a: np.linalg.cholesky(a, upper=True), (a,), (np.ones_like(a),))
    assert np.array_equal(value, expected)
    gradcheck(lambda a: np.linalg.cholesky(a, upper=True), a)
    second_order(lambda a: np.linalg.cholesky(a, upper=True), a)


def test_cholesky_of_a_dask_array_is_refused():
    # np.linalg.cholesky of a Dask array is Dask's, which returns the upper factor: its gradient was the lower one's
    da = pytest.importorskip("dask.array")
    a = da.from_array(spd(np.random.default_rng(1), (4, 4)), chunks=2)
    with pytest.raises(TypeError, match="dask.array.linalg.cholesky, which returns the upper factor"):
        pb.gradient(lambda a: np.sum(np.linalg.cholesky(a)), a)

@SETTINGS
@given(batch=batches, n=sizes, uplo=st.sampled_from(["L", "U"]), dtype=dtypes, seed=seeds)
def test_eigh_and_eigvalsh(batch, n, uplo, dtype, seed):
    rng = np.random.default_rng(seed)
    a = spd(rng, batch + (n, n)).astype(dtype)

    def spectral(a):  # V f(w) Vᵀ does not depend on the sign of each eigenvector
        w, v = np.linalg.eigh(a, uplo)
        return (v * np.sin(w)[..., None, :]) @ np.swapaxes(v, -1, -2), w

    gradcheck(spectral, a, **tolerance(dtype))
    gradcheck(lambda a: np.abs(np.linalg.eigh(a, uplo)[1]) ** 2, a, **tolerance(dtype))
    gradcheck(lambda a: np.linalg.eigvalsh(a, uplo), a, **tolerance(dtype))
    value = pb.pullback(lambda a: np.linalg.eigh(a, uplo).eigenvalues, a)[0]
    np.testing.assert_allclose(value, np.linalg.eigvalsh(a, uplo), rtol=1e-5)


def test_eigh_second_order_and_repeated_eigenvalues():
    a = spd(np.random.default_rng(4), (3, 3))
    second_order(lambda a: np.linalg.eigvalsh(a) ** 2, a)
    second_order(lambda a: np.abs(np.linalg.eigh(a)[1]) ** 2, a, rtol=1e-3)
    # At the identity the eigenvalues are all equal: their gradient exists, the eigenvectors' does not.
    assert np.allclose(pb.gradient(lambda a: np.sum(np.linalg.eigvalsh(a) ** 2), np.eye(3))[0], 2 * np.eye(3))
    with pytest.raises(ValueError, match="not unique"):
        pb.gradient(lambda a: project(np.abs(np.linalg.eigh(a)[1])), np.eye(3))


@st.composite
def rectangular(draw):
    batch = draw(batches)
    return batch + (draw(sizes), draw(sizes))


@SETTINGS
@given(shape=rectangular(), full=st.booleans(), dtype=dtypes, seed=seeds)
def test_svd(shape, full, dtype, seed):
    a = np.random.default_rng(seed).normal(size=shape).astype(dtype)
    k = min(shape[-2:])

    def gauge_invariant(a):
        u, s, vh = np.linalg.svd(a, full_matrices=full)
        return (u[..., :k] * np.exp(s)[..., None, :]) @ vh[..., :k, :], s

    gradcheck(gauge_invariant, a, **tolerance(dtype))
    gradcheck(lambda a: np.abs(np.linalg.svd(a, full_matrices=False).U) ** 2, a, **tolerance(dtype))
    gradcheck(lambda a: np.abs(np.linalg.svd(a, full_matrices=False).Vh) ** 2, a, **tolerance(dtype))
    gradcheck(lambda a: np.linalg.svd(a, compute_uv=False), a, **tolerance(dtype))


def test_svd_second_order_and_refusals():
    a = np.random.default_rng(5).normal(size=(4, 3))
    second_order(lambda a: np.linalg.svd(a, compute_uv=False) ** 2, a)
    second_order(lambda a: np.abs(np.linalg.svd(a, full_matrices=False)[0]) ** 2, a, rtol=1e-3)
    with pytest.raises(ValueError, match="not unique"):
        pb.gradient(lambda a: project(np.linalg.svd(a)[0]), a)  # full U has 1 arbitrary column
    with pytest.raises(ValueError, match="not unique"):
        pb.gradient(lambda a: project(np.abs(np.linalg.svd(a)[0][:, :3])), np.eye(4, 3))  # equal singular values
    with pytest.raises(ValueError, match="zero singular value"):
        rank_one = np.array([[2.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
        pb.gradient(lambda a: project(np.abs(np.linalg.svd(a, full_matrices=False)[0])), rank_one)
    with pytest.raises(TypeError, match="hermitian"):
        pb.gradient(lambda a: np.sum(np.linalg.svd(a, hermitian=True)[1]), np.eye(2))


@SETTINGS
@given(shape=rectangular(), mode=st.sampled_from(["reduced", "complete", "r"]), dtype=dtypes, seed=seeds)
def test_qr(shape, mode, dtype, seed):
    a = np.random.default_rng(seed).normal(size=shape).astype(dtype)
    k = min(shape[-2:])
    if mode == "r":
        gradcheck(lambda a: np.linalg.qr(a, mode="r"), a, **tolerance(dtype))
    else:
        both = lambda a: (np.linalg.qr(a, mode=mode).Q[..., :k], np.linalg.qr(a, mode=mode).R)  # noqa: E731
        gradcheck(both, a, **tolerance(dtype))
        q, r = pb.pullback(lambda a: tuple(np.linalg.qr(a, mode=mode)), a)[0]
        np.testing.assert_allclose(q @ r, a, rtol=1e-4, atol=1e-5)


def test_qr_second_order_and_refusals():
    a = np.random.default_rng(6).normal(size=(4, 3))
    second_order(lambda a: np.linalg.qr(a)[1] ** 2, a)
    with pytest.raises(ValueError, match="not unique"):
        pb.gradient(lambda a: project(np.linalg.qr(a, mode="complete")[0]), a)
    with pytest.raises(TypeError, match="raw"):
        pb.gradient(lambda a: np.sum(np.linalg.qr(a, mode="raw")[0]), a)


def test_eigvals_of_a_real_matrix_and_matrix_rank():
    a = np.array([[0.0, -2.0], [1.0, 0.5]])  # eigenvalues 0.25 ± i sqrt(2 - 1/16)
    (g,) = pb.gradient(lambda a: np.real(np.sum(np.linalg.eigvals(a) ** 2)), a)
    np.testing.assert_allclose(g, 2 * a.T, atol=1e-12)  # sum of squared eigenvalues = trace(a @ a)
    assert pb.gradient(lambda a: np.linalg.matrix_rank(a) * np.sum(a), np.eye(2))[0].tolist() == [[2, 2], [2, 2]]
