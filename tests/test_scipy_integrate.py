"""pullback.scipy.integrate: odeint and solve_ivp return SciPy's own values, and their derivatives
(the adjoint in reverse mode, the tangent equation in forward mode) agree with closed forms and
with float64 central differences of SciPy's solutions at tight tolerances."""

import warnings

import numpy as np
import pytest

import pullback as pb

si = pytest.importorskip("scipy.integrate")
sl = pytest.importorskip("scipy.linalg")
from pullback.scipy import integrate  # noqa: E402

TIGHT = dict(rtol=1e-10, atol=1e-10)


def central(f, x, rel=1e-6):
    """d f / d x by central differences, each element stepped by rel * max(|x_i|, 1)."""
    x = np.asarray(x, dtype=float)
    grad = np.zeros(x.shape)
    for i in range(x.size):
        h = rel * max(abs(x.flat[i]), 1.0)
        up, down = x.copy(), x.copy()
        up.flat[i] += h
        down.flat[i] -= h
        grad.flat[i] = (f(up) - f(down)) / (2 * h)
    return grad


def close(got, want, rtol=1e-6, atol=1e-8):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def decay(y, t, k):
    return -k * y


def linear(t, y, a):
    return a @ y


def lotka_volterra(t, y, a, b, c, d):
    return [a * y[0] - b * y[0] * y[1], -c * y[1] + d * y[0] * y[1]]


def robertson(t, y, rates):
    k1, k2, k3 = rates
    return np.stack([-k1 * y[0] + k3 * y[1] * y[2], k1 * y[0] - k2 * y[1] ** 2 - k3 * y[1] * y[2], k2 * y[1] ** 2])


def van_der_pol(y, t, mu):
    return np.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])


LV_Y0, LV_ARGS = np.array([10.0, 5.0]), (1.5, 1.0, 3.0, 1.0)


# --- values -------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["RK45", "DOP853", "Radau", "BDF", "LSODA"])
def test_solve_ivp_under_differentiation_returns_scipys_result(method):
    t_eval = np.linspace(0.0, 2.0, 5)
    want = si.solve_ivp(lotka_volterra, (0.0, 2.0), LV_Y0, method, t_eval, args=LV_ARGS, rtol=1e-6)
    seen = {}

    def loss(y0):
        seen["sol"] = integrate.solve_ivp(lotka_volterra, (0.0, 2.0), y0, method, t_eval, args=LV_ARGS, rtol=1e-6)
        return np.sum(seen["sol"].y)

    pb.gradient(loss, LV_Y0)
    sol = seen["sol"]
    assert type(sol) is type(want) and sol.sol is None
    np.testing.assert_array_equal(pb.stop_gradient(sol.y), want.y)
    np.testing.assert_array_equal(pb.stop_gradient(sol.t), want.t)
    assert (sol.success, sol.message, sol.status, sol.nfev) == (want.success, want.message, want.status, want.nfev)


def test_odeint_under_differentiation_returns_scipys_values_and_info():
    t = np.linspace(0.0, 2.0, 5)
    want, want_info = si.odeint(lotka_volterra, LV_Y0, t, LV_ARGS, full_output=True, tfirst=True)
    def run(y0):
        return integrate.odeint(lotka_volterra, y0, t, LV_ARGS, full_output=1, tfirst=True)

    (y, info), _ = pb.pullback(run, LV_Y0)
    np.testing.assert_array_equal(y, want)
    assert info["message"] == want_info["message"] and np.array_equal(info["nfe"], want_info["nfe"])


def test_plain_inputs_call_scipy_itself():
    t = np.linspace(0.0, 1.0, 3)
    want = si.odeint(decay, [1.0, 2.0], t, (0.5,))
    np.testing.assert_array_equal(integrate.odeint(decay, [1.0, 2.0], t, (0.5,)), want)
    sol = integrate.solve_ivp(linear, (0.0, 1.0), [1.0, 0.0], args=(np.eye(2),), dense_output=True)
    want = si.solve_ivp(linear, (0.0, 1.0), [1.0, 0.0], args=(np.eye(2),))
    assert sol.sol is not None and np.array_equal(sol.y, want.y)


