"""The benchmark suite (pullback.bench): it runs, checks gradients, and reports what it measured.

One quick run of the whole suite (CI's `--quick`) is shared by the structure tests; small
fake systems test the runner's logic (alternation, pauses, ratios, failure detection).
Timings themselves are not asserted: they depend on the machine.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pullback import _plot
from pullback.bench import cli, fresh, heap, report, runner, systems, workloads
from pullback.bench.systems import Prepared, System, Unsupported

REPO = Path(__file__).resolve().parents[1]
# Peers whose steady-state and fresh-process runs stay within the test's time; JAX's
# ResNet compilation alone would take longer (its adapters are tested on small workloads below).
QUICK_SYSTEMS = "pullback,numpy-floor,autograd,pytorch-eager"


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    # in a child process, as users run it: the suite sets the C heap to keep freed memory for the
    # rest of its process (see pullback.bench.heap), which the tests after this one must not inherit
    out = tmp_path_factory.mktemp("bench")
    code = subprocess.run([sys.executable, "-m", "pullback", "bench", "--quick", "--out", str(out), "--pause", "0.01",
                           "--profile", "--systems", QUICK_SYSTEMS], cwd=REPO).returncode
    data = json.loads((out / "results.json").read_text())
    return {"code": code, "out": out, "data": data, "workloads": {w["name"]: w for w in data["workloads"]}}


def _installed(name):
    return systems.by_name(name).available()


def test_quick_run_succeeds_and_writes_the_numbers_and_with_matplotlib_the_chart(quick):
    assert quick["code"] == 0
    chart = ["chart.png"] if _plot.available() else []
    assert sorted(os.listdir(quick["out"])) == chart + ["report.md", "results.json"]
    assert quick["data"]["meta"]["mode"] == "quick"


def test_quick_run_covers_every_part(quick):
    assert list(quick["workloads"]) == ["chain-small", "chain-large", "chain-large-fresh", "mlp", "resnet18-b1"]
    assert set(quick["data"]["fresh"]) == {"chain-small", "mlp", "resnet18-b1"}
    assert quick["data"]["imports"] and quick["data"]["scaling"] and quick["data"]["memory"]
    assert list(quick["data"]["profiles"]) == ["resnet18-b1"]


def test_every_installed_system_ran_and_agreed_with_the_float64_reference(quick):
    for name, w in quick["workloads"].items():
        assert w["note"] == "", (name, w["note"])
        rows = {r["name"]: r for r in w["systems"]}
        assert set(rows) == set(QUICK_SYSTEMS.split(","))
        for system, row in rows.items():
            supported = w["name"].startswith(("chain", "mlp")) or system != "autograd"
            if not _installed(system) or not supported:
                assert row["note"].startswith("skipped: ") and not row["times_s"], (name, system, row)
                continue
            assert row["same_gradient"] is True, (name, system, row)
            assert 0 <= row["max_relative_error"] <= w["tolerance"]
            assert len(row["times_s"]) == 3 and row["repeats"] >= 1
            assert row["min_s"] <= row["median_s"] <= row["max_s"]


def test_ratio_is_pullback_median_over_the_system_median(quick):
    for w in quick["workloads"].values():
        rows = {r["name"]: r for r in w["systems"]}
        base = rows["pullback"]["median_s"]
        assert rows["pullback"]["ratio_pullback_over_system"] == 1.0
        for row in rows.values():
            if "median_s" in row:
                assert math.isclose(row["ratio_pullback_over_system"], base / row["median_s"])


def test_pullback_gradients_stay_float32(quick):
    for w in quick["workloads"].values():
        assert next(r for r in w["systems"] if r["name"] == "pullback")["dtype"] == "float32"


def test_autograd_has_no_resnet_and_says_so(quick):
    row = next(r for r in quick["workloads"]["resnet18-b1"]["systems"] if r["name"] == "autograd")
    assert row["note"].startswith("skipped: ")


def test_fresh_process_numbers_are_consistent(quick):
    for name, rows in quick["data"]["fresh"].items():
        ran = {r["name"]: r for r in rows if r["runs"]}
        assert "pullback" in ran and "numpy-floor" in ran
        for r in ran.values():
            assert r["total_s"] >= r["first_s"] > 0 and r["second_s"] > 0
            assert math.isclose(r["total_s"], r["import_s"] + r["build_s"] + r["first_s"], rel_tol=1e-6)
            assert r["peak_mib"] >= r["base_mib"] > 0
        # The floor imports nothing beyond NumPy, which is loaded before the clock starts.
        assert ran["numpy-floor"]["import_s"] < ran["pullback"]["import_s"]
        # Each child's own peak, not the parent's (this process holds far more than a child needs).
        assert ran["numpy-floor"]["peak_mib"] < 1024


def test_import_times_measured_for_numpy_and_pullback(quick):
    imports = quick["data"]["imports"]
    assert list(imports)[:2] == ["numpy", "pullback"]
    for module in ("numpy", "pullback"):
        assert 0 < imports[module]["import_s"] < 30


def test_fresh_processes_cache_compiled_modules_as_installed_packages_do(monkeypatch):
    """A fresh process may write compiled modules even when this one may not: pip compiled the
    peers' modules at install, and pullback's would otherwise be compiled again in every process."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    code = "import sys; print(sys.flags.dont_write_bytecode)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "1"
    assert fresh._run([sys.executable, "-c", code], 60).strip() == "0"


