"""Constructs that once failed with a bare message, now supported or refused naming the fix.

- `y.flat = v` on a traced array is the write `y.flat[:] = v`;
- `x.shape = s` on a traced array is refused (in-place reshaping), naming `np.reshape`;
- `out=` given to `np.dot`, `np.take`, `np.concatenate`, `np.stack`, `np.einsum`, `np.compress`
  and `np.choose` computes the result and writes it into `out` as an in-place write (the gradient
  agrees with central differences, also when `out` is a view of an argument); a plain NumPy `out`
  that would lose the gradient, and `out=` of the functions that do not take it, are refused with
  messages naming the fix;
- NumPy's array subclasses (np.matrix, made by np.asmatrix too, and masked arrays) meeting a traced value
  are refused naming the subclass.
"""

import re

import numpy as np
import pytest

import pullback as pb

A = np.array([[1.0, 2.0, -1.0], [0.5, -3.0, 2.0]])
X = np.array([0.3, -1.2, 2.0, 0.7, -0.4, 1.5])


def central_differences(f, x, eps=1e-6):
    """d f / d x by central differences; `f` gets a fresh copy each time (it may write into it)."""
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        g.flat[i] = (f((x + e).copy()) - f((x - e).copy())) / (2 * eps)
    return g


def assert_gradient(f, x):
    """pb.gradient of `f` at `x` gives the value `f` gives on plain arrays and the central differences."""
    before = x.copy()
    val, (g,) = pb.withgradient(f, x)
    np.testing.assert_array_equal(x, before)  # the argument is never written
    assert val == f(x.copy())
    np.testing.assert_allclose(g, central_differences(f, x), rtol=1e-6, atol=1e-8)
    return g


# --- y.flat = v ----------------------------------------------------------------------------------
def test_assigning_flat_writes_every_element():
    def f(x):
        y = x * 2.0
        y.flat = x[::-1] ** 2
        return np.sum(y * x)

    assert_gradient(f, X)


def test_assigning_flat_repeats_the_value_as_numpy_does():
    def f(x):
        y = np.reshape(x * 1.0, (2, 3))
        y.flat = x[:2]  # cycles: x0, x1, x0, x1, ...
        return np.sum(y * np.arange(1.0, 7.0).reshape(2, 3))

    g = assert_gradient(f, X)
    np.testing.assert_allclose(g, [1.0 + 3.0 + 5.0, 2.0 + 4.0 + 6.0, 0.0, 0.0, 0.0, 0.0])


def test_assigning_flat_on_an_argument_and_through_a_view():
    def f(x):
        x.flat = 3.0 * x  # the argument itself (pullback writes into its copy)
        v = x[1:4]
        v.flat = np.sin(x[:3])  # a view: the write reaches x
        return np.sum(x ** 2)

    assert_gradient(f, X)


# --- x.shape = s ---------------------------------------------------------------------------------
def test_setting_shape_names_np_reshape():
    def f(x):
        y = x * 2.0
        y.shape = (2, 3)
        return np.sum(y)

    with pytest.raises(AttributeError) as found:
        pb.gradient(f, X)
    message = str(found.value)
    assert "x.shape = (2, 3) reshapes an array in place" in message
    assert "Write x = np.reshape(x, (2, 3))" in message


def test_setting_the_shape_an_array_has_is_allowed():
    def f(x):
        y = x * 2.0
        y.shape = (6,)
        y.shape = -1
        return np.sum(y * x)

    assert_gradient(f, X)


def test_setting_a_shape_numpy_refuses_gives_numpys_error():
    def f(x):
        y = x * 2.0
        y.shape = (4,)
        return np.sum(y)

    with pytest.raises(ValueError, match=r"cannot reshape array of size 6 into shape \(4,\)"):
        pb.gradient(f, X)


# --- out= written into a traced array ----------------------------------------------------------
def dot_into_zeros_like(x):
    z = np.zeros_like(x[:2])
    r = np.dot(A, x[:3], out=z)
    assert r is z  # NumPy returns out
    return np.sum(z ** 2) + np.sum(x[3:] * np.tanh(r[0]))


def dot_into_view_of_argument(x):
    np.dot(A, np.sin(x[:3]), out=x[3:5])  # x[3:5] is a view of x: the write reaches x
    return np.sum(x ** 3)


def dot_vectors_into_0d(x):
    z = np.zeros_like(x[0])
    np.dot(x[:3], x[3:], out=z)
    return z * x[0]


def take_into_view(x):
    y = x * 1.0
    np.take(y, [5, 4, 0], out=y[1:4])
    return np.sum(y * np.arange(1.0, 7.0) * y)


def take_modes_axis(x):
    m = np.reshape(x, (2, 3))
    z = np.zeros_like(m)
    np.take(m, [2, 0, 7], axis=1, out=z, mode="wrap")
    return np.sum(z * m)


