"""Tracking: what a session owns, what each cleanup strategy does, and which objects survive it.

Every object here is made by ordinary TensorFlow code inside an active session; the session finds
it behind the line the tracker draws in the collector (``gc.freeze()``), never through a wrapper.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support import IN_BACKGROUND, ON_SAFE_POINTS, ON_SESSION_CLOSE
from support import wait_until as wait_for

from pytest_eagersession import EagerSession, NativeReference, ResourceCleanupStrategy
from pytest_eagersession._tf.classes import tensor_measures, variable_nbytes
from pytest_eagersession.core import cleaner, cycle_watch
from pytest_eagersession.core.cycle_watch import CYCLE_BYTES_THRESHOLD, GarbageWatch
from pytest_eagersession.core.survivors import Survivor
from pytest_eagersession.core.tracking import TRACKER

tf = pytest.importorskip("tensorflow")

MIB = 1024 * 1024
DELETED = "was deleted when its eager session closed"
HERE = __file__


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    return wait_for(condition, timeout)


@pytest.fixture
def make_session() -> Iterator[Callable[..., EagerSession]]:
    """Sessions tracking creation sites (ON_SESSION_CLOSE unless told), closed after the test."""
    sessions: list[EagerSession] = []

    def make(
        strategy: ResourceCleanupStrategy = ON_SESSION_CLOSE,
        garbage_queue: queue.Queue[Any] | None = None,
        **options: Any,
    ) -> EagerSession:
        builder = EagerSession.options().resource_cleanup_strategy(strategy).track_creation()
        for name, value in options.items():
            getattr(builder, name)(value)
        session = builder.build(garbage_queue)
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.close()


def row(survivor: Survivor) -> tuple[Any, ...]:
    """The plain fields a survivor reports, with the type's short name."""
    d = survivor.description
    return (survivor.kind, d.type.rsplit(".", 1)[-1], d.name, d.dtype, d.shape, d.nbytes)


def kinds(survivors: tuple[Survivor, ...]) -> list[str]:
    return sorted(survivor.kind for survivor in survivors)


def made_in(survivor: Survivor, function: str) -> bool:
    """Whether the survivor's creation site is a line of ``function`` in this file."""
    where = survivor.created_at or ""
    return where.startswith(HERE + ":") and where.endswith(f" in {function}")


# ---------------------------------------------------------------- each kind, attributed


def make_eager_op_output() -> Any:
    return tf.constant([1.0, 2.0]) * 3.0


def make_function_call_output() -> Any:
    return tf.function(lambda x: x + 1.0)(tf.constant([1.0, 2.0, 3.0]))


def make_dataset_variant() -> Any:
    return tf.data.Dataset.range(3)._variant_tensor


def make_iterator() -> Any:
    return iter(tf.data.Dataset.range(3))


def make_iterator_output() -> Any:
    return next(iter(tf.data.Dataset.range(3)))


def make_tf_variable() -> Any:
    return tf.Variable([1.0, 2.0, 3.0], name="plain")


def make_variable_in_tf_function() -> Any:
    box: list[Any] = []

    @tf.function
    def initialize() -> Any:
        if not box:
            box.append(tf.Variable([1.0, 2.0], name="lifted"))
        return box[0].read_value()

    initialize()
    return box[0]


def make_module_variable() -> Any:
    module = tf.Module()
    module.weights = tf.Variable(tf.zeros([2, 2], tf.float64), name="weights")
    return module


def make_keras_layer() -> Any:
    keras = pytest.importorskip("keras")
    layer = keras.layers.Dense(3, name="dense_probe")
    layer.build((None, 2))
    return layer


def make_constant() -> Any:
    return tf.constant([[1, 2, 3]], dtype=tf.int32)


def make_converted() -> Any:
    import numpy as np

    return tf.convert_to_tensor(np.zeros((2, 5), np.float16))


def make_static_table() -> Any:
    initializer = tf.lookup.KeyValueTensorInitializer(
        tf.constant(["a", "b"]), tf.constant([1, 2], tf.int64)
    )
    return tf.lookup.StaticHashTable(initializer, default_value=-1)


def make_mutable_table() -> Any:
    return tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, default_value=-1)


def make_bare_handle() -> Any:
    return tf.Variable(1.0).handle  # the variable dies; its resource lives on in the handle


def make_tf_function() -> Any:
    @tf.function
    def probe(x: Any) -> Any:
        return x

    return probe


KIND_CASES = {
    "eager op": (
        make_eager_op_output,
        [("tensor", "EagerTensor", None, "float32", "[2]", 8, "Mul")],
    ),
    "tf.function call": (
        make_function_call_output,
        [("tensor", "EagerTensor", None, "float32", "[3]", 12, "__inference_")],
    ),
    "dataset op": (
        make_dataset_variant,
        [("tensor", "EagerTensor", None, "variant", "[]", 0, "RangeDataset")],
    ),
    "iterator": (
        make_iterator,
        [("iterator", "OwnedIterator", None, None, None, None, "AnonymousIteratorV3")],
    ),
    "iterator op": (
        make_iterator_output,
        [("tensor", "EagerTensor", None, "int64", "[]", 8, "IteratorGetNext")],
    ),
    "tf.Variable": (
        make_tf_variable,
        [("variable", "ResourceVariable", "plain", "float32", "[3]", 12, "VarHandleOp")],
    ),
    "variable made in a tf.function": (
        make_variable_in_tf_function,
        [("variable", "UnliftedInitializerVariable", "lifted", "float32", "[2]", 8, "VarHandleOp")],
    ),
    "tf.Module variable": (
        make_module_variable,
        [("variable", "ResourceVariable", "weights", "float64", "[2,2]", 32, "VarHandleOp")],
    ),
    "Keras variables": (
        make_keras_layer,
        [
            ("variable", "ResourceVariable", "dense_probe/bias", "float32", "[3]", 12, "Var"),
            ("variable", "ResourceVariable", "dense_probe/kernel", "float32", "[2,3]", 24, "Var"),
        ],
    ),
    "tf.constant": (
        make_constant,
        [("tensor", "EagerTensor", None, "int32", "[1,3]", 12, None)],
    ),
    "convert_to_tensor": (
        make_converted,
        [("tensor", "EagerTensor", None, "float16", "[2,5]", 20, None)],
    ),
    "static table": (
        make_static_table,
        [("table", "StaticHashTable", None, None, None, None, "HashTableV2")],
    ),
    "mutable table": (
        make_mutable_table,
        [("table", "MutableHashTable", None, None, None, None, "MutableHashTableV2")],
    ),
    "resource handle": (
        make_bare_handle,
        [("resource handle", "EagerTensor", None, "resource", None, None, "VarHandleOp")],
    ),
    "tf.function": (
        make_tf_function,
        [("function", "Function", "probe", None, None, None, None)],
    ),
}


