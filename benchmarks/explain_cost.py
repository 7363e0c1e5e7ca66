"""What explaining leaks costs: one walk for all of a test's leaks, against objgraph's search.

In a heap of about a million objects (TensorFlow, Keras, a few models and the data a suite
keeps), a test leaks 17 tensors: one in a module's list, one at the end of a chain of 17 links,
15 in a Keras model's layers, and one that nothing in Python holds. The plugin explains all of
them in one walk (``explain_all``); objgraph's ``find_backref_chain(obj, is_proper_module)`` is
timed on the same objects, one search each, with the same depth. Interleaved, median of runs.

Then a next test leaks into the same holders (a tensor more in the module's list and at the end
of the long chain, a class registered under a key of its own in the same registry, the same
model's weights): explained again from scratch, and through the holders the first report
explained (``KnownRoutes``, as the plugin does within a run).

python benchmarks/explain_cost.py [--objects 1000000] [--repeats 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import types
from typing import Any

DEPTH = 17


def build_heap(objects: int) -> tuple[list[Any], list[str]]:
    """The leaks and their labels; the heap filled to about ``objects`` objects."""
    import keras
    import numpy as np
    import tensorflow as tf

    module = types.ModuleType("leaky_suite")
    sys.modules[module.__name__] = module
    models = []
    for _ in range(4):
        model = keras.Sequential([keras.Input((8,)), *[keras.layers.Dense(8) for _ in range(15)]])
        model.compile(optimizer="adam", loss="mse")
        model.fit(np.ones((16, 8), "float32"), np.ones((16, 8), "float32"), verbose=0)
        models.append(model)
    module.MODELS = models  # type: ignore[attr-defined]
    leaks: list[Any] = []
    labels: list[str] = []
    shallow = tf.ones((4,))
    module.CACHE = [shallow]  # type: ignore[attr-defined]
    leaks.append(shallow)
    labels.append("module list")
    deep = tf.ones((4,))
    holder: object = deep
    for level in range(DEPTH // 2):
        holder = {f"level{level}": [holder]}
    module.NESTED = holder  # type: ignore[attr-defined]
    leaks.append(deep)
    labels.append(f"chain of {DEPTH} links")
    registered = tf.ones((4,))
    module.REGISTRY = {"first>Model": type("Model", (), {"call": registered})}  # type: ignore[attr-defined]
    leaks.append(registered)
    labels.append("a registry's entry")
    for layer in models[-1].layers:
        leaks.append(layer.kernel.value)
        labels.append("a model's weights")
    orphan = tf.ones((4,))
    cycle: list[object] = [orphan]
    cycle.append(cycle)
    leaks.append(orphan)
    labels.append("no Python holder")
    gc.collect()
    missing = objects - len(gc.get_objects())
    module.DATA = [[index, {"k": [index]}] for index in range(max(0, missing // 3))]  # type: ignore[attr-defined]
    return leaks, labels


def time_ours(leaks: list[Any]) -> tuple[float, list[str]]:
    from pytest_eagersession.reports.explain import explain_all

    started = time.perf_counter()
    texts = [explanation.text() for explanation in explain_all(leaks, budget_s=60)]
    return time.perf_counter() - started, texts


def time_known_holders(leaks: list[Any], repeats: int) -> tuple[float, float, int]:
    """Seconds to explain a next test's leaks held as the first's: walked, and through routes."""
    import tensorflow as tf

    from pytest_eagersession.reports.explain import explain_all
    from pytest_eagersession.reports.routes import KnownRoutes

    module = sys.modules["leaky_suite"]
    routes = KnownRoutes()
    explain_all(leaks, budget_s=60, routes=routes)  # the first report
    again = [tf.ones((4,)), tf.ones((4,))]
    module.CACHE.append(again[0])  # type: ignore[attr-defined]
    deepest: Any = module.NESTED  # type: ignore[attr-defined]
    while isinstance(deepest, dict):
        deepest = next(iter(deepest.values()))
    deepest.append(again[1])
    again.append(tf.ones((4,)))  # the next test registers a class of its own
    module.REGISTRY["next>Model"] = type("Model", (), {"call": again[-1]})  # type: ignore[attr-defined]
    again.extend(leaks[3:-1])  # the model's weights
    walked, routed = [], []
    hits = 0
    for _ in range(repeats):
        started = time.perf_counter()
        explain_all(again, budget_s=60)
        walked.append(time.perf_counter() - started)
        before = routes.hits
        started = time.perf_counter()
        explain_all(again, budget_s=60, routes=routes)
        routed.append(time.perf_counter() - started)
        hits = routes.hits - before
    return statistics.median(walked), statistics.median(routed), hits


def time_objgraph(leaks: list[Any], limit: int) -> tuple[float, int, int]:
    """Seconds for objgraph's search on the first ``limit`` leaks; chains found; leaks tried."""
    import objgraph

    found = 0
    started = time.perf_counter()
    for obj in leaks[:limit]:
        chain = objgraph.find_backref_chain(obj, objgraph.is_proper_module, max_depth=DEPTH + 2)
        found += len(chain) > 1
        del chain
    return time.perf_counter() - started, found, min(limit, len(leaks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--objgraph-leaks", type=int, default=4, help="objgraph is slow: a sample")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    leaks, labels = build_heap(args.objects)
    heap = len(gc.get_objects())
    ours, theirs = [], []
    texts: list[str] = []
    found = tried = 0
    for _ in range(args.repeats):
        seconds, texts = time_ours(leaks)
        ours.append(seconds)
        seconds, found, tried = time_objgraph(leaks, args.objgraph_leaks)
        theirs.append(seconds / tried)
    per_test = statistics.median(ours)
    per_leak_objgraph = statistics.median(theirs)
    walked, routed, hits = time_known_holders(leaks, args.repeats)
    results = {
        "heap_objects": heap,
        "leaks": len(leaks),
        "ours_per_test_s": per_test,
        "objgraph_per_leak_s": per_leak_objgraph,
        "objgraph_per_test_s": per_leak_objgraph * len(leaks),
        "objgraph_found": f"{found} of {tried}",
        "explained": sum(not text.startswith("no holder found") for text in texts),
        "texts": dict(zip(labels, texts, strict=True)),
        "again_leaks": len(leaks) - 1,
        "again_walked_s": walked,
        "again_routed_s": routed,
        "again_by_routes": hits,
    }
    print(f"Explaining {len(leaks)} leaks of one test, {heap} objects in the heap:")
    print(f"  one walk for all of them      {per_test:6.3f} s")
    print(
        f"  objgraph.find_backref_chain    {per_leak_objgraph:6.3f} s per leak, "
        f"{per_leak_objgraph * len(leaks):.1f} s for all (chains found: {found} of {tried})"
    )
    print(
        f"  a next test's {len(leaks) - 1} leaks in the same holders: {walked:.3f} s walked, "
        f"{routed:.4f} s through the holders explained before ({hits} found so)"
    )
    for label, text in results["texts"].items():
        print(f"  {label:<20} {text[:150]}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
