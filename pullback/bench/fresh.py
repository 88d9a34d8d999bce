"""Measurements in a fresh Python process: import time, time-to-first-gradient, peak memory.

Each measurement starts a new interpreter, so nothing is cached or already imported. For
time-to-first-gradient the child runs this file as a script: it loads the benchmark's
modules as a stand-alone package (so `pullback` itself is not imported unless the
system under test is pullback), builds the problem with NumPy, then times

- importing the system's library,
- building the model from the problem's arrays,
- the first gradient (JIT compilation included),
- the second gradient (a JIT may compile there instead),

and reports its peak resident memory (see `peak_rss_mib`) before and after. It prints one JSON
line on stdout.

>>> sorted(child_fields())
['base_mib', 'build_s', 'first_s', 'import_s', 'peak_mib', 'second_s', 'total_s']
"""

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field

IMPORTABLE = ("numpy", "pullback", "autograd", "mygrad", "jax", "torch")

_IMPORT_CODE = "import time; t = time.perf_counter(); import {0}; print(time.perf_counter() - t)"


def child_fields():
    return ("import_s", "build_s", "first_s", "total_s", "second_s", "base_mib", "peak_mib")


@dataclass
class FreshResult:
    """One system's fresh-process numbers for one workload (medians over processes)."""

    name: str
    runs: list = field(default_factory=list)  # one dict of child_fields() per process
    note: str = ""

    @property
    def ran(self):
        return bool(self.runs)

    def median(self, key):
        return statistics.median(r[key] for r in self.runs)

    def as_dict(self):
        out = {"name": self.name, "note": self.note, "runs": self.runs}
        if self.ran:
            out.update({key: self.median(key) for key in self.runs[0]})
        return out


def _available(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None


def import_times(modules=IMPORTABLE, repeats=3, warmup=True, timeout=120):
    """`{module: FreshResult}` with `import_s` per fresh process (missing modules get a note)."""
    out = {}
    for module in modules:
        result = out[module] = FreshResult(module)
        if not _available(module):
            result.note = f"skipped: {module} is not installed"
            continue
        try:
            if warmup:  # compiles any stale .pyc and warms the file cache; not counted
                _run([sys.executable, "-c", _IMPORT_CODE.format(module)], timeout)
            for _ in range(repeats):
                seconds = float(_run([sys.executable, "-c", _IMPORT_CODE.format(module)], timeout).split()[-1])
                result.runs.append({"import_s": seconds})
        except RuntimeError as e:
            result.note = f"error: {e}"
    return out


def first_gradients(workload, systems, *, quick, repeats=1, timeout=600, skip=None):
    """`[FreshResult]`: time-to-first-gradient and peak memory of each system, in fresh processes.

    `skip` maps system names to the note of a system left out on purpose.
    """
    out = []
    for system in systems:
        result = FreshResult(system.name)
        out.append(result)
        if skip and system.name in skip:
            result.note = skip[system.name]
            continue
        if not system.available():
            result.note = f"skipped: {system.library} is not installed"
            continue
        if not hasattr(system, workload.kind):
            result.note = f"skipped: {system.name} has no {workload.kind} version in this suite"
            continue
        cmd = [sys.executable, os.path.abspath(__file__), system.name, workload.name] + (["--quick"] if quick else [])
        try:
            for _ in range(repeats):
                reply = json.loads(_run(cmd, timeout).strip().splitlines()[-1])
                if "skipped" in reply:
                    result.note = f"skipped: {reply['skipped']}"
                    break
                result.runs.append(reply)
        except (RuntimeError, ValueError, IndexError) as e:
            result.note = f"error: {e}"
    return out


def _run(cmd, timeout):
    # Compiled modules are cached as users' are: pip compiles an installed package's modules, and
    # a source checkout writes them on first import. With PYTHONDONTWRITEBYTECODE passed on, every
    # process would compile pullback (imported from its source tree) afresh, 180 ms of its import
    # here, while the peers load the files pip compiled.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{' '.join(cmd[1:])} took more than {timeout} s") from None
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no message)"]
        raise RuntimeError(f"{' '.join(cmd[1:])} exited with {proc.returncode}: {tail[0]}")
    return proc.stdout


def peak_rss_mib():
    """Peak resident memory of this process, MiB.

    On Linux this is `VmHWM` from /proc/self/status: `ru_maxrss` would not do in a child
    process, because Linux carries the parent's peak over fork and exec into it.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS, KiB elsewhere
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def child_main(argv):
    """In the fresh process: `SYSTEM WORKLOAD [--quick]`; prints one JSON line."""
    import time

    from .systems import Unsupported, by_name
    from .workloads import make_problem, workloads

    quick = "--quick" in argv
    system_name, workload_name = [a for a in argv if not a.startswith("--")]
    workload = workloads(quick)[workload_name]
    system = by_name(system_name)
    problem = make_problem(workload)
    base = peak_rss_mib()
    t0 = time.perf_counter()
    system.import_library()
    t1 = time.perf_counter()
    try:
        prepared = system.prepare(workload.kind, problem)
    except Unsupported as e:
        print(json.dumps({"skipped": str(e)}))
        return
    t2 = time.perf_counter()
    result = prepared.step()
    t3 = time.perf_counter()
    peak = peak_rss_mib()
    del result
    prepared.step()  # a JIT may compile at the second call rather than the first
    t4 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "build_s": t2 - t1, "first_s": t3 - t2, "total_s": t3 - t0,
                      "second_s": t4 - t3, "base_mib": base, "peak_mib": peak}))


if __name__ == "__main__":
    # Run as a script: load this folder as the package `_pullback_bench` so that its
    # relative imports work without importing `pullback` (whose import is being measured).
    import importlib
    import types

    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0]) == here:
        sys.path.pop(0)  # keep this folder's module names from shadowing top-level ones
    package = types.ModuleType("_pullback_bench")
    package.__path__ = [here]
    sys.modules["_pullback_bench"] = package
    importlib.import_module("_pullback_bench.fresh").child_main(sys.argv[1:])
