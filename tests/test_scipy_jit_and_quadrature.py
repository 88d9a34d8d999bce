"""SciPy stand-ins inside pb.jit (traced once, replayed on new values, equal to eager), edge inputs of logsumexp,
and the quadrature stand-ins (quad, trapezoid, cumulative_trapezoid, simpson)."""

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient

sci = pytest.importorskip("scipy.integrate")
spl = pytest.importorskip("scipy.linalg")
sps = pytest.importorskip("scipy.special")
sst = pytest.importorskip("scipy.stats")
from pullback.scipy import integrate, linalg, signal, special, stats  # noqa: E402
from pullback.scipy.spatial import distance  # noqa: E402

RNG = np.random.default_rng(7)
A1, A2 = RNG.standard_normal((3, 3)), RNG.standard_normal((3, 3))
S1, S2 = A1 @ A1.T + 3 * np.eye(3), A2 @ A2.T + 3 * np.eye(3)
V1, V2 = RNG.standard_normal(3), RNG.standard_normal(3)


def _assert_same(eager, compiled):
    eager_leaves, compiled_leaves = pb.tree.leaves(eager), pb.tree.leaves(compiled)
    assert len(eager_leaves) == len(compiled_leaves)
    for e, c in zip(eager_leaves, compiled_leaves):
        if e is None:
            assert c is None
            continue
        assert np.asarray(c).dtype == np.asarray(e).dtype
        np.testing.assert_allclose(c, e, rtol=1e-12, atol=0)


def _replays_like_eager(f, *argument_sets, traces=1):
    compiled = pb.jit(f)
    for args in argument_sets:
        _assert_same(f(*args), compiled(*args))
    assert compiled.cache_info().traces == traces
    return compiled


def _value_and_gradient(f):
    return lambda *args: pb.withgradient(lambda *a: np.sum(f(*a)), *args)


JIT_CASES = {
    "logsumexp b": (lambda a, b: special.logsumexp(a, b=b), [(V1, V2 ** 2), (V2, V1 ** 2)]),
    "logsumexp sign": (lambda a, b: special.logsumexp(a, b=b, return_sign=True)[0], [(V1, V2), (V2, -V1)]),
    "softmax": (lambda a: special.softmax(a) ** 2, [(V1,), (V2,)]),
    "log_softmax axis": (lambda a: special.log_softmax(a, axis=0) * A1, [(A1,), (A2,)]),
    "multigammaln": (lambda a: special.multigammaln(a, 3), [(V1 ** 2 + 2,), (V2 ** 2 + 2,)]),
    "spherical_jn": (lambda z: special.spherical_jn(2, z), [(V1 ** 2 + 2,), (V2 ** 2 + 2,)]),
    "gammainc in a": (lambda a, x: sps.gammainc(a, x), [(V1 ** 2 + 0.5, V2 ** 2), (V2 ** 2 + 0.5, V1 ** 2)]),
    "betaincinv": (lambda a, b: sps.betaincinv(a, b, 0.3), [(V1 ** 2 + 0.5, V2 ** 2 + 1), (V2 ** 2 + 0.5, V1 ** 2 + 1)]),
    "zeta in s": (lambda s: sps.zeta(s, 1.5), [(V1 ** 2 + 2,), (V2 ** 2 + 2,)]),
    "solve pos": (lambda a, b: linalg.solve(a, b, assume_a="pos"), [(S1, V1), (S2, V2)]),
    "inv": (lambda a: linalg.inv(a), [(A1,), (A2,)]),
    "det": (lambda a: linalg.det(a), [(A1,), (A2,)]),
    "sqrtm": (lambda a: linalg.sqrtm(a), [(S1,), (S2,)]),
    "eigh": (lambda a: linalg.eigh(a)[0], [(S1,), (S2,)]),
    "svd": (lambda a: linalg.svd(a)[0] * linalg.svd(a)[1], [(A1,), (A2,)]),
    "fftconvolve same": (lambda a, b: signal.fftconvolve(a, b, mode="same"), [(V1, V2), (V2, V1)]),
    "correlate valid": (lambda a, b: signal.correlate(a, b, mode="valid"), [(V1, V2), (V2, V1)]),
    "lfilter": (lambda b, x: signal.lfilter(b, [1.0, -0.5], x), [(V1, V2), (V2, V1)]),
    "cdist cityblock": (lambda a, b: distance.cdist(a, b, "cityblock"), [(A1, A2), (A2, A1)]),
    "pdist": (lambda a: distance.pdist(a), [(A1,), (A2,)]),
    "norm.logpdf loc scale": (lambda x, m: stats.norm.logpdf(x, m, 2.0), [(V1, V2), (V2, V1)]),
    "gamma.cdf in a": (lambda x, a: stats.gamma.cdf(x, a), [(V1 ** 2 + 0.1, V2 ** 2 + 0.5), (V2 ** 2, V1 ** 2 + 0.5)]),
    "vonmises.cdf in kappa": (lambda x, k: stats.vonmises.cdf(x, k), [(V1, V2 ** 2 + 0.5), (V2, V1 ** 2 + 0.5)]),
    "beta.logpdf": (lambda x, a: stats.beta.logpdf(x, a, 2.0), [(V1 ** 2 / 10, np.array(1.5)), (V2 ** 2 / 10, np.array(2.5))]),
    "multivariate_normal": (lambda x, m: stats.multivariate_normal.logpdf(x, m, S1), [(V1, V2), (V2, V1)]),
}


