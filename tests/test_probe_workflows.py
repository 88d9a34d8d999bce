"""End-to-end workflows checked against independent computations (hand gradients, finite
differences, PyTorch from the same weights)."""

import os
from dataclasses import dataclass

import numpy as np
import pytest

import pullback as pb

nn = pb.nn
optim = pb.optim


def _fd(f, x, eps=1e-6):
    """Central differences of a scalar function of a float64 vector."""
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


@dataclass
class _MLP:
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray


_rng = np.random.default_rng(0)
_X = _rng.normal(size=(30, 3))
_Y = np.sin(_X @ np.array([1.0, -2.0, 0.5]))[:, None]


def _mlp_loss(m):
    h = np.tanh(_X @ m.w1 + m.b1)
    return np.mean((h @ m.w2 + m.b2 - _Y) ** 2)


def _mlp_hand(m):
    """Value and hand-written gradient, flattened in field order."""
    h = np.tanh(_X @ m.w1 + m.b1)
    out = h @ m.w2 + m.b2
    r = 2 * (out - _Y) / out.size
    dh = r @ m.w2.T * (1 - h**2)
    parts = [_X.T @ dh, dh.sum(0), h.T @ r, r.sum(0)]
    return float(np.mean((out - _Y) ** 2)), np.concatenate([np.ravel(p) for p in parts]).astype(np.float64)


def _mlp(dtype):
    rng = np.random.default_rng(1)
    return _MLP(rng.normal(size=(3, 4)).astype(dtype), np.zeros(4, dtype), rng.normal(size=(4, 1)).astype(dtype), np.zeros(1, dtype))