def concatenate_into_traced(x):
    z = np.zeros_like(np.concatenate([x, x[:2]]))
    np.concatenate([x ** 2, np.cos(x[:2])], out=z)
    return np.sum(z * np.arange(8.0))


def concatenate_into_argument(x):
    m = np.reshape(x, (2, 3))
    np.concatenate([m[:, :1] * 2.0, m[:, 1:] ** 2], axis=1, out=m)  # m is a view of the argument x
    return np.sum(x * x[::-1])


def stack_into_traced(x):
    z = np.zeros_like(np.reshape(x, (2, 3)))
    np.stack([x[:3], np.exp(x[3:])], out=z)
    return np.sum(z * A)


def einsum_into_traced(x):
    z = np.zeros_like(x[:2])
    np.einsum("ij,j->i", A, x[:3] * x[3:], out=z)
    return np.sum(np.sin(z))


def compress_into_traced(x):
    z = np.zeros_like(x[:3])
    np.compress([True, False, True, False, False, True], x, out=z)
    return np.sum(z ** 3)


def choose_into_traced(x):
    z = np.zeros_like(x[:3])
    np.choose([0, 1, 0], [x[:3], x[3:] ** 2], out=z)
    return np.sum(z * np.array([1.0, 2.0, 3.0]) * z)


def methods_with_out(x):
    z = np.zeros_like(x[:2])
    np.reshape(x, (2, 3)).dot(x[:3], out=z)
    w = np.zeros_like(x[:2])
    x.take([1, 3], out=w)
    return np.sum(z * w)


def constant_into_traced(x):
    z = x[:2] * 1.0
    np.dot(A, np.array([1.0, 2.0, 3.0]), out=z)  # nothing traced reaches the result: z becomes a constant
    return np.sum(z * x[:2]) + np.sum(x)


CASES = [dot_into_zeros_like, dot_into_view_of_argument, dot_vectors_into_0d, take_into_view, take_modes_axis,
         concatenate_into_traced, concatenate_into_argument, stack_into_traced, einsum_into_traced,
         compress_into_traced, choose_into_traced, methods_with_out, constant_into_traced]


@pytest.mark.parametrize("f", CASES, ids=[f.__name__ for f in CASES])
def test_out_writes_into_a_traced_array(f):
    assert_gradient(f, X)


@pytest.mark.parametrize("f", [dot_into_zeros_like, take_into_view, concatenate_into_traced, einsum_into_traced],
                         ids=["dot", "take", "concatenate", "einsum"])
def test_out_in_forward_mode(f):
    t = np.array([1.0, -0.5, 0.25, 2.0, 0.0, 1.5])
    y, y_dot = pb.jvp(f, (X,), (t,))
    assert y == f(X.copy())
    np.testing.assert_allclose(y_dot, central_differences(f, X) @ t, rtol=1e-6, atol=1e-8)


def test_out_of_a_narrower_dtype_casts_as_numpy_does():
    def f(x):
        z = np.zeros_like(x[:3], dtype=np.float32)
        np.concatenate([x[:1], x[4:]], out=z)  # same_kind: float64 into float32
        return np.sum(z * z)

    val, (g,) = pb.withgradient(f, X)
    assert val.dtype == np.float32 and val == f(X.copy())
    np.testing.assert_allclose(g, [2 * X[0], 0, 0, 0, 2 * X[4], 2 * X[5]], rtol=1e-6)


# --- out= that NumPy refuses: NumPy's own error -------------------------------------------------
def numpy_error(call):
    with pytest.raises((TypeError, ValueError)) as found:
        call()
    return type(found.value), str(found.value)


@pytest.mark.parametrize("name, traced, plain", [
    ("dot shape", lambda x: np.dot(A, x[:3], out=np.zeros_like(x[:3])), lambda: np.dot(A, X[:3], out=np.zeros(3))),
    ("dot dtype", lambda x: np.dot(A, x[:3], out=np.zeros_like(x[:2], dtype=np.float32)),
     lambda: np.dot(A, X[:3], out=np.zeros(2, np.float32))),
    ("dot layout", lambda x: np.dot(A, x[:3], out=np.zeros_like(x[:4])[::2]),
     lambda: np.dot(A, X[:3], out=np.zeros(4)[::2])),
    ("take shape", lambda x: np.take(x, [0, 1], out=np.zeros_like(x[:3])),
     lambda: np.take(X, [0, 1], out=np.zeros(3))),
    ("concatenate shape", lambda x: np.concatenate([x, x], out=np.zeros_like(x)),
     lambda: np.concatenate([X, X], out=np.zeros(6))),
    ("concatenate casting", lambda x: np.concatenate([x + 0j, x], out=np.zeros_like(np.concatenate([x, x]))),
     lambda: np.concatenate([X + 0j, X], out=np.zeros(12))),
    ("concatenate out and dtype", lambda x: np.concatenate([x, x], out=np.zeros_like(np.concatenate([x, x])), dtype=float),
     lambda: np.concatenate([X, X], out=np.zeros(12), dtype=float)),
    ("einsum casting", lambda x: np.einsum("i->i", x, out=np.zeros_like(x, dtype=np.float32)),
     lambda: np.einsum("i->i", X, out=np.zeros(6, np.float32))),
])
def test_an_out_numpy_refuses_gives_numpys_error(name, traced, plain):
    kind, message = numpy_error(plain)
    with pytest.raises(kind) as found:
        pb.gradient(lambda x: np.sum(traced(x)), X)
    assert str(found.value) == message


