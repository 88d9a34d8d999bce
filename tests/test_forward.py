"""Forward mode, Jacobians, Hessians, mixed-mode nesting and frule."""

import tracemalloc
import warnings
import zlib
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pullback as pb
from pullback._registry import FORWARD_RULES, UFUNC_RULES
from pullback.testing import check_transpose, numerical_gradient


# --- jvp ---------------------------------------------------------------------------------
def test_jvp_matches_finite_differences_and_keeps_structure():
    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(3, 2)), "b": rng.normal(size=3), "name": "layer"}
    x = rng.normal(size=2)
    tangent = {"w": rng.normal(size=(3, 2)), "b": None, "name": None}
    f = lambda p, x: (np.tanh(p["w"] @ x + p["b"]), "aux")
    (y, aux), (y_dot, aux_dot) = pb.jvp(f, (params, x), (tangent, None))
    assert aux == "aux" and aux_dot is None
    eps = 1e-6
    moved = lambda s: f({**params, "w": params["w"] + s * tangent["w"]}, x)[0]
    np.testing.assert_allclose(y_dot, (moved(eps) - moved(-eps)) / (2 * eps), rtol=1e-6)
    np.testing.assert_allclose(y, f(params, x)[0])


def test_jvp_output_not_depending_on_input_has_none_tangent():
    y, y_dot = pb.jvp(lambda x: np.ones(2), (np.ones(3),), (np.ones(3),))
    assert y_dot is None


def test_jvp_validates_tangents():
    with pytest.raises(ValueError, match="shape"):
        pb.jvp(np.sin, (np.ones(3),), (np.ones(2),))
    with pytest.raises(ValueError, match="tangents"):
        pb.jvp(np.sin, (np.ones(3),), ())


def test_jvp_keeps_float32():
    _, t = pb.jvp(lambda x: np.exp(x) * 2.5, (np.ones(2, np.float32),), (np.ones(2, np.float64),))
    assert t.dtype == np.float32


# --- the dot-product test: every forward/reverse pair agrees ---------------------------------
def _inputs(rng, shapes, positive=False):
    arrays = [rng.uniform(0.5, 1.5, s) if positive else rng.uniform(-0.9, 0.9, s) for s in shapes]
    return arrays


UNARY_DOMAIN = {np.log: "pos", np.log2: "pos", np.log10: "pos", np.sqrt: "pos", np.arccosh: "gt1", np.reciprocal: "pos", np.cbrt: "pos"}

CASES = {
    "sum axis": (lambda x: np.sum(x, axis=1, keepdims=True), [(3, 4)]),
    "mean": (lambda x: np.mean(x, axis=(0, 2)), [(2, 3, 2)]),
    "max": (lambda x: np.max(x, axis=0), [(4, 3)]),
    "min": (lambda x: np.min(x), [(5,)]),
    "prod": (lambda x: np.prod(x, axis=-1), [(3, 4)]),
    "reshape": (lambda x: np.reshape(x, (6, 2)), [(3, 4)]),
    "ravel": (lambda x: np.ravel(x), [(3, 4)]),
    "transpose": (lambda x: np.transpose(x, (2, 0, 1)), [(2, 3, 4)]),
    "swapaxes": (lambda x: np.swapaxes(x, 0, 2), [(2, 3, 4)]),
    "moveaxis": (lambda x: np.moveaxis(x, 0, -1), [(2, 3, 4)]),
    "expand_dims": (lambda x: np.expand_dims(x, 1), [(3, 2)]),
    "squeeze": (lambda x: np.squeeze(x), [(3, 1, 2)]),
    "broadcast_to": (lambda x: np.broadcast_to(x, (4, 3)), [(3,)]),
    "copy": (lambda x: np.copy(x), [(3,)]),
    "astype": (lambda x: x.astype(np.longdouble).astype(np.float64), [(3,)]),
    "concatenate": (lambda a, b: np.concatenate([a, b], axis=1), [(2, 3), (2, 2)]),
    "concatenate flat": (lambda a, b: np.concatenate([a, b], axis=None), [(2, 3), (2,)]),
    "stack": (lambda a, b: np.stack([a, b], axis=-1), [(2, 3), (2, 3)]),
    # plain Python lists among the parts: their zero tangents once crashed forward mode
    "concatenate with lists": (lambda a: np.concatenate([[0.0], a, [1, 2]]), [(3,)]),
    "stack with a list": (lambda a: np.stack([[0.5, 1.5], a]), [(2,)]),
    "getitem basic": (lambda x: x[1:, ::-1], [(3, 4)]),
    "getitem advanced": (lambda x: x[[0, 2, 0]], [(3, 4)]),
    "setitem": (lambda x, v: _set(x, v), [(4,), (2,)]),
    "where": (lambda a, b: np.where(a > 0, a, b), [(3, 3), (3,)]),
    "clip": (lambda x, lo, hi: np.clip(x, lo - 1.5, hi + 1.5), [(5,), (5,), (5,)]),
    "clip inverted bounds": (lambda x, lo, hi: np.clip(x, lo, hi - 1.0), [(6,), (6,), (6,)]),
    "matmul": (lambda a, b: a @ b, [(2, 3), (3, 4)]),
    "matmul batched": (lambda a, b: a @ b, [(2, 2, 3), (3,)]),
    "tensordot": (lambda a, b: np.tensordot(a, b, axes=([0, 2], [1, 0])), [(2, 3, 4), (4, 2, 5)]),
    "outer": (lambda a, b: np.outer(a, b), [(3,), (2, 2)]),
    "einsum": (lambda a, b, c: np.einsum("ij,jk,k->i", a, b, c), [(2, 3), (3, 4), (4,)]),
    "einsum sum-only index": (lambda a, b: np.einsum("ij,k->ik", a, b), [(2, 3), (4,)]),
    "add broadcast": (lambda a, b: a + b, [(2, 3), (3,)]),
    "subtract broadcast": (lambda a, b: a - b, [(2, 1), (3,)]),
}


