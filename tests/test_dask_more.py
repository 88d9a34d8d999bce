"""Dask arrays through more of NumPy: new axes, axis tuples, diagonals, tensordot, repeat, pad, prod, integer
indices that repeat or are Dask arrays, and every mode (gradient, jvp, hvp, hessian, jacobian, pb.jit).

Each gradient is compared with the same function differentiated on NumPy arrays, and is checked to be a Dask
array built without computing anything (a Dask callback refuses any compute, and Dask's compute-and-warn
fallback for a NumPy function it lacks is an error).
"""

import warnings

import numpy as np
import pytest

import pullback as pb

da = pytest.importorskip("dask.array")
from dask_checks import NoCompute  # noqa: E402

rng = np.random.default_rng(3)
MATRIX = rng.normal(size=(4, 4))
CUBE = rng.normal(size=(2, 3, 4))
VECTOR = rng.normal(size=4)
WITH_ZEROS = np.array([[1.0, 0.0, 2.0, 0.0], [0.0, 3.0, 0.5, 1.0], [2.0, -2.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]])
WEIGHTS = np.arange(1.0, 5.0)


def chunked(x):
    return da.from_array(x, chunks=2)


# (name, function, NumPy argument): each runs on Dask arrays without pullback, and its gradient must too.
def _putmask_positive_to_zero(x):
    y = x * 1.0
    np.putmask(y, y > 0, 0.0)  # a Dask mask and one value: a lazy select
    return np.sum(y ** 2)


def _putmask_positive_to_cycled_values(x):
    y = x * 1.0
    np.putmask(y, y > 0, x[:3] ** 2)  # several values, cycled by position: a select that never reads the mask
    return np.sum(y * x)


