"""assert_no_growth: objects or registered functions a function leaves behind run after run."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from pytest_eagersession import EagerSession
from pytest_eagersession.assertions import GrowthError, assert_no_growth

tf = pytest.importorskip("tensorflow")


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
    # exactly one iterator per run, the last one's included, whatever collections ran between
    iterators = [[r.kind for r in run.records].count("iterator") for run in failure.value.runs]
    assert iterators == [1] * len(iterators)


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


def test_growth_in_a_session_of_ones_own() -> None:
    kept = []
    session = EagerSession.create()
    with pytest.raises(GrowthError):
        assert_no_growth(lambda: kept.append(tf.ones([2]) * 2.0), runs=2, session=session)
    assert not session.active  # activated for the check only
    assert len(kept) == 4
    assert len(session.close()) == 4  # the session owned them, the warm-up's included
    kept.clear()


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
