"""Probes of the FFT, convolution, polynomial and interpolation rules the way real code calls them:
odd and even lengths, cropping and padding, every norm, negative and repeated axes, float16 to
longdouble and complex64 inputs, strided and empty arrays, every convolution mode with the shorter
array first, np.interp at knots, outside the range and with a period, np.gradient / np.diff /
np.trapezoid with every spacing, polyfit with weights, covariance and too high a degree, roots
and the Polynomial classes; values bit for bit against NumPy, derivatives against float64 central
differences, hand derivations or JAX, pb.jit replays against eager, and the clear refusals. The
tests marked xfail record bugs (their reasons say what is wrong and where)."""

import warnings

import numpy as np
import pytest

import pullback as pb
from complex_checks import check_complex
from pullback.testing import numerical_gradient
from rule_checks import gradcheck, second_order

NORMS = [None, "backward", "ortho", "forward"]


def project(y, seed=0):
    """A fixed random real functional of a real or complex output (or of a tuple of them)."""
    if isinstance(y, tuple):
        return sum(project(part, seed + k) for k, part in enumerate(y))
    rng = np.random.default_rng(seed)
    return np.sum(np.real(y) * rng.normal(size=np.shape(y))) + np.sum(np.imag(y) * rng.normal(size=np.shape(y)))


def same_as_numpy(fn, *args):
    """The traced value of fn equals its plain value: bit for bit, same dtype and shape, no warning of its own."""
    with warnings.catch_warnings(record=True) as plain_warnings:
        warnings.simplefilter("always")
        expected = fn(*args)
    with warnings.catch_warnings(record=True) as traced_warnings:
        warnings.simplefilter("always")
        traced = pb.pullback(fn, *args)[0]
    pairs = zip(traced, expected) if isinstance(expected, tuple) else [(traced, expected)]
    for got, want in pairs:
        np.testing.assert_array_equal(got, want, strict=True)
    assert [type(w.message) for w in traced_warnings] == [type(w.message) for w in plain_warnings]


def check(fn, *args, **tol):
    """fn's derivatives (reverse and forward) against central differences, and its value against NumPy."""
    gradcheck(lambda *a: project(fn(*a)), *args, **({"rtol": 1e-5, "atol": 1e-7} | tol))
    same_as_numpy(fn, *args)


def same_replay(fn, make, calls=3):
    """pb.jit(fn) and a jitted gradient of it give what eager code gives, call after call (replays)."""
    jitted = pb.jit(fn)
    jitted_grad = pb.jit(lambda x: pb.gradient(lambda x: project(fn(x)), x)[0])
    for _ in range(calls):
        x = make()
        expected, got = fn(x), jitted(x)
        for a, b in zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]:
            np.testing.assert_array_equal(a, b, strict=True)
        np.testing.assert_array_equal(jitted_grad(x), pb.gradient(lambda x: project(fn(x)), x)[0], strict=True)


def jax_numpy():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax.numpy


def against_jax(f, x, rtol=1e-9, atol=1e-11):
    """The gradient and the Hessian of f(x, np) against JAX's of f(x, jax.numpy) (compiled: much faster)."""
    import jax

    jnp = jax.numpy
    g, h = jax.jit(lambda x: (jax.grad(lambda x: f(x, jnp))(x), jax.hessian(lambda x: f(x, jnp))(x)))(jnp.asarray(x))
    np.testing.assert_allclose(pb.gradient(lambda x: f(x, np), x)[0], np.asarray(g), rtol=rtol, atol=atol)
    np.testing.assert_allclose(pb.hessian(lambda x: f(x, np), x), np.asarray(h), rtol=rtol, atol=atol)


# --- FFT --------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", NORMS)
def test_fft_family_cropped_padded_on_both_axes(norm):
    x = np.random.default_rng(0).normal(size=(3, 6))
    for name in ("fft", "ifft", "rfft", "ihfft", "irfft", "hfft"):
        fn = getattr(np.fft, name)
        for n, axis in ((None, -1), (4, 0), (11, -1), (10, -2), (3, 1)):
            check(lambda x: fn(x, n, axis, norm), x)


@pytest.mark.parametrize("norm", NORMS)
def test_irfft_and_hfft_of_a_complex_spectrum_odd_and_even_lengths(norm):
    rng = np.random.default_rng(1)
    spectrum = rng.normal(size=5) + 1j * rng.normal(size=5)
    for n in (None, 7, 8, 9, 10, 4):
        check_complex(lambda z: np.fft.irfft(z, n, norm=norm), spectrum)
        check_complex(lambda z: np.fft.hfft(z, n, norm=norm), spectrum)


