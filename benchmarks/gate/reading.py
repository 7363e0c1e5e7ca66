"""Reading what a run wrote: its JUnit XML, its leaks and its plugin's profile, as text."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from gate.records import TEXT_LINES, TestResult
from gate.suites import SUITES


def nodeid_key(nodeid: str) -> str:
    """The id JUnit XML knows a test by (pytest's ``mangle_test_address``), from its node id."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]) + "::" + names[-1]


def read_junit(path: Path) -> dict[str, TestResult]:
    """Every test case's worst outcome; a case pytest splits in two (a failing call and a
    failing teardown) is merged back."""
    results: dict[str, TestResult] = defaultdict(TestResult)
    for case in ET.parse(path).getroot().iter("testcase"):
        key = f"{case.get('classname', '')}::{case.get('name', '')}"
        result = results[key]
        result.add("passed")
        for child in case:
            kind = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(child.tag)
            if kind is not None:
                result.add(kind, child.get("message", ""), child.text or "")
    return dict(results)


def read_leaks(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The leaks the plugin reported (not the allowed ones), by JUnit key."""
    if not path.is_file():
        return {}
    tests = json.loads(path.read_text(encoding="utf-8")).get("tests", [])
    leaks: dict[str, list[dict[str, Any]]] = {}
    for test in tests:
        reported = [leak for leak in test.get("leaks") or [] if not leak.get("allowed")]
        if reported:
            leaks[nodeid_key(test["nodeid"])] = reported
    return leaks


def read_profile(path: Path, slowest: int = 5) -> dict[str, Any]:
    """Where the plugin's time went (the JSON report's ``timings``): per phase over the run,
    split between tests that leaked and the others, and the tests it cost most."""
    if not path.is_file():
        return {}
    tests = json.loads(path.read_text(encoding="utf-8")).get("tests", [])
    phases: dict[str, dict[str, float]] = {}
    per_test = []
    for test in tests:
        timings = test.get("timings") or {}
        side = "leaking" if test.get("leaks") else "clean"
        for phase, seconds in timings.items():
            sums = phases.setdefault(phase, {"clean": 0.0, "leaking": 0.0})
            sums[side] += seconds
        per_test.append((sum(timings.values()), test["nodeid"], timings))
    per_test.sort(key=lambda item: -item[0])
    return {
        "tests": len(tests),
        "leaking_tests": sum(1 for test in tests if test.get("leaks")),
        "phases_s": {
            phase: {side: round(value, 3) for side, value in sums.items()}
            for phase, sums in phases.items()
        },
        "slowest": [
            {"nodeid": nodeid, "total_s": round(total, 3), "timings": timings}
            for total, nodeid, timings in per_test[:slowest]
        ],
    }


def print_profile(profile: dict[str, Any], wall_s: float, suite: str = "") -> None:
    """The plugin's time by phase, and the tests it cost most (in one suite's run)."""
    if not profile:
        return
    phases = profile["phases_s"]
    total = sum(sum(sides.values()) for sides in phases.values())
    print(
        f"\n== {suite + ': ' if suite else ''}the plugin's time by phase: {total:.1f} s of the "
        f"{wall_s:.1f} s run "
        f"({profile['tests']} tests, {profile['leaking_tests']} leaking)"
    )
    print(f"   {'phase':<8} {'clean tests':>12} {'leaking tests':>14}")
    for phase, sides in phases.items():
        print(f"   {phase:<8} {sides['clean']:>11.2f}s {sides['leaking']:>13.2f}s")
    print("   the tests it cost most:")
    for test in profile["slowest"]:
        parts = ", ".join(f"{phase} {seconds:.3f}" for phase, seconds in test["timings"].items())
        print(f"   {test['total_s']:.3f} s  {test['nodeid']} ({parts})")


def gate_paths() -> list[str]:
    """Every test file of the gate, relative to realsuite/, in the order they run."""
    return [path for suite in SUITES for path in suite.paths()]


def display_id(key: str) -> str:
    """A JUnit key back to the test's node id, for people."""
    dotted, _, name = key.partition("::")
    for path in gate_paths():
        module = path.removesuffix(".py").replace("/", ".")
        if dotted == module:
            return f"{path}::{name}"
        if dotted.startswith(module + "."):
            return f"{path}::{dotted[len(module) + 1 :].replace('.', '::')}::{name}"
    return key


ANSI = re.compile(r"(\x1b|#x1B)\[[0-9;]*m")


def raised(text: str) -> str:
    """The exception a traceback ends with: its last block of pytest's ``E`` lines."""
    blocks: list[list[str]] = []
    previous = False
    for line in ANSI.sub("", text).splitlines():
        current = line.startswith("E ") or line == "E"
        if current:
            if not previous:
                blocks.append([])
            blocks[-1].append(line[1:].strip())
        previous = current
    return "\n".join(blocks[-1]) if blocks else ""


def signature(message: str) -> str:
    """A failure's message reduced to what tests failing the same way share."""
    lines = [line.strip() for line in ANSI.sub("", message).splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    first = lines[0]
    if "Exception encountered when calling" in first and len(lines) > 1:
        first += " " + lines[1]  # Keras's wrapper: the cause is on the next line
    first = re.sub(r"failed on (setup|teardown) with ", r"\1: ", first)
    first = re.sub(r"0x[0-9a-fA-F]+", "0x...", first)
    first = re.sub(r"\b\d{6,}\b", "N", first)
    first = re.sub(r"_\d+\b", "_N", first)  # Keras's numbered layer, model and variable names
    return first[:240]


def trimmed(text: str, lines: int = TEXT_LINES, *, tail: bool = False) -> list[str]:
    """At most ``lines`` lines of ``text``: its start, or its end (where a traceback's error is)."""
    kept = ANSI.sub("", text).rstrip().splitlines()
    if len(kept) <= lines:
        return kept
    if tail:
        return [f"... ({len(kept) - lines} lines above)", *kept[-lines:]]
    return [*kept[:lines], f"... ({len(kept) - lines} more lines)"]
