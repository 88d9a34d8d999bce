"""Reshaping, joining and copying rules (functions and methods) against central differences."""

import functools
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
import fd
from fd import assert_gradient

SETTINGS = settings(max_examples=25, deadline=None)
dtypes = st.sampled_from([np.float64, np.float32])
seeds = st.integers(0, 2**32 - 1)
shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4)


tolerance = functools.partial(fd.tolerance, float32=(2e-3, 2e-4))


def check(op, x, rng, dtype):
    """`op(x)` weighted by random numbers, summed: exercises every entry of the Jacobian transpose."""
    y = op(x)
    w = rng.normal(size=np.shape(y))
    grads = assert_gradient(lambda x: np.sum(op(x) * w), x, **tolerance(dtype))
    return y, grads


def random_array(rng, shape, dtype):
    return rng.normal(size=shape).astype(dtype)


@SETTINGS
@given(shape=shapes, dtype=dtypes, seed=seeds, data=st.data())
def test_reshape_ravel_and_methods(shape, dtype, seed, data):
    rng = np.random.default_rng(seed)
    x = random_array(rng, shape, dtype)
    size = int(np.prod(shape))
    new = data.draw(st.sampled_from([(size,), (1, size), (size, 1, 1), (-1,), (1, -1)]), label="new shape")
    order = data.draw(st.sampled_from(["C", "F"]), label="order")
    check(lambda x: np.reshape(x, new, order=order), x, rng, dtype)
    check(lambda x: x.reshape(new), x, rng, dtype)
    check(lambda x: x.reshape(*new), x, rng, dtype)
    check(lambda x: np.ravel(x, order=order), x, rng, dtype)
    check(lambda x: x.ravel(), x, rng, dtype)
    check(lambda x: x.flatten(), x, rng, dtype)


def test_reshape_method_with_two_ints():
    rng = np.random.default_rng(0)
    x = rng.normal(size=6)
    y, _ = check(lambda x: x.reshape(2, 3), x, rng, np.float64)
    assert np.shape(y) == (2, 3)


@SETTINGS
@given(shape=shapes, dtype=dtypes, seed=seeds, data=st.data())
def test_transpose_swapaxes_moveaxis(shape, dtype, seed, data):
    rng = np.random.default_rng(seed)
    x = random_array(rng, shape, dtype)
    ndim = len(shape)
    check(np.transpose, x, rng, dtype)
    check(lambda x: x.T, x, rng, dtype)
    check(lambda x: x.transpose(), x, rng, dtype)
    if ndim == 0:
        return
    perm = data.draw(st.permutations(range(ndim)), label="axes")
    signed = [a - ndim if k % 2 else a for k, a in enumerate(perm)]  # some negative spellings
    check(lambda x: np.transpose(x, signed), x, rng, dtype)
    check(lambda x: x.transpose(perm), x, rng, dtype)
    check(lambda x: x.transpose(*perm), x, rng, dtype)
    axis = st.integers(-ndim, ndim - 1)
    a1, a2 = data.draw(axis, label="axis1"), data.draw(axis, label="axis2")
    check(lambda x: np.swapaxes(x, a1, a2), x, rng, dtype)
    check(lambda x: x.swapaxes(a1, a2), x, rng, dtype)
    check(lambda x: np.moveaxis(x, a1, a2), x, rng, dtype)
    k = data.draw(st.integers(1, ndim), label="number of axes moved")
    source = data.draw(st.permutations(range(ndim)), label="source")[:k]
    destination = data.draw(st.permutations(range(ndim)), label="destination")[:k]
    check(lambda x: np.moveaxis(x, source, destination), x, rng, dtype)
    if ndim >= 2:
        check(lambda x: x.mT, x, rng, dtype)


