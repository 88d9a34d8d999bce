"""einsum with an index repeated inside one operand and in the interleaved operand/sublist form,
cross (every axis option), vecdot, matvec, vecmat and numpy.linalg's vecdot, outer, tensordot and
cross, against central differences in both modes, NumPy's values and float32."""

import numpy as np
import pytest

import pullback as pb
from numpy_coverage_checks import run_case, run_float32

rng = np.random.default_rng(14)
SQ = rng.normal(size=(3, 3))
T = rng.normal(size=(3, 3, 2))
B = rng.normal(size=(2, 4))
U = rng.normal(size=(4, 3))
V3 = rng.normal(size=3)

CASES = {
    "einsum ii->i": (lambda a: np.einsum("ii->i", a), (SQ,)),
    "einsum ii": (lambda a: np.einsum("ii", a), (SQ,)),
    "einsum lli->l": (lambda t: np.einsum("lli->l", t), (T,)),
    "einsum iij,jk->ik": (lambda t, b: np.einsum("iij,jk->ik", t, b), (T, B)),
    "einsum iii": (lambda c: np.einsum("iii", c), (rng.normal(size=(3, 3, 3)),)),
    "einsum ellipsis diagonal": (lambda t: np.einsum("...ii->...i", t), (np.moveaxis(T, 2, 0),)),
    "einsum implicit": (lambda a, t: np.einsum("ij,iik", a, t), (SQ, T)),
    "einsum sublists": (lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]), (SQ, U.T)),
    "einsum sublists implicit": (lambda a, b: np.einsum(a, [0, 1], b, [1, 2]), (SQ, U.T)),
    "einsum sublists ellipsis": (lambda t: np.einsum(t, [Ellipsis, 0, 0], [Ellipsis, 0]), (np.moveaxis(T, 2, 0),)),
    "einsum sublists repeated": (lambda a: np.einsum(a, [0, 0]), (SQ,)),
    "cross": (np.cross, (U, V3)),
    "cross 2-vectors": (lambda a, b: np.cross(a[:, :2], b[:2]), (U, V3)),
    "cross 2 and 3": (lambda a, b: np.cross(a[:, :2], b), (U, V3)),
    "cross axisa axisb axisc": (lambda a, b: np.cross(a.T, b, axisa=0, axisb=-1, axisc=0), (U, V3)),
    "cross axis": (lambda a, b: np.cross(a.T, b.T, axis=0), (U, U[::-1] ** 2)),
    "linalg.cross": (lambda a, b: np.linalg.cross(a, b), (U, V3)),
    "vecdot": (np.vecdot, (U, V3)),
    "matvec": (np.matvec, (SQ, U)),
    "vecmat": (np.vecmat, (U, SQ)),
    "linalg.vecdot": (lambda a, b: np.linalg.vecdot(a, b, axis=0), (U, U ** 2)),
    "linalg.outer": (np.linalg.outer, (V3, U[0])),
    "linalg.tensordot": (lambda a, b: np.linalg.tensordot(a, b, axes=1), (SQ, U.T)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_central_differences_and_numpy(name):
    f, args = CASES[name]
    run_case(f, *args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32(name):
    f, args = CASES[name]
    run_float32(f, *args)


def test_einsum_errors_are_numpys():
    with pytest.raises(ValueError):
        pb.gradient(lambda a: np.einsum("ij->k", a), SQ)
    with pytest.raises(TypeError, match="out="):
        pb.gradient(lambda a: np.einsum("ii", a, out=np.zeros(())), SQ)


def test_gufunc_axis_keyword_is_numpy_s():
    f = lambda a: np.sum(np.vecdot(a, a, axis=0) ** 2)  # noqa: E731
    value, (g,) = pb.withgradient(f, U)
    assert value == f(U)
    np.testing.assert_allclose(g, pb.testing.numerical_gradient(f, U)[0], rtol=1e-7)
