"""Forward mode, Jacobians and Hessians of structured and odd inputs, against JAX and finite differences."""

import collections
import dataclasses

import numpy as np
import pytest

import pullback as pb


def central_differences(f, x, eps=1e-6):
    """The Jacobian of `f` at float array `x` by central differences, shaped `y.shape + x.shape`."""
    x = np.asarray(x, float)
    y = np.asarray(f(x))
    columns = []
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = eps
        e = e.reshape(x.shape)
        columns.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps))
    return np.stack(columns, axis=-1).reshape(y.shape + x.shape)


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def test_jacobian_of_a_python_float_to_a_float_is_a_float():
    j = pb.jacobian(lambda s: s ** 3, 2.0)[0]
    assert type(j) is float and j == pytest.approx(12.0)
    j = pb.jacobian(lambda s: np.sum(s * np.ones(2)) ** 2, 1.5)[0]  # np.float64 value, Python float argument
    assert type(j) is float and j == pytest.approx(2 * 3.0 * 2)


def test_jacobian_of_a_numpy_float_is_a_numpy_float_and_of_a_zero_d_array_a_zero_d_array():
    j = pb.jacobian(lambda s: s ** 3, np.float32(2.0))[0]
    assert type(j) is np.float32 and j == pytest.approx(12.0)
    j = pb.jacobian(lambda s: s ** 3, np.array(2.0))[0]
    assert type(j) is np.ndarray and j.shape == () and j == pytest.approx(12.0)
    a, s = pb.jacobian(lambda a, s: np.sum(a) * s, np.ones(3), 2.0)
    np.testing.assert_allclose(a, [2.0, 2.0, 2.0])
    assert type(s) is float and s == pytest.approx(3.0)


def test_jacobian_at_a_python_float_is_weak_beside_float32(jax):
    (j,) = pb.jacobian(lambda s: np.sin(s * np.ones(2, np.float32)), 2.0)
    want = jax.jacfwd(lambda s: jax.numpy.sin(s * jax.numpy.ones(2, np.float32)))(2.0)
    assert j.dtype == want.dtype == np.float32
    np.testing.assert_allclose(j, want, rtol=1e-6)
    s, x = pb.jacobian(lambda s, x: np.sum(s * x) * np.ones(1, np.float32), 2.0, np.ones(5, np.float32))
    assert s.dtype == x.dtype == np.float32
    np.testing.assert_allclose(s, [5.0])
    np.testing.assert_allclose(x, np.full((1, 5), 2.0))


def test_jacobian_of_a_python_float_inside_jit():
    cube = pb.jit(lambda s: pb.jacobian(lambda t: t ** 3, s)[0])
    wave = pb.jit(lambda s: pb.jacobian(lambda t: np.sin(t) * np.ones(2), s)[0])
    for s in (1.0, 2.0, 3.0):
        j = cube(s)
        assert type(j) is float and j == pytest.approx(3 * s ** 2)
        np.testing.assert_allclose(wave(s), np.full(2, np.cos(s)))


def test_gradient_of_a_jacobian_of_a_python_float_inside_jit():
    f = pb.jit(lambda s: pb.gradient(lambda u: pb.jacobian(lambda t: t ** 3 * u, u)[0], s)[0])
    for s in (1.0, 2.0):
        assert f(s) == pytest.approx(9 * s ** 2)


def test_jvp_tangent_is_not_the_callers_tangent():
    x, v = np.ones(3), np.arange(3.0)
    _, t = pb.jvp(lambda x: x, (x,), (v,))
    t[0] = 100.0
    np.testing.assert_array_equal(v, [0.0, 1.0, 2.0])
    _, parts = pb.jvp(lambda d: (d["a"][1:], d["a"].reshape(3, 1), d["a"].T), ({"a": x},), ({"a": v},))
    assert not any(np.shares_memory(p, v) for p in parts)
    np.testing.assert_array_equal(parts[0], [1.0, 2.0])


def test_jacobian_of_several_outputs_names_the_fix():
    with pytest.raises(TypeError, match="np.concatenate"):
        pb.jacobian(lambda x: (x, 2 * x), np.ones(2))
    with pytest.raises(TypeError, match="dtype int64"):
        pb.jacobian(lambda x: np.argsort(x).astype(np.int64), np.ones(2))


@dataclasses.dataclass
class Params:
    w: np.ndarray
    s: float
    n: int = 3


Pair = collections.namedtuple("Pair", "u v")


