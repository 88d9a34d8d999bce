"""Dicts, lists and tuples of arrays as arguments take a short path (no tree walk); its results, ties, errors and
tracked values are those of the general walk, which these tests force by turning the short path off."""

import numpy as np
import pytest

import pullback as pb
from pullback import _leaves
from pullback.testing import numerical_gradient

W = np.array([1.0, -2.0, 0.5])
B = np.array([0.25])
N = np.array([2, 3])


def _general(monkeypatch):
    monkeypatch.setattr(_leaves, "_shallow_call", lambda args, positions, kwargs: False)


def _same(a, b):
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            _same(u, v)
    elif a is None:
        assert b is None
    else:
        np.testing.assert_array_equal(a, b, strict=True)


def _loss(p, x=2.0):
    total = 0.0
    for k, v in enumerate(p.values() if isinstance(p, dict) else p):
        if v.dtype.kind == "c":
            term = np.sum(np.real(v * np.conj(v)))
        elif v.dtype.kind == "f":
            term = np.sum(np.sin(v))
        else:  # an integer array: a constant
            term = np.sum(v)
        total = total + term * (k + 1) * x
    return total


CASES = {
    "dict": ({"w": W, "b": B},),
    "list": ([W, B],),
    "tuple": ((W, B),),
    "tie in one dict": ({"w": W, "again": W, "b": B},),
    "integer array": ({"w": W, "n": N},),
    "float32": ({"w": W.astype(np.float32), "b": B.astype(np.float32)},),
    "complex": ({"w": W + 1j, "b": B},),
    "0-d arrays": ([np.array(1.5), np.array(-0.5)],),
}


@pytest.mark.parametrize("args", CASES.values(), ids=CASES)
def test_gradients_equal_the_general_walks(args, monkeypatch):
    short = pb.withgradient(_loss, *args)
    _general(monkeypatch)
    general = pb.withgradient(_loss, *args)
    assert short.val == general.val
    _same(short.grad, general.grad)


def test_a_tie_gets_its_gradient_at_its_first_place_across_arguments(monkeypatch):
    def f(p, w, q):
        return np.sum(p["w"] * 3.0) + np.sum(w ** 2) + np.sum(q[0] * q[1])
    args = ({"w": W, "b": B}, W, [B, W])
    short = pb.gradient(f, *args)
    np.testing.assert_allclose(short[0]["w"], np.ravel(numerical_gradient(lambda w: f({"w": w, "b": B}, w, [B, w]), W)))
    np.testing.assert_array_equal(short[0]["b"], [np.sum(W)])  # B is also q[0], multiplied by W there
    assert short[1] is None and short[2] is None  # every array of q, and w, has its gradient at its first place
    _general(monkeypatch)
    _same(short, pb.gradient(f, *args))


@pytest.mark.parametrize("argnums", [0, 1, (1, 0), (0, 2)])
def test_argnums_and_constants_as_the_general_walk(argnums, monkeypatch):
    def f(p, q, x):
        return np.sum(p[0] * q["b"]) + np.sum(q["w"] ** 2 * x) + np.sum(p[1])
    args = ([W, B], {"w": W, "b": B}, np.array(2.0))
    short = pb.grad(f, argnums=argnums)(*args)
    _general(monkeypatch)
    _same(short, pb.grad(f, argnums=argnums)(*args))


def test_keyword_arrays_and_tangents_as_the_general_walk(monkeypatch):
    def f(p, scale=None):
        return np.sum(p["w"] * scale) + np.sum(p["b"] ** 3)
    def both():
        return (pb.gradient(f, {"w": W, "b": B}, scale=W),
                pb.jvp(lambda p: f(p, scale=W), ({"w": W, "b": B},), ({"w": np.ones(3), "b": np.ones(1)},)))
    short = both()
    _general(monkeypatch)
    general = both()
    _same(short, general)


def test_the_callers_arrays_are_not_written_and_gradients_are_fresh():
    w, b = W.copy(), B.copy()
    params = {"w": w, "b": b}

    def f(p):
        p["w"][0] = 5.0  # a write into the differentiated copy, recorded
        return np.sum(p["w"] * p["b"])
    (g,) = pb.gradient(f, params)
    np.testing.assert_array_equal(w, W)
    assert params["w"] is w and params["b"] is b
    np.testing.assert_array_equal(g["w"], [0.0, 0.25, 0.25])
    np.testing.assert_array_equal(g["b"], [5.0 - 2.0 + 0.5])
    assert not np.shares_memory(g["w"], w)


@pytest.mark.parametrize("bad, message", [
    (np.array([1.0, None], dtype=object), "dtype object"),
    (np.zeros(2, dtype=[("a", float)]), "structured"),
])
def test_refusals_name_the_place_as_the_general_walk(bad, message, monkeypatch):
    with pytest.raises(TypeError, match=message) as short:
        pb.gradient(lambda p: np.sum(p["w"]), {"w": W, "bad": bad})
    _general(monkeypatch)
    with pytest.raises(TypeError, match=message) as general:
        pb.gradient(lambda p: np.sum(p["w"]), {"w": W, "bad": bad})
    assert str(short.value) == str(general.value)
    assert str(short.value).startswith("Argument 0['bad'] is")


def test_a_write_into_an_argument_sharing_memory_with_another_is_refused():
    base = np.arange(4.0)

    def f(p):
        p[0][0] = 1.0
        return np.sum(p[0] * p[1])
    with pytest.raises(ValueError, match="shares memory"):
        pb.gradient(f, [base[:2], base[2:] * 1.0, base[1:3]])


def test_under_jit_the_gradient_of_a_dict_of_arrays_replays():
    step = pb.jit(lambda p: pb.gradient(_loss, p)[0])
    params = {"w": W, "b": B}
    for scale in (1.0, 2.0):
        p = {k: v * scale for k, v in params.items()}
        _same(step(p), pb.gradient(_loss, p)[0])


@pytest.mark.parametrize("args, positions, kwargs, shallow", [
    (({"w": W},), [0], {}, True),
    (([W, B], W), [0, 1], {"scale": W}, True),
    (([W, B], [W]), [0], {}, False),  # a container not differentiated: the walk
    (({"w": W, "s": 2.0},), [0], {}, False),  # a number in a container: the walk tracks it
    (({"w": {"a": W}},), [0], {}, False),  # nested
    (({},), [0], {}, False),
])
def test_which_calls_take_the_short_path(args, positions, kwargs, shallow):
    assert _leaves.Arguments(args, positions, kwargs)._shallow is shallow


def test_a_number_beside_a_dict_of_arrays_as_the_general_walk(monkeypatch):
    def f(p, s):
        return np.sum(p["w"] * s) + s ** 3 * np.sum(p["b"])

    def both():
        return (pb.gradient(f, {"w": W, "b": B}, 1.5),
                pb.jvp(f, ({"w": W, "b": B}, 1.5), ({"w": np.ones(3), "b": np.ones(1)}, 2.0)))
    short = both()
    np.testing.assert_allclose(short[0][1], np.sum(W) + 3 * 1.5 ** 2 * np.sum(B))
    _general(monkeypatch)
    _same(short, both())
