"""pb.save / pb.load keep a model's random generators (NumPy's Generators, RandomStates, bare bit
generators and SeedSequences, and Python's random.Random): their full states round-trip, so a
training run with dropout resumed from a checkpoint draws the masks of the uninterrupted run; every
way a file's generators and `like`'s can disagree, or a file's can be damaged, is refused, and what
cannot be stored cleanly is refused at saving rather than dropped."""

import base64
import dataclasses
import json
import random
import re
import zipfile

import numpy as np
import pytest

import pullback as pb
from pullback import nn, optim
from pullback.checkpoint import CheckpointError

BIT_GENERATORS = ["PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"]
# A checkpoint written by pullback before generators were stored: {"w": np.arange(3.0), "drop": nn.Dropout(0.5, rng=0)}.
OLD_FILE = base64.b64decode(
    "UEsDBBQAAAAAAAAAIQAkIeErmAAAAJgAAAALAAAAbW9kZWwvMC5ucHmTTlVNUFkBAHYAeydkZXNjcic6ICc8ZjgnLCAnZm9ydHJh"
    "bl9vcmRlcic6IEZhbHNlLCAnc2hhcGUnOiAoMywpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAg"
    "ICAgICAgICAgICAgICAgICAgCgAAAAAAAAAAAAAAAAAA8D8AAAAAAAAAQFBLAwQUAAAAAAAAACEA4XzwaFEBAABRAQAADQAAAG1h"
    "bmlmZXN0Lmpzb257CiAiZm9ybWF0IjogInB1bGxiYWNrLWNoZWNrcG9pbnQiLAogInZlcnNpb24iOiAxLAogIndyaXR0ZW5fYnki"
    "OiAicHVsbGJhY2sgMC4xLjAiLAogIm1vZGVsX3R5cGUiOiAiZGljdCIsCiAiYXJyYXlzIjogWwogIHsKICAgImVudHJ5IjogIm1v"
    "ZGVsLzAubnB5IiwKICAgImR0eXBlIjogIjxmOCIsCiAgICJzaGFwZSI6IFsKICAgIDMKICAgXSwKICAgInNoYTI1NiI6ICI4Mzg5"
    "YWEwNTM2YjNmNTFjYzk1NzdjMGM2YmQxOTkyYmUyYjVlZGQyM2Q1NmZiYzRjMDQ4NDQwMjliNDJiMjA1IiwKICAgInBhdGhzIjog"
    "WwogICAgIm1vZGVsWyd3J10iCiAgIF0KICB9CiBdLAogInN0YXRlIjogbnVsbAp9UEsBAhQDFAAAAAAAAAAhACQh4SuYAAAAmAAA"
    "AAsAAAAAAAAAAAAAAIABAAAAAG1vZGVsLzAubnB5UEsBAhQDFAAAAAAAAAAhAOF88GhRAQAAUQEAAA0AAAAAAAAAAAAAAIABwQAA"
    "AG1hbmlmZXN0Lmpzb25QSwUGAAAAAAIAAgB0AAAAPQIAAAAA"
)


def make(kind, name, seed):
    bits = getattr(np.random, name)(seed)
    return np.random.RandomState(bits) if kind == "RandomState" else np.random.Generator(bits)


def draws(g):
    """What a generator gives next: uniforms, and normals (a RandomState's cached deviate first)."""
    return np.concatenate([g.random(5), g.standard_normal(3)])


def state_text(g):
    return repr(g.get_state(legacy=False) if isinstance(g, np.random.RandomState) else g.bit_generator.state)


def rewrite(path, edit):
    """Rewrite a checkpoint's manifest (the archive stays valid: correct CRCs)."""
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    manifest = json.loads(entries["manifest.json"])
    edit(manifest)
    entries["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
@pytest.mark.parametrize("kind", ["Generator", "RandomState"])
@pytest.mark.parametrize("name", BIT_GENERATORS)
def test_each_generator_type_round_trips(tmp_path, ext, kind, name):
    """Draws after loading equal the original's after saving; the loaded generator is new, and `like`'s is untouched."""
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    g = make(kind, name, 1)
    g.random(7), g.standard_normal()  # advanced, with a RandomState's normal deviate cached
    path = tmp_path / f"m{ext}"
    pb.save(path, {"w": np.ones(2), "rng": g})
    like = {"w": np.zeros(2), "rng": make(kind, name, 99)}
    before = state_text(like["rng"])
    loaded = pb.load(path, like=like)
    assert type(loaded["rng"]) is type(g) and loaded["rng"] is not g and loaded["rng"] is not like["rng"]
    np.testing.assert_array_equal(draws(loaded["rng"]), draws(g))
    assert state_text(like["rng"]) == before


def test_the_manifest_stores_the_state_and_marks_the_version(tmp_path):
    g = np.random.default_rng(5)
    g.spawn(2)
    pb.save(tmp_path / "g.ckpt", {"w": np.ones(2), "rng": g})
    pb.save(tmp_path / "none.ckpt", {"w": np.ones(2)})
    manifest = json.loads(zipfile.ZipFile(tmp_path / "g.ckpt").read("manifest.json"))
    assert manifest["version"] == 2
    seed_seq = {"entropy": 5, "spawn_key": [], "pool_size": 4, "n_children_spawned": 2}
    assert manifest["generators"] == [{"paths": ["model['rng']"], "type": "Generator",
                                       "state": g.bit_generator.state | {"seed_seq": seed_seq}}]
    manifest = json.loads(zipfile.ZipFile(tmp_path / "none.ckpt").read("manifest.json"))
    assert manifest["version"] == 1 and manifest["generators"] == []  # older pullbacks read it


def _train(m, state, steps):
    X = np.random.default_rng(4).normal(size=(8, 5)).astype(np.float32)
    Y = np.arange(8) % 3
    for _ in range(steps):
        g, = pb.gradient(lambda m: nn.logitcrossentropy(m(X), Y), m)
        state, m = optim.update(state, m, g)
    return m, state


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
def test_dropout_training_resumed_from_a_file_equals_the_uninterrupted_run(tmp_path, ext):
    if ext == ".safetensors":
        pytest.importorskip("safetensors")

    def build(seed):
        return nn.Chain(nn.Dense(5, 8, nn.relu, rng=seed), nn.Dropout(0.3, rng=seed), nn.Dense(8, 3, rng=seed))

    m = build(0)
    m, state = _train(m, optim.setup(optim.Adam(1e-2), m), 3)
    pb.save(tmp_path / f"m{ext}", m)
    pb.save(tmp_path / "state.ckpt", m, state)
    m2 = pb.load(tmp_path / f"m{ext}", like=build(7))
    _, state2 = pb.load(tmp_path / "state.ckpt", like=build(7))
    a, _ = _train(m, state, 3)
    b, _ = _train(m2, state2, 3)
    for x, y in zip(pb.tree.leaves(a), pb.tree.leaves(b)):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)


