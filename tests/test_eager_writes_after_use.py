"""A plain NumPy array written after a recorded operation whose pullback keeps it: refused, never a silently
wrong gradient. While an eager gradient call runs, pullback makes each such array read-only (README, the
mutation caveat), and restores it when the call ends."""

import threading

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient


def write_after_use(x):
    m = np.ones(3)
    a = np.sum(x * m)  # the pullback of x * m keeps m
    m[0] = 0.0  # a plain write after the use
    return a + np.sum(x * m)


def test_a_write_after_use_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match="wrote into a NumPy array") as info:
        pb.gradient(write_after_use, np.ones(3))
    message = str(info.value)
    assert "read-only" in message and "copy()" in message
    assert isinstance(info.value.__cause__, ValueError)
    assert "read-only" in str(info.value.__cause__)


@pytest.mark.parametrize("call", [
    lambda f, x: pb.gradient(f, x),
    lambda f, x: pb.withgradient(f, x),
    lambda f, x: pb.value_and_grad(f)(x),
    lambda f, x: pb.grad(f)(x),
    lambda f, x: pb.pullback(f, x),
    lambda f, x: pb.jacobian(lambda v: np.stack([f(v), 2.0 * f(v)]), x),  # (reverse mode: 2 rows, 3 columns)
])
def test_every_eager_entry_point_refuses_it(call):
    with pytest.raises(ValueError, match="wrote into a NumPy array"):
        call(write_after_use, np.ones(3))


def test_the_callers_array_is_writable_again_afterwards():
    m = np.array([1.0, 2.0, 3.0])
    g = pb.gradient(lambda x: np.sum(x * m), np.ones(3))
    np.testing.assert_array_equal(g[0], m)
    assert m.flags.writeable
    m[0] = 5.0  # the caller's array is the caller's again

    def f(x):
        a = np.sum(x * m)
        m[1] = 0.0
        return a

    with pytest.raises(ValueError, match="wrote into a NumPy array"):
        pb.gradient(f, np.ones(3))
    assert m.flags.writeable
    m[1] = 7.0


def test_an_error_of_f_restores_the_flags():
    m = np.ones(3)

    def f(x):
        np.sum(x * m)
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        pb.gradient(f, np.ones(3))
    assert m.flags.writeable


def test_an_operand_whose_pullback_does_not_keep_it_stays_writable():
    def f(x):
        c = np.array([1.0, 2.0, 3.0])
        y = x + c  # the pullback of + keeps nothing of c
        c[1] = 100.0
        return np.sum(y * y) + np.sum(c * x)

    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(pb.gradient(f, x)[0], numerical_gradient(f, x)[0], rtol=1e-6, atol=1e-6)
    # by hand: 2 (x + c_before) + c_after
    np.testing.assert_allclose(pb.gradient(f, x)[0], 2 * (x + [1.0, 2.0, 3.0]) + [1.0, 100.0, 3.0])


def test_an_array_used_and_left_alone_is_unaffected():
    m = np.array([1.0, 2.0, 3.0])

    def f(x):
        assert m.flags.writeable  # not yet used
        y = np.sum(x * m)
        assert not m.flags.writeable  # read-only while f runs
        y = y + np.sum(np.sin(x) * m)  # used by two operations: flagged once
        return y

    x = np.array([0.1, 0.2, 0.3])
    assert m.flags.writeable
    g = pb.gradient(f, x)[0]
    np.testing.assert_allclose(g, m + np.cos(x) * m)
    assert m.flags.writeable


def test_a_write_by_out_into_a_used_array_is_refused():
    def f(x):
        m = np.ones(3)
        a = np.sum(x * m)
        np.multiply(m, 2.0, out=m)
        return a

    with pytest.raises(ValueError, match="wrote into a NumPy array"):
        pb.gradient(f, np.ones(3))

    def g(x):
        m = np.ones(3)
        a = np.sum(x * m)
        m += 1.0
        return a

    with pytest.raises(ValueError, match="wrote into a NumPy array"):
        pb.gradient(g, np.ones(3))


