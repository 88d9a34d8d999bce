"""Forward rules for every built-in reverse rule, checked against it and against finite differences.

- The registry: every reverse rule reachable from the rule tables (ufuncs, NumPy functions,
  primitives, and the private rules composites apply) has a forward rule of its own, and a
  dot-product case below; a rule added without either fails here.
- The dot-product test `<J v, u> == <v, Jᵀ u>` for every forward/reverse pair, in float64 with a
  tight tolerance, each case checked to go through the forward rule it is filed under.
- `pb.jvp` against float64 central differences over random shapes (hypothesis) for each family,
  float32 in -> float32 tangent out, and forward rules nesting in both modes.
"""

import importlib.util
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pullback as pb
from forward_cases_numpy import CASES as NUMPY_CASES
from matrices import spd, well_conditioned
from pullback._registry import FORWARD_RULES, REVERSE_RULES, UFUNC_RULES, forward_rule_of
from pullback.rules import _register, indexing, shape, special, ufuncs
from pullback.rules import linalg as sl
from pullback.testing import check_transpose
from rule_checks import seeds

HAVE_SCIPY = importlib.util.find_spec("scipy") is not None
HAVE_DASK = importlib.util.find_spec("dask") is not None
if HAVE_SCIPY:
    import scipy.special as sp  # noqa: F401  (registers the scipy.special ufunc rules)

RULES_DIR = Path(_register.__file__).parent

# Reverse rules for which a forward rule would be meaningless, with the reason. None today:
# every built-in operation with a derivative has both.
ALLOWED_WITHOUT_FORWARD = {
    # -√x's derivatives at x = 0 (elliprf's edge): 0 or infinite, with no finite case to compare; its two
    # rules are checked through elliprf's gradient and Hessian at 0 (test_special_extremes_and_warnings.py)
    "special._root_edge_rule": "derivatives 0 or infinite",
}


# --- the registry ---------------------------------------------------------------------------
def builtin_reverse_rules():
    """{reverse rule: label} for every rule of `pullback.rules` reachable from the tables."""
    served = {}  # a rule made inside a factory (`binary`): named by what it serves, a ufunc or a stand-in
    for ufunc, rule in UFUNC_RULES.items():
        served.setdefault(rule, ufunc.__name__)
    for fn, rule in REVERSE_RULES.items():
        served.setdefault(rule, f"{(getattr(fn, '__module__', None) or '').rpartition('.')[2]}.{fn.__name__}")
    found = {}

    def add(rule):
        module = getattr(rule, "__module__", "") or ""
        if not module.startswith("pullback.rules.") or rule in found:
            return
        family, name = module.rpartition(".")[2], rule.__qualname__
        found[rule] = f"{family}.{served[rule]}" if "<locals>" in name else f"{family}.{name}"

    for rule in REVERSE_RULES.values():
        add(rule)
    for entry in _register.ENTRIES.values():
        if entry.rule is not None:
            add(entry.rule)
    return found


RULES = builtin_reverse_rules()
RULE_BY_LABEL = {label: rule for rule, label in RULES.items()}


def test_the_registry_is_enumerated():
    # A sanity floor, so that a broken enumeration cannot pass the tests below vacuously.
    assert len(RULES) > 120
    assert {"decompositions._eigh_vectors_rule", "fft._dft_rule", "ufuncs.sin", "special.erf_rule",
            "linalg._lu_rule", "indexing.getitem_rule"} <= set(RULE_BY_LABEL)


def test_every_reverse_rule_has_a_forward_rule():
    waiting = set(special.RULES.values()) if not HAVE_SCIPY else set()  # registered once SciPy is imported
    missing = sorted(label for rule, label in RULES.items()
                     if forward_rule_of(rule) is None and rule not in waiting and label not in ALLOWED_WITHOUT_FORWARD)
    assert not missing, f"reverse rules without a forward rule: {missing}"


# --- inputs -----------------------------------------------------------------------------------
def normal(*shapes):
    return lambda rng: tuple(rng.normal(size=s) for s in shapes)


def dask_along_axis(rng):
    """A chunked (4, 3) Dask array, for the primitives that serve Dask arrays only."""
    import dask.array as da

    return (da.from_array(rng.normal(size=(4, 3)), chunks=2),)


_ORDER = np.argsort(np.random.default_rng(7).normal(size=(4, 3)), axis=0)


def _dask_order():
    import dask.array as da

    return da.from_array(_ORDER, chunks=2)


def uniform(low, high, *shapes):
    return lambda rng: tuple(rng.uniform(low, high, s) for s in shapes)


def _phase_free_eigenvectors(re, im):
    """|V|² of the eigenvectors of the Hermitian matrix made of `re` and `im`, through the primitive the
    eigenvalues' higher derivatives use (phase-invariant, as its reverse rule requires)."""
    from pullback.rules.decompositions import _Once, eigh_vectors_any_phase

    h = re + 1j * im
    h = h + np.conj(np.swapaxes(h, -1, -2))
    return np.abs(eigh_vectors_any_phase(h, _Once(lambda m: tuple(np.linalg.eigh(m))), True)) ** 2


def spd_with_noise(shape, upper=False):
    """spd plus noise in the triangle the function does not read (it must get no tangent from there)."""
    def make(rng):
        noise = rng.normal(size=shape)
        return (spd(rng, shape) + (np.tril(noise, -1) if upper else np.triu(noise, 1)),)
    return make


def with_zeros(shape, zeros):
    def make(rng):
        x = rng.normal(size=shape)
        for index in zeros:
            x[index] = 0.0
        return (x,)
    return make


def rank_deficient(rng, shape):
    """Matrices of rank n - 1 (singular, with distinct nonzero singular values)."""
    m = rng.normal(size=shape)
    return m - (m @ np.ones(shape[-1]))[..., :, None] * np.ones(shape[-1]) / shape[-1]


def matrices(*shapes):
    return lambda rng: tuple(well_conditioned(rng, s) for s in shapes)


def _set(x, v):
    y = x * 1.0
    y[1:3] = v
    return y


def parts(z):
    """A complex value as a real array: its real and imaginary parts."""
    return np.stack([np.real(z), np.imag(z)])


