"""sum, mean, max, min, amax, amin, prod (functions and methods) against central differences in both modes
and hand derivations."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from pullback.rules import reductions
from rule_checks import check_against_numpy, dtypes, gradcheck, seeds

SETTINGS = settings(max_examples=25, deadline=None)

REDUCTIONS = {
    "sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "amax": np.amax, "amin": np.amin, "prod": np.prod,
}


def tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-7} if dtype == np.float64 else {"rtol": 2e-3, "atol": 2e-4}


@st.composite
def shape_and_axis(draw):
    """A shape and an `axis` argument for it: None, an int (maybe negative) or a tuple of distinct axes."""
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4))
    ndim = len(shape)
    if ndim == 0:
        return shape, None
    axis = draw(st.one_of(
        st.none(),
        st.integers(-ndim, ndim - 1),
        st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(
            lambda axes: tuple(a - ndim if k % 2 else a for k, a in enumerate(axes))  # mix negative spellings in
        ),
    ))
    return shape, axis


def distinct_values(rng, shape):
    """Values at least 0.01 apart, so max/min have a unique winner and central differences apply."""
    n = int(np.prod(shape))
    return (rng.permutation(n) * 0.01 + 0.5 + rng.uniform(0, 0.002, n)).reshape(shape) * rng.choice([-1.0, 1.0])


@pytest.mark.parametrize("name", REDUCTIONS)
@SETTINGS
@given(shape_axis=shape_and_axis(), keepdims=st.booleans(), dtype=dtypes, seed=seeds)
def test_reduction(name, shape_axis, keepdims, dtype, seed):
    shape, axis = shape_axis
    reduce = REDUCTIONS[name]
    rng = np.random.default_rng(seed)
    if name == "prod":
        x = rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 1.5, shape)
    else:
        x = distinct_values(rng, shape)
    x = x.astype(dtype)
    out = reduce(x, axis=axis, keepdims=keepdims)
    w = rng.normal(size=np.shape(out))
    shapes_seen = []

    def f(x):
        y = reduce(x, axis=axis, keepdims=keepdims)
        shapes_seen.append((np.shape(y), y.dtype))
        return np.sum(y * w)

    gradcheck(f, x, **tolerance(dtype))
    assert shapes_seen[0] == (np.shape(out), np.dtype(dtype))


METHODS = ["sum", "mean", "max", "min", "prod"]


@pytest.mark.parametrize("name", METHODS)
@SETTINGS
@given(shape_axis=shape_and_axis(), keepdims=st.booleans(), dtype=dtypes, seed=seeds)
def test_method(name, shape_axis, keepdims, dtype, seed):
    shape, axis = shape_axis
    rng = np.random.default_rng(seed)
    x = (distinct_values(rng, shape) if name in ("max", "min") else rng.uniform(0.5, 1.5, shape)).astype(dtype)
    w = rng.normal(size=np.shape(getattr(x, name)(axis=axis, keepdims=keepdims)))
    tol = tolerance(dtype)
    gradcheck(lambda x: np.sum(getattr(x, name)(axis=axis, keepdims=keepdims) * w), x, **tol)
    gradcheck(lambda x: getattr(x, name)(), x, **tol)  # no arguments: over everything, a scalar
    if x.ndim:
        gradcheck(lambda x: np.sum(getattr(x, name)(0) * np.sum(w)), x, **tol)  # axis positionally


# --- ties and zeros: hand-derived expectations -----------------------------------------------
def test_max_ties_share_equally():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [5.0, 0.0, 5.0]])
    (g,) = pb.gradient(lambda x: np.sum(np.max(x, axis=1) * np.array([1.0, 2.0, 3.0])), x)
    np.testing.assert_array_equal(g, [[0.0, 0.5, 0.5], [2 / 3, 2 / 3, 2 / 3], [1.5, 0.0, 1.5]])
    (g,) = pb.gradient(lambda x: np.max(x), x)
    np.testing.assert_array_equal(g, [[0, 0, 0], [0, 0, 0], [0.5, 0, 0.5]])


@pytest.mark.parametrize("reduce", [np.min, np.amin, lambda x, **kw: x.min(**kw)])
def test_min_ties_share_equally(reduce):
    x = np.array([[1.0, 1.0, 4.0, 1.0], [0.0, 2.0, 3.0, 0.5]], np.float32)
    (g,) = pb.gradient(lambda x: np.sum(reduce(x, axis=-1, keepdims=True) * np.array([[3.0], [1.0]])), x)
    np.testing.assert_array_equal(g, [[1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    assert g.dtype == np.float32
    (g,) = pb.gradient(lambda x: np.sum(reduce(x, axis=0)), x)
    np.testing.assert_array_equal(g, [[0, 1, 0, 0], [1, 0, 1, 1]])


def test_max_ties_over_a_tuple_of_axes():
    x = np.zeros((2, 2, 3))
    x[0, 1, 2] = x[1, 0, 0] = 7.0  # unique maxima in columns 0 and 2; column 1 is a four-way tie
    (g,) = pb.gradient(lambda x: np.sum(np.max(x, axis=(0, 1)) * np.array([1.0, 2.0, 4.0])), x)
    expected = np.zeros((2, 2, 3))
    expected[1, 0, 0] = 1.0  # column 0: a unique maximum
    expected[:, :, 1] = 2.0 / 4  # column 1: four zeros tie
    expected[0, 1, 2] = 4.0  # column 2: a unique maximum
    np.testing.assert_array_equal(g, expected)


def test_prod_with_one_zero():
    x = np.array([[2.0, 0.0, 3.0], [1.0, 4.0, 5.0]])
    (g,) = pb.gradient(lambda x: np.sum(np.prod(x, axis=1) * np.array([1.0, 10.0])), x)
    # Row 0: only the zero's derivative survives (2 * 3); row 1: products of the others times 10.
    np.testing.assert_array_equal(g, [[0.0, 6.0, 0.0], [200.0, 50.0, 40.0]])


def test_prod_with_two_zeros():
    x = np.array([0.0, 2.0, 0.0, 3.0])
    (g,) = pb.gradient(np.prod, x)
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0, 0.0])
    x = np.array([[0.0, 0.0], [0.0, 5.0]])
    (g,) = pb.gradient(lambda x: np.sum(np.prod(x, axis=0)), x)  # column 0 two zeros, column 1 one zero
    np.testing.assert_array_equal(g, [[0.0, 5.0], [0.0, 0.0]])


@given(shape_axis=shape_and_axis(), seed=seeds)
@SETTINGS
def test_prod_with_zeros_matches_products_of_the_others(shape_axis, seed):
    shape, axis = shape_axis
    rng = np.random.default_rng(seed)
    x = np.asarray(rng.uniform(0.5, 1.5, shape) * (rng.uniform(size=shape) > 0.3))  # some exact zeros
    w = rng.normal(size=np.shape(np.prod(x, axis=axis)))
    (g,) = pb.gradient(lambda x: np.sum(np.prod(x, axis=axis) * w), x)
    # Hand derivation, element by element: d prod / d x_i = product of the other elements of its slice.
    expected = np.zeros(shape)
    axes = tuple(range(len(shape))) if axis is None else tuple(np.atleast_1d(axis) % max(len(shape), 1))
    for i in np.ndindex(*shape):
        others = x.copy()
        others[i] = 1.0
        slice_product = np.prod(others, axis=axis, keepdims=True)
        kept = tuple(0 if k in axes else i[k] for k in range(len(shape)))
        expected[i] = slice_product[kept] * np.reshape(w, np.shape(slice_product))[kept]
    np.testing.assert_allclose(g, expected, rtol=1e-12, atol=1e-300)


def test_mean_with_integer_count_dtype_and_float32():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (g,) = pb.gradient(lambda x: np.sum(np.mean(x, axis=(0, 2)) * np.array([1.0, 2.0, 3.0])), x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.broadcast_to(np.array([1.0, 2.0, 3.0])[None, :, None] / 8, x.shape))


MASK = np.array([[True, False, True, True], [False, False, False, True], [True, True, False, False]])
X34 = np.array([[0.3, -1.2, 0.8, 2.0], [1.1, 0.4, -0.6, 0.9], [-0.2, 1.7, 0.5, -1.4]])


@pytest.mark.parametrize("call", [
    lambda x: np.sum(x, where=MASK),
    lambda x: np.sum(x, axis=1, where=MASK[0]),  # a mask that broadcasts
    lambda x: np.sum(x * x, axis=0, initial=1.5, where=MASK, keepdims=True),
    lambda x: np.sum(x, 1, None, None, False, 2.0, MASK),  # every option by position
    lambda x: np.mean(x, where=MASK),
    lambda x: np.mean(x, axis=1, where=MASK),
    lambda x: np.max(x, initial=0.5),
    lambda x: np.max(x, axis=0, initial=-5.0, where=MASK),
    lambda x: np.min(x, axis=1, initial=5.0, where=MASK, keepdims=True),
    lambda x: np.amin(x, axis=1, initial=0.0),
    lambda x: np.prod(x, axis=1, where=MASK),
    lambda x: np.prod(x, axis=0, initial=-0.5, where=MASK),
    lambda x: x.sum(axis=0, where=MASK),
    lambda x: x.max(axis=1, initial=1.0),
], ids=["sum where", "sum broadcast mask", "sum initial where keepdims", "sum positional", "mean where",
        "mean where axis", "max initial", "max initial where", "min initial where keepdims", "amin initial",
        "prod where", "prod initial where", "method sum where", "method max initial"])
def test_reductions_with_where_and_initial_match_numpy_and_central_differences(call):
    check_against_numpy(lambda x: call(x) * np.arange(1.0, np.size(call(X34)) + 1).reshape(np.shape(call(X34))), X34)
    assert np.array_equal(pb.pullback(call, X34)[0], call(X34))  # the very value NumPy computes


def test_where_and_initial_gradients_by_hand():
    x = np.array([1.0, 3.0, 2.0, 3.0])
    mask = np.array([True, False, True, True])
    (g,) = pb.gradient(lambda x: np.sum(x * x, where=mask, initial=10.0), x)
    np.testing.assert_array_equal(g, [2.0, 0.0, 4.0, 6.0])
    (g,) = pb.gradient(lambda x: np.mean(x, where=mask), x)
    np.testing.assert_array_equal(g, [1 / 3, 0.0, 1 / 3, 1 / 3])
    (g,) = pb.gradient(lambda x: np.max(x, where=mask, initial=0.0), x)  # the masked-out 3.0 ties, not chosen
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0, 1.0])
    (g,) = pb.gradient(lambda x: np.max(x, initial=5.0), x)  # initial wins: no gradient to x
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0, 0.0])
    (g,) = pb.gradient(lambda x: np.max(x, initial=3.0), x)  # two elements and initial tie: thirds
    np.testing.assert_allclose(g, [0.0, 1 / 3, 0.0, 1 / 3])
    (g,) = pb.gradient(lambda x: np.prod(x, where=mask, initial=2.0), x)  # 2 * x0 * x2 * x3
    np.testing.assert_array_equal(g, [12.0, 0.0, 6.0, 4.0])
    empty = np.array([[True, True], [False, False]])
    (g,) = pb.gradient(lambda x: np.sum(np.nan_to_num(np.mean(x, axis=1, where=empty))), np.ones((2, 2)))
    np.testing.assert_array_equal(g, [[0.5, 0.5], [0.0, 0.0]])  # an empty slice sends nothing, and no NaN


def test_a_traced_initial_by_position_gets_its_gradient():
    x, mask = np.array([1.0, 3.0, 2.0]), np.array([True, False, True])
    _, s_bar = pb.gradient(lambda x, s: np.sum(np.sum(x[None] * np.ones((2, 1)), 1, None, None, False, s) ** 2), x, 0.5)
    assert s_bar == pytest.approx(2 * (6.5 + 6.5))  # d/ds of 2 (6 + s)^2
    _, s_bar = pb.gradient(lambda x, s: np.max(x, None, None, False, s * s), x, 2.0)
    assert s_bar == pytest.approx(4.0)  # initial 4 wins: d(s^2)/ds
    _, s_bar = pb.gradient(lambda x, s: np.prod(x, None, None, None, False, s, mask), x, 3.0)
    assert s_bar == pytest.approx(2.0)  # x0 * x2
    result = pb.testing.check_gradient(lambda x, s: np.min(x, 0, None, False, s, mask), x, 1.5, modes=("rev",))
    assert result, result


def test_reductions_refuse_out_with_the_fix():
    x = np.ones(3)
    with pytest.raises(TypeError, match="out= is not supported .* assign the result instead"):
        pb.gradient(lambda x: np.sum(x, out=np.empty(())), x)
    for write_into_self in (lambda y: np.cumsum(y, out=y), lambda y: np.clip(y, 0.0, 1.0, out=y)):
        with pytest.raises(TypeError, match="assign the result instead"):
            pb.gradient(lambda x: np.sum(write_into_self(x * 1.0)), x)
    with pytest.raises(ValueError, match="does not have an identity"):  # NumPy's own error, unchanged
        pb.gradient(lambda x: np.max(x, where=np.array([True, False, True])), x)


# --- a traced `initial`, by position, by keyword, through a ufunc's reduce, in both modes and nested ----------
X3 = np.array([0.3, 1.7, -0.4])
TRACED_INITIAL = {
    "sum by position": lambda a, i: np.sum(a, None, None, None, False, i),
    "sum by keyword": lambda a, i: np.sum(a, initial=i),
    "sum keyword where": lambda a, i: np.sum(a * a, initial=i, where=np.array([True, False, True])),
    "prod by position": lambda a, i: np.prod(a, None, None, None, False, i),
    "prod by keyword": lambda a, i: np.prod(a, initial=i),
    "max by keyword": lambda a, i: np.max(a, initial=i),
    "min by position": lambda a, i: np.min(a, None, None, False, i),
    "amax keyword where": lambda a, i: np.amax(a, initial=i, where=np.array([False, True, True])),
    "add.reduce by position": lambda a, i: np.add.reduce(a, 0, None, None, False, i),
    "add.reduce keepdims": lambda a, i: np.add.reduce(a, axis=0, keepdims=True, initial=i),
    "multiply.reduce": lambda a, i: np.multiply.reduce(a, 0, None, None, False, i),
    "maximum.reduce": lambda a, i: np.maximum.reduce(a, 0, None, None, False, i),
    "sum method": lambda a, i: a.sum(initial=i),
}


@pytest.mark.parametrize("name", sorted(TRACED_INITIAL))
@pytest.mark.parametrize("initial", [2.0, 0.1])  # the extremes: initial wins, then an element does
def test_a_traced_initial_gets_its_derivative_in_both_modes(name, initial):
    f = TRACED_INITIAL[name]
    np.testing.assert_array_equal(pb.pullback(f, X3, initial)[0], f(X3, initial))  # NumPy's value
    gradcheck(lambda a, i: np.sin(f(a, i)), X3, initial)  # reverse and forward against central differences


def test_a_traced_initial_by_hand():
    ga, gi = pb.gradient(lambda a, i: np.add.reduce(a, 0, None, None, False, i), X3, 2.0)
    np.testing.assert_array_equal(ga, np.ones(3))
    assert gi == 1.0
    y, y_dot = pb.jvp(lambda a, i: np.sum(a, None, None, None, False, i), (X3, 2.0), (np.zeros(3), 1.0))
    assert y == pytest.approx(np.sum(X3) + 2.0) and y_dot == 1.0
    y, y_dot = pb.jvp(lambda a, i: np.prod(a, None, None, None, False, i), (X3, 2.0), (np.zeros(3), 1.0))
    assert y == pytest.approx(np.prod(X3) * 2.0) and y_dot == pytest.approx(np.prod(X3))
    _, y_dot = pb.jvp(lambda a, i: np.max(a, initial=i), (X3, 2.0), (np.ones(3), 0.5))
    assert y_dot == 0.5  # initial 2.0 wins


def test_hessian_through_a_traced_initial():
    v = np.array([0.3, 1.7, -0.4, 2.0])
    L = lambda v: np.sum(v[:3], None, None, None, False, v[3]) ** 2  # noqa: E731
    np.testing.assert_allclose(pb.hessian(L, v), 2.0 * np.ones((4, 4)), rtol=1e-12)
    P = lambda v: np.prod(v[:3], initial=v[3])  # noqa: E731
    H = pb.hessian(P, v)
    expected = np.array([[0.0 if j == k else np.prod(np.delete(v, [j, k])) for k in range(4)] for j in range(4)])
    np.testing.assert_allclose(H, expected, rtol=1e-12)
    second_order_of_both = lambda a, i: np.max(a * a, initial=i) + np.sum(a, initial=i * i)  # noqa: E731
    gradcheck(second_order_of_both, X3, 2.0, order=2, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("reduce", [np.sum, np.prod, np.max, np.min])
def test_a_mixed_second_derivative_where_initial_is_traced_only_outside(reduce):
    # Inside, `a` is differentiated and `initial` is an outer value: the rule meets a plain `a` with a traced initial.
    weights = np.array([1.0, 2.0, 3.0])

    def inner_gradient(i):
        (g,) = pb.gradient(lambda a: np.sin(reduce(a * a, initial=i)), X3)
        return np.sum(g * weights)

    for i in (2.5, 0.05):
        (d,) = pb.gradient(inner_gradient, i)
        assert d == pytest.approx((inner_gradient(i + 1e-6) - inner_gradient(i - 1e-6)) / 2e-6, rel=1e-6, abs=1e-8)
        _, t = pb.jvp(inner_gradient, (i,), (1.0,))
        assert t == pytest.approx(d, rel=1e-12)


# --- a 0-d array reduced along axis 0 or -1, which NumPy's ufunc reductions accept -----------------------------
@pytest.mark.parametrize("name, f, derivative", [
    ("max", lambda x: np.max(x, axis=0), 1.0),
    ("min", lambda x: np.min(x, -1), 1.0),
    ("sum keepdims", lambda x: np.sum(x, 0, keepdims=True), 1.0),
    ("prod", lambda x: np.prod(x, -1), 1.0),
    ("max initial", lambda x: np.max(x, 0, initial=2.0), 0.0),
    ("nanmax", lambda x: np.nanmax(x, 0), 1.0),
    ("nanmin", lambda x: np.nanmin(x, -1), 1.0),
    ("nanvar", lambda x: np.nanvar(x, 0), 0.0),
    ("maximum.reduce", lambda x: np.maximum.reduce(x, 0), 1.0),
    ("ptp", lambda x: np.ptp(x, 0), 0.0),
])
def test_a_0d_array_along_axis_0_as_numpy(name, f, derivative):
    z = np.array(1.5)
    val, (g,) = pb.withgradient(f, z)
    assert val == f(z) and np.shape(val) == np.shape(f(z))
    assert g == derivative
    _, t = pb.jvp(f, (z,), (np.array(1.0),))
    assert t == derivative
    with pytest.raises(np.exceptions.AxisError):  # NumPy's own refusal of other axes, unchanged
        pb.gradient(lambda x: np.max(x, axis=1), z)


def test_argmax_is_plain():
    x = np.array([0.3, 2.0, -1.0])
    seen = []

    def f(x):
        seen.append(np.argmax(x))
        seen.append(x.argmin())
        return x[np.argmax(x)] * 2.0

    (g,) = pb.gradient(f, x)
    assert seen[:2] == [1, 2] and all(type(s) is np.intp or isinstance(s, np.integer) for s in seen[:2])
    np.testing.assert_array_equal(g, [0.0, 2.0, 0.0])


RULES = [reductions.sum_rule, reductions.mean_rule, reductions.max_rule, reductions.min_rule, reductions.prod_rule]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
@pytest.mark.parametrize("axis", [None, 0, (0, 1)])
@pytest.mark.parametrize("with_zero", [False, True])
def test_rules_compute_in_float32(rule, axis, with_zero):
    """Called directly (before the engine casts anything), each reduction's cotangent stays float32."""
    x = np.arange(1.0, 13.0, dtype=np.float32).reshape(2, 3, 2)
    if with_zero:
        x[0, 1, 1] = 0.0
    y, back = rule(x, axis=axis)
    assert y.dtype == np.float32
    (ct,) = back(np.ones_like(y))
    assert pb.unthunk(ct).dtype == np.float32


@pytest.mark.parametrize("reduce", [np.max, np.min, np.amax, np.amin, np.nanmax, np.nanmin, np.median, np.nanmedian,
                                    lambda a: a.max(), lambda a: np.linalg.norm(a, np.inf)])
def test_a_whole_array_extreme_is_a_numpy_scalar_as_without_differentiation(reduce):
    # code that branches on np.isscalar (or hashes the value) must take the same branch
    x = np.array([1.0, 3.0, 2.0])
    seen = []

    def f(a):
        m = reduce(a)
        seen.append((type(stop(m)), np.isscalar(m)))
        return m * 2.0 if np.isscalar(m) else np.sum(a)

    val, (g,) = pb.withgradient(f, x)
    assert seen[0] == (type(reduce(x)), True)
    assert type(val) is type(f(x)) and val == f(x)
    expected = np.zeros(3)
    expected[np.argwhere(x == reduce(x))[0, 0]] = 2.0
    np.testing.assert_array_equal(g, expected)


def stop(v):
    return pb.stop_gradient(v)
