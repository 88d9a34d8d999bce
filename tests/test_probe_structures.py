"""Structural gradients and optimiser steps against central differences and hand-written NumPy updates."""

import collections
import copy
import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

import pullback as pb
from pullback import optim, tree


def fd(f, args, get, eps=1e-6):
    """Central differences of `f(*args)` in float64 along each element of the array `get(args)`.

    Each side perturbs a deep copy of `args`, so ties (one array at several places) move together."""
    x0 = get(args)
    out = np.zeros(x0.shape)
    for i in np.ndindex(x0.shape):
        sides = []
        for s in (1.0, -1.0):
            a = copy.deepcopy(args)
            get(a)[i] += s * eps
            sides.append(float(f(*a)))
        out[i] = (sides[0] - sides[1]) / (2 * eps)
    return out


def adam(x, grads, lr, b1=0.9, b2=0.999, eps=1e-8):
    """Adam by hand, in float64."""
    x = x.astype(np.float64)
    m = np.zeros_like(x)
    v = np.zeros_like(x)
    for t, g in enumerate(grads, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        x = x - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return x


class Obj:
    def __init__(self, **fields):
        self.__dict__.update(fields)


# --- registered classes whose children are made anew at each call ------------------------------------


class FlatBuffer:
    """Parameters kept in one buffer, shown as views."""

    def __init__(self, buf):
        self.buf = buf

    @property
    def w(self):
        return self.buf[:4].reshape(2, 2)

    @property
    def b(self):
        return self.buf[4:]


tree.register(FlatBuffer, lambda p: {"w": p.w, "b": p.b},
              lambda p, kids: FlatBuffer(np.concatenate([np.ravel(kids["w"]), kids["b"]])))


class Rows:
    """A matrix whose rows are registered as its children."""

    def __init__(self, m):
        self.m = m


tree.register(Rows, lambda r: {"a": r.m[0], "b": r.m[1]}, lambda r, kids: Rows(np.stack([kids["a"], kids["b"]])))


class Tagged(list):
    """A list with a scale attribute, registered with a new list of its items at each call."""


def _tagged(kids):
    new = Tagged(kids["items"])
    new.scale = kids["scale"]
    return new


tree.register(Tagged, lambda t: {"items": list(t), "scale": t.scale}, lambda t, kids: _tagged(kids))


class Stable:
    """Registered with the objects it holds, plus an int tuple and a number computed at each call."""

    def __init__(self, w, s):
        self._w, self._s = w, s


tree.register(Stable, lambda p: {"w": p._w, "s": p._s * 1.0, "shape": p._w.shape},
              lambda p, kids: Stable(kids["w"], kids["s"]))


def test_registered_views_made_at_each_call_are_refused_in_gradient():
    """They got a silent None gradient: each walk saw new view objects."""
    m = FlatBuffer(np.arange(6.0) / 10)
    with pytest.raises(TypeError, match=r"FlatBuffer.*makes a new ndarray.*x\.w.*register the buffer"):
        pb.gradient(lambda m: np.sum(m.w ** 2) + np.sum(m.b ** 3), m)


def test_registered_views_made_at_each_call_are_refused_in_optimiser():
    """update silently dropped the second row's step: the walks matched the views by reused ids."""
    model = Rows(np.array([[1.0, 2.0], [3.0, 4.0]]))
    with pytest.raises(TypeError, match=r"Rows.*makes a new ndarray"):
        state = optim.setup(optim.Descent(1.0), model)
        grad = pb.Tangent._make(Rows, {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 100.0])})
        optim.update(state, model, grad)


def test_registered_new_container_holding_a_number_is_refused():
    """The number's gradient was a silent None (its place is found by its container's identity)."""
    t = Tagged([np.array([1.0, 2.0]), 3.0])
    t.scale = 2.0
    with pytest.raises(TypeError, match=r"makes a new list holding the number 3\.0 at x\.items"):
        pb.gradient(lambda t: np.sum(t[0]) * t[1] * t.scale, t)


