"""Complex numbers end to end: arguments, intermediates and outputs in every API, each
complex-capable rule against central differences in the real and the imaginary direction
(tests/complex_checks.py), dtypes, higher order, and the clear errors."""

import numpy as np
import pytest

import pullback as pb
from complex_checks import check_complex
from pullback.testing import numerical_gradient


def crandn(rng, *shape, scale=1.0):
    return scale * (rng.normal(size=shape) + 1j * rng.normal(size=shape))


RNG = np.random.default_rng(7)
Z = crandn(RNG, 3, 2) * 0.6 + 0.3  # away from 0 and the branch cuts for the unary functions below
W = crandn(RNG, 3, 2) * 0.6 - 0.2
X = RNG.normal(size=(3, 2))

# --- the convention -----------------------------------------------------------------------------


def test_gradient_of_a_real_loss_is_d_dx_minus_i_d_dy():
    z = np.array([1.0 + 2.0j, 3.0 - 1.0j])
    (g,) = pb.gradient(lambda z: np.sum(np.abs(z) ** 2), z)
    np.testing.assert_allclose(g, 2 * np.conj(z))  # L = x² + y²: 2x - 2iy
    (g,) = pb.gradient(lambda z: np.real(np.sum(z * z)), z)
    np.testing.assert_allclose(g, 2 * z)  # L = x² - y²: 2x + 2iy


def test_python_and_numpy_complex_scalars():
    g, = pb.gradient(lambda z: abs(z) ** 2, 1.0 + 2.0j)
    assert type(g) is complex and g == 2.0 - 4.0j
    g, = pb.gradient(lambda z: np.abs(z) ** 2, np.complex64(1.0 + 2.0j))
    assert type(g) is np.complex64 and g == np.complex64(2.0 - 4.0j)
    g, = pb.gradient(lambda z: np.real(z * z), np.complex128(3.0 + 1.0j))
    assert type(g) is np.complex128 and g == 6.0 + 2.0j


def test_pullback_of_a_complex_valued_function_gives_the_transpose():
    z, a = np.array([1.0 + 1.0j, 2.0 - 0.5j]), 0.5 + 2.0j
    y, back = pb.pullback(lambda z: a * z ** 2, z)
    np.testing.assert_allclose(y, a * z ** 2)
    c = np.array([1.0 - 2.0j, 0.5j])
    (cz,) = back(c)
    np.testing.assert_allclose(cz, c * 2 * a * z)  # holomorphic: c * f'(z), no conjugation
    y, vjp_fn = pb.vjp(np.conj, z)
    np.testing.assert_allclose(vjp_fn(c)[0], np.conj(c))


def test_withgradient_and_grad_and_jvp():
    z = np.array([0.5 + 1.0j, -1.0 + 0.25j])
    f = lambda z: np.sum(np.abs(np.exp(z)) ** 2)  # noqa: E731  (= sum exp(2x))
    val, (g,) = pb.withgradient(f, z)
    np.testing.assert_allclose(val, np.sum(np.exp(2 * z.real)))
    np.testing.assert_allclose(g, 2 * np.exp(2 * z.real))  # no dependence on y
    np.testing.assert_allclose(pb.grad(f)(z), g)
    y, y_dot = pb.jvp(np.exp, (z,), (np.array([1.0, 1.0j]),))
    np.testing.assert_allclose(y_dot, np.exp(z) * np.array([1.0, 1.0j]))


def test_real_input_in_complex_arithmetic_gets_a_real_gradient():
    x = np.array([0.3, -1.2], np.float32)
    (g,) = pb.gradient(lambda x: np.sum(np.real(np.exp(1j * x))), x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, -np.sin(x), rtol=1e-6)
    (g,) = pb.gradient(lambda t: np.real(np.exp(1j * t)), 0.3)
    assert type(g) is float and abs(g + np.sin(0.3)) < 1e-15
    _, t = pb.jvp(lambda x: np.exp(1j * x), (x,), (np.ones(2, np.float32),))
    assert t.dtype == np.complex64
    np.testing.assert_allclose(t, 1j * np.exp(1j * x), rtol=1e-6)


def test_a_complex_tangent_for_a_real_primal_is_refused():
    with pytest.raises(TypeError, match="tangent for primal 0 is complex, but its primal is real"):
        pb.jvp(np.sin, (np.ones(2),), (np.ones(2) * 1j,))
    _, t = pb.jvp(np.sin, (np.ones(2) + 0j,), (np.ones(2) * 1j,))
    np.testing.assert_allclose(t, 1j * np.cos(np.ones(2)))


def test_dtypes_are_kept():
    z = (np.array([1.0 + 1.0j, 2.0]) ).astype(np.complex64)
    x = np.array([0.5, 2.0], np.float32)
    (gz, gx) = pb.gradient(lambda z, x: np.sum(np.abs(z * x) ** 2), z, x)
    assert gz.dtype == np.complex64 and gx.dtype == np.float32
    y, back = pb.pullback(lambda z, x: z * x, z, x)
    assert y.dtype == np.complex64
    cz, cx = back(np.ones(2, np.complex64))
    assert cz.dtype == np.complex64 and cx.dtype == np.float32
    _, t = pb.jvp(lambda z, x: z * x + 1j, (z, x), (np.ones(2, np.complex64), np.ones(2, np.float32)))
    assert t.dtype == np.complex64
    np.testing.assert_allclose(t, x + z, rtol=1e-6)


