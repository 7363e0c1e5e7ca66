"""The cycle grid: peak memory of loops that leave tensors in reference cycles, by loop shape.

Each iteration makes a self-referencing object holding one tensor (only the latest is kept) and
some short-lived Python lists besides, as real loops make log records and metric dicts. The
grid sweeps the lists an iteration (the Python allocations that drive the interpreter's own
collector) and the tensor size; each cell runs in a fresh interpreter with no session and under
each strategy, under the default allocator, and reports the peak resident memory above the
start of the loop (the kernel's high-water mark, reset at the start).

    python benchmarks/cycles_sweep.py [--lists 0 100 800 3000] [--sizes 1 4 16]
                                      [--tensor-mib 384] [--repeat 5] [--quiet-before S]
                                      [--json PATH]

``IN_BACKGROUND`` runs ``--repeat`` times a cell: where its thread frees a tensor while the
loop allocates the next moves its peak by a tensor or two from run to run (66 to 114 MiB with
16 MiB tensors), so the table shows the median, the worst in brackets, and the targets are
judged on the median. The others run once (their peaks repeat to the MiB). The loop's time is
shown as a ratio to no session's.

``--quiet-before S`` starts each loop S seconds after its session's activation, the shape of a
test that builds what it needs and then loops: ``IN_BACKGROUND``'s thread has backed off to its
longest wait by then, and the loop runs until that wait ends before anything is collected.

Targets: ``ON_SAFE_POINTS`` at most max(1/4 of no session, 48 MiB);
``IN_BACKGROUND`` at most max(1/4 of no session, 64 MiB) and max(2x ``ON_SAFE_POINTS``, 64 MiB);
neither above no session.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

MIB = 1024 * 1024
SESSIONS = ("none", "in_background", "on_safe_points", "on_session_close")


def high_water_mark() -> int:
    """The process's peak resident memory, in bytes (VmHWM)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def resident() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_high_water_mark() -> bool:
    """Set the peak to the memory resident now (Linux 4.0+); False where that is refused."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def loop(
    session_name: str, lists: int, size_mib: int, iterations: int, quiet_before: float = 0.0
) -> dict[str, Any]:
    import tensorflow as tf

    from pytest_eagersession import EagerSession

    side = int((size_mib * MIB // 4) ** 0.5)  # a side x side float32 tensor

    class Node:
        pass

    def step(i: int) -> Node:
        node = Node()
        node.me = node  # a reference cycle: only the cycle collector frees it
        node.tensor = tf.fill([side, side], float(i))
        junk = [[k] for k in range(lists)]  # short-lived Python objects
        del junk
        return node

    latest = step(0)  # kernels, allocator pools: made before the measure starts
    del latest
    session = None
    if session_name != "none":
        session = EagerSession.options().resource_cleanup_strategy(session_name).build()
        session.activate()
    if quiet_before:  # nothing grows meanwhile: the thread backs off (a fixed span)
        time.sleep(quiet_before)
    base = resident()
    exact = reset_high_water_mark()
    base_peak = high_water_mark()
    started = time.perf_counter()
    latest = None
    for i in range(iterations):
        latest = step(i)
    took = time.perf_counter() - started
    peak = high_water_mark() - (base if exact else base_peak)
    collections = 0
    if session is not None:
        collections = session.stats().cycle_collections
        session.deactivate()
        session.close()
    del latest
    return {
        "peak_mib": max(peak, 0) / MIB,
        "seconds": took,
        "cycle_collections": collections,
        "exact": exact,
    }


def run_once(
    session: str, lists: int, size: int, iterations: int, quiet_before: float
) -> dict[str, Any]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("MALLOC_MMAP_THRESHOLD_", None)  # the default allocator, as users have it
    command = [
        sys.executable,
        __file__,
        "--child",
        session,
        "--lists",
        str(lists),
        "--sizes",
        str(size),
        "--iterations",
        str(iterations),
        "--quiet-before",
        str(quiet_before),
    ]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return dict(json.loads(output.strip().splitlines()[-1]))


def run_cell(
    session: str, lists: int, size: int, iterations: int, repeat: int, quiet_before: float
) -> dict[str, Any]:
    """One cell for one session: the median run's figures, with every run's peak."""
    runs = sorted(
        (run_once(session, lists, size, iterations, quiet_before) for _ in range(repeat)),
        key=lambda run: float(run["peak_mib"]),
    )
    median = dict(runs[len(runs) // 2])
    median["peaks_mib"] = [run["peak_mib"] for run in runs]
    median["worst_mib"] = runs[-1]["peak_mib"]
    return median


def targets(cell: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """Whether each strategy of one cell is within its target."""
    none = cell["none"]["peak_mib"]
    safe = cell["on_safe_points"]["peak_mib"]
    background = cell["in_background"]["peak_mib"]
    return {
        "on_safe_points": safe <= max(none / 4, 48) and safe <= max(none, 48),
        "in_background": background <= max(none / 4, 64)
        and background <= max(2 * safe, 64)
        and background <= max(none, 64),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lists", type=int, nargs="+", default=[0, 100, 800, 3000])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16], help="MiB")
    parser.add_argument(
        "--tensor-mib", type=int, default=384, help="tensor bytes a loop makes (MiB)"
    )
    parser.add_argument("--min-iterations", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=5, help="runs of IN_BACKGROUND a cell")
    parser.add_argument(
        "--quiet-before",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds between the session's activation and the loop",
    )
    parser.add_argument("--iterations", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.child:
        child = loop(args.child, args.lists[0], args.sizes[0], args.iterations, args.quiet_before)
        print(json.dumps(child))
        return
    cells = []
    print("peak resident memory growth (MiB) of a loop leaving a tensor in a cycle an iteration;")
    print("median of the runs [worst], and the loop's time against no session's")
    if args.quiet_before:
        print(f"each loop starts {args.quiet_before:g} s after its session's activation")
    print(f"{'lists':>6} {'size':>5} {'iters':>6} " + "".join(f"{s:>22}" for s in SESSIONS))
    for size in args.sizes:
        iterations = max(args.min_iterations, -(-args.tensor_mib // size))
        for lists in args.lists:
            cell = {
                session: run_cell(
                    session,
                    lists,
                    size,
                    iterations,
                    args.repeat if session in REPEATED else 1,
                    args.quiet_before,
                )
                for session in SESSIONS
            }
            met = targets(cell)
            cells.append(
                {
                    "lists": lists,
                    "size_mib": size,
                    "iterations": iterations,
                    "runs": cell,
                    "met": met,
                }
            )
            print(
                f"{lists:>6} {size:>4}M {iterations:>6} "
                + "".join(f"{cell_text(cell, session, met):>22}" for session in SESSIONS)
            )
    missed = [
        f"{c['lists']} lists, {c['size_mib']} MiB: {name}"
        for c in cells
        for name, ok in c["met"].items()
        if not ok
    ]
    print("every cell within target" if not missed else "missed (!): " + "; ".join(missed))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "cells": cells,
                    "missed": missed,
                    "repeat": args.repeat,
                    "quiet_before_s": args.quiet_before,
                },
                handle,
                indent=2,
            )


#: The strategies the targets judge.
TARGETED = ("in_background", "on_safe_points")
#: The strategy whose peak moves from run to run: it runs ``--repeat`` times a cell.
REPEATED = ("in_background",)


def cell_text(cell: dict[str, dict[str, Any]], session: str, met: dict[str, bool]) -> str:
    """``median [worst] time-ratio`` for the strategies with a target, ``peak time`` else."""
    run = cell[session]
    slower = run["seconds"] / cell["none"]["seconds"] if cell["none"]["seconds"] else 0.0
    text = f"{run['peak_mib']:.0f}"
    if session in REPEATED:
        text += f" [{run['worst_mib']:.0f}]"
    if session != "none":
        text += f" {slower:.2f}x"
    return text + ("" if met.get(session, True) else " !")


if __name__ == "__main__":
    main()
