"""Views, aliases and in-place writes: values as NumPy computes them (same layout, so a reshape or ravel is a
view or a copy as in NumPy), gradients against central differences, pb.jit against NumPy at several calls,
and writes that would silently change a kept operand refused."""

import numpy as np
import pytest

import pullback as pb

W = np.arange(1.0, 13.0).reshape(3, 4)


def strided(a):
    """`a` as a view with gaps between its elements (every other element of a larger array)."""
    big = np.zeros(tuple(2 * n for n in a.shape))
    view = big[tuple(slice(None, None, 2) for _ in a.shape)]
    view[...] = a
    return view


def reversed_rows(a):
    """`a` as a view with a negative stride."""
    return a[::-1].copy()[::-1]


LAYOUTS = {"C": np.array, "F": np.asfortranarray, "strided": strided, "reversed": reversed_rows}


def maker(layout, shape=(3, 4), seed=0):
    values = np.random.default_rng(seed).standard_normal(shape)
    return lambda: LAYOUTS[layout](values.copy())


def finite_differences(f, make, eps=1e-6):
    """Central differences of scalar `f` at `make()`, each perturbed argument laid out as `make()` lays it."""
    shape = make().shape
    g = np.zeros(shape)
    for i in np.ndindex(shape):
        plus, minus = make(), make()
        plus[i] += eps
        minus[i] -= eps
        g[i] = (f(plus) - f(minus)) / (2 * eps)
    return g


def check_eager(f, make):
    expected = f(make())
    argument = make()
    before = argument.copy()
    value, (grad,) = pb.withgradient(f, argument)
    assert value == expected
    np.testing.assert_array_equal(argument, before)
    np.testing.assert_allclose(grad, finite_differences(f, make), rtol=1e-6, atol=1e-6)


def write_then_reshape(x):
    x[0, 0] = 5.0 * x[1, 1]
    v = x.reshape(-1)
    v[1] += 100.0
    return np.sum(x * W)


def scale_then_ravel(x):
    x *= 2.0
    v = x.ravel()
    v[1] += 100.0
    return np.sum(x * x * W)


def view_write_then_ravel(x):
    y = x[1:]
    y += 1.0
    v = x.ravel()
    v[1] += 100.0
    return np.sum(x * W)


def sin_out_then_reshape(x):
    np.sin(x, out=x)
    v = x.reshape(-1)
    v[1] += 100.0
    return np.sum(x * W)


def sort_then_transposed_reshape(x):
    x.sort(axis=0)
    v = x.T.reshape(-1)
    v[1] += 100.0
    return np.sum(x * W)


WRITES = [write_then_reshape, scale_then_ravel, view_write_then_ravel, sin_out_then_reshape,
          sort_then_transposed_reshape]


@pytest.mark.parametrize("layout", ["F", "strided", "reversed"])
@pytest.mark.parametrize("f", WRITES)
def test_a_write_keeps_the_layout_of_the_array_written(f, layout):
    """A write into a strided, reversed or F-ordered array keeps its layout, so that a later reshape or ravel
    is a copy where NumPy makes one (a write into it does not reach the array)."""
    check_eager(f, maker(layout))


def strided_view_of_written(x):
    v = x[::-1, 1:3]
    x[1] = 0.5 * x[2]
    v[0] += v[1]
    r = v.reshape(-1)
    r[2] = -1.0
    return np.sum(x * W) + 2.0 * np.sum(r)


def column_of_written(x):
    v = x[:, 1]
    x[0, 0] = 3.0
    w = v.reshape(3, 1)
    w[1] += 7.0
    return np.sum(x * W)


def transposed_of_written(x):
    v = x.T
    x += 1.0
    r = v.ravel()
    r[0] = 9.0
    return np.sum(x * W) + np.sum(r * W.ravel())


VIEWS = [strided_view_of_written, column_of_written, transposed_of_written]


@pytest.mark.parametrize("layout", ["C", "strided", "reversed"])
@pytest.mark.parametrize("f", VIEWS)
def test_a_view_made_again_after_a_write_keeps_its_layout(f, layout):
    check_eager(f, maker(layout))


@pytest.mark.parametrize("layout, f", [(layout, f) for layout in ("strided", "reversed") for f in WRITES]
                         + [("F", sort_then_transposed_reshape)]
                         + [(layout, f) for layout in ("C", "strided", "reversed") for f in VIEWS])
def test_jit_of_a_gradient_keeps_layouts_after_writes(f, layout):
    """Inside pb.jit the traced layouts decide view or copy as NumPy's do, at the trace and at each replay."""
    step = pb.jit(lambda x: pb.withgradient(f, x))
    for seed in range(3):
        make = maker(layout, seed=seed)
        value, (grad,) = step(make())
        assert value == f(make())
        eager = pb.withgradient(f, make())
        np.testing.assert_array_equal(grad, eager.grad[0])


def test_jit_of_a_gradient_with_a_reversed_view_written_through():
    """The C-ordered case of a view with a negative stride, re-made after a write into its base."""
    def f(x):
        v = x[::-1, 1:3]
        x[1] = 0.5 * x[2]
        v[0] += v[1]
        r = v.reshape(-1)
        r[2] = -1.0
        return np.sum(x * W) + np.sum(r * np.arange(6.0))

    x = np.arange(12.0).reshape(3, 4)
    step = pb.jit(lambda x: pb.withgradient(f, x))
    for k in range(3):
        value, (grad,) = step(x + k)
        assert value == f(x + k)
        np.testing.assert_allclose(grad, finite_differences(f, lambda: x + k), atol=1e-6)


# --- plain arrays a pullback keeps, written through other arrays ---------------------------------------------

