"""polyval, polyadd, polysub, polymul, polydiv, polyder, polyint, polyfit (full, cov, weights), poly and
roots against central differences in both modes, NumPy's values, float32, and the odd cases."""

import numpy as np
import pytest

import pullback as pb
from numpy_coverage_checks import run_case, run_float32
from rule_checks import second_order

P, Q = np.array([1.0, -2.0, 0.5]), np.array([3.0, 0.5])
X = np.array([0.3, -1.2, 2.0, 0.7])
XS = np.linspace(0.0, 1.0, 8)
YS = np.sin(3.0 * XS) + 0.1 * np.cos(17.0 * XS)

CASES = {
    "polyval": (np.polyval, (P, X)),
    "polyval scalar x": (lambda p, x: np.polyval(p, x[0]), (P, X)),
    "polyadd": (np.polyadd, (P, Q)),
    "polysub": (np.polysub, (Q, P)),
    "polymul": (np.polymul, (P, Q)),
    "polymul leading zero": (lambda p, q: np.polymul(np.concatenate([np.zeros(1), p]), q), (P, Q)),
    "polydiv": (np.polydiv, (np.array([1.0, 2.0, -3.0, 4.0]), Q)),
    "polyder": (np.polyder, (X,)),
    "polyder 2": (lambda p: np.polyder(p, 2), (X,)),
    "polyint": (np.polyint, (P,)),
    "polyint constants": (lambda p, k: np.polyint(p, 2, k), (P, Q)),
    "polyint scalar constant": (lambda p, k: np.polyint(p, 1, k[0]), (P, Q)),
    "polyfit": (lambda x, y: np.polyfit(x, y, 2), (XS, YS)),
    "polyfit full": (lambda x, y: np.polyfit(x, y, 2, full=True)[:2], (XS, YS)),
    "polyfit weights": (lambda x, y, w: np.polyfit(x, y, 3, w=w), (XS, YS, np.linspace(1.0, 2.0, 8))),
    "polyfit cov": (lambda x, y: np.polyfit(x, y, 2, cov=True), (XS, YS)),
    "polyfit 2-d cov unscaled": (lambda x, y: np.polyfit(x, np.stack([y, y ** 2], 1), 1, cov="unscaled"), (XS, YS)),
    "poly": (np.poly, (X,)),
    "roots": (np.roots, (np.poly(np.array([-1.5, 0.5, 2.0])) * 1.5,)),
    "roots trailing zero": (np.roots, (np.array([2.0, -1.0, -2.0, 0.0]),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_central_differences_and_numpy(name):
    f, args = CASES[name]
    run_case(f, *args)


@pytest.mark.parametrize("name", sorted(set(CASES) - {"roots", "roots trailing zero", "polyfit cov",
                                                         "polyfit 2-d cov unscaled", "polyfit full"}))
def test_float32(name):
    f, args = CASES[name]
    run_float32(f, *args)


def test_root_derivative_by_hand():
    g, = pb.gradient(lambda p: np.max(np.roots(p)), np.array([1.0, 0.0, -4.0]))
    # For p = [a, b, c] and its root r = 2: dr/dp_k = -r^(2-k) / p'(r), with p'(r) = 2ar + b = 4.
    np.testing.assert_allclose(g, [-1.0, -0.5, -0.25], rtol=1e-12)


def test_complex_roots_are_refused_clearly():
    with pytest.raises(NotImplementedError, match="complex"):
        pb.gradient(lambda p: np.sum(np.roots(p)), np.array([1.0, 0.0, 1.0]))


def test_polyfit_recovers_an_exact_polynomial_and_its_derivative_in_y():
    x = np.linspace(-1.0, 1.0, 6)
    c = np.array([0.5, -1.0, 2.0])
    fit, back = pb.pullback(lambda y: np.polyfit(x, y, 2), np.polyval(c, x))
    np.testing.assert_allclose(fit, c, atol=1e-12)
    # The fit is linear in y: its Jacobian is the pseudo-inverse of the Vandermonde matrix.
    np.testing.assert_allclose(back(np.array([1.0, 0.0, 0.0]))[0], np.linalg.pinv(np.vander(x, 3))[0], atol=1e-12)


def _flat(y):
    return np.concatenate([np.ravel(v) for v in (y if isinstance(y, tuple) else (y,))])


@pytest.mark.parametrize("name", ["polyval", "polymul", "polydiv", "polyfit", "roots"])
def test_second_order(name):
    f, (first, *rest) = CASES[name]
    second_order(lambda p: np.sum(_flat(f(p, *rest)) ** 3), first)


def test_polymul_keeps_the_derivative_in_a_leading_zero_coefficient():
    # NumPy drops the leading zero; the product is still smooth in that coefficient
    q = np.array([0.5, -1.0])
    f = lambda p: np.sum(np.polymul(p, q) ** 2)  # noqa: E731
    for p in (np.array([0.0, 2.0, 3.0]), np.array([0.0, 0.0, 3.0]), np.array([0.0, 0.0, 0.0])):
        value, (g,) = pb.withgradient(f, p)
        assert value == f(p)
        np.testing.assert_allclose(g, pb.testing.numerical_gradient(f, p)[0], rtol=1e-6, atol=1e-9)
