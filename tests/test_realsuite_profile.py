"""The real-suite gate's report: the profile of the plugin's time, read from the JSON report's
timings, and its suites (each library's tests on their own, a suite skipped where its library
is not installed); how its sides run (in turn, or side by side)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from support import load_script

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gate import main, reading, records, reporting, running, suites

side_by_side = load_script(
    Path(__file__).parent.parent / "benchmarks" / "side_by_side.py", "side_by_side"
)
small_tests = load_script(
    Path(__file__).parent.parent / "benchmarks" / "small_tests.py", "small_tests"
)


def test_the_profile_sums_phases_apart_for_leaking_tests_and_names_the_dearest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
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
    profile = reading.read_profile(report, slowest=2)
    assert profile["tests"] == 4
    assert profile["leaking_tests"] == 1
    assert profile["phases_s"]["close"] == {"clean": 0.302, "leaking": 0.002}
    assert profile["phases_s"]["explain"] == {"clean": 0.0, "leaking": 0.5}
    assert [test["nodeid"] for test in profile["slowest"]] == ["a.py::leaky", "a.py::also_clean"]
    reading.print_profile(profile, wall_s=10.0)
    out = capsys.readouterr().out
    assert "== the plugin's time by phase: 0.8 s of the 10.0 s run (4 tests, 1 leaking)" in out
    reading.print_profile(profile, wall_s=10.0, suite="sonnet")
    out = capsys.readouterr().out
    assert "== sonnet: the plugin's time by phase: 0.8 s of the 10.0 s run" in out
    assert reading.read_profile(tmp_path / "missing.json") == {}


def test_each_library_is_a_suite_of_its_own_staged_under_another_name() -> None:
    names = [suite.name for suite in suites.SUITES]
    assert names == ["keras", "sonnet"]
    for suite in suites.SUITES:
        assert suite.package not in (suite.module, suite.name)  # never shadows the library
        assert len(set(suite.files)) == len(suite.files)
    paths = reading.gate_paths()
    assert len(set(paths)) == len(paths)
    assert "_gate/sonnet_src/linear_test.py" in paths
    assert "tf_style/test_tf_testcase.py" in suites.SUITES[0].paths()


@pytest.mark.parametrize("suite", suites.SUITES, ids=lambda suite: suite.name)
def test_the_installed_library_ships_every_test_file_of_its_suite(suite: Any) -> None:
    source = suites.tests_root(suite)
    if source is None:
        pytest.skip(f"{suite.distribution} is not installed")
    try:
        installed = importlib.metadata.version(suite.distribution)
    except importlib.metadata.PackageNotFoundError:  # another distribution of it (keras-nightly)
        installed = "another distribution"
    if installed != suite.chosen_from:
        # (an older pair of the matrix: the gate runs on the newest and oldest pairs only)
        pytest.skip(f"{suite.distribution} {installed}: the list names {suite.chosen_from}'s")
    assert [name for name in suite.files if not (source / name).is_file()] == []


def test_a_suite_whose_library_is_missing_is_skipped_and_said_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = suites.Suite(
        name="absent",
        library="Absent",
        distribution="absent-library",
        module="no_such_module_for_the_gate",
        folder="src",
        package="absent_src",
        files=("a_test.py",),
        install="nothing installs it",
    )
    assert suites.stage(absent) is None
    with pytest.raises(SystemExit, match="Absent is not installed"):
        suites.stage(dataclasses.replace(absent, required=True))
    monkeypatch.setattr(main, "SUITES", (absent,))
    assert main.main([]) == 2
    out = capsys.readouterr().out
    assert (
        "realsuite: SKIPPED the absent suite: absent-library is not installed here "
        "(nothing installs it)" in out
    )
    assert "VERDICT: INCOMPLETE: no suite could run" in out


def run(suite: str, name: str, results: dict[str, str], wall: float) -> Any:
    tests = {}
    for key, outcome in results.items():
        tests[key] = records.TestResult()
        tests[key].add(outcome)
    return records.Run(name, 0, wall, wall * 2, tests, {}, Path("log"), suite)


def test_the_suites_table_shows_each_suite_its_ratio_and_one_not_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    off = run("keras", "off", {"a::x": "passed", "a::y": "skipped"}, 10.0)
    on = run("keras", "on", {"a::x": "passed", "a::y": "skipped"}, 12.0)
    other_off = run("sonnet", "off", {"b::x": "passed"}, 5.0)
    both = running.merged([off, other_off])
    assert set(both.results) == {"a::x", "a::y", "b::x"}
    assert (both.wall_s, both.cpu_s, both.suite) == (15.0, 30.0, "all")
    assert reporting.ratios(off, on) == {"wall": 1.2, "cpu": 1.2}
    figures = main.report_suite(suites.SUITES[0], off, on)
    assert figures["ratio"] == {"wall": 1.2, "cpu": 1.2}
    assert figures["broken"] == 0
    out = capsys.readouterr().out
    assert "==== the keras suite:" in out
    assert "plugin on / plugin off: 1.20x wall time, 1.20x CPU time" in out
    reporting.print_suites({"keras": figures, "sonnet": {"skipped": "dm-sonnet is not installed"}})
    lines = capsys.readouterr().out.splitlines()
    keras = next(line for line in lines if line.strip().startswith("keras"))
    assert keras.split() == ["keras", "2", "10.0s", "12.0s", "1.20x", "1.20x", "0", "0"]
    assert "   sonnet    not run: dm-sonnet is not installed" in lines


def test_rounds_run_in_abba_order_so_that_drift_weighs_on_both_sides() -> None:
    assert main.abba(["off", "on"], 1) == [(0, "off"), (0, "on")]
    assert main.abba(["off", "on"], 3) == [
        (0, "off"),
        (0, "on"),
        (1, "on"),
        (1, "off"),
        (2, "off"),
        (2, "on"),
    ]
    assert main.abba(["on"], 2) == [(0, "on"), (1, "on")]


def test_a_later_round_adds_its_times_and_its_exit_status_to_the_first_rounds_outcomes(
    tmp_path: Path,
) -> None:
    first = records.Run("on", 0, 50.0, 60.0, {"t": records.TestResult()}, {}, tmp_path)
    later = records.Run("on", 1, 52.0, 61.0, {}, {}, tmp_path)
    both = first.timed_with(later)
    assert (both.wall_s, both.cpu_s, both.rounds) == (102.0, 121.0, 2)
    assert both.results == first.results
    assert both.returncode == 1
    assert both.figures()["rounds"] == 2


def test_the_number_of_rounds_is_checked() -> None:
    options, _, _ = main.split_arguments(["--rounds", "2"])
    assert options.rounds == 2
    with pytest.raises(SystemExit):
        main.split_arguments(["--rounds", "0"])


SESSION_LOG = """
import os
import time


