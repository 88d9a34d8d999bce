"""Every registered function means the same with its arguments given by position or by keyword.

NumPy hands a call over with the arguments as they were written: `np.sum(x, 0)` arrives with
`axis` positional, `np.sum(x, axis=0)` with it in the keywords. A rule that reads only one of
the two computes something else for the other (as the forward rule of `np.tensordot` once did
with positional `axes`). This audit is driven by the registry: every callable in pullback's rule
tables has SAMPLES, calls that plain NumPy treats as the same (options by position, by keyword,
and the arrays by name), or an entry in NO_OPTIONS saying why no argument of it can be given
both ways. Each call of a sample must give

- the value plain NumPy gives (under `pb.gradient` and under `pb.jvp`),
- the same reverse gradient, `pb.gradient` of a fixed projection, as the sample's other calls,
- the same forward tangent, `pb.jvp` along fixed tangents, as the sample's other calls,
- and forward and reverse mode must agree: <J v, u> == <v, Jᵀ u>.

A new rule fails `test_every_registered_callable_has_samples` until its samples are added here.
"""

import importlib.util
import inspect

import numpy as np
import pytest

import options_numpy
import options_scipy
import pullback as pb
from matrices import spd, well_conditioned
from pullback._compat import signature_of
from pullback._registry import FUNCTIONS, NONDIFF_UFUNCS, UFUNC_RULES
from pullback.rules import _register, special
from pullback.rules import linalg as sl

HAVE_SCIPY = importlib.util.find_spec("scipy") is not None


# --- how samples are written --------------------------------------------------------------------
class In:
    """The k-th differentiated input of a sample, wherever it goes in a call."""

    def __init__(self, k):
        self.k = k

    def __repr__(self):
        return "XYZUW"[self.k]


X, Y, Z, U, W = (In(k) for k in range(5))


