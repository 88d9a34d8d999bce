"""ResNet-18 for the benchmark: one architecture description, written out once per system.

The layout is pullback's: NHWC images, `(kh, kw, in, out)` ("HWIO") filters, `Dense`
weights `(out, in)`. Parameters travel as one flat list in the order a depth-first walk
meets them (torchvision's order): stem conv, stem BN scale and shift, then per block
conv1, bn1, conv2, bn2 and the optional 1x1 shortcut conv and BN, then the classifier
weight and bias. Every system builds its model from that list, so all of them start from
the same weights and their gradients can be compared array by array.

The hand-written NumPy version (the floor) is im2col + one matrix product per convolution,
with every backward written out by hand; torch and JAX versions are built inside functions
so importing this module never imports them.

>>> spec = resnet18_spec(num_classes=10)
>>> len(spec.blocks), [b.has_shortcut for b in spec.blocks[:3]]
(8, [False, False, True])
>>> params = resnet18_params(spec, np.random.default_rng(0))
>>> len(params), params[0].shape, params[-2].shape
(62, (7, 7, 3, 64), (10, 512))
"""

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

BN_EPS = 1e-5


@dataclass(frozen=True)
class Block:
    """A basic residual block: 3x3 conv (stride), BN, relu, 3x3 conv, BN, plus shortcut, relu."""

    cin: int
    width: int
    stride: int

    @property
    def has_shortcut(self):
        return self.stride != 1 or self.cin != self.width


@dataclass(frozen=True)
class Spec:
    blocks: tuple
    num_classes: int
    in_channels: int = 3
    stem_width: int = 64


def resnet18_spec(num_classes=1000, in_channels=3):
    """Blocks of ResNet-18: two per stage, widths 64, 128, 256, 512, stride 2 from stage 2 on."""
    blocks, cin = [], 64
    for stage, width in enumerate((64, 128, 256, 512)):
        for b in range(2):
            blocks.append(Block(cin, width, 2 if (stage > 0 and b == 0) else 1))
            cin = width
    return Spec(tuple(blocks), num_classes, in_channels)


def param_shapes(spec):
    """Shapes of the flat parameter list, in order."""
    shapes = [(7, 7, spec.in_channels, spec.stem_width), (spec.stem_width,), (spec.stem_width,)]
    for b in spec.blocks:
        shapes += [(3, 3, b.cin, b.width), (b.width,), (b.width,), (3, 3, b.width, b.width), (b.width,), (b.width,)]
        if b.has_shortcut:
            shapes += [(1, 1, b.cin, b.width), (b.width,), (b.width,)]
    width = spec.blocks[-1].width
    return shapes + [(spec.num_classes, width), (spec.num_classes,)]


def resnet18_params(spec, rng, dtype=np.float32):
    """He-normal filters, BN scales near 1 and shifts near 0 (random, so their gradients differ)."""
    shapes = param_shapes(spec)
    params = []
    for k, shape in enumerate(shapes):
        if len(shape) == 4:
            std = np.sqrt(2.0 / (shape[0] * shape[1] * shape[3]))
        elif len(shape) == 2:
            std = 1.0 / np.sqrt(shape[1])
        else:
            std = 0.1
        value = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        if len(shape) == 1 and len(shapes[k - 1]) == 4:  # a BN scale, right after its filter
            value += np.float32(1)
        params.append(value.astype(dtype, copy=False))
    return params


def out_size(n, k, stride, pad):
    return (n + 2 * pad - k) // stride + 1


def matmul_flops(spec, batch, image):
    """Floating-point operations of the matrix products in one gradient w.r.t. the parameters.

    Each convolution is a product `(batch*oh*ow, kh*kw*cin) @ (kh*kw*cin, cout)`; its gradient
    repeats it twice (filter and input), except for the stem, whose input needs no gradient.

    >>> round(matmul_flops(resnet18_spec(), 1, 224) / 1e9, 2)  # ~1.8 GMAC forward, times 3, minus the stem's input
    10.65
    """
    total = 0
    h = out_size(image, 7, 2, 3)
    total += 2 * 2 * batch * h * h * 7 * 7 * spec.in_channels * spec.stem_width
    h = out_size(h, 3, 2, 1)
    for b in spec.blocks:
        oh = out_size(h, 3, b.stride, 1)
        total += 3 * 2 * batch * oh * oh * 9 * b.cin * b.width
        total += 3 * 2 * batch * oh * oh * 9 * b.width * b.width
        if b.has_shortcut:
            total += 3 * 2 * batch * oh * oh * b.cin * b.width
        h = oh
    return total + 3 * 2 * batch * spec.blocks[-1].width * spec.num_classes


# --- the hand-written NumPy floor ---------------------------------------------------------------
def _windows(xp, k, stride, oh, ow):
    sn, sh, sw, sc = xp.strides
    shape = (xp.shape[0], oh, ow, k, k, xp.shape[3])
    return as_strided(xp, shape, (sn, sh * stride, sw * stride, sh, sw, sc), writeable=False)


