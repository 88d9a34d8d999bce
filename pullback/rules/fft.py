"""The FFTs of `numpy.fft`, in both modes, on real and complex arrays.

Results are ordinary complex arrays with ordinary complex cotangents (a cotangent `c` of `z`
stands for `dz -> Re(c * dz)`, see docs/conventions.md). Three primitives do the work:

- `dft` (fft and ifft along one axis) is complex-linear, and a DFT matrix is symmetric, so its
  reverse rule is the same transform of the cotangent (cropped or zero-padded back to the
  input's length when `n` changed it);
- `real_dft` (rfft) keeps the first n//2 + 1 outputs of a DFT of a real input: its reverse rule
  zero-pads the cotangent to n, transforms it and keeps the real part;
- `real_idft` (irfft) reads a half spectrum as a Hermitian one: each term between the zero and
  the Nyquist term appears twice (itself and its conjugate), so its reverse rule is the
  inverse transform of the cotangent weighted 1, 2, ..., 2, 1. As in NumPy, the imaginary
  parts of the zero and Nyquist terms do not affect the result; their gradient is zero.

Every forward rule applies the same transform to the tangent. The n-dimensional transforms,
hfft and ihfft are written, as NumPy writes them, with these.

>>> import numpy as np, pullback as pb
>>> power = lambda x: np.sum(np.abs(np.fft.rfft(x)) ** 2)
>>> pb.gradient(power, np.array([1.0, 2.0, 3.0, 4.0]))[0]
array([12., 20., 20., 28.])
"""

import warnings

import numpy as np

from .._arrays import like_input
from .._extend import primitive, rrule
from ._register import composite, linear_forward

_SWAP = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def _norm(norm):
    norm = "backward" if norm is None else norm
    if norm not in _SWAP:
        raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or "forward".')
    return norm


def _refuse_out(name, out):
    if out is not None:
        raise TypeError(f"numpy.fft.{name}: out= is not supported on tracked values; drop out= and assign the "
                        f"result instead (y = np.fft.{name}(...)), or write it into an existing array "
                        f"(z[...] = np.fft.{name}(...)).")


def _fit_length(x, axis, length):
    """Crop or zero-pad `x` along `axis` to `length`."""
    axis = axis % np.ndim(x)
    have = np.shape(x)[axis]
    if have == length:
        return x
    if have > length:
        return x[(slice(None),) * axis + (slice(0, length),)]
    widths = [(0, 0)] * np.ndim(x)
    widths[axis] = (0, length - have)
    return np.pad(x, widths)


# --- the three primitives -------------------------------------------------------------
@primitive
def dft(a, n, axis, norm, inverse):
    """`np.fft.fft` (or `ifft` when `inverse`) of `a` along `axis`."""
    return (np.fft.ifft if inverse else np.fft.fft)(a, n, axis, norm)


@rrule(dft)
def _dft_rule(a, n, axis, norm, inverse):
    y = dft(a, n, axis, norm, inverse)
    length = np.shape(a)[axis]

    def back(g):
        return _fit_length(dft(g, None, axis, norm, inverse), axis, length), None, None, None, None

    return y, back


linear_forward(dft)


@primitive
def real_dft(x, n, axis, norm):
    """`np.fft.rfft` of real `x` along `axis`."""
    return np.fft.rfft(x, n, axis, norm)


@rrule(real_dft)
def _real_dft_rule(x, n, axis, norm):
    y = real_dft(x, n, axis, norm)
    length = np.shape(x)[axis]
    size = length if n is None else n

    def back(g):
        full = dft(g, size, axis, norm, False)  # the FFT pads g to size (np.pad first would split a Dask chunk)
        return np.real(_fit_length(full, axis, length)), None, None, None

    return y, back


linear_forward(real_dft)


@primitive
def real_idft(a, n, axis, norm):
    """`np.fft.irfft` of the half spectrum `a` along `axis`."""
    return np.fft.irfft(a, n, axis, norm)


