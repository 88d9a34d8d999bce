"""pb.jit gives what the eager call gives where a NumPy call raises partway through a write, where the code
catches a NumPy error, for read-only views returned, after a default argument is rebound, and (a known gap of
the engine) for a gradient with respect to a Python float."""

import numpy as np
import pytest

import pullback as pb


def _eager_and_jitted(f, jf, make_args):
    """Call `f` and `jf` on fresh copies of the same arguments: (eager outcome, jitted outcome), each
    `(result or exception type, arguments after the call)`."""
    outcomes = []
    for fn in (f, jf):
        args = make_args()
        try:
            result = fn(*args)
        except Exception as error:  # the exception type is what is compared
            result = type(error)
        outcomes.append((result, args))
    return outcomes


def _assert_same_outcome(eager, jitted):
    (result_e, args_e), (result_j, args_j) = eager, jitted
    if isinstance(result_e, type):
        assert result_j is result_e
    else:
        np.testing.assert_array_equal(result_j, result_e)
    for a_e, a_j in zip(args_e, args_j):
        np.testing.assert_array_equal(a_j, a_e)


# --- a write that raises partway --------------------------------------------------------------------------

def _divide_in_place(x, y):
    with np.errstate(divide="raise"):
        x /= y
    return x * 2


@pytest.mark.parametrize("first", [[1.0, 4.0, 2.0], [1.0, 0.0, 2.0]])
def test_in_place_division_raising_under_errstate_leaves_the_full_quotient_in_the_argument(first):
    # NumPy computes the whole quotient into x (an inf where y is 0), then raises FloatingPointError
    jf = pb.jit(_divide_in_place)
    for k, y in enumerate((first, [1.0, 4.0, 2.0], [0.0, 4.0, 0.0], [2.0, 1.0, 1.0], [1.0, 0.0, 2.0])):
        x = np.array([1.0, 2.0, 3.0]) * (k + 1)
        _assert_same_outcome(*_eager_and_jitted(_divide_in_place, jf, lambda: (x.copy(), np.array(y))))


def test_in_place_division_of_a_slice_raising_under_errstate_writes_the_argument_as_numpy_does():
    def f(x, y):
        with np.errstate(divide="raise"):
            x[1:] /= y
        return x

    jf = pb.jit(f)
    for y in ([1.0, 2.0], [1.0, 2.0], [0.0, 2.0], [1.0, 2.0], [3.0, 0.0]):
        _assert_same_outcome(*_eager_and_jitted(f, jf, lambda: (np.arange(3.0) + 1, np.array(y))))


def _put(a, indices, values):
    np.put(a, indices, values)
    return a + 1


@pytest.mark.parametrize("first_bad", [False, True])
def test_np_put_raising_on_an_index_out_of_bounds_keeps_the_writes_before_it(first_bad):
    # NumPy writes the values at the valid indices before the bad one, then raises IndexError
    jf = pb.jit(_put)
    for k, bad in enumerate((first_bad, False, True, False, True)):
        indices = np.array([1, 2, 7 if bad else 4, 3])
        _assert_same_outcome(*_eager_and_jitted(_put, jf, lambda: (np.zeros(5), indices, np.arange(4.0) + k)))


def test_flat_assignment_raising_on_an_index_out_of_bounds_keeps_the_writes_before_it():
    def f(a, indices):
        a.flat[indices] = 5.0
        return a

    jf = pb.jit(f)
    for indices in ([0, 1], [1, 2, 9, 3], [2, 3], [4, 9]):
        _assert_same_outcome(*_eager_and_jitted(f, jf, lambda: (np.zeros(5), np.array(indices))))


# --- code that catches NumPy's errors -----------------------------------------------------------------------

def _reciprocal_or_zeros(x):
    try:
        with np.errstate(divide="raise"):
            return 1.0 / x
    except FloatingPointError:
        return np.zeros_like(x)


@pytest.mark.parametrize("first", [[1.0, 2.0], [0.0, 2.0]])
def test_a_caught_floating_point_error_takes_the_branch_eager_code_takes_at_every_call(first):
    jf = pb.jit(_reciprocal_or_zeros)
    for values in (first, [1.0, 4.0], [0.0, 1.0], [2.0, 8.0], [0.0, 0.0]):
        x = np.array(values)
        with np.errstate(divide="ignore"):
            np.testing.assert_array_equal(jf(x), _reciprocal_or_zeros(x))


def _clamped_put(a, indices):
    try:
        np.put(a, indices, 1.0)
    except IndexError:
        a[0] = -1.0
    return a * 2


@pytest.mark.parametrize("first", [[1, 2, 3], [1, 9, 3], [9, 1, 3]])
def test_a_caught_index_error_of_np_put_keeps_its_writes_and_takes_the_except_branch(first):
    # the bad index first writes nothing, later it writes the indices before it: the replay follows each
    jf = pb.jit(_clamped_put)
    for indices in (first, [1, 2, 3], [1, 9, 3], [9, 1, 3], [2, 3, 9], [0, 1, 2]):
        _assert_same_outcome(*_eager_and_jitted(_clamped_put, jf, lambda: (np.zeros(5), np.array(indices))))


