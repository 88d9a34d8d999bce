"""The tracer and the reverse sweep: tapes, levels, laziness, memory, threads, errors."""

import gc
import threading
import weakref

import numpy as np
import pytest

import pullback as pb
from pullback import _api, _reverse, _tangents
from pullback._values import stop_gradient as plain_value  # the array itself (pb.stop_gradient's is read-only)


# --- thunks and accumulation ---------------------------------------------------------
def test_accum_none_is_identity_and_passes_thunks_through():
    t = pb.Thunk(lambda: np.ones(2))
    assert pb.accum(t, None) is t
    assert pb.accum(None, t) is t
    assert pb.accum(None, None) is None
    np.testing.assert_allclose(pb.accum(t, pb.Thunk(lambda: np.full(2, 2.0))), [3.0, 3.0])
    np.testing.assert_allclose(pb.accum(np.ones(2), t), [2.0, 2.0])
    assert pb.accum((None, np.ones(1)), (np.ones(1), None))[0][0] == 1.0


def test_gradients_of_one_model_add_with_plus_and_sum_and_mismatches_are_refused():
    class Affine:
        def __init__(self, w):
            self.w, self.b = w, np.zeros(2)

    model = Affine(np.array([1.0, 2.0]))
    grads = [pb.gradient(lambda m: np.sum(m.w * k + m.b * m.w), model)[0] for k in (1.0, 2.0, 3.0)]
    total = sum(grads)  # starts from 0
    assert isinstance(total, pb.Tangent) and total.primal_type is Affine
    np.testing.assert_allclose(total.w, grads[0].w + grads[1].w + grads[2].w)
    np.testing.assert_allclose((grads[0] + grads[1]).b, grads[0].b + grads[1].b)
    # zip would have dropped the extra entry, and a Tangent of another type mixed two objects' fields
    with pytest.raises(TypeError, match="a tuple of 2 and a tuple of 1"):
        pb.accum((np.ones(1), np.ones(1)), (np.ones(1),))
    with pytest.raises(TypeError, match=r"a Tangent\[Affine\] and a Tangent\[dict\]"):
        grads[0] + pb.Tangent(dict, w=np.ones(2))
    with pytest.raises(TypeError, match="a dict and a list of 1"):
        pb.accum({"a": 1.0}, [1.0])
    assert pb.accum([np.ones(1)], (np.ones(1),))[0][0] == 2.0  # a list and a tuple of one length mirror alike


def test_unthunk_recurses_through_containers_and_tangents():
    tangent = pb.Tangent(dict, a=pb.Thunk(lambda: 1.0), b=[pb.Thunk(lambda: 2.0)])
    out = pb.unthunk({"t": tangent, "x": (pb.Thunk(lambda: 3.0),)})
    assert out["t"].a == 1.0 and out["t"].b == [2.0] and out["x"] == (3.0,)


def _rule_counting(calls):
    @pb.primitive
    def scaled(x, c):
        return x * c

    @pb.rrule(scaled)
    def scaled_rule(x, c):
        def back(dy):
            def dx():
                calls.append("x")
                return dy * c

            def dc():
                calls.append("c")
                return np.sum(dy * x)

            return pb.Thunk(dx), pb.Thunk(dc)

        return scaled(x, c), back

    return scaled


def test_thunk_for_an_untracked_argument_is_never_called():
    calls = []
    scaled = _rule_counting(calls)
    (g,) = pb.gradient(lambda x: np.sum(scaled(x, 3.0)), np.ones(2))
    np.testing.assert_allclose(g, [3.0, 3.0])
    assert calls == ["x"]
    calls.clear()
    pb.gradient(lambda x, c: np.sum(scaled(x, c)), np.ones(2), 2.0)
    assert sorted(calls) == ["c", "x"]


def test_thunk_for_a_value_nobody_needs_is_never_called():
    calls = []
    scaled = _rule_counting(calls)

    def f(x):
        unused = scaled(x, 2.0)  # noqa: F841  computed but not part of the output
        return np.sum(x)

    pb.gradient(f, np.ones(2))
    assert calls == []


def _contains_thunk(x):
    if isinstance(x, pb.Thunk):
        return True
    if isinstance(x, (tuple, list)):
        return any(_contains_thunk(v) for v in x)
    if isinstance(x, dict):
        return any(_contains_thunk(v) for v in x.values())
    if isinstance(x, pb.Tangent):
        return any(_contains_thunk(v) for v in x.values())
    return False


def test_no_thunk_is_ever_returned_at_any_depth():
    class Layer:
        def __init__(self):
            self.w, self.b = np.ones((2, 2)), np.ones(2)

    model = [Layer(), {"inner": (Layer(), 3)}]
    x = np.ones(2)
    f = lambda m, x: np.sum(m[0].w @ x * m[1]["inner"][0].b) + np.sum(m[1]["inner"][0].w)
    assert not _contains_thunk(pb.gradient(f, model, x))
    assert not _contains_thunk(pb.withgradient(f, model, x))
    _, back = pb.pullback(lambda m, x: m[0].w @ x, model, x)
    assert not _contains_thunk(back(np.ones(2)))
    assert not _contains_thunk(pb.grad(f, argnums=(0, 1))(model, x))


