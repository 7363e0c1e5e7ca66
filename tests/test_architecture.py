"""The package's shape as docs/architecture.md states it: layers, no import loop, short modules."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_eagersession"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LINES = 600
#: The modules that may import pytest: the plugin and what it registers.
PYTEST_MODULES = {"plugin", "verdicts", "scopes", "summary", "peak_check"}


def module_name(path: Path) -> str:
    """``assertions.leaks`` for ``pytest_eagersession/assertions/leaks.py``."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def documented_layers() -> dict[str, int]:
    """Each module's layer, from the table in docs/architecture.md (``assertions/``: a package)."""
    rows = re.findall(r"^\| (\d) \| `([\w/.]+)` \|", ARCHITECTURE.read_text(), re.MULTILINE)
    layers: dict[str, int] = {}
    for layer, name in rows:
        if name.endswith("/"):
            package = name.rstrip("/")
            for module in MODULES:
                if module == package or module.startswith(package + "."):
                    layers[module] = int(layer)
        else:
            layers[module_name(PACKAGE / name)] = int(layer)
    return layers


LAYERS = documented_layers()


def imports_of(name: str) -> Iterator[tuple[str, int]]:
    """The package modules ``name`` imports (anywhere: module level, functions, TYPE_CHECKING)."""
    path = MODULES[name]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        for target in targets:
            if target == "pytest_eagersession" or target.startswith("pytest_eagersession."):
                module = target.removeprefix("pytest_eagersession").lstrip(".")
                if module in MODULES and module != name and module != "":
                    yield module, node.lineno


def graph() -> dict[str, set[str]]:
    return {name: {target for target, _ in imports_of(name)} for name in MODULES}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_loop() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_loop_even_through_type_only_imports() -> None:
    assert cycles(graph()) == []


def test_every_module_is_in_the_architecture_page() -> None:
    # Packages' __init__ modules are covered by their package's row or their own.
    assert sorted(set(MODULES) - set(LAYERS) - {""}) == []
    assert sorted(set(LAYERS) - set(MODULES)) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_over_600_lines(name: str) -> None:
    assert len(MODULES[name].read_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("name", sorted(set(MODULES) - {""}))
def test_a_module_imports_nothing_from_a_higher_layer(name: str) -> None:
    higher = [
        f"{target} (layer {LAYERS[target]}, line {line})"
        for target, line in imports_of(name)
        if LAYERS[target] > LAYERS[name] and not target.startswith(name + ".")
    ]
    assert higher == [], f"{name} (layer {LAYERS[name]}) imports from above"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_only_the_plugins_modules_import_pytest(name: str) -> None:
    tree = ast.parse(MODULES[name].read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    uses_pytest = bool(imported & {"pytest", "_pytest"})
    assert not uses_pytest or name in PYTEST_MODULES
