"""The plugin's own memory over a long run: 5,000 tests, RSS sampled every 500.

Every 100th test leaks a small tensor, as a real suite might. The slope of resident memory
against the number of tests, with the plugin and without, says whether the plugin's
bookkeeping grows with the run.

    python benchmarks/bookkeeping.py [--tests 5000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CONFTEST = """
import json, os

_SAMPLES = []


def _rss():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def pytest_runtest_logfinish(nodeid, location):
    global _COUNT
    _COUNT = globals().get("_COUNT", 0) + 1
    if _COUNT % 500 == 0:
        _SAMPLES.append((_COUNT, _rss()))


def pytest_sessionfinish(session):
    with open(os.environ["BOOKKEEPING_OUT"], "w") as handle:
        json.dump(_SAMPLES, handle)
"""

TEST = """
def test_{index}():
    x = tf.ones((4,)) + {index}
    {leak}assert int(tf.size(x)) == 4
"""


def write_suite(folder: Path, count: int) -> None:
    (folder / "conftest.py").write_text(CONFTEST)
    per_file = 500
    for start in range(0, count, per_file):
        body = "import tensorflow as tf\n_KEPT = []\n"
        for index in range(start, min(count, start + per_file)):
            leak = "_KEPT.append(x)\n    " if index % 100 == 99 else ""
            body += TEST.format(index=index, leak=leak)
        (folder / f"test_part{start // per_file:03d}.py").write_text(body)


def slope(samples: list[list[int]]) -> float:
    """Least-squares slope of RSS against tests, in KiB per 1,000 tests, after the first 1,000."""
    points = [(count, rss) for count, rss in samples if count > 1000]
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    numerator = sum((x - mean_x) * (y - mean_y) for x, y in points)
    denominator = sum((x - mean_x) ** 2 for x, _ in points)
    return numerator / denominator * 1000 / 1024


def run(folder: Path, *extra: str) -> list[list[int]]:
    out = folder / "samples.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", BOOKKEEPING_OUT=str(out))
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, str(folder)],
        env=env,
        cwd=folder,
        capture_output=True,
        check=False,
    )
    samples: list[list[int]] = json.loads(out.read_text())
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=5000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        write_suite(folder, args.tests)
        with_plugin = run(folder)
        without = run(folder, "-p", "no:eagersession")
    ours, baseline = slope(with_plugin), slope(without)
    print(
        f"Resident memory over {args.tests} tests (every 100th leaks a tensor): "
        f"{ours:+.1f} KiB per 1,000 tests with the plugin, {baseline:+.1f} without"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "tests": args.tests,
                    "slope_kib_per_1000": ours,
                    "baseline_slope_kib_per_1000": baseline,
                    "samples": with_plugin,
                    "baseline_samples": without,
                },
                handle,
                indent=2,
            )


if __name__ == "__main__":
    main()
