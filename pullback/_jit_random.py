"""Random draws a `pb.jit` trace cannot replay: generators reached outside the arguments, or seeded afresh.

A generator passed as an argument is an input: the trace records its draws, and a replay
draws afresh. One reached another way is invisible to the trace, so every replay would repeat
the traced draws: "random" numbers that never change. `snapshot` records, before the trace, the
state of every generator (`np.random.Generator`, its bit generator, a legacy `RandomState`, a
`random.Random`) the function reaches other than its inputs, and of NumPy's global generator
(`np.random.rand`, `np.random.normal`, ...) and Python's (`random.random()`); `advanced` names
those the trace moved, so that `pb.jit` refuses the trace and names the fix.

What the function reaches is walked breadth first from the function and its arguments (closures,
globals it reads, default argument values, the objects, containers, partials, bound methods,
iterators and other objects these hold, the caller's own classes' attributes), then from what the
watch of `_jit_watch` finds by name (a module's attributes, a class attribute read through an
object). The walk looks at `_BUDGET` objects at most; where it stops short, or the watch does, every
generator in the process is snapshotted instead (a scan of the garbage collector's objects, a few
milliseconds), so a generator reached past the bound is refused too.

A generator made inside the function from fresh entropy (`np.random.default_rng()`,
`np.random.PCG64()`, `np.random.SeedSequence()` and what it seeds, `np.random.RandomState()`) would
also give the trace's draws at every replay: `watching_entropy` lists those made while a trace runs
(one that drew is refused). While a trace runs, those entry points of `np.random` also take a seed
given as a traced number (a Python number or NumPy integer argument, an element of an array, a draw:
`np.random.PCG64(seed)`, `default_rng([seed, 7])`) by its value, fixed by a guard, so another seed
traces again; `np.random.default_rng` returns a generator argument as it is, as NumPy does.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> noisy = lambda x: x + rng.normal()
>>> before = snapshot(noisy, inputs=())
>>> _ = noisy(1.0)
>>> advanced(before)
['`rng` (a global that <lambda> reads)']
"""

import collections
import contextlib
import functools
import gc
import itertools
import pathlib
import random
import sys
import threading
import types
import weakref

import numpy as np

from . import _jit_watch
from ._jit_trace import JitError
from ._standins import is_number_stand_in, is_stand_in

GENERATORS = (np.random.Generator, np.random.RandomState, np.random.BitGenerator)
GLOBAL = "NumPy's global generator (np.random.rand, np.random.normal, ...)"
PYTHON = "Python's random module (random.random, random.gauss, ...)"
_BUDGET = 2000  # objects looked at (a large dataset held in a global is not walked whole: all generators are scanned)
_SKIPPED = (types.ModuleType, type, np.generic, str, bytes, bytearray, int, float, complex, bool, type(None),
            types.CodeType, range, slice)
_LIBRARIES = frozenset(("numpy", "pullback", "builtins"))  # whose functions' globals are library state
_DRAWING = GENERATORS + (random.Random,)
_PROXIES = (weakref.ProxyType, weakref.CallableProxyType)
_STAND_INS = ("__pullback_leaf__", "__pullback_value__", "__pullback_traced_value__")  # pb.jit's, not the caller's


def snapshot(fn, inputs, arguments=((), {})):
    """`{where: (generator, state)}` for each generator `fn` reaches other than the `inputs` (the generators
    among its `arguments` that a trace records), NumPy's global one and Python's."""
    found = {GLOBAL: (None, _state_of(None)), PYTHON: (random._inst, random.getstate())}
    skip = {id(random._inst), id(np.random.mtrand._rand)}  # named as GLOBAL and PYTHON
    for generator in inputs:  # and the bit generators of the inputs, which their draws advance
        if getattr(type(generator), "__pullback_leaf__", False):
            raise JitError("pb.jit: a jitted function was called, inside another's trace, with that trace's generator "
                           "argument and no traced array among its arguments, so it would trace on its own what the "
                           "outer trace draws. Call its own code there (inner.__wrapped__(..., rng)), or pass it an "
                           "array argument of the outer function too (it is then traced as part of the outer one).")
        skip.update((id(generator), id(_bits_of(generator))))
    args, kwargs = arguments
    watch = _jit_watch.collect(fn, (), [*args, *kwargs.values()])
    walk = _Walk(skip, watch.names)
    walk.add(fn, "the function", "the function itself")
    for k, value in enumerate(args):
        walk.add(value, f"args[{k}]", "an argument")
    for key, value in kwargs.items():
        walk.add(value, f"kwargs[{key!r}]", "an argument")
    walk.run()
    for value, where in watch.reached():  # by name: a module's attributes, a class attribute
        walk.add(value, "", where)
    walk.run()
    if walk.stopped or not watch.complete:
        walk.scan()
    for where, generator in walk.found:
        while where in found:
            where += " (another)"
        found[where] = (generator, _state_of(generator))
    return found


