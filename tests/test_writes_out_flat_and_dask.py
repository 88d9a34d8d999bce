"""Probes of out=, x.flat = v and Dask support: each case is compared with what NumPy computes without
pullback, with finite differences, or with pullback's own gradient on NumPy arrays."""

import re

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient

rng = np.random.default_rng(11)
A = rng.normal(size=(3, 4))
X = rng.normal(size=3)
WEIGHTS = np.arange(12.0).reshape(3, 4)


# --- out= holding integers: no gradient to lose, so NumPy's own call (its casting rules and errors) ----------

def _into_int_out(x, y):
    c = np.zeros(6, dtype=int)
    np.concatenate([x * 3.0, y * 3.0], out=c, casting="unsafe")
    k = np.zeros(2, dtype=np.int64)
    np.take(x * 5.0, [0, 2], out=k)
    return np.sum(c * x[0]) + np.sum(k * y[1]) + np.sum(x * y)


def test_an_integer_out_takes_numpys_values_and_passes_no_gradient():
    y = X[::-1] + 0.3
    value, (gx, gy) = pb.withgradient(_into_int_out, X, y)
    assert value == _into_int_out(X, y)
    want = numerical_gradient(_into_int_out, X, y)  # the integer parts are locally constant
    np.testing.assert_allclose(gx, want[0], atol=1e-6)
    np.testing.assert_allclose(gy, want[1], atol=1e-6)


def test_an_integer_out_under_same_kind_casting_raises_numpys_error():
    def f(x):
        c = np.zeros(6, dtype=int)
        np.concatenate([x, x], out=c)
        return np.sum(c * x[0])

    with pytest.raises(TypeError, match="Cannot cast array data") as numpy_error:
        f(X)
    with pytest.raises(TypeError, match="Cannot cast array data") as error:
        pb.gradient(f, X)
    assert str(error.value) == str(numpy_error.value)


# --- x.flat = v, x.flat[i] = v, np.fill_diagonal with v a view of x ------------------------------------------

def _flat_reversed(a):
    a.flat = a[::-1]
    return np.sum(a ** 2 * WEIGHTS)


def _flat_reversed_copy(a):
    a.flat = a[::-1].copy()
    return np.sum(a ** 2 * WEIGHTS)


@pytest.mark.parametrize("write", [
    lambda a: setattr(a, "flat", a[::-1]),
    lambda a: a.flat.__setitem__(slice(None), a[::-1]),
    lambda a: a.flat.__setitem__([0, 5, 10], a[::-1, 0]),
    lambda a: np.fill_diagonal(a, a[::-1, 0]),
    lambda a: setattr(a[:, 1:3], "flat", a[:, :2]),
], ids=["flat =", "flat[:] =", "flat[index] =", "fill_diagonal", "view.flat = another view"])
def test_a_flat_write_reading_elements_it_already_wrote_is_refused(write):
    """NumPy reads v as it writes x here (a.flat = a[::-1] on a 3x4 array gives rows 2, 1, 2), and copies v
    first in other layouts: a silently different value from NumPy's, so it is refused, naming the copy."""
    def f(a):
        write(a)
        return np.sum(a ** 2 * WEIGHTS)

    with pytest.raises(ValueError, match=r"v\.copy\(\)"):
        pb.gradient(f, A.copy())


def test_a_flat_write_of_a_copy_or_of_elements_read_before_written_is_numpys():
    value, (g,) = pb.withgradient(_flat_reversed_copy, A.copy())
    assert value == _flat_reversed_copy(A.copy())
    np.testing.assert_allclose(g, numerical_gradient(_flat_reversed_copy, A.copy())[0], rtol=1e-6, atol=1e-6)

    def shift(x):  # each element is read before it is written: NumPy's value is a copy's
        v = np.concatenate([x, x]) * 1.0
        v.flat[:5] = v[1:6]
        return np.sum(v ** 2 * np.arange(6.0))

    value, (g,) = pb.withgradient(shift, X)
    assert value == shift(X.copy())
    np.testing.assert_allclose(g, numerical_gradient(shift, X)[0], rtol=1e-6, atol=1e-6)

    def itself(a):
        a.flat = a
        return np.sum(a ** 2 * WEIGHTS)

    np.testing.assert_allclose(pb.gradient(itself, A.copy())[0], 2 * A * WEIGHTS)


