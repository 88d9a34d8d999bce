"""The public entry points: gradient, withgradient, pullback, grad, value_and_grad, and their errors."""

import collections
import functools
import types
from collections import namedtuple

import numpy as np
import pytest

import pullback as pb
from pullback.testing import assert_gradient


class Dense:
    def __init__(self, w, b, act=np.tanh):
        self.w, self.b, self.act = w, b, act

    def __call__(self, x):
        return self.act(self.w @ x + self.b)


def test_issue_example_structure_dtypes_and_values():
    rng = np.random.default_rng(0)
    m = Dense(rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=2).astype(np.float32))
    x = rng.normal(size=3).astype(np.float32)
    val, (gm, gx) = pb.withgradient(lambda m, x: np.sum(m(x) ** 2), m, x)
    assert isinstance(gm, pb.Tangent) and gm.primal_type is Dense
    assert gm.w.dtype == np.float32 and gm.w.shape == (2, 3)
    assert gm.b.dtype == np.float32 and gm.b.shape == (2,)
    assert gm.act is None
    assert gx.dtype == np.float32 and gx.shape == (3,)
    # hand derivation: y = tanh(Wx + b), L = sum(y^2), dL/dpre = 2 y (1 - y^2)
    w, b = m.w.astype(np.float64), m.b.astype(np.float64)
    y = np.tanh(w @ x + b)
    dpre = 2 * y * (1 - y**2)
    np.testing.assert_allclose(val, np.sum(y**2), rtol=1e-5)
    np.testing.assert_allclose(gm.w, np.outer(dpre, x), rtol=1e-4)
    np.testing.assert_allclose(gm.b, dpre, rtol=1e-4)
    np.testing.assert_allclose(gx, w.T @ dpre, rtol=1e-4)


def test_gradient_matches_finite_differences_for_several_arguments():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=4)
    assert_gradient(lambda a, b, c: np.sum(np.sin(a * b) * c), a, b, 1.5, dense_up_to=None, rtol=1e-5, atol=1e-7)


def test_keyword_arguments_are_passed_but_not_differentiated():
    x = np.array([1.0, 2.0])
    (g,) = pb.gradient(lambda x, *, scale: np.sum(x * scale), x, scale=np.array([3.0, 4.0]))
    np.testing.assert_allclose(g, [3.0, 4.0])


def test_withgradient_with_aux_output_differentiates_first_element_only():
    x = np.array([1.0, 2.0, 3.0])

    def f(x):
        loss = np.sum(x**2)
        return loss, {"mean": np.mean(x), "label": "run"}

    val, (g,) = pb.withgradient(f, x)
    np.testing.assert_allclose(g, 2 * x)
    assert val[0] == pytest.approx(14.0)
    assert type(val[1]["mean"]) is not pb._values.Tracked
    assert val[1]["mean"] == pytest.approx(2.0) and val[1]["label"] == "run"


def test_withgradient_with_namedtuple_output():
    Out = namedtuple("Out", "loss extra")
    x = np.array([2.0])
    val, (g,) = pb.withgradient(lambda x: Out(np.sum(x**3), x * 2), x)
    assert isinstance(val, Out)
    assert isinstance(val.extra, np.ndarray)
    np.testing.assert_allclose(val.extra, [4.0])
    np.testing.assert_allclose(g, [12.0])


def test_pullback_structured_seed_and_repeated_calls():
    x = np.array([1.0, 2.0])
    y, back = pb.pullback(lambda x: {"a": x * 3.0, "b": (np.sum(x), x**2)}, x)
    np.testing.assert_allclose(y["a"], [3.0, 6.0])
    (g1,) = back({"a": np.array([1.0, 0.0]), "b": (None, None)})
    np.testing.assert_allclose(g1, [3.0, 0.0])
    (g2,) = back({"a": None, "b": (2.0, np.array([1.0, 1.0]))})
    np.testing.assert_allclose(g2, 2.0 + 2 * x)
    assert back({"a": None, "b": None}) == (None,)


def test_pullback_rejects_mismatched_seed_shape():
    _, back = pb.pullback(lambda x: x * 2, np.ones(3))
    with pytest.raises(ValueError, match="shape"):
        back(np.ones(2))


