"""Under differentiation, user code computes what it computes without it, or gets an error naming the fix.

One test per construct that once gave a silently wrong value or gradient, and per error
message that once left the user guessing.
"""

import copy
import numbers
import pickle
import sys
from fractions import Fraction

import numpy as np
import pytest

import pullback as pb
from pullback.testing import numerical_gradient


# --- aliasing inside the arguments ------------------------------------------------------------
def test_a_write_through_one_alias_is_seen_through_the_other():
    w = np.array([1.0, 2.0])
    m = {"a": w, "b": w}

    def f(m):
        m["a"][0] = 10.0
        return np.sum(m["b"] * 1.0)

    val, (g,) = pb.withgradient(f, m)
    assert val == 12.0  # what NumPy gives
    np.testing.assert_array_equal(g["a"], [0.0, 1.0])  # w[0] was overwritten: only w[1] matters
    assert g["b"] is None  # the tie's total is at its first place, never counted twice
    np.testing.assert_array_equal(w, [1.0, 2.0])  # the caller's array is untouched


def test_the_same_array_passed_twice_is_one_array_inside_f():
    x = np.array([1.0, 2.0])

    def f(a, b):
        a[0] = 100.0
        return np.sum(b)

    val, (ga, gb) = pb.withgradient(f, x, x)
    assert val == 102.0
    np.testing.assert_array_equal(ga, [0.0, 1.0])
    assert gb is None


def test_a_shared_sub_object_stays_shared():
    class Tree:
        def __init__(self, left, right):
            self.left, self.right = left, right

    class Leaf:
        def __init__(self, w):
            self.w = w

    leaf = Leaf(np.array([1.0]))
    t = Tree(leaf, leaf)

    def f(t):
        t.left.w = t.left.w * 3.0  # rebinding a field of the shared object
        return np.sum(t.right.w) * (1.0 if t.left is t.right else 0.0)

    val, (g,) = pb.withgradient(f, t)
    assert val == 3.0
    np.testing.assert_allclose(g.left.w, [3.0])
    assert g.right is None
    assert leaf.w[0] == 1.0 and t.left is t.right


def test_a_scalar_in_place_operator_does_not_change_its_aliases():
    def f(x):
        s = np.sum(x)
        t = s
        t += 1.0  # a NumPy scalar is immutable: `s` keeps its value
        return s * 10.0 + t

    val, (g,) = pb.withgradient(f, np.array([1.0, 2.0]))
    assert val == f(np.array([1.0, 2.0])) == 34.0
    np.testing.assert_allclose(g, [11.0, 11.0])


def test_optimisers_update_a_tied_array_once_with_the_total():
    w = np.array([1.0, 2.0])
    model = {"enc": w, "dec": w}
    (g,) = pb.gradient(lambda m: np.sum(m["enc"] * 2.0) + np.sum(m["dec"] * 5.0), model)
    state = pb.optim.setup(pb.optim.Descent(0.1), model)
    _, new = pb.optim.update(state, model, g)
    assert new["enc"] is new["dec"]
    np.testing.assert_allclose(new["enc"], w - 0.1 * 7.0)


# --- copies and pickling ----------------------------------------------------------------------
@pytest.mark.parametrize("make_copy", [copy.deepcopy, copy.copy])
def test_a_copy_of_a_tracked_array_is_a_recorded_copy(make_copy):
    x = np.array([1.0, 2.0])
    val, (g,) = pb.withgradient(lambda x: np.sum(make_copy(x) ** 2), x)
    assert val == 5.0
    np.testing.assert_allclose(g, [2.0, 4.0])
    val, (g,) = pb.withgradient(lambda x: np.sum(make_copy(x) * x), x)
    assert type(val) is np.float64 and val == 5.0
    np.testing.assert_allclose(g, [2.0, 4.0])