def test_jacobian_of_structured_inputs_matches_differences():
    rng = np.random.default_rng(0)
    p = Params(rng.standard_normal((2, 2)), 0.7)
    f = lambda p: (p.w @ np.ones(2)) * p.s ** 2  # noqa: E731
    (j,) = pb.jacobian(f, p)
    np.testing.assert_allclose(j.w, central_differences(lambda w: f(Params(w, 0.7)), p.w), atol=1e-7)
    np.testing.assert_allclose(j.s, central_differences(lambda s: f(Params(p.w, float(s))), 0.7), atol=1e-7)
    assert j.n is None
    t = Pair(rng.standard_normal(2), rng.standard_normal(3))
    g = lambda t: np.outer(t.u, t.v[:1])  # noqa: E731
    (j,) = pb.jacobian(g, t)
    assert type(j) is Pair
    np.testing.assert_allclose(j.u, central_differences(lambda u: g(Pair(u, t.v)), t.u), atol=1e-7)
    np.testing.assert_allclose(j.v, central_differences(lambda v: g(Pair(t.u, v)), t.v), atol=1e-7)
    nested = [[rng.standard_normal(2), 1.5], [rng.standard_normal(1)]]
    (j,) = pb.jacobian(lambda m: m[0][0] * m[0][1] + m[1][0], nested)
    np.testing.assert_allclose(j[0][0], 1.5 * np.eye(2))
    np.testing.assert_allclose(j[0][1], nested[0][0])
    np.testing.assert_allclose(j[1][0], np.ones((2, 1)))


@pytest.mark.parametrize("name", ["sort", "cumprod", "where", "clip", "take", "einsum", "solve", "inv", "det",
                                  "svd", "qr", "norm", "std", "concat", "max"])
def test_jacobian_and_jvp_match_jax(jax, name):
    jnp = jax.numpy
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 3))
    spd = a @ a.T + 3 * np.eye(3)
    cases = {
        "sort": (lambda x, m: m.sort(x, axis=0), a),
        "cumprod": (lambda x, m: m.cumprod(x, axis=1), a),
        "where": (lambda x, m: m.where(x > 0, x ** 2, m.sin(x)), a),
        "clip": (lambda x, m: m.clip(x, -0.5, 0.5), a),
        "take": (lambda x, m: x[m.array([0, 2, 2]), m.array([1, 0, 1])], a),
        "einsum": (lambda x, m: m.einsum("ij,jk->ik", x, x), a),
        "solve": (lambda x, m: m.linalg.solve(x, m.ones((3, 2))), spd),
        "inv": (lambda x, m: m.linalg.inv(x), spd),
        "det": (lambda x, m: m.linalg.det(x), a),
        "svd": (lambda x, m: m.linalg.svd(x[:, :2], compute_uv=False), a),
        "qr": (lambda x, m: m.linalg.qr(x)[1], a),
        "norm": (lambda x, m: m.linalg.norm(x, axis=1, keepdims=True), a),
        "std": (lambda x, m: m.std(x, axis=0, keepdims=True), a),
        "concat": (lambda x, m: m.concatenate([x, x[:1] ** 2], axis=0), a),
        "max": (lambda x, m: m.max(x, axis=1), a),
    }
    f, x = cases[name]
    want = np.asarray(jax.jacfwd(lambda x: f(x, jnp))(x))
    np.testing.assert_allclose(pb.jacobian(lambda x: f(x, np), x)[0], want, rtol=1e-6, atol=1e-9)
    v = rng.standard_normal(x.shape)
    np.testing.assert_allclose(pb.jvp(lambda x: f(x, np), (x,), (v,))[1],
                               np.tensordot(want, v, x.ndim), rtol=1e-6, atol=1e-9)
    x32 = x.astype(np.float32)
    j32 = pb.jacobian(lambda x: f(x, np), x32)[0]
    assert j32.dtype == np.result_type(f(x32, np), np.float32)


def test_symmetric_linalg_jacobians_read_the_lower_triangle_as_numpy_does():
    a = np.random.default_rng(2).standard_normal((3, 3))
    spd = a @ a.T + 3 * np.eye(3)
    for f in (np.linalg.eigvalsh, np.linalg.cholesky):
        np.testing.assert_allclose(pb.jacobian(f, spd)[0], central_differences(f, spd), atol=1e-6)


