"""The pytest plugin: each test runs in an eager session, and what outlives its scope fails it.

The entry point: options, configuration, the report header and status, and the fixtures. The
options come from ``settings.OPTIONS``; the rest of the hooks are those of the one object the
plugin registers, ``run.EagerSessionRun``, kept in ``config.stash[RUN_KEY]``.
"""

from __future__ import annotations

import functools
import sys

import pytest

from pytest_eagersession.base.support_range import python_warning
from pytest_eagersession.core.session import EagerSession
from pytest_eagersession.core.tracking import TRACKER
from pytest_eagersession.plugin.html_report import requested as html_report_requested
from pytest_eagersession.plugin.peak_check import PeakCheck
from pytest_eagersession.plugin.per_test import LEAKED_ATTRIBUTE
from pytest_eagersession.plugin.run import RUN_PLUGIN_NAME, EagerSessionRun
from pytest_eagersession.plugin.setting_values import SettingsError
from pytest_eagersession.plugin.settings import MARKER_HELP, OPTIONS, Settings, resolve
from pytest_eagersession.plugin.verdicts import (
    ROUTES_KEY,
    STATE_KEY,
    EagerSessionLeakWarning,
    ItemState,
)
from pytest_eagersession.reports.peaks import IncreaseRule
from pytest_eagersession.reports.routes import KnownRoutes

__all__ = ["SETTINGS_KEY", "EagerSessionFixture", "EagerSessionLeakWarning"]

#: The type of every ``*eager_session`` fixture, for annotations.
EagerSessionFixture = EagerSession

#: The run's ``Settings``, resolved once when pytest is configured.
SETTINGS_KEY = pytest.StashKey[Settings]()

#: The run's one plugin object (its parts: the test sessions, the scopes', the summary).
RUN_KEY = pytest.StashKey[EagerSessionRun]()


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
        rule = IncreaseRule(
            settings.fail_on_increase, settings.increase_floor, settings.increase_history
        )
        peaks = PeakCheck(config, rule)
    # Each body's bytes and traces are measured when something reads them.
    measure = (
        peaks is not None
        or settings.json_path is not None
        or settings.most_memory > 0
        or bool(getattr(config.option, "xmlpath", None))
        or html_report_requested(config)
    )
    run = config.stash[RUN_KEY] = EagerSessionRun(config, settings, measure=measure, peaks=peaks)
    config.pluginmanager.register(run, RUN_PLUGIN_NAME)
    config.add_cleanup(functools.partial(_unregister, config, run))
    # Between tests nobody owns new objects; the line stays drawn all the same, so that no test
    # pays for thawing the heap and for the whole collection the interpreter runs soon after.
    config.add_cleanup(TRACKER.hold())


def _unregister(config: pytest.Config, run: EagerSessionRun) -> None:
    if config.pluginmanager.get_plugin(RUN_PLUGIN_NAME) is run:
        config.pluginmanager.unregister(run, RUN_PLUGIN_NAME)


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


# ----------------------------------------------------------------- fixtures


def _session_fixture(request: pytest.FixtureRequest, scope: str) -> EagerSession:
    if scope == "function":
        state: ItemState | None = request.node.stash.get(STATE_KEY, None)
        if state is None or state.session is None:
            raise RuntimeError("the eagersession plugin is not active")
        return state.session
    run = request.config.stash.get(RUN_KEY, None)
    active = run is not None and request.config.pluginmanager.get_plugin(RUN_PLUGIN_NAME) is run
    if run is None or not active:
        raise RuntimeError("the eagersession plugin is not active")
    return run.scopes.session_for(request.node, scope)


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
