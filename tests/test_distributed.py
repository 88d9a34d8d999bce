"""`pb.distributed.step` on a two-process LocalCluster: the same numbers as training on one machine,
no step lost or applied twice when a worker dies, and clear errors that leave the model untouched."""

import copy
import doctest
import os
import subprocess
import sys

import numpy as np
import pytest

import pullback as pb

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
cloudpickle = pytest.importorskip("cloudpickle")
from pullback.distributed import ShardError  # noqa: E402

# Workers cannot import this test module, so its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SIZES = (7, 8, 5)  # unequal shards, so that the weighting matters


@pytest.fixture(scope="module")
def client():
    import dask

    # One death per task is forgiven (the task re-runs elsewhere); a second is a permanent failure.
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0")
        client = distributed.Client(cluster)
        yield client
        client.close()
        cluster.close()


def make_mlp(seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return pb.nn.Chain(pb.nn.Dense(4, 16, pb.nn.tanh, dtype=dtype, rng=rng), pb.nn.Dense(16, 3, dtype=dtype, rng=rng))


def make_batch(seed=1, n=sum(SIZES)):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 4)), rng.integers(0, 3, n)


def split(x, y, sizes=SIZES):
    edges = np.cumsum((0, *sizes))
    return [(x[a:b], y[a:b]) for a, b in zip(edges[:-1], edges[1:])]


def mean_loss(m, x, y):
    return pb.nn.logitcrossentropy(m(x), y)


def sum_loss(m, x, y):
    return pb.nn.logitcrossentropy(m(x), y, agg="sum")


def reference_cross_entropy(m, x, y):
    """The mean cross-entropy of the concatenated batch, in plain NumPy."""
    h = np.tanh(x @ m.layers[0].weight.T + m.layers[0].bias)
    z = h @ m.layers[1].weight.T + m.layers[1].bias
    z = z - z.max(axis=1, keepdims=True)
    return float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]))


def parameters(model):
    return [np.array(leaf) for leaf in pb.tree.leaves(model, trainable_only=True) if isinstance(leaf, np.ndarray)]


def train_local(loss_fn, model, state, batches):
    for x, y in batches:
        _, (g,) = pb.withgradient(lambda m: loss_fn(m, x, y), model)
        state, model = pb.optim.update(state, model, g)
    return model, state


def train_distributed(client, loss_fn, model, state, batches, sizes=SIZES):
    for x, y in batches:
        model, state, _ = pb.distributed.step(client, loss_fn, model, state, split(x, y, sizes))
    return model, state


def three_batches():
    return [make_batch(seed) for seed in (1, 2, 3)]


@pytest.mark.parametrize("loss_fn, reduction", [(mean_loss, "mean"), (sum_loss, "sum")])
def test_gradient_and_loss_equal_those_of_the_concatenated_batch(client, loss_fn, reduction):
    model, (x, y) = make_mlp(), make_batch()
    state = pb.optim.setup(pb.optim.Descent(1.0), model)  # new = old - gradient
    new, _, loss = pb.distributed.step(client, loss_fn, model, state, split(x, y), reduction=reduction)
    value, (g,) = pb.withgradient(lambda m: loss_fn(m, x, y), model)
    expected_loss = reference_cross_entropy(model, x, y) * (len(y) if reduction == "sum" else 1)
    assert loss == pytest.approx(expected_loss, rel=1e-12) and float(value) == pytest.approx(expected_loss, rel=1e-12)
    for old, moved, local in zip(parameters(model), parameters(new), [g.layers[0].weight, g.layers[0].bias,
                                                                      g.layers[1].weight, g.layers[1].bias]):
        np.testing.assert_allclose(old - moved, local, rtol=1e-9, atol=1e-13)
    assert pb.testing.check_gradient(lambda m: loss_fn(m, x, y), model)  # and the local gradient is right