@pytest.mark.parametrize("method", ["L-BFGS-B", "BFGS"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_scipy_minimize_on_a_destructured_dataclass_matches_a_hand_written_gradient(method, dtype):
    """minimize(jac=True) with pb.value_and_grad follows the run with a hand-written gradient."""
    so = pytest.importorskip("scipy.optimize")
    flat, rebuild = optim.destructure(_mlp(dtype))
    assert flat.dtype == dtype
    vg = pb.value_and_grad(lambda v: _mlp_loss(rebuild(v)))

    def ours(v):
        val, g = vg(v)
        return float(val), np.asarray(g, np.float64)

    def hand(v):
        return _mlp_hand(rebuild(v))

    v0 = flat.astype(np.float64)
    np.testing.assert_allclose(ours(v0)[1], hand(v0)[1], rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-7)
    r1 = so.minimize(ours, v0, jac=True, method=method, options={"maxiter": 8})
    r2 = so.minimize(hand, v0, jac=True, method=method, options={"maxiter": 8})
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(r1.x, r2.x, rtol=tol, atol=tol)
    assert r1.fun < ours(v0)[0]


def test_trust_constr_with_pullback_hessian_and_hvp_match_finite_differences():
    """pb.hessian and pb.hvp through rebuild equal central differences of the hand gradient."""
    so = pytest.importorskip("scipy.optimize")
    flat, rebuild = optim.destructure(_mlp(np.float64))

    def f(v):
        return _mlp_loss(rebuild(v))

    H = pb.hessian(f, flat)
    fd = np.stack([_fd(lambda v: _mlp_hand(rebuild(v))[1][i], flat, 1e-5) for i in range(flat.size)])
    np.testing.assert_allclose(H, fd, atol=1e-7)
    p = np.random.default_rng(2).normal(size=flat.shape)
    np.testing.assert_allclose(pb.hvp(f, flat, p), H @ p, atol=1e-12)
    r1 = so.minimize(lambda v: _mlp_hand(rebuild(v)), flat, jac=True, hess=lambda v: pb.hessian(f, v),
                     method="trust-constr", options={"maxiter": 15})
    r2 = so.minimize(lambda v: _mlp_hand(rebuild(v)), flat, jac=True, hessp=lambda v, q: pb.hvp(f, v, q),
                     method="trust-constr", options={"maxiter": 15})
    assert r1.fun < f(flat) and r2.fun < f(flat)


def _torch_pair():
    torch = pytest.importorskip("torch")

    class ToRows(torch.nn.Module):
        def forward(self, x):
            return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)

    ours = nn.Chain(nn.Conv(2, 4, 3, padding=1, bias=False), nn.BatchNorm(4, nn.relu), nn.MaxPool(2), nn.Flatten(),
                    nn.Dense(36, 8), nn.LayerNorm((8,)), nn.gelu, nn.Dense(8, 3))
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        ToRows(), torch.nn.Linear(36, 8), torch.nn.LayerNorm(8), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(8, 3))
    nn.load_torch_weights(ours, theirs)
    return torch, ours, theirs


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("kind", ["adam_clip_wd", "sgd_momentum_wd_schedule"])
def test_training_loop_matches_torch_from_the_same_weights(kind, jit):
    """Losses, final weights, running statistics and eval-mode outputs follow torch.optim."""
    torch, m, tm = _torch_pair()
    rng = np.random.default_rng(3)
    X = rng.normal(size=(16, 6, 6, 2)).astype(np.float32)
    Y = rng.integers(0, 3, size=16)
    if kind == "adam_clip_wd":
        rule = optim.OptimiserChain(optim.ClipGrad(0.05), optim.WeightDecay(1e-3), optim.Adam(1e-2))
        opt = torch.optim.Adam(tm.parameters(), 1e-2, weight_decay=1e-3)
    else:
        rule = optim.OptimiserChain(optim.WeightDecay(1e-2), optim.Descent(0.05))
        opt = torch.optim.SGD(tm.parameters(), 0.05, weight_decay=1e-2)
    state = optim.setup(rule, m)

    def step(state, m, x, y):
        val, (g,) = pb.withgradient(lambda m: nn.logitcrossentropy(m(x), y), m)
        state, m = optim.update(state, m, g)
        return val, state, m

    stepf = pb.jit(step) if jit else step
    tx, ty = torch.tensor(X).permute(0, 3, 1, 2), torch.tensor(Y)
    for i in range(12):
        b = slice((i % 2) * 8, (i % 2) * 8 + 8)
        if kind != "adam_clip_wd":
            lr = 0.05 * (1 - i / 12)
            state = optim.adjust(state, lr=lr)
            opt.param_groups[0]["lr"] = lr
        val, state, m = stepf(state, m, X[b], Y[b])
        opt.zero_grad()
        tl = torch.nn.functional.cross_entropy(tm(tx[b]), ty[b])
        tl.backward()
        if kind == "adam_clip_wd":
            torch.nn.utils.clip_grad_value_(tm.parameters(), 0.05)
        opt.step()
        assert abs(float(val) - tl.item()) < 1e-5
    ours = [x for x in pb.tree.leaves(m, trainable_only=True) if isinstance(x, np.ndarray)]
    theirs = [p.detach().numpy() for p in tm.parameters()]
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b.transpose(2, 3, 1, 0) if b.ndim == 4 else b, atol=2e-5)
    np.testing.assert_allclose(m.layers[1].running_mean, tm[1].running_mean.numpy(), atol=1e-5)
    np.testing.assert_allclose(m.layers[1].running_var, tm[1].running_var.numpy(), atol=1e-5)
    nn.testmode(m)
    tm.eval()
    before = m.layers[1].running_mean.copy()
    np.testing.assert_allclose(m(X), tm(tx).detach().numpy(), atol=1e-4)
    pb.gradient(lambda m: np.sum(m(X)), m)
    np.testing.assert_array_equal(m.layers[1].running_mean, before)


def test_dropout_trains_with_its_mask_scaled_and_evaluates_as_the_identity():
    """Training mode zeroes about p of the entries and scales the rest by 1/(1-p); eval is identity."""
    d = nn.Dropout(0.25, rng=np.random.default_rng(0), training=True)
    x = np.ones((4, 500), np.float32)
    _, (gx,) = pb.withgradient(lambda x: np.sum(d(x) * 3), x)
    assert set(np.unique(gx).tolist()) == {0.0, 4.0}
    assert abs((gx == 0).mean() - 0.25) < 0.03
    nn.testmode(d)
    np.testing.assert_array_equal(d(x), x)


def _ckpt_model(seed, dropout):
    layers = [nn.Dense(5, 8, nn.relu, rng=seed), nn.BatchNorm(8)]
    if dropout:
        layers.append(nn.Dropout(0.3, rng=seed))
    return nn.Chain(*layers, nn.Dense(8, 3, rng=seed + 1))