def _set(x, v):
    y = x * 1.0
    y[1:3] = v
    return y


def _dot_product_test(f, arrays, rng):
    """<J v, u> (forward mode) == <v, Jᵀ u> (reverse mode) for random v and u."""
    result = check_transpose(f, *arrays, seed=rng)
    assert result, result


@pytest.mark.parametrize("name", sorted(CASES))
def test_dot_product_for_structural_rules(name):
    f, shapes = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    _dot_product_test(f, _inputs(rng, shapes), rng)


def _ufunc_cases():
    # NumPy's own elementwise ufuncs; SciPy's (registered once SciPy is imported) are in
    # test_forward_coverage.py, and the gufuncs (matmul, vecmat, ...) in forward_cases_numpy.py.
    cases = []
    for ufunc, rule in UFUNC_RULES.items():
        if ufunc not in FORWARD_RULES or ufunc.signature is not None or getattr(np, ufunc.__name__, None) is not ufunc:
            continue
        cases.append(ufunc)
    return sorted(cases, key=lambda u: u.__name__)


@pytest.mark.parametrize("ufunc", _ufunc_cases(), ids=lambda u: u.__name__)
def test_dot_product_for_every_ufunc(ufunc):
    rng = np.random.default_rng(7)
    if ufunc.nin == 1:
        domain = UNARY_DOMAIN.get(ufunc)
        x = rng.uniform(1.2, 2.0, (3, 2)) if domain == "gt1" else _inputs(rng, [(3, 2)], domain == "pos")[0]
        _dot_product_test(ufunc, [x], rng)
    else:
        a, b = _inputs(rng, [(3, 2), (2,)], positive=ufunc in (np.power, np.float_power))
        if ufunc is np.ldexp:
            b = rng.integers(-2, 3, size=2)  # the exponent is an integer: no tangent
        _dot_product_test(ufunc, [a, b], rng)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**31))
def test_forward_mode_matches_finite_differences_on_a_composite(n, m, seed):
    rng = np.random.default_rng(seed)
    w, x = rng.normal(size=(n, m)), rng.normal(size=m)
    f = lambda w, x: np.sum(np.exp(np.tanh(w @ x)) * np.max(w, axis=1))
    v = rng.normal(size=w.shape)
    _, t = pb.jvp(f, (w, x), (v, None))
    expected = np.sum(numerical_gradient(f, w, x)[0] * v)
    np.testing.assert_allclose(t, expected, rtol=1e-6, atol=1e-8)


# --- jacobian, hessian, hvp -------------------------------------------------------------
def test_jacobian_numbers_from_the_issue():
    ja, jx = pb.jacobian(lambda a, x: a**2 * x, np.array([1.0, 2.0, 3.0]), 1.0)
    np.testing.assert_allclose(ja, np.diag([2.0, 4.0, 6.0]))
    np.testing.assert_allclose(jx, [1.0, 4.0, 9.0])


