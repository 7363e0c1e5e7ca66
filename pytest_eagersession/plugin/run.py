"""The plugin's one registered object: the run's parts, and every hook that is not a fixture.

``pytest_configure`` builds one ``EagerSessionRun``, keeps it in ``config.stash[RUN_KEY]`` and
registers it. Its hooks delegate to the part whose work it is: each test's own session
(``per_test.TestSessions``), the wider scopes' sessions (``scopes.ScopeSessions``), the run's
summary and JSON report (``summary.RunSummary``), and the comparison with the last run's peaks
(``peak_check.PeakCheck``, with ``--eagersession-fail-on-increase``). The end of the run is
``pytest_sessionfinish``'s, in the one order written there.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from pytest_eagersession.plugin.html_report import header_cells, requested, row_cells
from pytest_eagersession.plugin.peak_check import PeakCheck
from pytest_eagersession.plugin.per_test import TestSessions
from pytest_eagersession.plugin.retained import RetainedMemory
from pytest_eagersession.plugin.scopes import ScopeSessions
from pytest_eagersession.plugin.settings import Settings
from pytest_eagersession.plugin.summary import RunSummary

#: The name the run object is registered under with pytest's plugin manager.
RUN_PLUGIN_NAME = "eagersession-run"


class EagerSessionRun:
    """The plugin's state for one pytest run, and its hooks."""

    def __init__(
        self,
        config: pytest.Config,
        settings: Settings,
        *,
        measure: bool,
        peaks: PeakCheck | None,
    ) -> None:
        self.settings = settings
        """The run's settings, resolved once."""
        self.scopes = ScopeSessions(settings)
        """The sessions of the wider scopes (class, module, package, run)."""
        self.tests = TestSessions(settings, self.scopes, measure=measure, peaks=peaks)
        """Each test's own session."""
        self.summary = RunSummary(
            config,
            settings.json_path,
            settings.most_memory,
            most_retained=settings.most_retained,
            plot_path=settings.plot_path,
        )
        """The run's leaks and heaviest tests, for the terminal, the JSON report and the
        picture."""
        reading = settings.most_retained > 0 or bool(settings.plot_path or settings.json_path)
        reading = reading or requested(config)
        self.memory = RetainedMemory(config) if reading else None
        """The memory that stays after each test; None when nothing reports it."""
        self.peaks = peaks
        """The last run's peaks and this run's; None without
        ``--eagersession-fail-on-increase``."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Generator[None, object, object]:
        """A wider-scoped fixture is set up inside the session of its scope."""
        return (yield from self.scopes.fixture_setup(fixturedef, request))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        """The test's session opens and is activated before its first fixture (the memory
        is read before either)."""
        if self.memory is not None:
            self.memory.before(item)
        return (yield from self.tests.setup(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        """The body's traces and peak bytes are measured and checked."""
        return (yield from self.tests.call(item))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, None, None]:
        """The test's session closes after its last fixture; its leaks fail the test. The
        memory is read after both."""
        try:
            return (yield from self.tests.teardown(item))
        finally:
            if self.memory is not None:
                self.memory.after(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """The test's leaks go on its teardown report, as text."""
        return (yield from self.tests.makereport(item, call))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Each report's figures are noted (on the xdist controller too)."""
        if self.peaks is not None:
            self.peaks.note(report)
        self.summary.note(report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        """With pytest-html: the plugin's columns in its report."""
        header_cells(cells)

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        """With pytest-html: the test's figures in each of its rows."""
        row_cells(self.summary.entry(report.nodeid), cells)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The run's leaks, TensorFlow's known leaks and the heaviest tests."""
        self.summary.write_terminal(terminalreporter)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """The end of the run, in this order: what a stopped run left open is closed (a test's
        session, then the wider scopes', whose leaks are reported), so that the figures are
        complete; then this run's peaks are recorded for the next, the picture of its memory
        is drawn, and the JSON report is written last, with every test in it."""
        self.tests.close_interrupted()
        self.scopes.close_all()
        if self.peaks is not None:
            self.peaks.record()
        self.summary.write_plot()
        self.summary.write_json()
