"""Layers, optimisers and weight loading checked against PyTorch and against eager runs."""

import numpy as np
import pytest

import pullback as pb
from pullback import optim
from pullback.nn.torch_interop import load_torch_state_dict, load_torch_weights
from pullback.testing import numerical_gradient

try:  # the reference for some tests; the others run without it
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch, the reference")


def _leaves(model):
    return [a for a in pb.tree.leaves(model) if isinstance(a, np.ndarray)]


# --- ClipNorm under pb.jit ----------------------------------------------------------------
def _clipped_step(state, model, grad):
    return optim.update(state, model, grad)


@pytest.mark.parametrize("p", [2.0, 1.0, np.inf])
def test_clipnorm_under_jit_replays_with_each_steps_own_norm(p):
    model = {"w": np.zeros(3, np.float32)}
    state = optim.setup(optim.OptimiserChain(optim.ClipNorm(1.0, p=p), optim.Adam(0.1)), model)
    step = pb.jit(_clipped_step)
    grads = [np.array(g, np.float32) for g in ([3, 4, 0], [0, 6, 8], [30, 0, 40], [5, 12, 0])]
    eager_state, eager_model = state, model
    jit_state, jit_model = state, model
    for g in grads:
        eager_state, eager_model = _clipped_step(eager_state, eager_model, {"w": g})
        jit_state, jit_model = step(jit_state, jit_model, {"w": g})
        np.testing.assert_array_equal(jit_model["w"], eager_model["w"])
        assert jit_model["w"].dtype == np.float32 and jit_state["w"].state[1][0].dtype == np.float32
    assert step.cache_info().traces == 1  # every norm was above max_norm: one trace, replayed


def test_clipnorm_under_jit_clips_only_norms_above_the_maximum():
    model = {"w": np.zeros(2)}
    state = optim.setup(optim.ClipNorm(1.0), model)
    step = pb.jit(_clipped_step)
    for g in ([3.0, 4.0], [0.3, 0.4], [6.0, 8.0], [0.0, 0.5]):
        g = np.array(g)
        expected = -g * min(1.0, 1.0 / np.linalg.norm(g))
        np.testing.assert_allclose(step(state, model, {"w": g})[1]["w"], expected, rtol=1e-15)
    assert step.cache_info().traces == 1  # clipped or not, one trace: no branch on the norm


def test_clipnorm_under_jit_refuses_a_non_finite_gradient():
    model = {"w": np.zeros(2)}
    state = optim.setup(optim.ClipNorm(1.0), model)
    step = pb.jit(_clipped_step)
    step(state, model, {"w": np.array([3.0, 4.0])})
    with pytest.raises(ValueError, match="ClipNorm.*inf or nan"):
        step(state, model, {"w": np.array([np.inf, 4.0])})


# --- LayerNorm without a shift, and loading parameterless layers --------------------------
@needs_torch
def test_layernorm_without_shift_matches_torch_layernorm_without_bias():
    rng = np.random.default_rng(0)
    reference = torch.nn.LayerNorm(4, bias=False, dtype=torch.float64)
    with torch.no_grad():
        reference.weight.copy_(torch.tensor(rng.standard_normal(4)))
    layer = pb.nn.LayerNorm(4, dtype=np.float64)
    layer.shift = None
    load_torch_weights(pb.nn.Chain(layer), torch.nn.Sequential(reference))
    x = rng.standard_normal((3, 4))
    value, (grad, gx) = pb.withgradient(lambda m, x: np.sum(np.sin(m(x))), layer, x)
    xt = torch.tensor(x, requires_grad=True)
    loss = torch.sin(reference(xt)).sum()
    loss.backward()
    np.testing.assert_allclose(value, loss.item(), rtol=1e-12)
    np.testing.assert_allclose(grad.scale, reference.weight.grad.numpy(), rtol=1e-10)
    assert grad.shift is None
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-10)


