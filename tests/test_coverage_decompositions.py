"""numpy.linalg inv, solve, det, slogdet, cholesky, eigh, eigvalsh, svd, qr, pinv, lstsq,
matrix_power and multi_dot against float64 central differences on well-conditioned random
inputs (batched and broadcast), with gauge-invariant losses for eigen- and singular vectors,
the refusals where no derivative exists, and a second-order check per family."""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pullback as pb
from matrices import spd, well_conditioned
import fd
from fd import assert_gradient, project

SETTINGS = settings(max_examples=8, deadline=None)
seeds = st.integers(0, 2**32 - 1)
dtypes = st.sampled_from([np.float64, np.float32])
batches = st.sampled_from([(), (2,), (2, 1)])
sizes = st.integers(1, 4)


tolerance = functools.partial(fd.tolerance, float64=(1e-4, 1e-6), float32=(1e-2, 1e-3))



def second_order(f, x, seed=1, rtol=1e-4):
    v = np.random.default_rng(seed).normal(size=np.shape(x))
    assert_gradient(lambda x: np.sum(pb.gradient(f, x)[0] * v), x, rtol=rtol, atol=1e-6)


def sym(a):
    return (a + np.swapaxes(a, -1, -2)) / 2


@SETTINGS
@given(batch=batches, n=sizes, dtype=dtypes, seed=seeds)
def test_inv_det_slogdet(batch, n, dtype, seed):
    a = well_conditioned(np.random.default_rng(seed), batch + (n, n)).astype(dtype)
    assert_gradient(lambda a: project(np.linalg.inv(a)), a, **tolerance(dtype))
    assert_gradient(lambda a: project(np.linalg.det(a)), a, **tolerance(dtype))
    signed = lambda a: np.linalg.slogdet(a).logabsdet * np.linalg.slogdet(a).sign  # noqa: E731
    assert_gradient(lambda a: project(signed(a)), a, **tolerance(dtype))


@SETTINGS
@given(batch=batches, n=sizes, k=st.sampled_from([None, 1, 3]), broadcast=st.booleans(), dtype=dtypes, seed=seeds)
def test_solve(batch, n, k, broadcast, dtype, seed):
    rng = np.random.default_rng(seed)
    a = well_conditioned(rng, (n, n) if broadcast else batch + (n, n)).astype(dtype)
    b = rng.normal(size=(n,) if k is None else batch + (n, k)).astype(dtype)
    assert_gradient(lambda a, b: project(np.linalg.solve(a, b)), a, b, **tolerance(dtype))


def test_inv_solve_det_second_order():
    a = well_conditioned(np.random.default_rng(0), (3, 3))
    b = np.random.default_rng(1).normal(size=3)
    second_order(lambda a: project(np.linalg.inv(a)), a)
    second_order(lambda a: project(np.linalg.solve(a, b)), a)
    second_order(lambda a: np.linalg.det(a), a)
    second_order(lambda a: np.linalg.slogdet(a)[1], a)


@SETTINGS
@given(batch=batches, n=sizes, upper=st.booleans(), dtype=dtypes, seed=seeds)
def test_cholesky(batch, n, upper, dtype, seed):
    a = spd(np.random.default_rng(seed), batch + (n, n)).astype(dtype)
    # Central differences move one entry at a time, so they see that NumPy reads one triangle only.
    assert_gradient(lambda a: project(np.linalg.cholesky(a, upper=upper)), a, **tolerance(dtype))
    (g,) = pb.gradient(lambda a: project(np.linalg.cholesky(a, upper=upper)), a)
    assert np.all((np.triu(g, 1) if not upper else np.tril(g, -1)) == 0)


def test_cholesky_through_a_symmetric_parametrisation():
    b = np.random.default_rng(2).normal(size=(3, 3))
    assert_gradient(lambda b: project(np.linalg.cholesky(b @ b.T + np.eye(3))), b)
    second_order(lambda b: project(np.linalg.cholesky(b @ b.T + np.eye(3))), b)


@SETTINGS
@given(batch=batches, n=sizes, uplo=st.sampled_from(["L", "U"]), dtype=dtypes, seed=seeds)
def test_eigh_and_eigvalsh(batch, n, uplo, dtype, seed):
    rng = np.random.default_rng(seed)
    a = spd(rng, batch + (n, n)).astype(dtype)

    def spectral(a):  # V f(w) Vᵀ does not depend on the sign of each eigenvector
        w, v = np.linalg.eigh(a, uplo)
        return project((v * np.sin(w)[..., None, :]) @ np.swapaxes(v, -1, -2)) + project(w, 1)

    assert_gradient(spectral, a, **tolerance(dtype))
    assert_gradient(lambda a: project(np.abs(np.linalg.eigh(a, uplo)[1]) ** 2), a, **tolerance(dtype))
    assert_gradient(lambda a: project(np.linalg.eigvalsh(a, uplo)), a, **tolerance(dtype))
    value = pb.pullback(lambda a: np.linalg.eigh(a, uplo).eigenvalues, a)[0]
    np.testing.assert_allclose(value, np.linalg.eigvalsh(a, uplo), rtol=1e-5)