def test_new_containers_of_registered_objects_keep_their_own_gradients_and_steps():
    """New containers of arrays made by `children` stay allowed. A walk keys its cache by id, so it keeps the
    children it was given alive to its end: otherwise a freed container's id, taken by a later one, gave
    setup one optimiser entry for two objects."""

    def make(v):
        t = Tagged([np.full(2, v)])
        t.scale = np.array([v])
        return t

    model = [make(float(i + 1)) for i in range(6)]
    g, = pb.gradient(lambda m: sum(np.sum(t[0] ** 2) * t.scale[0] * (i + 1) for i, t in enumerate(m)), model)
    for i in range(6):
        v = i + 1.0
        np.testing.assert_allclose(g[i].items[0], 2 * v * v * (i + 1))
        np.testing.assert_allclose(g[i].scale, [2 * v * v * (i + 1)])
    state = optim.setup(optim.Descent(0.1), model)
    state, new = optim.update(state, model, g)
    for i, t in enumerate(new):
        v = i + 1.0
        np.testing.assert_allclose(t[0], v - 0.1 * 2 * v * v * (i + 1))
        np.testing.assert_allclose(t.scale, v - 0.1 * 2 * v * v * (i + 1))


def test_registered_stable_children_with_numbers_and_shapes_made_at_each_call():
    """A number or an int tuple computed at each call is a value, not refused; its gradient is found."""
    p = Stable(np.array([0.5, -1.0]), 1.5)
    f = lambda p: np.sum(p._w ** 2) * p._s ** 2
    g, = pb.gradient(f, p)
    np.testing.assert_allclose(g.w, 2 * p._w * 1.5 ** 2)
    assert g.s == pytest.approx(np.sum(p._w ** 2) * 2 * 1.5)
    assert g.shape is None
    state, new = optim.update(optim.setup(optim.Descent(0.5), p), p, g)
    np.testing.assert_allclose(new._w, p._w - 0.5 * g.w)
    assert new._s == 1.5


# --- gradients of structures against central differences ------------------------------------------


def test_tied_fields_and_repeated_list_entries_give_the_total_once():
    w = np.array([[0.3, -0.7], [1.1, 0.2]])
    m = Obj(a=w, b=w)
    f = lambda m: np.sum(np.sin(m.a) * m.b ** 2)
    g, = pb.gradient(f, m)
    np.testing.assert_allclose(g.a, fd(f, (m,), lambda a: a[0].a), rtol=1e-6)
    assert g.b is None
    v, u = np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.25, -0.5])
    items = [v, v, u]
    f2 = lambda xs: np.sum(xs[0] * xs[1] * xs[2])
    g2, = pb.gradient(f2, items)
    np.testing.assert_allclose(g2[0], 2 * v * u)
    assert g2[1] is None
    np.testing.assert_allclose(g2[2], v * v)


def test_field_views_of_one_buffer_get_their_own_partials():
    buf = np.array([0.5, -1.0, 2.0, 0.25, 1.5, -0.5])
    m = Obj(a=buf[:3], b=buf[3:], c=buf.reshape(2, 3), t=buf.reshape(2, 3).T)
    g, = pb.gradient(lambda m: np.sum(m.a ** 2) + np.sum(m.b * 3) + np.sum(m.c ** 3) + np.sum(m.t[0]), m)
    np.testing.assert_allclose(g.a, 2 * buf[:3])
    np.testing.assert_allclose(g.b, [3.0, 3.0, 3.0])
    np.testing.assert_allclose(g.c, 3 * buf.reshape(2, 3) ** 2)
    np.testing.assert_allclose(g.t, [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])