def test_jacobian_forward_and_reverse_agree_and_shapes():
    rng = np.random.default_rng(3)
    w = rng.normal(size=(2, 3))
    wide = lambda x: np.tanh(w.T @ np.sin(x))  # 2 inputs -> 3 outputs: forward mode
    narrow = lambda x: np.tanh(w @ x)  # 3 inputs -> 2 outputs: reverse mode
    x2, x3 = rng.normal(size=2), rng.normal(size=3)
    (j_wide,) = pb.jacobian(wide, x2)
    (j_narrow,) = pb.jacobian(narrow, x3)
    assert j_wide.shape == (3, 2) and j_narrow.shape == (2, 3)
    for f, x, j in ((wide, x2, j_wide), (narrow, x3, j_narrow)):
        expected = np.stack([numerical_gradient(lambda x, i=i: f(x)[i], x)[0] for i in range(j.shape[0])])
        np.testing.assert_allclose(j, expected, rtol=1e-6, atol=1e-9)


def test_jacobian_of_structured_argument_and_non_differentiable_ones():
    params = {"w": np.array([[1.0, 2.0], [3.0, 4.0]]), "n": 3}
    val, (jp, jn) = pb.withjacobian(lambda p, k: p["w"].sum(axis=1) * k, params, 2)
    np.testing.assert_allclose(val, [6.0, 14.0])
    assert jn is None and jp["n"] is None
    assert jp["w"].shape == (2, 2, 2)
    np.testing.assert_allclose(jp["w"][0], [[2.0, 2.0], [0.0, 0.0]])


def test_jacobian_of_matrix_output_and_errors():
    x = np.arange(4.0).reshape(2, 2)
    (j,) = pb.jacobian(lambda x: x.T * 1.0, x)
    assert j.shape == (2, 2, 2, 2)
    assert j[0, 1, 1, 0] == 1.0 and j[0, 1, 0, 1] == 0.0
    with pytest.raises(TypeError, match="one real array"):
        pb.jacobian(lambda x: (x, x), x)


def test_hessian_numbers_from_the_issue():
    x = np.array([1.5, -2.0])
    np.testing.assert_allclose(pb.hessian(lambda x: x[0] * x[1], x), [[0.0, 1.0], [1.0, 0.0]])
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(pb.hessian(lambda x: np.sum(x**3), x), np.diag(6 * x))
    assert pb.hessian(np.sin, np.pi / 2) == pytest.approx(-1.0)
    m = np.arange(4.0).reshape(2, 2) + 1
    h = pb.hessian(lambda m: m[0, 0] * m[1, 1] ** 2, m)
    assert h.shape == (2, 2, 2, 2) and h[0, 0, 1, 1] == pytest.approx(2 * m[1, 1])  # flattened index order


def test_hvp_without_forming_the_hessian():
    rng = np.random.default_rng(5)
    a = rng.normal(size=(3, 3))
    f = lambda x: np.sum(np.tanh(a @ x) ** 2)
    x, v = rng.normal(size=3), rng.normal(size=3)
    np.testing.assert_allclose(pb.hvp(f, x, v), pb.hessian(f, x) @ v, rtol=1e-10)
    grad = lambda x: pb.gradient(f, x)[0]
    eps = 1e-6
    np.testing.assert_allclose(pb.hvp(f, x, v), (grad(x + eps * v) - grad(x - eps * v)) / (2 * eps), rtol=1e-5)


def test_hvp_takes_structures_and_matches_the_hand_derivation():
    f = lambda p: np.sum(p["a"] ** 3) * p["s"]  # d2f/da2 = diag(6 a s), d2f/da ds = 3 a^2
    p, v = {"a": np.array([1.0, 2.0]), "s": 3.0}, {"a": np.array([1.0, 0.0]), "s": 1.0}
    h_v = pb.hvp(f, p, v)
    np.testing.assert_allclose(h_v["a"], [6 * 1 * 3 * 1 + 3 * 1, 3 * 4 * 1])
    assert h_v["s"] == pytest.approx(3 * 1 * 1)