def test_scaling_covers_three_decades_with_a_fitted_exponent(quick):
    s = quick["data"]["scaling"]
    assert s["ops"] == [100, 1000, 10000]
    row = s["systems"]["pullback"]
    assert len(row["us_per_op"]) == 3 and all(t > 0 for t in row["us_per_op"])
    assert row["note"] == ""  # the gradient matched the reference at every length
    expected = np.polyfit(np.log(s["ops"]), np.log([t * n for t, n in zip(row["us_per_op"], s["ops"])]), 1)[0]
    assert math.isclose(row["exponent"], expected)


def test_memory_held_by_the_gradient_is_at_least_the_gradient_itself(quick):
    rows = {m["system"]: m for m in quick["data"]["memory"]}
    params = workloads.make_problem(workloads.workloads()["mlp"])["params"]
    expected = sum(p.nbytes for p in params)
    for m in rows.values():
        assert m["param_bytes"] == expected
        assert m["held_bytes"] >= expected  # the returned gradient arrays are still alive
        assert m["peak_bytes"] >= m["held_bytes"]
        assert m["ok"] == (m["held_bytes"] <= expected + 64 * 1024)
    assert rows["numpy-floor"]["ok"]


def test_profile_groups_add_up_and_report_gflops(quick):
    p = quick["data"]["profiles"]["resnet18-b1"]
    assert math.isclose(sum(p["groups_s"].values()), p["total_s"], rel_tol=1e-9)
    assert set(p["groups_s"]) >= {"matmul", "im2col/col2im", "normalisation", "other"}
    assert p["groups_s"]["matmul"] > 0 and p["groups_s"]["normalisation"] > 0
    assert p["matmul_gflops_per_s"] > 0 and p["peak_gflops_per_s"] > 0
    assert p["matmul_gflops_per_s"] < 1.5 * p["peak_gflops_per_s"]  # an end-to-end rate cannot beat the peak
    assert 0 < p["matmul_group_gflops_per_s"] < math.inf


def test_markdown_report_has_a_table_per_part(quick):
    text = (quick["out"] / "report.md").read_text()
    for name in quick["workloads"]:
        assert f"### {name}:" in text
    for heading in ("### mlp: fresh process", "### import time", "### gradient cost against the number",
                    "### memory held", "### resnet18-b1: where pullback's gradient time goes", "GFLOP/s"):
        assert heading in text
    assert "**DIFFERENT**" not in text
    assert "| pullback | " in text


# --- the runner's logic, with fake systems -----------------------------------------------------
class _Fake(System):
    def __init__(self, name, grad, calls=None, unsupported=False):
        self.name, self._grad, self._calls, self._unsupported = name, grad, calls, unsupported

    def chain(self, problem):
        if self._unsupported:
            raise Unsupported("no chain here")

        def step():
            if self._calls is not None:
                self._calls.append(self.name)
            return self._grad

        return Prepared(step, lambda g: [g])


