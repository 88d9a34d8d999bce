"""pb.optim: rule values against hand derivations and NumPy references, state structure, purity,
in-place updates, None gradients, ties, dtypes, adjust, freeze/thaw and error messages."""

import dataclasses
from collections import namedtuple

import numpy as np
import pytest

import pullback as pb
from pullback import optim

Pair = namedtuple("Pair", "left right")


class Dense:
    def __init__(self, weight, bias, activation=np.tanh):
        self.weight, self.bias, self.activation = weight, bias, activation

    def __call__(self, x):
        y = x @ self.weight.T
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y)


class Chain:
    def __init__(self, *layers):
        self.layers = layers

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Norm:
    """A layer with non-trainable float statistics, an integer counter and a Python float."""

    def __init__(self, n):
        self.scale = np.ones(n)
        self.shift = np.zeros(n)
        self.running_mean = np.zeros(n)
        self.count = np.array([0])
        self.momentum = 0.1

    def trainable(self):
        return ("scale", "shift")


@dataclasses.dataclass
class Block:
    w: np.ndarray
    extra: dict


def leaf_arrays(state):
    """(leaf, [copies of the leaf's state arrays and numbers]) for every distinct leaf."""
    out = []
    for leaf in optim._state.state_leaves(state):
        out.append((leaf, optim._state.copy_value(leaf.state), leaf.frozen, leaf.rule))
    return out


def model_arrays(model):
    return [a for a in pb.tree.leaves(model) if isinstance(a, np.ndarray)]


# --- the known values from the issue, derived by hand ---------------------------------
def test_descent_known_value():
    m, g = (np.array([1.0, 2.0]),), (np.array([25.0, 33.0]),)
    _, new = optim.update(optim.setup(optim.Descent(0.1), m), m, g)
    np.testing.assert_allclose(new[0], [1 - 2.5, 2 - 3.3], rtol=0, atol=1e-15)  # x - 0.1 g
    np.testing.assert_allclose(new[0], [-1.5, -1.3], rtol=0, atol=1e-15)


def test_momentum_known_value():
    m, g = (np.array([1.0, 2.0]),), (np.array([25.0, 33.0]),)
    _, new = optim.update(optim.setup(optim.Momentum(0.1, 0.9), m), m, g)
    # v = 0.9 * 0 + 0.1 * g = [2.5, 3.3]; x - v
    np.testing.assert_allclose(new[0], [1 - 2.5, 2 - 3.3], rtol=0, atol=1e-15)


def test_adam_known_value():
    m, g = (np.array([1.0, 2.0]),), (np.array([0.5, -3.0]),)
    _, new = optim.update(optim.setup(optim.Adam(0.1), m), m, g)
    # first step: m_hat = g, v_hat = g^2, so the step is 0.1 * g / (|g| + eps) = 0.1 * sign(g)
    np.testing.assert_allclose(new[0], [0.9, 2.1], rtol=1e-7)
    assert abs(new[0][0] - 0.9) > 0  # eps makes it "about": 1 - 0.1 * 0.5 / (0.5 + 1e-8)
    np.testing.assert_allclose(new[0], [1 - 0.1 * 0.5 / (0.5 + 1e-8), 2 + 0.1 * 3 / (3 + 1e-8)], rtol=0, atol=1e-15)


def test_chain_of_clip_and_weight_decay_known_value():
    m, g = (np.array([1.0, 10.0, 100.0]),), (np.array([1.0, 2.0, 3.0]),)
    rule = optim.OptimiserChain(optim.ClipGrad(2), optim.WeightDecay(0.1))
    _, new = optim.update(optim.setup(rule, m), m, g)
    # clip: [1, 2, 2]; + 0.1 x: [1.1, 3, 12]; the chain's output is subtracted: x - [1.1, 3, 12]
    np.testing.assert_allclose(new[0], [-0.1, 7.0, 88.0], rtol=0, atol=1e-12)


# --- every rule against a NumPy implementation of its published formula -------------
def ref_descent(x, gs, lr):
    for g in gs:
        x = x - lr * g
    return x


def ref_momentum(x, gs, lr, rho):
    v = np.zeros_like(x)
    for g in gs:
        v = rho * v + lr * g
        x = x - v
    return x


def ref_nesterov(x, gs, lr, rho):
    # PyTorch's formulation (buf = rho * buf + g; x -= lr * (g + rho * buf)), equal for constant lr.
    buf = np.zeros_like(x)
    for g in gs:
        buf = rho * buf + g
        x = x - lr * (g + rho * buf)
    return x


def ref_adam(x, gs, lr, b1, b2, eps, decoupled_decay=0.0):
    m = np.zeros_like(x)
    v = np.zeros_like(x)
    for t, g in enumerate(gs, start=1):
        x = x * (1 - lr * decoupled_decay)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        x = x - lr * m_hat / (np.sqrt(v_hat) + eps)
    return x


def ref_rmsprop(x, gs, lr, rho, eps, centred):
    s = np.zeros_like(x)
    mean = np.zeros_like(x)
    for g in gs:
        s = rho * s + (1 - rho) * g**2
        mean = rho * mean + (1 - rho) * g
        denominator = np.sqrt(s - mean**2) if centred else np.sqrt(s)
        x = x - lr * g / (denominator + eps)
    return x


def ref_adagrad(x, gs, lr, eps):
    acc = np.zeros_like(x)
    for g in gs:
        acc = acc + g**2
        x = x - lr * g / (np.sqrt(acc) + eps)
    return x


def ref_lion(x, gs, lr, b1, b2, wd):
    m = np.zeros_like(x)
    for g in gs:
        c = b1 * m + (1 - b1) * g
        x = x - lr * (np.sign(c) + wd * x)
        m = b2 * m + (1 - b2) * g
    return x


def ref_clipnorm_descent(x, gs, max_norm, p, lr):
    for g in gs:
        norm = np.sum(np.abs(g) ** p) ** (1 / p) if np.isfinite(p) else np.max(np.abs(g))
        if norm > max_norm:
            g = g * max_norm / norm
        x = x - lr * g
    return x


def ref_decay_then_clip(x, gs, lam, delta):
    for g in gs:
        x = x - np.clip(g + lam * x, -delta, delta)
    return x