def test_leaf_kinds_in_one_object():
    m = Obj(pf=1.5, pi=3, flag=True, f32=np.float32(0.75), z0=np.array(0.3), iarr=np.arange(3),
            c=np.array([1 + 2j, 0.5 - 1j]), h=np.array([0.5, 1.5], np.float16), none=None, s="x", fn=np.tanh,
            w=np.array([0.2, -0.4]))

    def f(m):
        return (m.pf ** 2 * m.pi + (m.f32 * 2.0) ** 2 + m.z0 ** 3 + np.sum(np.abs(m.c) ** 2)
                + np.sum(m.h.astype(np.float64) ** 2) + np.sum(m.fn(m.w)) * (2 if m.flag else 1) + np.sum(m.iarr))

    g, = pb.gradient(f, m)
    assert type(g.pf) is float and g.pf == pytest.approx(2 * 1.5 * 3)
    assert type(g.f32) is np.float32 and g.f32 == pytest.approx(8 * 0.75)
    assert isinstance(g.z0, np.ndarray) and g.z0.shape == () and g.z0 == pytest.approx(3 * 0.09)
    np.testing.assert_allclose(g.c, 2 * np.conj(m.c))
    assert g.h.dtype == np.float16
    np.testing.assert_allclose(g.h, 2 * m.h.astype(np.float64), rtol=1e-3)
    np.testing.assert_allclose(g.w, 2 * (1 - np.tanh(m.w) ** 2))
    for name in ("pi", "flag", "iarr", "none", "s", "fn"):
        assert getattr(g, name) is None


def test_dicts_with_odd_keys_and_dict_kinds():
    d = {(1, 2): np.array([0.5, -1.0]), 3: np.array([2.0, 0.25]), "z": 2.0}
    g, = pb.gradient(lambda d: np.sum(d[(1, 2)] * d[3]) * d["z"], d)
    assert list(g) == list(d)
    np.testing.assert_allclose(g[(1, 2)], d[3] * 2.0)
    np.testing.assert_allclose(g[3], d[(1, 2)] * 2.0)
    assert g["z"] == pytest.approx(np.sum(d[(1, 2)] * d[3]))
    od = collections.OrderedDict([("b", np.array([1.5])), ("a", np.array([-0.5]))])
    g, = pb.gradient(lambda d: np.sum(d["a"] ** 2 * d["b"]), od)
    np.testing.assert_allclose(g["a"], 2 * od["a"] * od["b"])
    np.testing.assert_allclose(g["b"], od["a"] ** 2)
    dd = collections.defaultdict(list, {"a": np.array([0.5, 2.0])})

    def uses_default(d):
        d["new"].append(1)
        return np.sum(d["a"] ** 2)

    g, = pb.gradient(uses_default, dd)
    np.testing.assert_allclose(g["a"], 2 * dd["a"])
    assert "new" not in dd


class NT(NamedTuple):
    w: np.ndarray
    b: float

    def out(self, x):
        return np.sum(self.w * x) + self.b


class NTSub(NT):
    def squared(self, x):
        return self.out(x) ** 2


@dataclasses.dataclass
class DC:
    w: np.ndarray
    scale: float = 2.0
    extra: np.ndarray = dataclasses.field(default_factory=lambda: np.ones(2))
    cache: np.ndarray = dataclasses.field(init=False)

    def __post_init__(self):
        self.cache = self.w * 0 + 1.5


@dataclasses.dataclass
class DCChild(DC):
    v: np.ndarray = dataclasses.field(default_factory=lambda: np.full(2, 3.0))


@dataclasses.dataclass
class DCInit:
    w: np.ndarray
    k: dataclasses.InitVar[float] = 1.0

    def __post_init__(self, k):
        self.kk = k


@dataclasses.dataclass(frozen=True)
class FrozenDC:
    w: np.ndarray
    b: np.ndarray


def test_namedtuple_subclass_with_methods():
    x = np.array([0.5, -1.0, 2.0])
    s = NTSub(np.array([1.0, 0.5, -0.25]), 0.25)
    g, = pb.gradient(lambda s: s.squared(x), s)
    v = s.out(x)
    assert type(g) is NTSub
    np.testing.assert_allclose(g.w, 2 * v * x)
    assert g.b == pytest.approx(2 * v)


