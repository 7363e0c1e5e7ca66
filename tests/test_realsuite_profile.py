"""The real-suite gate's profile of the plugin's time, read from the JSON report's timings."""

from __future__ import annotations

import json
from pathlib import Path

from support import load_script

realsuite = load_script(Path(__file__).parent.parent / "benchmarks" / "realsuite.py", "realsuite")


def test_the_profile_sums_phases_apart_for_leaking_tests_and_names_the_dearest(
    tmp_path: Path, capsys: object
) -> None:
    timings = {"open": 0.001, "close": 0.002, "explain": 0.0, "report": 0.0, "scopes": 0.0}
    tests = [
        {"nodeid": "a.py::clean", "leaks": [], "timings": timings},
        {"nodeid": "a.py::also_clean", "leaks": [], "timings": {**timings, "close": 0.3}},
        {"nodeid": "a.py::leaky", "leaks": [{}], "timings": {**timings, "explain": 0.5}},
        {"nodeid": "a.py::no_plugin_figures", "leaks": []},
    ]
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"tests": tests}))
    profile = realsuite.read_profile(report, slowest=2)
    assert profile["tests"] == 4
    assert profile["leaking_tests"] == 1
    assert profile["phases_s"]["close"] == {"clean": 0.302, "leaking": 0.002}
    assert profile["phases_s"]["explain"] == {"clean": 0.0, "leaking": 0.5}
    assert [test["nodeid"] for test in profile["slowest"]] == ["a.py::leaky", "a.py::also_clean"]
    realsuite.print_profile(profile, wall_s=10.0)
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "the plugin's time by phase: 0.8 s of the 10.0 s run (4 tests, 1 leaking)" in out
    assert realsuite.read_profile(tmp_path / "missing.json") == {}
