"""scipy.special rules at the points where a first derivative needs care (a removable singularity,
a limit, a cancellation): the first, second and third derivatives there and very near there,
against mpmath's high-precision derivatives. The values stay SciPy's, bit for bit."""

import math

import numpy as np
import pytest

import pullback as pb

mp = pytest.importorskip("mpmath")
sp = pytest.importorskip("scipy.special")
special = pytest.importorskip("pullback.scipy.special")



@pytest.fixture(autouse=True)
def _forty_digits():
    with mp.workdps(40):
        yield


def nested(f, x, order):
    """[f'(x), f''(x), ...] by nested pb.grad, and f''(x) also by forward over reverse and by pb.hessian."""
    out, g = [], f
    for _ in range(order):
        g = pb.grad(g)
        out.append(float(g(x)))
    if order >= 2:
        _, forward = pb.jvp(lambda x: pb.gradient(f, x)[0], (x,), (1.0,))
        hessian = pb.hessian(f, x)
        assert float(forward) == pytest.approx(out[1], rel=1e-13, abs=1e-300)
        assert float(hessian) == pytest.approx(out[1], rel=1e-13, abs=1e-300)
    return out


def reference(F, x, order, step=None):
    step = {} if step is None else {"h": mp.mpf(step)}
    return [float(mp.diff(F, mp.mpf(x), k, **step)) for k in range(1, order + 1)]


def check(f, F, x, order=3, rtol=1e-11, atol=1e-14, value=None, reference_step=None):
    if value is not None:  # the value handed out is SciPy's own
        y, _ = pb.vjp(f, x)
        assert y == value(x)
    got, want = nested(f, x, order), reference(F, x, order, reference_step)
    for k, (a, b) in enumerate(zip(got, want), start=1):
        assert abs(a - b) <= rtol * abs(b) + atol, f"derivative {k} at {x!r}: {a!r}, expected {b!r}"


AROUND_ZERO = [0.0, 1e-8, -1e-8, 1e-4, -1e-4, 0.3, -0.4]


# --- complete and incomplete elliptic integrals at m = 0, agm at a = b, spence at z = 1 ---------
@pytest.mark.parametrize("m", AROUND_ZERO + [0.5, -0.5, 0.6, -0.7])
def test_ellipk_and_ellipe_at_and_near_m_0(m):
    check(sp.ellipk, mp.ellipk, m, value=sp.ellipk)
    check(sp.ellipe, mp.ellipe, m, value=sp.ellipe)


@pytest.mark.parametrize("p", [1.0, 1.0 - 1e-8, 1.0 + 1e-8, 1.0 - 1e-4, 0.7, 1.4, 0.2])
def test_ellipkm1_at_and_near_p_1(p):
    check(sp.ellipkm1, lambda p: mp.ellipk(1 - p), p, value=sp.ellipkm1)


@pytest.mark.parametrize("phi", [0.7, 1e-3, -1.2, math.pi / 2, 2.5, -7.0])
@pytest.mark.parametrize("m", AROUND_ZERO)
def test_ellipkinc_and_ellipeinc_in_m_at_and_near_m_0(phi, m):
    check(lambda m: sp.ellipkinc(phi, m), lambda m: mp.ellipf(phi, m), m)
    check(lambda m: sp.ellipeinc(phi, m), lambda m: mp.ellipe(phi, m), m)


@pytest.mark.parametrize("phi", [1e-3, -0.05, math.pi + 1e-3, -2 * math.pi + 0.02, 0.9])
@pytest.mark.parametrize("m", [0.6, 0.99, -0.8, -3.0, -100.0])
def test_ellipkinc_and_ellipeinc_in_m_near_phi_a_multiple_of_pi(phi, m):
    # there the closed forms cancel with sin φ, whatever m
    check(lambda m: sp.ellipkinc(phi, m), lambda m: mp.ellipf(phi, m), m, order=2)
    check(lambda m: sp.ellipeinc(phi, m), lambda m: mp.ellipe(phi, m), m, order=2)


