"""Probes of `pb.distributed.step` against the single-machine step on the concatenated batch:
shard layouts, model kinds, optimisers and dtypes, and failures that must leave the model alone."""

import collections
import copy
import dataclasses
import functools
import sys
import threading

import numpy as np
import pytest

import pullback as pb

distributed = pytest.importorskip("dask.distributed")
da = pytest.importorskip("dask.array")
cloudpickle = pytest.importorskip("cloudpickle")
from pullback.distributed import ShardError  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

N = 20


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0")
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def batch(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, 3)).astype(dtype), rng.standard_normal((N, 2)).astype(dtype)


def split(x, y, sizes):
    edges = np.cumsum((0, *sizes))
    return [(x[a:b], y[a:b]) for a, b in zip(edges[:-1], edges[1:])]


def mlp(dtype=np.float64):
    rng = np.random.default_rng(1)
    return pb.nn.Chain(pb.nn.Dense(3, 5, pb.nn.tanh, dtype=dtype, rng=rng), pb.nn.Dense(5, 2, dtype=dtype, rng=rng))


def mse(m, x, y):
    return pb.nn.mse(m(x), y)


def local_step(loss_fn, model, state, x, y):
    """The single-machine step: gradient of the whole batch, then one update."""
    value, (g,) = pb.withgradient(lambda m: loss_fn(m, x, y), model)
    state, model = pb.optim.update(state, model, g)
    return model, state, value


def assert_same(got, want, rtol):
    """Every array of `got` equals the one of `want` to `rtol`, with the same dtype."""
    got, want = pb.tree.leaves(got), pb.tree.leaves(want)
    assert len(got) == len(want)
    arrays = [(a, b) for a, b in zip(got, want) if isinstance(b, (np.ndarray, np.generic))]
    assert arrays
    for a, b in arrays:
        assert np.asarray(a).dtype == np.asarray(b).dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * 1e-3)


def snapshot(model, state):
    """A checker that `model` and `state` still hold what they hold now."""
    saved = copy.deepcopy((model, state))

    def check():
        for a, b in zip(pb.tree.leaves((model, state)), pb.tree.leaves(saved)):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b)
    return check


@pytest.mark.parametrize("sizes", [(N,), (7, 8, 5), (1, 19), (0, 10, 0, 10), (1,) * N],
                         ids=["one", "uneven", "single-sample", "empty", "all-single"])
@pytest.mark.parametrize("rule", [pb.optim.Momentum(0.1, 0.9), pb.optim.Adam(0.01), pb.optim.AdamW(0.01, weight_decay=0.1),
                                  pb.optim.OptimiserChain(pb.optim.WeightDecay(0.1), pb.optim.Descent(0.1))],
                         ids=["momentum", "adam", "adamw", "decay-chain"])
def test_three_steps_equal_three_local_steps(client, sizes, rule):
    x, y = batch()
    model = mlp()
    state = pb.optim.setup(rule, model)
    lm, ls, dm, ds = model, state, model, state
    for _ in range(3):
        lm, ls, lv = local_step(mse, lm, ls, x, y)
        dm, ds, dv = pb.distributed.step(client, mse, dm, ds, split(x, y, sizes))
    assert_same((dm, ds), (lm, ls), 1e-9)
    assert dv == pytest.approx(float(lv), rel=1e-9)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-5), (np.float16, 1e-2)])
def test_low_precision_parameters_keep_their_dtype(client, dtype, rtol):
    x, y = batch(dtype)
    model = mlp(dtype)
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    dm, ds, loss = pb.distributed.step(client, mse, model, state, split(x, y, (7, 8, 5)))
    lm, ls, lv = local_step(mse, model, state, x, y)
    assert_same((dm, ds), (lm, ls), rtol)
    assert loss == pytest.approx(float(lv), rel=rtol)


@dataclasses.dataclass
class Affine:
    w: np.ndarray
    b: np.ndarray
    stats: np.ndarray

    def trainable(self):
        return ("w", "b")


Pair = collections.namedtuple("Pair", "w b")


