"""The plugin's settings: one table of options, parsed and checked once, and the marker's stub.

No pytest here: the plugin registers the table's options and ini keys, hands in their plain
values, and turns ``SettingsError`` into a usage error (for options) or a failure of the one
test (for a marker).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_eagersession.base.strategies import ResourceCleanupStrategy
from pytest_eagersession.core.survivors import AllowFilter, AllowPredicate, check_allow_filter
from pytest_eagersession.plugin.setting_values import (
    SettingsError,
    parse_bool,
    parse_bytes,
    parse_count,
    parse_file_path,
    parse_folder_path,
    parse_increase,
    parse_picture_path,
    parse_runs,
    parse_seconds,
    parse_strategy,
)
from pytest_eagersession.reports.explain import DEFAULT_BUDGET_S
from pytest_eagersession.reports.peaks import DEFAULT_FLOOR, DEFAULT_HISTORY, DEFAULT_PERCENT

DEFAULT_CHAIN_DEPTH = 10
VERBOSE_CHAIN_DEPTH = 20
#: The cap on the one search for the holders of a scope's leaks with -v (explain's otherwise).
VERBOSE_CHAIN_BUDGET_S = 20.0


class LeakMode(str, enum.Enum):
    """What a TensorFlow object that outlives its scope does to the test."""

    FAIL = "fail"
    """The test gets an error at teardown (default)."""

    WARN = "warn"
    """An ``EagerSessionLeakWarning`` with the report; the test passes."""

    OFF = "off"
    """Nothing is checked."""

    @classmethod
    def parse(cls, value: object, where: str) -> LeakMode:
        """The mode named ``value`` (any case, surrounding blanks ignored) or ``SettingsError``."""
        # Compared to nothing but text: an odd object's == may raise.
        text = value.strip().lower() if isinstance(value, str) else None
        for mode in cls:
            if mode.value == text:
                return mode
        raise SettingsError(f"{where}: unknown leaks mode {value!r}; choose one of {cls.choices()}")

    @classmethod
    def choices(cls) -> str:
        """The valid names, as a user writes them."""
        return ", ".join(mode.value for mode in cls)


#: The leak modes' names, as a user writes them.
LEAK_MODES = tuple(mode.value for mode in LeakMode)
RETENTION_MODES = ("report", "fail")


def cleanup(
    strategy: ResourceCleanupStrategy | str | None = None,
    *,
    leaks: LeakMode | str | None = None,
    allow: AllowFilter | None = None,
    track_creation: bool | None = None,
    max_traces: int | None = None,
    max_bytes: int | str | None = None,
) -> None:
    """run the test in an eager session with this resource cleanup strategy (in_background,
    on_safe_points, on_session_close); leaks='fail'|'warn'|'off' says what a TensorFlow object
    that outlives the test does; allow= a regex (searched in the leak's summary), a predicate on
    a Survivor, or a list of those, for expected survivors; track_creation=True records the op
    and line that made each object; max_traces=N fails the test when one of its tf.functions
    traces more than N times; max_bytes='64 MiB' fails it when its peak of tracked TensorFlow
    bytes (or of a GPU's memory) passes that size."""


def _signature_text(function: Callable[..., Any]) -> str:
    """``name(a=None, *, b=None)``: the signature as a user writes the call, without types."""
    signature = inspect.signature(function)
    bare = signature.replace(
        parameters=[
            parameter.replace(annotation=inspect.Parameter.empty)
            for parameter in signature.parameters.values()
        ],
        return_annotation=inspect.Signature.empty,
    )
    return f"{function.__name__}{bare}"


#: The signature of ``@pytest.mark.cleanup``, from its stub.
MARKER_SIGNATURE = _signature_text(cleanup)
#: The marker's line in ``pytest --markers``: its signature, then its stub's docstring.
MARKER_HELP = f"{MARKER_SIGNATURE}: {' '.join((cleanup.__doc__ or '').split())}"


@dataclass(frozen=True)
class Settings:
    """Suite-wide settings, resolved once (command line, then ini file, then default)."""

    strategy: ResourceCleanupStrategy = ResourceCleanupStrategy.IN_BACKGROUND
    leaks: LeakMode = LeakMode.FAIL
    allow: tuple[str, ...] = ()
    track_creation: bool = False
    max_leaks: int | None = None
    """Leaks traced to their holders per scope; None: all of them."""
    chain_depth: int = DEFAULT_CHAIN_DEPTH
    chain_budget_s: float = DEFAULT_BUDGET_S
    json_path: str | None = None
    graphs_dir: str | None = None
    retention: str = "report"
    """What TensorFlow's own known leaks of a test's objects do: ``report`` apart, or ``fail``."""
    most_memory: int = 0
    """Tests in the end-of-run table of the highest peaks of tracked bytes (0: no table)."""
    most_retained: int = 0
    """Tests in the end-of-run table of the memory that stayed after them (0: no table)."""
    plot_path: str | None = None
    """Where the picture of the run's memory after each test goes (SVG or PNG); None: nowhere."""
    fail_on_increase: float | None = None
    """A test whose peak grew by more than this percentage since the last run fails (None: off)."""
    increase_floor: int = DEFAULT_FLOOR
    """Growth in bytes that never fails a test, whatever its percentage."""
    max_bytes: int | None = None
    """The peak of tracked bytes (and of each GPU's memory) any test's body may reach, unless
    its marker's ``max_bytes`` says otherwise; None: no limit."""
    increase_history: int = DEFAULT_HISTORY
    """The runs kept for each test, to compare its peak with (and a creep's window)."""
    full_chains: bool = False
    """Reports show every link of a long chain (``-v``); otherwise its root and last links."""


@dataclass(frozen=True)
class TestPolicy:
    """What one test runs under, after its markers are applied to the suite's settings."""

    strategy: ResourceCleanupStrategy
    leaks: LeakMode
    allow: AllowPredicate | None = field(compare=False)
    track_creation: bool
    max_traces: int | None = None
    """The most traces any one tf.function of the test's body may make."""
    max_bytes: int | None = None
    """The most tracked TensorFlow bytes (and GPU memory) the test's body may peak at."""


@dataclass(frozen=True)
class Option:
    """One setting: its command-line flag, its ini key (if any), and how its value is read."""

    name: str
    """``max_leaks``: flag ``--eagersession-max-leaks``, ini key ``eagersession_max_leaks``."""
    field: str
    """The ``Settings`` field it sets."""
    help: str
    parse: Callable[[Any, str], Any]
    """``parse(value, where)`` gives the setting's value or raises ``SettingsError``."""
    default: Any = None
    verbose_default: Any = None
    """The default with ``-v``, where it differs."""
    metavar: str | None = None
    kind: Literal["value", "flag", "list", "optional"] = "value"
    """``flag``: the command line's takes no value; ``list``: it repeats, the ini key has lines;
    ``optional``: the command line's value may be left out (``const`` then)."""
    const: str | None = None
    """The value of an ``optional`` flag given alone."""
    ini_help: str | None = None
    """None: command line only."""

    @property
    def flag(self) -> str:
        """The command-line flag."""
        return "--eagersession-" + self.name.replace("_", "-")

    @property
    def key(self) -> str:
        """The ini key, also the ``dest`` of the flag."""
        return "eagersession_" + self.name

    @property
    def where(self) -> str:
        """How messages name the setting."""
        if self.kind == "flag":
            return self.key
        return f"{self.flag} / {self.key}" if self.ini_help is not None else self.flag


def parse_leaks(value: Any, where: str) -> LeakMode:
    """``fail``, ``warn`` or ``off``, or the ``LeakMode`` member."""
    return value if isinstance(value, LeakMode) else LeakMode.parse(value, where)


def parse_retention(value: Any, where: str) -> str:
    """``report`` or ``fail``."""
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in RETENTION_MODES:
        raise SettingsError(
            f"{where}: unknown retention mode {value!r}; choose one of {', '.join(RETENTION_MODES)}"
        )
    return str(text)


def _allow_patterns(value: Any, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else list(value)
    patterns = [str(item).strip() for item in items if str(item).strip()]
    try:
        check_allow_filter(patterns)
    except ValueError as error:
        raise SettingsError(f"{where}: {error}") from None
    return tuple(patterns)


#: Every setting of the suite, in the order ``--help`` lists them.
OPTIONS = (
    Option(
        "strategy",
        "strategy",
        "cleanup strategy of each test's session: in_background (default), on_safe_points, "
        "on_session_close.",
        parse_strategy,
        default=ResourceCleanupStrategy.IN_BACKGROUND,
        metavar="STRATEGY",
        ini_help="default cleanup strategy of each test's session",
    ),
    Option(
        "leaks",
        "leaks",
        "what a TensorFlow object that outlives its scope does: fail (default), warn, off.",
        parse_leaks,
        default=LeakMode.FAIL,
        metavar="MODE",
        ini_help="fail, warn or off for leaked objects",
    ),
    Option(
        "allow",
        "allow",
        "expected survivors: a regex searched in each leak's summary (repeatable).",
        _allow_patterns,
        default=(),
        metavar="REGEX",
        kind="list",
        ini_help="regexes of expected survivors",
    ),
    Option(
        "track_creation",
        "track_creation",
        "record the op and line of code that made each object (slower: an op callback).",
        parse_bool,
        default=False,
        kind="flag",
        ini_help="record the op and line that made each object",
    ),
    Option(
        "max_leaks",
        "max_leaks",
        "leaks traced to their holders per scope (default: all of them).",
        parse_count,
        metavar="N",
        ini_help="leaks traced to their holders per scope",
    ),
    Option(
        "chain_budget",
        "chain_budget_s",
        "time the one search for a scope's leaks' holders may take (default 5; 20 with -v).",
        parse_seconds,
        default=DEFAULT_BUDGET_S,
        verbose_default=VERBOSE_CHAIN_BUDGET_S,
        metavar="SECONDS",
        ini_help="seconds the search for a scope's leaks' holders may take",
    ),
    Option(
        "retention",
        "retention",
        "what TensorFlow's own known leaks of a test's objects (the gradient registry) do: "
        "report (default: listed apart, the test passes) or fail.",
        parse_retention,
        default="report",
        metavar="MODE",
        ini_help="report or fail for TensorFlow's own known leaks of a test's objects",
    ),
    Option(
        "max_bytes",
        "max_bytes",
        "fail a test whose body's peak of tracked TensorFlow bytes (or of a GPU's memory) goes "
        "above SIZE, like '512 MiB'; a marker's max_bytes overrides it (default: no limit).",
        parse_bytes,
        metavar="SIZE",
        ini_help="the peak of tracked bytes any test's body may reach (blank: no limit)",
    ),
    Option(
        "most_memory",
        "most_memory",
        "at the end of the run, a table of the N tests whose bodies peaked highest in tracked "
        "TensorFlow bytes (default 0: none).",
        parse_count,
        default=0,
        metavar="N",
        ini_help="tests in the end-of-run table of the highest peaks of tracked bytes",
    ),
    Option(
        "most_retained",
        "most_retained",
        "at the end of the run, a table of the N tests after which the most memory stayed in "
        "use above its level before them (default 0: none).",
        parse_count,
        default=0,
        metavar="N",
        ini_help="tests in the end-of-run table of the memory that stayed after them",
    ),
    Option(
        "plot",
        "plot_path",
        "draw the run's memory after each test, in run order, to this picture: SVG, or PNG "
        "by the extension (PNG needs matplotlib).",
        parse_picture_path,
        metavar="PATH",
        ini_help="SVG or PNG file for the picture of the run's memory after each test",
    ),
    Option(
        "fail_on_increase",
        "fail_on_increase",
        "fail a test whose body's peak of tracked TensorFlow bytes (or of a GPU's memory) grew "
        f"by more than PERCENT (default {DEFAULT_PERCENT:g}) since the last run that recorded it, "
        "in pytest's cache (--cache-clear forgets it); the first run only records.",
        parse_increase,
        metavar="PERCENT",
        kind="optional",
        const=f"{DEFAULT_PERCENT:g}",
        ini_help="percentage a test's peak may stand above its last runs' (blank: no check)",
    ),
    Option(
        "increase_floor",
        "increase_floor",
        "growth of a peak that never fails a test, whatever its percentage "
        "(default 1 MiB; tiny tests would flap).",
        parse_bytes,
        default=DEFAULT_FLOOR,
        metavar="SIZE",
        ini_help="growth of a peak in bytes that never fails a test (default 1 MiB)",
    ),
    Option(
        "increase_history",
        "increase_history",
        "the last runs whose peaks each test is compared with: a peak within what they showed "
        f"passes; one that rose in each of them fails (default {DEFAULT_HISTORY}).",
        parse_runs,
        default=DEFAULT_HISTORY,
        metavar="N",
        ini_help="the last runs whose peaks each test is compared with",
    ),
    Option(
        "json",
        "json_path",
        "write every test's strategy, stats and leaks to this JSON file.",
        parse_file_path,
        metavar="PATH",
    ),
    Option(
        "graphs",
        "graphs_dir",
        "write a back-reference graph of each traced leak here (DOT; PNG with Graphviz).",
        parse_folder_path,
        metavar="DIR",
    ),
)


def resolve(cli: Mapping[str, Any], ini: Mapping[str, Any], *, verbosity: int = 0) -> Settings:
    """Settings from command-line values (None when not given), then ini values, then defaults.

    Both mappings are keyed by ``Option.name``; output paths are checked here, before any test.
    """
    verbose = verbosity > 0
    values: dict[str, Any] = {
        "chain_depth": VERBOSE_CHAIN_DEPTH if verbose else DEFAULT_CHAIN_DEPTH,
        "full_chains": verbose,
    }
    for option in OPTIONS:
        value = cli.get(option.name)
        if value is None or value == []:
            # A blank ini value means "not set"; a blank command-line value is a mistake
            # (``--eagersession-strategy=$UNSET``), reported by the parsers.
            value = ini.get(option.name)
            if value in ("", [], None):
                value = None
        if value is not None:
            values[option.field] = option.parse(value, option.where)
        elif verbose and option.verbose_default is not None:
            values[option.field] = option.verbose_default
        else:
            values[option.field] = option.default
    return Settings(**values)


def policy_for(
    settings: Settings, marks: Iterable[tuple[Sequence[Any], Mapping[str, Any]]]
) -> TestPolicy:
    """Apply ``cleanup`` marks (closest first, as ``iter_markers`` yields them) to ``settings``."""
    values: dict[str, Any] = {}
    for args, kwargs in list(marks)[::-1]:  # farthest first, so the closest mark wins
        values.update(bind_marker(args, kwargs))
    strategy = values.get("strategy")
    leaks = values.get("leaks")
    track_creation = values.get("track_creation")
    max_traces = values.get("max_traces")
    max_bytes = values.get("max_bytes")
    allow_items: list[Any] = list(settings.allow)
    if values.get("allow") is not None:
        allowed = values["allow"]
        if isinstance(allowed, str) or callable(allowed):
            allow_items.append(allowed)
        else:
            try:
                allow_items.extend(allowed)
            except TypeError:
                raise SettingsError(
                    "@pytest.mark.cleanup(allow=...): allow takes a predicate on a Survivor, a "
                    "regular expression searched in its summary, or a list of those; got "
                    f"{type(allowed).__name__}"
                ) from None
    try:
        predicate = check_allow_filter(allow_items) if allow_items else None
    except (TypeError, ValueError) as error:
        raise SettingsError(f"@pytest.mark.cleanup(allow=...): {error}") from None
    return TestPolicy(
        strategy=parse_strategy(strategy, "@pytest.mark.cleanup(strategy=...)")
        if strategy is not None
        else settings.strategy,
        leaks=parse_leaks(leaks, "@pytest.mark.cleanup(leaks=...)")
        if leaks is not None
        else settings.leaks,
        allow=predicate,
        track_creation=_marker_bool(track_creation)
        if track_creation is not None
        else settings.track_creation,
        max_traces=parse_count(max_traces, "@pytest.mark.cleanup(max_traces=...)")
        if max_traces is not None
        else None,
        max_bytes=parse_bytes(max_bytes, "@pytest.mark.cleanup(max_bytes=...)")
        if max_bytes is not None
        else settings.max_bytes,
    )


def bind_marker(args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Check one mark's arguments against the marker's signature; return those given."""
    try:
        bound = inspect.signature(cleanup).bind(*args, **kwargs)
    except TypeError as error:
        raise SettingsError(
            f"@pytest.mark.cleanup: {error}; its signature is {MARKER_SIGNATURE}"
        ) from None
    return {name: value for name, value in bound.arguments.items() if value is not None}


def _marker_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(
            f"@pytest.mark.cleanup(track_creation=...): expected True or False, got {value!r}"
        )
    return value
