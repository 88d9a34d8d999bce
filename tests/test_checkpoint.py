"""pb.save / pb.load: exact round trips, the documented format, atomic writes, and every way a
file or a `like` model can be wrong."""

import dataclasses
import hashlib
import io
import json
import os
import re
import stat
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest
from hypothesis import given, settings

import pullback as pb
from _random_models import models
from pullback import optim
from pullback.checkpoint import CheckpointError


class Dense:
    def __init__(self, weight, bias):
        self.weight, self.bias, self.activation = weight, bias, np.tanh


class BatchNorm:
    def __init__(self, n, rng):
        self.scale = rng.standard_normal(n).astype(np.float32)
        self.shift = rng.standard_normal(n).astype(np.float32)
        self.running_mean = rng.standard_normal(n).astype(np.float32)
        self.batches = np.array(rng.integers(0, 100), dtype=np.int64)
        self.training = True
        self.momentum = 0.1

    def trainable(self):
        return ("scale", "shift")


def build(seed):
    """The same structure for every seed; values differ."""
    rng = np.random.default_rng(seed)
    shared = Dense(rng.standard_normal((2, 2)), rng.standard_normal(2))
    embed = rng.standard_normal((4, 2)).astype(np.float32)
    special = rng.standard_normal(3)
    special[:3] = [np.nan, -np.inf, -0.0] if seed == 0 else special[:3]
    return {
        "layers": [shared, Dense(rng.standard_normal((1, 2)).astype(np.float32), None), BatchNorm(2, rng), shared],
        "embed": embed,
        "head": embed,
        "mask": rng.random(3) > 0.5,
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.array(rng.standard_normal()),
        "fortran": np.asfortranarray(rng.standard_normal((2, 3))),
        "big_endian": rng.standard_normal(2).astype(">f8"),
        "half": rng.standard_normal(2).astype(np.float16),
        "labels": np.array(["cat", "dog"]) if seed == 0 else np.array(["aaa", "bbb"]),
        "special": special,
        "name": f"model {seed}",
    }


def grads_for(model, seed):
    rng = np.random.default_rng(seed)
    def grad(a):
        if optim._walk.is_param(a) and np.all(np.isfinite(a)):
            return rng.standard_normal(a.shape).astype(a.dtype)
        return None

    return pb.tree.fmap(grad, model)


def arrays_by_path(model):
    return {p: x for x, paths in pb.checkpoint._array_groups(model).values() for p in paths}


def assert_bit_identical(a, b):
    assert type(a) is type(b) is np.ndarray
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def assert_value_identical(a, b):
    """Rule states: same nesting, same types, arrays bit for bit."""
    if isinstance(a, np.ndarray):
        assert_bit_identical(a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_value_identical(x, y)
    elif isinstance(a, float) and np.isnan(a):
        assert type(b) is float and np.isnan(b)
    else:
        assert type(a) is type(b) and a == b


def assert_states_identical(s1, s2, m1, m2):
    e1, e2 = optim._update.pair(s1, m1, None), optim._update.pair(s2, m2, None)
    assert len(e1) == len(e2)
    for (l1, _, _, p1), (l2, _, _, p2) in zip(e1.values(), e2.values()):
        assert p1 == p2 and l1.rule == l2.rule and l1.frozen == l2.frozen
        assert_value_identical(l1.state, l2.state)


def trained(steps=3):
    model = build(0)
    rule = optim.OptimiserChain(optim.ClipNorm(5.0, p=np.inf), optim.OptimiserChain(optim.WeightDecay(0.01), optim.Adam(0.01)))
    state = optim.setup(rule, model)
    for k in range(steps):
        state, model = optim.update(state, model, grads_for(model, k))
    state = optim.adjust(state, lr=0.005)
    optim.freeze(state["layers"][2])
    return model, state


# --- round trips ------------------------------------------------------------------------
def test_model_round_trip_is_exact_with_dtypes_and_ties(tmp_path):
    model = build(0)
    path = tmp_path / "model.ckpt"
    pb.save(path, model)
    like = build(1)
    loaded = pb.load(path, like=like)
    assert type(loaded) is dict and loaded is not like
    original, got = arrays_by_path(model), arrays_by_path(loaded)
    assert original.keys() == got.keys() and len(original) == 19
    for p, x in original.items():
        assert_bit_identical(x, got[p])
    assert loaded["embed"] is loaded["head"]
    assert loaded["layers"][0] is loaded["layers"][3]  # a shared layer stays one object
    assert loaded["fortran"].flags.f_contiguous
    assert loaded["big_endian"].dtype == np.dtype(">f8")
    assert loaded["name"] == "model 1" and loaded["layers"][2].training is True  # non-arrays come from like
    assert loaded["layers"][1].bias is None and loaded["layers"][0].activation is np.tanh


def test_load_returns_the_model_alone_or_with_the_state(tmp_path):
    model = {"w": np.ones(2)}
    pb.save(tmp_path / "a.ckpt", model)
    pb.save(tmp_path / "b.ckpt", model, optim.setup(optim.Descent(), model))
    assert isinstance(pb.load(tmp_path / "a.ckpt", like=model), dict)
    loaded, state = pb.load(str(tmp_path / "b.ckpt"), like=model)
    assert isinstance(state["w"], optim.Leaf) and state["w"].rule == optim.Descent()


def test_optimiser_state_round_trip_is_exact_and_training_continues_identically(tmp_path):
    model, state = trained()
    path = tmp_path / "run.ckpt"
    pb.save(path, model, state)
    loaded_model, loaded_state = pb.load(path, like=build(7))

    assert_states_identical(state, loaded_state, model, loaded_model)
    leaf = loaded_state["layers"][0].weight
    clip_state, (decay_state, (m, v, step)) = leaf.state
    assert step == 3 and type(step) is int and m.dtype == np.float64
    assert loaded_state["embed"] is loaded_state["head"] and loaded_state["layers"][0] is loaded_state["layers"][3]
    assert loaded_state["layers"][2].scale.frozen and not loaded_state["embed"].frozen
    assert loaded_state["embed"].rule.rules[1].rules[1].lr == 0.005
    assert loaded_state["layers"][2].running_mean is None

    for k in (10, 11):
        state, model = optim.update(state, model, grads_for(model, k))
        optim.update_(loaded_state, loaded_model, grads_for(loaded_model, k))
    for p, x in arrays_by_path(model).items():
        assert_bit_identical(x, arrays_by_path(loaded_model)[p])
    assert_states_identical(state, loaded_state, model, loaded_model)


@dataclasses.dataclass(frozen=True)
class OddStateRule(optim.Rule):
    """A rule whose state holds every kind of value a checkpoint can store."""

    scale: float = float("inf")
    label: str = "odd"

    def init(self, x):
        return (np.float32(1.5), float("nan"), float("-inf"), [None, True, 7], (np.zeros(2, np.int32), ()), 2**70)

    def apply(self, state, x, dx):
        return state, dx


def test_every_kind_of_rule_state_value_round_trips(tmp_path):
    model = [np.ones(2)]
    state = optim.setup(optim.OptimiserChain(OddStateRule(), optim.ClipNorm(1.0, p=np.inf)), model)
    pb.save(tmp_path / "odd.ckpt", model, state)
    _, loaded = pb.load(tmp_path / "odd.ckpt", like=model)
    assert loaded[0].rule == state[0].rule and loaded[0].rule.rules[0].scale == float("inf")
    assert_value_identical(state[0].state, loaded[0].state)
    assert type(loaded[0].state[0][0]) is np.float32


def test_the_file_is_a_zip_of_npy_entries_and_a_json_manifest(tmp_path):
    model, state = trained(1)
    path = tmp_path / "run.ckpt"
    pb.save(path, model, state)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        manifest = json.loads(archive.read("manifest.json"))
        assert all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())
    assert set(names) == {"manifest.json"} | {s["entry"] for s in manifest["arrays"] + manifest["state"]["arrays"]}
    assert manifest["format"] == "pullback-checkpoint" and manifest["version"] == 1
    embed_spec = next(s for s in manifest["arrays"] if "model['embed']" in s["paths"])
    assert embed_spec["paths"] == ["model['embed']", "model['head']"] and embed_spec["dtype"] == "<f4"
    assert embed_spec["shape"] == [4, 2]
    with np.load(path, allow_pickle=False) as npz:  # readable without pullback
        np.testing.assert_array_equal(npz[embed_spec["entry"][:-4]], model["embed"])
        with zipfile.ZipFile(path) as archive:
            assert hashlib.sha256(archive.read(embed_spec["entry"])).hexdigest() == embed_spec["sha256"]
    assert manifest["state"]["rules"][0]["rule"] == "OptimiserChain"


