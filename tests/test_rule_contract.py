"""A user's reverse rule that breaks its contract is refused, never read as a silent zero or a
silently broadcast gradient: one cotangent per positional argument, each in its argument's shape
or in a shape broadcasting made from it."""

import collections
import gc
import weakref

import numpy as np
import pytest

import pullback as pb


def _rule_of(back_for):
    """A primitive `f(x, w) = sin(x) * w` whose reverse rule's pullback is `back_for(x, w)`."""

    @pb.primitive
    def f(x, w):
        return np.sin(x) * w

    @pb.rrule(f)
    def f_rule(x, w):
        return f(x, w), back_for(x, w)

    return f


X, W = np.array([0.1, 0.5, 1.3]), np.array([2.0, -1.0, 0.5])


def test_a_correct_rule_gives_the_hand_derived_gradient():
    f = _rule_of(lambda x, w: lambda g: (g * np.cos(x) * w, g * np.sin(x)))
    gx, gw = pb.gradient(lambda x, w: np.sum(f(x, w)), X, W)
    np.testing.assert_allclose(gx, np.cos(X) * W)
    np.testing.assert_allclose(gw, np.sin(X))


def test_a_missing_cotangent_for_a_differentiated_argument_is_refused():
    f = _rule_of(lambda x, w: lambda g: (g * np.cos(x) * w,))  # nothing for w
    with pytest.raises(ValueError, match=r"returned 1 cotangent\(s\) for 2 argument\(s\), none for argument 1"):
        pb.gradient(lambda x, w: np.sum(f(x, w)), X, W)
    # w not differentiated: nothing is missing
    gx = pb.gradient(lambda x: np.sum(f(x, W)), X)[0]
    np.testing.assert_allclose(gx, np.cos(X) * W)


def test_an_empty_pullback_of_a_unary_rule_is_refused():
    @pb.primitive
    def g(x):
        return np.sin(x)

    @pb.rrule(g)
    def g_rule(x):
        return g(x), lambda dy: ()

    with pytest.raises(ValueError, match=r"returned 0 cotangent\(s\) for 1 argument\(s\), none for argument 0"):
        pb.gradient(lambda x: np.sum(g(x)), X)


def test_forward_mode_through_the_transposed_rule_refuses_a_missing_cotangent_too():
    f = _rule_of(lambda x, w: lambda g: (g * np.cos(x) * w,))
    with pytest.raises(ValueError, match="none for argument 1"):
        pb.jvp(f, (X, W), (np.ones(3), np.ones(3)))
    _, tangent = pb.jvp(f, (X, W), (np.ones(3), None))  # only x moves: its cotangent is there
    np.testing.assert_allclose(tangent, np.cos(X) * W)


@pytest.mark.parametrize("bad", [
    lambda x, w, g: np.sum(g * np.cos(x) * w, keepdims=True),  # shape (1,) for (3,)
    lambda x, w, g: float(np.sum(g * np.cos(x) * w)),  # a number for an array
    lambda x, w, g: np.sum(g * np.cos(x) * w),  # a 0-d value for an array
])
def test_a_cotangent_that_would_be_broadcast_up_is_refused(bad):
    f = _rule_of(lambda x, w: lambda g: (bad(x, w, g), g * np.sin(x)))
    with pytest.raises(ValueError, match=r"A cotangent of shape \((1,)?\) was given for a value of shape \(3,\)"):
        pb.gradient(lambda x, w: np.sum(f(x, w)), X, W)


def test_a_cotangent_in_the_broadcast_shape_of_the_output_is_summed_down():
    @pb.primitive
    def scale(x, w):
        return x * w  # x (3,) and w (2, 1): y (2, 3)

    @pb.rrule(scale)
    def scale_rule(x, w):
        return scale(x, w), lambda g: (g * w, g * x)  # both in y's shape

    x, w = np.array([1.0, 2.0, 3.0]), np.array([[2.0], [5.0]])
    gx, gw = pb.gradient(lambda x, w: np.sum(scale(x, w) ** 2), x, w)
    y = x * w
    np.testing.assert_allclose(gx, np.sum(2 * y * w, axis=0))
    np.testing.assert_allclose(gw, np.sum(2 * y * x, axis=1, keepdims=True))


