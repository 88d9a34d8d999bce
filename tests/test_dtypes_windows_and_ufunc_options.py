"""Eager differentiation on odd dtypes, writes through overlapping windows and NumPy call options: every value equals NumPy's
own, every gradient agrees with central differences, or the call is refused naming the construct."""

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import pullback as pb
from pullback.testing import numerical_gradient

X = np.array([0.3, 1.2, -0.7, 2.1, 0.9, 1.6])


def _fresh(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def assert_like_numpy(f, *args, atol=1e-6):
    """`f` under pb.pullback gives NumPy's value (dtype included), and the gradient of the sum of its
    outputs matches central differences in reverse and forward mode."""
    expected = f(*_fresh(args))
    value, _ = pb.pullback(f, *_fresh(args))
    np.testing.assert_array_equal(value, expected)
    assert np.result_type(value) == np.result_type(expected)

    def loss(*a):
        return np.sum(f(*a))

    grads = pb.gradient(loss, *_fresh(args))
    numeric = numerical_gradient(loss, *_fresh(args))
    for g, n in zip(grads, numeric):
        np.testing.assert_allclose(g, n, rtol=1e-6, atol=atol)
    for k, a in enumerate(args):
        direction = np.cos(np.arange(np.size(a)) + 1.0).reshape(np.shape(a))
        tangents = tuple(direction if j == k else np.zeros_like(b) for j, b in enumerate(args))
        _, dot = pb.jvp(loss, tuple(_fresh(args)), tangents)
        np.testing.assert_allclose(dot, np.sum(numeric[k] * direction), rtol=1e-6, atol=atol)


# --- whole-array writes into writeable sliding windows --------------------------------------------------
def _windows(y):
    return sliding_window_view(y, 3, writeable=True)


WINDOW_UPDATES = {
    "w += 1": lambda w, y: w.__iadd__(1.0),
    "w *= 2": lambda w, y: w.__imul__(2.0),
    "w -= a number being differentiated": lambda w, y: w.__isub__(y[0] * 0.5),
    "w **= 2": lambda w, y: w.__ipow__(2),
    "np.exp(w, out=w)": lambda w, y: np.exp(w, out=w),
    "np.multiply(w, w, out=w)": lambda w, y: np.multiply(w, w, out=w),
    "np.add(w, 0-d array, out=w)": lambda w, y: np.add(w, np.array(0.25), out=w),
    "w /= one array element broadcast": lambda w, y: w.__itruediv__(y[:1] + 2.0),
}


@pytest.mark.parametrize("name", list(WINDOW_UPDATES))
def test_whole_window_updates_match_numpy_and_central_differences(name):
    _check_window_update(WINDOW_UPDATES[name])


def _check_window_update(update):
    def f(x):
        y = x * 1.0
        w = _windows(y)
        update(w, y)
        return np.concatenate([y, np.ravel(w * 1.0)])  # the array written, and the windows as they show it

    assert_like_numpy(f, X)


def test_window_update_of_float32_windows_stays_float32_like_numpy():
    def f(x):
        y = x * np.float32(1.0)
        w = _windows(y)
        w += 0.5
        return y

    x = X.astype(np.float32)
    value, back = pb.pullback(f, x)
    np.testing.assert_array_equal(value, f(x.copy()))
    assert value.dtype == np.float32 and back(np.ones(6, np.float32))[0].dtype == np.float32


@pytest.mark.parametrize("update", [lambda w: w.__iadd__(np.arange(3.0)), lambda w: w.__iadd__(w[::-1]),
                                    lambda w: np.add(w, np.arange(4.0)[:, None], out=w)],
                         ids=["per-column", "reversed windows", "per-window"])
def test_window_update_that_differs_between_places_of_one_element_is_refused_naming_it(update):
    def f(x):
        y = x * 1.0
        update(_windows(y))
        return np.sum(y)

    with pytest.raises(ValueError, match="sliding_window_view") as refusal:
        pb.gradient(f, X)
    assert "w.copy()" in str(refusal.value)


# --- ufunc call options ---------------------------------------------------------------------------------
MASK = np.array([True, False, True, True, False, True])

UFUNC_OPTIONS = {
    "where= into a traced out": lambda x: np.exp(x, out=x * 2.0, where=MASK),
    "where= into the input itself": lambda x: (lambda y: (np.sin(y, out=y, where=MASK), y)[1])(x * 1.0),
    "where= of a binary ufunc, positional out": lambda x: np.multiply(x, x[::-1], np.ones_like(x), where=MASK),
    "where= broadcast against out": lambda x: np.add(x[:3], 1.0, out=np.reshape(x * 3.0, (2, 3)),
                                                     where=np.array([True, False, True])),
    "where=False keeps out": lambda x: np.tanh(x, out=x * 2.0, where=False),
    "out= larger than the inputs, broadcast": lambda x: np.exp(x[:3], out=np.zeros_like(x).reshape(2, 3)),
    "casting=": lambda x: np.add(x, 1.5, casting="no"),
    "order='F'": lambda x: np.ravel(np.exp(np.reshape(x, (2, 3)), order="F"), order="K"),
    "subok=": lambda x: np.sin(x, subok=False),
    "signature string": lambda x: np.multiply(x, x, signature="dd->d"),
    "add.outer with where=True": lambda x: np.add.outer(x[:2], x[2:], where=True),
    "add.reduce where= and initial=": lambda x: np.add.reduce(np.reshape(x, (2, 3)), 1, where=MASK.reshape(2, 3),
                                                              initial=0.5),
    "maximum.reduce where=": lambda x: np.maximum.reduce(x, initial=-5.0, where=MASK),
    "add.reduce positional out": lambda x: np.add.reduce(np.reshape(x, (2, 3)), 0, None, np.zeros_like(x[:3])),
    "matmul axes=": lambda x: np.matmul(np.reshape(x, (2, 3)), np.reshape(x, (2, 3)), axes=[(1, 0), (0, 1), (0, 1)]),
    "matmul axes= into the last axes": lambda x: np.matmul(np.reshape(x, (3, 2)), np.reshape(x, (2, 3)),
                                                           axes=[(1, 0), (1, 0), (1, 0)]),
    "vecdot axis=": lambda x: np.vecdot(np.reshape(x, (2, 3)), np.reshape(x[::-1], (2, 3)), axis=0),
    "matvec axes=": lambda x: np.matvec(np.reshape(x, (3, 2)), x[:3], axes=[(1, 0), (0,), (0,)]),
}


@pytest.mark.parametrize("name", list(UFUNC_OPTIONS))
def test_ufunc_call_options_give_numpys_values_and_true_gradients(name):
    assert_like_numpy(UFUNC_OPTIONS[name], X)


@pytest.mark.parametrize("options", [{"dtype": np.float32}, {"signature": (None, None, np.float32)},
                                     {"signature": "ff->f"}, {"dtype": np.float32, "casting": "unsafe"}],
                         ids=["dtype", "signature tuple", "signature string", "dtype and casting"])
def test_ufunc_computing_in_float32_gives_numpys_float32_value_and_the_float32_derivative(options):
    def f(x):
        return np.multiply(x, np.sin(x), **options)

    value, back = pb.pullback(f, X)
    np.testing.assert_array_equal(value, f(X))
    assert value.dtype == np.float32
    x32 = X.astype(np.float32)  # the loop computes x32 * sin(x32): its derivative there, back in float64
    (g,) = back(np.ones(6, np.float32))
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, np.sin(x32) + x32 * np.cos(x32), rtol=1e-5, atol=1e-6)