def test_pullback_refuses_a_complex_seed_for_a_real_output():
    # its imaginary part would be dropped without a word (Re(c * dy) of a real dy): zeros here
    _, back = pb.pullback(lambda x: x * 2, np.ones(2))
    with pytest.raises(TypeError, match=r"cotangent of output is complex, but the output is real .*np\.real"):
        back(np.ones(2) * 1j)
    _, back = pb.pullback(lambda z: z * 2j, np.array([1 + 2j, 0.5j]))  # a complex output takes it
    np.testing.assert_allclose(back(np.ones(2) + 1j)[0], [-2 + 2j, -2 + 2j])


def test_grad_and_value_and_grad_argnums_and_aux():
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    f = lambda x, y: np.sum(x * y)
    np.testing.assert_allclose(pb.grad(f)(x, y), y)
    gx, gy = pb.grad(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, y)
    np.testing.assert_allclose(gy, x)
    np.testing.assert_allclose(pb.grad(f, argnums=-1)(x, y), x)
    val, g = pb.value_and_grad(f, argnums=1)(x, y)
    assert val == pytest.approx(11.0)
    np.testing.assert_allclose(g, x)
    (val, aux), g = pb.value_and_grad(lambda x: (np.sum(x**2), x + 1), has_aux=True)(x)
    np.testing.assert_allclose(aux, x + 1)
    np.testing.assert_allclose(g, 2 * x)
    g, aux = pb.grad(lambda x: (np.sum(x**2), "tag"), has_aux=True)(x)
    assert aux == "tag"
    with pytest.raises(TypeError, match="pair"):
        pb.grad(lambda x: np.sum(x), has_aux=True)(x)
    with pytest.raises(ValueError, match="argnums"):
        pb.grad(f, argnums=2)(x, y)


@pytest.mark.parametrize("value", [np.float32(2.0), np.array(2.0), 2.0])
def test_zero_dimensional_and_numpy_scalar_outputs_count_as_scalars(value):
    (g,) = pb.gradient(lambda x: x * value, np.array(3.0))
    assert float(g) == pytest.approx(2.0)


def test_array_output_error_message():
    with pytest.raises(TypeError, match="Output is an array, so the gradient is not defined. Perhaps you wanted jacobian."):
        pb.gradient(lambda x: x * 2, np.ones(3))
    with pytest.raises(TypeError, match="Output is an array"):
        pb.gradient(lambda x: x[:1], np.ones(3))  # a 1-element array is still an array


def test_complex_output_error_message():
    with pytest.raises(TypeError, match="Output is complex, so the gradient is not defined."):
        pb.gradient(lambda x: 1j, np.ones(3))


def test_other_non_scalar_output_error_message():
    for bad in ("text", None, [1.0], {"a": 1.0}):
        with pytest.raises(TypeError, match="Output should be scalar"):
            pb.gradient(lambda x, bad=bad: bad, np.ones(3))
    with pytest.raises(TypeError, match="Output should be scalar"):
        pb.gradient(lambda x: (np.sum(x), 1.0), np.ones(3))


def test_output_independent_of_arguments_gives_none():
    assert pb.gradient(lambda x: 3.0, np.ones(2)) == (None,)
    assert pb.gradient(lambda x, y: np.sum(y), np.ones(2), np.ones(2))[0] is None


def test_float32_stays_float32_with_python_and_float64_scalars():
    x = np.ones(3, np.float32)
    for f in (lambda x: np.sum(x * 2.5), lambda x: np.sum(np.exp(x) / 3.0), lambda x: np.sum(x ** 2) + 1.0):
        (g,) = pb.gradient(f, x)
        assert g.dtype == np.float32
    # A float64 array mixed in promotes the computation, yet the gradient keeps the argument's dtype.
    (g,) = pb.gradient(lambda x: np.sum(x * np.ones(3)), x)
    assert g.dtype == np.float32


def test_python_float_and_numpy_scalar_arguments_keep_their_types():
    gf, gs = pb.gradient(lambda a, b: a * b * 2.0, 3.0, np.float32(4.0))
    assert type(gf) is float and gf == pytest.approx(8.0)
    assert type(gs) is np.float32 and gs == pytest.approx(6.0)


def test_python_float_argument_is_weak():
    x = np.ones(2, np.float32)
    (g, gs) = pb.gradient(lambda x, s: np.sum(x * s), x, 2.0)
    assert g.dtype == np.float32 and type(gs) is float and gs == pytest.approx(2.0)


