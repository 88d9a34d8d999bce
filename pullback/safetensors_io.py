"""Models as safetensors files: `pb.save("m.safetensors", model)` and `pb.load("m.safetensors", like=model)`.

A safetensors file is a flat map of names to arrays, read by the `safetensors` package
(``safetensors.numpy.load_file``), PyTorch (``safetensors.torch.load_file``) and others.
pullback writes `state_dict(model)`: every array of the model under its state-dict key
(``"layers[0].weight"``), C-ordered and little-endian, a tied array under each of its keys,
with the metadata ``{"format": "pullback", "sha256": <JSON text {key: hex digest}>}``: the
SHA-256 of each array's bytes in the file (a JSON text, as metadata values are strings). Loading
checks every array of a file with such digests, and refuses one that fails as corrupted;
safetensors itself keeps no checksum, so a file without them (another program's, or an older
pullback's) is read unchecked. Another library's array (Dask, array API) is stored as a
checkpoint stores it, and comes back as an array of the type of `like`'s. The model's random
generators (a Dropout's ``np.random.Generator``, a ``RandomState``, a bare bit generator, a
``SeedSequence``, a ``random.Random``), if any, are stored as a checkpoint stores them, under the metadata key ``"generators"`` (the JSON text of a checkpoint
manifest's ``generators``, which other readers ignore), and restored with the same checks; a file
without that key (another program's, an older pullback's) leaves each a copy of `like`'s. Optimiser
states are not stored (use a ``.ckpt`` checkpoint); nor are arrays of dtypes safetensors lacks
(strings, float128, complex128).

Loading takes the layout from the file: a file written by pullback, or one whose names are
exactly those of `state_dict(like)`, is read name by name (shape and dtype must match
`like`; tied places must hold equal arrays). Without pullback's metadata, such names may be
PyTorch's (a model with the same attribute names): 4-d filters that fit only PyTorch's layout
are read as PyTorch's, and a file whose filters fit both is refused. Any other file is taken
as a PyTorch state dict (a torchvision checkpoint, say) and mapped with
`pullback.nn.torch_interop.load_torch_state_dict`, pairing modules in natural key order
(safetensors does not keep PyTorch's order) and converting layouts; float arrays are cast
to `like`'s dtypes where every value survives the cast (a cast that would round or overflow,
such as float64 weights into a float32 model, is refused). Natural order is module order where
same-shaped modules differ in the numbers of their names (``layer1.0.conv1``, ``layer1.0.conv2``,
``layer1.1.conv1``) or sit at different depths (``bn1`` and ``layer1.0.bn1``, as in
torchvision's ResNets; this is a convention, not a proof: a module ``head`` defined before a block ``blocks.0`` of the same
shapes would be taken after it, so load such a file with `load_torch_state_dict` in module
order). A file with two modules of the same array names and shapes, at the same depth, whose
names first differ in more than numbers (``proj`` and ``out``: alphabetical order says nothing
about the model's) is refused as ambiguous, naming them. bfloat16 arrays (most published PyTorch weights) are
read exactly as float32. Either way every name and shape is checked against `like` before any
array is read, and arrays are read one at a time. `like` itself is never changed; the result
is a copy.

The `safetensors` package is imported only when such a file is saved or loaded:
``pip install "pullback[safetensors]"``.
"""

import functools
import hashlib
import json
import os
import re
import struct

import numpy as np

from .checkpoint import (
    CheckpointError,
    check_path,
    few,
    generator_specs,
    numpy_dtype,
    rebuilt,
    restored_generators,
    same_dtype,
    state_dict,
    to_numpy,
    to_type_of,
    write_atomically,
)

__all__ = ["save", "load"]

METADATA = {"format": "pullback"}
# What safetensors stores, by NumPy dtype and by the file's names for them.
_DTYPES = {
    "BOOL": np.dtype(bool), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8), "U16": np.dtype(np.uint16),
    "I16": np.dtype(np.int16), "U32": np.dtype(np.uint32), "I32": np.dtype(np.int32), "U64": np.dtype(np.uint64),
    "I64": np.dtype(np.int64), "F16": np.dtype(np.float16), "F32": np.dtype(np.float32), "F64": np.dtype(np.float64),
    "C64": np.dtype(np.complex64),
}
_STORABLE = {dtype.newbyteorder("<") for dtype in _DTYPES.values()}
_DIGITS = re.compile(r"\d+")


