"""Closures captured by tf.function: a kept function keeps the tensors it closed over."""

import tensorflow as tf

# --8<-- [start:leak]
_STEPS = {}


def make_scaler(scale):
    factor = tf.fill((256, 256), scale)

    @tf.function
    def scaled(x):
        return x * factor  # factor is captured: the function's graph holds it

    return scaled


def test_leaks_function_in_registry():
    _STEPS["double"] = make_scaler(2.0)
    assert float(tf.reduce_sum(_STEPS["double"](tf.ones((256, 256))))) == 2.0 * 256 * 256


# --8<-- [end:leak]


# --8<-- [start:fix]
@tf.function
def scaled(x, factor):
    return x * factor  # the tensor is an argument: nothing is captured


def test_fixed_tensor_as_argument():
    factor = tf.fill((256, 256), 2.0)
    assert float(tf.reduce_sum(scaled(tf.ones((256, 256)), factor))) == 2.0 * 256 * 256


# --8<-- [end:fix]
