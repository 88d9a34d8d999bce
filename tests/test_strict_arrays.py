"""pullback on an array type that refuses every implicit conversion to NumPy (a CPU stand-in for CuPy).

`StrictArray` (tests/strict_arrays.py) computes with NumPy underneath but, like a GPU array,
raises on `np.asarray(s)` and on any mix with a NumPy array. Every check runs the same
computation on NumPy arrays and on StrictArrays: the gradients agree, and every gradient leaf
is a StrictArray, so no rule or engine site converted the arrays to NumPy or built NumPy arrays
where the input's type was needed.
"""

import numpy as np
import pytest

import pullback as pb
from strict_arrays import StrictArray, strict

try:  # the registry-driven cases of the forward-mode coverage tests
    from test_forward_coverage import CASES, UFUNC_DOMAINS
    CASES_ERROR = None
except (ImportError, AttributeError) as error:
    CASES, UFUNC_DOMAINS, CASES_ERROR = {}, {}, error

rng = np.random.default_rng(0)


def to_strict(tree):
    """Every float NumPy array in `tree` as a StrictArray (other leaves as they are)."""
    return pb.tree.fmap(lambda v: strict(v) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v, tree)


def plain(x):
    """A StrictArray's values as NumPy's (the explicit transfer)."""
    return x.get() if type(x) is StrictArray else x


def assert_same_gradients(got, want, rtol=1e-10, atol=1e-12):
    """`got` (from StrictArrays) has StrictArray leaves where `want` (from NumPy) has arrays, with the same values."""
    got_leaves = pb.tree.leaves_with_path(got)
    want_leaves = pb.tree.leaves_with_path(want)
    assert [p for p, _ in got_leaves] == [p for p, _ in want_leaves]
    for (path, g), (_, w) in zip(got_leaves, want_leaves):
        if w is None:
            assert g is None, path
            continue
        if isinstance(w, np.ndarray) and w.dtype.kind == "f":
            assert type(g) is StrictArray, f"{path}: the gradient is a {type(g).__name__}, not a StrictArray"
        if isinstance(w, (np.ndarray, np.generic, float)):
            np.testing.assert_allclose(plain(g), w, rtol=rtol, atol=atol, err_msg=str(path))
        else:  # a model's other leaves (activation functions, names)
            assert g is w or g == w, path


# --- the engine ---------------------------------------------------------------------------------
def chain(x, w):
    h = np.tanh(x @ w) + np.sin(x[:, :1]) ** 2
    h = h / np.sqrt(np.sum(h * h, axis=0, keepdims=True) + 1.0)
    h = np.where(h > 0, h, 0.1 * h)
    return np.mean(h ** 2) + np.max(h) + np.sum(h[::2, 1:]) + np.sum(np.exp(-np.abs(w)))


def test_the_engine_on_strict_arrays():
    x, w = rng.normal(size=(6, 3)), rng.normal(size=(3, 2))
    val, grads = pb.withgradient(chain, strict(x), strict(w))
    want_val, want = pb.withgradient(chain, x, w)
    assert type(val) is StrictArray and val.shape == ()
    np.testing.assert_allclose(plain(val), want_val, rtol=1e-12)
    assert_same_gradients(grads, want)
    pb.testing.assert_gradient(chain, x, w)


def test_pullback_jvp_and_jacobian_on_strict_arrays():
    x, t, dy = rng.normal(size=(4, 3)), rng.normal(size=(4, 3)), rng.normal(size=(4,))
    f = lambda x: np.sum(np.tanh(x) * x, axis=1)  # noqa: E731
    y, back = pb.pullback(f, strict(x))
    assert type(y) is StrictArray
    assert_same_gradients(back(strict(dy)), pb.pullback(f, x)[1](dy))
    y, y_dot = pb.jvp(f, (strict(x),), (strict(t),))
    assert type(y_dot) is StrictArray
    np.testing.assert_allclose(plain(y_dot), pb.jvp(f, (x,), (t,))[1], rtol=1e-12)


