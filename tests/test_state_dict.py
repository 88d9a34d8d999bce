"""state_dict / load_state_dict, safetensors files, and PyTorch-layout state dicts (torchvision ResNets).

The safetensors tests need the `safetensors` package and skip without it; the tests that
involve PyTorch itself need `torch` (and `torchvision` for the last) and skip without them.
Without torch, the torchvision layout is produced here from torchvision's module naming
(conv1, bn1, layer{stage}.{block}.conv{i}/bn{i}, downsample.0/1, fc) and its array layouts.
"""

import collections
import hashlib
import json
import os
import random
import sys

import numpy as np
import pytest

import pullback as pb
from pullback.checkpoint import CheckpointError, load_state_dict, state_dict
from pullback.nn.torch_interop import load_torch_state_dict, parameter_layers

Pair = collections.namedtuple("Pair", "left right")


class Dense:
    def __init__(self, weight, bias):
        self.weight, self.bias, self.activation = weight, bias, np.tanh


def build(seed):
    """One structure for every seed: objects, lists, dicts, a namedtuple, ties, several dtypes."""
    rng = np.random.default_rng(seed)
    shared = Dense(rng.standard_normal((2, 3)), rng.standard_normal(2))
    embed = rng.standard_normal((4, 2)).astype(np.float32)
    return {
        "layers": [shared, Dense(rng.standard_normal((1, 2)).astype(np.float32), None), shared],
        "embed": embed,
        "head": embed,
        "pair": Pair(rng.integers(0, 9, 3), np.array(rng.random() > 0.5)),
        "fortran": np.asfortranarray(rng.standard_normal((2, 3))),
        "big_endian": rng.standard_normal(2).astype(">f8"),
        "name": f"model {seed}",
    }


KEYS = [
    "['layers'][0].weight", "['layers'][0].bias", "['layers'][1].weight", "['layers'][2].weight", "['layers'][2].bias",
    "['embed']", "['head']", "['pair'].left", "['pair'].right", "['fortran']", "['big_endian']",
]


# --- state_dict / load_state_dict ---------------------------------------------------------
def test_state_dict_lists_every_array_under_its_path_without_copying():
    model = build(0)
    sd = state_dict(model)
    assert list(sd) == KEYS
    assert sd["['layers'][0].weight"] is model["layers"][0].weight is sd["['layers'][2].weight"]
    assert sd["['embed']"] is sd["['head']"] is model["embed"]
    assert sd["['pair'].left"] is model["pair"].left
    assert list(state_dict(pb.nn.Chain(pb.nn.Dense(2, 3), pb.nn.BatchNorm(3)))) == [
        "layers[0].weight", "layers[0].bias", "layers[1].scale", "layers[1].shift",
        "layers[1].running_mean", "layers[1].running_var",
    ]
    assert list(state_dict([np.zeros(1), (np.ones(2),)])) == ["[0]", "[1][0]"]


def test_load_state_dict_round_trips_into_a_new_model_and_changes_nothing():
    source, target = build(0), build(1)
    before = {k: v.copy() for k, v in state_dict(target).items()}
    sd = state_dict(source)
    loaded = load_state_dict(target, sd)
    for key, value in state_dict(loaded).items():
        assert value.dtype == before[key].dtype and value.shape == before[key].shape
        assert value.tobytes() == sd[key].tobytes()
        assert value is not sd[key]  # copies: changing the state dict later cannot reach the model
    for key, value in state_dict(target).items():
        assert value.tobytes() == before[key].tobytes()
    assert loaded["layers"][0] is loaded["layers"][2] and loaded["embed"] is loaded["head"]
    assert loaded["fortran"].flags.f_contiguous and loaded["big_endian"].dtype == np.dtype(">f8")
    assert loaded["name"] == "model 1" and type(loaded["pair"]) is Pair
    sd["['embed']"][0, 0] = 99.0
    assert loaded["embed"][0, 0] != 99.0


def test_load_state_dict_accepts_other_byte_orders_and_keeps_the_models():
    model = {"w": np.zeros(2, ">f8")}
    loaded = load_state_dict(model, {"['w']": np.array([1.5, -2.0], "<f8")})
    assert loaded["w"].dtype == np.dtype(">f8") and loaded["w"].tolist() == [1.5, -2.0]


