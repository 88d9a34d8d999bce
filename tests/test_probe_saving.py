"""Saving and loading: exact round trips of every dtype and layout, damaged files refused by a named check,
failed writes that keep the old file, and clear messages for files of other formats."""

import errno
import json
import os
import struct
import zipfile
from unittest import mock

import numpy as np
import pytest

import pullback as pb
from pullback.checkpoint import CheckpointError


def same(a, b):
    """Exact equality: type, dtype, shape and values (NaN equal to NaN)."""
    return (type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
            and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def sample(dtype, shape):
    """An array of `dtype` and `shape` with distinct values (a NaN first where the dtype has one)."""
    x = np.asarray(np.arange(int(np.prod(shape))).reshape(shape) % 7 + 1).astype(dtype)
    if x.dtype.kind in "fc" and x.size:
        x[(0,) * x.ndim] = np.nan
    return x


CKPT_DTYPES = ["f2", "f4", "f8", "g", "c8", "c16", "?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
               ">f4", ">i8", ">c16", "U5", "S4", "M8[ns]", "m8[s]"]
SAFETENSORS_DTYPES = ["f2", "f4", "f8", "c8", "?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", ">f4", ">i2"]
SHAPES = [(), (0, 3), (2, 3), (1,) * 40]


@pytest.mark.parametrize("ext, dtypes", [(".ckpt", CKPT_DTYPES), (".safetensors", SAFETENSORS_DTYPES)])
def test_every_storable_dtype_and_shape_round_trips_exactly(tmp_path, ext, dtypes):
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    model = {f"{d}{s}": sample(d, s) for d in dtypes for s in SHAPES}
    base = np.arange(24.0).reshape(4, 6)
    readonly = np.arange(3.0)
    readonly.flags.writeable = False
    model |= {"transposed": base.T, "strided": base[::2, ::3], "fortran": np.asfortranarray(base),
              "reversed": base[::-1], "readonly": readonly,
              "extremes": np.array([np.finfo("f4").max, np.finfo("f4").tiny, -0.0, np.inf, -np.inf], "f4")}
    pb.save(tmp_path / f"m{ext}", model)
    loaded = pb.load(tmp_path / f"m{ext}", like={k: np.zeros_like(v) for k, v in model.items()})
    assert list(loaded) == list(model)
    for key, value in model.items():
        assert same(loaded[key], np.array(value)), key


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
def test_a_memmap_is_saved_as_its_values_and_loads_into_a_memmap_like(tmp_path, ext):
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    np.save(tmp_path / "w.npy", np.arange(6.0).reshape(2, 3))
    weights = np.load(tmp_path / "w.npy", mmap_mode="r")
    pb.save(tmp_path / f"m{ext}", {"w": weights, "t": weights.T})
    loaded = pb.load(tmp_path / f"m{ext}", like={"w": weights, "t": weights.T})
    assert same(loaded["w"], np.arange(6.0).reshape(2, 3)) and same(loaded["t"], np.arange(6.0).reshape(2, 3).T)
    assert same(pb.load_state_dict({"w": weights}, {"['w']": np.ones((2, 3))})["w"], np.ones((2, 3)))
    assert same(np.load(tmp_path / "w.npy"), np.arange(6.0).reshape(2, 3))


def test_other_ndarray_subclasses_are_refused_with_the_conversion_to_make(tmp_path):
    masked = np.ma.masked_array([1.0, 2.0], mask=[False, True])
    with pytest.raises(CheckpointError, match=r"model\['w'\] is a MaskedArray; .* np\.asarray\(x\), keeping .* mask"):
        pb.save(tmp_path / "m.ckpt", {"w": masked})
    assert os.listdir(tmp_path) == []


def test_a_structured_array_is_refused_naming_how_to_store_its_fields(tmp_path):
    x = np.zeros(2, [("a", "f4"), ("b", "i2")])
    with pytest.raises(CheckpointError, match=r"structured dtype .* store each field as an array of its own \(x\['a'\]"):
        pb.save(tmp_path / "m.ckpt", {"x": x})


def test_safetensors_paths_may_be_bytes_and_unicode(tmp_path):
    pytest.importorskip("safetensors")
    path = os.fsencode(tmp_path / "modèle €.safetensors")
    pb.save(path, {"w": np.arange(3.0)})
    assert same(pb.load(path, like={"w": np.zeros(3)})["w"], np.arange(3.0))
    ckpt = os.fsencode(tmp_path / "modèle €.ckpt")
    pb.save(ckpt, {"w": np.arange(3.0)})
    assert same(pb.load(ckpt, like={"w": np.zeros(3)})["w"], np.arange(3.0))


def _data_start(path):
    with open(path, "rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
    return 8 + length


def test_every_changed_data_byte_of_a_pullback_safetensors_file_fails_its_digest(tmp_path):
    pytest.importorskip("safetensors")
    model = {"w": np.arange(6.0).reshape(2, 3), "b": np.array([1, 2], "i4"), "t": np.array(True)}
    like = {"w": np.zeros((2, 3)), "b": np.zeros(2, "i4"), "t": np.array(False)}
    path = tmp_path / "m.safetensors"
    pb.save(path, model)
    good = path.read_bytes()
    for i in range(_data_start(path), len(good)):
        damaged = bytearray(good)
        damaged[i] ^= 0x01
        path.write_bytes(bytes(damaged))
        with pytest.raises(CheckpointError, match=r"m\.safetensors: \['[wbt]'\] fails its SHA-256 check"):
            pb.load(path, like=like)


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
def test_no_single_changed_byte_or_truncation_loads_other_values(tmp_path, ext):
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    model = {"w": np.array([1.5, -2.0, 3.0]), "b": np.array([1, 2], "i2")}
    like = {"w": np.zeros(3), "b": np.zeros(2, "i2")}
    path = tmp_path / f"m{ext}"
    pb.save(path, model)
    good = path.read_bytes()
    damaged_files = [good[:n] for n in range(len(good))]
    for i in range(len(good)):
        damaged = bytearray(good)
        damaged[i] ^= 0xFF
        damaged_files.append(bytes(damaged))
    refused = 0
    for data in damaged_files:
        path.write_bytes(data)
        try:
            loaded = pb.load(path, like=like)
        except CheckpointError:
            refused += 1
            continue
        assert same(loaded["w"], model["w"]) and same(loaded["b"], model["b"])
    assert refused > len(damaged_files) * 0.9


def test_damaged_safetensors_digests_are_refused(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = str(tmp_path / "m.safetensors")
    arrays = {"['w']": np.arange(3.0)}
    safetensors_numpy.save_file(arrays, path, metadata={"format": "pullback", "sha256": json.dumps({"['v']": "0" * 64})})
    with pytest.raises(CheckpointError, match="SHA-256 digests in its metadata are damaged"):
        pb.load(path, like={"w": np.zeros(3)})
    safetensors_numpy.save_file(arrays, path, metadata={"format": "pullback", "sha2S6": "{}"})
    with pytest.raises(CheckpointError, match=r"its pullback metadata is damaged \(keys \['format', 'sha2S6'\]\)"):
        pb.load(path, like={"w": np.zeros(3)})
    safetensors_numpy.save_file(arrays, path, metadata={"format": "pullback"})  # an older pullback's file
    assert same(pb.load(path, like={"w": np.zeros(3)})["w"], np.arange(3.0))


def test_a_pullback_safetensors_file_reads_the_same_in_safetensors_and_torch(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    model = {d: sample(d, (2, 3)) for d in SAFETENSORS_DTYPES}
    pb.save(tmp_path / "m.safetensors", model)
    read = safetensors_numpy.load_file(str(tmp_path / "m.safetensors"))
    for key, value in pb.state_dict(model).items():
        assert same(read[key], value.astype(value.dtype.newbyteorder("="))), key
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    tensors = safetensors_torch.load_file(str(tmp_path / "m.safetensors"))
    for key, value in pb.state_dict(model).items():
        if value.dtype.kind != "u" or value.dtype.itemsize == 1:
            assert tensors[key].numpy().dtype == value.dtype.newbyteorder("=") and same(tensors[key].numpy(), read[key]), key
    assert tensors["['f4']"].dtype == torch.float32


def _torch_layout_file(path, dtype, seed=0):
    """A PyTorch Sequential(Linear(3, 4), ReLU(), Linear(4, 2))'s state dict in `dtype`, written by safetensors."""
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(seed)
    arrays = {"0.weight": rng.standard_normal((4, 3)), "0.bias": rng.standard_normal(4),
              "2.weight": rng.standard_normal((2, 4)), "2.bias": rng.standard_normal(2)}
    arrays = {k: v.astype(dtype) for k, v in arrays.items()}
    safetensors_numpy.save_file(arrays, str(path))
    return arrays


def _chain(dtype):
    return pb.nn.Chain(pb.nn.Dense(3, 4, pb.nn.relu, dtype=dtype), pb.nn.Dense(4, 2, dtype=dtype))


@pytest.mark.parametrize("stored, target", [(np.float64, np.float32), (np.float32, np.float16)])
def test_a_pytorch_layout_file_that_would_round_when_cast_is_refused(tmp_path, stored, target):
    _torch_layout_file(tmp_path / "t.safetensors", stored)
    with pytest.raises(CheckpointError, match=rf"the file's value for layers\[0\]\.weight does not fit `like`'s dtype "
                                              rf"{np.dtype(target)} exactly"):
        pb.load(tmp_path / "t.safetensors", like=_chain(target))


@pytest.mark.parametrize("stored, target", [(np.float16, np.float32), (np.float32, np.float64), (np.float64, np.float64)])
def test_a_pytorch_layout_file_loads_exactly_where_the_cast_keeps_every_value(tmp_path, stored, target):
    arrays = _torch_layout_file(tmp_path / "t.safetensors", stored)
    loaded = pb.load(tmp_path / "t.safetensors", like=_chain(target))
    assert same(loaded.layers[0].weight, arrays["0.weight"].astype(target))
    assert same(loaded.layers[1].bias, arrays["2.bias"].astype(target))


def test_a_float64_pytorch_layout_file_of_float32_values_loads_into_float32(tmp_path):
    arrays = _torch_layout_file(tmp_path / "t.safetensors", np.float32)
    pytest.importorskip("safetensors.numpy").save_file(
        {k: v.astype(np.float64) for k, v in arrays.items()}, str(tmp_path / "wide.safetensors"))
    loaded = pb.load(tmp_path / "wide.safetensors", like=_chain(np.float32))
    assert same(loaded.layers[0].weight, arrays["0.weight"])


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
def test_saving_through_a_symbolic_link_replaces_its_target_and_keeps_the_link(tmp_path, ext):
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    target, link = tmp_path / f"run{ext}", tmp_path / f"latest{ext}"
    pb.save(target, {"w": np.zeros(2)})
    os.symlink(target, link)
    pb.save(link, {"w": np.ones(2)})
    assert os.path.islink(link)
    assert same(pb.load(target, like={"w": np.zeros(2)})["w"], np.ones(2))


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_a_write_that_fails_midway_keeps_the_old_file(tmp_path, ext, failure):
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    path = tmp_path / f"m{ext}"
    pb.save(path, {"w": np.arange(3.0)})
    old = path.read_bytes()
    with mock.patch("os.fsync", side_effect=failure), pytest.raises(type(failure)):
        pb.save(path, {"w": np.arange(3.0) + 1})
    assert path.read_bytes() == old and os.listdir(tmp_path) == [f"m{ext}"]


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
def test_an_array_that_cannot_be_computed_keeps_the_old_file(tmp_path, ext):
    da = pytest.importorskip("dask.array")
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    path = tmp_path / f"m{ext}"
    pb.save(path, {"w": np.arange(3.0), "v": np.ones(2)})
    old = path.read_bytes()

    def fail(block):
        raise RuntimeError("the source is gone")

    broken = da.from_array(np.arange(3.0), chunks=1).map_blocks(fail, dtype=float)
    with pytest.raises(CheckpointError, match=r"\['w'\] is a dask.array.core.Array that cannot be read .*\(the source is gone\)"):
        pb.save(path, {"v": np.ones(2), "w": broken})
    assert path.read_bytes() == old and os.listdir(tmp_path) == [f"m{ext}"]


def test_a_damaged_entry_header_is_named_once_not_wrapped(tmp_path):
    path = tmp_path / "m.ckpt"
    pb.save(path, {"w": np.arange(3.0)})
    offset = zipfile.ZipFile(path).getinfo("model/0.npy").header_offset
    data = bytearray(path.read_bytes())
    data[offset + 29] ^= 0xFF  # the high byte of the entry's extra-field length
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as error:
        pb.load(path, like={"w": np.zeros(3)})
    assert "model/0.npy (model['w']) is truncated" in str(error.value)
    assert "valid .npy" not in str(error.value) and str(error.value).count("m.ckpt") == 1


def test_files_of_other_formats_are_named_with_what_to_do(tmp_path):
    like = {"w": np.zeros(2)}
    np.save(tmp_path / "a.npy", np.ones(2))
    os.rename(tmp_path / "a.npy", tmp_path / "a.ckpt")
    with pytest.raises(CheckpointError, match=r"a\.ckpt is not a readable checkpoint: .* It is a NumPy \.npy file"):
        pb.load(tmp_path / "a.ckpt", like=like)
    with zipfile.ZipFile(tmp_path / "t.ckpt", "w") as archive:
        archive.writestr("t/data.pkl", b"")
        archive.writestr("t/data/0", b"")
    with pytest.raises(CheckpointError, match=r"manifest\.json \(the manifest\) is missing .* It is a torch\.save file"):
        pb.load(tmp_path / "t.ckpt", like=like)
    (tmp_path / "empty.ckpt").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"The file is empty \(0 bytes\)"):
        pb.load(tmp_path / "empty.ckpt", like=like)
    pb.save(tmp_path / "m.ckpt", {"w": np.ones(2)})
    archive = zipfile.ZipFile(tmp_path / "m.ckpt")
    names = [info.filename for info in archive.infolist()]
    archive.close()
    data = (tmp_path / "m.ckpt").read_bytes()
    record = data.rindex(b"manifest.json")  # the central directory's record of the manifest
    (tmp_path / "m.ckpt").write_bytes(data[:record] + b"manifesu" + data[record + 8:])
    assert "manifest.json" in names
    with pytest.raises(CheckpointError, match=r"manifest\.json \(the manifest\) is missing .* a damaged checkpoint"):
        pb.load(tmp_path / "m.ckpt", like=like)


def test_safetensors_and_checkpoint_files_under_each_others_names_are_named(tmp_path):
    pytest.importorskip("safetensors")
    like = {"w": np.zeros(2)}
    pb.save(tmp_path / "s.safetensors", {"w": np.ones(2)})
    os.rename(tmp_path / "s.safetensors", tmp_path / "s.ckpt")
    with pytest.raises(CheckpointError, match=r"It looks like a safetensors file: load it by a path ending in \.safetensors"):
        pb.load(tmp_path / "s.ckpt", like=like)
    pb.save(tmp_path / "c.ckpt", {"w": np.ones(2)})
    os.rename(tmp_path / "c.ckpt", tmp_path / "c.safetensors")
    with pytest.raises(CheckpointError, match=r"It is a ZIP archive \(a pullback checkpoint\?\): load it by a path ending in \.ckpt"):
        pb.load(tmp_path / "c.safetensors", like=like)
    (tmp_path / "e.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"e\.safetensors is not a readable safetensors file: .* empty \(0 bytes\)"):
        pb.load(tmp_path / "e.safetensors", like=like)


def test_a_trained_conv_batchnorm_model_and_its_adam_state_resume_exactly(tmp_path):
    def build(seed):
        rng = np.random.default_rng(seed)
        return pb.nn.Chain(pb.nn.Conv(2, 3, (3, 3), pb.nn.relu, rng=rng), pb.nn.BatchNorm(3),
                           lambda h: h.mean(axis=(1, 2)), pb.nn.Dense(3, 2, rng=rng))

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 6, 6, 2)).astype("f4"), rng.standard_normal((4, 2)).astype("f4")

    def loss(m):
        return np.mean((m(x) - y) ** 2)

    model = build(1)
    state = pb.optim.setup(pb.optim.OptimiserChain(pb.optim.ClipGrad(1.0), pb.optim.Adam(0.01)), model)
    for _ in range(2):
        state, model = pb.optim.update(state, model, pb.gradient(loss, model)[0])
    pb.save(tmp_path / "run.ckpt", model, state)
    model2, state2 = pb.load(tmp_path / "run.ckpt", like=build(2))
    assert repr(state2) == repr(state)
    for key, value in pb.state_dict(model).items():
        assert same(pb.state_dict(model2)[key], value), key
    after = pb.optim.update(state, model, pb.gradient(loss, model)[0])[1]
    after2 = pb.optim.update(state2, model2, pb.gradient(loss, model2)[0])[1]
    for key, value in pb.state_dict(after).items():
        assert same(pb.state_dict(after2)[key], value), key


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
def test_ties_stay_tied_and_views_of_one_buffer_come_back_independent(tmp_path, ext):
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    w, base = np.arange(3.0), np.arange(6.0)
    pb.save(tmp_path / f"m{ext}", {"a": w, "b": [w], "base": base, "view": base[2:4]})
    z, b2 = np.zeros(3), np.zeros(6)
    loaded = pb.load(tmp_path / f"m{ext}", like={"a": z, "b": [z], "base": b2, "view": b2[2:4]})
    assert loaded["a"] is loaded["b"][0] and same(loaded["a"], w)
    assert same(loaded["base"], base) and same(loaded["view"], base[2:4])
    assert not np.shares_memory(loaded["base"], loaded["view"])
    if ext == ".ckpt":
        with pytest.raises(CheckpointError, match=r"the file ties model\['a'\] and model\['b'\]\[0\]"):
            pb.load(tmp_path / f"m{ext}", like={"a": np.zeros(3), "b": [np.zeros(3)], "base": b2, "view": b2[2:4]})


def test_a_state_dict_value_that_cannot_be_read_names_the_conversion_not_saving():
    torch = pytest.importorskip("torch")
    with pytest.raises(CheckpointError) as error:
        pb.load_state_dict({"w": np.zeros(2, "f4")}, {"['w']": torch.ones(2, requires_grad=True)})
    message = str(error.value)
    assert "The state dict's ['w'] is a torch.Tensor that cannot be read" in message
    assert "x.detach().cpu().numpy()" in message and "before saving" not in message


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
def test_a_folder_that_cannot_be_written_is_named_not_a_temporary_file(tmp_path, ext):
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    path = tmp_path / f"m{ext}"
    pb.save(path, {"w": np.arange(3.0)})
    old = path.read_bytes()
    denied = PermissionError(errno.EACCES, "Permission denied")
    with mock.patch("os.open", side_effect=denied), pytest.raises(PermissionError) as info:
        pb.save(path, {"w": np.ones(3)})
    message = str(info.value)
    assert f"Cannot save {path}: cannot create a file in its folder {tmp_path} (Permission denied)" in message
    assert ".tmp" not in message and info.value.errno == errno.EACCES
    assert path.read_bytes() == old and os.listdir(tmp_path) == [f"m{ext}"]


def test_an_optimiser_state_of_numpy_scalars_and_python_numbers_keeps_every_type(tmp_path):
    import dataclasses

    from pullback.optim.rules import Rule

    @dataclasses.dataclass(frozen=True)
    class Kept(Rule):
        lr: float = 0.1

        def init(self, x):
            return (np.complex64(1j), np.float32(0.5), float("nan"), float("-inf"), None, [True, 3], np.int8(-3), 2**70)

        def apply(self, state, x, dx):
            return state, self.lr * dx

    @dataclasses.dataclass(frozen=True)
    class Complex(Rule):
        lr: float = 0.1

        def init(self, x):
            return (1j,)

        def apply(self, state, x, dx):
            return state, self.lr * dx

    model = [np.ones(2)]
    state = pb.optim.setup(Kept(), model)
    pb.save(tmp_path / "run.ckpt", model, state)
    _, state2 = pb.load(tmp_path / "run.ckpt", like=[np.zeros(2)])
    before, after = state[0].state, state2[0].state
    assert [type(v) for v in before] == [type(v) for v in after]
    assert after[0] == np.complex64(1j) and after[1] == np.float32(0.5) and np.isnan(after[2]) and after[3] == -np.inf
    assert after[4:] == (None, [True, 3], np.int8(-3), 2**70)
    with pytest.raises(CheckpointError, match=r"holds a complex; .* keep it as a NumPy scalar, np\.complex128\(value\)"):
        pb.save(tmp_path / "c.ckpt", model, pb.optim.setup(Complex(), model))


def test_another_programs_sha256_metadata_is_not_taken_for_pullbacks(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = str(tmp_path / "m.safetensors")
    safetensors_numpy.save_file({"['w']": np.arange(3.0)}, path, metadata={"format": "pt", "sha256": "of the download"})
    assert same(pb.load(path, like={"w": np.zeros(3)})["w"], np.arange(3.0))


class _ArrayLike:
    """An array-like of no library pullback takes: NumPy reads it through `__array__`."""

    def __init__(self, values):
        self.values = list(values)

    def __array__(self, dtype=None, copy=None):
        return np.array(self.values, dtype=dtype)


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
def test_an_array_of_a_library_pullback_does_not_take_is_refused_not_left_out(tmp_path, ext):
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    with pytest.raises(CheckpointError, match=r"model\['x'\] is a [\w.]*_ArrayLike, an array of a library "
                                              r"pullback does not take, so it would not be stored"):
        pb.save(tmp_path / f"m{ext}", {"w": np.ones(2), "x": _ArrayLike([1.0, 2.0])})
    torch = pytest.importorskip("torch")
    with pytest.raises(CheckpointError, match=r"model\['x'\] is a torch\.Tensor, .* x\.detach\(\)\.cpu\(\)\.numpy\(\)"):
        pb.save(tmp_path / f"m{ext}", {"w": np.ones(2), "x": torch.arange(3.0)})
    assert os.listdir(tmp_path) == []
    with pytest.raises(CheckpointError, match=r"model\['x'\] is a torch\.Tensor"):
        pb.state_dict({"x": torch.zeros(2)})
