"""Review of round C: pb.stop_gradient's value and its views as an operation read them, rows that C code asks
for as views again (NumPy's shuffle still permutes), np.nan_to_num(copy=False) of a scalar."""

import operator
import re

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient

X = np.array([1.0, 2.0, 3.0])
T = np.array([1.0, 10.0, 100.0])


def fd(f, x):
    return numerical_gradient(f, x)[0]


# --- 1. pb.stop_gradient: a private copy; an operation keeps the value (or a view of it) as it read it ----------

VIEWS = {
    "itself": lambda s: s,
    "T": lambda s: s.T,
    "slice": lambda s: s[:],
    "tail": lambda s: np.concatenate([s[:1], s[1:]]),
    "reshape": lambda s: s.reshape(3, 1).reshape(3),
    "broadcast_to": lambda s: np.broadcast_to(s, (2, 3)),
}


@pytest.mark.parametrize("view", VIEWS.values(), ids=VIEWS.keys())
def test_an_operation_keeps_a_view_of_the_value_as_it_read_it(view):
    def f(x):
        y = x * 1.0
        v = view(pb.stop_gradient(y))
        total = np.sum(x * v)
        y[0] = 7.0  # recorded: the value and v show it, as in NumPy
        return total + np.sum(v)

    held = view(X.copy())  # v as the product read it
    value, (g,) = pb.withgradient(f, X.copy())
    assert value == f(X.copy())
    np.testing.assert_allclose(g, fd(lambda z: np.sum(z * held), X), rtol=1e-7)
    value, tangent = pb.jvp(f, (X.copy(),), (T,))
    assert value == f(X.copy())
    assert tangent == pytest.approx(np.sum(T * held))


def test_a_product_with_a_reshaped_value_keeps_it_as_read():
    w0 = np.array([[1.0, 2.0], [3.0, 4.0]])

    def f(w):
        y = w * 1.0
        s = pb.stop_gradient(y).reshape(4).reshape(2, 2)
        total = np.sum(w @ s)
        y *= 3.0
        return total + np.sum(s)

    value, (g,) = pb.withgradient(f, w0.copy())
    assert value == f(w0.copy())
    np.testing.assert_allclose(g, fd(lambda z: np.sum(z @ w0), w0), rtol=1e-7)


CALLER_CASES = {  # f, and f with pb.stop_gradient(w) read as the constant c
    "T": (lambda w: np.sum(w * pb.stop_gradient(w).T), lambda w, c: np.sum(w * c.T), np.array([1.0, 2.0, 3.0])),
    "reshape": (lambda w: np.sum(w @ pb.stop_gradient(w).reshape(2, 2)), lambda w, c: np.sum(w @ c.reshape(2, 2)),
                np.array([[1.0, 2.0], [3.0, 4.0]])),
    "broadcast_to": (lambda w: np.sum(np.exp(w) * np.broadcast_to(pb.stop_gradient(w), (2, 3))),
                     lambda w, c: np.sum(np.exp(w) * np.broadcast_to(c, (2, 3))), np.array([1.0, 2.0, 3.0])),
}


@pytest.mark.parametrize("f, fixed, w0", CALLER_CASES.values(), ids=CALLER_CASES.keys())
def test_back_reads_the_value_as_f_did_after_the_caller_changes_its_array(f, fixed, w0):
    expected = fd(lambda z: fixed(z, w0), w0)
    for vjp in (pb.pullback, pb.vjp):
        w = w0.copy()
        value, back = vjp(f, w)
        assert value == f(w0.copy())
        w -= 0.5
        np.testing.assert_allclose(back(1.0)[0], expected, rtol=1e-6)


def test_a_write_through_the_callers_name_after_the_value_was_read():
    g_array = X.copy()

    def f(x):
        v = pb.stop_gradient(x)[:]
        y = np.sum(x * v)
        g_array[:] = 10.0  # after v was read: NumPy's gradient is v as it was
        return y

    value, (g,) = pb.withgradient(f, g_array)
    assert value == np.sum(X * X)
    np.testing.assert_allclose(g, X)


