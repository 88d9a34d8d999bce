"""Jacobians of forward-only operations, memmap arguments' result types, SciPy Cholesky solves under
pb.jit, and pb.jit's handling of generators made inside the function, written arguments, set arguments,
traced values stored outside the arguments, and unused draws: each compared with the eager call."""
import copy
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


# --- draws from a generator argument that give a Python number ------------------------------------

def _eager_and_jitted(f, make_args, calls=3):
    """[(f's result, pb.jit(f)'s result)] for `calls` calls, each with fresh arguments made alike."""
    jf = pb.jit(f)
    return [(f(*make_args(i)), jf(*make_args(i))) for i in range(calls)]


@pytest.mark.parametrize("draw", ["random", "normal", "standard_normal", "uniform", "exponential"])
def test_jit_scalar_draw_keeps_python_float_weak_typing(draw):
    # Generator.random() and friends return a Python float, weakly typed beside float32 arrays (NEP 50)
    def f(x, rng):
        return x * getattr(rng, draw)()

    for eager, jitted in _eager_and_jitted(f, lambda i: (np.ones(3, np.float32), np.random.default_rng(i))):
        assert eager.dtype == jitted.dtype == np.float32
        np.testing.assert_array_equal(jitted, eager)


def test_jit_scalar_integer_and_boolean_draws_keep_python_weak_typing():
    def f(x, rng):
        return x + rng.binomial(10, 0.5), x * rng.choice(5), x + rng.integers(2, dtype=bool)

    for eager, jitted in _eager_and_jitted(f, lambda i: (np.ones(3, np.int8), np.random.default_rng(i)), calls=5):
        assert [a.dtype for a in jitted] == [a.dtype for a in eager] == [np.int8] * 3
        for got, want in zip(jitted, eager):
            np.testing.assert_array_equal(got, want)


def test_jit_scalar_draw_returned_is_a_python_float_drawn_afresh():
    def f(x, rng):
        return x, rng.random()

    results = _eager_and_jitted(f, lambda i: (np.ones(2), np.random.default_rng(i)))
    for eager, jitted in results:
        assert type(jitted[1]) is type(eager[1]) is float
        assert jitted[1] == eager[1]
    assert len({jitted[1] for _, jitted in results}) == 3


def test_jit_generator_bytes_is_refused_naming_an_array_draw():
    # a bytes object cannot be drawn afresh by a replay (each replay would give the trace's bytes)
    def f(x, rng):
        return x + np.frombuffer(rng.bytes(8), dtype=np.uint8)

    with pytest.raises(pb.JitError, match=r"Generator\.bytes.*integers"):
        pb.jit(f)(np.ones(8), np.random.default_rng(3))


def test_jit_generator_shuffle_draws_as_numpy_does_and_leaves_the_argument_alone():
    def f(x, rng):
        y = x * 1.0
        rng.shuffle(y)
        return y

    x = np.arange(5.0)
    jf, rng, reference = pb.jit(f), np.random.default_rng(0), np.random.default_rng(0)
    for _ in range(3):  # the trace, then replays: each draws a fresh permutation
        np.testing.assert_array_equal(jf(x, rng), f(x, reference))
    assert rng.bit_generator.state == reference.bit_generator.state
    np.testing.assert_array_equal(x, np.arange(5.0))


# --- copies inside the function -------------------------------------------------------------------

def test_jit_deepcopy_of_arguments_inside_the_function():
    def f(params, x, n):
        new = copy.deepcopy(params)
        new["w"] = new["w"] - 0.1 * x * copy.copy(n)
        new["w"][0] = 7.0  # a copy: params["w"] is not written
        return new, params["w"] + 0.0

    jf = pb.jit(f)
    for k in range(3):
        params, x = {"w": np.ones(2) * k}, np.arange(2.0)
        (got, w), (want, w_eager) = jf(params, x, 2.0 + k), f({"w": np.ones(2) * k}, x, 2.0 + k)
        np.testing.assert_array_equal(got["w"], want["w"])
        np.testing.assert_array_equal(w, w_eager)
        np.testing.assert_array_equal(params["w"], np.ones(2) * k)
    assert jf.cache_info().traces == 1


