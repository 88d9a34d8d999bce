"""pb.nn core layers: gradients against float64 finite differences, structure, modes, reprs, errors."""

import copy

import numpy as np
import pytest

import pullback as pb
from pullback.testing import assert_gradient

rng = np.random.default_rng(0)


def check_layer(layer, x, fields=None, rtol=1e-5, atol=1e-7, x_differentiable=True):
    """Finite differences for the input and each trainable field; the layer's Tangent must agree.

    `layer` is float64. The loss is sum(layer(x) * r) with random r.
    """
    fields = [n for n in (layer.trainable() if fields is None else fields) if getattr(layer, n) is not None]
    r = np.random.default_rng(1).standard_normal(np.shape(layer(x)))

    def f(x, *params):
        new = copy.copy(layer)
        for name, p in zip(fields, params):
            setattr(new, name, p)
        return np.sum(new(x) * r)

    grads = assert_gradient(f, x, *[getattr(layer, n) for n in fields], rtol=rtol, atol=atol, dense_up_to=None).gradient
    g_layer, g_x = pb.gradient(lambda m, x: np.sum(m(x) * r), layer, x)
    if g_layer is None:
        assert not fields
    else:
        assert isinstance(g_layer, pb.Tangent) and g_layer.primal_type is type(layer)
    for name, g in zip(fields, grads[1:]):
        np.testing.assert_allclose(g_layer[name], g, rtol=1e-12)
    if hasattr(layer, "trainable") and g_layer is not None:
        for name in g_layer.keys():
            if name not in fields:
                assert g_layer[name] is None, f"{name} is not trainable but got a gradient"
    if x_differentiable:
        np.testing.assert_allclose(g_x, grads[0], rtol=1e-12)
    return g_layer


def test_seed_scenario_gives_the_documented_tangent_structure():
    x = rng.standard_normal((4, 2)).astype(np.float32)
    model = pb.nn.Chain(pb.nn.Dense(2, 1, pb.nn.tanh, rng=0), pb.nn.Dense(1, 1, bias=False, rng=1))
    val, (g, gx) = pb.withgradient(lambda m, x: np.sum(m(x) ** 2), model, x)
    assert isinstance(g, pb.Tangent) and g.primal_type is pb.nn.Chain and list(g.keys()) == ["layers"]
    first, second = g.layers
    assert type(g.layers) is tuple
    assert first.primal_type is pb.nn.Dense and list(first.keys()) == ["weight", "bias", "activation"]
    assert second.primal_type is pb.nn.Dense and list(second.keys()) == ["weight", "bias", "activation"]
    assert first.activation is None and second.bias is None and second.activation is None
    assert first.weight.shape == (1, 2) and first.bias.shape == (1,) and second.weight.shape == (1, 1)
    assert all(a.dtype == np.float32 for a in (first.weight, first.bias, second.weight, gx))
    # hand derivation: h = tanh(x W1^T + b1), y = h w2, L = sum(y^2)
    w1, b1, w2 = (a.astype(np.float64) for a in (model[0].weight, model[0].bias, model[1].weight))
    h = np.tanh(x @ w1.T + b1)
    y = h @ w2.T
    dy = 2 * y
    dpre = (dy @ w2) * (1 - h**2)
    np.testing.assert_allclose(val, np.sum(y**2), rtol=1e-5)
    np.testing.assert_allclose(second.weight, dy.T @ h, rtol=1e-4)
    np.testing.assert_allclose(first.weight, dpre.T @ x, rtol=1e-4)
    np.testing.assert_allclose(first.bias, dpre.sum(0), rtol=1e-4)
    np.testing.assert_allclose(gx, dpre @ w1, rtol=1e-4)


def test_seed_scenario_with_optimiser_when_available():
    optim = getattr(pb, "optim", None)
    if optim is None:
        pytest.skip("pb.optim is not part of this build yet")
    x = rng.standard_normal((4, 2)).astype(np.float32)
    model = pb.nn.Chain(pb.nn.Dense(2, 1, pb.nn.tanh, rng=0), pb.nn.Dense(1, 1, bias=False, rng=1))
    val, (g, _) = pb.withgradient(lambda m, x: np.sum(m(x) ** 2), model, x)
    state = optim.setup(optim.Adam(), model)
    state, new = optim.update(state, model, g)
    assert type(new) is pb.nn.Chain and new[1].bias is None and new[0].activation is pb.nn.tanh
    assert not np.array_equal(new[0].weight, model[0].weight)
    assert np.sum(new(x) ** 2) < val