@pytest.mark.parametrize("edit, message", [
    (lambda sd: [sd.pop("['embed']"), sd.pop("['head']")], r"missing keys \['embed'\], \['head'\]\. Its keys must"),
    (lambda sd: sd.update(extra=np.ones(1)), r"unexpected keys extra\."),
    (lambda sd: sd.pop("['fortran']") is not None and sd.update(fortan=np.ones(1)),
     r"missing keys \['fortran'\]; unexpected keys fortan"),
    (lambda sd: sd.update({"['embed']": np.ones((4, 3), np.float32)}),
     r"state dict's \['embed'\] has shape \(4, 3\) and dtype float32, but the model's array there has shape \(4, 2\)"),
    (lambda sd: sd.update({"['layers'][1].weight": np.ones((1, 2))}),
     r"\['layers'\]\[1\]\.weight has shape \(1, 2\) and dtype float64, .* dtype float32; convert it"),
    (lambda sd: sd.update({"['head']": np.zeros((4, 2), np.float32)}),
     r"\['embed'\] and \['head'\] are one shared array, but the state dict gives them different values"),
])
def test_load_state_dict_refuses_a_mismatch_naming_the_keys(edit, message):
    sd = dict(state_dict(build(0)))
    edit(sd)
    with pytest.raises(CheckpointError, match=message):
        load_state_dict(build(1), sd)


def test_load_state_dict_needs_a_dict_and_stable_keys():
    with pytest.raises(TypeError, match="takes a dict of arrays"):
        load_state_dict(build(0), [np.zeros(2)])
    with pytest.raises(CheckpointError, match=r"has the key frozenset.*str, int, bool or None"):
        state_dict({frozenset({1}): np.zeros(1)})


def _draws(g):
    if isinstance(g, random.Random):
        return [g.random() for _ in range(3)]
    return (g.random_raw(3) if isinstance(g, np.random.BitGenerator) else g.random(3)).tolist()


def test_load_state_dict_gives_copies_of_random_generators_keeping_their_ties():
    """state_dict holds arrays only; the new model's generators are copies: the same state, new objects."""
    m = pb.nn.Chain(pb.nn.Dense(2, 2), pb.nn.Dropout(0.5, rng=0))
    assert pb.load_state_dict(m, pb.state_dict(m)).layers[1].rng is not m.layers[1].rng
    shared, bits = np.random.default_rng(1), np.random.PCG64(2)
    model = {"net": m, "a": shared, "b": [shared], "py": random.Random(3), "bits": bits, "g": np.random.Generator(bits),
             "legacy": np.random.RandomState(4)}
    sd = state_dict(model)
    assert all(isinstance(v, np.ndarray) for v in sd.values()) and all(k.startswith("['net']") for k in sd)
    loaded = load_state_dict(model, sd)
    assert loaded["a"] is loaded["b"][0] and loaded["g"].bit_generator is loaded["bits"]  # ties kept
    for get in (lambda x: x["net"].layers[1].rng, lambda x: x["a"], lambda x: x["py"], lambda x: x["bits"],
                lambda x: x["legacy"]):
        old, new = get(model), get(loaded)
        assert type(new) is type(old) and new is not old
        assert _draws(new) == _draws(old)  # the same state; drawing from `model`'s did not advance the copy
        ahead = _draws(new)
        _draws(new)
        assert _draws(old) == ahead  # nor drawing from the copy `model`'s


def _children(x, n):
    return [c.random_raw(2).tolist() if isinstance(c, np.random.BitGenerator) else c.random(2).tolist() for c in x.spawn(n)]


def test_load_state_dict_copies_keep_the_seed_sequences():
    """Spawning from a copy gives the original's next children, and does not advance the original's."""
    model = {"w": np.ones(2), "g": np.random.default_rng(np.random.SeedSequence(3, spawn_key=(1,))), "bits": np.random.SFC64(4)}
    model["g"].spawn(2)
    loaded = load_state_dict(model, state_dict(model))
    for key in ("g", "bits"):
        assert _children(loaded[key], 2) == _children(model[key], 2)
        assert _children(loaded[key], 1) == _children(model[key], 1)