def test_jit_copy_of_a_generator_argument_is_refused():
    with pytest.raises(pb.JitError, match="copy"):
        pb.jit(lambda x, rng: x + copy.deepcopy(rng).random())(np.ones(2), np.random.default_rng(0))


# --- ndarray methods and attributes of a traced array ---------------------------------------------

def _replayed_as_eager(f, *make, calls=3):
    """pb.jit(f) called on arguments made by each of `make`, against f on the same, for `calls` rounds."""
    jf = pb.jit(f)
    for _ in range(calls):
        for m in make:
            got, want = jf(m()), f(m())
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                assert type(g) is type(w)
                np.testing.assert_array_equal(g, w)
                assert np.asarray(g).dtype == np.asarray(w).dtype
    return jf


def test_jit_ndarray_view_method():
    _replayed_as_eager(lambda x: (x.view() * 2, x.view(np.int64) & 1, x.view(np.ndarray) + 1.0),
                       lambda: np.arange(3.0), lambda: np.array([0.5, 2.0, -1.0]))

    def written_through_a_view(x):
        y = x * 1.0
        v = y.view()
        v[0] = 5.0
        return y

    _replayed_as_eager(written_through_a_view, lambda: np.arange(3.0))
    with pytest.raises(pb.JitError, match="subclass"):
        pb.jit(lambda x: x.view(np.recarray))(np.arange(3.0))


def test_jit_clip_with_one_bound():
    x = lambda: np.array([0.1, 0.7, 0.4])  # noqa: E731
    _replayed_as_eager(lambda x: (x.clip(0.2), x.clip(max=0.5), x.clip(0.2, 0.5)), x)


def test_jit_format_spec_of_a_traced_value_is_a_guard():
    def f(x):
        return x * len(f"{x.sum():.3f}")

    jf = _replayed_as_eager(f, lambda: np.array([0.1, 0.7]), lambda: np.array([10.1, 0.7]))
    assert jf.cache_info().traces == 2  # "0.800" and "10.800": another text, another trace


def test_jit_round_divmod_and_flat():
    x = lambda: np.array([0.12, 0.74, 0.41])  # noqa: E731
    _replayed_as_eager(lambda x: x * round(x.sum(), 1), x, lambda: np.array([1.25, 0.5, 2.0]))
    _replayed_as_eager(lambda x: x + round(x[1]), x)
    _replayed_as_eager(lambda x: divmod(x, 0.3) + divmod(2.0, x), x)
    _replayed_as_eager(lambda x: (x * x.flat[1], x.flat[::2] + 0.0, sum(x.flat)), x)
    with pytest.raises(TypeError, match="__round__"):
        pb.jit(lambda x: round(x))(x())

    def flat_writes(x):
        y = x.reshape(3, 1) * 1.0
        y.flat[::2] = 0.0
        z = x * 2.0
        z.flat = [1.0, 2.0]
        return y, z

    _replayed_as_eager(flat_writes, x)


def test_jit_put_method_writes_as_np_put():
    def f(x):
        x.put([0, 2], [9.0, 8.0])
        y = x * 1.0
        y.put(1, -1.0, mode="clip")
        return y

    jf = pb.jit(f)
    for _ in range(3):
        x1 = np.arange(4.0)
        x2 = x1.copy()
        np.testing.assert_array_equal(jf(x2), f(x1))
        np.testing.assert_array_equal(x2, x1)


def test_jit_flags_strides_device_and_shape():
    def f(x):
        y = x.T * 2.0
        z = x * 1.0
        z.shape = (x.size,)
        return (y if y.flags.c_contiguous else y + 1.0), z, x.strides[0] * x[0, 0], x.device == "cpu", len(x.tobytes())

    _replayed_as_eager(f, lambda: np.ones((2, 2)), lambda: np.arange(6.0).reshape(3, 2))
    with pytest.raises(pb.JitError, match="flags"):
        pb.jit(lambda x: setattr(x.flags, "writeable", False))(np.ones(2))


