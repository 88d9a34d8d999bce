"""The array API: traced values give a namespace, so array-API-aware libraries differentiate through their own code.

SciPy reads `SCIPY_ARRAY_API` when it is imported, so its checks run in a subprocess with the
variable set; every gradient there is compared with central differences of SciPy's own function
on plain arrays. array_api_strict arrays work as parameters (the gradient is an array_api_strict
array) and as data.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pullback as pb


def run_with_array_api(code):
    """Run `code` in a fresh interpreter with SCIPY_ARRAY_API=1; it prints one JSON value, returned here."""
    env = dict(os.environ, SCIPY_ARRAY_API="1")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


CENTRAL_DIFFERENCES = """
    import json, warnings
    import numpy as np
    import pullback as pb

    def central_differences(f, x, eps=1e-6):
        g = np.zeros_like(x)
        for i in range(x.size):
            e = np.zeros_like(x)
            e.flat[i] = eps
            g.flat[i] = (f(x + e) - f(x - e)) / (2 * eps)
        return g

    def compare(f, x):
        (g,) = pb.gradient(f, x)
        return {"type": type(g).__name__, "gradient": np.asarray(g).tolist(),
                "differences": central_differences(f, x).tolist()}
"""


def test_scipy_functions_differentiate_through_their_array_api_code():
    pytest.importorskip("scipy")
    results = run_with_array_api(CENTRAL_DIFFERENCES + """
    import scipy.special as sp, scipy.optimize as so
    from scipy._lib._array_api import array_namespace

    x = np.array([0.3, -1.2, 2.0, 0.7])
    m = np.array([[0.3, -1.2], [2.0, 0.7], [-0.4, 0.1]])
    weights = np.arange(1.0, 7.0).reshape(3, 2)
    seen = []
    pb.gradient(lambda x: (seen.append(array_namespace(x).__name__), np.sum(x))[1], x)
    found = {
        "namespace": seen[0],
        "logsumexp": compare(lambda x: sp.logsumexp(x), x),
        "logsumexp_axis": compare(lambda m: np.sum(sp.logsumexp(m, axis=1) * np.array([1.0, 2.0, 3.0])), m),
        "rosen": compare(so.rosen, x),
    }
    import scipy
    if np.lib.NumpyVersion(scipy.__version__) >= "1.16.0":  # softmax's array API code is SciPy 1.16's
        found["softmax"] = compare(lambda m: np.sum(sp.softmax(m, axis=0) * weights), m)
    else:  # SciPy 1.15 converts: pullback's error names the stand-in
        found["softmax refused"] = False
        try:
            pb.gradient(lambda m: np.sum(sp.softmax(m, axis=0) * weights), m)
        except TypeError as error:
            found["softmax refused"] = "pullback.scipy.special.softmax" in str(error)
    print(json.dumps(found))
    """)
    assert results.pop("namespace") == "pullback._namespace"  # SciPy saw pullback's namespace, not NumPy's
    assert results.pop("softmax refused", True)
    for name, found in results.items():
        assert found["type"] == "ndarray", name
        np.testing.assert_allclose(found["gradient"], found["differences"], rtol=1e-6, atol=1e-8, err_msg=name)


def test_without_the_array_api_scipy_converts_and_the_error_names_the_stand_in():
    sp = pytest.importorskip("scipy.special")
    if os.environ.get("SCIPY_ARRAY_API") == "1":
        pytest.skip("this interpreter has SciPy's array API on")
    with pytest.raises(TypeError, match=r"scipy\.special\.logsumexp.*pullback\.scipy\.special\.logsumexp"):
        pb.gradient(sp.logsumexp, np.array([0.0, 1.0]))


def test_scipy_refuses_mixing_numpy_data_with_traced_values_under_the_array_api():
    pytest.importorskip("scipy")
    found = run_with_array_api("""
    import json, numpy as np, pullback as pb, scipy.special as sp
    try:
        pb.gradient(lambda x: sp.logsumexp(x, b=np.array([1.0, 2.0])), np.array([0.0, 1.0]))
        print(json.dumps("no error"))
    except TypeError as error:
        print(json.dumps(str(error)))
    """)
    assert "Multiple namespaces" in found and "pullback._namespace" in found  # an error, never a silent result


def test_scikit_learn_softmax_with_array_api_dispatch():
    pytest.importorskip("sklearn")
    results = run_with_array_api(CENTRAL_DIFFERENCES + """
    import sklearn
    from sklearn.utils.extmath import softmax

    sklearn.set_config(array_api_dispatch=True)
    m = np.array([[0.3, -1.2, 0.5], [2.0, 0.7, -0.1]])
    weights = np.arange(1.0, 7.0).reshape(2, 3)
    print(json.dumps({"softmax": compare(lambda m: np.sum(softmax(m * 1.0) * weights), m)}))
    """)
    found = results["softmax"]
    np.testing.assert_allclose(found["gradient"], found["differences"], rtol=1e-6, atol=1e-8)


# --- the namespace itself ------------------------------------------------------------------------
def test_the_namespace_keeps_traced_values_traced():
    def f(x):
        xp = x.__array_namespace__()
        y = xp.asarray(x, dtype=xp.float64)
        stacked = xp.asarray([y[0], y[1] * 2.0])
        return xp.sum(xp.astype(stacked, xp.float64) ** 2) + xp.sum(xp.concat([x, x]) * 3.0)

    x = np.array([1.0, -2.0])
    assert pb.testing.check_gradient(f, x)
    np.testing.assert_allclose(pb.gradient(f, x)[0], [2.0 * 1.0 + 6.0, 8.0 * -2.0 + 6.0])
    assert pb.jvp(f, (x,), (np.array([1.0, 0.0]),))[1] == pytest.approx(8.0)


def test_the_namespace_of_a_float32_value_converts_dtypes_as_asked():
    def f(x):
        xp = x.__array_namespace__()
        return xp.sum(xp.asarray(x, dtype=xp.float64) ** 2)

    (g,) = pb.gradient(f, np.array([1.5, 2.0], np.float32))
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, [3.0, 4.0])


# --- array_api_strict arrays ------------------------------------------------------------------
xps = pytest.importorskip("array_api_strict")


def loss(w, X):
    ns = w.__array_namespace__()
    return ns.sum(ns.tanh(ns.matmul(X, w)) ** 2) + ns.sum(w * X)


X_NUMPY = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
W_NUMPY = np.array([0.3, -0.2])


def by_hand(w, X):
    """d/dw of sum(tanh(X w)^2) + sum(w * X)."""
    t = np.tanh(X @ w)
    return X.T @ (2.0 * t * (1.0 - t ** 2)) + np.sum(X, axis=0)


@pytest.mark.parametrize("strict_w, strict_x", [(True, False), (False, True), (True, True)])
def test_array_api_strict_arrays_as_parameters_and_as_data(strict_w, strict_x):
    w = xps.asarray(W_NUMPY) if strict_w else W_NUMPY
    X = xps.asarray(X_NUMPY) if strict_x else X_NUMPY
    (g,) = pb.gradient(lambda w: loss(w, X), w)
    if strict_w:  # a leaf's gradient has the leaf's array type
        assert isinstance(g, type(w)) and g.dtype == xps.float64
    np.testing.assert_allclose(np.asarray(g), by_hand(W_NUMPY, X_NUMPY), rtol=1e-12)


def test_an_array_api_strict_matrix_as_a_parameter():
    X = xps.asarray(X_NUMPY)
    (g,) = pb.gradient(lambda X: loss(W_NUMPY, X), X)
    assert isinstance(g, type(X)) and g.shape == X.shape
    t = np.tanh(X_NUMPY @ W_NUMPY)
    np.testing.assert_allclose(np.asarray(g), np.outer(2.0 * t * (1.0 - t ** 2), W_NUMPY) + W_NUMPY, rtol=1e-12)


def test_a_float32_array_api_strict_parameter_keeps_its_dtype():
    w = xps.asarray(W_NUMPY, dtype=xps.float32)
    (g,) = pb.gradient(lambda w: loss(w, X_NUMPY.astype(np.float32)), w)
    assert isinstance(g, type(w)) and g.dtype == xps.float32
