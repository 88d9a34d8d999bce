"""Random draws a `pb.jit` trace cannot replay: generators reached outside the arguments.

A generator passed as an argument is an input: the trace records its draws, and a replay
draws afresh. One read from a closure or a global is invisible to the trace, so every
replay would repeat the traced draws: "random" numbers that never change. `snapshot`
records the state of every generator the function reaches that way (in the closures and
globals of the function and of the functions and objects those hold, a few levels deep),
and of NumPy's global generator (`np.random.rand`, `np.random.normal`, ...) and Python's
(`random.random()`, a `random.Random` held in a global); `advanced`
names those the trace moved, so that `pb.jit` refuses the trace and names the fix. A legacy
`np.random.RandomState` passed as an argument is refused the same way when drawn from (only a
`np.random.Generator` argument is recorded). A generator made inside the function from fresh
entropy (`np.random.default_rng()` without a seed) would also give the trace's draws at every
replay: `watching_entropy` lists those made while a trace runs (one that drew is refused), and
lets `np.random.default_rng(seed)` take a Python-number seed passed in (its value fixed by a
guard, so another seed traces again) or a generator argument (returned as it is, as NumPy
does). Only `np.random.default_rng` is watched: a bit generator made without a seed
(`np.random.PCG64()`) is not seen (NumPy's legacy `RandomState(seed)` makes one too, then seeds it).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> noisy = lambda x: x + rng.normal()
>>> before = snapshot(noisy, inputs=())
>>> _ = noisy(1.0)
>>> advanced(before)
['`rng` (a global that <lambda> reads)']
"""

import contextlib
import random
import sys
import threading
import types

import numpy as np

GENERATORS = (np.random.Generator, np.random.RandomState, np.random.BitGenerator)
GLOBAL = "NumPy's global generator (np.random.rand, np.random.normal, ...)"
PYTHON = "Python's random module (random.random, random.gauss, ...)"
_DEPTH = 4  # functions and objects followed from the jitted function
_BUDGET = 2000  # values looked at in all (a large dataset held in a global is not walked whole)
_SKIPPED = (types.ModuleType, type, np.ndarray, np.generic, str, bytes, int, float, complex, bool, type(None))


def snapshot(fn, inputs, arguments=((), {})):
    """`{where: (generator, state)}` for each generator `fn` reaches other than the `inputs` (generators
    among its `arguments` that a trace records) and NumPy's global one: in its closures and globals,
    and the legacy `RandomState` objects among its arguments."""
    found = {GLOBAL: (None, _state_of(None)), PYTHON: (random._inst, random.getstate())}
    skip = {id(g) for g in inputs}
    seen = set()
    budget = [_BUDGET]

    def look(value, path, origin, depth):
        try:
            look_into(value, path, origin, depth)
        except Exception:  # an object that does not answer as objects do (a raising __getattribute__, a proxy)
            pass

    def look_into(value, path, origin, depth):
        if isinstance(value, _SKIPPED) or id(value) in seen or budget[0] <= 0 or depth > _DEPTH:
            return
        seen.add(id(value))
        budget[0] -= 1
        if isinstance(value, GENERATORS + (random.Random,)):
            if id(value) not in skip:
                found[f"`{path}` ({origin})"] = (value, _state_of(value))
        elif isinstance(value, types.FunctionType):
            look_into_function(value, depth + 1)
        elif isinstance(value, types.MethodType):
            look(value.__func__, path, origin, depth)
            look(value.__self__, path, origin, depth)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for k, item in enumerate(value):
                look(item, f"{path}[{k}]", origin, depth + 1)
        elif isinstance(value, dict):
            for key, item in value.items():
                look(item, f"{path}[{key!r}]", origin, depth + 1)
        else:
            try:  # without running a __getattr__ of its class
                fields = dict(object.__getattribute__(value, "__dict__"))
            except (AttributeError, TypeError):  # no __dict__ (slots, C objects): nothing to follow
                fields = {}
            for name, item in fields.items():
                look(item, f"{path}.{name}", origin, depth + 1)
            call = getattr(type(value), "__call__", None)
            if isinstance(call, types.FunctionType):  # a callable object: what its __call__ reads
                look(call, path, origin, depth)

    def look_into_function(f, depth):
        name = f.__qualname__
        for var, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
            try:
                contents = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
            look(contents, var, f"in the closure of {name}", depth)
        for var in _global_names(f.__code__):
            if var in f.__globals__:
                look(f.__globals__[var], var, f"a global that {name} reads", depth)

    args, kwargs = arguments
    for k, value in enumerate(args):
        look(value, f"args[{k}]", "an argument", 1)
    for key, value in kwargs.items():
        look(value, f"kwargs[{key!r}]", "an argument", 1)
    look(fn, "the function", "the function itself", 0)
    return found


_tracing = threading.local()  # .fresh: the generators made from fresh entropy by the trace running here
_installed = [0, None]  # traces running in any thread; the functions replaced while they run
_install_lock = threading.Lock()


@contextlib.contextmanager
def watching_entropy():
    """While a trace runs in this thread, `np.random.default_rng(n)` of a traced Python number `n` reads its
    value, and the generators `np.random.default_rng()` makes from fresh entropy are listed, with their
    states, in the list this yields: one that drew during the trace is what `drawn` names."""
    with _install_lock:
        if _installed[0] == 0:
            _installed[1] = np.random.default_rng
            np.random.default_rng = _guarded_default_rng
        _installed[0] += 1
    outer = getattr(_tracing, "fresh", None), getattr(_tracing, "caller", None)
    _tracing.fresh = fresh = []
    _tracing.caller = sys._getframe(2)  # the frame of the `with` (1: contextmanager's __enter__)
    try:
        yield fresh
    finally:
        _tracing.fresh, _tracing.caller = outer
        with _install_lock:
            _installed[0] -= 1
            if _installed[0] == 0:
                np.random.default_rng = _installed[1]


def drawn(fresh):
    """Whether a generator of `watching_entropy`'s list has drawn since it was made."""
    return any(not _same(_state_of(generator), state) for generator, state in fresh)


def _guarded_default_rng(seed=None):
    fresh = getattr(_tracing, "fresh", None)
    if fresh is not None:
        if seed is None and not _importing(_tracing.caller):
            # fresh entropy: refused if it draws (an unscrambled Sobol sequence makes one, unused)
            generator = _installed[1]()
            fresh.append((generator, _state_of(generator)))
            return generator
        if hasattr(type(seed), "__pullback_value__"):  # a traced Python number
            seed = int(seed)  # fixed by a guard: another seed traces again
        elif getattr(type(seed), "__pullback_leaf__", False):  # a generator argument: NumPy returns it as it is
            return seed
    return _installed[1](seed)


_IMPORT_FRAMES = frozenset(("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>"))


def _importing(caller):
    """Whether a module is being imported in this thread since the trace began at frame `caller` (a module
    imported first inside the function, as `scipy.stats` is when used, may make and draw from a generator
    of its own: that is not the function's)."""
    frame = sys._getframe(2)
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