class _Walk:
    """What a function reaches, breadth first: `found` lists `(where, generator)`; `stopped` says the budget ran out."""

    def __init__(self, skip, names):
        self.skip, self.names = skip, names
        self.seen, self.found, self.stopped = set(), [], False
        self.queue = collections.deque()
        self.budget = _BUDGET

    def add(self, value, path, origin):
        kind = type(value)  # not value.__class__, which may raise
        if issubclass(kind, types.ModuleType):
            follow = _top(value.__name__) not in _LIBRARIES and _top(value.__name__) not in sys.stdlib_module_names
        elif issubclass(kind, type):
            follow = _own(value.__module__)
        elif issubclass(kind, np.ndarray):
            follow = value.dtype == object
        else:
            follow = not issubclass(kind, _SKIPPED)
        if follow:
            self.queue.append((value, path, origin))

    def run(self):
        while self.queue:
            value, path, origin = self.queue.popleft()
            if id(value) in self.seen:
                continue
            if self.budget <= 0:
                self.stopped = True
                return
            self.seen.add(id(value))
            self.budget -= 1
            try:
                self.look_into(value, path, origin)
            except Exception:  # an object that does not answer as objects do (a raising __getattribute__)
                pass

    def look_into(self, value, path, origin):
        add, kind = self.add, type(value)
        if _draws(kind) or kind in _PROXIES and _draws(value.__class__):
            if id(value) not in self.skip and id(_bits_of(value)) not in self.skip:
                self.found.append((_where(path, origin), value))
                self.seen.add(id(_bits_of(value)))  # drawn with it: named once
            return
        if any(hasattr(kind, mark) for mark in _STAND_INS):  # a stand-in of an enclosing trace
            return
        if kind is types.FunctionType:
            self.function(value)
        elif kind in (types.MethodType, types.BuiltinMethodType):  # rng.normal, pyr.random: the object
            add(value.__self__, path, origin)
            add(getattr(value, "__func__", None), path, origin)
        elif kind is functools.partial:
            for part in (value.func, *value.args, *value.keywords.values()):
                add(part, path, origin)
        elif kind in (list, tuple, set, frozenset, collections.deque):
            for k, item in enumerate(value):
                add(item, f"{path}[{k}]", origin)
        elif isinstance(value, dict):
            for key, item in list(value.items()):
                add(item, f"{path}[{key!r}]", origin)
        elif isinstance(value, np.ndarray):  # of objects
            for k, item in enumerate(value.flat):
                add(item, f"{path}[{k}]", origin)
        elif isinstance(value, types.ModuleType):  # an installed package's or the caller's: what the code names
            space = vars(value)
            for name in sorted(self.names & space.keys()):
                add(space[name], f"{value.__name__}.{name}", "")
        elif isinstance(value, type):  # one of the caller's classes: its attributes and methods
            for base in value.__mro__:
                if _own(base.__module__):
                    for name, item in list(vars(base).items()):
                        if not name.startswith("__") or isinstance(item, types.FunctionType):
                            add(item, f"{base.__qualname__}.{name}", "a class attribute")
        elif kind in (classmethod, staticmethod):
            add(value.__func__, path, origin)
        elif kind is property:
            add(value.fget, path, origin)
        elif kind is weakref.ReferenceType:
            add(value(), path, origin)
        elif kind in _PROXIES:
            add(value.__dict__, path, origin)
        else:
            self.object(value, path, origin)

    def function(self, f):
        name = f.__qualname__
        code = f.__code__
        for var, cell in zip(code.co_freevars, f.__closure__ or ()):
            try:
                self.add(cell.cell_contents, var, f"in the closure of {name}")
            except ValueError:  # a cell not yet filled
                pass
        names = code.co_varnames[:code.co_argcount]
        for var, default in zip(names[len(names) - len(f.__defaults__ or ()):], f.__defaults__ or ()):
            self.add(default, var, f"a default argument of {name}")
        for var, default in (f.__kwdefaults__ or {}).items():
            self.add(default, var, f"a default argument of {name}")
        if (f.__globals__.get("__name__") or "").partition(".")[0] not in _LIBRARIES:
            for var in _global_names(code):
                if var in f.__globals__:
                    self.add(f.__globals__[var], var, f"a global that {name} reads")

    def object(self, value, path, origin):
        """An object's attributes and slots, what its class holds, and what a C object holds (an iterator)."""
        kind = type(value)
        try:  # without running a __getattr__ of its class
            fields = object.__getattribute__(value, "__dict__")
        except (AttributeError, TypeError):
            fields = None
        if isinstance(fields, dict):
            for name, item in list(fields.items()):
                self.add(item, f"{path}.{name}", origin)
        slots = [name for base in kind.__mro__ for name, attribute in vars(base).items()
                 if isinstance(attribute, types.MemberDescriptorType) and name != "__weakref__"]
        for name in slots:
            try:
                self.add(getattr(value, name), f"{path}.{name}", origin)
            except AttributeError:  # a slot not set
                pass
        if fields is None and not slots:  # a C object: what it holds for the garbage collector
            for item in gc.get_referents(value):
                self.add(item, path, origin)
        self.add(kind, path, origin)
        call = getattr(kind, "__call__", None)
        if isinstance(call, types.FunctionType):  # a callable object: what its __call__ reads
            self.add(call, path, origin)

    def scan(self):
        """Every generator in the process not found yet, but the inputs and those drawn with them."""
        everything = gc.get_objects()
        kinds = {kind for kind in set(map(type, everything)) if _draws(kind)}
        generators = list(itertools.compress(everything, map(kinds.__contains__, map(type, everything))))
        del everything
        drawn_with = {id(_bits_of(g)) for g in generators if _bits_of(g) is not g}
        for generator in generators:
            if id(generator) in self.skip or id(_bits_of(generator)) in self.skip or id(generator) in self.seen \
                    or id(generator) in drawn_with:
                continue
            self.found.append((f"a {type(generator).__name__} the function reaches past the {_BUDGET} objects pb.jit "
                               "looks through (found by a scan of every generator)", generator))


