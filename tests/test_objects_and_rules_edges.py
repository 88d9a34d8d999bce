"""Edge cases of structural gradients of user objects (`pb.tree`), of argument handling and of the
extension API (`pb.primitive`, `pb.rrule`, thunks): private and inherited slots, namedtuple and
container subclasses, the AttrDict recipe, ties through keywords, frozen fields and jvp tangents,
writes through aliases that are not differentiated, float subclasses, user rules whose pullbacks
are not linear, and the refusals for what cannot be differentiated.

Every expected value is computed independently (plain NumPy, by hand, or by central differences).
"""

from collections import namedtuple
from dataclasses import dataclass

import numpy as np
import pytest

import pullback as pb


def _central_differences(f, x, eps=1e-6):
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


# --- pb.rrule(view=True) on a pb.primitive -------------------------------------------------------

@pb.primitive
def _squeezed(x):
    return np.squeeze(x)


@pb.rrule(_squeezed, view=True)
def _squeezed_rule(x):
    return np.squeeze(x), lambda dy: (np.reshape(dy, x.shape),)


def _write_through_primitive_view(x):
    r = _squeezed(x)  # a view of x, as np.squeeze's result is; the rule says so with view=True
    r[1] = 10.0 * x[0, 0]
    return np.sum(x ** 2)


def test_rrule_view_true_on_primitive_makes_writes_reach_the_input():
    x = np.array([[1.0, 2.0, 3.0]])
    expected_value = _write_through_primitive_view(x.copy())  # 1 + 100 + 9 = 110, as NumPy computes
    expected_grad = _central_differences(_write_through_primitive_view, x)  # [[202, 0, 6]]
    val, (g,) = pb.withgradient(_write_through_primitive_view, x.copy())
    assert val == expected_value
    np.testing.assert_allclose(g, expected_grad, rtol=1e-6, atol=1e-6)


# --- private (name-mangled) __slots__ ------------------------------------------------------------

class _PrivateSlots:
    __slots__ = ("__w", "b")

    def __init__(self, w, b):
        self.__w = w
        self.b = b

    def __call__(self, x):
        return np.sum(self.__w * x) + self.b


def test_private_slot_is_seen_by_tree_and_gradient():
    w = np.array([1.0, 2.0])
    m = _PrivateSlots(w, 0.5)
    x = np.array([3.0, 4.0])
    assert m(x) == 11.5  # plain NumPy
    assert any(v is w for v in pb.tree.leaves(m))  # the array the object holds is one of its leaves
    (g,) = pb.gradient(lambda m: m(x), m)
    assert g.b == 1.0
    np.testing.assert_allclose(g["_PrivateSlots__w"], x)


# --- namedtuple subclass with instance attributes ------------------------------------------------

_Pair = namedtuple("_Pair", "a b")


class _PairWithDict(_Pair):  # no __slots__ = (): instances have a __dict__
    def total(self):
        return np.sum(self.a) + self.b


def test_namedtuple_subclass_keeps_its_instance_attributes():
    p = _PairWithDict(np.array([1.0, 2.0]), 3.0)
    p.scale = np.array([5.0, 7.0])
    f = lambda p: p.total() * 2.0 + np.sum(p.scale * p.a)  # noqa: E731
    assert f(p) == 2.0 * 6.0 + 19.0  # plain NumPy
    (g,) = pb.gradient(f, p)
    np.testing.assert_allclose(g.a, 2.0 + p.scale)
    assert g.b == 2.0


# --- a keyword argument holding a differentiated array -------------------------------------------

def test_keyword_tie_gradient_does_not_depend_on_other_arguments_being_containers():
    w = np.array([1.0, 2.0])
    # the same mathematics twice: `x` differentiated, the same array object also passed as keyword `y`;
    # the second call only wraps `x` in a dict
    (g_flat,) = pb.gradient(lambda x, *, y: np.sum(x * y), w, y=w)
    (g_dict,) = pb.gradient(lambda d, *, y: np.sum(d["x"] * y), {"x": w}, y=w)
    np.testing.assert_allclose(g_dict["x"], g_flat)
    # keyword arguments are never differentiated (README), so d/dx sum(x * y) with y held fixed is y
    np.testing.assert_allclose(g_dict["x"], w)


