"""pb.nn against PyTorch on the same weights: outputs and gradients of layers and of a ResNet-18.

Weights go across with `pb.nn.load_torch_weights`, so its conversions are tested too.
PyTorch runs in float64 on float32-representable weights and inputs; pullback runs in
float64 (agreement to 1e-10: the same mathematics) and in float32 (agreement to float32
tolerance). Comparing float32 against float32 would also measure PyTorch's own rounding,
which flips the odd ReLU or max-pool decision and moves a gradient by percents.
"""

import numpy as np
import pytest

import pullback as pb

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

TOL = {np.float64: 1e-10, np.float32: 2e-4}
PARAMETRISED = (pb.nn.Dense, pb.nn.Conv, pb.nn.ConvTranspose, pb.nn.BatchNorm, pb.nn.LayerNorm, pb.nn.Embedding)


# --- a torchvision-layout ResNet-18, written out (torchvision is not a dependency) ---------
class BasicBlock(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = None
        if stride != 1 or cin != width:
            self.downsample = nn.Sequential(nn.Conv2d(cin, width, 1, stride, bias=False), nn.BatchNorm2d(width))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.downsample is None else self.downsample(x)))


class TorchResNet18(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], 64
        for k, width in enumerate((64, 128, 256, 512)):
            stages.append(nn.Sequential(BasicBlock(cin, width, 1 if k == 0 else 2), BasicBlock(width, width, 1)))
            cin = width
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(torch.mean(x, dim=(2, 3)), 1))


# --- helpers ---------------------------------------------------------------------------------
def nchw(x):
    return x.transpose(0, 3, 1, 2) if np.ndim(x) == 4 else x


def nhwc(t):
    a = t.detach().numpy()
    return a.transpose(0, 2, 3, 1) if a.ndim == 4 else a


def close(ours, theirs, dtype, what):
    theirs = np.asarray(theirs)
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} vs {theirs.shape}"
    assert ours.dtype == dtype, f"{what}: dtype {ours.dtype}"
    scale = max(float(np.max(np.abs(theirs))), 1e-30)
    err = float(np.max(np.abs(ours.astype(np.float64) - theirs))) / scale
    assert err < TOL[dtype], f"{what}: relative error {err:.2e}"


def run_both(layer, module, x, dtype, seed=0):
    """Outputs and gradients (input and parameters) of `layer` and `module` for loss sum(y * r)."""
    module = module.double()
    pb.nn.load_torch_weights(layer, module)
    xt = torch.tensor(nchw(x).astype(np.float64), requires_grad=True)
    yt = module(xt)
    r = np.random.default_rng(seed).standard_normal(nhwc(yt).shape).astype(dtype).astype(np.float64)
    (yt * torch.tensor(nchw(r))).sum().backward()
    val, (g_layer, gx) = pb.withgradient(lambda m, x: np.sum(m(x) * r.astype(dtype)), layer, x)
    return yt, xt, g_layer, gx


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


