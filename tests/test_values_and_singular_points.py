"""Values under differentiation and under pb.jit equal NumPy's, and derivatives at singular points
(singular matrices, repeated eigenvalues, NaNs, zero vectors) are finite and agree between modes.

Each test asserts the correct value, computed independently (by hand, or by NumPy without pullback).
"""
import warnings

import numpy as np
import pytest

import pullback as pb


def test_det_hessian_at_the_zero_matrix_is_not_nan():
    # det [[a, b], [c, d]] = a d - b c: its Hessian is constant, by hand
    expected = np.zeros((2, 2, 2, 2))
    expected[0, 0, 1, 1] = expected[1, 1, 0, 0] = 1.0
    expected[0, 1, 1, 0] = expected[1, 0, 0, 1] = -1.0
    np.testing.assert_allclose(pb.hessian(np.linalg.det, np.zeros((2, 2))), expected, atol=1e-12)
    # det(t T) = t^2 det T: second derivative 2 det T = -4 at t = 0, also by nested forward mode
    T = np.array([[1.0, 2.0], [3.0, 4.0]])
    d2 = pb.jvp(lambda a: pb.jvp(np.linalg.det, (a,), (T,))[1], (np.zeros((2, 2)),), (T,))[1]
    np.testing.assert_allclose(d2, 2.0 * np.linalg.det(T), atol=1e-12)


def test_det_hessian_at_a_singular_matrix_with_repeated_singular_values():
    # det diag(a, b, c) = a b c: at (1, 1, 0) the only nonzero second derivatives in the diagonal
    # entries are d2/da dc = b = 1 and d2/db dc = a = 1
    a = np.diag([1.0, 1.0, 0.0])
    h = pb.hessian(np.linalg.det, a).reshape(9, 9)[np.ix_([0, 4, 8], [0, 4, 8])]
    np.testing.assert_allclose(h, [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]], atol=1e-12)


def test_partition_with_nans_gives_numpys_value():
    x = np.array([3.0, np.nan, 1.0, 2.0, np.nan])
    expected = np.partition(x, 2)  # [1, 2, 3, nan, nan]
    np.testing.assert_array_equal(pb.pullback(lambda a: np.partition(a, 2), x)[0], expected)
    np.testing.assert_array_equal(pb.jvp(lambda a: np.partition(a, 2), (x,), (np.ones(5),))[0], expected)
    val, (g,) = pb.withgradient(lambda a: np.partition(a, 2)[0], x)
    assert val == expected[0] == 1.0
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0, 0.0, 0.0])


def test_complex_square_reciprocal_and_sqrt_powers_give_numpys_value():
    rng = np.random.default_rng(0)
    z = rng.standard_normal(200) + 1j * rng.standard_normal(200)
    for e in (2, -1, 0.5):
        expected = z ** e  # NumPy's `**` takes square / reciprocal / sqrt here
        np.testing.assert_array_equal(pb.pullback(lambda a: a ** e, z)[0], expected)
        np.testing.assert_array_equal(pb.jvp(lambda a: a ** e, (z,), (z,))[0], expected)


def test_power_of_a_numpy_scalar_gives_numpys_value():
    s = np.float64(284.27274363241656)
    expected = s ** (1 / 3)  # NumPy scalar arithmetic: 6.5752419820239245
    assert pb.withgradient(lambda t: t ** (1 / 3), s)[0] == expected
    assert pb.jvp(lambda t: t ** (1 / 3), (s,), (np.float64(1.0),))[0] == expected
    # the same through the p-norm, which ends in `sum ** (1 / p)`
    x = np.array([0.97, 0.52, 0.53, -0.36])
    for p in (3, -3):
        expected = np.linalg.norm(x, p)
        got = [pb.withgradient(lambda a: np.linalg.norm(a, p), x)[0],
               pb.jvp(lambda a: np.linalg.norm(a, p), (x,), (np.ones(4),))[0]]
        assert got == [expected, expected], (p, got, expected)


def test_vander_and_poly_give_numpys_value():
    t = np.random.default_rng(0).standard_normal(50)
    np.testing.assert_array_equal(pb.pullback(lambda a: np.vander(a, 6), t)[0], np.vander(t, 6))
    r = np.random.default_rng(1).standard_normal(6).astype(np.float32)
    np.testing.assert_array_equal(pb.pullback(np.poly, r)[0], np.poly(r))


