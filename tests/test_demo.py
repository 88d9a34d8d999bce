"""`python -m pullback demo --quick`: trains, reaches its accuracy target, writes the learning curves
(CSV always; a PNG chart with matplotlib, a hint without) and a checkpoint."""

import csv
import math
import re
import subprocess
import sys

import numpy as np
import pytest

import pullback as pb
from pullback import _plot, demo
from pullback.__main__ import main
from pullback.data import load_digits

HISTORY = {"loss": [1.5, 0.6, 0.3], "train_accuracy": [0.5, 0.8, 0.9], "test_loss": [1.0, 0.5, 0.35],
           "test_accuracy": [0.6, 0.85, 0.95], "samples_per_second": [1000.0, 1100.0, 1200.0],
           "epoch_seconds": [1.5, 1.3, 1.2]}


def test_quick_demo_reaches_its_target(tmp_path, capsys):
    status = main(["demo", "--quick", "--out", str(tmp_path), "--seed", "1"])
    out = capsys.readouterr()
    assert status == 0, out.out + out.err
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", out.out).group(1))
    assert accuracy >= 100 * demo.QUICK_TARGET
    assert "epoch  3/3" in out.err and "samples/s" in out.err  # the progress report goes to stderr
    assert "gradient check (check_gradient): OK" in out.out
    with open(tmp_path / "learning-curves.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["epoch"] for row in rows] == ["1", "2", "3"]
    assert math.isclose(100 * float(rows[-1]["test_accuracy"]), accuracy, abs_tol=0.006)  # the last epoch's model
    if _plot.available():
        assert f"chart: {tmp_path / 'learning-curves.png'}" in out.out
        assert (tmp_path / "learning-curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert 'pip install "pullback[plot]"' in out.out and not (tmp_path / "learning-curves.png").exists()
    model, state = pb.load(str(tmp_path / "digits-cnn.ckpt"), like=demo.build_model(np.random.default_rng(5)))
    images, labels = load_digits()
    x = (images[:200].astype(np.float32) / 16)[..., None]
    assert np.mean(np.argmax(pb.nn.testmode(model)(x), axis=1) == labels[:200]) > 0.9


def test_quick_demo_under_jit_reaches_its_target_and_reports_its_epoch_time(tmp_path, capsys):
    status = main(["demo", "--quick", "--jit", "--out", str(tmp_path), "--seed", "1"])
    out = capsys.readouterr()
    assert status == 0, out.out + out.err
    assert "pb.jit" in out.out.splitlines()[0]
    assert float(re.search(r"test accuracy ([\d.]+)%", out.out).group(1)) >= 100 * demo.QUICK_TARGET
    seconds = re.search(r"epoch time \(pb.jit\): first epoch ([\d.]+) s, later epochs ([\d.]+) s", out.out)
    assert seconds and float(seconds.group(2)) > 0
    with open(tmp_path / "learning-curves.csv", newline="") as f:
        assert len([float(row["epoch_seconds"]) for row in csv.DictReader(f)]) == 3


def test_jit_and_workers_do_not_combine():
    with pytest.raises(SystemExit, match="--jit and --workers"):
        main(["demo", "--jit", "--workers", "2"])


def test_learning_curves_chart_draws_the_history_and_is_a_png_matplotlib_reads_back(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.image

    fig = demo.curves_figure(HISTORY)
    loss, accuracy = fig.axes
    assert [list(line.get_ydata()) for line in loss.lines] == [HISTORY["loss"], HISTORY["test_loss"]]
    assert [list(line.get_ydata()) for line in accuracy.lines] == [[50.0, 80.0, 90.0], [60.0, 85.0, 95.0]]
    assert list(loss.lines[0].get_xdata()) == [1, 2, 3]
    path = tmp_path / "curves.png"
    assert demo.write_curves(str(path), HISTORY) == str(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(str(path)).shape[:2] == (300, 840)


def test_without_matplotlib_the_curves_are_written_as_numbers_only(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    assert demo.curves_figure(HISTORY) is None
    assert demo.write_curves(str(tmp_path / "curves.png"), HISTORY) is None
    demo.write_history(str(tmp_path / "curves.csv"), HISTORY)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.csv"]
    with open(tmp_path / "curves.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["epoch", *HISTORY]
    assert [[float(v) for v in row] for row in rows[1:]] == [[e + 1, *col] for e, col in enumerate(zip(*HISTORY.values()))]


def test_demo_without_matplotlib_prints_the_hint_and_writes_the_numbers(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(demo, "train", lambda *args: _tiny_run(HISTORY))
    monkeypatch.setattr(demo, "TARGET", 0.0)
    main(["demo", "--epochs", "3", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    hint = [line for line in out.splitlines() if "pullback[plot]" in line]
    assert hint == [_plot.HINT] and 'pip install "pullback[plot]"' in hint[0]
    assert (tmp_path / "learning-curves.csv").exists() and not (tmp_path / "learning-curves.png").exists()


def _tiny_run(history):
    """What `demo.train` returns, without training: an untrained model and a few test images."""
    rng = np.random.default_rng(0)
    model = demo.build_model(rng)
    state = pb.optim.setup(pb.optim.Adam(), model)
    images, labels = load_digits()
    x = (images[:16].astype(np.float32) / 16)[..., None]
    return model, state, history, (x, labels[:16].astype(np.int64))


def test_help_documents_the_options():
    result = subprocess.run([sys.executable, "-m", "pullback", "demo", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for option in ("--epochs", "--batch-size", "--seed", "--out", "--quick", "--lr"):
        assert option in result.stdout


def test_command_dispatch(capsys):
    assert main(["--help"]) == 0 and "demo" in capsys.readouterr().out
    assert main(["nonsense"]) == 2 and "unknown command" in capsys.readouterr().err
    assert main([]) == 2


def test_shipped_digits_are_the_uci_test_set():
    images, labels = load_digits()
    assert images.shape == (1797, 8, 8) and images.dtype == np.uint8 and labels.dtype == np.uint8
    assert images.min() == 0 and images.max() == 16
    # class sizes as published for the UCI "optdigits" test set (optdigits.tes)
    np.testing.assert_array_equal(np.bincount(labels), [178, 182, 177, 183, 181, 182, 181, 179, 174, 180])


def test_stratified_split_and_shifts():
    images, labels = load_digits()
    (xtr, ytr), (xte, yte) = demo.split(images, labels, 0.2, np.random.default_rng(0))
    assert len(ytr) + len(yte) == 1797 and abs(len(yte) - 360) <= 5
    assert np.all(np.abs(np.bincount(yte) - 0.2 * np.bincount(labels)) <= 1)
    assert xtr.dtype == np.float32 and xtr.shape[1:] == (8, 8, 1) and xtr.max() == 1.0
    x = np.arange(2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4, 1) + 1
    moved = demo.shifted(x, np.random.default_rng(0))
    for a, b in zip(x[..., 0], moved[..., 0]):  # each image is its own shift, zeros filling in
        assert any(np.array_equal(np.pad(a, 1)[i:i + 4, j:j + 4], b) for i in range(3) for j in range(3))


def test_quick_demo_on_two_dask_workers_reaches_its_target(tmp_path, capsys):
    pytest.importorskip("distributed")
    status = main(["demo", "--quick", "--workers", "2", "--out", str(tmp_path), "--seed", "1"])
    out = capsys.readouterr()
    assert status == 0, out.out + out.err
    assert "2 Dask workers" in out.out
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", out.out).group(1))
    assert accuracy >= 100 * demo.QUICK_TARGET
    assert "epoch  3/3" in out.err and "samples/s" in out.err
    model, _ = pb.load(str(tmp_path / "digits-cnn.ckpt"), like=demo.build_model(np.random.default_rng(5)))
    images, labels = load_digits()
    x = (images[:200].astype(np.float32) / 16)[..., None]
    assert np.mean(np.argmax(pb.nn.testmode(model)(x), axis=1) == labels[:200]) > 0.9
    result = subprocess.run([sys.executable, "-m", "pullback", "demo", "--help"], capture_output=True, text=True, timeout=60)
    assert "--workers" in result.stdout