def test_dataclass_fields_init_false_default_factory_initvar_inheritance_frozen():
    d = DC(np.array([0.5, -1.0]))
    f = lambda d: np.sum(d.w ** 2 * d.extra * d.cache) * d.scale
    g, = pb.gradient(f, d)
    for name in ("w", "extra", "cache"):
        np.testing.assert_allclose(getattr(g, name), fd(f, (d,), lambda a, n=name: getattr(a[0], n)), rtol=1e-6)
    assert g.scale == pytest.approx(np.sum(d.w ** 2 * d.extra * d.cache))
    c = DCChild(np.array([0.5, -1.0]))
    g, = pb.gradient(lambda c: np.sum(c.w * c.v) * c.scale, c)
    np.testing.assert_allclose(g.w, c.v * 2.0)
    np.testing.assert_allclose(g.v, c.w * 2.0)
    assert g.extra is None and g.cache is None
    di = DCInit(np.array([0.5, -1.0]), 3.0)
    g, = pb.gradient(lambda m: np.sum(m.w) * m.kk, di)
    np.testing.assert_allclose(g.w, [3.0, 3.0])
    assert g.kk == pytest.approx(-0.5)
    fr = FrozenDC(np.array([0.5, -1.0]), np.array([2.0, 0.25]))
    g, = pb.gradient(lambda m: np.sum(m.w * m.b ** 2), fr)
    np.testing.assert_allclose(g.w, fr.b ** 2)
    np.testing.assert_allclose(g.b, 2 * fr.w * fr.b)


class Node:
    def __init__(self, w):
        self.w, self.other = w, None


def test_cycle_and_shared_sub_object():
    a, b = Node(np.array([0.5, -1.0])), Node(np.array([2.0, 0.25]))
    a.other, b.other = b, a
    f = lambda a: np.sum(a.w * a.other.w ** 2) + np.sum(a.other.other.w ** 3)
    g, = pb.gradient(f, a)
    np.testing.assert_allclose(g.w, fd(f, (a,), lambda x: x[0].w), rtol=1e-6)
    np.testing.assert_allclose(g.other.w, fd(f, (a,), lambda x: x[0].other.w), rtol=1e-6)
    shared = Node(np.array([1.0, -2.0]))
    g, = pb.gradient(lambda m: np.sum(m["x"].w ** 2) + np.sum(m["y"].w * 3) + np.sum(m["z"][0].w), {"x": shared, "y": shared, "z": [shared]})
    np.testing.assert_allclose(g["x"].w, 2 * shared.w + 4)
    assert g["y"] is None and g["z"] is None


def test_aliased_arguments_give_the_total_once():
    w = np.array([0.5, -1.0, 2.0])
    g = pb.gradient(lambda a, b: np.sum(a ** 2 * b), w, w)
    np.testing.assert_allclose(g[0], 3 * w ** 2)
    assert g[1] is None
    np.testing.assert_allclose(pb.grad(lambda a, b: np.sum(a ** 2 * b), argnums=1)(w, w), w ** 2)
    g = pb.gradient(lambda m, v: np.sum(m["w"] * v ** 2), {"w": w}, w)
    np.testing.assert_allclose(g[0]["w"], 3 * w ** 2)
    assert g[1] is None


class Layer:
    def __init__(self, w, b, stats):
        self.w, self.b, self.stats = w, b, stats
        self.name, self.rate, self.count = "layer", 0.5, np.array([3])

    def trainable(self):
        return ("w", "b")


class Slots:
    __slots__ = ("w", "v")

    def __init__(self, w, v):
        self.w, self.v = w, v


class Pair(NamedTuple):
    a: np.ndarray
    b: np.ndarray


