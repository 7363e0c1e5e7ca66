"""What explaining a leak costs: finding its holders' chain in a heap with TensorFlow and Keras.

python benchmarks/explain_cost.py [--repeats 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import types

DEPTH = 8


def build_chains() -> tuple[object, object, object]:
    import tensorflow as tf

    module = types.ModuleType("leaky_module")
    sys.modules[module.__name__] = module
    shallow = tf.ones((4,))
    module.CACHE = [shallow]  # type: ignore[attr-defined]
    deep = tf.ones((4,))
    holder: object = deep
    for level in range(DEPTH):
        holder = {f"level{level}": [holder]}
    module.NESTED = holder  # type: ignore[attr-defined]
    orphan = tf.ones((4,))
    cycle: list[object] = [orphan]
    cycle.append(cycle)  # reachable from nothing Python sees as a root
    return shallow, deep, orphan


def time_explain(obj: object, repeats: int, budget_s: float) -> tuple[float, str]:
    from pytest_eagersession.explain import explain

    times, text = [], ""
    for _ in range(repeats):
        started = time.perf_counter()
        text = explain(obj, max_depth=20, budget_s=budget_s).text()
        times.append(time.perf_counter() - started)
    return statistics.median(times), text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import gc

    import keras  # noqa: F401  (the heap of a real Keras suite)
    import tensorflow as tf  # noqa: F401

    shallow, deep, orphan = build_chains()
    gc.collect()
    objects = len(gc.get_objects())
    results = {"heap_objects": objects, "budget_s": args.budget}
    print(f"Explaining a leak, {objects} objects in the heap (TensorFlow and Keras imported):")
    for name, obj in (("shallow", shallow), ("deep", deep), ("no holder", orphan)):
        seconds, text = time_explain(obj, args.repeats, args.budget)
        results[name] = {"seconds": seconds, "text": text}
        print(f"  {name:<10} {seconds:6.3f} s  {text}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
