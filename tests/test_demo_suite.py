"""The demo suite gets the verdict each test's name promises, with and without xdist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import CHAIN_BUDGET, load_script

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: The rule ./scripts/demo checks the demo suite by: *leaks* tests fail with a report.
promised = load_script(EXAMPLES.parent / "scripts" / "demo_suite.py", "demo_suite").promised


@pytest.mark.parametrize("workers", [None, "2"])
def test_examples_get_the_promised_verdicts(pytester: pytest.Pytester, workers) -> None:
    report = pytester.path / "report.json"
    args = [str(EXAMPLES), "-p", "no:cacheprovider", CHAIN_BUDGET, f"--eagersession-json={report}"]
    if workers:
        args += ["-n", workers]
    result = pytester.runpytest_subprocess(*args, timeout=300)
    tests = json.loads(report.read_text())["tests"]
    outcomes = {test["nodeid"].split("examples/")[-1]: test["outcome"] for test in tests}
    assert len(outcomes) == 10
    assert outcomes == {nodeid: promised(nodeid) for nodeid in outcomes}
    result.assert_outcomes(passed=10, errors=4)
    result.stdout.fnmatch_lines(["*held by test_caches.Registry.weights -> ResourceVariable*"])


def readme_report_lines() -> list[str]:
    text = (EXAMPLES.parent / "README.md").read_text()
    block = text.split("<!-- report:start -->", 1)[1].split("<!-- report:end -->", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("```")]


def test_the_readme_shows_what_the_plugin_prints(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(
        str(EXAMPLES / "test_caches.py"),
        str(EXAMPLES / "test_data_pipeline.py"),
        str(EXAMPLES / "test_model_training.py"),
        "-p",
        "no:cacheprovider",
        CHAIN_BUDGET,
        "--rootdir",
        str(EXAMPLES.parent),
        timeout=300,
    )
    lines = readme_report_lines()
    assert len(lines) == 28
    # pytest pads the section titles to the terminal's width: compare them without the padding
    patterns = [f"*{line.strip('_ =')}*" if line[0] in "_=" else line for line in lines]
    patterns = [pattern.replace("[", "[[]") for pattern in patterns]  # fnmatch's [ is a class
    result.stdout.fnmatch_lines(patterns)
