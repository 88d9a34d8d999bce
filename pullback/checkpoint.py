"""Checkpoints: a model's arrays, and optionally an optimiser state, in one portable file.

`save(path, model, state=None)` writes; `load(path, like=model)` reads into a copy of `like`.

Format (``pullback-checkpoint``, version 1)
------------------------------------------

A checkpoint is a ZIP archive (stored, not compressed) holding:

- ``model/<i>.npy`` and ``state/<i>.npy``: one array each, in NumPy's ``.npy`` format,
  written with ``allow_pickle=False``;
- ``manifest.json``: UTF-8 JSON describing everything else::

    {"format": "pullback-checkpoint", "version": 1, "written_by": "pullback 0.1.0",
     "model_type": "Chain",
     "arrays": [{"entry": "model/0.npy", "paths": ["model.layers[0].weight"],
                 "dtype": "<f4", "shape": [1, 2], "sha256": "<hex digest of the entry>"}, ...],
     "state": null}

A path names a place inside the model: ``.name`` for an object's field (or a namedtuple's),
``[i]`` for a tuple or list item, ``['key']`` for a dict entry, starting from ``model``.
Every NumPy array reachable in the model is stored, trainable or not (running statistics
too), each once: ``paths`` lists every place an array object appears, so ties are kept.
Other fields (numbers, strings, functions, flags) are not stored; they come from `like`.

With an optimiser state, ``"state"`` is::

    {"rules": [{"rule": "Adam", "hyper": {"lr": 0.001, "beta1": 0.9, ...}}, ...],
     "leaves": [{"paths": ["model.layers[0].weight"], "rule": 0, "frozen": false,
                 "value": {"tuple": [{"array": 0}, {"array": 1}, 7]}}, ...],
     "arrays": [{"entry": "state/0.npy", "path": "...", "dtype": ..., "shape": ..., "sha256": ...}, ...]}

One leaf per distinct trainable array, keyed by the array's first path. A rule is named
(``"Adam"`` for the built-in rules, ``"module:Class"`` for a `pullback.optim.Rule` subclass
of your own, which must be imported before loading) with JSON hyperparameters (a
non-finite float as below); an ``OptimiserChain``'s ``hyper`` is
``{"rules": {"tuple": [rule, ...]}}``. A rule's state
value is encoded as: a JSON number, bool or null for itself; ``{"array": i}`` for state
array ``i``; ``{"scalar": i}`` for a NumPy scalar kept as 0-d array ``i``; ``{"tuple": [...]}``
and ``{"list": [...]}`` for sequences; ``{"float": "inf"}`` (or ``"-inf"``, ``"nan"``) for a
non-finite float.

Loading never runs code from the file: it parses JSON and ``.npy`` headers, refuses
pickled (object) arrays, and builds rules only from classes already defined in the process.
Every entry's SHA-256 is checked, each ``.npy`` header must agree with the manifest (and
the entry's length with both) before any array is allocated, and each model array's
dtype and shape must match `like`. A file with another format name or version is refused.
The archive is also a valid ``.npz``: ``numpy.load(path)["model/0"]`` reads an array
without pullback.

Saving is atomic: the file is written under a temporary name in the same directory
(``.<name>.<random>.tmp``), flushed to disk (fsync) and moved over `path` with
`os.replace`, then the directory is synced. An error part way removes the temporary file;
a crash may leave it behind, but either way any old file at `path` is untouched.
"""

import contextlib
import dataclasses
import hashlib
import io
import json
import math
import os
import secrets
import struct
import zipfile
import zlib

import numpy as np

from . import tree
from ._trace import stop_gradient
from .optim._state import Leaf, mirror
from .optim._update import _pair
from .optim._walk import join, model_children
from .optim.rules import RULES, Rule, rule_name

__all__ = ["save", "load", "CheckpointError", "FORMAT", "VERSION"]

FORMAT = "pullback-checkpoint"
VERSION = 1
MANIFEST = "manifest.json"
# What reading a damaged archive can raise (OSError: a seek to a corrupted offset).
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, struct.error, zlib.error, NotImplementedError, OSError)
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_MAX_NPY_HEADER = 65536 + 16  # identical inputs give identical files


class CheckpointError(ValueError):
    """A checkpoint cannot be written or read: the message says what and where."""