@pytest.mark.parametrize("write", [
    lambda a: setattr(a, "flat", []),
    lambda a: a.flat.__setitem__(slice(None), np.zeros(0)),
    lambda a: np.put(a, [0, 1], []),
    lambda a: np.putmask(a, a > 0, np.zeros(0)),
    lambda a: np.fill_diagonal(a, []),
], ids=["flat = []", "flat[:] = empty", "put", "putmask", "fill_diagonal"])
def test_a_flat_write_of_an_empty_value_writes_nothing_as_in_numpy(write):
    def f(a):
        write(a)
        return np.sum(a ** 2 * WEIGHTS)

    assert f(A.copy()) == np.sum(A ** 2 * WEIGHTS)
    value, (g,) = pb.withgradient(f, A.copy())
    assert value == f(A.copy())
    np.testing.assert_allclose(g, 2 * A * WEIGHTS)


def test_np_place_with_an_empty_value_still_raises_numpys_error():
    def f(a):
        np.place(a, a > 0, [])
        return np.sum(a)

    with pytest.raises(ValueError, match="Cannot insert from an empty array"):
        f(A.copy())
    with pytest.raises(ValueError, match="Cannot insert from an empty array"):
        pb.gradient(f, A.copy())
    np.testing.assert_allclose(pb.gradient(lambda a: (np.place(a, a > 100, []), np.sum(a))[1], A.copy())[0],
                               np.ones_like(A))


# --- out= in pb.jit without differentiation --------------------------------------------------------------

@pytest.mark.parametrize("write, differentiable", [
    (lambda a, c: np.dot(a, a, out=c), True),
    (lambda a, c: np.dot(a, a, c), True),  # np.dot's out, given by position
    (lambda a, c: np.cumsum(a, 1, None, c), False),  # out= of these is refused under differentiation
    (lambda a, c: np.take(a, [2, 0, 5], 1, c, "clip"), True),  # `mode` after a positional out
    (lambda a, c: np.clip(a, 0.2, 0.6, out=c), False),
    (lambda a, c: np.sum(a, axis=0, out=c[1]), False),  # into a view: c's row changes
    (lambda a, c: np.einsum("ij,jk->ik", a, a, out=c), True),
])
def test_jit_replays_out_of_a_numpy_function_into_out(write, differentiable):
    def f(a):
        c = np.zeros_like(a)
        write(a, c)
        return np.sum(np.sin(c) * np.arange(1.0, 10.0).reshape(3, 3))

    jitted = pb.jit(f)
    for k in (1.0, 2.0, 3.0):
        assert jitted(A[:, :3] * k) == f(A[:, :3] * k)
    if not differentiable:
        return
    gradient = pb.jit(lambda a: pb.gradient(f, a)[0])
    for k in (1.0, 2.0):
        np.testing.assert_array_equal(gradient(A[:, :3] * k), pb.gradient(f, A[:, :3] * k)[0])


def test_jit_refuses_out_of_a_numpy_function_into_a_plain_array():
    def f(a):
        c = np.zeros((3, 3))  # made without a traced value: a plain NumPy array
        np.dot(a, a, out=c)
        return np.sum(c)

    with pytest.raises(pb.JitError, match="writes a traced value into a NumPy array"):
        pb.jit(f)(A[:, :3])


# --- Dask ------------------------------------------------------------------------------------------------

def test_choose_among_dask_arrays_is_lazy_and_is_numpys():
    da = pytest.importorskip("dask.array")
    from dask_checks import NoCompute

    def f(x):
        return np.sum(np.choose([0, 1, 0, 1], [x[0], x[1] ** 2]) ** 2 * np.arange(4.0))

    want = pb.gradient(f, A)[0]
    with NoCompute():
        value, (g,) = pb.withgradient(f, da.from_array(A, chunks=(2, 3)))
    assert isinstance(g, da.Array)
    np.testing.assert_allclose(g.compute(), want, rtol=1e-12)
    np.testing.assert_allclose(value.compute(), f(A), rtol=1e-12)


# --- out= in pb.jit: views, ufunc keywords, NumPy scalars ------------------------------------------------

def _same_under_jit(f, make):
    jitted = pb.jit(f)
    for k in (1.0, 2.0, 3.0):
        plain_args, jit_args = make(k), make(k)
        np.testing.assert_array_equal(jitted(*jit_args), f(*plain_args))
        for plain, jit in zip(plain_args, jit_args):
            np.testing.assert_array_equal(jit, plain)
            assert jit.dtype == plain.dtype