def test_a_caught_in_place_division_error_keeps_the_quotient_and_takes_the_except_branch():
    def f(x, y):
        try:
            with np.errstate(divide="raise"):
                x /= y
        except FloatingPointError:
            x[np.isinf(x)] = 0.0
        return x.sum()

    jf = pb.jit(f)
    for y in ([0.0, 2.0], [1.0, 2.0], [4.0, 0.0], [1.0, 1.0]):
        _assert_same_outcome(*_eager_and_jitted(f, jf, lambda: (np.array([1.0, 3.0]), np.array(y))))


# --- read-only views returned -------------------------------------------------------------------------------

def _assert_like_eager(result, eager, argument, eager_argument):
    np.testing.assert_array_equal(result, eager)
    assert result.dtype == eager.dtype
    assert result.flags.writeable == eager.flags.writeable
    assert result.strides == eager.strides
    assert np.shares_memory(result, argument) == np.shares_memory(eager, eager_argument)


@pytest.mark.parametrize("f", [
    lambda x: np.broadcast_to(x, (3, 3)),
    lambda x: np.broadcast_to(x * 2.0, (2, 3)),
    lambda x: np.broadcast_to(np.sum(x), (4,)),
    lambda x: np.broadcast_to(x[0], (2, 3)),
    lambda x: np.diagonal(np.outer(x, x)),
    lambda x: np.outer(x, x).diagonal(),
    lambda x: np.broadcast_to(x + 1.0, (2, 3)).T,
], ids=["argument", "computed", "reduced", "element", "diagonal", "diagonal-method", "transposed"])
def test_a_read_only_view_numpy_makes_is_returned_read_only_as_eagerly(f):
    jf = pb.jit(f)
    for k in range(3):
        x, x_eager = np.arange(3.0) + k, np.arange(3.0) + k
        result = jf(x)
        _assert_like_eager(result, f(x_eager), x, x_eager)
        with pytest.raises(ValueError):
            result[...] = 0.0


def test_a_read_only_view_returned_beside_its_base_shares_its_memory_as_eagerly():
    def f(x):
        y = x * 2.0
        return y, np.broadcast_to(y, (2, 3))

    jf = pb.jit(f)
    for k in range(3):
        (y, b), (y_e, b_e) = jf(np.arange(3.0) + k), f(np.arange(3.0) + k)
        _assert_like_eager(b, b_e, y, y_e)
        y[0] = -1.0
        y_e[0] = -1.0
        np.testing.assert_array_equal(b, b_e)


def test_a_gradient_that_pullback_broadcasts_stays_a_writable_array_as_eagerly():
    f = lambda x: pb.gradient(lambda x: np.sum(x) ** 2, x)[0]  # noqa: E731
    jf = pb.jit(f)
    for k in range(3):
        g, g_eager = jf(np.arange(3.0) + k), f(np.arange(3.0) + k)
        np.testing.assert_allclose(g, g_eager)
        assert g.flags.writeable and g_eager.flags.writeable


# --- a Python float differentiated ----------------------------------------------------------------------------

def test_a_gradient_with_respect_to_a_python_float_traces_once_and_replays_for_other_floats():
    f = lambda s, x: pb.gradient(lambda s: s * np.sum(x) + np.sin(s) * s ** 2, s)  # noqa: E731
    jf = pb.jit(f)
    x = np.arange(3.0)
    for s in (1.0, 2.0, 3.5):
        (g,), (g_eager,) = jf(s, x), f(s, x)
        assert type(g) is float
        assert g == pytest.approx(np.sum(x) + np.cos(s) * s ** 2 + 2 * s * np.sin(s))
        assert g == g_eager
    assert jf.cache_info().traces == 1


# --- default arguments ----------------------------------------------------------------------------------------

def test_rebinding_a_default_argument_between_calls_is_followed():
    def scaled(x, c=np.ones(3), *, shift=0.0):
        return x * c + shift

    jf = pb.jit(scaled)
    x = np.arange(3.0)
    np.testing.assert_array_equal(jf(x), scaled(x))
    scaled.__defaults__ = (np.full(3, 9.0),)
    np.testing.assert_array_equal(jf(x), scaled(x))
    scaled.__kwdefaults__ = {"shift": 2.0}
    np.testing.assert_array_equal(jf(x), scaled(x))
    scaled.__kwdefaults__["shift"] = -1.0
    np.testing.assert_array_equal(jf(x), scaled(x))


def test_rebinding_a_default_argument_of_a_function_called_inside_is_followed():
    def helper(x, k=2.0):
        return x * k

    jf = pb.jit(lambda x: helper(x) + 1.0)
    x = np.arange(3.0)
    np.testing.assert_array_equal(jf(x), x * 2.0 + 1.0)
    helper.__defaults__ = (5.0,)
    np.testing.assert_array_equal(jf(x), x * 5.0 + 1.0)