def interp_inputs(with_bounds):
    def make(rng):
        xp = np.cumsum(rng.uniform(0.5, 1.5, 5))
        x = rng.uniform(xp[0] - 1.0, xp[-1] + 1.0, 7)
        args = (x, xp, rng.normal(size=5))
        return args + ((float(rng.normal()), float(rng.normal())) if with_bounds else ())
    return make


# label -> [(f, make inputs from an rng)]: every case goes through the forward rule of `label`.
def _added_at(a, values):
    """np.add.at with repeated rows: each repeat adds again."""
    a = a * 1.0
    np.add.at(a, [0, 3, 0, 2, 0], values)
    return a


def _with_nans(x):
    """`x` with NaNs on its anti-diagonal (every row and column keeps a number)."""
    x = x.copy()
    rows = np.arange(min(x.shape))
    x[rows, x.shape[1] - 1 - rows] = np.nan
    return x


CASES = {
    # ufuncs whose derivative lives where the automatic case below never samples
    "ufuncs.heaviside_rule": [(np.heaviside, lambda rng: (np.array([[-1.0, 0.0], [0.0, 2.0]]), rng.normal(size=2)))],
    # reductions
    "reductions.sum_rule": [(lambda x: np.sum(x, 1), normal((3, 4)))],
    "products._einsum_view_rule": [(lambda x: np.einsum("ii->i", x), normal((3, 3))),
                                   (lambda x: np.einsum("ijk->kij", x), normal((2, 3, 4)))],
    "tensors._singular_cond_rule": [],  # no derivative exists: both modes raise (test_rules_tensors.py)
    # inf and NaN values: a zero cotangent or tangent sends 0, another NaN (test_probe_statistics_edges.py)
    "statistics._no_degrees_left_rule": [],
    "_register._numpy_valued_rule": [(lambda x: _register.numpy_valued(x, pb.stop_gradient(x) + 0.0), normal((3, 2)))],
    "reductions.mean_rule": [(lambda x: np.mean(x, axis=(0, 2), keepdims=True), normal((2, 3, 2)))],
    "reductions.max_rule": [(lambda x: np.max(x, 0), normal((4, 3))), (lambda x: np.amax(x), normal((5,)))],
    "reductions.min_rule": [(lambda x: np.min(x, axis=-1, keepdims=True), normal((3, 4)))],
    "reductions.numpy.nanmax": [(lambda x: np.nanmax(x, 0), lambda rng: (_with_nans(rng.normal(size=(4, 3))),)),
                                (np.nanmax, normal((5,)))],
    "reductions.numpy.nanmin": [(lambda x: np.nanmin(x, axis=1, keepdims=True),
                                 lambda rng: (_with_nans(rng.normal(size=(3, 4))),))],
    "reductions.prod_rule": [(lambda x: np.prod(x, axis=1), normal((3, 4))),
                             (lambda x: np.prod(x, 0), with_zeros((3, 2), [(0, 0), (1, 0), (2, 1)]))],
    # scans
    "scans.cumsum_rule": [(lambda x: np.cumsum(x, axis=0), normal((3, 4))), (np.cumsum, normal((2, 3)))],
    "scans.cumprod_rule": [(lambda x: np.cumprod(x, 1), normal((3, 4))),
                           (lambda x: np.cumprod(x, axis=1), with_zeros((3, 5), [(0, 1), (1, 1), (1, 3), (2, 4)])),
                           (np.cumprod, with_zeros((2, 3), [(0, 2)]))],
    "statistics.var_rule": [(lambda x: np.var(x, axis=0, ddof=1), normal((4, 3))),
                       (lambda x: np.var(x, keepdims=True), normal((2, 3)))],
    "statistics.std_rule": [(lambda x: np.std(x, 1), normal((3, 4))),
                       (lambda x: np.std(x, axis=(0, 1), correction=1), normal((2, 3, 2)))],
    "norms._euclidean_rule": [(lambda x: np.linalg.norm(x, axis=1), normal((3, 4))), (np.linalg.norm, normal((5,)))],
    # shape
    "shape.reshape_rule": [(lambda x: np.reshape(x, (6, 2)), normal((3, 4))),
                           (lambda x: x.reshape(2, -1), normal((4,)))],
    "shape.ravel_rule": [(np.ravel, normal((3, 4)))],
    "shape.transpose_rule": [(lambda x: np.transpose(x, (2, 0, 1)), normal((2, 3, 4)))],
    "shape.swapaxes_rule": [(lambda x: np.swapaxes(x, 0, 2), normal((2, 3, 4)))],
    "shape.moveaxis_rule": [(lambda x: np.moveaxis(x, 0, -1), normal((2, 3, 4)))],
    "shape.expand_dims_rule": [(lambda x: np.expand_dims(x, 1), normal((3, 2)))],
    "shape.squeeze_rule": [(np.squeeze, normal((3, 1, 2)))],
    "shape.broadcast_to_rule": [(lambda x: np.broadcast_to(x, (4, 3)), normal((3,)))],
    "shape.copy_rule": [(np.copy, normal((3,)))],
    "shape.astype_rule": [(lambda x: x.astype(np.longdouble).astype(np.float64), normal((3,)))],
    "shape._concatenate_rule": [(lambda a, b: np.concatenate([a, b], axis=1), normal((2, 3), (2, 2))),
                                (lambda a, b: np.concatenate([a, b], axis=None), normal((2, 3), (2,)))],
    "shape._stack_rule": [(lambda a, b: np.stack([a, b], axis=-1), normal((2, 3), (2, 3)))],
    # indexing
    "indexing.getitem_rule": [(lambda x: x[1:, ::-1], normal((3, 4))), (lambda x: x[[0, 2, 0]], normal((3, 4)))],
    "indexing.index_update_rule": [(_set, normal((4,), (2,)))],
    "indexing.unindex_rule": [(lambda g: indexing.unindex(g, [0, 2, 0], (4, 2)), normal((3, 2)))],
    "indexing.where_rule": [(lambda a, b: np.where(a > 0, a, b), normal((3, 3), (3,)))],
    "ufuncs.clip_rule": [(lambda x, lo, hi: np.clip(x, lo - 1.0, hi + 1.0), normal((6,), (6,), (6,))),
                           (lambda x, lo, hi: np.clip(x, lo, hi - 1.0), normal((6,), (6,), (6,)))],
    # linalg
    "products.matmul_rule": [(lambda a, b: a @ b, normal((2, 3), (3, 4))), (np.matmul, normal((2, 2, 3), (3,)))],
    "products.tensordot_rule": [(lambda a, b: np.tensordot(a, b, axes=([0, 2], [1, 0])), normal((2, 3, 4), (4, 2, 5)))],
    "products.outer_rule": [(np.outer, normal((3,), (2, 2)))],
    "products._einsum_rule": [(lambda a, b, c: np.einsum("ij,jk,k->i", a, b, c), normal((2, 3), (3, 4), (4,))),
                            (lambda a, b: np.einsum("ij,k->ik", a, b), normal((2, 3), (4,)))],
    # selection
    "shape.flip_rule": [(lambda x: np.flip(x, 0), normal((3, 2))), (np.flip, normal((2, 3)))],
    "shape.roll_rule": [(lambda x: np.roll(x, 2, axis=1), normal((2, 5))),
                            (lambda x: np.roll(x, (1, -1), (0, 1)), normal((3, 4)))],
    "shape.tile_rule": [(lambda x: np.tile(x, (2, 1, 3)), normal((3, 2)))],
    "shape.repeat_rule": [(lambda x: np.repeat(x, [1, 0, 2], axis=0), normal((3, 2))),
                              (lambda x: np.repeat(x, 2), normal((2, 2)))],
    "shape.segment_sum_rule": [(lambda g: shape.segment_sum(g, np.array([2, 0, 1]), 0), normal((3, 2)))],
    "shape.sliding_window_view_rule": [
        (lambda x: np.lib.stride_tricks.sliding_window_view(x, 3), normal((6,))),
        (lambda x: np.lib.stride_tricks.sliding_window_view(x, (2, 2), axis=(1, 0)), normal((3, 4)))],
    "shape._unwindow_rule": [(lambda g: shape.unwindow(g, (6,), (3,), (0,)), normal((4, 3)))],
    "shape._pad_constant_rule": [(lambda x: np.pad(x, ((1, 2), (0, 1)), constant_values=0.5), normal((2, 3)))],
    "indexing.undiagonal_rule": [(lambda v: np.diag(v, -1), normal((3,)))],
    "indexing.diagonal_rule": [(lambda x: np.diagonal(x, 1, 0, 2), normal((3, 2, 4)))],
    "indexing.triu_rule": [(lambda x: np.triu(x, -1), normal((2, 4, 4)))],
    "indexing.tril_rule": [(lambda x: np.tril(x, 1), normal((3, 4)))],
    # Dask's own: gathers and scatters along an axis (it has no nd fancy indexing), and rechunking
    "indexing.gather_along_axis_rule": [(lambda a: indexing.gather_along_axis(a, _dask_order(), 0), dask_along_axis)],
    "indexing.scatter_along_axis_rule": [(lambda g: indexing.scatter_along_axis(g, _dask_order(), 0, 4), dask_along_axis)],
    "indexing.rechunk_rule": [(lambda a: indexing.rechunk(a, 3), dask_along_axis)],
    "interpolation._interp_rule": [(np.interp, interp_inputs(False)), (np.interp, interp_inputs(True))],
    "convolution.convolve_full_rule": [(lambda a, v: np.convolve(a, v, "same"), normal((5,), (3,)))],
    # decompositions
    "linalg.inv_rule": [(np.linalg.inv, matrices((2, 3, 3)))],
    "linalg.solve_rule": [
        (np.linalg.solve, lambda rng: (well_conditioned(rng, (2, 3, 3)), rng.normal(size=3))),
        (np.linalg.solve, lambda rng: (well_conditioned(rng, (3, 3)), rng.normal(size=(3, 2)))),
    ],
    "linalg.det_rule": [(np.linalg.det, matrices((2, 3, 3)))],
    "linalg.singular_adjugate_rule": [(sl.singular_adjugate, lambda rng: (rank_deficient(rng, (2, 3, 3)),)),
                                      (sl.singular_adjugate, lambda rng: (np.zeros((3, 3)),))],
    "ufuncs._standins.power": [(lambda x, y: x ** y, uniform(0.5, 2.0, (3, 2), (3, 2))),
                               (lambda x, y: parts((x + 1j * y) ** 2), normal((3,), (3,)))],
    "linalg._logabsdet_rule": [(lambda a: np.linalg.slogdet(a)[1], matrices((3, 3)))],
    "linalg.pinv_rule": [(np.linalg.pinv, normal((4, 3))), (np.linalg.pinv, normal((2, 2, 4)))],
    "linalg._lstsq_rule": [(lambda a, b: np.linalg.lstsq(a, b)[0], normal((4, 3), (4,))),
                                   (lambda a, b: np.linalg.lstsq(a, b)[0], normal((2, 3), (2, 2)))],
    "decompositions._cholesky_rule": [(np.linalg.cholesky, spd_with_noise((2, 3, 3)))],
    "decompositions._cholesky_upper_rule": [
        (lambda a: np.linalg.cholesky(a, upper=True), spd_with_noise((3, 3), upper=True)),
        (lambda a: np.linalg.cholesky(a, upper=True), spd_with_noise((2, 3, 3), upper=True)),
    ],
    "decompositions._eigh_values_rule": [(np.linalg.eigvalsh, spd_with_noise((2, 3, 3))),
                                         (lambda a: np.linalg.eigh(a, "U")[0], spd_with_noise((4, 4), upper=True))],
    "decompositions._eigh_vectors_rule": [(lambda a: np.linalg.eigh(a)[1], spd_with_noise((2, 3, 3))),
                                          (lambda a: np.linalg.eigh(a, "U")[1], spd_with_noise((4, 4), upper=True))],
    "decompositions._eigh_vectors_any_phase_rule": [(_phase_free_eigenvectors, normal((3, 3), (3, 3)))],
    "decompositions._svd_values_rule": [(lambda a: np.linalg.svd(a, compute_uv=False), normal((3, 4))),
                                        (lambda a: np.linalg.svd(a)[1], normal((2, 4, 3)))],
    "decompositions._svd_u_rule": [(lambda a: np.linalg.svd(a, full_matrices=False)[0], normal((4, 3))),
                                   (lambda a: np.linalg.svd(a)[0], normal((2, 3, 4)))],
    "decompositions._svd_vh_rule": [(lambda a: np.linalg.svd(a, full_matrices=False)[2], normal((3, 4))),
                                    (lambda a: np.linalg.svd(a)[2], normal((2, 4, 3)))],
    "decompositions._qr_q_rule": [(lambda a: np.linalg.qr(a)[0], normal((4, 3))),
                                  (lambda a: np.linalg.qr(a)[0], normal((3, 4))),
                                  (lambda a: np.linalg.qr(a, "complete")[0], normal((2, 3, 3)))],
    "decompositions._qr_r_rule": [(lambda a: np.linalg.qr(a)[1], normal((4, 3))),
                                  (lambda a: np.linalg.qr(a, "r"), normal((2, 3, 4))),
                                  (lambda a: np.linalg.qr(a, "complete")[1], normal((4, 2)))],
    # fft
    "fft._dft_rule": [(lambda x: parts(np.fft.fft(x, 6, 0, "ortho")), normal((4, 2))),
                      (lambda x: parts(np.fft.ifft2(np.fft.fft(x) * 2.0)), normal((3, 4))),
                      (lambda x, y: parts(np.fft.ifft(x + 1j * y, 3, norm="forward")), normal((5,), (5,)))],
    "fft._real_dft_rule": [(lambda x: parts(np.fft.rfft(x, 5, norm="forward")), normal((2, 4)))],
    "fft._real_idft_rule": [(lambda x: np.fft.irfft(np.fft.fft(x), 7), normal((5,))),
                            (lambda x, y: np.fft.irfft(x + 1j * y, 6, norm="ortho"), normal((4,), (4,)))],
    # complex values
    "ufuncs.conjugate": [(lambda x, y: parts(np.conjugate(x + 1j * y)), normal((3,), (3,)))],
    "ufuncs.absolute": [(np.absolute, uniform(0.5, 1.5, (3, 2))), (lambda x, y: np.abs(x + 1j * y), normal((3,), (3,)))],
    "ufuncs.sign": [(lambda x, y: parts(np.sign(x + 1j * y)), normal((3,), (3,)))],
    "ufuncs._real_part_rule": [(lambda x, y: np.real((x + 1j * y) ** 2), normal((3,), (3,)))],
    "ufuncs._imag_part_rule": [(lambda x, y: np.imag((x + 1j * y) ** 2), normal((3,), (3,)))],
    "ufuncs._complex_from_parts_rule": [(lambda x, y: np.real(ufuncs.complex_from_parts(x, y ** 2, np.complex128) ** 3),
                                         normal((3,), (3,)))],
    "ufuncs._add_at_rule": [(_added_at, normal((4, 2), (5, 2)))],
    "linalg._det_phase_rule": [(lambda a, b: parts(np.linalg.slogdet(a + 1j * b)[0]), matrices((3, 3), (3, 3)))],
    "decompositions._eig_values_rule": [(lambda a: parts(np.linalg.eig(a)[0]), matrices((3, 3))),
                                        (lambda a, b: parts(np.linalg.eig(a + 1j * b)[0]), matrices((3, 3), (3, 3)))],
    "decompositions._eig_vectors_rule": [(lambda a: parts(np.linalg.eig(a)[1]), matrices((3, 3))),
                                         (lambda a, b: parts(np.linalg.eig(a + 1j * b)[1]), matrices((2, 3, 3), (3, 3)))],
    "decompositions._eigenvalues_rule": [(lambda a: parts(np.linalg.eigvals(a)), matrices((4, 4)))],
    # scipy.linalg stand-ins
    "linalg.triangular_solve_rule": [
        (lambda a, b: sl.solve_triangular(a, b, trans=1, lower=True),
         lambda rng: (well_conditioned(rng, (3, 3)), rng.normal(size=(3, 2)))),
        (lambda a, b: sl.solve_triangular(a, b, unit_diagonal=True),
         lambda rng: (well_conditioned(rng, (3, 3)), rng.normal(size=3))),
    ],
    "linalg.expm_rule": [(lambda a: sl.expm(a / 2.0), normal((2, 3, 3)))],
    "linalg._lu_rule": [(lambda a: sl.lu_factor(a)[0], matrices((4, 4)))],
    "special.polygamma_rule": [(lambda x: special.polygamma(2, x), uniform(0.5, 3.0, (4,)))],
}