REFERENCE_CASES = [
    (optim.Descent(0.3), lambda x, gs: ref_descent(x, gs, 0.3)),
    (optim.Momentum(0.05, 0.8), lambda x, gs: ref_momentum(x, gs, 0.05, 0.8)),
    (optim.Nesterov(0.05, 0.7), lambda x, gs: ref_nesterov(x, gs, 0.05, 0.7)),
    (optim.Adam(0.02, 0.8, 0.95, 1e-6), lambda x, gs: ref_adam(x, gs, 0.02, 0.8, 0.95, 1e-6)),
    (optim.AdamW(0.02, 0.8, 0.95, 1e-6, 0.3), lambda x, gs: ref_adam(x, gs, 0.02, 0.8, 0.95, 1e-6, decoupled_decay=0.3)),
    (optim.RMSProp(0.01, 0.85, 1e-7), lambda x, gs: ref_rmsprop(x, gs, 0.01, 0.85, 1e-7, False)),
    (optim.RMSProp(0.01, 0.85, 1e-7, centred=True), lambda x, gs: ref_rmsprop(x, gs, 0.01, 0.85, 1e-7, True)),
    (optim.AdaGrad(0.2, 1e-6), lambda x, gs: ref_adagrad(x, gs, 0.2, 1e-6)),
    (optim.Lion(0.01, 0.85, 0.97), lambda x, gs: ref_lion(x, gs, 0.01, 0.85, 0.97, 0.0)),
    (optim.Lion(0.01, 0.85, 0.97, weight_decay=0.5), lambda x, gs: ref_lion(x, gs, 0.01, 0.85, 0.97, 0.5)),
    (optim.ClipGrad(0.7), lambda x, gs: ref_decay_then_clip(x, gs, 0.0, 0.7)),
    (optim.WeightDecay(0.2), lambda x, gs: ref_decay_then_clip(x, gs, 0.2, np.inf)),
    (optim.OptimiserChain(optim.ClipNorm(1.5), optim.Descent(0.1)), lambda x, gs: ref_clipnorm_descent(x, gs, 1.5, 2, 0.1)),
    (optim.OptimiserChain(optim.ClipNorm(1.5, p=1), optim.Descent(0.1)), lambda x, gs: ref_clipnorm_descent(x, gs, 1.5, 1, 0.1)),
    (optim.OptimiserChain(optim.ClipNorm(0.5, p=np.inf), optim.Descent(0.1)),
     lambda x, gs: ref_clipnorm_descent(x, gs, 0.5, np.inf, 0.1)),
    (optim.OptimiserChain(optim.WeightDecay(0.2), optim.ClipGrad(0.5)), lambda x, gs: ref_decay_then_clip(x, gs, 0.2, 0.5)),
    (optim.OptimiserChain(optim.OptimiserChain(optim.WeightDecay(0.0)), optim.Adam(0.02, 0.8, 0.95, 1e-6)),
     lambda x, gs: ref_adam(x, gs, 0.02, 0.8, 0.95, 1e-6)),
]


@pytest.mark.parametrize("rule, reference", REFERENCE_CASES, ids=[repr(r) for r, _ in REFERENCE_CASES])
def test_rule_matches_numpy_reference_over_several_steps(rule, reference):
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((3, 4))
    gs = [rng.standard_normal((3, 4)) * scale for scale in (0.3, 2.0, 0.05, 1.0, 4.0)]
    model, state = {"x": x0}, optim.setup(rule, {"x": x0})
    for g in gs:
        state, model = optim.update(state, model, {"x": g})
    np.testing.assert_allclose(model["x"], reference(x0, gs), rtol=1e-12, atol=1e-14)


def test_clipnorm_leaves_small_gradients_alone_and_rescales_large_ones_exactly():
    m = [np.array([0.0, 0.0])]
    state = optim.setup(optim.ClipNorm(5.0), m)
    _, small = optim.update(state, m, [np.array([3.0, 4.0])])  # norm 5: not above the limit
    np.testing.assert_allclose(small[0], [-3.0, -4.0])
    _, large = optim.update(state, m, [np.array([6.0, 8.0])])  # norm 10 -> scaled by 1/2
    np.testing.assert_allclose(large[0], [-3.0, -4.0])


def test_matches_pytorch_optimisers():
    torch = pytest.importorskip("torch")
    pairs = [
        (optim.Descent(0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
        (optim.Momentum(0.05, 0.8), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8)),
        (optim.Nesterov(0.05, 0.7), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.7, nesterov=True)),
        (optim.Adam(0.02, 0.8, 0.95, 1e-6), lambda p: torch.optim.Adam(p, lr=0.02, betas=(0.8, 0.95), eps=1e-6)),
        (optim.AdamW(0.02, 0.8, 0.95, 1e-6, 0.3),
         lambda p: torch.optim.AdamW(p, lr=0.02, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.3)),
        (optim.RMSProp(0.01, 0.85, 1e-7), lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.85, eps=1e-7)),
        (optim.RMSProp(0.01, 0.85, 1e-7, centred=True),
         lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.85, eps=1e-7, centered=True)),
        (optim.AdaGrad(0.2, 1e-6), lambda p: torch.optim.Adagrad(p, lr=0.2, eps=1e-6)),
    ]
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal(5)
    gs = [rng.standard_normal(5) for _ in range(6)]
    for rule, make in pairs:
        param = torch.nn.Parameter(torch.tensor(x0, dtype=torch.float64))
        opt = make([param])
        model, state = [x0], optim.setup(rule, [x0])
        for g in gs:
            param.grad = torch.tensor(g, dtype=torch.float64)
            opt.step()
            state, model = optim.update(state, model, [g])
        np.testing.assert_allclose(model[0], param.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=repr(rule))


