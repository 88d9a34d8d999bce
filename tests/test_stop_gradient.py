"""`pb.stop_gradient` of an array being differentiated: its value is a read-only copy that every later
write into the array updates (without pullback they are one array, so the value and its views show the
write), a write into the value raises NumPy's read-only error, and what reaches the caller is writable,
as without pullback. The gradient takes the value as a constant, holding what NumPy shows in it."""

import weakref

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient

X = np.array([1.0, 2.0, 3.0])


# --- what reaches the caller is writable ----------------------------------------------------------------

def _loss_and_detached(x):
    y = x * 2.0
    return np.sum(y), pb.stop_gradient(y)


def test_aux_returned_through_stop_gradient_is_writable_as_without_pullback():
    assert _loss_and_detached(X)[1].flags.writeable
    (_, aux), _ = pb.value_and_grad(_loss_and_detached, has_aux=True)(X)
    aux /= 2.0
    np.testing.assert_array_equal(aux, X)
    (_, aux), _ = pb.withgradient(_loss_and_detached, X)
    aux -= 1.0
    np.testing.assert_array_equal(aux, 2.0 * X - 1.0)
    # NumPy's own read-only arrays stay read-only, as in NumPy
    (_, b), _ = pb.value_and_grad(lambda x: (np.sum(x), np.broadcast_to(pb.stop_gradient(x), (2, 3))), has_aux=True)(X)
    assert not b.flags.writeable
    y, _ = pb.vjp(lambda x: (x * 2.0, np.broadcast_to(np.arange(3.0), (2, 3))), X)
    assert not y[1].flags.writeable


def test_vjp_output_returned_through_stop_gradient_is_writable():
    y, back = pb.vjp(lambda x: pb.stop_gradient(x * 2.0), X)
    y -= 1.0  # pb.pullback: "y is the caller's to change (y -= target; back(y))"
    np.testing.assert_array_equal(y, 2.0 * X - 1.0)
    assert back(y) == (None,)


def test_pullback_of_stop_gradient_of_an_argument_is_the_callers_to_change():
    x = np.array([1.0, 2.0])
    y, _ = pb.pullback(lambda x: pb.stop_gradient(x), x)
    y -= 1.0
    np.testing.assert_array_equal(y, [0.0, 1.0])


def test_jvp_output_returned_through_stop_gradient_is_writable():
    (_, detached), (_, t) = pb.jvp(lambda x: (x * 2.0, pb.stop_gradient(x * 3.0)), (X,), (np.ones(3),))
    detached += 1.0
    np.testing.assert_array_equal(detached, 3.0 * X + 1.0)
    assert t is None


def test_a_value_handed_back_after_a_write_shows_it_and_is_writable():
    def f(x):
        y = x * 2.0
        s = pb.stop_gradient(y)
        y[0] = 7.0
        return np.sum(y * s), s

    held = np.array([7.0, 4.0, 6.0])  # s, as NumPy shows it
    (value, aux), g = pb.value_and_grad(f, has_aux=True)(X)
    assert value == np.sum(held * held)
    np.testing.assert_array_equal(aux, held)
    aux += 1.0  # the caller's
    np.testing.assert_allclose(g, numerical_gradient(lambda x: np.sum(np.r_[7.0, 2.0 * x[1:]] * held), X)[0], rtol=1e-7)
    (value, s), back = pb.vjp(f, X)
    np.testing.assert_array_equal(s, held)
    s[1] = -1.0  # the caller's to change: back reads its own
    np.testing.assert_allclose(back((1.0, None))[0], g)
    (value, s), (tangent, _) = pb.jvp(f, (X,), (np.ones(3),))
    np.testing.assert_array_equal(s, held)
    s -= 1.0
    assert tangent == pytest.approx(np.sum(g))


# --- a write into the array after its stop_gradient value was taken: the value shows it, as in NumPy -----
# Without pullback `s = pb.stop_gradient(y)` is `y` itself, so a later write into y (by any path, also through
# a view of y's memory) shows in s and in every view of s. The gradient takes s as a constant: its value
# wherever it is read, that is, what NumPy shows there.