def test_mixed_real_and_complex_arithmetic_against_central_differences():
    check_complex(lambda z, x: z * x + x / (z + 3.0) - z ** 2 * np.exp(x), Z, X)
    check_complex(lambda z, x: np.abs(z * x) + np.real(z) * x, Z, X)
    check_complex(lambda x: np.exp(1j * x) * x, X)


def test_complex_output_of_gradient_is_refused():
    with pytest.raises(TypeError, match="complex"):
        pb.gradient(lambda z: np.sum(z), np.ones(2, complex))


# --- ufuncs -------------------------------------------------------------------------------------
HOLOMORPHIC = [np.negative, np.positive, np.exp, np.exp2, np.expm1, np.log, np.log2, np.log10, np.log1p,
               np.sqrt, np.square, np.reciprocal, np.sin, np.cos, np.tan, np.arcsin, np.arccos, np.arctan,
               np.sinh, np.cosh, np.tanh, np.arcsinh, np.arccosh, np.arctanh]
NOT_HOLOMORPHIC = [np.conjugate, np.absolute, np.sign, np.real, np.imag, np.angle]


@pytest.mark.parametrize("fn", HOLOMORPHIC + NOT_HOLOMORPHIC, ids=lambda f: f.__name__)
def test_unary_functions(fn):
    check_complex(fn, Z)
    check_complex(lambda z: fn(z) * fn(z), Z)  # the result used again: second use through the rule's output


@pytest.mark.parametrize("fn", HOLOMORPHIC, ids=lambda f: f.__name__)
def test_holomorphic_unary_complex64(fn):
    z = Z.astype(np.complex64)
    y, back = pb.pullback(fn, z)
    assert y.dtype == np.complex64
    assert back(np.ones_like(y))[0].dtype == np.complex64
    check_complex(fn, z, rtol=2e-3, atol=2e-4, h=1e-3)


@pytest.mark.parametrize("fn", [np.arcsin, np.arccos], ids=lambda f: f.__name__)
def test_arcsin_and_arccos_on_both_sides_of_their_cuts(fn):
    # on the real axis beyond ±1 the sign of a zero imaginary part picks the side; the derivative is
    # NumPy's function's along the real axis, on that side
    z = np.array([complex(3.0, 0.0), complex(3.0, -0.0), complex(-3.0, 0.0), complex(-3.0, -0.0), 0.5 + 0j])
    h = 1e-6
    ahead, behind = z.copy(), z.copy()
    ahead.real += h  # (z + h would make each -0.0 imaginary part +0.0)
    behind.real -= h
    along_real = (fn(ahead) - fn(behind)) / (2 * h)
    (t,) = pb.jvp(fn, (z,), (np.ones_like(z),))[1:]
    np.testing.assert_allclose(t, along_real, rtol=1e-6)
    (g,) = pb.gradient(lambda z: np.sum(np.imag(fn(z))), z)
    np.testing.assert_allclose(g, -1j * along_real, rtol=1e-6)  # the convention: dL/dx - i dL/dy, f holomorphic


def test_arccosh_on_both_sides_of_its_cut():
    z = np.array([-1.5 + 0.5j, -0.5 - 0.7j, 2.0 + 0.1j, -2.0 - 0.3j])
    check_complex(np.arccosh, z)


@pytest.mark.parametrize("fn", [np.add, np.subtract, np.multiply, np.true_divide, np.power, np.float_power],
                         ids=lambda f: f.__name__)
def test_binary_functions(fn):
    check_complex(fn, Z, W)
    check_complex(fn, Z, X)
    check_complex(fn, X + 2.0, Z)
    check_complex(lambda z: fn(z, 2.5 - 0.5j), Z)
    check_complex(lambda z: fn(1.5 + 0.5j, z), Z)


def test_integer_power_and_python_complex_operands():
    check_complex(lambda z: z ** 3 + 2 ** z + z ** -2, Z)
    check_complex(lambda z: (1 + 2j) * z - 1j / z, Z)


def test_angle_in_degrees_and_abs_squared_by_composition():
    check_complex(lambda z: np.angle(z, deg=True), Z)
    check_complex(lambda z: np.angle(z, True), Z)
    check_complex(lambda z: z * np.conj(z), Z)
    check_complex(lambda z: np.abs(z) ** 2, Z)


def test_attributes_and_methods():
    check_complex(lambda z: z.real * z.imag + z.conj() * z.conjugate(), Z)
    (g,) = pb.gradient(lambda z: np.sum(z.imag), Z)
    np.testing.assert_allclose(g, -1j * np.ones_like(Z))


def test_abs_and_sign_at_zero_have_gradient_zero():
    z = np.array([0.0 + 0.0j, 1.0 + 1.0j])
    (g,) = pb.gradient(lambda z: np.sum(np.abs(z)), z)
    np.testing.assert_allclose(g, [0.0, np.conj(z[1]) / abs(z[1])])
    (g,) = pb.gradient(lambda z: np.sum(np.real(np.sign(z))), z)
    assert g[0] == 0 and np.all(np.isfinite(g))


