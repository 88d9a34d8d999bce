"""pb.tree: children, fmap, leaves, register, trainable_names."""

import dataclasses
from collections import namedtuple

import numpy as np
import pytest

import pullback as pb
from pullback import tree

Pair = namedtuple("Pair", "a b")


@dataclasses.dataclass(frozen=True)
class Frozen:
    w: np.ndarray
    k: int


class Plain:
    def __init__(self, w, name):
        self.w, self.name = w, name


def test_children_of_each_kind():
    w = np.ones(2)
    assert tree.children((1, 2)) == {0: 1, 1: 2}
    assert tree.children([w])[0] is w
    assert tree.children({"a": 1}) == {"a": 1}
    assert tree.children(Pair(1, 2)) == {"a": 1, "b": 2}
    assert list(tree.children(Frozen(w, 3))) == ["w", "k"]
    assert list(tree.children(Plain(w, "x"))) == ["w", "name"]
    for leaf in (w, 1.0, "s", None, np.sin, Plain, np.random.default_rng(0)):
        assert tree.children(leaf) == {}


def test_fmap_rebuilds_every_kind_without_touching_the_original():
    w = np.array([1.0, 2.0])
    x = {"t": (w, 3), "p": Pair(w * 1, "s"), "f": Frozen(w * 2, 1), "o": Plain(w * 3, "n"), "l": [w * 4]}
    doubled = tree.fmap(lambda v: v * 2 if isinstance(v, np.ndarray) else v, x)
    np.testing.assert_allclose(doubled["t"][0], [2.0, 4.0])
    assert doubled["t"][1] == 3 and type(doubled["p"]) is Pair and doubled["p"].b == "s"
    assert type(doubled["f"]) is Frozen and doubled["f"].k == 1
    np.testing.assert_allclose(doubled["f"].w, [4.0, 8.0])
    assert type(doubled["o"]) is Plain and doubled["o"].name == "n"
    np.testing.assert_allclose(doubled["l"][0], [8.0, 16.0])
    np.testing.assert_allclose(x["f"].w, [2.0, 4.0])  # original untouched
    assert doubled["o"] is not x["o"]


def test_fmap_returns_unchanged_containers_as_the_same_objects():
    x = {"a": [1, 2], "b": Plain(np.ones(1), "n")}
    same = tree.fmap(lambda v: v, x)
    assert same is x


def test_fmap_cache_visits_a_shared_leaf_once_and_keeps_the_tie():
    w = np.ones(2)
    calls = []
    out = tree.fmap(lambda v: calls.append(1) or (v + 1 if isinstance(v, np.ndarray) else v), {"a": w, "b": [w]})
    assert out["a"] is out["b"][0]
    assert sum(calls) == 1  # the dict and the list are nodes; w is the only leaf, visited once
    np.testing.assert_allclose(out["a"], [2.0, 2.0])


def test_fmap_walks_companion_trees_including_gradients():
    model = Plain(np.array([1.0, 2.0]), "n")
    (g,) = pb.gradient(lambda m: np.sum(m.w * 3.0), model)
    new = tree.fmap(lambda p, dp: p - 0.1 * dp if dp is not None else p, model, g)
    np.testing.assert_allclose(new.w, [0.7, 1.7])
    assert new.name == "n"
    untouched = tree.fmap(lambda p, dp: p if dp is None else p - dp, model, None)
    assert untouched is model


def test_fmap_exclude_marks_nodes_as_leaves():
    x = {"keep": (1, 2), "other": (3, 4)}
    out = tree.fmap(lambda v: "leaf" if isinstance(v, tuple) else v * 10, x, exclude=lambda v: v == (1, 2))
    assert out == {"keep": "leaf", "other": (30, 40)}


def test_fmap_and_leaves_terminate_on_cycles():
    a = Plain(np.ones(1), "a")
    b = Plain(np.zeros(1), "b")
    a.name, b.name = b, a  # a -> b -> a
    out = tree.fmap(lambda v: v + 1 if isinstance(v, np.ndarray) else v, a)
    np.testing.assert_allclose(out.w, [2.0])
    np.testing.assert_allclose(out.name.w, [1.0])
    assert out.name.name is out and out is not a  # the new objects form the cycle
    np.testing.assert_allclose(a.w, [1.0])
    found = tree.leaves(a)
    assert len([v for v in found if isinstance(v, np.ndarray)]) == 2