def images(shape, dtype, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# --- layers ----------------------------------------------------------------------------------
def test_dense(dtype):
    layer = pb.nn.Dense(5, 3, dtype=dtype, rng=0)
    module = nn.Linear(5, 3)
    x = images((4, 5), dtype)
    yt, xt, g, gx = run_both(layer, module, x, dtype)
    close(layer(x), yt.detach().numpy(), dtype, "y")
    close(gx, xt.grad.numpy(), dtype, "dx")
    close(g.weight, module.weight.grad.numpy(), dtype, "dweight")
    close(g.bias, module.bias.grad.numpy(), dtype, "dbias")


CONV_CASES = [
    dict(stride=1, padding=0, dilation=1, groups=1),
    dict(stride=2, padding=1, dilation=1, groups=1),
    dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
    dict(stride=1, padding="same", dilation=2, groups=1),
    dict(stride=3, padding=2, dilation=1, groups=6),
    dict(stride=1, padding=0, dilation=1, groups=1, kernel=1),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_conv(case, dtype):
    case = dict(case)
    kernel = case.pop("kernel", 3)
    layer = pb.nn.Conv(6, 12, kernel, dtype=dtype, rng=0, **case)
    module = nn.Conv2d(6, 12, kernel, **case)
    x = images((2, 9, 10, 6), dtype)
    yt, xt, g, gx = run_both(layer, module, x, dtype)
    close(layer(x), nhwc(yt), dtype, "y")
    close(gx, nhwc(xt.grad), dtype, "dx")
    close(g.weight, module.weight.grad.permute(2, 3, 1, 0).numpy(), dtype, "dweight")
    close(g.bias, module.bias.grad.numpy(), dtype, "dbias")


@pytest.mark.parametrize("case", [
    dict(stride=2, padding=1, output_padding=1, groups=1),
    dict(stride=1, padding=0, output_padding=0, groups=3),
    dict(stride=(2, 3), padding=(0, 1), output_padding=(1, 0), groups=1, dilation=1),
])
def test_conv_transpose(case, dtype):
    layer = pb.nn.ConvTranspose(6, 9, 3, dtype=dtype, rng=0, **case)
    module = nn.ConvTranspose2d(6, 9, 3, **case)
    x = images((2, 4, 5, 6), dtype)
    yt, xt, g, gx = run_both(layer, module, x, dtype)
    close(layer(x), nhwc(yt), dtype, "y")
    close(gx, nhwc(xt.grad), dtype, "dx")
    close(g.weight, module.weight.grad.permute(2, 3, 1, 0).numpy(), dtype, "dweight")
    close(g.bias, module.bias.grad.numpy(), dtype, "dbias")


def test_batchnorm_training_mode(dtype):
    layer = pb.nn.BatchNorm(4, dtype=dtype)
    module = nn.BatchNorm2d(4).train()
    with torch.no_grad():
        module.weight.uniform_(0.5, 1.5)
        module.bias.uniform_(-0.5, 0.5)
    x = images((3, 5, 6, 4), dtype) * 2 + 1
    yt, xt, g, gx = run_both(layer, module, x, dtype)
    close(gx, nhwc(xt.grad), dtype, "dx")
    close(g.scale, module.weight.grad.numpy(), dtype, "dscale")
    close(g.shift, module.bias.grad.numpy(), dtype, "dshift")
    assert g.running_mean is None and g.running_var is None
    # one training step updated the running statistics exactly as PyTorch's did
    close(layer.running_mean, module.running_mean.numpy(), dtype, "running_mean")
    close(layer.running_var, module.running_var.numpy(), dtype, "running_var")
    # and evaluation mode normalises with them
    module.eval()
    close(pb.nn.testmode(layer)(x), nhwc(module(torch.tensor(nchw(x).astype(np.float64)))), dtype, "eval output")


def test_layernorm(dtype):
    layer = pb.nn.LayerNorm(6, dtype=dtype)
    module = nn.LayerNorm(6)
    with torch.no_grad():
        module.weight.uniform_(0.5, 1.5)
        module.bias.uniform_(-0.5, 0.5)
    x = images((3, 4, 6), dtype)
    yt, xt, g, gx = run_both(layer, module, x, dtype)
    close(layer(x), yt.detach().numpy(), dtype, "y")
    close(gx, xt.grad.numpy(), dtype, "dx")
    close(g.scale, module.weight.grad.numpy(), dtype, "dscale")


POOL_CASES = [(2, None, 0), (3, 2, 1), (3, 1, 1), ((3, 2), (2, 1), (1, 0))]


@pytest.mark.parametrize("kernel,stride,padding", POOL_CASES)
@pytest.mark.parametrize("kind", ["max", "mean"])
def test_pooling(kind, kernel, stride, padding, dtype):
    ours = (pb.nn.MaxPool if kind == "max" else pb.nn.MeanPool)(kernel, stride=stride, padding=padding)
    theirs = (nn.MaxPool2d if kind == "max" else nn.AvgPool2d)(kernel, stride=stride, padding=padding)
    x = images((2, 7, 8, 3), dtype)
    xt = torch.tensor(nchw(x).astype(np.float64), requires_grad=True)
    yt = theirs(xt)
    r = images(nhwc(yt).shape, dtype, seed=2)
    (yt * torch.tensor(nchw(r).astype(np.float64))).sum().backward()
    (gx,) = pb.gradient(lambda x: np.sum(ours(x) * r), x)
    close(ours(x), nhwc(yt), dtype, "y")
    close(gx, nhwc(xt.grad), dtype, "dx")


def test_global_mean_pool(dtype):
    x = images((2, 5, 4, 3), dtype)
    xt = torch.tensor(nchw(x).astype(np.float64), requires_grad=True)
    yt = nn.AdaptiveAvgPool2d(1)(xt)
    r = images((2, 1, 1, 3), dtype, seed=2)
    (yt * torch.tensor(nchw(r).astype(np.float64))).sum().backward()
    (gx,) = pb.gradient(lambda x: np.sum(pb.nn.GlobalMeanPool()(x) * r), x)
    close(gx, nhwc(xt.grad), dtype, "dx")


# --- a whole ResNet-18 ---------------------------------------------------------------------
def _layers_with_gradients(model, grad):
    """(layer, gradient) for every parametrised layer, in walk order (as load_torch_weights pairs them)."""
    found = []

    def visit(node, g):
        if isinstance(node, PARAMETRISED):
            found.append((node, g))
            return
        for key, child in pb.tree.children(node).items():
            visit(child, None if g is None else g[key])

    visit(model, grad)
    return found


def gradient_close(ours, theirs, dtype, what):
    """Float64: elementwise, as `close`. Float32: normwise, 5e-2.

    In float32 a pre-activation within ~1e-6 of zero can land on the other side of a ReLU
    (or a max-pool tie) than in float64. The forward pass does not notice (ReLU is
    continuous), but the gradient of that one unit switches on or off and, through the
    identity shortcuts, moves upstream gradients by up to a few percent (measured: one
    such flip, 3% normwise). A ResNet-18 has ~10^5 units, so a flip or two is normal, and
    no elementwise float32 bound holds; the float64 run is the exact check.
    """
    if dtype == np.float64:
        return close(ours, theirs, dtype, what)
    theirs = np.asarray(theirs)
    assert ours.shape == theirs.shape and ours.dtype == dtype, f"{what}: {ours.shape} {ours.dtype}"
    err = np.linalg.norm(ours.astype(np.float64) - theirs) / np.linalg.norm(theirs)
    assert err < 5e-2, f"{what}: normwise relative error {err:.2e}"


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_resnet18_matches_pytorch(dtype):
    torch.manual_seed(0)
    module = TorchResNet18(num_classes=10).train()
    with torch.no_grad():  # non-trivial BatchNorm parameters, so their gradients are tested too
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    module = module.double()
    model = pb.nn.load_torch_weights(pb.nn.resnet(18, num_classes=10, dtype=dtype, rng=0), module)
    x = images((2, 64, 64, 3), dtype)
    labels = np.array([3, 7])

    xt = torch.tensor(nchw(x).astype(np.float64), requires_grad=True)
    logits_t = module(xt)
    loss_t = nn.functional.cross_entropy(logits_t, torch.tensor(labels))
    loss_t.backward()

    def loss(m, x):
        logits = m(x)
        return pb.nn.logitcrossentropy(logits, labels), pb.stop_gradient(logits)

    (val, logits), (g, gx) = pb.withgradient(loss, model, x)
    # the forward pass is continuous: float32 tolerance elementwise
    close(logits, logits_t.detach().numpy(), dtype, "logits")
    close(np.asarray(val)[None], loss_t.detach().numpy()[None], dtype, "loss")
    gradient_close(gx, nhwc(xt.grad), dtype, "dx")
    pairs = _layers_with_gradients(model, g)
    theirs = [m for m in module.modules() if isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.Linear))]
    assert len(pairs) == len(theirs) == 20 + 20 + 1  # convolutions, batch norms, the classifier
    for k, ((layer, grad), m) in enumerate(zip(pairs, theirs)):
        if isinstance(m, nn.Conv2d):
            gradient_close(grad.weight, m.weight.grad.permute(2, 3, 1, 0).numpy(), dtype, f"layer {k} conv dweight")
        elif isinstance(m, nn.BatchNorm2d):
            gradient_close(grad.scale, m.weight.grad.numpy(), dtype, f"layer {k} bn dscale")
            gradient_close(grad.shift, m.bias.grad.numpy(), dtype, f"layer {k} bn dshift")
            assert grad.running_mean is None and grad.running_var is None
            close(layer.running_mean, m.running_mean.numpy(), dtype, f"layer {k} running_mean")
            close(layer.running_var, m.running_var.numpy(), dtype, f"layer {k} running_var")
        else:
            gradient_close(grad.weight, m.weight.grad.numpy(), dtype, f"layer {k} fc dweight")
            gradient_close(grad.bias, m.bias.grad.numpy(), dtype, f"layer {k} fc dbias")


