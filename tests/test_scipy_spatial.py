"""pullback.scipy.spatial.distance: cdist, pdist and squareform give SciPy's values on traced
inputs, with derivatives (both modes, and second order) that agree with central differences;
the subgradient 0 at a kink; no gradient for boolean metrics; clear errors otherwise."""

import numpy as np
import pytest

import pullback as pb
from pullback.testing import check_transpose
from rule_checks import gradcheck

D = pytest.importorskip("scipy.spatial.distance")
from pullback.scipy.spatial import distance  # noqa: E402

rng = np.random.default_rng(0)
XA, XB, W = rng.uniform(0.1, 1, (4, 3)), rng.uniform(0.1, 1, (5, 3)), rng.uniform(0.5, 1.5, 3)
METRICS = [("euclidean", {}), ("sqeuclidean", {}), ("cityblock", {}), ("minkowski", {"p": 3}), ("chebyshev", {}),
           ("cosine", {}), ("correlation", {}), ("braycurtis", {}), ("canberra", {}), ("seuclidean", {}),
           ("seuclidean", {"V": W}), ("mahalanobis", {}), ("jensenshannon", {}), ("euclidean", {"w": W}),
           ("minkowski", {"p": 1.5, "w": W}), ("cosine", {"w": W}), ("e", {}), ("sqe", {})]


def both_modes(f, *args):
    gradcheck(f, *args, rtol=1e-6, atol=1e-9)
    result = check_transpose(f, *args, rtol=1e-10, atol=1e-13, seed=1)
    assert result and result.scale > 0, result


@pytest.mark.parametrize("metric, options", METRICS, ids=[f"{m}-{sorted(o)}" for m, o in METRICS])
def test_cdist_and_pdist(metric, options):
    np.testing.assert_array_equal(pb.pullback(lambda a, b: distance.cdist(a, b, metric, **options), XA, XB)[0],
                                  D.cdist(XA, XB, metric, **options))
    np.testing.assert_array_equal(pb.pullback(lambda x: distance.pdist(x, metric, **options), XB)[0],
                                  D.pdist(XB, metric, **options))
    both_modes(lambda a, b: distance.cdist(a, b, metric, **options), XA, XB)
    both_modes(lambda x: distance.pdist(x, metric=metric, **options), XB)
    for key in ("w", "V"):
        if key in options:
            both_modes(lambda a, v: distance.cdist(a, XB, metric, **{**options, key: v}), XA, options[key])


def test_second_order_float32_and_odd_shapes():
    gradcheck(lambda x: pb.gradient(lambda y: np.sum(distance.pdist(y) ** 3), x)[0], XA, rtol=1e-5)
    g = pb.gradient(lambda a: np.sum(distance.cdist(a, XB.astype(np.float32))), XA.astype(np.float32))[0]
    assert g.dtype == np.float32
    one = XA[:1]
    assert pb.pullback(lambda x: distance.pdist(x), one)[0].shape == (0,)
    both_modes(lambda a: distance.cdist(a, XB[:, :1], "cityblock"), XA[:, :1])
    both_modes(lambda a: distance.cdist(a, XB.tolist(), metric="sqeuclidean"), XA)  # a plain list, as SciPy accepts


def test_zero_distance_has_the_subgradient_zero():
    x = np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 0.0]])
    g = pb.gradient(lambda x: np.sum(distance.pdist(x)), x)[0]
    direction = x[0] / np.linalg.norm(x[0])
    np.testing.assert_allclose(g, [direction, direction, -2 * direction])  # the coincident pair adds nothing
    assert np.all(np.isfinite(pb.gradient(lambda x: np.sum(distance.pdist(x, "minkowski", p=3)), x)[0]))


def test_boolean_metrics_callables_and_refusals():
    g = pb.gradient(lambda a: np.sum(distance.cdist(a, XB, "hamming") * 0.0 + a[0, 0]), XA)[0]
    assert g[0, 0] == 20.0 and np.count_nonzero(g) == 1  # a[0, 0] in each of the 4 x 5 entries; hamming adds none
    both_modes(lambda a, b: distance.cdist(a, b, lambda u, v: np.sum((u - v) ** 4)), XA, XB)
    both_modes(lambda x: distance.pdist(x, lambda u, v: np.sum(np.abs(u - v) ** 3)), XA)
    with pytest.raises(TypeError, match="out="):
        pb.gradient(lambda a: np.sum(distance.cdist(a, XB, out=np.empty((4, 5)))), XA)
    with pytest.raises(ValueError, match="Unknown Distance Metric"):
        pb.gradient(lambda a: np.sum(distance.cdist(a, XB, "nope")), XA)


def test_squareform_both_ways():
    v = rng.normal(size=6)
    np.testing.assert_array_equal(pb.pullback(distance.squareform, v)[0], D.squareform(v))
    both_modes(distance.squareform, v)
    m = D.squareform(np.abs(v))
    np.testing.assert_array_equal(pb.pullback(lambda m: distance.squareform(m), m)[0], D.squareform(m))
    g = pb.gradient(lambda m: np.sum(distance.squareform(m, force="tovector") * np.arange(6.0)), m)[0]
    np.testing.assert_array_equal(g, np.triu(D.squareform(np.arange(6.0))))  # the upper triangle gets the gradient
    both_modes(lambda m: distance.squareform(m, checks=False), rng.normal(size=(4, 4)))
    with pytest.raises(ValueError):
        pb.gradient(lambda m: np.sum(distance.squareform(m)), rng.normal(size=(3, 3)))  # SciPy's check: not symmetric
    assert pb.pullback(distance.squareform, np.zeros(0))[0].shape == (1, 1)
