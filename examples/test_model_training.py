"""Training-style tests: one leaks its history into a module-level list, one is clean."""

import keras
import numpy as np
import tensorflow as tf

_HISTORY = []


def build_model():
    return keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(2)])


def test_clean_model_built_and_dropped():
    model = build_model()
    out = model(tf.ones((3, 4)))
    assert out.shape == (3, 2)


def test_leaks_losses_into_module_history():
    x = tf.random.normal((16, 4))
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    w = tf.Variable(tf.zeros((4, 1)), name="w")
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((x @ w - y) ** 2)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        _HISTORY.append(loss)  # keeps every loss tensor alive after the test
    assert float(_HISTORY[-1]) < float(_HISTORY[0])


def test_clean_numpy_results_only():
    x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert tf.reduce_sum(x).numpy() == 15.0
