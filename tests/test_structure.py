"""Gradients mirror the structure of the arguments: containers, objects, None, ties, trainable, cycles."""

import copy
import dataclasses
from collections import OrderedDict, namedtuple

import attrs
import numpy as np
import pytest

import pullback as pb

Point = namedtuple("Point", "x y")


@dataclasses.dataclass
class Plain:
    w: np.ndarray
    n: int


@dataclasses.dataclass(frozen=True)
class Frozen:
    w: np.ndarray
    scale: float


@dataclasses.dataclass(slots=True)
class Slotted:
    w: np.ndarray
    b: np.ndarray


@attrs.define
class AttrsLayer:
    w: np.ndarray
    tag: str


class WithSlots:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b


def test_containers_mirror_their_types_and_keys():
    x = np.array([1.0, 2.0])
    args = ((x, 3), [x.copy(), "s"], {"k": x.copy(), "n": None}, Point(x.copy(), 2.0), OrderedDict(a=x.copy()))
    grads = pb.gradient(lambda t, lst, d, p, o: np.sum(t[0]) + np.sum(lst[0] * 2) + np.sum(d["k"] * 3) + np.sum(p.x) * p.y + np.sum(o["a"]), *args)
    gt, gl, gd, gp, go = grads
    assert type(gt) is tuple and gt[1] is None
    np.testing.assert_allclose(gt[0], [1.0, 1.0])
    assert type(gl) is list and gl[1] is None
    np.testing.assert_allclose(gl[0], [2.0, 2.0])
    assert type(gd) is dict and list(gd) == ["k", "n"] and gd["n"] is None
    assert type(gp) is Point and gp.y == pytest.approx(3.0)
    np.testing.assert_allclose(gp.x, [2.0, 2.0])
    assert isinstance(go, dict) and list(go) == ["a"]


def test_dataclasses_frozen_slotted_attrs_and_slots_objects():
    w = np.array([1.0, -2.0])
    objs = (Plain(w, 3), Frozen(w.copy(), 2.0), Slotted(w.copy(), w * 0), AttrsLayer(w.copy(), "t"), WithSlots(w.copy(), 5))
    f = lambda p, fr, s, a, ws: np.sum(p.w * p.n) + np.sum(fr.w) * fr.scale + np.sum(s.w * s.b) + np.sum(a.w**2) + np.sum(ws.a)
    gp, gfr, gs, ga, gws = pb.gradient(f, *objs)
    assert gp.primal_type is Plain and list(gp.keys()) == ["w", "n"] and gp.n is None
    np.testing.assert_allclose(gp.w, [3.0, 3.0])
    assert gfr.primal_type is Frozen and gfr.scale == pytest.approx(-1.0)
    np.testing.assert_allclose(gfr.w, [2.0, 2.0])
    np.testing.assert_allclose(gs.w, [0.0, 0.0])
    np.testing.assert_allclose(gs.b, w)
    assert ga.primal_type is AttrsLayer and ga.tag is None
    np.testing.assert_allclose(ga.w, 2 * w)
    assert list(gws.keys()) == ["a", "b"] and gws.b is None


def test_tangent_is_read_only_with_attribute_and_item_access_and_repr():
    obj = Plain(np.array([1.0]), 2)
    (g,) = pb.gradient(lambda p: np.sum(p.w) * 2.0, obj)
    assert g.w is g["w"]
    assert "w" in g and len(g) == 2
    with pytest.raises(AttributeError, match="read-only"):
        g.w = 1
    with pytest.raises(AttributeError, match="no entry"):
        g.missing
    with pytest.raises(KeyError):
        g["missing"]
    assert repr(g) == "Tangent[Plain](w=array([2.]), n=None)"


def test_all_none_containers_and_tangents_collapse_to_none():
    w = np.ones(2)
    outer = {"used": w, "unused": (np.ones(2), Plain(np.ones(1), 1))}
    (g,) = pb.gradient(lambda d: np.sum(d["used"]), outer)
    assert g["unused"] is None
    assert pb.gradient(lambda p: 1.0, Plain(w, 1)) == (None,)


