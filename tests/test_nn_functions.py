"""Activations, losses and initialisers: values by formula, gradients against finite differences, dtypes."""

import math

import numpy as np
import pytest

import pullback as pb
from pullback.testing import assert_gradient

rng = np.random.default_rng(0)
X = np.array([-3.0, -1.5, -0.2, 0.3, 1.1, 4.0])

REFERENCES = {
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "softplus": lambda x: np.log1p(np.exp(x)),
    "elu": lambda x: np.where(x > 0, x, np.exp(x) - 1),
    "leaky_relu": lambda x: np.where(x > 0, x, 0.01 * x),
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_activation_values_gradients_and_dtype(name):
    f = getattr(pb.nn, name)
    np.testing.assert_allclose(f(X), REFERENCES[name](X), rtol=1e-12, atol=1e-15)
    assert_gradient(lambda x: np.sum(f(x) * np.arange(1.0, 7.0)), X, dense_up_to=None, rtol=1e-5, atol=1e-7)
    x32 = X.astype(np.float32)
    (g,) = pb.gradient(lambda x: np.sum(f(x)), x32)
    assert f(x32).dtype == np.float32 and g.dtype == np.float32


def test_gelu_is_close_to_the_exact_erf_form():
    exact = np.array([0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in X])
    np.testing.assert_allclose(pb.nn.gelu(X), exact, atol=1e-3)


def test_activations_stay_finite_at_extremes():
    x = np.array([-1000.0, 1000.0])
    np.testing.assert_array_equal(pb.nn.sigmoid(x), [0.0, 1.0])
    np.testing.assert_array_equal(pb.nn.softplus(x), [0.0, 1000.0])
    for f in (pb.nn.sigmoid, pb.nn.softplus, pb.nn.elu, pb.nn.gelu):
        (g,) = pb.gradient(lambda x: np.sum(f(x)), x)
        assert np.all(np.isfinite(g)), f.__name__
    np.testing.assert_allclose(pb.gradient(lambda x: np.sum(pb.nn.elu(x)), x)[0], [0.0, 1.0])


def test_softmax_and_logsoftmax():
    x = rng.standard_normal((3, 5)) * 3
    e = np.exp(x)
    np.testing.assert_allclose(pb.nn.softmax(x), e / e.sum(-1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(pb.nn.softmax(x, axis=0), e / e.sum(0, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(pb.nn.logsoftmax(x), np.log(e / e.sum(-1, keepdims=True)), rtol=1e-12)
    np.testing.assert_allclose(pb.nn.logsoftmax(np.array([1000.0, 0.0])), [0.0, -1000.0])
    r = rng.standard_normal((3, 5))
    assert_gradient(lambda x: np.sum(pb.nn.softmax(x) * r), x, dense_up_to=None, rtol=1e-5, atol=1e-7)
    assert_gradient(lambda x: np.sum(pb.nn.logsoftmax(x, axis=0) * r), x, dense_up_to=None, rtol=1e-5, atol=1e-7)


def test_mse_and_aggregation():
    yhat, y = np.array([[1.0, 2.0], [3.0, 5.0]]), np.array([[1.0, 0.0], [0.0, 1.0]])
    assert pb.nn.mse(yhat, y) == (0 + 4 + 9 + 16) / 4
    assert pb.nn.mse(yhat, y, agg="sum") == 29
    np.testing.assert_array_equal(pb.nn.mse(yhat, y, agg="none"), [[0, 4], [9, 16]])
    assert pb.nn.mse(yhat, y, agg=lambda losses: np.sum(losses * np.array([1.0, 0.0]))) == 9
    assert_gradient(lambda a: pb.nn.mse(a, y), yhat, dense_up_to=None, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="agg"):
        pb.nn.mse(yhat, y, agg="median")


def test_cross_entropies_by_hand():
    p = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
    labels = np.array([1, 2])
    onehot = np.eye(3)[labels]
    expected = -(np.log(0.5) + np.log(0.3)) / 2
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(pb.nn.crossentropy(p, labels), expected, rtol=1e-12)
    np.testing.assert_allclose(pb.nn.crossentropy(p, onehot), expected, rtol=1e-12)
    np.testing.assert_allclose(pb.nn.crossentropy(p, labels, agg="none"), [-np.log(0.5 + eps), -np.log(0.3 + eps)])
    np.testing.assert_allclose(pb.nn.crossentropy(p.T, labels, axis=0), expected, rtol=1e-12)
    logits = rng.standard_normal((2, 3))
    softmax = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(pb.nn.logitcrossentropy(logits, labels), -np.mean(np.log(softmax[[0, 1], labels])), rtol=1e-12)
    np.testing.assert_allclose(pb.nn.logitcrossentropy(logits, onehot, agg="sum"), -np.sum(np.log(softmax[[0, 1], labels])))
    # gradient of the mean logit cross-entropy is (softmax - onehot) / batch
    (g,) = pb.gradient(lambda z: pb.nn.logitcrossentropy(z, labels), logits)
    np.testing.assert_allclose(g, (softmax - onehot) / 2, rtol=1e-12)
    assert_gradient(lambda q: pb.nn.crossentropy(q, onehot * 0.8 + 0.1), p, dense_up_to=None, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="0..2"):
        pb.nn.crossentropy(p, np.array([1, 3]))
    with pytest.raises(ValueError, match="shape"):
        pb.nn.logitcrossentropy(logits, np.array([1, 2, 0]))


def test_binary_cross_entropies():
    p, y = np.array([0.9, 0.2, 0.6]), np.array([1.0, 0.0, 1.0])
    expected = -np.mean([np.log(0.9), np.log(0.8), np.log(0.6)])
    np.testing.assert_allclose(pb.nn.binary_crossentropy(p, y), expected, rtol=1e-12)
    logits = np.log(p / (1 - p))
    np.testing.assert_allclose(pb.nn.logitbinarycrossentropy(logits, y), expected, rtol=1e-12)
    assert_gradient(lambda z: pb.nn.logitbinarycrossentropy(z, y), logits, dense_up_to=None, rtol=1e-5, atol=1e-7)
    assert_gradient(lambda q: pb.nn.binary_crossentropy(q, y, agg="sum"), p, dense_up_to=None, rtol=1e-5, atol=1e-7)
    assert np.isfinite(pb.nn.logitbinarycrossentropy(np.array([-1000.0]), np.array([1.0])))


@pytest.mark.parametrize("loss", [pb.nn.binary_crossentropy, pb.nn.logitbinarycrossentropy, pb.nn.mse])
def test_elementwise_losses_refuse_targets_that_broadcast_into_another_shape(loss):
    # (n, 1) predictions against (n,) labels would broadcast to (n, n) and average over all pairs
    # (PyTorch: "Target size must be the same as input size"); a scalar target still broadcasts.
    p = np.array([[0.9], [0.2], [0.6]])
    with pytest.raises(ValueError, match=r"targets of shape \(3,\) do not match predictions of shape \(3, 1\)"):
        loss(p, np.array([1.0, 0.0, 1.0]))
    np.testing.assert_allclose(loss(p, 1.0), loss(p, np.ones((3, 1))), rtol=1e-15)


def test_logitbinarycrossentropy_refuses_column_logits_against_flat_targets_as_torch_does():
    torch = pytest.importorskip("torch")
    logits, y = np.array([[2.0], [-1.0], [0.5]]), np.array([1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"shape"):
        pb.nn.logitbinarycrossentropy(logits, y)
    with pytest.raises(ValueError):
        torch.nn.functional.binary_cross_entropy_with_logits(torch.tensor(logits), torch.tensor(y))


@pytest.mark.parametrize("dtype", [bool, np.int64])
def test_cross_entropies_take_boolean_and_integer_one_hot_targets(dtype):
    # np.eye(k, dtype=bool)[labels] (or labels[:, None] == classes) is a target shaped like the prediction
    z = np.array([[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 3.0, 1.0], [2.0, -2.0, 0.0, 0.0]])
    labels = np.array([0, 2, 1])
    onehot = np.eye(4, dtype=dtype)[labels]
    np.testing.assert_allclose(pb.nn.logitcrossentropy(z, onehot), pb.nn.logitcrossentropy(z, labels), rtol=1e-12)
    p = pb.nn.softmax(z)
    np.testing.assert_allclose(pb.nn.crossentropy(p, onehot), pb.nn.crossentropy(p, labels), rtol=1e-12)


def test_label_errors_print_plain_numbers():
    with pytest.raises(ValueError) as info:
        pb.nn.logitcrossentropy(np.zeros((3, 4)), np.zeros((2,), dtype=np.int64))
    assert "np.int64" not in str(info.value) and "should have shape (3,)" in str(info.value), str(info.value)


def test_label_range_error_under_jit_shows_the_values():
    f = pb.jit(lambda z, y: pb.nn.logitcrossentropy(z, y))
    z = np.zeros((2, 3))
    f(z, np.array([0, 1]))
    with pytest.raises(ValueError) as info:
        f(z, np.array([0, 7]))
    assert "Symbol" not in str(info.value) and "from 0 to 7" in str(info.value), str(info.value)


def test_losses_keep_float32():
    z = rng.standard_normal((4, 3)).astype(np.float32)
    labels = np.array([0, 1, 2, 1])
    for loss in (lambda z: pb.nn.logitcrossentropy(z, labels), lambda z: pb.nn.mse(z, np.zeros((4, 3), np.float32)),
                 lambda z: pb.nn.crossentropy(pb.nn.softmax(z), labels)):
        val, (g,) = pb.withgradient(loss, z)
        assert val.dtype == np.float32 and g.dtype == np.float32


def test_fans_follow_the_layer_layouts():
    assert pb.nn.init.fans((10, 3)) == (3, 10)  # Dense (out, in)
    assert pb.nn.init.fans((3, 3, 16, 32)) == (144, 288)  # Conv (kh, kw, in, out)
    assert pb.nn.init.fans((7,)) == (7, 7)


def test_initialiser_statistics_dtypes_and_generators():
    init = pb.nn.init
    g = np.random.default_rng(0)
    w = init.glorot_uniform(g, (400, 600))
    bound = np.sqrt(6 / 1000)
    assert w.dtype == np.float32 and w.shape == (400, 600) and np.abs(w).max() <= bound
    np.testing.assert_allclose(w.std(), bound / np.sqrt(3), rtol=0.01)
    np.testing.assert_allclose(init.glorot_normal(g, (400, 600)).std(), np.sqrt(2 / 1000), rtol=0.01)
    np.testing.assert_allclose(init.kaiming_normal(g, (3, 3, 64, 128)).std(), np.sqrt(2 / 576), rtol=0.01)
    np.testing.assert_allclose(init.kaiming_normal(g, (3, 3, 64, 128), mode="fan_out").std(), np.sqrt(2 / 1152), rtol=0.01)
    k = init.kaiming_uniform(g, (300, 500), dtype=np.float64)
    assert k.dtype == np.float64 and np.abs(k).max() <= np.sqrt(2) * np.sqrt(3 / 500)
    np.testing.assert_allclose(init.normal(g, (1000, 100), std=0.5).std(), 0.5, rtol=0.01)
    assert init.zeros(g, (2,)).sum() == 0 and init.ones(g, (2, 2), np.float64).dtype == np.float64
    np.testing.assert_array_equal(init.glorot_uniform(np.random.default_rng(5), (3, 3)),
                                  init.glorot_uniform(np.random.default_rng(5), (3, 3)))
    with pytest.raises(TypeError, match="Generator"):
        init.glorot_uniform(5, (2, 2))
    with pytest.raises(ValueError, match="fan_in"):
        init.kaiming_normal(g, (2, 2), mode="fan")


@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_elu_at_zero_has_the_left_derivative_alpha(alpha):
    # smooth at 0 for alpha = 1 (finite differences give 1); PyTorch takes alpha for any alpha
    x = np.array([0.0, -1.0, 2.0])
    (g,) = pb.gradient(lambda x: np.sum(pb.nn.elu(x, alpha)), x)
    np.testing.assert_allclose(g, [alpha, alpha * np.exp(-1.0), 1.0], rtol=1e-15)
    assert pb.jvp(lambda x: pb.nn.elu(x, alpha), (np.zeros(1),), (np.ones(1),))[1][0] == alpha
    assert_gradient(lambda x: np.sum(pb.nn.elu(x)), np.array([0.0]), dense_up_to=None)


def test_gelu_is_finite_at_large_finite_float32_inputs():
    # "All are stable at extreme inputs": x**3 (and 3 x**2 in its derivative) overflows float32 beyond
    # |x| ~ 2e19, which made the gradient 0 * inf = nan; PyTorch's limits are 0 and 1.
    x = np.array([-1e20, -1e30, 1e20, 1e30, -3e38, 3e38], dtype=np.float32)
    with np.errstate(all="raise"):
        (g,) = pb.gradient(lambda x: np.sum(pb.nn.gelu(x) * 0.5), x)
        y = pb.nn.gelu(x)
    np.testing.assert_array_equal(g, np.array([0.0, 0.0, 0.5, 0.5, 0.0, 0.5], dtype=np.float32))
    np.testing.assert_array_equal(y, np.where(x > 0, x, 0.0))
    assert y.dtype == np.float32


def test_binary_crossentropy_takes_boolean_targets():
    p = np.array([0.2, 0.8, 0.6])
    y = np.array([False, True, True])
    got = pb.nn.binary_crossentropy(p, y)
    np.testing.assert_allclose(got, pb.nn.binary_crossentropy(p, y.astype(np.float64)))
