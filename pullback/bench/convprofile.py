"""Where the time of a pullback ResNet gradient goes, and how fast its matrix products run.

One gradient runs under `cProfile`. Each function's own time goes to a group chosen by
its name and file:

| group | functions |
| --- | --- |
| matmul | the convolution primitives and filter products in `pullback/nn/conv.py` (names starting `_conv` or with `filter`), `matmul`, `dot` |
| im2col/col2im | column blocks, `col2im`, padding, cropping, window views and filter flips in `conv.py` |
| normalisation | everything in `pullback/nn/normalise.py` |
| pooling | pooling functions in `conv.py` |
| rules | other reverse rules (`pullback/rules/`), e.g. relu and additions |
| engine | tracing, the tape, cotangent accumulation (`pullback/_*.py`, `tree.py`) |
| other | the rest (the loss, layer glue) |

Time spent in NumPy's own Python functions and in built-in functions (`einsum`,
`ascontiguousarray`, ...) goes to the groups of their callers, split in proportion to the
time each caller spent in them. A product made by the `np.matmul` ufunc or the `@` operator is
not a function call cProfile sees: its time is the own time of the function that makes it,
which is why the convolution primitives (`_conv`, whose own time is its products) count as
matmul. The matrix products' floating-point operations are
counted from the architecture (`resnets.matmul_flops`) and divided by the matmul group's
time, next to a float32 matrix product measured on this machine.

>>> group_of(("/x/pullback/nn/conv.py", 1, "_apply_filter")), group_of(("/x/pullback/nn/conv.py", 1, "_flipped_filter"))
('matmul', 'im2col/col2im')
>>> group_of(("/x/pullback/nn/conv.py", 1, "_conv")), group_of(("/x/pullback/nn/conv.py", 1, "_column_blocks"))
('matmul', 'im2col/col2im')
>>> group_of(("/x/pullback/nn/conv.py", 1, "_filter_from_columns"))
'matmul'
>>> group_of(("/x/pullback/nn/normalise.py", 1, "back")), group_of(("~", 0, "<built-in method numpy.einsum>"))
('normalisation', None)
"""

import cProfile
import os
import pstats
import time

import numpy as np

from . import resnets

GROUPS = ("matmul", "im2col/col2im", "normalisation", "pooling", "rules", "engine", "other")

_IM2COL_WORDS = ("im2col", "col2im", "column_blocks", "pad", "crop", "window", "offsets", "flip")
_POOL_WORDS = ("pool", "argmax", "scatter", "gather")


def group_of(key):
    """The group of a profiled function `(file, line, name)`, or None to inherit from its callers."""
    path, _, name = key
    path = path.replace(os.sep, "/")
    if "matmul" in name or name in ("<built-in method numpy.dot>", "<method 'dot' of 'numpy.ndarray' objects>"):
        return "matmul"
    if "/pullback/" not in path or "/pullback/bench/" in path:
        return None if (path == "~" or "/numpy/" in path) else "other"
    if path.endswith("/nn/conv.py"):
        if any(w in name for w in _IM2COL_WORDS):
            return "im2col/col2im"
        if "filter" in name or name.startswith("_conv"):
            return "matmul"
        if any(w in name for w in _POOL_WORDS):
            return "pooling"
        return "other"
    if path.endswith("/nn/normalise.py"):
        return "normalisation"
    if "/pullback/rules/" in path:
        return "rules"
    module = path.rsplit("/", 1)[-1]
    if module.startswith("_") or module == "tree.py":
        return "engine"
    return "other"


def attribute(stats):
    """`[(function key, group, seconds)]`: each function's own time, split over groups."""
    memo = {}

    def shares(key, visiting):
        if key in memo:
            return memo[key]
        own = group_of(key)
        if own is not None:
            return {own: 1.0}
        callers = stats[key][4] if key in stats else {}
        if not callers or key in visiting:
            return {"other": 1.0}
        visiting = visiting | {key}
        weights = {c: edge[2] for c, edge in callers.items()}
        total = sum(weights.values())
        if total <= 0:
            weights = {c: edge[1] for c, edge in callers.items()}
            total = sum(weights.values()) or 1
        mix = {}
        for caller, weight in weights.items():
            for group, part in shares(caller, visiting).items():
                mix[group] = mix.get(group, 0.0) + part * weight / total
        memo[key] = mix
        return mix

    return [(key, group, tottime * part)
            for key, (_, _, tottime, _, _) in stats.items()
            for group, part in shares(key, frozenset()).items()]


def group_times(stats):
    """`{group: seconds}` from `pstats.Stats(...).stats`; the values add up to the profiled total."""
    out = dict.fromkeys(GROUPS, 0.0)
    for _, group, seconds in attribute(stats):
        out[group] += seconds
    return out


def top_functions(stats, groups=("rules", "engine", "other"), k=8):
    """The `k` functions with the most time attributed to `groups`: `[(group, name, seconds)]`."""
    rows = [(group, f"{os.path.basename(path)}:{name}" if path != "~" else name, seconds)
            for (path, _, name), group, seconds in attribute(stats) if group in groups]
    return sorted(rows, key=lambda r: -r[2])[:k]


def matmul_peak(n=2048, repeats=5):
    """GFLOP/s of the best of `repeats` float32 `n x n` matrix products (NumPy's BLAS, all its threads)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def profile_resnet(prepared, problem, *, peak_n=2048):
    """Profile one gradient of an already-warm `prepared` pullback ResNet (see the module docstring)."""
    profiler = cProfile.Profile()
    profiler.enable()
    prepared.step()
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    groups = group_times(stats)
    total = sum(groups.values())
    flops = resnets.matmul_flops(problem["spec"], problem["x"].shape[0], problem["x"].shape[1])
    # cProfile does not see products made with the `@` operator, so the "matmul" group understates
    # them; the rate over the whole (un-profiled) gradient is a lower bound that cannot be inflated.
    wall = min(_timed(prepared.step) for _ in range(2))
    achieved = flops / wall / 1e9
    return {
        "total_s": total,
        "groups_s": groups,
        "top_other": top_functions(stats),
        "matmul_gflop": flops / 1e9,
        "gradient_s": wall,
        "matmul_gflops_per_s": achieved,
        "matmul_group_gflops_per_s": flops / groups["matmul"] / 1e9 if groups["matmul"] else float("nan"),
        "peak_gflops_per_s": matmul_peak(peak_n),
        "peak_n": peak_n,
    }
