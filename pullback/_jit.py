"""`pb.jit`: trace a function once per input signature, then replay it as straight-line NumPy.

The first call with a new signature runs `fn` on stand-in arrays that record every NumPy
call (see `pullback._jit_trace`), including those pullback's own rules make while
differentiating, so `pb.jit(lambda m, x: pb.withgradient(loss, m, x))` replays the forward
and the backward pass alike; its results are those the trace computed. Later calls with the
same signature run the recording compiled (at the first of them) to one Python function of
plain NumPy calls, with buffers reused in place where the plan allows (see
`pullback._jit_replay`); a replay run often on small arrays is fused into compiled kernels
in the background when numba is installed (see `pullback._jit_fuse`).

The signature is the structure of the arguments (the containers' types, field names, the types
of leaves), the shape, dtype and type of each array, the places where one object recurs, and the
value of every leaf that is not an array, a Python number or a random generator (strings,
flags: constants of the trace).
Python numbers are inputs, replayed with Python's own arithmetic. Python values computed
during the trace (`if loss > 0:`, `float(x)`, a number used as an axis) become guards: a
replay whose value differs traces again. Rules for the jitted function, as in JAX:

- it is pure: it returns its results and does not change its arguments' objects or globals; a
  write into an argument array is followed (the call writes the final value into the caller's array,
  also when the function raises after writing, and a returned view of it is that view of the caller's);
- what it reads from closures or globals (directly or through the functions it calls) is a
  constant of the trace: a replay first checks that those names still hold the same values and
  that the small arrays among them (and among the trace's constant arrays) hold the same bytes,
  and traces again if not (see `_jit_watch`); a write into a larger one is not detected;
- randomness comes from a generator passed in (its draws are recorded) or from arrays passed
  in; a generator it reaches through a closure or a global is refused (see `_jit_random`);
- it keeps array computations in NumPy calls: `np.asarray` of a traced array is refused.

A call with another library's array among its arguments (Dask's, CuPy's) runs `fn` as it is,
untraced: that library builds or runs its own program, and NumPy arguments meet its arrays
as they do without `pb.jit`. So does a call that reads a value an enclosing `pb.gradient` or
`pb.jvp` is differentiating, as an argument or through its globals and closures: that level
differentiates through the call.

>>> import numpy as np, pullback as pb
>>> f = pb.jit(lambda w, x: pb.withgradient(lambda w: np.sum(np.tanh(x @ w)), w))
>>> w, x = np.array([0.5, -0.5]), np.array([[1.0, 2.0], [3.0, 4.0]])
>>> val, (g,) = f(w, x)                  # traced
>>> val2, (g2,) = f(w, x)                # replayed
>>> bool(np.allclose(g, g2)) and bool(np.isclose(val, val2))
True
>>> f.cache_info().traces
1
"""

import collections
import dis
import functools
import sys
import threading
import types
import warnings

import numpy as np

from . import _jit_random, _jit_watch, tree
from ._arrays import is_foreign_array, memory_key, sharing_memory
from ._jit_replay import Deferred, Retrace, made_read_only, producers
from ._jit_trace import JitError, Number, RandomSource, Ref, Symbol, Trace, refusals_watched
from ._standins import is_traced

__all__ = ["jit", "JitError"]

_TRACE_VALUES = (Symbol, Number, RandomSource)  # the stand-ins of a trace
# traces kept per signature, one per outcome of its guards (a value that changes every call,
# such as float(loss) used in the computation, would otherwise grow the list without end)
_VARIANTS_PER_SIGNATURE = 8
# retraces in a row, each because a global or closure variable changed, after which pb.jit warns
_STALE_RETRACES = 8

CacheInfo = collections.namedtuple("CacheInfo", ["traces", "replays", "retraces", "signatures"])


def jit(fn=None, *, cache_size=32):
    """`fn`, traced once per input signature and replayed as straight-line NumPy (see the module).

    `cache_size` bounds the number of signatures kept (least recently used first out).
    Usable as a decorator, with or without arguments.

    >>> import numpy as np, pullback as pb
    >>> @pb.jit
    ... def step(x):
    ...     return np.sin(x) * 2.0
    >>> step(np.array([0.0, 1.0]))
    array([0.        , 1.68294197])
    """
    if fn is None:
        return lambda f: Jitted(f, cache_size)
    return Jitted(fn, cache_size)


