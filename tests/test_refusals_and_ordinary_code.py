"""Ordinary code the refusals of traced values in odd places must let through (methods stored as fields,
method primitives, object arrays of tokens, equal tangents at tied places, option tuples of primitives),
float subclasses refused with the fix, Dask reductions over data of unknown length, and pb.jit writes
into an argument that the function also reads through a global or a closure."""


import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient

RNG = np.random.default_rng(0)
W = RNG.normal(size=(3, 2))
X = RNG.normal(size=(4, 3))


# --- a bound method of the model stored as a field (`self.act = self.relu`) ---------------------
class _ModelWithActField:
    def __init__(self):
        self.w = W.copy()
        self.act = self.relu  # a common way to pick an activation; relu uses no parameter

    def relu(self, z):
        return np.maximum(z, 0.0)

    def __call__(self, x):
        return self.act(x @ self.w)


def test_bound_method_field_not_using_parameters_is_not_refused():
    m = _ModelWithActField()
    (g, _) = pb.gradient(lambda m, x: np.sum(m(x) ** 2), m, X)
    expected = numerical_gradient(lambda w: np.sum(np.maximum(X @ w, 0.0) ** 2), W)[0]
    np.testing.assert_allclose(g.w, expected, rtol=1e-5, atol=1e-6)


class _NetWithActField:
    def __init__(self):
        self.dense = pb.nn.Dense(3, 2, rng=1)
        self.act = self.gelu

    def gelu(self, z):
        return z * 0.5 * (1 + np.tanh(z))

    def __call__(self, x):
        return self.act(self.dense(x))


def test_nn_model_with_bound_method_field_trains():
    import pullback.optim as po
    net = _NetWithActField()
    state = po.setup(po.Adam(0.01), net)
    x = X.astype(np.float32)
    for _ in range(2):
        g = pb.gradient(lambda m, x: np.sum(m(x) ** 2), net, x)[0]
        state, net = po.update(state, net, g)


class _LayerWithTrainable:
    def __init__(self):
        self.w = np.ones((3, 2))
        self.act = self.relu  # not even a trainable field

    def trainable(self):
        return ("w",)

    def relu(self, z):
        return np.maximum(z, 0.0)

    def __call__(self, x):
        return self.act(x @ self.w)


def test_bound_method_in_non_trainable_field_is_not_refused():
    (g, _) = pb.gradient(lambda m, x: np.sum(m(x)), _LayerWithTrainable(), np.ones((2, 3)))
    np.testing.assert_allclose(g.w, np.full((3, 2), 2.0))


# --- a method primitive given its parameter positionally, with `self` holding it too -------------
class _Layer:
    def __init__(self):
        self.w = np.array([1.0, 2.0])

    def __call__(self, x):
        return self._op(x, self.w)  # w passed positionally: the rule sees it

    @pb.primitive
    def _op(self, x, w):
        return np.tanh(x * w)


@pb.rrule(_Layer._op)
def _op_rule(self, x, w):
    y = np.tanh(x * w)
    return y, lambda g: (None, g * (1 - y ** 2) * w, g * (1 - y ** 2) * x)


def test_method_primitive_with_parameter_passed_positionally_is_not_refused():
    layer, x = _Layer(), np.array([0.3, -0.2])
    g = pb.gradient(lambda m, x: np.sum(m(x)), layer, x)
    expected = numerical_gradient(lambda w: np.sum(np.tanh(x * w)), layer.w)[0]
    np.testing.assert_allclose(g[0].w, expected, rtol=1e-6)


# --- object arrays of non-float containers (token lists, dicts) ------------------------------------
def _ragged_tokens():
    toks = np.empty(2, dtype=object)
    toks[0], toks[1] = ["a", "b"], ["c"]
    return toks


def test_object_array_of_string_lists_in_model_is_not_refused():
    params = {"w": np.array([1.0, 2.0]), "vocab": _ragged_tokens()}
    (g,) = pb.gradient(lambda m: np.sum(m["w"] ** 2), params)
    np.testing.assert_allclose(g["w"], [2.0, 4.0])


def test_object_array_of_dicts_in_model_is_not_refused():
    params = {"w": np.array([1.0, 2.0]), "meta": np.array([{"name": "x"}, {"name": "y"}], dtype=object)}
    (g,) = pb.gradient(lambda m: np.sum(m["w"] ** 2), params)
    np.testing.assert_allclose(g["w"], [2.0, 4.0])


# --- float subclasses: refused, naming the fix ------------------------------------------------------
class _Temp(float):
    def celsius(self):
        return float(self) - 273.15


def test_float_subclass_isinstance_branch_gives_right_gradient():
    def f(t):
        return t ** 2 if isinstance(t, _Temp) else 0.0 * t

    assert f(_Temp(3.0)) == 9.0  # without pullback: the first branch
    # tracked as a plain float, f would take the other branch: refused, naming the fix
    with pytest.raises(TypeError, match=r"a subclass of float.*Pass float\(x\)"):
        pb.gradient(f, _Temp(3.0))
    assert pb.gradient(lambda t: f(_Temp(t)) if False else t ** 2, float(_Temp(3.0)))[0] == 6.0


