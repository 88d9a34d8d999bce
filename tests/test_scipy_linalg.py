"""pullback.scipy.linalg beyond the triangular, Cholesky and LU solves: each stand-in gives SciPy's
value on traced inputs, and its derivatives (reverse and forward) agree with float64 central
differences and with each other; the matrix functions and Sylvester solves to second order;
options SciPy reads (assume_a, lower, modes) are honoured, and what is not differentiable is refused
with a clear error."""

import inspect

import numpy as np
import pytest

import pullback as pb
from pullback.testing import check_transpose
from rule_checks import gradcheck

L = pytest.importorskip("scipy.linalg")
from pullback.scipy import linalg  # noqa: E402

rng = np.random.default_rng(0)
N = 4
A = rng.normal(size=(N, N)) + 3 * np.eye(N)
SPD = A @ A.T
NOISY = SPD + np.triu(rng.normal(size=(N, N)), 1)  # the upper triangle is noise: lower=True must not read it
R = rng.normal(size=(5, 3))
M = rng.normal(size=(3, 3)) / 3 + 2 * np.eye(3)
C, RR = rng.normal(size=4), rng.normal(size=3)
BAND = rng.normal(size=(4, 5))
BAND[1] += 5
UPPER_BAND = np.abs(rng.normal(size=(3, 5)))
UPPER_BAND[-1] += 5
LOWER_BAND = np.abs(rng.normal(size=(3, 5)))
LOWER_BAND[0] += 5


def flat(result):
    return np.concatenate([np.ravel(v) for v in (result if isinstance(result, tuple) else (result,))])


