"""Cases a probe of pullback's SciPy support found wrong: each now gives SciPy's values and types, and
gradients that agree with finite differences, eagerly and under pb.jit."""

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient

pytest.importorskip("scipy")

from scipy import linalg as sl  # noqa: E402
from scipy import stats as st
from scipy.spatial import distance as sd  # noqa: E402

from pullback.scipy import linalg as pl  # noqa: E402
from pullback.scipy import special as ps
from pullback.scipy import stats as pst
from pullback.scipy.spatial import distance as pd  # noqa: E402


def _jit_gradient_matches(f, *args):
    jitted = pb.jit(lambda *a: pb.gradient(f, *a))
    jitted(*args)
    got, eager = jitted(*args), pb.gradient(f, *args)
    for g, e in zip(got, eager):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-15)
    return eager


@pytest.mark.parametrize("f", [
    lambda x: np.sum(ps.voigt_profile(x, 0.4, 0.2)),
    lambda x: np.sum(ps.voigt_profile(0.3, x, 0.5 * x)),
    lambda x: np.sum(ps.diric(x, 5)),
    lambda x: np.sum(ps.diric(0.01 * x, 4)),
], ids=["voigt x", "voigt sigma gamma", "diric", "diric near 0"])
def test_jit_gradient_of_composites_that_read_plain_values(f):
    # these read their arguments with np.asarray, which a pb.jit trace cannot follow (a JitError)
    _jit_gradient_matches(f, np.array([0.3, 1.2, 2.5, 4.7]))


def test_jit_gradient_of_subspace_angles():
    rng = np.random.RandomState(3)
    a, b = rng.randn(5, 2), rng.randn(5, 2)
    near = a @ np.array([[1.0, 0.1], [0.2, 1.0]]) + 0.01 * rng.randn(5, 2)  # small angles: the arcsin branch

    def f(a, b):
        return np.sum(pl.subspace_angles(a, b) * np.array([1.0, 2.0]))

    for other in (b, near):
        g = _jit_gradient_matches(f, a, other)
        n = numerical_gradient(lambda a, b: np.sum(sl.subspace_angles(a, b) * np.array([1.0, 2.0])), a, other)
        for gi, ni in zip(g, n):
            np.testing.assert_allclose(gi, ni, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("f", [
    lambda y: ps.logsumexp(y) ** 3,
    lambda y: ps.logsumexp(np.array([0.1, 0.2]), b=y) ** 3,
    lambda y: ps.logsumexp(y, return_sign=True)[0] ** 3,
    lambda y: np.sum(ps.softmax(y) * y ** 2),
    lambda y: np.sum(ps.log_softmax(y) * y ** 2),
], ids=["logsumexp", "logsumexp b", "logsumexp return_sign", "softmax", "log_softmax"])
def test_jit_of_python_float_through_scipy_valued_composites(f):
    # SciPy's own logsumexp got pb.jit's stand-in for the float and raised "Cannot interpret '0.3' as a data type"
    jitted, value = pb.jit(lambda x: pb.gradient(f, x)), pb.jit(f)
    for x in (0.3, 0.3, 1.7, 0.9):
        assert jitted(x) == pb.gradient(f, x)
        np.testing.assert_allclose(value(x), f(x), rtol=1e-15)  # the jitted y ** 3 may round differently
    assert type(jitted(0.3)[0]) is float


@pytest.mark.parametrize("name", ["cdist", "pdist"])
def test_callable_metric_gives_scipys_float64(name):
    x = np.random.RandomState(0).randn(4, 3).astype(np.float32)
    args = (x, x[:2] + 1.0) if name == "cdist" else (x,)

    def metric(u, v):
        return np.sum((u - v) ** 2) ** 0.5

    want = getattr(sd, name)(*args, metric)
    y, t = pb.jvp(lambda *a: getattr(pd, name)(*a, metric), args, tuple(np.ones_like(a) for a in args))
    assert y.dtype == want.dtype == np.float64 and t.dtype == np.float64
    np.testing.assert_allclose(y, want, rtol=1e-6)
    g = pb.gradient(lambda *a: np.sum(getattr(pd, name)(*a, metric)), *args)
    assert all(gi.dtype == np.float32 for gi in g)


@pytest.mark.parametrize("method", ["logpmf", "pmf"])
@pytest.mark.parametrize("x", [[2, 3, 5], [[2, 3, 5], [1, 1, 8]]])
def test_multinomial_gives_scipys_type(method, x):
    p = np.array([0.2, 0.3, 0.5])
    want = getattr(st.multinomial, method)(x, 10, p)  # logpmf of one x: a 0-d array; pmf: a NumPy scalar
    y, _ = pb.jvp(lambda p: getattr(pst.multinomial, method)(x, 10, p), (p,), (p,))
    assert type(y) is type(want)
    np.testing.assert_allclose(y, want, rtol=1e-12)
    jitted = pb.jit(lambda p: getattr(pst.multinomial, method)(x, 10, p))
    jitted(p)
    assert type(jitted(p)) is type(want)
    g = pb.gradient(lambda p: np.sum(getattr(pst.multinomial, method)(x, 10, p)), p)[0]
    n = numerical_gradient(lambda p: np.sum(getattr(st.multinomial, method)(x, 10, p / np.sum(p))), p)[0]
    # SciPy's p sums to 1 with its last entry read as 1 - sum(p[:-1]): compare along the simplex
    d = np.array([1.0, -1.0, 0.0])
    np.testing.assert_allclose(g @ d, n @ d, rtol=1e-5, atol=1e-8)
