"""Array manipulation and indexing at their edges: np.pad with large and per-side widths, take/choose with
wrap and clip, select/piecewise/where, insert/delete/repeat/tile/roll/rot90, triangles and diagonals with
offsets, reshapes and ravels in every order, uneven splits, joins with dtype and casting, sliding windows,
mixed basic and advanced indexing, writes with repeated indices and through aliasing views, np.put/place/
putmask/copyto. Values (and dtypes) against NumPy, gradients against float64 central differences or a hand
derivation, pb.jit of the gradient against eager at several calls, and errors as NumPy raises them."""

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import pullback as pb
from pullback.testing import numerical_gradient

RNG = np.random.default_rng(7)
M = RNG.normal(size=(3, 4))
V = RNG.normal(size=6)
T = RNG.normal(size=(2, 3, 4))


def _check(f, *args):
    """f's value and dtype as NumPy's, the gradient of a weighted sum against central differences, and
    pb.jit of that gradient equal to eager at two calls."""
    expected = f(*args)
    weights = np.random.default_rng(0).normal(size=np.shape(expected))

    def scalar(*a):
        return np.sum(np.real(f(*a)) * weights)

    value, _ = pb.pullback(f, *args)
    np.testing.assert_array_equal(value, expected)
    assert np.asarray(value).dtype == np.asarray(expected).dtype
    grads = pb.gradient(scalar, *args)
    for g, n in zip(grads, numerical_gradient(scalar, *args)):
        np.testing.assert_allclose(g, n, rtol=1e-6, atol=1e-6)
    jitted = pb.jit(lambda *a: pb.gradient(scalar, *a))
    for _ in range(2):
        for g, j in zip(grads, jitted(*args)):
            np.testing.assert_array_equal(j, g)


def _writes(fn):
    """A function that writes into a traced copy of its argument with `fn(y, x)` and returns the copy."""
    def f(x):
        y = x * 1.0
        out = fn(y, x)
        return y if out is None else out
    return f


def _rot(y, x):
    y[1:] += y[:-1]


def _rot_back(y, x):
    y[:-1] += y[1:]


def _swap_halves(y, x):
    y[:3], y[3:] = y[3:], y[:3]


def _reverse_add(y, x):
    y[::-1] += y


def _add_out_overlap(y, x):
    np.add(y[1:], y[:-1], out=y[1:])


def _mul_out_reversed(y, x):
    np.multiply(y, y[::-1], out=y)


def _shift_by_two(y, x):
    y[2:] = y[:-2]


def _neg_reversed_out(y, x):
    np.negative(y[::-1], out=y)


def _take_out_overlap(y, x):
    np.take(y, [5, 4, 3], out=y[:3])


def _copyto_reversed(y, x):
    np.copyto(y, y[::-1])


def _copyto_where_reversed(y, x):
    np.copyto(y[:3], y[3:][::-1], where=y[:3] > 0)


def _putmask_self(y, x):
    np.putmask(y, y > 0, y[::-1])


def _place_self(y, x):
    np.place(y, y < 0, y[::-1])


def _put_self(y, x):
    np.put(y, [5, 0], y[:2])


def _flat_self(y, x):
    y.flat[::2] = y.flat[1::2]


def _bool_self(y, x):
    y[y > 0] = y[y > 0][::-1]


def _chain_mul_div(y, x):
    y[1:] *= y[:-1]
    y[:-1] /= y[1:] + 3


def _repeated_same_scalar(y, x):
    y[[0, 0, 1]] = x[4]


def _repeated_plus_constant(y, x):
    y[[0, 0]] += 1.0


def _repeated_times_scalar(y, x):
    y[[0, 1, 0]] -= x[3]


def _put_along_negative(y, x):
    np.put_along_axis(y, np.array([0, -4]), x[[4, 5]], axis=0)


def _split_piece_write(y, x):
    np.split(y, 3)[1][0] = x[0] * 3


def _ravel_view_write(y, x):
    y.ravel()[::2] = x[1::2]


def _windows_write(y, x):
    sliding_window_view(y, 2, writeable=True)[::2, 0] = x[:3]


def _old_view_sees_write(y, x):
    z = y[1:]
    y[1] = x[0]
    return z * 1.0


WRITES = {f.__name__.strip("_"): f for f in (
    _rot, _rot_back, _swap_halves, _reverse_add, _add_out_overlap, _mul_out_reversed, _shift_by_two,
    _neg_reversed_out, _take_out_overlap, _copyto_reversed, _copyto_where_reversed, _putmask_self, _place_self,
    _put_self, _flat_self, _bool_self, _chain_mul_div, _repeated_same_scalar, _repeated_plus_constant,
    _repeated_times_scalar, _put_along_negative)}
EAGER_ONLY_WRITES = {f.__name__.strip("_"): f for f in (
    _split_piece_write, _ravel_view_write, _windows_write, _old_view_sees_write)}

def _assigned(index):
    """`y[index] = v; y[index] *= v` on a traced copy of `x`, differentiable in `x` and `v`."""
    def f(x, v):
        y = x * 1.0
        y[index] = v
        y[index] *= v
        return y
    return f