CASES.update(NUMPY_CASES)

SCIPY_LINALG_LABELS = {"linalg.triangular_solve_rule", "linalg.expm_rule", "linalg._lu_rule",
                       "special.polygamma_rule"}

# Domains where a ufunc is smooth and well scaled (default: (-0.9, 0.9)).
UFUNC_DOMAINS = {
    "log": (0.5, 1.5), "log2": (0.5, 1.5), "log10": (0.5, 1.5), "sqrt": (0.5, 1.5), "reciprocal": (0.5, 1.5),
    "cbrt": (0.5, 1.5), "arccosh": (1.2, 2.0), "power": (0.5, 1.5), "float_power": (0.5, 1.5),
    "logit": (0.05, 0.95), "erfcinv": (0.1, 1.9), "gammaln": (0.2, 5), "gamma": (0.3, 4), "digamma": (0.3, 5),
    "psi": (0.3, 5), "ndtri": (0.05, 0.95), "xlogy": (0.2, 2.0), "xlog1py": (0.2, 2.0), "betaln": (0.2, 2.0),
    "iv": (0.2, 2.0), "ive": (0.2, 2.0), "log_ndtr": (-3.0, 3.0), "erfcx": (-1.0, 3.0),
    "y0": (0.5, 3.0), "y1": (0.5, 3.0), "jv": (0.5, 3.0), "yv": (0.5, 3.0), "yn": (0.5, 3.0), "beta": (0.3, 2.0),
    "poch": (0.3, 2.0), "gammainc": (0.3, 3.0), "gammaincc": (0.3, 3.0), "stdtr": (0.5, 3.0),
    "betainc": (0.2, 0.9), "betaincc": (0.2, 0.9),
}


