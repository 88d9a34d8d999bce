"""Complex numbers against independent values: central differences in complex128 (through
tests/complex_checks.py), closed forms and JAX. The convention: for a real loss L of z = x + iy
the gradient is dL/dx - i dL/dy, which is what jax.grad returns."""

import warnings

import numpy as np
import pytest

import pullback as pb
from complex_checks import check_complex


def crandn(rng, *shape):
    return rng.normal(size=shape) + 1j * rng.normal(size=shape)


RNG = np.random.default_rng(20)
Z = crandn(RNG, 3, 4) * 0.5 + 0.7
W = crandn(RNG, 3, 4) * 0.5 - 0.3
X = RNG.normal(size=(3, 4))


# --- bugs fixed -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [
    lambda a: np.var(a, dtype=np.complex128), lambda a: np.var(a, axis=0, ddof=1, dtype=complex),
    lambda a: np.std(a, axis=1, dtype=np.complex128), lambda a: np.std(a, keepdims=True, dtype="complex128"),
], ids=["var", "var-axis-ddof", "std-axis", "std-keepdims"])
def test_variance_of_complex_values_with_a_complex_dtype(fn):
    """A variance is real even when `dtype=` makes its array complex: the imaginary part of its cotangent,
    and of its tangent, is zero."""
    assert np.iscomplexobj(fn(Z))
    check_complex(fn, Z)
    check_complex(fn, X)


def test_variance_with_a_complex_dtype_in_closed_form():
    z = np.array([1.0 + 2.0j, 3.0 - 1.0j, 0.5 + 0.5j])
    y, back = pb.pullback(lambda a: np.var(a, dtype=np.complex128), z)
    assert y == np.var(z, dtype=np.complex128)
    (g,) = back(np.complex128(1.0 + 5.0j))  # var = mean |z - m|², gradient 2 conj(z - m) / n
    np.testing.assert_allclose(g, 2.0 * np.conj(z - z.mean()) / 3.0, rtol=1e-14)
    _, t = pb.jvp(lambda a: np.var(a, dtype=np.complex128), (z,), (np.array([1j, 0, 0]),))
    assert t == 2.0 * np.real(np.conj(z[0] - z.mean()) * 1j) / 3.0


def test_phase_invariant_functions_of_complex64_hermitian_eigenvectors_are_differentiated():
    """The check that a function does not depend on the eigenvectors' phases allows complex64 rounding."""
    rng = np.random.default_rng(1)
    weights = 10.0 * rng.normal(size=(4, 4))

    def f(a):
        return np.sum(np.abs(np.linalg.eigh(a + a.conj().T)[1]) ** 2 * weights)

    for _ in range(6):
        a = crandn(rng, 4, 4).astype(np.complex64)
        (g,) = pb.gradient(f, a)
        (g128,) = pb.gradient(f, a.astype(np.complex128))
        assert g.dtype == np.complex64
        np.testing.assert_allclose(g, g128, rtol=0, atol=2e-3 * np.max(np.abs(g128)))
        with pytest.raises(ValueError, match="fixed only up to a phase"):
            pb.gradient(lambda a: np.sum(np.real(np.linalg.eigh(a + a.conj().T)[1])), a)


def _hermitian_pair(seed):
    rng = np.random.default_rng(seed)
    h0, h1 = crandn(rng, 3, 3), crandn(rng, 3, 3)
    return h0 + h0.conj().T, h1 + h1.conj().T


def test_hessian_through_eigenvalues_of_a_complex_hermitian_matrix():
    h0, h1 = _hermitian_pair(0)

    def f(p):
        return np.sum(np.linalg.eigvalsh(h0 + p[0] * h1 + p[1] * (h1 @ h1)) ** 3)

    def g(p):
        return pb.gradient(f, p)[0]

    p, h = np.array([0.3, -0.2]), 1e-5
    numeric = np.stack([(g(p + h * e) - g(p - h * e)) / (2 * h) for e in np.eye(2)])
    np.testing.assert_allclose(pb.hessian(f, p), numeric, rtol=1e-6, atol=1e-6)
    up = pb.hessian(lambda p: np.sum(np.linalg.eigh(h0 + p[0] * h1 + p[1] * (h1 @ h1), UPLO="U")[0] ** 3), p)
    np.testing.assert_allclose(up, numeric, rtol=1e-6, atol=1e-6)


