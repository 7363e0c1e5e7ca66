"""What every check promises, and the checks together: eager_checks and the marker's limits.

Every check leaves the gc's state and TensorFlow's hooks as it found them and works without
pytest; ``eager_checks`` runs them around a unittest method, and the plugin's ``cleanup``
marker takes ``max_traces`` and ``max_bytes``. The tests of each check are in
``test_assertions_<check>.py``. Each test runs in the plugin's own eager session, as a user's
test would: what a test keeps until its end is still checked by the plugin afterwards.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import unittest
from collections.abc import Iterator

import pytest
from support import run_inner

from pytest_eagersession.assertions import (
    EagerChecksError,
    GrowthError,
    MemoryLimitError,
    RetracingError,
    assert_max_traces,
    assert_no_growth,
    eager_checks,
    max_bytes,
)

tf = pytest.importorskip("tensorflow")
from tensorflow.python.eager.polymorphic_function import transform  # noqa: E402

MIB = 1024 * 1024


def gc_state() -> tuple[bool, int, tuple[int, ...]]:
    return gc.isenabled(), gc.get_debug(), gc.get_threshold()


@pytest.fixture
def odd_gc_state() -> Iterator[tuple[bool, int, tuple[int, ...]]]:
    """A gc state no check would set by chance: disabled, a debug flag, odd thresholds."""
    before = gc_state()
    gc.disable()
    gc.set_debug(gc.DEBUG_UNCOLLECTABLE)
    gc.set_threshold(555, 7, 9)
    try:
        yield gc_state()
    finally:
        gc.set_debug(before[1])
        gc.set_threshold(*before[2])
        if before[0]:
            gc.enable()


def hooks() -> tuple[int, int, int]:
    """The interpreter-wide hooks the checks install: none may stay behind."""
    from tensorflow.python.eager import context

    return (
        len(gc.callbacks),
        len(transform.CONCRETE_FUNCTION_CALLBACKS),
        len(context.context().op_callbacks),
    )


def test_gc_state_is_restored_after_a_failing_and_a_passing_check(odd_gc_state) -> None:
    kept = []

    def step_that_touches_gc() -> None:
        gc.enable()
        gc.set_debug(0)
        gc.set_threshold(700, 10, 10)
        kept.append(tf.ones([1]) * 1.0)

    with pytest.raises(GrowthError):
        assert_no_growth(step_that_touches_gc)
    assert gc_state() == odd_gc_state
    kept.clear()
    assert_no_growth(lambda: tf.ones([1]) * 1.0)
    assert gc_state() == odd_gc_state


def test_checks_leave_no_hook_behind() -> None:
    before = hooks()
    kept = []
    with pytest.raises(GrowthError):
        assert_no_growth(lambda: kept.append(tf.ones([1]) * 1.0))
    with pytest.raises(MemoryLimitError), max_bytes(1):
        big = tf.ones([64]) * 1.0
    with pytest.raises(RetracingError), assert_max_traces(0):
        tf.function(lambda: tf.constant(1.0))()
    assert hooks() == before
    del big


# ---------------------------------------------------------------- eager_checks, unittest


class TrainingCase(tf.test.TestCase):
    """A unittest suite adopting the checks one test at a time (run by the test below)."""

    __test__ = False

    def setUp(self) -> None:
        super().setUp()
        self.scale = tf.function(lambda x: x * 2.0)

    @eager_checks(max_traces=1, max_bytes="1 MiB")
    def test_clean(self) -> None:
        for value in (1.0, 2.0):
            self.assertAllEqual(self.scale(tf.constant(value)), value * 2.0)

    @eager_checks()
    def test_keeps_a_variable(self) -> None:
        self.weights = tf.Variable(tf.ones([3]), name="case_weights")

    @eager_checks(max_traces=1)
    def test_retraces(self) -> None:
        for value in (1.0, 2.0):
            self.scale(value)

    @eager_checks(max_bytes="1 MiB")
    def test_too_big(self) -> None:
        assert tf.zeros([512, 1024]).shape == (512, 1024)

    def test_not_adopted_yet(self) -> None:
        self.kept = tf.ones([2])


def test_eager_checks_decorate_unittest_methods_one_at_a_time() -> None:
    names = ["test_clean", "test_keeps_a_variable", "test_retraces", "test_too_big"]
    suite = unittest.TestSuite(TrainingCase(name) for name in [*names, "test_not_adopted_yet"])
    result = unittest.TestResult()
    suite.run(result)
    assert result.errors == []
    failures = {case._testMethodName: text for case, text in result.failures}
    assert sorted(failures) == ["test_keeps_a_variable", "test_retraces", "test_too_big"]
    assert (
        "LeakAssertionError: TrainingCase.test_keeps_a_variable leaked 1 TensorFlow object"
        in (failures["test_keeps_a_variable"])
    )
    assert (
        "local self (TrainingCase).weights -> ResourceVariable" in failures["test_keeps_a_variable"]
    )
    assert (
        "RetracingError: TrainingCase.test_retraces traced tf.functions"
        in (failures["test_retraces"])
    )
    assert "(x: Literal[2.0])" in failures["test_retraces"]
    assert (
        "MemoryLimitError: TrainingCase.test_too_big peaked at 2.0 MiB"
        in (failures["test_too_big"])
    )
    del suite, result, failures


def test_eager_checks_report_every_failure_at_once_and_measure_for_json() -> None:
    checks = eager_checks(max_traces=0, max_bytes="1 KiB", leaks=True)
    kept = []

    def body() -> None:
        with checks:
            tf.function(lambda x: x + 1.0)(tf.constant(1.0))
            kept.append(tf.ones([1024]) * 1.0)

    with pytest.raises(EagerChecksError) as failure:
        body()
    kinds = [type(error).__name__ for error in failure.value.errors]
    assert kinds == ["RetracingError", "MemoryLimitError", "LeakAssertionError"]
    assert "-> local kept (list) -> [0] -> EagerTensor" in str(failure.value)
    measured = checks.to_json()
    assert measured["peak_bytes"] >= 4096
    assert measured["device_peak_bytes"] == {}
    assert [entry["traces"] for entry in measured["traces"]] == [1]
    kept.clear()


def test_eager_checks_let_the_bodys_own_error_through_unchecked() -> None:
    before = hooks()
    made = []

    def body() -> None:
        with eager_checks(max_traces=0, max_bytes=1):
            made.append(tf.function(lambda: tf.ones([64]))())
            raise KeyError("own")

    with pytest.raises(KeyError, match="own"):
        body()
    assert hooks() == before
    assert made[0].shape == (64,)


def test_outside_pytest_and_its_session_the_checks_work_and_restore_gc() -> None:
    script = textwrap.dedent(
        """
        import gc, unittest
        import tensorflow as tf
        from pytest_eagersession.assertions import GrowthError, assert_no_growth, eager_checks

        gc.set_debug(gc.DEBUG_UNCOLLECTABLE)
        kept = []
        try:
            assert_no_growth(lambda: kept.append(tf.ones([4]) * 1.0))
        except GrowthError as error:
            print("growth:", str(error).splitlines()[1])
        print("gc:", gc.isenabled(), gc.get_debug() == gc.DEBUG_UNCOLLECTABLE)
        assert_no_growth(lambda: tf.ones([4]) * 1.0)
        print("clean: passed")

        class Case(unittest.TestCase):
            @eager_checks()
            def test_leaks(self):
                self.kept = tf.Variable(1.0, name="unittest_kept")

        result = unittest.TestResult()
        Case("test_leaks").run(result)
        for _, text in result.failures:
            print("unittest:", [line for line in text.splitlines() if "variable:" in line])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "growth:   run 1: +1 object (16 B)"
    assert lines[1:3] == ["gc: True True", "clean: passed"]
    assert "variable: ResourceVariable 'unittest_kept' float32[] 4 B on CPU:0" in lines[3]


