"""Checkpoints: a model's arrays, and optionally an optimiser state, in one portable file.

`save(path, model, state=None)` writes; `load(path, like=model)` reads into a copy of `like`.
A path ending in ``.safetensors`` reads and writes the safetensors format instead (see
`pullback.safetensors_io`). `state_dict(model)` and `load_state_dict(model, state)` give and
take a model's arrays as a flat dict, as PyTorch's methods of those names do.

Format (``pullback-checkpoint``, version 2)
------------------------------------------

A checkpoint is a ZIP archive (stored, not compressed) holding:

- ``model/<i>.npy`` and ``state/<i>.npy``: one array each, in NumPy's ``.npy`` format,
  written with ``allow_pickle=False``;
- ``manifest.json``: UTF-8 JSON describing everything else::

    {"format": "pullback-checkpoint", "version": 1, "written_by": "pullback 0.1.0",
     "model_type": "Chain",
     "arrays": [{"entry": "model/0.npy", "paths": ["model.layers[0].weight"],
                 "dtype": "<f4", "shape": [1, 2], "sha256": "<hex digest of the entry>"}, ...],
     "state": null, "generators": []}

A path names a place inside the model: ``.name`` for an object's field (or a namedtuple's),
``[i]`` for a tuple or list item, ``['key']`` for a dict entry, starting from ``model``.
Every array reachable in the model is stored, trainable or not (running statistics too), each
once. That includes arrays of other libraries pullback accepts: a Dask array is computed (by
Dask's own scheduler) and an array-API array (array_api_strict's) read through DLPack when the
file is written; on loading, each array comes back as an array of the type of `like`'s array
at that place (a Dask array in `like`'s chunks, an array-API array of `like`'s library on its
device; a ``np.memmap``'s values as a plain ``np.ndarray``). ``paths`` lists every place an
array object appears, so ties are kept (in a model with cycles, every place short of going
back into a container already on the way). Two different arrays that share memory (views of
one buffer) are stored, and come back, as independent arrays.
Random generators are stored too, in ``"generators"``: each ``np.random.Generator`` (a
``Dropout``'s), legacy ``np.random.RandomState``, bare ``np.random.BitGenerator``,
``np.random.SeedSequence`` and Python ``random.Random`` reachable in the model, once, with its
full state, so that a run resumed from the file draws what the saved one would have::

    [{"paths": ["model.layers[1].rng"], "type": "Generator",
      "state": {"bit_generator": "PCG64", "state": {"state": 1234..., "inc": 5678...},
                "has_uint32": 0, "uinteger": 0,
                "seed_seq": {"entropy": 42, "spawn_key": [], "pool_size": 4, "n_children_spawned": 0}}}, ...]

``type`` is ``Generator``, ``RandomState``, ``BitGenerator``, ``SeedSequence`` or ``Random``.
``state`` is ``g.bit_generator.state`` (a RandomState's ``get_state(legacy=False)``, with
``has_gauss`` and ``gauss``; a bare bit generator's ``.state``), integers as JSON integers (up to
128 bits) and arrays as lists of integers; only NumPy's bit generators PCG64, PCG64DXSM, MT19937,
Philox and SFC64 are stored. Its ``seed_seq`` is the bit generator's ``seed_seq`` (stored as a
SeedSequence is), so ``spawn()`` after loading gives the children the saved one would have, or
null where it has none (``RandomState(seed)``'s: MT19937's legacy seeding). A SeedSequence's is ``{"entropy", "spawn_key", "pool_size",
"n_children_spawned"}`` (entropy an integer or a list of them, each under 2**1024; pool_size at
most 1024). A ``random.Random``'s is its ``getstate()``: ``{"class": "random.Random", "version": 3,
"key": [624 integers], "pos": 624, "gauss_next": null}``; a subclass is stored under its own
class name and loads only into that class. What cannot come back as it was is refused at saving
rather than left out: a ``random.SystemRandom`` (no state), a class whose copy fails, a bit
generator or SeedSequence that is also part of another generator stored, or part of two (they would
come back apart: two Generators of one SeedSequence would spawn the same children), a bit generator
whose ``seed_seq`` is not a ``np.random.SeedSequence`` (a subclass, a ``SeedlessSeedSequence``).
A file with generators
has version 2 (an older pullback refuses it rather than drop them); one without has
``"generators": []`` and version 1. The manifest's CRC-32 covers the states. On loading, `like`
must hold a generator of the same type and bit generator (or class) at exactly the places (and
ties) the file has; each field is checked (type, range, length) before the state is set on a new
generator, never on `like`'s. A version 1 file without ``"generators"`` (written before they were
stored) leaves each a copy of `like`'s.
Other fields (numbers, strings, functions, flags) are not stored; they come from `like`. An
array of a library pullback does not take (a torch tensor: anything NumPy reads through
``__array__`` or ``__dlpack__`` that holds no NumPy array) is refused rather than left out.

With an optimiser state, ``"state"`` is::

    {"rules": [{"rule": "Adam", "hyper": {"lr": 0.001, "beta1": 0.9, ...}}, ...],
     "leaves": [{"paths": ["model.layers[0].weight"], "rule": 0, "frozen": false,
                 "value": {"tuple": [{"array": 0}, {"array": 1}, 7]}}, ...],
     "arrays": [{"entry": "state/0.npy", "path": "...", "dtype": ..., "shape": ..., "sha256": ...}, ...]}

One leaf per distinct trainable array, keyed by the array's first path. A rule is named
(``"Adam"`` for the built-in rules, ``"module:Class"`` for a `pullback.optim.Rule` subclass
of your own, which must be imported before loading) with JSON hyperparameters (a
non-finite float as below; a tuple as ``{"tuple": [...]}``, a list as ``{"list": [...]}``);
an ``OptimiserChain``'s ``hyper`` is ``{"rules": {"tuple": [rule, ...]}}``. A state whose rule
class was redefined after the state was made (a notebook cell run again) is refused at
saving. A rule's state value is encoded as: a JSON number, bool or null for itself; ``{"array": i}`` for state
array ``i``; ``{"scalar": i}`` for a NumPy scalar kept as 0-d array ``i``; ``{"tuple": [...]}``
and ``{"list": [...]}`` for sequences; ``{"float": "inf"}`` (or ``"-inf"``, ``"nan"``) for a
non-finite float.

A dict key is named by its ``repr``, so only keys whose ``repr`` is the same in every
process may lead to an array: ``str``, ``int``, ``bool``, ``None`` and tuples of these.

Loading never runs code from the file: it parses JSON and ``.npy`` headers, refuses
pickled (object) arrays, and builds rules only from classes already defined in the process.
Its memory is bounded by what `like` declares. The manifest may be at most 16 MiB and
nested at most 64 levels deep; `save` refuses, before writing anything, a model or state
whose manifest would not be. Every shape and dtype in the manifest is checked against
`like` before any entry is read: each model array against the array of `like` at its path
(the dtype may differ in byte order only: a file written on a big-endian machine loads into
a native `like`, the values converted to `like`'s byte order), each optimiser state array against what the stored rule keeps for that parameter (Adam's
moments have the parameter's shape and dtype, for instance), and the state's entries must
be exactly the trainable arrays of `like`. Entries are then read a bounded piece at a time,
never more bytes than their ``.npy`` header and data need. Entries may be stored or
deflated (a re-zipped file reads fine); an entry marked encrypted, compressed another way,
or whose data does not end exactly at its declared size is refused. Every entry's CRC-32
and SHA-256 are checked, and each ``.npy`` header must agree with the manifest (and the
entry's length with both). A file with another format name or version is refused.
The archive is also a valid ``.npz``: ``numpy.load(path)["model/0"]`` reads an array
without pullback.

Saving is atomic: the file is written under a temporary name in the same directory
(``.<name>.<random>.tmp``, the name shortened where the file system's limit needs it),
flushed to disk (fsync), given the permission bits of the file it replaces (if any) and
moved over `path` with `os.replace` (over the file a symbolic link at `path` points to, keeping
the link), then the directory is synced. An empty path, a folder, or a path in a folder that
does not exist is refused before anything is written. An error part way removes the temporary
file; a crash may leave it behind, but either way any old file at `path` is untouched.
"""

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import secrets
import stat
import struct
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from . import _rng_states as rng_states
from . import tree
from ._arrays import as_numpy, as_type_of, is_foreign_array, rechunked_like, type_name
from ._values import stop_gradient  # the plain value itself (the public one hands out a read-only copy)
from .optim import Leaf
from .optim._state import mirror
from .optim._update import pair
from .optim.rules import RULES, OptimiserChain, Rule, rule_name

