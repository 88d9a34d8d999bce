"""Objects, rules and workers at their edges: a subclass of a registered class keeps its own attributes; a
primitive method without a reverse rule differentiated through `self` runs its body; tangent trees copied
from the primals; a module-level jitted function pickles by name; `tree.fmap` refuses a companion leaf where
the tree has a container; `pb.distributed.step` with generators whose state holds arrays."""

import copy
import importlib
import pickle
import sys

import numpy as np
import pytest

import pullback as pb
from pullback import tree

# --- registered base classes: a subclass adding attributes in __init__ --------------------------------

class _RegBase:
    def __init__(self, w):
        self.w = w


def _reg_rebuild(b, kids):
    new = copy.copy(b)
    new.w = kids["w"]
    return new


tree.register(_RegBase, lambda b: {"w": b.w}, _reg_rebuild)


class _RegSub(_RegBase):  # same __dict__ storage as the base, one more attribute
    def __init__(self, w, v):
        super().__init__(w)
        self.v = v


def test_subclass_of_registered_class_with_extra_attribute_keeps_its_gradient():
    # a subclass with a __dict__ may add attributes the base's registration does not list: it is walked as a
    # plain object, so `v` is neither left out of the gradient nor skipped by tree.fmap
    w, v = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    (g,) = pb.gradient(lambda s: np.sum(s.w * s.v), _RegSub(w, v))
    assert "v" in g
    np.testing.assert_allclose(g.v, w)
    np.testing.assert_allclose(g.w, v)
    assert set(tree.children(_RegSub(w, v))) == {"w", "v"}


def test_tree_fmap_maps_the_extra_attribute_of_a_subclass_of_a_registered_class():
    # (an optimiser step or a dtype cast of the model must not skip it)
    new = tree.fmap(lambda a: a * 10, _RegSub(np.array([1.0]), np.array([2.0])))
    np.testing.assert_allclose(new.v, [20.0])


# --- pb.primitive methods differentiated through self -------------------------------------------------

class _NoRule:
    def __init__(self, w):
        self.w = w

    @pb.primitive  # opaque to pb.jit; its body is plain differentiable NumPy and has no rule
    def g(self, x):
        return self.w * x


def test_primitive_method_without_rule_differentiated_through_self_still_works():
    # no rule is bypassed: the body is traced as a plain function's
    x = np.array([0.3, 0.7])
    (g,) = pb.gradient(lambda m: np.sum(m.g(x)), _NoRule(np.array([2.0, 3.0])))
    np.testing.assert_allclose(g.w, x)


class _ForwardOnly:
    def __init__(self, w):
        self.w = w

    @pb.primitive
    def f(self, x):
        return np.sin(self.w * x)


@pb.frule(_ForwardOnly.f)
def _forward_only_frule(primals, tangents):
    s, x = primals
    _, tx = tangents
    return np.sin(s.w * x), np.cos(s.w * x) * (s.w * tx if tx is not None else 0.0)


def test_jvp_through_self_of_a_primitive_method_with_only_a_forward_rule():
    # the values reached through self: the body is traced in forward mode
    x, w = np.array([0.3, 0.7]), np.array([2.0, 3.0])
    _, y_dot = pb.jvp(lambda w: _ForwardOnly(w).f(x), (w,), (np.ones(2),))
    np.testing.assert_allclose(y_dot, np.cos(w * x) * x)


# --- jvp: tangents for int leaves ------------------------------------------------------------------------

def test_jvp_accepts_a_tangent_tree_copied_from_the_primals_with_only_float_leaves_replaced():
    # a tangent tree copied from the primals with the float leaves replaced: its int array (equal to the
    # primal's) says no tangent
    p = {"w": np.array([1.0, 2.0]), "idx": np.array([1, 0])}
    t = copy.deepcopy(p)
    t["w"] = np.ones(2)
    y, y_dot = pb.jvp(lambda p: np.sum(p["w"][p["idx"]] * 3.0), (p,), (t,))
    assert float(y_dot) == 6.0


def test_jvp_int_tangent_check_does_not_depend_on_int_identity():
    # The same call is accepted for n = 3 (small ints are one object) and refused for n = 3000 whose
    # tangent is an equal int made separately: the outcome depends on CPython's int cache.
    n_primal, n_tangent = 3000, int("3000")
    _, y_dot = pb.jvp(lambda x, n: x * n, (np.ones(2), n_primal), (np.ones(2), n_tangent))
    np.testing.assert_allclose(y_dot, [3000.0, 3000.0])


# --- pb.jit: "a jitted function pickles" ----------------------------------------------------------------

def test_module_level_jitted_function_pickles_with_the_standard_pickle(tmp_path, monkeypatch):
    # Broken promise (docs/jit.md, CHANGELOG): "a jitted function pickles". Jitted.__reduce__ pickles
    # `fn` by reference, which for a decorated module function is the Jitted itself:
    # PicklingError "it's not the same object as jmod.f" (cloudpickle happens to work).
    (tmp_path / "_probe_jmod.py").write_text("import numpy as np, pullback as pb\n@pb.jit\ndef f(x):\n"
                                             "    return np.sin(x) * 2.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("_probe_jmod")
    try:
        x = np.array([0.0, 1.0])
        mod.f(x)
        again = pickle.loads(pickle.dumps(mod.f))
        np.testing.assert_allclose(again(x), np.sin(x) * 2.0)
    finally:
        sys.modules.pop("_probe_jmod", None)


# --- tree.fmap companion check --------------------------------------------------------------------------

def test_fmap_refuses_a_leaf_companion_where_the_tree_has_a_container():
    # a companion array where x holds a list would be dropped (each leaf given None)
    with pytest.raises(TypeError):
        tree.fmap(lambda a, g: a - g if g is not None else a, {"w": [1.0, 2.0]}, {"w": np.array([5.0, 6.0])})


# --- pb.distributed.step with a generator whose state holds arrays -------------------------------------

def _philox_loss(m, x):
    return np.sum(m["w"] * x) + 0.0 * m["rng"].random()


def test_distributed_step_with_a_philox_generator():
    # Philox's, MT19937's and SFC64's states hold arrays: the step compares them element by element
    distributed = pytest.importorskip("distributed")
    client = distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=":0")
    try:
        shards = [(np.ones((3, 2)),), (np.ones((2, 2)),)]
        steps = {}
        for name, rng in (("Philox", np.random.Generator(np.random.Philox(0))), ("PCG64", np.random.default_rng(0))):
            m = {"w": np.ones(2), "rng": rng}
            new, _, _ = pb.distributed.step(client, _philox_loss, m, pb.optim.setup(pb.optim.Descent(0.1), m), shards)
            steps[name] = new["w"]
        np.testing.assert_allclose(steps["Philox"], steps["PCG64"])
        np.testing.assert_allclose(steps["PCG64"], 1.0 - 0.1 * (3 / 5 * 3 + 2 / 5 * 2))  # the size-weighted mean
    finally:
        client.close()
