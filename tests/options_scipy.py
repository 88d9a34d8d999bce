"""The positional/keyword samples of pullback's SciPy stand-ins (pullback.scipy.linalg, .signal, .spatial and
.special), for tests/test_rules_options.py: each `same(...)` records calls that SciPy treats as the same (options
by position, by keyword, and the arrays by name, as SciPy's signatures name them); `add_samples` returns the
callables none of whose arguments can be given both ways, with the reason. The stand-ins call SciPy only when
called, so this module imports without SciPy (the samples then skip)."""

import inspect
import warnings

import numpy as np

from matrices import spd, well_conditioned
from pullback.rules import scipy_linalg as sl
from pullback.rules import scipy_signal as ss
from pullback.rules import scipy_spatial as sd
from pullback.rules import special

JUNK = 9.0  # in the corners of a band that SciPy never reads: a rule that reads them gives another value


def _band(a, lower_count, upper_count):
    """SciPy's (l, u) band storage of `a`: ab[u + i - j, j] = a[i, j]; JUNK where no entry of `a` lands."""
    n = a.shape[0]
    ab = np.full((lower_count + upper_count + 1, n), JUNK)
    for i in range(n):
        for j in range(max(0, i - lower_count), min(n, i + upper_count + 1)):
            ab[upper_count + i - j, j] = a[i, j]
    return ab


def _scipy_parameters(name):
    """The parameter names of `scipy.linalg.<name>` (none without SciPy)."""
    try:
        import scipy.linalg
    except ImportError:
        return ()
    return inspect.signature(getattr(scipy.linalg, name)).parameters