@pytest.mark.parametrize("name", sorted(JIT_CASES))
def test_scipy_standins_replay_under_jit_as_eager(name):
    f, argument_sets = JIT_CASES[name]
    _replays_like_eager(f, *argument_sets)


@pytest.mark.parametrize("name", sorted(JIT_CASES))
def test_scipy_gradients_replay_under_jit_as_eager(name):
    f, argument_sets = JIT_CASES[name]
    _replays_like_eager(_value_and_gradient(f), *argument_sets)


def test_jit_replays_scipys_own_values_bit_for_bit():
    compiled = pb.jit(lambda a: (special.logsumexp(a), stats.norm.cdf(a), linalg.expm(np.outer(a, a))))
    compiled(V1)
    value = compiled(V2)
    assert value[0] == sps.logsumexp(V2)
    assert np.array_equal(value[1], sst.norm.cdf(V2))
    assert np.array_equal(value[2], spl.expm(np.outer(V2, V2)))


def test_jit_guards_branches_of_stats_on_values():
    # the first call is inside the support everywhere, the second outside it in places: a guard traces again
    f = _value_and_gradient(lambda x, a: stats.gamma.logpdf(x, a))
    inside, outside = (np.array([0.5, 1.0, 2.0]), 1.7), (np.array([-0.5, 1.0, 2.0]), 1.7)
    compiled = _replays_like_eager(f, inside, outside, inside, outside, traces=2)
    assert compiled.cache_info().replays == 2


def test_jit_gradient_of_solve_matches_finite_differences():
    compiled = pb.jit(lambda a, b: pb.gradient(lambda a, b: np.sum(linalg.solve(a, b) ** 2), a, b))
    for a, b in ((A1, V1), (A2, V2)):
        ga, gb = compiled(a, b)
        na, nb = numerical_gradient(lambda a, b: np.sum(spl.solve(a, b) ** 2), a, b)
        np.testing.assert_allclose(ga, na, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gb, nb, rtol=1e-6, atol=1e-8)


def test_jit_leaves_overwrite_a_inputs_unchanged():
    a = A1.copy()
    compiled = pb.jit(lambda a, b: linalg.solve(a, b, overwrite_a=True))
    for _ in range(2):
        np.testing.assert_allclose(compiled(a, V1), spl.solve(A1, V1), rtol=1e-12)
    assert np.array_equal(a, A1)


