"""Property: on random nested arguments and random NumPy programs, differentiation changes nothing.

For random structures (dicts, lists, tuples, namedtuples, dataclasses, plain objects, shared
sub-objects, cycles, arrays of several dtypes, None/str/int leaves) and random `f` built from a
menu of NumPy operations (including in-place writes through one of several aliases):

- the value under `pb.withgradient` is identical to the untracked call's;
- for every distinct float array, the gradient entries at its places hold the total
  derivative exactly once (at one place), equal to float64 central differences;
- every Python float place gets its own derivative, equal to central differences;
- the caller's structure is byte-for-byte unchanged afterwards (its pickle is identical).
"""

import copy
import dataclasses
import pickle
from collections import namedtuple

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pullback as pb

Pair = namedtuple("Pair", "first second")


@dataclasses.dataclass
class Box:
    content: object
    label: str = "box"


class Node:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class Frozen:
    """Only `w` is trainable: arrays elsewhere in it are not differentiated (unless tied to one that is)."""

    def __init__(self, w, stats):
        self.w, self.stats = w, stats

    def trainable(self):
        return ("w",)


SHAPE = (3,)


@st.composite
def structures(draw):
    """A random argument, plus the places of its arrays and floats (as paths) for the checks."""
    pool = []  # arrays that may be shared
    dtypes = st.sampled_from([np.float64, np.float64, np.float32, np.int64, np.bool_])

    def array():
        if pool and draw(st.booleans()):
            return draw(st.sampled_from(pool))
        dtype = draw(dtypes)
        # distinct values: np.sort has no derivative where two are equal
        values = draw(st.lists(st.integers(-200, 200).map(lambda v: v / 100), min_size=3, max_size=3, unique=True))
        a = np.asarray(values).astype(dtype)
        pool.append(a)
        return a

    def number():
        return draw(st.integers(-200, 200).map(lambda v: v / 100))

    def value(depth):
        choice = draw(st.integers(0, 9 if depth < 3 else 3))
        if choice <= 1:
            return array()
        if choice == 2:
            return draw(st.sampled_from([None, "s", 7, number()]))
        if choice == 3:
            return number()
        if choice == 4:
            return {f"k{i}": value(depth + 1) for i in range(draw(st.integers(0, 3)))}
        if choice == 5:
            return [value(depth + 1) for _ in range(draw(st.integers(0, 3)))]
        if choice == 6:
            return (value(depth + 1), array())
        if choice == 7:
            return Pair(array(), value(depth + 1))
        if choice == 8:
            return Box(value(depth + 1))
        return Frozen(array(), array()) if draw(st.booleans()) else Node(a=value(depth + 1), b=array())

    root = Node(main=array(), rest=value(0), extra=[value(1), value(1)])
    if draw(st.booleans()):  # a shared sub-object
        root.again = root.extra
    if draw(st.booleans()):  # a cycle
        root.extra.append(root)
    return root


def places(x):
    """(path, value) for every array and float place reachable from `x`, each container opened once,
    in walk order (depth first, children in order): a shared container's floats are listed at its first place."""
    found, seen, stack = [], set(), [((), x)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, np.ndarray) or type(v) is float:
            found.append((path, v))
            continue
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, dict):
            items = v.items()
        elif isinstance(v, (list, tuple)):
            items = enumerate(v)
        elif hasattr(v, "__dict__"):
            items = vars(v).items()
        else:
            continue
        stack.extend(reversed([(path + (k,), c) for k, c in items]))
    return found


def get(x, path):
    for k in path:
        x = x[k] if isinstance(x, (dict, list, tuple)) else getattr(x, k)
    return x


def put(x, path, v):
    parent = get(x, path[:-1])
    if isinstance(parent, (dict, list)):
        parent[path[-1]] = v
    else:
        setattr(parent, path[-1], v)


def grad_at(g, path):
    for k in path:
        if g is None:
            return None
        g = g[k] if isinstance(g, (dict, list, tuple)) else getattr(g, k)
    return g


def is_trainable_place(x, path):
    for i in range(len(path)):
        parent = get(x, path[:i])
        if isinstance(parent, Frozen) and path[i] != "w":
            return False
    return True