__all__ = ["save", "load", "state_dict", "load_state_dict", "CheckpointError", "FORMAT", "VERSION"]

FORMAT = "pullback-checkpoint"
VERSION = 2  # the newest written; version 1 (no random generators) is read too
MANIFEST = "manifest.json"
# What reading a damaged archive can raise (OSError: a seek to a corrupted offset).
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, struct.error, zlib.error, NotImplementedError, OSError)
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # identical inputs give identical files
_MAX_NPY_HEADER = 65536 + 16  # the most a .npy header (magic, length, text) can take
_MAX_MANIFEST = 16 * 2**20  # bytes; a manifest needs a few hundred per array
_MAX_NESTING = 64  # levels of JSON arrays and objects in a manifest
_CHUNK = 2**20  # bytes read (or inflated) at a time

Model = TypeVar("Model")


class CheckpointError(ValueError):
    """A checkpoint cannot be written or read: the message says what and where."""


# --- save --------------------------------------------------------------------------
def save(path: str | os.PathLike[str], model: Any, state: Any = None) -> None:
    """Write `model`'s arrays (and `state`, an optimiser state for `model`) to `path`, atomically.

    Everything is checked before the file is touched; an existing file at `path` is only
    replaced once the new one is complete on disk. See the module docstring for the format.
    `pb.save` writes this format, or safetensors for a path ending in ``.safetensors``.

    >>> import os, tempfile, zipfile, numpy as np
    >>> from pullback import checkpoint
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     checkpoint.save(os.path.join(folder, "m.ckpt"), {"w": np.arange(3.0)})
    ...     sorted(zipfile.ZipFile(os.path.join(folder, "m.ckpt")).namelist())
    ['manifest.json', 'model/0.npy']
    """
    path = check_path(path)
    groups = _array_groups(model)
    arrays = [(x, paths) for x, paths in groups.values()]
    state_manifest, state_arrays = (None, []) if state is None else _encode_state(state, model)
    specs = [_spec(f"model/{i}.npy", x) | {"paths": paths} for i, (x, paths) in enumerate(arrays)]
    if state_manifest is not None:
        state_manifest["arrays"] = [_spec(f"state/{i}.npy", x) | {"path": where} for i, (x, where) in enumerate(state_arrays)]
    generators = generator_specs(model)
    manifest = {
        "format": FORMAT, "version": VERSION if generators else 1, "written_by": f"pullback {_version()}",
        "model_type": type(model).__name__, "arrays": specs, "state": state_manifest, "generators": generators,
    }
    _check_manifest_limits(manifest)
    stored = [(spec, x, paths[0]) for spec, (x, paths) in zip(specs, arrays)]
    if state_manifest is not None:
        stored += [(spec, x, f"the optimiser state for {where}") for spec, (x, where) in zip(state_manifest["arrays"], state_arrays)]

    def write(file, temporary):
        with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_STORED) as archive:
            for spec, x, where in stored:
                spec["sha256"] = _write_array(archive, spec, x, where)
            text = json.dumps(manifest, indent=1, allow_nan=False)
            archive.writestr(zipfile.ZipInfo(MANIFEST, _FIXED_TIME), text.encode("utf-8"))

    write_atomically(path, write)


def _version():
    from . import __version__

    return __version__


def _array_groups(model, generators=False):
    """`{id: (array, [paths])}` for every array (or, with `generators`, random generator) reachable in `model`, in walk order."""
    groups = {}
    for path, x in _array_places(model, generators):
        groups.setdefault(id(x), (x, []))[1].append(path)
    return groups


def _array_places(model, generators=False):
    """`[(path, array)]` for every place of `model` holding an array, in walk order (with `generators`,
    places holding a random generator too: `_rng_states.RANDOM_TYPES`).

    `tree.walk` visits each object once and gives each container `(id, steps)`: the steps
    inside it that lead to arrays, as `(step text, key, what is below)`. Spelling those out
    from the root names each array at every place it appears (a shared layer's arrays under
    each of its places), short of going back into a container already on the way (a cycle).
    """
    found = {}  # id(container) -> what the walk gave it, for the ways back of cycles

    def leaf(x, ys, path):
        if stop_gradient(x) is not x:
            raise CheckpointError(f"{path.format('model')} is being differentiated; save the model outside gradient calls.")
        if _is_array(x):
            _check_storable(x, lambda: path.format("model"))
            return x
        if generators and isinstance(x, rng_states.RANDOM_TYPES):
            return x
        _refuse_unstored_array(x, path)
        return None

    def node(x, kind, old, new, ys, path, shell):
        steps = [(tree.Path(((k, kind.fields),)).format(), k, v) for k, v in new.items() if v is not None]
        if not steps:
            _refuse_unstored_array(x, path)
        found[id(x)] = (id(x), steps) if steps else None
        return found[id(x)]

    root = tree.walk(model, leaf, node, cycle=lambda x, kind, path: id(x))
    places, on_the_way = [], set()
    stack = [("model", None, root)]
    while stack:
        path, unstable, item = stack.pop()
        if path is None:  # every step inside the container `item` (an id) is taken
            on_the_way.discard(item)
            continue
        if type(item) is int:  # a way back into a container that was being walked (a cycle)
            item = found[item]
        if _is_array(item) or isinstance(item, rng_states.RANDOM_TYPES):
            if unstable is not None:
                where, key = unstable
                what = "array" if _is_array(item) else "random generator"
                raise CheckpointError(
                    f"{where} has the key {key!r} (a {type(key).__name__}), which leads to the {what} at {path}; "
                    "a checkpoint names places by the repr of their keys, and this one is not the same in every "
                    "process. Use keys of type str, int, bool or None (or tuples of these), e.g. str(key)."
                )
            places.append((path, item))
        elif item is not None and item[0] not in on_the_way:
            ident, steps = item
            on_the_way.add(ident)
            stack.append((None, None, ident))
            for step, key, inner in reversed(steps):
                stack.append((path + step, unstable or (None if _stable_key(key) else (path, key)), inner))
    return places


def _refuse_unstored_array(x, path):
    """Refuse an array of a library pullback does not take (a torch tensor): a checkpoint would leave it out."""
    cls = type(x)
    if not isinstance(x, np.generic) and (hasattr(cls, "__array__") or hasattr(cls, "__dlpack__")):
        raise CheckpointError(
            f"{path.format('model')} is a {type_name(x)}, an array of a library pullback does not take, so it would "
            "not be stored (nor could a load restore it). Convert it to a NumPy array (a torch tensor: "
            "x.detach().cpu().numpy()), or keep it outside the model."
        )


def _stable_key(key):
    """Whether `repr(key)` is the same in every process (no addresses, no hash-dependent order)."""
    parts = tree.leaves(key, exclude=lambda k: type(k) is not tuple) if type(key) is tuple else [key]
    return all(k is None or type(k) in (str, int, bool) for k in parts)


