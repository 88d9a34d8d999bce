"""Writes through views, as NumPy does them: a write through a view reaches its base, and every live
view of that base sees a write into it. Each pattern is checked against NumPy's own values (run on
copies of the arguments), and its derivatives in reverse and forward mode against central
differences; the arguments themselves are never modified."""

import numpy as np
import pytest

import pullback as pb
from pullback.testing import assert_gradient
from rule_checks import gradcheck, second_order

X = np.array([[0.7, -1.3, 2.1], [0.4, 1.6, -0.5], [1.2, -0.8, 0.9]])
V = np.array([0.3, -1.1, 0.6])


def same_as_numpy(f, *args, order=1):
    """f under pullback gives NumPy's value, leaves its arguments alone, and its derivatives agree with
    central differences (every element, reverse and forward mode; with `order=2` also second order)."""
    before = [np.copy(a) for a in args]
    expected = f(*[np.copy(a) for a in args])
    got = pb.pullback(f, *args)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert np.shape(got) == np.shape(expected)
    gradcheck(f, *args)
    if order == 2:  # all arguments packed in one vector, so that each is tracked
        bounds = np.cumsum([0] + [np.size(a) for a in args])

        def of_packed(packed):
            return f(*[packed[i:j].reshape(np.shape(a)).copy() for i, j, a in zip(bounds, bounds[1:], args)])

        second_order(of_packed, np.concatenate([np.ravel(a) for a in args]))
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)


def hessian_by_differences(f, x, eps=1e-5):
    """The Hessian of scalar f: central differences of pullback's gradient."""
    columns = []
    for j in range(x.size):
        e = np.zeros_like(x)
        e.flat[j] = eps
        columns.append(((pb.gradient(f, x + e)[0] - pb.gradient(f, x - e)[0]) / (2 * eps)).ravel())
    return np.stack(columns, axis=-1).reshape(x.shape + x.shape)


# --- writes through a view reach the base -----------------------------------------------------
def test_reshape_view_write_changes_the_base():
    def f(x):
        y = x.reshape(3, 3)
        y -= 1.0
        y *= y[::-1]
        return np.concatenate([np.sin(x), y.ravel() * 2.0])

    same_as_numpy(f, X.ravel(), order=2)


def test_reshape_of_a_temporary_is_written_in_place():
    def f(x):
        y = np.reshape(x * 2.0, (3, 3))
        y -= 1.0
        y[0] *= y[2]
        return y * x.reshape(3, 3)

    same_as_numpy(f, X.ravel())


def test_column_add_through_a_view():
    def f(x, v):
        x[:, 0] += v * x[:, 1]
        return x * x

    same_as_numpy(f, X, V, order=2)


def test_transpose_view_row_write():
    def f(x, v):
        x.T[0] = v ** 2
        return np.tanh(x) * x[0]

    same_as_numpy(f, X, V, order=2)


def test_view_of_a_view():
    def f(x, v):
        x[1:][0] = v * x[2]
        x[:, 1:][1:, ::-1] *= 3.0
        return x ** 2

    same_as_numpy(f, X, V)


def test_a_live_view_sees_a_write_into_its_base():
    def f(x):
        v = x[::2]
        x[0] = 5.0 * x[1]
        x[2, 1] = x[1, 2] ** 2
        return np.concatenate([(v * x[1]).ravel(), x.ravel()])

    same_as_numpy(f, X)


def test_every_live_view_is_re_derived_and_a_later_view_of_it_too():
    def f(x):
        a, b, c = x[1:], x.T, x.reshape(-1)
        x[0, 0] = np.sum(x[2] ** 2)
        d = a[1:]  # a view of a re-derived view
        d[0, ::2] = b[0, :2] * 4.0
        c[4] = 7.0
        return np.concatenate([a.ravel(), b.ravel(), c, d.ravel(), x.ravel() ** 2])

    same_as_numpy(f, X)


