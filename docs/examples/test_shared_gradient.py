"""A gradient returned for several sources at once: TensorFlow keeps it for good."""

import tensorflow as tf


# --8<-- [start:leak]
def test_known_shared_gradient():
    bias = tf.Variable(tf.zeros([128]))
    offset = tf.Variable(tf.zeros([128]))
    with tf.GradientTape() as tape:
        shifted = bias + offset  # the sum's gradient is each addend's: one tensor for both
    d_bias, d_offset = tape.gradient(shifted, [bias, offset])
    assert d_bias is d_offset


# --8<-- [end:leak]


# --8<-- [start:fix]
def test_fixed_gradient_per_source():
    bias = tf.Variable(tf.zeros([128]))
    offset = tf.Variable(tf.zeros([128]))
    with tf.GradientTape(persistent=True) as tape:
        shifted = bias + offset
    d_bias = tape.gradient(shifted, bias)  # one source a call: nothing shared, nothing kept
    d_offset = tape.gradient(shifted, offset)
    del tape
    assert d_bias.shape == d_offset.shape == (128,)


# --8<-- [end:fix]