# --- state structure -----------------------------------------------------------------
def test_state_mirrors_the_model_and_only_trainable_float_arrays_get_a_leaf():
    norm = Norm(2)
    model = Chain(Dense(np.ones((2, 3)), None), norm)
    extra = {"table": np.arange(3), "name": "x", "w": np.ones(1, np.float32), "lst": [np.zeros(2), 1.0]}
    block = Block(np.zeros(2), extra)
    pair = Pair(np.ones(1), np.array(2.0))
    state = optim.setup(optim.Adam(), (model, block, pair))

    st_model, st_block, st_pair = state
    assert isinstance(st_model, pb.Tangent) and st_model.primal_type is Chain
    assert type(st_model.layers) is tuple
    dense, st_norm = st_model.layers
    assert dense.primal_type is Dense and isinstance(dense.weight, optim.Leaf)
    assert dense.bias is None and dense.activation is None
    assert isinstance(st_norm.scale, optim.Leaf) and isinstance(st_norm.shift, optim.Leaf)
    assert st_norm.running_mean is None and st_norm.count is None and st_norm.momentum is None  # not trainable
    assert st_block.primal_type is Block and type(st_block.extra) is dict
    assert st_block.extra["table"] is None and st_block.extra["name"] is None
    assert isinstance(st_block.extra["w"], optim.Leaf)
    assert type(st_block.extra["lst"]) is list and st_block.extra["lst"][1] is None
    assert type(st_pair) is Pair and isinstance(st_pair.right, optim.Leaf)  # a 0-d array trains
    m, v, t = dense.weight.state
    assert m.shape == (2, 3) and v.shape == (2, 3) and t == 0 and not m.any() and not v.any()


def test_state_collapses_to_none_where_nothing_is_trained():
    model = {"ints": np.arange(3), "nested": ({"s": "text", "f": 1.5},), "w": np.ones(2)}
    state = optim.setup(optim.Descent(), model)
    assert state["ints"] is None and state["nested"] is None and isinstance(state["w"], optim.Leaf)
    assert optim.setup(optim.Adam(), {"ints": np.arange(3), "f": 2.0}) is None


def test_seed_scenario_gradient_structure_feeds_update():
    rng = np.random.default_rng(2)
    model = Chain(Dense(rng.standard_normal((1, 2)), rng.standard_normal(1)),
                  Dense(rng.standard_normal((1, 1)), None, activation=lambda v: v))
    x = rng.standard_normal((5, 2))
    val, (g, gx) = pb.withgradient(lambda m, x: np.sum(m(x) ** 2), model, x)
    assert g.layers[1].bias is None and g.layers[0].activation is None
    state = optim.setup(optim.Adam(), model)
    state, new = optim.update(state, model, g)
    for old_layer, new_layer, g_layer in zip(model.layers, new.layers, g.layers):
        assert type(new_layer) is Dense and new_layer.activation is old_layer.activation
        expected = ref_adam(old_layer.weight, [g_layer.weight], 1e-3, 0.9, 0.999, 1e-8)
        np.testing.assert_allclose(new_layer.weight, expected, rtol=1e-12)
    np.testing.assert_allclose(new.layers[0].bias, ref_adam(model.layers[0].bias, [g.layers[0].bias], 1e-3, 0.9, 0.999, 1e-8))
    assert new.layers[1].bias is None
    assert state.layers[0].weight.state[2] == 1
    assert np.sum(new(x) ** 2) < val


def test_training_a_plain_object_with_gradients_reduces_the_loss():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((20, 3))
    y = np.tanh(x @ np.array([[1.0], [-2.0], [0.5]]))
    model = Chain(Dense(rng.standard_normal((4, 3)) * 0.5, np.zeros(4)), Dense(rng.standard_normal((1, 4)) * 0.5, np.zeros(1)))
    loss = lambda m: np.mean((m(x) - y) ** 2)
    state = optim.setup(optim.OptimiserChain(optim.ClipNorm(10.0), optim.Adam(0.05)), model)
    first = loss(model)
    for _ in range(100):
        (g,) = pb.gradient(loss, model)
        state, model = optim.update(state, model, g)
    assert loss(model) < 0.1 * first


# --- purity and in-place updates -------------------------------------------------------
def make_model(dtype=np.float64):
    rng = np.random.default_rng(4)
    return Chain(Dense(rng.standard_normal((3, 2)).astype(dtype), rng.standard_normal(3).astype(dtype)),
                 Dense(rng.standard_normal((1, 3)).astype(dtype), rng.standard_normal(1).astype(dtype)))


def make_grad(model, seed=5):
    rng = np.random.default_rng(seed)
    (g,) = pb.gradient(lambda m: np.sum(m(rng.standard_normal((4, 2)).astype(m.layers[0].weight.dtype)) ** 2), model)
    return g


def test_update_changes_nothing_it_is_given_and_shares_no_arrays_with_its_result():
    model = make_model()
    rule = optim.OptimiserChain(optim.WeightDecay(0.1), optim.Adam(0.1))
    state = optim.setup(rule, model)
    state, model = optim.update(state, model, make_grad(model, 6))  # a state with nonzero moments
    grad = make_grad(model, 7)

    arrays_before = [(a, a.copy()) for a in model_arrays(model)]
    grad_before = [(a, a.copy()) for a in pb.tree.leaves(grad) if isinstance(a, np.ndarray)]
    layers_before = model.layers
    state_before = leaf_arrays(state)

    new_state, new_model = optim.update(state, model, grad)

    assert new_model is not model and model.layers is layers_before
    for a, copy in arrays_before + grad_before:
        np.testing.assert_array_equal(a, copy)
    for leaf, value, frozen, rule_before in state_before:
        m, v, t = value[1]
        np.testing.assert_array_equal(leaf.state[1][0], m)
        np.testing.assert_array_equal(leaf.state[1][1], v)
        assert leaf.state[1][2] == t == 1 and leaf.rule is rule_before and leaf.frozen == frozen
    old = model_arrays(model) + [x for leaf, *_ in state_before for x in (leaf.state[1][0], leaf.state[1][1])]
    new = model_arrays(new_model) + [x for leaf, *_ in leaf_arrays(new_state) for x in (leaf.state[1][0], leaf.state[1][1])]
    new = [a for a in new if isinstance(a, np.ndarray)]
    for a in new:
        assert not any(np.shares_memory(a, b) for b in old if isinstance(b, np.ndarray))
    assert all(leaf.state[1][2] == 2 for leaf, *_ in leaf_arrays(new_state))