def _check_storable(x, where):
    """Refuse an array a checkpoint cannot store; `where()` names its place (formatted only for the message)."""
    if type(x) not in (np.ndarray, np.memmap) and not is_foreign_array(x):
        raise CheckpointError(
            f"{where()} is a {type(x).__name__}; checkpoints store plain numpy.ndarray values only. Convert it, e.g. "
            "np.asarray(x), keeping anything else it holds (a masked array's mask) as an array of its own."
        )
    dtype = numpy_dtype(x, where)
    if not dtype.type.__module__.startswith("numpy"):
        raise CheckpointError(
            f"{where()} has dtype {dtype}, from the {dtype.type.__module__} package, which neither a checkpoint "
            "(NumPy's .npy format) nor a safetensors file written through NumPy can describe; convert it to a NumPy "
            "dtype that holds its values exactly, e.g. x.astype(np.float32)."
        )
    if dtype.fields is not None and not dtype.hasobject:
        raise CheckpointError(
            f"{where()} has the structured dtype {dtype}, which a checkpoint cannot describe; store each field as an "
            f"array of its own (x[{dtype.names[0]!r}], ...), or view it as plain bytes (x.view(np.uint8))."
        )
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or np.dtype(dtype.str) != dtype:
        raise CheckpointError(
            f"{where()} has dtype {dtype}, which a checkpoint cannot store without pickle; "
            "convert it to a numeric, boolean or string array."
        )
    if any(n != n for n in x.shape):  # NaN: a Dask array whose chunk sizes are not known
        raise CheckpointError(
            f"{where()} has a shape not known until it is computed ({x.shape}); compute its chunk sizes first "
            "(Dask: x.compute_chunk_sizes())."
        )


# --- arrays of other libraries ---------------------------------------------------------------
# A checkpoint stores every array: NumPy's, and another library's (Dask, CuPy, array API). Another
# library's array is read as a NumPy array when it is written, and an array read from a file is
# given back as an array of the type of the array of `like` that it replaces.
_API_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "float32", "float64", "complex64", "complex128")  # the array API's names


def _is_array(x):
    """Whether a checkpoint stores `x`: a NumPy array, or an array of a library pullback accepts."""
    return isinstance(x, np.ndarray) or is_foreign_array(x)


def numpy_dtype(x, where):
    """`x.dtype` as a NumPy dtype (an array-API library has dtype objects of its own); `where()` names `x`."""
    if isinstance(x.dtype, np.dtype):
        return x.dtype
    namespace = x.__array_namespace__()
    for name in _API_DTYPES:
        if x.dtype == getattr(namespace, name, None):
            return np.dtype(name)
    raise CheckpointError(f"{where()} has dtype {x.dtype}, which has no NumPy equivalent; convert it to a standard dtype.")


def to_numpy(x, where):
    """`x` as a NumPy array: another library's array read through DLPack or computed (Dask by its own scheduler)."""
    if isinstance(x, np.ndarray):
        return x
    try:
        return np.asarray(as_numpy(x))
    except (TypeError, ValueError, RuntimeError, BufferError) as error:
        raise CheckpointError(
            f"{where()} is a {type_name(x)} that cannot be read as a NumPy array ({error}); "
            "convert it to a NumPy array on the CPU first (a torch tensor: x.detach().cpu().numpy(), a bfloat16 "
            "one after .float())."
        ) from None


def to_type_of(a, like):
    """NumPy array `a` as an array of `like`'s type: Dask in `like`'s chunks (for `like`'s shape), array API on `like`'s device."""
    b = as_type_of(a, like)
    return rechunked_like(b, like) if b is not a and b.shape == like.shape else b


def rebuilt(like, replacements):
    """A copy of `like` (every container new; ties, shared objects and cycles kept) with arrays replaced by id.

    An object that cannot be copied (an open file) is kept as it is where nothing in it changes.
    """

    def node(value, kind, old, new, parts, path, shell):
        try:
            return tree.copy_node(value, kind, new, shell)
        except TypeError:
            if shell is None and all(new[k] is v for k, v in old.items()):
                return value
            raise

    return tree.walk(like, lambda a, parts, path: replacements.get(id(a), a), node, cycle=tree.copy_cycle)


def _spec(entry, x):
    """An array's manifest entry before it is written (its digest, of fixed length, comes with the data)."""
    return {"entry": entry, "dtype": numpy_dtype(x, lambda: entry).str, "shape": list(x.shape), "sha256": "0" * 64}


def _check_manifest_limits(manifest):
    """Refuse to write a manifest `load` would refuse: the same size and nesting limits."""
    size = len(json.dumps(manifest, indent=1, allow_nan=False).encode("utf-8"))
    if size > _MAX_MANIFEST:
        raise CheckpointError(
            f"The checkpoint's manifest would be {size} bytes, more than the {_MAX_MANIFEST // 2**20} MiB that load "
            f"accepts ({len(manifest['arrays'])} arrays); store fewer, larger arrays (stack the small ones) or "
            "use shorter dict keys."
        )
    if _nesting(manifest) > _MAX_NESTING:
        raise CheckpointError(
            f"The checkpoint's manifest would be nested more than the {_MAX_NESTING} levels deep that load accepts "
            "(rules inside OptimiserChains inside OptimiserChains, or deeply nested rule states); flatten them, "
            "e.g. OptimiserChain(a, b, c) rather than OptimiserChain(a, OptimiserChain(b, c))."
        )


def _write_array(archive, spec, x, where):
    """Write `x` to `spec`'s entry as a `.npy` array; its SHA-256."""
    x = to_numpy(x, lambda: where)
    if x.dtype.str != spec["dtype"] or list(x.shape) != spec["shape"]:
        raise CheckpointError(
            f"{where} computed to dtype {x.dtype} and shape {x.shape}, but declared dtype {np.dtype(spec['dtype'])} "
            f"and shape {tuple(spec['shape'])}; fix the array (for Dask, its meta or chunks) before saving."
        )
    digest = hashlib.sha256()
    info = zipfile.ZipInfo(spec["entry"], _FIXED_TIME)
    with archive.open(info, "w", force_zip64=x.nbytes > 2**30) as out:
        np.lib.format.write_array(_Hashing(out, digest), x, allow_pickle=False)
    return digest.hexdigest()


class _Hashing:
    """A writable file that also feeds what it writes to a hash."""

    def __init__(self, out, digest):
        self._out, self._digest = out, digest

    def write(self, data):
        self._digest.update(data)
        return self._out.write(data)


def _encode_state(state, model):
    """The manifest's `state` part (without its `arrays`) and the state arrays to store."""
    entries = pair(state, model, None)
    first_paths = {}
    mirror(model, lambda x, path: first_paths.setdefault(id(x), path))
    by_array = {id(x): leaf for leaf, x, _, _ in entries.values()}
    for array_id, path in first_paths.items():
        if array_id not in by_array:
            raise CheckpointError(
                f"The state has no entry for {path}, so it is not a state for this model; "
                "save the state that setup(rule, model) and update returned."
            )
    rules, rule_index, leaves, arrays = [], {}, [], []
    for leaf, x, _, places in entries.values():
        paths = [tree.Path(p).format("model") for p in places]
        problem = _rule_state_problem(leaf.rule, leaf.state, x)
        if problem:
            raise CheckpointError(
                f"The optimiser state for {paths[0]} does not fit the parameter there ({_shape_of(x)}): {problem}. "
                "Save the state that setup(rule, model) and update returned for this model."
            )
        if id(leaf.rule) not in rule_index:
            rule_index[id(leaf.rule)] = len(rules)
            rules.append(_encode_rule(leaf.rule, paths[0]))
        key = first_paths[id(x)]
        leaves.append({
            "paths": [key] + [p for p in paths if p != key],
            "rule": rule_index[id(leaf.rule)],
            "frozen": bool(leaf.frozen),
            "value": _encode_value(leaf.state, arrays, key),
        })
    return {"rules": rules, "leaves": leaves}, arrays


