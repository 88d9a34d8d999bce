"""Data-parallel training on a Dask cluster: `step` runs one optimiser step over shards of a batch.

Each shard's gradient is computed on a worker (the one holding the shard's data when the
shard is a Dask future or a block of a Dask array), the gradients are summed on the cluster
by a tree of pairwise tasks, and the optimiser is applied once, on the client. Needs
``dask.distributed`` (``pip install "pullback[dask]"``); `import pullback` does not import it.

The weighting rule: with ``reduction="mean"`` (the default) `loss_fn(model, *shard)` returns
the mean over its shard, and shard ``i`` of ``n_i`` samples is weighted by ``n_i / N``
(``N`` samples in all), so the loss and gradient are those of the mean over the
concatenated batch. With ``reduction="sum"`` `loss_fn` returns a sum and the shards are
added as they are. See docs/distributed.md for fault tolerance and measured costs.
"""

import copy
import math
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import tree
from ._api import withgradient
from ._arrays import dtype_kind
from ._tangents import accum
from .optim import update

__all__ = ["step", "ShardError"]

_WAIT_FOR_WORKERS_S = 60


class ShardError(RuntimeError):
    """A shard's gradient could not be computed: `loss_fn` raised, or the workers running it died.

    The message names the shard; the model and the optimiser state passed to `step` are unchanged.
    """


@dataclass
class _Partial:
    """The weighted sum of the results of some shards (a leaf or an inner node of the reduction tree)."""

    loss: float
    grad: Any
    arrays: list  # per non-trainable array of the model: the weighted change (float) or the new value, or None
    generators: list  # per random generator of the model: whether a shard drew from it
    aux: list  # (shard index, aux) pairs, in shard order