def test_float_subclass_method_call_works_or_is_refused_with_a_fix():
    try:
        (g,) = pb.gradient(lambda t: t.celsius() ** 2, _Temp(300.0))
    except AttributeError as e:
        pytest.fail(f"bare AttributeError: {e}")
    except TypeError as e:
        assert "_Temp" in str(e)
    else:
        assert g is None or g == pytest.approx(2 * (300.0 - 273.15))


# --- tied parameters: equal tangents at the places of one array -----------------------------------
def test_jvp_tie_with_equal_tangents_is_not_refused():
    w = np.array([1.0, 2.0])
    y, t = pb.jvp(lambda a, b: np.sum(a * b ** 2), (w, w), (np.ones(2), np.ones(2)))
    assert t == pytest.approx(15.0)


def test_hvp_of_tied_dict_with_equal_direction_is_not_refused():
    w3 = RNG.normal(size=(3, 3))
    tied = {"a": w3, "b": w3}
    x = RNG.normal(size=(4, 3))
    f = lambda p: np.sum(np.tanh(x @ p["a"] @ p["b"]))  # noqa: E731
    v = {"a": np.ones((3, 3)), "b": np.ones((3, 3))}  # one direction, written at both places
    pb.hvp(f, tied, v)


# --- Dask: reductions over the known axis of an array of unknown chunk sizes --------------------
def _masked_dask_case(f):
    da = pytest.importorskip("dask.array")
    d = RNG.normal(size=(8, 3))
    mask = d[:, 0] > 0
    w = RNG.normal(size=(3, 2))
    g = lambda w, D=None, m=None: f(w, D, m)  # noqa: E731  (data by keyword: not differentiated)
    expected = numerical_gradient(lambda w: f(w, d, mask), w)[0]
    got = pb.gradient(g, w, D=da.from_array(d, chunks=(2, 3)), m=da.from_array(mask, chunks=2))[0]
    assert isinstance(got, da.Array)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-7)


def test_dask_sum_over_known_axis_of_unknown_rows():
    _masked_dask_case(lambda w, D, m: np.sum(np.sum(np.tanh(D[m] @ w), axis=1) ** 2))


def test_dask_mean_over_known_axis_of_unknown_rows():
    _masked_dask_case(lambda w, D, m: np.sum(np.mean(np.tanh(D[m] @ w), axis=1) ** 2))




# --- pb.jit: a write into an argument whose memory the function also reads by name -------------
_G = np.zeros(3)


def _writes_arg_reads_global(a):
    a += 1.0
    return np.sum(_G * 2.0)


def test_jit_write_into_argument_read_through_a_global_is_not_silently_wrong():
    global _G
    _G = np.zeros(3)
    eager = [float(_writes_arg_reads_global(_G)) for _ in range(3)]  # [6, 12, 18]
    _G = np.zeros(3)
    jf = pb.jit(_writes_arg_reads_global)
    try:
        got = [float(jf(_G)) for _ in range(3)]
    except pb.JitError as e:  # refused, naming the construct
        assert "writes into argument" in str(e)
        return
    assert got == eager


class _Box:
    pass


def test_jit_write_into_argument_read_through_an_attribute_is_not_silently_wrong():
    box = _Box()

    def f(a):
        a += 1.0
        return float(box.g.sum())

    box.g = np.zeros(3)
    eager = [f(box.g) for _ in range(3)]  # [3, 6, 9]
    box.g = np.zeros(3)
    jf = pb.jit(f)
    try:
        got = [jf(box.g) for _ in range(3)]
    except Exception as e:  # a refusal must name the construct
        assert "writes into argument" in str(e)
        return
    assert got == eager


def test_jit_write_into_argument_then_numpy_call_on_global_is_not_silently_wrong():
    g = {"G": np.zeros(3)}

    def f(a, b):
        a += 1.0
        return np.sum(b * np.exp(g["G"]))  # a plain NumPy call reads the global the argument aliases

    g["G"] = np.zeros(3)
    eager = [float(f(g["G"], np.ones(3))) for _ in range(3)]  # [8.15, 22.17, 60.26]
    g["G"] = np.zeros(3)
    jf = pb.jit(f)
    try:
        got = [float(jf(g["G"], np.ones(3))) for _ in range(3)]
    except pb.JitError as e:
        assert "writes into argument" in str(e)
        return
    np.testing.assert_allclose(got, eager)


# --- keyword arguments are not differentiated, also a container passed again by keyword -------------
def test_keyword_array_is_a_constant_and_a_keyword_container_shared_with_an_argument_is_that_argument():
    w = np.array([1.0, 2.0])
    d = {"w": w}
    as_array = pb.gradient(lambda m, ref=None: np.sum(m["w"] * ref), d, ref=w)[0]["w"]
    as_other_dict = pb.gradient(lambda m, ref=None: np.sum(m["w"] * ref["w"]), d, ref={"w": w})[0]["w"]
    np.testing.assert_allclose(as_array, w)
    np.testing.assert_allclose(as_other_dict, as_array)
    # the same dict by keyword is the differentiated dict itself (`ref is m` inside f, as without pullback),
    # so f is sum(m["w"] ** 2) and its gradient 2w
    as_same_dict = pb.gradient(lambda m, ref=None: np.sum(m["w"] * ref["w"]) + (ref is m), d, ref=d)[0]["w"]
    np.testing.assert_allclose(as_same_dict, 2 * w)