def test_third_derivative_through_eigenvalues_of_a_complex_hermitian_matrix():
    h0, h1 = _hermitian_pair(0)

    def f(p):
        return np.sum(np.linalg.eigvalsh(h0 + p[0] * h1 + p[1] * (h1 @ h1)) ** 3)

    p, e, h = np.array([0.3, -0.2]), np.array([1.0, 0.5]), 1e-4

    def hvp(p):
        return pb.hvp(f, p, e)

    numeric = (hvp(p + h * e) - hvp(p - h * e)) / (2 * h)
    np.testing.assert_allclose(pb.jvp(hvp, (p,), (e,))[1], numeric, rtol=1e-6)
    np.testing.assert_allclose(pb.jvp(lambda p: pb.jvp(f, (p,), (e,))[1], (p,), (e,))[1],
                               np.dot(pb.hessian(f, p) @ e, e), rtol=1e-10)


def test_forward_over_reverse_of_eigvalsh_of_a_complex_matrix():
    z, v = crandn(np.random.default_rng(3), 3, 3), crandn(np.random.default_rng(4), 3, 3)

    def directional(a):
        (g,) = pb.gradient(lambda b: np.sum(np.linalg.eigvalsh(b) ** 3), a)
        return np.real(np.sum(g * v))

    check_complex(directional, z, rtol=1e-4, atol=1e-6, h=1e-5)


def _cofactor_adjugate(a):
    n = a.shape[0]
    adj = np.zeros((n, n), dtype=a.dtype)
    for i in range(n):
        for j in range(n):
            adj[j, i] = (-1) ** (i + j) * np.linalg.det(np.delete(np.delete(a, i, 0), j, 1))
    return adj


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_second_derivative_of_det_at_a_numerically_singular_matrix(complex_):
    """At a rank n-1 matrix that LU does not find exactly singular, det(A)·A⁻¹ rounds well but its
    derivative is a difference of terms as large as 1/σ_min: the adjugate comes from the SVD there."""
    rng = np.random.default_rng(5)
    b, c = rng.normal(size=(4, 3)), rng.normal(size=(3, 4))
    if complex_:
        b, c = b + 1j * rng.normal(size=(4, 3)), c + 1j * rng.normal(size=(3, 4))
    s, v = b @ c, rng.normal(size=(4, 4)).astype(b.dtype)
    np.linalg.inv(s)  # LU does not see the singularity
    h = 1e-5
    want = ((_cofactor_adjugate(s + h * v) - _cofactor_adjugate(s - h * v)) / (2 * h)).T  # d/dt of det's gradient
    _, got = pb.jvp(lambda a: pb.pullback(np.linalg.det, a)[1](np.ones((), a.dtype))[0], (s,), (v,))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)
    check_complex(np.linalg.det, s)


