"""Who holds a leak: the chain's search and its text."""

from __future__ import annotations

import re
import sys
import threading
import types
import weakref
from typing import ClassVar

import pytest
import tensorflow as tf
from tensorflow.python.framework import ops

from pytest_eagersession.reports.explain import (
    DEFAULT_BUDGET_S,
    NO_HOLDER,
    explain,
    explain_all,
    render_chain,
)


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
    explanation = explain(leaf, budget_s=0.0)
    assert explanation.timed_out
    assert re.fullmatch(
        r"no holder found within [0-9.]+ s "
        r"\(the search stopped there; a larger budget_s searches longer\)",
        explanation.text(),
    )


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


class HiddenDict:
    """Keeps its attributes in an instance dict it does not show as ``__dict__`` (as tf.Graph)."""

    def __getattribute__(self, name: str) -> object:
        if name == "__dict__":
            raise AttributeError(name)
        return object.__getattribute__(self, name)


def test_an_attribute_reads_as_one_even_where_the_class_hides_its_dict() -> None:
    holder, payload = HiddenDict(), Payload()
    holder.payload = payload  # type: ignore[attr-defined]
    instance_dict = object.__getattribute__(holder, "__dict__")  # what a walk meets on 3.10
    chain = render_chain([[holder], holder, instance_dict, payload])
    assert chain == "list -> [0] (HiddenDict).payload -> Payload"


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


def test_an_exception_kept_in_a_module_names_the_global_not_the_frame(scratch_module) -> None:
    def load_batch() -> None:
        batch = tf.ones((3,))
        raise ValueError(f"bad batch of {batch.shape[0]}")

    try:
        load_batch()
    except ValueError as error:
        scratch_module.LAST = {"error": error}
    frame = scratch_module.LAST["error"].__traceback__.tb_next.tb_frame
    batch = frame.f_locals["batch"]
    text = explain(batch).text()
    del frame, batch
    assert text.startswith(
        "held by scratch_holder.LAST (dict) -> ['error'] (ValueError).__traceback__ -> "
        "frame of load_batch ("
    )
    assert text.endswith(") -> local batch -> EagerTensor")


def test_a_live_threads_local_is_a_root() -> None:
    release = threading.Event()
    started = threading.Event()

    def worker(inbox: list[tf.Tensor]) -> None:
        batch = inbox.pop()  # the thread's arguments no longer hold it: only this local does
        started.set()
        release.wait(10)
        del batch

    inbox = [tf.ones((2,))]
    watch = weakref.ref(inbox[0])
    thread = threading.Thread(target=worker, args=(inbox,), name="loader")
    thread.start()
    try:
        assert started.wait(10)
        target = watch()
        assert target is not None
        text = explain(target).text()
        del target
    finally:
        release.set()
        thread.join()
    assert text.startswith("held by thread loader: frame of worker (")
    assert text.endswith(") -> local batch -> EagerTensor")


def test_the_test_frameworks_roots_come_after_modules_and_threads() -> None:
    from pytest_eagersession.heap.holders import Root

    cleanups: list[object] = []
    kept = tf.ones((2,))
    cleanups.append(lambda: kept)
    explanation = explain(
        kept, framework=[Root("pytest config.add_cleanup", cleanups, "framework")]
    )
    # the test's own frame is running, but only a check's callers count as roots
    assert explanation.text() == (
        "held by pytest config.add_cleanup -> [0] (function) -> closure kept -> EagerTensor"
    )
    assert explanation.root == "framework"
    assert not explanation.certain  # never destroyed: pytest may still call it


def test_a_class_attribute_of_the_users_is_named_through_its_class(scratch_module) -> None:
    class Registry:
        items: ClassVar[dict[str, object]] = {}

    Registry.__module__ = scratch_module.__name__
    scratch_module.Registry = Registry
    Registry.items["w"] = tf.ones((2,))
    assert explain(Registry.items["w"]).text() == (
        "held by scratch_holder.Registry.items (dict) -> ['w'] -> EagerTensor"
    )


def test_tensorflows_classes_are_walked_from_tensorflow_not_from_the_user(scratch_module) -> None:
    # The user's module refers to TensorFlow's class; what the class keeps is TensorFlow's.
    scratch_module.Operation = ops.Operation
    ops.Operation._eagersession_test_hold = [tf.ones((2,))]
    try:
        explanation = explain(ops.Operation._eagersession_test_hold[0])
    finally:
        held = ops.Operation._eagersession_test_hold
        del ops.Operation._eagersession_test_hold
    del held
    assert explanation.internal
    assert explanation.text() == (
        "held by TensorFlow internals: tensorflow.Operation._eagersession_test_hold (list) "
        "-> [0] -> EagerTensor"
    )