def test_write_into_differentiated_array_also_passed_by_keyword_is_refused_inside_a_container_too():
    # tests/test_views.py: pb.gradient(scaled, base, weights=base) raises this ValueError; the same
    # call with x wrapped in a dict computes instead (the keyword place holds the tracked array)
    base = np.arange(3.0)

    def scaled(x, weights=None):
        x *= 2.0
        return np.sum(weights)

    with pytest.raises(ValueError, match="shares memory with keyword argument 'weights'"):
        pb.gradient(scaled, base, weights=base)
    with pytest.raises(ValueError, match="shares memory with keyword argument 'weights'"):
        pb.gradient(lambda d, weights=None: scaled(d["x"], weights), {"x": base}, weights=base)


# --- a write into a non-differentiated view of a differentiated array ----------------------------

def _overwrite_through_keyword_view(x, *, y):
    y[0] = 5.0  # y is a view of x: NumPy changes x[0]
    return np.sum(x ** 2)


def test_write_into_keyword_view_of_differentiated_array_is_refused():
    # central differences give [0, 4, 6] (x[0] is overwritten); the tracked x would not see the write
    def x():  # a new one each time: the write changes the caller's array, as it does without pullback
        return np.array([1.0, 2.0, 3.0])

    with pytest.raises(ValueError, match="wrote into keyword argument 'y', which shares memory with argument 0"):
        x1 = x()
        pb.withgradient(_overwrite_through_keyword_view, x1, y=x1[:2])
    with pytest.raises(ValueError, match=r"wrote into keyword argument 'y', which shares memory with argument 0\['x'\]"):
        x2 = x()
        pb.gradient(lambda d, *, y: _overwrite_through_keyword_view(d["x"], y=y), {"x": x2}, y=x2[:2])


class _FrozenView:
    def __init__(self, w):
        self.w = w
        self.head = w[:1]  # not trained, but a view of w

    def trainable(self):
        return ("w",)


def test_write_into_frozen_field_viewing_a_trainable_one_is_refused():
    def f(m):
        m.head[0] = 5.0  # changes m.w[0], as NumPy does
        return np.sum(m.w ** 2)

    with pytest.raises(ValueError, match=r"wrote into argument 0.head, which shares memory with argument 0.w"):
        pb.gradient(f, _FrozenView(np.array([1.0, 2.0])))
    with pytest.raises(ValueError, match=r"wrote into primal 0.head, which shares memory with primal 0.w"):
        pb.jvp(f, (_FrozenView(np.array([1.0, 2.0])),), (pb.Tangent(_FrozenView, w=np.ones(2)),))


def test_reading_a_keyword_view_of_a_differentiated_array_still_works():
    x = np.array([1.0, 2.0, 3.0])
    (g,) = pb.gradient(lambda x, *, y: np.sum(x ** 2) + np.sum(y), x, y=x[:2])
    np.testing.assert_allclose(g, 2 * x)  # y is a constant: keyword arguments are not differentiated


# --- pb.hvp of a structured argument -------------------------------------------------------------

def test_hvp_of_dict_argument_when_f_does_not_depend_on_it_mirrors_the_dict():
    x = {"a": np.array([1.0, 2.0])}
    v = {"a": np.array([1.0, 0.0])}
    assert pb.hvp(lambda d: 1.0, x, v) is None  # the Hessian is zero: None, the only zero
    assert pb.hvp(lambda d: np.sum(d["a"] * 2.0), x, v)["a"] is None  # linear: zero at "a"
    np.testing.assert_allclose(pb.hvp(lambda d: np.sum(d["a"] ** 3), x, v)["a"], 6.0 * x["a"] * v["a"])


# --- InplaceableThunk with a broadcast cotangent -------------------------------------------------

@pb.primitive
def _add_bias(x, b):
    return x + b


