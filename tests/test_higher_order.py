"""Nested `pb.gradient`: the rules' own backward passes are differentiable.

Second derivatives are checked against central differences of the first derivative that
pullback computes (itself checked against central differences in the rule tests), and
against hand-derived formulas; third derivatives against formulas.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from pullback.testing import assert_gradient
from rule_checks import seeds
from test_rules_ufuncs import BINARY, NUMPY_RULES, UNARY

SETTINGS = settings(max_examples=10, deadline=None)
shapes = hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3)
SECOND = {"rtol": 1e-4, "atol": 1e-6}


def derivative(f, k=0):
    """x -> d f / d args[k], computed by pullback (a function that can be differentiated again)."""
    return lambda *args: pb.gradient(f, *args)[k]


def assert_second_order(f, *args, rng):
    """Differentiate f's derivative maps (the gradient, all blocks, and the tangent) in both modes."""
    return assert_gradient(f, *args, order=2, dense_up_to=None, seed=rng, **SECOND)


# --- every unary ufunc ------------------------------------------------------------------------
SECOND_DERIVATIVES = {  # by hand, for the ones whose second derivative is not zero
    np.exp: np.exp, np.exp2: lambda x: 2.0**x * math.log(2.0) ** 2, np.expm1: np.exp,
    np.log: lambda x: -1 / x**2, np.log2: lambda x: -1 / (x**2 * math.log(2.0)),
    np.log10: lambda x: -1 / (x**2 * math.log(10.0)), np.log1p: lambda x: -1 / (1 + x) ** 2,
    np.sqrt: lambda x: -0.25 * x**-1.5, np.cbrt: lambda x: -2 / 9 * np.cbrt(x) / x**2, np.square: lambda x: 2 + 0 * x,
    np.reciprocal: lambda x: 2 / x**3, np.sin: lambda x: -np.sin(x), np.cos: lambda x: -np.cos(x),
    np.tan: lambda x: 2 * np.tan(x) / np.cos(x) ** 2, np.arcsin: lambda x: x / (1 - x**2) ** 1.5,
    np.arccos: lambda x: -x / (1 - x**2) ** 1.5, np.arctan: lambda x: -2 * x / (1 + x**2) ** 2,
    np.sinh: np.sinh, np.cosh: np.cosh, np.tanh: lambda x: -2 * np.tanh(x) / np.cosh(x) ** 2,
    np.arcsinh: lambda x: -x / (1 + x**2) ** 1.5, np.arccosh: lambda x: -x / (x**2 - 1) ** 1.5,
    np.arctanh: lambda x: 2 * x / (1 - x**2) ** 2,
}
LINEAR = {np.negative, np.positive, np.conjugate, np.absolute, np.fabs, np.deg2rad, np.rad2deg, np.radians, np.degrees, np.sign}


def test_every_unary_ufunc_has_a_second_derivative_expectation():
    unary = {u for u in NUMPY_RULES if u.nin == 1 and u.nout == 1}  # modf, frexp: tests of their own
    missing = [u.__name__ for u in unary if u not in SECOND_DERIVATIVES and u not in LINEAR]
    assert not missing, f"add a hand-derived second derivative (or mark as piecewise linear): {missing}"


UNARY_RULES = sorted((u for u in NUMPY_RULES if u.nin == 1 and u.nout == 1), key=lambda u: u.__name__)


@pytest.mark.parametrize("ufunc", UNARY_RULES, ids=lambda u: u.__name__)
@SETTINGS
@given(shape=shapes, seed=seeds)
def test_unary_second_derivative(ufunc, shape, seed):
    rng = np.random.default_rng(seed)
    x = np.asarray(UNARY[ufunc](rng, shape), dtype=np.float64)
    w = rng.normal(size=shape)
    first = derivative(lambda x: np.sum(ufunc(x) * w))
    if ufunc is np.sign:  # piecewise constant on real input: no first derivative at all
        assert first(x) is None
        return
    result = assert_gradient(lambda x: np.sum(first(x)), x, dense_up_to=None, **SECOND)  # differences of pullback's f'
    (second,) = result.gradient
    expected = w * SECOND_DERIVATIVES[ufunc](x) if ufunc in SECOND_DERIVATIVES else np.zeros(shape)
    if second is None:
        np.testing.assert_array_equal(expected, 0.0)
    else:
        np.testing.assert_allclose(second, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("ufunc", [np.sin, np.tanh, np.log, np.sqrt], ids=lambda u: u.__name__)
def test_second_derivative_keeps_float32(ufunc):
    x = np.array([0.3, 0.9, 1.4], np.float32)
    (second,) = pb.gradient(lambda x: np.sum(derivative(lambda x: np.sum(ufunc(x)))(x)), x)
    assert second.dtype == np.float32
    np.testing.assert_allclose(second, SECOND_DERIVATIVES[ufunc](x.astype(np.float64)), rtol=1e-5)


# --- binary ufuncs: Hessian-vector products over both arguments ------------------------------
@pytest.mark.parametrize(
    "ufunc",
    [np.multiply, np.true_divide, np.power, np.arctan2, np.hypot, np.logaddexp, np.maximum, np.subtract],
    ids=lambda u: u.__name__,
)
@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3), seed=seeds)
def test_binary_second_order(ufunc, shapes, seed):
    rng = np.random.default_rng(seed)
    domain_a, domain_b = BINARY[ufunc]
    (shape_a, shape_b), out_shape = shapes.input_shapes, shapes.result_shape
    a, b = np.asarray(domain_a(rng, shape_a)), np.asarray(domain_b(rng, shape_b))
    w = rng.normal(size=out_shape)
    # The square makes even the piecewise-linear ones curved.
    assert_second_order(lambda a, b: np.sum(ufunc(a, b) ** 2 * w), a, b, rng=rng)