def test_every_object_of_a_report_is_explained_in_one_walk(scratch_module) -> None:
    tensors = [tf.constant([float(i)]) for i in range(40)]
    scratch_module.DEEP = {"a": [{"b": tensors[:20]}]}
    scratch_module.SHALLOW = tensors[20:]
    explanations = explain_all(tensors)
    texts = [explanation.text() for explanation in explanations]
    assert texts[0] == (
        "held by scratch_holder.DEEP (dict) -> ['a'] (list) -> [0] (dict) -> ['b'] (list) "
        "-> [0] -> EagerTensor"
    )
    assert texts[39] == "held by scratch_holder.SHALLOW (list) -> [19] -> EagerTensor"
    assert len({explanation.seconds for explanation in explanations}) == 1  # one search


def explain_what_only_a_tape_keeps(
    scratch_module, *, persistent: bool, budgets: tuple[float, ...] = (DEFAULT_BUDGET_S,)
) -> list[str]:
    """Explain, with each budget, a tensor that only a tape kept in ``scratch_module.TAPE``
    keeps, from C++."""
    x = tf.ones((3, 3))
    with tf.GradientTape(persistent=persistent) as tape:  # gradient() is never called
        tape.watch(x)
        hidden = tf.tanh(x)
    scratch_module.TAPE = tape
    watch = weakref.ref(hidden)
    del tape, hidden
    try:
        hidden = watch()
        assert hidden is not None  # only the tape keeps it, from C++
        return [explain(hidden, budget_s=budget).text() for budget in budgets]
    finally:
        del hidden
        del scratch_module.TAPE


def test_a_tensor_only_a_persistent_tape_keeps_names_the_tape(scratch_module) -> None:
    [text] = explain_what_only_a_tape_keeps(scratch_module, persistent=True)
    assert text == (
        "no Python holder; likely kept from native code by the persistent GradientTape held by "
        "scratch_holder.TAPE -> GradientTape: such a tape keeps every tensor it recorded until "
        "it is dropped"
    )


def test_a_weak_key_dictionarys_value_is_named_by_its_key(scratch_module) -> None:
    class Key:
        pass

    key = Key()
    scratch_module.KEY = key
    scratch_module.CACHE = weakref.WeakKeyDictionary({key: tf.ones((2,))})
    assert explain(scratch_module.CACHE[key]).text() == (
        "held by scratch_holder.CACHE (WeakKeyDictionary).data (dict) -> [weakref to Key] "
        "-> EagerTensor"
    )


def test_a_bound_method_leads_to_its_instance(scratch_module) -> None:
    class Trainer:
        def __init__(self) -> None:
            self.weights = tf.ones((2,))

        def step(self) -> None:
            pass

    scratch_module.CALLBACKS = [Trainer().step]
    weights = scratch_module.CALLBACKS[0].__self__.weights
    assert explain(weights).text() == (
        "held by scratch_holder.CALLBACKS (list) -> [0] (method) -> __self__ (Trainer).weights "
        "-> EagerTensor"
    )


def test_a_tensor_only_an_unused_tape_keeps_names_the_tape(scratch_module) -> None:
    [text] = explain_what_only_a_tape_keeps(scratch_module, persistent=False)
    assert text == (
        "no Python holder; likely kept from native code by the GradientTape, whose gradient() "
        "was never called, held by scratch_holder.TAPE -> GradientTape: a tape keeps every "
        "tensor it recorded until its gradient() is called"
    )


def test_no_python_holder_is_said_only_after_a_full_search() -> None:
    orphan = tf.ones((2,))
    cycle: list[object] = [orphan]
    cycle.append(cycle)
    del cycle
    full = [explain(orphan, budget_s=budget).text() for budget in (60.0, float("inf"))]
    stopped = explain(orphan, budget_s=0.0)
    assert full == [NO_HOLDER, NO_HOLDER]
    assert stopped.timed_out
    assert stopped.text().startswith("no holder found within ")
    assert "no Python holder" not in stopped.text()


