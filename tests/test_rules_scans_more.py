"""np.gradient (every spacing form, axis, edge_order 1 and 2), trapezoid, ediff1d, cumulative_sum,
cumulative_prod, nancumsum and nancumprod against central differences in both modes, against
NumPy's values, in float32, and at the odd cases."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from numpy_coverage_checks import run_case, run_float32
from rule_checks import draw_axis, second_order, seeds

rng = np.random.default_rng(12)
F = rng.normal(size=(5, 4))
F3 = rng.normal(size=(3, 4, 5))
XS = np.cumsum(rng.uniform(0.5, 1.5, 5))
YS = np.cumsum(rng.uniform(0.5, 1.5, 4))
V = rng.normal(size=6)
NAN = F.copy()
NAN[1, 2] = NAN[3, 0] = np.nan

CASES = {
    "gradient default": (lambda f: np.gradient(f), (F,)),
    "gradient scalar": (lambda f, h: np.gradient(f, h), (F, 0.7)),
    "gradient two scalars": (lambda f, h, k: np.gradient(f, h, k), (F, 0.7, 1.3)),
    "gradient coordinates": (lambda f, x, y: np.gradient(f, x, y), (F, XS, YS)),
    "gradient coordinates order 2": (lambda f, x, y: np.gradient(f, x, y, edge_order=2), (F, XS, YS)),
    "gradient scalar order 2": (lambda f, h: np.gradient(f, h, edge_order=2), (F3, 0.4)),
    "gradient axis": (lambda f, x: np.gradient(f, x, axis=0), (F, XS)),
    "gradient negative axis": (lambda f, x: np.gradient(f, x, axis=-2, edge_order=2), (F, XS)),
    "gradient axes": (lambda f, y, h: np.gradient(f, h, y, axis=(2, 1)), (F3, YS, 0.3)),
    "gradient 1-d": (lambda v: np.gradient(v, 2.0), (V,)),
    "trapezoid": (lambda y: np.trapezoid(y), (F,)),
    "trapezoid x": (lambda y, x: np.trapezoid(y, x, axis=0), (F, XS)),
    "trapezoid dx": (lambda y, d: np.trapezoid(y, dx=d, axis=-1), (F3, 0.3)),
    "trapezoid x n-d": (lambda y, x: np.trapezoid(y, x), (F, np.cumsum(np.abs(F), axis=1))),
    "ediff1d": (lambda a: np.ediff1d(a), (F,)),
    "ediff1d ends": (lambda a, b, e: np.ediff1d(a, to_end=e, to_begin=b), (V, V[:2], F[0])),
    "cumulative_sum": (lambda x: np.cumulative_sum(x, axis=1, include_initial=True), (F,)),
    "cumulative_sum 1-d": (lambda x: np.cumulative_sum(x), (V,)),
    "cumulative_prod": (lambda x: np.cumulative_prod(x, axis=-1, include_initial=True), (F3,)),
    "nancumsum": (lambda x: np.nancumsum(x, axis=0), (NAN,)),
    "nancumsum flat": (lambda x: np.nancumsum(x), (NAN,)),
    "nancumprod": (lambda x: np.nancumprod(x, 1), (NAN,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_central_differences_and_numpy(name):
    f, args = CASES[name]
    run_case(f, *args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32(name):
    f, args = CASES[name]
    run_float32(f, *args)


def test_gradient_is_exact_on_quadratics_with_edge_order_2():
    x = np.array([0.0, 0.4, 1.5, 1.9, 3.0])
    f = 2.0 * x ** 2 - x
    np.testing.assert_allclose(pb.pullback(lambda f, x: np.gradient(f, x, edge_order=2), f, x)[0], 4.0 * x - 1.0)


def test_gradient_errors_and_second_order():
    with pytest.raises(ValueError, match="too small"):
        pb.gradient(lambda f: np.sum(np.gradient(f, edge_order=2)), np.ones(2))
    with pytest.raises(TypeError):
        pb.gradient(lambda f: np.sum(np.gradient(f, 1.0, 2.0, 3.0)), np.ones((3, 3)))
    second_order(lambda x: np.sum(np.gradient(x ** 3, XS) ** 2), V[:5])


def test_cumulative_sum_needs_axis_for_n_d_as_numpy():
    with pytest.raises(ValueError):
        pb.gradient(lambda x: np.sum(np.cumulative_sum(x)), F)
    g = pb.gradient(lambda x: np.sum(np.nancumsum(x)), NAN)[0]
    assert np.all(g[np.isnan(NAN)] == 0) and np.all(np.isfinite(g))


@settings(max_examples=20, deadline=None)
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=3, max_side=5), seed=seeds,
       edge_order=st.sampled_from([1, 2]), data=st.data())
def test_gradient_random_shapes_axes_and_spacings(shape, seed, edge_order, data):
    rng = np.random.default_rng(seed)
    f = rng.normal(size=shape)
    axis = draw_axis(rng, len(shape))
    coordinates = np.cumsum(rng.uniform(0.5, 1.5, shape[axis]))
    spacing = data.draw(st.sampled_from(["coordinates", "scalar", "none"]))
    args = {"coordinates": (coordinates,), "scalar": (0.7,), "none": ()}[spacing]
    run_case(lambda f, *h: np.gradient(f, *h, axis=axis, edge_order=edge_order), f, *args)
