"""pb.jit: traced once per signature, replayed as straight-line NumPy, equal to eager pullback."""

import collections
import contextlib
import functools
import math
import numbers
import os
import re
import sys
import threading
import time
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pullback as pb

RNG = np.random.default_rng(0)


def loss(w, x):
    return np.sum(np.tanh(x @ w) ** 2)


def test_replay_equals_eager_on_new_values_and_counts_traces():
    f = pb.jit(lambda w, x: pb.withgradient(loss, w, x))
    for _ in range(4):
        w, x = RNG.standard_normal(3), RNG.standard_normal((5, 3))
        val, (gw, gx) = f(w, x)
        ref_val, (ref_gw, ref_gx) = pb.withgradient(loss, w, x)
        assert val == pytest.approx(ref_val, rel=1e-14)
        np.testing.assert_allclose(gw, ref_gw, rtol=1e-13)
        np.testing.assert_allclose(gx, ref_gx, rtol=1e-13)
    info = f.cache_info()
    assert (info.traces, info.replays, info.signatures) == (1, 3, 1)


def test_the_first_call_returns_the_trace_s_results_and_the_first_replay_compiles():
    calls = []
    f = pb.jit(lambda x: calls.append(1) or pb.gradient(lambda x: np.sum(np.sin(x) * x), x)[0])
    x = np.array([0.5, -1.0, 2.0])
    want = np.cos(x) * x + np.sin(x)
    np.testing.assert_allclose(f(x), want, rtol=1e-15)
    ((program, *_),) = list(f._cache.values())[0]
    assert not program.compiled  # a function called once is never compiled
    np.testing.assert_allclose(f(2 * x), np.cos(2 * x) * 2 * x + np.sin(2 * x), rtol=1e-15)
    assert program.compiled and len(calls) == 1
    assert f.cache_info()[:2] == (1, 1)


def test_replayed_program_has_no_tracing_machinery():
    f = pb.jit(lambda x: pb.gradient(lambda x: np.sum(np.sin(x) * x), x)[0])
    f(np.ones(3))
    ((program, *_),) = list(f._cache.values())[0]
    assert "Tracked" not in program.source and "Symbol" not in program.source
    namespace_values = program.run.__globals__.values()
    assert not any(type(v).__name__ in ("Tracked", "Symbol", "Tape") for v in namespace_values)


def test_gradient_of_the_chain_matches_central_differences_after_replay():
    def chain(x):
        for _ in range(4):
            x = np.cos(np.tanh(np.sin(x) * 0.9) + 0.1)
        return np.sum(x)

    f = pb.jit(lambda x: pb.gradient(chain, x)[0])
    f(np.zeros(4))
    x = RNG.uniform(-1, 1, 4)
    h = 1e-6
    fd = np.array([(chain(x + h * e) - chain(x - h * e)) / (2 * h) for e in np.eye(4)])
    np.testing.assert_allclose(f(x), fd, rtol=1e-7, atol=1e-10)
    assert f.cache_info().replays == 1


def test_float32_stays_float32():
    f = pb.jit(lambda w, x: pb.gradient(loss, w, x))
    w, x = np.ones(3, np.float32), np.ones((2, 3), np.float32)
    f(w, x)
    gw, gx = f(w, x)
    assert gw.dtype == np.float32 and gx.dtype == np.float32


def test_a_branch_on_a_traced_value_is_a_guard_that_retraces():
    def f(x):
        if np.sum(x) > 0:
            return np.sin(x)
        return np.cos(x)

    jf = pb.jit(f)
    pos, neg = np.array([1.0, 2.0]), np.array([-1.0, -2.0])
    np.testing.assert_array_equal(jf(pos), np.sin(pos))
    np.testing.assert_array_equal(jf(neg), np.cos(neg))  # the guard fails: traced again
    np.testing.assert_array_equal(jf(pos + 1), np.sin(pos + 1))  # replay of the first trace
    np.testing.assert_array_equal(jf(neg - 1), np.cos(neg - 1))  # replay of the second
    info = jf.cache_info()
    assert (info.traces, info.replays, info.signatures) == (2, 2, 1)


def test_a_python_number_from_a_numpy_function_is_guarded():
    def f(x):
        return x * 2.0 if np.allclose(x, 0.0) else x * 3.0

    jf = pb.jit(f)
    np.testing.assert_array_equal(jf(np.zeros(2)), np.zeros(2))
    np.testing.assert_array_equal(jf(np.ones(2)), 3.0 * np.ones(2))


def test_shape_dtype_and_leaf_types_are_the_signature_and_python_numbers_are_inputs():
    jf = pb.jit(lambda x, p: x ** p)
    np.testing.assert_array_equal(jf(np.arange(3.0), 2), np.arange(3.0) ** 2)
    np.testing.assert_array_equal(jf(np.arange(3.0), 3), np.arange(3.0) ** 3)  # replayed with p = 3
    np.testing.assert_array_equal(jf(np.arange(4.0), 2), np.arange(4.0) ** 2)
    assert jf(np.arange(3, dtype=np.float32), 2).dtype == np.float32
    np.testing.assert_array_equal(jf(np.arange(3.0), 2.5), np.arange(3.0) ** 2.5)  # a float: another signature
    assert jf.cache_info().signatures == 4 and jf.cache_info().replays == 1


def test_where_an_argument_recurs_is_part_of_the_signature():
    """One object at several places is one input of the trace: the same array twice, then two
    arrays (or the other way round), must not replay the other program."""
    x, y = np.array([1.0, 2.0]), np.array([5.0, 7.0])
    both = pb.jit(lambda a, b: a * 2.0 + b)
    np.testing.assert_array_equal(both(x, x), x * 3.0)
    np.testing.assert_array_equal(both(x, y), x * 2.0 + y)
    np.testing.assert_array_equal(both(y, y), y * 3.0)
    total = pb.jit(lambda parts: sum(parts))
    for parts in ([x, x], [x, x, x], [x, y], [x, y, x], [y, x, x], [x, y]):
        np.testing.assert_array_equal(total(parts), sum(parts))
    shared = {"w": x}
    grads = pb.jit(lambda p, q: pb.gradient(lambda p, q: np.sum(p["w"] * q["w"]), p, q))
    for p, q in ((shared, shared), (shared, {"w": y}), ({"w": y}, {"w": y}), (shared, shared)):
        assert [None if g is None else g["w"].tolist() for g in grads(p, q)] == [
            None if g is None else g["w"].tolist() for g in pb.gradient(lambda p, q: np.sum(p["w"] * q["w"]), p, q)]


def test_the_type_of_each_container_is_part_of_the_signature():
    """A list and a tuple, or two classes with the same fields, may run different code."""
    x, y = np.array([1.0, 2.0]), np.array([5.0, 7.0])
    by_kind = pb.jit(lambda p: p[0] * 2.0 if isinstance(p, list) else p[0] * 3.0)
    np.testing.assert_array_equal(by_kind([x, y]), x * 2.0)
    np.testing.assert_array_equal(by_kind((x, y)), x * 3.0)

    class Double:
        def __init__(self, w):
            self.w = w

        def scale(self):
            return 2.0

    class Quintuple(Double):
        def scale(self):
            return 5.0

    step = pb.jit(lambda m: pb.withgradient(lambda m: np.sum(m.w ** 2) * m.scale(), m))
    for model in (Double(x), Quintuple(x), Double(y)):
        val, (g,) = step(model)
        assert val == np.sum(model.w ** 2) * model.scale()
        np.testing.assert_array_equal(g.w, 2.0 * model.w * model.scale())
    assert step.cache_info().signatures == 2


