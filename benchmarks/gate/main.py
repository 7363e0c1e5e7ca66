"""The gate's command line: arguments, the rounds' order, each suite's figures, the verdict."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gate.comparing import compare, leak_groups
from gate.reading import display_id, print_profile, read_profile, trimmed
from gate.records import Run
from gate.reporting import (
    label,
    print_counts,
    print_differences,
    print_leak_groups,
    print_suites,
    ratios,
)
from gate.running import RunIncomplete, add_round, merged, run_side, run_side_by_side
from gate.suites import KERAS_TEST_FILES, OWN_TEST_FILES, SUITES, Suite, stage


def split_arguments(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str], list[str]]:
    """Our options; the arguments for both runs; those for the plugin-on run only."""
    argv = list(argv)
    both: list[str] = []
    if "--" in argv:
        both = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=("on", "off"), help="run one side only")
    parser.add_argument(
        "--suite",
        action="append",
        choices=[suite.name for suite in SUITES],
        help="run only this suite (repeatable; default: all)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON here")
    parser.add_argument(
        "-n",
        "--numprocesses",
        metavar="N",
        help="pytest-xdist workers: each run's, or with --side-by-side both sides' together",
    )
    parser.add_argument(
        "--rounds",
        type=positive,
        default=1,
        metavar="N",
        help="run each side N times, in ABBA order (off on, on off, ...), so that a machine "
        "that slows down or speeds up during the gate weighs on both sides alike; the times "
        "add up, the outcomes are the first round's (default 1)",
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="run the plugin-off and plugin-on sides of a suite at the same time, each with "
        "half of -n's workers (serial without -n), so that the machine's drift weighs on both "
        "alike; the side that ends first runs again, untimed, until the other ends",
    )
    options, rest = parser.parse_known_args(argv)
    if options.side_by_side and options.only:
        parser.error("--side-by-side needs both sides: leave out --only")
    if options.side_by_side and options.numprocesses is not None:
        workers = options.numprocesses
        if not workers.isdigit() or int(workers) < 2 or int(workers) % 2:
            parser.error(
                f"--side-by-side gives each side half of -n's workers: -n must be an even "
                f"number (2, 4, ...), not {workers!r}; leave -n out for one serial process "
                "a side"
            )
    plugin_only: list[str] = []
    unknown: list[str] = []
    index = 0
    while index < len(rest):
        arg = rest[index]
        index += 1
        if not arg.startswith("--eagersession"):
            unknown.append(arg)
            continue
        plugin_only.append(arg)
        takes_value = arg != "--eagersession-track-creation" and "=" not in arg
        if takes_value and index < len(rest) and not rest[index].startswith("-"):
            plugin_only.append(rest[index])
            index += 1
    if unknown:
        parser.error(
            f"unrecognized arguments: {' '.join(unknown)} (pytest's own go after --, "
            "e.g. -- -k dense; the plugin's as --eagersession-OPTION=VALUE)"
        )
    if options.numprocesses is not None:
        workers = options.numprocesses
        if options.side_by_side:
            workers = str(int(workers) // 2)
        both = ["-n", workers, *both]
    return options, both, plugin_only


def abba(names: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """``(round, side)`` in the order to run them: the sides in turn, reversed every other
    round (off on, on off, off on, ...)."""
    return [
        (round_, name)
        for round_ in range(rounds)
        for name in (names if round_ % 2 == 0 else names[::-1])
    ]


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def version(*distributions: str) -> str | None:
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def baseline_failures(off: Run, suite: str = "") -> list[str]:
    """``--only off``: the tests that fail or error without the plugin, printed."""
    bad = {k: r for k, r in off.results.items() if r.outcome in ("failed", "error")}
    if bad:
        print(f"\n== {label(suite)}failing without the plugin: {len(bad)} tests")
    for key, result in bad.items():
        print(f"\n-- {display_id(key)} ({result.outcome})")
        text = "\n\n".join(result.texts) or "\n".join(result.messages)
        for line in trimmed(text, tail=True):
            print(f"   | {line}")
    return [display_id(key) for key in bad]


def baseline_verdict(total: int, bad: int) -> tuple[str, int]:
    """``--only off``: every test must pass or skip without the plugin."""
    if bad:
        return (
            f"VERDICT: BASELINE BROKEN: {bad} of {total} tests fail without the "
            "plugin; the gate's file list does not suit this environment",
            1,
        )
    return f"VERDICT: BASELINE OK: all {total} tests pass or skip without the plugin", 0


def plugin_figures(off: Run | None, on: Run, suite: str = "") -> dict[str, Any]:
    """The plugin may change an outcome only by a leak report (without ``off``: may fail or
    error a test only by a leak report). What it changed, printed, and as figures."""
    differences = compare(off, on)
    groups = leak_groups(on)
    print_differences(differences, baseline=off is not None, suite=suite)
    print_leak_groups(groups, suite=suite)
    broken = [d for d in differences if not d.leak]
    return {
        "differences": [asdict(d) for d in differences],
        "broken": len(broken),
        "changed_by_leak_report": len(differences) - len(broken),
        "broken_by_signature": dict(Counter(d.signature for d in broken).most_common()),
        "leak_groups": groups,
    }


def plugin_verdict(total: int, broken: int, leaked: int, baseline: bool) -> tuple[str, int]:
    if baseline:
        what = f"of {total} tests, the plugin changed the outcome of"
    else:
        what = f"of {total} tests run with the plugin alone (no baseline), it failed or errored"
    if broken:
        return (
            f"VERDICT: BROKEN: {what} {broken} other than by a leak report "
            f"(and {leaked} by a leak report)",
            1,
        )
    return (
        f"VERDICT: OK: {what} none other than by a leak report ({leaked} by a leak report)",
        0,
    )


def describe(suite: Suite) -> str:
    """What a suite runs, for people."""
    what = f"{len(suite.files)} of {suite.library} {version(suite.distribution)}'s test files"
    if suite.own:
        what += f" and {len(suite.own)} of ours"
    return what


def report_suite(suite: Suite, off: Run | None, on: Run | None) -> dict[str, Any]:
    """One suite's section: its counts, on/off ratio, the plugin's time by phase and what the
    plugin changed; returns its figures."""
    runs = [run for run in (off, on) if run is not None]
    print(f"\n==== the {suite.name} suite: {describe(suite)}")
    print_counts(runs, suite.name)
    figures: dict[str, Any] = {
        "library": suite.library,
        "version": version(suite.distribution),
        "files": list(suite.files) + list(suite.own),
        "runs": {run.name: run.figures() for run in runs},
    }
    if off is not None and on is not None:
        figures["ratio"] = ratios(off, on)
        print(
            f"   plugin on / plugin off: {figures['ratio']['wall']:.2f}x wall time, "
            f"{figures['ratio']['cpu']:.2f}x CPU time"
        )
    if on is not None and on.report is not None:
        figures["profile"] = read_profile(on.report)
        print_profile(figures["profile"], on.wall_s / on.rounds, suite.name)
    if on is None:
        assert off is not None
        figures["baseline_failures"] = baseline_failures(off, suite.name)
    else:
        figures.update(plugin_figures(off, on, suite.name))
    return figures


def main(argv: Sequence[str]) -> int:
    options, both, plugin_only = split_arguments(argv)
    tensorflow = version("tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-macos")
    chosen = [suite for suite in SUITES if not options.suite or suite.name in options.suite]
    staged: list[tuple[Suite, list[str]]] = []
    not_run: dict[str, str] = {}
    for suite in chosen:
        paths = stage(suite)
        if paths is None:
            not_run[suite.name] = f"{suite.distribution} is not installed"
            print(
                f"realsuite: SKIPPED the {suite.name} suite: {not_run[suite.name]} here "
                f"({suite.install})",
                flush=True,
            )
        else:
            staged.append((suite, paths))
    print(
        f"realsuite: TensorFlow {tensorflow}; "
        + "; ".join(f"{suite.name}: {describe(suite)}" for suite, _ in staged),
        flush=True,
    )
    if not staged:
        print("VERDICT: INCOMPLETE: no suite could run; nothing compared", flush=True)
        return 2
    sides: dict[str, dict[str, Run]] = {}
    names = [name for name in ("off", "on") if options.only in (None, name)]
    try:
        for suite, paths in staged:
            sides[suite.name] = {}
            if options.side_by_side:
                for round_ in range(options.rounds):
                    runs = run_side_by_side(
                        suite, paths, {"off": both, "on": [*both, *plugin_only]}, round_
                    )
                    for run in runs.values():
                        add_round(sides[suite.name], run)
                continue
            for round_, name in abba(names, options.rounds):
                run = run_side(
                    suite,
                    name,
                    paths,
                    [*both, *plugin_only] if name == "on" else both,
                    plugin=name == "on",
                    round_=round_,
                )
                add_round(sides[suite.name], run)
    except RunIncomplete as error:
        print(f"\nrealsuite: {error}", file=sys.stderr)
        print("VERDICT: INCOMPLETE: a run did not finish; nothing compared", flush=True)
        return 2
    suites: dict[str, dict[str, Any]] = {}
    for suite, _ in staged:
        suites[suite.name] = report_suite(
            suite, sides[suite.name].get("off"), sides[suite.name].get("on")
        )
    for name, reason in not_run.items():
        suites[name] = {"skipped": reason}
    # The suites together: the verdict, and the figures as the gate has always written them.
    off = merged([s["off"] for s in sides.values()]) if options.only != "on" else None
    on = merged([s["on"] for s in sides.values()]) if options.only != "off" else None
    runs = [run for run in (off, on) if run is not None]
    print_suites(suites)
    figures: dict[str, Any] = {
        "keras": version("keras"),
        "sonnet": version("dm-sonnet"),
        "tensorflow": tensorflow,
        "files": {"keras": list(KERAS_TEST_FILES), "own": list(OWN_TEST_FILES)}
        | {suite.name: list(suite.files) for suite, _ in staged if suite.name != "keras"},
        "arguments": {"both": both, "plugin_on": plugin_only},
        "suites": suites,
        "not_run": not_run,
        "runs": {run.name: run.figures() for run in runs},
    }
    if off is not None and on is not None:
        figures["ratio"] = ratios(off, on)
        print(
            f"   all suites, plugin on / plugin off: {figures['ratio']['wall']:.2f}x wall time, "
            f"{figures['ratio']['cpu']:.2f}x CPU time"
        )
    in_suites = [figures_ for figures_ in suites.values() if "skipped" not in figures_]
    if on is None:
        assert off is not None
        bad = [test for s in in_suites for test in s["baseline_failures"]]
        figures["baseline_failures"] = bad
        verdict, status = baseline_verdict(len(off.results), len(bad))
    else:
        figures["differences"] = [d for s in in_suites for d in s["differences"]]
        figures["broken"] = sum(s["broken"] for s in in_suites)
        figures["changed_by_leak_report"] = sum(s["changed_by_leak_report"] for s in in_suites)
        figures["broken_by_signature"] = dict(
            Counter(d["signature"] for d in figures["differences"] if not d["leak"]).most_common()
        )
        figures["leak_groups"] = leak_groups(on)
        verdict, status = plugin_verdict(
            len(on.results), figures["broken"], figures["changed_by_leak_report"], off is not None
        )
    if not_run:
        verdict += "; NOT RUN: " + ", ".join(
            f"the {name} suite ({reason})" for name, reason in not_run.items()
        )
    figures["verdict"] = verdict
    figures["status"] = status
    print(f"\n{verdict}")
    if options.json:
        path = Path(options.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        print(f"(figures written to {path})")
    return status