def test_subtracting_the_max_of_the_value_from_the_argument():
    def f(x):
        s = pb.stop_gradient(x)
        m = s.max()
        x -= m  # the usual shift before exp, with s still alive
        return np.sum(np.exp(x))

    x = X.copy()
    value, (g,) = pb.withgradient(f, x)
    np.testing.assert_array_equal(x, X)  # the caller's array as it was
    assert value == f(X.copy())
    np.testing.assert_allclose(g, fd(lambda z: np.sum(np.exp(z - X.max())), X), rtol=1e-6)
    assert pb.jvp(f, (X.copy(),), (T,))[1] == pytest.approx(np.sum(np.exp(X - X.max()) * T))


def test_a_recorded_write_into_the_argument_shows_in_the_value():
    def f(x):
        s = pb.stop_gradient(x)
        x[0] = 5.0
        return np.sum(x * s)  # s is x: (5, 2, 3)

    held = np.array([5.0, 2.0, 3.0])

    def fixed(z):
        z = z.copy()
        z[0] = 5.0
        return np.sum(z * held)

    x = X.copy()
    value, (g,) = pb.withgradient(f, x)
    np.testing.assert_array_equal(x, X)
    assert value == f(X.copy())
    np.testing.assert_allclose(g, fd(fixed, X), atol=1e-7)
    assert pb.jvp(f, (X.copy(),), (T,)) == (f(X.copy()), pytest.approx(np.dot(fd(fixed, X), T)))


def test_a_view_of_the_value_handed_back_is_not_the_callers_memory():
    x = X.copy()
    (value, aux), g = pb.value_and_grad(lambda x: (np.sum(x * x), pb.stop_gradient(x)[:2]), has_aux=True)(x)
    np.testing.assert_array_equal(aux, X[:2])
    assert not np.shares_memory(aux, x)
    np.testing.assert_allclose(g, 2 * X)


# --- 2. rows asked for by C code are views, as in NumPy; NumPy's shuffle still permutes ------------------------

Y0 = np.arange(6.0).reshape(3, 2) + 1
WEIGHTS = np.array([[1.0, -2.0], [3.0, 0.5], [-1.5, 2.5]])


def _getitem_write(x):
    y = x * 1.0
    r = operator.getitem(y, 0)
    r[...] = 0.0  # writes into y
    return np.sum(y * y * WEIGHTS)


def _itemgetter_in_place(x):
    y = x * 1.0
    r = operator.itemgetter(1)(y)
    r *= 10.0
    return np.sum(y * WEIGHTS)


def _map_rows_write(x):
    y = x * 1.0
    rows = list(map(y.__getitem__, range(3)))
    rows[0][:] = 5.0
    return np.sum(y * WEIGHTS)


def _row_shows_a_later_write(x):
    y = x * 1.0
    r = operator.getitem(y, 0)
    y[0, 0] = 100.0
    return np.sum(r * x[0])


def _explicit_dunder(x):
    y = x * 1.0
    r = y.__getitem__(2)
    r += 1.0
    return np.sum(y * y * WEIGHTS)


def _row_held_across_setitem(x):
    y = x * 1.0
    r = operator.getitem(y, 0)
    operator.setitem(y, 0, y[1] * 2.0)  # r shows it
    return np.sum(r * x[2]) + np.sum(y * WEIGHTS)


def _rows_held_across_mapped_setitem(x):
    y = x * 1.0
    rows = list(map(y.__getitem__, [1, 0]))
    list(map(y.__setitem__, [0], [rows[0]]))  # rows[1], row 0, shows row 1
    return np.sum(rows[1] * x[2]) + np.sum(y * WEIGHTS)


def _forward(fn, *args):
    return fn(*args)


def _rows_through_one_helper(x):
    y = x * 1.0
    r = _forward(operator.getitem, y, 0)
    _forward(operator.setitem, y, 0, _forward(operator.getitem, y, 1))  # r shows it
    return np.sum(r * x[2]) + np.sum(y * WEIGHTS)