def test_deep_copying_an_object_holding_tracked_arrays_keeps_the_gradient():
    class Saver:  # as filterpy's Saver does with a filter's __dict__
        def __init__(self):
            self.saved = []

        def save(self, obj):
            self.saved.append(copy.deepcopy(obj.__dict__))

    class Filter:
        def __init__(self, x):
            self.x = x

    def f(x):
        kf, saver = Filter(x), Saver()
        for _ in range(3):
            kf.x = kf.x * 2.0
            saver.save(kf)
        return np.sum(saver.saved[1]["x"] ** 2)

    x = np.array([1.0, -3.0])
    val, (g,) = pb.withgradient(f, x)
    assert val == f(x)
    np.testing.assert_allclose(g, numerical_gradient(f, x)[0], rtol=1e-6)


def test_pickling_a_tracked_value_is_refused():
    with pytest.raises(TypeError, match="Cannot pickle a value that is being differentiated.*stop_gradient"):
        pb.gradient(lambda x: pickle.dumps(x) and np.sum(x), np.ones(2))


# --- scalar-ness checks answer as without pullback --------------------------------------------
def kalman_predict(x, P, F, Q):
    """filterpy's KalmanFilter.predict: a scalar Q means Q * I."""
    if np.isscalar(Q):
        Q = np.eye(len(x)) * Q
    x = F @ x
    P = F @ P @ F.T + Q
    return x, P


def test_np_isscalar_and_number_checks_see_a_tracked_float_as_a_scalar():
    F = np.array([[1.0, 1.0], [0.0, 1.0]])
    x0, P0 = np.array([1.0, 0.5]), np.eye(2)

    def loss(q):
        x, P = kalman_predict(x0, P0, F, q)
        return np.sum(P) + np.sum(x)

    val, (g,) = pb.withgradient(loss, 0.1)
    assert val == loss(0.1)
    assert abs(g - numerical_gradient(loss, 0.1)[0]) < 1e-6  # d/dq sum(P + qI) = 2
    seen = {}

    def probe(q):
        seen.update(isscalar=np.isscalar(q), number=isinstance(q, numbers.Real), ndim=np.ndim(q), float=isinstance(q, float))
        return q * 2.0

    pb.gradient(probe, 0.5)
    assert seen == {"isscalar": True, "number": True, "ndim": 0, "float": True}

    def probe_array(x):
        seen.update(isscalar=np.isscalar(x), scalar_sum=np.isscalar(np.sum(x)))
        return np.sum(x)

    pb.gradient(probe_array, np.ones(2))
    assert seen["isscalar"] is False and seen["scalar_sum"] is True


# --- NumPy subclasses and other array types ---------------------------------------------------
def test_np_matrix_is_refused_naming_the_fix():
    with pytest.raises(TypeError, match=r"numpy\.matrix.*np\.asarray\(m\) and x @ y"):
        pb.gradient(lambda m: np.sum(m * m), np.matrix([[1.0, 2.0], [3.0, 4.0]]))
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(TypeError, match=r"numpy\.matrix"):
        pb.gradient(lambda x: np.sum(m * x), np.ones((2, 2)))


def test_masked_arrays_are_refused_naming_the_fix():
    m = np.ma.array([1.0, 2.0], mask=[False, True])
    with pytest.raises(TypeError, match=r"MaskedArray.*x\[~mask\]"):
        pb.gradient(lambda m: np.sum(m ** 2), m)
    for f in (lambda x: np.sum(m * x), lambda x: np.sum(x * m), lambda x: np.mean(np.ma.array(x, mask=[0, 1]))):
        with pytest.raises(TypeError, match=r"MaskedArray|masked"):
            pb.gradient(f, np.array([1.0, 3.0]))


def test_a_dask_array_meeting_a_tracked_value_gives_a_lazy_gradient():
    da = pytest.importorskip("dask.array")
    X = da.from_array(np.arange(6.0).reshape(3, 2), chunks=2)
    (g,) = pb.gradient(lambda w: np.sum(X @ w), np.array([1.0, 2.0]))
    np.testing.assert_allclose(g.compute(), [6.0, 9.0])  # the column sums of X (tests/test_dask.py has more)
    with pytest.raises(TypeError, match="compute"):  # computing inside f is an error, never a lost gradient
        pb.gradient(lambda w: np.sum((X @ w).compute()), np.array([1.0, 2.0]))