def test_float32_strict_arrays_keep_their_dtype():
    x = rng.normal(size=5).astype(np.float32)
    (g,) = pb.gradient(lambda x: np.sum(np.tanh(x) * 2.0), strict(x))
    assert type(g) is StrictArray and g.dtype == np.float32


# --- the rules, driven by the registry ----------------------------------------------------------
def test_the_registry_cases_are_available():
    assert CASES_ERROR is None, f"tests/test_forward_coverage.py cannot be imported: {CASES_ERROR!r}"
    assert len(CASES) > 50


# Cases whose function is SciPy's own Python code (scipy.special's non-ufunc functions such as polygamma,
# scipy.linalg): it converts its inputs to NumPy arrays, as it would a CuPy array (CuPy users call
# cupyx.scipy instead). And the series of np.i0's derivative, which converts its input (np.asarray).
def numpy_only(label):
    if label.startswith(("special.", "scipy_")) or label in {"linalg.triangular_solve_rule", "linalg.expm_rule", "linalg._lu_rule"}:
        return "SciPy's Python-level functions convert their inputs to NumPy arrays"
    if label == "ufuncs._add_at_rule":
        return "np.add.at writes in place into NumPy arrays; the array API has no such write"
    if label.startswith("pointwise.") and ("i0" in label or "i1" in label):
        return "pullback.rules.pointwise.bessel_i1 converts its input with np.asarray"
    return None


def call_cases():
    for label, cases in CASES.items():
        for k, (f, make) in enumerate(cases):
            yield pytest.param(label, f, make, id=f"{label}-{k}")


def real_output(y):
    return isinstance(y, np.ndarray) and y.dtype.kind == "f" or isinstance(y, float)


@pytest.mark.parametrize("label, f, make", call_cases())
def test_every_rule_case_on_strict_arrays(label, f, make):
    try:
        check_rule_case(f, make)
    except TypeError as error:
        if numpy_only(label) is None:
            raise
        pytest.xfail(f"{numpy_only(label)}: {error}")


def check_rule_case(f, make):
    args = make(np.random.default_rng(3))
    y = f(*args)
    if not real_output(y):
        pytest.skip("complex or structured output (see the complex tests)")
    tangents = tuple(np.random.default_rng(5).normal(size=np.shape(a)) if np.result_type(a).kind == "f" else None
                     for a in args)
    try:
        _, want_dot = pb.jvp(f, args, tangents)
    except NotImplementedError:  # an argument without a derivative (an order, a degree): reverse mode below
        want_dot = NotImplemented
    if want_dot is not NotImplemented:
        _, y_dot = pb.jvp(f, to_strict(args), to_strict(tangents))
        if want_dot is None:  # a piecewise-constant function: no tangent either way
            assert y_dot is None
        else:
            assert type(y_dot) is StrictArray, "forward mode left the StrictArray type"
            np.testing.assert_allclose(plain(y_dot), want_dot, rtol=1e-9, atol=1e-10)
    dy = np.random.default_rng(4).normal(size=np.shape(y))
    try:
        want = pb.pullback(f, *args)[1](dy)
    except NotImplementedError as error:  # a forward-mode case with an argument that has no derivative
        pytest.skip(f"not differentiable in every argument with NumPy arrays either: {error}")
    y_strict, back = pb.pullback(f, *to_strict(args))
    assert type(y_strict) is StrictArray
    np.testing.assert_allclose(plain(y_strict), y, rtol=1e-10, atol=1e-12)
    assert_same_gradients(back(strict(dy)), want, rtol=1e-9, atol=1e-10)


def ufunc_cases():
    from pullback._registry import UFUNC_RULES

    for ufunc in sorted(UFUNC_RULES, key=lambda u: u.__name__):
        if ufunc.nout != 1 or ufunc.nin > 2 or ufunc.signature is not None or ufunc is np.ldexp:
            continue  # products (matmul, vecdot, ...) have cases of their own; ldexp takes integer exponents
        if getattr(np, ufunc.__name__, None) is not ufunc:
            continue  # scipy.special's ufuncs: their own tests
        yield pytest.param(ufunc, id=ufunc.__name__)


