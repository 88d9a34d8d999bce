"""scipy.special.lambertw, complex-valued and holomorphic in z, against mpmath and central differences (in the
real and the imaginary direction, both modes); and the stacks of matrices that SciPy's solves take (solve,
solve_triangular, cho_factor/cho_solve, lu_factor/lu_solve of pullback.scipy.linalg): SciPy's values, and
derivatives in both modes against float64 central differences for every option each takes."""

import numpy as np
import pytest

import pullback as pb
from complex_checks import check_complex
from pullback.testing import assert_gradient

sps = pytest.importorskip("scipy.special")
spl = pytest.importorskip("scipy.linalg")
mpmath = pytest.importorskip("mpmath")

from pullback.scipy import linalg, special  # noqa: E402

RNG = np.random.default_rng(11)
BATCH, N = 2, 3


def _scipy_batches():
    """Whether SciPy's solves take stacks of matrices (SciPy 1.16 and newer; Python 3.10 has SciPy 1.15 at most)."""
    try:
        spl.solve(np.stack([np.eye(2)] * 2), np.ones((2, 2, 1)))
    except ValueError:
        return False
    return True


SCIPY_BATCHES = _scipy_batches()
# the tests below of stacks of matrices, and of SciPy 1.16's one-element solves (1.15's factor them)
_NEED_BATCHES = ("batched", "test_solve_with_a_one_element_matrix_divides_as_scipy_does",
                 "test_complex_transposed_solve_raises_scipys_error")


@pytest.fixture(autouse=True)
def _skip_without_scipy_batches(request):
    if not SCIPY_BATCHES and any(name in request.node.name for name in _NEED_BATCHES):
        pytest.skip("SciPy's solves take stacks of matrices from SciPy 1.16 (Python 3.10 has SciPy 1.15 at most)")


def mp_derivative(z, k, order=1):
    """The `order`-th derivative of the branch k of W at z, by mpmath's own differentiation at 30 digits."""
    with mpmath.workdps(30):
        return complex(mpmath.diff(lambda t: mpmath.lambertw(t, k), mpmath.mpmathify(z), order))


def mp_slopes(z, k, order=1):
    return np.array([mp_derivative(v, k, order) for v in np.ravel(z)]).reshape(np.shape(z))


def gradcheck(f, *args, **options):
    """Every element of f's derivative, in reverse and forward mode, against float64 central differences."""
    return assert_gradient(f, *args, dense_up_to=None, **({"rtol": 1e-5, "atol": 1e-7} | options))


def assert_scipys_value(f, scipy_f, *args):
    """The value under pb.pullback and pb.jvp is SciPy's, bit for bit."""
    expected = scipy_f(*args)
    np.testing.assert_array_equal(pb.pullback(f, *args)[0], expected, strict=True)
    np.testing.assert_array_equal(pb.jvp(f, args, tuple(np.ones_like(a) for a in args))[0], expected, strict=True)


# --- lambertw ------------------------------------------------------------------------------------
@pytest.mark.parametrize("k, x", [(0, [0.3, 2.5, 40.0, -0.2, -0.35]), (-1, [-0.3, -0.1, -1e-3]),
                                  (1, [0.5, 3.0, -0.2]), (-2, [1.5, -4.0])])