# --- out= that would lose the gradient, and functions that do not take out= --------------------
@pytest.mark.parametrize("name, call", [
    ("dot", lambda x, z: np.dot(A, x[:3], out=z[:2])),
    ("take", lambda x, z: np.take(x, [0, 1, 2], out=z[:3])),
    ("concatenate", lambda x, z: np.concatenate([x[:2], x[3:4]], out=z[:3])),
    ("einsum", lambda x, z: np.einsum("i->i", x, out=z)),
])
def test_a_plain_out_that_would_lose_the_gradient_names_the_fix(name, call):
    with pytest.raises(TypeError) as found:
        pb.gradient(lambda x: np.sum(call(x, np.zeros(6))), X)
    message = str(found.value)
    assert f"numpy.{name}(..., out=...) would write a result that is being differentiated into a plain array" in message
    assert f"Drop out= and assign the result (z = np.{name}(...))" in message
    assert "make out a traced array (z = np.zeros_like(x, shape=...))" in message


def _reduction(fn):
    return lambda x: fn(np.reshape(x, (2, 3)), axis=1, out=np.zeros_like(x[:2]))


@pytest.mark.parametrize("name, call", [
    ("numpy.sum", _reduction(np.sum)),
    ("numpy.mean", _reduction(np.mean)),
    ("numpy.prod", _reduction(np.prod)),
    ("numpy.max", _reduction(np.max)),
    ("numpy.cumsum", lambda x: np.cumsum(x, out=np.zeros_like(x))),
    ("numpy.cumprod", lambda x: np.cumprod(x, out=np.zeros_like(x))),
    ("numpy.var", lambda x: np.var(x, out=np.zeros_like(x[0]))),
    ("numpy.median", lambda x: np.median(x, out=np.zeros_like(x[0]))),
    ("numpy.fix", lambda x: np.fix(x, out=np.zeros_like(x))),
    ("numpy.outer", lambda x: np.outer(x[:2], x[2:], out=np.zeros_like(np.outer(x[:2], x[2:])))),
    ("numpy.linalg.multi_dot", lambda x: np.linalg.multi_dot([A, x[:3]], out=np.zeros_like(x[:2]))),
    ("numpy.fft.fft", lambda x: np.real(np.fft.fft(x, out=np.zeros_like(x + 0j)))),
])
def test_out_where_it_is_not_supported_names_the_fix(name, call):
    with pytest.raises(TypeError) as found:
        pb.gradient(lambda x: np.sum(call(x)), X)
    message = str(found.value)
    short = name.replace("numpy.", "np.", 1)
    assert f"{name}: out= is not supported on tracked values; drop out= and assign the result instead (y = {short}(" in message
    assert f"or write it into an existing array (z[...] = {short}(" in message


def test_clip_and_quantile_out_name_the_fix():
    with pytest.raises(TypeError, match=r"numpy\.clip: out= is not supported on tracked values; drop it and assign the "
                                        r"result instead \(y = np\.clip\(y, lo, hi\)\), or write it into an existing array "
                                        r"\(z\[\.\.\.\] = np\.clip\(y, lo, hi\)\)"):
        pb.gradient(lambda x: np.sum(np.clip(x, 0.0, 1.0, out=np.zeros_like(x))), X)
    with pytest.raises(TypeError, match=r"numpy\.quantile: out= is not supported on tracked values; drop out= and "
                                        r"assign the result instead \(y = np\.quantile\(a, q\)\), or write it into an "
                                        r"existing array \(z\[\.\.\.\] = np\.quantile\(a, q\)\)"):
        pb.gradient(lambda x: np.quantile(x, 0.5, out=np.zeros_like(x[0])), X)


def test_einsum_keywords_it_does_not_take_name_the_fix():
    with pytest.raises(TypeError, match=r"numpy\.einsum: dtype= is not supported on tracked values; drop it and "
                                        r"convert the result instead \(np\.einsum\(\.\.\.\)\.astype\(dtype\)\)"):
        pb.gradient(lambda x: np.sum(np.einsum("i->i", x, dtype=np.float32)), X)


