"""Jacobians of forward-only operations, memmap arguments' result types, SciPy Cholesky solves under
pb.jit, and pb.jit's handling of generators made inside the function, written arguments, set arguments,
traced values stored outside the arguments, and unused draws: each compared with the eager call."""
import os
import tempfile

import numpy as np
import pytest

import pullback as pb


# --- pb.jacobian of an operation with a forward rule only ------------------------------------------
def test_jacobian_forward_mode_of_a_primitive_with_only_a_forward_rule():
    """An operation registered with pb.frule only: jacobian's first run and forward columns need no reverse rule."""
    @pb.primitive
    def double(x):
        return 2.0 * x

    @pb.frule(double)
    def double_frule(primals, tangents):
        return double(primals[0]), None if tangents[0] is None else 2.0 * tangents[0]

    (J,) = pb.jacobian(double, np.ones(3))  # 3 inputs <= 3 outputs: forward mode
    np.testing.assert_array_equal(J, 2.0 * np.eye(3))


# --- cho_factor / cho_solve under pb.jit (SciPy's value is not pinned on the trace's stand-ins) ----
@pytest.mark.parametrize("factor", ["cho_factor", "np.linalg.cholesky"])
def test_jit_of_a_gradient_through_cho_solve(factor):
    pytest.importorskip("scipy.linalg")
    import pullback.scipy.linalg as psl
    rng = np.random.default_rng(0)
    M = rng.standard_normal((3, 3))
    A = M @ M.T + 3 * np.eye(3)
    b = rng.standard_normal(3)
    factorize = psl.cho_factor if factor == "cho_factor" else lambda A: (np.linalg.cholesky(A), True)

    def grad(A):
        return pb.gradient(lambda A: np.sum(psl.cho_solve(factorize(A), b) ** 2), A)[0]

    np.testing.assert_allclose(pb.jit(grad)(A.copy()), grad(A.copy()), rtol=1e-12)


# --- np.memmap arguments: scalar results stay NumPy scalars ------------------------------------------
def _memmap():
    d = tempfile.mkdtemp()
    np.save(os.path.join(d, "a.npy"), np.arange(1.0, 7.0).reshape(2, 3))
    return np.load(os.path.join(d, "a.npy"), mmap_mode="r")


def test_withgradient_value_of_a_memmap_argument_is_numpys_scalar():
    m = _memmap()
    f = lambda x: np.sum(x ** 2)
    val, _ = pb.withgradient(f, m)
    assert type(val) is type(f(m)) is np.float64  # pullback gives array(91.)


def test_value_and_grad_and_jvp_of_a_memmap_argument_keep_scalar_types():
    m = _memmap()
    f = lambda x: x[0, 0] * 2.0
    val, _ = pb.value_and_grad(f)(m)
    assert type(val) is np.float64
    y, t = pb.jvp(f, (m,), (np.ones((2, 3)),))
    assert type(y) is np.float64 and type(t) is np.float64


# --- pb.jit: seeded generators made inside the function ----------------------------------------------
def test_jit_allows_a_seeded_random_state_made_inside():
    f = lambda x: x + np.random.RandomState(0).normal(size=2)
    x = np.ones(2)
    np.testing.assert_array_equal(pb.jit(f)(x), f(x))  # JitError: "made a random generator from fresh entropy"


def test_jit_allows_scipy_stats_with_an_integer_random_state():
    stats = pytest.importorskip("scipy.stats")
    f = lambda x: x + stats.norm.rvs(size=2, random_state=0)
    x = np.ones(2)
    np.testing.assert_array_equal(pb.jit(f)(x), f(x))


def test_jit_random_state_seeded_by_a_python_int_argument():
    f = lambda x, n: x + np.random.RandomState(n).normal(size=2)
    jf = pb.jit(f)
    x = np.ones(2)
    for n in (1, 2, 1):
        np.testing.assert_array_equal(jf(x, n), f(x, n))


# --- pb.jit: a written argument and a global that only shares a name with an attribute ----------------
class _Model:
    def __init__(self):
        self.w = np.ones(3)


def _step(m, g):
    m.w[...] -= 0.1 * g  # reads attribute `w`; never the module global `w`
    return np.sum(m.w)


def test_jit_write_into_argument_not_refused_because_a_global_of_an_attribute_name_aliases_it():
    global w
    m_eager, m_jit = _Model(), _Model()
    w = m_jit.w  # e.g. a notebook's `w = model.w`; the jitted function never reads this global
    g = np.arange(3.0)
    expected = _step(m_eager, g)
    got = pb.jit(_step)(m_jit, g)  # JitError: "whose memory it also reads outside its arguments"
    assert got == expected
    np.testing.assert_array_equal(m_jit.w, m_eager.w)


# --- pb.jit: set arguments of equal numbers of different types --------------------------------------
def test_jit_set_argument_of_equal_numbers_of_another_type_traces_again():
    f = lambda x, s: x + np.array(sorted(s))
    jf = pb.jit(f)
    x = np.arange(3)
    for s in ({1}, {1.0}):
        e, r = f(x, s), jf(x, s)
        assert r.dtype == e.dtype  # the {1.0} call replays {1}'s trace: int64 instead of float64
        np.testing.assert_array_equal(r, e)