def test_power_mixed_partials_by_hand():
    a, b = np.array([1.5, 2.0]), np.array([0.5, 3.0])
    d2a_db = pb.gradient(lambda a, b: np.sum(derivative(lambda a, b: np.sum(a**b), 0)(a, b)), a, b)[1]
    d2b_da = pb.gradient(lambda a, b: np.sum(derivative(lambda a, b: np.sum(a**b), 1)(a, b)), a, b)[0]
    expected = a ** (b - 1) * (1 + b * np.log(a))  # d/db (b a^(b-1)) = d/da (a^b log a)
    np.testing.assert_allclose(d2a_db, expected, rtol=1e-12)
    np.testing.assert_allclose(d2b_da, expected, rtol=1e-12)


# --- reductions, indexing, products --------------------------------------------------------------
@pytest.mark.parametrize("name", ["sum", "mean", "max", "prod", "prod with zeros"])
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, max_side=3), seed=seeds, data=st.data())
def test_reduction_second_order(name, shape, seed, data):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    x = ((rng.permutation(n) + 1.0) * 0.1 + rng.uniform(0, 0.01, n)).reshape(shape)  # distinct, non-zero
    if name == "prod with zeros":
        x = x * (rng.uniform(size=shape) > 0.4)  # sin(0) = 0: exact zeros reach prod
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)), label="axis")
    reduce = getattr(np, name.split()[0])
    w = rng.normal(size=np.shape(reduce(x, axis=axis)))
    assert_second_order(lambda x: np.sum(reduce(np.sin(x), axis=axis) ** 2 * w), x, rng=rng)


def prod_hessian(x):
    return np.stack([pb.gradient(lambda x: derivative(np.prod)(x)[i], x)[0] for i in range(x.size)])


def test_prod_second_derivative_by_hand():
    # d^2 prod / dx_i dx_j is the product of all but x_i and x_j (0 on the diagonal).
    np.testing.assert_array_equal(prod_hessian(np.array([2.0, 3.0, 0.0, 5.0]))[0], [0.0, 0.0, 15.0, 0.0])
    expected = np.zeros((4, 4))
    expected[0, 2] = expected[2, 0] = 2.0 * 5.0  # two zeros: only the pair of zeros has a non-zero entry
    np.testing.assert_array_equal(prod_hessian(np.array([0.0, 2.0, 0.0, 5.0])), expected)
    np.testing.assert_array_equal(prod_hessian(np.array([0.0, 0.0, 0.0])), np.zeros((3, 3)))


def test_prod_third_derivative_at_three_zeros():
    x = np.array([0.0, 0.0, 0.0, 2.0])
    d01 = lambda x: pb.gradient(lambda x: derivative(np.prod)(x)[0], x)[0][1]  # noqa: E731
    (d3,) = pb.gradient(d01, x)
    np.testing.assert_array_equal(d3, [0.0, 0.0, 2.0, 0.0])


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=2, max_side=4), seed=seeds, data=st.data())
def test_indexing_second_order(shape, seed, data):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    index = data.draw(
        st.one_of(
            hnp.integer_array_indices(shape, result_shape=hnp.array_shapes(max_dims=1, max_side=5)),  # repeats too
            st.just((slice(None, None, -1),)),
            st.just((Ellipsis, 0)),
        ),
        label="index",
    )
    w = rng.normal(size=np.shape(x[index]))
    assert_second_order(lambda x: np.sum(x[index] ** 3 * w), x, rng=rng)


def test_index_assignment_second_order():
    rng = np.random.default_rng(4)
    x, v = rng.normal(size=5), rng.normal(size=2)

    def f(x, v):
        h = x * 1.0
        h[np.array([3, 1])] = v * x[:2]
        return np.sum(h**3)

    assert_second_order(f, x, v, rng=rng)


