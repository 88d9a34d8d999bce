"""`python -m pullback demo --quick`: trains, reaches its accuracy target, writes a valid PNG and a checkpoint."""

import re
import struct
import subprocess
import sys
import zlib

import numpy as np

import pullback as pb
from pullback import demo
from pullback.__main__ import main
from pullback.data import load_digits


def read_png(path):
    """Parse an 8-bit RGB PNG (checking every chunk's CRC) into an (h, w, 3) array."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, f"bad CRC in {kind}"
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert (depth, colour, interlace) == (8, 2, 0) and b"IEND" in chunks
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(height, 1 + 3 * width)
    assert np.all(rows[:, 0] == 0)  # filter type "none" on every row
    return rows[:, 1:].reshape(height, width, 3)


def test_quick_demo_reaches_its_target(tmp_path, capsys):
    status = main(["demo", "--quick", "--out", str(tmp_path), "--seed", "1"])
    out = capsys.readouterr()
    assert status == 0, out.out + out.err
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", out.out).group(1))
    assert accuracy >= 100 * demo.QUICK_TARGET
    assert "epoch  3/3" in out.err and "samples/s" in out.err  # the progress report goes to stderr
    assert "gradient check (check_gradient): OK" in out.out
    image = read_png(tmp_path / "learning-curves.png")
    assert image.shape == (300, 840, 3)
    colours = {tuple(c) for c in image.reshape(-1, 3)[:: 7]}
    assert (31, 119, 180) in colours and (255, 127, 14) in colours  # both curves were drawn
    model, state = pb.load(str(tmp_path / "digits-cnn.ckpt"), like=demo.build_model(np.random.default_rng(5)))
    images, labels = load_digits()
    x = (images[:200].astype(np.float32) / 16)[..., None]
    assert np.mean(np.argmax(pb.nn.testmode(model)(x), axis=1) == labels[:200]) > 0.9


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