def _ckpt_step(state, m, i):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(32, 5)).astype(np.float32)
    Y = rng.integers(0, 3, 32)
    b = slice((i % 4) * 8, (i % 4) * 8 + 8)
    g, = pb.gradient(lambda m: nn.logitcrossentropy(m(X[b]), Y[b]), m)
    return optim.update(state, m, g)


def _resume(tmp_path, ext, dropout):
    rule = optim.OptimiserChain(optim.ClipNorm(1.0), optim.Adam(1e-2))
    m = _ckpt_model(0, dropout)
    state = optim.setup(rule, m)
    for i in range(5):
        state, m = _ckpt_step(state, m, i)
    path = os.path.join(tmp_path, "run" + ext)
    if ext == ".ckpt":
        pb.save(path, m, state)
        m2, state2 = pb.load(path, like=_ckpt_model(7, dropout))
    else:
        pb.save(path, m)
        m2 = pb.load(path, like=_ckpt_model(7, dropout))
        pb.save(os.path.join(tmp_path, "state.ckpt"), m, state)
        _, state2 = pb.load(os.path.join(tmp_path, "state.ckpt"), like=_ckpt_model(7, dropout))
    for i in range(5, 10):
        state, m = _ckpt_step(state, m, i)
        state2, m2 = _ckpt_step(state2, m2, i)
    return [x for x in pb.tree.leaves(m) if isinstance(x, np.ndarray)], [x for x in pb.tree.leaves(m2) if isinstance(x, np.ndarray)]


@pytest.mark.parametrize("ext", [".ckpt", ".safetensors"])
def test_training_resumed_from_a_checkpoint_equals_the_uninterrupted_run(tmp_path, ext):
    """Weights and BatchNorm statistics after save, load and five more steps equal the run never stopped."""
    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    a, b = _resume(tmp_path, ext, dropout=False)
    assert len(a) == len(b) == 8
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_training_with_dropout_resumed_from_a_checkpoint_equals_the_uninterrupted_run(tmp_path):
    """As above, with a Dropout layer whose generator has advanced before the save."""
    a, b = _resume(tmp_path, ".ckpt", dropout=True)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pb.primitive
def _swish(x, beta):
    return x / (1 + np.exp(-beta * x))


@pb.rrule(_swish)
def _swish_rule(x, beta):
    s = 1 / (1 + np.exp(-beta * x))

    def back(dy):
        return dy * (s + beta * x * s * (1 - s)), pb.Thunk(lambda: np.sum(dy * x * x * s * (1 - s)))

    return x * s, back


class _SwishNet:
    def __init__(self):
        self.d1 = nn.Dense(4, 6, dtype=np.float64, rng=0)
        self.d2 = nn.Dense(6, 3, dtype=np.float64, rng=1)
        self.beta = np.array(1.3)

    def __call__(self, x):
        return self.d2(_swish(self.d1(x), self.beta))


def test_per_example_and_micro_batch_gradients_sum_to_the_full_batch_gradient_with_a_custom_rule():
    """Gradients through a user rrule: per-example and micro-batch sums equal the full batch, which
    equals finite differences; a jitted per-example gradient equals the eager one."""
    rng = np.random.default_rng(5)
    X, Y = rng.normal(size=(12, 4)), rng.integers(0, 3, 12)
    m = _SwishNet()

    def loss(m, x, y):
        return nn.logitcrossentropy(m(x), y, agg="sum")

    full = pb.gradient(loss, m, X, Y)[0]
    micro = None
    for i in range(0, 12, 4):
        micro = pb.accum(micro, pb.gradient(loss, m, X[i:i + 4], Y[i:i + 4])[0])
    per = [pb.gradient(loss, m, X[i:i + 1], Y[i:i + 1])[0] for i in range(12)]
    each = None
    for g in per:
        each = pb.accum(each, g)
    for total in (micro, each):
        for a, b in zip(pb.tree.leaves(total), pb.tree.leaves(full)):
            if b is not None:
                np.testing.assert_allclose(a, b, atol=1e-12)

    def beta_loss(beta):
        m.beta = np.array(beta[0])
        return loss(m, X, Y)

    np.testing.assert_allclose(full.beta, _fd(beta_loss, np.array([1.3]))[0], rtol=1e-7)
    m.beta = np.array(1.3)
    w = m.d1.weight.copy()

    def w_loss(v):
        m.d1.weight = v.reshape(w.shape)
        return loss(m, X, Y)

    np.testing.assert_allclose(full.d1.weight.ravel(), _fd(w_loss, w.ravel()), atol=1e-7)
    m.d1.weight = w
    step = pb.jit(lambda m, x, y: pb.gradient(loss, m, x, y)[0])
    for i in range(3):
        gj = step(m, X[i:i + 1], Y[i:i + 1])
        for a, b in zip(pb.tree.leaves(gj), pb.tree.leaves(per[i])):
            if b is not None:
                np.testing.assert_allclose(a, b, atol=1e-14)


