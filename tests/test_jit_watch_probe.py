"""pb.jit's check of what a function reads outside its arguments, against the objects real code holds.

Each test compares the jitted call with the eager one (the same function without pb.jit) and counts
traces: an object reachable from the function's globals must not break the trace, a value the
function reads and that changed must trace again (see docs/jit.md, "What a jitted function must do"),
and an unchanged one must not.
"""

import functools
import gc
import random
import sys
import threading
import warnings
import weakref

import numpy as np
import pytest

import pullback as pb

THIS = sys.modules[__name__]
X = np.arange(3.0)

SCALE = 1.0
RATE = 1.0
VALUE = 1.0
NAN = float("nan")


def check(jitted, eager, *args):
    """The jitted call equals the eager one (same function, no pb.jit), bit for bit."""
    got, want = jitted(*args), eager(*args)
    np.testing.assert_array_equal(got, want)
    return got


class RaisingGetattribute:
    def __getattribute__(self, name):
        raise RuntimeError(f"no {name}")


class RaisingClassProperty:
    @property
    def __class__(self):
        raise RuntimeError("no __class__")


@pytest.mark.parametrize("kind", [RaisingGetattribute, RaisingClassProperty])
def test_an_object_whose_attribute_lookup_raises_does_not_break_the_trace(kind):
    namespace = {"odd": kind(), "np": np}
    exec("fn = lambda x: (odd, np.sin(x))[1]", namespace)
    fn = namespace["fn"]
    jf = pb.jit(fn)
    check(jf, fn, X)
    check(jf, fn, X)
    assert jf.cache_info().traces == 1


class Rates:
    rate = 1.0

    @classmethod
    def scaled(cls, x):
        return x * cls.rate

    @staticmethod
    def shifted(x):
        return x + SCALE

    @property
    def current(self):
        return RATE * 2.0


def test_a_class_attribute_read_by_a_classmethod_retraces(monkeypatch):
    fn = lambda x: Rates.scaled(x)  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    monkeypatch.setattr(Rates, "rate", 3.0)
    np.testing.assert_array_equal(check(jf, fn, X), X * 3.0)
    assert jf.cache_info().traces == 2


def test_a_global_read_by_a_staticmethod_retraces(monkeypatch):
    fn = lambda x: Rates.shifted(x)  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    monkeypatch.setattr(THIS, "SCALE", 7.0)
    np.testing.assert_array_equal(check(jf, fn, X), X + 7.0)


def test_a_global_read_by_a_property_getter_retraces(monkeypatch):
    rates = Rates()
    fn = lambda x: x * rates.current  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    check(jf, fn, X)
    monkeypatch.setattr(THIS, "RATE", 5.0)
    np.testing.assert_array_equal(check(jf, fn, X), X * 10.0)
    assert jf.cache_info().traces == 2


class Slotted:
    __slots__ = ("lr",)

    def __init__(self, lr):
        self.lr = lr


def test_an_attribute_of_a_slots_object_rebound_retraces():
    config = Slotted(1.0)
    fn = lambda x: x * config.lr  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    config.lr = 3.0
    np.testing.assert_array_equal(check(jf, fn, X), X * 3.0)
    del config.lr  # an unset slot: the eager call raises, and so does the jitted one
    with pytest.raises(AttributeError):
        jf(X)


class Plain:
    pass


def test_an_attribute_read_through_a_weakref_proxy_retraces():
    target = Plain()
    target.lr = 1.0
    proxy = weakref.proxy(target)
    fn = lambda x: x * proxy.lr  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    target.lr = 3.0
    np.testing.assert_array_equal(check(jf, fn, X), X * 3.0)


class Applies:
    def apply(self, x):
        return x * VALUE


def test_a_global_read_by_a_method_of_an_argument_retraces(monkeypatch):
    fn = lambda model, x: model.apply(x)  # noqa: E731
    jf, model = pb.jit(fn), Applies()
    check(jf, fn, model, X)
    monkeypatch.setattr(THIS, "VALUE", 5.0)
    np.testing.assert_array_equal(check(jf, fn, model, X), X * 5.0)


class Model:
    def __init__(self, weight):
        self.weight = weight

    def __call__(self, x):
        return np.tanh(x * self.weight) * VALUE


def loss_of(model, x):
    return np.sum(model(x) ** 2)


def test_a_global_read_by_the_call_of_a_model_passed_as_an_argument_retraces(monkeypatch):
    fn = lambda model, x: pb.withgradient(loss_of, model, x)  # noqa: E731
    jf, model = pb.jit(fn), Model(np.full(3, 0.5))
    (value, (grad, _)) = jf(model, X)
    monkeypatch.setattr(THIS, "VALUE", 2.0)
    (value, (grad, _)), (want, (want_grad, _)) = jf(model, X), fn(model, X)
    assert value == want
    np.testing.assert_array_equal(grad.weight, want_grad.weight)
    assert jf.cache_info().traces == 2


def scale_by_value(x):
    return x * VALUE


def test_a_global_read_by_a_function_passed_as_an_argument_retraces(monkeypatch):
    fn = lambda f, x: f(x)  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, scale_by_value, X)
    monkeypatch.setattr(THIS, "VALUE", 4.0)
    np.testing.assert_array_equal(check(jf, fn, scale_by_value, X), X * 4.0)


