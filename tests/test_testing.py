"""pullback.testing, the one checker: it passes on correct rules, and it fails, naming the leaf, on a rule
that is wrong in reverse mode only, in forward mode only, or only in its second derivative."""

import numpy as np
import pytest

import pullback as pb
from pullback import testing


class Layer:
    def __init__(self, weight, bias):
        self.weight, self.bias = weight, bias


class Chain:
    def __init__(self, *layers):
        self.layers = layers


def two_layers(rng=None):
    rng = rng or np.random.default_rng(1)
    return Chain(Layer(rng.normal(size=(4, 2)), rng.normal(size=4)), Layer(rng.normal(size=(1, 4)), np.zeros(1)))


X = np.array([1.0, 2.0])
PATHS = ["layers[0].weight", "layers[0].bias", "layers[1].weight", "layers[1].bias"]


def network(activation):
    """A loss over a model object whose first layer goes through `activation`."""
    def loss(m):
        hidden = activation(m.layers[0].weight @ X + m.layers[0].bias)
        return np.sum(m.layers[1].weight @ hidden + m.layers[1].bias)

    return loss


# --- correct rules pass ------------------------------------------------------------------------
def test_check_gradient_passes_for_correct_rules_and_names_paths():
    assert pb.check_gradient is testing.check_gradient
    rng = np.random.default_rng(1)
    model = two_layers(rng)
    x = rng.normal(size=2)
    loss = lambda m: np.sum(m.layers[1].weight @ np.tanh(m.layers[0].weight @ x + m.layers[0].bias) + m.layers[1].bias)
    result = pb.check_gradient(loss, model)
    assert result
    assert [leaf.path for leaf in result.leaves] == PATHS
    assert result.leaves[0].directions == 3  # 8 elements > dense_up_to: random directions
    assert result.leaves[1].directions == 4  # small leaves: every axis direction
    assert "layers[1].weight" in str(result) and "all agree" in str(result)


def test_structured_arguments_ties_and_outputs_at_second_order():
    w = np.array([0.5, -1.0, 2.0])
    params = {"w": w, "again": w, "layers": [Layer(np.array([[0.3, -0.2]]), 0.7)], "name": "net"}

    def f(p, scale, n):
        h = np.tanh(p["layers"][0].weight @ p["w"][:2] + p["layers"][0].bias) * scale
        return {"out": h * p["again"] ** n, "count": n}  # a dict output, with an integer in it

    result = testing.assert_gradient(f, params, 1.5, 2, order=2, dense_up_to=None)
    first = [leaf.path for leaf in result.leaves if leaf.of == "f"]
    assert first == ["args[0]['w']", "args[0]['layers'][0].weight", "args[0]['layers'][0].bias", "args[1]"]
    assert {leaf.of for leaf in result.leaves} == {"f", "vjp of f", "jvp of f"}
    assert "cotangent['out']" in [leaf.path for leaf in result.leaves if leaf.of == "vjp of f"]
    assert "tangents[0]['w']" in [leaf.path for leaf in result.leaves if leaf.of == "jvp of f"]
    assert len(result.transposes) == 3 and all(result.transposes)
    g_params, g_scale, g_n = result.gradient  # <u, f'> with u random: reverse mode's value, by pb.pullback
    assert g_params["again"] is None and g_n is None  # the tie is read at its first place; an int has none


def test_numerical_gradient_moves_a_0d_array_as_a_0d_array():
    # np.add(a, 1.0, out=a) needs an array; a NumPy scalar in its place raises
    f = lambda a: np.add(a, 1.0, out=a) ** 2  # noqa: E731
    (g,) = testing.numerical_gradient(f, np.array(0.4))
    np.testing.assert_allclose(g, 2 * 1.4, rtol=1e-8)


def test_numerical_gradient_by_hand():
    params = {"w": np.array([1.0, -2.0], np.float32), "k": 3}
    g, s = testing.numerical_gradient(lambda p, s: np.sum(p["w"] ** 2) * s + p["k"], params, 0.5)
    np.testing.assert_allclose(g["w"], [1.0, -2.0], rtol=1e-8)  # d/dw (s w²) = 2 s w, in float64
    assert g["w"].dtype == np.float64 and g["k"] is None
    assert abs(s - 5.0) < 1e-8
    with pytest.raises(TypeError, match="return a real number"):
        testing.numerical_gradient(np.sin, np.ones(2))


