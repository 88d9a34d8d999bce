"""The package's shape: modules import each other in one direction, and only by public names.

The import graph is read from the source (every `import` statement, at module level or
inside a function), so a deferred import that closes a cycle is caught too.
"""

import ast
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "pullback"


def module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name, path):
    """`(module imported, names taken from it)` for every import statement in the module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names if alias.name.startswith("pullback")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("pullback"):
                target = node.module
            else:
                continue
            names = [alias.name for alias in node.names]
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            found += [(m, []) for m in submodules]
            others = [n for n in names if f"{target}.{n}" not in MODULES]
            if others:
                found.append((target, others))
    return found


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def test_the_import_graph_has_no_cycle():
    edges = {name: sorted({m for m, _ in found if m in MODULES and m != name}) for name, found in GRAPH.items()}
    state = {}

    def visit(start):
        stack = [(start, iter(edges[start]))]
        trail = [start]
        state[start] = "open"
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = "done"
                stack.pop()
                trail.pop()
                continue
            if state.get(child) == "open":
                cycle = trail[trail.index(child):] + [child]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if child not in state:
                state[child] = "open"
                trail.append(child)
                stack.append((child, iter(edges[child])))

    for name in edges:
        if name not in state:
            visit(name)


def test_no_module_imports_a_private_name_from_another():
    private = [
        f"{name} imports {n} from {target}"
        for name, found in GRAPH.items()
        for target, names in found
        for n in names
        if n.startswith("_") and not n.startswith("__") and target != name
    ]
    assert not private, "\n".join(private)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n != "pullback.__main__"))
def test_each_module_imports_alone_in_a_fresh_interpreter(name):
    result = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
