"""In-place writes on traced values, as NumPy does them: a write through a view reaches its base.

A traced array is a handle. `x[i] = v`, `x += y` and `ufunc(..., out=x)` compute the new value
functionally and rebind the handle to it, so every alias of the handle sees the change.

Views. When an operation gives a NumPy view of its input (basic indexing, reshape, transpose,
ravel, ...), the result gets a `ViewLink` to the root array whose memory it shares. Whether NumPy
made a view or a copy is read from the plain values themselves, so pullback follows NumPy's
choice exactly. A write through a view is a recorded scatter of the view's new value into its
root; after any write to a root, each of its live views is re-derived from it by a recorded
gather. Code that writes into no array that has live views pays nothing for this.

>>> import numpy as np, pullback as pb
>>> def f(x):
...     y = x.reshape(2, 2)
...     y[:, 0] *= 10.0     # writes through the view into x
...     return np.sum(x * x)
>>> pb.gradient(f, np.arange(4.0))
(array([  0.,   2., 400.,   6.]),)
"""

import dis
import sys
import threading
import weakref

import numpy as np

from ._arrays import indexable_by
from ._registry import FUNCTIONS
from ._standins import astype, getitem, index_update, is_stand_in, is_traced


class ViewLink:
    """How a view handle is tied to its root: which elements of the root it shows.

    `positions()` (computed on the first write, then kept) gives, for each element of the
    view, its index into the flattened root.
    """

    __slots__ = ("root", "parent", "plain", "parent_plain", "readonly", "_positions")

    def __init__(self, root, parent, plain, parent_plain, readonly):
        self.root, self.parent, self.readonly = root, parent, readonly
        self.plain, self.parent_plain = plain, parent_plain
        self._positions = None

    def positions(self):
        if self._positions is None:
            index = element_positions(self.plain, self.parent_plain)
            if self.parent is not None:
                index = self.parent.positions().reshape(-1)[index]
            self._positions = index
            self.plain = self.parent_plain = None
        return self._positions


def plain_of(x):
    """The plain value inside traced `x`, at every level of nesting."""
    while is_traced(x):
        x = x._value
    return x


def concrete_of(x):
    """`plain_of(x)`, and inside a `pb.jit` trace the array a traced stand-in holds at trace time
    (whose memory tells, as in NumPy, whether an operation made a view)."""
    x = plain_of(x)
    concrete = getattr(type(x), "_concrete", None)
    return x if concrete is None else concrete(x)


def holds_array(x):
    """Whether traced `x` stands for a (mutable) NumPy array rather than an immutable scalar."""
    return isinstance(concrete_of(x), np.ndarray)


def mark_view(view, base):
    """Tie `view` (traced) to `base` (traced) if its plain value is a NumPy view of `base`'s.

    A copy (NumPy's `ravel` of a transposed array, say) is left alone: writes to it stay in it.
    """
    plain, parent_plain = concrete_of(view), concrete_of(base)
    if (type(plain) is not np.ndarray or type(parent_plain) is not np.ndarray or plain.dtype != parent_plain.dtype
            or not np.may_share_memory(plain, parent_plain)):
        return
    parent = getattr(base, "_base", None)
    root = base if parent is None else parent.root
    readonly = not plain.flags.writeable or (parent is not None and parent.readonly)
    view._base = ViewLink(root, parent, plain, parent_plain, readonly)
    register_view(root, view)


def register_view(root, view):
    """Record `view` (traced, its `_base` set) among the live views `root` re-derives after a write."""
    views = getattr(root, "_views", None)
    if views is None:
        root._views = [weakref.ref(view)]
        return
    views.append(weakref.ref(view))
    if len(views) > 32 and len(views) & (len(views) - 1) == 0:  # now and then, forget views that died
        views[:] = [ref for ref in views if ref() is not None]