def test_inplaceable_thunk_adds_into_an_owned_buffer():
    added = []

    @pb.primitive
    def pick(x, i):
        return x[i]

    @pb.rrule(pick)
    def pick_rule(x, i):
        def back(dy):
            def add_into(buffer):
                added.append(i)
                buffer[i] += dy
                return buffer

            def fresh():
                out = np.zeros_like(x)
                out[i] = dy
                return out

            return pb.InplaceableThunk(add_into, fresh), None

        return x[i], back

    x = np.arange(5.0)
    (g,) = pb.gradient(lambda x: sum(pick(x, i) * (i + 1.0) for i in range(5)), x)
    np.testing.assert_allclose(g, [1, 2, 3, 4, 5])
    assert len(added) >= 3  # after the first two contributions, the rest add in place


# --- constant factors carried through the sweep -----------------------------------------------
BIG = _tangents.MIN_CARRIED_SIZE  # arrays this large carry a constant factor instead of multiplying it in


def _counting_factor_multiplications(monkeypatch):
    counted = []
    times = _tangents._times

    def counting(g, factor):
        counted.append(factor)
        return times(g, factor)

    monkeypatch.setattr(_tangents, "_times", counting)
    return counted


def test_constant_scales_and_negations_are_multiplied_in_once_at_the_end(monkeypatch):
    counted = _counting_factor_multiplications(monkeypatch)
    x = np.linspace(-1.0, 1.0, BIG)

    def f(x):
        for _ in range(4):
            x = -np.cos(np.sin(x) * 0.9)
        return np.sum(x)

    (g,) = pb.gradient(f, x)
    assert len(counted) == 1 and counted[0] == pytest.approx((0.9 * -1.0 * -1.0) ** 4)  # cos' is -sin
    assert type(g) is np.ndarray and g.dtype == np.float64
    want, h = np.ones_like(x), x.copy()
    for _ in range(4):  # the chain rule by hand
        u = np.sin(h) * 0.9
        want = want * (np.sin(u) * 0.9 * np.cos(h))
        h = -np.cos(u)
    np.testing.assert_allclose(g, want, rtol=1e-13)


def test_cotangents_with_different_factors_are_multiplied_out_before_they_are_added():
    x = np.linspace(-2.0, 2.0, BIG)
    (g,) = pb.gradient(lambda x: np.sum(-x) + np.sum(x * 0.5) + np.sum(np.cos(x) * 3.0) + np.sum(x * 0.5), x)
    np.testing.assert_allclose(g, -1.0 + 0.5 - 3.0 * np.sin(x) + 0.5, rtol=1e-14, atol=1e-15)


def test_a_product_of_factors_out_of_range_is_multiplied_in(monkeypatch):
    counted = _counting_factor_multiplications(monkeypatch)
    x = np.ones(BIG, np.float32)
    (big,) = pb.gradient(lambda x: np.sum(x * 1000.0 * 1000.0 * 1000.0), x)
    (small,) = pb.gradient(lambda x: np.sum(x * 1e-3 * 1e-3 * 1e-3), x)
    np.testing.assert_allclose(big, 1e9, rtol=1e-6)
    np.testing.assert_allclose(small, 1e-9, rtol=1e-6)
    assert all(2.0 ** -10 <= abs(f) <= 2.0 ** 10 or abs(f) in (1e6, 1e-6) for f in counted)


def test_a_factor_is_not_carried_into_float16_where_the_unscaled_cotangent_would_overflow():
    x = np.full(BIG, 0.5, np.float16)
    w = np.full(BIG, 1e5, np.float32)
    # x * 2's cotangent is 1e5 * 2**-10 = 97.7; unscaled, 1e5 would overflow float16 on the way
    (g,) = pb.gradient(lambda x: np.sum((x * 2.0).astype(np.float32) * w * 2.0 ** -10), x)
    assert g.dtype == np.float16 and np.all(np.isfinite(g))
    np.testing.assert_allclose(g.astype(np.float64), 2e5 / 1024, rtol=1e-3)


def test_carried_factors_in_forward_mode_and_second_derivatives():
    x = np.linspace(-1.0, 1.0, BIG)
    t = np.cos(x)
    y, dy = pb.jvp(lambda x: np.cos(-x) * 0.5, (x,), (t,))
    assert type(dy) is np.ndarray
    np.testing.assert_allclose(dy, 0.5 * np.sin(-x) * t, rtol=1e-14, atol=1e-16)
    (gg,) = pb.gradient(lambda x: np.sum(pb.gradient(lambda x: np.sum(np.cos(x) * 0.5), x)[0] * -2.0), x)
    np.testing.assert_allclose(gg, np.cos(x), rtol=1e-14)