def test_writes_through_every_kind_of_view():
    def f(x):
        np.swapaxes(x, 0, 1)[0] += 1.0
        np.moveaxis(x, 1, 0)[1, 2] *= x[0, 0]
        np.expand_dims(x, 0)[0, 2] -= x[1]
        np.squeeze(x[None])[1, 1] = x[0, 1] ** 2
        np.flip(x)[0] *= 2.0
        np.split(x, 3)[1][0, 0] = 9.0 * x[2, 2]
        x.view()[2, 0] += 1.0
        x.real[0, 0] += 3.0
        np.real(x)[0, 1] *= 2.0
        x.conj()[0, 2] -= x[1, 0]  # a real array's conjugate is the array itself
        return x * x

    same_as_numpy(f, X)


def test_zero_dimensional_view():
    def f(x):
        y = x[1, ...]
        y[...] = x[0] * 3.0
        z = x.reshape(1, 3)[0, 2, ...]
        z += x[0]
        return x ** 2

    same_as_numpy(f, V)


def test_rows_met_by_iteration_are_views():
    def f(x):
        for row in x:
            row *= row[0]
        return x

    same_as_numpy(f, X)


def test_sort_and_out_and_fill_through_views():
    def f(x):
        x[1].sort()
        np.multiply(x[0], x[2], out=x[0])
        x[2, :2].fill(1.5)
        return x * x

    same_as_numpy(f, X)


def test_ellipsis_write_replaces_every_element_and_views_see_it():
    def f(x, v):
        t = x.T
        x[...] = v
        return t * x[0]

    same_as_numpy(f, X, V)


def test_float32_writes_through_views_stay_float32():
    def f(x):
        y = x.reshape(3, 3)
        y[1] += 0.5 * y[0]
        return x * 2.0

    x = X.ravel().astype(np.float32)
    y = pb.pullback(f, x)[0]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, f(x.copy()), rtol=1e-6)
    (g,) = pb.gradient(lambda x: np.sum(f(x)), x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, [3.0, 3.0, 3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0])


def test_a_tied_array_sees_a_write_through_a_view_of_its_other_place():
    w = np.array([1.0, 2.0, 3.0])

    def f(m):
        m["a"][1:] *= 2.0
        return np.sum(m["b"] ** 2)

    (g,) = pb.gradient(f, {"a": w, "b": w})
    np.testing.assert_allclose(g["a"], [2.0, 16.0, 24.0])  # sum(w0^2 + 4 w1^2 + 4 w2^2)
    assert g["b"] is None
    np.testing.assert_array_equal(w, [1.0, 2.0, 3.0])


# --- NumPy's choice of view or copy is followed exactly ------------------------------------------
def test_ravel_gives_a_view_or_a_copy_as_numpy_does():
    def f(x):
        r = x.ravel()  # contiguous: a view
        r[0] = 10.0 * x[1, 1]
        c = x.T.ravel()  # not contiguous: a copy
        c[1] = -7.0
        return np.concatenate([x.ravel(), c, r])

    same_as_numpy(f, X)


def test_layout_is_kept_after_a_write_so_later_views_and_copies_match_numpy():
    def f(x):
        t = x.T
        x[0, 0] = x[1, 1] * 3.0  # t is re-derived, still laid out as NumPy's transpose
        r = t.ravel()  # a copy in NumPy
        r[0] = 100.0
        q = t.T.ravel()  # a view in NumPy
        q[1] = q[1] ** 2
        s = t.reshape(9)  # a copy
        s[2] = 5.0
        return np.concatenate([x.ravel(), r, q, s])

    same_as_numpy(f, X)


def test_flat_reads_a_copy_and_writes_into_the_array():
    def f(x, v):
        x.flat[::4] = v
        piece = x.flat[1:3]
        piece[0] = 50.0  # a copy: x is untouched
        x.T.flat[1] = x[2, 2] * 2.0  # x.T.flat[1] is x[1, 0]
        assert len(x.flat) == 9
        return np.concatenate([x.ravel(), piece])

    same_as_numpy(f, X, V)
    assert [float(v) for v in pb.pullback(lambda x: np.stack(list(x.flat)), X)[0]] == list(X.flat)


def test_diagonal_is_a_read_only_view_as_in_numpy():
    def f(x):
        d = x.diagonal()
        x[0, 0] = x[1, 2] * 2.0  # d sees it
        return d * x[1]

    same_as_numpy(f, X)

    def write(x):
        x.diagonal()[0] = 1.0
        return np.sum(x)

    with pytest.raises(ValueError, match="read-only"):
        write(X.copy())
    with pytest.raises(ValueError, match="read-only"):
        pb.gradient(write, X)
    with pytest.raises(ValueError, match="read-only"):
        pb.gradient(lambda x: np.sum(np.broadcast_to(x, (2, 3)).__iadd__(1.0)), V)


