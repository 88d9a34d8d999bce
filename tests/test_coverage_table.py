"""docs/coverage.md is exactly what `python -m pullback.rules.table` generates from the registry,
every function the coverage issue lists has a row, and no function is registered twice."""

import subprocess
import sys
from pathlib import Path

import numpy as np

from pullback.rules import _catalog, table

ROOT = Path(__file__).resolve().parent.parent


def generated():
    # A fresh interpreter: other tests (and docstring examples) register rules of their own.
    result = subprocess.run([sys.executable, "-m", "pullback.rules.table"], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_docs_match_the_registry():
    expected = generated()
    actual = (ROOT / "docs" / "coverage.md").read_text(encoding="utf-8")
    assert actual == expected, "docs/coverage.md is stale: run `python -m pullback.rules.table docs/coverage.md`"


LISTED = """
cumsum cumprod diff nansum nanmean average var std ptp trace linalg.norm argmax argmin argsort nonzero
flip roll tile repeat pad split array_split take take_along_axis diagonal diag triu tril sort partition
meshgrid interp kron inner vdot convolve correlate
linalg.inv linalg.solve linalg.det linalg.slogdet linalg.cholesky linalg.eigh linalg.eigvalsh linalg.svd
linalg.qr linalg.pinv linalg.lstsq linalg.matrix_power
fft.fft fft.ifft fft.rfft fft.irfft fft.fft2 fft.ifft2 fft.fftn fft.ifftn fft.rfft2 fft.irfft2 fft.rfftn fft.irfftn
""".split()

SCIPY = """
special.logsumexp special.expit special.logit special.erf special.erfc special.erfinv special.gammaln
special.digamma special.polygamma special.xlogy special.xlog1py special.softmax special.log_softmax
special.betaln special.i0 special.i1
linalg.solve_triangular linalg.cho_factor linalg.cho_solve linalg.expm linalg.lu_factor linalg.lu_solve
""".split()


def test_every_listed_function_has_a_row():
    text = table.coverage_markdown()
    missing = [name for name in LISTED if f"| `numpy.{name}` |" not in text]
    missing += [name for name in SCIPY if f"| `scipy.{name}` |" not in text]
    assert not missing, missing


def test_rows_carry_arguments_and_notes_from_the_registration():
    text = table.coverage_markdown()
    assert "| `numpy.linalg.eig` | refused | its eigenvalues and eigenvectors are complex" in text
    assert "| `numpy.average` | a, weights | Weights may be differentiated too" in text
    assert "| `numpy.copysign` | x1 |" in text  # found by running the rule: the sign carries no gradient


def test_no_function_is_registered_twice():
    assert _catalog.OVERRIDDEN == []
    assert np.fft.fft in _catalog.ENTRIES