# --- reverse mode against closed forms and central differences -------------------------------
def test_exponential_decay_matches_closed_form_and_differences():
    y0, t, k, w = np.array([1.0, 2.0]), np.array([0.5, 1.0, 1.7, 3.0]), 0.8, np.array([[1.0], [-2.0], [0.5], [3.0]])

    def loss(y0, t, k):
        return np.sum(w * integrate.odeint(decay, y0, t, (k,), **TIGHT))

    gy0, gt, gk = pb.gradient(loss, y0, t, k)
    e = np.exp(-k * (t - t[0]))[:, None]
    y = y0 * e
    close(gy0, np.full(2, np.sum(w * e)))
    close(gk, np.sum(-w * (t - t[0])[:, None] * y))
    dt = np.sum(-k * w * y, axis=1)
    close(gt, np.concatenate([[-np.sum(dt[1:])], dt[1:]]))

    def scipy_loss(y0, t, k):
        return np.sum(w * si.odeint(decay, y0, t, (k,), **TIGHT))

    close(gy0, central(lambda v: scipy_loss(v, t, k), y0))
    close(gt, central(lambda v: scipy_loss(y0, v, k), t), atol=1e-7)
    close(gk, central(lambda v: scipy_loss(y0, t, float(v[0])), [k]))


def test_linear_system_matches_matrix_exponential_and_differences():
    rng = np.random.default_rng(0)
    a, y0, w = rng.normal(size=(3, 3)) / 2 - np.eye(3), rng.normal(size=3), rng.normal(size=(3, 3))
    t0, t_eval = 0.2, np.array([0.5, 1.0, 1.5])

    def loss(y0, a, t0, t_eval):
        sol = integrate.solve_ivp(linear, (t0, 1.5), y0, "DOP853", t_eval, args=(a,), **TIGHT)
        return np.sum(w * sol.y)

    gy0, ga, gt0, gte = pb.gradient(loss, y0, a, t0, t_eval)
    flows = [sl.expm(a * (s - t0)) for s in t_eval]
    close(gy0, sum(m.T @ w[:, k] for k, m in enumerate(flows)))
    close(gte, [w[:, k] @ a @ m @ y0 for k, m in enumerate(flows)])
    close(gt0, -sum(w[:, k] @ m @ a @ y0 for k, m in enumerate(flows)))

    def scipy_loss(a):
        return np.sum(w * si.solve_ivp(linear, (t0, 1.5), y0, "DOP853", t_eval, args=(a,), **TIGHT).y)

    close(ga, central(scipy_loss, a))


@pytest.mark.parametrize("solver", ["RK45", "DOP853", "odeint"])
def test_lotka_volterra_against_differences(solver):
    times = np.array([0.0, 0.4, 1.1, 2.0])
    w = np.array([[1.0, 0.5], [-0.3, 2.0], [0.7, 0.1], [1.0, -1.0]])

    def run(module, y0, params, times):
        if solver == "odeint":
            return module.odeint(lotka_volterra, y0, times, tuple(params), tfirst=True, **TIGHT)
        return module.solve_ivp(lotka_volterra, (0.0, 2.5), y0, solver, times, args=tuple(params), **TIGHT).y.T

    def loss(y0, a, b, c, d, times):
        return np.sum(w * run(integrate, y0, (a, b, c, d), times))

    def scipy_loss(y0=LV_Y0, params=LV_ARGS, times=times):
        return np.sum(w * run(si, y0, params, times))

    grads = pb.gradient(loss, LV_Y0, *LV_ARGS, times)
    close(grads[0], central(lambda v: scipy_loss(y0=v), LV_Y0))
    close(np.array(grads[1:5]), central(lambda v: scipy_loss(params=tuple(v)), LV_ARGS))
    if solver == "odeint":  # times[0] is the start: it moves every output
        close(grads[5], central(lambda v: scipy_loss(times=v), times))
    else:  # t_span stays put, so only the output times move (the first sits on the start)
        close(grads[5][1:], central(lambda v: scipy_loss(times=np.concatenate([[0.0], v])), times[1:]))


def test_final_time_and_start_time_of_t_span():
    def final(t0, t1, y0):
        sol = integrate.solve_ivp(lotka_volterra, (t0, t1), y0, "DOP853", args=LV_ARGS, **TIGHT)
        return sol.y[:, -1] @ np.array([1.0, 2.0])

    def scipy_final(t0, t1):
        sol = si.solve_ivp(lotka_volterra, (t0, t1), LV_Y0, "DOP853", args=LV_ARGS, **TIGHT)
        return sol.y[:, -1] @ np.array([1.0, 2.0])

    g0, g1, _ = pb.gradient(final, 0.1, 1.3, LV_Y0)
    end = si.solve_ivp(lotka_volterra, (0.1, 1.3), LV_Y0, "DOP853", args=LV_ARGS, **TIGHT).y[:, -1]
    close(g1, np.array(lotka_volterra(1.3, end, *LV_ARGS)) @ [1.0, 2.0])  # dy(T)/dT = f(y(T), T)
    close(g1, central(lambda v: scipy_final(0.1, v[0]), [1.3]))
    close(g0, central(lambda v: scipy_final(v[0], 1.3), [0.1]))