def element_positions(view, base):
    """For each element of plain array `view`, a view of plain array `base`: its index into `base.ravel()`.

    >>> x = np.zeros((3, 4))
    >>> element_positions(x[1:, ::2].T, x)
    array([[ 4,  8],
           [ 6, 10]])
    """
    if base.size == 0 or view.size == 0:
        return np.zeros(view.shape, dtype=np.intp)
    start = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    offsets = start + _byte_offsets(view)
    if base.flags.c_contiguous:
        index, rest = np.divmod(offsets, base.itemsize)
        found = (rest == 0) & (index >= 0) & (index < base.size)
    else:
        base_offsets = _byte_offsets(base).reshape(-1)
        order = np.argsort(base_offsets, kind="stable")
        ordered = base_offsets[order]
        at = np.minimum(np.searchsorted(ordered, offsets), base.size - 1)
        found = ordered[at] == offsets
        index = order[at]
    if not found.all():
        raise ValueError("Cannot write through this array: it shares only part of its memory with the array it was "
                         "taken from. Write into a copy (y = x.copy()) instead.")
    return index


def _byte_offsets(a):
    offsets = np.zeros(a.shape, dtype=np.intp)
    for axis, (n, stride) in enumerate(zip(a.shape, a.strides)):
        step = np.arange(n, dtype=np.intp) * stride
        offsets = offsets + step.reshape((n,) + (1,) * (a.ndim - axis - 1))
    return offsets


def set_item(x, index, value):
    """`x[index] = value` for traced array `x`, seen through every view of it and every alias.

    An index that names an element twice is fine when every write to it takes the same element
    of `value` (`x[[0, 0]] = 5.0`); when the writes differ NumPy keeps one of them, so that is refused.
    """
    index = _plain_index(index)
    if not names_each_once(index):
        index, value = _without_repeats(x.shape, index, value)
    rebind(x, FUNCTIONS[index_update](x, index, value))


def names_each_once(index):
    """Whether `x[index]` cannot name an element twice, known without reading the index's values (a Dask
    mask's would be computed): ints, slices, None, `...` and boolean masks, unlike integer arrays."""
    parts = index if type(index) is tuple else (index,)
    return all(p is None or p is Ellipsis or isinstance(p, (int, np.integer, slice))
               or getattr(getattr(p, "dtype", None), "kind", None) == "b" for p in parts)


def _without_repeats(shape, index, value):
    """`(index, value)` writing each element of an array of `shape` once, as `x[index] = value` does."""
    selected = indexable_by(np.arange(int(np.prod(shape))).reshape(shape), index)[index]
    positions = selected.reshape(-1)
    if np.unique(positions).size == positions.size:
        return index, value
    try:
        sources = np.broadcast_to(np.arange(int(np.size(value))).reshape(np.shape(value)), selected.shape).reshape(-1)
    except ValueError:
        return index, value  # NumPy's own error follows
    positions, sources = _each_once(positions, sources, alike=_updated_by_a_number(value))
    flat_value = FUNCTIONS[np.ravel](value) if is_traced(value) else np.ravel(value)
    return np.unravel_index(positions, shape), indexable_by(flat_value, sources)[sources]


# The id of the result of the latest in-place operator (`v += s`) on a traced value, where `s` is a number; else None.
_BY_A_NUMBER = threading.local()  # per thread: each has its own latest operator


def note_in_place(result, operand):
    """Note the result of the in-place operator `v op= operand` (see `_updated_by_a_number`)."""
    number = type(operand) in (float, int, complex, bool) or getattr(operand, "ndim", None) == 0
    _BY_A_NUMBER.id = id(result) if number else None


def _updated_by_a_number(value):
    """Whether `value` is what `y[index] op= s`, `s` a number, stores: Python computes `v = y[index]`, `v op= s`,
    then `y[index] = v`, so the elements of `value` written to one element of `y` are computed alike."""
    if getattr(_BY_A_NUMBER, "id", None) != id(value):
        return False
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_code[frame.f_lasti] != _STORE_SUBSCR:  # up to the user's line
        frame = frame.f_back
    if frame is None:
        return False
    steps = [i for i in dis.get_instructions(frame.f_code) if i.offset <= frame.f_lasti][-4:]
    if len(steps) == 4 and steps[0].opname == "BINARY_OP":  # Python 3.11 and newer
        return (steps[0].argrepr.endswith("=")
                and [(i.opname, i.arg) for i in steps[1:]] == [("SWAP", 3), ("SWAP", 2), ("STORE_SUBSCR", None)])
    # Python 3.10: INPLACE_ADD (or another INPLACE_ operator), ROT_THREE, STORE_SUBSCR
    return (len(steps) == 4 and steps[1].opname.startswith("INPLACE_")
            and [i.opname for i in steps[2:]] == ["ROT_THREE", "STORE_SUBSCR"])


