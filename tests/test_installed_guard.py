"""tests/conftest.py's guard for runs against the installed package (./scripts/installed and
every pair of the version matrix): it refuses the tree's own package and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_eagersession

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_eagersession"


def test_a_run_against_the_installed_package_refuses_the_trees(tmp_path: Path) -> None:
    """tests/conftest.py's guard: with EAGERSESSION_TEST_INSTALLED naming a tree, a run whose
    package comes from that tree's package folder is a usage error, any other runs."""
    from_tree = Path(pytest_eagersession.__file__).resolve().parent == PACKAGE

    def inner_run(tree: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                *(sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_readme.py")),
                *("-k", "diary_patterns", "-p", "no:cacheprovider", "-q"),
            ],
            env={**os.environ, "EAGERSESSION_TEST_INSTALLED": str(tree)},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    elsewhere = inner_run(tmp_path)  # a tree the package is not from
    assert elsewhere.returncode == 0, elsewhere.stdout + elsewhere.stderr
    here = inner_run(ROOT)
    if from_tree:  # the development environment: the editable install is the tree's package
        assert here.returncode == pytest.ExitCode.USAGE_ERROR
        assert "pytest_eagersession was imported from the source tree" in here.stderr
    else:  # the installed wheel: it passes
        assert here.returncode == 0, here.stdout + here.stderr