def test_parts_without_a_step_are_copied_too():
    model = {"frozen": np.ones(2), "no_grad": np.ones(2), "stepped": np.ones(2)}
    state = optim.setup(optim.Momentum(), model)
    optim.freeze(state["frozen"])
    new_state, new = optim.update(state, model, {"frozen": np.ones(2), "no_grad": None, "stepped": np.ones(2)})
    for key in model:
        assert not np.shares_memory(new[key], model[key]), key
        assert not np.shares_memory(new_state[key].state[0], state[key].state[0]), key
    np.testing.assert_array_equal(new["frozen"], 1.0)
    np.testing.assert_array_equal(new["no_grad"], 1.0)


def test_update_in_place_writes_into_the_same_arrays_and_matches_update():
    rule = optim.OptimiserChain(optim.ClipGrad(1.0), optim.Momentum(0.1, 0.9))
    model_a, model_b = make_model(), make_model()
    state_a, state_b = optim.setup(rule, model_a), optim.setup(rule, model_b)
    weight = model_b.layers[0].weight
    leaf = state_b.layers[0].weight
    velocity = leaf.state[1][0]
    for seed in (8, 9, 10):
        state_a, model_a = optim.update(state_a, model_a, make_grad(model_a, seed))
        returned_state, returned_model = optim.update_(state_b, model_b, make_grad(model_b, seed))
        assert returned_state is state_b and returned_model is model_b
    assert model_b.layers[0].weight is weight and state_b.layers[0].weight is leaf and leaf.state[1][0] is velocity
    for a, b in zip(model_arrays(model_a), model_arrays(model_b)):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(b, a, rtol=1e-14)
    np.testing.assert_allclose(velocity, state_a.layers[0].weight.state[1][0], rtol=1e-14)


def test_update_in_place_advances_step_counters():
    model = [np.ones(2)]
    state = optim.setup(optim.Adam(), model)
    optim.update_(state, model, [np.ones(2)])
    optim.update_(state, model, [np.ones(2)])
    assert state[0].state[2] == 2


# --- None gradients --------------------------------------------------------------------
def test_none_gradient_anywhere_leaves_that_part_and_its_state_unchanged():
    model = {"a": (np.ones(2), np.ones(3)), "b": np.ones(2), "c": Dense(np.ones((1, 2)), np.ones(1))}
    state = optim.setup(optim.Adam(0.1), model)
    grad = {"a": None, "b": np.ones(2), "c": pb.Tangent(Dense, weight=np.ones((1, 2)), bias=None, activation=None)}
    new_state, new = optim.update(state, model, grad)
    np.testing.assert_array_equal(new["a"][0], model["a"][0])
    np.testing.assert_array_equal(new["a"][1], model["a"][1])
    np.testing.assert_array_equal(new["c"].bias, model["c"].bias)
    assert new_state["a"][0].state[2] == 0 and new_state["c"].bias.state[2] == 0  # no step taken
    assert new_state["b"].state[2] == 1 and new_state["c"].weight.state[2] == 1
    np.testing.assert_allclose(new["b"], 0.9, rtol=1e-6)
    np.testing.assert_allclose(new["c"].weight, 0.9, rtol=1e-6)


def test_a_none_gradient_for_the_whole_model_changes_nothing():
    model = make_model()
    state = optim.setup(optim.Momentum(), model)
    new_state, new = optim.update(state, model, None)
    for a, b in zip(model_arrays(model), model_arrays(new)):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
    before = [a.copy() for a in model_arrays(model) if isinstance(a, np.ndarray)]
    optim.update_(state, model, None)
    for a, b in zip([a for a in model_arrays(model) if isinstance(a, np.ndarray)], before):
        np.testing.assert_array_equal(a, b)


def test_thunks_in_the_gradient_are_evaluated():
    model = [np.ones(2)]
    _, new = optim.update(optim.setup(optim.Descent(1.0), model), model, [pb.Thunk(lambda: np.array([1.0, 2.0]))])
    np.testing.assert_allclose(new[0], [0.0, -1.0])


# --- ties ------------------------------------------------------------------------------------
def test_tied_arrays_get_one_state_summed_gradients_and_stay_tied():
    w = np.array([1.0, 2.0, 3.0])
    model = {"enc": w, "dec": w, "other": np.zeros(1)}
    state = optim.setup(optim.Adam(0.1), model)
    assert state["enc"] is state["dec"]
    g1, g2 = np.array([0.5, -1.0, 2.0]), np.array([0.25, 3.0, -2.5])
    new_state, new = optim.update(state, model, {"enc": g1, "dec": g2, "other": np.ones(1)})
    assert new["enc"] is new["dec"] and new_state["enc"] is new_state["dec"]
    np.testing.assert_allclose(new["enc"], ref_adam(w, [g1 + g2], 0.1, 0.9, 0.999, 1e-8), rtol=1e-13)
    assert new_state["enc"].state[2] == 1  # one step, not two

    optim.update_(new_state, new, {"enc": g1, "dec": None, "other": None})
    assert new["enc"] is new["dec"] and new_state["enc"].state[2] == 2
    np.testing.assert_allclose(new["enc"], ref_adam(w, [g1 + g2, g1], 0.1, 0.9, 0.999, 1e-8), rtol=1e-13)


def test_tie_through_a_shared_layer_object_survives():
    layer = Dense(np.array([[1.0, -1.0]]), np.array([0.5]))
    model = Chain(layer, Dense(np.ones((2, 1)), np.zeros(2)), layer)
    state = optim.setup(optim.Descent(0.1), model)
    (g,) = pb.gradient(lambda m: np.sum(m(np.array([[1.0, 2.0]])) ** 2), model)
    _, new = optim.update(state, model, g)
    assert new.layers[0] is new.layers[2] and new.layers[0] is not layer
    assert g.layers[2] is None  # the shared layer's total gradient is at its first place
    expected = layer.weight - 0.1 * g.layers[0].weight
    np.testing.assert_allclose(new.layers[0].weight, expected, rtol=1e-14)


def test_state_that_no_longer_matches_the_ties_is_refused():
    w = np.ones(2)
    state = optim.setup(optim.Descent(), {"a": w, "b": w})
    with pytest.raises(ValueError, match=r"model\['a'\] and model\['b'\].*different arrays"):
        optim.update(state, {"a": np.ones(2), "b": np.ones(2)}, None)
    untied_state = optim.setup(optim.Descent(), {"a": np.ones(2), "b": np.ones(2)})
    with pytest.raises(ValueError, match=r"same array.*separate entries"):
        optim.update(untied_state, {"a": w, "b": w}, None)


