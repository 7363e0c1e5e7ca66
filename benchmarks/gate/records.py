"""What a run of a suite leaves: each test's result, the run's times and leaks, a difference."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUTCOME_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
TEXT_LINES = 15  # lines of a failure's text shown per test
LEAK_TEXT = re.compile(r"\bleaked \d+ TensorFlow objects? \(.*?\) that outlived its \w+ scope")


@dataclass
class TestResult:
    """One test's outcome in one run, from the JUnit XML: the worst of its phases."""

    outcome: str = "passed"
    call_failed: bool = False
    messages: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    def add(self, outcome: str, message: str = "", text: str = "") -> None:
        if OUTCOME_RANK[outcome] > OUTCOME_RANK[self.outcome]:
            self.outcome = outcome
        if outcome == "failed":
            self.call_failed = True
        if message:
            self.messages.append(message)
        if text:
            self.texts.append(text)


@dataclass
class Run:
    """One pytest run of the gate."""

    name: str
    returncode: int
    wall_s: float
    cpu_s: float
    results: dict[str, TestResult]
    leaks: dict[str, list[dict[str, Any]]]
    log: Path
    suite: str = ""
    report: Path | None = None  # the plugin's JSON report, for the profile

    def counts(self) -> dict[str, int]:
        counted = Counter(result.outcome for result in self.results.values())
        return {outcome: counted.get(outcome, 0) for outcome in OUTCOME_RANK} | {
            "total": len(self.results)
        }

    rounds: int = 1
    side_by_side: bool = False  # ran at the same time as the other side

    def timed_with(self, other: Run) -> Run:
        """This run, its times added to those of ``other`` (a later round of the same side);
        its outcomes stay this run's, its exit status the worse of the two."""
        return dataclasses.replace(
            self,
            returncode=max(self.returncode, other.returncode),
            wall_s=self.wall_s + other.wall_s,
            cpu_s=self.cpu_s + other.cpu_s,
            rounds=self.rounds + other.rounds,
        )

    def figures(self) -> dict[str, Any]:
        """The run's entry of the gate's JSON: counts, times, exit status."""
        return {
            "counts": self.counts(),
            "wall_s": round(self.wall_s, 2),
            "cpu_s": round(self.cpu_s, 2),
            "rounds": self.rounds,
            "side_by_side": self.side_by_side,
            "returncode": self.returncode,
        }


@dataclass
class Difference:
    """A test whose outcome the plugin changed."""

    nodeid: str
    off: str
    on: str
    leak: bool  # the change is the plugin's leak report, and nothing else
    signature: str
    text: list[str]
    leaks: list[dict[str, Any]]