@pb.rrule(_add_bias)
def _add_bias_rule(x, b):
    # cotangents may keep the broadcast shape of y (README); b's is an InplaceableThunk
    return x + b, lambda dy: (dy, pb.InplaceableThunk(lambda buf: np.add(buf, dy, out=buf), lambda: dy))


def test_inplaceable_thunk_with_broadcast_shape_accumulates():
    x = np.ones((2, 3))
    b = np.arange(3.0)
    # alone it works (summed down to b's shape); used twice, accumulating it must work too
    (_, gb_once) = pb.gradient(lambda x, b: np.sum(_add_bias(x, b) ** 2), x, b)
    np.testing.assert_allclose(gb_once, np.sum(2 * (x + b), axis=0))
    (_, gb) = pb.gradient(lambda x, b: np.sum(_add_bias(x, b) ** 2) + np.sum(b * 3.0), x, b)
    np.testing.assert_allclose(gb, np.sum(2 * (x + b), axis=0) + 3.0)


# --- pb.jvp: the same array passed as two primals ------------------------------------------------

def test_jvp_tangent_given_at_the_second_place_of_a_tied_array_is_not_dropped():
    w = np.array([1.0, 2.0])
    t = np.ones(2)
    # one array object is one parameter (docs/conventions.md): it moves along t at both places
    f = lambda a, b: a * 3.0 + b ** 2  # noqa: E731
    _, y_dot = pb.jvp(f, (w, w), (None, t))
    np.testing.assert_allclose(y_dot, 3.0 * t + 2 * w * t)
    _, y_dot = pb.jvp(lambda d: f(d["a"], d["b"]), ({"a": w, "b": w},), ({"a": None, "b": t},))
    np.testing.assert_allclose(y_dot, 3.0 * t + 2 * w * t)


def test_jvp_refuses_two_different_tangents_for_one_array():
    w = np.array([1.0, 2.0])
    with pytest.raises(ValueError, match="Tangents are given at primal 0 and at primal 1, which hold the same array"):
        pb.jvp(lambda a, b: a * b, (w, w), (np.ones(2), np.zeros(2)))


# --- a float subclass is a float -----------------------------------------------------------------

class _MyFloat(float):
    pass


def test_float_subclass_leaf_is_refused_naming_the_fix():
    # tracked as a plain float, its methods and isinstance checks would change what f computes
    with pytest.raises(TypeError, match=r"Argument 0\['x'\] is a _MyFloat, a subclass of float.*Pass float\(x\)"):
        pb.gradient(lambda d: d["x"] ** 2, {"x": _MyFloat(3.0)})
    with pytest.raises(TypeError, match=r"is a _OddFloat, a subclass of float"):
        pb.gradient(lambda x: x * 2.0, _OddFloat(3.0))
    (g,) = pb.gradient(lambda x: x ** 3, float(_MyFloat(2.0)))
    assert g == 12.0 and type(g) is float


class _OddFloat(float):
    def __mul__(self, other):  # arithmetic of its own, which a tracked float would not follow
        return float(self) * other + 1.0


# --- a pb.primitive given a container of traced values -------------------------------------------

@pb.primitive
def _ste_round_all(xs):
    return [np.round(v) for v in xs]


@pb.rrule(_ste_round_all)
def _ste_round_all_rule(xs):
    return [np.round(v) for v in xs], lambda dy: (list(dy),)  # straight-through: identity cotangent


def test_primitive_with_container_argument_does_not_silently_bypass_its_rule():
    # the rule would give 2, the body (np.round) 0: the primitive cannot see inside the list, so it refuses
    x = np.array([0.3, 1.7])
    with pytest.raises(TypeError, match=r"_ste_round_all is a pullback.primitive, and argument 0\[0\] is a value being"):
        pb.gradient(lambda x: np.sum(_ste_round_all([x])[0] * 2.0), x)
    assert _ste_round_all([x])[0].tolist() == [0.0, 2.0]  # not being differentiated, it runs as it is


# --- containers whose __copy__ returns the object itself -----------------------------------------

class _SelfCopyingDict(dict):
    def __copy__(self):  # as immutable-mapping types do
        return self


