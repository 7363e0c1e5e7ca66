"""The package's shape as docs/architecture.md states it: layers, no import loop, short modules."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_eagersession"
BENCHMARKS = ROOT / "benchmarks"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: The most lines of code a module may have, docstrings, comments and blank lines aside.
MAX_CODE_LINES = 400
#: The folder whose modules may import pytest: the plugin and what it registers.
PYTEST_FOLDER = "plugin"


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


def documented_folders() -> dict[str, int]:
    """Each layer's folder and its place, from the first table in docs/architecture.md."""
    rows = re.findall(r"^\| (\d) \| `(\w+)/` \| ", ARCHITECTURE.read_text(), re.MULTILINE)
    return {folder: int(order) for order, folder in rows}


FOLDERS = documented_folders()


def folder_of(name: str) -> str:
    """``core`` for ``core.session``; a package's own ``__init__`` is in its folder."""
    return name.split(".")[0]


def code_lines(path: Path) -> int:
    """The lines of ``path`` that hold code: not docstrings, comments or blank lines."""
    source = path.read_text()
    tree = ast.parse(source)
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for index, statement in enumerate(body):
            is_text = (
                isinstance(statement, ast.Expr)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
            )
            # A docstring opens a module, class or function; an attribute's follows its
            # assignment.
            follows = index > 0 and isinstance(body[index - 1], ast.Assign | ast.AnnAssign)
            if is_text and (index == 0 or follows):
                end = statement.end_lineno or statement.lineno
                docstrings.update(range(statement.lineno, end + 1))
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in skipped or token.type == tokenize.ENDMARKER:
            continue
        lines.update(n for n in range(token.start[0], token.end[0] + 1) if n not in docstrings)
    return len(lines)


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


def test_code_lines_count_no_docstring_comment_or_blank(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        '"""A module."""\n\n'
        "# a comment\n"
        "X = 1\n"
        '"""What X is."""\n\n'
        "def f(\n    a: int,\n) -> int:\n"
        '    """Twice\n\n    a.\n    """\n'
        "    return 2 * a  # doubled\n"
    )
    assert code_lines(module) == 5  # X, the three lines of f's signature, its return


@pytest.mark.parametrize(
    "path",
    [*sorted(PACKAGE.rglob("*.py")), *sorted(BENCHMARKS.rglob("*.py"))],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_no_module_has_more_than_400_lines_of_code(path: Path) -> None:
    assert code_lines(path) <= MAX_CODE_LINES


def test_each_layer_is_a_folder_in_the_order_the_page_gives() -> None:
    assert list(FOLDERS) == ["base", "heap", "_tf", "core", "reports", "assertions", "plugin"]
    misplaced = [
        f"{name} (layer {LAYERS[name]}, folder {folder_of(name)})"
        for name in MODULES
        if name and LAYERS[name] != FOLDERS.get(folder_of(name))
    ]
    assert misplaced == []


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
    assert not uses_pytest or folder_of(name) == PYTEST_FOLDER