def test_non_differentiable_leaves_get_none():
    rng = np.random.default_rng(0)
    holder = {
        "int": 3, "bool": True, "ints": np.arange(3), "bools": np.ones(2, bool), "text": "x",
        "fn": np.sin, "cls": Plain, "rng": rng, "none": None, "w": np.ones(2),
    }

    def f(h):
        return np.sum(h["fn"](h["w"] * h["int"] * h["ints"][1])) + h["rng"].normal() * 0

    (g,) = pb.gradient(f, holder)
    assert set(g) == set(holder)
    assert all(g[k] is None for k in holder if k != "w")
    np.testing.assert_allclose(g["w"], 3 * np.cos(3 * np.ones(2)))


def test_unused_float_array_gets_none_not_zeros():
    assert pb.gradient(lambda a, b: np.sum(a), np.ones(2), np.ones(2))[1] is None


def test_tied_array_gets_the_total_at_its_first_place():
    w = np.array([1.0, 2.0])
    model = {"enc": w, "dec": w}
    (g,) = pb.gradient(lambda m: np.sum(m["enc"] * 2.0) + np.sum(m["dec"] * 5.0), model)
    np.testing.assert_allclose(g["enc"], [7.0, 7.0])  # d/dw of 2 sum(w) + 5 sum(w)
    assert g["dec"] is None


def test_shared_sub_object_gets_the_total_at_its_first_place():
    layer = Plain(np.array([1.0]), 1)
    (g,) = pb.gradient(lambda t: np.sum(t[0].w) * 2.0 + np.sum(t[1].w) * 3.0, (layer, layer))
    np.testing.assert_allclose(g[0].w, [5.0])
    assert g[1] is None


class Partly:
    def __init__(self):
        self.weight = np.array([1.0, 2.0])
        self.running = np.array([5.0, 5.0])

    def trainable(self):
        return ("weight",)


def test_trainable_fields_only_are_tracked():
    m = Partly()
    seen = {}

    def f(m):
        seen["running_type"] = type(m.running)
        return np.sum(m.weight * m.running)

    (g,) = pb.gradient(f, m)
    assert seen["running_type"] is np.ndarray  # never tracked
    assert g.running is None and list(g.keys()) == ["weight", "running"]
    np.testing.assert_allclose(g.weight, [5.0, 5.0])


def test_trainable_naming_an_unknown_field_is_an_error():
    class Bad:
        def __init__(self):
            self.w = np.ones(1)

        def trainable(self):
            return ("nope",)

    with pytest.raises(ValueError, match="nope"):
        pb.gradient(lambda m: np.sum(m.w), Bad())


class Node:
    def __init__(self, w):
        self.w = w
        self.parent = None
        self.children = []


def test_cyclic_object_graph_terminates_and_gradients_flow_through_back_references():
    root = Node(np.array([2.0]))
    child = Node(np.array([3.0]))
    root.children.append(child)
    child.parent = root

    def f(r):
        c = r.children[0]
        return np.sum(c.w * c.parent.w)  # reaches root.w again through the cycle

    (g,) = pb.gradient(f, root)
    np.testing.assert_allclose(g.w, [3.0])  # the contribution through the back-reference counts at root
    np.testing.assert_allclose(g.children[0].w, [2.0])
    assert g.children[0].parent is None


def test_gradient_never_modifies_its_arguments():
    m = {"w": np.array([1.0, 2.0]), "layer": Plain(np.array([3.0]), 2), "lst": [np.array([4.0])]}
    before = copy.deepcopy(m)
    ids = (id(m["w"]), id(m["layer"]), id(m["layer"].w), id(m["lst"]))

    def f(m):
        m["w"] = m["w"] * 100  # rebinding inside f happens on the copy
        m["layer"].n = 99
        m["lst"].append(None)
        w = m["lst"][0]
        w += 1.0
        return np.sum(m["w"]) + np.sum(m["layer"].w) + np.sum(w)

    pb.gradient(f, m)
    assert (id(m["w"]), id(m["layer"]), id(m["layer"].w), id(m["lst"])) == ids
    np.testing.assert_array_equal(m["w"], before["w"])
    assert m["layer"].n == 2 and len(m["lst"]) == 1
    np.testing.assert_array_equal(m["lst"][0], before["lst"][0])


def test_registered_container_is_seen_into():
    class Box:
        def __init__(self, items):
            self._items = tuple(items)

        __slots__ = ("_items",)

    pb.tree.register(Box, lambda b: {"items": b._items}, lambda b, kids: Box(kids["items"]))
    (g,) = pb.gradient(lambda b: np.sum(b._items[0] * 4.0), Box([np.ones(2), 1]))
    assert g.primal_type is Box
    np.testing.assert_allclose(g["items"][0], [4.0, 4.0])
