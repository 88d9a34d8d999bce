"""Gradients with respect to the user's own objects: what is refused rather than silently lost."""

import numpy as np
import pytest

import pullback as pb
from pullback import tree


# --- a list or dict subclass with attributes of its own -----------------------------------------
class Layers(list):
    """A list of layers that also keeps a shared scale as an attribute."""


class Named(dict):
    """A dict of parameters that also keeps a bias as an attribute."""


def test_list_subclass_attribute_holding_a_float_array_is_refused_not_dropped():
    layers = Layers([np.array([1.0, 2.0])])
    layers.scale = np.array([3.0])
    with pytest.raises(TypeError, match=r"Argument 0 is a Layers.*\.scale.*pb\.tree\.register"):
        pb.gradient(lambda ls: np.sum(ls[0]) * np.sum(ls.scale), layers)


def test_dict_subclass_attribute_holding_a_float_array_is_refused_not_dropped():
    params = Named(w=np.array([1.0, 2.0]))
    params.bias = np.array(2.0)
    with pytest.raises(TypeError, match=r"Argument 0\['inner'\] is a Named.*\.bias"):
        pb.gradient(lambda m: np.sum(m["inner"]["w"]) * m["inner"].bias, {"inner": params})


def test_dict_subclass_attribute_holding_a_python_float_is_a_setting():
    # a timestamp or a rate: Python numbers there are settings, as the optimisers take them
    params = Named(w=np.array([1.0, 2.0]))
    params.created, params.rate = 1.7e9, 0.1
    (g,) = pb.gradient(lambda m: np.sum(m["w"] ** 2) * m.rate, params)
    np.testing.assert_allclose(g["w"], 2 * 0.1 * params["w"])


def test_list_subclass_with_only_plain_attributes_is_differentiated():
    layers = Layers([np.array([1.0, 2.0]), 3.0])
    layers.name, layers.depth = "encoder", 2
    (g,) = pb.gradient(lambda ls: np.sum(ls[0] ** 2) * ls[1], layers)
    np.testing.assert_allclose(g[0], 2 * 3.0 * np.array([1.0, 2.0]))  # d/dw sum(w^2) * s = 2 w s
    assert g[1] == pytest.approx(5.0)  # sum(w^2)
    assert layers.name == "encoder" and len(layers) == 2


def test_registered_list_subclass_with_attributes_gets_their_gradient():
    class Scaled(list):
        pass

    tree.register(Scaled, lambda s: {"items": list(s), "scale": s.scale},
                  lambda s, kids: _scaled_like(Scaled, kids))
    layers = Scaled([np.array([1.0, 2.0])])
    layers.scale = np.array([3.0])
    (g,) = pb.gradient(lambda ls: np.sum(ls[0]) * np.sum(ls.scale), layers)
    np.testing.assert_allclose(g.items[0], [3.0, 3.0])
    np.testing.assert_allclose(g.scale, [3.0])


def test_registered_list_subclass_of_items_alone_gets_a_list_gradient():
    class Stack(list):
        pass

    tree.register(Stack, lambda s: dict(enumerate(s)), lambda s, kids: Stack(kids.values()))
    weights = Stack([np.full(2, 1.0), np.full(2, 3.0)])
    (g,) = pb.gradient(lambda ws: np.sum(ws[0] * ws[1]), weights)
    assert type(g) is list  # iterating it gives the gradients, as for a list argument
    np.testing.assert_allclose(g[-1], weights[0])
    assert sum(np.sum(part ** 2) for part in g) == pytest.approx(2 * 9.0 + 2 * 1.0)


def _scaled_like(cls, kids):
    new = cls(kids["items"])
    new.scale = kids["scale"]
    return new


# --- functions kept in a differentiated object ------------------------------------------------
class ClosesOverSelf:
    def __init__(self):
        self.w = np.array([1.0, 2.0])
        self.score = lambda x: np.sum(self.w * x)


class ClosesOverField:
    def __init__(self):
        self.w = np.array([1.0, 2.0])
        w = self.w
        self.score = lambda x: np.sum(w * x)


class DefaultHoldsField:
    def __init__(self):
        self.w = np.array([1.0, 2.0])
        self.score = lambda x, w=self.w: np.sum(w * x)


@pytest.mark.parametrize("cls", [ClosesOverSelf, ClosesOverField, DefaultHoldsField])
def test_function_field_reaching_a_differentiated_value_is_refused(cls):
    with pytest.raises(TypeError, match=r"Argument 0\.score is a function .*argument 0.*def score\(self"):
        pb.gradient(lambda m: m.score(2.0) + np.sum(m.w), cls())


@pytest.mark.parametrize("cls", [ClosesOverSelf, ClosesOverField])
def test_function_field_reaching_a_differentiated_value_is_refused_under_jit(cls):
    loss = lambda m: m.score(2.0) + np.sum(m.w)  # noqa: E731
    with pytest.raises(TypeError, match=r"Argument 0\.score is a function .*argument 0"):
        pb.jit(lambda m: pb.gradient(loss, m))(cls())
    with pytest.raises(TypeError, match=r"Argument 0\.score is a function .*argument 0"):
        pb.gradient(pb.jit(loss), cls())