def test_identical_inputs_give_identical_files(tmp_path):
    model, state = trained(1)
    pb.save(tmp_path / "a.ckpt", model, state)
    pb.save(tmp_path / "b.ckpt", model, state)
    assert (tmp_path / "a.ckpt").read_bytes() == (tmp_path / "b.ckpt").read_bytes()


def test_like_is_never_changed(tmp_path):
    pb.save(tmp_path / "m.ckpt", build(0))
    like = build(1)
    before = {p: x.copy() for p, x in arrays_by_path(like).items()}
    identities = {p: id(x) for p, x in arrays_by_path(like).items()}
    pb.load(tmp_path / "m.ckpt", like=like)
    like["layers"][1].weight = like["layers"][1].weight.astype(np.float64)  # make the next load fail part way
    with pytest.raises(CheckpointError):
        pb.load(tmp_path / "m.ckpt", like=like)
    for p, x in arrays_by_path(like).items():
        np.testing.assert_array_equal(x, before[p])
        if p != "model['layers'][1].weight":
            assert id(x) == identities[p]


@settings(max_examples=40, deadline=None)
@given(models())
def test_random_models_round_trip_exactly_with_their_ties(model):
    import tempfile

    like = pb.tree.fmap(lambda a: np.zeros_like(a) if isinstance(a, np.ndarray) else a, model)
    with tempfile.TemporaryDirectory() as folder:
        pb.save(os.path.join(folder, "m.ckpt"), model)
        loaded = pb.load(os.path.join(folder, "m.ckpt"), like=like)
    original, got = arrays_by_path(model), arrays_by_path(loaded)
    assert original.keys() == got.keys()
    for p, x in original.items():
        assert_bit_identical(x, got[p])
        for q, y in original.items():
            assert (x is y) == (got[p] is got[q])