# --- the tape --------------------------------------------------------------------------
def test_long_tape_does_not_hit_the_recursion_limit():
    def f(x):
        for _ in range(100_000):
            x = x * 1.0
        return np.sum(x)

    (g,) = pb.gradient(f, np.ones(3))
    np.testing.assert_allclose(g, [1.0, 1.0, 1.0])


def test_nothing_of_the_tape_stays_alive_after_gradient():
    tapes, values = [], []
    real_tape = _reverse.Tape

    def f(x):
        y = np.sin(x) * 2.0
        values.append(weakref.ref(plain_value(y)))
        return np.sum(y)

    class Spy(real_tape):
        __slots__ = ()

        def __init__(self):
            super().__init__()
            tapes.append(weakref.ref(self))

    _api.Tape = Spy
    try:
        pb.gradient(f, np.ones(1000))
    finally:
        _api.Tape = real_tape
    gc.collect()
    assert tapes and tapes[0]() is None
    assert values[0]() is None


def test_pullback_keeps_its_tape_only_while_back_lives():
    seen = []

    def f(x):
        y = np.exp(x)  # an intermediate the tape must hold for the backward pass
        seen.append(weakref.ref(plain_value(y)))
        return y * 2.0

    out, back = pb.pullback(f, np.ones(3))
    assert seen[0]() is not None
    back(np.ones(3))
    back(np.ones(3))
    del back
    gc.collect()
    assert seen[0]() is None


def _kept_by_the_tape(f, *args):
    """Run `f(*args, keep)` under `pb.pullback`, where `keep(v)` notes an intermediate `v`; return which
    of those the recording still holds once `f` has returned, and the recording's `back`."""
    refs = []

    def keep(v):
        refs.append(weakref.ref(plain_value(v)))
        return v

    _, back = pb.pullback(lambda *a: f(*a, keep), *args)
    gc.collect()
    return [r() is not None for r in refs], back


@pytest.mark.parametrize("name, f, kept", [
    ("sin keeps its input, not its output", lambda x, keep: np.sum(keep(np.sin(keep(x * 1.5)))), [True, False]),
    ("exp keeps its output, not its input", lambda x, keep: np.sum(keep(np.exp(keep(x * 1.5)))), [False, True]),
    ("tanh keeps its output", lambda x, keep: np.sum(keep(np.tanh(keep(x * 1.5)))), [False, True]),
    ("a factor times a Python float", lambda x, keep: np.sum(keep(np.cos(x)) * 0.5), [False]),
    ("a constant mask times a factor", lambda x, keep: np.sum(np.arange(4.0) * keep(np.cos(x))), [False]),
    ("a factor divided by a constant", lambda x, keep: np.sum(keep(np.cos(x)) / 3.0), [False]),
    ("relu keeps its input, not its output", lambda x, keep: np.sum(keep(np.maximum(keep(x * 1.5), 0.0)) * 2.0),
     [True, False]),
    ("a product of two traced factors keeps both", lambda x, keep: np.sum(keep(np.sin(x)) * keep(np.cos(x))),
     [True, True]),
])
def test_the_tape_keeps_only_the_values_the_traced_operands_gradients_read(name, f, kept):
    x = np.linspace(-1.0, 1.0, 4)
    held, back = _kept_by_the_tape(f, x)
    assert held == kept, name
    h = 1e-6
    numeric = [(f(x + h * e, lambda v: v) - f(x - h * e, lambda v: v)) / (2 * h) for e in np.eye(4)]
    np.testing.assert_allclose(back(1.0)[0], numeric, rtol=1e-6, atol=1e-8)


@pb.primitive
def _times(a, b):
    return a * b


@pb.rrule(_times)
def _times_rule(a, b):
    return a * b, pb.PerOperand([lambda g: g * b, lambda g: g * a])


def test_a_user_rule_returning_per_operand_functions_keeps_only_what_traced_operands_read():
    x, w = np.linspace(-1.0, 1.0, 4), np.arange(4.0)
    held, back = _kept_by_the_tape(lambda x, keep: np.sum(_times(keep(np.sin(x)), w)), x)
    assert held == [False]
    np.testing.assert_allclose(back(1.0)[0], np.cos(x) * w)
    held, back = _kept_by_the_tape(lambda x, w, keep: np.sum(_times(keep(np.sin(x)), w)), x, w)
    assert held == [True]  # w is traced now: its gradient reads sin(x)
    gx, gw = back(1.0)
    np.testing.assert_allclose(gx, np.cos(x) * w)
    np.testing.assert_allclose(gw, np.sin(x))


_SHARED_BACK = {}


@pb.primitive
def _shared_times(a, b):
    return a * b


@pb.rrule(_shared_times)
def _shared_times_rule(a, b):
    # one pullback object handed out by every call whose operands are the same arrays
    key = (id(a), id(b))
    if key not in _SHARED_BACK:
        _SHARED_BACK[key] = pb.PerOperand([lambda g: g * b, lambda g: g * a])
    return a * b, _SHARED_BACK[key]