def test_ufunc_option_numpy_refuses_raises_numpys_error():
    with pytest.raises(TypeError, match="casting rule 'safe'"):
        np.add(X, 1.0, dtype=np.float32, casting="safe")
    with pytest.raises(TypeError, match="casting rule 'safe'"):
        pb.gradient(lambda x: np.sum(np.add(x, 1.0, dtype=np.float32, casting="safe")), X)


def test_ufunc_where_without_out_is_refused_naming_out_and_np_where():
    with pytest.raises(TypeError, match=r"where=.*out=.*np\.where"):
        pb.gradient(lambda x: np.sum(np.exp(x, where=MASK)), X)


def test_ufunc_without_gradient_into_a_traced_out_returns_that_array_as_numpy_does():
    def f(x):
        y = x * 1.0
        r = np.floor(x, out=y, where=MASK)
        assert r is y
        return y

    assert_like_numpy(f, X)


# --- np.add.at and np.subtract.at into a traced array ---------------------------------------------------
def _scatter_added(x):
    y = x * 1.0
    np.add.at(y, np.array([0, 2, 0, 3, 0]), x[1:] ** 2)  # repeated indices add again, in order
    np.subtract.at(y, [1, 1], np.sin(x[:2]))
    return y


def _scatter_added_through_a_view(x):
    y = x * 1.0
    np.add.at(np.reshape(y, (2, 3))[:, 1], (np.array([0, 0, 1]),), x[2:3] * 3.0)  # y[1] twice, y[4] once
    return y