def test_function_given_by_keyword_closing_over_a_differentiated_array_is_refused():
    model = {"w": np.array([1.0, 2.0])}
    w = model["w"]
    with pytest.raises(TypeError, match=r"Keyword argument 'score' is a function .*argument 0\['w'\]"):
        pb.gradient(lambda m, score=None: score(2.0) + np.sum(m["w"]), model, score=lambda x: np.sum(w * x))


def test_function_field_closing_over_constants_is_differentiated():
    scale = np.array([2.0, 3.0])

    class Model:
        def __init__(self):
            self.w = np.array([1.0, 2.0])
            self.score = lambda x: np.sum(scale * x)

    (g,) = pb.gradient(lambda m: m.score(m.w), Model())
    np.testing.assert_allclose(g.w, scale)  # d/dw sum(scale * w)
    assert g.score is None


def test_function_field_closing_over_an_undifferentiated_argument_is_differentiated():
    model, data = {"w": np.array([1.0, 2.0])}, {"x": np.array([3.0, 4.0])}
    x = data["x"]
    data["loss"] = lambda w: np.sum(w * x)
    g = pb.grad(lambda m, d: d["loss"](m["w"]), argnums=0)(model, data)
    np.testing.assert_allclose(g["w"], x)  # d/dw sum(w * x)


# --- fields that trainable() leaves out ----------------------------------------------------------
class Normalised:
    """A layer whose running statistics are not trained."""

    def __init__(self, w=None, stats=None, momentum=0.9):
        self.w = np.array([1.0, 2.0]) if w is None else w
        self.stats = np.array([3.0, 4.0]) if stats is None else stats
        self.momentum = momentum

    def trainable(self):
        return ("w",)


def _normalised_loss(m):
    return np.sum(m.w * m.stats ** 2) * m.momentum


@pytest.mark.parametrize("tangent", [
    Normalised(np.ones(2), np.array([5.0, 5.0])),
    Normalised(np.ones(2), None, 0.5),
    pb.Tangent(Normalised, w=np.ones(2), stats=np.ones(2)),
], ids=["array field", "float field", "Tangent"])
def test_nonzero_tangent_for_a_field_trainable_leaves_out_is_refused(tangent):
    with pytest.raises(TypeError, match=r"tangent is given for primal 0\.(stats|momentum).*trainable\(\)"):
        pb.jvp(_normalised_loss, (Normalised(),), (tangent,))


@pytest.mark.parametrize("tangent", [
    Normalised(np.ones(2)),  # the frozen fields copied from the primal
    pb.Tangent(Normalised, w=np.ones(2), stats=None, momentum=0.0),
    tree.fmap(lambda v: np.ones_like(v) if isinstance(v, np.ndarray) else v, Normalised(), trainable_only=True),
], ids=["copied", "None and zero", "fmap trainable_only"])
def test_jvp_along_the_trainable_fields_matches_the_hand_derivative(tangent):
    m = Normalised()
    _, y_dot = pb.jvp(_normalised_loss, (m,), (tangent,))
    assert y_dot == pytest.approx(np.sum(m.stats ** 2) * m.momentum)  # d/dw along ones: sum(stats^2) * momentum


def test_tangent_at_a_frozen_place_of_a_tied_array_agrees_with_its_trainable_place():
    class Tied:
        def __init__(self, frozen, w):
            self.frozen, self.w = frozen, w

        def trainable(self):
            return ("w",)

    w = np.array([1.0, 2.0])
    _, y_dot = pb.jvp(lambda t: np.sum(t.w ** 2), (Tied(w, w),), (Tied(np.ones(2), np.ones(2)),))
    assert y_dot == pytest.approx(2 * np.sum(w))  # d/dw sum(w^2) along ones
    with pytest.raises(TypeError, match=r"primal 0\.frozen"):
        pb.jvp(lambda t: np.sum(t.w ** 2), (Tied(w, w),), (Tied(np.full(2, 7.0), np.ones(2)),))


class StaticTrainable:
    def __init__(self):
        self.w, self.stats = np.array([1.0, 2.0]), np.array([3.0, 4.0])

    @staticmethod
    def trainable():
        return ("w",)


class ClassTrainable(StaticTrainable):
    @classmethod
    def trainable(cls):
        return ("w",)


@pytest.mark.parametrize("cls", [StaticTrainable, ClassTrainable])
def test_trainable_declared_as_static_or_class_method_is_honoured(cls):
    (g,) = pb.gradient(lambda m: np.sum(m.w * m.stats), cls())
    np.testing.assert_allclose(g.w, [3.0, 4.0])  # d/dw sum(w * stats)
    assert g.stats is None
    assert tree.trainable_names(cls()) == {"w"}


