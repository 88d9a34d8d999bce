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
