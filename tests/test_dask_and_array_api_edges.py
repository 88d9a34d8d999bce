"""Dask, array_api_strict and pb.distributed at their edges: what pullback computes there agrees with what
the same code computes without it, and each gradient with one found independently.

Covered: integer-array indices that are unique but not sorted (x[[2, 0]], take, sort, Embedding, a Hessian);
np.linalg.qr, lstsq, the spectral and nuclear norms and the reduced SVD on Dask (lazily); the NaN-ignoring
reductions and statistics, cumprod's graph, real FFTs on one chunk, boolean-mask writes, insert and
piecewise on Dask; Dask arrays of unknown chunk sizes; pb.distributed.step with Dask parameters and
shards; check_gradient and the optimisers on array_api_strict arrays.

The values to agree with are pullback's gradient of the same function on NumPy arrays, Dask's own value
without pullback, or a central difference in float64.
"""

import warnings

import numpy as np
import pytest

import pullback as pb

da = pytest.importorskip("dask.array")
import dask  # noqa: E402
from dask.callbacks import Callback  # noqa: E402


class _Computes(Callback):
    """Counts the Dask computes started inside `with`."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def _start(self, dsk):
        self.count += 1


def _lazy_gradient(f, x):
    """`pb.gradient(f, x)[0]` and how many Dask computes it started."""
    computes = _Computes()
    with dask.config.set(scheduler="synchronous"), computes, warnings.catch_warnings():  # a local scheduler, whose computes are counted
        warnings.simplefilter("ignore", FutureWarning)
        (g,) = pb.gradient(f, x)
    return g, computes.count


# --- integer-array indices that are unique but not sorted ---------------------------------------
# Dask has no np.add.at: the transpose of x[rows] adds g's rows at `rows`, in the index's order (np.unique's sorted
# order is g's only after repeated rows were summed).

WEIGHTS = np.array([10.0, 1.0])


def test_dask_gradient_of_an_unsorted_integer_index():
    x = np.array([1.0, 2.0, 3.0])
    f = lambda x: np.sum(x[[2, 0]] * WEIGHTS)  # noqa: E731
    (g,) = pb.gradient(f, da.from_array(x, chunks=1))
    np.testing.assert_allclose(np.asarray(g), [1.0, 0.0, 10.0])  # d/dx0 = 1, d/dx2 = 10
    np.testing.assert_allclose(np.asarray(g), pb.gradient(f, x)[0])


def test_dask_gradient_of_an_unsorted_column_index():
    x = np.arange(6.0).reshape(2, 3)
    f = lambda x: np.sum(x[:, [2, 0]] * WEIGHTS)  # noqa: E731
    (g,) = pb.gradient(f, da.from_array(x, chunks=(2, 3)))
    np.testing.assert_allclose(np.asarray(g), [[1.0, 0.0, 10.0], [1.0, 0.0, 10.0]])


def test_dask_gradient_of_np_take_and_np_sort():
    x = np.array([0.3, -1.2, 2.5, 0.7])
    take = lambda x: np.sum(np.take(x, [3, 1]) * WEIGHTS)  # noqa: E731
    (g,) = pb.gradient(take, da.from_array(x, chunks=2))
    np.testing.assert_allclose(np.asarray(g), [0.0, 1.0, 0.0, 10.0])
    ranked = lambda x: np.sum(np.sort(x) * np.arange(4.0))  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # Dask has no np.sort: it computes the order
        (g,) = pb.gradient(ranked, da.from_array(x, chunks=2))
    np.testing.assert_allclose(np.asarray(g), [1.0, 0.0, 3.0, 2.0])  # the rank of each element


def test_dask_gradient_of_take_along_axis_of_argsort_along_an_axis():
    # Dask has no nd fancy indexing: take_along_axis of a 2-D Dask array gathers block by block
    x = np.random.default_rng(4).normal(size=(6, 4))
    f = lambda x: np.sum(np.take_along_axis(x, np.argsort(x, axis=1), axis=1) * np.arange(4.0))  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # Dask has no np.argsort: it computes the order
        (g,) = pb.gradient(f, da.from_array(x, chunks=2))
    assert isinstance(g, da.Array) and g.chunks == ((2, 2, 2), (2, 2))
    np.testing.assert_allclose(g.compute(), pb.gradient(f, x)[0], rtol=1e-12)


def test_dask_gradient_of_a_numpy_parameter_indexed_unsorted_meeting_dask_data():
    w = np.array([1.0, 2.0, 3.0])
    data = da.from_array(WEIGHTS, chunks=1)
    (g,) = pb.gradient(lambda w: np.sum(w[[2, 0]] * data), w)
    np.testing.assert_allclose(np.asarray(g), [1.0, 0.0, 10.0])


def test_dask_hessian_through_an_unsorted_integer_index():
    x = np.array([1.0, 2.0, 3.0])
    f = lambda x: np.sum(x[[2, 0]] ** 2 * WEIGHTS)  # noqa: E731
    h = pb.hessian(f, da.from_array(x, chunks=1))
    np.testing.assert_allclose(np.asarray(h), np.diag([2.0, 0.0, 20.0]))


def test_embedding_with_dask_weights_and_unsorted_ids():
    model = pb.nn.Embedding(5, 2, rng=np.random.default_rng(0))
    dask_model = pb.nn.Embedding(5, 2, rng=np.random.default_rng(0))
    dask_model.weight = da.from_array(dask_model.weight, chunks=2)
    scale = np.arange(6.0).reshape(3, 2)
    f = lambda m: np.sum(m(np.array([4, 1, 0])) * scale)  # noqa: E731
    (g,) = pb.gradient(f, dask_model)
    np.testing.assert_allclose(np.asarray(g.weight), pb.gradient(f, model)[0].weight)


# --- linear algebra ----------------------------------------------------------------------------
def test_dask_qr_is_differentiated_as_dask_computes_it():
    a = np.array([[2.0, 1.0], [0.5, 3.0], [1.0, -1.0], [0.2, 0.4]])
    f = lambda a: np.sum(np.linalg.qr(a)[1] ** 2 * np.array([[1.0, 2.0], [0.0, 3.0]]))  # noqa: E731
    assert np.isclose(float(f(da.from_array(a, chunks=(4, 2))).compute()), f(a))  # Dask computes it
    (g,) = pb.gradient(f, da.from_array(a, chunks=(4, 2)))
    np.testing.assert_allclose(np.asarray(g), pb.gradient(f, a)[0], rtol=1e-10)


def test_dask_lstsq_is_differentiated_as_dask_computes_it():
    a = np.array([[2.0, 1.0], [0.5, 3.0], [1.0, -1.0], [0.2, 0.4]])
    b = np.array([1.0, 2.0, 0.5, -1.0])
    f = lambda a: np.sum(np.linalg.lstsq(a, b)[0] ** 2)  # noqa: E731
    assert np.isclose(float(f(da.from_array(a, chunks=(4, 2))).compute()), f(a))
    (g,) = pb.gradient(f, da.from_array(a, chunks=(4, 2)))
    np.testing.assert_allclose(np.asarray(g), pb.gradient(f, a)[0], rtol=1e-8)


@pytest.mark.parametrize("order", [2, "nuc", -2])
def test_dask_spectral_and_nuclear_norms(order):
    a = np.array([[2.0, 1.0, 0.0], [0.5, 3.0, 1.0], [1.0, -1.0, 2.0], [0.2, 0.4, 0.1]])
    f = lambda a: np.linalg.norm(a, order)  # noqa: E731
    assert np.isclose(float(f(da.from_array(a, chunks=(4, 3))).compute()), f(a))  # Dask computes it
    (g,) = pb.gradient(f, da.from_array(a, chunks=(4, 3)))
    np.testing.assert_allclose(np.asarray(g), pb.gradient(f, a)[0], rtol=1e-8)


def test_dask_reduced_svd_gradient_stays_lazy():
    a = np.array([[2.0, 1.0, 0.0], [0.5, 3.0, 1.0], [1.0, -1.0, 2.0], [0.2, 0.4, 0.1]])
    f = lambda a: np.sum(np.linalg.svd(a, full_matrices=False)[0][:, 0] ** 2 * np.arange(4.0))  # noqa: E731
    g, computes = _lazy_gradient(f, da.from_array(a, chunks=(4, 3)))
    assert computes == 0
    np.testing.assert_allclose(np.asarray(g), pb.gradient(f, a)[0], rtol=1e-8)


# --- statistics and reductions -----------------------------------------------------------------
V = np.array([0.3, -1.2, 2.5, 0.7, -0.4, 1.1])


@pytest.mark.parametrize("name, f", [
    ("nanmean", lambda x: np.nanmean(x ** 2)),
    ("nanmax", lambda x: np.nanmax(x) ** 2),
    ("nanmin", lambda x: np.nanmin(x) ** 2),
])
def test_dask_nan_reductions_stay_lazy(name, f):
    g, computes = _lazy_gradient(f, da.from_array(V, chunks=2))
    assert computes == 0
    np.testing.assert_allclose(np.asarray(g), pb.gradient(f, V)[0], rtol=1e-12)


@pytest.mark.parametrize("name, f", [
    ("nanvar", lambda x: np.nanvar(x)),
    ("nanstd ddof=1", lambda x: np.nanstd(x, ddof=1)),
    ("median axis=0", lambda x: np.median(x, axis=0)),
    ("nanmedian axis=0", lambda x: np.nanmedian(x, axis=0)),
])
def test_dask_statistics_that_dask_computes(name, f):
    assert np.isclose(float(f(da.from_array(V, chunks=2)).compute()), f(V))  # Dask computes it, lazily
    (g,) = pb.gradient(f, da.from_array(V, chunks=2))
    np.testing.assert_allclose(np.asarray(g), pb.gradient(f, V)[0], rtol=1e-10)


def test_dask_data_of_unknown_chunk_sizes_in_a_sum():
    x = da.from_array(np.arange(10.0), chunks=5)
    kept = x[x > 3]  # 4..9, chunk sizes unknown until computed
    assert float(np.sum(kept * 2.0).compute()) == 78.0  # Dask computes it
    (g,) = pb.gradient(lambda w: np.sum(kept * w), 2.0)
    assert float(np.asarray(g.compute() if hasattr(g, "compute") else g)) == 39.0  # sum(4..9)
    (g,) = pb.gradient(lambda k: np.sum(k ** 2), kept)
    np.testing.assert_allclose(np.asarray(g.compute()), 2.0 * np.arange(4.0, 10.0))
    (g,) = pb.gradient(lambda k: np.mean(k ** 2), kept)  # the count of a mean is not known before computing either
    np.testing.assert_allclose(np.asarray(g.compute()), 2.0 * np.arange(4.0, 10.0) / 6.0)


def test_dask_cumprod_gradient_keeps_a_small_graph():
    # The doubling scan of the Dask cumprod gradient shifts by concatenation at every step; unless the chunks are
    # kept, 256 elements in 4 chunks give a gradient of 256 one-element chunks.
    x = np.linspace(0.5, 1.5, 256)
    (g,) = pb.gradient(lambda x: np.sum(np.cumprod(x)), da.from_array(x, chunks=64))
    np.testing.assert_allclose(np.asarray(g), pb.gradient(lambda x: np.sum(np.cumprod(x)), x)[0], rtol=1e-10)
    assert g.npartitions <= 16, f"{g.npartitions} chunks, {len(g.__dask_graph__())} tasks"


# --- pb.distributed -------------------------------------------------------------------------------
class _Line:
    def __init__(self, w):
        self.w = w


def _mse(m, x, y):
    return np.mean((x @ m.w - y) ** 2)


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("dask.distributed")
    cluster = distributed.LocalCluster(n_workers=2, processes=False, threads_per_worker=1, dashboard_address=":0")
    c = distributed.Client(cluster, set_as_default=False)  # local computes stay local (and counted)
    yield c
    c.close()
    cluster.close()


_RNG = np.random.default_rng(0)
_X, _Y = _RNG.normal(size=(10, 3)), _RNG.normal(size=10)
_W0 = np.array([0.1, -0.2, 0.3])


def test_distributed_step_with_a_dask_parameter_weights_the_shards(client):
    # Each shard's gradient is weighted by n_i / N, a Dask one too.
    model = _Line(da.from_array(_W0, chunks=2))
    state = pb.optim.setup(pb.optim.Descent(1.0), model)
    shards = [(_X[:7], _Y[:7]), (_X[7:], _Y[7:])]
    new, _, loss = pb.distributed.step(client, _mse, model, state, shards)
    (g,) = pb.gradient(lambda m: _mse(m, _X, _Y), _Line(_W0))
    assert np.isclose(loss, _mse(_Line(_W0), _X, _Y))
    np.testing.assert_allclose(np.asarray(new.w), _W0 - g.w, rtol=1e-10)


def test_distributed_step_on_dask_arrays_of_unknown_chunk_sizes(client):
    x, y = da.from_array(_X, chunks=(4, 3)), da.from_array(_Y, chunks=4)
    keep = x[:, 0] > -100.0  # every row, but the chunk sizes are unknown
    model = _Line(_W0.copy())
    state = pb.optim.setup(pb.optim.Descent(1.0), model)
    new, _, loss = pb.distributed.step(client, _mse, model, state, (x[keep], y[keep]))
    (g,) = pb.gradient(lambda m: _mse(m, _X, _Y), _Line(_W0))
    np.testing.assert_allclose(new.w, _W0 - g.w, rtol=1e-10)


# --- array_api_strict ---------------------------------------------------------------------------
def test_optimiser_refuses_an_array_api_parameter_rather_than_ignore_its_gradient():
    # pb.optim updates parameters with NumPy calls, which array_api_strict's arrays do not take: setup says so
    # (before, update left the parameter as it was, without a word).
    xps = pytest.importorskip("array_api_strict")
    model = {"w": xps.asarray(np.array([1.0, 2.0]))}
    (g,) = pb.gradient(lambda m: (lambda ns: ns.sum(m["w"] ** 2))(m["w"].__array_namespace__()), model)
    np.testing.assert_allclose(np.asarray(g["w"]), [2.0, 4.0])
    with pytest.raises(TypeError, match="only speaks the array API"):
        pb.optim.setup(pb.optim.Descent(0.5), model)


# --- more Dask constructs that Dask computes without pullback -------------------------------------
X8 = np.array([0.3, -1.2, 2.5, 0.7, -0.4, 1.1, 0.9, -2.0])


@pytest.mark.parametrize("name, f", [
    ("rfft n=10", lambda x: np.sum(np.abs(np.fft.rfft(x, n=10)) * np.arange(6.0))),
    ("ihfft", lambda x: np.sum(np.abs(np.fft.ihfft(x)) * np.arange(5.0))),
])
def test_dask_real_ffts_on_one_chunk(name, f):
    # Dask FFTs need one chunk along the axis: the backward must not pad the cotangent (a new chunk) before its FFT
    x = da.from_array(X8, chunks=8)  # one chunk along the axis, as Dask's FFTs need
    assert np.isclose(float(f(x).compute()), f(X8))  # Dask computes it
    (g,) = pb.gradient(f, x)
    np.testing.assert_allclose(np.asarray(g), pb.gradient(f, X8)[0], rtol=1e-10)


def test_dask_boolean_mask_write_stays_lazy():
    # A boolean mask cannot name an element twice, so its values (a Dask mask's) are not read to check for repeats.
    def f(x):
        y = x * 1.0
        y[y > 0] = 0.0
        return np.sum(y ** 2)

    g, computes = _lazy_gradient(f, da.from_array(X8, chunks=3))
    assert computes == 0
    np.testing.assert_allclose(np.asarray(g), np.where(X8 > 0, 0.0, 2.0 * X8))


def test_dask_insert_of_several_values_refuses_the_object_array_dask_makes():
    # Dask's np.insert reads a list of values as one object, and gives an object-dtype array (its values right): pullback
    # cannot differentiate that, and says so rather than give a None gradient; values given as a Dask array work.
    x = da.from_array(X8, chunks=3)
    assert np.insert(x, [2, 5], [9.0, 8.0], axis=0).dtype == object  # plain Dask
    with pytest.raises(TypeError, match=r"np.insert .*object array.*da.asarray"):
        pb.gradient(lambda x: np.sum(np.insert(x, [2, 5], [9.0, 8.0], axis=0) ** 2), x)
    weights = np.arange(10.0)
    f = lambda x, v: np.sum(np.insert(x, [2, 5], v, axis=0) ** 2 * weights)  # noqa: E731
    (g,) = pb.gradient(lambda x: f(x, da.asarray(np.array([9.0, 8.0]))), x)
    np.testing.assert_allclose(np.asarray(g), pb.gradient(lambda x: f(x, [9.0, 8.0]), X8)[0])


def test_dask_insert_of_one_value():
    f = lambda x: np.sum(np.insert(x, 2, 9.0, axis=0) ** 2)  # noqa: E731
    (g,) = pb.gradient(f, da.from_array(X8, chunks=3))
    np.testing.assert_allclose(np.asarray(g), 2.0 * X8)  # the inserted 9 has no say in x's gradient


def test_dask_piecewise():
    # The functions run on Dask arrays, as Dask's own piecewise runs them on blocks; x is not computed
    f = lambda x: np.sum(np.piecewise(x, [x > 0], [lambda v: v ** 2, lambda v: -v]))  # noqa: E731
    x = da.from_array(X8, chunks=3)
    assert np.isclose(float(f(x).compute()), f(X8))  # Dask computes it
    g, computes = _lazy_gradient(f, x)
    assert computes == 0
    np.testing.assert_allclose(np.asarray(g), np.where(X8 > 0, 2.0 * X8, -1.0))
    # a function with no derivative on the elements its condition leaves out (sqrt at x <= 0) gives none there
    root = lambda x: np.sum(np.piecewise(x, [x > 0], [np.sqrt, lambda v: -v]))  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # sqrt of the left-out negative elements, discarded
        assert np.isclose(float(root(x).compute()), root(X8))
        (g,) = pb.gradient(root, x)
        g = np.asarray(g)
    np.testing.assert_allclose(g, np.where(X8 > 0, 0.5 / np.sqrt(np.abs(X8)), -1.0))


def test_check_gradient_of_an_array_api_strict_argument():
    # check_gradient reads an array API leaf's dtype and builds its directions through NumPy, and calls f on its type
    xps = pytest.importorskip("array_api_strict")
    seen = set()

    def f(x):
        seen.add(type(x).__name__)
        return np.sum(np.sin(x) * x)

    for dtype in (np.float64, np.float32):
        result = pb.check_gradient(f, xps.asarray(np.array([0.5, -1.0, 2.0], dtype)))
        assert bool(result), str(result)
        np.testing.assert_allclose(np.asarray(result.gradient[0]), np.sin([0.5, -1.0, 2.0]) + np.array([0.5, -1.0, 2.0])
                                   * np.cos([0.5, -1.0, 2.0]), rtol=1e-6)
    assert "ndarray" not in seen  # the central differences call f on array_api_strict arrays too