@dataclasses.dataclass(frozen=True)
class Wrapped:
    w: np.ndarray
    tag: str = "x"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_over_a_mixed_model_matches_adam_by_hand(dtype):
    rng = np.random.default_rng(0)
    r = lambda *s: rng.standard_normal(s).astype(dtype)
    tied = r(2)
    model = {"layer": Layer(r(3), r(3), r(3)), "fdc": Wrapped(tied), "sl": Slots(tied, r(2)),
             "nt": Pair(r(2), r(2)), "lst": [tied, 1.5, np.float32(2.0), r(1).reshape(())]}
    before = copy.deepcopy(model)

    def loss(m):
        la = m["layer"]
        return (np.sum(np.sin(la.w) * la.b) + np.sum(la.stats * la.w) + np.sum(m["fdc"].w ** 2)
                + np.sum(m["sl"].w * m["sl"].v) + np.sum(m["nt"].a * m["nt"].b ** 2) + np.sum(m["lst"][0] * 3)
                + m["lst"][1] * m["lst"][3] + m["lst"][2] ** 2)

    state = optim.setup(optim.Adam(0.01), model)
    assert state["layer"].stats is None and state["lst"][1] is None and state["layer"].count is None
    hist = collections.defaultdict(list)
    cur = model
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-9)
    for _ in range(3):
        g, = pb.gradient(loss, cur)
        la = cur["layer"]
        hand = {"w": np.cos(la.w.astype(float)) * la.b + la.stats, "b": np.sin(la.w.astype(float)),
                "tied": 2 * cur["fdc"].w.astype(float) + cur["sl"].v + 3, "v": cur["sl"].w.astype(float),
                "z": np.asarray(cur["lst"][1], float)}
        np.testing.assert_allclose(g["layer"].w, hand["w"], **tol)
        np.testing.assert_allclose(g["layer"].b, hand["b"], **tol)
        np.testing.assert_allclose(g["fdc"].w, hand["tied"], **tol)
        np.testing.assert_allclose(g["sl"].v, hand["v"], **tol)
        np.testing.assert_allclose(g["lst"][3], hand["z"], **tol)
        assert g["layer"].stats is None and g["sl"].w is None and g["lst"][0] is None
        for k, v in hand.items():
            hist[k].append(v)
        state, cur = optim.update(state, cur, g)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-9)
    np.testing.assert_allclose(cur["layer"].w, adam(model["layer"].w, hist["w"], 0.01), **tol)
    np.testing.assert_allclose(cur["layer"].b, adam(model["layer"].b, hist["b"], 0.01), **tol)
    np.testing.assert_allclose(cur["fdc"].w, adam(tied, hist["tied"], 0.01), **tol)
    np.testing.assert_allclose(cur["sl"].v, adam(model["sl"].v, hist["v"], 0.01), **tol)
    np.testing.assert_allclose(cur["lst"][3], adam(model["lst"][3], hist["z"], 0.01), **tol)
    assert cur["fdc"].w is cur["sl"].w is cur["lst"][0]
    assert isinstance(cur["lst"][3], np.ndarray) and cur["lst"][3].shape == ()
    for a in (cur["layer"].w, cur["layer"].b, cur["fdc"].w, cur["sl"].v, cur["lst"][3]):
        assert a.dtype == dtype
    np.testing.assert_array_equal(cur["layer"].stats, before["layer"].stats)
    assert cur["lst"][1] == 1.5 and cur["lst"][2] == np.float32(2.0)
    np.testing.assert_array_equal(model["layer"].w, before["layer"].w)
    np.testing.assert_array_equal(model["fdc"].w, before["fdc"].w)
    assert type(cur["fdc"]) is Wrapped and type(cur["sl"]) is Slots and type(cur["nt"]) is Pair


@pytest.mark.parametrize("rule", [optim.Momentum(0.1, 0.9), optim.Adam(0.1), optim.RMSProp(0.1, centred=True),
                                  optim.Lion(0.1, weight_decay=0.1),
                                  optim.OptimiserChain(optim.WeightDecay(0.1), optim.ClipNorm(1.0), optim.Adam(0.1))],
                         ids=lambda r: type(r).__name__)
