"""PyTorch's options of SGD, Adam/AdamW, cross_entropy, gelu and softplus: against torch where it is
installed, and against hand-written references of PyTorch's documented algorithms and finite differences."""

import math
import os
import tempfile

import numpy as np
import pytest

import pullback as pb
from pullback import optim
from pullback.nn import activations
from pullback.testing import assert_gradient

GRADIENT_CHECK = {"dense_up_to": None, "rtol": 1e-6, "atol": 1e-8}


def _gradients(seed, steps=40, shape=(3, 4)):
    """Gradients whose size jumps every few steps, so AMSGrad's maximum is the one used, not the latest v."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) * (6.0 if k % 7 == 0 else 1.0) for k in range(steps)]


def _trajectory(rule, x0, gradients):
    model, state = [x0.copy()], optim.setup(rule, [x0.copy()])
    path = []
    for g in gradients:
        state, model = optim.update(state, model, [g])
        path.append(model[0])
    return path


def _torch_trajectory(torch, make, x0, gradients, dtype=None):
    param = torch.nn.Parameter(torch.tensor(x0, dtype=dtype or torch.float64))
    opt = make([param])
    path = []
    for g in gradients:
        param.grad = torch.tensor(g, dtype=param.dtype)
        opt.step()
        path.append(param.detach().numpy().copy())
    return path


def _assert_same_path(path, reference, rtol=1e-12, atol=1e-15):
    for k, (a, b) in enumerate(zip(path, reference, strict=True)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"step {k + 1}")


# --- SGD dampening -----------------------------------------------------------------------------------

def _sgd_by_hand(x0, gradients, lr, momentum, dampening):
    """torch.optim.SGD's documented update: b = g at the first step, then b = mu b + (1 - tau) g; x -= lr b."""
    x, buf, path = x0.copy(), None, []
    for g in gradients:
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = buf
        x = x - lr * g
        path.append(x)
    return path


DAMPED = [(0.05, 0.8, 0.3), (0.05, 0.8, 1.0), (0.1, 0.0, 0.5), (0.02, 0.95, 0.9)]


@pytest.mark.parametrize("lr, rho, dampening", DAMPED)
def test_momentum_dampening_matches_torch_sgd(lr, rho, dampening):
    torch = pytest.importorskip("torch")
    x0, gs = np.random.default_rng(0).standard_normal((3, 4)), _gradients(1)
    reference = _torch_trajectory(torch, lambda p: torch.optim.SGD(p, lr=lr, momentum=rho, dampening=dampening), x0, gs)
    _assert_same_path(_trajectory(optim.Momentum(lr, rho, dampening), x0, gs), reference)


@pytest.mark.parametrize("lr, rho, dampening", DAMPED)
def test_momentum_dampening_follows_sgds_definition(lr, rho, dampening):
    x0, gs = np.random.default_rng(0).standard_normal((3, 4)), _gradients(2)
    _assert_same_path(_trajectory(optim.Momentum(lr, rho, dampening), x0, gs), _sgd_by_hand(x0, gs, lr, rho, dampening))


def test_momentum_dampening_in_float32_matches_torch():
    torch = pytest.importorskip("torch")
    x0 = np.random.default_rng(0).standard_normal(6).astype(np.float32)
    gs = [g.astype(np.float32) for g in _gradients(3, 30, (6,))]
    reference = _torch_trajectory(torch, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.4),
                                  x0, gs, torch.float32)
    path = _trajectory(optim.Momentum(0.05, 0.9, 0.4), x0, gs)
    assert path[-1].dtype == np.float32
    _assert_same_path(path, reference, rtol=1e-5, atol=1e-6)


