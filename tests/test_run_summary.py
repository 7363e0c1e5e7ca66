"""The run's summary keeps each test's entry as the text its report carried, not as dicts."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from pytest_eagersession.plugin.summary import PROPERTY, RunSummary

#: An entry of the size a real test's has (Sonnet's: about 850 bytes of JSON).
ENTRY = {
    "strategy": "in_background",
    "stats": {"registered": 3, "peak_registered": 3, "deleted": 3, "pending": 0, "tracked": 9},
    "leaks": [],
    "retention": {"released": [], "kept": []},
    "timings": {"open": 0.0005, "close": 0.0003, "collect": 0.0, "explain": 0.0},
    "peak_bytes": 4096,
    "device_peak_bytes": {},
    "retained": {"resident_bytes": 0, "allocator_free_bytes": -3168, "in_use_bytes": 0},
    "run_order": 6,
}


def report(nodeid: str, when: str, outcome: str, text: str | None) -> pytest.TestReport:
    properties = [(PROPERTY, text)] if text is not None else []
    return pytest.TestReport(
        nodeid, ("t.py", 0, nodeid), {}, outcome, None, when, user_properties=properties
    )


def note_test(summary: RunSummary, nodeid: str, text: str, *, fails: bool = False) -> None:
    """A test's three reports, as pytest makes them; its entry rides on the teardown's."""
    summary.note(report(nodeid, "setup", "passed", None))
    summary.note(report(nodeid, "call", "failed" if fails else "passed", None))
    summary.note(report(nodeid, "teardown", "passed", text))


def test_each_entry_is_read_back_whole_with_its_outcome(pytester: pytest.Pytester) -> None:
    summary = RunSummary(pytester.parseconfig(), None)
    note_test(summary, "t.py::a", json.dumps(ENTRY))
    note_test(summary, "t.py::b", json.dumps({**ENTRY, "run_order": 7}), fails=True)
    assert summary.entries() == [
        {"nodeid": "t.py::a", "outcome": "passed", **ENTRY},
        {"nodeid": "t.py::b", "outcome": "failed", **ENTRY, "run_order": 7},
    ]
    assert summary.entry("t.py::b") == summary.entries()[1]
    assert summary.entry("t.py::c") is None
    note_test(summary, "t.py::c", json.dumps(ENTRY))  # a report after a read is not lost
    assert [entry["nodeid"] for entry in summary.entries()] == ["t.py::a", "t.py::b", "t.py::c"]


def test_a_test_costs_the_summary_a_few_dozen_bytes_not_its_entry(
    pytester: pytest.Pytester,
) -> None:
    """pytest keeps every report, so the text is kept anyway; the summary adds little to it.
    Parsed into dictionaries, the entry above weighs about 4 KiB."""
    summary = RunSummary(pytester.parseconfig(), None)
    texts = [json.dumps({**ENTRY, "run_order": order}) for order in range(2000)]
    reports = [
        [
            report(f"t.py::test_{i}", "setup", "passed", None),
            report(f"t.py::test_{i}", "call", "passed", None),
            report(f"t.py::test_{i}", "teardown", "passed", text),
        ]
        for i, text in enumerate(texts)
    ]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for three in reports:
            for each in three:
                summary.note(each)
        per_test = (tracemalloc.get_traced_memory()[0] - before) / len(texts)
    finally:
        tracemalloc.stop()
    assert per_test < 300, f"{per_test:.0f} bytes a test"
    assert len(summary.entries()) == len(texts)