def test_load_torch_weights_refuses_a_different_architecture():
    model = pb.nn.Chain(pb.nn.Conv(3, 4, 3), pb.nn.Dense(4, 2))
    with pytest.raises(ValueError, match="do not match"):
        pb.nn.load_torch_weights(model, nn.Sequential(nn.Conv2d(3, 4, 3)))
    with pytest.raises(ValueError, match="stride"):
        pb.nn.load_torch_weights(model, nn.Sequential(nn.Conv2d(3, 4, 3, stride=2), nn.Linear(4, 2)))
    with pytest.raises(ValueError, match="shape"):
        pb.nn.load_torch_weights(model, nn.Sequential(nn.Conv2d(3, 4, 3), nn.Linear(5, 2)))
    with pytest.raises(ValueError, match="paired"):
        pb.nn.load_torch_weights(model, nn.Sequential(nn.Linear(4, 2), nn.Conv2d(3, 4, 3)))


@pytest.mark.parametrize("kind,theirs,ours", [
    ("PReLU", lambda: nn.Sequential(nn.Linear(2, 3), nn.PReLU()), lambda: pb.nn.Chain(pb.nn.Dense(2, 3), pb.nn.leaky_relu)),
    ("GroupNorm", lambda: nn.Sequential(nn.Linear(2, 4), nn.GroupNorm(2, 4)), lambda: pb.nn.Chain(pb.nn.Dense(2, 4))),
    ("Conv1d", lambda: nn.Sequential(nn.Conv1d(2, 2, 3)), lambda: pb.nn.Chain()),
    ("MultiheadAttention", lambda: nn.MultiheadAttention(4, 2), lambda: pb.nn.Chain()),
    ("Bilinear", lambda: nn.Sequential(nn.Bilinear(2, 2, 3), nn.Linear(3, 1)), lambda: pb.nn.Chain(pb.nn.Dense(3, 1))),
], ids=lambda v: v if isinstance(v, str) else "")
def test_load_torch_weights_refuses_parameters_it_would_drop(kind, theirs, ours):
    # as load_torch_state_dict refuses arrays "which no layer of the model takes"; before, such modules
    # were skipped and the load reported success, losing their trained parameters
    with pytest.raises(ValueError, match=rf"belongs to a {kind}, which no pullback layer takes"):
        pb.nn.load_torch_weights(ours(), theirs())


