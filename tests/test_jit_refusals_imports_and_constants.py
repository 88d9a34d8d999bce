"""pb.jit: a refused call leaves the caller's argument objects as they were; a module imported first inside
the trace may make and draw from a generator of its own; a recorded call whose result holds no array is
recomputed by each replay (or refused, naming the function); the value of a rule that `pb.jvp` or `pb.vjp`
hands out as it is keeps NumPy's read-only flag. Each compared with the eager call."""
import collections
import copy
import re
import subprocess
import sys
import types
import uuid

import numpy as np
import pytest

import pullback as pb


class _Box:
    pass


def _box(**fields):
    box = _Box()
    box.__dict__.update(fields)
    return box


def _appended(o):
    o.hist.append(1)
    return np.sum(o.w)


# --- a refused call leaves the caller's objects as they were -----------------------------------------
def test_a_refused_append_to_an_argument_list_leaves_the_callers_list_empty():
    o = _box(w=np.ones(3), hist=[])
    jitted = pb.jit(_appended)
    for _ in range(2):  # the second call meets the list as the first found it: the same refusal
        with pytest.raises(pb.JitError, match=r"args\[0\]\.hist\[0\]"):
            jitted(o)
        assert o.hist == []
    np.testing.assert_array_equal(o.w, np.ones(3))


def _set_on_box(o, x):
    o.k = 1
    return x * 2.0


def _added_to_nested_dict(d, x):
    d["log"]["m"] = "y"
    return x * 2.0


def _added_to_set(o, x):
    o.tags.add("b")
    return x * 2.0


def _appended_to_deque(o, x):
    o.queue.append(2)
    return x * 2.0


def _written_into_bytearray(o, x):
    o.buffer[0] = 0
    return x * 2.0


def _reordered_dict(d, x):
    d["first"] = d.pop("first")  # the same entries, in another order
    return x * 2.0


def _empty_list_appended(o, x):
    o.seen.append([])  # no leaf under the new entry
    return x * 2.0


@pytest.mark.parametrize("fn, make, named", [
    (_set_on_box, lambda: _box(name="a"), "args[0].k"),
    (_added_to_nested_dict, lambda: {"w": np.ones(2), "log": {"n": "x"}}, "args[0]['log']['m']"),
    (_added_to_set, lambda: _box(tags={"a"}), "args[0].tags"),
    (_appended_to_deque, lambda: _box(queue=collections.deque([1])), "args[0].queue"),
    (_written_into_bytearray, lambda: _box(buffer=bytearray(b"ab")), "args[0].buffer"),
    (_reordered_dict, lambda: {"first": "a", "second": "b"}, "args[0]"),
    (_empty_list_appended, lambda: _box(seen=[]), "args[0].seen"),
], ids=["attribute of an object without arrays", "entry of a nested dict", "set", "deque", "bytearray",
        "dict order", "empty list appended"])
def test_each_refused_change_to_an_argument_object_is_undone_for_the_caller(fn, make, named):
    eager_arg, arg, x = make(), make(), np.ones(2)
    fn(eager_arg, x)
    assert _state(eager_arg) != _state(make()), "the call without pb.jit changes the object"
    with pytest.raises(pb.JitError, match=re.escape(named) + ".*Return the new values instead"):
        pb.jit(fn)(arg, x)
    assert _state(arg) == _state(make())


def _state(value):
    """A comparable picture of an object's contents, dict order included."""
    if isinstance(value, dict):
        return [(k, _state(v)) for k, v in value.items()]
    if isinstance(value, _Box):
        return [(k, _state(v)) for k, v in vars(value).items()]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, collections.deque)):
        return [_state(v) for v in value]
    if isinstance(value, set):
        return sorted(value)
    return copy.copy(value)


def test_a_change_to_an_argument_object_before_raising_is_refused_and_undone():
    def grows_then_raises(log, x):
        log[1].append("b")
        x[0] = 5.0
        raise ValueError("bad input")

    def fresh():
        return [np.ones(2), ["a"]], np.zeros(2)

    log, x = fresh()
    with pytest.raises(ValueError, match="bad input"):
        grows_then_raises(log, x)
    assert log[1] == ["a", "b"]  # without pb.jit the change stays: a replay could not make it
    log, x = fresh()
    with pytest.raises(pb.JitError, match=r"args\[0\]\[1\]\[1\] of its arguments before raising ValueError") as info:
        pb.jit(grows_then_raises)(log, x)
    assert isinstance(info.value.__cause__, ValueError)
    assert log[1] == ["a"] and x.tolist() == [0.0, 0.0]  # a refused call changes nothing