@SETTINGS
@given(shape=shapes, dtype=dtypes, seed=seeds, data=st.data())
def test_expand_dims_squeeze(shape, dtype, seed, data):
    rng = np.random.default_rng(seed)
    x = random_array(rng, shape, dtype)
    ndim = len(shape)
    axis = data.draw(st.integers(-ndim - 1, ndim), label="new axis")
    check(lambda x: np.expand_dims(x, axis), x, rng, dtype)
    count = data.draw(st.integers(1, 2), label="how many new axes")
    new_axes = st.lists(st.integers(0, ndim + count - 1), min_size=count, max_size=count, unique=True)
    axes = data.draw(new_axes, label="new axes")
    check(lambda x: np.expand_dims(x, tuple(axes)), x, rng, dtype)
    padded = random_array(rng, shape[:1] + (1,) + shape[1:] + (1,), dtype)
    check(np.squeeze, padded, rng, dtype)
    check(lambda x: x.squeeze(), padded, rng, dtype)
    check(lambda x: np.squeeze(x, axis=-1), padded, rng, dtype)
    check(lambda x: np.squeeze(x, axis=(min(1, ndim), -1)), padded, rng, dtype)


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=1, max_dims=3, max_side=4), dtype=dtypes, seed=seeds)
def test_broadcast_to(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    (shape,), target = shapes.input_shapes, shapes.result_shape
    target = (2,) + target  # also a new leading axis
    x = random_array(rng, shape, dtype)
    y, _ = check(lambda x: np.broadcast_to(x, target), x, rng, dtype)
    assert np.shape(y) == target


@st.composite
def joinable(draw, same_shape=False):
    """Two or three arrays that agree on every axis but `axis` (unless `same_shape`)."""
    base = list(draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3)))
    ndim = len(base)
    axis = draw(st.integers(-ndim, ndim - 1))
    count = draw(st.integers(1, 3))
    result = []
    for _ in range(count):
        shape = list(base)
        if not same_shape:
            shape[axis] = draw(st.integers(1, 3))
        result.append(tuple(shape))
    return result, axis


@SETTINGS
@given(spec=joinable(), dtype=dtypes, seed=seeds, mixed=st.booleans())
def test_concatenate(spec, dtype, seed, mixed):
    shapes, axis = spec
    rng = np.random.default_rng(seed)
    arrays = [random_array(rng, s, dtype) for s in shapes]
    plain = random_array(rng, shapes[0], dtype)  # an untracked piece in the middle
    y = np.concatenate(arrays, axis=axis)
    w = rng.normal(size=y.shape)
    tol = tolerance(dtype)
    assert_gradient(lambda *xs: np.sum(np.concatenate(xs, axis=axis) * w), *arrays, **tol)
    if mixed:
        w2 = rng.normal(size=np.concatenate([arrays[0], plain] + arrays[1:], axis=axis).shape)
        assert_gradient(lambda *xs: np.sum(np.concatenate([xs[0], plain, *xs[1:]], axis=axis) * w2), *arrays, **tol)


