"""Indexing, in-place writes, `where`, `clip` and the max/min ties, against central differences and by hand."""

import functools
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
import fd
from fd import assert_gradient, numerical_gradient

SETTINGS = settings(max_examples=25, deadline=None)
dtypes = st.sampled_from([np.float64, np.float32])
seeds = st.integers(0, 2**32 - 1)
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)
triples = hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=3)


tolerance = functools.partial(fd.tolerance, float32=(2e-3, 2e-4))


@st.composite
def array_and_basic_index(draw):
    shape = draw(shapes)
    if len(shape) == 1:
        index = draw(st.one_of(st.slices(shape[0]), st.integers(-shape[0], shape[0] - 1), st.just(Ellipsis)))
    else:
        index = draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    return shape, index


@st.composite
def array_and_advanced_index(draw):
    """Integer arrays (repeats allowed), a boolean mask, or integer arrays mixed with a slice."""
    shape = draw(shapes)
    kind = draw(st.sampled_from(["integers", "mask", "mixed", "list"]))
    if kind == "integers":
        result_shapes = hnp.array_shapes(min_dims=1, max_dims=2, max_side=5)
        index = draw(hnp.integer_array_indices(shape, result_shape=result_shapes))
    elif kind == "mask":
        index = draw(hnp.arrays(bool, shape))
    elif kind == "list":
        index = draw(st.lists(st.integers(-shape[0], shape[0] - 1), min_size=1, max_size=5))
    else:
        rows = draw(hnp.arrays(np.intp, draw(st.integers(1, 5)), elements=st.integers(-shape[0], shape[0] - 1)))
        index = (rows, slice(None, None, -1)) if len(shape) > 1 else (rows,)
    return shape, index


@SETTINGS
@given(spec=array_and_basic_index(), dtype=dtypes, seed=seeds)
def test_basic_indexing(spec, dtype, seed):
    shape, index = spec
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    w = rng.normal(size=np.shape(x[index]))
    assert_gradient(lambda x: np.sum(x[index] * w), x, **tolerance(dtype))


@SETTINGS
@given(spec=array_and_advanced_index(), dtype=dtypes, seed=seeds)
def test_advanced_indexing(spec, dtype, seed):
    shape, index = spec
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    w = rng.normal(size=np.shape(x[index]))
    assert_gradient(lambda x: np.sum(x[index] * w), x, **tolerance(dtype))


def test_repeated_integer_indices_accumulate():
    x = np.array([1.0, 2.0, 3.0])
    (g,) = pb.gradient(lambda x: np.sum(x[np.array([2, 0, 2, 2])] * np.array([1.0, 10.0, 100.0, 1000.0])), x)
    np.testing.assert_array_equal(g, [10.0, 0.0, 1101.0])


def test_indexing_twice_accumulates_into_one_gradient():
    x = np.arange(6.0).reshape(2, 3)
    (g,) = pb.gradient(lambda x: np.sum(x[0] * 2.0) + np.sum(x[:, 1] * 3.0) + x[1, 2] * 5.0 + np.sum(x[[1, 1]]), x)
    np.testing.assert_array_equal(g, [[2.0, 5.0, 2.0], [2.0, 5.0, 7.0]])


def test_iteration_and_negative_steps():
    x = np.arange(1.0, 5.0)
    (g,) = pb.gradient(lambda x: sum(v * k for k, v in enumerate(x)) + np.sum(x[::-2] * np.array([10.0, 20.0])), x)
    np.testing.assert_array_equal(g, [0.0, 21.0, 2.0, 13.0])


# --- in-place writes --------------------------------------------------------------------------
@SETTINGS
@given(spec=array_and_basic_index(), dtype=dtypes, seed=seeds, broadcast_value=st.booleans())
def test_basic_assignment_of_tracked_values(spec, dtype, seed, broadcast_value):
    shape, index = spec
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    target = np.shape(x[index])
    value_shape = target[-1:] if broadcast_value else target
    v = rng.normal(size=value_shape).astype(dtype)
    w = rng.normal(size=shape)

    def f(x, v):
        y = x * 1.0  # a fresh tracked array, not a view of anything
        y[index] = v * 3.0
        return np.sum(y * w)

    assert_gradient(f, x, v, **tolerance(dtype))


@SETTINGS
@given(spec=array_and_advanced_index(), dtype=dtypes, seed=seeds)
def test_advanced_assignment_of_tracked_values(spec, dtype, seed):
    shape, index = spec
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    v = rng.normal(size=np.shape(x[index])).astype(dtype)
    w = rng.normal(size=shape)

    def f(x, v):
        y = x * 1.0
        y[index] = np.sin(v)
        return np.sum(y * w)

    positions = np.arange(x.size).reshape(shape)[index]
    if np.unique(positions).size != positions.size:
        with pytest.raises(ValueError, match="same element more than once"):
            pb.gradient(f, x, v)
    else:
        assert_gradient(f, x, v, **tolerance(dtype))


