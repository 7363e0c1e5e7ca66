"""Comparing the two sides test by test: the one difference allowed is a leak report."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from gate.reading import display_id, raised, signature, trimmed
from gate.records import LEAK_TEXT, Difference, Run, TestResult


def is_leak_only(result: TestResult, leaks: list[dict[str, Any]]) -> bool:
    """Whether this plugin-on result is a leak report and nothing else."""
    return (
        result.outcome == "error"
        and bool(leaks)
        and not result.call_failed
        and bool(result.texts)
        and all(LEAK_TEXT.search(text) for text in result.texts)
    )


def failure(result: TestResult) -> str:
    """What a failed or errored test raised, as a signature."""
    text = "\n\n".join(result.texts)
    return signature(raised(text) or (result.messages[0] if result.messages else ""))


def difference(key: str, off: str, on_result: TestResult, on_run: Run) -> Difference:
    leaks = on_run.leaks.get(key, [])
    leak = is_leak_only(on_result, leaks)
    if on_result.messages:
        message = on_result.messages[0]
    elif on_result.outcome == "passed":
        message = f"passes with the plugin, {off} without it"
    else:
        message = f"{on_result.outcome} with the plugin"
    text = "\n\n".join(on_result.texts) if on_result.texts else message
    return Difference(
        nodeid=display_id(key),
        off=off,
        on=on_result.outcome,
        leak=leak,
        signature="leak report" if leak else signature(raised(text) or message),
        text=trimmed(text, tail=not leak),
        leaks=leaks,
    )


def changed(off: TestResult, on: TestResult) -> bool:
    """Whether the plugin changed this outcome: another outcome, or a failure of another kind."""
    if off.outcome != on.outcome:
        return True
    return off.outcome in ("failed", "error") and failure(off) != failure(on)


def compare(off: Run | None, on: Run) -> list[Difference]:
    """The tests whose outcome differs; without a plugin-off run, those that fail or error."""
    differences = []
    for key, on_result in on.results.items():
        if off is None:
            if on_result.outcome in ("failed", "error"):
                differences.append(difference(key, "not run", on_result, on))
            continue
        off_result = off.results.get(key)
        if off_result is None:
            differences.append(difference(key, "missing", on_result, on))
        elif changed(off_result, on_result):
            off_outcome = off_result.outcome
            if off_outcome == on_result.outcome:
                off_outcome += f" ({failure(off_result)})"  # failing another way
            differences.append(difference(key, off_outcome, on_result, on))
    for key, off_result in (off.results if off is not None else {}).items():
        if key not in on.results:
            differences.append(
                Difference(display_id(key), off_result.outcome, "missing", False, "not run", [], [])
            )
    return differences


def holder(leak: dict[str, Any]) -> str:
    """What holds a leak, for grouping: the first link of its ``retained_by`` chain."""
    chain = leak.get("retained_by")
    if not chain:
        return "(not traced: beyond --eagersession-max-leaks)"
    first = chain.split(" -> ")[0]
    return re.sub(r"\d+(\.\d+)? s\b", "N s", first)


def leak_groups(on: Run) -> list[dict[str, Any]]:
    """Every reported leak of the plugin-on run, grouped by holder, largest group first."""
    groups: dict[str, dict[str, Any]] = {}
    for key, leaks in on.leaks.items():
        for leak in leaks:
            group = groups.setdefault(
                holder(leak), {"holder": holder(leak), "leaks": 0, "kinds": Counter(), "tests": []}
            )
            group["leaks"] += 1
            group["kinds"][leak.get("kind", "?")] += 1
            if display_id(key) not in group["tests"]:
                group["tests"].append(display_id(key))
            group.setdefault("example", leak.get("retained_by"))
            group.setdefault("example_summary", leak.get("summary"))
    ordered = sorted(groups.values(), key=lambda g: (-len(g["tests"]), -g["leaks"], g["holder"]))
    for group in ordered:
        group["kinds"] = dict(group["kinds"].most_common())
    return ordered
