"""Layers, losses and optimisers against hand formulas (and PyTorch where it is installed)."""

import numpy as np
import pytest

import pullback as pb
from pullback import optim


# --- cross-entropy with integer labels reads only the labelled class -----------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_logitcrossentropy_with_labels_ignores_masked_logits_of_other_classes(dtype):
    # A logit of -inf (a masked class) that is not the label contributes nothing, as in
    # PyTorch's cross_entropy; one-hot multiplication made it 0 * -inf = nan.
    z = np.array([[1.0, -np.inf, 2.0], [-np.inf, 0.5, -1.0]], dtype)
    y = np.array([0, 2])
    finite = [np.array([1.0, 2.0]), np.array([0.5, -1.0])]
    by_hand = np.mean([np.log(np.sum(np.exp(f))) - f[k] for f, k in zip(finite, (0, 1))])
    value, (g,) = pb.withgradient(lambda q: pb.nn.logitcrossentropy(q, y), z)
    assert value.dtype == dtype
    np.testing.assert_allclose(value, by_hand, rtol=1e-6)
    softmax = np.exp(z - np.max(z, axis=1, keepdims=True))
    softmax /= softmax.sum(axis=1, keepdims=True)
    expected = (softmax - np.eye(3)[y]) / 2
    np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-7)
    per_sample = pb.nn.logitcrossentropy(z, y, agg="none")
    assert np.all(np.isfinite(per_sample)) and per_sample.dtype == dtype


def test_logitcrossentropy_with_labels_along_another_axis_ignores_masked_logits():
    z = np.zeros((2, 3, 4))
    z[:, 1, :] = -np.inf  # class 1 masked everywhere, never a label
    y = np.array([[0, 2, 0, 2], [2, 2, 0, 0]])
    value = pb.nn.logitcrossentropy(z, y, axis=1)
    np.testing.assert_allclose(value, np.log(2.0), rtol=1e-14)


def test_crossentropy_with_labels_and_no_eps_ignores_zero_probabilities_of_other_classes():
    p = np.array([[0.25, 0.0, 0.75], [0.5, 0.5, 0.0]])
    y = np.array([2, 0])
    value, (g,) = pb.withgradient(lambda q: pb.nn.crossentropy(q, y, eps=0.0), p)
    np.testing.assert_allclose(value, -(np.log(0.75) + np.log(0.5)) / 2, rtol=1e-14)
    np.testing.assert_allclose(g, [[0, 0, -1 / 0.75 / 2], [-1 / 0.5 / 2, 0, 0]], rtol=1e-14)


def test_logitcrossentropy_with_masked_logits_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    z = rng.standard_normal((6, 5))
    y = rng.integers(0, 5, 6)
    z[np.arange(6), (y + 2) % 5] = -np.inf
    value, (g,) = pb.withgradient(lambda q: pb.nn.logitcrossentropy(q, y, agg="sum"), z)
    zt = torch.tensor(z, requires_grad=True)
    reference = torch.nn.functional.cross_entropy(zt, torch.tensor(y), reduction="sum")
    reference.backward()
    np.testing.assert_allclose(value, reference.item(), rtol=1e-12)
    np.testing.assert_allclose(g, zt.grad.numpy(), rtol=1e-12, atol=1e-15)


# --- optimisers against torch.optim: coupled weight decay, schedules, skipped parameters -------
def _model(dtype):
    rng = np.random.default_rng(1)
    return {"w": rng.standard_normal((3, 4)).astype(dtype), "b": rng.standard_normal(4).astype(dtype)}


def _loss(m):
    x = np.linspace(-1, 1, 15).reshape(5, 3).astype(m["w"].dtype)
    return np.sum(np.tanh(x @ m["w"] + m["b"]) ** 2)