def test_irfft_ignores_the_imaginary_parts_at_zero_and_nyquist():
    rng = np.random.default_rng(2)
    re, im = rng.normal(size=5), rng.normal(size=5)
    w = rng.normal(size=8)
    _, g_im = pb.gradient(lambda re, im: np.sum(w * np.fft.irfft(re + 1j * im, 8)), re, im)
    assert g_im[0] == 0.0 and g_im[4] == 0.0  # n = 8: the Nyquist term is the last one
    np.testing.assert_allclose(g_im, numerical_gradient(lambda im: np.sum(w * np.fft.irfft(re + 1j * im, 8)), im)[0],
                               atol=1e-9)
    # n = 9 (odd): the last term is not a Nyquist term, and its imaginary part counts
    w = rng.normal(size=9)
    _, g_im = pb.gradient(lambda re, im: np.sum(w * np.fft.irfft(re + 1j * im, 9)), re, im)
    assert g_im[0] == 0.0 and g_im[4] != 0.0
    np.testing.assert_allclose(g_im, numerical_gradient(lambda im: np.sum(w * np.fft.irfft(re + 1j * im, 9)), im)[0],
                               atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.longdouble, np.complex64])
def test_fft_values_dtypes_and_gradient_dtypes(dtype):
    x = (np.random.default_rng(3).normal(size=(2, 4)) * 3).astype(dtype)
    real_only = ("rfft", "ihfft", "rfftn", "rfft2")
    for name in ("fft", "ifft", "rfft", "ihfft", "irfft", "hfft", "fftn", "ifftn", "rfftn", "irfftn", "fft2",
                 "rfft2", "irfft2", "fftshift", "ifftshift"):
        if np.iscomplexobj(x) and name in real_only:
            continue
        fn = getattr(np.fft, name)
        same_as_numpy(fn, x)
        y, back = pb.pullback(fn, x)
        assert back(np.ones_like(y))[0].dtype == x.dtype


def test_fft_of_integer_data_times_a_traced_scale():
    data = np.arange(6)
    for fn in (np.fft.fft, np.fft.rfft, np.fft.ihfft, np.fft.fftn):
        same_as_numpy(lambda s: fn(data) * s, 2.0)
        (g,) = pb.gradient(lambda s: np.sum(np.abs(fn(data) * s) ** 2), 2.0)
        assert g == pytest.approx(4.0 * np.sum(np.abs(fn(data)) ** 2))


def test_fft_of_strided_transposed_and_empty_inputs():
    x = np.random.default_rng(4).normal(size=(5, 8))
    check(lambda x: np.fft.rfft(x[:, ::2]), x)
    check(lambda x: np.fft.fft(x[::-1, ::-3], axis=0), x)
    check(lambda x: np.fft.rfftn(x.T, s=(5, 4), axes=(0, 1)), x)
    check(lambda x: np.fft.irfft(np.fft.fft(x[:, 1::3]), 5, axis=-1, norm="ortho"), x)
    same_as_numpy(np.fft.fft, np.zeros((0, 4)))
    same_as_numpy(lambda x: np.fft.irfft(x, 6), np.zeros((0, 4)))
    (g,) = pb.gradient(lambda x: np.sum(np.abs(np.fft.rfft(x)) ** 2), np.zeros((0, 4)))
    assert g.shape == (0, 4)
    with pytest.raises(ValueError, match="Invalid number of FFT data points"):  # NumPy's own message
        pb.gradient(lambda x: np.sum(np.abs(np.fft.fft(x[:, :0]))), x)


def test_n_dimensional_transforms_with_s_and_axes():
    x = np.random.default_rng(5).normal(size=(3, 4, 5))
    for s, axes in (((7, 3), (2, 0)), ((2, 6, 3), (-1, 0, 1)), ((3, 3, 3), (0, 1, 1)), (None, (-2,)), ((4,), (-3,))):
        check(lambda x: np.fft.fftn(x, s, axes, "ortho"), x)
        check(lambda x: np.fft.ifftn(x, s, axes, "forward"), x)
        check(lambda x: np.fft.rfftn(x, s, axes), x)
        check(lambda x: np.fft.irfftn(np.fft.fftn(x), s, axes, "ortho"), x)
    check(lambda x: np.fft.irfft2(np.fft.rfft2(x, s=(3, 7)), s=(4, 7)), x)
    check(lambda x: np.fft.irfftn(np.fft.fft(x), s=(-1, 7), axes=(0, 2)), x)  # -1: the input's own length


def test_shifts_with_negative_axes_tuples_and_lists():
    x = np.random.default_rng(6).normal(size=(3, 4, 5))
    for axes in (None, -1, (-1, -3), [0, 2], (1, 1)):
        check(lambda x: np.fft.fftshift(x, axes=axes), x)
        check(lambda x: np.fft.ifftshift(np.fft.fft(x), axes=axes), x)
    check(lambda x: np.fft.fftshift(np.fft.fft(x)) * np.fft.fftshift(np.fft.fftfreq(5)), x)


def test_fft_gradients_and_hessians_against_jax():
    jax_numpy()
    rng = np.random.default_rng(7)
    x, w = rng.normal(size=6), rng.normal(size=9)
    pairs = [
        (lambda x, m: m.sum(m.abs(m.fft.rfft(x ** 2, 9, norm="ortho")) ** 3 * w[:5])),
        (lambda x, m: m.sum(m.fft.irfft(x[:4] * (1 + 1j * x[2:]), 5, norm="forward") ** 3 * w[:5])),
        (lambda x, m: m.sum(m.fft.hfft(x[:4] * (1 + 1j * x[2:]), 7) ** 3 * w[:7])),
        (lambda x, m: m.sum(m.abs(m.fft.fftn(m.reshape(x, (2, 3)) ** 2, s=(3, 2), axes=(1, 0))) ** 2)),
        (lambda x, m: m.sum(m.real(m.fft.ifft(m.fft.fftshift(x) * 1j, 8)) * w[:8])),
    ]
    for f in pairs:
        against_jax(f, x)


