"""Known bugs, round B: stop_gradient and writes through another name of the caller's array, a rule's refusal
under pb.jit, SciPy's check_finite in pullback.scipy.linalg, and a traced scalar written into a plain array."""

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient

X = np.array([1.0, 2.0, 3.0])


# --- 1. pb.stop_gradient(x) and a write made through another name of the caller's array --------------------------

# The value is a private copy that recorded writes update; a write through another name of the caller's array
# is not recorded, so the value does not show it (docs/api.md, pb.stop_gradient).
UNSEEN_WRITE = pytest.mark.xfail(strict=True, reason="a write through another name of the caller's array is "
                                 "not recorded: pb.stop_gradient's value, a copy, does not show it")

def _written_after(a):
    def g(x):
        s = pb.stop_gradient(x)
        a[0] = 5.0  # the caller's array, through the name the function closes over
        return np.sum(x * s)
    return g


def _written_before_and_after(a):
    def g(x):
        first = pb.stop_gradient(x)
        total = np.sum(x * first)  # first = (1, 2, 3) here
        a[1] = 7.0
        return total + np.sum(x * pb.stop_gradient(x))  # (5 or 1, 7, 3), as NumPy shows it
    return g


def _written_through_a_view(a):
    def g(x):
        s = pb.stop_gradient(x)[1:]
        view = a[1:]
        view[0] = 5.0
        return np.sum(x[1:] * s)
    return g


def _written_by_copyto(a):
    def g(x):
        s = pb.stop_gradient(x[::-1])
        np.copyto(a, [4.0, 6.0, 8.0])
        return np.sum(x * s)
    return g


CASES = {"after": (_written_after, [5.0, 2.0, 3.0]),
         "before_and_after": (_written_before_and_after, [1.0 + 1.0, 2.0 + 7.0, 3.0 + 3.0]),
         "view": (_written_through_a_view, [0.0, 5.0, 3.0]),
         "copyto": (_written_by_copyto, [8.0, 6.0, 4.0])}


@UNSEEN_WRITE
@pytest.mark.parametrize("make, grad", CASES.values(), ids=CASES.keys())
def test_stop_gradient_of_an_argument_shows_a_write_through_the_callers_name(make, grad):
    # without pullback s is x is a: the value is NumPy's; the gradient takes s as the constant NumPy shows
    a = X.copy()
    expected = make(a)(a)
    a = X.copy()
    value, (g,) = pb.withgradient(make(a), a)
    assert value == expected
    np.testing.assert_allclose(g, grad)
    a = X.copy()
    value, tangent = pb.jvp(make(a), (a,), (np.array([1.0, 10.0, 100.0]),))
    assert value == expected
    assert tangent == pytest.approx(np.dot(grad, [1.0, 10.0, 100.0]))
    a = X.copy()
    jitted = pb.jit(pb.value_and_grad(make(a)))
    for _ in range(2):
        a[:] = X
        value, g = jitted(a)
        assert value == expected
        np.testing.assert_allclose(g, grad)


@UNSEEN_WRITE
def test_stop_gradient_of_a_view_argument_shows_a_write_into_its_base():
    base = np.array([1.0, 2.0, 3.0, 4.0])

    def g(x):  # x = base[1:]
        s = pb.stop_gradient(x)
        base[2] = 10.0
        return np.sum(x * s)

    held = np.array([2.0, 10.0, 4.0])  # s as NumPy shows it: base[1:] after the write
    value, (grad,) = pb.withgradient(g, base[1:])
    assert value == np.sum(held * held)
    np.testing.assert_allclose(grad, numerical_gradient(lambda z: np.sum(z * held), held)[0], rtol=1e-7)


def test_a_recorded_write_after_the_value_is_dropped_is_followed():
    def g(x):
        total = np.sum(x * pb.stop_gradient(x))  # the value is not held
        x[0] = 9.0
        return total + np.sum(x * pb.stop_gradient(x))

    x = X.copy()
    value, (grad,) = pb.withgradient(g, x)
    np.testing.assert_array_equal(x, X)  # the caller's array as it was
    assert value == np.sum(X * X) + np.sum(np.array([9.0, 2.0, 3.0]) ** 2)
    np.testing.assert_allclose(grad, X + np.array([0.0, 2.0, 3.0]))  # x[0] is overwritten by a constant


def test_an_operation_keeps_the_value_as_it_read_it_before_a_later_write():
    # sum(x * s) reads s before y[1] = 7 changes it: the gradient is s as it was then, x's values
    def f(x):
        y = x * 1.0
        s = pb.stop_gradient(y)
        total = np.sum(x * s)
        y[1] = 7.0
        return total + np.sum(s)

    value, (g,) = pb.withgradient(f, X)
    assert value == f(X.copy())
    np.testing.assert_allclose(g, numerical_gradient(lambda z: np.sum(z * X), X)[0], rtol=1e-7)
    np.testing.assert_allclose(pb.jit(pb.grad(f))(X), X)


def test_a_stop_gradient_value_of_an_argument_handed_back_is_writable():
    x = X.copy()
    (value, s), _ = pb.withgradient(lambda x: (np.sum(x), pb.stop_gradient(x)), x)
    s += 1.0
    np.testing.assert_array_equal(s, X + 1.0)
    y, _ = pb.vjp(lambda x: pb.stop_gradient(x), x)
    y -= 1.0
    np.testing.assert_array_equal(y, X - 1.0)


@pytest.mark.xfail(strict=True, reason="handed back, pb.stop_gradient's value is a copy, not the caller's array")
def test_a_stop_gradient_value_of_an_argument_handed_back_is_the_callers_array():
    x = X.copy()
    (value, s), _ = pb.withgradient(lambda x: (np.sum(x), pb.stop_gradient(x)), x)
    s += 1.0  # s is x without pullback
    np.testing.assert_array_equal(x, X + 1.0)