ASSIGNMENTS = {  # index, shape of the value (NumPy moves the advanced axes to the front where a slice parts them)
    "adv slice adv, row value": (([0, 1], slice(None), [2, 3]), (3,)),
    "adv slice adv, column value": (([0, 1], slice(None), [2, 3]), (2, 1)),
    "slice adv adv": ((slice(None), [0, 1], [2, 3]), (2, 1)),
    "ellipsis adv": ((Ellipsis, [1, 3]), (2, 3, 2)),
    "newaxis adv slice int": ((None, [1, 0], slice(None), 2), (3,)),
    "broadcast index arrays around a slice": (([[0], [1]], slice(1, 3), [[0, 3]]), (2, 2)),
    "slice and 2-d mask": ((slice(None), T[0] > 0), (1,)),
    "mask int list": ((np.array([True, False]), 1, [0, 2]), (2,)),
    "int adv adv scalar": ((1, [2, 0], [1, 3]), ()),
}


CASES = {
    "pad per-side constants": (lambda x: np.pad(x, ((1, 2), (0, 3)), constant_values=((1.0, 2.0), (3.0, 4.0))), (M,)),
    "pad edge wider than the array": (lambda x: np.pad(x, 7, mode="edge"), (V,)),
    "pad reflect wider than the array": (lambda x: np.pad(x, (7, 11), mode="reflect"), (V,)),
    "pad symmetric wider than the array": (lambda x: np.pad(x, (7, 11), mode="symmetric"), (V,)),
    "pad wrap wider than the array": (lambda x: np.pad(x, (7, 11), mode="wrap"), (V,)),
    "pad reflect 2-d wide": (lambda x: np.pad(x, ((5, 4), (9, 1)), mode="reflect"), (M,)),
    "pad reflect of one element": (lambda x: np.pad(x, 3, mode="reflect"), (V[:1],)),
    "pad zero widths": (lambda x: np.pad(x, 0, mode="symmetric"), (M,)),
    "pad reversed input": (lambda x: np.pad(x[::-1], (3, 2), mode="reflect"), (V,)),
    "pad complex symmetric": (lambda x: np.pad(x, (1, 2), mode="symmetric"), (V + 1j * V[::-1],)),
    "pad empty axis with constant": (lambda x: np.pad(x, ((0, 0), (2, 1))), (np.zeros((0, 3)),)),
    "take wrap": (lambda x: np.take(x, [-7, 0, 6, 11, 5], mode="wrap"), (V,)),
    "take clip": (lambda x: np.take(x, [-7, 0, 6, 11, 5, 5], mode="clip"), (V,)),
    "take axis clip": (lambda x: np.take(x, [[-1, 9], [2, 2]], axis=1, mode="clip"), (M,)),
    "take_along_axis negative": (lambda x: np.take_along_axis(x, np.array([[0, -1], [2, -4], [1, 1]]), axis=1), (M,)),
    "take_along_axis None": (lambda x: np.take_along_axis(x, np.array([0, -1, 5, 5]), axis=None), (M,)),
    "choose wrap": (lambda a, b: np.choose([0, 3, -1, 2, 1, 0], [a, b], mode="wrap"), (V, V ** 2)),
    "choose clip": (lambda a, b: np.choose([0, 3, -1, 2, 1, 0], [a, b], mode="clip"), (V, V ** 2)),
    "choose broadcast": (lambda a, b: np.choose([[0], [1], [0]], [a, b]), (M, M[0] * 1.0)),
    "select overlapping": (lambda x: np.select([x > -10, x > 0], [x, x * 5]), (V,)),
    "select traced default": (lambda x: np.select([x > 0, x < -0.5], [x ** 2, x * 3], default=x[0]), (V,)),
    "piecewise constants and functions": (lambda x: np.piecewise(x, [x < 0, x > 0.5], [2.0, lambda z: z ** 3]), (V,)),
    "where broadcast": (lambda a, b: np.where(a[:, :1] > 0, a, b), (M, V[:4].copy())),
    "where float32 and float64": (lambda a, b: np.where(a > 0, a, b), (M.astype(np.float32), V[:4].copy())),
    "extract other layout": (lambda x: np.extract(M.T > 0, x.T), (M.T.copy(),)),
    "compress short condition": (lambda x: np.compress([False, True], x, axis=1), (M,)),
    "insert repeated positions": (lambda x: np.insert(x, [1, 1, 3], [7.0, 8.0, 9.0], axis=1), (M,)),
    "insert traced column": (lambda a, b: np.insert(a, [1], b[:, None], axis=1), (M, V[:3].copy())),
    "insert transposed values": (lambda a, b: np.insert(a, 1, b.reshape(2, 3)[:, :1].T, axis=0), (M[:, :2].copy(), V)),
    "delete repeated and negative": (lambda x: np.delete(x, [0, 0, -1], axis=1), (M,)),
    "delete boolean": (lambda x: np.delete(x, np.array([True, False, True, False]), axis=1), (M,)),
    "repeat array counts flat": (lambda x: np.repeat(x, np.arange(12) % 3), (M,)),
    "repeat boolean counts": (lambda x: np.repeat(x, np.array([True, False, True, True, False, True])), (V,)),
    "tile more reps than axes": (lambda x: np.tile(x, (2, 1, 3)), (M,)),
    "tile of a 0-d": (lambda x: np.tile(x[2], (2, 3)), (V,)),
    "roll tuple on one axis twice": (lambda x: np.roll(x, (1, -2, 5), axis=(0, 1, 0)), (M,)),
    "roll flat of a transpose": (lambda x: np.roll(x, 5), (M.T,)),
    "rot90 k=-3 axes (2, 0)": (lambda x: np.rot90(x, -3, axes=(2, 0)), (T,)),
    "flip two axes": (lambda x: np.flip(x, axis=(0, 2)), (T,)),
    "tril batched k=-5": (lambda x: np.tril(x, -5), (T,)),
    "triu k=7": (lambda x: np.triu(x, 7), (M,)),
    "triu of 1-d": (lambda x: np.triu(x, 1), (V,)),
    "triu of reversed rows": (lambda x: np.triu(x[::-1], -1), (M,)),
    "diagonal offset axes (2, 0)": (lambda x: np.diagonal(x, 1, 2, 0), (T,)),
    "diag offset past the matrix": (lambda x: np.diag(x, 5), (M,)),
    "diag of a transpose": (lambda x: np.diag(x.T, 1), (M,)),
    "diagflat negative offset of a strided view": (lambda x: np.diagflat(x[::-1, ::2], -1), (M,)),
    "trace offset axes (-1, 0)": (lambda x: np.trace(x, 1, axis1=-1, axis2=0), (T,)),
    "moveaxis two axes": (lambda x: np.moveaxis(x, [0, -1], [-1, 1]), (T,)),
    "transpose negative axes": (lambda x: x.transpose(-2, 0, 2), (T,)),
    "reshape F with -1": (lambda x: np.reshape(x, (4, -1), order="F"), (T,)),
    "reshape F of a transpose": (lambda x: np.reshape(x.T, (-1, 2), order="F"), (T,)),
    "reshape A of a transpose": (lambda x: np.reshape(x.T, (-1, 2), order="A"), (T,)),
    **{f"ravel {o} of a permutation": (lambda x, o=o: np.ravel(np.transpose(x, (2, 0, 1)), order=o), (T,))
       for o in "CFAK"},
    **{f"flatten {o} of a reversed strided view": (lambda x, o=o: x[:, ::-1, ::2].T.flatten(order=o), (T,))
       for o in "CFAK"},
    "array_split uneven": (lambda x: np.concatenate([p * k for k, p in enumerate(np.array_split(x, 3, axis=1), 1)],
                                                    axis=1), (RNG.normal(size=(2, 7)),)),
    "array_split more pieces than elements": (lambda x: np.concatenate([p * k for k, p in
                                                                        enumerate(np.array_split(x, 8), 1)]), (V,)),
    "split at unordered indices": (lambda x: np.concatenate([p * k for k, p in
                                                             enumerate(np.split(x, [1, 1, 4, 2, 9]), 1)]), (V,)),
    "dsplit uneven": (lambda x: np.dsplit(x, [1, 3])[1], (T,)),
    "concatenate int and float32": (lambda x: np.concatenate([x, np.arange(3)]), (V.astype(np.float32),)),
    "block with constants": (lambda a, b: np.block([[a, b[:, None]], [np.ones((1, 4)), np.zeros((1, 1))]]),
                             (M, V[:3].copy())),
    "block of traced scalars": (lambda x: np.block([[x[0], x[1]], [x[2], 1.0]]), (V,)),
    "broadcast_to of a reversed stride": (lambda x: np.broadcast_to(x[::-2], (3, 3)), (V,)),
    "broadcast_arrays": (lambda a, b: sum(q * k for k, q in enumerate(np.broadcast_arrays(a, b), 1)), (M, V[:4].copy())),
    "sliding windows on two axes in reverse": (lambda x: sliding_window_view(x, (2, 2), axis=(-1, 0)), (T,)),
    "sliding windows twice on one axis": (lambda x: sliding_window_view(x, (2, 2), axis=(1, 1)), (M,)),
    "sliding windows subok": (lambda x: sliding_window_view(x, 3, axis=1, subok=True), (M,)),
    "sliding windows of a broadcast": (lambda x: sliding_window_view(np.broadcast_to(x, (2, 6)), (2, 3)), (V,)),
    "index repeated": (lambda x: x[[0, 0, 1, -1, -1]], (V,)),
    "index pairs repeated": (lambda x: x[[0, 0, 2], [1, 1, -1]], (M,)),
    "mixed advanced split by a slice": (lambda x: x[[0, 1], :, [2, 3]], (T,)),
    "mixed with newaxis between": (lambda x: x[[1, 0], None, :, [2, 2]], (T,)),
    "mixed with ellipsis": (lambda x: x[[1], ..., [3, 0]], (T,)),
    "advanced then newaxis": (lambda x: x[..., [0, 0], None], (T,)),
    "broadcast index arrays": (lambda x: x[np.array([[0], [1]]), [[1, 2, 2]]], (M,)),
    "ix_ repeated": (lambda x: x[np.ix_([2, 0, 0], [1, 3])], (M,)),
    "ix_ of a reversed view": (lambda x: x[::-1][np.ix_([0, 2], [3, 3, 0])], (M,)),
    "flat repeated": (lambda x: x.flat[[1, 1, 7, -1]], (M.T,)),
    "flat slice": (lambda x: x.flat[2:9:3], (M.T,)),
    "advanced index of a broadcast": (lambda x: np.broadcast_to(x, (3, 6))[[0, 2], [1, 1]], (V,)),
    "boolean rows of sliding windows": (lambda x: sliding_window_view(x, 3)[np.array([True, False, True, True])], (V,)),
    **{f"write {name}": (_writes(fn), (V,)) for name, fn in WRITES.items()},
    **{f"assign {name}": (_assigned(index), (T, np.random.default_rng(4).normal(size=shape)))
       for name, (index, shape) in ASSIGNMENTS.items()},
}