def test_load_torch_state_dict_gives_copies_of_random_generators_keeping_their_ties():
    """As load_state_dict: new generators with the same states (and seed sequences), one copy per shared one."""
    from pullback.nn.torch_interop import load_torch_state_dict

    shared = np.random.default_rng(1)
    m = pb.nn.Chain(pb.nn.Dense(2, 2), pb.nn.Dropout(0.5, rng=0), pb.nn.Dropout(0.5, rng=shared),
                    pb.nn.Dropout(0.5, rng=shared))
    new = load_torch_state_dict(m, {"0.weight": np.ones((2, 2), np.float32), "0.bias": np.zeros(2, np.float32)})
    np.testing.assert_array_equal(new.layers[0].weight, np.ones((2, 2), np.float32))
    assert m.layers[2].rng is m.layers[3].rng and new.layers[2].rng is new.layers[3].rng  # the tie is kept
    for i in (1, 2):
        old, copy = m.layers[i].rng, new.layers[i].rng
        assert copy is not old and copy.bit_generator.seed_seq is not old.bit_generator.seed_seq
        assert _draws(copy) == _draws(old)  # the same state; drawing from one does not advance the other
        ahead = _draws(copy)
        _draws(copy)
        assert _draws(old) == ahead
        assert _children(copy, 1) == _children(old, 1)


def test_state_dict_of_a_model_nested_5000_deep_has_no_recursion_limit():
    def nested(value):
        model = [np.full(2, value), "label"]
        for _ in range(5000):
            model = [model, 1.0]
        return model

    key = "[0]" * 5001
    sd = state_dict(nested(3.0))
    assert list(sd) == [key] and sd[key].tolist() == [3.0, 3.0]
    target = nested(0.0)
    loaded = load_state_dict(target, sd)
    for _ in range(5000):
        assert loaded[1] == 1.0 and loaded is not target
        loaded, target = loaded[0], target[0]
    assert loaded[0].tolist() == [3.0, 3.0] and loaded[1] == "label" and target[0].tolist() == [0.0, 0.0]


# --- safetensors files --------------------------------------------------------------------
def storable(seed):
    """build(seed) without what safetensors cannot hold (nothing here: ints, bools and floats only)."""
    return build(seed)


