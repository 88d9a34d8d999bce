"""Elementwise ufunc rules against float64 central differences in both modes, over random shapes and
dtypes; clip, the maximum/minimum ties and heaviside by hand.

The list of ufuncs comes from the registry, so a ufunc that gains a rule without a
domain here fails `test_every_ufunc_rule_has_a_test_domain`.
"""

import math
import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from pullback._registry import NONDIFF_UFUNCS, UFUNC_RULES
from pullback.testing import assert_gradient
from rule_checks import dtypes, gradcheck, seeds

SETTINGS = settings(max_examples=25, deadline=None)
FEW = settings(max_examples=10, deadline=None)

shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)
pairs = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=1, max_side=4)
triples = hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=3)


def tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-7} if dtype == np.float64 else {"rtol": 2e-3, "atol": 2e-4}


# --- input domains: where each ufunc is smooth, so central differences are valid ---------
def real(rng, shape):
    return rng.uniform(-2.0, 2.0, shape)


def small(rng, shape):
    return rng.uniform(-1.2, 1.2, shape)


def positive(rng, shape):
    return rng.uniform(0.2, 2.0, shape)


def nonzero(rng, shape):
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 2.0, shape)


def inside_unit(rng, shape):
    return rng.uniform(-0.9, 0.9, shape)


def above_one(rng, shape):
    return rng.uniform(1.2, 3.0, shape)


def grid_low(rng, shape):
    # Multiples of 0.1 plus 0.03: never within 0.04 of a `grid_high` value, so max/min have no ties.
    return rng.integers(-10, 11, shape) / 10.0 + 0.03


def grid_high(rng, shape):
    return rng.integers(-10, 11, shape) / 10.0 + 0.07


def dividend(rng, shape):
    # k + [0.3, 0.7] over a divisor of magnitude [1.0, 1.2]: the quotient stays >= 0.08 from an integer.
    return rng.integers(-2, 3, shape) + rng.uniform(0.3, 0.7, shape)


def divisor(rng, shape):
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(1.0, 1.2, shape)


def small_int(rng, shape):
    return rng.integers(-3, 4, shape)


UNARY = {
    np.negative: real, np.positive: real, np.conjugate: real,
    np.exp: real, np.exp2: real, np.expm1: real,
    np.log: positive, np.log2: positive, np.log10: positive, np.log1p: inside_unit,
    np.sqrt: positive, np.cbrt: nonzero, np.square: real, np.reciprocal: nonzero,
    np.sin: real, np.cos: real, np.tan: small,
    np.arcsin: inside_unit, np.arccos: inside_unit, np.arctan: real,
    np.sinh: real, np.cosh: real, np.tanh: real,
    np.arcsinh: real, np.arccosh: above_one, np.arctanh: inside_unit,
    np.absolute: nonzero, np.fabs: nonzero, np.deg2rad: real, np.rad2deg: real,
    np.radians: real, np.degrees: real, np.sign: nonzero,
}

# ufunc -> (domain of a, domain of b)
BINARY = {
    np.add: (real, real), np.subtract: (real, real), np.multiply: (real, real),
    np.true_divide: (real, nonzero),
    np.power: (positive, real), np.float_power: (positive, real),
    np.maximum: (grid_low, grid_high), np.minimum: (grid_low, grid_high),
    np.fmax: (grid_low, grid_high), np.fmin: (grid_low, grid_high),
    np.arctan2: (nonzero, real), np.hypot: (nonzero, real),
    np.logaddexp: (real, real), np.logaddexp2: (real, real),
    np.remainder: (dividend, divisor), np.fmod: (dividend, divisor),
    np.copysign: (nonzero, nonzero), np.ldexp: (real, small_int),
    np.heaviside: (nonzero, real),  # x1 away from its step; the value at 0 is tested below
    np.nextafter: (real, real),
}

# (ufunc, argument) pairs that carry no gradient: the sign source, the step's position.
NO_GRADIENT = {(np.copysign, 1), (np.heaviside, 0), (np.nextafter, 1)}

# Registered as ufunc rules but with their own test files: the gufuncs (test_rules_products*.py) and the
# ufuncs with two outputs (test_rules_pointwise.py).
TESTED_ELSEWHERE = {np.matmul, np.matvec, np.vecdot, np.vecmat, np.frexp, np.modf, np.divmod}