def test_transposition_holds_at_a_kink_where_differences_do_not():
    x = np.array([0.0, -1.0, 2.0])
    relu = lambda x: np.where(x > 0, x, 0.0)  # noqa: E731
    result = testing.check_gradient(relu, x, dense_up_to=None)
    assert [leaf.wrong for leaf in result.leaves] == [("reverse", "forward")]  # central differences give 1/2 at 0
    assert result.transposes[0]
    result = testing.check_transpose(relu, x)
    assert result and result.scale > 0 and result.rtol == 1e-10


def test_clear_errors_for_bad_options_and_complex_outputs():
    with pytest.raises(ValueError, match="modes"):
        testing.check_gradient(np.sum, np.ones(2), modes=("reverse",))
    with pytest.raises(ValueError, match="order"):
        testing.check_gradient(np.sum, np.ones(2), order=0)
    with pytest.raises(TypeError, match="complex"):
        testing.check_gradient(lambda x: np.exp(1j * x), np.ones(2), modes="rev")


# --- broken rules fail, naming the leaf ----------------------------------------------------------
@pb.primitive
def tanh_wrong_backward(x):
    return np.tanh(x)


@pb.rrule(tanh_wrong_backward)
def _(x):
    y = np.tanh(x)
    return y, lambda g: (g * (1 - y),)  # should be 1 - y**2


@pb.frule(tanh_wrong_backward)
def _(primals, tangents):
    y = np.tanh(primals[0])
    return y, None if tangents[0] is None else (1 - y**2) * tangents[0]


@pb.primitive
def tanh_wrong_forward(x):
    return np.tanh(x)


@pb.rrule(tanh_wrong_forward)
def _(x):
    y = np.tanh(x)
    return y, lambda g: (g * (1 - y**2),)


@pb.frule(tanh_wrong_forward)
def _(primals, tangents):
    y = np.tanh(primals[0])
    return y, None if tangents[0] is None else (1 - y) * tangents[0]  # should be 1 - y**2


@pb.primitive
def tanh_only_backward(x):  # no forward rule: forward mode transposes the (wrong) reverse rule
    return np.tanh(x)


@pb.rrule(tanh_only_backward)
def _(x):
    y = tanh_only_backward(x)
    return y, lambda g: (g * (1 - y),)  # should be 1 - y**2


def failing(result):
    return {leaf.path: leaf.wrong for leaf in result.failures}


def test_a_wrong_reverse_rule_fails_in_reverse_mode_only():
    loss = network(tanh_wrong_backward)
    result = testing.check_gradient(loss, two_layers())
    assert failing(result) == {"layers[0].weight": ("reverse",), "layers[0].bias": ("reverse",)}
    assert not result.transposes[0]  # forward and reverse mode disagree with each other too
    with pytest.raises(AssertionError, match=r"layers\[0\]\.bias: reverse mode differs from central differences"):
        testing.assert_gradient(loss, two_layers())
    assert testing.check_gradient(loss, two_layers(), modes="fwd")


def test_a_wrong_forward_rule_fails_in_forward_mode_only():
    loss = network(tanh_wrong_forward)
    result = testing.check_gradient(loss, two_layers())
    assert failing(result) == {"layers[0].weight": ("forward",), "layers[0].bias": ("forward",)}
    assert "check the frule" in str(result) and not result.transposes[0]
    with pytest.raises(AssertionError, match=r"layers\[0\]\.weight: forward mode differs"):
        testing.assert_gradient(loss, two_layers(), modes=("fwd",))
    assert testing.check_gradient(loss, two_layers(), modes="rev")


def test_check_gradient_finds_the_layer_with_a_wrong_rule():
    model = Chain(Layer(np.array([[0.5, -1.0]]), np.array([0.3])), Layer(np.array([[2.0]]), np.array([0.1])))
    result = pb.check_gradient(network(tanh_only_backward), model)
    assert not result
    assert {leaf.path for leaf in result.failures} == {"layers[0].weight", "layers[0].bias"}
    assert "disagree" in str(result)


# A cube whose first derivative is right but computed by a primitive whose own derivative is wrong:
# first-order checks pass, second-order ones fail.
@pb.primitive
def three_x_squared(x):
    return 3.0 * x**2


