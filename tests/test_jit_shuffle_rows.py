"""pb.jit and NumPy's shuffle of a traced array: rows are permuted with exactly NumPy's draws (not duplicated through
views), with a generator made inside the function or passed in as an argument (whose replays draw afresh, leaving
the generator as NumPy would), plainly and under jit of a gradient; what cannot be followed is refused, naming the
construct and the fix. Values are compared with plain NumPy runs of the same code on identically seeded
generators; gradients with eager pb.gradient and central differences."""
import subprocess
import sys
import warnings

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient

SHAPES = {"1d": (6,), "2d": (4, 3), "3d": (4, 3, 2), "tall": (9, 2)}


def _x(shape):
    return (np.arange(np.prod(shape), dtype=float).reshape(shape) + 1.0) ** 1.5


def _weights(shape):
    return np.cos(np.arange(np.prod(shape)) * 0.7).reshape(shape) + 0.1


def _state(rng):
    return rng.bit_generator.state


def _calls(f, x, seed=5, calls=3, jit=pb.jit):
    """f(x, rng) called `calls` times plainly and jitted, each on its own generator seeded alike: the results of
    each call, which must differ from call to call, and the generators' states afterwards are NumPy's."""
    plain_rng, jit_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    jitted = jit(f)
    plain = []
    for _ in range(calls):
        want = f(x.copy(), plain_rng)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "shuffling a 'Symbol' object" warning
            got = jitted(x.copy(), jit_rng)
        np.testing.assert_array_equal(got, want)
        assert _state(jit_rng) == _state(plain_rng)
        plain.append(want)
    assert not all(np.array_equal(plain[0], p) for p in plain[1:]), "the calls should draw other permutations"
    return jitted


# --- plain pb.jit: a generator made inside the function -------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_shuffle_by_a_generator_made_inside_permutes_rows_as_numpy(shape):
    def f(x):
        rng = np.random.default_rng(3)
        y = x * 1.0
        rng.shuffle(y)
        return y

    x = _x(shape)
    want = f(x)
    assert len({r.tobytes() for r in want}) == len(want)
    jitted = pb.jit(f)
    for _ in range(3):
        np.testing.assert_array_equal(jitted(x), want)
    np.testing.assert_array_equal(jitted(x + 1.0), f(x + 1.0))


def test_numpy_gives_no_shuffle_warning_for_a_stand_in():
    # in a fresh process: pullback's filter is set on import (pytest imports test modules inside catch_warnings)
    script = """if True:
        import warnings, numpy as np, pullback as pb
        def f(x):
            y = x * 1.0
            np.random.default_rng(0).shuffle(y)
            return y
        with warnings.catch_warnings(record=True) as caught:
            pb.jit(f)(np.ones((3, 2)))
            pb.jit(lambda x: pb.gradient(lambda x: np.sum(f(x)), x))(np.ones((3, 2)))
        print(len(caught))
    """
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "0", done.stdout + done.stderr


def test_the_reported_program():
    def f(x):
        rng = np.random.default_rng(3)
        y = x * 1.0
        rng.shuffle(y)
        return y

    x = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(pb.jit(f)(x), [[9, 10, 11], [6, 7, 8], [3, 4, 5], [0, 1, 2]])


def test_shuffle_of_a_view_of_rows_made_inside():
    def f(x):
        rng = np.random.default_rng(11)
        y = x * 1.0
        rng.shuffle(y[1:, ::-1])
        return y

    x = _x((6, 3))
    np.testing.assert_array_equal(pb.jit(f)(x), f(x))


def test_shuffle_made_inside_twice_and_the_rows_read_before():
    def f(x):
        rng = np.random.default_rng(4)
        y = x * 1.0
        first = y[0]  # a view: shows the shuffle, as in NumPy
        rng.shuffle(y)
        rng.shuffle(y)
        return y, first * 1.0

    x = _x((5, 2))
    for got, want in zip(pb.jit(f)(x), f(x)):
        np.testing.assert_array_equal(got, want)


def test_shuffle_by_a_legacy_random_state_made_inside():
    def f(x):
        rs = np.random.RandomState(8)
        y = x * 1.0
        rs.shuffle(y)
        return y

    x = _x((5, 3))
    np.testing.assert_array_equal(pb.jit(f)(x), f(x))


# --- plain pb.jit: a generator argument --------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_shuffle_by_a_generator_argument_draws_afresh_as_numpy(shape):
    def f(x, rng):
        y = x * 2.0
        rng.shuffle(y)
        return y

    _calls(f, _x(shape))