# --- save --------------------------------------------------------------------------
def save(path, model, state=None):
    """Write `model`'s arrays (and `state`, an optimiser state for `model`) to `path`, atomically.

    Everything is checked before the file is touched; an existing file at `path` is only
    replaced once the new one is complete on disk. See the module docstring for the format.

    >>> import os, tempfile, numpy as np, pullback as pb
    >>> model = {"w": np.arange(3.0), "mask": np.array([True, False])}
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     pb.save(os.path.join(folder, "model.ckpt"), model)
    ...     pb.load(os.path.join(folder, "model.ckpt"), like={"w": np.zeros(3), "mask": np.ones(2, bool)})
    {'w': array([0., 1., 2.]), 'mask': array([ True, False])}
    """
    groups = _array_groups(model)
    arrays = [(x, paths) for x, paths in groups.values()]
    state_manifest, state_arrays = (None, []) if state is None else _encode_state(state, model)

    def write(file):
        with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_STORED) as archive:
            specs = []
            for i, (x, paths) in enumerate(arrays):
                spec = _write_array(archive, f"model/{i}.npy", x)
                spec["paths"] = paths
                specs.append(spec)
            if state_manifest is not None:
                state_manifest["arrays"] = []
                for i, (x, where) in enumerate(state_arrays):
                    spec = _write_array(archive, f"state/{i}.npy", x)
                    spec["path"] = where
                    state_manifest["arrays"].append(spec)
            manifest = {
                "format": FORMAT, "version": VERSION, "written_by": f"pullback {_version()}",
                "model_type": type(model).__name__, "arrays": specs, "state": state_manifest,
            }
            text = json.dumps(manifest, indent=1, allow_nan=False)
            archive.writestr(zipfile.ZipInfo(MANIFEST, _FIXED_TIME), text.encode("utf-8"))

    _write_atomically(path, write)


def _version():
    from . import __version__

    return __version__


def _array_groups(model):
    """`{id: (array, [paths])}` for every array reachable in `model`, in walk order."""
    groups = {}

    def walk(x, path, ancestors):
        if stop_gradient(x) is not x:
            raise CheckpointError(f"{path} is being differentiated; save the model outside gradient calls.")
        if isinstance(x, np.ndarray):
            _check_storable(x, path)
            groups.setdefault(id(x), (x, []))[1].append(path)
            return
        kids, _ = model_children(x)
        if not kids or id(x) in ancestors:
            return
        ancestors.add(id(x))
        for k, v in kids.items():
            walk(v, join(path, x, k), ancestors)
        ancestors.discard(id(x))

    walk(model, "model", set())
    return groups


def _check_storable(x, where):
    if type(x) is not np.ndarray:
        raise CheckpointError(f"{where} is a {type(x).__name__}; checkpoints store plain numpy.ndarray values only.")
    dtype = x.dtype
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or np.dtype(dtype.str) != dtype:
        raise CheckpointError(
            f"{where} has dtype {dtype}, which a checkpoint cannot store without pickle; "
            "convert it to a numeric, boolean or string array."
        )


def _write_array(archive, name, x):
    digest = hashlib.sha256()
    info = zipfile.ZipInfo(name, _FIXED_TIME)
    with archive.open(info, "w", force_zip64=x.nbytes > 2**30) as out:
        np.lib.format.write_array(_Hashing(out, digest), x, allow_pickle=False)
    return {"entry": name, "dtype": x.dtype.str, "shape": list(x.shape), "sha256": digest.hexdigest()}


class _Hashing:
    """A writable file that also feeds what it writes to a hash."""

    def __init__(self, out, digest):
        self._out, self._digest = out, digest

    def write(self, data):
        self._digest.update(data)
        return self._out.write(data)


def _encode_state(state, model):
    """The manifest's `state` part (without its `arrays`) and the state arrays to store."""
    entries = _pair(state, model, None)
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
    for leaf, x, _, paths in entries.values():
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
    if RULES.get(name) is not type(rule):
        raise CheckpointError(f"The rule {rule!r} at {where} is not a registered pullback.optim.Rule subclass.")
    return {"rule": name, "hyper": {k: _encode_hyper(v, where) for k, v in rule.hyperparameters().items()}}


