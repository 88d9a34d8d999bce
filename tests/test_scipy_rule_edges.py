"""SciPy-facing rules at the edges of their domains, where a derivative was once silently wrong (or NaN):
degrees, orders and parameters at poles and boundaries, complex arguments, large cotangents.

Each reference is computed independently of pullback: SciPy's own value, mpmath, an exact identity,
or SciPy's own Fréchet derivative.
"""

import math
import warnings

import numpy as np
import pytest

import pullback as pb

sp = pytest.importorskip("scipy.special")
sl = pytest.importorskip("scipy.linalg")


# --- scipy.special: orthogonal polynomials of a degree below 1 -------------------------------------
def test_eval_legendre_derivative_for_noninteger_degree_below_one():
    # mpmath: diff(legenp(0.5, 0, x), 0.3) = 0.4946189674967736 (FD of SciPy's value agrees to 1e-10)
    g = pb.gradient(lambda x: sp.eval_legendre(0.5, x), 0.3)[0]
    assert g == pytest.approx(0.4946189674967736, rel=1e-9)


def test_eval_laguerre_derivative_for_noninteger_degree_below_one():
    # d/dx L_n(x) = -L^(1)_{n-1}(x) for any real n; SciPy's own eval_genlaguerre gives the reference
    g = pb.gradient(lambda x: sp.eval_laguerre(0.5, x), 0.7)[0]
    assert g == pytest.approx(-sp.eval_genlaguerre(-0.5, 1.0, 0.7), rel=1e-9)


def test_eval_legendre_derivative_for_negative_integer_degree():
    # SciPy: P_{-3} = P_2 = (3x² - 1)/2, whose derivative at 0.3 is 3·0.3 = 0.9
    assert sp.eval_legendre(-3, 0.3) == pytest.approx((3 * 0.09 - 1) / 2)
    g = pb.gradient(lambda x: sp.eval_legendre(-3, x), 0.3)[0]
    assert g == pytest.approx(0.9, rel=1e-12)


def test_eval_legendre_second_derivative_for_degree_between_one_and_two():
    # mpmath: diff(legenp(1.5, 0, x), 0.3, 2) = 1.1610751601498976
    h = pb.gradient(lambda t: pb.gradient(lambda x: sp.eval_legendre(1.5, x), t)[0], 0.3)[0]
    assert h == pytest.approx(1.1610751601498976, rel=1e-8)


# --- scipy.special: Struve functions of negative half-integer order -----------------------------------
@pytest.mark.parametrize("name, expected", [("struve", 0.20873414478842509), ("modstruve", 0.8537813433717353)])
def test_struve_derivative_at_negative_half_integer_order(name, expected):
    # mpmath: diff(struveh(-2.5, x), 2.3) and diff(struvel(-2.5, x), 2.3); 1/Γ(v + 3/2) is 0 there, not NaN
    g = pb.gradient(lambda x: getattr(sp, name)(-2.5, x), 2.3)[0]
    assert g == pytest.approx(expected, rel=1e-8)


def test_struve_second_derivative_at_order_minus_three_halves():
    # mpmath: diff(struveh(-1.5, x), 2.3, 2) = 0.322277904831839
    h = pb.gradient(lambda t: pb.gradient(lambda x: sp.struve(-1.5, x), t)[0], 2.3)[0]
    assert h == pytest.approx(0.322277904831839, rel=1e-8)


# --- scipy.special: it2j0y0 / it2i0k0 at 0 -----------------------------------------------------------
@pytest.mark.parametrize("name", ["it2j0y0", "it2i0k0"])
def test_it2_integrals_derivative_at_zero(name):
    # d/dx ∫_0^x (1 - J0(t))/t dt = (1 - J0(x))/x -> 0 as x -> 0 (it is 0 at x = 1e-9 here too)
    from pullback.scipy import special

    g = pb.gradient(lambda x: getattr(special, name)(x)[0], 0.0)[0]
    assert g == 0.0