# --- NumPy's array subclasses name themselves ----------------------------------------------------
@pytest.mark.parametrize("make, name", [(np.asmatrix, "numpy.matrix"), (np.matrix, "numpy.matrix"),
                                        (lambda x: np.bmat([[x]]), "numpy.matrix"),
                                        (np.ma.masked_array, "numpy.ma.MaskedArray")],
                         ids=["asmatrix", "matrix", "bmat", "masked_array"])
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_array_subclass_error_names_the_subclass_made(make, name):
    """np.asmatrix lives in numpy.matrixlib, whose name begins as numpy.ma's does: the refusal names np.matrix."""
    for mode in (lambda f, x: pb.gradient(f, x), lambda f, x: pb.jvp(f, (x,), (x,))):
        with pytest.raises(TypeError, match=f"^An array of type {re.escape(name)} met a value"):
            mode(lambda x: np.sum(make(x)), np.array([0.3, 0.5]))


@pytest.mark.parametrize("call, fix", [
    (lambda x: np.logaddexp.reduce(x), "scipy.special.logsumexp"),
    (lambda x: np.maximum.accumulate(x), "loop of np.maximum calls"),
    (lambda x: np.subtract.reduce(x), "loop of np.subtract calls"),
    (lambda x: np.add.reduceat(x, [0, 2]), "each slice's reduction as a loop of np.add calls"),
])
def test_an_unsupported_ufunc_method_names_what_to_write_instead(call, fix):
    with pytest.raises(TypeError, match="is not supported on tracked values") as info:
        pb.gradient(lambda x: np.sum(call(x)), np.arange(1.0, 5.0))
    assert fix in str(info.value)


@pytest.mark.parametrize("draw", [
    lambda rng, mu: rng.normal(mu, 1.0, 3),
    lambda rng, mu: rng.choice(mu, 2),
    lambda rng, mu: rng.permutation(mu),
    lambda rng, mu: rng.choice(3, 2, p=mu / np.sum(mu)),
], ids=["normal(mu)", "choice(x)", "permutation(x)", "choice(p=)"])
def test_a_draw_reading_differentiated_parameters_names_the_rewrite_and_draws_nothing(draw):
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(TypeError, match=re.escape("mu + sigma * rng.standard_normal(shape)")):
        pb.gradient(lambda mu: np.sum(draw(rng, mu)), np.array([1.0, 2.0, 3.0]))
    assert rng.bit_generator.state == state


def test_the_suggested_reparameterised_draw_has_the_gradient_of_the_same_numbers():
    noise = np.random.default_rng(7).standard_normal(3)
    (g_mu, g_sigma) = pb.gradient(lambda mu, s: np.sum((mu + s * np.random.default_rng(7).standard_normal(3)) ** 2),
                                  np.array([0.5, -1.0, 2.0]), 1.5)
    np.testing.assert_allclose(g_mu, 2 * (np.array([0.5, -1.0, 2.0]) + 1.5 * noise), rtol=1e-14)
    assert g_sigma == pytest.approx(np.sum(2 * (np.array([0.5, -1.0, 2.0]) + 1.5 * noise) * noise), rel=1e-14)


def test_numpy_polynomial_functions_are_named_with_the_older_functions_pullback_differentiates():
    # numpy.polynomial converts its arguments in Python code NumPy does not dispatch, so no rule can catch it:
    # the message names the function and the differentiable spelling of the same polynomial
    from numpy.polynomial import polynomial as P

    c = np.array([1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match=r"numpy\.polynomial\.polynomial\.polyval .*np\.polyval\(c\[::-1\], x\)"):
        pb.gradient(lambda c: P.polyval(2.0, c), c)
    (g,) = pb.gradient(lambda c: np.polyval(c[::-1], 2.0), c)  # the spelling the message gives
    assert np.polyval(c[::-1], 2.0) == P.polyval(2.0, c)
    np.testing.assert_array_equal(g, [1.0, 2.0, 4.0])


def test_writing_into_a_copy_of_an_argument_given_no_tangent_names_the_zero_tangent():
    # an argument whose tangent is None stays a plain array, and so does its copy: the message says so
    def f(x, v):
        y = x.copy()
        y[1] = v
        return y

    a, v = np.ones(3), np.array(2.0)
    with pytest.raises(TypeError, match="given no tangent, is a plain array, its copy too.*zero tangent"):
        pb.jvp(f, (a, v), (None, np.array(1.0)))
    value, tangent = pb.jvp(f, (a, v), (np.zeros(3), np.array(1.0)))  # the fix the message gives
    np.testing.assert_array_equal(value, [1.0, 2.0, 1.0])
    np.testing.assert_array_equal(tangent, [0.0, 1.0, 0.0])