C_CALLERS = {f.__name__.strip("_"): f for f in (_getitem_write, _itemgetter_in_place, _map_rows_write,
                                                  _row_shows_a_later_write, _explicit_dunder, _row_held_across_setitem,
                                                  _rows_held_across_mapped_setitem, _rows_through_one_helper)}


@pytest.mark.parametrize("f", C_CALLERS.values(), ids=C_CALLERS.keys())
def test_a_row_c_code_asks_for_is_a_view_as_in_numpy(f):
    expected = f(Y0.copy())
    value, (g,) = pb.withgradient(f, Y0.copy())
    assert value == expected
    numerical = fd(f, Y0)
    np.testing.assert_allclose(g, numerical, rtol=1e-6, atol=1e-6)
    tangent_in = Y0 * 0.5 + 1.0
    value, tangent = pb.jvp(f, (Y0.copy(),), (tangent_in,))
    assert value == expected
    assert tangent == pytest.approx(np.sum(numerical * tangent_in))


SHUFFLERS = {
    "Generator": lambda: np.random.default_rng(7),
    "RandomState": lambda: np.random.RandomState(7),
    "legacy": lambda: (np.random.seed(7), np.random)[1],
}
SHUFFLED = {
    "2d": ((5, 3), lambda y: y),
    "3d": ((4, 3, 2), lambda y: y),
    "view": ((5, 3), lambda y: y[1:, ::-1]),
}


@pytest.mark.parametrize("shape, part", SHUFFLED.values(), ids=SHUFFLED.keys())
@pytest.mark.parametrize("make", SHUFFLERS.values(), ids=SHUFFLERS.keys())
def test_numpys_shuffle_permutes_a_traced_array_as_an_ndarray(make, shape, part):
    x0 = (np.arange(np.prod(shape), dtype=float).reshape(shape) + 1.0) ** 1.5
    weights = np.cos(np.arange(np.prod(shape))).reshape(shape)

    def f(x, rng):
        y = x * 1.0
        rng.shuffle(part(y))
        return np.sum(y * weights)

    rng = make()
    y = x0.copy()
    rng.shuffle(part(y))
    assert len({row.tobytes() for row in part(y)}) == len(part(y))  # a permutation, no repeated rows
    expected, after = f(x0.copy(), make()), rng.random()
    traced_rng = make()
    value, (g, _) = pb.withgradient(f, x0.copy(), traced_rng)
    assert value == expected and traced_rng.random() == after
    fixed = lambda z: f(z, make())  # noqa: E731
    numerical = fd(fixed, x0)
    np.testing.assert_allclose(g, numerical, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(np.sort(g.ravel()), np.sort(weights.ravel()))
    value, tangent = pb.jvp(fixed, (x0.copy(),), (np.ones(shape),))
    assert value == expected
    assert tangent == pytest.approx(np.sum(numerical))


# --- 3. np.nan_to_num(v, copy=False) of a scalar raises NumPy's error ---------------------------------------------

SCALARS = {"numpy_scalar": (lambda x: x * 1.0, np.array(2.0)), "python_float": (lambda x: x, 2.0)}


@pytest.mark.parametrize("make, x", SCALARS.values(), ids=SCALARS.keys())
def test_nan_to_num_without_a_copy_of_a_scalar_raises_numpys_error(make, x):
    def f(x):
        return np.nan_to_num(make(x), copy=False)

    with pytest.raises(ValueError) as numpys:
        f(x)
    for call in (lambda: pb.gradient(f, x), lambda: pb.jvp(f, (x,), (x,))):
        with pytest.raises(ValueError, match=re.escape(str(numpys.value))):
            call()


def test_nan_to_num_without_a_copy_of_a_zero_d_array_writes_into_it():
    kinds = []

    def f(x):
        y = x.copy()  # a 0-d array
        z = np.nan_to_num(y, copy=False)
        kinds.append(type(pb.stop_gradient(z)))
        return z * 2.0 + y

    expected = f(np.array(3.0))
    value, (g,) = pb.withgradient(f, np.array(3.0))
    assert value == expected and g == 3.0 and kinds[1] is kinds[0]
