"""scipy.special on tracked values: each ufunc rule against float64 central differences (first
and second order), the differentiable logsumexp / softmax / log_softmax / polygamma against
SciPy's values and central differences, and the lazy registration (importing pullback never
imports SciPy; importing SciPy later registers the rules)."""

import math
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pullback as pb
from pullback.testing import assert_gradient
from rule_checks import gradcheck, seeds
from scipy_rule_cases import FIRST_ORDER_ONLY, SPECIAL, draw, special_call, ufunc

sp = pytest.importorskip("scipy.special")
special = pytest.importorskip("pullback.rules.special")

SETTINGS = settings(max_examples=6, deadline=None)
shapes = hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=4)


def project(y, seed=0):
    """A fixed random linear functional: a scalar loss that sees every element of y."""
    return np.sum(y * np.random.default_rng(seed).normal(size=np.shape(y)))


# name -> (low, high) of a domain where the function is smooth and well scaled
UNARY = {
    "expit": (-4, 4), "logit": (0.05, 0.95), "log_expit": (-6, 6), "erf": (-2, 2), "erfc": (-2, 2),
    "erfinv": (-0.9, 0.9), "erfcinv": (0.1, 1.9), "erfcx": (-1, 3), "gammaln": (0.2, 5), "gamma": (0.3, 4),
    "digamma": (0.3, 5), "psi": (0.3, 5), "ndtr": (-3, 3), "log_ndtr": (-8, 3), "ndtri": (0.05, 0.95),
    "i0": (-3, 3), "i1": (-3, 3), "i0e": (-3, 3), "i1e": (-3, 3),
    "rgamma": (-2.7, 4), "cosm1": (-3, 3), "j0": (-6, 6), "j1": (-6, 6), "y0": (0.3, 6), "y1": (0.3, 6),
}


@pytest.mark.parametrize("name", UNARY)
@SETTINGS
@given(shape=shapes, dtype=st.sampled_from([np.float64, np.float32]), seed=seeds)
def test_unary_ufuncs(name, shape, dtype, seed):
    fn = getattr(sp, name)
    low, high = UNARY[name]
    x = np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)
    tol = {"rtol": 1e-5, "atol": 1e-7} if dtype == np.float64 else {"rtol": 2e-3, "atol": 2e-4}
    gradcheck(lambda x: fn(x), x, **tol)


@pytest.mark.parametrize("name", UNARY)
def test_unary_ufuncs_second_order(name):
    fn = getattr(sp, name)
    low, high = UNARY[name]
    x = np.linspace(low, high, 5) + 0.01
    v = np.random.default_rng(1).normal(size=5)
    gradcheck(lambda x: np.sum(pb.gradient(lambda y: project(fn(y)), x)[0] * v), x, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["xlogy", "xlog1py", "betaln"])
@SETTINGS
@given(sa=shapes, sb=shapes, seed=seeds)
def test_binary_ufuncs_with_broadcasting(name, sa, sb, seed):
    rng = np.random.default_rng(seed)
    fn = getattr(sp, name)
    a, b = rng.uniform(0.2, 2.0, sa), rng.uniform(0.2, 2.0, sb)
    try:
        np.broadcast_shapes(sa, sb)
    except ValueError:
        return
    gradcheck(lambda a, b: fn(a, b), a, b)
    gradcheck(lambda a: np.sum(pb.gradient(lambda b: project(fn(a, b)), b)[0]), a, rtol=1e-4, atol=1e-6)


def test_xlogy_at_zero_and_bessel_orders():
    with np.errstate(divide="ignore"):  # d/dx at y == 0 is log(0) = -inf
        g = pb.gradient(lambda x, y: np.sum(sp.xlogy(x, y)), np.array([0.0, 2.0]), np.array([0.0, 3.0]))
    np.testing.assert_allclose(g[1], [0.0, 2.0 / 3.0])  # 0 * log(y) has no slope in y
    for fn in (sp.iv, sp.ive):
        gradcheck(lambda z: fn(1.5, z), np.array([0.4, 1.3, 2.2]))
        gradcheck(lambda z: fn(np.array([0.0, 2.0, 3.0]), z), np.array([-0.4, 1.3, 2.2]))
        with pytest.raises(NotImplementedError, match="order"):
            pb.gradient(lambda v: np.sum(fn(v, 1.5)), np.array([1.0]))


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), weights=st.booleans(),
       keepdims=st.booleans(), seed=seeds)