Y = np.array([3.0, 0.5, 2.0])  # y = Y * [1, 2, 1]: no two elements equal (y.sort() has a derivative)

TAKES = {"itself": lambda s: s, "slice": lambda s: s[:], "T": lambda s: s.T, "reshape": lambda s: s.reshape(3),
         "ellipsis": lambda s: s[...], "view": lambda s: s.view(), "ravel": lambda s: s.ravel(),
         "reversed": lambda s: s[::-1]}


def _setitem(y):
    y[0] = 10.0


def _iadd(y):
    y += 1.5


def _out(y):
    np.multiply(y, 2.0, out=y)


def _copyto(y):
    np.copyto(y, y * y)


def _put(y):
    np.put(y, [0, 2], [5.0, 6.0])


def _place(y):
    np.place(y, y > 1.5, [7.0])


def _putmask(y):
    np.putmask(y, y > 1.5, y * 3.0)


def _fill(y):
    y.fill(4.0)


def _sort(y):
    y.sort()


def _flat(y):
    y.flat[1] = 9.0


def _through_a_view(y):
    v = y[1:]
    v *= 2.0  # writes into y's memory


WRITES = {f.__name__[1:]: f for f in [_setitem, _iadd, _out, _copyto, _put, _place, _putmask, _fill, _sort, _flat,
                                      _through_a_view]}


def _taken_then_written(x, detach, take, write):
    y = x * np.array([1.0, 2.0, 1.0])
    s = take(detach(y))
    write(y)
    return y, s


def _loss(y, s):
    return np.sum(y * s) + np.sum(s ** 2) + np.sum(y ** 2)


def _numpy_value_and_gradient(take, write):
    """What NumPy computes (`stop_gradient` is the identity), and the central differences of the loss with
    `s` held at the values NumPy shows in it."""
    itself = lambda v: v  # noqa: E731
    y, s = _taken_then_written(Y.copy(), itself, take, write)
    held = s.copy()
    return _loss(y, s), numerical_gradient(lambda x: _loss(_taken_then_written(x, itself, take, write)[0], held), Y)[0]


