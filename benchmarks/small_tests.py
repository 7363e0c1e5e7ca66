"""The plugin's cost per small test: a generated suite of small TensorFlow tests, side by side.

    python benchmarks/small_tests.py [--tests 3000] [--rounds 2] [--json PATH]

Writes a suite of the shape most TensorFlow unit tests have (a few eager ops each, a
module-scoped fixture, ``parametrize``), ten modules of three parametrized functions, into a
temporary folder, and runs it plugin off and on at the same time, one xdist worker a side
(``side_by_side.py``): what the plugin adds per test (open, close, survivor check, cleaner
thread) is the difference of the two sides' times over the tests, since each test's own work
is a fraction of a millisecond.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import side_by_side  # beside this file

MODULES = 10
FUNCTIONS = 3  # parametrized test functions a module

MODULE = """import pytest
import tensorflow as tf


@pytest.fixture(scope="module")
def weights():
    return tf.random.stateless_normal([16, 16], seed=[{seed}, 0])


@pytest.mark.parametrize("k", range({per_function}))
def test_matmul(weights, k):
    y = tf.matmul(weights, weights) + float(k)
    assert y.shape == (16, 16)


@pytest.mark.parametrize("k", range({per_function}))
def test_reduce(weights, k):
    assert float(tf.reduce_sum(weights * 0.0 + k)) == pytest.approx(256.0 * k)


@pytest.mark.parametrize("k", range({per_function}))
def test_cast(weights, k):
    x = tf.cast(tf.fill([4], k), tf.float32)
    assert float(x[0]) == k
"""


def write_suite(folder: Path, tests: int) -> int:
    """Write the suite into ``folder``; returns how many tests it has (a multiple of 30)."""
    per_function = max(1, tests // (MODULES * FUNCTIONS))
    for seed in range(MODULES):
        text = MODULE.format(seed=seed, per_function=per_function)
        (folder / f"test_small_{seed}.py").write_text(text, encoding="utf-8")
    return per_function * MODULES * FUNCTIONS


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tests", type=int, default=3000, help="about this many tests")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON here")
    options = parser.parse_args(argv)
    if options.tests < 1 or options.rounds < 1:
        parser.error("--tests and --rounds must be at least 1")
    json_path = str(Path(options.json).resolve()) if options.json else None
    with tempfile.TemporaryDirectory(prefix="small-tests-") as folder:
        count = write_suite(Path(folder), options.tests)
        print(f"small_tests: {count} tests in {folder}", flush=True)
        here = Path.cwd()
        os.chdir(folder)
        try:
            arguments = ["--rounds", str(options.rounds), "--out", str(Path(folder) / "out")]
            if json_path:
                arguments += ["--json", json_path]
            return side_by_side.main(
                [*arguments, "--", "-n", "1", "-p", "no:cacheprovider", "-p", "no:randomly"]
            )
        finally:
            os.chdir(here)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
