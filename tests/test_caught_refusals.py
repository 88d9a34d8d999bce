"""A refusal that the function being differentiated catches itself is raised anyway, when the function returns.

Without pullback, `a[0] = x[0]` writes the number and `float(x)` gives it; under differentiation both are refused
(the gradient would be lost). Code that catches the refusal (`try: ... except ValueError:`) would go on without the
write or the number, computing other values than it does without pullback: a silently wrong result and gradient.
"""

import numpy as np
import pytest

import pullback as pb

X = np.array([0.5, -1.0, 2.0])


def swallowed_write(x):
    a = np.zeros(3)
    try:
        a[0] = x[0]  # NumPy turns pullback's TypeError into "setting an array element with a sequence"
    except ValueError:
        pass
    return np.sum(x * x) + np.sum(a)


def swallowed_float(x):
    try:
        scale = float(np.sum(x))
    except TypeError:
        scale = 1.0
    return np.sum(x) * scale


def swallowed_item(x):
    try:
        first = x[0].item()
    except TypeError:
        first = 0.0
    return np.sum(x) + first


CAUGHT = [swallowed_write, swallowed_float, swallowed_item]


def test_without_pullback_the_functions_compute_with_the_values():
    assert swallowed_write(X) == pytest.approx(np.sum(X * X) + X[0])
    assert swallowed_float(X) == pytest.approx(np.sum(X) ** 2)
    assert swallowed_item(X) == pytest.approx(np.sum(X) + X[0])


@pytest.mark.parametrize("f", CAUGHT)
@pytest.mark.parametrize("transform", [
    lambda f: pb.gradient(f, X),
    lambda f: pb.withgradient(f, X),
    lambda f: pb.jvp(f, (X,), (np.ones(3),)),
    lambda f: pb.hessian(f, X),
    lambda f: pb.jit(pb.grad(f))(X),
], ids=["gradient", "withgradient", "jvp", "hessian", "jit-grad"])
def test_a_caught_refusal_is_raised_when_the_function_returns(f, transform):
    with pytest.raises(TypeError, match="caught it itself") as raised:
        transform(f)
    assert "stop_gradient" in str(raised.value)  # the refusal's own fix is kept


def test_the_next_call_is_not_affected():
    with pytest.raises(TypeError, match="caught it itself"):
        pb.gradient(swallowed_write, X)
    (g,) = pb.gradient(lambda x: np.sum(x * x), X)
    np.testing.assert_allclose(g, 2 * X)


def test_other_errors_caught_in_the_function_are_its_own_business():
    def f(x):
        table = {"a": 2.0}
        try:
            scale = table["b"]
        except KeyError:
            scale = 3.0
        return np.sum(np.sin(x)) * scale

    (g,) = pb.gradient(f, X)
    np.testing.assert_allclose(g, 3.0 * np.cos(X))


def test_a_refusal_that_propagates_keeps_its_message():
    def f(x):
        a = np.zeros(3)
        a[0] = x[0]
        return np.sum(a)

    with pytest.raises(TypeError, match="Cannot convert") as raised:
        pb.gradient(f, X)
    assert "caught it itself" not in str(raised.value)


def test_a_conversion_of_an_outer_value_caught_in_an_inner_function_is_raised_by_the_outer_call():
    def outer(y):
        def inner(x):
            try:
                c = float(np.sum(y))
            except TypeError:
                c = 0.0
            return np.sum(x) * c
        (g,) = pb.gradient(inner, X)
        return np.sum(g * y)

    with pytest.raises(TypeError, match="caught it itself"):
        pb.gradient(outer, X)


def swallowed_asarray(x):
    try:
        plain = np.asarray(x)
    except TypeError:
        plain = np.zeros(3)
    return np.sum(x) + np.sum(plain)


def test_a_jit_refusal_the_function_catches_is_raised_when_the_function_returns():
    assert swallowed_asarray(X) == pytest.approx(2 * np.sum(X))
    with pytest.raises(pb.JitError, match="caught it itself") as raised:
        pb.jit(swallowed_asarray)(X)
    assert "np.asarray" in str(raised.value)  # the refusal's own message is kept




def test_a_function_without_a_rule_whose_refusal_is_caught_is_raised_when_the_function_returns():
    def f(x):
        try:
            counts = np.histogram(x, bins=2)[0]  # no rule
        except NotImplementedError:
            counts = np.zeros(2)
        return np.sum(x * x) + counts[0]

    x = np.array([1.0, 2.0, 4.0])
    assert f(x) == pytest.approx(21.0 + 2)  # bins [1, 2.5), [2.5, 4]
    with pytest.raises(NotImplementedError, match="caught it itself") as raised:
        pb.gradient(f, x)
    assert "histogram" in str(raised.value)


def test_a_call_numpy_refuses_too_raises_numpys_error_which_the_function_may_catch():
    def f(x):
        try:
            flat = np.ravel_multi_index((x,), (5,))  # NumPy: "only int indices permitted"
        except TypeError:
            flat = 0
        return np.sum(x * x) + flat

    x = np.array([1.0, 2.0])
    with pytest.raises(TypeError, match="only int indices"):
        np.ravel_multi_index((x,), (5,))
    (g,) = pb.gradient(f, x)
    np.testing.assert_allclose(g, 2 * x)


def test_a_function_without_a_rule_that_writes_a_file_is_not_run_to_see_whether_numpy_refuses_it(tmp_path):
    path = tmp_path / "x.npy"
    with pytest.raises(NotImplementedError, match="numpy.save"):
        pb.gradient(lambda x: (np.save(path, x), np.sum(x))[1], X)
    assert not path.exists()
