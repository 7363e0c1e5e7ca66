"""Who holds a leak: the chain's search and its text."""

from __future__ import annotations

import sys
import types

import pytest
import tensorflow as tf
from tensorflow.python.framework import ops

from pytest_eagersession.explain import NO_HOLDER, explain, render_chain


@pytest.fixture
def scratch_module():
    module = types.ModuleType("scratch_holder")
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_a_module_global_is_the_root(scratch_module) -> None:
    scratch_module.CACHE = [tf.ones((2,))]
    explanation = explain(scratch_module.CACHE[0], budget_s=10)
    assert explanation.text() == "held by scratch_holder.CACHE (list) -> [0] -> EagerTensor"
    assert not explanation.internal


def test_tensorflow_module_state_is_called_internal() -> None:
    ops._eagersession_test_hold = {"kept": tf.ones((2,))}
    try:
        explanation = explain(ops._eagersession_test_hold["kept"], budget_s=10)
    finally:
        del ops._eagersession_test_hold
    assert explanation.internal
    assert explanation.text() == (
        "held by TensorFlow internals: tensorflow.python.framework.ops._eagersession_test_hold "
        "(dict) -> ['kept'] -> EagerTensor"
    )


def test_an_object_only_a_cycle_keeps_has_no_python_holder() -> None:
    orphan = tf.ones((2,))
    cycle: list[object] = [orphan]
    cycle.append(cycle)
    del cycle
    explanation = explain(orphan, budget_s=10)
    assert explanation.chain is None
    assert explanation.text() == NO_HOLDER


def test_the_search_stops_at_its_budget(scratch_module) -> None:
    holder: object = tf.ones((2,))
    leaf = holder
    for level in range(12):
        holder = {f"level{level}": [holder]}
    scratch_module.NESTED = holder
    explanation = explain(leaf, max_depth=40, budget_s=0.0)
    assert explanation.timed_out
    assert explanation.text().startswith("no holder found within 0.0 s (the search stopped there")


class Holder:
    pass


class Payload:
    pass


def test_an_attribute_reads_the_same_with_or_without_the_instance_dict() -> None:
    # Python 3.11+ keeps an instance's attributes inline until something asks for __dict__, and
    # gc.get_referents then yields the value directly: the chain text must not show it.
    holder, payload = Holder(), Payload()
    holder.payload = payload
    outer = [holder]
    direct = render_chain([outer, holder, payload])
    through_dict = render_chain([outer, holder, holder.__dict__, payload])
    assert direct == through_dict == "list -> [0] (Holder).payload -> Payload"
    payload.items = [1]
    deeper = render_chain([outer, holder, payload, payload.items])
    assert deeper == render_chain([outer, holder, payload, payload.__dict__, payload.items])
    assert deeper == "list -> [0] (Holder).payload (Payload).items -> list"


def test_a_closure_link_is_named_by_its_free_variable() -> None:
    def make() -> types.FunctionType:
        captured = Payload()

        def reader() -> Payload:
            return captured

        return reader  # type: ignore[return-value]

    reader = make()
    assert reader.__closure__ is not None
    cell = reader.__closure__[0]
    text = render_chain([[reader], reader, reader.__closure__, cell, cell.cell_contents])
    assert text == "list -> [0] (function) -> closure captured -> Payload"


def test_keras_state_that_user_code_filled_says_so() -> None:
    keras = pytest.importorskip("keras")

    def define() -> str:
        @keras.saving.register_keras_serializable(package="eagersession_test")
        class Adder(keras.layers.Layer):
            @tf.function
            def concat(self, x: tf.Tensor) -> tf.Tensor:
                return x

        return "eagersession_test>Adder"

    key = define()
    registry = keras.saving.get_custom_objects()
    try:
        explanation = explain(registry[key].concat, budget_s=10)
    finally:  # keras.saving has no unregister: its two registries, by hand
        from keras.src.saving import object_registration

        object_registration.GLOBAL_CUSTOM_NAMES.pop(registry.pop(key))
    assert explanation.internal  # TensorFlow's state: never cut off under a test
    assert explanation.text() == (
        "held by keras.src.saving.object_registration.GLOBAL_CUSTOM_OBJECTS (dict) -> "
        "['eagersession_test>Adder'].concat -> Function (registered by user code with "
        "keras.saving.register_keras_serializable: Keras keeps it for the rest of the run)"
    )