def test_where_and_clip_second_order():
    rng = np.random.default_rng(5)
    x, lo = np.array([-1.3, 0.2, 0.7, 2.1]), np.array([0.0, 0.1, 0.1, 0.5])
    assert_second_order(lambda x: np.sum(np.where(x > 0, x**3, np.sin(x))), x, rng=rng)
    assert_second_order(lambda x, lo: np.sum(np.clip(x, lo, 1.5) ** 3), x, lo, rng=rng)


MATMUL_CASES = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 2)), ((2, 2, 3), (3, 4)), ((2, 3), (1, 3, 2))]


@SETTINGS
@given(seed=seeds, case=st.sampled_from(MATMUL_CASES))
def test_matmul_second_order(seed, case):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=case[0]), rng.normal(size=case[1])
    w = rng.normal(size=np.shape(a @ b))
    assert_second_order(lambda a, b: np.sum((a @ b) ** 2 * w), a, b, rng=rng)


@pytest.mark.parametrize("subscripts,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 2)]),
    ("ij,jk->i", [(2, 3), (3, 4)]),
    ("...i,...i->...", [(2, 3), (3,)]),
    ("ij,jk,k->", [(2, 3), (3, 2), (2,)]),
])
def test_einsum_second_order(subscripts, shapes):
    rng = np.random.default_rng(6)
    arrays = [rng.normal(size=s) for s in shapes]
    assert_second_order(lambda *ops: np.sum(np.einsum(subscripts, *ops) ** 2), *arrays, rng=rng)


def test_tensordot_and_dot_second_order():
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(4, 3, 2))
    assert_second_order(lambda a, b: np.sum(np.tensordot(a, b, axes=([1, 2], [1, 0])) ** 2), a, b, rng=rng)
    c = rng.normal(size=(3, 4, 2))
    assert_second_order(lambda a, c: np.sum(np.dot(a, c) ** 2), a, c, rng=rng)


# --- third order -----------------------------------------------------------------------------
THIRD = {
    "sin": (np.sin, lambda x: -np.cos(x)),
    "exp": (np.exp, np.exp),
    "power 3.5": (lambda x: x**3.5, lambda x: 3.5 * 2.5 * 1.5 * x**0.5),
    "power 3": (lambda x: x**3, lambda x: 6.0 + 0 * x),
    "power of 2": (lambda x: 2.0**x, lambda x: 2.0**x * math.log(2.0) ** 3),
}


@pytest.mark.parametrize("name", THIRD)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_third_derivative(name, dtype):
    f, expected = THIRD[name]
    x = np.array([0.4, 1.1, 1.7], dtype)
    d1 = derivative(lambda x: np.sum(f(x)))
    d2 = derivative(lambda x: np.sum(d1(x)))
    (d3,) = pb.gradient(lambda x: np.sum(d2(x)), x)
    assert d3.dtype == dtype
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(d3, expected(x.astype(np.float64)), rtol=rtol)


@pytest.mark.parametrize("shape", [(0,), (2, 0)])
def test_the_hessian_and_jacobian_of_an_empty_array_are_empty_arrays(shape):
    x = np.zeros(shape)
    h = pb.hessian(lambda x: np.sum(x ** 2), x)
    assert h.shape == shape + shape and h.dtype == np.float64
    (j,) = pb.jacobian(lambda x: np.sum(x ** 2), x)  # no input entries: an empty Jacobian, not None
    assert j.shape == shape
    (j,) = pb.jacobian(lambda v: np.reshape(v, shape) * 2.0, np.ones(0).reshape(shape))
    assert j.shape == shape + shape
    (j,) = pb.jacobian(lambda v: v[:0] * 2.0, np.ones(3))  # no output entries
    assert j.shape == (0, 3)


@pytest.mark.parametrize("api", ["jacobian", "withjacobian"])
def test_jacobian_does_not_modify_its_argument(api):
    """A function that updates its argument in place (as NumPy code may): gradient, vjp, jvp, hessian
    and hvp all work on a copy and leave the caller's array alone. pb.jacobian runs f once "for its
    value" on the caller's own array, so the array is changed (to [6, 3, 4]) and the next run then
    raises "f gave a different value when run again (it draws random numbers...)"."""

    def f(a):
        a += 1.0
        a[0] *= 3
        return a * 2

    x = np.array([1.0, 2.0, 3.0])
    jac = getattr(pb, api)(f, x)
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])
    j = jac[0] if api == "jacobian" else jac[1][0]
    np.testing.assert_allclose(j, np.diag([6.0, 2.0, 2.0]))
