"""FFTs of arrays being differentiated, and the complex values they produce.

pullback's tape holds real values only. A complex array being differentiated is therefore
a `TrackedComplex`: two real arrays, its real and imaginary parts, each tracked as usual.
`np.fft.fft(x)` of a tracked real `x` returns one; arithmetic, `np.abs`, `np.real`,
`np.angle`, sums, reshapes, indexing and the FFTs themselves work on it, and everything
that leaves it as a real value (`np.abs(F) ** 2`, `np.real(np.fft.ifft(F))`,
`np.fft.irfft(F)`) is a real tracked array again. Each FFT is a real-linear map of the
parts, so its backward is the adjoint FFT with the dual normalisation, and its forward rule
is the same FFT applied to the tangent.

>>> import numpy as np, pullback as pb
>>> power = lambda x: np.sum(np.abs(np.fft.rfft(x)) ** 2)
>>> pb.gradient(power, np.array([1.0, 2.0, 3.0, 4.0]))[0]
array([12., 20., 20., 28.])
"""

import math

import numpy as np

from .. import tree
from .._errors import lost_gradient
from .._extend import primitive, rrule
from .._registry import FUNCTIONS
from .._standins import index_update
from .._tangents import Thunk
from .._values import Traced, stop_gradient
from ._register import add_tangents, composite, describe, forward_rule, linear_forward, without_gradient

_DUAL = {"backward": "forward", "ortho": "ortho", "forward": "backward"}
_SWAP = _DUAL  # hfft/ihfft use the opposite direction's scaling, which is the same map


def _norm(norm):
    norm = "backward" if norm is None else norm
    if norm not in _DUAL:
        raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or "forward".')
    return norm


def _refuse_out(name, out):
    if out is not None:
        raise TypeError(f"numpy.fft.{name}(..., out=...) is not supported on tracked values")


# --- complex values as pairs of real parts --------------------------------------------
def _is_complex_plain(v):
    return isinstance(v, (complex, np.complexfloating)) or (isinstance(v, np.ndarray) and v.dtype.kind == "c")


def _split(v):
    """(real part, imaginary part or None for zero) of any operand."""
    if type(v) is TrackedComplex:
        return v.real, v.imag
    if type(v) is complex:
        return v.real, v.imag
    if _is_complex_plain(v):
        return np.real(v), np.imag(v)
    if isinstance(v, (list, tuple)):
        return _split(np.asarray(v))
    return v, None


def _plus(x, y):
    return y if x is None else x if y is None else x + y


def _minus(x, y):
    if y is None:
        return x
    return -y if x is None else x - y


def _times(x, y):
    return None if x is None or y is None else x * y


def _make(re, im):
    """A TrackedComplex, a real value when the imaginary part is zero, or a plain complex array."""
    if im is None:
        return re
    if not isinstance(re, Traced) and not isinstance(im, Traced):
        return re + 1j * im
    shape = np.broadcast_shapes(np.shape(re), np.shape(im))
    if np.shape(re) != shape:
        re = np.broadcast_to(re, shape)
    if np.shape(im) != shape:
        im = np.broadcast_to(im, shape)
    return TrackedComplex(re, im)


@primitive
def modulus(re, im):
    """|re + i im|."""
    return np.hypot(re, im)


@rrule(modulus)
def modulus_rule(re, im):
    y = modulus(re, im)

    def back(g):
        zero = y == 0
        share = np.where(zero, 0.0, g / np.where(zero, 1.0, y))
        return Thunk(lambda: share * re), Thunk(lambda: share * im)

    return y, back


@forward_rule(modulus)
def modulus_frule(primals, tangents):
    (re, im), (t_re, t_im) = primals, tangents
    y = modulus(re, im)
    if t_re is None and t_im is None:
        return y, None
    zero = y == 0  # |z| has no derivative at 0: take 0, as the reverse rule does
    pairing = add_tangents(None if t_re is None else re * t_re, None if t_im is None else im * t_im)
    return y, np.where(zero, 0.0, pairing / np.where(zero, 1.0, y))


def _multiply(a, b):
    (ar, ai), (br, bi) = _split(a), _split(b)
    return _make(_minus(_times(ar, br), _times(ai, bi)), _plus(_times(ar, bi), _times(ai, br)))