def test_an_attribute_of_the_caller_s_own_module_rebound_retraces(monkeypatch, tmp_path):
    # a config module of the project (`import config; config.lr = 0.5`), and a helper module's function
    (tmp_path / "probe_config.py").write_text("lr = 1.0\n\ndef scaled(x):\n    return x * lr\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import probe_config

    sys.modules.pop("probe_config")  # imported for this test only
    fn = lambda x: x * probe_config.lr  # noqa: E731
    helper = lambda x: probe_config.scaled(x) + 1.0  # noqa: E731
    jf, jhelper = pb.jit(fn), pb.jit(helper)
    check(jf, fn, X)
    check(jhelper, helper, X)
    probe_config.lr = 3.0
    np.testing.assert_array_equal(check(jf, fn, X), X * 3.0)
    np.testing.assert_array_equal(check(jhelper, helper, X), X * 3.0 + 1.0)


def test_installed_and_standard_modules_are_not_followed():
    import math

    fn = lambda x: x * math.pi + np.pi  # noqa: E731
    jf = pb.jit(fn)
    check(jf, fn, X)
    watched = [name for _, name, _ in jf._cache[next(iter(jf._cache))][0][0].watch.entries]
    assert "pi" not in watched


def test_a_nan_global_recomputed_at_every_call_does_not_retrace(monkeypatch):
    fn = lambda x: np.where(np.isnan(x), 0.0, x) + np.isnan(NAN)  # noqa: E731
    jf = pb.jit(fn)
    for _ in range(4):
        monkeypatch.setattr(THIS, "NAN", float("nan"))  # another object each call, still NaN
        check(jf, fn, X)
    for _ in range(2):
        monkeypatch.setattr(THIS, "NAN", np.float32("nan"))
        check(jf, fn, X)
    assert jf.cache_info().traces == 2


def test_a_view_of_a_watched_array_is_compared_once(monkeypatch):
    weight = np.ones((4, 3))
    fn = lambda x: x @ weight.T  # noqa: E731  (the trace's constant is the view weight.T)
    jf = pb.jit(fn)
    check(jf, fn, X)
    watch = jf._cache[next(iter(jf._cache))][0][0].watch
    assert [array.shape for array, _ in watch.arrays] == [(4, 3)]
    weight[0, 0] = 5.0  # still followed through the array itself
    check(jf, fn, X)
    assert jf.cache_info().traces == 2


def test_a_global_rebound_to_new_arrays_does_not_keep_the_old_ones_alive():
    namespace = {"np": np, "weight": np.ones((3, 3))}  # not monkeypatch, which keeps every value it replaced
    exec("fn = lambda x: np.tanh(x @ weight)", namespace)
    fn, old = namespace["fn"], []
    jf = pb.jit(fn)
    for k in range(10):
        check(jf, fn, X)
        check(jf, fn, X)
        old.append(weakref.ref(namespace["weight"]))
        namespace["weight"] = np.full((3, 3), float(k))
    gc.collect()
    # the array the newest trace read is kept until the next call traces again; the others are released
    assert sum(ref() is not None for ref in old) <= 1
    check(jf, fn, X)


def test_a_variant_whose_global_changed_is_dropped_and_a_changed_back_global_retraces(monkeypatch):
    fn = lambda x: x * SCALE  # noqa: E731
    jf = pb.jit(fn)
    for value in (1.0, 2.0, 1.0, 2.0):
        monkeypatch.setattr(THIS, "SCALE", value)
        check(jf, fn, X)
    assert jf.cache_info().traces == 4
    assert len(jf._cache[next(iter(jf._cache))]) == 1


def test_retraces_with_replays_between_them_do_not_warn(monkeypatch):
    fn = lambda x: x * SCALE  # noqa: E731
    jf = pb.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for epoch in range(12):  # a global rebound once an epoch, the function replayed in between
            monkeypatch.setattr(THIS, "SCALE", float(epoch))
            for _ in range(3):
                check(jf, fn, X)
    assert jf.cache_info().traces == 12


def test_threads_calling_while_a_global_is_rebound_get_one_of_its_values(monkeypatch):
    fn = lambda x: np.sin(x) * SCALE  # noqa: E731
    jf = pb.jit(fn)
    errors, wrong, stop = [], [], threading.Event()

    def call():
        while not stop.is_set():
            try:
                factor = jf(X)[1] / np.sin(1.0)
            except Exception as error:  # noqa: BLE001
                errors.append(error)
                return
            if not np.isclose(factor, round(factor)):
                wrong.append(factor)

    threads = [threading.Thread(target=call) for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for thread in threads:
            thread.start()
        for k in range(100):
            monkeypatch.setattr(THIS, "SCALE", float(k % 5))
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors and not wrong
    monkeypatch.setattr(THIS, "SCALE", 3.0)
    check(jf, fn, X)


def test_functools_partial_and_wraps_rebound_or_reading_a_global_retrace(monkeypatch):
    def multiply(x, lr):
        return x * lr

    monkeypatch.setattr(THIS, "STEP", functools.partial(multiply, lr=1.0), raising=False)
    fn = lambda x: STEP(x)  # noqa: E731, F821
    jf = pb.jit(fn)
    check(jf, fn, X)
    monkeypatch.setattr(THIS, "STEP", functools.partial(multiply, lr=3.0))
    np.testing.assert_array_equal(check(jf, fn, X), X * 3.0)


def test_a_draw_from_python_s_random_module_is_refused_not_replayed():
    fn = lambda x: x * random.random()  # noqa: E731
    with pytest.raises(pb.JitError, match="Python's random module"):
        pb.jit(fn)(X)
    rng = random.Random(0)
    fn = lambda x: x * rng.gauss(0.0, 1.0)  # noqa: E731
    with pytest.raises(pb.JitError, match="`rng`"):
        pb.jit(fn)(X)