def _encode_rule(rule, where):
    name = rule_name(type(rule))
    registered = RULES.get(name)
    if registered is not None and registered is not type(rule):
        raise CheckpointError(
            f"The rule {rule!r} at {where} is an instance of {name} as it was before that class was redefined "
            "(its module reloaded, or the notebook cell that defines it run again): load would rebuild it with the "
            "new definition. Make the state again with setup(rule, model) from the current class, or save before "
            "redefining it."
        )
    if registered is None:
        raise CheckpointError(f"The rule {rule!r} at {where} is not a registered pullback.optim.Rule subclass.")
    return {"rule": name, "hyper": {k: _encode_hyper(v, where) for k, v in rule.hyperparameters().items()}}


def _encode_hyper(value, where):
    if isinstance(value, Rule):
        return _encode_rule(value, where)
    if type(value) in (tuple, list):
        return {type(value).__name__: [_encode_hyper(v, where) for v in value]}
    if isinstance(value, float) and not isinstance(value, np.generic):
        return value if math.isfinite(value) else {"float": repr(value)}
    if value is None or isinstance(value, (bool, int, str)) and not isinstance(value, np.generic):
        return value
    raise CheckpointError(f"The rule at {where} has a hyperparameter {value!r} that a checkpoint cannot store.")


def _encode_value(value, arrays, where):
    if _is_array(value):
        _check_storable(value, lambda: f"the optimiser state for {where}")
        arrays.append((value, where))
        return {"array": len(arrays) - 1}
    if isinstance(value, np.generic):
        arrays.append((np.asarray(value), where))
        return {"scalar": len(arrays) - 1}
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if type(value) is tuple:
        return {"tuple": [_encode_value(v, arrays, where) for v in value]}
    if type(value) is list:
        return {"list": [_encode_value(v, arrays, where) for v in value]}
    raise CheckpointError(
        f"The optimiser state for {where} holds a {type(value).__name__}; checkpoints store arrays, NumPy scalars, "
        "Python bools, ints and floats, None, tuples and lists"
        + (": keep it as a NumPy scalar, np.complex128(value)." if isinstance(value, complex) else ".")
    )


# --- random generators ---------------------------------------------------------------------
# The manifest's ``generators``: each random generator of the model with its places and full state
# (the states themselves: `pullback._rng_states`).
def _random_groups(model):
    """`[(generator, [paths])]` for each random generator reachable in `model`; one inside another is refused."""
    groups = [(g, paths) for g, paths in _array_groups(model, generators=True).values()
              if isinstance(g, rng_states.RANDOM_TYPES)]
    rng_states.check_apart(groups, _raise)
    return groups


def _raise(message):
    raise CheckpointError(message)


def generator_specs(model):
    """The manifest's ``generators``: `[{"paths", "type", "state"}]` for each random generator in `model`.

    Each state is checked as `load` checks it, and a copy made from it as `load` makes one must have it.
    """
    specs = []
    for g, paths in _random_groups(model):

        def refuse(reason, where=paths[0]):
            raise CheckpointError(f"The random generator at {where} cannot be stored: {reason}")

        state = rng_states.state_of(g, refuse)
        checked = rng_states.decoded(state, rng_states.schema(g, refuse), "its state",
                                     lambda reason: refuse(f"{reason[:-1]} to be stored; keep it outside the model."))
        try:
            new = rng_states.restored(g, checked)
        except Exception as error:  # the class of a random.Random subclass may fail to copy, or refuse its state
            refuse(f"a copy given its state, as loading makes one, fails ({type(error).__name__}: {error}); keep it "
                   "outside the model.")
        if type(new) is not type(g) or rng_states.state_of(new, refuse) != state:  # (a subclass of Generator: a Generator)
            refuse(f"a copy given its state, as loading makes one, is a {type(new).__name__} of another class or "
                   "state; keep it outside the model, or use the class itself.")
        specs.append({"paths": paths, "type": rng_states.kind_of(g), "state": state})
    return specs


def restored_generators(entries, like, fail):
    """`{id(generator of like): new generator}` holding the states of `entries` (a manifest's ``generators``).

    Each entry must match `like`'s generators: the same places, ties, types and bit generators (a
    random.Random's class). Without entries (a file written before generators were stored) each is
    a copy of `like`'s.
    """
    if entries is None:
        return rng_states.copies(like)
    try:
        groups = {id(g): (g, paths) for g, paths in _random_groups(like)}
    except CheckpointError as error:
        fail(f"cannot load into `like`: {error}")
    if not isinstance(entries, list):
        fail("damaged random generator entries: generators must be a list.")
    at = {p: g for g, paths in groups.values() for p in paths}
    new = {}
    for i, entry in enumerate(entries):
        where = f"generators[{i}]"
        if (not isinstance(entry, dict) or set(entry) != {"paths", "type", "state"} or type(entry["paths"]) is not list
                or not entry["paths"] or not all(isinstance(p, str) for p in entry["paths"])
                or entry["type"] not in list(rng_states.KINDS) or not isinstance(entry["state"], dict)):
            fail(f"damaged random generator entry: {where} must be {{'paths': [path, ...], 'type': one of "
                 f"{', '.join(rng_states.KINDS)}, 'state': {{...}}}}.")
        paths, kind = entry["paths"], entry["type"]
        for p in paths:
            if p not in at:
                fail(
                    f"the file has a random generator for {p}, but `like` has none there; `like` must be built the "
                    "same way as the saved model (a Dropout's generator included)."
                )
        target = at[paths[0]]
        if id(target) in new or any(at[p] is not target for p in paths) or set(groups[id(target)][1]) != set(paths):
            fail(
                f"the random generator at {paths[0]} is shared with other places in the file than in `like` "
                f"({few(paths)} in the file, {few(groups[id(target)][1])} in `like`); build `like` the same way as the saved model."
            )
        found, expected = rng_states.described(kind, entry["state"]), rng_states.description(target)
        if (kind, found) != (rng_states.kind_of(target), expected):
            fail(
                f"the random generator at {paths[0]} is a {found} in the file but a {expected} in `like`; build "
                f"`like`'s as the saved model's was: {rng_states.made_as(kind, entry['state'])}."
            )
        expected_fields = rng_states.schema(target, lambda reason: fail(f"cannot load into `like` at {paths[0]}: {reason}"))
        state = rng_states.decoded(entry["state"], expected_fields, f"{where}.state",
                                   lambda reason: fail(f"damaged random generator entry: {reason}"))
        try:
            new[id(target)] = rng_states.restored(target, state)  # a new object: resuming must not advance `like`'s
        except Exception as error:  # NumPy's checks, or a random.Random subclass's
            fail(f"the stored state of the random generator at {paths[0]} is refused ({type(error).__name__}: {error}).")
    missing = [p for p in at if id(at[p]) not in new]
    if missing:
        fail(
            f"`like` has a random generator at {missing[0]}, but the file has none there (its model had none); "
            "build `like` the same way as the saved model (without that generator)."
        )
    return new


def check_path(path):
    """`path` as a string, if a file can be written there: not empty, not a folder, in a folder that exists."""
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not path:
        raise ValueError("The path to save to is empty; give a file name, e.g. 'model.ckpt'.")
    if os.path.isdir(path) or not os.path.basename(path):
        raise IsADirectoryError(f"{path} is a folder; give the file to write, e.g. {os.path.join(path, 'model.ckpt')}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            f"Cannot save {path}: the folder {folder} does not exist; create it first, e.g. os.makedirs({folder!r}, exist_ok=True)."
        )
    return path