def test_leaves_lists_each_object_once_in_walk_order():
    w, v = np.zeros(1), np.ones(1)
    found = tree.leaves({"a": w, "b": (v, w), "c": 3})
    assert found[0] is w and found[1] is v and found[2] == 3 and len(found) == 3


def test_trainable_names():
    class Layer:
        def __init__(self):
            self.w, self.state = np.ones(1), np.zeros(1)

        def trainable(self):
            return ["w"]

    assert tree.trainable_names(Layer()) == {"w"}
    assert tree.trainable_names(Plain(1, 2)) is None

    @dataclasses.dataclass
    class HasFlag:
        trainable: bool = True  # a field named trainable is not the method

    assert tree.trainable_names(HasFlag()) is None


def test_register_custom_container():
    class Opaque:
        __slots__ = ("_data",)

        def __init__(self, data):
            object.__setattr__(self, "_data", dict(data))

    tree.register(Opaque, lambda o: dict(o._data), lambda o, kids: Opaque(kids))
    x = Opaque({"p": np.ones(2), "q": "s"})
    assert set(tree.children(x)) == {"p", "q"}
    out = tree.fmap(lambda v: v * 3 if isinstance(v, np.ndarray) else v, x)
    assert type(out) is Opaque and out._data["q"] == "s"
    np.testing.assert_allclose(out._data["p"], [3.0, 3.0])


def test_objects_that_are_not_containers_are_leaves():
    for leaf in (np.sin, np.add, lambda x: x, Plain, np.float32, np.random.default_rng(1), range(3), slice(1), "s"):
        assert tree.kind_of(leaf) is None


# --- the one walker: paths, identity, depth ------------------------------------------------------
def test_paths_print_one_way_for_every_kind():
    class Layer:
        def __init__(self):
            self.w = np.ones(1)

    x = {"layers": [Layer(), Pair(np.zeros(1), (np.ones(1),))]}
    paths = [p.format("model") for p, _ in tree.leaves_with_path(x)]
    assert paths == ["model['layers'][0].w", "model['layers'][1].a", "model['layers'][1].b[0]"]
    assert tree.Path(()).child("not an identifier", True).format("m") == "m['not an identifier']"
    assert tree.Path(()).child("a", True).child(2, False).keys == ("a", 2)


def test_walk_is_iterative_and_keeps_identity_and_cycles():
    deep = [np.ones(1)]
    for _ in range(50_000):
        deep = [deep]
    copied = tree.copy_containers(deep, lambda v, path: v)
    depth, node = 0, copied
    while isinstance(node, list) and len(node) == 1 and isinstance(node[0], list):
        node, depth = node[0], depth + 1
    assert depth == 50_000 and node is not deep and isinstance(node[0], np.ndarray)

    shared = {"k": [1]}
    ring = [shared, shared]
    ring.append(ring)
    new = tree.copy_containers(ring, lambda v, path: v)
    assert new[0] is new[1] and new[0] is not shared and new[2] is new
    assert new[0] == {"k": [1]} and new[0]["k"] is not shared["k"]


def test_copy_containers_refuses_an_immutable_container_inside_its_own_cycle():
    inner = []
    outer = (inner,)
    inner.append(outer)
    with pytest.raises(TypeError, match="immutable container \\(tuple\\) that contains itself"):
        tree.copy_containers(outer, lambda v, path: v)


def test_gradient_like_gives_a_shared_object_its_result_once_at_its_first_trainable_place():
    class Half:
        def __init__(self, w, frozen):
            self.frozen, self.w = frozen, w

        def trainable(self):
            return ("w",)

    w = np.ones(2)
    x = {"first": Half(np.zeros(1), w), "second": [w, w], "n": 3}
    result = tree.gradient_like(x, lambda v, path: path.format("x") if isinstance(v, np.ndarray) else None)
    # `frozen` comes first in walk order but is not trainable: the tie's result goes to second[0]
    assert result["first"].frozen is None and result["first"].w == "x['first'].w"
    assert result["second"] == ["x['second'][0]", None] and result["n"] is None