def test_momentum_dampening_skips_a_none_gradient_as_torch_skips_a_parameter_without_grad():
    # the first real step is undamped however late it comes, as PyTorch's buffer starts then
    x0, g = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    state = optim.setup(optim.Momentum(0.1, 0.9, 0.5), [x0])
    state, model = optim.update(state, [x0], [None])
    state, model = optim.update(state, model, [g])
    np.testing.assert_array_equal(model[0], x0 - 0.1 * g)
    state, model = optim.update(state, model, [g])
    np.testing.assert_allclose(model[0], x0 - 0.1 * g - 0.1 * (0.9 * g + 0.5 * g), rtol=1e-15)


def test_dampening_set_by_adjust_damps_the_next_step():
    # PyTorch's buffer already exists after a step, so a dampening set later damps at once
    x0, g = np.array([1.0]), np.array([2.0])
    state = optim.setup(optim.Momentum(0.1, 0.5), [x0])
    state, model = optim.update(state, [x0], [g])
    state, model = optim.update(optim.adjust(state, dampening=0.25), model, [g])
    np.testing.assert_allclose(model[0], _sgd_by_hand(x0, [g, g], 0.1, 0.5, 0.25)[-1], rtol=1e-15)


def test_nesterov_refuses_dampening_as_torch_does():
    with pytest.raises(ValueError, match=r"dampening must be 0.*Momentum\(lr, rho, dampening"):
        optim.Nesterov(0.1, 0.9, dampening=0.1)
    state = optim.setup(optim.Nesterov(), [np.zeros(2)])
    with pytest.raises(ValueError, match="dampening"):
        optim.adjust(state, dampening=0.5)
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="dampening"):
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan])
def test_momentum_refuses_a_dampening_outside_zero_to_one(bad):
    with pytest.raises(ValueError, match=r"dampening must be in \[0, 1\]"):
        optim.Momentum(0.1, 0.9, dampening=bad)


# --- AMSGrad -----------------------------------------------------------------------------------------

def _adam_by_hand(x0, gradients, lr, beta1, beta2, eps, weight_decay=0.0, amsgrad=True, start=0):
    """torch.optim.Adam/AdamW's documented algorithm: the maximum of the raw second moments, then bias
    correction with this step's factor. AMSGrad starts at step `start` (with the maximum at that step's v)."""
    x, m, v, v_max, path = x0.copy(), np.zeros_like(x0), np.zeros_like(x0), None, []
    for t, g in enumerate(gradients, 1):
        x = x * (1 - lr * weight_decay)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        if amsgrad and t > start:
            v_max = v if v_max is None else np.maximum(v_max, v)
            second = v_max
        else:
            second = v
        x = x - lr / (1 - beta1**t) * m / (np.sqrt(second) / math.sqrt(1 - beta2**t) + eps)
        path.append(x)
    return path


ADAMS = [
    (lambda: optim.Adam(0.02, 0.8, 0.95, 1e-6, amsgrad=True), {}, 0.0),
    (lambda: optim.AdamW(0.02, 0.8, 0.95, 1e-6, 0.3, amsgrad=True), {"weight_decay": 0.3}, 0.3),
    (lambda: optim.Adam(0.1, 0.9, 0.999, 1e-8, amsgrad=True), {}, 0.0),
]


@pytest.mark.parametrize("make, torch_options, weight_decay", ADAMS)
def test_amsgrad_matches_torch(make, torch_options, weight_decay):
    torch = pytest.importorskip("torch")
    rule = make()
    x0, gs = np.random.default_rng(4).standard_normal((3, 4)), _gradients(5)
    kind = torch.optim.AdamW if isinstance(rule, optim.AdamW) else torch.optim.Adam
    options = {"lr": rule.lr, "betas": (rule.beta1, rule.beta2), "eps": rule.eps, "amsgrad": True, **torch_options}
    reference = _torch_trajectory(torch, lambda p: kind(p, **options), x0, gs)
    _assert_same_path(_trajectory(rule, x0, gs), reference)
    plain = _torch_trajectory(torch, lambda p: kind(p, **(options | {"amsgrad": False})), x0, gs)
    assert np.max(np.abs(plain[-1] - reference[-1])) > 1e-5  # the maximum mattered