def test_a_pullback_handed_out_twice_is_not_changed_by_the_call_that_traces_one_operand():
    x, w = np.linspace(-1.0, 1.0, 4), np.arange(4.0)
    (gx,) = pb.gradient(lambda x: np.sum(_shared_times(x, w)), x)  # w untraced: its function is left out
    gx2, gw = pb.gradient(lambda x, w: np.sum(_shared_times(x, w)), x, w)  # the same object, both traced
    np.testing.assert_allclose(gx, w)
    np.testing.assert_allclose(gx2, w)
    np.testing.assert_allclose(gw, x)
    assert all(f is not None for back in _SHARED_BACK.values() for f in back)


def test_a_traced_python_float_factor_still_gets_its_gradient():
    x = np.linspace(-1.0, 1.0, 4)
    gx, gs = pb.gradient(lambda x, s: np.sum(np.cos(x) * s / 3.0 - s * np.sin(x)), x, 2.0)
    np.testing.assert_allclose(gx, 2.0 * (-np.sin(x) / 3.0 - np.cos(x)))
    assert gs == pytest.approx(np.sum(np.cos(x) / 3.0 - np.sin(x)))


def test_a_tracked_value_escaping_f_cannot_be_used_later():
    leaked = []
    pb.gradient(lambda x: leaked.append(x * 2.0) or np.sum(x), np.ones(2))
    with pytest.raises(RuntimeError, match="after the gradient call"):
        np.sin(leaked[0])


# --- nesting --------------------------------------------------------------------------
def test_nested_levels_do_not_confuse_perturbations():
    d = lambda f, x: pb.gradient(f, x)[0]
    # d/dx [x * d/dy (x * y) at y=1] = d/dx x^2 = 2x
    assert d(lambda x: x * d(lambda y: x * y, 1.0), 4.0) == pytest.approx(8.0)
    assert d(lambda x: d(lambda y: x * y, 1.0) * x, 3.0) == pytest.approx(6.0)


def test_second_and_third_derivatives():
    d = lambda f: (lambda x: pb.gradient(f, x)[0])
    np.testing.assert_allclose(d(d(np.sin))(0.7), -np.sin(0.7))
    np.testing.assert_allclose(d(d(d(np.exp)))(0.3), np.exp(0.3))
    x = np.array([1.0, 2.0, 3.0])
    (h,) = pb.gradient(lambda x: np.sum(pb.gradient(lambda y: np.sum(y**3), x)[0] * np.array([1.0, 10.0, 100.0])), x)
    np.testing.assert_allclose(h, 6 * x * [1.0, 10.0, 100.0])


def test_gradient_with_respect_to_a_closure_value_inside_nested_call():
    # The inner gradient's value depends on the outer variable; aux parts stay tracked at the outer level.
    def outer(a):
        val, (g,) = pb.withgradient(lambda x: np.sum(a * x**2), np.array([1.0, 2.0]))
        return val + np.sum(g)

    (ga,) = pb.gradient(outer, np.array([3.0, 5.0]))
    # val = a1*1 + a2*4, g = 2*a*x  -> d/da (val + sum(g)) = x^2 + 2x
    np.testing.assert_allclose(ga, [1.0 + 2.0, 4.0 + 4.0])


# --- threads -------------------------------------------------------------------------
def test_concurrent_gradients_in_threads_do_not_interfere():
    results, errors = {}, []

    def work(k):
        try:
            x = np.full(50, float(k))
            for _ in range(30):
                (g,) = pb.gradient(lambda x: np.sum(np.sin(x) * k), x)
                np.testing.assert_allclose(g, k * np.cos(x))
            results[k] = True
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 8


# --- errors ---------------------------------------------------------------------------
def test_converting_a_tracked_value_says_the_gradient_would_be_lost():
    for convert in (np.asarray, np.array, float, np.float64, lambda v: v.item(), lambda v: v.tolist()):
        with pytest.raises(TypeError, match="gradient would be lost"):
            pb.gradient(lambda x: convert(np.sum(x)), np.ones(2))
    with pytest.raises(TypeError, match="gradient would be lost"):
        pb.gradient(lambda x: np.sum(np.zeros(2) + np.array([x[0], 1.0])), np.ones(2))


def test_writing_a_tracked_value_into_a_plain_array_is_refused():
    def f(x):
        buf = np.zeros(2)
        buf[0] = x[0]
        return np.sum(buf)

    # NumPy reports "setting an array element with a sequence" and chains our explanation as the cause.
    with pytest.raises((TypeError, ValueError)) as info:
        pb.gradient(f, np.ones(2))
    cause = info.value if isinstance(info.value, TypeError) else info.value.__cause__
    assert "gradient would be lost" in str(cause)

    def g(x):
        buf = np.zeros(2)
        buf += x
        return np.sum(buf)

    with pytest.raises(TypeError, match="out="):
        pb.gradient(g, np.ones(2))


