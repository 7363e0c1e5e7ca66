"""The demo suite (``examples/``) under the plugin, and each test's verdict checked.

Tests whose name says *leaks* must fail with a leak report (an error at teardown); every other
test must pass. pytest runs with the running Python, from a scratch folder and with the
examples given by path, so that the package it imports is the one installed in that Python,
never this source tree by accident. Prints pytest's output (with the tables of the heaviest
tests and of the memory that stayed after each; the picture of it goes to
``build/demo-memory.svg``), then the verdicts; the exit status
is pytest's when it broke down (2 or more), else 1 if a verdict is not the promised one.

    python scripts/demo_suite.py [PYTEST_ARGS]

Standard library only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
#: The picture of the run's memory after each test (``build/`` is git's to ignore).
PICTURE = ROOT / "build" / "demo-memory.svg"


def promised(nodeid: str) -> str:
    """The outcome a demo test's name promises."""
    return "error" if "leaks" in nodeid.rsplit("::", 1)[-1] else "passed"


def main(argv: Sequence[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="eagersession-demo-") as scratch:
        report = Path(scratch) / "report.json"
        status = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(EXAMPLES),
                "--rootdir",
                str(ROOT),
                "-p",
                "no:cacheprovider",
                f"--eagersession-json={report}",
                "--eagersession-most-memory=5",
                "--eagersession-most-retained=5",
                f"--eagersession-plot={PICTURE}",
                *argv,
            ],
            cwd=scratch,
            check=False,
        ).returncode
        if status > 1:
            return status
        tests = json.loads(report.read_text())["tests"]
    wrong = [test["nodeid"] for test in tests if test["outcome"] != promised(test["nodeid"])]
    print(f"\n== the run's memory after each test, drawn: {PICTURE}")
    print(f"== verdicts: {len(tests) - len(wrong)} of {len(tests)} as their names promise")
    for nodeid in wrong:
        print("   unexpected verdict:", nodeid)
    return 1 if wrong or not tests else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