def _run(fakes, samples=3, pause=0.0):
    w = workloads.Workload("fake", "fake", "chain", {"elements": 4, "ops": 3})
    return runner.run_workload(w, fakes, systems.by_name("numpy-floor"), samples=samples, pause=pause,
                               min_sample_s=0.0, make_problem=workloads.make_problem, as_float64=workloads.as_float64)


def _right_gradient():
    x = workloads.make_problem(workloads.Workload("fake", "fake", "chain", {"elements": 4, "ops": 3}))["x"]
    return workloads.chain_floor(x, 3)


def test_a_system_with_a_wrong_gradient_is_flagged_and_fails_the_run():
    good = _right_gradient()
    result = _run([_Fake("pullback", good), _Fake("liar", good * 1.01)])
    assert result.get("pullback").same and not result.get("liar").same
    assert result.failures == [result.get("liar")]
    assert "**DIFFERENT**" in report.workload_markdown(result)
    assert cli.failures(report.Suite(workloads=[result])) == [
        f"fake: liar: different gradient (relative error {result.get('liar').error:.2g})"]


def _suite_with_a_peer():
    """A real (fake-system) run: pullback, a peer that agrees, one that does not, and a slow one."""
    good = _right_gradient()
    result = _run([_Fake("pullback", good), _Fake("peer", good), _Fake("liar", good * 1.01)])
    base = result.get("pullback").median
    slow = runner.SystemResult("slowpoke", times=[9 * base, 10 * base, 12 * base], repeats=1, dtype="float32",
                               error=0.0, same=True)
    result.systems.append(slow)  # 10 times pullback's median: past the cut at 4 times
    return report.Suite(workloads=[result]), result


def test_chart_has_a_bar_per_system_coloured_by_role_with_whiskers_and_ratios():
    pytest.importorskip("matplotlib")
    suite, result = _suite_with_a_peer()
    fig = report.chart(suite)
    [ax] = fig.axes
    names = [t.get_text() for t in ax.get_yticklabels()]
    assert names == ["pullback", "peer", "liar", "slowpoke"]
    bars = dict(zip(names, ax.patches))
    import matplotlib.colors

    def colour(name):
        return matplotlib.colors.to_hex(bars[name].get_facecolor())

    assert colour("pullback") == report.BLUE and colour("peer") == report.ORANGE and colour("liar") == report.RED
    base = result.get("pullback").median
    for name in ("pullback", "peer", "liar"):
        assert math.isclose(bars[name].get_width(), result.get(name).median)  # bar length is the median
    assert math.isclose(bars["slowpoke"].get_width(), 4 * base) and bars["slowpoke"].get_hatch() == "//"
    assert ax.get_xlim() == (0, 4 * base)
    texts = [t.get_text() for t in ax.texts]
    peer = result.get("peer")
    assert any(t.endswith(f"{peer.ratio(result.get('pullback')):.2f}×") for t in texts)
    assert any(t.endswith("0.10×") for t in texts)


