"""numpy.linalg's svdvals, cond (every norm), tensorinv and tensorsolve against central differences in
both modes, NumPy's values and float32."""

import numpy as np
import pytest

import pullback as pb
from numpy_coverage_checks import run_case, run_float32

rng = np.random.default_rng(17)
A = rng.normal(size=(3, 3)) + 3.0 * np.eye(3)
BATCH = rng.normal(size=(2, 3, 3)) + 3.0 * np.eye(3)
T = (rng.normal(size=(6, 6)) + 4.0 * np.eye(6)).reshape(2, 3, 6)

CASES = {
    "svdvals": (np.linalg.svdvals, (rng.normal(size=(4, 3)),)),
    "svdvals batch": (np.linalg.svdvals, (BATCH,)),
    **{f"cond {p}": (lambda a, p=p: np.linalg.cond(a, p), (A,)) for p in (None, 2, -2, 1, -1, np.inf, -np.inf, "fro")},
    "cond batch": (np.linalg.cond, (BATCH,)),
    "tensorinv": (lambda t: np.linalg.tensorinv(t, 2), (T,)),
    "tensorinv ind 1": (lambda t: np.linalg.tensorinv(t.reshape(6, 2, 3), 1), (T,)),
    "tensorsolve": (lambda t, b: np.linalg.tensorsolve(t.reshape(6, 2, 3), b), (T, rng.normal(size=6))),
    "tensorsolve axes": (lambda t, b: np.linalg.tensorsolve(t, b, axes=(2,)), (T, rng.normal(size=(2, 3)))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_central_differences_and_numpy(name):
    f, args = CASES[name]
    run_case(f, *args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32(name):
    f, args = CASES[name]
    run_float32(f, *args)


def test_errors_are_numpys():
    with pytest.raises(np.linalg.LinAlgError):
        pb.gradient(lambda t: np.sum(np.linalg.tensorsolve(t, np.ones(3))), np.ones((3, 2)))
    with pytest.raises(ValueError):
        pb.gradient(lambda a: np.linalg.cond(a, "bad"), A)


def test_cond_of_a_singular_matrix_is_numpys_inf_and_its_derivative_is_refused():
    s = np.array([[1.0, 2.0], [2.0, 4.0]])
    for p in ("fro", 1, -np.inf):
        assert pb.pullback(lambda a: np.linalg.cond(a, p), s)[0] == np.linalg.cond(s, p) == np.inf
        with pytest.raises(np.linalg.LinAlgError, match="cond of a singular matrix is inf"):
            pb.gradient(lambda a: np.linalg.cond(a, p), s)
        with pytest.raises(np.linalg.LinAlgError, match="cond of a singular matrix is inf"):
            pb.jvp(lambda a: np.linalg.cond(a, p), (s,), (np.eye(2),))