def _quiet(fn):
    """`fn` without the DeprecationWarning of SciPy's deprecated options."""
    def run(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return fn(*args, **kwargs)

    run.__name__ = fn.__name__
    return run


def _linalg_samples(same, C, X, Y, Z, U, rng):
    S = well_conditioned(rng, (3, 3))
    P = spd(rng, (3, 3))
    TALL = rng.normal(size=(4, 3)) + np.eye(4, 3) * 2.0
    TALL2 = rng.normal(size=(4, 2)) + np.eye(4, 2) * 1.5
    B3 = rng.normal(size=(3, 2))
    V3 = np.array([0.7, -1.1, 0.4])
    V4 = np.array([1.5, -0.3, 0.8, 2.0])
    W4 = np.array([0.6, 1.3, -0.9, 0.25])
    # a tridiagonal symmetric positive definite matrix, in SciPy's band forms
    D, E = np.array([4.0, 5.0, 3.5, 4.5]), np.array([1.0, -0.7, 0.5])
    TRI = np.diag(D) + np.diag(E, 1) + np.diag(E, -1)
    UPPER_BAND, LOWER_BAND = _band(TRI, 0, 1), _band(TRI, 1, 0)
    CHOLESKY_BAND = _band(np.linalg.cholesky(TRI), 1, 0)
    GENERAL = TRI + np.diag([0.3, -0.4, 0.2], 1)
    GENERAL_BAND = _band(GENERAL, 1, 1)
    RHS4 = rng.normal(size=(4, 2))
    # eigenvalues 2, -1.5 and 1 (for signm)
    Q = well_conditioned(rng, (3, 3))
    MIXED = Q @ np.diag([2.0, -1.5, 1.0]) @ np.linalg.inv(Q)

    # SciPy's versions of NumPy's decompositions and solves
    if "assume_a" in _scipy_parameters("inv") or not _scipy_parameters("inv"):
        same(sl.inv, [P], C(X, False, True, assume_a="pos", lower=True),
             C(X, overwrite_a=False, check_finite=True, assume_a="pos", lower=True), C(a=X, assume_a="pos", lower=True),
             needs_scipy=True)
    else:  # SciPy 1.15 (the newest for Python 3.10): inv takes no assume_a or lower
        same(sl.inv, [P], C(X, False, True), C(X, overwrite_a=False, check_finite=True), C(a=X), needs_scipy=True)
    same(sl.solve, [P, B3], C(X, Y, True, False, False, True, "pos", False), C(X, Y, lower=True, assume_a="pos"),
         C(a=X, b=Y, lower=True, assume_a="pos"), needs_scipy=True)
    same(sl.solve, [S, B3], C(X, Y, False, False, False, True, None, True), C(X, Y, transposed=True),
         C(a=X, b=Y, transposed=True), needs_scipy=True)
    same(sl.det, [S], C(X, False, True), C(X, overwrite_a=False, check_finite=True), C(a=X), needs_scipy=True)
    same(sl.cholesky, [P], C(X, True, False, True), C(X, lower=True, overwrite_a=False, check_finite=True),
         C(a=X, lower=True), needs_scipy=True)
    same(sl.cholesky, [P], C(X, False), C(X, lower=False), C(a=X), needs_scipy=True)
    same(sl.eigh, [P], C(X, None, lower=False), C(X, b=None, lower=False), C(a=X, lower=False), needs_scipy=True)
    same(sl.eigh, [P], C(X, None, eigvals_only=True, subset_by_index=[1, 2]),
         C(a=X, eigvals_only=True, subset_by_index=[1, 2]), needs_scipy=True)
    same(sl.eigvalsh, [P], C(X, None, lower=False), C(X, b=None, lower=False), C(a=X, lower=False), needs_scipy=True)
    same(sl.svd, [TALL], C(X, False, True, False, True, "gesvd"), C(X, full_matrices=False, lapack_driver="gesvd"),
         C(a=X, full_matrices=False, lapack_driver="gesvd"), needs_scipy=True)
    same(sl.svd, [TALL], C(X, True, False), C(X, compute_uv=False), C(a=X, full_matrices=True, compute_uv=False),
         needs_scipy=True)
    same(sl.svdvals, [TALL], C(X, False, True), C(X, overwrite_a=False, check_finite=True), C(a=X), needs_scipy=True)
    same(sl.qr, [TALL], C(X, False, None, "economic"), C(X, mode="economic"), C(a=X, mode="economic"),
         needs_scipy=True)
    same(sl.qr, [TALL], C(X, False, None, "r", False, True), C(X, mode="r", pivoting=False), C(a=X, mode="r"),
         needs_scipy=True)
    same(sl.lu, [S], C(X, False, False, True, True), C(X, permute_l=False, p_indices=True), C(a=X, p_indices=True),
         needs_scipy=True)
    same(sl.lu, [S], C(X, True), C(X, permute_l=True), C(a=X, permute_l=True), needs_scipy=True)
    same(sl.pinv, [TALL], C(X, atol=1e-8, return_rank=True), C(a=X, atol=1e-8, return_rank=True), needs_scipy=True)
    same(sl.pinvh, [P], C(X, None, None, False, True), C(X, lower=False, return_rank=True),
         C(a=X, atol=None, rtol=None, lower=False, return_rank=True), needs_scipy=True)
    same(sl.lstsq, [TALL, RHS4], C(X, Y, None, False, False, True, "gelsd"), C(X, Y, cond=None, lapack_driver="gelsd"),
         C(a=X, b=Y, lapack_driver="gelsd"), needs_scipy=True)
    same(sl.norm, [TALL], C(X, 1, 0, True), C(X, ord=1, axis=0, keepdims=True), C(a=X, ord=1, axis=0, keepdims=True),
         needs_scipy=True)
    same(sl.norm, [TALL], C(X, "fro", None, False, True), C(X, ord="fro", check_finite=True), C(a=X, ord="fro"),
         needs_scipy=True)
    same(sl.orthogonal_procrustes, [TALL, TALL[::-1] + 0.5], C(X, Y, True), C(X, Y, check_finite=True), C(A=X, B=Y),
         needs_scipy=True)
    same(sl.polar, [S], C(X, "left"), C(X, side="left"), C(a=X, side="left"), needs_scipy=True)
    BADLY_SCALED = S * np.array([[1.0, 64.0, 512.0], [1.0 / 64.0, 1.0, 8.0], [1.0 / 512.0, 1.0 / 8.0, 1.0]])
    same(sl.matrix_balance, [BADLY_SCALED], C(X, True, True, True, False), C(X, permute=True, scale=True, separate=True),
         C(A=X, separate=True), needs_scipy=True)
    same(sl.matrix_balance, [BADLY_SCALED], C(X, False), C(X, permute=False), C(A=X, permute=False), needs_scipy=True)
    same(sl.orth, [TALL], C(X, 1e-10), C(X, rcond=1e-10), C(A=X, rcond=1e-10), needs_scipy=True)
    same(sl.subspace_angles, [TALL2, TALL2[::-1] + np.array([0.3, -0.2])], C(X, Y), C(A=X, B=Y), needs_scipy=True)
    same(sl.qr_multiply, [TALL, rng.normal(size=(3, 2))], C(X, Y, "left", False, False), C(X, Y, mode="left"),
         C(a=X, c=Y, mode="left", pivoting=False), needs_scipy=True)
    same(sl.qr_multiply, [TALL, rng.normal(size=(2, 4))], C(X, Y, "right"), C(X, Y, mode="right"), C(a=X, c=Y),
         needs_scipy=True)

    # matrix functions
    for fn in (sl.cosm, sl.sinm, sl.tanm, sl.coshm, sl.sinhm, sl.tanhm):
        same(fn, [S / 3.0], C(X), C(A=X), needs_scipy=True)
    same(sl.sqrtm, [P], C(X), C(A=X), needs_scipy=True)
    same(sl.logm, [S], C(X), C(A=X), needs_scipy=True)
    same(sl.signm, [MIXED], C(X), C(A=X), needs_scipy=True)
    # disp= (deprecated in SciPy 1.17): disp=False gives (value, error estimate)
    for fn, matrix in ((sl.sqrtm, P), (sl.logm, S), (sl.signm, MIXED)):
        if "disp" in _scipy_parameters(fn.__name__):
            same(fn, [matrix], C(X, False), C(X, disp=False), C(A=X, disp=False), run=_quiet(fn), needs_scipy=True)
            same(fn, [matrix], C(X, True), C(X, disp=True), C(A=X, disp=True), run=_quiet(fn), needs_scipy=True)
    if "blocksize" in _scipy_parameters("sqrtm"):
        same(sl.sqrtm, [P], C(X, False, 2), C(X, disp=False, blocksize=2), C(A=X, disp=False, blocksize=2),
             run=_quiet(sl.sqrtm), needs_scipy=True)
    same(sl.fractional_matrix_power, [P], C(X, 0.3), C(X, t=0.3), C(A=X, t=0.3), needs_scipy=True)
    same(sl.expm_frechet, [S / 3.0, B3 @ B3.T], C(X, Y, "SPS", False, True), C(X, Y, method="SPS", compute_expm=False),
         C(A=X, E=Y, method="SPS", compute_expm=False), needs_scipy=True)
    same(sl.expm_frechet, [S / 3.0, B3 @ B3.T], C(X, Y, None, True), C(X, Y, compute_expm=True), C(A=X, E=Y),
         needs_scipy=True)

    # Sylvester, Lyapunov and Riccati equations
    same(sl.solve_sylvester, [S, P, B3 @ B3.T], C(X, Y, Z), C(X, Y, q=Z), C(a=X, b=Y, q=Z), needs_scipy=True)
    same(sl.solve_continuous_lyapunov, [-S, P], C(X, Y), C(X, q=Y), C(a=X, q=Y), needs_scipy=True)
    for method in ("direct", "bilinear"):
        same(sl.solve_discrete_lyapunov, [S / 4.0, P], C(X, Y, method), C(X, Y, method=method),
             C(a=X, q=Y, method=method), needs_scipy=True)
    R = np.array([[1.5, 0.2], [0.2, 0.8]])
    for fn in (sl.solve_continuous_are, sl.solve_discrete_are):
        same(fn, [S - np.eye(3), B3, P, R], C(X, Y, Z, U, None, None, True), C(X, Y, Z, U, e=None, s=None, balanced=True),
             C(a=X, b=Y, q=Z, r=U), needs_scipy=True)
        same(fn, [S - np.eye(3), B3, P, R], C(X, Y, Z, U, None, None, False), C(X, Y, Z, U, balanced=False),
             C(a=X, b=Y, q=Z, r=U, e=None, s=None, balanced=False), needs_scipy=True)

    # structured matrices
    same(sl.toeplitz, [V4, W4], C(X, Y), C(X, r=Y), C(c=X, r=Y), needs_scipy=True)
    same(sl.circulant, [V4], C(X), C(c=X), needs_scipy=True)
    same(sl.hankel, [V4, W4[::-1]], C(X, Y), C(X, r=Y), C(c=X, r=Y), needs_scipy=True)
    same(sl.block_diag, [S, TALL2], C(X, Y), needs_scipy=True)
    same(sl.companion, [V4], C(X), C(a=X), needs_scipy=True)
    same(sl.leslie, [V4, np.abs(V3)], C(X, Y), C(X, s=Y), C(f=X, s=Y), needs_scipy=True)
    same(sl.fiedler, [V4], C(X), C(a=X), needs_scipy=True)
    same(sl.fiedler_companion, [V4], C(X), C(a=X), needs_scipy=True)
    for mode in ("full", "same", "valid"):
        same(sl.convolution_matrix, [V3], C(X, 5, mode), C(X, n=5, mode=mode), C(a=X, n=5, mode=mode), needs_scipy=True)
    same(sl.khatri_rao, [TALL2, B3[:, :2]], C(X, Y), C(X, b=Y), C(a=X, b=Y), needs_scipy=True)
    same(sl.diagsvd, [V3], C(X, 5, 3), C(X, M=5, N=3), C(s=X, M=5, N=3), needs_scipy=True)

    # banded, tridiagonal, Toeplitz and circulant problems
    same(sl.solve_banded, [GENERAL_BAND, RHS4], C((1, 1), X, Y, False, False, True), C((1, 1), X, Y, overwrite_ab=False),
         C(l_and_u=(1, 1), ab=X, b=Y), needs_scipy=True)
    same(sl.solveh_banded, [LOWER_BAND, RHS4], C(X, Y, False, False, True, True), C(X, Y, lower=True),
         C(ab=X, b=Y, lower=True, check_finite=True), needs_scipy=True)
    same(sl.solveh_banded, [UPPER_BAND, RHS4], C(X, Y, False, False, False), C(X, Y, lower=False), C(ab=X, b=Y),
         needs_scipy=True)
    same(sl.cholesky_banded, [LOWER_BAND], C(X, False, True, True), C(X, overwrite_ab=False, lower=True),
         C(ab=X, lower=True), needs_scipy=True)
    same(sl.cholesky_banded, [UPPER_BAND], C(X, False, False), C(X, lower=False), C(ab=X), needs_scipy=True)
    same(sl.cho_solve_banded, [CHOLESKY_BAND, RHS4], C((X, True), Y, False, True),
         C((X, True), Y, overwrite_b=False, check_finite=True), C(cb_and_lower=(X, True), b=Y), needs_scipy=True)
    same(sl.eig_banded, [LOWER_BAND], C(X, True, False, False, "a", None, 0, True),
         C(X, lower=True, eigvals_only=False, select="a"), C(a_band=X, lower=True), needs_scipy=True)
    same(sl.eig_banded, [UPPER_BAND], C(X, False, True), C(X, eigvals_only=True), C(a_band=X, lower=False,
                                                                                   eigvals_only=True), needs_scipy=True)
    same(sl.eigvals_banded, [LOWER_BAND], C(X, True, False, "a", None, True), C(X, lower=True, select="a"),
         C(a_band=X, lower=True), needs_scipy=True)
    same(sl.eigh_tridiagonal, [D, E], C(X, Y, False, "a", None, True, 0.0, "auto"), C(X, Y, eigvals_only=False, select="a"),
         C(d=X, e=Y), needs_scipy=True)
    same(sl.eigh_tridiagonal, [D, E], C(X, Y, True), C(X, Y, eigvals_only=True), C(d=X, e=Y, eigvals_only=True),
         needs_scipy=True)
    same(sl.eigvalsh_tridiagonal, [D, E], C(X, Y, "a", None, True, 0.0, "auto"), C(X, Y, select="a", tol=0.0),
         C(d=X, e=Y), needs_scipy=True)
    same(sl.solve_toeplitz, [D, np.array([4.0, 0.6, -0.2, 0.9]), RHS4], C((X, Y), Z, True),
         C((X, Y), Z, check_finite=True), C(c_or_cr=(X, Y), b=Z), needs_scipy=True)
    same(sl.solve_toeplitz, [D, RHS4[:, 0]], C(X, Y), C(c_or_cr=X, b=Y), needs_scipy=True)
    same(sl.matmul_toeplitz, [V4, W4, RHS4], C((X, Y), Z, False, None), C((X, Y), Z, check_finite=False, workers=None),
         C(c_or_cr=(X, Y), x=Z), needs_scipy=True)
    same(sl.solve_circulant, [np.array([4.0, 1.0, 0.5, -0.3]), RHS4], C(X, Y, "raise", None, -1, 0, 0),
         C(X, Y, singular="raise", caxis=-1, baxis=0, outaxis=0), C(c=X, b=Y), needs_scipy=True)
    return {sl.block_diag: "the arrays are variadic"}


def _signal_spatial_samples(same, C, X, Y, Z, U, rng):
    A = np.array([0.3, -1.2, 2.1, 0.8, 1.7, -0.4])
    K = np.array([0.5, -0.9, 1.3])
    IMAGE, KERNEL = rng.normal(size=(4, 5)), rng.normal(size=(2, 3))
    for fn in (ss.convolve, ss.correlate):
        same(fn, [A, K], C(X, Y, "same", "direct"), C(X, Y, mode="same", method="direct"),
             C(in1=X, in2=Y, mode="same", method="direct"), needs_scipy=True)
        same(fn, [IMAGE, KERNEL], C(X, Y, "valid", "fft"), C(X, Y, mode="valid", method="fft"),
             C(in1=X, in2=Y, mode="valid", method="fft"), needs_scipy=True)
    same(ss.fftconvolve, [IMAGE, KERNEL[:1]], C(X, Y, "same", 1), C(X, Y, mode="same", axes=1),
         C(in1=X, in2=Y, mode="same", axes=1), needs_scipy=True)
    same(ss.fftconvolve, [IMAGE, KERNEL], C(X, Y, "full", None), C(X, Y, mode="full", axes=None), C(in1=X, in2=Y),
         needs_scipy=True)
    SIGNAL = rng.normal(size=(6, 2))
    same(ss.lfilter, [K, np.array([1.0, -0.4]), SIGNAL, np.array([[0.2, -0.3], [0.1, 0.5]])], C(X, Y, Z, 0, U),
         C(X, Y, Z, axis=0, zi=U), C(b=X, a=Y, x=Z, axis=0, zi=U), needs_scipy=True)
    same(ss.lfilter, [K, np.array([1.0, -0.4]), SIGNAL.T], C(X, Y, Z, -1), C(X, Y, Z, axis=-1), C(b=X, a=Y, x=Z),
         needs_scipy=True)

    POINTS_A, POINTS_B = rng.normal(size=(4, 3)), rng.normal(size=(5, 3))
    WEIGHTS = np.array([0.5, 1.5, 1.0])
    same(sd.cdist, [POINTS_A, POINTS_B, WEIGHTS], C(X, Y, "minkowski", p=3.0, w=Z), C(X, Y, metric="minkowski", p=3.0, w=Z),
         C(XA=X, XB=Y, metric="minkowski", p=3.0, w=Z), needs_scipy=True)
    same(sd.cdist, [POINTS_A, POINTS_B], C(X, Y, "cosine"), C(X, Y, metric="cosine"), C(XA=X, XB=Y, metric="cosine"),
         needs_scipy=True)
    same(sd.pdist, [POINTS_B], C(X, "sqeuclidean"), C(X, metric="sqeuclidean"), C(X=X, metric="sqeuclidean"),
         needs_scipy=True)
    same(sd.pdist, [POINTS_B, WEIGHTS], C(X, "seuclidean", V=Y), C(X, metric="seuclidean", V=Y),
         C(X=X, metric="seuclidean", V=Y), needs_scipy=True)
    DISTANCES = np.array([1.2, 0.7, 2.3, 0.4, 1.9, 1.1])
    same(sd.squareform, [DISTANCES], C(X, "tomatrix", True), C(X, force="tomatrix", checks=True),
         C(X=X, force="tomatrix"), needs_scipy=True)
    SYMMETRIC = np.array([[0.0, 1.2, 0.7], [1.2, 0.0, 2.3], [0.7, 2.3, 0.0]])
    same(sd.squareform, [SYMMETRIC], C(X, "tovector", False), C(X, force="tovector", checks=False),
         C(X=X, checks=False), needs_scipy=True)


_MULTIPLE_OUTPUTS = "SciPy's is a ufunc with several outputs: its inputs are positional-only"


def _special_samples(same, C, X, Y, Z, U, rng):
    POSITIVE = np.array([0.6, 1.3, 2.7])
    MIXED = np.array([-1.1, 0.4, 1.8])
    same(special.diric, [MIXED], C(X, 3), C(X, n=3), C(x=X, n=3), needs_scipy=True)
    for fn in (special.spherical_jn, special.spherical_yn, special.spherical_in, special.spherical_kn):
        same(fn, [POSITIVE], C(2, X, True), C(2, X, derivative=True), C(n=2, z=X, derivative=True), needs_scipy=True)
        same(fn, [POSITIVE], C(1, X, False), C(1, z=X), C(n=1, z=X, derivative=False), needs_scipy=True)
    no_options = {}
    # one call each: the value, the reverse and forward modes and their agreement are still checked
    for fn, arguments in ((special.sici, C(X)), (special.shichi, C(X)), (special.fresnel, C(X)), (special.airy, C(X)),
                          (special.airye, C(X)), (special.itairy, C(X)), (special.itj0y0, C(X)),
                          (special.iti0k0, C(X)), (special.it2j0y0, C(X)), (special.it2i0k0, C(X)),
                          (special.ellipj, C(X, 0.4)), (special.pbdv, C(1.5, X)), (special.pbvv, C(1.5, X)),
                          (special.pbwa, C(0.5, X))):
        same(fn, [MIXED if fn in (special.airy, special.fresnel, special.sici, special.pbdv,
                                  special.pbvv, special.pbwa, special.ellipj) else POSITIVE], arguments, needs_scipy=True)
        no_options[fn] = _MULTIPLE_OUTPUTS
    return no_options


def add_samples(same, C, X, Y, Z):
    rng = np.random.default_rng(11)
    U = type(X)(3)  # the fourth differentiated input
    no_options = _linalg_samples(same, C, X, Y, Z, U, rng)
    _signal_spatial_samples(same, C, X, Y, Z, U, rng)
    no_options.update(_special_samples(same, C, X, Y, Z, U, rng))
    return no_options