# --- pb.jit: a traced value stored under a new attribute, dict key or global --------------------------
# (5b5e0cf refuses it only where the name already held a value: Watch.new_values sees entries the walk made)
class _Recorder:
    pass


def test_jit_refuses_storing_a_traced_value_in_a_new_attribute_of_a_global_object():
    rec = _Recorder()
    f = pb.jit(lambda x: (setattr(rec, "last", np.sum(x)), x)[1])
    with pytest.raises(pb.JitError):
        f(np.ones(2))
        f(np.full(2, 5.0))
        assert float(rec.last) == 10.0  # reached only if not refused: reads the trace's 2.0


def test_jit_refuses_storing_a_traced_value_under_a_new_key_of_a_global_dict():
    log = {}
    f = pb.jit(lambda x: (log.__setitem__("loss", np.sum(x)), x)[1])
    with pytest.raises(pb.JitError):
        f(np.ones(2))


# --- pb.jit: a returned closure over a generator argument ----------------------------------------------
def test_jit_refuses_returning_a_closure_over_a_generator_argument():
    def f(x, rng):
        return x * 2, (lambda: rng.normal())

    with pytest.raises(pb.JitError):
        _, draw = pb.jit(f)(np.ones(2), np.random.default_rng(0))
        assert isinstance(draw(), float)  # reached only if not refused: it returns a Symbol


# --- pb.jit: the type of a constant gradient of a NumPy-scalar argument -------------------------------
# (0a7e710 "gradients ... of NumPy scalars and floats keep their types": leaf_gradient converts only a stand-in g)
def test_jit_gradient_of_a_numpy_scalar_argument_with_a_constant_gradient_is_a_numpy_scalar():
    g = lambda d: pb.gradient(lambda d: d * 2.0, d)[0]
    e, r = g(np.float64(3.0)), pb.jit(g)(np.float64(3.0))
    assert type(r) is type(e) is np.float64  # jit gives array(2.)


# --- pb.jit: a draw whose result is unused still advances the generator ------------------------------
def test_jit_replay_draws_as_many_numbers_as_the_eager_call():
    def f(x, rng):
        rng.normal(size=2)  # unused, but it advances the generator
        return x - rng.uniform(size=2)

    jf = pb.jit(f)
    for _ in range(2):
        r1, r2 = np.random.default_rng(5), np.random.default_rng(5)
        np.testing.assert_array_equal(jf(-np.ones(2), r2), f(-np.ones(2), r1))
        assert r1.bit_generator.state == r2.bit_generator.state


def test_withjacobian_and_vjp_values_of_a_memmap_argument_keep_scalar_types():
    m = _memmap()
    f = lambda x: np.sum(x ** 2)
    assert type(pb.withjacobian(f, m)[0]) is np.float64  # array(91.)
    assert type(pb.vjp(f, m)[0]) is np.float64


# --- pb.jit: np.random.default_rng of a generator argument --------------------------------------------
def test_jit_default_rng_of_a_generator_argument_passes_it_through():
    def f(x, rng):
        rng = np.random.default_rng(rng)  # NumPy returns the generator itself
        return x + rng.normal(size=2)

    r1, r2 = np.random.default_rng(0), np.random.default_rng(0)
    np.testing.assert_array_equal(pb.jit(f)(np.ones(2), r2), f(np.ones(2), r1))  # TypeError from SeedSequence


# --- pb.jit: jacobian's and hessian's check that every run gives the same value ------------------------
def test_jit_of_forward_jacobian_of_a_random_f_raises_as_eagerly():
    x = np.array([0.3, 0.7, 1.1])
    g = lambda x, rng: pb.jacobian(lambda x: x * rng.normal(size=3), x)[0]
    with pytest.raises(RuntimeError):
        g(x, np.random.default_rng(0))  # eager refuses
    with pytest.raises((RuntimeError, pb.JitError)):
        pb.jit(g)(x, np.random.default_rng(0))  # pb.jit returns a Jacobian of mixed draws


def test_jit_of_hessian_of_a_random_f_raises_as_eagerly():
    x = np.array([0.3, 0.7, 1.1])
    h = lambda x, rng: pb.hessian(lambda x: np.sum(x ** 2 * rng.normal(size=3)), x)
    with pytest.raises(RuntimeError):
        h(x, np.random.default_rng(0))
    with pytest.raises((RuntimeError, pb.JitError)):
        pb.jit(h)(x, np.random.default_rng(0))


def test_jit_allows_scipy_sparse_random_with_an_integer_random_state():
    sp = pytest.importorskip("scipy.sparse")
    f = lambda x: x + sp.random(4, 2, density=0.5, random_state=1).toarray()
    x = np.ones((4, 2))
    np.testing.assert_array_equal(pb.jit(f)(x), f(x))  # SciPy makes a RandomState(seed), which draws fresh entropy first


def test_jit_allows_an_unscrambled_sobol_sequence_made_inside():
    """Deterministic points: SciPy makes a generator from fresh entropy but never draws from it."""
    qmc = pytest.importorskip("scipy.stats.qmc")
    f = lambda x: x + qmc.Sobol(2, scramble=False).random(4)
    x = np.ones((4, 2))
    np.testing.assert_array_equal(pb.jit(f)(x), f(x))