@pb.rrule(three_x_squared)
def _(x):
    return three_x_squared(x), lambda g: (g * 5.0 * x,)  # should be 6 x


@pb.frule(three_x_squared)
def _(primals, tangents):
    x = primals[0]
    return three_x_squared(x), None if tangents[0] is None else 5.0 * x * tangents[0]  # should be 6 x


@pb.primitive
def cube(x):
    return x**3


@pb.rrule(cube)
def _(x):
    return cube(x), lambda g: (g * three_x_squared(x),)


@pb.frule(cube)
def _(primals, tangents):
    x = primals[0]
    return cube(x), None if tangents[0] is None else three_x_squared(x) * tangents[0]


def test_a_wrong_second_derivative_fails_at_order_two_only():
    model = {"scale": np.array([0.5, -1.5]), "layer": Layer(np.array([0.2, 0.9, -0.4]), 0.3)}
    loss = lambda m: np.sum(m["scale"] * np.sum(cube(m["layer"].weight))) + m["layer"].bias ** 2
    assert testing.check_gradient(loss, model, dense_up_to=None)
    result = testing.check_gradient(loss, model, order=2, dense_up_to=None)
    assert not result and all(leaf.ok for leaf in result.leaves if leaf.of == "f")
    wrong = {(leaf.of, leaf.path) for leaf in result.failures}
    assert ("vjp of f", "['layer'].weight") in wrong and ("jvp of f", "['layer'].weight") in wrong
    assert all("bias" not in path for _, path in wrong)
    with pytest.raises(AssertionError, match=r"\['layer'\]\.weight \(vjp of f\): reverse mode differs"):
        testing.assert_gradient(loss, model, order=2, modes="rev")


def test_a_gradient_of_the_wrong_form_is_named(monkeypatch):
    def float32_gradient(f, *args):
        y, back = pb.pullback(f, *args)
        return y, lambda u: tuple(np.float32(1.0) * g.astype(np.float32) for g in back(u))

    monkeypatch.setattr(testing, "pullback", float32_gradient)
    result = testing.check_gradient(lambda x: np.sum(x ** 2), np.array([1.0, 2.0]), modes="rev")
    assert not result
    assert result.failures[0].note == "the gradient has dtype float32, but the leaf has dtype float64"
    assert "args[0]: the gradient has dtype float32" in str(result)


def test_a_wrong_complex_rule_is_caught_along_the_imaginary_axis_too():
    @pb.primitive
    def square(z):
        return z * z

    @pb.rrule(square)
    def _(z):
        return square(z), lambda dy: (dy * np.conj(2 * z),)  # wrong: the cotangent is dy * 2z

    z = np.array([1 + 2j, 0.5 - 1j])
    f = lambda z: np.real(np.sum(square(z)))
    assert not testing.check_gradient(f, z, modes="rev", dense_up_to=None)
    assert not testing.check_gradient(f, z, modes="rev")  # random complex directions
    g = lambda z: np.real(np.sum(z * z * np.conj(z[::-1])))
    assert testing.check_gradient(g, z, dense_up_to=None, order=2)
    assert testing.check_gradient(lambda s: np.abs(s * s) ** 2, 1 + 2j)
    # df/dx - i df/dy, as pb.gradient gives it
    np.testing.assert_allclose(testing.numerical_gradient(g, z)[0], pb.gradient(g, z)[0], rtol=1e-8)


def test_an_array_passed_twice_moves_at_both_places():
    w = np.array([1.0, 2.0, 3.0])
    f = lambda a, b: np.sum(a * b)
    numerical = testing.numerical_gradient(f, w, w)
    np.testing.assert_allclose(numerical[0], 2 * w, rtol=1e-8)  # the total, at the first place
    assert numerical[1] is None
    assert testing.check_gradient(f, w, w)


def test_forward_mode_alone_checks_an_operation_that_has_only_a_forward_rule():
    @pb.primitive
    def double(x):
        return 2.0 * x

    @pb.frule(double)
    def _(primals, tangents):
        return double(primals[0]), None if tangents[0] is None else 3.0 * tangents[0]  # wrong: 2

    assert not testing.check_gradient(lambda x: np.sum(double(x)), np.ones(3), modes="fwd")
    assert testing.check_gradient(lambda x: np.sum(2.0 * x), np.ones(3), modes="fwd")