def ufunc_case(ufunc):
    low, high = UFUNC_DOMAINS.get(ufunc.__name__, (-0.9, 0.9))
    if ufunc.nin == 1:
        return ufunc, uniform(low, high, (3, 2))
    if ufunc is np.ldexp:  # the exponent is an integer: no tangent
        return ufunc, lambda rng: (rng.normal(size=(3, 2)), rng.integers(-2, 3, size=2))
    if ufunc.__name__ in ("iv", "ive", "jv", "yv", "yn"):  # the order is plain
        order = 1 if ufunc.__name__ == "yn" else 1.5
        return (lambda z: ufunc(order, z)), uniform(low, high, (3, 2))
    if ufunc.nin == 3:
        return ufunc, uniform(low, high, (3, 2), (2,), (3, 1))
    return ufunc, uniform(low, high, (3, 2), (2,))


for _rule, _label in RULES.items():
    if _label not in CASES and _rule in UFUNC_RULES.values():
        _ufunc = next(u for u, r in UFUNC_RULES.items() if r is _rule)
        CASES[_label] = [ufunc_case(_ufunc)]
import scipy_rule_cases  # noqa: E402  (domains and plain orders of the scipy.special rules; the SciPy stand-ins' cases)

for _name in special.RULES:
    if HAVE_SCIPY:
        CASES[f"special.{_name}_rule"] = scipy_rule_cases.special_ufunc_cases(_name, ufunc_case)
    else:
        CASES[f"special.{_name}_rule"] = []  # skipped below: the rule exists, its ufunc does not