_STORE_SUBSCR = dis.opmap["STORE_SUBSCR"]
# the call instructions of Python 3.11 and newer, and of 3.10 (CALL_FUNCTION, CALL_FUNCTION_KW, CALL_METHOD)
_CALLS = frozenset(dis.opmap[name] for name in ("CALL", "PRECALL", "CALL_FUNCTION_EX", "CALL_KW", "CALL_FUNCTION",
                                                "CALL_FUNCTION_KW", "CALL_METHOD") if name in dis.opmap)


def c_call_site(frame):
    """Where Python frame `frame` is, if it is at a call, not a subscript (`x[i]`), so that C code it called asks:
    the frame and the instructions it and its callers are at, the same for every access made during that call.
    Else None."""
    if frame.f_code.co_code[frame.f_lasti] not in _CALLS:
        return None
    site = [id(frame)]
    for _ in range(4):  # (another call made from the same helper has another caller's instruction)
        site += (frame.f_code, frame.f_lasti)
        frame = frame.f_back
        if frame is None:
            break
    return tuple(site)


def in_place(handle, new):
    """`handle op= value`. An array handle takes the new value, so every alias of it sees the
    change as in NumPy; a scalar is immutable, so only the name is rebound (to `new`)."""
    if not holds_array(handle):
        return new
    rebind(handle, new)
    return handle


def write_elementwise(handle, new, operands):
    """`handle op= v` or `ufunc(*operands, out=handle)`: `new`, computed element by element from `operands`,
    written into traced `handle`, seen through every view and alias.

    Where `handle` shows some element of its root in several places (a writeable sliding_window_view),
    NumPy computes from the operands as they were and writes each place, so that element ends up holding
    one of the values computed for its places. That is well defined where every place computes the same
    thing: each reads the same elements of the traced operands and the same values (bit for bit) of the
    constant ones (`w += 1`, `w += np.ones(3)`, `np.exp(w, out=w)`), or a constant `new` holds the same
    value at each place (`np.floor(w, out=w)`). Otherwise it is refused, naming the construct.
    """
    link = getattr(handle, "_base", None)
    if link is None or link.readonly or not shows_elements_twice(link):
        return in_place(handle, new)
    if is_traced(new):
        flat = FUNCTIONS[np.ravel](_fitted(handle, new))
        compared = operands
    elif np.shape(new) != handle.shape:
        raise ValueError(f"In-place operation would change the shape from {handle.shape} to {np.shape(new)}")
    else:  # a piecewise-constant result (w //= 1.0): constants written into the root
        flat = np.ravel(new).astype(handle.dtype)
        compared = (np.reshape(flat, handle.shape),)
    root, positions = link.root, link.positions().reshape(-1)
    order = np.argsort(positions, kind="stable")
    repeated = positions[order][1:] == positions[order][:-1]  # the next place shows the same element
    if _places_differ(handle.shape, compared, order, repeated):
        raise ValueError(_OVERLAPPING_WRITE)
    targets, first = np.unique(positions, return_index=True)
    _write_root(root, FUNCTIONS[index_update](root, _root_index(root, targets), flat[first]))
    return handle


def shows_elements_twice(link):
    """Whether a view, tied to its root by `link`, shows some element of the root in more than one place."""
    positions = link.positions()
    return positions.size > 1 and np.ndim(link.root) > 0 and np.bincount(positions.ravel()).max() > 1


def _places_differ(shape, operands, order, repeated):
    """Whether two places of an output of `shape` that show one element of the root (consecutive in `order`,
    where `repeated` holds) read different elements of a traced operand, or different values of a constant."""
    for x in operands:
        if np.ndim(x) == 0:  # every place reads it
            continue
        if is_traced(x):
            read = np.broadcast_to(root_positions(x)[1], shape).reshape(-1)  # the element of its root each reads
            if _differ_between_places(read, order, repeated):
                return True
        elif decided(_differ_between_places, np.ravel(np.broadcast_to(x, shape)), order, repeated):
            return True
    return False