@dataclasses.dataclass
class Holder:
    weight: np.ndarray
    rng: np.random.Generator


def test_generators_in_dicts_lists_tuples_and_dataclass_fields_and_ties(tmp_path):
    def build(seed):
        shared = np.random.default_rng(seed + 3)
        return {"list": [np.ones(1) * seed, np.random.default_rng(seed)],
                "tuple": (np.random.Generator(np.random.MT19937(seed + 1)),),
                "holder": Holder(np.zeros(2) + seed, np.random.Generator(np.random.Philox(seed + 2))),
                "a": shared, "b": [shared]}

    model = build(0)
    for g in (model["list"][1], model["tuple"][0], model["holder"].rng, model["a"]):
        g.random(3)
    pb.save(tmp_path / "m.ckpt", model)
    manifest = json.loads(zipfile.ZipFile(tmp_path / "m.ckpt").read("manifest.json"))
    assert [e["paths"] for e in manifest["generators"]] == [
        ["model['list'][1]"], ["model['tuple'][0]"], ["model['holder'].rng"], ["model['a']", "model['b'][0]"]]
    loaded = pb.load(tmp_path / "m.ckpt", like=build(5))
    assert isinstance(loaded["holder"], Holder) and loaded["a"] is loaded["b"][0]  # the tie is kept
    for get in (lambda m: m["list"][1], lambda m: m["tuple"][0], lambda m: m["holder"].rng, lambda m: m["a"]):
        np.testing.assert_array_equal(draws(get(loaded)), draws(get(model)))


def test_generators_that_do_not_match_like_are_refused(tmp_path):
    path = tmp_path / "m.ckpt"
    pb.save(path, {"w": np.ones(2), "rng": np.random.default_rng(0)})
    with pytest.raises(CheckpointError, match=r"has a random generator for model\['rng'\], but `like` has none there"):
        pb.load(path, like={"w": np.zeros(2), "rng": None})
    with pytest.raises(CheckpointError, match=r"model\['rng'\] is a Generator of PCG64 in the file but a Generator of "
                                              r"MT19937 in `like`.*np\.random\.Generator\(np\.random\.PCG64\(seed\)\)"):
        pb.load(path, like={"w": np.zeros(2), "rng": np.random.Generator(np.random.MT19937(0))})
    with pytest.raises(CheckpointError, match=r"is a Generator of PCG64 in the file but a RandomState of MT19937"):
        pb.load(path, like={"w": np.zeros(2), "rng": np.random.RandomState(0)})
    pb.save(path, {"w": np.ones(2), "rng": None})
    with pytest.raises(CheckpointError, match=r"`like` has a random generator at model\['rng'\], but the file has none "
                                              r"there.*build `like` the same way as the saved model"):
        pb.load(path, like={"w": np.zeros(2), "rng": np.random.default_rng(0)})
    shared = np.random.default_rng(0)
    pb.save(path, {"a": shared, "b": shared})
    with pytest.raises(CheckpointError, match=r"model\['a'\] is shared with other places in the file than in `like`"):
        pb.load(path, like={"a": np.random.default_rng(0), "b": np.random.default_rng(0)})
    pb.save(path, {"a": np.random.default_rng(0), "b": np.random.default_rng(0)})
    with pytest.raises(CheckpointError, match=r"is shared with other places"):
        pb.load(path, like={"a": shared, "b": shared})


def _pcg(m):
    return m["generators"][0]["state"]


def _mt(m):
    return m["generators"][0]["state"]["state"]


