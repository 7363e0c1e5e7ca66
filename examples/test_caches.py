"""Caching patterns: an lru_cache returning tensors and a class attribute holding a variable."""

import functools

import tensorflow as tf


@functools.cache
def embedding_table(size):
    return tf.random.uniform((size, 64))


class Registry:
    weights = None


def test_leaks_tensor_through_lru_cache():
    table = embedding_table(1000)
    assert table.shape == (1000, 64)


def test_leaks_variable_on_class_attribute():
    Registry.weights = tf.Variable(tf.zeros((128, 128)), name="registry_weights")
    assert Registry.weights.shape == (128, 128)


def test_clean_local_cache():
    cache = {}
    for size in (2, 3):
        cache[size] = tf.ones((size,))
    assert sum(int(tf.size(v)) for v in cache.values()) == 5
