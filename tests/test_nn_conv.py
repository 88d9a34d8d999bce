"""Convolution and pooling: values by hand, gradients and gradients of gradients against finite differences."""

import numpy as np
import pytest

import pullback as pb
from pullback.testing import assert_gradient
from test_nn_layers import check_layer

rng = np.random.default_rng(0)


def direct_conv(x, w, stride, padding, dilation, groups):
    """A slow, obviously correct NHWC convolution: loops over outputs, kernel taps and groups."""
    (sh, sw), ((pt, pb_), (pl, pr)), (dh, dw) = stride, padding, dilation
    n, h, wd, c = x.shape
    kh, kw, cg, o = w.shape
    xp = np.zeros((n, h + pt + pb_, wd + pl + pr, c))
    xp[:, pt:pt + h, pl:pl + wd] = x
    oh = (h + pt + pb_ - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    y = np.zeros((n, oh, ow, o))
    for i in range(oh):
        for j in range(ow):
            for g in range(groups):
                for a in range(kh):
                    for b in range(kw):
                        patch = xp[:, i * sh + a * dh, j * sw + b * dw, g * cg:(g + 1) * cg]  # (n, cg)
                        y[:, i, j, g * og:(g + 1) * og] += patch @ w[a, b, :, g * og:(g + 1) * og]
    return y


GEOMETRIES = [
    dict(stride=1, padding=0, dilation=1, groups=1),
    dict(stride=2, padding=1, dilation=1, groups=1),
    dict(stride=(1, 2), padding=((0, 2), (1, 0)), dilation=(2, 1), groups=2),
    dict(stride=1, padding="same", dilation=1, groups=4),
]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_conv2d_values_match_direct_loops(geometry):
    x = rng.standard_normal((2, 6, 7, 4))
    w = rng.standard_normal((3, 2, 4 // geometry["groups"], 8))
    normal = {
        "stride": pb.nn.conv.as_pair(geometry["stride"], "stride"),
        "dilation": pb.nn.conv.as_pair(geometry["dilation"], "dilation"),
        "groups": geometry["groups"],
    }
    normal["padding"] = pb.nn.conv.normalise_padding(geometry["padding"], (3, 2), normal["dilation"])
    np.testing.assert_allclose(pb.nn.conv2d(x, w, **geometry), direct_conv(x, w, **normal), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_conv_layer_gradients(geometry):
    layer = pb.nn.Conv(4, 8, (3, 2), np.tanh, dtype=np.float64, rng=0, **geometry)
    layer.bias = rng.standard_normal(8)
    check_layer(layer, rng.standard_normal((2, 5, 6, 4)))


def test_conv_same_padding_keeps_size_and_stride_divides_it():
    x = np.zeros((1, 9, 10, 2), np.float32)
    assert pb.nn.Conv(2, 3, 4, padding="same")(x).shape == (1, 9, 10, 3)
    assert pb.nn.Conv(2, 3, 3, padding="same", dilation=2)(x).shape == (1, 9, 10, 3)
    assert pb.nn.Conv(2, 3, 3, padding=1, stride=2)(x).shape == (1, 5, 5, 3)
    y = pb.nn.Conv(2, 3, 3, padding="same")(x)
    assert y.dtype == np.float32


def test_conv_by_hand():
    x = np.arange(16.0).reshape(1, 4, 4, 1)
    w = np.array([[1.0, 0.0], [0.0, -1.0]]).reshape(2, 2, 1, 1)  # x[i, j] - x[i + 1, j + 1]
    np.testing.assert_array_equal(pb.nn.conv2d(x, w)[0, :, :, 0], np.full((3, 3), -5.0))
    (gx,) = pb.gradient(lambda x: np.sum(pb.nn.conv2d(x, w)), x)
    expected = np.zeros((4, 4))
    expected[:3, :3] += 1
    expected[1:, 1:] -= 1
    np.testing.assert_array_equal(gx[0, :, :, 0], expected)


@pytest.mark.parametrize("case", [
    dict(stride=2, padding=1, output_padding=1, groups=1),
    dict(stride=1, padding=0, output_padding=0, groups=2),
    dict(stride=(2, 1), padding=(0, 1), output_padding=0, groups=1, dilation=(1, 2)),
])
def test_conv_transpose_layer_gradients(case):
    layer = pb.nn.ConvTranspose(4, 2, 3, dtype=np.float64, rng=0, **case)
    layer.bias = rng.standard_normal(2)
    check_layer(layer, rng.standard_normal((2, 3, 4, 4)))


def test_conv_transpose_is_the_adjoint_of_conv():
    x, w = rng.standard_normal((2, 7, 6, 4)), rng.standard_normal((3, 3, 2, 6))
    y = pb.nn.conv2d(x, w, stride=2, padding=1, groups=2)
    z = rng.standard_normal(y.shape)
    back = pb.nn.conv_transpose2d(z, w, stride=2, padding=1, groups=2, output_padding=(0, 1))
    assert back.shape == x.shape
    np.testing.assert_allclose(np.sum(y * z), np.sum(x * back), rtol=1e-12)


@pytest.mark.parametrize("kind", ["max", "mean"])
@pytest.mark.parametrize("kernel,stride,padding", [(2, None, 0), (3, 2, 1), ((2, 3), 1, ((1, 0), (1, 1)))])
def test_pooling_gradients(kind, kernel, stride, padding):
    layer = (pb.nn.MaxPool if kind == "max" else pb.nn.MeanPool)(kernel, stride=stride, padding=padding)
    check_layer(layer, rng.standard_normal((2, 5, 6, 3)), fields=[])


def test_pooling_by_hand():
    x = np.array([[1.0, 5.0, 2.0], [3.0, 4.0, 9.0], [0.0, 8.0, 7.0]]).reshape(1, 3, 3, 1)
    np.testing.assert_array_equal(pb.nn.MaxPool(2, stride=1)(x)[0, :, :, 0], [[5, 9], [8, 9]])
    np.testing.assert_array_equal(pb.nn.MeanPool(2, stride=1)(x)[0, :, :, 0], [[3.25, 5], [3.75, 7]])
    (g,) = pb.gradient(lambda x: np.sum(pb.nn.MaxPool(2, stride=1)(x)), x)
    np.testing.assert_array_equal(g[0, :, :, 0], [[0, 1, 0], [0, 0, 2], [0, 1, 0]])
    # padding is -inf for max pooling and counts as zero for mean pooling
    np.testing.assert_array_equal(pb.nn.MaxPool(2, padding=1)(-x)[0, :, :, 0], [[-1, -2], [0, -4]])
    np.testing.assert_array_equal(pb.nn.MeanPool(2, padding=1)(x)[0, :, :, 0], [[0.25, 1.75], [0.75, 7.0]])


def test_max_pool_tie_goes_to_the_first_element():
    x = np.ones((1, 2, 2, 1))
    (g,) = pb.gradient(lambda x: np.sum(pb.nn.MaxPool(2)(x)), x)
    np.testing.assert_array_equal(g[0, :, :, 0], [[1, 0], [0, 0]])


def test_global_mean_pool():
    x = rng.standard_normal((2, 3, 4, 5))
    np.testing.assert_allclose(pb.nn.GlobalMeanPool()(x), x.mean(axis=(1, 2), keepdims=True))
    check_layer(pb.nn.GlobalMeanPool(), x, fields=[])


def test_second_derivatives_of_conv_and_conv_transpose():
    x, w = rng.standard_normal((2, 5, 5, 2)), rng.standard_normal((3, 3, 2, 3))
    r, s, sw = rng.standard_normal((2, 3, 3, 3)), rng.standard_normal(x.shape), rng.standard_normal(w.shape)

    def conv_gradient_dot(x, w):
        gx, gw = pb.gradient(lambda x, w: np.sum(pb.nn.conv2d(x, w, stride=2, padding=1) ** 2 * r), x, w)
        return np.sum(gx * s) + np.sum(gw * sw)

    assert_gradient(conv_gradient_dot, x, w, rtol=1e-5, atol=1e-6, dense_up_to=None)
    wt = rng.standard_normal((3, 3, 4, 2))

    def transpose_gradient_dot(x, w):
        gx, gw = pb.gradient(lambda x, w: np.sum(pb.nn.conv_transpose2d(x, w, stride=2, padding=1) ** 2), x, w)
        return np.sum(gx * s) + np.sum(gw**2)

    assert_gradient(transpose_gradient_dot, x, wt, rtol=1e-5, atol=1e-6, dense_up_to=None)


@pytest.mark.parametrize("pool", [pb.nn.max_pool2d, pb.nn.mean_pool2d])
def test_second_derivatives_of_pooling(pool):
    x = rng.standard_normal((2, 5, 5, 2))
    r, s = rng.standard_normal((2, 3, 3, 2)), rng.standard_normal(x.shape)

    def gradient_dot(x):
        (gx,) = pb.gradient(lambda x: np.sum(pool(x, 3, stride=2, padding=1) ** 2 * r), x)
        return np.sum(gx * s)

    assert_gradient(gradient_dot, x, dense_up_to=None, rtol=1e-5, atol=1e-7)


def test_float32_stays_float32():
    layer = pb.nn.Conv(3, 4, 3, padding=1, rng=0)
    x = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    model = pb.nn.Chain(layer, pb.nn.MaxPool(2), pb.nn.MeanPool(3, stride=1, padding=1),
                        pb.nn.ConvTranspose(4, 2, 2, stride=2, rng=0))
    (g, gx) = pb.gradient(lambda m, x: np.sum(m(x)), model, x)
    assert model(x).dtype == np.float32 and gx.dtype == np.float32
    assert g.layers[0].weight.dtype == np.float32 and g.layers[3].weight.dtype == np.float32


def test_shape_errors_name_the_problem():
    conv = pb.nn.Conv(3, 4, 3)
    with pytest.raises(ValueError, match=r"\(batch, height, width, channels\)"):
        conv(np.zeros((3, 8, 8)))
    with pytest.raises(ValueError, match="3 channels and groups=1 need"):
        pb.nn.conv2d(np.zeros((1, 8, 8, 3)), np.zeros((3, 3, 2, 4)))
    with pytest.raises(ValueError, match="does not fit"):
        conv(np.zeros((1, 2, 2, 3)))
    with pytest.raises(ValueError, match="divisible by groups"):
        pb.nn.Conv(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="padding"):
        pb.nn.Conv(3, 4, 3, padding="full")
    with pytest.raises(ValueError, match="must not be negative"):
        pb.nn.Conv(3, 4, 3, padding=(1, -1))
    with pytest.raises(ValueError, match="output_padding"):
        pb.nn.conv_transpose2d(np.zeros((1, 3, 3, 2)), np.zeros((3, 3, 2, 2)), stride=2, output_padding=2)
    with pytest.raises(ValueError, match="at most half"):
        pb.nn.MaxPool(2, padding=2)


@pytest.mark.parametrize("make,argument", [
    (lambda: pb.nn.Conv(4, 4, 3, groups=0), "groups"),
    (lambda: pb.nn.ConvTranspose(4, 4, 3, groups=0), "groups"),
    (lambda: pb.nn.conv2d(np.ones((1, 4, 4, 4)), np.ones((3, 3, 4, 4)), groups=0), "groups"),
    (lambda: pb.nn.conv_transpose2d(np.ones((1, 4, 4, 4)), np.ones((3, 3, 4, 4)), groups=0), "groups"),
    (lambda: pb.nn.Conv(4, 4, 0), "kernel_size"),
    (lambda: pb.nn.Conv(4, 4, 3, stride=0), "stride"),
    (lambda: pb.nn.Conv(4, 4, 3, dilation=(1, 0)), "dilation"),
    (lambda: pb.nn.MaxPool(2, stride=0)(np.ones((1, 4, 4, 1))), "stride"),
    (lambda: pb.nn.MaxPool(0)(np.ones((1, 4, 4, 1))), "kernel"),
    (lambda: pb.nn.MeanPool((2, 0)), "kernel"),
], ids=["conv-groups0", "convT-groups0", "conv2d-groups0", "conv_transpose2d-groups0", "conv-kernel0", "conv-stride0",
        "conv-dilation0", "maxpool-stride0", "maxpool-kernel0", "meanpool-kernel0"])
def test_zero_sizes_are_refused_naming_the_argument_not_with_a_zero_division(make, argument):
    with pytest.raises(ValueError, match=rf"^{argument} must be"):
        make()


def test_negative_output_padding_and_pool_stride_are_refused_as_such():
    # before, the messages blamed the geometry ("does not fit", "gives (4, 4) outputs")
    with pytest.raises(ValueError, match="output_padding must be at least 0; got -1"):
        pb.nn.conv_transpose2d(np.ones((1, 5, 5, 3)), np.ones((3, 3, 2, 3)), stride=2, output_padding=-1)
    with pytest.raises(ValueError, match="output_padding must be at least 0"):
        pb.nn.ConvTranspose(3, 2, 3, output_padding=(0, -1))
    with pytest.raises(ValueError, match="stride must be at least 1; got -1"):
        pb.nn.mean_pool2d(np.ones((1, 4, 4, 1)), 2, stride=-1)


def test_reprs():
    assert repr(pb.nn.Conv(3, 8, 3, pb.nn.relu, stride=2, padding="same")) == "Conv(3, 8, 3, relu, stride=2, padding=1)"
    assert repr(pb.nn.Conv(4, 8, (1, 3), groups=2, bias=False)) == "Conv(4, 8, (1, 3), groups=2, bias=False)"
    assert repr(pb.nn.ConvTranspose(8, 4, 2, stride=2)) == "ConvTranspose(8, 4, 2, stride=2)"
    assert repr(pb.nn.MaxPool(3, stride=2, padding=1)) == "MaxPool(3, stride=2, padding=1)"
    assert repr(pb.nn.MeanPool(2)) == "MeanPool(2)"


@pytest.mark.parametrize("name", ["conv", "conv_transpose", "max_pool", "mean_pool", "relu", "sigmoid", "batch_norm"])
def test_forward_mode_matches_finite_differences(name):
    x, w = rng.standard_normal((2, 5, 5, 2)), rng.standard_normal((3, 3, 2, 3))
    dx, dw = rng.standard_normal(x.shape), rng.standard_normal(w.shape)
    f = {
        "conv": lambda x, w: pb.nn.conv2d(x, w, stride=2, padding=1),
        "conv_transpose": lambda x, w: pb.nn.conv_transpose2d(x, w[:, :, :, :2], stride=2, padding=1, groups=2),
        "max_pool": lambda x, w: pb.nn.max_pool2d(x * w[0, 0, 0, 0], 3, stride=2, padding=1),
        "mean_pool": lambda x, w: pb.nn.mean_pool2d(x * w[0, 0, 0, 0], 3, stride=2, padding=1),
        "relu": lambda x, w: pb.nn.relu(x) * w[0, 0, 0, 0],
        "sigmoid": lambda x, w: pb.nn.sigmoid(x) * w[0, 0, 0, 0],
        "batch_norm": lambda x, w: pb.nn.batch_norm(x, w[0, 0, :, 0], w[0, 1, :, 0]),
    }[name]
    y, y_dot = pb.jvp(f, (x, w), (dx, dw))
    eps = 1e-6
    expected = (f(x + eps * dx, w + eps * dw) - f(x - eps * dx, w - eps * dw)) / (2 * eps)
    np.testing.assert_allclose(y, f(x, w), rtol=1e-12)
    np.testing.assert_allclose(y_dot, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("block_bytes", [600, 5000, 10**9])  # bands of rows, whole images, everything at once
def test_blocked_im2col_gives_the_same_convolution_and_filter_gradient(block_bytes, monkeypatch):
    monkeypatch.setattr(pb.nn.conv, "COLUMN_BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(pb.nn.conv, "MIN_BLOCK_ROWS", 1)
    x, w = rng.standard_normal((3, 7, 6, 4)), rng.standard_normal((3, 3, 2, 6))
    geometry = dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=2)
    normal = dict(stride=(2, 1), padding=((1, 1), (1, 1)), dilation=(1, 2), groups=2)
    np.testing.assert_allclose(pb.nn.conv2d(x, w, **geometry), direct_conv(x, w, **normal), rtol=1e-12, atol=1e-12)
    r = rng.standard_normal(direct_conv(x, w, **normal).shape)
    assert_gradient(lambda w: np.sum(pb.nn.conv2d(x, w, **geometry) * r), w, dense_up_to=None, rtol=1e-5, atol=1e-7)


def _filter_gradient_by_hand(x, g, kernel, stride, padding):
    """dL/dw for L = sum(conv(x, w) * g), stride and padding in normal form, groups 1: loops over taps."""
    (sh, sw), ((pt, pb_), (pl, pr)) = stride, padding
    n, h, wd, c = x.shape
    xp = np.zeros((n, h + pt + pb_, wd + pl + pr, c))
    xp[:, pt:pt + h, pl:pl + wd] = x
    oh, ow = g.shape[1:3]
    dw = np.zeros((*kernel, c, g.shape[3]))
    for a in range(kernel[0]):
        for b in range(kernel[1]):
            patch = xp[:, a:a + sh * (oh - 1) + 1:sh, b:b + sw * (ow - 1) + 1:sw]  # (n, oh, ow, c)
            dw[a, b] = np.einsum("nijc,nijo->co", patch, g)
    return dw


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("block_bytes", [600, 5000, 10**9])
def test_blocks_in_the_kept_scratch_buffers_give_the_convolution_and_filter_gradient(block_bytes, dtype, monkeypatch):
    # groups 1: each block's columns and its part of the filter gradient are in the thread's scratch buffers,
    # reused by the next block and the next call (of another shape and dtype in between)
    monkeypatch.setattr(pb.nn.conv, "COLUMN_BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(pb.nn.conv, "MIN_BLOCK_ROWS", 1)
    x, w = rng.standard_normal((3, 7, 6, 4)).astype(dtype), rng.standard_normal((3, 3, 4, 5)).astype(dtype)
    other = rng.standard_normal((2, 9, 9, 3))
    normal = dict(stride=(2, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    r = rng.standard_normal(direct_conv(x, w, **normal).shape).astype(dtype)
    tolerance = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-5)
    results = []
    for _ in range(2):  # checked at the end: what a call handed out must not change with the calls after it
        results.append((pb.nn.conv2d(x, w, stride=(2, 1), padding=1),
                        pb.gradient(lambda w: np.sum(pb.nn.conv2d(x, w, stride=(2, 1), padding=1) * r), w)[0]))
        pb.gradient(lambda v: np.sum(pb.nn.conv2d(other, v, padding=1)), rng.standard_normal((3, 3, 3, 7)))
    for y, dw in results:
        assert y.dtype == dw.dtype == dtype
        np.testing.assert_allclose(y, direct_conv(x, w, **normal), **tolerance)
        np.testing.assert_allclose(dw, _filter_gradient_by_hand(x, r, (3, 3), (2, 1), normal["padding"]), **tolerance)


def test_a_block_too_big_for_the_kept_buffers_is_a_new_array(monkeypatch):
    monkeypatch.setattr(pb.nn.conv, "KEPT_SCRATCH_BYTES", 64)
    monkeypatch.setattr(pb.nn.conv, "COLUMN_BLOCK_BYTES", 5000)
    monkeypatch.setattr(pb.nn.conv, "MIN_BLOCK_ROWS", 1)
    x, w = rng.standard_normal((3, 7, 6, 4)), rng.standard_normal((3, 3, 4, 5))
    normal = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    r = rng.standard_normal(direct_conv(x, w, **normal).shape)
    (dw,) = pb.gradient(lambda w: np.sum(pb.nn.conv2d(x, w, padding=1) * r), w)
    np.testing.assert_allclose(dw, _filter_gradient_by_hand(x, r, (3, 3), (1, 1), normal["padding"]), rtol=1e-12)


def test_threads_convolving_at_once_each_use_their_own_scratch_buffers():
    import threading

    xs = [rng.standard_normal((4, 24, 24, 16)) for _ in range(2)]
    w = rng.standard_normal((3, 3, 16, 16))
    expected = [pb.gradient(lambda w: np.sum(pb.nn.conv2d(x, w, padding=1) ** 2), w)[0] for x in xs]
    wrong = []

    def run(k):
        for _ in range(15):
            (dw,) = pb.gradient(lambda w: np.sum(pb.nn.conv2d(xs[k], w, padding=1) ** 2), w)
            if not np.array_equal(dw, expected[k]):
                wrong.append(k)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


@pytest.mark.parametrize("padding", [0, 1])
def test_max_pool_gradient_under_jit_finds_the_offsets_in_one_call(padding):
    # traced call by call, the offsets' search writes into views of its arrays, which a trace records as
    # copies of the whole arrays, once per kernel offset
    x = np.random.default_rng(0).standard_normal((2, 7, 7, 3))
    x[0, 1, 1, 0] = x[0, 1, 2, 0]  # a tie: the first offset (row-major) takes the gradient

    def grad(x):
        return pb.gradient(lambda v: np.sum(pb.nn.max_pool2d(v, 3, stride=2, padding=padding) ** 2), x)[0]

    jf = pb.jit(grad)
    jf(x)
    for scale in (1.0, -0.5):
        np.testing.assert_array_equal(jf(x * scale), grad(x * scale))
    (program,) = [program for variants in jf._cache.values() for program, *_ in variants]
    calls = [line for line in program.source.splitlines() if line.startswith("    s")]
    assert len(calls) == 3 and calls[0].startswith("    s1, s2 = f0(s0, kernel=(3, 3)")  # pool and offsets, 2 * y, scatter