def test_lambertw_of_real_z_has_a_real_gradient_matching_mpmath(k, x):
    x = np.array(x)
    w = RNG.normal(size=x.shape) + 1j * RNG.normal(size=x.shape)  # sees the real and imaginary parts of W
    (g,) = pb.gradient(lambda x: np.real(np.sum(w * sps.lambertw(x, k))), x)
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, np.real(w * mp_slopes(x, k)), rtol=1e-10, atol=1e-14)
    value, tangent = pb.jvp(lambda x: sps.lambertw(x, k), (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(value, sps.lambertw(x, k), strict=True)
    assert tangent.dtype == np.complex128
    np.testing.assert_allclose(tangent, mp_slopes(x, k), rtol=1e-10)


@pytest.mark.parametrize("k", [0, 1, -1, 2])
def test_lambertw_of_complex_z_against_central_differences(k):
    z = RNG.normal(size=(2, 3)) + 1j * RNG.normal(size=(2, 3)) + 1.0  # off the branch cuts on the real axis
    check_complex(lambda z: sps.lambertw(z, k), z, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("k", [0, 1, -1])
def test_jacobian_of_lambertw_is_its_complex_derivative(k):
    z = 0.3 + 0.7j
    (j,) = pb.jacobian(lambda z: sps.lambertw(z, k), z)
    np.testing.assert_allclose(j, mp_derivative(z, k), rtol=1e-11)


def test_lambertw_at_zero_has_slope_one_and_curvature_minus_two():
    # W(z) = z - z² + 3z³/2 - ... on the principal branch
    assert pb.gradient(lambda x: np.real(sps.lambertw(x)), 0.0) == (1.0,)
    _, tangent = pb.jvp(sps.lambertw, (0j,), (1.0 + 0j,))
    assert tangent == 1.0
    assert pb.hessian(lambda x: np.real(sps.lambertw(x)), 0.0) == -2.0
    x = np.array([0.0, 0.8, -0.1])
    (g,) = pb.gradient(lambda x: np.sum(np.real(sps.lambertw(x))), x)
    np.testing.assert_allclose(g, np.real(mp_slopes(x, 0)), rtol=1e-12)


@pytest.mark.parametrize("x", [0.7, -0.2, 12.0])
def test_second_derivative_of_lambertw_matches_mpmath(x):
    h = pb.hessian(lambda x: np.real(sps.lambertw(x)), x)
    np.testing.assert_allclose(h, np.real(mp_derivative(x, 0, order=2)), rtol=1e-9)


def test_lambertw_at_its_branch_point():
    # SciPy's W is NaN at the float nearest -1/e, and so is its derivative there
    at = -np.exp(-1.0)
    assert np.isnan(sps.lambertw(at))
    with np.errstate(invalid="ignore"):
        (g,) = pb.gradient(lambda x: np.real(sps.lambertw(x)), at)
    assert np.isnan(g)
    # near it the derivative grows without bound, as 1 / sqrt(2 e (z + 1/e))
    near = at + 1e-6
    (g,) = pb.gradient(lambda x: np.real(sps.lambertw(x)), near)
    assert g > 1e3
    np.testing.assert_allclose(g, np.real(mp_derivative(near, 0)), rtol=1e-8)


def test_branch_and_tolerance_carry_no_gradient():
    g = pb.gradient(lambda z, tol: np.real(sps.lambertw(z, 0, tol)), 0.5, 1e-8)
    assert g[1] is None
    np.testing.assert_allclose(g[0], np.real(mp_derivative(0.5, 0)), rtol=1e-12)
    g = pb.gradient(lambda z, k: np.imag(sps.lambertw(z, k)), 0.5, np.int64(1))
    assert g[1] is None
    np.testing.assert_allclose(g[0], np.imag(mp_derivative(0.5, 1)), rtol=1e-12)


def test_lambertw_dtypes():
    x32 = np.array([0.5, 2.0], np.float32)
    (g,) = pb.gradient(lambda x: np.sum(np.real(sps.lambertw(x))), x32)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.real(mp_slopes(x32.astype(np.float64), 0)), rtol=1e-5)
    z64 = np.array([0.5 + 0.5j, 2.0 - 1.0j], np.complex64)
    (g,) = pb.gradient(lambda z: np.sum(np.abs(sps.lambertw(z)) ** 2), z64)
    assert g.dtype == np.complex64
    for v in (x32, z64):  # SciPy's dtype (its loop takes tol as a double)
        np.testing.assert_array_equal(pb.pullback(sps.lambertw, v)[0], sps.lambertw(v), strict=True)


def test_lambertw_is_scipys_own_and_works_under_jit():
    assert special.lambertw is sps.lambertw and "lambertw" in special.__all__
    jitted = pb.jit(pb.grad(lambda x: np.sum(np.real(sps.lambertw(x)))))
    for x in (np.array([0.5, 1.0]), np.array([0.2, 3.0])):
        np.testing.assert_allclose(jitted(x), np.real(mp_slopes(x, 0)), rtol=1e-12)


# --- batched solves: matrices ---------------------------------------------------------------------
def dominant(shape, rng=RNG, complex_=False):
    """Diagonally dominant matrices: each triangle, band and diagonal of them is well conditioned."""
    m = 0.3 * rng.normal(size=shape)
    if complex_:
        m = m + 0.3j * rng.normal(size=shape)
    return m + 2.0 * np.eye(shape[-1])


def positive_definite(shape, rng=RNG, complex_=False):
    m = dominant(shape, rng, complex_) - 2.0 * np.eye(shape[-1])
    return 0.5 * (m + np.conj(np.swapaxes(m, -1, -2))) + 2.0 * np.eye(shape[-1])


def noise_outside(s, lower):
    """`s` with noise in the strict triangle a `lower` read leaves out: a rule reading it gets another gradient."""
    noise = RNG.normal(size=s.shape)
    return s + (np.triu(noise, 1) if lower else np.tril(noise, -1))


KINDS = [None, "gen", "sym", "her", "pos", "diagonal", "tridiagonal", "upper triangular", "lower triangular",
         "banded"]


# --- solve --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_batched_solve_for_every_option(kind, lower, transposed):
    a = noise_outside(positive_definite((BATCH, N, N)), lower)
    for b in (RNG.normal(size=N), RNG.normal(size=(BATCH, N, 2))):  # one vector for every matrix; a stack
        def f(a, b):
            return linalg.solve(a, b, lower=lower, assume_a=kind, transposed=transposed)

        def scipys(a, b):
            return spl.solve(a, b, lower=lower, assume_a=kind, transposed=transposed)

        assert_scipys_value(f, scipys, a, b)
        gradcheck(f, a, b)


def test_batched_solve_broadcasts_leading_axes():
    a, b = dominant((BATCH, 1, N, N)), RNG.normal(size=(3, N, 2))
    assert linalg.solve(a, b).shape == (BATCH, 3, N, 2)
    assert_scipys_value(linalg.solve, spl.solve, a, b)
    gradcheck(linalg.solve, a, b)
    a, b = dominant((N, N)), RNG.normal(size=(BATCH, N, 2))  # one matrix, a stack of right-hand sides
    assert_scipys_value(linalg.solve, spl.solve, a, b)
    gradcheck(linalg.solve, a, b)


def test_solve_with_a_one_element_matrix_divides_as_scipy_does():
    for a, b in ((np.array([[2.5]]), RNG.normal(size=4)), (np.array([[-1.5]]), RNG.normal(size=(1, 3))),
                 (np.array([[[0.5]]]), RNG.normal(size=5))):
        assert_scipys_value(lambda a, b: linalg.solve(a, b, assume_a="pos"),
                            lambda a, b: spl.solve(a, b, assume_a="pos"), a, b)
        gradcheck(lambda a, b: linalg.solve(a, b, assume_a="pos"), a, b)
        (ga, gb) = pb.gradient(lambda a, b: np.sum(linalg.solve(a, b)), a, b)
        np.testing.assert_allclose(gb, np.full(b.shape, 1.0 / a[0, 0]))  # d(b / a)/db = 1 / a
        np.testing.assert_allclose(ga, -np.sum(b) / a ** 2)


@pytest.mark.parametrize("kind", ["gen", "her", "pos"])
def test_batched_solve_of_complex_matrices(kind):
    a = noise_outside(positive_definite((BATCH, N, N), complex_=True), True)
    b = RNG.normal(size=(BATCH, N, 1)) + 1j * RNG.normal(size=(BATCH, N, 1))
    check_complex(lambda a, b: linalg.solve(a, b, lower=True, assume_a=kind), a, b, rtol=1e-6, atol=1e-8)


def test_complex_transposed_solve_raises_scipys_error():
    a = dominant((BATCH, N, N), complex_=True)
    with pytest.raises(NotImplementedError, match="complex matrices"):
        pb.gradient(lambda a: np.abs(np.sum(linalg.solve(a, np.ones(N), transposed=True))), a)


def test_second_derivatives_through_a_batched_solve():
    a, b = dominant((BATCH, N, N)), RNG.normal(size=N)
    gradcheck(lambda a: np.sum(linalg.solve(a, b, assume_a="sym") ** 2), a, order=2, rtol=1e-4, atol=1e-6)


def test_batched_solve_under_jit():
    a = dominant((BATCH, N, N))
    jitted = pb.jit(pb.grad(lambda b: np.sum(linalg.solve(a, b) ** 2)))
    for b in (RNG.normal(size=N), RNG.normal(size=N)):
        np.testing.assert_allclose(jitted(b), pb.gradient(lambda b: np.sum(linalg.solve(a, b) ** 2), b)[0],
                                   rtol=1e-12)


# --- solve_triangular -------------------------------------------------------------------------------------
@pytest.mark.parametrize("unit_diagonal", [False, True])
@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("trans", [0, 1, 2, "N", "T", "C"])
def test_batched_solve_triangular_for_every_option(trans, lower, unit_diagonal):
    a = dominant((BATCH, N, N))  # both triangles full: the one not read must get no gradient
    for b in (RNG.normal(size=N), RNG.normal(size=(BATCH, N, 2))):
        def f(a, b):
            return linalg.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal)

        def scipys(a, b):
            return spl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal)

        assert_scipys_value(f, scipys, a, b)
        gradcheck(f, a, b)