def test_reverse_mode_jacobians_and_float_types_at_the_boundary(jax):
    rng = np.random.default_rng(3)
    for n in (1, 2, 3):
        m = rng.standard_normal((n, n))
        x = rng.standard_normal(n)
        want = jax.jacfwd(lambda x: jax.numpy.tanh(m @ x) * x[0])(x)
        np.testing.assert_allclose(pb.jacobian(lambda x: np.tanh(m @ x) * x[0], x)[0], want, rtol=1e-7)
    j = pb.jacobian(lambda a: np.sum(a * 2.0), np.ones(5, np.float32))[0]
    assert j.dtype == np.float32 and j.shape == (5,)
    a, b = pb.jacobian(lambda x, y: np.sum(x ** 2) * np.ones(2), np.ones((3, 4)), np.ones(1))
    np.testing.assert_allclose(a, 2 * np.ones((2, 3, 4)))
    assert b is None


def test_hessians_and_hvps_match_jax(jax):
    jnp = jax.numpy
    rng = np.random.default_rng(4)
    x = rng.standard_normal(3)
    f = lambda x, m: m.sum(m.sin(x) * x[::-1]) + m.prod(x) + m.max(x) ** 2  # noqa: E731
    h = np.asarray(jax.hessian(lambda x: f(x, jnp))(x))
    np.testing.assert_allclose(pb.hessian(lambda x: f(x, np), x), h, rtol=1e-7, atol=1e-12)
    v = rng.standard_normal(3)
    np.testing.assert_allclose(pb.hvp(lambda x: f(x, np), x, v), h @ v, rtol=1e-7, atol=1e-12)
    g = lambda x: np.sum(pb.gradient(lambda y: np.sum(y ** 3 * x), x)[0])  # noqa: E731
    jg = lambda x: jnp.sum(jax.grad(lambda y: jnp.sum(y ** 3 * x))(x))  # noqa: E731
    np.testing.assert_allclose(pb.hessian(g, x), jax.hessian(jg)(x), rtol=1e-7)
    d = {"a": x, "b": 1.3}
    hv = pb.hvp(lambda d: np.sum(d["a"] ** 2) * d["b"] ** 2, d, {"a": None, "b": 1.0})
    np.testing.assert_allclose(hv["a"], 4 * 1.3 * x)
    assert type(hv["b"]) is float and hv["b"] == pytest.approx(2 * np.sum(x ** 2))


def test_nested_and_jitted_derivatives_match_jax(jax):
    jnp = jax.numpy
    rng = np.random.default_rng(5)
    x = rng.standard_normal(3)
    inner = lambda y: np.sin(y) * y[0]  # noqa: E731
    jinner = lambda y: jnp.sin(y) * y[0]  # noqa: E731
    np.testing.assert_allclose(pb.jacobian(lambda x: pb.jacobian(inner, x)[0], x)[0],
                               jax.jacfwd(jax.jacrev(jinner))(x), rtol=1e-7)
    jac = pb.jit(lambda x: pb.jacobian(inner, x)[0])
    hess = pb.jit(lambda x: pb.hessian(lambda y: np.sum(inner(y)), x))
    fwd = pb.jit(lambda x: np.sin(x) * x)
    for _ in range(3):
        x = rng.standard_normal(3)
        np.testing.assert_allclose(jac(x), jax.jacfwd(jinner)(x), rtol=1e-7)
        np.testing.assert_allclose(hess(x), jax.hessian(lambda y: jnp.sum(jinner(y)))(x), rtol=1e-7, atol=1e-12)
        v = rng.standard_normal(3)
        np.testing.assert_allclose(pb.jvp(fwd, (x,), (v,))[1], (np.cos(x) * x + np.sin(x)) * v, rtol=1e-7)


def test_in_place_writes_under_forward_mode_match_differences():
    x = np.random.default_rng(6).standard_normal(4)

    def f(x):
        y = np.zeros_like(x)
        y[0] = x[1] ** 2
        y[1:] = np.sin(x[1:])
        y[2] *= x[0]
        np.multiply(y, x, out=y)
        np.add.at(y, [0, 0], x[:2])
        return y

    np.testing.assert_allclose(pb.jacobian(f, x)[0], central_differences(f, x), atol=1e-7)

    def g(x):
        x[0] = 3.0
        return x * 2

    given = x.copy()
    np.testing.assert_allclose(pb.jacobian(g, given)[0], np.diag([0.0, 2.0, 2.0, 2.0]))
    np.testing.assert_array_equal(given, x)
    np.testing.assert_allclose(pb.jvp(g, (x.copy(),), (np.ones(4),))[1], [0.0, 2.0, 2.0, 2.0])
