"""BatchNorm and LayerNorm: values by formula, gradients against finite differences, modes, running statistics."""

import numpy as np
import pytest

import pullback as pb
from pullback.testing import assert_gradient
from test_nn_layers import check_layer

rng = np.random.default_rng(0)


def batchnorm64(c, **kw):
    bn = pb.nn.BatchNorm(c, dtype=np.float64, **kw)
    bn.scale = rng.uniform(0.5, 1.5, c)
    bn.shift = rng.uniform(-0.5, 0.5, c)
    return bn


@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 4, 3)])
def test_batchnorm_training_gradients(shape):
    bn = batchnorm64(3, training=True)
    check_layer(bn, rng.standard_normal(shape) * 2 + 1, rtol=1e-5, atol=1e-7)


def test_batchnorm_evaluation_gradients():
    bn = batchnorm64(3, training=False)
    bn.running_mean[:] = [0.5, -1.0, 2.0]
    bn.running_var[:] = [1.5, 0.5, 2.0]
    check_layer(bn, rng.standard_normal((2, 3, 3, 3)))


def test_batchnorm_values_and_running_statistics_by_formula():
    x = rng.standard_normal((4, 5, 5, 3)).astype(np.float32) * 3 + 2
    bn = pb.nn.BatchNorm(3, momentum=0.1, eps=1e-5)
    bn.scale[:] = [1.0, 2.0, 0.5]
    bn.shift[:] = [0.0, 1.0, -1.0]
    flat = x.reshape(-1, 3).astype(np.float64)
    mean, var = flat.mean(0), flat.var(0)
    expected = (x - mean) / np.sqrt(var + 1e-5) * bn.scale + bn.shift

    (g,) = pb.gradient(lambda m: np.sum(m(x) ** 2), bn)  # automatic mode: training inside a gradient
    assert g.running_mean is None and g.running_var is None and g.scale.dtype == np.float32
    np.testing.assert_allclose(bn.running_mean, 0.9 * 0 + 0.1 * mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var, 0.9 * 1 + 0.1 * flat.var(0, ddof=1), rtol=1e-5)
    assert bn.running_mean.dtype == np.float32

    pb.nn.trainmode(bn)
    np.testing.assert_allclose(bn(x), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean, 0.81 * 0 + (0.09 + 0.1) * mean, rtol=1e-5)

    pb.nn.testmode(bn)
    before = bn.running_mean.copy()
    ev = bn(x)
    np.testing.assert_allclose(ev, (x - bn.running_mean) / np.sqrt(bn.running_var + 1e-5) * bn.scale + bn.shift, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(bn.running_mean, before)  # evaluation never updates


def test_batchnorm_automatic_mode():
    bn = pb.nn.BatchNorm(2)
    x = rng.standard_normal((8, 2)).astype(np.float32) + 5
    np.testing.assert_allclose(bn(x), x / np.sqrt(1 + 1e-5), rtol=1e-6)  # outside a gradient: running stats (0, 1)
    np.testing.assert_array_equal(bn.running_mean, [0, 0])
    # differentiating only the input still trains the layer (its input is tracked)
    (gx,) = pb.gradient(lambda x: np.sum(bn(x) * np.arange(8.0)[:, None]), x)
    assert np.all(bn.running_mean != 0)
    np.testing.assert_allclose(gx.sum(0), 0, atol=1e-4)  # batch statistics: shifts of x cancel


def test_batchnorm_gradient_call_leaves_users_model_object_but_updates_its_statistics():
    model = pb.nn.Chain(pb.nn.Dense(3, 4, rng=0), pb.nn.BatchNorm(4))
    stats = model[1].running_mean
    x = rng.standard_normal((6, 3)).astype(np.float32)
    pb.gradient(lambda m: np.sum(m(x) ** 2), model)
    assert model[1].running_mean is stats and np.any(stats != 0)


def test_batchnorm_without_affine_and_errors():
    bn = pb.nn.BatchNorm(3, affine=False, dtype=np.float64, training=True)
    assert bn.scale is None and repr(bn) == "BatchNorm(3, affine=False, training=True)"
    check_layer(bn, rng.standard_normal((5, 3)), fields=[])
    with pytest.raises(ValueError, match="3 channels"):
        pb.nn.BatchNorm(4)(np.zeros((2, 3)))
    assert repr(pb.nn.BatchNorm(8, pb.nn.relu)) == "BatchNorm(8, relu)"


def test_batchnorm_second_derivative():
    x = rng.standard_normal((3, 2, 2, 2))
    scale, shift = rng.standard_normal(2), rng.standard_normal(2)
    r, s = rng.standard_normal(x.shape), rng.standard_normal(x.shape)

    def gradient_dot(x, scale, shift):
        gx, gs, gb = pb.gradient(lambda x, a, b: np.sum(pb.nn.batch_norm(x, a, b) ** 2 * r), x, scale, shift)
        return np.sum(gx * s) + np.sum(gs * scale) + np.sum(gb**2)

    assert_gradient(gradient_dot, x, scale, shift, rtol=1e-4, atol=1e-6, dense_up_to=None)


def test_layernorm_values_and_gradients():
    x = rng.standard_normal((4, 3, 5)) * 2 + 1
    ln = pb.nn.LayerNorm(5, dtype=np.float64)
    ln.scale, ln.shift = rng.uniform(0.5, 1.5, 5), rng.uniform(-1, 1, 5)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(ln(x), (x - mean) / np.sqrt(var + 1e-5) * ln.scale + ln.shift, rtol=1e-12)
    check_layer(ln, x)
    ln2 = pb.nn.LayerNorm((3, 5), np.tanh, dtype=np.float64)
    assert repr(ln2) == "LayerNorm((3, 5), tanh)"
    check_layer(ln2, x)
    with pytest.raises(ValueError, match="last axes should be"):
        ln(np.zeros((2, 4)))


def test_batch_norm_in_training_mode_refuses_one_value_per_channel():
    # the unbiased batch variance that the running average takes is undefined (PyTorch raises too)
    layer = pb.nn.BatchNorm(3, dtype=np.float64, training=True)
    with pytest.raises(ValueError, match=r"needs more than one value per channel; got input of shape \(1, 3\)"):
        layer(np.array([[1.0, 2.0, 3.0]]))
    np.testing.assert_array_equal(layer.running_var, np.ones(3))  # untouched
    evaluated = pb.nn.testmode(layer)(np.array([[1.0, 2.0, 3.0]]))
    np.testing.assert_allclose(evaluated, [[1.0, 2.0, 3.0]] / np.sqrt(1.0 + 1e-5))


@pytest.mark.parametrize("name", ["hessian", "jacobian", "withjacobian"])
def test_derivatives_that_run_f_again_refuse_a_training_batchnorm(name):
    # Without differentiation one call of f moves the running statistics once; pb.hessian runs f once
    # per input element and pb.jacobian once more, and their same-value check cannot see the extra
    # updates (a training-mode output does not read the statistics).
    x = np.random.default_rng(0).standard_normal((5, 3))
    bn = pb.nn.BatchNorm(3, dtype=np.float64, training=True)
    derivative = {"hessian": lambda f, s: pb.hessian(lambda s: np.sum(f(s) ** 3), s),
                  "jacobian": pb.jacobian, "withjacobian": pb.withjacobian}[name]
    with pytest.raises(RuntimeError, match=rf"pb\.{name.replace('with', '')} runs f once per .*BatchNorm.*testmode"):
        derivative(lambda s: bn(x * s), np.ones(3))
    np.testing.assert_array_equal(bn.running_mean, np.zeros(3))
    # in evaluation mode it is a fixed function; hvp and jvp run f once, and update the statistics once
    bn.training = False
    h = pb.hessian(lambda s: np.sum(bn(x * s) ** 3), np.ones(3))
    np.testing.assert_allclose(h, pb.jacobian(lambda s: pb.gradient(lambda s: np.sum(bn(x * s) ** 3), s)[0],
                                              np.ones(3))[0], rtol=1e-10)
    bn.training = True
    pb.hvp(lambda s: np.sum(bn(x * s) ** 3), np.ones(3), np.ones(3))
    np.testing.assert_allclose(bn.running_mean, 0.1 * x.mean(axis=0), rtol=1e-12)
