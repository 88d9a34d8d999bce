"""pb.jit and random generators: draws from generators the function reaches outside its arguments
(default arguments, modules, class attributes, partials, slots, deep or past many objects) are refused
naming them; a generator argument answers `isinstance` as a Generator (so library code that checks takes
it); seeds given as traced numbers reach NumPy's seeding as their values; Python-number stand-ins have
the bitwise operators. Each working case is compared with plain NumPy on an identically seeded
generator: the values of successive calls, and the generator's state afterwards."""
import functools
import itertools
import random
import sys
import uuid

import numpy as np
import pytest

import pullback as pb


def _state(generator):
    return generator.bit_generator.state if isinstance(generator, np.random.Generator) else generator.getstate()


def _assert_equal(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_equal(g, w)
        return
    assert type(got) is type(want) or (isinstance(got, np.ndarray) and isinstance(want, np.ndarray))
    np.testing.assert_array_equal(got, want)


def _as_numpy(make, args_of, calls=3):
    """Call `make()`'s function plainly and under pb.jit, each on its own generators (`make` seeds them alike):
    the results of each call and the generators' states afterwards are NumPy's. Returns the jitted function."""
    f, generators = make()
    plain = [f(*args_of(i, generators)) for i in range(calls)]
    f, twins = make()
    jitted = pb.jit(f)
    got = [jitted(*args_of(i, twins)) for i in range(calls)]
    for g, w in zip(got, plain):
        _assert_equal(g, w)
    for g, w in zip(twins, generators):
        assert _state(g) == _state(w)
    assert not all(np.array_equal(np.asarray(plain[0][0] if isinstance(plain[0], tuple) else plain[0]),
                                  np.asarray(p[0] if isinstance(p, tuple) else p)) for p in plain[1:]), \
        "the calls should draw different numbers"
    return jitted


def _module(tmp_path, monkeypatch, source):
    name = f"round_c_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return __import__(name)


_HELPERS = """import numpy as np, random
rng = np.random.default_rng(0)
pyr = random.Random(0)
def add_noise(x):
    return x + rng.standard_normal(x.shape)
def py_noise(x):
    return x * pyr.random()
"""


# --- 1: draws from generators reached outside the arguments are refused, naming them --------------
def _refused(fn, named, *args):
    jitted = pb.jit(fn)
    with pytest.raises(pb.JitError, match=named + ".*Pass a np.random.Generator as an argument"):
        for _ in range(3):
            jitted(np.zeros(2), *args)


def test_a_generator_as_a_default_argument_value_is_refused():
    def f(x, rng=np.random.default_rng(0)):
        return x + rng.standard_normal(2)

    _refused(f, r"`rng` \(a default argument of .*f")


def test_a_generator_as_a_keyword_only_default_is_refused():
    def f(x, *, rng=np.random.default_rng(0)):
        return x + rng.standard_normal(2)

    _refused(f, r"`rng` \(a default argument of .*f")


def test_a_generator_of_the_callers_module_drawn_through_its_function_is_refused(tmp_path, monkeypatch):
    helpers = _module(tmp_path, monkeypatch, _HELPERS)
    _refused(lambda x: helpers.add_noise(x), rf"`{helpers.__name__}\.rng`")
    _refused(lambda x: helpers.py_noise(x), rf"`{helpers.__name__}\.pyr`")
    from_module = helpers.add_noise
    _refused(lambda x: from_module(x), r"`rng` \(a global that add_noise reads\)")


def test_a_generator_read_as_an_attribute_of_the_callers_module_is_refused(tmp_path, monkeypatch):
    cfg = _module(tmp_path, monkeypatch, "import numpy as np\nrng = np.random.default_rng(0)\n")
    _refused(lambda x: x + cfg.rng.standard_normal(2), rf"{cfg.__name__}\.rng")


class _Noise:
    rng = np.random.default_rng(0)

    def __call__(self, x):
        return x + self.rng.standard_normal(2)


def test_a_generator_held_as_a_class_attribute_is_refused():
    _refused(lambda x, n: n(x), r"_Noise\.rng", _Noise())

    class P:
        R = random.Random(0)

    _refused(lambda x: x * P.R.random(), r"P\.R")


def test_a_generator_inside_a_partial_a_slots_object_or_an_iterator_is_refused():
    draw = functools.partial(np.random.default_rng(0).normal, 0.0, 1.0)
    _refused(lambda x: x + draw(2), r"`draw` \(in the closure of")

    class Slotted:
        __slots__ = ("rng",)

    s = Slotted()
    s.rng = np.random.default_rng(0)
    _refused(lambda x: x + s.rng.standard_normal(2), r"`s\.rng` \(in the closure of")

    it = itertools.repeat(np.random.default_rng(0))
    _refused(lambda x: x + next(it).standard_normal(2), r"`it` \(in the closure of")

    held = np.empty(1, dtype=object)
    held[0] = np.random.default_rng(0)
    _refused(lambda x: x + held[0].standard_normal(2), r"`held\[0\]` \(in the closure of")


def test_a_generator_deep_inside_containers_is_refused():
    deep = {"a": {"b": {"c": {"d": {"e": [np.random.default_rng(0)]}}}}}
    _refused(lambda x: x + deep["a"]["b"]["c"]["d"]["e"][0].standard_normal(2),
             r"deep\['a'\]\['b'\]\['c'\]\['d'\]\['e'\]\[0\]")


class _Box:
    pass


def test_a_generator_past_the_objects_the_walk_looks_through_is_refused():
    boxes = [_Box() for _ in range(3000)]
    boxes[-1].rng = np.random.default_rng(0)
    _refused(lambda x: x + boxes[-1].rng.standard_normal(2), r"Generator")


def test_many_objects_in_a_closure_do_not_refuse_draws_from_the_generator_argument():
    boxes = [_Box() for _ in range(3000)]
    boxes[-1].rng = np.random.default_rng(1)  # reached, past the walk's bound, and not drawn from
    _as_numpy(lambda: ((lambda x, r: x + r.standard_normal(2) * len(boxes)), [np.random.default_rng(4)]),
              lambda i, gens: (np.zeros(2), gens[0]))


def test_a_generator_the_function_reaches_but_does_not_draw_from_is_no_error(tmp_path, monkeypatch):
    helpers = _module(tmp_path, monkeypatch, _HELPERS)

    def f(x, r, unused=np.random.default_rng(1)):
        return x + r.standard_normal(2) if helpers.rng is not None and unused is not None else x

    _as_numpy(lambda: (f, [np.random.default_rng(4)]), lambda i, gens: (np.zeros(2), gens[0]))


# --- 2: a generator argument is a Generator to isinstance ----------------------------------------
def test_isinstance_of_a_generator_argument_is_true_under_jit():
    def f(x, r):
        return x + (r.random(3) if isinstance(r, np.random.Generator) else 0.0)

    _as_numpy(lambda: (f, [np.random.default_rng(0)]), lambda i, gens: (np.zeros(3), gens[0]))


def test_the_type_of_a_generator_argument_is_still_the_stand_ins_and_a_copy_is_refused():
    import pickle

    seen = []

    def f(x, r):
        seen.append((type(r) is np.random.Generator, r.__class__ is np.random.Generator))
        return x + r.random(2)

    pb.jit(f)(np.zeros(2), np.random.default_rng(0))
    assert seen == [(False, True)]
    with pytest.raises(pb.JitError, match="copy of a generator argument"):
        pb.jit(lambda x, r: x + pickle.loads(pickle.dumps(r)).random(2))(np.zeros(2), np.random.default_rng(0))


def test_a_jitted_function_called_inside_another_with_the_generator_argument():
    inner = pb.jit(lambda x, r: x + r.normal(size=2))
    _as_numpy(lambda: ((lambda x, r: inner(x * 2.0, r)), [np.random.default_rng(0)]), lambda i, gens: (np.zeros(2), gens[0]))
    alone = pb.jit(lambda r: r.normal(size=2))  # given only the generator: traced inline too
    _as_numpy(lambda: ((lambda x, r: x + alone(r)), [np.random.default_rng(0)]), lambda i, gens: (np.zeros(2), gens[0]))


# --- 3: seeds given as traced numbers --------------------------------------------------------------
@pytest.mark.parametrize("seeded", [
    lambda s: np.random.Generator(np.random.PCG64(s)),
    lambda s: np.random.Generator(np.random.PCG64DXSM(s)),
    lambda s: np.random.Generator(np.random.MT19937(s)),
    lambda s: np.random.Generator(np.random.SFC64(s)),
    lambda s: np.random.Generator(np.random.Philox(key=s)),
    lambda s: np.random.default_rng(np.random.SeedSequence(s)),
    lambda s: np.random.default_rng(np.random.SeedSequence(s).spawn(2)[1]),
    lambda s: np.random.default_rng([s, 7]),
    lambda s: np.random.default_rng(s),
], ids=["PCG64", "PCG64DXSM", "MT19937", "SFC64", "Philox", "SeedSequence", "spawn", "list", "default_rng"])
@pytest.mark.parametrize("kind", [int, np.int64])
def test_a_generator_seeded_by_a_number_argument_draws_as_numpy(seeded, kind):
    jitted = _as_numpy(lambda: ((lambda x, s: x + seeded(s).standard_normal(2)), []),
                       lambda i, gens: (np.zeros(2), kind(10 + i % 2)), calls=4)
    assert jitted.cache_info().replays >= 1  # a seed met again replays


def test_a_generator_seeded_by_an_element_of_an_integer_array_argument():
    _as_numpy(lambda: ((lambda x, seeds: x + np.random.default_rng(seeds[1]).standard_normal(2)), []),
              lambda i, gens: (np.zeros(2), np.array([3, 10 + i])))


def test_a_generator_seeded_by_a_draw_from_a_generator_argument():
    def f(x, rng):
        return x + np.random.default_rng(rng.integers(2 ** 32)).standard_normal(2)

    _as_numpy(lambda: (f, [np.random.default_rng(0)]), lambda i, gens: (np.zeros(2), gens[0]), calls=4)


def test_a_float_seed_is_refused_as_numpy_refuses_it():
    f = lambda x, s: x + np.random.default_rng(s).standard_normal(2)
    with pytest.raises(TypeError, match="SeedSequence expects int"):
        f(np.zeros(2), 1.5)
    with pytest.raises(TypeError, match="SeedSequence expects int"):
        pb.jit(f)(np.zeros(2), 1.5)


@pytest.mark.parametrize("made", [
    lambda: np.random.Generator(np.random.PCG64()),
    lambda: np.random.Generator(np.random.SFC64(None)),
    lambda: np.random.default_rng(np.random.SeedSequence()),
    lambda: np.random.Generator(np.random.PCG64(np.random.SeedSequence().spawn(2)[1])),
    lambda: np.random.RandomState(),
], ids=["PCG64()", "SFC64(None)", "SeedSequence()", "spawned", "RandomState()"])
def test_a_generator_made_from_fresh_entropy_and_drawn_from_is_refused(made):
    with pytest.raises(pb.JitError, match="fresh entropy"):
        pb.jit(lambda x: x + made().standard_normal(2))(np.zeros(2))
    unused = pb.jit(lambda x: x * 2.0 if made() is not None else x)  # made, never drawn from: fine
    assert unused(np.ones(2))[0] == 2.0 and unused(np.ones(2))[0] == 2.0


def test_the_seeding_classes_answer_as_numpys_while_a_trace_runs():
    seen = []

    def f(x, s):
        bits = np.random.PCG64(s)

        class Mine(np.random.PCG64):
            pass

        same_class = type(bits) == np.random.PCG64  # noqa: E721 (== answers as the class; `is` does not)
        seen.append((isinstance(bits, np.random.PCG64), issubclass(Mine, np.random.PCG64), same_class,
                     isinstance(bits, np.random.RandomState | np.random.PCG64), np.random.PCG64.__name__,
                     isinstance(np.random.default_rng(s), np.random.Generator)))
        return x + np.random.Generator(bits).random()

    _as_numpy(lambda: (f, []), lambda i, gens: (np.zeros(2), 3 + i))
    assert seen == [(True, True, True, True, "PCG64", True)] * 6  # plain calls, then jitted ones
    assert np.random.PCG64 is np.random._pcg64.PCG64 and np.random.default_rng is np.random._generator.default_rng


# --- 4: library code that checks for a Generator takes the argument --------------------------------
def test_dropout_and_initialisers_given_the_generator_argument_inside_the_function():
    def f(x, r):
        layer = pb.nn.Dense(3, 2, rng=r)
        return pb.nn.Dropout(0.5, rng=r, training=True)(layer(x)) + x[:, :2] @ pb.nn.init.glorot_uniform(r, (2, 2))

    _as_numpy(lambda: (f, [np.random.default_rng(0)]), lambda i, gens: (np.ones((4, 3), np.float32), gens[0]))


def test_scipy_draws_with_the_generator_argument_as_random_state():
    stats = pytest.importorskip("scipy.stats")
    _as_numpy(lambda: ((lambda x, r: x + stats.norm.rvs(size=3, random_state=r)), [np.random.default_rng(0)]),
              lambda i, gens: (np.zeros(3), gens[0]))


@pb.primitive
def _noisy(x, rng):
    return x + rng.standard_normal(x.shape)


@pb.rrule(_noisy)
def _noisy_rule(x, rng):
    return _noisy(x, rng), lambda g: (g, None)


def test_a_primitive_drawing_from_the_generator_argument_under_a_jitted_gradient():
    def f(x, r):
        return pb.withgradient(lambda x: np.sum(_noisy(x, r) ** 2), x)

    _as_numpy(lambda: (f, [np.random.default_rng(0)]), lambda i, gens: (np.ones(3), gens[0]))


def test_a_primitive_drawing_from_the_generator_argument_whose_value_the_gradient_does_not_use():
    def f(x, r):
        return pb.gradient(lambda x: np.sum(_noisy(x, r)), x)[0] * r.random()

    _as_numpy(lambda: (f, [np.random.default_rng(0)]), lambda i, gens: (np.ones(3), gens[0]))


def test_a_primitive_drawing_from_the_generator_argument_whose_result_is_not_used():
    def f(x, r):
        _noisy(x, r)  # draws, as eagerly, though nothing reads its result
        return x * r.random()

    _as_numpy(lambda: (f, [np.random.default_rng(0)]), lambda i, gens: (np.ones(3), gens[0]))


# --- 5: a slice bound from a draw --------------------------------------------------------------------
def test_a_slice_bound_from_a_draw_is_refused_naming_int_inside_the_function():
    with pytest.raises(pb.JitError, match=r"int\(k\).*inside") as raised:
        pb.jit(lambda x, rng: np.sum(x[:rng.integers(1, 4)]))(np.arange(5.0), np.random.default_rng(0))
    assert "outside the jitted function" not in str(raised.value)
    _as_numpy(lambda: ((lambda x, rng: np.sum(x[:int(rng.integers(1, 4))]) + rng.random()), [np.random.default_rng(27)]),
              lambda i, gens: (np.arange(5.0), gens[0]), calls=6)


# --- 6: bitwise operators of Python-number stand-ins -------------------------------------------------
def test_bitwise_operators_of_number_arguments_are_recorded():
    def f(x, k):
        return x * (k & 3) + (k | 8) + (k ^ 5) + (~k) + (k << 2) + (k >> 1) + (6 & k) + (1 | k) + (3 ^ k) + (1 << k) \
            + (64 >> k)

    jitted = pb.jit(f)
    for k in (5, 6, 7, 5):
        _assert_equal(jitted(np.ones(2), k), f(np.ones(2), k))
    assert jitted.cache_info().traces == 1


def test_bitwise_operators_of_a_comparison_of_number_arguments():
    def f(x, a, b):
        return x * 2.0 if (a > 0) & (b > 0) | (a == b) ^ (b < -5) else x

    jitted = pb.jit(f)
    for a, b in ((1.0, 2.0), (-1.0, 2.0), (-3.0, -3.0), (1.0, -9.0), (1.0, 2.0)):
        _assert_equal(jitted(np.ones(2), a, b), f(np.ones(2), a, b))


def test_isclose_of_a_float_argument_under_jit():
    f = lambda x: x * 2.0 if np.isclose(x, 0.7) else x
    jitted = pb.jit(f)
    for x in (0.7, 0.5, 0.7, 0.2):
        assert jitted(x) == f(x) and type(jitted(x)) is type(f(x))
    assert pb.jit(lambda x: pb.gradient(f, x))(0.7) == pb.gradient(f, 0.7)
