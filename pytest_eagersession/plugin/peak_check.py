"""``--eagersession-fail-on-increase``: each test's peak against its last runs', in pytest's cache.

The figures are read once, when the run starts (each xdist worker reads them too), and written
once, when it ends, by the process that sees every test's reports (the controller under xdist):
the peaks of the tests whose bodies passed, added to their last runs', the others' as they were.
A test that failed on an increase keeps its old figures, so it fails again until the growth is
fixed or accepted (a run with a higher percentage records the new figure; ``--cache-clear``
forgets them all).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_eagersession.plugin.summary import PROPERTY
from pytest_eagersession.reports.peaks import (
    History,
    IncreaseRule,
    Peak,
    UnreadablePeaks,
    read_peaks,
    recorded,
)

#: The key of the figures in pytest's cache (``.pytest_cache/v/eagersession/peaks``).
CACHE_KEY = "eagersession/peaks"


class PeakCheck:
    """The last runs' peaks, the rule they are judged by, and this run's."""

    def __init__(self, config: pytest.Config, rule: IncreaseRule) -> None:
        cache = getattr(config, "cache", None)
        if cache is None:
            raise pytest.UsageError(
                "--eagersession-fail-on-increase compares each test with the last run, whose "
                "figures are kept in pytest's cache; the cache is off (-p no:cacheprovider)"
            )
        self._cache: pytest.Cache = cache
        self._worker = hasattr(config, "workerinput")
        self._rule = rule
        self._previous = self._read(config)
        self._call_passed: set[str] = set()
        self._passed: dict[str, Peak] = {}

    def failures(self, nodeid: str, measured: dict[str, Any]) -> list[str]:
        """Why the body measured as ``measured`` (its JSON figures) fails; empty if it does not."""
        before = self._previous.get(nodeid)
        now = Peak.of_entry(measured)
        if before is None or now is None:
            return []
        return self._rule.increases(nodeid, before, now)

    def history_of(self, nodeid: str) -> list[dict[str, Any]]:
        """The peaks of ``nodeid``'s last recorded runs, the oldest first (for the JSON report)."""
        return [peak.to_json() for peak in self._previous.get(nodeid, ())]

    def note(self, report: pytest.TestReport) -> None:
        """Note the peak of a body that passed, from its reports."""
        if report.when == "call" and report.passed:
            self._call_passed.add(report.nodeid)
        elif report.when == "teardown" and report.nodeid in self._call_passed:
            for name, value in report.user_properties:
                if name == PROPERTY and isinstance(value, str):
                    peak = Peak.of_entry(json.loads(value))
                    if peak is not None:
                        self._passed[report.nodeid] = peak

    def record(self) -> None:
        """Record this run's peaks (not on xdist workers: their controller does)."""
        if self._worker or not self._passed:
            return
        try:
            previous = read_peaks(self._cache.get(CACHE_KEY, None))
        except UnreadablePeaks:
            previous = {}  # said when the run started; what this run measured replaces it
        self._cache.set(CACHE_KEY, recorded(previous, self._passed, self._rule.history))

    def _read(self, config: pytest.Config) -> dict[str, History]:
        try:
            return read_peaks(self._cache.get(CACHE_KEY, None))
        except UnreadablePeaks as error:
            if not self._worker:  # one warning for the run, not one a worker
                config.issue_config_time_warning(
                    pytest.PytestWarning(
                        f"eagersession: the last run's peaks in pytest's cache ({CACHE_KEY}) are "
                        f"unreadable ({error}); this run compares no test and records afresh"
                    ),
                    stacklevel=2,
                )
            return {}
