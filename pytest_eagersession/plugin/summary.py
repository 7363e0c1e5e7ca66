"""The run's summary: the tests that leaked, at the end of the terminal output and as JSON.

Built from ``pytest_runtest_logreport``, which xdist replays on the controller, so one code
path serves a run with and without workers; only the controller writes the JSON file.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

from pytest_eagersession.base.sizes import format_bytes
from pytest_eagersession.base.support_range import tensorflow_warning
from pytest_eagersession.reports.grouping import holder_line, holders_of_run
from pytest_eagersession.reports.memory_plot import draw_png, svg
from pytest_eagersession.reports.report import write_json
from pytest_eagersession.reports.retained_memory import (
    RETAINED_FLOOR,
    most_retained,
    table_lines,
)

#: The user property that carries a test's entry of the JSON report, as JSON text.
PROPERTY = "eagersession"
#: The user property of each leak, one line of text (also in JUnit XML).
LEAK_PROPERTY = "eagersession_leak"
#: Holders the terminal summary names; the JSON report lists every one.
MOST_HOLDERS_SHOWN = 10


class _Noted:
    """A test's outcome so far and the JSON texts its reports carried, parsed only when read:
    the text is the report's own string (pytest keeps the report), so a run of many tests
    keeps a few dozen bytes a test here, not the dictionaries of each entry."""

    __slots__ = ("outcome", "texts")

    def __init__(self) -> None:
        self.outcome = "passed"
        self.texts: list[str] = []

    def entry(self, nodeid: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"nodeid": nodeid, "outcome": self.outcome}
        for text in self.texts:
            entry.update(json.loads(text))
        return entry


class RunSummary:
    """Each test's outcome and leaks, collected from its reports."""

    def __init__(
        self,
        config: pytest.Config,
        json_path: str | None,
        most_memory: int = 0,
        *,
        most_retained: int = 0,
        plot_path: str | None = None,
    ) -> None:
        self._config = config
        self._json_path = json_path
        self._most_memory = most_memory
        self._most_retained = most_retained
        self._plot_path = plot_path
        self._noted: dict[str, _Noted] = {}
        self._entries: list[dict[str, Any]] | None = None  # parsed, once the run is over
        self._json_error: str | None = None
        self._plot_error: str | None = None

    def note(self, report: pytest.TestReport) -> None:
        """Collect a test's outcome and leak data from one of its reports."""
        noted = self._noted.get(report.nodeid)
        if noted is None:
            noted = self._noted[report.nodeid] = _Noted()
        if report.failed:
            noted.outcome = "failed" if report.when == "call" else "error"
        elif report.skipped and noted.outcome == "passed":
            noted.outcome = "skipped"
        for name, value in report.user_properties:
            if name == PROPERTY and isinstance(value, str):
                noted.texts.append(value)
        self._entries = None

    def entry(self, nodeid: str) -> dict[str, Any] | None:
        """What the reports of ``nodeid`` said so far (its entry of the JSON report)."""
        noted = self._noted.get(nodeid)
        return None if noted is None else noted.entry(nodeid)

    def entries(self) -> list[dict[str, Any]]:
        """Every test's entry of the JSON report, in the order the tests were first noted."""
        if self._entries is None:
            self._entries = [noted.entry(nodeid) for nodeid, noted in self._noted.items()]
        return self._entries

    def write_terminal(self, terminalreporter: Any) -> None:
        """List the tests that leaked, with counts and bytes."""
        for error in (self._json_error, self._plot_error):
            if error is not None:
                terminalreporter.write_line(error, red=True)
        tf_module = sys.modules.get("tensorflow")
        if tf_module is not None:
            untested = tensorflow_warning(str(getattr(tf_module, "__version__", "0")))
            if untested is not None:
                terminalreporter.write_line(f"eagersession: WARNING: {untested}", yellow=True)
        self._summarize_retention(terminalreporter)
        self._summarize_memory(terminalreporter)
        self._summarize_retained(terminalreporter)
        leaky = [entry for entry in self.entries() if entry.get("leaks")]
        if not leaky:
            return
        terminalreporter.section("eagersession: leaked TensorFlow objects")
        holders = holders_of_run(leaky)
        if len(leaky) > 1 and holders:
            terminalreporter.write_line("by holder, most bytes first:")
            for holder in holders[:MOST_HOLDERS_SHOWN]:
                terminalreporter.write_line(f"  {holder_line(holder)}")
            if len(holders) > MOST_HOLDERS_SHOWN:
                more = len(holders) - MOST_HOLDERS_SHOWN
                terminalreporter.write_line(f"  and {more} more (all in the JSON report)")
            terminalreporter.write_line("by test:")
        for entry in leaky:
            leaks = entry["leaks"]
            total = sum(leak.get("nbytes") or 0 for leak in leaks)
            terminalreporter.write_line(
                f"{entry['nodeid']}: {len(leaks)} leaked ({format_bytes(total)})"
            )

    def _summarize_memory(self, terminalreporter: Any) -> None:
        """The tests whose bodies peaked highest in tracked bytes (``most_memory``)."""
        if self._most_memory <= 0:
            return
        measured = [entry for entry in self.entries() if isinstance(entry.get("peak_bytes"), int)]
        measured.sort(key=lambda entry: (-entry["peak_bytes"], entry["nodeid"]))
        shown = measured[: self._most_memory]
        terminalreporter.section(
            f"eagersession: the {len(shown)} tests with the highest peak of tracked bytes"
        )
        if not shown:
            terminalreporter.write_line("no test body was measured")
            return
        terminalreporter.write_line(f"{'peak':>10} {'GPU peak':>10}  test")
        for entry in shown:
            devices = entry.get("device_peak_bytes") or {}
            gpu = format_bytes(max(devices.values())) if devices else "-"
            terminalreporter.write_line(
                f"{format_bytes(entry['peak_bytes']):>10} {gpu:>10}  {entry['nodeid']}"
            )

    def _summarize_retained(self, terminalreporter: Any) -> None:
        """The tests after which the most memory stayed in use (``most_retained``)."""
        if self._most_retained <= 0:
            return
        shown = most_retained(self.entries(), self._most_retained)
        terminalreporter.section("eagersession: the tests after which the most memory stayed")
        if not shown:
            measured = any("retained" in entry for entry in self.entries())
            terminalreporter.write_line(
                f"no test left {format_bytes(RETAINED_FLOOR)} or more in use behind it"
                if measured
                else "resident memory cannot be read on this platform"
            )
            return
        for line in table_lines(shown):
            terminalreporter.write_line(line)
        terminalreporter.write_line(
            "(in use: resident memory after the test's teardown above its level before its "
            "setup, less what the C allocator holds free ('freed, kept'); leaks: the bytes of "
            "the test's reported leaks; other: the rest)"
        )

    def _summarize_retention(self, terminalreporter: Any) -> None:
        released = kept = 0
        tests = []
        for entry in self.entries():
            retention = entry.get("retention") or {}
            if retention.get("released") or retention.get("kept"):
                released += len(retention.get("released", []))
                kept += len(retention.get("kept", []))
                tests.append((entry["nodeid"], retention.get("kept", [])))
        if not tests:
            return
        terminalreporter.section("eagersession: TensorFlow's own known leaks")
        terminalreporter.write_line(
            f"{len(tests)} tests left objects in TensorFlow's known leaks (not their code's "
            f"doing; they pass: --eagersession-retention=fail fails them): {released} released "
            f"at the end of their scope, {kept} still kept."
        )
        for nodeid, kept_lines in tests:
            for line in kept_lines:
                terminalreporter.write_line(f"{nodeid}: {line}")

    def write_plot(self) -> None:
        """Draw the run's memory after each test (not on xdist workers)."""
        path = self._plot_path
        if path is None or hasattr(self._config, "workerinput"):
            return
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            entries = self.entries()
            if path.lower().endswith(".png"):
                draw_png(entries, path)
            else:
                with open(path, "w", encoding="utf-8") as file:
                    file.write(svg(entries))
        except (OSError, ValueError, RuntimeError) as error:  # matplotlib's own, a full disk
            self._plot_error = f"eagersession: could not write the picture to {path}: {error}"
            if self._config.pluginmanager.get_plugin("terminalreporter") is None:
                sys.stderr.write(self._plot_error + "\n")

    def write_json(self) -> None:
        """Write the JSON report (not on xdist workers)."""
        path = self._json_path
        if path is None or hasattr(self._config, "workerinput"):
            return
        try:
            tests = self.entries()
            write_json(path, tests, holders=holders_of_run(tests))
        except (OSError, ValueError) as error:
            # Checked when the options were parsed, so rare (a full disk, a folder removed
            # since). Said in the terminal summary, after the results it does not change.
            self._json_error = f"eagersession: could not write the JSON report to {path}: {error}"
            if self._config.pluginmanager.get_plugin("terminalreporter") is None:
                sys.stderr.write(self._json_error + "\n")