def write_atomically(path, write):
    """Run `write(file, temporary_path)` on a temporary file next to `path`, sync it, then move it over `path`.

    The new file keeps the permission bits of the file it replaces. A `path` that is a symbolic link is
    written through: the file it points to is replaced, and the link kept.
    """
    path = check_path(path)
    if os.path.islink(path):
        path = check_path(os.path.realpath(path))
    folder = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(folder, _temporary_name(folder, os.path.basename(path)))
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as error:
        raise type(error)(
            error.errno,
            f"Cannot save {path}: cannot create a file in its folder {folder} ({error.strerror}). Saving writes the "
            "new file next to the old one and then moves it over, so the folder must be writable; save elsewhere, "
            "or make the folder writable.",
        ) from None
    try:
        with os.fdopen(fd, "wb") as file:
            write(file, temporary)
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temporary, stat.S_IMODE(os.stat(path).st_mode))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_folder(folder)


def _temporary_name(folder, name):
    """``.<name>.<random>.tmp``, with `name` shortened to keep it within the folder's longest file name."""
    try:
        longest = os.pathconf(folder, "PC_NAME_MAX")
    except (AttributeError, ValueError, OSError):  # no pathconf (Windows), or no limit reported
        longest = None
    longest = longest if longest and longest > 0 else 255
    token = secrets.token_hex(6)
    while len(os.fsencode(f".{name}.{token}.tmp")) > longest and name:
        name = name[:-1]
    return f".{name}.{token}.tmp"


def _sync_folder(folder):
    """Make the rename itself durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _rule_state_problem(rule, value, x, chain=""):
    """Why `value` cannot be `rule`'s state for parameter `x` (None if it can).

    The reference is `rule.init(x)`: the same nesting, and an array of the same dtype (in
    any byte order) and shape wherever it has one; numbers may differ, and may have grown
    into arrays of `x`'s shape. A rule's state may be shorter than its initial one (RMSProp
    made centred by `adjust` keeps `(s,)` until its next step), or longer, by entries of the parameter's
    shape or numbers (RMSProp made uncentred, Adam without `amsgrad`, by `adjust` keep theirs until their
    next step); an `OptimiserChain` needs exactly one state per rule.
    """
    name = type(rule).__name__
    where = f"the {name} state" + (f" (rule {chain} of the OptimiserChain)" if chain else "")
    if isinstance(rule, OptimiserChain):
        if type(value) is not tuple or len(value) != len(rule.rules):
            return f"{where} is {_shape_of(value)}, not a tuple of {len(rule.rules)} rule states"
        for i, (inner, v) in enumerate(zip(rule.rules, value)):
            problem = _rule_state_problem(inner, v, x, f"{chain}[{i}]")
            if problem:
                return problem
        return None
    reference = rule.init(x)
    if type(reference) in (tuple, list) and type(value) is type(reference) and len(value) != len(reference):
        if len(value) < len(reference):
            reference = reference[: len(value)]
        else:  # each extra entry checked as an array of the parameter's shape and dtype, or a number
            reference = reference + type(reference)(_like_parameter(v, x) for v in value[len(reference):])
    return _value_problem(value, reference, x, "", where)


def _like_parameter(value, x):
    """What an extra entry of a rule's state is checked against: an array like the parameter, or a number."""
    return np.zeros_like(x) if _is_stored_array(value) else 0


def _value_problem(value, reference, x, item, where):
    at = f"item {item} of {where}" if item else where
    if _is_array(reference):
        if not (_is_stored_array(value) and same_dtype(value.dtype, reference.dtype) and value.shape == reference.shape):
            return f"{at} is {_shape_of(value)}, where the rule keeps an array of dtype {reference.dtype} and shape {reference.shape}"
        return None
    if type(reference) in (tuple, list):
        if type(value) is not type(reference) or len(value) != len(reference):
            return f"{at} is {_shape_of(value)}, where the rule keeps a {type(reference).__name__} of {len(reference)} items"
        for i, (v, r) in enumerate(zip(value, reference)):
            problem = _value_problem(v, r, x, f"{item}[{i}]", where)
            if problem:
                return problem
        return None
    if type(value) in (tuple, list) or _is_stored_array(value) and value.shape not in ((), x.shape):
        return f"{at} is {_shape_of(value)}, where the rule keeps a number"
    return None


def same_dtype(a, b):
    return a == b or a.newbyteorder("<") == b.newbyteorder("<")


def _is_stored_array(value):
    return isinstance(value, (np.ndarray, np.generic, _Slot)) or is_foreign_array(value)


def _shape_of(value):
    if _is_stored_array(value):
        return f"an array of dtype {value.dtype} and shape {value.shape}"
    if type(value) in (tuple, list):
        return f"a {type(value).__name__} of {len(value)} items"
    return "None" if value is None else f"a {type(value).__name__}"


# --- load --------------------------------------------------------------------------
def load(path: str | os.PathLike[str], like: Any) -> Any:
    """Read a checkpoint into a copy of `like`; returns the model, or `(model, state)` if the file has a state.

    `like` gives the structure: a model of the same kind (for instance freshly built with
    the same arguments). Every array of `like` must have a stored value of the same shape
    and dtype at the same path, with the same ties, and the file must store nothing else.
    The result is `like` rebuilt around new arrays holding the stored values; `like` itself
    is never changed. Random generators get the file's states, in new generator objects (see the
    module docstring). Other fields are taken from `like`. The state, when present, is
    rebuilt for the new model with the stored rules, hyperparameters, frozen flags and rule
    states (moments, step counters), each checked to fit its parameter. Any problem raises
    `CheckpointError` naming it, before anything larger than `like` is allocated. A `path`
    ending in ``.safetensors`` is read by `pb.load` as a safetensors file instead, in
    pullback's or PyTorch's layout (see `pullback.safetensors_io`).

    >>> import os, tempfile, numpy as np
    >>> from pullback import checkpoint
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     checkpoint.save(os.path.join(folder, "m.ckpt"), {"w": np.ones(2)})
    ...     checkpoint.load(os.path.join(folder, "m.ckpt"), like={"w": np.zeros(3)})
    Traceback (most recent call last):
    ...
    pullback.checkpoint.CheckpointError: ...model['w']...
    """
    name = os.fsdecode(path)
    with open(name, "rb") as file:
        try:
            archive = zipfile.ZipFile(file)
        except _ZIP_ERRORS as error:
            raise CheckpointError(
                f"{name} is not a readable checkpoint: not a ZIP archive, or truncated ({error}).{_other_format(file)}"
            ) from None
        with archive:
            return _load(_Reader(archive, file, name), like)


def _load(reader, like):
    manifest = reader.manifest()
    plan = _match_like(reader, manifest["arrays"], like)
    generators = restored_generators(manifest.get("generators"), like, reader.fail)
    state_plan = None if manifest["state"] is None else _plan_state(reader, manifest["state"], like)
    # Every shape and dtype now agrees with `like`: only now is any entry read.
    replacements = {id(target): to_type_of(reader.array(spec, spec["paths"][0]).astype(dtype, copy=False), target)
                    for target, dtype, spec in plan}
    new_model = rebuilt(like, replacements | generators)
    if state_plan is None:
        return new_model
    return new_model, _build_state(reader, manifest["state"]["arrays"], state_plan, new_model)


def _other_format(file):
    """A hint naming the format of a file that is not a ZIP archive, where its first bytes tell; else ""."""
    with contextlib.suppress(OSError):
        file.seek(0)
        start = file.read(9)
        file.seek(0, os.SEEK_END)
        size = file.tell()
        if size == 0:
            return " The file is empty (0 bytes): whatever wrote it did not finish; save it again."
        if start.startswith(b"\x93NUMPY"):
            return " It is a NumPy .npy file: read it with np.load."
        if len(start) == 9 and start[8:] == b"{" and 8 + int.from_bytes(start[:8], "little") <= size:
            return " It looks like a safetensors file: load it by a path ending in .safetensors (rename it)."
    return ""