CASES = [
    ("np.putmask", _putmask_positive_to_zero, VECTOR),
    ("np.putmask, cycled values", _putmask_positive_to_cycled_values, VECTOR),
    ("x[None]", lambda x: np.sum(x[None] * WEIGHTS[:, None, None]), MATRIX),
    ("x[:, None, :]", lambda x: np.sum(x[:, None, :] ** 2 * np.arange(3.0)[:, None]), MATRIX),
    ("x[..., None]", lambda x: np.sum(x[..., None] ** 3), CUBE),
    ("x[1, None]", lambda x: np.sum(x[1, None] ** 2), MATRIX),
    ("x[1:, None, ::2]", lambda x: np.sum(x[1:, None, ::2] ** 2), MATRIX),
    ("x[0, ..., None, 1]", lambda x: np.sum(x[0, ..., None, 1] ** 2), CUBE),
    ("x.T[:, :, None] * x[None]", lambda x: np.sum((x.T[:, :, None] * x[None]) ** 2), MATRIX),
    ("moveaxis", lambda x: np.sum(np.moveaxis(x, 0, -1) ** 2 * WEIGHTS[:, None]), CUBE),
    ("moveaxis, several", lambda x: np.sum(np.moveaxis(x, [0, 1], [-1, -2]) ** 2 * np.arange(2.0)), CUBE),
    ("swapaxes", lambda x: np.sum(np.swapaxes(x, 0, 2) ** 3), CUBE),
    ("transpose with axes", lambda x: np.sum(x.transpose(1, 2, 0) ** 3), CUBE),
    ("mean over a tuple of axes", lambda x: np.sum(np.mean(x, axis=(0, 1)) ** 2), CUBE),
    ("sum, tuple axis, keepdims", lambda x: np.sum(np.sum(x, axis=(0, 2), keepdims=True) ** 2), CUBE),
    ("var over a tuple of axes", lambda x: np.sum(np.var(x, axis=(0, 1)) ** 2), CUBE),
    ("std, tuple axis, keepdims, ddof", lambda x: np.sum(np.std(x, axis=(1, 2), keepdims=True, ddof=1)), CUBE),
    ("max over a tuple of axes", lambda x: np.sum(np.max(x, axis=(0, 1)) ** 2), CUBE),
    ("cov", lambda x: np.sum(np.cov(x) ** 2), MATRIX),
    ("cov rowvar=False", lambda x: np.sum(np.cov(x, rowvar=False) * MATRIX), MATRIX),
    ("corrcoef", lambda x: np.sum(np.corrcoef(x) * MATRIX), MATRIX),
    ("tensordot", lambda x: np.sum(np.tensordot(x, x, axes=([1], [0])) ** 2), MATRIX),
    ("tensordot over two axes", lambda x: np.sum(np.tensordot(x, CUBE, axes=([0, 2], [0, 2])) ** 2), CUBE),
    ("diag of a matrix", lambda x: np.sum(np.diag(x) ** 2), MATRIX),
    ("diag of a vector", lambda x: np.sum((np.diag(x, -1) @ np.ones((5, 5))) ** 2), VECTOR),
    ("trace", lambda x: np.trace(x) ** 2, MATRIX),
    ("trace with an offset, 3-D", lambda x: np.sum(np.trace(x, 1, axis1=1, axis2=2) ** 2), CUBE),
    ("einsum ii", lambda x: np.einsum("ii", x) ** 2, MATRIX),
    ("einsum ii->i", lambda x: np.sum(np.einsum("ii->i", x) ** 3), MATRIX),
    ("einsum bii->b", lambda x: np.sum(np.einsum("bii->b", x[:, :3, :3]) ** 2), CUBE),
    ("diagonal", lambda x: np.sum(np.diagonal(x, 1) ** 2), MATRIX),
    ("diagonal of axes 0 and 2", lambda x: np.sum(np.diagonal(x, 0, 0, 2) ** 2), CUBE),
    ("expand_dims", lambda x: np.sum(np.expand_dims(x, (0, 2)) ** 2), VECTOR),
    ("squeeze", lambda x: np.sum(np.squeeze(x[:1]) ** 2), MATRIX),
    ("outer", lambda x: np.sum(np.outer(x, x) * MATRIX), VECTOR),
    ("triu, tril", lambda x: np.sum(np.triu(x, 1) ** 2 + np.tril(x, -1) ** 3), MATRIX),
    ("where, clip", lambda x: np.sum(np.where(x > 0, x ** 2, -x) + np.clip(x, -0.5, 0.5) ** 2), MATRIX),
    ("concatenate, stack", lambda x: np.sum(np.concatenate([x, x ** 2], axis=1) ** 2) + np.sum(np.stack([x, 2 * x], -1).sum(-1) ** 2),
     MATRIX),
    ("matmul with broadcasting", lambda x: np.sum((x @ MATRIX[None]) ** 2 + (CUBE[..., :3] @ x[0]) ** 2), CUBE),
    ("cumsum", lambda x: np.sum(np.cumsum(x, axis=1) ** 2) + np.sum(np.cumsum(x) ** 2), MATRIX),
    ("repeat", lambda x: np.sum(np.repeat(x, 2) ** 2 * np.arange(8.0)), VECTOR),
    ("repeat along an axis", lambda x: np.sum(np.repeat(x, 3, axis=1) ** 2 * np.arange(12.0)), MATRIX),
    ("vdot", lambda x: np.vdot(x, VECTOR) * np.sum(x), VECTOR),
    ("pad", lambda x: np.sum(np.pad(x, 1) ** 2 * np.arange(36.0).reshape(6, 6)), MATRIX),
    ("pad edge, reflect", lambda x: np.sum(np.pad(x, 1, mode="edge") ** 2) + np.sum(np.pad(x, ((1, 0), (0, 2)), mode="reflect") ** 3),
     MATRIX),
    ("prod with zeros", lambda x: np.sum(np.prod(x, axis=1) * WEIGHTS) + np.prod(x[3]), WITH_ZEROS),
    ("maximum with ties", lambda x: np.sum(np.maximum(x, 0.0) ** 2) + np.sum(np.max(x, axis=0)), WITH_ZEROS),
    ("repeated integer indices", lambda x: np.sum(x[[0, 2, 0]] ** 2) + np.sum(x[:, [1, 1, 3]] ** 3), MATRIX),
    ("integer indices with new axes", lambda x: np.sum(x[None, [0, 0, 3], 1:] ** 2 * np.arange(3.0)), MATRIX),
    ("take along an axis", lambda x: np.sum(np.take(x, [0, 2, 2], axis=1) ** 2), MATRIX),
    ("a Dask index from argmax", lambda x: np.ravel(x)[np.argmax(x)] ** 2 + np.sum(x[np.argmax(x[:, 0])] ** 2), MATRIX),
    ("flatten, ravel", lambda x: np.sum(x.flatten() * np.arange(16.0)) + np.sum(np.ravel(x) ** 3), MATRIX),
    # Dask takes x[i, j] with one index array at most: sorting along an axis gathers block by block, each block
    # holding whole lines along the axis (np.sort of a Dask array computes it; under pullback it stays lazy)
    ("sort along an axis", lambda x: np.sum(np.sort(x, axis=0) * np.arange(4.0)[:, None]), MATRIX),
    ("sort along the last axis, 3-D", lambda x: np.sum(np.sort(x, axis=-1) ** 3 * WEIGHTS), CUBE),
    ("percentile of a vector", lambda x: np.percentile(x, 30) ** 2, VECTOR),
    ("median along an axis", lambda x: np.sum(np.median(x, axis=0) * WEIGHTS), MATRIX),
    ("median over a tuple of axes", lambda x: np.sum(np.median(x, axis=(0, 2)) ** 2), CUBE),
    ("quantiles along an axis, keepdims", lambda x: np.sum(np.quantile(x, [0.2, 0.7], axis=1, keepdims=True) ** 2),
     MATRIX),
    ("percentile along an axis, nearest", lambda x: np.sum(np.percentile(x, 40, axis=0, method="nearest") * WEIGHTS),
     MATRIX),
]
IDS = [name for name, _, _ in CASES]