def test_dense_gradients():
    check_layer(pb.nn.Dense(4, 3, pb.nn.tanh, dtype=np.float64, rng=0), rng.standard_normal((5, 4)))
    check_layer(pb.nn.Dense(4, 3, bias=False, dtype=np.float64, rng=0), rng.standard_normal((2, 5, 4)))
    check_layer(pb.nn.Dense(3, 2, dtype=np.float64, rng=0), rng.standard_normal(3))


def test_dense_fields_dtype_and_repr():
    d = pb.nn.Dense(3, 2, pb.nn.relu, rng=0)
    assert d.weight.shape == (2, 3) and d.bias.shape == (2,) and d.weight.dtype == np.float32
    assert d.activation is pb.nn.relu and d.trainable() == ("weight", "bias")
    assert repr(d) == "Dense(3, 2, relu)" and repr(pb.nn.Dense(1, 1, bias=False)) == "Dense(1, 1, bias=False)"
    y = d(np.ones((4, 3), np.float32))
    assert y.dtype == np.float32 and y.shape == (4, 2)
    np.testing.assert_allclose(y, np.maximum(np.ones((4, 3)) @ d.weight.T.astype(np.float64) + d.bias, 0), rtol=1e-6)
    with pytest.raises(ValueError, match=r"expects inputs \(\.\.\., 3\)"):
        d(np.ones((4, 5)))


@pytest.mark.parametrize("build, message", [
    (lambda: pb.nn.Conv((3, 3), 3, 4), r"Conv: in_channels must be a positive int; got \(3, 3\). The order is Conv\("),
    (lambda: pb.nn.ConvTranspose(3, 0, 3), "ConvTranspose: out_channels must be a positive int; got 0"),
    (lambda: pb.nn.Dense(4.0, 3), "Dense: in_features must be a positive int; got 4.0"),
    (lambda: pb.nn.Dense(4, -1), "Dense: out_features must be a positive int; got -1"),
    (lambda: pb.nn.BatchNorm((4,)), r"BatchNorm: channels must be a positive int; got \(4,\)"),
    (lambda: pb.nn.Embedding(10, True), "Embedding: dim must be a positive int; got True"),
], ids=["conv kernel first", "conv transpose zero", "dense float", "dense negative", "batchnorm tuple", "embedding bool"])
def test_layer_sizes_that_are_not_positive_ints_are_refused_with_the_argument_order(build, message):
    with pytest.raises(TypeError, match=message):
        build()
    assert pb.nn.Dense(np.int64(3), 2).weight.shape == (2, 3)  # NumPy integers are sizes too