def step(client: Any, loss_fn: Any, model: Any, state: Any, shards: Any, *, reduction: str = "mean",
         has_aux: bool = False, retries: int = 2) -> tuple:
    """One data-parallel optimiser step: `(model, state, loss)` as `pb.optim.update` would give them
    after a gradient of `loss_fn` over the whole batch.

    `shards` is a list of shards, each a tuple of arrays with one leading batch axis (NumPy
    arrays, Dask futures of arrays, Dask arrays, which are computed on the cluster, or one
    Dask future of such a tuple), or a tuple of Dask
    arrays chunked along axis 0 only (each block row is a shard). `loss_fn(model, *shard)`
    returns a scalar: a mean over the shard (``reduction="mean"``, shards weighted by their
    size) or a sum (``reduction="sum"``); with ``has_aux=True`` it returns ``(loss, aux)``
    and `loss` comes back as ``(loss, [aux of each shard])``.

    The model is broadcast to every worker once per step; each shard's gradient runs on a
    copy of it (changes `loss_fn` makes in place to non-trainable arrays, such as BatchNorm's
    running statistics, come back as the size-weighted mean of the shards' changes, whatever
    the reduction; shard ``k`` draws from the model's random generator jumped ``k`` times, an
    independent stream, and a generator drawn from comes back jumped once per shard, past
    every shard's stream). Tasks that raise are re-run up to
    `retries` times, and a task whose worker dies is re-run elsewhere by the scheduler. Any
    failure raises before the model is touched: a `ShardError` naming the shard, or an error
    naming the bad input.

    >>> import numpy as np, pullback as pb
    >>> from dask.distributed import Client  # doctest: +SKIP
    >>> client = Client(processes=False, n_workers=2, dashboard_address=":0")  # doctest: +SKIP
    >>> model = pb.nn.Dense(3, 1, rng=np.random.default_rng(0))
    >>> state = pb.optim.setup(pb.optim.Descent(0.1), model)
    >>> x, y = np.ones((8, 3), np.float32), np.zeros((8, 1), np.float32)
    >>> loss_fn = lambda m, x, y: pb.nn.mse(m(x), y)
    >>> shards = [(x[:5], y[:5]), (x[5:], y[5:])]
    >>> model2, state2, loss = pb.distributed.step(client, loss_fn, model, state, shards)  # doctest: +SKIP
    >>> (_, (g,)) = pb.withgradient(lambda m: loss_fn(m, x, y), model)  # the same step on one machine
    >>> _, local = pb.optim.update(state, model, g)
    >>> np.allclose(model2.weight, local.weight), bool(np.isclose(loss, loss_fn(model, x, y)))  # doctest: +SKIP
    (True, True)
    >>> client.close()  # doctest: +SKIP
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"pb.distributed.step: reduction must be 'mean' or 'sum', not {reduction!r}")
    _check_client(client)
    parts = _shard_parts(client, shards, retries)
    total = sum(p.size for p in parts)
    if total == 0:
        raise ValueError("pb.distributed.step: every shard is empty; there is nothing to train on")
    for attempt in range(retries + 1):
        try:
            result = _gradient_on_workers(client, loss_fn, model, parts, total, reduction, has_aux, retries)
            break
        except _ModelLost:
            # A worker died before the model's copies had reached the others: nothing was
            # applied, so the whole step runs again with the model sent afresh.
            if attempt == retries:
                raise
    new_state, new_model = update(state, model, result.grad)
    _write_back(model, result, len(parts))
    loss = (result.loss, [aux for _, aux in result.aux]) if has_aux else result.loss
    return new_model, new_state, loss


class _ModelLost(ShardError):
    """Every copy of the model sent for a step was lost with the workers holding it."""


def _gradient_on_workers(client, loss_fn, model, parts, total, reduction, has_aux, retries):
    """The summed `_Partial` of every shard, computed on the workers from one broadcast of the model."""
    try:
        [model_future] = client.scatter([model], broadcast=True, hash=False)
    except Exception as error:
        raise RuntimeError(f"pb.distributed.step: the model could not be sent to the workers: "
                           f"{type(error).__name__}: {error}") from error
    what, futures = {model_future.key: "the model"}, []
    for part in parts:
        if part.size == 0:
            continue  # an empty shard adds nothing (and a mean over it would be nan)
        share = part.size / total  # the shard's weight in the changes to the model's state, whatever the reduction
        weight = share if reduction == "mean" else 1.0
        future = client.submit(_shard_result, loss_fn, model_future, part.index, part.size, (weight, share),
                               has_aux, part.data, part.packed, key=f"pullback-shard-{part.index}-{uuid.uuid4().hex}",
                               retries=retries, pure=False)
        what[future.key] = f"shard {part.index}"
        futures.append(future)
    tasks = [model_future, *futures]
    while len(futures) > 1:  # the tree reduction, in shard order: depth ceil(log2 n)
        pairs = zip(futures[::2], futures[1::2])
        summed = [client.submit(_combine, a, b, retries=retries, pure=False) for a, b in pairs]
        for future in summed:
            what[future.key] = "a sum of shard gradients"
        futures = summed + futures[len(futures) - len(futures) % 2:]
    return _result(futures[0], tasks, what)


@dataclass
class _Part:
    index: int
    data: Any  # a tuple of arrays or futures, or one future of a tuple
    packed: bool  # whether `data` is one future to be unpacked on the worker
    size: Any  # samples, or None until the workers holding the data have said
    signature: Any = None  # one (sample shape, dtype) per array, or a message saying what is wrong


def _check_client(client):
    status = getattr(client, "status", None)
    if status != "running":
        raise RuntimeError(f"pb.distributed.step needs a running dask.distributed Client; this one is {status!r} "
                           "(make a new Client, or reconnect this one)")
    if not client.scheduler_info().get("workers"):
        try:  # workers that died are being restarted, or have not arrived yet
            client.wait_for_workers(1, timeout=_WAIT_FOR_WORKERS_S)
        except TimeoutError:
            raise RuntimeError(f"pb.distributed.step: the Dask cluster has had no workers for {_WAIT_FOR_WORKERS_S} s "
                               "(start some, or check why they die)") from None


def _shard_parts(client, shards, retries):
    """The shards as `_Part`s, checked: every shard has the same number of arrays, each one's
    trailing shape and dtype agree across shards, and a shard's arrays agree in length."""
    if isinstance(shards, tuple) and shards and all(_is_dask_array(a) for a in shards):
        parts = _dask_array_parts(client, shards)
    elif isinstance(shards, (list, tuple)) and shards:
        parts = [_part(client, i, shard) for i, shard in enumerate(shards)]
    else:
        raise TypeError("pb.distributed.step: shards must be a non-empty list of shards (tuples of arrays or Dask "
                        f"futures) or a tuple of Dask arrays; got {type(shards).__name__}")
    unknown = [p for p in parts if p.size is None]
    if unknown:  # futures: ask the workers holding them for their shapes, all at once
        described = client.gather([client.submit(_describe, p.data, p.packed, retries=retries, pure=False)
                                   for p in unknown])
        for part, (size, signature) in zip(unknown, described):
            part.size, part.signature = size, signature
    first = parts[0]
    for part in parts:
        if isinstance(part.signature, str):
            raise ValueError(f"pb.distributed.step: shard {part.index}: {part.signature}")
        if len(part.signature) != len(first.signature):
            raise ValueError(f"pb.distributed.step: shard {part.index} has {len(part.signature)} arrays but shard "
                             f"{first.index} has {len(first.signature)}")
        for k, (mine, theirs) in enumerate(zip(part.signature, first.signature)):
            if mine != theirs:
                raise ValueError(f"pb.distributed.step: argument {k} of shard {part.index} has samples of shape "
                                 f"{mine[0]} and dtype {mine[1]}, but shard {first.index}'s has {theirs[0]} and "
                                 f"{theirs[1]}: every shard must hold the same kind of samples")
    return parts


