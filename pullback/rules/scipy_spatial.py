"""Differentiable versions of `scipy.spatial.distance`'s cdist, pdist and squareform, public as
`pullback.scipy.spatial.distance`. SciPy's own convert their inputs with `np.asarray`; these have
the same signatures, are written with differentiable NumPy operations, and give SciPy's values
(SciPy computes them; the operations here carry the derivative).

Where a distance has a kink, the derivative is the subgradient 0: the euclidean (and minkowski,
seuclidean, mahalanobis, jensenshannon) distance between two equal points, the cityblock
distance where coordinates agree. Metrics on booleans or counts of matches (hamming, jaccard,
dice, ...) are piecewise constant: no gradient.

>>> import numpy as np, pullback as pb
>>> from pullback.scipy.spatial.distance import cdist
>>> pb.gradient(lambda a: np.sum(cdist(a, np.zeros((1, 2)))), np.array([[3.0, 4.0]]))[0]
array([[0.6, 0.8]])
"""

import numpy as np

from .._values import Traced, stop_gradient
from ._register import describe
from .special import RecordedModule, stand_in_among


def _distance():
    """`scipy.spatial.distance`, its functions recorded whole inside `pb.jit`."""
    import scipy.spatial.distance

    return RecordedModule(scipy.spatial.distance)


def _refuse_out_in_jit(name, out, *values):
    """`out=` inside `pb.jit`: the recorded call would write into a copy, and the write would be lost."""
    if out is not None and stand_in_among((out, values)) is not None:
        raise TypeError(f"pullback.scipy.spatial.distance.{name}: out= is not supported inside pb.jit; assign the "
                        f"result instead (out[...] = {name}(...)).")


def _any_tracked(*values):
    return any(isinstance(v, Traced) for v in values)


def _safe_root(s, power=0.5):
    """s ** power, with the subgradient 0 where s == 0 (the derivative there is infinite)."""
    zero = stop_gradient(s) == 0
    return np.where(zero, 0.0, np.where(zero, 1.0, s) ** power)


def _weighted_sum(terms, w):
    return np.sum(terms if w is None else terms * w, axis=-1)


def _cosine_like(u, v, w, centered):
    if centered:
        mean = (lambda x: np.mean(x, axis=-1, keepdims=True)) if w is None else (
            lambda x: np.sum(x * w, axis=-1, keepdims=True) / np.sum(w))
        u, v = u - mean(u), v - mean(v)
    uv, uu, vv = _weighted_sum(u * v, w), _weighted_sum(u * u, w), _weighted_sum(v * v, w)
    return np.clip(1.0 - uv / np.sqrt(uu * vv), 0.0, 2.0)


def _canberra(u, v, w):
    num, den = np.abs(u - v), np.abs(u) + np.abs(v)
    empty = stop_gradient(den) == 0
    return _weighted_sum(np.where(empty, 0.0, num / np.where(empty, 1.0, den)), w)


def _chebyshev(u, v, w):
    """max |u - v| over the entries of nonzero weight (also minkowski's p = inf, as SciPy's)."""
    return np.max(np.abs(u - v) if w is None else np.where(stop_gradient(w) != 0, np.abs(u - v), 0.0), axis=-1)


def _jensenshannon(u, v, base):
    p, q = u / np.sum(u, axis=-1, keepdims=True), v / np.sum(v, axis=-1, keepdims=True)
    m = (p + q) / 2.0
    from scipy.special import rel_entr

    js = (np.sum(rel_entr(p, m), axis=-1) + np.sum(rel_entr(q, m), axis=-1)) / 2.0
    if base is not None:
        js = js / np.log(base)
    return _safe_root(js)


