"""What a `pb.jit` trace read outside its arguments, checked before every replay.

A trace fixes whatever the function read from its globals and closures: `x * scale` records
the value `scale` had, and a call made after `scale = 3.0` would replay the old one. So once a
trace is done, `collect` lists the global and closure variables the function reads, directly or
through the plain Python functions it reaches (the functions, lambdas and nested functions found
in its globals, closure cells and code constants, each with its own globals; a bound method's
function and object; a `pb.jit` function's own; a callable object's `__call__`; the function of a
classmethod, a staticmethod or a property's getter; the classes of the objects among its
arguments and the functions passed as arguments), as `(namespace dict or cell, name, value)`
entries, with the values they hold after the trace. It does not descend into the modules of the
standard library and of installed packages, nor the functions of NumPy and pullback (whose
globals are library state, not the caller's; their closure cells, which hold what the caller gave
them, as `pb.grad(loss)` holds `loss`, are followed). An attribute or a string-keyed dict entry of
an object, a dict or a module of the caller's own reached that way (`cfg.scale`, `params["lr"]`,
`config.lr`, `self.lr` of a bound method, a slot, an attribute read through a `weakref.proxy`), or
an attribute of its class or of a class reached (a class attribute, a method called as
`self.helper(...)`, followed in turn), is an entry too when the code reached names it (an
attribute name or a string constant of that code): the code reads it, or at least could; so is
the absence from an object of a name its class holds as a plain value (setting `step.lr` would
shadow the class's `lr`). A default argument value of a function reached is followed as a global is,
and so is rebinding its defaults (`f.__defaults__`, an entry of `f.__kwdefaults__`). Every
attribute of an object of one of pullback's classes (a `pb.nn` layer held in a global) is an
entry, as pullback's code, not walked, reads them. So is each item of a list of at most 32 items
(and its length); a tuple's items are followed too.

Arrays among those values, and the arrays the trace recorded as constants of its NumPy calls
(however the function reached them: an attribute read by library code, a list), are
snapshotted when small (`SNAPSHOT_ELEMENTS`): a write into one changes its bytes.

`Watch.check` is one generated function of identity tests (`ns["scale"] is v`; an equal number,
string or NumPy scalar also passes, as does a NaN for a NaN of its type, so a value recomputed
each call does not retrace) and byte comparisons (one per array: not again for a view of an
array compared); the replay calls it first and traces again, as after a failed guard, when it
answers False.

>>> namespace = {"scale": 1.0}
>>> exec("f = lambda x: x * scale", namespace)
>>> watch = collect(namespace["f"])
>>> [name for _, name, _ in watch.entries]
['scale']
>>> watch.check()
True
>>> namespace["scale"] = 3.0
>>> watch.check()
False
"""

import functools
import math
import pathlib
import sys
import types
import weakref

import numpy as np

# arrays with at most this many elements are snapshotted, and compared at each replay (a 4096-element
# float64 array: about 0.8 µs); a write into a larger one is not detected
SNAPSHOT_ELEMENTS = 4096
_MAX_ENTRIES = 1000  # names, attributes and entries watched (each costs about 25 ns per replay)
_MAX_FUNCTIONS = 500  # functions walked
_DEPTH = 3  # attribute and dict levels followed below a name (cfg.optimizer.lr is two)
_LIBRARIES = frozenset(("pullback", "numpy"))  # packages whose functions are not walked
_NOT_FOLLOWED = _LIBRARIES | {"builtins"}  # nor their classes' attributes
# values compared by equality when their identity differs: a number recomputed each call is one value
_SCALARS = (int, float, complex, str, bytes, np.number, np.bool_)
# values that are not looked into
_OPAQUE = (types.ModuleType, type, types.BuiltinFunctionType, np.ufunc, np.generic, np.ndarray, str, bytes, int,
           float, complex, bool, type(None), set, frozenset)
_NAN_TYPES = (float, complex, np.float16, np.float32, np.float64, np.longdouble, np.complex64, np.complex128)
_PROXIES = (weakref.ProxyType, weakref.CallableProxyType)
_SHORT = 32  # the items of a list or tuple at most this long are followed (a long one is data)