def test_logm_inside_jit_is_refused_naming_the_function():
    # SciPy's logm draws from NumPy's global generator, which a replay cannot repeat
    with pytest.raises(pb.JitError, match="pullback.scipy.linalg.logm inside pb.jit.*outside the jitted function"):
        pb.jit(linalg.logm)(S1)


def test_solve_ivp_inside_jit_is_refused_naming_the_function():
    with pytest.raises(pb.JitError, match="solve_ivp inside pb.jit returned an object of type OdeResult"):
        pb.jit(lambda y0: integrate.solve_ivp(lambda t, y: -y, (0.0, 1.0), y0).y)(np.array([1.0]))
    with pytest.raises(pb.JitError, match="integrate.odeint: its derivatives cannot be compiled by pb.jit"):
        pb.jit(lambda y0: pb.gradient(lambda y: integrate.odeint(lambda y, t: -y, y, np.array([0.0, 1.0]))[-1, 0],
                                      y0))(np.array([1.0]))


def test_odeint_without_derivatives_replays_under_jit():
    times = np.array([0.0, 0.5, 1.0])
    _replays_like_eager(lambda y0: integrate.odeint(lambda y, t: -y * t, y0, times), (np.array([1.0]),),
                        (np.array([2.5]),))


def test_cdist_out_inside_jit_is_refused():
    out = np.zeros((3, 3))
    with pytest.raises(TypeError, match="cdist: out= is not supported inside pb.jit"):
        pb.jit(lambda a: distance.cdist(a, a, out=out))(A1)


def test_logsumexp_of_an_empty_array_is_scipys_minus_infinity():
    value, (g,) = pb.withgradient(lambda a: special.logsumexp(a), np.zeros(0))
    assert value == sps.logsumexp(np.zeros(0)) == -np.inf
    assert g.shape == (0,)
    value, _ = pb.withgradient(lambda a: np.sum(special.logsumexp(a, axis=0)), np.zeros((0, 3)))
    assert value == -np.inf


def test_logsumexp_and_softmax_of_a_list_of_traced_values():
    f = lambda a: special.logsumexp([a, 2.0 * a, 1.0])  # noqa: E731
    value, (g,) = pb.withgradient(f, 0.5)
    assert value == sps.logsumexp([0.5, 1.0, 1.0])
    assert np.isclose(g, numerical_gradient(lambda a: sps.logsumexp([a, 2.0 * a, 1.0]), 0.5)[0], rtol=1e-7)
    (g,) = pb.gradient(lambda a: special.softmax((a, 2.0 * a))[0], 0.5)
    assert np.isclose(g, numerical_gradient(lambda a: sps.softmax([a, 2.0 * a])[0], 0.5)[0], rtol=1e-7)


Y, X = np.array([0.3, 1.2, 2.5, 0.7, 1.1]), np.array([0.0, 0.5, 1.5, 2.0, 2.2])
SAMPLED = {
    "trapezoid in y and x": (integrate.trapezoid, sci.trapezoid, lambda y, x: ((y, x), {})),
    "trapezoid in dx": (integrate.trapezoid, sci.trapezoid, lambda y, x: ((y,), {"dx": x[1] + 0.3})),
    "cumulative_trapezoid in y and x": (integrate.cumulative_trapezoid, sci.cumulative_trapezoid,
                                        lambda y, x: ((y, x), {"initial": 0})),
    "cumulative_trapezoid along axis 0": (integrate.cumulative_trapezoid, sci.cumulative_trapezoid,
                                          lambda y, x: ((np.outer(y, x),), {"axis": 0})),
    "simpson in y, odd count": (integrate.simpson, sci.simpson, lambda y, x: ((y,), {"x": X})),
    "simpson in y, even count": (integrate.simpson, sci.simpson, lambda y, x: ((y[:4],), {"x": X[:4]})),
    "simpson in dx": (integrate.simpson, sci.simpson, lambda y, x: ((y,), {"dx": x[1] + 0.3})),
}


