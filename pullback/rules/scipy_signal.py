"""Differentiable versions of `scipy.signal`'s convolve, correlate, fftconvolve and lfilter,
public as `pullback.scipy.signal`. SciPy's own convert their inputs with `np.asarray`, so calls
to them never reach pullback; these have the same signatures, call SciPy itself for the value,
and import it only when called.

Convolution is bilinear: the cotangent of one input is the full convolution of the output's
cotangent (zero-padded to the full output) with the other input reversed, cut to the input's
extent. `lfilter` is linear in x and in its initial state zi: the adjoint of a causal filter is
the same filter run backwards in time, and the derivatives in the coefficients follow from the
difference equation  Σ_k a[k] y[n-k] = Σ_k b[k] x[n-k].

>>> import numpy as np, pullback as pb
>>> from pullback.scipy.signal import convolve
>>> pb.gradient(lambda a: np.sum(convolve(a, np.array([1.0, 2.0]))), np.array([1.0, 1.0, 1.0]))[0]
array([3., 3., 3.])
"""

import numpy as np

from .._extend import frule, primitive, rrule
from .._tangents import Thunk
from .._values import Traced, stop_gradient
from ._register import add_tangents, describe
from .special import RecordedModule


def _signal():
    """`scipy.signal`, its functions recorded whole inside `pb.jit`."""
    import scipy.signal

    return RecordedModule(scipy.signal)


def _any_tracked(*values):
    return any(isinstance(v, Traced) for v in values)


# --- convolution ---------------------------------------------------------------------------
@primitive
def convolution(a, b, mode, axes, kind):
    """`scipy.signal.<kind>(a, b, mode, ...)`: kind is "direct", "fft" or "auto" (convolve's method),
    "correlate:<method>" (correlate), or "fftconvolve" (over `axes`, None for all)."""
    signal = _signal()
    if kind == "fftconvolve":
        return signal.fftconvolve(a, b, mode, axes)
    if kind.startswith("correlate:"):
        return signal.correlate(a, b, mode, kind.partition(":")[2])
    return signal.convolve(a, b, mode, kind)


def _axes_of(a, axes):
    ndim = np.ndim(stop_gradient(a))
    return tuple(range(ndim)) if axes is None else axes


def _window(mode, n_in, n_other):
    """Where the output of `mode` lies in the full convolution, along one axis: (start, length)."""
    if mode == "full":
        return 0, n_in + n_other - 1
    if mode == "same":
        return (n_other - 1) // 2, n_in
    return min(n_in, n_other) - 1, abs(n_in - n_other) + 1


def _cut(full, axes, windows):
    index = [slice(None)] * np.ndim(stop_gradient(full))
    for axis, (start, length) in zip(axes, windows):
        index[axis] = slice(start, start + length)
    return full[tuple(index)]


def _convolution_kind(kind):
    """The kind that computes a plain convolution the way `kind` does (correlate's method, or fftconvolve)."""
    return kind.partition(":")[2] if kind.startswith("correlate:") else kind


