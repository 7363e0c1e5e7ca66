"""TensorFlow tests written the way TensorFlow's users write them: ``tf.test.TestCase``.

Part of the real-suite gate (``./scripts/realsuite``). Every test here is clean: what it makes
dies with it. They pass without the plugin, so the plugin must pass them too; one it fails is a
test the plugin breaks.
"""

from __future__ import annotations

import os
import unittest
from collections.abc import Iterator
from unittest import mock

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from tensorflow.python.framework import test_util

v1 = tf.compat.v1


def _small_model(units: int = 2) -> keras.Model:
    return keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(units)]
    )


def _regression_data(rows: int = 32) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 4)).astype("float32")
    y = (x @ np.ones((4, 2), dtype="float32")).astype("float32")
    return x, y


class EagerBasicsTest(tf.test.TestCase):
    """setUp and tearDown, self.evaluate, assertAllClose: the everyday eager test."""

    def setUp(self) -> None:
        super().setUp()
        self.matrix = tf.constant([[1.0, 2.0], [3.0, 4.0]])
        self.variable = tf.Variable(tf.zeros((2, 2)), name="accumulator")

    def tearDown(self) -> None:
        del self.matrix
        del self.variable
        super().tearDown()

    def test_matmul(self) -> None:
        product = tf.matmul(self.matrix, self.matrix)
        self.assertAllClose(self.evaluate(product), [[7.0, 10.0], [15.0, 22.0]])

    def test_variable_assign_add(self) -> None:
        self.variable.assign_add(self.matrix)
        self.variable.assign_add(self.matrix)
        self.assertAllEqual(self.evaluate(self.variable), [[2.0, 4.0], [6.0, 8.0]])

    def test_tf_function(self) -> None:
        @tf.function
        def affine(x: tf.Tensor) -> tf.Tensor:
            return tf.matmul(x, self.matrix) + 1.0

        self.assertAllClose(affine(tf.eye(2)), [[2.0, 3.0], [4.0, 5.0]])
        self.assertAllClose(affine(tf.ones((2, 2))), [[5.0, 7.0], [5.0, 7.0]])

    def test_gradient_tape(self) -> None:
        x = tf.Variable(3.0)
        with tf.GradientTape() as tape:
            y = x * x + 2.0 * x
        self.assertAllClose(tape.gradient(y, x), 8.0)

    def test_raises_invalid_argument(self) -> None:
        with self.assertRaises(tf.errors.InvalidArgumentError):
            tf.reshape(tf.range(6), (4, 2))

    def test_strings_and_ragged(self) -> None:
        words = tf.strings.split(tf.constant(["a b c", "d e"]))
        self.assertAllEqual(words.row_lengths(), [3, 2])
        self.assertAllEqual(tf.strings.length(words.flat_values), [1, 1, 1, 1, 1])

    def test_temp_dir_checkpoint(self) -> None:
        checkpoint = tf.train.Checkpoint(v=self.variable)
        path = checkpoint.write(os.path.join(self.get_temp_dir(), "ckpt"))
        self.variable.assign(tf.ones((2, 2)))
        checkpoint.read(path).assert_consumed()
        self.assertAllEqual(self.evaluate(self.variable), tf.zeros((2, 2)))