class Watch:
    """The entries and array snapshots of one trace; `check()` says whether all still hold (None:
    nothing to check), `changed()` names those that do not.

    `complete` is False when the walk stopped at its limits (what it did not reach is not checked);
    `names` are the attribute names and string constants of the code it reached."""

    def __init__(self, entries, arrays, complete, lengths=(), keys=(), names=frozenset()):
        self.entries = [entry for entry, _ in entries]  # [(a module's globals, an object's or a plain dict,
        self._where = [where for _, where in entries]  # or a cell; name; value)], and where each was read
        self.arrays = [(array, snapshot) for (array, snapshot), _ in arrays]  # [(array, its bytes then)]
        self._array_where = [where for _, where in arrays]
        self.lengths = list(lengths)  # [(list, its length, where)]: a list followed item by item
        self.keys = list(keys)  # [(a dict or an object's __dict__, the keys it had, where)]: for names added
        self.complete, self.names = complete, frozenset(names)
        self.check = _compile(self.entries, self.arrays, self.lengths)

    def reached(self):
        """`(value, where it was read)` for each entry: what the function reaches outside its arguments."""
        return [(value, where) for (_, _, value), where in zip(self.entries, self._where) if value is not ABSENT]

    def new_values(self):
        """`(where, value now)` for each entry that no longer holds, each new item of a list followed, and
        each name added to a namespace watched (a new attribute, dict key or global)."""
        found = [(where, items[length:]) for items, length, where in self.lengths if len(items) > length]
        for namespace, before, where in self.keys:
            found += [(f"`{where}` ({name!r} added)", namespace[name]) for name in list(namespace) if name not in before]
        for (namespace, name, value), where in zip(self.entries, self._where):
            if not _holds(namespace, name, value):
                try:
                    found.append((where, namespace.cell_contents if isinstance(namespace, types.CellType)
                                  else namespace[name]))
                except (KeyError, IndexError, ValueError):  # deleted: nothing stored
                    pass
        return found

    def changed(self):
        """Where the values that no longer hold were read (for a message)."""
        found = [where for items, length, where in self.lengths if len(items) != length]
        found += [where for (namespace, name, value), where in zip(self.entries, self._where)
                  if not _holds(namespace, name, value)]
        return found + [where for (array, snapshot), where in zip(self.arrays, self._array_where)
                        if array.tobytes() != snapshot]