def test_shift_into_zeros_like():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    w = np.array([1.0, 10.0, 100.0, 1000.0])

    def f(x):
        h = np.zeros_like(x)
        h[1:] = x[:-1] * 2
        return np.sum(h * w)

    (g,) = pb.gradient(f, x)
    np.testing.assert_array_equal(g, [20.0, 200.0, 2000.0, 0.0])
    assert_gradient(f, x)


def test_assign_into_an_argument_masks_the_overwritten_part():
    x, v = np.array([1.0, 2.0, 3.0, 4.0]), np.array([5.0, 6.0])

    def f(x, v):
        x[np.array([3, 0])] = v
        return np.sum(x * np.array([1.0, 2.0, 3.0, 4.0]))

    gx, gv = pb.gradient(f, x, v)
    np.testing.assert_array_equal(gx, [0.0, 2.0, 3.0, 0.0])
    np.testing.assert_array_equal(gv, [4.0, 1.0])
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0, 4.0])  # the caller's array is untouched


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_augmented_assignment(dtype):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(2, 3)).astype(dtype), rng.normal(size=3).astype(dtype)
    w = rng.normal(size=(2, 3))

    def f(x, y):
        before = x * 1.0
        x += y
        x *= y
        x -= 0.5
        x /= 2.0
        x **= 2
        return np.sum(x * w) + np.sum(before)

    gx, gy = pb.gradient(f, x, y)
    assert gx.dtype == gy.dtype == dtype
    for k, g in enumerate((gx, gy)):  # f writes into its plain arguments, so differences run on copies
        np.testing.assert_allclose(g, numerical_gradient(lambda x, y: f(x.copy(), y), (x, y), k), **tolerance(dtype))
    # By hand: x' = ((x + y) y - 0.5) / 2, f = sum(w x'^2) + sum(x).
    inner = ((x + y) * y - 0.5) / 2
    np.testing.assert_allclose(gx, w * inner * y + 1, **tolerance(dtype))
    np.testing.assert_allclose(gy, np.sum(w * inner * (x + 2 * y), axis=0), **tolerance(dtype))


def test_augmented_assignment_keeps_the_arrays_dtype():
    x = np.ones(3, np.float32)

    def f(x):
        x += np.ones(3)  # float64 added into a float32 array: NumPy keeps float32 (same_kind cast)
        assert x.dtype == np.float32
        return np.sum(x * x)

    (g,) = pb.gradient(f, x)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, [4.0, 4.0, 4.0])


def test_writing_into_a_view_raises():
    x = np.arange(4.0)

    def through_slice(x):
        v = x[1:]
        v[0] = 1.0
        return np.sum(x)

    def through_transpose(x):
        v = x.reshape(2, 2).T
        v += 1.0
        return np.sum(x)

    def into_base_of_a_view(x):
        v = x[:2]
        x[0] = 1.0
        return np.sum(v)

    for f in (through_slice, through_transpose, into_base_of_a_view):
        with pytest.raises(ValueError, match="shares memory"):
            pb.gradient(f, x)


def test_repeated_advanced_assignment_raises():
    x, v = np.arange(4.0), np.array([1.0, 2.0])

    def f(x, v):
        x[np.array([1, 1])] = v
        return np.sum(x)

    with pytest.raises(ValueError, match="same element more than once"):
        pb.gradient(f, x, v)


def test_writing_a_tracked_value_into_a_plain_array_raises():
    def setitem(x):
        h = np.zeros(3)
        h[:1] = x[:1]
        return np.sum(h)

    def augmented(x):
        h = np.zeros(3)
        h += x
        return np.sum(h)

    with pytest.raises(TypeError, match="gradient would be lost"):
        pb.gradient(setitem, np.ones(3))
    with pytest.raises(TypeError, match="out="):
        pb.gradient(augmented, np.ones(3))


# --- where, clip, maximum/minimum ------------------------------------------------------------
def separated(rng, shape, offset):
    """Multiples of 0.1 plus `offset`: values of different offsets never tie, so kinks are avoided."""
    return rng.integers(-10, 11, shape) / 10.0 + offset


