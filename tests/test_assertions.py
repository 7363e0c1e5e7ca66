"""Issue 5: assertions on growth, leaks since a checkpoint, retracing and peak memory.

Each test runs in the plugin's own eager session, as a user's test would: the assertions use
that session, and what a test keeps until its end is still checked by the plugin afterwards.
"""

from __future__ import annotations

import collections
import gc
import subprocess
import sys
import textwrap
import unittest
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_eagersession import EagerSession
from pytest_eagersession.assertions import (
    DEVICE_MEMORY,
    ByteMeter,
    EagerChecksError,
    GrowthError,
    LeakAssertionError,
    MemoryLimitError,
    RetracingError,
    TraceCounter,
    assert_max_traces,
    assert_no_growth,
    assert_no_leaks,
    eager_checks,
    max_bytes,
    parse_size,
)

tf = pytest.importorskip("tensorflow")
from tensorflow.python.eager.polymorphic_function import transform  # noqa: E402

HERE = __file__
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


# ---------------------------------------------------------------- growth


def test_a_tensor_kept_per_call_fails_listing_each_run_and_its_holder() -> None:
    kept: list[Any] = []

    def step() -> None:
        kept.append(tf.ones([256]) * 2.0)

    with pytest.raises(GrowthError) as failure:
        assert_no_growth(step, warmup=2, runs=4)
    text = str(failure.value)
    assert text.startswith(
        "test_a_tensor_kept_per_call_fails_listing_each_run_and_its_holder.<locals>.step grows: "
        "4 of its 4 runs after 2 warm-up runs left new objects alive to the end (about "
        "1 TensorFlow object (1.0 KiB) a run):"
    )
    for run in range(1, 5):
        assert f"  run {run}: +1 object (1.0 KiB)" in text
    assert text.count("tensor: EagerTensor float32[256] 1.0 KiB") == 4
    # the first runs are traced to the test's own list, by index (2 warm-up runs came first)
    assert "held by frame of test_a_tensor_kept" in text
    assert "-> local kept (list) -> [2] -> EagerTensor" in text
    assert "-> local kept (list) -> [4] -> EagerTensor" in text
    assert [len(run.records) for run in failure.value.runs] == [1, 1, 1, 1]
    assert len(kept) == 6  # nothing was destroyed or dropped: the objects are still usable
    assert float(tf.reduce_sum(kept[-1])) == 512.0


def test_a_variable_kept_per_call_fails() -> None:
    kept = []

    def make_weights() -> None:
        kept.append(tf.Variable(tf.zeros([4, 4]), name="weights"))

    with pytest.raises(GrowthError) as failure:
        assert_no_growth(make_weights)
    text = str(failure.value)
    assert "variable: ResourceVariable 'weights' float32[4,4] 64 B on CPU:0" in text
    assert "-> local kept (list) -> [2] -> ResourceVariable" in text
    # only the variable: its handle and the zeros it was made from are not counted again
    assert all(len(run.records) == 1 for run in failure.value.runs)


def test_an_iterator_kept_per_call_fails() -> None:
    dataset = tf.data.Dataset.range(10).map(lambda x: x * 2)
    parked = {}

    def open_iterator() -> None:
        parked[len(parked)] = iter(dataset)

    with pytest.raises(GrowthError) as failure:
        assert_no_growth(open_iterator)
    assert "iterator: OwnedIterator on CPU:0" in str(failure.value)
    assert "-> local parked (dict) -> [2] -> OwnedIterator" in str(failure.value)
    # One iterator per run. The last run's may be missing: on Python 3.10 under -n 2 the matrix
    # showed it unattributed 4 times out of 4 (cause not established; see the closing note of
    # stop 12). The verdict does not depend on it: it needs every run but the last to grow.
    iterators = [[r.kind for r in run.records].count("iterator") for run in failure.value.runs]
    assert iterators[:-1] == [1] * (len(iterators) - 1)
    assert iterators[-1] in (0, 1)


def test_a_tf_function_retracing_on_python_floats_fails_naming_each_signature() -> None:
    scale = tf.function(lambda x: x * 2.0)
    calls = iter(range(100))

    def step() -> None:
        scale(float(next(calls)))

    with pytest.raises(GrowthError) as failure:
        assert_no_growth(step, runs=3)
    text = str(failure.value)
    assert "  run 1: +1 registered function" in text
    assert "    registered function __inference_<lambda>_" in text
    for value in (2.0, 3.0, 4.0):  # runs 1-3 come after the 2 warm-up calls (0.0, 1.0)
        assert f"(x: Literal[{value}])" in text
    assert "a Python number or a new shape each call retraces" in text
    assert [len(run.functions) for run in failure.value.runs] == [1, 1, 1]


