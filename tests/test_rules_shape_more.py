"""append, column_stack, row_stack, dstack, block, flipud, fliplr, rot90, rollaxis, matrix_transpose,
unstack, broadcast_arrays, delete, insert, resize, trim_zeros and np.astype against central
differences in both modes, against NumPy's values, in float32, and at the odd cases."""

import warnings

import numpy as np
import pytest

import pullback as pb
from numpy_coverage_checks import run_case, run_float32

rng = np.random.default_rng(11)
M = rng.normal(size=(3, 4))
S3 = rng.normal(size=(2, 3, 4))
V = rng.normal(size=5)


def _row_stack(a, b):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return np.row_stack([a, b])


CASES = {
    "append flat": (lambda a, b: np.append(a, b), (M, V)),
    "append axis": (lambda a, b: np.append(a, b, axis=-2), (M, M[:1])),
    "append 0-d": (lambda a: np.append(a[0, 0], 2.0), (M,)),
    "column_stack": (lambda a, b: np.column_stack([a, b, b[:, :1]]), (M[:, 0], M)),
    "row_stack": (_row_stack, (M, M[0])),
    "dstack": (lambda a, b: np.dstack([a, b, a]), (M, M ** 2)),
    "dstack 1-d": (lambda a: np.dstack([a, a]), (V,)),
    "block 2x2": (lambda a, b: np.block([[a, b], [b, a]]), (M[:2, :2], M[:2, 2:])),
    "block 1-d": (lambda a, b: np.block([a, b, 3.0]), (V, V[:2])),
    "block 3 deep": (lambda a, b: np.block([[[a]], [[b]]]), (S3, S3 * 2.0)),
    "block mixed ndim": (lambda a, b: np.block([[a], [b]]), (M, V[:4])),
    "flipud": (np.flipud, (M,)),
    "fliplr": (np.fliplr, (S3,)),
    **{f"rot90 k={k} axes={axes}": (lambda x, k=k, axes=axes: np.rot90(x, k, axes), (S3,))
       for k in (-1, 0, 1, 2, 3, 6) for axes in ((0, 1), (2, 0), (-1, -2))},
    "rollaxis": (lambda x: np.rollaxis(x, 2), (S3,)),
    "rollaxis start": (lambda x: np.rollaxis(x, -3, 3), (S3,)),
    "rollaxis negative start": (lambda x: np.rollaxis(x, 0, -1), (S3,)),
    "matrix_transpose": (np.matrix_transpose, (S3,)),
    "linalg.matrix_transpose": (np.linalg.matrix_transpose, (M,)),
    "unstack": (lambda x: np.unstack(x, axis=-1), (S3,)),
    "broadcast_arrays": (lambda a, b: np.broadcast_arrays(a, b, 1.0), (M, V[:4])),
    "delete": (lambda x: np.delete(x, [0, -1], axis=1), (M,)),
    "delete flat": (lambda x: np.delete(x, slice(1, 7, 2)), (M,)),
    "insert": (lambda x, v: np.insert(x, [1, 1, 3], v, axis=1), (M, V[:3])),
    "insert scalar obj": (lambda x, v: np.insert(x, 2, v, axis=0), (M, V[:4])),
    "insert flat": (lambda x, v: np.insert(x, 5, v), (M, V[:2])),
    "resize": (lambda x: np.resize(x, (4, 5)), (M,)),
    "resize smaller": (lambda x: np.resize(x, 3), (M,)),
    "trim_zeros": (lambda x: np.trim_zeros(x * np.array([0.0, 1, 1, 0, 1, 0, 0])[:5]), (V,)),
    "astype": (lambda x: np.astype(x, np.longdouble).astype(np.float64), (M,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_central_differences_and_numpy(name):
    f, args = CASES[name]
    run_case(f, *args)


@pytest.mark.parametrize("name", sorted(set(CASES) - {"astype"}))
def test_float32(name):
    f, args = CASES[name]
    run_float32(f, *args)


def test_views_and_errors_as_in_numpy():
    def write_through_rot90(x):
        y = np.rot90(x)
        y[0, 0] = 5.0  # NumPy's result is a view: the write reaches x
        return np.sum(x * x)

    x = np.arange(6.0).reshape(2, 3)
    assert pb.withgradient(write_through_rot90, x)[0] == write_through_rot90(x.copy())
    for bad in (lambda x: np.rot90(x, axes=(0, 0)), lambda x: np.fliplr(x[0]), lambda x: np.rollaxis(x, 3),
                lambda x: np.matrix_transpose(x[0]), lambda x: np.unstack(x[0, 0])):
        with pytest.raises((ValueError, np.exceptions.AxisError)):
            pb.gradient(lambda x: np.sum(bad(x)), x)
    with pytest.raises(ValueError):
        pb.gradient(lambda a: np.sum(np.block([[a], [a[:, :1]]])), x)


def test_empty_inputs():
    e = np.zeros((0, 3))
    assert pb.gradient(lambda x: np.sum(np.append(x, x)), e)[0].shape == (0, 3)
    assert pb.gradient(lambda x: np.sum(np.resize(x, (2, 2))), e)[0] is None  # zeros, whatever x is
    np.testing.assert_array_equal(pb.pullback(lambda x: np.resize(x, (2, 2)), e)[0], np.resize(e, (2, 2)))
    g = pb.gradient(lambda x: np.sum(np.trim_zeros(x) ** 2), np.zeros(4))[0]
    np.testing.assert_array_equal(g, np.zeros(4))


def test_insert_casts_values_to_the_array_dtype():
    x, v = np.ones(3, np.float32), np.array([2.0])
    y, back = pb.pullback(lambda x, v: np.insert(x, 1, v), x, v)
    assert y.dtype == np.float32
    gx, gv = back(np.arange(4.0, dtype=np.float32))
    np.testing.assert_array_equal(gx, [0.0, 2.0, 3.0])
    np.testing.assert_array_equal(gv, [1.0])


# --- sliding_window_view: overlapping windows, a read-only view ------------------------------------
SLIDING_WINDOWS = {
    "1-d": (lambda x: np.lib.stride_tricks.sliding_window_view(x, 3), V),
    "axis 0": (lambda x: np.lib.stride_tricks.sliding_window_view(x, 2, axis=0), M),
    "2-d windows": (lambda x: np.lib.stride_tricks.sliding_window_view(x, (2, 3)), M),
    "one axis twice": (lambda x: np.lib.stride_tricks.sliding_window_view(x, (2, 2), axis=(1, 1)), M),
    "axes reversed": (lambda x: np.lib.stride_tricks.sliding_window_view(x, (3, 2), axis=(-1, 0)), S3),
}


@pytest.mark.parametrize("name", sorted(SLIDING_WINDOWS))
def test_sliding_window_view_against_central_differences_and_numpy(name):
    f, x = SLIDING_WINDOWS[name]
    run_case(lambda x: np.sin(f(x)), x)
    run_float32(f, x)


def test_sliding_window_view_is_read_only_as_in_numpy_and_as_strided_names_it():
    from numpy.lib.stride_tricks import as_strided, sliding_window_view

    def write(x):
        sliding_window_view(x * 1.0, 3)[0, 1] = 0.0

    with pytest.raises(ValueError, match="read-only"):
        write(V.copy())
    with pytest.raises(ValueError, match="read-only"):
        pb.gradient(write, V)
    with pytest.raises(TypeError, match="sliding_window_view"):
        pb.gradient(lambda x: np.sum(as_strided(x, (3, 3), (8, 8))), np.arange(5.0))
    (g,) = pb.gradient(lambda x: np.sum(sliding_window_view(x, 3) ** 2), np.arange(5.0))
    np.testing.assert_allclose(g, 2 * np.arange(5.0) * np.array([1, 2, 3, 2, 1]))
    assert pb.jit(lambda x: pb.gradient(lambda x: np.sum(sliding_window_view(x, 3) ** 2), x)[0])(np.arange(5.0)) \
        .tolist() == g.tolist()


# --- writes through sliding_window_view(writeable=True): each element of the array written once -------
def _windows(y):
    return np.lib.stride_tricks.sliding_window_view(y, 3, writeable=True)  # shows most elements of y 2 or 3 times


def _add_to_a_window(w, y):
    w[1] += y[:3]  # w[1] = w[1] + y[:3]: y[1:4] written, each once


WINDOW_WRITES = {
    "one element": lambda w, y: w.__setitem__((2, 1), 7.0 * y[0]),  # y[3] only, once
    "a window": lambda w, y: w.__setitem__(1, y[:3] ** 2),
    "every window": lambda w, y: w.__setitem__(Ellipsis, 5.0),
    "one element from two places": lambda w, y: w.__setitem__(([0, 1], [1, 0]), y[5] * 3),
    "two writes": lambda w, y: (w.__setitem__((0, 2), y[0] * y[1]), w.__setitem__((1, 0), y[3] ** 2)),
    "a window in place": _add_to_a_window,
    "np.copyto": lambda w, y: np.copyto(w, 5.0 * y[0]),
}


@pytest.mark.parametrize("name", list(WINDOW_WRITES))
def test_writes_through_writeable_windows_against_numpy_and_central_differences(name):
    write = WINDOW_WRITES[name]

    def f(x):
        y = x * 1.0
        w = _windows(y)
        write(w, y)
        return y, w * 1.0  # the array written, and the windows as they show it afterwards

    run_case(f, np.array([1.3, 2.1, 0.7, 3.3, 4.1, 5.9]))


def test_one_element_through_two_windows_takes_one_value_and_refuses_two():
    def f(x, value):
        y = x * 1.0
        _windows(y)[[0, 1], [1, 0]] = value(y)  # both are y[1]
        return y

    x = np.arange(6.0)
    (g,) = pb.gradient(lambda x: np.sum(f(x, lambda y: y[5] ** 2)), x)
    np.testing.assert_array_equal(g, [1.0, 0.0, 1.0, 1.0, 1.0, 11.0])
    with pytest.raises(ValueError, match="writes the same element more than once"):  # NumPy keeps one of them
        pb.gradient(lambda x: np.sum(f(x, lambda y: np.stack([y[5], y[4]]))), x)


# --- np.pad of a 0-d array, and pad widths as NumPy reads them -----------------------------------------
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_pad_of_zero_d_array_is_a_copy_as_in_numpy(mode):
    x = np.array(1.5)
    assert np.pad(x, 2, mode=mode).shape == ()
    y, back = pb.vjp(lambda x: np.pad(x, 2, mode=mode), x)
    assert y.shape == () and y == 1.5
    assert back(np.array(2.0))[0] == 2.0
    _, t = pb.jvp(lambda x: np.pad(x, ((1, 2),), mode=mode), (x,), (np.array(3.0),))
    assert t == 3.0
    with pytest.raises(ValueError, match="not supported"):
        pb.vjp(lambda x: np.pad(x, 2, mode="bogus"), x)


@pytest.mark.parametrize("width", [[], np.array([1], np.uint8), (1.5,)], ids=["empty", "unsigned", "float"])
def test_pad_widths_that_numpy_refuses_are_refused(width):
    with pytest.raises(TypeError, match="integral"):
        np.pad(V, width)
    with pytest.raises(TypeError, match="integral"):
        pb.vjp(lambda x: np.pad(x, width), V)


# --- np.concatenate and np.stack into an out= that their inputs view ------------------------------------
def _rotated_into_itself(x):
    y = x * 1.0
    np.concatenate([y[3:], y[:3]], out=y)  # NumPy copies part by part: the second part reads the first's write
    return y


def _stacked_into_itself(x):
    y = np.reshape(x * 1.0, (2, 3))
    np.stack([y[1], y[0]], axis=0, out=y)
    return np.ravel(y)


def _flattened_into_itself(x):
    y = x * 1.0
    np.concatenate([np.reshape(y[:3], (1, 3)), np.reshape(y[3:], (3, 1))], axis=None, out=y[::-1])
    return y


@pytest.mark.parametrize("f", [_rotated_into_itself, _stacked_into_itself, _flattened_into_itself],
                         ids=["concatenate", "stack", "concatenate-axis-None"])
def test_join_into_an_out_its_inputs_view_matches_numpy(f):
    x = np.array([0.3, -1.0, 2.0, -0.5, 0.7, 1.1])
    y, _ = pb.vjp(f, x.copy())
    np.testing.assert_array_equal(y, f(x.copy()))
    run_case(f, x)