def test_missing_rule_error_names_the_function_and_how_to_add_one():
    doubled = np.frompyfunc(lambda v: 2 * v, 1, 1)  # a ufunc no rule knows
    with pytest.raises(NotImplementedError, match=r"ufunc <lambda> \(vectorized\).*pullback\.rrule"):
        pb.gradient(lambda x: np.sum(doubled(x)), np.ones(2))


def test_rrule_on_a_function_numpy_does_not_dispatch_is_refused():
    def plain(x):
        return x

    with pytest.raises(TypeError, match="primitive"):
        pb.rrule(plain)(lambda x: (x, lambda g: (g,)))


def test_unsupported_ufunc_forms_are_refused_clearly():
    with pytest.raises(TypeError, match="where="):
        pb.gradient(lambda x: np.sum(np.sin(x, where=x > 0)), np.ones(2))
    with pytest.raises(TypeError, match=r"multiply\.at"):
        pb.gradient(lambda x: np.multiply.at(x, [0], 2.0), np.ones(2))


def test_formatting_and_truthiness_of_tracked_scalars_work():
    def f(x):
        s = np.sum(x)
        text = f"{s:.2f}"
        assert text == "3.00"
        return s * 2.0 if s > 0 and bool(s) else s

    assert pb.gradient(f, np.ones(3))[0][0] == pytest.approx(2.0)


def test_stop_gradient_blocks_the_gradient():
    (g,) = pb.gradient(lambda x: np.sum(x * pb.stop_gradient(x)), np.array([2.0, 3.0]))
    np.testing.assert_allclose(g, [2.0, 3.0])


def test_stop_gradient_blocks_it_inside_containers_and_objects_too():
    class Affine:
        def __init__(self, w):
            self.w, self.scale = w, 2.0

    x = np.array([0.3, 1.2])
    # each of these returned the container untouched before: the gradient flowed twice (2x)
    (g,) = pb.gradient(lambda d: np.sum(pb.stop_gradient(d)["a"] * d["a"]), {"a": x})
    np.testing.assert_allclose(g["a"], x)
    (g,) = pb.gradient(lambda seq: np.sum(pb.stop_gradient(seq)[0] * seq[0]), [x])
    np.testing.assert_allclose(g[0], x)
    (g,) = pb.gradient(lambda m: np.sum(pb.stop_gradient(m).w * m.w) * m.scale, Affine(x))
    np.testing.assert_allclose(g.w, 2.0 * x)  # m itself stays traced: only the copy is plain
    assert g.scale == pytest.approx(np.sum(x * x))
    _, tangent = pb.jvp(lambda d: np.sum(pb.stop_gradient(d)["a"] * d["a"]), ({"a": x},), ({"a": np.ones(2)},))
    assert tangent == pytest.approx(np.sum(x))
    jf = pb.jit(lambda d: pb.gradient(lambda d: np.sum(pb.stop_gradient(d)["a"] * d["a"]), d)[0])
    np.testing.assert_allclose(jf({"a": x})["a"], x)
    np.testing.assert_allclose(jf({"a": 2 * x})["a"], 2 * x)


# --- in-place writes -------------------------------------------------------------------
def test_inplace_operators_rebind_and_keep_gradients_right():
    def f(x):
        y = x * 1.0
        alias = y
        y += 2.0
        y *= x  # y = (x + 2) * x, and alias sees it as NumPy would
        return np.sum(alias)

    x = np.array([1.0, 3.0])
    (g,) = pb.gradient(f, x)
    np.testing.assert_allclose(g, 2 * x + 2)


def test_setitem_on_tracked_array_is_differentiated():
    def f(x, v):
        h = np.zeros_like(x)
        h[0] = v * 3.0
        h[1:] = x[:-1] ** 2
        return np.sum(h * np.array([1.0, 2.0, 4.0]))

    x, v = np.array([1.0, 2.0, 3.0]), 5.0
    gx, gv = pb.gradient(f, x, v)
    np.testing.assert_allclose(gx, [2 * 2 * 1.0, 4 * 2 * 2.0, 0.0])
    assert gv == pytest.approx(3.0)