def _lv(y, p):
    return np.stack([p[0] * y[0] - p[1] * y[0] * y[1], p[2] * y[0] * y[1] - p[3] * y[1]])


def _rk4(y0, p, h=0.02, n=60):
    y = y0.copy()
    out = np.zeros_like(y0, shape=(n, 2))
    for i in range(n):
        k1 = _lv(y, p)
        k2 = _lv(y + h / 2 * k1, p)
        k3 = _lv(y + h / 2 * k2, p)
        k4 = _lv(y + h * k3, p)
        y += h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out[i] = y
    return np.sum(out[:, 0] ** 2) / n + y[1]


def test_rk4_integration_gradients_match_finite_differences_eager_and_under_jit():
    """A hand-written RK4 loop with in-place updates, differentiated in y0 and the parameters."""
    y0, p = np.array([1.0, 0.5]), np.array([1.1, 0.4, 0.4, 0.6])
    val, (gy, gp) = pb.withgradient(_rk4, y0, p)
    assert val == _rk4(y0, p)
    np.testing.assert_allclose(gy, _fd(lambda y: _rk4(y, p), y0), atol=1e-7)
    np.testing.assert_allclose(gp, _fd(lambda q: _rk4(y0, q), p), atol=1e-7)
    step = pb.jit(lambda y, p: pb.withgradient(_rk4, y, p))
    for scale in (1.0, 1.1):
        v, (a, b) = step(y0 * scale, p)
        ref = pb.withgradient(_rk4, y0 * scale, p)
        assert v == ref.val
        np.testing.assert_allclose(a, ref.grad[0], atol=1e-14)
        np.testing.assert_allclose(b, ref.grad[1], atol=1e-14)


def test_solve_ivp_gradients_match_finite_differences_of_scipy():
    """pullback.scipy.integrate.solve_ivp against central differences of SciPy's own solve."""
    si = pytest.importorskip("scipy.integrate")
    from pullback.scipy import integrate

    t = np.linspace(0, 1.5, 4)
    kw = dict(t_eval=t, rtol=1e-11, atol=1e-11)

    def ours(y0, p):
        return np.sum(integrate.solve_ivp(lambda t, y, p: _lv(y, p), (0, 1.5), y0, args=(p,), **kw).y ** 2)

    def plain(y0, p):
        return np.sum(si.solve_ivp(lambda t, y, p: _lv(y, p), (0, 1.5), y0, args=(p,), **kw).y ** 2)

    y0, p = np.array([1.0, 0.5]), np.array([1.1, 0.4, 0.4, 0.6])
    val, (gy, gp) = pb.withgradient(ours, y0, p)
    assert val == plain(y0, p)
    np.testing.assert_allclose(gy, _fd(lambda y: plain(y, p), y0, 1e-5), atol=1e-6)
    np.testing.assert_allclose(gp, _fd(lambda q: plain(y0, q), p, 1e-5), atol=1e-6)


def _data_model(p, x, y, K=4):
    logits = np.clip(np.einsum("nd,dk->nk", x, p["W"]) + p["b"], -3.0, 3.0)
    lse = logits[:, 0]
    for k in range(1, K):
        lse = np.logaddexp(lse, logits[:, k])
    nll = lse - np.take_along_axis(logits, y[:, None], axis=1)[:, 0]
    mask = x[:, 0] > 0
    nll = np.where(mask, nll * p["s"], nll)
    return np.mean(nll) + np.sum(np.abs(x[mask] @ p["W"])) * 1e-3


def _data_hand(p, x, y, K=4):
    z = x @ p["W"] + p["b"]
    inside = (z > -3) & (z < 3)
    lg = np.clip(z, -3, 3)
    sm = np.exp(lg) / np.exp(lg).sum(1, keepdims=True)
    n, mask = len(x), x[:, 0] > 0
    nll = np.log(np.exp(lg).sum(1)) - lg[np.arange(n), y]
    dz = (sm - np.eye(K)[y]) * (np.where(mask, p["s"], 1.0) / n)[:, None] * inside
    xm = x[mask]
    return {"W": x.T @ dz + xm.T @ np.sign(xm @ p["W"]) * 1e-3, "b": dz.sum(0), "s": np.sum(nll[mask]) / n}