def _input_cotangent(g, a, b, mode, axes, kind, first):
    """The cotangent of `a` (first) or `b` in y = conv(a, b)[mode window], from the output's cotangent g."""
    axes = _axes_of(a, axes)
    shape_a, shape_b = np.shape(stop_gradient(a)), np.shape(stop_gradient(b))
    na, nb = [shape_a[k] for k in axes], [shape_b[k] for k in axes]
    windows = [_window(mode, p, q) for p, q in zip(na, nb)]
    pad = [(0, 0)] * np.ndim(stop_gradient(g))
    for axis, (start, length), p, q in zip(axes, windows, na, nb):
        pad[axis] = (start, p + q - 1 - start - length)
    if mode == "same":  # SciPy crops the axes the inputs broadcast along too, centred, to the first input's length
        for axis, length in enumerate(np.shape(stop_gradient(g))):
            full = max(shape_a[axis], shape_b[axis])
            if axis not in axes and length != full:
                pad[axis] = ((full - length) // 2, full - length - (full - length) // 2)
    full_g = np.pad(g, pad)
    other, own, n_other = (b, na, nb) if first else (a, nb, na)
    reversed_other = np.flip(other, axis=axes)
    kind = _convolution_kind(kind)
    spread = convolution(full_g, reversed_other, "full", None if kind != "fftconvolve" else axes, kind)
    return _cut(spread, axes, [(m - 1, n) for n, m in zip(own, n_other)])


@rrule(convolution)
def convolution_rule(a, b, mode, axes, kind):
    y = convolution(a, b, mode, axes, kind)
    correlate = kind.startswith("correlate:")
    # correlate(a, b) = convolve(a, conj(flip(b))): linear in conj(b), so b's cotangent is conjugated back
    plain_b = np.conj(np.flip(b, axis=_axes_of(b, axes))) if correlate else b

    def back(g):
        ga = Thunk(lambda: _input_cotangent(g, a, plain_b, mode, axes, kind, True))

        def gb():
            grad = _input_cotangent(g, a, plain_b, mode, axes, kind, False)
            return np.conj(np.flip(grad, axis=_axes_of(b, axes))) if correlate else grad

        return ga, Thunk(gb), None, None, None

    return y, back


@frule(convolution)
def convolution_frule(primals, tangents):
    (a, b, mode, axes, kind), (ta, tb) = primals, tangents[:2]
    y = convolution(a, b, mode, axes, kind)
    return y, add_tangents(None if ta is None else convolution(ta, b, mode, axes, kind),
                           None if tb is None else convolution(a, tb, mode, axes, kind))


def _both_scalars(a, b):
    return np.ndim(stop_gradient(a)) == 0 and np.ndim(stop_gradient(b)) == 0


def convolve(in1, in2, mode="full", method="auto"):
    """`scipy.signal.convolve`, differentiable in `in1` and `in2`.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda k: convolve(np.array([1.0, 2.0, 3.0]), k, "valid")[0], np.array([1.0, 1.0]))[0]
    array([2., 1.])
    """
    if not _any_tracked(in1, in2):
        return _signal().convolve(in1, in2, mode, method)
    if _both_scalars(in1, in2):
        return in1 * in2  # as SciPy does
    return convolution(in1, in2, mode, None, method)


def correlate(in1, in2, mode="full", method="auto"):
    """`scipy.signal.correlate`, differentiable in `in1` and `in2`.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda k: correlate(np.array([1.0, 2.0, 3.0]), k, "valid")[0], np.array([1.0, 1.0]))[0]
    array([1., 2.])
    """
    if not _any_tracked(in1, in2):
        return _signal().correlate(in1, in2, mode, method)
    if _both_scalars(in1, in2):
        return in1 * np.conj(in2)  # as SciPy does
    return convolution(in1, in2, mode, None, f"correlate:{method}")


def fftconvolve(in1, in2, mode="full", axes=None):
    """`scipy.signal.fftconvolve`, differentiable in `in1` and `in2`; over `axes`, broadcasting the others.

    >>> import numpy as np, pullback as pb
    >>> g = pb.gradient(lambda a: np.sum(fftconvolve(a, np.ones((1, 2)), axes=1)), np.ones((2, 3)))[0]
    >>> np.round(g, 12)
    array([[2., 2., 2.],
           [2., 2., 2.]])
    """
    if not _any_tracked(in1, in2):
        return _signal().fftconvolve(in1, in2, mode, axes)
    if _both_scalars(in1, in2):
        return in1 * in2  # as SciPy does
    if axes is not None:
        ndim = np.ndim(stop_gradient(in1))
        axes = tuple(sorted({int(k) % ndim for k in np.atleast_1d(axes)}))
    return convolution(in1, in2, mode, axes, "fftconvolve")


# --- lfilter -------------------------------------------------------------------------------
def _causal(w, x, lags):
    """Σ_n w[..., n] x[..., n - j] for j < lags, summed over every axis: one number per lag."""
    n = np.shape(stop_gradient(x))[-1]
    zero = np.zeros((), dtype=np.result_type(stop_gradient(w), stop_gradient(x)))
    return np.stack([np.sum(w[..., j:] * x[..., :n - j]) if j < n else zero for j in range(lags)])


def _initial_signal(zi, n):
    """zi as an input added to the first samples: its first min(len, n) entries, zero-padded to length n."""
    m = min(np.shape(stop_gradient(zi))[-1], n)
    pad = [(0, 0)] * (np.ndim(stop_gradient(zi)) - 1) + [(0, n - m)]
    return np.pad(zi[..., :m], pad)


def _backwards(b, a, v):
    """The adjoint of the causal filter b/a: filter v backwards in time."""
    return np.flip(linear_filter(b, a, np.flip(v, axis=-1), None), axis=-1)


@primitive
def linear_filter(b, a, x, zi):
    """`scipy.signal.lfilter(b, a, x, axis=-1, zi=zi)`'s output y (initial rest where zi is None)."""
    if zi is None:
        return _signal().lfilter(b, a, x, -1)
    return _signal().lfilter(b, a, x, -1, zi)[0]


@rrule(linear_filter)
def linear_filter_rule(b, a, x, zi):
    y = linear_filter(b, a, x, zi)
    one = np.ones(1, dtype=np.result_type(stop_gradient(a), 1.0))

    def back(g):
        w = Thunk(lambda: _backwards(one, a, g))  # (1/A)ᵀ g

        def ga():
            grad = -_causal(w.unthunk(), y, np.shape(stop_gradient(a))[0])
            if zi is None:
                return grad
            e = _initial_signal(zi, np.shape(stop_gradient(x))[-1])
            first = np.sum(w.unthunk() * e)
            return grad + np.concatenate([first[None], np.zeros_like(stop_gradient(grad)[1:])])

        def gzi():
            k = np.shape(stop_gradient(zi))[-1]
            n = np.shape(stop_gradient(x))[-1]
            head = w.unthunk()[..., :min(k, n)] * a[0]
            return np.pad(head, [(0, 0)] * (np.ndim(stop_gradient(head)) - 1) + [(0, k - min(k, n))])

        return (Thunk(lambda: _causal(w.unthunk(), x, np.shape(stop_gradient(b))[0])), Thunk(ga),
                Thunk(lambda: _backwards(b, a, g)), None if zi is None else Thunk(gzi))

    return y, back


@frule(linear_filter)
def linear_filter_frule(primals, tangents):
    (b, a, x, zi), (tb, ta, tx, tzi) = primals, tangents
    y = linear_filter(b, a, x, zi)
    if tb is None and ta is None and tx is None and tzi is None:
        return y, None
    one = np.ones(1, dtype=np.result_type(stop_gradient(a), 1.0))
    n = np.shape(stop_gradient(x))[-1]
    # Σ_k a_k y[n-k] = Σ_k b_k x[n-k] + a_0 e[n] (e: zi as an input), differentiated
    source = add_tangents(
        None if tb is None else linear_filter(tb, one, x, None),
        None if ta is None else -linear_filter(ta, one, y, None),
        None if ta is None or zi is None else ta[0] * _initial_signal(zi, n),
        None if tzi is None else a[0] * _initial_signal(tzi, n),
    )
    return y, add_tangents(None if tx is None else linear_filter(b, a, tx, None),
                           None if source is None else linear_filter(one, a, source, None))


def _final_state(b, a, x, y, zi):
    """lfilter's zf along the last axis, from the state equations of its direct form II transposed:
    zf[i] = Σ_{j>i} (b[j] x[N-1+i+1-j] - a[j] y[N-1+i+1-j]) + zi[i+N] (b and a normalised by a[0])."""
    k = max(np.shape(stop_gradient(a))[0], np.shape(stop_gradient(b))[0])
    n = np.shape(stop_gradient(x))[-1]
    bn = np.pad(b / a[0], (0, k - np.shape(stop_gradient(b))[0]))
    an = np.pad(a / a[0], (0, k - np.shape(stop_gradient(a))[0]))
    left = [(0, 0)] * (np.ndim(stop_gradient(x)) - 1) + [(k, 0)]
    xp, yp = np.pad(x, left), np.pad(y, left)  # x[m] = xp[m + k], zero for m < 0
    states = []
    for i in range(k - 1):
        terms = [bn[j] * xp[..., n + i - j + k] - an[j] * yp[..., n + i - j + k] for j in range(i + 1, k)]
        state = terms[0]
        for term in terms[1:]:
            state = state + term
        if zi is not None and i + n < k - 1:
            state = state + zi[..., i + n]
        states.append(state)
    return np.stack(states, axis=-1)


def _coefficients(c):
    """A list or tuple of coefficients as one array (stacked, where some are traced)."""
    if isinstance(c, (list, tuple)):
        return np.stack(c) if _any_tracked(*c) else np.asarray(c)
    return c


def lfilter(b, a, x, axis=-1, zi=None):
    """`scipy.signal.lfilter`, differentiable in `b`, `a`, `x` and `zi` (also zf's).

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda x: lfilter([1.0], [1.0, -0.5], x)[-1], np.ones(3))[0]  # y[n] = x[n] + y[n-1] / 2
    array([0.25, 0.5 , 1.  ])
    """
    signal = _signal()
    b, a = _coefficients(b), _coefficients(a)
    if not _any_tracked(b, a, x, zi):
        return signal.lfilter(b, a, x, axis, zi)
    if zi is None:
        return np.moveaxis(linear_filter(b, a, np.moveaxis(x, axis, -1), None), -1, axis)
    expected = list(np.shape(stop_gradient(x)))
    expected[axis] = max(np.size(stop_gradient(a)), np.size(stop_gradient(b))) - 1
    if np.ndim(stop_gradient(zi)) != len(expected):
        raise ValueError(f"lfilter: zi must have shape {tuple(expected)} (or size 1 in the axes other than axis), "
                         f"got {np.shape(stop_gradient(zi))}")
    zi = np.moveaxis(np.broadcast_to(zi, expected), axis, -1)
    xm = np.moveaxis(x, axis, -1)
    y = linear_filter(b, a, xm, zi)
    zf = _final_state(b, a, xm, y, zi)
    exact = signal.lfilter(*(stop_gradient(v) for v in (b, a, xm)), -1, stop_gradient(zi))[1]
    zf = zf + stop_gradient(exact - zf)  # SciPy's value (to the last bit); the derivative is the state equations'
    return np.moveaxis(y, -1, axis), np.moveaxis(zf, -1, axis)


_NOTE = "Call pullback.scipy.signal.{} (SciPy's own converts its input with np.asarray). "
describe(convolve, "in1, in2", _NOTE.format("convolve") + "Modes full, same, valid; any method; N-d.",
         kind="rule", rule=convolution_rule, name="scipy.signal.convolve")
describe(correlate, "in1, in2", _NOTE.format("correlate") + "Modes full, same, valid; any method; N-d.",
         kind="rule", rule=convolution_rule, name="scipy.signal.correlate")
describe(fftconvolve, "in1, in2", _NOTE.format("fftconvolve") + "Modes full, same, valid; `axes` (the other axes "
         "broadcast).", kind="rule", rule=convolution_rule, name="scipy.signal.fftconvolve")
describe(lfilter, "b, a, x, zi", _NOTE.format("lfilter") + "Any axis; with zi, zf is differentiable too. The "
         "adjoint in x is the filter run backwards in time.", kind="rule", rule=linear_filter_rule,
         name="scipy.signal.lfilter")
