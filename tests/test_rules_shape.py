"""Reshaping, joining, splitting, flipping, rolling, tiling, repeating, padding and copying rules (functions
and methods), meshgrid and full_like, against central differences in both modes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from pullback._compat import PAD_TAKES_A_DICT
from pullback.testing import assert_gradient
from rule_checks import check_against_numpy, draw_axis, dtypes, gradcheck, second_order, seeds

SETTINGS = settings(max_examples=25, deadline=None)
shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4)
shapes_1_to_3d = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)


def tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-7} if dtype == np.float64 else {"rtol": 2e-3, "atol": 2e-4}


def project(y, seed=0):
    """A fixed random linear functional: a scalar loss that sees every element of y."""
    return np.sum(y * np.random.default_rng(seed).normal(size=np.shape(y)))


def check(op, x, rng, dtype):
    """`op(x)` weighted by random numbers, summed: exercises every entry of the Jacobian transpose."""
    y = op(x)
    # distinct weights of one sign: a float32 gradient summed over repeated entries (a broadcast)
    # then never cancels to a few digits, which the transposition test could not tell from a bug
    w = rng.uniform(0.5, 1.5, size=np.shape(y))
    grads = gradcheck(lambda x: np.sum(op(x) * w), x, **tolerance(dtype))
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
    gradcheck(lambda *xs: np.sum(np.concatenate(xs, axis=axis) * w), *arrays, **tol)
    if mixed:
        w2 = rng.normal(size=np.concatenate([arrays[0], plain] + arrays[1:], axis=axis).shape)
        gradcheck(lambda *xs: np.sum(np.concatenate([xs[0], plain, *xs[1:]], axis=axis) * w2), *arrays, **tol)


@SETTINGS
@given(shapes=st.lists(shapes, min_size=1, max_size=3), dtype=dtypes, seed=seeds)
def test_concatenate_axis_none(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    arrays = [random_array(rng, s, dtype) for s in shapes]
    w = rng.normal(size=sum(int(np.prod(s)) for s in shapes))
    gradcheck(lambda *xs: np.sum(np.concatenate(xs, axis=None) * w), *arrays, **tolerance(dtype))


@SETTINGS
@given(spec=joinable(same_shape=True), dtype=dtypes, seed=seeds, data=st.data())
def test_stack(spec, dtype, seed, data):
    shapes, _ = spec
    ndim = len(shapes[0])
    axis = data.draw(st.integers(-ndim - 1, ndim), label="stack axis")
    rng = np.random.default_rng(seed)
    arrays = [random_array(rng, s, dtype) for s in shapes]
    w = rng.normal(size=np.stack(arrays, axis=axis).shape)
    gradcheck(lambda *xs: np.sum(np.stack(xs, axis=axis) * w), *arrays, **tolerance(dtype))


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
        gradcheck(lambda *xs: np.sum(np.vstack(xs) * w), *rows, **tol)
    a, b = random_array(rng, (3,), dtype), random_array(rng, (3,), dtype)
    w = rng.normal(size=(2, 3))  # two 1-D vectors become the rows of a matrix
    gradcheck(lambda a, b: np.sum(np.vstack([a, b]) * w), a, b, **tol)
    c = random_array(rng, (1,), dtype)
    w = rng.normal(size=4)  # 1-D vectors of different lengths join end to end
    gradcheck(lambda a, c: np.sum(np.hstack([a, c]) * w), a, c, **tol)
    if len(shapes[0]) >= 2:
        cols = [random_array(rng, shapes[0][:1] + (n,) + shapes[0][2:], dtype) for n in (1, 3)]
        w = rng.normal(size=np.hstack(cols).shape)
        gradcheck(lambda *xs: np.sum(np.hstack(xs) * w), *cols, **tol)


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
    gradcheck(both, x, z, **tolerance(dtype))


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


# --- flip, roll, tile, repeat, pad, split, meshgrid ------------------------------------------
@settings(max_examples=10, deadline=None)
@given(shape=shapes_1_to_3d, dtype=dtypes, seed=seeds)
def test_flip_roll_tile(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    axis = draw_axis(rng, len(shape))
    check_against_numpy(lambda x: np.flip(x, axis), x, dtype=dtype)
    check_against_numpy(lambda x: np.flip(x), x, dtype=dtype)
    shift = int(rng.integers(-5, 6))
    check_against_numpy(lambda x: np.roll(x, shift, axis), x, dtype=dtype)
    shifts = tuple(int(s) for s in rng.integers(-3, 4, len(shape)))
    check_against_numpy(lambda x: np.roll(x, shifts, tuple(range(len(shape)))), x, dtype=dtype)
    check_against_numpy(lambda x: np.roll(x, 3), x, dtype=dtype)
    reps = tuple(int(r) for r in rng.integers(1, 3, int(rng.integers(1, 4))))
    check_against_numpy(lambda x: np.tile(x, reps), x, dtype=dtype)


@settings(max_examples=10, deadline=None)
@given(shape=shapes_1_to_3d, dtype=dtypes, seed=seeds)
def test_repeat(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    axis = draw_axis(rng, len(shape))
    check_against_numpy(lambda x: np.repeat(x, 2), x, dtype=dtype)
    check_against_numpy(lambda x: np.repeat(x, 3, axis=axis), x, dtype=dtype)
    counts = rng.integers(0, 3, shape[axis])
    check_against_numpy(lambda x: np.repeat(x, counts, axis=axis), x, dtype=dtype)
    check_against_numpy(lambda x: x.repeat(2, axis), x, dtype=dtype)


def test_repeat_second_order():
    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]])
    second_order(lambda x: np.repeat(x, [2, 0, 3], axis=1) ** 3, x)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
@settings(max_examples=10, deadline=None)
@given(shape=shapes_1_to_3d, seed=seeds)
def test_pad(mode, shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    widths = [tuple(int(w) for w in rng.integers(0, 4, 2)) for _ in shape]
    check_against_numpy(lambda x: np.pad(x, widths, mode=mode), x)
    check_against_numpy(lambda x: np.pad(x, 2, mode=mode), x)
    if mode == "constant":
        check_against_numpy(lambda x: np.pad(x, 1, constant_values=0.5), x)


def test_pad_refuses_other_modes():
    with pytest.raises(NotImplementedError, match="supported modes"):
        pb.gradient(lambda x: np.sum(np.pad(x, 1, mode="mean")), np.ones(3))
    with pytest.raises(NotImplementedError, match="supported modes"):
        pb.gradient(lambda x: np.sum(np.pad(x, 1, mode="reflect", reflect_type="odd")), np.ones(3))


@settings(max_examples=10, deadline=None)
@given(shape=shapes_1_to_3d, seed=seeds)
def test_split_family(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    axis = draw_axis(rng, len(shape))
    n = shape[axis]
    cuts = sorted(int(c) for c in rng.integers(0, n + 2, 2))
    check_against_numpy(lambda x: np.split(x, cuts, axis=axis), x)
    sections = int(rng.integers(1, 5))
    check_against_numpy(lambda x: np.array_split(x, sections, axis=axis), x)
    check_against_numpy(lambda x: np.split(x, 1, axis=axis), x)
    check_against_numpy(lambda x: np.hsplit(x, [1]), x)
    if len(shape) >= 2:
        check_against_numpy(lambda x: np.vsplit(x, [1]), x)
    if len(shape) >= 3:
        check_against_numpy(lambda x: np.dsplit(x, [1]), x)
    if n > 1 and n % 2:
        with pytest.raises(ValueError, match="equal division"):
            pb.gradient(lambda x: project(np.split(x, 2, axis=axis)[0]), x)


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 3), sparse=st.booleans(), indexing=st.sampled_from(["xy", "ij"]), seed=seeds)
def test_meshgrid(n, sparse, indexing, seed):
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=int(rng.integers(1, 4))) for _ in range(n)]
    check_against_numpy(lambda *xs: np.meshgrid(*xs, sparse=sparse, indexing=indexing), *xs)


def test_second_order_through_the_rearrangements():
    x = np.random.default_rng(9).normal(size=(3, 4))
    index = np.array([[2, 0, 0, 1]] * 3)
    for f in (
        lambda x: np.sort(x, axis=1) ** 3,
        lambda x: np.partition(x, 1, axis=0)[1] ** 3,
        lambda x: np.pad(x, ((1, 2), (2, 1)), mode="reflect") ** 3,
        lambda x: np.pad(x, 1) ** 3,
        lambda x: np.roll(np.flip(x, 0), 2) ** 3,
        lambda x: np.tile(x, 2) ** 3,
        lambda x: (np.take_along_axis(x, index, 1) ** 3, np.take(x, [0, 0, 5]) ** 3),
        lambda x: [p ** 3 for p in np.array_split(x, 3, axis=1)],
        lambda x: [g ** 3 for g in np.meshgrid(x[0], x[1])],
        lambda x: np.inner(x, x) ** 2 + np.vdot(x, x) ** 2,
    ):
        second_order(f, x)


# --- np.full_like with a tracked fill value -----------------------------------------------------
RNG = np.random.default_rng(7)


def test_full_like_is_differentiable_in_the_fill_value():
    weights = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]])
    x = np.array([[0.7, -0.2, 1.3], [0.4, 2.0, -0.6]])
    f = lambda x: np.sum(weights * np.full_like(x, x[0, 2]) ** 2)  # noqa: E731
    (g,) = gradcheck(f, x)
    np.testing.assert_allclose(g[0, 2], np.sum(weights) * 2.0 * 1.3, rtol=1e-12)  # the cotangent's sum
    v = RNG.normal(size=x.shape)
    np.testing.assert_allclose(pb.jvp(f, (x,), (v,))[1], np.sum(g * v), rtol=1e-12)
    # A float32 row, broadcast into another shape and cast to float64; the result takes tracked writes.
    def g_of(x, row):
        h = np.full_like(x, row, np.float64, shape=(2, 2, 3))
        assert h.dtype == np.float64
        h[1, 0] = x[1] * row
        return np.sum(weights * h)

    grads = gradcheck(g_of, x, np.array([0.5, -1.5, 2.0], dtype=np.float32), rtol=1e-6)
    # Slices (0, 0), (0, 1) and (1, 1) hold the row; slice (1, 0) holds x[1] * row.
    np.testing.assert_allclose(grads[1], weights[0] + 2.0 * weights[1] + weights[0] * x[1], rtol=1e-6)


def test_full_like_on_a_plain_prototype_says_what_to_write():
    with pytest.raises(TypeError, match=r"np\.full_like\(a, v\) with a plain `a`.*v \* np\.ones_like\(a\)"):
        pb.gradient(lambda v: np.sum(np.full_like(np.zeros(3), v)), np.array(2.0))
    # ... and that works:
    gradcheck(lambda v: np.sum(np.arange(3.0) * (v * np.ones_like(np.zeros(3)))), np.array(2.0))


_LAYOUTS = {
    "transposed": lambda x: x.T * 1.0,
    "fortran copy": lambda x: x.copy(order="F"),
    "reversed, strided": lambda x: x[::-1, ::2],
    "transposed, reversed": lambda x: (x.T * 1.0)[::-1],
}


@pytest.mark.parametrize("layout", sorted(_LAYOUTS))
@pytest.mark.parametrize("order", ["C", "F", "A", "K"])
def test_ravel_reshape_and_flatten_in_every_order_follow_numpy_s_layout(layout, order):
    # "A" and "K" read the elements in memory order; the gradient must go back to the same places
    make = _LAYOUTS[layout]
    x = np.random.default_rng(1).standard_normal((4, 6))
    w = np.random.default_rng(2).standard_normal(make(x).size)
    calls = {"ravel": lambda v: np.ravel(v, order=order), "flatten": lambda v: v.flatten(order)}
    if order != "K":  # reshape takes no "K"
        calls["reshape"] = lambda v: v.reshape(-1, order=order)
    for call in calls.values():
        f = lambda x: np.sum(call(make(x)) * w)
        np.testing.assert_array_equal(pb.pullback(lambda x: call(make(x)), x)[0], call(make(x)))
        assert_gradient(f, x, dense_up_to=None)


def test_the_copy_method_makes_a_c_ordered_copy_as_numpy_s_does():
    x = np.arange(6.0).reshape(2, 3)

    def f(x):
        y = x.T.copy()  # C order: a reshape of it is a view, so the write below reaches y
        y.reshape(-1)[0] = 9.0
        return y.ravel("A")

    np.testing.assert_array_equal(pb.pullback(f, x)[0], f(x))
    seen = []
    pb.gradient(lambda x: (seen.append(x.T.copy().strides), np.sum(x))[1], x)
    assert seen[0] == x.T.copy().strides


@pytest.mark.parametrize("pad_width", [1.5, -1, [1, -2]])
def test_pad_refuses_the_widths_numpy_refuses(pad_width):
    x = np.arange(6.0).reshape(2, 3)
    with pytest.raises((TypeError, ValueError)) as numpy_s:
        np.pad(x, pad_width)
    with pytest.raises(type(numpy_s.value), match=str(numpy_s.value)[:20].replace("`", ".")):
        pb.pullback(lambda x: np.pad(x, pad_width), x)


def test_pad_takes_a_dict_of_axes_as_numpy_does():
    x = np.arange(6.0).reshape(2, 3)
    widths = {1: (1, 2)}
    if not PAD_TAKES_A_DICT:  # NumPy 2.2: refused as NumPy refuses it
        with pytest.raises(TypeError, match="`pad_width` must be of integral type"):
            np.pad(x, widths, mode="wrap")
        with pytest.raises(TypeError, match="`pad_width` must be of integral type"):
            pb.pullback(lambda x: np.pad(x, widths, mode="wrap"), x)
        return
    np.testing.assert_array_equal(pb.pullback(lambda x: np.pad(x, widths, mode="wrap"), x)[0], np.pad(x, widths, mode="wrap"))
    assert_gradient(lambda x: np.sum(np.pad(x, widths, mode="wrap") ** 2), x, dense_up_to=None)
