"""Keras's fit and the gradient registry."""

import keras
import numpy as np

# --8<-- [start:leak]
_MODELS = {}


def train(name):
    model = keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(name="sgd"), loss="mse")
    x = np.ones((32, 4), dtype="float32")
    model.fit(x, x.sum(axis=1, keepdims=True), epochs=1, verbose=0)
    return model


def test_leaks_kept_model():
    _MODELS["latest"] = train("latest")


# --8<-- [end:leak]


# --8<-- [start:fix]
def test_fixed_model_dropped():
    model = train("local")
    assert model.count_params() == 5


# --8<-- [end:fix]
