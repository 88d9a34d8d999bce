"""pullback.scipy.linalg's factorizations and solves inside pb.jit: plain calls, gradients and pb.jvp, each
compared with the same call run eagerly (SciPy's own values, pb.gradient's) and with finite differences."""

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient

scipy_linalg = pytest.importorskip("scipy.linalg")
import pullback.scipy.linalg as sl  # noqa: E402

RNG = np.random.default_rng(0)
A = RNG.normal(size=(4, 4)) + 4 * np.eye(4)
B = RNG.normal(size=4)
TANGENT_A = RNG.normal(size=(4, 4))
TANGENT_B = RNG.normal(size=4)
SHIFTS = (0.0, 1.0)  # two calls of one jitted function, with different values


def _spd(a):
    return a @ a.T + 4 * np.eye(4)


FACTORED_SOLVES = {
    "lu_solve(lu_factor)": lambda a, b: sl.lu_solve(sl.lu_factor(a), b),
    "lu_solve(lu_factor, trans=1)": lambda a, b: sl.lu_solve(sl.lu_factor(a), b, trans=1),
    "lu_solve(lu_factor, matrix b)": lambda a, b: sl.lu_solve(sl.lu_factor(a), np.stack([b, 2 * b], 1)),
    "cho_solve(cho_factor)": lambda a, b: sl.cho_solve(sl.cho_factor(a @ a.T), b),
    "cho_solve(cho_factor, lower)": lambda a, b: sl.cho_solve(sl.cho_factor(a @ a.T, lower=True), b),
    "solve_triangular(trans=1)": lambda a, b: sl.solve_triangular(np.triu(a), b, trans=1),
    "solve_triangular(lower)": lambda a, b: sl.solve_triangular(np.tril(a), b, lower=True),
    "solve_triangular(matrix b)": lambda a, b: sl.solve_triangular(np.triu(a), np.stack([b, 2 * b], 1)),
    "lu_factor": lambda a, b: sl.lu_factor(a)[0] + b,
    "cho_factor": lambda a, b: sl.cho_factor(_spd(a))[0] + b,
    "expm": lambda a, b: sl.expm(a / 4) @ b,
}

DECOMPOSITIONS = {
    "lu": lambda a, b: sl.lu(a),
    "lu(permute_l)": lambda a, b: sl.lu(a, permute_l=True),
    "lu(p_indices)": lambda a, b: sl.lu(a, p_indices=True)[1:],
    "qr": lambda a, b: sl.qr(a),
    "qr(economic)": lambda a, b: sl.qr(a[:, :3], mode="economic"),
    "svd": lambda a, b: sl.svd(a),
    "svd(compute_uv=False)": lambda a, b: sl.svd(a, compute_uv=False),
    "eigh": lambda a, b: sl.eigh(_spd(a)),
    "cholesky": lambda a, b: sl.cholesky(_spd(a)),
    "cholesky(lower)": lambda a, b: sl.cholesky(_spd(a), lower=True),
    "inv": lambda a, b: sl.inv(a),
    "det": lambda a, b: sl.det(a),
}
for _assume_a in ("gen", "sym", "her", "pos", "diagonal", "tridiagonal", "upper triangular", "lower triangular"):
    for _lower in (False, True):
        DECOMPOSITIONS[f"solve(assume_a={_assume_a!r}, lower={_lower})"] = (
            lambda assume_a, lower: lambda a, b: sl.solve(_spd(a) if assume_a in ("sym", "her", "pos") else a, b,
                                                          assume_a=assume_a, lower=lower))(_assume_a, _lower)

ALL = {**FACTORED_SOLVES, **DECOMPOSITIONS}


def _outputs(result):
    """The float arrays of a result (a tuple's parts; integer pivots are not differentiated)."""
    parts = result if isinstance(result, (tuple, list)) else (result,)
    return [p for p in parts if np.result_type(pb.stop_gradient(p)).kind == "f"]


def _weighted_sum(fn):
    """A scalar of every float output of `fn`, each entry weighted differently."""
    def loss(a, b):
        total = 0.0
        for x in _outputs(fn(a, b)):
            total = total + np.sum(np.cos(np.arange(np.size(x)).reshape(np.shape(x)) + 1.0) * x)
        return total
    return loss


def _assert_all_close(got, expected, rtol=0.0):
    """Equal to `rtol` (by default bit for bit: a plain call runs SciPy's own function)."""
    got = got if isinstance(got, (tuple, list)) else (got,)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if e is None:
            assert g is None
        else:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=0.0 if rtol == 0.0 else 1e-13)