def pytest_sessionstart(session):
    side = "on" if session.config.pluginmanager.has_plugin("eagersession") else "off"
    with open(os.environ["GATE_SESSION_LOG"], "a") as log:
        log.write(f"{side} {os.getpid()} start {time.time()}\\n")


def pytest_sessionfinish(session):
    side = "on" if session.config.pluginmanager.has_plugin("eagersession") else "off"
    with open(os.environ["GATE_SESSION_LOG"], "a") as log:
        log.write(f"{side} {os.getpid()} end {time.time()}\\n")
"""

BURN_WITH_THE_PLUGIN = """
import time


def test_work(request):
    if request.config.pluginmanager.has_plugin("eagersession"):
        end = time.process_time() + 1.5
        while time.process_time() < end:
            pass
"""


WAIT_FOR_THE_FILLER_THEN_BURN = """
import os
import time


def test_work(request):
    if request.config.pluginmanager.has_plugin("eagersession"):
        # The plugin-off side ends first and runs again as a filler: wait until that second
        # run has started (its conftest logs it), so that the test does not hang on how long
        # a loaded machine takes to start pytest.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with open(os.environ["GATE_SESSION_LOG"]) as log:
                if sum(line.startswith("off ") and " start " in line for line in log) >= 2:
                    break
            time.sleep(0.05)
        end = time.process_time() + 1.5
        while time.process_time() < end:
            pass