_COUPLED = [
    ("adam", lambda: optim.OptimiserChain(optim.WeightDecay(0.1), optim.Adam(0.01, 0.8, 0.9, 1e-6)),
     lambda torch, p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1)),
    ("rmsprop", lambda: optim.OptimiserChain(optim.WeightDecay(0.1), optim.RMSProp(0.01, 0.9, 1e-6)),
     lambda torch, p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1)),
    ("adagrad", lambda: optim.OptimiserChain(optim.WeightDecay(0.1), optim.AdaGrad(0.1, 1e-10)),
     lambda torch, p: torch.optim.Adagrad(p, lr=0.1, eps=1e-10, weight_decay=0.1)),
    ("sgd", lambda: optim.OptimiserChain(optim.ClipGrad(0.3), optim.WeightDecay(0.1), optim.Descent(0.05)),
     lambda torch, p: torch.optim.SGD(p, lr=0.05, weight_decay=0.1)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name, make_rule, make_torch", _COUPLED, ids=[c[0] for c in _COUPLED])
def test_coupled_weight_decay_chains_follow_torch_optim_step_by_step(dtype, name, make_rule, make_torch):
    torch = pytest.importorskip("torch")
    model = _model(dtype)
    state = optim.setup(make_rule(), model)
    params = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in model.items()}
    reference = make_torch(torch, list(params.values()))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    for _ in range(20):
        (g,) = pb.gradient(_loss, model)
        for k, p in params.items():
            p.grad = torch.tensor(np.clip(g[k], -0.3, 0.3) if name == "sgd" else g[k])
        state, model = optim.update(state, model, g)
        reference.step()
        for k in model:
            assert model[k].dtype == dtype
            np.testing.assert_allclose(model[k], params[k].detach().numpy(), **tol)


@pytest.mark.parametrize("make_rule, make_torch", [
    (lambda: optim.Adam(0.02), lambda torch, p: torch.optim.Adam(p, lr=0.02)),
    (lambda: optim.AdamW(0.02, weight_decay=0.3), lambda torch, p: torch.optim.AdamW(p, lr=0.02, weight_decay=0.3)),
])
def test_adjusted_learning_rate_and_missing_gradients_follow_torch(make_rule, make_torch):
    # A schedule through `adjust`, and a parameter without a gradient every third step: it is left
    # alone and its moments and step count do not move, as torch skips a parameter whose grad is None.
    torch = pytest.importorskip("torch")
    model = _model(np.float64)
    state = optim.setup(make_rule(), model)
    params = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in model.items()}
    reference = make_torch(torch, list(params.values()))
    schedule = torch.optim.lr_scheduler.StepLR(reference, step_size=4, gamma=0.5)
    for step in range(20):
        state = optim.adjust(state, lr=reference.param_groups[0]["lr"])
        (g,) = pb.gradient(_loss, model)
        g = dict(g)
        if step % 3 == 1:
            g["w"] = None
        for k, p in params.items():
            p.grad = None if g[k] is None else torch.tensor(g[k])
        before = model["w"]
        state, model = optim.update(state, model, g)
        reference.step()
        schedule.step()
        if g["w"] is None:
            np.testing.assert_array_equal(model["w"], before)
    for k in model:
        np.testing.assert_allclose(model[k], params[k].detach().numpy(), rtol=1e-12, atol=1e-14)


def test_lion_follows_the_papers_update_with_decoupled_weight_decay():
    lr, b1, b2, wd = 0.01, 0.8, 0.95, 0.5
    model = _model(np.float32)
    state = optim.setup(optim.Lion(lr, b1, b2, wd), model)
    w, m = model["w"].astype(np.float64), np.zeros((3, 4))
    for _ in range(10):
        (g,) = pb.gradient(_loss, model)
        gw = g["w"].astype(np.float64)
        w = w * (1 - lr * wd) - lr * np.sign(b1 * m + (1 - b1) * gw)
        m = b2 * m + (1 - b2) * gw
        state, model = optim.update(state, model, g)
        assert model["w"].dtype == np.float32
        np.testing.assert_allclose(model["w"], w, rtol=1e-5, atol=1e-6)
