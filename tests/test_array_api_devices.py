"""array_api_strict arguments on each of its devices: results come back on the argument's device.

array_api_strict has several devices (`Device("CPU_DEVICE")`, `Device("device1")`, ...); an
array on a device other than the CPU refuses `np.asarray`, as a GPU array would. pullback reads
such an argument as a NumPy array (through DLPack), so every result computed from it — the
gradient, the value of `f`, the cotangents of `back(dy)`, `jvp`'s value and tangent, Jacobians
and Hessians — must come back as an array_api_strict array on the argument's device, with the
values NumPy computes.
"""

import numpy as np
import pytest

import pullback as pb

xps = pytest.importorskip("array_api_strict")

DEVICES = ["CPU_DEVICE", "device1"]
W = np.array([0.3, -0.2, 1.1])


def on(device, a, dtype=None):
    return xps.asarray(np.asarray(a), device=xps.Device(device), dtype=dtype)


def values(a):
    """The values of an array_api_strict array on any device, as NumPy's (through DLPack)."""
    return np.from_dlpack(a)


def assert_strict_on(a, device, want, dtype=None, rtol=1e-12):
    assert isinstance(a, xps.asarray(0.0).__class__), type(a)
    assert a.device == xps.Device(device), a.device
    if dtype is not None:
        assert a.dtype == dtype
    np.testing.assert_allclose(values(a), want, rtol=rtol, atol=1e-14)


def loss(w):
    ns = w.__array_namespace__()
    return ns.sum(ns.tanh(w) ** 2) + ns.sum(w * w * w)


def loss_gradient(w):
    t = np.tanh(w)
    return 2.0 * t * (1.0 - t ** 2) + 3.0 * w ** 2


def square(w):
    return w * w + 2.0 * w


@pytest.mark.parametrize("device", DEVICES)
def test_the_gradient_comes_back_on_the_arguments_device(device):
    (g,) = pb.gradient(loss, on(device, W))
    assert_strict_on(g, device, loss_gradient(W), xps.float64)


@pytest.mark.parametrize("device", DEVICES)
def test_a_float32_gradient_keeps_its_dtype_and_device(device):
    (g,) = pb.gradient(loss, on(device, W, xps.float32))
    assert_strict_on(g, device, loss_gradient(W.astype(np.float32)), xps.float32, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_withgradient_gives_the_value_as_f_would_on_that_device(device):
    val, (g,) = pb.withgradient(loss, on(device, W))
    assert_strict_on(val, device, np.sum(np.tanh(W) ** 2) + np.sum(W ** 3))
    assert val.shape == ()
    assert_strict_on(g, device, loss_gradient(W))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spelling", [pb.pullback, pb.vjp])
def test_pullback_and_its_back_function(device, spelling):
    w, dy = on(device, W), np.array([1.0, -2.0, 0.5])
    y, back = spelling(square, w)
    assert_strict_on(y, device, W * W + 2.0 * W)
    (g,) = back(on(device, dy))  # a cotangent of the output's own type and device
    assert_strict_on(g, device, dy * (2.0 * W + 2.0))
    (g,) = back(dy)  # a NumPy cotangent works too
    assert_strict_on(g, device, dy * (2.0 * W + 2.0))


@pytest.mark.parametrize("device", DEVICES)
def test_pullback_of_a_scalar_loss_and_a_tuple_output(device):
    w = on(device, W)
    y, back = pb.vjp(lambda w: (loss(w), square(w)), w)
    assert_strict_on(y[0], device, np.sum(np.tanh(W) ** 2) + np.sum(W ** 3))
    assert_strict_on(y[1], device, W * W + 2.0 * W)
    (g,) = back((on(device, 2.0), None))
    assert_strict_on(g, device, 2.0 * loss_gradient(W))


@pytest.mark.parametrize("device", DEVICES)
def test_jvp_takes_tangents_of_the_arguments_type_and_gives_results_of_it(device):
    t = np.array([0.5, 1.0, -1.0])
    y, y_dot = pb.jvp(square, (on(device, W),), (on(device, t),))
    assert_strict_on(y, device, W * W + 2.0 * W)
    assert_strict_on(y_dot, device, (2.0 * W + 2.0) * t)
    want_y, want_dot = pb.jvp(square, (W,), (t,))  # the same computation on NumPy arrays
    np.testing.assert_array_equal(values(y), want_y)
    np.testing.assert_array_equal(values(y_dot), want_dot)
    y, y_dot = pb.jvp(loss, (on(device, W),), (t,))  # a NumPy tangent is read as it is
    assert_strict_on(y_dot, device, loss_gradient(W) @ t)


@pytest.mark.parametrize("device", DEVICES)
def test_jacobian_hessian_and_hvp_on_the_arguments_device(device):
    w = on(device, W)
    (jac,) = pb.jacobian(square, w)
    assert_strict_on(jac, device, np.diag(2.0 * W + 2.0))
    t = np.tanh(W)
    hess_diag = 2.0 * (1.0 - t ** 2) * (1.0 - 3.0 * t ** 2) + 6.0 * W
    assert_strict_on(pb.hessian(loss, w), device, np.diag(hess_diag), rtol=1e-10)
    v = np.array([1.0, 0.0, 2.0])
    assert_strict_on(pb.hvp(loss, w, on(device, v)), device, hess_diag * v, rtol=1e-10)


def test_a_model_of_array_api_strict_parameters_on_a_device():
    params = {"w": on("device1", W), "b": on("device1", 0.5)}
    X = np.array([[1.0, 2.0, 0.0], [0.5, -1.0, 3.0]])

    def f(p):
        ns = p["w"].__array_namespace__()
        return ns.sum(ns.tanh(ns.matmul(X, p["w"]) + p["b"]) ** 2)

    (g,) = pb.gradient(f, params)
    h = np.tanh(X @ W + 0.5)
    assert_strict_on(g["w"], "device1", X.T @ (2.0 * h * (1.0 - h ** 2)))
    assert_strict_on(g["b"], "device1", np.sum(2.0 * h * (1.0 - h ** 2)))