def numpy_ufuncs(table):
    """NumPy's own ufuncs in a rule table (SciPy's, registered by `rules.special`, are tested with it)."""
    return {u for u in table if getattr(np, u.__name__, None) is u}


NUMPY_RULES = numpy_ufuncs(UFUNC_RULES)
NUMPY_NONDIFF = numpy_ufuncs(NONDIFF_UFUNCS)


def by_name(ufuncs):
    return sorted(ufuncs, key=lambda u: u.__name__)


def sample(domain, rng, shape, dtype):
    x = np.asarray(domain(rng, shape))
    return x.astype(dtype) if x.dtype.kind == "f" else x


def test_every_ufunc_rule_has_a_test_domain():
    covered = set(UNARY) | set(BINARY) | TESTED_ELSEWHERE
    missing = [u.__name__ for u in numpy_ufuncs(UFUNC_RULES) if u not in covered]
    assert not missing, f"ufuncs with a rule but no test domain in {__file__}: {missing}"


@pytest.mark.parametrize("ufunc", by_name(u for u in NUMPY_RULES if u.nin == 1 and u not in TESTED_ELSEWHERE), ids=lambda u: u.__name__)
@SETTINGS
@given(shape=shapes, dtype=dtypes, seed=seeds)
def test_unary(ufunc, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = sample(UNARY[ufunc], rng, shape, dtype)
    w = rng.normal(size=shape)
    gradcheck(lambda x: np.sum(ufunc(x) * w), x, **tolerance(dtype))


@pytest.mark.parametrize(
    "ufunc", by_name(u for u in NUMPY_RULES if u.nin == 2 and u not in TESTED_ELSEWHERE), ids=lambda u: u.__name__
)
@SETTINGS
@given(shapes=pairs, dtype=dtypes, seed=seeds)
def test_binary_with_broadcasting(ufunc, shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    domain_a, domain_b = BINARY[ufunc]
    (shape_a, shape_b), out_shape = shapes.input_shapes, shapes.result_shape
    a, b = sample(domain_a, rng, shape_a, dtype), sample(domain_b, rng, shape_b, dtype)
    w = rng.normal(size=out_shape)
    gradcheck(lambda a, b: np.sum(ufunc(a, b) * w), a, b, **tolerance(dtype))


@pytest.mark.parametrize(
    "ufunc", by_name(u for u in NUMPY_RULES if u.nin == 2 and u not in TESTED_ELSEWHERE), ids=lambda u: u.__name__
)
@FEW
@given(shape=shapes, dtype=dtypes, seed=seeds, scalar_first=st.booleans())
def test_binary_with_python_scalar(ufunc, shape, dtype, seed, scalar_first):
    """A Python scalar operand is weak: a float32 array stays float32, and a Python float gets a float gradient."""
    rng = np.random.default_rng(seed)
    domain_a, domain_b = BINARY[ufunc]
    if scalar_first:
        a, b = sample(domain_a, rng, (), np.float64).item(), sample(domain_b, rng, shape, dtype)
    else:
        a, b = sample(domain_a, rng, shape, dtype), sample(domain_b, rng, (), np.float64).item()
    w = rng.normal(size=shape)
    forward_dtypes = []

    def f(a, b):
        y = ufunc(a, b)
        forward_dtypes.append(y.dtype)
        return np.sum(y * w)

    grads = gradcheck(f, a, b, **tolerance(dtype))
    array = b if scalar_first else a
    if ufunc is not np.float_power and array.dtype.kind == "f":  # float_power computes in float64 by definition
        assert forward_dtypes[0] == dtype
    for k, (arg, g) in enumerate(zip((a, b), grads)):
        if type(arg) is float and (ufunc, k) not in NO_GRADIENT:
            assert type(g) is float
        elif type(arg) is int:
            assert g is None


def float32_rule_cases():
    """(ufunc, where the Python scalar goes): every operand layout that has a float32 array in it."""
    for u in by_name(u for u in NUMPY_RULES if u not in TESTED_ELSEWHERE):
        if u.nin == 1:
            yield pytest.param(u, None, id=u.__name__)
            continue
        yield pytest.param(u, None, id=f"{u.__name__}-arrays")
        yield pytest.param(u, 1, id=f"{u.__name__}-scalar second")
        if u is not np.ldexp:  # ldexp's other operand is an integer exponent: no float32 array would be left
            yield pytest.param(u, 0, id=f"{u.__name__}-scalar first")


@pytest.mark.parametrize("ufunc, scalar_at", list(float32_rule_cases()))
def test_rule_keeps_float32(ufunc, scalar_at):
    """Called directly (before the engine casts anything), each rule computes in float32 for float32 inputs."""
    rng = np.random.default_rng(0)
    rule = UFUNC_RULES[ufunc]
    domains = (UNARY[ufunc],) if ufunc.nin == 1 else BINARY[ufunc]
    args = [sample(domain, rng, (3,), np.float32) for domain in domains]
    if scalar_at is not None:
        args[scalar_at] = sample(domains[scalar_at], rng, (), np.float64).item()
    y, back = rule(*args)
    expected = np.float64 if ufunc is np.float_power else np.float32
    assert y.dtype == expected
    for arg, ct in zip(args, back(np.ones_like(y))):
        ct = pb.unthunk(ct)
        if isinstance(arg, np.ndarray) and arg.dtype.kind == "f" and ct is not None:
            assert np.result_type(ct) == expected, f"cotangent dtype {np.result_type(ct)}"


# --- operator spellings --------------------------------------------------------------------
OPERATORS = {
    "+": (operator.add, real, real), "-": (operator.sub, real, real), "*": (operator.mul, real, real),
    "/": (operator.truediv, real, nonzero), "**": (operator.pow, positive, real),
    "%": (operator.mod, dividend, divisor),
}


@pytest.mark.parametrize("name", OPERATORS)
@SETTINGS
@given(shapes=pairs, dtype=dtypes, seed=seeds)
def test_operator(name, shapes, dtype, seed):
    op, domain_a, domain_b = OPERATORS[name]
    rng = np.random.default_rng(seed)
    (shape_a, shape_b), out_shape = shapes.input_shapes, shapes.result_shape
    a, b = sample(domain_a, rng, shape_a, dtype), sample(domain_b, rng, shape_b, dtype)
    w = rng.normal(size=out_shape)
    tol = tolerance(dtype)
    gradcheck(lambda a, b: np.sum(op(a, b) * w), a, b, **tol)
    # Reflected: a plain array on the left, the tracked value on the right.
    gradcheck(lambda b: np.sum(op(a, b) * w), b, **tol)
    gradcheck(lambda a: np.sum(op(a, b) * w), a, **tol)


@pytest.mark.parametrize("name", OPERATORS)
@FEW
@given(shape=shapes, dtype=dtypes, seed=seeds, integer=st.booleans())
def test_operator_with_python_scalar_on_the_left(name, shape, dtype, seed, integer):
    op, domain_a, domain_b = OPERATORS[name]
    rng = np.random.default_rng(seed)
    left = sample(domain_a, rng, (), np.float64).item()
    if integer:
        left = {"%": 2, "**": 2}.get(name, -3)
    b = sample(domain_b, rng, shape, dtype)
    w = rng.normal(size=shape)
    y_dtypes = []

    def f(b):
        y = op(left, b)
        y_dtypes.append(y.dtype)
        return np.sum(y * w)

    gradcheck(f, b, **tolerance(dtype))
    assert y_dtypes[0] == dtype


@SETTINGS
@given(shape=shapes, dtype=dtypes, seed=seeds)
def test_unary_operators(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = sample(nonzero, rng, shape, dtype)
    w = rng.normal(size=shape)
    tol = tolerance(dtype)
    gradcheck(lambda x: np.sum(-x * w), x, **tol)
    gradcheck(lambda x: np.sum(+x * w), x, **tol)
    gradcheck(lambda x: np.sum(abs(x) * w), x, **tol)


@SETTINGS
@given(dims=st.lists(st.integers(1, 4), min_size=3, max_size=3), dtype=dtypes, seed=seeds)
def test_matmul_operator_and_reflected(dims, dtype, seed):
    n, k, m = dims
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(n, k)).astype(dtype), rng.normal(size=(k, m)).astype(dtype)
    w = rng.normal(size=(n, m))
    tol = tolerance(dtype)
    gradcheck(lambda a, b: np.sum((a @ b) * w), a, b, **tol)
    gradcheck(lambda b: np.sum((a @ b) * w), b, **tol)  # ndarray.__matmul__ with a tracked right side
    gradcheck(lambda a: np.sum((a @ b) * w), a, **tol)


def test_python_scalar_operators_never_promote_float32():
    x = np.array([0.5, 1.5], np.float32)

    def f(x):
        ys = [
            x + 1.5, 1.5 + x, x - 2.0, 2.0 - x, x * 0.1, 0.1 * x, x / 3.0, 3.0 / x, x**2.5, 2.5**x, x % 0.7, -x, 2 * x,
        ]
        assert all(y.dtype == np.float32 for y in ys), [y.dtype for y in ys]
        return sum(np.sum(y) for y in ys)

    (g,) = pb.gradient(f, x)
    assert g.dtype == np.float32
    x64 = x.astype(np.float64)
    expected = 1 + 1 + 1 - 1 + 0.1 + 0.1 + 1 / 3 - 3 / x64**2 + 2.5 * x64**1.5 + 2.5**x64 * math.log(2.5) + 1 - 1 + 2
    np.testing.assert_allclose(g, expected, rtol=1e-5)


# --- ufunc methods -------------------------------------------------------------------------
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, max_side=4), data=st.data(), dtype=dtypes, seed=seeds)
def test_add_reduce(shape, data, dtype, seed):
    rng = np.random.default_rng(seed)
    x = sample(real, rng, shape, dtype)
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)), label="axis")
    kwargs = {} if axis == 0 else {"axis": axis}
    w = rng.normal(size=np.add.reduce(x, **kwargs).shape)
    gradcheck(lambda x: np.sum(np.add.reduce(x, **kwargs) * w), x, **tolerance(dtype))
    gradcheck(lambda x: np.sum(np.multiply.reduce(x, **kwargs) * w), x, **tolerance(dtype))