@pytest.mark.parametrize("f", [
    lambda a, c: (np.cumsum(a[0], out=c[0]), np.cumsum(a[1], out=c[1]), c)[-1],  # two views of c, one after another
    lambda a, c: (lambda v0, v1: (v0.__iadd__(a[0]), v1.__iadd__(a[1]), c)[-1])(c[0], c[1]),
    lambda a, c: (np.divmod(a[0], 0.7, out=(c[0], c[1])), c)[-1],  # a tuple out of views
    lambda a, c: (np.sin(a[:2], out=c, where=a[:2] > 0), c)[-1],  # where=: out keeps its values elsewhere
    lambda a, c: (np.add(a[:2], 1, out=c.astype(np.float32)), c)[-1],
])
def test_jit_out_into_views_and_with_ufunc_keywords_is_numpys(f):
    _same_under_jit(f, lambda k: (A[:, :4] * k, np.full((2, 4), k)))


def test_jit_ufunc_out_keeps_outs_dtype_and_casting():
    _same_under_jit(lambda a, c: (np.add(a, 1, out=c), c)[-1], lambda k: (A * k, np.full(A.shape, k, np.float32)))
    _same_under_jit(lambda a, c: (np.add(a, 1, out=c, casting="unsafe"), c)[-1],
                    lambda k: (A * 7 * k, np.full(A.shape, int(k))))


def test_jit_out_into_a_numpy_scalar_raises_as_numpy_does():
    def f(a, c):
        np.sum(a, out=c[1])  # c[1] of a 1-d c is a NumPy scalar
        return c

    # NumPy 2.3 and newer: "return arrays must be of ArrayType"; 2.2: "output must be an array"
    with pytest.raises(TypeError, match="return arrays must be of ArrayType|output must be an array") as numpy_s:
        f(A, np.zeros(3))
    with pytest.raises(TypeError, match=f"^{re.escape(str(numpy_s.value))}$"):
        pb.jit(f)(A, np.zeros(3))

    def g(a, c):
        v = c[1]
        v += a[0, 0]  # a NumPy scalar: rebinds v, c unchanged
        return c + v

    _same_under_jit(g, lambda k: (A * k, np.full(3, k)))


# --- out= of a function without gradient (np.round, np.isposinf, np.all): a recorded write -----------------

R = np.array([0.26, 0.74, 1.31, 0.42])

_ROUNDINGS = {  # each writes round(y, decimals) into y
    "np.round": (lambda y: np.round(y, 1, out=y), 1),
    "np.round positional out": (lambda y: np.round(y, 1, y), 1),
    "np.around": (lambda y: np.around(y, out=y), 0),
    "ndarray.round": (lambda y: y.round(1, out=y), 1),
}


@pytest.mark.parametrize("name", list(_ROUNDINGS))
def test_rounding_into_a_traced_out_is_a_recorded_write_in_both_modes(name):
    write, decimals = _ROUNDINGS[name]

    def f(x):
        y = x * 1.0
        assert write(y) is y  # NumPy returns out
        return np.sum(y * x)  # sum(round(x) * x)

    value, (g,) = pb.withgradient(f, R.copy())
    assert value == f(R.copy())
    np.testing.assert_allclose(g, np.round(R, decimals))  # round(x) is locally constant
    np.testing.assert_allclose(g, numerical_gradient(f, R.copy())[0], atol=1e-6)
    y, y_dot = pb.jvp(f, (R.copy(),), (np.ones(4),))
    assert y == value
    np.testing.assert_allclose(y_dot, np.sum(np.round(R, decimals)))


_NO_GRADIENT_WRITES = {
    "np.round": lambda y: np.round(y, out=y),
    "np.isposinf": lambda y: np.isposinf(y, out=y),
    "np.isneginf": lambda y: np.isneginf(y, y),
    "np.all": lambda y: np.all(y[None], axis=0, out=y),
    "np.any": lambda y: np.any(y[None] > 0.5, axis=0, out=y),
}


@pytest.mark.parametrize("name", list(_NO_GRADIENT_WRITES))
def test_a_write_into_out_by_a_function_without_gradient_leaves_saved_values_alone(name):
    # sin(y) keeps y for its derivative; the later write into y must not change what it kept
    write = _NO_GRADIENT_WRITES[name]

    def f(x):
        y = x * 1.0
        z = np.sum(np.sin(y))
        write(y)
        return z + np.sum(y * x)

    value, (g,) = pb.withgradient(f, R.copy())
    assert value == f(R.copy())
    np.testing.assert_allclose(g, numerical_gradient(f, R.copy())[0], atol=1e-6)
    written = R * 1.0
    write(written)
    np.testing.assert_allclose(g, np.cos(R) + written)  # the written values are constants


def test_rounding_into_a_differentiated_argument_leaves_the_callers_array_alone():
    def f(x):
        np.round(x, 1, out=x)
        return np.sum(x ** 2)

    a = R.copy()
    value, (g,) = pb.withgradient(f, a)
    np.testing.assert_array_equal(a, R)
    assert value == f(R.copy())
    np.testing.assert_array_equal(g, np.zeros(4))  # sum(round(x) ** 2) is locally constant


