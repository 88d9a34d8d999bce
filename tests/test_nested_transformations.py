"""Derivatives taken inside other derivatives (and under pb.jit): each inner result is what the
same call gives without the outer level (values, dtypes, Python float vs NumPy scalar vs 0-d
array), and the outer derivative of it agrees with hand derivations and finite differences."""

from dataclasses import dataclass

import numpy as np
import pytest

import pullback as pb


def _central(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


# --- a derivative at a Python float traced by an outer level stays a weak Python float ----------


def test_a_gradient_at_a_traced_python_float_stays_weak_beside_float32():
    o = np.ones(2, np.float32)

    def f(x):  # d/dy y^2 at y = x is 2x, a Python float: summed with float32 ones, 4x in float32
        return np.sum(pb.gradient(lambda y: y * y, x)[0] * o)

    assert f(2.0).dtype == np.float32
    val, (g,) = pb.withgradient(f, 2.0)
    assert val.dtype == np.float32 and val == f(2.0) == 8.0
    assert type(g) is float and g == pytest.approx(_central(lambda x: 4.0 * x, 2.0)) and g == 4.0
    y, y_dot = pb.jvp(f, (2.0,), (1.0,))
    assert y.dtype == np.float32 and y_dot.dtype == np.float32
    assert y == 8.0 and y_dot == 4.0


def test_a_jvp_tangent_from_a_closure_over_a_traced_python_float_stays_weak():
    o = np.ones(2, np.float32)

    def f(x):  # d/dy (x y^2) at y = 1, along 1: 2x, a Python float without pullback
        return pb.jvp(lambda y: x * y * y, (1.0,), (1.0,))[1] * o

    assert f(2.0).dtype == np.float32
    y, y_dot = pb.jvp(f, (2.0,), (1.0,))
    np.testing.assert_array_equal(y, f(2.0))
    np.testing.assert_allclose(y_dot, [2.0, 2.0])
    assert y.dtype == np.float32 and y_dot.dtype == np.float32
    val, (g,) = pb.withgradient(lambda x: np.sum(f(x)), 2.0)  # d/dx sum(2x * o) = 4
    assert val.dtype == np.float32 and g == 4.0


@pytest.mark.parametrize("inner", ["gradient", "vjp", "hessian"])
def test_each_inner_derivative_at_a_traced_python_float_is_a_python_float(inner):
    derivative = {  # of x^3 at x: 3x^2, 3x^2, 6x; each a Python float without an outer level
        "gradient": lambda x: pb.gradient(lambda y: y**3, x)[0],
        "vjp": lambda x: pb.vjp(lambda y: y**3, x)[1](1.0)[0],
        "hessian": lambda x: pb.hessian(lambda y: y**3, x),
    }[inner]
    assert type(derivative(2.0)) is float
    seen = []
    (g,) = pb.gradient(lambda x: seen.append(type(pb.stop_gradient(derivative(x)))) or derivative(x), 2.0)
    assert seen == [float]
    assert g == pytest.approx(_central(derivative, 2.0), rel=1e-6)


# --- a derivative keeps its primal's type: a float field's is a float, a 0-d array's a 0-d array ---


@dataclass
class _Model:
    w: np.ndarray
    s: float


def test_jvp_of_a_gradient_returns_what_the_function_returns_for_a_python_float_field():
    loss = lambda m: np.sum(np.sin(m.w) * m.s)
    d = _Model(np.array([1.0, 2.0]), 0.5)
    plain = pb.gradient(loss, d)[0]
    assert type(plain.s) is float
    y, y_dot = pb.jvp(lambda m: pb.gradient(loss, m)[0], (d,), (_Model(np.array([1.0, 0.0]), 0.0),))
    assert type(y.s) is float and y.s == plain.s
    np.testing.assert_array_equal(y.w, plain.w)
    # d/dt sum(sin(w + t e0)) = cos(w0), and d/dt s cos(w + t e0) = -s sin(w) e0
    assert type(y_dot.s) is float and y_dot.s == pytest.approx(np.cos(1.0))
    np.testing.assert_allclose(y_dot.w, [-0.5 * np.sin(1.0), 0.0])


def test_an_inner_gradient_of_a_0d_array_stays_a_0d_array_under_an_outer_level():
    x = np.array(2.0)
    g = lambda x: pb.gradient(lambda y: y**3, x)[0]  # 3x^2
    assert type(g(x)) is np.ndarray and g(x).shape == ()
    y, y_dot = pb.jvp(g, (x,), (np.array(1.0),))
    assert type(y) is np.ndarray and y.shape == () and y == g(x) == 12.0
    assert type(y_dot) is np.ndarray and y_dot == pytest.approx(_central(lambda t: 3 * t**2, 2.0))
    val, (gg,) = pb.withgradient(g, x)
    assert type(val) is np.ndarray and val.shape == () and val == 12.0
    assert type(gg) is np.ndarray and gg == 12.0  # 6x


# --- a user's InplaceableThunk, written as its docstring shows, at second order and under pb.jit ---


@pb.primitive
def _cube(x):
    return x**3


@pb.rrule(_cube)
def _cube_rule(x):
    g = lambda dy: 3 * x**2 * dy
    return _cube(x), lambda dy: (pb.InplaceableThunk(lambda buf: np.add(buf, g(dy), out=buf), lambda: g(dy)),)


def test_a_user_inplaceable_thunk_works_under_jit_and_at_second_order():
    x0 = np.array([1.0, 2.0])
    f = lambda x: np.sum(_cube(x) + x)  # the `+ x` makes a buffer the thunk is added into
    np.testing.assert_allclose(pb.gradient(f, x0)[0], 3 * x0**2 + 1)
    np.testing.assert_allclose(pb.jit(pb.grad(f))(x0), 3 * x0**2 + 1)
    np.testing.assert_allclose(pb.hessian(f, x0), np.diag(6 * x0))
    np.testing.assert_allclose(pb.jvp(pb.grad(f), (x0,), (np.ones(2),))[1], 6 * x0)

    # the thunk's input is not traced by the outer level, its cotangent is: d/dc sum(3 x^2 c + 1) = 3 x^2
    def total_gradient(c):
        return np.sum(pb.gradient(lambda y: np.sum(_cube(y) * c + y), x0)[0])

    np.testing.assert_allclose(pb.gradient(total_gradient, np.ones(2))[0], 3 * x0**2)
    along = np.array([1.0, 0.0])
    expected = _central(lambda t: total_gradient(np.ones(2) + t * along), 0.0)
    assert pb.jvp(total_gradient, (np.ones(2),), (along,))[1] == pytest.approx(expected, rel=1e-6)