def decided(test, *args):
    """`bool(test(*args))`. Where an argument is a `pb.jit` stand-in, the test is recorded and its answer
    guarded, so that a replay whose values answer otherwise traces again."""
    stand_in = next((a for a in args if is_stand_in(a)), None)
    if stand_in is None:
        return bool(test(*args))
    return bool(stand_in.record_primitive(test, test.__name__, args, {}))


def root_positions(x):
    """The root of traced array `x` and, for each element of `x`, its index into the flattened root."""
    link = getattr(x, "_base", None)
    if link is None:
        return x, np.arange(int(np.size(plain_of(x)))).reshape(np.shape(plain_of(x)))
    return link.root, link.positions()


def _differ_between_places(values, order, repeated):
    """Whether flat `values`, taken in `order`, differ (bit for bit: -0.0 is not 0.0) where `repeated` holds."""
    ordered = values[order]
    if ordered.dtype.hasobject:
        differ = ordered[1:] != ordered[:-1]
    else:
        bits = np.ascontiguousarray(ordered).view(np.uint8).reshape(ordered.size, -1)
        differ = np.any(bits[1:] != bits[:-1], axis=1)
    return bool(np.any(differ & repeated))


_OVERLAPPING_WRITE = (
    "This in-place write goes into a view that shows some elements of its base in several places (a writeable "
    "np.lib.stride_tricks.sliding_window_view), and computes different values for the places "
    "of one element (w += v with v varying across windows, w[...] = other); NumPy keeps one of them, in an "
    "order it does not guarantee. Compute the new values of the base itself (x[...] = ...), or write into a "
    "copy (w = w.copy()). Writes that compute the same value at every place (w += 1, w *= 2, np.exp(w, out=w)) "
    "are supported.")


def rebind(handle, new):
    """Make `handle` (a traced array the user holds) refer to `new`, as NumPy's in-place writes do:
    a view writes into its root, and every live view of that root sees the change."""
    new = _fitted(handle, new)
    link = getattr(handle, "_base", None)
    if link is None:
        _write_root(handle, new)
        return
    if link.readonly:
        refusal, part = None, link
        while part is not None and refusal is None:  # a view of a part refuses as the part does
            refusal, part = getattr(part, "refusal", None), part.parent
        raise ValueError(refusal or (
            "assignment destination is read-only: NumPy gives a read-only view here (np.diagonal, np.broadcast_to, "
            "...), which shares memory with the array it was taken from. Write into a copy (d = np.diagonal(x).copy())."
        ))
    root = link.root
    try:
        written = FUNCTIONS[index_update](root, _root_index(root, link.positions()), new)
    except ValueError as error:
        if not shows_elements_twice(link):
            raise
        raise ValueError(_OVERLAPPING_WRITE) from error
    _write_root(root, written, handle, new)


def _fitted(handle, new):
    # a piecewise-constant result (x //= 0.3): a constant written into the array; a NumPy scalar (what arithmetic
    # on a 0-d array gives): written into it, so that it stays a 0-d array
    if not is_traced(new) or (not handle.shape and not holds_array(new)):
        new = FUNCTIONS[index_update](handle, Ellipsis, new)
    if type(new) is not type(handle):
        raise TypeError(
            "In-place write would mix forward-mode and reverse-mode values in one array; "
            "assign to a new variable instead (y = x + v)."
        )
    if new.shape != handle.shape:
        raise ValueError(f"In-place operation would change the shape from {handle.shape} to {new.shape}")
    if new.dtype != handle.dtype:
        new = FUNCTIONS[astype](new, handle.dtype)
    return new


