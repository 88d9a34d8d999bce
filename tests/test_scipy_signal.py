"""pullback.scipy.signal: convolve, correlate, fftconvolve and lfilter give SciPy's values on
traced inputs, and their derivatives in every input (reverse and forward, first and second
order) agree with float64 central differences; lfilter's zf too."""

import numpy as np
import pytest

import pullback as pb
from pullback.testing import check_transpose
from rule_checks import gradcheck

ss = pytest.importorskip("scipy.signal")
from pullback.scipy import signal  # noqa: E402

SHAPE_PAIRS = [((5,), (3,)), ((3,), (5,)), ((4, 5), (2, 3)), ((2, 3), (4, 5)), ((6,), (6,)), ((1,), (4,)), ((2, 1), (1, 3))]


def both_modes(f, *args):
    gradcheck(f, *args, rtol=1e-6, atol=1e-9)
    result = check_transpose(f, *args, rtol=1e-10, atol=1e-13, seed=1)
    assert result and result.scale > 0, result


@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolve_and_correlate(shapes, mode):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=shapes[0]), rng.normal(size=shapes[1])
    for ours, theirs in ((signal.convolve, ss.convolve), (signal.correlate, ss.correlate)):
        for method in ("direct", "fft", "auto"):
            try:
                expected = theirs(a, b, mode, method)
            except ValueError:  # 'valid' needs one input at least as large as the other in every axis
                with pytest.raises(ValueError):
                    pb.gradient(lambda a: np.sum(ours(a, b, mode, method)), a)
                continue
            np.testing.assert_array_equal(pb.pullback(lambda a, b: ours(a, b, mode, method), a, b)[0], expected)
            np.testing.assert_array_equal(ours(a, b, mode, method), expected)  # plain inputs: SciPy itself
            both_modes(lambda a, b: ours(a, b, mode=mode, method=method), a, b)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_fftconvolve_with_axes_and_broadcasting(mode):
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(3, 6)), rng.normal(size=(1, 4))
    for axes in (1, [-1], None):
        if axes is None and mode == "valid":
            continue
        expected = ss.fftconvolve(a, b, mode, axes)
        np.testing.assert_array_equal(pb.pullback(lambda a, b: signal.fftconvolve(a, b, mode, axes), a, b)[0], expected)
        both_modes(lambda a, b: signal.fftconvolve(a, b, mode, axes=axes), a, b)


def test_convolution_second_order_and_float32():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=7), rng.normal(size=3)
    gradcheck(lambda a: pb.gradient(lambda b: np.sum(signal.convolve(a, b, "same") ** 2), b)[0], a, rtol=1e-5)
    g = pb.gradient(lambda a: np.sum(signal.correlate(a, b.astype(np.float32))), a.astype(np.float32))[0]
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, pb.gradient(lambda a: np.sum(signal.correlate(a, b)), a)[0], rtol=1e-5)


def lfilter_all(b, a, x, axis, zi):
    y, zf = signal.lfilter(b, a, x, axis, zi)
    return np.concatenate([np.ravel(y), np.ravel(zf)])


@pytest.mark.parametrize("lengths", [(3, 4), (4, 2), (1, 3), (3, 1), (2, 2)], ids=str)
def test_lfilter_in_every_input(lengths):
    rng = np.random.default_rng(3)
    b = rng.normal(size=lengths[0])
    a = np.concatenate([[1.3], 0.3 * rng.normal(size=lengths[1] - 1)])
    k = max(lengths) - 1
    x, zi = rng.normal(size=(3, 7)), rng.normal(size=(3, k))
    for axis in (-1, 1):
        np.testing.assert_array_equal(pb.pullback(lambda x: signal.lfilter(b, a, x, axis), x)[0], ss.lfilter(b, a, x, axis))
        both_modes(lambda b, a, x: signal.lfilter(b, a, x, axis), b, a, x)
        y, zf = pb.pullback(lambda b, a, x, zi: signal.lfilter(b, a, x, axis, zi), b, a, x, zi)[0]
        expected = ss.lfilter(b, a, x, axis, zi)
        np.testing.assert_array_equal(y, expected[0])
        np.testing.assert_array_equal(zf, expected[1])
        both_modes(lambda b, a, x, zi: lfilter_all(b, a, x, axis, zi), b, a, x, zi)
    # axis 0, zi broadcast over the other axis, and a signal shorter than the state
    both_modes(lambda b, a, x, zi: lfilter_all(b, a, x, 0, zi), b, a, rng.normal(size=(7, 2)), rng.normal(size=(k, 1)))
    both_modes(lambda b, a, x, zi: lfilter_all(b, a, x, -1, zi), b, a, rng.normal(size=1), rng.normal(size=k))


def test_lfilter_keywords_lists_second_order_and_float32():
    rng = np.random.default_rng(4)
    x = rng.normal(size=6)
    both_modes(lambda x: signal.lfilter(b=[0.5, 0.5], a=[1.0, -0.4], x=x), x)
    both_modes(lambda c: signal.lfilter([c[0], 1.0], [1.0, c[1]], x), np.array([0.3, -0.2]))  # traced list entries
    gradcheck(lambda x: pb.gradient(lambda b, a: np.sum(signal.lfilter(b, a, x) ** 2), np.array([1.0, 0.5]),
                                    np.array([1.0, -0.3]))[1], x, rtol=1e-5)
    g = pb.gradient(lambda x: np.sum(signal.lfilter([1.0, 0.5], [1.0, -0.3], x)), x.astype(np.float32))[0]
    assert g.dtype == np.float32
    with pytest.raises(ValueError, match="zi must have shape"):
        pb.gradient(lambda x: np.sum(signal.lfilter([1.0, 0.5], [1.0], x, zi=np.zeros((2, 1)))[0]), x)


def test_lfilter_adjoint_is_the_backward_filter():
    # d sum(w * y) / dx for y = lfilter(b, a, x) is lfilter(b, a, w reversed), reversed
    rng = np.random.default_rng(5)
    b, a, x, w = rng.normal(size=3), np.array([1.0, -0.5, 0.2]), rng.normal(size=8), rng.normal(size=8)
    g = pb.gradient(lambda x: np.sum(w * signal.lfilter(b, a, x)), x)[0]
    np.testing.assert_allclose(g, ss.lfilter(b, a, w[::-1])[::-1], rtol=1e-13)


def test_scalars_and_integer_signals():
    for ours, theirs in ((signal.convolve, ss.convolve), (signal.correlate, ss.correlate),
                         (signal.fftconvolve, ss.fftconvolve)):
        assert pb.pullback(lambda a: ours(a, 2.0), np.array(3.0))[0] == theirs(3.0, 2.0)
        assert pb.gradient(lambda a: ours(a, np.array(2.0)), np.array(3.0))[0] == 2.0
    gradcheck(lambda b: signal.lfilter(b, [1.0, -0.5], np.arange(4)), np.array([1.0, 2.0]))  # an integer signal