class Jitted:
    """A jitted function: call it like `fn`; `cache_info()` counts traces and replays."""

    pullback_jitted = True  # how the watch of an enclosing trace knows one (see _jit_watch)

    def __init__(self, fn, cache_size):
        if cache_size < 1:
            raise ValueError(f"pb.jit: cache_size must be at least 1, got {cache_size}")
        functools.update_wrapper(self, fn)
        self.fn, self.cache_size = fn, cache_size
        # signature -> [(program, rebuild, interrupted)], one per guard outcome
        self._cache = collections.OrderedDict()
        self._counts = {"traces": 0, "replays": 0, "retraces": 0}
        self._tracing = threading.RLock()
        # the cache's entries and order, and the replay count: calls in other threads replay meanwhile
        self._lock = threading.Lock()
        self._stale_run, self._warned = 0, False  # retraces in a row for a changed global; warned of them

    def __reduce__(self):
        """Pickled (sent to a Dask worker, say) as `pb.jit(fn)` afresh: its traces stay behind. A jitted
        function defined at a module's top level (`@pb.jit def f`) is pickled by its name, as functions are."""
        module = sys.modules.get(getattr(self, "__module__", None) or "")
        name = getattr(self, "__qualname__", "")
        if module is not None and "." not in name and getattr(module, name, None) is self:
            return name
        return Jitted, (self.fn, self.cache_size)

    def __get__(self, obj, objtype=None):
        """As a method (`jitted = pb.jit(plain)` in a class body): the object is the first argument."""
        return self if obj is None else functools.partial(self, obj)

    def cache_info(self):
        with self._lock:
            return CacheInfo(self._counts["traces"], self._counts["replays"], self._counts["retraces"],
                             len(self._cache))

    def wait_for_fusion(self, timeout=None, start=False):
        """Wait until the replays being fused in the background (see `docs/jit.md`) are; returns
        the number of replays that run fused kernels. With `start`, replays that could be fused
        are fused now, without waiting for their calls to add up. A benchmark calls it before
        timing.

        >>> import numpy as np, pullback as pb
        >>> f = pb.jit(lambda x: np.tanh(np.sin(x) * 2.0 + 1.0))
        >>> y = f(np.ones(4))
        >>> f.wait_for_fusion()  # one call: too few to fuse
        0
        >>> f.wait_for_fusion(start=True) == (1 if pb._jit_fuse.available() else 0)
        True
        """
        # a program not yet replayed has nothing to fuse unless fusing is to start now
        with self._lock:
            programs = [program for variants in self._cache.values() for program, _, _ in variants
                        if start or program.compiled]
        for program in programs:
            if start:
                program.start_fusing()
            if program.fusing is not None:
                program.fusing.join(timeout)
        return sum(program.runs_fused for program in programs)

    def __call__(self, *args, **kwargs):
        arrays, key, traced, containers = _signature(args, kwargs)
        if traced:  # called inside another trace: inline
            return self.fn(*args, **kwargs)
        found, result = self._replay(key, arrays, containers)
        if found:
            return result
        with self._tracing:  # threads calling at once with a new signature trace it once
            raised = result is _REPLAY_RAISED
            if not raised:  # (a replay that raised is not run again: its calls' warnings would come again)
                found, result = self._replay(key, arrays, containers)
                if found:
                    return result
                raised = result is _REPLAY_RAISED
            with self._lock:
                newest = self._cache[key][0][0] if key in self._cache else None
            if newest is not None and not raised:
                self._counts["retraces"] += 1
                self._note_stale(newest)
            # after a replay met an error a NumPy call raised (a LinAlgError, a FloatingPointError, an IndexError),
            # the trace takes the code's own branch (its except, which replays raise again), or raises, with the
            # writes made before as NumPy made them
            result, compiled = self._trace(args, kwargs, arrays, containers)
            self._counts["traces"] += 1
            if compiled is not None:  # (None: run as it is, untraced, see `_trace`: nothing to keep)
                # the newest outcome of the guards is tried first; the branch of an error, last
                self._keep(key, compiled, first=not raised)
        return result

    def _keep(self, key, compiled, first):
        """Keep trace `compiled` among the variants of signature `key`, tried first or last."""
        with self._lock:
            old = list(self._cache.get(key, ()))
        # a trace whose globals changed would replay only if they were all rebound to what it read; it is
        # dropped, not kept with the arrays and buffers it holds (a model's old weights, rebound each epoch)
        variants = [variant for variant in old if variant[0].unchanged is None or variant[0].unchanged()]
        variants.insert(0 if first else min(len(variants), _VARIANTS_PER_SIGNATURE - 1), compiled)
        del variants[_VARIANTS_PER_SIGNATURE:]
        with self._lock:  # a new list: a replay in another thread goes on with the one it took
            self._cache[key] = variants
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def _note_stale(self, newest):
        """Count the retraces in a row caused by a changed global (`newest`, the latest trace of the
        signature called, found what it read changed), and warn once when they add up: a value that
        changes at every call belongs among the arguments."""
        stale, newest.stale = newest.stale, False
        if not stale:
            self._stale_run = 0
            return
        self._stale_run += 1
        if self._stale_run == _STALE_RETRACES and not self._warned:
            self._warned = True
            changed = newest.watch.changed()
            warnings.warn(
                f"pb.jit: {getattr(self.fn, '__qualname__', 'the function')} was traced again {_STALE_RETRACES} "
                f"calls in a row because what it reads outside its arguments changed between calls"
                f"{' (' + ', '.join(changed[:3]) + ')' if changed else ''}. Pass a value that changes at "
                "every call as an argument: a Python number or an array argument is an input, replayed "
                "without tracing again.", RuntimeWarning, stacklevel=3)

    def _replay(self, key, arrays, containers):
        """`(True, result)` from the first program traced for `key` whose guards hold, else `(False, None)`;
        `arrays` and `containers` are the call's inputs and argument containers (see `_signature`)."""
        with self._lock:  # (another thread's trace may drop `key` between the two)
            variants = self._cache.get(key)
            if variants is None:
                return False, None
            self._cache.move_to_end(key)
        raised = False
        # a replay that stops after drawing random numbers gives them back: the next variant, or the
        # trace, draws them again from where the call found the generators
        states = [(g, g.bit_generator.state) for g in arrays if isinstance(g, np.random.Generator)]
        for program, rebuild, interrupted in variants:  # (replaced, never changed, by `_keep`)
            try:
                outputs = program(*arrays)
            except Retrace:
                _restore(states)
                continue
            except Exception:
                # an error of a NumPy call on these values (a singular matrix, a division by zero under
                # np.errstate, an index out of bounds): code may catch it (try: inv, except: svd) where the trace
                # took the other branch, and NumPy may have written part of an array before raising (np.put): trace
                # again, which raises it if the code does not (the replay writes into the caller's arrays only
                # after it has finished)
                _restore(states)
                raised = True
                continue
            except BaseException as error:  # raised by the function's own calls (or a KeyboardInterrupt in them):
                interrupted(arrays, program.writes_before(error))  # its writes so far reach the caller
                raise
            with self._lock:
                self._counts["replays"] += 1
            if self._stale_run:  # a replay between them: the retraces are not in a row
                self._stale_run = 0
            return True, rebuild(outputs, arrays, containers)
        return False, _REPLAY_RAISED if raised else None

    def _trace(self, args, kwargs, arrays, containers):
        """`(result, (program, rebuild, interrupted))` of a traced call; `(result, None)` of a call of a
        function that reads a value being differentiated outside its arguments, run as it is."""
        outside = _jit_watch.collect(self.fn, (), _argument_objects(args, kwargs))  # what it reads, as it is now
        if _reads_values_being_differentiated(outside):
            # a closure over the `x` of an enclosing pb.gradient: that level differentiates through the call,
            # which a trace's stand-ins would hide from it (as an argument, `x` makes the call run as it is too)
            return self.fn(*args, **kwargs), None
        trace = Trace()
        # The walk meets the inputs in the order `_signature` listed them (an array met twice, once):
        # match them by position, as equal numbers may be one object.
        symbols = iter([trace.input(a) for a in arrays])
        symbolic = tree.fmap(lambda leaf: next(symbols) if _is_input(leaf) else leaf, (args, kwargs))
        # the argument containers the function gets, by their place in the order `_signature` meets them (not
        # the tuple and dict holding the arguments, which the call makes anew)
        places = {id(c): k for k, c in enumerate(_containers(symbolic)) if all(c is not s for s in (symbolic, *symbolic))}
        generators = _jit_random.snapshot(self.fn, [a for a in arrays if isinstance(a, _jit_random.GENERATORS)],
                                          (args, kwargs))
        given, contents = _leaf_ids(symbolic), _contents_of((args, kwargs))
        try:
            return self._traced_call(args, kwargs, arrays, containers, trace, symbolic, places, generators,
                                     outside, given, contents)
        except JitError:
            # a refused call leaves the caller's objects as it found them (the function ran on them where
            # they hold no input: a list of strings, an empty list, a set)
            _put_back(contents)
            raise

    def _traced_call(self, args, kwargs, arrays, containers, trace, symbolic, places, generators, outside, given,
                     contents):
        """The rest of `_trace`, from calling the function on `symbolic` (its arguments with stand-ins)."""
        with _jit_random.watching_entropy() as fresh:
            try:
                with refusals_watched() as refused:
                    result = self.fn(*symbolic[0], **symbolic[1])
            except JitError:
                raise
            except BaseException as error:
                if isinstance(error, Exception):  # not a KeyboardInterrupt, which is let through as it is
                    _refuse_changed_arguments(given, _leaf_ids(symbolic), contents, error)
                # the writes made before it was raised (a KeyboardInterrupt too) reach the caller, as without pb.jit
                _interrupted_writer(trace, self.fn)(
                    arrays, {slot: trace.values[symbol.slot] for slot, symbol in trace.written_inputs.items()})
                raise
        if refused:
            raise JitError(f"{refused[0]}\n\nThe jitted function raised this error and caught it itself (a try/except), "
                           "then went on: it computed other values than it does without pb.jit. Make the change "
                           "above, or let the error through.") from refused[0]
        if _jit_random.drawn(fresh):
            made = ", ".join(dict.fromkeys(_constructor(g) for g, state in fresh if _jit_random.drawn([(g, state)])))
            raise JitError(f"pb.jit: the function drew from a random generator made from fresh entropy ({made} "
                           "without a seed, or from a np.random.SeedSequence() made without entropy), so each call "
                           "without pb.jit draws other numbers, where every replay would repeat the trace's. Pass a "
                           "np.random.Generator as an argument (pb.jit records its draws, and a replay draws afresh), "
                           "or seed the one made inside (np.random.default_rng(seed), np.random.PCG64(seed)).")
        _refuse_changed_arguments(given, _leaf_ids(symbolic), contents)
        _refuse_changed_outside(outside)
        hidden = _jit_random.advanced(generators)
        if hidden:
            raise JitError(
                f"pb.jit: the function drew random numbers from {' and from '.join(hidden)}, which the trace "
                "cannot see, so every replay would repeat the same draws. Pass a np.random.Generator as an "
                "argument (pb.jit records its draws, and a replay draws afresh), or draw outside the jitted "
                "function and pass the arrays in.")
        trace.constants_as_read()
        for path, leaf in tree.leaves_with_path(result):
            if is_traced(leaf):
                raise JitError(
                    f"pb.jit: the function returned a value being differentiated ({path.format('the result')}) that "
                    "it reached outside its arguments, through an object or a name pb.jit does not follow; the "
                    "enclosing pb.gradient or pb.jvp would differentiate through the trace's stand-ins. Pass that "
                    "value to the jitted function as an argument (pb.jit(lambda x, y: ...)(x, y)).")
            if isinstance(leaf, (types.FunctionType, types.MethodType, functools.partial)) and _closes_over_trace(leaf):
                raise JitError(
                    f"pb.jit: the function returned a function ({path.format('the result')}, "
                    f"{getattr(leaf, '__qualname__', type(leaf).__name__)}) that holds values of the trace (a pullback from "
                    "pb.vjp, say); a replay cannot make it again. Return arrays: call it inside the jitted function "
                    "(pb.jit(lambda x, v: pb.vjp(f, x)[1](v))).")
        # argument containers returned as they are (a layer, a list that optim.update passes on) are the
        # caller's own objects at every call, as without pb.jit
        passed = _passed_through(result, places)
        whole = (lambda value: id(value) in passed) if passed else None
        out_leaves = [v for _, v in tree.leaves_with_path(result, exclude=whole) if isinstance(v, _TRACE_VALUES)]
        foreign = [v for v in out_leaves if v.owner is not trace]
        if foreign:
            raise JitError("pb.jit: the function returned a value traced by another pb.jit call.")
        order = {id(v): i for i, v in enumerate(out_leaves)}
        # Inputs written in place: their final values are outputs too, written into the caller's arrays.
        written = [(trace.inputs.index(slot), symbol.slot) for slot, symbol in trace.written_inputs.items()]
        n_results = len(out_leaves)

        if passed:
            def build(outputs, containers):
                return tree.fmap(lambda leaf: containers[passed[id(leaf)]] if id(leaf) in passed else
                                 outputs[order[id(leaf)]] if id(leaf) in order else _fresh(leaf), result, exclude=whole)
        elif isinstance(result, Symbol):
            def build(outputs, containers):
                return outputs[0]
        elif type(result) in (tuple, list) and all(isinstance(v, Symbol) for v in result):
            kind, positions = type(result), [order[id(v)] for v in result]  # a gradient's tuple: no walk

            def build(outputs, containers):
                return kind([outputs[k] for k in positions])
        else:
            def build(outputs, containers):
                return tree.fmap(lambda leaf: outputs[order[id(leaf)]] if id(leaf) in order else _fresh(leaf), result)

        out_slots = [v.slot for v in out_leaves]
        made_by = producers(trace)
        # a written argument returned (`a += 1; return a`, a model whose statistics were updated), or a view of one
        # (`return a[1:]`, `a.T`), is the caller's array or that view of it, as without pb.jit
        final = {slot: k for k, slot in written}
        returned = [(position, final[chain[0]], chain[1]) for position, chain in
                    enumerate(_view_chain(made_by, slot, final, itself=True) for slot in out_slots) if chain]
        # the other slots those view calls read (`i` of `x[i]`): outputs of the program too
        besides = list(dict.fromkeys(s for _, _, calls in returned for s in _read_besides(calls)))
        interrupted = _interrupted_writer(trace, self.fn)
        if written:
            written_at = {k for k, _ in written}
            constants = _constants_read(trace, self.fn)
            _refuse_shared_written(arrays, written_at, constants)  # before the caller's arrays are written

            def rebuild(outputs, arrays, containers):
                _refuse_shared_written(arrays, written_at, constants)
                for j, (k, _) in enumerate(written):
                    np.copyto(arrays[k], outputs[n_results + j])
                values = dict(zip(besides, outputs[n_results + len(written):]))
                for position, k, calls in returned:
                    outputs[position] = _run_views(arrays[k], calls, values)
                return build(outputs, containers)
        else:
            def rebuild(outputs, arrays, containers):
                return build(outputs, containers)

        inputs = [trace.values[slot] for slot in trace.inputs]
        handed = _sharing_kept([_handed_out(trace.values[slot], inputs, made_read_only(slot, made_by))
                                for slot in out_slots], out_slots, made_by, trace)
        concrete = rebuild(handed + [trace.values[slot] for _, slot in written] + [trace.values[s] for s in besides],
                           arrays, containers)
        # what the function read outside its arguments, as it is now (the caller's arrays written
        # too): a replay first checks that it still is
        watch = _jit_watch.collect(self.fn, _jit_watch.constant_arrays(trace), _argument_objects(args, kwargs),
                                   began=outside)
        program = Deferred(trace, out_slots + [slot for _, slot in written] + besides, watch)
        return concrete, (program, rebuild, interrupted)