@pytest.mark.parametrize("make, torch_options, weight_decay", ADAMS)
def test_amsgrad_follows_the_documented_algorithm(make, torch_options, weight_decay):
    rule = make()
    x0, gs = np.random.default_rng(6).standard_normal((3, 4)), _gradients(7)
    reference = _adam_by_hand(x0, gs, rule.lr, rule.beta1, rule.beta2, rule.eps, weight_decay)
    _assert_same_path(_trajectory(rule, x0, gs), reference)
    without = _adam_by_hand(x0, gs, rule.lr, rule.beta1, rule.beta2, rule.eps, weight_decay, amsgrad=False)
    assert np.max(np.abs(without[-1] - reference[-1])) > 1e-5


def test_amsgrad_in_float32_matches_torch():
    torch = pytest.importorskip("torch")
    x0 = np.random.default_rng(0).standard_normal(6).astype(np.float32)
    gs = [g.astype(np.float32) for g in _gradients(8, 30, (6,))]
    reference = _torch_trajectory(torch, lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True), x0, gs, torch.float32)
    path = _trajectory(optim.Adam(0.01, amsgrad=True), x0, gs)
    assert path[-1].dtype == np.float32
    _assert_same_path(path, reference, rtol=1e-5, atol=1e-6)


def test_amsgrad_set_by_adjust_starts_its_maximum_at_that_steps_moment():
    x0, gs = np.array([0.5, -1.0, 2.0]), _gradients(9, 12, (3,))
    state, model = optim.setup(optim.Adam(0.05), [x0]), [x0]
    for k, g in enumerate(gs):
        if k == 5:
            state = optim.adjust(state, amsgrad=True)
        state, model = optim.update(state, model, [g])
    np.testing.assert_allclose(model[0], _adam_by_hand(x0, gs, 0.05, 0.9, 0.999, 1e-8, start=5)[-1], rtol=1e-13)


def test_new_options_leave_the_repr_of_rules_without_them_unchanged():
    assert repr(optim.Adam()) == "Adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08)"
    assert repr(optim.Momentum(0.1, 0.9)) == "Momentum(lr=0.1, rho=0.9)"
    assert repr(optim.Momentum(0.1, 0.9, 0.5)) == "Momentum(lr=0.1, rho=0.9, dampening=0.5)"
    assert repr(optim.AdamW(amsgrad=True)).endswith("weight_decay=0.01, amsgrad=True)")
    assert eval(repr(optim.Adam(amsgrad=True)), vars(optim)) == optim.Adam(amsgrad=True)
    with pytest.raises(TypeError, match="amsgrad must be True or False"):
        optim.Adam(amsgrad="yes")


@pytest.mark.parametrize("rule", [optim.Momentum(0.1, 0.8, 0.3), optim.Adam(0.1, amsgrad=True),
                                  optim.AdamW(0.1, amsgrad=True)])
def test_new_options_replay_under_jit_and_survive_a_checkpoint(rule):
    gs = _gradients(10, 6, (3,))
    step = pb.jit(lambda state, model, g: optim.update(state, model, g))
    state, model = optim.setup(rule, {"w": np.ones(3)}), {"w": np.ones(3)}
    for g in gs[:3]:
        state, model = step(state, model, {"w": g})
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "run.pb")
        pb.save(path, model, state)
        model, state = pb.load(path, like=model)
    assert state["w"].rule == rule
    for g in gs[3:]:
        state, model = step(state, model, {"w": g})
    np.testing.assert_array_equal(model["w"], _trajectory(rule, np.ones(3), gs)[-1])


# --- gelu, exact -------------------------------------------------------------------------------------

X = np.array([-40.0, -9.0, -5.0, -2.0, -0.5, -1e-3, 0.0, 1e-3, 0.7, 1.5, 3.0, 8.0, 40.0])


def _gelu_by_hand(x):
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x])