def test_a_shared_layer_gets_the_sum_of_partial_gradients_made_by_hand_at_each_place():
    layer = Dense(np.array([[1.0, -1.0]]), np.array([0.5]))
    model = Chain(layer, Dense(np.ones((2, 1)), np.zeros(2)), layer)
    state = optim.setup(optim.Descent(0.5), model)
    first = pb.Tangent(Dense, weight=np.array([[1.0, 2.0]]), bias=None, activation=None)
    last = pb.Tangent(Dense, weight=np.array([[4.0, 8.0]]), bias=np.array([2.0]), activation=None)
    _, new = optim.update(state, model, pb.Tangent(Chain, layers=(first, None, last)))
    assert new.layers[0] is new.layers[2]
    np.testing.assert_array_equal(new.layers[0].weight, [[1.0 - 0.5 * 5.0, -1.0 - 0.5 * 10.0]])
    np.testing.assert_array_equal(new.layers[0].bias, [0.5 - 0.5 * 2.0])


class Frozen:
    """Holds an array at a place its class does not train."""

    def __init__(self, w):
        self.w = w

    def trainable(self):
        return ()


def test_a_tied_array_sums_its_gradient_at_a_place_that_is_not_trained_too():
    # pb.gradient gives the total (both uses) at the trained place; by hand, each place has its part
    w = np.array([1.0, 2.0])
    model = {"a": w, "f": Frozen(w)}
    x, y = np.array([3.0, 5.0]), np.array([7.0, 11.0])
    (g,) = pb.gradient(lambda m: np.sum(m["a"] * x) + np.sum(m["f"].w * y), model)
    np.testing.assert_allclose(g["a"], x + y)
    assert g["f"] is None
    state = optim.setup(optim.Descent(0.5), model)
    assert state["f"] is None
    _, by_gradient = optim.update(state, model, g)
    _, by_hand = optim.update(state, model, {"a": x, "f": pb.Tangent(Frozen, w=y)})
    for new in (by_gradient, by_hand):
        np.testing.assert_allclose(new["a"], w - 0.5 * (x + y))
        assert new["f"].w is new["a"]


def test_a_thunk_for_a_whole_container_is_evaluated():
    model = {"layer": (np.ones(2), np.ones(1))}
    state = optim.setup(optim.Descent(1.0), model)
    _, new = optim.update(state, model, {"layer": pb.Thunk(lambda: (np.array([1.0, 2.0]), None))})
    np.testing.assert_array_equal(new["layer"][0], [0.0, -1.0])
    np.testing.assert_array_equal(new["layer"][1], [1.0])


def test_messages_name_places_in_the_one_path_format():
    model = {"my key": Pair(np.ones(2), [Dense(np.ones((1, 2)), None)])}
    state = optim.setup(optim.Descent(), model)
    grad = {"my key": Pair(np.ones(3), None)}
    with pytest.raises(ValueError, match=r"model\['my key'\]\.left has shape \(3,\)"):
        optim.update(state, model, grad)
    deep = {"my key": Pair(None, [pb.Tangent(Dense, weight=np.ones((1, 2)), bias=None, activation=None, scale=1.0)])}
    with pytest.raises(ValueError, match=r"entry model\['my key'\]\.right\[0\]\.scale, .*Dense at model\['my key'\]\.right\[0\]"):
        optim.update(state, model, deep)

    layer = Dense(np.ones((1, 2)), None)
    shared = {"a": layer, "b": [layer]}  # the second place of a shared layer is named from the root too
    state = optim.setup(optim.Descent(), shared)
    places = optim._update.pair(state, shared, None)[id(state["a"].weight)][3]
    assert [p.format("model") for p in places] == ["model['a'].weight", "model['b'][0].weight"]
    wrong = {"a": None, "b": [pb.Tangent(Dense, weight=np.ones(3), bias=None, activation=None)]}
    with pytest.raises(ValueError, match=r"model\['b'\]\[0\]\.weight has shape \(3,\)"):
        optim.update(state, shared, wrong)


def test_the_outermost_mismatch_is_reported():
    model = make_model()
    state = optim.setup(optim.Descent(), model)
    inner = pb.Tangent(Dense, weight=np.ones((3, 2)), bias=None, activation=None, scale=np.ones(1))
    with pytest.raises(ValueError, match=r"^The gradient at model is for a Dense, but the model holds a Chain there"):
        optim.update(state, model, pb.Tangent(Dense, weight=None, bias=None, activation=None, layers=(inner, None)))


def test_an_array_for_a_part_that_is_not_trained_is_refused():
    model = {"w": np.ones(2), "stats": {"count": np.array([1])}}
    state = optim.setup(optim.Descent(), model)
    with pytest.raises(ValueError, match=r"gradient at model\['stats'\] is an array of dtype float64 and shape \(1,\), but the model holds a dict"):
        optim.update(state, model, {"w": np.ones(2), "stats": np.ones(1)})


def test_cyclic_models_train():
    a = Dense(np.ones((1, 1)), np.zeros(1))
    a.parent = {"child": a}
    state = optim.setup(optim.Descent(0.5), a)
    _, new = optim.update(state, a, pb.Tangent(Dense, weight=np.ones((1, 1)), bias=None, activation=None, parent=None))
    np.testing.assert_allclose(new.weight, [[0.5]])


# --- dtypes ---------------------------------------------------------------------------------
ALL_RULES = [r for r, _ in REFERENCE_CASES]


@pytest.mark.parametrize("rule", ALL_RULES, ids=[repr(r) for r in ALL_RULES])
def test_float32_parameters_and_state_stay_float32(rule):
    model = make_model(np.float32)
    state = optim.setup(rule, model)
    for grad_dtype in (np.float32, np.float64):
        grad = pb.tree.fmap(lambda a: a.astype(grad_dtype) if isinstance(a, np.ndarray) else a, make_grad(model))
        state, model = optim.update(state, model, grad)
        optim.update_(state, model, grad)
    for a in model_arrays(model):
        if isinstance(a, np.ndarray):
            assert a.dtype == np.float32
    for leaf in optim._state.state_leaves(state):
        for x in pb.tree.leaves(leaf.state):
            if isinstance(x, np.ndarray):
                assert x.dtype == np.float32, (rule, x.dtype)


