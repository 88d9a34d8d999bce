"""Probes of out=, x.flat = v and Dask support: each case is compared with what NumPy computes without
pullback, with finite differences, or with pullback's own gradient on NumPy arrays."""

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

    with pytest.raises(TypeError, match="return arrays must be of ArrayType"):
        f(A, np.zeros(3))
    with pytest.raises(TypeError, match="return arrays must be of ArrayType"):
        pb.jit(f)(A, np.zeros(3))

    def g(a, c):
        v = c[1]
        v += a[0, 0]  # a NumPy scalar: rebinds v, c unchanged
        return c + v

    _same_under_jit(g, lambda k: (A * k, np.full(3, k)))
