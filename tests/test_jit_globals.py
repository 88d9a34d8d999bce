"""pb.jit and the values a function reads from its globals and closures: a replay equals the eager call.

A global or closure variable the traced function reads (directly, or through the plain Python
functions it calls) that is rebound between calls makes the next call trace again, as a failed
guard does; an array read that way and written into between calls is followed where pb.jit can
check it (see docs/jit.md, "What a jitted function must do").
"""

import sys
import types

import numpy as np
import pytest

import pullback as pb
from pullback import _jit_watch

THIS = sys.modules[__name__]

SCALE = 1.0
OFFSET = np.zeros(3)
LR = 0.1
SMALL = np.ones(3)
LARGE = np.ones(_jit_watch.SNAPSHOT_ELEMENTS + 1)
CONFIG = {"lr": 0.1}


class Settings:
    def __init__(self, scale, weights):
        self.scale = scale
        self.weights = weights


SETTINGS = Settings(2.0, np.ones(3))


def activation(x):
    return np.tanh(x)


def scaled(x):
    return x * SCALE


def loss(w):
    return np.sum(w * w) * LR


def check(jitted, eager, *args):
    """The jitted call equals the eager one (same function, no pb.jit), bit for bit."""
    got, want = jitted(*args), eager(*args)
    np.testing.assert_array_equal(got, want)
    return got


X = np.arange(3.0)


def test_a_rebound_global_float_retraces(monkeypatch):
    fn = lambda x: x * SCALE  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    check(jf, fn, X)
    monkeypatch.setattr(THIS, "SCALE", 3.0)
    np.testing.assert_array_equal(check(jf, fn, X), [0.0, 3.0, 6.0])
    assert jf.cache_info()[:3] == (2, 1, 1)


def test_a_rebound_global_array_retraces(monkeypatch):
    fn = lambda x: x + OFFSET  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    check(jf, fn, X)
    monkeypatch.setattr(THIS, "OFFSET", np.full(3, 5.0))
    np.testing.assert_array_equal(check(jf, fn, X), X + 5.0)


def test_a_closure_cell_rebound_with_nonlocal_retraces():
    def make():
        k = 1.0

        def f(x):
            return x * k

        def set_k(value):
            nonlocal k
            k = value

        return f, set_k

    fn, set_k = make()
    jf = pb.jit(fn)
    check(jf, fn, X)
    check(jf, fn, X)
    set_k(4.0)
    np.testing.assert_array_equal(check(jf, fn, X), X * 4.0)
    set_k(np.float32(2.0))  # another type: another trace, with NumPy's own promotion
    check(jf, fn, X)
    assert jf.cache_info().traces == 3


def test_a_global_read_by_a_called_function_retraces(monkeypatch):
    fn = lambda x: pb.gradient(lambda x: np.sum(scaled(x) ** 2), x)[0]  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    monkeypatch.setattr(THIS, "SCALE", 0.5)
    check(jf, fn, X)
    check(jf, fn, X)
    assert jf.cache_info()[:3] == (2, 1, 1)


def test_a_monkeypatched_function_retraces(monkeypatch):
    fn = lambda x: activation(x) * 2.0  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    monkeypatch.setattr(THIS, "activation", np.sin)
    np.testing.assert_array_equal(check(jf, fn, X), np.sin(X) * 2.0)