def test_a_search_stopped_early_names_no_tape(scratch_module) -> None:
    texts = explain_what_only_a_tape_keeps(scratch_module, persistent=True, budgets=(0.0, 60.0))
    assert texts[0].startswith("no holder found within ")
    assert texts[1].startswith("no Python holder; likely kept from native code by the persistent")


DEFAULT_GRAPH_CAUSE = (
    "kept by TensorFlow's default graph, which holds the Python functions of tf.py_function, "
    "tf.numpy_function and Dataset.from_generator until it is reset "
    "(tf.compat.v1.reset_default_graph, keras.backend.clear_session)"
)


def _py_function(kept: tf.Tensor) -> None:
    tf.py_function(lambda x: x + kept, [tf.constant(1.0)], tf.float32)


def _numpy_function(kept: tf.Tensor) -> None:
    @tf.function
    def run(x: tf.Tensor) -> tf.Tensor:
        return tf.numpy_function(lambda y: y + kept.numpy(), [x], tf.float32)

    run(tf.constant(1.0))


def _from_generator(kept: tf.Tensor) -> None:
    def rows():
        yield kept

    spec = tf.TensorSpec(kept.shape, kept.dtype)
    list(tf.data.Dataset.from_generator(rows, output_signature=spec))


@pytest.mark.parametrize("use", [_py_function, _numpy_function, _from_generator])
def test_a_python_function_the_default_graph_keeps_names_the_graph(use) -> None:
    from pytest_eagersession._tf.resources import fresh_default_graph

    with fresh_default_graph():  # the graph, and what it keeps, die with the block
        kept = tf.ones((5,))
        watch = weakref.ref(kept)
        use(kept)
        del kept
        kept = watch()
        assert kept is not None  # only the default graph keeps it
        text = explain(kept, budget_s=60).text()
        del kept
    assert text.startswith("held by tensorflow.python.framework.ops._default_graph_stack ")
    assert "(Graph)._py_funcs_used_in_graph (list)" in text
    assert text.endswith(f"-> closure kept -> EagerTensor ({DEFAULT_GRAPH_CAUSE})")


GRADIENT_REGISTRY_CAUSE = (
    "registered in TensorFlow's gradient registry by tf.RegisterGradient, by a "
    "tf.custom_gradient traced in a tf.function (as Keras's train step does) or by "
    "tf.saved_model.load for a loaded model's custom gradient: TensorFlow never drops an entry"
)


def _new_registry_entries(before: set[str]) -> list[str]:
    return [name for name in ops._gradient_registry._registry if name not in before]


def test_a_registered_gradient_names_the_registry() -> None:
    before = set(ops._gradient_registry._registry)

    def register() -> weakref.ref[tf.Tensor]:
        kept = tf.ones((8,))

        @tf.RegisterGradient("EagersessionTestLeakyGrad")
        def _gradient(op, grad):
            return grad * kept

        return weakref.ref(kept)

    watch = register()
    try:
        kept = watch()
        assert kept is not None
        text = explain(kept, budget_s=60).text()
        del kept
    finally:
        for name in _new_registry_entries(before):
            del ops._gradient_registry._registry[name]
    assert text == (
        "held by tensorflow.python.framework.ops.gradient_registry (Registry)._registry (dict) "
        "-> ['EagersessionTestLeakyGrad'] (dict) -> ['type'] (function) -> closure kept "
        f"-> EagerTensor ({GRADIENT_REGISTRY_CAUSE})"
    )


def test_a_custom_gradient_in_a_tf_function_names_the_registry_and_the_functions_graph() -> None:
    before = set(ops._gradient_registry._registry)

    def make() -> weakref.ref[tf.Tensor]:
        kept = tf.ones((1,))

        @tf.custom_gradient
        def doubled(x):
            return x * 2.0, lambda dy: dy * 2.0

        @tf.function
        def train_step(x):
            return doubled(x * kept)  # kept is the graph's capture: the gradient keeps the graph

        train_step(tf.constant(1.0))
        return weakref.ref(kept)

    watch = make()
    try:
        kept = watch()
        assert kept is not None  # the tf.function is gone, its graph's gradient is not
        text = explain(kept, budget_s=60).text()
        del kept
    finally:
        for name in _new_registry_entries(before):
            del ops._gradient_registry._registry[name]
    assert re.fullmatch(
        r"held by tensorflow\.python\.framework\.ops\.gradient_registry \(Registry\)\._registry "
        r"\(dict\) -> \['CustomGradient-\d+'\] \(dict\) -> \['type'\] \(function\) -> .*"
        r"\(FuncGraph 'train_step'\).* -> EagerTensor \("
        + re.escape(GRADIENT_REGISTRY_CAUSE)
        + r"\)",
        text,
    ), text


