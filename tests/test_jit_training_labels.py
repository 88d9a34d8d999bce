"""Training steps and losses with integer labels under pb.jit, compared with the same steps made eagerly
(labels are traced arguments: the backward passes of indexing by them are recorded, not read)."""

import copy

import numpy as np
import pytest

import pullback as pb

nn, optim = pb.nn, pb.optim


def _ce_fancy(lp, y):
    return -np.mean(lp[np.arange(len(y)), y])


def _ce_take_along(lp, y):
    return -np.mean(np.take_along_axis(lp, y[:, None], axis=1))


@pytest.mark.parametrize("pick", [_ce_fancy, _ce_take_along], ids=["arange-index", "take_along_axis"])
def test_jitted_training_step_with_integer_labels_picked_by_index(pick):
    # cross-entropy picking log-probabilities with integer labels, the common training step
    def make():
        return nn.Chain(nn.Dense(3, 8, nn.relu, rng=1), nn.Dense(8, 3, rng=2))

    def step(model, state, x, y):
        val, (g,) = pb.withgradient(lambda m: pick(nn.logsoftmax(m(x)), y), model)
        state, model = optim.update(state, model, g)
        return model, state, val

    rng = np.random.default_rng(0)
    me = make()
    se = optim.setup(optim.Adam(0.01), me)
    mj, sj = copy.deepcopy((me, se))
    jstep = pb.jit(step)
    for _ in range(3):
        x, y = rng.normal(size=(5, 3)).astype(np.float32), rng.integers(0, 3, 5)
        me, se, ve = step(me, se, x.copy(), y.copy())
        mj, sj, vj = jstep(mj, sj, x.copy(), y.copy())
        np.testing.assert_allclose(vj, ve, rtol=1e-6)
        for a, b in ((mj.layers[0].weight, me.layers[0].weight), (mj.layers[1].bias, me.layers[1].bias)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def _zero_label_entries(x, y):
    z = x * 1.0
    z[np.arange(len(y)), y] = 0.0  # mask out the true class (a margin / "other classes" loss)
    return np.sum(z ** 2)


def _zero_label_rows(x, y):
    z = x * 1.0
    z[y] = 0.0
    return np.sum(z ** 2)


def _choose_by_label(x, y):
    return -np.mean(np.choose(y, nn.logsoftmax(x).T))


@pytest.mark.parametrize("loss", [_zero_label_entries, _zero_label_rows, _choose_by_label],
                         ids=["setitem-arange-labels", "setitem-labels", "choose"])
def test_jitted_gradient_of_a_loss_indexed_by_an_integer_label_argument(loss):
    # writes and picks by label: the repeat check of x[index] = v and np.choose's rule read no label
    x = np.random.default_rng(0).normal(size=(4, 3))
    y = np.array([0, 2, 1, 1])
    f = lambda x, y: pb.withgradient(loss, x, y)  # noqa: E731
    jf = pb.jit(f)
    for labels in (y, y, y[::-1].copy()):
        expected = f(x.copy(), labels.copy())
        got = jf(x.copy(), labels.copy())
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
        np.testing.assert_allclose(got[1][0], expected[1][0], rtol=1e-12)