class _SelfCopyingList(list):
    def __copy__(self):
        return self


class _SelfCopyingObject:
    def __new__(cls, w):
        obj = super().__new__(cls)
        obj.w = w
        return obj

    def __copy__(self):
        return self


def test_dict_subclass_whose_copy_returns_self_is_neither_corrupted_nor_given_no_gradient():
    w = np.array([1.0, 2.0])
    d = _SelfCopyingDict(w=w)
    (g,) = pb.gradient(lambda m: np.sum(m["w"] ** 2), d)
    assert d["w"] is w  # the caller's object is left as it was
    np.testing.assert_allclose(g["w"], 2 * w)


def test_list_subclass_whose_copy_returns_self_is_neither_corrupted_nor_given_no_gradient():
    w = np.array([1.0, 2.0])
    lst = _SelfCopyingList([w])
    (g,) = pb.gradient(lambda m: np.sum(m[0] ** 2), lst)
    assert lst[0] is w
    np.testing.assert_allclose(g[0], 2 * w)


def test_object_whose_copy_returns_self_is_neither_corrupted_nor_given_no_gradient():
    w = np.array([1.0, 2.0])
    m = _SelfCopyingObject(w)
    (g,) = pb.gradient(lambda m: np.sum(m.w ** 2), m)
    assert m.w is w
    np.testing.assert_allclose(g.w, 2 * w)


def test_tree_fmap_does_not_modify_a_dict_subclass_whose_copy_returns_self():
    w = np.array([1.0, 2.0])
    d = _SelfCopyingDict(w=w)
    new = pb.tree.fmap(lambda v: v * 10.0, d)
    assert d["w"] is w
    np.testing.assert_allclose(new["w"], 10 * w)


# --- an object array holding float arrays --------------------------------------------------------

def test_object_array_of_float_arrays_is_not_silently_given_no_gradient():
    p = np.empty(2, dtype=object)
    p[0], p[1] = np.ones(2), np.full(3, 2.0)
    with pytest.raises(TypeError, match="Argument 0 is a NumPy array of dtype object holding floats or float arrays"):
        pb.gradient(lambda p: np.sum(p[0] ** 2) + np.sum(p[1]), p)


# --- a dataclass inheriting a slot from a plain base class ---------------------------------------

class _SlottedBase:
    __slots__ = ("bw",)

    def base_out(self, x):
        return np.sum(self.bw * x)


@dataclass
class _DataclassOnSlottedBase(_SlottedBase):
    w: np.ndarray


class _PlainOnSlottedBase(_SlottedBase):
    def __init__(self, w):
        self.w = w


def test_dataclass_inheriting_a_slot_gets_its_gradient_like_a_plain_class():
    x = np.array([5.0, 6.0])
    f = lambda m: m.base_out(x) + np.sum(m.w)  # noqa: E731
    plain = _PlainOnSlottedBase(np.array([1.0, 2.0]))
    plain.bw = np.array([3.0, 4.0])
    (gp,) = pb.gradient(f, plain)
    np.testing.assert_allclose(gp.bw, x)  # the plain class: right
    d = _DataclassOnSlottedBase(np.array([1.0, 2.0]))
    d.bw = np.array([3.0, 4.0])
    (gd,) = pb.gradient(f, d)
    assert "bw" in gd, gd
    np.testing.assert_allclose(gd.bw, x)


# --- a tied array whose first place is a field that trainable() leaves out -----------------------

class _TiedFrozenFirst:
    def __init__(self, w):
        self.fz = w  # not trainable, but the same array object as `tr`
        self.tr = w

    def trainable(self):
        return ("tr",)


def _tied_loss(a):
    return np.sum(a.fz * 3.0 + a.tr ** 3)


def test_tie_with_frozen_first_place_jvp_uses_the_tangent_at_the_trainable_place():
    w = np.array([0.5, -1.0])
    t = np.array([1.0, 0.0])
    _, y_dot = pb.jvp(_tied_loss, (_TiedFrozenFirst(w),), (pb.Tangent(_TiedFrozenFirst, tr=t),))
    assert y_dot is not None
    np.testing.assert_allclose(y_dot, np.sum((3.0 + 3.0 * w ** 2) * t))


