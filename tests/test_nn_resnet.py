"""Reference ResNets: architecture (parameter counts as published for torchvision), shapes, gradient structure.

Their gradients are checked against PyTorch in test_torch_parity.py.
"""

import numpy as np
import pytest

import pullback as pb


def trainable_parameter_count(model):
    """Elements of the arrays in trainable fields (BatchNorm's running statistics excluded)."""
    return sum(a.size for a in pb.tree.leaves(model, trainable_only=True) if isinstance(a, np.ndarray))


@pytest.mark.parametrize("depth,count", [(18, 11_689_512), (34, 21_797_672), (50, 25_557_032)])
def test_parameter_counts_match_torchvision(depth, count):
    assert trainable_parameter_count(pb.nn.resnet(depth, rng=0)) == count


def test_imagenet_sized_forward_and_small_inputs():
    model = pb.nn.resnet(18, rng=0)
    y = model(np.random.default_rng(0).standard_normal((1, 224, 224, 3)).astype(np.float32))
    assert y.shape == (1, 1000) and y.dtype == np.float32
    assert pb.nn.resnet(50, num_classes=7, rng=0)(np.zeros((2, 64, 64, 3), np.float32)).shape == (2, 7)


def test_structure_and_gradient_shape():
    model = pb.nn.resnet(18, num_classes=4, rng=0)
    backbone, classifier = model.layers
    assert isinstance(backbone[0], pb.nn.Conv) and backbone[0].weight.shape == (7, 7, 3, 64)
    assert backbone[0].stride == (2, 2) and isinstance(backbone[2], pb.nn.MaxPool)
    assert [len(stage) for stage in backbone[3:]] == [2, 2, 2, 2]
    block = backbone[4][0]  # first block of the second stage: downsampling shortcut
    parallel = block[0]
    assert parallel.connection is np.add and block[1] is pb.nn.relu
    assert isinstance(parallel[1][0], pb.nn.Conv) and parallel[1][0].weight.shape == (1, 1, 64, 128)
    assert backbone[3][0][0][1] is pb.nn.identity
    x = np.random.default_rng(1).standard_normal((2, 32, 32, 3)).astype(np.float32)
    (g,) = pb.gradient(lambda m: pb.nn.logitcrossentropy(m(x), np.array([0, 3])), model)
    g_block = g.layers[0].layers[4].layers[0].layers[0]
    assert g_block.connection is None
    assert g_block.layers[0].layers[1].running_mean is None and g_block.layers[0].layers[1].scale.dtype == np.float32
    assert g.layers[1].layers[2].weight.shape == (4, 512)


def test_unknown_depth():
    with pytest.raises(ValueError, match="18, 34, 50, 101, 152"):
        pb.nn.resnet(19)
