"""Replay for `pb.jit`: a recorded trace compiled once into a straight-line Python function.

The generated function calls the recorded NumPy functions directly on plain arrays: no
Symbols, no dispatch, no closures. Memory is planned once per trace: an elementwise ufunc
whose input is a buffer the program owns (made by an earlier elementwise ufunc), used for
the last time, not shared with any live view nor read through a view by the same call, and of
the result's shape and dtype, writes
its result into that buffer (`out=`) instead of allocating. Guards follow the node they
depend on and raise `Retrace` when the replay's value differs from the trace's.

>>> import numpy as np
>>> from pullback._jit_trace import Trace
>>> trace = Trace()
>>> x = trace.input(np.array([0.0, 1.0]))
>>> y = np.cos(np.sin(x)) * 2.0
>>> program = compile_trace(trace, [y.slot])
>>> program(np.array([0.5, 0.25]))[0]
array([1.7745201 , 1.93910285])
"""

import atexit
import heapq
import re
import threading
import warnings
import weakref

import numpy as np

from . import _jit_blocks, _jit_fuse, _jit_parallel
from ._jit_parallel import PARTS, Scratch, holds, operand_kind, splittable
from ._jit_trace import RaisesAgain, Ref, Retrace, collect, errors_token, index_check, setitem_copy, with_writeable
from ._jit_watch import same_value

_SOURCE_NAME = "<pb.jit program>"  # the file name of the generated code


# replays of one program before its small-array segments are fused (see `pullback._jit_fuse`)
FUSE_AFTER_CALLS = 20


class Program:
    """A compiled trace: `program(*input_arrays) -> list of output arrays` (raises `Retrace`).

    `arena` holds the buffers the plan reuses from call to call; a call that finds them in
    use by another thread gets buffers of its own. A program with `fuse` (a function making
    its fused version, or None if it would fuse nothing) makes that version in a background
    thread once it has run `FUSE_AFTER_CALLS` times, and from then on runs it (unfused under
    a raising `np.errstate`)."""

    def __init__(self, run, source, n_nodes, n_in_place, arena_specs, fuse=None, n_kernels=0, versions=None,
                 fused_parts=()):
        self.run, self.source = run, source
        self.fused_parts = fused_parts  # the fused versions of its segments' parts (see `pullback._jit_blocks`)
        self.versions = versions or {}  # written input slot -> the slots of the values written into it, in order
        self.n_nodes, self.n_in_place, self.n_kernels = n_nodes, n_in_place, n_kernels
        self._specs = arena_specs
        self._arena = None
        self._lock = threading.Lock()
        self._fuse, self._calls = fuse, 0
        self._fusing_lock = threading.Lock()  # threads reaching the count at once start one fusing thread
        self.fused, self.fusing = None, None  # the fused Program once ready; the thread making it

    def __call__(self, *inputs):
        if self._fuse is not None:
            self._calls += 1
            if self._calls >= FUSE_AFTER_CALLS:
                self.start_fusing()
        fused = self.fused
        if fused is not None and not _errors_raise():
            return fused(*inputs)
        if not self._lock.acquire(blocking=False):
            return self.run(self._new_arena(), *inputs)
        try:
            if self._arena is None:
                self._arena = self._new_arena()
            return self.run(self._arena, *inputs)
        finally:
            self._lock.release()

    @property
    def runs_fused(self):
        """Whether its fused version is ready: the kernels of small arrays, or its segments' loops."""
        return self.fused is not None or bool(self.fused_parts and all(part.ready() for part in self.fused_parts))

    def start_fusing(self):
        """Make the fused version in a background thread (once); `self.fusing` is that thread."""
        with self._fusing_lock:
            fuse, self._fuse = self._fuse, None
            if fuse is None:
                return
            fusing = threading.Thread(target=self._make_fused, args=(fuse,), name="pb.jit fuse", daemon=True)
            _FUSING.add(fusing)
            fusing.start()
            self.fusing = fusing

    def _make_fused(self, fuse):
        try:
            self.fused = fuse()
        except Exception as exc:  # the unfused replay goes on: slower, never wrong
            import warnings

            warnings.warn(f"pb.jit: fusing a replay's operations failed, so it stays unfused: "
                          f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=1)

    def _new_arena(self):
        return [np.empty(shape, dtype) for shape, dtype in self._specs]

    def writes_before(self, error):
        """`{input slot: value}`: what the run that raised `error` had written into each input written by the
        function (the latest of its values the run had made), found in the run's frame."""
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != _SOURCE_NAME:
            tb = tb.tb_next
        if tb is None or not self.versions:
            return {}
        names = tb.tb_frame.f_locals
        found = {}
        for slot, versions in self.versions.items():
            made = [names[f"s{v}"] for v in versions if f"s{v}" in names]
            if made:
                found[slot] = made[-1]
        return found


# The threads fusing replays. At exit each is waited for: one stopped inside the compiler as the
# interpreter shuts down can abort the process (an LLVM assertion) after the program has finished.
_FUSING = weakref.WeakSet()


@atexit.register
def _finish_fusing():
    for thread in list(_FUSING):
        thread.join()