@st.composite
def programs(draw, arg):
    """A random f: reads array/float places, combines them with NumPy operations, maybe writes through a place."""
    all_places = places(arg)
    arrays = [p for p, v in all_places if isinstance(v, np.ndarray)]
    floats = [p for p, v in all_places if type(v) is float and isinstance(get(arg, p[:-1]), (dict, list, Node, Box))]
    readable = [p for p in arrays if get(arg, p).dtype.kind == "f"] + floats
    if not readable:
        return lambda x: 0.0
    # writes go into differentiated arrays (writing a traced value into a plain one is refused, by design)
    writable = [p for p in readable if p in arrays and any(is_trainable_place(arg, q) for q, v in all_places if v is get(arg, p))]
    steps = []
    for _ in range(draw(st.integers(1, 5))):
        op = draw(st.sampled_from(["sin", "square", "mul", "tanh", "exp", "cumsum", "where", "mean", "write", "iadd", "sort"]))
        writes = op in ("write", "iadd")
        if writes and not writable:
            continue
        target = draw(st.sampled_from(writable if writes else readable))
        steps.append((op, target, draw(st.sampled_from(readable))))

    def f(x):
        total = 0.0
        for op, p, q in steps:
            a, b = get(x, p), get(x, q)
            if op == "write":
                target = get(x, p)
                if isinstance(target, np.ndarray) or getattr(target, "ndim", 0):
                    if np.result_type(target).kind == "f":
                        # a write through one alias, seen through the others; off the 0.01 grid, so np.sort meets no tie
                        target[0] = np.sum(b) * 0.5 + 0.00123
                continue
            if op == "iadd":
                if getattr(a, "ndim", 0) and np.shape(a + b) == np.shape(a):
                    a += b
                continue
            y = {
                "sin": lambda: np.sin(a), "square": lambda: a * a, "mul": lambda: a * b, "tanh": lambda: np.tanh(a + b),
                "exp": lambda: np.exp(-(a * a)), "cumsum": lambda: np.cumsum(a * 1.0), "mean": lambda: np.mean(a * b),
                # values lie on a 0.01 grid, so no value sits at the 0.005 threshold
                "where": lambda: np.where(np.asarray(pb.stop_gradient(b)) > 0.005, a, a * 3.0),
                # the offsets keep values on the 0.01 grid apart, so np.sort meets no tie (a kink)
                "sort": lambda: np.sort(a + np.arange(np.size(a)) * 0.000317) if np.ndim(a) else a,
            }[op]()
            total = total + np.sum(y * np.arange(1, np.size(y) + 1).reshape(np.shape(y)))
        return total

    f.steps = steps  # shown when a check fails
    return f


def widened(arg):
    """A deep copy of `arg` (ties kept) whose float32 arrays are float64: the reference runs in float64."""
    memo = {id(a): a.astype(np.float64) for _, a in places(arg) if isinstance(a, np.ndarray) and a.dtype == np.float32}
    return copy.deepcopy(arg, memo)


def central_difference(f, arg, path, index, eps=1e-6):
    def at(step):
        moved = widened(arg)
        target = get(moved, path)
        if isinstance(target, np.ndarray):
            target.reshape(-1)[index] += step
        else:
            put(moved, path, target + step)
        return float(f(moved))

    return (at(eps) - at(-eps)) / (2 * eps)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_random_programs_keep_their_meaning_and_get_finite_difference_gradients(data):
    arg = data.draw(structures())
    f = data.draw(programs(arg))
    before = pickle.dumps(arg)
    expected = f(copy.deepcopy(arg))
    val, (g,) = pb.withgradient(f, arg)
    assert pickle.dumps(arg) == before, ("the caller's argument was changed", f.steps, pickle.loads(before).__dict__, arg.__dict__)
    np.testing.assert_array_equal(np.asarray(val), np.asarray(expected))

    by_array = {}
    for path, v in places(arg):
        if isinstance(v, np.ndarray):
            by_array.setdefault(id(v), (v, []))[1].append(path)
    for v, paths in by_array.values():
        entries = [grad_at(g, p) for p in paths]
        given_at = [e for e in entries if e is not None]
        trainable = any(is_trainable_place(arg, p) for p in paths)
        if v.dtype.kind != "f" or not trainable:
            assert not given_at, f"a non-differentiable array got a gradient at {paths}"
            continue
        assert len(given_at) <= 1, f"a tied array got its gradient at several places: {paths}"
        total = given_at[0] if given_at else np.zeros_like(v)
        assert total.dtype == v.dtype and total.shape == v.shape
        tol = 1e-5 if v.dtype == np.float64 else 1e-3
        for i in range(v.size):
            fd = central_difference(f, arg, paths[0], i)
            assert abs(float(total[i]) - fd) <= tol * (1 + abs(fd)), (f.steps, paths, i, total, fd)
    for path, v in places(arg):
        if type(v) is float and is_trainable_place(arg, path) and isinstance(get(arg, path[:-1]), (dict, list, Node, Box)):
            fd = central_difference(f, arg, path, 0)
            got = grad_at(g, path)
            assert abs((got or 0.0) - fd) <= 1e-4 * (1 + abs(fd)), (f.steps, path, got, fd)
