"""Printing what the gate found: counts, ratios, differences, leaks by holder, suites."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from gate.records import Difference, Run


def label(suite: str) -> str:
    """The prefix of a section's title: the suite it is about."""
    return f"{suite}: " if suite else ""


def print_counts(runs: Iterable[Run], suite: str = "") -> None:
    print(f"\n== {label(suite)}counts")
    print(
        f"   {'run':<12}{'total':>7}{'passed':>8}{'failed':>8}{'error':>7}{'skipped':>9}"
        f"{'wall':>10}{'cpu':>10}"
    )
    for run in runs:
        c = run.counts()
        print(
            f"   plugin {run.name:<5}{c['total']:>7}{c['passed']:>8}{c['failed']:>8}"
            f"{c['error']:>7}{c['skipped']:>9}{run.wall_s:>9.1f}s{run.cpu_s:>9.1f}s"
        )


def ratios(off: Run, on: Run) -> dict[str, float]:
    """Plugin on / plugin off, in wall and in CPU time."""
    return {
        "wall": round(on.wall_s / off.wall_s, 3) if off.wall_s else float("nan"),
        "cpu": round(on.cpu_s / off.cpu_s, 3) if off.cpu_s else float("nan"),
    }


def transition(item: Difference) -> str:
    if item.off == "not run":
        return f"{item.on} with the plugin; no plugin-off run"
    return f"{item.off} without the plugin, {item.on} with it"


def print_differences(differences: Sequence[Difference], baseline: bool, suite: str = "") -> None:
    broken = [d for d in differences if not d.leak]
    leaked = [d for d in differences if d.leak]
    if broken:
        title = "outcome changed" if baseline else "failed or errored"
        print(
            f"\n== {label(suite)}BROKEN by the plugin: {len(broken)} tests ({title}, not by a "
            "leak report)"
        )
        groups: dict[str, list[Difference]] = defaultdict(list)
        for item in broken:
            groups[item.signature].append(item)
        for sig, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"\n-- {len(items)} x {sig}")
            print(f"   for example {items[0].nodeid} ({transition(items[0])}):")
            for line in items[0].text:
                print(f"   | {line}")
            for item in items:
                print(f"   {item.nodeid} ({transition(item)})")
    if leaked:
        print(f"\n== {label(suite)}changed by a leak report: {len(leaked)} tests")
        for item in leaked:
            print(f"\n-- {item.nodeid} ({transition(item)})")
            for line in item.text:
                print(f"   | {line}")


def print_leak_groups(groups: Sequence[dict[str, Any]], suite: str = "") -> None:
    if not groups:
        return
    total = sum(group["leaks"] for group in groups)
    print(f"\n== {label(suite)}leaks by holder: {total} leaked objects, {len(groups)} holders")
    for group in groups:
        kinds = ", ".join(f"{count} {kind}" for kind, count in group["kinds"].items())
        tests = group["tests"]
        print(f"\n-- {group['holder']}")
        print(f"   {group['leaks']} leaks ({kinds}) in {len(tests)} tests")
        print(f"   e.g. {group['example_summary']}")
        if group["example"] and group["example"] != group["holder"]:
            print(f"        {group['example']}")
        for nodeid in tests[:5]:
            print(f"   {nodeid}")
        if len(tests) > 5:
            print(f"   ... and {len(tests) - 5} more")


def print_suites(suites: dict[str, dict[str, Any]]) -> None:
    """One line per suite and one for them all: tests, wall times, ratios, what changed."""
    print("\n== suites")
    print(
        f"   {'suite':<9}{'tests':>7}{'off wall':>10}{'on wall':>10}{'on/off wall':>13}"
        f"{'on/off cpu':>12}{'broken':>8}{'leak reports':>14}"
    )
    for name, figures in suites.items():
        if "skipped" in figures:
            print(f"   {name:<9} not run: {figures['skipped']}")
            continue
        runs = figures["runs"]
        tests = max(run["counts"]["total"] for run in runs.values())
        off = f"{runs['off']['wall_s']:.1f}s" if "off" in runs else "-"
        on = f"{runs['on']['wall_s']:.1f}s" if "on" in runs else "-"
        ratio = figures.get("ratio")
        wall = f"{ratio['wall']:.2f}x" if ratio else "-"
        cpu = f"{ratio['cpu']:.2f}x" if ratio else "-"
        broken = figures.get("broken", len(figures.get("baseline_failures", [])))
        leaked = figures.get("changed_by_leak_report", "-")
        print(f"   {name:<9}{tests:>7}{off:>10}{on:>10}{wall:>13}{cpu:>12}{broken:>8}{leaked:>14}")
    runs = [run for f in suites.values() for run in f.get("runs", {}).values()]
    rounds = max((run.get("rounds", 1) for run in runs), default=1)
    if any(run.get("side_by_side") for run in runs):
        times = f"{rounds} times" if rounds > 1 else "once"
        print(f"   (the two sides of a suite ran side by side, {times}; the times are the sums)")
    elif rounds > 1:
        print(f"   (each side ran {rounds} times, in ABBA order; the times are the sums)")