class Deferred:
    """A trace whose `Program` is compiled at its first replay: the call that traced already has its
    results, so the first call costs the trace alone and a function called once is never compiled.
    Reading a `Program` attribute (`source`, `run`, `fused`, ...) compiles it."""

    def __init__(self, trace, output_slots, watch=None):
        self._recording, self._program = (trace, output_slots), None
        self._lock = threading.Lock()  # threads replaying it at once compile it once
        # what the trace read outside its arguments (`_jit_watch.Watch`), and the check that it is as it
        # was (None: nothing to check); `stale` once a call found it changed
        self.watch, self.unchanged, self.stale = watch, watch and watch.check, False

    @property
    def compiled(self):
        return self._program is not None

    @property
    def program(self):
        if self._program is None:
            with self._lock:
                if self._program is None:
                    self._program = compile_trace(*self._recording)
                    self._recording = None
        return self._program

    def __call__(self, *inputs):
        unchanged = self.unchanged
        if unchanged is not None and not unchanged():
            self.stale = True  # a global or closure variable rebound, or an array the trace read written
            raise Retrace
        return self.program(*inputs)

    def __getattr__(self, name):
        return getattr(self.program, name)


def _errors_raise():
    """Whether NumPy is set to act on floating-point errors, which a fused kernel does not report."""
    return any(mode in ("raise", "call", "log") for mode in np.geterr().values())


class _Planner:
    """Which buffer each elementwise result is written into (see the module docstring)."""

    def __init__(self, trace, last_use):
        self.trace = trace
        self.death, self.roots = _memory(trace, last_use)
        self.buffers = []  # k -> (shape, dtype)
        self.buffer_of = {}  # slot -> buffer k
        self.buffer_death = []  # k -> last node index at which any slot held in it is read
        self.free = {}  # (shape, dtype) -> [k]
        self.pending = []  # heap of (death, k): buffers to free once the walk passes their death
        self.per_call = set()  # buffers that end up holding an output: allocated afresh each call

    def place(self, node, index):
        """The buffer for `node`'s result (reusing a dying input's, or a free one), or None."""
        self._release(index)
        result = self.trace.values[node.outputs]
        if not (node.elementwise and isinstance(result, np.ndarray) and result.ndim and self.trace.c_ordered(node.outputs)
                and "where" not in node.kwargs and "out" not in node.kwargs):
            return None  # a buffer is C-ordered: for a result traced in another order (a.T * 2), a later
            # reshape that copied at the trace would be a view of the reused buffer at the replay
        key = (result.shape, result.dtype)
        k = None
        read = node.slots_read()
        for slot in read:
            held = self.buffer_of.get(slot)
            if held is not None and self.buffer_death[held] == index and key == self.buffers[held] \
                    and not any(other != slot and slot in self.roots.get(other, ()) for other in read):
                k = held  # not when another operand is a view of it: a part would overwrite its rows
                break
        if k is None:
            pool = self.free.get(key)
            if pool:
                k = pool.pop()
            else:
                k = len(self.buffers)
                self.buffers.append(key)
                self.buffer_death.append(-1)
        self.buffer_of[node.outputs] = k
        self.buffer_death[k] = max(self.buffer_death[k], self.death.get(node.outputs, index))
        heapq.heappush(self.pending, (self.buffer_death[k], k))
        return k

    def _release(self, index):
        while self.pending and self.pending[0][0] < index:
            death, k = heapq.heappop(self.pending)
            if death == self.buffer_death[k] and death != float("inf"):
                self.free.setdefault(self.buffers[k], []).append(k)
                self.buffer_death[k] = float("-inf")  # free: no holder is alive

    def mark_outputs(self, output_slots):
        """Buffers an output lives in (itself, or as a view of it) are allocated afresh each call."""
        for out in output_slots:
            for slot in self.roots.get(out, {out}):
                if slot in self.buffer_of:
                    self.per_call.add(self.buffer_of[slot])