def test_update_update_in_place_and_jit_agree_on_ties_and_0d_arrays(rule):
    w, z = np.array([0.5, -1.5, 2.0], np.float32), np.array(0.25, np.float32)
    model = {"a": w, "b": w, "z": z, "n": 3}
    g = {"a": np.array([1.0, -2.0, 0.0], np.float32), "b": np.array([0.5, 0.5, 0.5], np.float32),
         "z": np.array(0.5, np.float32), "n": None}
    state = optim.setup(rule, model)
    s1, m1 = optim.update(state, model, g)
    s2, m2 = optim.update(s1, m1, g)
    _, again = optim.update(state, model, g)
    np.testing.assert_array_equal(again["a"], m1["a"])
    inplace = copy.deepcopy(model)
    si = optim.setup(rule, inplace)
    optim.update_(si, inplace, g)
    optim.update_(si, inplace, g)
    step = pb.jit(optim.update)
    sj, mj = step(state, model, g)
    sj, mj = step(sj, mj, g)
    for other in (inplace, mj):
        np.testing.assert_allclose(other["a"], m2["a"], rtol=1e-6)
        np.testing.assert_allclose(other["z"], m2["z"], rtol=1e-6)
        assert other["a"] is other["b"] and other["a"].dtype == np.float32
        assert isinstance(other["z"], np.ndarray) and other["z"].dtype == np.float32
    assert m2["a"] is m2["b"]
    np.testing.assert_array_equal(model["a"], [0.5, -1.5, 2.0])


def test_momentum_on_tied_weights_steps_once_with_the_summed_gradient():
    w = np.array([1.0, -2.0])
    model = [w, {"a": w, "b": np.array([0.5, 0.5])}]
    state = optim.setup(optim.Momentum(0.1, 0.9), model)
    g = [np.array([1.0, 1.0]), {"a": np.array([2.0, 0.0]), "b": None}]
    v = np.zeros(2)
    x = w.copy()
    for _ in range(2):
        state, model = optim.update(state, model, g)
        v = 0.9 * v + 0.1 * np.array([3.0, 1.0])
        x = x - v
    np.testing.assert_allclose(model[0], x)
    assert model[0] is model[1]["a"]
    np.testing.assert_array_equal(model[1]["b"], [0.5, 0.5])


def test_frozen_first_place_of_a_tie_and_gradient_for_a_frozen_field():
    class Tied:
        def __init__(self, w):
            self.stats, self.w = w, w

        def trainable(self):
            return ("w",)

    w = np.array([0.5, -1.0])
    m = Tied(w)
    g, = pb.gradient(lambda m: np.sum(m.w ** 2) + np.sum(m.stats), m)
    np.testing.assert_allclose(g.w, 2 * w + 1)
    assert g.stats is None
    state, new = optim.update(optim.setup(optim.Descent(0.1), m), m, g)
    np.testing.assert_allclose(new.w, w - 0.1 * (2 * w + 1))
    assert new.stats is new.w
    layer = Layer(np.array([1.0, 2.0]), np.array([0.0]), np.array([5.0, 5.0]))
    grad = pb.Tangent._make(Layer, {"w": np.ones(2), "stats": np.ones(2)})
    _, new = optim.update(optim.setup(optim.Descent(1.0), layer), layer, grad)
    np.testing.assert_allclose(new.w, [0.0, 1.0])
    np.testing.assert_array_equal(new.stats, [5.0, 5.0])


def test_jit_gradient_of_a_structure_matches_eager():
    t = np.array([0.5, -1.0, 2.0])
    x = np.array([1.5, 0.25, -0.5])
    loss = lambda m, x: np.sum(np.tanh(m["a"] * x) * m["nt"].w) * m["nt"].b ** 2
    traced = pb.jit(lambda m, x: pb.gradient(loss, m, x))
    for b in (0.7, 0.3):
        m = {"a": t, "nt": NT(t, b)}
        eager = pb.gradient(loss, m, x)
        got = traced(m, x)
        np.testing.assert_allclose(eager[0]["a"], fd(loss, (m, x), lambda a: a[0]["a"]), rtol=1e-6)
        np.testing.assert_allclose(got[0]["a"], eager[0]["a"])
        assert got[0]["nt"].w is None and eager[0]["nt"].w is None
        assert got[0]["nt"].b == pytest.approx(np.sum(np.tanh(t * x) * t) * 2 * b)
        np.testing.assert_allclose(got[1], eager[1])


