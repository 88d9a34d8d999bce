"""pullback.scipy: the public home of the differentiable SciPy stand-ins. It imports SciPy only
when used, exposes the stand-ins and the differentiable scipy.special ufuncs under SciPy's
names, agrees with SciPy on plain inputs, differentiates in both modes, and refuses unknown
names clearly."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pullback as pb
from pullback.testing import assert_gradient

sps = pytest.importorskip("scipy.special")
spl = pytest.importorskip("scipy.linalg")

from pullback.rules import linalg as rules_linalg  # noqa: E402
from pullback.rules import special as rules_special  # noqa: E402
from pullback.scipy import linalg, special  # noqa: E402


def test_importing_pullback_scipy_does_not_import_scipy():
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import pullback as pb
        from pullback.scipy import linalg, special
        print("scipy" in sys.modules)
        g = pb.gradient(lambda x: np.sum(special.erf(x)), np.array([0.0]))[0]  # first use imports SciPy
        print("scipy.special" in sys.modules, round(float(g[0]), 10))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["False", f"True {round(2 / np.sqrt(np.pi), 10)}"]


def test_names_are_the_stand_ins_and_scipys_ufuncs():
    assert set(linalg.__all__) == {"solve_triangular", "cho_factor", "cho_solve", "expm", "lu_factor", "lu_solve"}
    for name in linalg.__all__:
        assert getattr(linalg, name) is getattr(rules_linalg, name)
    for name in ("logsumexp", "softmax", "log_softmax", "polygamma"):
        assert getattr(special, name) is getattr(rules_special, name)
    for name in ("erf", "gammaln", "xlogy", "expit", "i0"):
        assert name in special.__all__ and getattr(special, name) is getattr(sps, name)
    assert set(special.__all__) <= set(dir(special))


def test_unknown_names_are_refused_clearly():
    with pytest.raises(AttributeError, match="no 'hyp2f1'.*logsumexp"):
        special.hyp2f1
    with pytest.raises(AttributeError):
        linalg.eig


def test_plain_inputs_give_scipys_values():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4))
    m = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    s = m @ m.T
    np.testing.assert_allclose(special.logsumexp(x, axis=1), sps.logsumexp(x, axis=1))
    np.testing.assert_allclose(special.softmax(x, axis=0), sps.softmax(x, axis=0))
    np.testing.assert_allclose(linalg.expm(m / 3), spl.expm(m / 3))
    np.testing.assert_allclose(linalg.cho_solve(linalg.cho_factor(s), x), spl.cho_solve(spl.cho_factor(s), x))
    np.testing.assert_allclose(linalg.lu_solve(linalg.lu_factor(m), x), spl.lu_solve(spl.lu_factor(m), x))


def test_differentiable_in_both_modes():
    rng = np.random.default_rng(1)
    x, m, v = rng.normal(size=4), rng.normal(size=(3, 3)) / 2, rng.normal(size=(3, 3))
    assert_gradient(lambda x: np.sum(special.log_softmax(x) * np.arange(4.0)) + special.logsumexp(x), x,
                    dense_up_to=None, rtol=1e-5, atol=1e-7)
    assert_gradient(lambda m: np.sum(linalg.expm(m) * v), m, dense_up_to=None, rtol=1e-5, atol=1e-7)
    _, t = pb.jvp(linalg.expm, (m,), (v,))
    eps = 1e-6
    np.testing.assert_allclose(t, (spl.expm(m + eps * v) - spl.expm(m - eps * v)) / (2 * eps), rtol=1e-6, atol=1e-8)
    _, t = pb.jvp(special.gammaln, (np.array([1.5, 3.0]),), (np.array([1.0, 2.0]),))
    np.testing.assert_allclose(t, sps.digamma([1.5, 3.0]) * [1.0, 2.0])