# --- a frule of a primitive called with a positional parameter by name ---------------------------

@pb.primitive
def _sin_times(x, a):
    return np.sin(x) * a


@pb.rrule(_sin_times)
def _sin_times_rrule(x, a):
    return _sin_times(x, a), lambda dy: (dy * np.cos(x) * a, dy * np.sin(x))


@pb.frule(_sin_times)
def _sin_times_frule(primals, tangents):
    x, a = primals
    tx, ta = tangents
    dy = 0.0
    if tx is not None:
        dy = dy + np.cos(x) * a * tx
    if ta is not None:
        dy = dy + np.sin(x) * ta
    return _sin_times(x, a), dy


def test_frule_gets_a_positional_parameter_passed_by_name_in_its_position_as_the_rrule_does():
    x = np.array([0.3, 0.7])
    expected = np.cos(x) * 2.0
    np.testing.assert_allclose(pb.gradient(lambda x: np.sum(_sin_times(x, a=2.0)), x)[0], expected)
    np.testing.assert_allclose(pb.jvp(lambda x: _sin_times(x, 2.0), (x,), (np.ones(2),))[1], expected)
    # was: TypeError: _sin_times_frule() got an unexpected keyword argument 'a'
    np.testing.assert_allclose(pb.jvp(lambda x: _sin_times(x, a=2.0), (x,), (np.ones(2),))[1], expected)


# --- pullbacks returning malformed cotangents ------------------------------------------------------

def _primitive_with_back(back):
    @pb.primitive
    def h(x):
        return np.sin(x)

    @pb.rrule(h)
    def h_rule(x):
        return np.sin(x), back

    return h


@pytest.mark.parametrize("back, returned", [(lambda dy: None, "None"), (lambda dy: dy, r"an array of shape \(2,\)")])
def test_a_pullback_returning_no_tuple_gets_a_clear_error(back, returned):
    # None was "'NoneType' object is not subscriptable"; a bare array would give its rows as cotangents
    h = _primitive_with_back(back)
    with pytest.raises(TypeError, match=rf"pullback \(.*\) returned {returned}; a pullback returns a tuple"):
        pb.gradient(lambda x: np.sum(h(x)), np.ones(2))
    with pytest.raises(TypeError, match=rf"returned {returned}; a pullback returns a tuple"):
        pb.jvp(h, (np.ones(2),), (np.ones(2),))


def test_a_list_as_the_cotangent_of_an_array_gets_a_clear_error():
    h = _primitive_with_back(lambda dy: ([1.0, 1.0],))  # was: TypeError: Field elements must be 2- or 3-tuples
    with pytest.raises(TypeError, match=r"gave a list as the cotangent of an array of shape \(2,\)"):
        pb.gradient(lambda x: np.sum(h(x)), np.ones(2))
    h = _primitive_with_back(lambda dy: [dy * np.cos(np.ones(2))])  # a list of cotangents is read as the tuple
    np.testing.assert_allclose(pb.gradient(lambda x: np.sum(h(x)), np.ones(2))[0], np.cos(np.ones(2)))


# --- cotangents past the last argument ------------------------------------------------------------

def test_a_pullback_returning_more_cotangents_than_arguments_is_refused():
    # off by one, as if for a `self`: read as (None, g*sin(x)), x's gradient was lost and w got x's
    f = _rule_of(lambda x, w: lambda g: (None, g * np.cos(x) * w, g * np.sin(x)))
    with pytest.raises(ValueError, match=r"returned 3 cotangents for 2 argument\(s\), and cotangent 2.*is not None"):
        pb.gradient(lambda x, w: np.sum(f(x, w)), X, W)
    with pytest.raises(ValueError, match="returned 3 cotangents"):  # jvp transposes the rule: it gave a zero tangent
        pb.jvp(f, (X, W), (np.ones(3), np.zeros(3)))

    # a rule written for an optional argument the call leaves out may return None for it
    @pb.primitive
    def scaled_sin(x, scale=2.0):
        return np.sin(x) * scale

    @pb.rrule(scaled_sin)
    def scaled_sin_rule(x, scale=2.0):
        return scaled_sin(x, scale), lambda g: (g * np.cos(x) * scale, None)

    np.testing.assert_allclose(pb.gradient(lambda x: np.sum(scaled_sin(x)), X)[0], 2.0 * np.cos(X))
    np.testing.assert_allclose(pb.jvp(scaled_sin, (X,), (np.ones(3),))[1], 2.0 * np.cos(X))