@pytest.mark.parametrize("name", CASES)
def test_against_numpy_differences_and_jit(name):
    f, args = CASES[name]
    _check(f, *args)


@pytest.mark.parametrize("name", EAGER_ONLY_WRITES)
def test_writes_through_views_against_differences(name):
    f = _writes(EAGER_ONLY_WRITES[name])
    expected = f(V.copy())
    value, _ = pb.pullback(f, V)
    np.testing.assert_array_equal(value, expected)
    weights = np.cos(np.arange(expected.size))
    scalar = lambda x: np.sum(f(x) * weights)  # noqa: E731
    np.testing.assert_allclose(pb.gradient(scalar, V)[0], numerical_gradient(scalar, V)[0], atol=1e-6)


@pytest.mark.parametrize("name", ["bool", "extract", "compress", "select", "piecewise", "place", "putmask",
                                  "argsort along", "roll by argmax", "insert at argmin", "ix_ of masks"])
def test_jit_replays_data_dependent_shapes_and_masks_as_eager(name):
    f = {
        "bool": lambda a: a[a > 0],
        "extract": lambda a: np.extract(a > 0, a),
        "compress": lambda a: np.compress(a[:, 0] > 0, a, axis=0),
        "select": lambda a: np.select([a > 0, a < -0.5], [a, a ** 2], a[0, 0]),
        "piecewise": lambda a: np.piecewise(a, [a > 0], [lambda z: z ** 2, lambda z: -z]),
        "place": _writes(lambda y, a: np.place(y, a > 0, a[0] * 2)),
        "putmask": _writes(lambda y, a: np.putmask(y, a > 0, a[1])),
        "argsort along": lambda a: np.take_along_axis(a, np.argsort(a, axis=1), axis=1),
        "roll by argmax": lambda a: np.roll(a, int(np.argmax(a[0])), axis=1),
        "insert at argmin": lambda a: np.insert(a, int(np.argmin(a[0])), a[1], axis=0),
        "ix_ of masks": lambda a: a[np.ix_(a[:, 0] > 0, a[0] > 0)],
    }[name]

    def scalar(a):
        r = f(a)
        return np.sum(r * np.cos(np.arange(r.size)).reshape(r.shape))

    jitted, jitted_gradient = pb.jit(f), pb.jit(lambda a: pb.gradient(scalar, a)[0])
    rng = np.random.default_rng(5)
    for _ in range(4):
        x = rng.normal(size=(3, 4))
        np.testing.assert_array_equal(jitted(x), f(x))
        np.testing.assert_array_equal(jitted_gradient(x), pb.gradient(scalar, x)[0])


