"""The FFT family on tracked values: every transform against float64 central differences over
random shapes, lengths, axes and normalisations, of real inputs and of complex inputs (in their
real and imaginary directions, tests/complex_checks.py); the traced values against NumPy; the
real-valued pipelines people write (power spectra, filtering, irfft(rfft(x))); arithmetic on
the complex values in between; second order; and the clear refusals."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from complex_checks import check_complex
from rule_checks import dtypes, gradcheck, second_order, seeds

SETTINGS = settings(max_examples=8, deadline=None)
norms = st.sampled_from([None, "backward", "ortho", "forward"])
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5)


def tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-7} if dtype == np.float64 else {"rtol": 3e-3, "atol": 3e-4}


def project(y, seed=0):
    """A fixed random real functional of a real or complex output: it sees every real and imaginary part."""
    rng = np.random.default_rng(seed)
    return np.sum(np.real(y) * rng.normal(size=np.shape(y))) + np.sum(np.imag(y) * rng.normal(size=np.shape(y)))


def check(fn, *args, dtype=np.float64):
    """Derivatives of project(fn(*args)) against central differences, and the traced value against NumPy."""
    gradcheck(lambda *a: project(fn(*a)), *args, **tolerance(dtype))
    traced = pb.pullback(fn, *args)[0]
    expected = fn(*args)
    assert np.shape(traced) == np.shape(expected)
    assert np.iscomplexobj(traced) == np.iscomplexobj(expected)
    np.testing.assert_allclose(traced, expected, rtol=1e-6 if dtype == np.float64 else 1e-3, atol=1e-6)


@SETTINGS
@given(shape=shapes, n=st.sampled_from([None, 1, 3, 6]), norm=norms, dtype=dtypes, seed=seeds)
def test_one_dimensional_transforms(shape, n, norm, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    axis = int(rng.integers(-len(shape), len(shape)))
    check(lambda x: np.fft.fft(x, n, axis, norm), x, dtype=dtype)
    check(lambda x: np.fft.ifft(x, n, axis, norm), x, dtype=dtype)
    check(lambda x: np.fft.rfft(x, n, axis, norm), x, dtype=dtype)
    check(lambda x: np.fft.ihfft(x, n, axis, norm), x, dtype=dtype)
    if n is not None or shape[axis] > 1:  # irfft's default length 2 * (m - 1) must be positive
        m = None if n is None else 2 * n
        check(lambda x: np.fft.irfft(np.fft.fft(x, axis=axis), m, axis, norm), x, dtype=dtype)
        check(lambda x: np.fft.hfft(np.fft.ifft(x, axis=axis), m, axis, norm), x, dtype=dtype)
    # a complex input that is not the FFT of anything simple
    phases = np.exp(1j * np.arange(shape[axis])).reshape((-1,) + (1,) * (len(shape) - 1 - axis % len(shape)))
    twisted = lambda x: np.fft.fft(x, axis=axis) * phases  # noqa: E731
    check(lambda x: np.fft.ifft(twisted(x), n, axis, norm), x, dtype=dtype)
    check(lambda x: np.fft.fft(twisted(x), n, axis, norm), x, dtype=dtype)


@st.composite
def nd_case(draw):
    shape = draw(hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=4))
    k = draw(st.integers(1, len(shape)))
    axes = draw(st.permutations(range(len(shape))))[:k]
    s = draw(st.one_of(st.none(), st.lists(st.integers(1, 5), min_size=k, max_size=k)))
    return shape, tuple(axes), None if s is None else tuple(s)


@SETTINGS
@given(case=nd_case(), norm=norms, seed=seeds)
def test_n_dimensional_transforms(case, norm, seed):
    shape, axes, s = case
    x = np.random.default_rng(seed).normal(size=shape)
    check(lambda x: np.fft.fftn(x, s, axes, norm), x)
    check(lambda x: np.fft.ifftn(np.fft.fftn(x) * 2.0j, s, axes, norm), x)
    check(lambda x: np.fft.rfftn(x, s, axes, norm), x)
    if (s[-1] if s else 2 * (shape[axes[-1]] - 1)) >= 1:
        check(lambda x: np.fft.irfftn(np.fft.fftn(x), s, axes, norm), x)
    check(lambda x: np.fft.fft2(x, norm=norm), x)
    check(lambda x: np.fft.ifft2(x, norm=norm), x)
    check(lambda x: np.fft.rfft2(x, norm=norm), x)
    check(lambda x: np.fft.irfft2(np.fft.rfft2(x), s=shape[-2:], norm=norm), x)


@SETTINGS
@given(shape=shapes, seed=seeds)
def test_shifts(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    axis = int(rng.integers(0, len(shape)))
    check(np.fft.fftshift, x)
    check(lambda x: np.fft.ifftshift(x, axes=axis), x)
    check(lambda x: np.fft.fftshift(np.fft.fft(x), axes=(axis,)), x)


def test_float32_stays_float32():
    x = np.random.default_rng(0).normal(size=8).astype(np.float32)
    (g,) = pb.gradient(lambda x: np.sum(np.abs(np.fft.rfft(x)) ** 2), x)
    assert g.dtype == np.float32
    assert pb.pullback(np.fft.rfft, x)[0].dtype == np.complex64


# --- the pipelines scientists write ---------------------------------------------------
def test_power_spectrum_matches_parseval_and_central_differences():
    x = np.random.default_rng(1).normal(size=16)
    # Parseval: sum |fft(x)|^2 = n sum x^2, so the gradient is 2 n x.
    np.testing.assert_allclose(pb.gradient(lambda x: np.sum(np.abs(np.fft.fft(x)) ** 2), x)[0], 32 * x)
    gradcheck(lambda x: project(np.abs(np.fft.rfft(x)) ** 2), x)
    # A zero-mean signal has a zero DC term: |0| has gradient 0 there, and |.|^2 stays exact.
    centred = x - x.mean()
    gradcheck(lambda x: project(np.abs(np.fft.rfft(x - np.mean(x))) ** 2), centred)


def test_filtering_round_trips():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 10))
    response = np.exp(-np.arange(6) / 3.0) * np.exp(0.3j * np.arange(6))
    check(lambda x: np.fft.irfft(np.fft.rfft(x) * response, n=10), x)
    check(lambda x: np.fft.irfft(response * np.fft.rfft(x), n=10), x)
    gains = rng.normal(size=(3, 1))
    check(lambda x: np.real(np.fft.ifft(np.fft.fft(x, axis=0) * gains, axis=0)), x)
    np.testing.assert_allclose(pb.gradient(lambda x: project(np.fft.irfft(np.fft.rfft(x), n=10)), x)[0],
                               pb.gradient(lambda x: project(x), x)[0])


def test_fft_convolution_equals_np_convolve():
    rng = np.random.default_rng(3)
    a, v = rng.normal(size=6), rng.normal(size=4)

    def by_fft(a, v):
        return np.fft.irfft(np.fft.rfft(a, 9) * np.fft.rfft(v, 9), 9)

    np.testing.assert_allclose(pb.pullback(by_fft, a, v)[0], np.convolve(a, v))
    ga = pb.gradient(lambda a, v: project(by_fft(a, v)), a, v)
    gb = pb.gradient(lambda a, v: project(np.convolve(a, v)), a, v)
    for g, h in zip(ga, gb):
        np.testing.assert_allclose(g, h, atol=1e-12)


def test_complex_arithmetic():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 6))
    w = rng.normal(size=(2, 6))
    c = rng.normal(size=6) + 1j * rng.normal(size=6)

    def f(x):
        F = np.fft.fft(x)
        G = np.fft.fft(x[::-1])
        out = F * G - F / (G + 3.0) + 2.0 * F - c * F + F * c - 1.0 + (F + 1j) - (2j - G) + w / F
        out = out + np.exp(0.1 * F) + F ** 3 / 10.0 - np.conj(F) ** -1 + np.square(G) - -F + (+G)
        out = out + abs(F).mean() + np.log(F[:, 1:3]).sum() + np.angle(F[:, 1:3], deg=True).sum()
        out = out + np.sum(F @ (G.T / 7.0)) + np.mean(np.diagonal(G @ F.T))
        return out + F * x  # a tracked real array after the complex value

    check(f, x)
    check(lambda x: np.concatenate([np.fft.fft(x), x, np.stack([np.fft.fft(x)[0], x[1]])], axis=0), x)
    check(lambda x: np.reshape(np.fft.rfft(x), -1)[::2] + np.transpose(np.fft.rfft(x)).T.ravel()[1::2], x)
    check(lambda x: np.fft.fft(x).real * np.fft.fft(x).imag + np.imag(x) + np.real(x), x)


STRUCTURAL = [
    lambda F: np.reshape(F, (6, 4)), lambda F: F.reshape(4, 6), lambda F: np.transpose(F, (2, 0, 1)), lambda F: F.T,
    lambda F: F.transpose(1, 0, 2), lambda F: np.swapaxes(F, 0, 2), lambda F: np.moveaxis(F, 0, -1),
    lambda F: np.squeeze(F[:1]), lambda F: np.expand_dims(F, 1), lambda F: np.ravel(F), lambda F: F.flatten(),
    lambda F: np.flip(F, 1), lambda F: np.roll(F, 2, axis=2), lambda F: np.copy(F), lambda F: F.copy(),
    lambda F: np.broadcast_to(F, (2, 2, 3, 4)), lambda F: np.take(F, [0, 3, 3], axis=2),
    lambda F: np.diagonal(F, 0, 1, 2), lambda F: np.sum(F, axis=0), lambda F: F.sum(axis=1), lambda F: F.mean(),
    lambda F: np.mean(F, axis=(1, 2)), lambda F: np.cumsum(F, axis=1), lambda F: np.trace(F, 0, 1, 2),
    lambda F: np.tile(F, 2), lambda F: np.repeat(F, [1, 0, 2], axis=1),
]


@pytest.mark.parametrize("k", range(len(STRUCTURAL)))
def test_structural_functions_act_on_both_parts(k):
    x = np.random.default_rng(k).normal(size=(2, 3, 4))
    check(lambda x: STRUCTURAL[k](np.fft.fft(x)), x)


def test_assigning_into_a_spectrum():
    x = np.random.default_rng(5).normal(size=(2, 8))

    def highpass(x):
        F = np.fft.rfft(x)
        F[:, 0] = 0.0
        F[:, 1] = (F * (0.5 + 0.5j))[:, 1]  # reading F[:, 1] first would make F a view's base
        return np.fft.irfft(F, n=8)

    check(highpass, x)


def test_second_order():
    x = np.random.default_rng(6).normal(size=8)
    second_order(lambda x: project(np.abs(np.fft.rfft(x)) ** 2), x)
    second_order(lambda x: project(np.fft.irfft(np.fft.rfft(x) ** 2, n=8)), x)
    second_order(lambda x: project(np.fft.fftn(np.reshape(x, (2, 4)) ** 2, norm="ortho")), x)
    second_order(lambda x: project(np.fft.hfft(np.fft.ihfft(x ** 3))), x)


def test_jvp_through_the_transforms():
    rng = np.random.default_rng(7)
    x, v = rng.normal(size=6), rng.normal(size=6)
    f = lambda x: np.fft.irfft(np.fft.rfft(x) * np.abs(np.fft.rfft(x)) ** 2, n=6)  # noqa: E731
    _, y_dot = pb.jvp(f, (x,), (v,))
    np.testing.assert_allclose(y_dot, (f(x + 1e-6 * v) - f(x - 1e-6 * v)) / 2e-6, rtol=1e-5, atol=1e-7)


# --- complex inputs, in the real and the imaginary direction -----------------------------
def crandn(rng, *shape):
    return rng.normal(size=shape) + 1j * rng.normal(size=shape)


@pytest.mark.parametrize("norm", [None, "backward", "ortho", "forward"])
def test_complex_inputs_of_every_transform(norm):
    rng = np.random.default_rng(9)
    z, x = crandn(rng, 3, 4), rng.normal(size=(3, 5))
    for fn in (np.fft.fft, np.fft.ifft, np.fft.irfft, np.fft.hfft):
        check_complex(lambda z: fn(z, None, -1, norm), z)  # positional
        check_complex(lambda z: fn(z, n=6, axis=0, norm=norm), z)  # keyword, padded
        check_complex(lambda z: fn(z, 3, 0, norm), z)  # cropped
    for fn in (np.fft.rfft, np.fft.ihfft):
        check_complex(lambda x: fn(x, None, -1, norm), x)
        check_complex(lambda x: fn(x, n=7, axis=0, norm=norm), x)
        check_complex(lambda x: fn(x, 4, 1, norm), x)
    for fn in (np.fft.fftn, np.fft.ifftn, np.fft.fft2, np.fft.ifft2, np.fft.irfftn, np.fft.irfft2):
        check_complex(lambda z: fn(z, norm=norm), z)
        check_complex(lambda z: fn(z, (2, 5), (1, 0), norm), z)
        check_complex(lambda z: fn(z, s=(4, 3), axes=(0, 1), norm=norm), z)
    for fn in (np.fft.rfftn, np.fft.rfft2):
        check_complex(lambda x: fn(x, norm=norm), x)
        check_complex(lambda x: fn(x, (2, 6), (1, 0), norm), x)
        check_complex(lambda x: fn(x, s=(4, 3), axes=(0, 1), norm=norm), x)
    for fn in (np.fft.fftshift, np.fft.ifftshift):
        check_complex(fn, z)
        check_complex(lambda z: fn(z, axes=0), z)


def test_complex64_stays_complex64():
    z = crandn(np.random.default_rng(10), 8).astype(np.complex64)
    y, back = pb.pullback(np.fft.fft, z)
    assert y.dtype == np.complex64 and back(np.ones_like(y))[0].dtype == np.complex64
    _, t = pb.jvp(np.fft.irfft, (z,), (np.ones_like(z),))
    assert t.dtype == np.float32


def test_the_reverse_rule_of_fft_is_fft():
    # a DFT matrix is symmetric: the cotangent map is the same transform (no conjugation)
    c = crandn(np.random.default_rng(11), 6)
    for norm in (None, "ortho", "forward"):
        _, back = pb.pullback(lambda z: np.fft.fft(z, norm=norm), np.zeros(6, complex))
        np.testing.assert_allclose(back(c)[0], np.fft.fft(c, norm=norm))


def test_fft_results_are_ordinary_complex_values():
    def probe(x):
        F = np.fft.fft(x)
        assert F.shape == (3,) and F.ndim == 1 and F.size == 3 and len(F) == 3 and F.dtype == np.complex128
        assert np.iscomplexobj(F) and not np.isrealobj(F)
        return np.sum(np.abs(np.sinh(F) @ np.linalg.inv(np.diag(F + 5.0))))

    gradcheck(probe, np.array([1.0, 2.0, 4.0]))


# --- refusals ---------------------------------------------------------------------------
def test_refusals_are_clear():
    x = np.random.default_rng(8).normal(size=4)
    with pytest.raises(TypeError, match="plain NumPy array|convert"):
        pb.gradient(lambda x: np.sum(np.asarray(np.fft.fft(x)).real), x)
    with pytest.raises(TypeError, match="rfft"):  # NumPy's own error: rfft takes real input
        pb.gradient(lambda x: np.sum(np.fft.rfft(np.fft.fft(x)).real), x)
    with pytest.raises(TypeError, match="out="):
        pb.gradient(lambda x: np.sum(np.fft.fft(x, out=np.empty(4, complex)).real), x)
    with pytest.raises(TypeError, match="Output should be scalar|Output is complex"):
        pb.gradient(lambda x: np.fft.fft(x)[0], x)
    with pytest.raises(ValueError, match="Invalid norm"):
        pb.gradient(lambda x: np.sum(np.fft.fft(x, norm="bad").real), x)


def test_tracked_real_on_either_side_of_a_complex_value():
    x = np.random.default_rng(4).normal(size=4)
    for f in (lambda x: np.sum((x * np.fft.fft(x)).imag), lambda x: np.sum(np.abs(x + np.fft.fft(x)) ** 2),
              lambda x: np.sum(np.real(x - np.fft.fft(x) * 2.0))):
        gradcheck(f, x, rtol=1e-6, atol=1e-8)


def test_second_order_of_a_complex_input():
    rng = np.random.default_rng(12)
    z, v = crandn(rng, 6), crandn(rng, 6)

    def directional(z):  # the derivative of the gradient along v, checked in both directions of z
        (g,) = pb.gradient(lambda z: np.sum(np.abs(np.fft.fft(z, 8, norm="ortho")) ** 4) + np.sum(np.fft.irfft(z, 9) ** 3), z)
        return np.real(np.sum(g * v))

    check_complex(directional, z, rtol=1e-5, atol=1e-6)