def test_reading_argument_objects_without_changing_them_still_replays():
    def scaled(o, x):
        return x * (2.0 if "double" in o.flags else 1.0) * len(o.names)

    o = _box(names=["a", "b"], flags={"double"}, queue=collections.deque([1]), log=[])
    jitted = pb.jit(scaled)
    for x in (np.ones(2), np.arange(2.0)):
        np.testing.assert_array_equal(jitted(o, x), scaled(o, x))
    assert jitted.cache_info().replays == 1
    assert o.names == ["a", "b"] and o.flags == {"double"} and o.log == []


# --- a module imported first inside the trace -------------------------------------------------------
def test_scipy_stats_imported_first_inside_the_trace_replays_as_eager():
    pytest.importorskip("scipy.stats")
    # in a fresh process, so that scipy.stats is first imported inside the trace
    code = ("import numpy as np, pullback as pb, pullback.scipy.stats as st\n"
            "f = pb.jit(lambda x: st.norm.logpdf(x))\n"
            "for x in (np.ones(3), np.arange(3.0), np.arange(3.0) + 0.5):\n"
            "    np.testing.assert_allclose(f(x), -0.5 * x ** 2 - 0.5 * np.log(2 * np.pi), rtol=1e-12)\n"
            "print(f.cache_info().replays)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    # scipy's import adds warnings filters, which the second call finds changed: it traces again, once
    assert int(done.stdout) >= 1


def _module(tmp_path, monkeypatch, source):
    name = f"module_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_a_generator_a_module_makes_and_draws_from_at_its_import_is_not_the_functions(tmp_path, monkeypatch):
    name = _module(tmp_path, monkeypatch, "import numpy as np\nNOISE = np.random.default_rng().normal()\n")

    def f(x):
        __import__(name)  # imported first here, inside the trace
        return x * 2.0

    jitted = pb.jit(f)
    for x in (np.ones(2), np.arange(2.0)):
        np.testing.assert_array_equal(jitted(x), x * 2.0)


def test_a_fresh_generator_the_function_draws_from_is_refused_when_traced_during_an_import(tmp_path, monkeypatch):
    # the trace itself runs while a module is being imported: the function's own generator is still its own
    name = _module(tmp_path, monkeypatch, (
        "import numpy as np, pullback as pb\n"
        "try:\n"
        "    pb.jit(lambda x: x + np.random.default_rng().normal())(np.ones(2))\n"
        "    REFUSED = None\n"
        "except pb.JitError as error:\n"
        "    REFUSED = str(error)\n"))
    module = __import__(name)
    assert module.REFUSED is not None and "fresh entropy" in module.REFUSED


# --- recorded calls whose result holds no array ---------------------------------------------------------
@pytest.mark.parametrize("fn", [np.array2string, np.array_repr, np.array_str], ids=lambda f: f.__name__)
def test_text_made_from_traced_values_follows_each_calls_values(fn):
    jitted = pb.jit(lambda x: fn(x * 2.0))
    for x in (np.array([1.0, 3.0]), np.array([4.0, 0.5]), np.array([4.0, 0.5])):
        assert jitted(x) == fn(x * 2.0)
    assert jitted.cache_info().replays == 1  # the same values replay


@pb.primitive
def _sum_and_first(x):
    return float(np.sum(x)), float(x[0])


def test_a_tuple_of_python_numbers_from_a_recorded_call_follows_each_calls_values():
    jitted = pb.jit(lambda x: _sum_and_first(x))
    for x in (np.array([0.0, 1.0]), np.array([-0.0, 2.0]), np.array([3.0, 2.0])):
        got, want = jitted(x), _sum_and_first(x)
        assert got == want and type(got) is tuple
        assert [np.copysign(1.0, v) for v in got] == [np.copysign(1.0, v) for v in want]  # -0.0 is not 0.0


@pb.primitive
def _as_namespace(x):
    return types.SimpleNamespace(total=np.sum(x))


def test_a_recorded_call_returning_another_object_is_refused_naming_it():
    with pytest.raises(pb.JitError, match="_as_namespace inside pb.jit returned an object of type SimpleNamespace"):
        pb.jit(lambda x: _as_namespace(x))(np.ones(2))


def test_a_result_mixing_arrays_and_lists_is_refused_naming_the_function():
    with pytest.raises(pb.JitError, match="histogramdd returned a mix of arrays and other values"):
        pb.jit(lambda x: np.histogramdd(x.reshape(4, 1), bins=2))(np.arange(4.0))


@pytest.mark.parametrize("fn", [
    lambda x: np.unravel_index(np.argmax(x), (2, 2)),
    lambda x: np.histogram(x, bins=3),
    lambda x: np.polyfit(np.arange(4.0), x, 1, full=True),
    lambda x: divmod(np.sum(x), 3.0),
    lambda x: np.einsum_path("i,i->", x, x, optimize="greedy")[0],
], ids=["unravel_index", "histogram", "polyfit full", "divmod", "einsum_path"])
def test_tuples_of_arrays_and_shape_results_replay_as_eager(fn):
    jitted = pb.jit(fn)
    for x in (np.array([1.0, 3.0, 2.0, 5.0]), np.array([4.0, 0.5, 2.5, 3.0])):
        got, want = jitted(x), fn(x)
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    assert jitted.cache_info().traces == 1


# --- read-only values pb.jvp and pb.vjp hand out as they are -------------------------------------------------
@pytest.mark.parametrize("inner", [
    lambda x: np.broadcast_to(x * 2.0, (2, 3)),
    lambda x: np.diagonal(np.outer(x, x)),
], ids=["broadcast_to", "diagonal"])
@pytest.mark.parametrize("outer", [
    lambda inner: lambda x: pb.jvp(inner, (x,), (np.ones(3),)),
    lambda inner: lambda x: (pb.vjp(inner, x)[0],),
    lambda inner: lambda x: pb.jvp(lambda y: pb.vjp(inner, y)[0], (x,), (np.ones(3),)),
], ids=["jvp", "vjp", "jvp of vjp"])
def test_read_only_values_of_jvp_and_vjp_are_handed_out_read_only_as_eager(inner, outer):
    f = outer(inner)
    jitted = pb.jit(f)
    for x in (np.arange(3.0), np.arange(3.0) + 1.0):
        want, got = f(x), jitted(x)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w)
            assert g.flags.writeable == w.flags.writeable


