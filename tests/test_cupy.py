"""Gradients of CuPy arrays on the GPU: the same as NumPy's, and CuPy arrays themselves (never copied to the host).

Skipped without CuPy and a GPU. tests/test_strict_arrays.py runs the same paths on the CPU with
a stand-in type that, like CuPy, refuses every implicit conversion to NumPy.
"""

import numpy as np
import pytest

import pullback as pb

cp = pytest.importorskip("cupy")
try:
    cp.cuda.runtime.getDeviceCount()
except Exception as error:  # CuPy installed without a usable GPU
    pytest.skip(f"no GPU: {error}", allow_module_level=True)

rng = np.random.default_rng(0)


def on_gpu(tree):
    return pb.tree.fmap(lambda v: cp.asarray(v) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v, tree)


def assert_same(got, want, rtol=1e-10):
    for (path, g), (_, w) in zip(pb.tree.leaves_with_path(got), pb.tree.leaves_with_path(want)):
        if isinstance(w, np.ndarray):
            assert isinstance(g, cp.ndarray), f"{path}: {type(g).__name__} is not a CuPy array"
            np.testing.assert_allclose(cp.asnumpy(g), w, rtol=rtol, atol=1e-12, err_msg=str(path))


def logistic_loss(w, X, y):
    return np.mean(np.logaddexp(0.0, -y * (X @ w)))


def test_logistic_regression_on_the_gpu():
    X, y, w = rng.normal(size=(200, 5)), np.sign(rng.normal(size=200)), rng.normal(size=5)
    got = pb.gradient(logistic_loss, *on_gpu((w, X, y)))
    assert_same(got, pb.gradient(logistic_loss, w, X, y))


def test_many_operations_on_the_gpu():
    def f(x, w):
        h = np.tanh(x @ w) + np.sin(x[:, :1]) ** 2
        h = h / np.sqrt(np.sum(h * h, axis=0, keepdims=True) + 1.0)
        return np.mean(np.where(h > 0, h, 0.1 * h) ** 2) + np.max(h) + np.sum(h[::2, 1:]) + np.linalg.norm(w)

    x, w = rng.normal(size=(6, 3)), rng.normal(size=(3, 2))
    assert_same(pb.gradient(f, *on_gpu((x, w))), pb.gradient(f, x, w))


def test_a_small_network_and_adam_on_the_gpu():
    x, y = rng.normal(size=(8, 6, 6, 2)), rng.normal(size=(8, 3))
    model = pb.nn.Chain(pb.nn.Conv(2, 2, 3, pb.nn.tanh, rng=0, dtype=np.float64), pb.nn.BatchNorm(2, dtype=np.float64),
                        pb.nn.Flatten(), pb.nn.Dense(32, 3, rng=1, dtype=np.float64))
    loss = lambda m, x, y: np.mean((m(x) - y) ** 2)  # noqa: E731
    assert_same(pb.gradient(loss, *on_gpu((model, x, y))), pb.gradient(loss, model, x, y), rtol=1e-8)
    gpu_model, (gx, gy) = on_gpu(model), on_gpu((x, y))
    state = pb.optim.setup(pb.optim.Adam(0.01), gpu_model)
    (g,) = pb.gradient(lambda m: loss(m, gx, gy), gpu_model)
    state, gpu_model = pb.optim.update(state, gpu_model, g)
    assert isinstance(gpu_model[3].weight, cp.ndarray)


def test_mixing_cupy_and_numpy_names_both_types():
    X = cp.asarray(rng.normal(size=(4, 3)))
    with pytest.raises(TypeError, match=r"cupy.*numpy\.ndarray|numpy\.ndarray.*cupy"):
        pb.gradient(lambda w: np.sum(X @ w), np.ones(3))