def test_an_array_api_strict_array_meeting_a_tracked_value():
    xp = pytest.importorskip("array_api_strict")
    (g,) = pb.gradient(lambda w: np.sum(w * xp.asarray([1.0, 2.0])), np.array([1.0, 2.0]))
    np.testing.assert_allclose(g, [1.0, 2.0])  # tests/test_array_api.py has more


def test_an_unknown_array_type_is_refused_in_numpy_functions():
    class Foreign:
        def __array_function__(self, func, types, args, kwargs):
            return NotImplemented

    with pytest.raises(TypeError, match="Foreign met a value"):
        pb.gradient(lambda x: np.sum(np.concatenate([x, Foreign()])), np.ones(2))


# --- the caller's objects are never modified --------------------------------------------------
def test_containers_without_floats_are_copied_too():
    class Layer:  # numpy-ml layers keep a cache list
        def __init__(self):
            self.w = np.array([1.0, 2.0])
            self.log = []
            self.names = ["a", "b"]

        def __call__(self, x):
            self.log.append(x)
            self.names.append("c")
            return self.w * x

    layer = Layer()
    history = []
    g = pb.gradient(lambda m, h: np.sum(m(3.0)) + len(h.append(1) or h), layer, history)
    np.testing.assert_allclose(g[0].w, [3.0, 3.0])
    assert layer.log == [] and layer.names == ["a", "b"] and history == []


# --- deep structures ----------------------------------------------------------------------------
def test_a_long_linked_list_is_walked_without_recursion():
    class Link:
        def __init__(self, w, next):
            self.w, self.next = w, next

    head = None
    for i in range(3000):
        head = Link(np.array([float(i)]), head)

    def f(link):
        total = 0.0
        while link is not None:
            total = total + np.sum(link.w ** 2)
            link = link.next
        return total

    (g,) = pb.gradient(f, head)
    for i in reversed(range(3000)):
        assert g.w[0] == 2.0 * i
        g = g.next
    assert g is None


def test_lists_nested_ten_thousand_deep():
    nested = np.array([2.0])
    for _ in range(10_000):
        nested = [nested, "s"]

    def f(x):
        while isinstance(x, list):
            x = x[0]
        return np.sum(x ** 3)

    (g,) = pb.gradient(f, nested)
    for _ in range(10_000):
        assert g[1] is None
        g = g[0]
    np.testing.assert_allclose(g, [12.0])
    assert sys.getrecursionlimit() < 10_000  # the walk really is deeper than Python's recursion


# --- rules that were wrong ------------------------------------------------------------------------
def test_astype_without_copy_returns_the_same_array():
    def f(y):
        z = y.astype(y.dtype, copy=False)
        z[0] = 5.0
        return np.sum(y * 1.0)

    x = np.array([1.0, 2.0])
    val, (g,) = pb.withgradient(f, x)
    assert val == f(x.copy()) == 7.0
    np.testing.assert_array_equal(g, [0.0, 1.0])


# --- messages -------------------------------------------------------------------------------------
def test_a_list_of_tracked_values_given_to_numpy_names_np_stack():
    for f in (lambda x: np.sum(np.array([x[0], x[1]])), lambda x: np.mean([x, x + 2]), lambda x: np.sum(np.r_[x, x])):
        with pytest.raises(TypeError, match=r"np\.stack\(\[\.\.\.\]\) or np\.concatenate"):
            pb.gradient(f, np.array([1.0, 2.0]))


def test_writing_a_tracked_value_into_a_plain_array_names_the_fix():
    def f(x):
        Y = np.zeros(2)
        Y[0:1] = x[0:1]
        return np.sum(Y)

    with pytest.raises(TypeError, match=r"np\.zeros\(n\).*np\.zeros_like\(x\)"):
        pb.gradient(f, np.array([1.0, 2.0]))

    def g(x):
        Y = np.zeros(2)
        Y[0] = x[0]
        return np.sum(Y)

    # NumPy replaces the error with its own ValueError for a single element; ours is its cause.
    with pytest.raises((TypeError, ValueError)) as info:
        pb.gradient(g, np.array([1.0, 2.0]))
    assert "np.zeros_like(x)" in str(info.value) + str(info.value.__cause__)