@pytest.mark.parametrize("kind, edit, message", [
    ("PCG64", lambda m: m.update(generators={}), r"generators must be a list"),
    ("PCG64", lambda m: m["generators"].__setitem__(0, [1]), r"generators\[0\] must be \{'paths'"),
    ("PCG64", lambda m: m["generators"][0].update(type="pickle"), r"generators\[0\] must be \{'paths'"),
    ("PCG64", lambda m: m["generators"][0].update(paths=[]), r"generators\[0\] must be \{'paths'"),
    ("PCG64", lambda m: m["generators"][0].update(extra=1), r"generators\[0\] must be \{'paths'"),
    ("PCG64", lambda m: m["generators"][0].update(paths=["model['w']"]), r"random generator for model\['w'\], but `like` has none"),
    ("PCG64", lambda m: _pcg(m).pop("uinteger"), r"generators\[0\]\.state must be an object with the fields"),
    ("PCG64", lambda m: _pcg(m).update(extra=1), r"generators\[0\]\.state must be an object with the fields"),
    ("PCG64", lambda m: _pcg(m).update(state=[1, 2]), r"generators\[0\]\.state\.state must be an object"),
    ("PCG64", lambda m: _pcg(m)["state"].update(inc="7"), r"state\.state\.inc must be an integer in \[0, "),
    ("PCG64", lambda m: _pcg(m)["state"].update(inc=2**200), r"state\.state\.inc must be an integer in \[0, "),
    ("PCG64", lambda m: _pcg(m)["state"].update(inc=-1), r"state\.state\.inc must be an integer in \[0, "),
    ("PCG64", lambda m: _pcg(m).update(has_uint32=True), r"state\.has_uint32 must be an integer in \[0, 2\)"),
    ("PCG64", lambda m: _pcg(m).update(has_uint32=5), r"state\.has_uint32 must be an integer in \[0, 2\)"),
    ("PCG64", lambda m: _pcg(m).update(uinteger=1.0), r"state\.uinteger must be an integer"),
    ("PCG64", lambda m: _pcg(m).update(bit_generator="SFC64"), r"is a Generator of SFC64 in the file but a Generator of PCG64"),
    ("MT19937", lambda m: _mt(m).update(key=_mt(m)["key"][:600]), r"state\.state\.key must be a list of 624 integers of type uint32"),
    ("MT19937", lambda m: _mt(m)["key"].__setitem__(3, 2**32), r"state\.state\.key must be a list of 624 integers"),
    ("MT19937", lambda m: _mt(m)["key"].__setitem__(3, "1"), r"state\.state\.key must be a list of 624 integers"),
    ("MT19937", lambda m: _mt(m).update(key={"array": 0}), r"state\.state\.key must be a list of 624 integers"),
    ("MT19937", lambda m: _mt(m).update(pos=9999), r"state\.state\.pos must be an integer in \[0, 625\)"),
    ("PCG64", lambda m: _pcg(m).pop("seed_seq"), r"generators\[0\]\.state must be an object with the fields"),
    ("PCG64", lambda m: _pcg(m).update(seed_seq=5), r"state\.seed_seq must be null or an object with the fields"),
    ("PCG64", lambda m: _pcg(m)["seed_seq"].pop("pool_size"), r"state\.seed_seq must be null or an object"),
    ("PCG64", lambda m: _pcg(m)["seed_seq"].update(x=1), r"state\.seed_seq must be null or an object"),
    ("PCG64", lambda m: _pcg(m)["seed_seq"].update(entropy=-1), r"state\.seed_seq\.entropy must be an integer in \[0, 2\*\*1024\)"),
    ("PCG64", lambda m: _pcg(m)["seed_seq"].update(entropy=[1] * 1025), r"state\.seed_seq\.entropy must be"),
    ("PCG64", lambda m: _pcg(m)["seed_seq"].update(spawn_key=[1.5]), r"state\.seed_seq\.spawn_key must be a list of at most"),
    ("PCG64", lambda m: _pcg(m)["seed_seq"].update(pool_size=2**40), r"state\.seed_seq\.pool_size must be an integer in \[4, 1025\)"),
    ("MT19937", lambda m: _pcg(m)["seed_seq"].update(n_children_spawned=-1), r"state\.seed_seq\.n_children_spawned must be"),
])
def test_a_damaged_or_hostile_generator_entry_is_refused(tmp_path, kind, edit, message):
    path = tmp_path / "m.ckpt"
    pb.save(path, {"w": np.ones(2), "rng": np.random.Generator(getattr(np.random, kind)(0))})
    rewrite(path, edit)
    with pytest.raises(CheckpointError, match=message):
        pb.load(path, like={"w": np.zeros(2), "rng": np.random.Generator(getattr(np.random, kind)(1))})


def test_an_integer_too_long_to_parse_is_refused(tmp_path):
    path = tmp_path / "m.ckpt"
    pb.save(path, {"rng": np.random.default_rng(0)})
    rewrite(path, lambda m: _pcg(m)["state"].update(inc=10**4000))  # under Python's default 4300-digit limit
    with pytest.raises(CheckpointError, match=r"inc must be an integer in \[0, "):
        pb.load(path, like={"rng": np.random.default_rng(1)})
    with zipfile.ZipFile(path) as archive:
        text = archive.read("manifest.json").decode().replace("1" + "0" * 4000, "9" * 5000)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("manifest.json", text)
    with pytest.raises(CheckpointError, match=r"manifest\.json is not valid JSON"):
        pb.load(path, like={"rng": np.random.default_rng(1)})