def _write_root(root, new, writer=None, written=None):
    """Rebind `root` to `new`, then re-derive each of its live views from it (`writer`, the view written
    through, already knows its new value: `written`)."""
    check = getattr(getattr(root, "_tape", None), "write_check", None)
    if check is not None:  # a write into an argument: see `Arguments.refuse_shared_write`
        check(getattr(root, "_id", None))
    refs = getattr(root, "_views", None)
    views = [] if refs is None else [v for v in (ref() for ref in refs) if v is not None and v._base.root is root]
    old_root, olds = plain_of(root), [plain_of(v) for v in views]
    _assign(root, new)
    if refs is not None:
        refs[:] = [weakref.ref(v) for v in views]
    new_root = plain_of(root)
    if type(old_root) is np.ndarray and type(new_root) is np.ndarray and _relaid(new_root, old_root):
        new_root = _hold(root, _laid_out_as(new_root, old_root))
    elif is_stand_in(old_root) and is_stand_in(new_root) and _relaid(concrete_of(new_root), concrete_of(old_root)):
        new_root = _hold(root, old_root.record_primitive(_laid_out_as, "laid_out_as", (new_root, old_root), {}))
    for view, old in zip(views, olds):
        positions = view._base.positions()
        if view is writer:
            fresh = written
        elif root.ndim == 0:
            fresh = FUNCTIONS[np.reshape](root, positions.shape)
        else:
            fresh = FUNCTIONS[getitem](root, _root_index(root, positions))
        derive = getattr(view._base, "derive", None)  # the real or imaginary part of a complex array
        if derive is not None and view is not writer:
            fresh = derive(fresh)
        _assign(view, _fitted(view, fresh))
        if derive is None:
            _keep_layout(view, old, old_root, new_root)
    copies = getattr(root, "_read_only", None)
    if copies:
        update_copies(root, copies)


def update_copies(root, copies):
    """After a write into `root`, give each copy `pb.stop_gradient` made of it or of a view of it its new
    value: without pullback the value is the array itself, so it and its views show the write. `copies`
    holds `[where, plain value, weak reference to the copy, None, the copy or None]` (see
    `_values.read_only_value`; under `pb.jit` the writable copy fourth). Copies no longer in use are dropped:
    the one kept for reuse first lets go."""
    new = plain_of(root)
    live = []
    for entry in copies:
        entry[4] = None
        where, _, ref, private, _ = entry
        value = ref() if private is None else private
        if value is None:
            continue
        if where is None:  # of the root itself, which holds the same value while not written again
            entry[1] = plain = new
        else:  # of a view: its elements of the root
            positions, derive = where
            entry[1], plain = None, np.reshape(new, -1)[positions]
            if derive is not None:
                plain = derive(plain)
        if private is None:
            value.flags.writeable = True  # its own memory, read-only to user code only
            np.copyto(value, plain)
            value.flags.writeable = False
        else:
            _copy_into(private, plain)
        live.append(entry)
    copies[:] = live


def _copy_into(private, plain):
    """`np.copyto(private, plain)` of `pb.jit`'s stand-ins: the trace keeps the read-only view of `private`
    that user code holds, and its `s[index]` views, in step; another view of it (`s.T`) it refuses."""
    try:
        np.copyto(private, plain)
    except TypeError as error:  # pb.jit's JitError, which names np.copyto: name what the user wrote
        raise type(error)(
            "pb.jit: an array y is written in place (y[i] = ..., y += ...) while a view of s = pb.stop_gradient(y) "
            "other than s[index] (s.T, s.reshape(...), s.ravel()) is in use: the replay could not keep that view in "
            "step with the write, which without pb.jit shows in it. Take the view after the write.") from error


def detach(view):
    """Make traced `view` an array of its own holding its current value: later writes into its root no longer
    show in it, nor do writes into it reach the root. A row that is no view (of an empty array) is left as it is."""
    base = getattr(view, "_base", None)
    if base is None:
        return
    refs = getattr(base.root, "_views", None)
    if refs is not None:
        refs[:] = [ref for ref in refs if ref() is not view]
    _assign(view, FUNCTIONS[np.copy](view))
    del view._base


def _assign(handle, new):
    for name in type(handle).__slots__ + ("_value", "_tape"):
        setattr(handle, name, getattr(new, name))


def _root_index(root, positions):
    return Ellipsis if root.ndim == 0 else np.unravel_index(positions, root.shape)


