"""Derivatives through the paths that give NumPy's or Python's values: ufuncs with two outputs of Python
numbers (divmod), composites whose NumPy call could write in place (copy=False), eigenvalues at repeated
and defective points, tangents of a ufunc's dtype=, warnings given once."""
import numpy as np

import pullback as pb


def test_np_divmod_of_python_float_keeps_its_derivative():
    # __array_ufunc__'s two-Python-number path hands divmod's (quotient, remainder) tuple to _as_python, which
    # returns NumPy's plain tuple: the derivative is dropped (first order, forward mode, and builtin divmod nested)
    f = lambda x: np.divmod(x, 1.5)[1] * x  # d/dx = (x mod 1.5) + x = 0.5 + 2.0 at x = 2.0
    assert pb.grad(f)(np.float64(2.0)) == 2.5  # NumPy scalar: right
    assert pb.grad(f)(2.0) == 2.5  # Python float: got 0.5
    assert pb.jvp(lambda x: np.divmod(x, 1.5)[1], (2.0,), (1.0,))[1] == 1.0  # got None
    assert pb.hessian(lambda x: divmod(x, 1.5)[1] ** 3, 2.0) == 3.0  # 6 * 0.5; got 0.0


def test_nan_to_num_copy_false_gradient_at_replaced_entries():
    # nan_to_num(v, copy=False) writes into v; the replaced NaN becomes the constant 0: derivative 0 there.
    # f = sum(y) + sum(v*v) with v (== y after the write) = [0, 1, 2]: gradient [0, 1 + 2*1, 1 + 2*2]
    def f(v):
        y = np.nan_to_num(v, copy=False)
        return np.sum(y) + np.sum(v * v)

    g = pb.grad(f)(np.array([np.nan, 1.0, 2.0]))
    np.testing.assert_array_equal(g, [0.0, 3.0, 5.0])  # got [1, 3, 5]: NumPy's call ran first and erased the NaN


def test_eigvals_at_a_defective_matrix_gives_the_right_gradient_or_raises():
    # sum(eigvals(A)**2) = trace(A @ A): its gradient is 2 A^T everywhere, also at the Jordan block
    # (the one-to-one matching of eigenvectors must not turn a defective matrix into a wrong 4 I)
    a = np.array([[2.0, 1.0], [0.0, 2.0]])
    try:
        g = pb.grad(lambda m: np.real(np.sum(np.linalg.eigvals(m) ** 2)))(a)
    except (np.linalg.LinAlgError, ValueError, ArithmeticError):
        return
    np.testing.assert_allclose(g, 2 * a.T, atol=1e-6)


def test_forward_tangent_of_python_float_ufunc_with_dtype_has_the_primal_dtype():
    y, t = pb.jvp(lambda v: np.sqrt(v, dtype=np.float32), (2.0,), (1.0,))
    assert type(y) is np.float32
    assert type(t) is np.float32  # got np.float64 (the np.float64(2.0) primal gives np.float32)


def test_ufunc_of_traced_python_float_warns_once_as_numpy():
    import warnings

    def count(run):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run()
        return sum(issubclass(w.category, RuntimeWarning) for w in caught)

    f = lambda x: np.true_divide(x, 0.0)
    assert count(lambda: f(2.0)) == 1
    assert count(lambda: pb.vjp(f, np.float64(2.0))) == 1
    assert count(lambda: pb.vjp(f, 2.0)) == 1  # got 2: the rule's division and the extra plain ufunc call


def test_builtin_divmod_of_python_floats_at_two_levels():
    # r = 3x - floor(3x / y) y; d/dy (r y) = dr/dy y + r; d/dx of that = 0 * y + 3 = 3 (x = 2, y = 1.5)
    f = lambda x: pb.grad(lambda y: divmod(x * 3, y)[1] * y)(1.5)
    assert pb.grad(f)(np.float64(2.0)) == 3.0  # NumPy scalars: right
    assert pb.grad(f)(2.0) == 3.0  # Python floats: got None


def test_imag_attribute_of_a_traced_real_number_is_a_number():
    # (3.0).imag is 0.0 and np.float32(3).imag np.float32(0.0); np.imag(x) already agrees, x.imag gives a 0-d array
    y = pb.vjp(lambda x: x.imag, np.float32(3.0))[0]
    assert type(y) is np.float32
    y = pb.vjp(lambda x: x.imag, 3.0)[0]
    assert type(y) is float and y == 0.0