def test_a_write_into_a_copy_never_reaches_the_base():
    def f(x):
        y = x.flatten()
        y[0] = 9.0
        z = x[[0, 2]]  # advanced indexing copies
        z[0, 0] = -9.0
        w = x.copy()
        w += 1.0
        u = x.astype(np.float64)  # copies
        u[1] = 0.0
        return np.concatenate([x.ravel(), y, z.ravel(), w.ravel(), u.ravel()])

    same_as_numpy(f, X)


def test_astype_without_copy_is_the_array_itself():
    def f(x):
        y = x.astype(x.dtype, copy=False)
        y[0] = 3.0 * x[1]
        return x * 1.0

    same_as_numpy(f, V)


# --- an element written twice with different values is refused; NumPy keeps one of them ---------------
def test_writing_one_element_twice_with_different_values_is_refused():
    def twice(x):
        x[[0, 0]] = np.array([1.0, 2.0])
        return np.sum(x)

    def twice_rows(x):
        x.reshape(3, 3)[[1, 1]] = x[:6].reshape(2, 3) * 2.0
        return np.sum(x)

    def twice_put(x):
        np.put(x, [0, -9], x[1:3])
        return np.sum(x)

    for f in (twice, twice_rows, twice_put):
        with pytest.raises(ValueError, match="more than once, from different elements of the value"):
            pb.gradient(f, X.ravel())


def test_writing_one_element_twice_with_the_same_value_is_numpy_s_write():
    def f(x, v):
        x[[0, 0, 2]] = v[1] * 2.0
        x.reshape(3, 3)[[2, 2]] = v  # the same row twice
        x.flat[[1, 1]] = v[0]
        np.put(x, [3, 4, 3, 4], v[:2])  # repeated as NumPy repeats v
        return x * x

    same_as_numpy(f, X.ravel(), V)


# --- NumPy's in-place functions --------------------------------------------------------------------
def test_fill_diagonal_with_tracked_array_and_value():
    def f(x, v):
        np.fill_diagonal(x, v)
        return x * x[0, 1]

    same_as_numpy(f, X, V, order=2)
    same_as_numpy(lambda x: f(x, 2.5), X)


def test_fill_diagonal_wrap_repeat_and_cube():
    def tall(x, v):
        np.fill_diagonal(x, v, wrap=True)
        return x * 2.0

    same_as_numpy(tall, np.arange(14.0).reshape(7, 2) / 5.0, np.array([0.3, -0.4, 1.5]))

    def cube(x, v):
        np.fill_diagonal(x, v)
        return x ** 2

    same_as_numpy(cube, np.arange(8.0).reshape(2, 2, 2) / 3.0, np.array([1.5, -0.5]))

    def through_view(x, v):
        np.fill_diagonal(x[1:, :2], v)
        return np.sin(x)

    same_as_numpy(through_view, X, V[:2])


def test_copyto_put_place_putmask_on_tracked_arrays():
    mask = np.array([[True, False, True], [False, False, True], [True, True, False]])

    def f(x, v):
        np.copyto(x[0], v, where=[True, False, True])
        np.copyto(x[1:, 1], v[:2] ** 2)
        np.put(x, [8, -4, 1], v * 2.0)
        np.place(x, mask, v[::-1])
        np.putmask(x.T, mask, v + 1.0)
        return x * x[2, 2]

    same_as_numpy(f, X, V)


def test_put_modes_and_short_values():
    for mode in ("wrap", "clip"):
        def f(x, v, mode=mode):
            np.put(x, [1, 11, -20], v[:2], mode=mode)
            return x ** 2

        same_as_numpy(f, X.ravel(), V)