@pytest.mark.parametrize("case", list(KIND_CASES))
def test_each_kind_is_attributed_with_its_description_and_creation(make_session, case) -> None:
    maker, expected = KIND_CASES[case]
    session = make_session()
    with session:
        kept = maker()
    found = session.survivors()
    assert sorted(row(s) for s in found) == sorted(e[:6] for e in expected)
    for survivor, wanted in zip(sorted(found, key=row), sorted(expected), strict=True):
        op = wanted[6]
        if op is None:
            assert survivor.op is None
            continue
        assert survivor.op is not None
        assert survivor.op.startswith(op)
        assert made_in(survivor, maker.__name__), survivor.created_at
        assert "device:CPU:0" in survivor.description.device or "GPU" in str(
            survivor.description.device
        )
    if case not in ("Keras variables", "tf.Module variable"):
        assert [s.ref() for s in found] == [kept]
    del kept


def test_objects_made_before_the_session_are_never_its_own(make_session) -> None:
    before = tf.constant([1.0, 2.0])
    variable = tf.Variable([5.0])
    session = make_session()
    with session:
        variable.assign_add([1.0])
        _ = before * 2.0
        del _
    assert session.close() == ()
    assert variable.numpy().tolist() == [6.0]  # not destroyed: it was never the session's


def test_nested_sessions_own_what_is_made_while_each_is_innermost(make_session) -> None:
    outer, inner = make_session(), make_session()
    with outer:
        first = tf.constant([1.0])
        with inner:
            middle = tf.constant([2.0, 2.0])
        last = tf.constant([3.0, 3.0, 3.0])
    assert [s.ref() for s in inner.close()] == [middle]
    assert sorted((s.ref() for s in outer.close()), key=len) == [first, last]
    del first, middle, last


def test_activate_and_deactivate_nest_like_with_blocks(make_session) -> None:
    outer, inner = make_session(), make_session()
    outer.activate()
    inner.activate()
    assert inner.active
    assert outer.active
    made_in_inner = tf.constant([1.0])
    inner.deactivate()
    made_in_outer = tf.constant([2.0])
    with pytest.raises(RuntimeError, match="not the innermost active session"):
        inner.deactivate()
    outer.deactivate()
    assert not outer.active
    assert [s.ref() for s in inner.survivors()] == [made_in_inner]
    assert [s.ref() for s in outer.survivors()] == [made_in_outer]
    del made_in_inner, made_in_outer


def test_a_tensor_made_by_another_thread_while_active_is_seen_at_close(make_session) -> None:
    session = make_session()
    box: list[Any] = []
    with session:
        worker = threading.Thread(target=lambda: box.append(tf.ones([7], tf.float64)))
        worker.start()
        worker.join()
    found = session.close()
    assert [row(s) for s in found] == [("tensor", "EagerTensor", None, "float64", "[7]", 56)]
    assert found[0].ref() is box[0]
    box.clear()


def test_checkpoint_and_since_keep_only_newer_survivors(make_session) -> None:
    session = make_session()
    with session:
        older = tf.constant([1.0])
        mark = session.checkpoint()
        newer = tf.constant([2.0, 2.0])
        assert [s.ref() for s in session.survivors(since=mark)] == [newer]
        assert len(session.survivors()) == 2
    assert [s.ref() for s in session.close()] == [older, newer]
    assert [s.ref() for s in session.survivors(since=mark)] == [newer]
    assert session.survivors(since=session.checkpoint()) == ()
    del older, newer


def test_stats_tracked_counts_what_the_session_attributed(make_session) -> None:
    session = make_session()
    with session:
        assert session.stats().tracked == 0
        kept = [tf.constant([float(i)]) for i in range(5)]
        assert session.stats().tracked == 5
        kept.append(tf.constant([5.0]))
        assert session.stats().tracked == 6
        del kept
    assert session.closed  # the with block closed it
    assert session.close() == ()
    assert session.stats().tracked == 6


@pytest.mark.parametrize("track_creation", [False, True])
def test_the_session_never_keeps_a_tracked_object_alive(make_session, track_creation) -> None:
    session = make_session(track_creation=track_creation)
    with session:
        tensor = tf.constant([1.0, 2.0]) + 1.0
        session.checkpoint()  # make sure it is recorded
        assert session.stats().tracked >= 1
        dying = weakref.ref(tensor)
        reported = session.survivors()
        assert [s.ref() for s in reported] == [tensor]
        del tensor
        assert dying() is None
        assert reported[0].ref() is None
    assert session.close() == ()


# ---------------------------------------------------------------- cleanup, by strategy