def test_a_safetensors_file_round_trips_and_other_readers_see_the_state_dict(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    from safetensors import safe_open

    model = storable(0)
    path = tmp_path / "m.safetensors"
    pb.save(path, model)
    read = safetensors_numpy.load_file(str(path))
    assert sorted(read) == sorted(KEYS)
    for key, value in state_dict(model).items():
        assert read[key].dtype == value.dtype.newbyteorder("<") and read[key].shape == value.shape
        np.testing.assert_array_equal(read[key], value)
    with safe_open(str(path), framework="numpy") as handle:
        metadata = handle.metadata()
    assert metadata["format"] == "pullback" and set(metadata) == {"format", "sha256"}
    digests = json.loads(metadata["sha256"])  # one SHA-256 per array, of its bytes as stored
    assert sorted(digests) == sorted(KEYS)
    for key, value in state_dict(model).items():
        stored = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
        assert digests[key] == hashlib.sha256(stored.tobytes()).hexdigest()

    loaded = pb.load(path, like=storable(1))
    for key, value in state_dict(model).items():
        assert state_dict(loaded)[key].tobytes() == value.tobytes()
    assert loaded["embed"] is loaded["head"] and loaded["layers"][0] is loaded["layers"][2]
    assert loaded["big_endian"].dtype == np.dtype(">f8") and loaded["name"] == "model 1"

    # a file written by another program with the same names (no metadata) reads the same way
    safetensors_numpy.save_file({k: np.asarray(v, v.dtype.newbyteorder("<"), order="C") for k, v in read.items()},
                                str(tmp_path / "other.safetensors"))
    again = pb.load(tmp_path / "other.safetensors", like=storable(1))
    assert all(state_dict(again)[k].tobytes() == v.tobytes() for k, v in state_dict(loaded).items())


def test_saving_safetensors_refuses_what_it_cannot_store_before_touching_the_file(tmp_path):
    pytest.importorskip("safetensors")
    path = tmp_path / "m.safetensors"
    pb.save(path, {"w": np.ones(2)})
    old = path.read_bytes()
    with pytest.raises(CheckpointError, match=r"\['labels'\] has dtype <U3, which safetensors cannot store"):
        pb.save(path, {"w": np.ones(2), "labels": np.array(["cat", "dog"])})
    model = {"w": np.ones(2)}
    with pytest.raises(CheckpointError, match=r"holds arrays only, not an optimiser state; .* \.ckpt"):
        pb.save(path, model, pb.optim.setup(pb.optim.Adam(), model))
    assert path.read_bytes() == old and os.listdir(tmp_path) == ["m.safetensors"]


@pytest.mark.parametrize("like, message", [
    ({"w": np.zeros(3), "b": np.zeros(1)}, r"safetensors: \['w'\] has shape \(2,\) and dtype float64 in the file, but shape \(3,\)"),
    ({"w": np.zeros(2, np.float32), "b": np.zeros(1)}, r"\['w'\] .* dtype float64 in the file, .* dtype float32 in `like`"),
    ({"w": np.zeros(2)}, r"does not match `like`: unexpected \['b'\]\."),
    ({"w": np.zeros(2), "b": np.zeros(1), "c": np.zeros(1)}, r"does not match `like`: no value for \['c'\]\."),
])
def test_loading_safetensors_into_a_like_that_does_not_match_is_refused(tmp_path, like, message):
    pytest.importorskip("safetensors")
    pb.save(tmp_path / "m.safetensors", {"w": np.ones(2), "b": np.ones(1)})
    with pytest.raises(CheckpointError, match=message):
        pb.load(tmp_path / "m.safetensors", like=like)


def test_a_damaged_safetensors_file_is_refused(tmp_path):
    pytest.importorskip("safetensors")
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"\xff" * 8 + b"{}")
    with pytest.raises(CheckpointError, match=r"m\.safetensors is not a readable safetensors file"):
        pb.load(path, like={"w": np.zeros(2)})
    pb.save(path, {"w": np.ones(1000)})
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"m\.safetensors"):
        pb.load(path, like={"w": np.zeros(1000)})


def test_without_the_package_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    with pytest.raises(ImportError, match=r'pip install "pullback\[safetensors\]"'):
        pb.save(tmp_path / "m.safetensors", {"w": np.ones(2)})
    with pytest.raises(ImportError, match=r'pip install "pullback\[safetensors\]"'):
        pb.load(tmp_path / "m.safetensors", like={"w": np.ones(2)})
    assert os.listdir(tmp_path) == []
    pb.save(tmp_path / "m.ckpt", {"w": np.ones(2)})  # other files need nothing


# --- PyTorch layouts: torchvision ResNets -------------------------------------------------
def torchvision_modules(depth):
    """torchvision's parametrised modules of resnet`depth`, in its module order: (name, kind)."""
    kind, counts = {18: ("basic", (2, 2, 2, 2)), 50: ("bottleneck", (3, 4, 6, 3))}[depth]
    convs = 2 if kind == "basic" else 3
    names = [("conv1", "conv"), ("bn1", "bn")]
    for stage, count in enumerate(counts, start=1):
        for block in range(count):
            prefix = f"layer{stage}.{block}"
            for i in range(1, convs + 1):
                names += [(f"{prefix}.conv{i}", "conv"), (f"{prefix}.bn{i}", "bn")]
            if block == 0 and (stage > 1 or kind == "bottleneck"):
                names += [(f"{prefix}.downsample.0", "conv"), (f"{prefix}.downsample.1", "bn")]
    return names + [("fc", "linear")]


def torchvision_state_dict(model, depth):
    """`model`'s arrays under torchvision's keys, in PyTorch's layouts (as module.state_dict() lists them)."""
    layers = parameter_layers(model)
    modules = torchvision_modules(depth)
    assert len(layers) == len(modules)
    sd = {}
    for layer, (name, kind) in zip(layers, modules):
        if kind == "conv":
            sd[f"{name}.weight"] = layer.weight.transpose(3, 2, 0, 1).copy()  # (kh, kw, in, out) -> (out, in, kh, kw)
        elif kind == "bn":
            sd.update({f"{name}.weight": layer.scale, f"{name}.bias": layer.shift, f"{name}.running_mean": layer.running_mean,
                       f"{name}.running_var": layer.running_var, f"{name}.num_batches_tracked": np.array(7, np.int64)})
        else:
            sd.update({f"{name}.weight": layer.weight, f"{name}.bias": layer.bias})
    return sd