def test_eigh_second_order_and_repeated_eigenvalues():
    a = spd(np.random.default_rng(4), (3, 3))
    second_order(lambda a: project(np.linalg.eigvalsh(a) ** 2), a)
    second_order(lambda a: project(np.abs(np.linalg.eigh(a)[1]) ** 2), a, rtol=1e-3)
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
        return project((u[..., :k] * np.exp(s)[..., None, :]) @ vh[..., :k, :]) + project(s, 1)

    assert_gradient(gauge_invariant, a, **tolerance(dtype))
    assert_gradient(lambda a: project(np.abs(np.linalg.svd(a, full_matrices=False).U) ** 2), a, **tolerance(dtype))
    assert_gradient(lambda a: project(np.abs(np.linalg.svd(a, full_matrices=False).Vh) ** 2), a, **tolerance(dtype))
    assert_gradient(lambda a: project(np.linalg.svd(a, compute_uv=False)), a, **tolerance(dtype))


def test_svd_second_order_and_refusals():
    a = np.random.default_rng(5).normal(size=(4, 3))
    second_order(lambda a: project(np.linalg.svd(a, compute_uv=False) ** 2), a)
    second_order(lambda a: project(np.abs(np.linalg.svd(a, full_matrices=False)[0]) ** 2), a, rtol=1e-3)
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
        assert_gradient(lambda a: project(np.linalg.qr(a, mode="r")), a, **tolerance(dtype))
    else:
        both = lambda a: project(np.linalg.qr(a, mode=mode).Q[..., :k]) + project(np.linalg.qr(a, mode=mode).R, 1)  # noqa
        assert_gradient(both, a, **tolerance(dtype))
        q, r = pb.pullback(lambda a: tuple(np.linalg.qr(a, mode=mode)), a)[0]
        np.testing.assert_allclose(q @ r, a, rtol=1e-4, atol=1e-5)


def test_qr_second_order_and_refusals():
    a = np.random.default_rng(6).normal(size=(4, 3))
    second_order(lambda a: project(np.linalg.qr(a)[1] ** 2), a)
    with pytest.raises(ValueError, match="not unique"):
        pb.gradient(lambda a: project(np.linalg.qr(a, mode="complete")[0]), a)
    with pytest.raises(TypeError, match="raw"):
        pb.gradient(lambda a: np.sum(np.linalg.qr(a, mode="raw")[0]), a)


@SETTINGS
@given(m=sizes, n=sizes, dtype=dtypes, seed=seeds)
def test_pinv_lstsq(m, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = (rng.normal(size=(m, n)) + 1.5 * np.eye(m, n)).astype(dtype)  # full rank
    assert_gradient(lambda a: project(np.linalg.pinv(a)), a, **tolerance(dtype))
    b = rng.normal(size=(m,)).astype(dtype)

    def fit(a, b):
        x, residuals, rank, s = np.linalg.lstsq(a, b)
        assert rank == min(m, n)
        return project(x) + project(residuals, 1) + project(s, 2)

    assert_gradient(fit, a, b, **tolerance(dtype))
    assert_gradient(lambda a, b: project(np.linalg.lstsq(a, b)[0]), a, rng.normal(size=(m, 2)).astype(dtype),
                    **tolerance(dtype))


def test_pinv_lstsq_second_order():
    a = np.random.default_rng(7).normal(size=(4, 2))
    b = np.random.default_rng(8).normal(size=4)
    second_order(lambda a: project(np.linalg.pinv(a)), a)
    second_order(lambda a: project(np.linalg.lstsq(a, b)[0]), a)


@SETTINGS
@given(batch=batches, n=sizes, power=st.integers(-3, 5), seed=seeds)
def test_matrix_power_and_multi_dot(batch, n, power, seed):
    rng = np.random.default_rng(seed)
    a = well_conditioned(rng, batch + (n, n)) * 0.6
    assert_gradient(lambda a: project(np.linalg.matrix_power(a, power)), a)
    np.testing.assert_allclose(pb.pullback(lambda a: np.linalg.matrix_power(a, power), a)[0],
                               np.linalg.matrix_power(a, power), rtol=1e-10)
    chain = [rng.normal(size=n), rng.normal(size=(n, 3)), rng.normal(size=(3, 2)), rng.normal(size=2)]
    assert_gradient(lambda *c: np.linalg.multi_dot(c), *chain)
    second_order(lambda a: project(np.linalg.matrix_power(a, 3)), a[(0,) * len(batch)])


def test_eig_is_refused():
    with pytest.raises(TypeError, match="complex"):
        pb.gradient(lambda a: np.sum(np.linalg.eigvals(a)), np.eye(2))
    assert pb.gradient(lambda a: np.linalg.matrix_rank(a) * np.sum(a), np.eye(2))[0].tolist() == [[2, 2], [2, 2]]