def test_hvp_of_a_python_float_or_0d_array_is_shaped_and_typed_like_its_gradient():
    f = lambda x: x**3  # the Hessian times v: 6 x v
    for x, v in [(2.0, 1.0), (np.array(2.0), np.array(1.0)), (np.float32(2.0), np.float32(1.0))]:
        r = pb.hvp(f, x, v)
        assert type(r) is type(pb.gradient(f, x)[0]) and np.shape(r) == ()
        assert r == 12.0 and np.result_type(r) == np.result_type(pb.gradient(f, x)[0])
        zero = pb.hvp(lambda x: x * 2.0, x, v)  # a linear f: the Hessian is zero
        assert type(zero) is type(r) and zero == 0.0 and np.result_type(zero) == np.result_type(r)
    assert type(pb.hessian(f, 2.0)) is float and pb.hessian(f, 2.0) == 12.0

    @dataclass
    class Model:
        w: np.ndarray
        s: float

    loss = lambda m: np.sum(m.w ** 3) * m.s  # d2/dw2 = diag(6 w s), d2/dw ds = 3 w^2, d2/ds2 = 0
    m, v = Model(np.array([1.0, 2.0]), 3.0), Model(np.array([1.0, 0.0]), 1.0)
    h_v = pb.hvp(loss, m, v)
    assert type(h_v.s) is type(pb.gradient(loss, m)[0].s) is float and h_v.s == pytest.approx(3.0)
    np.testing.assert_allclose(h_v.w, [6 * 1 * 3 + 3, 3 * 4])


def test_withjacobian_hands_back_a_stop_gradient_value_writable_at_once():
    kept = []  # f keeps what it was given: the recording outlives the call

    def f(x):
        kept.append(x)
        return pb.stop_gradient(x[:2] * 2.0)

    val, (jac,) = pb.withjacobian(f, np.ones(3))  # reverse mode: fewer outputs than inputs
    np.testing.assert_array_equal(val, [2.0, 2.0])
    assert jac is None  # no gradient flows through stop_gradient
    assert val.flags.writeable  # as without pullback, where the value is a new array
    val[0] = 5.0


@pytest.mark.parametrize("x, match", [
    (np.arange(3), "dtype int64, which carries no derivative"),  # its Hessian would read as zeros
    (np.array([True, False]), "dtype bool"),
    ({"a": np.ones(2)}, "use pb.hvp"),
    ([np.ones(2), np.ones(3)], "use pb.hvp"),
])
def test_hessian_refuses_arguments_without_a_derivative_and_names_the_fix(x, match):
    with pytest.raises(TypeError, match=match):
        pb.hessian(lambda x: np.sum(x ** 3), x)
    if isinstance(x, np.ndarray):
        with pytest.raises(TypeError, match=match):
            pb.hvp(lambda x: np.sum(x ** 3), x, np.ones(x.shape))


# --- nesting in any mix of modes ---------------------------------------------------------
D = lambda f: (lambda x: pb.jvp(f, (x,), (1.0,))[1])
G = lambda f: (lambda x: pb.gradient(f, x)[0])


@pytest.mark.parametrize("outer", [D, G], ids=["fwd", "rev"])
@pytest.mark.parametrize("inner", [D, G], ids=["fwd", "rev"])
def test_no_perturbation_confusion_in_any_mix(outer, inner):
    assert outer(lambda x: x * inner(lambda y: x * y)(1.0))(4.0) == pytest.approx(8.0)


@pytest.mark.parametrize("a", [D, G], ids=["f", "r"])
@pytest.mark.parametrize("b", [D, G], ids=["f", "r"])
@pytest.mark.parametrize("c", [D, G], ids=["f", "r"])
def test_third_order_in_any_mix(a, b, c):
    assert a(b(c(np.sin)))(0.3) == pytest.approx(-np.cos(0.3), rel=1e-12)
    assert a(b(c(lambda x: x**5)))(1.5) == pytest.approx(60 * 1.5**2, rel=1e-12)


# --- registering forward rules ------------------------------------------------------------
def test_primitive_with_only_a_forward_rule():
    @pb.primitive
    def triple(x):
        return 3.0 * x

    @pb.frule(triple)
    def triple_frule(primals, tangents):
        return triple(primals[0]), None if tangents[0] is None else 3.0 * tangents[0]

    np.testing.assert_allclose(pb.jvp(triple, (np.ones(2),), (np.array([1.0, 2.0]),))[1], [3.0, 6.0])
    with pytest.raises(NotImplementedError, match="no reverse rule"):
        pb.gradient(lambda x: np.sum(triple(x)), np.ones(2))

    @pb.rrule(triple)
    def triple_rule(x):
        return triple(x), lambda g: (3.0 * g,)

    np.testing.assert_allclose(pb.gradient(lambda x: np.sum(triple(x)), np.ones(2))[0], [3.0, 3.0])
    np.testing.assert_allclose(pb.jvp(triple, (np.ones(2),), (np.ones(2),))[1], [3.0, 3.0])