@needs_torch
def test_load_torch_state_dict_passes_over_layers_without_arrays():
    reference = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4, elementwise_affine=False),
                                    torch.nn.Linear(4, 2))
    model = pb.nn.Chain(pb.nn.Dense(3, 4), pb.nn.LayerNorm(4, affine=False), pb.nn.Dense(4, 2))
    loaded = load_torch_state_dict(model, {k: v.numpy() for k, v in reference.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(loaded(x), reference(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


# --- BatchNorm in half precision, and its momentum ----------------------------------------
def test_batchnorm_float16_training_matches_float32_statistics():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((8192, 2)) + 10).astype(np.float16)
    half = pb.nn.BatchNorm(2, dtype=np.float16, training=True)
    single = pb.nn.BatchNorm(2, dtype=np.float32, training=True)
    y = half(x)
    expected = single(x.astype(np.float32))
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), expected, atol=2e-2)
    np.testing.assert_allclose(half.running_mean.astype(np.float32), single.running_mean, rtol=1e-3)
    np.testing.assert_allclose(half.running_var.astype(np.float32), single.running_var, rtol=1e-3)


def test_batchnorm_float16_gradients_match_float32_gradients():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4096, 2)) * 0.5 + 8).astype(np.float16)
    weights = rng.standard_normal((4096, 2))

    def loss(m, x):
        return np.sum(m(x) * weights.astype(x.dtype))

    grads = pb.gradient(loss, pb.nn.BatchNorm(2, dtype=np.float16, training=True), x)
    reference = pb.gradient(loss, pb.nn.BatchNorm(2, dtype=np.float32, training=True), x.astype(np.float32))
    assert grads[1].dtype == np.float16 and grads[0].scale.dtype == np.float16
    np.testing.assert_allclose(grads[0].shift.astype(np.float32), reference[0].shift, rtol=1e-2)
    np.testing.assert_allclose(grads[0].scale.astype(np.float32), reference[0].scale, rtol=2e-2, atol=0.5)
    np.testing.assert_allclose(grads[1].astype(np.float32), reference[1], rtol=2e-3, atol=2e-3)


def test_batch_norm_function_float16_matches_float32():
    x = (np.random.default_rng(2).standard_normal((6000, 3)) + 12).astype(np.float16)
    y = pb.nn.batch_norm(x, np.ones(3, np.float16), np.zeros(3, np.float16))
    expected = pb.nn.batch_norm(x.astype(np.float32), np.ones(3, np.float32), np.zeros(3, np.float32))
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), expected, atol=2e-2)


@pytest.mark.parametrize("momentum", [None, -0.1, 1.5, "0.1"])
def test_batchnorm_refuses_a_momentum_it_cannot_use(momentum):
    with pytest.raises((TypeError, ValueError), match="BatchNorm: momentum"):
        pb.nn.BatchNorm(3, momentum=momentum)


def test_batchnorm_gradient_matches_finite_differences_in_training_mode():
    rng = np.random.default_rng(3)
    layer = pb.nn.BatchNorm(3, dtype=np.float64, training=True, momentum=0.0)
    layer.scale, layer.shift = rng.standard_normal(3), rng.standard_normal(3)
    x = rng.standard_normal((4, 2, 3))
    weights = rng.standard_normal((4, 2, 3))
    loss = lambda x: np.sum(np.sin(layer(x)) * weights)  # noqa: E731
    np.testing.assert_allclose(pb.gradient(loss, x)[0], numerical_gradient(loss, x)[0], rtol=1e-6, atol=1e-8)


# --- pooling integer images -----------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("padding", [0, 1])
def test_max_pool_of_integer_images_matches_torch_on_their_values(dtype, padding):
    x = np.random.default_rng(4).integers(-120, 20, (2, 5, 6, 3)).astype(dtype)  # many all-negative windows
    y = pb.nn.MaxPool(2 + padding, stride=2, padding=padding)(x)
    reference = torch.nn.functional.max_pool2d(torch.tensor(x.astype(np.float64)).permute(0, 3, 1, 2), 2 + padding,
                                               stride=2, padding=padding).permute(0, 2, 3, 1).numpy()
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, reference.astype(dtype))