class _Reader:
    """Reads and checks the parts of one open checkpoint archive."""

    def __init__(self, archive, file, name):
        self.archive, self.file, self.name = archive, file, name

    def fail(self, message):
        raise CheckpointError(f"{self.name}: {message}")

    def open(self, entry, what, limit, limit_reason):
        """A bounded stream of the entry's bytes, after checking its ZIP records (none of its data is read yet)."""
        try:
            info = self.archive.getinfo(entry)
        except KeyError:
            self.fail(f"the entry {entry} ({what}) is missing; the file is incomplete or was edited.")
        label = f"the entry {entry} ({what})"
        if info.flag_bits & 0x1:
            self.fail(f"{label} is marked as encrypted (ZIP flag bit 0); checkpoints are never encrypted, so the file is corrupted.")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            self.fail(f"{label} uses ZIP compression method {info.compress_type}; checkpoint entries are stored or deflated.")
        if info.file_size > limit:
            self.fail(f"{label} is {info.file_size} bytes, more than {limit_reason}.")
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            self.fail(f"{label} is corrupted: it declares {info.file_size} bytes but stores {info.compress_size}.")
        try:
            self.file.seek(info.header_offset)
            header = self.file.read(30)
            if len(header) < 30 or header[:4] != b"PK\x03\x04":
                raise ValueError("its local header is missing")
            flags, method = struct.unpack("<HH", header[6:10])
            name_length, extra_length = struct.unpack("<HH", header[26:30])
            local_name = self.file.read(name_length).decode("utf-8" if flags & 0x800 else "cp437")
        except (OSError, ValueError) as error:  # ValueError includes a bad name's UnicodeDecodeError
            self.fail(f"{label} is corrupted or the file truncated: {error}.")
        if flags & 0x1:
            self.fail(f"{label} is marked as encrypted in its local header (ZIP flag bit 0); the file is corrupted.")
        if method != info.compress_type or local_name != info.orig_filename:
            self.fail(f"{label} is corrupted: its local header disagrees with the archive's directory.")
        start = info.header_offset + 30 + name_length + extra_length
        return _EntryStream(self, start, info, label)

    def manifest(self):
        names = self.archive.namelist()
        if MANIFEST not in names:
            torch_file = any(n == "data.pkl" or n.endswith("/data.pkl") for n in names)
            ours = any(n.startswith(("model/", "state/")) for n in names)
            self.fail(
                f"the entry {MANIFEST} (the manifest) is missing from this ZIP archive ({few(names, 3) or 'empty'}). "
                + ("It holds a checkpoint's entries, so it is a damaged checkpoint: restore a good copy or save again."
                   if ours else
                   "It is a torch.save file, not a pullback checkpoint: read it with torch.load and load its tensors "
                   "with pullback.nn.torch_interop.load_torch_state_dict(like, {k: v.numpy() for k, v in tensors.items()})."
                   if torch_file else
                   "It is not a pullback checkpoint; an .npz file is read with np.load, and its arrays loaded with "
                   "pb.load_state_dict(like, arrays).")
            )
        stream = self.open(MANIFEST, "the manifest", _MAX_MANIFEST, f"the {_MAX_MANIFEST // 2**20} MiB a manifest may have")
        raw = stream.read(stream.size)
        stream.finish()
        too_deep = f"{MANIFEST} is nested more than {_MAX_NESTING} levels deep, which no checkpoint manifest is."
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            self.fail(f"{MANIFEST} is not valid JSON ({error}).")
        except RecursionError:  # json recurses once per level
            self.fail(too_deep)
        if _nesting(manifest) > _MAX_NESTING:  # later steps recurse too
            self.fail(too_deep)
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            found = manifest.get("format") if isinstance(manifest, dict) else None
            self.fail(f"not a pullback checkpoint: the manifest's format is {found!r}, expected {FORMAT!r}.")
        version = manifest.get("version")
        if type(version) is not int or version not in (1, VERSION):
            newer = isinstance(version, int) and version > VERSION
            self.fail(
                f"checkpoint format version {version!r} is not supported; this pullback reads versions 1 and {VERSION}"
                + (" (the file was written by a newer pullback: upgrade to read it)." if newer else ".")
            )
        _expect(self, manifest, "arrays", list, "manifest")
        for i, spec in enumerate(manifest["arrays"]):
            self.check_spec(spec, f"arrays[{i}]", "paths")
            if not spec["paths"] or not all(isinstance(p, str) for p in spec["paths"]):
                self.fail(f"malformed manifest: arrays[{i}].paths must be a non-empty list of strings.")
        state = manifest.get("state")
        if state is not None:
            _expect(self, manifest, "state", dict, "manifest")
            for key in ("rules", "leaves", "arrays"):
                _expect(self, state, key, list, "manifest state")
            for i, spec in enumerate(state["arrays"]):
                self.check_spec(spec, f"state.arrays[{i}]", "path")
        return manifest

    def check_spec(self, spec, where, paths_key):
        if not isinstance(spec, dict):
            self.fail(f"malformed manifest: {where} must be an object.")
        for key, kind in (("entry", str), ("dtype", str), ("shape", list), ("sha256", str), (paths_key, (list, str))):
            _expect(self, spec, key, kind, where)
        if not all(type(n) is int and n >= 0 for n in spec["shape"]):
            self.fail(f"malformed manifest: {where}.shape must be a list of non-negative integers.")
        try:
            dtype = np.dtype(spec["dtype"])
        except (TypeError, ValueError):
            self.fail(f"malformed manifest: {where}.dtype {spec['dtype']!r} is not a NumPy dtype.")
        if dtype.hasobject:
            self.fail(f"{where} declares dtype {dtype}, an object dtype; checkpoints never hold pickled objects.")

    def array(self, spec, what):
        """The array stored in `spec['entry']`, checked against its checksums, dtype and shape.

        Callers have checked `spec`'s dtype and shape against `like`, and no more bytes than
        its `.npy` header and data need are ever read or inflated.
        """
        entry = spec["entry"]
        dtype, shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
        nbytes = dtype.itemsize * math.prod(shape)
        stream = self.open(entry, what, nbytes + _MAX_NPY_HEADER, "its dtype and shape need")
        label = stream.label
        try:
            version = np.lib.format.read_magic(stream)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read_header:
                raise ValueError(f".npy format version {version} is not one a checkpoint uses")
            stored_shape, fortran_order, stored_dtype = read_header[version](stream)
        except CheckpointError:  # the stream's own finding (a truncated entry)
            raise
        except Exception as error:  # numpy's header parser raises ValueError, SyntaxError and more
            self.fail(f"{label} is not a valid .npy array ({type(error).__name__}: {error}); the file is corrupted.")
        if stored_dtype != dtype or stored_shape != shape:
            self.fail(
                f"{label} holds dtype {stored_dtype} and shape {stored_shape}, "
                f"but the manifest says dtype {dtype} and shape {shape}."
            )
        if stream.remaining != nbytes:
            self.fail(f"{label} has {stream.remaining} bytes of data; dtype and shape need {nbytes}.")
        data = np.empty(nbytes, np.uint8)
        stream.readinto(data)
        stream.finish()
        if stream.sha256.hexdigest() != spec["sha256"]:
            self.fail(f"{label} fails its SHA-256 check: the file is corrupted or was edited.")
        return data.view(dtype).reshape(shape, order="F" if fortran_order else "C")


