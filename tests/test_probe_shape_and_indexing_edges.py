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


# --- bugs ---------------------------------------------------------------------------------------


@pytest.mark.xfail(strict=True, reason="np.where(cond, x) with only one of x, y: NumPy raises ValueError('either "
                   "both or neither of x and y should be given'); pullback's `where` composite in "
                   "pullback/rules/indexing.py calls select(condition, x, None) and returns an object array "
                   "[1.0, None, 3.0] (pb.pullback, pb.jvp), or a TypeError about None from pb.gradient")
def test_where_with_one_of_x_and_y_raises_as_numpy():
    v = np.array([1.0, -2.0, 3.0])
    with pytest.raises(ValueError, match="either both or neither"):
        np.where(v > 0, v)
    with pytest.raises(ValueError, match="either both or neither"):
        pb.pullback(lambda x: np.where(x > 0, x), v)


@pytest.mark.xfail(strict=True, reason="np.put_along_axis(y, [3], v, axis=None) on 3 elements: NumPy raises "
                   "IndexError (index 3 is out of bounds); pullback's put_along_axis in pullback/rules/indexing.py "
                   "wraps the index with np.mod(positions, size), silently writes element 0 and returns the "
                   "gradient [5, 0, 0] for a function NumPy refuses")
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


@pytest.mark.xfail(strict=True, reason="np.pad(x, 1, mode='edge' or 'wrap', reflect_type='even'): NumPy raises "
                   "ValueError('unsupported keyword arguments for mode ...'); pullback's pad composite in "
                   "pullback/rules/shape.py lets reflect_type through for every gather mode and returns a padded "
                   "array (and a gradient) for a call NumPy refuses")
@pytest.mark.parametrize("mode", ["edge", "wrap"])
def test_pad_refuses_reflect_type_for_modes_that_take_none_as_numpy(mode):
    with pytest.raises(ValueError, match="unsupported keyword"):
        np.pad(V, 1, mode=mode, reflect_type="even")
    with pytest.raises(ValueError, match="unsupported keyword"):
        pb.pullback(lambda x: np.pad(x, 1, mode=mode, reflect_type="even"), V)


@pytest.mark.xfail(strict=True, reason="np.pad errors differ from NumPy's: mode='constant' with reflect_type "
                   "raises TypeError ('takes only a plain constant_values') and mode='nope' NotImplementedError, "
                   "where NumPy raises ValueError ('unsupported keyword arguments', 'mode ... is not supported'); "
                   "pad composite in pullback/rules/shape.py")
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


@pytest.mark.xfail(strict=True, reason="pullback.testing.numerical_gradient moves a Fortran-ordered argument as "
                   "x + step (a C-ordered result: _Moves.at in pullback/testing.py), so for a layout-dependent f "
                   "(np.ravel(x, order='A')) it differentiates another function: it gives w in C order where the "
                   "gradient (pb.gradient's, and by hand) is w in F order")
def test_numerical_gradient_keeps_the_layout_of_a_fortran_argument():
    w = np.cos(np.arange(12.0))
    f = lambda a: np.sum(np.ravel(a, order="A") * w)  # noqa: E731
    np.testing.assert_allclose(numerical_gradient(f, np.asfortranarray(M))[0], w.reshape(3, 4, order="F"),
                               atol=1e-8)
