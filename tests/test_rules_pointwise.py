"""sinc, i0 (and the Bessel I1 its derivative uses), nan_to_num, real_if_close, fix, unwrap, divmod,
modf, frexp and the value tests against central differences in both modes (and second order),
NumPy's values, float32, and the odd cases."""

import numpy as np
import pytest

import pullback as pb
from numpy_coverage_checks import run_case, run_float32
from pullback.rules.pointwise import bessel_i1
from rule_checks import second_order

rng = np.random.default_rng(16)
X = rng.uniform(-3.0, 3.0, (3, 4))
ZEROISH = np.array([-1.5, -1e-4, 0.0, 2e-4, 0.6, 2.0])

CASES = {
    "sinc": (np.sinc, (X,)),
    "sinc near 0": (np.sinc, (ZEROISH,)),
    "i0": (np.i0, (X,)),
    "i0 at 0": (np.i0, (ZEROISH,)),
    "i1": (bessel_i1, (ZEROISH,)),
    "nan_to_num": (lambda x: np.nan_to_num(x * 2.0), (X,)),
    "real_if_close": (lambda x: np.real_if_close(x), (X,)),
    "fix plus x": (lambda x: np.fix(x) + x, (X + 0.25,)),
    "unwrap": (lambda p: np.unwrap(np.cumsum(p * 2.0, axis=1)), (X,)),
    "unwrap options": (lambda p: np.unwrap(np.cumsum(p, axis=0), discont=4.0, axis=0, period=5.0), (X,)),
    "divmod remainder": (lambda a, b: np.divmod(a, b)[1], (X, np.array([0.7, 1.3, -0.9, 2.2]))),
    "modf fraction": (lambda x: np.modf(x)[0], (X,)),
    "frexp mantissa": (lambda x: np.frexp(x * 7.0)[0], (X,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_central_differences_and_numpy(name):
    f, args = CASES[name]
    run_case(f, *args)


@pytest.mark.parametrize("name", sorted(set(CASES) - {"i1"}))
def test_float32(name):
    f, args = CASES[name]
    run_float32(f, *args)


@pytest.mark.parametrize("f", [np.sinc, np.i0, bessel_i1], ids=["sinc", "i0", "i1"])
def test_second_order_including_zero(f):
    second_order(lambda x: np.sum(f(x) ** 2), ZEROISH)


def test_sinc_second_derivative_at_zero_is_exact():
    # sinc(x) = 1 - (pi x)^2 / 6 + ...: the second derivative at 0 is -pi^2 / 3.
    second = pb.hvp(lambda x: np.sum(np.sinc(x)), np.zeros(1), np.ones(1))
    np.testing.assert_allclose(second, [-np.pi ** 2 / 3.0], rtol=1e-12)


def test_i1_against_reference_values():
    # I1(1) and I1(5) (Abramowitz and Stegun, table 9.8).
    np.testing.assert_allclose(bessel_i1(np.array([1.0, 5.0, -1.0])), [0.565159104, 24.33564214, -0.565159104],
                               rtol=1e-8)


def test_nan_to_num_gradient_is_one_where_finite_zero_where_replaced():
    x = np.array([np.nan, np.inf, -np.inf, 1.5, -2.0])
    g, = pb.gradient(lambda x: np.sum(np.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-2.0) * 3.0), x)
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0, 3.0, 3.0])
    gx, gn, gp = pb.gradient(lambda x, n, p: np.sum(np.nan_to_num(x, nan=n, posinf=p)), x, 0.5, 4.0)
    np.testing.assert_array_equal(gx, [0.0, 0.0, 0.0, 1.0, 1.0])
    assert (gn, gp) == (1.0, 1.0)
    y = pb.pullback(lambda x: np.nan_to_num(x), x.astype(np.float32))[0]
    np.testing.assert_array_equal(y, np.nan_to_num(x.astype(np.float32)))
    assert y.dtype == np.float32


def test_nan_to_num_without_copy_writes_into_the_array_as_numpy():
    x = np.array([np.nan, 2.0])

    def f(x):
        y = x * 1.0
        z = np.nan_to_num(y, copy=False)
        return np.sum(y * z)  # y itself was changed

    assert pb.withgradient(f, x)[0] == f(x.copy()) == 4.0


def test_two_output_ufuncs_in_both_modes():
    a, b = np.array([2.5, -3.7, 0.4]), np.array([0.7, 1.1, -0.3])
    (q, r), (dq, dr) = pb.jvp(lambda a, b: np.divmod(a, b), (a, b), (np.ones(3), np.ones(3)))
    np.testing.assert_array_equal(q, np.divmod(a, b)[0])
    np.testing.assert_allclose(dr, 1.0 - q)
    np.testing.assert_array_equal(dq, 0.0)
    (m, e), (dm, de) = pb.jvp(np.frexp, (a,), (np.ones(3),))
    np.testing.assert_allclose(dm, 2.0 ** -e)
    assert de is None and e.dtype.kind == "i"
    g, = pb.gradient(lambda a: np.sum(np.modf(a)[1]), a)
    assert g is None or np.all(g == 0)


def test_value_tests_carry_no_gradient_and_run_on_traced_values():
    x = np.array([np.inf, -np.inf, 1.0])
    g, = pb.gradient(lambda x: np.sum(x * np.isposinf(x)[2] + np.isneginf(x) + np.iscomplex(x) + np.isreal(x)),
                     np.array([0.0, 1.0, 2.0]))
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0])
    assert pb.pullback(lambda x: np.isposinf(x), x)[0].tolist() == [True, False, False]


def test_nan_to_num_of_complex_values_replaces_each_part():
    x = np.array([1.0, np.inf, 2.0, np.nan])

    def f(x):
        z = x[:2] + 1j * x[2:]  # (1 + 2j), (inf + nan j)
        return np.nan_to_num(z, nan=5.0)

    y = pb.pullback(f, x)[0]
    np.testing.assert_array_equal(y, f(x))
    g, = pb.gradient(lambda x: np.sum(np.real(f(x)) + 3.0 * np.imag(f(x))), x)
    np.testing.assert_array_equal(g, [1.0, 0.0, 3.0, 0.0])