# canonical metric name -> f(u, v, options, data) over the last axis; `data` holds every point,
# for the defaults SciPy computes from them (seuclidean's V, mahalanobis's VI)
_METRICS = {
    "euclidean": lambda u, v, o, data: _safe_root(_weighted_sum((u - v) ** 2, o.get("w"))),
    "sqeuclidean": lambda u, v, o, data: _weighted_sum((u - v) ** 2, o.get("w")),
    "cityblock": lambda u, v, o, data: _weighted_sum(np.abs(u - v), o.get("w")),
    "minkowski": lambda u, v, o, data: _chebyshev(u, v, o.get("w")) if o.get("p", 2.0) == np.inf else _safe_root(
        _weighted_sum(np.abs(u - v) ** o.get("p", 2.0), o.get("w")), 1.0 / o.get("p", 2.0)),
    "chebyshev": lambda u, v, o, data: _chebyshev(u, v, o.get("w")),
    "cosine": lambda u, v, o, data: _cosine_like(u, v, o.get("w"), False),
    "correlation": lambda u, v, o, data: _cosine_like(u, v, o.get("w"), True),
    "braycurtis": lambda u, v, o, data: _weighted_sum(np.abs(u - v), o.get("w")) / _weighted_sum(np.abs(u + v), o.get("w")),
    "canberra": lambda u, v, o, data: _canberra(u, v, o.get("w")),
    "seuclidean": lambda u, v, o, data: _safe_root(np.sum((u - v) ** 2 / _variances(o, data), axis=-1)),
    "mahalanobis": lambda u, v, o, data: _safe_root(np.einsum("...i,ij,...j->...", u - v, _inverse_covariance(o, data),
                                                              u - v)),
    "jensenshannon": lambda u, v, o, data: _jensenshannon(u, v, o.get("base")),
}
_PIECEWISE_CONSTANT = {"hamming", "jaccard", "dice", "rogerstanimoto", "russellrao", "sokalsneath", "yule",
                       "kulczynski1", "sokalmichener"}


def _variances(options, data):
    return options["V"] if options.get("V") is not None else np.var(data(), axis=0, ddof=1)


def _inverse_covariance(options, data):
    if options.get("VI") is not None:
        return options["VI"]
    x = data()
    centered = x - np.mean(x, axis=0)
    return np.linalg.inv(centered.T @ centered / (np.shape(stop_gradient(x))[0] - 1)).T


def _canonical(metric):
    info = _distance()._METRIC_ALIAS.get(metric.lower()) if isinstance(metric, str) else None
    return metric if info is None else info.canonical_name


def _as_array(value):
    """A plain list or tuple as an array (SciPy accepts them); traced values as they are."""
    return np.asarray(value) if isinstance(value, (list, tuple)) else value


def _plain(value):
    return stop_gradient(value) if isinstance(value, Traced) else value


def _pairwise(name, u, v, metric, kwargs, data, exact):
    """The distances from the differentiable operations, with SciPy's `exact` values."""
    if callable(metric):
        return None
    canonical = _canonical(metric)
    if canonical in _PIECEWISE_CONSTANT:
        return exact  # no gradient: piecewise constant
    formula = _METRICS.get(canonical)
    if formula is None:
        raise NotImplementedError(f"pullback.scipy.spatial.distance.{name}: metric {metric!r} is not differentiable "
                                  f"here; the differentiable metrics are {', '.join(sorted(_METRICS))}.")
    d = formula(u, v, kwargs, data)
    return d + stop_gradient(exact - d)  # SciPy's value to the last bit; the derivative is the formula's


def cdist(XA, XB, metric="euclidean", *, out=None, **kwargs):
    """`scipy.spatial.distance.cdist`, differentiable in `XA`, `XB` and the metric's arrays (`w`, `V`, `VI`).

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda b: np.sum(cdist(np.zeros((2, 1)), b, "sqeuclidean")), np.array([[1.0], [2.0]]))[0]
    array([[4.],
           [8.]])
    """
    distance = _distance()
    if not _any_tracked(XA, XB, *kwargs.values()):
        _refuse_out_in_jit("cdist", out, XA, XB, kwargs)
        return distance.cdist(XA, XB, metric, out=out, **kwargs)
    if out is not None:
        raise TypeError("pullback.scipy.spatial.distance.cdist: out= is not supported on traced values.")
    XA, XB = _as_array(XA), _as_array(XB)
    exact = distance.cdist(_plain(XA), _plain(XB), metric, **{k: _plain(v) for k, v in kwargs.items()})
    if callable(metric):
        rows = [np.stack([metric(a, b) for b in XB]) for a in XA]
        return np.reshape(np.stack(rows), np.shape(exact)).astype(exact.dtype, copy=False)  # SciPy's float64
    u, v = XA[:, None, :], XB[None, :, :]
    return _pairwise("cdist", u, v, metric, kwargs, lambda: np.concatenate([XA, XB], axis=0), exact)


