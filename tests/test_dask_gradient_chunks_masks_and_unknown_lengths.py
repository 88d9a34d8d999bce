"""Dask arguments: the gradient comes back in the argument's chunks; NumPy boolean masks of one axis, integer
arrays after integers, and concatenations of arrays of unknown length (after x[mask]) are differentiated lazily.

Each gradient is compared with the same function differentiated on NumPy arrays (checked against central
differences), and is built without computing anything (a Dask callback refuses any compute).
"""

import warnings

import numpy as np
import pytest

import pullback as pb

da = pytest.importorskip("dask.array")
from dask_checks import NoCompute  # noqa: E402

rng = np.random.default_rng(11)
MATRIX = rng.normal(size=(6, 5))
CUBE = rng.normal(size=(3, 4, 5))
VECTOR = rng.normal(size=7)
W = rng.normal(size=(5, 3))


def _numpy_gradient(f, x):
    (want,) = pb.gradient(f, x)
    np.testing.assert_allclose(want, pb.testing.numerical_gradient(f, x)[0], rtol=1e-6, atol=1e-8)
    return want


def _lazy_dask_gradient(f, x):
    with NoCompute():
        (g,) = pb.gradient(f, x)
    assert isinstance(g, da.Array)
    return g


# constructs whose rules leave the gradient in other chunks than the argument's: products, broadcasts
# of reductions, gathers, reshapes, transposes, sorts
CHUNK_CASES = [
    ("sum with keepdims", lambda x: np.sum(np.sum(x, axis=1, keepdims=True) ** 2), MATRIX),
    ("mean along axis 0", lambda x: np.sum(np.mean(x, axis=0) ** 2), MATRIX),
    ("matmul", lambda x: np.sum((x @ W) ** 2), MATRIX),
    ("einsum", lambda x: np.sum(np.einsum("ij,jk->ik", x, W) ** 2), MATRIX),
    ("tensordot", lambda x: np.sum(np.tensordot(CUBE, x, axes=([2], [1])) ** 2), MATRIX),
    ("a strided slice", lambda x: np.sum(x[1::2, ::-2] ** 2), MATRIX),
    ("an integer", lambda x: np.sum(x[2] ** 2), MATRIX),
    ("an integer array", lambda x: np.sum(x[np.array([3, 0, 3])] ** 2), MATRIX),
    ("x.T", lambda x: np.sum(x.T * np.arange(30.0).reshape(5, 6)), MATRIX),
    ("transpose of a cube", lambda x: np.sum(np.transpose(x, (2, 0, 1)) * np.arange(60.0).reshape(5, 3, 4)), CUBE),
    ("ravel", lambda x: np.sum(x.ravel() ** 2 * np.arange(30.0)), MATRIX),
    ("roll", lambda x: np.sum(np.roll(x, 3) * MATRIX), MATRIX),
    ("sort", lambda x: np.sum(np.sort(x) * np.arange(7.0)), VECTOR),
    ("percentile", lambda x: np.percentile(x, 37.0) ** 2, VECTOR),
    ("diff", lambda x: np.sum(np.diff(x, n=2, axis=0) ** 2), MATRIX),
    ("prod of a row", lambda x: np.prod(x[0]), MATRIX),
]


@pytest.mark.parametrize("name, f, x", CHUNK_CASES, ids=[c[0] for c in CHUNK_CASES])
def test_the_gradient_of_a_dask_argument_comes_in_the_argument_s_chunks(name, f, x):
    _check_lazy_gradient_in_chunks(f, x)


def _check_lazy_gradient_in_chunks(f, x):
    want = _numpy_gradient(f, x)
    chunked = da.from_array(x, chunks=2)
    g = _lazy_dask_gradient(f, chunked)
    assert g.chunks == chunked.chunks
    np.testing.assert_allclose(g.compute(), want, rtol=1e-12, atol=1e-14)


def test_a_float32_dask_gradient_in_the_argument_s_chunks_stays_float32():
    x32 = MATRIX.astype(np.float32)
    chunked = da.from_array(x32, chunks=(4, 2))
    f = lambda x: np.sum(np.tanh(x @ W.astype(np.float32)))  # noqa: E731
    g = _lazy_dask_gradient(f, chunked)
    assert g.dtype == np.float32 and g.chunks == chunked.chunks
    by_hand = (1.0 - np.tanh(MATRIX @ W) ** 2) @ W.T
    np.testing.assert_allclose(g.compute(), by_hand, rtol=1e-4, atol=1e-5)


def test_a_dask_gradient_of_an_argument_used_twice_in_other_chunks_is_in_its_chunks():
    f = lambda x: np.sum((x @ W) ** 2) + np.sum(x[::2] ** 3)  # noqa: E731
    chunked = da.from_array(MATRIX, chunks=(3, 2))
    g = _lazy_dask_gradient(f, chunked)
    assert g.chunks == chunked.chunks
    np.testing.assert_allclose(g.compute(), _numpy_gradient(f, MATRIX), rtol=1e-12)