def test_a_per_operand_with_more_functions_than_arguments_is_refused():
    f = _rule_of(lambda x, w: pb.PerOperand([lambda g: None, lambda g: g * np.cos(x) * w, lambda g: g * np.sin(x)]))
    with pytest.raises(ValueError, match=r"PerOperand of .*returned 3 cotangents for 2 argument"):
        pb.gradient(lambda x, w: np.sum(f(x, w)), X, W)


# --- a pullback writing into its cotangent ------------------------------------------------------------

def _central_difference(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = h
        g[i] = (f(x + step) - f(x - step)) / (2 * h)
    return g


@pb.primitive
def _relu_in_place(x):
    return np.maximum(x, 0.0)


@pb.rrule(_relu_in_place)
def _relu_in_place_rule(x):
    def back(g):
        g[x < 0] = 0.0  # NumPy backprop code's style (cs231n's relu_backward)
        return (g,)
    return _relu_in_place(x), back


def _relu(x):
    return np.maximum(x, 0.0)


@pytest.mark.parametrize("f", [
    lambda relu, x: np.sum(np.sin(relu(x) + x)),  # add hands the same array to both branches: x's was zeroed
    lambda relu, x: np.sum(relu(x)),  # sum's cotangent is read-only: "assignment destination is read-only"
])
def test_a_pullback_writing_into_its_cotangent_changes_nothing_else(f):
    x = np.array([1.0, -2.0, 3.0, -0.5])
    expected = _central_difference(lambda x: f(_relu, x), x)
    np.testing.assert_allclose(pb.gradient(lambda x: f(_relu_in_place, x), x)[0], expected, atol=1e-6)


def test_a_pullback_writing_into_a_large_cotangent_changes_nothing_else():
    # large enough that the sweep may hand over its own buffer, when it holds it alone
    x = np.random.default_rng(0).normal(size=1 << 17)
    alone = pb.gradient(lambda x: np.sum(np.sin(_relu_in_place(np.cos(x)))), x)[0]
    np.testing.assert_allclose(alone, np.cos(_relu(np.cos(x))) * np.where(np.cos(x) > 0, -np.sin(x), 0.0))
    shared = pb.gradient(lambda x: np.sum(np.sin(_relu_in_place(x) + x)), x)[0]
    np.testing.assert_allclose(shared, np.cos(_relu(x) + x) * np.where(x > 0, 2.0, 1.0))


def test_a_pullback_writing_into_its_cotangent_leaves_the_callers_seed_alone():
    x, seed = np.array([1.0, -2.0, 3.0]), np.ones(3)
    _, back = pb.pullback(_relu_in_place, x)
    np.testing.assert_array_equal(back(seed)[0], [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(seed, np.ones(3))


def test_per_operand_functions_writing_into_their_cotangent_each_get_their_own():
    @pb.primitive
    def times(a, b):
        return a * b

    @pb.rrule(times)
    def times_rule(a, b):
        def for_a(g):
            g *= b
            return g

        def for_b(g):
            g *= a
            return g
        return a * b, pb.PerOperand([for_a, for_b])

    a, b = np.array([1.0, 2.0]), np.array([3.0, 5.0])
    ga, gb = pb.gradient(lambda a, b: np.sum(times(a, b) + a + b), a, b)
    np.testing.assert_allclose(ga, b + 1.0)
    np.testing.assert_allclose(gb, a + 1.0)


def test_second_derivatives_through_a_pullback_writing_into_its_cotangent():
    x = np.array([1.0, -2.0, 3.0])
    f = lambda relu, x: np.sum(np.sin(relu(x) + x) ** 2)
    expected = np.array([_central_difference(lambda z: pb.gradient(lambda z: f(_relu, z), z)[0][i], x)
                         for i in range(3)])
    np.testing.assert_allclose(pb.hessian(lambda x: f(_relu_in_place, x), x), expected, atol=1e-6)


# --- a pullback that is not linear, reached through an object ------------------------------------------

class _Clipped:
    def __init__(self, n):
        self.w = np.full(n, 0.5)

    @pb.primitive
    def apply(self, x):
        return self.w * x


@pb.rrule(_Clipped.apply)
def _clipped_apply_rule(self, x):
    def back(g):
        g = np.clip(g, -1.0, 1.0)  # JAX's clip_gradient: not linear, so a factor cannot be carried past it
        return pb.Tangent(_Clipped, w=g * x), g * self.w
    return self.apply(x), back


def test_a_pullback_that_is_not_linear_gets_its_cotangent_scaled_first_through_an_object_too():
    # large enough that the sweep would carry the factor -8 on: it gave -8 * clip(1) * 0.5 = -4
    layer, x = _Clipped(1 << 15), np.ones(1 << 15)
    g_layer, g_x = pb.gradient(lambda layer, x: np.sum(-8.0 * layer.apply(x)), layer, x)
    np.testing.assert_array_equal(g_x, np.full(1 << 15, -0.5))  # clip(-8) * w
    np.testing.assert_array_equal(g_layer.w, np.full(1 << 15, -1.0))  # clip(-8) * x


# --- cotangents for parameters the caller left at their defaults -------------------------------------

@pb.primitive
def _scale(x, a=2.0):
    return x * a


@pb.rrule(_scale)
def _scale_rule(x, a=2.0):
    return x * a, lambda g: (g * a, np.sum(g * x))


def test_a_cotangent_for_a_defaulted_parameter_the_caller_left_out_is_dropped():
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(_scale(x)))(x), [2.0, 2.0])  # d/dx sum(2x)
    gx, ga = pb.gradient(lambda x, a: np.sum(_scale(x, a)), x, 3.0)  # given, `a` gets its cotangent
    np.testing.assert_allclose(gx, [3.0, 3.0])
    np.testing.assert_allclose(ga, 3.0)  # d/da sum(a x) = x1 + x2
    np.testing.assert_allclose(pb.jvp(_scale, (x,), (np.ones(2),))[1], [2.0, 2.0])


def test_a_cotangent_past_the_rules_parameters_is_still_refused():
    @pb.primitive
    def scale(x, a=2.0):
        return x * a

    @pb.rrule(scale)
    def scale_rule(x, a=2.0):
        return x * a, lambda g: (g * a, np.sum(g * x), g * x)  # one past `a`: off by one

    with pytest.raises(ValueError, match=r"returned 3 cotangents for 1 argument\(s\), and cotangent 2"):
        pb.grad(lambda x: np.sum(scale(x)))(np.array([1.0, 2.0]))


# --- a pullback writing into a 0-d cotangent --------------------------------------------------------

@pb.primitive
def _sin_p(x):
    return np.sin(x)


@pb.rrule(_sin_p)
def _sin_p_rule(x):
    def back(g):
        g *= 2.0  # NumPy backprop style: writes into its cotangent
        return (g * np.cos(x) / 2.0,)
    return np.sin(x), back


def test_a_pullback_writing_into_a_traced_0d_cotangent_leaves_the_callers_value():
    def h(c):  # vjp(sin, x)(c) + c = c cos(x) + c
        _, back = pb.vjp(_sin_p, np.array(0.7))
        return back(c)[0] + c

    np.testing.assert_allclose(pb.grad(h)(np.array(1.5)), np.cos(0.7) + 1.0)


def test_jvp_through_a_pullback_writing_into_its_0d_cotangent():
    # forward mode transposes the pullback: its zero cotangent leaf must not be written into
    _, t = pb.jvp(_sin_p, (np.array(0.7),), (np.array(1.0),))
    np.testing.assert_allclose(t, np.cos(0.7))


# --- several outputs in a list or a namedtuple -------------------------------------------------------

@pb.primitive
def _sin_cos_list(x):
    return [np.sin(x), np.cos(x)]


@pb.rrule(_sin_cos_list)
def _sin_cos_list_rule(x):
    def back(g):
        assert type(g) is list
        gs, gc = g
        return (gs * np.cos(x) - gc * np.sin(x),)
    return _sin_cos_list(x), back


_SinCos = collections.namedtuple("_SinCos", "s c")


@pb.primitive
def _sin_cos_named(x):
    return _SinCos(np.sin(x), np.cos(x))


@pb.rrule(_sin_cos_named)
def _sin_cos_named_rule(x):
    return _sin_cos_named(x), lambda g: (g.s * np.cos(x) - g.c * np.sin(x),)


SC = np.array([0.3, 1.1, -0.7])


def test_a_primitive_returning_a_list_of_outputs_has_their_gradient():
    out = pb.jvp(_sin_cos_list, (SC,), (np.ones(3),))
    assert type(out[0]) is list and type(out[1]) is list
    np.testing.assert_allclose(out[1][0], np.cos(SC))
    np.testing.assert_allclose(out[1][1], -np.sin(SC))
    g = pb.gradient(lambda x: np.sum(_sin_cos_list(x)[0]), SC)[0]  # the unused cos gets a zero cotangent
    np.testing.assert_allclose(g, np.cos(SC))
    f = lambda x: np.sum(2.0 * _sin_cos_list(x)[0] + _sin_cos_list(x)[1])  # noqa: E731
    np.testing.assert_allclose(pb.gradient(f, SC)[0], _central_difference(f, SC), atol=1e-6)


def test_the_cotangent_of_a_namedtuple_of_outputs_is_that_namedtuple():
    f = lambda x: np.sum(2.0 * _sin_cos_named(x).s + _sin_cos_named(x).c)  # noqa: E731
    np.testing.assert_allclose(pb.gradient(f, SC)[0], _central_difference(f, SC), atol=1e-6)
    y, t = pb.jvp(_sin_cos_named, (SC,), (np.ones(3),))
    assert type(y) is _SinCos and type(t) is _SinCos
    np.testing.assert_allclose(t.s, np.cos(SC))
    np.testing.assert_allclose(t.c, -np.sin(SC))
    y, back = pb.vjp(_sin_cos_named, SC)
    np.testing.assert_allclose(back(_SinCos(np.ones(3), None))[0], np.cos(SC))


def test_the_tape_keeps_no_unused_output_of_a_several_output_rule_alive():
    # what the pullbacks need is the rule's to keep; an output nothing reads is freed at once
    made = []

    @pb.primitive
    def two(x):
        a, b = x * 2.0, x * 3.0
        made.append(weakref.ref(b))
        return a, b

    @pb.rrule(two)
    def _two_rule(x):
        return two(x), lambda g: (2.0 * g[0] + 3.0 * g[1],)  # g[1]: zeros, as nothing used b

    alive = []

    def f(x):
        a = two(x)[0]
        gc.collect()
        alive.append(made[-1]() is not None)
        return np.sum(a)

    (g,) = pb.gradient(f, np.ones(3))
    np.testing.assert_array_equal(g, [2.0, 2.0, 2.0])
    assert alive == [False]


def test_a_primitive_with_a_text_output_beside_its_array_in_both_modes():
    @pb.primitive
    def labelled(x):
        return x * 2.0, "label"

    @pb.rrule(labelled)
    def _labelled_rule(x):
        return labelled(x), lambda g: (2.0 * g[0],)

    x = np.array([1.0, -2.0])
    np.testing.assert_array_equal(pb.jvp(lambda x: labelled(x)[0], (x,), (np.ones(2),))[1], [2.0, 2.0])
    np.testing.assert_allclose(pb.hessian(lambda x: np.sum(labelled(x)[0] ** 2), x), 8.0 * np.eye(2))
    assert pb.jvp(labelled, (x,), (np.ones(2),))[0][1] == "label"