if HAVE_SCIPY:  # lambertw is complex-valued: its dot-product check reads real and imaginary parts as reals
    CASES["special._ufuncs._lambertw_rule"] = [
        (lambda x: np.stack([np.real(sp.lambertw(x)), np.imag(sp.lambertw(x, 1))]),
         uniform(0.1, 3, (3, 2)))]


def _sparse(kind="csr_array", shape=(4, 3)):
    """A constant scipy.sparse matrix of `kind` (made at the call: SciPy is optional)."""
    import scipy.sparse

    dense = np.random.default_rng(5).uniform(-1, 1, shape) * (np.arange(np.prod(shape)).reshape(shape) % 3 != 1)
    if shape[0] == shape[1]:
        dense = dense + 3 * np.eye(shape[0])  # invertible, for spsolve
    return getattr(scipy.sparse, kind)(dense)


def _spsolve(b):
    from pullback.rules.scipy_sparse import spsolve

    return spsolve(_sparse("csc_array", (3, 3)), b)


_SPARSE_CASES = {
    "scipy_sparse._sparse_matmul_rule": [(lambda x: _sparse() @ x, uniform(-1, 1, (3,))),
                                         (lambda x: x @ _sparse(), uniform(-1, 1, (2, 4)))],
    "scipy_sparse._sparse_multiply_rule": [(lambda x: _sparse("csr_matrix") * x, uniform(-1, 1, (3, 2)))],
    "scipy_sparse._spsolve_rule": [(_spsolve, uniform(-1, 1, (3,)))],
}
CASES.update(_SPARSE_CASES)
CASES.update(scipy_rule_cases.CASES)
SCIPY_LINALG_LABELS |= set(scipy_rule_cases.CASES) | set(_SPARSE_CASES)  # skipped without SciPy


def test_every_forward_rule_has_a_dot_product_case():
    missing = sorted(label for label in RULE_BY_LABEL if label not in CASES and label not in ALLOWED_WITHOUT_FORWARD)
    assert not missing, f"forward/reverse pairs without a dot-product case: {missing}"
    stale = sorted(label for label in CASES if label not in RULE_BY_LABEL)
    assert not stale, f"dot-product cases for rules that no longer exist: {stale}"


# --- the dot-product test ----------------------------------------------------------------------
def dot_product_test(f, args, rng):
    """<J v, u> (forward mode) == <v, Jᵀ u> (reverse mode) for random v and u, in float64 to 1e-10."""
    result = check_transpose(f, *args, rtol=1e-10, atol=1e-13, seed=rng)
    assert result, result
    assert result.scale > 0, "the case does not exercise the derivative"


DOT_CASES = [(label, k) for label in sorted(CASES) for k in range(len(CASES[label]))]


@pytest.mark.parametrize("label, k", DOT_CASES, ids=[f"{label}-{k}" for label, k in DOT_CASES])
def test_dot_product(label, k, monkeypatch):
    if not HAVE_SCIPY and (label.startswith("special.") or label in SCIPY_LINALG_LABELS):
        pytest.skip("needs SciPy")
    if not HAVE_DASK and CASES[label][k][1] is dask_along_axis:
        pytest.skip("needs Dask")
    f, make = CASES[label][k]
    rng = np.random.default_rng(zlib.crc32(f"{label}-{k}".encode()))
    rule = RULE_BY_LABEL[label]
    calls = []
    frule = forward_rule_of(rule)

    def counted(*args, **kwargs):
        calls.append(1)
        return frule(*args, **kwargs)

    for key in [key for key, served in REVERSE_RULES.items() if served is rule]:
        monkeypatch.setitem(FORWARD_RULES, key, counted)
    dot_product_test(f, make(rng), rng)
    assert calls, f"the case for {label} does not reach its forward rule"


def flat(*ys):
    return np.concatenate([np.ravel(y) for y in ys])


def complex_arithmetic(x):
    F = np.fft.fft(x)
    G = (F * F.conj() + F ** 2) / (F + 3.0) - np.exp(F / 4.0) + np.log(F * 0.5 + 4.0)
    return flat(np.real(G), np.imag(G), np.angle(F + 2.0), np.abs(np.fft.ifftshift(G)))


