"""What the tests of the NumPy-coverage rules share: a case runs against central differences in
float64 (both modes, every element) and against NumPy's value; in float32 the value, the tangent
and the gradient keep NumPy's dtypes."""

import numpy as np

import pullback as pb
from rule_checks import check_against_numpy


def float_outputs(y):
    """The float arrays of an output (a tuple's float parts), in order."""
    parts = y if isinstance(y, tuple) else (y,)
    return [p for p in parts if np.result_type(pb.stop_gradient(p)).kind == "f"]


def loss(f):
    """A scalar that sees every float element of f's output, each with its own weight."""
    def scalar(*args):
        total = 0.0
        for k, part in enumerate(float_outputs(f(*args))):
            total = total + np.sum(part * np.random.default_rng(k).normal(size=np.shape(part)))
        return total

    return scalar


def run_case(f, *args):
    """f against central differences (float64) and against plain NumPy."""
    check_against_numpy(f, *args)


def run_float32(f, *args):
    """With float32 inputs: the traced value has NumPy's dtype, the gradient and the tangent are float32."""
    low = tuple(a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args)
    want = f(*low)
    got = pb.pullback(f, *low)[0]
    for w, g in zip(float_outputs(want), float_outputs(got)):
        assert np.result_type(pb.stop_gradient(g)) == np.result_type(w)
        np.testing.assert_allclose(pb.stop_gradient(g), w, rtol=1e-4, atol=1e-5)
    grads = pb.gradient(loss(f), *low)
    for a, g in zip(low, grads):
        if isinstance(a, np.ndarray) and a.dtype == np.float32 and g is not None:
            assert g.dtype == np.float32
    tangents = tuple(np.ones_like(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else None for a in low)
    _, t = pb.jvp(f, low, tangents)
    for w, d in zip(float_outputs(want), float_outputs(t) if t is not None else []):
        assert np.result_type(d) == np.result_type(w)