@pytest.mark.parametrize("fn", [np.maximum, np.minimum, np.fmax, np.fmin], ids=lambda f: f.__name__)
def test_maximum_and_minimum_follow_numpys_lexicographic_order(fn):
    a = np.array([1.0 + 2.0j, 1.0 + 1.0j, 2.0 - 1.0j])
    b = np.array([1.0 + 1.0j, 0.5 + 5.0j, 2.0 + 3.0j])  # equal real parts: the imaginary parts decide
    y, _ = pb.pullback(fn, a, b)
    np.testing.assert_array_equal(y, fn(a, b))
    (ga, gb) = pb.gradient(lambda a, b: np.sum(np.real(fn(a, b) * np.array([1.0, 2.0, 3.0j]))), a, b)
    wins = (fn(a, b) == a)
    np.testing.assert_array_equal(ga, np.where(wins, [1.0, 2.0, 3.0j], 0))
    np.testing.assert_array_equal(gb, np.where(wins, 0, [1.0, 2.0, 3.0j]))
    check_complex(fn, a + np.array([0.3, 0.0, 0.4]), b)  # distinct real parts: away from the switch


def test_max_sort_and_argmax_follow_numpys_order():
    z = np.array([1.0 + 2.0j, 3.0 - 1.0j, 1.2 + 3.0j, -2.0 + 0.5j])
    check_complex(np.max, z)
    check_complex(np.sort, z)
    check_complex(lambda z: z[np.argmax(z)], z)


@pytest.mark.parametrize("fn", [np.floor, np.ceil, np.trunc, np.arctan2, np.hypot, np.logaddexp, np.fmod,
                                np.remainder, np.copysign, np.heaviside, np.cbrt, np.fabs, np.deg2rad, np.radians],
                         ids=lambda f: f.__name__)
def test_ufuncs_numpy_refuses_for_complex_raise_numpys_error(fn):
    args = (Z,) if fn.nin == 1 else (Z, W)
    with pytest.raises(TypeError) as plain:
        fn(*args)
    with pytest.raises(TypeError) as traced:
        pb.gradient(lambda z: np.sum(np.abs(fn(z, *args[1:]))), Z)
    assert str(traced.value) == str(plain.value)


def test_comparisons_and_rounding_are_plain():
    seen = {}

    def f(z):
        seen["gt"], seen["eq"], seen["rint"] = z > 0.3, z == z, np.rint(z)
        return np.sum(np.abs(z))

    pb.gradient(f, Z)
    np.testing.assert_array_equal(seen["gt"], Z > 0.3)
    np.testing.assert_array_equal(seen["rint"], np.rint(Z))
    (g,) = pb.gradient(lambda z: np.sum(np.abs(z + np.rint(z))), Z)
    (want,) = pb.gradient(lambda z: np.sum(np.abs(z + np.rint(Z))), Z)
    np.testing.assert_allclose(g, want)


# --- higher order ---------------------------------------------------------------------------------
def test_third_derivative_through_complex_intermediates():
    # f(t) = Re(exp(i t) * (1 + 2i)) = cos t - 2 sin t; f''' = sin t - ... : d³/dt³ cos = sin, d³/dt³ sin = -cos
    f = lambda t: np.real(np.exp(1j * t) * (1.0 + 2.0j))  # noqa: E731
    d3 = pb.grad(pb.grad(pb.grad(f)))
    t = 0.7
    assert abs(d3(t) - (np.sin(t) + 2.0 * np.cos(t))) < 1e-12
    _, d4 = pb.jvp(d3, (t,), (1.0,))
    assert abs(d4 - (np.cos(t) - 2.0 * np.sin(t))) < 1e-12


def test_hessian_of_a_real_function_through_complex_values():
    x = np.array([0.3, -0.8])
    f = lambda x: np.sum(np.abs(np.exp(1j * x[0] * x[1]) + x) ** 2)  # noqa: E731
    h = pb.hessian(f, x)
    eps = 1e-4
    numeric = np.zeros((2, 2))
    for i in range(2):
        for j in range(2):
            e_i, e_j = np.eye(2)[i] * eps, np.eye(2)[j] * eps
            numeric[i, j] = (f(x + e_i + e_j) - f(x + e_i - e_j) - f(x - e_i + e_j) + f(x - e_i - e_j)) / (4 * eps ** 2)
    np.testing.assert_allclose(h, numeric, rtol=1e-6, atol=1e-7)


def test_second_derivative_of_a_complex_parameter():
    # gradient of a real loss, then differentiated again in z's real and imaginary directions
    z = np.array([0.4 + 0.3j, -0.2 + 1.1j])

    def loss(z):
        return np.sum(np.abs(np.sin(z)) ** 2)

    def directional(z):  # Re(<grad, v>) = dL along v, for a fixed complex v
        (g,) = pb.gradient(loss, z)
        return np.real(np.sum(g * v))

    v = np.array([1.0 - 0.5j, 0.25 + 2.0j])
    check_complex(directional, z, rtol=1e-5, atol=1e-6)