CASES = {
    "inv": (lambda a: linalg.inv(a), (A,)),
    "inv pos lower": (lambda a: linalg.inv(a, assume_a="pos", lower=True), (NOISY,)),
    "solve": (lambda a, b: linalg.solve(a, b), (A, rng.normal(size=(N, 2)))),
    "solve transposed": (lambda a, b: linalg.solve(a, b, transposed=True), (A, rng.normal(size=N))),
    **{f"solve {kind}": (lambda a, b, kind=kind: linalg.solve(a, b, lower=True, assume_a=kind), (NOISY, C))
       for kind in ("sym", "pos", "her", "diagonal", "tridiagonal", "upper triangular", "lower triangular", "banded")},
    "det": (lambda a: linalg.det(a), (A,)),
    "det batched": (lambda a: linalg.det(a), (np.stack([A, A.T + 1.0]),)),
    "cholesky": (lambda a: linalg.cholesky(a), (NOISY.T.copy(),)),
    "cholesky lower": (lambda a: linalg.cholesky(a, lower=True), (NOISY,)),
    "eigh": (lambda a: (linalg.eigh(a)[0], linalg.eigh(a)[1] ** 2), (NOISY,)),
    "eigh upper subset": (lambda a: linalg.eigh(a, lower=False, subset_by_index=[1, 2]), (NOISY.T.copy(),)),
    "eigvalsh": (lambda a: linalg.eigvalsh(a), (NOISY,)),
    "svd": (lambda a: linalg.svd(a, full_matrices=False), (R,)),
    "svd full": (lambda a: (linalg.svd(a)[0][:, :3], linalg.svd(a)[1]), (R,)),
    "svdvals": (lambda a: linalg.svdvals(a), (R,)),
    "qr full": (lambda a: linalg.qr(a), (A,)),
    "qr economic": (lambda a: linalg.qr(a, mode="economic"), (R,)),
    "qr r": (lambda a: linalg.qr(a, mode="r"), (R.T.copy(),)),
    "lu": (lambda a: linalg.lu(a)[1:], (A,)),
    "lu permute_l": (lambda a: linalg.lu(a, permute_l=True), (A,)),
    "pinv": (lambda a: linalg.pinv(a), (R,)),
    "pinv atol": (lambda a: linalg.pinv(a, atol=1e-3, rtol=1e-6), (R,)),
    "pinvh": (lambda a: linalg.pinvh(a), (NOISY,)),
    "lstsq": (lambda a, b: linalg.lstsq(a, b)[0], (R, rng.normal(size=5))),
    "lstsq residues": (lambda a, b: (linalg.lstsq(a, b)[1], linalg.lstsq(a, b)[3]), (R, rng.normal(size=(5, 2)))),
    "norm": (lambda a: linalg.norm(a), (R,)),
    "orth": (lambda a: linalg.orth(a), (R,)),
    "subspace_angles": (lambda a, b: linalg.subspace_angles(a, b), (R, rng.normal(size=(5, 2)))),
    "subspace_angles close": (lambda a, b: linalg.subspace_angles(a, b), (R, R[:, :2] + 0.1 * rng.normal(size=(5, 2)))),
    "qr_multiply right": (lambda a, c: linalg.qr_multiply(a, c), (R, rng.normal(size=(2, 5)))),
    "qr_multiply left": (lambda a, c: linalg.qr_multiply(a, c, "left"), (R, rng.normal(size=(3, 2)))),
    "qr_multiply 1-d": (lambda a, c: linalg.qr_multiply(a, c, "left"), (R, rng.normal(size=3))),
    "matrix_balance": (lambda a: linalg.matrix_balance(a)[0], (A * np.array([1.0, 100.0, 0.01, 1.0]),)),
    "matrix_balance separate": (lambda a: linalg.matrix_balance(a, permute=False, separate=True)[0],
                                (A * np.array([1.0, 100.0, 0.01, 1.0]),)),
    "norm 2 axis": (lambda a: (linalg.norm(a, 2), linalg.norm(a, 1, axis=0)), (R,)),
    "orthogonal_procrustes": (lambda a, b: linalg.orthogonal_procrustes(a, b), (R, rng.normal(size=(5, 3)))),
    "polar": (lambda a: linalg.polar(a), (A,)),
    "polar left": (lambda a: linalg.polar(a, "left"), (A,)),
    **{name: (getattr(linalg, name), (M / 2 if name == "tanm" else M,))
       for name in ("sqrtm", "logm", "cosm", "sinm", "tanm", "coshm", "sinhm", "tanhm", "signm")},
    "fractional_matrix_power": (lambda a: linalg.fractional_matrix_power(a, 0.3), (M + np.triu(np.ones((3, 3))),)),
    "expm_frechet": (lambda a, e: linalg.expm_frechet(a, e), (M / 3, rng.normal(size=(3, 3)))),
    "expm_frechet only": (lambda a, e: linalg.expm_frechet(a, e, compute_expm=False), (M / 3, rng.normal(size=(3, 3)))),
    "solve_sylvester": (lambda a, b, q: linalg.solve_sylvester(a, b, q), (M, M.T + np.eye(3), rng.normal(size=(3, 3)))),
    "solve_continuous_lyapunov": (lambda a, q: linalg.solve_continuous_lyapunov(a, q), (M, rng.normal(size=(3, 3)))),
    "solve_lyapunov": (lambda a, q: linalg.solve_lyapunov(a, q), (M, rng.normal(size=(3, 3)))),
    "solve_discrete_lyapunov": (lambda a, q: linalg.solve_discrete_lyapunov(a, q), (M / 4, rng.normal(size=(3, 3)))),
    "solve_discrete_lyapunov bilinear": (lambda a, q: linalg.solve_discrete_lyapunov(a, q, "bilinear"),
                                         (M / 4, rng.normal(size=(3, 3)))),
    "solve_continuous_are": (lambda a, b, q, r: linalg.solve_continuous_are(a, b, q @ q.T + np.eye(3), r @ r.T + 1.0),
                             (M - 2 * np.eye(3), rng.normal(size=(3, 2)), rng.normal(size=(3, 3)), rng.normal(size=(2, 2)))),
    "solve_discrete_are": (lambda a, b, q, r: linalg.solve_discrete_are(a, b, q @ q.T + np.eye(3), r @ r.T + 1.0),
                           (M / 2, rng.normal(size=(3, 2)), rng.normal(size=(3, 3)), rng.normal(size=(2, 2)))),
    "toeplitz": (lambda c, r: linalg.toeplitz(c, r), (C, RR)),
    "toeplitz symmetric": (lambda c: linalg.toeplitz(c), (C,)),
    "toeplitz batched": (lambda c: linalg.toeplitz(c), (rng.normal(size=(2, 3)),)),
    "circulant": (lambda c: linalg.circulant(c), (C,)),
    "hankel": (lambda c, r: linalg.hankel(c, r), (C, RR)),
    "hankel zeros": (lambda c: linalg.hankel(c), (C,)),
    "block_diag": (lambda a, b, c: linalg.block_diag(a, b, c), (A[:2, :3], RR, np.array(2.0))),
    "companion": (lambda a: linalg.companion(a), (C,)),
    "leslie": (lambda f, s: linalg.leslie(f, s), (C, RR)),
    "fiedler": (lambda a: linalg.fiedler(a), (C,)),
    **{f"fiedler_companion {k}": (lambda a: linalg.fiedler_companion(a), (rng.normal(size=k) + 2.0,)) for k in (2, 5, 6)},
    **{f"convolution_matrix {mode} {n}": (lambda a, mode=mode, n=n: linalg.convolution_matrix(a, n, mode), (C,))
       for mode in ("full", "same", "valid") for n in (2, 6)},
    "khatri_rao": (lambda a, b: linalg.khatri_rao(a, b), (rng.normal(size=(2, 3)), rng.normal(size=(4, 3)))),
    "diagsvd": (lambda s: linalg.diagsvd(s, 4, 3), (RR,)),
    "solve_banded": (lambda ab, b: linalg.solve_banded((2, 1), ab, b), (BAND, rng.normal(size=5))),
    "solveh_banded": (lambda ab, b: linalg.solveh_banded(ab, b), (UPPER_BAND, rng.normal(size=5))),
    "solveh_banded lower": (lambda ab, b: linalg.solveh_banded(ab, b, lower=True), (LOWER_BAND, rng.normal(size=(5, 2)))),
    "cholesky_banded": (lambda ab: linalg.cholesky_banded(ab), (UPPER_BAND,)),
    "cholesky_banded lower": (lambda ab: linalg.cholesky_banded(ab, lower=True), (LOWER_BAND,)),
    "cho_solve_banded": (lambda cb, b: linalg.cho_solve_banded((cb, False), b), (L.cholesky_banded(UPPER_BAND),
                                                                                 rng.normal(size=5))),
    "cho_solve_banded lower": (lambda cb, b: linalg.cho_solve_banded((cb, True), b),
                               (L.cholesky_banded(LOWER_BAND, lower=True), rng.normal(size=5))),
    "eig_banded": (lambda ab: (linalg.eig_banded(ab)[0], linalg.eig_banded(ab)[1] ** 2), (UPPER_BAND,)),
    "eigvals_banded": (lambda ab: linalg.eigvals_banded(ab, lower=True), (LOWER_BAND,)),
    "eigh_tridiagonal": (lambda d, e: (linalg.eigh_tridiagonal(d, e)[0], linalg.eigh_tridiagonal(d, e)[1] ** 2),
                         (rng.normal(size=5), rng.normal(size=4))),
    "eigvalsh_tridiagonal": (lambda d, e: linalg.eigvalsh_tridiagonal(d, e), (rng.normal(size=5), rng.normal(size=4))),
    "solve_toeplitz": (lambda c, r, b: linalg.solve_toeplitz((c, r), b), (C + [5, 0, 0, 0], np.r_[9.0, RR],
                                                                          rng.normal(size=4))),
    "matmul_toeplitz": (lambda c, r, x: linalg.matmul_toeplitz((c, r), x), (C, RR, rng.normal(size=(3, 2)))),
    "solve_circulant": (lambda c, b: linalg.solve_circulant(c, b), (C + [5, 0, 0, 0], rng.normal(size=4))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_scipy_and_central_differences(name):
    if name == "inv pos lower" and "assume_a" not in inspect.signature(L.inv).parameters:
        pytest.skip("scipy.linalg.inv takes no assume_a in SciPy 1.15 (the newest for Python 3.10)")
    f, args = CASES[name]
    traced = pb.pullback(f, *args)[0]
    plain = f(*args)  # plain inputs: SciPy itself
    for got, want in zip(*((v if isinstance(v, tuple) else (v,)) for v in (traced, plain))):
        assert np.shape(got) == np.shape(want)
        if np.iscomplexobj(want):  # fractional_matrix_power: SciPy's complex array holds a real result
            assert np.max(np.abs(np.imag(want))) < 1e-12 and not np.iscomplexobj(got)
            want = np.real(want)
        np.testing.assert_array_equal(got, want)  # SciPy's value, to the last bit
    gradcheck(lambda *a: flat(f(*a)), *args, rtol=1e-5, atol=1e-8)
    result = check_transpose(lambda *a: flat(f(*a)), *args, rtol=1e-9, atol=1e-12, seed=2)
    assert result and result.scale > 0, result


@pytest.mark.parametrize("name", ["sqrtm", "logm", "solve_sylvester", "solve", "eigvalsh", "toeplitz",
                                  "solve_continuous_are", "solve_discrete_are"])
def test_second_order(name):
    f, args = CASES[name]
    v = [rng.normal(size=np.shape(a)) for a in args]
    gradcheck(lambda x: sum(np.sum(g * w) for g, w in zip(pb.gradient(lambda *a: np.sum(flat(f(*a)) ** 2), x,
                                                                         *args[1:]), v[:1])), args[0], rtol=1e-4,
              atol=1e-7)


def test_float32_and_keyword_options():
    a32 = A.astype(np.float32)
    g = pb.gradient(lambda a: np.sum(linalg.inv(a)), a32)[0]
    assert g.dtype == np.float32 and pb.pullback(linalg.inv, a32)[0].dtype == L.inv(a32).dtype
    np.testing.assert_allclose(g, pb.gradient(lambda a: np.sum(linalg.inv(a)), A)[0], rtol=1e-3)
    gradcheck(lambda a, b: linalg.solve(a=a, b=b, assume_a="sym", lower=True), NOISY, C)


def test_refusals_are_clear():
    with pytest.raises(NotImplementedError, match="generalized"):
        pb.gradient(lambda a: np.sum(linalg.eigh(a, SPD)[0]), SPD)
    with pytest.raises(NotImplementedError, match="subset_by_value"):
        pb.gradient(lambda a: np.sum(linalg.eigvalsh(a, subset_by_value=(0, 10))), SPD)
    with pytest.raises(NotImplementedError, match="pivoting"):
        pb.gradient(lambda a: np.sum(linalg.qr(a, pivoting=True)[0]), A)
    with pytest.raises(ValueError, match="complex"):
        pb.gradient(lambda a: np.sum(linalg.logm(a)), -np.eye(2) + 0.1 * np.eye(2)[::-1])
    with pytest.raises(NotImplementedError, match="square 2-D"):
        pb.gradient(lambda a: np.sum(linalg.lu(a)[1]), R)
    with pytest.raises(NotImplementedError, match="power t must be plain"):
        pb.gradient(lambda t: np.sum(linalg.fractional_matrix_power(M, t)), 0.5)
    with pytest.raises(NotImplementedError, match="select='a'"):
        pb.gradient(lambda d: np.sum(linalg.eigvalsh_tridiagonal(d, np.ones(2), select="i", select_range=(0, 1))),
                    np.arange(3.0))


def test_matrix_function_derivative_is_the_frechet_derivative():
    # d tr f(A) = tr(f'(A) dA): for sqrtm, ½ A^(-1/2) (transposed)
    g = pb.gradient(lambda a: np.trace(linalg.sqrtm(a)), SPD)[0]
    np.testing.assert_allclose(g, 0.5 * np.linalg.inv(L.sqrtm(SPD)).T, rtol=1e-9)
    t = rng.normal(size=(3, 3))
    _, dot = pb.jvp(linalg.logm, (M,), (t,))
    np.testing.assert_allclose(dot, (L.logm(M + 1e-6 * t) - L.logm(M - 1e-6 * t)) / 2e-6, rtol=1e-6, atol=1e-9)


def test_a_result_that_is_not_unique_is_refused():
    # a repeated eigenvalue: any rotation of its eigenvectors is an answer, and pullback's need not be SciPy's
    a = np.diag([1.0, 1.0, 2.0])
    q = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    a = q @ a @ q.T
    try:
        values, vectors = pb.pullback(lambda a: linalg.eigh(a), a)[0]
    except RuntimeError as error:
        assert "not unique" in str(error)
    else:  # the two answers happened to agree: then they are SciPy's
        np.testing.assert_array_equal(vectors, L.eigh(a)[1])
    with pytest.raises(ValueError, match="Rows of Vh beyond"):  # the extra rows of a full SVD have no gradient
        pb.gradient(lambda r: np.sum(linalg.svd(r)[2]), R.T.copy())


def _seen_values(f, *args):
    """What `f(*args)` computes inside a gradient call, as plain arrays."""
    seen = []
    pb.gradient(lambda *a: np.sum(np.abs(seen.append(pb.stop_gradient(f(*a))) or f(*a)[0])), *args)
    return seen[0]


@pytest.mark.parametrize("lower", [False, True])
def test_cho_factor_and_cho_solve_give_scipy_own_values(lower):
    # two triangular solves round unlike SciPy's one LAPACK call (potrs): this matrix showed it
    rng = np.random.default_rng(0)
    rng.normal(size=17)
    s = rng.normal(size=(4, 4))
    s = s @ s.T + 4 * np.eye(4)
    b = s[:, 0].copy()
    factor = L.cho_factor(s, lower)
    (c, flag), x = _seen_values(lambda s: linalg.cho_factor(s, lower), s), _seen_values(
        lambda s, b: linalg.cho_solve(linalg.cho_factor(s, lower), b), s, b)
    assert np.array_equal(c, factor[0]) and flag is lower
    assert np.array_equal(x, L.cho_solve(factor, b))
    gradcheck(lambda s, b: linalg.cho_solve(linalg.cho_factor(s @ s.T + np.eye(4), lower), b), s, b)


def test_lstsq_of_an_exact_fit_gives_its_residues():
    # the residue of an exact fit is rounding (about 1e-32): it agrees with SciPy's relative to b, not to itself
    a = np.random.default_rng(0).normal(size=(4, 3))
    b = a[:, 0].copy()
    expected = L.lstsq(a, b)
    x, residues, rank, s = _seen_values(lambda a, b: linalg.lstsq(a, b), a, b)
    assert np.array_equal(x, expected[0]) and rank == 3
    assert abs(float(residues) - float(expected[1])) < 1e-28
    (g,) = pb.gradient(lambda a: np.sum(linalg.lstsq(a, b)[0] ** 2), a)
    h = 1e-6
    e = np.zeros_like(a)
    e[1, 2] = h
    fd = (np.sum(L.lstsq(a + e, b)[0] ** 2) - np.sum(L.lstsq(a - e, b)[0] ** 2)) / (2 * h)
    assert np.isclose(g[1, 2], fd, rtol=1e-6)