# --- NumPy boolean masks of one axis ----------------------------------------------------------------
ROWS = MATRIX[:, 0] > 0
MASK_CASES = [
    ("a mask of a vector", lambda x: np.sum(x[VECTOR > 0] ** 2), VECTOR),
    ("a mask of the rows", lambda x: np.sum(x[ROWS] ** 3), MATRIX),
    ("a mask of the columns", lambda x: np.sum(x[:, MATRIX[0] > -0.5] ** 2 * 1.5), MATRIX),
    ("a list of booleans", lambda x: np.sum(x[[True, False, True, False, True, True]] ** 2), MATRIX),
    ("a mask after an integer", lambda x: np.sum(x[1, MATRIX[1] > 0] ** 2), MATRIX),
    ("repeated rows after an integer", lambda x: np.sum(x[:, 1, [4, 0, 4]] ** 2 * np.arange(1.0, 4.0)), CUBE),
    ("rows after a negative integer", lambda x: np.sum(x[-1, [3, 0]] ** 3), CUBE),
]


@pytest.mark.parametrize("name, f, x", MASK_CASES, ids=[c[0] for c in MASK_CASES])
def test_a_numpy_mask_of_one_axis_of_a_dask_argument_is_differentiated_lazily(name, f, x):
    _check_lazy_gradient_in_chunks(f, x)


def test_a_mask_of_a_dask_argument_that_dask_cannot_differentiate_is_still_refused_naming_the_fix():
    x = da.from_array(MATRIX, chunks=2)
    with pytest.raises(TypeError, match=r"x\[index\] for a dask\.array\.core\.Array x needs np\.add\.at.*np\.where"):
        pb.gradient(lambda x: np.sum(x[MATRIX > 0] ** 2), x)  # a mask of two axes: a result of unknown length


# --- concatenations of arrays of unknown length ------------------------------------------------------
def _masked(x):
    """Dask keeps the length of x[mask] unknown (NaN chunks) until it computes."""
    return x[x > 0]


def test_concatenating_dask_arrays_of_unknown_length_is_differentiated_lazily():
    values = np.arange(-4.0, 8.0)
    kept = _masked(da.from_array(values, chunks=4))
    kept_numpy = values[values > 0]
    f = lambda v: np.sum(np.concatenate([v, v ** 2, np.ones(2)]) ** 2)  # noqa: E731
    g = _lazy_dask_gradient(f, kept)
    np.testing.assert_allclose(g.compute(), _numpy_gradient(f, kept_numpy), rtol=1e-12)


def test_concatenating_with_axis_none_dask_arrays_of_unknown_length():
    values = np.arange(-4.0, 8.0)
    kept = _masked(da.from_array(values, chunks=5))
    kept_numpy = values[values > 0]
    f = lambda v: np.sum(np.concatenate([v * 3.0, v], axis=None) ** 3)  # noqa: E731
    g = _lazy_dask_gradient(f, kept)
    np.testing.assert_allclose(g.compute(), _numpy_gradient(f, kept_numpy), rtol=1e-12)


def test_concatenating_rows_of_unknown_number_then_a_product():
    X = da.from_array(MATRIX, chunks=(2, 5))
    rows = X[X[:, 0] > 0]  # rows of unknown number, columns known
    f = lambda v: np.sum(np.tanh(np.concatenate([v, v * 2.0]) @ W))  # noqa: E731
    g = _lazy_dask_gradient(f, rows)
    np.testing.assert_allclose(g.compute(), _numpy_gradient(f, MATRIX[ROWS]), rtol=1e-12)


# --- pb.nn layers that pool and normalise take Dask batches lazily ------------------------------------
IMAGES = rng.normal(size=(6, 6, 6, 4))


def test_mean_pooling_of_a_dask_batch_is_lazy_and_is_numpy_s():
    f = lambda x: np.sum(pb.nn.MeanPool(2)(x) ** 2)  # noqa: E731
    batch = da.from_array(IMAGES, chunks=(3, 6, 6, 4))
    with NoCompute():
        value, (g,) = pb.withgradient(f, batch)
    np.testing.assert_allclose(value.compute(), f(IMAGES), rtol=1e-12)
    np.testing.assert_allclose(g.compute(), _numpy_gradient(f, IMAGES), rtol=1e-12)


def test_batch_norm_in_training_mode_on_a_dask_batch_is_numpy_s_without_dask_s_size_warning():
    # the running statistics, NumPy arrays written in place, are computed; np.size of the batch was too
    layer, reference = (pb.nn.BatchNorm(4, training=True, dtype=np.float64) for _ in range(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = layer(da.from_array(IMAGES, chunks=(3, 6, 6, 4)))
    np.testing.assert_allclose(np.asarray(y), reference(IMAGES), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(layer.running_var), reference.running_var, rtol=1e-12)
