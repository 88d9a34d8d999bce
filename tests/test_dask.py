"""Dask arrays as data and as parameters: the same gradients as with NumPy arrays, computed lazily.

Every check compares against the same computation on NumPy arrays (or central differences), and
checks that nothing was computed before the user asks (a Dask callback refuses any compute).
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pullback as pb

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
from dask_checks import NoCompute  # noqa: E402


def logistic_loss(w, X, y):
    return np.mean(np.logaddexp(0.0, -y * (X @ w)))


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4))
    y = np.sign(rng.normal(size=120))
    w = rng.normal(size=4)
    return X, y, w


def test_the_logistic_regression_of_the_readme_on_dask_data(data):
    Xn, yn, w = data
    X, y = da.from_array(Xn, chunks=(30, 4)), da.from_array(yn, chunks=30)
    with NoCompute():
        (g,) = pb.gradient(lambda w: logistic_loss(w, X, y), w)
    assert isinstance(g, da.Array)  # data of Dask's type makes the gradient Dask's (its promotion)
    expected = pb.gradient(lambda w: logistic_loss(w, Xn, yn), w)[0]
    z = -yn * (Xn @ w)
    by_hand = Xn.T @ (-yn / (1.0 + np.exp(-z))) / len(yn)  # d/dw mean(log(1 + e^z))
    np.testing.assert_allclose(g.compute(), by_hand, rtol=1e-12)
    np.testing.assert_allclose(expected, by_hand, rtol=1e-12)


def test_a_dask_parameter_gets_a_lazy_dask_gradient(data):
    Xn, yn, wn = data
    w = da.from_array(wn, chunks=2)
    with NoCompute():
        val, (g,) = pb.withgradient(lambda w: logistic_loss(w, Xn, yn), w)
    assert isinstance(g, da.Array) and isinstance(val, da.Array)
    assert g.shape == wn.shape and g.dtype == wn.dtype
    want_val, (want,) = pb.withgradient(lambda w: logistic_loss(w, Xn, yn), wn)
    np.testing.assert_allclose(g.compute(), want, rtol=1e-12)
    np.testing.assert_allclose(val.compute(), want_val, rtol=1e-12)


def test_dask_data_and_dask_parameters_together(data):
    Xn, yn, wn = data
    X, y, w = da.from_array(Xn, chunks=(50, 2)), da.from_array(yn, chunks=40), da.from_array(wn, chunks=3)
    with NoCompute():
        (g,) = pb.gradient(lambda w: logistic_loss(w, X, y) + 0.1 * np.sum(w ** 2), w)
    want = pb.gradient(lambda w: logistic_loss(w, Xn, yn) + 0.1 * np.sum(w ** 2), wn)[0]
    np.testing.assert_allclose(dask.compute(g)[0], want, rtol=1e-12)


def many_operations(X, scale):
    """Elementwise functions, broadcasting with NumPy data, reductions over axes, indexing, reshapes, products."""
    t = np.tanh(X) * scale + np.sin(X[:, ::-1]) ** 2
    s = np.exp(X - np.max(X, axis=1, keepdims=True))
    softmax = s / np.sum(s, axis=1, keepdims=True)
    stacked = np.concatenate([X[:3], X[-2:] * 2.0], axis=0)
    return (np.sum(t) + np.sum(softmax * scale) + np.sum(np.var(X, axis=0)) + np.sum(X.T @ X) * 1e-2
            + np.linalg.norm(X) + np.sum(stacked.reshape(-1) ** 3) + np.mean(np.where(X > 0, X, 0.5 * X))
            + np.sum(np.abs(np.transpose(X)) / (1.0 + np.sqrt(np.abs(X).T))))


def test_many_operations_on_a_dask_parameter(data):
    Xn = data[0][:20]
    scale = np.linspace(0.5, 1.5, 4)
    X = da.from_array(Xn, chunks=(7, 3))
    with NoCompute():
        val, (g, g_scale) = pb.withgradient(many_operations, X, scale)
    assert isinstance(g, da.Array) and g.chunks == X.chunks
    want_val, (want, want_scale) = pb.withgradient(many_operations, Xn, scale)
    np.testing.assert_allclose(g.compute(), want, rtol=1e-10)
    np.testing.assert_allclose(float(val.compute()), want_val, rtol=1e-12)
    np.testing.assert_allclose(g_scale.compute(), want_scale, rtol=1e-10)  # NumPy data, Dask gradient (promotion)
    pb.testing.assert_gradient(many_operations, Xn, scale)  # and the NumPy gradient is right


def test_float32_dask_parameters_keep_their_dtype(data):
    X = da.from_array(data[0].astype(np.float32), chunks=(40, 4))
    with NoCompute():
        (g,) = pb.gradient(lambda X: np.sum(np.tanh(X) * 2.0), X)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g.compute(), 2.0 / np.cosh(data[0].astype(np.float32).astype(np.float64)) ** 2, atol=1e-6)


def test_jvp_with_dask_data_and_parameters_is_lazy_and_right(data):
    Xn, _, wn = data
    tn = np.arange(4.0)
    f = lambda w, X: np.tanh(X @ w)  # noqa: E731
    with NoCompute():
        y, y_dot = pb.jvp(lambda w: f(w, da.from_array(Xn, chunks=(25, 4))), (wn,), (tn,))
        y2, y_dot2 = pb.jvp(lambda w: f(w, Xn), (da.from_array(wn, chunks=2),), (da.from_array(tn, chunks=2),))
    assert all(isinstance(v, da.Array) for v in (y, y_dot, y2, y_dot2))
    by_hand = (1.0 - np.tanh(Xn @ wn) ** 2) * (Xn @ tn)
    np.testing.assert_allclose(y_dot.compute(), by_hand, rtol=1e-12)
    np.testing.assert_allclose(y_dot2.compute(), by_hand, rtol=1e-12)
    np.testing.assert_allclose(y.compute(), np.tanh(Xn @ wn), rtol=1e-12)


def test_jacobian_with_dask_data_and_parameters(data):
    Xn, _, wn = data
    X = da.from_array(Xn[:6], chunks=(3, 4))
    by_hand = (1.0 - np.tanh(Xn[:6] @ wn) ** 2)[:, None] * Xn[:6]
    (J,) = pb.jacobian(lambda w: np.tanh(X @ w), wn)
    np.testing.assert_allclose(np.asarray(J), by_hand, rtol=1e-12)
    (J,) = pb.jacobian(lambda w: np.tanh(Xn[:6] @ w), da.from_array(wn, chunks=2))
    np.testing.assert_allclose(np.asarray(J), by_hand, rtol=1e-12)
    (J,) = pb.jacobian(lambda x: np.sin(x) * 2.0, da.from_array(wn, chunks=2))  # Dask in, Dask out
    assert isinstance(J, da.Array)
    np.testing.assert_allclose(J.compute(), np.diag(2.0 * np.cos(wn)), rtol=1e-12)


def test_check_gradient_with_dask_data_and_parameters(data):
    Xn, yn, wn = data
    X, y = da.from_array(Xn, chunks=(30, 4)), da.from_array(yn, chunks=30)
    assert pb.check_gradient(lambda w: logistic_loss(w, X, y), wn)
    assert pb.check_gradient(lambda w: logistic_loss(w, Xn, yn), da.from_array(wn, chunks=2))


def test_a_gradient_of_a_dask_array_in_a_model():
    rng = np.random.default_rng(1)
    model = {"W": da.from_array(rng.normal(size=(3, 2)), chunks=(2, 2)), "b": np.zeros(2), "name": "m"}
    x = rng.normal(size=(5, 3))
    with NoCompute():
        (g,) = pb.gradient(lambda m: np.sum(np.tanh(x @ m["W"] + m["b"]) ** 2), model)
    assert isinstance(g["W"], da.Array) and g["name"] is None
    plain = {"W": model["W"].compute(), "b": np.zeros(2), "name": "m"}
    (want,) = pb.gradient(lambda m: np.sum(np.tanh(x @ m["W"] + m["b"]) ** 2), plain)
    np.testing.assert_allclose(g["W"].compute(), want["W"], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g["b"]), want["b"], rtol=1e-12)


def test_integer_array_indices_of_a_dask_parameter_repeated_or_not():
    Xn = np.arange(12.0).reshape(6, 2)
    X = da.from_array(Xn, chunks=(3, 2))
    for f in (lambda X: np.sum(X[[0, 2, 0]] ** 2), lambda X: np.sum(X[[0, 2, 0], 1] ** 2),
              lambda X: np.sum(X[np.array([5, -1, 1])] * np.array([[1.0], [2.0], [3.0]]))):
        with NoCompute():
            (g,) = pb.gradient(f, X)
        np.testing.assert_allclose(g.compute(), pb.gradient(f, Xn)[0], rtol=1e-12)


def test_a_boolean_mask_of_two_axes_of_a_dask_parameter_is_refused_naming_the_fix():
    X = da.from_array(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
    with pytest.raises(TypeError, match=r"x\[index\] for a dask\.array\.core\.Array x needs np\.add\.at.*np\.where"):
        pb.gradient(lambda X: np.sum(X[X > 2] ** 2), X)


# --- bad input ------------------------------------------------------------------------------------
def test_a_dask_array_whose_shape_does_not_line_up_names_the_arrays():
    X = da.ones((10, 3), chunks=(5, 3))
    with pytest.raises(ValueError, match=r"numpy\.(linalg\.)?matmul failed on a dask\.array\.core\.Array of shape \(10, 3\) with "
                                         r"chunks \(\(5, 5\), \(3,\)\) and a numpy\.ndarray of shape \(4,\) \(being differentiated\)"):
        pb.gradient(lambda w: np.sum(X @ w), np.ones(4))
    with pytest.raises(ValueError, match=r"numpy\.multiply failed on a dask\.array\.core\.Array of shape \(10, 3\).*"
                                         r"numpy\.ndarray of shape \(4,\).*could not be broadcast"):
        pb.gradient(lambda w: np.sum(X * w), np.ones(4))


def test_unknown_chunk_sizes_are_named_too():
    X = da.from_array(np.arange(10.0), chunks=5)
    kept = X[X > 3]  # chunks unknown until computed
    with pytest.raises(ValueError, match=r"dask\.array\.core\.Array of shape \(nan,\)"):
        pb.gradient(lambda w: np.sum(kept * w), np.ones(6))


def test_import_pullback_imports_no_dask():
    code = "import sys, pullback; assert not any(m == 'dask' or m.startswith('dask.') for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- memory: a gradient over data larger than the budget ------------------------------------------
MEMORY_SCRIPT = textwrap.dedent("""
    import dask, dask.array as da, numpy as np, pullback as pb, sys, time

    n, d, rows = 2_500_000, 100, 62_500                  # 2 GB of float64, chunks of 50 MB
    X = da.random.default_rng(7).random((n, d), chunks=(rows, d)) - 0.5
    y = np.sign(X[:, 0] + 0.01)
    w = np.linspace(-1.0, 1.0, d)
    start = time.perf_counter()
    (g,) = pb.gradient(lambda w: np.mean(np.logaddexp(0.0, -y * (X @ w))), w)
    with dask.config.set(scheduler="threads", num_workers=2):
        g = g.compute()
    took = time.perf_counter() - start
    peak = [int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")][0] * 1024
    expected = np.zeros(d)                               # the same gradient, chunk by chunk with NumPy
    for block in X.blocks:
        Xb = block.compute(scheduler="synchronous")
        yb = np.sign(Xb[:, 0] + 0.01)
        expected += Xb.T @ (-yb / (1.0 + np.exp(yb * (Xb @ w))))
    expected /= n
    print(took, peak, float(np.max(np.abs(g - expected) / np.abs(expected))))
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads peak memory from /proc (Linux)")
def test_the_gradient_over_two_gigabytes_stays_within_a_few_chunks_of_memory():
    out = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    took, peak, error = (float(v) for v in out.stdout.split())
    assert error < 1e-10
    assert peak < 1.0e9, f"peak resident memory {peak / 1e6:.0f} MB for 2 GB of data in 50 MB chunks"