def test_a_learning_rate_schedule_in_a_global_is_followed_through_a_gradient(monkeypatch):
    step = lambda w: w - pb.gradient(loss, w)[0]  # noqa: E731
    jitted = pb.jit(step)
    w_jit = w_eager = np.array([1.0, -2.0, 3.0])
    for epoch in range(6):
        monkeypatch.setattr(THIS, "LR", 0.1 * 0.5 ** (epoch // 2))  # a new float object every epoch
        w_jit, w_eager = jitted(w_jit), step(w_eager)
        np.testing.assert_array_equal(w_jit, w_eager)
    # three distinct rates: the equal values recomputed at each epoch reuse their trace
    assert jitted.cache_info().traces == 3


def test_a_function_wrapped_by_pullback_or_functools_is_followed(monkeypatch):
    import functools

    grad_of_loss = pb.grad(loss)  # a closure of pullback's, holding `loss`
    scaled_by = functools.partial(lambda k, x: scaled(x) * k, 2.0)
    fn = lambda w: grad_of_loss(w) + scaled_by(w)  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    monkeypatch.setattr(THIS, "LR", 0.7)
    check(jf, fn, X)
    monkeypatch.setattr(THIS, "SCALE", 0.25)
    check(jf, fn, X)
    assert jf.cache_info().traces == 3


def test_unchanged_globals_do_not_retrace(monkeypatch):
    fn = lambda x: pb.gradient(lambda x: np.sum(activation(scaled(x)) * SMALL), x)[0]  # noqa: E731
    jf = pb.jit(fn)
    for _ in range(5):
        check(jf, fn, X)
    monkeypatch.setattr(THIS, "SCALE", float("1.0"))  # rebound to an equal number: no new trace
    monkeypatch.setattr(THIS, "UNRELATED", 5.0, raising=False)  # a global it does not read
    check(jf, fn, X)
    assert jf.cache_info()[:3] == (1, 5, 0)


def test_a_global_that_changes_at_every_call_is_named_in_a_warning(monkeypatch):
    fn = lambda x: scaled(x) + 1.0  # noqa: E731
    jf = pb.jit(fn)
    with pytest.warns(RuntimeWarning, match="`SCALE` \\(a global that scaled reads\\)") as caught:
        for k in range(12):
            monkeypatch.setattr(THIS, "SCALE", float(k))
            check(jf, fn, X)
    assert len([w for w in caught if "pb.jit" in str(w.message)]) == 1  # once
    assert jf.cache_info().traces == 12


def test_a_deleted_global_raises_as_the_eager_call_does(monkeypatch):
    monkeypatch.setattr(THIS, "TEMPORARY", 2.0, raising=False)
    fn = lambda x: x * TEMPORARY  # noqa: E731, F821
    jf = pb.jit(fn)
    check(jf, fn, X)
    monkeypatch.delattr(THIS, "TEMPORARY")
    with pytest.raises(NameError):
        jf(X)


def test_a_small_global_array_written_in_place_retraces(monkeypatch):
    c = SMALL.copy()
    monkeypatch.setattr(THIS, "SMALL", c)
    derived = lambda x: x * np.sum(SMALL)  # noqa: E731  # np.sum(SMALL) is computed during the trace
    direct = lambda x: x * SMALL  # noqa: E731  # SMALL is an operand of a traced call
    jd, jr = pb.jit(derived), pb.jit(direct)
    check(jd, derived, X), check(jr, direct, X)
    c[:] = 2.0
    np.testing.assert_array_equal(check(jd, derived, X), X * 6.0)
    np.testing.assert_array_equal(check(jr, direct, X), X * 2.0)
    c[1] = np.nan  # a NaN is compared by its bits, so an unchanged NaN does not retrace
    check(jd, derived, X), check(jd, derived, X), check(jr, direct, X), check(jr, direct, X)
    assert jd.cache_info().traces == jr.cache_info().traces == 3


def test_a_small_array_reached_through_an_object_or_a_closure_is_checked():
    weights = np.ones(3)
    fn = lambda x: x * np.sum(weights) + SETTINGS.weights  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    weights[0] = 5.0
    check(jf, fn, X)
    SETTINGS.weights[1] = 7.0
    try:
        check(jf, fn, X)
    finally:
        SETTINGS.weights[1] = 1.0
    assert jf.cache_info().traces == 3


def test_a_large_array_is_read_by_reference_where_it_is_an_operand():
    # Writes into arrays larger than the snapshot limit are not checked (docs/jit.md): a replay
    # reads such an array where the trace used it as an operand of a traced call.
    fn = lambda x: x[:1] * LARGE  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X), check(jf, fn, X)
    LARGE[:] = 3.0
    try:
        check(jf, fn, X)
    finally:
        LARGE[:] = 1.0
    assert jf.cache_info().traces == 1


def test_an_attribute_or_a_dict_entry_of_a_global_that_the_code_names_is_followed(monkeypatch):
    fn = lambda x: x * SETTINGS.scale - CONFIG["lr"]  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    monkeypatch.setattr(SETTINGS, "scale", 5.0)
    check(jf, fn, X)
    monkeypatch.setitem(CONFIG, "lr", 0.25)
    check(jf, fn, X)
    check(jf, fn, X)
    assert jf.cache_info()[:3] == (3, 1, 2)


def test_a_bound_method_s_attributes_are_followed():
    class Trainer:
        def __init__(self):
            self.lr = 0.1

        def step(self, w):
            return w - self.lr * pb.gradient(loss, w)[0]

    trainer = Trainer()
    jf = pb.jit(trainer.step)
    check(jf, trainer.step, X)
    trainer.lr = 0.01
    check(jf, trainer.step, X)
    assert jf.cache_info().traces == 2


def test_class_attributes_and_methods_called_through_self_are_followed(monkeypatch):
    class Model:
        factor = 2.0

        def helper(self, x):
            return scaled(x) * self.factor

        def __call__(self, x):
            return self.helper(x) + 1.0

    model = Model()
    fn = lambda x: model(x)  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    monkeypatch.setattr(Model, "factor", 3.0)  # a class attribute
    check(jf, fn, X)
    monkeypatch.setattr(THIS, "SCALE", 0.5)  # a global read by a method called through self
    check(jf, fn, X)
    check(jf, fn, X)
    assert jf.cache_info()[:3] == (3, 1, 2)


def test_the_items_of_a_short_global_list_are_followed():
    layers = [np.tanh, np.sin]

    def fn(x):
        for layer in layers:
            x = layer(x)
        return x

    jf = pb.jit(fn)
    check(jf, fn, X)
    layers[1] = np.cos  # an item rebound
    check(jf, fn, X)
    layers.append(np.exp)  # the list grown: the trace's loop ran twice
    check(jf, fn, X)
    check(jf, fn, X)
    assert jf.cache_info()[:3] == (3, 1, 2)


def test_a_pullback_model_held_in_a_global_is_followed(monkeypatch):
    rng = np.random.default_rng(0)
    model = pb.nn.Chain(pb.nn.Dense(3, 4, pb.nn.relu, rng=rng), pb.nn.Dense(4, 2, rng=rng))
    monkeypatch.setattr(THIS, "MODEL", model, raising=False)
    fn = lambda x: pb.gradient(lambda x: np.sum(MODEL(x) ** 2), x)[0]  # noqa: E731, F821
    jf = pb.jit(fn)
    xs = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    check(jf, fn, xs)
    model.layers[0].weight[0, 0] += 1.0  # a write into a weight, read by pullback's own code
    check(jf, fn, xs)
    model.layers[1].weight = model.layers[1].weight * 2.0  # an attribute rebound (the code never names it)
    check(jf, fn, xs)
    check(jf, fn, xs)
    assert jf.cache_info()[:3] == (3, 1, 2)


def test_a_jitted_function_called_inside_another_is_followed(monkeypatch):
    inner = pb.jit(lambda x: x * SCALE)
    fn = lambda x: inner(x) + 1.0  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    monkeypatch.setattr(THIS, "SCALE", 2.0)
    np.testing.assert_array_equal(check(jf, fn, X), X * 2.0 + 1.0)  # the eager call runs `inner` jitted
    assert jf.cache_info().traces == inner.cache_info().traces == 2


def test_functions_of_pullback_and_numpy_are_not_walked():
    fn = lambda x: pb.gradient(lambda x: np.sum(np.tanh(x)), x)[0]  # noqa: E731
    watched = _jit_watch.collect(fn)
    # only the two module names the lambda reads: `pb` and `np`
    assert sorted(name for _, name, _ in watched.entries) == ["np", "pb"]
    assert all(isinstance(value, types.ModuleType) for _, _, value in watched.entries)


def test_a_written_argument_that_is_also_a_global_is_refused_before_the_function_raises():
    # the trace reads the global's old value (a stand-in's write is not NumPy's) and raises where the eager call,
    # which sees the write through the global, does not: refused, as the same argument is when nothing raises
    source = (
        "import numpy as np\n"
        "g = np.ones(4)\n"
        "def f(x):\n"
        "    x[...] = 0.0\n"
        "    if g.sum() != 0:\n"
        "        raise ValueError('stale global')\n"
        "    return x * 2.0\n"
    )
    namespace = {}
    exec(source, namespace)
    g, f = namespace["g"], namespace["f"]
    np.testing.assert_array_equal(f(g), np.zeros(4))  # the eager call: g is x, so g.sum() sees the write
    g[...] = 1.0
    with pytest.raises(pb.JitError, match="reads outside its arguments"):
        pb.jit(f)(g)
    np.testing.assert_array_equal(g, np.ones(4))  # refused before anything was written