@SETTINGS
@given(shape_a=shapes, shape_b=shapes, dtype=dtypes, seed=seeds)
def test_ufunc_outer(shape_a, shape_b, dtype, seed):
    rng = np.random.default_rng(seed)
    a, b = sample(real, rng, shape_a, dtype), sample(nonzero, rng, shape_b, dtype)
    w = rng.normal(size=shape_a + shape_b)
    tol = tolerance(dtype)
    gradcheck(lambda a, b: np.sum(np.multiply.outer(a, b) * w), a, b, **tol)
    gradcheck(lambda a, b: np.sum(np.subtract.outer(a, b) * w), a, b, **tol)
    gradcheck(lambda a, b: np.sum(np.true_divide.outer(a, b) * w), a, b, **tol)


# --- no gradient ---------------------------------------------------------------------------
@SETTINGS
@given(shape=shapes, seed=seeds)
def test_nondifferentiable_results_are_plain(shape, seed):
    rng = np.random.default_rng(seed)
    x = sample(nonzero, rng, shape, np.float64)
    seen = {}

    def f(x):
        seen["compare"] = x > 0
        seen["floor"] = np.floor(x)
        seen["argmax"] = np.argmax(x)
        seen["isfinite"] = np.isfinite(x)
        return np.sum(x * (x > 0)) + np.sum(np.sign(x)) + np.sum(np.floor(x))

    (g,) = pb.gradient(f, x)
    np.testing.assert_array_equal(seen["compare"], x > 0)
    np.testing.assert_array_equal(seen["floor"], np.floor(x))
    assert seen["argmax"] == np.argmax(x)
    for value in seen.values():
        assert type(value) in (np.ndarray, np.bool_, np.float64, np.intp, np.int64)
    np.testing.assert_array_equal(g, (x > 0).astype(float))
    only_plain = lambda x: np.sum(np.sign(x)) + np.sum(np.floor(x)) + np.argmax(x) + np.sum(x > 0)  # noqa: E731
    assert pb.gradient(only_plain, x) == (None,)


