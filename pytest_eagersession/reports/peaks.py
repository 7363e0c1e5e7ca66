"""Each test's peak against its last runs': the figures a run keeps, and when growth fails.

A run that compares records, for every test whose body passed, the peak of its tracked bytes
and of each GPU's memory, keeping each test's last few runs (``DEFAULT_HISTORY``); the next
run compares its own peaks with them. A peak within what those runs showed passes, whatever
its data did to it: it fails when it stands well above the highest of them (a jump), or when
it rose in each of a full window of runs and by as much over them (a creep). The figures are
plain JSON (the plugin keeps them in pytest's cache), read back with a check of their shape: a
file edited by hand or written by another version is said to be unreadable, never trusted
halfway.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from pytest_eagersession.base.sizes import format_bytes

#: The version of the recorded figures' layout: each test's last runs. Layout 1 (the last run
#: alone) is read as a history of one run; any other is unreadable.
LAYOUT = 2
#: The runs kept for each test, and the window a creep must rise through.
DEFAULT_HISTORY = 5
#: The growth a peak may show before it fails, in percent.
DEFAULT_PERCENT = 10.0
#: Below this growth in bytes a peak never fails, whatever the percentage (tiny tests flap).
DEFAULT_FLOOR = 1024 * 1024


class UnreadablePeaks(ValueError):
    """The recorded figures are not what this version writes."""


@dataclass(frozen=True)
class Peak:
    """One test body's peak of tracked bytes, and of each GPU's memory above its start."""

    tracked: int
    devices: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of_entry(cls, entry: Mapping[str, Any]) -> Peak | None:
        """The peak in a test's entry of the JSON report; None where its body was not measured."""
        tracked = entry.get("peak_bytes")
        if not _is_count(tracked):
            return None
        devices = entry.get("device_peak_bytes") or {}
        return cls(tracked, {name: n for name, n in devices.items() if _is_count(n)})

    def to_json(self) -> dict[str, Any]:
        """The recorded form."""
        return {"peak_bytes": self.tracked, "device_peak_bytes": dict(self.devices)}


#: A test's peaks in its last recorded runs, the oldest first.
History = tuple[Peak, ...]


def read_peaks(data: object) -> dict[str, History]:
    """The recorded runs by test id; ``{}`` for nothing recorded, ``UnreadablePeaks`` if odd."""
    if data is None:
        return {}
    if not isinstance(data, dict) or data.get("layout") not in (1, LAYOUT):
        raise UnreadablePeaks(f"expected layout {LAYOUT}, found {_shape(data)}")
    tests = data.get("tests")
    if not isinstance(tests, dict):
        raise UnreadablePeaks(f"expected a mapping of tests, found {_shape(tests)}")
    histories: dict[str, History] = {}
    for nodeid, figures in tests.items():
        runs = [figures] if data["layout"] == 1 else _runs_of(figures)
        if not runs:
            raise UnreadablePeaks(f"the figures of {nodeid!r} are {_shape(figures)}")
        histories[str(nodeid)] = tuple(_peak_of(nodeid, run) for run in runs)
    return histories


def _runs_of(figures: object) -> list[object]:
    runs = figures.get("runs") if isinstance(figures, dict) else None
    return list(runs) if isinstance(runs, list) else []


def _peak_of(nodeid: object, figures: object) -> Peak:
    peak = Peak.of_entry(figures) if isinstance(figures, dict) else None
    devices = figures.get("device_peak_bytes") if isinstance(figures, dict) else None
    if peak is None or not isinstance(devices, dict) or len(devices) != len(peak.devices):
        raise UnreadablePeaks(f"the figures of {nodeid!r} are {_shape(figures)}")
    return peak


def recorded(
    previous: Mapping[str, Sequence[Peak]],
    passed: Mapping[str, Peak],
    keep: int = DEFAULT_HISTORY,
) -> dict[str, Any]:
    """What to record after a run: each test that passed now with this run added to its last
    ones (``keep`` at most), the others as they were."""
    tests = {nodeid: list(history) for nodeid, history in previous.items()}
    for nodeid, peak in passed.items():
        tests[nodeid] = [*tests.get(nodeid, []), peak][-keep:]
    return {
        "layout": LAYOUT,
        "tests": {
            nodeid: {"runs": [peak.to_json() for peak in history]}
            for nodeid, history in sorted(tests.items())
        },
    }


@dataclass(frozen=True)
class IncreaseRule:
    """A peak fails when it stands more than ``percent`` and more than ``floor`` bytes above the
    highest of the test's last runs, or above the first of a full window of ``history`` runs
    that rose run after run."""

    percent: float = DEFAULT_PERCENT
    floor: int = DEFAULT_FLOOR
    history: int = DEFAULT_HISTORY

    def increases(self, where: str, before: Sequence[Peak], now: Peak) -> list[str]:
        """One line for each figure of ``now`` that grew too much since the runs ``before``
        (the oldest first)."""
        figures = [("tracked TensorFlow bytes", [peak.tracked for peak in before], now.tracked)]
        for device, peak in sorted(now.devices.items()):
            past = [earlier.devices[device] for earlier in before if device in earlier.devices]
            figures.append((f"{device}'s memory", past, peak))
        lines = []
        for what, past, value in figures:
            line = self._judge(where, what, past, value)
            if line is not None:
                lines.append(line)
        return lines

    def _judge(self, where: str, what: str, past: Sequence[int], now: int) -> str | None:
        if not past:
            return None  # no figure to compare with (a GPU new to this test)
        allowed = f"{self.percent:g}% and {format_bytes(self.floor)}"
        highest = max(past)
        if self._grew(highest, now):
            growth = f", up {(now - highest) / highest:.0%}" if highest else ""
            return (
                f"{where} peaked at {format_bytes(now)} of {what}{growth}; {_runs(past)} (more "
                f"than the {allowed} allowed above the highest)."
            )
        window = list(past[-self.history :])
        rising = all(a < b for a, b in zip([*window, now], [*window, now][1:], strict=False))
        if len(window) >= self.history and rising and self._grew(window[0], now):
            return (
                f"{where} peaked at {format_bytes(now)} of {what}, higher in each run than in "
                f"the one before; {_runs(window)} (more than the {allowed} allowed above the "
                "first of them)."
            )
        return None

    def _grew(self, before: int, now: int) -> bool:
        return now - before > self.floor and now > before * (1 + self.percent / 100)


def _runs(past: Sequence[int]) -> str:
    """``the last run 8.0 MiB``, or ``the last 5 runs 8.0 MiB to 9.6 MiB``."""
    if len(past) == 1:
        return f"the last run {format_bytes(past[0])}"
    low, high = format_bytes(min(past)), format_bytes(max(past))
    return f"the last {len(past)} runs {low} to {high}"


def parse_percent(value: object) -> float:
    """A percentage of 0 or more from ``10``, ``12.5`` or ``10%``; ``ValueError`` otherwise."""
    text = value.strip().removesuffix("%").strip() if isinstance(value, str) else value
    try:
        percent = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        percent = math.nan
    if isinstance(value, bool) or not math.isfinite(percent) or percent < 0:
        raise ValueError(f"expected a percentage of 0 or more, like 10 or 12.5, got {value!r}")
    return percent


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _shape(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}"