def _draws(kind):
    """Whether objects of class `kind` are generators with a state (not `random.SystemRandom`, which has none)."""
    return issubclass(kind, _DRAWING) and not issubclass(kind, random.SystemRandom)


def _where(path, origin):
    return f"`{path}` ({origin})" if path and origin else f"`{path}`" if path else origin


def _top(module_name):
    return (module_name or "builtins").partition(".")[0]


@functools.lru_cache(maxsize=1024)
def _own(module_name):
    """Whether the module named `module_name` is the caller's own (not NumPy's, pullback's, the standard
    library's nor an installed package's; an interactive session's `__main__` is)."""
    top = _top(module_name)
    if top in _LIBRARIES or top in sys.stdlib_module_names:
        return False
    file = getattr(sys.modules.get(module_name), "__file__", None)
    return not file or not any(part in ("site-packages", "dist-packages") for part in pathlib.PurePath(file).parts)


def _bits_of(generator):
    """The bit generator a generator draws with (itself for a bit generator or a `random.Random`)."""
    if issubclass(type(generator), np.random.Generator):
        return generator.bit_generator
    if issubclass(type(generator), np.random.RandomState):
        return generator._bit_generator
    return generator


_tracing = threading.local()  # .fresh: the generators made from fresh entropy by the trace running here
_installed = [0, {}]  # traces running in any thread; the entry points of np.random replaced while they run
_install_lock = threading.Lock()


@contextlib.contextmanager
def watching_entropy():
    """While a trace runs in this thread, `np.random`'s seeding entry points take a seed given as a traced
    number by its value, and the generators they make from fresh entropy are listed, with their states, in
    the list this yields: one that drew during the trace is what `drawn` names."""
    with _install_lock:
        if _installed[0] == 0:
            _installed[1] = {name: getattr(np.random, name) for name in _SEEDED}
            np.random.default_rng = _guarded_default_rng
            for name in _SEEDED[1:]:
                setattr(np.random, name, _Seeded(_installed[1][name]))
        _installed[0] += 1
    outer = getattr(_tracing, "fresh", None), getattr(_tracing, "caller", None), getattr(_tracing, "entropy", None)
    _tracing.fresh = fresh = []
    _tracing.entropy = set()  # the entropy of the seed sequences made from fresh entropy
    _tracing.caller = sys._getframe(2)  # the frame of the `with` (1: contextmanager's __enter__)
    try:
        yield fresh
    finally:
        _tracing.fresh, _tracing.caller, _tracing.entropy = outer
        with _install_lock:
            _installed[0] -= 1
            if _installed[0] == 0:
                for name, original in _installed[1].items():
                    setattr(np.random, name, original)


