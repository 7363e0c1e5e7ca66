"""What the plugin costs on any pytest suite: plugin off and on, at the same time.

    python benchmarks/side_by_side.py [--rounds N] [--json PATH] [--out DIR] -- PYTEST_ARGS ...

Runs ``python -m pytest PYTEST_ARGS`` in the current folder twice at once, with
``-p no:eagersession`` and with the plugin on (``--eagersession-*`` options among PYTEST_ARGS
go to that side alone), the way the real-suite gate runs its own suites with
``--side-by-side``: a machine whose speed drifts slows both alike, and the side that ends first
runs again, untimed, until the other ends. Give each side ``-n 1`` to have two xdist workers in
all, as ``-n 2`` would. Prints each side's outcomes, wall and CPU time, their ratios, the
plugin's cost per test that ran, the tests whose outcome differs, and the plugin's time by
phase; the outputs stay in a folder it names.
Environment variables the suite needs (``TF_USE_LEGACY_KERAS=1``, ``PYTHONPATH``) are taken
from this process's environment.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gate import comparing, reading, records, reporting, running  # the gate, beside this file
from gate.main import positive


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    pytest_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=positive, default=1, metavar="N")
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON here")
    parser.add_argument(
        "--out", metavar="DIR", help="the runs' outputs go here (default: a new temporary folder)"
    )
    options = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if not pytest_args:
        parser.error("give pytest's arguments after --, e.g. -- tests -n 1")
    plugin_only = [arg for arg in pytest_args if arg.startswith("--eagersession")]
    both = [arg for arg in pytest_args if not arg.startswith("--eagersession")]
    folder = Path(options.out) if options.out else Path(tempfile.mkdtemp(prefix="side-by-side-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"side_by_side: outputs in {folder}", flush=True)
    sides: dict[str, records.Run] = {}
    for round_ in range(options.rounds):

        def start(name: str, filler: bool, round_: int = round_) -> running.Started:
            stem = f"{name}-round{round_ + 1}" + ("-filler" if filler else "")
            junit, report, log = (
                folder / f"{kind}-{stem}"
                for kind in ("junit.xml", "eagersession.json", "output.txt")
            )
            command = [sys.executable, "-m", "pytest", "-q", f"--junitxml={junit}"]
            if name == "on":
                command += [f"--eagersession-json={report}", *plugin_only]
            else:
                command += ["-p", "no:eagersession"]
            process = running.launch([*command, *both], Path.cwd(), dict(os.environ), log)
            return running.Started(
                "suite", name, name == "on", process, junit, report, log, time.perf_counter()
            )

        for run, wall, cpu in running.side_by_side(start).values():
            result = dataclasses.replace(running.finished(run, wall, cpu), side_by_side=True)
            running.add_round(sides, result)
    off, on = sides["off"], sides["on"]
    reporting.print_counts([off, on])
    ratio = reporting.ratios(off, on)
    print(
        f"   plugin on / plugin off: {ratio['wall']:.3f}x wall time, {ratio['cpu']:.3f}x CPU time"
    )
    per_test = cost_per_test(off, on)
    print(
        f"   the plugin's cost per test: {per_test['wall']:+.2f} ms of wall time, "
        f"{per_test['cpu']:+.2f} ms of CPU time"
    )
    differences = comparing.compare(off, on)
    print(f"   tests whose outcome differs: {len(differences)}")
    for difference in differences[:20]:
        why = " (a leak report)" if difference.leak else ""
        print(
            f"   - {difference.nodeid}: {difference.off} without the plugin, "
            f"{difference.on} with it{why}"
        )
    profile = reading.read_profile(on.report) if on.report is not None else {}
    reading.print_profile(profile, on.wall_s / on.rounds)
    if options.json:
        figures = {
            "arguments": {"both": both, "plugin_on": plugin_only},
            "runs": {"off": off.figures(), "on": on.figures()},
            "ratio": ratio,
            "per_test_ms": per_test,
            "differences": len(differences),
            "profile": profile,
        }
        Path(options.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


def cost_per_test(off: records.Run, on: records.Run) -> dict[str, float]:
    """What the plugin added per test and round, in milliseconds (wall and CPU)."""
    tests = max(1, sum(on.counts()[outcome] for outcome in ("passed", "failed", "error")))
    rounds = max(1, on.rounds)
    return {
        "wall": (on.wall_s - off.wall_s) / rounds / tests * 1000,
        "cpu": (on.cpu_s - off.cpu_s) / rounds / tests * 1000,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
