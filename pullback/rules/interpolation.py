"""Rules for piecewise linear interpolation, `np.interp`, in both modes: differentiable in the
points, the knots, the values and the fill values outside."""

import numpy as np

from .._arrays import indexable_by, like_input, values_deciding_shape
from .._extend import primitive, rrule
from .._tangents import Thunk
from .._values import Traced, stop_gradient
from ._register import add_tangents, composite, forward_rule
from .indexing import unindex


@composite(np.interp, args="x, xp, fp, left, right, period", numpy_value=True, notes="""Piecewise linear: at a knot the
      slope of the segment to the right is used. `xp` must be strictly increasing with at least two
      points (with `period`, any order: it is wrapped and sorted, as NumPy does).""")
def interp(x, xp, fp, left=None, right=None, period=None):
    # knots of another library are computed, as NumPy's interp does (a pb.jit stand-in stays traced)
    xp, fp = (v if isinstance(v, Traced) else values_deciding_shape(v) for v in (xp, fp))
    if np.shape(xp) != np.shape(fp) or np.ndim(xp) != 1 or np.shape(xp)[0] < (1 if period is not None else 2):
        raise ValueError("numpy.interp on tracked values needs 1-D xp and fp of the same length, at least 2 "
                         "(1 with period).")
    if period is not None:
        # NumPy's own steps: wrap x and xp into one period, sort the knots, repeat one past each end
        if period == 0:
            raise ValueError("period must be a non-zero value")
        period, left, right = abs(period), None, None
        x, xp = np.mod(x, period), np.mod(xp, period)
        order = np.argsort(stop_gradient(xp))
        xp, fp = indexable_by(xp, order)[order], indexable_by(fp, order)[order]
        xp = np.concatenate((xp[-1:] - period, xp, xp[0:1] + period))
        fp = np.concatenate((fp[-1:], fp, fp[0:1]))
    return interpolate(x, xp, fp, left, right)


def _interp_segments(x, xp):
    """For each x: its segment j (xp[j] <= x < xp[j + 1], clipped to the ends) and where it lies."""
    plain_x, plain_xp = stop_gradient(x), stop_gradient(xp)
    n = np.shape(plain_xp)[0]
    # the knots as an array of x's library (Dask's searchsorted takes only a Dask array of knots)
    j = np.clip(np.searchsorted(like_input(plain_xp, plain_x), plain_x, side="right") - 1, 0, n - 2)
    below, above = plain_x < plain_xp[0], plain_x > plain_xp[-1]
    return j, below, above, ~(below | above)


@primitive
def interpolate(x, xp, fp, left, right):
    """`np.interp(x, xp, fp, left, right)`, as a primitive differentiable in all five."""
    return np.interp(x, xp, fp, left, right)


@rrule(interpolate)
def _interp_rule(x, xp, fp, left, right):
    y = interpolate(x, xp, fp, left, right)

    def back(g):
        j, below, above, inside = _interp_segments(x, xp)
        n = np.shape(stop_gradient(xp))[0]
        xp_, fp_ = indexable_by(xp, j), indexable_by(fp, j)
        lo_x, hi_x, lo_f, hi_f = xp_[j], xp_[j + 1], fp_[j], fp_[j + 1]
        # Points outside the knots send nothing through a segment: they stand at its start, on a width of 1, so
        # that an infinite x (or a zero-width end segment) gives 0, not 0 * inf = NaN
        width = np.where(inside, hi_x - lo_x, 1.0)
        x_in = np.where(inside, x, lo_x)
        slope = (hi_f - lo_f) / width
        t = (x_in - lo_x) / width
        g_in = np.where(inside, g, 0.0)

        def d_fp():
            total = unindex(g_in * (1.0 - t), j, (n,)) + unindex(g_in * t, j + 1, (n,))
            if left is None:
                total = total + unindex(np.where(below, g, 0.0), np.zeros_like(j), (n,))
            if right is None:
                total = total + unindex(np.where(above, g, 0.0), np.full_like(j, n - 1), (n,))
            return total

        def d_xp():
            weight = g_in * slope / width
            return unindex(weight * (x_in - hi_x), j, (n,)) - unindex(weight * (x_in - lo_x), j + 1, (n,))

        return (
            Thunk(lambda: g_in * slope),
            Thunk(d_xp),
            Thunk(d_fp),
            None if left is None else Thunk(lambda: np.where(below, g, 0.0)),
            None if right is None else Thunk(lambda: np.where(above, g, 0.0)),
        )

    return y, back


@forward_rule(interpolate)
def _interp_frule(primals, tangents):
    (x, xp, fp, left, right), (tx, txp, tfp, tleft, tright) = primals, tangents
    y = interpolate(x, xp, fp, left, right)
    if all(t is None for t in tangents):
        return y, None
    j, below, above, inside = _interp_segments(x, xp)
    n = np.shape(stop_gradient(xp))[0]
    xp, fp, txp, tfp = (None if v is None else indexable_by(v, j) for v in (xp, fp, txp, tfp))
    lo_x, hi_x = xp[j], xp[j + 1]
    width = hi_x - lo_x
    slope = (fp[j + 1] - fp[j]) / width
    t = (x - lo_x) / width
    dot = add_tangents(
        None if tx is None else slope * tx,
        None if tfp is None else (1.0 - t) * tfp[j] + t * tfp[j + 1],
        None if txp is None else -slope * ((1.0 - t) * txp[j] + t * txp[j + 1]),
    )
    dot = None if dot is None else np.where(inside, dot, 0.0)
    outside_left = tleft if left is not None else None if tfp is None else tfp[np.zeros_like(j)]
    outside_right = tright if right is not None else None if tfp is None else tfp[np.full_like(j, n - 1)]
    return y, add_tangents(dot, None if outside_left is None else np.where(below, outside_left, 0.0),
                           None if outside_right is None else np.where(above, outside_right, 0.0))
