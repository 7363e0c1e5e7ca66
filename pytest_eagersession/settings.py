"""The plugin's settings: parsed and checked once, from the command line, the ini file and markers.

No pytest here: the plugin hands in plain values and turns ``SettingsError`` into a usage error
(for options) or a failure of the one test (for a marker).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_eagersession.explain import DEFAULT_BUDGET_S
from pytest_eagersession.sizes import parse_size
from pytest_eagersession.strategies import ResourceCleanupStrategy
from pytest_eagersession.survivors import AllowFilter, AllowPredicate, check_allow_filter

LEAK_MODES = ("fail", "warn", "off")
RETENTION_MODES = ("report", "fail")
DEFAULT_CHAIN_DEPTH = 10
VERBOSE_CHAIN_DEPTH = 20
#: The cap on the one search for the holders of a scope's leaks with -v (explain's otherwise).
VERBOSE_CHAIN_BUDGET_S = 20.0


class SettingsError(ValueError):
    """A setting with a bad value; the message names the valid choices."""


def cleanup(
    strategy: ResourceCleanupStrategy | str | None = None,
    *,
    leaks: str | None = None,
    allow: AllowFilter | None = None,
    track_creation: bool | None = None,
    max_traces: int | None = None,
    max_bytes: int | str | None = None,
) -> None:
    """The signature of ``@pytest.mark.cleanup``; marks are bound against it."""


MARKER_SIGNATURE = (
    "cleanup(strategy=None, *, leaks=None, allow=None, track_creation=None, max_traces=None, "
    "max_bytes=None)"
)

MARKER_HELP = (
    f"{MARKER_SIGNATURE}: run the test in "
    "an eager session with this resource cleanup strategy (in_background, on_safe_points, "
    "on_session_close); leaks='fail'|'warn'|'off' says what a TensorFlow object that outlives "
    "the test does; allow= a regex (searched in the leak's summary), a predicate on a Survivor, "
    "or a list of those, for expected survivors; track_creation=True records the op and line "
    "that made each object; max_traces=N fails the test when one of its tf.functions traces "
    "more than N times; max_bytes='64 MiB' fails it when its peak of tracked TensorFlow bytes "
    "(or of a GPU's memory) passes that size."
)


@dataclass(frozen=True)
class Settings:
    """Suite-wide settings, resolved once (command line, then ini file, then default)."""

    strategy: ResourceCleanupStrategy = ResourceCleanupStrategy.IN_BACKGROUND
    leaks: str = "fail"
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


@dataclass(frozen=True)
class TestPolicy:
    """What one test runs under, after its markers are applied to the suite's settings."""

    strategy: ResourceCleanupStrategy
    leaks: str
    allow: AllowPredicate | None = field(compare=False)
    track_creation: bool
    max_traces: int | None = None
    """The most traces any one tf.function of the test's body may make."""
    max_bytes: int | None = None
    """The most tracked TensorFlow bytes (and GPU memory) the test's body may peak at."""


def resolve(cli: Mapping[str, Any], ini: Mapping[str, Any], *, verbosity: int = 0) -> Settings:
    """Settings from command-line values (None when not given), then ini values, then defaults."""

    def pick(name: str) -> Any:
        value = cli.get(name)
        if value is None or value == []:
            # A blank ini value means "not set"; a blank command-line value is a mistake
            # (``--eagersession-strategy=$UNSET``), reported by the parsers below.
            value = ini.get(name)
            if value in ("", [], None):
                return None
        return value

    strategy = pick("strategy")
    leaks = pick("leaks")
    allow = pick("allow")
    track_creation = pick("track_creation")
    max_leaks = pick("max_leaks")
    chain_budget = pick("chain_budget")
    retention = pick("retention")
    verbose = verbosity > 0
    settings = Settings(
        strategy=parse_strategy(strategy, "--eagersession-strategy / eagersession_strategy")
        if strategy is not None
        else ResourceCleanupStrategy.IN_BACKGROUND,
        leaks=parse_leaks(leaks, "--eagersession-leaks / eagersession_leaks")
        if leaks is not None
        else "fail",
        allow=tuple(_allow_patterns(allow)),
        track_creation=parse_bool(track_creation, "eagersession_track_creation")
        if track_creation is not None
        else False,
        max_leaks=parse_count(max_leaks, "--eagersession-max-leaks / eagersession_max_leaks")
        if max_leaks is not None
        else None,
        chain_depth=VERBOSE_CHAIN_DEPTH if verbose else DEFAULT_CHAIN_DEPTH,
        chain_budget_s=parse_seconds(
            chain_budget, "--eagersession-chain-budget / eagersession_chain_budget"
        )
        if chain_budget is not None
        else (VERBOSE_CHAIN_BUDGET_S if verbose else DEFAULT_BUDGET_S),
        json_path=_path(pick("json"), "--eagersession-json", "a file path"),
        graphs_dir=_path(pick("graphs"), "--eagersession-graphs", "a folder path"),
        retention=parse_retention(retention, "--eagersession-retention / eagersession_retention")
        if retention is not None
        else "report",
    )
    check_allow_filter(list(settings.allow))
    return settings


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
        else None,
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


def parse_strategy(value: Any, where: str) -> ResourceCleanupStrategy:
    """A strategy from its name (any case, ``-`` or ``_``) or the enum member."""
    try:
        return ResourceCleanupStrategy.parse(value)
    except ValueError:
        raise SettingsError(
            f"{where}: unknown strategy {value!r}; choose one of "
            f"{ResourceCleanupStrategy.choices()}"
        ) from None


def parse_leaks(value: Any, where: str) -> str:
    """``fail``, ``warn`` or ``off``."""
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in LEAK_MODES:  # not compared to anything but text: an odd object's == may raise
        raise SettingsError(f"{where}: unknown leaks mode {value!r}; choose one of fail, warn, off")
    return str(text)


def parse_retention(value: Any, where: str) -> str:
    """``report`` or ``fail``."""
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in RETENTION_MODES:
        raise SettingsError(
            f"{where}: unknown retention mode {value!r}; choose one of report, fail"
        )
    return str(text)


def parse_bool(value: Any, where: str) -> bool:
    """A boolean from an ini-style word."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{where}: expected true or false, got {value!r}")


def parse_count(value: Any, where: str) -> int:
    """A non-negative integer."""
    try:
        count = int(value)
    except (TypeError, ValueError, OverflowError):
        count = -1
    if count < 0 or isinstance(value, bool):
        raise SettingsError(f"{where}: expected a whole number of 0 or more, got {value!r}")
    return count


def parse_seconds(value: Any, where: str) -> float:
    """A positive, finite number of seconds."""
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        seconds = math.nan
    if isinstance(value, bool) or not (0 < seconds < math.inf):
        raise SettingsError(f"{where}: expected a number of seconds above 0, got {value!r}")
    return seconds


def _path(value: Any, where: str, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{where}: expected {what}, got {value!r}")
    return value


def parse_bytes(value: Any, where: str) -> int:
    """A size in bytes: an int, or a number and a unit such as ``"64 MiB"``."""
    try:
        return parse_size(value)
    except ValueError as error:
        raise SettingsError(f"{where}: {error}") from None


def _marker_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(
            f"@pytest.mark.cleanup(track_creation=...): expected True or False, got {value!r}"
        )
    return value


def _allow_patterns(value: Any) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    patterns = [str(item).strip() for item in items if str(item).strip()]
    try:
        check_allow_filter(patterns)
    except ValueError as error:
        raise SettingsError(f"--eagersession-allow / eagersession_allow: {error}") from None
    return patterns