# Functions with several outputs, and composites, through all the rules they are made of.
COMPOSITE_CASES = {
    "eigh": (lambda a: flat(*np.linalg.eigh(a)), spd_with_noise((2, 3, 3))),
    "svd": (lambda a: flat(*np.linalg.svd(a, full_matrices=False)), normal((2, 4, 3))),
    "qr": (lambda a: flat(*np.linalg.qr(a)), normal((3, 4))),
    "slogdet": (lambda a: np.linalg.slogdet(a).logabsdet * np.linalg.slogdet(a).sign, matrices((2, 3, 3))),
    "lstsq": (lambda a, b: flat(*np.linalg.lstsq(a, b)[:2], np.linalg.lstsq(a, b)[3]), normal((5, 3), (5,))),
    "matrix_power": (lambda a: np.linalg.matrix_power(a, -3), matrices((3, 3))),
    "sort": (lambda x: flat(np.sort(x, axis=0), np.sort(x, axis=None)), normal((4, 3))),
    "partition": (lambda x: np.partition(x, 2, axis=-1), normal((2, 5))),
    "split": (lambda x: flat(*np.split(x, [1, 3], axis=1), *np.array_split(x, 2)), normal((3, 5))),
    "take and pad": (lambda x: flat(np.take(x, [2, 0, 2], axis=1), np.take_along_axis(x, np.array([[1], [0]]), 1),
                                    np.pad(x, 2, mode="reflect"), np.pad(x, (1, 2), mode="wrap")), normal((2, 3))),
    "kron and meshgrid": (lambda a, b: flat(np.kron(a, b), *np.meshgrid(np.ravel(a), np.ravel(b))),
                          normal((2, 2), (3,))),
    "norms": (lambda x: flat(np.linalg.norm(x, 1), np.linalg.norm(x, "nuc"), np.linalg.norm(x, np.inf, axis=0),
                             np.linalg.vector_norm(x, ord=3)), normal((3, 4))),
    "statistics": (lambda x, w: flat(np.average(x, axis=0, weights=w), np.nanmean(x), np.ptp(x, axis=1), np.diff(x, 2)),
                   lambda rng: (rng.normal(size=(3, 4)), rng.uniform(0.5, 1.5, 3))),
    "complex arithmetic": (complex_arithmetic, normal((6,))),
    "real transforms": (lambda x: flat(*(parts(t) for t in (np.fft.rfftn(x), np.fft.fft2(x, norm="forward"),
                                                            np.fft.ihfft(x))), np.fft.irfftn(np.fft.fftn(x)),
                                       np.fft.hfft(np.fft.ifft(x))), normal((3, 4))),
}
if HAVE_SCIPY:
    COMPOSITE_CASES.update({
        "cho_factor and cho_solve": (
            lambda s, b: flat(sl.cho_factor(s, lower=True)[0], sl.cho_solve(sl.cho_factor(s), b)),
            lambda rng: (spd(rng, (3, 3)), rng.normal(size=(3, 2)))),
        "lu_factor and lu_solve": (lambda a, b: flat(sl.lu_factor(a)[0], sl.lu_solve(sl.lu_factor(a), b, trans=1)),
                                   lambda rng: (well_conditioned(rng, (3, 3)), rng.normal(size=3))),
        "logsumexp and softmax": (lambda x, b: flat(special.logsumexp(x, axis=0, b=b), special.softmax(x, axis=1),
                                                    special.log_softmax(x)),
                                  lambda rng: (rng.normal(size=(3, 4)), rng.uniform(0.5, 1.5, (3, 4)))),
    })


@pytest.mark.parametrize("name", sorted(COMPOSITE_CASES))
def test_dot_product_through_composites(name):
    f, make = COMPOSITE_CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    dot_product_test(f, make(rng), rng)


# --- jvp against central differences, float32, per family --------------------------------------
def central_difference(f, args, v, eps=1e-6):
    moved = lambda s: f(*[a if t is None else a + s * t for a, t in zip(args, v)])  # noqa: E731
    return (np.asarray(moved(eps), dtype=np.float64) - np.asarray(moved(-eps), dtype=np.float64)) / (2 * eps)


def check_jvp(f, args, rng, rtol=1e-6, atol=1e-8):
    """jvp against float64 central differences, and float32 inputs giving a float32 tangent."""
    v = tuple(rng.normal(size=np.shape(a)) if np.result_type(a).kind == "f" else None for a in args)
    y, y_dot = pb.jvp(f, args, v)
    np.testing.assert_allclose(y, f(*args), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y_dot, central_difference(f, args, v), rtol=rtol, atol=atol)
    low = tuple(a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args)
    y32, dot32 = pb.jvp(f, low, tuple(None if t is None else t.astype(np.float32) for t in v))
    plain32 = np.asarray(f(*low))
    assert y32.dtype == dot32.dtype == plain32.dtype, (y32.dtype, dot32.dtype, plain32.dtype)
    np.testing.assert_allclose(dot32, y_dot, rtol=2e-2, atol=2e-2 * (np.max(np.abs(y_dot)) + 1e-3))
    return dot32.dtype


FD = settings(max_examples=12, deadline=None)


@FD
@given(rows=st.integers(1, 4), cols=st.integers(1, 4), seed=seeds)
def test_jvp_ufuncs_shape_indexing_products(rows, cols, seed):
    rng = np.random.default_rng(seed)
    a, b, c = rng.normal(size=(rows, cols)), rng.uniform(0.5, 1.5, cols), rng.normal(size=(cols, 2))

    def f(a, b, c):
        y = np.where(a > 0, np.exp(np.sin(a)) ** b, np.arctan2(a, b)) + np.clip(a, -0.5, b) * np.hypot(a, b)
        y = np.concatenate([y, np.exp(-a)], axis=0)[::2] @ c + np.einsum("ij,jk->i", a, c)[:, None]
        z = np.stack([y, np.tanh(y)], axis=-1).transpose(2, 0, 1).reshape(-1, 2).copy()
        z[0] = np.maximum(z[0], 0.1)
        w = np.tensordot(a, a, axes=([0], [0])) @ np.broadcast_to(b, (cols, cols))
        return np.concatenate([np.ravel(np.outer(np.sum(z, axis=0), b)), np.ravel(w)])

    check_jvp(f, (a, b, c), rng, rtol=1e-5)


@FD
@given(rows=st.integers(1, 4), cols=st.integers(1, 4), axis=st.sampled_from([0, 1, None]), seed=seeds)
def test_jvp_scans_and_reductions(rows, cols, axis, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, cols))
    check_jvp(lambda x: np.cumsum(np.cumprod(x, axis=axis), axis=axis) + np.sum(x * x), (x,), rng)
    check_jvp(lambda x: np.std(x, axis=axis) + np.var(x, axis=axis) * np.prod(x, axis=axis), (x + 3.0,), rng)
    check_jvp(lambda x: np.linalg.norm(x, axis=axis) * np.max(x, axis=axis) - np.min(x, axis=axis), (x,), rng)


