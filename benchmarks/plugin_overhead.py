"""What the plugin costs per test, against no plugin and against TensorFlow's own leak check.

Generates a suite of small TensorFlow tests and runs it, alternating, with the plugin and with
``-p no:eagersession`` (medians of several runs, in one process each, so that TensorFlow's import
cancels out). TensorFlow's ``assert_no_new_tensors`` is measured on the same tests written as
``tf.test.TestCase`` methods, against the same methods undecorated.

The figures a test's body is measured for (its peak bytes, objects made and traces: for the
JSON report, the most-memory table, JUnit XML and ``--eagersession-fail-on-increase``) cost
too little for a suite's wall time to show (a tenth of a millisecond against a few): they are
timed in this process instead, the same small body in a session with and without them.

    python benchmarks/plugin_overhead.py [--tests 300] [--runs 5] [--tf-tests 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SMALL_TEST = """
def test_small_{index}():
    x = tf.ones((8, 8))
    y = tf.matmul(x, x) + {index}
    assert float(tf.reduce_sum(y)) > 0
"""

TF_TEST = """
    {decorator}
    def test_small_{index}(self):
        x = tf.ones((8, 8))
        y = tf.matmul(x, x) + {index}
        self.assertGreater(float(tf.reduce_sum(y)), 0)
"""


def write_plain_suite(folder: Path, count: int) -> None:
    body = "import tensorflow as tf\n" + "".join(SMALL_TEST.format(index=i) for i in range(count))
    (folder / "test_generated.py").write_text(body)


def write_testcase_suite(folder: Path, count: int, *, decorated: bool) -> None:
    decorator = "@test_util.assert_no_new_tensors" if decorated else ""
    methods = "".join(TF_TEST.format(index=i, decorator=decorator) for i in range(count))
    body = (
        textwrap.dedent(
            """
        import tensorflow as tf
        from tensorflow.python.framework import test_util


        class SmallTests(tf.test.TestCase):
        """
        )
        + methods
    )
    (folder / "test_generated.py").write_text(body)


def run_suite(folder: Path, *extra: str) -> float:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONDONTWRITEBYTECODE="1")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, str(folder)]
    started = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=folder)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0,):
        raise RuntimeError(f"suite failed ({result.returncode}):\n{result.stdout[-2000:]}")
    return elapsed


def plugin_cost(count: int, runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        write_plain_suite(folder, count)
        with_plugin, without = [], []
        for _ in range(runs):
            without.append(run_suite(folder, "-p", "no:eagersession"))
            with_plugin.append(run_suite(folder))
    per_test = (statistics.median(with_plugin) - statistics.median(without)) / count
    return {
        "tests": count,
        "with_plugin_s": statistics.median(with_plugin),
        "without_plugin_s": statistics.median(without),
        "per_test_ms": per_test * 1e3,
    }


def tensorflow_check_cost(count: int, runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as plain_name, tempfile.TemporaryDirectory() as tf_name:
        plain, checked = Path(plain_name), Path(tf_name)
        write_testcase_suite(plain, count, decorated=False)
        write_testcase_suite(checked, count, decorated=True)
        plain_times, checked_times = [], []
        for _ in range(runs):
            plain_times.append(run_suite(plain, "-p", "no:eagersession"))
            checked_times.append(run_suite(checked, "-p", "no:eagersession"))
    per_test = (statistics.median(checked_times) - statistics.median(plain_times)) / count
    return {"tests": count, "per_test_ms": per_test * 1e3}


def figures_cost(count: int, runs: int) -> dict[str, float]:
    """Seconds a small test's body costs in a session, with and without its figures measured."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    from pytest_eagersession import EagerSession
    from pytest_eagersession.assertions.checks import EagerChecks

    def body(index: int) -> None:
        x = tf.ones((8, 8))
        y = tf.matmul(x, x) + index
        assert float(tf.reduce_sum(y)) > 0

    def one_run(measured: bool) -> float:
        started = time.perf_counter()
        for index in range(count):
            with EagerSession.options().build():
                if not measured:
                    body(index)
                    continue
                checks = EagerChecks(leaks=False, measure_bytes=True, count_traces=True).start()
                body(index)
                checks.finish()
                checks.to_json()
        return (time.perf_counter() - started) / count

    one_run(True)  # kernels, caches
    plain, measured = [], []
    for _ in range(runs):
        plain.append(one_run(False))
        measured.append(one_run(True))
    base = statistics.median(plain)
    return {
        "tests": count,
        "per_test_ms": base * 1e3,
        "figures_ms": (statistics.median(measured) - base) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tf-tests", type=int, default=20)
    parser.add_argument("--tf-runs", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    ours = plugin_cost(args.tests, args.runs)
    print(
        f"Plugin, {ours['tests']} small TensorFlow tests (median of {args.runs} runs): "
        f"{ours['with_plugin_s']:.2f} s against {ours['without_plugin_s']:.2f} s without: "
        f"{ours['per_test_ms']:.2f} ms per test"
    )
    theirs = tensorflow_check_cost(args.tf_tests, args.tf_runs)
    print(
        f"TensorFlow's assert_no_new_tensors on {theirs['tests']} tf.test.TestCase tests: "
        f"{theirs['per_test_ms']:.0f} ms per test"
    )
    ratio = theirs["per_test_ms"] / max(ours["per_test_ms"], 0.01)
    print(f"Ours is {ratio:.0f}x cheaper per test")
    figures = figures_cost(args.tests, max(args.runs, 7))
    print(
        f"Measuring a test body's figures (peak bytes, objects made, traces): "
        f"{figures['figures_ms']:.3f} ms per test, on a body that takes "
        f"{figures['per_test_ms']:.3f} ms in a session (median of {max(args.runs, 7)} runs)"
    )
    if args.json:
        with open(args.json, "w") as handle:
            results = {"plugin": ours, "tensorflow": theirs, "ratio": ratio, "figures": figures}
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