@pytest.mark.parametrize("phi, m", [(0.9, 0.999), (0.9, 1.0), (-0.5, 1.2), (1.3, 0.95), (1.3, 1 - 1e-10), (1.3, 1.0),
                                    (1.3, 1 + 1e-10), (-1.45, 1 - 1e-6), (4.0, 0.99), (1.5707, 0.999),
                                    (math.pi / 2 - 1e-3, 1 - 1e-8), (1.2, 0.75)])
def test_ellipkinc_and_ellipeinc_in_m_near_m_1(phi, m):
    # F(φ|m) and E(φ|m) are smooth at m = 1 for |φ| < π/2; the closed forms divide by 1 - m and cancel
    check(lambda m: sp.ellipkinc(phi, m), lambda m: mp.ellipf(phi, m), m)
    check(lambda m: sp.ellipeinc(phi, m), lambda m: mp.ellipe(phi, m), m)


@pytest.mark.parametrize("name, exact", [("ellipkinc", mp.ellipf), ("ellipeinc", mp.ellipe)])
def test_incomplete_elliptic_array_with_m_1_beside_a_wrapped_phi(name, exact):
    # dK/dm is infinite at m = 1; it enters only where φ wraps past π/2, not at the m = 1 element
    fn = getattr(sp, name)
    phi, m = np.array([1.3, 0.2, 1.5, -1.4, 3.0]), np.array([0.99999, 0.2, 0.9, 1.0, 0.7])
    grad = pb.gradient(lambda m: np.sum(fn(phi, m)), m)[0]
    second = np.diag(pb.hessian(lambda m: np.sum(fn(phi, m)), m))
    for k, got in [(1, grad), (2, second)]:
        want = [float(mp.diff(lambda q: exact(mp.mpf(p), q), mp.mpf(q), k)) for p, q in zip(phi, m)]
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("phi, m", [(0.9, 0.0), (0.9, 1e-8), (0.9, -1e-4), (0.9, 0.45), (1.3, 1 - 1e-10), (1.3, 1.0)])
@pytest.mark.parametrize("name, exact", [("ellipkinc", mp.ellipf), ("ellipeinc", mp.ellipe)])
def test_incomplete_elliptic_hessians_in_phi_and_m(name, exact, phi, m):
    fn = getattr(sp, name)
    v = np.array([phi, m])
    got = pb.hessian(lambda v: fn(v[0], v[1]), v)
    order = lambda i, j: ((i == 0) + (j == 0), (i == 1) + (j == 1))  # noqa: E731
    want = [[float(mp.diff(exact, (mp.mpf(phi), mp.mpf(m)), order(i, j))) for j in range(2)] for i in range(2)]
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("b", [1.3, 1.3 + 1e-8, 1.3 - 1e-8, 1.3 - 1e-4, 2.0, 0.4])
def test_agm_at_and_near_a_equal_b(b):
    check(lambda b: sp.agm(1.3, b), lambda b: mp.agm(1.3, b), b, value=lambda b: sp.agm(1.3, b))
    check(lambda a: sp.agm(a, 1.3), lambda a: mp.agm(a, 1.3), b)
    got = pb.hessian(lambda v: sp.agm(v[0], v[1]), np.array([1.3, b]))
    want = [[float(mp.diff(mp.agm, (mp.mpf(1.3), mp.mpf(b)), (2 - i - j, i + j))) for j in range(2)] for i in range(2)]
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("a, b", [(1.0, 1e-5), (1.0, 1e-9), (1.0, 1e-30), (1e-7, 2.0), (1.0, 0.49), (2.0, 0.9)])
def test_agm_of_far_apart_arguments(a, b):
    # agm(a, b) = a·π / (2 K(1 - (b/a)²)): 1 - m kept few digits of (b/a)² (relative error 7e-4 at b/a = 1e-7)
    step = min(a, b) * mp.mpf(10) ** -25  # mpmath's default step would cross 0 for b = 1e-30
    grad = pb.gradient(sp.agm, a, b)
    want = [float(mp.diff(lambda t: mp.agm(t, b), a, h=step)), float(mp.diff(lambda t: mp.agm(a, t), b, h=step))]
    np.testing.assert_allclose(grad, want, rtol=1e-13)
    got = pb.hessian(lambda v: sp.agm(v[0], v[1]), np.array([a, b]))
    want = [[float(mp.diff(mp.agm, (mp.mpf(a), mp.mpf(b)), (2 - i - j, i + j), h=step)) for j in range(2)]
            for i in range(2)]
    np.testing.assert_allclose(got, want, rtol=1e-13)


