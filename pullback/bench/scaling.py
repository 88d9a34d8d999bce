"""How the cost of a gradient grows with the number of operations (it should be linear).

The elementwise chain on 10 float32 elements, at 10^2 .. 10^5 operations: time per
operation at each length, and the exponent `b` of a least-squares fit `time ~ ops^b`
(1.0 is linear; above it, the cost per operation grows with the tape).

>>> round(fit_exponent([100, 1000, 10000], [1e-4, 1e-3, 1e-2]), 3)
1.0
"""

import numpy as np

from .runner import prepare_systems, time_systems
from .workloads import chain_floor

SCALING_SYSTEMS = ("pullback", "numpy-floor", "pytorch-eager", "autograd")


def fit_exponent(ops, seconds):
    """Slope of log(seconds) against log(ops)."""
    return float(np.polyfit(np.log(ops), np.log(seconds), 1)[0])


def chain_scaling(ops_list, systems, *, samples, pause, min_sample_s):
    """`{"ops": [...], "systems": {name: {"us_per_op": [...], "exponent": b, "note": ...}}}`."""
    x = np.random.default_rng(0).uniform(-1, 1, 10).astype(np.float32)
    table = {s.name: {"us_per_op": [], "exponent": None, "note": ""} for s in systems}
    for n in ops_list:
        problem = {"x": x, "ops": n}
        prepared, results = prepare_systems("chain", problem, systems)
        reference = [chain_floor(x.astype(np.float64), n)]
        # Past a few thousand operations the gradient decays below float32's range (it stops at
        # the smallest subnormal while float64 goes on), so tiny gradients compare absolutely.
        time_systems(prepared, reference, tolerance=1e-3, samples=samples, pause=pause,
                     min_sample_s=min_sample_s, results=results, smallest=1e-30)
        for name, r in results.items():
            row = table[name]
            if r.ran:
                row["us_per_op"].append(r.median / n * 1e6)
                if not r.same:
                    row["note"] = f"gradient differs at {n} ops (relative error {r.error:.2g})"
            elif not row["note"]:
                row["note"] = r.note
    for row in table.values():
        if len(row["us_per_op"]) == len(ops_list) and len(ops_list) > 1:
            row["exponent"] = fit_exponent(ops_list, [t * n for t, n in zip(row["us_per_op"], ops_list)])
    return {"ops": list(ops_list), "systems": table}