@dataclasses.dataclass(frozen=True)
class Float64Step(optim.Rule):
    """A careless rule whose step is always float64."""

    def apply(self, state, x, dx):
        return state, np.asarray(dx, dtype=np.float64) * 0.5


def test_a_step_of_another_dtype_is_cast_back_and_byte_order_is_kept():
    model = [np.ones(2, np.float32), np.ones(2, ">f8"), np.array(1.0, np.float32)]
    grad = [np.ones(2, np.float32), np.ones(2), np.array(1.0)]
    state = optim.setup(Float64Step(), model)
    _, new = optim.update(state, model, grad)
    assert [a.dtype for a in new] == [np.dtype(np.float32), np.dtype(">f8"), np.dtype(np.float32)]
    assert all(type(a) is np.ndarray for a in new)  # a 0-d parameter stays an array, not a NumPy scalar
    np.testing.assert_array_equal(new[1], [0.5, 0.5])
    optim.update_(state, model, grad)
    assert [a.dtype for a in model] == [np.dtype(np.float32), np.dtype(">f8"), np.dtype(np.float32)]
    np.testing.assert_array_equal(model[2], 0.5)


def test_zero_dimensional_parameters_keep_array_state():
    model = [np.array(1.0)]
    state = optim.setup(optim.Adam(0.1), model)
    state, new = optim.update(state, model, [np.array(2.0)])
    m, v, t = state[0].state
    assert type(new[0]) is np.ndarray and type(m) is np.ndarray and type(v) is np.ndarray and m.shape == ()
    np.testing.assert_allclose(new[0], 0.9)
    optim.update_(state, new, [np.array(2.0)])
    assert state[0].state[0] is m


def test_float16_descent_stays_float16():
    model = [np.ones(3, np.float16)]
    _, new = optim.update(optim.setup(optim.Adam(), model), model, [np.ones(3)])
    assert new[0].dtype == np.float16


# --- adjust, freeze, thaw ----------------------------------------------------------------------
def test_adjust_learning_rate_returns_a_new_state_and_keeps_moments():
    model = [np.ones(2)]
    state = optim.setup(optim.Momentum(0.1, 0.9), model)
    state, model = optim.update(state, model, [np.ones(2)])  # v = 0.1
    adjusted = optim.adjust(state, lr=0.01)
    assert state[0].rule == optim.Momentum(0.1, 0.9) and adjusted[0].rule == optim.Momentum(0.01, 0.9)
    np.testing.assert_array_equal(adjusted[0].state[0], state[0].state[0])
    assert not np.shares_memory(adjusted[0].state[0], state[0].state[0])
    _, after = optim.update(adjusted, model, [np.ones(2)])
    np.testing.assert_allclose(after[0], model[0] - (0.9 * 0.1 + 0.01 * 1.0))  # v = rho v + new_lr g
    assert optim.adjust(state, 0.5)[0].rule.lr == 0.5  # positional, as in Optimisers.adjust(tree, eta)


def test_adjust_other_hyperparameters_by_name_and_inside_chains():
    state = optim.setup(optim.OptimiserChain(optim.ClipGrad(1.0), optim.Adam(), optim.OptimiserChain(optim.WeightDecay())),
                        {"w": np.zeros(2), "u": np.zeros(1)})
    new = optim.adjust(state, beta1=0.5, lam=0.25, delta=3.0)
    clip, adam, inner = new["w"].rule.rules
    assert clip.delta == 3.0 and adam.beta1 == 0.5 and adam.beta2 == 0.999 and inner.rules[0].lam == 0.25
    assert new["u"].rule == new["w"].rule
    assert state["w"].rule.rules[1].beta1 == 0.9  # the old state is untouched


def test_adjust_can_switch_rmsprop_between_plain_and_centred():
    gs = [np.array([1.0, -2.0, 0.5]), np.array([0.3, 0.1, -1.0])]
    state = optim.setup(optim.RMSProp(0.01, 0.9, 1e-8), [np.ones(3)])
    state, model = optim.update(state, [np.ones(3)], [gs[0]])
    centred = optim.adjust(state, centred=True)
    _, after = optim.update(centred, model, [gs[1]])
    s = 0.9 * (0.1 * gs[0] ** 2) + 0.1 * gs[1] ** 2
    mean = 0.1 * gs[1]  # the mean starts at zero when switched on
    np.testing.assert_allclose(after[0], model[0] - 0.01 * gs[1] / (np.sqrt(s - mean**2) + 1e-8), rtol=1e-13)
    plain_again = optim.adjust(optim.update(centred, model, [gs[1]])[0], centred=False)
    assert len(optim.update(plain_again, model, [gs[1]])[0][0].state) == 1


def test_adjust_rejects_names_no_rule_has_and_bad_values():
    state = optim.setup(optim.Adam(), [np.zeros(1)])
    with pytest.raises(ValueError, match=r"'lrr'.*beta1, beta2, eps, lr"):
        optim.adjust(state, lrr=0.1)
    with pytest.raises(ValueError, match="beta1 must be in"):
        optim.adjust(state, beta1=1.5)
    with pytest.raises(TypeError, match="at least one"):
        optim.adjust(state)


def test_freeze_and_thaw_a_subtree():
    model = make_model()
    state = optim.setup(optim.Adam(0.1), model)
    optim.freeze(state.layers[0])
    grad = make_grad(model)
    new_state, new = optim.update(state, model, grad)
    np.testing.assert_array_equal(new.layers[0].weight, model.layers[0].weight)
    np.testing.assert_array_equal(new.layers[0].bias, model.layers[0].bias)
    assert new_state.layers[0].weight.frozen and new_state.layers[0].weight.state[2] == 0
    assert not np.allclose(new.layers[1].weight, model.layers[1].weight) and new_state.layers[1].weight.state[2] == 1

    before = model.layers[0].weight.copy()
    optim.update_(state, model, grad)
    np.testing.assert_array_equal(model.layers[0].weight, before)

    optim.thaw(new_state)
    assert not new_state.layers[0].weight.frozen
    _, newer = optim.update(new_state, new, grad)
    np.testing.assert_allclose(newer.layers[0].weight, ref_adam(new.layers[0].weight, [grad.layers[0].weight], 0.1, 0.9, 0.999, 1e-8))