@pytest.mark.parametrize("ufunc", by_name(u for u in NUMPY_NONDIFF if u.nin == 1), ids=lambda u: u.__name__)
def test_nondifferentiable_unary_gives_none(ufunc):
    x = np.array([-1.7, 0.4, 2.2])
    out = {}

    def f(x):
        out["y"] = ufunc(x)
        return np.sum(ufunc(x))

    assert pb.gradient(f, x) == (None,)
    assert type(out["y"]) is np.ndarray
    np.testing.assert_array_equal(out["y"], ufunc(x))


@pytest.mark.parametrize("ufunc", by_name(u for u in NUMPY_NONDIFF if u.nin == 2), ids=lambda u: u.__name__)
def test_nondifferentiable_binary_gives_none(ufunc):
    a, b = np.array([-1.7, 0.4, 2.2]), np.array([0.5, 0.4, -1.0])
    out = {}

    def f(a, b):
        out["y"] = ufunc(a, b)
        return np.sum(ufunc(a, b))

    assert pb.gradient(f, a, b) == (None, None)
    assert type(out["y"]) is np.ndarray
    np.testing.assert_array_equal(out["y"], ufunc(a, b))


def test_power_at_zero_by_hand():
    x = np.array([0.0, 2.0])
    for exponent, expected in [(0, [0.0, 0.0]), (1, [1.0, 1.0]), (2, [0.0, 4.0]), (3, [0.0, 12.0]), (2.0, [0.0, 4.0])]:
        (g,) = pb.gradient(lambda x: np.sum(x**exponent), x)
        np.testing.assert_array_equal(g, expected, err_msg=f"d/dx x**{exponent!r}")
    (g,) = pb.gradient(lambda b: np.sum(np.array([0.0, 0.0, 3.0]) ** b), np.array([0.0, 2.0, 2.0]))
    np.testing.assert_allclose(g, [0.0, 0.0, 9.0 * math.log(3.0)])  # d/db 0**b is 0 (the limit from b > 0)
    (g,) = pb.gradient(lambda b: np.sum(np.power(np.zeros(2), b)), np.array([0.0, 1.5], np.float32))
    np.testing.assert_array_equal(g, [0.0, 0.0])


