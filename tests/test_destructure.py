"""pb.destructure: layout, ties, trainable fields, dtypes, rebuild, and gradients both ways."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import pullback as pb
from _random_models import models
from pullback.testing import assert_gradient


class Dense:
    def __init__(self, weight, bias):
        self.weight, self.bias, self.activation = weight, bias, np.tanh

    def __call__(self, x):
        y = x @ self.weight.T
        return self.activation(y if self.bias is None else y + self.bias)


class Norm:
    def __init__(self, n, dtype=np.float64):
        self.scale, self.shift = np.ones(n, dtype), np.zeros(n, dtype)
        self.running_mean, self.count = np.full(n, 7.0), np.array([3])

    def trainable(self):
        return ("scale", "shift")


def make_model(dtype=np.float64):
    rng = np.random.default_rng(0)
    w1, b1, w2 = (rng.standard_normal(s).astype(dtype) for s in ((3, 2), (3,), (1, 3)))
    return {"layers": [Dense(w1, b1), Dense(w2, None)], "norm": Norm(1, dtype), "note": "text", "rate": 0.5}


def test_flat_is_the_trainable_arrays_in_walk_order():
    model = make_model()
    flat, rebuild = pb.destructure(model)
    d1, d2 = model["layers"]
    expected = np.concatenate([d1.weight.ravel(), d1.bias, d2.weight.ravel(), model["norm"].scale, model["norm"].shift])
    np.testing.assert_array_equal(flat, expected)
    assert flat.dtype == np.float64 and rebuild.length == 3 * 2 + 3 + 3 + 1 + 1
    assert repr(rebuild) == f"Restructure(dict, length={rebuild.length})"


def test_tied_arrays_are_counted_once_and_stay_tied_after_rebuild():
    w, u = np.array([[1.0, 2.0]]), np.array([3.0])
    model = {"enc": w, "dec": w, "other": u, "again": (w, u)}
    flat, rebuild = pb.destructure(model)
    np.testing.assert_array_equal(flat, [1.0, 2.0, 3.0])
    new = rebuild(np.array([10.0, 20.0, 30.0]))
    assert new["enc"] is new["dec"] is new["again"][0] and new["other"] is new["again"][1]
    np.testing.assert_array_equal(new["enc"], [[10.0, 20.0]])
    np.testing.assert_array_equal(model["enc"], [[1.0, 2.0]])  # the original is untouched


def test_rebuild_keeps_structure_and_non_parameter_fields():
    model = make_model()
    flat, rebuild = pb.destructure(model)
    new = rebuild(flat * 2)
    assert type(new) is dict and type(new["layers"]) is list and new["note"] == "text" and new["rate"] == 0.5
    for old_layer, new_layer in zip(model["layers"], new["layers"]):
        assert type(new_layer) is Dense and new_layer.activation is np.tanh
        np.testing.assert_array_equal(new_layer.weight, old_layer.weight * 2)
    assert new["layers"][1].bias is None
    assert new["norm"].running_mean is model["norm"].running_mean and new["norm"].count is model["norm"].count
    np.testing.assert_array_equal(new["norm"].scale, [2.0])


def test_rebuild_copies_so_the_model_does_not_alias_the_vector():
    model = {"w": np.zeros(3)}
    flat, rebuild = pb.destructure(model)
    vector = np.array([1.0, 2.0, 3.0])
    new = rebuild(vector)
    vector[:] = 0.0
    np.testing.assert_array_equal(new["w"], [1.0, 2.0, 3.0])
    flat[:] = 5.0
    np.testing.assert_array_equal(model["w"], 0.0)


def test_rebuild_checks_the_length():
    _, rebuild = pb.destructure(make_model())
    with pytest.raises(ValueError, match=r"length 14.*\(13,\)"):
        rebuild(np.zeros(13))
    with pytest.raises(ValueError, match=r"length 14.*\(2, 7\)"):
        rebuild(np.zeros((2, 7)))


@pytest.mark.parametrize("dtypes, common", [
    ((np.float32, np.float32), np.float32),
    ((np.float32, np.float64), np.float64),
    ((np.float16, np.float32), np.float32),
])
def test_flat_has_the_common_dtype_and_rebuild_restores_each_dtype(dtypes, common):
    model = (np.array([1.5, 2.5], dtype=dtypes[0]), np.array([[0.25]], dtype=dtypes[1]))
    flat, rebuild = pb.destructure(model)
    assert flat.dtype == common
    new = rebuild(flat.astype(np.float64) + 1.0)
    assert [a.dtype for a in new] == list(map(np.dtype, dtypes))
    np.testing.assert_array_equal(new[0], np.array([2.5, 3.5], dtype=dtypes[0]))


def test_a_model_without_parameters():
    flat, rebuild = pb.destructure({"n": np.arange(3), "s": "x"})
    assert flat.shape == (0,) and flat.dtype == np.float64
    assert rebuild(flat)["s"] == "x"


def test_gradient_through_rebuild_matches_finite_differences():
    model = make_model()
    x = np.random.default_rng(1).standard_normal((4, 2))
    flat, rebuild = pb.destructure(model)

    def loss(vector):
        m = rebuild(vector)
        h = m["layers"][1](m["layers"][0](x))
        return np.sum((h * m["norm"].scale + m["norm"].shift) ** 2)

    assert_gradient(loss, flat, rtol=1e-6, atol=1e-8, dense_up_to=None)


def test_gradient_through_rebuild_sums_the_uses_of_a_tied_array():
    w = np.array([1.0, -2.0])
    _, rebuild = pb.destructure({"a": w, "b": w})
    (g,) = pb.gradient(lambda v: np.sum(rebuild(v)["a"] * 3.0) + np.sum(rebuild(v)["b"] ** 2), np.array([1.0, -2.0]))
    np.testing.assert_allclose(g, 3.0 + 2 * w)


def test_gradient_through_rebuild_of_a_float32_model_is_float32():
    model = make_model(np.float32)
    flat, rebuild = pb.destructure(model)
    assert flat.dtype == np.float32
    (g,) = pb.gradient(lambda v: np.sum(rebuild(v)["layers"][0].weight ** 2), flat)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g[:6], 2 * model["layers"][0].weight.ravel(), rtol=1e-6)
    np.testing.assert_array_equal(g[6:], 0.0)


def test_gradient_through_destructure_with_respect_to_the_model():
    model = make_model()
    c = np.random.default_rng(2).standard_normal(pb.destructure(model)[1].length)
    (g,) = pb.gradient(lambda m: np.sum(pb.destructure(m)[0] ** 3 * c), model)
    # d/dp sum(flat**3 * c) = 3 p**2 c, read back in the model's shape
    d1, d2 = model["layers"]
    np.testing.assert_allclose(g["layers"][0].weight, 3 * d1.weight**2 * c[:6].reshape(3, 2))
    np.testing.assert_allclose(g["layers"][0].bias, 3 * d1.bias**2 * c[6:9])
    np.testing.assert_allclose(g["layers"][1].weight, 3 * d2.weight**2 * c[9:12].reshape(1, 3))
    np.testing.assert_allclose(g["norm"].scale, 3 * c[12:13])
    assert g["norm"].running_mean is None and g["layers"][1].bias is None


def test_gradient_through_destructure_counts_a_tied_array_once():
    w = np.array([1.0, 2.0])
    model = {"a": w, "b": w}
    lengths = []

    def f(m):
        flat, _ = pb.destructure(m)
        lengths.append(flat.shape[0])
        return np.sum(flat**2)

    (g,) = pb.gradient(f, model)
    assert lengths == [2]  # inside the gradient, where each place is traced separately, the tie still counts once
    # the whole derivative 2w arrives at one place, so the per-place gradients sum to it
    total = sum(v for v in (g["a"], g["b"]) if v is not None)
    np.testing.assert_allclose(total, 2 * w)


def test_destructure_then_rebuild_inside_a_gradient():
    model = make_model()

    def loss(m):
        flat, rebuild = pb.destructure(m)
        return np.sum(rebuild(flat * 2.0)["layers"][0].weight)

    (g,) = pb.gradient(loss, model)
    np.testing.assert_allclose(g["layers"][0].weight, 2.0)
    bias = g["layers"][0].bias
    np.testing.assert_array_equal(np.zeros(3) if bias is None else bias, 0.0)


@settings(max_examples=40, deadline=None)
@given(models())
def test_rebuild_of_flat_gives_back_every_array_exactly(model):
    flat, rebuild = pb.destructure(model)
    unique = {id(a): a for a in pb.tree.leaves(model) if isinstance(a, np.ndarray) and a.dtype.kind == "f"}
    assert flat.shape == (sum(a.size for a in unique.values()),)
    if unique:
        assert flat.dtype == np.result_type(*unique.values())
    new = rebuild(flat)
    old_leaves, new_leaves = pb.tree.leaves(model), pb.tree.leaves(new)
    assert len(old_leaves) == len(new_leaves)  # the same ties: each distinct array once
    for a, b in zip(old_leaves, new_leaves):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
        assert (b is a) == (a.dtype.kind != "f")  # parameters are new arrays, everything else is kept


def _load_example():
    path = Path(__file__).parent.parent / "examples" / "fit_with_scipy.py"
    spec = importlib.util.spec_from_file_location("fit_with_scipy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scipy_example_converges():
    scipy_optimize = pytest.importorskip("scipy.optimize")
    example = _load_example()
    model, result, initial = example.fit(seed=0)
    assert result.success, result.message
    assert initial > 0.1 and result.fun < 1e-4
    x, y = example.make_data(None)
    np.testing.assert_allclose(np.mean((model(x) - y) ** 2), result.fun, rtol=1e-10)

    # the gradient scipy was given is the true one (central differences of the same loss)
    flat, rebuild = pb.destructure(example.MLP([1, 4, 1], np.random.default_rng(3)))
    loss = lambda v: float(np.mean((rebuild(v)(x) - y) ** 2))
    error = scipy_optimize.check_grad(loss, lambda v: pb.gradient(lambda u: np.mean((rebuild(u)(x) - y) ** 2), v)[0], flat)
    assert error < 1e-6