# --- jacobian -------------------------------------------------------------------------------------
def test_jacobian_of_a_holomorphic_function_is_the_complex_derivative():
    z = np.array([0.5 + 1.0j, -1.0 + 0.25j])
    (j,) = pb.jacobian(lambda z: z ** 2 * z[::-1], z)
    want = np.array([[2 * z[0] * z[1], z[0] ** 2], [z[1] ** 2, 2 * z[1] * z[0]]])
    np.testing.assert_allclose(j, want)
    (j,) = pb.jacobian(np.exp, z[0])
    np.testing.assert_allclose(j, np.exp(z[0]))
    (j,) = pb.jacobian(lambda z: z ** 3, 1.0 + 1.0j)  # a Python complex
    np.testing.assert_allclose(j, 3 * (1.0 + 1.0j) ** 2)


def test_jacobian_of_real_to_complex():
    x = np.array([0.3, 1.2, -0.5])
    (j,) = pb.jacobian(lambda x: np.exp(1j * x) * x[0], x)
    want = np.diag(1j * np.exp(1j * x) * x[0])
    want[:, 0] += np.exp(1j * x)
    np.testing.assert_allclose(j, want)


def test_jacobian_of_a_non_holomorphic_function_raises_naming_the_fix():
    z = np.array([0.5 + 1.0j, -1.0 + 0.25j])
    for f in (np.conj, np.abs, lambda z: z * np.conj(z)):
        with pytest.raises(TypeError, match="holomorphic.*real and imaginary"):
            pb.jacobian(f, z)


# --- reductions, products, shapes, indexing --------------------------------------------------------
R = np.random.default_rng(11)
P = crandn(R, 3, 4)
Q = crandn(R, 3, 4)


def _written(z, w):
    y = z * 1.0
    y[1] = w[0]
    return y


STRUCTURAL = {
    "sum": lambda z: np.sum(z, axis=1), "mean": np.mean, "prod": lambda z: np.prod(z, axis=0),
    "cumsum": lambda z: np.cumsum(z, axis=1), "cumprod": lambda z: np.cumprod(z, axis=1),
    "var": lambda z: np.var(z, axis=0), "std": lambda z: np.std(z, axis=1, ddof=1),
    "norm": np.linalg.norm, "norm-1": lambda z: np.linalg.norm(z, axis=1, ord=1),
    "norm-inf": lambda z: np.linalg.norm(z, np.inf), "norm-3": lambda z: np.linalg.norm(z, 3, axis=0),
    "reshape": lambda z: z.reshape(4, 3) * z.T.reshape(4, 3), "transpose": lambda z: np.transpose(z)[::-1],
    "index": lambda z: z[[0, 2], 1:], "diag": lambda z: np.diag(z[:, :3]), "trace": np.trace,
    "flip": np.flip, "roll": lambda z: np.roll(z, 1), "tile": lambda z: np.tile(z, 2),
    "repeat": lambda z: np.repeat(z, 2, 0), "pad": lambda z: np.pad(z, 1),
    "broadcast": lambda z: np.broadcast_to(z[0], (2, 4)), "take": lambda z: np.take(z, [1, 0], 1),
}
PAIRED = {
    "vdot": np.vdot, "matmul": lambda z, w: z @ w.T, "dot": lambda z, w: np.dot(z, w.T),
    "einsum": lambda z, w: np.einsum("ij,kj->ik", z, w), "tensordot": lambda z, w: np.tensordot(z, w, 2),
    "outer": np.outer, "inner": np.inner, "concatenate": lambda z, w: np.concatenate([z, w]),
    "stack": lambda z, w: np.stack([z, w], 1), "where": lambda z, w: np.where(np.abs(z) > 1, z, w),
    "setitem": _written, "kron": np.kron,
    "vecdot": np.vecdot, "linalg.vecdot": np.linalg.vecdot, "vecmat": lambda z, w: np.vecmat(z, w.T @ w),
    "matvec": lambda z, w: np.matvec(w.T @ w, z),
}


@pytest.mark.parametrize("name", sorted(STRUCTURAL))
def test_reductions_and_shapes(name):
    check_complex(STRUCTURAL[name], P)


@pytest.mark.parametrize("name", sorted(PAIRED))
def test_products_and_joins(name):
    check_complex(PAIRED[name], P, Q)
    check_complex(PAIRED[name], P, Q.real)


def test_vdot_conjugates_its_first_argument():
    a, b = np.array([1.0 + 2.0j, 3.0j]), np.array([2.0 - 1.0j, 1.0 + 1.0j])
    y, back = pb.pullback(np.vdot, a, b)
    assert y == np.vdot(a, b)
    ca, cb = back(1.0 + 0.0j)
    np.testing.assert_allclose(ca, np.conj(b))  # y = sum(conj(a) b): not holomorphic in a
    np.testing.assert_allclose(cb, np.conj(a))


def test_complex64_products_stay_complex64():
    a, b = P.astype(np.complex64), Q.real.astype(np.float32)
    y, back = pb.pullback(lambda a, b: a @ b.T, a, b)
    ca, cb = back(np.ones_like(y))
    assert (y.dtype, ca.dtype, cb.dtype) == (np.complex64, np.complex64, np.float32)


# --- linalg ---------------------------------------------------------------------------------------
A = crandn(R, 3, 3) + 2.0 * np.eye(3)
B = crandn(R, 3, 2)
M = R.normal(size=(4, 4))

