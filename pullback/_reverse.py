"""The reverse-mode level: a tape recording what is done to tracked values.

A `Tape` belongs to one call of `gradient` or `pullback`. Each trainable float leaf of the
arguments becomes a `Tracked` handle on a node of that tape. Every NumPy operation on tracked
values runs its rule on the plain values and the tape appends a node `(spec, back, in_ids)`.
"""

import gc
import threading

import numpy as np

from ._arrays import is_foreign_array_type
from ._standins import dtype_of, is_stand_in, is_traced
from ._tangents import PerOperand
from ._values import Traced, Tracked, guard_kept, new_level, run_mixed

_FLOAT32, _FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)  # the dtypes of most arrays, checked first
_SCALAR_DTYPES = {np.float32: _FLOAT32, np.float64: _FLOAT64}


class Tape:
    """The nodes of one recording, in order: `(spec, back, in_ids)`, with `back` None for inputs.

    A node's id is its index; `spec` is what the sweep needs of its value (see `spec_of`);
    `back` maps the node's cotangent to those of the nodes `in_ids` (-1 for an argument
    that is not traced at this level).

    >>> import numpy as np
    >>> tape = Tape()
    >>> x = tape.leaf(np.ones(2))
    >>> y = np.sin(x)
    >>> len(tape.nodes), tape.nodes[1][2]
    (2, (0,))
    """

    __slots__ = ("level", "nodes", "closed", "write_check", "handed_out", "holds_traced", "guarded", "refused",
                 "__weakref__")

    def __init__(self):
        self.level = new_level()
        self.nodes = []
        self.closed = False
        self.write_check = None  # called with a node's id before an in-place write into it (see _leaves)
        self.handed_out = None  # stop_gradient's read-only copies of its values (see `read_only_value`)
        self.holds_traced = False  # whether a value recorded is traced by another level or is a pb.jit stand-in
        # the plain arrays a pullback on this tape keeps, made read-only while `f` runs ({id: array}; see
        # `guard_kept`), or None where nothing is guarded (a tape no gradient call of user code records)
        self.guarded = None
        self.refused = None  # the first of pullback's refusals while `f` runs (see `_errors.refused`)

    def leaf(self, value):
        """A new input node holding `value`."""
        self.holds_traced = self.holds_traced or _not_plain(value)
        self.nodes.append((spec_of(value), None, ()))
        return Tracked(value, self, len(self.nodes) - 1)

    def apply(self, rule, args, kwargs):
        """Run `rule` on the plain values of this tape's tracked `args` and record the result."""
        values = []
        ids = []
        mixed = False
        for a in args:
            if type(a) is Tracked:
                if a._tape is self:
                    values.append(a._value)
                    ids.append(a._id)
                    continue
                mixed = True  # a value an outer level traces
            values.append(a)
            ids.append(-1)
        if mixed:
            y, back = run_mixed(rule, values, kwargs, [v for v, i in zip(values, ids) if i >= 0])
        else:
            y, back = rule(*values, **kwargs)
        if -1 in ids:
            if type(back) is PerOperand:
                back = back.traced_only(ids)
            if self.guarded is not None:
                guard_kept(self.guarded, back, [v for v, i in zip(values, ids) if i < 0], kwargs)
        elif kwargs and self.guarded is not None:
            guard_kept(self.guarded, back, (), kwargs)
        return self.record(y, back, ids)

    def record(self, y, back, ids):
        """Put `y` on the tape if it can carry a gradient (float or complex); return what the user sees."""
        if type(y) is np.ndarray:
            dtype = y.dtype
            if (dtype is _FLOAT32 or dtype is _FLOAT64 or dtype.kind in "fc") and not self.closed:  # the hot path
                nodes = self.nodes
                nodes.append(((y.shape, dtype), back, ids))
                return Tracked(y, self, len(nodes) - 1)
            if dtype.kind in "fc":
                self.push(y, back, ids)  # raises the closed-tape error
        elif (type(y) is np.float64 or type(y) is np.float32) and not self.closed:
            # a NumPy scalar (a full reduction's result) is kept as a 0-d array's spec: the sweep then fits
            # its cotangent, a 0-d array, without the checks a value kept as it is needs
            nodes = self.nodes
            nodes.append((((), _SCALAR_DTYPES[type(y)]), back, ids))
            return Tracked(y, self, len(nodes) - 1)
        elif isinstance(y, (Traced, float, complex, np.inexact)) or is_foreign_array_type(type(y)):  # Dask, CuPy, ...
            kind = dtype_of(y).kind
            if kind == "f" or kind == "c":
                return Tracked(y, self, self.push(y, back, ids))
        elif several_outputs(y):
            return self._record_many(y, back, ids)
        return y  # integers and booleans carry no gradient

    def _record_many(self, ys, back, ids):
        """Several outputs (e.g. `eigh`): one node for the tuple (or list), one per float element."""
        group = self.push(ys, back, ids)
        outs = [self.record(y, _select(j, ys), (group,)) for j, y in enumerate(ys)]
        return like_outputs(ys, outs)

    def push(self, y, back, in_ids):
        """Record that `back` maps the cotangent of a new node `y` to those of `in_ids`."""
        if self.closed:
            raise RuntimeError(
                "A tracked value was used after the gradient call that tracked it had finished. "
                "Values escaping `f` through globals or closures carry no gradient; "
                "use pb.stop_gradient(x) to keep a plain copy."
            )
        kind = type(y)
        if kind is not np.ndarray and kind is not float and not self.holds_traced and _not_plain(y):
            self.holds_traced = True
        nodes = self.nodes
        nodes.append((spec_of(y), back, in_ids))
        return len(nodes) - 1

    def close(self):
        self.closed = True