# --- the probe: every complex-capable operation against central differences -------------------
UNARY = {
    "exp": np.exp, "log": np.log, "log10": np.log10, "log1p": np.log1p, "expm1": np.expm1, "sqrt": np.sqrt,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "arcsin": np.arcsin, "arccos": np.arccos, "arctan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "arcsinh": np.arcsinh, "arccosh": np.arccosh,
    "arctanh": np.arctanh, "reciprocal": np.reciprocal, "square": np.square, "conj": np.conj, "real": np.real,
    "imag": np.imag, "abs": np.abs, "sign": np.sign, "angle": np.angle, "power-real": lambda a: a ** 0.3,
    "power-complex": lambda a: a ** (0.3 + 0.4j), "power-int": lambda a: a ** -2, "base-real": lambda a: 2.0 ** a,
    "base-complex": lambda a: (1.0 + 1.0j) ** a, "float_power": lambda a: np.float_power(a, 1.5),
}
CUTS = ["log", "sqrt", "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "power-real", "power-complex"]
NEAR_CUTS = np.array([-2 + 1e-3j, -2 - 1e-3j, 2 + 1e-3j, 2 - 1e-3j, 3e-3 + 2j, -3e-3 + 2j, 3e-3 - 2j, -3e-3 - 2j])


def _loss_of_values(y):
    return np.sum(np.real(y * (0.5 - 1.5j)) + np.abs(y) ** 3)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_functions_and_complex64(name):
    check_complex(UNARY[name], Z)
    z64 = Z.astype(np.complex64)
    (g,) = pb.gradient(lambda a: _loss_of_values(UNARY[name](a)), z64)
    (g128,) = pb.gradient(lambda a: _loss_of_values(UNARY[name](a)), z64.astype(np.complex128))
    assert g.dtype == np.complex64
    np.testing.assert_allclose(g, g128, rtol=1e-3, atol=1e-4 * np.max(np.abs(g128)))


@pytest.mark.parametrize("name", CUTS)
def test_unary_functions_beside_their_branch_cuts(name):
    for z in NEAR_CUTS:
        check_complex(UNARY[name], np.array([z]), h=1e-7, rtol=1e-4, atol=1e-6)


PAIRED = {
    "multiply": np.multiply, "divide": np.divide, "power": np.power, "matmul": lambda a, b: a @ b.T,
    "matmul-H": lambda a, b: a.conj().T @ b, "vdot": np.vdot, "inner": np.inner, "outer": np.outer,
    "einsum-conj": lambda a, b: np.einsum("ij,kj->ik", a, b.conj()), "einsum-full": lambda a, b: np.einsum("ij,ij", a.conj(), b),
    "tensordot": lambda a, b: np.tensordot(a.conj(), b, axes=([0], [0])), "vecdot": np.vecdot,
    "cross": lambda a, b: np.cross(a[:, :3], b[:, :3]), "kron": lambda a, b: np.kron(a[:2, :2], b[:2, :2]),
}


@pytest.mark.parametrize("name", sorted(PAIRED))
def test_products_with_real_and_complex_operands(name):
    fn = PAIRED[name]
    check_complex(fn, Z, W)
    check_complex(fn, X, W)  # the real operand's gradient is real (checked inside)
    check_complex(fn, Z, X)


REDUCTIONS = {
    "sum": lambda a: np.sum(a, axis=0), "mean": np.mean, "prod": lambda a: np.prod(a, axis=1), "cumsum": np.cumsum,
    "cumprod": lambda a: np.cumprod(a, axis=1), "var": np.var, "std": lambda a: np.std(a, axis=0, ddof=1),
    "nanvar": lambda a: np.nanvar(a, axis=1), "average": lambda a: np.average(a, axis=0, weights=[1.0, 2.0, 3.0]),
    "sum-dtype": lambda a: np.sum(a, dtype=np.complex128), "prod-zero": lambda a: np.prod(a * np.array([0, 1, 1, 1]), axis=1),
    "norm": np.linalg.norm, "norm-1": lambda a: np.linalg.norm(a, 1), "norm-axis": lambda a: np.linalg.norm(a, 3, axis=1),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_and_statistics(name):
    check_complex(REDUCTIONS[name], Z)


A = crandn(RNG, 3, 3) + 2.0 * np.eye(3)
LINALG = {
    "inv": np.linalg.inv, "det": np.linalg.det, "slogdet": lambda a: np.linalg.slogdet(a)[1],
    "slogdet-sign": lambda a: np.linalg.slogdet(a)[0], "solve": lambda a: np.linalg.solve(a, A.T[:, :2]),
    "eigvalsh": lambda a: np.linalg.eigvalsh(a @ a.conj().T), "eigh-values": lambda a: np.linalg.eigh(a)[0],
    "eigh-projectors": lambda a: np.abs(np.linalg.eigh(a + a.conj().T)[1]) ** 2,
    "svdvals": lambda a: np.linalg.svd(a, compute_uv=False), "norm-2": lambda a: np.linalg.norm(a, 2),
    "norm-nuc": lambda a: np.linalg.norm(a, "nuc"), "pinv": np.linalg.pinv, "cond": np.linalg.cond,
}


@pytest.mark.parametrize("name", sorted(LINALG))
def test_linalg_of_complex_matrices_in_complex128_and_complex64(name):
    fn = LINALG[name]
    check_complex(fn, A, forward=name != "eigh-projectors")  # forward mode: NaN tangents for the vectors
    a64 = A.astype(np.complex64)

    def loss(a):
        return _loss_of_values(fn(a))

    (g,) = pb.gradient(loss, a64)
    (g128,) = pb.gradient(loss, a64.astype(np.complex128))
    assert g.dtype == np.complex64
    np.testing.assert_allclose(g, g128, rtol=0, atol=2e-3 * np.max(np.abs(g128)))


@pytest.mark.parametrize("fn", [np.linalg.qr, np.linalg.cholesky, np.linalg.svd])
def test_decompositions_written_for_real_matrices_refuse_complex_ones(fn):
    h = A @ A.conj().T
    with pytest.raises(TypeError, match="of a complex matrix"):
        pb.gradient(lambda a: np.sum(np.abs(fn(a)[0] if fn is not np.linalg.cholesky else fn(a)) ** 2), h)


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_ffts_with_each_norm(norm):
    v, m = crandn(RNG, 8), crandn(RNG, 4, 6)
    for fn in (np.fft.fft, np.fft.ifft, np.fft.irfft, np.fft.hfft):
        check_complex(lambda a: fn(a, norm=norm), v)
        check_complex(lambda a: fn(a, n=5, norm=norm), v)
    for fn in (np.fft.rfft, np.fft.ihfft):
        check_complex(lambda a: fn(a, n=11, norm=norm), v.real)
    check_complex(lambda a: np.fft.fft2(a, s=(3, 8), norm=norm), m)
    check_complex(lambda a: np.fft.irfftn(a, s=(4, 7), axes=(0, 1), norm=norm), m)
    check_complex(lambda a: np.fft.rfft2(a, norm=norm), m.real)
    y, back = pb.pullback(lambda a: np.fft.fft(a, norm=norm), v.astype(np.complex64))
    assert y.dtype == back(y)[0].dtype == np.complex64


def _with_real_part(a, b):
    y = a * 1.0
    y.real = b.imag
    return y


def _with_element(a, b):
    y = a * 1.0
    y[0] = b[0, 0] * 2.0
    y[1, 2] = 1.0 + 2.0j
    y *= b
    y += 1j
    return y


def _real_into_complex(a, b):
    y = np.zeros_like(b)
    y[:, 0] = a[:, 0]
    y[:, 1:] = b[:, 1:]
    return y


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")  # complex into a real array, as NumPy
@pytest.mark.parametrize("fn", [_with_real_part, _with_element, _real_into_complex,
                                lambda a, b: np.real_if_close(a + 0j) * b])
def test_writes_and_conversions(fn):
    check_complex(fn, Z, W)
    check_complex(fn, Z + 0.1, X)


def test_astype_between_complex_dtypes():
    c = np.conj(W)
    y, back = pb.pullback(lambda a: a.astype(np.complex64).astype(np.complex128) * W, Z)
    (g,) = back(c)
    assert (y.dtype, g.dtype) == (np.complex128, np.complex128)
    np.testing.assert_allclose(g, c * W, rtol=1e-6)
    y, back = pb.pullback(lambda a: a.astype(np.complex128) * W, Z.astype(np.complex64))
    (g,) = back(c)
    assert (y.dtype, g.dtype) == (np.complex128, np.complex64)
    np.testing.assert_allclose(g, c * W, rtol=1e-6)


def test_a_part_written_in_place_and_a_complex_value_to_real_are_refused_or_warned():
    def write_part(a):
        y = a * 1.0
        y.imag += 1.0
        return np.sum(np.abs(y))

    with pytest.raises(ValueError, match="imag part"):
        pb.gradient(write_part, Z)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        (g,) = pb.gradient(lambda a: np.sum(a.astype(np.float64) ** 2), Z)
    np.testing.assert_allclose(g, 2.0 * Z.real)  # the imaginary part is dropped: no gradient there


def _losses(m):
    return {
        "abs2": lambda a: m.sum(m.abs(m.sin(a)) ** 2), "angle": lambda a: m.sum(m.angle(a) ** 2),
        "det": lambda a: m.abs(m.linalg.det(a)), "slogdet": lambda a: m.linalg.slogdet(a)[1],
        "inv": lambda a: m.real(m.sum(m.linalg.inv(a) * m.conj(a))),
        "fft": lambda a: m.sum(m.abs(m.fft.fft(a, axis=0, norm="ortho")) ** 3),
        "ifft2": lambda a: m.sum(m.real(m.fft.ifft2(a, norm="forward") * a)),
        "eigvalsh": lambda a: m.sum(m.linalg.eigvalsh(a @ m.conj(a.T)) ** 2),
        "svd": lambda a: m.sum(m.linalg.svd(a, compute_uv=False) ** 3), "var": lambda a: m.var(a) + m.std(a, axis=0).sum(),
        "prod": lambda a: m.abs(m.prod(a)), "vdot": lambda a: m.real(m.vdot(a, m.sin(a))),
        "power": lambda a: m.sum(m.abs(a ** (0.5 + 0.2j))), "arctanh": lambda a: m.sum(m.real(m.arctanh(a * 0.3))),
    }


@pytest.mark.parametrize("name", sorted(_losses(np)))
def test_gradient_is_jaxs(name):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    (g,) = pb.gradient(_losses(np)[name], A)
    np.testing.assert_allclose(g, np.asarray(jax.grad(_losses(jnp)[name])(jnp.asarray(A))), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", ["det", "eigvalsh", "fft", "var", "power"])
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_jit_matches_eager_and_keeps_dtypes(name, dtype):
    f, a = _losses(np)[name], A.astype(dtype)
    step = pb.jit(pb.grad(f))
    for b in (a, a * dtype(1.1)):
        (want,) = pb.gradient(f, b)
        got = step(b)
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == np.complex64 else 1e-10)