def _laid_out_as(new, old):
    """A copy of plain array `new` in memory of its own, with the strides of `old` (of the same shape), so that
    a write keeps an array's layout as NumPy's in-place writes do (a strided or reversed array stays so)."""
    low, high = _span(old)
    memory = np.empty(high - low + old.itemsize, np.uint8)
    laid = np.ndarray(old.shape, new.dtype, memory, offset=-low, strides=old.strides)
    laid[...] = new
    laid.flags.writeable = bool(new.flags.writeable)
    return laid


def _relaid(new, old):
    """Whether plain `new`, the value written into an array that held `old`, is laid out otherwise (and `old`
    shows each element of its memory once, so that a copy laid out as it is holds `new`'s values)."""
    return (type(new) is np.ndarray and type(old) is np.ndarray and new.strides != old.strides
            and new.shape == old.shape and new.size > 1 and _apart(old))


def _apart(a):
    """Whether no two elements of `a` share memory (checked axis by axis, the smallest stride first)."""
    extent = a.itemsize
    for stride, n in sorted((abs(stride), n) for n, stride in zip(a.shape, a.strides) if n > 1):
        if stride < extent:
            return False
        extent += stride * (n - 1)
    return True


def _span(a):
    """The lowest and highest byte offsets of `a`'s elements from its first element."""
    reach = [(n - 1) * stride for n, stride in zip(a.shape, a.strides)]
    return sum(min(r, 0) for r in reach), sum(max(r, 0) for r in reach)


def _hold(handle, plain):
    """Give traced `handle` (at its innermost level) the plain value `plain`, equal to the one it holds."""
    holder = handle
    while is_traced(holder._value):
        holder = holder._value
    holder._value = plain
    return plain


def _keep_layout(view, old, old_root, new_root):
    """Make the re-derived `view`'s plain value a NumPy view of the root's new plain value, laid out as
    before, so that later reshapes and ravels of it make a view or a copy exactly as NumPy would."""
    if is_stand_in(old):
        _keep_axis_order(view, old)
        return
    if (type(old) is not np.ndarray or type(old_root) is not np.ndarray or type(new_root) is not np.ndarray
            or new_root.strides != old_root.strides or new_root.shape != old_root.shape or old.size == 0
            or old.dtype != new_root.dtype or not np.may_share_memory(old, old_root)):
        return
    start = old.__array_interface__["data"][0] - old_root.__array_interface__["data"][0]
    root_low, root_high = _span(old_root)
    low, high = _span(old)
    if start % new_root.itemsize or start + low < root_low or start + high > root_high:
        return  # not inside the root's memory as laid out: keep the gathered copy
    as_strided = np.lib.stride_tricks.as_strided
    origin = as_strided(new_root, (2,), (start,))[1:]  # (the element `start` bytes from the root's first)
    _hold(view, as_strided(origin, old.shape, old.strides, writeable=bool(old.flags.writeable)))


def _keep_axis_order(view, old):
    """Under `pb.jit` (stand-in values): lay the re-derived `view` out as its old value was (a transposed view
    stays F-ordered, a strided or reversed one keeps its gaps), so that its flags, strides, `ravel(order="K")`
    and whether a reshape or ravel of it is a view agree with NumPy's. Recorded as a copy with those strides."""
    holder = view
    while is_traced(holder._value):
        holder = holder._value
    fresh = holder._value
    if _relaid(concrete_of(fresh), concrete_of(old)):
        holder._value = old.record_primitive(_laid_out_as, "laid_out_as", (fresh, old), {})


class FlatView:
    """`x.flat` of a traced array: `x.flat[i]` reads a copy; `x.flat[i] = v` writes into `x`.

    >>> import numpy as np, pullback as pb
    >>> def f(x):
    ...     x.flat[::3] = 0.0
    ...     return np.sum(x * x)
    >>> pb.gradient(f, np.ones((2, 2)))
    (array([[0., 2.],
           [2., 0.]]),)
    """

    __slots__ = ("base",)

    def __init__(self, base):
        self.base = base

    def __getitem__(self, index):
        return self.base.flatten()[index]

    def __setitem__(self, index, value):
        positions = np.arange(self.base.size).reshape(-1)[_plain_index(index)]
        write_flat(self.base, positions, value, reads_as_written=True)

    def __len__(self):
        return self.base.size

    def __iter__(self):
        return iter(self.base.flatten())

    def copy(self):
        """A 1-D copy of the array, as `flatiter.copy()`."""
        return self.base.flatten()