def test_scipy_functions_that_convert_their_input_name_the_stand_in_or_the_wrapper():
    special = pytest.importorskip("scipy.special")
    optimize = pytest.importorskip("scipy.optimize")
    with pytest.raises(TypeError, match=r"scipy\.special\.logsumexp converts.*Use pullback\.scipy\.special\.logsumexp"):
        pb.gradient(lambda x: special.logsumexp(x), np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match=r"scipy\.optimize\.rosen converts.*pullback\.primitive\(scipy\.optimize\.rosen\).*pullback\.rrule") as info:
        pb.gradient(lambda x: optimize.rosen(x), np.array([1.0, 2.0]))
    assert "stop_gradient" not in str(info.value)
    stats = pytest.importorskip("scipy.stats")
    with pytest.raises(TypeError, match=r"scipy\.stats\.norm\.logpdf converts.*Use pullback\.scipy\.stats\.norm\.logpdf"):
        pb.gradient(lambda x: np.sum(stats.norm.logpdf(x)), np.array([1.0, 2.0]))
    # SciPy wraps spherical_jn in a decorator: the message names the function the user called, not `wrapper`
    with pytest.raises(TypeError, match=r"scipy\.special\.spherical_jn converts.*Use pullback\.scipy\.special\.spherical_jn"):
        pb.gradient(lambda x: np.sum(special.spherical_jn(1, x)), np.array([1.0, 2.0]))
    # ... and a function of another module behind a decorator of scipy._lib (SciPy's batching wrapper)
    linalg = pytest.importorskip("scipy.linalg")
    a = np.array([[2.0, 0.3], [0.3, 1.0]])
    for call, name in [(lambda a: linalg.svd(a, compute_uv=False), "svd"), (lambda a: linalg.logm(a), "logm"),
                       (lambda a: linalg.solve_triangular(a, np.ones(2)), "solve_triangular")]:
        with pytest.raises(TypeError, match=rf"scipy\.linalg\.{name} converts.*Use pullback\.scipy\.linalg\.{name}"):
            pb.gradient(lambda a: np.sum(call(a)), a)


def test_np_vectorize_is_named_with_the_fix():
    with pytest.raises(TypeError, match=r"numpy\.vectorize calls its function on one element at a time.*whole array"):
        pb.gradient(lambda x: np.sum(np.vectorize(lambda a: a * 2.0)(x)), np.ones(3))


def test_a_tracked_out_argument_is_a_functional_update():
    def f(x):
        y = x * 1.0
        np.multiply(y, 2.0, out=y)
        np.tanh(y, out=y)
        return np.sum(y)

    x = np.array([0.1, -0.4])
    val, (g,) = pb.withgradient(f, x)
    assert val == f(x.copy())
    np.testing.assert_allclose(g, 2.0 / np.cosh(2.0 * x) ** 2)
    with pytest.raises(TypeError, match=r"numpy\.multiply\(\.\.\., out=\.\.\.\) would write a result that is being differentiated into a plain array"):
        pb.gradient(lambda x: np.sum(np.multiply(x, 2.0, out=np.zeros(2))), x)


def test_a_missing_rule_names_the_function_where_the_user_found_it():
    special = pytest.importorskip("scipy.special")
    from pullback.rules.inventory import NOT_YET

    not_yet = sorted(
        name.rsplit(".", 1)[1]
        for name in NOT_YET
        if name.startswith("scipy.special.") and isinstance(getattr(special, name.rsplit(".", 1)[1], None), np.ufunc)
    )
    assert not_yet, "no scipy.special ufunc is listed as not yet covered; pick another example"
    for name in not_yet[:3]:  # ufuncs of scipy.special, not numpy
        ufunc = getattr(special, name)
        args = (np.array([0.3]),) + (0.7,) * (ufunc.nin - 1)

        def f(x):
            y = ufunc(x, *args[1:])
            return np.sum(y[0] if ufunc.nout > 1 else y)

        with pytest.raises(NotImplementedError, match=rf"no derivative rule for scipy\.special\.{name}"):
            pb.gradient(f, args[0])