def test_same_seed_same_weights():
    a, b = pb.nn.Dense(5, 4, rng=np.random.default_rng(3)), pb.nn.Dense(5, 4, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(a.weight, b.weight)
    assert not np.array_equal(a.weight, pb.nn.Dense(5, 4, rng=4).weight)
    with pytest.raises(TypeError, match="Generator"):
        pb.nn.Dense(2, 2, rng="seed")


def test_chain_indexing_iteration_and_repr():
    a, b, c = pb.nn.Dense(2, 3, rng=0), pb.nn.Dense(3, 3, rng=0), pb.nn.Dense(3, 1, rng=0)
    m = pb.nn.Chain(a, pb.nn.relu, b, c)
    assert m[0] is a and m[-1] is c and len(m) == 4 and list(m) == [a, pb.nn.relu, b, c]
    assert isinstance(m[1:], pb.nn.Chain) and m[1:].layers == (pb.nn.relu, b, c)
    x = rng.standard_normal((2, 2)).astype(np.float32)
    np.testing.assert_array_equal(m(x), c(b(np.maximum(a(x), 0))))
    assert repr(m) == "Chain(\n  Dense(2, 3),\n  relu,\n  Dense(3, 3),\n  Dense(3, 1),\n)"
    with pytest.raises(TypeError, match="not callable"):
        pb.nn.Chain(a, 3)


def test_chain_gradient_matches_finite_differences_and_mirrors_structure():
    m = pb.nn.Chain(pb.nn.Dense(3, 4, pb.nn.tanh, dtype=np.float64, rng=0), pb.nn.Dense(4, 2, dtype=np.float64, rng=1))
    x = rng.standard_normal((5, 3))
    r = rng.standard_normal((5, 2))

    def f(w1, b1, w2, b2):
        return np.sum(np.tanh(x @ w1.T + b1) @ w2.T * r + b2 * r)

    expected = assert_gradient(f, m[0].weight, m[0].bias, m[1].weight, m[1].bias, dense_up_to=None, rtol=1e-5, atol=1e-7).gradient
    (g,) = pb.gradient(lambda m: np.sum(m(x) * r), m)
    for got, want in zip((g.layers[0].weight, g.layers[0].bias, g.layers[1].weight, g.layers[1].bias), expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_parallel_and_skip_connection_gradients():
    d1, d2 = pb.nn.Dense(3, 2, np.tanh, dtype=np.float64, rng=0), pb.nn.Dense(3, 2, dtype=np.float64, rng=1)
    par = pb.nn.Parallel(np.multiply, d1, d2)
    x = rng.standard_normal((4, 3))
    np.testing.assert_array_equal(par(x), d1(x) * d2(x))
    np.testing.assert_array_equal(par((x, 2 * x)), d1(x) * d2(2 * x))
    r = rng.standard_normal((4, 2))
    (g,) = pb.gradient(lambda p: np.sum(p(x) * r), par)
    assert g.connection is None and len(g.layers) == 2
    expected = assert_gradient(lambda w1, w2: np.sum(np.tanh(x @ w1.T + d1.bias) * (x @ w2.T + d2.bias) * r),
                               d1.weight, d2.weight, dense_up_to=None, rtol=1e-5, atol=1e-7).gradient
    np.testing.assert_allclose(g.layers[0].weight, expected[0], rtol=1e-12)
    np.testing.assert_allclose(g.layers[1].weight, expected[1], rtol=1e-12)

    skip = pb.nn.SkipConnection(pb.nn.Dense(3, 3, np.tanh, dtype=np.float64, rng=2), np.add)
    np.testing.assert_array_equal(skip(x), skip.layers(x) + x)
    g_skip = check_layer(skip, x, fields=[])  # input gradient includes the shortcut
    assert g_skip.layers.weight.shape == (3, 3)
    with pytest.raises(ValueError, match="2 layers got a tuple of 3"):
        par((x, x, x))


def test_flatten():
    x = rng.standard_normal((2, 3, 4, 5))
    np.testing.assert_array_equal(pb.nn.Flatten()(x), x.reshape(2, 60))
    check_layer(pb.nn.Flatten(), x, fields=[])


def test_embedding_gradient_accumulates_repeated_indices():
    e = pb.nn.Embedding(6, 3, dtype=np.float64, rng=0)
    idx = np.array([[1, 4, 1], [0, 1, 5]])
    np.testing.assert_array_equal(e(idx), e.weight[idx])
    r = rng.standard_normal((2, 3, 3))
    (g,) = pb.gradient(lambda e: np.sum(e(idx) * r), e)
    expected = np.zeros((6, 3))
    for pos, row in np.ndenumerate(idx):
        expected[row] += r[pos]
    np.testing.assert_allclose(g.weight, expected, rtol=1e-12)
    assert_gradient(lambda w: np.sum(w[idx] * r), e.weight, dense_up_to=None, rtol=1e-5, atol=1e-7)
    with pytest.raises(IndexError, match="0..5"):
        e(np.array([6]))
    with pytest.raises(TypeError, match="integer indices"):
        e(np.array([1.0]))


def test_embedding_index_error_under_jit_shows_the_values():
    e = pb.nn.Embedding(5, 2, dtype=np.float64, rng=0)
    f = pb.jit(lambda e, i: np.sum(e(i)))
    f(e, np.array([0, 1]))
    with pytest.raises(IndexError) as info:
        f(e, np.array([-1, 1]))
    assert "Symbol" not in str(info.value) and "got -1..1" in str(info.value), str(info.value)


def test_dropout_masks_scales_and_gradient():
    d = pb.nn.Dropout(0.25, rng=np.random.default_rng(7), training=True)
    x = np.ones((400, 50), np.float32)
    y = d(x)
    assert y.dtype == np.float32
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)}
    assert abs(np.mean(y == 0) - 0.25) < 0.01  # 20,000 draws: 4 sigma is 0.012
    # the gradient is the same mask and scale as the forward pass (same generator state)
    x = rng.standard_normal((30, 20))
    d1 = pb.nn.Dropout(0.5, rng=np.random.default_rng(3), training=True)
    d2 = pb.nn.Dropout(0.5, rng=np.random.default_rng(3), training=True)
    (gx,) = pb.gradient(lambda x: np.sum(d1(x) * 3.0), x)
    mask = d2(np.ones_like(x))
    np.testing.assert_array_equal(gx, 3.0 * mask)
    # one mask per channel with dims=(0, 3)
    dc = pb.nn.Dropout(0.5, dims=(0, 3), rng=0, training=True)
    y = dc(np.ones((2, 4, 4, 8)))
    assert np.all(y == y[:, :1, :1, :])


