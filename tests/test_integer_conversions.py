"""Converting a traced value: to an integer gives the plain integer (an integer carries no gradient, and
NumPy computes the same number); to a float would lose the gradient, so it raises an error naming the
conversion and the fix. A value forward mode knows has derivative zero converts as without pullback, and
text is written as without pullback."""

import math

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


# --- text: written as without pullback ------------------------------------------------------------
@pytest.mark.parametrize("value,spec,dtype", [
    (3000.0, ".4f", np.float32),   # a float32 loss of a few thousand, logged to 4 decimals
    (1234.5, ".4f", np.float32),
    (123456.5, ".2f", np.float32),
    (1.5, ".3f", np.float16),
])
def test_rounded_fstring_of_a_low_precision_loss_works_as_before(value, spec, dtype):
    texts = []

    def loss(x):
        total = np.sum(x)
        texts.append(f"{total:{spec}}")
        return total

    pb.gradient(loss, np.array([value], dtype=dtype))
    assert texts == [format(dtype(value), spec)]


def test_rounded_fstring_of_a_float32_loss_works_under_jvp():
    texts = []
    pb.jvp(lambda x: (texts.append(f"{np.sum(x):.4f}"), x)[1], (np.array([3000.0], np.float32),),
           (np.ones(1, np.float32),))
    assert texts == ["3000.0000"]


@pytest.mark.parametrize("spec", [">10", "10", "<12", "^12"])
def test_fstring_alignment_specs_of_a_traced_loss_still_work(spec):
    texts = []

    def loss(x):
        total = np.sum(x ** 2)
        texts.append(f"{total:{spec}}")
        return total

    pb.gradient(loss, np.array([1.5, 0.5]))
    assert texts == [format(np.float64(2.5), spec)]


def test_fstring_without_spec_prints_the_number_as_without_differentiation():
    # print(f"loss {loss}") prints what it prints without pb.gradient (text carries no gradient)
    texts = []

    def loss(x):
        total = np.sum(x ** 2)
        texts.append(f"loss {total}")
        texts.append("{}".format(total))
        return total

    x = np.array([1.5, 0.5])
    pb.gradient(loss, x)
    plain = np.sum(x ** 2)
    assert texts == [f"loss {plain}", f"{plain}"]


# --- forward mode: values no tangent moves convert freely -----------------------------------------
_X = np.array([1.5, -2.5, 3.2])
_V = np.ones(3)


@pytest.mark.parametrize("name,f", [
    ("float(np.sign(x)[0])", lambda x: x * float(np.sign(x)[0])),
    ("float(np.mean(np.sign(x)))", lambda x: x * float(np.mean(np.sign(x)))),
    ("float(np.sum(np.ones_like(x)))", lambda x: x / float(np.sum(np.ones_like(x)))),
    ("math.copysign(1, np.sign(x)[1])", lambda x: x * math.copysign(1, np.sign(x)[1])),
    ("np.full(3, np.sign(x)[0])", lambda x: x + np.full(3, np.sign(x)[0])),
    ("dict lookup on np.sign(x)[0]", lambda x: x * {1.0: 2.0, -1.0: 3.0}[np.sign(x)[0]]),
    ("np.sign(x).tolist()", lambda x: x * sum(np.sign(x).tolist())),
    ("plain buffer = np.sign(x)", lambda x: (lambda b: (b.__setitem__(slice(None), np.sign(x)), b * x)[1])(np.zeros(3))),
    ("'%.3f' % np.sign(x)[0]", lambda x: x * len("%.3f" % np.sign(x)[0])),
])
def test_jvp_of_code_using_a_zero_derivative_value_as_a_number_still_works(name, f):
    # forward mode knows these values have derivative zero (no tangent moves them): nothing is lost
    y, y_dot = pb.jvp(f, (_X,), (_V,))
    np.testing.assert_allclose(y, f(_X))
    np.testing.assert_allclose(y_dot, (f(_X + 1e-6 * _V) - f(_X - 1e-6 * _V)) / 2e-6, rtol=1e-6)


def test_jacobian_of_code_using_a_zero_derivative_value_as_a_number_still_works():
    (j,) = pb.jacobian(lambda x: x * float(np.sign(x)[0]), _X)
    np.testing.assert_allclose(j, np.eye(3))