def _gelu_slope_by_hand(x):
    """d/dx x Phi(x) = Phi(x) + x phi(x)."""
    return np.array([0.5 * math.erfc(-v / math.sqrt(2)) + v * math.exp(-v * v / 2) / math.sqrt(2 * math.pi) for v in x])


def _exact_gelu(x):
    return pb.nn.gelu(x, approximate="none")


def test_exact_gelu_matches_torch():
    torch = pytest.importorskip("torch")
    for dtype, tol in [(np.float64, 1e-12), (np.float32, 2e-6)]:
        x = torch.tensor(X.astype(dtype), requires_grad=True)
        y = torch.nn.functional.gelu(x, approximate="none")
        y.backward(torch.ones_like(y))
        got = _exact_gelu(X.astype(dtype))
        (g,) = pb.gradient(lambda x: np.sum(_exact_gelu(x)), X.astype(dtype))
        assert got.dtype == dtype and g.dtype == dtype
        # PyTorch's 0.5 * x * (1 + erf(x / sqrt 2)) cancels for negative x, losing up to eps * |x|
        lost = 4 * np.finfo(dtype).eps * np.maximum(np.abs(X), 1)
        assert np.all(np.abs(got - y.detach().numpy()) <= tol * np.abs(got) + lost)
        assert np.all(np.abs(g - x.grad.numpy()) <= tol * np.abs(g) + lost)


def test_exact_gelu_values_and_derivatives_by_hand():
    np.testing.assert_allclose(_exact_gelu(X), _gelu_by_hand(X), rtol=1e-13, atol=1e-300)  # (math.erfc without SciPy)
    (g,) = pb.gradient(lambda x: np.sum(_exact_gelu(x)), X)
    np.testing.assert_allclose(g, _gelu_slope_by_hand(X), rtol=1e-13, atol=1e-300)
    _, tangent = pb.jvp(_exact_gelu, (X,), (np.ones_like(X),))
    np.testing.assert_allclose(tangent, _gelu_slope_by_hand(X), rtol=1e-13, atol=1e-300)
    # second derivative phi(x) (2 - x**2), by hand
    for v in (-2.0, 0.3, 1.7):
        expected = math.exp(-v * v / 2) / math.sqrt(2 * math.pi) * (2 - v * v)
        assert pb.hessian(_exact_gelu, v) == pytest.approx(expected, rel=1e-12)
        assert pb.hessian(_exact_gelu, np.array(v)) == pytest.approx(expected, rel=1e-12)


def test_exact_gelu_against_finite_differences_to_second_order():
    x = np.array([-6.0, -2.5, -0.4, 0.0, 0.9, 2.2, 5.0])
    assert_gradient(lambda x: np.sum(_exact_gelu(x) * np.arange(1.0, 8.0)), x, order=2, **GRADIENT_CHECK)


def test_exact_gelu_has_finite_limits_at_extreme_inputs():
    for dtype in (np.float32, np.float64):
        big = np.finfo(dtype).max / 4
        x = np.array([-big, -1e20, -40.0, 40.0, 1e20, big], dtype=dtype)
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            y = _exact_gelu(x)
            (g,) = pb.gradient(lambda x: np.sum(_exact_gelu(x)), x)
            _, t = pb.jvp(_exact_gelu, (x,), (np.ones_like(x),))
        np.testing.assert_array_equal(y, np.where(x > 0, x, 0))
        np.testing.assert_array_equal(g, np.where(x > 0, 1, 0).astype(dtype))
        np.testing.assert_array_equal(t, g)
        assert y.dtype == g.dtype == dtype


def test_exact_gelu_without_scipy_uses_math_erfc(monkeypatch):
    with_scipy = _exact_gelu(X)
    monkeypatch.setattr(activations, "_scipy_erfc", lambda: None)
    np.testing.assert_allclose(_exact_gelu(X), with_scipy, rtol=1e-14, atol=1e-300)
    assert _exact_gelu(X.astype(np.float32)).dtype == np.float32
    (g,) = pb.gradient(lambda x: np.sum(_exact_gelu(x)), X)
    np.testing.assert_allclose(g, _gelu_slope_by_hand(X), rtol=1e-13, atol=1e-300)