def test_builtin_divmod_and_round_on_traced_values():
    # both failed with "Tracked doesn't define __round__" / "unsupported operand type(s) for divmod()"
    assert pb.gradient(lambda a: divmod(a, 1.5)[1], 4.0) == (1.0,)  # 4 - 1.5 * floor(4 / 1.5)
    assert pb.gradient(lambda a: divmod(7.0, a)[1], 2.5) == (-2.0,)  # 7 - a * floor(7 / a)
    (g,) = pb.gradient(lambda x: np.sum(divmod(x, 1.5)[0] * x), np.array([4.0, 5.0]))
    np.testing.assert_array_equal(g, [2.0, 3.0])  # the quotient is piecewise constant
    value, (g,) = pb.withgradient(lambda a: round(a) + a, 2.6)
    assert value == 5.6 and g == 1.0  # round(a) is Python's int, which carries no gradient
    (g,) = pb.gradient(lambda x: np.sum(round(x, 1) * x), np.array([0.26, 1.33]))
    np.testing.assert_allclose(g, [0.3, 1.3])


def test_hypot_at_the_origin_has_the_zero_subgradient_of_the_norm():
    a, b = np.array([0.0, 3.0]), np.array([0.0, 4.0])
    ga, gb = pb.gradient(lambda a, b: np.sum(np.hypot(a, b)), a, b)
    np.testing.assert_array_equal(ga, [0.0, 0.6])  # not 0 / 0
    np.testing.assert_array_equal(gb, [0.0, 0.8])
    norm_grad = pb.gradient(lambda v: np.linalg.norm(v), np.zeros(2))[0]
    np.testing.assert_array_equal(norm_grad, [0.0, 0.0])  # the same choice
    _, tangent = pb.jvp(lambda a: np.hypot(a, b), (a,), (np.ones(2),))
    np.testing.assert_array_equal(tangent, [0.0, 0.6])


# --- clip, maximum/minimum ------------------------------------------------------------------
def separated(rng, shape, offset):
    """Multiples of 0.1 plus `offset`: values of different offsets never tie, so kinks are avoided."""
    return rng.integers(-10, 11, shape) / 10.0 + offset