class _EntryStream:
    """The bytes of one archive entry, read (and inflated) a bounded piece at a time.

    It never yields more than the entry's declared size; `finish` then checks that the
    data ends exactly there and that its CRC-32 matches.
    """

    def __init__(self, reader, start, info, label):
        self.reader, self.info, self.label = reader, info, label
        self.size = self.remaining = info.file_size
        self.sha256 = hashlib.sha256()
        self._position, self._raw_left, self._crc = start, info.compress_size, 0
        self._inflater = zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
        self._pending = b""

    def fail(self, problem):
        self.reader.fail(f"{self.label} {problem}")

    def _raw(self, n):
        n = min(n, self._raw_left)
        try:
            self.reader.file.seek(self._position)
            data = self.reader.file.read(n)
        except OSError as error:
            self.fail(f"is corrupted: {error}")
        if len(data) != n:
            self.fail("is truncated: the file ends inside it.")
        self._position += n
        self._raw_left -= n
        return data

    def _inflate(self, limit):
        """Up to `limit` bytes more of the inflated data (b"" at the stream's end)."""
        if self._inflater.eof:
            return b""
        if not self._pending:
            self._pending = self._raw(_CHUNK)
            if not self._pending:
                self.fail("is corrupted: its compressed data ends before the end of its stream.")
        before = len(self._pending)
        try:
            piece = self._inflater.decompress(self._pending, limit)
        except zlib.error as error:
            self.fail(f"is corrupted: {error}")
        self._pending = self._inflater.unconsumed_tail
        if not piece and not self._inflater.eof and len(self._pending) == before:
            self.fail("is corrupted: its compressed data makes no progress.")
        return piece

    def read(self, n):
        """Up to `n` bytes: fewer only at the entry's declared end."""
        n = min(n, self.remaining)
        pieces, got = [], 0
        while got < n:
            piece = self._raw(n - got) if self._inflater is None else self._inflate(min(n - got, _CHUNK))
            if not piece and self._inflater is not None and self._inflater.eof:
                self.fail(f"inflates to {self.size - self.remaining + got} bytes, fewer than the {self.size} it declares.")
            pieces.append(piece)
            got += len(piece)
        data = b"".join(pieces)
        self.remaining -= len(data)
        self._crc = zlib.crc32(data, self._crc)
        self.sha256.update(data)
        return data

    def readinto(self, buffer):
        view = memoryview(buffer).cast("B")
        for start in range(0, len(view), _CHUNK):
            piece = self.read(min(_CHUNK, len(view) - start))
            view[start : start + len(piece)] = piece

    def finish(self):
        """Check that the data ends exactly at the declared size and matches its CRC-32."""
        if self.remaining:
            self.fail(f"has {self.remaining} bytes more than its contents need.")
        if self._inflater is not None:
            while not self._inflater.eof:
                if self._inflate(1):
                    self.fail(f"inflates to more than the {self.size} bytes it declares; the file is corrupted or crafted.")
            if self._inflater.unused_data or self._raw_left:
                self.fail("has data after the end of its compressed stream; the file is corrupted.")
        if self._crc != self.info.CRC:
            self.fail("is corrupted: its CRC-32 does not match.")


def _nesting(value):
    """How many levels of lists and dicts `value` has (without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (list, dict)):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def _expect(reader, obj, key, kind, where):
    if not isinstance(obj, dict) or key not in obj or not isinstance(obj[key], kind) or isinstance(obj[key], bool):
        reader.fail(f"malformed manifest: {where} needs a field {key!r} of the right type.")


def _match_like(reader, specs, like):
    """Check the stored arrays against `like`: `[(array of like, its NumPy dtype, spec)]`, nothing read yet.

    A stored dtype may differ from `like`'s in byte order only (a file written on a big-endian machine);
    the values are read into `like`'s.
    """
    try:
        groups = _array_groups(like)
    except CheckpointError as error:
        reader.fail(f"cannot load into `like`: {error}")
    at = {p: x for x, paths in groups.values() for p in paths}
    group_of = {id(x): set(paths) for x, paths in groups.values()}
    plan = []
    covered = set()
    for spec in specs:
        paths = spec["paths"]
        for p in paths:
            if p in covered:
                reader.fail(f"malformed manifest: {p} is listed twice.")
            if p not in at:
                reader.fail(
                    f"the file has an array for {p}, but `like` has no array there; "
                    "`like` must be built the same way as the saved model."
                )
        target = at[paths[0]]
        for p in paths[1:]:
            if at[p] is not target:
                reader.fail(f"the file ties {paths[0]} and {p} (one shared array), but in `like` they are different arrays.")
        if group_of[id(target)] != set(paths):
            extra = sorted(group_of[id(target)] - set(paths))[0]
            reader.fail(f"in `like`, {paths[0]} and {extra} are one shared array, but the file stores them separately.")
        dtype, shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
        target_dtype = numpy_dtype(target, lambda: paths[0])
        if tuple(target.shape) != shape or not same_dtype(target_dtype, dtype):
            reader.fail(
                f"{paths[0]} has shape {shape} and dtype {dtype} in the file, "
                f"but shape {tuple(target.shape)} and dtype {target_dtype} in `like`."
            )
        covered.update(paths)
        plan.append((target, target_dtype, spec))
    missing = [p for p in at if p not in covered]
    if missing:
        reader.fail(f"`like` has an array at {missing[0]}, but the file has no value for it.")
    return plan


class _Slot:
    """A state array not read yet: its place in the manifest's state arrays, dtype and shape."""

    def __init__(self, index, spec, scalar):
        self.index, self.scalar = index, scalar
        self.dtype, self.shape = np.dtype(spec["dtype"]), tuple(spec["shape"])


def _plan_state(reader, manifest, like):
    """The state's leaves by first path, `{path: (rule, value with _Slots, frozen)}`, checked against `like`."""
    specs = manifest["arrays"]
    rules = [_decode_rule(reader, r, f"state.rules[{i}]") for i, r in enumerate(manifest["rules"])]
    used = set()
    leaves = {}
    for i, leaf in enumerate(manifest["leaves"]):
        where = f"state.leaves[{i}]"
        if not isinstance(leaf, dict):
            reader.fail(f"malformed manifest: {where} must be an object.")
        _expect(reader, leaf, "paths", list, where)
        _expect(reader, leaf, "rule", int, where)
        if not leaf["paths"] or not isinstance(leaf["paths"][0], str) or not 0 <= leaf["rule"] < len(rules):
            reader.fail(f"malformed manifest: {where} needs a path and a valid rule index.")
        if not isinstance(leaf.get("frozen"), bool):
            reader.fail(f"malformed manifest: {where}.frozen must be true or false.")
        if leaf["paths"][0] in leaves:
            reader.fail(f"malformed manifest: the optimiser state for {leaf['paths'][0]} is listed twice.")
        value = _decode_value(reader, leaf.get("value"), specs, used, where)
        leaves[leaf["paths"][0]] = (rules[leaf["rule"]], value, leaf["frozen"])

    pending = dict(leaves)

    def check(x, path):
        if path not in pending:
            reader.fail(f"the optimiser state has no entry for {path}, which the model trains.")
        rule, value, _ = pending.pop(path)
        problem = _rule_state_problem(rule, value, x)
        if problem:
            reader.fail(
                f"the optimiser state for {path} does not fit the parameter there ({_shape_of(x)}): {problem}. "
                "The state was saved for a model of other shapes; load it with a `like` built the same way, "
                "or start a new state with setup(rule, model)."
            )

    mirror(like, check)
    if pending:
        reader.fail(f"the optimiser state has an entry for {next(iter(pending))}, which is not a trainable array of `like`.")
    unused = sorted(set(range(len(specs))) - used)
    if unused:
        reader.fail(f"malformed manifest: state.arrays[{unused[0]}] belongs to no optimiser state entry.")
    return leaves


def _build_state(reader, specs, leaves, model):
    arrays = [reader.array(spec, f"optimiser state for {spec['path']}") for spec in specs]
    arrays = [x.astype(x.dtype.newbyteorder("="), copy=False) for x in arrays]  # native byte order

    def build(x, path):
        rule, value, frozen = leaves[path]
        return Leaf(rule, _fill(value, arrays, x), frozen)

    return mirror(model, build)