def _package():
    try:
        import safetensors
        import safetensors.numpy
    except ImportError:
        raise ImportError(
            'Reading and writing .safetensors files needs the safetensors package: pip install "pullback[safetensors]"'
        ) from None
    return safetensors


def save(path, model, state=None):
    """Write `state_dict(model)` to the safetensors file `path`, atomically (see the module docstring).

    (The examples need the safetensors package, so the test suite skips them; tests/test_state_dict.py
    runs the same calls when it is installed.)

    >>> import os, tempfile, numpy as np, pullback as pb
    >>> with tempfile.TemporaryDirectory() as folder:  # doctest: +SKIP
    ...     pb.save(os.path.join(folder, "m.safetensors"), {"w": np.arange(3.0)})
    ...     pb.load(os.path.join(folder, "m.safetensors"), like={"w": np.zeros(3)})
    {'w': array([0., 1., 2.])}
    """
    path = check_path(path)
    if state is not None:
        raise CheckpointError(
            f"{os.fspath(path)}: a safetensors file holds arrays only, not an optimiser state; "
            "save the model and its state to a .ckpt checkpoint instead."
        )
    arrays = state_dict(model)
    for key, x in arrays.items():
        dtype = numpy_dtype(x, lambda: key)
        if dtype.newbyteorder("<") not in _STORABLE:
            raise CheckpointError(
                f"{key} has dtype {dtype}, which safetensors cannot store (it stores bool, integers, float16/32/64 "
                "and complex64); convert it, or save to a .ckpt checkpoint, which stores it."
            )
    package = _package()
    little, digests = {}, {}
    converted = {}  # a tied array is converted once (another library's array read as a NumPy array)
    for key, x in arrays.items():
        if id(x) not in converted:
            value = to_numpy(x, lambda: key)
            value = np.asarray(value, dtype=value.dtype.newbyteorder("<"), order="C")
            converted[id(x)] = value, _digest(value)
        little[key], digests[key] = converted[id(x)]
    metadata = METADATA | {"sha256": json.dumps(digests, separators=(",", ":"))}
    generators = generator_specs(model)
    if generators:
        metadata["generators"] = json.dumps(generators, separators=(",", ":"), allow_nan=False)

    def write(file, temporary):  # safetensors writes the file by name; `file` then syncs it
        package.numpy.save_file(little, temporary, metadata=metadata)

    write_atomically(path, write)


def load(path, like):
    """A copy of `like` holding the arrays of the safetensors file `path` (see the module docstring).

    >>> import os, tempfile, numpy as np, pullback as pb
    >>> model = pb.nn.Dense(2, 1, rng=np.random.default_rng(0))
    >>> with tempfile.TemporaryDirectory() as folder:  # doctest: +SKIP
    ...     pb.save(os.path.join(folder, "m.safetensors"), model)
    ...     loaded = pb.load(os.path.join(folder, "m.safetensors"), like=pb.nn.Dense(2, 1))
    >>> np.array_equal(loaded.weight, model.weight), loaded is not model  # doctest: +SKIP
    (True, True)
    """
    package = _package()
    name = os.fsdecode(path)
    if not os.path.exists(name):
        raise FileNotFoundError(f"No such file: {name!r}")
    try:
        handle = package.safe_open(name, framework="numpy")
    except package.SafetensorError as error:
        with open(name, "rb") as file:
            start = file.read(4)
        hint = (" It is a ZIP archive (a pullback checkpoint?): load it by a path ending in .ckpt (rename it)."
                if start == b"PK\x03\x04" else
                " The file is empty (0 bytes): whatever wrote it did not finish; save it again." if not start else
                " The file is damaged (truncated, or bytes changed) or not a safetensors file.")
        raise CheckpointError(f"{name} is not a readable safetensors file: {error}.{hint}") from None
    with handle:
        offsets = functools.cache(lambda: _data_offsets(name))
        metadata = handle.metadata() or {}
        digests = _digests(name, metadata, handle.keys())
        tensors = {key: _Stored(handle, name, key, package.SafetensorError, offsets, digests.get(key)) for key in handle.keys()}
        expected = state_dict(like)
        if metadata.get("format") == METADATA["format"]:
            return _load_pullback(name, tensors, expected, like, _generators(name, metadata))
        if set(tensors) == set(expected):
            return _load_same_names(name, tensors, expected, like)
        return _load_torch(name, tensors, like)