class Cyclic:
    """Garbage that only the cycle collector frees: it refers to itself."""

    def __init__(self, tensor: Any) -> None:
        self.me = self
        self.tensor = tensor


@contextlib.contextmanager
def automatic_gc_disabled() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def automatic_gc_held_off() -> Iterator[None]:
    """No automatic collection starts, whichever thread allocates; ``gc.isenabled()`` stays
    true, so that a session's own collections (which respect ``gc.disable()``) still run."""
    thresholds = gc.get_threshold()
    gc.set_threshold(1 << 30, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_cycles_holding_tensors_are_collected_as_tracked_bytes_grow(make_session, strategy) -> None:
    # Eight 4 MiB cycles and a handful of Python objects: far too few allocations for the
    # interpreter's own threshold (700) to start a collection, which is held off besides: what
    # frees the garbage early must be the session's watch.
    session = make_session(strategy, track_creation=False)
    tensor_bytes, count = 4 * MIB, 8
    with automatic_gc_held_off(), session:
        first = None
        for i in range(count):
            node = Cyclic(tf.fill([1024, 1024], float(i)))  # 4 MiB of float32
            first = first or weakref.ref(node)
            del node
        if strategy is IN_BACKGROUND:
            # Both: a collection is counted a moment after it ends, while the cleaner lists again.
            assert wait_until(lambda: first() is None and session.stats().cycle_collections > 0)
        # The other two have no thread: what they collect, they collected by now.
        collections = session.stats().cycle_collections
        garbage_left = first() is not None
    if strategy is ON_SESSION_CLOSE:
        assert collections == 0
        assert garbage_left  # nothing collected it before close
    else:
        assert not garbage_left
        if strategy is ON_SAFE_POINTS:
            # A look at every op (half a threshold of outputs); a collection once the bytes
            # grew by the threshold from the least they were (none, at activation): every
            # other tensor, from the second.
            per_collection = -(-CYCLE_BYTES_THRESHOLD // tensor_bytes)
            assert collections == count // per_collection
        else:
            assert collections >= 1
    assert session.close() == ()
    if strategy is IN_BACKGROUND:
        # Until close stops it, the cleaner may still collect.
        assert session.stats().cycle_collections >= collections
    else:  # closing itself is no collection of the watch's
        assert session.stats().cycle_collections == collections


def test_in_background_leaves_disabled_automatic_collection_off(make_session, monkeypatch) -> None:
    session = make_session(IN_BACKGROUND, track_creation=False)
    _, looks = count_reads_and_looks(session, monkeypatch)
    with automatic_gc_disabled(), session:
        first = weakref.ref(Cyclic(tf.fill([1024, 1024], 0.0)))
        for i in range(1, 8):
            Cyclic(tf.fill([1024, 1024], float(i)))
        after_garbage = len(looks)
        # Three looks at 28 MiB of garbage, which collect it when collection is on.
        assert wait_until(lambda: len(looks) >= after_garbage + 3)
        assert first() is not None  # the user turned collection off: it stays off
        assert session.stats().cycle_collections == 0
    assert session.close() == ()


def test_only_the_innermost_sessions_strategy_acts_on_its_ops(make_session) -> None:
    outer = make_session(ON_SAFE_POINTS, track_creation=False)
    inner = make_session(ON_SESSION_CLOSE, track_creation=False)
    with automatic_gc_disabled(), outer, inner:
        first = weakref.ref(Cyclic(tf.fill([1024, 1024], 0.0)))
        for i in range(1, 4):
            Cyclic(tf.fill([1024, 1024], float(i)))  # 16 MiB of cyclic garbage in all
        garbage_left = first() is not None
        outer_collections = outer.stats().cycle_collections
    assert garbage_left
    assert outer_collections == 0


class CountingReference(NativeReference):
    deletions = 0

    def delete(self) -> None:
        self.deletions += 1


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_eager_ops_are_safe_points_only_under_on_safe_points(make_session, strategy) -> None:
    session = make_session(strategy, track_creation=False)
    if strategy is IN_BACKGROUND:
        assert session.cleaner is not None
        session.cleaner.stop()  # so that only an op could delete it before close
    referent = Cyclic(None)
    reference = CountingReference(session, referent)
    with session:
        del referent
        gc.collect()
        assert reference.deletions == 0
        _ = tf.constant([1.0]) + 1.0  # an eager op
        del _
        assert reference.deletions == (1 if strategy is ON_SAFE_POINTS else 0)
    session.close()
    assert reference.deletions == 1


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_close_clears_tensorflow_zeros_cache(make_session, strategy) -> None:
    from tensorflow.python.eager import context

    session = make_session(strategy)
    with session:
        x = tf.Variable([1.0, 2.0, 3.0])
        with tf.GradientTape() as tape:
            first, _, _ = tf.unstack(x)  # the unused outputs' gradients are cached zeros
        assert tape.gradient(first, x).numpy().tolist() == [1.0, 0.0, 0.0]
        cached = [weakref.ref(t) for t in context.context().zeros_cache()._data.values()]
        assert cached
        del x, tape, first, _
    assert session.close() == ()
    assert context.context().zeros_cache()._data == {}
    assert all(ref() is None for ref in cached)


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_each_session_runs_with_a_fresh_default_graph_released_at_close(
    make_session, strategy
) -> None:
    outside = tf.compat.v1.get_default_graph()
    session = make_session(strategy)
    with session:
        graph = tf.compat.v1.get_default_graph()
        assert graph is not outside
        inside = weakref.ref(graph)
        del graph
    assert tf.compat.v1.get_default_graph() is outside
    session.close()
    gc.collect()
    assert inside() is None


class Holder:
    """A class whose attribute keeps a variable past the session."""

    variable: Any = None


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_close_destroys_surviving_resources_under_every_strategy(make_session, strategy) -> None:
    session = make_session(strategy)
    with session:
        Holder.variable = tf.Variable([1.0, 2.0])
        iterator = iter(tf.data.Dataset.range(3))
        table = make_static_table()
        assert Holder.variable.numpy().tolist() == [1.0, 2.0]
    try:
        assert kinds(session.close()) == ["iterator", "table", "variable"]
        with pytest.raises(tf.errors.OpError, match=DELETED):
            Holder.variable.assign([3.0, 4.0])
        with pytest.raises(tf.errors.OpError, match=DELETED):
            next(iterator)
        with pytest.raises(tf.errors.OpError, match=DELETED):
            table.lookup(tf.constant(["a"]))
    finally:
        Holder.variable = None


def test_allowed_survivors_are_reported_as_allowed_and_stay_usable(make_session) -> None:
    session = make_session(allow=["'kept_on_purpose'", lambda s: s.kind == "iterator"])
    with session:
        Holder.variable = tf.Variable([1.0], name="kept_on_purpose")
        leaked = tf.Variable([2.0], name="leaked")
        iterator = iter(tf.data.Dataset.range(3))
    try:
        found = {s.description.name or s.kind: s.allowed for s in session.close()}
        assert found == {"kept_on_purpose": True, "iterator": True, "leaked": False}
        Holder.variable.assign([5.0])
        assert Holder.variable.numpy().tolist() == [5.0]
        assert int(next(iterator)) == 0
        with pytest.raises(tf.errors.OpError, match=DELETED):
            leaked.numpy()
    finally:
        Holder.variable = None


def test_detached_objects_are_not_reported_and_stay_usable(make_session) -> None:
    session = make_session()
    with session:
        Holder.variable = tf.Variable([1.0])
        iterator = iter(tf.data.Dataset.range(3))
        session.detach(Holder.variable)
        session.detach(iterator)
    try:
        assert session.close() == ()
        Holder.variable.assign([7.0])
        assert Holder.variable.numpy().tolist() == [7.0]
        assert [int(x) for x in iterator] == [0, 1, 2]
    finally:
        Holder.variable = None


def test_destroy_survivors_false_reports_them_and_keeps_them_usable(make_session) -> None:
    session = make_session(destroy_survivors=False)
    with session:
        Holder.variable = tf.Variable([1.0], name="reported")
    try:
        assert [(s.kind, s.description.name, s.allowed) for s in session.close()] == [
            ("variable", "reported", False)
        ]
        Holder.variable.assign([2.0])
        assert Holder.variable.numpy().tolist() == [2.0]
    finally:
        Holder.variable = None


# ---------------------------------------------------------------- survivors users actually hit

MODULE_CACHE: list[Any] = []
STORED_TRACEBACKS: list[Any] = []
GLOBAL_MODELS: list[Any] = []
PARKED: list[Any] = []
LONG_LIVED: list[Any] = []


@functools.lru_cache(maxsize=16)
def cached_ones(n: int) -> Any:
    return tf.fill([n], 1.0)


def test_survivor_a_module_level_list_of_tensors(make_session) -> None:
    session = make_session()
    with session:
        for n in (3, 4):
            MODULE_CACHE.append(tf.range(n))
        scratch = tf.reduce_sum(MODULE_CACHE[0])  # dropped: not a survivor
        del scratch
    try:
        found = session.close()
        assert [row(s) for s in found] == [
            ("tensor", "EagerTensor", None, "int32", "[3]", 12),
            ("tensor", "EagerTensor", None, "int32", "[4]", 16),
        ]
        assert [s.op for s in found] == ["Range", "Range"]
        assert all(made_in(s, "test_survivor_a_module_level_list_of_tensors") for s in found)
        assert [s.ref() for s in found] == MODULE_CACHE
    finally:
        MODULE_CACHE.clear()


def test_survivor_an_lru_cache_returning_tensors(make_session) -> None:
    session = make_session()
    with session:
        assert cached_ones(5) is cached_ones(5)
    try:
        found = session.close()
        assert [row(s) for s in found] == [("tensor", "EagerTensor", None, "float32", "[5]", 20)]
        assert found[0].op == "Fill"
        assert made_in(found[0], "cached_ones")
    finally:
        cached_ones.cache_clear()


def test_survivor_a_variable_on_a_class_attribute(make_session) -> None:
    session = make_session()
    with session:
        Holder.variable = tf.Variable(tf.zeros([4, 4]), name="on_the_class")
    try:
        found = session.close()
        assert [row(s) for s in found] == [
            ("variable", "ResourceVariable", "on_the_class", "float32", "[4,4]", 64)
        ]
        assert found[0].op == "VarHandleOp"
        with pytest.raises(tf.errors.OpError, match=DELETED):
            Holder.variable.numpy()
    finally:
        Holder.variable = None


def fail_holding(tensor_size: int) -> None:
    local_tensor = tf.zeros([tensor_size])
    raise ValueError(f"failed with {local_tensor.shape}")


def test_survivor_a_stored_traceback_holding_a_tensor_in_a_frame_local(make_session) -> None:
    session = make_session()
    with session:
        try:
            fail_holding(6)
        except ValueError as error:
            STORED_TRACEBACKS.append(error.__traceback__)
    try:
        found = session.close()
        assert [row(s) for s in found] == [("tensor", "EagerTensor", None, "float32", "[6]", 24)]
        assert found[0].op == "Fill"
        assert made_in(found[0], "fail_holding")
    finally:
        STORED_TRACEBACKS.clear()


def test_survivor_a_keras_model_kept_in_a_global(make_session) -> None:
    keras = pytest.importorskip("keras")
    session = make_session()
    with session:
        model = keras.Sequential(
            [keras.Input((2,)), keras.layers.Dense(3, name="kept_dense")], name="kept_model"
        )
        model(tf.zeros([1, 2]))
        GLOBAL_MODELS.append(model)
        del model
    try:
        found = session.close()
        assert sorted(row(s) for s in found) == [
            ("variable", "ResourceVariable", "kept_model/kept_dense/bias", "float32", "[3]", 12),
            (
                "variable",
                "ResourceVariable",
                "kept_model/kept_dense/kernel",
                "float32",
                "[2,3]",
                24,
            ),
        ]
        with pytest.raises(tf.errors.OpError, match=DELETED):
            GLOBAL_MODELS[0](tf.zeros([1, 2]))
    finally:
        GLOBAL_MODELS.clear()


def test_survivor_a_parked_dataset_iterator_is_reported_alone(make_session) -> None:
    session = make_session()
    with session:
        dataset = tf.data.Dataset.range(10).map(lambda x: x * 2).batch(2)
        PARKED.append(iter(dataset))
        assert next(PARKED[0]).numpy().tolist() == [0, 2]
        del dataset
    try:
        found = session.close()
        # The dataset's tensors, which the iterator holds, are not reported on their own.
        assert [row(s) for s in found] == [("iterator", "OwnedIterator", None, None, None, None)]
        assert found[0].op == "AnonymousIteratorV3"
        with pytest.raises(tf.errors.OpError, match=DELETED):
            next(PARKED[0])
    finally:
        PARKED.clear()


def make_scaler() -> Any:
    scale = tf.constant([2.0, 3.0])

    @tf.function
    def scaled(x: Any) -> Any:
        return x * scale

    assert scaled(tf.constant([1.0, 1.0])).numpy().tolist() == [2.0, 3.0]
    return scaled


def test_survivor_a_long_lived_tf_function_closure_capturing_a_tensor(make_session) -> None:
    session = make_session()
    with session:
        LONG_LIVED.append(make_scaler())
    try:
        found = session.close()
        # The captured tensor is held by the function, which is reported for both.
        assert [row(s) for s in found] == [("function", "Function", "scaled", None, None, None)]
        assert found[0].ref() is LONG_LIVED[0]
    finally:
        LONG_LIVED.clear()


# ---------------------------------------------------------------- clean code: no survivors


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_clean_results_dropped(make_session, strategy) -> None:
    session = make_session(strategy)
    with session:
        x = tf.random.stateless_normal([16, 16], seed=[1, 2])
        total = float(tf.reduce_sum(tf.matmul(x, x)))
        squares = tf.function(lambda t: t * t)(x)
        assert squares.shape == (16, 16)
        del x, squares
    assert isinstance(total, float)
    assert session.close() == ()


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_clean_reference_cycles(make_session, strategy) -> None:
    session = make_session(strategy)
    with session:
        nodes = [Cyclic(tf.constant([float(i)])) for i in range(3)]
        nodes[0].other = nodes[1]
        nodes[1].variable = tf.Variable([1.0])
        del nodes
    assert session.close() == ()


def test_clean_keras_model_built_trained_and_dropped(make_session) -> None:
    keras = pytest.importorskip("keras")
    import numpy as np

    session = make_session()
    with session:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile(optimizer="adam", loss="mse")
        model.fit(np.ones((4, 4), "float32"), np.ones((4, 2), "float32"), epochs=1, verbose=0)
        assert model.predict(np.ones((1, 4), "float32"), verbose=0).shape == (1, 2)
        del model
    # fit traces tf.distribute's all_reduce, whose tf.custom_gradient TensorFlow registers
    # globally; the session hands it to its graph, so the model's variables go with it.
    assert session.close() == ()


def test_a_custom_gradient_still_works_while_its_graph_lives(make_session) -> None:
    @tf.custom_gradient
    def half_gradient(x: Any) -> Any:
        return tf.identity(x), lambda dy: dy * 0.5

    @tf.function
    def double(x: Any) -> Any:
        return half_gradient(x) * 2.0

    x = tf.constant(3.0)
    session = make_session()
    with session:
        assert float(double(x)) == 6.0  # traced here, differentiated after close
    session.close()
    gc.collect()
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = double(x)
    assert float(tape.gradient(y, x)) == 1.0


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_clean_dataset_from_generator_iterated_and_dropped(make_session, strategy) -> None:
    class Source:
        def __call__(self) -> Iterator[float]:
            yield from (1.0, 2.0, 3.0)

    source = Source()
    released = weakref.ref(source)
    session = make_session(strategy)
    with session:
        dataset = tf.data.Dataset.from_generator(
            source, output_signature=tf.TensorSpec([], tf.float32)
        )
        assert [float(x) for x in dataset.map(lambda v: v * 2)] == [2.0, 4.0, 6.0]
        del dataset
    del source
    assert session.close() == ()
    gc.collect()
    assert released() is None  # TensorFlow's py_func registry let go of it with the graph


# ---------------------------------------------------------------- process-wide singletons


@pytest.fixture
def fresh_global_generator() -> Iterator[None]:
    from tensorflow.python.ops import stateful_random_ops

    saved = stateful_random_ops.global_generator
    stateful_random_ops.global_generator = None
    yield
    stateful_random_ops.global_generator = saved


def test_tf_random_global_generator_is_not_a_leak(make_session, fresh_global_generator) -> None:
    session = make_session()
    with session:
        assert tf.random.get_global_generator().normal([3]).shape == (3,)
        made = tf.random.get_global_generator()
    assert session.close() == ()
    assert tf.random.get_global_generator() is made
    assert made.uniform([2]).shape == (2,)  # not destroyed


@pytest.fixture
def fresh_keras_seed_generator() -> Iterator[Any]:
    keras = pytest.importorskip("keras")
    from keras.src.backend.common import global_state

    saved = global_state.get_global_attribute("global_seed_generator")
    global_state.set_global_attribute("global_seed_generator", None)
    yield keras
    global_state.set_global_attribute("global_seed_generator", saved)


def test_keras_global_seed_generator_is_not_a_leak(make_session, fresh_keras_seed_generator):
    keras = fresh_keras_seed_generator
    session = make_session()
    with session:
        assert keras.random.normal([3]).shape == (3,)
        assert keras.layers.Dropout(0.5)(tf.ones([4]), training=True).shape == (4,)
    assert session.close() == ()
    assert keras.random.uniform([2]).shape == (2,)  # its state variable still works


# ---------------------------------------------------------------- attribution, whatever collects


@pytest.mark.parametrize("young", [1, 2, 3, 4, 5, 7, 10, 28, 50, 700])
def test_a_tensor_is_attributed_whatever_the_young_threshold(make_session, young) -> None:
    """Low thresholds are the user's choice: with the line drawn in the collector, no collection
    they start, however early, can move a new tensor out of the session's sight."""
    session = make_session(ON_SESSION_CLOSE, track_creation=False)
    thresholds = gc.get_threshold()
    gc.set_threshold(young, 1, 1)
    try:
        with session:
            kept = tf.constant([1, 2, 3])
    finally:
        gc.set_threshold(*thresholds)
    assert [row(s) for s in session.survivors()] == [
        ("tensor", "EagerTensor", None, "int32", "[3]", 12)
    ]
    del kept


class _Tracked:
    """An object the collector tracks."""


def test_collections_in_another_thread_never_cost_the_session_an_object(make_session) -> None:
    """A thread that is no session's runs collections of every generation, as fast as it can,
    while the session's thread makes and keeps tensors: each one is the session's."""
    session = make_session(ON_SESSION_CLOSE, track_creation=False)
    stop = threading.Event()
    collected = [0]

    def collect_all_the_time() -> None:
        while not stop.is_set():
            for _ in range(50):
                _Tracked()
            gc.collect(collected[0] % 3)
            collected[0] += 1

    kept: list[Any] = []
    with session:
        collector = threading.Thread(target=collect_all_the_time)
        collector.start()
        try:
            for i in range(200):
                kept.append(tf.fill([4], float(i)))
                if i % 20 == 0:
                    time.sleep(0.001)  # let the other thread collect in between
        finally:
            stop.set()
            collector.join()
    assert collected[0] > 10
    survivors = session.close()
    assert sorted(id(s.ref()) for s in survivors) == sorted(map(id, kept))
    kept.clear()


def test_the_session_leaves_the_collectors_thresholds_alone(make_session) -> None:
    session = make_session(IN_BACKGROUND, track_creation=False)
    thresholds = gc.get_threshold()
    seen = set()
    with session:
        for i in range(40):
            Cyclic(tf.fill([256, 1024], float(i)))  # 1 MiB each: the cleaner collects
            seen.add(gc.get_threshold())
        assert wait_until(lambda: session.stats().cycle_collections > 0)
        seen.add(gc.get_threshold())
    assert seen == {thresholds}
    assert gc.get_threshold() == thresholds


class WaitRecorder(queue.Queue[Any]):
    """A garbage queue that notes, as its reader starts each wait with no timeout, how many
    looks ``looks`` had counted then."""

    def __init__(self, looks: list[Any]) -> None:
        super().__init__()
        self._looks = looks
        self.looks_at_untimed_waits: list[int] = []

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if block and timeout is None:
            self.looks_at_untimed_waits.append(len(self._looks))
        return super().get(block, timeout)


def test_an_outer_sessions_cleaner_stops_watching(make_session, monkeypatch) -> None:
    """The cleaner of a session with another activated inside it does not look."""
    monkeypatch.setattr(cleaner, "LOOK_INTERVAL_S", (0.002, 0.002))
    looks: list[bool] = []
    garbage = WaitRecorder(looks)
    outer = make_session(IN_BACKGROUND, track_creation=False, garbage_queue=garbage)
    inner = make_session(ON_SESSION_CLOSE, track_creation=False)
    original = GarbageWatch.look

    def look(watch: GarbageWatch) -> int:
        looks.append(TRACKER.is_innermost(outer))
        return original(watch)

    monkeypatch.setattr(GarbageWatch, "look", look)
    with outer:
        assert wait_until(lambda: bool(looks))  # watching: it looks every 2 ms
        with inner:
            waits = garbage.looks_at_untimed_waits
            before = len(waits)
            # The wait under way ends, and the next has no timeout: nothing but a put ends it.
            assert wait_until(lambda: len(waits) > before)
            assert len(looks) == waits[-1]  # no look since
        looks.clear()
        assert wait_until(lambda: bool(looks))  # and it looks again once the inner one ends
        again = list(looks)  # (a look may begin as the outer one ends, and see it end)
    assert all(again)


def test_a_looks_cost_is_its_cpu_time_not_its_wait_for_the_interpreter(
    make_session, monkeypatch
) -> None:
    """A listing that waits (for the interpreter, here a sleep) is cheap: looks stay frequent."""
    for name in ("new_weakly", "new_weakly_apart"):
        listed = getattr(TRACKER, name)

        def waiting(*args: Any, listed: Callable[..., Any] = listed) -> Any:
            time.sleep(0.01)  # the GIL is released, no CPU is used
            return listed(*args)

        monkeypatch.setattr(TRACKER, name, waiting)
    session = make_session(IN_BACKGROUND, track_creation=False)
    watch = session.watch
    with session:
        assert wait_until(lambda: watch.listing_seconds > 0)
        assert watch.listing_seconds < 0.005  # 10 ms of wall time each


def count_reads_and_looks(
    session: EagerSession, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[int], list[int]]:
    """Lists that grow as ``session``'s cleaner reads the resident memory (one item a read)
    and looks (each look's item: the reads made before it)."""
    from pytest_eagersession.core import resident

    reads: list[int] = []
    looks: list[int] = []
    real_read, real_look = resident.ResidentMemory.read, GarbageWatch.look

    def read(memory: Any) -> int | None:
        if session.cleaner is not None and threading.current_thread() is session.cleaner.thread:
            reads.append(1)
        return real_read(memory)

    def look(watch: GarbageWatch) -> int:
        if watch is session.watch:
            looks.append(len(reads))
        return real_look(watch)

    monkeypatch.setattr(resident.ResidentMemory, "read", read)
    monkeypatch.setattr(GarbageWatch, "look", look)
    return reads, looks


def grown_resident_memory() -> bytearray:
    """64 MiB made resident: zeros from the kernel, touched page by page."""
    grown = bytearray(64 * MIB)
    grown[::4096] = b"\x01" * len(grown[::4096])
    return grown


def test_a_quiet_cleaner_reads_the_resident_memory_and_lists_when_it_grows(
    make_session, monkeypatch
) -> None:
    """Once the bytes stay still, most wakes read the process's resident memory alone (a
    listing of a large heap costs far more); memory that grows brings a listing at once."""
    monkeypatch.setattr(cleaner, "LOOK_INTERVAL_S", (0.001, 0.002))
    monkeypatch.setattr(cleaner, "QUIET_S", 0.01)
    session = make_session(IN_BACKGROUND, track_creation=False)
    reads, looks = count_reads_and_looks(session, monkeypatch)
    with session:
        # Still: wakes every 1-2 ms, one look in QUIET_SKIPS + 1 (8) of them.
        assert wait_until(lambda: len(reads) > 60)
        quiet_looks, quiet_reads = len(looks), len(reads)
        grown = grown_resident_memory()
        assert wait_for(lambda: len(looks) > quiet_looks and looks[-1] <= quiet_reads + 2)
    assert quiet_reads > 50
    assert 4 * quiet_looks <= quiet_reads  # most wakes listed nothing
    del grown


def test_a_session_starts_quiet_and_lists_at_once_when_memory_grows(
    make_session, monkeypatch
) -> None:
    """From its first wake a session's cleaner reads the resident memory and lists only one wake
    in ``QUIET_SKIPS + 1``; memory that grows from the start is listed at the next wake."""
    monkeypatch.setattr(cleaner, "LOOK_INTERVAL_S", (0.001, 0.001))
    session = make_session(IN_BACKGROUND, track_creation=False)
    reads, looks = count_reads_and_looks(session, monkeypatch)
    with session:
        assert wait_for(lambda: len(reads) >= 3 * (cleaner.QUIET_SKIPS + 1))
        first_reads, first_looks = len(reads), len(looks)
        grown = grown_resident_memory()
        assert wait_for(lambda: len(looks) > first_looks and looks[-1] <= first_reads + 2)
    # Listing at every wake through the first QUIET_S would have been a look a read.
    assert first_looks <= first_reads // (cleaner.QUIET_SKIPS + 1) + 1
    del grown


def test_resident_memory_is_read_on_linux_and_nowhere_else(monkeypatch) -> None:
    from pytest_eagersession.core import resident

    memory = resident.ResidentMemory()
    before = memory.read()
    assert before is not None
    assert before > 0
    grown = bytearray(32 * MIB)
    grown[::4096] = b"\x01" * len(grown[::4096])
    after = memory.read()
    assert after is not None
    assert after - before >= 24 * MIB
    del grown
    monkeypatch.setattr(resident.sys, "platform", "darwin")
    assert resident.ResidentMemory().read() is None


# ---------------------------------------------------------------- the watch


def watch_of(session: EagerSession) -> GarbageWatch:
    return session.watch


def test_the_watch_collects_once_garbage_passes_the_threshold(make_session) -> None:
    session = make_session(ON_SESSION_CLOSE, track_creation=False)
    with automatic_gc_held_off(), session:
        watch = GarbageWatch(session, threshold=2 * MIB)
        watch.look()  # the least: nothing yet
        first = weakref.ref(Cyclic(tf.fill([256, 1024], 0.0)))  # 1 MiB of garbage
        watch.look()
        assert watch.collections == 0
        assert first() is not None
        Cyclic(tf.fill([256, 1024], 1.0))  # 2 MiB made since the least
        watch.look()
        assert watch.collections == 1
        assert first() is None


def test_a_variables_size_is_read_once_while_it_lives_and_never_keeps_it(
    make_session, monkeypatch
) -> None:
    """Reading a variable's shape runs TensorFlow's Python code; the watch does it once."""
    read: list[int] = []

    def counted(variable: Any) -> int:
        read.append(id(variable))
        return variable_nbytes(variable)

    monkeypatch.setattr(cycle_watch, "variable_nbytes", counted)
    session = make_session(ON_SESSION_CLOSE, track_creation=False)
    with automatic_gc_held_off(), session:
        watch = GarbageWatch(session, threshold=64 * MIB)
        variable = tf.Variable(tf.zeros([256, 1024]))  # 1 MiB
        watch.look()
        assert watch.look() == 0
        assert read.count(id(variable)) == 1
        other = tf.Variable(tf.zeros([128, 1024]))  # 0.5 MiB more
        assert watch.look() == MIB // 2
        assert read.count(id(other)) == 1
        assert read.count(id(variable)) == 1
        gone = weakref.ref(variable)
        del variable
        assert gone() is None  # the watch keeps no variable alive


def test_a_tensors_size_is_measured_once_while_it_lives_and_never_keeps_it(
    make_session, monkeypatch
) -> None:
    """A tensor's element count lets other threads run (the code's thread takes the interpreter
    at each); the watch measures a tensor at the first look that finds it, then counts it from
    the size it kept, while the tensor lives."""
    tensor_class, measures = tensor_measures()
    measured: list[int] = []

    def probe(obj: Any) -> Any:
        measured.append(id(obj))
        return obj

    probing = [[probe, *measures[0]], *measures[1:]]
    monkeypatch.setattr(cycle_watch, "tensor_measures", lambda: (tensor_class, probing))
    session = make_session(ON_SESSION_CLOSE, track_creation=False)
    with automatic_gc_held_off(), session:
        watch = GarbageWatch(session, threshold=64 * MIB)
        kept = tf.zeros([256, 1024])  # 1 MiB
        watch.look()
        assert watch.bytes_seen >= MIB
        assert measured.count(id(kept)) == 1
        assert watch.look() == 0
        assert measured.count(id(kept)) == 1  # counted again from its size
        other = tf.zeros([128, 1024])  # 0.5 MiB more
        assert watch.look() == MIB // 2
        assert (measured.count(id(other)), measured.count(id(kept))) == (1, 1)
        before = watch.bytes_seen
        gone = weakref.ref(kept)
        del kept
        assert gone() is None  # the watch keeps no tensor alive
        watch.look()
        assert watch.bytes_seen == before - MIB  # a dead tensor's kept size counts no more
        del other


def test_an_older_generation_is_listed_again_only_after_objects_moved_into_it(
    make_session, monkeypatch
) -> None:
    """A look lists the youngest generation, and an older one only after a collection of the
    one before it (or a freeze) moved objects into it; between those, it counts the older ones'
    tensors from their last listings, less those that died since."""
    listed: list[tuple[int, ...]] = []

    def counting(listing: Callable[..., Any]) -> Callable[..., Any]:
        def counted(owner: Any, types: Any, generations: Any) -> Any:
            if owner is session:  # not the looks of the plugin's own session for this test
                listed.append(tuple(generations))
            return listing(owner, types, generations)

        return counted

    for name in ("new_weakly", "new_weakly_apart"):
        monkeypatch.setattr(TRACKER, name, counting(getattr(TRACKER, name)))
    session = make_session(ON_SESSION_CLOSE, track_creation=False)
    with automatic_gc_held_off(), session:
        watch = GarbageWatch(session, threshold=64 * MIB)
        kept = [tf.fill([256, 1024], 0.0), tf.fill([256, 1024], 1.0)]  # 2 MiB
        gc.collect(1)  # into the oldest generation
        watch.look()
        assert listed == [(0, 1, 2)]
        fresh = tf.fill([128, 1024], 2.0)  # 0.5 MiB, in the youngest
        assert watch.look() == MIB // 2
        del kept[0]  # 1 MiB of the oldest one's listing dies: counted no more
        assert watch.look() == 0
        assert watch.bytes_seen == MIB + MIB // 2
        kept.append(tf.fill([256, 1024], 3.0))
        assert watch.look() == MIB
        assert listed[1:] == [(0,), (0,), (0,)]  # no collection: the youngest alone
        gc.collect(0)  # from the youngest into the middle one: it is listed again
        assert watch.look() == 0
        assert listed[-1] == (0, 1)
        del fresh  # 0.5 MiB of the middle one's listing dies
        assert watch.look() == 0
        assert watch.bytes_seen == 2 * MIB
        assert listed[-1] == (0,)
        gc.collect(1)  # objects moved into the oldest: every generation listed again
        assert watch.look() == 0
        assert listed[-1] == (0, 1, 2)
        assert watch.bytes_seen == 2 * MIB
        gc.freeze()  # the line drawn again (everything new is frozen): listed again
        watch.look()
        assert listed[-1] == (0, 1, 2)
        assert len(listed) == 8


def test_bytes_kept_on_purpose_make_the_watch_wait_longer(make_session) -> None:
    session = make_session(ON_SESSION_CLOSE, track_creation=False)
    kept = []
    with automatic_gc_held_off(), session:
        watch = GarbageWatch(session, threshold=2 * MIB)
        watch.look()
        for i in range(14):  # 14 MiB kept, 1 MiB a look
            kept.append(tf.fill([256, 1024], float(i)))
            watch.look()
        # At 2 MiB it collects and frees nothing: it waits for 4 MiB more (at 6 MiB), then
        # for 8 MiB more (at 14 MiB).
        assert watch.collections == 3
        assert watch.look() == 0
        first = weakref.ref(Cyclic(tf.fill([1024, 1024], 0.0)))  # 4 MiB of garbage
        Cyclic(tf.fill([1024, 1024], 1.0))
        Cyclic(tf.fill([1024, 1024], 2.0))
        Cyclic(tf.fill([1024, 1024], 3.0))
        watch.look()  # 16 MiB grown: past the 16 it waits for now; that one frees it all
        assert watch.collections == 4
        assert first() is None
        for i in range(3):
            Cyclic(tf.fill([256, 1024], float(i)))
            watch.look()
        assert watch.collections == 5  # back to one threshold: 2 MiB of garbage, collected
    assert len(session.close()) == 14
    kept.clear()


def test_the_watch_does_not_look_at_a_session_that_is_not_innermost(make_session) -> None:
    outer = make_session(ON_SESSION_CLOSE, track_creation=False)
    inner = make_session(ON_SESSION_CLOSE, track_creation=False)
    with automatic_gc_held_off(), outer:
        watch = GarbageWatch(outer, threshold=MIB)
        watch.look()
        with inner:
            first = weakref.ref(Cyclic(tf.fill([1024, 1024], 0.0)))
            Cyclic(tf.fill([1024, 1024], 1.0))
            assert watch.look() == 0
            assert watch.collections == 0
            assert first() is not None