def test_a_loaded_saved_models_custom_gradient_names_the_loaded_function(tmp_path) -> None:
    class Scaled(tf.Module):
        def __init__(self) -> None:
            self.scale = tf.Variable(tf.ones((4,)))

        @tf.function(input_signature=[tf.TensorSpec((4,), tf.float32)])
        def __call__(self, x):
            @tf.custom_gradient
            def scaled(y):
                def gradient(dy, variables=None):
                    return dy * self.scale, [dy * y for _ in variables or ()]

                return y * self.scale, gradient

            return scaled(x)

    tf.saved_model.save(Scaled(), str(tmp_path))
    before = set(ops._gradient_registry._registry)
    loaded = tf.saved_model.load(str(tmp_path))
    handle = weakref.ref(loaded.scale.handle)
    del loaded
    try:
        kept = handle()
        assert kept is not None  # the loaded model is gone, its gradient's capture is not
        text = explain(kept, budget_s=60).text()
        del kept
    finally:
        for name in _new_registry_entries(before):
            del ops._gradient_registry._registry[name]
    assert re.fullmatch(
        r"held by tensorflow\.python\.framework\.ops\.gradient_registry .* -> closure func "
        r"\(_WrapperFunction '\w+' loaded from a SavedModel\)\._captured_inputs \(list\) "
        r"-> \[\d+\] -> EagerTensor \(" + re.escape(GRADIENT_REGISTRY_CAUSE) + r"\)",
        text,
    ), text


def test_a_tf_function_in_a_chain_is_named_by_its_python_function(scratch_module) -> None:
    captured = tf.ones((3,))

    @tf.function
    def step(x):
        return x + captured

    step(tf.constant(1.0))
    scratch_module.STEP = step
    assert explain(captured).text() == (
        "held by scratch_holder.STEP (Function 'step')._concrete_variable_creation_fn "
        "(ConcreteFunction 'step')._captured_inputs (list) -> [0] -> EagerTensor"
    )


def test_a_strategy_run_of_a_tf_function_names_the_distribute_cache() -> None:
    from pytest_eagersession._tf.resources import replica_fn_caches

    def make() -> weakref.ref[tf.Tensor]:
        kept = tf.ones((10,))
        strategy = tf.distribute.MirroredStrategy(["/cpu:0"])

        @tf.function
        def replica_step():
            return kept * 2.0

        strategy.run(replica_step)
        return weakref.ref(kept)

    before = {id(key) for cache in replica_fn_caches() for key in list(cache.keys())}
    watch = make()
    try:
        kept = watch()
        assert kept is not None  # the strategy and function are gone, the cache's entry is not
        text = explain(kept, budget_s=60).text()
        del kept
    finally:
        for cache in replica_fn_caches():
            for key in [key for key in list(cache.keys()) if id(key) not in before]:
                del cache[key]
    assert text == (
        "held by tensorflow.python.distribute.mirrored_run._cfer_fn_cache (WeakKeyDictionary)"
        ".data (dict) -> [weakref to MirroredStrategy] (WeakKeyDictionary).data (dict) -> "
        "[weakref to Function 'replica_step'] (Function 'replica_step')"
        "._concrete_variable_creation_fn (ConcreteFunction 'replica_step')._captured_inputs "
        "(list) -> [0] -> EagerTensor (cached by tf.distribute for strategy.run of a "
        "tf.function: the entry keeps the strategy and the function, so TensorFlow keeps both "
        "for the rest of the run)"
    )


def test_a_chain_from_the_plugins_own_state_says_so() -> None:
    from pytest_eagersession.core import activations

    activations._eagersession_test_hold = [tf.ones((2,))]  # type: ignore[attr-defined]
    try:
        explanation = explain(activations._eagersession_test_hold[0], budget_s=10)  # type: ignore[attr-defined]
    finally:
        del activations._eagersession_test_hold  # type: ignore[attr-defined]
    assert explanation.text() == (
        "held by pytest_eagersession.core.activations._eagersession_test_hold (list) -> [0] -> "
        "EagerTensor (kept by pytest-eagersession's own state, not by the test's code: a bug in "
        "the plugin, please report it)"
    )
    assert not explanation.certain