def _part(client, index, shard):
    from distributed import Future

    if isinstance(shard, Future):
        return _Part(index, shard, True, None)
    if not isinstance(shard, (tuple, list)) or not shard:
        raise TypeError(f"pb.distributed.step: shard {index} must be a non-empty tuple of arrays (or a Dask future "
                        f"of one); got {type(shard).__name__}")
    # a Dask array is computed on the cluster (a future of its value): the loss sees NumPy, as with NumPy shards
    data = tuple(client.compute(a) if _is_dask_array(a) else a for a in shard)
    if any(isinstance(a, Future) for a in data):
        return _Part(index, data, False, None)
    return _Part(index, data, False, *_describe(data, False))


def _describe(data, packed):
    """`(samples, signature)` of a shard's arrays, where the signature is one `(sample shape, dtype)`
    per array; or `(0, message)` when the shard is not a tuple of arrays of one length."""
    if packed:
        if not isinstance(data, (tuple, list)):
            return 0, f"a future holding {type(data).__name__}, where a tuple of arrays was expected"
        data = tuple(data)
    signature = []
    for k, a in enumerate(data):
        shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
        if shape is None or dtype is None or len(shape) == 0:
            return 0, f"argument {k} is {type(a).__name__}, not an array with a leading batch axis"
        signature.append((tuple(shape[1:]), str(dtype)))
    sizes = {a.shape[0] for a in data}
    if len(sizes) > 1:
        return 0, f"its arrays differ in length ({', '.join(str(a.shape[0]) for a in data)} samples)"
    return sizes.pop(), tuple(signature)


def _is_dask_array(x):
    return hasattr(x, "__dask_graph__") and hasattr(x, "chunks") and hasattr(x, "to_delayed")


def _dask_array_parts(client, arrays):
    rows = arrays[0].chunks[0]
    for k, a in enumerate(arrays):
        if not np.array_equal(a.chunks[0], rows, equal_nan=True):  # unknown sizes (NaN) are checked on the workers
            raise ValueError(f"pb.distributed.step: Dask array {k} is chunked {a.chunks[0]} along axis 0 but array 0 "
                             f"is chunked {rows}; rechunk them alike")
        if any(len(c) != 1 for c in a.chunks[1:]):
            raise ValueError(f"pb.distributed.step: Dask array {k} is chunked along axes other than 0 ({a.chunks}); "
                             "rechunk it so that each block holds whole samples: a.rechunk({0: 'auto', 1: -1, ...})")
    blocks = [block for a in arrays for block in a.to_delayed(optimize_graph=False).ravel()]
    futures = client.compute(blocks)  # in memory already when the arrays were persisted
    signature = tuple((tuple(a.shape[1:]), str(a.dtype)) for a in arrays)
    parts = []
    for i, n in enumerate(rows):
        data = tuple(futures[k * len(rows) + i] for k in range(len(arrays)))
        if math.isnan(n):  # a chunk size Dask does not know (after x[mask]): _shard_parts asks the worker
            parts.append(_Part(i, data, False, None))
        else:
            parts.append(_Part(i, data, False, int(n), signature))
    return parts


def _model_state(model):
    """The parts of a model that a loss may change in place: arrays other than trainable float
    parameters, and random generators, each once, in walk order."""
    parameters = {id(v) for v in tree.leaves(model, trainable_only=True) if _is_float_array(v)}
    leaves = tree.leaves(model)
    arrays = [v for v in leaves if isinstance(v, np.ndarray) and id(v) not in parameters]
    generators = [v for v in leaves if isinstance(v, np.random.Generator)]
    return arrays, generators


def _is_float_array(v):
    return isinstance(v, np.ndarray) and v.dtype.kind == "f"