@pytest.mark.parametrize("axis", [1, -1, 2])
def test_shuffle_along_another_axis_by_a_generator_argument(axis):
    def f(x, rng):
        y = x * 2.0
        rng.shuffle(y, axis=axis)
        return y

    _calls(f, _x((3, 5, 4)))


def test_shuffle_of_an_argument_writes_the_callers_array():
    def f(x, rng):
        rng.shuffle(x)
        return x.sum(axis=1)

    x0 = _x((5, 3))
    plain_rng, jit_rng = np.random.default_rng(2), np.random.default_rng(2)
    jitted = pb.jit(f)
    for _ in range(3):
        a, b = x0.copy(), x0.copy()
        want = f(a, plain_rng)
        np.testing.assert_array_equal(jitted(b, jit_rng), want)
        np.testing.assert_array_equal(b, a)
        assert _state(jit_rng) == _state(plain_rng)


def test_shuffle_then_compute_with_a_generator_argument():
    def f(x, rng):
        y = np.sin(x)
        rng.shuffle(y)
        first = y[0]
        rng.shuffle(y)
        return np.concatenate([y.ravel(), first])

    _calls(f, _x((6, 2)))


def test_shuffle_by_a_generator_argument_keeps_numpys_errors():
    def f(x, rng):
        rng.shuffle(x * 1.0, axis=3)
        return x

    with pytest.raises(np.exceptions.AxisError):
        pb.jit(f)(_x((3, 2)), np.random.default_rng(0))


def test_shuffle_of_a_list_by_a_generator_argument_is_refused_naming_the_fix():
    def f(x, rng):
        rows = [x[0] * 1.0, x[1] * 2.0, x[2] * 3.0]
        rng.shuffle(rows)
        return np.stack(rows)

    with pytest.raises(pb.JitError, match=r"shuffle.*list.*np\.stack"):
        pb.jit(f)(_x((3, 2)), np.random.default_rng(0))


def test_shuffle_of_a_plain_array_by_a_generator_argument_is_refused_naming_the_fix():
    def f(x, rng):
        order = np.arange(len(x))
        rng.shuffle(order)
        return x[order]

    with pytest.raises(pb.JitError, match=r"permutation"):
        pb.jit(f)(_x((3, 2)), np.random.default_rng(0))


def test_the_shuffle_of_a_list_of_arrays_by_a_generator_made_inside():
    def f(x):
        rng = np.random.default_rng(1)
        rows = [x[0] * 1.0, x[1] * 2.0, x[2] * 3.0, x[3] * 4.0]
        rng.shuffle(rows)
        return np.stack(rows)

    x = _x((4, 2))
    np.testing.assert_array_equal(pb.jit(f)(x), f(x))


# --- plain pb.jit: NumPy's global generator, permutation, permuted ----------------------------------------------

def test_numpys_global_shuffle_is_refused_naming_the_fix():
    def f(x):
        y = x * 1.0
        np.random.shuffle(y)
        return y

    np.random.seed(0)
    with pytest.raises(pb.JitError, match=r"global generator.*Pass a np\.random\.Generator"):
        pb.jit(f)(_x((4, 3)))


@pytest.mark.parametrize("draw", ["permutation", "permuted0", "permuted1"])
def test_permutation_and_permuted_by_a_generator_argument(draw):
    def f(x, rng):
        y = np.sin(x)
        if draw == "permutation":
            return rng.permutation(y)
        return rng.permuted(y, axis=int(draw[-1]))

    _calls(f, _x((5, 3)))


@pytest.mark.parametrize("draw", ["permutation", "permuted"])
def test_permutation_of_a_traced_array_by_a_generator_made_inside_is_refused_naming_the_fix(draw):
    def f(x):
        rng = np.random.default_rng(0)
        y = x * 1.0
        return rng.permutation(y) if draw == "permutation" else rng.permuted(y, axis=1)

    with pytest.raises(pb.JitError, match=r"rng\.permutation.*permutation\(len"):
        pb.jit(f)(_x((4, 3)))


def test_permutation_of_a_length_by_a_generator_made_inside():
    def f(x):
        rng = np.random.default_rng(0)
        return x[rng.permutation(len(x))]

    x = _x((5, 2))
    np.testing.assert_array_equal(pb.jit(f)(x), f(x))


