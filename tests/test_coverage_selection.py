"""flip, roll, tile, repeat, pad, split, take, diagonals, triangles, sort, partition, meshgrid,
interp, kron, inner, vdot, convolve and correlate against float64 central differences over random
shapes, their forward values against NumPy, and a second-order check per family."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from fd import assert_gradient, project, tolerance

SETTINGS = settings(max_examples=10, deadline=None)
seeds = st.integers(0, 2**32 - 1)
dtypes = st.sampled_from([np.float64, np.float32])
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)




def check(fn, *args, dtype=np.float64):
    """Gradient of project(fn(*args)) against central differences, and the traced value against NumPy."""
    assert_gradient(lambda *a: project(fn(*a)), *args, **tolerance(dtype))
    traced = pb.pullback(fn, *args)[0]
    expected = fn(*args)
    for got, want in zip(traced, expected) if isinstance(expected, (tuple, list)) else [(traced, expected)]:
        exact = dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-6 if exact else 1e-4, atol=1e-12 if exact else 1e-5)
        assert np.shape(got) == np.shape(want)


def second_order(f, x, seed=1):
    v = np.random.default_rng(seed).normal(size=np.shape(x))
    assert_gradient(lambda x: np.sum(pb.gradient(f, x)[0] * v), x, rtol=1e-4, atol=1e-6)


def draw_axis(rng, ndim):
    return int(rng.integers(-ndim, ndim))


@SETTINGS
@given(shape=shapes, dtype=dtypes, seed=seeds)
def test_flip_roll_tile(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    axis = draw_axis(rng, len(shape))
    check(lambda x: np.flip(x, axis), x, dtype=dtype)
    check(lambda x: np.flip(x), x, dtype=dtype)
    shift = int(rng.integers(-5, 6))
    check(lambda x: np.roll(x, shift, axis), x, dtype=dtype)
    shifts = tuple(int(s) for s in rng.integers(-3, 4, len(shape)))
    check(lambda x: np.roll(x, shifts, tuple(range(len(shape)))), x, dtype=dtype)
    check(lambda x: np.roll(x, 3), x, dtype=dtype)
    reps = tuple(int(r) for r in rng.integers(1, 3, int(rng.integers(1, 4))))
    check(lambda x: np.tile(x, reps), x, dtype=dtype)


@SETTINGS
@given(shape=shapes, dtype=dtypes, seed=seeds)
def test_repeat(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    axis = draw_axis(rng, len(shape))
    check(lambda x: np.repeat(x, 2), x, dtype=dtype)
    check(lambda x: np.repeat(x, 3, axis=axis), x, dtype=dtype)
    counts = rng.integers(0, 3, shape[axis])
    check(lambda x: np.repeat(x, counts, axis=axis), x, dtype=dtype)
    check(lambda x: x.repeat(2, axis), x, dtype=dtype)


def test_repeat_second_order():
    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]])
    second_order(lambda x: project(np.repeat(x, [2, 0, 3], axis=1) ** 3), x)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
@SETTINGS
@given(shape=shapes, seed=seeds)
def test_pad(mode, shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    widths = [tuple(int(w) for w in rng.integers(0, 4, 2)) for _ in shape]
    check(lambda x: np.pad(x, widths, mode=mode), x)
    check(lambda x: np.pad(x, 2, mode=mode), x)
    if mode == "constant":
        check(lambda x: np.pad(x, 1, constant_values=0.5), x)


def test_pad_refuses_other_modes():
    with pytest.raises(NotImplementedError, match="supported modes"):
        pb.gradient(lambda x: np.sum(np.pad(x, 1, mode="mean")), np.ones(3))
    with pytest.raises(NotImplementedError, match="supported modes"):
        pb.gradient(lambda x: np.sum(np.pad(x, 1, mode="reflect", reflect_type="odd")), np.ones(3))


@SETTINGS
@given(shape=shapes, seed=seeds)
def test_split_family(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    axis = draw_axis(rng, len(shape))
    n = shape[axis]
    cuts = sorted(int(c) for c in rng.integers(0, n + 2, 2))
    check(lambda x: np.split(x, cuts, axis=axis), x)
    sections = int(rng.integers(1, 5))
    check(lambda x: np.array_split(x, sections, axis=axis), x)
    check(lambda x: np.split(x, 1, axis=axis), x)
    check(lambda x: np.hsplit(x, [1]), x)
    if len(shape) >= 2:
        check(lambda x: np.vsplit(x, [1]), x)
    if len(shape) >= 3:
        check(lambda x: np.dsplit(x, [1]), x)
    if n > 1 and n % 2:
        with pytest.raises(ValueError, match="equal division"):
            pb.gradient(lambda x: project(np.split(x, 2, axis=axis)[0]), x)


@SETTINGS
@given(shape=shapes, seed=seeds)
def test_take_and_take_along_axis(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    axis = draw_axis(rng, len(shape))
    n = shape[axis]
    index = rng.integers(-n, n, (2, 3))  # repeated and negative indices
    check(lambda x: np.take(x, index, axis=axis), x)
    flat_index = rng.integers(0, x.size, 4)
    check(lambda x: np.take(x, flat_index), x)
    check(lambda x: np.take(x, [n + 1, -n - 2], axis=axis, mode="clip"), x)
    check(lambda x: np.take(x, [n + 1, -n - 2], axis=axis, mode="wrap"), x)
    along = list(shape)
    along[axis] = 3
    indices = rng.integers(0, n, along)
    check(lambda x: np.take_along_axis(x, indices, axis=axis), x)
    flat_index = rng.integers(0, x.size, 5)
    check(lambda x: np.take_along_axis(x, flat_index, axis=None), x)


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=4), dtype=dtypes, seed=seeds)
def test_diagonals_and_triangles(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    offset = int(rng.integers(-2, 3))
    check(lambda x: np.diagonal(x, offset, -1, 0), x, dtype=dtype)
    check(lambda x: x.diagonal(offset), x, dtype=dtype)
    check(lambda x: np.linalg.diagonal(x, offset=offset), x, dtype=dtype)
    check(lambda x: np.triu(x, offset), x, dtype=dtype)
    check(lambda x: np.tril(x, offset), x, dtype=dtype)
    check(lambda x: np.diag(x[(0,) * (len(shape) - 2)], offset), x, dtype=dtype)
    v = x.reshape(-1)
    check(lambda v: np.diag(v, offset), v, dtype=dtype)
    check(lambda v: np.diagflat(v, offset), v, dtype=dtype)
    check(lambda v: np.tril(v, offset), v, dtype=dtype)  # 1-D input gives a 2-D mask, as in NumPy


def test_diag_second_order_and_view_writes_refused():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    second_order(lambda x: project(np.diag(np.diagonal(x) ** 3)), x)
    second_order(lambda x: project(np.triu(x * x, 1)), x)

    def write_into_view(x):
        d = np.diagonal(x)
        d[0] = 1.0
        return np.sum(d)

    with pytest.raises(ValueError, match="shares memory"):
        pb.gradient(write_into_view, x)


@SETTINGS
@given(shape=shapes, seed=seeds)
def test_sort_and_partition(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)  # distinct with probability 1
    axis = draw_axis(rng, len(shape))
    check(lambda x: np.sort(x, axis=axis), x)
    check(lambda x: np.sort(x, axis=None), x)
    kth = int(rng.integers(0, shape[axis]))
    # Only the kth element's position is defined by NumPy; its value is what we compare.
    take_kth = lambda y: np.take(y, [kth], axis=axis)  # noqa: E731
    check(lambda x: take_kth(np.partition(x, kth, axis=axis)), x)


def test_sort_with_ties_gives_each_element_one_gradient():
    g = pb.gradient(lambda x: np.sort(x)[0] * 1.0 + np.sort(x)[1] * 10.0, np.array([2.0, 2.0, 3.0]))[0]
    assert sorted(g.tolist()) == [0.0, 1.0, 10.0]


@SETTINGS
@given(n=st.integers(1, 3), sparse=st.booleans(), indexing=st.sampled_from(["xy", "ij"]), seed=seeds)
def test_meshgrid(n, sparse, indexing, seed):
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=int(rng.integers(1, 4))) for _ in range(n)]
    check(lambda *xs: np.meshgrid(*xs, sparse=sparse, indexing=indexing), *xs)


@SETTINGS
@given(points=st.integers(2, 6), queries=hnp.array_shapes(min_dims=0, max_dims=2, max_side=4), ends=st.booleans(),
       seed=seeds)
def test_interp(points, queries, ends, seed):
    rng = np.random.default_rng(seed)
    xp = np.cumsum(rng.uniform(0.3, 1.0, points))
    fp = rng.normal(size=points)
    x = rng.uniform(xp[0] - 1.0, xp[-1] + 1.0, queries)
    x = np.where(np.min(np.abs(x[..., None] - xp), axis=-1) < 1e-3, x + 0.01, x)  # away from the kinks
    if ends:
        check(lambda x, xp, fp, left, right: np.interp(x, xp, fp, left, right), x, xp, fp, -0.5, 0.25)
    else:
        check(lambda x, xp, fp: np.interp(x, xp, fp), x, xp, fp)


def test_interp_second_order_and_refusals():
    xp, fp = np.array([0.0, 1.0, 2.5]), np.array([1.0, -1.0, 2.0])
    x = np.array([0.3, 1.7, 2.2])
    assert_gradient(lambda xp: np.sum(pb.gradient(lambda fp: project(np.interp(x, xp, fp) ** 2), fp)[0]), xp, rtol=1e-4)
    second_order(lambda fp: project(np.interp(x, xp, fp) ** 2), fp)
    with pytest.raises(NotImplementedError, match="period"):
        pb.gradient(lambda fp: np.sum(np.interp(x, xp, fp, period=2.0)), fp)


@SETTINGS
@given(sa=hnp.array_shapes(min_dims=0, max_dims=3, max_side=3), sb=hnp.array_shapes(min_dims=0, max_dims=3, max_side=3),
       dtype=dtypes, seed=seeds)
def test_kron_inner_vdot(sa, sb, dtype, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=sa).astype(dtype), rng.normal(size=sb).astype(dtype)
    check(np.kron, a, b, dtype=dtype)
    if sa and sb:
        b_inner = rng.normal(size=sb[:-1] + sa[-1:]).astype(dtype)
        check(np.inner, a, b_inner, dtype=dtype)
    check(np.inner, a, np.asarray(dtype(1.5)), dtype=dtype)
    c = rng.normal(size=a.size).astype(dtype)
    check(np.vdot, a, c, dtype=dtype)


def test_kron_second_order():
    a, b = np.array([[1.0, 2.0], [0.5, -1.0]]), np.array([0.3, -0.2, 0.9])
    second_order(lambda a: project(np.kron(a, b) ** 2), a)


@pytest.mark.parametrize("fn", [np.convolve, np.correlate])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@SETTINGS
@given(m=st.integers(1, 7), n=st.integers(1, 7), dtype=dtypes, seed=seeds)
def test_convolve_correlate(fn, mode, m, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a, v = rng.normal(size=m).astype(dtype), rng.normal(size=n).astype(dtype)
    check(lambda a, v: fn(a, v, mode), a, v, dtype=dtype)


def test_convolve_second_order():
    a, v = np.array([1.0, -2.0, 0.5, 3.0]), np.array([0.2, 0.7])
    second_order(lambda a: project(np.convolve(a, a, "same") * np.correlate(a, v, "full")[:4]), a)


def test_second_order_through_the_rearrangements():
    x = np.random.default_rng(9).normal(size=(3, 4))
    index = np.array([[2, 0, 0, 1]] * 3)
    for f in (
        lambda x: project(np.sort(x, axis=1) ** 3),
        lambda x: project(np.partition(x, 1, axis=0)[1] ** 3),
        lambda x: project(np.pad(x, ((1, 2), (2, 1)), mode="reflect") ** 3),
        lambda x: project(np.pad(x, 1) ** 3),
        lambda x: project(np.roll(np.flip(x, 0), 2) ** 3),
        lambda x: project(np.tile(x, 2) ** 3),
        lambda x: project(np.take_along_axis(x, index, 1) ** 3) + project(np.take(x, [0, 0, 5]) ** 3, 1),
        lambda x: sum(project(p ** 3, k) for k, p in enumerate(np.array_split(x, 3, axis=1))),
        lambda x: sum(project(g ** 3, k) for k, g in enumerate(np.meshgrid(x[0], x[1]))),
        lambda x: project(np.inner(x, x) ** 2 + np.vdot(x, x) ** 2),
    ):
        second_order(f, x)
