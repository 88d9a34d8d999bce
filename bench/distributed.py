"""Data-parallel step on a local Dask cluster against the same step in one process: the digits model.

Times one training step (gradient + Adam update) of the demo's convolutional network
(`pullback.demo.build_model`) on a batch of digits, side by side: in this process on the
whole batch and on one shard of it (the compute each worker does), with
`pb.distributed.step` on `--workers` worker processes (the batch split into that many
shards), and with `pb.distributed.step` on a loss that costs nothing but still sends a full
gradient tree (what the cluster adds to every step: broadcasting the model, scheduling,
the tree reduction and the gather). Systems alternate, with a pause before each sample
(`pullback.bench.runner`); every step starts from the same model, and the parameters it
returns are checked against the local step's. Prints medians, ranges and ratios.

    python bench/distributed.py [--workers 2] [--batch 32] [--samples 15] [--pause 0.3]
"""

import argparse
import os
import pickle
import statistics
import sys

# This file's folder comes first on sys.path when it runs as a script; its name would hide the
# `distributed` package from Dask (here and in the worker processes, which inherit sys.path).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import numpy as np  # noqa: E402

import pullback as pb  # noqa: E402
from pullback import demo, nn  # noqa: E402
from pullback.bench import report, runner  # noqa: E402
from pullback.bench.systems import Prepared  # noqa: E402
from pullback.data import load_digits  # noqa: E402


def parameters(model):
    return [leaf for leaf in pb.tree.leaves(model, trainable_only=True) if isinstance(leaf, np.ndarray)]


def free_loss(model, x, y):
    """A loss that costs nothing to differentiate but has a gradient (of zeros) for every parameter."""
    return sum(np.sum(p) for p in parameters(model)) * np.float32(0.0)


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--pause", type=float, default=0.3)
    parser.add_argument("--min-sample-s", type=float, default=0.2)
    args = parser.parse_args(argv)
    from dask.distributed import Client, LocalCluster

    rng = np.random.default_rng(0)
    images, labels = load_digits()
    x = (images[:args.batch].astype(np.float32) / 16)[..., None]
    y = labels[:args.batch].astype(np.int64)
    model = nn.testmode(demo.build_model(rng))  # no dropout or batch statistics: every step is the same step
    state = pb.optim.setup(pb.optim.Adam(1e-3), model)
    shards = list(zip(np.array_split(x, args.workers), np.array_split(y, args.workers)))

    def loss(m, x, y):
        return nn.logitcrossentropy(m(x), y)

    def local(x, y):
        def step():
            _, (g,) = pb.withgradient(lambda m: loss(m, x, y), model)
            return pb.optim.update(state, model, g)[1]
        return step

    with LocalCluster(n_workers=args.workers, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        prepared = {
            "local, whole batch": Prepared(local(x, y), parameters),
            f"local, one shard ({len(shards[0][1])})": Prepared(local(*shards[0]), parameters),
            f"dask, {args.workers} workers": Prepared(lambda: pb.distributed.step(client, loss, model, state, shards)[0],
                                                     parameters),
            f"dask, {args.workers} workers, free loss": Prepared(
                lambda: pb.distributed.step(client, free_loss, model, state, shards)[0], parameters),
        }
        reference = [np.asarray(p, np.float64) for p in parameters(prepared["local, whole batch"].step())]
        results = runner.time_systems(prepared, reference, tolerance=1e-5, samples=args.samples, pause=args.pause,
                                      min_sample_s=args.min_sample_s)
    base = results["local, whole batch"]
    checked = ("local, whole batch", f"dask, {args.workers} workers")  # the others take different steps
    rows = []
    for name, r in results.items():
        if not r.ran:
            rows.append([name, "–", "–", "–", r.note])
            continue
        same = "yes" if r.same else ("NO" if name in checked else "n/a (a different step)")
        rows.append([name, report.fmt_seconds(r.median), f"{report.fmt_seconds(min(r.times))} – "
                     f"{report.fmt_seconds(max(r.times))}", f"{r.median / base.median:.2f}",
                     f"{min(r.times) / min(base.times):.2f}", same])
    print(f"One training step of the digits model ({sum(p.size for p in parameters(model)):,} parameters), batch "
          f"{args.batch}, {args.workers} shards; {args.samples} samples, median per step\n")
    print(table(["step", "median", "range", "median / local whole batch", "fastest / local whole batch",
                 "same parameters"], rows))
    shard_name = f"local, one shard ({len(shards[0][1])})"
    dist = results[f"dask, {args.workers} workers"]
    free = results[f"dask, {args.workers} workers, free loss"]
    model_bytes = len(pickle.dumps(model, protocol=5))
    print(f"\nmodel pickled: {model_bytes / 1e3:,.0f} kB; gradient: {sum(p.nbytes for p in parameters(model)) / 1e3:,.0f} kB")
    if dist.ran and free.ran and results[shard_name].ran:
        shard = results[shard_name]
        print(f"overhead per step, dask step - local step on one shard: {report.fmt_seconds(dist.median - shard.median)} "
              f"(medians), {report.fmt_seconds(min(dist.times) - min(shard.times))} (fastest samples)")
        print(f"overhead per step, dask step on a free loss: {report.fmt_seconds(free.median)} (median), "
              f"{report.fmt_seconds(min(free.times))} (fastest), spread {report.fmt_seconds(statistics.pstdev(free.times))}")
    failed = [name for name, r in results.items() if not r.ran or (name in checked and not r.same)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