@pytest.mark.parametrize("name", sorted(SAMPLED))
def test_sampled_quadrature_values_are_scipys_and_gradients_match_finite_differences(name):
    ours, scipys, call = SAMPLED[name]

    def loss(fn):
        def f(y, x):
            args, kwargs = call(y, x)
            value = fn(*args, **kwargs)
            return np.sum(value * np.arange(1.0, np.size(value) + 1).reshape(np.shape(value)))
        return f

    args, kwargs = call(Y, X)
    expected = scipys(*args, **kwargs)
    value = ours(*args, **kwargs)
    assert np.array_equal(value, expected)
    traced_value, grads = pb.withgradient(loss(ours), Y, X)
    assert traced_value == loss(scipys)(Y, X)
    for g, n in zip(grads, numerical_gradient(loss(scipys), Y, X)):
        if g is None:
            assert np.all(n == 0)
        else:
            np.testing.assert_allclose(g, n, rtol=1e-6, atol=1e-8)


def test_sampled_quadrature_keeps_float32():
    y = Y.astype(np.float32)
    for fn in (integrate.trapezoid, integrate.simpson, lambda y: np.sum(integrate.cumulative_trapezoid(y))):
        (g,) = pb.gradient(fn, y)
        assert g.dtype == np.float32


def test_simpson_refuses_traced_sample_points_naming_the_fix():
    with pytest.raises(NotImplementedError, match="simpson: the sample points x cannot be differentiated.*trapezoid"):
        pb.gradient(lambda x: integrate.simpson(Y, x=x), X)


def test_sampled_quadrature_replays_under_jit_as_eager():
    def f(y, x):
        return pb.withgradient(lambda y: np.sum(integrate.cumulative_trapezoid(y, x) ** 2)
                               + integrate.trapezoid(y, x) + integrate.simpson(y, x=x), y)

    _replays_like_eager(f, (Y, X), (2 * Y, X + 1))


def _integrand(t, k, w):
    return np.exp(-k * t) * np.sum(w * t ** np.arange(2))


def test_quad_gradient_in_limits_and_args_matches_finite_differences():
    args = (0.2, 1.5, 0.7, np.array([1.0, 2.0]))
    ours = lambda a, b, k, w: integrate.quad(_integrand, a, b, args=(k, w))[0]  # noqa: E731
    theirs = lambda a, b, k, w: sci.quad(_integrand, a, b, args=(k, w))[0]  # noqa: E731
    value, grads = pb.withgradient(ours, *args)
    assert value == theirs(*args) and type(value) is float
    for g, n in zip(grads, numerical_gradient(theirs, *args)):
        np.testing.assert_allclose(g, n, rtol=1e-6)
    assert pb.check_gradient(ours, *args)


def test_quad_limit_derivatives_are_the_integrand_at_the_limits():
    (g,) = pb.gradient(lambda a: integrate.quad(lambda t: np.exp(-t * t), a, np.inf)[0], 0.5)
    assert np.isclose(g, -np.exp(-0.25), rtol=1e-12)
    _, tangent = pb.jvp(lambda b: integrate.quad(np.cos, 0.0, b)[0], (1.0,), (2.0,))
    assert np.isclose(tangent, 2.0 * np.cos(1.0), rtol=1e-12)


def test_quad_refuses_a_closure_and_second_derivatives_and_under_jit_gives_scipys_numbers():
    with pytest.raises(TypeError, match=r"quad: .*Pass that value through args="):
        pb.gradient(lambda k: integrate.quad(lambda t: k * t, 0.0, 1.0)[0], 2.0)
    with pytest.raises(NotImplementedError, match="quad is differentiable once"):
        pb.hessian(lambda b: integrate.quad(np.cos, 0.0, b)[0], 1.0)
    # its (value, error) are Python numbers: each is fixed by a guard, so a new bound traces again
    jitted = pb.jit(lambda b: integrate.quad(np.cos, 0.0, b))
    for b in (1.0, 2.0, 1.0):
        assert jitted(np.array(b)) == sci.quad(np.cos, 0.0, b)
    assert jitted.cache_info().traces == 2 and jitted.cache_info().replays == 1