@pytest.mark.parametrize("order", ["A", "K"])
def test_ravel_of_a_fortran_array_follows_its_layout_in_the_gradient_and_under_jit(order):
    w = np.cos(np.arange(12.0))
    f = lambda a: np.sum(np.ravel(a * 2.0, order=order) * w)  # noqa: E731
    fortran = np.asfortranarray(M)
    hand = 2.0 * w.reshape(3, 4, order="F")  # ravel "A"/"K" of an F-ordered array reads it in F order
    np.testing.assert_array_equal(pb.gradient(f, fortran)[0], hand)
    jitted = pb.jit(lambda a: pb.gradient(f, a)[0])
    np.testing.assert_array_equal(jitted(M), 2.0 * w.reshape(3, 4))
    np.testing.assert_array_equal(jitted(fortran), hand)


def test_jit_writes_into_the_argument_through_overlapping_views_as_numpy():
    def f(x):
        x[1:] += x[:-1]
        np.add(x[1:], x[:-1], out=x[1:])
        x[::-1] += x
        return x.sum()

    jitted = pb.jit(f)
    for k in range(3):
        a, b = V * (k + 1), V * (k + 1)
        assert jitted(a) == f(b)
        np.testing.assert_array_equal(a, b)


def test_hessian_and_jvp_through_pad_where_and_roll():
    h = pb.hessian(lambda x: np.sum(np.pad(x, 3, mode="reflect") ** 3), V)
    counts = np.pad(np.arange(6), 3, mode="reflect")
    np.testing.assert_allclose(h, np.diag(6 * V * np.bincount(counts, minlength=6)), rtol=1e-12)
    f = lambda x: np.where(x > 0, x ** 2, np.roll(x, 2) * 3)  # noqa: E731
    _, tangent = pb.jvp(f, (V,), (np.ones(6),))
    np.testing.assert_allclose(tangent, np.where(V > 0, 2 * V, 3.0), rtol=1e-12)