def test_minibatches_as_views_fancy_copies_and_strided_slices_give_hand_written_gradients():
    """einsum, clip, logaddexp, take_along_axis, where and a boolean mask on slices of a big array."""
    rng = np.random.default_rng(6)
    X, Y = rng.normal(size=(120, 6)), rng.integers(0, 4, 120)
    params = {"W": rng.normal(size=(6, 4)) * 0.3, "b": np.zeros(4), "s": np.array(0.7)}
    step = pb.jit(lambda p, x, y: pb.withgradient(lambda p: _data_model(p, x, y), p))
    for i in range(0, 120, 40):
        idx = rng.permutation(120)[:40]
        for xb, yb in ((X[i:i + 40], Y[i:i + 40]), (X[idx], Y[idx]), (X[i::3], Y[i::3])):
            for fn in (pb.withgradient, None):
                val, (g,) = fn(lambda p: _data_model(p, xb, yb), params) if fn else step(params, xb, yb)
                assert val == _data_model(params, xb, yb)
                h = _data_hand(params, xb, yb)
                for k in g:
                    np.testing.assert_allclose(g[k], h[k], atol=1e-13)
    assert X.flags.writeable and Y.flags.writeable


def test_destructure_inside_jit_flattens_the_models_arrays():
    """Under pb.jit, destructure sees the model's arrays (stand-ins) and rebuild uses the vector."""
    def f(m):
        flat, rebuild = optim.destructure(m)
        r = rebuild(flat * 2)
        return np.sum(flat ** 2) + np.sum(r["w"] * np.arange(3)) + np.sum(r["b"])

    jf = pb.jit(f)
    for k in (1.0, 2.0, 3.0):
        m = {"w": np.ones(3) * k, "b": np.ones(2, np.float32) * k}
        expected = 5 * k**2 + 2 * k * 3 + 4 * k
        assert f(m) == expected
        assert jf(m) == expected
    g = pb.jit(lambda m: pb.gradient(f, m)[0])({"w": np.ones(3), "b": np.ones(2, np.float32)})
    np.testing.assert_allclose(g["w"], 2 + 2 * np.arange(3))
    np.testing.assert_allclose(g["b"], [4.0, 4.0])


def test_rebuild_inside_jit_replays_with_each_vector():
    """A jitted loss of rebuild(v) (the flat-vector optimiser's objective) follows v on every call."""
    flat, rebuild = optim.destructure({"w": np.ones((2, 2)), "b": np.zeros(2, np.float32)})

    def loss(v):
        m = rebuild(v)
        return np.sum(m["w"] ** 2) + np.sum(m["b"] ** 3)

    jl, jvg = pb.jit(loss), pb.jit(pb.value_and_grad(loss))
    for v in (flat, flat + 1, np.arange(6.0)):
        assert jl(v) == loss(v)
        val, g = jvg(v)
        assert val == loss(v)
        np.testing.assert_allclose(g, np.r_[2 * v[:4], 3 * v[4:] ** 2])
    r = pb.jit(rebuild)(np.arange(6.0))
    np.testing.assert_array_equal(r["w"], [[0.0, 1.0], [2.0, 3.0]])
    assert r["b"].dtype == np.float32


def test_check_gradient_of_an_auto_mode_batchnorm_model_agrees_or_names_the_mode():
    """check_gradient on a model with an auto-mode BatchNorm agrees, or raises naming trainmode/testmode."""
    m = nn.Chain(nn.Dense(3, 4, dtype=np.float64, rng=0), nn.BatchNorm(4, nn.tanh, dtype=np.float64))
    x = np.random.default_rng(0).normal(size=(6, 3))
    with pytest.raises(ValueError, match=r"args\[0\]\.layers\[1\] \(a BatchNorm\) is in the automatic mode.*trainmode"):
        pb.check_gradient(lambda m, x: np.sum(m(x) ** 2), m, x)
    nn.trainmode(m)
    assert pb.check_gradient(lambda m, x: np.sum(m(x) ** 2), m, x)