def test_a_file_written_before_generators_were_stored_still_loads(tmp_path):
    """`like`'s generator state is kept, as before, in a generator of its own."""
    path = tmp_path / "old.ckpt"
    path.write_bytes(OLD_FILE)
    like = {"w": np.zeros(3), "drop": nn.Dropout(0.5, rng=42)}
    loaded = pb.load(path, like=like)
    np.testing.assert_array_equal(loaded["w"], np.arange(3.0))
    assert loaded["drop"].rng is not like["drop"].rng
    np.testing.assert_array_equal(draws(loaded["drop"].rng), draws(np.random.default_rng(42)))
    assert state_text(like["drop"].rng) == state_text(np.random.default_rng(42))  # not advanced
    assert loaded["drop"].rng.bit_generator.seed_seq is not like["drop"].rng.bit_generator.seed_seq
    assert spawned(loaded["drop"].rng) == spawned(np.random.default_rng(42))  # `like`'s seed sequence, the file has none
    assert like["drop"].rng.bit_generator.seed_seq.n_children_spawned == 0


def test_a_dict_key_that_is_not_stable_cannot_lead_to_a_generator(tmp_path):
    key = object()
    with pytest.raises(CheckpointError, match=r"which leads to the random generator at model\[<object"):
        pb.save(tmp_path / "m.ckpt", {key: np.random.default_rng(0)})


def test_safetensors_keeps_generators_in_its_metadata_readable_by_other_readers(tmp_path):
    safe_open = pytest.importorskip("safetensors").safe_open
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "m.safetensors"
    g = np.random.default_rng(3)
    pb.save(path, {"w": np.arange(2.0), "rng": g})
    assert set(safetensors_numpy.load_file(str(path))) == {"['w']"}  # a plain reader sees the arrays only
    with safe_open(str(path), framework="numpy") as handle:
        metadata = handle.metadata()
    entries = json.loads(metadata["generators"])
    seed_seq = {"entropy": 3, "spawn_key": [], "pool_size": 4, "n_children_spawned": 0}
    assert entries == [{"paths": ["model['rng']"], "type": "Generator", "state": g.bit_generator.state | {"seed_seq": seed_seq}}]
    with pytest.raises(CheckpointError, match=r"is a Generator of PCG64 in the file but a Generator of MT19937"):
        pb.load(path, like={"w": np.zeros(2), "rng": np.random.Generator(np.random.MT19937(0))})
    arrays = {"['w']": np.arange(2.0)}
    entries[0]["state"]["state"]["inc"] = -5
    safetensors_numpy.save_file(arrays, str(path), metadata=metadata | {"generators": json.dumps(entries)})
    with pytest.raises(CheckpointError, match=r"m\.safetensors: .*inc must be an integer in \[0, "):
        pb.load(path, like={"w": np.zeros(2), "rng": np.random.default_rng(0)})
    safetensors_numpy.save_file(arrays, str(path), metadata=metadata | {"generators": "[{"})
    with pytest.raises(CheckpointError, match=r"random generators in its metadata are damaged"):
        pb.load(path, like={"w": np.zeros(2), "rng": np.random.default_rng(0)})
    del metadata["generators"]  # an older pullback's file: `like`'s generator state, in a generator of its own
    safetensors_numpy.save_file(arrays, str(path), metadata=metadata)
    like = {"w": np.zeros(2), "rng": np.random.default_rng(8)}
    loaded = pb.load(path, like=like)
    assert loaded["rng"] is not like["rng"]
    np.testing.assert_array_equal(draws(loaded["rng"]), draws(np.random.default_rng(8)))