def test_leaves_with_path_and_trainable_only_skip_frozen_fields():
    class Half:
        def __init__(self):
            self.w, self.stats = np.ones(1), np.zeros(1)

        def trainable(self):
            return ("w",)

    assert [str(p) for p, _ in tree.leaves_with_path(Half(), trainable_only=True)] == [".w"]
    assert [str(p) for p, _ in tree.leaves_with_path(Half())] == [".w", ".stats"]


def test_array_types_of_other_libraries_are_leaves():
    class ArrayLike:
        def __init__(self):
            self.data = [1.0]

        def __array_function__(self, *a):
            return NotImplemented

    assert tree.kind_of(ArrayLike()) is None
    assert tree.kind_of(pb.stop_gradient(np.ones(1))) is None


def test_a_node_gets_its_children_in_their_own_order_when_a_frozen_one_comes_first():
    class Half:
        def __init__(self):
            self.stats, self.w, self.b = np.zeros(1), np.ones(1), np.ones(1)

        def trainable(self):
            return ("w", "b")

    seen = []

    def node(value, kind, old, new, parts, path, shell):
        seen.append(list(new))
        return new

    tree.walk(Half(), lambda v, parts, path: v * 2, node, trainable_only=True)
    tree.walk({"a": 1.0, "b": [2.0, 3.0]}, lambda v, parts, path: v, node)
    assert seen == [["stats", "w", "b"], [0, 1], ["a", "b"]]
    new = tree.fmap(lambda v: v + 1, Half(), trainable_only=True)
    assert list(vars(new)) == ["stats", "w", "b"] and new.stats[0] == 0.0 and new.w[0] == 2.0


def test_a_trainable_method_returning_one_string_is_refused():
    class Model:
        def __init__(self):
            self.w, self.b, self.wb = np.ones(2), np.ones(2), np.ones(2)

        def trainable(self):
            return ("wb")  # a string: set("wb") would name the fields w and b

    with pytest.raises(TypeError, match=r"Model.trainable\(\) returned the string 'wb'.*\('wb',\)"):
        pb.gradient(lambda m: np.sum(m.w * m.b * m.wb), Model())


# --- subclasses of registered classes; fmap with trees of another structure ---------------------------

class _Hidden:
    """A class whose state pb.tree cannot see without registration."""

    __slots__ = ()
    store = {}

    def __new__(cls, a, b):
        self = object.__new__(cls)
        _Hidden.store[id(self)] = (a, b)
        return self

    def total(self):
        a, b = _Hidden.store[id(self)]
        return np.sum(a * b)


tree.register(_Hidden, lambda p: dict(zip("ab", _Hidden.store[id(p)])), lambda p, kids: type(p)(kids["a"], kids["b"]))


class _HiddenSub(_Hidden):
    __slots__ = ()


def test_a_subclass_of_a_registered_class_is_seen_through_the_registration():
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    (g,) = pb.gradient(lambda p: p.total(), _Hidden(a, b))
    np.testing.assert_allclose(g.a, b)
    try:
        (g,) = pb.gradient(lambda p: p.total(), _HiddenSub(a, b))
    except TypeError as error:  # a refusal naming the class and pb.tree.register is fine too
        assert "_HiddenSub" in str(error) and "register" in str(error)
        return
    assert g is not None, "silent None gradient for a subclass of a registered class"
    np.testing.assert_allclose(g.a, b)
    np.testing.assert_allclose(g.b, a)


def test_fmap_refuses_a_companion_dict_with_an_entry_the_tree_lacks():
    # a misspelt key in the update is dropped silently; the optimisers refuse it (README)
    params = {"w": np.array([1.0])}
    grads = {"w": np.array([1.0]), "bias": np.array([5.0])}
    with pytest.raises((TypeError, ValueError)):
        tree.fmap(lambda p, g: p - g, params, grads)


def test_fmap_refuses_a_companion_list_longer_than_the_tree():
    with pytest.raises((TypeError, ValueError)):
        tree.fmap(lambda a, b: a + b, [1.0], [1.0, 2.0])
