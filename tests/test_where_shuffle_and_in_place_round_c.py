"""Round C: ufuncs with out= and where=, NumPy's shuffle of a traced 2-d array, random draws into or along
a traced array, in-place writes to a 0-d array, a scalar added at a repeated index, jvp's conversion message."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient


def central_difference(f, x):
    """The gradient of scalar `f` at float array `x`, by float64 central differences."""
    return numerical_gradient(f, np.array(x, dtype=np.float64))[0]


def jit_gradient_twice(f, first, second):
    """pb.jit of the gradient, called with `first` then `second` (tuples of arguments): both gradients, and
    checks that the second call replayed the first trace."""
    jitted = pb.jit(lambda *a: pb.gradient(f, *a))
    results = [jitted(*[np.array(a, copy=True) for a in args]) for args in (first, second)]
    assert jitted.cache_info().traces == 1
    return results


# --- 1. ufunc(..., out=, where=): NumPy's value, computed where the mask holds; zero gradient elsewhere ---------

def safe_div(a, b):
    out = np.zeros_like(a)
    np.divide(a, b, out=out, where=b != 0)
    return np.sum(out)


def test_safe_division_gradient_is_zero_where_the_mask_is_false():
    a, b = np.array([1.0, 2.0]), np.array([0.0, 4.0])
    value, (ga, gb) = pb.withgradient(safe_div, a, b)
    assert value == safe_div(a.copy(), b.copy()) == 0.5
    np.testing.assert_array_equal(ga, [0.0, 0.25])  # d(a/b)/da = 1/b where b != 0
    np.testing.assert_array_equal(gb, [0.0, -0.125])  # -a/b**2
    _, tangent = pb.jvp(safe_div, (a, b), (np.ones(2), np.ones(2)))
    assert tangent == 0.25 - 0.125


def test_safe_division_under_jit_replays_with_another_mask():
    (ga1, gb1), (ga2, gb2) = jit_gradient_twice(safe_div, ([1.0, 2.0], [0.0, 4.0]), ([3.0, 1.0], [2.0, 0.0]))
    np.testing.assert_array_equal(ga1, [0.0, 0.25])
    np.testing.assert_array_equal(gb1, [0.0, -0.125])
    np.testing.assert_array_equal(ga2, [0.5, 0.0])
    np.testing.assert_array_equal(gb2, [-0.75, 0.0])


def test_masked_ufuncs_match_central_differences_where_the_mask_is_stable():
    def sqrt_into(x):
        y = np.zeros_like(x)
        np.sqrt(x, out=y, where=x > 0)
        return np.sum(y * np.arange(1.0, 5.0))

    def log_into(x):
        return np.sum(np.log(x, out=np.full_like(x, -1.0), where=x > 0) ** 2)

    def divide_by_b(x):  # the mask does not move with x; a/b is infinite-sloped in b where b == 0
        b = x[:2] - x[2:]
        return np.sum(np.divide(x[:2], b, out=x[2:] * 3.0, where=np.abs(b) > 0.5))

    cases = [(sqrt_into, np.array([-1.0, -0.5, 4.0, 9.0]), [0.0, 0.0, 3 * 0.25, 4 / 6]),
             (log_into, np.array([-2.0, -0.5, np.e, 2.0]), [0.0, 0.0, 2 / np.e, 2 * np.log(2.0) / 2]),
             (divide_by_b, np.array([1.0, 3.0, 1.0, 1.0]), None)]
    for f, x, exact in cases:
        expected = central_difference(f, x)
        (g,) = pb.gradient(f, x)
        assert np.all(np.isfinite(g)), f.__name__
        np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-6, err_msg=f.__name__)
        if exact is not None:
            np.testing.assert_allclose(g, exact, rtol=1e-12, err_msg=f.__name__)
        _, tangent = pb.jvp(f, (x,), (np.arange(1.0, 5.0),))
        np.testing.assert_allclose(tangent, expected @ np.arange(1.0, 5.0), rtol=1e-6, err_msg=f.__name__)
        (g1,), (g2,) = jit_gradient_twice(f, (x,), (x[::-1].copy(),))
        np.testing.assert_array_equal(g1, g)
        np.testing.assert_allclose(g2, central_difference(f, x[::-1]), rtol=1e-6, atol=1e-6, err_msg=f.__name__)


def test_normalising_rows_with_a_zero_row():
    def first_column(X):
        n = np.linalg.norm(X, axis=1, keepdims=True)
        Y = np.zeros_like(X)
        np.divide(X, n, out=Y, where=n > 0)
        return np.sum(Y[:, 0])

    X = np.array([[0.0, 0.0], [3.0, 4.0]])
    (g,) = pb.gradient(first_column, X)
    # d(x0 / |x|)/dx = (1/|x| - x0**2/|x|**3, -x0 x1/|x|**3) on the second row; the first is never divided
    np.testing.assert_allclose(g, [[0.0, 0.0], [1 / 5 - 9 / 125, -12 / 125]], rtol=1e-12)
    (g1,), (g2,) = jit_gradient_twice(first_column, (X,), (X[::-1].copy(),))
    np.testing.assert_array_equal(g1, g)
    np.testing.assert_allclose(g2, g[::-1], rtol=1e-12)


def test_masked_values_and_errors_are_numpys():
    a, b = np.array([1.0, 2.0, -3.0]), np.array([0.0, 4.0, 0.0])
    for errors in ("raise", "warn"):
        with np.errstate(all=errors), warnings.catch_warnings():
            warnings.simplefilter("error")
            value, (ga, gb) = pb.withgradient(safe_div, a, b)
            assert value == safe_div(a.copy(), b.copy())
            np.testing.assert_array_equal(ga, [0.0, 0.25, 0.0])
            value, (ga, gb) = pb.withgradient(safe_div, a, np.zeros(3))  # nothing divided: nothing depends on a, b
            assert value == 0.0 and ga is None and gb is None

    def into32(x):
        out = np.zeros_like(x, dtype=np.float32) + 7.0  # a traced float32 buffer
        return np.exp(x, out=out, where=np.array([True, False, True]))

    x = np.array([0.5, 800.0, -1.0])
    with np.errstate(over="raise"):
        value = pb.withgradient(lambda x: np.sum(into32(x)), x).val  # 800 is never exponentiated
    expected = into32(x.copy())
    assert value == np.sum(expected)
    y, _ = pb.pullback(into32, x)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, expected)
    with pytest.raises(FloatingPointError), np.errstate(divide="raise"):
        np.divide(np.ones(2), np.zeros(2), out=np.zeros(2), where=np.array([True, False]))
    with pytest.raises(FloatingPointError), np.errstate(divide="raise"):
        pb.gradient(lambda a: np.sum(np.divide(a, np.zeros(2), out=np.zeros_like(a), where=np.array([True, False]))),
                    np.ones(2))


def test_masked_divmod_into_two_outputs():
    def remainder(a, b):
        q, r = np.zeros_like(a), np.zeros_like(a)
        np.divmod(a, b, out=(q, r), where=b != 0)
        return np.sum(r * np.arange(1.0, 4.0))

    a, b = np.array([5.5, 7.0, 2.5]), np.array([2.0, 0.0, -1.5])
    ga, gb = pb.gradient(remainder, a, b)
    # r = a - b floor(a/b): dr/da = 1, dr/db = -floor(a/b), where b != 0
    np.testing.assert_array_equal(ga, [1.0, 0.0, 3.0])
    np.testing.assert_array_equal(gb, [-2.0, 0.0, -3.0 * np.floor(2.5 / -1.5)])


def test_hessian_of_masked_code_matches_finite_differences():
    b = np.array([0.0, 2.0, -4.0])

    def cubes(x):
        return np.sum(np.divide(x ** 3, b, out=np.zeros_like(x), where=b != 0))

    def powers(x):
        y = np.zeros_like(x)
        np.sqrt(x, out=y, where=x > 0)
        return np.sum(y * x * x)  # x ** 2.5 where x > 0

    x = np.array([1.5, -2.0, 3.0])
    np.testing.assert_allclose(pb.hessian(cubes, x), np.diag(6 * x / np.where(b != 0, b, np.inf)), rtol=1e-12)
    x = np.array([4.0, -1.0, -0.5])
    H = pb.hessian(powers, x)
    np.testing.assert_allclose(H, np.diag([2.5 * 1.5 * 4.0 ** 0.5, 0.0, 0.0]), rtol=1e-12)
    numeric = np.stack([central_difference(lambda v: pb.gradient(powers, v)[0][k], x) for k in range(3)])
    np.testing.assert_allclose(H, numeric, rtol=1e-5, atol=1e-6)
    # reverse over reverse
    rows = np.stack([pb.gradient(lambda v: pb.gradient(powers, v)[0][k], x)[0] for k in range(3)])
    np.testing.assert_allclose(rows, H, rtol=1e-12)
    rows = np.stack([pb.gradient(lambda v: pb.gradient(cubes, v)[0][k], np.array([1.5, -2.0, 3.0]))[0]
                     for k in range(3)])
    np.testing.assert_allclose(rows, pb.hessian(cubes, np.array([1.5, -2.0, 3.0])), rtol=1e-12)


def test_masked_write_broadcasts_and_keeps_the_old_values_gradient():
    def f(x):
        out = np.reshape(x * 2.0, (2, 3))
        np.log(x[:3], out=out, where=np.array([True, False, True]))
        return np.sum(out * np.arange(6.0).reshape(2, 3))

    x = np.array([0.5, -1.0, 2.0, 1.0, 3.0, 4.0])
    (g,) = pb.gradient(f, x)
    np.testing.assert_allclose(g, central_difference(f, x), rtol=1e-6, atol=1e-6)
    assert f(x.copy()) == pb.withgradient(f, x).val


# --- 2. NumPy's shuffle of a traced 2-d array permutes its rows --------------------------------------------------

W = np.arange(12.0).reshape(4, 3) ** 1.5


def _shuffled(make):
    def f(x):
        y = x * 1.0
        make().shuffle(y)
        return y
    return f


SHUFFLES = {"Generator": lambda: np.random.default_rng(15), "RandomState": lambda: np.random.RandomState(15)}


@pytest.mark.parametrize("make", SHUFFLES.values(), ids=SHUFFLES.keys())
def test_shuffle_of_a_traced_matrix_permutes_its_rows_as_numpy_does(make):
    x = np.arange(12.0).reshape(4, 3)
    plain_rng, traced_rng = make(), make()
    y = x * 1.0
    plain_rng.shuffle(y)
    assert len({tuple(r) for r in y}) == 4

    def loss(x, rng):
        z = x * 1.0
        rng.shuffle(z)
        return np.sum(z * W)

    value, (g, _) = pb.withgradient(loss, x, traced_rng)
    assert value == np.sum(y * W)
    assert plain_rng.random() == traced_rng.random()  # the generators drew alike
    order = [int(r[0]) // 3 for r in y]  # y = x[order]
    expected = np.zeros_like(W)
    expected[order] = W
    np.testing.assert_array_equal(g, expected)
    fixed = lambda x: np.sum(_shuffled(make)(x) * W)  # noqa: E731
    np.testing.assert_allclose(pb.gradient(fixed, x)[0], central_difference(fixed, x), rtol=1e-6)
    _, tangent = pb.jvp(_shuffled(make), (x,), (x + 1.0,))
    np.testing.assert_array_equal(tangent, (x + 1.0)[order])
    np.testing.assert_array_equal(pb.jvp(_shuffled(make), (x,), (x,))[0], y)
    g1, g2 = jit_gradient_twice(fixed, (x,), (x * 2.0,))
    np.testing.assert_array_equal(g1[0], expected)
    np.testing.assert_array_equal(g2[0], expected)


def test_numpy_gives_no_shuffle_warning_for_a_traced_array():
    # in a fresh process: pullback's filter is set on import (pytest imports test modules inside catch_warnings)
    script = """if True:
        import warnings, numpy as np, pullback as pb
        def f(x, rng):
            y = x * 1.0
            rng.shuffle(y)
            return np.sum(y)
        with warnings.catch_warnings(record=True) as caught:
            for rng in (np.random.default_rng(0), np.random.RandomState(0)):
                pb.gradient(f, np.ones((3, 2)), rng)
                pb.jvp(lambda x: f(x, rng), (np.ones((3, 2)),), (np.ones((3, 2)),))
        print(len(caught))
        warnings.filters[:] = [w for w in warnings.filters if "shuffling" not in str(w[1])]
        with warnings.catch_warnings(record=True) as caught:
            pb.gradient(f, np.ones((3, 2)), np.random.default_rng(0))
        print(len(caught))  # NumPy's warning, which the filter kept away
    """
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["0", "1"]


def test_legacy_global_shuffle_and_the_one_dimensional_case():
    x = np.arange(12.0).reshape(4, 3)

    def loss(x):
        y = x * 1.0
        np.random.shuffle(y)
        return np.sum(y * W)

    np.random.seed(3)
    expected_value = loss(x.copy())
    after = np.random.random()
    np.random.seed(3)
    value, (g,) = pb.withgradient(loss, x)
    assert value == expected_value and np.random.random() == after
    np.random.seed(3)
    np.testing.assert_allclose(g, central_difference(lambda v: (np.random.seed(3), loss(v))[1], x), rtol=1e-6)

    def flat(v):
        y = v * 1.0
        np.random.default_rng(4).shuffle(y)
        return np.sum(y * np.arange(1.0, 7.0))

    v = np.arange(6.0) ** 2
    assert pb.withgradient(flat, v).val == flat(v.copy())
    np.testing.assert_allclose(pb.gradient(flat, v)[0], central_difference(flat, v), rtol=1e-6)


def test_a_python_swap_of_rows_keeps_numpys_view_semantics():
    def swap(x):
        y = x * 1.0
        y[0], y[1] = y[1], y[0]  # y[1] is a view: it shows the write into y[0], so both rows end as x[1]
        return y

    x = np.arange(6.0).reshape(3, 2)
    expected = swap(x.copy())
    np.testing.assert_array_equal(expected[0], expected[1])
    y, back = pb.pullback(swap, x)
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(back(np.ones((3, 2)))[0], [[0.0, 0.0], [2.0, 2.0], [1.0, 1.0]])


# --- 3. random draws along or into a traced array name the fix ---------------------------------------------------

def test_shuffle_along_another_axis_names_the_permutation_fix():
    def f(x):
        y = x * 1.0
        np.random.default_rng(0).shuffle(y, axis=1)
        return np.sum(y)

    x = np.ones((2, 3))
    with pytest.raises(NotImplementedError, match=r"rng\.permutation"):
        pb.jvp(f, (x,), (x,))
    with pytest.raises(NotImplementedError, match=r"rng\.permutation"):
        pb.gradient(f, x)
    # the suggested fix draws the same permutation
    a, b = np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(2, 3)
    first, second = np.random.default_rng(0), np.random.default_rng(0)
    first.shuffle(a, axis=1)
    np.testing.assert_array_equal(a, b[:, second.permutation(b.shape[1])])
    assert first.random() == second.random()


def test_random_draw_into_a_traced_array_names_the_fix():
    def f(x):
        v = np.random.default_rng(0).random(out=np.zeros_like(x))
        return np.sum(v * x)

    for call in (lambda: pb.gradient(f, np.ones(3)), lambda: pb.jvp(f, (np.ones(3),), (np.ones(3),))):
        with pytest.raises(ValueError, match=r"rng\.random\(x\.shape\)"):
            call()


# --- 4. an in-place operator keeps a 0-d array a 0-d array --------------------------------------------------------

def _times_three(x):
    y = x.copy()
    y *= 3.0
    return y


def _plus_one(x):
    x += 1.0
    return x


def _squared(x):
    y = x.copy()
    y **= 2.0
    return y


def _minus_square(x):
    y = x.copy()
    y -= x * x
    return y


def _through_a_view(x):
    v = x[...]
    v *= x
    return x * 1.0


def _scalar_minus(x):
    y = x * 2.0  # a NumPy scalar, as NumPy gives: `-=` rebinds the name
    y -= x
    return y


ZERO_D = {
    "y = x.copy(); y *= 3": _times_three,
    "x += 1": _plus_one,
    "y **= 2": _squared,
    "y -= x * x": _minus_square,
    "x[...] *= x, a view": _through_a_view,
    "np.exp(x, out=x.copy())": lambda x: np.exp(x, out=x.copy()),
    "np.multiply(x, x, out=x)": lambda x: np.multiply(x, x, out=x),
    "y = x * 2 (a NumPy scalar); y -= x": _scalar_minus,
}


@pytest.mark.parametrize("f", ZERO_D.values(), ids=ZERO_D.keys())
def test_in_place_operators_keep_a_zero_d_array(f):
    x = np.array(1.5)
    expected = f(x.copy())
    value, (g,) = pb.withgradient(f, x)
    assert type(value) is type(expected) and value == expected
    np.testing.assert_allclose(g, central_difference(lambda v: f(v.copy()), x), rtol=1e-6)
    y, tangent = pb.jvp(f, (x,), (np.array(1.0),))
    assert type(y) is type(expected) and type(tangent) is type(expected)
    g1, g2 = jit_gradient_twice(f, (x,), (np.array(2.5),))
    np.testing.assert_allclose(g2[0], central_difference(lambda v: f(v.copy()), np.array(2.5)), rtol=1e-6)


# --- 5. a scalar added at a repeated index -------------------------------------------------------------------------

def test_a_scalar_added_at_a_repeated_index_is_added_once_per_element():
    def f(x):
        y = x * 1.0
        y[[0, 2, 0]] += 2.0 * x[1]
        return y

    x = np.array([1.0, 2.0, 3.0])
    expected = f(x.copy())
    np.testing.assert_array_equal(expected, [5.0, 2.0, 7.0])
    y, back = pb.pullback(f, x)
    np.testing.assert_array_equal(y, expected)
    c = np.array([1.0, 10.0, 100.0])
    np.testing.assert_allclose(back(c)[0], central_difference(lambda v: np.sum(f(v) * c), x), rtol=1e-6)
    _, tangent = pb.jvp(f, (x,), (np.array([1.0, 1.0, 1.0]),))
    np.testing.assert_allclose(tangent, [3.0, 1.0, 3.0])
    loss = lambda x: np.sum(f(x) * c)  # noqa: E731
    g1, g2 = jit_gradient_twice(loss, (x,), (x * 3.0,))
    np.testing.assert_allclose(g1[0], [1.0, 10.0 + 2 * 101.0, 100.0])
    np.testing.assert_allclose(g2[0], g1[0])


def test_values_differing_at_a_repeated_index_are_still_refused():
    def f(x):
        y = x * 1.0
        y[[0, 2, 0]] += x  # NumPy keeps one of y[0] + x[0] and y[0] + x[2]
        return y

    with pytest.raises(ValueError, match="more than once") as refusal:
        pb.gradient(lambda x: np.sum(f(x)), np.array([1.0, 2.0, 3.0]))
    assert "np.add.at(y, index, v)" in str(refusal.value) and "+= 1 does" not in str(refusal.value)

    def g(x):
        y = x * 1.0
        t = x * 1.0
        t += 1.0  # a number, but t is not y[index]: its elements differ
        y[[0, 2, 0]] = t
        return y

    with pytest.raises(ValueError, match="more than once"):
        pb.gradient(lambda x: np.sum(g(x)), np.array([1.0, 2.0, 3.0]))


# --- 6. jvp of a traced scalar written into a plain array -----------------------------------------------------------

def test_jvp_of_a_write_into_a_plain_array_names_the_fix():
    def f(b):
        u = np.zeros(3)
        u[1] = 0.5 * b[0]
        return np.sum(u)

    with pytest.raises(TypeError, match="np.zeros_like"):
        pb.jvp(f, (np.ones(2),), (np.ones(2),))
    with pytest.raises(TypeError, match="np.zeros_like"):
        pb.hessian(f, np.ones(2))


# --- 7. a wrapped message ending with a full stop ----------------------------------------------------------------------

def test_mixed_arrays_message_has_one_full_stop():
    da = pytest.importorskip("dask.array")
    from pullback._errors import mixed_arrays_error
    from pullback._registry import REVERSE_RULES

    error = mixed_arrays_error(REVERSE_RULES[np.add], (np.ones(2), da.ones(3)), ValueError("shapes differ."))
    assert "differ.." not in str(error) and "differ. " in str(error)
    error = mixed_arrays_error(REVERSE_RULES[np.add], (np.ones(2), da.ones(3)), ValueError("shapes differ"))
    assert "shapes differ. " in str(error)
