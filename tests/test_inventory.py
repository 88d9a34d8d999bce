"""Every public callable of the NumPy and SciPy namespaces pullback follows is covered, declared
non-differentiable with its reason, or listed as not yet covered (pullback.rules.inventory)."""

import numpy as np
import pytest

import pullback as pb
from pullback.rules import inventory


def _require(namespace):
    if namespace.startswith("scipy"):
        pytest.importorskip("scipy")


@pytest.mark.parametrize("namespace", list(inventory.NAMESPACES))
def test_every_public_callable_is_in_exactly_one_list(namespace):
    _require(namespace)
    report = inventory.report(namespace)
    assert report.get(None, []) == [], f"{namespace}: in none of the three lists"
    listed = [n for n in report.get("covered", [])
              if f"{namespace}.{n}" in inventory.NONDIFFERENTIABLE or f"{namespace}.{n}" in inventory.NOT_YET]
    assert listed == [], f"{namespace}: covered, yet also listed as non-differentiable or not yet covered"


@pytest.mark.parametrize("namespace", list(inventory.NAMESPACES))
def test_listed_names_exist_and_have_reasons(namespace):
    _require(namespace)
    public = inventory.public_callables(namespace)
    for table in (inventory.NONDIFFERENTIABLE, inventory.NOT_YET):
        for qualified, reason in table.items():
            ns, _, name = qualified.rpartition(".")
            if ns == namespace:
                assert name in public, f"{qualified} is listed but is not a public callable"
                assert reason.strip(), f"{qualified} is listed without a reason"
    both = set(inventory.NONDIFFERENTIABLE) & set(inventory.NOT_YET)
    assert not both, f"in two lists: {sorted(both)}"


def test_numpy_main_namespace_has_nothing_differentiable_left_uncovered():
    left = sorted(q for q in inventory.NOT_YET if q.rpartition(".")[0] == "numpy")
    assert left == []


def test_status_of_known_functions():
    assert inventory.status("numpy", "sin") == "covered"
    assert inventory.status("numpy", "abs") == "covered"  # an alias of numpy.absolute
    assert inventory.status("numpy", "zeros") == "non-differentiable"


CONVERSIONS = ["array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray", "asarray_chkfinite", "require"]


@pytest.mark.parametrize("name", CONVERSIONS)
def test_conversions_listed_as_non_differentiable_raise_the_conversion_error(name):
    assert inventory.status("numpy", name) == "non-differentiable"
    with pytest.raises(TypeError, match="Cannot convert a value that is being differentiated"):
        pb.gradient(lambda x: np.sum(getattr(np, name)(x)), np.ones(2))


@pytest.mark.parametrize("call", [lambda v, np: np.full(3, v), lambda v, np: np.arange(v, 3.0),
                                  lambda v, np: np.kaiser(4, v)], ids=["full", "arange", "kaiser"])
def test_functions_numpy_never_hands_over_raise_the_conversion_error(call):
    with pytest.raises(TypeError, match="Cannot convert a value that is being differentiated"):
        pb.gradient(lambda v: np.sum(call(v, np)), 0.5)


def test_numpy_and_its_submodules_have_nothing_left_but_eig_and_eigvals():
    left = sorted(q for q in inventory.NOT_YET if q.rpartition(".")[0] in ("numpy", "numpy.linalg", "numpy.fft"))
    assert set(left) <= {"numpy.linalg.eig", "numpy.linalg.eigvals"}