def test_a_refused_out_leaves_the_callers_array_alone():
    # multi_dot computes NumPy's own value first: that call must not write into out
    def f(x):
        np.linalg.multi_dot([x, x, x], out=x)
        return np.sum(x)

    a = np.array([[0.3, 0.7], [1.2, -0.4]])
    with pytest.raises(TypeError, match="out="):
        pb.gradient(f, a)
    np.testing.assert_array_equal(a, [[0.3, 0.7], [1.2, -0.4]])


# --- ufuncs with several outputs written into an out= tuple -------------------------------------------------

def _divmod_into_tuple(x):
    q, r = np.zeros_like(x), np.zeros_like(x)
    got = np.divmod(x, 0.3, out=(q, r))
    assert got[0] is q and got[1] is r
    return np.sum(r * x) + np.sum(q)


def _modf_into_its_input(x):
    y = x * 3.0
    frac = np.zeros_like(y)
    np.modf(y, out=(frac, y))  # the whole part goes back into y
    return np.sum(frac * x) + np.sum(y * x)


def _divmod_with_a_none_entry(x):
    q, r = np.divmod(x, 0.3, out=(None, np.zeros_like(x)))
    return np.sum(r * q * x)


def _frexp_exponent_into_a_plain_integer_array(x):
    e = np.zeros(x.shape, dtype=int)
    m, got = np.frexp(x * 5.0, out=(np.zeros_like(x), e))
    assert got is e
    return np.sum(m * e * x)


@pytest.mark.parametrize("f", [_divmod_into_tuple, _modf_into_its_input, _divmod_with_a_none_entry,
                               _frexp_exponent_into_a_plain_integer_array])
def test_an_out_tuple_of_a_several_output_ufunc_takes_each_output(f):
    value, (g,) = pb.withgradient(f, R.copy())
    assert value == f(R.copy())
    want = numerical_gradient(f, R.copy())[0]
    np.testing.assert_allclose(g, want, atol=1e-6)
    np.testing.assert_allclose(pb.jvp(f, (R.copy(),), (np.ones(4),))[1], np.sum(want), atol=1e-6)


def test_divmod_into_an_out_tuple_by_hand_and_a_plain_entry_refused():
    (g,) = pb.gradient(lambda x: np.sum(np.divmod(x, 0.3, out=(np.zeros_like(x), np.zeros_like(x)))[1] * x), R.copy())
    np.testing.assert_allclose(g, 2 * R - 0.3 * np.floor(R / 0.3))  # d/dx (x mod 0.3) x = r + x

    def into_a_plain_remainder(x):
        q, r = np.zeros_like(x), np.zeros(4)
        np.divmod(x, 0.3, out=(q, r))
        return np.sum(r)

    with pytest.raises(TypeError, match="plain array"):
        pb.gradient(into_a_plain_remainder, R.copy())


@pytest.mark.parametrize("place", ["same", "overlapping", "no-gradient"])
def test_two_outputs_into_one_memory_are_refused(place):
    # which output NumPy leaves depends on its inner loop (floats: the quotient; integers: the remainder)
    def f(x):
        q = x * 1.0
        if place == "same":
            np.divmod(x * 1.3, 0.7, out=(q, q))
        elif place == "overlapping":
            np.divmod(x[:2] * 1.3, 0.7, out=(q[:2], q[1:3]))
        else:  # frexp has no gradient: its outputs are written as constants
            np.frexp(x, out=(q, q))
        return np.sum(q)

    with pytest.raises(ValueError, match="separate array for each output"):
        pb.gradient(f, R.copy())
    with pytest.raises(ValueError, match="separate array for each output"):
        pb.jvp(f, (R.copy(),), (np.ones(4),))


@pytest.mark.parametrize("columns", [True, False], ids=["interleaved-columns", "even-and-odd"])
def test_two_outputs_into_disjoint_views_of_one_array_are_written(columns):
    # the views share memory bounds but no element: each output lands where NumPy puts it
    def f(x):
        buf = np.zeros_like(np.stack([x, x], 1))
        if columns:
            np.modf(x * 1.5, out=(buf[:, 0], buf[:, 1]))
        else:
            flat = buf.reshape(-1)
            np.modf(x * 1.5, out=(flat[::2], flat[1::2]))
        return np.sum(buf * buf)

    value, (g,) = pb.withgradient(f, R.copy())
    assert value == f(R.copy())
    np.testing.assert_allclose(g, numerical_gradient(f, R.copy())[0], atol=1e-6)