# --- scipy.stats: von Mises at kappa = 0 ---------------------------------------------------------------
def test_vonmises_logpdf_derivative_in_kappa_at_zero():
    # logpdf = κ cos x - log(2π I0(κ)): d/dκ = cos x - I1(κ)/I0(κ) = cos x at κ = 0 (κ ≥ 0: the right
    # derivative; SciPy's own one-sided difference gives 0.5403023)
    from pullback.scipy import stats

    g = pb.gradient(lambda k: stats.vonmises.logpdf(1.0, k), 0.0)[0]
    assert g == pytest.approx(math.cos(1.0), rel=1e-9)


# --- scipy.linalg: conjugate-transposed solves of complex matrices -------------------------------------
def _complex_triangular():
    rng = np.random.default_rng(0)
    a = np.triu(rng.normal(size=(3, 3)) + 1j * rng.normal(size=(3, 3))) + 3 * np.eye(3)
    b = rng.normal(size=3) + 1j * rng.normal(size=3)
    return a, b


@pytest.mark.parametrize("trans", [2, "C"])
def test_solve_triangular_conjugate_transpose_value(trans):
    from pullback.scipy import linalg

    a, b = _complex_triangular()
    expected = sl.solve_triangular(a, b, trans=trans)  # solves aᴴ x = b
    value = pb.jvp(lambda bb: linalg.solve_triangular(a, bb, trans=trans), (b,), (b,))[0]
    np.testing.assert_allclose(value, expected, rtol=1e-12)


def test_lu_solve_conjugate_transpose_value():
    from pullback.scipy import linalg

    a, b = _complex_triangular()
    a = a + np.tril(a.T, -1)
    factor = sl.lu_factor(a)
    expected = sl.lu_solve(factor, b, trans=2)  # solves aᴴ x = b
    value = pb.jvp(lambda bb: linalg.lu_solve(factor, bb, trans=2), (b,), (b,))[0]
    np.testing.assert_allclose(value, expected, rtol=1e-12)


# --- scipy.linalg: matrix functions' derivative with a large cotangent -----------------------------------
def test_expm_gradient_with_large_cotangent():
    from pullback.scipy import linalg

    a = np.random.default_rng(2).normal(size=(3, 3))
    # d sum(expm(A)) / dA = L(Aᵀ, ones): SciPy's own Fréchet derivative
    expected = sl.expm_frechet(a.T, np.ones((3, 3)))[1]
    scale = 1e20  # the gradient is linear in the cotangent
    g = pb.gradient(lambda m: scale * np.sum(linalg.expm(m)), a)[0] / scale
    np.testing.assert_allclose(g, expected, rtol=1e-8)


def test_cosm_gradient_with_large_cotangent_is_finite():
    from pullback.scipy import linalg

    rng = np.random.default_rng(2)
    m = rng.normal(size=(3, 3))
    a = 0.3 * (m @ m.T + np.eye(3))
    unit = pb.gradient(lambda x: np.sum(linalg.cosm(x)), a)[0]
    big = pb.gradient(lambda x: 1e100 * np.sum(linalg.cosm(x)), a)[0]
    np.testing.assert_allclose(big / 1e100, unit, rtol=1e-8)


# --- scipy.spatial: minkowski with p = inf --------------------------------------------------------------
def test_pdist_minkowski_p_inf_gradient():
    from pullback.scipy.spatial import distance

    x = np.array([[0.0, 0.0], [3.0, 1.0]])
    assert distance.pdist(x, "minkowski", p=np.inf)[0] == 3.0  # SciPy: the Chebyshev distance
    g = pb.gradient(lambda v: distance.pdist(v, "minkowski", p=np.inf)[0], x)[0]
    np.testing.assert_array_equal(g, [[-1.0, 0.0], [1.0, 0.0]])  # d max|u - v| (unique maximum)


