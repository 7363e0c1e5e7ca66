"""Memory that stays after each test, in run order: the end-of-run table and the picture."""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

import pytest

from pytest_eagersession.core.process_memory import MemoryReading, retained
from pytest_eagersession.reports.retained_memory import MIB, most_retained, with_leaks

NUMPY_SUITE = """
    import numpy as np

    KEPT = []

    def test_small_first():
        assert sum(range(10)) == 45

    def test_keeps_200_mib():
        KEPT.append(np.ones(200 * 2**20 // 8))  # written: every page resident

    def test_uses_300_mib_and_gives_it_back():
        used = np.ones(300 * 2**20 // 8)
        assert used[-1] == 1.0

    def test_small_last():
        assert sum(range(4)) == 6
"""


def retained_of(report: dict[str, object], name: str) -> dict[str, int]:
    tests = report["tests"]
    assert isinstance(tests, list)
    [entry] = [test for test in tests if test["nodeid"].endswith(f"::{name}")]
    figures: dict[str, int] = entry["retained"]
    return figures


def run_reporting(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """The inner run in order, with the table of 3, the JSON report and ``args``."""
    return pytester.runpytest_subprocess(
        *("-p", "no:randomly", "-p", "no:cacheprovider", "--eagersession-most-retained=3"),
        "--eagersession-json=report.json",
        *args,
    )


def test_the_test_that_keeps_memory_heads_the_table_and_the_one_that_gives_it_back_is_absent(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_numpy=NUMPY_SUITE)
    result = run_reporting(pytester, "--eagersession-plot=pictures/memory.svg")  # folder made
    result.assert_outcomes(passed=4)
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "after which the most memory" in line)
    header = next(i for i in range(start, len(lines)) if lines[i].split()[:2] == ["in", "use"])
    first_row = lines[header + 1]
    assert first_row.endswith("test_numpy.py::test_keeps_200_mib")
    in_use = float(first_row.split()[0])
    assert 190 <= in_use <= 215
    assert lines[header + 2].startswith("(in use:")  # the only row: the others kept < 1 MiB

    report = json.loads((pytester.path / "report.json").read_text(encoding="utf-8"))
    kept = retained_of(report, "test_keeps_200_mib")
    given_back = retained_of(report, "test_uses_300_mib_and_gives_it_back")
    assert kept["unexplained_bytes"] == kept["in_use_bytes"]  # no TensorFlow leak explains it
    assert abs(given_back["resident_bytes"]) < 20 * MIB
    assert kept["resident_after_bytes"] - given_back["resident_after_bytes"] < 20 * MIB

    picture = (pytester.path / "pictures" / "memory.svg").read_text(encoding="utf-8")
    assert picture.startswith("<svg")
    assert picture.rstrip().endswith("</svg>")
    assert picture.count("<polyline") == 2  # resident, and the leaks' bytes (no GPU here)
    assert "test_numpy.py::test_keeps_200_mib (+" in picture
    # the step: the resident curve's second point stands about 200 MiB above its first
    resident_line = re.search(r'<polyline [^>]*points="([^"]+)"', picture)
    assert resident_line is not None
    ys = [float(point.split(",")[1]) for point in resident_line.group(1).split()]
    assert len(ys) == 4
    assert ys[1] < ys[0]  # higher on the picture (SVG's y grows downwards)
    assert abs(ys[2] - ys[1]) < (ys[0] - ys[1]) / 4  # the 300 MiB test came back down


@pytest.mark.parametrize("value", ["memory.jpg", "memory"])
def test_a_picture_path_of_another_format_is_a_usage_error(
    pytester: pytest.Pytester, value: str
) -> None:
    pytester.makepyfile(test_one="def test_one(): pass")
    result = pytester.runpytest_inprocess(f"--eagersession-plot={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--eagersession-plot*expected a path ending in .svg or .png*"])


def test_a_png_picture_is_drawn_with_matplotlib(pytester: pytest.Pytester) -> None:
    pytest.importorskip("matplotlib")
    pytester.makepyfile(test_numpy=NUMPY_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-p", "no:cacheprovider", "--eagersession-plot=memory.png"
    )
    result.assert_outcomes(passed=4)
    picture = (pytester.path / "memory.png").read_bytes()
    assert picture.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(picture) > 10_000  # curves, labels and axes, not an empty canvas


def test_a_png_picture_without_matplotlib_is_a_usage_error_that_says_what_to_install(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = importlib.util.find_spec

    def without_matplotlib(name: str, *args: Any) -> Any:
        return None if name == "matplotlib" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_matplotlib)
    pytester.makepyfile(test_one="def test_one(): pass")
    result = pytester.runpytest_inprocess("--eagersession-plot=memory.png")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--eagersession-plot*matplotlib*pip install 'pytest-eagersession[[]plot[]]'*.svg*"]
    )


def test_what_the_c_allocator_holds_free_is_not_counted_as_in_use() -> None:
    before = MemoryReading(resident=100 * MIB, allocator_free=1 * MIB)
    after = MemoryReading(resident=150 * MIB, allocator_free=21 * MIB, gpus={"GPU:0": 8 * MIB})
    figures = retained(before, after)
    assert figures is not None
    assert (figures.resident, figures.allocator_free, figures.in_use) == (
        50 * MIB,
        20 * MIB,
        30 * MIB,
    )
    assert figures.gpus == {"GPU:0": 8 * MIB}
    assert retained(MemoryReading(None, None), after) is None


def test_the_leaks_explain_their_bytes_and_the_rest_is_other() -> None:
    figures = retained(MemoryReading(0, 0), MemoryReading(10 * MIB, 0))
    assert figures is not None
    entry = with_leaks(figures.to_json(), [{"nbytes": 4 * MIB}, {"nbytes": None}])
    assert (entry["leaked_bytes"], entry["unexplained_bytes"]) == (4 * MIB, 6 * MIB)
    entries = [
        {"nodeid": "a", "retained": {"in_use_bytes": 5 * MIB}},
        {"nodeid": "b", "retained": {"in_use_bytes": MIB - 1}},  # under the floor
        {"nodeid": "c", "retained": {"in_use_bytes": 9 * MIB}},
        {"nodeid": "d"},
    ]
    assert [entry["nodeid"] for entry in most_retained(entries, 5)] == ["c", "a"]
    assert [entry["nodeid"] for entry in most_retained(entries, 1)] == ["c"]


def test_under_xdist_each_worker_is_measured_and_the_controller_merges_them(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_numpy=NUMPY_SUITE)
    result = run_reporting(pytester, "--eagersession-plot=memory.svg", "-n", "2")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*MiB*test_numpy.py::test_keeps_200_mib [[]gw?[]]"])
    report = json.loads((pytester.path / "report.json").read_text(encoding="utf-8"))
    workers = {test["worker"] for test in report["tests"]}
    assert workers == {"gw0", "gw1"}
    for worker in workers:  # each worker's own run order
        orders = sorted(test["run_order"] for test in report["tests"] if test["worker"] == worker)
        assert orders == list(range(1, len(orders) + 1))
    picture = (pytester.path / "memory.svg").read_text(encoding="utf-8")
    assert ">gw0: resident, above" in picture
    assert ">gw1: resident, above" in picture
