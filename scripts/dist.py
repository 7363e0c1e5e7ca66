"""Build the sdist and the wheel as a user's clean clone would, and check them as indexes do.

The build reads a copy of what a clone holds (the package, its metadata files and tests/, which
the sdist leaves out), never the working tree itself: a ``build/`` folder or an ``*.egg-info``
left by an editable install would otherwise fill in what the build configuration misses.
``python -m build`` makes the sdist, then the wheel from the unpacked sdist; ``twine check
--strict`` reads their metadata as PyPI does.

    python scripts/dist.py [--outdir DIR]        (default: dist/, emptied first)

Standard library only; ``build`` and ``twine`` must be installed in the running Python.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What a clean clone gives the build: MANIFEST.in decides what of it the sdist keeps.
SOURCES = ("pyproject.toml", "MANIFEST.in", "README.md", "LICENSE", "pytest_eagersession", "tests")
LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc")


def clean_copy(destination: Path) -> Path:
    """Copy the build's sources into ``destination`` (which must not exist); return it."""
    destination.mkdir(parents=True)
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=LEFT_OUT)
        else:
            shutil.copy2(source, destination / name)
    return destination


def build(outdir: Path) -> tuple[Path, Path]:
    """Build into ``outdir``; ``(wheel, sdist)``. Raises CalledProcessError with pip's output."""
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="eagersession-build-") as scratch:
        tree = clean_copy(Path(scratch) / "checkout")
        subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(outdir), str(tree)],
            check=True,
            capture_output=True,
            text=True,
        )
    (wheel,) = outdir.glob("*.whl")
    (sdist,) = outdir.glob("*.tar.gz")
    return wheel, sdist


def check(*distributions: Path) -> subprocess.CompletedProcess[str]:
    """``twine check --strict`` on the distributions: what an index would refuse."""
    return subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, distributions)],
        capture_output=True,
        text=True,
        check=False,
    )


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--outdir", type=Path, default=ROOT / "dist")
    options = parser.parse_args(argv)
    shutil.rmtree(options.outdir, ignore_errors=True)
    try:
        wheel, sdist = build(options.outdir)
    except subprocess.CalledProcessError as error:
        print(error.stdout, error.stderr, sep="\n", file=sys.stderr)
        return 1
    checked = check(wheel, sdist)
    print(checked.stdout.strip(), checked.stderr.strip(), sep="\n")
    if checked.returncode == 0:
        print(f"built {wheel.name} and {sdist.name} in {options.outdir}")
    return checked.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
