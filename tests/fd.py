"""Float64 central differences: the independent reference every rule is checked against."""

import numpy as np

import pullback as pb


def numerical_gradient(f, args, k, eps=1e-6):
    """d f(*args) / d args[k] by central differences, computed in float64 on copies."""
    args = [np.array(a, dtype=np.float64) if _is_float(a) else a for a in args]
    x = args[k]
    grad = np.zeros(np.shape(x))
    flat = np.reshape(x, -1) if np.ndim(x) else None
    for i in range(int(np.size(x))):
        def at(delta):
            moved = list(args)
            if flat is None:
                moved[k] = x + delta
            else:
                y = flat.copy()
                y[i] += delta
                moved[k] = y.reshape(np.shape(x))
            return float(f(*moved))

        value = (at(eps) - at(-eps)) / (2 * eps)
        if grad.ndim:
            grad.reshape(-1)[i] = value
        else:
            grad = np.array(value)
    return grad


def _is_float(a):
    return isinstance(a, float) or (isinstance(a, (np.ndarray, np.generic)) and np.asarray(a).dtype.kind == "f")


def assert_gradient(f, *args, rtol=1e-5, atol=1e-7, eps=1e-6):
    """Check `pb.gradient(f, *args)` against central differences for every float argument.

    Also checks that each gradient has its argument's shape and dtype, and that
    non-float arguments get `None`.
    """
    grads = pb.gradient(f, *args)
    assert len(grads) == len(args)
    for k, (a, g) in enumerate(zip(args, grads)):
        if not _is_float(a):
            assert g is None, f"argument {k} is not differentiable but got {g!r}"
            continue
        expected = numerical_gradient(f, args, k, eps)
        if g is None:
            np.testing.assert_allclose(expected, 0.0, atol=max(atol, 1e-6), err_msg=f"argument {k}: got None")
            continue
        assert np.shape(g) == np.shape(a), f"argument {k}: gradient shape {np.shape(g)} != {np.shape(a)}"
        if isinstance(a, np.ndarray):
            assert isinstance(g, np.ndarray) and g.dtype == a.dtype, f"argument {k}: dtype {getattr(g, 'dtype', type(g))} != {a.dtype}"
        np.testing.assert_allclose(g, expected, rtol=rtol, atol=atol, err_msg=f"argument {k}")
    return grads


def tolerance(dtype, float64=(1e-5, 1e-7), float32=(3e-3, 3e-4)):
    """`rtol`/`atol` keyword arguments for comparing a gradient computed in `dtype`."""
    rtol, atol = float64 if dtype == np.float64 else float32
    return {"rtol": rtol, "atol": atol}


def project(y, seed=0):
    """A fixed random linear functional: any output (or tuple or list of outputs) becomes a
    scalar loss that sees every element."""
    if isinstance(y, (tuple, list)):
        return sum(project(part, seed + k) for k, part in enumerate(y))
    return np.sum(y * np.random.default_rng(seed).normal(size=np.shape(y)))