def test_in_place_functions_refuse_a_tracked_value_into_a_plain_array():
    plain = np.zeros((3, 3))
    calls = {
        "np.copyto": lambda v: np.copyto(plain, v),
        "np.put": lambda v: np.put(plain, [0, 1, 2], v),
        "np.place": lambda v: np.place(plain, plain == 0.0, v),
        "np.putmask": lambda v: np.putmask(plain, plain == 0.0, v),
    }
    for name, call in calls.items():
        with pytest.raises(TypeError, match=name.replace(".", r"\.") + ".*plain array.*np.zeros_like"):
            pb.gradient(lambda v, call=call: call(v) or np.sum(v), V)
    with pytest.raises(TypeError, match="gradient would be lost"):
        pb.gradient(lambda v: np.fill_diagonal(plain, v) or np.sum(v), V)
    np.testing.assert_array_equal(plain, 0.0)


def test_in_place_functions_on_plain_arrays_are_numpy_s():
    def f(v):
        buffer = np.zeros(3)
        np.copyto(buffer, np.array([1.0, 2.0, 3.0]))
        np.put(buffer, [0], 5.0)
        return np.sum(v * buffer)

    assert pb.gradient(f, V)[0].tolist() == [5.0, 2.0, 3.0]


# --- forward mode and second order -------------------------------------------------------------------
def f_with_views(x):
    y = x.reshape(3, 3)
    t = y.T
    y[:, 0] += np.sin(t[1])
    t[2, ::2] *= y[1, 1]
    return np.sum(x ** 3) + np.sum(t[0] * y[2])


def test_jvp_of_writes_through_views_against_differences():
    x, v, eps = X.ravel(), np.linspace(-1.0, 1.0, 9), 1e-6
    y, y_dot = pb.jvp(f_with_views, (x,), (v,))
    assert y == pytest.approx(f_with_views(x.copy()), rel=1e-12)
    expected = (f_with_views(x + eps * v) - f_with_views(x - eps * v)) / (2 * eps)
    assert y_dot == pytest.approx(expected, rel=1e-6)


def test_hessian_of_writes_through_views_against_differences():
    x = X.ravel()
    np.testing.assert_allclose(pb.hessian(f_with_views, x), hessian_by_differences(f_with_views, x), rtol=1e-5, atol=1e-6)
    v = np.linspace(-1.0, 1.0, 9)
    np.testing.assert_allclose(pb.hvp(f_with_views, x, v), hessian_by_differences(f_with_views, x) @ v, rtol=1e-5, atol=1e-6)