@rrule(real_idft)
def _real_idft_rule(a, n, axis, norm):
    y = real_idft(a, n, axis, norm)
    length = np.shape(a)[axis]
    size = 2 * (length - 1) if n is None else n

    def back(g):
        half = _fit_length(dft(g, None, axis, norm, True), axis, size // 2 + 1)
        weights = np.full(size // 2 + 1, 2.0)
        weights[0] = 1.0
        if size % 2 == 0:
            weights[-1] = 1.0
        weights = like_input(weights, half)  # on the cotangent's device
        shape = [1] * np.ndim(half)
        shape[axis] = size // 2 + 1
        return _fit_length(half * weights.reshape(shape), axis, length), None, None, None

    return y, back


linear_forward(real_idft)


# --- NumPy's functions ----------------------------------------------------------------
def _cook(a, s, axes, inverse_real=False):
    """NumPy's defaults for the `s` and `axes` arguments of the n-dimensional transforms."""
    shape = np.shape(a)
    given = s is not None
    if s is None:
        s = list(shape) if axes is None else [shape[ax] for ax in axes]
    s = list(s)
    if axes is None:
        if given:  # NumPy's deprecation warnings, as its own _cook_nd_args gives them
            warnings.warn("`axes` should not be `None` if `s` is not `None` (Deprecated in NumPy 2.0). In a future "
                          "version of NumPy, this will raise an error and `s[i]` will correspond to the size along "
                          "the transformed axis specified by `axes[i]`. To retain current behaviour, pass a sequence "
                          "[0, ..., k-1] to `axes` for an array of dimension k.", DeprecationWarning, stacklevel=4)
        axes = list(range(-len(s), 0))
    axes = list(axes)
    if len(s) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    if inverse_real and not given:
        s[-1] = (shape[axes[-1]] - 1) * 2
    if None in s:
        warnings.warn("Passing an array containing `None` values to `s` is deprecated in NumPy 2.0 and will raise an "
                      "error in a future version of NumPy. To use the default behaviour of the corresponding 1-D "
                      "transform, pass the value matching the default for its `n` parameter. To use the default "
                      "behaviour for every axis, the `s` argument can be omitted.", DeprecationWarning, stacklevel=4)
    return [shape[ax] if n == -1 else n for n, ax in zip(s, axes)], axes


_FFT_NOTES = """Real or complex input; the backward is the same transform of the cotangent (a
      DFT matrix is symmetric), cropped or padded back when `n` / `s` changed the length."""


@composite(np.fft.fft, args="a", notes=_FFT_NOTES)
def fft(a, n=None, axis=-1, norm=None, out=None):
    _refuse_out("fft", out)
    return dft(a, n, axis, _norm(norm), False)


@composite(np.fft.ifft, args="a", notes=_FFT_NOTES)
def ifft(a, n=None, axis=-1, norm=None, out=None):
    _refuse_out("ifft", out)
    return dft(a, n, axis, _norm(norm), True)


def _nd(a, s, axes, norm, inverse):
    s, axes = _cook(a, s, axes)
    for n, ax in reversed(list(zip(s, axes))):
        a = dft(a, n, ax, _norm(norm), inverse)
    return a


@composite(np.fft.fftn, args="a", notes=_FFT_NOTES)
def fftn(a, s=None, axes=None, norm=None, out=None):
    _refuse_out("fftn", out)
    return _nd(a, s, axes, norm, False)


@composite(np.fft.ifftn, args="a", notes=_FFT_NOTES)
def ifftn(a, s=None, axes=None, norm=None, out=None):
    _refuse_out("ifftn", out)
    return _nd(a, s, axes, norm, True)


@composite(np.fft.fft2, args="a", notes=_FFT_NOTES)
def fft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    _refuse_out("fft2", out)
    return _nd(a, s, axes, norm, False)


@composite(np.fft.ifft2, args="a", notes=_FFT_NOTES)
def ifft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    _refuse_out("ifft2", out)
    return _nd(a, s, axes, norm, True)


@composite(np.fft.rfft, args="a", notes="Real input (complex input is refused, as by NumPy).")
def rfft(a, n=None, axis=-1, norm=None, out=None):
    _refuse_out("rfft", out)
    return real_dft(a, n, axis, _norm(norm))


@composite(np.fft.irfft, args="a", notes="""Real or complex input. As in NumPy, the imaginary parts
      of the zero and Nyquist terms do not affect the result, so their gradient is zero.""")
def irfft(a, n=None, axis=-1, norm=None, out=None):
    _refuse_out("irfft", out)
    return real_idft(a, n, axis, _norm(norm))


@composite(np.fft.rfftn, args="a", notes="Real input; rfft on the last axis, then fft on the others.")
def rfftn(a, s=None, axes=None, norm=None, out=None):
    _refuse_out("rfftn", out)
    s, axes = _cook(a, s, axes)
    a = real_dft(a, s[-1], axes[-1], _norm(norm))
    for ii in range(len(axes) - 2, -1, -1):
        a = dft(a, s[ii], axes[ii], _norm(norm), False)
    return a


@composite(np.fft.irfftn, args="a", notes="Inverse fft on all but the last axis, then irfft on it.")
def irfftn(a, s=None, axes=None, norm=None, out=None):
    _refuse_out("irfftn", out)
    s, axes = _cook(a, s, axes, inverse_real=True)
    for ii in range(len(axes) - 1):
        a = dft(a, s[ii], axes[ii], _norm(norm), True)
    return real_idft(a, s[-1], axes[-1], _norm(norm))


@composite(np.fft.rfft2, args="a", notes="As rfftn over the last two axes.")
def rfft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return rfftn(a, s, axes, norm, out)


@composite(np.fft.irfft2, args="a", notes="As irfftn over the last two axes.")
def irfft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return irfftn(a, s, axes, norm, out)


@composite(np.fft.hfft, args="a", notes="irfft of the conjugate, with the opposite normalisation.")
def hfft(a, n=None, axis=-1, norm=None, out=None):
    _refuse_out("hfft", out)
    return real_idft(np.conjugate(a), n, axis, _SWAP[_norm(norm)])


@composite(np.fft.ihfft, args="a", notes="Conjugate of rfft, with the opposite normalisation.")
def ihfft(a, n=None, axis=-1, norm=None, out=None):
    _refuse_out("ihfft", out)
    return np.conjugate(real_dft(a, n, axis, _SWAP[_norm(norm)]))


def _shift(x, axes, sign):
    shape = np.shape(x)
    if axes is None:
        axes = tuple(range(len(shape)))
    if isinstance(axes, (int, np.integer)):
        shift = sign * (shape[axes] // 2)
    else:
        shift = tuple(sign * (shape[ax] // 2) for ax in axes)
    return np.roll(x, shift, axes)


@composite(np.fft.fftshift, args="x", notes="np.roll by half of each axis.")
def fftshift(x, axes=None):
    return _shift(x, axes, 1)


@composite(np.fft.ifftshift, args="x", notes="np.roll back by half of each axis.")
def ifftshift(x, axes=None):
    return _shift(x, axes, -1)
