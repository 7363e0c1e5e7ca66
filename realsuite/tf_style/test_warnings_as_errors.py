"""A module that turns every warning into an error, as strict suites do.

Part of the real-suite gate (``./scripts/realsuite``): the plugin must not warn while it runs
a clean test, here or in its fixtures' setup and teardown.
"""

from __future__ import annotations

import pytest
import tensorflow as tf

pytestmark = pytest.mark.filterwarnings("error")


def test_clean_eager_code_raises_no_warning() -> None:
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    v = tf.Variable(tf.zeros((2, 2)))
    v.assign(tf.matmul(x, x))
    assert float(tf.reduce_sum(v)) == 54.0


def test_clean_function_raises_no_warning() -> None:
    @tf.function
    def scale(x: tf.Tensor) -> tf.Tensor:
        return x * 3.0

    assert float(scale(tf.constant(2.0))) == 6.0