def collect(fn, constants=(), arguments=(), began=None):
    """The `Watch` of a traced function `fn` (read after its trace), with snapshots of the small
    arrays among what it reads and among `constants` (the arrays its trace recorded as constants).
    `arguments` are the objects among its arguments other than inputs (containers, constant leaves):
    the signature fixes them, but not what their classes' methods read (`model.apply(x)` reading a
    global), nor what a function passed in reads. An array `began` (the watch collected as the trace
    began) snapshotted keeps that snapshot: the trace computed from those bytes, and a write meanwhile (by
    another thread) makes the next call trace again."""
    entries = {}  # (id(namespace), name) -> ((namespace, name, value), where it was read)
    names = set()  # attribute names and string constants of the code reached
    functions, walked = [], set()
    # [(dict or a class's mappingproxy, depth, path, whether entries are attributes, whether all are followed)]
    holders, held = [], set()
    arrays = {}  # id -> (array, where)
    lengths = []  # [(list, its length, where)]
    keys, keyed = [], set()  # [(dict, its keys, where)], and the ids of those dicts
    complete = True

    def found(value, depth, path):
        nonlocal complete
        try:
            look_into(value, depth, path)
        except Exception:  # an object that does not answer as objects do (a proxy): not followed
            complete = False

    def look_into(value, depth, path):
        if isinstance(value, np.ndarray):
            arrays.setdefault(id(value), (value, path))
            return
        if isinstance(value, type):
            hold_class(value, depth)
            return
        if isinstance(value, types.ModuleType):  # the caller's own module (`config.lr`, `utils.helper(x)`)
            if _callers_module(value):
                hold(vars(value), depth, value.__name__)
            return
        if isinstance(value, _OPAQUE) or hasattr(type(value), "__array_ufunc__"):
            return  # an array type (a traced value among them): nothing of the caller's to follow
        if isinstance(value, types.FunctionType):
            functions.append(value)
        elif isinstance(value, types.MethodType):
            found(value.__func__, depth, path)
            hold(_instance_dict(value.__self__), depth, f"{path}.__self__" if depth else "self", of=type(value.__self__))
            hold_class(type(value.__self__), depth)
        elif isinstance(value, (classmethod, staticmethod)):  # a class's method, read as `Cls.make(...)`
            found(value.__func__, depth, path)
        elif isinstance(value, property):  # what its getter reads, as `cfg.scale` runs it
            found(value.fget, depth, path)
        elif isinstance(value, _PROXIES):  # a weakref.proxy: its object's attributes, read through it
            hold(value.__dict__, depth, path, key=id(value.__dict__))
            hold_class(value.__class__, depth)
        elif isinstance(value, functools.partial):
            for part in (value.func, *value.args, *value.keywords.values()):
                found(part, depth, path)
        elif getattr(type(value), "pullback_jitted", False):  # a pb.jit function: the function it traces
            found(value.fn, depth, path)
        elif type(value) is dict:
            hold(value, depth, path, attributes=False)
        elif isinstance(value, (list, tuple)):
            if len(value) <= _SHORT and depth < _DEPTH and id(value) not in held:
                held.add(id(value))
                if type(value) is list:  # its length, then each item
                    lengths.append((value, len(value), f"`{path}`"))
                for k, item in enumerate(value):
                    if type(value) is list:
                        watch(value, k, item, depth + 1, f"{path}[{k}]", f"`{path}[{k}]`")
                    else:
                        found(item, depth + 1, f"{path}[{k}]")
        else:  # an object: the attributes the code names; all of them for one of pullback's classes
            hold(_instance_dict(value), depth, path, every=_module_of(type(value)) in _LIBRARIES, of=type(value))
            slots = _slots_of(type(value))
            if slots:  # a __slots__ class: its slots, read through their descriptors
                hold(_Slots(value, slots), depth, path, key=("slots", id(value)))
            hold_class(type(value), depth)
            call = getattr(type(value), "__call__", None)
            if isinstance(call, types.FunctionType):
                functions.append(call)

    def hold(namespace, depth, path, attributes=True, key=None, every=False, of=None):
        """Watch the entries of `namespace` the code names; with `of`, the class of the object whose
        `__dict__` it is, also the absence of the names its class holds (`s.lr = 0.5` would shadow `lr`)."""
        key = id(namespace) if key is None else key
        if isinstance(namespace, (dict, types.MappingProxyType, _Slots)) and key not in held and depth < _DEPTH:
            held.add(key)
            holders.append((namespace, depth, path, attributes, every, of))
            if type(namespace) is dict and id(namespace) not in keyed:
                keyed.add(id(namespace))
                keys.append((namespace, frozenset(namespace), path))

    def hold_class(cls, depth):
        """A class's attributes and methods, and its bases' (those of the caller's own classes)."""
        for base in cls.__mro__:
            if _module_of(base) not in _NOT_FOLLOWED:
                hold(vars(base), depth, base.__qualname__, key=id(base))

    def watch(namespace, name, value, depth, path, where):
        nonlocal complete
        key = (id(namespace), name)
        if key in entries:
            return
        if len(entries) >= _MAX_ENTRIES:
            complete = False
            return
        entries[key] = ((namespace, name, value), where)
        if value is not ABSENT:
            found(value, depth, path)

    found(fn, 0, "self")
    roots = {id(f) for f in functions}  # the jitted function itself is walked wherever it was defined
    for value in arguments:
        if isinstance(value, (types.FunctionType, types.MethodType, functools.partial)) or \
                getattr(type(value), "pullback_jitted", False):
            found(value, 0, f"an argument's {getattr(value, '__qualname__', 'function')}")
        elif not isinstance(value, _OPAQUE):
            hold_class(type(value), 0)
            call = getattr(type(value), "__call__", None)
            if isinstance(call, types.FunctionType):  # a model called as `model(x)`: what its __call__ reads
                functions.append(call)
    while True:
        while functions:
            f = functions.pop()
            if id(f) in walked:
                continue
            if len(walked) >= _MAX_FUNCTIONS:
                complete = False
                functions.clear()
                break
            walked.add(id(f))
            code = f.__code__
            for name, cell in zip(code.co_freevars, f.__closure__ or ()):
                try:
                    value = cell.cell_contents
                except ValueError:  # a cell not yet filled: the function cannot have read it
                    continue
                watch(cell, name, value, 0, name, f"`{name}` (in the closure of {f.__qualname__})")
            if _in_library(f) and id(f) not in roots:
                continue  # its cells only: what the caller gave it (`pb.grad(loss)` holds `loss`)
            read, strings = _names(code)
            names |= strings
            if id(f.__globals__) not in keyed:  # a global the function may add
                keyed.add(id(f.__globals__))
                keys.append((f.__globals__, frozenset(f.__globals__), f"the globals of {f.__qualname__}"))
            # default values are read where a call leaves them out: each is watched as a global is (rebinding
            # `f.__defaults__`, or an entry of `f.__kwdefaults__`, is followed)
            if f.__defaults__:
                watch(_Defaults(f), "__defaults__", f.__defaults__, 0, f"the default arguments of {f.__qualname__}",
                      f"the default arguments of {f.__qualname__}")
            if f.__kwdefaults__:
                watch(_Defaults(f), "__kwdefaults__", f.__kwdefaults__, 1, f"the keyword defaults of {f.__qualname__}",
                      f"the keyword defaults of {f.__qualname__}")
                for name, default in f.__kwdefaults__.items():
                    watch(f.__kwdefaults__, name, default, 0, f"a default argument of {f.__qualname__}",
                          f"the default of {name!r} of {f.__qualname__}")
            namespace = f.__globals__
            for name in read:
                if name in namespace:
                    watch(namespace, name, namespace[name], 0, name, f"`{name}` (a global that {f.__qualname__} reads)")
        before = len(entries)
        for namespace, depth, path, attributes, every, of in list(holders):
            try:  # a dict another thread changes meanwhile: what was read is checked
                named = [name for name in list(namespace) if type(name) is str] if every else \
                    [name for name in names if name in namespace]
                for name in named:
                    inner = f"{path}.{name}" if attributes else f"{path}[{name!r}]"
                    watch(namespace, name, namespace[name], depth + 1, inner, f"`{inner}`")
                if of is not None:  # a class attribute the code names, read through the object
                    for name in names:
                        if name not in namespace and _class_attribute(of, name):
                            watch(namespace, name, ABSENT, depth + 1, path, f"`{path}.{name}` (not set on the object)")
            except (KeyError, RuntimeError):
                complete = False
        if not functions and len(entries) == before:
            break
    listed = list(arrays.values()) + [(c, None) for c in constants if id(c) not in arrays]
    listed = [(a, path) for a, path in listed if a.size <= SNAPSHOT_ELEMENTS and a.dtype != object]
    snapshotted = {id(a) for a, _ in listed}  # a view of one of those (`weight.T`) changes with it: not compared twice
    earlier = {} if began is None else {id(a): (a, snapshot) for a, snapshot in began.arrays}
    small = [((a, _snapshot(a, earlier)), f"`{path}`" if path else f"an array of shape {a.shape} the trace used as "
              "a constant") for a, path in listed if not _views_one_of(a, snapshotted)]
    return Watch(list(entries.values()), small, complete, lengths, keys, names)