@SETTINGS
@given(shapes=triples, dtype=dtypes, seed=seeds)
def test_clip(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    s_x, s_low, s_high = shapes.input_shapes
    x = separated(rng, s_x, 0.03).astype(dtype)
    low = separated(rng, s_low, 0.07).astype(dtype) - 0.5
    high = low + rng.uniform(0.2, 1.0, s_low).astype(dtype)  # low < high where they meet...
    high = np.broadcast_to(high, np.broadcast_shapes(s_low, s_high)).copy()
    w = rng.normal(size=np.broadcast_shapes(shapes.result_shape, high.shape))
    tol = tolerance(dtype)
    gradcheck(lambda x, low, high: np.sum(np.clip(x, low, high) * w), x, low, high, **tol)
    gradcheck(lambda x, low: np.sum(np.clip(x, low, None) * w), x, low, **tol)
    gradcheck(lambda x, high: np.sum(x.clip(None, high) * w), x, high, **tol)
    gradcheck(lambda x, low, high: np.sum(np.clip(x, min=low, max=high) * w), x, low, high, **tol)


def test_clip_by_hand():
    x = np.array([-2.0, 0.5, 3.0, 1.0])
    w = np.array([1.0, 2.0, 3.0, 4.0])
    gx, glow, ghigh = pb.gradient(lambda x, lo, hi: np.sum(np.clip(x, lo, hi) * w), x, 0.0, 1.5)
    np.testing.assert_array_equal(gx, [0.0, 2.0, 0.0, 4.0])
    assert (glow, ghigh) == (1.0, 3.0) and type(glow) is float


def test_clip_with_crossed_bounds_follows_the_upper_one():
    # NumPy does not check low <= high: clip(x, low, high) is min(max(x, low), high), which is always `high` here.
    x, low, high = np.array([-1.0, 2.5, 5.0]), np.array([2.0, 2.0, 2.0]), np.array([1.0, 1.0, 1.0])
    np.testing.assert_array_equal(np.clip(x, low, high), high)
    gx, glow, ghigh = pb.gradient(lambda x, low, high: np.sum(np.clip(x, low, high)), x, low, high)
    assert gx is None or not np.any(gx)
    assert glow is None or not np.any(glow)
    np.testing.assert_array_equal(ghigh, [1.0, 1.0, 1.0])


@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum, np.fmax, np.fmin])
def test_maximum_minimum_split_ties(ufunc):
    a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    b = np.array([1.0, 5.0, 0.0, 4.0], np.float32)
    w = np.array([2.0, 3.0, 5.0, 7.0])
    ga, gb = pb.gradient(lambda a, b: np.sum(ufunc(a, b) * w), a, b)
    a_wins = (a > b) if ufunc in (np.maximum, np.fmax) else (a < b)
    b_wins = (b > a) if ufunc in (np.maximum, np.fmax) else (b < a)
    tie = np.array([1.0, 0.0, 0.0, 1.0])
    np.testing.assert_array_equal(ga, w * (a_wins + 0.5 * tie))
    np.testing.assert_array_equal(gb, w * (b_wins + 0.5 * tie))
    assert ga.dtype == gb.dtype == np.float32


def test_maximum_with_a_scalar_tie_sums_the_broadcast_share():
    x = np.array([0.0, 1.0, -1.0, 0.0])
    gx, gs = pb.gradient(lambda x, s: np.sum(np.maximum(x, s)), x, 0.0)  # a relu with its threshold
    np.testing.assert_array_equal(gx, [0.5, 1.0, 0.0, 0.5])
    assert gs == 0.5 + 1.0 + 0.5



@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum, np.fmax, np.fmin])
def test_tie_split_keeps_an_infinite_cotangent_and_the_dtype_under_jit(ufunc):
    a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    b = np.array([1.0, 5.0, 0.0, 4.0], np.float32)
    w = np.array([np.inf, 3.0, 5.0, -np.inf], np.float32)  # the ties (first and last) get infinite cotangents
    wins = np.array([0.0, 0.0, 1.0, 0.0]) if ufunc in (np.maximum, np.fmax) else np.array([0.0, 1.0, 0.0, 0.0])
    expected_a = np.where(wins == 1.0, w, 0.0).astype(np.float32)
    expected_a[[0, 3]] = [np.inf, -np.inf]  # half of an infinite cotangent, not NaN
    step = pb.jit(lambda a, b: pb.gradient(lambda a, b: np.sum(ufunc(a, b) * w), a, b))
    for _ in range(2):  # the trace, then the replay
        ga, gb = step(a, b)
        np.testing.assert_array_equal(ga, expected_a)
        assert ga.dtype == gb.dtype == np.float32
    eager_a, _ = pb.gradient(lambda a, b: np.sum(ufunc(a, b) * w), a, b)
    np.testing.assert_array_equal(eager_a, expected_a)

