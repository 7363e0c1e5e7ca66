"""functools.lru_cache: the cache keeps the tensors it returned, for the life of the process."""

import functools

import pytest
import tensorflow as tf


# --8<-- [start:leak]
@functools.cache  # lru_cache(maxsize=None): keeps every result
def positional_encoding(length, depth):
    positions = tf.range(length, dtype=tf.float32)[:, None]
    return tf.sin(positions / tf.pow(10000.0, tf.range(depth, dtype=tf.float32) / depth))


def test_leaks_lru_cache():
    encoding = positional_encoding(128, 64)
    assert encoding.shape == (128, 64)


# --8<-- [end:leak]


# --8<-- [start:fix]
@pytest.fixture
def fresh_encodings():
    yield
    positional_encoding.cache_clear()  # drop what this test put in the cache


def test_fixed_lru_cache(fresh_encodings):
    encoding = positional_encoding(128, 64)
    assert encoding.shape == (128, 64)


# --8<-- [end:fix]