def compile_trace(trace, output_slots, fuse=False):
    """The `Program` replaying `trace` from its input slots to `output_slots`; with `fuse`, its
    runs of elementwise operations on small arrays become fused kernels (see `pullback._jit_fuse`)."""
    live = _needed_nodes(trace, output_slots)
    last_use = _last_uses(trace, output_slots, live)
    planner = _Planner(trace, last_use)
    namespace = {"Retrace": Retrace, "same": same_value}
    body = []
    guards_after = {}
    for g_index, guard in enumerate(trace.guards):
        guards_after.setdefault(guard.after, []).append(g_index)
        namespace[f"convert{g_index}"] = guard.convert
        namespace[f"expected{g_index}"] = guard.expected
    placed = {index: planner.place(trace.nodes[index], index) for index in sorted(live)
              if not isinstance(trace.nodes[index].outputs, tuple)}
    n_in_place = sum(k is not None and any(planner.buffer_of.get(slot) == k for slot in trace.nodes[index].slots_read())
                     for index, k in placed.items())
    kernel_of = _segments(trace, live, guards_after, planner, placed, _jit_fuse.fusible,
                          _jit_fuse.MIN_LENGTH, dtype=True) if fuse else {}
    segment_of = _segments(trace, live - set(kernel_of), guards_after, planner, placed,
                           _splittable_apart_from(_written_values(trace)))
    segments = {}  # first index -> [(index, node, buffer k or None)]
    parts_source = []
    fused_parts = []  # (part name, its FusedPart)
    slabs = _jit_fuse.Slabs()
    # slots read by code outside the kernels: a kernel's stored result is then given a name
    # the slots read outside any call: outputs, guards, and values written into an input (read where a call raises)
    kept = set(output_slots) | {guard.slot for guard in trace.guards} | _written_values(trace)
    outside = kept | {slot for index in live - set(kernel_of) for slot in trace.nodes[index].slots_read()}
    # a segment's results read by no call outside it, no guard, and no output live in its parts' scratch
    readers = {}
    for index in live:
        for slot in trace.nodes[index].slots_read():
            readers.setdefault(slot, set()).add(index)
    # slots an output may share memory with: a slab row is copied out before it becomes one
    copied = {slot for out in output_slots for slot in planner.roots.get(out, {out})}
    for index, node in enumerate(trace.nodes):
        for g_index in guards_after.get(index, ()):
            body.append(_guard_line(trace.guards[g_index], g_index))
        if index not in live:
            continue
        fn = _setitem_in_place if _writes_in_place(node, index, trace, planner) else node.fn
        namespace[f"f{index}"] = _under_filters(_under_errors(fn, node.errors), node.filters)
        if isinstance(node.outputs, tuple):
            names = ", ".join(f"s{s}" for s in node.outputs) + ("," if len(node.outputs) == 1 else "")
            body.append(f"    {names} = f{index}({_call_arguments(node, trace, namespace, f'c{index}')})")
            continue
        k = placed[index]
        if index in kernel_of:
            first, last = kernel_of[index]
            segments.setdefault(first, []).append((index, node, k))
            if index == last:
                _emit_kernel(segments[first], trace, namespace, body, slabs, outside, copied)
            continue
        if index in segment_of:
            first, last = segment_of[index]
            segments.setdefault(first, []).append((index, node, k))
            if index == last:
                members = {i for i, _, _ in segments[first]}
                made = [trace.nodes[i].outputs for i in members]
                read_after = {slot for slot in made if slot in kept or not readers.get(slot, set()) <= members}
                _emit_segment(segments[first], trace, namespace, body, parts_source, read_after, fused_parts, planner)
            continue
        arguments = _call_arguments(node, trace, namespace, f"c{index}")
        if k is None:
            body.append(f"    s{node.outputs} = f{index}({arguments})  # {node.name}")
        else:
            out = f"b{k}" if _positional_out(node) else f"out=b{k}"
            body.append(f"    s{node.outputs} = f{index}({arguments}{', ' if arguments else ''}{out})  # {node.name}")
    for g_index in guards_after.get(len(trace.nodes), ()):
        body.append(_guard_line(trace.guards[g_index], g_index))
    planner.mark_outputs(output_slots)
    # the buffers the body names (a fused kernel replaces the calls of its segment)
    named = set(re.findall(r"\bb\d+\b", "\n".join(body)))
    arena = [k for k in range(len(planner.buffers)) if k not in planner.per_call and f"b{k}" in named]
    # The called functions stay globals of the generated code: as keyword defaults (local names)
    # each call would first copy hundreds of them into its frame, which costs more than it saves.
    inputs = "".join(f", s{s}" for s in trace.inputs)
    head = [f"def program(arena{inputs}):"]
    if any(trace.nodes[index].errors is not None for index in live):
        head.append(_errors_check(trace, namespace))
    if any(trace.nodes[index].filters is not None for index in live):
        head.append(_filters_check(trace, namespace))
    slab_names, slab_specs = slabs.specs()
    if arena or slab_names:
        head.append(f"    {', '.join([f'b{k}' for k in arena] + slab_names)}, = arena")
    for k in sorted(k for k in planner.per_call if f"b{k}" in named):
        shape, dtype = planner.buffers[k]
        namespace[f"dtype{k}"] = dtype
        head.append(f"    b{k} = empty({shape!r}, dtype{k})")
    namespace["empty"] = np.empty
    made, made_by = _made_afresh(trace, live), producers(trace)
    outs = ", ".join(_handed_out(trace, s, namespace, made, made_by) for s in output_slots)
    source = "\n".join(parts_source + head + body + [f"    return [{outs}]"])
    exec(compile(source, _SOURCE_NAME, "exec"), namespace)
    for part_name, fused_part in fused_parts:
        fused_part.part = namespace[f"{part_name}_fused"]
        namespace[part_name].fused = fused_part
        if fuse:  # (in the background thread making this fused version)
            fused_part.compile()
    make_fused = None
    if not fuse and _jit_fuse.available() and (fused_parts or _jit_fuse.worth_keeping(trace)):
        kept = trace if _jit_fuse.worth_keeping(trace) else None  # (a large trace is not kept alive)
        loops_of = [fused_part for _, fused_part in fused_parts]

        def make_fused():  # None when no fused Program is made
            for fused_part in loops_of:
                fused_part.compile()
            if kept is None:
                return None
            fused = compile_trace(kept, output_slots, fuse=True)
            return fused if fused.n_kernels else None
    return Program(namespace["program"], source, len(live), n_in_place,
                   [planner.buffers[k] for k in arena] + slab_specs, make_fused,
                   n_kernels=len({first for first, _ in kernel_of.values()}), versions=trace.versions,
                   fused_parts=[fused_part for _, fused_part in fused_parts])