LINALG = {
    "inv": np.linalg.inv, "det": np.linalg.det, "slogdet-logabsdet": lambda a: np.linalg.slogdet(a)[1],
    "slogdet-sign": lambda a: np.linalg.slogdet(a)[0], "pinv": np.linalg.pinv,
    "matrix_power": lambda a: np.linalg.matrix_power(a, 3), "matrix_power-neg": lambda a: np.linalg.matrix_power(a, -2),
    "svd-values": lambda a: np.linalg.svd(a, compute_uv=False), "norm-2": lambda a: np.linalg.norm(a, 2),
    "norm-nuc": lambda a: np.linalg.norm(a, "nuc"),
    "eigvals": np.linalg.eigvals, "eig-values": lambda a: np.linalg.eig(a)[0],
    "eig-vectors-modulus": lambda a: np.abs(np.linalg.eig(a)[1]) ** 2,
    "eig-vectors": lambda a: np.linalg.eig(a)[1],  # NumPy's own normalisation, differentiated as is
    "eig-vectors-batched": lambda a: np.linalg.eig(np.stack([a, a.T + 1.0]))[1],
}


@pytest.mark.parametrize("name", sorted(LINALG))
def test_linalg_of_complex_matrices(name):
    check_complex(LINALG[name], A)


@pytest.mark.parametrize("name", ["eigvals", "eig-values", "eig-vectors-modulus", "eig-vectors"])
def test_eig_of_real_matrices_with_complex_eigenvalues(name):
    assert np.iscomplexobj(np.linalg.eigvals(M))
    check_complex(LINALG[name], M)
    sym = M + M.T  # real eigenvalues: NumPy returns real arrays
    assert not np.iscomplexobj(np.linalg.eig(sym)[1])
    check_complex(LINALG[name], sym)


def test_solve_lstsq_and_pinv():
    check_complex(np.linalg.solve, A, B)
    check_complex(lambda a, b: np.linalg.lstsq(a, b)[0], A, B)
    check_complex(np.linalg.solve, A.real, B)
    tall, b = crandn(R, 4, 2), crandn(R, 4)
    check_complex(lambda a, b: np.linalg.lstsq(a, b)[1], tall, b)  # residuals: sum of |r|², real
    check_complex(np.linalg.pinv, tall)
    check_complex(np.linalg.pinv, tall.T)


def test_correlate_conjugates_v_and_full_like_keeps_a_complex_fill():
    a, v = crandn(R, 5), crandn(R, 3)
    for mode in ("valid", "same", "full"):
        check_complex(lambda a, v: np.correlate(a, v, mode), a, v)
    check_complex(lambda z, c: np.full_like(z, c[0]) * z, P, crandn(R, 1))


def test_cho_solve_refuses_complex_values():
    from pullback.scipy.linalg import cho_solve

    pytest.importorskip("scipy")
    lower = np.tril(A)
    with pytest.raises(TypeError, match="cho_solve of complex values"):
        pb.gradient(lambda b: np.sum(np.abs(cho_solve((lower, True), b))), B)


def test_eig_second_order():
    def loss(a):
        w, v = np.linalg.eig(a)
        return np.sum(np.abs(w) ** 2) + np.sum(np.abs(v[0]) ** 2 * np.real(w))

    def directional(a):
        (g,) = pb.gradient(loss, a)
        return np.real(np.sum(g * D))

    D = crandn(np.random.default_rng(3), 3, 3)
    check_complex(directional, A, rtol=1e-4, atol=1e-6)


def test_eig_repeated_eigenvalues_raise_in_reverse_mode():
    a = np.diag([2.0, 2.0, 1.0]) + 0j
    with pytest.raises(ValueError, match="not unique"):
        pb.gradient(lambda a: np.sum(np.abs(np.linalg.eig(a)[1]) ** 2 * np.arange(3)), a)
    (g,) = pb.gradient(lambda a: np.real(np.sum(np.linalg.eig(a)[0])), a)  # the trace: fine
    np.testing.assert_allclose(g, np.eye(3))


@pytest.mark.parametrize("fn", [np.linalg.svd, np.linalg.qr, np.linalg.cholesky], ids=lambda f: f.__name__)
def test_hermitian_decompositions_refuse_complex_matrices(fn):
    h = A @ A.conj().T
    with pytest.raises(TypeError, match=f"numpy.linalg.{fn.__name__} of a complex matrix"):
        pb.gradient(lambda a: np.sum(np.abs(fn(a)[0])), h)
    if fn is np.linalg.svd:  # the singular values alone are differentiable
        check_complex(lambda a: np.linalg.svd(a, compute_uv=False), h)


# --- functions of other families that treat complex values specially ------------------------------
def _written_into_zeros(z):
    h = np.zeros_like(z)
    h[1:3] = z[:2] * 2.0
    return h


S = crandn(R, 6)
T = crandn(R, 6)
SPECIAL = {
    "cov": lambda z: np.cov(np.stack([z, T])), "cov-1d": np.cov, "cov-aweights": lambda z: np.cov(np.stack([z, T]), aweights=np.arange(1.0, 7.0)),
    "corrcoef": lambda z: np.corrcoef(z, T), "linspace": lambda z: np.linspace(z[0], z[1], 4),
    "logspace": lambda z: np.logspace(z[0], z[1], 3), "insert": lambda z: np.insert(z, 1, T[0]),
    "vander": lambda z: np.vander(z[:3]), "zeros_like-written": _written_into_zeros,
}