@pytest.mark.parametrize("ufunc", ufunc_cases())
def test_every_numpy_ufunc_rule_on_strict_arrays(ufunc):
    low, high = UFUNC_DOMAINS.get(ufunc.__name__, (-0.9, 0.9))
    args = tuple(np.random.default_rng(5).uniform(low, high, size=(2, 3)) for _ in range(ufunc.nin))
    f = lambda *a: np.sum(ufunc(*a) * np.arange(6.0).reshape(2, 3))  # noqa: E731
    g = lambda *a: np.sum(ufunc(*a) * strict(np.arange(6.0).reshape(2, 3)))  # noqa: E731
    assert_same_gradients(pb.gradient(g, *to_strict(args)), pb.gradient(f, *args))


# --- pb.nn and pb.optim -------------------------------------------------------------------------
def model_cases():
    x_img = rng.normal(size=(2, 6, 6, 2))
    f64 = {"dtype": np.float64}
    return {
        "Dense": (pb.nn.Dense(3, 2, pb.nn.tanh, rng=0, **f64), rng.normal(size=(5, 3))),
        "Conv": (pb.nn.Conv(2, 3, 3, pb.nn.relu, padding=1, rng=1, **f64), x_img),
        "BatchNorm": (pb.nn.trainmode(pb.nn.BatchNorm(2, **f64)), x_img),
        "Chain": (pb.nn.Chain(pb.nn.Conv(2, 2, 3, pb.nn.tanh, rng=2, **f64), pb.nn.BatchNorm(2, **f64), pb.nn.Flatten(),
                              pb.nn.Dense(32, 3, rng=3, **f64)), x_img),
    }


@pytest.mark.parametrize("name", ["Dense", "Conv", "BatchNorm", "Chain"])
def test_nn_layers_on_strict_arrays(name):
    model, x = model_cases()[name]
    r = np.random.default_rng(6).normal(size=np.shape(model(x)))
    want = pb.gradient(lambda m, x: np.sum(m(x) * r), model, x)
    got = pb.gradient(lambda m, x: np.sum(m(x) * strict(r)), to_strict(model), strict(x))
    assert_same_gradients(got, want, rtol=1e-9, atol=1e-11)


def test_adam_trains_a_strict_model_as_it_trains_a_numpy_one():
    x, y = rng.normal(size=(8, 3)), rng.normal(size=(8, 2))
    model = pb.nn.Chain(pb.nn.Dense(3, 4, pb.nn.tanh, rng=0, dtype=np.float64), pb.nn.Dense(4, 2, rng=1, dtype=np.float64))
    models = {"numpy": (model, x, y), "strict": (to_strict(model), strict(x), strict(y))}
    for name, (m, xs, ys) in list(models.items()):
        state = pb.optim.setup(pb.optim.Adam(0.05), m)
        for _ in range(5):
            (g,) = pb.gradient(lambda m: np.mean((m(xs) - ys) ** 2), m)
            state, m = pb.optim.update(state, m, g)
        models[name] = m
    assert_same_gradients(models["strict"], models["numpy"], rtol=1e-10)


# --- mixing types is refused clearly ------------------------------------------------------------
def test_a_strict_array_meeting_a_numpy_parameter_names_both_types():
    data = strict(rng.normal(size=(4, 3)))
    expected = r"numpy\.(linalg\.)?matmul failed on .*StrictArray of shape \(4, 3\) and a numpy\.ndarray of shape \(3,\) " \
               r"\(being differentiated\).*Arrays of different types \(numpy\.ndarray, strict_arrays\.StrictArray\)"
    with pytest.raises(TypeError, match=expected):
        pb.gradient(lambda w: np.sum(data @ w), np.ones(3))
    with pytest.raises(TypeError, match=r"numpy\.multiply failed on .*numpy\.ndarray.*StrictArray.*do not mix"):
        pb.gradient(lambda w: np.sum(w * np.ones(3)), strict(np.ones(3)))
    with pytest.raises(TypeError, match=r"numpy\.add failed on .*StrictArray.*numpy\.ndarray.*do not mix"):
        pb.gradient(lambda a, b: np.sum(a + b), strict(np.ones(3)), np.ones(3))