@pytest.mark.parametrize("name", list(ALL))
def test_plain_call_inside_jit_matches_eager_call(name):
    fn = ALL[name]
    jitted = pb.jit(fn)
    for shift in SHIFTS:
        _assert_all_close(jitted(A + shift, B), fn(A + shift, B))


@pytest.mark.parametrize("name", list(ALL))
def test_gradient_inside_jit_matches_eager_gradient(name):
    loss = _weighted_sum(ALL[name])
    jitted = pb.jit(lambda a, b: pb.gradient(loss, a, b))
    for shift in SHIFTS:
        _assert_all_close(jitted(A + shift, B), pb.gradient(loss, A + shift, B), rtol=1e-10)


@pytest.mark.parametrize("name", list(ALL))
def test_jvp_inside_jit_matches_eager_jvp(name):
    loss = _weighted_sum(ALL[name])
    jvp = lambda a, b: pb.jvp(loss, (a, b), (TANGENT_A, TANGENT_B))  # noqa: E731
    jitted = pb.jit(jvp)
    for shift in SHIFTS:
        _assert_all_close(jitted(A + shift, B), jvp(A + shift, B), rtol=1e-10)


@pytest.mark.parametrize("name", list(FACTORED_SOLVES))
def test_gradient_inside_jit_matches_finite_differences(name):
    loss = _weighted_sum(FACTORED_SOLVES[name])
    jitted = pb.jit(lambda a, b: pb.gradient(loss, a, b))
    for shift in SHIFTS:
        got = jitted(A + shift, B)
        expected = numerical_gradient(loss, A + shift, B)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)


def test_lu_factor_inside_jit_gives_scipy_factor_and_pivots_bit_for_bit():
    jitted = pb.jit(lambda a: sl.lu_factor(a))
    for a in (A, A[::-1]):  # the second needs row swaps unlike the first
        lu, piv = jitted(a)
        expected_lu, expected_piv = scipy_linalg.lu_factor(a)
        np.testing.assert_array_equal(lu, expected_lu)
        np.testing.assert_array_equal(piv, expected_piv)


def test_lu_solve_gradient_inside_jit_follows_new_pivots():
    loss = _weighted_sum(lambda a, b: sl.lu_solve(sl.lu_factor(a), b))
    jitted = pb.jit(lambda a, b: pb.gradient(loss, a, b))
    for a in (A, A[::-1]):
        _assert_all_close(jitted(a, B), numerical_gradient(loss, a, B), rtol=1e-5)


@pytest.mark.parametrize("lower", [False, True])
def test_cho_factor_inside_jit_returns_scipy_factor_and_lower_flag(lower):
    jitted = pb.jit(lambda a: sl.cho_factor(a, lower=lower))
    for shift in SHIFTS:
        spd = _spd(A + shift)
        c, flag = jitted(spd)
        expected_c, expected_flag = scipy_linalg.cho_factor(spd, lower=lower)
        np.testing.assert_array_equal(c, expected_c)
        assert flag is expected_flag


def test_second_derivative_of_lu_solve_inside_jit_matches_eager():
    loss = _weighted_sum(lambda a, b: sl.lu_solve(sl.lu_factor(a), b))
    hessian_vector = lambda a, b: pb.jvp(lambda a: pb.gradient(loss, a, b)[0], (a,), (TANGENT_A,))  # noqa: E731
    jitted = pb.jit(hessian_vector)
    for shift in SHIFTS:
        _assert_all_close(jitted(A + shift, B), hessian_vector(A + shift, B), rtol=1e-9)


@pytest.mark.parametrize("trans", [0, 1])
def test_lu_solve_gradient_inside_jit_with_a_constant_right_hand_side(trans):
    def loss(a):
        return np.sum(np.cos(sl.lu_solve(sl.lu_factor(a), B, trans=trans)))

    jitted = pb.jit(lambda a: pb.gradient(loss, a)[0])
    for a in (A, A[::-1]):
        np.testing.assert_allclose(jitted(a), numerical_gradient(loss, a)[0], rtol=1e-5, atol=1e-8)


def test_hessian_of_lu_solve_inside_jit_matches_eager_hessian():
    def loss(a):
        return np.sum(np.sin(sl.lu_solve(sl.lu_factor(a), B)))

    jitted = pb.jit(lambda a: pb.hessian(loss, a))
    for a in (A, A[::-1]):
        np.testing.assert_allclose(jitted(a), pb.hessian(loss, a), rtol=1e-10, atol=1e-13)