def test_freeze_one_leaf_and_a_tied_leaf():
    w = np.ones(2)
    model = {"a": w, "b": w, "c": np.ones(2)}
    state = optim.setup(optim.Descent(1.0), model)
    optim.freeze(state["b"])
    assert state["a"].frozen  # one leaf for the tied array
    _, new = optim.update(state, model, {"a": np.ones(2), "b": np.ones(2), "c": np.ones(2)})
    np.testing.assert_array_equal(new["a"], 1.0)
    np.testing.assert_array_equal(new["c"], 0.0)
    with pytest.raises(TypeError, match="freeze takes a state"):
        optim.freeze(np.ones(2))


# --- errors -------------------------------------------------------------------------------------
def test_setup_needs_a_rule_instance():
    with pytest.raises(TypeError, match=r"Adam\(\)"):
        optim.setup(optim.Adam, [np.ones(1)])
    with pytest.raises(TypeError, match="optimisation rule"):
        optim.setup(0.1, [np.ones(1)])
    with pytest.raises(TypeError, match="add parentheses"):
        optim.OptimiserChain(optim.Adam)


@pytest.mark.parametrize("make, message", [
    (lambda: optim.Descent(-1.0), "lr must be"),
    (lambda: optim.Momentum(0.1, 1.0), r"rho must be in \[0, 1\)"),
    (lambda: optim.Adam(beta2=-0.1), "beta2"),
    (lambda: optim.ClipGrad(0.0), "delta must be > 0"),
    (lambda: optim.ClipNorm(1.0, p=0.5), "p must be >= 1"),
    (lambda: optim.Adam(lr="fast"), "lr must be a real number"),
    (lambda: optim.RMSProp(centred="yes"), "centred must be True or False"),
])
def test_invalid_hyperparameters_are_refused(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_hyperparameters_become_python_floats_so_float32_is_kept():
    rule = optim.Descent(np.float64(0.5))
    assert type(rule.lr) is float
    model = [np.ones(2, np.float32)]
    assert optim.update(optim.setup(rule, model), model, [np.ones(2, np.float32)])[1][0].dtype == np.float32


def test_gradient_mismatches_name_the_place():
    model = make_model()
    state = optim.setup(optim.Descent(), model)
    grad = make_grad(model)
    bad_shape = pb.Tangent(Chain, layers=(pb.Tangent(Dense, weight=np.ones((2, 2)), bias=None, activation=None), None))
    with pytest.raises(ValueError, match=r"model\.layers\[0\]\.weight has shape \(2, 2\).*\(3, 2\)"):
        optim.update(state, model, bad_shape)
    with pytest.raises(ValueError, match=r"one gradient per argument"):
        optim.update(state, model, (grad, np.ones(2)))
    with pytest.raises(ValueError, match=r"is for a Dense.*holds a Chain"):
        optim.update(state, model, grad.layers[0])
    with pytest.raises(ValueError, match=r"model\.layers has 1 entries.*2"):
        optim.update(state, model, pb.Tangent(Chain, layers=(None,)))



def test_a_misspelt_gradient_key_is_refused_and_names_the_place_and_the_model_keys():
    model = {"weight": np.ones(2), "bias": np.zeros(1)}
    state = optim.setup(optim.Descent(0.1), model)
    grad = {"wieght": np.ones(2), "bias": np.ones(1)}
    for step in (optim.update, optim.update_):
        with pytest.raises(ValueError, match=r"entry model\['wieght'\].*dict at model has keys 'weight', 'bias'"):
            step(state, model, grad)
    np.testing.assert_array_equal(model["bias"], 0.0)  # refused before anything was written


def test_an_extra_list_element_in_the_gradient_is_refused():
    # "stats" holds nothing trainable, so its gradient was never looked at: an extra entry there passed silently
    model = {"w": np.ones(2), "stats": [np.array([3])]}
    state = optim.setup(optim.Descent(0.1), model)
    with pytest.raises(ValueError, match=r"entry model\['stats'\]\[1\].*list at model\['stats'\] has 1 entry \(index 0\)"):
        optim.update(state, model, {"w": np.ones(2), "stats": [None, np.ones(1)]})


def test_a_tangent_entry_for_a_field_the_object_lacks_is_refused():
    model = make_model()
    state = optim.setup(optim.Descent(0.1), model)
    layer = pb.Tangent(Dense, weight=np.ones((3, 2)), bias=None, activation=None, scale=np.ones(1))
    grad = pb.Tangent(Chain, layers=(layer, None))
    with pytest.raises(ValueError, match=r"model\.layers\[0\]\.scale.*Dense at model\.layers\[0\] has fields weight, bias"):
        optim.update_(state, model, grad)
    with pytest.raises(ValueError, match=r"model\.extra.*Chain at model has fields layers"):
        optim.update(state, model, pb.Tangent(Chain, layers=None, extra=np.ones(1)))


def test_state_for_another_model_is_refused():
    state = optim.setup(optim.Descent(), make_model())
    with pytest.raises(ValueError, match=r"state is for a Chain.*dict"):
        optim.update(state, {"w": np.ones(1)}, None)
    with pytest.raises(ValueError, match=r"model\[0\].*holds a str"):
        optim.update(optim.setup(optim.Descent(), [np.ones(1)]), ["text"], None)


def test_update_refuses_a_state_made_for_a_parameter_of_another_shape():
    # Resizing a classifier (Dense(8, 1) -> Dense(8, 10)) and keeping the old state: Adam's (1, 8)
    # moments would broadcast against the new (10, 8) weight, every row taking the old row's moments.
    old = pb.nn.Dense(8, 1, dtype=np.float64, rng=0)
    state = optim.setup(optim.Adam(0.1), old)
    (g,) = pb.gradient(lambda m: np.sum(m(np.ones((2, 8))) ** 2), old)
    state, old = optim.update(state, old, g)
    new = pb.nn.Dense(8, 10, dtype=np.float64, rng=1)
    (g,) = pb.gradient(lambda m: np.sum(m(np.ones((2, 8))) ** 2), new)
    with pytest.raises(ValueError, match=r"model\.weight was made for another parameter.*\(1, 8\).*shape \(10, 8\).*setup"):
        optim.update(state, new, g)


@pytest.mark.parametrize("update", [optim.update, optim.update_])
def test_a_state_for_another_shape_or_dtype_kind_is_refused_naming_the_place(update):
    model = {"w": np.ones((2, 2))}
    state = optim.setup(optim.Momentum(0.1), {"w": np.ones((1, 3))})
    with pytest.raises(ValueError, match=r"model\['w'\].*shape \(2, 2\)"):
        update(state, model, {"w": np.ones((2, 2))})
    complex_state = optim.setup(optim.OptimiserChain(optim.ClipNorm(1.0), optim.Adam()), {"w": np.ones((2, 2), complex)})
    with pytest.raises(ValueError, match=r"model\['w'\].*complex128"):
        update(complex_state, model, {"w": np.ones((2, 2))})
    np.testing.assert_array_equal(model["w"], 1.0)
    float32_state = optim.setup(optim.Adam(), {"w": np.ones((2, 2), np.float32)})  # same kind: fine
    update(float32_state, model, {"w": np.ones((2, 2))})


def test_a_failing_step_changes_nothing():
    model = [np.ones(2), np.ones(2)]
    state = optim.setup(optim.OptimiserChain(optim.ClipNorm(1.0), optim.Momentum(0.1)), model)
    with pytest.raises(ValueError, match="ClipNorm.*inf or nan"):
        optim.update_(state, model, [np.ones(2), np.array([np.nan, 1.0])])
    np.testing.assert_array_equal(model[0], 1.0)
    assert not state[0].state[1][0].any()


def test_update_in_place_refuses_read_only_arrays_before_writing_anything():
    frozen_array = np.ones(2)
    frozen_array.flags.writeable = False
    model = [np.ones(2), frozen_array]
    state = optim.setup(optim.Descent(0.5), model)
    with pytest.raises(ValueError, match=r"model\[1\].*read-only.*Use update"):
        optim.update_(state, model, [np.ones(2), np.ones(2)])
    np.testing.assert_array_equal(model[0], 1.0)
    _, new = optim.update(state, model, [np.ones(2), np.ones(2)])
    np.testing.assert_array_equal(new[1], 0.5)


def test_rule_reprs_and_leaf_repr():
    assert repr(optim.OptimiserChain(optim.ClipGrad(2), optim.WeightDecay(0.1))) == \
        "OptimiserChain(ClipGrad(delta=2.0), WeightDecay(lam=0.1))"
    leaf = optim.setup(optim.Adam(), [np.zeros((2, 3), np.float32)])[0]
    assert repr(leaf) == "Leaf(Adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08), state=(<float32 (2, 3)>, <float32 (2, 3)>, 0))"


# --- complex parameters -----------------------------------------------------------------------
@pytest.mark.parametrize("rule", [optim.Descent(0.1), optim.Adam(0.05), optim.Momentum(0.05), optim.RMSProp(0.01),
                                  optim.AdaGrad(0.5)], ids=lambda r: type(r).__name__)
def test_complex_parameters_converge(rule):
    c = np.array([1.5 - 2.0j, -0.5 + 0.25j, 3.0j])
    model = {"z": np.zeros(3, complex), "w": np.full(1, 0.5 + 0.5j, np.complex64)}
    state = optim.setup(rule, model)

    def loss(m):
        return np.sum(np.abs(m["z"] - c) ** 2) + np.sum(np.abs(m["w"] - c[0]) ** 2)

    for _ in range(3000):
        (g,) = pb.gradient(loss, model)
        state, model = optim.update(state, model, g)
    assert model["z"].dtype == np.complex128
    np.testing.assert_allclose(model["z"], c, atol=1e-3)
    assert model["w"].dtype == np.complex64
    np.testing.assert_allclose(model["w"], [c[0]], atol=1e-3)


def test_complex_descent_steps_along_the_conjugate_gradient():
    z = np.array([1.0 + 1.0j])
    (g,) = pb.gradient(lambda z: np.sum(np.abs(z) ** 2), z)  # 2 conj(z)
    state = optim.setup(optim.Descent(0.25), z)
    _, new = optim.update(state, z, g)
    np.testing.assert_allclose(new, z - 0.25 * 2 * z)  # halfway to 0, along -z (not -conj(z))
    clipped = optim.update(optim.setup(optim.ClipGrad(0.5), z), z, g)[1]
    np.testing.assert_allclose(clipped, z - (0.5 + 0.5j))


def test_setup_refuses_a_container_that_would_hide_weights_from_the_optimiser():
    import collections
    import functools

    def apply(w, x):
        return x @ w

    for model, where in ((functools.partial(apply, np.ones((2, 2))), "Model is a partial"),
                         ({"a": collections.deque([np.ones(2)])}, r"Model\['a'\] is a deque")):
        with pytest.raises(TypeError, match=where + ", which pb.tree does not look inside"):
            optim.setup(optim.Adam(), model)
    # a partial of options (an activation's slope) is a constant, as a function is
    state = optim.setup(optim.Adam(), {"act": functools.partial(np.multiply, 2.0), "w": np.ones(2)})
    assert state["act"] is None and state["w"] is not None


def test_update_does_not_call_a_custom_rules_init_on_a_fake_zero_parameter():
    # A custom rule whose state depends on the parameter's values (a preconditioner from the initial weights).
    # setup works; at 3a5294c update worked too. Now every update calls init(np.broadcast_to(0, shape)) to
    # "check the state fits", and this rule's init raises a bare LinAlgError("Singular matrix") naming nothing.
    import dataclasses

    from pullback import optim

    @dataclasses.dataclass(frozen=True)
    class Whitened(optim.Rule):
        lr: float = 0.1

        def init(self, x):
            return (np.linalg.inv(x.T @ x),)

        def apply(self, state, x, dx):
            return state, self.lr * dx @ state[0]

    model = {"w": np.eye(2) * 2.0}
    state = optim.setup(Whitened(), model)
    state, new = optim.update(state, model, {"w": np.ones((2, 2))})
    np.testing.assert_allclose(new["w"], [[1.975, -0.025], [-0.025, 1.975]])
