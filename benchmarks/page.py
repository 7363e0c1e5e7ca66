"""The benchmarks page, rendered from the figures of docs/benchmarks.json alone: the headline
table, then one section for each benchmark (``run_all.py`` runs them and writes the JSON).

Each figure keeps its target beside it; the page says which were met in the run that wrote
the JSON, and nothing on it is typed by hand.
"""

from __future__ import annotations

from typing import Any


def all_cycle_cells(results: dict[str, Any]) -> dict[str, Any]:
    """The grid's cells, then those of the loops after a quiet stretch (a page written before
    those ran has the grid alone), each with the words its row adds (``after``: empty for the
    grid's), and every missed target, named the same way."""
    grid, quiet = results["cycles"], results.get("cycles_after_quiet")
    cells = [{**cell, "after": ""} for cell in grid["cells"]]
    missed = list(grid["missed"])
    if quiet is not None:
        after = f"after {quiet['quiet_before_s']:g} s quiet"
        cells += [{**cell, "after": after} for cell in quiet["cells"]]
        missed += [f"{after}, {target}" for target in quiet["missed"]]
    return {"cells": cells, "missed": missed, "repeat": grid["repeat"]}


def cycles_met(cycles: dict[str, Any]) -> str:
    """``"12 of 12"``: the cells where every strategy met its target."""
    cells = cycles["cells"]
    met = sum(all(cell["met"].values()) for cell in cells)
    return f"{met} of {len(cells)}"


def cycles_section(cycles: dict[str, Any]) -> list[str]:
    """The cycle grid (``all_cycle_cells``): each cell's peaks, the loop time against no
    session, the targets, the cells whose loop starts after a quiet stretch last."""
    lines = [
        "## Reference cycles, by loop shape (`benchmarks/cycles_sweep.py`)",
        "",
        "Each iteration leaves one tensor in a reference cycle (only the latest is kept) and "
        "makes some short-lived Python lists besides; one fresh interpreter per run, peak "
        "resident memory above the start of the loop (the kernel's high-water mark), default "
        f"allocator. `IN_BACKGROUND` ran {cycles['repeat']} times a cell (where its thread "
        "frees a tensor while the loop allocates the next moves its peak by a tensor or two "
        "from run to run): the median, the worst in brackets; the targets are judged on the "
        "median. The others ran once. The time is the loop's against no session's.",
        "",
        "| lists, tensor, iterations | no session | `ON_SESSION_CLOSE` | `IN_BACKGROUND` "
        "| `ON_SAFE_POINTS` | targets |",
        "|---|---|---|---|---|---|",
    ]

    def figure(cell: dict[str, Any], session: str) -> str:
        run = cell["runs"][session]
        text = f"{run['peak_mib']:.0f} MiB"
        if "worst_mib" in run and len(run.get("peaks_mib", [])) > 1:
            text += f" [{run['worst_mib']:.0f}]"
        none = cell["runs"]["none"]["seconds"]
        if session != "none" and none:
            text += f", {run['seconds'] / none:.2f}x time"
        return text

    for cell in cycles["cells"]:
        met = cell["met"]
        verdict = (
            "met"
            if all(met.values())
            else "missed: " + ", ".join(name for name, ok in met.items() if not ok)
        )
        after = f", {cell['after']}" if cell["after"] else ""
        lines.append(
            f"| {cell['lists']}, {cell['size_mib']} MiB, {cell['iterations']}{after} "
            f"| {figure(cell, 'none')} | {figure(cell, 'on_session_close')} "
            f"| {figure(cell, 'in_background')} | {figure(cell, 'on_safe_points')} | {verdict} |"
        )
    missed = cycles["missed"]
    lines += [
        "",
        "Targets: `ON_SAFE_POINTS` at most max(1/4 of no session, 48 MiB); `IN_BACKGROUND` at "
        "most max(1/4 of no session, 64 MiB) and max(2x `ON_SAFE_POINTS`, 64 MiB); neither "
        "above no session. "
        + (
            "Every cell met them in this run."
            if not missed
            else "Missed in this run: " + "; ".join(missed) + "."
        ),
        "",
        "![n*m per iteration, and the cycle grid's peaks](benchmarks-memory.png)",
        "",
    ]
    return lines


