"""The derived operators nest: jacobian of jacobian, hessian of a jacobian's entry, jvp of hvp, gradient
of jacobian, jacobian of hessian, up to third order. Each is checked against central differences of
the derivative one order lower (computed by pullback), and the second derivatives also against
hand-derived formulas."""

import numpy as np
import pytest

import pullback as pb

X2 = np.array([0.4, -0.7])
X3 = np.array([0.4, -0.7, 1.1])


def wide(x):
    """R^2 -> R^3 (jacobian takes forward mode)."""
    return np.stack([np.sin(x[0]) * x[1] ** 2, np.exp(x[0] * x[1]), x[0] ** 3 * x[1]])


def narrow(x):
    """R^3 -> R^2 (jacobian takes reverse mode)."""
    return np.stack([x[0] * x[1] * x[2] ** 2, np.cos(x[0] + 2.0 * x[2]) * x[1]])


def scalar(x):
    return np.sum(np.sin(x) * x[::-1] ** 2) + np.prod(x)


def differences(g, x, eps=1e-5):
    """The Jacobian of `g` at `x` by central differences, shaped `g(x).shape + x.shape`."""
    columns = []
    for j in range(x.size):
        e = np.zeros_like(x)
        e.flat[j] = eps
        columns.append((np.asarray(g(x + e)) - np.asarray(g(x - e))) / (2 * eps))
    return np.stack(columns, axis=-1).reshape(np.shape(g(x)) + x.shape)


def close(a, b, rtol=1e-6, atol=1e-7):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def jac(f):
    return lambda x: pb.jacobian(f, x)[0]


@pytest.mark.parametrize("f, x", [(wide, X2), (narrow, X3)], ids=["forward", "reverse"])
def test_jacobian_of_jacobian_and_of_that(f, x):
    first, second, third = jac(f), jac(jac(f)), jac(jac(jac(f)))
    assert second(x).shape == f(x).shape + x.shape + x.shape
    close(second(x), differences(first, x))
    assert third(x).shape == f(x).shape + x.shape * 3
    close(third(x), differences(second, x), rtol=1e-5, atol=1e-6)
    # symmetric in the differentiated axes, as mixed partial derivatives are
    close(second(x), np.swapaxes(second(x), -1, -2), rtol=1e-12, atol=1e-12)


def test_jacobian_of_jacobian_by_hand():
    a, b = X2
    d2 = np.zeros((3, 2, 2))
    d2[0] = [[-np.sin(a) * b ** 2, 2 * b * np.cos(a)], [2 * b * np.cos(a), 2 * np.sin(a)]]
    e = np.exp(a * b)
    d2[1] = [[b * b * e, e + a * b * e], [e + a * b * e, a * a * e]]
    d2[2] = [[6 * a * b, 3 * a * a], [3 * a * a, 0.0]]
    close(pb.jacobian(jac(wide), X2)[0], d2, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("f, x, i, j", [(wide, X2, 0, 1), (wide, X2, 1, 0), (narrow, X3, 1, 2)])
def test_hessian_and_gradient_of_a_jacobian_entry(f, x, i, j):
    def entry(x):
        return pb.jacobian(f, x)[0][i, j]

    gradient = pb.gradient(entry, x)[0]
    close(gradient, differences(entry, x))
    hessian = pb.hessian(entry, x)
    close(hessian, differences(lambda x: pb.gradient(entry, x)[0], x), rtol=1e-5, atol=1e-6)
    close(hessian, pb.jacobian(jac(jac(f)), x)[0][i, j], rtol=1e-10, atol=1e-12)


def test_hessian_of_each_component_of_a_vector_function():
    for i in range(3):
        component = pb.hessian(lambda x, i=i: wide(x)[i], X2)
        close(component, pb.jacobian(jac(wide), X2)[0][i], rtol=1e-12, atol=1e-12)


def test_gradient_of_jacobian_and_of_jacobian_of_jacobian():
    weights = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [1.0, 1.0, -2.0]])[:, :2]

    def weighted(x):
        return np.sum(weights * pb.jacobian(wide, x)[0])

    close(pb.gradient(weighted, X2)[0], differences(weighted, X2))

    def weighted_second(x):
        return np.sum(pb.jacobian(jac(wide), x)[0][:, 0, :] * weights)

    close(pb.gradient(weighted_second, X2)[0], differences(weighted_second, X2), rtol=1e-5, atol=1e-6)


def test_jvp_of_hvp_is_the_third_derivative_along_two_directions():
    v, t = np.array([1.0, -2.0, 0.5]), np.array([0.3, 0.8, -1.2])

    def h_v(x):
        return pb.hvp(scalar, x, v)

    y, y_dot = pb.jvp(h_v, (X3,), (t,))
    close(y, differences(lambda x: pb.gradient(scalar, x)[0], X3) @ v)
    close(y_dot, differences(h_v, X3) @ t, rtol=1e-5, atol=1e-6)
    _, y_dot_dot = pb.jvp(lambda x: pb.jvp(h_v, (x,), (t,))[1], (X3,), (v,))  # fourth order
    close(y_dot_dot, differences(lambda x: pb.jvp(h_v, (x,), (t,))[1], X3) @ v, rtol=1e-5, atol=1e-6)


def test_jacobian_of_hessian():
    third = pb.jacobian(lambda x: pb.hessian(scalar, x), X3)[0]
    assert third.shape == (3, 3, 3)
    close(third, differences(lambda x: pb.hessian(scalar, x), X3), rtol=1e-5, atol=1e-6)
    # a third derivative is symmetric in all three axes
    close(third, np.transpose(third, (1, 2, 0)), rtol=1e-10, atol=1e-12)
    close(third, np.transpose(third, (0, 2, 1)), rtol=1e-10, atol=1e-12)


def test_hessian_and_jacobian_of_python_floats_inside_another_derivative():
    # d/da of the second derivative in b of a b^3 at b = 0.5: 6 b
    assert pb.gradient(lambda a: pb.hessian(lambda b: a * b ** 3, 0.5), 0.7)[0] == pytest.approx(3.0)
    # d/da of the second derivative of b^4 at b = a: 24 a
    assert pb.gradient(lambda a: pb.hessian(lambda b: b ** 4, a), 0.7)[0] == pytest.approx(24 * 0.7)
    # d/da of d/db (a b^2) at b = a: 2 * 2a
    assert pb.gradient(lambda a: np.sum(pb.jacobian(lambda b: a * b ** 2, a)[0]), 0.7)[0] == pytest.approx(4 * 0.7)


def test_jacobian_with_respect_to_two_arguments_nested():
    def f(x, w):
        return np.tanh(w @ x)

    w = np.array([[0.3, -0.5], [1.2, 0.4], [-0.7, 0.9]])
    jx = pb.jacobian(lambda x: pb.jacobian(f, x, w)[1], X2)[0]  # d/dx of df/dw
    close(jx, differences(lambda x: pb.jacobian(f, x, w)[1], X2))
    jw = pb.jacobian(lambda w: pb.jacobian(f, X2, w)[0], w)[0]  # d/dw of df/dx
    close(jw, differences(lambda w: pb.jacobian(f, X2, w)[0], w))
