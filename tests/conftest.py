"""The test suite's own setup: pytester, and a guard for runs against the installed package."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import pytest_eagersession

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    """Under ``./scripts/installed`` (``EAGERSESSION_TEST_INSTALLED`` names the source tree),
    refuse a run that imports the package from the tree instead of the installed wheel."""
    tree = os.environ.get("EAGERSESSION_TEST_INSTALLED")
    if not tree:
        return
    imported = Path(pytest_eagersession.__file__).resolve()
    # the tree's own package folder (an environment may live under the tree: .venvs-matrix/)
    if imported.is_relative_to(Path(tree).resolve() / "pytest_eagersession"):
        raise pytest.UsageError(
            f"EAGERSESSION_TEST_INSTALLED is set, but pytest_eagersession was imported from the "
            f"source tree ({imported}), not from the installed package: run from outside the tree"
        )
