"""linspace, logspace and geomspace in their start, stop (and base), vander and bincount against
central differences in both modes, NumPy's values, float32, and the odd cases."""

import numpy as np
import pytest

import pullback as pb
from numpy_coverage_checks import run_case, run_float32

S, E = np.array([1.0, -2.0, 0.5]), np.array([3.0, 1.0, -1.5])
POS, POS2 = np.array([0.5, 2.0]), np.array([8.0, 0.25])

CASES = {
    "linspace": (lambda s, e: np.linspace(s, e, 5), (S, E)),
    "linspace scalars": (lambda s, e: np.linspace(s[0], e[0], 4), (S, E)),
    "linspace no endpoint axis": (lambda s, e: np.linspace(s, e, 4, endpoint=False, axis=-1), (S, E)),
    "linspace retstep": (lambda s, e: np.linspace(s, e, 6, retstep=True, axis=1), (S[:, None] * [1.0, 2.0], E[:, None] * [1.0, 0.5])),
    "linspace num 1": (lambda s, e: np.linspace(s, e, 1), (S, E)),
    "linspace num 2": (lambda s, e: np.linspace(s, e, 2, endpoint=False), (S, E)),
    "logspace": (lambda s, e: np.logspace(s, e, 4), (S, E)),
    "logspace base": (lambda s, e, b: np.logspace(s, e, 3, base=b, axis=-1), (S, E, np.array([2.0, 3.0, 1.5]))),
    "geomspace": (lambda s, e: np.geomspace(s, e, 5), (POS, POS2)),
    "geomspace negative": (lambda s, e: np.geomspace(-s, -e, 4, endpoint=False, axis=1), (POS, POS2)),
    "vander": (np.vander, (S,)),
    "vander increasing": (lambda x: np.vander(x, 5, increasing=True), (E,)),
    "bincount": (lambda w: np.bincount(np.array([0, 3, 3]), weights=w, minlength=6), (S,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_central_differences_and_numpy(name):
    f, args = CASES[name]
    run_case(f, *args)


@pytest.mark.parametrize("name", sorted(set(CASES) - {"bincount"}))
def test_float32(name):
    f, args = CASES[name]
    run_float32(f, *args)


def test_endpoints_are_exact_and_the_step_is_differentiable():
    y, back = pb.pullback(lambda s, e: np.linspace(s, e, 7), 0.1, 0.7)
    assert y[-1] == 0.7 and y[0] == 0.1
    gs, ge = back(np.ones(7))
    np.testing.assert_allclose([gs, ge], [3.5, 3.5])
    step_gradient = pb.gradient(lambda s, e: np.linspace(s, e, 5, retstep=True)[1], 0.0, 2.0)
    np.testing.assert_allclose(step_gradient, [-0.25, 0.25])


def test_empty_and_integer_results():
    assert pb.pullback(lambda s: np.linspace(s, 1.0, 0), 0.5)[0].shape == (0,)
    y = pb.pullback(lambda s: np.linspace(s, 10.0, 4, dtype=int), 0.5)[0]
    np.testing.assert_array_equal(y, np.linspace(0.5, 10.0, 4, dtype=int))
    assert pb.gradient(lambda w: np.sum(np.bincount([1, 1], weights=w)), np.ones(2, np.float32))[0].dtype == np.float32
