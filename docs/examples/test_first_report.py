"""The getting-started example: a debugging leftover keeps a tensor alive."""

import pytest
import tensorflow as tf

_SEEN = []


def scale(x):
    y = x * 2.0
    _SEEN.append(y)  # added while debugging, never removed
    return y


def test_leaks_debugging_leftover():
    assert float(tf.reduce_sum(scale(tf.ones((256, 256))))) == 2.0 * 256 * 256


@pytest.mark.cleanup(track_creation=True)
def test_leaks_with_creation_sites():
    assert float(tf.reduce_sum(scale(tf.ones((256, 256))))) == 2.0 * 256 * 256