def _snapshot(a, earlier):
    """The bytes of `a` as `earlier` ({id: (array, bytes)}) holds them, else as they are now."""
    found = earlier.get(id(a))
    return found[1] if found is not None and found[0] is a else a.tobytes()


def constant_arrays(trace):
    """The arrays `trace`'s recorded calls take as constants (the replay reads them by reference)."""
    found = {}

    def look(x):
        if isinstance(x, np.ndarray):
            found.setdefault(id(x), x)
        elif isinstance(x, (tuple, list)):
            for v in x:
                look(v)
        elif isinstance(x, dict):
            for v in x.values():
                look(v)

    for node in trace.nodes:
        look(node.args)
        look(node.kwargs)
    return list(found.values())


@functools.lru_cache(maxsize=4096)
def _names(code):
    """(the names `code` and the code nested in it read as globals or attributes, those and its string
    constants): a global read is among the first, an attribute or a dict key among the second."""
    read = list(code.co_names)
    strings = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            nested_read, nested_strings = _names(const)
            read += nested_read
            strings |= nested_strings
        elif type(const) is str:
            strings.add(const)
    return tuple(dict.fromkeys(read)), frozenset(strings)


def _callers_module(module):
    """Whether `module` is one of the caller's own (a file of the project: not the standard library, nor
    an installed package, nor NumPy or pullback), whose attributes the code reached may read."""
    name = getattr(module, "__name__", None) or ""
    file = getattr(module, "__file__", None)
    if not file or name.partition(".")[0] in _NOT_FOLLOWED or name.partition(".")[0] in sys.stdlib_module_names:
        return False
    return not any(part in ("site-packages", "dist-packages") for part in pathlib.PurePath(file).parts)


def _in_library(f):
    module = f.__globals__.get("__name__") or ""
    return module.partition(".")[0] in _LIBRARIES


def _module_of(cls):
    """The top-level package a class was defined in."""
    return (getattr(cls, "__module__", None) or "builtins").partition(".")[0]


class _Absent:
    """The value of an entry that watches a name not being set (an object's attribute its class holds)."""

    def __repr__(self):
        return "ABSENT"


ABSENT = _Absent()