def _divide(a, b):
    (ar, ai), (br, bi) = _split(a), _split(b)
    if bi is None:
        return _make(ar / br, None if ai is None else ai / br)
    d = br * br + bi * bi
    return _make(_plus(_times(ar, br), _times(ai, bi)) / d, _minus(_times(ai, br), _times(ar, bi)) / d)


def _matmul(a, b):
    (ar, ai), (br, bi) = _split(a), _split(b)
    mm = lambda x, y: None if x is None or y is None else np.matmul(x, y)  # noqa: E731
    return _make(_minus(mm(ar, br), mm(ai, bi)), _plus(mm(ar, bi), mm(ai, br)))


def _power(a, k):
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
        if k < 0:
            return _divide(1.0, _power(a, -k))
        result = None
        while k:
            if k & 1:
                result = a if result is None else _multiply(result, a)
            k >>= 1
            if k:
                a = _multiply(a, a)
        return _make(np.ones(np.shape(a)), None) if result is None else result
    raise TypeError("Powers of complex values being differentiated take a plain integer exponent; "
                    "write other powers with np.exp and np.log.")


def _unary(name, z):
    re, im = _split(z)
    if name == "negative":
        return _make(-re, -im)
    if name == "positive":
        return z
    if name == "conjugate":
        return _make(re, -im)
    if name == "absolute":
        return modulus(re, im)
    if name == "square":
        return _multiply(z, z)
    if name == "exp":
        scale = np.exp(re)
        return _make(scale * np.cos(im), scale * np.sin(im))
    if name == "log":
        return _make(np.log(modulus(re, im)), np.arctan2(im, re))
    raise AssertionError(name)


_BINARY = {np.add: lambda a, b: _make(_plus(_split(a)[0], _split(b)[0]), _plus(_split(a)[1], _split(b)[1])),
           np.subtract: lambda a, b: _make(_minus(_split(a)[0], _split(b)[0]), _minus(_split(a)[1], _split(b)[1])),
           np.multiply: _multiply, np.true_divide: _divide, np.matmul: _matmul,
           np.power: lambda a, k: _power(a, stop_gradient(k))}
_UNARY = {np.negative: "negative", np.positive: "positive", np.conjugate: "conjugate", np.absolute: "absolute",
          np.square: "square", np.exp: "exp", np.log: "log"}

# Functions that act on the real and imaginary parts separately, with the same arguments.
_PARTWISE = {np.reshape, np.transpose, np.swapaxes, np.moveaxis, np.squeeze, np.expand_dims, np.ravel,
             np.flip, np.roll, np.copy, np.broadcast_to, np.take, np.diagonal, np.sum, np.mean, np.cumsum,
             np.trace, np.tile, np.repeat}


@primitive
def component(parts, k):
    """`parts[..., k]`: the real (k = 0) or imaginary (k = 1) part of a complex value stored as stacked parts."""
    return parts[..., k]


@rrule(component)
def _component_rule(parts, k):
    y = component(parts, k)

    def back(g):
        zero = np.zeros(np.shape(stop_gradient(g)), dtype=np.result_type(stop_gradient(g)))
        return (np.stack([g, zero] if k == 0 else [zero, g], axis=-1), None)

    return y, back


linear_forward(component, lambda t, k: t[..., k])


def _from_parts(parts):
    """The complex value whose real and imaginary parts are stacked on the last axis of `parts`."""
    if not isinstance(parts, Traced):
        return parts[..., 0] + 1j * parts[..., 1]
    return TrackedComplex(component(parts, 0), component(parts, 1))


def _to_parts(a):
    """Real and imaginary parts of `a` stacked on a new last axis."""
    re, im = _split(a)
    if im is None:
        plain = stop_gradient(re)
        im = np.zeros(np.shape(plain), dtype=np.result_type(plain, np.float16))
    return np.stack([re, im], axis=-1)