def test_logsumexp(shape, weights, keepdims, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=shape) * 3.0
    axis = int(rng.integers(-len(shape), len(shape)))
    b = rng.uniform(0.5, 2.0, shape) if weights else None
    gradcheck(lambda a, b: special.logsumexp(a, axis=axis, b=b, keepdims=keepdims), a, b)
    value = pb.pullback(lambda a: special.logsumexp(a, axis=axis, b=b, keepdims=keepdims), a)[0]
    np.testing.assert_allclose(value, sp.logsumexp(a, axis=axis, b=b, keepdims=keepdims))
    signed_b = rng.normal(size=shape)
    value, sign = pb.pullback(lambda a: special.logsumexp(a, axis=axis, b=signed_b, return_sign=True), a)[0]
    expected_value, expected_sign = sp.logsumexp(a, axis=axis, b=signed_b, return_sign=True)
    np.testing.assert_allclose(value, expected_value)
    np.testing.assert_array_equal(sign, expected_sign)
    gradcheck(lambda a: special.logsumexp(a, axis=axis, b=signed_b, return_sign=True)[0], a)


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), seed=seeds)
def test_softmax_and_log_softmax(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape) * 3.0
    axis = int(rng.integers(-len(shape), len(shape)))
    for ours, theirs in ((special.softmax, sp.softmax), (special.log_softmax, sp.log_softmax)):
        gradcheck(lambda x: ours(x, axis=axis), x)
        np.testing.assert_allclose(pb.pullback(lambda x: ours(x, axis=axis), x)[0], theirs(x, axis=axis), atol=1e-12)
        np.testing.assert_allclose(ours(x, axis=None), theirs(x, axis=None))  # plain input: SciPy itself


def test_python_level_functions_second_order_and_polygamma():
    x = np.array([0.3, -1.2, 2.0])
    v = np.array([1.0, 0.5, -2.0])
    gradcheck(lambda x: np.sum(pb.gradient(lambda y: project(special.log_softmax(y)), x)[0] * v), x, rtol=1e-4)
    gradcheck(lambda x: np.sum(pb.gradient(lambda y: special.logsumexp(y), x)[0] * v), x, rtol=1e-4)
    y = np.array([0.5, 1.5, 3.0])
    for n in (0, 1, 3):
        gradcheck(lambda y: special.polygamma(n, y), y)
        np.testing.assert_allclose(pb.pullback(lambda y: special.polygamma(n, y), y)[0], sp.polygamma(n, y))
    gradcheck(lambda y: np.sum(pb.gradient(lambda z: project(special.polygamma(1, z)), y)[0] * v), y, rtol=1e-4)
    with pytest.raises(NotImplementedError, match="order n"):
        pb.gradient(lambda n: np.sum(special.polygamma(n, y)), 1.0)


def _run(code):
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_importing_pullback_does_not_import_scipy_and_scipy_registers_later():
    out = _run("""
        import sys
        import numpy as np
        import pullback as pb
        print("scipy" in sys.modules)
        from scipy.special import erf, gammaln   # imported after pullback: the hook registers the rules
        print(pb.gradient(lambda x: np.sum(erf(x) + gammaln(x)), np.array([1.0]))[0].round(6).tolist())
    """)
    first, second = out.split("\n")[:2]
    assert first == "False"
    assert second == str(np.round(2 / np.sqrt(np.pi) * np.exp(-1.0) + sp.digamma(1.0), 6).reshape(1).tolist())


def test_scipy_imported_first_is_registered_at_import():
    out = _run("""
        import numpy as np
        import scipy.special
        import pullback as pb
        print(pb.gradient(lambda x: scipy.special.expit(x), 0.0)[0])
    """)
    assert out.strip() == "0.25"


@pytest.mark.parametrize("name", ["beta", "poch"])
def test_beta_and_pochhammer(name):
    fn = getattr(sp, name)
    a, b = np.array([0.4, 1.3, 2.5]), np.array([[0.7], [2.2]])
    gradcheck(lambda a, b: fn(a, b), a, b)
    gradcheck(lambda a: np.sum(pb.gradient(lambda b: project(fn(a, b)), b)[0]), a, rtol=1e-4, atol=1e-6)


def test_rgamma_at_the_poles_of_gamma():
    # 1/Γ(x) is 0 at x = -n, with slope (-1)^n n!
    np.testing.assert_allclose(pb.gradient(lambda x: np.sum(sp.rgamma(x)), np.array([0.0, -1.0, -2.0, -3.0]))[0],
                               [1.0, -1.0, 2.0, -6.0])


@pytest.mark.parametrize("name", ["jv", "yv", "yn"])
def test_bessel_functions_of_integer_and_real_order(name):
    fn = getattr(sp, name)
    z = np.array([0.6, 1.7, 4.2])
    for order in (np.array([[0], [1], [3]]), 2):
        gradcheck(lambda z: fn(order, z), z)
    if name != "yn":
        gradcheck(lambda z: fn(1.5, z), z)
    gradcheck(lambda z: np.sum(pb.gradient(lambda y: project(fn(1, y)), z)[0]), z, rtol=1e-4, atol=1e-6)
    with pytest.raises(NotImplementedError, match="order"):
        pb.gradient(lambda v: np.sum(fn(v, z)), 1.0)