@pytest.mark.parametrize("option", [{"padding_idx": 0}, {"max_norm": 1.0}, {"scale_grad_by_freq": True}], ids=str)
def test_load_torch_weights_refuses_embedding_options_pullback_lacks(option):
    # PyTorch's padding row gets no gradient and max_norm renormalises rows: training the loaded model
    # would silently differ (as padding_mode != "zeros" and track_running_stats=False, refused too)
    model = pb.nn.Embedding(5, 3)
    before = model.weight.copy()
    with pytest.raises(ValueError, match=next(iter(option))):
        pb.nn.load_torch_weights(model, nn.Embedding(5, 3, **option))
    np.testing.assert_array_equal(model.weight, before)
    pb.nn.load_torch_weights(model, nn.Embedding(5, 3))


def test_a_state_dict_of_convolutions_with_biases_loads():
    from pullback.nn.torch_interop import load_torch_state_dict

    x = np.random.default_rng(0).standard_normal((1, 5, 5, 3)).astype(np.float32)
    for theirs, ours in ((nn.Conv2d(3, 8, 3), pb.nn.Conv(3, 8, 3)), (nn.ConvTranspose2d(3, 4, 3), pb.nn.ConvTranspose(3, 4, 3))):
        model = load_torch_state_dict(pb.nn.Chain(ours), {k: v.numpy() for k, v in nn.Sequential(theirs).state_dict().items()})
        expected = theirs(torch.tensor(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1).detach().numpy()
        np.testing.assert_allclose(model(x), expected, rtol=1e-5, atol=1e-5)


def test_a_refused_load_changes_nothing_and_momentum_none_is_refused():
    theirs = nn.Sequential(nn.BatchNorm1d(4, eps=1e-3, momentum=0.5), nn.Linear(4, 3))
    ours = pb.nn.Chain(pb.nn.BatchNorm(4), pb.nn.Dense(4, 2))  # the Dense layer does not match
    with pytest.raises(ValueError, match="Layer 1"):
        pb.nn.load_torch_weights(ours, theirs)
    assert (ours.layers[0].eps, ours.layers[0].momentum) == (1e-5, 0.1)
    matching = pb.nn.load_torch_weights(pb.nn.Chain(pb.nn.BatchNorm(4), pb.nn.Dense(4, 3)), theirs)
    assert (matching.layers[0].eps, matching.layers[0].momentum) == (1e-3, 0.5)
    with pytest.raises(ValueError, match="momentum=None"):
        pb.nn.load_torch_weights(pb.nn.Chain(pb.nn.BatchNorm(3)), nn.Sequential(nn.BatchNorm1d(3, momentum=None)))