def _constructor(generator):
    """How the function made `generator` from fresh entropy: `np.random.default_rng()` for a Generator, else its
    class called (`np.random.PCG64()`, `np.random.RandomState()`)."""
    kind = type(generator)
    return "np.random.default_rng()" if kind is np.random.Generator else f"np.random.{kind.__name__}()"


def _constants_read(trace, fn):
    """The arrays the trace read as they were, not as inputs: its calls' constants, and the arrays among (or
    one level inside) the globals and closure variables `fn` loads; by the memory they are on (see
    `memory_key`), so that only those an argument's could be are compared with it."""
    constants = {}
    for c in _jit_watch.constant_arrays(trace) + _loaded_arrays(fn):
        if c.size:
            constants.setdefault(memory_key(c), []).append(c)
    return constants


def _interrupted_writer(trace, fn):
    """`interrupted(arrays, values)`, which writes what the function had written into its input arrays when it
    raised (`values`, by input slot) into the caller's `arrays`, as without pb.jit; an argument written that is
    also reached another way is refused first (see `_refuse_shared_written`)."""
    position = {slot: trace.inputs.index(slot) for slot in trace.written_inputs}
    if not position:
        return _nothing_written
    constants = _constants_read(trace, fn)

    def interrupted(arrays, values):
        _refuse_shared_written(arrays, set(position.values()), constants)
        for slot, value in values.items():
            np.copyto(arrays[position[slot]], value)

    return interrupted


