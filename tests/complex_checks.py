"""The check every complex-capable rule goes through: derivatives against float64 central differences
in both the real and the imaginary direction of every complex input element.

Convention: for a real loss L of z = x + iy the gradient is dL/dx - i dL/dy, so
    dL/dx =  Re(gradient),  dL/dy = -Im(gradient).
A complex-valued `fn` is checked through the real loss Re(sum(w * fn(...))) with fixed random
complex weights w (which sees every real and imaginary part of the output); that loss's
gradient is also what `pb.pullback(fn)` must give for the cotangent w. Forward mode is checked
against the directional central difference of `fn` itself along a random (complex) direction.
"""

import numpy as np

import pullback as pb


def _as64(a):
    a = np.asarray(a)
    if a.dtype.kind == "c":
        return a.astype(np.complex128)
    if a.dtype.kind == "f":
        return a.astype(np.float64)
    return a


def _weights(y, seed):
    rng = np.random.default_rng(seed)
    shape = np.shape(y)
    if np.iscomplexobj(y):
        return rng.normal(size=shape) + 1j * rng.normal(size=shape)
    return rng.normal(size=shape)


def _loss_of(fn, w):
    def loss(*args):
        return np.real(np.sum(w * fn(*args)))
    return loss


def _numeric(loss, args, k, h):
    """Central differences of `loss` in argument k: (dL/dx, dL/dy) per element (dL/dy None for a real one)."""
    x = _as64(args[k])
    scalar = np.ndim(x) == 0 and not isinstance(args[k], np.ndarray)
    dx = np.zeros(np.shape(x))
    dy = np.zeros(np.shape(x)) if np.iscomplexobj(x) else None
    flat = np.array(x, dtype=x.dtype).reshape(-1)
    for i in range(flat.size):
        for step, out in ((h, dx), (1j * h, dy)):
            if out is None:
                continue
            values = []
            for sign in (1, -1):
                moved = flat.copy()
                moved[i] = moved[i] + sign * step
                new = moved.reshape(np.shape(x))
                new = new[()] if scalar else new
                if scalar and type(args[k]) in (float, complex):
                    new = type(args[k])(new)
                call = list(args)
                call[k] = new
                values.append(float(loss(*[_as64(a) if j != k and isinstance(a, np.ndarray) else a
                                            for j, a in enumerate(call)])))
            out.reshape(-1)[i] = (values[0] - values[1]) / (2 * h)
    return dx, dy


def check_complex(fn, *args, argnums=None, h=1e-6, rtol=1e-5, atol=1e-7, seed=0, forward=True):
    """Check fn's reverse and forward derivatives at `args` against central differences.

    Every float or complex argument in `argnums` (default: all) is checked, each complex
    element in the real and in the imaginary direction. Returns the gradients of the loss.
    """
    y = fn(*args)
    w = _weights(y, seed)
    loss = _loss_of(fn, w)
    argnums = [k for k in range(len(args)) if np.asarray(args[k]).dtype.kind in "fc"] if argnums is None else argnums
    grads = pb.grad(loss, argnums=tuple(argnums))(*args)
    y_traced, back = pb.pullback(fn, *args)
    np.testing.assert_allclose(y_traced, y, rtol=1e-12, atol=0)
    assert np.asarray(y_traced).dtype == np.asarray(y).dtype
    pulled = back(np.asarray(w, dtype=np.result_type(y, w)) if np.iscomplexobj(y) else w)
    for k, g in zip(argnums, grads):
        dx, dy = _numeric(loss, args, k, h)
        if g is None:
            g = np.zeros_like(args[k])
        assert np.shape(g) == np.shape(args[k])
        if np.iscomplexobj(args[k]):
            assert np.iscomplexobj(g), f"argument {k} is complex but its gradient is {np.asarray(g).dtype}"
            assert np.asarray(g).dtype == np.asarray(args[k]).dtype or type(args[k]) is complex
        else:
            assert not np.iscomplexobj(g), f"argument {k} is real but its gradient is complex"
        np.testing.assert_allclose(np.real(g), dx, rtol=rtol, atol=atol, err_msg=f"d/dRe of argument {k}")
        if dy is not None:
            np.testing.assert_allclose(-np.imag(g), dy, rtol=rtol, atol=atol, err_msg=f"d/dIm of argument {k}")
        p = pulled[k]
        np.testing.assert_allclose(np.zeros(np.shape(g)) if p is None else p, g, rtol=1e-9, atol=1e-12)
    if forward:
        _check_forward(fn, args, argnums, h, rtol, atol, seed)
    return grads


def _check_forward(fn, args, argnums, h, rtol, atol, seed):
    rng = np.random.default_rng(seed + 1)
    tangents = []
    for k, a in enumerate(args):
        if k not in argnums:
            tangents.append(None)
            continue
        v = rng.normal(size=np.shape(a))
        if np.iscomplexobj(a):
            v = v + 1j * rng.normal(size=np.shape(a))
        v = v if isinstance(a, np.ndarray) else type(a)(v) if type(a) in (float, complex) else np.asarray(a).dtype.type(v)
        tangents.append(np.asarray(v, dtype=np.asarray(a).dtype) if isinstance(a, np.ndarray) else v)
    _, y_dot = pb.jvp(fn, args, tangents)

    def moved(sign):
        return fn(*[_as64(a) + sign * h * np.asarray(t) if t is not None else a for a, t in zip(args, tangents)])

    numeric = (np.asarray(moved(1), dtype=complex) - np.asarray(moved(-1), dtype=complex)) / (2 * h)
    y = fn(*args)
    got = np.zeros(np.shape(y)) if y_dot is None else y_dot
    if not np.iscomplexobj(y):
        assert not np.iscomplexobj(got), "the tangent of a real output is complex"
    np.testing.assert_allclose(got, numeric, rtol=rtol, atol=atol * 10, err_msg="forward mode")