def test_complex_arguments_get_complex_gradients():
    # (tests/test_complex.py has the rest.) An unused complex argument gets None, as a float one does.
    assert pb.gradient(lambda z: 1.0, np.ones(2, complex)) == (None,)
    (g,) = pb.gradient(lambda x: np.sum(np.abs(x * 1j)), np.array([2.0, -3.0]))
    np.testing.assert_allclose(g, [1.0, -1.0])  # |i x| = |x|, a real input's gradient is real


def test_returned_gradients_never_alias_each_other_or_inputs():
    x, y = np.ones(3), np.ones(3)
    gx, gy = pb.gradient(lambda x, y: np.sum(x + y), x, y)
    assert gx is not gy and not np.shares_memory(gx, gy)
    gx[0] = 100.0
    assert gy[0] == 1.0 and x[0] == 1.0
    (g,) = pb.gradient(lambda x: np.sum(x), np.ones(3))
    assert g.flags.writeable  # not a read-only broadcast view


def test_pullback_results_never_alias_the_seed_or_each_other():
    dy = np.array([1.0, 2.0])
    _, back = pb.pullback(lambda a, b: a + b, np.zeros(2), np.zeros(2))
    ga, gb = back(dy)
    np.testing.assert_allclose(ga, dy)
    assert not np.shares_memory(ga, dy) and not np.shares_memory(gb, dy) and not np.shares_memory(ga, gb)


def test_a_gradient_that_is_a_view_of_a_fresh_buffer_is_not_copied_needlessly():
    @pb.primitive
    def scale_t(w):
        return w.T * 2.0

    @pb.rrule(scale_t)
    def scale_t_rule(w):
        return scale_t(w), lambda g: ((g * 2.0).T,)  # a transposed view of a fresh array

    w = np.ones((2, 3))
    (g,) = pb.gradient(lambda w: np.sum(scale_t(w)), w)
    assert g.shape == (2, 3) and g.base is not None  # handed out as it came, still safe
    np.testing.assert_allclose(g, 2.0)


def test_an_argument_named_twice_in_argnums_gets_its_gradient_at_both_places():
    f = lambda x, y: np.sum(x * y * y)
    x, y = np.ones(2), np.array([2.0, 3.0])
    first, second, third = pb.grad(f, argnums=(0, 1, 0))(x, y)
    np.testing.assert_array_equal(first, y * y)
    np.testing.assert_array_equal(third, y * y)
    np.testing.assert_array_equal(second, 2 * x * y)
    assert not np.shares_memory(first, third)  # each result is the caller's own array
    a, b = pb.grad(lambda d: np.sum(d["w"] ** 2), argnums=(0, -1))({"w": x})
    np.testing.assert_array_equal(a["w"], 2 * x)
    assert not np.shares_memory(a["w"], b["w"])


@pytest.mark.parametrize("argnums", [1.0, True, (0, 1.0), (), "0"])
def test_argnums_other_than_ints_are_refused(argnums):
    with pytest.raises(TypeError, match="argnums should be an int or a sequence of ints"):
        pb.grad(lambda x: np.sum(x), argnums=argnums)


def test_an_object_array_of_floats_at_a_differentiated_place_is_refused_by_its_place():
    floats = np.array([1.0, 2.0], dtype=object)
    with pytest.raises(TypeError, match=r"Argument 0 is a NumPy array of dtype object holding floats.*astype\(float\)"):
        pb.gradient(lambda a: np.sum(a * a), floats)
    with pytest.raises(TypeError, match=r"Argument 1\['a'\] is a NumPy array of dtype object"):
        pb.gradient(lambda s, d: s * np.sum(d["a"] * d["a"]), 1.0, {"a": floats})
    # object arrays of other things carry no gradient, as before
    names = np.array(["w", None], dtype=object)
    (g,) = pb.gradient(lambda d: np.sum(d["x"] ** 2), {"x": np.ones(2), "names": names})
    assert g["names"] is None
    np.testing.assert_array_equal(g["x"], [2.0, 2.0])