# --- np.heaviside -------------------------------------------------------------------------------
def test_heaviside_value_at_zero_is_differentiable():
    x = np.array([-1.5, 0.0, 2.0, 0.0, -0.0])
    weights = np.array([1.0, 2.0, 3.0, -4.0, 0.5])
    f = lambda h: np.sum(weights * np.heaviside(x, h) ** 2)  # noqa: E731
    h = np.array([0.3, 0.4, 0.5, 0.6, 0.7])
    (g,) = gradcheck(f, h)
    np.testing.assert_allclose(g, [0.0, 2.0 * 2.0 * 0.4, 0.0, -4.0 * 2.0 * 0.6, 0.5 * 2.0 * 0.7], rtol=1e-12)
    gradcheck(lambda h: np.sum(np.heaviside(x, h)), 0.25)  # a Python float, broadcast
    v = np.array([1.0, -1.0, 2.0, 0.5, 3.0])
    np.testing.assert_allclose(pb.jvp(f, (h,), (v,))[1], np.sum(g * v), rtol=1e-12)


def test_heaviside_step_has_no_gradient_away_from_zero():
    x = np.array([-1.5, 0.2, 2.0, -0.3])
    h = np.array([0.3, 0.4, 0.5, 0.6])
    f = lambda x, h: np.sum(np.heaviside(x, h) * np.array([1.0, 2.0, 3.0, 4.0]))  # noqa: E731
    gradcheck(f, x, h)
    _, dot = pb.jvp(f, (x, h), (np.ones(4), np.ones(4)))
    assert dot is None or dot == 0.0


def test_a_derivative_naming_a_value_the_rule_does_not_have_is_refused_at_registration():
    from pullback.rules.ufuncs import _reads

    assert _reads(lambda g, y: g * y, ("x", "y")) == (1,)
    assert _reads(lambda g, a, y: g * a / y, ("a", "b", "y")) == (0, 2)
    with pytest.raises(TypeError, match=r"takes \['z'\]; a derivative takes g and any of \('x', 'y'\)"):
        _reads(lambda g, z: g * z, ("x", "y"))


