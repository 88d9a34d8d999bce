"""Models nested 5,000 deep (far past Python's recursion limit): setup, update, update_, adjust,
freeze, destructure, train/test modes and weight import walk them without recursion and give
the values worked out by hand."""

import sys

import numpy as np

import pullback as pb
from pullback import optim
from pullback.nn.torch_interop import load_torch_state_dict, parameter_layers

DEPTH = 5000


class Link:
    """A linked list of layers: a weight, an integer counter (not trained) and the rest of the list."""

    def __init__(self, w, rest):
        self.w, self.steps, self.rest = w, np.array([0]), rest


def linked(depth):
    """The list, and its nodes outermost first; node i holds the weight [i, -i]."""
    node, nodes = None, []
    for i in reversed(range(depth)):
        node = Link(np.array([float(i), -float(i)]), node)
        nodes.append(node)
    return node, nodes[::-1]


def nodes_of(model, field="rest"):
    """The nodes of a linked structure, outermost first (a loop, not a walk)."""
    out = []
    while model is not None:
        out.append(model)
        model = getattr(model, field, None)
    return out


def list_gradient(depth, grad_of):
    """A gradient for `linked(depth)` with `grad_of(i)` at node i's weight, built innermost first."""
    g = None
    for i in reversed(range(depth)):
        g = pb.Tangent(Link, w=grad_of(i), steps=None, rest=g)
    return g


def test_the_depth_is_past_the_recursion_limit():
    assert DEPTH > 2 * sys.getrecursionlimit()


def test_setup_update_and_update_in_place_with_a_tie_across_the_whole_depth():
    model, nodes = linked(DEPTH)
    nodes[-1].w = nodes[0].w  # the innermost layer reuses the outermost weight: one parameter, two places
    state = optim.setup(optim.Descent(0.5), model)
    states = nodes_of(state)
    assert len(states) == DEPTH and states[-1].w is state.w and states[5].steps is None
    assert len({id(s.w) for s in states}) == DEPTH - 1

    # partial gradients at both places of the tied weight: [1, 2] outside, [3, 6] inside
    grad = list_gradient(DEPTH, lambda i: np.array([1.0, 2.0]) * (3.0 if i == DEPTH - 1 else 1.0))
    new_state, new = optim.update(state, model, grad)
    new_nodes = nodes_of(new)
    assert len(new_nodes) == DEPTH and new_nodes[-1].w is new_nodes[0].w
    np.testing.assert_array_equal(new_nodes[0].w, [0.0 - 0.5 * 4.0, 0.0 - 0.5 * 8.0])  # one step with the sum
    for i in (1, 2, 2500, DEPTH - 2):
        np.testing.assert_array_equal(new_nodes[i].w, [i - 0.5, -i - 1.0])
        assert new_nodes[i].steps is nodes[i].steps
    np.testing.assert_array_equal(nodes[7].w, [7.0, -7.0])  # update changed nothing it was given
    assert len(nodes_of(new_state)) == DEPTH and nodes_of(new_state)[-1].w is new_state.w

    weight = nodes[3].w
    optim.update_(state, model, grad)
    assert nodes[3].w is weight
    np.testing.assert_array_equal(weight, [2.5, -4.0])
    np.testing.assert_array_equal(nodes[-1].w, [-2.0, -4.0])


def test_adjust_freeze_and_thaw():
    model, _ = linked(DEPTH)
    state = optim.setup(optim.Momentum(0.1, 0.9), model)
    adjusted = optim.adjust(state, lr=0.25)
    old_leaves, new_leaves = [s.w for s in nodes_of(state)], [s.w for s in nodes_of(adjusted)]
    assert len(new_leaves) == DEPTH and not {id(leaf) for leaf in old_leaves} & {id(leaf) for leaf in new_leaves}
    assert all(leaf.rule == optim.Momentum(0.25, 0.9) for leaf in new_leaves)
    assert all(leaf.rule == optim.Momentum(0.1, 0.9) for leaf in old_leaves)

    optim.freeze(nodes_of(adjusted)[DEPTH // 2])  # the inner half holds still
    assert [leaf.frozen for leaf in new_leaves] == [False] * (DEPTH // 2) + [True] * (DEPTH - DEPTH // 2)
    optim.thaw(adjusted)
    assert not any(leaf.frozen for leaf in new_leaves)


def test_destructure_and_rebuild():
    model, nodes = linked(DEPTH)
    flat, rebuild = pb.destructure(model)
    np.testing.assert_array_equal(flat, np.concatenate([node.w for node in nodes]))
    new_nodes = nodes_of(rebuild(np.arange(2.0 * DEPTH)))
    assert len(new_nodes) == DEPTH
    for i in (0, 1, 2500, DEPTH - 1):
        np.testing.assert_array_equal(new_nodes[i].w, [2.0 * i, 2.0 * i + 1])
        assert new_nodes[i].steps is nodes[i].steps


class Block:
    """A layer of a deep stack: a Dropout and the block inside it."""

    def __init__(self, inner):
        self.dropout, self.inner = pb.nn.Dropout(0.5), inner


def test_trainmode_and_testmode_reach_every_layer():
    model = None
    for _ in range(DEPTH):
        model = Block(model)
    blocks = nodes_of(model, "inner")
    assert pb.nn.trainmode(model) is model and all(b.dropout.training is True for b in blocks)
    assert pb.nn.testmode(model) is model and all(b.dropout.training is False for b in blocks)
    pb.nn.trainmode(model, "auto")
    assert all(b.dropout.training is None for b in blocks)


class Wrap:
    def __init__(self, inner):
        self.inner = inner


def test_weight_import_finds_the_layer_at_the_bottom():
    model = pb.nn.Dense(2, 1)
    for _ in range(DEPTH):
        model = Wrap(model)
    dense = nodes_of(model, "inner")[-1]
    assert parameter_layers(model) == [dense]
    new = load_torch_state_dict(model, {"weight": np.array([[1.0, 2.0]]), "bias": np.array([0.5])})
    layer = nodes_of(new, "inner")[-1]
    assert type(layer) is pb.nn.Dense and layer is not dense and layer.weight.dtype == np.float32
    np.testing.assert_array_equal(layer.weight, [[1.0, 2.0]])
    np.testing.assert_array_equal(layer.bias, [0.5])