def _nothing_written(arrays, values):
    """`interrupted` of a function that writes into none of its arguments."""


def _viewed(made_by, slot):
    """`(node, base)` where the recorded call `node` made `slot` as a view of the one slot `base` (`x[1:]`, `x.T`,
    `np.reshape(x, s)`, `x[i]` with a traced `i`), or `(None, None)`."""
    node = made_by.get(slot)
    viewed = set(node.aliases) if node is not None else ()
    return (node, next(iter(viewed))) if len(viewed) == 1 else (None, None)


def _view_chain(made_by, slot, bases, itself=False):
    """`(base, calls)` where `slot` was made from the slot `base` (one of `bases`) by the recorded view calls
    `calls` (see `_viewed`), first call first; `(slot, [])` for `slot` among `bases` if `itself`; None
    otherwise."""
    if itself and slot in bases:
        return slot, []
    calls = []
    while True:
        node, slot = _viewed(made_by, slot)
        if node is None:
            return None
        calls.append(node)
        if slot in bases:
            return slot, calls[::-1]


def _view_root(made_by, slot):
    """`(root, calls)`: the slot `slot` is a view of through the recorded view calls `calls` (first call first),
    that is itself no view of another; `(slot, [])` for a slot that is none."""
    calls = []
    while True:
        node, base = _viewed(made_by, slot)
        if node is None:
            return slot, calls[::-1]
        calls.append(node)
        slot = base


