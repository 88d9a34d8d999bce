"""Layers, activations, losses, initialisers and reference models (the Flux + Metalhead part).

Images are NHWC: `(batch, height, width, channels)`. Layers are plain classes with public
array fields; gradients of a model are `Tangent`s shaped like it.

>>> import numpy as np, pullback as pb
>>> model = pb.nn.Chain(pb.nn.Dense(2, 1, pb.nn.tanh), pb.nn.Dense(1, 1, bias=False))
>>> (g,) = pb.gradient(lambda m: np.sum(m(np.ones((4, 2), np.float32)) ** 2), model)
>>> g.layers[1].bias is None, g.layers[0].weight.dtype
(True, dtype('float32'))
"""

from . import init
from .activations import elu, gelu, leaky_relu, logsoftmax, relu, sigmoid, softmax, softplus, tanh
from .conv import conv2d, conv_transpose2d, max_pool2d, mean_pool2d
from .convlayers import Conv, ConvTranspose, GlobalMeanPool, MaxPool, MeanPool
from .layers import Chain, Dense, Dropout, Embedding, Flatten, Parallel, SkipConnection
from .losses import binary_crossentropy, crossentropy, logitbinarycrossentropy, logitcrossentropy, mse
from .modes import testmode, trainmode
from .normalise import BatchNorm, LayerNorm, batch_norm
from .resnet import identity, resnet
from .torch_interop import load_torch_weights

__all__ = [
    "Dense", "Chain", "Parallel", "SkipConnection", "Flatten", "Embedding", "Dropout",
    "Conv", "ConvTranspose", "MaxPool", "MeanPool", "GlobalMeanPool", "BatchNorm", "LayerNorm",
    "relu", "gelu", "sigmoid", "tanh", "softplus", "elu", "leaky_relu", "softmax", "logsoftmax",
    "mse", "crossentropy", "logitcrossentropy", "binary_crossentropy", "logitbinarycrossentropy",
    "conv2d", "conv_transpose2d", "max_pool2d", "mean_pool2d", "batch_norm",
    "trainmode", "testmode", "resnet", "identity", "load_torch_weights", "init",
]