def test_tie_with_frozen_first_place_hvp():
    w = np.array([0.5, -1.0])
    t = np.array([1.0, 0.0])
    hv = pb.hvp(_tied_loss, _TiedFrozenFirst(w), pb.Tangent(_TiedFrozenFirst, tr=t))
    assert hv is not None and hv.tr is not None, hv
    np.testing.assert_allclose(hv.tr, 6.0 * w * t)


def test_tie_with_frozen_first_place_check_gradient_passes_for_a_right_gradient():
    result = pb.check_gradient(_tied_loss, _TiedFrozenFirst(np.array([0.5, -1.0])))
    assert bool(result), str(result)


# --- the AttrDict recipe: a dict subclass whose __dict__ is itself -------------------------------

class _AttrDict(dict):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.__dict__ = self  # d.w is d["w"]


def test_attrdict_attribute_access_gets_the_gradient():
    w = np.array([1.0, 2.0])
    d = _AttrDict(w=w, s=2.0)
    assert d.w is d["w"]
    (g,) = pb.gradient(lambda d: np.sum(d.w ** 2) * d.s, d)
    assert g is not None, "reading the entries as attributes must not lose the gradient"
    np.testing.assert_allclose(g["w"], 2 * w * 2.0)
    assert g["s"] == 5.0


# --- a user rule whose pullback is not linear (JAX's clip_gradient example) ----------------------

@pb.primitive
def _clip_gradient(x):
    return x


@pb.rrule(_clip_gradient)
def _clip_gradient_rule(x):
    return x, lambda dy: (np.clip(dy, -1.0, 1.0),)


def test_user_rule_gets_the_scaled_cotangent_whatever_the_array_size():
    # y = clip_gradient(x); loss = sum(4 y): the rule receives dy = 4 and clips it to 1
    for n in (10, 1 << 15):
        x = np.ones(n)
        (g,) = pb.gradient(lambda x: np.sum(_clip_gradient(x) * 4.0), x)
        np.testing.assert_allclose(g, np.ones(n), err_msg=f"n={n}")


# --- the gradient of a Tangent -------------------------------------------------------------------

class _Affine:
    pass


def test_gradient_of_a_tangent_mirrors_it():
    t = pb.Tangent(_Affine, w=np.array([1.0, 2.0]), s=3.0)
    (g,) = pb.gradient(lambda t: np.sum(t.w ** 2) * t.s, t)
    np.testing.assert_allclose(g.w, [6.0, 12.0])
    assert g.s == 5.0
    assert g.primal_type is _Affine, g.primal_type  # a Tangent[_Affine], like its argument
    t + g  # gradients of the same object add  # noqa: B018


# --- pb.unthunk recurses through dicts -----------------------------------------------------------

def test_unthunk_recurses_through_dict_subclasses():
    from collections import OrderedDict

    out = pb.unthunk(OrderedDict(a=pb.Thunk(lambda: 1.0), b=[pb.Thunk(lambda: 2.0)]))
    assert not isinstance(out["a"], pb.Thunk), out  # "recursing through tuples, lists, dicts and Tangents"
    assert out["a"] == 1.0 and out["b"] == [2.0]


# --- a namedtuple subclass whose __new__ takes other arguments -----------------------------------

class _Doubled(_Pair):
    __slots__ = ()

    def __new__(cls, a):  # b is derived; namedtuple's own _make still builds one from both fields
        return super().__new__(cls, a, 2.0 * a)


def test_namedtuple_subclass_with_its_own_new_is_rebuilt():
    p = _Doubled(np.array([1.0, 2.0]))
    (g,) = pb.gradient(lambda p: np.sum(p.a * p.b), p)
    np.testing.assert_allclose(g.a, p.b)
    np.testing.assert_allclose(g.b, p.a)


# --- a pb.primitive method of a model being differentiated ---------------------------------------

class _TanhLayer:
    def __init__(self):
        self.w = np.array([2.0, 3.0])

    @pb.primitive
    def __call__(self, x):
        return np.tanh(self.w * x)