class Plain:
    def __init__(self, w, b):
        self.w, self.b = w, b


def field(m, name):
    return m[name] if isinstance(m, dict) else getattr(m, name)


def affine_loss(m, x, y):
    if isinstance(m, Affine):
        m.stats[...] = 0.5 * m.stats + 0.5 * x.mean(axis=0)
    return pb.nn.mse(x @ field(m, "w") + field(m, "b"), y)


def affine_models():
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((3, 2)), rng.standard_normal(2)
    return [{"w": w.copy(), "b": b.copy()}, Affine(w.copy(), b.copy(), np.zeros(3)), Pair(w.copy(), b.copy()),
            Plain(w.copy(), b.copy())]


@pytest.mark.parametrize("index", range(4), ids=["dict", "dataclass", "namedtuple", "plain"])
def test_models_of_every_kind_train_as_locally(client, index):
    x, y = batch()
    model, local_model = affine_models()[index], affine_models()[index]
    state = pb.optim.setup(pb.optim.Adam(0.05), model)
    local_state = pb.optim.setup(pb.optim.Adam(0.05), local_model)
    for _ in range(2):
        model, state, _ = pb.distributed.step(client, affine_loss, model, state, split(x, y, (7, 8, 5)))
        local_model, local_state, _ = local_step(affine_loss, local_model, local_state, x, y)
    assert_same((model, state), (local_model, local_state), 1e-9)


def test_frozen_parameters_and_tied_weights(client):
    x, y = batch()
    shared = np.random.default_rng(3).standard_normal((3, 3))
    model = {"a": shared, "b": shared, "out": np.ones((3, 2)), "frozen": np.full(2, 0.5)}
    state = pb.optim.setup(pb.optim.Adam(0.05), model)
    pb.optim.freeze(state["frozen"])

    def loss(m, x, y):
        return pb.nn.mse(x @ m["a"] @ m["b"] @ m["out"] + m["frozen"], y)

    dm, ds, _ = pb.distributed.step(client, loss, model, state, split(x, y, (7, 8, 5)))
    lm, ls, _ = local_step(loss, model, state, x, y)
    assert_same((dm, ds), (lm, ls), 1e-9)
    assert dm["a"] is dm["b"] and lm["a"] is lm["b"]
    np.testing.assert_array_equal(dm["frozen"], np.full(2, 0.5))


