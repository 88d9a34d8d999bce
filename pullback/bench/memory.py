"""Memory held by a finished gradient, against the bytes of the trainable arrays.

On the MLP workload: after a warm-up call, `tracemalloc` (which NumPy reports its array
buffers to) is started, one gradient is computed and kept, and the memory still allocated
is read before and after a garbage collection. A gradient that keeps no tape, thunk or
duplicate holds about the bytes of the parameters it returns, plus a few small Python
objects. The peak during the call is shown too. (PyTorch and JAX allocate outside
`tracemalloc`'s view, so only NumPy-based systems are measured.)

>>> from .systems import by_name
>>> row = held_memory(by_name("numpy-floor"), "chain", {"x": np.ones(1000, np.float32), "ops": 3}, 4000)
>>> row["held_bytes"] >= 4000, row["param_bytes"]
(True, 4000)
"""

import gc
import tracemalloc

import numpy as np

# Small Python objects around the arrays (containers, Tangents, array headers) may add this much.
SLACK_BYTES = 64 * 1024


def held_memory(system, kind, problem, param_bytes):
    """`{held_bytes, held_after_gc_bytes, peak_bytes, param_bytes, ok}` for one gradient of `system`."""
    prepared = system.prepare(kind, problem)
    prepared.step()  # warm-up: rule tables and caches are built before counting
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = prepared.step()
        held, peak = tracemalloc.get_traced_memory()
        gc.collect()
        held_after_gc = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del result
    held, held_after_gc, peak = held - before, held_after_gc - before, peak - before
    return {"system": system.name, "held_bytes": held, "held_after_gc_bytes": held_after_gc, "peak_bytes": peak,
            "param_bytes": int(param_bytes), "ok": held <= param_bytes + SLACK_BYTES}


def mlp_memory(problem, systems):
    """Rows of `held_memory` on the MLP for each NumPy-based system that is available."""
    param_bytes = sum(int(np.asarray(p).nbytes) for p in problem["params"])
    return [held_memory(s, "mlp", problem, param_bytes) for s in systems if s.available()]
