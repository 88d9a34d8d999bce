"""pb.jit composed with the rest of the library on realistic code: training steps with random
draws and guards, derivatives of jitted functions and jitted derivatives, and results of the
types an eager call gives. Each case compares the jitted call with the same call made eagerly."""

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient

optim = pb.optim
nn = pb.nn


def _state(rng):
    return rng.bit_generator.state["state"]


def test_generator_not_advanced_twice_when_a_guard_fails_after_a_draw():
    # A replay draws from the caller's generator, then a guard fails and the call is traced
    # again, drawing a second time: the generator drifts away from the eager sequence.
    def f(r, x):
        noise = r.normal(size=3)
        return noise + x * float(np.sum(x))  # float(...) is a guard

    jf = pb.jit(f)
    r_eager, r_jit = np.random.default_rng(0), np.random.default_rng(0)
    for x in (np.ones(3), 2 * np.ones(3), 3 * np.ones(3)):
        expected = f(r_eager, x.copy())
        got = jf(r_jit, x.copy())
        np.testing.assert_allclose(got, expected, rtol=1e-12)
        assert _state(r_jit) == _state(r_eager)


def test_dropout_with_clipnorm_training_step_matches_eager():
    # Realistic form of the above: ClipNorm's float(norm) is a guard that fails at every step,
    # so each jitted step draws the dropout mask twice.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 3)).astype(np.float32)
    y = rng.normal(size=(8, 1)).astype(np.float32)

    def make():
        return nn.Chain(nn.Dense(3, 16, nn.relu, rng=np.random.default_rng(1)),
                        nn.Dropout(0.5, rng=np.random.default_rng(7)),
                        nn.Dense(16, 1, rng=np.random.default_rng(2)))

    def step(state, model, x, y):
        val, (g,) = pb.withgradient(lambda m: nn.mse(m(x), y), model)
        state, model = optim.update(state, model, g)
        return state, model, val

    rule = optim.OptimiserChain(optim.ClipNorm(0.1), optim.Adam(0.01))
    me, mj = make(), make()
    se, sj = optim.setup(rule, me), optim.setup(rule, mj)
    jstep = pb.jit(step)
    for i in range(4):
        xi = x * (1 + 0.1 * i)
        se, me, ve = step(se, me, xi.copy(), y.copy())
        sj, mj, vj = jstep(sj, mj, xi.copy(), y.copy())
        np.testing.assert_allclose(vj, ve, rtol=1e-5)
        assert _state(mj.layers[1].rng) == _state(me.layers[1].rng), f"dropout generator drifted at step {i}"
        for a, b in ((mj.layers[0].weight, me.layers[0].weight), (mj.layers[2].weight, me.layers[2].weight)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_random_augmentation_branch_keeps_generator_in_step():
    # `if rng.random() < p:` after the draw is a guard; when it fails the replay has already
    # drawn, and the trace draws again.
    def augment(r, x):
        if r.random() < 0.5:
            x = x[::-1]
        return x * 2.0

    jaug = pb.jit(augment)
    r_eager, r_jit = np.random.default_rng(1), np.random.default_rng(1)
    for i in range(8):
        x = np.arange(4.0) + i
        np.testing.assert_array_equal(jaug(r_jit, x.copy()), augment(r_eager, x.copy()))
        assert _state(r_jit) == _state(r_eager), f"generator drifted at call {i}"


def test_gradient_of_jitted_function_with_a_data_argument():
    # The differentiated argument is a pullback tracked value (not a jit input) and the data
    # array is a jit input: the trace mixes the two and hands trace Symbols back to the tape.
    f = lambda w, x: np.sum(np.sin(w) * x)
    jf = pb.jit(f)
    x, w = np.array([1.0, 2.0]), np.array([1.0, 1.0])
    ve, (ge,) = pb.withgradient(lambda w: f(w, x), w.copy())
    vj, (gj,) = pb.withgradient(lambda w: jf(w, x), w.copy())
    assert isinstance(gj, np.ndarray), type(gj)  # a Symbol
    np.testing.assert_allclose(gj, ge)
    np.testing.assert_allclose(vj, ve)


def test_jitted_function_called_twice_inside_gradient_with_different_data():
    f = lambda w, x: np.sum(w * x)
    jf = pb.jit(f)
    x1, x2, w = np.array([1.0, 2.0]), np.array([10.0, 20.0]), np.array([1.0, 1.0])
    ve, (ge,) = pb.withgradient(lambda w: f(w, x1) + f(w, x2), w.copy())
    vj, (gj,) = pb.withgradient(lambda w: jf(w, x1) + jf(w, x2), w.copy())
    assert isinstance(gj, np.ndarray), type(gj)
    np.testing.assert_allclose(gj, ge)
    np.testing.assert_allclose(vj, ve)


def test_jvp_of_jitted_function_with_a_data_argument():
    f = lambda w, x: np.sum(np.sin(w) * x)
    jf = pb.jit(f)
    x, w = np.array([1.0, 2.0]), np.array([1.0, 1.0])
    ye, te = pb.jvp(lambda w: f(w, x), (w.copy(),), (x.copy(),))
    yj, tj = pb.jvp(lambda w: jf(w, x), (w.copy(),), (x.copy(),))
    assert isinstance(tj, (float, np.floating, np.ndarray)), type(tj)
    np.testing.assert_allclose(tj, te)
    np.testing.assert_allclose(yj, ye)


def test_gradient_of_zero_d_array_is_zero_d_array():
    f = lambda t: pb.gradient(lambda s: s ** 3, t)
    jf = pb.jit(f)
    for v in (2.0, 3.0):
        expected = f(np.array(v))
        got = jf(np.array(v))
        assert type(got[0]) is type(expected[0]) is np.ndarray, (type(got[0]), type(expected[0]))
        np.testing.assert_allclose(got[0], expected[0])


def test_update_of_zero_d_parameter_keeps_an_array_and_eager_steps_can_follow():
    def step(state, model, g):
        return optim.update(state, model, g)

    model = {"t": np.array(0.5), "w": np.ones(2)}
    g = {"t": np.array(0.25), "w": np.ones(2)}
    state = optim.setup(optim.Adam(0.1), model)
    se, me = step(state, {k: v.copy() for k, v in model.items()}, g)
    sj, mj = pb.jit(step)(optim.setup(optim.Adam(0.1), {k: v.copy() for k, v in model.items()}),
                          {k: v.copy() for k, v in model.items()}, g)
    assert type(me["t"]) is np.ndarray
    assert type(mj["t"]) is np.ndarray, type(mj["t"])  # np.float64 under pb.jit
    # an eager step after a jitted one (evaluation, a last step without jit) must still work
    optim.update(sj, mj, g)


def test_gradient_with_respect_to_python_float_argument_is_a_float():
    f = lambda t, x: pb.gradient(lambda s, y: np.sum(s * y ** 2), t, x)
    x = np.arange(1.0, 5.0)
    expected = f(2.0, x.copy())
    got = pb.jit(f)(2.0, x.copy())
    assert type(expected[0]) is float
    assert type(got[0]) is float, type(got[0])  # a 0-d array under pb.jit
    assert got[0] == expected[0]


def test_hessian_of_python_float_argument_is_a_float():
    f = lambda t: pb.hessian(lambda s: s ** 4, t)
    expected, got = f(2.0), pb.jit(f)(2.0)
    assert type(expected) is float
    assert type(got) is float, type(got)
    assert got == expected


def test_gradient_of_numpy_scalar_and_python_float_fields_keep_their_types():
    # README: "Python floats get floats"; NumPy scalars are values with their own derivative.
    def grads(m, x):
        return pb.gradient(lambda m: np.sum((m["w"] * x * m["s"] * m["f"] - 1) ** 2), m)[0]

    m = {"w": np.ones(2), "s": np.float64(0.5), "f": 0.5}
    x = np.array([1.0, 2.0])
    expected = grads(dict(m), x.copy())
    got = pb.jit(grads)(dict(m), x.copy())
    assert type(expected["s"]) is np.float64 and type(expected["f"]) is float
    assert (type(got["s"]), type(got["f"])) == (np.float64, float), (type(got["s"]), type(got["f"]))
    assert got["s"] == expected["s"] and got["f"] == expected["f"]


def test_guard_on_float_argument_distinguishes_negative_zero():
    import math

    f = lambda x, t: x * math.copysign(1.0, t)
    jf = pb.jit(f)
    x = np.arange(4.0)
    np.testing.assert_array_equal(jf(x, 0.0), f(x, 0.0))
    np.testing.assert_array_equal(jf(x, -0.0), f(x, -0.0))  # replays the trace for +0.0


def test_jacobian_of_complex_function_under_jit():
    f = lambda z: pb.jacobian(lambda z: z ** 2, z)
    z = np.arange(1.0, 4.0) + 1j * np.arange(1.0, 4.0)
    expected = f(z.copy())
    got = pb.jit(f)(z.copy())  # JitError naming np.asarray, raised by pullback's own _check_holomorphic
    np.testing.assert_allclose(got[0], expected[0])


def test_instance_attribute_shadowing_class_attribute_retraces():
    class Step:
        lr = 0.1

        def __call__(self, w, g):
            return w - self.lr * g

    s = Step()
    js = pb.jit(s)
    x = np.arange(4.0)
    np.testing.assert_allclose(js(x, x), s(x, x))
    s.lr = 0.5  # a hyperparameter set on the instance, over the class default
    np.testing.assert_allclose(js(x, x), s(x, x))


def test_attribute_of_object_default_argument_retraces():
    class Cfg:
        scale = 2.0

    cfg = Cfg()

    def f(x, c=cfg):
        return x * c.scale

    jf = pb.jit(f)
    x = np.arange(4.0)
    np.testing.assert_allclose(jf(x), f(x))
    cfg.scale = 5.0
    np.testing.assert_allclose(jf(x), f(x))


def test_entry_of_dict_default_argument_retraces():
    def f(x, cfg={"s": 2.0}):
        return x * cfg["s"]

    jf = pb.jit(f)
    x = np.arange(4.0)
    np.testing.assert_allclose(jf(x), f(x))
    f.__defaults__[0]["s"] = 5.0
    np.testing.assert_allclose(jf(x), f(x))


def test_set_argument_mutated_between_calls_retraces():
    # The signature holds "the value of every leaf that is neither an array, a Python number nor
    # a random generator"; an unhashable leaf (a set) is keyed by its identity instead, so a
    # change to its contents replays the old program.
    def step(w, g, frozen):
        return {k: (w[k] if k in frozen else w[k] - 0.1 * g[k]) for k in w}

    w = {"a": np.ones(2), "b": np.ones(2)}
    g = {"a": np.ones(2), "b": np.ones(2)}
    frozen = {"a"}
    jstep = pb.jit(step)
    for _ in range(2):
        expected, got = step(w, g, frozen), jstep(w, g, frozen)
        for k in w:
            np.testing.assert_allclose(got[k], expected[k])
        frozen.discard("a")
        frozen.add("b")


def test_pullback_returned_from_jit_gives_arrays():
    g = lambda x: np.tanh(np.outer(x, x)) @ x
    jv = pb.jit(lambda x: pb.vjp(g, x))
    rng = np.random.default_rng(0)
    for _ in range(2):
        x, v = rng.normal(size=3), rng.normal(size=3)
        try:
            y, back = jv(x.copy())
        except pb.JitError:
            return  # refusing to return a closure over the trace would be clear
        ye, back_e = pb.vjp(g, x.copy())
        np.testing.assert_allclose(y, ye)
        (got,) = back(v)  # a tuple of trace Symbols, not arrays
        assert isinstance(got, np.ndarray), type(got)
        np.testing.assert_allclose(got, back_e(v)[0])


def test_embedding_training_step_under_jit():
    # Embedding.__call__ does np.asarray(indices), so an index array passed to the jitted step
    # is refused with a JitError that names np.asarray (eager works).
    def make():
        return nn.Chain(nn.Embedding(10, 4, rng=np.random.default_rng(0)), nn.Dense(4, 1, rng=np.random.default_rng(1)))

    def step(state, model, idx):
        val, (g,) = pb.withgradient(lambda m: np.mean(m(idx) ** 2), model)
        state, model = optim.update(state, model, g)
        return state, model, val

    me, mj = make(), make()
    se, sj = optim.setup(optim.Adam(0.01), me), optim.setup(optim.Adam(0.01), mj)
    jstep = pb.jit(step)
    for i in range(3):
        idx = (np.arange(6).reshape(2, 3) + i) % 10
        se, me, ve = step(se, me, idx.copy())
        sj, mj, vj = jstep(sj, mj, idx.copy())
        np.testing.assert_allclose(vj, ve, rtol=1e-5)
        np.testing.assert_allclose(mj.layers[0].weight, me.layers[0].weight, rtol=1e-5, atol=1e-6)


def test_jit_as_method_decorator():
    class Model:
        def __init__(self):
            self.w, self.s = np.ones(3), 2.0

        def plain(self, x):
            return x * self.w * self.s

        jitted = pb.jit(plain)

    m = Model()
    x = np.arange(3.0)
    np.testing.assert_allclose(m.jitted(x), m.plain(x))  # TypeError: missing argument 'x'


def test_generator_created_inside_is_not_replayed_as_constant_draws():
    # np.random.default_rng() inside the function draws fresh numbers at each eager call; the
    # replay must not hand back the trace's draws every time (or it must refuse, as it refuses
    # draws from generators reached through globals and closures).
    jf = pb.jit(lambda x: x + np.random.default_rng().normal(size=3))
    x = np.zeros(3)
    try:
        a, b, c = jf(x), jf(x), jf(x)
    except pb.JitError:
        return
    assert not (np.array_equal(a, b) and np.array_equal(b, c)), "every call returned the same 'random' numbers"


def test_spawned_generator_draws_match_eager():
    f = lambda r, x: x + r.spawn(1)[0].normal(size=3)
    jf = pb.jit(f)
    r_eager, r_jit = np.random.default_rng(0), np.random.default_rng(0)
    for _ in range(3):
        x = np.zeros(3)
        try:
            got = jf(r_jit, x.copy())
        except pb.JitError:
            return  # refusing is acceptable; replaying the trace's draws is not
        np.testing.assert_allclose(got, f(r_eager, x.copy()), rtol=1e-12)


def test_bit_generator_random_raw_draws_match_eager():
    f = lambda r, x: x + r.bit_generator.random_raw(2)
    jf = pb.jit(f)
    r_eager, r_jit = np.random.default_rng(0), np.random.default_rng(0)
    for _ in range(3):
        x = np.zeros(2)
        try:
            got = jf(r_jit, x.copy())
        except pb.JitError:
            return
        np.testing.assert_array_equal(got, f(r_eager, x.copy()))
        assert _state(r_jit) == _state(r_eager)


def test_seeding_a_generator_from_a_python_int_argument():
    # Eager works; under pb.jit NumPy gets the traced stand-in and raises
    # "TypeError: SeedSequence expects int ... not 1".
    f = lambda seed, x: x + np.random.default_rng(seed).normal(size=3)
    jf = pb.jit(f)
    for seed in (1, 2, 1):
        x = np.zeros(3)
        np.testing.assert_array_equal(jf(seed, x.copy()), f(seed, x.copy()))


def test_training_a_global_batchnorm_model_is_refused_with_a_clear_error():
    # Running statistics of a model held in a global are plain arrays written inside the trace.
    # The docs say such a write raises pb.JitError; the message should say so (it names
    # np.asarray, which the user never called).
    model = nn.Chain(nn.Dense(3, 4, rng=np.random.default_rng(1)), nn.BatchNorm(4),
                     nn.Dense(4, 1, rng=np.random.default_rng(2)))
    x = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
    step = pb.jit(lambda x: pb.withgradient(lambda m: np.mean(m(x) ** 2), model))
    with pytest.raises(pb.JitError) as info:
        step(x)
    assert "asarray" not in str(info.value) and "writ" in str(info.value), str(info.value)


def test_one_hot_of_label_argument_by_indexing_gives_a_clear_error_or_works():
    # np.eye(n)[labels] is the common one-hot idiom; eager works. Under pb.jit the label
    # argument is refused with a message about np.asarray / np.array, which the code never calls.
    def loss(w, x, labels):
        return np.mean((x @ w - np.eye(3)[labels]) ** 2)

    f = lambda w, x, labels: pb.withgradient(loss, w, x, labels)
    w, x, labels = np.ones((4, 3)), np.ones((2, 4)), np.array([0, 2])
    expected = f(w.copy(), x.copy(), labels.copy())
    try:
        got = pb.jit(f)(w.copy(), x.copy(), labels.copy())
    except pb.JitError as error:
        assert "index" in str(error), str(error)
        return
    np.testing.assert_allclose(got[1][0], expected[1][0])


def test_logging_loss_into_a_global_list_is_refused_or_followed():
    # The docs ask for a pure function; the argument-object rule is enforced with a JitError,
    # but appending to a list the function reads from a closure/global is silent: it happens at
    # the trace only, and what was appended is a trace Symbol, not the loss.
    history = []

    def step(w, x):
        loss = np.sum((w * x) ** 2)
        history.append(loss)
        return w - 0.1 * x, loss

    jstep = pb.jit(step)
    w = np.ones(3)
    try:
        for _ in range(3):
            w, _ = jstep(w, np.ones(3))
    except pb.JitError:
        return
    assert len(history) == 3, len(history)
    assert all(isinstance(h, (float, np.floating, np.ndarray)) for h in history), [type(h) for h in history]


def test_jitted_bound_method_that_updates_self_is_refused_or_followed():
    # A Trainer.step that stores the new weights on self: eager trains; under pb.jit the
    # attribute is set once, to a trace Symbol, and every later call replays the first step.
    class Trainer:
        def __init__(self):
            self.w = np.ones(3)
            self.steps = 0

        def step(self, x):
            val, (g,) = pb.withgradient(lambda w: np.sum((w * x) ** 2), self.w)
            self.w = self.w - 0.1 * g
            self.steps += 1
            return val

    te, tj = Trainer(), Trainer()
    jstep = pb.jit(tj.step)
    for _ in range(3):
        expected = te.step(np.ones(3))
        try:
            got = jstep(np.ones(3))
        except pb.JitError:
            return
        np.testing.assert_allclose(got, expected)
    assert type(tj.w) is np.ndarray, type(tj.w)
    np.testing.assert_allclose(tj.w, te.w)
    assert tj.steps == te.steps


def test_write_into_argument_seen_through_a_global_that_shares_its_memory():
    # Eager: the write into the argument is seen through the global (one memory). pb.jit
    # refuses arguments that share memory with each other when one is written; a global
    # sharing memory with a written argument silently reads the old values.
    holder = {}

    def f(a):
        a += 1.0
        return a + holder["g"]

    base_e, base_j = np.arange(5.0), np.arange(5.0)
    holder["g"] = base_e
    expected = f(base_e[:])
    holder["g"] = base_j
    try:
        got = pb.jit(f)(base_j[:])
    except pb.JitError:
        return
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(base_j, base_e)


def test_returned_argument_written_in_place_is_the_argument():
    # Eager: `a += 1; return a` returns the caller's array itself, so the result follows later
    # writes (a later call, or the caller writing `a`). Under pb.jit the result is a copy.
    def step(a):
        a += 1.0
        return a

    for fn in (step, pb.jit(step)):
        fn(np.zeros(3))  # trace first, so the checks below see a replay too
    results = {}
    for name, fn in (("eager", step), ("jit", pb.jit(step))):
        a = np.zeros(3)
        r1 = fn(a)
        r2 = fn(a)
        results[name] = (np.shares_memory(r1, a), r1.tolist(), r2.tolist(), a.tolist())
    assert results["jit"] == results["eager"], results


def test_returned_model_after_batchnorm_step_shares_running_statistics():
    import copy

    model = nn.Chain(nn.Dense(3, 4, rng=np.random.default_rng(1)), nn.BatchNorm(4))
    x = np.random.default_rng(0).normal(size=(8, 3))

    def step(m, x):
        val, (g,) = pb.withgradient(lambda m: np.mean(m(x) ** 2), m)
        return m, val

    me, mj = copy.deepcopy(model), copy.deepcopy(model)
    re, _ = step(me, x.copy())
    rj, _ = pb.jit(step)(mj, x.copy())
    assert np.shares_memory(re.layers[1].running_mean, me.layers[1].running_mean)
    assert np.shares_memory(rj.layers[1].running_mean, mj.layers[1].running_mean)


def test_a_nan_guard_replays_instead_of_tracing_again():
    # float(total) is a guard: NaN at the trace and NaN at the replay is the same outcome (it retraced every call)
    f = pb.jit(lambda x: x + float(np.sum(x)))
    x = np.array([1.0, np.nan])
    for _ in range(3):
        np.testing.assert_array_equal(f(x), [np.nan, np.nan])
    info = f.cache_info()
    assert (info.traces, info.replays, info.retraces) == (1, 2, 0)


def test_a_step_with_a_new_learning_rate_each_call_replays_and_matches_eager():
    # optim.adjust inside a jitted step: the learning rate is an input of the trace, not a guard
    model = {"w": np.array([0.5, -1.0, 2.0])}
    state = optim.setup(optim.Adam(), model)

    def step(model, state, lr):
        state = optim.adjust(state, lr=lr)
        g = pb.gradient(lambda m: np.sum(np.sin(m["w"]) ** 2), model)[0]
        return optim.update(state, model, g)

    jitted = pb.jit(step)
    eager_state, eager_model = state, model
    jit_state, jit_model = state, model
    for lr in (0.1, 0.05, 0.02, 0.01):
        eager_state, eager_model = step(eager_model, eager_state, lr)
        jit_state, jit_model = jitted(jit_model, jit_state, lr)
        np.testing.assert_allclose(jit_model["w"], eager_model["w"], rtol=1e-12)
    info = jitted.cache_info()
    assert (info.traces, info.retraces) == (1, 0)
    with pytest.raises(ValueError, match="finite number"):
        optim.adjust(state, lr=float("nan"))


# --- jitted gradients whose rules index with a traced integer array (labels, sort orders, counts, masks) -----

def _log_softmax_nll(L, lab):
    lp = L - np.log(np.sum(np.exp(L), axis=1, keepdims=True))
    return -np.mean(np.take_along_axis(lp, lab[:, None], axis=1))


def _nll_by_pairs(L, lab):
    return -np.mean(L[np.arange(L.shape[0]), lab])


@pytest.mark.parametrize("loss", [_log_softmax_nll, _nll_by_pairs], ids=["take_along_axis", "arange-pairs"])
def test_jit_of_cross_entropy_gradient_with_labels_argument(loss):
    # the labels are a stand-in under pb.jit: the gradient's np.add.at is recorded as NumPy's
    rng = np.random.default_rng(0)
    L = rng.standard_normal((4, 3))
    step = pb.jit(lambda L, lab: pb.gradient(loss, L, lab)[0])
    for lab in (np.array([0, 2, 1, 2]), np.array([1, 1, 0, 2])):
        np.testing.assert_allclose(step(L, lab), numerical_gradient(lambda L: loss(L, lab), L)[0], atol=1e-6)


@pytest.mark.parametrize("f", [lambda X: np.sort(X, axis=0),
                               lambda X: np.take_along_axis(X, np.argmax(X, axis=0)[None], axis=0)],
                         ids=["sort-axis-0", "take_along_axis-argmax"])
def test_jit_of_gradient_through_a_computed_order(f):
    X = np.random.default_rng(1).standard_normal((3, 4))
    w = np.arange(1.0, 1.0 + np.size(f(X))).reshape(np.shape(f(X)))
    loss = lambda X: np.sum(f(X) * w)  # noqa: E731
    g = pb.jit(lambda X: pb.gradient(loss, X)[0])
    for Y in (X, X[::-1] * 2.0):
        np.testing.assert_allclose(g(Y), numerical_gradient(loss, Y)[0], atol=1e-6)


def test_jit_of_derivatives_of_interp_with_plain_knots():
    x = np.array([-0.3, 0.2, 0.7, 0.45])
    xp, fp = np.array([-1.0, 0.0, 1.0]), np.array([0.0, 1.0, 3.0])
    f = lambda x: np.sum(np.interp(x, xp, fp) ** 2)  # noqa: E731
    g = pb.jit(lambda x: pb.gradient(f, x)[0])
    jv = pb.jit(lambda x: pb.jvp(lambda z: np.interp(z, xp, fp), (x,), (np.ones_like(x),))[1])
    for y in (x, x - 0.5):
        np.testing.assert_allclose(g(y), numerical_gradient(f, y)[0], atol=1e-6)
        np.testing.assert_allclose(jv(y), np.where(y < 0.0, 1.0, 2.0))


def test_jit_of_interp_with_period_and_knots_as_arguments():
    x, fp = np.array([-0.3, 0.2, 0.7, 0.45]), np.array([0.0, 1.0, 3.0])
    f = lambda x, xp: np.sum(np.interp(x, xp, fp, period=2.5) ** 2)  # noqa: E731
    g = pb.jit(lambda x, xp: pb.gradient(f, x, xp)[0])
    for xp in (np.array([-1.0, 0.0, 1.0]), np.array([1.1, 0.0, -1.1])):
        np.testing.assert_allclose(g(x, xp), numerical_gradient(lambda x: f(x, xp), x)[0], atol=1e-6)


@pytest.mark.parametrize("stat", [lambda X: np.nanmedian(X, axis=1),
                                  lambda X: np.nanquantile(X, [0.2, 0.7], axis=1, method="nearest"),
                                  lambda X: np.nanpercentile(X, 30, axis=0)],
                         ids=["nanmedian", "nanquantile", "nanpercentile"])
def test_jit_of_derivatives_of_nan_order_statistics(stat):
    # each line's positions follow its count of NaNs: another set of counts traces again
    X = np.random.default_rng(2).standard_normal((3, 4))
    X[0, 1] = np.nan
    other = X.copy()
    other[0, 1], other[2, 0] = 0.5, np.nan
    g = lambda X: pb.gradient(lambda X: np.sum(stat(X) ** 2), X)[0]  # noqa: E731
    jv = lambda X: pb.jvp(stat, (X,), (np.arange(12.0).reshape(3, 4),))[1]  # noqa: E731
    jg, jjv = pb.jit(g), pb.jit(jv)
    for Y in (X, other, X):
        finite = np.isfinite(Y)
        np.testing.assert_allclose(jg(Y)[finite], numerical_gradient(lambda Z: np.sum(stat(Z) ** 2), Y)[0][finite], atol=1e-6)
        np.testing.assert_allclose(jjv(Y), jv(Y))


def _place(x, i):
    y = x * 1.0
    np.place(y, y > 0, x[:2] ** 2)
    return y


def _setitem_unique(x, i):
    y = x * 1.0
    y[np.unique(i)] = 0.0
    return y


def _put_along(x, i):
    y = x * 1.0
    np.put_along_axis(y, np.unique(i), -x[:1], axis=0)
    return y


INTEGER_ARGUMENT_CASES = {
    "setitem-index": _setitem_unique,
    "put_along_axis": _put_along,
    "bincount-weights": lambda x, i: np.bincount(np.abs(i), weights=x[:3], minlength=3),
    "repeat-counts": lambda x, i: np.repeat(x[:3], np.abs(i)),
    "choose": lambda x, i: np.choose(np.abs(i) % 2, [x[:3], x[3:]]),
    "compress": lambda x, i: np.compress(np.arange(6) < np.abs(i[0]), x),
    "place-traced-mask": _place,
}


@pytest.mark.parametrize("fn", list(INTEGER_ARGUMENT_CASES.values()), ids=list(INTEGER_ARGUMENT_CASES))
def test_jit_of_gradient_with_integer_array_argument(fn):
    x = np.arange(6.0) * 0.7 - 1
    step = pb.jit(lambda x, i: pb.gradient(lambda z: np.sum(fn(z, i) ** 2), x)[0])
    for i in (np.array([0, 0, 5]), np.array([1, 2, 2]), np.array([-1, 0, -2])):
        np.testing.assert_allclose(step(x, i), numerical_gradient(lambda z: np.sum(fn(z, i) ** 2), x)[0], atol=1e-6)


def test_jit_of_gradient_of_a_weighted_covariance_with_the_weights_as_argument():
    X = np.random.default_rng(0).standard_normal((3, 6))
    loss = lambda X, w: np.sum(np.cov(X, aweights=w) ** 2)  # noqa: E731
    step = pb.jit(lambda X, w: pb.gradient(loss, X, w)[0])
    for w in (np.arange(1.0, 7.0), np.arange(6.0, 0.0, -1.0), np.arange(1.0, 7.0)):
        np.testing.assert_allclose(step(X, w), numerical_gradient(lambda Z: loss(Z, w), X)[0], atol=1e-6)


# --- one-hot labels: the forms the JitError names work under pb.jit --------------------------------


def _one_hot_by_take_along_axis(labels):
    return np.take_along_axis(np.eye(3), labels[:, None], axis=0)


def _one_hot_by_comparison(labels):
    return (labels[:, None] == np.arange(3)).astype(float)


@pytest.mark.parametrize("one_hot", [_one_hot_by_take_along_axis, _one_hot_by_comparison])
def test_the_one_hot_forms_the_jit_error_names_work(one_hot):
    def f(w, x, labels):
        return pb.withgradient(lambda w: np.mean((x @ w - one_hot(labels)) ** 2), w)

    rng = np.random.default_rng(0)
    w, x = rng.normal(size=(4, 3)), rng.normal(size=(2, 4))
    jitted = pb.jit(f)
    for labels in (np.array([0, 2]), np.array([1, 1]), np.array([2, 0])):
        val, (g,) = jitted(w.copy(), x.copy(), labels.copy())
        eager_val, (eager_g,) = f(w.copy(), x.copy(), labels.copy())
        np.testing.assert_array_equal(one_hot(labels), np.eye(3)[labels])
        np.testing.assert_allclose(val, eager_val, rtol=1e-12)
        np.testing.assert_allclose(g, eager_g, rtol=1e-12)
    assert jitted.cache_info().traces == 1


@pytest.mark.parametrize("pick", [lambda labels: np.eye(3)[labels], lambda labels: np.take(np.eye(3), labels, axis=0)],
                         ids=["indexing", "np.take"])
def test_a_plain_table_picked_by_traced_labels_is_refused_naming_a_form_that_works(pick):
    with pytest.raises(pb.JitError, match="take_along_axis"):
        pb.jit(lambda x, labels: x * pick(labels))(np.ones(3), np.array([0, 2]))


# --- argument objects returned as they are: the caller's own, as without pb.jit -----------------


def test_argument_objects_returned_as_they_are_are_the_caller_s_objects():
    # optim.update returns a new model sharing the parts it does not train (a Dropout layer, a list)
    def step(state, model):
        g, = pb.gradient(lambda m: np.sum(m["w"] ** 2), model)
        return optim.update(state, model, g)

    jstep = pb.jit(step)
    for _ in range(3):  # a trace, then replays, each with new objects
        history = []
        model = {"w": np.ones(3), "drop": nn.Dropout(0.5, rng=1), "history": history}
        state = optim.setup(optim.Descent(0.1), model)
        eager_state, eager_model = step(state, model)
        _, jit_model = jstep(state, model)
        assert eager_model["drop"] is model["drop"] and eager_model["history"] is history
        assert jit_model["drop"] is model["drop"] and jit_model["history"] is history
        np.testing.assert_array_equal(jit_model["w"], eager_model["w"])


def test_a_container_argument_returned_as_it_is_is_the_caller_s_at_every_call():
    def f(x, box):
        return x * 2.0, box, box["parts"]

    jitted = pb.jit(f)
    for k in range(3):
        box = {"parts": [np.full(2, float(k)), "name"], "rng": np.random.default_rng(k)}
        y, same, parts = jitted(np.ones(2), box)
        assert same is box and parts is box["parts"]
        np.testing.assert_array_equal(y, f(np.ones(2), box)[0])
    assert jitted.cache_info().traces == 1


# --- a jitted function reading a value being differentiated outside its arguments ------------------


def test_a_jitted_closure_over_a_value_being_differentiated_runs_as_it_is():
    x0 = np.array([1.0, 2.0])

    def f(x):  # sum(sin(x) * y) at y = 1, through a jitted closure over x
        return pb.jit(lambda y: np.sum(np.sin(x) * y))(np.ones(2))

    val, (g,) = pb.withgradient(f, x0)
    assert type(val) is type(f(x0)) and type(g) is np.ndarray
    assert float(val) == pytest.approx(np.sum(np.sin(x0)))
    np.testing.assert_allclose(g, np.cos(x0))
    np.testing.assert_allclose(g, numerical_gradient(f, x0)[0], rtol=1e-6)
    y, y_dot = pb.jvp(f, (x0,), (np.ones(2),))
    assert float(y) == pytest.approx(np.sum(np.sin(x0)))
    assert float(y_dot) == pytest.approx(np.sum(np.cos(x0)))


def test_siskind_pearlmutter_through_a_jitted_inner_gradient_closing_over_x():
    # d/dx sum(x * d/dy sum(x y^2)|_{y=1}) = d/dx sum(2 x^2) = 4x
    def f(x):
        inner = pb.jit(lambda y: pb.gradient(lambda y: np.sum(x * y * y), y)[0])
        return np.sum(x * inner(np.ones(2)))

    x0 = np.array([1.0, 2.0])
    (g,) = pb.gradient(f, x0)
    assert type(g) is np.ndarray
    np.testing.assert_allclose(g, 4 * x0)


_SCALE = [None]


def test_a_jitted_function_reading_a_global_being_differentiated_runs_as_it_is():
    jitted = pb.jit(lambda y: np.sum(np.sin(_SCALE[0]) * y))

    def f(x):
        _SCALE[0] = x
        try:
            return jitted(np.ones(2))
        finally:
            _SCALE[0] = None

    x0 = np.array([0.5, 1.5])
    _SCALE[0] = np.zeros(2)
    assert jitted(np.ones(2)) == 0.0  # traced with a plain array
    (g,) = pb.gradient(f, x0)
    np.testing.assert_allclose(g, np.cos(x0))
    _SCALE[0] = np.ones(2)
    assert jitted(np.ones(2)) == pytest.approx(2 * np.sin(1.0))


# --- jitted derivatives mixing a Python number argument with a differentiated Python float -----------

_JIT_NUMBER_CASES = {
    # a tangent given as a Python number argument: d sin(x) . v
    "jvp with a number tangent": (lambda x, v: pb.jvp(np.sin, (x,), (v,))[1], (1.0, 2.0)),
    # a cotangent given as a Python number argument: c * 2x
    "vjp with a number cotangent": (lambda x, c: pb.vjp(lambda x: x * x, x)[1](c)[0], (1.0, 2.0)),
    # the Hessian of x**3 times v: 6 x v
    "hvp of a float": (lambda x, v: pb.hvp(lambda x: x**3, x, v), (2.0, 0.5)),
    # d/dx (x * n) = n, with n an int
    "gradient of x * n": (lambda x, n: pb.gradient(lambda x: x * n, x)[0], (1.5, 2)),
    # d/dx (x**2 * lr) = 2 x lr
    "gradient of x * x * lr": (lambda x, lr: pb.gradient(lambda x: x * x * lr, x)[0], (1.5, 0.5)),
    # the argument closed over by a gradient at a Python float: d/dy (x y^2) at y = 1 is 2x
    "closure over a number argument": (lambda x: pb.gradient(lambda y: x * y * y, 1.0)[0], (2.0,)),
}


@pytest.mark.parametrize("case", sorted(_JIT_NUMBER_CASES))
def test_jit_of_a_derivative_with_a_number_argument_beside_a_differentiated_float(case):
    f, args = _JIT_NUMBER_CASES[case]
    jitted = pb.jit(f)
    for scale in (1.0, 1.0, 1.5):  # a trace, a replay, another value
        call = tuple(a * scale for a in args)
        expected = f(*call)
        got = jitted(*call)
        assert got == pytest.approx(expected, rel=1e-12) and type(got) is type(expected)