def test_three_adam_steps_give_the_parameters_of_local_training(client):
    model = make_mlp()
    state = pb.optim.setup(pb.optim.Adam(0.05), model)
    local_model, local_state = train_local(mean_loss, model, state, three_batches())
    dist_model, dist_state = train_distributed(client, mean_loss, model, state, three_batches())
    for a, b in zip(parameters(dist_model), parameters(local_model)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
    assert dist_state.layers[0].weight.state[2] == local_state.layers[0].weight.state[2] == 3  # Adam's step count
    assert not np.array_equal(parameters(dist_model)[0], parameters(model)[0])  # it trained; `model` is untouched
    np.testing.assert_array_equal(parameters(model)[0], parameters(make_mlp())[0])


def test_float32_model_and_every_kind_of_shard(client):
    model, (x, y) = make_mlp(dtype=np.float32), make_batch()
    x = x.astype(np.float32)
    state = pb.optim.setup(pb.optim.Adam(0.05), model)
    reference, _, loss = pb.distributed.step(client, mean_loss, model, state, split(x, y))
    _, (g,) = pb.withgradient(lambda m: mean_loss(m, x, y), model)
    _, local = pb.optim.update(state, model, g)
    for a, b in zip(parameters(reference), parameters(local)):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    whole_futures = client.scatter(split(x, y), hash=False)  # one future per shard, each holding (x, y)
    argument_futures = [tuple(client.scatter(list(shard), hash=False)) for shard in split(x, y)]
    dask_arrays = tuple(client.persist([da.from_array(x, chunks=(SIZES, 4)), da.from_array(y, chunks=(SIZES,))]))
    for shards in (whole_futures, argument_futures, dask_arrays):
        new, _, other_loss = pb.distributed.step(client, mean_loss, model, state, shards)
        assert other_loss == loss
        for a, b in zip(parameters(new), parameters(reference)):
            np.testing.assert_array_equal(a, b)  # the same shards in the same order: the same sums, bit for bit


def loss_and_worker(m, x, y):
    return mean_loss(m, x, y), distributed.get_worker().address


def test_each_shard_held_by_a_worker_is_differentiated_on_that_worker(client):
    model, (x, y) = make_mlp(), make_batch()
    state = pb.optim.setup(pb.optim.Adam(), model)
    workers = sorted(client.scheduler_info()["workers"])
    placed = [w for _ in range(2) for w in workers]  # shard i lives on worker i % 2
    # hash=False: shards with equal contents (the labels) would otherwise share one key, scattered to two
    # workers at once, and a release of one could cancel the other ("lost dependencies")
    shards = [client.scatter(shard, workers=[w], hash=False) for shard, w in zip(split(x, y, (5, 5, 5, 5)), placed)]
    _, _, (_, ran_on) = pb.distributed.step(client, loss_and_worker, model, state, shards, has_aux=True)
    assert ran_on == placed


def kill_once(marker):
    """A mean loss that kills its worker process the first time it runs on an 8-sample shard."""
    def loss_fn(m, x, y):
        if len(y) == 8 and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return mean_loss(m, x, y)
    return loss_fn


def test_a_worker_killed_in_a_step_loses_no_step_and_applies_none_twice(client, tmp_path):
    model = make_mlp()
    state = pb.optim.setup(pb.optim.Adam(0.05), model)
    undisturbed, undisturbed_state = train_distributed(client, mean_loss, model, state, three_batches())
    marker = str(tmp_path / "killed")
    batches = three_batches()
    m, s = train_distributed(client, mean_loss, model, state, batches[:1])
    m, s, _ = pb.distributed.step(client, kill_once(marker), m, s, split(*batches[1]))
    assert os.path.exists(marker)  # a worker did die in step 2
    m, s = train_distributed(client, mean_loss, m, s, batches[2:])
    for a, b in zip(parameters(m), parameters(undisturbed)):
        np.testing.assert_array_equal(a, b)
    assert s.layers[1].bias.state[2] == undisturbed_state.layers[1].bias.state[2] == 3


def test_a_step_whose_model_copies_were_all_lost_runs_again_then_says_so(client, monkeypatch):
    model = make_mlp()
    state = pb.optim.setup(pb.optim.Adam(0.05), model)
    x, y = make_batch()
    want, _, want_loss = pb.distributed.step(client, mean_loss, model, state, split(x, y))
    real, attempts = pb.distributed._gradient_on_workers, []

    def lost_once(*args):
        attempts.append(1)
        if len(attempts) == 1:
            raise pb.distributed._ModelLost("the model: every worker holding a copy of it died during the step")
        return real(*args)

    monkeypatch.setattr(pb.distributed, "_gradient_on_workers", lost_once)
    got, _, loss = pb.distributed.step(client, mean_loss, model, state, split(x, y))
    assert len(attempts) == 2 and loss == want_loss
    for a, b in zip(parameters(got), parameters(want)):
        np.testing.assert_array_equal(a, b)

    def always_lost(*args):
        attempts.append(1)
        raise pb.distributed._ModelLost("the model: every worker holding a copy of it died during the step")

    attempts.clear()
    monkeypatch.setattr(pb.distributed, "_gradient_on_workers", always_lost)
    with pytest.raises(pb.distributed.ShardError, match="every worker holding a copy"):
        pb.distributed.step(client, mean_loss, model, state, split(x, y), retries=1)
    assert len(attempts) == 2


def test_checkpoint_saved_during_distributed_training_is_the_local_one(client, tmp_path):
    model = make_mlp()
    state = pb.optim.setup(pb.optim.Adam(0.05), model)
    local_model, local_state = train_local(mean_loss, model, state, three_batches())
    pb.save(tmp_path / "local.ckpt", local_model, local_state)
    # One shard: the worker computes exactly the local gradient, so the files are the same bytes.
    dist_model, dist_state = train_distributed(client, mean_loss, model, state, three_batches(), sizes=(sum(SIZES),))
    pb.save(tmp_path / "one.ckpt", dist_model, dist_state)
    assert (tmp_path / "one.ckpt").read_bytes() == (tmp_path / "local.ckpt").read_bytes()
    dist_model, dist_state = train_distributed(client, mean_loss, model, state, three_batches())
    pb.save(tmp_path / "three.ckpt", dist_model, dist_state)
    loaded, loaded_state = pb.load(tmp_path / "three.ckpt", like=make_mlp(5))
    for a, b in zip(parameters(loaded), parameters(local_model)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
    for a, b in zip(pb.tree.leaves(loaded_state.layers[0].weight.state), pb.tree.leaves(local_state.layers[0].weight.state)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-15)


def test_batchnorm_statistics_and_generators_come_back_as_from_the_whole_batch(client):
    rng = np.random.default_rng(0)
    model = pb.nn.Chain(pb.nn.BatchNorm(4, dtype=np.float64, training=True), pb.nn.Dense(4, 3, dtype=np.float64, rng=rng))
    model.rng = np.random.default_rng(3)
    running_mean = model.layers[0].running_mean
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    x, y = make_batch()

    def loss_and_draws(m, x, y):
        return mean_loss(m, x, y), m.rng.random(2)

    new, _, (loss, draws) = pb.distributed.step(client, loss_and_draws, model, state, split(x, y), has_aux=True)
    shards = split(x, y)
    weights = np.array(SIZES) / sum(SIZES)
    means = np.array([s[0].mean(axis=0) for s in shards])
    variances = np.array([s[0].var(axis=0, ddof=1) for s in shards])
    assert new.layers[0].running_mean is running_mean  # updated in place, as a local step does
    np.testing.assert_allclose(running_mean, 0.1 * weights @ means, rtol=1e-12)
    np.testing.assert_allclose(model.layers[0].running_var, 0.9 + 0.1 * weights @ variances, rtol=1e-12)
    np.testing.assert_allclose(running_mean, 0.1 * x.mean(axis=0), rtol=1e-12)  # the mean of the whole batch
    # Shard k draws from the generator jumped k times; the model's generator is left jumped once per shard,
    # past every shard's stream.
    expected = [np.random.Generator(np.random.default_rng(3).bit_generator.jumped(k)).random(2) for k in range(3)]
    np.testing.assert_array_equal(np.array(draws), np.array(expected))
    after = np.random.default_rng(3).bit_generator.jumped(3)
    assert model.rng.bit_generator.state == after.state and new.rng is model.rng
    assert np.isfinite(loss)


def raise_once(marker):
    """A mean loss that raises the first time it runs on an 8-sample shard (a transient failure)."""
    def loss_fn(m, x, y):
        if len(y) == 8 and not os.path.exists(marker):
            open(marker, "w").close()
            raise OSError("the shard's file was not there yet")
        return mean_loss(m, x, y)
    return loss_fn


def test_a_task_that_raises_once_is_retried_and_the_step_is_the_undisturbed_one(client, tmp_path):
    model, (x, y) = make_mlp(), make_batch()
    state = pb.optim.setup(pb.optim.Adam(0.05), model)
    expected, _, expected_loss = pb.distributed.step(client, mean_loss, model, state, split(x, y))
    marker = str(tmp_path / "raised")
    new, _, loss = pb.distributed.step(client, raise_once(marker), model, state, split(x, y), retries=1)
    assert os.path.exists(marker) and loss == expected_loss
    for a, b in zip(parameters(new), parameters(expected)):
        np.testing.assert_array_equal(a, b)
    os.remove(marker)
    with pytest.raises(ShardError, match="loss_fn raised on shard 1 .*OSError: the shard's file was not there yet"):
        pb.distributed.step(client, raise_once(marker), model, state, split(x, y), retries=0)


def untouched(model, state):
    """A checker that `model` and `state` still hold what they hold now."""
    saved = copy.deepcopy((model, state))

    def check():
        for a, b in zip(pb.tree.leaves((model, state)), pb.tree.leaves(saved)):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b)
            elif not callable(a):
                assert a == b
    return check


def raise_on_eight(m, x, y):
    if len(y) == 8:
        raise FloatingPointError("sample 3 is corrupt")
    return mean_loss(m, x, y)


def always_die_on_eight(m, x, y):
    if len(y) == 8:
        os._exit(1)
    return mean_loss(m, x, y)


def test_a_loss_that_raises_names_the_shard_and_nothing_is_updated(client):
    model, (x, y) = make_mlp(), make_batch()
    state = pb.optim.setup(pb.optim.Adam(), model)
    check = untouched(model, state)
    with pytest.raises(ShardError, match=r"loss_fn raised on shard 1 \(8 samples\): FloatingPointError: sample 3 is corrupt"):
        pb.distributed.step(client, raise_on_eight, model, state, split(x, y), retries=0)
    check()


def test_a_worker_that_dies_every_time_is_an_error_and_nothing_is_updated(client):
    model, (x, y) = make_mlp(), make_batch()
    state = pb.optim.setup(pb.optim.Adam(), model)
    check = untouched(model, state)
    with pytest.raises(ShardError, match=r"died.*the model and state are unchanged"):
        pb.distributed.step(client, always_die_on_eight, model, state, split(x, y))
    check()
    new, _, _ = pb.distributed.step(client, mean_loss, model, state, split(x, y))  # the restarted workers serve again
    assert not np.array_equal(parameters(new)[0], parameters(model)[0])


def test_bad_shards_are_refused_before_any_work(client):
    model, (x, y) = make_mlp(), make_batch()
    state = pb.optim.setup(pb.optim.Adam(), model)
    check = untouched(model, state)
    wide = [(x[:7], y[:7]), (np.ones((8, 5)), y[7:15])]
    with pytest.raises(ValueError, match=r"argument 0 of shard 1 has samples of shape \(5,\) .* shard 0's has \(4,\)"):
        pb.distributed.step(client, mean_loss, model, state, wide)
    with pytest.raises(ValueError, match=r"argument 0 of shard 1 has samples of shape \(5,\)"):
        pb.distributed.step(client, mean_loss, model, state, client.scatter(wide, hash=False))  # checked where the data is
    with pytest.raises(ValueError, match=r"shard 0: its arrays differ in length \(7, 6 samples\)"):
        pb.distributed.step(client, mean_loss, model, state, [(x[:7], y[:6])])
    with pytest.raises(ValueError, match=r"shard 1 has 1 arrays but shard 0 has 2"):
        pb.distributed.step(client, mean_loss, model, state, [(x[:7], y[:7]), (x[7:],)])
    with pytest.raises(ValueError, match="shard 0: argument 1 is float, not an array"):
        pb.distributed.step(client, mean_loss, model, state, [(x, 1.0)])
    with pytest.raises(TypeError, match="shard 0 must be a non-empty tuple of arrays"):
        pb.distributed.step(client, mean_loss, model, state, [x])
    with pytest.raises(TypeError, match="shards must be a non-empty list"):
        pb.distributed.step(client, mean_loss, model, state, [])
    with pytest.raises(ValueError, match="chunked along axes other than 0"):
        pb.distributed.step(client, mean_loss, model, state, (da.from_array(x, chunks=(10, 2)), da.from_array(y, chunks=10)))
    with pytest.raises(ValueError, match="reduction must be 'mean' or 'sum'"):
        pb.distributed.step(client, mean_loss, model, state, split(x, y), reduction="avg")
    with pytest.raises(ShardError, match=r"shard \d: loss_fn returned a tuple; pass has_aux=True"):
        pb.distributed.step(client, lambda m, x, y: (mean_loss(m, x, y), 1), model, state, split(x, y), retries=0)
    check()


def test_a_closed_client_is_refused(client):
    model, (x, y) = make_mlp(), make_batch()
    state = pb.optim.setup(pb.optim.Adam(), model)
    check = untouched(model, state)
    other = distributed.Client(client.scheduler.address)
    other.close()
    with pytest.raises(RuntimeError, match="needs a running dask.distributed Client; this one is 'closed'"):
        pb.distributed.step(other, mean_loss, model, state, split(x, y))
    check()


def test_docstring_example_runs_on_a_cluster():
    """The example in `step`'s docstring, with its cluster lines (skipped in doctests) run too."""
    test = doctest.DocTestFinder().find(pb.distributed.step, "step", globs={})[0]
    for example in test.examples:
        example.options = {}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    result = runner.run(test)
    assert result.attempted == len(test.examples) > 5 and result.failed == 0


def test_import_pullback_does_not_import_dask():
    code = "import sys, pullback as pb; pb.distributed.step; print(sorted(m for m in sys.modules if m.startswith(('dask', 'distributed'))))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def make_batchnorm_model():
    return pb.nn.Chain(pb.nn.BatchNorm(4, dtype=np.float64, training=True),
                       pb.nn.Dense(4, 3, dtype=np.float64, rng=np.random.default_rng(0)))


def test_reduction_sum_moves_running_statistics_by_the_weighted_mean_of_the_shards_changes(client):
    # Each shard's loss is weighted 1 for the gradient, but its change to a running mean by its share of the
    # samples: the running mean is the whole batch's, as for reduction="mean" (not the sum of the shards' moves).
    model, (x, y) = make_batchnorm_model(), make_batch()
    state = pb.optim.setup(pb.optim.Descent(0.0), model)
    pb.distributed.step(client, sum_loss, model, state, split(x, y), reduction="sum")
    np.testing.assert_allclose(model.layers[0].running_mean, 0.1 * x.mean(axis=0), rtol=1e-12)


def draws_too(m, x, y):
    return mean_loss(m, x, y), m.rng.random(len(y))


@pytest.mark.parametrize("sizes", [(2, 8), (0, 7, 8, 5)], ids=["uneven", "empty-first"])
def test_random_streams_never_repeat_across_steps(client, sizes):
    # A shard drawing more than shard 0 must not re-read its earlier numbers in the next step, and an empty
    # first shard must not leave the generator where it was (the same Dropout masks at every step).
    model, (x, y) = make_mlp(), make_batch()
    model.rng = np.random.default_rng(5)
    state = pb.optim.setup(pb.optim.Descent(0.0), model)
    steps = [pb.distributed.step(client, draws_too, model, state, split(x, y, sizes), has_aux=True)[2][1]
             for _ in range(3)]
    drawn = np.concatenate([d for draws in steps for d in draws if d is not None])
    assert np.unique(drawn).size == drawn.size == 3 * sum(sizes)


def test_a_list_of_dask_array_shards_is_computed_on_the_cluster_and_the_model_stays_numpy(client):
    model, (x, y) = make_mlp(), make_batch()
    state = pb.optim.setup(pb.optim.Descent(1.0), model)
    dx, dy = da.from_array(x, chunks=(7, 4)), da.from_array(y, chunks=7)
    shards = [(dx[:7], dy[:7]), (dx[7:], dy[7:])]
    new, _, loss = pb.distributed.step(client, mean_loss, model, state, shards)
    assert all(type(leaf) is np.ndarray for leaf in pb.tree.leaves(new, trainable_only=True))
    _, (g,) = pb.withgradient(lambda m: mean_loss(m, x, y), model)
    np.testing.assert_allclose(new.layers[0].weight, model.layers[0].weight - g.layers[0].weight, rtol=1e-10)
    assert np.isclose(loss, mean_loss(model, x, y))


def test_a_jitted_loss_is_sent_to_the_workers(client):
    model, (x, y) = make_mlp(), make_batch()
    state = pb.optim.setup(pb.optim.Descent(1.0), model)
    jitted = pb.jit(mean_loss)
    jitted(model, x, y)  # traced here: the traces stay on the client
    new, _, _ = pb.distributed.step(client, jitted, model, state, split(x, y))
    _, (g,) = pb.withgradient(lambda m: mean_loss(m, x, y), model)
    np.testing.assert_allclose(new.layers[1].bias, model.layers[1].bias - g.layers[1].bias, rtol=1e-10)
