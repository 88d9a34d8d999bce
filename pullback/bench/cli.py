"""`python -m pullback bench` (also `python -m pullback.bench`, `python bench/run.py`).

Runs the selected workloads for pullback, the hand-written NumPy floor and every
installed peer in one run, prints a markdown table per workload, and writes
`report.md`, `results.json` and, with matplotlib (`pip install "pullback[plot]"`),
`chart.png` to `--out`. Exits with status 1 when a system computed a different
gradient or an adapter broke.

Parts (select with `--only a,b`): the timed workloads chain-small, chain-large,
chain-large-fresh (the same chain on fresh memory each call), mlp, resnet18-b1, resnet18-b8
(chain-small, mlp and the ResNets also in fresh processes: time to first gradient and peak
memory, unless `--no-fresh`); `import` (import time in fresh processes), `scaling`
(gradient cost against 10^2..10^5 operations), `memory` (memory held by a finished
gradient). `--profile` adds, for the selected ResNets, where pullback's time goes and the
matmul GFLOP/s against this machine's float32 peak. The C heap keeps freed memory during
the run (see `pullback.bench.heap`), so no system's time depends on where its buffers land.

    python -m pullback bench --quick --out /tmp/bench      # CI: checks that it runs, < 1 minute
                                                           # (small sizes; resnet18-b8 only if named in --only)
    python -m pullback bench --only chain-small,mlp --samples 21 --pause 0.3
    python -m pullback bench --only resnet18-b1 --profile --systems pullback,pytorch-eager
"""

import argparse
import datetime
import importlib.metadata
import os
import platform
import sys
import time

from .. import _plot
from . import fresh, heap, report, runner, scaling, systems, workloads
from .memory import mlp_memory
from .report import Suite

EXTRA_PARTS = ("import", "scaling", "memory")


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m pullback bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes and few samples (CI: under a minute)")
    parser.add_argument("--only", default="", help="comma-separated parts to run (default: all); see --list")
    parser.add_argument("--systems", default="", help="comma-separated systems (default: all installed); pullback is always run")
    parser.add_argument("--samples", type=int, default=None, help="timed samples per system (default: per workload; 3 with --quick)")
    parser.add_argument("--pause", type=float, default=None, help="seconds of sleep before each sample (default 0.3; 0.05 with --quick)")
    parser.add_argument("--out", default="bench-results", help="folder for report.md, results.json and chart.png")
    parser.add_argument("--profile", action="store_true", help="profile pullback's ResNet gradient (where time goes, GFLOP/s)")
    parser.add_argument("--no-fresh", action="store_true", help="skip the fresh-process measurements of chain-small, mlp and the ResNets")
    parser.add_argument("--list", action="store_true", help="list the parts and systems, then exit")
    args = parser.parse_args(argv)
    if args.samples is not None and args.samples < 1:
        parser.error("--samples must be at least 1")
    if args.pause is not None and args.pause < 0:
        parser.error("--pause must not be negative")
    return args


def selected_parts(only, quick):
    known = list(workloads.workloads(quick)) + list(EXTRA_PARTS)
    if not only:
        # Quick mode checks that every path runs; the second ResNet adds time, not coverage.
        return [p for p in known if not (quick and p == "resnet18-b8")]
    chosen = [p.strip() for p in only.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in known]
    if unknown:
        raise SystemExit(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return [p for p in known if p in chosen]


def selected_systems(names):
    if not names:
        return list(systems.SYSTEMS)
    try:
        chosen = {systems.by_name(n).name for n in names.split(",") if n.strip()} | {"pullback"}
    except ValueError as e:
        raise SystemExit(str(e)) from None
    return [s for s in systems.SYSTEMS if s.name in chosen]


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def meta(args):
    versions = {"python": platform.python_version()}
    versions.update({dist: _version(dist) for dist in ("numpy", "pullback", "autograd", "mygrad", "torch", "jax")})
    try:
        import numpy as np

        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:
        blas = "unknown BLAS"
    return {
        "mode": "quick" if args.quick else "full",
        "when": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}, NumPy BLAS: {blas}",
        "versions": {k: v for k, v in versions.items() if v is not None},
        "pause": args.pause,
    }


def quick_skips(quick, workload, fresh_process=False):
    """Systems left out of a workload in --quick mode (they only add minutes), with the reason."""
    if not quick or workload.kind != "resnet":
        return {}
    if fresh_process:
        note = "skipped in --quick: compiling JAX's ResNet in a fresh process takes tens of seconds"
        return {"jax-jit": note, "jax-eager": note}
    return {"jax-eager": "skipped in --quick: op-by-op JAX takes tens of seconds on a ResNet"}


def _say(text):
    print(text, flush=True)


