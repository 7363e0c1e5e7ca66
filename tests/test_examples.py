"""The demo suite gets the verdict each test's name promises, with and without xdist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def expected_outcome(nodeid: str) -> str:
    return "error" if "leaks" in nodeid.rsplit("::", 1)[-1] else "passed"


@pytest.mark.parametrize("workers", [None, "2"])
def test_examples_get_the_promised_verdicts(pytester: pytest.Pytester, workers) -> None:
    report = pytester.path / "report.json"
    args = [str(EXAMPLES), "-p", "no:cacheprovider", f"--eagersession-json={report}"]
    if workers:
        args += ["-n", workers]
    result = pytester.runpytest_subprocess(*args, timeout=300)
    tests = json.loads(report.read_text())["tests"]
    outcomes = {test["nodeid"].split("examples/")[-1]: test["outcome"] for test in tests}
    assert len(outcomes) == 10
    assert outcomes == {nodeid: expected_outcome(nodeid) for nodeid in outcomes}
    result.assert_outcomes(passed=10, errors=4)
    result.stdout.fnmatch_lines(["*held by test_caches.Registry.weights -> ResourceVariable*"])
