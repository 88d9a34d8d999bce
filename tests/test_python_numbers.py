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