def _fill(value, arrays, x):
    """`value` with each `_Slot` replaced by the array read for it, arrays of parameter `x`'s type (a Dask
    parameter's moments as Dask arrays)."""
    if isinstance(value, _Slot):
        return arrays[value.index][()] if value.scalar else to_type_of(arrays[value.index], x)
    if type(value) in (tuple, list):
        return type(value)(_fill(v, arrays, x) for v in value)
    return value


def _decode_rule(reader, spec, where):
    if not isinstance(spec, dict) or not isinstance(spec.get("rule"), str) or not isinstance(spec.get("hyper"), dict):
        reader.fail(f"malformed manifest: {where} must be {{'rule': name, 'hyper': {{...}}}}.")
    cls = RULES.get(spec["rule"])
    if cls is None:
        reader.fail(
            f"the optimisation rule {spec['rule']!r} ({where}) is not defined here; "
            "import the module that defines it before loading."
        )
    hyper = {k: _decode_hyper(reader, v, where) for k, v in spec["hyper"].items()}
    expected = {f.name for f in dataclasses.fields(cls)}
    if set(hyper) != expected:
        reader.fail(f"{where}: the rule {spec['rule']} has hyperparameters {sorted(expected)}, the file gives {sorted(hyper)}.")
    try:
        return cls.from_hyperparameters(hyper)
    except (TypeError, ValueError) as error:
        reader.fail(f"{where}: cannot rebuild {spec['rule']} from the stored hyperparameters: {error}")


def _decode_hyper(reader, value, where):
    if isinstance(value, dict):
        if "rule" in value:
            return _decode_rule(reader, value, where)
        if len(value) == 1 and set(value) <= {"tuple", "list"} and isinstance(next(iter(value.values())), list):
            (kind, items), = value.items()
            return (tuple if kind == "tuple" else list)(_decode_hyper(reader, v, where) for v in items)
        if set(value) == {"float"}:
            return _decode_float(reader, value["float"], where)
        reader.fail(f"malformed manifest: {where} has a hyperparameter {value!r} of unknown form.")
    if isinstance(value, list):
        reader.fail(f"malformed manifest: {where} has a bare list as hyperparameter.")
    return value


def _decode_float(reader, text, where):
    if text not in ("inf", "-inf", "nan"):
        reader.fail(f"malformed manifest: {where} has a float {text!r}; only inf, -inf and nan are written as text.")
    return float(text)


def _decode_value(reader, value, specs, used, where):
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (kind, inner), = value.items()
        if kind in ("array", "scalar"):
            if type(inner) is not int or not 0 <= inner < len(specs):
                reader.fail(f"malformed manifest: {where} refers to state array {inner!r}, which does not exist.")
            if inner in used:
                reader.fail(f"malformed manifest: state array {inner} is used twice ({where}).")
            used.add(inner)
            slot = _Slot(inner, specs[inner], kind == "scalar")
            if slot.scalar and slot.shape != ():
                reader.fail(f"malformed manifest: {where} stores a scalar in state array {inner}, which has shape {slot.shape}.")
            return slot
        if kind in ("tuple", "list") and isinstance(inner, list):
            items = [_decode_value(reader, v, specs, used, where) for v in inner]
            return tuple(items) if kind == "tuple" else items
        if kind == "float":
            return _decode_float(reader, inner, where)
    reader.fail(f"malformed manifest: {where} has a state value {value!r} of unknown form.")


# --- state dicts ---------------------------------------------------------------------------
def state_dict(model: Any) -> dict[str, np.ndarray]:
    """Every array of `model` (trainable or not) by key: `{"layers[0].weight": array, ...}`.

    A key is the place's checkpoint path without the leading ``model``: ``.name`` for a
    field (the first dot dropped), ``[i]`` for a tuple or list item, ``['key']`` for a dict
    entry, so ``"layers[0].weight"`` or ``"['embed']"``. Keys come in walk order and are the
    same in every process (dict keys must be str, int, bool, None or tuples of these). The
    values are the model's own arrays, not copies; a tied array appears under each of its keys.

    >>> import numpy as np, pullback as pb
    >>> pb.checkpoint.state_dict(pb.nn.Dense(2, 1))
    {'weight': array([[...]], dtype=float32), 'bias': array([0.], dtype=float32)}
    """
    return {_key(p): x for p, x in _array_places(model)}


def load_state_dict(model: Model, state: Mapping[str, ArrayLike]) -> Model:
    """A copy of `model` holding the arrays of `state` (a dict as `state_dict` gives); `model` is not changed.

    Every key of `state_dict(model)` must be present and no other; each value must have the
    shape and dtype (in any byte order) of the array it replaces, and the places of a tied
    array must get equal values. The new arrays are copies, so later changes to `state`
    cannot reach the model. Random generators (a Dropout's), which `state_dict` leaves out as
    PyTorch's does, come back as copies: the same state in new objects, so drawing from the result
    does not advance `model`'s (one generator at two places is one copy at both). Any problem
    raises `CheckpointError` naming the keys.

    >>> import numpy as np, pullback as pb
    >>> model = {"w": np.zeros(2), "step": np.array(0)}
    >>> pb.checkpoint.load_state_dict(model, {"['w']": np.array([1.0, 2.0]), "['step']": np.array(7)})
    {'w': array([1., 2.]), 'step': array(7)}
    """
    if not hasattr(state, "keys") or not hasattr(state, "__getitem__"):
        raise TypeError(f"load_state_dict(model, state) takes a dict of arrays as state_dict gives, not {type(state).__name__}")
    places = _array_places(model)
    expected = [_key(p) for p, _ in places]
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state.keys() if k not in set(expected)]
    if missing or unexpected:
        raise CheckpointError(
            "The state dict does not match the model: "
            + "; ".join(f"{what} keys {few(keys)}" for what, keys in (("missing", missing), ("unexpected", unexpected)) if keys)
            + ". Its keys must be those of state_dict(model) for a model built the same way."
        )
    groups: dict[int, tuple[Any, list[str]]] = {}
    for p, x in places:
        groups.setdefault(id(x), (x, []))[1].append(p)
    replacements = {}
    for x, paths in groups.values():
        keys = [_key(p) for p in paths]
        dtype = numpy_dtype(x, lambda: keys[0])
        values = [to_numpy(state[k], lambda: f"The state dict's {k}") for k in keys]
        for k, v in zip(keys, values):
            if v.shape != tuple(x.shape) or not same_dtype(v.dtype, dtype):
                raise CheckpointError(
                    f"The state dict's {k} has shape {v.shape} and dtype {v.dtype}, but the model's array there has "
                    f"shape {tuple(x.shape)} and dtype {dtype}; convert it (for instance .astype) or build the model to match."
                )
        first = values[0].astype(dtype, copy=False)
        for k, v in zip(keys[1:], values[1:]):
            if v is not values[0] and _bytes(v.astype(dtype, copy=False)) != _bytes(first):
                raise CheckpointError(
                    f"In the model, {keys[0]} and {k} are one shared array, but the state dict gives them different values."
                )
        replacements[id(x)] = to_type_of(np.array(first, dtype=dtype, copy=True, order="K"), x)
    return rebuilt(model, replacements | rng_states.copies(model))


def _key(path):
    """A state-dict key: the checkpoint path without its ``model`` root (and the dot after it)."""
    key = path[len("model"):]
    return key[1:] if key.startswith(".") else key


def few(keys, n=5):
    shown = ", ".join(keys[:n])
    return shown + (f" and {len(keys) - n} more" if len(keys) > n else "")


def _bytes(x):
    return np.ascontiguousarray(x).tobytes()
