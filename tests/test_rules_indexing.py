"""Indexing, in-place writes, `where`, take, diagonals and triangles, against central differences in both
modes and by hand."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from pullback.testing import numerical_gradient
from rule_checks import check_against_numpy, draw_axis, dtypes, gradcheck, second_order, seeds

SETTINGS = settings(max_examples=25, deadline=None)
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)
triples = hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=3)


def tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-7} if dtype == np.float64 else {"rtol": 2e-3, "atol": 2e-4}


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
    gradcheck(lambda x: np.sum(x[index] * w), x, **tolerance(dtype))


@SETTINGS
@given(spec=array_and_advanced_index(), dtype=dtypes, seed=seeds)
def test_advanced_indexing(spec, dtype, seed):
    shape, index = spec
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    w = rng.normal(size=np.shape(x[index]))
    gradcheck(lambda x: np.sum(x[index] * w), x, **tolerance(dtype))


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

    gradcheck(f, x, v, **tolerance(dtype))


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
        gradcheck(f, x, v, **tolerance(dtype))


def test_shift_into_zeros_like():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    w = np.array([1.0, 10.0, 100.0, 1000.0])

    def f(x):
        h = np.zeros_like(x)
        h[1:] = x[:-1] * 2
        return np.sum(h * w)

    (g,) = pb.gradient(f, x)
    np.testing.assert_array_equal(g, [20.0, 200.0, 2000.0, 0.0])
    gradcheck(f, x)


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
        np.testing.assert_allclose(g, numerical_gradient(lambda x, y: f(x.copy(), y), x, y)[k], **tolerance(dtype))
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


def test_writing_into_a_view_reaches_its_base():
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
        check_against_numpy(f, x.copy())


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


# --- where ----------------------------------------------------------------------------------
@SETTINGS
@given(shapes=triples, dtype=dtypes, seed=seeds)
def test_where(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    s_cond, s_a, s_b = shapes.input_shapes
    condition = rng.uniform(size=s_cond) > 0.5
    a, b = rng.normal(size=s_a).astype(dtype), rng.normal(size=s_b).astype(dtype)
    w = rng.normal(size=shapes.result_shape)
    tol = tolerance(dtype)
    gradcheck(lambda a, b: np.sum(np.where(condition, a, b) * w), a, b, **tol)
    gradcheck(lambda a: np.sum(np.where(a > 0, a, 0.5) * w), a, **tol)  # a tracked condition, a Python float
    gradcheck(lambda b: np.sum(np.where(condition, 0.0, b) * w), b, **tol)


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


# --- take, diagonals and triangles --------------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(shape=shapes, seed=seeds)
def test_take_and_take_along_axis(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    axis = draw_axis(rng, len(shape))
    n = shape[axis]
    index = rng.integers(-n, n, (2, 3))  # repeated and negative indices
    check_against_numpy(lambda x: np.take(x, index, axis=axis), x)
    flat_index = rng.integers(0, x.size, 4)
    check_against_numpy(lambda x: np.take(x, flat_index), x)
    check_against_numpy(lambda x: np.take(x, [n + 1, -n - 2], axis=axis, mode="clip"), x)
    check_against_numpy(lambda x: np.take(x, [n + 1, -n - 2], axis=axis, mode="wrap"), x)
    along = list(shape)
    along[axis] = 3
    indices = rng.integers(0, n, along)
    check_against_numpy(lambda x: np.take_along_axis(x, indices, axis=axis), x)
    flat_index = rng.integers(0, x.size, 5)
    check_against_numpy(lambda x: np.take_along_axis(x, flat_index, axis=None), x)


@settings(max_examples=10, deadline=None)
@given(shape=hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=4), dtype=dtypes, seed=seeds)
def test_diagonals_and_triangles(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    offset = int(rng.integers(-2, 3))
    check_against_numpy(lambda x: np.diagonal(x, offset, -1, 0), x, dtype=dtype)
    check_against_numpy(lambda x: x.diagonal(offset), x, dtype=dtype)
    check_against_numpy(lambda x: np.linalg.diagonal(x, offset=offset), x, dtype=dtype)
    check_against_numpy(lambda x: np.triu(x, offset), x, dtype=dtype)
    check_against_numpy(lambda x: np.tril(x, offset), x, dtype=dtype)
    check_against_numpy(lambda x: np.diag(x[(0,) * (len(shape) - 2)], offset), x, dtype=dtype)
    v = x.reshape(-1)
    check_against_numpy(lambda v: np.diag(v, offset), v, dtype=dtype)
    check_against_numpy(lambda v: np.diagflat(v, offset), v, dtype=dtype)
    check_against_numpy(lambda v: np.tril(v, offset), v, dtype=dtype)  # 1-D input gives a 2-D mask, as in NumPy


def test_diag_second_order_and_view_writes_refused():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    second_order(lambda x: np.diag(np.diagonal(x) ** 3), x)
    second_order(lambda x: np.triu(x * x, 1), x)

    def write_into_view(x):
        d = np.diagonal(x)
        d[0] = 1.0
        return np.sum(d)

    with pytest.raises(ValueError, match="shares memory"):
        pb.gradient(write_into_view, x)


_AXIS_OUT_OF_RANGE = {
    "diff": lambda x: np.diff(x, axis=2),
    "trapezoid": lambda x: np.trapezoid(x, axis=2),
    "split": lambda x: np.split(x, 1, axis=2)[0],
    "array_split": lambda x: np.array_split(x, 1, axis=-3)[0],
    "apply_along_axis": lambda x: np.apply_along_axis(np.sum, 2, x),
    "apply_over_axes": lambda x: np.apply_over_axes(np.sum, x, [2]),
    "tensordot": lambda x: np.tensordot(x, x, axes=([2], [2])),
    "diagonal": lambda x: np.diagonal(x, axis1=0, axis2=-3),
    "trace": lambda x: np.trace(x, axis1=0, axis2=-3),
    "take_along_axis": lambda x: np.take_along_axis(x, np.zeros((2, 3), dtype=int), axis=2),
    "put_along_axis": lambda x: np.put_along_axis(x.copy(), np.zeros((2, 3), dtype=int), 1.0, axis=-3),
}


@pytest.mark.parametrize("name", sorted(_AXIS_OUT_OF_RANGE))
def test_an_axis_out_of_range_raises_as_in_numpy(name):
    f = _AXIS_OUT_OF_RANGE[name]
    x = np.ones((2, 3))
    with pytest.raises(IndexError):  # NumPy's AxisError is an IndexError (and a ValueError)
        f(x)
    with pytest.raises(IndexError):
        pb.pullback(f, x)


@pytest.mark.parametrize("value", [0.5, -2.0, np.float64(0.5), np.array(0.5)])
def test_piecewise_of_a_number_being_differentiated_is_a_zero_d_array_as_in_numpy(value):
    f = lambda s: np.piecewise(s, [s < 0, s >= 0], [lambda v: -v, lambda v: v ** 2])
    val, (g,) = pb.withgradient(f, value)
    expected = f(value)
    assert type(val) is type(expected) and val.shape == () and val == expected
    assert g == (-1.0 if value < 0 else 2 * value)