class GraphModeTest(tf.test.TestCase):
    """TF1-style graph code: self.session(), self.cached_session(), run_deprecated_v1."""

    def test_session_with_placeholder(self) -> None:
        with tf.Graph().as_default() as graph:
            x = v1.placeholder(tf.float32, shape=[3])
            y = x * 2.0 + 1.0
            with self.session(graph=graph) as sess:
                result = sess.run(y, feed_dict={x: [1.0, 2.0, 3.0]})
        self.assertAllClose(result, [3.0, 5.0, 7.0])

    def test_cached_session_variables(self) -> None:
        with tf.Graph().as_default():
            counter = v1.Variable(0, name="counter")
            increment = v1.assign_add(counter, 1)
            with self.cached_session() as sess:
                sess.run(v1.global_variables_initializer())
                for _ in range(3):
                    sess.run(increment)
                self.assertEqual(self.evaluate(counter), 3)
            # the cached session is the same object within a test
            with self.cached_session() as again:
                self.assertIs(again, sess)

    @test_util.run_deprecated_v1
    def test_run_deprecated_v1(self) -> None:
        self.assertFalse(tf.executing_eagerly())
        a = tf.constant([1.0, 2.0])
        b = v1.get_variable("b", initializer=tf.constant([10.0, 20.0]))
        total = a + b
        self.evaluate(v1.global_variables_initializer())
        self.assertAllClose(self.evaluate(total), [11.0, 22.0])

    @test_util.run_deprecated_v1
    def test_run_deprecated_v1_while_loop(self) -> None:
        i = tf.constant(0)
        result = tf.while_loop(lambda i: i < 10, lambda i: i + 1, [i])
        self.assertAllEqual(self.evaluate(result), [10])

    def test_reset_default_graph(self) -> None:
        v1.reset_default_graph()
        graph = v1.get_default_graph()
        with graph.as_default():
            tf.constant(1.0, name="first")
        v1.reset_default_graph()
        self.assertIsNot(v1.get_default_graph(), graph)
        self.assertEqual(v1.get_default_graph().get_operations(), [])

    def test_graph_collections(self) -> None:
        with tf.Graph().as_default() as graph:
            v1.add_to_collection("losses", tf.constant(1.5))
            v1.add_to_collection("losses", tf.constant(2.5))
            total = tf.add_n(v1.get_collection("losses"))
            with self.session(graph=graph):
                self.assertAllClose(self.evaluate(total), 4.0)

    def test_v1_train_loop(self) -> None:
        with tf.Graph().as_default() as graph:
            w = v1.get_variable("w", initializer=tf.constant(0.0))
            loss = tf.square(w - 3.0)
            train = v1.train.GradientDescentOptimizer(0.25).minimize(loss)
            with self.session(graph=graph) as sess:
                sess.run(v1.global_variables_initializer())
                for _ in range(20):
                    sess.run(train)
                self.assertAllClose(sess.run(w), 3.0, atol=1e-3)


class BothModesTest(tf.test.TestCase):
    """run_in_graph_and_eager_modes: each test body runs twice, in a graph and eagerly."""

    @test_util.run_in_graph_and_eager_modes
    def test_reduce_sum(self) -> None:
        x = tf.constant([[1, 2], [3, 4]])
        self.assertEqual(self.evaluate(tf.reduce_sum(x)), 10)

    @test_util.run_in_graph_and_eager_modes
    def test_variable_initialization(self) -> None:
        v = tf.Variable([1.0, 2.0])
        self.evaluate(v.initializer)
        self.evaluate(v.assign_add([1.0, 1.0]))
        self.assertAllClose(self.evaluate(v), [2.0, 3.0])

    @test_util.run_in_graph_and_eager_modes
    def test_cond(self) -> None:
        x = tf.constant(5)
        y = tf.cond(x > 3, lambda: x * 2, lambda: x)
        self.assertEqual(self.evaluate(y), 10)


class ParameterizedTest(tf.test.TestCase, parameterized.TestCase):
    """absl's parameterized tests inside tf.test.TestCase."""

    @parameterized.named_parameters(
        ("float32", tf.float32),
        ("float64", tf.float64),
        ("int32", tf.int32),
    )
    def test_cast_roundtrip(self, dtype: tf.DType) -> None:
        x = tf.cast(tf.range(5), dtype)
        self.assertEqual(x.dtype, dtype)
        self.assertAllEqual(tf.cast(x, tf.int64), [0, 1, 2, 3, 4])

    @parameterized.parameters((1, 1), (2, 4), (3, 9))
    def test_square(self, value: int, expected: int) -> None:
        self.assertEqual(int(tf.square(tf.constant(value))), expected)

    @parameterized.named_parameters(
        {"testcase_name": "relu", "activation": "relu", "expected": [0.0, 2.0]},
        {"testcase_name": "linear", "activation": None, "expected": [-1.0, 2.0]},
    )
    def test_dense_activation(self, activation: str | None, expected: list[float]) -> None:
        layer = keras.layers.Dense(
            2, activation=activation, use_bias=False, kernel_initializer="ones"
        )
        layer.build((None, 2))
        layer.kernel.assign([[1.0, 0.0], [0.0, 1.0]])
        self.assertAllClose(layer(tf.constant([[-1.0, 2.0]]))[0], expected)