def drawn(fresh):
    """Whether a generator of `watching_entropy`'s list has drawn since it was made."""
    return any(not _same(_state_of(generator), state) for generator, state in fresh)


# np.random's entry points that take a seed: default_rng, then the classes (replaced by a `_Seeded`)
_SEEDED = ("default_rng", "SeedSequence", "PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64", "RandomState")
_SeedSequence = np.random.bit_generator.SeedSequence


def _guarded_default_rng(seed=None):
    if getattr(type(seed), "__pullback_leaf__", False):  # a generator argument: NumPy returns it as it is
        return seed
    return _made(_installed[1]["default_rng"], (seed,), {})


class _Seeded:
    """A class of `np.random` that takes a seed, while traces run: called, it makes the object from the values
    of traced numbers among the arguments (see `_made`); to `isinstance`, `==`, subclassing and its
    attributes, it is the class (not to `is`)."""

    __slots__ = ("cls",)

    def __init__(self, cls):
        self.cls = cls

    def __eq__(self, other):
        return other is self.cls or other is self

    def __hash__(self):
        return hash(self.cls)

    def __call__(self, *args, **kwargs):
        return _made(self.cls, args, kwargs)

    def __instancecheck__(self, value):
        return isinstance(value, self.cls)

    def __subclasscheck__(self, cls):
        return issubclass(cls, self.cls)

    def __mro_entries__(self, bases):
        return (self.cls,)

    def __or__(self, other):  # np.random.RandomState | np.random.Generator
        return self.cls | other

    def __ror__(self, other):
        return other | self.cls

    def __getattr__(self, name):
        if name == "cls":  # not set yet
            raise AttributeError(name)
        return getattr(self.cls, name)

    def __repr__(self):
        return repr(self.cls)


def _made(make, args, kwargs):
    """`make(*args, **kwargs)` with each traced number among the arguments replaced by its value, fixed by a
    guard (another seed traces again). In a thread tracing, what is made from fresh entropy (no seed, or a
    seed sequence made without one) is listed, unless a module being imported makes it."""
    args, kwargs = _seed_value(args), _seed_value(kwargs)
    made = make(*args, **kwargs)
    fresh = getattr(_tracing, "fresh", None)
    if fresh is not None and not _importing(_tracing.caller):
        seeds = [v for v in (*args, *(kwargs.get(k) for k in ("seed", "entropy", "key"))) if v is not None]
        if isinstance(made, _SeedSequence):
            if not seeds:
                _tracing.entropy.add(made.entropy)
        elif not seeds or isinstance(seeds[0], _SeedSequence) and type(seeds[0].entropy) is int \
                and seeds[0].entropy in _tracing.entropy:
            fresh.append((made, _state_of(made)))
    return made


def _seed_value(x):
    """`x` with each traced number (a Python number, an array or a NumPy scalar) replaced by its value,
    fixed by a guard; NumPy reads the value of an integer array as it reads a list of its elements."""
    if is_number_stand_in(x):
        return x.__pullback_value__()
    if is_stand_in(x):
        return x.tolist()
    if type(x) in (tuple, list):
        return type(x)(_seed_value(v) for v in x)
    if type(x) is dict:
        return {k: _seed_value(v) for k, v in x.items()}
    return x


_IMPORT_FRAMES = frozenset(("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>"))


def _importing(caller):
    """Whether a module is being imported in this thread since the trace began at frame `caller` (a module
    imported first inside the function, as `scipy.stats` is when used, may make and draw from a generator
    of its own: that is not the function's)."""
    frame = sys._getframe(1)
    while frame is not None and frame is not caller:
        if frame.f_code.co_filename in _IMPORT_FRAMES:
            return True
        frame = frame.f_back
    return False


def advanced(states):
    """Where the generators of a `snapshot` are that have drawn since (in the snapshot's order)."""
    return [where for where, (generator, state) in states.items() if not _same(_state_of(generator), state)]


def _global_names(code):
    """The global names `code` and the functions defined in it may read."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _global_names(const)
    return names


def _state_of(generator):
    if generator is None:
        return np.random.get_state(legacy=False)
    if isinstance(generator, np.random.Generator):
        return generator.bit_generator.state
    if isinstance(generator, np.random.RandomState):
        return generator.get_state(legacy=False)
    if isinstance(generator, random.Random):  # Python's own (random.random draws from random._inst)
        return generator.getstate()
    return generator.state


def _same(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b
