"""Forward mode and higher derivatives, from a probe against finite differences and JAX."""

import numpy as np
import pytest

import pullback as pb


@pytest.mark.parametrize("scalar", [np.float64, np.float32])
def test_hessian_of_a_numpy_scalar_is_typed_like_its_gradient(scalar):
    x = scalar(2.0)
    (g,) = pb.gradient(lambda x: x ** 3, x)
    h = pb.hessian(lambda x: x ** 3, x)
    assert type(h) is type(g) is scalar
    assert h == 12.0
    assert type(pb.hvp(lambda x: x ** 3, x, 1.0)) is scalar


def test_hessian_of_a_zero_d_array_stays_a_zero_d_array():
    h = pb.hessian(lambda x: x ** 3, np.array(2.0))
    assert type(h) is np.ndarray and h.shape == () and h == 12.0


def test_hessian_of_a_numpy_scalar_under_jit_and_nested_matches_eager():
    f = lambda u: u ** 4
    x = np.float64(2.0)
    jitted = pb.jit(lambda s: pb.hessian(f, s))(x)
    assert type(jitted) is np.float64 and jitted == 48.0
    (third,) = pb.gradient(lambda s: pb.hessian(f, s), x)
    assert type(third) is np.float64 and third == 48.0
    assert pb.jvp(lambda s: pb.hessian(f, s), (x,), (1.0,))[1] == 48.0
    assert pb.hessian(lambda s: pb.hessian(f, s), x) == 24.0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_power_with_the_exponent_held_still_keeps_its_derivative_at_a_negative_base(dtype):
    # d(a**b) = b a**(b-1) da + a**b log(a) db: at a < 0, log a is NaN, but a zero db asks for none of that term
    a, b = np.array([-2.0, 3.0], dtype), np.array([2.0, 2.0], dtype)
    ta, zero = np.array([1.0, 0.5], dtype), np.zeros(2, dtype)
    expected = b * a ** (b - 1) * ta  # [-4, 3]
    with np.errstate(invalid="ignore"):
        for f in (lambda a, b: a ** b, np.power, np.float_power):
            _, tangent = pb.jvp(f, (a, b), (ta, zero))
            np.testing.assert_allclose(tangent, expected.astype(tangent.dtype), rtol=1e-6)
        jitted = pb.jit(lambda a, b, ta, tb: pb.jvp(lambda a, b: a ** b, (a, b), (ta, tb))[1])
        np.testing.assert_allclose(jitted(a, b, ta, zero), expected, rtol=1e-6)
        # a nonzero db still gives NaN there (a**b has no real derivative in b at a negative base), as NumPy's log
        _, tangent = pb.jvp(lambda a, b: a ** b, (a, b), (ta, np.ones(2, dtype)))
        assert np.isnan(tangent[0]) and np.isfinite(tangent[1])