def _not_plain(value):
    """Whether `value` is traced (by a level other than the tape recording it) or a pb.jit stand-in."""
    return is_traced(value) or is_stand_in(value)


def _select(j, ys):
    """The pullback of output `j` of `ys`: its cotangent at place `j` of a cotangent shaped as `ys` is
    (a namedtuple's its namedtuple, a list's a list), which the operation's pullback then gets."""
    n, kind = len(ys), type(ys)  # not `ys`: the tape would keep every output alive

    def back(g):
        parts = [None] * n
        parts[j] = g
        return (_outputs_of_kind(kind, parts),)
    return back


def several_outputs(y):
    """Whether an operation's result `y` is several outputs: a tuple (a namedtuple too) or a list."""
    return isinstance(y, tuple) or type(y) is list


def like_outputs(ys, parts):
    """`parts` in the container the several outputs `ys` are in: a tuple, a namedtuple or a list."""
    return _outputs_of_kind(type(ys), parts)


def _outputs_of_kind(kind, parts):
    return kind._make(parts) if hasattr(kind, "_fields") else kind(parts)


def spec_of(value):
    """What the tape keeps of a node's value: `(shape, dtype)` for an array, so the array itself
    is freed as soon as no rule needs it; other values (Python floats, NumPy scalars, values of
    outer levels) as they are; nothing for the tuple of a several-output operation."""
    if type(value) is np.ndarray or is_foreign_array_type(type(value)):
        return value.shape, value.dtype
    if several_outputs(value):
        return None
    return value


_gc_lock = threading.Lock()
_gc_state = {"depth": 0, "was_enabled": False}


class _CollectorPause:
    """The context manager `collector_paused` returns (a class: cheaper to enter than a generator)."""

    __slots__ = ()

    def __enter__(self):
        with _gc_lock:
            if _gc_state["depth"] == 0:
                _gc_state["was_enabled"] = gc.isenabled()
                gc.disable()
            _gc_state["depth"] += 1

    def __exit__(self, *exc_info):
        with _gc_lock:
            _gc_state["depth"] -= 1
            if _gc_state["depth"] == 0 and _gc_state["was_enabled"]:
                gc.enable()
        return False


_PAUSE = _CollectorPause()


def collector_paused():
    """Hold Python's cyclic garbage collector while a tape is recorded or swept.

    A tape of many operations is many small containers (nodes, closures), and the collector
    would rescan all of them again and again as it grows, making a long tape cost more than
    linearly. Nothing on a tape forms a cycle, so collection can wait until the call ends.
    Re-entrant and thread-safe: the collector resumes (if it was on) when the last call ends.

    >>> import gc
    >>> with collector_paused():
    ...     gc.isenabled()
    False
    """
    return _PAUSE