@pytest.mark.parametrize("p", [1e-20, 1e-12, 1e-5])
def test_ellipkm1_derivatives_at_tiny_p(p):
    # the second derivative read E(1 - p)'s derivative at m = 1 - p, which rounds to 1 (K(1) = inf)
    check(sp.ellipkm1, lambda p: mp.ellipk(1 - p), p, rtol=1e-13, reference_step=p * 1e-25)


@pytest.mark.parametrize("z", [1.0, 1.0 + 1e-8, 1.0 - 1e-8, 1.0 + 1e-4, 1.0 - 1e-4, 1.3, 0.6, 2.5, 0.1])
def test_spence_at_and_near_z_1(z):
    check(sp.spence, lambda z: mp.polylog(2, 1 - z), z, value=sp.spence)


# --- spherical Bessel functions at z = 0 ------------------------------------------------------
def _double_factorial(n):
    return mp.fprod(range(1, 2 * n + 2, 2))


def _spherical_series(n, sign):
    """z^n / (2n+1)!! 0F1(; n + 3/2; sign z²/4): j_n (sign -1) and i_n (sign +1), entire in z."""
    return lambda z: z**n / _double_factorial(n) * mp.hyp0f1(n + mp.mpf(3) / 2, sign * z * z / 4)


@pytest.mark.parametrize("n", range(5))
@pytest.mark.parametrize("z", [0.0, 1e-8, -1e-8, 1e-4, 0.7, -2.5, 12.0])
def test_spherical_jn_and_in_at_and_near_z_0(n, z):
    check(lambda z: special.spherical_jn(n, z), _spherical_series(n, -1), z, value=lambda z: sp.spherical_jn(n, z))
    check(lambda z: special.spherical_in(n, z), _spherical_series(n, 1), z, value=lambda z: sp.spherical_in(n, z))
    # derivative=True is the first derivative: its own derivatives are the value's next ones
    check(lambda z: special.spherical_jn(n, z, True), lambda z: mp.diff(_spherical_series(n, -1), z), z, order=2)
    check(lambda z: special.spherical_in(n, z, True), lambda z: mp.diff(_spherical_series(n, 1), z), z, order=2)


@pytest.mark.parametrize("derivative", [False, True])
@pytest.mark.parametrize("kind, sign", [("jn", -1), ("in", 1)])
def test_spherical_at_0_beside_a_negative_z(kind, sign, derivative):
    # a negative z in the array sends every element through the reflection; z = 0 keeps its slope
    n, z = np.array([1, 0, 2, 3]), np.array([0.0, 0.0, -1e-8, -1.5])
    fn = getattr(special, f"spherical_{kind}")
    got = np.diagonal(pb.hessian(lambda z: np.sum(fn(n, z, derivative)), z))
    grad = pb.gradient(lambda z: np.sum(fn(n, z, derivative)), z)[0]
    for k, (order, x) in enumerate(zip(n, z)):
        exact = _spherical_series(int(order), sign)
        d = 1 if derivative else 0
        assert grad[k] == pytest.approx(float(mp.diff(exact, mp.mpf(x), d + 1)), rel=1e-13, abs=1e-30)
        assert got[k] == pytest.approx(float(mp.diff(exact, mp.mpf(x), d + 2)), rel=1e-13, abs=1e-30)


@pytest.mark.parametrize("n", range(4))
@pytest.mark.parametrize("z", [1e-3, 0.7, 3.0])
def test_spherical_yn_and_kn(n, z):
    half = mp.mpf(1) / 2
    check(lambda z: special.spherical_yn(n, z), lambda z: mp.sqrt(mp.pi / (2 * z)) * mp.bessely(n + half, z), z)
    check(lambda z: special.spherical_kn(n, z), lambda z: mp.sqrt(mp.pi / (2 * z)) * mp.besselk(n + half, z), z)


