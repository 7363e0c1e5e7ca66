"""Input pipelines: a parked iterator leaks, a generator-backed dataset dropped is clean."""

import pytest
import tensorflow as tf

_PARKED = {}


def test_leaks_parked_iterator():
    dataset = tf.data.Dataset.range(100).batch(10)
    iterator = iter(dataset)
    next(iterator)
    _PARKED["train"] = iterator  # resumed "later", never released


def test_clean_from_generator():
    def rows():
        yield from range(5)

    dataset = tf.data.Dataset.from_generator(rows, output_signature=tf.TensorSpec((), tf.int64))
    assert [int(x) for x in dataset] == [0, 1, 2, 3, 4]


@pytest.fixture(scope="module")
def vocabulary():
    return tf.constant(["a", "b", "c"])


def test_clean_uses_module_fixture(vocabulary):
    assert int(tf.size(vocabulary)) == 3


@pytest.mark.cleanup("on_safe_points")
def test_clean_under_safe_points(eager_session):
    total = tf.zeros(())
    for step in range(10):
        total += tf.cast(step, tf.float32)
    assert float(total) == 45.0
    assert eager_session.resource_cleanup_strategy.name == "ON_SAFE_POINTS"
