"""Random generators' states as JSON values, as checkpoints store them, and checked field by field.

`state_of` gives the full state of a `np.random.Generator`, a legacy `np.random.RandomState`,
a bare `np.random.BitGenerator` (NumPy's PCG64, PCG64DXSM, MT19937, Philox or SFC64 only), a
`np.random.SeedSequence` or a `random.Random` (a bit generator's with its `seed_seq`, so that
`spawn()` after loading gives the children it would have); `schema` says what each field of such a state
must be, `decoded` checks a stored state against it (type, range, length), and `restored` makes a
new object holding it. Failures go to a `fail(message)` that raises; nothing here knows files.

>>> import numpy as np
>>> from pullback import _rng_states
>>> g = np.random.default_rng(0)
>>> state = _rng_states.state_of(g, print)
>>> new = _rng_states.restored(g, _rng_states.decoded(state, _rng_states.schema(g, print), "state", print))
>>> new is not g and new.random() == g.random()
True
"""

import copy
import math
import random
from typing import Any

import numpy as np

from . import tree

# The kinds of random objects stored, by the name a checkpoint gives them.
KINDS = {"Generator": np.random.Generator, "RandomState": np.random.RandomState, "BitGenerator": np.random.BitGenerator,
         "SeedSequence": np.random.SeedSequence, "Random": random.Random}
RANDOM_TYPES = tuple(KINDS.values())


class _OrNull(dict):
    """A part of a schema whose value may also be null (None)."""


class _Field:
    """A leaf of a schema: `ok(value)` says whether a JSON value fits (`what` says how); `decode` makes it the state's."""

    def __init__(self, what, ok, decode=lambda v: v):
        self.what, self.ok, self.decode = what, ok, decode


def _integer(low, high):
    return _Field(f"an integer in [{low}, {high})", lambda v: type(v) is int and low <= v < high)


def _words(dtype, n):
    """`n` integers of the unsigned `dtype`, as an array."""
    dtype = np.dtype(dtype)
    bound = 2 ** (8 * dtype.itemsize)
    return _Field(f"a list of {n} integers of type {dtype}",
                  lambda v: type(v) is list and len(v) == n and all(type(k) is int and 0 <= k < bound for k in v),
                  lambda v: np.array(v, dtype))


def _exactly(value):
    return _Field(repr(value), lambda v: type(v) is type(value) and v == value)


def _finite(v):
    return type(v) is float and math.isfinite(v)


# The fields of each bit generator's state (`bit_generator.state`).
_COUNTS = {"has_uint32": _integer(0, 2), "uinteger": _integer(0, 2**32)}
_PCG = {"state": {"state": _integer(0, 2**128), "inc": _integer(0, 2**128)}} | _COUNTS
_BIT_STATES: dict[str, dict[str, Any]] = {
    "PCG64": _PCG,
    "PCG64DXSM": _PCG,
    "MT19937": {"state": {"key": _words(np.uint32, 624), "pos": _integer(0, 625)}},
    "Philox": {"state": {"counter": _words(np.uint64, 4), "key": _words(np.uint64, 2)},
               "buffer": _words(np.uint64, 4), "buffer_pos": _integer(0, 5)} | _COUNTS,
    "SFC64": {"state": {"state": _words(np.uint64, 4)}} | _COUNTS,
}
_GAUSS = {"has_gauss": _integer(0, 2), "gauss": _Field("a finite float", _finite)}  # a RandomState's cached deviate
# random.Random's getstate(): version 3, 624 words and the position, the cached normal deviate (or None).
_RANDOM = {"version": _exactly(3), "key": _words(np.uint32, 624), "pos": _integer(0, 625),
           "gauss_next": _Field("a finite float or null", lambda v: v is None or _finite(v))}
# A SeedSequence's arguments, bounded so that a hostile file cannot make its mixing take long.
_SEED_BITS, _SEED_ITEMS = 1024, 1024


def _big(v):
    return type(v) is int and 0 <= v < 2**_SEED_BITS


def _bigs(v):
    return type(v) is list and len(v) <= _SEED_ITEMS and all(_big(k) for k in v)