@pytest.mark.parametrize("mode, kwargs", [("maximum", {}), ("mean", {"stat_length": 2}), ("median", {}),
                                          ("minimum", {}), ("linear_ramp", {"end_values": 1.0}), ("empty", {}),
                                          ("reflect", {"reflect_type": "odd"}),
                                          ("symmetric", {"reflect_type": "odd"})])
def test_pad_modes_without_a_rule_are_refused_naming_the_mode(mode, kwargs):
    with pytest.raises(NotImplementedError, match=f"mode='{mode}'"):
        pb.gradient(lambda x: np.sum(np.pad(x, 2, mode=mode, **kwargs)), V)


def test_pad_with_traced_constant_values_is_refused():
    with pytest.raises(TypeError, match="plain `constant_values`"):
        pb.gradient(lambda x: np.sum(np.pad(x, 2, constant_values=x[0])), V)


@pytest.mark.parametrize("write", [
    lambda y, x: y.__setitem__([0, 0], x[[1, 2]]),
    lambda y, x: np.put(y, [0, -1, 7, 7], x[:4], mode="wrap"),
    lambda y, x: np.put_along_axis(y, np.array([0, 0]), x[[1, 2]], axis=0),
])
def test_one_element_written_twice_from_different_values_is_refused(write):
    with pytest.raises(ValueError, match="same element more than once"):
        pb.gradient(lambda x: np.sum(_writes(write)(x)), V)


def test_jit_of_a_write_through_a_transposed_view_matches_eager_or_is_refused_naming_it():
    def f(x):
        y = x * 1.0
        y += y.T
        return y

    x = M[:3, :3].copy()
    weights = np.arange(9.0).reshape(3, 3)
    scalar = lambda a: np.sum(f(a) * weights)  # noqa: E731
    np.testing.assert_array_equal(pb.gradient(scalar, x)[0], weights + weights.T)
    np.testing.assert_array_equal(pb.jit(lambda a: pb.gradient(scalar, a)[0])(x), weights + weights.T)
    with pytest.raises(pb.JitError, match="shares memory"):
        pb.jit(f)(x)


def _view_before_iadd(a):
    y = a * 1.0
    v = y[:-1]
    y[1:] += v
    return v * 2


def _nested_views_see_a_write(a):
    y = a * 1.0
    r = y.reshape(2, 3)
    c = r[:, 1]
    y[1:4] *= 3
    return np.concatenate([c, r.ravel()])


def _diagonal_written_from_itself(a):
    y = a.reshape(2, 3) * 1.0
    d = np.diagonal(y)
    y[np.arange(2), np.arange(2)] = d[::-1] * 2
    return np.concatenate([d, y.ravel()])


def _broadcast_sees_a_write(a):
    y = a.reshape(2, 3) * 1.0
    b = np.broadcast_to(y[0], (3, 3))
    y[0] = y[1]
    return b * 1.0


def _windows_see_a_write(a):
    y = a * 1.0
    w = sliding_window_view(y, 3)
    y[2] = a[0] * 5
    return w * 1.0


def _split_pieces_see_a_write(a):
    y = a * 1.0
    s = np.split(y, 2)
    y[:] = y[::-1]
    return s[0] * s[1]


def _flip_copied_into_its_base(a):
    y = a * 1.0
    r = np.flip(y)
    np.copyto(y, r * 2)
    return r * 1.0


def _rot90_sees_a_shifted_subtract(a):
    y = a.reshape(2, 3) * 1.0
    u = np.rot90(y)
    y[1:, 1:] -= y[:-1, :-1]
    return u


def _atleast_2d_view_sees_iadd(a):
    y = a * 1.0
    m = np.atleast_2d(y)
    y += 1
    return m * a


def _reshape_view_iadd_reaches_base(a):
    y = a * 1.0
    m = y.reshape(-1, 1)
    m += a[:, None] ** 2
    return y


def _astype_without_copy_written(a):
    y = a * 1.0
    m = y.astype(float, copy=False)
    m[0] = a[3] * 7.0
    return y


def _rollaxis_view_written(a):
    y = a * 1.0
    m = np.rollaxis(y.reshape(2, 3), 1)
    m[0] = a[:2] ** 2
    return y


VIEW_CASES = {f.__name__.strip("_"): f for f in (
    _view_before_iadd, _nested_views_see_a_write, _diagonal_written_from_itself, _broadcast_sees_a_write,
    _windows_see_a_write, _split_pieces_see_a_write, _flip_copied_into_its_base, _rot90_sees_a_shifted_subtract,
    _atleast_2d_view_sees_iadd, _reshape_view_iadd_reaches_base, _astype_without_copy_written, _rollaxis_view_written)}


