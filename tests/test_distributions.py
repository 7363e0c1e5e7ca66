"""What users install holds the whole package: the wheel and the sdist, built from this checkout.

Both are built once from a clean copy of the checkout, as a user's ``python -m build`` would
(``scripts/dist.py``: the sdist first, the wheel from the sdist), and compared with the
package's files on disk: a subpackage that the build configuration misses fails here, not in a
user's environment. ``./scripts/test`` then installs the same wheel in a fresh environment and
runs this suite against it.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import load_script

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_eagersession"

dist = load_script(ROOT / "scripts" / "dist.py", "dist")


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path


def package_files() -> set[str]:
    """Every module and data file of the package in the source tree, relative to the root."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    wheel, sdist = dist.build(tmp_path_factory.mktemp("dist"))
    return Built(wheel, sdist)


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_the_source_tree_has_subpackages() -> None:
    # the comparisons below would prove little about a flat package
    assert "pytest_eagersession/_tf/__init__.py" in package_files()
    assert "pytest_eagersession/assertions/__init__.py" in package_files()
    assert "pytest_eagersession/py.typed" in package_files()


def test_the_wheel_holds_every_module_and_nothing_else(built: Built) -> None:
    names = wheel_names(built.wheel)
    in_package = {name for name in names if name.startswith("pytest_eagersession/")}
    assert sorted(package_files() - in_package) == [], "missing from the wheel"
    assert sorted(in_package - package_files()) == [], "in the wheel, not in the source tree"
    others = {name.split("/")[0] for name in names - in_package}
    assert others == {built.wheel.name.split("-py3")[0] + ".dist-info"}


def test_the_wheel_declares_its_license_and_plugin(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as archive:
        info = built.wheel.name.split("-py3")[0] + ".dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        license_text = archive.read(f"{info}/licenses/LICENSE").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()
    assert "Apache License" in license_text
    assert "[pytest11]\neagersession = pytest_eagersession.plugin" in entry_points


def test_the_sdist_holds_every_module_and_the_license(built: Built) -> None:
    top = built.sdist.name.removesuffix(".tar.gz")
    with tarfile.open(built.sdist) as archive:
        names = {name.removeprefix(f"{top}/") for name in archive.getnames()}
    assert sorted(package_files() - names) == []
    assert {"LICENSE", "README.md", "pyproject.toml", "PKG-INFO"} <= names
    # setuptools would add tests/test_*.py alone, without the repository they need
    assert not any(name.startswith("tests/") for name in names)


def test_the_sdist_installs_the_same_modules(built: Built, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            str(built.sdist),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    installed = {
        path.relative_to(target).as_posix()
        for path in (target / "pytest_eagersession").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert installed == package_files()


def test_the_metadata_passes_the_package_index_checks(built: Built) -> None:
    checked = dist.check(built.wheel, built.sdist)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2