@pytest.mark.parametrize("method", ["Radau", "BDF"])
def test_stiff_robertson_with_an_implicit_method(method):
    y0, rates, w = np.array([1.0, 0.0, 0.0]), np.array([0.04, 3e7, 1e4]), np.array([1.0, 10.0, 2.0])

    def loss(y0, rates, t1):
        return integrate.solve_ivp(robertson, (0.0, t1), y0, method, args=(rates,), **TIGHT).y[:, -1] @ w

    def scipy_loss(y0=y0, rates=rates, t1=1.0):  # Radau's solution is smooth enough in its inputs to difference
        return si.solve_ivp(robertson, (0.0, t1), y0, "Radau", args=(rates,), **TIGHT).y[:, -1] @ w

    gy0, grates, gt1 = pb.gradient(loss, y0, rates, 1.0)
    close(gy0, central(lambda v: scipy_loss(y0=v), y0), rtol=1e-5)
    close(grates, central(lambda v: scipy_loss(rates=v), rates, rel=1e-5), rtol=1e-5, atol=1e-12)
    close(gt1, central(lambda v: scipy_loss(t1=v[0]), [1.0]), rtol=1e-5)


def test_stiff_van_der_pol_with_odeint():
    t, w = np.array([0.0, 0.25, 0.5]), np.array([1.0, 100.0])

    def loss(y0, mu):
        return np.sum(integrate.odeint(van_der_pol, y0, t, (mu,), **TIGHT)[1:] * w)

    gy0, gmu = pb.gradient(loss, np.array([2.0, 0.0]), 1000.0)
    for solve, atol in ((si.odeint, 1e-6), (None, 1e-9)):  # LSODA's output is noisy in y0 at the 1e-6 level

        def scipy_loss(y0=np.array([2.0, 0.0]), mu=1000.0):
            if solve is None:  # the same problem with Radau, whose output differences cleanly
                sol = si.solve_ivp(lambda s, y: van_der_pol(y, s, mu), (0.0, 0.5), y0, "Radau", t, **TIGHT)
                return np.sum(sol.y.T[1:] * w)
            return np.sum(solve(van_der_pol, y0, t, (mu,), **TIGHT)[1:] * w)

        close(gy0, central(lambda v: scipy_loss(y0=v), [2.0, 0.0], rel=1e-4), rtol=1e-6, atol=atol)
        close(gmu, central(lambda v: scipy_loss(mu=v[0]), [1000.0]), rtol=1e-5)


def test_gradient_keeps_the_argument_dtype():
    g = pb.gradient(lambda y0: integrate.odeint(decay, y0, [0.0, 1.0], (1.0,))[-1, 0], np.array([1.0], np.float32))[0]
    assert g.dtype == np.float32
    close(g, [np.exp(-1.0)], rtol=1e-6)


# --- forward mode ---------------------------------------------------------------------------
def test_jvp_of_odeint_matches_directional_differences():
    t = np.linspace(0.0, 2.0, 5)
    v_y0, v_t, v_a = np.array([0.3, -0.2]), np.array([0.1, 0.1, -0.2, 0.3, 0.5]), 0.7

    def scipy_run(y0, t, a):
        return si.odeint(lotka_volterra, y0, t, (a, 1.0, 3.0, 1.0), tfirst=True, **TIGHT)

    y, dy = pb.jvp(lambda y0, t, a: integrate.odeint(lotka_volterra, y0, t, (a, 1.0, 3.0, 1.0), tfirst=True, **TIGHT),
                   (LV_Y0, t, 1.5), (v_y0, v_t, v_a))
    np.testing.assert_array_equal(y, scipy_run(LV_Y0, t, 1.5))
    h = 1e-6
    up = scipy_run(LV_Y0 + h * v_y0, t + h * v_t, 1.5 + h * v_a)
    down = scipy_run(LV_Y0 - h * v_y0, t - h * v_t, 1.5 - h * v_a)
    fd = (up - down) / (2 * h)
    close(dy, fd, atol=1e-6)