def test_a_pytorch_safetensors_file_leaves_a_copy_of_likes_generator(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    safetensors_numpy.save_file({"0.weight": w, "0.bias": np.ones(2, np.float32)}, str(tmp_path / "torch.safetensors"))
    like = nn.Chain(nn.Dense(3, 2), nn.Dropout(0.5, rng=4))
    loaded = pb.load(tmp_path / "torch.safetensors", like=like)
    np.testing.assert_array_equal(loaded.layers[0].weight, w)
    assert loaded.layers[1].rng is not like.layers[1].rng
    np.testing.assert_array_equal(draws(loaded.layers[1].rng), draws(np.random.default_rng(4)))


@dataclasses.dataclass(frozen=True)
class _NoisyDescent(optim.Rule):
    """A rule that keeps a generator, as a hyperparameter, or in its state."""

    rng: object = None
    in_state: bool = False

    def init(self, x):
        return (np.random.default_rng(0),) if self.in_state else ()

    def apply(self, state, x, dx):
        return state, 0.1 * dx


@pytest.mark.parametrize("rule, message", [
    (_NoisyDescent(rng=np.random.default_rng(0)), r"has a hyperparameter Generator\(PCG64\) at 0x\w+ that a checkpoint cannot store"),
    (_NoisyDescent(in_state=True), r"The optimiser state for model\['w'\] holds a Generator"),
])
def test_a_generator_in_an_optimiser_state_is_refused_not_dropped(tmp_path, rule, message):
    model = {"w": np.ones(2)}
    with pytest.raises(CheckpointError, match=message):
        pb.save(tmp_path / "m.ckpt", model, optim.setup(rule, model))
    assert not (tmp_path / "m.ckpt").exists()


# --- random.Random, bare bit generators and seed sequences -------------------------------------
class Halved(random.Random):
    """A random.Random subclass that draws otherwise (its state is random.Random's)."""

    def random(self):
        return super().random() / 2


class Scaled(random.Random):
    """A random.Random subclass with an attribute of its own, built with arguments."""

    def __new__(cls, *args):  # Python 3.10's random.Random.__new__ takes one argument at most
        return super().__new__(cls, *args[:1])

    def __init__(self, seed, scale):
        super().__init__(seed)
        self.scale = scale

    def random(self):
        return super().random() * self.scale


class _Fixed(random.Random):
    """A random.Random subclass that cannot be made without a seed, so not copied as loading copies."""

    def __new__(cls, seed):
        return super().__new__(cls, seed)


def made(kind, seed):
    """A random object of `kind` (Random, Halved, SeedSequence or a bit generator's name), advanced past its start."""
    if kind in ("Random", "Halved"):
        r = Halved(seed) if kind == "Halved" else random.Random(seed)
        r.random(), r.gauss(0, 1)  # with a normal deviate cached
        return r
    if kind == "SeedSequence":
        s = np.random.SeedSequence([seed, 2**100 + seed], spawn_key=(seed, 7), pool_size=8)
        s.spawn(2)
        return s
    bits = getattr(np.random, kind)(seed)
    bits.random_raw(3)
    return bits


def next_draws(x):
    """What `x` gives next: draws, or a seed sequence's children's and its own states."""
    if isinstance(x, random.Random):
        return [x.random(), x.gauss(0, 1), x.getrandbits(70)]
    if isinstance(x, np.random.SeedSequence):
        return [c.generate_state(4).tolist() for c in x.spawn(2)] + [x.generate_state(4).tolist()]
    return x.random_raw(5).tolist()


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
@pytest.mark.parametrize("kind", ["Random", "Halved", "SeedSequence"] + BIT_GENERATORS)
def test_python_randoms_bare_bit_generators_and_seed_sequences_round_trip(tmp_path, ext, kind):
    """Draws after loading equal the original's after saving, from a new object; `like`'s is untouched."""
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    x = made(kind, 1)
    path = tmp_path / f"m{ext}"
    pb.save(path, {"w": np.ones(2), "x": x})
    like = {"w": np.zeros(2), "x": made(kind, 99)}
    loaded = pb.load(path, like=like)
    assert type(loaded["x"]) is type(x) and loaded["x"] is not x and loaded["x"] is not like["x"]
    assert next_draws(loaded["x"]) == next_draws(x)
    assert next_draws(like["x"]) == next_draws(made(kind, 99))  # not advanced


def test_the_manifest_stores_python_randoms_bit_generators_and_seed_sequences(tmp_path):
    r, bits, seeds = random.Random(0), np.random.SFC64(1), np.random.SeedSequence(2**200, spawn_key=(3,))
    pb.save(tmp_path / "m.ckpt", {"r": r, "bits": [bits, bits], "seeds": seeds})
    manifest = json.loads(zipfile.ZipFile(tmp_path / "m.ckpt").read("manifest.json"))
    assert manifest["version"] == 2
    version, internal, gauss = r.getstate()
    assert manifest["generators"] == [
        {"paths": ["model['r']"], "type": "Random",
         "state": {"class": "random.Random", "version": 3, "key": list(internal[:-1]), "pos": 624, "gauss_next": None}},
        {"paths": ["model['bits'][0]", "model['bits'][1]"], "type": "BitGenerator",
         "state": {"bit_generator": "SFC64", "state": {"state": bits.state["state"]["state"].tolist()},
                   "has_uint32": 0, "uinteger": 0,
                   "seed_seq": {"entropy": 1, "spawn_key": [], "pool_size": 4, "n_children_spawned": 0}}},
        {"paths": ["model['seeds']"], "type": "SeedSequence",
         "state": {"entropy": 2**200, "spawn_key": [3], "pool_size": 4, "n_children_spawned": 0}},
    ]
    loaded = pb.load(tmp_path / "m.ckpt", like={"r": random.Random(), "bits": [np.random.SFC64(5)] * 2,
                                                  "seeds": np.random.SeedSequence()})
    assert loaded["bits"][0] is loaded["bits"][1]  # the tie is kept


HALVED = re.escape(f"{Halved.__module__}.Halved")


@pytest.mark.parametrize("saved, like, message", [
    (random.Random(0), np.random.default_rng(0),
     r"model\['x'\] is a random\.Random in the file but a Generator of PCG64 in `like`.*: random\.Random\(seed\)"),
    (Halved(0), random.Random(0), rf"is a {HALVED} in the file but a random\.Random in `like`.*{HALVED}\(seed\)"),
    (random.Random(0), Halved(0), rf"is a random\.Random in the file but a {HALVED} in `like`"),
    (np.random.PCG64(0), np.random.default_rng(0),
     r"is a bit generator PCG64 in the file but a Generator of PCG64 in `like`.*: np\.random\.PCG64\(seed\)"),
    (np.random.PCG64(0), np.random.MT19937(0), r"is a bit generator PCG64 in the file but a bit generator MT19937"),
    (np.random.SeedSequence(0), np.random.PCG64(0),
     r"is a SeedSequence in the file but a bit generator PCG64.*np\.random\.SeedSequence\(seed\)"),
    (np.random.SeedSequence(0), None, r"has a random generator for model\['x'\], but `like` has none there"),
    (None, random.Random(0), r"`like` has a random generator at model\['x'\], but the file has none there"),
    (None, np.random.SeedSequence(0), r"`like` has a random generator at model\['x'\], but the file has none there"),
])
def test_python_randoms_bit_generators_and_seed_sequences_that_do_not_match_like_are_refused(tmp_path, saved, like, message):
    path = tmp_path / "m.ckpt"
    pb.save(path, {"w": np.ones(2), "x": saved})
    with pytest.raises(CheckpointError, match=message):
        pb.load(path, like={"w": np.zeros(2), "x": like})


@pytest.mark.parametrize("make", [random.Random, np.random.PCG64, np.random.SeedSequence])
def test_ties_of_python_randoms_bit_generators_and_seed_sequences_must_match_like(tmp_path, make):
    shared = make(0)
    pb.save(tmp_path / "m.ckpt", {"a": shared, "b": [shared]})
    with pytest.raises(CheckpointError, match=r"model\['a'\] is shared with other places in the file than in `like`"):
        pb.load(tmp_path / "m.ckpt", like={"a": make(1), "b": [make(1)]})


def _x(m):
    return m["generators"][0]["state"]


def _spoil(key, value):
    return lambda m: _x(m).update({key: value})


def _spoil_item(key, i, value):
    return lambda m: _x(m)[key].__setitem__(i, value)


@pytest.mark.parametrize("kind, edit, message", [
    ("Random", _spoil("key", list(range(623))), r"generators\[0\]\.state\.key must be a list of 624 integers of type uint32"),
    ("Random", _spoil_item("key", 5, 2**32), r"state\.key must be a list of 624 integers"),
    ("Random", _spoil_item("key", 5, -1), r"state\.key must be a list of 624 integers"),
    ("Random", _spoil("pos", 625), r"state\.pos must be an integer in \[0, 625\)"),
    ("Random", _spoil("pos", 3.0), r"state\.pos must be an integer in \[0, 625\)"),
    ("Random", _spoil("version", 2), r"state\.version must be 3"),
    ("Random", _spoil("gauss_next", "0.5"), r"state\.gauss_next must be a finite float or null"),
    ("Random", _spoil("gauss_next", float("inf")), r"state\.gauss_next must be a finite float or null"),
    ("Random", lambda m: _x(m).pop("gauss_next"), r"generators\[0\]\.state must be an object with the fields"),
    ("Random", _spoil("class", "os.system"), r"is a os\.system in the file but a random\.Random in `like`"),
    ("Random", lambda m: m["generators"][0].update(type="random"), r"generators\[0\] must be \{'paths'"),
    ("PCG64", lambda m: _x(m)["state"].update(inc=-1), r"state\.state\.inc must be an integer in \[0, "),
    ("PCG64", _spoil("bit_generator", "SFC64"), r"is a bit generator SFC64 in the file but a bit generator PCG64"),
    ("PCG64", lambda m: m["generators"][0].update(type="Generator"), r"is a Generator of PCG64 in the file but a bit generator"),
    ("PCG64", _spoil("bit_generator", {"a": 1}), r"is a bit generator \{'a': 1\} in the file .*: the file's type"),
    ("PCG64", lambda m: m["generators"][0].update(type=["Random"]), r"generators\[0\] must be \{'paths'"),
    ("MT19937", lambda m: _x(m)["state"].update(pos=625), r"state\.state\.pos must be an integer in \[0, 625\)"),
    ("SFC64", lambda m: _x(m)["seed_seq"].update(pool_size=3), r"state\.seed_seq\.pool_size must be an integer in \[4, 1025\)"),
    ("Philox", _spoil("seed_seq", [1]), r"state\.seed_seq must be null or an object with the fields"),
    ("SeedSequence", _spoil("entropy", -1), r"state\.entropy must be an integer in \[0, 2\*\*1024\) or a list"),
    ("SeedSequence", _spoil("entropy", "12"), r"state\.entropy must be an integer"),
    ("SeedSequence", _spoil("entropy", 2**1024), r"state\.entropy must be an integer"),
    ("SeedSequence", _spoil("entropy", [1] * 1025), r"state\.entropy must be .* a list of at most 1024 of those"),
    ("SeedSequence", _spoil("entropy", [1, 2.0]), r"state\.entropy must be an integer"),
    ("SeedSequence", _spoil("spawn_key", [-1]), r"state\.spawn_key must be a list of at most 1024 integers"),
    ("SeedSequence", _spoil("spawn_key", 5), r"state\.spawn_key must be a list"),
    ("SeedSequence", _spoil("pool_size", 3), r"state\.pool_size must be an integer in \[4, 1025\)"),
    ("SeedSequence", _spoil("pool_size", 2**40), r"state\.pool_size must be an integer in \[4, 1025\)"),  # would take ages
    ("SeedSequence", _spoil("n_children_spawned", 2**32), r"state\.n_children_spawned must be an integer in \[0, 4294967296\)"),
    ("SeedSequence", _spoil("n_children_spawned", True), r"state\.n_children_spawned must be an integer"),
])
def test_a_damaged_python_random_bit_generator_or_seed_sequence_entry_is_refused(tmp_path, kind, edit, message):
    path = tmp_path / "m.ckpt"
    pb.save(path, {"w": np.ones(2), "x": made(kind, 0)})
    rewrite(path, edit)
    with pytest.raises(CheckpointError, match=r"m\.ckpt: .*" + message):
        pb.load(path, like={"w": np.zeros(2), "x": made(kind, 1)})


def test_a_damaged_seed_sequence_in_a_safetensors_file_is_refused(tmp_path):
    safe_open = pytest.importorskip("safetensors").safe_open
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "m.safetensors"
    pb.save(path, {"w": np.arange(2.0), "x": np.random.SeedSequence(5)})
    with safe_open(str(path), framework="numpy") as handle:
        metadata = handle.metadata()
    entries = json.loads(metadata["generators"])
    entries[0]["state"]["pool_size"] = 2**40
    safetensors_numpy.save_file({"['w']": np.arange(2.0)}, str(path), metadata=metadata | {"generators": json.dumps(entries)})
    with pytest.raises(CheckpointError, match=r"m\.safetensors: .*state\.pool_size must be an integer in \[4, 1025\)"):
        pb.load(path, like={"w": np.zeros(2), "x": np.random.SeedSequence(0)})


class _NoState(random.Random):
    def getstate(self):
        return ("mine", self.random())


class _Sequence(np.random.SeedSequence):
    pass


class _Generator(np.random.Generator):  # NumPy copies it as a plain Generator
    pass


def _seedless(bits):
    """`bits` with a SeedlessSeedSequence, as NumPy's pickling can give it (no NumPy constructor does)."""
    bits.__setstate__((bits.state, np.random.bit_generator.SeedlessSeedSequence()))
    return bits


def test_what_cannot_be_stored_cleanly_is_refused_at_saving_naming_the_place_and_the_fix(tmp_path):
    path = tmp_path / "m.ckpt"
    bits = np.random.PCG64(0)
    seeds = np.random.SeedSequence(0)
    for model, message in [
        ({"r": random.SystemRandom()}, r"model\['r'\] cannot be stored: it is a random\.SystemRandom, whose getstate\(\) "
                                       r"does not give random\.Random's state \(NotImplementedError.*Use random\.Random\(seed\)"),
        ({"r": _NoState(0)}, r"model\['r'\] cannot be stored: it is a .*_NoState, whose getstate\(\) does not give"),
        ({"r": _Fixed(0)}, r"model\['r'\] cannot be stored: a copy given its state, as loading makes one, fails "
                                r"\(TypeError: .*keep it outside the model"),
        ({"s": np.random.SeedSequence(2**1024)}, r"model\['s'\] cannot be stored: its state\.entropy must be an integer "
                                                 r"in \[0, 2\*\*1024\).* to be stored; keep it outside the model"),
        ({"s": np.random.SeedSequence(0, pool_size=2048)}, r"its state\.pool_size must be an integer in \[4, 1025\)"),
        ({"g": _Generator(np.random.PCG64(0))}, r"model\['g'\] cannot be stored: a copy given its state, as loading "
                                                r"makes one, is a Generator of another class"),
        ({"s": _Sequence(0)}, r"model\['s'\] cannot be stored: it is a .*_Sequence, a subclass of SeedSequence"),
        ({"g": np.random.Generator(bits), "bits": bits},
         r"The random generator at model\['bits'\] is also the bit generator of the Generator at model\['g'\].*two objects"),
        ({"seeds": seeds, "g": np.random.default_rng(seeds)},
         r"model\['seeds'\] is also the seed sequence \(bit_generator\.seed_seq\) of the Generator at model\['g'\]"),
        ({"seeds": seeds, "bits": np.random.MT19937(seeds)},
         r"model\['seeds'\] is also the seed sequence .* of the BitGenerator at model\['bits'\]"),
        ({"a": np.random.default_rng(seeds), "b": [np.random.Generator(np.random.SFC64(seeds))]},
         r"The Generator at model\['a'\] and the Generator at model\['b'\]\[0\] share one seed sequence "
         r"\(bit_generator\.seed_seq\).*come back apart"),
        ({"a": np.random.Generator(bits), "b": np.random.RandomState(bits)},
         r"The Generator at model\['a'\] and the RandomState at model\['b'\] share one bit generator"),
        ({"g": np.random.Generator(np.random.PCG64(_Sequence(0)))},
         r"model\['g'\] cannot be stored: its bit generator's seed sequence \(bit_generator\.seed_seq\) is a .*_Sequence, "
         r"not a np\.random\.SeedSequence.*spawning after loading would differ"),
        ({"bits": _seedless(np.random.PCG64(0))}, r"model\['bits'\] cannot be stored: .* is a "
                                                  r"numpy\.random\.bit_generator\.SeedlessSeedSequence, not a"),
        ({"g": np.random.default_rng(2**1024)}, r"model\['g'\] cannot be stored: its state\.seed_seq\.entropy must be an "
                                                r"integer in \[0, 2\*\*1024\).* to be stored; keep it outside the model"),
    ]:
        with pytest.raises(CheckpointError, match=message):
            pb.save(path, model)
        assert not path.exists()


def test_a_like_whose_generator_holds_another_of_its_generators_is_refused(tmp_path):
    pb.save(tmp_path / "m.ckpt", {"g": np.random.default_rng(0), "bits": np.random.PCG64(1)})
    bits = np.random.PCG64(2)
    with pytest.raises(CheckpointError, match=r"cannot load into `like`: The random generator at model\['bits'\] is also"):
        pb.load(tmp_path / "m.ckpt", like={"g": np.random.Generator(bits), "bits": bits})


def test_a_random_subclass_comes_back_as_its_class_drawing_its_way(tmp_path):
    r = Halved(3)
    pb.save(tmp_path / "m.ckpt", {"r": r})
    loaded = pb.load(tmp_path / "m.ckpt", like={"r": Halved(0)})
    assert type(loaded["r"]) is Halved
    twin = random.Random()
    twin.setstate(r.getstate())
    values = [loaded["r"].random() for _ in range(3)]
    assert values == [r.random() for _ in range(3)] == [twin.random() / 2 for _ in range(3)]  # Halved's own random()
    s = Scaled(1, 0.5)
    s.random()
    pb.save(tmp_path / "m.ckpt", {"r": s})
    loaded = pb.load(tmp_path / "m.ckpt", like={"r": Scaled(2, 3.0)})
    assert type(loaded["r"]) is Scaled and loaded["r"].scale == 3.0  # attributes come from `like`, as other fields do
    twin.setstate(s.getstate())
    assert [loaded["r"].random() for _ in range(2)] == [3.0 * twin.random() for _ in range(2)]



# --- seed sequences of generators and bit generators: spawning after loading --------------------
def spawned(x):
    """The first draws of the children `x` spawns now (twice), and its seed sequence's fields after."""
    children = [c.random_raw(2).tolist() if isinstance(c, np.random.BitGenerator) else c.random(2).tolist()
                for c in x.spawn(2) + x.spawn(1)]
    seeds = (x if isinstance(x, np.random.BitGenerator) else x.bit_generator).seed_seq
    return children, seeds.entropy, seeds.spawn_key, seeds.pool_size, seeds.n_children_spawned


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
@pytest.mark.parametrize("kind", ["Generator", "BitGenerator"])
@pytest.mark.parametrize("name", BIT_GENERATORS)
def test_spawning_after_loading_equals_spawning_from_the_original(tmp_path, ext, kind, name):
    """The bit generator's seed sequence (children spawned included) is the saved one's, not `like`'s."""
    if ext == ".safetensors":
        pytest.importorskip("safetensors")

    def build(seed):
        bits = getattr(np.random, name)(np.random.SeedSequence([seed, 2**70], spawn_key=(seed, 3), pool_size=8))
        return bits if kind == "BitGenerator" else np.random.Generator(bits)

    x = build(1)
    x.spawn(2)
    x.spawn(1)
    next_draws(x if kind == "BitGenerator" else x.bit_generator)
    path = tmp_path / f"m{ext}"
    pb.save(path, {"w": np.ones(2), "x": x})
    like = {"w": np.zeros(2), "x": build(9)}
    loaded = pb.load(path, like=like)["x"]
    assert spawned(loaded) == spawned(x)  # children 3, 4 then 5, and n_children_spawned 6
    assert next_draws(loaded if kind == "BitGenerator" else loaded.bit_generator) == next_draws(
        x if kind == "BitGenerator" else x.bit_generator)
    assert spawned(like["x"]) == spawned(build(9))  # `like`'s seed sequence was not advanced


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
def test_a_seed_sequence_numpy_gave_or_none_comes_back(tmp_path, ext):
    """A bit generator given a state keeps the seed sequence it was built with; RandomState(seed)'s has none."""
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    bits = np.random.PCG64()  # a SeedSequence of fresh entropy
    bits.state = np.random.PCG64(3).state
    none = np.random.PCG64(4)
    none.__setstate__((none.state, None))  # NumPy's pickling protocol, as a legacy-seeded MT19937's
    model = {"bits": bits, "g": np.random.Generator(none), "legacy": np.random.RandomState(5),
             "rs": np.random.RandomState(np.random.Philox(np.random.SeedSequence(6, spawn_key=(1,))))}
    path = tmp_path / f"m{ext}"
    pb.save(path, model)
    loaded = pb.load(path, like={"bits": np.random.PCG64(0), "g": np.random.default_rng(0),
                                 "legacy": np.random.RandomState(np.random.MT19937(0)), "rs": np.random.RandomState(np.random.Philox(0))})
    assert spawned(loaded["bits"]) == spawned(bits)
    assert loaded["g"].bit_generator.seed_seq is None and loaded["legacy"]._bit_generator.seed_seq is None
    with pytest.raises(TypeError, match="does not implement spawning"):
        loaded["g"].spawn(1)
    seeds = loaded["rs"]._bit_generator.seed_seq
    assert (seeds.entropy, seeds.spawn_key) == (6, (1,))
    np.testing.assert_array_equal(draws(loaded["rs"]), draws(model["rs"]))
