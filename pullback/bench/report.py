"""The suite's output: markdown tables, the raw numbers as JSON, and a PNG chart (drawn with
matplotlib when it is installed: `pip install "pullback[plot]"`).

Ratios are pullback's median over the other system's median, from the same run: below 1,
pullback takes less time than that system; above 1, more.

>>> fmt_seconds(0.0123), fmt_seconds(2.5e-6), fmt_seconds(3.0), fmt_seconds(None)
('12.3 ms', '2.50 µs', '3.00 s', '–')
"""

import json
import math
import os
import statistics
from dataclasses import dataclass, field

from .. import _plot

# bar colours: pullback, the NumPy floor (and NumPy's own import), peers, a system whose gradient differed
BLUE, GREY, ORANGE, RED, INK = "#1f77b4", "#8c8c8c", "#ff7f0e", "#d62728", "#1e1e1e"


@dataclass
class Suite:
    """Everything one run measured (any part may be empty when not selected)."""

    meta: dict = field(default_factory=dict)
    workloads: list = field(default_factory=list)  # runner.WorkloadResult
    fresh: dict = field(default_factory=dict)  # workload name -> [fresh.FreshResult]
    imports: dict = field(default_factory=dict)  # module -> fresh.FreshResult
    scaling: dict = field(default_factory=dict)
    memory: list = field(default_factory=list)
    profiles: dict = field(default_factory=dict)  # workload name -> convprofile result

    def as_dict(self):
        return {
            "meta": self.meta,
            "workloads": [w.as_dict() for w in self.workloads],
            "fresh": {k: [r.as_dict() for r in v] for k, v in self.fresh.items()},
            "imports": {k: r.as_dict() for k, r in self.imports.items()},
            "scaling": self.scaling,
            "memory": self.memory,
            "profiles": self.profiles,
        }


def fmt_seconds(s):
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "–"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms" if s * 1e3 < 100 else f"{s * 1e3:.0f} ms"
    return f"{s * 1e6:.3g} µs" if s * 1e6 >= 10 else f"{s * 1e6:.2f} µs"


def _fmt_time(seconds, per_op):
    if per_op:
        return f"{seconds / per_op * 1e6:.2f}"
    return fmt_seconds(seconds)


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def workload_markdown(result):
    """The table of one timed workload."""
    w = result.workload
    lines = [f"### {w.name}: {w.title}", ""]
    if result.note:
        return "\n".join(lines + [f"_{result.note}_", ""])
    unit = "µs/op" if w.per_op else "time"
    base = result.get("pullback")
    rows = []
    for s in result.systems:
        if not s.ran:
            rows.append([s.name, "–", "–", "–", "–", "–", "–", s.note])
            continue
        ratio = f"{s.ratio(base):.2f}" if base is not None and base.ran else "–"
        check = ("same" if s.same else "**DIFFERENT**") + f" ({s.error:.1e})"
        faults = f"{statistics.median(s.faults):,.0f}" if s.faults else "–"
        rows.append([s.name, _fmt_time(s.median, w.per_op),
                     f"{_fmt_time(min(s.times), w.per_op)}–{_fmt_time(max(s.times), w.per_op)}",
                     ratio, check, s.dtype, faults, s.note or f"{len(s.times)}×{s.repeats}"])
    header = ["system", f"median {unit}", "min–max", "pullback / system", "gradient (rel. err. vs float64)", "dtype",
              "page faults / call", "note (samples×calls)"]
    return "\n".join(lines + [_table(header, rows), ""])


def fresh_markdown(name, rows):
    base = next((r for r in rows if r.name == "pullback" and r.ran), None)
    out = []
    for r in rows:
        if not r.ran:
            out.append([r.name, "–", "–", "–", "–", "–", "–", "–", r.note])
            continue
        ratio = f"{base.median('total_s') / r.median('total_s'):.2f}" if base else "–"
        peak, extra = r.median("peak_mib"), r.median("peak_mib") - r.median("base_mib")
        out.append([r.name, fmt_seconds(r.median("import_s")), fmt_seconds(r.median("build_s")),
                    fmt_seconds(r.median("first_s")), fmt_seconds(r.median("total_s")), ratio,
                    fmt_seconds(r.median("second_s")), f"{peak:.0f} (+{extra:.0f})", f"{len(r.runs)} process(es)"])
    header = ["system", "import", "build model", "first gradient", "time to first gradient", "pullback / system",
              "second gradient", "peak RSS MiB (+ over data)", "note"]
    return "\n".join([f"### {name}: fresh process", "", _table(header, out), ""])


def imports_markdown(imports):
    base = imports.get("pullback")
    rows = []
    for module, r in imports.items():
        if not r.ran:
            rows.append([module, "–", "–", "–", r.note])
            continue
        times = [run["import_s"] for run in r.runs]
        ratio = f"{base.median('import_s') / r.median('import_s'):.2f}" if base is not None and base.ran else "–"
        rows.append([f"`import {module}`", fmt_seconds(r.median("import_s")),
                     f"{fmt_seconds(min(times))}–{fmt_seconds(max(times))}", ratio, f"{len(times)} process(es)"])
    return "\n".join(["### import time in a fresh process", "",
                      _table(["module", "median", "min–max", "pullback / module", "note"], rows), ""])