# --- scipy.special: exponentially scaled Bessel functions of complex z ----------------------------------
@pytest.mark.parametrize("name", ["jve", "yve", "ive"])
def test_scaled_bessel_functions_of_complex_z_are_refused(name):
    # jve(v, z) = jv(v, z)·exp(-|Im z|) (ive: exp(-|Re z|)) has no complex derivative; the rule read it as jv's
    with pytest.raises(TypeError, match="no complex derivative"):
        pb.gradient(lambda t: np.real(getattr(sp, name)(1.5, t)), 0.8 + 0.6j)
    x = 0.8  # real z: the derivative of jv, yv, iv·exp(-|z|)
    g = pb.gradient(lambda t: getattr(sp, name)(1.5, t), x)[0]
    assert g == pytest.approx((getattr(sp, name)(1.5, x + 1e-6) - getattr(sp, name)(1.5, x - 1e-6)) / 2e-6, rel=1e-7)


# --- scipy.special: Student's t distribution function in df, for large df -------------------------------
def test_stdtr_derivative_in_df_for_large_df():
    # mpmath (50 digits): d/d(df) of 1/2 + t Γ((df+1)/2)/(√(π df) Γ(df/2)) 2F1(1/2, (df+1)/2; 3/2; -t²/df) at
    # df = 1e6, t = 1.5 is 1.578495069193939e-13; a central difference of SciPy's stdtr (step 100) gives 1.5784929e-13
    g = pb.gradient(lambda df: sp.stdtr(df, 1.5), 1e6)[0]
    assert g == pytest.approx(1.578495069193939e-13, rel=1e-6, abs=0.0)


# --- scipy.special: poch at a zero of the rising factorial ---------------------------------------------
@pytest.mark.parametrize("z, m, expected", [(0.0, 3.0, 2.0), (-1.0, 2.0, -1.0)])
def test_poch_derivative_in_z_at_nonpositive_integer(z, m, expected):
    # poch(z, m) for integer m is the polynomial z (z + 1) ... (z + m - 1): d/dz z(z+1)(z+2) = 2 at 0,
    # d/dz z(z+1) = -1 at -1 (SciPy's value there is 0, and its central difference agrees)
    g = pb.gradient(lambda t: sp.poch(t, m), z)[0]
    assert g == pytest.approx(expected, rel=1e-9)


def test_t_logpdf_derivative_in_df_for_large_df():
    # mpmath (50 digits): d/d(df) of lgamma((df+1)/2) - lgamma(df/2) - log(π df)/2 - (df+1)/2 log1p(x²/df) at
    # x = 1.5, df = 1e8 is 1.0937501265624959e-17; SciPy's own t.logpdf, differenced with step 1e5, gives 1.094e-17
    from pullback.scipy import stats

    g = pb.gradient(lambda df: stats.t.logpdf(1.5, df), 1e8)[0]
    assert g == pytest.approx(1.0937501265624959e-17, rel=1e-3, abs=0.0)


# --- scipy.stats: probability mass at the edge of the parameter space ----------------------------------------
@pytest.mark.parametrize("name, args, expected", [
    ("bernoulli", (), 1.0),  # pmf(1) = p
    ("binom", (5,), 5.0),  # pmf(1) = 5 p (1 - p)^4
    ("poisson", (), 1.0),  # pmf(1) = mu e^-mu
])
def test_pmf_derivative_at_zero_probability(name, args, expected):
    # p = 0 (mu = 0) is a valid parameter for SciPy (its argcheck is p >= 0) and each mass is a polynomial (or
    # mu e^-mu) there; exact derivatives from the closed forms
    from pullback.scipy import stats

    g = pb.gradient(lambda p: getattr(stats, name).pmf(1, *args, p), 0.0)[0]
    assert g == pytest.approx(expected, rel=1e-12)


