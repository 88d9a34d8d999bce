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

import asyncio
import copy
import functools
import itertools
import math
import random
import types
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
_PICKLABLE = ("The model is copied to every worker, so it must pickle (and copy.deepcopy): keep locks, open files "
              "and connections out of it; the model and state are unchanged")


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
    and `loss` comes back as ``(loss, [aux of each shard])``, with None for an empty shard.

    The model is broadcast to every worker once per step; each shard's gradient runs on a
    copy of it (changes `loss_fn` makes in place to non-trainable arrays, such as BatchNorm's
    running statistics, come back as the size-weighted mean of the shards' changes, whatever
    the reduction; shard ``k`` draws from the model's random generator jumped ``k`` times, an
    independent stream, and a generator drawn from comes back jumped once per shard, past
    every shard's stream; drawing from a generator that cannot be split so, a RandomState in
    the model or any generator `loss_fn` holds, is a `ShardError`). The model and `loss_fn`
    must pickle. Tasks that raise are re-run up to
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
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ValueError(f"pb.distributed.step: retries must be a whole number, 0 or more; got {retries!r}")
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
    if not has_aux:
        return new_model, new_state, result.loss
    auxes = [None] * len(parts)  # an empty shard is not run: its place holds None
    for index, aux in result.aux:
        auxes[index] = aux
    return new_model, new_state, (result.loss, auxes)


class _ModelLost(ShardError):
    """Every copy of the model sent for a step was lost with the workers holding it."""


def _gradient_on_workers(client, loss_fn, model, parts, total, reduction, has_aux, retries):
    """The summed `_Partial` of every shard, computed on the workers from one broadcast of the model."""
    try:
        [model_future] = client.scatter([model], broadcast=True, hash=False)
    except Exception as error:
        raise RuntimeError(f"pb.distributed.step: the model could not be sent to the workers: "
                           f"{type(error).__name__}: {error}. {_PICKLABLE}") from error
    what, futures = {model_future.key: "the model"}, []
    for part in parts:
        if part.size == 0:
            continue  # an empty shard adds nothing (and a mean over it would be nan)
        share = part.size / total  # the shard's weight in the changes to the model's state, whatever the reduction
        weight = share if reduction == "mean" else 1.0
        try:
            future = client.submit(_shard_result, loss_fn, model_future, part.index, part.size, (weight, share),
                                   has_aux, part.data, part.packed, key=f"pullback-shard-{part.index}-{uuid.uuid4().hex}",
                                   retries=retries, pure=False)
        except Exception as error:
            cause = error.__cause__ or error
            raise TypeError(f"pb.distributed.step: the task of shard {part.index} could not be sent to the workers: "
                            f"{type(cause).__name__}: {cause}. loss_fn travels with every task, so it must pickle "
                            "(cloudpickle): keep locks, open files and connections out of what it closes over; the "
                            "model and state are unchanged") from error
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
        except (TimeoutError, asyncio.TimeoutError):  # one class from Python 3.11; Dask raises asyncio's
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
        futures = [client.submit(_describe, p.data, p.packed, retries=retries, pure=False) for p in unknown]
        for part, future in zip(unknown, futures):
            try:
                part.size, part.signature = future.result()
            except BaseException as error:
                if not isinstance(error, Exception) and type(error).__name__ != "CancelledError":
                    raise
                raise ShardError(f"shard {part.index}: its data could not be read on the cluster: "
                                 f"{type(error).__name__}: {error}; the model and state are unchanged") from error
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
    """The parts of a model that a loss may change in place, each once, in walk order: `(path, array)`
    for arrays other than trainable float parameters, random generators, and `(path, generator)` for
    random generators that cannot be split into streams (NumPy's RandomState, Python's random.Random)."""
    parameters = {id(v) for v in tree.leaves(model, trainable_only=True) if _is_float_array(v)}
    leaves = tree.leaves_with_path(model, exclude=lambda v: isinstance(v, random.Random))
    arrays = [(path, v) for path, v in leaves if isinstance(v, np.ndarray) and id(v) not in parameters]
    generators = [v for _, v in leaves if isinstance(v, np.random.Generator)]
    legacy = [(path, v) for path, v in leaves if _is_legacy_generator(v)]
    return arrays, generators, legacy


def _is_legacy_generator(v):
    return isinstance(v, (np.random.RandomState, random.Random))


def _random_state(g):
    """A snapshot of a random generator's state, to compare with `_same_state`."""
    if isinstance(g, np.random.Generator):
        return g.bit_generator.state
    if isinstance(g, np.random.RandomState):
        return g.get_state(legacy=False)
    return g.getstate()