def _read_besides(calls):
    """The slots the view calls `calls` read besides the one each views (the `i` of `x[i]`)."""
    return [s for node in calls for s in node.slots_read() if s not in node.aliases]


def _run_views(base, calls, values):
    """The recorded view calls `calls` (see `_view_chain`) made again on the array `base`; the other slots they
    read have the values `values[slot]`."""
    for node in calls:
        viewed = node.aliases[0]
        base = node.fn(*_put(node.args, viewed, base, values), **_put(node.kwargs, viewed, base, values))
    return base


def _put(x, viewed, base, values):
    """An argument structure of a node with `base` where the slot `viewed` is named, `values[slot]` where
    another is."""
    if isinstance(x, Ref):
        return base if x.slot == viewed else values[x.slot]
    if type(x) in (tuple, list):
        return type(x)(_put(v, viewed, base, values) for v in x)
    if type(x) is dict:
        return {k: _put(v, viewed, base, values) for k, v in x.items()}
    if isinstance(x, slice):
        return slice(*(_put(v, viewed, base, values) for v in (x.start, x.stop, x.step)))
    return x


def _sharing_kept(values, slots, made_by, trace):
    """The traced call's results `values` (of the output `slots`), where the trace made one as a view of another
    (`y, y.T`), or several as views of one array not returned (`y[:2], y[1:]`), made again as those views of the
    value handed out, or of one copy of that array, so that they share memory as without pb.jit (each was copied
    to be handed out)."""
    position = {slot: k for k, slot in enumerate(slots)}
    roots = [_view_root(made_by, slot) for slot in slots]
    viewers = collections.Counter(root for root, calls in roots if calls)
    done, copies = {}, {}

    def root_value(root, k):
        if root in position:
            return value(position[root])
        if root not in copies:
            copies[root] = _copy_of_root(trace, root, trace.values[slots[k]])
        return copies[root]

    def value(k):
        if k not in done:
            root, calls = roots[k]
            # a read-only view the function made (np.broadcast_to(y, s)) is that view of a copy of y, as NumPy's
            read_only_view = made_read_only(slots[k], made_by)
            shared = root in position or viewers[root] > 1 or read_only_view
            if read_only_view and not calls and _read_only_view(trace.values[slots[k]]):
                # of a value no slot holds (np.broadcast_to(np.sum(x), s)): the trace's own, which nothing writes
                done[k] = trace.values[slots[k]]
            elif not calls or not shared or values[k] is trace.values[slots[k]]:  # not copied: shares already
                done[k] = values[k]
            else:
                base = root_value(root, k)
                done[k] = values[k] if base is None else _run_views(base, calls, trace.values)
        return done[k]

    return [value(k) for k in range(len(slots))]


def _read_only_view(value):
    """Whether `value` is a read-only view (of memory it does not own) that the trace made."""
    return type(value) is np.ndarray and not value.flags.writeable and not value.flags.owndata


def _copy_of_root(trace, root, view):
    """A copy, in its memory order, of the array the trace made at slot `root`, of which `view` (a value of the
    trace) is a view; None where the trace let go of it and `view` does not lead to it."""
    value = trace.values[root]
    if root in trace.released_c_order:  # a stand-in: the array is the one that `view`'s memory belongs to
        owner = view
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        if (owner.shape, owner.dtype) != (value.shape, value.dtype):
            return None
        value = owner
    return value.copy(order="K")


def _closes_over_trace(value, depth=0):
    """Whether `value`, a function returned by a traced call, holds a trace's stand-in or a value being
    differentiated in its closure (looked into through functions and containers, a few levels deep)."""
    if isinstance(value, _TRACE_VALUES) or is_traced(value):
        return True
    if depth > 3:
        return False
    if isinstance(value, functools.partial):
        return any(_closes_over_trace(v, depth + 1) for v in (value.func, *value.args, *value.keywords.values()))
    inner = getattr(value, "__func__", value)  # a bound method's function
    cells = getattr(inner, "__closure__", None) or ()
    contents = [cell.cell_contents for cell in cells if _filled(cell)]
    if hasattr(value, "__self__") and not isinstance(value.__self__, type):
        contents.append(value.__self__)
    for content in contents:
        if callable(content) and not isinstance(content, type):
            if _closes_over_trace(content, depth + 1):
                return True
        elif any(isinstance(leaf, _TRACE_VALUES) or is_traced(leaf) for leaf in tree.leaves(content)):
            return True
    return False


