"""Image layers on NHWC arrays `(batch, height, width, channels)`: Conv, ConvTranspose and pooling.

Filters are `(kernel_h, kernel_w, in_channels // groups, out_channels)`. The kernels
behind them (im2col + one matrix product) are in `pb.nn.conv`.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from . import init as initialisers
from .conv import Padding, as_pair, conv2d, conv_geometry, conv_transpose2d, max_pool2d, mean_pool2d, pool_geometry
from .layers import as_generator, check_sizes, name_of

__all__ = ["Conv", "ConvTranspose", "MaxPool", "MeanPool", "GlobalMeanPool"]


def _geometry_repr(geometry, defaults):
    parts = []
    for key, value in geometry.items():
        if value != defaults[key]:
            if key == "padding" and value[0][0] == value[0][1] and value[1][0] == value[1][1]:
                value = (value[0][0], value[1][0]) if value[0][0] != value[1][0] else value[0][0]
            elif key in ("stride", "dilation") and value[0] == value[1]:
                value = value[0]
            parts.append(f"{key}={value}")
    return parts


_DEFAULTS = {"stride": (1, 1), "padding": ((0, 0), (0, 0)), "dilation": (1, 1), "groups": 1, "output_padding": (0, 0)}


class Conv:
    """2-d convolution of NHWC images, then `activation`.

    `kernel_size` is an int or `(kh, kw)`; `padding` an int, `(ph, pw)`,
    `((top, bottom), (left, right))`, `"same"` or `"valid"`. `weight` is
    `(kh, kw, in_channels // groups, out_channels)`, `bias` is `(out_channels,)` or None.
    From a PyTorch `Conv2d`: `weight = w.permute(2, 3, 1, 0)` (see `pb.nn.load_torch_weights`).

    >>> import numpy as np, pullback as pb
    >>> c = pb.nn.Conv(3, 8, 3, pb.nn.relu, padding="same", rng=np.random.default_rng(0))
    >>> c, c.weight.shape, c(np.ones((2, 5, 5, 3), dtype=np.float32)).shape
    (Conv(3, 8, 3, relu, padding=1), (3, 3, 3, 8), (2, 5, 5, 8))
    """

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
        activation: Callable[[Any], Any] | None = None, *, stride: int | tuple[int, int] = 1, padding: Padding = 0,
        dilation: int | tuple[int, int] = 1, groups: int = 1, bias: bool = True, dtype: DTypeLike = np.float32,
        rng: np.random.Generator | int | None = None, init: initialisers.Initialiser = initialisers.glorot_uniform,
    ) -> None:
        check_sizes("Conv", "Conv(in_channels, out_channels, kernel_size, activation)", in_channels=in_channels,
                    out_channels=out_channels)
        kernel = as_pair(kernel_size, "kernel_size", minimum=1)
        geometry = conv_geometry(kernel, stride, padding, dilation, groups)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"in_channels ({in_channels}) and out_channels ({out_channels}) must be divisible by groups ({groups})")
        self.weight = init(as_generator(rng), (*kernel, in_channels // groups, out_channels), dtype)
        self.bias = np.zeros(out_channels, dtype=dtype) if bias else None
        self.activation = activation
        self.stride = geometry["stride"]
        self.padding = geometry["padding"]
        self.dilation = geometry["dilation"]
        self.groups = geometry["groups"]

    def trainable(self) -> tuple[str, ...]:
        return ("weight", "bias")

    def __call__(self, x: Any) -> Any:
        y = conv2d(x, self.weight, stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups)
        if self.bias is not None:
            y = y + self.bias
        return y if self.activation is None else self.activation(y)

    def _geometry(self):
        return {"stride": self.stride, "padding": self.padding, "dilation": self.dilation, "groups": self.groups}

    def __repr__(self):
        kh, kw, cg, out_channels = self.weight.shape
        parts = [str(cg * self.groups), str(out_channels), str(kh) if kh == kw else str((kh, kw))]
        if self.activation is not None:
            parts.append(name_of(self.activation))
        parts += _geometry_repr(self._geometry(), _DEFAULTS)
        if self.bias is None:
            parts.append("bias=False")
        return f"{type(self).__name__}({', '.join(parts)})"


class ConvTranspose(Conv):
    """Transposed 2-d convolution (the adjoint of `Conv` in its input), then `activation`.

    Output size per axis: `(n - 1) * stride - pad_lo - pad_hi + dilation * (k - 1) + 1 + output_padding`.
    `weight` is `(kh, kw, out_channels // groups, in_channels)`; from a PyTorch
    `ConvTranspose2d`: `weight = w.permute(2, 3, 1, 0)`.

    >>> import numpy as np, pullback as pb
    >>> t = pb.nn.ConvTranspose(4, 2, 2, stride=2, rng=np.random.default_rng(0))
    >>> t, t.weight.shape, t(np.ones((1, 3, 3, 4), dtype=np.float32)).shape
    (ConvTranspose(4, 2, 2, stride=2), (2, 2, 2, 4), (1, 6, 6, 2))
    """

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
        activation: Callable[[Any], Any] | None = None, *, stride: int | tuple[int, int] = 1, padding: Padding = 0,
        output_padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1, bias: bool = True,
        dtype: DTypeLike = np.float32, rng: np.random.Generator | int | None = None,
        init: initialisers.Initialiser = initialisers.glorot_uniform,
    ) -> None:
        check_sizes("ConvTranspose", "ConvTranspose(in_channels, out_channels, kernel_size, activation)",
                    in_channels=in_channels, out_channels=out_channels)
        super().__init__(out_channels, in_channels, kernel_size, activation, stride=stride, padding=padding,
                         dilation=dilation, groups=groups, bias=False, dtype=dtype, rng=rng, init=init)
        self.bias = np.zeros(out_channels, dtype=dtype) if bias else None
        self.output_padding = as_pair(output_padding, "output_padding", minimum=0)

    def __call__(self, x: Any) -> Any:
        y = conv_transpose2d(x, self.weight, stride=self.stride, padding=self.padding,
                             output_padding=self.output_padding, dilation=self.dilation, groups=self.groups)
        if self.bias is not None:
            y = y + self.bias
        return y if self.activation is None else self.activation(y)

    def _geometry(self):
        return {**super()._geometry(), "output_padding": self.output_padding}

    def __repr__(self):
        kh, kw, og, in_channels = self.weight.shape
        parts = [str(in_channels), str(og * self.groups), str(kh) if kh == kw else str((kh, kw))]
        if self.activation is not None:
            parts.append(name_of(self.activation))
        parts += _geometry_repr(self._geometry(), _DEFAULTS)
        if self.bias is None:
            parts.append("bias=False")
        return f"ConvTranspose({', '.join(parts)})"


class _Pool:
    def __init__(
        self, kernel_size: int | tuple[int, int], *, stride: int | tuple[int, int] | None = None, padding: Padding = 0
    ) -> None:
        geometry = pool_geometry(np.zeros((1, 1, 1, 1)), kernel_size, stride, padding)
        self.kernel_size = geometry["kernel"]
        self.stride = geometry["stride"]
        self.padding = geometry["padding"]

    def __repr__(self):
        k = self.kernel_size[0] if self.kernel_size[0] == self.kernel_size[1] else self.kernel_size
        defaults = {"stride": self.kernel_size, "padding": ((0, 0), (0, 0))}
        parts = [str(k)] + _geometry_repr({"stride": self.stride, "padding": self.padding}, defaults)
        return f"{type(self).__name__}({', '.join(parts)})"


class MaxPool(_Pool):
    """Max pooling of NHWC images; `stride` defaults to the kernel size.

    >>> import numpy as np, pullback as pb
    >>> pb.nn.MaxPool(3, stride=2, padding=1), pb.nn.MaxPool(2)(np.zeros((1, 4, 4, 3))).shape
    (MaxPool(3, stride=2, padding=1), (1, 2, 2, 3))
    """

    def __call__(self, x: Any) -> Any:
        return max_pool2d(x, self.kernel_size, stride=self.stride, padding=self.padding)


class MeanPool(_Pool):
    """Mean pooling of NHWC images (padding counts as zeros); `stride` defaults to the kernel size.

    >>> import numpy as np, pullback as pb
    >>> pb.nn.MeanPool(2)(np.ones((1, 4, 4, 3))).shape
    (1, 2, 2, 3)
    """

    def __call__(self, x: Any) -> Any:
        return mean_pool2d(x, self.kernel_size, stride=self.stride, padding=self.padding)


class GlobalMeanPool:
    """Mean over height and width: `(n, h, w, c)` -> `(n, 1, 1, c)` (follow with `Flatten`).

    >>> import numpy as np, pullback as pb
    >>> pb.nn.GlobalMeanPool()(np.ones((2, 4, 4, 3))).shape
    (2, 1, 1, 3)
    """

    def __call__(self, x: Any) -> Any:
        if np.ndim(x) != 4:
            raise ValueError(f"GlobalMeanPool expects images (batch, height, width, channels); got shape {np.shape(x)}")
        return np.mean(x, axis=(1, 2), keepdims=True)

    def __repr__(self):
        return "GlobalMeanPool()"
