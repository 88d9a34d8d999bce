"""Converting a traced value: to an integer gives the plain integer (an integer carries no gradient, and
NumPy computes the same number); to a float would lose the gradient, so it raises an error naming the
conversion and the fix. As text, `f"{x}"` is `str(x)` (which shows it traced), and a format spec gives the
digits it asks for; text keeping every digit of the value is refused, as it would read back as a float."""

import re

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


# --- text: f"{x}" is str(x); a format spec gives the digits asked for, never the whole value -------
def test_fstring_of_tracked_value_does_not_silently_drop_the_gradient():
    """float(f"{x}") once read the number back as a plain float, its gradient silently lost."""

    def f(a):
        return float(f"{a[0]}") * a[0]

    for mode in (lambda: pb.gradient(f, np.array([0.3, 0.5])), lambda: pb.jvp(f, (np.array([0.3, 0.5]),), (np.ones(2),))):
        with pytest.raises(ValueError, match=r"could not convert string to float: '(Tracked|Dual)\("):
            mode()


def test_text_of_a_traced_value_shows_it_traced_and_formats_digits_as_asked():
    seen = []

    def f(a):
        x = a[0]
        seen.append((f"{x}", str(x), repr(x), "{}".format(a), f"{x:.3f}", f"{x:.2e}", f"{x:g}", f"{a[1]:g}",
                     f"{a[1]:.3e}", f"{x * 1j:.2f}"))
        return np.sum(a)

    pb.gradient(f, np.array([0.3, 0.0]))
    pb.jvp(f, (np.array([0.3, 0.0]),), (np.ones(2),))
    (tracked, dual) = seen
    assert tracked[:4] == ("Tracked(np.float64(0.3))",) * 3 + ("Tracked(array([0.3, 0. ]))",)
    assert dual[0] == dual[1] == "Dual(np.float64(0.3), tangent=np.float64(1.0))"
    assert tracked[4:] == dual[4:] == ("0.300", "3.00e-01", "0.3", "0", "0.000e+00", "0.00+0.30j")


@pytest.mark.parametrize("value, spec", [(0.3, ".17g"), (0.3, ".20f"), (0.3, ">10"), (0.0, ".17e"),
                                         (np.float32(0.3), ".9g"), (1e20, ".1f"), (0.3 + 0.5j, ".17f")])
def test_a_format_spec_keeping_every_digit_is_refused(value, spec):
    """Text that tells the value from its neighbouring floats is the value itself: read back, it would lose
    the gradient (a spec with fewer digits gives a piecewise constant number, whose derivative is 0)."""
    x = np.array([value])
    for mode in (lambda f: pb.gradient(f, x), lambda f: pb.jvp(f, (x,), (x,))):
        with pytest.raises(TypeError, match=f"format it with {re.escape(repr(spec))}, which writes every digit.*"
                                            r"stop_gradient\(x\)"):
            mode(lambda a: len(format(a[0], spec)) * a)
    assert isinstance(format(pb.stop_gradient(x)[0], spec), str)
