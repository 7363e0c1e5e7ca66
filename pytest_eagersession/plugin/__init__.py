"""The pytest plugin: each test runs in an eager session, and what outlives its scope fails it.

A thin layer of hooks and fixtures. The options come from ``settings.OPTIONS``; the sessions of
the wider scopes are ``scopes.ScopeSessions``'s, what leaks do is ``verdicts``', and the run's
summary and JSON report are ``summary.RunSummary``'s.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import sys
import time
import traceback
from collections.abc import Generator
from typing import Any

import pytest

from pytest_eagersession.assertions import EagerChecks
from pytest_eagersession.base.support_range import python_warning
from pytest_eagersession.core.kinds import tensorflow_ready
from pytest_eagersession.core.session import EagerSession
from pytest_eagersession.core.tracking import TRACKER
from pytest_eagersession.plugin.peak_check import PeakCheck
from pytest_eagersession.plugin.scopes import ScopeSessions, marks, options_for
from pytest_eagersession.plugin.settings import (
    MARKER_HELP,
    OPTIONS,
    LeakMode,
    Settings,
    SettingsError,
    policy_for,
    resolve,
)
from pytest_eagersession.plugin.summary import LEAK_PROPERTY, PROPERTY, RunSummary
from pytest_eagersession.plugin.verdicts import (
    ROUTES_KEY,
    STATE_KEY,
    EagerSessionLeakWarning,
    ItemState,
    TestCloseHints,
    judge,
)
from pytest_eagersession.reports.peaks import IncreaseRule
from pytest_eagersession.reports.routes import KnownRoutes

__all__ = ["SETTINGS_KEY", "EagerSessionFixture", "EagerSessionLeakWarning"]

#: The type of every ``*eager_session`` fixture, for annotations.
EagerSessionFixture = EagerSession

#: The run's ``Settings``, resolved once when pytest is configured.
SETTINGS_KEY = pytest.StashKey[Settings]()

_TESTS_PLUGIN = "eagersession-manager"
_SCOPES_PLUGIN = "eagersession-scopes"
_SUMMARY_PLUGIN = "eagersession-summary"
_PEAKS_PLUGIN = "eagersession-peaks"

#: The JUnit XML properties of a measured test body's peaks, in bytes.
PEAK_PROPERTY = "eagersession_peak_bytes"
GPU_PEAK_PROPERTY = "eagersession_gpu_peak_bytes"

#: Set (True) on a test's teardown report when leaks failed it; plain data, so xdist carries it.
LEAKED_ATTRIBUTE = "eagersession_leaked"

_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``--eagersession-*`` options and ``eagersession_*`` ini keys of ``settings.OPTIONS``."""
    group = parser.getgroup("eagersession", "TensorFlow eager sessions and leak checks")
    for option in OPTIONS:
        if option.kind == "flag":
            group.addoption(
                option.flag,
                dest=option.key,
                action="store_const",
                const=True,
                default=None,
                help=option.help,
            )
        elif option.kind == "optional":
            group.addoption(
                option.flag,
                dest=option.key,
                nargs="?",
                const=option.const,
                default=None,
                metavar=option.metavar,
                help=option.help,
            )
        else:
            group.addoption(
                option.flag,
                dest=option.key,
                action="append" if option.kind == "list" else "store",
                default=None,
                metavar=option.metavar,
                help=option.help,
            )
        if option.ini_help is not None:
            if option.kind == "list":
                parser.addini(option.key, option.ini_help, type="linelist")
            else:
                parser.addini(option.key, option.ini_help, default="")


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker, resolve the settings once, and start the plugin's objects."""
    config.addinivalue_line("markers", MARKER_HELP)
    cli = {option.name: getattr(config.option, option.key) for option in OPTIONS}
    ini = {
        option.name: config.getini(option.key) for option in OPTIONS if option.ini_help is not None
    }
    try:
        settings = resolve(cli, ini, verbosity=config.get_verbosity())
    except SettingsError as error:
        raise pytest.UsageError(str(error)) from None
    config.stash[SETTINGS_KEY] = settings
    config.stash[ROUTES_KEY] = KnownRoutes()
    peaks = None
    if settings.fail_on_increase is not None:
        peaks = PeakCheck(config, IncreaseRule(settings.fail_on_increase, settings.increase_floor))
    # Each body's bytes and traces are measured when something reads them.
    measure = (
        peaks is not None
        or settings.json_path is not None
        or settings.most_memory > 0
        or bool(getattr(config.option, "xmlpath", None))
    )
    scopes = ScopeSessions(settings)
    plugins: list[tuple[object, str]] = [
        (TestSessions(settings, scopes, measure=measure, peaks=peaks), _TESTS_PLUGIN),
        (scopes, _SCOPES_PLUGIN),
        (RunSummary(config, settings.json_path, settings.most_memory), _SUMMARY_PLUGIN),
    ]
    if peaks is not None:
        plugins.append((peaks, _PEAKS_PLUGIN))
    for plugin, name in plugins:
        config.pluginmanager.register(plugin, name)
        config.add_cleanup(functools.partial(_unregister, config, plugin, name))
    # Between tests nobody owns new objects; the line stays drawn all the same, so that no test
    # pays for thawing the heap and for the whole collection the interpreter runs soon after.
    config.add_cleanup(TRACKER.hold())