@pytest.mark.parametrize("trans", [0, 1, 2])
def test_batched_solve_triangular_of_complex_matrices(trans):
    a = dominant((BATCH, N, N), complex_=True)
    b = RNG.normal(size=N) + 1j * RNG.normal(size=N)
    check_complex(lambda a, b: linalg.solve_triangular(a, b, trans=trans, lower=True), a, b, rtol=1e-6, atol=1e-8)


def test_solve_triangular_of_one_matrix_rounds_as_scipy_does():
    for _ in range(10):  # trans=2 ("C") of a real matrix takes another LAPACK path than trans=1 in SciPy
        a, b = dominant((4, 4)), RNG.normal(size=4)
        for trans in (0, 1, 2):
            assert_scipys_value(lambda a, b: linalg.solve_triangular(a, b, trans=trans),
                                lambda a, b: spl.solve_triangular(a, b, trans=trans), a, b)


def test_batched_solve_triangular_broadcasts_leading_axes():
    a, b = dominant((BATCH, 1, N, N)), RNG.normal(size=(3, N, 1))
    f = lambda a, b: linalg.solve_triangular(a, b, lower=True)  # noqa: E731
    assert_scipys_value(f, lambda a, b: spl.solve_triangular(a, b, lower=True), a, b)
    gradcheck(f, a, b)