def _filled(cell):
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _loaded_arrays(fn):
    """The arrays `fn` (a function, or a bound method's function) reaches through the globals it loads
    (not names it uses as attributes) and its closure variables, directly or one level inside a dict,
    a list, a tuple or an object's attributes."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    values = [cell.cell_contents for cell in fn.__closure__ or () if _filled(cell)]
    values += [fn.__globals__[name] for name in _global_loads(code) if name in fn.__globals__]
    found = []
    for value in values:
        if type(value) is np.ndarray:
            found.append(value)
            continue
        inner = value.values() if type(value) is dict else value if type(value) in (list, tuple) else \
            getattr(value, "__dict__", {}).values() if not isinstance(value, (type, types.ModuleType)) else ()
        found += [v for v in inner if type(v) is np.ndarray]
    return found


def _global_loads(code):
    """The names `code` (and the code nested in it) loads as globals."""
    names = [i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _global_loads(const)
    return names


def _restore(states):
    """Put generators back in the states `(generator, bit_generator.state)` they were read in."""
    for generator, state in states:
        generator.bit_generator.state = state


def _reads_values_being_differentiated(watch):
    """Whether the globals and closures a function reads (its `watch`) hold a value that an enclosing
    pb.gradient or pb.jvp is differentiating."""
    return any(is_traced(value) or (type(value) is tuple and any(is_traced(v) for v in value))
               for _, _, value in watch.entries)


def _containers(arguments):
    """The containers of `(args, kwargs)`, in the order `_signature` meets them."""
    found = []
    tree.walk(arguments, lambda value, parts, path: None,
              lambda value, kind, old, new, parts, path, shell: found.append(value))
    return found


def _passed_through(result, places):
    """`{id(container): place}` of the argument containers (`places`, see `_containers`) that `result` holds
    (outermost only)."""
    passed = {}

    def leaf(value, parts, path):
        if id(value) in places:
            passed[id(value)] = places[id(value)]

    tree.walk(result, leaf, lambda *a: None, exclude=lambda value: id(value) in places, cycle=lambda *a: None)
    return passed


def _argument_objects(args, kwargs):
    """The containers and constant leaves among the arguments (for `_jit_watch.collect`)."""
    objects = []
    tree.walk((args, kwargs), lambda value, ys, path: None if _is_input(value) else objects.append(value),
              lambda value, kind, old, new, ys, path, shell: objects.append(value))
    return objects


def _leaf_ids(arguments):
    """`{path: id(leaf)}` of the leaves of `(args, kwargs)` (a write into an array keeps its leaf)."""
    args, kwargs = arguments
    return {path.format(root): id(leaf) for root, part in (("args", args), ("kwargs", kwargs))
            for path, leaf in tree.leaves_with_path(part)}


def _refuse_changed_arguments(before, after, contents, raised=None):
    """Refuse a trace whose function put new values into its arguments' objects (`before` and `after`:
    `_leaf_ids` of the arguments it got; `contents`: `_contents_of` the caller's): the call without pb.jit
    changes the caller's objects, which a replay cannot do. Where the function then `raised`, the call
    without pb.jit leaves those changes too: refused the same way."""
    changed = sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))
    changed += [path for path in _changed_contents(contents) if not any(p.startswith(path) for p in changed)]
    if not changed and list(before) != list(after):  # the same entries in another order (d.move_to_end(k))
        changed = [next(a for a, b in zip(before, after) if a != b)]
    if changed:
        then = f" before raising {type(raised).__name__}" if raised is not None else ""
        raise JitError(f"pb.jit: the function changed {', '.join(changed[:3])} of its arguments{then} (an "
                       "attribute set, an entry added, replaced or moved, a set's or a deque's contents), which a replay "
                       "cannot do to the caller's objects. Return the new values instead, or write into the arrays "
                       "themselves (x[...] = v).") from raised


# leaves whose contents a function can change in place (a container's are its children, walked anyway)
_MUTABLE_LEAVES = (set, bytearray, collections.deque)
_UNSET = object()


def _contents_of(arguments):
    """`[(path, object, contents)]` of the mutable objects among `(args, kwargs)`: each container's items
    or attributes and each set's, bytearray's or deque's elements, to tell a change to them and undo it."""
    found = []
    for root, part in zip(("args", "kwargs"), arguments):
        def leaf(value, parts, path):
            if isinstance(value, _MUTABLE_LEAVES):
                found.append((path.format(root), value, _contents(value)))

        def node(value, kind, old, new, parts, path, shell):
            if not isinstance(value, tuple) or hasattr(value, "__dict__"):  # a tuple's items cannot change
                found.append((path.format(root), value, _contents(value)))

        tree.walk(part, leaf, node, cycle=lambda *a: None)
    return found