@FD
@given(n=st.integers(2, 6), reps=st.integers(1, 3), shift=st.integers(-3, 3), seed=seeds)
def test_jvp_selection_and_shape(n, reps, shift, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    f = lambda x: np.sort(np.roll(np.tile(np.flip(x, 1), (reps, 1)), shift, 0), axis=0)[1:]  # noqa: E731
    check_jvp(f, (x,), rng)
    padded = lambda x: np.triu(np.pad(x, ((1, 0), (0, 2)), constant_values=2.0))  # noqa: E731
    check_jvp(lambda x: padded(x) @ np.tril(np.pad(x.T @ x, ((1, 1), (0, 0)))), (x,), rng)
    check_jvp(lambda x: np.concatenate(np.split(np.repeat(x, reps, axis=0), n, axis=0)[::-1]), (x,), rng)
    xp = np.cumsum(rng.uniform(0.5, 1.5, n))
    points = rng.uniform(xp[0] - 1.0, xp[-1] + 1.0, 4)
    check_jvp(np.interp, (points, xp, rng.normal(size=n)), rng, rtol=1e-5)
    check_jvp(lambda a, v: np.correlate(a, v, "full"), (rng.normal(size=n), rng.normal(size=reps)), rng)


@FD
@given(batch=st.sampled_from([(), (2,)]), n=st.integers(1, 4), m=st.integers(1, 4), seed=seeds)
def test_jvp_decompositions(batch, n, m, seed):
    rng = np.random.default_rng(seed)
    a, s, r = well_conditioned(rng, batch + (n, n)), spd(rng, batch + (n, n)), rng.normal(size=batch + (n, m))
    check_jvp(lambda a: np.linalg.inv(a) * np.linalg.det(a)[..., None, None] + np.linalg.slogdet(a)[1][..., None, None],
              (a,), rng, rtol=1e-5)
    check_jvp(lambda a, b: np.linalg.solve(a, b) + np.linalg.pinv(b), (a, well_conditioned(rng, batch + (n, n))), rng,
              rtol=1e-5)
    k = min(n, m)

    def spectral(s, r):
        w, v = np.linalg.eigh(s)
        u, sv, vh = np.linalg.svd(r, full_matrices=False)
        q, upper = np.linalg.qr(r)
        return (np.sum(np.abs(v) * w[..., None, :]) + np.sum(np.abs(u[..., :k]) * sv[..., None, :])
                + np.sum(np.abs(vh) ** 2 * sv[..., :, None]) + np.sum(np.abs(q)) + np.sum(np.abs(upper))
                + np.sum(np.linalg.cholesky(s)))

    check_jvp(spectral, (s, r), rng, rtol=1e-4, atol=1e-6)
    if not batch:
        check_jvp(lambda a, b: np.linalg.lstsq(a, b)[0], (rng.normal(size=(m + n, n)) + np.eye(m + n, n),
                                                          rng.normal(size=m + n)), rng, rtol=1e-5)


@FD
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=2).map(tuple), norm=st.sampled_from([None, "ortho"]),
       seed=seeds)
def test_jvp_fft(shape, norm, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    check_jvp(lambda x: parts(np.fft.fftn(x, norm=norm) * np.fft.fft(np.sin(x[..., ::-1]))), (x,), rng)
    check_jvp(lambda x: np.abs(np.fft.rfft(x, norm=norm)) ** 2, (x,), rng, rtol=1e-5)
    check_jvp(lambda x: np.fft.irfft(np.fft.rfft(x) * 0.5, n=2 * shape[-1], norm=norm), (x,), rng)


@pytest.mark.skipif(not HAVE_SCIPY, reason="needs SciPy")
@FD
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=2).map(tuple), seed=seeds)
def test_jvp_special(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.3, 2.0, shape)
    y = rng.uniform(0.3, 2.0, shape)
    check_jvp(lambda x, y: sp.erf(x) * sp.gammaln(y) + sp.xlogy(x, y) + sp.betaln(x, y) + sp.i1e(x) + sp.expit(-y),
              (x, y), rng, rtol=1e-5)
    check_jvp(lambda x: special.polygamma(1, x) + special.logsumexp(x) + special.log_softmax(x), (x,), rng, rtol=1e-5)


@pytest.mark.skipif(not HAVE_SCIPY, reason="needs SciPy")
@FD
@given(n=st.integers(1, 4), lower=st.booleans(), seed=seeds)
def test_jvp_scipy_linalg(n, lower, seed):
    rng = np.random.default_rng(seed)
    a, s, b = well_conditioned(rng, (n, n)), spd(rng, (n, n)), rng.normal(size=(n, 2))
    check_jvp(lambda a, b: sl.solve_triangular(a, b, lower=lower, trans=1), (a, b), rng, rtol=1e-5)
    check_jvp(lambda s, b: sl.cho_solve(sl.cho_factor(s, lower=lower), b), (s, b), rng, rtol=1e-5)
    check_jvp(lambda a, b: sl.lu_solve(sl.lu_factor(a), b) + sl.expm(a / 3.0) @ b, (a, b), rng, rtol=1e-5)


# --- several outputs, and tangents that do not exist ------------------------------------------
def test_several_outputs_carry_their_own_tangents():
    rng = np.random.default_rng(0)
    s = spd(rng, (3, 3))
    v = rng.normal(size=(3, 3))
    (w, vecs), (dw, dvecs) = pb.jvp(lambda s: tuple(np.linalg.eigh(s)), (s,), (v,))
    sym = np.tril(v) + np.tril(v, -1).T  # eigh reads the lower triangle
    np.testing.assert_allclose(dw, np.diag(vecs.T @ sym @ vecs), rtol=1e-12)  # dλ_i = v_iᵀ dA v_i
    np.testing.assert_allclose(dvecs, central_difference(lambda s: np.linalg.eigh(s)[1], (s,), (v,)), atol=1e-6)
    (q, r), (dq, dr) = pb.jvp(lambda a: tuple(np.linalg.qr(a)), (s,), (v,))
    np.testing.assert_allclose(dq @ r + q @ dr, v, atol=1e-12)  # d(QR) = dA
    assert np.allclose(np.tril(dr, -1), 0) and np.allclose(q.T @ dq + dq.T @ q, 0, atol=1e-12)


