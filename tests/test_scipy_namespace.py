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
from pullback.rules import scipy_linalg as rules_scipy_linalg  # noqa: E402
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
    assert {"solve_triangular", "cho_factor", "cho_solve", "expm", "lu_factor", "lu_solve", "solve", "eigh", "svd",
            "sqrtm", "solve_sylvester", "toeplitz", "solve_banded"} <= set(linalg.__all__)
    for name in linalg.__all__:
        ours = getattr(linalg, name)
        assert ours is getattr(rules_linalg, name, None) or ours is getattr(rules_scipy_linalg, name, None) or (
            name == "solve_lyapunov")
        assert hasattr(spl, name)  # the same name as SciPy's
    assert linalg.solve_lyapunov is linalg.solve_continuous_lyapunov
    for name in ("logsumexp", "softmax", "log_softmax", "polygamma"):
        assert getattr(special, name) is getattr(rules_special, name)
    for name in ("erf", "gammaln", "xlogy", "expit", "i0"):
        assert name in special.__all__ and getattr(special, name) is getattr(sps, name)
    assert set(special.__all__) <= set(dir(special))


def test_unknown_names_are_refused_clearly():
    with pytest.raises(AttributeError, match="no 'wofz'.*logsumexp"):
        special.wofz
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


def test_signal_and_spatial_are_imported_on_first_use():
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import pullback as pb
        import pullback.scipy
        print("scipy" in sys.modules, "pullback.scipy.signal" in sys.modules)
        from pullback.scipy import signal
        from pullback.scipy.spatial import distance
        print("scipy" in sys.modules)
        g = pb.gradient(lambda x: np.sum(distance.pdist(x)) + np.sum(signal.convolve(x[0], x[1])), np.eye(2))[0]
        print("scipy.signal" in sys.modules, np.round(g, 6).tolist())
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[:2] == ["False False", "False"]
    s = 1 / np.sqrt(2)
    assert lines[2] == f"True {np.round([[s + 1.0, 1.0 - s], [1.0 - s, s + 1.0]], 6).tolist()}"


def test_namespaces_list_what_they_hold():
    import pullback.scipy as ps
    from pullback.rules import scipy_signal, scipy_spatial
    from pullback.scipy import signal
    from pullback.scipy.spatial import distance

    assert {"signal", "spatial", "linalg", "special"} <= set(ps.__all__)
    assert signal.__all__ == ["convolve", "correlate", "fftconvolve", "lfilter"]
    assert all(getattr(signal, n) is getattr(scipy_signal, n) for n in signal.__all__)
    assert distance.__all__ == ["cdist", "pdist", "squareform"]
    assert all(getattr(distance, n) is getattr(scipy_spatial, n) for n in distance.__all__)
    assert ps.spatial.distance is distance
    for name in ("sici", "fresnel", "spherical_jn", "diric"):
        assert getattr(special, name) is getattr(rules_special, name)
    for name in ("kv", "hyp2f1", "zeta", "softplus", "round", "expm1"):
        assert getattr(special, name) is getattr(sps, name)
