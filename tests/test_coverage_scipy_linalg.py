"""The differentiable scipy.linalg functions (solve_triangular, cho_factor/cho_solve, expm,
lu_factor/lu_solve) against float64 central differences and SciPy's own values, with a
second-order check per function."""

import functools
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pullback as pb
import fd
from fd import assert_gradient, project

sl = pytest.importorskip("scipy.linalg")
ours = pytest.importorskip("pullback.rules.scipy_linalg")

SETTINGS = settings(max_examples=8, deadline=None)
seeds = st.integers(0, 2**32 - 1)
sizes = st.integers(1, 4)
dtypes = st.sampled_from([np.float64, np.float32])


tolerance = functools.partial(fd.tolerance, float32=(1e-2, 1e-3))



def second_order(f, x, seed=1):
    v = np.random.default_rng(seed).normal(size=np.shape(x))
    assert_gradient(lambda x: np.sum(pb.gradient(f, x)[0] * v), x, rtol=1e-4, atol=1e-6)


def check(ours_fn, scipy_fn, *args, dtype=np.float64):
    assert_gradient(lambda *a: project(ours_fn(*a)), *args, **tolerance(dtype))
    np.testing.assert_allclose(pb.pullback(ours_fn, *args)[0], scipy_fn(*args), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours_fn(*args), scipy_fn(*args))  # plain input: SciPy itself


def spd(rng, n):
    m = rng.normal(size=(n, n))
    return m @ m.T + n * np.eye(n)


@SETTINGS
@given(n=sizes, vector=st.booleans(), trans=st.sampled_from([0, 1, "T", "C", "N"]), lower=st.booleans(),
       unit=st.booleans(), dtype=dtypes, seed=seeds)
def test_solve_triangular(n, vector, trans, lower, unit, dtype, seed):
    rng = np.random.default_rng(seed)
    a = (rng.normal(size=(n, n)) + 3.0 * np.eye(n)).astype(dtype)  # the other triangle is read by no one
    b = rng.normal(size=(n,) if vector else (n, 2)).astype(dtype)
    kw = dict(trans=trans, lower=lower, unit_diagonal=unit)
    check(lambda a, b: ours.solve_triangular(a, b, **kw), lambda a, b: sl.solve_triangular(a, b, **kw), a, b,
          dtype=dtype)
    (g,) = pb.gradient(lambda a: project(ours.solve_triangular(a, b, **kw)), a)
    ignored = np.triu(g, 0 if unit else 1) if lower else np.tril(g, 0 if unit else -1)
    assert np.all(ignored == 0)


@SETTINGS
@given(n=sizes, lower=st.booleans(), seed=seeds)
def test_cho_factor_and_cho_solve(n, lower, seed):
    rng = np.random.default_rng(seed)
    s, b = spd(rng, n), rng.normal(size=(n, 2))
    check(lambda s: ours.cho_factor(s, lower=lower)[0], lambda s: sl.cho_factor(s, lower=lower)[0], s)
    check(lambda s, b: ours.cho_solve(ours.cho_factor(s, lower=lower), b),
          lambda s, b: sl.cho_solve(sl.cho_factor(s, lower=lower), b), s, b)
    assert pb.pullback(lambda s: ours.cho_factor(s, lower=lower)[1], s)[0] is lower


@SETTINGS
@given(batch=st.sampled_from([(), (2,)]), n=sizes, dtype=dtypes, seed=seeds)
def test_expm(batch, n, dtype, seed):
    a = (np.random.default_rng(seed).normal(size=batch + (n, n)) / 2.0).astype(dtype)
    check(ours.expm, sl.expm, a, dtype=dtype)


@SETTINGS
@given(n=sizes, trans=st.sampled_from([0, 1, 2]), seed=seeds)
def test_lu_factor_and_lu_solve(n, trans, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(n, n)) + 3.0 * np.eye(n), rng.normal(size=(n, 2))  # well conditioned: finite differences stay accurate
    check(lambda a: ours.lu_factor(a)[0], lambda a: sl.lu_factor(a)[0], a)
    check(lambda a, b: ours.lu_solve(ours.lu_factor(a), b, trans=trans),
          lambda a, b: sl.lu_solve(sl.lu_factor(a), b, trans=trans), a, b)
    np.testing.assert_array_equal(pb.pullback(lambda a: ours.lu_factor(a)[1], a)[0], sl.lu_factor(a)[1])


def test_second_order():
    rng = np.random.default_rng(3)
    a, s, b = rng.normal(size=(3, 3)) + 2 * np.eye(3), spd(rng, 3), rng.normal(size=3)
    second_order(lambda a: project(ours.solve_triangular(a, b, lower=True)), a)
    second_order(lambda s: project(ours.cho_solve(ours.cho_factor(s), b)), s)
    second_order(lambda a: project(ours.expm(a / 3.0)), a)
    second_order(lambda a: project(ours.lu_solve(ours.lu_factor(a), b)), a)
    second_order(lambda a: project(ours.lu_factor(a)[0]), a)


def test_batched_triangular_input_is_refused_clearly():
    with pytest.raises(ValueError, match="square 2-D"):
        pb.gradient(lambda a: np.sum(ours.solve_triangular(a, np.ones(2))), np.ones((2, 2, 2)))