def through_base(x):
    m = np.arange(4.0)
    y = np.sum(x * m[:3])
    m[0] = 100.0
    return y


def through_base_of_transposed(x):
    m = np.arange(6.0).reshape(2, 3)
    y = np.sum(x * m.T)
    m[0, 0] = 100.0
    return y


def through_base_of_reshape(x):
    m = np.arange(6.0)
    y = np.sum(x @ m.reshape(3, 2))
    m *= 0.0
    return y


def through_new_view(x):
    m = np.arange(4.0)
    y = np.sum(np.sin(x) * m[1:])
    m[1:][0] = 9.0
    return y


def through_add_at(x):
    m = np.arange(4.0)
    y = np.sum(x * m[:3])
    np.add.at(m, [0, 0], 1.0)
    return y


def index_through_base(x):
    index = np.array([[0, 1]])
    y = np.sum(x[index[0]] ** 2)
    index[0, 0] = 2
    return y


KEPT_VIEW_WRITES = {through_base: (3,), through_base_of_transposed: (3, 2), through_base_of_reshape: (2, 3),
                    through_new_view: (3,), through_add_at: (3,), index_through_base: (3,)}


@pytest.mark.parametrize("f", list(KEPT_VIEW_WRITES))
def test_a_write_into_the_memory_of_a_kept_view_is_refused(f):
    """The operation kept a view of a plain array; a write through its base, another view or np.add.at, which
    NumPy allows while the view is read-only, would change the gradient: the call raises, naming it."""
    x = np.random.default_rng(0).standard_normal(KEPT_VIEW_WRITES[f])
    with pytest.raises(ValueError, match="wrote into the memory of a NumPy array"):
        pb.gradient(f, x)
    with pytest.raises(ValueError, match="wrote into the memory of a NumPy array"):
        pb.jit(lambda x: pb.gradient(f, x))(x)


def test_writes_elsewhere_in_the_base_and_after_the_call_are_allowed():
    m = np.arange(6.0)

    def f(x):
        y = np.sum(x * m[:3])
        m[3:] = -1.0  # not the elements the operation used
        return y

    x = np.array([0.5, -1.0, 2.0])
    (g,) = pb.gradient(f, x)
    np.testing.assert_array_equal(g, [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(m, [0.0, 1.0, 2.0, -1.0, -1.0, -1.0])
    m[:3] = 7.0  # writable again once the call has ended
    assert m.flags.writeable


def test_the_error_of_f_is_not_replaced():
    def f(x):
        m = np.arange(4.0)
        np.sum(x * m[:3])
        m[0] = 100.0
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        pb.gradient(f, np.ones(3))


def test_a_view_whose_base_nothing_else_reaches_is_not_copied():
    """`np.arange(6.0).reshape(2, 3)` is a view of an array nobody else holds: nothing to compare."""
    def f(x):
        m = np.arange(6.0).reshape(2, 3)
        return np.sum(x * m)

    x = np.ones((2, 3))
    np.testing.assert_array_equal(pb.gradient(f, x)[0], np.arange(6.0).reshape(2, 3))


@pytest.mark.xfail(strict=True, reason="the kept array owns its memory and is flagged read-only, but a view of it "
                                       "made before the operation keeps its own writeable flag; finding it would "
                                       "take a copy of every kept operand")
def test_a_write_through_an_older_view_of_a_kept_array():
    def f(x):
        m = np.arange(4.0)
        v = m[:3]
        y = np.sum(x * m)
        v[0] = 100.0
        return y

    (g,) = pb.gradient(f, np.ones(4))
    np.testing.assert_array_equal(g, np.arange(4.0))


@pytest.mark.xfail(strict=True, reason="np.add.at writes into read-only arrays, and the kept array owns its memory "
                                       "(only views of another array's memory are compared when f ends)")
def test_np_add_at_into_a_kept_array():
    def f(x):
        m = np.arange(3.0)
        y = np.sum(x * m)
        np.add.at(m, [0], 100.0)
        return y

    (g,) = pb.gradient(f, np.ones(3))
    np.testing.assert_array_equal(g, np.arange(3.0))


@pytest.mark.parametrize("shape", [(3,), ()])
def test_imag_of_a_real_array_is_read_only(shape):
    """NumPy's `x.imag` of a real array is a read-only array of zeros: a write into it raises."""
    def f(x):
        part = x.imag
        try:
            part[...] = 1.0
        except ValueError:
            return np.sum(x * x)
        return np.sum(x * 0.0)

    x = np.full(shape, 1.5)
    assert f(x.copy()) == np.sum(x * x)
    value, (grad,) = pb.withgradient(f, x)
    assert value == np.sum(x * x)
    np.testing.assert_array_equal(grad, 2 * x)


def test_np_imag_of_a_real_array_is_read_only():
    def f(x):
        part = np.imag(x)
        try:
            part[0] = 1.0
        except ValueError:
            return np.sum(x * x)
        return np.sum(x * 0.0)

    x = np.array([1.0, 2.0])
    assert pb.withgradient(f, x).val == f(x.copy())


@pytest.mark.xfail(strict=True, reason="pb.jit writes into a non-contiguous argument through a compact copy of it "
                                       "(_jit_trace._copy_to_write), so a ravel of it afterwards is a view in the "
                                       "trace where NumPy makes a copy, and np.shares_memory answers True")
def test_jit_shares_memory_after_a_write_into_a_strided_argument():
    def f(x):
        x *= 2.0
        return np.shares_memory(x.ravel(), x)

    x = strided(np.ones((3, 4)))
    assert not f(strided(np.ones((3, 4))))
    assert not pb.jit(f)(x)