@needs_torch
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.bool_])
def test_mean_pool_of_integer_images_averages_in_float64_as_np_mean(dtype):
    x = np.random.default_rng(5).integers(0, 256, (2, 5, 6, 3)).astype(dtype)
    y = pb.nn.MeanPool(3, stride=1, padding=1)(x)
    reference = torch.nn.functional.avg_pool2d(torch.tensor(x.astype(np.float64)).permute(0, 3, 1, 2), 3, stride=1,
                                               padding=1).permute(0, 2, 3, 1).numpy()
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, reference, rtol=1e-14)


# --- optimisers against torch.optim, and a training step under pb.jit against the eager one ---
_TORCH_OPTIMISERS = [
    (lambda: optim.Momentum(0.1, 0.8), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.8)),
    (lambda: optim.OptimiserChain(optim.WeightDecay(0.05), optim.Nesterov(0.1, 0.8)),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.05)),
    (lambda: optim.AdamW(0.05, 0.8, 0.95, 1e-6, 0.1),
     lambda p: torch.optim.AdamW(p, lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
    (lambda: optim.RMSProp(0.01, 0.9, 1e-6, centred=True),
     lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9, eps=1e-6, centered=True)),
    (lambda: optim.AdaGrad(0.1), lambda p: torch.optim.Adagrad(p, lr=0.1, eps=1e-8)),
]


@needs_torch
@pytest.mark.parametrize("make_rule, make_torch", _TORCH_OPTIMISERS)
def test_optimiser_trajectory_matches_torch_optim(make_rule, make_torch):
    rng = np.random.default_rng(6)
    x, w0, b0 = rng.standard_normal((5, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)
    model = {"w": w0.copy(), "b": b0.copy()}
    state = optim.setup(make_rule(), model)
    tw, tb = (torch.tensor(a, requires_grad=True) for a in (w0, b0))
    reference = make_torch([tw, tb])
    for _ in range(6):
        (g,) = pb.gradient(lambda m: np.sum(np.tanh(x @ m["w"] + m["b"]) ** 2), model)
        state, model = optim.update(state, model, g)
        reference.zero_grad()
        (torch.tanh(torch.tensor(x) @ tw + tb) ** 2).sum().backward()
        reference.step()
    np.testing.assert_allclose(model["w"], tw.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model["b"], tb.detach().numpy(), rtol=1e-10, atol=1e-12)


def _network():
    return pb.nn.Chain(pb.nn.Conv(2, 4, 3, padding=1, rng=1), pb.nn.BatchNorm(4, pb.nn.relu), pb.nn.Dropout(0.3, rng=7),
                       pb.nn.MaxPool(2), pb.nn.Flatten(), pb.nn.Dense(16, 3, rng=2))


def _training_step(state, model, x, y):
    value, (grad,) = pb.withgradient(lambda m: pb.nn.logitcrossentropy(m(x), y), model)
    state, model = optim.update(state, model, grad)
    return state, model, value


def test_jit_training_step_equals_eager_steps_with_batchnorm_and_dropout():
    rng = np.random.default_rng(8)
    batches = [(rng.standard_normal((4, 4, 4, 2)).astype(np.float32), rng.integers(0, 3, 4)) for _ in range(4)]
    rule = optim.OptimiserChain(optim.ClipNorm(0.5), optim.AdamW(0.01))
    eager, jitted = _network(), _network()
    eager_state, jit_state = optim.setup(rule, eager), optim.setup(rule, jitted)
    step = pb.jit(_training_step)
    for x, y in batches:
        eager_state, eager, eager_value = _training_step(eager_state, eager, x, y)
        jit_state, jitted, jit_value = step(jit_state, jitted, x, y)
        assert float(jit_value) == float(eager_value)
        for a, b in zip(_leaves(jitted), _leaves(eager)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert step.cache_info().traces == 1  # clipped or not, one trace
    assert jitted[2].rng.random() == eager[2].rng.random()  # the same number of draws