# --- classes whose __getattr__ answers for names they lack -------------------------------------------
class LooksUpEverything:
    """Slots, and a `__getattr__` raising KeyError (not AttributeError) for a name it lacks."""

    __slots__ = ("w", "unset")

    def __init__(self):
        self.w = np.array([1.0, 2.0])

    def __getattr__(self, name):
        raise KeyError(name)


def test_object_whose_getattr_raises_keyerror_is_walked_by_its_fields():
    (g,) = pb.gradient(lambda m: np.sum(m.w ** 2), LooksUpEverything())
    np.testing.assert_allclose(g.w, [2.0, 4.0])  # d/dw sum(w^2) = 2w
    assert list(tree.children(LooksUpEverything())) == ["w"]  # the unset slot is skipped


# --- comparing gradients of objects -----------------------------------------------------------------
class Stack:
    def __init__(self):
        self.layers = [np.array([1.0, 2.0]), np.array([3.0])]
        self.by_name = {"scale": np.array([0.5, 0.5])}


def _stack_loss(m):
    return np.sum(m.layers[0] ** 2) + np.sum(m.layers[1]) * np.sum(m.by_name["scale"])


def test_gradients_of_an_object_with_list_and_dict_fields_compare_equal():
    (g1,) = pb.gradient(_stack_loss, Stack())
    (g2,) = pb.gradient(_stack_loss, Stack())
    assert g1 == g2
    other = Stack()
    other.layers[1] = np.array([4.0])
    (g3,) = pb.gradient(_stack_loss, other)
    assert not g1 == g3  # the scale's gradient is sum(layers[1]): 3 against 4


def test_tangents_holding_arrays_of_other_shapes_compare_unequal():
    a = pb.Tangent(Stack, layers=[np.ones(2)], by_name=None)
    b = pb.Tangent(Stack, layers=[np.ones(3)], by_name=None)
    c = pb.Tangent(Stack, layers=[np.ones(2), None], by_name=None)
    assert not a == b and not a == c


# --- numbers in objects under pb.jit ------------------------------------------------------------------
class Scaled:
    def __init__(self, n):
        self.w, self.n = np.array([1.0, 2.0]), n

    def trainable(self):
        return ("w",)


@pytest.mark.parametrize("n", [3, 3.0, True])
def test_number_fields_under_jit_of_gradient_give_the_eager_gradient(n):
    loss = lambda m: np.sum(m.w ** 2) * m.n  # noqa: E731
    step = pb.jit(lambda m: pb.gradient(loss, m))
    for _ in range(2):  # the trace, then a replay
        (g,) = step(Scaled(n))
        np.testing.assert_allclose(g.w, 2 * np.array([1.0, 2.0]) * n)  # d/dw sum(w^2) n = 2 w n
        assert g.n is None


def test_shared_activation_functions_of_many_layers_are_looked_into_once(monkeypatch):
    from pullback import _leaves

    looked = []
    captured = _leaves._captured_values
    monkeypatch.setattr(_leaves, "_captured_values", lambda fn: looked.append(fn) or captured(fn))
    model = pb.nn.Chain(*[pb.nn.Dense(3, 3, pb.nn.relu, rng=i) for i in range(30)])
    pb.gradient(lambda m, x: np.sum(m(x) ** 2), model, np.ones((2, 3)))
    assert len(looked) <= 3  # relu and what it wraps, not once per layer


def test_a_registered_list_subclass_whose_children_are_not_its_items_gets_a_tangent():
    class Params(list):
        pass

    # children 0 and 1 are items 0 and 2: a list gradient would put item 2's gradient at position 1
    tree.register(Params, lambda p: {0: p[0], 1: p[2]}, lambda p, kids: Params([kids[0], p[1], kids[1]]))
    p = Params([np.array([1.0, 2.0]), np.array([7.0]), np.array([3.0])])
    (g,) = pb.gradient(lambda p: np.sum(p[0] ** 2) + np.sum(p[2] ** 3), p)
    assert isinstance(g, pb.Tangent)
    np.testing.assert_allclose(tree.child_of(g, 1), [27.0])


def test_trainable_given_by_a_metaclass_is_read():
    class Meta(type):
        def __getattr__(cls, name):
            if name == "trainable":
                return lambda self: ("b",)
            raise AttributeError(name)

    class Layer(metaclass=Meta):
        def __init__(self):
            self.w, self.b = np.array([1.0]), np.array([2.0])

    (g,) = pb.gradient(lambda m: np.sum(m.w * m.b), Layer())
    assert g.w is None
    np.testing.assert_allclose(g.b, [1.0])


def test_a_function_reaching_a_differentiated_field_through_another_closure_is_refused():
    class Model:
        def __init__(self):
            self.w = np.array([1.0, 2.0])
            w = self.w
            inner = lambda x: np.sum(w * x)  # noqa: E731
            self.score = lambda x: inner(x) * 2.0

    with pytest.raises(TypeError, match=r"score is a function whose closure or defaults hold argument 0\.w"):
        pb.gradient(lambda m: m.score(np.ones(2)), Model())