def test_primitive_with_only_a_reverse_rule_works_forward_by_transposition():
    @pb.primitive
    def mix(x, y):
        return np.cumprod(x) if False else x * y[::-1]

    @pb.rrule(mix)
    def mix_rule(x, y):
        return mix(x, y), lambda g: (g * y[::-1], (g * x)[::-1])

    rng = np.random.default_rng(2)
    x, y, vx, vy = (rng.normal(size=3) for _ in range(4))
    _, t = pb.jvp(mix, (x, y), (vx, vy))
    np.testing.assert_allclose(t, vx * y[::-1] + x * vy[::-1])
    # and it nests: a second derivative through the transposed rule
    (h,) = pb.gradient(lambda x: np.sum(pb.jvp(lambda x: mix(x, x), (x,), (np.ones(3),))[1]), x)
    np.testing.assert_allclose(h, 2 * np.ones(3))


@pb.primitive
def _sincos(x):
    return np.sin(x), np.cos(x)


@pb.rrule(_sincos)
def _sincos_rule(x):
    def back(dy):
        ds, dc = dy
        g = 0.0
        if ds is not None:
            g = g + ds * np.cos(x)
        if dc is not None:
            g = g - dc * np.sin(x)
        return (g,)
    return _sincos(x), back


@pb.primitive
def _sin_and_count(x):
    return np.sin(x), np.count_nonzero(x > 0)


@pb.rrule(_sin_and_count)
def _sin_and_count_rule(x):
    return _sin_and_count(x), lambda dy: (None if dy[0] is None else dy[0] * np.cos(x),)


def test_an_operation_with_several_outputs_and_only_a_reverse_rule_works_forward():
    # was: NotImplementedError: This operation has several outputs and no forward rule
    x, v = np.array([0.3, 0.5]), np.array([1.0, -2.0])
    (s, c), (ds, dc) = pb.jvp(_sincos, (x,), (v,))
    np.testing.assert_allclose((s, c), (np.sin(x), np.cos(x)))
    np.testing.assert_allclose(ds, np.cos(x) * v)
    np.testing.assert_allclose(dc, -np.sin(x) * v)
    (s, n), (ds, dn) = pb.jvp(_sin_and_count, (x,), (v,))  # an integer output has no tangent
    assert n == 2 and dn is None
    np.testing.assert_allclose(ds, np.cos(x) * v)
    # pb.hessian is forward over reverse: sum(sin(x) cos(x)) = sum(sin(2x)) / 2
    h = pb.hessian(lambda x: np.sum(_sincos(x)[0] * _sincos(x)[1]), x)
    np.testing.assert_allclose(h, np.diag(-2.0 * np.sin(2 * x)), atol=1e-12)


def _primitive_with_frule(tangent_of):
    @pb.primitive
    def h(x):
        return np.sin(x)

    @pb.frule(h)
    def h_frule(primals, tangents):
        return h(primals[0]), tangent_of(primals[0], tangents[0])

    return h


def test_a_forward_rule_giving_a_tangent_of_another_shape_is_named():
    # was NumPy's "operands could not be broadcast together with remapped shapes" from inside fit_tangent
    h = _primitive_with_frule(lambda x, t: np.ones(5))
    with pytest.raises(ValueError, match=r"forward rule .*h_frule gave a tangent of shape \(5,\) for a value of "
                                         r"shape \(2,\)"):
        pb.jvp(h, (np.array([0.3, 0.5]),), (np.ones(2),))


def test_a_forward_rule_giving_a_list_as_the_tangent_of_an_array_is_named():
    # was: TypeError: Field elements must be 2- or 3-tuples (NumPy reading the list as a dtype)
    h = _primitive_with_frule(lambda x, t: [np.cos(x[0]) * t[0], np.cos(x[1]) * t[1]])
    with pytest.raises(TypeError, match=r"forward rule .*h_frule gave a list of 2 as the tangent of an array of "
                                        r"shape \(2,\).*np.asarray"):
        pb.jvp(h, (np.array([0.3, 0.5]),), (np.ones(2),))