def test_incomplete_gamma_and_beta_functions_in_every_argument():
    # the shape derivatives come from quadrature; they are checked against central differences here
    a, x = np.array([0.05, 0.4, 1.0, 2.5, 30.0]), np.array([0.3, 2.0, 1.0, 0.1, 28.0])
    for fn in (sp.gammainc, sp.gammaincc):
        gradcheck(lambda a, x: fn(a, x), a, x, rtol=1e-6, atol=1e-10)
        gradcheck(lambda x: np.sum(pb.gradient(lambda y: project(fn(a, y)), x)[0]), x, rtol=1e-5, atol=1e-8)
    a, b = np.array([0.05, 0.6, 1.0, 3.0, 40.0]), np.array([0.5, 1.7, 0.08, 25.0, 35.0])
    x = np.array([0.3, 0.95, 0.5, 0.02, 0.55])
    for fn in (sp.betainc, sp.betaincc):
        gradcheck(lambda a, b, x: fn(a, b, x), a, b, x, rtol=1e-6, atol=1e-10)
    df, t = np.array([0.6, 2.0, 7.0, 30.0, 3.0]), np.array([-4.0, -0.3, 0.001, 2.5, 60.0])
    gradcheck(lambda df, t: sp.stdtr(df, t), df, t, rtol=1e-6, atol=1e-10)
    _, tangent = pb.jvp(lambda a, b: sp.betainc(a, b, 0.4), (np.array([0.7]), np.array([2.0])),
                        (np.array([1.0]), np.array([-0.5])))
    eps = 1e-6
    expected = (sp.betainc(0.7 + eps, 2.0 - 0.5 * eps, 0.4) - sp.betainc(0.7 - eps, 2.0 + 0.5 * eps, 0.4)) / (2 * eps)
    np.testing.assert_allclose(tangent, expected, rtol=1e-6)
    with pytest.raises(NotImplementedError, match="betainc: the derivative with respect to b .*quadrature"):
        pb.hessian(lambda b: sp.betainc(0.5, b, 0.3), 2.0)
    with pytest.raises(NotImplementedError, match="stdtr: the derivative with respect to df"):
        pb.gradient(lambda t: pb.gradient(lambda df: sp.stdtr(df, t), 3.0)[0], 1.0)


def test_gammasgn_has_no_gradient_and_multigammaln_is_differentiable():
    g = pb.gradient(lambda x: np.sum(sp.gammasgn(x) * x), np.array([-0.5, -1.5, 2.0]))[0]
    np.testing.assert_array_equal(g, [-1.0, 1.0, 1.0])
    a = np.array([2.0, 3.5, 7.0])
    for d in (1, 3):
        gradcheck(lambda a: special.multigammaln(a, d), a)
        np.testing.assert_allclose(pb.pullback(lambda a: special.multigammaln(a, d), a)[0], sp.multigammaln(a, d),
                                   rtol=1e-14)
    assert special.multigammaln(3.0, 2) == sp.multigammaln(3.0, 2)
    with pytest.raises(ValueError, match="condition a"):
        pb.gradient(lambda a: special.multigammaln(a, 4), 1.0)