class KerasModelTest(tf.test.TestCase):
    """Keras models fit and predict inside tf.test.TestCase, with clear_session in setUp."""

    def setUp(self) -> None:
        super().setUp()
        keras.backend.clear_session()
        keras.utils.set_random_seed(1)

    def test_fit_reduces_loss(self) -> None:
        x, y = _regression_data()
        model = _small_model()
        model.compile(optimizer="adam", loss="mse")
        history = model.fit(x, y, epochs=3, batch_size=8, verbose=0)
        self.assertLess(history.history["loss"][-1], history.history["loss"][0])

    def test_predict_shape(self) -> None:
        model = _small_model(units=3)
        predictions = model.predict(np.zeros((5, 4), dtype="float32"), verbose=0)
        self.assertEqual(predictions.shape, (5, 3))

    def test_fit_on_dataset_and_evaluate(self) -> None:
        x, y = _regression_data()
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
        model = _small_model()
        model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
        model.fit(dataset, epochs=2, verbose=0)
        loss, mae = model.evaluate(dataset, verbose=0)
        self.assertGreaterEqual(loss, 0.0)
        self.assertGreaterEqual(mae, 0.0)

    def test_train_on_batch_and_weights(self) -> None:
        x, y = _regression_data(8)
        model = _small_model()
        model.compile(optimizer="sgd", loss="mse")
        before = [w.copy() for w in model.get_weights()]
        model.train_on_batch(x, y)
        after = model.get_weights()
        self.assertTrue(any(not np.allclose(b, a) for b, a in zip(before, after, strict=True)))

    def test_save_and_load(self) -> None:
        model = _small_model()
        path = os.path.join(self.get_temp_dir(), "model.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        x = np.ones((2, 4), dtype="float32")
        self.assertAllClose(loaded.predict(x, verbose=0), model.predict(x, verbose=0))

    def test_custom_training_step(self) -> None:
        model = _small_model()
        optimizer = keras.optimizers.SGD(0.1)
        x, y = _regression_data(8)

        @tf.function
        def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        first = float(step(x, y))
        for _ in range(5):
            last = float(step(x, y))
        self.assertLess(last, first)


class RunFunctionsEagerlyTest(tf.test.TestCase):
    """tf.config.run_functions_eagerly switched on in setUp, restored in tearDown."""

    def setUp(self) -> None:
        super().setUp()
        self._was_eager = tf.config.functions_run_eagerly()
        tf.config.run_functions_eagerly(True)

    def tearDown(self) -> None:
        tf.config.run_functions_eagerly(self._was_eager)
        super().tearDown()

    def test_function_body_runs_eagerly(self) -> None:
        seen = []

        @tf.function
        def double(x: tf.Tensor) -> tf.Tensor:
            seen.append(tf.executing_eagerly())
            return x * 2

        self.assertAllEqual(double(tf.constant([1, 2])), [2, 4])
        self.assertEqual(seen, [True])

    def test_numpy_inside_function(self) -> None:
        @tf.function
        def total(x: tf.Tensor) -> float:
            return float(x.numpy().sum())

        self.assertEqual(total(tf.ones((3,))), 3.0)

    def test_switch_off_inside_test(self) -> None:
        tf.config.run_functions_eagerly(False)
        self.assertFalse(tf.config.functions_run_eagerly())

        @tf.function
        def square(x: tf.Tensor) -> tf.Tensor:
            return x * x

        self.assertEqual(int(square(tf.constant(4))), 16)


class MockTest(tf.test.TestCase):
    """unittest.mock around Keras and TensorFlow objects."""

    def test_magicmock_callback_in_fit(self) -> None:
        keras.backend.clear_session()
        callback = mock.MagicMock(spec=keras.callbacks.Callback)
        x, y = _regression_data(16)
        model = _small_model()
        model.compile(optimizer="sgd", loss="mse")
        model.fit(x, y, epochs=2, batch_size=8, verbose=0, callbacks=[callback])
        self.assertEqual(callback.on_epoch_end.call_count, 2)
        self.assertEqual(callback.on_train_batch_end.call_count, 4)

    def test_patch_object_on_keras_layer(self) -> None:
        layer = keras.layers.Dense(2)
        with mock.patch.object(keras.layers.Dense, "compute_output_shape", autospec=True) as m:
            m.return_value = (None, 2)
            self.assertEqual(layer.compute_output_shape((None, 4)), (None, 2))
            m.assert_called_once()

    def test_patch_object_on_tf_module(self) -> None:
        with mock.patch.object(tf.io.gfile, "exists", return_value=True) as exists:
            self.assertTrue(tf.io.gfile.exists("/no/such/path"))
            exists.assert_called_once_with("/no/such/path")
        self.assertFalse(tf.io.gfile.exists("/no/such/path"))

    def test_mock_wraps_tf_function(self) -> None:
        spy = mock.MagicMock(wraps=tf.math.reduce_sum)
        self.assertEqual(int(spy(tf.constant([1, 2, 3]))), 6)
        spy.assert_called_once()
        spy.reset_mock()


class DataAndRandomTest(tf.test.TestCase):
    """tf.data pipelines run to the end, and tf.random.Generator."""

    def test_from_generator_to_the_end(self) -> None:
        def rows() -> Iterator[tuple[int, list[float]]]:
            for index in range(6):
                yield index, [float(index)] * 3

        dataset = tf.data.Dataset.from_generator(
            rows,
            output_signature=(
                tf.TensorSpec(shape=(), dtype=tf.int32),
                tf.TensorSpec(shape=(3,), dtype=tf.float32),
            ),
        )
        seen = [int(index) for index, _ in dataset]
        self.assertEqual(seen, [0, 1, 2, 3, 4, 5])

    def test_from_generator_batched_map(self) -> None:
        def numbers() -> Iterator[int]:
            yield from range(10)

        dataset = (
            tf.data.Dataset.from_generator(numbers, output_signature=tf.TensorSpec((), tf.int64))
            .map(lambda x: x * 2)
            .batch(4)
        )
        batches = [batch.numpy().tolist() for batch in dataset]
        self.assertEqual(batches, [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18]])

    def test_dataset_pipeline_shuffle_prefetch(self) -> None:
        dataset = tf.data.Dataset.range(20).shuffle(20, seed=3).batch(5).prefetch(2)
        values = sorted(int(v) for batch in dataset for v in batch)
        self.assertEqual(values, list(range(20)))

    def test_iterator_get_next_until_end(self) -> None:
        iterator = iter(tf.data.Dataset.range(3))
        self.assertEqual([int(next(iterator)) for _ in range(3)], [0, 1, 2])
        with self.assertRaises(StopIteration):
            next(iterator)

    def test_random_generator_from_seed(self) -> None:
        first = tf.random.Generator.from_seed(1234)
        second = tf.random.Generator.from_seed(1234)
        self.assertAllEqual(first.normal((3,)), second.normal((3,)))

    def test_random_generator_split(self) -> None:
        generator = tf.random.Generator.from_seed(7)
        children = generator.split(2)
        a, b = (child.uniform((4,)) for child in children)
        self.assertNotAllClose(a, b)

    def test_stateless_random(self) -> None:
        a = tf.random.stateless_normal((2, 2), seed=[1, 2])
        b = tf.random.stateless_normal((2, 2), seed=[1, 2])
        self.assertAllEqual(a, b)


class TensorFlowLeakChecksTest(tf.test.TestCase):
    """TensorFlow's own leak checks, on clean code."""

    @test_util.assert_no_new_tensors
    def test_no_new_tensors(self) -> None:
        x = tf.constant([1.0, 2.0, 3.0])
        y = tf.reduce_sum(x * x)
        self.assertEqual(float(y), 14.0)

    @test_util.assert_no_garbage_created
    def test_no_garbage_created(self) -> None:
        x = tf.ones((4, 4))
        self.assertEqual(float(tf.reduce_sum(tf.matmul(x, x))), 64.0)

    @test_util.assert_no_new_tensors
    @test_util.assert_no_garbage_created
    def test_both_checks_on_a_variable(self) -> None:
        v = tf.Variable(1.0)
        v.assign_add(2.0)
        self.assertEqual(float(v), 3.0)


if __name__ == "__main__":
    unittest.main()