def test_views_inside_an_inner_gradient():
    def g(x):
        (grad,) = pb.gradient(f_with_views, x)
        r = grad.reshape(3, 3)
        r[1] *= x[:3]  # a write through a view of the inner gradient, differentiated by the outer call
        return np.sum(grad ** 2)

    x = X.ravel()
    (outer,) = pb.gradient(g, x)
    eps = 1e-6
    expected = [(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(9)]
    np.testing.assert_allclose(outer, expected, rtol=1e-5, atol=1e-6)


def test_live_views_do_not_pile_up_on_the_base():
    def f(x):
        for _ in range(200):
            _ = x[0]  # dead views, forgotten now and then
        keep = x[1]
        x[2] = 1.0
        return np.sum(keep) + np.sum(x)

    assert pb.gradient(f, X)[0].tolist() == [[1.0] * 3, [2.0] * 3, [0.0] * 3]


def test_a_write_into_an_argument_that_shares_memory_with_another_argument_is_refused():
    # f works on a copy of each differentiated array: the other argument would not see the write
    base = np.arange(3.0)

    def write_then_read(x, y):
        x[0] = 5.0
        return np.sum(y)

    assert write_then_read(base.copy(), base.copy()) == 3.0
    with pytest.raises(ValueError, match=r"writes into argument 0, which shares memory with argument 1"):
        pb.withgradient(write_then_read, base, base[:2])

    def scaled(x, weights=None):
        x *= 2.0
        return np.sum(weights)

    with pytest.raises(ValueError, match=r"argument 0, which shares memory with keyword argument 'weights'"):
        pb.gradient(scaled, base, weights=base)

    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    def through_fields(p):
        p.a += 1.0
        return np.sum(p.b)

    with pytest.raises(ValueError, match=r"argument 0.a, which shares memory with argument 0.b"):
        pb.gradient(through_fields, Pair(base[:2], base[1:]))
    np.testing.assert_array_equal(base, [0.0, 1.0, 2.0])  # the caller's array is untouched
    # reading overlapping arguments, a tie (one array at two places) and a separate copy are fine
    assert pb.gradient(lambda x, y: np.sum(x) + np.sum(y), base, base[:2])[1].tolist() == [1.0, 1.0]
    tied = {"a": base, "b": base}

    def through_tie(d):
        d["a"][0] = 7.0
        return np.sum(d["b"])

    plain = base.copy()
    assert pb.withgradient(through_tie, tied).val == through_tie({"a": plain, "b": plain}) == 10.0
    assert pb.withgradient(write_then_read, base, base.copy()).val == 3.0


def test_an_in_place_operation_with_a_piecewise_constant_result_writes_a_constant():
    x = np.array([0.5, 1.0, 2.0])

    def f(a):
        y = a.copy()
        y //= 0.3  # floor(a / 0.3): no derivative, as without the in-place form
        return np.sum(y * a)

    val, (g,) = pb.withgradient(f, x)
    assert val == f(x)
    np.testing.assert_array_equal(g, np.floor_divide(x, 0.3))


@pytest.mark.parametrize("write", [
    lambda y: np.floor(y, out=y),
    lambda y: np.ceil(y, y),
    lambda y: np.rint(y, out=y),
    lambda y: np.floor_divide(y, 1.0, out=y),
    lambda y: np.isnan(y, out=y, casting="unsafe"),
    lambda y: np.floor(y[1:], out=y[1:]),
])
def test_a_result_without_a_derivative_written_into_a_traced_array_carries_none(write):
    # the array's old derivative must not survive the overwrite
    x = np.array([0.3, 1.6, -2.2])

    def f(x):
        y = x * 3.0
        write(y)
        return np.sum(y * y)

    val, (g,) = pb.withgradient(f, x)
    assert val == f(x)
    y = x * 3.0
    written = y.copy()
    write(written)
    # where the write changed an element its derivative is 0; elsewhere y is still 3x
    np.testing.assert_allclose(g, 2 * written * 3.0 * (written == y))
    assert_gradient(f, x + np.array([0.01, 0.02, 0.0]), dense_up_to=None)


WEIGHTS_3x4 = np.arange(12.0).reshape(3, 4) % 5 + 1


def test_add_at_with_a_slice_and_repeated_columns_adds_each_repeat():
    def f(x):
        y = x.copy()
        np.add.at(y, (slice(None), [0, 0, 2]), x[:, 1:] ** 2)
        return np.sum(y * WEIGHTS_3x4)

    x = np.arange(1.0, 13.0).reshape(3, 4) / 7
    value, (g,) = pb.withgradient(f, x)
    assert value == f(x)
    np.testing.assert_allclose(g, pb.testing.numerical_gradient(f, x)[0], rtol=1e-7)


# --- a buffer made by np.zeros_like takes traced writes through its views, in both modes ----------
ZEROS_LIKE_VIEWS = {"slice": lambda c: c[1:], "reversed": lambda c: c[::-1], "full-slice": lambda c: c[:],
                    "reshape": lambda c: c.reshape(2, 3), "transpose": lambda c: c.T}


@pytest.mark.parametrize("view", list(ZEROS_LIKE_VIEWS.values()), ids=list(ZEROS_LIKE_VIEWS))
def test_jvp_of_write_through_view_of_zeros_like_buffer(view):
    """np.zeros_like(x) of a traced x is traced in forward mode too (a Dual with a zero tangent), and so are
    its views: a write through one reaches the buffer, as in reverse mode and in NumPy."""

    def f(a):
        c = np.zeros_like(a)
        v = view(c)
        v[0] = 2.0 * a[0, 0]
        v[-1] += a[1, 2] ** 2
        return c

    x = np.arange(1.0, 7.0).reshape(2, 3)
    t = np.array([[1.0, 0.5, -1.0], [2.0, 0.0, 3.0]])
    y, back = pb.vjp(f, x)
    u = np.random.default_rng(0).normal(size=y.shape)
    yf, ydot = pb.jvp(f, (x,), (t,))
    np.testing.assert_array_equal(yf, f(x.copy()))
    np.testing.assert_allclose(np.sum(u * ydot), np.sum(back(u)[0] * t), rtol=1e-12)
    np.testing.assert_allclose(ydot, (f(x + 1e-6 * t) - f(x - 1e-6 * t)) / 2e-6, rtol=1e-6, atol=1e-8)
    same_as_numpy(f, x, order=2)


def test_jacobian_of_inplace_add_into_view_of_zeros_like_buffer():
    def f(a):
        c = np.zeros_like(a)
        v = c[1:]
        v += a[:2] ** 2
        return c

    x = np.array([1.0, 2.0, 3.0])
    expected = np.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 4.0, 0.0]])
    np.testing.assert_allclose(pb.jacobian(f, x)[0], expected)  # forward mode: as many inputs as outputs
    np.testing.assert_allclose(pb.jacobian(lambda a: f(a)[1:], x)[0], expected[1:])  # reverse mode
    np.testing.assert_allclose(pb.hessian(lambda a: np.sum(f(a) ** 2), x), np.diag([12.0, 48.0, 0.0]))