def test_gradients_and_tangents_of_read_only_views_stay_writable_as_eager():
    f = lambda x: (pb.gradient(lambda y: np.sum(np.broadcast_to(y, (2, 3)) ** 2), x)[0],  # noqa: E731
                   pb.jvp(lambda y: np.broadcast_to(y * 2.0, (2, 3)), (x,), (x,))[1])
    jitted = pb.jit(f)
    for x in (np.arange(3.0), np.arange(3.0) + 1.0):
        want, got = f(x), jitted(x)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w)
            assert w.flags.writeable and g.flags.writeable
    np.testing.assert_allclose(want[0], pb.testing.numerical_gradient(
        lambda y: np.sum(np.broadcast_to(y, (2, 3)) ** 2), x)[0], rtol=1e-6)


# --- the branch of a caught error is kept, not traced at every call that takes it ---------------------
def _inverse_or_zeros(x):
    try:
        with np.errstate(divide="raise"):
            y = 1.0 / x
    except FloatingPointError:
        y = np.zeros_like(x) + x
    return y * 2


def _solve_or_least_squares(a, b):
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        return np.linalg.lstsq(a, b, rcond=None)[0]


def test_a_caught_error_s_branch_is_traced_once_and_replayed_as_eagerly():
    rng = np.random.default_rng(5)
    inverse, solve = pb.jit(_inverse_or_zeros), pb.jit(_solve_or_least_squares)
    gradient = pb.jit(lambda x: pb.gradient(lambda x: np.sum(_inverse_or_zeros(x) ** 2), x))
    for k in range(12):  # the error on every other call
        x = rng.normal(size=3) + 2.0
        a, b = rng.normal(size=(3, 3)), rng.normal(size=3)
        if k % 2:
            x[1] = 0.0
            a[2] = a[0] + a[1]
        np.testing.assert_array_equal(inverse(x), _inverse_or_zeros(x))
        np.testing.assert_allclose(solve(a, b), _solve_or_least_squares(a, b), rtol=1e-12)
        np.testing.assert_array_equal(gradient(x)[0], pb.gradient(lambda x: np.sum(_inverse_or_zeros(x) ** 2), x)[0])
    for jitted in (inverse, solve, gradient):
        assert jitted.cache_info().traces == 2  # one per branch, each replayed after


def test_a_caught_error_s_message_read_by_the_function_is_each_call_s():
    def f(x, i):
        try:
            return x[i] * 2.0
        except IndexError as error:
            return float(len(str(error)))

    x, jitted = np.arange(5.0), pb.jit(f)
    for i in (1, 7, 12345, -100, 7):
        assert jitted(x, np.array(i)) == f(x, np.array(i))


@pytest.mark.parametrize("reorder", [
    lambda d: d.move_to_end("a"), lambda d: d.__setitem__("a", d.pop("a")),
], ids=["move_to_end", "pop and insert"])
def test_reordering_a_dict_argument_is_refused_and_undone(reorder):
    # without pb.jit the caller's dict changes order, which a replay could not do
    def f(x, d):
        reorder(d)
        return np.sum(x) * d["b"]

    d = collections.OrderedDict(a=1.0, b=2.0)
    with pytest.raises(pb.JitError, match=r"changed args\[1\]\['a'\].*moved"):
        pb.jit(f)(np.arange(3.0), d)
    assert list(d) == ["a", "b"]
