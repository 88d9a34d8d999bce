"""docs/coverage.md is exactly what `python -m pullback.rules.table` generates from the registry,
every function the coverage issue lists has a row, every registered function has a row stated at
its registration (none inferred), the forward-rule column follows the registry, and no function
is registered twice."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pullback.rules import _register, inventory, table

ROOT = Path(__file__).resolve().parent.parent


def generated():
    # A fresh interpreter: other tests (and docstring examples) register rules of their own.
    result = subprocess.run([sys.executable, "-m", "pullback.rules.table"], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_docs_match_the_registry():
    pytest.importorskip("scipy")  # the inventory renders SciPy's namespaces too
    expected = generated()
    actual = (ROOT / "docs" / "coverage.md").read_text(encoding="utf-8")
    assert actual == expected, "docs/coverage.md is stale: run `python -m pullback.rules.table docs/coverage.md`"


LISTED = """
cumsum cumprod diff nansum nanmean average var std ptp trace linalg.norm argmax argmin argsort nonzero
flip roll tile repeat pad split array_split take take_along_axis diagonal diag triu tril sort partition
meshgrid interp kron inner vdot convolve correlate
linalg.inv linalg.solve linalg.det linalg.slogdet linalg.cholesky linalg.eigh linalg.eigvalsh linalg.svd
linalg.qr linalg.pinv linalg.lstsq linalg.matrix_power
append gradient column_stack dstack block flipud fliplr rot90 rollaxis nan_to_num linspace logspace geomspace sinc
real_if_close cross select polyval polyadd polysub polymul polyder polyint polyfit roots cov corrcoef iscomplex
trapezoid ediff1d median nanmedian percentile quantile nanpercentile nanquantile nanmax nanmin nanprod nanstd nanvar
nancumsum nancumprod cumulative_sum cumulative_prod matrix_transpose unstack vecdot matvec vecmat divmod modf frexp fix
i0 delete insert resize trim_zeros compress extract choose piecewise apply_along_axis apply_over_axes unwrap vander
put_along_axis broadcast_arrays linalg.matrix_transpose linalg.tensorsolve linalg.tensorinv linalg.cond
linalg.cross linalg.vecdot linalg.outer linalg.tensordot linalg.svdvals
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
    assert "| `numpy.linalg.eig` | a | composed | Real or complex input." in text
    assert "| `numpy.average` | a, weights | composed | Weights may be differentiated too" in text
    assert "| `numpy.copysign` | x1 | yes | The sign x2 carries no gradient. |" in text
    assert "| `numpy.where` | x, y | composed |" in text
    assert "| `x[index]` | x | composed |" in text
    assert "| `numpy.zeros_like` | none | — | A constant" in text
    assert "| `numpy.linalg.inv` | a | yes |" in text
    assert "| `scipy.special.erf` | x | yes |" in text
    assert "†" not in text


def test_every_registered_function_has_a_row():
    # In a fresh interpreter with SciPy imported, so that every built-in rule is registered and no
    # test has added rules of its own.
    code = ("import importlib.util, pullback; from pullback.rules import table, special\n"
            "if importlib.util.find_spec('scipy'): special.register()\n"
            "print(table.unlisted())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_forward_column_follows_the_registry(monkeypatch):
    from pullback._registry import FORWARD_RULES
    from pullback.rules import linalg

    entry = _register.ENTRIES[np.linalg.inv]
    assert entry.rule is linalg.inv_rule and table.forward_mode(entry) == "yes"
    monkeypatch.delitem(FORWARD_RULES, np.linalg.inv)
    assert table.forward_mode(entry) == "transposed"
    assert "| `numpy.linalg.inv` | a | transposed |" in table.coverage_markdown()


def test_no_function_is_registered_twice():
    assert _register.OVERRIDDEN == []
    assert np.fft.fft in _register.ENTRIES


def test_inventory_sections_give_the_counts_and_reasons_of_each_namespace():
    pytest.importorskip("scipy")
    text = table.inventory_markdown()
    for namespace in inventory.NAMESPACES:
        report = inventory.report(namespace)
        counts = [len(report.get(k, [])) for k in ("covered", "non-differentiable", "not yet covered")]
        assert (f"## `{namespace}`\n\n{counts[0]} covered, {counts[1]} non-differentiable, "
                f"{counts[2]} not yet covered") in text
    assert "| `numpy.histogram` | Counts per bin: piecewise constant in the data" in text
    assert "| `numpy.sin` |" not in text.partition("# Inventory")[2]  # covered callables are counted, not listed