def cheaper(plugin: dict[str, Any]) -> str:
    """How much cheaper the plugin is than TensorFlow's own check; no ratio where the plugin's
    cost was not above zero in this run (the ratio would divide by the noise)."""
    if plugin["plugin"]["per_test_ms"] <= 0:
        return "ours is within this run's noise (the first row)"
    return f"ours is {plugin['ratio']:.0f}x cheaper"


def render(results: dict[str, Any]) -> str:
    """docs/benchmarks.md, from the figures of docs/benchmarks.json."""
    took = results["took_s"]
    memory = results["memory"]
    overhead = results["overhead"]
    plugin = results["plugin"]
    explain = results["explain"]
    bookkeeping = results["bookkeeping"]
    ops = memory["ops"]
    per_op = overhead["per_op_overhead"]
    open_close = overhead["open_close"]
    grid = all_cycle_cells(results)
    quiet = [cell["after"] for cell in grid["cells"] if cell["after"]]
    quiet_shapes = f", {len(quiet)} of them {quiet[0]}" if quiet else ""

    def verdict(ok: bool) -> str:
        return "met" if ok else "missed"

    lines = [
        "# Benchmarks",
        "",
        "Written by `./scripts/bench` (`benchmarks/run_all.py`) in "
        f"{took / 60:.1f} minutes on: {results['machine']}.",
        "Every figure is a ratio (or a difference) measured in one run against its baseline,",
        "with the variants interleaved: the machine is shared, and absolute times drift.",
        "",
        "## Headline figures",
        "",
        "| what | measured | target |",
        "|---|---|---|",
        f"| plugin's cost per test ({plugin['plugin']['tests']} small TensorFlow tests, "
        f"median of runs, against `-p no:eagersession`) | {plugin['plugin']['per_test_ms']:.2f} ms"
        f" | ≤ 2 ms: {verdict(plugin['plugin']['per_test_ms'] <= 2)} |",
        *small_tests_rows(results.get("small")),
        f"| TensorFlow's `assert_no_new_tensors` per test, same tests as `tf.test.TestCase` "
        f"| {plugin['tensorflow']['per_test_ms']:.0f} ms: {cheaper(plugin)}"
        f" | ≥ 200x: {verdict(plugin['ratio'] >= 200)} |",
        *(
            [
                f"| measuring a test body's figures (peak bytes, objects made, traces: JSON "
                f"report, most-memory table, JUnit XML, fail-on-increase), in-process "
                f"| {plugin['figures']['figures_ms']:.3f} ms per test | ≤ 0.1 ms: "
                f"{verdict(plugin['figures']['figures_ms'] <= 0.1)} |"
            ]
            if "figures" in plugin
            else []
        ),
        f"| per-op overhead, `IN_BACKGROUND` | {per_op['in_background'] * 100:+.1f}% "
        f"| ≤ 3%: {verdict(per_op['in_background'] <= 0.03)} |",
        f"| per-op overhead, `ON_SESSION_CLOSE` | {per_op['on_session_close'] * 100:+.1f}% "
        f"| ≤ 3%: {verdict(per_op['on_session_close'] <= 0.03)} |",
        f"| per-op overhead, `ON_SAFE_POINTS` (an op callback: off TensorFlow's fast path) "
        f"| {per_op['on_safe_points'] * 100:+.1f}% | stated |",
        f"| cycle grid ({len(grid['cells'])} loop shapes{quiet_shapes}): cells within the "
        f"memory targets | {cycles_met(grid)} | all: {verdict(not grid['missed'])} |",
        f"| open + close a session around 10 small ops, survivor check included "
        f"| {open_close['session_cost_ms']:.2f} ms | ≤ 2 ms: "
        f"{verdict(open_close['session_cost_ms'] <= 2)} |",
    ]
    if "thread_start" in overhead:
        start = overhead["thread_start"]
        lines.append(
            "| starting a session's cleaner thread, every core busy (mean; 90th percentile) "
            f"| {start['prompt']['mean_ms']:.2f} ms ({start['prompt']['p90_ms']:.2f}); a plain "
            f"`Thread.start()`: {start['plain']['mean_ms']:.2f} ms "
            f"({start['plain']['p90_ms']:.2f}) | stated |"
        )
    lines.append(
        f"| explaining every leak of a test ({explain['leaks']} leaks, one 17 links deep, one "
        f"with no Python holder), {explain['heap_objects']} objects in the "
        f"heap | {explain['ours_per_test_s']:.2f} s; objgraph's `find_backref_chain`: "
        f"{explain['objgraph_per_leak_s']:.1f} s per leak, "
        f"{explain['objgraph_per_test_s'] / explain['ours_per_test_s']:.0f}x longer for the test "
        f"| ≤ 0.5 s: {verdict(explain['ours_per_test_s'] <= 0.5)} |"
    )
    lines += [
        f"| plugin's memory over {bookkeeping['tests']} tests (slope) "
        f"| {bookkeeping['slope_kib_per_1000']:+.0f} KiB per 1,000 tests, against "
        f"{bookkeeping['baseline_slope_kib_per_1000']:+.0f} without the plugin | flat |",
        "",
        "The holders of a test's leaks are found in one walk from the roots, capped at "
        "5 s (20 s with `-v`); the chains it found here:",
        "",
        *[f"- {label}: `{text}`" for label, text in explain["texts"].items()],
        "",
        *(
            [
                f"A next test whose {explain['again_leaks']} leaks sit in the same holders: "
                f"{explain['again_walked_s']:.3f} s walked from scratch, "
                f"{explain['again_routed_s'] * 1e3:.1f} ms through the holders the run explained "
                f"before ({explain['again_by_routes']} found so; what no route finds is walked).",
                "",
            ]
            if "again_routed_s" in explain
            else []
        ),
        "## The strategies: the seed's n*m experiment",
        "",
        f"4 ops of 4 MiB per loop iteration, {len(next(iter(ops.values()))['series'])} "
        "iterations, keeping only the last iteration's operations; each strategy in a fresh "
        "interpreter, resident memory above the start.",
        "",
        "| strategy | peak memory growth | peak live outputs |",
        "|---|---|---|",
    ]
    for strategy, result in ops.items():
        lines.append(
            f"| `{strategy.upper()}` | {result['peak_rss_mib']:.0f} MiB "
            f"| {result['peak_live_outputs']:.0f} |"
        )
    lines.append("")
    lines += cycles_section(grid)
    lines += realsuite_section(results.get("realsuite"))
    lines += [
        "## GPU",
        "",
        "Not run: this machine has no GPU. The n*m experiment with the device's own memory "
        "counters and the per-op overhead on a GPU are still to be measured.",
        "",
    ]
    return "\n".join(lines)