def test_complex_gradient_for_a_real_parameter_is_refused():
    """It was cast to the real dtype with only a ComplexWarning, its imaginary part dropped."""
    model = {"w": np.array([1.0, 2.0])}
    state = optim.setup(optim.Descent(0.1), model)
    with pytest.raises(ValueError, match=r"model\['w'\] is complex.*parameter is real"):
        optim.update(state, model, {"w": np.array([1 + 1j, 2j])})
    z = {"w": np.array([1.0 + 1j, 2.0])}
    _, new = optim.update(optim.setup(optim.Descent(0.1), z), z, {"w": np.array([1 + 1j, 2j])})
    np.testing.assert_allclose(new["w"], z["w"] - 0.1 * np.conj([1 + 1j, 2j]))


def test_python_complex_gradient_for_a_complex_0d_parameter():
    """A Python complex was refused as a gradient, though a Python float is taken for a real 0-d parameter."""
    z = {"w": np.array(1.0 + 1j)}
    _, new = optim.update(optim.setup(optim.Descent(0.1), z), z, {"w": 1 + 1j})
    np.testing.assert_allclose(new["w"], 0.9 + 1.1j)
    r = {"w": np.array(1.0)}
    with pytest.raises(ValueError, match="parameter is real"):
        optim.update(optim.setup(optim.Descent(0.1), r), r, {"w": 1 + 1j})


def test_model_holding_a_logger_and_a_stream():
    """Differentiating it raised: the walk copied the logger's handlers down to sys.stderr, which cannot be
    rebuilt (and a copied logger is not the one `logging.getLogger` gives)."""
    import logging
    import sys

    class Model:
        def __init__(self):
            self.w = np.array([0.5, -1.0])
            self.log = logging.getLogger("pullback.tests.probe")
            self.log.addHandler(logging.StreamHandler(sys.stderr))
            self.out = sys.stdout

    m = Model()

    def f(m):
        m.log.debug("step")
        return np.sum(m.w ** 2) * float(m.log is logging.getLogger("pullback.tests.probe") and m.out is sys.stdout)

    g, = pb.gradient(f, m)
    np.testing.assert_allclose(g.w, 2 * m.w)
    assert g.log is None and g.out is None
    _, new = optim.update(optim.setup(optim.Descent(0.1), m), m, g)
    np.testing.assert_allclose(new.w, 0.8 * m.w)
    assert new.log is m.log
    m.log.handlers.clear()


@pytest.mark.xfail(strict=True, raises=pb.JitError,
                   reason="pb.jit refuses it (an error, not a wrong value): children() computes p._s * 1.0 from the "
                          "number's stand-in at each walk, a new stand-in that pb.jit cannot tell from the function "
                          "writing a new number into its argument, which a replay would not do")
def test_jit_of_a_registered_class_whose_children_compute_a_number():
    p = Stable(np.array([0.5, -1.0]), 1.5)
    g = pb.jit(lambda p: pb.gradient(lambda p: np.sum(p._w ** 2) * p._s ** 2, p)[0])(p)
    np.testing.assert_allclose(g.w, 2 * p._w * 1.5 ** 2)
    assert g.s == pytest.approx(np.sum(p._w ** 2) * 2 * 1.5)


class _ArrayLike:
    """An array of a library NumPy does not dispatch to: it converts by `__array__` alone."""

    __slots__ = ()
    dtype = "float32"
    _store = {}

    def __init__(self, values):
        _ArrayLike._store[id(self)] = np.asarray(values, np.float32)

    def __array__(self, dtype=None, copy=None):
        values = _ArrayLike._store[id(self)]
        return values if dtype is None else values.astype(dtype)


class _ForeignTensor(_ArrayLike):
    """With a `__dict__` holding nothing, as a torch tensor: an object with no fields to pb.tree."""


class _SlottedForeignTensor(_ArrayLike):
    """Without a `__dict__`: a leaf of pb.tree."""

    __slots__ = ()