def test_batchnorm_running_mean_is_the_whole_batchs(client):
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((12, 5, 5, 2)).astype(np.float32), rng.integers(0, 3, 12)
    model = pb.nn.Chain(pb.nn.Conv(2, 4, 3, rng=rng), pb.nn.BatchNorm(4, training=True), pb.nn.Flatten(),
                        pb.nn.Dense(36, 3, rng=rng))
    local_model = copy.deepcopy(model)
    state = pb.optim.setup(pb.optim.Adam(0.01), model)

    def loss(m, x, y):
        return pb.nn.logitcrossentropy(m(x), y)

    new, _, _ = pb.distributed.step(client, loss, model, state, split(x, y, (4, 3, 5)))
    local_step(loss, local_model, state, x, y)
    assert new.layers[1].running_mean.dtype == np.float32
    np.testing.assert_allclose(new.layers[1].running_mean, local_model.layers[1].running_mean, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(model.layers[1].running_mean, local_model.layers[1].running_mean, rtol=1e-5, atol=1e-7)


def test_dask_blocks_and_futures_give_the_local_step(client):
    x, y = batch()
    model = mlp()
    state = pb.optim.setup(pb.optim.Adam(0.05), model)
    want = local_step(mse, model, state, x, y)
    blocks = (da.from_array(x, chunks=((7, 0, 8, 5), 3)), da.from_array(y, chunks=((7, 0, 8, 5), 2)))
    futures = client.scatter(split(x, y, (1, 14, 5)), hash=False)
    for shards in (blocks, futures):
        got = pb.distributed.step(client, mse, model, state, shards)
        assert_same(got[:2], want[:2], 1e-9)
        assert got[2] == pytest.approx(float(want[2]), rel=1e-9)


def nan_on_eight(m, x, y):
    return mse(m, x, y) * (np.nan if len(x) == 8 else 1.0)


def test_nan_loss_comes_back_as_nan_as_locally(client):
    x, y = batch()
    model = mlp()
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    new, _, loss = pb.distributed.step(client, nan_on_eight, model, state, split(x, y, (7, 8, 5)))
    assert np.isnan(loss) and np.isnan(new.layers[0].weight).all()
    assert np.isfinite(model.layers[0].weight).all()


def raise_on_eight(m, x, y):
    if len(x) == 8:
        raise ArithmeticError("bad sample")
    return mse(m, x, y)


def test_a_raising_shard_is_named_and_nothing_changes(client):
    x, y = batch()
    model = pb.nn.Chain(pb.nn.BatchNorm(3, dtype=np.float64, training=True), mlp())
    state = pb.optim.setup(pb.optim.Adam(0.05), model)
    check = snapshot(model, state)
    with pytest.raises(ShardError, match=r"loss_fn raised on shard 1 \(8 samples\): ArithmeticError: bad sample"):
        pb.distributed.step(client, raise_on_eight, model, state, split(x, y, (7, 8, 5)), retries=0)
    check()


def count_samples(m, x, y):
    return mse(m, x, y), len(x)


def test_aux_has_one_entry_per_shard_with_none_for_empty_ones(client):
    x, y = batch()
    model = mlp()
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    _, _, (loss, aux) = pb.distributed.step(client, count_samples, model, state, split(x, y, (0, 7, 0, 13)),
                                            has_aux=True)
    assert aux == [None, 7, None, 13]
    assert loss == pytest.approx(float(mse(model, x, y)), rel=1e-9)


def test_a_read_only_state_array_is_refused_before_anything_is_written(client):
    x, y = batch()
    model = pb.nn.Chain(pb.nn.BatchNorm(3, dtype=np.float64, training=True),
                        pb.nn.BatchNorm(3, dtype=np.float64, training=True), mlp())
    model.layers[1].running_var.flags.writeable = False
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    check = snapshot(model, state)
    with pytest.raises(ValueError, match=r"model\.layers\[1\]\.running_var in place, but that array is read-only"):
        pb.distributed.step(client, mse, model, state, split(x, y, (10, 10)))
    check()
    np.testing.assert_array_equal(model.layers[0].running_mean, np.zeros(3))


class Noisy:
    def __init__(self, w, rng):
        self.w, self.rng = w, rng

    def trainable(self):
        return ("w",)


def noisy_loss(m, x, y):
    return pb.nn.mse(x @ m.w + 0.01 * m.rng.standard_normal(), y)


RNG = np.random.default_rng(5)


def global_noise_loss(m, x, y):
    return pb.nn.mse(x @ m.w + 0.01 * RNG.standard_normal(), y)


def test_generators_that_cannot_be_split_are_refused(client):
    x, y = batch()
    w = np.ones((3, 2))
    model = Noisy(w, np.random.RandomState(0))
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    check = snapshot(model, state)
    with pytest.raises(ShardError, match=r"drew from the RandomState at model\.rng.*default_rng"):
        pb.distributed.step(client, noisy_loss, model, state, split(x, y, (7, 8, 5)), retries=0)
    check()
    closed = np.random.default_rng(6)
    plain = Noisy(w, None)
    shards = split(x, y, (7, 8, 5))
    with pytest.raises(ShardError, match=r"drew from the Generator that loss_fn holds as closed"):
        pb.distributed.step(client, lambda m, x, y: pb.nn.mse(x @ m.w + closed.random(), y), plain, state, shards,
                            retries=0)
    with pytest.raises(ShardError, match=r"holds as RNG"):
        pb.distributed.step(client, global_noise_loss, plain, state, shards, retries=0)
    with pytest.raises(ShardError, match=r"holds as loss_fn.keywords\['noise'\]"):
        pb.distributed.step(client, functools.partial(lambda m, x, y, noise: pb.nn.mse(x @ m.w + noise.random(), y),
                                                      noise=np.random.default_rng(7)), plain, state, shards, retries=0)
    model = Noisy(w, np.random.default_rng(8))  # a Generator in the model: each shard gets its own stream
    new, _, _ = pb.distributed.step(client, noisy_loss, model, state, shards)
    assert np.isfinite(new.w).all()


def test_a_loss_that_cannot_pickle_is_named(client):
    x, y = batch()
    model = mlp()
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    lock = threading.Lock()

    def locked(m, x, y):
        with lock:
            return mse(m, x, y)

    with pytest.raises(TypeError, match=r"task of shard 0 could not be sent.*cannot pickle.*loss_fn travels"):
        pb.distributed.step(client, locked, model, state, split(x, y, (7, 8, 5)))


def test_a_model_that_cannot_be_copied_is_named(client):
    x, y = batch()
    model = {"w": np.ones((3, 2)), "lock": threading.Lock()}
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    with pytest.raises(ShardError, match=r"the model could not be copied on a worker: TypeError: cannot pickle"):
        pb.distributed.step(client, lambda m, x, y: pb.nn.mse(x @ m["w"], y), model, state,
                            split(x, y, (7, 8, 5)), retries=0)


def load(index):
    if index == 1:
        raise FileNotFoundError("shard-1.npz")
    return batch(seed=index)


def test_a_shard_future_that_failed_is_named(client):
    model = mlp()
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    shards = [client.submit(load, i, pure=False) for i in range(3)]
    with pytest.raises(ShardError, match=r"shard 1: its data could not be read.*FileNotFoundError: shard-1.npz"):
        pb.distributed.step(client, mse, model, state, shards, retries=0)


def test_processes_pickle_the_model_and_see_closed_over_generators():
    x, y = batch()
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        model = {"w": np.ones((3, 2)), "lock": threading.Lock()}
        state = pb.optim.setup(pb.optim.Descent(0.1), model)
        with pytest.raises(RuntimeError, match=r"model could not be sent to the workers.*must pickle"):
            pb.distributed.step(client, lambda m, x, y: pb.nn.mse(x @ m["w"], y), model, state, split(x, y, (7, 13)))
        plain = Noisy(np.ones((3, 2)), None)
        state = pb.optim.setup(pb.optim.Descent(0.1), plain)
        with pytest.raises(ShardError, match=r"holds as RNG"):
            pb.distributed.step(client, global_noise_loss, plain, state, split(x, y, (7, 13)), retries=0)
        new, _, _ = pb.distributed.step(client, mse, mlp(), pb.optim.setup(pb.optim.Adam(0.05), mlp()),
                                        split(x, y, (7, 13)))
        want = local_step(mse, mlp(), pb.optim.setup(pb.optim.Adam(0.05), mlp()), x, y)[0]
        assert_same(new, want, 1e-9)


def test_a_bad_retries_is_refused(client):
    x, y = batch()
    model = mlp()
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    with pytest.raises(ValueError, match="retries must be a whole number, 0 or more; got -1"):
        pb.distributed.step(client, mse, model, state, split(x, y, (7, 13)), retries=-1)


def test_batchnorm_on_a_one_sample_shard_names_the_shard(client):
    x, y = batch()
    model = pb.nn.Chain(pb.nn.BatchNorm(3, dtype=np.float64, training=True), mlp())
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    check = snapshot(model, state)
    with pytest.raises(ShardError, match=r"shard 1 \(1 samples\): ValueError: BatchNorm\(3\) in training mode"):
        pb.distributed.step(client, mse, model, state, split(x, y, (19, 1)), retries=0)
    check()


def python_noise_loss(m, x, y):
    return pb.nn.mse(x @ m.w + 0.01 * m.rng.random(), y)


def test_a_python_random_in_the_model_is_refused(client):
    import random

    x, y = batch()
    model = Noisy(np.ones((3, 2)), random.Random(0))
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    with pytest.raises(ShardError, match=r"drew from the Random at model\.rng"):
        pb.distributed.step(client, python_noise_loss, model, state, split(x, y, (7, 8, 5)), retries=0)