def _errors_check(trace, namespace):
    """The line that retraces a call made under other floating-point error handling than the trace's: the
    calls the function wrapped in np.errstate replay under the settings they had then, which hold the
    caller's where the function left them."""
    namespace.update(caller_errors=errors_token, errors_outside=trace.errors_outside,
                     errors_now=_errors_now, errors_at_start=trace.errors_at_start)
    return "    if caller_errors() != errors_outside and errors_now() != errors_at_start: raise Retrace"


def _errors_now():
    return np.geterr(), np.geterrcall()


def _filters_check(trace, namespace):
    """The line that retraces a call made under other warnings filters than the trace's: the calls the function
    made under filters of its own replay under those filters, which held the caller's then."""
    namespace.update(warnings=warnings, filters_outside=trace.filters_outside)
    return "    if warnings.filters != filters_outside: raise Retrace"


def _under_filters(fn, filters):
    """`fn`, called under the warnings filters `filters` (None: as it is)."""
    if filters is None:
        return fn

    def under_filters(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.resetwarnings()  # in the copy catch_warnings made, which it puts back
            warnings.filters.extend(filters)
            return fn(*args, **kwargs)

    return under_filters


def _under_errors(fn, errors):
    """`fn`, called under the floating-point error handling `errors` (from `np.geterr`, `np.geterrcall`; None:
    as it is)."""
    if errors is None:
        return fn
    modes, call = errors

    def under_errors(*args, **kwargs):
        with np.errstate(call=call, **modes):
            return fn(*args, **kwargs)

    return under_errors


def _made_afresh(trace, live):
    """The slots whose arrays each replay makes anew: results of elementwise ufuncs, of other live nodes
    that read no constant array and share no input's memory (np.asarray of a constant is the constant),
    and views of those (`y[1:]`, or `y` made read-only) made by nodes that read no constant array."""
    made = set()
    for index in sorted(live):
        node = trace.nodes[index]
        constants = []
        collect((node.args, node.kwargs), np.ndarray, constants)
        if node.elementwise or not (constants or any(slot not in made for slot in node.aliases)):
            made.update(node.outputs if isinstance(node.outputs, tuple) else (node.outputs,))
    return made


def producers(trace):
    """slot -> the node that made it (of one output)."""
    return {node.outputs: node for node in trace.nodes if not isinstance(node.outputs, tuple)}


def made_read_only(slot, made_by):
    """Whether the function made the array at `slot` read-only (`x.flags.writeable = False`, or a read-only view
    of its own NumPy call: `np.broadcast_to`, `np.diagonal`; on it or on an array it is a view of): it is handed
    out so, as without pb.jit. The read-only views pullback's rules make (`np.broadcast_to` of a gradient),
    which its eager calls hand out as copies, are not."""
    node = made_by.get(slot)
    while node is not None:
        if node.fn is with_writeable:
            return not node.args[1]
        if node.read_only_view:
            return True
        if len(node.aliases) != 1:
            return False
        node = made_by.get(node.aliases[0])
    return False


def _handed_out(trace, slot, namespace, made, made_by):
    """The source of output `slot` as the program hands it out: itself, or a copy where it is an array the
    program keeps (see `_is_kept`), read-only where the function made it so."""
    if not _is_kept(trace, slot, namespace, made, made_by):
        return f"s{slot}"
    if made_read_only(slot, made_by):
        namespace["read_only_copy"] = _read_only_copy
        return f"read_only_copy(s{slot})"
    return f"s{slot}.copy()"


def _read_only_copy(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def _is_kept(trace, slot, namespace, made, made_by):
    """Whether output `slot` would be an array the program keeps from call to call (a constant of
    the trace, or a read-only view of one): each call then hands out a copy, as an eager call
    hands out a new array, so that a caller writing into one result changes no other."""
    value = trace.values[slot]
    if type(value) is not np.ndarray:
        return False
    released = slot in trace.released_c_order  # a large value the trace let go of (its stand-in is read-only)
    if slot in made:  # new memory at each call: a writable copy of a read-only view NumPy made (see made_read_only)
        read_only = slot in trace.released_read_only if released else not value.flags.writeable
        return read_only and not made_read_only(slot, made_by)
    if released:  # not made by the call: a constant of the trace
        return True
    if any(np.may_share_memory(value, trace.values[i]) for i in trace.inputs):
        return False  # an argument, or a view of one: the plain function hands out the same
    constants = [c for c in namespace.values() if type(c) is np.ndarray]
    return not value.flags.writeable or any(np.may_share_memory(value, c) for c in constants)


def _segments(trace, live, guards_after, planner, placed, joins, min_length=1, dtype=False):
    """index -> (first, last) index of its segment: a run of at least `min_length` consecutive live
    nodes for which `joins(node, trace)` holds (run in parts, or fused), of one result shape (and
    dtype), with no guard inside, in which no buffer is written that an operand reads through a
    view (so at other elements than the one being computed)."""
    runs, run, shape = [], [], None
    written, seen = set(), set()  # the run's buffers written, and those read through views
    for index in sorted(live):
        node = trace.nodes[index]
        # a segment's results are C-ordered (slab rows, or arrays made for the parts): one traced in another
        # order (a.T * 2) stays NumPy's, so that what is a view of it at the trace is one at the replay
        if not joins(node, trace) or isinstance(node.outputs, tuple) or not trace.c_ordered(node.outputs) \
                or node.errors is not None or node.filters is not None:
            runs.append(run)
            run = []
            continue
        viewed = {planner.buffer_of[root] for slot in node.slots_read()
                  for root in planner.roots.get(slot, ()) if root != slot and root in planner.buffer_of}
        guarded = run and any(after in guards_after for after in range(run[-1] + 1, index + 1))
        if run and (_kind(trace.values[node.outputs], dtype) != shape or guarded or viewed & written
                    or placed[index] in seen | viewed):
            runs.append(run)
            run = []
        if not run:
            written, seen = set(), set()
        run.append(index)
        written.add(placed[index])
        seen |= viewed
        shape = _kind(trace.values[node.outputs], dtype)
    runs.append(run)
    return {index: (run[0], run[-1]) for run in runs if len(run) >= max(min_length, 1) for index in run}


def _written_values(trace):
    """The slots of the values written into input arrays (what an input holds where a later call raises)."""
    return {slot for versions in trace.versions.values() for slot in versions}


def _splittable_apart_from(written):
    """`splittable`, but for the calls that make a value written into an input: those run whole, so that
    where a part of a segment raises, the input's last value named is one computed at every row (a part
    raising leaves the others' rows of a segment's results computed, and its own not)."""
    if not written:
        return splittable
    return lambda node, trace: node.outputs not in written and splittable(node, trace)


def _kind(value, dtype):
    return (value.shape, value.dtype) if dtype else value.shape


def _emit_kernel(members, trace, namespace, body, slabs, outside, copied):
    """The call of one fused kernel, then a name for each result that code outside the kernels
    reads (its row of the slab, copied if an output may share its memory)."""
    kernel = _jit_fuse.Kernel([(index, node) for index, node, _ in members], trace, slabs)
    name = f"kernel{members[0][0]}"
    namespace[name] = kernel.compile(trace)
    namespace[kernel.dtype.name] = kernel.dtype.type
    args = [kernel.slab] + kernel.arguments(trace)
    body.append(f"    {name}({', '.join(args)}, {kernel.size})  # fused: " + ", ".join(n.name for _, n, _ in members))
    for slot, row in kernel.rows.items():
        if slot in outside:
            view = f"{kernel.slab}[{row}]" + ("" if len(kernel.shape) == 1 else f".reshape({kernel.shape!r})")
            body.append(f"    s{slot} = {view}" + (".copy()" if slot in copied else ""))


def _emit_segment(members, trace, namespace, body, parts_source, read_after, fused_parts, planner):
    """The calls of one segment: its results' arrays made whole first, then `parts(part_j, rows, ...)`
    running a part function, defined in `parts_source`, over the rows in every core.

    A part walks its rows in blocks of about `BLOCK_BYTES` per array, each block through every call of
    the segment, so that a value is read again while it is still in the core's cache. A result that
    nothing outside the segment reads (`read_after` holds the slots that something does) lives only in
    a block-sized scratch array of the part: a gradient's forward values, used by its backward pass in
    the same segment, never reach main memory. Results that share a planned buffer share a scratch array.
    With numba, the part also gets a fused version (see `pullback._jit_blocks`), added to `fused_parts`."""
    name = f"part{members[0][0]}"
    first = trace.values[members[0][1].outputs]
    rows = first.shape[0]
    row_bytes = max(trace.values[node.outputs].itemsize for _, node, _ in members) * (first.size // rows or 1)
    block = max(1, _jit_parallel.BLOCK_BYTES // max(row_bytes, 1))
    scratch, cut, params, calls = {}, {}, {}, []  # scratch: slot -> its array's name
    memory = {}  # a block's name -> the planned buffers it is memory of (two names may be one buffer's)

    def buffers(slot):
        return frozenset(("b", planner.buffer_of[root]) for root in planner.roots.get(slot, {slot})
                         if root in planner.buffer_of)
    fusing = _jit_fuse.available()

    def cut_name(rendered):  # the block's rows of an array the segment reads or writes whole
        return cut.setdefault(rendered, f"x{len(cut)}")

    for position, (index, node, k) in enumerate(members):
        result = trace.values[node.outputs]
        reads, blocked = [], []
        typed = _typed_args(node, trace)
        for p, arg in enumerate(typed):
            slot = arg.slot if isinstance(arg, Ref) else None
            if slot in scratch:
                reads.append((slot, scratch[slot]))
                blocked.append(True)
                continue
            rendered = _render(arg, namespace, f"c{index}_{p}")
            if slot is not None:
                params[rendered] = None
            blocked.append(operand_kind(arg, trace, result) == "cut")
            reads.append((slot, cut_name(rendered) if blocked[-1] else rendered))
            if slot is not None and buffers(slot):
                memory[reads[-1][1]] = buffers(slot)
        if node.outputs in read_after:
            out = f"s{node.outputs}"
            if k is None:
                namespace[f"dtype_{out}"] = result.dtype
                body.append(f"    {out} = empty({result.shape!r}, dtype_{out})")
            else:
                body.append(f"    {out} = b{k}")
            params[out] = None
            out = cut_name(out)
            if k is not None:
                memory[out] = frozenset({("b", k)})
        else:
            out = scratch[node.outputs] = f"t{k}" if k is not None else f"t_s{node.outputs}"
            namespace[f"dtype_{out}"] = result.dtype  # (one dtype for a buffer k's values)
        values = [trace.values[a.slot] if isinstance(a, Ref) else a for a in typed]
        traced = [isinstance(a, Ref) for a in typed]
        operands = _jit_blocks.operands_of(node.fn, values, traced, result, blocked, [name for _, name in reads]) \
            if fusing and _positional_out(node) else None
        calls.append(_jit_blocks.Call(index, node.fn, reads, node.outputs, out, _positional_out(node), position,
                                      operands, result.dtype, node.outputs in read_after, memory))
    temps = {t: namespace[f"dtype_{t}"] for t in dict.fromkeys(scratch.values())}
    parameters = "".join(f", {p}" for p in params)
    steps = [(f"{call.line({})}  # {call.fn.__name__}", (call.position, call.fn.__name__)) for call in calls]
    parts_source += _part_function(name, parameters, temps, cut, steps, first.shape[1:], block, namespace)
    fused = _fused_steps(f"{name}_fused", calls, read_after, temps, namespace) if fusing else None
    if fused is not None:
        steps, temps, loops = fused
        parts_source += _part_function(f"{name}_fused", parameters, temps, cut, steps, first.shape[1:], block, namespace)
        fused_parts.append((name, _jit_blocks.FusedPart(loops)))
    namespace["parts"] = PARTS
    body.append(f"    parts({name}, {rows}, {block}{parameters})")


def _part_function(name, parameters, temps, cut, steps, row_shape, block, namespace):
    """The source of part function `name(lo, hi, n, arrays...)`: the block loop around `steps`, lines with
    what a warning they meet names ((position of the call in the segment, ufunc name), or None)."""
    lines = ["    n = min(hi - lo, n) or 1"]
    indent = "    "
    if temps:
        namespace[f"{name}_scratch"] = Scratch([(row_shape, dtype) for dtype in temps.values()], block)
        lines += [f"    held = {name}_scratch.take(n)", f"    {', '.join(temps)}, = held", "    try:"]
        indent += "    "
    lines += [f"{indent}for a in range(lo, hi, n):", f"{indent}    z = a + n", f"{indent}    if z > hi:",
              f"{indent}        z = hi"]
    lines += [f"{indent}        {t} = {t}[:z - a]" for t in temps]
    lines += [f"{indent}    {view} = {rendered}[a:z]" for rendered, view in cut.items()]
    head = len(lines)
    lines += [f"{indent}    {line}" for line, _ in steps]
    if temps:
        lines += ["    finally:", f"        {name}_scratch.give_back(held)"]
    namespace[f"{name}_ufuncs"] = (None,) * head + tuple(info for _, info in steps)  # by line: what warnings name
    return [f"def {name}(lo, hi, n{parameters}):"] + lines + [""]


def _fused_steps(name, calls, read_after, temps, namespace):
    """The steps of a part's fused version (see `pullback._jit_blocks`): the calls in the order
    `schedule` gives, each run of fusible calls as one loop over the block, which falls back to the
    run's NumPy calls on a block where it computed a value that is not finite; with the scratch
    arrays it needs (`temps` and one for each value a loop writes out) and its loops. None if
    nothing fuses."""
    order = _jit_blocks.schedule(calls)
    runs = [item for item in order if type(item) is list]
    if not runs:
        return None
    readers = {}  # slot -> the calls that read it
    for call in calls:
        for slot, _ in call.reads:
            readers.setdefault(slot, set()).add(id(call))
    last_read = {}  # slot -> the last step reading it
    for step, item in enumerate(order):
        for call in item if type(item) is list else [item]:
            for slot, _ in call.reads:
                last_read[slot] = step
    temps = dict(temps)
    names, free, steps, loops = {}, {}, [], []  # names: slot -> the scratch a loop wrote it into
    for step, item in enumerate(order):
        if type(item) is not list:
            steps.append((f"{item.line(names)}  # {item.fn.__name__}", (item.position, item.fn.__name__)))
        else:
            inside = {id(call) for call in item}
            stored = [call for call in item if call.out_slot in read_after or readers.get(call.out_slot, set()) - inside]
            if not stored:
                return None
            for call in stored:
                if not call.out_is_whole:  # into an array of its own: the loop's inputs stay as they were
                    pool = free.setdefault(call.dtype, [])
                    names[call.out_slot] = pool.pop() if pool else f"u{len([t for t in temps if t[0] == 'u'])}"
                    temps.setdefault(names[call.out_slot], call.dtype)
            loop = _jit_blocks.Loop(item, [call.out_slot for call in stored], names)
            loops.append(loop)
            loop_name = f"{name}_loop{len(loops)}"
            namespace[loop_name] = loop
            arguments = [f"flat_input({array})" for array in loop.inputs]
            arguments += [f"flat_output({names.get(c.out_slot, c.out_name)})" for c in stored]
            arguments += loop.scalars
            steps.append((f"if not {loop_name}.function({', '.join(arguments)}):  # fused: "
                          + ", ".join(call.fn.__name__ for call in item), None))
            steps += [(f"    {call.line(names)}  # {call.fn.__name__}", (call.position, call.fn.__name__))
                      for call in item]
        for slot, last in last_read.items():  # scratch a loop wrote into, read for the last time
            if last == step and slot in names:
                free.setdefault(temps[names[slot]], []).append(names.pop(slot))
    namespace.update(flat_input=_jit_blocks.flat_input, flat_output=_jit_blocks.flat_output)
    return steps, temps, loops


def _writes_in_place(node, index, trace, planner):
    """Whether a recorded `x[i] = v` may write into x instead of a copy: x is read for the last
    time, is an array the program made (not an input, a planned buffer or a view) and nothing
    that views it is read later."""
    if node.fn is not setitem_copy or not isinstance(node.args[0], Ref):
        return False
    slot = node.args[0].slot
    return (slot not in trace.inputs and slot not in planner.buffer_of and planner.roots.get(slot) == {slot}
            and planner.death.get(slot) == index)


def _setitem_in_place(x, index, value):
    x[index] = value
    return x


def _guard_line(guard, g_index):
    # equal values (the usual case) pass with one comparison; a zero of another sign, or a NaN for a NaN,
    # is told apart by `same` (-0.0 == 0.0 holds, but copysign(1, x) tells them apart)
    return (f"    g = convert{g_index}(s{guard.slot})\n"
            f"    if (g != expected{g_index} or g == 0) and not same(g, expected{g_index}): raise Retrace")


def _positional_out(node):
    """Whether the output buffer can follow the inputs positionally (NumPy parses it faster)."""
    return (isinstance(node.fn, np.ufunc) and not node.kwargs and len(node.args) == node.fn.nin
            and node.fn not in (np.maximum, np.minimum))  # NumPy deprecates a positional out for these two


def _call_arguments(node, trace, namespace, name):
    """The source of a call's arguments: `s1, c3_1, axis=None`."""
    parts = [_render(v, namespace, f"{name}_{i}") for i, v in enumerate(_typed_args(node, trace))]
    parts += [f"{k}={_render(v, namespace, f'{name}_{k}')}" if k.isidentifier() else f"**{{{k!r}: "
              f"{_render(v, namespace, f'{name}_{k}')}}}" for k, v in node.kwargs.items()]
    return ", ".join(parts)


def _typed_args(node, trace):
    """`node.args`, with a Python float beside arrays of the result's float dtype as a scalar of that
    dtype: NumPy casts it so anyway (a Python float is weakly typed), and a typed scalar is parsed
    faster. A float the dtype cannot hold (1e5 beside float16) stays as it is: NumPy's cast of it
    warns of the overflow at every call."""
    if node.elementwise and not isinstance(node.outputs, tuple):
        dtype = getattr(trace.values[node.outputs], "dtype", None)
        if dtype is not None and dtype.kind == "f":
            return tuple(dtype.type(v) if type(v) is float and holds(dtype, v) else v for v in node.args)
    return node.args


def _render(x, namespace, name):
    """Python source for an argument structure; constants go into `namespace` under `name`."""
    if isinstance(x, Ref):
        return f"s{x.slot}"
    if isinstance(x, (tuple, list)) and type(x) in (tuple, list):
        parts = [_render(v, namespace, f"{name}_{i}") for i, v in enumerate(x)]
        if type(x) is list:
            return "[" + ", ".join(parts) + "]"
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    if isinstance(x, dict) and type(x) is dict and all(isinstance(k, str) for k in x):
        return "{" + ", ".join(f"{k!r}: {_render(v, namespace, f'{name}_{k}')}" for k, v in x.items()) + "}"
    if isinstance(x, slice):
        return f"slice({_render(x.start, namespace, name + 's')}, " \
               f"{_render(x.stop, namespace, name + 'e')}, {_render(x.step, namespace, name + 'p')})"
    if x is None or type(x) in (bool, int, float, str):
        return repr(x) if not (type(x) is float and not np.isfinite(x)) else _constant(x, namespace, name)
    return _constant(x, namespace, name)


def _constant(x, namespace, name):
    namespace[name] = x
    return name


def _last_uses(trace, output_slots, live):
    """slot -> index of the last live node (or guard position) that reads it; outputs live forever."""
    last = {}
    for index in sorted(live):
        for slot in trace.nodes[index].slots_read():
            last[slot] = index
    for guard in trace.guards:
        last[guard.slot] = max(last.get(guard.slot, -1), guard.after)
    made_at = {trace.nodes[index].outputs: index for index in live}
    for versions in trace.versions.values():  # each value written into an input is kept until the next is made
        for slot, following in zip(versions, versions[1:]):
            last[slot] = max(last.get(slot, -1), made_at.get(following, -1))
    for slot in output_slots:
        last[slot] = float("inf")
    return last


def _needed_nodes(trace, output_slots):
    """Indices of the nodes the outputs and the guards depend on, the draws from a generator argument
    (each advances it, as the eager call does, whether its numbers are used or not), the calls that may raise
    on the values (see `_may_raise`, and indexing by a traced index that no earlier call checks) and each
    value written into an input (what the input holds where a later call raises); the rest is dead code."""
    needed = set(output_slots) | {guard.slot for guard in trace.guards}
    for versions in trace.versions.values():
        needed.update(versions)
    live = _depended_on(trace, needed, ())
    unchecked = _unchecked_indexing(trace, live)
    return _depended_on(trace, needed, unchecked) if unchecked else live


def _depended_on(trace, needed, kept):
    """The nodes that make the slots `needed`, the nodes `kept`, the draws and the calls that may raise, and
    the nodes those depend on."""
    needed, live = set(needed), set()
    for index in range(len(trace.nodes) - 1, -1, -1):
        node = trace.nodes[index]
        outs = node.outputs if isinstance(node.outputs, tuple) else (node.outputs,)
        if any(out in needed for out in outs) or index in kept or node.name.startswith("Generator.") \
                or _may_raise(node, trace):
            live.add(index)
            needed.update(node.slots_read())
    return live


def _unchecked_indexing(trace, live):
    """The dead nodes that index by a traced index (see `index_check`: an IndexError on some values, whether
    their result is used or not), but for those that an earlier live or kept node checks the same way (the
    forward pass's `x[labels]` checks the unused gradient's `np.add.at(g, labels, dy)`)."""
    checked, kept = set(), []
    for index, node in enumerate(trace.nodes):
        key = index_check(node, trace)
        if key is not None and key not in checked:
            checked.add(key)
            if index not in live:
                kept.append(index)
    return set(kept)


# numpy.linalg's functions that raise LinAlgError on some values (a singular matrix, NaNs), whether their result is
# used or not (np.linalg.inv(x) called to check x); the others (det, slogdet, qr, multi_dot, ...) never do
_LINALG_RAISING = frozenset(getattr(np.linalg, name) for name in (
    "solve", "inv", "cholesky", "eig", "eigh", "eigvals", "eigvalsh", "svd", "svdvals", "lstsq", "pinv",
    "tensorsolve", "tensorinv", "matrix_rank") if hasattr(np.linalg, name))


def _may_raise(node, trace):
    """Whether the call raises on some values, so that it is kept whether its result is used or not."""
    fn = node.fn
    if type(fn) is RaisesAgain:  # a call that raised where the function caught the error: it must raise again
        return True
    if getattr(fn, "__module__", None) != "numpy.linalg":
        return False
    if fn in _LINALG_RAISING:
        return True
    if fn is np.linalg.cond:  # by an SVD for these; NumPy's inverse for the others gives inf where it fails
        order = node.args[1] if len(node.args) > 1 else node.kwargs.get("p")
        return order is None or _by_svd(order)
    if fn is np.linalg.matrix_power:  # an inverse first
        power = node.args[1] if len(node.args) > 1 else node.kwargs.get("n", 0)
        return isinstance(power, int) and power < 0
    if fn is np.linalg.norm or fn is getattr(np.linalg, "matrix_norm", None):  # by an SVD, for these orders
        order = node.args[1] if len(node.args) > 1 else node.kwargs.get("ord")
        return _by_svd(order) and _of_matrices(node, trace)
    return False


def _by_svd(order):
    """Whether a matrix norm of this order (`ord`, `p`) is computed by an SVD."""
    return isinstance(order, (int, float, str, np.number)) and order in (2, -2, "nuc")


def _of_matrices(node, trace):
    """Whether np.linalg.norm's call takes matrix norms (np.linalg.matrix_norm's always does)."""
    if node.fn is not np.linalg.norm:
        return True
    axis = node.args[2] if len(node.args) > 2 else node.kwargs.get("axis")
    first = node.args[0]
    ndim = np.ndim(trace.values[first.slot] if isinstance(first, Ref) else first)
    return (ndim == 2 and axis is None) or (type(axis) is tuple and len(axis) == 2)


def _memory(trace, last_use):
    """(slot -> the last node index at which its memory is read, through itself or any view of
    it; slot -> the slots whose memory it may share, itself included)."""
    roots = {slot: {slot} for slot in trace.inputs}
    death = dict(last_use)
    for node in trace.nodes:
        shared = set()
        for slot in node.aliases:
            shared |= roots.get(slot, {slot})
        for out in node.outputs if isinstance(node.outputs, tuple) else (node.outputs,):
            roots[out] = {out} | shared
            for root in shared:
                death[root] = max(death.get(root, -1), last_use.get(out, -1))
    return death, roots