def _encode_hyper(value, where):
    if isinstance(value, Rule):
        return _encode_rule(value, where)
    if isinstance(value, (tuple, list)):
        return {"tuple": [_encode_hyper(v, where) for v in value]}
    if isinstance(value, float) and not isinstance(value, np.generic):
        return value if math.isfinite(value) else {"float": repr(value)}
    if value is None or isinstance(value, (bool, int, str)) and not isinstance(value, np.generic):
        return value
    raise CheckpointError(f"The rule at {where} has a hyperparameter {value!r} that a checkpoint cannot store.")


def _encode_value(value, arrays, where):
    if isinstance(value, np.ndarray):
        _check_storable(value, f"the optimiser state for {where}")
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
        f"The optimiser state for {where} holds a {type(value).__name__}; checkpoints store arrays, numbers, "
        "None, tuples and lists."
    )


def _write_atomically(path, write):
    """Run `write(file)` on a temporary file next to `path`, sync it, then move it over `path`."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_folder(folder)


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


# --- load --------------------------------------------------------------------------
def load(path, like):
    """Read a checkpoint into a copy of `like`; returns the model, or `(model, state)` if the file has a state.

    `like` gives the structure: a model of the same kind (for instance freshly built with
    the same arguments). Every array of `like` must have a stored value of the same shape
    and dtype at the same path, with the same ties, and the file must store nothing else.
    The result is `like` rebuilt around new arrays holding the stored values; `like` itself
    is never changed. Non-array fields are taken from `like`. The state, when present, is
    rebuilt for the new model with the stored rules, hyperparameters, frozen flags and rule
    states (moments, step counters). Any problem raises `CheckpointError` naming it.

    >>> import os, tempfile, numpy as np, pullback as pb
    >>> model = [np.array([1.0, 2.0])]
    >>> state = pb.optim.setup(pb.optim.Adam(), model)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     pb.save(os.path.join(folder, "run.ckpt"), model, state)
    ...     model2, state2 = pb.load(os.path.join(folder, "run.ckpt"), like=[np.zeros(2)])
    >>> model2, state2[0].rule
    ([array([1., 2.])], Adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08))
    """
    name = os.fspath(path)
    with open(name, "rb") as file:
        try:
            archive = zipfile.ZipFile(file)
        except _ZIP_ERRORS as error:
            raise CheckpointError(f"{name} is not a readable checkpoint: not a ZIP archive, or truncated ({error}).") from None
        with archive:
            return _load(archive, name, like)


def _load(archive, name, like):
    reader = _Reader(archive, name)
    manifest = reader.manifest()
    replacements = _match_like(reader, manifest["arrays"], like)
    new_model = tree.fmap(lambda a: replacements.get(id(a), a), like) if replacements else like
    if manifest["state"] is None:
        return new_model
    return new_model, _decode_state(reader, manifest["state"], new_model)


class _Reader:
    """Reads and checks the parts of one open checkpoint archive."""

    def __init__(self, archive, name):
        self.archive, self.name = archive, name

    def fail(self, message):
        raise CheckpointError(f"{self.name}: {message}")

    def read(self, entry, what, limit=None):
        try:
            info = self.archive.getinfo(entry)
        except KeyError:
            self.fail(f"the entry {entry} ({what}) is missing; the file is incomplete or was edited.")
        if limit is not None and info.file_size > limit:
            self.fail(f"the entry {entry} ({what}) is {info.file_size} bytes, more than its dtype and shape need.")
        try:
            return self.archive.read(info)
        except _ZIP_ERRORS as error:
            self.fail(f"the entry {entry} ({what}) is corrupted: {error}")

    def manifest(self):
        raw = self.read(MANIFEST, "the manifest")
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            self.fail(f"{MANIFEST} is not valid JSON ({error}).")
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            found = manifest.get("format") if isinstance(manifest, dict) else None
            self.fail(f"not a pullback checkpoint: the manifest's format is {found!r}, expected {FORMAT!r}.")
        version = manifest.get("version")
        if type(version) is not int or version != VERSION:
            newer = isinstance(version, int) and version > VERSION
            self.fail(
                f"checkpoint format version {version!r} is not supported; this pullback reads version {VERSION}"
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
        """The array stored in `spec['entry']`, checked against its checksum, dtype and shape.

        The `.npy` header is read and checked before any array is allocated, so a crafted
        header cannot ask for more memory than the file holds.
        """
        entry = spec["entry"]
        dtype, shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
        nbytes = dtype.itemsize * math.prod(shape)
        data = self.read(entry, what, limit=nbytes + _MAX_NPY_HEADER)
        if hashlib.sha256(data).hexdigest() != spec["sha256"]:
            self.fail(f"the entry {entry} ({what}) fails its SHA-256 check: the file is corrupted or was edited.")
        stream = io.BytesIO(data)
        try:
            version = np.lib.format.read_magic(stream)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read_header:
                raise ValueError(f".npy format version {version} is not one a checkpoint uses")
            stored_shape, _, stored_dtype = read_header[version](stream)
        except ValueError as error:  # a malformed header, or one describing pickled objects
            self.fail(f"the entry {entry} ({what}) is not a valid .npy array: {error}")
        if stored_dtype != dtype or stored_shape != shape:
            self.fail(
                f"the entry {entry} ({what}) holds dtype {stored_dtype} and shape {stored_shape}, "
                f"but the manifest says dtype {dtype} and shape {shape}."
            )
        if len(data) - stream.tell() != nbytes:
            self.fail(f"the entry {entry} ({what}) has {len(data) - stream.tell()} bytes of data; dtype and shape need {nbytes}.")
        stream.seek(0)
        x = np.lib.format.read_array(stream, allow_pickle=False)
        return x if x.flags.writeable else x.copy()


def _expect(reader, obj, key, kind, where):
    if not isinstance(obj, dict) or key not in obj or not isinstance(obj[key], kind) or isinstance(obj[key], bool):
        reader.fail(f"malformed manifest: {where} needs a field {key!r} of the right type.")


def _match_like(reader, specs, like):
    """Check the stored arrays against `like` and read them: `{id(array of like): loaded array}`."""
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
        if target.shape != shape or target.dtype != dtype:
            reader.fail(
                f"{paths[0]} has shape {shape} and dtype {dtype} in the file, "
                f"but shape {target.shape} and dtype {target.dtype} in `like`."
            )
        covered.update(paths)
        plan.append((target, spec))
    missing = [p for p in at if p not in covered]
    if missing:
        reader.fail(f"`like` has an array at {missing[0]}, but the file has no value for it.")
    return {id(target): reader.array(spec, spec["paths"][0]) for target, spec in plan}


def _decode_state(reader, manifest, model):
    arrays = [reader.array(spec, f"optimiser state for {spec['path']}") for spec in manifest["arrays"]]
    rules = [_decode_rule(reader, r, f"state.rules[{i}]") for i, r in enumerate(manifest["rules"])]
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
        value = _decode_value(reader, leaf.get("value"), arrays, where)
        if leaf["paths"][0] in leaves:
            reader.fail(f"malformed manifest: the optimiser state for {leaf['paths'][0]} is listed twice.")
        leaves[leaf["paths"][0]] = Leaf(rules[leaf["rule"]], value, leaf["frozen"])

    def stored_leaf(x, path):
        leaf = leaves.pop(path, None)
        if leaf is None:
            reader.fail(f"the optimiser state has no entry for {path}, which the model trains.")
        return leaf

    state = mirror(model, stored_leaf)
    if leaves:
        reader.fail(f"the optimiser state has an entry for {next(iter(leaves))}, which is not a trainable array of `like`.")
    return state


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
        if set(value) == {"tuple"} and isinstance(value["tuple"], list):
            return tuple(_decode_hyper(reader, v, where) for v in value["tuple"])
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


def _decode_value(reader, value, arrays, where):
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (kind, inner), = value.items()
        if kind in ("array", "scalar"):
            if type(inner) is not int or not 0 <= inner < len(arrays):
                reader.fail(f"malformed manifest: {where} refers to state array {inner!r}, which does not exist.")
            return arrays[inner] if kind == "array" else arrays[inner][()]
        if kind in ("tuple", "list") and isinstance(inner, list):
            items = [_decode_value(reader, v, arrays, where) for v in inner]
            return tuple(items) if kind == "tuple" else items
        if kind == "float":
            return _decode_float(reader, inner, where)
    reader.fail(f"malformed manifest: {where} has a state value {value!r} of unknown form.")
