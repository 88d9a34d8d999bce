"""Steady-state timing: every system on one workload in one run, alternating, with pauses.

For each workload: prepare every available system; run each once (warm-up, JIT
compilation) and compare its gradient with the float64 reference; pick per system a
repeat count so that one sample lasts about `min_sample_s`; then take `samples` rounds,
each round visiting every system once (the starting system rotates), sleeping `pause`
seconds before each sample so that the previous library's BLAS/OpenMP threads stop
spinning, then (for calls shorter than a sample) making one untimed call, so that a sample
times the steady state rather than caches the pause left cold, and collecting garbage
outside the timed region. Each sample also counts the
process's minor page faults per call (where the OS reports them): fresh memory is
expensive on a virtual machine, and whether a system's large arrays come back from the
allocator's free lists or as new pages can change its time by a factor of two or three.

>>> import time
>>> from pullback.bench.systems import Prepared
>>> fast = Prepared(lambda: [np.ones(2)], list)
>>> slow = Prepared(lambda: (time.sleep(0.002), [np.ones(2)])[1], list)
>>> r = time_systems({"pullback": fast, "other": slow}, [np.ones(2)], tolerance=1e-6,
...                  samples=3, pause=0.0, min_sample_s=0.001)
>>> r["other"].same, len(r["other"].times), r["other"].ratio(r["pullback"]) < 1
(True, 3, True)
"""

import gc
import math
import statistics
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from . import heap
from .systems import Unsupported


@dataclass
class SystemResult:
    """Timings (seconds per gradient) and the gradient check of one system on one workload."""

    name: str
    times: list = field(default_factory=list)
    repeats: int = 0
    dtype: str = ""
    error: float = math.nan  # largest relative difference from the float64 reference, over all arrays
    same: bool = False
    note: str = ""  # why it was skipped, failed, or what to know
    faults: list = field(default_factory=list)  # minor page faults per call, one number per sample

    @property
    def ran(self):
        return bool(self.times)

    @property
    def median(self):
        return statistics.median(self.times)

    def ratio(self, base):
        """pullback / this system (above 1: this system is faster), both medians from the same run."""
        return base.median / self.median

    def as_dict(self):
        out = {"name": self.name, "times_s": self.times, "repeats": self.repeats, "dtype": self.dtype,
               "max_relative_error": None if math.isnan(self.error) else self.error, "same_gradient": self.same,
               "note": self.note, "page_faults_per_call": self.faults}
        if self.ran:
            out.update(median_s=self.median, min_s=min(self.times), max_s=max(self.times))
        return out


@dataclass
class WorkloadResult:
    workload: object
    systems: list = field(default_factory=list)
    note: str = ""

    def get(self, name):
        return next((s for s in self.systems if s.name == name), None)

    @property
    def failures(self):
        """Systems that ran but disagreed with the reference, or broke (not: missing or unsupported)."""
        return [s for s in self.systems if (s.ran and not s.same) or s.note.startswith("error")]

    def as_dict(self):
        w = self.workload
        base = self.get("pullback")
        rows = []
        for s in self.systems:
            row = s.as_dict()
            if s.ran and base is not None and base.ran:
                row["ratio_pullback_over_system"] = s.ratio(base)
            rows.append(row)
        return {"name": w.name, "title": w.title, "sizes": w.sizes, "per_op": w.per_op, "tolerance": w.tolerance,
                "note": self.note, "systems": rows}


def relative_error(grads, reference, smallest=0.0):
    """max over arrays of ||g - ref|| / max(||ref||, smallest) (2-norms; inf on a missing array or a shape mismatch).

    >>> round(relative_error([np.array([3.0, 4.0])], [np.array([3.0, 4.01])]), 6)
    0.001997
    """
    if len(grads) != len(reference):
        return math.inf
    worst = 0.0
    for g, ref in zip(grads, reference):
        if g is None or np.shape(g) != np.shape(ref):
            return math.inf
        scale = max(float(np.linalg.norm(np.ravel(ref))), smallest) or 1.0
        diff = float(np.linalg.norm(np.ravel(np.asarray(g, dtype=np.float64) - ref)))
        worst = max(worst, diff / scale)
    return worst