@pytest.mark.parametrize("expression", ["s + [1.0, 2.0]", "[1.0, 2.0] - s", "s * (1.0, 2.0)", "s < [1, 2]", "s ** [2]"])
def test_a_python_float_being_differentiated_meets_a_list_as_python_s_float_does(expression):
    f = eval("lambda s: " + expression)
    with pytest.raises(TypeError):
        f(0.5)
    with pytest.raises(TypeError):
        pb.pullback(f, 0.5)
    # a NumPy scalar does what it does without pullback (most operators read the list as an array)
    try:
        expected = f(np.float64(0.5))
    except TypeError:
        with pytest.raises(TypeError):
            pb.pullback(f, np.float64(0.5))
    else:
        np.testing.assert_array_equal(pb.pullback(f, np.float64(0.5))[0], expected)


def test_a_python_float_being_differentiated_compares_with_a_list_as_python_s_float_does():
    assert pb.pullback(lambda s: s == [0.5, 2.0], 0.5)[0] is False
    assert pb.pullback(lambda s: [0.5] != s, 0.5)[0] is True
    np.testing.assert_array_equal(pb.pullback(lambda s: s == [0.5, 2.0], np.float32(0.5))[0], [True, False])


@pytest.mark.parametrize("make", [collections.deque, type("Pair", (tuple,), {}),
                                  lambda items: types.MappingProxyType(dict(enumerate(items)))])
def test_a_container_pb_tree_does_not_see_inside_is_refused_where_it_would_hide_gradients(make):
    w = np.array([2.0])
    with pytest.raises(TypeError, match="which pb.tree does not look inside"):
        pb.gradient(lambda c: np.sum(c[0] ** 2), make([w]))
    with pytest.raises(TypeError, match=r"Argument 0\['m'\] is a"):
        pb.gradient(lambda d: np.sum(d["m"][0] ** 2), {"m": make([w])})
    # holding no numbers, or passed by keyword, it is a constant as before
    assert pb.gradient(lambda x, names: np.sum(x) * len(names), w, make(["a", "b"]))[0].tolist() == [2.0]


def test_a_partial_holding_weights_is_refused_not_given_a_silent_none():
    # pb.tree does not look inside a functools.partial: a model written as a function with its weights
    # bound would get None, and an optimiser would train nothing
    def apply(w, x):
        return x @ w

    w = np.ones((2, 2))
    for model in (functools.partial(apply, w), functools.partial(apply, w=w), {"f": functools.partial(apply, w)}):
        with pytest.raises(TypeError, match=r"is a partial, which pb.tree does not look inside.*arguments of the call, f\(w, x\), differentiated in w"):
            pb.gradient(lambda m: 0.0, model)
    # a partial of numbers (options, as an activation's slope) is a constant, as a function is
    scaled = functools.partial(np.multiply, 2.0)
    assert pb.gradient(lambda x, f: np.sum(f(x)), w, scaled) == (pytest.approx(np.full((2, 2), 2.0)), None)


# --- containers pb.tree does not see inside, argnums, bound methods, hashing, one object by two names ---

def test_stop_gradient_strips_a_deque():
    # d/dx sum(stop(x) * x) = stop(x) = 1; the deque comes back holding the traced x, so 2 is given
    x = np.ones(2)
    (g,) = pb.gradient(lambda x: np.sum(pb.stop_gradient(collections.deque([x]))[0] * x), x)
    np.testing.assert_allclose(g, x)


class _TuplePair(tuple):
    pass


def test_stop_gradient_strips_a_tuple_subclass():
    x = np.ones(2)
    (g,) = pb.gradient(lambda x: np.sum(pb.stop_gradient(_TuplePair((x,)))[0] * x), x)
    np.testing.assert_allclose(g, x)


def test_the_same_array_at_a_position_not_in_argnums_is_a_constant():
    # JAX: jax.grad(lambda x, y: sum(x * y), argnums=0)(w, w) == w; pullback gives the same for y by
    # keyword (test_keyword_tie_gradient_...), but 2w for y positional and not in argnums
    w = np.array([1.0, 2.0])
    np.testing.assert_allclose(pb.grad(lambda x, *, y: np.sum(x * y), argnums=0)(w, y=w), w)
    np.testing.assert_allclose(pb.grad(lambda x, y: np.sum(x * y), argnums=0)(w, w), w)


def test_an_objects_array_at_a_position_not_in_argnums_is_a_constant():
    w = np.array([1.0, 2.0])

    class M:
        def __init__(self, w):
            self.w = w

    g = pb.grad(lambda p, y: np.sum(p.w * y), argnums=0)(M(w), w)
    np.testing.assert_allclose(g.w, w)  # JAX with a dict: {'w': w}