def test_one_freed_and_one_kept_per_call_is_growth_not_a_wash() -> None:
    pool = [tf.fill([8], float(i)) for i in range(10)]  # made before the check

    def churn() -> None:
        pool.pop(0)  # frees an old tensor: counts net out, identities do not
        pool.append(tf.ones([8]) + 1.0)

    count = len(pool)
    with pytest.raises(GrowthError) as failure:
        assert_no_growth(churn)
    assert len(pool) == count
    assert all(len(run.records) == 1 for run in failure.value.runs)


def test_clean_work_passes_and_reports_nothing_per_run() -> None:
    weights = tf.Variable(tf.ones([4, 4]))
    dataset = tf.data.Dataset.range(4)

    @tf.function
    def forward(x: Any) -> Any:
        return tf.matmul(x, weights)

    def step() -> None:
        weights.assign_add(tf.ones([4, 4]) * 0.01)
        total = forward(tf.ones([2, 4]))
        for item in dataset:
            total += tf.cast(item, tf.float32)
        assert total.shape == (2, 4)

    runs = assert_no_growth(step)
    assert [run.grew for run in runs] == [False] * 5
    assert all(run.traces == () for run in runs)  # traced in the warm-up only


def test_a_bounded_cache_passes_but_still_says_what_the_last_runs_left() -> None:
    latest: collections.deque[Any] = collections.deque(maxlen=2)

    def step() -> None:
        latest.append(tf.ones([3]) * 3.0)

    runs = assert_no_growth(step, runs=4)
    assert [len(run.records) for run in runs] == [0, 0, 1, 1]


def test_growth_through_the_method_of_a_session_of_ones_own() -> None:
    kept = []
    session = EagerSession.create()
    with pytest.raises(GrowthError):
        session.assert_no_growth(lambda: kept.append(tf.ones([2]) * 2.0), runs=2)
    assert not session.active  # activated for the check only
    assert len(kept) == 4
    assert len(session.close()) == 4  # the session owned them, the warm-up's included
    kept.clear()


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


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"runs": 1}, ValueError, "runs must be a whole number of 2 or more, got 1"),
        ({"warmup": -1}, ValueError, "warmup must be a whole number of 0 or more, got -1"),
        ({"runs": True}, ValueError, "runs must be"),
    ],
)
def test_growth_arguments_are_checked(arguments, error, message) -> None:
    with pytest.raises(error, match=message):
        assert_no_growth(lambda: None, **arguments)
    with pytest.raises(TypeError, match="takes a callable, not int"):
        assert_no_growth(3)  # type: ignore[arg-type]


# ---------------------------------------------------------------- leaks since a checkpoint


def test_no_leaks_since_a_checkpoint_fails_with_the_plugins_report(eager_session) -> None:
    before = tf.Variable(1.0, name="before")  # older than the checkpoint: not reported
    checkpoint = eager_session.checkpoint()
    kept = tf.Variable(tf.zeros([8]), name="kept_weights")
    temporary = tf.ones([1000]) * 2.0
    del temporary
    with pytest.raises(LeakAssertionError) as failure:
        eager_session.assert_no_leaks(since=checkpoint)
    text = str(failure.value)
    assert text.splitlines()[0] == (
        f"The code run since checkpoint {checkpoint} leaked 1 TensorFlow object (32 B) "
        "that outlived its checkpoint scope (cleanup strategy in_background):"
    )
    assert "  1. variable: ResourceVariable 'kept_weights' float32[8] 32 B on CPU:0" in text
    assert "     held by frame of test_no_leaks_since_a_checkpoint_fails" in text
    assert "-> local kept" in text
    assert [record.kind for record in failure.value.records] == ["variable"]
    assert float(tf.reduce_sum(kept)) == 0.0  # reported, not destroyed
    del kept, before


def test_no_leaks_passes_for_freed_objects_cycles_and_allowed_ones(eager_session) -> None:
    checkpoint = eager_session.checkpoint()

    class Node:
        pass

    node = Node()
    node.self = node  # type: ignore[attr-defined]
    node.tensor = tf.ones([16]) * 2.0  # type: ignore[attr-defined]
    del node  # a cycle: collected before anything is counted
    cached = tf.Variable(3.0, name="allowed_cache")
    assert_no_leaks(since=checkpoint, allow="allowed_cache")
    eager_session.assert_no_leaks(checkpoint, allow=[r"'allowed_cache'"])
    with pytest.raises(LeakAssertionError, match="allowed_cache"):
        assert_no_leaks(eager_session, since=checkpoint)
    del cached


# ---------------------------------------------------------------- retracing