def _closed_over_generators(fn):
    """`(name, generator)` for the random generators `fn` holds: in its closure, defaults and the
    globals it names, in a functools.partial's arguments, a bound method's object, a callable
    object's attributes, and one level inside the containers found there."""
    found, seen, todo = [], set(), [("loss_fn", fn)]
    while todo:
        name, f = todo.pop()
        if id(f) in seen or len(seen) > 100:
            continue
        seen.add(id(f))
        held = []
        if _from_pullback(f):  # a pb.jit function: look at the function it wraps, not at its machinery
            wrapped = getattr(f, "__wrapped__", None)
            if wrapped is not None:
                todo.append((name, wrapped))
            continue
        if isinstance(f, functools.partial):
            held += [(f"{name}.func", f.func), *((f"{name}.args[{i}]", a) for i, a in enumerate(f.args)),
                     *((f"{name}.keywords[{k!r}]", v) for k, v in f.keywords.items())]
        for attribute in ("__self__", "__wrapped__", "__func__"):
            v = getattr(f, attribute, None)
            if v is not None and not isinstance(v, (type, types.ModuleType)):
                held.append((f"{name}.{attribute}", v))
        code = getattr(f, "__code__", None)
        for cell_name, cell in zip(getattr(code, "co_freevars", ()), getattr(f, "__closure__", None) or ()):
            try:
                held.append((cell_name, cell.cell_contents))
            except ValueError:  # an empty cell
                pass
        held += [(f"{name} default {i}", v) for i, v in enumerate(getattr(f, "__defaults__", None) or ())]
        held += [(f"{name} default {k}", v) for k, v in (getattr(f, "__kwdefaults__", None) or {}).items()]
        names = getattr(code, "co_names", ())
        globals_ = getattr(f, "__globals__", None) or {}
        held += [(k, globals_[k]) for k in names if k in globals_ and not isinstance(globals_[k], (type, types.ModuleType))]
        if not isinstance(f, (types.FunctionType, types.MethodType, functools.partial)):
            held += [(f"{name}.{k}", v) for k, v in _attributes(f)]
        for where, v in held:
            if _is_generator(v):
                found.append((where, v))
                continue
            if callable(v) and not isinstance(v, type):
                todo.append((where, v))
            inside = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, (list, tuple)) else \
                _attributes(v) if not isinstance(v, (types.FunctionType, types.ModuleType, type)) else ()
            found += [(f"{where}[{k!r}]", g) for k, g in itertools.islice(inside, 1000) if _is_generator(g)]
    return found


def _from_pullback(f):
    module = getattr(f, "__module__", None) if isinstance(f, (types.FunctionType, types.MethodType)) else \
        type(f).__module__
    return isinstance(module, str) and (module == "pullback" or module.startswith("pullback."))


def _attributes(v):
    """The `(name, value)` pairs of an object's instance dictionary (none when it has none)."""
    try:
        return list(vars(v).items())
    except TypeError:
        return []


def _is_generator(v):
    return isinstance(v, np.random.Generator) or _is_legacy_generator(v)


def _is_float_array(v):
    return isinstance(v, np.ndarray) and v.dtype.kind == "f"


def _shard_result(loss_fn, model, index, size, weights, has_aux, data, packed):
    """Runs on a worker: the shard's weighted loss, gradient and changes to the model's state.

    `weights` is `(weight, share)`: the loss and gradient are scaled by `weight` (1 for a summed
    loss), the changes to non-trainable arrays by the shard's `share` of the samples."""
    weight, share = weights
    args = tuple(data)
    # A copy: the broadcast model stays as it was for other shards and for a re-run of this one.
    try:
        model = copy.deepcopy(model)
    except Exception as error:
        raise ShardError(f"the model could not be copied on a worker: {type(error).__name__}: {error}. "
                         f"{_PICKLABLE}") from error
    arrays, generators, legacy = _model_state(model)
    before = [a.copy() for _, a in arrays]
    for g in generators:
        if index:
            g.bit_generator.state = _jumped(g, index).state
    generator_states = [g.bit_generator.state for g in generators]
    closed = _closed_over_generators(loss_fn)
    unsplit = [(f"the {type(g).__name__} at model{path}", g) for path, g in legacy]
    unsplit += [(f"the {type(g).__name__} that loss_fn holds as {where}", g) for where, g in closed]
    unsplit_states = [_random_state(g) for _, g in unsplit]
    try:
        value, (grad,) = withgradient(lambda m: loss_fn(m, *args), model)
    except Exception as error:
        raise ShardError(f"loss_fn raised on shard {index} ({size} samples): {type(error).__name__}: {error}") from error
    for (what, g), state in zip(unsplit, unsplit_states):
        if not _same_state(_random_state(g), state):
            raise ShardError(f"shard {index}: loss_fn drew from {what}. Each task works on its own copy of it, so every "
                             "shard and every step would draw the same numbers: keep a np.random.default_rng() in "
                             "the model instead (model.rng = ...; pb.distributed.step gives each shard its own "
                             "stream of it); the model and state are unchanged")
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
    changes = [_weighted_change(old, new, share) for old, (_, new) in zip(before, arrays)]
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
    arrays, generators, _ = _model_state(model)
    jumped = [(g, _jumped(g, shards).state) for g, moved in zip(generators, result.generators) if moved]
    writes = [(path, a, a + change if a.dtype.kind == "f" else change)
              for (path, a), change in zip(arrays, result.arrays) if change is not None]
    for path, a, _ in writes:  # every check before the first write, so that a failure changes nothing
        if not a.flags.writeable:
            raise ValueError(f"pb.distributed.step: loss_fn changed model{path} in place, but that "
                             "array is read-only (as a local step would have found); make it writeable "
                             "(a = a.copy()) or leave it alone; the model and state are unchanged")
    for _, a, new in writes:
        a[...] = new
    for g, state in jumped:
        g.bit_generator.state = state
