"""Each test's own session, step by step: open and activate it before the test's first fixture,
measure the body, close it after the last fixture's teardown and judge what survived.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import sys
import time
import traceback
from collections.abc import Generator
from typing import Any

import pytest

from pytest_eagersession.assertions import EagerChecks
from pytest_eagersession.core.kinds import tensorflow_ready
from pytest_eagersession.core.session import EagerSession
from pytest_eagersession.plugin.html_report import leak_extra
from pytest_eagersession.plugin.peak_check import PeakCheck
from pytest_eagersession.plugin.scopes import ScopeSessions, marks, options_for
from pytest_eagersession.plugin.setting_values import SettingsError
from pytest_eagersession.plugin.settings import LeakMode, Settings, policy_for
from pytest_eagersession.plugin.summary import LEAK_PROPERTY, PROPERTY
from pytest_eagersession.plugin.verdicts import (
    ROUTES_KEY,
    STATE_KEY,
    ItemState,
    TestCloseHints,
    holder_search,
    judge,
)

#: The JUnit XML properties of a measured test body's peaks, in bytes.
PEAK_PROPERTY = "eagersession_peak_bytes"
GPU_PEAK_PROPERTY = "eagersession_gpu_peak_bytes"

#: Set (True) on a test's teardown report when leaks failed it; plain data, so xdist carries it.
LEAKED_ATTRIBUTE = "eagersession_leaked"

_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


class TestSessions:
    """The test's own session: opened before its first fixture, closed after its last.

    Its steps are the bodies of the plugin's per-test hook wrappers (``run.EagerSessionRun``).
    """

    __test__ = False  # not a test class, whatever its name

    def __init__(
        self,
        settings: Settings,
        scopes: ScopeSessions,
        *,
        measure: bool = False,
        peaks: PeakCheck | None = None,
    ) -> None:
        self._settings = settings
        self._scopes = scopes
        self._measure = measure
        self._peaks = peaks
        self._open: EagerSession | None = None
        """The test session not closed yet: the end of the run closes it if teardown never comes."""

    def setup(self, item: pytest.Item) -> Generator[None, None, None]:
        """Open and activate the test's session before its first fixture."""
        message: str | None = None
        try:
            policy = policy_for(self._settings, marks(item))
        except SettingsError as error:
            message = str(error)
        if message is not None:
            # Let pytest set up as usual, so that its teardown finds what it expects; a fixture
            # that fails for want of the session (eager_session, class_eager_session) is not
            # the cause.
            with contextlib.suppress(Exception, pytest.fail.Exception):
                yield
            pytest.fail(message, pytrace=False)
        started = time.perf_counter()
        session = options_for(policy).build()
        state = item.stash[STATE_KEY] = ItemState(policy=policy, session=session)
        self._open = session
        session.activate()
        state.timed("open", started)
        try:
            return (yield)
        finally:
            # A test class's instance, made before the session (a unittest case, at
            # collection), holds what setUp made until its cycle is collected.
            instance = getattr(item, "instance", None)
            if instance is not None:
                session.suspect_holder(instance)
            del instance

    def call(self, item: pytest.Item) -> Generator[None, None, None]:
        """Count the body's tf.function traces and measure its peak bytes, against its limits
        and against the last run's peak.

        Only the body: what fixtures make or trace, which depends on the order tests run in,
        is not counted. Both are measured whenever a report reads them (the JSON report, the
        most-memory table, JUnit XML, the comparison with the last run).
        """
        state = item.stash.get(STATE_KEY, None)
        policy = state.policy if state is not None else None
        if state is None or policy is None:
            return (yield)
        if policy.max_traces is None and policy.max_bytes is None and not self._measure:
            return (yield)
        checks = EagerChecks(
            max_traces=policy.max_traces,
            max_bytes=policy.max_bytes,
            leaks=False,  # the session's close reports leaks, after the fixtures' teardown
            measure_bytes=self._measure,
            count_traces=self._measure and tensorflow_ready(),  # a trace needs TensorFlow
            where=item.nodeid,
        ).start()
        try:
            result = yield
        except BaseException:
            checks.finish(check=False)
            state.measured = checks.to_json()
            raise
        failures = [str(error) for error in checks.finish()]
        state.measured = checks.to_json()
        del checks
        if self._peaks is not None:
            failures.extend(self._peaks.failures(item.nodeid, state.measured))
            state.measured["history"] = self._peaks.history_of(item.nodeid)
        if failures:
            pytest.fail("\n\n".join(failures), pytrace=False)
        return result

    def teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        """Close the test's session after its last fixture is torn down; fail on leaks.

        The sessions of the scopes that end here close after it, once pytest's fixture
        finalizers ran: until then the item's ``funcargs`` hold every fixture's value.
        """
        self._scopes.defer_closing()
        teardown_failed = True
        try:
            result = yield
            teardown_failed = False
            return result
        finally:
            funcargs = getattr(item, "funcargs", None)
            if isinstance(funcargs, dict):
                funcargs.clear()  # pytest drops them right after this hook; they are torn down
            failures: list[str] = []
            errors: list[Exception] = []
            with _collect_failures(failures, errors):
                self._finish(item, teardown_failed=teardown_failed)
            state = item.stash.get(STATE_KEY, None)
            judged = state.judging_seconds() if state is not None else 0.0
            started = time.perf_counter()
            self._scopes.close_deferred(item, lambda: _collect_failures(failures, errors))
            if state is not None:  # the scopes' leaks were timed as explain and report
                state.timed("scopes", started + state.judging_seconds() - judged)
            if teardown_failed or errors:
                state = item.stash.get(STATE_KEY, None)  # a wider scope's verdict may make one
                if state is not None:
                    state.leaked = False  # the teardown fails, but not (only) for leaks
            if teardown_failed:
                # A fixture's teardown raised: its error is the one pytest shows, in full.
                # Ours go beside it, in a section of that report, instead of replacing it.
                failures.extend(f"{type(error).__name__}: {error}" for error in errors)
                if failures:
                    item.add_report_section("teardown", "eagersession", "\n\n".join(failures))
            elif errors:
                raise errors[0]
            elif failures:
                pytest.fail("\n\n".join(failures), pytrace=False)

    def makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Put the test's leaks on its teardown report, as text; drop failed frames' locals."""
        report = yield
        state = item.stash.get(STATE_KEY, None)
        if call.when == "call":
            if state is not None:
                state.call_failed = report.failed
            if call.excinfo is not None:
                _clear_traceback_frames(call.excinfo.tb)
        if call.when == "teardown" and state is not None:
            del item.stash[STATE_KEY]  # pytest keeps every item to the end of the run
            report.user_properties.append((PROPERTY, json.dumps(state.to_json())))
            report.user_properties.extend(_peak_properties(state.measured))
            leak_lines = []
            for record in state.records:
                text = record.summary
                if record.retained_by:
                    text += f"; {record.retained_by}"
                report.user_properties.append((LEAK_PROPERTY, text))
                leak_lines.append(text)
            if leak_lines:  # pytest-html shows them in the row's details
                extras = list(getattr(report, "extras", []))
                report.extras = [*extras, leak_extra(leak_lines)]  # type: ignore[attr-defined]
            if report.failed and state.leaked:
                setattr(report, LEAKED_ATTRIBUTE, True)
        return report

    def _finish(self, item: pytest.Item, *, teardown_failed: bool) -> None:
        state = item.stash.get(STATE_KEY, None)
        if state is None or state.session is None or state.policy is None:
            return
        session, policy = state.session, state.policy
        if session.closed:
            return
        _clear_last_traceback()
        started = time.perf_counter()
        reach = self._scopes.kept_elsewhere()
        routes = item.config.stash.get(ROUTES_KEY, None)
        failed = state.call_failed or teardown_failed  # its traceback holds its locals
        reporting = policy.leaks is not LeakMode.OFF and self._settings.max_leaks != 0
        reporting = reporting and not failed
        search = holder_search(item, self._settings) if reporting else None
        hints = TestCloseHints(reach, routes, search)
        survivors = session.close(hints=hints)
        state.timed("close", started)
        # Collecting the garbage the test left in cycles is work of the interpreter's, done
        # here rather than later: timed apart from the plugin's own.
        collecting = session.stats().close_collection_seconds
        state.timings["close"] -= collecting
        state.timings["collect"] = collecting
        if session is self._open:
            self._open = None  # closed: nothing left for the end of the run
        if policy.leaks is LeakMode.OFF:
            return
        # A failed call or teardown keeps its frames' locals in its traceback: no leak report.
        judge(
            item,
            "function",
            session,
            self._scopes.unclaimed(survivors, reach),
            policy,
            self._settings,
            test_failed=failed,
            hints=hints,
        )

    def close_interrupted(self) -> None:
        """Close the test session a stopped run left open (KeyboardInterrupt, ``pytest.exit``
        before its teardown, or while it closed the session): ``close()`` finishes what is left."""
        interrupted, self._open = self._open, None
        if interrupted is not None:
            with contextlib.suppress(Exception):
                interrupted.close()


def _peak_properties(measured: dict[str, Any]) -> list[tuple[str, int]]:
    """The body's peaks as JUnit XML properties (none where it was not measured)."""
    properties = []
    if isinstance(measured.get("peak_bytes"), int):
        properties.append((PEAK_PROPERTY, measured["peak_bytes"]))
    devices = measured.get("device_peak_bytes") or {}
    if devices:
        properties.append((GPU_PEAK_PROPERTY, max(devices.values())))
    return properties


def _clear_traceback_frames(tb: Any) -> None:
    if tb is not None and tensorflow_ready():
        traceback.clear_frames(tb)
        if sys.version_info < (3, 13):
            # Before PEP 667, clear() left the dict that reading f_locals had made (pytest's
            # report reads it) holding the locals; reading it again syncs it with the cleared
            # frame. Generator frames are suspended, not cleared: no dict is made for them.
            while tb is not None:
                frame = tb.tb_frame
                if not frame.f_code.co_flags & _SUSPENDABLE:
                    with contextlib.suppress(Exception):
                        frame.f_locals  # noqa: B018
                tb = tb.tb_next


def _clear_last_traceback() -> None:
    """A failed test's frames, which pytest keeps in ``sys.last_traceback``, hold no tensors."""
    _clear_traceback_frames(getattr(sys, "last_traceback", None))


@contextlib.contextmanager
def _collect_failures(failures: list[str], errors: list[Exception]) -> Generator[None, None, None]:
    """Note a ``pytest.fail`` message or an error and carry on, so that every session closes."""
    try:
        yield
    except pytest.fail.Exception as failure:
        failures.append(str(failure.msg))
    except Exception as error:
        errors.append(error)