def test_fft_jit_replays_equal_eager():
    rng = np.random.default_rng(8)
    same_replay(lambda x: np.fft.rfft(x, 7, norm="ortho"), lambda: rng.normal(size=5))
    same_replay(lambda x: np.fft.irfftn(np.fft.fftn(x), s=(3, 5), axes=(0, 1)), lambda: rng.normal(size=(2, 4)))
    same_replay(lambda x: np.fft.hfft(np.fft.ifftshift(x), 9, norm="forward"), lambda: rng.normal(size=5))


def test_fftn_with_s_and_no_axes_warns_as_numpy():
    x = np.random.default_rng(9).normal(size=(3, 4))
    for fn in (lambda x: np.fft.fftn(x, s=(3, 4)), lambda x: np.fft.rfftn(x, s=(3, 4)),
               lambda x: np.fft.fftn(x, s=(None, 4), axes=(0, 1))):
        with pytest.warns(DeprecationWarning):
            fn(x)
        with pytest.warns(DeprecationWarning):
            pb.gradient(lambda x: np.sum(np.abs(fn(x))), x)


# --- convolution and correlation ----------------------------------------------------------------
@pytest.mark.parametrize("fn", [np.convolve, np.correlate])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolve_correlate_complex_both_orders(fn, mode):
    rng = np.random.default_rng(10)
    a, v = rng.normal(size=5) + 1j * rng.normal(size=5), rng.normal(size=3) + 1j * rng.normal(size=3)
    for p, q in ((a, v), (v, a), (a.real, v), (a, v.real)):  # the shorter array first too
        check_complex(lambda p, q: fn(p, q, mode), p, q)


def test_convolve_values_and_dtypes():
    rng = np.random.default_rng(11)
    same_as_numpy(lambda s: np.convolve(np.arange(4), np.array([1.0, 2.0]) * s), 1.0)
    same_as_numpy(lambda s: np.correlate(np.array([1.0, 2.0]) * s, np.arange(5), "same"), 1.0)
    for dtype in (np.float16, np.float32):
        x = rng.normal(size=6).astype(dtype)
        same_as_numpy(lambda x: np.convolve(x, x[:2], "same"), x)
        same_as_numpy(lambda x: np.correlate(x[:3], x, "valid"), x)
        assert pb.gradient(lambda x: np.sum(np.convolve(x, x)), x)[0].dtype == dtype
    same_as_numpy(lambda s: np.convolve(s, np.array([1.0, 2.0])), 3.0)
    same_as_numpy(lambda s: np.convolve([1.0, 2.0, 3.0], s), np.array([1.0, 2.0]))
    check(lambda x: np.convolve(x[::-2], x[1:3], "same"), rng.normal(size=9))


def test_convolve_and_correlate_take_numpys_integer_modes():
    rng = np.random.default_rng(27)
    a, v = rng.normal(size=5), rng.normal(size=3)
    for mode in (0, 1, 2):
        check(lambda a, v: np.convolve(a, v, mode), a, v)
        check(lambda a, v: np.correlate(a, v, mode), a, v)


def test_convolution_hessians_against_jax_and_replays():
    jax_numpy()
    rng = np.random.default_rng(12)
    x, w = rng.normal(size=6), rng.normal(size=6)
    for f in (lambda x, m: m.sum(m.convolve(x, x[:3] ** 2, "same") ** 2 * w),
              lambda x, m: m.sum(m.correlate(x[:2] ** 2, x, "same") ** 2 * w)):
        against_jax(f, x)
    same_replay(lambda y: np.convolve(y, np.array([1.0, 2.0, 3.0]), "same"), lambda: rng.normal(size=5))
    same_replay(lambda y: np.correlate(np.array([1.0, 2.0, 3.0]), y, "full"), lambda: rng.normal(size=5))


def test_scipy_signal_complex_and_float32():
    ss = pytest.importorskip("scipy.signal")
    from pullback.scipy import signal

    rng = np.random.default_rng(13)
    a = rng.normal(size=(4, 5)) + 1j * rng.normal(size=(4, 5))
    b = rng.normal(size=(2, 3)) + 1j * rng.normal(size=(2, 3))
    for name in ("convolve", "correlate", "fftconvolve"):
        ours, theirs = getattr(signal, name), getattr(ss, name)
        for mode in ("full", "same", "valid"):
            for p, q in ((a, b), (b, a)):
                if name == "fftconvolve" and mode == "valid" and p is b:
                    continue
                check_complex(lambda p, q: ours(p, q, mode), p, q)
                p32, q32 = p.real.astype(np.float32), q.real.astype(np.float32)
                np.testing.assert_array_equal(pb.pullback(lambda p: ours(p, q32, mode), p32)[0], theirs(p32, q32, mode),
                                              strict=True)


