"""Converting a traced value: to an integer gives the plain integer (an integer carries no gradient, and
NumPy computes the same number); to a float would lose the gradient, so it raises an error naming the
conversion and the fix."""

import numpy as np
import pytest

import pullback as pb


def test_integer_conversions_give_numpy_s_integers():
    x = np.array([2.7, -1.5, 3.0])
    seen = {}

    def f(x):
        seen["int"] = int(x[0])
        seen["int64"] = np.int64(x[1])
        seen["int32"] = np.int32(x[2])
        seen["bool"] = np.bool_(x[1])
        seen["array"] = np.asarray(x, dtype=np.int64)
        seen["astype"] = x.astype(int)
        return np.sum(x ** 2) * int(x[0])  # int(x[0]) is a constant factor, as its derivative is zero

    val, (g,) = pb.withgradient(f, x)
    assert val == f(x.copy())
    np.testing.assert_allclose(g, 2 * x * 2)
    assert type(seen["int"]) is int and seen["int"] == 2
    assert type(seen["int64"]) is np.int64 and seen["int64"] == -1
    assert type(seen["int32"]) is np.int32 and seen["int32"] == 3
    assert seen["bool"] is np.True_
    assert seen["array"].dtype == np.int64 and seen["array"].tolist() == [2, -1, 3]
    assert seen["astype"].tolist() == [2, -1, 3]


def test_integer_conversions_in_forward_mode_and_of_python_floats():
    assert pb.jvp(lambda x: x * int(x), (2.5,), (1.0,)) == (5.0, 2.0)
    assert pb.gradient(lambda x: x * np.int64(x), 3.5) == (3.0,)


@pytest.mark.parametrize("convert, name", [(float, r"float\(x\)"), (np.float64, r"np\.float64\(x\)"),
                                           (np.float32, r"np\.float32\(x\)"), (complex, "complex")])
def test_float_conversions_say_the_gradient_would_be_lost(convert, name):
    with pytest.raises(TypeError, match=name + ".*gradient would be lost|gradient would be lost.*" + name) as error:
        pb.gradient(lambda x: convert(x[0]) * x[1], np.array([1.0, 2.0]))
    assert "stop_gradient" in str(error.value)