def _scatter_added_with_a_tuple_index(x):
    y = np.reshape(x * 2.0, (2, 3))
    np.add.at(y, (slice(None), [0, 0, 2]), np.reshape(x[:6], (2, 3)))
    return y


@pytest.mark.parametrize("f", [_scatter_added, _scatter_added_through_a_view, _scatter_added_with_a_tuple_index])
def test_ufunc_at_adds_repeats_as_numpy_with_true_gradients(f):
    assert_like_numpy(f, X)


def test_ufunc_at_second_derivative_matches_central_differences_of_the_gradient():
    def f(x):
        return np.sum(_scatter_added(x) ** 3)

    hessian = pb.hessian(f, X)
    numeric = np.stack([numerical_gradient(lambda x: pb.gradient(f, x)[0][j], X)[0] for j in range(X.size)])
    np.testing.assert_allclose(hessian, numeric, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("call, match", [
    (lambda x: np.multiply.at(x, [0, 0], 2.0), r"multiply\.at is not supported.*np\.add\.at"),
    (lambda x: np.add.at(np.zeros(6), [0, 0], x[:2]), r"add\.at would write .* plain array.*np\.zeros_like"),
    (lambda x: np.add.at(x, [0, 1], x[1:3]), r"add\.at\(a, index, v\) with v a view.*v\.copy\(\)"),
], ids=["multiply.at", "into a plain array", "reading what it writes"])
def test_ufunc_at_forms_without_a_true_derivative_are_refused_naming_them(call, match):
    def f(x):
        y = x * 1.0
        call(y)
        return np.sum(y)

    with pytest.raises((TypeError, ValueError), match=match):
        pb.gradient(f, X)


def test_ufunc_outer_keeps_its_dtype_option_as_numpy_does():
    def f(x):
        return np.multiply.outer(x[:2], x[2:], dtype=np.float32)

    value, back = pb.pullback(f, X)
    np.testing.assert_array_equal(value, f(X))
    assert value.dtype == np.float32
    (g,) = back(np.ones((2, 4), np.float32))
    x32 = X.astype(np.float32)
    np.testing.assert_allclose(g, np.concatenate([np.full(2, np.sum(x32[2:])), np.full(4, np.sum(x32[:2]))]), rtol=1e-6)


# --- dtypes ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.longdouble])
def test_gradient_jvp_and_hessian_keep_the_float_dtype_and_agree_with_float64_derivatives(dtype):
    def f(x):
        return np.sum(np.tanh(x) * x + 0.5 * x ** 2)

    x = X.astype(dtype)
    x64 = x.astype(np.float64)  # the same point; the derivative in float64, rounded to dtype
    tolerance = {np.float16: 5e-3, np.float32: 1e-6, np.longdouble: 1e-12}[dtype]
    value, (g,) = pb.withgradient(f, x)
    assert value == f(x) and np.result_type(value) == dtype and g.dtype == dtype
    expected = np.tanh(x64) + x64 * (1 - np.tanh(x64) ** 2) + x64
    np.testing.assert_allclose(g.astype(np.float64), expected, rtol=tolerance, atol=tolerance)
    _, dot = pb.jvp(f, (x,), (np.ones_like(x),))
    assert np.result_type(dot) == dtype
    np.testing.assert_allclose(float(dot), np.sum(expected), rtol=tolerance * 10)
    h = pb.hessian(f, x)
    assert h.dtype == dtype
    t = np.tanh(x64)
    np.testing.assert_allclose(np.diag(h).astype(np.float64), 2 * (1 - t ** 2) - 2 * x64 * t * (1 - t ** 2) + 1,
                               rtol=tolerance * 10, atol=tolerance * 10)


PROMOTIONS = {
    "Python float": lambda x: x * 2.5,
    "np.float64 scalar": lambda x: x * np.float64(2.5),
    "0-d float64 array": lambda x: x * np.array(2.5),
    "np.float16 scalar": lambda x: x - np.float16(0.5),
    "int64 array": lambda x: x + np.arange(6),
    "int8 array": lambda x: x + np.arange(6, dtype=np.int8),
    "uint8 array": lambda x: x * np.arange(6, dtype=np.uint8),
    "bool array": lambda x: x * MASK,
    "Python complex": lambda x: x * 1j,
    "complex128 scalar": lambda x: x * np.complex128(1j),
}


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("name", list(PROMOTIONS))
def test_mixed_dtype_arithmetic_gives_numpys_result_dtype_in_both_modes(name, dtype):
    f = PROMOTIONS[name]
    x = X.astype(dtype)
    expected = f(x)
    value, back = pb.pullback(f, x)
    np.testing.assert_array_equal(value, expected)
    assert value.dtype == expected.dtype
    assert back(np.ones_like(expected))[0].dtype == dtype  # a gradient keeps its argument's dtype
    y, dot = pb.jvp(f, (x,), (np.ones_like(x),))
    assert y.dtype == expected.dtype and dot.dtype == expected.dtype


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("name, f", [
    ("abs", lambda z: np.sum(np.abs(z))),
    ("angle", lambda z: np.sum(np.angle(z))),
    ("conj times square", lambda z: np.sum(np.real(np.conj(z) * z ** 2))),
    ("real times imag", lambda z: np.sum(np.real(z) * np.imag(z))),
    ("holomorphic", lambda z: np.sum(np.imag(np.exp(z) / (z + 2.0)))),
])
def test_complex_gradients_follow_the_documented_convention(name, f, dtype):
    # for a real L of z = x + iy the gradient is dL/dx - i dL/dy; a tangent v moves L by Re(g * v)
    z = np.array([1 + 2j, -3 - 1j, 0.5 - 0.2j], dtype)
    (g,) = pb.gradient(f, z)
    numeric = numerical_gradient(f, z)[0]
    tolerance = 2e-3 if dtype == np.complex64 else 1e-6
    assert g.dtype == dtype
    np.testing.assert_allclose(g, numeric, rtol=tolerance, atol=tolerance)
    v = np.array([0.3 - 0.7j, 1.1 + 0.2j, -0.4 + 0.9j], dtype)
    np.testing.assert_allclose(pb.jvp(f, (z,), (v,))[1], np.real(np.sum(numeric * v)), rtol=tolerance, atol=tolerance)


def test_abs_gradient_matches_a_hand_derivation():
    z = np.array([3.0 + 4.0j])  # |z| = sqrt(x² + y²): d/dx = x/|z|, d/dy = y/|z|, so the gradient is (x - iy)/|z|
    np.testing.assert_allclose(pb.gradient(lambda z: np.sum(np.abs(z)), z)[0], [(3.0 - 4.0j) / 5.0])


@pytest.mark.parametrize("arg", [np.array([1, 2, 3]), np.array([True, False, True]), 3, np.int64(3), True],
                         ids=["int array", "bool array", "int", "np.int64", "bool"])
def test_integer_and_boolean_arguments_get_none_and_refuse_a_tangent(arg):
    def f(a):
        return np.sum(np.asarray(a) * 2.5 if not isinstance(a, np.ndarray) else a * 2.5)

    assert pb.gradient(f, arg) == (None,)
    with pytest.raises(TypeError, match="not differentiated"):
        pb.jvp(f, (arg,), (np.ones(np.shape(arg)),))


def test_ufunc_into_a_plain_integer_out_writes_numpys_values_as_there_is_no_gradient_to_lose():
    def f(x):
        counts = np.zeros(6, np.int64)
        np.multiply(x, 3.0, out=counts, casting="unsafe", where=MASK)
        running = np.zeros(6, np.int64)
        np.add.accumulate(x, out=running)
        return x * counts + running

    assert_like_numpy(f, X)
    with pytest.raises(TypeError, match="same_kind"):  # NumPy's refusal under its default casting
        pb.gradient(lambda x: np.sum(np.add(x, 1.0, out=np.zeros(6, np.int64)) * x), X)


def test_gufunc_axis_with_keepdims_matches_numpy():
    def f(x):
        b = np.reshape(np.concatenate([x, x[::-1] * 0.5]), (2, 3, 2))
        return np.vecdot(b, b[::-1], axis=1, keepdims=True)

    assert_like_numpy(f, X)


def test_a_structured_array_with_float_fields_is_refused_not_given_none():
    record = np.array([(1.0, 2.0)], dtype=[("a", "f8"), ("b", "f8")])
    with pytest.raises(TypeError, match=r"structured NumPy array with float fields.*separate float arrays"):
        pb.gradient(lambda r: np.sum(r["a"] * r["b"]), record)
    for hidden in (record[0], np.zeros(2, [("inner", [("x", "f8")])])):  # a record alone; a nested float field
        with pytest.raises(TypeError, match=r"structured NumPy array with float fields"):
            pb.gradient(lambda r: 1.0, hidden)
    counts = np.array([(3,)], dtype=[("n", "i4")])  # integer fields carry no gradient: None, as for an int array
    g, none = pb.gradient(lambda x, c: np.sum(x * c["n"]), np.ones(1), counts)
    np.testing.assert_array_equal(g, [3.0])
    assert none is None


# --- np.add.at under pb.jit, with an index that changes between calls -------------------------------------
def _added_at_loss(E, idx, g):
    acc = np.zeros_like(E)
    np.add.at(acc, idx, g)
    return np.sum((E - acc) ** 2)


def _assert_jit_gradient_matches_eager(loss, calls):
    """`pb.jit(pb.withgradient(loss))` gives, call after call, the eager value and gradient, which agree
    with central differences."""
    jitted = pb.jit(lambda *a: pb.withgradient(loss, *a))
    for args in calls:
        value, grads = jitted(*_fresh(args))
        expected_value, expected = pb.withgradient(loss, *_fresh(args))
        assert value == expected_value == loss(*_fresh(args))
        np.testing.assert_allclose(expected[0], numerical_gradient(loss, *_fresh(args))[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(grads[0], expected[0])


def test_add_at_with_an_index_given_to_jit_matches_eager_call_after_call():
    rng = np.random.default_rng(0)
    E, g = rng.normal(size=(5, 2)), rng.normal(size=(4, 2))
    _assert_jit_gradient_matches_eager(_added_at_loss, [(E, np.array([0, 2, 2, 4]), g),
                                                        (E, np.array([1, 1, 3, 0]), g),
                                                        (E, np.array([4, 4, 4, 4]), g)])


def test_add_at_with_a_tuple_index_given_to_jit_matches_eager_call_after_call():
    def loss(E, rows, cols, g):
        acc = np.zeros_like(E)
        np.subtract.at(acc, (rows, cols), g)
        return np.sum((E - acc) ** 2)

    rng = np.random.default_rng(1)
    E, g = rng.normal(size=(4, 3)), rng.normal(size=5)
    _assert_jit_gradient_matches_eager(loss, [(E, np.array([0, 3, 3, 1, 0]), np.array([2, 1, 1, 0, 2]), g),
                                              (E, np.array([1, 1, 2, 2, 3]), np.array([0, 0, 0, 2, 1]), g)])


def test_add_at_with_an_index_computed_inside_jit_matches_eager_call_after_call():
    edges = np.array([-1.0, 0.0, 1.0])

    def loss(E, x, g):
        acc = np.zeros_like(E)
        np.add.at(acc, np.digitize(x, edges), g * E[0])
        return np.sum((E - acc) ** 2)

    rng = np.random.default_rng(2)
    E, g = rng.normal(size=(4, 2)), rng.normal(size=(5, 2))
    _assert_jit_gradient_matches_eager(loss, [(E, np.array([-2.0, 0.5, 0.5, 3.0, -0.5]), g),
                                              (E, np.array([0.1, 0.2, -3.0, -3.0, 2.0]), g)])


def test_add_at_with_a_mask_computed_inside_jit_matches_eager_as_its_count_changes():
    def loss(E, x):
        acc = np.zeros_like(E)
        np.add.at(acc, x > 0, E[0] * 2.0)
        return np.sum((E - acc) ** 2)

    E = np.arange(1.0, 6.0)
    _assert_jit_gradient_matches_eager(loss, [(E, np.array([1.0, -1.0, 2.0, 3.0, -1.0])),
                                              (E, np.array([-1.0, -1.0, 2.0, -3.0, -1.0]))])


# --- order= of ufuncs with several outputs, and of generalised ufuncs with axes= ------------------------
@pytest.mark.parametrize("f", [lambda x: np.divmod(x, 0.7, order="F")[1], lambda x: np.modf(x, order="C")[0],
                               lambda x: np.frexp(x, order="F")[0], lambda x: np.divmod(x.T, 0.7, order="C")[1],
                               lambda x: np.frexp(x.T, order="C")[1] * x.T],
                         ids=["divmod F", "modf C", "frexp F", "divmod C of a transpose", "frexp exponent"])
def test_ufunc_with_several_outputs_takes_order_as_numpy_does(f):
    x = np.reshape(X * 3.1, (2, 3))  # away from divmod's jumps
    expected, value = f(x.copy()), pb.pullback(f, x.copy())[0]
    assert value.strides == expected.strides
    assert_like_numpy(lambda x: np.ravel(f(x), order="K"), x)


@pytest.mark.parametrize("order", "CFAK")
@pytest.mark.parametrize("axes", [[(1, 0), (1, 0), (1, 0)], [(0, 1), (1, 2), (2, 0)], [(2, 1), (0, 1), (1, 2)]])
def test_matmul_with_axes_and_order_lays_its_output_out_as_numpy_does(axes, order):
    shapes = {(1, 0): ((4, 3, 2), (5, 4, 2)), (0, 1): ((3, 4, 2), (2, 4, 5)), (2, 1): ((2, 4, 3), (4, 5, 2))}[axes[0]]
    rng = np.random.default_rng(3)
    A, B = rng.normal(size=shapes[0]), rng.normal(size=shapes[1])

    def f(A, B):
        return np.matmul(A, B, axes=axes, order=order)

    expected, value = f(A, B), pb.pullback(f, A, B)[0]
    assert value.shape == expected.shape and value.strides == expected.strides
    assert_like_numpy(lambda A, B: np.ravel(f(A, B), order="K"), A, B)


# --- ufuncs into writeable sliding windows -----------------------------------------------------------------
MORE_WINDOW_UPDATES = {
    "np.floor(w, out=w)": lambda w, y: np.floor(w, out=w),
    "np.floor(w, out=w, where=)": lambda w, y: np.floor(w, out=w, where=w > 1.0),
    "np.floor(w * 2, out=w)": lambda w, y: np.floor(w * 2.0, out=w),
    "np.floor(1.5, out=w)": lambda w, y: np.floor(1.5, out=w),
    "np.multiply(w, 2, out=w, where=w > 1)": lambda w, y: np.multiply(w, 2, out=w, where=w > 1),
    "w += np.ones(3)": lambda w, y: w.__iadd__(np.ones(3)),
    "w *= a constant the same in every window": lambda w, y: w.__imul__(np.full((4, 3), -1.5)),
    "np.add(w, y[0], out=w, where=constant per element)": lambda w, y: np.add(
        w, y[0], out=w, where=_windows(np.array([True, False, True, True, False, False]))),
}


@pytest.mark.parametrize("name", list(MORE_WINDOW_UPDATES))
def test_ufunc_into_windows_computing_one_value_per_element_matches_numpy(name):
    _check_window_update(MORE_WINDOW_UPDATES[name])


@pytest.mark.parametrize("update", [
    lambda w: w.__iadd__(np.array([1.0, 1.0, 2.0])),
    lambda w: w.__imul__(np.array([0.0, -0.0, 0.0])),
    lambda w: np.multiply(w, 2, out=w, where=np.array([True, False, True])),
    lambda w: np.floor(w + np.arange(3.0), out=w),
    lambda w: np.add(w, np.ones(3), out=w, where=np.arange(12).reshape(4, 3) % 3 == 0),
], ids=["per-column constant", "signed zeros", "per-column mask", "constant result differing", "varying mask"])
def test_ufunc_into_windows_whose_result_depends_on_numpys_loop_order_is_refused(update):
    def f(x):
        y = x * 1.0
        update(_windows(y))
        return np.sum(y * x)

    with pytest.raises(ValueError, match="sliding_window_view") as refusal:
        pb.gradient(f, X)
    assert "w.copy()" in str(refusal.value)


def test_ufunc_into_windows_under_jit_matches_eager_and_refuses_what_eager_refuses():
    def f(x, m):
        y = x * 1.0
        w = _windows(y)
        np.multiply(w, 2, out=w, where=w > m)
        np.floor(w, out=w, where=w > 3.0)
        return np.sum(y * x)

    jitted = pb.jit(lambda x, m: pb.withgradient(f, x, m))
    for m in (1.0, 0.5, 2.0):
        value, grads = jitted(X.copy(), np.full(3, m))
        expected_value, expected = pb.withgradient(f, X.copy(), np.full(3, m))
        assert value == expected_value == f(X.copy(), np.full(3, m))
        np.testing.assert_array_equal(grads[0], expected[0])
    with pytest.raises(ValueError, match="sliding_window_view"):
        jitted(X.copy(), np.array([0.0, 5.0, 0.0]))


@pytest.mark.parametrize("view", [lambda x: x[::2].T, lambda x: x.T, lambda x: x[:, ::2], lambda x: x],
                         ids=["strided transpose", "transpose", "strided", "contiguous"])
@pytest.mark.parametrize("order", "ACFK")
def test_ufunc_order_lays_its_output_out_as_numpy_does(view, order):
    def f(x):
        return np.add(view(x), x[0, 0], order=order)

    x = np.reshape(np.cos(np.arange(24.0)), (4, 6))
    assert pb.pullback(f, x)[0].strides == f(x).strides
    assert_like_numpy(lambda x: np.ravel(f(x), order="K"), x)


def test_add_at_with_values_read_from_the_array_it_writes_under_jit_refuses_as_eager_does():
    def loss(E, idx):
        acc = E * 1.0
        np.add.at(acc, idx, acc[3:])
        return np.sum(acc ** 2)

    E = np.arange(1.0, 6.0)
    jitted = pb.jit(lambda E, idx: pb.withgradient(loss, E, idx))
    for idx in (np.array([0, 1]), np.array([0, 3]), np.array([1, 2])):
        try:
            expected = pb.withgradient(loss, E, idx)
        except ValueError as refusal:
            with pytest.raises(ValueError, match="v.copy()"):
                jitted(E, idx)
            assert "v.copy()" in str(refusal)
            continue
        value, grads = jitted(E, idx)
        assert value == expected[0] == loss(E.copy(), idx)
        np.testing.assert_array_equal(grads[0], expected[1][0])
        np.testing.assert_allclose(grads[0], numerical_gradient(loss, E, idx)[0], rtol=1e-6)


def test_add_at_with_an_index_given_to_jit_matches_eager_in_forward_mode_and_second_order():
    def loss(E, idx, g):
        acc = np.zeros_like(E)
        np.add.at(acc, idx, g * E[0])
        return np.sum((E - acc) ** 3)

    rng = np.random.default_rng(4)
    E, g, t = rng.normal(size=(5, 2)), rng.normal(size=(4, 2)), rng.normal(size=(5, 2))
    forward = pb.jit(lambda E, idx, g, t: pb.jvp(lambda E: loss(E, idx, g), (E,), (t,)))
    second = pb.jit(lambda E, idx, g: pb.hessian(lambda E: loss(E, idx, g), E))
    for idx in (np.array([0, 2, 2, 4]), np.array([1, 1, 1, 3])):
        value, dot = forward(E, idx, g, t)
        expected_value, expected_dot = pb.jvp(lambda E: loss(E, idx, g), (E,), (t,))
        assert value == expected_value == loss(E, idx, g)
        np.testing.assert_allclose(dot, expected_dot, rtol=1e-12)
        np.testing.assert_allclose(dot, np.sum(numerical_gradient(loss, E, idx, g)[0] * t), rtol=1e-6)
        np.testing.assert_array_equal(second(E, idx, g), pb.hessian(lambda E: loss(E, idx, g), E))


def test_constant_ufunc_into_windows_under_jit_matches_eager_and_refuses_what_eager_refuses():
    def f(x, s):
        y = x * 1.0
        w = _windows(y)
        np.floor(w * s, out=w)
        return np.sum(y * x)

    jitted = pb.jit(lambda x, s: pb.withgradient(f, x, s))
    for s in (np.ones(3), np.full(3, 2.0)):
        value, grads = jitted(X.copy(), s)
        expected_value, expected = pb.withgradient(f, X.copy(), s)
        assert value == expected_value == f(X.copy(), s)
        np.testing.assert_array_equal(grads[0], expected[0])
    with pytest.raises(ValueError, match="sliding_window_view"):
        pb.withgradient(f, X.copy(), np.array([1.0, 2.0, 1.0]))
    with pytest.raises(ValueError, match="sliding_window_view"):
        jitted(X.copy(), np.array([1.0, 2.0, 1.0]))


@pytest.mark.parametrize("ufunc", [np.exp, np.floor], ids=["with a derivative", "without"])
def test_out_given_a_numpy_scalar_raises_numpy_s_error_not_dropping_the_write(ufunc):
    def f(x):
        y = x * 1.0  # of a 0-d array: a NumPy scalar, which NumPy cannot write into
        ufunc(x, out=y)
        return y

    x = np.array(2.5)
    for run in (lambda: f(x), lambda: pb.jvp(f, (x,), (np.ones(()),)), lambda: pb.gradient(lambda x: f(x) * 1.0, x)):
        with pytest.raises(TypeError, match="return arrays must be of ArrayType"):
            run()


def test_add_at_by_an_index_computed_under_jit_with_a_constant_cotangent():
    def loss(x):
        y = x * 1.0
        np.add.at(y, np.argsort(x), x)
        return np.sum(y)  # the cotangent reaching add.at is a plain array of ones

    jitted = pb.jit(lambda x: pb.gradient(loss, x)[0])
    for x in (np.array([0.3, -1.2, 2.5]), np.array([2.0, 1.0, -3.0])):
        np.testing.assert_array_equal(jitted(x), pb.gradient(loss, x)[0])
        np.testing.assert_allclose(jitted(x), numerical_gradient(loss, x)[0], rtol=1e-7)
