"""The pytest plugin: each test runs in an eager session, and what outlives its scope fails it.

A thin layer of hooks and fixtures over ``EagerSession``; the work is in the library modules.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import sys
import threading
import traceback
import warnings
from collections.abc import Generator
from typing import Any

import pytest

from pytest_eagersession.assertions import EagerChecks
from pytest_eagersession.holders import Root
from pytest_eagersession.kinds import tensorflow_ready
from pytest_eagersession.report import LeakRecord, build_records, render, write_json
from pytest_eagersession.session import EagerSession
from pytest_eagersession.settings import (
    MARKER_HELP,
    Settings,
    SettingsError,
    TestPolicy,
    policy_for,
    resolve,
)
from pytest_eagersession.sizes import format_bytes
from pytest_eagersession.support_range import python_warning, tensorflow_warning

#: The type of every ``*eager_session`` fixture, for annotations.
EagerSessionFixture = EagerSession

SETTINGS_KEY = pytest.StashKey[Settings]()
_SESSION_KEY = pytest.StashKey[EagerSession]()
_POLICY_KEY = pytest.StashKey[TestPolicy]()
_RECORDS_KEY = pytest.StashKey[list[LeakRecord]]()
_CALL_FAILED_KEY = pytest.StashKey[bool]()
_MEASURED_KEY = pytest.StashKey[dict[str, Any]]()
_RETENTION_KEY = pytest.StashKey[dict[str, list[str]]]()
_PLUGIN_NAME = "eagersession-manager"

_WIDER_SCOPES = ("class", "module", "package", "session")
_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


class EagerSessionLeakWarning(UserWarning):
    """A test leaked TensorFlow objects under ``leaks="warn"``."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``--eagersession-*`` options and ``eagersession_*`` ini keys."""
    group = parser.getgroup("eagersession", "TensorFlow eager sessions and leak checks")
    group.addoption(
        "--eagersession-strategy",
        dest="eagersession_strategy",
        default=None,
        metavar="STRATEGY",
        help="cleanup strategy of each test's session: in_background (default), "
        "on_safe_points, on_session_close.",
    )
    group.addoption(
        "--eagersession-leaks",
        dest="eagersession_leaks",
        default=None,
        metavar="MODE",
        help="what a TensorFlow object that outlives its scope does: fail (default), warn, off.",
    )
    group.addoption(
        "--eagersession-allow",
        dest="eagersession_allow",
        action="append",
        default=None,
        metavar="REGEX",
        help="expected survivors: a regex searched in each leak's summary (repeatable).",
    )
    group.addoption(
        "--eagersession-track-creation",
        dest="eagersession_track_creation",
        action="store_const",
        const=True,
        default=None,
        help="record the op and line of code that made each object (slower: an op callback).",
    )
    group.addoption(
        "--eagersession-max-leaks",
        dest="eagersession_max_leaks",
        default=None,
        metavar="N",
        help="leaks traced to their holders per scope (default: all of them).",
    )
    group.addoption(
        "--eagersession-chain-budget",
        dest="eagersession_chain_budget",
        default=None,
        metavar="SECONDS",
        help="time the one search for a scope's leaks' holders may take (default 5; 20 with -v).",
    )
    group.addoption(
        "--eagersession-retention",
        dest="eagersession_retention",
        default=None,
        metavar="MODE",
        help="what TensorFlow's own known leaks of a test's objects (the gradient registry) "
        "do: report (default: listed apart, the test passes) or fail.",
    )
    group.addoption(
        "--eagersession-json",
        dest="eagersession_json",
        default=None,
        metavar="PATH",
        help="write every test's strategy, stats and leaks to this JSON file.",
    )
    group.addoption(
        "--eagersession-graphs",
        dest="eagersession_graphs",
        default=None,
        metavar="DIR",
        help="write a back-reference graph of each traced leak here (DOT; PNG with Graphviz).",
    )
    parser.addini(
        "eagersession_strategy", "default cleanup strategy of each test's session", default=""
    )
    parser.addini("eagersession_leaks", "fail, warn or off for leaked objects", default="")
    parser.addini("eagersession_allow", "regexes of expected survivors", type="linelist")
    parser.addini(
        "eagersession_track_creation", "record the op and line that made each object", default=""
    )
    parser.addini("eagersession_max_leaks", "leaks traced to their holders per scope", default="")
    parser.addini(
        "eagersession_chain_budget",
        "seconds the search for a scope's leaks' holders may take",
        default="",
    )
    parser.addini(
        "eagersession_retention",
        "report or fail for TensorFlow's own known leaks of a test's objects",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker, resolve the settings once, and start the plugin's manager."""
    config.addinivalue_line("markers", MARKER_HELP)
    option = config.option
    cli = {
        "strategy": option.eagersession_strategy,
        "leaks": option.eagersession_leaks,
        "allow": option.eagersession_allow,
        "track_creation": option.eagersession_track_creation,
        "max_leaks": option.eagersession_max_leaks,
        "chain_budget": option.eagersession_chain_budget,
        "retention": option.eagersession_retention,
        "json": option.eagersession_json,
        "graphs": option.eagersession_graphs,
    }
    ini = {
        "strategy": config.getini("eagersession_strategy"),
        "leaks": config.getini("eagersession_leaks"),
        "allow": config.getini("eagersession_allow"),
        "track_creation": config.getini("eagersession_track_creation"),
        "max_leaks": config.getini("eagersession_max_leaks"),
        "chain_budget": config.getini("eagersession_chain_budget"),
        "retention": config.getini("eagersession_retention"),
    }
    try:
        settings = resolve(cli, ini, verbosity=config.get_verbosity())
    except SettingsError as error:
        raise pytest.UsageError(str(error)) from None
    config.stash[SETTINGS_KEY] = settings
    config.pluginmanager.register(EagerSessionManager(config, settings), _PLUGIN_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Unregister the manager."""
    manager = config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if manager is not None:
        config.pluginmanager.unregister(manager, _PLUGIN_NAME)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The settings every test runs under, and a warning on an untested Python."""
    settings = config.stash[SETTINGS_KEY]
    lines = [f"eagersession: strategy {settings.strategy.value}, leaks {settings.leaks}"]
    warning = python_warning()
    if warning is not None:
        lines.append(f"eagersession: WARNING: {warning}")
    return lines


class EagerSessionManager:
    """The plugin's state: the sessions of the wider scopes, and the run's leak summary."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self._config = config
        self._settings = settings
        self._scope_sessions: dict[str, tuple[EagerSession, TestPolicy]] = {}
        self._scope_values: dict[str, list[object]] = {}
        self._test_session: EagerSession | None = None
        self._ending_scopes: list[tuple[str, str]] | None = None
        self._results: dict[str, dict[str, Any]] = {}
        self._json_error: str | None = None

    # ------------------------------------------------------------- the test's own session

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        """Open and activate the test's session before its first fixture."""
        message: str | None = None
        try:
            policy = policy_for(self._settings, _marks(item))
        except SettingsError as error:
            message = str(error)
        if message is not None:
            # Let pytest set up as usual, so that its teardown finds what it expects; a fixture
            # that fails for want of the session (eager_session, class_eager_session) is not
            # the cause.
            with contextlib.suppress(Exception, pytest.fail.Exception):
                yield
            pytest.fail(message, pytrace=False)
        item.stash[_POLICY_KEY] = policy
        item.stash[_RECORDS_KEY] = []
        session = _build(policy).freeze_older_objects().build()
        item.stash[_SESSION_KEY] = session
        self._test_session = session  # closed at the end of the run if teardown never comes
        session.activate()
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        """Count the body's tf.function traces and measure its peak bytes, against its limits.

        Only the body: what fixtures make or trace, which depends on the order tests run in,
        is not counted. Bytes are measured for the JSON report too, when one is written.
        """
        policy = item.stash.get(_POLICY_KEY, None)
        if policy is None:
            return (yield)
        json_wanted = self._settings.json_path is not None
        if policy.max_traces is None and policy.max_bytes is None and not json_wanted:
            return (yield)
        checks = EagerChecks(
            max_traces=policy.max_traces,
            max_bytes=policy.max_bytes,
            leaks=False,  # the session's close reports leaks, after the fixtures' teardown
            measure_bytes=json_wanted,
            where=item.nodeid,
        ).start()
        try:
            result = yield
        except BaseException:
            checks.finish(check=False)
            item.stash[_MEASURED_KEY] = checks.to_json()
            raise
        errors = checks.finish()
        item.stash[_MEASURED_KEY] = checks.to_json()
        del checks
        if errors:
            pytest.fail("\n\n".join(str(error) for error in errors), pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, None, None]:
        """Close the test's session after its last fixture is torn down; fail on leaks.

        The sessions of the scopes that end here close after it, once pytest's fixture
        finalizers ran: until then the item's ``funcargs`` hold every fixture's value.
        """
        self._ending_scopes = []
        teardown_failed = True
        try:
            result = yield
            teardown_failed = False
            return result
        finally:
            ending, self._ending_scopes = self._ending_scopes, None
            funcargs = getattr(item, "funcargs", None)
            if isinstance(funcargs, dict):
                funcargs.clear()  # pytest drops them right after this hook; they are torn down
            failures: list[str] = []
            errors: list[Exception] = []
            with _collect_failures(failures, errors):
                self._finish_test_session(item, teardown_failed=teardown_failed)
            for key, scope in ending:
                with _collect_failures(failures, errors):
                    self._close_scope(key, scope, item)
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
        """Drop a failing test's frame locals (their text is in the report already)."""
        report = yield
        if call.when == "call":
            item.stash[_CALL_FAILED_KEY] = report.failed
            if call.excinfo is not None:
                _clear_traceback_frames(call.excinfo.tb)
        if call.when == "teardown" and _RECORDS_KEY in item.stash:
            records = item.stash[_RECORDS_KEY]
            session = item.stash.get(_SESSION_KEY, None)
            policy = item.stash.get(_POLICY_KEY, None)
            measured: dict[str, Any] = item.stash.get(_MEASURED_KEY, {})
            retention: dict[str, list[str]] = item.stash.get(
                _RETENTION_KEY, {"released": [], "kept": []}
            )
            payload = {
                "strategy": policy.strategy.value if policy else None,
                "stats": _stats_json(session),
                "leaks": [record.to_json() for record in records],
                "retention": retention,
                **measured,
            }
            if _RETENTION_KEY in item.stash:
                del item.stash[_RETENTION_KEY]
            # pytest keeps every item to the end of the run: keep nothing of ours on it
            del item.stash[_RECORDS_KEY]
            if _SESSION_KEY in item.stash:
                del item.stash[_SESSION_KEY]
            if _POLICY_KEY in item.stash:
                del item.stash[_POLICY_KEY]
            if _MEASURED_KEY in item.stash:
                del item.stash[_MEASURED_KEY]
            report.user_properties.append(("eagersession", json.dumps(payload)))
            for record in records:
                text = record.summary
                if record.retained_by:
                    text += f"; {record.retained_by}"
                report.user_properties.append(("eagersession_leak", text))
        return report

    def _finish_test_session(self, item: pytest.Item, *, teardown_failed: bool) -> None:
        session = item.stash.get(_SESSION_KEY, None)
        policy = item.stash.get(_POLICY_KEY, None)
        if session is None or policy is None or session.closed:
            return
        _clear_last_traceback()
        # A failed call or teardown keeps its frames' locals in its traceback: no leak report.
        failed = item.stash.get(_CALL_FAILED_KEY, False) or teardown_failed
        survivors = session.close()
        if session is self._test_session:
            self._test_session = None  # closed: nothing left for the end of the run
        if policy.leaks == "off":
            return
        leaks, retention = self._apart(item, session, self._leaks(survivors, policy))
        if failed or not (leaks or retention):
            return  # a test that failed for its own reason shows only that
        self._report(item, "function", leaks, policy, suppress=False, retention=retention)

    # ------------------------------------------------------------- wider scopes

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Generator[None, object, object]:
        """Set a wider-scoped fixture up inside the session of its scope."""
        scope = fixturedef.scope
        if scope not in _WIDER_SCOPES:
            return (yield)
        session = self.scope_session(request.node, scope)
        if session is None:
            return (yield)
        threads_before = set(threading.enumerate())
        session.activate()
        try:
            value = yield
        finally:
            session.deactivate()
        # What the value reaches belongs to the scope, and so does what a thread that the
        # fixture started (a monitor, a prefetcher) keeps in its frames.
        started = [thread for thread in threading.enumerate() if thread not in threads_before]
        values = self._scope_values.setdefault(_scope_key(request.node, scope), [])
        values.append(value)
        values.extend(started)
        return value

    def scope_session(self, node: Any, scope: str) -> EagerSession | None:
        """The session of ``node`` (a class, module, package or the whole run), made once."""
        key = _scope_key(node, scope)
        entry = self._scope_sessions.get(key)
        if entry is None:
            try:
                policy = policy_for(self._settings, _marks(node))
            except SettingsError as error:
                pytest.fail(str(error), pytrace=False)
            session = _build(policy).clear_kernel_cache().build()
            entry = (session, policy)
            self._scope_sessions[key] = entry
            node.addfinalizer(lambda: self._scope_ended(key, scope))
        return entry[0]

    def _scope_ended(self, key: str, scope: str) -> None:
        if self._ending_scopes is not None:  # in a test's teardown: close after its fixtures
            self._ending_scopes.append((key, scope))
        else:  # torn down at the end of an interrupted run: no test left to fail
            self._close_scope(key, scope, None)

    def _close_scope(self, key: str, scope: str, item: pytest.Item | None) -> None:
        entry = self._scope_sessions.pop(key, None)
        self._scope_values.pop(key, None)
        if entry is None:
            return
        session, policy = entry
        if session.closed:
            return
        survivors = session.close()
        if policy.leaks == "off" or item is None:
            return
        leaks, retention = self._apart(item, session, self._leaks(survivors, policy))
        if leaks or retention:
            self._report(item, scope, leaks, policy, suppress=False, retention=retention)

    def _leaks(self, survivors: tuple[Any, ...], policy: TestPolicy) -> list[Any]:
        """The survivors no open wider scope takes over and none allows.

        Sessions are built not to destroy their survivors on close: what a wider-scoped
        fixture's value holds must be handed over to that scope intact, and the report decides
        which leaks are certain enough to destroy.
        """
        survivors = self._without_wider_fixture_values(survivors)
        return [survivor for survivor in survivors if not survivor.allowed]

    def _apart(
        self, item: pytest.Item, session: EagerSession, leaks: list[Any]
    ) -> tuple[list[Any], str | None]:
        """Set apart what TensorFlow's own known leaks kept; ``(leaks, failure text)``.

        Under ``retention="report"`` it is listed in the run's summary and the JSON report and
        the test passes; under ``"fail"`` the kept objects stay among the leaks, and what was
        released is said in the failure (the second value).
        """
        released = list(session.known_retention())
        kept = [leak for leak in leaks if leak.retention]
        if self._settings.retention == "fail":
            if not released:
                return leaks, None
            return leaks, _retention_text(released)
        if released or kept:
            empty: dict[str, list[str]] = {"released": [], "kept": []}
            entry = item.stash.setdefault(_RETENTION_KEY, empty)
            entry["released"].extend(released)
            entry["kept"].extend(f"{leak.summary()}: kept by {leak.retention}" for leak in kept)
        return [leak for leak in leaks if not leak.retention], None

    def _without_wider_fixture_values(self, survivors: tuple[Any, ...]) -> tuple[Any, ...]:
        """Hand survivors that a wider-scoped fixture's value holds over to that scope."""
        scopes = [
            (session, self._scope_values.get(key, []))
            for key, (session, _) in self._scope_sessions.items()
            if self._scope_values.get(key)
        ]
        if not scopes:
            return survivors
        from pytest_eagersession.fixture_values import adopt_held

        return adopt_held(survivors, scopes)

    # ------------------------------------------------------------- reporting

    def _report(
        self,
        item: pytest.Item,
        scope: str,
        leaks: list[Any],
        policy: TestPolicy,
        *,
        suppress: bool,
        retention: str | None = None,
    ) -> None:
        settings = self._settings
        graph_errors: list[str] = []
        records = build_records(
            leaks,
            scope,
            explain_limit=settings.max_leaks,
            chain_depth=settings.chain_depth,
            chain_budget_s=settings.chain_budget_s,
            framework=_framework_roots(item.config),
            graphs_dir=settings.graphs_dir,
            graph_prefix=_safe_name(item.nodeid) + f"-{scope}",
            graph_errors=graph_errors,
            destroy=policy.leaks == "fail",
        )
        del leaks
        item.stash.setdefault(_RECORDS_KEY, []).extend(records)
        where = item.nodeid if scope == "function" else f"The {scope} of {item.nodeid}"
        texts = [render(where, scope, records, strategy=policy.strategy.value)] if records else []
        if retention is not None:
            texts.append(f"{where}: {retention}")
        text = "\n".join(texts)
        for error in graph_errors:
            text += f"\nReference graphs not written to {settings.graphs_dir}: {error}"
        if suppress:
            return  # the test failed for its own reason: show only that
        if policy.leaks == "warn":
            warnings.warn(EagerSessionLeakWarning(text), stacklevel=1)
        else:
            pytest.fail(text, pytrace=False)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect each test's outcome and leak data (on the xdist controller too)."""
        entry = self._results.setdefault(
            report.nodeid, {"nodeid": report.nodeid, "outcome": "passed"}
        )
        if report.failed:
            entry["outcome"] = "failed" if report.when == "call" else "error"
        elif report.skipped and entry["outcome"] == "passed":
            entry["outcome"] = "skipped"
        for name, value in report.user_properties:
            if name == "eagersession" and isinstance(value, str):
                entry.update(json.loads(value))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """List the tests that leaked, with counts and bytes."""
        if self._json_error is not None:
            terminalreporter.write_line(self._json_error, red=True)
        tf_module = sys.modules.get("tensorflow")
        if tf_module is not None:
            untested = tensorflow_warning(str(getattr(tf_module, "__version__", "0")))
            if untested is not None:
                terminalreporter.write_line(f"eagersession: WARNING: {untested}", yellow=True)
        self._summarize_retention(terminalreporter)
        leaky = [entry for entry in self._results.values() if entry.get("leaks")]
        if not leaky:
            return
        terminalreporter.section("eagersession: leaked TensorFlow objects")
        for entry in leaky:
            leaks = entry["leaks"]
            total = sum(leak.get("nbytes") or 0 for leak in leaks)
            terminalreporter.write_line(
                f"{entry['nodeid']}: {len(leaks)} leaked ({format_bytes(total)})"
            )

    def _summarize_retention(self, terminalreporter: Any) -> None:
        released = kept = 0
        tests = []
        for entry in self._results.values():
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

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Close what is still open and write the JSON report (not on xdist workers)."""
        interrupted, self._test_session = self._test_session, None
        if interrupted is not None:
            # The run stopped inside a test (KeyboardInterrupt, pytest.exit) before its teardown
            # or while it closed the session: close() finishes what is left.
            with contextlib.suppress(Exception):
                interrupted.close()
        for key in list(self._scope_sessions):
            scope_session, _ = self._scope_sessions.pop(key)
            self._scope_values.pop(key, None)
            if not scope_session.closed:
                scope_session.close()  # leaks found now have no test to fail: none is destroyed
        path = self._settings.json_path
        if path is None or hasattr(self._config, "workerinput"):
            return
        try:
            write_json(path, self._results.values())
        except (OSError, ValueError) as error:
            # Said in the terminal summary, after the results it does not change.
            self._json_error = f"eagersession: could not write the JSON report to {path}: {error}"
            if self._config.pluginmanager.get_plugin("terminalreporter") is None:
                sys.stderr.write(self._json_error + "\n")


# ----------------------------------------------------------------- fixtures


def _session_fixture(request: pytest.FixtureRequest, scope: str) -> EagerSession:
    manager: EagerSessionManager | None = request.config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if scope == "function":
        own: EagerSession = request.node.stash[_SESSION_KEY]
        return own
    session = manager.scope_session(request.node, scope) if manager is not None else None
    if session is None:
        raise RuntimeError("the eagersession plugin is not active")
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


def _scope_key(node: Any, scope: str) -> str:
    return "::session::" if scope == "session" else f"{scope}::{node.nodeid}"


def _marks(node: Any) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    return [(tuple(mark.args), dict(mark.kwargs)) for mark in node.iter_markers("cleanup")]


def _build(policy: TestPolicy) -> Any:
    return (
        EagerSession.options()
        .resource_cleanup_strategy(policy.strategy)
        .track_creation(policy.track_creation)
        .allow(policy.allow)
        .destroy_survivors(False)  # the manager destroys leaks, after wider scopes took theirs
    )


def _stats_json(session: EagerSession | None) -> dict[str, int] | None:
    if session is None:
        return None
    stats = session.stats()
    return {name: getattr(stats, name) for name in stats.__dataclass_fields__}


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


def _retention_text(released: list[str]) -> str:
    lines = "\n".join(f"  - {line}" for line in released)
    return (
        "TensorFlow's own known leaks kept objects of this scope (released at its end; "
        f"--eagersession-retention=fail fails on this):\n{lines}"
    )


def _safe_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)[:120]


def _framework_roots(config: pytest.Config) -> list[Root]:
    """pytest's state that keeps user objects past a test: callbacks of ``config.add_cleanup``."""
    cleanups = getattr(config, "_cleanup_stack", None)  # pytest 8.1 and later
    if cleanups is None:
        cleanups = getattr(config, "_cleanup", None)
    return [] if cleanups is None else [Root("pytest config.add_cleanup", cleanups, "framework")]