#: What each of the gate's suites is, beyond its library's name.
SUITE_KINDS = {
    "keras": "its own tests, with a `tf.test.TestCase`-style suite of ours",
    "sonnet": "`tf.test.TestCase` and absl `parameterized`, no Keras",
}


def small_tests_rows(small: dict[str, Any] | None) -> list[str]:
    """The headline row of ``small_tests.py``: the plugin's cost per small test, side by side."""
    if not small:
        return []
    tests = small["runs"]["on"]["counts"]["passed"]
    per_test = small["per_test_ms"]
    met = "met" if per_test["wall"] <= 1 else "missed"
    return [
        f"| plugin's cost per small test, side by side ({tests} generated tests: a module "
        f"fixture, `parametrize`, a few ops each; `benchmarks/small_tests.py`, one xdist worker "
        f"a side) | {per_test['wall']:+.2f} ms of wall time, {per_test['cpu']:+.2f} ms of CPU "
        f"| ≤ 1 ms of wall time: {met} |"
    ]


def gate_design(run: dict[str, Any]) -> str:
    """How the gate's sides ran, and how far its ratios can be trusted, for the page."""
    rounds = run.get("rounds", 1)
    if run.get("side_by_side"):
        return (
            f"Here the two sides of a suite ran side by side, one worker each, {rounds} times, "
            "and the times are the sums: the machine's drift falls on both alike (run so, the "
            "plugin-off side against itself came out at 1.00x to 1.01x; run in turn, one "
            "side's own rounds differed by up to 17%)."
        )
    return (
        "A suite's ratio moves from run to run by several hundredths while other work shares "
        "the machine; one run's figure is not a regression by itself"
        + (
            f" (here each side ran {rounds} times, in ABBA order, and the times are the sums)."
            if rounds > 1
            else "."
        )
    )