def _unregister(config: pytest.Config, plugin: object, name: str) -> None:
    if config.pluginmanager.get_plugin(name) is plugin:
        config.pluginmanager.unregister(plugin, name)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The settings every test runs under, TensorFlow's version if it is already imported
    (never imported for this), and a warning on an untested Python."""
    settings = config.stash[SETTINGS_KEY]
    line = f"eagersession: strategy {settings.strategy.value}, leaks {settings.leaks.value}"
    version = getattr(sys.modules.get("tensorflow"), "__version__", None)
    if isinstance(version, str):
        line += f", TensorFlow {version}"
    lines = [line]
    warning = python_warning()
    if warning is not None:
        lines.append(f"eagersession: WARNING: {warning}")
    return lines


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
    """A teardown error for leaks reads ``L`` / ``LEAKED``; it still counts as an error."""
    if report.when == "teardown" and report.failed and getattr(report, LEAKED_ATTRIBUTE, False):
        return "error", "L", ("LEAKED", {"red": True})
    return None


class TestSessions:
    """The test's own session: opened before its first fixture, closed after its last."""

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

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
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

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
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
        if failures:
            pytest.fail("\n\n".join(failures), pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, None, None]:
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

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
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
            for record in state.records:
                text = record.summary
                if record.retained_by:
                    text += f"; {record.retained_by}"
                report.user_properties.append((LEAK_PROPERTY, text))
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
        survivors = session.close(hints=TestCloseHints(reach, routes))
        state.timed("close", started)
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
            test_failed=state.call_failed or teardown_failed,
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Close what is still open: a test stopped before its teardown, the wider scopes."""
        interrupted, self._open = self._open, None
        if interrupted is not None:
            # The run stopped inside a test (KeyboardInterrupt, pytest.exit) before its teardown
            # or while it closed the session: close() finishes what is left.
            with contextlib.suppress(Exception):
                interrupted.close()
        self._scopes.close_all()


# ----------------------------------------------------------------- fixtures


def _session_fixture(request: pytest.FixtureRequest, scope: str) -> EagerSession:
    if scope == "function":
        state: ItemState | None = request.node.stash.get(STATE_KEY, None)
        if state is None or state.session is None:
            raise RuntimeError("the eagersession plugin is not active")
        return state.session
    scopes: ScopeSessions | None = request.config.pluginmanager.get_plugin(_SCOPES_PLUGIN)
    if scopes is None:
        raise RuntimeError("the eagersession plugin is not active")
    session: EagerSession = scopes.session_for(request.node, scope)
    return session


@pytest.fixture
def eager_session(request: pytest.FixtureRequest) -> EagerSession:
    """The test's own eager session: op builder, stats, checkpoints, attach, detach."""
    return _session_fixture(request, "function")


@pytest.fixture(scope="class")
def class_eager_session(request: pytest.FixtureRequest) -> EagerSession:
    """The session of the test's class: it owns what class-scoped fixtures make."""
    return _session_fixture(request, "class")


@pytest.fixture(scope="module")
def module_eager_session(request: pytest.FixtureRequest) -> EagerSession:
    """The session of the test's module: it owns what module-scoped fixtures make."""
    return _session_fixture(request, "module")


@pytest.fixture(scope="package")
def package_eager_session(request: pytest.FixtureRequest) -> EagerSession:
    """The session of the test's package."""
    return _session_fixture(request, "package")


@pytest.fixture(scope="session")
def session_eager_session(request: pytest.FixtureRequest) -> EagerSession:
    """The session of the whole test run."""
    return _session_fixture(request, "session")


# ----------------------------------------------------------------- helpers


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