# --- 2. a rule's own refusal under pb.jit is its own message ---------------------------------------------------

def _pinv_with_cutoff(a):
    return pb.gradient(lambda a: np.sum(np.linalg.pinv(a, rcond=1e-2)), a)


def test_a_rules_refusal_under_jit_is_the_eager_message():
    a = np.array([[1.0, 0.0], [0.0, 1e-3]])
    with pytest.raises(ValueError) as eager:
        _pinv_with_cutoff(a)
    with pytest.raises(ValueError) as jitted:
        pb.jit(_pinv_with_cutoff)(a)
    assert "the cutoff (rcond or rtol) drops singular values" in str(eager.value)
    assert str(jitted.value) == str(eager.value)


def test_numpys_own_error_under_jit_is_still_named_with_its_operands():
    def f(a):
        return pb.gradient(lambda a: np.sum(a + np.ones(3)), a)

    with pytest.raises(ValueError, match="could not be broadcast"):
        f(np.ones(2))
    with pytest.raises(ValueError, match=r"numpy\.add failed on .*shape \(2,\).*line up"):
        pb.jit(f)(np.ones(2))


# --- 3. check_finite and overwrite_* of pullback.scipy.linalg, as SciPy takes them --------------------------------

A = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
B = np.array([1.0, 2.0, 3.0])
WITH_NAN = A.copy()
WITH_NAN[0, 1] = np.nan


def _calls(linalg, **kw):
    return {
        "lu_factor": lambda a: linalg.lu_factor(a, **kw)[0],
        "lu_solve": lambda a: linalg.lu_solve(linalg.lu_factor(a, **kw), B, **kw),
        "solve_triangular": lambda a: linalg.solve_triangular(a, B, **kw),
        "cho_solve": lambda a: linalg.cho_solve((a, False), B, **kw),
        "det": lambda a: linalg.det(a, **kw),
        "cholesky": lambda a: linalg.cholesky(a, **kw),
        "lu": lambda a: linalg.lu(a, **kw)[2],
        "norm": lambda a: linalg.norm(a, **kw),
    }


@pytest.mark.parametrize("name", list(_calls(None)))
def test_check_finite_false_computes_with_nans_as_scipy_does(name):
    sl = pytest.importorskip("scipy.linalg")
    from pullback.scipy import linalg

    with np.errstate(all="ignore"):
        expected = _calls(sl, check_finite=False)[name](WITH_NAN)
        assert np.isnan(expected).any()
        value, (g,) = pb.withgradient(lambda a: np.sum(_calls(linalg, check_finite=False)[name](a)), WITH_NAN)
        jitted = pb.jit(lambda a: pb.withgradient(lambda a: np.sum(_calls(linalg, check_finite=False)[name](a)), a))
        jitted_value = jitted(WITH_NAN)[0]
    np.testing.assert_allclose([value, jitted_value], np.sum(expected), rtol=1e-12, equal_nan=True)
    assert g.shape == A.shape


@pytest.mark.parametrize("name", list(_calls(None)))
def test_check_finite_true_raises_scipys_error(name):
    sl = pytest.importorskip("scipy.linalg")
    from pullback.scipy import linalg

    message = "array must not contain infs or NaNs"
    with pytest.raises(ValueError, match=message):
        _calls(sl)[name](WITH_NAN)
    loss = lambda a: np.sum(_calls(linalg, check_finite=True)[name](a))  # noqa: E731
    with pytest.raises(ValueError, match=f"^{message}$"):
        pb.gradient(loss, WITH_NAN)
    with pytest.raises(ValueError, match=f"^{message}$"):
        pb.jit(lambda a: pb.gradient(loss, a))(WITH_NAN)
    jitted = pb.jit(lambda a: pb.gradient(loss, a))  # a replay with a NaN checks again
    jitted(A)
    with pytest.raises(ValueError, match=f"^{message}$"):
        jitted(WITH_NAN)


def test_lu_factor_and_lu_solve_take_scipys_options_with_finite_values():
    sl = pytest.importorskip("scipy.linalg")
    from pullback.scipy import linalg

    def loss(a, b):
        factors = linalg.lu_factor(a, overwrite_a=True, check_finite=False)
        return np.sum(linalg.lu_solve(factors, b, overwrite_b=True, check_finite=False) ** 2)

    a, b = A.copy(), B.copy()
    value, grads = pb.withgradient(loss, a, b)
    np.testing.assert_array_equal(a, A)  # pullback leaves its arguments as they are
    assert value == pytest.approx(np.sum(sl.lu_solve(sl.lu_factor(A), B) ** 2), rel=1e-12)
    for got, want in zip(grads, numerical_gradient(loss, A, B)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


# --- 4. a traced scalar written into one element of a plain array ----------------------------------------------

WRITES = {"setitem": lambda plain, v: plain.__setitem__((0, 0), v), "fill": lambda plain, v: plain.fill(v)}


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_writing_a_traced_scalar_into_a_plain_array_raises_pullbacks_message(write):
    def f(x):
        plain = np.zeros((2, 2))
        write(plain, x[0])
        return np.sum(plain * x[1])

    for call in (lambda: pb.gradient(f, X[:2]), lambda: pb.jit(lambda z: pb.gradient(f, z))(X[:2])):
        with pytest.raises(TypeError, match=r"Cannot convert it to a Python float.*one element of a plain array.*"
                                            r"np\.zeros_like\(x\)") as caught:
            call()
        assert caught.value.__cause__ is None and "setting an array element" not in str(caught.value)
