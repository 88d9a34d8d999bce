"""A traced Python number computes as Python computes: its errors, its complex powers, its types."""
import math

import numpy as np
import pytest

import pullback as pb

# Python's own behaviour for each: an exception, or a number NumPy would give differently (inf, nan)
RAISING = [
    ("1.0 / x at 0", lambda x: 1.0 / x, 0.0, ZeroDivisionError),
    ("x / 0.0", lambda x: x / 0.0, 1.0, ZeroDivisionError),
    ("x ** -1.0 at 0", lambda x: x ** -1.0, 0.0, ZeroDivisionError),
    ("10.0 ** x overflows", lambda x: 10.0 ** x, 400.0, OverflowError),
    ("x % 0.0", lambda x: x % 0.0, 1.0, ZeroDivisionError),
    ("x // 0.0", lambda x: x // 0.0 + x, 1.0, ZeroDivisionError),
    ("divmod(x, 0.0)", lambda x: divmod(x, 0.0)[1], 1.0, ZeroDivisionError),
    ("divmod(2.0, 0 * x)", lambda x: divmod(2.0, 0.0 * x)[1], 1.0, ZeroDivisionError),
    ("(x * 2.0) / 0.0, after an operation", lambda x: (x * 2.0) / 0.0, 1.0, ZeroDivisionError),
]


@pytest.mark.parametrize("name, f, x, error", RAISING, ids=[r[0] for r in RAISING])
def test_python_errors_are_raised_as_without_pullback(name, f, x, error):
    with pytest.raises(error):
        f(x)  # what the code does without pullback
    with pytest.raises(error):
        pb.gradient(f, x)
    with pytest.raises(error):
        pb.jvp(f, (x,), (1.0,))


def test_numpy_functions_keep_numpy_arithmetic_on_python_floats():
    # np.divide(1.0, 0.0) is inf in NumPy, with or without pullback
    with np.errstate(divide="ignore"):
        assert pb.withgradient(lambda x: np.divide(1.0, x), 0.0).val == np.divide(1.0, 0.0)
        assert pb.gradient(lambda x: x / np.float64(0.0), 1.0) == (np.inf,)


COMPLEX = [
    # f, x, d/dx f by hand
    ("imag of (-x) ** 0.5", lambda x: ((-x) ** 0.5).imag, 4.0, lambda x: 0.5 / math.sqrt(x)),
    ("imag of (1/x) ** 0.5", lambda x: ((1.0 / x) ** 0.5).imag, -4.0, lambda x: 0.5 * (-x) ** -1.5),
    ("abs of x ** (1/3)", lambda x: abs(x ** (1 / 3)), -8.0, lambda x: -(1 / 3) * (-x) ** (-2 / 3)),
    ("imag of x ** (1/3)", lambda x: (x ** (1 / 3)).imag, -8.0,
     lambda x: math.sin(math.pi / 3) * (1 / 3) * (-x) ** (-2 / 3) * -1),
    ("imag of (x % 3 - 2.5) ** 0.5", lambda x: ((x % 3.0 - 2.5) ** 0.5).imag, 7.0, lambda x: -0.5 / math.sqrt(1.5)),
    ("imag of divmod remainder", lambda x: ((divmod(x, 3.0)[1] - 2.5) ** 0.5).imag, 7.0,
     lambda x: -0.5 / math.sqrt(1.5)),
]


@pytest.mark.parametrize("name, f, x, derivative", COMPLEX, ids=[c[0] for c in COMPLEX])
def test_negative_base_powers_are_complex_as_in_python(name, f, x, derivative):
    value, (grad,) = pb.withgradient(f, x)
    assert value == f(x) and value != 0.0  # NumPy's power would give nan, and 0 imaginary part
    central = (f(x + 1e-6) - f(x - 1e-6)) / 2e-6
    assert grad == pytest.approx(derivative(x), rel=1e-12)
    assert grad == pytest.approx(central, rel=1e-7)
    assert pb.jvp(f, (x,), (1.0,))[1] == pytest.approx(derivative(x), rel=1e-12)


def test_second_derivatives_of_a_complex_python_power():
    # Im((-x) ** 0.5) = sqrt(x) for x > 0: second derivative -x^(-3/2) / 4
    f = lambda x: ((-x) ** 0.5).imag  # noqa: E731
    want = -4.0 ** -1.5 / 4
    assert pb.hessian(f, 4.0) == pytest.approx(want, rel=1e-13)
    assert pb.gradient(lambda x: pb.gradient(f, x)[0], 4.0)[0] == pytest.approx(want, rel=1e-13)
    g = lambda x: ((1.0 / x) ** 0.5).imag  # noqa: E731  (-x)^(-1/2) for x < 0
    assert pb.hessian(g, -4.0) == pytest.approx(0.75 * 4.0 ** -2.5, rel=1e-13)


def test_operations_on_python_floats_give_python_floats():
    seen = {}

    def f(x):
        for name, v in [("neg", -x), ("abs", abs(x)), ("div", x / 2.0), ("rdiv", 2.0 / x), ("pow", x ** 2.0),
                        ("mod", x % 3.0), ("floordiv", x // 2.0), ("divmod", divmod(x, 2.0)[1])]:
            seen[name] = type(pb.stop_gradient(v))
        return x * 1.0

    f(-3.0)
    without = dict(seen)
    pb.gradient(f, -3.0)
    assert seen == without and set(without.values()) == {float}


def test_log_at_0_of_a_python_float_in_forward_mode_and_hessian():
    # np.log is NumPy's: log(0) = -inf, its derivatives 1/0 = inf and -1/0² = -inf (not ZeroDivisionError)
    with np.errstate(divide="ignore"):
        assert pb.jvp(np.log, (0.0,), (1.0,)) == (-np.inf, np.inf)
        assert pb.hessian(np.log, 0.0) == -np.inf
        assert pb.hessian(np.sqrt, 0.0) == -np.inf


def test_tangents_of_python_numbers_are_python_numbers():
    y, t = pb.jvp(lambda x: x * 2.0, (2.0,), (1.0,))
    assert (y, t) == (4.0, 2.0) and type(t) is float
    y, t = pb.jvp(lambda z: z * z, (1j,), (1.0,))
    assert (y, t) == (-1.0, 2j) and type(t) is complex


NUMPY_ARITHMETIC_IN_DERIVATIVES = [  # the function, the point, its first and second derivatives there
    ("log at 0", np.log, 0.0, np.inf, -np.inf),
    ("log1p at -1", np.log1p, -1.0, np.inf, -np.inf),
    ("arctanh at 1", np.arctanh, 1.0, np.inf, np.inf),
    ("sqrt by ** at 0", lambda x: x ** 0.5, 0.0, np.inf, -np.inf),
    ("x ** 1.5 at 0", lambda x: x ** 1.5, 0.0, 0.0, np.inf),
    ("np.power at 0", lambda x: np.power(x, 0.5), 0.0, np.inf, -np.inf),
]


@pytest.mark.parametrize("name, f, x, first, second", NUMPY_ARITHMETIC_IN_DERIVATIVES,
                         ids=[c[0] for c in NUMPY_ARITHMETIC_IN_DERIVATIVES])
def test_derivatives_of_python_floats_follow_numpy_arithmetic_in_every_mode(name, f, x, first, second):
    # the function's own value is what it is without pullback; its derivatives divide by 0 as NumPy does
    with np.errstate(divide="ignore", invalid="ignore"):
        assert pb.gradient(f, x)[0] == first
        assert pb.jvp(f, (x,), (1.0,))[1] == first
        assert pb.hessian(f, x) == second
        assert pb.gradient(lambda x: pb.gradient(f, x)[0], x)[0] == second
        assert pb.jvp(lambda x: pb.jvp(f, (x,), (1.0,))[1], (x,), (1.0,))[1] == second


# A traced array with a Python number on either side of + - * /: the commonest operations, which the
# engine runs by rules specialised to a constant number. Each must give NumPy's value and dtype and the
# derivative of the general rule, in every mode and at every order.
NUMBER_OPERANDS = [
    ("x + 0.1", lambda x: x + 0.1, lambda x: 1.0 + 0 * x),
    ("0.1 + x", lambda x: 0.1 + x, lambda x: 1.0 + 0 * x),
    ("x - 3", lambda x: x - 3, lambda x: 1.0 + 0 * x),
    ("1.0 - x", lambda x: 1.0 - x, lambda x: -1.0 + 0 * x),
    ("x * 0.9", lambda x: x * 0.9, lambda x: 0.9 + 0 * x),
    ("-2 * x", lambda x: -2 * x, lambda x: -2.0 + 0 * x),
    ("x / 4.0", lambda x: x / 4.0, lambda x: 0.25 + 0 * x),
    ("3 / x", lambda x: 3 / x, lambda x: -3.0 / x ** 2),
    ("np.multiply(x, 0.5)", lambda x: np.multiply(x, 0.5), lambda x: 0.5 + 0 * x),
    ("np.subtract(2.0, x)", lambda x: np.subtract(2.0, x), lambda x: -1.0 + 0 * x),
    ("np.divide(1.0, x)", lambda x: np.divide(1.0, x), lambda x: -1.0 / x ** 2),
]


@pytest.mark.parametrize("name, f, derivative", NUMBER_OPERANDS, ids=[r[0] for r in NUMBER_OPERANDS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_arithmetic_with_a_python_number_on_either_side(name, f, derivative, dtype):
    x = np.array([0.5, -1.5, 2.0], dtype=dtype)
    if dtype is np.complex64:
        x = x + np.array([0.25j, -1j, 0.5j], dtype=dtype)
    expected = f(x)
    # the value and dtype of NumPy's own computation
    val, back = pb.vjp(f, x)
    assert val.dtype == expected.dtype and np.array_equal(val, expected)
    # the derivative, against its hand derivation (a holomorphic map: the cotangent of c is c * f'(x))
    c = np.array([1.0, -2.0, 0.5], dtype=val.dtype)
    (g,) = back(c)
    assert g.dtype == x.dtype
    np.testing.assert_allclose(g, c * derivative(x.astype(np.complex128)), rtol=1e-5)
    np.testing.assert_allclose(pb.jvp(f, (x,), (np.ones_like(x),))[1], derivative(x.astype(np.complex128)), rtol=1e-5)


@pytest.mark.parametrize("name, f, derivative", NUMBER_OPERANDS, ids=[r[0] for r in NUMBER_OPERANDS])
def test_arithmetic_with_a_python_number_at_second_order_and_on_zero_d_arrays(name, f, derivative):
    x = np.array(1.25)
    # the gradient of the derivative: the number rules' pullbacks are themselves differentiated
    (second,) = pb.gradient(lambda x: np.sum(pb.gradient(lambda x: np.sum(f(x)), x)[0]), x)
    h = 1e-5
    second = 0.0 if second is None else second  # None: zero, for the linear ones
    assert second == pytest.approx((derivative(x + h) - derivative(x - h)) / (2 * h), rel=1e-5, abs=1e-8)
    # a 0-d array gives NumPy's scalar, as without pullback
    assert type(pb.withgradient(lambda x: f(x) * 1.0, x).val) is type(f(x) * 1.0)


def test_a_python_number_traced_at_an_outer_level_gets_its_gradient():
    # d/dc of d/dx (c * x * x) at x = 2 is 2x = 4: c is a constant only at the inner level
    def inner(c):
        return pb.gradient(lambda x: np.sum(c * x * x), np.array(2.0))[0]
    assert pb.gradient(lambda c: np.sum(inner(c)), 3.0) == (pytest.approx(4.0),)
    assert pb.gradient(lambda c: np.sum(pb.gradient(lambda x: np.sum(x * x / c), np.array(2.0))[0]), 4.0) == (
        pytest.approx(-2 * 2.0 / 16.0),)


def test_bessel_i0_of_a_python_float_is_differentiated_in_float64():
    # d/dx I0 = I1 (scipy.special.i1(2.0) and (10.0)); a Python float is weak, and once made the derivative float16
    i1 = {2.0: 1.5906368546373291, 10.0: 2670.988303701255}
    for x, expected in i1.items():
        assert pb.gradient(np.i0, x)[0] == pytest.approx(expected, rel=1e-13)
        assert pb.jit(lambda x: pb.gradient(np.i0, x))(x)[0] == pytest.approx(expected, rel=1e-13)
    # I0'' = I0 - I1 / x
    assert pb.hessian(np.i0, 2.0) == pytest.approx(float(np.i0(2.0)) - i1[2.0] / 2.0, rel=1e-12)


def test_nan_to_num_of_a_python_float_under_jit_of_its_gradient():
    step = pb.jit(lambda x: pb.withgradient(lambda x: 3.0 * np.nan_to_num(x), x))
    for x in (0.7, 0.25):
        value, (g,) = step(x)
        assert value == 3.0 * x and g == 3.0