def test_forward_and_reverse_jacobians_agree():
    rng = np.random.default_rng(1)
    a, y0 = rng.normal(size=(2, 2)) - np.eye(2), np.array([1.0, -1.0])
    t_eval = np.array([0.0, 0.5, 1.0])

    def trajectory(y0, t1):
        return integrate.solve_ivp(linear, (0.0, t1), y0, "DOP853", t_eval, args=(a,), **TIGHT).y

    forward = pb.jacobian(lambda y0: trajectory(y0, 1.0), y0)[0]  # 2 inputs, 6 outputs: forward mode
    want = np.stack([sl.expm(a * s) for s in t_eval], axis=1)  # dy(s)/dy0 = expm(a s)
    close(forward, want)
    reverse = np.stack([pb.gradient(lambda y0: trajectory(y0, 1.0)[i, k], y0)[0] for i in range(2) for k in range(3)])
    close(reverse.reshape(2, 3, 2), want)
    def end(t1):  # without t_eval: the last output follows t_span[1]
        return integrate.solve_ivp(linear, (0.0, t1), y0, "DOP853", args=(a,), **TIGHT).y[:, -1]

    _, d_end = pb.jvp(end, (1.0,), (1.0,))
    close(d_end, a @ sl.expm(a) @ y0)


# --- complex states -----------------------------------------------------------------------------
def test_solve_ivp_complex_state_jvp_and_vjp():
    """y' = i y, y(1) = y0 exp(i): holomorphic and linear in y0, so J = exp(i), and the pullback of
    a holomorphic map is c * f'(z) (JAX's convention). The tangents once were cast to float."""

    def f(y0):
        return integrate.solve_ivp(lambda t, y: 1j * y, (0.0, 1.0), y0, rtol=1e-11, atol=1e-11).y[:, -1]

    y0 = np.array([1.0 + 0.5j])
    with warnings.catch_warnings():
        warnings.simplefilter("error", np.exceptions.ComplexWarning)
        close(f(y0), y0 * np.exp(1j), rtol=1e-8)
        for v in (np.array([1.0 + 0j]), np.array([1j])):
            close(pb.jvp(f, (y0,), (v,))[1], np.exp(1j) * v)
        _, back = pb.vjp(f, y0)
        for u in (np.array([1.0 + 0j]), np.array([1j])):
            close(back(u)[0], u * np.exp(1j))


def test_solve_ivp_complex_state_gradient_in_real_parameter():
    """y' = i w y, y(0) = 1: d y(1) / dw = i exp(i w); at w = 1 the real cotangent 1 gives
    Re(i exp(i)) = -sin(1), a real gradient for the real w."""

    def f(w):
        sol = integrate.solve_ivp(lambda t, y, w: 1j * w * y, (0.0, 1.0), np.array([1.0 + 0j]), args=(w,),
                                  rtol=1e-11, atol=1e-11)
        return sol.y[:, -1]

    with warnings.catch_warnings():
        warnings.simplefilter("error", np.exceptions.ComplexWarning)
        close(pb.jvp(f, (1.0,), (1.0,))[1], 1j * np.exp(1j) * np.ones(1))
        g = pb.vjp(f, 1.0)[1](np.array([1.0 + 0j]))[0]
        assert isinstance(g, float)
        close(g, -np.sin(1.0))


@pytest.mark.parametrize("method", ["RK45", "DOP853"])
def test_solve_ivp_non_holomorphic_complex_dynamics_against_differences(method):
    """y' = -w conj(y) + i c y |reversed y| is not holomorphic: a real parameter w, complex c and y0;
    the gradient is dL/dx - i dL/dy for each complex input, and jvp takes complex tangents."""

    def f(y0, w, c):
        rhs = lambda t, y, w, c: -w * np.conj(y) + 1j * c * y * np.abs(y[::-1])  # noqa: E731
        return integrate.solve_ivp(rhs, (0.0, 1.0), y0, method, t_eval=np.array([0.5, 1.0]), args=(w, c),
                                   rtol=1e-11, atol=1e-11).y

    primals = [np.array([1.0 + 0.5j, -0.3 + 0.2j]), 0.7, np.array([0.4 - 0.2j, 0.1 + 0.3j])]
    rng = np.random.default_rng(0)
    u = rng.normal(size=(2, 2)) + 1j * rng.normal(size=(2, 2))

    def loss(*a):
        return np.real(np.sum(u * f(*a)))

    def along(k, step):
        return lambda h: loss(*[p + h * step if i == k else p for i, p in enumerate(primals)])

    with warnings.catch_warnings():
        warnings.simplefilter("error", np.exceptions.ComplexWarning)
        g_y0, g_w, g_c = pb.gradient(loss, *primals)
        tangents = (np.array([0.3 - 0.1j, 0.2 + 0.5j]), 0.4, np.array([0.1j, -0.2]))
        y_dot = pb.jvp(f, tuple(primals), tangents)[1]
    for k, g in ((0, g_y0), (2, g_c)):
        for i in range(2):
            e = np.eye(2)[i]
            want = central(along(k, e), 0.0) - 1j * central(along(k, 1j * e), 0.0)
            close(g[i], want)
    close(g_w, central(along(1, 1.0), 0.0))
    h = 1e-6
    moved = [[p + s * h * d for p, d in zip(primals, tangents)] for s in (1, -1)]
    close(y_dot, (f(*moved[0]) - f(*moved[1])) / (2 * h))