def _numpy_gradient(f, x):
    return pb.gradient(f, x)[0]


@pytest.mark.parametrize("name, f, x", CASES, ids=IDS)
def test_the_gradient_of_a_dask_argument_is_lazy_and_is_the_numpy_gradient(name, f, x):
    want = _numpy_gradient(f, x)
    with NoCompute():
        value, (g,) = pb.withgradient(f, chunked(x))
    assert isinstance(g, da.Array) and g.shape == x.shape and g.dtype == x.dtype
    np.testing.assert_allclose(g.compute(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(value.compute()), f(x), rtol=1e-12)


@pytest.mark.parametrize("name, f, x", CASES, ids=IDS)
def test_jvp_with_dask_primals_and_tangents_is_lazy_and_is_numpys(name, f, x):
    t = np.cos(np.arange(x.size)).reshape(x.shape)
    want = pb.jvp(f, (x,), (t,))[1]
    with NoCompute():
        y, y_dot = pb.jvp(f, (chunked(x),), (chunked(t),))
    assert isinstance(y_dot, da.Array)
    np.testing.assert_allclose(y_dot.compute(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name, f, x", CASES, ids=IDS)
def test_hvp_and_hessian_of_a_dask_argument_are_lazy_and_are_numpys(name, f, x):
    v = np.sin(np.arange(x.size) + 1.0).reshape(x.shape)
    want_hvp, want_hessian = pb.hvp(f, x, v), pb.hessian(f, x)
    with NoCompute():
        h_v = pb.hvp(f, chunked(x), chunked(v))
        h = pb.hessian(f, chunked(x))
    assert isinstance(h_v, da.Array) and isinstance(h, da.Array) and h.shape == x.shape + x.shape
    np.testing.assert_allclose(h_v.compute(), want_hvp, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(h.compute(), want_hessian, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("axis", [0, 1, None])
def test_cumprod_at_zeros_is_lazy_and_is_numpys_to_second_order(axis):
    """cumprod's derivatives at zeros, without counting the zeros (a scan from the end, no division)."""
    def f(x):
        return np.sum(np.prod(x, axis=1) * WEIGHTS) + np.sum(np.cumprod(x, axis=axis) ** 2 * np.cos(x).ravel()[0])

    t = np.sin(np.arange(WITH_ZEROS.size) + 2.0).reshape(WITH_ZEROS.shape)
    with NoCompute():
        h = pb.hessian(f, chunked(WITH_ZEROS))
        (g,) = pb.gradient(f, chunked(WITH_ZEROS))
        _, y_dot = pb.jvp(f, (chunked(WITH_ZEROS),), (chunked(t),))
    assert isinstance(h, da.Array) and isinstance(g, da.Array)
    np.testing.assert_allclose(h.compute(), pb.hessian(f, WITH_ZEROS), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g.compute(), pb.gradient(f, WITH_ZEROS)[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y_dot.compute(), pb.jvp(f, (WITH_ZEROS,), (t,))[1], rtol=1e-12)


def test_the_jacobian_of_a_dask_argument_is_lazy_and_is_numpys():
    def f(x):
        return np.stack([np.trace(x), np.sum(np.cov(x)), np.sum(x[None] ** 2), np.sum(np.mean(x, axis=(0, 1)))])

    with NoCompute():
        (J,) = pb.jacobian(f, chunked(MATRIX))
    assert isinstance(J, da.Array)
    np.testing.assert_allclose(J.compute(), pb.jacobian(f, MATRIX)[0], rtol=1e-10, atol=1e-12)


def test_jit_of_a_gradient_on_dask_arguments():
    def loss(x):
        return np.trace(x) ** 2 + np.sum(np.cov(x)) + np.sum(np.tensordot(x, x, axes=1) ** 2) + np.sum(x[:, None] ** 2)

    step = pb.jit(pb.grad(loss))
    with NoCompute():
        g = step(chunked(MATRIX))
    assert isinstance(g, da.Array)
    np.testing.assert_allclose(g.compute(), pb.grad(loss)(MATRIX), rtol=1e-10)


def test_jit_with_numpy_weights_and_dask_data_runs_as_without_jit():
    # The README's logistic regression: a NumPy parameter meeting Dask data gets a Dask gradient, jitted or not
    # (a call with a Dask argument runs the function untraced: Dask builds its own graph).
    X, y, w = chunked(MATRIX[:, :3]), chunked(np.sign(VECTOR)), np.zeros(3)
    loss = lambda w, X, y: np.mean(np.logaddexp(0.0, -y * (X @ w)))  # noqa: E731
    with NoCompute():
        g = pb.jit(pb.grad(loss))(w, X, y)
    assert isinstance(g, da.Array)
    np.testing.assert_allclose(g.compute(), pb.grad(loss)(w, MATRIX[:, :3], np.sign(VECTOR)), rtol=1e-12)


def test_a_vjp_of_a_dask_argument_can_be_pulled_back_twice():
    def f(x):
        return np.ravel(x)[np.argmax(x)] * np.trace(x) + np.sum(np.diag(x))

    y, back = pb.vjp(f, chunked(MATRIX))
    _, back_numpy = pb.vjp(f, MATRIX)
    for dy in (1.0, -2.5):
        with NoCompute():
            (g,) = back(dy)
        np.testing.assert_allclose(g.compute(), back_numpy(dy)[0], rtol=1e-12)


def test_numpy_arguments_meeting_dask_data_in_these_constructs():
    def f(w, X):
        return np.sum(np.cov(X * w) ** 2) + np.trace(X @ np.diag(w)) + np.sum((X[None] * w) ** 2)

    X = chunked(MATRIX)
    with NoCompute():
        (g,) = pb.gradient(lambda w: f(w, X), VECTOR)
    assert isinstance(g, da.Array)  # Dask data makes the gradient Dask's (its promotion)
    np.testing.assert_allclose(g.compute(), pb.gradient(lambda w: f(w, MATRIX), VECTOR)[0], rtol=1e-10)


def test_a_dask_integer_index_on_any_axis():
    columns = da.from_array(np.array([3, 0, 3]), chunks=2)

    def f(x, columns):
        return np.sum(x[:, columns] ** 2 * WEIGHTS[:, None]) + np.sum(x[1:, columns[0]] ** 3)

    with NoCompute():
        (g,) = pb.gradient(lambda x: f(x, columns), chunked(MATRIX))
    np.testing.assert_allclose(g.compute(), pb.gradient(lambda x: f(x, np.array([3, 0, 3])), MATRIX)[0], rtol=1e-12)


# --- Dask values that decide a result's shape are computed, as NumPy's functions compute them -----------
CONDITION = np.array([False, True, True, False])
COUNTS = np.array([1, 2, 0, 3])


@pytest.mark.parametrize("select", [np.compress, np.extract])
@pytest.mark.parametrize("as_argument", [np.asarray, chunked], ids=["NumPy x", "Dask x"])
def test_compress_and_extract_with_a_dask_condition(as_argument, select):
    f = lambda x, c: np.sum(select(c, x) ** 3)  # noqa: E731
    x, condition = as_argument(VECTOR), chunked(CONDITION)
    value, (g,) = pb.withgradient(lambda x: f(x, condition), x)
    np.testing.assert_allclose(np.asarray(value), np.asarray(f(x, condition)), rtol=1e-15)
    np.testing.assert_allclose(np.asarray(g), pb.gradient(lambda x: f(x, CONDITION), VECTOR)[0], rtol=1e-15)
    _, t = pb.jvp(lambda x: select(condition, x), (VECTOR,), (WEIGHTS,))
    np.testing.assert_array_equal(t, WEIGHTS[CONDITION])


def test_repeat_with_dask_counts():
    f = lambda x, counts: np.sum(np.repeat(x, counts) ** 2 * np.arange(1.0, 7.0))  # noqa: E731
    counts = chunked(COUNTS)
    value, (g,) = pb.withgradient(lambda x: f(x, counts), VECTOR)
    np.testing.assert_allclose(value, f(VECTOR, counts), rtol=1e-15)
    np.testing.assert_allclose(g, pb.gradient(lambda x: f(x, COUNTS), VECTOR)[0], rtol=1e-15)
    _, t = pb.jvp(lambda x: np.repeat(x, counts), (VECTOR,), (WEIGHTS,))
    np.testing.assert_array_equal(t, np.repeat(WEIGHTS, COUNTS))


def test_choose_of_dask_choices_by_a_dask_index_is_lazy():
    index = chunked(np.array([0, 1, 1, 0]))
    f = lambda x, index: np.sum(np.choose(index, [x, 2 * x]) ** 2 * WEIGHTS)  # noqa: E731
    with NoCompute():
        value, (g,) = pb.withgradient(lambda x: f(x, index), chunked(VECTOR))
    np.testing.assert_allclose(value.compute(), f(chunked(VECTOR), index).compute(), rtol=1e-15)
    np.testing.assert_allclose(g.compute(), pb.gradient(lambda x: f(x, np.array([0, 1, 1, 0])), VECTOR)[0], rtol=1e-15)
    (g,) = pb.gradient(lambda x: f(x, index + 2), chunked(VECTOR))  # out of range: Dask's error, when computed
    with pytest.raises(ValueError, match="invalid entry in choice array"):
        g.compute()



def test_choose_of_numpy_choices_by_an_out_of_range_dask_index_raises_choose_s_error():
    index = chunked(np.array([0, 1, 2, 0]))  # 2: out of range for two choices
    f = lambda x: np.sum(np.choose(index, [x, x ** 2]))  # noqa: E731
    with pytest.raises(ValueError, match="invalid entry in choice array"):
        np.asarray(f(VECTOR))  # what NumPy and Dask do
    with pytest.raises(ValueError, match="invalid entry in choice array"):
        np.asarray(pb.withgradient(f, VECTOR).val)


# --- what cannot work lazily is refused, naming the construct and the fix ----------------------------
def test_a_boolean_mask_of_a_dask_matrix_is_refused_naming_the_fix():
    with pytest.raises(TypeError, match=r"x\[index\] for a dask\.array\.core\.Array x needs np\.add\.at.*np\.where.*"
                                        r"index\.compute\(\)"):
        pb.gradient(lambda x: np.sum(x[x > 0] ** 2), chunked(MATRIX))


def test_the_rechunk_primitive_gives_the_gradient_in_the_input_chunks():
    # What x.rechunk(...) of a traced Dask array is to call (pullback.rules.indexing.rechunk): a pure re-layout
    from pullback.rules.indexing import rechunk

    f = lambda x: np.sum(rechunk(x, 4) ** 3)  # noqa: E731
    with NoCompute():
        (g,) = pb.gradient(f, chunked(VECTOR))
    assert g.chunks == ((2, 2),)
    np.testing.assert_allclose(g.compute(), 3.0 * VECTOR ** 2, rtol=1e-12)


def test_rechunk_of_a_traced_dask_array_and_dask_only_methods():
    with NoCompute():
        (g,) = pb.gradient(lambda x: np.sum(x.rechunk(4) ** 2), chunked(VECTOR))
    assert g.chunks == ((2, 2),)  # in the argument's chunks
    np.testing.assert_allclose(g.compute(), 2.0 * VECTOR)
    for method in ("persist", "compute", "map_blocks", "to_delayed"):
        with pytest.raises(TypeError, match=rf"x\.{method} on a Dask array being differentiated.*stop_gradient"):
            pb.gradient(lambda x: np.sum(getattr(x, method)), chunked(VECTOR))



def test_interp_with_dask_knots_computes_them_as_numpy_does():
    xp = da.from_array(np.array([0.0, 1.0, 2.0]), chunks=2)
    fp = da.from_array(np.array([1.0, 3.0, 2.0]), chunks=2)
    x = np.array([0.5, 1.5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # Dask: numpy.interp is not implemented for its arrays
        value, (g,) = pb.withgradient(lambda x: np.sum(np.interp(x, xp, fp)), x)
        assert value == np.sum(np.interp(x, xp, fp))
    np.testing.assert_allclose(g, [2.0, -1.0])  # the slopes of the two segments
