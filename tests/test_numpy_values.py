"""Under differentiation a function computes the value it computes without it, bit for bit.

Composites (functions written with other differentiable operations) may add up in another order
than NumPy's own code; those registered with `numpy_value=True` hand out NumPy's value while
their operations give the derivative. Inputs here are large enough for the order to matter.
"""

import importlib.util

import numpy as np
import pytest

import pullback as pb

HAVE_SCIPY = importlib.util.find_spec("scipy") is not None
needs_scipy = pytest.mark.skipif(not HAVE_SCIPY, reason="needs SciPy")

rng = np.random.default_rng(3)
A = rng.standard_normal((40, 50))
S = A @ A.T + 40 * np.eye(40)
V = rng.standard_normal(1000)
WITH_NANS = np.where(rng.random(A.shape) < 0.1, np.nan, A)

CASES = {
    "dot of vectors": (lambda v: np.dot(v, v[::-1]), V),
    "quantile": (lambda a: np.quantile(a, [0.1, 0.77], axis=0), A),
    "percentile": (lambda a: np.percentile(a, 30.0, method="hazen"), A),
    "nanquantile": (lambda a: np.nanquantile(a, 0.4, axis=1), WITH_NANS),
    "nanvar": (np.nanvar, WITH_NANS),
    "nanstd": (lambda a: np.nanstd(a, 0, ddof=1), WITH_NANS),
    "cov": (np.cov, A),
    "corrcoef": (np.corrcoef, A),
    "gradient": (lambda a: np.gradient(a, 0.1, axis=1), A),
    "norm nuc": (lambda a: np.linalg.norm(a, "nuc"), A),
    "matrix_norm 2": (lambda a: np.linalg.matrix_norm(a, ord=2), A),
    "cond": (np.linalg.cond, S),
    "svdvals": (np.linalg.svdvals, A),
    "eigvalsh": (np.linalg.eigvalsh, S),
    "convolve": (lambda v: np.convolve(v, V[:50]), V),
    "correlate": (lambda v: np.correlate(v, V[:50], "same"), V),
    "kron": (lambda a: np.kron(a[:10, :10], A[10:20, :10]), A),
    "inner": (lambda a: np.inner(a, A), A),
    "vdot": (lambda a: np.vdot(a, A[::-1]), A),
    "linalg.vecdot": (lambda a: np.linalg.vecdot(a, A[::-1]), A),
    "geomspace": (lambda s: np.geomspace(s, 7.0 * s, 500), 1.3),
    "polyfit": (lambda y: np.polyfit(np.linspace(0, 1, 1000), y, 3), V),
}


NORMS = [(np.linalg.norm, V, o, {}) for o in (None, 2, 1, np.inf, -np.inf, 0, -1, 3, 0.5)] + \
        [(np.linalg.norm, A, o, {}) for o in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)] + \
        [(np.linalg.norm, A, o, {"axis": 1}) for o in (None, 1, 3)] + \
        [(np.linalg.vector_norm, A.reshape(5, 8, 50), o, {"axis": axis, "keepdims": keep})
         for o in (2, 1, np.inf, 3, 0) for axis in (None, 1, (0, 2), (2, 0)) for keep in (False, True)] + \
        [(np.linalg.matrix_norm, A.reshape(2, 20, 50), o, {}) for o in ("fro", "nuc", 2, -2, 1, np.inf)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_norm_keeps_numpys_value(dtype):
    for fn, x, order, options in NORMS:
        x = x.astype(dtype)
        got = pb.pullback(lambda x: fn(x, ord=order, **options) if fn is not np.linalg.norm else fn(x, order, **options), x)[0]
        want = fn(x, ord=order, **options) if fn is not np.linalg.norm else fn(x, order, **options)
        np.testing.assert_array_equal(got, want, strict=True, err_msg=f"{fn.__name__} ord={order} {options}")


def _assert_numpy_value(got, want):
    for g, w in zip(got, want) if isinstance(want, tuple) else [(got, want)]:
        np.testing.assert_array_equal(pb.stop_gradient(g), w, strict=True)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(CASES))
def test_reverse_mode_keeps_numpys_value(name, dtype):
    f, x = CASES[name]
    x = np.asarray(x, dtype=dtype)[()]
    _assert_numpy_value(pb.pullback(f, x)[0], f(x))


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_mode_and_second_order_keep_numpys_value(name):
    f, x = CASES[name]
    _assert_numpy_value(pb.jvp(f, (x,), (np.ones_like(x),))[0], f(x))
    seen = []

    def inner(x):
        y = f(x)
        seen.append(pb.stop_gradient(y))
        return np.sum(np.real(y) ** 2) if not isinstance(y, tuple) else np.sum(y[0] ** 2)

    pb.gradient(lambda x: np.sum(pb.gradient(inner, x)[0] ** 2), x)  # the traced value at two levels
    _assert_numpy_value(seen[0], f(x))


