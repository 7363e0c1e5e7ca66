"""A test whose body holds more memory in the second run than in the first.

``docs/generate.py`` copies this file into an empty folder as ``test_growing.py`` and runs it
twice with ``--eagersession-fail-on-increase``: first with ``BATCH=1024``, then with
``BATCH=4096``, as if a change had quadrupled the batch the test builds.
"""

import os

import tensorflow as tf


def test_embedding_lookup():
    batch = int(os.environ["BATCH"])
    table = tf.ones([1000, 256])
    ids = tf.zeros([batch], tf.int32)
    rows = tf.gather(table, ids)  # batch x 256 float32
    assert rows.shape == (batch, 256)


def test_steady():
    ones = tf.ones([256, 256])
    assert float(tf.reduce_sum(ones)) == 256 * 256