def random_resnet(depth, seed):
    model = pb.nn.resnet(depth, num_classes=10, rng=np.random.default_rng(seed))
    rng = np.random.default_rng(seed + 100)
    for layer in parameter_layers(model):  # BatchNorm starts at ones and zeros: make every array distinct
        for field in ("scale", "shift", "running_mean", "running_var"):
            if getattr(layer, field, None) is not None:
                setattr(layer, field, rng.random(getattr(layer, field).shape).astype(np.float32) + 0.5)
    return model


@pytest.mark.parametrize("depth", [18, 50])
def test_a_torchvision_layout_safetensors_file_loads_into_a_pullback_resnet(tmp_path, depth):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    source = random_resnet(depth, 0)
    sd = torchvision_state_dict(source, depth)
    assert "fc.weight" in sd and sd["conv1.weight"].shape == (64, 3, 7, 7)
    path = tmp_path / f"torchvision_resnet{depth}.safetensors"
    safetensors_numpy.save_file(sd, str(path))  # the file keeps no module order: keys come back sorted
    loaded = pb.load(path, like=random_resnet(depth, 1))
    original, got = state_dict(source), state_dict(loaded)
    assert original.keys() == got.keys()
    for key, value in original.items():
        assert got[key].tobytes() == value.tobytes() and got[key].dtype == value.dtype, key
    x = np.random.default_rng(2).standard_normal((1, 32, 32, 3)).astype(np.float32)
    np.testing.assert_array_equal(pb.nn.testmode(loaded)(x), pb.nn.testmode(source)(x))


def test_a_state_dict_in_module_order_or_shuffled_pairs_the_same_way():
    source = random_resnet(18, 0)
    sd = torchvision_state_dict(source, 18)
    keys = list(sd)
    np.random.default_rng(0).shuffle(keys)
    shuffled = {k: sd[k] for k in keys}
    like = random_resnet(18, 1)
    for loaded in (load_torch_state_dict(like, sd), load_torch_state_dict(like, shuffled, key_order="natural")):
        assert all(state_dict(loaded)[k].tobytes() == v.tobytes() for k, v in state_dict(source).items())
    first = "layers[0].layers[0].weight"
    assert state_dict(like)[first].tobytes() != state_dict(source)[first].tobytes()  # the copy is what changed