def test_the_derivative_is_the_composites_own():
    """Only the value is NumPy's: the gradient agrees with central differences, in both modes."""
    x = A[:6, :5]
    for f in (lambda a: np.quantile(a, [0.2, 0.9], axis=0), lambda a: np.linalg.norm(a, "nuc"), np.cov,
              lambda a: np.gradient(a, 0.3, axis=0)):
        assert pb.check_gradient(f, x)
    assert pb.check_gradient(lambda v: np.dot(v, v[::-1] * 2.0), V[:7])


@pytest.mark.parametrize("f", [np.cov, lambda a: np.linalg.norm(a, "nuc"), lambda a: np.dot(a[0], a[1])],
                         ids=["cov", "norm nuc", "dot"])
def test_jit_replays_the_composite_and_agrees_to_rounding(f):
    jitted = pb.jit(lambda a: pb.withgradient(lambda a: np.sum(f(a) ** 2), a))
    eager = pb.withgradient(lambda a: np.sum(f(a) ** 2), A)
    for _ in range(2):
        got = jitted(A)
        np.testing.assert_allclose(got.val, eager.val, rtol=1e-13)
        np.testing.assert_allclose(got.grad[0], eager.grad[0], rtol=1e-12, atol=1e-12)


@needs_scipy
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_scipy_stand_ins_keep_scipys_value(dtype):
    import scipy.special
    import scipy.stats

    from pullback.scipy import special, stats

    a = A.astype(dtype)
    for mine, theirs in [(lambda a: special.logsumexp(a, axis=0), lambda a: scipy.special.logsumexp(a, axis=0)),
                         (lambda a: special.logsumexp(a, b=np.abs(A)), lambda a: scipy.special.logsumexp(a, b=np.abs(A))),
                         (lambda a: special.softmax(a, axis=1), lambda a: scipy.special.softmax(a, axis=1)),
                         (lambda a: special.log_softmax(a, axis=1), lambda a: scipy.special.log_softmax(a, axis=1)),
                         (lambda a: stats.norm.logpdf(a, 0.5, 2.0), lambda a: scipy.stats.norm.logpdf(a, 0.5, 2.0)),
                         (lambda a: stats.t.cdf(a, 3.0, loc=0.2), lambda a: scipy.stats.t.cdf(a, 3.0, loc=0.2))]:
        _assert_numpy_value(pb.pullback(mine, a)[0], theirs(a))


@needs_scipy
def test_scipy_det_of_float32_keeps_scipys_float64_value():
    """SciPy computes a float32 determinant in float64; NumPy's float32 one overflows to inf here."""
    import scipy.linalg

    from pullback.scipy import linalg

    m = 90.0 * np.eye(20) + rng.standard_normal((20, 20))  # det about 1e39, past float32's 3.4e38
    want = scipy.linalg.det(m.astype(np.float32))
    value, (grad,) = pb.withgradient(linalg.det, m.astype(np.float32))
    assert np.isfinite(want) and np.isinf(np.linalg.det(m.astype(np.float32)))
    np.testing.assert_array_equal(value, want, strict=True)
    np.testing.assert_allclose(grad, np.linalg.det(m) * np.linalg.inv(m).T, rtol=1e-4)  # d det / dA = det A^-T
    assert grad.dtype == np.float32


# --- what NumPy reads as an array, a composite reads as one too -----------------------------------
L3 = [0.5, 1.5, 2.0]
X3 = np.array([0.3, 0.7, 1.2])

LIST_CASES = {
    "power of a list": lambda x: np.power(L3, x),
    "x ** list": lambda x: x ** L3,
    "list - x": lambda x: L3 - x,
    "x / tuple": lambda x: x / (1.0, 2.0, 3.0),
    "arctan2 of a list": lambda x: np.arctan2(L3, x),
    "hypot with a tuple": lambda x: np.hypot(x, (1.0, 2.0, 0.5)),
    "outer of a list": lambda x: np.multiply.outer(L3, x),
    "dot with a list": lambda x: np.dot(L3, x),
    "polyfit of lists": lambda y: np.polyfit([0.0, 1.0, 2.0], y, 1),
    "polyfit with list weights": lambda y: np.polyfit([0.0, 1.0, 2.0], y, 1, w=[1.0, 2.0, 1.0]),
    "polyfit in x": lambda x: np.polyfit(x, [0.0, 1.0, 3.0], 1),
    "trapezoid with list x": lambda y: np.trapezoid(y, [0.0, 1.0, 3.0]),
    "cov with list aweights": lambda y: np.cov(np.stack([y, y ** 2]), aweights=[1.0, 2.0, 3.0]),
}


@pytest.mark.parametrize("name", sorted(LIST_CASES))
def test_lists_and_tuples_are_read_as_arrays(name):
    f = LIST_CASES[name]
    _assert_numpy_value(pb.pullback(f, X3)[0], f(X3))
    _assert_numpy_value(pb.jvp(f, (X3,), (np.ones(3),))[0], f(X3))
    assert pb.check_gradient(f, X3)