@SETTINGS
@given(shapes=st.lists(shapes, min_size=1, max_size=3), dtype=dtypes, seed=seeds)
def test_concatenate_axis_none(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    arrays = [random_array(rng, s, dtype) for s in shapes]
    w = rng.normal(size=sum(int(np.prod(s)) for s in shapes))
    assert_gradient(lambda *xs: np.sum(np.concatenate(xs, axis=None) * w), *arrays, **tolerance(dtype))


@SETTINGS
@given(spec=joinable(same_shape=True), dtype=dtypes, seed=seeds, data=st.data())
def test_stack(spec, dtype, seed, data):
    shapes, _ = spec
    ndim = len(shapes[0])
    axis = data.draw(st.integers(-ndim - 1, ndim), label="stack axis")
    rng = np.random.default_rng(seed)
    arrays = [random_array(rng, s, dtype) for s in shapes]
    w = rng.normal(size=np.stack(arrays, axis=axis).shape)
    assert_gradient(lambda *xs: np.sum(np.stack(xs, axis=axis) * w), *arrays, **tolerance(dtype))


@SETTINGS
@given(spec=joinable(), dtype=dtypes, seed=seeds)
def test_vstack_hstack(spec, dtype, seed):
    shapes, _ = spec
    rng = np.random.default_rng(seed)
    tol = tolerance(dtype)
    # vstack joins along axis 0 after atleast_2d; hstack along axis 1 (axis 0 for 1-D).
    if len(shapes[0]) >= 2:
        rows = [random_array(rng, (n,) + shapes[0][1:], dtype) for n in (1, 2)]
        w = rng.normal(size=np.vstack(rows).shape)
        assert_gradient(lambda *xs: np.sum(np.vstack(xs) * w), *rows, **tol)
    a, b = random_array(rng, (3,), dtype), random_array(rng, (3,), dtype)
    w = rng.normal(size=(2, 3))  # two 1-D vectors become the rows of a matrix
    assert_gradient(lambda a, b: np.sum(np.vstack([a, b]) * w), a, b, **tol)
    c = random_array(rng, (1,), dtype)
    w = rng.normal(size=4)  # 1-D vectors of different lengths join end to end
    assert_gradient(lambda a, c: np.sum(np.hstack([a, c]) * w), a, c, **tol)
    if len(shapes[0]) >= 2:
        cols = [random_array(rng, shapes[0][:1] + (n,) + shapes[0][2:], dtype) for n in (1, 3)]
        w = rng.normal(size=np.hstack(cols).shape)
        assert_gradient(lambda *xs: np.sum(np.hstack(xs) * w), *cols, **tol)


@pytest.mark.parametrize("atleast", [np.atleast_1d, np.atleast_2d, np.atleast_3d])
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=3), dtype=dtypes, seed=seeds)
def test_atleast(atleast, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = random_array(rng, shape, dtype)
    y, _ = check(atleast, x, rng, dtype)
    assert np.shape(y) == np.shape(atleast(x))
    z = random_array(rng, shape[:1], dtype)
    w1, w2 = (rng.normal(size=np.shape(r)) for r in atleast(x, z))
    both = lambda x, z: np.sum(atleast(x, z)[0] * w1) + np.sum(atleast(x, z)[1] * w2)  # noqa: E731
    assert_gradient(both, x, z, **tolerance(dtype))


@SETTINGS
@given(shape=shapes, dtype=dtypes, seed=seeds)
def test_copy(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = random_array(rng, shape, dtype)
    check(np.copy, x, rng, dtype)
    check(lambda x: x.copy(), x, rng, dtype)


@SETTINGS
@given(shape=shapes, dtype=dtypes, target=st.sampled_from([np.float32, np.float64, "float32", "float64"]), seed=seeds)
def test_astype(shape, dtype, target, seed):
    rng = np.random.default_rng(seed)
    x = random_array(rng, shape, dtype)
    w = rng.normal(size=shape)
    seen = []

    def f(x):
        y = x.astype(target)
        seen.append(y.dtype)
        return np.sum(y * w)

    # The cast is the identity on values; central differences through a float32 cast would be
    # swamped by rounding, so the expectation is derived by hand: d/dx sum(x * w) = w.
    (g,) = pb.gradient(f, x)
    assert seen[0] == np.dtype(target)
    assert g.dtype == dtype and np.shape(g) == shape
    np.testing.assert_allclose(g, w, rtol=1e-6)


def test_astype_to_integer_carries_no_gradient():
    x = np.array([1.7, -2.2])
    (g,) = pb.gradient(lambda x: np.sum(x.astype(np.int64) * x), x)
    np.testing.assert_array_equal(g, [1.0, -2.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_shape_family_keeps_float32(dtype):
    x = np.arange(6, dtype=dtype).reshape(2, 3)

    def f(x):
        parts = [
            x.reshape(3, 2), x.T, np.swapaxes(x, 0, 1), np.moveaxis(x, 0, -1), np.expand_dims(x, 0),
            np.squeeze(x[None]), np.ravel(x), np.broadcast_to(x, (2, 2, 3)), np.concatenate([x, x]),
            np.stack([x, x]), np.vstack([x, x]), np.hstack([x, x]), np.atleast_3d(x), np.copy(x),
        ]
        assert all(p.dtype == dtype for p in parts), [p.dtype for p in parts]
        return sum(np.sum(p * 0.5) for p in parts)

    (g,) = pb.gradient(f, x)
    assert g.dtype == dtype
    # Nine parts hold each element of x once; broadcast_to and the four joins hold it twice.
    np.testing.assert_allclose(g, np.full((2, 3), 0.5 * (9 + 2 * 5)))
