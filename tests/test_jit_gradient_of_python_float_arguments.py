"""pb.jit of a derivative with respect to a Python float argument (a learning rate, a temperature, a scale):
each call gives what the eager call gives, values and types (a float gradient for a float, float32 arrays stay
float32 beside the float), and the gradient agrees with finite differences. Where the engine computes with pb.jit's
stand-in for the float as with the float itself, the derivative is recorded once and replayed for other values."""

import dataclasses

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient

VALUES = (1.0, 2.0, 3.5, -0.75)


def _same(jitted, eager):
    """`jitted` is `eager`: the same structure, types and values (bit for bit)."""
    if isinstance(eager, tuple):  # (pb.withgradient's namedtuple comes back from pb.jit as a tuple)
        assert isinstance(jitted, tuple)
    else:
        assert type(jitted) is type(eager), (jitted, eager)
    if isinstance(eager, (tuple, list)):
        assert len(jitted) == len(eager)
        for j, e in zip(jitted, eager):
            _same(j, e)
    elif isinstance(eager, dict):
        assert jitted.keys() == eager.keys()
        for k in eager:
            _same(jitted[k], eager[k])
    elif dataclasses.is_dataclass(eager) or isinstance(eager, pb.Tangent):
        _same(vars(jitted) if not isinstance(jitted, pb.Tangent) else dict(jitted.items()),
              vars(eager) if not isinstance(eager, pb.Tangent) else dict(eager.items()))
    elif isinstance(eager, (np.ndarray, np.generic)):
        assert jitted.dtype == eager.dtype
        np.testing.assert_array_equal(jitted, eager)
    else:
        assert jitted == eager or (jitted != jitted and eager != eager)


X = np.array([0.5, -1.0, 2.0])
X32 = np.array([0.5, -1.0, 2.0], np.float32)

# losses of a float `s` and an array `x` (passed to the jitted function), each smooth at VALUES
LOSSES = {
    "arithmetic": lambda s, x: s * np.sum(x) + s * s - 1.5 * s + 2.0,
    "ufuncs": lambda s, x: np.sin(s) * s ** 2 + np.exp(0.1 * s) * np.sum(np.tanh(x * s)) + np.log(s * s + 1.0),
    "power": lambda s, x: np.sum(np.abs(x) ** (s * 0.5)) + s ** 3,
    "float32": lambda s, x: np.sum((x.astype(np.float32) * s) ** 2) + np.float32(0.5) * s,
    "scalar_division": lambda s, x: np.sum(x * (s / 3.0)) + 3.0 / (s * s + 1.0),
    "negation_and_abs": lambda s, x: np.sum(x * -s) + abs(s) * 2.0,
}


def _gradient_program(loss):
    return lambda s, x: pb.gradient(lambda s: loss(s, x), s)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_the_gradient_is_the_eager_one_at_every_call_and_agrees_with_finite_differences(name):
    program = _gradient_program(LOSSES[name])
    jitted = pb.jit(program)
    for s in VALUES:
        (g,) = jitted(s, X)
        _same((g,), program(s, X))
        assert type(g) is float
        eps, rel = (1e-3, 1e-3) if name == "float32" else (1e-6, 1e-5)  # float32's rounding over a wider step
        (expected,) = numerical_gradient(lambda s: LOSSES[name](s, X), s, eps=eps)
        assert g == pytest.approx(expected, rel=rel, abs=rel)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_the_gradient_traces_once_for_every_value(name):
    jitted = pb.jit(_gradient_program(LOSSES[name]))
    for s in VALUES:
        jitted(s, X)
    assert jitted.cache_info().traces == 1


def test_float32_arrays_beside_the_float_stay_float32():
    def step(w, s):
        return pb.withgradient(lambda w, s: np.sum(np.tanh(w * s) / s - w * (s / 2.0)), w, s)

    jitted = pb.jit(step)
    w = np.linspace(-1, 1, 4, dtype=np.float32)
    for s in VALUES:
        result = jitted(w, s)
        _same(result, step(w, s))
        value, (gw, gs) = result
        assert value.dtype == np.float32 and gw.dtype == np.float32 and type(gs) is float


