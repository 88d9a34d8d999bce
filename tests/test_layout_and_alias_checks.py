"""What loading and in-place updates refuse, rather than compute something else: a PyTorch convolution
whose geometry pullback's layer lacks, a safetensors file whose filter layout cannot be told, and
`update_` into parameters that share memory."""

import numpy as np
import pytest

import pullback as pb


def _torch_output(module, x):
    import torch

    with torch.no_grad():
        return module(torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2)).permute(0, 2, 3, 1).numpy()


REFUSED = [  # (PyTorch module, pullback layer, what the message names)
    ("reflect", lambda nn: nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"), lambda: pb.nn.Conv(2, 3, 3, padding=1),
     "padding_mode"),
    ("circular", lambda nn: nn.Conv2d(2, 3, 3, padding=1, padding_mode="circular"), lambda: pb.nn.Conv(2, 3, 3, padding=1),
     "padding_mode"),
    ("same into 0", lambda nn: nn.Conv2d(2, 3, 3, padding="same"), lambda: pb.nn.Conv(2, 3, 3, padding=0), "padding"),
    ("valid into 1", lambda nn: nn.Conv2d(2, 3, 3, padding="valid"), lambda: pb.nn.Conv(2, 3, 3, padding=1), "padding"),
    ("output_padding", lambda nn: nn.ConvTranspose2d(2, 3, 3, stride=2, output_padding=1),
     lambda: pb.nn.ConvTranspose(2, 3, 3, stride=2), "output_padding"),
]


@pytest.mark.parametrize("name, theirs, ours, named", REFUSED, ids=[r[0] for r in REFUSED])
def test_load_torch_weights_refuses_a_convolution_geometry_pullback_lacks(name, theirs, ours, named):
    torch = pytest.importorskip("torch")
    layer = ours()
    before = layer.weight.copy()
    with pytest.raises(ValueError, match=named):
        pb.nn.load_torch_weights(layer, theirs(torch.nn).double())
    np.testing.assert_array_equal(layer.weight, before)  # nothing copied


MATCHING = [
    ("same, even kernel", lambda nn: nn.Conv2d(2, 3, 4, padding="same", dilation=2),
     lambda: pb.nn.Conv(2, 3, 4, padding="same", dilation=2)),
    ("valid", lambda nn: nn.Conv2d(2, 3, 3, padding="valid"), lambda: pb.nn.Conv(2, 3, 3)),
    ("output_padding", lambda nn: nn.ConvTranspose2d(2, 3, 3, stride=2, output_padding=1),
     lambda: pb.nn.ConvTranspose(2, 3, 3, stride=2, output_padding=1)),
]


@pytest.mark.parametrize("name, theirs, ours", MATCHING, ids=[m[0] for m in MATCHING])
def test_load_torch_weights_with_string_padding_and_output_padding_computes_as_pytorch(name, theirs, ours):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module, layer = theirs(torch.nn).double(), ours()
    pb.nn.load_torch_weights(layer, module)
    x = np.random.default_rng(0).standard_normal((1, 7, 6, 2))
    np.testing.assert_allclose(layer(x.astype(layer.weight.dtype)), _torch_output(module, x), rtol=1e-5, atol=1e-5)


def _nets(torch, channels_out):
    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, channels_out, 3, padding=1)

    class Net:
        def __init__(self):
            self.conv = pb.nn.Conv(3, channels_out, 3, padding=1)

    return TorchNet, Net


def test_a_pytorch_safetensors_file_with_pullback_names_and_square_filters_is_refused(tmp_path):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    TorchNet, Net = _nets(torch, 3)  # filters (3, 3, 3, 3): both layouts fit
    path = tmp_path / "torch.safetensors"
    safetensors_torch.save_file(TorchNet().state_dict(), str(path))
    with pytest.raises(ValueError, match="layout cannot be told.*load_torch_state_dict"):
        pb.load(path, like=Net())


def test_a_pytorch_safetensors_file_with_pullback_names_and_unequal_channels_loads_as_pytorch(tmp_path):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    TorchNet, Net = _nets(torch, 5)  # (5, 3, 3, 3) is PyTorch's layout only
    module = TorchNet().double()
    path = tmp_path / "torch.safetensors"
    safetensors_torch.save_file(module.state_dict(), str(path))
    loaded = pb.load(path, like=Net())
    x = np.random.default_rng(1).standard_normal((1, 4, 4, 3))
    np.testing.assert_allclose(loaded.conv(x.astype(np.float32)), _torch_output(module.conv, x), rtol=1e-5, atol=1e-5)


def test_pullback_s_own_safetensors_file_loads_whatever_its_filters(tmp_path):
    pytest.importorskip("safetensors")
    model = pb.nn.Conv(3, 3, 3, padding=1, rng=np.random.default_rng(2))
    path = tmp_path / "ours.safetensors"
    pb.save(path, model)
    np.testing.assert_array_equal(pb.load(path, like=pb.nn.Conv(3, 3, 3, padding=1)).weight, model.weight)


def _aliased():
    base = np.arange(4.0)
    return {"base": base, "view": base[:2]}


def _loss(d):
    return np.sum(d["base"] ** 2) + np.sum(d["view"] * 10.0)


def test_update_in_place_refuses_parameters_that_share_memory():
    model = _aliased()
    (g,) = pb.gradient(_loss, model)
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    with pytest.raises(ValueError, match=r"shared memory.*optim\.update"):
        pb.optim.update_(state, model, g)
    np.testing.assert_array_equal(model["base"], np.arange(4.0))  # nothing written
    _, new = pb.optim.update(state, model, g)  # the functional update gives each field its own step
    np.testing.assert_allclose(new["base"], np.arange(4.0) * (1 - 0.2))
    np.testing.assert_allclose(new["view"], np.arange(2.0) - 1.0)