@SETTINGS
@given(shapes=triples, dtype=dtypes, seed=seeds)
def test_where(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    s_cond, s_a, s_b = shapes.input_shapes
    condition = rng.uniform(size=s_cond) > 0.5
    a, b = rng.normal(size=s_a).astype(dtype), rng.normal(size=s_b).astype(dtype)
    w = rng.normal(size=shapes.result_shape)
    tol = tolerance(dtype)
    assert_gradient(lambda a, b: np.sum(np.where(condition, a, b) * w), a, b, **tol)
    assert_gradient(lambda a: np.sum(np.where(a > 0, a, 0.5) * w), a, **tol)  # a tracked condition, a Python float
    assert_gradient(lambda b: np.sum(np.where(condition, 0.0, b) * w), b, **tol)


@SETTINGS
@given(shapes=triples, dtype=dtypes, seed=seeds)
def test_clip(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    s_x, s_low, s_high = shapes.input_shapes
    x = separated(rng, s_x, 0.03).astype(dtype)
    low = separated(rng, s_low, 0.07).astype(dtype) - 0.5
    high = low + rng.uniform(0.2, 1.0, s_low).astype(dtype)  # low < high where they meet...
    high = np.broadcast_to(high, np.broadcast_shapes(s_low, s_high)).copy()
    w = rng.normal(size=np.broadcast_shapes(shapes.result_shape, high.shape))
    tol = tolerance(dtype)
    assert_gradient(lambda x, low, high: np.sum(np.clip(x, low, high) * w), x, low, high, **tol)
    assert_gradient(lambda x, low: np.sum(np.clip(x, low, None) * w), x, low, **tol)
    assert_gradient(lambda x, high: np.sum(x.clip(None, high) * w), x, high, **tol)
    assert_gradient(lambda x, low, high: np.sum(np.clip(x, min=low, max=high) * w), x, low, high, **tol)


def test_clip_by_hand():
    x = np.array([-2.0, 0.5, 3.0, 1.0])
    w = np.array([1.0, 2.0, 3.0, 4.0])
    gx, glow, ghigh = pb.gradient(lambda x, lo, hi: np.sum(np.clip(x, lo, hi) * w), x, 0.0, 1.5)
    np.testing.assert_array_equal(gx, [0.0, 2.0, 0.0, 4.0])
    assert (glow, ghigh) == (1.0, 3.0) and type(glow) is float


def test_clip_with_crossed_bounds_follows_the_upper_one():
    # NumPy does not check low <= high: clip(x, low, high) is min(max(x, low), high), which is always `high` here.
    x, low, high = np.array([-1.0, 2.5, 5.0]), np.array([2.0, 2.0, 2.0]), np.array([1.0, 1.0, 1.0])
    np.testing.assert_array_equal(np.clip(x, low, high), high)
    gx, glow, ghigh = pb.gradient(lambda x, low, high: np.sum(np.clip(x, low, high)), x, low, high)
    assert gx is None or not np.any(gx)
    assert glow is None or not np.any(glow)
    np.testing.assert_array_equal(ghigh, [1.0, 1.0, 1.0])


@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum, np.fmax, np.fmin])
def test_maximum_minimum_split_ties(ufunc):
    a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    b = np.array([1.0, 5.0, 0.0, 4.0], np.float32)
    w = np.array([2.0, 3.0, 5.0, 7.0])
    ga, gb = pb.gradient(lambda a, b: np.sum(ufunc(a, b) * w), a, b)
    a_wins = (a > b) if ufunc in (np.maximum, np.fmax) else (a < b)
    b_wins = (b > a) if ufunc in (np.maximum, np.fmax) else (b < a)
    tie = np.array([1.0, 0.0, 0.0, 1.0])
    np.testing.assert_array_equal(ga, w * (a_wins + 0.5 * tie))
    np.testing.assert_array_equal(gb, w * (b_wins + 0.5 * tie))
    assert ga.dtype == gb.dtype == np.float32


def test_maximum_with_a_scalar_tie_sums_the_broadcast_share():
    x = np.array([0.0, 1.0, -1.0, 0.0])
    gx, gs = pb.gradient(lambda x, s: np.sum(np.maximum(x, s)), x, 0.0)  # a relu with its threshold
    np.testing.assert_array_equal(gx, [0.5, 1.0, 0.0, 0.5])
    assert gs == 0.5 + 1.0 + 0.5


def test_python_scalars_never_promote_float32():
    x = np.array([-0.5, 0.25, 0.75, 1.5], np.float32)

    def f(x):
        parts = [
            np.where(x > 0, x, 0.5), np.where(x > 0, 2.0, x), np.clip(x, 0.0, 1.0), x.clip(None, 1.0), x[::2] * 2.5,
        ]
        assert all(p.dtype == np.float32 for p in parts), [p.dtype for p in parts]
        return sum(np.sum(p) for p in parts)

    (g,) = pb.gradient(f, x)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, [0 + 1 + 0 + 1 + 2.5, 1 + 0 + 1 + 1 + 0, 1 + 0 + 1 + 1 + 2.5, 1 + 0 + 0 + 0 + 0])