def test_a_forward_rule_giving_one_tangent_for_several_outputs_is_named():
    # was read as the rows of the array, one number per output, each broadcast: a silently wrong tangent
    @pb.primitive
    def sincos(x):
        return np.sin(x), np.cos(x)

    @pb.frule(sincos)
    def sincos_frule(primals, tangents):
        return sincos(primals[0]), np.cos(primals[0]) * tangents[0]  # the tangent of sin only

    with pytest.raises(TypeError, match=r"sincos_frule gave an array of shape \(2,\) as the tangent of a tuple of 2"):
        pb.jvp(sincos, (np.array([0.3, 0.5]),), (np.ones(2),))


def test_frule_on_a_composite_is_refused():
    with pytest.raises(TypeError, match="composing"):
        pb.frule(np.concatenate)(lambda p, t: None)


def test_jacobian_in_reverse_mode_refuses_a_function_that_changes_between_runs():
    # f draws random numbers: its value and its rows would come from different draws
    rng = np.random.default_rng(0)
    with pytest.raises(RuntimeError, match="jacobian: f gave a different value when run again"):
        pb.withjacobian(lambda x: np.sum(x ** 2 * rng.normal(size=3)), np.array([0.5, -1.0, 2.0]))
    val, (jac,) = pb.withjacobian(lambda x: np.sum(x ** 3), np.array([0.5, -1.0, 2.0]))
    assert val == 7.125
    np.testing.assert_allclose(jac, [0.75, 3.0, 12.0])


def test_jacobian_of_an_operation_with_a_forward_rule_only():
    @pb.primitive
    def doubled(x):
        return 2.0 * x

    @pb.frule(doubled)
    def _(primals, tangents):
        return doubled(primals[0]), None if tangents[0] is None else 2.0 * tangents[0]

    np.testing.assert_array_equal(pb.jacobian(doubled, np.ones(3))[0], 2.0 * np.eye(3))


def test_jacobian_in_forward_mode_refuses_a_function_that_changes_between_runs():
    rng = np.random.default_rng(0)
    x = np.array([0.5, -1.0])
    with pytest.raises(RuntimeError, match="jacobian: f gave a different value when run again"):
        pb.jacobian(lambda x: x * rng.normal(size=2), x)
    calls = []

    def f(x):
        calls.append(1)
        return np.stack([np.sin(x), x ** 3])

    val, (jac,) = pb.withjacobian(f, x)  # deterministic: one run for the value, then one per input element
    assert len(calls) == 3
    np.testing.assert_allclose(jac, [np.diag(np.cos(x)), np.diag(3 * x ** 2)])
    np.testing.assert_array_equal(val, f(x))


def test_hessian_refuses_a_function_that_changes_between_runs():
    rng = np.random.default_rng(0)
    with pytest.raises(RuntimeError, match="hessian: f gave a different gradient when run again"):
        pb.hessian(lambda x: np.sum(x ** 3 * rng.normal(size=2)), np.array([0.5, -1.0]))


def test_jvp_does_not_copy_a_large_argument_whose_tangent_is_none():
    big = np.random.default_rng(0).standard_normal((1000, 1000))  # 8 MB, not differentiated
    w = np.ones(1000)

    def f(w, data):
        return np.sum(data[:3] @ w)

    pb.jvp(f, (w, big), (np.ones(1000), None))
    tracemalloc.start()
    try:
        pb.jvp(f, (w, big), (np.ones(1000), None))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < big.nbytes / 4, f"jvp allocated {peak / 1e6:.1f} MB for an 8 MB argument with no tangent"


@pytest.mark.parametrize("x", [0.0, np.array(0.0), np.array([0.0])], ids=["python float", "0-d", "1-d"])
def test_a_tangent_through_a_reverse_rule_meets_no_invalid_value_where_the_derivative_is_infinite(x):
    # pb.hessian of sqrt at 0 takes the tangent of sqrt's pullback from that pullback alone (the gradient of
    # u -> <J^T u, v> at u = 0): the value there, 0 * inf, is not computed by the user's code, so it warns of
    # nothing; the derivative itself is -inf with NumPy's divide-by-zero warning, as everywhere
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h = pb.hessian(lambda v: np.sum(np.sqrt(v)), x)
    assert np.all(np.asarray(h) == -np.inf)
    assert {str(w.message).split(" in ")[0] for w in caught} == {"divide by zero encountered"}
