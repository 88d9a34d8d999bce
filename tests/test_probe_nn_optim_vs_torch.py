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