@pytest.mark.parametrize("construct, fn", [
    ("base", lambda x: x if x.base is None else x.copy()),
    ("data", lambda x: x * len(bytes(x.data))),
    ("resize", lambda x: x.resize(4)),
    ("shape", lambda x: setattr(x, "shape", (2, 1))),
])
def test_jit_memory_of_a_traced_array_is_refused_naming_it(construct, fn):
    with pytest.raises(pb.JitError, match=construct):
        pb.jit(fn)(np.ones(2))


# --- attributes written and methods that return the array itself ------------------------------------

@pytest.mark.parametrize("dtype", [np.complex128, np.complex64, np.float64])
def test_jit_real_and_imag_setters_write_as_numpy_does(dtype):
    def set_real(z, v):
        z = z * 1.0
        z.real = v
        return z

    def set_imag(z, v):
        z = z * 1.0
        z.imag = v
        return z

    z = (np.array([1.0 + 2.0j, 3.0 - 1.0j]) if np.dtype(dtype).kind == "c" else np.array([1.0, 3.0])).astype(dtype)
    v = np.array([0.5, -2.0])
    setters = [set_real, set_imag] if np.dtype(dtype).kind == "c" else [set_real]
    for f in setters:
        got, want = pb.jit(f)(z, v), f(z, v)
        np.testing.assert_array_equal(got, want, strict=True)
        loss = lambda z, v, f=f: np.sum(np.abs(f(z, v)) ** 2)  # noqa: E731
        for g_jit, g_eager in zip(pb.jit(lambda z, v: pb.gradient(loss, z, v))(z, v), pb.gradient(loss, z, v)):
            np.testing.assert_allclose(g_jit, g_eager, rtol=1e-6)
    if np.dtype(dtype).kind != "c":
        with pytest.raises(TypeError, match="imaginary part"):
            pb.jit(set_imag)(z, v)


def test_jit_conj_of_a_real_array_is_the_array_so_products_take_numpys_path():
    # NumPy's x.conj() of a real x is x itself, and x @ x.T of one buffer is computed as a symmetric
    # product: a copy in its place would give a result that differs in the last bits
    f = lambda x: x @ x.conj().T  # noqa: E731
    for shape in [(20, 30), (3, 200)]:  # sizes where NumPy's two products differ
        x = np.random.default_rng(0).standard_normal(shape)
        np.testing.assert_array_equal(pb.jit(f)(x), f(x))
    z = x + 1j * x[::-1]
    np.testing.assert_array_equal(pb.jit(lambda z: z.conj() * 2.0)(z), z.conj() * 2.0)


@pytest.mark.parametrize("f", [
    lambda x: np.sum(x * [0.0, 1.0]),
    lambda x: np.sum(x + (1.0, 2.0)),
    lambda x: np.sum([2.0, 3.0] * x),
    lambda x: np.sum(x ** [1.0, 2.0]),
    lambda x: np.sum([1.0, 2.0] / x),
    lambda x: np.average(x, weights=[1.0, 3.0]),
], ids=["x * list", "x + tuple", "list * x", "x ** list", "list / x", "average weights list"])
def test_jit_gradient_through_an_operator_with_a_list_operand_is_not_lost(f):
    # an array stand-in meeting a list once lost its tracking: the jitted gradient was None
    x = np.array([1.5, 0.5])
    (eager,) = pb.gradient(f, x)
    np.testing.assert_allclose(pb.jit(pb.grad(f))(x), eager, rtol=1e-12)
    np.testing.assert_allclose(pb.jit(f)(x), f(x), rtol=1e-12)


def test_jit_python_number_times_a_list_raises_pythons_error():
    with pytest.raises(TypeError, match="can't multiply sequence"):
        pb.jit(lambda s: s * [1.0, 2.0])(2.0)
    assert pb.jit(lambda s: s * [1, 2])(2) == [1, 2, 1, 2]