@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_functions_that_conjugate_or_keep_complex_values(name):
    check_complex(SPECIAL[name], S)


def test_unique_values_keeps_numpys_order_for_complex_values():
    z = np.array([3 + 1j, 1 + 2j, 3 + 1j, 0.5 - 1j, 2.2 + 0.1j])
    for f in (np.unique_values, lambda z: np.unique_counts(z).values, lambda z: np.unique_all(z).values):
        y, back = pb.pullback(f, z)
        np.testing.assert_array_equal(y, f(z))
        (g,) = back(np.arange(1.0, 1.0 + len(y)) * 1j)
        expected = np.zeros(5, complex)
        for k, v in enumerate(y):
            expected[np.flatnonzero(z == v)[0]] += (k + 1) * 1j
        np.testing.assert_array_equal(g, expected)


def test_geomspace_of_complex_ends_is_refused_clearly():
    with pytest.raises(TypeError, match="geomspace of complex values"):
        pb.gradient(lambda z: np.sum(np.abs(np.geomspace(z[0], z[1], 4))), S)


# --- every sampled rule and every ufunc rule, on complex input ------------------------------------
# The option samples of test_rules_options name one call of every registered function. Here each
# float input becomes complex: where NumPy accepts it, pullback must give derivatives that agree
# with central differences in both directions, or refuse with a clear TypeError; where NumPy
# refuses it, pullback must raise too.
import test_rules_options  # noqa: E402

# Samples whose central differences are not valid: the sample's values repeat on purpose (the
# unique family: a perturbation separates the copies), hold NaN, or are uninitialised (empty_like).
NOT_SMOOTH = ("unique", "union1d", "setdiff1d", "setxor1d", "intersect1d", "nanmax", "nanmin", "nanvar", "nanstd",
              "nanmedian", "nanmean", "nansum", "nanprod", "nanpercentile", "nanquantile", "nancumsum", "nancumprod",
              "empty_like", "empty")
# Refused for complex input with a clear TypeError (see the coverage table).
REFUSED = {"eigh": "fixed only up to a phase",
           "svd": "numpy.linalg.svd of a complex matrix", "qr": "numpy.linalg.qr of a complex matrix",
           "cholesky": "numpy.linalg.cholesky of a complex matrix", "cho_factor": "numpy.linalg.cholesky of a complex",
           "cho_solve": "cho_solve of complex values", "geomspace": "geomspace of complex values",
           "roots": "some roots are complex", "nan_to_num": "complex128",
           "orthogonal_procrustes": "numpy.linalg.svd of a complex matrix", "polar": "numpy.linalg.svd of a complex",
           "orth": "numpy.linalg.svd of a complex matrix", "subspace_angles": "numpy.linalg.svd of a complex matrix",
           "qr_multiply": "numpy.linalg.qr of a complex matrix", "cholesky_banded": "numpy.linalg.cholesky of a complex",
           "eig_banded": "fixed only up to a phase", "airye": "airye of complex values"}


def _complexified(values, rng):
    out = []
    for a in values:
        a = np.asarray(a)
        if a.dtype.kind == "f":
            a = a + 0.3j * rng.normal(size=a.shape) * (np.abs(a).mean() + 0.1)
        out.append(a)
    return out


def _name(sample):
    return repr(sample).split("(")[0].split(".")[-1]


@pytest.mark.parametrize("sample", test_rules_options.SAMPLES, ids=repr)
def test_every_sampled_function_on_complex_input(sample):
    import warnings

    if sample.needs_scipy:
        pytest.importorskip("scipy")
    name = _name(sample)
    if any(name.startswith(prefix) for prefix in NOT_SMOOTH):
        pytest.skip("central differences are not valid at this sample (repeated values, NaN or uninitialised)")
    f = sample.function(sample.calls[0])
    values = _complexified(sample.arrays, np.random.default_rng(5))
    with warnings.catch_warnings():
        warnings.simplefilter("error", np.exceptions.ComplexWarning)
        try:
            f(*values)
        except (TypeError, ValueError, NotImplementedError, np.exceptions.ComplexWarning):
            with pytest.raises((TypeError, ValueError, NotImplementedError, np.exceptions.ComplexWarning)):
                pb.pullback(f, *values)
            return

    def flat(*v):
        y = f(*v)
        if isinstance(y, (tuple, list)):
            parts = [p for p in y if np.asarray(pb.stop_gradient(p)).dtype.kind in "fc"]
            return np.concatenate([np.ravel(p) * (k + 1) for k, p in enumerate(parts)]) if parts else 0.0
        return y

    if name not in REFUSED:
        check_complex(flat, *values, rtol=1e-4, atol=1e-6)
        return
    try:  # differentiable for some options (svd's values), refused clearly for others
        check_complex(flat, *values, rtol=1e-4, atol=1e-6)
    except (TypeError, ValueError, NotImplementedError) as error:
        assert REFUSED[name] in str(error)