# --- the ufuncs added with scipy_rule_cases.SPECIAL: values, first and second derivatives ----------
@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_more_ufuncs_against_central_differences_and_scipy(name):
    f, ranges = special_call(sp, name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    args = draw(rng, ranges)
    value = pb.pullback(f, *args)[0]
    np.testing.assert_array_equal(value, f(*args))  # SciPy's own value, to the last bit
    # stdtridf's root is found to about 1e-12, which central differences amplify (see the round trip below)
    gradcheck(f, *args, **({"rtol": 1e-3, "atol": 1e-6} if name == "stdtridf" else {"rtol": 1e-6, "atol": 1e-9}))
    low = tuple(a.astype(np.float32) for a in args)  # float32 in: float32 gradients
    grads = pb.gradient(lambda *a: np.sum(f(*a)), *low)
    assert all(g.dtype == np.float32 for g in grads)


@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_more_ufuncs_second_order(name):
    spec = SPECIAL[name]
    slots = [k for k, s in enumerate(spec) if isinstance(s, tuple)]
    smooth = [k for k in slots if (name, k) not in FIRST_ORDER_ONLY]
    if not smooth:
        pytest.skip("first derivatives only (quadrature)")
    k = smooth[-1]
    fn = ufunc(sp, name)
    rng = np.random.default_rng(7)
    rest = {j: (float(np.mean(spec[j])) if j in slots else spec[j]) for j in range(len(spec))}
    x = rng.uniform(*spec[k], 4)

    def derivative(x):
        def value(y):
            return project(fn(*[y if j == k else rest[j] for j in range(len(spec))]))

        return np.sum(pb.gradient(value, x)[0] * np.arange(1.0, 5.0))

    gradcheck(derivative, x, rtol=1e-4, atol=1e-7)


def test_quadrature_derivatives_refuse_a_second_order():
    with pytest.raises(NotImplementedError, match="gammaincinv: the derivative with respect to a .*quadrature"):
        pb.hessian(lambda a: sp.gammaincinv(a, 0.3), 2.0)
    with pytest.raises(NotImplementedError, match="zeta: the derivative with respect to x"):
        pb.hessian(lambda x: sp.zeta(x), 3.0)


@pytest.mark.parametrize("call, what", [
    (lambda v: sp.kv(v, 1.5), "order"), (lambda n: sp.expn(n, 1.5), "order n"),
    (lambda a: sp.hyp1f1(a, 1.5, 0.3), "respect to a"), (lambda c: sp.hyp2f1(0.5, 1.0, c, 0.3), "respect to c"),
    (lambda n: sp.eval_legendre(n, 0.3), "degree n"), (lambda a: sp.eval_gegenbauer(2, a, 0.3), "parameter alpha"),
])
def test_plain_arguments_refuse_clearly(call, what):
    with pytest.raises(NotImplementedError, match=what):
        pb.gradient(call, 1.5)


def test_counts_carry_no_gradient_and_kinks_and_limits():
    # pdtr floors k: no gradient for it, and the value is SciPy's
    g = pb.gradient(lambda k, m: sp.pdtr(k, m), 2.5, 1.5)
    assert g[0] is None and np.isclose(g[1], -np.exp(-1.5) * 1.5 ** 2 / 2)
    assert pb.gradient(lambda x: np.sum(sp.round(x) * x), np.array([0.4, 2.6]))[0].tolist() == [0.0, 3.0]
    # the limits at m = 0, and spence at z = 1
    np.testing.assert_allclose(pb.gradient(sp.ellipk, 0.0)[0], np.pi / 8)
    np.testing.assert_allclose(pb.gradient(sp.ellipe, 0.0)[0], -np.pi / 8)
    np.testing.assert_allclose(pb.gradient(lambda m: sp.ellipkinc(0.7, m), 0.0)[0], (0.7 - np.sin(1.4) / 2) / 4)
    np.testing.assert_allclose(pb.gradient(sp.spence, 1.0)[0], -1.0)
    # exprel and boxcox at 0, where the closed forms are 0/0
    np.testing.assert_allclose(pb.gradient(sp.exprel, 0.0)[0], 0.5)
    np.testing.assert_allclose(pb.gradient(lambda lm: sp.boxcox(2.0, lm), 0.0)[0], np.log(2.0) ** 2 / 2)
    # huber's kink: the derivative in r is r inside, delta·sign(r) outside
    np.testing.assert_allclose(pb.gradient(lambda r: np.sum(sp.huber(1.0, r)), np.array([0.5, -3.0]))[0], [0.5, -1.0])


def test_zeta_in_both_arguments_against_central_differences():
    x, q = np.array([1.5, 2.5, 6.0]), np.array([0.5, 1.0, 4.0])
    gradcheck(lambda x, q: sp.zeta(x, q), x, q, rtol=1e-7, atol=1e-10)
    gradcheck(lambda x: sp.zeta(x), np.array([-4.5, -0.5, 0.5, 3.0]), rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(pb.gradient(lambda x: sp.zeta(x), 2.0)[0], -0.9375482543158437, rtol=1e-12)  # ζ'(2)
    np.testing.assert_allclose(pb.gradient(lambda x: sp.zeta(x), 0.0)[0], -0.5 * np.log(2 * np.pi), rtol=1e-14)
    np.testing.assert_allclose(pb.gradient(lambda x: sp.zeta(x), -2.0)[0], -0.03044845705839327, rtol=1e-12)


@pytest.mark.parametrize("name", ["sici", "shichi", "fresnel", "airy", "airye", "itairy", "itj0y0", "iti0k0", "it2j0y0",
                                  "it2i0k0", "ellipj", "pbdv", "pbvv", "pbwa"])
def test_several_outputs(name):
    ours, theirs = getattr(special, name), getattr(sp, name)
    plain = {"ellipj": (None, 0.4), "pbdv": (1.5, None), "pbvv": (1.3, None), "pbwa": (0.6, None)}.get(name, (None,))
    x = np.array([0.4, 1.1, 2.3])
    call = lambda f, x: f(*[x if p is None else p for p in plain])  # noqa: E731
    for got, want in zip(pb.pullback(lambda x: call(ours, x), x)[0], call(theirs, x)):
        np.testing.assert_array_equal(got, want)
    assert [np.shape(v) for v in call(ours, x)] == [np.shape(v) for v in call(theirs, x)]  # plain: SciPy itself
    for k in range(len(call(theirs, x))):
        gradcheck(lambda x: call(ours, x)[k], x)
        gradcheck(lambda x: np.sum(pb.gradient(lambda y: project(call(ours, y)[k]), x)[0]), x, rtol=1e-4, atol=1e-7)
    with pytest.raises(NotImplementedError, match=f"no derivative rule for scipy.special.{name}"):
        pb.gradient(lambda x: np.sum(call(theirs, x)[0]), x)  # SciPy's own ufunc: a clear error, not a wrong number


def test_ellipj_parameter_and_pbdv_order_are_plain():
    with pytest.raises(NotImplementedError, match="the parameter m"):
        pb.gradient(lambda m: special.ellipj(0.5, m)[0], 0.3)
    with pytest.raises(NotImplementedError, match="the order v"):
        pb.jvp(lambda v: special.pbdv(v, 0.5)[0], (1.5,), (1.0,))


@pytest.mark.parametrize("kind", ["jn", "yn", "in", "kn"])
def test_spherical_bessel_functions(kind):
    ours, theirs = getattr(special, f"spherical_{kind}"), getattr(sp, f"spherical_{kind}")
    z = np.array([0.6, 1.7, 3.2]) if kind == "kn" else np.array([-1.3, 0.6, 1.7, 3.2])
    for derivative in (False, True):
        for n in (0, 3, np.array([1, 2, 0, 4])[:len(z)]):
            np.testing.assert_allclose(pb.pullback(lambda z: ours(n, z, derivative), z)[0], theirs(n, z, derivative),
                                       rtol=1e-14, atol=1e-300)
            gradcheck(lambda z: ours(n, z, derivative), z)
        gradcheck(lambda z: np.sum(pb.gradient(lambda y: project(ours(2, y, derivative)), z)[0]), z, rtol=1e-4,
                  atol=1e-7)
    for z32 in (z.astype(np.float32), np.abs(z).astype(np.float32)):  # SciPy's dtype too (float32 → float64 for most)
        value, expected = pb.pullback(lambda z: ours(1, z), z32)[0], theirs(1, z32)
        assert value.dtype == expected.dtype
        np.testing.assert_array_equal(value, expected)
    if kind == "kn":
        with pytest.raises(ValueError, match="negative z"):
            pb.gradient(lambda z: ours(1, z), -1.0)


def test_diric_and_the_functions_that_work_as_they_are():
    x = np.array([-2.0, 0.3, 1.0, 2 * np.pi + 0.2])
    for n in (3, 4):
        np.testing.assert_allclose(pb.pullback(lambda x: special.diric(x, n), x)[0], sp.diric(x, n), rtol=1e-14)
        gradcheck(lambda x: special.diric(x, n), x)
    assert pb.gradient(lambda x: special.diric(x, 3), 0.0)[0] == 0.0  # the limit ±1 is flat to first order
    z = np.array([0.5, 1.5])
    gradcheck(lambda z: sp.jvp(1.5, z, 2) + sp.kvp(0.5, z) + sp.ivp(2, z, 3) + sp.yvp(1, z), z)
    gradcheck(lambda x: sp.softplus(x) + sp.assoc_laguerre(x, 3, 0.5), z)


# inverse -> (forward, the position of the solved argument among the forward's, the inverse's inputs:
# "y" or the forward's argument index)
ROUND_TRIPS = {
    "chdtriv": (sp.chdtr, 0, ("y", 1)), "gdtria": (sp.gdtr, 0, ("y", 1, 2)), "gdtrib": (sp.gdtr, 1, (0, "y", 2)),
    "btdtria": (sp.betainc, 0, ("y", 1, 2)), "btdtrib": (sp.betainc, 1, (0, "y", 2)), "stdtridf": (sp.stdtr, 0, ("y", 1)),
    "fdtridfd": (sp.fdtr, 1, (0, "y", 2)), "gammaincinv": (sp.gammainc, 1, (0, "y")),
    "betaincinv": (sp.betainc, 2, (0, 1, "y")), "stdtrit": (sp.stdtr, 1, (0, "y")), "fdtri": (sp.fdtr, 2, (0, 1, "y")),
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_inverse_round_trip_has_unit_slope(name):
    # F(..., θ(y, ...), ...) = y for every input: the derivative is 1 in y and 0 in the other arguments
    forward, solved, inputs = ROUND_TRIPS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    values = [rng.uniform(*r) for r in SPECIAL[name]] if name in SPECIAL else None
    if values is None:
        values = [rng.uniform(0.3, 0.7) if j == "y" else rng.uniform(1.5, 3.0) for j in inputs]

    def round_trip(*values):
        theta = ufunc(sp, name)(*values)
        args = {j: v for j, v in zip(inputs, values) if j != "y"}
        args[solved] = theta
        return forward(*[args[j] for j in range(len(inputs))])

    grads = pb.gradient(round_trip, *values)
    expected = [1.0 if j == "y" else 0.0 for j in inputs]
    np.testing.assert_allclose(grads, expected, atol=1e-7)


def test_log_ndtr_s_derivative_keeps_its_digits_for_very_negative_x():
    sp = pytest.importorskip("scipy.special")
    # d/dx log Φ(x) = φ(x)/Φ(x) ≈ -x for very negative x (mpmath: 1000000.000001 at -1e6)
    for x, expected in ((-1e6, 1000000.000001), (-1e10, 1e10), (-1e155, 1e155)):
        (g,) = pb.gradient(sp.log_ndtr, x)
        assert g == pytest.approx(expected, rel=1e-14)
    assert pb.hessian(sp.log_ndtr, -1e5) == pytest.approx(-1.0, rel=1e-5)
    assert_gradient(lambda x: np.sum(sp.log_ndtr(x)), np.array([-30.0, -2.0, 0.5, 5.0]), order=2)


@pytest.mark.parametrize("name", ["struve", "modstruve"])
def test_struve_functions_are_differentiable_at_zero(name):
    sp = pytest.importorskip("scipy.special")
    f = getattr(sp, name)
    (g,) = pb.gradient(lambda x: np.sum(f(0.0, x)), np.array([0.0]))
    np.testing.assert_allclose(g, [2.0 / np.pi], rtol=1e-15)  # H_0'(0) = L_0'(0) = 2/π
    assert pb.gradient(lambda x: f(1.0, x), 0.0) == (0.0,)
    for v in (0.0, 1.0, 2.5):
        assert_gradient(lambda x: np.sum(f(v, x)), np.array([0.5, 3.0]), order=2)
    assert pb.hessian(sp.itstruve0, 0.0) == pytest.approx(2.0 / np.pi, rel=1e-15)


def test_diric_of_float32_is_scipy_s_value():
    sp = pytest.importorskip("scipy.special")
    from pullback.scipy import special

    y, _ = pb.vjp(lambda x: special.diric(x, 3), np.float32(0.5))
    expected = sp.diric(np.float32(0.5), 3)
    assert y == expected and np.asarray(y).dtype == np.asarray(expected).dtype


def test_rgamma_at_the_poles_of_gamma_has_exact_first_and_second_derivatives():
    sp = pytest.importorskip("scipy.special")
    # 1/Γ(x) = x + γx² + ... at 0; in general d/dx at -n is (-1)^n n!, d²/dx² is -2 (-1)^n n! ψ(n + 1)
    euler_gamma = 0.5772156649015329
    for n, psi in ((0, -euler_gamma), (1, 1 - euler_gamma), (2, 1.5 - euler_gamma)):
        x = -float(n)
        assert pb.gradient(sp.rgamma, x) == ((-1) ** n * math.factorial(n),)
        assert pb.hessian(sp.rgamma, x) == pytest.approx(-2 * (-1) ** n * math.factorial(n) * psi, rel=1e-13)
    assert_gradient(lambda x: np.sum(sp.rgamma(x)), np.array([0.0, -1.0, -3.0, 0.7, 2.5, 3.0]), order=2, dense_up_to=None)


def central(f, x, eps=1e-6):
    return (f(x + eps) - f(x - eps)) / (2 * eps)


def test_tklmbda_derivative_outside_support_is_zero():
    """Tukey-lambda cdf: for lmbda > 0 the support is [-1/lmbda, 1/lmbda]; outside it the cdf is the
    constant 0 or 1, so both partial derivatives are 0 (they once were the density formula at p = 1,
    1.0 at (1.5, 2), and NaN in lmbda)."""
    for x, lm in [(1.5, 2.0), (1.5, 1.0), (-1.5, 2.0)]:
        fx = lambda t: sp.tklmbda(t, lm)  # noqa: E731
        fl = lambda t: sp.tklmbda(x, t)  # noqa: E731
        assert central(fx, x) == 0.0 and central(fl, lm) == 0.0
        assert pb.gradient(fx, x)[0] == pytest.approx(0.0, abs=1e-12)
        assert pb.jvp(fx, (x,), (1.0,))[1] == pytest.approx(0.0, abs=1e-12)
        assert pb.gradient(fl, lm)[0] == pytest.approx(0.0, abs=1e-12)
    x = np.array([-1.5, -0.3, 0.2, 0.45, 0.6])  # inside and outside the support of lmbda = 2
    g = pb.gradient(lambda x: np.sum(sp.tklmbda(x, 2.0)), x)[0]
    np.testing.assert_allclose(g, central(lambda x: sp.tklmbda(x, 2.0), x), rtol=1e-6, atol=1e-12)
    assert not np.isnan(pb.hessian(lambda lm: sp.tklmbda(1.5, lm), 2.0))


ORDERS = [(lambda n, x: sp.kn(n, x), "kn"), (lambda n, x: sp.yn(n, x), "yn"), (lambda n, x: sp.expn(n, x), "expn")]
COUNTS = [(lambda n, x: sp.bdtr(1, n + 2, x / 2), "bdtr"), (lambda n, x: sp.bdtri(1, n + 2, x / 2), "bdtri"),
          (lambda n, x: sp.nbdtr(1, n + 2, x / 2), "nbdtr"), (lambda n, x: sp.nbdtrc(n + 1, n + 2, x / 2), "nbdtrc"),
          (lambda n, x: sp.nbdtri(1, n + 2, x / 2), "nbdtri")]


@pytest.mark.parametrize("call, n", [(c, n) for c, _ in ORDERS for n in (0.5, 1.7, -0.5)]
                         + [(c, n) for c, _ in COUNTS for n in (0.5, 1.7)],
                         ids=[f"{name}({n})" for _, name in ORDERS for n in (0.5, 1.7, -0.5)]
                         + [f"{name}({n})" for _, name in COUNTS for n in (0.5, 1.7)])
def test_integer_orders_and_counts_given_as_floats_are_truncated_as_scipy_does(call, n):
    """SciPy truncates a float order or count (kn(0.5, x) is kn(0, x), with a RuntimeWarning): the
    derivative is that of what SciPy computes, its recurrences stepping from the truncated n (they
    once stepped to n - 1 = -0.5, which SciPy truncates to 0, not -1)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = lambda x: call(n, x)  # noqa: E731
        assert f(0.7) == call(np.trunc(n), 0.7)
        expected = central(f, 0.7)
        assert pb.gradient(f, 0.7)[0] == pytest.approx(expected, rel=1e-6)
        assert pb.jvp(f, (0.7,), (1.0,))[1] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("name", ["psi", "digamma", "rgamma"])
def test_complex_digamma_and_rgamma_have_complex_derivatives(name):
    """SciPy's psi/digamma and rgamma take complex z; their rules once failed inside (a real-only floor
    and polygamma). The pullback of a holomorphic function is c * f'(z), and second derivatives work."""
    mpmath = pytest.importorskip("mpmath")
    z = np.array([0.7 + 0.4j, 1.3 - 0.6j, -2.6 + 0.1j, 30.0 - 2.0j])
    fn = getattr(sp, name)
    w = [mpmath.mpc(v) for v in z]
    if name == "rgamma":
        first = [-mpmath.digamma(v) * mpmath.rgamma(v) for v in w]
        second = [mpmath.rgamma(v) * (mpmath.digamma(v) ** 2 - mpmath.psi(1, v)) for v in w]
    else:
        first, second = [mpmath.psi(1, v) for v in w], [mpmath.psi(2, v) for v in w]
    first, second = (np.array([complex(v) for v in d]) for d in (first, second))
    _, back = pb.vjp(fn, z)
    np.testing.assert_allclose(back(np.ones(4, complex))[0], first, rtol=1e-12)
    np.testing.assert_allclose(back(np.full(4, 1j))[0], 1j * first, rtol=1e-12)
    np.testing.assert_allclose(pb.jvp(fn, (z,), (np.ones(4, complex),))[1], first, rtol=1e-12)
    d2 = pb.jvp(lambda z: pb.jvp(fn, (z,), (np.ones(4, complex),))[1], (z,), (np.ones(4, complex),))[1]
    np.testing.assert_allclose(d2, second, rtol=1e-12)
    d2 = pb.vjp(lambda z: pb.vjp(fn, z)[1](np.ones(4, complex))[0], z)[1](np.ones(4, complex))[0]
    np.testing.assert_allclose(d2, second, rtol=1e-12)


def test_complex_polygamma_against_mpmath():
    mpmath = pytest.importorskip("mpmath")
    z = np.array([0.7 + 0.4j, 1.3 - 0.6j, -3.3 + 0.2j, 25.0 + 3.0j, 0.01 - 0.01j, -40.5 + 1e-3j, 5j])
    for n in (1, 2, 3, 5):
        want = np.array([complex(mpmath.psi(n, mpmath.mpc(v))) for v in z])
        np.testing.assert_allclose(special._complex_polygamma(n, z), want, rtol=1e-14)


@pytest.mark.parametrize("point", [(0.3, 1.2, 2.5), (1e-3, 1.0, 1.0 + 1e-7), (50.0, 1e-4, 3.0), (2.0, 2.0, 2.0)])
def test_elliprf_second_and_third_derivatives_against_mpmath(point):
    """elliprf's derivatives are -elliprd / 6; elliprd's own partials (once "no rule for elliprd") are
    Carlson-type integrals, by quadrature to about 1e-15, close arguments and wide scales included."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30
    x = np.array(point)
    exact = [mpmath.mpf(v) for v in point]

    def want(orders):
        return float(mpmath.diff(mpmath.elliprf, tuple(exact), orders))

    h = pb.hessian(lambda v: sp.elliprf(v[0], v[1], v[2]), x)
    expected = [[want(tuple(int(i == r) + int(i == c) for i in range(3))) for c in range(3)] for r in range(3)]
    np.testing.assert_allclose(h, expected, rtol=1e-12)
    third = pb.gradient(lambda a: pb.hessian(lambda a: sp.elliprf(a, x[1], x[2]), a), x[0])[0]
    assert third == pytest.approx(want((3, 0, 0)), rel=1e-11)
    mpmath.mp.dps = 15


def test_elliprc_second_derivatives_against_mpmath():
    mpmath = pytest.importorskip("mpmath")
    for point in [(0.3, 1.2), (2.0, 0.5), (1.0, 1.0 + 1e-8)]:
        exact = tuple(mpmath.mpf(v) for v in point)
        h = pb.hessian(lambda v: sp.elliprc(v[0], v[1]), np.array(point))
        expected = [[float(mpmath.diff(mpmath.elliprc, exact, (int(r == 0) + int(c == 0), int(r == 1) + int(c == 1))))
                     for c in range(2)] for r in range(2)]
        np.testing.assert_allclose(h, expected, rtol=1e-12)
    d2 = pb.jvp(lambda x: pb.gradient(lambda x: sp.elliprc(x, 1.5), x)[0], (0.7,), (1.0,))[1]
    assert d2 == pytest.approx(float(mpmath.diff(lambda a: mpmath.elliprc(a, 1.5), mpmath.mpf(0.7), 2)), rel=1e-13)


def test_kolmogorov_and_kolmogi_second_derivatives():
    """kolmogorov's derivative is SciPy's _kolmogp (once "no rule for _kolmogp" in a second derivative);
    its own is K'' from the two series of K, each where it converges fast."""
    mpmath = pytest.importorskip("mpmath")

    def k(y):
        return 2 * mpmath.nsum(lambda j: (-1) ** (j - 1) * mpmath.exp(-2 * j * j * y * y), [1, mpmath.inf])

    for y in (0.3, 0.6, 0.79, 0.81, 1.3, 2.5):
        assert pb.hessian(sp.kolmogorov, y) == pytest.approx(float(mpmath.diff(k, y, 2)), rel=1e-12)
        assert pb.jvp(lambda y: pb.gradient(sp.kolmogorov, y)[0], (y,), (1.0,))[1] == pytest.approx(
            float(mpmath.diff(k, y, 2)), rel=1e-12)
    assert pb.hessian(sp.kolmogorov, 0.0) == 0.0 and pb.hessian(sp.kolmogorov, -1.0) == 0.0
    for p in (0.1, 0.5, 0.9):
        y = mpmath.findroot(lambda y: k(y) - p, float(sp.kolmogi(p)))
        expected = -mpmath.diff(k, y, 2) / mpmath.diff(k, y, 1) ** 3  # (K^-1)'' = -K'' / K'^3
        assert pb.hessian(sp.kolmogi, p) == pytest.approx(float(expected), rel=1e-10)
    assert_gradient(lambda y: np.sum(sp.kolmogorov(y)), np.array([0.4, 0.8, 1.5]), order=2)


def test_smirnov_second_derivatives_are_refused_by_name():
    assert pb.gradient(lambda d: sp.smirnov(5, d), 0.3)[0] == pytest.approx(central(lambda d: sp.smirnov(5, d), 0.3))
    with pytest.raises(NotImplementedError, match="smirnov and smirnovi are differentiable once"):
        pb.hessian(lambda d: sp.smirnov(5, d), 0.3)
    with pytest.raises(NotImplementedError, match="smirnov and smirnovi are differentiable once"):
        pb.jvp(lambda p: pb.gradient(lambda p: sp.smirnovi(5, p), p)[0], (0.3,), (1.0,))


def test_elliprf_second_derivatives_at_a_zero_argument_are_not_finite():
    """At x = 0 the slope of elliprf in x is -inf (SciPy's elliprd is inf there): its derivatives are not
    finite either, never a silent number (the quadrature alone would give one)."""
    assert pb.gradient(lambda x: sp.elliprf(x, 1.0, 2.0), 0.0)[0] == -np.inf
    h = pb.hessian(lambda v: sp.elliprf(v[0], v[1], v[2]), np.array([0.0, 1.0, 2.0]))
    assert not np.any(np.isfinite(h[:, 0])) and not np.any(np.isfinite(h[0]))
    np.testing.assert_allclose(pb.hessian(lambda v: sp.elliprf(0.0, v[0], v[1]), np.array([1.0, 2.0])),
                               pb.hessian(lambda v: sp.elliprf(v[0], v[1], 0.0), np.array([1.0, 2.0])), rtol=1e-14)