def test_fftconvolve_broadcasting_in1_full_and_valid():
    pytest.importorskip("scipy.signal")
    from pullback.scipy import signal

    rng = np.random.default_rng(14)
    a, b = rng.normal(size=(1, 6)), rng.normal(size=(3, 4))
    for axes in (1, -1, [1]):
        for mode in ("full", "valid"):
            check(lambda a, b: signal.fftconvolve(a, b, mode, axes), a, b, rtol=1e-6, atol=1e-8)


def test_fftconvolve_same_with_a_broadcast_first_input():
    pytest.importorskip("scipy.signal")
    from pullback.scipy import signal

    rng = np.random.default_rng(15)
    a, b = rng.normal(size=(1, 6)), rng.normal(size=(3, 4))
    check(lambda a, b: signal.fftconvolve(a, b, "same", axes=1), a, b, rtol=1e-6, atol=1e-8)


def test_scipy_functions_without_a_stand_in_are_refused_by_name():
    ss = pytest.importorskip("scipy.signal")
    si = pytest.importorskip("scipy.interpolate")
    x = np.linspace(0.0, 1.0, 6)
    for fn, name in ((lambda y: ss.oaconvolve(y, x), "oaconvolve"), (lambda y: ss.convolve(y, x), "pullback.scipy.signal"),
                     (lambda y: si.interp1d(x, y)(0.3), "interp1d"), (lambda y: si.CubicSpline(x, y)(0.3), "CubicSpline")):
        with pytest.raises(TypeError, match=name):
            pb.gradient(lambda y: np.sum(fn(y)), np.sin(x))


# --- polynomials --------------------------------------------------------------------------------
def test_polyval_values_and_dtypes():
    p, x = np.array([1.0, -2.0, 0.5]), np.array([0.3, -1.2, 2.0, 0.7])
    same_as_numpy(lambda p: np.polyval(p, np.arange(3)), p)
    same_as_numpy(lambda p: np.polyval(p, np.arange(3)), p.astype(np.float32))
    same_as_numpy(lambda p: np.polyval(p, 0.5), p.astype(np.float32))
    same_as_numpy(lambda x: np.polyval(p, x), x.astype(np.float32))
    same_as_numpy(lambda x: np.polyval(p.astype(np.float16), x), x.astype(np.float16))
    same_as_numpy(lambda x: np.polyval(p, x), 0.5)
    same_as_numpy(lambda x: np.polyval(np.poly1d([1.0, 2.0, 3.0]), x), x)
    check(lambda p: np.polyval(p, x + 1j), p)
    check(lambda p, x: np.polyval(p, x.reshape(2, 2)), p, x)


@pytest.mark.filterwarnings("ignore::numpy.exceptions.RankWarning")
def test_polyfit_weights_covariance_and_too_high_a_degree():
    xs = np.linspace(0.0, 1.0, 8)
    ys = np.sin(3.0 * xs) + 0.1 * np.cos(17.0 * xs)
    w = np.linspace(1.0, 2.0, 8)
    check(lambda w: np.polyfit(xs, ys, 2, w=w, cov=True), w)
    check(lambda x: np.polyfit(x, ys, 2, cov=True), xs)
    check(lambda x: np.polyfit(x, ys, 2, full=True)[:2], xs)
    check(lambda w: np.polyfit(xs, np.stack([ys, ys ** 2], 1), 2, w=w, cov=True), w)
    check(lambda y: np.polyfit(np.arange(8), y, 2), ys)
    check(lambda y: np.polyfit(xs, y, 7), ys)  # interpolating: as many coefficients as points
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.RankWarning)
        # more coefficients than points: the minimum-norm fit, still smooth in x and y
        gradcheck(lambda y: np.sum(np.polyfit(xs, y, 9) ** 2), ys, rtol=1e-5, atol=1e-7)
        gradcheck(lambda x: np.sum(np.polyfit(x, ys, 9) ** 2), xs, rtol=1e-5, atol=1e-7)
    with pytest.warns(np.exceptions.RankWarning):  # NumPy's warning, given once by the traced call too
        pb.gradient(lambda y: np.sum(np.polyfit(xs, y, 9)), ys)
    with pytest.raises(ValueError, match="cutoff"):  # a truncating rcond is refused, with the fix
        pb.gradient(lambda y: np.sum(np.polyfit(xs, y, 5, rcond=1e-3) ** 2), ys)


def test_polyfit_second_order_in_the_weights_and_the_points():
    xs = np.linspace(0.0, 1.0, 6)
    ys = np.sin(3.0 * xs)
    second_order(lambda w: np.sum(np.polyfit(xs, ys, 2, w=w) ** 3), np.linspace(1.0, 2.0, 6))
    second_order(lambda x: np.sum(np.polyfit(x, ys, 2, cov="unscaled")[1]), xs)


