"""The seed's n*m experiment: n ops a loop iteration, m iterations, keeping only the last ones.

Each strategy runs in a fresh interpreter; memory is the process's resident size (RSS) above
what it was before the loop, and the session's count of live output references. Loops that
leave tensors in reference cycles are ``cycles_sweep.py``'s grid.

    python benchmarks/strategy_memory.py [--ops 4] [--iterations 50] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

MIB = 1024 * 1024


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def op_builder_loop(strategy: str, n: int, m: int) -> dict[str, Any]:
    import time

    import tensorflow as tf

    from pytest_eagersession import EagerSession

    side = 1024  # a 1024x1024 float32 output: 4 MiB
    session = EagerSession.options().resource_cleanup_strategy(strategy).build()
    warm = session.op_builder("Fill").add_input([side, side]).add_input(1.0).build()
    del warm
    time.sleep(0.05)
    session.safe_point()
    base = rss_bytes()
    peak_rss = 0
    peak_refs = 0
    series = []
    operations = []
    for _ in range(m):
        operations = [
            session.op_builder("Fill").add_input([side, side]).add_input(tf.constant(1.0)).build()
            for _ in range(n)
        ]
        growth = rss_bytes() - base
        series.append(growth / MIB)
        peak_rss = max(peak_rss, growth)
        peak_refs = max(peak_refs, session.stats().registered)
    del operations
    session.close()
    return {"peak_rss_mib": peak_rss / MIB, "peak_live_outputs": peak_refs, "series": series}


def child(args: argparse.Namespace) -> None:
    print(json.dumps(op_builder_loop(args.strategy, args.ops, args.iterations)))


def run_child(experiment: str, strategy: str, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", TF_CPP_MIN_LOG_LEVEL="3")
    command = [
        sys.executable,
        __file__,
        "--child",
        experiment,
        "--strategy",
        strategy,
        "--ops",
        str(args.ops),
        "--iterations",
        str(args.iterations),
    ]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return dict(json.loads(output.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", default=None)
    parser.add_argument("--strategy", default="in_background")
    args = parser.parse_args()
    if args.child:
        args.experiment = args.child
        child(args)
        return
    strategies = ["in_background", "on_safe_points", "on_session_close"]
    n, m = args.ops, args.iterations
    print(f"n*m experiment: {n} ops of 4 MiB per iteration, {m} iterations, last iteration kept")
    print(f"(about {4 * n} MiB with cleanup, {4 * n * m} MiB without)\n")
    print(f"{'strategy':<18} {'peak RSS growth':>16} {'peak live outputs':>18}")
    results: dict[str, dict[str, dict[str, Any]]] = {"ops": {}}
    for strategy in strategies:
        result = run_child("ops", strategy, args)
        results["ops"][strategy] = result
        print(
            f"{strategy:<18} {result['peak_rss_mib']:>12.0f} MiB "
            f"{result['peak_live_outputs']:>18.0f}"
        )
    print("\n(reference cycles, by loop shape: benchmarks/cycles_sweep.py)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
