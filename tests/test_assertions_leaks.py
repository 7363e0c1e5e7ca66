"""assert_no_leaks: what the code since a checkpoint left alive, with the plugin's report."""

from __future__ import annotations

import gc
import weakref

import pytest

from pytest_eagersession.assertions import LeakAssertionError, assert_no_leaks

tf = pytest.importorskip("tensorflow")


def test_no_leaks_since_a_checkpoint_fails_with_the_plugins_report(eager_session) -> None:
    before = tf.Variable(1.0, name="before")  # older than the checkpoint: not reported
    checkpoint = eager_session.checkpoint()
    kept = tf.Variable(tf.zeros([8]), name="kept_weights")
    temporary = tf.ones([1000]) * 2.0
    del temporary
    with pytest.raises(LeakAssertionError) as failure:
        assert_no_leaks(eager_session, since=checkpoint)
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
    assert_no_leaks(eager_session, since=checkpoint, allow=[r"'allowed_cache'"])
    with pytest.raises(LeakAssertionError, match="allowed_cache"):
        assert_no_leaks(eager_session, since=checkpoint)
    del cached


def test_a_failed_check_keeps_nothing_alive_once_the_test_drops_it(eager_session) -> None:
    # Explaining reads the test's locals; before Python 3.13 that leaves a snapshot of
    # them on the frame, which kept the leak alive after ``del`` until this was fixed.
    checkpoint = eager_session.checkpoint()
    kept = tf.ones([4]) * 3.0
    watch = weakref.ref(kept)
    with pytest.raises(LeakAssertionError, match="-> local kept"):
        assert_no_leaks(eager_session, since=checkpoint)
    del kept
    gc.collect()
    assert watch() is None
    assert_no_leaks(eager_session, since=checkpoint)
