"""The session API: the examples of the session page, run as tests."""

import queue

import pytest
import tensorflow as tf

from pytest_eagersession import (
    EagerSession,
    NativeReference,
    ResourceCleanupStrategy,
    SessionClosedError,
)


def test_create_and_close():
    # --8<-- [start:create]
    session = EagerSession.create()  # IN_BACKGROUND cleanup, silent device placement
    try:
        add = session.op_builder("Add").add_input(2).add_input(4).build()
        assert int(add.tensor(0)) == 6
    finally:
        session.close()  # deletes what the session still owns; a second close does nothing
    # --8<-- [end:create]


def test_options_and_with():
    # --8<-- [start:options]
    options = (
        EagerSession.options()
        .async_(False)
        .device_placement_policy("silent")
        .resource_cleanup_strategy(ResourceCleanupStrategy.ON_SAFE_POINTS)
    )
    with options.build() as session:  # active inside the block, closed at its end
        assert session.resource_cleanup_strategy is ResourceCleanupStrategy.ON_SAFE_POINTS
        total = tf.constant([1.0, 2.0]) + 1.0  # ordinary TensorFlow code: the session owns it
        assert total.numpy().tolist() == [2.0, 3.0]
    assert session.closed
    # --8<-- [end:options]


def test_op_builder():
    # --8<-- [start:op_builder]
    with EagerSession.create() as session:
        split = (
            session.op_builder("Split", name="halves")
            .add_input(1)  # split_dim
            .add_input(tf.reshape(tf.range(8.0), (2, 4)))  # value
            .set_attr("num_split", 2)
            .set_device("/cpu:0")
            .build()
        )
        assert split.num_outputs == 2
        assert split.output_list_length("output") == 2
        left = split.output(0)  # an Output keeps its operation alive
        assert left.shape == (2, 2)

        total = session.op_builder("AddN").add_input_list([left, split.output(1)]).build()
        assert total.input_list_length("inputs") == 2
        assert total.tensor(0).numpy().tolist() == [[2.0, 4.0], [10.0, 12.0]]
    with pytest.raises(SessionClosedError):
        total.tensor(0)  # the session closed: what it owned is gone
    # --8<-- [end:op_builder]


def test_native_reference():
    # --8<-- [start:native_reference]
    freed = []

    class Buffer:
        """A Python object that owns something outside Python."""

    class BufferReference(NativeReference):
        def delete(self):
            freed.append("buffer")  # free the native resource here

    session = EagerSession.options().resource_cleanup_strategy("on_session_close").build()
    buffer = Buffer()
    reference = BufferReference(session, buffer)
    session.attach(Buffer(), lambda: freed.append("attached"))  # the same, with a function
    del buffer  # garbage now; ON_SESSION_CLOSE waits for close
    assert freed == []
    assert reference.registered
    session.close()
    assert sorted(freed) == ["attached", "buffer"]  # each deleted once
    # --8<-- [end:native_reference]


def test_garbage_queue_for_tests():
    # --8<-- [start:garbage_queue]
    class Owner:
        pass

    garbage = queue.Queue()  # stands in for the garbage collector (Java's buildForGcTest)
    session = EagerSession.options().resource_cleanup_strategy("on_safe_points").build(garbage)
    deleted = []
    owner = Owner()
    reference = session.attach(owner, lambda: deleted.append(1))
    garbage.put(reference)  # as if its referent had died
    session.safe_point()  # op_builder() is a safe point too
    assert deleted == [1]
    session.close()
    # --8<-- [end:garbage_queue]


def test_survivors_and_detach():
    # --8<-- [start:survivors]
    kept = {}
    session = EagerSession.create()
    with session:
        kept["weights"] = tf.Variable(tf.zeros((4, 4)), name="weights")
        expected = tf.constant([1.0])
        session.detach(expected)  # expected to outlive the session: not reported
    survivors = session.close()
    assert [s.summary() for s in survivors] == [
        "variable: ResourceVariable 'weights' float32[4,4] 64 B on CPU:0"
    ]
    # --8<-- [end:survivors]
    kept.clear()


def test_default_session():
    # --8<-- [start:default]
    session = EagerSession.get_default()  # built on first use, with the default options
    assert session.is_default
    assert EagerSession.get_default() is session
    with pytest.raises(RuntimeError, match="already initialized"):
        EagerSession.init_default(EagerSession.options())  # only before the first get_default
    with pytest.raises(RuntimeError, match="cannot be closed"):
        session.close()  # it lives as long as the process
    # --8<-- [end:default]