def test_a_matmul_data_matrix_is_guarded():
    data = np.arange(6.0).reshape(2, 3)

    def f(w):
        y = np.sum((data @ w) ** 2)
        data[0, 0] = 10.0
        return y

    with pytest.raises(ValueError, match="wrote into a NumPy array"):
        pb.gradient(f, np.ones(3))
    assert data.flags.writeable and data[0, 0] == 0.0


def test_nested_gradient_calls():
    m = np.array([1.0, 2.0, 3.0])

    def inner(x):
        return np.sum(x * x * m)

    def outer(x):
        (g,) = pb.gradient(inner, x)  # the inner call must not restore what the outer one set
        assert not m.flags.writeable
        return np.sum(g * m)

    x = np.array([0.5, 1.0, -2.0])
    np.testing.assert_allclose(pb.gradient(outer, x)[0], 2 * m * m)
    assert m.flags.writeable

    def outer_writes(x):
        (g,) = pb.gradient(inner, x)
        m[0] = 0.0  # the outer pullback still reads m
        return np.sum(g)

    with pytest.raises(ValueError, match="wrote into a NumPy array"):
        pb.gradient(outer_writes, x)
    assert m.flags.writeable

    def inner_writes(x):
        a = np.sum(x * m)
        m[0] = 0.0
        return a

    with pytest.raises(ValueError, match="wrote into a NumPy array"):
        pb.gradient(lambda x: pb.gradient(inner_writes, x)[0].sum(), x)
    assert m.flags.writeable


def test_hessian_and_higher_order():
    m = np.array([1.0, 2.0, 3.0])
    x = np.array([0.5, 1.0, -2.0])
    h = pb.hessian(lambda x: np.sum(x ** 3 * m), x)
    np.testing.assert_allclose(h, np.diag(6 * x * m))
    assert m.flags.writeable

    def f(x):
        a = np.sum(x ** 3 * m)
        m[2] = 1.0
        return a

    with pytest.raises(ValueError, match="wrote into a NumPy array"):
        pb.hessian(f, x)
    assert m.flags.writeable and m[2] == 3.0


def test_pullback_restores_when_the_forward_call_returns():
    m = np.array([1.0, 2.0, 3.0])
    y, back = pb.pullback(lambda x: x * m, np.ones(3))
    assert m.flags.writeable  # the caller's again once pb.pullback returns
    np.testing.assert_array_equal(back(np.ones(3))[0], m)
    # documented: `back` reads m as it is when it runs, so change it only after the last back call
    m[0] = 10.0
    np.testing.assert_array_equal(back(np.ones(3))[0], m)


def test_an_operand_already_read_only_stays_read_only():
    m = np.array([1.0, 2.0, 3.0])
    m.flags.writeable = False
    g = pb.gradient(lambda x: np.sum(x * m), np.ones(3))
    np.testing.assert_array_equal(g[0], m)
    assert not m.flags.writeable
    b = np.broadcast_to(np.arange(3.0), (2, 3))  # NumPy's own read-only array
    pb.gradient(lambda x: np.sum(x * b), np.ones(3))
    assert not b.flags.writeable


def test_a_view_operand_is_flagged_itself_not_its_base():
    base = np.arange(6.0)
    view = base[:3]

    def f(x):
        a = np.sum(x * view)
        assert not view.flags.writeable and base.flags.writeable
        return a

    pb.gradient(f, np.ones(3))
    assert view.flags.writeable and base.flags.writeable


def test_under_jit_a_write_after_use_is_refused_as_in_eager_mode():
    # the trace runs the gradient call as eager mode does: the backward pass reads m after the write, and the
    # trace would replay that (before this guard, pb.jit gave [0, 2, 2] here, as eager mode did)
    def f2(x):
        m = np.ones(3)
        a = np.sum(x * m)
        m[0] = 0.0
        return a + np.sum(x * m)

    with pytest.raises(ValueError, match="wrote into a NumPy array"):
        pb.jit(lambda x: pb.gradient(f2, x))(np.array([1.0, 2.0, 3.0]))

    def f3(x):
        m = np.ones(3)
        a = np.sum(x * m)
        m = m.copy()  # the fix the message names
        m[0] = 0.0
        return a + np.sum(x * m)

    jitted = pb.jit(lambda x: pb.gradient(f3, x))
    for x in (np.array([1.0, 2.0, 3.0]), np.array([-1.0, 0.5, 4.0])):  # the trace, then a replay
        np.testing.assert_allclose(jitted(x)[0], [1.0, 2.0, 2.0])


