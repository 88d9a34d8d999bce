"""One registration path: every rule, built-in or a user's, goes through `pb.rrule`, `pb.frule`,
`pb.primitive`, `composite` or `nondifferentiable`, and forward and reverse rules are keyed on the
same callable (the NumPy/SciPy function or ufunc, or the primitive)."""

import ast
import functools
from pathlib import Path

import numpy as np
import pytest

import pullback as pb
from pullback import _registry
from pullback._extend import composite, nondifferentiable
from pullback._registry import FORWARD_RULES, FUNCTIONS, REVERSE_RULES, SERVED_BY, UFUNC_RULES, forward_rule_of

RULES_DIR = Path(pb.__file__).parent / "rules"
TABLES = ("REVERSE_RULES", "FORWARD_RULES", "SERVED_BY", "UFUNC_RULES", "FUNCTIONS", "NONDIFF_UFUNCS")


@pytest.fixture
def restored_tables():
    """The registry as it was before the test, whatever the test registers."""
    saved = {name: getattr(_registry, name).copy() for name in TABLES}
    yield
    for name, copy in saved.items():
        table = getattr(_registry, name)
        table.clear()
        table.update(copy)


def test_forward_rules_are_keyed_on_the_callables_reverse_rules_are():
    assert np.sin in FORWARD_RULES and np.linalg.inv in FORWARD_RULES and np.max in FORWARD_RULES
    assert not set(FORWARD_RULES) - set(REVERSE_RULES), "forward rules for callables without a reverse rule"
    for key, rule in REVERSE_RULES.items():
        assert REVERSE_RULES[SERVED_BY[rule]] is rule, key  # each rule leads back to a callable it serves
    # np.max and np.amax share one reverse rule, and each has its forward rule.
    assert REVERSE_RULES[np.max] is REVERSE_RULES[np.amax]
    assert forward_rule_of(REVERSE_RULES[np.max]) in (FORWARD_RULES[np.max], FORWARD_RULES[np.amax])
    for ufunc, rule in UFUNC_RULES.items():
        assert REVERSE_RULES[ufunc] is rule
    assert not [fn for fn, impl in FUNCTIONS.items() if isinstance(impl, functools.partial)]