def leak_share(suite: dict[str, Any]) -> str:
    """What share of the plugin's time on a suite its true leaks take, as a sentence."""
    phases = suite.get("profile", {}).get("phases_s", {})
    total = sum(sum(split.values()) for split in phases.values())
    leaking = sum(split.get("leaking", 0.0) for split in phases.values())
    if not total or not leaking:
        return ""
    return (
        f" On the Keras suite {leaking / total:.0%} of the plugin's time is its "
        f"{suite.get('changed_by_leak_report', 0)} true leaks: a whole-heap collection before "
        "each verdict, and the search for its holder."
    )


def realsuite_section(gate: dict[str, Any] | None) -> list[str]:
    """The real-suite gate's figures, per suite: outcomes changed, time ratios, leaks by holder."""
    if not gate or "ratio" not in gate:
        return []
    suites = {name: s for name, s in gate.get("suites", {}).items() if "skipped" not in s}
    if not suites:  # a JSON of the gate before its suites
        suites = {"keras": {**gate, "files": gate["files"]["keras"], "version": gate["keras"]}}
    names = list(suites)
    total = gate["runs"]["on"]["counts"]["total"]
    lines = [
        "## The real-suite gate",
        "",
        f"`./scripts/realsuite`: {total} tests written by others, in {len(names)} suites run on "
        f"their own, each with the plugin off and on, TensorFlow {gate['tensorflow']}"
        + (f" ({gate['run_apart']})" if "run_apart" in gate else "")
        + ":",
        "",
    ]
    for name, s in suites.items():
        tests = s["runs"]["on"]["counts"]["total"]
        kind = SUITE_KINDS.get(name)
        lines.append(
            f"- {name}: {len(s['files'])} test files of {s.get('library', name)} {s['version']}"
            f"{f' ({kind})' if kind else ''}: {tests} tests"
        )

    def plugin_seconds(suite: dict[str, Any]) -> str:
        phases = suite.get("profile", {}).get("phases_s", {})
        total = sum(sum(split.values()) for split in phases.values())
        return f"{total:.1f} s" if phases else "-"

    wall = gate["ratio"]["wall"]
    met = all(suites[n]["ratio"]["wall"] <= 1.05 for n in names)
    lines += [
        "",
        "| what | " + " | ".join(names) + " | all | target |",
        "|---|" + "---|" * (len(names) + 2),
        "| outcomes the plugin changed other than by a leak report | "
        + " | ".join(str(suites[n]["broken"]) for n in names)
        + f" | {gate['broken']} | 0 |",
        "| outcomes changed by a leak report | "
        + " | ".join(str(suites[n]["changed_by_leak_report"]) for n in names)
        + f" | {gate['changed_by_leak_report']} | each a true leak |",
        "| wall time, plugin on / off | "
        + " | ".join(f"{suites[n]['ratio']['wall']:.2f}x" for n in names)
        + f" | {wall:.2f}x | ≤ 1.05x each: {'met' if met else 'not met'} |",
        "| CPU time, plugin on / off | "
        + " | ".join(f"{suites[n]['ratio']['cpu']:.2f}x" for n in names)
        + f" | {gate['ratio']['cpu']:.2f}x | |",
        "| the plugin's own time (its JSON report's timings) | "
        + " | ".join(plugin_seconds(suites[n]) for n in names)
        + " | | |",
        "",
        gate_design(gate["runs"]["on"]) + leak_share(suites.get("keras", {})) + " A cycle "
        "that Keras's own `gc.collect()` froze while alive (every `quantize()` calls one) "
        "and that died before the check is proven garbage by trial deletion instead "
        "([Guarantees](guarantees.md)): those checks cost 5.8 s of whole collections in 39 "
        "tests before.",
        "",
    ]
    for name, reason in gate.get("not_run", {}).items():
        lines += [f"Not run: the {name} suite ({reason}).", ""]
    if gate.get("leak_groups"):
        lines += ["Leaks reported, by holder:", ""]
        for group in gate["leak_groups"]:
            tests = len(group["tests"])
            lines.append(
                f"- {group['holder']}: {group['leaks']} objects in {tests} "
                f"test{'s' if tests != 1 else ''} (for example `{group['tests'][0]}`)"
            )
        lines.append("")
    return lines