def _conv(x, w, stride, pad):
    n, h, wd, c = x.shape
    k, o = w.shape[0], w.shape[3]
    oh, ow = out_size(h, k, stride, pad), out_size(wd, k, stride, pad)
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0))) if pad else x
    cols = np.ascontiguousarray(_windows(xp, k, stride, oh, ow)).reshape(n * oh * ow, k * k * c)
    y = (cols @ w.reshape(k * k * c, o)).reshape(n, oh, ow, o)
    return y, (cols, x.shape, w, stride, pad)


def _conv_back(g, cache, need_dx=True):
    cols, (n, h, wd, c), w, stride, pad = cache
    k, o = w.shape[0], w.shape[3]
    oh, ow = g.shape[1], g.shape[2]
    g2 = g.reshape(-1, o)
    dw = (cols.T @ g2).reshape(w.shape)
    if not need_dx:
        return None, dw
    dcols = (g2 @ w.reshape(-1, o).T).reshape(n, oh, ow, k, k, c)
    if k == 1 and pad == 0 and stride == 1:
        return dcols.reshape(n, h, wd, c), dw
    dxp = np.zeros((n, h + 2 * pad, wd + 2 * pad, c), dtype=g.dtype)
    for i in range(k):
        for j in range(k):
            dxp[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride] += dcols[:, :, :, i, j]
    return dxp[:, pad:pad + h, pad:pad + wd], dw


def _bn(x, scale, shift, relu):
    c = x.shape[-1]
    x2 = x.reshape(-1, c)
    inv_m = 1.0 / x2.shape[0]
    mean = x2.sum(axis=0) * inv_m
    xc = x2 - mean
    invstd = 1.0 / np.sqrt(np.einsum("ij,ij->j", xc, xc) * inv_m + BN_EPS)
    xhat = xc * invstd
    y = xhat * scale + shift
    if relu:
        np.maximum(y, 0, out=y)
    return y.reshape(x.shape), (xhat, invstd, scale, y if relu else None)


def _bn_back(g, cache):
    xhat, invstd, scale, relu_out = cache
    c = scale.shape[0]
    g2 = g.reshape(-1, c)
    if relu_out is not None:
        g2 = g2 * (relu_out > 0)
    inv_m = 1.0 / g2.shape[0]
    dshift = g2.sum(axis=0)
    dscale = np.einsum("ij,ij->j", g2, xhat)
    dx = (scale * invstd) * (g2 - dshift * inv_m - xhat * (dscale * inv_m))
    return dx.reshape(g.shape), dscale, dshift


def _maxpool(x):
    """3x3, stride 2, padding 1."""
    n, h, w, c = x.shape
    oh, ow = out_size(h, 3, 2, 1), out_size(w, 3, 2, 1)
    xp = np.full((n, h + 2, w + 2, c), -np.inf, dtype=x.dtype)
    xp[:, 1:-1, 1:-1] = x
    slices = [(slice(i, i + 2 * (oh - 1) + 1, 2), slice(j, j + 2 * (ow - 1) + 1, 2)) for i in range(3) for j in range(3)]
    y = xp[:, slices[0][0], slices[0][1]].copy()
    for rows, cols in slices[1:]:
        np.maximum(y, xp[:, rows, cols], out=y)
    return y, (xp, y, slices)


def _maxpool_back(g, cache):
    xp, y, slices = cache
    dxp = np.zeros_like(xp)
    taken = np.zeros(y.shape, dtype=bool)
    for rows, cols in slices:  # the first maximum of each window takes the gradient
        hit = (xp[:, rows, cols] == y) & ~taken
        dxp[:, rows, cols] += g * hit
        taken |= hit
    return dxp[:, 1:-1, 1:-1]


