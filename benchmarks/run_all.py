"""Run every benchmark: docs/benchmarks.json holds the figures, and docs/benchmarks.md (with
its plot) is rendered from that file alone.

Each figure is a ratio measured in one run against its baseline; the machine is described at
the top of the page. ``./scripts/bench`` runs this in the project's environment. ``--render``
runs nothing and renders the page again from the JSON (the tests check that the committed page
is that rendering).

    python benchmarks/run_all.py [--quick | --render]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs"

sys.path.insert(0, str(HERE))

from page import render  # noqa: E402  (beside this file)


def run(script: str, *args: str, check: bool = True) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        command = [sys.executable, str(HERE / script), *args, "--json", str(out)]
        started = time.perf_counter()
        subprocess.run(command, env=env, check=check)
        print(f"   ({script}: {time.perf_counter() - started:.0f} s)\n", flush=True)
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def machine() -> str:
    import tensorflow as tf

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            names = [line.split(":", 1)[1].strip() for line in handle if "model name" in line]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} CPU cores ({cpu}), {memory:.0f} GiB of memory, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"TensorFlow {tf.__version__} (CPU); no GPU"
    )


def plot_series(memory: dict[str, Any], cycles: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    for strategy, result in memory["ops"].items():
        left.plot(result["series"], label=strategy)
    left.set_title("n*m with the op builder (4 ops of 4 MiB per iteration)")
    left.set_xlabel("iteration")
    left.set_ylabel("resident memory growth (MiB)")
    left.legend()
    cells = cycles["cells"]
    labels = [f"{c['lists']}/{c['size_mib']}M" for c in cells]
    width = 0.2
    for index, session in enumerate(
        ("none", "on_session_close", "in_background", "on_safe_points")
    ):
        peaks = [c["runs"][session]["peak_mib"] for c in cells]
        positions = [x + (index - 1.5) * width for x in range(len(cells))]
        right.bar(positions, peaks, width, label="no session" if session == "none" else session)
    right.set_yscale("log")
    right.set_xticks(range(len(cells)), labels, rotation=45, fontsize=8)
    right.set_title("Cycle grid: peak growth by Python lists an iteration / tensor size")
    right.set_ylabel("peak resident memory growth (MiB, log)")
    right.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs, for a smoke test")
    parser.add_argument(
        "--render", action="store_true", help="run nothing: render the page from the JSON"
    )
    args = parser.parse_args()
    if args.render:
        results = json.loads((DOCS / "benchmarks.json").read_text())
        (DOCS / "benchmarks.md").write_text(render(results))
        print(f"rendered {DOCS / 'benchmarks.md'} from {DOCS / 'benchmarks.json'}")
        return
    started = time.perf_counter()
    quick = args.quick
    results: dict[str, Any] = {"machine": machine()}
    results["memory"] = run("strategy_memory.py", *(["--iterations", "10"] if quick else []))
    results["cycles"] = run(
        "cycles_sweep.py",
        *(["--lists", "0", "800", "--sizes", "16", "--repeat", "1"] if quick else []),
    )
    # The fastest loops, started once the cleaner backed off to its longest wait: what bounds it.
    results["cycles_after_quiet"] = run(
        "cycles_sweep.py",
        *("--lists", "0", "--sizes", "16", *([] if quick else ["4"]), "--quiet-before", "1"),
        *(["--repeat", "1"] if quick else []),
    )
    results["overhead"] = run("session_overhead.py", *(["--rounds", "3"] if quick else []))
    results["plugin"] = run(
        "plugin_overhead.py",
        *(["--tests", "30", "--runs", "1", "--tf-tests", "3", "--tf-runs", "1"] if quick else []),
    )
    results["explain"] = run(
        "explain_cost.py", *(["--repeats", "1", "--objects", "300000"] if quick else [])
    )
    results["bookkeeping"] = run("bookkeeping.py", *(["--tests", "2000"] if quick else []))
    small = ["--tests", "300", "--rounds", "1"] if quick else []
    results["small"] = run("small_tests.py", *small)
    if not quick:  # the gate's verdict does not stop the page: its figures are what it reports
        gate = ("--side-by-side", "-n", "2", "--rounds", "2")  # as CI runs it
        results["realsuite"] = run("realsuite.py", *gate, check=False)
    DOCS.mkdir(exist_ok=True)
    plot_series(results["memory"], results["cycles"], DOCS / "benchmarks-memory.png")
    results["took_s"] = round(time.perf_counter() - started, 1)
    (DOCS / "benchmarks.md").write_text(render(results))
    (DOCS / "benchmarks.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {DOCS / 'benchmarks.md'} in {(time.perf_counter() - started) / 60:.1f} min")


if __name__ == "__main__":
    main()