class C:
    """The arguments of one call: `C(X, 0)` is `fn(x, 0)`, `C(X, axis=0)` is `fn(x, axis=0)`."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def bind(self, values):
        return _fill(self.args, values), _fill(self.kwargs, values)

    def __repr__(self):
        return ", ".join([repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()])


def _fill(template, values):
    if isinstance(template, In):
        return values[template.k]
    if type(template) in (tuple, list):
        return type(template)(_fill(t, values) for t in template)
    if type(template) is dict:
        return {k: _fill(v, values) for k, v in template.items()}
    return template


class Sample:
    def __init__(self, key, arrays, calls, run, check_values, needs_scipy, known_bug):
        self.key, self.arrays, self.calls, self.run = key, tuple(arrays), calls, run
        self.check_values, self.needs_scipy, self.known_bug = check_values, needs_scipy, known_bug

    def function(self, call):
        def f(*values):
            args, kwargs = call.bind(values)
            return self.run(*args, **kwargs)

        return f

    def __repr__(self):
        name = getattr(self.key, "__name__", str(self.key))
        if self.run is not self.key:
            name = f"{name}.{self.run.__name__}" if isinstance(self.key, np.ufunc) else self.run.__name__
        return f"{name}({self.calls[0]!r})"


SAMPLES = []


def same(key, arrays, *calls, run=None, check_values=True, needs_scipy=False, known_bug=None):
    """Record calls of `run` (default: `key`) on `arrays` that plain NumPy treats as the same.

    `known_bug` names a bug outside the rule files that the sample shows (a strict xfail, so that
    the mark goes when the bug does)."""
    SAMPLES.append(Sample(key, arrays, calls, key if run is None else run, check_values, needs_scipy, known_bug))


# --- inputs: distinct values, away from ties and kinks ------------------------------------------
rng = np.random.default_rng(20240607)
V = np.array([0.3, -1.2, 2.1, 0.8])
V2 = np.array([1.1, 0.4, -0.7])
M = np.array([[0.5, -1.3, 2.2], [1.7, 0.1, -0.9]])
N = np.array([[0.2, 0.9, -0.4], [-1.1, 0.6, 1.4]])
K = np.array([[0.8, -0.3], [0.25, 1.2], [-0.6, 0.45]])
T = rng.normal(size=(2, 3, 4))
ROW = np.array([0.35, -0.8, 1.25])
S = well_conditioned(rng, (3, 3))
S2 = well_conditioned(rng, (2, 2))
P = spd(rng, (3, 3))
LOWER = np.tril(S) + np.eye(3)
POSITIVE = np.array([0.6, 1.3, 0.9])
SORTED = np.array([-1.0, 0.0, 0.6, 1.5])
REPEATS = np.array([1.5, -0.5, 1.5, 0.25, -0.5])
ROWS = np.array([[1.0, 2.0], [0.0, 1.0], [1.0, 2.0]])
SCALAR = np.array(0.7)
LO, HI = np.array([-1.0, 0.0, -0.5]), np.array([0.4, 1.0, 1.5])
XS, XP, FP = np.array([-0.5, 0.3, 1.7, 3.2]), np.array([0.0, 1.0, 2.5]), np.array([0.4, -0.2, 1.1])
LEFT, RIGHT = np.array(-2.0), np.array(3.0)
IDX = np.array([[2, 0], [1, 1]])

# --- reductions ---------------------------------------------------------------------------------
same(np.sum, [M], C(X, 1), C(X, axis=1), C(a=X, axis=1))
same(np.sum, [T], C(X, (0, 2), None, None, True), C(X, axis=(0, 2), keepdims=True))
same(np.mean, [T], C(X, 1, None, None, True), C(X, axis=1, keepdims=True), C(a=X, axis=1, keepdims=True))
for _fn in (np.max, np.amax, np.min, np.amin):
    same(_fn, [M], C(X, 1, None, True), C(X, axis=1, keepdims=True), C(a=X, axis=1, keepdims=True))
same(np.prod, [M], C(X, 0, None, None, True), C(X, axis=0, keepdims=True), C(a=X, axis=0, keepdims=True))
for _fn in (np.argmax, np.argmin, np.count_nonzero, np.size):
    same(_fn, [M], C(X, 1), C(X, axis=1), C(a=X, axis=1))
same(np.argsort, [M], C(X, 0, "stable"), C(X, axis=0, kind="stable"), C(a=X, axis=0, kind="stable"))
for _fn in (np.nanargmax, np.nanargmin):
    same(_fn, [M], C(X, 1), C(X, axis=1), C(a=X, axis=1))
same(np.lexsort, [M], C(X, 0), C(X, axis=0), C(keys=X, axis=0))
same(np.argwhere, [M], C(X), C(a=X))
same(np.isin, [M, N], C(X, Y, False, True), C(X, Y, invert=True), C(element=X, test_elements=Y, invert=True))
same(np.array_equiv, [M, N], C(X, Y), C(a1=X, a2=Y))
for _fn in (np.tril_indices_from, np.triu_indices_from):
    same(_fn, [S], C(X, 1), C(X, k=1), C(arr=X, k=1))
same(np.diag_indices_from, [S], C(X), C(arr=X))
for _fn in (np.nonzero, np.flatnonzero, np.shape, np.ndim):
    same(_fn, [M], C(X), C(a=X))
for _fn in (np.all, np.any):
    same(_fn, [M], C(X, 1, None, True), C(X, axis=1, keepdims=True), C(a=X, axis=1, keepdims=True))
for _fn in (np.isclose, np.allclose):
    same(_fn, [M, N], C(X, Y, 0.5, 0.4, True), C(X, Y, rtol=0.5, atol=0.4, equal_nan=True),
         C(a=X, b=Y, rtol=0.5, atol=0.4, equal_nan=True))
same(np.array_equal, [M, N], C(X, Y, True), C(X, Y, equal_nan=True), C(a1=X, a2=Y, equal_nan=True))
same(np.searchsorted, [SORTED, V], C(X, Y, "right", None), C(X, Y, side="right", sorter=None),
     C(a=X, v=Y, side="right"))
for _fn in (np.round, np.around):
    same(_fn, [M], C(X, 1), C(X, decimals=1), C(a=X, decimals=1))
for _fn in (np.iscomplexobj, np.isrealobj):
    same(_fn, [M], C(X), C(x=X))
same(np.may_share_memory, [M, N], C(X, Y, 0), C(X, Y, max_work=0))
same(np.shares_memory, [M, N], C(X, Y, -1), C(X, Y, max_work=-1))
same(np.digitize, [V, SORTED], C(X, Y, True), C(X, Y, right=True), C(x=X, bins=Y, right=True))

# --- scans and statistics -----------------------------------------------------------------------
for _fn in (np.cumsum, np.cumprod):
    same(_fn, [M], C(X, 1), C(X, axis=1), C(a=X, axis=1))
    same(_fn, [M], C(X, None, None, None), C(X, axis=None, dtype=None, out=None))
same(np.diff, [M, ROW[None], V2[None]], C(X, 1, 0, Y, Z), C(X, n=1, axis=0, prepend=Y, append=Z),
     C(a=X, n=1, axis=0, prepend=Y, append=Z))
same(np.diff, [M], C(X, 2, 1), C(X, n=2, axis=1))
for _fn in (np.nansum, np.nanmean):
    same(_fn, [M], C(X, 1, None, None, True), C(X, axis=1, keepdims=True), C(a=X, axis=1, keepdims=True))
same(np.average, [M, POSITIVE], C(X, 1, Y, True), C(X, axis=1, weights=Y, returned=True),
     C(a=X, axis=1, weights=Y, returned=True))
for _fn in (np.var, np.std):
    same(_fn, [M], C(X, 0, None, None, 1, True), C(X, axis=0, ddof=1, keepdims=True),
         C(a=X, axis=0, ddof=1, keepdims=True))
same(np.ptp, [M], C(X, 1, None, True), C(X, axis=1, keepdims=True), C(a=X, axis=1, keepdims=True))
same(np.trace, [T], C(X, 1, 1, 2), C(X, offset=1, axis1=1, axis2=2), C(a=X, offset=1, axis1=1, axis2=2))
same(np.linalg.norm, [M], C(X, 2, 0), C(X, ord=2, axis=0), C(x=X, ord=2, axis=0))
same(np.linalg.norm, [M], C(X, 1, (0, 1), True), C(X, ord=1, axis=(0, 1), keepdims=True))
same(np.linalg.norm, [M], C(X, "fro"), C(X, ord="fro"))
same(np.linalg.norm, [M], C(X, np.inf, 1), C(X, ord=np.inf, axis=1))

# --- shape --------------------------------------------------------------------------------------
same(np.reshape, [M], C(X, (3, 2), "F"), C(X, shape=(3, 2), order="F"), C(X, (3, 2), order="F"))
same(np.ravel, [M], C(X, "F"), C(X, order="F"), C(a=X, order="F"))
same(np.transpose, [T], C(X, (2, 0, 1)), C(X, axes=(2, 0, 1)), C(a=X, axes=(2, 0, 1)))
same(np.swapaxes, [T], C(X, 0, 2), C(X, axis1=0, axis2=2), C(a=X, axis1=0, axis2=2))
same(np.moveaxis, [T], C(X, 0, -1), C(X, source=0, destination=-1), C(a=X, source=0, destination=-1))
same(np.expand_dims, [M], C(X, 1), C(X, axis=1), C(a=X, axis=1))
same(np.squeeze, [M[:, None]], C(X, 1), C(X, axis=1), C(a=X, axis=1))
same(np.broadcast_to, [ROW], C(X, (2, 3), False), C(X, shape=(2, 3), subok=False), C(array=X, shape=(2, 3)))
same(np.copy, [M], C(X, "F"), C(X, order="F"), C(a=X, order="F"))
same(np.concatenate, [M, N], C([X, Y], 1), C([X, Y], axis=1))
same(np.concatenate, [M, V], C([X, Y], None), C([X, Y], axis=None))
same(np.stack, [M, N], C([X, Y], 1), C([X, Y], axis=1), C(arrays=[X, Y], axis=1))
for _fn in (np.vstack, np.hstack):
    same(_fn, [M, N], C([X, Y]), C(tup=[X, Y]))
for _fn in (np.zeros_like, np.ones_like):
    same(_fn, [M], C(X, None, "K", True, (3, 2)), C(X, dtype=None, order="K", subok=True, shape=(3, 2)),
         C(a=X, shape=(3, 2)))
same(np.empty_like, [M], C(X, np.float32, "K", True, (3,)), C(X, dtype=np.float32, shape=(3,)), check_values=False)


def _into_copy(fn, name):
    """In-place `fn` run on a copy of its target (`name`, the first argument); the copy is the result."""
    def run(*args, **kwargs):
        if args:
            target = args[0] * 1.0
            args = (target,) + args[1:]
        else:
            target = kwargs[name] = kwargs[name] * 1.0
        fn(*args, **kwargs)
        return target
    run.__name__ = fn.__name__
    return run


same(np.copyto, [M, ROW], C(X, Y, "same_kind", True), C(X, Y, casting="same_kind", where=True), C(dst=X, src=Y),
     run=_into_copy(np.copyto, "dst"))
same(np.copyto, [M, ROW], C(X, Y, "same_kind", [True, False, True]), C(X, Y, where=[True, False, True]),
     C(dst=X, src=Y, where=[True, False, True]), run=_into_copy(np.copyto, "dst"))
same(np.fill_diagonal, [S, V2], C(X, Y, False), C(X, Y, wrap=False), C(a=X, val=Y, wrap=False),
     run=_into_copy(np.fill_diagonal, "a"))
same(np.put, [V, V2], C(X, [0, -1, 1], Y, "raise"), C(X, [0, -1, 1], Y, mode="raise"),
     C(a=X, ind=[0, -1, 1], v=Y, mode="raise"), run=_into_copy(np.put, "a"))
same(np.place, [V, V2], C(X, [True, False, True, True], Y), C(arr=X, mask=[True, False, True, True], vals=Y),
     run=_into_copy(np.place, "arr"))
same(np.putmask, [V, V2], C(X, [True, False, True, True], Y), C(X, mask=[True, False, True, True], values=Y),
     run=_into_copy(np.putmask, "a"))
same(np.full_like, [M, SCALAR], C(X, Y, None, "K", True, (2, 2, 3)), C(X, fill_value=Y, shape=(2, 2, 3)),
     C(a=X, fill_value=Y, shape=(2, 2, 3)))

# --- indexing -----------------------------------------------------------------------------------
same(np.clip, [M, LO, HI], C(X, Y, Z), C(X, a_min=Y, a_max=Z), C(a=X, a_min=Y, a_max=Z), C(X, min=Y, max=Z))

# --- products -----------------------------------------------------------------------------------
same(np.dot, [M, K], C(X, Y, None), C(X, Y, out=None), C(a=X, b=Y))
same(np.tensordot, [M, K], C(X, Y, ([0, 1], [1, 0])), C(X, Y, axes=([0, 1], [1, 0])),
     C(a=X, b=Y, axes=([0, 1], [1, 0])))
same(np.tensordot, [M, K], C(X, Y, 1), C(X, Y, axes=1))
same(np.outer, [V, ROW], C(X, Y, None), C(X, Y, out=None), C(a=X, b=Y))

# --- selection ----------------------------------------------------------------------------------
same(np.flip, [M], C(X, 1), C(X, axis=1), C(m=X, axis=1))
same(np.roll, [M], C(X, (1, 2), (0, 1)), C(X, shift=(1, 2), axis=(0, 1)), C(a=X, shift=(1, 2), axis=(0, 1)))
same(np.tile, [M], C(X, (2, 1, 2)), C(X, reps=(2, 1, 2)), C(A=X, reps=(2, 1, 2)))
same(np.repeat, [M], C(X, [1, 0, 2], 1), C(X, repeats=[1, 0, 2], axis=1), C(a=X, repeats=[1, 0, 2], axis=1))
same(np.pad, [M], C(X, ((1, 0), (0, 2)), "reflect"), C(X, pad_width=((1, 0), (0, 2)), mode="reflect"),
     C(array=X, pad_width=((1, 0), (0, 2)), mode="reflect"))
same(np.pad, [M], C(X, 1), C(X, pad_width=1), C(array=X, pad_width=1))
same(np.pad, [M], C(X, 1, "constant", constant_values=0.5), C(X, 1, mode="constant", constant_values=0.5))
same(np.split, [M], C(X, 3, 1), C(X, indices_or_sections=3, axis=1), C(ary=X, indices_or_sections=3, axis=1))
same(np.array_split, [M], C(X, 2, 1), C(X, indices_or_sections=2, axis=1), C(ary=X, indices_or_sections=2, axis=1))
same(np.hsplit, [M], C(X, [1]), C(X, indices_or_sections=[1]), C(ary=X, indices_or_sections=[1]))
same(np.vsplit, [M], C(X, 2), C(X, indices_or_sections=2), C(ary=X, indices_or_sections=2))
same(np.dsplit, [T], C(X, [1, 3]), C(X, indices_or_sections=[1, 3]), C(ary=X, indices_or_sections=[1, 3]))
same(np.take, [M], C(X, [2, 0, 2], 1), C(X, indices=[2, 0, 2], axis=1), C(a=X, indices=[2, 0, 2], axis=1))
same(np.take, [M], C(X, [7, -1], None, None, "wrap"), C(X, [7, -1], mode="wrap"))
same(np.take_along_axis, [M], C(X, IDX, 1), C(X, IDX, axis=1), C(arr=X, indices=IDX, axis=1))
same(np.diagonal, [T], C(X, 1, 0, 2), C(X, offset=1, axis1=0, axis2=2), C(a=X, offset=1, axis1=0, axis2=2))
same(np.diag, [V], C(X, 1), C(X, k=1), C(v=X, k=1))
same(np.diag, [M], C(X, -1), C(X, k=-1))
same(np.diagflat, [M], C(X, 1), C(X, k=1), C(v=X, k=1))
for _fn in (np.triu, np.tril):
    same(_fn, [S], C(X, 1), C(X, k=1), C(m=X, k=1))
same(np.sort, [M], C(X, 0, "stable"), C(X, axis=0, kind="stable"), C(a=X, axis=0, kind="stable"))
same(np.sort, [M], C(X, None), C(X, axis=None))
for _fn in (np.partition, np.argpartition):
    same(_fn, [M], C(X, 1, 1), C(X, kth=1, axis=1), C(a=X, kth=1, axis=1))
same(np.unique, [REPEATS], C(X, True, True, True, None),
     C(X, return_index=True, return_inverse=True, return_counts=True, axis=None),
     C(ar=X, return_index=True, return_inverse=True, return_counts=True))
same(np.unique, [ROWS], C(X, False, False, False, 0), C(X, axis=0), C(ar=X, axis=0))
same(np.interp, [XS, XP, FP, LEFT, RIGHT], C(X, Y, Z, U, W), C(X, Y, Z, left=U, right=W),
     C(x=X, xp=Y, fp=Z, left=U, right=W))
same(np.interp, [XS, XP, FP], C(X, Y, Z, None, None, None), C(X, Y, Z, period=None))
same(np.kron, [M, V], C(X, Y), C(a=X, b=Y))
for _fn in (np.convolve, np.correlate):
    same(_fn, [V, V2], C(X, Y, "same"), C(X, Y, mode="same"), C(a=X, v=Y, mode="same"))

# --- decompositions -----------------------------------------------------------------------------
for _fn in (np.linalg.inv, np.linalg.det, np.linalg.slogdet, np.linalg.eig, np.linalg.eigvals):
    same(_fn, [S], C(X), C(a=X))
same(np.linalg.solve, [S, K], C(X, Y), C(X, b=Y), C(a=X, b=Y))
for _fn in (np.linalg.eigh, np.linalg.eigvalsh):
    same(_fn, [P], C(X, "U"), C(X, UPLO="U"), C(a=X, UPLO="U"))
same(np.linalg.matrix_rank, [M], C(X, 1e-3, False), C(X, tol=1e-3, hermitian=False), C(A=X, tol=1e-3))
same(np.linalg.svd, [M], C(X, False), C(X, full_matrices=False), C(a=X, full_matrices=False))
same(np.linalg.svd, [M], C(X, True, False), C(X, compute_uv=False), C(a=X, full_matrices=True, compute_uv=False))
same(np.linalg.qr, [M], C(X, "complete"), C(X, mode="complete"), C(a=X, mode="complete"))
same(np.linalg.qr, [K], C(X, "r"), C(X, mode="r"))
same(np.linalg.pinv, [M], C(X, 1e-10, False), C(X, rcond=1e-10, hermitian=False), C(a=X, rcond=1e-10))
same(np.linalg.lstsq, [K, ROW], C(X, Y, None), C(X, Y, rcond=None), C(a=X, b=Y, rcond=None))
same(np.linalg.matrix_power, [S], C(X, 3), C(X, n=3), C(a=X, n=3))
same(np.linalg.matrix_power, [S], C(X, -2), C(a=X, n=-2))
same(np.linalg.multi_dot, [M, K, S2], C([X, Y, Z]), C(arrays=[X, Y, Z]))

# --- fft ----------------------------------------------------------------------------------------
for _fn in (np.real, np.imag):
    same(_fn, [M], C(X), C(val=X))
same(np.angle, [M], C(X, True), C(X, deg=True), C(z=X, deg=True))
for _fn in (np.fft.fft, np.fft.ifft, np.fft.rfft, np.fft.irfft, np.fft.hfft, np.fft.ihfft):
    same(_fn, [M], C(X, 4, 0, "ortho"), C(X, n=4, axis=0, norm="ortho"), C(a=X, n=4, axis=0, norm="ortho"))
for _fn in (np.fft.fftn, np.fft.ifftn, np.fft.rfftn, np.fft.irfftn):
    same(_fn, [T], C(X, (2, 4), (0, 2), "forward"), C(X, s=(2, 4), axes=(0, 2), norm="forward"),
         C(a=X, s=(2, 4), axes=(0, 2), norm="forward"))
for _fn in (np.fft.fft2, np.fft.ifft2, np.fft.rfft2, np.fft.irfft2):
    same(_fn, [T], C(X, (3, 4), (1, 2), "ortho"), C(X, s=(3, 4), axes=(1, 2), norm="ortho"),
         C(a=X, s=(3, 4), axes=(1, 2), norm="ortho"))
for _fn in (np.fft.fftshift, np.fft.ifftshift):
    same(_fn, [M], C(X, 1), C(X, axes=1), C(x=X, axes=1))
# Functions of the complex result of an FFT.
for _fn, _call, _keyword in ((np.sum, C(X, 0), C(X, axis=0)), (np.mean, C(X, 1, None, None, True),
                                                             C(X, axis=1, keepdims=True)),
                             (np.roll, C(X, 1, 0), C(X, shift=1, axis=0)), (np.reshape, C(X, (3, 2)),
                                                                            C(X, shape=(3, 2))),
                             (np.take, C(X, [2, 0], 1), C(X, indices=[2, 0], axis=1)),
                             (np.cumsum, C(X, 1), C(X, axis=1))):
    def _of_fft(x, *args, _fn=_fn, **kwargs):
        return _fn(np.fft.fft(x), *args, **kwargs)

    _of_fft.__name__ = f"{_fn.__name__}-of-fft"
    same(_fn, [M], _call, _keyword, run=_of_fft)

# --- ufunc methods, which NumPy hands over with their options as keywords ---------------------
same(np.add, [M], C(X, 1, None, None, True), C(X, axis=1, keepdims=True), run=np.add.reduce)
same(np.multiply, [M], C(X, 1, None), C(X, axis=1, dtype=None), run=np.multiply.reduce)
same(np.maximum, [M], C(X, 0), C(X, axis=0), run=np.maximum.reduce)
same(np.maximum, [M], C(X, 0, None, None, True), C(X, axis=0, keepdims=True), run=np.maximum.reduce)
same(np.minimum, [M], C(X, 1), C(X, axis=1), run=np.minimum.reduce)
same(np.add, [M], C(X, 1, None), C(X, axis=1, dtype=None), run=np.add.accumulate)
same(np.multiply, [M], C(X, 1), C(X, axis=1), run=np.multiply.accumulate)
same(np.add, [M, N], C(X, Y, None), C(X, Y, out=None))

# --- array methods, which take the options of their functions (mostly in the same places) ------
def method(name):
    def call(x, *args, **kwargs):
        return getattr(x, name)(*args, **kwargs)

    call.__name__ = f"ndarray.{name}"
    return call


for _fn, _name, _calls in (
    (np.sum, "sum", [C(X, 1, None, None, True), C(X, axis=1, keepdims=True)]),
    (np.mean, "mean", [C(X, 0, None, None, True), C(X, axis=0, keepdims=True)]),
    (np.max, "max", [C(X, 1, None, True), C(X, axis=1, keepdims=True)]),
    (np.min, "min", [C(X, 0), C(X, axis=0)]),
    (np.prod, "prod", [C(X, 1, None, None, True), C(X, axis=1, keepdims=True)]),
    (np.var, "var", [C(X, 0, None, None, 1, True), C(X, axis=0, ddof=1, keepdims=True)]),
    (np.std, "std", [C(X, 1, None, None, 1), C(X, axis=1, ddof=1)]),
    (np.cumsum, "cumsum", [C(X, 1), C(X, axis=1)]),
    (np.cumprod, "cumprod", [C(X, 0), C(X, axis=0)]),
    (np.squeeze, "squeeze", [C(X, 1), C(X, axis=1)]),
    (np.ravel, "ravel", [C(X, "F"), C(X, order="F")]),
    (np.ravel, "flatten", [C(X, "F"), C(X, order="F")]),
    (np.copy, "copy", [C(X, "F"), C(X, order="F")]),
    (np.trace, "trace", [C(X, 1, 1, 2), C(X, offset=1, axis1=1, axis2=2)]),
    (np.diagonal, "diagonal", [C(X, 1, 0, 2), C(X, offset=1, axis1=0, axis2=2)]),
    (np.swapaxes, "swapaxes", [C(X, 0, 2)]),  # the method takes no keywords
    (np.repeat, "repeat", [C(X, 2, 1), C(X, repeats=2, axis=1)]),
    (np.take, "take", [C(X, [2, 0], 1), C(X, indices=[2, 0], axis=1)]),
    (np.argmax, "argmax", [C(X, 1), C(X, axis=1)]),
    (np.argmin, "argmin", [C(X, 1), C(X, axis=1)]),
    (np.argsort, "argsort", [C(X, 0, "stable"), C(X, axis=0, kind="stable")]),
    (np.round, "round", [C(X, 1), C(X, decimals=1)]),
    (np.all, "all", [C(X, 1), C(X, axis=1)]),
    (np.any, "any", [C(X, 0), C(X, axis=0)]),
    (np.reshape, "reshape", [C(X, (3, 2)), C(X, 3, 2), C(X, (3, 2), order="F"), C(X, 3, 2, order="F")]),
    (np.transpose, "transpose", [C(X, (1, 0)), C(X, 1, 0)]),
):
    _input = T if _name in ("trace", "diagonal", "swapaxes") else M[:, None] if _name == "squeeze" else M
    if _name == "reshape":  # order changes the result: two samples
        same(_fn, [_input], *_calls[:2], run=method(_name))
        same(_fn, [_input], *_calls[2:], run=method(_name))
    else:
        same(_fn, [_input], *_calls, run=method(_name))
same(np.clip, [M, LO, HI], C(X, Y, Z), C(X, min=Y, max=Z), C(X, Y, max=Z), run=method("clip"))
same(np.dot, [M, K], C(X, Y, None), C(X, Y, out=None), C(X, b=Y), run=method("dot"))
same(np.nonzero, [M], C(X), run=method("nonzero"))
for _name in ("conj", "conjugate"):
    same(np.conjugate, [M], C(X), run=method(_name))

# --- pullback.scipy.linalg and pullback.scipy.special -------------------------------------------
CHOLESKY = np.linalg.cholesky(P)
same(sl.solve_triangular, [LOWER, K], C(X, Y, 1, True), C(X, Y, trans=1, lower=True),
     C(a=X, b=Y, trans=1, lower=True), needs_scipy=True)
same(sl.cho_factor, [P], C(X, True), C(X, lower=True), C(a=X, lower=True), needs_scipy=True)
same(sl.cho_solve, [CHOLESKY, K], C((X, True), Y), C((X, True), b=Y), C(c_and_lower=(X, True), b=Y),
     needs_scipy=True)
same(sl.expm, [S / 3.0], C(X), C(A=X), needs_scipy=True)
same(sl.lu_factor, [S], C(X, False), C(X, overwrite_a=False), C(a=X, overwrite_a=False), needs_scipy=True)
# the sample is skipped without SciPy; it still counts as written (its factors are placeholders then)
LU, PIVOTS = __import__("scipy.linalg").linalg.lu_factor(S) if HAVE_SCIPY else (S, np.arange(len(S)))
same(sl.lu_solve, [LU, K], C((X, PIVOTS), Y, 1), C((X, PIVOTS), Y, trans=1),
     C(lu_and_piv=(X, PIVOTS), b=Y, trans=1), needs_scipy=True)
same(special.logsumexp, [M, np.abs(N) + 0.5], C(X, 1, Y, True, True),
     C(X, axis=1, b=Y, keepdims=True, return_sign=True), C(a=X, axis=1, b=Y, keepdims=True, return_sign=True),
     needs_scipy=True)
for _fn in (special.softmax, special.log_softmax):
    same(_fn, [M], C(X, 1), C(X, axis=1), C(x=X, axis=1), needs_scipy=True)
same(special.multigammaln, [POSITIVE + 1.0], C(X, 2), C(X, d=2), C(a=X, d=2), needs_scipy=True)
same(special.polygamma, [POSITIVE], C(1, X), C(1, x=X), C(n=1, x=X), needs_scipy=True)


# --- callables none of whose arguments can be given both ways -----------------------------------
NO_OPTIONS = {
    np.where: "condition, x and y are positional-only",
    np.linalg.matmul: "x1 and x2 are positional-only",
    np.inner: "a and b are positional-only",
    np.vdot: "a and b are positional-only",
    np.einsum: "the operands are variadic; out= and optimize= are keyword-only",
    np.atleast_1d: "the arrays are variadic",
    np.atleast_2d: "the arrays are variadic",
    np.atleast_3d: "the arrays are variadic",
    np.meshgrid: "the arrays are variadic; copy=, sparse= and indexing= are keyword-only",
    np.ix_: "the arrays are variadic",
    np.result_type: "the arrays and dtypes are variadic",
    np.linalg.vector_norm: "x is positional-only; axis=, keepdims= and ord= are keyword-only",
    np.linalg.matrix_norm: "x is positional-only; keepdims= and ord= are keyword-only",
    np.linalg.trace: "x is positional-only; offset= and dtype= are keyword-only",
    np.linalg.diagonal: "x is positional-only; offset= is keyword-only",
    np.linalg.cholesky: "a is positional-only; upper= is keyword-only",
}
NO_OPTIONS.update(options_numpy.add_samples(same, C, X, Y, Z))  # the NumPy-coverage rules' samples
NO_OPTIONS.update(options_scipy.add_samples(same, C, X, Y, Z))  # pullback.scipy's stand-ins' samples
# The engine's stand-ins for syntax: user code never calls them, the engine always positionally.
STAND_INS = {key: f"stands for `{name}`" for key, name in _register._STAND_INS.items()}
UFUNC_REASON = ("a ufunc takes its inputs by position only and its options (dtype=, where=, ...) by keyword "
                "only; NumPy hands `out` over as a keyword however it was given (see the np.add samples)")


def registered():
    """Every callable of pullback's rule tables (built-in rules record a row in `_register.ENTRIES`)."""
    keys = {id(k): k for k in _register.ENTRIES if not isinstance(k, str)}
    for table in (FUNCTIONS, UFUNC_RULES, NONDIFF_UFUNCS):
        keys.update({id(k): k for k in table if k in _register.ENTRIES or isinstance(k, np.ufunc)})
    return list(keys.values())


