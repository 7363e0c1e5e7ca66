"""Retracing: a tf.function called with new Python values traces a new graph each time."""

import tensorflow as tf

from pytest_eagersession.assertions import assert_max_traces


# --8<-- [start:leak]
@tf.function
def normalize(x, scale):
    return x / scale


def test_fails_retracing():
    with assert_max_traces(1):
        for scale in (1.0, 2.0, 4.0):
            normalize(tf.ones((8,)), scale)  # a Python float: one trace per value


# --8<-- [end:leak]


# --8<-- [start:fix]
def test_fixed_tensor_argument():
    with assert_max_traces(1):
        for scale in (1.0, 2.0, 4.0):
            normalize(tf.ones((8,)), tf.constant(scale))  # a tensor: one trace for all


# --8<-- [end:fix]