class _Clock:
    """Prints how long each part of the suite took."""

    def __init__(self):
        self.start = time.perf_counter()

    def lap(self, what):
        now = time.perf_counter()
        _say(f"({what}: {now - self.start:.1f} s)")
        self.start = now


def run(args):
    """Run the suite as `args` says; returns the Suite (also written to `args.out`)."""
    quick = args.quick
    args.pause = args.pause if args.pause is not None else (0.05 if quick else 0.3)
    min_sample_s = 0.005 if quick else 0.05
    parts = selected_parts(args.only, quick)
    chosen = selected_systems(args.systems)
    floor = systems.by_name("numpy-floor")
    suite = Suite(meta=meta(args))
    suite.meta["heap"] = heap.describe(heap.keep_freed_memory())
    all_workloads = workloads.workloads(quick)
    clock = _Clock()

    for name in parts:
        if name not in all_workloads:
            continue
        w = all_workloads[name]
        samples = args.samples or (3 if quick else w.samples)
        _say(f"\n{w.name}: {w.title} ...")
        result = runner.run_workload(w, chosen, floor, samples=samples, pause=args.pause, min_sample_s=min_sample_s,
                                     make_problem=workloads.make_problem, as_float64=workloads.as_float64,
                                     skip=quick_skips(quick, w))
        suite.workloads.append(result)
        _say(report.workload_markdown(result))
        if args.profile and w.kind == "resnet" and not result.note:
            from .convprofile import profile_resnet

            problem = workloads.make_problem(w)
            prepared = systems.by_name("pullback").prepare("resnet", problem)
            prepared.step()
            suite.profiles[w.name] = profile_resnet(prepared, problem, peak_n=512 if quick else 2048)
            _say(report.profile_markdown(w.name, suite.profiles[w.name]))
        clock.lap(w.name)

    if not args.no_fresh:
        for name in parts:
            w = all_workloads.get(name)
            if w is None or not w.fresh:
                continue
            _say(f"\n{w.name}: fresh processes ...")
            suite.fresh[w.name] = fresh.first_gradients(w, chosen, quick=quick, repeats=1 if quick else 3,
                                                        timeout=300 if quick else 900,
                                                        skip=quick_skips(quick, w, fresh_process=True))
            _say(report.fresh_markdown(w.name, suite.fresh[w.name]))
            clock.lap(f"{w.name} in fresh processes")

    if "import" in parts:
        _say("\nimport time ...")
        modules = ["numpy"] + [s.library for s in chosen if s.library and s.library not in ("numpy",)]
        suite.imports = fresh.import_times(list(dict.fromkeys(modules)), repeats=1 if quick else 5, warmup=not quick)
        _say(report.imports_markdown(suite.imports))
        clock.lap("import")

    if "scaling" in parts:
        _say("\nscaling ...")
        ops = [100, 1_000, 10_000] if quick else [100, 1_000, 10_000, 100_000]
        scaling_systems = [s for s in chosen if s.name in scaling.SCALING_SYSTEMS]
        suite.scaling = scaling.chain_scaling(ops, scaling_systems, samples=1 if quick else 5, pause=args.pause,
                                              min_sample_s=min_sample_s)
        _say(report.scaling_markdown(suite.scaling))
        clock.lap("scaling")

    if "memory" in parts:
        _say("\nmemory ...")
        problem = workloads.make_problem(all_workloads["mlp"])
        suite.memory = mlp_memory(problem, [s for s in chosen if s.name in ("pullback", "numpy-floor")])
        _say(report.memory_markdown(suite.memory))
        clock.lap("memory")

    write_report(suite, args.out)
    return suite


def write_report(suite, out):
    """Write the report files (see `report.write`) and say which; without matplotlib, say how to get the chart."""
    paths = report.write(suite, out)
    _say(f"\nwrote {', '.join(paths.values())}")
    if "chart.png" not in paths and not _plot.available():
        _say(_plot.HINT)


def failures(suite):
    """Lines describing every wrong gradient or broken adapter/measurement."""
    lines = [f"{w.workload.name}: {s.name}: " + (s.note or f"different gradient (relative error {s.error:.2g})")
             for w in suite.workloads for s in w.failures]
    lines += [f"{name} (fresh): {r.name}: {r.note}" for name, rows in suite.fresh.items() for r in rows
              if r.note.startswith("error")]
    lines += [f"import {m}: {r.note}" for m, r in suite.imports.items() if r.note.startswith("error")]
    return lines


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        for name, w in workloads.workloads(args.quick).items():
            print(f"{name:14s} {w.title}")
        for part in EXTRA_PARTS:
            print(f"{part:14s} (extra measurement)")
        print()
        for s in systems.SYSTEMS:
            print(f"{s.name:14s} {'installed' if s.available() else 'not installed'}")
        return 0
    suite = run(args)
    problems = failures(suite)
    for line in problems:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if problems else 0
