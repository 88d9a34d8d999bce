"""Every public callable of the NumPy and SciPy namespaces pullback follows is covered, declared
non-differentiable with its reason, or listed as not yet covered (pullback.rules.inventory)."""

import pytest

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