@pb.rrule(_TanhLayer.__call__)
def _tanh_layer_rule(self, x):
    y = np.tanh(self.w * x)
    return y, lambda dy: (None, dy * (1 - y ** 2) * self.w)


# --- a class that opts out of NumPy's ufunc dispatch (__array_ufunc__ = None, NEP 13) -------------

class _Poly:
    __array_ufunc__ = None  # NumPy defers binary operators to this class; it is not an array

    def __init__(self, c):
        self.c = c

    def __call__(self, x):
        return sum(ci * x ** i for i, ci in enumerate(self.c))


def test_class_with_array_ufunc_none_is_a_container_not_a_silent_leaf():
    p = _Poly([np.array(1.0), np.array(2.0), np.array(3.0)])
    assert p(0.5) == 2.75  # plain NumPy
    (g,) = pb.gradient(lambda p: p(0.5), p)
    assert g is not None, "the value depends on the coefficients the object holds"
    np.testing.assert_allclose([float(c) for c in g.c], [1.0, 0.5, 0.25])


def test_numpy_polynomial_argument_is_not_silently_given_no_gradient():
    p = np.polynomial.Polynomial([1.0, 2.0, 3.0])  # its class sets __array_ufunc__ = None
    x = np.array([0.5, 2.0])
    # its coefficients are tracked; NumPy's polyval converts them with np.array, which is refused (never None),
    # naming the function and the polynomial functions pullback differentiates
    with pytest.raises(TypeError, match=r"numpy\.polynomial\.Polynomial\.__call__ converts its input.*np\.polyval"):
        pb.gradient(lambda p: np.sum(p(x)), p)


# --- the same containers returned by f (withgradient's value) ------------------------------------

def test_withgradient_value_holding_an_attrdict_is_plain_through_its_attributes():
    x = np.array([1.0, 2.0])
    val, _ = pb.withgradient(lambda x: (np.sum(x), _AttrDict(a=x * 2.0)), x)
    aux = val[1]
    np.testing.assert_array_equal(aux["a"], [2.0, 4.0])
    np.testing.assert_array_equal(aux.a + 1.0, [3.0, 5.0])  # as without pullback


def test_withgradient_value_holding_a_namedtuple_subclass_keeps_its_attributes():
    x = np.array([1.0, 2.0])

    def f(x):
        p = _PairWithDict(x, 2.0)
        p.extra = x * 3.0
        return np.sum(x), p

    val, _ = pb.withgradient(f, x)
    np.testing.assert_array_equal(val[1].extra, [3.0, 6.0])  # as without pullback


# --- a bound method of a sub-object kept as an attribute -----------------------------------------

class _Dense:
    def __init__(self, w):
        self.w = w

    def __call__(self, x):
        return np.tanh(self.w * x)


class _ModelWithBoundMethod:
    def __init__(self):
        self.enc = _Dense(np.array([1.0, 2.0]))
        self.forward_fn = self.enc.__call__  # a bound method of the sub-object, kept as a field

    def __call__(self, x):
        return self.forward_fn(x)


def test_bound_method_field_does_not_silently_lose_the_gradient_of_its_object():
    m = _ModelWithBoundMethod()
    x = np.array([0.5, -0.3])
    with pytest.raises(TypeError, match=r"Argument 0.forward_fn is a bound method of a _Dense that is being differentiated"):
        pb.gradient(lambda m: np.sum(m(x)), m)


# --- a pb.primitive method whose object holds differentiated values: the rule is used -------------

class _RoundLayer:
    def __init__(self, w):
        self.w = w

    @pb.primitive
    def apply(self, x):
        return np.round(self.w * x)  # the body's derivative is zero


@pb.rrule(_RoundLayer.apply)
def _round_layer_rule(layer, x):
    # straight-through: d/dw = dy * x, d/dx = dy * w
    return np.round(layer.w * x), lambda dy: (pb.Tangent(_RoundLayer, w=dy * x), dy * layer.w)