class _ModelWithLoss:
    def __init__(self, w):
        self.w = w

    def loss(self, x):
        return np.sum((self.w * x) ** 2)


def test_a_bound_method_of_an_object_holding_weights_is_refused():
    # a functools.partial holding weights is refused (test_api); a bound method whose object holds
    # weights silently gets None
    m = _ModelWithLoss(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="bound method|method"):
        pb.gradient(lambda fn: fn(np.ones(2)), m.loss)


def test_a_bound_method_field_of_an_object_not_differentiated_is_refused():
    class Holder:
        def __init__(self, m):
            self.fn = m.loss

    m = _ModelWithLoss(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="bound method|method"):
        pb.gradient(lambda h: h.fn(np.ones(2)), Holder(m))


def test_aux_in_a_deque_comes_back_plain():
    (val, aux), g = pb.value_and_grad(lambda x: (np.sum(x), collections.deque([x * 2.0])), has_aux=True)(np.ones(2))
    assert type(aux[0]) is np.ndarray  # a Tracked comes back, unusable after the call
    np.testing.assert_allclose(aux[0] + 1.0, [3.0, 3.0])


def test_aux_in_a_tuple_subclass_comes_back_plain():
    (val, aux), g = pb.value_and_grad(lambda x: (np.sum(x), _TuplePair((x * 2.0,))), has_aux=True)(np.ones(2))
    assert type(aux[0]) is np.ndarray
    np.testing.assert_allclose(aux[0] + 1.0, [3.0, 3.0])


def test_jvp_refuses_a_nonzero_tangent_for_an_integer_argument():
    # the tangent 1 of n is dropped silently: y_dot = 3 where n = 3.0 would give 4 (JAX refuses)
    with pytest.raises((TypeError, ValueError)):
        pb.jvp(lambda x, n: x * n, (np.ones(2), 3), (np.ones(2), 1))


def test_hashing_a_differentiated_float_names_stop_gradient():
    # without pullback `x in {3.0}` is True; under it: TypeError: unhashable type: 'Tracked'
    f = lambda x: x * 2.0 if x in {3.0} else x
    try:
        (g,) = pb.gradient(f, 3.0)
    except TypeError as error:
        assert "stop_gradient" in str(error) or "pullback" in str(error), f"an unclear error: {error}"
        return
    assert g == 2.0


def test_an_object_passed_positionally_and_by_keyword_is_one_object_inside_f():
    # README: containers are copied for the call and "shared sub-objects stay shared"; here the
    # positional and the keyword place get two copies, so a write through one is not seen through the
    # other and f computes another value than without pullback (3.0 instead of 106.0)
    class M:
        def __init__(self, w):
            self.w = w

    def f(p, *, q):
        p.w = p.w * 2.0
        return np.sum(q.w) + (100.0 if p is q else 0.0)

    plain = M(np.array([1.0, 2.0]))
    expected = f(plain, q=plain)
    assert expected == 106.0
    m = M(np.array([1.0, 2.0]))
    val, _ = pb.withgradient(f, m, q=m)
    assert val == expected


def test_a_dict_passed_positionally_and_by_keyword_is_one_dict_inside_f():
    def h(p, *, q):
        p["a"] = 5
        return 0.0 * p["x"] + q["a"]

    d = {"a": 1, "x": 1.0}
    expected = h(d, q=d)
    assert expected == 5.0
    d = {"a": 1, "x": 1.0}
    val, _ = pb.withgradient(h, d, q=d)
    assert val == expected


# --- stop_gradient's plain value is read-only: in NumPy it is x itself -------------------------------------

SG = np.array([0.26, 0.74, 1.31, 0.42])