def test_a_torch_layout_that_does_not_fit_is_refused_naming_the_layer(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    sd = torchvision_state_dict(random_resnet(18, 0), 18)
    safetensors_numpy.save_file(sd, str(tmp_path / "r18.safetensors"))
    with pytest.raises(CheckpointError, match=r"r18\.safetensors has neither the names of state_dict\(like\) .* "
                       r"Layer \d+ \(.*\) needs a PyTorch module with weight \(5, 512\), bias \(5,\)"):
        pb.load(tmp_path / "r18.safetensors", like=pb.nn.resnet(18, num_classes=5))
    sd["extra.weight"] = np.ones((3, 3), np.float32)
    with pytest.raises(ValueError, match=r"The state dict has extra\.weight, which no layer of the model takes"):
        load_torch_state_dict(pb.nn.resnet(18, num_classes=10), sd)
    with pytest.raises(ValueError, match="key_order must be"):
        load_torch_state_dict(pb.nn.resnet(18, num_classes=10), sd, key_order="sorted")


def test_pytorch_reads_a_pullback_safetensors_file_and_writes_one_pullback_reads(tmp_path):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    model = {"w": np.arange(6.0).reshape(2, 3), "mask": np.array([True, False]), "n": np.array(3, np.int64)}
    pb.save(tmp_path / "m.safetensors", model)
    tensors = safetensors_torch.load_file(str(tmp_path / "m.safetensors"))
    assert tensors["['w']"].dtype == torch.float64 and tensors["['w']"].tolist() == model["w"].tolist()
    assert tensors["['mask']"].tolist() == [True, False] and int(tensors["['n']"]) == 3

    from test_torch_parity import TorchResNet18  # a torchvision-layout ResNet-18 written out in PyTorch

    torch.manual_seed(0)
    module = TorchResNet18(num_classes=10).eval()
    safetensors_torch.save_file(module.state_dict(), str(tmp_path / "resnet18.safetensors"))
    assert_same_outputs(module, tmp_path / "resnet18.safetensors", torch, size=32)


def assert_same_outputs(module, path, torch, size):
    """The file's float32 weights run in float64 on both sides (as test_torch_parity does) agree to 1e-10."""
    like = pb.nn.resnet(18, num_classes=10, dtype=np.float64)
    loaded = pb.nn.testmode(pb.load(path, like=like))
    x = np.random.default_rng(0).standard_normal((2, size, size, 3))
    with torch.no_grad():
        expected = module.double()(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()
    np.testing.assert_allclose(loaded(x), expected, rtol=1e-10, atol=1e-10)


def test_torchvision_resnet18_weights_load_from_safetensors(tmp_path):
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    module = torchvision.models.resnet18(num_classes=10).eval()
    safetensors_torch.save_file(module.state_dict(), str(tmp_path / "torchvision_resnet18.safetensors"))
    assert_same_outputs(module, tmp_path / "torchvision_resnet18.safetensors", torch, size=64)


def test_natural_key_order_compares_numbers_as_numbers():
    """Twelve identical layers: only the numbers in the keys tell them apart ("10" after "9", not after "1")."""
    rng = np.random.default_rng(0)
    source = pb.nn.Chain(*[pb.nn.Dense(2, 2, rng=rng) for _ in range(12)])
    sd = {f"{i}.{name}": getattr(layer, name) for i, layer in enumerate(source.layers) for name in ("weight", "bias")}
    shuffled = dict(sorted(sd.items()))  # lexicographic: 0, 1, 10, 11, 2, ...
    assert list(shuffled)[4:6] == ["10.bias", "10.weight"]
    loaded = load_torch_state_dict(pb.nn.Chain(*[pb.nn.Dense(2, 2) for _ in range(12)]), shuffled, key_order="natural")
    for mine, theirs in zip(loaded.layers, source.layers):
        np.testing.assert_array_equal(mine.weight, theirs.weight)
        np.testing.assert_array_equal(mine.bias, theirs.bias)
    given = load_torch_state_dict(source, shuffled)  # the dict's own (wrong) order pairs layer 2 with module 10
    np.testing.assert_array_equal(given.layers[2].weight, source.layers[10].weight)


# --- arrays of other libraries, bfloat16 files, ambiguous PyTorch files -------------------------
def test_state_dict_lists_dask_and_array_api_arrays():
    da = pytest.importorskip("dask.array")
    model = {"w": da.ones(3, chunks=2), "b": np.zeros(2)}
    assert list(state_dict(model)) == ["['w']", "['b']"] and state_dict(model)["['w']"] is model["w"]
    loaded = load_state_dict(model, {"['w']": np.arange(3.0), "['b']": np.ones(2)})
    assert isinstance(loaded["w"], da.Array) and loaded["w"].chunks == ((2, 1),)
    np.testing.assert_array_equal(np.asarray(loaded["w"]), [0.0, 1.0, 2.0])


def test_a_safetensors_file_stores_dask_and_array_api_arrays(tmp_path):
    pytest.importorskip("safetensors")
    da = pytest.importorskip("dask.array")
    xp = pytest.importorskip("array_api_strict")
    model = {"w": da.from_array(np.arange(5.0), chunks=2), "a": xp.asarray([1.0, 2.0], dtype=xp.float32)}
    pb.save(tmp_path / "m.safetensors", model)
    like = {"w": da.zeros(5, chunks=3), "a": xp.asarray([0.0, 0.0], dtype=xp.float32)}
    loaded = pb.load(tmp_path / "m.safetensors", like=like)
    assert isinstance(loaded["w"], da.Array) and loaded["w"].chunks == ((3, 2),)
    assert type(loaded["a"]) is type(like["a"]) and loaded["a"].dtype == xp.float32
    np.testing.assert_array_equal(np.asarray(loaded["w"]), np.arange(5.0))
    np.testing.assert_array_equal(np.from_dlpack(loaded["a"]), [1.0, 2.0])


def test_a_torch_safetensors_file_whose_same_shaped_layers_cannot_be_told_apart_is_refused(tmp_path):
    """`proj` then `out` in PyTorch's module order; safetensors sorts them `out`, `proj`: pairing by that
    order would swap the layers, so the file is refused as ambiguous, naming the keys and the fix."""
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(0)
    proj_w, proj_b, out_w, out_b = (rng.standard_normal(s).astype(np.float32) for s in ((4, 4), 4, (4, 4), 4))
    sd = {"proj.weight": proj_w, "proj.bias": proj_b, "out.weight": out_w, "out.bias": out_b}
    safetensors_numpy.save_file(sd, str(tmp_path / "torch.safetensors"), metadata={"format": "pt"})
    like = pb.nn.Chain(pb.nn.Dense(4, 4), pb.nn.Dense(4, 4))
    with pytest.raises(CheckpointError, match=r"modules 'out' and 'proj' hold arrays of the same names and shapes.*"
                       r"out\.bias, out\.weight, proj\.bias, proj\.weight.*load_torch_state_dict.*pb\.load_state_dict"):
        pb.load(tmp_path / "torch.safetensors", like=like)
    loaded = load_torch_state_dict(like, sd)  # the fix: the state dict in module order
    np.testing.assert_array_equal(loaded.layers[0].weight, proj_w)
    np.testing.assert_array_equal(loaded.layers[1].weight, out_w)


def test_same_shaped_modules_told_apart_by_numbers_or_depth_load_from_safetensors(tmp_path):
    """As in torchvision's ResNets (`bn1`, then `layer1.0.bn1`, `layer1.0.bn2`, ...): natural order is taken."""
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(0)
    order = ["fc", "layers.0.fc1", "layers.0.fc2", "layers.1.fc1", "layers.2.fc1", "layers.10.fc1"]  # module order
    sd = {f"{n}.{a}": rng.standard_normal(s).astype(np.float32) for n in order for a, s in (("weight", (3, 3)), ("bias", 3))}
    safetensors_numpy.save_file(sd, str(tmp_path / "torch.safetensors"))
    loaded = pb.load(tmp_path / "torch.safetensors", like=pb.nn.Chain(*[pb.nn.Dense(3, 3) for _ in order]))
    for layer, n in zip(loaded.layers, order):
        np.testing.assert_array_equal(layer.weight, sd[f"{n}.weight"])


def test_a_bfloat16_safetensors_file_from_pytorch_loads_into_a_float32_model(tmp_path):
    """bfloat16 (most published PyTorch weights) is read exactly: its bits are float32's upper half."""
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    linear = torch.nn.Linear(2, 3).to(torch.bfloat16)
    with torch.no_grad():
        linear.weight[0, 0] = -1.5e38  # near bfloat16's limit
    tensors = {f"fc.{k}": v for k, v in linear.state_dict().items()}
    safetensors_torch.save_file(tensors, str(tmp_path / "bf16.safetensors"))
    loaded = pb.load(tmp_path / "bf16.safetensors", like=pb.nn.Chain(pb.nn.Dense(2, 3)))
    expected = linear.weight.detach().float().numpy()
    assert loaded.layers[0].weight.dtype == np.float32 and np.array_equal(loaded.layers[0].weight, expected)
    np.testing.assert_array_equal(loaded.layers[0].bias, linear.bias.detach().float().numpy())
    same_names = {"weight": linear.weight, "bias": linear.bias}  # pullback's names: read name by name
    safetensors_torch.save_file(same_names, str(tmp_path / "named.safetensors"))
    assert np.array_equal(pb.load(tmp_path / "named.safetensors", like=pb.nn.Dense(2, 3)).weight, expected)
    with pytest.raises(CheckpointError, match=r"weight has shape \(3, 2\) and dtype bfloat16 \(read as float32\) in the "
                       r"file, but shape \(3, 2\) and dtype float64"):
        pb.load(tmp_path / "named.safetensors", like=pb.nn.Dense(2, 3, dtype=np.float64))