"""


def running_with(argument: str) -> list[int]:
    """The processes whose command line holds ``argument`` (Linux's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and argument in (entry / "cmdline").read_text():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_side_by_side_runs_both_sides_at_once_and_keeps_the_machine_busy_until_both_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite_dir = tmp_path / "suite"
    suite_dir.mkdir()
    (suite_dir / "conftest.py").write_text(SESSION_LOG)
    (suite_dir / "test_work.py").write_text(WAIT_FOR_THE_FILLER_THEN_BURN)
    log = tmp_path / "sessions.txt"
    monkeypatch.setenv("GATE_SESSION_LOG", str(log))
    monkeypatch.setattr(running, "ROOT", tmp_path)
    monkeypatch.setattr(running, "STAGE", tmp_path / "stage")
    suite = dataclasses.replace(suites.SUITES[0], name="tiny")
    paths = [str(suite_dir / "test_work.py")]

    runs = running.run_side_by_side(suite, paths, {"off": [], "on": []})

    assert {name: run.counts()["passed"] for name, run in runs.items()} == {"off": 1, "on": 1}
    assert all(run.side_by_side for run in runs.values())
    # Each side's CPU time is its own: the plugin-on side alone burned 1.5 s.
    assert runs["on"].cpu_s >= 1.4
    assert runs["off"].cpu_s < runs["on"].cpu_s - 1.0
    assert runs["off"].wall_s < runs["on"].wall_s
    events = [line.split() for line in log.read_text().splitlines()]
    starts = {pid: float(at) for side, pid, what, at in events if what == "start"}
    ends = {pid: float(at) for side, pid, what, at in events if what == "end"}
    on_pids = [pid for side, pid, what, _ in events if side == "on" and what == "start"]
    off_pids = [pid for side, pid, what, _ in events if side == "off" and what == "start"]
    assert len(on_pids) == 1, "the side that ends last runs once"
    on_pid = on_pids[0]
    # The plugin-off side started with the other, and ran again (untimed) until it ended.
    assert starts[off_pids[0]] < ends[on_pid]
    assert len(off_pids) >= 2
    assert starts[off_pids[1]] < ends[on_pid]
    # Nothing of ours runs on: the filler running when the other side ended was killed.
    assert not [pid for pid in running_with(str(suite_dir)) if pid != os.getpid()]
    # The fillers leave no files that a later reader could take for a timed run's.
    assert not list((tmp_path / "stage" / "results").glob("*filler*"))


def test_side_by_side_splits_the_workers_and_needs_both_sides() -> None:
    options, both, _ = main.split_arguments(["--side-by-side", "-n", "4"])
    assert options.side_by_side
    assert both == ["-n", "2"]
    options, both, _ = main.split_arguments(["--side-by-side"])
    assert both == []
    for wrong in (["-n", "3"], ["-n", "auto"], ["-n", "1"], ["--only", "on"]):
        with pytest.raises(SystemExit):
            main.split_arguments(["--side-by-side", *wrong])


def test_any_suite_runs_side_by_side_and_its_report_tells_the_cost_and_what_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "test_work.py").write_text(BURN_WITH_THE_PLUGIN)
    monkeypatch.chdir(tmp_path)
    figures_path = tmp_path / "figures.json"

    out_dir = tmp_path / "out"
    arguments = ["--json", str(figures_path), "--out", str(out_dir), "--", "test_work.py"]
    assert side_by_side.main(arguments) == 0

    out = capsys.readouterr().out
    figures = json.loads(figures_path.read_text())
    assert figures["runs"]["on"]["side_by_side"] is True
    # Only the plugin-on side burns; each side's start-up alone took up to 1.5 s of CPU in CI's
    # matrix (Python 3.12), so the two are compared, not each to a fixed figure.
    assert figures["runs"]["on"]["cpu_s"] - figures["runs"]["off"]["cpu_s"] >= 1.0
    assert figures["ratio"]["wall"] > 1.0
    assert figures["differences"] == 0
    assert "plugin on / plugin off:" in out
    assert "tests whose outcome differs: 0" in out
    # One test ran a side, so the on side's extra CPU is the plugin's cost per test. The JSON
    # rounds each side's CPU to 10 ms (the per-test figure is from unrounded times), so their
    # difference can be off by up to 10 ms: 1805.58 against 1800 in CI's TF 2.16 cell.
    runs = figures["runs"]
    added_ms = (runs["on"]["cpu_s"] - runs["off"]["cpu_s"]) * 1e3
    assert figures["per_test_ms"]["cpu"] == pytest.approx(added_ms, abs=10.001)
    assert figures["per_test_ms"]["cpu"] >= 1000
    assert "the plugin's cost per test: +" in out
    assert figures["profile"]["tests"] == 1  # the plugin's JSON report was read
    assert sorted(path.name for path in out_dir.iterdir()) == [
        f"{kind}-{side}-round1"
        for kind in ("eagersession.json", "junit.xml", "output.txt")
        for side in ("off", "on")
        if not (kind == "eagersession.json" and side == "off")
    ]


def test_the_side_by_side_script_needs_pytest_arguments() -> None:
    with pytest.raises(SystemExit):
        side_by_side.main(["--rounds", "1"])


def test_the_small_suite_has_the_tests_it_says(tmp_path: Path) -> None:
    import subprocess
    import sys

    count = small_tests.write_suite(tmp_path, 65)
    assert count == 60  # ten modules of three functions, each parametrized alike
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:eagersession"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "60 tests collected" in listed.stdout


def test_the_collector_time_plugin_counts_every_collection_whoever_starts_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_collects="""
        import gc

        def test_collects_three_times():
            for _ in range(3):
                gc.collect()
        """
    )
    benchmarks = Path(__file__).resolve().parent.parent / "benchmarks"
    pytester.syspathinsert(benchmarks)
    counted = pytester.runpytest("-p", "collector_time", "-p", "no:eagersession")
    counted.assert_outcomes(passed=1)

    def collections(result: pytest.RunResult) -> int:
        line = next(line for line in result.outlines if line.startswith("collector_time:"))
        return int(line.split(" in ")[1].split()[0])

    assert collections(counted) >= 3  # the test's own, and any the interpreter started