@pytest.mark.parametrize("write", [
    lambda s: s.__setitem__(0, 5.0),
    lambda s: s.fill(7.0),
    lambda s: s.__imul__(0.0),
    lambda s: np.multiply(s, 0.0, out=s),
], ids=["s[0] = 5", "s.fill(7)", "s *= 0", "np.multiply(s, 0, out=s)"])
def test_a_write_into_stop_gradient_of_an_array_being_differentiated_is_refused(write):
    def of_argument(x):
        write(pb.stop_gradient(x))
        return np.sum(x ** 2)

    def of_intermediate(x):
        y = np.sin(x)
        write(pb.stop_gradient(y))  # would change y, which sin's and the product's derivatives read
        return np.sum(y * x)

    for f in (of_argument, of_intermediate):
        a = SG.copy()
        with pytest.raises(ValueError, match="read-only"):
            pb.gradient(f, a)
        with pytest.raises(ValueError, match="read-only"):
            pb.jvp(f, (a,), (np.ones(4),))
        np.testing.assert_array_equal(a, SG)  # the caller's array is untouched


def test_stop_gradient_of_an_array_being_differentiated_is_a_read_only_view_of_its_value():
    def f(x):
        s = pb.stop_gradient(x)
        assert s is pb.stop_gradient(x)  # one plain value per array, as long as it holds that value
        assert type(s) is np.ndarray and not s.flags.writeable
        c = s.copy()
        c[0] = 5.0  # a copy is the caller's to write
        del s  # (a write into x while s is in use is refused: without pullback s would show it)
        x[1] = 2.0  # a write into x itself is recorded ...
        assert pb.stop_gradient(x)[1] == 2.0  # ... and seen through its plain value
        return np.sum(x * c)

    a = SG.copy()
    (g,) = pb.gradient(f, a)
    np.testing.assert_allclose(g, [5.0, 0.0, SG[2], SG[3]])  # d/dx sum(x * const), x[1] overwritten
    np.testing.assert_array_equal(a, SG)
    plain = np.ones(2)
    assert pb.stop_gradient(plain) is plain and plain.flags.writeable  # a plain array is itself


# --- pullback's y is the caller's: back does not read it ---------------------------------------------------

def test_pullback_returns_an_integer_argument_as_that_array():
    # as without pullback, and as a float argument returned is: not a copy
    x, labels = np.array([1.0, 2.0]), np.arange(3)
    y, back = pb.pullback(lambda x, i: (x * 2.0, i), x, labels)
    assert y[1] is labels
    np.testing.assert_array_equal(back((np.ones(2), None))[0], [2.0, 2.0])
    y, _ = pb.vjp(lambda x, i: (x * 2.0, i), x, labels)
    assert y[1] is labels


def test_vjp_residual_computed_in_place_on_the_returned_output():
    # y -= t, then back(y): the gradient of 0.5 * |exp(x) - t|^2. exp's rule keeps its output.
    t = np.array([1.0, 2.0, 3.0, 1.0])
    y, back = pb.vjp(np.exp, SG.copy())
    y -= t
    (g,) = back(y)
    np.testing.assert_allclose(g, np.exp(SG) * (np.exp(SG) - t))


@pytest.mark.parametrize("f, derivative", [
    (np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    (np.sqrt, lambda x: 0.5 / np.sqrt(x)),
    (np.exp, np.exp),
    (np.cumprod, lambda x: np.array([np.sum(np.cumprod(x)[k:]) / x[k] for k in range(x.size)])),
])
def test_overwriting_pullbacks_output_leaves_back_as_it_was(f, derivative):
    y, back = pb.pullback(f, SG.copy())
    np.testing.assert_allclose(y, f(SG))
    y[...] = 0.0
    for _ in range(2):  # back may be called many times
        np.testing.assert_allclose(back(np.ones(4))[0], derivative(SG))


def test_pullbacks_outputs_share_memory_as_numpys_do():
    def f(x, c):
        e = np.exp(x)
        return e, e[:2], e.reshape(2, 2).T, x, c[1:]

    a, c = SG.copy(), np.ones(3)
    (e, head, square, same, tail), back = pb.pullback(f, a, c=c)
    expected = f(SG.copy(), np.ones(3))
    for got, want in zip((e, head, square, same, tail), expected):
        np.testing.assert_array_equal(got, want)
        assert got.strides == want.strides
    assert np.shares_memory(e, head) and np.shares_memory(e, square)
    assert same is a and np.shares_memory(tail, c)  # the caller's own arrays, as without pullback
    head[0] = 100.0
    assert e[0] == 100.0 and square[0, 0] == 100.0
    np.testing.assert_allclose(back((np.ones(4), None, None, None, None))[0], np.exp(SG))
    np.testing.assert_array_equal(a, SG)
