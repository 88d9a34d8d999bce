"""pb.jit composed with the rest of the library on realistic code: training steps with random
draws and guards, derivatives of jitted functions and jitted derivatives, and results of the
types an eager call gives. Each case compares the jitted call with the same call made eagerly."""

import numpy as np
import pytest

import pullback as pb

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