def scaling_markdown(scaling):
    names = [n for n, row in scaling["systems"].items() if row["us_per_op"]]
    rows = []
    for k, n in enumerate(scaling["ops"]):
        rows.append([f"{n:,}"] + [f"{scaling['systems'][m]['us_per_op'][k]:.2f}" for m in names])
    rows.append(["exponent b (time ~ ops^b)"] + [
        "–" if scaling["systems"][m]["exponent"] is None else f"{scaling['systems'][m]['exponent']:.2f}" for m in names])
    notes = [f"- {m}: {row['note']}" for m, row in scaling["systems"].items() if row["note"]]
    return "\n".join(["### gradient cost against the number of operations (µs per op, 10 float32 elements)", "",
                      _table(["ops"] + names, rows), ""] + notes + ([""] if notes else []))


def memory_markdown(memory):
    rows = []
    for m in memory:
        rows.append([m["system"], f"{m['held_bytes'] / 2**20:.2f}", f"{m['held_after_gc_bytes'] / 2**20:.2f}",
                     f"{m['peak_bytes'] / 2**20:.2f}", f"{m['param_bytes'] / 2**20:.2f}",
                     f"{m['held_bytes'] / m['param_bytes']:.3f}", "yes" if m["ok"] else "**no**"])
    header = ["system", "held after return MiB", "held after gc MiB", "peak during call MiB", "trainable arrays MiB",
              "held / trainable", "held ≤ trainable + 64 KiB"]
    return "\n".join(["### memory held by a finished MLP gradient (tracemalloc)", "", _table(header, rows), ""])


def profile_markdown(name, p):
    total = p["total_s"]
    rows = [[g, fmt_seconds(s), f"{100 * s / total:.1f}%"] for g, s in p["groups_s"].items()]
    rows.append(["total (under cProfile)", fmt_seconds(total), "100%"])
    top = [[g, f"`{fn}`", fmt_seconds(s)] for g, fn, s in p["top_other"]]
    return "\n".join([
        f"### {name}: where pullback's gradient time goes", "", _table(["group", "time", "share"], rows), "",
        f"Matrix products: {p['matmul_gflop']:.2f} GFLOP per gradient; over the whole gradient "
        f"({fmt_seconds(p['gradient_s'])}, not profiled) that is **{p['matmul_gflops_per_s']:.1f} GFLOP/s**, "
        f"a lower bound for the products' own rate, against a measured float32 peak of "
        f"{p['peak_gflops_per_s']:.1f} GFLOP/s ({p['peak_n']}×{p['peak_n']} product with NumPy's BLAS): "
        f"{100 * p['matmul_gflops_per_s'] / p['peak_gflops_per_s']:.0f}% of peak. Over the matmul group's "
        f"time under the profile, the products run at {p.get('matmul_group_gflops_per_s', math.nan):.1f} GFLOP/s.",
        "",
        "Largest items outside matmul, im2col and normalisation:", "", _table(["group", "function", "time"], top), ""])


def markdown(suite):
    """The whole report."""
    meta = suite.meta
    parts = ["# pullback benchmark", "",
             f"{meta.get('mode', '')} run, {meta.get('when', '')}; {meta.get('machine', '')}.", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items()) + ".", "",
             f"Steady state: systems alternate, {meta.get('pause', '?')} s pause before each sample; median and "
             "min–max over samples; each sample averages several calls. **pullback / system** is the ratio of "
             "medians from the same run (below 1: pullback is faster). Every gradient is checked against a "
             "float64 hand-written reference: the largest ||g − ref|| / ||ref|| over the gradient's arrays "
             "(the numpy-floor row shows what plain float32 arithmetic loses).", ""]
    if meta.get("heap"):
        parts += [f"Heap during the samples: {meta['heap']}.", ""]
    if suite.workloads:
        parts += ["## Steady-state gradient time", ""] + [workload_markdown(w) for w in suite.workloads]
    if suite.fresh or suite.imports:
        parts += ["## Fresh process: time to first gradient, peak memory, import", ""]
        parts += [fresh_markdown(name, rows) for name, rows in suite.fresh.items()]
        if suite.imports:
            parts.append(imports_markdown(suite.imports))
    if suite.scaling:
        parts += ["## Scaling", "", scaling_markdown(suite.scaling)]
    if suite.memory:
        parts += ["## Memory", "", memory_markdown(suite.memory)]
    if suite.profiles:
        parts += ["## Convolution profile", ""] + [profile_markdown(n, p) for n, p in suite.profiles.items()]
    return "\n".join(parts).rstrip() + "\n"


# --- the chart -----------------------------------------------------------------------------------
_CAP = 4.0  # bars are drawn up to this many times pullback's median; longer ones are cut and marked