def _name(key):
    return _register.row_name(key) if not isinstance(key, type) else key.__name__


def why_no_samples(key):
    """The reason `key` needs no samples, or None."""
    if isinstance(key, np.ufunc):
        return UFUNC_REASON
    return NO_OPTIONS.get(key) or STAND_INS.get(key)


def test_every_registered_callable_has_samples():
    sampled = {id(s.key) for s in SAMPLES}
    missing = [_name(k) for k in registered() if id(k) not in sampled and why_no_samples(k) is None]
    assert not missing, f"registered callables without samples in {__file__}: {sorted(missing)}"
    assert len(registered()) > 200  # a sanity floor, so that a broken enumeration cannot pass vacuously


def test_exclusions_really_take_no_argument_both_ways():
    for fn, reason in NO_OPTIONS.items():
        both_ways = [p.name for p in signature_of(fn).parameters.values()  # (np.where's before NumPy 2.4 too)
                     if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert not both_ways, f"{_name(fn)} ({reason}) takes {both_ways} by position or keyword: add samples"
    stale = [_name(fn) for fn in NO_OPTIONS if fn not in _register.ENTRIES]
    assert not stale, f"exclusions of callables that are not registered: {stale}"


def test_ufuncs_get_out_as_a_keyword_however_it_is_written():
    x = np.array([1.0, 2.0])
    for write in (lambda x, out: np.add(x, 1.0, out), lambda x, out: np.add(x, 1.0, out=out)):
        with pytest.raises(TypeError, match=r"numpy\.add\(\.\.\., out=\.\.\.\) would write"):
            pb.gradient(lambda x: np.sum(write(x, np.zeros(2))), x)


# --- the check ----------------------------------------------------------------------------------
def leaves(y):
    """The parts of an output, in order: the elements of tuples and lists, each as it is."""
    if isinstance(y, (tuple, list)):
        return [leaf for part in y for leaf in leaves(part)]
    return [y]


def real_parts(leaf):
    """The real arrays a projection sees in one output: a complex value gives two."""
    plain = pb.stop_gradient(leaf)
    kind = np.result_type(plain).kind if isinstance(plain, (np.ndarray, np.generic, float, complex)) else "O"
    if kind == "c":
        return [np.real(leaf), np.imag(leaf)]
    return [leaf] if kind == "f" else []


def weight(k, p, shape):
    return np.random.default_rng(1000 + 2 * k + p).normal(size=shape)


def project(y):
    """A fixed linear functional of every real number in an output (0.0 when there is none)."""
    total = 0.0
    for k, leaf in enumerate(leaves(y)):
        for p, part in enumerate(real_parts(leaf)):
            total = total + np.sum(part * weight(k, p, np.shape(part)))
    return total


def tangent_pairing(y, y_dot):
    """<u, y_dot> with u the projection's weights; a None tangent is zero."""
    outputs = leaves(y)
    tangents = leaves(y_dot) if y_dot is not None else [None] * len(outputs)
    total = 0.0
    for k, (leaf, t) in enumerate(zip(outputs, tangents)):
        if t is not None:
            for p, part in enumerate(real_parts(t)):
                total += float(np.sum(part * weight(k, p, np.shape(part))))
    return total


def assert_same_outputs(actual, expected, exact, what, check_values=True):
    actual, expected = leaves(actual), leaves(expected)
    assert len(actual) == len(expected), f"{what}: {len(actual)} outputs, expected {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected)):
        if e is None or a is None:
            assert a is None and e is None, f"{what}, output {k}: {a!r} vs {e!r}"
            continue
        a, e = pb.stop_gradient(a), pb.stop_gradient(e)
        assert np.shape(a) == np.shape(e), f"{what}, output {k}: shape {np.shape(a)} vs {np.shape(e)}"
        if isinstance(e, (np.ndarray, np.generic)):
            assert np.result_type(a) == np.result_type(e), f"{what}, output {k}: dtype {np.result_type(a)}"
        if not check_values:
            continue
        if exact:
            np.testing.assert_array_equal(a, e, err_msg=f"{what}, output {k}")
        else:
            # (the absolute tolerance scaled to the output: an error estimate of 1e-30 is compared, not waved through)
            scale = float(np.max(np.abs(e), initial=0.0))
            np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-12 * scale, err_msg=f"{what}, output {k}")


