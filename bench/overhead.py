"""Per-operation overhead: gradient of an elementwise chain on a small float32 array.

Runs pullback, the hand-written NumPy forward+backward (the floor) and every installed
peer side by side through the benchmark suite (`pullback.bench`): alternating systems,
pausing between samples, checking the gradients, and printing medians, ranges and the
ratio pullback / system. The full suite is `python -m pullback bench`.

    python bench/overhead.py [--size 10] [--ops 100] [--samples 15] [--pause 0.3] [--systems a,b]
"""

import argparse
import sys

from pullback.bench import report, runner, systems, workloads


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--ops", type=int, default=100)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--pause", type=float, default=0.3)
    parser.add_argument("--systems", default="", help="comma-separated systems (default: all installed)")
    args = parser.parse_args(argv)

    workload = workloads.Workload(
        "chain", f"{args.ops}-op elementwise chain, {args.size} float32 elements (µs per op)", "chain",
        {"elements": args.size, "ops": args.ops}, per_op=args.ops)
    chosen = [systems.by_name(n) for n in args.systems.split(",") if n.strip()] if args.systems else systems.SYSTEMS
    if all(s.name != "pullback" for s in chosen):
        chosen = [systems.by_name("pullback"), *chosen]
    result = runner.run_workload(workload, chosen, systems.by_name("numpy-floor"), samples=args.samples,
                                 pause=args.pause, min_sample_s=0.05, make_problem=workloads.make_problem,
                                 as_float64=workloads.as_float64)
    print(report.workload_markdown(result))
    return 1 if result.failures or result.note else 0


if __name__ == "__main__":
    sys.exit(main())