def test_the_names_and_order_of_the_parts_are_part_of_the_signature():
    """Containers with the same types and shapes but other keys, fields or nesting run other code."""
    x, y = np.array([1.0, 2.0]), np.array([5.0, 7.0])
    by_name = pb.jit(lambda d: d["a"] * 2.0 if "a" in d else d["b"] * 3.0)
    np.testing.assert_array_equal(by_name({"a": x}), x * 2.0)
    np.testing.assert_array_equal(by_name({"b": x}), x * 3.0)
    first = pb.jit(lambda d: next(iter(d.values())) * 1.0)
    np.testing.assert_array_equal(first({"a": x, "b": y}), x)
    np.testing.assert_array_equal(first({"b": y, "a": x}), y)
    nesting = pb.jit(lambda p: p[0][0] * 2.0 if isinstance(p[0], list) else p[0] * 3.0)
    np.testing.assert_array_equal(nesting([[x], y]), x * 2.0)
    np.testing.assert_array_equal(nesting([x, [y]]), x * 3.0)
    np.testing.assert_array_equal(nesting([[y], x]), y * 2.0)
    assert nesting.cache_info().signatures == 2
    by_key_type = pb.jit(lambda d: next(iter(d.values())) * (2.0 if type(next(iter(d))) is bool else 3.0))
    np.testing.assert_array_equal(by_key_type({True: x}), x * 2.0)
    np.testing.assert_array_equal(by_key_type({1: x}), x * 3.0)  # equal keys of another type


def test_python_numbers_replay_with_python_semantics():
    def f(x, lr, step):
        step = step + 1
        scale = lr / (1 - 0.9 ** step)
        return x * scale, step, scale

    jf = pb.jit(f)
    x = np.ones(2, np.float32)
    for lr, step in ((0.1, 0), (0.2, 1), (0.05, 7)):
        (y, s, c), (y_ref, s_ref, c_ref) = jf(x, lr, step), f(x, lr, step)
        assert y.dtype == np.float32  # a Python float stays weakly typed
        np.testing.assert_array_equal(y, y_ref)
        assert type(s) is int and s == s_ref and type(c) is float and c == c_ref
    assert jf.cache_info().traces == 1


def test_a_python_number_used_as_a_shape_axis_or_loop_count_is_guarded():
    def f(x, axis, n):
        for _ in range(n):
            x = np.cumsum(x, axis=axis)
        return x

    jf = pb.jit(f)
    x = RNG.standard_normal((2, 3))
    for axis, n in ((0, 1), (1, 1), (0, 2), (0, 1)):
        np.testing.assert_array_equal(jf(x, axis, n), f(x, axis, n))
    assert jf.cache_info().traces == 3 and jf.cache_info().replays == 1


def test_the_cache_keeps_at_most_cache_size_signatures():
    jf = pb.jit(np.sin, cache_size=2)
    for n in (1, 2, 3):
        jf(np.ones(n))
    assert jf.cache_info().signatures == 2
    with pytest.raises(ValueError, match="cache_size"):
        pb.jit(np.sin, cache_size=0)


def test_structured_arguments_and_results():
    class Model:
        def __init__(self, w, b, name):
            self.w, self.b, self.name = w, b, name

    def f(m, batch):
        return {"y": np.tanh(batch["x"] @ m.w + m.b), "name": m.name}

    jf = pb.jit(f)
    m = Model(np.ones((3, 2)), np.zeros(2), "dense")
    for _ in range(2):
        batch = {"x": RNG.standard_normal((4, 3))}
        out = jf(m, batch)
        np.testing.assert_allclose(out["y"], f(m, batch)["y"], rtol=1e-15)
        assert out["name"] == "dense"


def test_results_of_one_call_are_not_overwritten_by_the_next():
    jf = pb.jit(lambda x: np.sin(x) * 2.0 + 1.0)
    first = jf(np.ones(3))
    kept = first.copy()
    jf(np.zeros(3))
    jf(np.full(3, 5.0))
    np.testing.assert_array_equal(first, kept)


def test_inputs_are_never_written():
    jf = pb.jit(lambda x: np.exp(np.sin(x) + 1.0) * 2.0)
    x = np.linspace(0, 1, 5)
    before = x.copy()
    jf(x)
    jf(x)
    np.testing.assert_array_equal(x, before)


def test_concurrent_calls_from_eight_threads_each_get_their_own_result():
    jf = pb.jit(lambda w, x: pb.gradient(loss, w, x)[0])
    x = RNG.standard_normal((6, 3))
    jf(np.ones(3), x)
    ws = [RNG.standard_normal(3) for _ in range(8)]
    expected = [pb.gradient(loss, w, x)[0] for w in ws]
    results = [None] * 8

    def work(i):
        for _ in range(20):
            results[i] = jf(ws[i], x)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def test_threads_calling_at_once_with_a_new_signature_trace_it_once():
    start = threading.Barrier(6)
    jf = pb.jit(lambda w, x: pb.gradient(loss, w, x)[0])
    w, x = RNG.standard_normal(3), RNG.standard_normal((6, 3))
    results = [None] * 6

    def work(i):
        start.wait()
        results[i] = jf(w, x)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so that the traces would overlap
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert jf.cache_info().traces == 1 and jf.cache_info().replays == 5
    for got in results:
        np.testing.assert_allclose(got, pb.gradient(loss, w, x)[0], rtol=1e-13)


def test_converting_a_traced_array_to_numpy_is_refused_naming_the_fix():
    jf = pb.jit(lambda x: np.asarray(x) * 2)
    with pytest.raises(pb.JitError, match="np.asarray"):
        jf(np.ones(2))


def test_a_value_leaked_from_another_trace_is_refused_naming_the_fix():
    leaked = []
    with pytest.raises(pb.JitError, match="stored a traced value in `leaked`"):  # where the watch sees it
        pb.jit(lambda x: leaked.append(x) or x * 2.0)(np.ones(2))
    leaked = [None] * 40  # a long list is data, not followed item by item: the leak goes unseen there
    pb.jit(lambda x: leaked.insert(0, x) or x * 2.0)(np.ones(2))
    for uses in (lambda y: np.sin(y) + leaked[0],  # a ufunc (the short recording path)
                 lambda y: y * 2.0 - leaked[0],  # an operator
                 lambda y: np.maximum(y, leaked[0], dtype=np.float64),  # a ufunc with options
                 lambda y: np.stack([y, leaked[0]])):  # an array function
        with pytest.raises(pb.JitError, match="another pb.jit call"):
            pb.jit(uses)(np.ones(2))


def test_in_place_writes_are_replayed_and_views_kept_in_step():
    def writes(x):
        y = x * 1.0
        y[0] = 5.0
        y += 1.0
        y[[1, 2]] *= 2.0
        return y

    jf = pb.jit(writes)
    for x in (np.zeros(3), np.arange(3.0)):
        np.testing.assert_array_equal(jf(x), writes(x))

    def view_then_write_base(x):
        y = x * 1.0
        v = y[:2]
        y += 1.0
        return v

    def two_views(x):
        y = x * 1.0
        v, w = y[:2], y[1:]
        v += 1.0
        return w

    def view_of_a_view(x):
        y = x * 1.0
        v = y[1:]
        w = v[1:]
        w *= 3.0
        y[2] -= 1.0
        return y, v, w

    for f in (view_then_write_base, two_views, view_of_a_view):
        jf = pb.jit(f)
        for x in (np.zeros(4), np.arange(4.0), np.ones(4)):
            for got, want in zip(_as_list(jf(x)), _as_list(f(x))):
                np.testing.assert_array_equal(got, want)

    def transposed_then_write_base(x):  # x.T is not x[index]: its memory cannot be kept in step
        y = x * 1.0
        t = y.T
        y += 1.0
        return t

    with pytest.raises(pb.JitError, match="view"):
        pb.jit(transposed_then_write_base)(np.zeros((2, 2)))


def _as_list(result):
    return list(result) if isinstance(result, tuple) else [result]


def test_writes_into_an_index_view_reach_its_base():
    def f(x):
        y = x * 2.0
        v = y[1:]
        v *= 3.0
        v[0] += 1.0
        y[0] += y[2]
        return y, v

    jf = pb.jit(f)
    for x in (np.arange(4.0), np.ones(4)):
        for got, want in zip(jf(x), f(x)):
            np.testing.assert_array_equal(got, want)


def _transpose_write(a):
    m = a.reshape(2, 2) * 1.0
    m.T[0, 1] = 7.0 * a[0]
    return m


def _reshape_write(a):
    m = a * 1.0
    m.reshape(2, 2)[0, 0] = 9.0 * a[1]
    return m


def _slice_view_update(a):
    m = a * 1.0
    v = m[1:3]
    v += 5.0 * a[0]
    w = v[1:]
    w *= a[3]
    return m