def numpy_gradient(spec, params, x, onehot):
    """Hand-written forward and backward of ResNet-18 (training-mode BN) with softmax cross-entropy.

    Returns the gradient w.r.t. every parameter, in the order of `params`.
    """
    it = iter(params)
    y, stem = _conv(x, next(it), 2, 3)
    y, stem_bn = _bn(y, next(it), next(it), relu=True)
    y, pool = _maxpool(y)
    caches = []
    for b in spec.blocks:
        inp = y
        h, c1 = _conv(inp, next(it), b.stride, 1)
        h, n1 = _bn(h, next(it), next(it), relu=True)
        h, c2 = _conv(h, next(it), 1, 1)
        h, n2 = _bn(h, next(it), next(it), relu=False)
        if b.has_shortcut:
            s, cs = _conv(inp, next(it), b.stride, 0)
            s, ns = _bn(s, next(it), next(it), relu=False)
        else:
            s, cs, ns = inp, None, None
        y = np.maximum(h + s, 0)
        caches.append((c1, n1, c2, n2, cs, ns, y))
    wfc, bfc = next(it), next(it)
    hw = y.shape[1] * y.shape[2]
    feat = y.sum(axis=(1, 2)) * (1.0 / hw)
    z = feat @ wfc.T + bfc
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dz = (p - onehot) * (1.0 / x.shape[0])

    grads = [dz.sum(axis=0), dz.T @ feat]  # built backwards, reversed at the end
    g = np.broadcast_to((dz @ wfc)[:, None, None, :] * (1.0 / hw), y.shape)
    for c1, n1, c2, n2, cs, ns, out in reversed(caches):
        g = g * (out > 0)
        block = []
        if cs is not None:
            gs, dscale, dshift = _bn_back(g, ns)
            gs, dw = _conv_back(gs, cs)
            block = [dw, dscale, dshift]
        else:
            gs = g
        gh, dscale2, dshift2 = _bn_back(g, n2)
        gh, dw2 = _conv_back(gh, c2)
        gh, dscale1, dshift1 = _bn_back(gh, n1)
        gh, dw1 = _conv_back(gh, c1)
        grads += block[::-1] + [dshift2, dscale2, dw2, dshift1, dscale1, dw1]
        g = gh + gs
    g = _maxpool_back(g, pool)
    g, dscale, dshift = _bn_back(g, stem_bn)
    _, dw = _conv_back(g, stem, need_dx=False)
    grads += [dshift, dscale, dw]
    return grads[::-1]


# --- PyTorch (NCHW, OIHW filters), built from the same parameters --------------------------------
def torch_model(spec, params):
    """A torchvision-free ResNet-18 `nn.Module` in training mode, holding copies of `params`.

    `model.parameters()` come in the order of `params`; filters are transposed to OIHW.
    """
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, b):
            super().__init__()
            self.conv1 = nn.Conv2d(b.cin, b.width, 3, b.stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(b.width)
            self.conv2 = nn.Conv2d(b.width, b.width, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(b.width)
            self.downsample = None
            if b.has_shortcut:
                self.downsample = nn.Sequential(nn.Conv2d(b.cin, b.width, 1, b.stride, bias=False), nn.BatchNorm2d(b.width))

        def forward(self, x):
            h = torch.relu(self.bn1(self.conv1(x)))
            h = self.bn2(self.conv2(h))
            return torch.relu(h + (x if self.downsample is None else self.downsample(x)))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(spec.in_channels, spec.stem_width, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(spec.stem_width)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.blocks = nn.Sequential(*[BasicBlock(b) for b in spec.blocks])
            self.fc = nn.Linear(spec.blocks[-1].width, spec.num_classes)

        def forward(self, x):
            x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
            x = self.blocks(x)
            return self.fc(torch.flatten(x.mean(dim=(2, 3)), 1))

    model = ResNet().train()
    with torch.no_grad():
        for p, value in zip(model.parameters(), params, strict=True):
            value = value.transpose(3, 2, 0, 1) if value.ndim == 4 else value
            if tuple(p.shape) != value.shape:
                raise ValueError(f"parameter shapes differ: torch {tuple(p.shape)}, given {value.shape}")
            p.copy_(torch.from_numpy(np.ascontiguousarray(value)))
    return model


def torch_gradients_as_numpy(grads):
    """Torch gradients back in the layout of `params` (filters to HWIO)."""
    out = []
    for g in grads:
        g = g.detach().numpy()
        out.append(g.transpose(2, 3, 1, 0) if g.ndim == 4 else g)
    return out


# --- JAX (NHWC and HWIO, like pullback) ---------------------------------------------------------
def jax_loss(spec):
    """`loss(params, x, onehot)` written with `jax.numpy` and `jax.lax`."""
    import jax.numpy as jnp
    from jax import lax

    def conv(x, w, stride, pad):
        return lax.conv_general_dilated(x, w, (stride, stride), ((pad, pad), (pad, pad)),
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def bn(x, scale, shift):
        mean = jnp.mean(x, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(x - mean), axis=(0, 1, 2))
        return (x - mean) * lax.rsqrt(var + BN_EPS) * scale + shift

    def maxpool(x):
        init = np.array(-np.inf, dtype=x.dtype)
        return lax.reduce_window(x, init, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))

    def loss(params, x, onehot):
        it = iter(params)
        y = conv(x, next(it), 2, 3)
        y = maxpool(jnp.maximum(bn(y, next(it), next(it)), 0))
        for b in spec.blocks:
            h = jnp.maximum(bn(conv(y, next(it), b.stride, 1), next(it), next(it)), 0)
            h = bn(conv(h, next(it), 1, 1), next(it), next(it))
            s = bn(conv(y, next(it), b.stride, 0), next(it), next(it)) if b.has_shortcut else y
            y = jnp.maximum(h + s, 0)
        w, bias = next(it), next(it)
        z = jnp.mean(y, axis=(1, 2)) @ w.T + bias
        lse = jnp.log(jnp.sum(jnp.exp(z - jnp.max(z, axis=1, keepdims=True)), axis=1)) + jnp.max(z, axis=1)
        return jnp.mean(lse - jnp.sum(z * onehot, axis=1))

    return loss