def write_flat(x, positions, value, cycle=None, reads_as_written=False):
    """`x.flat[positions] = value` for traced array `x` (positions plain ints), seen through every view.

    As in NumPy, `value` is repeated (or cut) to fill the positions: position `k` gets
    `value.flat[cycle[k] % value.size]`, with `cycle` `range(len(positions))` unless given.
    An element written twice must get the same element of `value` both times. With `reads_as_written`
    (`x.flat[i] = v`, `x.flat = v`, np.fill_diagonal: NumPy reads `v` as it writes `x`, element by
    element, so a `v` that is a view of `x` may read elements already written), such a `v` is refused
    where a write would come before a read of the same element.
    """
    positions = np.asarray(positions, dtype=np.intp).reshape(-1)
    n, size = positions.size, int(np.size(value))
    if n == 0 or size == 0:  # NumPy writes nothing from an empty value (np.place refuses one itself)
        return
    take = (np.arange(n) if cycle is None else np.asarray(cycle, dtype=np.intp).reshape(-1)) % size
    if reads_as_written:
        _refuse_overlap(x, positions, value, take)
    positions, take = _each_once(positions, take)
    flat_value = FUNCTIONS[np.ravel](value) if is_traced(value) else np.ravel(value)
    if size == 1:
        value = flat_value[0]
    elif take.size != size or np.any(take != np.arange(size)):
        value = flat_value[take]
    else:
        value = flat_value
    flat = FUNCTIONS[index_update](x.flatten(), positions, value)
    rebind(x, FUNCTIONS[np.reshape](flat, x.shape))


def _refuse_overlap(x, positions, value, take):
    """Refuse `x.flat[positions] = value` where `value` is a view of the array `x` writes into and some
    element of it is read after it was written (NumPy then gives the element's new value, or the old one
    where it copies `value` first, depending on layout); writing into an element before reading it,
    or reading each element before it is written, gives what a copy gives, and is allowed."""
    if not (is_traced(value) and holds_array(value)):
        return
    x_link, v_link = getattr(x, "_base", None), getattr(value, "_base", None)
    x_root = x if x_link is None else x_link.root
    if (value if v_link is None else v_link.root) is not x_root:
        return
    x_at = np.arange(x.size) if x_link is None else x_link.positions().reshape(-1)
    v_at = np.arange(value.size) if v_link is None else v_link.positions().reshape(-1)
    written, read = x_at[positions], v_at[take]  # step k writes root element written[k], reads read[k]
    step = np.full(x_root.size, positions.size, dtype=np.intp)
    step[written[::-1]] = np.arange(positions.size)[::-1]  # the first step that writes each element
    if np.any(step[read] < np.arange(positions.size)):
        raise ValueError(
            "x.flat[...] = v (or x.flat = v, np.fill_diagonal) with v a view of x: NumPy reads v while it writes x, "
            "so some elements of v would be read after they were overwritten (or not, where NumPy copies v first). "
            "Write a copy instead: x.flat = v.copy().")


def _each_once(targets, sources, alike=False):
    """`(targets, sources)` with each target once: writing `sources[k]` into `targets[k]` for every `k`
    means that when every write to a target takes the same source, or (`alike`) sources computed alike;
    otherwise NumPy keeps one of them."""
    unique, first = np.unique(targets, return_index=True)
    if unique.size == targets.size:
        return targets, sources
    order = np.argsort(targets, kind="stable")
    ordered, from_ = targets[order], indexable_by(sources, order)[order]
    repeated = ordered[1:] == ordered[:-1]
    if not alike and np.any(from_[1:][repeated] != from_[:-1][repeated]):
        raise ValueError(
            "This indexed assignment writes the same element more than once, from different elements of the "
            "value (y[[0, 0]] = v, or y[[0, 0]] += v, with v of two elements); NumPy keeps one of the writes, in "
            "an order it does not guarantee, so pullback cannot tell which one the gradient should follow. Use "
            "unique indices (np.unique), summing the values of repeated ones first if an update should count "
            "them all (np.add.at(y, index, v) adds every one)."
        )
    return unique, indexable_by(sources, first)[first]


