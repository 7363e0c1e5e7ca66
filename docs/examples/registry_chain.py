"""What TensorFlow's gradient registry keeps after Keras's fit, without an eager session.

Run by ``docs/generate.py`` in a fresh interpreter, with no session and no plugin: it trains a
model, drops it, and prints who still holds the resource handles of its variables.
"""

import gc
import weakref

import keras
import numpy as np
import tensorflow as tf

from pytest_eagersession.reports.explain import explain


def train_and_drop():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((8, 4), "float32"), np.ones((8, 2), "float32"), epochs=1, verbose=0)
    return weakref.ref(model), weakref.ref(model.layers[0].kernel.value.handle)


def main():
    model, handle = train_and_drop()
    gc.collect()
    print(f"model alive: {model() is not None}")
    print(f"its kernel's resource handle alive: {handle() is not None}")
    if handle() is not None:
        assert isinstance(handle(), tf.Tensor)
        print(explain(handle(), budget_s=30.0).text())


if __name__ == "__main__":
    main()