def test_poly1d_arithmetic_and_the_older_functions():
    c, x = np.array([1.0, -3.0, 2.0]), np.array([0.3, -1.2, 2.0, 0.7])
    check(lambda c: (np.poly1d(c) * np.poly1d([1.0, 2.0]))(x), c)
    check(lambda c: (np.poly1d(c) ** 2 + np.poly1d([1.0, 2.0]))(x), c)
    check(lambda c: np.poly1d(c).integ(k=1.0)(x), c)
    check(lambda c: np.poly1d(c).deriv()(x), c)
    check(lambda c: np.poly1d(c).r, c)
    check(lambda c: np.poly1d(np.concatenate([[0.0], c]))(x), c)
    check(lambda p: np.polyder(p, 3), np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    check(lambda p: np.polyint(p, 2, [1.0, 2.0]), np.array([1.0, 2.0, 3.0]))
    check(lambda u: np.polydiv(u, np.array([1.0, 0.5, 2.0])), np.array([1.0, 2.0]))
    check(lambda v: np.polydiv(np.array([1.0, 2.0, 3.0, 4.0]), v), np.array([2.0, 0.5, 1.0]))
    same_as_numpy(lambda p: np.polyder(p, 5), np.array([1.0, 2.0, 3.0]))
    same_as_numpy(lambda u: np.polydiv(u, np.array([1.0, 0.5], np.float32)), np.array([1.0, 2, 3, 4], np.float32))
    same_as_numpy(np.poly, np.array([0.5, -1.0, 2.0], np.float32))
    same_as_numpy(lambda z: np.poly(z), np.array([1 + 2j, 1 - 2j]))  # conjugate pairs: a real result, no warning
    with pytest.raises(NotImplementedError, match="matrix"):
        pb.gradient(lambda r: np.sum(np.poly(r)), np.eye(2))


def test_lists_of_traced_values_are_refused_by_name():
    for fn in (lambda r: np.polyval([r, 2.0], 1.5), lambda r: np.roots([1.0, r, 2.0]), lambda r: np.interp(0.5, [0.0, 1.0], [1.0, r]),
               lambda r: np.convolve([1.0, r], [1.0, 2.0]), lambda r: np.abs(np.fft.fft([1.0, r])), lambda r: np.diff([1.0, r, 2.0]),
               lambda r: np.trapezoid([1.0, r, 2.0]), lambda r: np.gradient([1.0, r, 2.0])):
        with pytest.raises(TypeError, match="list of traced values"):
            pb.gradient(lambda r: np.sum(fn(r)), -3.0)


def test_poly_of_a_list_holding_a_traced_root_is_refused_or_right():
    try:
        (g,) = pb.gradient(lambda r: np.sum(np.poly([r, 2.0])), 3.0)
    except TypeError as error:
        assert "list of traced values" in str(error)
    else:
        assert g == pytest.approx(-1.0)  # np.poly([r, 2]) = [1, -(r + 2), 2 r]: the sum 1 - r has gradient -1


def test_roots_values_second_order_and_replay():
    p = np.poly(np.array([-1.5, 0.5, 2.0]))
    check(np.roots, p)
    check(lambda p: np.roots(p)[:2], np.array([1.0, -3.0, 2.0], np.float32), rtol=3e-3, atol=3e-4)
    check(np.roots, np.poly(np.array([1.0, 1.05, 3.0])))  # close but simple roots: large but right derivatives
    second_order(lambda p: np.sum(np.roots(p) ** 3), p)
    rng = np.random.default_rng(17)
    same_replay(np.roots, lambda: np.poly(rng.normal(size=3)))


def test_roots_at_a_repeated_root_raise_or_are_right():
    p = np.array([1.0, -2.0, 1.0])
    try:
        with np.errstate(all="ignore"):
            (g,) = pb.gradient(lambda p: np.sum(np.roots(p)), p)
    except (ValueError, NotImplementedError, ArithmeticError) as error:
        assert "roots" in str(error)
    else:
        np.testing.assert_allclose(g, [-2.0, -1.0, 0.0])  # sum of the roots is -p[1] / p[0]


def test_polyval_of_a_poly1d_point_works_or_is_refused_by_name():
    c = np.array([1.0, -3.0, 2.0])
    try:
        (g,) = pb.gradient(lambda c: np.sum(np.polyval(c, np.poly1d([1.0, 2.0])).coeffs), c)
    except (TypeError, NotImplementedError) as error:
        assert "polyval" in str(error)
    else:
        np.testing.assert_allclose(g, numerical_gradient(
            lambda c: np.sum(np.polyval(c, np.poly1d([1.0, 2.0])).coeffs), c)[0], rtol=1e-6)


def test_numpy_polynomial_package_in_x_works_and_in_coefficients_is_refused():
    P = np.polynomial.polynomial
    c, x = np.array([1.0, -2.0, 0.5]), np.array([0.3, -1.2, 2.0, 0.7])
    check(lambda x: P.polyval(x, c), x)
    check(lambda x: np.polynomial.legendre.legval(x, c), x)
    for fn in (lambda c: P.polyval(x, c), lambda c: P.polyfit(x, c[0] * x ** 2, 2), lambda c: P.polyroots(c),
               lambda c: np.polynomial.Polynomial(c)(x), lambda c: np.polynomial.Polynomial.fit(x, c[0] * x, 1).coef,
               lambda c: np.polynomial.chebyshev.chebval(x, c)):
        with pytest.raises(TypeError, match="numpy.polynomial"):
            pb.gradient(lambda c: np.sum(fn(c)), c)
    with pytest.raises(TypeError, match="numpy.polynomial.Polynomial.__call__"):
        pb.gradient(lambda x: np.sum(np.polynomial.Polynomial(c)(x)), x)


def test_polynomial_replays_equal_eager():
    rng = np.random.default_rng(18)
    same_replay(lambda y: np.polyfit(np.linspace(0.0, 1.0, 8), y, 3, cov=True), lambda: rng.normal(size=8))
    same_replay(lambda x: np.polyfit(x, np.linspace(0.0, 1.0, 8) ** 2, 2), lambda: np.sort(rng.normal(size=8)))
    same_replay(lambda u: np.polydiv(u, np.array([1.0, 0.3])), lambda: rng.normal(size=4))
    same_replay(np.poly, lambda: rng.normal(size=4))
    same_replay(lambda p: np.polyval(p, np.linspace(0.0, 1.0, 5)), lambda: rng.normal(size=4))


# --- np.interp ----------------------------------------------------------------------------------
XP, FP = np.array([0.0, 1.0, 2.5]), np.array([1.0, -1.0, 2.0])


def test_interp_at_the_knots_follows_the_documented_convention():
    # at a knot the slope of the segment to the right; at the last knot that of the last segment (as JAX's)
    for x0, slope, weights in ((0.0, -2.0, [1.0, 0.0, 0.0]), (1.0, 2.0, [0.0, 1.0, 0.0]), (2.5, 2.0, [0.0, 0.0, 1.0])):
        assert pb.gradient(lambda x: np.interp(x, XP, FP), x0)[0] == slope
        assert pb.jvp(lambda x: np.interp(x, XP, FP), (x0,), (1.0,))[1] == slope
        np.testing.assert_array_equal(pb.gradient(lambda fp: np.interp(x0, XP, fp), FP)[0], weights)
        np.testing.assert_array_equal(pb.gradient(lambda xp: np.interp(x0, xp, FP), XP)[0], -slope * np.array(weights))


def test_interp_left_right_period_and_dtypes():
    x = np.array([-1.3, 0.2, 1.7, 2.4, 3.9])
    check(lambda x, xp, fp: np.interp(x, xp, fp, left=5.0, right=-5.0), x, XP, FP)
    g = pb.gradient(lambda fp, left, right: np.sum(np.interp(x, XP, fp, left, right)), FP, 3.0, 4.0)
    assert g[1:] == (1.0, 1.0)
    for period in (5.0, -5.0):
        check(lambda x, xp, fp: np.interp(x, xp, fp, period=period), x, np.array([7.5, -5.0, 11.0, 4.0]),
              np.array([1.0, 3.0, 2.0, -1.0]))  # knots outside one period, in any order
    same_as_numpy(lambda x: np.interp(x, XP, FP, left=9.0, right=9.0, period=5.0), x)  # the period wins
    check(lambda fp: np.interp(x, XP, fp * (1 + 1j), left=1j, right=2.0), FP)
    same_as_numpy(lambda x: np.interp(x, XP, FP), x.astype(np.float32))
    same_as_numpy(lambda fp: np.interp(x, XP, fp), FP.astype(np.float32))
    same_as_numpy(lambda fp: np.interp([0.2, 1.7], [0.0, 1.0, 2.5], fp), FP)
    same_as_numpy(lambda x: np.interp(x, XP, FP), 0.5)
    check(lambda fp: np.interp(np.array([0.5, 1.0, 1.5]), np.array([0.0, 1.0, 1.0, 2.0]), fp),
          np.array([0.0, 0.0, 1.0, 1.0]))  # a step written with a repeated knot inside
    with pytest.raises(ValueError, match="at least 2"):
        pb.gradient(lambda fp: np.sum(np.interp(x, np.array([0.0]), fp)), np.array([2.0]))


def test_interp_against_jax():
    jax_numpy()
    x = np.array([0.3, 1.7, 2.2, -0.5, 3.0, 0.9])
    for f, t in ((lambda t, m: m.sum(m.interp(t, XP, FP) ** 3), x),
                 (lambda t, m: m.sum(m.interp(m.asarray(x[:3]), m.cumsum(t[:3] ** 2), FP) ** 3), np.array([0.5, 1.0, 1.1])),
                 (lambda t, m: m.sum(m.interp(m.asarray(x), XP, t, left=-1.0, right=0.5) ** 3), FP)):
        against_jax(f, t)


def test_interp_replays_equal_eager():
    rng = np.random.default_rng(19)
    same_replay(lambda x: np.interp(x, XP, FP), lambda: rng.uniform(-1.0, 3.0, 5))
    same_replay(lambda x: np.interp(x, np.array([2.5, 0.0, 1.0, 4.0]), np.array([1.0, 3.0, 2.0, -1.0]), period=5.0),
                lambda: rng.uniform(-6.0, 6.0, 5))
    same_replay(lambda xp: np.interp(np.array([0.3, 2.2, 4.6]), xp, np.array([1.0, 3.0, 2.0, -1.0]), period=5.0),
                lambda: rng.uniform(0.0, 5.0, 4))


def test_interp_forward_mode_at_infinite_points():
    # the forward rule masks the outside points: d/dfp of fp[-1] (x = inf) + the mean of fp[0], fp[1] (x = 0.5)
    _, t = pb.jvp(lambda fp: np.sum(np.interp(np.array([np.inf, 0.5]), XP, fp)), (FP,), (np.ones(3),))
    assert t == 2.0
    assert pb.gradient(lambda x: np.sum(np.interp(x, XP, FP)), np.array([np.inf, 0.5]))[0].tolist() == [0.0, -2.0]


def test_interp_gradient_at_infinite_or_far_points_is_finite():
    with np.errstate(all="ignore"):
        for x, expected in (([np.inf, 0.5], [0.5, 0.5, 1.0]), ([-np.inf, 0.5], [1.5, 0.5, 0.0])):
            (g,) = pb.gradient(lambda fp: np.sum(np.interp(np.array(x), XP, fp)), FP)
            np.testing.assert_allclose(g, expected)
        far = lambda fp: np.sum(np.interp(np.array([1e308, 0.5]), XP * 1e-10, fp))  # noqa: E731 (both beyond the knots)
        np.testing.assert_allclose(pb.gradient(far, FP)[0], numerical_gradient(far, FP)[0])
        g = pb.gradient(lambda fp, left, right: np.sum(np.interp(np.array([np.inf, -np.inf, 0.5]), XP, fp, left, right)),
                        FP, 0.0, 1.0)
        np.testing.assert_allclose(g[0], [0.5, 0.5, 0.0])


def test_interp_with_a_repeated_end_knot_has_finite_gradients():
    fp = np.array([1.0, 2.0, 3.0])
    with np.errstate(all="ignore"):
        for x, xp, expected in (([2.0, 0.5], [0.0, 1.0, 1.0], [0.5, 0.5, 1.0]),
                                ([-1.0, 0.5], [0.0, 0.0, 1.0], [1.0, 0.5, 0.5])):
            f = lambda fp: np.sum(np.interp(np.array(x), np.array(xp), fp))  # noqa: E731
            np.testing.assert_allclose(numerical_gradient(f, fp)[0], expected, atol=1e-8)
            np.testing.assert_allclose(pb.gradient(f, fp)[0], expected)


# --- np.gradient, np.diff, np.trapezoid ---------------------------------------------------------
F2 = np.random.default_rng(20).normal(size=(4, 5))
XS = np.cumsum(np.random.default_rng(21).uniform(0.3, 1.0, 5))
YS = np.cumsum(np.random.default_rng(22).uniform(0.3, 1.0, 4))
UNIFORM = np.arange(5) * 0.5
F3 = np.random.default_rng(28).normal(size=(3, 4, 5))

CASES = {
    "gradient default": (lambda f: np.gradient(f), (F2,)),
    "gradient two scalars": (lambda f: np.gradient(f, 0.3, 2.0), (F2,)),
    "gradient coordinates": (lambda f: np.gradient(f, YS, XS), (F2,)),
    "gradient traced coordinates": (lambda y, x: np.gradient(F2, y, x), (YS, XS)),
    "gradient traced coordinates edge 2": (lambda y, x: np.gradient(F2, y, x, edge_order=2), (YS, XS)),
    "gradient uniform coordinates": (lambda f: np.gradient(f, UNIFORM, axis=1), (F2,)),
    "gradient traced uniform coordinates": (lambda u: np.gradient(F2, u, axis=1), (UNIFORM,)),
    "gradient uniform coordinates edge 2": (lambda f: np.gradient(f, UNIFORM, axis=-1, edge_order=2), (F2,)),
    "gradient integer coordinates": (lambda f: np.gradient(f, np.arange(5), axis=-1), (F2,)),
    "gradient axis tuple": (lambda f: np.gradient(f, 0.5, XS, axis=(0, -1)), (F2,)),
    "gradient axis tuple reversed": (lambda f: np.gradient(f, XS, 0.5, axis=(-1, 0)), (F2,)),
    "gradient traced spacing edge 2": (lambda h: np.gradient(F2, h, edge_order=2), (0.7,)),
    "gradient float32 coordinates float64": (lambda f: np.gradient(f, YS, XS), (F2.astype(np.float32),)),
    "gradient strided": (lambda f: np.gradient(f[::-1, ::2], 0.5), (F2,)),
    "gradient complex": (lambda re, im: np.gradient(re + 1j * im, XS, axis=1, edge_order=2), (F2, F2[::-1])),
    "diff n 2": (lambda a: np.diff(a, 2), (F2,)),
    "diff n 3 axis 0": (lambda a: np.diff(a, 3, axis=0), (F2,)),
    "diff n larger than the axis": (lambda a: np.diff(a, 7) + np.sum(a), (F2,)),
    "diff prepend append scalars": (lambda a: np.diff(a, prepend=0.5, append=2.0), (F2,)),
    "diff prepend append arrays": (lambda a: np.diff(a, 2, axis=0, prepend=a[:1], append=a[-2:]), (F2,)),
    "diff traced prepend": (lambda a, p: np.diff(a, prepend=p), (F2, 0.5)),
    "diff float32 integer prepend": (lambda a: np.diff(a, prepend=np.zeros((4, 1), int)), (F2.astype(np.float32),)),
    "trapezoid x": (lambda y: np.trapezoid(y, XS), (F2,)),
    "trapezoid traced x": (lambda x: np.trapezoid(F2, x), (XS,)),
    "trapezoid x axis 0": (lambda y: np.trapezoid(y, YS, axis=0), (F2,)),
    "trapezoid 2-d x": (lambda y, x: np.trapezoid(y, x, axis=0), (F2, np.cumsum(np.abs(F2) + 0.3, 0))),
    "trapezoid broadcast x": (lambda y, x: np.trapezoid(y, x, axis=-1), (F2, XS[None, :])),
    "trapezoid traced dx": (lambda y, dx: np.trapezoid(y, dx=dx), (F2, 0.3)),
    "trapezoid dx array": (lambda y, dx: np.trapezoid(y, dx=dx, axis=0), (F2, np.full((1, 5), 0.3))),
    "trapezoid float32 x float64": (lambda y: np.trapezoid(y, XS), (F2.astype(np.float32),)),
    "trapezoid integer x": (lambda y: np.trapezoid(y, np.arange(5)), (F2,)),
    "trapezoid one sample": (lambda y: np.trapezoid(y[:, :1]) + np.sum(y), (F2,)),
    "gradient 3-d middle axis edge 2": (lambda f, y: np.gradient(f, y, axis=-2, edge_order=2), (F3, YS)),
    "gradient 3-d every axis": (lambda f, y: np.gradient(f, 1.0, y, 0.5, edge_order=2), (F3, YS)),
    "trapezoid 3-d x": (lambda y, x: np.trapezoid(y, x, axis=-2), (F3, np.cumsum(np.abs(F3), 1))),
    "diff 3-d": (lambda y: np.diff(y, 2, axis=-2, prepend=0.0, append=y[:, :1]), (F3,)),
    "ediff1d ends": (lambda a: np.ediff1d(a, to_begin=[1.0], to_end=2.0), (F2,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_differences_and_integrals(name):
    fn, args = CASES[name]
    tol = {"rtol": 3e-3, "atol": 3e-4} if np.result_type(*args) == np.float32 else {}
    check(fn, *args, **tol)


def test_gradient_second_order_and_hessians_against_jax():
    x = np.random.default_rng(23).normal(size=6)
    for edge_order in (1, 2):
        second_order(lambda t: np.sum(np.gradient(np.sin(t), np.cumsum(t ** 2) + t, edge_order=edge_order) ** 2), x)
    jax_numpy()
    for f in (lambda t, m: m.trapezoid(m.sin(t) ** 2, m.cumsum(t ** 2)),
              lambda t, m: m.sum(m.gradient(m.diff(t ** 3, prepend=t[:1]) * t) ** 3)):
        against_jax(f, x)


def test_differences_replays_equal_eager():
    rng = np.random.default_rng(24)
    same_replay(lambda f: np.gradient(f, UNIFORM, axis=-1, edge_order=2), lambda: rng.normal(size=(3, 5)))
    same_replay(lambda f: np.gradient(f, 0.3, edge_order=2), lambda: rng.normal(size=(3, 5)))
    same_replay(lambda f: np.gradient(f, np.array([0.0, 0.3, 1.0, 1.2, 2.0]), axis=-1), lambda: rng.normal(size=(3, 5)))
    same_replay(lambda x: np.gradient(np.sin(x), x), lambda: np.cumsum(rng.uniform(0.3, 1.0, 6)))
    same_replay(lambda y: np.trapezoid(y, np.array([0.0, 0.3, 1.0, 1.2])), lambda: rng.normal(size=4))
    same_replay(lambda y: np.diff(y, 2, prepend=0.1), lambda: rng.normal(size=4))


def test_scipy_cumulative_trapezoid_and_simpson():
    pytest.importorskip("scipy.integrate")
    from pullback.scipy import integrate

    xs = np.linspace(0.0, 1.0, 6)
    y = np.random.default_rng(25).normal(size=(4, 6))
    for kwargs in ({}, {"x": xs}, {"dx": 0.3}, {"initial": 0}, {"x": xs, "initial": 0}, {"axis": 0, "initial": 0},
                   {"axis": 0, "x": np.arange(4.0) * 0.5}):
        check(lambda y: integrate.cumulative_trapezoid(y, **kwargs), y)
    check(lambda x: integrate.cumulative_trapezoid(y, x, initial=0), xs)
    check(lambda d: integrate.cumulative_trapezoid(y, dx=d), 0.3)
    check(lambda y: integrate.simpson(y, dx=0.3), y)
    check(lambda y: integrate.simpson(y[:, :5], x=xs[:5] ** 2), y)