def test_dropout_refuses_an_axis_the_input_does_not_have():
    # dims=(4,) on a 4-d input used to wrap to axis 0 (d % ndim): a mask varying along the batch, silently
    d = pb.nn.Dropout(0.5, dims=(4,), rng=0, training=True)
    with pytest.raises(ValueError, match=r"dims=\(4,\).*no axis 4.*-4\.\.3"):
        d(np.ones((2, 3, 3, 4)))
    y = pb.nn.Dropout(0.5, dims=(0, -1), rng=0, training=True)(np.ones((2, 4, 4, 8)))  # negative: as NumPy's axes
    assert np.all(y == y[:, :1, :1, :])
    with pytest.raises(TypeError, match="dims should be"):
        pb.nn.Dropout(0.5, dims=("channels",))


def test_dropout_takes_one_axis_as_an_int():
    d = pb.nn.Dropout(0.5, dims=-1, rng=0, training=True)  # as dims=(-1,): one mask entry per column
    assert d.dims == (-1,)
    y = d(np.ones((6, 40)))
    assert np.all(y == y[:1, :]) and 0 < np.count_nonzero(y[0]) < 40
    with pytest.raises(TypeError, match="dims should be an axis or axes"):
        pb.nn.Dropout(0.5, dims=1.5)


def test_dropout_modes():
    x = rng.standard_normal((10, 10))
    d = pb.nn.Dropout(0.5, rng=0)
    assert d.training is None and d(x) is x  # automatic mode, not differentiated: evaluation
    (g,) = pb.gradient(lambda x: np.sum(d(x)), x)  # automatic mode, differentiated: training
    assert np.any(g == 0) and np.all((g == 0) | (g == 2.0))
    pb.nn.testmode(d)
    (g,) = pb.gradient(lambda x: np.sum(d(x)), x)
    np.testing.assert_array_equal(g, np.ones_like(x))
    pb.nn.trainmode(d)
    assert np.any(d(x) == 0)
    pb.nn.trainmode(d, "auto")
    assert d.training is None
    with pytest.raises(ValueError, match="mode"):
        pb.nn.trainmode(d, "sometimes")
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        pb.nn.Dropout(1.0)


def test_modes_reach_nested_layers_and_return_the_model():
    bn, dr = pb.nn.BatchNorm(3), pb.nn.Dropout(0.1)
    model = pb.nn.Chain(pb.nn.Dense(3, 3), pb.nn.Parallel(np.add, bn, pb.nn.Chain(dr)))
    assert pb.nn.testmode(model) is model and bn.training is False and dr.training is False
    assert pb.nn.trainmode(model) is model and bn.training is True and dr.training is True
    pb.nn.testmode(model, "auto")
    assert bn.training is None and dr.training is None


def test_non_trainable_layers_get_no_gradient():
    model = pb.nn.Chain(pb.nn.Dense(3, 3, rng=0), pb.nn.Dropout(0.5), pb.nn.Flatten())
    x = rng.standard_normal((2, 3)).astype(np.float32)
    (g,) = pb.gradient(lambda m: np.sum(m(x)), model)
    assert g.layers[1] is None and g.layers[2] is None and g.layers[0].weight is not None


# --- loading PyTorch state dicts ------------------------------------------------------------------
def test_load_torch_state_dict_copies_so_later_writes_to_the_state_dict_cannot_reach_the_model():
    """`{k: v.numpy() ...}` views PyTorch's own tensors: sharing them means PyTorch training changes the
    pullback model and pullback's in-place BatchNorm statistics change the PyTorch module."""
    from pullback.nn.torch_interop import load_torch_state_dict

    sd = {"weight": np.array([[1.0, 2.0]], np.float32), "bias": np.array([0.5], np.float32)}
    loaded = load_torch_state_dict(pb.nn.Dense(2, 1), sd)
    assert not np.shares_memory(loaded.weight, sd["weight"])
    assert not np.shares_memory(loaded.bias, sd["bias"])
    sd["weight"][0, 0] = 99.0
    assert loaded.weight[0, 0] == 1.0


def test_training_a_batchnorm_loaded_from_a_torch_state_dict_leaves_the_state_dict_alone():
    from pullback.nn.torch_interop import load_torch_state_dict

    sd = {"weight": np.ones(3, np.float32), "bias": np.zeros(3, np.float32),
          "running_mean": np.zeros(3, np.float32), "running_var": np.ones(3, np.float32),
          "num_batches_tracked": np.array(0, np.int64)}
    model = load_torch_state_dict(pb.nn.BatchNorm(3), sd)
    pb.nn.trainmode(model)(np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32))
    assert not np.array_equal(model.running_mean, np.zeros(3))
    assert np.array_equal(sd["running_mean"], np.zeros(3))