class TrackedComplex:
    """A complex array being differentiated, held as its real and imaginary parts.

    Returned by the FFTs of tracked values. Supported: `+ - * / @`, integer powers,
    `np.abs`, `np.conj`, `np.square`, `np.exp`, `np.log`, `np.real`, `np.imag`, `np.angle`,
    `.real`, `.imag`, indexing (also assignment), sums, means, reshapes and the other
    functions in `_PARTWISE`, and every `np.fft` function. Put the complex value first
    when combining it with a tracked real array (`F * w`, not `w * F`).

    >>> import numpy as np, pullback as pb
    >>> def f(x):
    ...     F = np.fft.fft(x)
    ...     return np.sum(np.real(F * F.conj()))
    >>> pb.gradient(f, np.array([1.0, 2.0]))[0]
    array([4., 8.])
    """

    __slots__ = ("real", "imag")
    __array_priority__ = 200.0
    __hash__ = None

    def __init__(self, real, imag):
        self.real = real
        self.imag = imag

    def __stop_gradient__(self):
        return stop_gradient(self.real) + 1j * stop_gradient(self.imag)

    # --- array attributes ------------------------------------------------------------
    @property
    def shape(self):
        return np.shape(self.real)

    @property
    def ndim(self):
        return np.ndim(self.real)

    @property
    def size(self):
        return np.size(self.real)

    @property
    def dtype(self):
        return np.result_type(stop_gradient(self.real), stop_gradient(self.imag), np.complex64)

    @property
    def T(self):
        return _partwise(np.transpose, (self,), {})

    def __len__(self):
        return len(self.real)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        return f"TrackedComplex(real={self.real!r}, imag={self.imag!r})"

    # --- refusing to lose the gradient ----------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise lost_gradient("convert it to a plain NumPy array")

    def __complex__(self):
        raise lost_gradient("convert it to a Python complex")

    def __float__(self):
        raise lost_gradient("convert it to a Python float")

    def __bool__(self):
        raise TypeError("The truth value of a complex value being differentiated is not defined.")

    def _compare(self, other):
        raise TypeError("Complex values being differentiated cannot be compared; compare np.abs(z), z.real or "
                        "z.imag instead.")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _compare

    # --- methods ---------------------------------------------------------------------
    def conj(self):
        return _make(self.real, -self.imag)

    conjugate = conj

    def sum(self, *args, **kwargs):
        return _partwise(np.sum, (self,) + args, kwargs)

    def mean(self, *args, **kwargs):
        return _partwise(np.mean, (self,) + args, kwargs)

    def reshape(self, *shape, **kwargs):
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        return _partwise(np.reshape, (self, shape), kwargs)

    def transpose(self, *axes):
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = axes[0]
        return _partwise(np.transpose, (self, axes or None), {})

    def ravel(self):
        return _partwise(np.ravel, (self,), {})

    flatten = ravel

    def copy(self):
        return _partwise(np.copy, (self,), {})

    def __getitem__(self, index):
        index = tuple(stop_gradient(i) for i in index) if type(index) is tuple else stop_gradient(index)
        return _make(self.real[index], self.imag[index])

    def __setitem__(self, index, value):
        index = tuple(stop_gradient(i) for i in index) if type(index) is tuple else stop_gradient(index)
        re, im = _split(value)
        self.real = _write(self.real, index, re)
        self.imag = _write(self.imag, index, 0.0 if im is None else im)

    # --- operators -------------------------------------------------------------------
    def __add__(self, other):
        return _BINARY[np.add](self, other)

    def __radd__(self, other):
        return _BINARY[np.add](other, self)

    def __sub__(self, other):
        return _BINARY[np.subtract](self, other)

    def __rsub__(self, other):
        return _BINARY[np.subtract](other, self)

    def __mul__(self, other):
        return _multiply(self, other)

    def __rmul__(self, other):
        return _multiply(other, self)

    def __truediv__(self, other):
        return _divide(self, other)

    def __rtruediv__(self, other):
        return _divide(other, self)

    def __matmul__(self, other):
        return _matmul(self, other)

    def __rmatmul__(self, other):
        return _matmul(other, self)

    def __pow__(self, k):
        return _power(self, stop_gradient(k))

    def __neg__(self):
        return _unary("negative", self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _unary("absolute", self)

    # --- NumPy protocols -------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and not kwargs:
            if ufunc in _UNARY and len(inputs) == 1:
                return _unary(_UNARY[ufunc], inputs[0])
            if ufunc in _BINARY and len(inputs) == 2:
                return _BINARY[ufunc](*inputs)
        raise _unsupported(f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}"), kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func in _PARTWISE:
            return _partwise(func, args, kwargs)
        handler = _FUNCTIONS.get(func)
        if handler is None:
            raise _unsupported(f"{func.__module__}.{func.__name__}", kwargs)
        return handler(*args, **kwargs)


def _unsupported(name, kwargs):
    extra = " with keyword arguments" if kwargs else ""
    return TypeError(
        f"{name}{extra} is not supported on complex values being differentiated. pullback holds them as "
        "real and imaginary parts (z.real, z.imag); write the computation with those, or see "
        "pullback.rules.fft.TrackedComplex for what is supported."
    )


def _partwise(func, args, kwargs):
    re, im = _split(args[0])
    rest = args[1:]
    return _make(func(re, *rest, **kwargs), None if im is None else func(im, *rest, **kwargs))


def _write(part, index, value):
    if isinstance(part, Traced):
        part[index] = value
        return part
    if isinstance(value, Traced):
        return FUNCTIONS[index_update](part, index, value)
    part = np.array(part, copy=True)
    part[index] = value
    return part


def _join(func):
    def run(arrays, *args, **kwargs):
        parts = [_split(a) for a in arrays]
        re = func([p[0] for p in parts], *args, **kwargs)
        if all(p[1] is None for p in parts):
            return re
        ims = [np.zeros(np.shape(stop_gradient(r))) if i is None else i for r, i in parts]
        return _make(re, func(ims, *args, **kwargs))

    return run


_FUNCTIONS = {
    np.real: lambda z: _split(z)[0],
    np.imag: lambda z: _split(z)[1],
    np.angle: lambda z, deg=False: np.arctan2(z.imag, z.real) * (180.0 / math.pi if deg else 1.0),
    np.concatenate: _join(np.concatenate),
    np.stack: _join(np.stack),
    np.shape: lambda z: z.shape,
    np.ndim: lambda z: z.ndim,
    np.size: lambda z, axis=None: z.size if axis is None else z.shape[axis],
    np.iscomplexobj: lambda z: True,
    np.isrealobj: lambda z: False,
}
# `pb.pullback` hands back a function's result with the tracking removed: a plain complex array.
tree.register(TrackedComplex, lambda z: {"real": z.real, "imag": z.imag},
              lambda z, kids: _make(kids["real"], kids["imag"]))
describe(TrackedComplex, "real and imaginary parts", kind="composite", notes="""The result of an FFT of a tracked array.
         Supports + - * / @, integer powers, abs, conj, square, exp, log, real, imag, angle,
         indexing and assignment, sums, means, reshapes and other structural functions, and
         the FFTs. Comparisons and other functions are refused with a clear error. Put it
         first when combining with a tracked real array (F * w, not w * F).""",
         name="complex values (TrackedComplex)")


# --- real parts of real arrays ----------------------------------------------------------
@composite(np.real, args="val", notes="Of a real tracked array: the array itself.")
def real(val):
    return val


@composite(np.imag, args="val", notes="Of a real tracked array: plain zeros.")
def imag(val):
    plain = stop_gradient(val)
    return np.zeros(np.shape(plain), dtype=np.result_type(plain))


without_gradient(np.angle, notes="Of a real array: 0 or pi, no gradient.")


# --- the transforms -------------------------------------------------------------------
def _fit_length(x, axis, length):
    """Crop or zero-pad `x` along `axis` to `length`."""
    have = np.shape(x)[axis]
    if have == length:
        return x
    if have > length:
        return x[(slice(None),) * axis + (slice(0, length),)]
    widths = [(0, 0)] * np.ndim(x)
    widths[axis] = (0, length - have)
    return np.pad(x, widths)


def _complex_of(parts):
    plain = parts[..., 0]
    z = plain.astype(np.result_type(plain, np.complex64))
    z.imag = parts[..., 1]
    return z


def _stacked(z):
    return np.stack([z.real, z.imag], axis=-1)


@primitive
def c2c(parts, axis, n, norm, inverse):
    """FFT (or inverse) along `axis` of the complex array stored as stacked real parts."""
    transform = np.fft.ifft if inverse else np.fft.fft
    return _stacked(transform(_complex_of(parts), n, axis, norm))


@rrule(c2c)
def c2c_rule(parts, axis, n, norm, inverse):
    y = c2c(parts, axis, n, norm, inverse)
    length = np.shape(parts)[axis]

    def back(g):
        # The adjoint of a DFT is the inverse DFT with the dual normalisation.
        return _fit_length(c2c(g, axis, None, _DUAL[norm], not inverse), axis, length), None, None, None, None

    return y, back


linear_forward(c2c)


@primitive
def r2c(x, axis, n, norm):
    """`np.fft.rfft` along `axis`, as stacked real and imaginary parts."""
    return _stacked(np.fft.rfft(x, n, axis, norm))


@rrule(r2c)
def r2c_rule(x, axis, n, norm):
    y = r2c(x, axis, n, norm)
    length = np.shape(x)[axis]
    size = length if n is None else n

    def back(g):
        # rfft keeps the first size//2 + 1 outputs of a full DFT: pad them back, apply the adjoint.
        full = c2c(_fit_length(g, axis, size), axis, None, _DUAL[norm], True)
        return _fit_length(full[..., 0], axis, length), None, None, None

    return y, back


linear_forward(r2c)


@primitive
def c2r(parts, axis, n, norm):
    """`np.fft.irfft` along `axis` of the complex array stored as stacked real parts."""
    return np.fft.irfft(_complex_of(parts), n, axis, norm)


@rrule(c2r)
def c2r_rule(parts, axis, n, norm):
    y = c2r(parts, axis, n, norm)
    length = np.shape(parts)[axis]
    size = 2 * (length - 1) if n is None else n

    def back(g):
        # Output k of rfft pairs with two inputs of the Hermitian spectrum (k and size-k), except
        # k = 0 and, for even size, the Nyquist term: those weigh 1, the rest 2.
        spectrum = r2c(g, axis, None, _DUAL[norm])
        weights = np.full(size // 2 + 1, 2.0)
        weights[0] = 1.0
        if size % 2 == 0:
            weights[-1] = 1.0
        shape = [1] * np.ndim(spectrum)
        shape[axis] = size // 2 + 1
        weights = weights.reshape(shape).astype(np.result_type(stop_gradient(g)))
        return _fit_length(spectrum * weights, axis, length), None, None, None

    return y, back


linear_forward(c2r)


def _axis(a, axis):
    ndim = np.ndim(a.real if type(a) is TrackedComplex else a)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim


def _shape_and_axes(a, s, axes, inverse_real=False):
    """NumPy's defaults for the `s` and `axes` arguments of the n-dimensional transforms."""
    shape = np.shape(a.real if type(a) is TrackedComplex else a)
    if axes is None:
        axes = list(range(len(shape))) if s is None else list(range(-len(s), 0))
    axes = [_axis(a, ax) for ax in axes]
    if s is None:
        s = [shape[ax] for ax in axes]
        if inverse_real:
            s[-1] = 2 * (shape[axes[-1]] - 1)
    s = list(s)
    if len(s) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    return [shape[ax] if n == -1 else n for n, ax in zip(s, axes)], axes


def _real_input(name, a):
    if type(a) is TrackedComplex:
        raise TypeError(f"numpy.fft.{name} takes real input; take np.real(...) first or use np.fft.fft.")
    return a


_FFT_NOTES = """Input real or complex (TrackedComplex); returns a TrackedComplex. The backward is
      the adjoint transform with the dual `norm`."""


@composite(np.fft.fft, args="a", notes=_FFT_NOTES)
def fft(a, n=None, axis=-1, norm=None, out=None):
    _refuse_out("fft", out)
    return _from_parts(c2c(_to_parts(a), _axis(a, axis), n, _norm(norm), False))


@composite(np.fft.ifft, args="a", notes=_FFT_NOTES)
def ifft(a, n=None, axis=-1, norm=None, out=None):
    _refuse_out("ifft", out)
    return _from_parts(c2c(_to_parts(a), _axis(a, axis), n, _norm(norm), True))


def _nd(a, s, axes, norm, inverse):
    s, axes = _shape_and_axes(a, s, axes)
    parts = _to_parts(a)
    for n, ax in reversed(list(zip(s, axes))):
        parts = c2c(parts, ax, n, _norm(norm), inverse)
    return _from_parts(parts)


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


@composite(np.fft.rfft, args="a", notes="Real input; returns a TrackedComplex.")
def rfft(a, n=None, axis=-1, norm=None, out=None):
    _refuse_out("rfft", out)
    a = _real_input("rfft", a)
    return _from_parts(r2c(a, _axis(a, axis), n, _norm(norm)))


@composite(np.fft.irfft, args="a", notes="""Input real or complex; returns a real tracked array. As
      in NumPy, the imaginary parts of the zero and Nyquist terms do not affect the result, so
      their gradient is zero.""")
def irfft(a, n=None, axis=-1, norm=None, out=None):
    _refuse_out("irfft", out)
    return c2r(_to_parts(a), _axis(a, axis), n, _norm(norm))


@composite(np.fft.rfftn, args="a", notes="Real input; rfft on the last axis, then fft on the others.")
def rfftn(a, s=None, axes=None, norm=None, out=None):
    _refuse_out("rfftn", out)
    a = _real_input("rfftn", a)
    s, axes = _shape_and_axes(a, s, axes)
    parts = r2c(a, axes[-1], s[-1], _norm(norm))
    for n, ax in reversed(list(zip(s[:-1], axes[:-1]))):
        parts = c2c(parts, ax, n, _norm(norm), False)
    return _from_parts(parts)


@composite(np.fft.irfftn, args="a", notes="Inverse fft on all but the last axis, then irfft on it.")
def irfftn(a, s=None, axes=None, norm=None, out=None):
    _refuse_out("irfftn", out)
    s, axes = _shape_and_axes(a, s, axes, inverse_real=True)
    parts = _to_parts(a)
    for n, ax in reversed(list(zip(s[:-1], axes[:-1]))):
        parts = c2c(parts, ax, n, _norm(norm), True)
    return c2r(parts, axes[-1], s[-1], _norm(norm))


@composite(np.fft.rfft2, args="a", notes="As rfftn over the last two axes.")
def rfft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return rfftn(a, s, axes, norm, out)


@composite(np.fft.irfft2, args="a", notes="As irfftn over the last two axes.")
def irfft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return irfftn(a, s, axes, norm, out)


@composite(np.fft.hfft, args="a", notes="irfft of the conjugate, with the opposite normalisation.")
def hfft(a, n=None, axis=-1, norm=None, out=None):
    _refuse_out("hfft", out)
    re, im = _split(a)
    return irfft(_make(re, None if im is None else -im), n, axis, _SWAP[_norm(norm)])


@composite(np.fft.ihfft, args="a", notes="Conjugate of rfft, with the opposite normalisation.")
def ihfft(a, n=None, axis=-1, norm=None, out=None):
    _refuse_out("ihfft", out)
    return rfft(a, n, axis, _SWAP[_norm(norm)]).conj()


def _shift(x, axes, sign):
    shape = np.shape(x.real if type(x) is TrackedComplex else x)
    if axes is None:
        axes = tuple(range(len(shape)))
    if isinstance(axes, (int, np.integer)):
        shift = sign * (shape[axes] // 2)
    else:
        shift = tuple(sign * (shape[ax] // 2) for ax in axes)
    if type(x) is TrackedComplex:
        return _partwise(np.roll, (x, shift, axes), {})
    return np.roll(x, shift, axes)


@composite(np.fft.fftshift, args="x", notes="np.roll by half of each axis.")
def fftshift(x, axes=None):
    return _shift(x, axes, 1)


@composite(np.fft.ifftshift, args="x", notes="np.roll back by half of each axis.")
def ifftshift(x, axes=None):
    return _shift(x, axes, -1)


for _fn in (fft, ifft, fftn, ifftn, fft2, ifft2, rfft, irfft, rfftn, irfftn, rfft2, irfft2, hfft, ihfft,
            fftshift, ifftshift):
    _FUNCTIONS[getattr(np.fft, _fn.__name__)] = _fn