def _shard_result(loss_fn, model, index, size, weights, has_aux, data, packed):
    """Runs on a worker: the shard's weighted loss, gradient and changes to the model's state.

    `weights` is `(weight, share)`: the loss and gradient are scaled by `weight` (1 for a summed
    loss), the changes to non-trainable arrays by the shard's `share` of the samples."""
    weight, share = weights
    args = tuple(data)
    # A copy: the broadcast model stays as it was for other shards and for a re-run of this one.
    model = copy.deepcopy(model)
    arrays, generators = _model_state(model)
    before = [a.copy() for a in arrays]
    for g in generators:
        if index:
            g.bit_generator.state = _jumped(g, index).state
    generator_states = [g.bit_generator.state for g in generators]
    try:
        value, (grad,) = withgradient(lambda m: loss_fn(m, *args), model)
    except Exception as error:
        raise ShardError(f"loss_fn raised on shard {index} ({size} samples): {type(error).__name__}: {error}") from error
    aux = None
    if has_aux:
        if not isinstance(value, tuple) or len(value) != 2:
            raise ShardError(f"shard {index}: with has_aux=True, loss_fn must return (loss, aux); "
                             f"got {type(value).__name__}")
        value, aux = value
    elif isinstance(value, tuple):
        raise ShardError(f"shard {index}: loss_fn returned a tuple; pass has_aux=True to step "
                         "to get its other parts back")
    if np.ndim(value) != 0:
        raise ShardError(f"shard {index}: loss_fn must return a scalar; got shape {np.shape(value)}")
    changes = [_weighted_change(old, new, share) for old, new in zip(before, arrays)]
    moved = [not _same_state(g.bit_generator.state, s) for g, s in zip(generators, generator_states)]
    return _Partial(float(value) * weight, _scaled(grad, weight), changes, moved, [(index, aux)])


def _same_state(a, b):
    """Whether two bit-generator states are equal (Philox's and MT19937's hold arrays)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    return a == b


def _jumped(g, times):
    bit_generator = g.bit_generator
    if not hasattr(bit_generator, "jumped"):
        raise ShardError(f"the model's random generator uses {type(bit_generator).__name__}, which cannot jump ahead, "
                         "so the shards would draw the same numbers: use np.random.default_rng (PCG64)")
    return bit_generator.jumped(times)


def _weighted_change(old, new, weight):
    if np.array_equal(old, new, equal_nan=old.dtype.kind in "fc"):
        return None
    if old.dtype.kind == "f":
        return (new - old) * weight
    return new.copy()


def _scaled(grad, weight):
    if weight == 1.0:
        return grad
    return tree.fmap(lambda v: v * weight if _is_inexact(v) else v, grad)


def _is_inexact(v):
    """A float or complex number, or such an array of any library (NumPy's, Dask's, CuPy's)."""
    if isinstance(v, (float, complex, np.inexact)):
        return True
    return hasattr(v, "shape") and hasattr(v, "dtype") and dtype_kind(v) in "fc"


def _combine(a, b):
    """Runs on a worker: the sum of two partial results, `a`'s shards before `b`'s."""
    arrays = [_first_or_sum(x, y) for x, y in zip(a.arrays, b.arrays)]
    generators = [x or y for x, y in zip(a.generators, b.generators)]
    return _Partial(a.loss + b.loss, accum(a.grad, b.grad), arrays, generators, a.aux + b.aux)


def _first_or_sum(x, y):
    if x is None or y is None:
        return y if x is None else x
    return x + y if x.dtype.kind == "f" else x


def _result(future, tasks, what):
    """The final partial result, or an error saying which shard failed and why."""
    from distributed import KilledWorker

    try:
        return future.result()
    except ShardError:
        raise
    except BaseException as error:
        if not isinstance(error, Exception) and type(error).__name__ != "CancelledError":
            raise  # KeyboardInterrupt and the like
        failed = next((t for t in tasks if t.status == "error"), None)
        cause = failed.exception() if failed is not None else error
        if isinstance(cause, ShardError):
            raise cause from None
        name = what.get(getattr(cause, "task", None) or (failed.key if failed is not None else None), "a task")
        if isinstance(cause, KilledWorker):
            reason = ("the workers running it died every time it ran (Dask re-runs a task whose worker dies up to "
                      "distributed.scheduler.allowed-failures times)")
        elif tasks[0].status != "finished":
            raise _ModelLost(f"the model: every worker holding a copy of it died during the step; the model and "
                             f"state are unchanged. Dask said: {type(cause).__name__}: {cause}") from error
        elif "cancel" in type(cause).__name__.lower():
            reason = ("data it needed was lost with a worker (data sent with client.scatter cannot be recomputed: "
                      "pass NumPy shards, futures of tasks or Dask arrays, or replicate scattered shards)")
        else:
            reason = "it failed"
        raise ShardError(f"{name}: {reason}; the model and state are unchanged. Dask said: "
                         f"{type(cause).__name__}: {cause}") from error


def _write_back(model, result, shards):
    """Apply the shards' changes to the model's non-trainable arrays and generators, in place, as a
    local step would have made them. A generator a shard drew from is jumped once per shard: past
    every shard's stream (shard `k` drew from it jumped `k` times), so the next step's are new."""
    arrays, generators = _model_state(model)
    jumped = [(g, _jumped(g, shards).state) for g, moved in zip(generators, result.generators) if moved]
    for a, change in zip(arrays, result.arrays):
        if change is not None:
            a[...] = a + change if a.dtype.kind == "f" else change
    for g, state in jumped:
        g.bit_generator.state = state