_SEED_SEQUENCE = {
    "entropy": _Field(f"an integer in [0, 2**{_SEED_BITS}) or a list of at most {_SEED_ITEMS} of those",
                      lambda v: _big(v) or _bigs(v)),
    "spawn_key": _Field(f"a list of at most {_SEED_ITEMS} integers in [0, 2**{_SEED_BITS})", _bigs, tuple),
    "pool_size": _integer(4, 1025),
    "n_children_spawned": _integer(0, 2**32),
}
# A bit generator's `seed_seq`: a SeedSequence's fields, or null where it has none (MT19937's legacy
# seeding, as np.random.RandomState(seed) gives).
_SEEDS = {"seed_seq": _OrNull(_SEED_SEQUENCE)}


def kind_of(g):
    """The name a checkpoint gives the kind of random object `g` ("Generator", ..., "Random")."""
    return next(name for name, cls in KINDS.items() if isinstance(g, cls))


def _class_name(g):
    return f"{type(g).__module__}.{type(g).__qualname__}"


def _bits(g):
    """The bit generator `g` draws with (itself for a bare one); None for a SeedSequence or a random.Random."""
    if isinstance(g, np.random.Generator):
        return g.bit_generator
    if isinstance(g, np.random.RandomState):
        return g._bit_generator
    return g if isinstance(g, np.random.BitGenerator) else None


def state_of(g, fail):
    """`g`'s full state as JSON values (integers, lists, dicts); `fail(reason)` refuses one that has none."""
    if isinstance(g, np.random.SeedSequence):
        if type(g) is not np.random.SeedSequence:
            fail(f"it is a {_class_name(g)}, a subclass of SeedSequence; a checkpoint stores np.random.SeedSequence "
                 "itself only. Use that, or keep it outside the model.")
        e = g.entropy
        return {"entropy": int(e) if isinstance(e, (int, np.integer)) else [int(k) for k in e],
                "spawn_key": [int(k) for k in g.spawn_key], "pool_size": g.pool_size, "n_children_spawned": g.n_children_spawned}
    if isinstance(g, random.Random):
        try:
            version, internal, gauss = g.getstate()
            return {"class": _class_name(g), "version": version, "key": list(internal[:-1]), "pos": internal[-1],
                    "gauss_next": gauss}
        except Exception as error:  # random.SystemRandom: NotImplementedError (it has no state)
            fail(f"it is a {_class_name(g)}, whose getstate() does not give random.Random's state ({type(error).__name__}: "
                 f"{error}); a checkpoint stores a random.Random by that state. Use random.Random(seed), or keep it "
                 "outside the model.")
    state = g.get_state(legacy=False) if isinstance(g, np.random.RandomState) else _bits(g).state
    seeds = _bits(g).seed_seq
    if seeds is not None and type(seeds) is not np.random.SeedSequence:
        fail(f"its bit generator's seed sequence (bit_generator.seed_seq) is a {_class_name(seeds)}, not a "
             "np.random.SeedSequence, the only kind a checkpoint stores; spawning after loading would differ. Seed it "
             "with an integer or a np.random.SeedSequence, or keep it outside the model.")

    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value

    return plain(state) | {"seed_seq": None if seeds is None else state_of(seeds, fail)}


def schema(g, fail):
    """The fields a stored state for (an object like) `g` must have; `fail(reason)` refuses a bit generator not stored."""
    if isinstance(g, np.random.SeedSequence):
        return _SEED_SEQUENCE
    if isinstance(g, random.Random):
        return {"class": _exactly(_class_name(g))} | _RANDOM
    name = _bits(g).state["bit_generator"]
    if name not in _BIT_STATES:
        fail(
            f"it is a {described(kind_of(g), {'bit_generator': name})}; a checkpoint stores NumPy's bit generators "
            f"{', '.join(_BIT_STATES)} only. Use one of them (np.random.Generator(np.random.PCG64(seed))), or keep "
            "the generator outside the model."
        )
    gauss = _GAUSS if isinstance(g, np.random.RandomState) else {}
    return {"bit_generator": _exactly(name)} | _BIT_STATES[name] | gauss | _SEEDS


def decoded(value, schema, where, fail):
    """`value` (JSON) checked field by field against `schema`: a state to give `restored`; `fail(reason)` otherwise."""
    if not isinstance(value, dict) or set(value) != set(schema):
        fail(f"{where} must be {'null or ' if isinstance(schema, _OrNull) else ''}an object with the fields {sorted(schema)}.")
    state = {}
    for key, field in schema.items():
        v, at = value[key], f"{where}.{key}"
        if isinstance(field, dict):
            state[key] = None if v is None and isinstance(field, _OrNull) else decoded(v, field, at, fail)
        elif not field.ok(v):
            fail(f"{at} must be {field.what}.")
        else:
            state[key] = field.decode(v)
    return state