def test_max_with_nan_agrees_in_both_modes_and_does_not_warn():
    x = np.array([3.0, np.nan, 1.0])
    t = np.array([1.0, 10.0, 100.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # np.max(x) itself does not warn
        (g,) = pb.gradient(np.max, x)
        _, dot = pb.jvp(np.max, (x,), (t,))
    np.testing.assert_array_equal(np.dot(g, t), dot)  # J t from reverse mode == forward mode


def test_jit_replay_keeps_a_reshaped_elementwise_result_of_a_transpose():
    # at the trace `a.T * 2.0` is Fortran-ordered, so its reshape is a copy; in the replay it is
    # written into a C-ordered buffer, its reshape is a view of that buffer, and the buffer must live on
    f = lambda a: (np.reshape(a.T * 2.0, (4,)), np.tanh(a * 3.0))
    x = np.arange(1.0, 5.0).reshape(2, 2)
    jf = pb.jit(f)
    jf(x)  # the trace
    k, u = jf(x)  # the replay
    np.testing.assert_array_equal(k, [2.0, 6.0, 4.0, 8.0])  # f(x)[0], by hand
    np.testing.assert_array_equal(u, np.tanh(x * 3.0))


def test_jit_hessian_of_det_of_a_reshaped_vector():
    f = lambda a: np.linalg.det(a.reshape(2, 2))  # a0 a3 - a1 a2
    expected = np.array([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, -1.0, 0.0], [0.0, -1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    h = pb.jit(lambda a: pb.hessian(f, a))
    x = np.array([1.0, 4.0, 3.0, 2.0])
    h(x)  # the trace
    np.testing.assert_allclose(h(x * 1.1), expected, atol=1e-12)  # the replay


def test_jit_gradient_of_det_replayed_at_a_singular_matrix():
    g = pb.jit(lambda a: pb.gradient(np.linalg.det, a)[0])
    g(np.eye(2))  # traced where the matrix is invertible
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    # the adjugate's transpose [[d, -c], [-b, a]], by hand, as the eager call gives
    np.testing.assert_allclose(g(singular), [[4.0, -2.0], [-2.0, 1.0]], atol=1e-12)


def test_builtin_round_of_a_python_float_rounds_as_python():
    x = 0.405  # its double is 0.40500000000000003: Python's round gives 0.41, np.round 0.4
    val, (g,) = pb.withgradient(lambda t: round(t, 2) * t, x)
    assert type(val) is float
    assert val == round(x, 2) * x == 0.41 * 0.405
    assert g == 0.41  # round(t, 2) is piecewise constant: d/dt [round(t, 2) * t] = round(t, 2)
    assert pb.jvp(lambda t: round(t, 2) * t, (x,), (1.0,)) == (round(x, 2) * x, 0.41)


def test_eigvals_of_a_diagonalisable_matrix_with_a_repeated_eigenvalue():
    # a function symmetric in the tied eigenvalues (their sum = the trace) has gradient I in reverse mode;
    # the individual eigenvalues split along a direction, so forward mode and asymmetric functions are refused
    a = np.diag([1.0, 1.0, 2.0])
    T = np.array([[1.0, 2.0, 0.0], [2.0, -1.0, 0.5], [0.0, 0.5, 3.0]])
    (g,) = pb.gradient(lambda m: np.sum(np.real(np.linalg.eigvals(m))), a)
    np.testing.assert_allclose(g, np.eye(3), atol=1e-12)
    with pytest.raises(ValueError, match="repeated eigenvalue"):
        pb.jvp(lambda m: np.sum(np.linalg.eigvals(m)), (a,), (T,))
    with pytest.raises(ValueError, match="repeated eigenvalue"):
        pb.gradient(lambda m: np.real(np.linalg.eigvals(m)[0]), a)
    with pytest.raises(ValueError, match="defective"):
        pb.gradient(lambda m: np.sum(np.real(np.linalg.eigvals(m)) ** 2), np.array([[2.0, 1.0], [0.0, 2.0]]))


def test_jit_replay_of_a_ravelled_elementwise_transpose_and_its_returned_array():
    x = np.arange(1.0, 5.0).reshape(2, 2)
    f = lambda a: np.ravel(np.exp(a.T)) + np.ravel(np.cos(a))
    jf = pb.jit(f)
    jf(x)
    np.testing.assert_allclose(jf(x), np.exp(x.T).ravel() + np.cos(x).ravel(), rtol=1e-15)
    # a result handed out is the caller's: the next call does not write into it
    g = pb.jit(lambda a: np.reshape(a.T * 2.0, (4,)))
    g(x)
    first = g(x)
    g(x + 10.0)
    np.testing.assert_array_equal(first, [2.0, 6.0, 4.0, 8.0])


def test_p_norm_at_the_zero_vector_has_a_finite_subgradient():
    # ||x||_p for p >= 1 is Lipschitz; at 0 pullback's convention (ord 1, 2, inf, as PyTorch for every p)
    # is the subgradient 0, not NaN
    for p in (3, 1.5):
        (g,) = pb.gradient(lambda a: np.linalg.norm(a, p), np.zeros(3))
        np.testing.assert_array_equal(g, np.zeros(3))
        _, dot = pb.jvp(lambda a: np.linalg.norm(a, p), (np.zeros(3),), (np.ones(3),))
        assert dot == 0.0
    # one zero row among others: only that row's gradient is at the kink
    x = np.array([[0.0, 0.0], [3.0, 4.0]])
    (g,) = pb.gradient(lambda a: np.sum(np.linalg.norm(a, 3, axis=1)), x)
    np.testing.assert_allclose(g, [[0.0, 0.0], [9.0 / 91.0 ** (2 / 3), 16.0 / 91.0 ** (2 / 3)]], rtol=1e-12)


def test_hessian_of_eigenvalues_of_a_complex_hermitian_matrix_is_not_nan():
    def f(p):  # H = [[a, b + ic], [b - ic, d]]: sum of squared eigenvalues = tr H^2 = a^2 + d^2 + 2 (b^2 + c^2)
        a, b, c, d = p[0], p[1], p[2], p[3]
        re = np.stack([np.stack([a, b]), np.stack([b, d])])
        im = np.stack([np.stack([0.0 * a, c]), np.stack([-c, 0.0 * a])])
        return np.sum(np.linalg.eigvalsh(re + 1j * im) ** 2)

    p = np.array([0.3, -1.2, 0.7, 2.0])
    np.testing.assert_allclose(f(p), p[0] ** 2 + p[3] ** 2 + 2 * (p[1] ** 2 + p[2] ** 2))
    np.testing.assert_allclose(pb.hessian(f, p), np.diag([2.0, 4.0, 4.0, 2.0]), atol=1e-10)


def test_jit_replay_raises_a_linear_algebra_error_the_code_does_not_catch():
    inverse = pb.jit(np.linalg.inv)
    inverse(np.eye(2))
    with pytest.raises(np.linalg.LinAlgError):
        inverse(np.zeros((2, 2)))
    np.testing.assert_allclose(inverse(2.0 * np.eye(2)), 0.5 * np.eye(2))


@pytest.mark.parametrize("axis", [0, 1, None])
def test_partition_with_nans_along_any_axis_is_numpys_and_gradients_follow_the_elements(axis):
    x = np.random.default_rng(3).normal(size=(4, 6))
    x[1, 2] = x[3, 0] = x[3, 5] = np.nan
    t = np.arange(24.0).reshape(4, 6)
    y, dot = pb.jvp(lambda a: np.partition(a, 2, axis=axis), (x,), (t,))
    want = np.partition(x, 2, axis=axis)
    np.testing.assert_array_equal(y, want)
    flat_x, flat_t = (x.ravel(), t.ravel()) if axis is None else (x, t)
    # each output element's tangent is the tangent of the input element it is
    for value, tangent in zip(np.ravel(want), np.ravel(dot)):
        if not np.isnan(value):
            assert tangent == flat_t[flat_x == value][0]


def test_the_power_operator_gives_numpys_value_and_np_power_its_own():
    x = np.linspace(0.1, 3.0, 7, dtype=np.float32)
    z = np.array([1.3 + 0.7j, -0.4 + 2.1j])
    for base, exponent in [(x, 0.5), (x, 2), (x, -1), (z, 2), (z, 0.5), (z, -1)]:
        y, _ = pb.jvp(lambda b: b ** exponent, (base,), (np.ones_like(base),))
        np.testing.assert_array_equal(y, base ** exponent)
        y, _ = pb.jvp(lambda b: np.power(b, exponent), (base,), (np.ones_like(base),))
        np.testing.assert_array_equal(y, np.power(base, exponent))
    g = pb.gradient(lambda b: np.sum(b ** 3.0), x)[0]
    np.testing.assert_allclose(g, 3.0 * x ** 2, rtol=1e-6)


def _program(jitted):
    (program, *_), = next(iter(jitted._cache.values()))
    return program.program if hasattr(program, "program") else program


def test_jit_plans_buffers_for_large_intermediates_the_trace_let_go_of():
    # a trace drops large dead values (keeping their shape and dtype): their layout is remembered, so a
    # long elementwise chain still writes in place
    x = np.linspace(0.1, 1.0, 100_000)
    f = pb.jit(lambda x: pb.gradient(lambda x: np.sum(np.cos(np.sin(np.tanh(x) * 0.9) + 0.1)), x)[0])
    f(x)
    np.testing.assert_allclose(f(x), pb.gradient(lambda x: np.sum(np.cos(np.sin(np.tanh(x) * 0.9) + 0.1)), x)[0])
    assert _program(f).n_in_place >= 4


def test_jit_replay_of_a_large_fortran_ordered_intermediate_let_go_of_at_the_trace():
    a = np.arange(1.0, 1.0 + 300 * 200).reshape(300, 200)

    def f(a):
        flat = np.reshape(np.sin(a.T) * 2.0, (-1,))  # F-ordered at the trace: the reshape copies
        return flat, np.tanh(a * 3.0) + np.cos(a)

    jf = pb.jit(f)
    first = jf(a)
    for scale in (1.0, 0.5, 2.0):
        got, want = jf(a * scale), f(a * scale)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(first[0], f(a)[0])  # a handed-out array is the caller's


def test_jit_hands_out_large_results_without_copying_them():
    # a large result the trace let go of is made afresh by each call: no copy to hand it out
    f = pb.jit(lambda x: np.sin(x) * 2.0)
    x = np.linspace(0.0, 1.0, 20_000)
    f(x)
    first = f(x)
    assert ".copy()" not in _program(f).source
    f(x + 1.0)
    np.testing.assert_array_equal(first, np.sin(x) * 2.0)  # and the next call leaves it alone
