"""The assertions page's examples: growth, leaks since a checkpoint, memory, all at once."""

import unittest

import tensorflow as tf

from pytest_eagersession.assertions import (
    assert_no_growth,
    assert_no_leaks,
    eager_checks,
    max_bytes,
)

# --8<-- [start:growth]
_HISTORY = []


def train_step():
    loss = tf.reduce_mean(tf.random.normal((64, 64)))
    _HISTORY.append(loss)  # one more tensor per call
    return float(loss)


def test_fails_growth():
    assert_no_growth(train_step)


# --8<-- [end:growth]


# --8<-- [start:growth_fixed]
def test_fixed_growth():
    def train_step_keeping_floats():
        _HISTORY.append(float(tf.reduce_mean(tf.random.normal((64, 64)))))

    assert_no_growth(train_step_keeping_floats)


# --8<-- [end:growth_fixed]


# --8<-- [start:checkpoint]
_SNAPSHOTS = []


def test_fails_leak_since_checkpoint(eager_session):
    warm = tf.ones((8,))  # made before the checkpoint: not checked
    mark = eager_session.checkpoint()
    _SNAPSHOTS.append(tf.zeros((32, 32)) + warm[0])
    assert_no_leaks(eager_session, since=mark)


# --8<-- [end:checkpoint]


# --8<-- [start:memory]
def test_fails_memory_limit():
    with max_bytes("1 MiB"):
        big = tf.zeros((1024, 1024))  # 4 MiB
        assert float(tf.reduce_sum(big)) == 0.0


# --8<-- [end:memory]


# --8<-- [start:unittest]
class TrainingTest(unittest.TestCase):
    @eager_checks(max_traces=1, max_bytes="8 MiB")
    def test_step_is_traced_once(self):
        step = tf.function(lambda x: x * 2.0)
        for _ in range(3):
            step(tf.ones((4,)))


# --8<-- [end:unittest]