def test_gelu_keeps_the_tanh_form_by_default_and_refuses_other_forms():
    tanh_form = 0.5 * X * (1 + np.tanh(math.sqrt(2 / math.pi) * (X + 0.044715 * X**3)))
    np.testing.assert_allclose(pb.nn.gelu(X), tanh_form, rtol=1e-12, atol=1e-300)
    np.testing.assert_array_equal(pb.nn.gelu(X, approximate="tanh"), pb.nn.gelu(X))
    with pytest.raises(ValueError, match='approximate must be "tanh".*or "none"'):
        pb.nn.gelu(X, approximate="erf")


# --- softplus, beta and threshold ---------------------------------------------------------------------

SOFTPLUS_X = np.array([-60.0, -20.0, -1.0, 0.0, 0.3, 9.5, 10.0, 10.5, 15.0, 19.9, 20.0, 20.1, 45.0])
SOFTPLUS_OPTIONS = [(1.0, 20.0), (2.0, 20.0), (0.5, 3.0), (3.0, 1.0), (-1.5, 2.0)]


@pytest.mark.parametrize("beta, threshold", SOFTPLUS_OPTIONS)
def test_softplus_beta_and_threshold_match_torch(beta, threshold):
    torch = pytest.importorskip("torch")
    for dtype, tol in [(np.float64, 1e-14), (np.float32, 1e-6)]:
        x = torch.tensor(SOFTPLUS_X.astype(dtype), requires_grad=True)
        y = torch.nn.functional.softplus(x, beta=beta, threshold=threshold)
        y.backward(torch.ones_like(y))
        got = pb.nn.softplus(SOFTPLUS_X.astype(dtype), beta, threshold)
        (g,) = pb.gradient(lambda x: np.sum(pb.nn.softplus(x, beta=beta, threshold=threshold)), SOFTPLUS_X.astype(dtype))
        assert got.dtype == g.dtype == dtype
        np.testing.assert_allclose(got, y.detach().numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(g, x.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("beta, threshold", SOFTPLUS_OPTIONS + [(2.0, None)])
def test_softplus_beta_and_threshold_by_hand(beta, threshold):
    def by_hand(v):
        if threshold is not None and beta * v > threshold:
            return v, 1.0
        return math.log1p(math.exp(beta * v)) / beta, 1 / (1 + math.exp(-beta * v))

    values, slopes = zip(*map(by_hand, SOFTPLUS_X))
    np.testing.assert_allclose(pb.nn.softplus(SOFTPLUS_X, beta, threshold), values, rtol=1e-14, atol=1e-300)
    (g,) = pb.gradient(lambda x: np.sum(pb.nn.softplus(x, beta, threshold)), SOFTPLUS_X)
    np.testing.assert_allclose(g, slopes, rtol=1e-14, atol=1e-300)
    _, t = pb.jvp(lambda x: pb.nn.softplus(x, beta, threshold), (SOFTPLUS_X,), (np.ones_like(SOFTPLUS_X),))
    np.testing.assert_allclose(t, slopes, rtol=1e-14, atol=1e-300)
    away = np.array([-3.0, -0.2, 0.4, 2.5])  # away from the threshold's step
    assert_gradient(lambda x: np.sum(pb.nn.softplus(x, beta, threshold) * np.arange(1.0, 5.0)), away, order=2,
                    **GRADIENT_CHECK)


def test_softplus_with_options_is_finite_at_extreme_inputs():
    # beta * x would overflow for the largest x: the limits are x and 0, slopes 1 and 0
    for dtype in (np.float32, np.float64):
        big = np.finfo(dtype).max / 1.5
        x = np.array([-big, -1e20, 1e20, big], dtype=dtype)
        for beta, threshold in [(2.0, None), (2.0, 20.0), (4.0, 100.0), (0.5, None)]:
            with np.errstate(over="raise", invalid="raise", divide="raise"):
                y = pb.nn.softplus(x, beta, threshold)
                (g,) = pb.gradient(lambda x: np.sum(pb.nn.softplus(x, beta, threshold)), x)
                _, t = pb.jvp(lambda x: pb.nn.softplus(x, beta, threshold), (x,), (np.ones_like(x),))
            np.testing.assert_array_equal(y, np.where(x > 0, x, 0))
            np.testing.assert_array_equal(g, np.array([0, 0, 1, 1], dtype=dtype))
            np.testing.assert_array_equal(t, g)


def test_softplus_refuses_beta_zero():
    with pytest.raises(ValueError, match="beta must not be 0"):
        pb.nn.softplus(np.ones(2), beta=0.0)


# --- cross-entropy: weight, ignore_index, label_smoothing ----------------------------------------------

rng = np.random.default_rng(11)
LOGITS = rng.standard_normal((7, 5)) * 2
LABELS = np.array([0, 3, 4, -100, 2, 3, 1])
WEIGHT = rng.uniform(0.2, 2.0, 5)
SOFT = rng.dirichlet(np.ones(5), size=7)
OPTIONS = [{}, {"weight": WEIGHT}, {"label_smoothing": 0.3}, {"weight": WEIGHT, "label_smoothing": 0.3},
           {"label_smoothing": 1.0}]


def _torch_options(torch, options):
    return {k: torch.tensor(v) if k == "weight" else v for k, v in options.items()}


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("agg", ["mean", "sum", "none"])
@pytest.mark.parametrize("targets", ["labels", "ignored labels", "probabilities"])
def test_logitcrossentropy_options_match_torch(options, agg, targets):
    torch = pytest.importorskip("torch")
    y = {"labels": np.where(LABELS < 0, 1, LABELS), "ignored labels": LABELS, "probabilities": SOFT}[targets]
    ours = dict(options, **({"ignore_index": -100} if targets == "ignored labels" else {}))
    z = torch.tensor(LOGITS, requires_grad=True)
    expected = torch.nn.functional.cross_entropy(z, torch.tensor(y), reduction=agg, **_torch_options(torch, options))
    expected.sum().backward()
    got = pb.nn.logitcrossentropy(LOGITS, y, agg=agg, **ours)
    (g,) = pb.gradient(lambda z: np.sum(pb.nn.logitcrossentropy(z, y, agg=agg, **ours)), LOGITS)
    np.testing.assert_allclose(got, expected.detach().numpy(), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(g, z.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_logitcrossentropy_options_along_another_axis_and_in_float32_match_torch():
    torch = pytest.importorskip("torch")
    z = rng.standard_normal((3, 4, 6))
    labels = rng.integers(0, 4, (3, 6))
    labels[0, 2] = labels[2, 5] = 7
    weight = rng.uniform(0.5, 2.0, 4)
    options = {"weight": weight, "ignore_index": 7, "label_smoothing": 0.2}
    expected = torch.nn.functional.cross_entropy(torch.tensor(z), torch.tensor(labels), weight=torch.tensor(weight),
                                                 ignore_index=7, label_smoothing=0.2)
    assert pb.nn.logitcrossentropy(z, labels, axis=1, **options) == pytest.approx(expected.item(), rel=1e-13)
    z32 = z.astype(np.float32)
    got = pb.nn.logitcrossentropy(z32, labels, axis=1, **options)
    (g,) = pb.gradient(lambda z: pb.nn.logitcrossentropy(z, labels, axis=1, **options), z32)
    assert got.dtype == g.dtype == np.float32
    assert float(got) == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("options", OPTIONS[1:])
def test_crossentropy_of_probabilities_matches_torch_on_their_logarithm(options):
    torch = pytest.importorskip("torch")
    p = rng.dirichlet(np.ones(5), size=7)  # normalised, so log_softmax(log p) is log p
    expected = torch.nn.functional.cross_entropy(torch.log(torch.tensor(p)), torch.tensor(LABELS), ignore_index=-100,
                                                 **_torch_options(torch, options))
    got = pb.nn.crossentropy(p, LABELS, eps=0.0, ignore_index=-100, **options)
    assert got == pytest.approx(expected.item(), rel=1e-13)


def _losses_by_hand(log_p, labels, weight, ignore_index, smoothing):
    """PyTorch's per-sample losses and the divisor of its mean, one sample at a time."""
    classes = log_p.shape[1]
    w = np.ones(classes) if weight is None else weight
    losses, total = [], 0.0
    for row, label in zip(log_p, labels):
        if label == ignore_index:
            losses.append(0.0)
            continue
        nll = -w[label] * row[label]
        spread = -sum(w[c] * row[c] for c in range(classes))
        losses.append((1 - smoothing) * nll + smoothing / classes * spread)
        total += w[label]
    return np.array(losses), total


@pytest.mark.parametrize("options", OPTIONS)
def test_label_losses_follow_torchs_definitions_by_hand(options):
    weight, smoothing = options.get("weight"), options.get("label_smoothing", 0.0)
    log_p = LOGITS - np.log(np.sum(np.exp(LOGITS), axis=1, keepdims=True))
    losses, total = _losses_by_hand(log_p, LABELS, weight, -100, smoothing)
    f = pb.nn.logitcrossentropy
    np.testing.assert_allclose(f(LOGITS, LABELS, ignore_index=-100, agg="none", **options), losses, rtol=1e-13, atol=1e-15)
    assert f(LOGITS, LABELS, ignore_index=-100, **options) == pytest.approx(np.sum(losses) / total, rel=1e-13)
    assert f(LOGITS, LABELS, ignore_index=-100, agg="sum", **options) == pytest.approx(np.sum(losses), rel=1e-13)
    assert_gradient(lambda z: f(z, LABELS, ignore_index=-100, **options), LOGITS, **GRADIENT_CHECK)
    p = np.exp(log_p)
    assert_gradient(lambda p: pb.nn.crossentropy(p, LABELS, ignore_index=-100, **options), p, **GRADIENT_CHECK)


@pytest.mark.parametrize("options", OPTIONS)
def test_probability_targets_follow_torchs_definitions_by_hand(options):
    weight, smoothing = options.get("weight", np.ones(5)), options.get("label_smoothing", 0.0)
    log_p = LOGITS - np.log(np.sum(np.exp(LOGITS), axis=1, keepdims=True))
    smoothed = SOFT * (1 - smoothing) + smoothing / 5
    losses = np.array([-sum(weight[c] * smoothed[i, c] * log_p[i, c] for c in range(5)) for i in range(7)])
    f = pb.nn.logitcrossentropy
    np.testing.assert_allclose(f(LOGITS, SOFT, agg="none", **options), losses, rtol=1e-13)
    assert f(LOGITS, SOFT, **options) == pytest.approx(np.mean(losses), rel=1e-13)  # per sample, weighted or not
    assert_gradient(lambda z, y: f(z, y, **options), LOGITS, SOFT, **GRADIENT_CHECK)


def test_ignored_samples_keep_the_loss_and_gradient_finite_where_theirs_would_not_be():
    # a probability of 0 at an ignored sample's (any) class and eps = 0: log 0 never reaches the result
    p = np.array([[0.2, 0.8], [0.0, 0.0]])
    value = pb.nn.crossentropy(p, np.array([1, 5]), eps=0.0, ignore_index=5)
    (g,) = pb.gradient(lambda p: pb.nn.crossentropy(p, np.array([1, 5]), eps=0.0, ignore_index=5), p)
    assert value == pytest.approx(-math.log(0.8), rel=1e-15)
    np.testing.assert_array_equal(g, [[0.0, -1 / 0.8], [0.0, 0.0]])


def test_all_ignored_mean_is_nan_as_in_torch():
    with np.errstate(invalid="ignore"):
        assert np.isnan(pb.nn.logitcrossentropy(LOGITS[:2], np.array([-1, -1]), ignore_index=-1))
        assert pb.nn.logitcrossentropy(LOGITS[:2], np.array([-1, -1]), ignore_index=-1, agg="sum") == 0.0
    torch = pytest.importorskip("torch")
    assert torch.isnan(torch.nn.functional.cross_entropy(torch.tensor(LOGITS[:2]), torch.tensor([-1, -1]),
                                                         ignore_index=-1))


def test_options_work_in_forward_mode_and_under_jit():
    options = {"weight": WEIGHT, "ignore_index": -100, "label_smoothing": 0.2}
    loss = lambda z, y: pb.nn.logitcrossentropy(z, y, **options)  # noqa: E731
    tangent = rng.standard_normal(LOGITS.shape)
    (g,) = pb.gradient(lambda z: loss(z, LABELS), LOGITS)
    assert pb.jvp(lambda z: loss(z, LABELS), (LOGITS,), (tangent,))[1] == pytest.approx(np.sum(g * tangent), rel=1e-12)
    jitted, jitted_grad = pb.jit(loss), pb.jit(pb.grad(loss))
    for labels in (LABELS, np.array([-100, 1, 1, 0, -100, 4, 2])):
        assert jitted(LOGITS, labels) == loss(LOGITS, labels)
        np.testing.assert_array_equal(jitted_grad(LOGITS, labels), pb.gradient(lambda z: loss(z, labels), LOGITS)[0])


def test_float64_weight_keeps_float32_losses():
    z = LOGITS.astype(np.float32)
    assert pb.nn.logitcrossentropy(z, LABELS, weight=WEIGHT, ignore_index=-100).dtype == np.float32
    assert pb.nn.crossentropy(pb.nn.softmax(z), SOFT.astype(np.float32), weight=list(WEIGHT)).dtype == np.float32


@pytest.mark.parametrize("smoothing", [-0.1, 1.5, math.nan])
def test_label_smoothing_outside_zero_to_one_is_refused(smoothing):
    for loss in (pb.nn.logitcrossentropy, pb.nn.crossentropy):
        with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\]"):
            loss(SOFT, LABELS.clip(0), label_smoothing=smoothing)


@pytest.mark.parametrize("shape", [(4,), (6,), (1, 5), ()])
def test_weight_of_the_wrong_shape_is_refused(shape):
    with pytest.raises(ValueError, match=r"weight must hold one number per class, shape \(5,\)"):
        pb.nn.logitcrossentropy(LOGITS, LABELS.clip(0), weight=np.ones(shape))


def test_ignore_index_with_probability_targets_is_refused_as_torch_refuses_it():
    with pytest.raises(ValueError, match="ignore_index=0 applies to integer labels"):
        pb.nn.logitcrossentropy(LOGITS, SOFT, ignore_index=0)
    onehot = np.eye(5, dtype=np.int64)[LABELS.clip(0)]
    with pytest.raises(ValueError, match="ignore_index=2 applies to integer labels"):
        pb.nn.crossentropy(SOFT, onehot, ignore_index=2)
    # a negative one matches no class (PyTorch's default is -100)
    assert pb.nn.logitcrossentropy(LOGITS, SOFT, ignore_index=-100) == pb.nn.logitcrossentropy(LOGITS, SOFT)
    with pytest.raises(TypeError, match="ignore_index must be an integer"):
        pb.nn.logitcrossentropy(LOGITS, LABELS, ignore_index=-100.0)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="ignore_index"):
        torch.nn.functional.cross_entropy(torch.tensor(LOGITS), torch.tensor(SOFT), ignore_index=0)


def test_labels_out_of_range_name_ignore_index():
    with pytest.raises(ValueError, match="pass ignore_index"):
        pb.nn.logitcrossentropy(LOGITS, LABELS)
    with pytest.raises(ValueError, match="or be -1"):
        pb.nn.logitcrossentropy(LOGITS, LABELS, ignore_index=-1)