def test_max_traces_fails_naming_the_function_its_count_and_signatures() -> None:
    @tf.function
    def scale(x: Any) -> Any:
        return x * 2.0

    @assert_max_traces(1, where="the loop")
    def loop() -> None:
        for value in (1.0, 2.0, 3.0):
            scale(value)
        scale(tf.constant([1.0, 2.0]))

    with pytest.raises(RetracingError) as failure:
        loop()
    text = str(failure.value)
    line = scale.python_function.__code__.co_firstlineno
    assert text.splitlines() == [
        "the loop traced tf.functions more than max_traces=1 allows (1 time):",
        f"  test_max_traces_fails_naming_the_function_its_count_and_signatures.<locals>.scale "
        f"({HERE}:{line}) traced 4 times:",
        "    1. (x: Literal[1.0])",
        "    2. (x: Literal[2.0])",
        "    3. (x: Literal[3.0])",
        "    4. (x: TensorSpec(shape=(2,), dtype=tf.float32, name=None))",
        "    Python values are part of the signature (Literal[...]): pass tensors "
        "(tf.constant(x)), or give the tf.function an input_signature.",
    ]
    (function,) = failure.value.functions
    assert (function.traces, function.instances) == (4, 1)
    assert scale.experimental_get_tracing_count() == 4  # TensorFlow's own count agrees


def test_max_traces_passes_when_tensors_of_one_signature_reuse_the_trace() -> None:
    @tf.function
    def scale(x: Any) -> Any:
        return x * 2.0

    with assert_max_traces(1) as counter:
        for value in (1.0, 2.0, 3.0):
            scale(tf.constant(value))
    assert counter.total == 1
    assert [f.traces for f in counter.functions()] == [1]


def test_a_tf_function_made_per_call_is_counted_per_python_function() -> None:
    def double(x: Any) -> Any:
        return x * 2.0

    def wrap_each_call() -> None:
        with assert_max_traces(2):
            for _ in range(3):
                tf.function(double)(tf.constant(1.0))

    with pytest.raises(RetracingError) as failure:
        wrap_each_call()
    assert "double" in str(failure.value)
    assert "traced 3 times, by 3 tf.function objects:" in str(failure.value)
    assert "make it once and reuse it" in str(failure.value)


def test_a_function_that_creates_variables_traces_twice_and_the_report_says_why() -> None:
    made = []

    @tf.function
    def lazily_built(x: Any) -> Any:
        if not made:
            made.append(tf.Variable(2.0))
        return made[0] * x

    with TraceCounter() as counter:
        lazily_built(tf.constant(1.0))
        lazily_built(tf.constant(2.0))
    (function,) = counter.functions()
    assert function.traces == lazily_built.experimental_get_tracing_count() == 2
    assert function.signatures[0].endswith("(first call, created variables: traced again)")
    assert not function.signatures[1].endswith("traced again)")
    with pytest.raises(RetracingError, match="created variables: traced again"):
        counter.check(1)
    made.clear()


def test_the_decorator_form_counts_per_call_and_tf_data_functions_are_not_counted() -> None:
    scale = tf.function(lambda x: x * 2.0)

    @assert_max_traces(1)
    def steady() -> None:
        tf.data.Dataset.range(3).map(lambda x: x + 1).reduce(tf.constant(0, tf.int64), tf.add)
        scale(tf.constant(1.0))

    steady()
    steady()  # each call counts from zero

    @assert_max_traces(0)
    def traces() -> None:
        tf.function(lambda: tf.constant(1.0))()

    with pytest.raises(RetracingError, match=r"\.<locals>\.traces traced tf.functions more"):
        traces()


def test_trace_limits_are_checked() -> None:
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match="max_traces must be a whole number of 0 or more"):
            assert_max_traces(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------- memory


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("64 MiB", 64 * MIB),
        ("64MiB", 64 * MIB),
        ("1.5 GiB", 3 * 512 * MIB),
        ("2 gb", 2_000_000_000),
        ("10 KB", 10_000),
        ("10 KiB", 10_240),
        ("3 MB", 3_000_000),
        ("512 B", 512),
        ("100", 100),
        (4096, 4096),
    ],
)
def test_parse_size_reads_human_sizes(text, size) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["64 Mb/s", "lots", "", "-1 MiB", "64 TiB", -5, 1.5, None, True])
def test_a_bad_size_is_an_error_naming_the_units(bad) -> None:
    with pytest.raises(ValueError, match=r"B, KB, KiB, MB, MiB, GB, GiB|cannot be negative"):
        parse_size(bad)
    with pytest.raises(ValueError, match=r"B, KB, KiB, MB, MiB, GB, GiB|cannot be negative"):
        max_bytes(bad)