def test_chart_is_written_as_a_valid_png_that_matplotlib_reads_back(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.image

    suite, _ = _suite_with_a_peer()
    paths = report.write(suite, tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["chart.png", "report.md", "results.json"]
    data = (tmp_path / "chart.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    fig = report.chart(suite)
    width, height = (fig.get_size_inches() * fig.dpi).round().astype(int)
    image = matplotlib.image.imread(paths["chart.png"])
    assert image.shape[:2] == (height, width) and width == 1040
    pixels = {tuple(p) for p in (image[..., :3].reshape(-1, 3) * 255).round().astype(int).tolist()}
    assert {(31, 119, 180), (255, 127, 14), (214, 39, 40)} <= pixels  # pullback, the peer, the wrong one


def test_without_matplotlib_the_numbers_are_written_and_the_hint_printed(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    suite, result = _suite_with_a_peer()
    assert report.chart(suite) is None
    paths = report.write(suite, tmp_path)
    assert sorted(paths) == sorted(os.listdir(tmp_path)) == ["report.md", "results.json"]
    assert "| liar |" in (tmp_path / "report.md").read_text()
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["workloads"][0]["systems"][0]["median_s"] == result.get("pullback").median
    cli.write_report(suite, str(tmp_path / "cli"))
    printed = capsys.readouterr().out
    assert 'pip install "pullback[plot]"' in printed and len(printed.strip().splitlines()) == 2  # wrote ..., hint
    assert sorted(os.listdir(tmp_path / "cli")) == ["report.md", "results.json"]


def test_pullback_changing_the_dtype_is_a_failure():
    result = _run([_Fake("pullback", _right_gradient().astype(np.float64))])
    assert not result.get("pullback").same and "dtype changed" in result.get("pullback").note


def test_systems_alternate_with_rotating_start_and_pause_before_each_sample(monkeypatch):
    calls, sleeps = [], []
    monkeypatch.setattr(runner.time, "sleep", sleeps.append)
    good = _right_gradient()
    _run([_Fake(n, good, calls) for n in ("pullback", "b", "c")], samples=3, pause=0.25)
    timed = calls[6:]  # after one check call and one calibration call each
    assert timed == ["pullback", "b", "c", "b", "c", "pullback", "c", "pullback", "b"]
    assert sleeps == [0.25] * 9


def test_page_faults_per_call_are_counted_and_reported(monkeypatch):
    faults = [0]

    def touching(pages):  # a step that makes the OS map `pages` new pages
        return lambda: (faults.__setitem__(0, faults[0] + pages), [np.ones(2)])[1]

    monkeypatch.setattr(runner, "_page_faults", lambda: faults[0])
    r = runner.time_systems({"pullback": Prepared(touching(0), list), "fresh": Prepared(touching(250), list)},
                            [np.ones(2)], tolerance=1e-6, samples=3, pause=0.0, min_sample_s=0.0)
    assert r["fresh"].faults == [250.0] * 3 and r["pullback"].faults == [0.0] * 3
    table = report.workload_markdown(runner.WorkloadResult(workloads.workloads(quick=True)["chain-small"],
                                                           list(r.values())))
    assert "| page faults / call |" in table.splitlines()[2] and "| 250 |" in table
    assert r["fresh"].as_dict()["page_faults_per_call"] == [250.0] * 3


@pytest.mark.skipif(runner._page_faults() is None, reason="the OS does not report page faults")
def test_the_page_fault_counter_sees_fresh_memory_being_touched():
    # in a fresh process: a library loaded here (as the suite's peers are) may keep freed memory mapped
    code = ("import numpy as np; from pullback.bench.runner import _page_faults; before = _page_faults(); "
            "block = np.empty(64 * 2**20, np.uint8); block[::4096] = 1; print(_page_faults() - before)")
    counted = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert counted >= 0.9 * 32  # 64 MiB: at least one fault per 2 MiB huge page (16,384 with 4 KiB pages)


def test_fresh_memory_workloads_release_the_heap_before_every_sample_and_others_never(monkeypatch):
    released = []
    monkeypatch.setattr(runner.heap, "release_freed_memory", lambda: released.append(True))
    pair = {"pullback": Prepared(lambda: [np.ones(2)], list), "b": Prepared(lambda: [np.ones(2)], list)}
    runner.time_systems(dict(pair), [np.ones(2)], tolerance=1e-6, samples=3, pause=0.0, min_sample_s=0.0)
    assert released == []
    runner.time_systems(dict(pair), [np.ones(2)], tolerance=1e-6, samples=3, pause=0.0, min_sample_s=0.0,
                        fresh_memory=True)
    assert len(released) == 6  # 3 samples of 2 systems
    chosen = workloads.workloads()
    assert chosen["chain-large-fresh"].fresh_memory and not chosen["chain-large"].fresh_memory
    assert chosen["chain-large-fresh"].sizes == chosen["chain-large"].sizes


@pytest.mark.skipif(not heap.is_glibc(), reason="the heap settings are glibc's")
def test_the_heap_keeps_freed_memory_until_it_is_released():
    # in a fresh process: the settings last for the life of the process
    code = """if True:
        import os, numpy as np
        from pullback.bench import heap
        def rss_mib():
            return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        assert heap.keep_freed_memory()
        base = rss_mib()
        blocks = [np.ones(2**20, np.float32) for _ in range(32)]  # 128 MiB in 4 MiB arrays
        touched = rss_mib()
        del blocks
        kept = rss_mib()
        assert heap.release_freed_memory()
        print(touched - base, kept - base, rss_mib() - base)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    touched, kept, released = map(float, out.split())
    assert touched > 120 and kept > 120  # freed, but still held by the process for reuse
    assert released < 20  # handed back to the kernel


def test_the_report_says_what_the_heap_did(quick):
    line = quick["data"]["meta"]["heap"]
    assert line.startswith("glibc keeps freed memory" if heap.is_glibc() else "the C library's default")
    assert f"Heap during the samples: {line}." in (quick["out"] / "report.md").read_text()


def test_pullback_unsupported_skips_the_workload_before_peers_are_prepared():
    calls = []
    result = _run([_Fake("pullback", None, unsupported=True), _Fake("b", _right_gradient(), calls)])
    assert result.note == "skipped: no chain here" and calls == []
    assert "_skipped: no chain here_" in report.workload_markdown(result)


def test_missing_or_unsupported_peers_are_skipped_with_a_note():
    class Missing(_Fake):
        library = "surely_not_an_installed_module"

    good = _right_gradient()
    result = _run([_Fake("pullback", good), Missing("gone", good), _Fake("nochain", good, unsupported=True)])
    assert result.get("gone").note == "skipped: surely_not_an_installed_module is not installed"
    assert result.get("nochain").note == "skipped: no chain here"
    assert result.failures == []


def test_systems_skipped_on_purpose_are_never_prepared_or_started():
    calls = []
    good = _right_gradient()
    w = workloads.Workload("fake", "fake", "chain", {"elements": 4, "ops": 3})
    result = runner.run_workload(w, [_Fake("pullback", good), _Fake("slow", good, calls)], systems.by_name("numpy-floor"),
                                 samples=2, pause=0.0, min_sample_s=0.0, make_problem=workloads.make_problem,
                                 as_float64=workloads.as_float64, skip={"slow": "skipped in --quick: slow"})
    assert calls == [] and result.get("slow").note == "skipped in --quick: slow" and not result.get("slow").ran
    [row] = fresh.first_gradients(w, [_Fake("slow", good)], quick=True, skip={"slow": "skipped: on purpose"})
    assert row.note == "skipped: on purpose" and not row.ran
    resnet = workloads.workloads(quick=True)["resnet18-b1"]
    assert set(cli.quick_skips(True, resnet, fresh_process=True)) == {"jax-jit", "jax-eager"}
    assert cli.quick_skips(False, resnet) == {} and cli.quick_skips(True, workloads.workloads()["mlp"]) == {}


def test_relative_error_catches_shape_and_count_mismatches():
    ref = [np.ones(3)]
    assert runner.relative_error([np.ones(3)], ref) == 0
    assert runner.relative_error([np.ones(4)], ref) == math.inf
    assert runner.relative_error([], ref) == math.inf
    assert runner.relative_error([None], ref) == math.inf
    assert math.isclose(runner.relative_error([np.array([1.0, 1.0, 1.0 + 3**0.5])], ref), 1.0)
    assert math.isclose(runner.relative_error([np.zeros(3), np.ones(2)], [np.zeros(3), np.ones(2) * 2]), 0.5)
    assert runner.relative_error([np.full(3, 1e-40)], [np.zeros(3)], smallest=1e-30) < 1e-9


def test_unknown_parts_and_systems_are_refused_with_the_choices():
    with pytest.raises(SystemExit, match="unknown part.*choose from chain-small"):
        cli.selected_parts("chain-small,nope", quick=True)
    with pytest.raises(SystemExit, match="unknown system 'nope'; choose from pullback"):
        cli.selected_systems("nope")
    assert cli.selected_parts("mlp,import", quick=False) == ["mlp", "import"]
    assert "resnet18-b8" not in cli.selected_parts("", quick=True)
    assert [s.name for s in cli.selected_systems("pytorch eager")] == ["pullback", "pytorch-eager"]


# --- pieces -----------------------------------------------------------------------------------
def test_profile_splits_builtins_between_the_groups_of_their_callers():
    from pullback.bench import convprofile

    norm = ("/r/pullback/nn/normalise.py", 1, "_moments")
    im2col = ("/r/pullback/nn/conv.py", 2, "_im2col")
    numpy_fn = ("/r/numpy/_core/fromnumeric.py", 3, "sum")
    einsum = ("~", 0, "<built-in method numpy.einsum>")
    stats = {
        norm: (1, 1, 0.1, 0.5, {}),
        im2col: (1, 1, 0.2, 0.3, {}),
        numpy_fn: (1, 1, 0.05, 0.05, {norm: (1, 1, 0.05, 0.05)}),
        einsum: (2, 2, 0.4, 0.4, {norm: (1, 1, 0.3, 0.3), im2col: (1, 1, 0.1, 0.1)}),
    }
    groups = convprofile.group_times(stats)
    assert math.isclose(groups["normalisation"], 0.1 + 0.05 + 0.3)
    assert math.isclose(groups["im2col/col2im"], 0.2 + 0.1)
    assert math.isclose(sum(groups.values()), 0.75)


@pytest.mark.parametrize("name", ["mygrad", "jax-jit", "jax-eager"])
def test_optional_peer_adapters_compute_the_reference_gradient(name):
    system = systems.by_name(name)
    if not system.available():
        pytest.skip(f"{system.library} is not installed")
    for kind, w in (("chain", workloads.workloads()["chain-small"]), ("mlp", workloads.workloads()["mlp"])):
        problem = workloads.make_problem(w)
        reference = systems.by_name("numpy-floor").prepare(kind, workloads.as_float64(problem))
        run = system.prepare(kind, problem)
        assert runner.relative_error(run.to_numpy(run.step()), reference.to_numpy(reference.step())) < w.tolerance


def test_fresh_child_reports_its_own_peak_memory_not_the_parents():
    ballast = np.ones(400 * 2**20 // 8)  # this process now holds over 400 MiB
    [result] = fresh.first_gradients(workloads.workloads(quick=True)["chain-small"],
                                     [systems.by_name("numpy-floor")], quick=True, timeout=120)
    assert result.note == "" and len(result.runs) == 1
    assert 0 < result.median("peak_mib") < 300 < ballast.nbytes / 2**20


def test_import_pullback_does_not_import_the_benchmark_or_matplotlib():
    code = ("import sys, pullback, pullback.demo; "
            "print([any(m.startswith(p) for m in sys.modules) for p in ('pullback.bench', 'matplotlib')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[False, False]"


def test_bench_scripts_and_module_entry_point_run():
    overhead = subprocess.run([sys.executable, str(REPO / "bench" / "overhead.py"), "--samples", "1", "--pause", "0",
                               "--ops", "10", "--systems", "numpy-floor"], capture_output=True, text=True, timeout=120)
    assert overhead.returncode == 0, overhead.stderr
    assert "| pullback |" in overhead.stdout and "| numpy-floor |" in overhead.stdout
    listing = subprocess.run([sys.executable, "-m", "pullback.bench", "--list"], capture_output=True, text=True,
                             timeout=60)
    assert listing.returncode == 0 and "chain-small" in listing.stdout and "pytorch-eager" in listing.stdout


@pytest.mark.parametrize("floor", [workloads.chain_floor, workloads.chain_floor_recomputing,
                                   workloads.chain_forward_accumulation])
@pytest.mark.parametrize("n_ops", [0, 1, 2, 3, 5, 7, 12])
def test_every_hand_written_chain_gradient_matches_central_differences(floor, n_ops):
    x = np.random.default_rng(n_ops).uniform(-1, 1, 4)
    before = x.copy()
    h = 1e-6
    fd = np.array([(workloads.chain(x + h * e, n_ops, np) - workloads.chain(x - h * e, n_ops, np)) / (2 * h)
                   for e in np.eye(4)])
    np.testing.assert_allclose(floor(x, n_ops), fd, rtol=1e-7, atol=1e-9)
    np.testing.assert_array_equal(x, before)  # the in-place floors work on their own copy


def test_the_chain_floors_are_timed_side_by_side_and_only_on_the_chain():
    names = [s.name for s in systems.SYSTEMS]
    assert {"numpy-floor", "numpy-recompute", "numpy-forward-acc"} <= set(names)
    with pytest.raises(Unsupported):
        systems.by_name("numpy-recompute").prepare("mlp", {})