# ---------------------------------------------------------------- the plugin's marker keywords


TRACES = """
    import pytest
    import tensorflow as tf

    scale = tf.function(lambda x: x * 2.0)

    @pytest.mark.cleanup(max_traces=1)
    def test_retraces():
        for value in (1.0, 2.0, 3.0):
            scale(value)

    @pytest.mark.cleanup(max_traces=1)
    def test_steady():
        for value in (1.0, 2.0, 3.0):
            scale(tf.constant(value))
"""


BYTES = """
    import pytest
    import tensorflow as tf

    @pytest.mark.cleanup(max_bytes="1 MiB")
    def test_over():
        activations = tf.zeros([512, 1024])
        assert activations.shape == (512, 1024)

    @pytest.mark.cleanup(max_bytes=4 * 1024 * 1024)
    def test_under():
        activations = tf.zeros([512, 1024])
        assert activations.shape == (512, 1024)

    def test_unlimited():
        assert float(tf.reduce_sum(tf.ones([256]))) == 256.0
"""


@pytest.mark.cleanup(leaks="off")  # the inner runs' objects are the inner plugin's to check
def test_marker_max_traces_fails_the_test_naming_each_trace(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_traces=TRACES)
    result = run_inner(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_traces.py::test_retraces traced tf.functions more than max_traces=1 allows*",
            "*<lambda> (*test_traces.py:4) traced 3 times:",
            "*1. (x: Literal[[]1.0])",
            "*2. (x: Literal[[]2.0])",
            "*3. (x: Literal[[]3.0])",
            "*Python values are part of the signature*",
            "FAILED test_traces.py::test_retraces*",
        ]
    )


@pytest.mark.cleanup(leaks="off")
def test_marker_max_bytes_fails_the_test_and_the_json_has_every_peak(
    pytester: pytest.Pytester,
) -> None:
    import json

    pytester.makepyfile(test_bytes=BYTES)
    out = pytester.path / "report.json"
    result = run_inner(pytester, f"--eagersession-json={out}")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_bytes.py::test_over peaked at 2.0 MiB of tracked TensorFlow objects, over "
            "its max_bytes of 1.0 MiB (1048576 B).",
            "*1. tensor: EagerTensor float32[[]512,1024] 2.0 MiB on CPU:0, made by Fill at "
            "*test_bytes.py:6 in test_over (freed since)",
        ]
    )
    tests = {entry["nodeid"]: entry for entry in json.loads(out.read_text())["tests"]}
    peaks = {nodeid.split("::")[1]: entry["peak_bytes"] for nodeid, entry in tests.items()}
    assert 2 * MIB <= peaks["test_over"] < 2 * MIB + 1024
    assert 2 * MIB <= peaks["test_under"] < 2 * MIB + 1024
    assert 1024 <= peaks["test_unlimited"] < 4096
    assert all(entry["device_peak_bytes"] == {} for entry in tests.values())  # no GPU here


@pytest.mark.cleanup(leaks="off")
def test_bad_marker_limits_fail_only_their_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.cleanup(max_bytes="64 MB/s")
        def test_bad_size():
            pass

        @pytest.mark.cleanup(max_traces=-1)
        def test_bad_count():
            pass

        def test_fine():
            pass
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.cleanup(max_bytes=...): '64 MB/s' is not a size: write a number of "
            "bytes or a number and a unit (B, KB, KiB, MB, MiB, GB, GiB), like '64 MiB'",
            "*@pytest.mark.cleanup(max_traces=...): expected a whole number of 0 or more, got -1",
        ],
        consecutive=False,
    )