def test_tangents_that_do_not_exist_are_nan_not_wrong():
    v = np.random.default_rng(1).normal(size=(3, 3))
    _, (dw, dvecs) = pb.jvp(lambda a: tuple(np.linalg.eigh(a)), (np.diag([1.0, 1.0, 2.0]),), (v,))
    assert np.all(np.isfinite(dw))  # eigenvalue derivatives exist at a repeated eigenvalue
    assert np.all(np.isnan(dvecs[:, :2])) and np.all(np.isfinite(dvecs[:, 2]))
    a = np.random.default_rng(2).normal(size=(4, 2))
    _, (du, ds, dvh) = pb.jvp(lambda a: tuple(np.linalg.svd(a)), (a,), (np.ones((4, 2)),))
    assert np.all(np.isnan(du[:, 2:])) and np.all(np.isfinite(du[:, :2])) and np.all(np.isfinite(dvh))
    expected = central_difference(lambda a: np.linalg.svd(a, full_matrices=False)[0], (a,), (np.ones((4, 2)),))
    np.testing.assert_allclose(du[:, :2], expected, atol=1e-6)
    _, dq = pb.jvp(lambda a: np.linalg.qr(a, "complete")[0], (a,), (np.ones((4, 2)),))
    assert np.all(np.isnan(dq[:, 2:])) and np.all(np.isfinite(dq[:, :2]))


def test_cumprod_and_prod_forward_rules_are_exact_at_zeros_to_second_order():
    x = np.array([[0.5, 0.0, 2.0, 0.0, 1.5], [1.2, -0.7, 0.0, 0.8, 2.0]])
    rng = np.random.default_rng(3)
    v, u = rng.normal(size=x.shape), rng.normal(size=x.shape)
    for f in (lambda x: np.cumprod(x, axis=1), lambda x: np.prod(x, axis=1), lambda x: np.cumprod(x)):
        directional = lambda x: pb.jvp(f, (x,), (v,))[1]  # noqa: E731
        np.testing.assert_allclose(directional(x), central_difference(f, (x,), (v,)), atol=1e-8)
        second = pb.jvp(directional, (x,), (u,))[1]
        np.testing.assert_allclose(second, central_difference(directional, (x,), (u,)), atol=1e-7)


def test_only_the_first_argument_of_a_linear_rule_takes_a_tangent():
    with pytest.raises(TypeError, match="first argument only"):
        pb.jvp(lambda g: shape.segment_sum(np.ones(3), g, 0), (np.array([1.0, 2.0]),), (np.ones(2),))


def test_a_user_forward_rule_replaces_a_builtin_one(monkeypatch):
    # np.flip's result is a view, so its registration wraps the rule; pb.frule still finds it.
    monkeypatch.setitem(FORWARD_RULES, np.flip, FORWARD_RULES[np.flip])  # restored after

    @pb.frule(np.flip)
    def doubled(primals, tangents, **kwargs):
        return np.flip(*primals, **kwargs), 2.0 * np.flip(tangents[0], *primals[1:], **kwargs)

    assert FORWARD_RULES[np.flip] is doubled
    _, t = pb.jvp(lambda x: np.flip(x, 0), (np.zeros((2, 3)),), (np.arange(6.0).reshape(2, 3),))
    np.testing.assert_array_equal(t, 2.0 * np.arange(6.0).reshape(2, 3)[::-1])


# --- forward rules nest: higher order in any mix of modes ---------------------------------------
NESTED = {
    "cumprod": lambda x: np.cumprod(x)[-1] + np.sum(np.cumprod(x * x)),
    "std": lambda x: np.std(x) * np.linalg.norm(x),
    "interp": lambda x: np.sum(np.interp(x, np.array([-2.0, 0.0, 1.0, 3.0]), np.array([0.0, 1.0, -1.0, 2.0])) * x),
    "inv": lambda x: np.sum(np.linalg.inv(np.reshape(x, (2, 2)) + 3.0 * np.eye(2)) ** 2),
    "eigh": lambda x: np.sum(np.abs(np.linalg.eigh(_sym(x))[1]) * np.linalg.eigvalsh(_sym(x))),
    "svd": lambda x: np.sum(np.linalg.svd(np.reshape(x, (2, 2)), compute_uv=False) ** 3),
    "qr": lambda x: np.sum(np.abs(np.linalg.qr(np.reshape(x, (2, 2)) + 2.0 * np.eye(2))[1]) ** 2),
    "cholesky": lambda x: np.sum(np.linalg.cholesky(_sym(x) + 4.0 * np.eye(2)) ** 3),
    "fft": lambda x: np.sum(np.abs(np.fft.fft(x * x)) ** 3),
}
if HAVE_SCIPY:
    NESTED["special"] = lambda x: np.sum(sp.erf(x) * sp.gammaln(x + 2.0) * sp.expit(x * x))
    NESTED["expm"] = lambda x: np.sum(sl.expm(np.reshape(x, (2, 2)) / 2.0) ** 2)
    NESTED["lu"] = lambda x: np.sum(sl.lu_factor(np.reshape(x, (2, 2)) + 3.0 * np.eye(2))[0] ** 3)


def _sym(x):
    m = np.reshape(x, (2, 2))
    return m + m.T + np.array([[3.0, 0.0], [0.0, -3.0]])


@pytest.mark.parametrize("name", sorted(NESTED))
def test_forward_rules_nest(name):
    f = NESTED[name]
    x = np.array([0.3, -0.7, 0.5, 1.1])
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    v, u = rng.normal(size=4), rng.normal(size=4)
    directional = lambda x: pb.jvp(f, (x,), (v,))[1]  # noqa: E731
    # forward over forward: the second directional derivative u' H v
    second = pb.jvp(directional, (x,), (u,))[1]
    expected = central_difference(directional, (x,), (u,))
    np.testing.assert_allclose(second, expected, rtol=1e-5, atol=1e-7)
    # reverse over forward: the gradient of x -> <∇f(x), v> is H v
    np.testing.assert_allclose(pb.gradient(directional, x)[0] @ u, expected, rtol=1e-5, atol=1e-7)
    # forward over reverse (pb.hvp)
    np.testing.assert_allclose(pb.hvp(f, x, u) @ v, expected, rtol=1e-5, atol=1e-7)