# --- Kelvin functions at 0, airye at 0 and below -----------------------------------------------
KELVIN = {"ber": lambda x: mp.ber(0, x), "bei": lambda x: mp.bei(0, x)}


@pytest.mark.parametrize("x", [0.0, 1e-8, -1e-8, 1e-4, 0.5, -1.9, 2.1, 4.0])
@pytest.mark.parametrize("name", ["ber", "bei"])
def test_kelvin_ber_bei_and_their_derivatives_at_and_near_0(name, x):
    exact = KELVIN[name]
    check(getattr(sp, name), exact, x, value=getattr(sp, name))
    check(getattr(sp, name + "p"), lambda x: mp.diff(exact, x), x, value=getattr(sp, name + "p"))


@pytest.mark.parametrize("x", [1e-6, 0.5, 3.0])
@pytest.mark.parametrize("name, exact", [("ker", lambda x: mp.ker(0, x)), ("kei", lambda x: mp.kei(0, x))])
def test_kelvin_ker_kei(name, exact, x):
    check(getattr(sp, name), exact, x, rtol=1e-10)
    check(getattr(sp, name + "p"), lambda x: mp.diff(exact, x), x, rtol=1e-10)


def _scaled_airy(k):
    zeta = lambda x: mp.mpf(2) / 3 * x ** mp.mpf(1.5)  # noqa: E731
    ai, bi = (lambda x: mp.airyai(x, k % 2)), (lambda x: mp.airybi(x, k % 2))
    if k < 2:
        return lambda x: ai(x) * mp.exp(zeta(x))
    return lambda x: bi(x) * mp.exp(-zeta(x)) if x > 0 else bi(x)


@pytest.mark.parametrize("k", range(4))
@pytest.mark.parametrize("x", [1e-8, 1e-4, 0.6, -1e-8, -0.5, -3.0])
def test_airye_first_to_third_derivatives(k, x):
    if k < 2 and x < 0:
        pytest.skip("SciPy's airye gives NaN for eAi, eAi' at real x < 0")
    check(lambda x: special.airye(x)[k], _scaled_airy(k), x, value=lambda x: sp.airye(x)[k])


@pytest.mark.parametrize("k", range(4))
def test_airye_at_0_first_derivative_exact_second_refused(k):
    # the scaling's derivative (2/3 z^(3/2))' = √z is 0 at 0: the first derivatives are Ai'(0), 0, Bi'(0), 0
    first = pb.gradient(lambda x: special.airye(x)[k], 0.0)[0]
    assert first == [sp.airy(0.0)[1], 0.0, sp.airy(0.0)[3], 0.0][k]
    with pytest.raises(ValueError, match=r"scipy\.special\.airye.*z = 0"):
        pb.hessian(lambda x: special.airye(x)[k], 0.0)
    with pytest.raises(ValueError, match=r"scipy\.special\.airye.*z = 0"):
        pb.hessian(lambda x: np.sum(special.airye(x)[k]), np.array([1.0, 0.0]))


# --- diric near x = 2πk ------------------------------------------------------------------------
def _dirichlet_kernel(n):
    return lambda x: mp.fsum(mp.cos((n - 1 - 2 * j) * x / 2) for j in range(n)) / n


DIRIC_POINTS = [0.0, 1e-9, -1e-8, 1e-6, 1e-4, -1e-2, 0.5, 3.0, 2 * math.pi, 2 * math.pi + 1e-6, 4 * math.pi - 1e-4,
                -6 * math.pi + 1e-3, 200 * math.pi + 1e-5]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 41])
@pytest.mark.parametrize("x", DIRIC_POINTS)
def test_diric_at_and_near_multiples_of_2pi(n, x):
    check(lambda x: special.diric(x, n), _dirichlet_kernel(n), x, rtol=1e-12, value=lambda x: sp.diric(x, n))


def test_diric_of_arrays_and_float32():
    x = np.array([0.0, 1e-7, 2 * math.pi, 1.0, 6.0])
    got = pb.gradient(lambda x: np.sum(special.diric(x, 4)), x)[0]
    want = [float(mp.diff(_dirichlet_kernel(4), mp.mpf(v))) for v in x]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-300)
    g = pb.gradient(lambda x: special.diric(x, 3), np.float32(1e-3))[0]
    assert g.dtype == np.float32 and g == pytest.approx(float(mp.diff(_dirichlet_kernel(3), mp.mpf(float(np.float32(1e-3))))),
                                                         rel=1e-6)