def test_update_in_place_of_disjoint_views_of_one_array():
    base = np.arange(6.0)
    model = {"head": base[:3], "tail": base[3:], "odd": np.arange(2.0)}
    (g,) = pb.gradient(lambda d: np.sum(d["head"] ** 2) + np.sum(d["tail"]) + np.sum(d["odd"] * 3.0), model)
    _, expected = pb.optim.update(pb.optim.setup(pb.optim.Descent(0.1), model), model, g)
    pb.optim.update_(pb.optim.setup(pb.optim.Descent(0.1), model), model, g)
    np.testing.assert_allclose(base, np.concatenate([expected["head"], expected["tail"]]))
    np.testing.assert_allclose(base, [0.0, 0.8, 1.6, 2.9, 3.9, 4.9])


def test_update_in_place_with_a_frozen_view_of_a_trained_array_writes_through_it():
    # only written arrays are checked: a frozen view sees its base's step, as any NumPy view does
    class Model:
        def __init__(self):
            self.w = np.arange(3.0)
            self.first = self.w[:1]

        def trainable(self):
            return ("w",)

    model = Model()
    (g,) = pb.gradient(lambda m: np.sum(m.w ** 2), model)
    pb.optim.update_(pb.optim.setup(pb.optim.Descent(0.5), model), model, g)
    np.testing.assert_array_equal(model.w, [0.0, 0.0, 0.0])
    assert model.first[0] == 0.0 and np.shares_memory(model.first, model.w)


NORMALISATIONS = [  # (PyTorch module, pullback layer, what the message names)
    ("no affine into affine", lambda nn: nn.BatchNorm2d(3, affine=False), lambda: pb.nn.BatchNorm(3), "weight is absent"),
    ("affine into no affine", lambda nn: nn.BatchNorm2d(3), lambda: pb.nn.BatchNorm(3, affine=False), "weight is present"),
    ("untracked statistics", lambda nn: nn.BatchNorm2d(3, track_running_stats=False), lambda: pb.nn.BatchNorm(3),
     "track_running_stats"),
    ("LayerNorm without bias", lambda nn: nn.LayerNorm(3, bias=False), lambda: pb.nn.LayerNorm(3), "bias is absent"),
]


@pytest.mark.parametrize("name, theirs, ours, named", NORMALISATIONS, ids=[n[0] for n in NORMALISATIONS])
def test_load_torch_weights_refuses_normalisations_whose_parameters_differ(name, theirs, ours, named):
    torch = pytest.importorskip("torch")
    layer = ours()
    layer_scale = None if layer.scale is None else layer.scale.copy()
    with pytest.raises(ValueError, match=named):
        pb.nn.load_torch_weights(layer, theirs(torch.nn))
    assert (layer.scale is None) == (layer_scale is None)


def test_load_torch_weights_of_a_batchnorm_without_affine_parameters():
    torch = pytest.importorskip("torch")
    module = torch.nn.BatchNorm2d(3, affine=False).double().eval()
    module.running_mean[:] = torch.tensor([0.5, -1.0, 2.0])
    module.running_var[:] = torch.tensor([4.0, 0.25, 1.0])
    layer = pb.nn.testmode(pb.nn.load_torch_weights(pb.nn.BatchNorm(3, affine=False, dtype=np.float64), module))
    x = np.random.default_rng(3).standard_normal((2, 4, 4, 3))
    np.testing.assert_allclose(layer(x), _torch_output(module, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("stride, dilation, output_padding, padding", [(1, 2, 1, 0), (1, 2, 1, 2), (1, 3, 2, 1), (2, 3, 2, 1)])
def test_conv_transpose_with_output_padding_not_below_the_stride(stride, dilation, output_padding, padding):
    # allowed where the dilation is larger than the stride; the rows it adds get what x reaches there
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x, w, gy = rng.standard_normal((2, 5, 4, 2)), rng.standard_normal((3, 3, 3, 2)), None
    xt = torch.tensor(x).permute(0, 3, 1, 2).requires_grad_()
    wt = torch.tensor(w).permute(3, 2, 0, 1).detach().requires_grad_()
    yt = torch.nn.functional.conv_transpose2d(xt, wt, stride=stride, dilation=dilation, output_padding=output_padding,
                                              padding=padding)
    gy = rng.standard_normal(yt.shape)
    (yt * torch.tensor(gy)).sum().backward()

    def f(x, w):
        y = pb.nn.conv_transpose2d(x, w, stride=stride, dilation=dilation, output_padding=output_padding, padding=padding)
        return np.sum(y * gy.transpose(0, 2, 3, 1))

    y = pb.nn.conv_transpose2d(x, w, stride=stride, dilation=dilation, output_padding=output_padding, padding=padding)
    np.testing.assert_allclose(y, yt.detach().permute(0, 2, 3, 1).numpy(), rtol=1e-12, atol=1e-12)
    gx, gw = pb.gradient(f, x, w)
    np.testing.assert_allclose(gx, xt.grad.permute(0, 2, 3, 1).numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw, wt.grad.permute(2, 3, 1, 0).numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("declaration", [("w",), False, property(lambda self: ("w",))], ids=["tuple", "flag", "property"])
def test_a_trainable_declaration_that_is_not_a_method_is_refused(declaration):
    Layer = type("Layer", (), {"trainable": declaration, "__init__": lambda self: setattr(self, "w", np.ones(2))})
    with pytest.raises(TypeError, match=r"def trainable\(self\)"):
        pb.optim.setup(pb.optim.Descent(0.1), Layer())
    with pytest.raises(TypeError, match=r"def trainable\(self\)"):
        pb.tree.trainable_names(Layer())