# --- cho_factor and cho_solve ----------------------------------------------------------------------------
@pytest.mark.parametrize("lower", [False, True])
def test_batched_cho_factor_gives_scipys_list_and_its_derivatives(lower):
    s = noise_outside(positive_definite((BATCH, N, N)), lower)
    c, flags = pb.pullback(lambda s: linalg.cho_factor(s, lower)[0], s)[0], linalg.cho_factor(s, lower)[1]
    expected = spl.cho_factor(s, lower)
    np.testing.assert_array_equal(c, expected[0], strict=True)
    np.testing.assert_array_equal(flags, expected[1], strict=True)
    traced = []
    pb.gradient(lambda s: traced.append(linalg.cho_factor(s, lower)) or np.sum(traced[-1][0]), s)
    assert type(traced[0]) is list and type(expected) is list
    gradcheck(lambda s: linalg.cho_factor(s, lower)[0], s)


@pytest.mark.parametrize("lower", [False, True])
def test_batched_cho_solve_for_both_triangles(lower):
    s = noise_outside(positive_definite((BATCH, N, N)), lower)
    c = spl.cho_factor(s, lower)[0]
    for b in (RNG.normal(size=N), RNG.normal(size=(BATCH, N, 2))):
        assert_scipys_value(lambda c, b: linalg.cho_solve((c, lower), b), lambda c, b: spl.cho_solve((c, lower), b),
                            c, b)
        gradcheck(lambda c, b: linalg.cho_solve((c, lower), b), c, b)
        gradcheck(lambda s, b: linalg.cho_solve(linalg.cho_factor(s, lower), b), s, b)


def test_batched_cho_solve_takes_scipys_flags_and_broadcasts():
    s = positive_definite((BATCH, 1, N, N))
    factors = spl.cho_factor(s, lower=True)  # [c, an array of flags]
    b = RNG.normal(size=(3, N, 2))
    assert_scipys_value(lambda b: linalg.cho_solve(factors, b), lambda b: spl.cho_solve(factors, b), b)
    gradcheck(lambda b: linalg.cho_solve(factors, b), b)
    gradcheck(lambda s, b: linalg.cho_solve(linalg.cho_factor(s), b), s, b)


def test_batched_cho_solve_refusals_name_the_fix():
    c = spl.cho_factor(positive_definite((BATCH, N, N)))[0]
    with pytest.raises(ValueError, match="hold both triangles.*one cho_factor"):
        pb.gradient(lambda b: np.sum(linalg.cho_solve((c, np.array([True, False])), b)), np.ones(N))
    with pytest.raises(TypeError, match="cho_solve of complex values.*np.linalg.solve"):
        pb.gradient(lambda b: np.sum(np.abs(linalg.cho_solve((c, True), b))), np.ones(N) + 1j)