def test_over_the_byte_limit_fails_showing_the_largest_objects_at_the_peak() -> None:
    @max_bytes("3 MiB", where="the step")
    def step() -> None:
        activations = tf.zeros([1024, 1024])  # 4 MiB, made by an op
        del activations

    with pytest.raises(MemoryLimitError) as failure:
        step()
    text = str(failure.value)
    lines = text.splitlines()
    assert lines[0] == (
        "the step peaked at 4.0 MiB of tracked TensorFlow objects, over its max_bytes of "
        "3.0 MiB (3145728 B)."
    )
    assert lines[2].startswith(
        f"    1. tensor: EagerTensor float32[1024,1024] 4.0 MiB on CPU:0, made by Fill at {HERE}:"
    )
    assert lines[2].endswith("(freed since)")
    assert 4 * MIB <= failure.value.peak_bytes < 4 * MIB + 1024
    assert failure.value.limit == 3 * MIB


def test_the_peak_counts_what_is_alive_at_once_not_everything_ever_made() -> None:
    with max_bytes("3 MiB") as meter:
        for _ in range(8):
            chunk = tf.zeros([256, 1024])  # 1 MiB each; the previous one dies on rebinding
        del chunk
    assert MIB <= meter.peak_bytes <= 2 * MIB + 1024  # the new chunk, then the old one goes
    assert meter.current_bytes == 0


def test_constants_and_variables_count_though_no_op_makes_them() -> None:
    import numpy as np

    with ByteMeter() as meter:
        constant = tf.constant(np.zeros((512, 512), np.float32))  # 1 MiB, converted
        variable = tf.Variable(np.zeros((256, 512), np.float32))  # 0.5 MiB
    assert meter.peak_bytes >= MIB + MIB // 2
    assert meter.largest_at_peak() == []  # no limit: no snapshot was needed
    del constant, variable


def test_objects_made_before_the_meter_are_not_counted() -> None:
    big = tf.zeros([1024, 1024]) + 1.0
    with max_bytes("1 KiB") as meter:
        total = tf.reduce_sum(big)
    assert meter.peak_bytes < 1024  # the sum and its axes, not the 4 MiB made before
    del big, total


class FakeGpu:
    """``DeviceMemory`` for one GPU whose allocator the test drives."""

    def __init__(self) -> None:
        self.current = 100 * MIB
        self.peak = 900 * MIB  # an earlier test's peak, before any reset

    def devices(self) -> list[str]:
        return ["GPU:0"]

    def info(self, device: str) -> dict[str, int]:
        return {"current": self.current, "peak": self.peak}

    def reset(self, device: str) -> None:
        self.peak = self.current

    def allocate(self, nbytes: int) -> None:
        self.current += nbytes
        self.peak = max(self.peak, self.current)

    def free(self, nbytes: int) -> None:
        self.current -= nbytes


@pytest.fixture
def gpu(monkeypatch) -> FakeGpu:
    fake = FakeGpu()
    for name in ("devices", "info", "reset"):
        monkeypatch.setattr(DEVICE_MEMORY, name, getattr(fake, name))
    return fake


def test_a_gpu_peak_over_the_limit_fails_and_nested_meters_keep_their_peaks(gpu) -> None:
    inner = max_bytes("64 MiB")

    def burst() -> None:
        with inner:
            gpu.allocate(80 * MIB)
            gpu.free(80 * MIB)

    with ByteMeter() as outer:
        gpu.allocate(300 * MIB)
        gpu.free(300 * MIB)
        with pytest.raises(MemoryLimitError) as failure:
            burst()
    assert inner.meter.device_peaks == {"GPU:0": 80 * MIB}
    assert outer.device_peaks == {"GPU:0": 300 * MIB}  # the inner meter's reset lost nothing
    assert str(failure.value) == (
        "The block raised GPU:0's memory by 80.0 MiB at its peak, over its max_bytes of "
        "64.0 MiB (TensorFlow's allocator: tensors, temporaries, workspaces)."
    )
    with max_bytes("64 MiB") as calm:
        gpu.allocate(MIB)
    assert calm.device_peaks == {"GPU:0": MIB}


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


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args)


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


def test_a_failed_check_keeps_nothing_alive_once_the_test_drops_it(eager_session) -> None:
    # Explaining reads the test's locals; before Python 3.13 that leaves a snapshot of
    # them on the frame, which kept the leak alive after ``del`` until this was fixed.
    checkpoint = eager_session.checkpoint()
    kept = tf.ones([4]) * 3.0
    watch = weakref.ref(kept)
    with pytest.raises(LeakAssertionError, match="-> local kept"):
        eager_session.assert_no_leaks(since=checkpoint)
    del kept
    gc.collect()
    assert watch() is None
    eager_session.assert_no_leaks(since=checkpoint)