def _writes_to_tables(path):
    """Lines of a rule file that write into a registry table directly."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        for target in targets:
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id in TABLES:
                found.append(node.lineno)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.value.id in TABLES and node.func.attr in ("add", "update", "pop", "setdefault")):
            found.append(node.lineno)
    return found


def test_rule_files_register_only_through_the_public_functions():
    direct = {path.name: lines for path in sorted(RULES_DIR.glob("*.py")) if (lines := _writes_to_tables(path))}
    assert not direct, f"rule files writing into the registry directly: {direct}"
    applied = [path.name for path in sorted(RULES_DIR.glob("*.py")) if "apply(" in path.read_text(encoding="utf-8")]
    assert not applied, f"rule files applying rules themselves instead of calling a primitive: {applied}"


def test_a_composite_runs_in_both_modes_and_takes_no_rule(restored_tables):
    @composite(np.fliplr)
    def fliplr(m):
        return m[:, ::-1]

    m, w = np.array([[1.0, 2.0, 3.0]]), np.array([1.0, 10.0, 100.0])
    (g,) = pb.gradient(lambda m: np.sum(np.fliplr(m) ** 2 * w), m)
    np.testing.assert_allclose(g, 2.0 * m * w[::-1])
    _, t = pb.jvp(lambda m: np.fliplr(m) * w, (m,), (np.array([[1.0, 0.0, 0.0]]),))
    np.testing.assert_allclose(t, [[0.0, 0.0, 100.0]])
    with pytest.raises(TypeError, match="composing"):
        pb.rrule(np.fliplr)(lambda m: (np.fliplr(m), lambda g: (np.fliplr(g),)))
    with pytest.raises(TypeError, match="is a ufunc"):
        composite(np.sin)(lambda x: x)


def test_nondifferentiable_functions_run_on_plain_values(restored_tables):
    x = np.array([0.0, 1.0, 4.0])
    with pytest.raises(NotImplementedError, match="histogram_bin_edges"):
        pb.gradient(lambda x: np.sum(np.histogram_bin_edges(x, 2)), x)
    nondifferentiable(np.histogram_bin_edges)
    seen = []

    def f(x):
        edges = np.histogram_bin_edges(x, 2)
        seen.append(type(edges))
        return np.sum(x[x < edges[1]] ** 2)

    (g,) = pb.gradient(f, x)
    assert seen == [np.ndarray]
    np.testing.assert_array_equal(g, [0.0, 2.0, 0.0])
    # A rule may then be registered for it after all.
    pb.rrule(np.histogram_bin_edges)(lambda a, bins: (np.histogram_bin_edges(a, bins), lambda g: (None, None)))
    np.testing.assert_array_equal(pb.gradient(f, x)[0], [0.0, 2.0, 0.0])


def test_a_new_reverse_rule_takes_the_old_forward_rule_with_it(restored_tables):
    x, v = np.array([0.3, -1.2]), np.array([1.0, 2.0])

    @pb.rrule(np.sin)
    def doubled_sin(x):
        return np.sin(x), lambda g: (2.0 * g * np.cos(x),)

    assert np.sin not in FORWARD_RULES
    np.testing.assert_allclose(pb.gradient(lambda x: np.sum(np.sin(x)), x)[0], 2.0 * np.cos(x))
    np.testing.assert_allclose(pb.jvp(np.sin, (x,), (v,))[1], 2.0 * np.cos(x) * v)  # transposed: the modes agree

    @pb.frule(np.sin)
    def tripled_sin(primals, tangents):
        return np.sin(primals[0]), 3.0 * np.cos(primals[0]) * tangents[0]

    np.testing.assert_allclose(pb.jvp(np.sin, (x,), (v,))[1], 3.0 * np.cos(x) * v)
    assert REVERSE_RULES[np.sin] is doubled_sin and FORWARD_RULES[np.sin] is tripled_sin


def test_a_forward_rule_registered_first_stays_with_the_reverse_rule(restored_tables):
    @pb.primitive
    def scale(x):
        return 3.0 * x

    @pb.frule(scale)
    def scale_frule(primals, tangents):
        return scale(primals[0]), 3.0 * tangents[0]

    with pytest.raises(NotImplementedError, match="forward rule but no reverse rule"):
        pb.gradient(lambda x: np.sum(scale(x)), np.ones(2))

    @pb.rrule(scale)
    def scale_rule(x):
        return scale(x), lambda g: (3.0 * g,)

    assert FORWARD_RULES[scale] is scale_frule and forward_rule_of(scale_rule) is scale_frule
    assert pb.gradient(lambda x: np.sum(scale(x)), np.ones(2))[0].tolist() == [3.0, 3.0]


def test_view_marks_the_result_as_sharing_memory(restored_tables):
    x = np.arange(4.0).reshape(2, 2)

    def write_into_result(x):
        y = np.flipud(x)
        y[0, 0] = 7.0
        return np.sum(y * x)

    def rule(m):
        return np.flipud(m), lambda g: (np.flipud(g),)

    pb.rrule(np.flipud)(rule)
    pb.gradient(write_into_result, x)  # a copy as far as pullback knows: the write is allowed
    pb.rrule(np.flipud, view=True)(rule)
    # a view, as NumPy's result is: the write reaches x[1, 0], so the value is 14 x00 + 2 x01 x11
    val, (g,) = pb.withgradient(write_into_result, x)
    assert val == write_into_result(x.copy()) == 6.0
    np.testing.assert_allclose(g, [[14.0, 2.0 * 3.0], [0.0, 2.0 * 1.0]])


def test_keyword_arguments_reach_a_rule_in_their_positions(restored_tables):
    calls = []

    @pb.rrule(np.flipud)
    def rule(m):
        calls.append(type(m))
        return np.flipud(m), lambda g: (np.flipud(g),)

    (g,) = pb.gradient(lambda m: np.sum(np.flipud(m=m) * np.array([[1.0], [2.0]])), np.zeros((2, 1)))
    assert calls == [np.ndarray] and g.tolist() == [[2.0], [1.0]]