# --- more of the same edges: every family of orthogonal polynomials, higher orders, the other edge ---------
POLYNOMIALS = {
    "eval_legendre": lambda n, x: sp.eval_legendre(n, x), "eval_chebyt": sp.eval_chebyt, "eval_chebyu": sp.eval_chebyu,
    "eval_chebyc": sp.eval_chebyc, "eval_chebys": sp.eval_chebys, "eval_laguerre": sp.eval_laguerre,
    "eval_genlaguerre": lambda n, x: sp.eval_genlaguerre(n, 0.7, x),
    "eval_gegenbauer": lambda n, x: sp.eval_gegenbauer(n, 0.7, x),
    "eval_jacobi": lambda n, x: sp.eval_jacobi(n, 0.7, 0.4, x), "eval_sh_legendre": sp.eval_sh_legendre,
    "eval_sh_chebyt": sp.eval_sh_chebyt, "eval_sh_chebyu": sp.eval_sh_chebyu,
    "eval_sh_jacobi": lambda n, x: sp.eval_sh_jacobi(n, 2.5, 1.2, x),
}


@pytest.mark.parametrize("name", sorted(POLYNOMIALS))
@pytest.mark.parametrize("n", [0.0, 1.0, 3.0, 0.5, 1.5, 2.7, -0.5, -2.5])
def test_orthogonal_polynomials_of_any_real_degree_agree_with_central_differences(name, n):
    f = POLYNOMIALS[name]
    x = 0.3
    if not np.isfinite(f(n, x)):  # SciPy's value is not finite there (eval_sh_jacobi at -2.5): the derivatives are NaN
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # and come without a warning, as SciPy's value does (0/0 raised one)
            assert np.isnan(pb.gradient(lambda x: f(n, x), x)[0])
            assert np.isnan(pb.jvp(lambda x: f(n, x), (x,), (1.0,))[1])
            assert np.isnan(pb.hessian(lambda x: f(n, x), x))
        return
    first = (f(n, x + 1e-6) - f(n, x - 1e-6)) / 2e-6
    second = (f(n, x + 1e-4) - 2 * f(n, x) + f(n, x - 1e-4)) / 1e-8
    assert pb.gradient(lambda x: f(n, x), x)[0] == pytest.approx(first, rel=1e-8, abs=1e-8)
    assert pb.hessian(lambda x: f(n, x), x) == pytest.approx(second, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("name", ["eval_chebyu", "eval_gegenbauer", "eval_laguerre", "eval_jacobi"])
def test_orthogonal_polynomials_at_negative_integer_degrees_are_refused(name):
    with pytest.raises(NotImplementedError, match="negative integer degree"):
        pb.gradient(lambda x: POLYNOMIALS[name](-3.0, x), 0.3)


@pytest.mark.parametrize("z, m", [(0.0, 3.0), (-1.0, 2.0), (-3.0, 2.0), (-3.0, 5.0), (-3.0, 3.0), (-2.0, 0.5), (0.3, 2.0)])
def test_poch_derivatives_to_third_order_at_and_beside_poles(z, m):
    mp = pytest.importorskip("mpmath")
    with mp.workdps(40):
        want = [float(mp.diff(lambda t: mp.rf(t, m), z, k)) for k in (1, 2, 3)]
    got = [pb.gradient(lambda t: sp.poch(t, m), z)[0], pb.hessian(lambda t: sp.poch(t, m), z),
           pb.grad(lambda q: pb.hessian(lambda t: sp.poch(t, m), q))(z)]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, args, p, k, expected", [
    ("binom", (5,), 1.0, 4, -5.0),  # 5 p^4 (1 - p): -5 at p = 1
    ("binom", (5,), 0.0, 0, -5.0),  # (1 - p)^5
    ("bernoulli", (), 1.0, 0, -1.0),  # 1 - p
    ("poisson", (), 0.0, 0, -1.0),  # e^-mu
    ("poisson", (), 0.0, 2, 0.0),  # mu² e^-mu / 2
])
def test_pmf_derivatives_at_both_edges_and_values_are_scipys(name, args, p, k, expected):
    from pullback.scipy import stats

    scipy_stats = pytest.importorskip("scipy.stats")
    assert getattr(stats, name).pmf(k, *args, p) == getattr(scipy_stats, name).pmf(k, *args, p)
    g = pb.gradient(lambda q: getattr(stats, name).pmf(k, *args, q), p)[0]
    assert g == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("x", [1e-9, 1e-3, 0.5, 0.99, 1.0, 2.0])
