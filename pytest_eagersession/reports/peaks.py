"""Each test's peak against the last run's: the figures a run keeps, and when growth fails.

A run that compares records, for every test whose body passed, the peak of its tracked bytes
and of each GPU's memory; the next run compares its own peaks with them. The figures are plain
JSON (the plugin keeps them in pytest's cache), read back with a check of their shape: a file
edited by hand or written by another version is said to be unreadable, never trusted halfway.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from pytest_eagersession.base.sizes import format_bytes

#: The version of the recorded figures' layout; another version is read as unreadable.
LAYOUT = 1
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


def read_peaks(data: object) -> dict[str, Peak]:
    """The recorded peaks by test id; ``{}`` for nothing recorded, ``UnreadablePeaks`` if odd."""
    if data is None:
        return {}
    if not isinstance(data, dict) or data.get("layout") != LAYOUT:
        raise UnreadablePeaks(f"expected layout {LAYOUT}, found {_shape(data)}")
    tests = data.get("tests")
    if not isinstance(tests, dict):
        raise UnreadablePeaks(f"expected a mapping of tests, found {_shape(tests)}")
    peaks: dict[str, Peak] = {}
    for nodeid, figures in tests.items():
        peak = Peak.of_entry(figures) if isinstance(figures, dict) else None
        devices = figures.get("device_peak_bytes") if isinstance(figures, dict) else None
        if peak is None or not isinstance(devices, dict) or len(devices) != len(peak.devices):
            raise UnreadablePeaks(f"the figures of {nodeid!r} are {_shape(figures)}")
        peaks[str(nodeid)] = peak
    return peaks


def recorded(previous: Mapping[str, Peak], passed: Mapping[str, Peak]) -> dict[str, Any]:
    """What to record after a run: the tests that passed now, the others as they were."""
    tests = {nodeid: peak.to_json() for nodeid, peak in previous.items()}
    tests.update((nodeid, peak.to_json()) for nodeid, peak in passed.items())
    return {"layout": LAYOUT, "tests": dict(sorted(tests.items()))}


@dataclass(frozen=True)
class IncreaseRule:
    """A peak fails when it grew by more than ``percent`` and by more than ``floor`` bytes."""

    percent: float = DEFAULT_PERCENT
    floor: int = DEFAULT_FLOOR

    def increases(self, where: str, before: Peak, now: Peak) -> list[str]:
        """One line for each figure of ``now`` that grew too much since ``before``."""
        lines = []
        if self._grew(before.tracked, now.tracked):
            lines.append(self._line(where, "tracked TensorFlow bytes", before.tracked, now.tracked))
        for device, peak in sorted(now.devices.items()):
            earlier = before.devices.get(device)
            if earlier is not None and self._grew(earlier, peak):
                lines.append(self._line(where, f"{device}'s memory", earlier, peak))
        return lines

    def _grew(self, before: int, now: int) -> bool:
        return now - before > self.floor and now > before * (1 + self.percent / 100)

    def _line(self, where: str, what: str, before: int, now: int) -> str:
        growth = f"{(now - before) / before:.0%} " if before else ""
        return (
            f"{where} peaked at {format_bytes(now)} of {what}, up {growth}from "
            f"{format_bytes(before)} in the last recorded run (more than the {self.percent:g}% "
            f"and the {format_bytes(self.floor)} allowed)."
        )


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