def _einsum_diagonal_update(a):
    m = np.outer(a, a)
    np.einsum("ii->i", m)[:] += 1.0
    return m


def _ravel_and_ufunc_out(a):
    m = a * 1.0
    r = m.ravel()
    r[0] = 3.0 * a[2]
    np.multiply(m[1:3], 2.0, out=m[1:3])
    return m


@pytest.mark.parametrize("f", [_transpose_write, _reshape_write, _slice_view_update, _einsum_diagonal_update,
                               _ravel_and_ufunc_out], ids=lambda f: f.__name__.strip("_"))
def test_a_jitted_gradient_follows_writes_through_views_as_eager(f):
    """Inside pb.jit the gradient's values are the trace's stand-ins: a write through a view
    must still reach the array it views (it was lost, and value and gradient were wrong)."""
    step = pb.jit(lambda a: pb.withgradient(lambda a: np.sum(f(a) ** 2), a))
    for a in (np.array([0.5, 1.5, -0.7, 2.0]), np.array([1.0, -2.0, 3.0, 0.25])):
        eager = pb.withgradient(lambda a: np.sum(f(a) ** 2), a)
        got = step(a)
        np.testing.assert_allclose(got.val, eager.val, rtol=1e-14)
        np.testing.assert_allclose(got.grad[0], eager.grad[0], rtol=1e-13)
    assert pb.check_gradient(f, np.array([0.5, 1.5, -0.7, 2.0]))