def _with_pullback(take, write):
    return lambda x: _loss(*_taken_then_written(x, pb.stop_gradient, take, write))


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
@pytest.mark.parametrize("take", TAKES.values(), ids=TAKES.keys())
def test_the_value_and_its_views_show_a_later_write_into_the_array(take, write):
    value, grad = _numpy_value_and_gradient(take, write)
    f = _with_pullback(take, write)
    got, g = pb.value_and_grad(f)(Y)
    assert got == pytest.approx(value, rel=1e-12)
    np.testing.assert_allclose(g, grad, rtol=1e-6, atol=1e-6)
    direction = np.array([1.0, -2.0, 0.5])
    got, tangent = pb.jvp(f, (Y,), (direction,))
    assert got == pytest.approx(value, rel=1e-12)
    assert tangent == pytest.approx(grad @ direction, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("take", [lambda v: v[:], lambda v: v.T, lambda v: v.reshape(3), lambda v: v[...],
                                  lambda v: v.view(), lambda v: v.ravel()],
                         ids=["slice", "T", "reshape", "ellipsis", "view", "ravel"])
def test_stop_gradient_view_of_value_sees_later_write(take):
    # s is a view of y without pullback: y[0] = 10 shows in it, sum(y * s) = 100 + 4 + 9
    def f(x):
        y = x * 1.0
        s = take(pb.stop_gradient(y))
        y[0] = 10.0
        return np.sum(y * s)

    x = np.array([1.0, 2.0, 3.0])
    assert f(x.copy()) == 113.0
    value, (g,) = pb.withgradient(f, x)
    assert value == 113.0
    held = np.array([10.0, 2.0, 3.0])  # s, as NumPy shows it when it is read
    np.testing.assert_allclose(g, numerical_gradient(lambda x: np.sum(np.r_[10.0, x[1:]] * held), x)[0], atol=1e-8)
    assert pb.jvp(f, (x,), (np.ones(3),)) == pytest.approx((113.0, 5.0))


def test_stop_gradient_taken_each_step_of_a_loop_that_writes():
    # s is y (without pullback); s[i] is read before y[i] is written, so it holds x[i] there
    def f(x):
        y = x * 1.0
        for i in range(3):
            s = pb.stop_gradient(y)
            y[i] = y[i] * s[i]
        return np.sum(y)

    x = np.array([1.0, 2.0, 3.0])
    assert f(x.copy()) == 14.0
    value, (g,) = pb.withgradient(f, x)
    assert value == 14.0
    np.testing.assert_allclose(g, numerical_gradient(lambda z: np.sum(z * x), x)[0], atol=1e-8)  # s constant
    assert pb.jvp(f, (x,), (np.ones(3),)) == pytest.approx((14.0, 6.0))
    jitted = pb.jit(pb.value_and_grad(f))
    for at in (x, x + 0.5):
        value, g = jitted(at)
        assert value == pytest.approx(f(at.copy()))
        np.testing.assert_allclose(g, at)


def test_a_value_taken_of_a_view_shows_a_write_into_its_root_and_is_the_same_array_again():
    def f(x):
        y = x * 1.0
        s = pb.stop_gradient(y)
        t = pb.stop_gradient(y[1:])  # of a view of y
        assert pb.stop_gradient(y) is s
        y[1] = 5.0
        assert pb.stop_gradient(y) is s  # y's value is s, written into
        np.testing.assert_array_equal(s, [1.0, 5.0, 3.0])
        np.testing.assert_array_equal(t, [5.0, 3.0])
        y *= 2.0
        np.testing.assert_array_equal(t, [10.0, 6.0])
        return np.sum(y * (s + t[1]))

    x = np.array([1.0, 2.0, 3.0])
    value, (g,) = pb.withgradient(f, x)
    assert value == f(x.copy())  # (2, 10, 6) . (2 + 6, 10 + 6, 6 + 6)
    np.testing.assert_allclose(g, [2.0 * 8.0, 0.0, 2.0 * 12.0])  # s and t constant; y[1] written with a constant


def test_a_zero_dimensional_value_shows_a_later_write():
    def f(x):
        y = np.sum(x, keepdims=True).reshape(())  # a 0-d array
        s = pb.stop_gradient(y)
        y += 1.0
        return y * s

    x = np.array([1.0, 2.0])
    assert f(x.copy()) == 16.0
    value, (g,) = pb.withgradient(f, x)
    assert value == 16.0
    np.testing.assert_allclose(g, [4.0, 4.0])  # s holds 4 when read


def _written_then_detached_value_written(x):
    y = x * 1.0
    s = pb.stop_gradient(y)
    v = s[1:]
    y[1] = 5.0
    assert v[0] == 5.0 and s[1] == 5.0  # as in NumPy
    return s, v


@pytest.mark.parametrize("write", [lambda s: s.__setitem__(0, 1.0), lambda s: np.add(s, 1.0, out=s),
                                   lambda s: s.__iadd__(1.0), lambda s: s[1:].__setitem__(0, 1.0),
                                   lambda s: s.T.fill(1.0)], ids=["setitem", "out", "iadd", "view", "fill"])
def test_a_write_into_the_value_after_a_write_into_the_array_raises_numpys_read_only_error(write):
    def f(x):
        s, v = _written_then_detached_value_written(x)
        write(s)
        return np.sum(x)

    def through_a_view(x):
        s, v = _written_then_detached_value_written(x)
        write(v)
        return np.sum(x)

    for g in (f, through_a_view):
        with pytest.raises(ValueError, match="read-only"):
            pb.gradient(g, X)
        with pytest.raises(ValueError, match="read-only"):
            pb.jvp(g, (X,), (np.ones(3),))


# --- nested levels ------------------------------------------------------------------------------------------

def test_a_value_shows_writes_made_at_an_inner_level_and_is_constant_at_both():
    def inner(z, x):
        y = x * z  # traced by both levels
        s = pb.stop_gradient(y)[::-1]
        y[0] = z * 3.0
        return np.sum(y * s)  # s = (x2 z, x1 z, 3 z) at the read

    def outer(x):
        return pb.gradient(inner, 2.0, x)[0]

    x = np.array([1.0, 2.0, 3.0])
    held = np.array([3.0 * 2.0, x[1] * 2.0, x[2] * 2.0])[::-1]  # s at z = 2, as NumPy shows it
    # d/dz of sum(y * s) with s constant: y = (3z, x1 z, x2 z)
    dz = lambda x: np.sum(np.r_[3.0, x[1:]] * held)  # noqa: E731
    assert outer(x) == pytest.approx(dz(x))
    np.testing.assert_allclose(pb.gradient(outer, x)[0], numerical_gradient(dz, x)[0], atol=1e-8)
    value, tangent = pb.jvp(outer, (x,), (np.ones(3),))
    assert (value, tangent) == pytest.approx((dz(x), np.sum(numerical_gradient(dz, x)[0])))


def test_a_value_of_an_outer_array_shows_a_write_made_inside_an_inner_call():
    def outer(x):
        y = x * 2.0
        s = pb.stop_gradient(y)

        def inner(z):
            y[1:] = y[1:] * 3.0  # a write into the outer array while the inner level runs
            return np.sum(y) * z

        pb.gradient(inner, 3.0)
        np.testing.assert_array_equal(s, pb.stop_gradient(y))  # s is y, also after the inner call ended
        assert not s.flags.writeable  # while the outer level may write into y
        return np.sum(y * s)

    x = np.array([1.0, 2.0, 3.0])
    held = np.array([2.0, 12.0, 18.0])
    (g,) = pb.gradient(outer, x)
    np.testing.assert_allclose(g, numerical_gradient(lambda x: np.sum(x * np.array([2.0, 6.0, 6.0]) * held), x)[0],
                               rtol=1e-7)


# --- under pb.jit: the same values, or a JitError naming stop_gradient ----------------------------------------

_FOLLOWED = ["itself", "slice", "ellipsis", "view", "reversed"]  # s[index]: kept in step by the trace


@pytest.mark.parametrize("write", [w for n, w in WRITES.items() if n != "place"],
                         ids=[n for n in WRITES if n != "place"])
@pytest.mark.parametrize("take", [TAKES[n] for n in _FOLLOWED], ids=_FOLLOWED)
def test_under_jit_the_value_and_its_index_views_show_a_later_write(take, write):
    f = _with_pullback(take, write)
    jitted = pb.jit(pb.value_and_grad(f))
    for x in (Y, Y + 0.25):
        value, g = jitted(x)
        eager_value, eager_g = pb.value_and_grad(f)(x)
        assert value == pytest.approx(eager_value, rel=1e-12)
        np.testing.assert_allclose(g, eager_g, rtol=1e-12)
    value, grad = _numpy_value_and_gradient(take, write)
    assert jitted(Y)[0] == pytest.approx(value, rel=1e-12)
    np.testing.assert_allclose(jitted(Y)[1], grad, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("take", [TAKES[n] for n in ("T", "reshape", "ravel")], ids=["T", "reshape", "ravel"])
def test_under_jit_a_write_while_another_view_of_the_value_is_alive_is_refused(take):
    f = _with_pullback(take, _setitem)
    with pytest.raises(pb.JitError, match=r"pb.stop_gradient\(y\)"):
        pb.jit(pb.value_and_grad(f))(Y)


def _written_through_detached(x):
    y = np.exp(x)
    s = pb.stop_gradient(y)  # without pullback, s is y: the write would set y[0]
    s[0] = 100.0
    return np.sum(y * 2.0)


def _written_through_detached_after_a_write(x):
    y = np.exp(x)
    s = pb.stop_gradient(y)
    y[1] = 5.0
    s[1:][0] = 100.0
    return np.sum(y * 2.0)


@pytest.mark.parametrize("f", [_written_through_detached, _written_through_detached_after_a_write])
def test_writes_into_a_stop_gradient_value_are_refused_under_jit_as_without_it(f):
    with pytest.raises(ValueError) as eager:
        pb.grad(f)(X)
    with pytest.raises(ValueError) as jitted:
        pb.jit(pb.grad(f))(X)
    assert "read-only" in str(eager.value)
    assert str(jitted.value).split(":")[0] == str(eager.value).split(":")[0]


def test_under_jit_a_value_taken_before_a_write_shows_it_in_forward_mode():
    def f(x):
        y = x * 1.0
        s = pb.stop_gradient(y)
        y += 1.0
        return np.sum(y * s)

    jitted = pb.jit(lambda x: pb.jvp(f, (x,), (np.ones(3),)))
    for x in (X, X * 2.0):
        assert jitted(x) == pytest.approx((np.sum((x + 1.0) ** 2), np.sum(x + 1.0)))


# --- read-only views, layouts under pb.jit, and one copy for repeated calls ---------------------------

READ_ONLY_VIEWS = {
    "broadcast_to": lambda y: np.broadcast_to(y[0], (2, 3)),
    "diagonal": lambda y: np.diagonal(y),
    "sliding_window": lambda y: np.lib.stride_tricks.sliding_window_view(y[0], 2),
}


@pytest.mark.parametrize("view", list(READ_ONLY_VIEWS.values()), ids=list(READ_ONLY_VIEWS))
def test_the_value_of_a_read_only_view_shows_a_later_write_into_its_base(view):
    def f(x):
        y = x * 1.0
        d = pb.stop_gradient(view(y))
        y[0, 0] = 100.0  # NumPy: d is a view of y, and shows the write
        return np.sum(d) * np.sum(x)

    x = np.arange(1.0, 7.0).reshape(2, 3)
    assert pb.withgradient(f, x).val == f(x)
    assert pb.jvp(f, (x,), (np.ones_like(x),))[0] == f(x)
    assert pb.jit(lambda z: pb.withgradient(f, z).val)(x) == f(x)
    expected = np.full_like(x, np.sum(np.asarray(view(np.where(np.arange(6).reshape(2, 3) == 0, 100.0, x)))))
    np.testing.assert_allclose(pb.gradient(f, x)[0], expected)  # d is a constant


def test_a_transposed_view_keeps_numpy_s_layout_after_a_write_under_jit_of_a_gradient():
    def f(x):
        y = x * 1.0
        v = y.T[:, 1:]
        w = v.view().T
        w[...] = w * 2.0  # a write through a view of v
        flat = np.ravel(v, order="K")  # v's memory order, as NumPy keeps it
        return np.sum(flat * np.arange(flat.size)) + v.flags.f_contiguous

    x = np.arange(12.0).reshape(3, 4)
    for call in range(2):
        assert pb.jit(lambda z: pb.withgradient(f, z).val)(x + call) == f(x + call)
        assert pb.jit(lambda z: pb.jvp(f, (z,), (np.ones_like(z),))[0])(x + call) == f(x + call)


def test_repeated_calls_on_an_unwritten_array_share_one_copy():
    # pb.stop_gradient(x)[i] in a loop copies x once, not once per call
    def f(x):
        dropped = weakref.ref(pb.stop_gradient(x))
        assert dropped() is not None and pb.stop_gradient(x) is dropped()
        total = pb.stop_gradient(x)[0] * np.sum(x)
        x[1] = 5.0  # a write lets the kept copy go, and the next value shows the write
        assert dropped() is None
        return total * pb.stop_gradient(x)[1]

    def plain(x):
        return x[0] * np.sum(x) * 5.0

    value, (g,) = pb.withgradient(f, X)
    assert value == plain(X.copy())
    np.testing.assert_allclose(g, np.full(3, X[0] * 5.0))
