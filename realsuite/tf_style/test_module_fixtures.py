"""Module-scoped fixtures that own TensorFlow objects across tests.

Part of the real-suite gate (``./scripts/realsuite``). A factory that memoises Keras models, and
a background thread that holds a tensor: both belong to the module, not to the test that first
used them, so no test here leaks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

ModelFactory = Callable[[int], keras.Model]


@pytest.fixture(scope="module")
def model_factory() -> Iterator[ModelFactory]:
    """Builds a model per width on first request and hands the same one back afterwards."""
    cache: dict[int, keras.Model] = {}

    def make(units: int) -> keras.Model:
        if units not in cache:
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(units)])
            model.compile(optimizer="sgd", loss="mse")
            cache[units] = model
        return cache[units]

    yield make
    cache.clear()


@pytest.fixture(scope="module")
def background_worker() -> Iterator[dict[str, Any]]:
    """A thread that keeps a tensor for the whole module and reports what it reads from it."""
    held = tf.constant([1.0, 2.0, 3.0])
    state: dict[str, Any] = {"total": None, "reads": 0}
    ready = threading.Event()
    stop = threading.Event()

    def watch(tensor: tf.Tensor) -> None:
        while True:
            state["total"] = float(tensor.numpy().sum())
            state["reads"] += 1
            ready.set()
            if stop.wait(0.005):
                return

    thread = threading.Thread(target=watch, args=(held,), name="tensor-watcher", daemon=True)
    thread.start()
    ready.wait(10)
    yield state
    stop.set()
    thread.join(10)


def test_factory_builds_a_model(model_factory: ModelFactory) -> None:
    model = model_factory(3)
    assert model.output_shape == (None, 3)


def test_factory_memoises(model_factory: ModelFactory) -> None:
    assert model_factory(3) is model_factory(3)
    assert model_factory(2) is not model_factory(3)


def test_factory_model_predicts(model_factory: ModelFactory) -> None:
    predictions = model_factory(2).predict(np.ones((4, 4), dtype="float32"), verbose=0)
    assert predictions.shape == (4, 2)


def test_factory_model_trains(model_factory: ModelFactory) -> None:
    model = model_factory(2)
    x = np.ones((8, 4), dtype="float32")
    history = model.fit(x, np.zeros((8, 2), dtype="float32"), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("units", [1, 2, 3])
def test_factory_model_called_eagerly(model_factory: ModelFactory, units: int) -> None:
    output = model_factory(units)(tf.ones((2, 4)))
    assert tuple(output.shape) == (2, units)


def test_background_thread_reads_tensor(background_worker: dict[str, Any]) -> None:
    assert background_worker["total"] == 6.0
    assert background_worker["reads"] >= 1


def test_background_thread_keeps_running(background_worker: dict[str, Any]) -> None:
    before = background_worker["reads"]
    for _ in range(200):
        if background_worker["reads"] > before:
            break
        threading.Event().wait(0.01)
    assert background_worker["reads"] > before
    assert float(tf.reduce_sum(tf.ones((3,)))) == 3.0
