"""What an active session costs: per op, per open/close with the survivor check, and the start
of its cleaner thread with every core busy (plain ``Thread.start()`` against ``run_promptly``).

Each figure is a ratio of medians measured in one run, interleaving the variants, since the
machine is shared and absolute times drift.

    python benchmarks/session_overhead.py [--rounds 15] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


def small_ops(count: int) -> None:
    import tensorflow as tf

    x = tf.ones((4, 4))
    for _ in range(count):
        x = x * 1.0 + 0.0


def time_once(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def per_op_overhead(rounds: int, ops: int) -> dict[str, float]:
    """The median, over rounds, of the time of ``ops`` small ops inside an active session over
    the time with none in the same round.

    Only the ops are timed; activation is not. Each sample starts from the same gc state (a
    young-generation collection), in a shuffled order of variants. A round's variants run
    back to back, so each ratio compares times taken within a fraction of a second of each
    other: the machine's drift, which moves whole seconds of samples, cancels in it, where a
    ratio of medians over the whole run kept it.
    """
    from pytest_eagersession import EagerSession

    sessions: dict[str, EagerSession | None] = {"none": None}
    for strategy in ("in_background", "on_safe_points", "on_session_close"):
        sessions[strategy] = EagerSession.options().resource_cleanup_strategy(strategy).build()
    samples: dict[str, list[float]] = {name: [] for name in sessions}
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        order = list(sessions)
        shuffle(order)
        for name in order:
            session = sessions[name]
            if session is not None:
                session.activate()
            gc.collect(1)
            try:
                samples[name].append(time_once(lambda: small_ops(ops)))
            finally:
                if session is not None:
                    session.deactivate()
    for session in sessions.values():
        if session is not None:
            session.close()
    base = samples["none"]
    return {
        name: statistics.median(value / none for value, none in zip(values, base, strict=True))
        - 1.0
        for name, values in samples.items()
    }


def open_close_cost(rounds: int) -> dict[str, float]:
    from pytest_eagersession import EagerSession

    def with_session() -> None:
        session = EagerSession.create()
        with session:
            small_ops(10)
        session.survivors()

    without, within = [], []
    for _ in range(rounds * 10):
        without.append(time_once(lambda: small_ops(10)))
        within.append(time_once(with_session))
    return {
        "ops_alone_ms": statistics.median(without) * 1e3,
        "with_session_ms": statistics.median(within) * 1e3,
        "session_cost_ms": (statistics.median(within) - statistics.median(without)) * 1e3,
    }


def _spin(queue: Any) -> None:
    from pytest_eagersession.core.wakeups import ask_for_prompt_wakeups

    ask_for_prompt_wakeups()  # as the cleaner does
    queue.get()


def thread_start(rounds: int) -> dict[str, dict[str, float]]:
    """Milliseconds the caller spends in a thread's start, plain and through ``run_promptly``
    (mean, median, 90th percentile), with every core kept busy by other processes as in a
    suite under xdist: the new thread, and then its caller, wait for a core."""
    import queue as queues
    import threading

    from pytest_eagersession.core.wakeups import run_promptly

    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    times: dict[str, list[float]] = {"plain": [], "prompt": []}
    try:
        time.sleep(0.2)
        for index in range(rounds * 120):
            variant = "plain" if index % 2 else "prompt"
            waiting: queues.Queue[int] = queues.Queue()
            thread = threading.Thread(target=_spin, args=(waiting,), daemon=True)
            started = time.perf_counter()
            if variant == "plain":
                thread.start()
            else:
                run_promptly(thread.start)
            times[variant].append(time.perf_counter() - started)
            waiting.put(1)
            thread.join()
            sum(range(20_000))  # the test's own work between two starts
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()

    def figures(samples: list[float]) -> dict[str, float]:
        ordered = sorted(samples)
        return {
            "mean_ms": statistics.fmean(ordered) * 1e3,
            "median_ms": statistics.median(ordered) * 1e3,
            "p90_ms": ordered[int(len(ordered) * 0.9)] * 1e3,
        }

    return {variant: figures(samples) for variant, samples in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import keras  # noqa: F401  (the figures are stated with Keras imported)
    import tensorflow as tf  # noqa: F401

    small_ops(args.ops)  # warm kernels
    gc.collect()
    overhead = per_op_overhead(args.rounds, args.ops)
    print(f"Per-op overhead of an active session ({args.ops} small eager ops, medians):")
    for name, value in overhead.items():
        if name != "none":
            print(f"  {name:<18} {value * 100:+6.1f}%")
    cost = open_close_cost(args.rounds)
    print("Open + close an IN_BACKGROUND session around 10 small ops, with the survivor check:")
    print(
        f"  {cost['with_session_ms']:.2f} ms against {cost['ops_alone_ms']:.2f} ms for the ops "
        f"alone: {cost['session_cost_ms']:.2f} ms per session"
    )
    start = thread_start(args.rounds)
    print("Starting a cleaner thread, every core busy (mean, median, 90th percentile):")
    for variant, figures in start.items():
        print(
            f"  {variant:<7} {figures['mean_ms']:.3f} ms, {figures['median_ms']:.3f} ms, "
            f"{figures['p90_ms']:.3f} ms"
        )
    if args.json:
        with open(args.json, "w") as handle:
            results = {"per_op_overhead": overhead, "open_close": cost, "thread_start": start}
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