def test_solve_ivp_complex_linear_system_with_bdf():
    """BDF integrates complex states too: y(2) = expm(2A) y0 for a complex A."""
    a = np.array([[-0.25 + 0.14j, 0, 0.33 + 0.44j], [0.25 + 0.58j, -0.2 + 0.14j, 0], [0, 0.2 + 0.4j, -0.1 + 0.97j]])

    def final(y0):
        return integrate.solve_ivp(linear, (0.0, 2.0), y0, "BDF", args=(a,), rtol=1e-10, atol=1e-12).y[:, -1]

    y0, u, v = np.array([1, 1j, 0.5 + 0j]), np.array([1.0, 1j, 2 - 1j]), np.array([1j, 0, 1])
    close(pb.vjp(final, y0)[1](u)[0], u @ sl.expm(2 * a), rtol=1e-7)
    close(pb.jvp(final, (y0,), (v,))[1], sl.expm(2 * a) @ v, rtol=1e-7)


# --- what is refused --------------------------------------------------------------------------
def test_second_derivatives_are_refused_clearly():
    with pytest.raises(NotImplementedError, match="differentiable once"):
        pb.hessian(lambda y0: np.sum(integrate.odeint(decay, y0, [0.0, 1.0], (1.0,))), np.array([1.0]))


def test_events_dense_output_and_hidden_parameters_are_refused_clearly():
    def final(y0, **options):
        return integrate.solve_ivp(linear, (0.0, 1.0), y0, args=(np.eye(1),), **options).y[0, -1]

    with pytest.raises(NotImplementedError, match="events cannot be differentiated.*t_eval"):
        pb.gradient(lambda y0: final(y0, events=lambda t, y, a: y[0] - 2), np.array([1.0]))
    with pytest.raises(NotImplementedError, match="dense_output"):
        pb.gradient(lambda y0: final(y0, dense_output=True), np.array([1.0]))
    with pytest.raises(TypeError, match=r"args\[0\] is a list holding tracked values"):
        pb.gradient(lambda k: integrate.odeint(decay, [1.0], [0.0, 1.0], ([k],))[-1, 0], 1.0)
    with pytest.raises(TypeError, match="args must be a tuple"):
        pb.gradient(lambda k: integrate.odeint(decay, [1.0], [0.0, 1.0], k)[-1, 0], 1.0)


def test_a_failed_solve_has_no_derivative():
    def blow_up(t, y):
        return y ** 2

    with pytest.raises(RuntimeError, match="did not succeed"):
        pb.gradient(lambda y0: integrate.solve_ivp(blow_up, (0.0, 2.0), y0).y[0, -1], np.array([1.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="did not succeed.*Excess work"):
            pb.gradient(lambda y0: integrate.odeint(decay, y0, [0.0, 100.0], (1.0,), mxstep=3)[-1, 0], np.array([1.0]))


def test_a_right_hand_side_closing_over_a_tracked_value_is_told_to_use_args():
    """SciPy calls the right-hand side on plain values, so a traced result comes from a closure; the
    error names args= (it once told the user of pullback's solve_ivp to use pullback's solve_ivp)."""

    def closed(k):
        return integrate.solve_ivp(lambda t, y: -k * y, (0.0, 1.0), np.array([1.0])).y[0, -1]

    with pytest.raises(TypeError, match="solve_ivp: the right-hand side.*closure.*args=") as info:
        pb.gradient(closed, 0.8)
    assert "instead" not in str(info.value)
    with pytest.raises(TypeError, match="odeint: the right-hand side.*args="):
        pb.jvp(lambda k: integrate.odeint(lambda y, t: -k * y, np.array([1.0]), [0.0, 1.0]), (0.8,), (1.0,))
    with pytest.raises(TypeError, match="solve_ivp: the right-hand side.*args="):
        pb.gradient(lambda k, y0: integrate.solve_ivp(lambda t, y: -k * y, (0.0, 1.0), y0).y[0, -1], 0.8,
                    np.array([1.0]))