def test_operators_between_the_float_and_python_numbers_give_python_floats():
    # `s / 2.0`, `-s`, `abs(s)`, `s % c`, `s // c`, `c ** s` of a differentiated Python float are Python floats:
    # beside a float32 array they keep it float32, as without pb.jit
    def loss(s, x):
        weak = (s / 2.0, 2.0 / s, -s, abs(s), s % 0.7, s // 0.3, 1.5 ** s, s ** 2.0)
        return sum(np.sum(x * w) for w in weak)

    def program(s, x):
        return pb.withgradient(lambda s: loss(s, x), s)

    jitted = pb.jit(program)
    for s in (1.1, 2.3, 3.7):
        value, (g,) = jitted(s, X32)
        _same((value, (g,)), program(s, X32))
        assert value.dtype == np.float32 and type(g) is float


def test_operators_between_the_float_and_python_numbers_trace_once():
    jitted = pb.jit(lambda s, x: pb.gradient(lambda s: np.sum(x * (s / 2.0 - abs(-s) + 1.5 ** s)), s))
    for s in (1.1, 2.3, 3.7):
        jitted(s, X32)
    assert jitted.cache_info().traces == 1


@dataclasses.dataclass
class Model:
    w: np.ndarray
    temperature: float


def _softmax_loss(model, x):
    logits = x * model.w / model.temperature
    return -np.sum(logits - np.log(np.sum(np.exp(logits))))


def test_a_float_in_a_dataclass_or_a_dict_of_parameters():
    step = lambda model, x: pb.withgradient(_softmax_loss, model, x)  # noqa: E731
    by_dict = lambda p, x: pb.gradient(lambda p: np.sum(x * p["w"]) * p["lr"] ** 2, p)  # noqa: E731
    jitted_step, jitted_by_dict = pb.jit(step), pb.jit(by_dict)
    w = np.array([0.3, -0.2, 0.1], np.float32)
    for t in VALUES[:3]:
        model = Model(w, t)
        _same(jitted_step(model, X32), step(model, X32))
        _, (g_model, _) = jitted_step(model, X32)
        assert type(g_model.temperature) is float and g_model.w.dtype == np.float32
        (expected,) = numerical_gradient(lambda t: _softmax_loss(Model(w.astype(float), t), X), t)  # in float64
        assert g_model.temperature == pytest.approx(expected, rel=1e-3, abs=1e-5)
        params = {"w": w, "lr": t}
        _same(jitted_by_dict(params, X32), by_dict(params, X32))


def test_a_float_in_a_dataclass_or_a_dict_of_parameters_traces_once():
    jitted = pb.jit(lambda model, x: pb.withgradient(_softmax_loss, model, x))
    jitted_by_dict = pb.jit(lambda p, x: pb.gradient(lambda p: np.sum(x * p["w"]) * p["lr"] ** 2, p))
    w = np.array([0.3, -0.2, 0.1], np.float32)
    for t in VALUES[:3]:
        jitted(Model(w, t), X32)
        jitted_by_dict({"w": w, "lr": t}, X32)
    assert jitted.cache_info().traces == 1 and jitted_by_dict.cache_info().traces == 1


def test_jvp_and_hessian_with_respect_to_a_float_are_the_eager_ones():
    f = lambda s: np.sin(s) * s ** 2 + s / 4.0  # noqa: E731
    jvp = lambda s, t: pb.jvp(f, (s,), (t,))  # noqa: E731
    hessian = lambda s: pb.hessian(f, s)  # noqa: E731
    jitted_jvp, jitted_hessian = pb.jit(jvp), pb.jit(hessian)
    for s in VALUES:
        _same(jitted_jvp(s, 0.5), jvp(s, 0.5))
        h = jitted_hessian(s)
        _same(h, hessian(s))
        assert type(h) is float
        expected = 2 * np.sin(s) + 4 * s * np.cos(s) - s * s * np.sin(s)
        assert h == pytest.approx(expected, rel=1e-9)


def test_jvp_and_hessian_with_respect_to_a_float_trace_once():
    f = lambda s: np.sin(s) * s ** 2 + s / 4.0  # noqa: E731
    jitted_jvp = pb.jit(lambda s, t: pb.jvp(f, (s,), (t,)))
    jitted_hessian = pb.jit(lambda s: pb.hessian(f, s))
    for s in VALUES:
        jitted_jvp(s, 0.5)
        jitted_hessian(s)
    assert jitted_jvp.cache_info().traces == 1 and jitted_hessian.cache_info().traces == 1


def test_a_complex_argument_gets_a_complex_gradient():
    loss = lambda z, x: np.sum(np.abs(z * x + 1.0) ** 2)  # noqa: E731
    program = lambda z, x: pb.gradient(lambda z: loss(z, x), z)  # noqa: E731
    jitted = pb.jit(program)
    for z in (1.0 + 2.0j, -0.5 + 0.25j, 3.0 - 1.0j):
        (g,) = jitted(z, X)
        _same((g,), program(z, X))
        assert type(g) is complex
        (expected,) = numerical_gradient(lambda z: loss(z, X), z)
        assert g == pytest.approx(expected, rel=1e-5)


def test_a_float_beside_a_plain_float32_array_it_closes_over_stays_float32():
    c = np.array([0.5, 1.5, 2.5], np.float32)  # a constant of the function, not an argument
    program = lambda s: pb.withgradient(lambda s: np.sum(c ** s + np.maximum(c, s)), s)  # noqa: E731
    jitted = pb.jit(program)
    for s in VALUES[:3]:
        value, (g,) = jitted(s)
        _same((value, (g,)), program(s))
        assert value.dtype == np.float32 and type(g) is float


def test_an_int_argument_is_not_differentiated():
    program = lambda n, x: pb.gradient(lambda n, x: np.sum(x ** n), n, x)  # noqa: E731
    jitted = pb.jit(program)
    for n in (1, 2, 3):
        _same(jitted(n, X), program(n, X))
        assert jitted(n, X)[0] is None


X32 = np.array([0.5, -1.0, 2.0], np.float32)


@pytest.mark.parametrize("inner", [
    lambda s: s * np.sum(X32), lambda s: -s, lambda s: s * s * np.sum(X32), lambda s: np.sin(s) * s,
], ids=["linear", "negation", "quadratic", "sine"])
def test_a_jvp_of_a_gradient_with_respect_to_a_float_is_a_float_as_eagerly(inner):
    def hvp(s):
        return pb.jvp(lambda t: pb.gradient(inner, t)[0], (s,), (1.0,))

    jitted = pb.jit(hvp)
    for s in VALUES:
        _same(jitted(s), hvp(s))


@pytest.mark.parametrize("scalar", [np.float32(1.5), np.float64(1.5), np.float16(0.7)], ids=str)
def test_powers_of_numpy_scalars_round_as_numpy_s_scalar_power(scalar):
    # a float32's ** rounds as NumPy's scalar power does, which np.power does not always match
    for f in (lambda s: s ** scalar, lambda s: scalar ** s):
        jitted, jitted_gradient = pb.jit(f), pb.jit(lambda s, f=f: pb.withgradient(f, s))
        for s in (1.3, 2.7, 0.45, 3.1):
            assert repr(jitted(s)) == repr(f(s))
            _same(jitted_gradient(s), pb.withgradient(f, s))


def test_the_gradient_of_a_maximum_at_infinity_is_infinite_not_nan():
    f = lambda s: np.maximum(s, 0.0) * s  # noqa: E731
    with np.errstate(all="ignore"):
        assert pb.gradient(f, float("inf")) == (float("inf"),)
        assert pb.jit(lambda s: pb.gradient(f, s))(float("inf")) == (float("inf"),)
        g = pb.jit(lambda x: pb.gradient(lambda x: np.sum(f(x)), x))(np.array([np.inf, 1.0, 0.0]))[0]
    np.testing.assert_array_equal(g, [np.inf, 2.0, 0.0])