def test_under_jit_a_constant_is_writable_again_and_replays_see_its_writes():
    m = np.array([1.0, 2.0, 3.0])
    jitted = pb.jit(lambda x: pb.gradient(lambda v: np.sum(np.sin(v) * m), x))
    x = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(jitted(x)[0], np.cos(x) * m)
    assert m.flags.writeable
    m[0] = 5.0  # between calls, as without pb.jit
    np.testing.assert_allclose(jitted(x)[0], np.cos(x) * m)


def test_stop_gradient_value_written_names_the_fix():
    def f(x):
        s = pb.stop_gradient(x * 1.0)
        s[0] = 7.0
        return np.sum(x * s)

    def plain(x):  # what f computes without pullback, where stop_gradient is the identity
        s = x * 1.0
        s[0] = 7.0
        return np.sum(x * s)

    x = np.array([1.0, 2.0, 3.0])
    assert plain(x) == 7.0 + 4.0 + 9.0
    with pytest.raises(ValueError, match="stop_gradient") as info:
        pb.gradient(f, x)
    assert "copy()" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)


def test_a_python_number_constant_and_traced_operands_are_not_flagged():
    x = np.ones(3)
    g = pb.gradient(lambda x: np.sum(x * 2.0 + x * x), x)
    np.testing.assert_allclose(g[0], 2.0 + 2 * x)
    assert x.flags.writeable


def test_a_guarded_array_in_another_thread_is_refused_too():
    # flags are process-wide: another thread writing the array while the call runs is refused by NumPy
    m = np.ones(3)
    started, done, seen = threading.Event(), threading.Event(), []

    def writer():
        started.wait()
        try:
            m[0] = 2.0
        except ValueError as error:
            seen.append(str(error))
        done.set()

    def f(x):
        a = np.sum(x * m)
        started.set()
        done.wait(5)
        return a

    t = threading.Thread(target=writer)
    t.start()
    pb.gradient(f, np.ones(3))
    t.join()
    assert seen and "read-only" in seen[0]
    assert m.flags.writeable


def test_an_inner_level_value_given_to_an_outer_level_is_left_writable():
    # x * w inside the inner call: the outer level records x's plain value (the engine's own) as a constant
    # operand; made read-only, the recorded write through a view of x would be refused
    x0 = np.array([1.0, 2.0, 3.0, 4.0])

    def inner_f(x, w):
        y = x * w
        v = x.reshape(2, 2)
        v[0] += 1.0
        return np.sum(y * x)

    def outer(w):
        (g,) = pb.gradient(lambda x: inner_f(x, w), x0)
        return np.sum(g * g)

    w = np.array([0.5, -1.0, 2.0, 1.5])
    np.testing.assert_allclose(pb.gradient(outer, w)[0], numerical_gradient(outer, w)[0], rtol=1e-6)
    assert x0.flags.writeable


def test_a_kept_keyword_operand_and_a_list_operand_are_guarded():
    weights = np.array([1.0, 2.0, 3.0])

    def f(x):
        a = np.average(x, weights=weights)
        weights[0] = 0.0
        return a

    with pytest.raises(ValueError, match="wrote into a NumPy array"):
        pb.gradient(f, np.ones(3))
    assert weights.flags.writeable

    m = np.arange(6.0).reshape(2, 3)

    def g(x):
        a = np.sum(np.linalg.multi_dot([m, np.diag(x), m.T]))
        m[0, 0] = 9.0
        return a

    with pytest.raises(ValueError, match="wrote into a NumPy array"):
        pb.gradient(g, np.ones(3))
    assert m.flags.writeable


def test_a_write_into_numpys_own_read_only_array_keeps_numpys_error():
    m = np.ones(3)

    def f(x):
        a = np.sum(x * m)  # m is held read-only
        b = np.broadcast_to(np.arange(3.0), (2, 3))
        b[0, 0] = 1.0  # NumPy's own read-only view: NumPy's error, as without pullback
        return a

    with pytest.raises(ValueError, match="^assignment destination is read-only$"):
        pb.gradient(f, np.ones(3))
    assert m.flags.writeable