def _panels(suite):
    """`(title, [(label, median, lo, hi, colour, value text)], per_op)` for every panel of the chart
    (`per_op`: the workload's operations per gradient, when its times are shown per operation)."""
    panels = []
    for result in suite.workloads:
        base = result.get("pullback")
        if result.note or base is None or not base.ran:
            continue
        w = result.workload
        rows = []
        for s in result.systems:
            if not s.ran:
                continue
            colour = RED if not s.same else BLUE if s.name == "pullback" else GREY if s.name == "numpy-floor" else ORANGE
            value = (_fmt_time(s.median, w.per_op) + " µs/op") if w.per_op else fmt_seconds(s.median)
            rows.append((s.name, s.median, min(s.times), max(s.times), colour, f"{value}  {s.ratio(base):.2f}×"))
        panels.append((f"{w.name}: {w.title}", rows, w.per_op))
    for name, fresh_rows in suite.fresh.items():
        base = next((r for r in fresh_rows if r.name == "pullback" and r.ran), None)
        if base is None:
            continue
        rows = []
        for r in fresh_rows:
            if r.ran:
                totals = [run["total_s"] for run in r.runs]
                colour = BLUE if r.name == "pullback" else GREY if r.name == "numpy-floor" else ORANGE
                ratio = base.median("total_s") / r.median("total_s")
                rows.append((r.name, r.median("total_s"), min(totals), max(totals), colour,
                             f"{fmt_seconds(r.median('total_s'))}  {r.median('peak_mib'):.0f} MiB  {ratio:.2f}×"))
        panels.append((f"{name}: time to first gradient in a fresh process (and peak RSS)", rows, None))
    base = suite.imports.get("pullback")
    if base is not None and base.ran:
        rows = []
        for module, r in suite.imports.items():
            if r.ran:
                times = [run["import_s"] for run in r.runs]
                colour = BLUE if module == "pullback" else GREY if module == "numpy" else ORANGE
                rows.append((module, r.median("import_s"), min(times), max(times), colour,
                             f"{fmt_seconds(r.median('import_s'))}  {base.median('import_s') / r.median('import_s'):.2f}×"))
        panels.append(("import time of each module in a fresh process", rows, None))
    return panels


def _tick_label(per_op):
    if per_op:
        return lambda seconds, _: f"{seconds / per_op * 1e6:.3g} µs/op" if seconds > 0 else "0"
    return lambda seconds, _: fmt_seconds(seconds) if seconds > 0 else "0"


def chart(suite):
    """The chart as a matplotlib Figure, or None (matplotlib missing, or nothing timed).

    One panel per workload: a bar per system (its median), a whisker from min to max, a
    dashed line at pullback's median, and the value and ratio (pullback / system) after
    each bar. Bars longer than `_CAP` times pullback's median are cut at the edge and hatched.
    """
    panels = _panels(suite)
    if not panels:
        return None
    fig = _plot.new_figure(1040, 110 + sum(70 + 26 * len(rows) for _, rows, _ in panels))
    if fig is None:
        return None
    fig.suptitle("pullback benchmark: time per gradient (shorter is faster)\n"
                 f"bar: median; whisker: min–max; dashed: pullback's median; number: pullback / system "
                 f"(below 1: pullback is faster); bars cut at {_CAP:g}× pullback", fontsize=10)
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=[len(rows) + 1 for _, rows, _ in panels])[:, 0]
    for ax, (title, rows, per_op) in zip(axes, panels):
        base = next((r[1] for r in rows if r[0] == "pullback"), None) or max(r[1] for r in rows)
        cap = _CAP * base
        ys = range(len(rows))
        bars = ax.barh(ys, [min(r[1], cap) for r in rows], height=0.7, color=[r[4] for r in rows])
        for bar, row in zip(bars, rows):
            if row[1] > cap:
                bar.set_hatch("//")
        ax.hlines(ys, [min(r[2], cap) for r in rows], [min(r[3], cap) for r in rows], color=INK, linewidth=1.2)
        ax.axvline(base, color=INK, linestyle="--", linewidth=0.8)
        for y, row in zip(ys, rows):
            ax.annotate(row[5], xy=(1, y), xycoords=("axes fraction", "data"), xytext=(6, 0),
                        textcoords="offset points", va="center", fontsize=9)
        ax.set_xlim(0, cap)
        ax.set_yticks(list(ys), [r[0][:16] for r in rows])
        ax.invert_yaxis()
        ax.xaxis.set_major_formatter(_tick_label(per_op))
        ax.set_title(title[:95], loc="left", fontsize=10)
    return fig


def write(suite, out_dir):
    """Write `report.md`, `results.json` and (with matplotlib, when anything was timed) `chart.png`
    into `out_dir`; returns `{name: path}` of the files written."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {name: os.path.join(out_dir, name) for name in ("report.md", "results.json", "chart.png")}
    with open(paths["report.md"], "w", encoding="utf-8") as f:
        f.write(markdown(suite))
    with open(paths["results.json"], "w", encoding="utf-8") as f:
        json.dump(suite.as_dict(), f, indent=1, default=str)
    figure = chart(suite)
    if figure is None:
        del paths["chart.png"]
    else:
        _plot.save(figure, paths["chart.png"])
    return paths