def traced_runs(sample, call):
    """(value under gradient, gradients, value under jvp, tangent) of one call."""
    f = sample.function(call)
    seen = []

    def loss(*values):
        y = f(*values)
        seen.append(y)
        return project(y)

    grads = pb.gradient(loss, *sample.arrays)
    v = tuple(np.random.default_rng(50 + i).normal(size=np.shape(a)) for i, a in enumerate(sample.arrays))
    y, y_dot = pb.jvp(f, sample.arrays, v)
    pairing = sum(float(np.sum(g * t)) for g, t in zip(grads, v) if g is not None)
    assert np.isclose(tangent_pairing(y, y_dot), pairing, rtol=1e-9, atol=1e-12), (
        f"{sample!r} as {call!r}: forward and reverse mode disagree: {tangent_pairing(y, y_dot)} vs {pairing}")
    return seen[0], grads, y, y_dot


def check(sample):
    if sample.needs_scipy and not HAVE_SCIPY:
        pytest.skip("needs SciPy")
    plain = [sample.function(call)(*sample.arrays) for call in sample.calls]
    for call, value in zip(sample.calls[1:], plain[1:]):  # the sample itself: NumPy agrees
        assert_same_outputs(value, plain[0], True, f"plain NumPy, {call!r}", sample.check_values)
    refused = _register.ENTRIES.get(sample.key, None)
    if refused is not None and refused.kind == "refused":
        messages = set()
        for call in sample.calls:
            with pytest.raises(TypeError, match="is not differentiable by pullback") as error:
                traced_runs(sample, call)
            messages.add(str(error.value))
        assert len(messages) == 1, messages
        return
    first = None
    for call, value in zip(sample.calls, plain):
        runs = traced_runs(sample, call)
        what = f"{sample!r} as {call!r}"
        assert_same_outputs(runs[0], value, False, f"{what}, value under pb.gradient", sample.check_values)
        assert_same_outputs(runs[2], value, False, f"{what}, value under pb.jvp", sample.check_values)
        if first is None:
            first = runs
            continue
        for k, (g, g_first) in enumerate(zip(runs[1], first[1])):
            assert (g is None) == (g_first is None), f"{what}: gradient {k} is {g!r}, first call's {g_first!r}"
            if g is not None:
                np.testing.assert_array_equal(g, g_first, err_msg=f"{what}: gradient {k}")
        first_tangents = leaves(first[3]) if first[3] is not None else None
        tangents = leaves(runs[3]) if runs[3] is not None else None
        if first_tangents is None or tangents is None:
            assert tangent_pairing(runs[2], runs[3]) == tangent_pairing(first[2], first[3]), what
        else:
            assert_same_outputs(tangents, first_tangents, True, f"{what}, tangent")


def _param(sample):
    marks = [pytest.mark.xfail(strict=True, reason=sample.known_bug)] if sample.known_bug else []
    return pytest.param(sample, marks=marks, id=repr(sample))


@pytest.mark.parametrize("sample", [_param(s) for s in SAMPLES])
def test_positional_and_keyword_options_agree(sample):
    check(sample)
