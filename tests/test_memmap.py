"""np.memmap (what np.load(..., mmap_mode=...) gives) computes as an ndarray of its memory, so pullback
differentiates it as one: as an argument, as a constant beside traced values, in lists given to NumPy
functions, and as a tangent or cotangent. Its views keep its type, which a tape must not mistake for
a value that carries no gradient."""

import os

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient

X = np.array([[0.3, -0.7, 1.1], [0.2, 0.5, -0.4]])
W = np.array([1.5, -0.5, 2.0])

LOSSES = {
    "ufunc": lambda a: np.sum(np.sin(a)),
    "views": lambda a: np.sum(a.T[1:] * a[0, :2, None]) + np.sum(a.reshape(-1)[::2] ** 2),
    "joined": lambda a: np.sum(np.concatenate([a, a ** 2], axis=1) * np.arange(12.0).reshape(2, 6)),
    "product": lambda a: np.sum((a @ a.T) ** 2),
    "indexing": lambda a: a[1, 2] * a[0, 0] + np.sum(a[[0, 1], [1, 2]]),
}


@pytest.fixture
def loaded(tmp_path):
    def load(array, mode="r"):
        path = os.path.join(tmp_path, f"a{len(os.listdir(tmp_path))}.npy")
        np.save(path, array)
        return np.load(path, mmap_mode=mode)
    return load


@pytest.mark.parametrize("name", LOSSES)
def test_a_memmap_argument_is_differentiated_as_its_array(name, loaded):
    f, m = LOSSES[name], loaded(X)
    assert type(m) is np.memmap and type(m.T) is np.memmap  # views keep the type
    value, (g,) = pb.withgradient(f, m)
    assert value == f(X) and type(g) is np.ndarray
    np.testing.assert_allclose(g, numerical_gradient(f, X)[0], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(pb.jvp(f, (m,), (np.ones_like(X),))[1], np.sum(g), rtol=1e-12)
    np.testing.assert_allclose(pb.hessian(f, m), pb.hessian(f, X), rtol=1e-12)
    np.testing.assert_array_equal(m, X)  # the file is untouched


@pytest.mark.parametrize("name", LOSSES)
def test_a_memmap_constant_beside_traced_values(name, loaded):
    f, m = LOSSES[name], loaded(X)
    (g,) = pb.gradient(lambda w: f(m * w), W)
    np.testing.assert_allclose(g, numerical_gradient(lambda w: f(X * w), W)[0], rtol=1e-7, atol=1e-9)
    (g,) = pb.gradient(lambda w: np.sum(np.stack([m[0], w]) ** 2) + np.sum(np.where(m[1] > 0, w, m[0])), W)
    np.testing.assert_allclose(g, 2 * W + (X[1] > 0))


def test_memmap_tangents_and_cotangents(loaded):
    t = loaded(np.ones(3))
    x = np.array([0.3, -0.7, 1.1])
    np.testing.assert_allclose(pb.jvp(np.sin, (x,), (t,))[1], np.cos(x))
    np.testing.assert_allclose(pb.vjp(np.sin, x)[1](t)[0], np.cos(x))


def test_other_array_subclasses_are_still_refused(loaded):
    with pytest.raises(TypeError, match="numpy.ma.MaskedArray, a NumPy array subclass"):
        pb.gradient(lambda a: np.sum(a), np.ma.array(X, mask=X > 1))
    with pytest.raises(TypeError, match="An array of type numpy.matrix met a value"):
        pb.gradient(lambda w: np.sum(w * np.matrix(X)), W)
    with pytest.raises(pb.JitError, match="is a memmap, a subclass of numpy.ndarray"):  # a replay keeps no subclass
        pb.jit(lambda a: np.sum(a))(loaded(X))