# --- pb.jit of a gradient ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_gradient_through_a_shuffle_by_a_generator_made_inside(shape):
    w = _weights(shape)

    def loss(x):
        rng = np.random.default_rng(9)
        y = np.sin(x) * x
        rng.shuffle(y)
        return np.sum(y * w)

    x = _x(shape) * 0.1
    (eager,) = pb.gradient(loss, x)
    np.testing.assert_allclose(eager, numerical_gradient(loss, x)[0], rtol=1e-6, atol=1e-8)
    jitted = pb.jit(lambda x: pb.gradient(loss, x))
    for _ in range(3):
        np.testing.assert_allclose(jitted(x)[0], eager, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_gradient_through_a_shuffle_by_a_generator_argument(shape):
    w = _weights(shape)

    def loss(x, rng):
        y = np.sin(x) * x
        rng.shuffle(y)
        return np.sum(y * w)

    x = _x(shape) * 0.1
    plain_rng, jit_rng = np.random.default_rng(4), np.random.default_rng(4)
    jitted = pb.jit(lambda x, rng: pb.gradient(loss, x, rng)[0])
    grads = []
    for _ in range(3):
        state = plain_rng.bit_generator.state
        (eager, _) = pb.gradient(loss, x, plain_rng)
        numerical = numerical_gradient(lambda x: loss(x, _at(state)), x)[0]
        np.testing.assert_allclose(eager, numerical, rtol=1e-6, atol=1e-8)
        got = jitted(x, jit_rng)
        np.testing.assert_allclose(got, eager, rtol=1e-12, atol=1e-14)
        assert _state(jit_rng) == _state(plain_rng)
        grads.append(got)
    assert not all(np.array_equal(grads[0], g) for g in grads[1:])


def _at(state):
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng


def test_gradient_through_permutation_indexing_by_a_generator_argument():
    w = _weights((5, 3))

    def loss(x, rng):
        y = np.sin(x)
        return np.sum(y[rng.permutation(len(y))] * w)

    x = _x((5, 3)) * 0.1
    plain_rng, jit_rng = np.random.default_rng(6), np.random.default_rng(6)
    jitted = pb.jit(lambda x, rng: pb.gradient(loss, x, rng)[0])
    for _ in range(3):
        eager = pb.gradient(loss, x, plain_rng)[0]
        np.testing.assert_allclose(jitted(x, jit_rng), eager, rtol=1e-12)
        assert _state(jit_rng) == _state(plain_rng)


def test_gradient_through_a_shuffle_along_another_axis_by_a_generator_argument_is_numpys_refusal():
    def loss(x, rng):
        y = x * 1.0
        rng.shuffle(y, axis=1)
        return np.sum(y * _weights((4, 3)))

    x = _x((4, 3))
    with pytest.raises(NotImplementedError, match=r"Axis argument.*rng\.permutation"):
        pb.gradient(loss, x, np.random.default_rng(0))
    with pytest.raises(NotImplementedError, match=r"Axis argument.*rng\.permutation"):
        pb.jit(lambda x, rng: pb.gradient(loss, x, rng))(x, np.random.default_rng(0))


def test_value_and_gradient_of_a_shuffled_intermediate_by_a_generator_argument():
    w = _weights((6, 2))

    def loss(x, rng):
        h = np.tanh(x)
        rng.shuffle(h)
        h = h * h
        rng.shuffle(h)
        return np.sum(h * w)

    x = _x((6, 2)) * 0.05
    plain_rng, jit_rng = np.random.default_rng(12), np.random.default_rng(12)
    jitted = pb.jit(lambda x, rng: pb.withgradient(loss, x, rng))
    for _ in range(3):
        value, (g, _) = pb.withgradient(loss, x, plain_rng)
        got_value, (got, _) = jitted(x, jit_rng)
        assert got_value == pytest.approx(value, rel=1e-13)
        np.testing.assert_allclose(got, g, rtol=1e-12)
        assert _state(jit_rng) == _state(plain_rng)


# --- what cannot be followed is refused, naming rng.shuffle and the fix -------------------------------------------

@pytest.mark.parametrize("argument", [False, True], ids=["made inside", "argument"])
@pytest.mark.parametrize("part", [lambda y: y.T, lambda y: y.reshape(6, 2)], ids=["T", "reshape"])
def test_shuffle_of_a_transposed_or_reshaped_view_is_refused_naming_the_fix(argument, part):
    def f(x, rng):
        y = x * 1.0
        (rng if argument else np.random.default_rng(0)).shuffle(part(y))
        return y

    with pytest.raises(pb.JitError, match=r"rng\.shuffle\(v\).*rng\.permutation\(y\.shape\[1\]\)"):
        pb.jit(f)(_x((4, 3)), np.random.default_rng(0))


# --- rows asked for and written by the user's own code, C code and NumPy's out= -----------------------------------

def _swap_by_fancy_index(y):
    y[[0, 1]] = y[[1, 0]]


def _swap_by_copies(y):
    a, b = y[0].copy(), y[1].copy()
    y[0], y[1] = b, a


def _swap_through_views(y):
    y[0], y[2] = y[2], y[0]  # views, as in NumPy: two copies of row 2


def _swap_with_a_temporary(y):
    tmp = y[0].copy()
    y[0] = y[3]
    y[3] = tmp


def _rows_by_operator_calls(y):
    import operator
    r = operator.getitem(y, 0)
    operator.setitem(y, 0, operator.getitem(y, 1))  # r shows it
    y[2] = r * 2.0


def _rows_by_map(y):
    rows = list(map(y.__getitem__, [1, 0]))
    list(map(y.__setitem__, [0], [rows[0]]))  # rows[1], row 0, shows row 1
    y[3] = rows[1] + 1.0


def _reverse_in_place(y):
    y[::-1] = y


def _flip_into_out(y):
    np.negative(np.flip(y, 0), out=y)


def _roll_into_out(y):
    np.copyto(y, np.roll(y, 1, axis=0))


def _reversed_view_into_out(y):
    np.add(y[::-1], 0.5, out=y)


def _take_into_itself(y):
    np.take(y, [1, 0, 3, 2], axis=0, out=y)


def _shuffle_a_list_of_rows(y):
    rows = list(y)
    np.random.default_rng(2).shuffle(rows)
    rows[0][0] = -1.0  # a view of y, as in NumPy
    y[3] = np.stack(rows)[0] * 3.0


WRITERS = {f.__name__.strip("_"): f for f in (
    _swap_by_fancy_index, _swap_by_copies, _swap_through_views, _swap_with_a_temporary, _rows_by_operator_calls,
    _rows_by_map, _reverse_in_place, _roll_into_out, _reversed_view_into_out, _take_into_itself,
    _shuffle_a_list_of_rows)}


def _program_writing(write):
    """`f` writing rows of an intermediate by `write`, a weighted sum of it, and an input."""
    w = _weights((4, 3))

    def f(x):
        y = np.sin(x) + x
        write(y)
        return y

    def loss(x):
        return np.sum(f(x) * w)

    return f, loss, _x((4, 3)) * 0.1


@pytest.mark.parametrize("write", WRITERS.values(), ids=WRITERS.keys())
def test_rows_written_in_place_under_jit_and_jit_of_a_gradient(write):
    f, loss, x = _program_writing(write)
    jitted = pb.jit(f)
    for k in range(2):
        np.testing.assert_array_equal(jitted(x + k), f(x + k))
    (eager,) = pb.gradient(loss, x)
    np.testing.assert_allclose(eager, numerical_gradient(loss, x)[0], rtol=1e-6, atol=1e-8)
    jitted_gradient = pb.jit(lambda x: pb.gradient(loss, x)[0])
    for k in range(2):
        np.testing.assert_allclose(jitted_gradient(x + k), pb.gradient(loss, x + k)[0], rtol=1e-12, atol=1e-14)


def test_a_flipped_view_into_out_is_numpys_or_refused_under_jit():
    # plain pb.jit refuses a write into y while a view of y other than y[index] (np.flip's) is alive, naming the
    # fix; jit of a gradient computes it as NumPy does
    f, loss, x = _program_writing(_flip_into_out)
    try:
        got = pb.jit(f)(x)
    except pb.JitError as error:
        assert "shares memory" in str(error) and "a new array" in str(error)
    else:
        np.testing.assert_array_equal(got, f(x))
    np.testing.assert_allclose(pb.jit(lambda x: pb.gradient(loss, x)[0])(x), numerical_gradient(loss, x)[0],
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (1, 4), (0,)])
def test_shuffle_of_an_empty_or_one_row_array_draws_as_numpy(shape):
    def f(x, rng):
        y = x * 1.0
        rng.shuffle(y)
        return y, rng.random()

    x = np.ones(shape)
    plain_rng, jit_rng = np.random.default_rng(1), np.random.default_rng(1)
    jitted = pb.jit(f)
    for _ in range(2):
        (want, u), (got, v) = f(x, plain_rng), jitted(x, jit_rng)
        np.testing.assert_array_equal(got, want)
        assert u == v and _state(jit_rng) == _state(plain_rng)


def test_shuffle_of_empty_rows_by_a_generator_made_inside():
    def loss(x):
        y = x * 2.0
        np.random.default_rng(1).shuffle(y)
        return np.sum(y)

    x = np.ones((3, 0))
    for gradient in (pb.gradient, pb.jit(lambda x: pb.gradient(loss, x))):
        (g,) = gradient(loss, x) if gradient is pb.gradient else gradient(x)
        assert g.shape == (3, 0)