def test_ufunc_rules_on_complex_input():
    import warnings

    pytest.importorskip("scipy.special")
    from pullback._registry import NONDIFF_UFUNCS, UFUNC_RULES

    rng = np.random.default_rng(3)
    z = rng.uniform(0.3, 1.5, 4) + 1j * rng.uniform(0.2, 0.9, 4)
    w = rng.uniform(0.3, 1.5, 4) + 1j * rng.uniform(0.2, 0.9, 4)
    no_complex_derivative = {"_riemann_zeta"}  # SciPy has no complex derivative for it: it raises
    checked, valued_without_gradient = [], []
    for u in sorted(set(UFUNC_RULES) | set(NONDIFF_UFUNCS), key=lambda u: u.__name__):
        if not isinstance(u, np.ufunc) or u.nout > 1 or u.signature is not None:  # gufuncs: tested above
            continue
        args = [z, w, z * 0.5][:u.nin]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", np.exceptions.ComplexWarning)
                y = u(*args)
        except (TypeError, np.exceptions.ComplexWarning):
            with pytest.raises(TypeError):
                pb.gradient(lambda a: np.sum(np.abs(u(a, *args[1:]))), z)
            continue
        if u in NONDIFF_UFUNCS:
            if np.asarray(y).dtype.kind in "fc":
                valued_without_gradient.append(u.__name__)
            continue
        if u.__name__ in no_complex_derivative:
            with pytest.raises(TypeError):
                pb.gradient(lambda a: np.sum(np.abs(u(a, *args[1:]))), z)
            continue
        check_complex(u, *args, rtol=1e-4, atol=1e-6)
        checked.append(u.__name__)
    assert valued_without_gradient == ["rint"]  # piecewise constant: no gradient is right
    assert len(checked) > 50


# --- the real and imaginary parts as NumPy's views ------------------------------------------------
def test_setting_the_parts_of_a_complex_array():
    def f(z):
        z = z * 1.0
        z.real = np.array([5.0, 6.0]) * np.abs(z)
        z.imag = z.imag ** 2
        return np.sum(np.abs(z) ** 2)

    z = np.array([1.0 + 2.0j, 3.0 - 1.0j])
    assert pb.withgradient(f, z).val == f(z.copy())
    check_complex(f, z)

    def g(x):
        x = x * 1.0
        x.real = x[::-1] * 2.0  # a real array is its own real part
        return np.sum(x * x)

    check_complex(g, np.array([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="does not have imaginary part"):
        pb.gradient(lambda x: setattr(x, "imag", 1.0) or np.sum(x), np.ones(2))


@pytest.mark.parametrize("write", [
    lambda z: z.real.__setitem__(0, 5.0),
    lambda z: np.imag(z).__setitem__(slice(None), 0.0),
    lambda z: np.add(z.imag[1:], 1.0, out=z.imag[1:]),
], ids=["real-item", "imag-all", "imag-slice-out"])
def test_writing_through_a_part_is_refused_naming_the_fix(write):
    def f(z):
        write(z)
        return np.sum(np.abs(z))

    z = np.array([1.0 + 2.0j, 3.0 - 1.0j])
    with pytest.raises(ValueError, match="part of a complex array being differentiated"):
        pb.gradient(f, z)
    with pytest.raises(ValueError, match="part of a complex array being differentiated"):
        pb.jvp(f, (z,), (z,))


def test_a_part_taken_before_a_write_to_the_array_can_still_be_used():
    def f(z):
        z = z * 1.0
        r = z.real[0:1] * 1.0
        z[0] = 1.0 + 1.0j
        return np.sum(np.abs(z)) + np.sum(r)

    z = np.array([1.0 + 2.0j, 3.0 - 1.0j])
    assert pb.withgradient(f, z).val == f(z.copy())
    check_complex(f, z)


def test_eigh_of_complex_hermitian_matrices():
    for uplo in ("L", "U"):
        check_complex(lambda a: np.linalg.eigvalsh(a, uplo), A)  # reads one triangle; the diagonal's real part
        check_complex(lambda a: np.linalg.eigh(a, UPLO=uplo)[0], A)
    # phase-invariant functions of the eigenvectors, in reverse mode
    check_complex(lambda a: np.abs(np.linalg.eigh(a)[1]) ** 2, A, forward=False)
    check_complex(lambda a: (lambda w, v: v @ np.diag(np.sin(w)) @ v.conj().T)(*np.linalg.eigh(a)), A, forward=False)
    with pytest.raises(ValueError, match="fixed only up to a phase"):
        pb.gradient(lambda a: np.real(np.sum(np.linalg.eigh(a)[1])), A)
    _, t = pb.jvp(lambda a: np.linalg.eigh(a)[1], (A,), (A,))
    assert np.all(np.isnan(t))  # no stated phase, no tangent


# --- the real and imaginary parts are views: they see later writes to the array --------------------
def _part_then_write(z):
    z = z.copy()
    r = z.real
    z[0] = 5.0 + 1.0j
    return r * r


def _part_of_a_view_then_scaled(z):
    z = z.copy()
    i = np.imag(z[1:])
    z *= 2.0
    return i * z[1:].real


@pytest.mark.parametrize("fn", [_part_then_write, _part_of_a_view_then_scaled])
def test_a_part_taken_before_a_write_sees_the_write(fn):
    z = np.array([1.0 + 2.0j, 3.0 - 1.0j, 0.5 + 0.5j])
    np.testing.assert_array_equal(pb.withgradient(lambda z: np.sum(fn(z)), z).val, np.sum(fn(z)))
    check_complex(fn, z)


def test_logsumexp_of_complex_values_equals_scipy_s_under_differentiation():
    import itertools
    import warnings

    sp = pytest.importorskip("scipy.special")
    from pullback.scipy import special as ps

    rng = np.random.default_rng(5)
    for complex_a, weights, axis, keepdims, sign in itertools.product(
            [False, True], [None, "positive", "mixed signs", "complex"], [None, 0, 1], [False, True], [False, True]):
        a = rng.normal(size=(3, 4)) * 3 + (2j * rng.normal(size=(3, 4)) if complex_a else 0)
        b = None if weights is None else np.abs(rng.normal(size=(3, 4))) + 0.5
        if weights == "mixed signs":
            b = b * np.where(rng.random((3, 4)) < 0.5, -1, 1)
        if weights == "complex":
            b = b + 0.7j * rng.normal(size=(3, 4))
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = sp.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=sign)
            got = pb.pullback(lambda a: ps.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=sign), a)[0]
        for g, e in zip(got, expected) if sign else [(got, expected)]:
            assert np.shape(g) == np.shape(e) and np.asarray(g).dtype == np.asarray(e).dtype
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    zero_sum = pb.pullback(lambda a: ps.logsumexp(a, b=np.array([1.0, -1.0]), return_sign=True), np.zeros(2, complex))[0]
    assert zero_sum[0] == -np.inf and zero_sum[1] == 0  # SciPy's sign of a zero sum


