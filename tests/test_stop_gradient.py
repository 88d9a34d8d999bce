"""`pb.stop_gradient` of an array being differentiated: its value is read-only while a recording may
read its memory, a write into the array while that value is in use is refused (without pullback
they are one array), and what reaches the caller is writable, as without pullback."""

import numpy as np
import pytest

import pullback as pb


def _central_difference(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = h
        g[i] = (f(x + step) - f(x - step)) / (2 * h)
    return g


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


# --- a write into the array while its stop_gradient value is in use ----------------------------------

def _detached_then_written(x):
    y = x * 1.0
    s = pb.stop_gradient(y)  # without pullback, s is y
    y += 1.0
    return np.sum(y * s)


def _detached_then_item_written(x):
    y = x * 1.0
    s = pb.stop_gradient(y[:2])  # a view of y: without pullback a view of the same memory
    y[0] = 5.0
    return np.sum(y) + s[0]


def _detached_then_written_by_out(x):
    y = x * 1.0
    s = pb.stop_gradient(y)
    np.add(y, 1.0, out=y)
    return np.sum(y * s)


@pytest.mark.parametrize("f", [_detached_then_written, _detached_then_item_written, _detached_then_written_by_out])
def test_a_write_while_the_stop_gradient_value_is_in_use_is_refused(f):
    with pytest.raises(ValueError, match=r"after pb.stop_gradient\(y\) handed out its value"):
        pb.value_and_grad(f)(X)
    with pytest.raises(ValueError, match="stop_gradient"):
        pb.jvp(f, (X,), (np.ones(3),))


def _detached_released_then_written(x):
    y = x * 1.0
    s = pb.stop_gradient(y)
    scale = float(np.sum(s))  # read before the write, then no longer used
    del s
    y += 1.0
    return np.sum(y * y) * scale


def test_a_write_is_refused_only_while_the_stop_gradient_value_is_in_use():
    with pytest.raises(ValueError, match="still in use"):
        pb.value_and_grad(_detached_then_written)(X)
    value, grad = pb.value_and_grad(_detached_released_then_written)(X)  # s deleted before the write
    assert value == _detached_released_then_written(X)
    np.testing.assert_allclose(grad, _central_difference(
        lambda x: np.sum((x + 1.0) ** 2) * np.sum(X), X), rtol=1e-6)  # the scale is a constant

    def copied_then_written(x):
        y = x * 1.0
        s = pb.stop_gradient(y).copy()  # a copy is the caller's, apart from y
        y += 1.0
        return np.sum(y * s)

    value, grad = pb.value_and_grad(copied_then_written)(X)
    assert value == copied_then_written(X)
    np.testing.assert_allclose(grad, X)  # d/dx sum((x + 1) * const)


# --- the same under pb.jit: refused at the trace, as without it -------------------------------------------

def _written_through_detached(x):
    y = np.exp(x)
    s = pb.stop_gradient(y)  # without pullback, s is y: the write would set y[0]
    s[0] = 100.0
    return np.sum(y * 2.0)


@pytest.mark.parametrize("f", [_written_through_detached, _detached_then_written])
def test_writes_through_or_beside_a_stop_gradient_value_are_refused_under_jit_as_without_it(f):
    with pytest.raises(ValueError) as eager:
        pb.grad(f)(X)
    with pytest.raises(ValueError) as jitted:
        pb.jit(pb.grad(f))(X)
    assert str(jitted.value).split(":")[0] == str(eager.value).split(":")[0]
