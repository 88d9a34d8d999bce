"""Dot-product cases (label -> [(f, make inputs from an rng)]) for the forward/reverse rule pairs of
the NumPy-coverage rules; tests/test_forward_coverage.py adds them to its own and checks each
`<J v, u> == <v, Jᵀ u>` through the forward rule it is filed under."""

import numpy as np

from pullback.rules import pointwise


def normal(*shapes):
    return lambda rng: tuple(rng.normal(size=s) for s in shapes)


def uniform(low, high, *shapes):
    return lambda rng: tuple(rng.uniform(low, high, s) for s in shapes)


def _with_real_roots(rng):
    roots = np.sort(rng.uniform(-2.0, 2.0, 3)) + np.array([-1.0, 0.0, 1.0])  # well separated
    return (np.poly(roots) * rng.uniform(0.5, 2.0),)


CASES = {
    "shape.flipud_rule": [(np.flipud, normal((3, 2))), (lambda x: np.flipud(x), normal((4,)))],
    "shape.fliplr_rule": [(np.fliplr, normal((2, 3, 2)))],
    "pointwise.i0_rule": [(np.i0, uniform(-3.0, 3.0, (3, 2)))],
    "pointwise.bessel_i1_rule": [(pointwise.bessel_i1, uniform(-3.0, 3.0, (4,))),
                                 (lambda x: pointwise.bessel_i1(x), lambda rng: (np.array([0.0, 1.5, -0.2]),))],
    "pointwise.divmod_rule": [(lambda a, b: np.divmod(a, b)[1], lambda rng: (rng.uniform(-3, 3, (3, 2)),
                                                                              rng.uniform(0.5, 1.5, 2)))],
    "pointwise.modf_rule": [(lambda x: np.modf(x)[0], uniform(-3.0, 3.0, (3, 2)))],
    "pointwise.frexp_rule": [(lambda x: np.frexp(x)[0], uniform(-30.0, 30.0, (5,)))],
    "polynomials.real_roots_rule": [(np.roots, _with_real_roots)],
    "products.vecdot_rule": [(np.vecdot, normal((3, 4), (4,))), (np.vecdot, normal((2, 1, 3), (4, 3)))],
    "products.matvec_rule": [(np.matvec, normal((2, 3, 4), (4,))), (np.matvec, normal((3, 4), (2, 4)))],
    "products.vecmat_rule": [(np.vecmat, normal((3,), (2, 3, 4))), (np.vecmat, normal((2, 3), (3, 4)))],
}