def test_lstsq_and_polyfit_inside_a_jitted_gradient_and_a_rank_that_changes():
    """lstsq's residuals exist only at full column rank: the rank is a guard of the trace."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 3)), np.arange(5.0)
    step = pb.jit(lambda a, b: pb.withgradient(lambda a: np.sum(np.linalg.lstsq(a, b)[1]), a))
    deficient = a.copy()
    deficient[:, 2] = deficient[:, 0]
    for m in (a, deficient, a):
        eager = pb.withgradient(lambda a: np.sum(np.linalg.lstsq(a, b)[1]), m)
        got = step(m, b)
        np.testing.assert_allclose(got.val, eager.val, rtol=1e-12, atol=1e-12)
        if m is deficient:  # no residuals: the sum is a constant 0
            assert got.val == 0.0 and got.grad[0] is None and eager.grad[0] is None
        else:
            np.testing.assert_allclose(got.grad[0], eager.grad[0], rtol=1e-9, atol=1e-12)
    assert step.cache_info().traces == 2
    fit = pb.jit(lambda y: pb.withgradient(lambda y: np.sum(np.polyfit(np.arange(5.0), y, 2) ** 2), y))
    for y in (b, b ** 2):
        eager = pb.withgradient(lambda y: np.sum(np.polyfit(np.arange(5.0), y, 2) ** 2), y)
        np.testing.assert_allclose(fit(y).grad[0], eager.grad[0], rtol=1e-10)


def test_writes_into_the_arrays_it_was_given_reach_the_callers_arrays_as_without_jit():
    def f(x, y):
        x[0] = x[1] * 3.0  # into an argument
        y[1:] *= 2.0  # through a view of one
        return np.sum(x) + y[0]

    jf = pb.jit(f)
    for k in range(3):  # the trace, then replays
        x, y = np.array([1.0, 2.0 + k]), np.array([1.0, 2.0, 3.0 + k])
        x_ref, y_ref = x.copy(), y.copy()
        assert jf(x, y) == f(x_ref, y_ref)
        np.testing.assert_array_equal(x, x_ref)
        np.testing.assert_array_equal(y, y_ref)
    assert jf.cache_info().traces == 1


def test_batch_norm_running_statistics_update_under_jit_without_returning_the_model():
    layer = pb.nn.trainmode(pb.nn.BatchNorm(3))
    twin = pb.nn.trainmode(pb.nn.BatchNorm(3))
    jf = pb.jit(lambda m, x: np.sum(m(x) ** 2))
    data = np.random.default_rng(4)
    for _ in range(3):
        x = data.normal(size=(8, 3)).astype(np.float32)
        assert jf(layer, x) == pytest.approx(float(np.sum(twin(x) ** 2)), rel=1e-6)
    np.testing.assert_allclose(layer.running_mean, twin.running_mean, rtol=1e-6)
    np.testing.assert_allclose(layer.running_var, twin.running_var, rtol=1e-6)
    assert not np.allclose(layer.running_mean, 0.0)


def test_batch_norm_gradient_under_jit_is_eager_and_takes_numpy_s_route():
    """The jitted BatchNorm gradient equals the eager one; its replay forms the per-channel
    products with einsum, as eager does, and does not recompute the batch moments."""
    data = np.random.default_rng(5)
    layer = pb.nn.trainmode(pb.nn.BatchNorm(4))
    layer.scale[...] = data.uniform(0.5, 1.5, 4)
    w = data.normal(size=(6, 5, 4))

    def loss(m, x):
        return np.sum(m(x) * w)

    step = pb.jit(lambda m, x: pb.gradient(loss, m, x))
    for _ in range(3):
        x = data.normal(size=(6, 5, 4))
        (gm, gx), (em, ex) = step(layer, x), pb.gradient(loss, layer, x)
        np.testing.assert_allclose(gx, ex, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gm.scale, em.scale, rtol=1e-12)
        np.testing.assert_allclose(gm.shift, em.shift, rtol=1e-12)
    (program, *_), = next(iter(step._cache.values()))
    source = program.program.source if hasattr(program, "program") else program.source
    assert source.count("# einsum") == 2  # the variance forward, sum(g * x) backward


def test_update_in_place_is_refused_under_jit_before_anything_changes():
    model = {"w": np.array([1.0, 2.0])}
    state = pb.optim.setup(pb.optim.Adam(0.1), model)  # its step counter is a Python int
    step = pb.jit(lambda st, m: pb.optim.update_(st, m, pb.gradient(lambda m: np.sum(m["w"] ** 2), m)[0]))
    with pytest.raises(pb.JitError, match="inside pb.jit use optim.update"):
        step(state, model)
    np.testing.assert_array_equal(model["w"], [1.0, 2.0])


class _Counter:
    def __init__(self):
        self.w, self.calls = np.ones(2), 0


@pytest.mark.parametrize("fn, args, named", [
    (lambda m, x: (setattr(m, "calls", m.calls + 1), np.sum(m.w * x))[1], (_Counter(), np.ones(2)), "args[0].calls"),
    (lambda m, x: (setattr(m, "w", m.w * 2.0), np.sum(m.w * x))[1], (_Counter(), np.ones(2)), "args[0].w"),
    (lambda d, x: (d.__setitem__("seen", x), x)[1], ({"a": np.ones(2)}, np.ones(2)), "args[0]['seen']"),
    (lambda x, log: (log.append(1.0), x * 2.0)[1], (np.ones(2), [0.0]), "args[1][1]"),
], ids=["counter attribute", "array attribute replaced", "dict entry added", "list appended"])
def test_changes_to_the_arguments_objects_are_refused_naming_them(fn, args, named):
    # the call without pb.jit changes the caller's objects; a replay could not
    with pytest.raises(pb.JitError, match=re.escape(named) + ".*Return the new values instead"):
        pb.jit(fn)(*args)


def _functions_called(jitted):
    (program, *_), = [v for variants in jitted._cache.values() for v in variants]
    return [v for k, v in program.run.__globals__.items() if k[0] == "f" and k[1:].isdigit()]


def test_writes_into_an_array_the_program_made_happen_in_place_when_its_old_value_is_dead():
    from pullback import _jit_replay

    def scatter(x):
        y = np.zeros_like(x, shape=(3, x.size))  # made by the program: written in place
        for i in range(3):
            y[i] = x * (i + 1)
        z = x * 1.0  # a planned buffer: written through a copy
        z[0] = 7.0
        return y, z

    jf = pb.jit(scatter)
    for x in (np.arange(4.0), np.ones(4) * 0.5):
        for got, want in zip(jf(x), scatter(x)):
            np.testing.assert_array_equal(got, want)
    assert _functions_called(jf).count(_jit_replay._setitem_in_place) == 3


def test_a_primitive_is_recorded_as_one_call_of_its_numpy_code():
    @pb.primitive
    def scale_of(x):  # Python control flow on values: traced through, it would be a guard
        return np.full_like(x, 2.0 if float(x.max()) > 0 else -3.0)

    @pb.primitive
    def signed_scale(x):
        return x * scale_of(x)

    @pb.rrule(signed_scale)
    def signed_scale_rule(x):
        return signed_scale(x), lambda dy: (dy * scale_of(x),)

    jf = pb.jit(lambda x: pb.withgradient(lambda x: np.sum(signed_scale(x) ** 2), x))
    for x in (np.array([1.0, -2.0]), np.array([-1.0, -2.0]), np.array([0.5, 3.0])):
        val, (g,) = jf(x)
        ref_val, (ref_g,) = pb.withgradient(lambda x: np.sum(signed_scale(x) ** 2), x)
        assert val == ref_val
        np.testing.assert_array_equal(g, ref_g)
    assert jf.cache_info().retraces == 0  # no guard on x.max(): the primitive runs whole
    assert signed_scale.__wrapped__ in _functions_called(jf)  # its NumPy code, called whole


def test_a_convolutional_training_step_equals_eager_steps():
    from pullback.demo import build_model

    def step(model, state, x, y):
        (loss, logits), (grad,) = pb.withgradient(
            lambda m: (lambda z: (pb.nn.logitcrossentropy(z, y), pb.stop_gradient(z)))(m(x)), model)
        state, model = pb.optim.update(state, model, grad)
        return model, state, loss, logits

    def run(step_fn):
        model = build_model(np.random.default_rng(0))  # convolutions, batch norm, max pooling, dropout
        state = pb.optim.setup(pb.optim.Adam(1e-3), model)
        data = np.random.default_rng(1)
        losses = []
        for _ in range(4):
            x, y = data.normal(size=(16, 8, 8, 1)).astype(np.float32), data.integers(0, 10, 16)
            model, state, loss, _ = step_fn(model, state, x, y)
            losses.append(float(loss))
        return model, losses

    jitted = pb.jit(step)
    (model, losses), (ref_model, ref_losses) = run(jitted), run(step)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    leaves = pb.tree.leaves_with_path(model)
    ref_leaves = pb.tree.leaves_with_path(ref_model)
    assert [str(p) for p, _ in leaves] == [str(p) for p, _ in ref_leaves]
    for (path, a), (_, b) in zip(leaves, ref_leaves):  # parameters and running statistics
        if isinstance(a, np.ndarray) and a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=str(path))
    assert jitted.cache_info().traces == 1
    assert any(getattr(f, "__name__", "") == "_conv" for f in _functions_called(jitted))


def test_a_trace_keeps_only_the_large_values_still_named():
    held = []

    def f(x):
        for _ in range(20):
            x = np.sin(x) * 0.5 + 1.0
        held.append(sum(type(v) is np.ndarray and v.nbytes >= 1 << 16 and all(v.strides) for v in x.owner.values))
        return x

    x = np.linspace(0.0, 1.0, 100_000)
    jf = pb.jit(f)
    first = jf(x)
    assert held == [2]  # the input and the result: the 59 values between are shape-and-dtype stand-ins
    np.testing.assert_array_equal(first, _eager_chain(x))
    np.testing.assert_array_equal(jf(x + 1.0), _eager_chain(x + 1.0))


def _eager_chain(x):
    for _ in range(20):
        x = np.sin(x) * 0.5 + 1.0
    return x


def test_multiple_outputs_and_lists():
    def f(x):
        a, b = np.split(x, 2)
        q, r = np.linalg.qr(np.outer(a, b) + np.eye(2))
        return [a * b, q @ r]

    jf = pb.jit(f)
    for x in (np.arange(4.0), RNG.standard_normal(4)):
        got, want = jf(x), f(x)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-14)


def test_a_training_step_with_the_optimiser_equals_eager_steps():
    nn, optim = pb.nn, pb.optim
    model = nn.Chain(nn.Dense(3, 4, np.tanh, rng=np.random.default_rng(1)), nn.Dense(4, 1, rng=np.random.default_rng(2)))
    x, y = RNG.standard_normal((8, 3)), RNG.standard_normal((8, 1))

    def step(model, state, x, y):
        val, (g,) = pb.withgradient(lambda m: np.mean((m(x) - y) ** 2), model)
        state, model = optim.update(state, model, g)
        return model, state, val

    jitted = pb.jit(step)
    m_e, s_e = model, optim.setup(optim.Adam(1e-2), model)
    m_j, s_j = model, optim.setup(optim.Adam(1e-2), model)
    for _ in range(3):
        m_e, s_e, v_e = step(m_e, s_e, x, y)
        m_j, s_j, v_j = jitted(m_j, s_j, x, y)
        assert v_j == pytest.approx(v_e, rel=1e-13)
    for a, b in zip(pb.tree.leaves(m_j), pb.tree.leaves(m_e)):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    assert jitted.cache_info().replays >= 1


def test_jvp_and_hessian_inside_jit():
    f = lambda x: np.sum(np.sin(x) * x ** 2)  # noqa: E731
    jj = pb.jit(lambda x, v: pb.jvp(f, (x,), (v,)))
    jh = pb.jit(lambda x: pb.hessian(f, x))
    for _ in range(2):
        x, v = RNG.standard_normal(3), RNG.standard_normal(3)
        y, t = jj(x, v)
        y_ref, t_ref = pb.jvp(f, (x,), (v,))
        assert y == pytest.approx(y_ref) and t == pytest.approx(t_ref, rel=1e-13)
        np.testing.assert_allclose(jh(x), pb.hessian(f, x), rtol=1e-12)


def test_jacobian_inside_jit_in_both_modes():
    tall = lambda x: np.sin(x) * x[::-1]  # noqa: E731  (forward columns)
    wide = lambda x: np.sum(np.sin(x)) * x[:2]  # noqa: E731  (reverse rows)
    for g in (tall, wide):
        jf = pb.jit(lambda x: pb.jacobian(g, x)[0])
        for _ in range(2):
            x = RNG.standard_normal(3)
            np.testing.assert_allclose(jf(x), pb.jacobian(g, x)[0], rtol=1e-12)
        assert jf.cache_info().traces == 1


def test_a_jitted_function_called_inside_another_is_inlined():
    inner = pb.jit(lambda x: np.sin(x) * 2.0)
    outer = pb.jit(lambda x: inner(x) + 1.0)
    outer(np.ones(2))
    np.testing.assert_allclose(outer(np.zeros(2)), np.ones(2))
    assert inner.cache_info().traces == 0


def test_usable_as_a_decorator_with_options():
    @pb.jit(cache_size=4)
    def f(x):
        return x + 1.0

    np.testing.assert_array_equal(f(np.zeros(2)), np.ones(2))
    assert f.__name__ == "f"


# --- property: random programs with branches and loops -------------------------------------------
OPS = ["sin", "tanh", "scale", "shift", "square", "exp_small", "mul_x", "branch", "loop", "sum_bcast", "where", "index",
       "matmul", "maximum", "concat", "reshape_t", "number", "write"]
MIX = np.linspace(-1.0, 1.0, 25).reshape(5, 5) / 3.0


def run_program(program, x, c=0.5):
    """Interpret `program` (a list of op names) on x and the Python float c; the same code eagerly,
    traced and replayed."""
    y = x
    for op in program:
        if op == "matmul":
            y = MIX @ y
        elif op == "maximum":
            y = np.maximum(y, 0.2 * y)
        elif op == "concat":
            y = np.concatenate([y[1:], y[:1] * 2.0])
        elif op == "reshape_t":
            y = y.reshape(1, -1).T.ravel() + np.sum(y.reshape(5, 1), axis=0)
        elif op == "number":
            y = y * c + c ** 2
        elif op == "write":
            y = y.copy()
            y[1:3] += y[0]
        elif op == "sin":
            y = np.sin(y)
        elif op == "tanh":
            y = np.tanh(y)
        elif op == "scale":
            y = y * 0.7
        elif op == "shift":
            y = y + 0.3
        elif op == "square":
            y = y * y
        elif op == "exp_small":
            y = np.exp(0.1 * y)
        elif op == "mul_x":
            y = y * x
        elif op == "branch":
            y = np.sin(y) if np.sum(y) > 0 else np.cos(y) * 2.0
        elif op == "loop":
            k = 0
            while np.max(np.abs(y)) > 0.5 and k < 3:
                y = y * 0.5
                k += 1
        elif op == "sum_bcast":
            y = y - np.mean(y)
        elif op == "where":
            y = np.where(y > 0, y, 0.1 * y)
        else:
            y = y[::-1] + y[0]
    return np.sum(y ** 2)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(st.sampled_from(OPS), min_size=1, max_size=8),
       seeds=st.lists(st.integers(0, 10_000), min_size=2, max_size=4))
def test_random_programs_give_eager_results_when_replayed(program, seeds):
    jf = pb.jit(lambda x, c: pb.withgradient(lambda x, c: run_program(program, x, c), x, c))
    for seed in seeds:
        rng = np.random.default_rng(seed)
        x, c = rng.uniform(-1.5, 1.5, 5), float(rng.uniform(0.2, 0.9))
        val, (g, gc) = jf(x, c)
        ref_val, (ref_g, ref_gc) = pb.withgradient(lambda x, c: run_program(program, x, c), x, c)
        assert val == pytest.approx(ref_val, rel=1e-12, abs=1e-300)
        np.testing.assert_allclose(g, ref_g, rtol=1e-11, atol=1e-300)
        assert (gc is None) == (ref_gc is None)
        if gc is not None:
            assert gc == pytest.approx(ref_gc, rel=1e-11, abs=1e-300)


def test_draws_from_a_generator_argument_are_replayed_afresh():
    def noisy(x, rng):
        return x + rng.standard_normal(x.shape), rng.random()

    jf = pb.jit(noisy)
    eager_rng, jit_rng = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(3):
        (y_e, r_e), (y_j, r_j) = noisy(np.zeros(3), eager_rng), jf(np.zeros(3), jit_rng)
        np.testing.assert_array_equal(y_j, y_e)
        assert float(r_j) == r_e
    assert jf.cache_info().traces == 1


def test_dropout_in_a_jitted_gradient_draws_new_masks_each_call():
    layer = pb.nn.Dropout(0.5, rng=np.random.default_rng(0), training=True)
    twin = pb.nn.Dropout(0.5, rng=np.random.default_rng(0), training=True)
    jf = pb.jit(lambda m, x: pb.gradient(lambda x: np.sum(m(x) * x), x)[0])
    x = np.ones(8)
    for _ in range(3):
        np.testing.assert_array_equal(jf(layer, x), pb.gradient(lambda x: np.sum(twin(x) * x), x)[0])


NOISE = np.random.default_rng(7)


def _closure_noise():
    noise = np.random.default_rng(3)
    return lambda x: x + noise.normal(size=x.shape)


@pytest.mark.parametrize("fn, named", [
    (lambda x: x + NOISE.normal(size=x.shape), "`NOISE` (a global that"),
    (_closure_noise(), "`noise` (in the closure of"),
    (lambda x: x + np.random.rand(*x.shape), "NumPy's global generator"),
    (lambda x: MODEL_WITH_DROPOUT(x), "`MODEL_WITH_DROPOUT.layers[1].rng`"),
    (lambda x: pb.gradient(lambda x: np.sum(_noisy_global(x)), x)[0], "`NOISE` (a global that _noisy_global"),
], ids=["global generator", "closure generator", "np.random functions", "dropout in a global model",
        "through a function the gradient calls"])
def test_random_draws_the_trace_cannot_see_are_refused_naming_the_generator(fn, named):
    # a replay would repeat the traced draws: constant "random" numbers
    with pytest.raises(pb.JitError, match=re.escape(named) + ".*Pass a np.random.Generator as an argument"):
        pb.jit(fn)(np.ones(3))


def _noisy_global(x):
    return x * NOISE.random()


MODEL_WITH_DROPOUT = pb.nn.Chain(pb.nn.Dense(3, 3, rng=np.random.default_rng(0)),
                                 pb.nn.Dropout(0.5, rng=np.random.default_rng(1), training=True))


def test_a_legacy_random_state_argument_is_refused_when_drawn_from():
    # only a Generator argument is recorded; a RandomState's draws would be constants of the trace
    with pytest.raises(pb.JitError, match=r"`args\[1\]` \(an argument\).*Pass a np.random.Generator"):
        pb.jit(lambda x, r: x + r.normal(size=2))(np.zeros(2), np.random.RandomState(0))


def test_a_generator_passed_in_and_also_seen_in_a_closure_is_an_input_not_an_error():
    rng = np.random.default_rng(5)
    jf = pb.jit(lambda x, g: x + g.normal(size=3) if rng is not None else x)  # rng, in the closure, is g
    first, second = jf(np.zeros(3), rng), jf(np.zeros(3), rng)
    assert not np.array_equal(first, second)  # drawn afresh
    unused = np.random.default_rng(6)
    assert pb.jit(lambda x: x * 2 if unused is not None else x)(np.ones(2))[0] == 2.0  # never drawn from: fine


def test_an_ndarray_subclass_argument_is_refused_naming_it():
    with pytest.raises(pb.JitError, match="matrix"):
        pb.jit(lambda m: m * 2)(np.matrix([[1.0]]))


def test_float_of_a_traced_value_is_a_guard():
    def f(x):
        scale = float(np.max(x))
        return x / scale

    jf = pb.jit(f)
    for x in (np.array([1.0, 2.0]), np.array([3.0, 1.0]), np.array([1.0, 2.0])):
        np.testing.assert_array_equal(jf(x), f(x))
    assert jf.cache_info().traces == 2


def test_guard_outcomes_kept_per_signature_are_bounded():
    jf = pb.jit(lambda x: x * float(x[0]))
    for k in range(20):
        np.testing.assert_array_equal(jf(np.array([k, 1.0])), np.array([k, 1.0]) * k)
    (variants,) = jf._cache.values()
    assert len(variants) <= 8 and jf.cache_info().traces == 20


@pytest.mark.parametrize("fn", [
    lambda x, a: pb.gradient(lambda x: np.sum(x * a), x)[0],
    lambda x, a: pb.gradient(lambda x: np.sum(a * x + a), x)[0],
    lambda x, a: pb.gradient(lambda x: np.sum(np.power(x, a)), x)[0],
    lambda x, a: pb.gradient(lambda a: np.sum(x * a ** 2), a)[0],
    lambda x, a: pb.withgradient(lambda x, a: np.sum(x * a ** 2), x, a),
    lambda x, a: pb.gradient(lambda p: np.sum(x * p["a"] ** 2), {"a": a})[0],
    lambda x, a: pb.jvp(lambda x: np.sin(x) * a, (x,), (x,))[1],
    lambda x, a: x + np.sqrt(a),
], ids=["operand", "reflected", "exponent", "differentiated", "withgradient", "in a dict", "jvp", "numpy on a number"])
def test_a_python_number_beside_differentiation_gives_eager_results(fn):
    jf = pb.jit(fn)
    x = np.array([1.0, 2.0])
    for a in (2.0, 3.0, 2.0, 0.5):
        got, want = jf(x, a), fn(x, a)
        for g, w in zip(pb.tree.leaves(got), pb.tree.leaves(want)):
            np.testing.assert_allclose(g, w, rtol=1e-14)


# --- elementwise segments run in parts, one per core -----------------------------------------------
@contextlib.contextmanager
def parts_for_small_arrays(count=3, parts=None, block_bytes=16):
    """Segments of arrays of every size run in `count` parts (they normally wait for large arrays
    and take one part per core), each part in blocks of about `block_bytes` per array (one or two
    rows here), so that small, quick tests exercise the cutting, with uneven parts and blocks."""
    from pullback import _jit_parallel, _jit_replay

    saved = _jit_parallel.MIN_SIZE, _jit_replay.PARTS, _jit_parallel.BLOCK_BYTES
    _jit_parallel.MIN_SIZE, _jit_replay.PARTS = 1, parts or _jit_parallel.Parts(count)
    _jit_parallel.BLOCK_BYTES = block_bytes
    try:
        yield
    finally:
        _jit_parallel.MIN_SIZE, _jit_replay.PARTS, _jit_parallel.BLOCK_BYTES = saved


def _sources(jitted):
    return [program.source for variants in jitted._cache.values() for program, *_ in variants]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_chain_gradient_run_in_parts_equals_eager(dtype):
    from pullback.bench.workloads import chain

    loss = lambda v: chain(v, 20, np)  # noqa: E731
    x = np.linspace(-1.0, 1.0, 50).astype(dtype)
    with parts_for_small_arrays():
        jf = pb.jit(lambda x: pb.withgradient(loss, x))
        jf(x)
        value, (g,) = jf(x * 0.5)
    ref_value, (ref_g,) = pb.withgradient(loss, x * 0.5)
    assert any("parts(" in source for source in _sources(jf))
    assert g.dtype == ref_g.dtype == dtype
    np.testing.assert_array_equal(g, ref_g)  # the same NumPy kernels, element by element
    assert value == ref_value


def test_operands_that_broadcast_or_are_strided_are_read_right_in_parts():
    def f(x, y, bias, n):
        a = np.sin(x) * np.float64(0.5)  # float32 beside a float64 scalar: NumPy gives float64
        b = np.exp(a + y[:1])  # a (1, 4) operand, read whole by every part
        c = b * b.T.T + bias  # a strided operand cut by rows, a bias broadcast along the rows
        d = c[::-1] * c  # a reversed view: a segment ends before it
        return d / (1.0 + n), n * 3 + 1  # an integer array
    x = np.linspace(0.0, 1.0, 28, dtype=np.float32).reshape(7, 4)
    y, bias, n = np.ones((7, 4), np.float32), np.arange(4.0), np.arange(28).reshape(7, 4)
    with parts_for_small_arrays():
        jf = pb.jit(f)
        jf(x, y, bias, n)
        got = jf(x + 1.0, y, bias, n)
    assert any("parts(" in source for source in _sources(jf))
    for g, e in zip(got, f(x + 1.0, y, bias, n)):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


VIEW_PROGRAMS = {
    "a dying buffer read through a reversed view": lambda x, y: np.exp(x)[::-1] * np.exp(x) + (1.0 + y),
    "a dying buffer's first row read by every part": lambda x, y: (lambda a: a * a[:1])(np.exp(x)),
    "a transpose of a buffer beside it": lambda x, y: (lambda a: np.sin(a) * a.T + a)(np.exp(x[:4])),
    "a view kept while the buffer's rows are overwritten": lambda x, y: (lambda a: (np.sin(a) + 1.0, a[1:] * 2.0))(np.exp(y)),
}


class PartsInOrder:
    """Runs the parts one after another in a fixed order: a part that overwrites rows another part
    still has to read then gives a wrong result every time, not only when the threads race."""

    def __init__(self, count, backwards):
        self.count, self.backwards = count, backwards

    def __call__(self, segment, rows, block, *arrays):
        bounds = [rows * k // self.count for k in range(self.count + 1)]
        order = range(self.count)[::-1] if self.backwards else range(self.count)
        for k in order:
            segment(bounds[k], bounds[k + 1], block, *arrays)


@pytest.mark.parametrize("backwards", [False, True])
@pytest.mark.parametrize("name", VIEW_PROGRAMS)
def test_a_buffer_read_through_a_view_is_not_overwritten_by_another_part(name, backwards):
    f = VIEW_PROGRAMS[name]
    x = np.linspace(0.0, 1.0, 28).reshape(7, 4)
    y = np.cos(x)
    with parts_for_small_arrays(parts=PartsInOrder(3, backwards)):
        jf = pb.jit(f)
        jf(x, y)
        got = jf(x + 0.5, y - 0.5)
    assert any("parts(" in source for source in _sources(jf))
    for g, e in zip(*[r if isinstance(r, tuple) else (r,) for r in (got, f(x + 0.5, y - 0.5))]):
        np.testing.assert_array_equal(g, e)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_runs_segments_in_parts_with_threads_of_its_own():
    from pullback import _jit_parallel

    parts = _jit_parallel.Parts(2)
    out = np.zeros(8)

    def segment(lo, hi, block, out):
        out[lo:hi] = np.arange(lo, hi)

    parts(segment, 8, 8, out)  # the parent's worker thread starts
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if its parts ran (a lost pool would hang here)
        try:
            out[:] = 0
            parts(segment, 8, 8, out)
            os._exit(0 if out.tolist() == list(range(8)) else 1)
        finally:
            os._exit(2)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child's parts never ran")


def test_large_arrays_run_in_parts_and_small_ones_in_one_call():
    from pullback import _jit_parallel, _jit_replay

    if _jit_replay.PARTS.count < 2:
        pytest.skip("one core: segments run whole")
    jf = pb.jit(lambda x: np.tanh(np.sin(x) * 2.0 + 1.0))
    small, large = np.linspace(0, 1, 10), np.linspace(0, 1, _jit_parallel.MIN_SIZE)
    jf(small), jf(large)
    assert sorted("parts(" in source for source in _sources(jf)) == [False, True]
    np.testing.assert_array_equal(jf(large), np.tanh(np.sin(large) * 2.0 + 1.0))


def test_numpy_error_handling_of_the_caller_holds_in_every_part():
    jf_raw = lambda x, y: np.sin(x) / y + 1.0  # noqa: E731
    x, y = np.linspace(0.5, 1.0, 9), np.ones(9)
    y[8] = 0.0  # a division by zero in the last part, run by a worker thread
    with parts_for_small_arrays():
        jf = pb.jit(jf_raw)
        with np.errstate(divide="ignore"):
            jf(x, np.ones(9))
            assert np.isinf(jf(x, y)[8])
        with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
            jf(x, y)
        seen = []
        with np.errstate(divide="call", call=lambda kind, flag: seen.append(kind)):
            jf(x, y)
        assert seen == ["divide by zero"]
    assert any("parts(" in source for source in _sources(jf))


def test_arrays_of_python_objects_are_not_cut_into_parts():
    calls = []

    class Logged(int):
        def __add__(self, other):
            calls.append(int(self))
            return Logged(int(self) + other)

    x = np.array([Logged(k) for k in range(9)], dtype=object)
    with parts_for_small_arrays():
        jf = pb.jit(lambda x: (x + 1) + 1)
        jf(x)
        calls.clear()
        result = jf(x)
    assert calls == list(range(9)) + list(range(1, 10))  # in NumPy's order, as eagerly
    assert list(result) == list(range(2, 11))
    assert not any("parts(" in source for source in _sources(jf))


def test_an_error_in_a_part_reaches_the_caller():
    from pullback import _jit_parallel

    def segment(lo, hi, block, flags):
        if flags[lo:hi].any():
            raise FloatingPointError(f"rows {lo}:{hi}")

    parts = _jit_parallel.Parts(3)
    flags = np.zeros(9, bool)
    parts(segment, 9, 9, flags)
    flags[7] = True  # in the last part, run by a worker thread
    with pytest.raises(FloatingPointError, match="rows 6:9"):
        parts(segment, 9, 9, flags)


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("block_bytes", [8, 24, 1 << 16])
def test_a_gradient_run_in_blocks_keeps_its_forward_values_in_scratch_and_equals_eager(count, block_bytes):
    from pullback.bench.workloads import chain

    loss = lambda v: chain(v, 20, np)  # noqa: E731
    x = np.linspace(-1.0, 1.0, 21)  # 7 rows a part, in blocks of 1, 3 or all rows: uneven last blocks
    with parts_for_small_arrays(count, block_bytes=block_bytes):
        jf = pb.jit(lambda x: pb.gradient(loss, x)[0])
        jf(x)
        g = jf(x * 0.5)
    np.testing.assert_array_equal(g, pb.gradient(loss, x * 0.5)[0])
    (source,) = _sources(jf)
    assert "for a in range(lo, hi, n):" in source
    # one segment holds the forward and backward passes; the gradient is its one whole array, and the
    # forward values the backward pass reads live in the part's scratch
    assert source.count("parts(") == 1
    assert len(re.findall(r"^    s\d+ = (?:b\d+|empty)", source, re.M)) == 1


SCRATCH_PROGRAMS = {
    "an intermediate returned beside the result": lambda x: (lambda y: (y, np.cos(y) * 2.0))(np.sin(x) + 1.0),
    "an intermediate read through a view after the segment": lambda x: (lambda y: (np.exp(y) - 1.0, y[::2].sum()))(np.sin(x) * 3.0),
    "float32 and float64 values of one shape": lambda x: np.sin(x.astype(np.float32)) * np.float32(2) + np.cos(x) * (x > 0.5),
    "an intermediate reduced after the segment, then broadcast": lambda x: (lambda y: y * np.sin(y) / y.sum())(np.tanh(x) + 2.0),
}


@pytest.mark.parametrize("name", SCRATCH_PROGRAMS)
def test_values_read_after_a_segment_are_whole_arrays_and_the_rest_scratch(name):
    f = SCRATCH_PROGRAMS[name]
    x = np.linspace(0.0, 2.0, 30).reshape(10, 3)
    with parts_for_small_arrays(block_bytes=40):  # blocks of one or two rows, of three rows a part
        jf = pb.jit(f)
        jf(x)
        got = jf(x + 0.25)
    assert any("parts(" in source for source in _sources(jf))
    for g, e in zip(*[r if isinstance(r, tuple) else (r,) for r in (got, f(x + 0.25))]):
        assert np.asarray(g).dtype == np.asarray(e).dtype
        np.testing.assert_array_equal(g, e)


def test_a_constant_array_of_the_result_shape_is_read_by_rows_in_parts():
    w = np.arange(21.0).reshape(7, 3)  # read by the trace as a constant (a closure's array)
    f = lambda x: np.sin(x) * w + w * w  # noqa: E731
    x = np.linspace(0.0, 2.0, 21).reshape(7, 3)
    with parts_for_small_arrays():
        jf = pb.jit(f)
        jf(x)
        got = jf(x + 0.5)
    (source,) = _sources(jf)
    assert source.count("parts(") == 1 and "c0_0" not in source.split("def program")[1]
    np.testing.assert_array_equal(got, f(x + 0.5))


def _division_errors(fn, mode, x, y):
    """The errors `fn(x, y)` reports under `np.errstate(divide=mode)`: warnings or callback calls."""
    seen = []
    with warnings.catch_warnings(record=True) as caught, np.errstate(divide=mode, call=lambda kind, flag: seen.append(kind)):
        warnings.simplefilter("always")
        fn(x, y)
    return seen + [str(w.message) for w in caught]


@pytest.mark.parametrize("mode", ["warn", "call"])
def test_an_error_met_in_several_parts_and_blocks_is_reported_once_as_by_numpy(mode):
    f = lambda x, y: np.sin(x) / y + 1.0  # noqa: E731
    x, y = np.linspace(0.5, 1.0, 9), np.ones(9)
    y[[0, 4, 8]] = 0.0  # in every part, and in several blocks
    with parts_for_small_arrays():
        jf = pb.jit(f)
        with np.errstate(divide="ignore"):
            jf(x, np.ones(9))
            jf(x, np.ones(9))
        got = _division_errors(jf, mode, x, y)
    assert any("parts(" in source for source in _sources(jf))
    assert got == _division_errors(f, mode, x, y) == (
        ["divide by zero encountered in divide"] if mode == "warn" else ["divide by zero"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(st.sampled_from(OPS), min_size=1, max_size=8), seed=st.integers(0, 10_000))
def test_random_programs_give_eager_results_when_run_in_parts(program, seed):
    rng = np.random.default_rng(seed)
    x, c = rng.uniform(-1.5, 1.5, 5), float(rng.uniform(0.2, 0.9))
    with parts_for_small_arrays():
        jf = pb.jit(lambda x, c: pb.withgradient(lambda x, c: run_program(program, x, c), x, c))
        jf(x * 0.9, c)
        val, (g, gc) = jf(x, c)
    ref_val, (ref_g, ref_gc) = pb.withgradient(lambda x, c: run_program(program, x, c), x, c)
    assert val == pytest.approx(ref_val, rel=1e-12, abs=1e-300)
    np.testing.assert_allclose(g, ref_g, rtol=1e-11, atol=1e-300)
    if gc is not None:
        assert gc == pytest.approx(ref_gc, rel=1e-11, abs=1e-300)


def test_a_constant_result_is_a_new_array_on_every_call():
    # the gradient of sum(3 w) does not depend on w: the program keeps it as a constant, and a
    # caller adding into one result must not change the next (the first, traced, call included)
    step = pb.jit(lambda w: pb.gradient(lambda w: np.sum(w * 3.0), w)[0])
    w = np.array([1.0, 2.0])
    total = step(w)
    for _ in range(3):
        total += step(w)
    np.testing.assert_array_equal(total, [12.0, 12.0])
    assert step(w) is not step(w)
    grads = pb.jit(lambda d: pb.gradient(lambda d: np.sum(2.0 * d["a"]) + np.sum(d["b"]), d)[0])
    d = {"a": np.ones(2), "b": np.ones(3)}
    for _ in range(3):
        g = grads(d)
        assert g["b"].flags.writeable
        g["a"] += 100.0
        g["b"] += 100.0
    np.testing.assert_array_equal(grads(d)["a"], [2.0, 2.0])
    np.testing.assert_array_equal(grads(d)["b"], [1.0, 1.0, 1.0])
    same = pb.jit(lambda x: x)
    x = np.ones(2)
    assert same(x) is x and same(x) is x  # an argument handed back stays itself, as without pb.jit


_NUMBER_USES = {
    "isinstance float": lambda x, s: x * s if isinstance(s, float) else x * 0.0,
    "isinstance Real": lambda x, s: x * s if isinstance(s, numbers.Real) else x * 0.0,
    "np.isscalar": lambda x, s: x * s if np.isscalar(s) else x * 0.0,
    "str": lambda x, s: x * len(str(s)),
    "repr": lambda x, s: x * len(repr(s)),
    "format": lambda x, s: x * float(f"{s:.1f}"),
    "round": lambda x, s: x * round(s),
    "round to digits": lambda x, s: x * round(s, 1),
    "trunc": lambda x, s: x * math.trunc(s),
    "ceil": lambda x, s: x * math.ceil(s),
    "divmod": lambda x, s: x * divmod(s, 1.0)[1],
}


@pytest.mark.parametrize("use", sorted(_NUMBER_USES))
def test_a_python_number_argument_answers_type_checks_and_text_as_the_number_does(use):
    f = _NUMBER_USES[use]
    jitted = pb.jit(f)
    x = np.ones(2)
    for s in (1.7, 2.25, 1.7, 3):
        np.testing.assert_array_equal(jitted(x, s), f(x, s))


# --- writes into arguments before an exception, and results that share memory ---------------------

def test_a_write_into_an_argument_before_an_exception_reaches_the_caller():
    def f(x):
        x += 1.0
        if x[0] > 5:
            raise ValueError("too big")
        return x * 2

    jf = pb.jit(f)
    jf(np.array([0.0, 1.0]))
    jf(np.array([0.0, 1.0]))  # replayed: the guard on x[0] > 5 fails, and the trace raises
    for call in (f, jf, jf):
        a = np.array([10.0, 1.0])
        with pytest.raises(ValueError, match="too big"):
            call(a)
        np.testing.assert_array_equal(a, [11.0, 2.0])  # without pb.jit, the write happened


def test_a_write_into_an_argument_before_a_linalg_error_reaches_the_caller():
    def f(x, m):
        x *= 2.0
        return np.linalg.inv(m)

    jf = pb.jit(f)
    jf(np.ones(2), np.eye(2))
    jf(np.ones(2), np.eye(2))
    for call in (f, jf):
        a = np.ones(2)
        with pytest.raises(np.linalg.LinAlgError):
            call(a, np.zeros((2, 2)))
        np.testing.assert_array_equal(a, [2.0, 2.0])


def test_results_that_share_memory_share_it_at_the_first_call_too():
    def f(x):
        y = x * 2
        return y, y.T, y.T[1]

    jf = pb.jit(f)
    for _ in range(3):
        y, yt, row = jf(np.ones((2, 2)))
        np.testing.assert_array_equal(y, 2 * np.ones((2, 2)))
        y[0, 1] = 7.0
        assert yt[1, 0] == 7.0 and row[0] == 7.0  # as without pb.jit: views of one array


def test_a_view_written_in_place_and_returned_stays_a_view_of_the_result():
    def f(x):
        y = x * 2
        v = y[:2]
        v += 5
        return y, v

    jf = pb.jit(f)
    for _ in range(3):
        y, v = jf(np.ones(4))
        np.testing.assert_array_equal(y, [7.0, 7.0, 2.0, 2.0])
        np.testing.assert_array_equal(v, [7.0, 7.0])
        y[0] = -1.0
        assert v[0] == -1.0  # as without pb.jit: v is y[:2]


def _tail(x):
    x += 1.0
    return x[1:]


def _transposed(x):
    x += 1.0
    return x.T


def _sin_into_a_view(x):
    return np.sin(x[:2], out=x[2:4])


def _written_through_a_view(x):
    v = x[1:]
    v *= 2.0
    return v


@pytest.mark.parametrize("f", [_tail, _transposed, _sin_into_a_view, _written_through_a_view])
def test_a_view_of_a_written_argument_returned_is_that_view_of_the_callers_array(f):
    jf = pb.jit(f)
    for k in range(3):
        a, b = np.arange(4.0) + k, np.arange(4.0) + k
        got, want = jf(a), f(b)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(a, b)
        got.flat[0] = 100.0  # writes the caller's array, as without pb.jit
        want.flat[0] = 100.0
        np.testing.assert_array_equal(a, b)
        assert np.shares_memory(got, a)


# --- x.flat, and NumPy functions that write into their first argument ------------------------------

_X4 = np.array([0.26, 0.74, 1.31, 0.42])


def test_flat_read():
    jf = pb.jit(lambda x: np.sum(x.flat[::2]))
    for x in (_X4, _X4[::-1].copy()):
        np.testing.assert_allclose(jf(x.copy()), x[0] + x[2])


def test_flat_write():
    def f(x):
        y = x * 1.0
        y.flat[::2] = 0.0
        return np.sum(y)

    jf = pb.jit(f)
    for x in (_X4, _X4[::-1].copy()):
        np.testing.assert_allclose(jf(x.copy()), x[1] + x[3])


def test_numpy_functions_writing_into_their_first_argument_are_recorded():
    def f(x, m):
        y = x * 1.0
        np.putmask(y, y > 0.5, x[:2] ** 2)  # values cycled over the positions, as NumPy does
        np.copyto(m, y[:2] * 3.0)
        np.fill_diagonal(m, -x[3])
        np.place(y, y < 0.3, [9.0])
        return y

    jf = pb.jit(f)
    for x in (_X4, _X4[::-1].copy(), _X4 * 2):
        m, m_eager = np.zeros((2, 2)), np.zeros((2, 2))
        np.testing.assert_array_equal(jf(x.copy(), m), f(x.copy(), m_eager))
        np.testing.assert_array_equal(m, m_eager)  # the write into the argument reached the caller


def test_jit_grad_putmask_with_cycled_values():
    def f(x):
        y = x * 1.0
        np.putmask(y, x > 0.5, x[:2] ** 2)
        return np.sum(y * x)

    # by hand: y = where(x > 0.5, x[n % 2] ** 2, x); d/dx of sum(y * x)
    expected = []
    for x in (_X4, _X4[::-1].copy()):
        g = np.where(x > 0.5, 0.0, 2 * x)
        for n in np.flatnonzero(x > 0.5):
            g[n] += x[n % 2] ** 2
            g[n % 2] += 2 * x[n % 2] * x[n]
        expected.append(g)
    jg = pb.jit(pb.grad(f))
    for x, g in zip((_X4, _X4[::-1].copy()), expected):
        np.testing.assert_allclose(pb.gradient(f, x.copy())[0], g)
        np.testing.assert_allclose(jg(x.copy()), g)


def _general_signature(args, kwargs, monkeypatch):
    from pullback import _jit

    with monkeypatch.context() as m:
        m.setattr(_jit, "_plain_signature", lambda args, kwargs: None)
        return _jit._signature(args, kwargs)


PLAIN_ARGUMENTS = {
    "a list of arrays and an array": lambda a, b: (([a, b, a * 2], b), {}),
    "an array met twice, in two containers": lambda a, b: (([a, b], (a,), {"w": b}), {}),
    "numbers beside arrays, keywords": lambda a, b: ((a, 3, 0.5), {"lr": 0.1, "steps": [2, a]}),
    "empty containers, nested": lambda a, b: (([], (), {}, [[a], [[b]]]), {}),
    "an F-ordered and a strided array": lambda a, b: (([np.asfortranarray(a.reshape(2, 2)), b[::2]],), {}),
    "a dict with keys of several types": lambda a, b: (({1: a, "1": b, (1,): a},), {}),
}


@pytest.mark.parametrize("name", PLAIN_ARGUMENTS)
def test_the_plain_arguments_signature_equals_the_general_walks(name, monkeypatch):
    from pullback import _jit

    args, kwargs = PLAIN_ARGUMENTS[name](np.arange(4.0), np.ones(4, np.float32))
    plain = _jit._plain_signature(args, kwargs)
    assert plain is not None
    general = _general_signature(args, kwargs, monkeypatch)
    assert plain[1] == general[1] and plain[2] == general[2]
    assert [id(a) for a in plain[0]] == [id(a) for a in general[0]]
    # the containers in the walk's order; the last is the (args, kwargs) pair each walk makes for itself
    assert [id(c) for c in plain[3][:-1]] == [id(c) for c in general[3][:-1]]


NOT_PLAIN_ARGUMENTS = {
    "a container met twice": lambda a: (lambda shared: ([shared, shared],))([a]),
    "a cycle": lambda a: (lambda cyc: (cyc.append(cyc) or cyc,))([a]),
    "a bool": lambda a: (a, True),
    "a NumPy scalar": lambda a: (a, np.float64(1.0)),
    "a namedtuple": lambda a: (collections.namedtuple("P", "w")(a),),
    "an ndarray subclass": lambda a: (np.ma.masked_array(a),),
    "a list subclass": lambda a: (type("L", (list,), {})([a]),),
    "nested deeper than the limit": lambda a: (functools.reduce(lambda x, _: [x], range(40), a),),
}


@pytest.mark.parametrize("name", NOT_PLAIN_ARGUMENTS)
def test_other_arguments_take_the_general_walk(name):
    from pullback import _jit

    assert _jit._plain_signature(NOT_PLAIN_ARGUMENTS[name](np.arange(4.0)), {}) is None


def test_a_python_float_exponent_argument_replays_numpys_operator():
    # `x ** 0.5` is np.sqrt (nan at -inf) in every NumPy; np.power(x, 0.5) gives inf there before NumPy 2.3
    f = lambda x, n: x ** n  # noqa: E731
    x = np.array([-np.inf, 4.0, 2.0, -0.0, -1.0])
    jf = pb.jit(f)
    with np.errstate(invalid="ignore"):
        for n in (0.5, 2.0, 0.5, -0.5, 3.0):
            got, want = jf(x, n), f(x, n)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    assert jf.cache_info().traces == 1


def test_a_segment_run_whole_under_an_error_callback_keeps_only_block_sized_scratch():
    from pullback.bench.workloads import chain

    x = np.linspace(-1.0, 1.0, 21)
    with parts_for_small_arrays(count=1, block_bytes=16):  # blocks of two rows
        jf = pb.jit(lambda x: pb.gradient(lambda v: chain(v, 10, np), x)[0])
        jf(x)
        jf(x)
        with np.errstate(all="call", call=lambda kind, flag: None):
            g = jf(x * 0.5)  # one part, one block of 21 rows
        jf(x)
    np.testing.assert_array_equal(g, pb.gradient(lambda v: chain(v, 10, np), x * 0.5)[0])
    program = next(iter(jf._cache.values()))[0][0].program
    kept = [v.arrays for k, v in program.run.__globals__.items() if k.endswith("_scratch") and v.arrays is not None]
    assert kept and all([a.shape for a in arrays] == [(2,)] * len(arrays) for arrays in kept)  # (and the fused part's)