def _class_attribute(cls, name):
    """Whether a class of the caller's own in `cls`'s order holds a plain value (not a method or a
    descriptor) under `name`, which setting the attribute on an object would shadow."""
    for base in cls.__mro__:
        if _module_of(base) in _NOT_FOLLOWED:
            continue
        attribute = vars(base).get(name, ABSENT)
        if attribute is not ABSENT:
            return not (callable(attribute) or hasattr(type(attribute), "__get__"))
    return False


def _holds(namespace, name, value):
    """Whether `namespace` (a dict, a class's mappingproxy or a cell) still holds `value` under `name`, as `Watch.check` asks."""
    if value is ABSENT:
        return name not in namespace
    try:
        now = namespace.cell_contents if isinstance(namespace, types.CellType) else namespace[name]
    except (KeyError, IndexError, ValueError):
        return False
    return now is value or (_is_scalar(value) and same_value(now, value))


def _views_one_of(array, ids):
    """Whether `array` is a view of an array whose id is among `ids`."""
    base = array.base
    while isinstance(base, np.ndarray):
        if id(base) in ids:
            return True
        base = base.base
    return False


def _slots_of(cls):
    """`{name: descriptor}` of the slots of `cls` and its bases that are the caller's own."""
    slots = {}
    for base in reversed(cls.__mro__):
        if _module_of(base) in _NOT_FOLLOWED:
            continue
        for name, attribute in vars(base).items():
            if isinstance(attribute, types.MemberDescriptorType) and name != "__weakref__":
                slots[name] = attribute
    return slots


class _Slots:
    """The slots of an object read as a dict (`ns["lr"]` runs the slot's descriptor), so an entry can watch them."""

    __slots__ = ("_of", "_descriptors")

    def __init__(self, of, descriptors):
        self._of, self._descriptors = of, descriptors

    def __iter__(self):
        return iter(self._descriptors)

    def __contains__(self, name):
        return name in self._descriptors

    def __getitem__(self, name):
        try:
            return self._descriptors[name].__get__(self._of, type(self._of))
        except AttributeError:  # a slot not set (or deleted since)
            raise KeyError(name) from None


class _Defaults:
    """A function's `__defaults__` and `__kwdefaults__` read as a dict, so an entry can watch them being rebound."""

    __slots__ = ("_of",)

    def __init__(self, of):
        self._of = of

    def __iter__(self):
        return iter(("__defaults__", "__kwdefaults__"))

    def __contains__(self, name):
        return name in ("__defaults__", "__kwdefaults__")

    def __getitem__(self, name):
        return getattr(self._of, name)


def _instance_dict(value):
    """`value.__dict__`, without running a `__getattr__` of its class (None without one)."""
    try:
        return object.__getattribute__(value, "__dict__")
    except AttributeError:
        return None


def _is_scalar(value):
    """Whether `value` is compared by equality (its type asked, not `value`: a `__getattribute__` may raise)."""
    return issubclass(type(value), _SCALARS)


def same_value(a, b):
    """Whether `a`, found where the trace read `b`, is a value equal to it (a float's sign of zero too; a
    NaN recomputed each call is the NaN the trace read, as its bits may differ only in the payload)."""
    if type(a) is not type(b):
        return False
    if not a == b:
        return type(a) in _NAN_TYPES and a != a and b != b
    return type(a) is not float or math.copysign(1.0, a) == math.copysign(1.0, b)


def _compile(entries, arrays, lengths=()):
    """`unchanged()`: True while every entry holds its value and every array its bytes (None if nothing
    is watched). One generated expression: no loop, no call but a byte copy per array."""
    namespace = {"same": same_value}
    terms = []
    for i, (items, length, _) in enumerate(lengths):
        namespace[f"l{i}"] = items
        terms.append(f"len(l{i}) == {length}")
    for i, (where, name, value) in enumerate(entries):
        namespace[f"w{i}"], namespace[f"v{i}"] = where, value
        read = f"w{i}.cell_contents" if isinstance(where, types.CellType) else f"w{i}[{name!r}]"
        if value is ABSENT:
            terms.append(f"{name!r} not in w{i}")
        else:
            terms.append(f"({read} is v{i} or same({read}, v{i}))" if _is_scalar(value) else f"{read} is v{i}")
    for j, (array, snapshot) in enumerate(arrays):
        namespace[f"a{j}"], namespace[f"b{j}"] = array, snapshot
        terms.append(f"a{j}.tobytes() == b{j}")
    if not terms:
        return None
    source = ("def unchanged():\n    try:\n        return (" + "\n            and ".join(terms) + ")\n"
              "    except Exception:  # a name deleted, a cell emptied, a list shortened\n        return False\n")
    exec(compile(source, "<pb.jit watch>", "exec"), namespace)
    return namespace["unchanged"]