@pytest.mark.parametrize("name", VIEW_CASES)
def test_live_views_see_writes_against_differences_and_jit_matches_or_refuses(name):
    f = VIEW_CASES[name]
    expected = f(V.copy())
    np.testing.assert_array_equal(pb.pullback(f, V)[0], expected)
    weights = np.cos(np.arange(expected.size)).reshape(expected.shape)
    scalar = lambda x: np.sum(f(x) * weights)  # noqa: E731
    gradient = pb.gradient(scalar, V)[0]
    np.testing.assert_allclose(gradient, numerical_gradient(scalar, V)[0], atol=1e-6)
    try:
        jitted = pb.jit(lambda x: pb.gradient(scalar, x)[0])(V)
    except pb.JitError as error:
        assert "shares memory" in str(error)
    else:
        np.testing.assert_array_equal(jitted, gradient)


# --- bugs ---------------------------------------------------------------------------------------


def test_where_with_one_of_x_and_y_raises_as_numpy():
    v = np.array([1.0, -2.0, 3.0])
    with pytest.raises(ValueError, match="either both or neither"):
        np.where(v > 0, v)
    with pytest.raises(ValueError, match="either both or neither"):
        pb.pullback(lambda x: np.where(x > 0, x), v)


def test_put_along_axis_none_with_an_index_out_of_range_raises_as_numpy():
    def f(a):
        y = a * 1.0
        np.put_along_axis(y, np.array([3]), a[0] * 5, axis=None)
        return y

    v = np.array([1.0, -2.0, 3.0])
    with pytest.raises(IndexError):
        f(v.copy())
    with pytest.raises(IndexError):
        pb.pullback(f, v)


@pytest.mark.parametrize("mode", ["edge", "wrap"])
def test_pad_refuses_reflect_type_for_modes_that_take_none_as_numpy(mode):
    with pytest.raises(ValueError, match="unsupported keyword"):
        np.pad(V, 1, mode=mode, reflect_type="even")
    with pytest.raises(ValueError, match="unsupported keyword"):
        pb.pullback(lambda x: np.pad(x, 1, mode=mode, reflect_type="even"), V)


@pytest.mark.parametrize("kwargs", [{"reflect_type": "even"}, {"mode": "nope"}])
def test_pad_raises_numpys_value_error_for_bad_options(kwargs):
    with pytest.raises(ValueError):
        np.pad(V, 1, **kwargs)
    with pytest.raises(ValueError):
        pb.pullback(lambda x: np.pad(x, 1, **kwargs), V)


@pytest.mark.xfail(strict=True, reason="pb.jit of a gradient through np.place(y, y > 0.5, [7.0]) (a mask computed "
                   "from traced values, plain list values) raises JitError 'a traced array was converted to a NumPy "
                   "array' without naming np.place, while eager gives [0, 1, 2]: "
                   "_place_by_select in pullback/rules/inplace_writes.py calls np.take(np.ravel(vals), rank) with "
                   "plain vals and a traced rank")
def test_jit_of_place_with_a_traced_mask_and_plain_values_matches_eager():
    def f(a):
        y = a * 1.0
        np.place(y, y > 0.5, [7.0])
        return np.sum(y * np.arange(3))

    x = np.array([1.0, 0.0, 1.0])
    np.testing.assert_array_equal(pb.jit(lambda a: pb.gradient(f, a)[0])(x), pb.gradient(f, x)[0])


def test_numerical_gradient_keeps_the_layout_of_a_fortran_argument():
    w = np.cos(np.arange(12.0))
    f = lambda a: np.sum(np.ravel(a, order="A") * w)  # noqa: E731
    np.testing.assert_allclose(numerical_gradient(f, np.asfortranarray(M))[0], w.reshape(3, 4, order="F"),
                               atol=1e-8)


_MASK_SHAPED = np.array([True, False, True, False, False, True])  # as long as the axis: a mask to x[...]