def test_overwritten_elements_of_an_argument_get_zero_gradient():
    def f(x):
        x = x * 1.0
        x[1] = 7.0
        return np.sum(x * x)

    (g,) = pb.gradient(f, np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(g, [2.0, 0.0, 6.0])


def test_inplace_write_through_a_view_reaches_its_base():
    def f(x):
        y = x * 1.0
        v = y[1:]
        v[0] = 0.0  # y is [x0, 0, x2]
        return np.sum(y)

    assert pb.withgradient(f, np.ones(3)) == (f(np.ones(3)), (pytest.approx([1.0, 0.0, 1.0]),))

    def g(x):
        y = x * 1.0
        t = y.T  # a view of y, which sees the write: [0, x1, x2]
        y[0] = 0.0
        return np.sum(y) + np.sum(t * x)

    x = np.array([1.0, 2.0, 3.0])
    val, (grad,) = pb.withgradient(g, x)
    assert val == g(x.copy()) == 18.0
    np.testing.assert_allclose(grad, [0.0, 1.0 + 2 * 2.0, 1.0 + 2 * 3.0])


def test_repeated_indices_in_assignment_are_refused():
    def f(x):
        y = x * 1.0
        y[[0, 0]] = x[1:]
        return np.sum(y)

    with pytest.raises(ValueError, match="more than once"):
        pb.gradient(f, np.ones(3))


def test_reading_an_element_then_writing_it_back_is_allowed():
    def f(x):
        y = x * 1.0
        y[1] = y[1] * 2.0  # the read y[1] is a temporary: no live view when the write happens
        m = np.ones((2, 2)) * x[0]
        m[0] = m[0] * 3.0  # a row view, also dead by the time of the write
        return np.sum(y) + np.sum(m)

    x = np.array([1.0, 2.0, 3.0])
    (g,) = pb.gradient(f, x)
    np.testing.assert_allclose(g, [1.0 + 3.0 + 3.0 + 2.0, 2.0, 1.0])


def test_a_live_view_sees_a_write_into_its_base():
    def f(x):
        y = x * 1.0
        v = y[1:]
        y[1] = 5.0  # v is [5, x2]
        return np.sum(y) + 10.0 * np.sum(v)

    val, (grad,) = pb.withgradient(f, np.ones(3))
    assert val == f(np.ones(3)) == 1.0 + 5.0 + 1.0 + 50.0 + 10.0
    np.testing.assert_allclose(grad, [1.0, 0.0, 11.0])


def test_cotangents_of_several_outputs_are_summed_not_concatenated():
    @pb.primitive
    def two(x):
        return 2.0 * x, 3.0 * x

    @pb.rrule(two)
    def two_rule(x):
        def back(g):
            a, b = g
            total = 0.0
            if a is not None:
                total = total + 2.0 * a
            if b is not None:
                total = total + 3.0 * b
            return (total,)

        return two(x), back

    (g,) = pb.gradient(lambda x: np.sum(two(x)[0]) + np.sum(two(x)[1] * 2.0) + np.sum(two(x)[0]), np.ones(2))
    np.testing.assert_allclose(g, [2.0 + 6.0 + 2.0] * 2)


def test_real_and_imag_of_a_real_tracked_array():
    (g,) = pb.gradient(lambda x: np.sum(x.real * 2.0) + np.sum(x.imag), np.ones(2))
    np.testing.assert_allclose(g, [2.0, 2.0])


def test_a_structured_output_needs_a_cotangent_with_exactly_its_parts():
    """A missing part would count as zero and an extra one (a misspelt key) be dropped, silently."""
    _, back = pb.pullback(lambda x: (x, x * 2.0), np.ones(2))
    with pytest.raises(TypeError, match=r"cotangent of output \(a tuple\) should have one part for each of \[0, 1\]"):
        back(np.ones(2))
    with pytest.raises(TypeError, match=r"got a tuple of 1"):
        back((np.ones(2),))
    np.testing.assert_array_equal(back((None, np.ones(2)))[0], [2.0, 2.0])  # None says zero
    _, back = pb.pullback(lambda x: {"loss": np.sum(x), "aux": {"y": x * 3.0}}, np.ones(2))
    with pytest.raises(TypeError, match=r"output\['aux'\] \(a dict\).*\['y'\].*got a dict of \['z'\]"):
        back({"loss": 1.0, "aux": {"z": np.ones(2)}})
    with pytest.raises(TypeError, match=r"\['loss', 'aux'\].*got a dict of \['loss'\]"):
        back({"loss": 1.0})
    np.testing.assert_array_equal(back({"loss": 1.0, "aux": {"y": np.ones(2)}})[0], [4.0, 4.0])
    _, back = pb.pullback(lambda x: x * 2.0, np.ones(2))
    np.testing.assert_array_equal(back([1.0, 3.0])[0], [2.0, 6.0])  # numbers for an array, as NumPy reads them


def test_tangents_need_exactly_the_parts_of_their_primals():
    x = np.array([1.0, 2.0])
    with pytest.raises(TypeError, match=r"tangent for primal 0 \(a dict\).*\['a', 'b'\].*got a dict of \['a'\]"):
        pb.jvp(lambda d: d["a"] * d["b"], ({"a": x, "b": x * 2.0},), ({"a": np.ones(2)},))
    with pytest.raises(TypeError, match=r"tangent for primal 0 \(a tuple\).*\[0, 1\].*got a tuple of 1"):
        pb.jvp(lambda p: p[0] * p[1], ((x, x * 2.0),), ((np.ones(2),),))
    _, dot = pb.jvp(lambda d: d["a"] * d["b"], ({"a": x, "b": x * 2.0},), ({"a": np.ones(2), "b": None},))
    np.testing.assert_array_equal(dot, x * 2.0)
    np.testing.assert_array_equal(pb.jvp(lambda x: x ** 2, (x,), ([1.0, 0.5],))[1], [2.0, 2.0])


def test_the_garbage_collector_is_held_during_a_call_and_restored_after():
    import gc

    seen = []
    pb.gradient(lambda x: seen.append(gc.isenabled()) or np.sum(x), np.ones(2))
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        pb.gradient(lambda x: np.sum(pb.gradient(lambda y: np.sum(y * x), x)[0]), np.ones(2))
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()
    for differentiate in (pb.gradient, pb.withgradient, lambda f, x: pb.value_and_grad(f)(x)):
        with pytest.raises(ZeroDivisionError):
            differentiate(lambda x: 1 / 0, np.ones(2))
        assert gc.isenabled()


def _cyclic_garbage_of(call):
    """The objects `call()` leaves in reference cycles (freed only by the garbage collector)."""
    import gc

    call()  # caches and lazy imports fill on the first call
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        call()
        gc.collect()
        return [type(o).__name__ for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


class _Model:
    def __init__(self):
        self.w, self.b = np.full((3, 4), 0.1), np.zeros(3)

    def __call__(self, x):
        return np.tanh(self.w @ x + self.b)


@pytest.mark.parametrize("name", ["gradient", "withgradient", "grad", "pullback and back", "jvp", "jacobian",
                                  "hessian", "gradient of a gradient", "nn training step", "jit"])
def test_a_finished_call_leaves_no_reference_cycles(name):
    # A cycle through the tape would keep every intermediate it holds alive until the collector's next
    # pass, and each call's leftovers would make that pass come sooner.
    model, x = _Model(), np.linspace(-1.0, 1.0, 4)

    def loss(m, x):
        return np.sum(m(x) ** 2)

    def training_step():
        from pullback import nn

        layer = nn.Dense(4, 3, nn.relu, rng=np.random.default_rng(0))
        grad = pb.gradient(lambda d: np.sum(d(x.astype(np.float32)) ** 2), layer)[0]
        pb.optim.update(pb.optim.setup(pb.optim.Adam(), layer), layer, grad)

    jitted = pb.jit(lambda m, x: pb.withgradient(loss, m, x))
    calls = {
        "gradient": lambda: pb.gradient(loss, model, x),
        "withgradient": lambda: pb.withgradient(loss, model, x),
        "grad": lambda: pb.grad(loss)(model, x),
        "pullback and back": lambda: pb.pullback(np.sin, x)[1](np.ones(4)),
        "jvp": lambda: pb.jvp(np.sin, (x,), (np.ones(4),)),
        "jacobian": lambda: pb.jacobian(np.sin, x),
        "hessian": lambda: pb.hessian(lambda v: np.sum(np.sin(v) ** 3), x),
        "gradient of a gradient": lambda: pb.gradient(lambda v: np.sum(pb.gradient(loss, model, v)[1]), x),
        "nn training step": training_step,
        "jit": lambda: jitted(model, x),
    }
    assert _cyclic_garbage_of(calls[name]) == []


def test_is_spare_sees_any_other_reference():
    from pullback._tangents import is_spare

    a = np.ones(4)
    assert is_spare(a)
    b = a
    assert not is_spare(a)
    del b
    view = a[:2]
    assert not is_spare(a) and not is_spare(view)  # the view holds its base; a view owns no memory
    del view
    a.flags.writeable = False
    assert not is_spare(a)


class _Recording(list):
    """A stand-in for the sweep's spare slot that counts the arrays put in it (keeping none alive)."""

    def __init__(self):
        super().__init__([None])
        self.given = []

    def __setitem__(self, k, v):
        if v is not None:
            self.given.append(v.shape)
        super().__setitem__(k, v)


def test_large_elementwise_pullbacks_write_into_a_cotangent_nobody_else_holds(monkeypatch):
    from pullback import _backward
    from pullback.rules import ufuncs

    spare = _Recording()
    monkeypatch.setattr(_backward, "SPARE", spare)
    monkeypatch.setattr(ufuncs, "SPARE", spare)
    x = np.linspace(-1.0, 1.0, 1 << 17, dtype=np.float32)
    (g,) = pb.gradient(lambda x: np.sum(np.cos(np.tanh(np.sin(x * 0.5)))), x)
    assert len(spare.given) >= 2  # the cotangents of tanh's and sin's outputs, computed by cos and tanh
    x64 = x.astype(np.float64)
    s = np.sin(0.5 * x64)
    t = np.tanh(s)
    expected = -np.sin(t) * (1.0 - t * t) * np.cos(0.5 * x64) * 0.5
    np.testing.assert_allclose(g, expected, rtol=2e-5, atol=1e-6)


def test_a_cotangent_someone_else_holds_is_never_written_into():
    n = 1 << 17
    x = np.linspace(-1.0, 1.0, n, dtype=np.float32)
    dy = np.linspace(0.5, 2.0, n, dtype=np.float32)
    kept = dy.copy()
    _, back = pb.pullback(lambda x: np.tanh(np.sin(x)), x)
    (g,) = back(dy)
    np.testing.assert_array_equal(dy, kept)  # the caller's seed
    expected = dy * (1.0 - np.tanh(np.sin(x)) ** 2) * np.cos(x)
    np.testing.assert_allclose(g, expected, rtol=1e-5, atol=1e-6)
    # one cotangent sent to two elementwise pullbacks (the sum's two operands) reaches both intact
    (g,) = pb.gradient(lambda x: np.sum(np.sin(x) + np.tanh(x) + np.cos(x)), x)
    np.testing.assert_allclose(g, np.cos(x) + 1.0 - np.tanh(x) ** 2 - np.sin(x), rtol=1e-5, atol=1e-6)


def test_spare_cotangent_is_not_written_into_by_a_nested_vjp_in_a_user_rule():
    # A user's rule whose pullback re-runs part of the forward pass under pb.vjp (rematerialisation) and hands it
    # the cotangent it was given. The outer sweep has marked that cotangent as "spare" (SPARE[0] = g); the inner
    # sweep does not reset SPARE because its seed is held by its seeds dict, so sin's pullback inside writes
    # g * cos(x) into the user's `g`. The user then reads `g` again and gets a silently wrong gradient.
    n = 1 << 17
    x0 = np.linspace(0.1, 1.0, n, dtype=np.float32)

    @pb.primitive
    def sin_plus_x(x):
        return np.sin(x) + x

    @pb.rrule(sin_plus_x)
    def sin_plus_x_rule(x):
        def back(g):
            _, inner = pb.vjp(np.sin, x)
            (d_sin,) = inner(g)
            return (d_sin + g,)  # d/dx (sin x + x) = g cos x + g

        return sin_plus_x(x), back

    (got,) = pb.gradient(lambda x: np.sum(np.exp(sin_plus_x(x))), x0)
    x64 = x0.astype(np.float64)
    expected = np.exp(np.sin(x64) + x64) * (np.cos(x64) + 1.0)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_a_nested_vjp_never_writes_into_the_cotangent_a_user_rule_was_given():
    n = 1 << 17
    x0 = np.linspace(0.1, 1.0, n, dtype=np.float32)
    seen = {}

    @pb.primitive
    def remat_sin(x):
        return np.sin(x)

    @pb.rrule(remat_sin)
    def remat_sin_rule(x):
        def back(g):
            before = g.copy()
            _, inner = pb.vjp(np.sin, x)
            (dx,) = inner(g)
            seen["g unchanged"] = bool(np.array_equal(before, g))
            return (dx,)

        return remat_sin(x), back

    pb.gradient(lambda x: np.sum(np.exp(remat_sin(x))), x0)
    assert seen["g unchanged"]


# --- Tangent arithmetic and entries --------------------------------------------------------------

class _TwoFields:
    def __init__(self, w, b):
        self.w, self.b = w, b


def _a_tangent():
    (g,) = pb.gradient(lambda m: np.sum(m.w * 3.0), _TwoFields(np.array([1.0]), np.array([2.0])))
    return g


def test_a_number_and_a_tangent_do_not_add():
    # each was a RecursionError: Tangent.__radd__ -> accum(1.0, g) -> 1.0 + g -> ...
    g = _a_tangent()
    with pytest.raises(TypeError, match=r"accum: cannot add a float and a Tangent\[_TwoFields\]"):
        1.0 + g
    with pytest.raises(TypeError, match="accum"):
        pb.accum(1.0, g)
    with pytest.raises(TypeError, match="accum"):
        sum([g, g], 0.0)
    np.testing.assert_allclose(sum([g, g]).w, [6.0])  # from the int 0, as sum starts


def test_tangent_entry_named_like_a_mapping_method_is_reached_as_an_attribute():
    class Attention:
        def __init__(self):
            self.values = np.array([1.0])
            self.keys = np.array([2.0])

    (g,) = pb.gradient(lambda a: np.sum(a.values * 3.0 + a.keys), Attention())
    np.testing.assert_allclose(g["values"], [3.0])
    np.testing.assert_allclose(g.values, [3.0])
    np.testing.assert_allclose(g.keys, [1.0])
    assert list(pb.tree.children(g)) == ["values", "keys"]
    assert list(_a_tangent().items())[0][0] == "w" and dict(_a_tangent())["b"] is None  # no entry of those names


def test_unthunk_evaluates_the_thunks_inside_what_a_thunk_returns():
    out = pb.unthunk(pb.Thunk(lambda: (pb.Thunk(lambda: 1.0), [pb.Thunk(lambda: 2.0)])))
    assert out == (1.0, [2.0])
