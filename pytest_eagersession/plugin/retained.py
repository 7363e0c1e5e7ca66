"""Memory that stays after each test: read before its setup and after its teardown.

The readings (``core.process_memory``) bracket everything pytest does for the test: its
fixtures, its body, its session's close and the wider scopes that end with it. What the test
used and gave back is not counted; what stayed is, with the part its reported leaks explain.
The figures go into the test's entry of the JSON report, with the test's place in its
process's run order (and its xdist worker), for the end-of-run table and the picture.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_eagersession.core.process_memory import MemoryReading, read_memory, retained
from pytest_eagersession.plugin.verdicts import state_of
from pytest_eagersession.reports.retained_memory import with_leaks


class RetainedMemory:
    """Each test's retained memory, in the order this process ran them."""

    def __init__(self, config: pytest.Config) -> None:
        workerinput: dict[str, Any] = getattr(config, "workerinput", {})
        self._worker = str(workerinput.get("workerid", "main"))
        self._order = 0
        self._before: dict[str, MemoryReading] = {}

    def before(self, item: pytest.Item) -> None:
        """Read the memory before the test's setup."""
        self._before[item.nodeid] = read_memory()

    def after(self, item: pytest.Item) -> None:
        """Read it after the test's teardown; put what stayed into the test's JSON entry."""
        before = self._before.pop(item.nodeid, None)
        if before is None:
            return
        figures = retained(before, read_memory())
        if figures is None:
            return  # no reading of resident memory here (not Linux)
        self._order += 1
        state = state_of(item)
        leaks = [record.to_json() for record in state.records]
        state.measured["retained"] = with_leaks(figures.to_json(), leaks)
        state.measured["run_order"] = self._order
        state.measured["worker"] = self._worker