def test_primitive_method_rule_is_used_when_only_the_object_is_differentiated():
    # the body (np.round, derivative zero) ran in place of the rule and the gradient was a silent None
    layer, x = _RoundLayer(np.array([2.0])), np.array([3.0])
    np.testing.assert_allclose(pb.gradient(lambda x: np.sum(layer.apply(x)), x)[0], [2.0])
    (g,) = pb.gradient(lambda m: np.sum(m.apply(x)), layer)
    assert type(g) is pb.Tangent
    np.testing.assert_allclose(g.w, [3.0])


def test_primitive_method_with_object_and_argument_both_differentiated():
    # the rule was handed the object holding tracked fields, and its pullback failed with a misleading
    # "used after the gradient call had finished" RuntimeError
    layer, x = _RoundLayer(np.array([2.0])), np.array([3.0])
    gl, gx = pb.gradient(lambda m, x: np.sum(m.apply(x)), layer, x)
    np.testing.assert_allclose(gl.w, [3.0])
    np.testing.assert_allclose(gx, [2.0])
    (gt,) = pb.gradient(lambda m: np.sum(m.apply(m.w)), layer)  # a field passed again as the argument: both add
    np.testing.assert_allclose(gt.w, [4.0])
    y_dot = pb.jvp(lambda m: np.sum(m.apply(x)), (layer,), (pb.Tangent(_RoundLayer, w=np.array([1.0])),))[1]
    assert float(y_dot) == 3.0  # forward mode transposes the rule


class _Scaler:
    def __init__(self, k):
        self.k = k

    @pb.primitive
    def f(self, x):
        return np.round(x * self.k)


@pb.rrule(_Scaler.f)
def _scaler_rule(s, x):
    return np.round(x * s.k), lambda dy: (None, dy * s.k)


def test_primitive_method_of_an_object_passed_as_a_differentiated_argument():
    # passing the object positionally makes its float k tracked; the rule got it tracked, and the call
    # failed with "A tracked value was used after the gradient call ..."
    x = np.array([0.3])
    np.testing.assert_allclose(pb.gradient(lambda x: np.sum(_Scaler(2.0).f(x)), x)[0], [2.0])
    gs, gx = pb.gradient(lambda s, x: np.sum(s.f(x)), _Scaler(2.0), x)
    assert gs is None  # the rule gives the object no cotangent
    np.testing.assert_allclose(gx, [2.0])


def test_primitive_method_whose_rule_gives_an_array_for_the_object_is_refused():
    class Layer:
        def __init__(self):
            self.w = np.array([1.0])

        @pb.primitive
        def f(self, x):
            return self.w * x

    @pb.rrule(Layer.f)
    def _rule(layer, x):
        return layer.w * x, lambda dy: (dy * x, None)

    with pytest.raises(TypeError, match=r"gave for argument 0, an object, should have one part for each of \['w'\]"):
        pb.gradient(lambda m: np.sum(m.f(np.ones(1))), Layer())


# --- a user's PerOperand through an object argument is not linear either --------------------------------

@dataclass
class _ClipScaled:
    w: np.ndarray


@pb.primitive
def _clip_mul(p, x):
    return p.w * x


@pb.rrule(_clip_mul)
def _clip_mul_rule(p, x):
    def back_p(g):
        return pb.Tangent(_ClipScaled, w=np.clip(g, -1.0, 1.0) * x)

    def back_x(g):
        return np.clip(g, -1.0, 1.0) * p.w  # gradient clipping: not linear in g

    return p.w * x, pb.PerOperand([back_p, back_x])


def test_a_users_per_operand_through_an_object_gets_its_cotangent_scaled_first():
    # sum(4 * clip_mul(p, x)): the cotangent 4 is clipped to 1, so d/dx = w and d/dw = x. Large enough
    # that the sweep would carry the factor 4 past a linear rule (it gave 4w and 4x).
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal(20000), rng.standard_normal(20000)
    gp, gx = pb.gradient(lambda p, x: np.sum(_clip_mul(p, x) * 4.0), _ClipScaled(w), x)
    np.testing.assert_allclose(gx, w)
    np.testing.assert_allclose(gp.w, x)