def _contents(value):
    """`(items, attributes, slots)` of a mutable object, as `_put_back` puts them back."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, (set, bytearray)):
        items = value.copy()
    elif isinstance(value, (list, collections.deque)):
        items = list(value)
    else:
        items = None
    attributes = tree._attribute(value, "__dict__")
    slots = {name: tree._attribute(value, name, _UNSET) for cls in type(value).__mro__ for name in tree._slots_of(cls)}
    return items, (None if attributes is None or attributes is value else dict(attributes)), slots


def _same_contents(a, b):
    """Whether two `_contents` of an object hold the same objects (a set's or a bytearray's: equal ones)."""
    (items_a, attributes_a, slots_a), (items_b, attributes_b, slots_b) = a, b
    if isinstance(items_a, list):
        if not (isinstance(items_b, list) and _same_objects(items_a, items_b)):
            return False
    elif items_a != items_b:
        return False
    if attributes_a is None or attributes_b is None:
        if attributes_a is not attributes_b:
            return False
    elif not _same_objects(list(attributes_a.items()), list(attributes_b.items())):
        return False
    return slots_a.keys() == slots_b.keys() and all(slots_a[k] is slots_b[k] for k in slots_a)


def _same_objects(a, b):
    """Whether two lists hold the same objects in the same order (an entry of a dict: the same key and value)."""
    return len(a) == len(b) and all(p is q or (type(p) is tuple and type(q) is tuple and len(p) == len(q) == 2
                                               and p[0] is q[0] and p[1] is q[1]) for p, q in zip(a, b))


def _changed_contents(contents):
    """The paths of the objects of `_contents_of` whose contents are not what they were."""
    return [path for path, value, saved in contents if not _same_contents(saved, _contents(value))]


def _put_back(contents):
    """Undo the changes made to the objects of `_contents_of` since it was taken."""
    for _, value, saved in contents:
        if not _same_contents(saved, _contents(value)):
            _restore_contents(value, saved)


def _restore_contents(value, saved):
    """Put the `_contents` `saved` back into `value`."""
    items, attributes, slots = saved
    if isinstance(value, dict):  # by the object's own methods, which keep an OrderedDict's order
        value.clear()
        value.update(items)
    elif isinstance(value, (list, bytearray)):
        value[:] = items
    elif isinstance(value, set):
        value.clear()
        value.update(items)
    elif isinstance(value, collections.deque):
        value.clear()
        value.extend(items)
    if attributes is not None:
        instance_dict = object.__getattribute__(value, "__dict__")
        instance_dict.clear()
        instance_dict.update(attributes)
    for name, slot in slots.items():
        if slot is not _UNSET:
            object.__setattr__(value, name, slot)
        elif tree._attribute(value, name, _UNSET) is not _UNSET:
            object.__delattr__(value, name)


def _refuse_changed_outside(watch):
    """Refuse a trace whose function stored one of its traced values outside its arguments (set an attribute
    of `self`, appended to a list, rebound a global): later code would read a stand-in of the trace, and a
    replay would not store its own values there. Other changes happen at the trace only, as in JAX."""
    stored = [where for where, value in watch.new_values() if any(isinstance(v, _TRACE_VALUES) for v in tree.leaves(value))]
    if stored:
        raise JitError(f"pb.jit: the function stored a traced value in {', '.join(stored[:3])}, outside its "
                       "arguments; a replay would not store its own values there, as each call without pb.jit "
                       "does. Return the new values instead (and pass them back in as arguments), or keep that "
                       "code outside the jitted function.")


def _fresh(leaf):
    """A constant array output, copied so a caller writing into it cannot change later replays."""
    return leaf.copy() if isinstance(leaf, np.ndarray) else leaf


def _handed_out(value, inputs, read_only):
    """The traced call's result `value` as the caller gets it: a copy (`read_only` where the function made
    it so), unless it is an argument or a view of one (the trace keeps its values, and a constant among
    them would be replayed as the caller left it)."""
    if type(value) is not np.ndarray or any(np.may_share_memory(value, x) for x in inputs if type(x) is np.ndarray):
        return value
    copy = value.copy(order="K")
    copy.flags.writeable = not read_only
    return copy


def _is_input(x):
    return _is_array(x) or isinstance(x, np.random.Generator) or type(x) in (int, float, complex)


def _is_array(x):
    return type(x) is np.ndarray or isinstance(x, (np.number, np.bool_))


_REPLAY_RAISED = object()  # what `_replay` returns for a call whose replay met an error of a NumPy call


def _order(a):
    """An array's memory order: what is a view and what a copy depends on it (`a.T.reshape(-1)`), and so
    what an in-place write reaches. NumPy scalars have none."""
    flags = getattr(a, "flags", None)
    return None if flags is None else "C" if flags.c_contiguous else "F" if flags.f_contiguous else a.strides


def _refuse_shared_written(arrays, written, constants=None):
    """Refuse an argument written by the function that shares memory with another argument, or with an
    array the trace read outside the arguments (`constants`, by `memory_key`: a global, a closure, an
    object's attribute)."""
    shared = sharing_memory(arrays, written)
    if shared is not None:
        raise JitError(f"pb.jit: arguments {shared[0]} and {shared[1]} (in the order the arrays are met) share "
                       "memory, and the function writes into its arguments: a replay keeps them apart, where "
                       "NumPy's writes into one change the other. Pass separate arrays (.copy()), or one array once.")
    for k in written if constants else ():
        if any(np.shares_memory(arrays[k], c) for c in constants.get(memory_key(arrays[k]), ())):
            raise JitError(f"pb.jit: the function writes into argument {k} (in the order the arrays are met), whose "
                           "memory it also reads outside its arguments (through a global, a closure or an object's "
                           "attribute): a replay reads the values the trace saw there, where NumPy reads the written "
                           "ones. Reach the array one way only: as the argument.")


def _signature(args, kwargs):
    """(input arrays in walk order, hashable signature, whether a traced value is among them, the
    containers in walk order).

    The signature lists, in the walk's (post-)order, each leaf's type with its shape and dtype
    (or its value, for a constant), each container's type with its children's keys (and their
    types), and each later place of an object already met. The walk order and the children's
    keys fix every place, so no path is formatted (a model has hundreds). An object met at
    several places is one input of the trace, so where it recurs is part of the signature:
    f(x, x) and f(x, y) run different programs; so is each container's type (a list and a
    tuple, or two classes with the same fields, may run different code).
    """
    if not kwargs and all(type(a) is np.ndarray for a in args) and len({id(a) for a in args}) == len(args):
        return list(args), tuple((a.shape, a.dtype, _order(a)) for a in args), False, ()
    plain = _plain_signature(args, kwargs)
    if plain is not None:
        return plain
    arrays, key, containers = [], [], []
    traced = False

    def leaf(value, parts, path):
        nonlocal traced
        if isinstance(value, _TRACE_VALUES) or is_traced(value):  # inside another trace, or a derivative: inline
            traced = True
        elif is_foreign_array(value):  # a Dask or CuPy array: its library builds its own program; fn runs as it is
            traced = True
        elif isinstance(value, np.ndarray) and type(value) is not np.ndarray:
            raise JitError(f"pb.jit: the argument at {path.format('args')} is a {type(value).__name__}, a subclass "
                           "of numpy.ndarray whose behaviour a replay would not keep. Pass np.asarray(...) of it.")
        elif _is_array(value):
            arrays.append(value)
            key.append((type(value), value.shape, value.dtype, _order(value)))
        elif isinstance(value, np.random.Generator) or type(value) in (int, float, complex):
            arrays.append(value)  # an input: draws and arithmetic replay with each call's value
            key.append((type(value),))
        else:
            key.append((type(value), _static_value(value)))
        return len(key)  # the place of this leaf in the signature, for a later place to name

    def container(value, kind, old, new, parts, path, shell):
        key.append(("container", type(value), tuple(old), tuple(map(type, old))))  # {1: x} is not {True: x}
        containers.append(value)
        return len(key)

    def recur(value, first, parts, path):
        key.append(("again", first))
        return first

    def cycle(value, kind, path):
        key.append(("cycle", type(value)))
        return len(key)

    tree.walk((args, kwargs), leaf, container, repeat=recur, cycle=cycle)
    return arrays, tuple(key), traced, containers


_PLAIN_KINDS = {list: tree.kind_of([]), tuple: tree.kind_of(()), dict: tree.kind_of({})}


@functools.lru_cache(maxsize=64)
def _positions(n):
    """The keys of a sequence's n children, and their types, as a signature holds them."""
    return tuple(range(n)), (int,) * n


def _plain_signature(args, kwargs):
    """`_signature` of arguments made of arrays, Python ints and floats in lists, tuples and dicts (the
    common case: a list of parameters), computed without the general walk, which costs about 20 µs for
    a list of six arrays; None for anything else, or a container met twice, or nested deeper than
    `_PLAIN_DEPTH`.

    >>> a = np.ones(2)
    >>> _plain_signature(([a, a], 0.5), {})[1][:2]
    ((<class 'numpy.ndarray'>, (2,), dtype('float64'), 'C'), ('again', 1))
    """
    found = ([], [], [], {})  # arrays, the signature, containers, id -> place in the signature
    if not _plain_visit((args, kwargs), 0, *found):
        return None
    arrays, key, containers, _ = found
    return arrays, tuple(key), False, containers


_PLAIN_DEPTH = 32


def _plain_visit(value, depth, arrays, key, containers, places):
    """Add container `value` and what it holds to `_plain_signature`'s lists (its leaves without a call
    each); False where it meets what only the general walk handles."""
    kind = type(value)
    if kind not in _PLAIN_KINDS or tree.kind_of(value) is not _PLAIN_KINDS[kind] or id(value) in places \
            or depth > _PLAIN_DEPTH:
        return False  # another kind, a kind registered anew, a repeat or a cycle: the general walk's
    for child in value.values() if kind is dict else value:
        leaf = type(child)
        if leaf is np.ndarray:
            place = places.get(id(child))
            if place is not None:
                key.append(("again", place))
                continue
            arrays.append(child)
            key.append((leaf, child.shape, child.dtype, _order(child)))
            places[id(child)] = len(key)
        elif leaf is float or leaf is int:
            arrays.append(child)
            key.append((leaf,))
        elif not _plain_visit(child, depth + 1, arrays, key, containers, places):
            return False
    if kind is dict:
        key.append(("container", kind, tuple(value), tuple(map(type, value))))
    else:
        key.append(("container", kind) + _positions(len(value)))
    containers.append(value)
    places[id(value)] = len(key)
    return True


def _static_value(leaf):
    """A constant leaf as the signature holds it: its value (a set or bytearray, unhashable, by its
    contents, which a caller may change between calls); another unhashable object by identity."""
    if type(leaf) is set:
        try:
            return ("set", frozenset((type(e), e) for e in leaf))  # {1} and {1.0} are equal sets, not one signature
        except TypeError:  # an unhashable element
            pass
    elif type(leaf) is bytearray:
        return ("bytearray", bytes(leaf))
    try:
        hash(leaf)
    except TypeError:
        return ("id", id(leaf))
    return leaf