# --- spherical Bessel functions at tiny z, where SciPy's derivative ufunc loses j_n to underflow ---------
def _spherical_series_derivative(n, sign, z, d):
    """d-th derivative of Σ_k sign^k z^(n+2k) / (k! 2^k (2n+2k+1)!!), term by term."""
    z, total = mp.mpf(z), mp.mpf(0)
    for k in range(40):
        p = n + 2 * k
        if p >= d:
            total += mp.mpf(sign) ** k / (mp.factorial(k) * 2**k * _double_factorial(n + k)) * mp.ff(p, d) * z ** (p - d)
    return float(total)


@pytest.mark.parametrize("n, z", [(0, 1e-300), (0, 5e-324), (1, 1e-300), (2, 1.37e-122), (3, 1.37e-70), (5, 1.37e-48),
                                  (10, 1.37e-30), (30, 1e-5), (1, 0.0), (4, -1.37e-40)])
@pytest.mark.parametrize("kind, sign", [("jn", -1), ("in", 1)])
def test_spherical_derivatives_at_tiny_z(kind, sign, n, z):
    fn = getattr(special, f"spherical_{kind}")
    for derivative in (False, True):
        y = fn(n, z, derivative)
        got_y, _ = pb.vjp(lambda z: fn(n, z, derivative), z)
        assert got_y == y or (np.isnan(y) and np.isnan(got_y))  # SciPy's own value
        d = 1 if derivative else 0
        first = pb.gradient(lambda z: fn(n, z, derivative), z)[0]
        second = pb.hessian(lambda z: fn(n, z, derivative), z)
        assert first == pytest.approx(_spherical_series_derivative(n, sign, z, d + 1), rel=1e-13, abs=1e-320)
        assert second == pytest.approx(_spherical_series_derivative(n, sign, z, d + 2), rel=1e-13, abs=1e-320)


@pytest.mark.parametrize("n", [0, -2, 2.5, np.array([1, 0, 2, -1])])
def test_diric_invalid_n_nan_value_has_nan_derivatives(n):
    # SciPy gives NaN for n that is not a positive integer; no derivative is made up there
    x = np.array([0.0, 2 * math.pi, 1.0, 1e6])
    want = sp.diric(x, n)
    y, (g,) = pb.withgradient(lambda x: np.sum(special.diric(x, n)), x)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(want))
    _, t = pb.jvp(lambda x: special.diric(x, n), (x,), (np.ones(4),))
    np.testing.assert_array_equal(np.isnan(t), np.isnan(want))
    np.testing.assert_array_equal(np.isnan(np.diagonal(pb.hessian(lambda x: np.sum(special.diric(x, n)), x))), np.isnan(want))


@pytest.mark.parametrize("z", [1e-10, 1e-5, 0.3, 1e-300])
def test_spence_derivative_far_from_1_without_rounding_z_minus_1(z):
    # log(z)/(1 - z) from z itself: (z - 1) + 1 would lose z's digits
    want1 = mp.log(z) / (1 - mp.mpf(z))
    want2 = 1 / (mp.mpf(z) * (1 - mp.mpf(z))) + mp.log(z) / (1 - mp.mpf(z)) ** 2
    assert pb.gradient(sp.spence, z)[0] == pytest.approx(float(want1), rel=1e-14)
    assert pb.hessian(sp.spence, np.array(z)) == pytest.approx(float(want2), rel=1e-14)


@pytest.mark.parametrize("z", [1e300, -1e300, np.inf, np.nan])
def test_spherical_jn_huge_and_nonfinite_python_floats(z):
    # z² overflowed a Python float in the choice of the series near 0
    y, (g,) = pb.withgradient(lambda z: special.spherical_jn(2, z), z)
    np.testing.assert_array_equal(y, sp.spherical_jn(2, np.float64(z)))
    assert np.isnan(g) == np.isnan(z)