def restored(g, state):
    """A new object of `g`'s kind holding `state` (as `decoded` gives it); `g` is not changed.

    NumPy or the object's class may still refuse the state (TypeError, ValueError, OverflowError).
    """
    if isinstance(g, np.random.SeedSequence):
        return _seed_sequence(state)
    new = _copy(g, {})
    if isinstance(new, random.Random):
        new.setstate((state["version"], tuple(state["key"].tolist()) + (state["pos"],), state["gauss_next"]))
        return new
    state = dict(state)
    seeds = state.pop("seed_seq")
    if isinstance(new, np.random.RandomState):
        new.set_state(state)  # its cached normal deviate too
        state = new._bit_generator.state
    # NumPy's pickling protocol (NumPy >= 2.0) sets a bit generator's state and seed sequence together.
    _bits(new).__setstate__((state, None if seeds is None else _seed_sequence(seeds)))
    return new


def _seed_sequence(state):
    return np.random.SeedSequence(state["entropy"], spawn_key=state["spawn_key"], pool_size=state["pool_size"],
                                  n_children_spawned=state["n_children_spawned"])


def described(kind, state):
    """What a file's and `like`'s generators must agree on, in words: "Generator of PCG64", "random.Random"."""
    if kind == "SeedSequence":
        return kind
    if kind == "Random":
        return str(state.get("class"))
    name = state.get("bit_generator")
    return f"bit generator {name}" if kind == "BitGenerator" else f"{kind} of {name}"


def description(g):
    """`described` for the generator `g`."""
    bits = _bits(g)
    return described(kind_of(g), {"class": _class_name(g), "bit_generator": bits and bits.state["bit_generator"]})


def made_as(kind, state):
    """How to build a generator of `kind` with `state`'s type, for messages."""
    name = state.get("class" if kind == "Random" else "bit_generator")
    if kind == "SeedSequence":
        return "np.random.SeedSequence(seed)"
    if kind == "Random":
        return f"{name}(seed)"
    if not isinstance(name, str) or name not in _BIT_STATES:
        return "the file's type"
    return f"np.random.{name}(seed)" if kind == "BitGenerator" else f"np.random.{kind}(np.random.{name}(seed))"


def check_apart(groups, fail):
    """Refuse a generator of `groups` (`[(generator, [paths])]`) that another one draws with.

    A bit generator or SeedSequence held in a field and also inside a Generator elsewhere in the
    model, or inside two of its generators, would come back as two objects, its state stored
    twice (two Generators of one SeedSequence would then spawn the same children): `fail(message)`.
    """
    inside: dict[int, list] = {}  # a bit generator's or seed sequence's id: [(what, kind, path)] of the generators holding it
    for g, paths in groups:
        bits = _bits(g)
        seeds = getattr(bits, "seed_seq", None)
        for part, what in ((bits, "bit generator"), (seeds, "seed sequence (bit_generator.seed_seq)")):
            if part is not None and part is not g:
                inside.setdefault(id(part), []).append((what, kind_of(g), paths[0]))
    for g, paths in groups:
        if id(g) in inside:
            what, kind, at = inside[id(g)][0]
            fail(
                f"The random generator at {paths[0]} is also the {what} of the {kind} at {at}; a checkpoint stores each "
                "random generator with a state of its own, so they would come back as two objects. Keep only the one at "
                f"{at} in the model (reach the other through it), or give each its own."
            )
    for (what, kind, at), *others in inside.values():
        if others:
            fail(
                f"The {kind} at {at} and the {others[0][1]} at {others[0][2]} share one {what}; a checkpoint stores each "
                "random generator with a state of its own, so they would come back apart. Give each its own, or keep "
                "only one of them in the model."
            )


def copies(model):
    """`{id(g): copy of g}` for every random generator in `model`, copied together: ties between them are kept."""
    found = {id(g): g for g in tree.leaves(model) if isinstance(g, RANDOM_TYPES)}
    memo: dict[int, Any] = {}
    return {i: _copy(g, memo) for i, g in found.items()}


def _copy(g, memo):
    """A deep copy of `g`; a random.Random's made without `__init__` and with its attributes, which
    `copy.deepcopy` would leave out (random.Random's `__reduce__` calls the class with no arguments)."""
    if not isinstance(g, random.Random):
        return copy.deepcopy(g, memo)
    new = type(g).__new__(type(g))
    new.__dict__.update(copy.deepcopy(vars(g), memo))
    new.setstate(g.getstate())
    return new