def _dtype(grads):
    kinds = {str(np.asarray(g).dtype) for g in grads if g is not None}
    return "/".join(sorted(kinds))


def _measure(step, repeats):
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) / repeats


def _page_faults():
    """The process's minor page faults so far, or None where the OS does not report them."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def prepare_systems(kind, problem, systems, skip=None):
    """`(prepared, results)`: a Prepared per system that can run, a SystemResult (with a note) for all.

    `skip` maps system names to the note of a system left out on purpose.
    """
    prepared, results = {}, {}
    for system in systems:
        result = results[system.name] = SystemResult(system.name)
        if skip and system.name in skip:
            result.note = skip[system.name]
            continue
        if not system.available():
            result.note = f"skipped: {system.library} is not installed"
            continue
        try:
            prepared[system.name] = system.prepare(kind, problem)
        except Unsupported as e:
            result.note = f"skipped: {e}"
        except Exception as e:  # a broken adapter is reported, and fails the run, but others go on
            result.note = f"error while preparing: {type(e).__name__}: {e}"
            traceback.print_exc()
    return prepared, results


def time_systems(prepared, reference, *, tolerance, samples, pause, min_sample_s, results=None, expect_dtype=None,
                 smallest=0.0, fresh_memory=False):
    """Check and time every prepared system; returns `{name: SystemResult}`.

    `smallest` bounds the scale of the relative error from below: gradients whose norm is
    under it compare as absolute differences. With `fresh_memory`, the heap hands its freed
    memory back to the kernel before each sample (see `heap`).
    """
    results = results if results is not None else {name: SystemResult(name) for name in prepared}
    repeats = {}
    for name, p in list(prepared.items()):
        r = results[name]
        try:
            if p.settle is not None:
                p.settle()
            grads = p.to_numpy(p.step())
            r.error = relative_error(grads, reference, smallest)
            r.same = r.error <= tolerance
            r.dtype = _dtype(grads)
            if expect_dtype is not None and name == "pullback" and r.dtype != expect_dtype:
                r.same = False
                r.note = f"dtype changed: {r.dtype}, the inputs are {expect_dtype}"
            once = _measure(p.step, 1)
            repeats[name] = r.repeats = max(1, math.ceil(min_sample_s / max(once, 1e-9)))
        except Exception as e:
            r.note = f"error while running: {type(e).__name__}: {e}"
            traceback.print_exc()
            del prepared[name]
    names = list(prepared)
    for round_ in range(samples):
        k = round_ % len(names) if names else 0
        for name in names[k:] + names[:k]:
            gc.collect()
            if fresh_memory:
                heap.release_freed_memory()
            time.sleep(pause)
            if repeats[name] > 1 and not fresh_memory:
                prepared[name].step()  # one untimed call brings its code and data back into the caches the pause emptied
            before = _page_faults()
            results[name].times.append(_measure(prepared[name].step, repeats[name]))
            if before is not None:
                results[name].faults.append((_page_faults() - before) / repeats[name])
    return results


def run_workload(workload, systems, reference_system, *, samples, pause, min_sample_s, make_problem, as_float64,
                 skip=None):
    """Everything for one workload: prepare, check against the float64 reference, time; a WorkloadResult.

    pullback is prepared first: when it cannot run the workload, the workload is skipped
    (with its note) before any peer builds a model.
    """
    problem = make_problem(workload)
    out = WorkloadResult(workload)
    ours = [s for s in systems if s.name == "pullback"]
    if not ours:
        out.note = "skipped: pullback is not among the selected systems"
        return out
    prepared, results = prepare_systems(workload.kind, problem, ours)
    out.systems = [results["pullback"]]
    if "pullback" not in prepared:
        out.note = results["pullback"].note
        return out
    more, more_results = prepare_systems(workload.kind, problem, [s for s in systems if s.name != "pullback"], skip)
    prepared.update(more)
    results.update(more_results)
    out.systems = list(results.values())
    reference = reference_system.prepare(workload.kind, as_float64(problem))
    reference = reference.to_numpy(reference.step())
    time_systems(prepared, reference, tolerance=workload.tolerance, samples=samples, pause=pause,
                 min_sample_s=min_sample_s, results=results, expect_dtype=str(problem["x"].dtype),
                 fresh_memory=workload.fresh_memory)
    return out