# --- lu_factor and lu_solve --------------------------------------------------------------------------------
@pytest.mark.parametrize("trans", [0, 1, 2])
def test_batched_lu_solve_for_every_trans(trans):
    a = RNG.normal(size=(BATCH, N, N)) + np.eye(N)  # pivoting matters
    lu, piv = spl.lu_factor(a)
    for b in (RNG.normal(size=N), RNG.normal(size=(BATCH, N, 2))):
        f = lambda lu, b: linalg.lu_solve((lu, piv), b, trans=trans)  # noqa: E731
        value = pb.pullback(f, lu, b)[0]
        np.testing.assert_allclose(value, spl.lu_solve((lu, piv), b, trans=trans), rtol=1e-13, atol=1e-15)
        gradcheck(f, lu, b)
        gradcheck(lambda a, b: linalg.lu_solve(linalg.lu_factor(a), b, trans=trans), a, b)


def test_batched_lu_factor_gives_scipys_list_and_its_derivative():
    a = RNG.normal(size=(BATCH, 2, N, N))
    traced = []
    pb.gradient(lambda a: traced.append(linalg.lu_factor(a)) or np.sum(traced[-1][0]), a)
    expected = spl.lu_factor(a)
    assert type(traced[0]) is list and type(expected) is list
    np.testing.assert_array_equal(pb.pullback(lambda a: linalg.lu_factor(a)[0], a)[0], expected[0], strict=True)
    np.testing.assert_array_equal(traced[0][1], expected[1], strict=True)
    gradcheck(lambda a: linalg.lu_factor(a)[0], a)


def test_batched_lu_solve_broadcasts_leading_axes():
    a = RNG.normal(size=(BATCH, 1, N, N)) + np.eye(N)
    lu, piv = spl.lu_factor(a)
    b = RNG.normal(size=(3, N, 2))
    np.testing.assert_allclose(pb.pullback(lambda b: linalg.lu_solve((lu, piv), b), b)[0], spl.lu_solve((lu, piv), b),
                               rtol=1e-13)
    gradcheck(lambda lu, b: linalg.lu_solve((lu, piv), b), lu, b)
    one, one_piv = spl.lu_factor(a[0, 0])  # one matrix, a stack of right-hand sides
    np.testing.assert_allclose(pb.pullback(lambda b: linalg.lu_solve((one, one_piv), b), b)[0],
                               spl.lu_solve((one, one_piv), b), rtol=1e-13)
    gradcheck(lambda lu, b: linalg.lu_solve((lu, one_piv), b, trans=1), one, b)


def test_second_derivatives_through_a_batched_lu_solve():
    a, b = RNG.normal(size=(BATCH, N, N)) + 2.0 * np.eye(N), RNG.normal(size=N)
    gradcheck(lambda a: np.sum(linalg.lu_solve(linalg.lu_factor(a), b) ** 2), a, order=2, rtol=1e-4, atol=1e-6)


def test_lu_solve_refuses_the_letters_scipys_refuses():
    lu, piv = spl.lu_factor(dominant((N, N)))
    with pytest.raises(ValueError):
        spl.lu_solve((lu, piv), np.ones(N), trans="T")
    for factors in ((lu, piv), spl.lu_factor(dominant((BATCH, N, N)))):
        with pytest.raises(ValueError, match="trans 0, 1 or 2, not 'T': pass 0 for 'N', 1 for 'T'"):
            pb.gradient(lambda b: np.sum(linalg.lu_solve(factors, b, trans="T")), np.ones(N))


def test_batched_lu_refusals_name_the_fix():
    with pytest.raises(ValueError, match="square matrices.*pullback.scipy.linalg.lu"):
        pb.gradient(lambda a: np.sum(linalg.lu_factor(a)[0]), np.ones((BATCH, N, N + 1)))
    with pytest.raises(ValueError, match="zero-size batches"):
        pb.gradient(lambda a: np.sum(linalg.lu_factor(a)[0]), np.ones((0, N, N)))
    with pytest.raises(ValueError, match="zero-size batches"):  # as SciPy's own
        spl.lu_factor(np.ones((0, N, N)))