def pdist(X, metric="euclidean", *, out=None, **kwargs):
    """`scipy.spatial.distance.pdist`, differentiable in `X` and the metric's arrays (`w`, `V`, `VI`).

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda x: pdist(x)[0], np.array([[0.0, 0.0], [3.0, 4.0]]))[0]
    array([[-0.6, -0.8],
           [ 0.6,  0.8]])
    """
    distance = _distance()
    if not _any_tracked(X, *kwargs.values()):
        _refuse_out_in_jit("pdist", out, X, kwargs)
        return distance.pdist(X, metric, out=out, **kwargs)
    if out is not None:
        raise TypeError("pullback.scipy.spatial.distance.pdist: out= is not supported on traced values.")
    X = _as_array(X)
    exact = distance.pdist(_plain(X), metric, **{k: _plain(v) for k, v in kwargs.items()})
    m = np.shape(stop_gradient(X))[0]
    first, second = np.triu_indices(m, 1)
    if callable(metric):
        if len(first) == 0:
            return exact
        return np.stack([metric(X[i], X[j]) for i, j in zip(first, second)]).astype(exact.dtype, copy=False)
    return _pairwise("pdist", X[first], X[second], metric, kwargs, lambda: X, exact)


def squareform(X, force="no", checks=True):
    """`scipy.spatial.distance.squareform`, differentiable both ways (condensed vector <-> square matrix).

    A matrix's derivative flows from its upper triangle, the entries the vector holds.

    >>> import numpy as np, pullback as pb
    >>> pb.gradient(lambda v: squareform(v)[0, 1] + squareform(v)[1, 0], np.array([1.0]))[0]
    array([2.])
    """
    distance = _distance()
    if not _any_tracked(X):
        return distance.squareform(X, force, checks)
    exact = distance.squareform(stop_gradient(X), force, checks)  # SciPy's checks, shapes and messages
    if np.ndim(exact) == 1:  # matrix -> vector
        n = np.shape(stop_gradient(X))[0]
        return X[np.triu_indices(n, 1)]
    n = np.shape(exact)[0]
    index = np.zeros((n, n), dtype=np.intp)
    first, second = np.triu_indices(n, 1)
    index[first, second] = index[second, first] = np.arange(1, len(first) + 1)
    padded = np.concatenate([np.zeros(1, dtype=np.result_type(stop_gradient(X))), X])
    return padded[index]


_NOTE = "Call pullback.scipy.spatial.distance.{} (SciPy's own converts its input with np.asarray). "
_METRIC_NOTE = ("Metrics " + ", ".join(sorted(_METRICS)) + " and callables; boolean metrics (hamming, jaccard, ...) have "
                "no gradient. Subgradient 0 where a distance has a kink (e.g. euclidean at distance 0).")
describe(cdist, "XA, XB, w, V, VI", _NOTE.format("cdist") + _METRIC_NOTE, kind="composite",
         name="scipy.spatial.distance.cdist")
describe(pdist, "X, w, V, VI", _NOTE.format("pdist") + _METRIC_NOTE, kind="composite",
         name="scipy.spatial.distance.pdist")
describe(squareform, "X", _NOTE.format("squareform") + "Both directions; from a matrix, the upper triangle gets the "
         "gradient.", kind="composite", name="scipy.spatial.distance.squareform")