@pytest.mark.parametrize("ufunc, derivative", [(np.sin, np.cos), (np.cos, lambda x: -np.sin(x))])
@pytest.mark.parametrize("shape", [(3 * 65536 + 7,), (300, 1000), (2, 65536), (1000, 300)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sin_cos_of_large_arrays_keep_their_derivative_yet_are_exact(ufunc, derivative, shape, dtype):
    """On large arrays sin/cos compute their derivative with the value and keep it for the backward
    pass: the gradient is still exactly the product g * f'(x) NumPy computes, in both modes, also
    for a transposed (non-contiguous) input and through a second function of the same value."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, shape).astype(dtype)
    w = rng.uniform(-1, 1, shape).astype(dtype)
    (g,) = pb.gradient(lambda v: np.sum(ufunc(v) * w), x)
    np.testing.assert_array_equal(g, w * derivative(x), strict=True)
    _, t = pb.jvp(ufunc, (x,), (w,))
    np.testing.assert_array_equal(t, w * derivative(x), strict=True)
    (g,) = pb.gradient(lambda v: np.sum(ufunc(v.T) * w.T), x)
    np.testing.assert_array_equal(g, w * derivative(x), strict=True)
    (g,) = pb.gradient(lambda v: np.sum(np.tanh(ufunc(v)) * w), x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(g, w * (1.0 - np.tanh(ufunc(x64)) ** 2) * derivative(x64), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("order", ["jvp of gradient", "gradient of gradient"])
def test_second_derivatives_of_sin_cos_of_large_arrays(order):
    rng = np.random.default_rng(2)
    x = rng.uniform(-3, 3, 70_000)
    v = rng.uniform(-1, 1, 70_000)

    def f(u):
        return np.sum(0.3 * np.sin(u) + np.cos(u))

    if order == "jvp of gradient":
        _, hv = pb.jvp(lambda u: pb.gradient(f, u)[0], (x,), (v,))
    else:
        (hv,) = pb.gradient(lambda u: np.sum(pb.gradient(f, u)[0] * v), x)
    np.testing.assert_allclose(hv, (-0.3 * np.sin(x) - np.cos(x)) * v, rtol=1e-12, atol=1e-14)


def test_blocked_product_falls_back_where_blocks_do_not_apply():
    from pullback.rules.ufuncs import times_of

    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, (400, 400)).astype(np.float32)
    for g, v in [(np.float32(2.0), x),  # a broadcast cotangent
                 (np.ones((400, 400), np.float32), x.T),  # a transposed input
                 (np.ones((400, 400), np.float64), x),  # mixed dtypes promote as NumPy does
                 (np.ones((400, 400)), x.astype(np.float64))]:
        np.testing.assert_array_equal(times_of(g, np.cos, v), g * np.cos(v), strict=True)


_RANDOM = np.random.default_rng(0).standard_normal(1000)


@pytest.mark.parametrize("name, f, x", [
    ("complex sqrt", lambda a: np.sqrt(a, dtype=complex), np.array([0.5, -2.0, 1.5])),
    ("complex log", lambda a: np.log(a, dtype=complex), np.array([0.5, -2.0, 1.5])),
    ("complex power", lambda a: np.power(a, 0.5, dtype=complex), np.array([0.5, -2.0, 1.5])),
    ("wider sin", lambda a: np.sin(a, dtype=np.float64), _RANDOM.astype(np.float32)),
    ("wider divide", lambda a: np.divide(a, 3.0, dtype=np.float64), _RANDOM.astype(np.float32)),
    ("narrower add", lambda a: np.add(a, a[::-1], dtype=np.float32), _RANDOM),
    ("half add", lambda a: np.add(a, 1.0, dtype=np.float16), _RANDOM.astype(np.float32)),
    ("add.reduce", lambda a: np.add.reduce(a, dtype=np.float32), _RANDOM),
    ("multiply.reduce", lambda a: np.multiply.reduce(a[:20], dtype=np.float32), _RANDOM),
    ("maximum.reduce", lambda a: np.maximum.reduce(a, dtype=np.float32), _RANDOM),
])
def test_a_ufunc_dtype_keyword_computes_in_that_dtype_as_numpy_does(name, f, x):
    # NumPy casts the inputs to the loop's dtype and computes there (a complex sqrt of -2 is 1.41j,
    # not the NaN of a real sqrt cast afterwards)
    with np.errstate(all="raise"):
        expected = f(x)
        y, _ = pb.pullback(f, x)
    assert type(y) is type(expected) and np.asarray(y).dtype == np.asarray(expected).dtype
    np.testing.assert_array_equal(y, expected)


def test_the_gradient_through_a_complex_dtype_keyword_agrees_with_finite_differences():
    x = np.array([0.5, -2.0, 1.5])
    assert_gradient(lambda a: np.sum(np.abs(np.sqrt(a, dtype=complex)) ** 2 + np.real(np.log(a, dtype=complex))), x)
    assert_gradient(lambda a: np.sum(np.sin(a, dtype=np.float64) ** 2), np.array([0.3, -1.2]))


def test_a_dtype_keyword_without_a_loop_raises_numpy_s_error():
    with pytest.raises(TypeError, match="No loop matching the specified signature"):
        pb.gradient(lambda a: np.sum(np.sqrt(a, dtype=int)), np.array([1.0, 4.0]))


@pytest.mark.parametrize("fn", [np.fmax, np.fmin])
def test_fmax_and_fmin_give_the_gradient_to_the_operand_that_is_not_nan(fn):
    a = np.array([1.0, np.nan, 3.0, 2.0])
    b = np.array([np.nan, 2.0, 1.0, 2.0])
    ga, gb = pb.gradient(lambda a, b: np.sum(fn(a, b)), a, b)
    picked_a = np.where(np.isnan(b), 1.0, np.where(a == b, 0.5, (a > b) == (fn is np.fmax)))
    picked_a[np.isnan(a)] = 0.0
    np.testing.assert_array_equal(ga, picked_a)
    np.testing.assert_array_equal(gb, np.where(a == b, 0.5, 1.0 - picked_a))
    assert pb.gradient(lambda s: fn(s, np.nan), 2.0) == (1.0,)
    assert pb.jvp(lambda s: fn(np.nan, s), (2.0,), (1.0,))[1] == 1.0


def test_writing_a_complex_result_into_a_real_array_raises_numpy_s_error():
    x = np.array([0.5, -2.0, 1.5])

    def into_out(a):
        y = a.copy()
        np.multiply(y, 1j, out=y)
        return y

    def augmented(a, b):
        y = a.copy()
        y += b
        return y

    with pytest.raises(TypeError, match="Cannot cast ufunc 'multiply' output"):
        pb.pullback(into_out, x)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output"):
        pb.pullback(augmented, x, x + 1j)

    def unsafe(a):  # allowed when asked for, as in NumPy
        y = a.copy()
        np.add(y, 2.0, out=y, casting="unsafe")
        return y

    np.testing.assert_array_equal(pb.pullback(unsafe, x)[0], unsafe(x))