def test_take_reads_a_boolean_index_array_as_integers_as_numpy():
    x = np.arange(1.0, 7.0)
    np.testing.assert_array_equal(pb.pullback(lambda a: np.take(a, _MASK_SHAPED), x)[0], np.take(x, _MASK_SHAPED))
    np.testing.assert_array_equal(pb.gradient(lambda a: np.sum(np.take(a, _MASK_SHAPED) ** 2), x)[0],
                                  [6.0, 12.0, 0.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("axis", [0, None])
def test_take_along_axis_refuses_boolean_indices_as_numpy(axis):
    x = np.arange(1.0, 7.0)
    with pytest.raises(IndexError, match="integer array"):
        np.take_along_axis(x, _MASK_SHAPED, axis)
    with pytest.raises(IndexError, match="integer array"):
        pb.pullback(lambda a: np.take_along_axis(a, _MASK_SHAPED, axis), x)


def test_put_along_axis_refuses_boolean_indices_as_numpy():
    def f(a):
        y = a * 1.0
        np.put_along_axis(y, _MASK_SHAPED, 10.0, 0)
        return y

    x = np.arange(1.0, 7.0)
    with pytest.raises(IndexError, match="integer array"):
        f(x.copy())
    with pytest.raises(IndexError, match="integer array"):
        pb.pullback(f, x)


def test_choose_with_a_boolean_selector_as_numpy():
    x = np.arange(1.0, 7.0)
    f = lambda a: np.choose(_MASK_SHAPED, [a, -a])  # noqa: E731
    np.testing.assert_array_equal(pb.pullback(f, x)[0], f(x))
    np.testing.assert_array_equal(pb.gradient(lambda a: np.sum(f(a)), x)[0], np.where(_MASK_SHAPED, -1.0, 1.0))


@pytest.mark.parametrize("condition", [np.array([[1, 0, 1]]), True])
def test_compress_refuses_a_condition_that_is_not_1d_as_numpy(condition):
    x = np.arange(1.0, 7.0)
    with pytest.raises(ValueError, match="1-d"):
        np.compress(condition, x)
    with pytest.raises(ValueError, match="1-d"):
        pb.pullback(lambda a: np.compress(condition, a), x)


def test_flat_copy_is_differentiable():
    np.testing.assert_array_equal(pb.gradient(lambda a: np.sum(a.flat.copy() ** 2), M)[0], 2 * M)


def test_jit_of_flat_base_matches_eager():
    f = lambda a: a.flat.base * 2.0  # noqa: E731
    np.testing.assert_array_equal(pb.jit(f)(M), f(M))


@pytest.mark.parametrize("mode", ["wrap", "clip"])
def test_take_of_an_empty_index_list_with_wrap_or_clip_as_numpy(mode):
    value, back = pb.pullback(lambda a: np.take(a, [], mode=mode), V)
    np.testing.assert_array_equal(value, np.take(V, [], mode=mode))
    np.testing.assert_array_equal(back(np.zeros(0))[0], np.zeros(6))


@pytest.mark.parametrize("write", [np.putmask, np.place])
@pytest.mark.parametrize("value", [np.float64(1.5), np.int64(3)])
def test_putmask_and_place_take_numpy_scalars_into_float32_as_numpy(write, value):
    def f(a):
        y = a * 1
        write(y, y > 2, value)
        return y

    x = np.arange(1.0, 7.0, dtype=np.float32)
    expected = f(x.copy())
    got = pb.pullback(f, x)[0]
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == expected.dtype


@pytest.mark.xfail(strict=True, reason="np.insert(float32, 1, 1e40) and np.piecewise(float32, [...], [1e40, f]) warn "
                   "'overflow encountered in cast' once in NumPy but twice under pullback: the insert and piecewise "
                   "composites in pullback/rules/shape.py and pullback/rules/indexing.py compute NumPy's plain result "
                   "and then cast the values again")
@pytest.mark.parametrize("f", [lambda a: np.insert(a, 1, 1e40),
                               lambda a: np.piecewise(a, [a > 2], [1e40, lambda z: z])])
def test_an_overflowing_cast_warns_once_as_in_numpy(f):
    x = np.arange(1.0, 7.0, dtype=np.float32)
    with pytest.warns(RuntimeWarning) as plain:
        f(x)
    with pytest.warns(RuntimeWarning) as traced:
        pb.pullback(f, x)
    assert [str(w.message) for w in traced] == [str(w.message) for w in plain]


@pytest.mark.xfail(strict=True, reason="np.concatenate/np.stack(..., dtype=float, casting='unsafe') of a complex "
                   "array, and np.insert of a complex value into a float array, warn ComplexWarning once in NumPy but "
                   "twice under pullback: the join composites (_joined_into/_check_casting in pullback/rules/shape.py) "
                   "and insert compute NumPy's plain result and cast the traced values again")
@pytest.mark.parametrize("f", [lambda z, x: np.concatenate([z, x], dtype=float, casting="unsafe"),
                               lambda z, x: np.stack([z, x], dtype=float, casting="unsafe"),
                               lambda z, x: np.insert(x, 1, z[0])])
def test_a_complex_to_real_cast_warns_once_as_in_numpy(f):
    z, x = np.array([1 + 2j, 3 - 1j, -2 + 0.5j]), np.array([1.0, 2.0, 3.0])
    with pytest.warns(np.exceptions.ComplexWarning) as plain:
        expected = f(z, x)
    with pytest.warns(np.exceptions.ComplexWarning) as traced:
        value = pb.pullback(f, z, x)[0]
    np.testing.assert_array_equal(value, expected)
    assert len(traced) == len(plain)


@pytest.mark.xfail(strict=True, reason="pb.jit of a gradient through np.roll(a, k, axis=1) with a traced shift (an "
                   "np.int64 argument, or np.argmax of the input) raises JitError 'a traced array was converted to a "
                   "NumPy array', naming neither np.roll nor a fix, while eager and pb.jit of the value work: "
                   "roll_rule's backward in pullback/rules/shape.py calls np.roll(g, -shift) on the plain cotangent "
                   "with the traced shift")
def test_jit_of_the_gradient_through_roll_by_a_traced_shift_matches_eager():
    weights = np.cos(np.arange(12.0)).reshape(3, 4)
    scalar = lambda a: np.sum(np.roll(a, np.argmax(a[0]), axis=1) * weights)  # noqa: E731
    np.testing.assert_array_equal(pb.jit(lambda a: pb.gradient(scalar, a)[0])(M), pb.gradient(scalar, M)[0])


@pytest.mark.xfail(strict=True, reason="pb.jit of a gradient through np.put(y, i, v) with traced indices (np.argmax of "
                   "the input, or an index array argument) raises JitError 'a traced array was converted to a NumPy "
                   "array', naming neither np.put nor a fix, while eager and pb.jit of the value work: write_flat in "
                   "pullback/_inplace.py calls np.asarray(positions)")
def test_jit_of_the_gradient_through_put_at_traced_indices_matches_eager():
    weights = np.cos(np.arange(12.0)).reshape(3, 4)

    def scalar(a):
        y = a * 1.0
        np.put(y, np.argmax(a, axis=1), a[0, :3] * 2)
        return np.sum(y * weights)

    np.testing.assert_array_equal(pb.jit(lambda a: pb.gradient(scalar, a)[0])(M), pb.gradient(scalar, M)[0])


def test_piecewise_whose_functions_close_over_a_differentiated_value():
    x = np.array([-1.0, 2.0, -3.0, 4.0])

    def f(x, s):
        return np.sum(np.piecewise(x, [x < 0], [lambda t: t * s, lambda t: t]))

    gx, gs = pb.gradient(f, x, 0.1)
    np.testing.assert_allclose(gx, [0.1, 1.0, 0.1, 1.0])
    assert gs == pytest.approx(-4.0)


@pytest.mark.parametrize("join", [np.concatenate, np.stack, np.hstack, np.vstack])
def test_a_join_with_dtype_casts_each_input_once_as_numpy(join):
    big = np.array([2 ** 60 + 2 ** 36 + 1], dtype=np.int64)
    x = np.array([1.5], dtype=np.float32)
    f = lambda a: join([a, big], dtype=np.float32)  # noqa: E731
    np.testing.assert_array_equal(pb.pullback(f, x)[0], f(x))


@pytest.mark.xfail(strict=True, reason="np.copyto(y_float32, n_int64, where=mask) casts n straight to float32 in "
                   "NumPy (2**60 + 2**36 + 1 becomes 2**60 + 2**37); pullback's copyto in "
                   "pullback/rules/inplace_writes.py writes np.where(where, src, target), which promotes to float64 "
                   "first and then casts back: 2**60, rounded twice")
def test_copyto_with_where_casts_the_source_once_as_numpy():
    big = np.array([2 ** 60 + 2 ** 36 + 1, 3], dtype=np.int64)

    def f(a):
        y = a * 1
        np.copyto(y, big, where=np.array([True, False]))
        return y

    x = np.array([1.5, 2.5], dtype=np.float32)
    np.testing.assert_array_equal(pb.pullback(f, x)[0], f(x.copy()))


@pytest.mark.xfail(strict=True, reason="np.piecewise(x_float32, [x > 2], [np.int64(2**60 + 2**36 + 1), f]) writes the "
                   "constant straight into the float32 result in NumPy (2**60 + 2**37); pullback's piecewise in "
                   "pullback/rules/indexing.py takes np.where(condition, constant, y) (float64) and casts back to "
                   "float32, rounding twice: 2**60")
def test_piecewise_casts_a_constant_once_as_numpy():
    x = np.array([1.5, 2.5], dtype=np.float32)
    f = lambda a: np.piecewise(a, [a > 2], [np.int64(2 ** 60 + 2 ** 36 + 1), lambda z: z])  # noqa: E731
    np.testing.assert_array_equal(pb.pullback(f, x)[0], f(x))


def test_a_write_into_a_broadcast_arrays_result_is_refused_naming_read_only_and_a_copy():
    def f(a):
        y = a * 1.0
        b, _ = np.broadcast_arrays(y, np.ones((2, 3)))
        b[0, 0] = 5.0
        return y

    with pytest.raises(ValueError, match="read-only.*copy"):
        pb.pullback(f, np.arange(3.0))


@pytest.mark.parametrize("name", [n for n, (_, args) in CASES.items()
                                  if all(np.asarray(a).dtype == np.float64 for a in args)])
def test_jvp_against_central_differences(name):
    f, args = CASES[name]
    rng = np.random.default_rng(1)
    directions = tuple(rng.normal(size=np.shape(a)) for a in args)
    value, tangent = pb.jvp(f, args, directions)
    np.testing.assert_array_equal(value, f(*args))
    plus = f(*(a + 1e-6 * d for a, d in zip(args, directions)))
    minus = f(*(a - 1e-6 * d for a, d in zip(args, directions)))
    np.testing.assert_allclose(tangent, (plus - minus) / 2e-6, atol=1e-6)