def test_array_of_a_library_numpy_does_not_dispatch_to_is_refused():
    """It was walked as an object with no fields: a silent None gradient, and nothing trained it."""
    m = Obj(w=np.array([1.0, 2.0]), t=_ForeignTensor([3.0, 4.0]))
    with pytest.raises(TypeError, match=r"Argument 0\.t is a .*_ForeignTensor of dtype float32.*np\.asarray"):
        pb.gradient(lambda m: np.sum(m.w * np.asarray(m.t)), m)
    with pytest.raises(TypeError, match=r"_SlottedForeignTensor.*would get no gradient"):
        pb.gradient(lambda t: np.sum(np.asarray(t) ** 2), _SlottedForeignTensor([1.0]))
    with pytest.raises(TypeError, match=r"(?i)model\['t'\] is a .*_SlottedForeignTensor"):
        optim.setup(optim.Adam(), {"t": _SlottedForeignTensor([1.0])})
    with pytest.raises(TypeError, match=r"(?i)model\.t is a"):
        optim.setup(optim.Adam(), m)
    t = _SlottedForeignTensor([3.0, 4.0])
    g, = pb.gradient(lambda m, *, t: np.sum(m.w * np.asarray(t)), Obj(w=m.w), t=t)
    np.testing.assert_allclose(g.w, [3.0, 4.0])


def test_torch_tensor_in_a_model_is_refused():
    torch = pytest.importorskip("torch")
    m = Obj(w=np.array([1.0, 2.0]), t=torch.tensor([3.0, 4.0], dtype=torch.float64), steps=torch.tensor([1, 2]))
    with pytest.raises(TypeError, match=r"Argument 0\.t is a torch\.Tensor of dtype torch\.float64"):
        pb.gradient(lambda m: np.sum(m.w * m.t.numpy()), m)
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        optim.setup(optim.Descent(0.1), m)
    m.t = m.t.numpy()
    g, = pb.gradient(lambda m: np.sum(m.w * m.t) + float(m.steps.sum()), m)
    np.testing.assert_allclose(g.w, [3.0, 4.0])
    np.testing.assert_allclose(g.t, [1.0, 2.0])
    assert g.steps is None


def test_destructure_refuses_weights_it_would_leave_out():
    """A deque of arrays or an array of another library was left out of the vector without a word."""
    with pytest.raises(TypeError, match=r"(?i)model\['q'\] is a deque"):
        optim.destructure({"w": np.ones(2), "q": collections.deque([np.ones(2)])})
    with pytest.raises(TypeError, match=r"(?i)model\['t'\] is a .*_SlottedForeignTensor"):
        optim.destructure({"w": np.ones(2), "t": _SlottedForeignTensor([1.0])})
    flat, rebuild = optim.destructure({"w": np.array([1.0, 2.0]), "n": 3, "s": "x", "steps": np.arange(2), "f": 1.5})
    np.testing.assert_array_equal(flat, [1.0, 2.0])
    f = lambda v: np.sum(rebuild(v)["w"] ** 3)
    np.testing.assert_allclose(pb.gradient(f, flat)[0], fd(f, (flat,), lambda a: a[0]), rtol=1e-6)


def test_a_python_random_in_a_model_is_the_models_own_during_a_gradient():
    """random.Random is a leaf: the function draws from the model's generator itself, as without pullback."""
    import random

    class Noisy:
        def __init__(self):
            self.w = np.array([1.0, 2.0])
            self.rng = random.Random(0)

    model = Noisy()
    expected = random.Random(0)
    first = expected.random()
    value, (grad,) = pb.withgradient(lambda m: np.sum(m.w) * m.rng.random(), model)
    assert value == pytest.approx(3.0 * first)
    np.testing.assert_allclose(grad.w, [first, first])
    assert grad.rng is None
    assert model.rng.random() == expected.random()  # the model's generator moved on


def test_jit_refuses_a_function_that_writes_a_number_into_its_argument():
    """Even one equal to the old (-0.0 for 0.0, which 1 / x tells apart): a replay cannot write it."""
    class Holder:
        def __init__(self):
            self.s = 0.0
            self.w = np.ones(2)

    def f(h):
        h.s = -h.s
        return np.sum(h.w)

    with pytest.raises(pb.JitError, match=r"changed args\[0\]\.s"):
        pb.jit(f)(Holder())