def test_the_complex_sign_of_logsumexp_is_differentiated():
    pytest.importorskip("scipy.special")
    from pullback.scipy import special as ps

    a = np.array([0.3 + 0.4j, -0.2 + 1.1j, 0.5 - 0.3j])
    check_complex(lambda a: ps.logsumexp(a, b=np.array([1.0, 2.0, 0.5]), return_sign=True)[1], a, rtol=1e-6, atol=1e-8)


# --- np.emath: complex results of real input ---------------------------------------------------------------
EMATH = {
    "sqrt": np.emath.sqrt, "log": np.emath.log, "log2": np.emath.log2, "log10": np.emath.log10,
    "logn of x": lambda x: np.emath.logn(3.0, x), "logn of n": lambda n: np.emath.logn(n, 7.0),
    "power": lambda x: np.emath.power(x, 0.5), "integer power": lambda x: np.emath.power(x, -2),
    "power of the exponent": lambda p: np.emath.power(-2.5, p), "arctanh": np.emath.arctanh,
    "arcsin": np.emath.arcsin, "arccos": np.emath.arccos,
}


@pytest.mark.parametrize("name", sorted(EMATH))
@pytest.mark.parametrize("x", [np.array([-2.0, 0.5, 3.0, -0.7]), np.array([0.3, 0.5, 0.25, 0.7])], ids=["complex", "real"])
def test_emath_functions_are_numpys_with_the_complex_functions_derivative(name, x):
    fn = EMATH[name]
    loss = lambda a: np.sum(np.real(fn(a)) * np.arange(1, 5) + np.imag(fn(a)) ** 2)
    val, (g,) = pb.withgradient(loss, x)
    assert val == loss(x)
    np.testing.assert_allclose(g, numerical_gradient(loss, x)[0], rtol=1e-6, atol=1e-8)
    y, t = pb.jvp(fn, (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(y, fn(x), strict=True)
    np.testing.assert_allclose(t, (fn(x + 1e-6) - fn(x - 1e-6)) / 2e-6, rtol=1e-6, atol=1e-8)
    jitted = pb.jit(lambda a: pb.gradient(loss, a))
    for arg in (x, -x, x):
        np.testing.assert_allclose(jitted(arg)[0], pb.gradient(loss, arg)[0], rtol=1e-12)


def test_emath_keeps_numpys_dtypes():
    x32 = np.array([-2.0, 0.5], np.float32)
    for fn in (np.emath.sqrt, np.emath.log, lambda x: np.emath.power(x, 3)):  # power: complex128 (an int64 p)
        y = pb.pullback(fn, x32)[0]
        assert y.dtype == fn(x32).dtype
        np.testing.assert_array_equal(y, fn(x32))
        assert pb.gradient(lambda a: np.sum(np.abs(fn(a))), x32)[0].dtype == np.float32
    val, (g,) = pb.withgradient(lambda x: np.emath.sqrt(x).imag, -4.0)
    assert val == np.emath.sqrt(-4.0).imag and g == -0.25


# --- cross products of complex64 -------------------------------------------------------------------------
@pytest.mark.parametrize("cross", [np.cross, np.linalg.cross], ids=["numpy", "linalg"])
def test_complex64_cross_of_two_tracked_operands_is_numpys_value_bit_for_bit(cross):
    rng = np.random.default_rng(2)
    f = lambda x: cross(x, x[::-1])
    for _ in range(5):
        a = (rng.standard_normal((3, 3)) + 3 * np.eye(3) + 1j * rng.standard_normal((3, 3))).astype(np.complex64)
        for y in (pb.jvp(f, (a,), (a,))[0], pb.pullback(f, a)[0]):
            np.testing.assert_array_equal(y, f(a), strict=True)
    check_complex(f, crandn(rng, 3, 3))