def test_it2_integrals_first_and_second_derivatives_near_zero(x):
    mp = pytest.importorskip("mpmath")
    from pullback.scipy import special

    with mp.workdps(40):
        X = mp.mpf(x)
        j = lambda t: (1 - mp.besselj(0, t)) / t  # noqa: E731
        i = lambda t: (mp.besseli(0, t) - 1) / t  # noqa: E731
        want = [float(j(X)), float(mp.diff(j, X)), float(i(X)), float(mp.diff(i, X))]
    got = [pb.gradient(lambda x: special.it2j0y0(x)[0], x)[0], pb.hessian(lambda x: special.it2j0y0(x)[0], x),
           pb.gradient(lambda x: special.it2i0k0(x)[0], x)[0], pb.hessian(lambda x: special.it2i0k0(x)[0], x)]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-300)


def test_expm_forward_mode_with_a_large_tangent():
    from pullback.scipy import linalg

    a = np.random.default_rng(5).normal(size=(3, 3))
    t = np.random.default_rng(6).normal(size=(3, 3))
    _, tangent = pb.jvp(linalg.expm, (a,), (1e20 * t,))
    np.testing.assert_allclose(tangent / 1e20, sl.expm_frechet(a, t)[1], rtol=1e-10)


def test_lu_solve_conjugate_transpose_gradients_agree_with_central_differences():
    from pullback.scipy import linalg

    a, b = _complex_triangular()
    a = a + np.tril(a.T, -1)
    factor = sl.lu_factor(a)

    def loss(b):
        return np.sum(np.abs(linalg.lu_solve(factor, b, trans=2)) ** 2)

    def plain(b):
        return np.sum(np.abs(sl.lu_solve(factor, b, trans=2)) ** 2)

    (g,) = pb.gradient(loss, b)
    e = 1e-6
    want = [(plain(b + e * d) - plain(b - e * d)) / (2 * e) - 1j * (plain(b + 1j * e * d) - plain(b - 1j * e * d)) / (2 * e)
            for d in np.eye(3)]
    np.testing.assert_allclose(g, want, rtol=1e-7)


@pytest.mark.parametrize("a, options", [(1.1, {"keepdims": True}), (np.array(1.1), {"keepdims": True}),
                                        (1.1, {"axis": 0, "keepdims": True}), (np.array(1.1), {}),
                                        (1.1, {"keepdims": True, "b": -2.0, "return_sign": True})])
def test_logsumexp_being_differentiated_has_scipys_shape(a, options):
    import pullback.scipy.special as pss

    expected = sp.logsumexp(a, **options)
    got, (g,) = pb.withgradient(lambda x: (lambda r: (np.sum(r[0] if options.get("return_sign") else r), r))(
        pss.logsumexp(x, **options)), a)
    for mine, scipys in zip(got[1] if options.get("return_sign") else (got[1],),
                            expected if options.get("return_sign") else (expected,)):
        assert type(mine) is type(scipys) and np.shape(mine) == np.shape(scipys)
        np.testing.assert_array_equal(mine, scipys)
    assert float(np.sum(g)) == pytest.approx(1.0, rel=1e-14)  # d/da log(b e^a) = 1


def test_a_scipy_function_of_a_python_float_under_jit_traces_once():
    import pullback.scipy.special as pss

    step = pb.jit(pss.logsumexp)
    for x in (1.1, 2.5, -0.25):
        assert step(x) == sp.logsumexp(x) and type(step(x)) is type(sp.logsumexp(x))
    assert step.cache_info().traces == 1
