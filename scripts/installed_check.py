"""The installed package, checked as a user meets it: where it comes from, and what it registers.

Run with the Python of the environment under test, from outside the source tree; the tree's
root is in ``EAGERSESSION_TEST_INSTALLED`` (set by scripts/installed-env.sh). Fails unless the
package is imported from that environment, every module of the tree's package imports from it,
and ``pytest --help`` and ``pytest --markers`` list every option, ini key and the marker.

Standard library only, besides the package under test.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def modules(package: Path) -> list[str]:
    """The dotted names of every module in the package folder ``package``."""
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def pytest_output(*args: str) -> str:
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *args],
            cwd=scratch,
            capture_output=True,
            text=True,
            check=True,
        )
    return done.stdout


def main() -> int:
    tree = Path(os.environ["EAGERSESSION_TEST_INSTALLED"]).resolve()
    import pytest_eagersession

    where = Path(pytest_eagersession.__file__).resolve().parent
    if where == tree / "pytest_eagersession":
        print(f"pytest_eagersession was imported from the source tree: {where}")
        return 1
    problems = []
    names = modules(tree / "pytest_eagersession")
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            problems.append(f"{name}: {error}")
            continue
        if not Path(str(module.__file__)).resolve().is_relative_to(where):
            problems.append(f"{name}: imported from {module.__file__}")

    from pytest_eagersession.plugin.settings import MARKER_HELP, OPTIONS

    help_text = pytest_output("--help")
    for option in OPTIONS:
        if option.flag not in help_text:
            problems.append(f"pytest --help does not list {option.flag}")
        if option.ini_help is not None and f"{option.key} " not in help_text:
            problems.append(f"pytest --help does not list the ini key {option.key}")
    marker = MARKER_HELP.split(":", 1)[0]
    if marker not in pytest_output("--markers"):
        problems.append(f"pytest --markers does not list {marker}")
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{len(names)} modules import from {where}; {len(OPTIONS)} options and the marker")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