def test_results_of_a_dual_with_a_zero_tangent_stay_traced_in_forward_mode():
    """As a tape records every float result in reverse mode, forward mode keeps every float result of an
    operation on a dual value a dual, its tangent zero where nothing moves it: writes into it are seen as in
    NumPy. Forward mode knows such a value has derivative zero, so float(...) of it is the number; reverse mode,
    which cannot know that while recording, refuses it."""

    def f(a):
        c = np.zeros_like(a)
        d = np.exp(c)[::-1]  # a result computed from the buffer alone
        d[0] = a[1]
        return d * a

    x = np.array([0.5, 2.0])
    np.testing.assert_allclose(pb.jvp(f, (x,), (np.array([1.0, 0.0]),))[1], [2.0, 0.0])  # f = (a1 a0, a1)
    np.testing.assert_allclose(pb.jvp(f, (x,), (np.array([0.0, 1.0]),))[1], [0.5, 1.0])
    with pytest.raises(TypeError, match="gradient would be lost"):
        pb.gradient(lambda a: np.sum(float(np.sum(np.zeros_like(a) + 1.0)) * a), x)
    y, y_dot = pb.jvp(lambda a: float(np.sum(np.zeros_like(a) + 1.0)) * a, (x,), (x,))
    np.testing.assert_allclose(y_dot, 2.0 * x)


def test_as_strided_is_refused_naming_it_and_the_way_out():
    from numpy.lib.stride_tricks import as_strided

    def f(x):
        return np.sum(as_strided(x, shape=(2, 2), strides=(8, 8)) ** 2)  # sliding windows of 2

    for differentiate in (lambda: pb.gradient(f, V.copy()), lambda: pb.jvp(f, (V.copy(),), (np.ones(3),))):
        with pytest.raises(TypeError, match="as_strided") as refusal:
            differentiate()
        assert "sliding_window_view" in str(refusal.value)


@pytest.mark.parametrize("copy", [lambda a: np.copy(a), lambda a: a.copy(order="K"), lambda a: a.copy(order="A"),
                                  lambda a: np.copy(a) * 2.0], ids=["np.copy", "copy(K)", "copy(A)", "np.copy*2"])
def test_a_copy_keeps_a_fortran_layout_under_jit_of_the_gradient_and_of_jvp(copy):
    a = np.asfortranarray(np.arange(6.0).reshape(3, 2))
    w = np.arange(6.0)
    f = lambda a: np.sum(copy(a).ravel(order="K") * w)  # noqa: E731  (reads the memory order)
    expected = f(a.copy(order="F"))
    step = pb.jit(lambda a: pb.withgradient(f, a))
    for _ in range(2):
        value, (g,) = step(a)
        assert value == expected
        np.testing.assert_array_equal(g, pb.gradient(f, a)[0])
    scale = 2.0 if copy(np.ones(1))[0] == 2.0 else 1.0
    np.testing.assert_array_equal(pb.gradient(f, a)[0], scale * w.reshape(2, 3).T)  # F order: element (i, j) at i + 3j
    assert pb.jit(lambda a: pb.jvp(f, (a,), (np.ones_like(a),)))(a) == pb.jvp(f, (a,), (np.ones_like(a),))