def _plain_index(index):
    if type(index) is tuple:
        return tuple(plain_of(p) for p in index)
    return plain_of(index)


def write_out(name, out, result, numpy_call, contiguous=False):
    """`name(..., out=out)` on traced values: `result` (the call's value, computed without `out`)
    written into `out` as NumPy writes it, and `out` returned.

    A traced `out` takes the result as an in-place write (`out[...] = result`), seen through every
    view and alias of it, so the gradient flows as in `z[...] = np.dot(a, b)`. Where NumPy would
    refuse `out` (its shape, its dtype under the call's casting rule, or, with `contiguous`, a
    layout that is not C-contiguous, as `np.dot` demands) NumPy's own error is raised:
    `numpy_call(buffer)` runs NumPy's function on the plain inputs, writing into a plain stand-in
    for `out`. A plain NumPy `out` cannot hold a result being differentiated: that is refused,
    naming the fix.
    """
    if not is_traced(out):
        if is_traced(result) and np.result_type(plain_of(out)).kind in "fcmMOV":
            raise TypeError(
                f"{name}(..., out=...) would write a result that is being differentiated into a plain array, losing "
                f"the gradient. Drop out= and assign the result (z = {name.replace('numpy.', 'np.', 1)}(...)), or make "
                "out a traced array "
                "(z = np.zeros_like(x, shape=...)) so that the write is recorded.")
        # Nothing being differentiated reached the result, or out holds integers or booleans, which have no
        # gradient (as x.astype(int) has none): NumPy's own call, with its casting rules and errors.
        return numpy_call(out)
    plain = concrete_of(out)
    if not isinstance(plain, np.ndarray):
        if isinstance(plain, (np.generic, float, complex)):
            numpy_call(plain)  # NumPy's error for an out= that is a number
        raise TypeError(
            f"{name}(..., out=...) into a {type(plain).__module__}.{type(plain).__qualname__} being differentiated is not "
            f"supported (pullback writes into NumPy arrays only). Drop out= and assign the result instead "
            f"(z = {name.replace('numpy.', 'np.', 1)}(...)).")
    shape, dtype = tuple(np.shape(plain_of(result))), np.result_type(plain_of(result))
    if shape != plain.shape or dtype != plain.dtype or (contiguous and not plain.flags.c_contiguous):
        buffer = np.empty(plain.shape, plain.dtype)
        if contiguous and not plain.flags.c_contiguous:
            buffer = np.empty(plain.shape + (2,), plain.dtype)[..., 0]  # the same shape, not C-contiguous
        numpy_call(buffer)  # raises NumPy's error where NumPy refuses this out=
        if shape != plain.shape:
            raise ValueError(f"{name}(..., out=...): the result has shape {shape}, but out has shape {plain.shape}")
    return in_place(out, result if is_traced(result) else FUNCTIONS[index_update](out, Ellipsis, result))


def call_into_out(fn, name, at, args, kwargs):
    """`fn(*args, **kwargs)` for a function without gradient whose `out` parameter is at position `at`,
    `out` traced: NumPy's value, computed on the plain values without `out`, then written into `out`
    as a recorded write (a constant there: zero gradient from here on), seen through its views and
    aliases. NumPy writing into `out`'s plain memory instead would change values the tape keeps."""
    positional = len(args) > at
    out = args[at] if positional else kwargs["out"]
    plain_args, plain_kwargs = _plain_all(args), {k: _plain_all(v) for k, v in kwargs.items() if k != "out"}

    def numpy_call(buffer):
        if positional:
            return fn(*plain_args[:at], buffer, *plain_args[at + 1:], **plain_kwargs)
        return fn(*plain_args, out=buffer, **plain_kwargs)

    return write_out(name, out, numpy_call(None), numpy_call)


def out_of(at, args, kwargs):
    """The `out` argument of a call whose `out` parameter is at position `at` (None where not given)."""
    return args[at] if len(args) > at else kwargs.get("out")


def _plain_all(x):
    if type(x) is tuple or type(x) is list:
        return type(x)(_plain_all(v) for v in x)
    return plain_of(x)