def test_numbers_that_are_not_floats_are_refused_as_arguments():
    for value in (Fraction(1, 3), __import__("decimal").Decimal("0.5")):
        with pytest.raises(TypeError, match=rf"argument 0 is a {type(value).__name__}.*float\(x\)"):
            pb.gradient(lambda x: x * 2, value)
    assert pb.gradient(lambda x, q: x * float(q), 2.0, q=Fraction(1, 2)) == (0.5,)


def test_a_class_whose_new_needs_arguments_is_rebuilt_through_the_copy_protocol():
    class Point:
        def __new__(cls, x, y):
            self = super().__new__(cls)
            self.x, self.y = x, y
            return self

        def __getnewargs__(self):
            return (self.x, self.y)

    class Opaque:
        __slots__ = ("w",)

        def __new__(cls, w):
            self = object.__new__(cls)
            self.w = w
            return self

    (g,) = pb.gradient(lambda p: np.sum(p.x * p.y), Point(np.array([2.0]), np.array([3.0])))
    np.testing.assert_allclose(g.x, [3.0])
    (g,) = pb.gradient(lambda p: np.sum(p.w ** 2), Opaque(np.array([2.0])))
    np.testing.assert_allclose(g.w, [4.0])


def test_array_methods_are_supported_or_refused_with_a_reason():
    def f(x):
        v = x.view()
        y = x * 1.0
        y.fill(2.0)
        z = x * 1.0
        z.sort()
        return np.sum(v * y) + z[0] * 10.0 + x.nbytes * 0.0 + (1.0 if x.flags.c_contiguous else 0.0)

    x = np.array([3.0, 1.0])
    val, (g,) = pb.withgradient(f, x)
    assert val == f(x.copy())
    np.testing.assert_allclose(g, [2.0, 12.0])
    with pytest.raises(TypeError, match=r"x\.view\(dtype\) reinterprets.*x\.astype"):
        pb.gradient(lambda x: np.sum(x.view(np.int64)), x)


def test_every_ndarray_method_is_followed_or_refused_naming_the_way_out():
    """The methods NumPy code calls work as on an ndarray (in place where NumPy's are), in both modes;
    those about bytes and memory raise an AttributeError that says what to use instead."""
    x = np.array([3.0, 1.0, 2.0, 5.0])
    w = np.array([1.0, 10.0, 100.0, 1000.0])

    def f(x):
        p = x * 1.0
        p.partition(1)  # in place: [1, 2, 3, 5] up to order within the parts
        q = x * 1.0
        q.put([0, 2], np.stack([x[3], 7.0]))
        picked = x[x.argpartition(1)[:2]]
        kept = x.compress([True, False, True, True])
        rank = np.sort(x).searchsorted(2.5)
        return (np.sum(p[:2] * w[:2]) + np.sum(q * w) + np.sum(picked * w[:2])
                + np.sum(kept ** 2) * rank + x.strides[0] + (x.device == "cpu"))

    val, (g,) = pb.withgradient(f, x)
    assert val == f(x.copy())
    assert pb.check_gradient(f, x)
    for name, why in [("tobytes", "stop_gradient"), ("resize", r"np\.resize\(x"), ("base", "stop_gradient"),
                      ("ctypes", "stop_gradient")]:
        with pytest.raises(AttributeError, match=rf"x\.{name} is not available.*{why}"):
            pb.gradient(lambda x: getattr(x, name), x)
    assert not hasattr(pb.stop_gradient, "no_such_thing")


def test_a_value_that_escaped_a_finished_call_says_so():
    kept = []
    pb.gradient(lambda x: kept.append(x * 2.0) or np.sum(x), np.ones(2))
    with pytest.raises(RuntimeError, match="has already finished.*stop_gradient"):
        np.asarray(kept[0])