# --- atomic writes -----------------------------------------------------------------------
def test_a_failure_half_way_leaves_the_old_file_byte_identical(tmp_path, monkeypatch):
    path = tmp_path / "model.ckpt"
    pb.save(path, {"w": np.zeros(3)})
    old = path.read_bytes()
    calls = []
    real_write_array = np.lib.format.write_array

    def failing_write_array(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full")
        return real_write_array(*args, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", failing_write_array)
    model, state = trained(1)
    with pytest.raises(OSError, match="disk full"):
        pb.save(path, model, state)
    assert len(calls) == 3
    assert path.read_bytes() == old
    assert os.listdir(tmp_path) == ["model.ckpt"]  # the temporary file was removed
    monkeypatch.undo()
    np.testing.assert_array_equal(pb.load(path, like={"w": np.ones(3)})["w"], 0.0)


def test_a_crash_half_way_leaves_the_old_file_intact(tmp_path):
    path = tmp_path / "model.ckpt"
    pb.save(path, {"w": np.zeros(3)})
    old = path.read_bytes()
    script = textwrap.dedent(f"""
        import os, numpy as np, pullback as pb
        real = np.lib.format.write_array
        count = [0]
        def dying(*args, **kwargs):
            count[0] += 1
            if count[0] == 2:
                os._exit(17)  # the process dies: no cleanup, no exception handlers
            return real(*args, **kwargs)
        np.lib.format.write_array = dying
        pb.save({str(path)!r}, {{"w": np.ones(3), "u": np.ones(1000), "v": np.ones(2)}})
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 17, result.stderr
    assert path.read_bytes() == old
    np.testing.assert_array_equal(pb.load(path, like={"w": np.ones(3)})["w"], 0.0)


def test_the_data_is_synced_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.isdir(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else None))
        return real_fsync(fd)

    def replace(source, target):
        events.append(("replace", os.path.basename(source).startswith(".model.ckpt."), os.path.basename(target)))
        return real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    pb.save(tmp_path / "model.ckpt", {"w": np.zeros(2)})
    assert [e[0] for e in events] == ["fsync", "replace", "fsync"]
    assert events[1][1:] == (True, "model.ckpt")
    if events[0][1] is not None:
        assert events[0][1] is False and events[2][1] is True  # the file first, then its folder


def test_an_unsavable_model_is_refused_before_the_file_is_touched(tmp_path):
    path = tmp_path / "model.ckpt"
    pb.save(path, {"w": np.zeros(3)})
    old = path.read_bytes()
    with pytest.raises(CheckpointError, match=r"model\['objects'\] has dtype object.*without pickle"):
        pb.save(path, {"w": np.zeros(3), "objects": np.array([{}, None], dtype=object)})
    with pytest.raises(CheckpointError, match=r"model\['m'\] is a MaskedArray"):
        pb.save(path, {"m": np.ma.array([1.0, 2.0])})
    model = {"w": np.zeros(3), "u": np.zeros(1)}
    with pytest.raises(CheckpointError, match=r"no entry for model\['u'\]"):
        pb.save(path, model, optim.setup(optim.Descent(), {"w": np.zeros(3), "u": np.arange(1)}))
    with pytest.raises(ValueError, match="does not match the model"):
        pb.save(path, model, optim.setup(optim.Descent(), [np.zeros(3)]))
    assert path.read_bytes() == old and os.listdir(tmp_path) == ["model.ckpt"]


def test_a_new_file_gets_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    os.umask(umask)
    pb.save(tmp_path / "m.ckpt", {"w": np.zeros(1)})
    assert (tmp_path / "m.ckpt").stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_folder_as_the_path_is_refused_naming_a_file_to_give(tmp_path):
    with pytest.raises(IsADirectoryError, match=r"is a folder; give the file to write, e\.g\. .*model\.ckpt"):
        pb.save(tmp_path, {"w": np.zeros(1)})
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


# --- damaged and mismatched files ---------------------------------------------------------
def rewrite(path, manifest_edit=None, drop=(), replace=None):
    """Rewrite a checkpoint as a valid ZIP (correct CRCs) with some change."""
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    manifest = json.loads(entries["manifest.json"])
    if manifest_edit:
        manifest_edit(manifest)
    entries["manifest.json"] = json.dumps(manifest).encode()
    for name, data in (replace or {}).items():
        entries[name] = data
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            if name not in drop:
                archive.writestr(name, data)
    return manifest


@pytest.fixture
def saved(tmp_path):
    model, state = trained(1)
    path = tmp_path / "run.ckpt"
    pb.save(path, model, state)
    return path


@pytest.mark.parametrize("keep", [0, 10, 0.5, -1, -22])
def test_a_truncated_file_is_refused(saved, keep):
    data = saved.read_bytes()
    cut = keep if isinstance(keep, int) and keep >= 0 else len(data) + keep
    cut = int(len(data) * keep) if isinstance(keep, float) else cut
    saved.write_bytes(data[:cut])
    with pytest.raises(CheckpointError, match=r"run\.ckpt.*(truncated|corrupted|missing)"):
        pb.load(saved, like=build(1))


def test_a_corrupted_byte_in_an_array_is_detected(saved):
    data = bytearray(saved.read_bytes())
    with zipfile.ZipFile(saved) as archive:
        info = archive.getinfo("model/0.npy")
    position = info.header_offset + 30 + len(info.filename) + info.extra.__len__() + info.file_size - 3
    data[position] ^= 0x40
    saved.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model/0\.npy.*corrupted"):
        pb.load(saved, like=build(1))


def test_an_edited_entry_with_a_valid_zip_crc_fails_its_sha256(saved):
    with zipfile.ZipFile(saved) as archive:
        original = archive.read("model/1.npy")
    edited = original[:-1] + bytes([original[-1] ^ 1])
    rewrite(saved, replace={"model/1.npy": edited})
    with pytest.raises(CheckpointError, match=r"model/1\.npy \(model\['layers'\]\[0\]\.bias\) fails its SHA-256"):
        pb.load(saved, like=build(1))


def test_every_single_byte_flip_is_either_detected_or_harmless(tmp_path):
    model = {"w": np.arange(3.0)}
    state = optim.setup(optim.Adam(), model)
    path = tmp_path / "small.ckpt"
    pb.save(path, model, state)
    data = path.read_bytes()
    reference_model, reference_state = pb.load(path, like=model)
    damaged = tmp_path / "damaged.ckpt"
    detected = 0
    positions = np.random.default_rng(0).choice(len(data), size=400, replace=False)  # of about 2000; all is slow
    for i in positions:
        flipped = bytearray(data)
        flipped[i] ^= 0xFF
        damaged.write_bytes(bytes(flipped))
        try:
            got_model, got_state = pb.load(damaged, like=model)
        except CheckpointError:
            detected += 1
            continue
        assert_bit_identical(got_model["w"], reference_model["w"])  # a flip that got through changed nothing
        assert_states_identical(got_state, reference_state, got_model, reference_model)
    assert detected > 0.8 * len(positions)  # the rest hit bytes nobody reads (timestamps, attributes)


def test_wrong_format_and_version_are_refused(saved):
    rewrite(saved, lambda m: m.update(format="something-else"))
    with pytest.raises(CheckpointError, match=r"not a pullback checkpoint.*'something-else'"):
        pb.load(saved, like=build(1))
    rewrite(saved, lambda m: m.update(format="pullback-checkpoint", version=3))
    with pytest.raises(CheckpointError, match=r"version 3 is not supported.*reads versions 1 and 2.*newer pullback"):
        pb.load(saved, like=build(1))
    rewrite(saved, lambda m: m.update(version="1"))
    with pytest.raises(CheckpointError, match=r"version '1' is not supported"):
        pb.load(saved, like=build(1))


def test_other_zip_files_and_bad_manifests_are_refused(tmp_path):
    path = tmp_path / "arrays.npz"
    np.savez(path, w=np.ones(2))
    with pytest.raises(CheckpointError, match=r"manifest\.json \(the manifest\) is missing"):
        pb.load(path, like={"w": np.ones(2)})
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("manifest.json", b"{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        pb.load(path, like={"w": np.ones(2)})


def test_a_missing_entry_is_named(saved):
    intact = saved.read_bytes()
    rewrite(saved, drop=["model/2.npy"])
    with pytest.raises(CheckpointError, match=r"model/2\.npy \(model\['layers'\]\[1\]\.weight\) is missing"):
        pb.load(saved, like=build(1))
    saved.write_bytes(intact)
    rewrite(saved, drop=["state/0.npy"])
    with pytest.raises(CheckpointError, match=r"state/0\.npy \(optimiser state for model\['layers'\]\[0\]\.weight\) is missing"):
        pb.load(saved, like=build(1))


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["arrays"][0].update(shape=[-1]), r"arrays\[0\]\.shape must be a list of non-negative"),
    (lambda m: m["arrays"][0].update(dtype="not-a-dtype"), r"not a NumPy dtype"),
    (lambda m: m["arrays"][0].pop("sha256"), r"arrays\[0\] needs a field 'sha256'"),
    (lambda m: m["arrays"][0].update(shape=[5]), r"model\['layers'\]\[0\]\.weight has shape \(5,\).*shape \(2, 2\)"),
    (lambda m: m["state"]["rules"][0].update(rule="mypackage:Mystery"), r"'mypackage:Mystery'.*not defined here"),
    (lambda m: m["state"]["rules"][0]["hyper"]["rules"]["tuple"][0]["hyper"].update(max_norm=-1.0),
     r"cannot rebuild ClipNorm.*max_norm must be > 0"),
    (lambda m: m["state"]["rules"][0]["hyper"]["rules"]["tuple"][0]["hyper"].update(speed=1.0), r"ClipNorm has hyperparameters"),
    (lambda m: m["state"]["leaves"][0].update(value={"array": 999}), r"state array 999"),
    (lambda m: m["state"]["leaves"][0].update(value={"pickle": "x"}), r"unknown form"),
    (lambda m: m["state"]["leaves"].pop(0), r"optimiser state has no entry for model\['layers'\]\[0\]\.weight"),
    (lambda m: m["state"]["leaves"].append(m["state"]["leaves"][0]), r"state for model\['layers'\]\[0\]\.weight is listed twice"),
    (lambda m: m["arrays"].append(m["arrays"][0]), r"model\['layers'\]\[0\]\.weight is listed twice"),
])
def test_malformed_manifests_are_refused_with_the_problem_named(saved, edit, message):
    rewrite(saved, edit)
    with pytest.raises(CheckpointError, match=message):
        pb.load(saved, like=build(1))


def test_an_object_array_smuggled_into_the_file_is_never_unpickled(saved, tmp_path):
    marker = tmp_path / "ran"
    payload = np.array([_Boobytrap(str(marker))], dtype=object)
    buffer = io.BytesIO()
    np.save(buffer, payload, allow_pickle=True)
    data = buffer.getvalue()

    def claim_float(m):  # a manifest that matches the smuggled entry's checksum
        m["arrays"][0].update(sha256=hashlib.sha256(data).hexdigest(), dtype="<f8", shape=[1])

    rewrite(saved, claim_float, replace={"model/0.npy": data})
    with pytest.raises(CheckpointError):
        pb.load(saved, like=build(1))
    rewrite(saved, lambda m: m["arrays"][0].update(dtype="|O"))
    with pytest.raises(CheckpointError, match="object dtype"):
        pb.load(saved, like=build(1))
    assert not marker.exists()


def test_a_header_asking_for_more_memory_than_the_file_holds_is_refused(saved):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
    data = header.getvalue()

    def claim_huge(m):
        m["state"]["arrays"][0].update(sha256=hashlib.sha256(data).hexdigest(), shape=[10**12], dtype="<f8")

    intact = saved.read_bytes()
    rewrite(saved, claim_huge, replace={"state/0.npy": data})  # manifest and header agree on the huge shape
    with pytest.raises(CheckpointError, match=r"state for model\['layers'\]\[0\]\.weight does not fit.*"
                       r"shape \(1000000000000,\), where the rule keeps .* shape \(2, 2\)"):
        pb.load(saved, like=build(1))
    saved.write_bytes(intact)
    rewrite(saved, replace={"state/0.npy": data})  # only the header asks for it
    with pytest.raises(CheckpointError, match=r"state/0\.npy .* holds dtype float64 and shape \(1000000000000,\), "
                       r"but the manifest says dtype float64 and shape \(2, 2\)"):
        pb.load(saved, like=build(1))
    saved.write_bytes(intact)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (2, 2)})
    rewrite(saved, replace={"state/0.npy": header.getvalue()})  # a header and no data
    with pytest.raises(CheckpointError, match=r"state/0\.npy .* has 0 bytes of data; dtype and shape need 32"):
        pb.load(saved, like=build(1))
    saved.write_bytes(intact)
    big = io.BytesIO()
    np.save(big, np.zeros(100_000))
    rewrite(saved, lambda m: m["state"]["arrays"][0].update(sha256=hashlib.sha256(big.getvalue()).hexdigest()),
            replace={"state/0.npy": big.getvalue()})
    with pytest.raises(CheckpointError, match=r"state/0\.npy .* is 800128 bytes, more than its dtype and shape need"):
        pb.load(saved, like=build(1))


class _Boobytrap:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("change, message", [
    (lambda m: m.pop("mask"), r"file has an array for model\['mask'\], but `like` has no array there"),
    (lambda m: m.update(extra=np.ones(2)), r"`like` has an array at model\['extra'\], but the file has no value"),
    (lambda m: m.update(embed=np.ones((5, 2), np.float32)) or m.update(head=m["embed"]),
     r"model\['embed'\] has shape \(4, 2\) and dtype float32 in the file, but shape \(5, 2\)"),
    (lambda m: m.update(scalar=np.array(1.0, np.float32)), r"model\['scalar'\] has shape \(\) and dtype float64.*dtype float32"),
    (lambda m: m.update(head=m["embed"].copy()), r"ties model\['embed'\] and model\['head'\].*different arrays"),
    (lambda m: m["layers"].__setitem__(3, Dense(m["layers"][0].weight, np.ones(2))),
     r"ties model\['layers'\]\[0\]\.bias and model\['layers'\]\[3\]\.bias \(one shared array\), but in `like` they are different"),
])
def test_a_like_that_does_not_match_is_refused_naming_the_place(saved, change, message):
    like = build(1)
    change(like)
    with pytest.raises(CheckpointError, match=message):
        pb.load(saved, like=like)


def test_like_with_a_tie_the_file_lacks_is_refused(tmp_path):
    pb.save(tmp_path / "m.ckpt", {"a": np.zeros(2), "b": np.ones(2)})
    w = np.zeros(2)
    with pytest.raises(CheckpointError, match=r"in `like`, model\['a'\] and model\['b'\] are one shared array"):
        pb.load(tmp_path / "m.ckpt", like={"a": w, "b": w})


# --- hostile files: memory bounded by `like`, every refusal a CheckpointError -------------
def raw_zip(path, entries):
    """Write a ZIP by hand: `entries` is a list of (name, data as stored, method, crc, declared size)."""
    out, central = bytearray(), bytearray()
    for name, data, method, crc, size in entries:
        name = name.encode()
        fields = struct.pack("<HHHHHIIIHH", 20, 0, method, 0, 0x21, crc, len(data), size, len(name), 0)
        central += b"PK\x01\x02" + struct.pack("<H", 20) + fields + struct.pack("<HHHII", 0, 0, 0, 0, len(out)) + name
        out += b"PK\x03\x04" + fields + name + data
    end = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(central), len(out), 0)
    path.write_bytes(bytes(out + central + end))


def stored(name, data):
    return (name, data, zipfile.ZIP_STORED, zlib.crc32(data), len(data))


GIB_OF_ZEROS_CRC = 1533330096  # zlib.crc32(bytes(2**30)), computed once (it takes a second)


def deflated_zeros(prefix=b"", mib=1024):
    """A raw deflate stream of `prefix` then `mib` MiB of zeros, about 1 KiB per MiB, built without inflating it."""
    first = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = first.compress(prefix) + first.flush(zlib.Z_FULL_FLUSH)
    block = zlib.compressobj(9, zlib.DEFLATED, -15)
    one_mib = block.compress(bytes(2**20)) + block.flush(zlib.Z_FULL_FLUSH)  # starts from an empty window
    return head + one_mib * mib + zlib.compressobj(9, zlib.DEFLATED, -15).flush()


def test_the_deflated_zeros_helper_builds_what_it_says():
    inflater = zlib.decompressobj(-15)
    data = inflater.decompress(deflated_zeros(b"head", mib=3))
    assert data == b"head" + bytes(3 * 2**20) and inflater.eof and not inflater.unused_data
    assert len(deflated_zeros()) < 1.1 * 2**20


def refused_within_memory(path, like, message, limit=32 * 2**20):
    """pb.load(path, like) raises a CheckpointError matching `message`, allocating at most `limit` bytes."""
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=message):
            pb.load(path, like=like)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit, f"loading allocated {peak} bytes"


def test_a_manifest_that_inflates_to_a_gibibyte_is_refused_without_inflating_it(tmp_path):
    path = tmp_path / "bomb.ckpt"
    raw_zip(path, [("manifest.json", deflated_zeros(), zipfile.ZIP_DEFLATED, GIB_OF_ZEROS_CRC, 2**30)])
    assert path.stat().st_size < 1.1 * 2**20
    refused_within_memory(path, {"w": np.zeros(3)}, r"manifest\.json \(the manifest\) is 1073741824 bytes, more than the 16 MiB")


def test_an_entry_inflating_to_more_than_it_declares_is_refused_after_its_declared_size(tmp_path):
    manifest = json.dumps({"format": "pullback-checkpoint", "version": 1, "arrays": [], "state": None}).encode()
    path = tmp_path / "bomb.ckpt"
    stream = deflated_zeros(manifest)
    raw_zip(path, [("manifest.json", stream, zipfile.ZIP_DEFLATED, zlib.crc32(manifest), len(manifest))])
    refused_within_memory(path, {}, r"manifest\.json \(the manifest\) inflates to more than the \d+ bytes it declares")
    # the same manifest, honestly deflated, loads
    raw_zip(path, [("manifest.json", deflated_zeros(manifest, mib=0), zipfile.ZIP_DEFLATED, zlib.crc32(manifest), len(manifest))])
    assert pb.load(path, like={}) == {}


def test_a_state_array_that_inflates_to_a_gibibyte_is_refused_before_it_is_read(tmp_path):
    """The manifest and the .npy header agree on 2**27 float64s, but Adam keeps 3 for this parameter."""
    model = {"w": np.arange(3.0)}
    pb.save(tmp_path / "small.ckpt", model, optim.setup(optim.Adam(), model))
    with zipfile.ZipFile(tmp_path / "small.ckpt") as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    manifest = json.loads(entries.pop("manifest.json"))
    manifest["state"]["arrays"][0]["shape"] = [2**27]  # its checksum does not matter: nothing is read
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (2**27,)})
    bomb = deflated_zeros(header.getvalue())
    entries.pop("state/0.npy")
    path = tmp_path / "bomb.ckpt"
    raw_zip(path, [stored(name, data) for name, data in entries.items()]
            + [("state/0.npy", bomb, zipfile.ZIP_DEFLATED, 0, len(header.getvalue()) + 2**30),
               stored("manifest.json", json.dumps(manifest).encode())])
    assert path.stat().st_size < 1.1 * 2**20
    refused_within_memory(path, {"w": np.zeros(3)}, r"state for model\['w'\] does not fit the parameter there.*"
                          r"item \[0\] of the Adam state is an array of dtype float64 and shape \(134217728,\)")


def test_a_deflated_checkpoint_loads_with_its_entries_checked(tmp_path):
    model, state = trained(1)
    pb.save(tmp_path / "run.ckpt", model, state)
    with zipfile.ZipFile(tmp_path / "run.ckpt") as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(tmp_path / "zipped.ckpt", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    loaded, loaded_state = pb.load(tmp_path / "zipped.ckpt", like=build(1))
    for p, x in arrays_by_path(model).items():
        assert_bit_identical(x, arrays_by_path(loaded)[p])
    assert_states_identical(state, loaded_state, model, loaded)
    with zipfile.ZipFile(tmp_path / "bz2.ckpt", "w", compression=zipfile.ZIP_BZIP2) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    with pytest.raises(CheckpointError, match=r"manifest\.json \(the manifest\) uses ZIP compression method 12"):
        pb.load(tmp_path / "bz2.ckpt", like=build(1))


@pytest.mark.parametrize("key", [frozenset({"a", "b"}), object(), float("nan"), 1.5, ("ok", frozenset())])
def test_dict_keys_whose_repr_is_not_stable_are_refused_at_save(tmp_path, key):
    path = tmp_path / "m.ckpt"
    with pytest.raises(CheckpointError, match=r"model\['layers'\] has the key .* which leads to the array at "
                       r"model\['layers'\]\[.*\]\['w'\].*str, int, bool or None \(or tuples of these\)"):
        pb.save(path, {"layers": {key: {"w": np.zeros(2)}, "fine": np.ones(1)}})
    assert not path.exists()
    pb.save(path, {"layers": {"fine": np.ones(1)}})
    with pytest.raises(CheckpointError, match=r"cannot load into `like`: .* has the key"):
        pb.load(path, like={"layers": {"fine": np.ones(1), key: np.zeros(2)}})


def test_stable_keys_and_unstable_keys_without_arrays_are_fine(tmp_path):
    model = {"cfg": {frozenset({"x"}): "no arrays here"}, 3: np.ones(1), None: np.ones(2), (1, "a", True): np.ones(3)}
    pb.save(tmp_path / "m.ckpt", model)
    loaded = pb.load(tmp_path / "m.ckpt", like=model)
    assert loaded[None].shape == (2,) and loaded[(1, "a", True)].shape == (3,)
    with zipfile.ZipFile(tmp_path / "m.ckpt") as archive:
        paths = {p for s in json.loads(archive.read("manifest.json"))["arrays"] for p in s["paths"]}
    assert paths == {"model[3]", "model[None]", "model[(1, 'a', True)]"}


@pytest.mark.parametrize("manifest", [
    "[" * 100_000 + "]" * 100_000,
    '{"format": "pullback-checkpoint", "version": 1, "arrays": [], "state": null, "x": ' + "[" * 900 + "]" * 900 + "}",
    None,  # a state value nested 200 tuples deep
], ids=["100000-deep", "900-deep-field", "200-deep-state-value"])
def test_a_deeply_nested_manifest_is_refused_without_recursion_error(saved, manifest):
    if manifest is None:
        def deep(m):
            value = 0
            for _ in range(200):
                value = {"tuple": [value]}
            m["state"]["leaves"][0]["value"] = value
        rewrite(saved, deep)
    else:
        rewrite(saved, replace={"manifest.json": manifest.encode()})
    with pytest.raises(CheckpointError, match=r"manifest\.json is nested more than 64 levels deep"):
        pb.load(saved, like=build(1))


def flag_offsets(data, name):
    """Byte offsets of the general-purpose flags of entry `name`: (in its local header, in the central directory)."""
    name = name.encode()
    local = central = None
    for match in re.finditer(b"PK\x03\x04", data):
        if data[match.start() + 30 : match.start() + 30 + len(name)] == name:
            local = match.start() + 6
    for match in re.finditer(b"PK\x01\x02", data):
        if data[match.start() + 46 : match.start() + 46 + len(name)] == name:
            central = match.start() + 8
    return local, central


@pytest.mark.parametrize("where", ["local", "central", "both"])
@pytest.mark.parametrize("entry", ["model/0.npy", "manifest.json"])
def test_an_entry_flagged_as_encrypted_is_refused_naming_it(saved, where, entry):
    data = bytearray(saved.read_bytes())
    local, central = flag_offsets(data, entry)
    for offset in {"local": [local], "central": [central], "both": [local, central]}[where]:
        data[offset] ^= 0x01
    saved.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"the entry {re.escape(entry)} .* is marked as encrypted"):
        pb.load(saved, like=build(1))


def graft_state(tmp_path, donor_model, model):
    """A file holding `model` and an Adam state whose arrays come from a state for `donor_model`."""
    pb.save(tmp_path / "donor.ckpt", donor_model, optim.setup(optim.Adam(), donor_model))
    pb.save(tmp_path / "run.ckpt", model, optim.setup(optim.Adam(), model))
    with zipfile.ZipFile(tmp_path / "donor.ckpt") as archive:
        donor = json.loads(archive.read("manifest.json"))["state"]["arrays"]
        donor_entries = {s["entry"]: archive.read(s["entry"]) for s in donor}
    rewrite(tmp_path / "run.ckpt", lambda m: m["state"].update(arrays=donor), replace=donor_entries)
    return tmp_path / "run.ckpt"


@pytest.mark.parametrize("donor, message", [
    ({"w": np.zeros(3), "b": np.zeros(2)}, r"state for model\['w'\] does not fit the parameter there \(an array of dtype "
     r"float64 and shape \(4,\)\): item \[0\] of the Adam state is an array of dtype float64 and shape \(3,\), where the rule "
     r"keeps an array of dtype float64 and shape \(4,\)"),
    ({"w": np.zeros(4, np.float32), "b": np.zeros(2, np.float32)},
     r"model\['w'\] does not fit .* dtype float32 and shape \(4,\), where the rule keeps an array of dtype float64"),
])
def test_an_optimiser_state_for_other_shapes_is_refused_at_load(tmp_path, donor, message):
    model = {"w": np.ones(4), "b": np.ones(2)}
    path = graft_state(tmp_path, donor, model)
    with pytest.raises(CheckpointError, match=message):
        pb.load(path, like={"w": np.zeros(4), "b": np.zeros(2)})


def test_an_optimiser_state_for_other_shapes_is_refused_at_save(tmp_path):
    model = {"w": np.ones(4), "b": np.ones(2)}
    state = optim.setup(optim.OptimiserChain(optim.ClipNorm(1.0), optim.Adam()), {"w": np.ones(3), "b": np.ones(2)})
    with pytest.raises(CheckpointError, match=r"state for model\['w'\] does not fit the parameter there .*: item \[0\] of "
                       r"the Adam state \(rule \[1\] of the OptimiserChain\) is an array of dtype float64 and shape \(3,\)"):
        pb.save(tmp_path / "run.ckpt", model, state)
    assert not (tmp_path / "run.ckpt").exists()


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["state"]["leaves"][0]["value"]["tuple"].pop(), r"the OptimiserChain state is a tuple of 1 items, not a tuple of 2"),
    (lambda m: m["state"]["leaves"][0]["value"]["tuple"][1]["tuple"].append({"tuple": []}),
     r"item \[3\] of the Adam state \(rule \[1\] of the OptimiserChain\) is a tuple .*, where the rule keeps a number"),
    (lambda m: m["state"]["leaves"][0]["value"]["tuple"][1]["tuple"].pop(0),
     r"item \[1\] of the Adam state \(rule \[1\] of the OptimiserChain\) is a int, where the rule keeps an array"),
    (lambda m: m["state"]["leaves"][0]["value"]["tuple"][1]["tuple"].__setitem__(2, {"array": 0}),
     r"state array 0 is used twice"),
    (lambda m: m["state"]["arrays"].append(m["state"]["arrays"][0]), r"state\.arrays\[2\] belongs to no optimiser state entry"),
])
def test_an_optimiser_state_of_the_wrong_structure_is_refused_at_load(tmp_path, edit, message):
    model = {"w": np.ones(4)}
    pb.save(tmp_path / "run.ckpt", model, optim.setup(optim.OptimiserChain(optim.ClipNorm(1.0), optim.Adam()), model))
    rewrite(tmp_path / "run.ckpt", edit)
    with pytest.raises(CheckpointError, match=message):
        pb.load(tmp_path / "run.ckpt", like=model)


class Layer:
    def __init__(self, w, b):
        self.w, self.b = w, b


class LayerTrainingWeightOnly(Layer):
    def trainable(self):
        return ("w",)


def test_the_state_must_cover_exactly_the_trainable_arrays_of_like(tmp_path):
    model = Layer(np.ones(2), np.ones(1))
    pb.save(tmp_path / "run.ckpt", model, optim.setup(optim.Descent(), model))
    with pytest.raises(CheckpointError, match=r"state has an entry for model\.b, which is not a trainable array of `like`"):
        pb.load(tmp_path / "run.ckpt", like=LayerTrainingWeightOnly(np.zeros(2), np.zeros(1)))
    model = LayerTrainingWeightOnly(np.ones(2), np.ones(1))
    pb.save(tmp_path / "run.ckpt", model, optim.setup(optim.Descent(), model))
    with pytest.raises(CheckpointError, match=r"state has no entry for model\.b, which the model trains"):
        pb.load(tmp_path / "run.ckpt", like=Layer(np.zeros(2), np.zeros(1)))


def test_a_state_made_centred_by_adjust_still_round_trips(tmp_path):
    model = [np.array([1.0, -2.0])]
    state = optim.adjust(optim.setup(optim.RMSProp(), model), centred=True)
    assert len(state[0].state) == 1 and state[0].rule.centred
    pb.save(tmp_path / "run.ckpt", model, state)
    loaded_model, loaded_state = pb.load(tmp_path / "run.ckpt", like=[np.zeros(2)])
    grad = [np.array([0.5, 0.25])]
    expected = optim.update(state, model, grad)[1][0]
    np.testing.assert_array_equal(optim.update(loaded_state, loaded_model, grad)[1][0], expected)


class Link:
    """A layer of a model that is a linked list: `rest` is the rest of the model."""

    def __init__(self, rest, i, offset):
        self.rest = rest
        self.weight = np.full(2, i + offset) if i % 1000 == 0 else float(i)


def linked(depth, offset):
    model = None
    for i in range(depth):
        model = Link(model, i, offset)
    return model


def test_a_model_nested_5000_deep_saves_and_loads_without_recursion_error(tmp_path):
    pb.save(tmp_path / "deep.ckpt", linked(5000, 0.5))
    with zipfile.ZipFile(tmp_path / "deep.ckpt") as archive:
        paths = [s["paths"] for s in json.loads(archive.read("manifest.json"))["arrays"]]
    assert paths == [["model" + ".rest" * (4999 - i) + ".weight"] for i in (0, 1000, 2000, 3000, 4000)]  # `rest` comes first
    like = linked(5000, 7.0)
    layer, original = pb.load(tmp_path / "deep.ckpt", like=like), like
    for i in reversed(range(5000)):
        assert layer is not original
        if i % 1000 == 0:
            assert_bit_identical(layer.weight, np.full(2, i + 0.5))
            assert original.weight.tolist() == [i + 7.0] * 2  # `like` is unchanged
        else:
            assert layer.weight == float(i)
        layer, original = layer.rest, original.rest
    assert layer is None


class Node:
    def __init__(self, w):
        self.w, self.prev, self.next = w, None, None


def doubly_linked(values):
    nodes = [Node(np.array([v])) for v in values]
    for i in range(1, len(nodes)):
        nodes[i - 1].next, nodes[i].prev = nodes[i], nodes[i - 1]
    return {"head": nodes[0], "tail": nodes[-1]}


def test_a_cyclic_model_names_each_array_at_every_place_short_of_a_way_back(tmp_path):
    pb.save(tmp_path / "cyclic.ckpt", doubly_linked([1.0, 2.0, 3.0]))
    with zipfile.ZipFile(tmp_path / "cyclic.ckpt") as archive:
        paths = [s["paths"] for s in json.loads(archive.read("manifest.json"))["arrays"]]
    assert paths == [
        ["model['head'].w", "model['tail'].prev.prev.w"],
        ["model['head'].next.w", "model['tail'].prev.w"],
        ["model['head'].next.next.w", "model['tail'].w"],
    ]
    loaded = pb.load(tmp_path / "cyclic.ckpt", like=doubly_linked([0.0, 0.0, 0.0]))
    head, tail = loaded["head"], loaded["tail"]
    assert head.next.next is tail and tail.prev.prev is head and head.next.prev is head
    assert [head.w[0], head.next.w[0], tail.w[0]] == [1.0, 2.0, 3.0]


# --- arrays of other libraries ------------------------------------------------------------
def test_a_dask_array_is_stored_and_comes_back_as_dask_in_like_s_chunks(tmp_path):
    """pb.optim trains Dask arrays: pb.save must store them (computed), never skip them."""
    da = pytest.importorskip("dask.array")
    model = {"w": da.from_array(np.array([1.0, 2.0, 3.0]), chunks=2), "b": np.array([4.0, 5.0])}
    pb.save(tmp_path / "model.ckpt", model)
    loaded = pb.load(tmp_path / "model.ckpt", like={"w": da.zeros(3, chunks=1), "b": np.zeros(2)})
    assert isinstance(loaded["w"], da.Array) and loaded["w"].chunks == ((1, 1, 1),)
    np.testing.assert_array_equal(np.asarray(loaded["w"]), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(loaded["b"], [4.0, 5.0])


def test_a_dask_model_and_its_optimiser_state_round_trip(tmp_path):
    da = pytest.importorskip("dask.array")
    model = {"w": da.from_array(np.arange(5.0), chunks=2)}
    state = optim.setup(optim.Adam(0.1), model)
    state, model = optim.update(state, model, {"w": da.ones(5, chunks=2)})
    pb.save(tmp_path / "run.ckpt", model, state)
    loaded, loaded_state = pb.load(tmp_path / "run.ckpt", like={"w": da.zeros(5, chunks=2)})
    np.testing.assert_array_equal(np.asarray(loaded["w"]), np.asarray(model["w"]))
    moments = loaded_state["w"].state[:2]
    assert all(isinstance(m, da.Array) for m in moments) and loaded_state["w"].state[2] == 1
    for mine, theirs in zip(moments, state["w"].state[:2]):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))


def test_an_array_api_array_is_stored_and_comes_back_as_one(tmp_path):
    xp = pytest.importorskip("array_api_strict")
    model = {"w": xp.asarray([1.0, 2.0], dtype=xp.float32), "n": xp.asarray([3], dtype=xp.int64)}
    pb.save(tmp_path / "model.ckpt", model)
    like = {"w": xp.asarray([0.0, 0.0], dtype=xp.float32), "n": xp.asarray([0], dtype=xp.int64)}
    loaded = pb.load(tmp_path / "model.ckpt", like=like)
    assert type(loaded["w"]) is type(like["w"]) and loaded["w"].dtype == xp.float32
    assert loaded["w"].device == like["w"].device
    np.testing.assert_array_equal(np.from_dlpack(loaded["w"]), [1.0, 2.0])
    np.testing.assert_array_equal(np.from_dlpack(loaded["n"]), [3])
    with pytest.raises(CheckpointError, match=r"model\['w'\] has shape \(2,\) and dtype float32 in the file, but shape "
                       r"\(2,\) and dtype float64"):
        pb.load(tmp_path / "model.ckpt", like={"w": xp.asarray([0.0, 0.0]), "n": like["n"]})


def test_a_big_endian_checkpoint_loads_into_a_native_like(tmp_path):
    """The format is portable: a file written from big-endian arrays (as on s390x) loads into a native `like`."""
    values = np.array([1.5, -2.0, 3.25])
    model = [values.astype(">f8")]
    state = optim.setup(optim.Momentum(), model)
    state, model = optim.update(state, model, [np.ones(3, ">f8")])
    pb.save(tmp_path / "m.ckpt", model, state)
    loaded, loaded_state = pb.load(tmp_path / "m.ckpt", like=[np.zeros(3)])
    assert loaded[0].dtype == np.dtype("=f8") and loaded_state[0].state[0].dtype == np.dtype("=f8")
    np.testing.assert_array_equal(loaded[0], model[0])
    np.testing.assert_array_equal(loaded_state[0].state[0], state[0].state[0])


def test_load_with_a_like_holding_no_arrays_returns_a_copy_not_like_itself(tmp_path):
    """'load reads into a copy of like (like itself is never changed)', arrays or not."""
    pb.save(tmp_path / "m.ckpt", {"lr": 0.5, "names": ["a"]})
    like = {"lr": 0.1, "names": ["b"]}
    loaded = pb.load(tmp_path / "m.ckpt", like=like)
    assert loaded == like and loaded is not like and loaded["names"] is not like["names"]
    loaded["names"].append("c")
    assert like == {"lr": 0.1, "names": ["b"]}


def test_an_object_that_cannot_be_copied_is_kept_in_the_loaded_copy(tmp_path):
    pb.save(tmp_path / "m.ckpt", {"w": np.ones(2)})
    with open(os.devnull) as log:
        like = {"w": np.zeros(2), "log": log, "config": {"depth": 2}}
        loaded = pb.load(tmp_path / "m.ckpt", like=like)
        assert loaded["log"] is log and loaded["config"] == like["config"] and loaded["config"] is not like["config"]
    np.testing.assert_array_equal(loaded["w"], 1.0)


# --- what save writes, load reads ---------------------------------------------------------
def test_save_refuses_a_manifest_larger_than_load_accepts_before_writing(tmp_path):
    model = {f"{'k' * 2**20}{i}": np.full(1, float(i)) for i in range(17)}  # 17 paths of 1 MiB each
    path = tmp_path / "model.ckpt"
    with pytest.raises(CheckpointError, match=r"manifest would be \d+ bytes, more than the 16 MiB that load accepts"):
        pb.save(path, model)
    assert not path.exists() and os.listdir(tmp_path) == []


def test_save_refuses_optimiser_chains_nested_deeper_than_load_accepts(tmp_path):
    rule = optim.Adam()
    for _ in range(15):
        rule = optim.OptimiserChain(rule)
    model = {"w": np.ones(2)}
    state = optim.setup(rule, model)
    with pytest.raises(CheckpointError, match=r"nested more than the 64 levels deep that load accepts.*OptimiserChain\(a, b, c\)"):
        pb.save(tmp_path / "run.ckpt", model, state)
    assert os.listdir(tmp_path) == []
    shallow = optim.OptimiserChain(optim.OptimiserChain(optim.Adam()))
    pb.save(tmp_path / "run.ckpt", model, optim.setup(shallow, model))
    assert pb.load(tmp_path / "run.ckpt", like=model)[1]["w"].rule == shallow


def test_a_list_hyperparameter_of_a_custom_rule_comes_back_a_list(tmp_path):
    @dataclasses.dataclass(frozen=True)
    class StepsRule(optim.Rule):
        milestones: list = dataclasses.field(default_factory=lambda: [10, 20])
        shape: tuple = (1, 2)
        lr: float = 0.1

        def apply(self, state, x, dx):
            return state, self.lr * dx

    model = {"w": np.ones(2)}
    state = optim.setup(StepsRule(), model)
    pb.save(tmp_path / "run.ckpt", model, state)
    _, loaded = pb.load(tmp_path / "run.ckpt", like=model)
    rule = loaded["w"].rule
    assert type(rule.milestones) is list and type(rule.shape) is tuple and rule == state["w"].rule


def test_saving_a_state_whose_rule_class_was_redefined_says_so(tmp_path):
    """Re-running a notebook cell that defines a Rule makes an existing state's class stale."""

    def define():
        @dataclasses.dataclass(frozen=True)
        class NotebookRule(optim.Rule):
            lr: float = 0.1

            def apply(self, state, x, dx):
                return state, self.lr * dx

        return NotebookRule

    model = {"w": np.ones(2)}
    state = optim.setup(define()(), model)
    define()  # the cell is run again
    with pytest.raises(CheckpointError, match=r"before that class was redefined.*setup\(rule, model\)") as info:
        pb.save(tmp_path / "run.ckpt", model, state)
    assert "not a registered" not in str(info.value) and os.listdir(tmp_path) == []


# --- paths and files ---------------------------------------------------------------------
def test_saving_into_a_missing_folder_names_the_folder_not_a_temporary_file(tmp_path):
    folder = tmp_path / "runs" / "day1"
    with pytest.raises(FileNotFoundError, match="does not exist; create it first") as info:
        pb.save(folder / "model.ckpt", {"w": np.zeros(2)})
    assert ".tmp" not in str(info.value) and str(folder) in str(info.value)


def test_a_file_name_the_file_system_accepts_can_be_saved(tmp_path):
    """A 250-byte name is legal (NAME_MAX is 255); its temporary name is shortened to fit."""
    path = tmp_path / ("m" * 245 + ".ckpt")
    pb.save(path, {"w": np.arange(2.0)})
    pb.save(path, {"w": np.arange(2.0)})  # and replaced
    np.testing.assert_array_equal(pb.load(path, like={"w": np.zeros(2)})["w"], [0.0, 1.0])
    assert os.listdir(tmp_path) == [path.name]


def test_an_empty_path_is_refused_clearly_without_writing_anything(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    seen = []
    real_open = os.open

    def spying_open(path, *args, **kwargs):
        seen.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", spying_open)
    for name in ("", b""):
        with pytest.raises(ValueError, match="path to save to is empty; give a file name") as info:
            pb.save(name, {"w": np.zeros(1)})
        assert ".tmp" not in str(info.value)
    assert seen == [] and os.listdir(tmp_path) == ["work"] and os.listdir(work) == []


def test_overwriting_a_private_checkpoint_keeps_it_private(tmp_path):
    path = tmp_path / "model.ckpt"
    pb.save(path, {"w": np.zeros(2)})
    os.chmod(path, 0o600)
    pb.save(path, {"w": np.ones(2)})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    np.testing.assert_array_equal(pb.load(path, like={"w": np.zeros(2)})["w"], 1.0)


def test_a_bfloat16_array_is_refused_naming_its_dtype_and_the_conversion(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    model = {"w": np.ones(2, ml_dtypes.bfloat16)}
    for name in ("m.ckpt", "m.safetensors"):
        with pytest.raises(CheckpointError, match=r"model\['w'\] has dtype bfloat16, from the ml_dtypes package.*"
                           r"x\.astype\(np\.float32\)"):
            pb.save(tmp_path / name, model)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("rule, change", [(optim.RMSProp(centred=True), {"centred": False}),
                                          (optim.Adam(amsgrad=True), {"amsgrad": False}),
                                          (optim.AdamW(amsgrad=True), {"amsgrad": False}),
                                          (optim.Momentum(0.1, 0.9, dampening=0.5), {"dampening": 0.0})],
                         ids=["rmsprop-uncentred", "adam-without-amsgrad", "adamw-without-amsgrad", "undamped"])
def test_a_state_an_option_turned_off_by_adjust_left_longer_is_saved_and_resumes(tmp_path, rule, change):
    # the state keeps its extra entries until the next step; saved then, the resumed run steps as the unsaved one
    model = {"w": np.array([1.0, -2.0, 3.0])}
    state = optim.setup(rule, model)
    state, model = optim.update(state, model, {"w": np.array([0.5, 1.0, -1.5])})
    state = optim.adjust(state, **change)
    pb.save(tmp_path / "c.pb", model, state)
    loaded_model, loaded_state = pb.load(tmp_path / "c.pb", like=model)
    g = {"w": np.array([0.25, -0.5, 2.0])}
    _, expected = optim.update(state, model, g)
    _, resumed = optim.update(loaded_state, loaded_model, g)
    np.testing.assert_array_equal(resumed["w"], expected["w"])
    assert not np.array_equal(expected["w"], model["w"])
