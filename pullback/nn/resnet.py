"""Reference ResNets for ImageNet-sized NHWC images, built like Metalhead's and torchvision's.

`resnet(depth)` for depth 18, 34 (basic blocks) or 50, 101, 152 (bottleneck blocks, the
stride on the 3x3 convolution: "ResNet v1.5"). The model is
`Chain(backbone, classifier)`; each residual block is
`Chain(Parallel(np.add, main_path, shortcut), relu)`. Layers appear in the same order as
torchvision's modules, so `pb.nn.load_torch_weights(model, torchvision_model)` copies
pretrained weights across.
"""

from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from . import init as initialisers
from .activations import relu
from .convlayers import Conv, GlobalMeanPool, MaxPool
from .layers import Chain, Dense, Flatten, Parallel, as_generator
from .normalise import BatchNorm

__all__ = ["resnet", "identity"]

_CONFIGS = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}


def identity(x: Any) -> Any:
    """The identity: the shortcut of a residual block whose shape does not change."""
    return x


def _conv(rng, dtype, cin, cout, k, stride=1):
    init = lambda r, shape, dt: initialisers.kaiming_normal(r, shape, dt, mode="fan_out")  # noqa: E731 (torchvision's)
    return Conv(cin, cout, k, stride=stride, padding=k // 2, bias=False, dtype=dtype, rng=rng, init=init)


def _block(kind, rng, dtype, cin, width, stride):
    out = width * (1 if kind == "basic" else 4)
    if kind == "basic":
        main = Chain(
            _conv(rng, dtype, cin, width, 3, stride), BatchNorm(width, relu, dtype=dtype),
            _conv(rng, dtype, width, width, 3), BatchNorm(width, dtype=dtype),
        )
    else:
        main = Chain(
            _conv(rng, dtype, cin, width, 1), BatchNorm(width, relu, dtype=dtype),
            _conv(rng, dtype, width, width, 3, stride), BatchNorm(width, relu, dtype=dtype),
            _conv(rng, dtype, width, out, 1), BatchNorm(out, dtype=dtype),
        )
    if stride != 1 or cin != out:
        shortcut = Chain(_conv(rng, dtype, cin, out, 1, stride), BatchNorm(out, dtype=dtype))
    else:
        shortcut = identity
    return Chain(Parallel(np.add, main, shortcut), relu), out


def resnet(
    depth: int = 18, *, num_classes: int = 1000, in_channels: int = 3, dtype: DTypeLike = np.float32,
    rng: np.random.Generator | int | None = None,
) -> Chain:
    """A ResNet of the given depth (18, 34, 50, 101 or 152) for `(batch, 224, 224, 3)` images.

    >>> import numpy as np, pullback as pb
    >>> model = pb.nn.resnet(18, num_classes=10, rng=np.random.default_rng(0))
    >>> model(np.zeros((1, 32, 32, 3), dtype=np.float32)).shape
    (1, 10)
    >>> sum(w.size for w in pb.tree.leaves(pb.nn.resnet(18)) if isinstance(w, np.ndarray)) > 11_000_000
    True
    """
    if depth not in _CONFIGS:
        raise ValueError(f"resnet depth should be one of {sorted(_CONFIGS)}; got {depth}")
    kind, counts = _CONFIGS[depth]
    rng = as_generator(rng)
    layers = [
        _conv(rng, dtype, in_channels, 64, 7, stride=2),
        BatchNorm(64, relu, dtype=dtype),
        MaxPool(3, stride=2, padding=1),
    ]
    channels = 64
    for stage, (width, count) in enumerate(zip((64, 128, 256, 512), counts)):
        blocks = []
        for b in range(count):
            block, channels = _block(kind, rng, dtype, channels, width, 2 if (stage > 0 and b == 0) else 1)
            blocks.append(block)
        layers.append(Chain(*blocks))
    classifier = Chain(GlobalMeanPool(), Flatten(), Dense(channels, num_classes, dtype=dtype, rng=rng))
    return Chain(Chain(*layers), classifier)