def _load_same_names(name, tensors, expected, like):
    """A file not written by pullback whose names are `like`'s (PyTorch names a model of the same attributes
    alike): the layouts differ only in convolution filters, so where both fit, which one it is cannot be told."""
    if not any(len(t.shape) == 4 for t in tensors.values()):
        return _load_pullback(name, tensors, expected, like)
    if any(tensors[k].shape != x.shape for k, x in expected.items()):  # not pullback's layout: PyTorch's, or an error
        return _load_torch(name, tensors, like)
    from .nn.torch_interop import load_torch_state_dict

    try:
        load_torch_state_dict(like, tensors, key_order="natural")
    except ValueError:
        return _load_pullback(name, tensors, expected, like)
    raise CheckpointError(
        f"{name} has the names of state_dict(like) but not pullback's metadata, and its 4-d filters fit both "
        "pullback's layout (kh, kw, in, out) and PyTorch's (out, in, kh, kw), so the layout cannot be told. If "
        "PyTorch wrote it, load it with pullback.nn.torch_interop.load_torch_state_dict(like, "
        "safetensors.numpy.load_file(path)); if pullback's arrays, pb.load_state_dict(like, "
        "safetensors.numpy.load_file(path)). pb.save writes the metadata that makes this unambiguous.")


class _Stored:
    """One array of an open safetensors file: its shape and dtype now, its values when asked.

    A bfloat16 array (most published PyTorch weights) is read as float32, exactly: each value's
    16 bits are the upper half of the float32 of the same value.
    """

    def __init__(self, handle, name, key, error, offsets, digest=None):
        self.handle, self.name, self.key, self.error, self.offsets = handle, name, key, error, offsets
        self.digest = digest
        view = handle.get_slice(key)
        self.shape, code = tuple(view.get_shape()), view.get_dtype()
        self.bfloat16 = code == "BF16"
        if code not in _DTYPES and not self.bfloat16:
            raise CheckpointError(f"{name}: {key} has dtype {code}, which NumPy cannot hold; convert it to float32 first.")
        self.dtype = np.dtype(np.float32) if self.bfloat16 else _DTYPES[code]
        self.described = "bfloat16 (read as float32)" if self.bfloat16 else str(self.dtype)

    def __array__(self, dtype=None, copy=None):
        x = self._bfloat16() if self.bfloat16 else self._read()
        if x.shape != self.shape or x.dtype != self.dtype:  # the header promised otherwise
            raise CheckpointError(f"{self.name}: {self.key} is corrupted: its data does not match its header.")
        if self.digest is not None and self.digest != self._stored_digest(x):
            raise CheckpointError(
                f"{self.name}: {self.key} fails its SHA-256 check (the digest pullback wrote in the file's metadata): "
                "the file is corrupted or was edited. Save it again from the model, or restore a good copy."
            )
        return x if dtype is None else x.astype(dtype, copy=False)

    def _stored_digest(self, x):
        if self.bfloat16:  # the file's bits: the upper halves of the float32s read
            return _digest((x.view(np.uint32) >> 16).astype(np.uint16))
        return _digest(x)

    def _read(self):
        try:
            return self.handle.get_tensor(self.key)
        except self.error as error:
            raise CheckpointError(f"{self.name}: {self.key} cannot be read: {error}") from None

    def _bfloat16(self):
        """The array's bfloat16 bits, from the file (NumPy has no bfloat16), widened into float32s."""
        start, end = self.offsets()[self.key]
        with open(self.name, "rb") as file:
            file.seek(start)
            data = file.read(end - start)
        if len(data) != 2 * int(np.prod(self.shape)):
            raise CheckpointError(f"{self.name}: {self.key} is corrupted: its data does not match its header.")
        bits = np.frombuffer(data, "<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(self.shape)


def _digest(x):
    """The SHA-256 of `x`'s bytes as safetensors stores them: C order, little-endian."""
    x = np.asarray(x, dtype=x.dtype.newbyteorder("<"), order="C")
    return hashlib.sha256(x.reshape(-1).view(np.uint8)).hexdigest()


def _digests(name, metadata, keys):
    """`{key: SHA-256}` from the metadata pullback writes (empty for another program's file), checked to be whole."""
    if metadata.get("format") != METADATA["format"]:
        return {}
    if "sha256" not in metadata:
        if set(metadata) != set(METADATA):
            raise CheckpointError(
                f"{name}: its pullback metadata is damaged (keys {sorted(metadata)}); the file is corrupted or was edited."
            )
        return {}
    try:
        digests = json.loads(metadata["sha256"])
    except ValueError:
        digests = None
    if (not isinstance(digests, dict) or set(digests) != set(keys)
            or not all(isinstance(d, str) and re.fullmatch("[0-9a-f]{64}", d) for d in digests.values())):
        raise CheckpointError(
            f"{name}: the SHA-256 digests in its metadata are damaged or do not list exactly its arrays; "
            "the file is corrupted or was edited."
        )
    return digests


def _data_offsets(name):
    """`{key: (start, end)}`: where each array's bytes lie in the safetensors file `name` (whose header
    safetensors has already checked)."""
    with open(name, "rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
    start = 8 + length
    return {k: (start + v["data_offsets"][0], start + v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"}


def _generators(name, metadata):
    """The generator entries pullback writes in the metadata (a checkpoint manifest's ``generators``), or None."""
    if "generators" not in metadata:
        return None
    try:
        return json.loads(metadata["generators"])
    except (ValueError, RecursionError):
        raise CheckpointError(f"{name}: the random generators in its metadata are damaged; the file is corrupted or was edited.") from None


def _load_pullback(name, tensors, expected, like, generators=None):
    missing = [k for k in expected if k not in tensors]
    unexpected = [k for k in tensors if k not in expected]
    if missing or unexpected:
        problems = "; ".join(f"{what} {few(keys)}" for what, keys in (("no value for", missing), ("unexpected", unexpected)) if keys)
        raise CheckpointError(f"{name} does not match `like`: {problems}. `like` must be built the same way as the saved model.")
    dtypes = {key: numpy_dtype(x, lambda: key) for key, x in expected.items()}
    for key, x in expected.items():
        stored = tensors[key]
        if stored.shape != tuple(x.shape) or not same_dtype(stored.dtype, dtypes[key]):
            raise CheckpointError(
                f"{name}: {key} has shape {stored.shape} and dtype {stored.described} in the file, "
                f"but shape {tuple(x.shape)} and dtype {dtypes[key]} in `like`."
            )
    replacements = restored_generators(generators, like, _failing(name))
    # Every name, shape and dtype agrees with `like`: now read, one array at a time.
    values, first_key = {}, {}
    for key, x in expected.items():
        value = np.asarray(tensors[key]).astype(dtypes[key], copy=False)
        if id(x) not in values:
            values[id(x)], first_key[id(x)] = np.array(value, copy=True), key
        elif value.tobytes() != values[id(x)].tobytes():
            raise CheckpointError(
                f"{name}: in `like`, {first_key[id(x)]} and {key} are one shared array, but the file holds different values."
            )
    return rebuilt(like, replacements | {id(x): to_type_of(values[id(x)], x) for x in expected.values()})


def _failing(name):
    """A `fail(message)` for `restored_generators`: raises `CheckpointError` naming the file."""

    def fail(message):
        raise CheckpointError(f"{name}: {message}")

    return fail


def _load_torch(name, tensors, like):
    """A PyTorch-layout file: its float arrays are cast to `like`'s dtypes, where that keeps every value.

    An array of `like` whose float dtype cannot hold every float dtype of the file is read as float64
    first, and cast only if no value rounds or overflows.
    """
    from .nn.torch_interop import load_torch_state_dict

    _check_order_is_known(name, tensors)
    expected = state_dict(like)
    floats = {t.dtype for t in tensors.values() if t.dtype.kind == "f"}
    narrow = {}
    for key, x in expected.items():
        dtype = numpy_dtype(x, lambda: key)
        if dtype.kind == "f" and not all(np.can_cast(f, dtype, "safe") for f in floats):
            narrow.setdefault(id(x), (key, x, dtype))
    wide = rebuilt(like, {i: np.zeros(x.shape, np.float64) for i, (_, x, _) in narrow.items()}) if narrow else like
    try:
        loaded = load_torch_state_dict(wide, tensors, key_order="natural")
    except CheckpointError:  # an array of the file failed a check as it was read
        raise
    except ValueError as error:
        example = next(iter(expected), None)
        raise CheckpointError(
            f"{name} has neither the names of state_dict(like) (such as {example}) nor a PyTorch layout "
            f"that fits `like`: {error}"
        ) from None
    if not narrow:  # (its generators are already copies of `like`'s, as load_torch_state_dict makes them)
        return loaded
    got, replacements = state_dict(loaded), {}
    for key, x, dtype in narrow.values():
        value = got[key]
        cast = value.astype(dtype)
        back = cast.astype(np.float64)
        changed = (back != value) & ~(np.isnan(back) & np.isnan(value))
        if changed.any():
            i = np.flatnonzero(changed)[0]
            raise CheckpointError(
                f"{name}: the file's value for {key} does not fit `like`'s dtype {dtype} exactly "
                f"({value.ravel()[i]} would become {cast.ravel()[i]}). Build `like` with the file's dtype "
                "(e.g. float64), or cast the file's arrays yourself and load them with "
                "pullback.nn.torch_interop.load_torch_state_dict."
            )
        replacements[id(value)] = to_type_of(cast, x)
    return rebuilt(loaded, replacements)


def _check_order_is_known(name, tensors):
    """Refuse a PyTorch file in which natural key order may pair same-shaped modules with the wrong layers.

    Modules holding arrays of the same names and shapes are paired with the model's layers in natural key
    order. Where two of them sit at the same depth and their names first differ in more than numbers
    (``proj`` and ``out``, ``encoder.fc`` and ``decoder.fc``), that order is alphabetical, which says
    nothing about the model's: refuse rather than guess.
    """
    modules = {}
    for key, stored in tensors.items():
        prefix, _, array = key.rpartition(".")
        if array != "num_batches_tracked":
            modules.setdefault(prefix, {})[array] = stored.shape
    alike = {}
    for prefix, shapes in modules.items():
        alike.setdefault(frozenset(shapes.items()), []).append(prefix)
    for prefixes in alike.values():
        split = [prefix.split(".") for prefix in prefixes]
        for i, a in enumerate(split):
            for j in range(i + 1, len(split)):
                if _order_is_a_guess(a, split[j]):
                    _refuse_ambiguous(name, tensors, prefixes[i], prefixes[j], modules[prefixes[i]])


def _order_is_a_guess(a, b):
    """Whether module names `a` and `b` (split at dots) are at the same depth and first differ in more than numbers."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x != y:
            return _DIGITS.sub("0", x) != _DIGITS.sub("0", y)
    return False


def _refuse_ambiguous(name, tensors, first, second, shapes):
    keys = [k for k in tensors if k.rpartition(".")[0] in (first, second)]
    shown = ", ".join(f"{n} {shape}" for n, shape in shapes.items())
    raise CheckpointError(
        f"{name}: the PyTorch modules {first!r} and {second!r} hold arrays of the same names and shapes ({shown}), "
        f"and nothing in the file tells which comes first in the model (safetensors keeps no order, and the keys "
        f"{few(keys, 8)} sort alphabetically, which says nothing about it), so which pullback layer takes which "
        "would be a guess. Load the state dict in PyTorch's module order: "
        "pullback.nn.torch_interop.load_torch_state_dict(like, {k: v.numpy() for k, v in module.state_dict().items()}); "
        "or rename its keys to those of pb.state_dict(like) and load it with pb.load_state_dict(like, arrays)."
    )
