"""Eager operations: ports of Java's EagerOperationTest, EagerOperationBuilderTest and TensorTest,
and the ownership contract (an operation owns its outputs) with real garbage."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from collections.abc import Callable, Iterator

import pytest
import tensorflow as tf
from support import IN_BACKGROUND, ON_SAFE_POINTS, ON_SESSION_CLOSE, wait_until

from pytest_eagersession import EagerSession, ResourceCleanupStrategy, SessionClosedError
from pytest_eagersession.core import operations
from pytest_eagersession.core.op_types import OpInfo
from pytest_eagersession.core.operations import EagerOperation, EagerOperationBuilder, Output


@pytest.fixture
def make_session() -> Iterator[Callable[[ResourceCleanupStrategy], EagerSession]]:
    sessions: list[EagerSession] = []

    def make(strategy: ResourceCleanupStrategy = ON_SESSION_CLOSE) -> EagerSession:
        session = EagerSession.options().resource_cleanup_strategy(strategy).build()
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.close()


@pytest.fixture
def session(make_session) -> EagerSession:
    return make_session(ON_SESSION_CLOSE)


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    """Only reference counting frees objects: what dies here dies without the cycle collector."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def const(session: EagerSession, value: object, dtype: tf.DType = tf.int32) -> EagerOperation:
    return (
        session.op_builder("Const", "const")
        .set_attr("dtype", dtype)
        .set_attr("value", tf.constant(value, dtype))
        .build()
    )


def add(session: EagerSession, x: int = 2, y: int = 4) -> EagerOperation:
    return session.op_builder("Add").add_input(x).add_input(y).build()


# ---------------------------------------------------------------- EagerOperationTest


def test_const_output_has_dtype_and_shape(session) -> None:
    op = const(session, [[1, 2, 3], [4, 5, 6]])
    assert op.type == "Const"
    assert op.name == "const"
    assert op.num_outputs == 1
    assert op.dtype(0) == tf.int32
    assert op.shape(0) == tf.TensorShape([2, 3])
    output = op.output(0)
    assert (output.op, output.index) == (op, 0)
    assert output.dtype == tf.int32
    assert output.shape == tf.TensorShape([2, 3])
    assert output.tensor().numpy().tolist() == [[1, 2, 3], [4, 5, 6]]


def test_add_of_two_consts_is_a_scalar_int32(session) -> None:
    two, four = const(session, 2), const(session, 4)
    op = session.op_builder("Add", "add").add_input(two.output(0)).add_input(four.output(0)).build()
    assert op.dtype(0) == tf.int32
    assert op.shape(0) == tf.TensorShape([])
    assert op.tensor(0).numpy() == 6


def test_add_n_input_and_output_list_lengths(session) -> None:
    op = session.op_builder("AddN").add_input_list([const(session, 1).output(0), 2]).build()
    assert op.input_list_length("inputs") == 2
    assert op.output_list_length("sum") == 1
    assert op.tensor(0).numpy() == 3


def test_split_output_list_length(session) -> None:
    op = (
        session.op_builder("Split")
        .add_input(1)
        .add_input(tf.reshape(tf.range(8), [2, 4]))
        .set_attr("num_split", 2)
        .build()
    )
    assert op.input_list_length("split_dim") == 1
    assert op.input_list_length("value") == 1
    assert op.output_list_length("output") == 2
    assert op.num_outputs == 2
    assert op.tensor(1).numpy().tolist() == [[2, 3], [6, 7]]


@pytest.mark.parametrize("accessor", ["input_list_length", "output_list_length"])
def test_unknown_argument_names_are_rejected(session, accessor) -> None:
    op = session.op_builder("AddN").add_input_list([1, 2]).build()
    kind = accessor.split("_")[0]
    valid = "'inputs'" if kind == "input" else "'sum'"
    with pytest.raises(ValueError, match=rf"'AddN' has no {kind} argument named 'bogus'.*{valid}"):
        getattr(op, accessor)("bogus")


def test_unique_with_counts_has_three_outputs(session) -> None:
    op = session.op_builder("UniqueWithCountsV2").add_input([5, 5, 7]).add_input([0]).build()
    assert op.num_outputs == 3
    values = [op.tensor(i).numpy().tolist() for i in range(3)]
    assert values == [[5, 7], [0, 0, 1], [2, 1]]
    assert [op.output_list_length(name) for name in ("y", "idx", "count")] == [1, 1, 1]


ACCESSORS: dict[str, Callable[[EagerOperation], object]] = {
    "num_outputs": lambda op: op.num_outputs,
    "dtype": lambda op: op.dtype(0),
    "shape": lambda op: op.shape(0),
    "tensor": lambda op: op.tensor(0),
    "output": lambda op: op.output(0),
    "output_list_length": lambda op: op.output_list_length("z"),
    "input_list_length": lambda op: op.input_list_length("x"),
}


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
@pytest.mark.parametrize("accessor", list(ACCESSORS))
def test_operation_is_unusable_after_its_session_closes(make_session, strategy, accessor) -> None:
    session = make_session(strategy)
    op = add(session)
    ACCESSORS[accessor](op)  # usable while open
    session.close()
    with pytest.raises(SessionClosedError):
        ACCESSORS[accessor](op)
    assert (op.type, op.name) == ("Add", "Add")


def test_an_output_of_a_closed_session_is_unusable(make_session) -> None:
    first, second = make_session(), make_session()
    output = add(first).output(0)
    first.close()
    with pytest.raises(SessionClosedError):
        output.tensor()
    with pytest.raises(SessionClosedError):
        second.op_builder("Neg").add_input(output)


@pytest.mark.parametrize("accessor", ["dtype", "shape", "tensor", "output"])
@pytest.mark.parametrize("index", [1, -1, 7])
def test_output_index_out_of_range_raises_for_every_accessor(session, accessor, index) -> None:
    op = add(session)
    with pytest.raises(IndexError, match=rf"output index {index} is out of range.*'Add'.* 1 out"):
        getattr(op, accessor)(index)


def test_output_index_must_be_an_integer(session) -> None:
    with pytest.raises(TypeError):
        add(session).tensor("0")


# ---------------------------------------------------------------- EagerOperationBuilderTest


def test_op_builder_on_a_closed_session_fails(make_session) -> None:
    session = make_session()
    session.close()
    with pytest.raises(SessionClosedError):
        session.op_builder("Add")


BUILDER_CALLS: dict[str, Callable[[EagerOperationBuilder], object]] = {
    "set_attr": lambda b: b.set_attr("T", tf.int32),
    "add_input": lambda b: b.add_input(1),
    "add_input_list": lambda b: b.add_input_list([1]),
    "set_device": lambda b: b.set_device("/cpu:0"),
    "add_control_input": lambda b: b.add_control_input(None),
    "build": lambda b: b.build(),
}


@pytest.mark.parametrize("call", list(BUILDER_CALLS))
def test_a_builder_whose_session_closed_fails(make_session, call) -> None:
    session = make_session()
    builder = session.op_builder("Add").add_input(1).add_input(2)
    session.close()
    with pytest.raises(SessionClosedError):
        BUILDER_CALLS[call](builder)


def test_assert_with_an_input_list_builds(session) -> None:
    op = session.op_builder("Assert").add_input(True).add_input_list([1, "text"]).build()
    assert op.num_outputs == 0
    assert op.input_list_length("data") == 2
    with pytest.raises(tf.errors.InvalidArgumentError, match="assertion failed"):
        session.op_builder("Assert").add_input(False).add_input_list([1]).build()


def test_control_inputs_are_unsupported(session) -> None:
    other = add(session)
    builder = session.op_builder("Add")
    with pytest.raises(NotImplementedError, match="Control inputs"):
        builder.add_control_input(other)


def test_set_device_to_the_cpu_builds(session) -> None:
    op = session.op_builder("Add").add_input(1).add_input(2).set_device("/cpu:0").build()
    assert op.tensor(0).device.endswith("device:CPU:0")
    assert op.tensor(0).numpy() == 3


def test_a_malformed_device_is_rejected_naming_the_op(session) -> None:
    with pytest.raises(ValueError, match=r"op 'Add'.*'/bogus:0'"):
        session.op_builder("Add").set_device("/bogus:0")


def _conv2d(session: EagerSession) -> EagerOperation:
    return (
        session.op_builder("Conv2D")
        .add_input(tf.ones([1, 3, 3, 1]))
        .add_input(tf.ones([2, 2, 1, 1]))
        .set_attr("strides", [1, 1, 1, 1])
        .set_attr("padding", "VALID")
        .build()
    )


def _fifo_queue(session: EagerSession) -> EagerOperation:
    return (
        session.op_builder("FIFOQueueV2")
        .set_attr("component_types", [tf.int32, tf.float32])
        .set_attr("shapes", [[], tf.TensorShape([2])])
        .set_attr("capacity", 3)
        .build()
    )


ATTRIBUTE_CASES: dict[
    str, tuple[Callable[[EagerSession], EagerOperation], Callable[[EagerOperation], bool]]
] = {
    "dtype (Cast DstT)": (
        lambda s: s.op_builder("Cast").add_input([1, 2]).set_attr("DstT", tf.float32).build(),
        lambda op: op.dtype(0) == tf.float32 and op.tensor(0).numpy().tolist() == [1.0, 2.0],
    ),
    "tensor (Const value)": (
        lambda s: const(s, [[7, 8]], tf.int64),
        lambda op: op.dtype(0) == tf.int64 and op.tensor(0).numpy().tolist() == [[7, 8]],
    ),
    "int list and string (Conv2D strides, padding)": (
        _conv2d,
        lambda op: (
            op.shape(0) == tf.TensorShape([1, 2, 2, 1])
            and op.tensor(0).numpy().ravel().tolist() == [4.0] * 4
        ),
    ),
    "float list (Bucketize boundaries)": (
        lambda s: (
            s.op_builder("Bucketize")
            .add_input([-1.0, 1.0, 5.0])
            .set_attr("boundaries", [0.0, 2.0])
            .build()
        ),
        lambda op: op.tensor(0).numpy().tolist() == [0, 1, 2],
    ),
    "shape (EnsureShape shape)": (
        lambda s: (
            s.op_builder("EnsureShape")
            .add_input(tf.zeros([2, 3]))
            .set_attr("shape", [2, None])
            .build()
        ),
        lambda op: op.shape(0) == tf.TensorShape([2, 3]),
    ),
    "type list, shape list, int (FIFOQueueV2)": (
        _fifo_queue,
        lambda op: op.dtype(0) == tf.resource and op.shape(0) == tf.TensorShape([]),
    ),
    "bool (MatMul transpose_a)": (
        lambda s: (
            s.op_builder("MatMul")
            .add_input([[1.0, 2.0]])
            .add_input([[3.0, 4.0]])
            .set_attr("transpose_a", True)
            .build()
        ),
        lambda op: op.tensor(0).numpy().tolist() == [[3.0, 4.0], [6.0, 8.0]],
    ),
    "float (LeakyRelu alpha)": (
        lambda s: s.op_builder("LeakyRelu").add_input([-2.0, 3.0]).set_attr("alpha", 0.25).build(),
        lambda op: op.tensor(0).numpy().tolist() == [-0.5, 3.0],
    ),
}


@pytest.mark.parametrize("case", list(ATTRIBUTE_CASES))
def test_attributes_of_every_kind_are_accepted(session, case) -> None:
    build, check = ATTRIBUTE_CASES[case]
    op = build(session)
    assert check(op)


def test_a_shape_attribute_is_enforced(session) -> None:
    builder = session.op_builder("EnsureShape").add_input(tf.zeros([2, 3])).set_attr("shape", [3])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[Op:EnsureShape\]"):
        builder.build()


def test_an_unknown_op_type_raises_tensorflows_error_naming_it(session) -> None:
    with pytest.raises(tf.errors.NotFoundError, match="Op type not registered 'NoSuchOp'"):
        session.op_builder("NoSuchOp")


def test_an_unknown_attribute_is_rejected_naming_the_op_and_its_attributes(session) -> None:
    builder = session.op_builder("MatMul", "mm")
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"'MatMul' named 'mm' has no attribute 'bogus'.*'T'"
    ):
        builder.set_attr("bogus", 1)


def test_an_attribute_of_the_wrong_kind_raises_naming_the_op(session) -> None:
    builder = (
        session.op_builder("Split").add_input(0).add_input([1, 2]).set_attr("num_split", "two")
    )
    with pytest.raises(TypeError, match=r"op 'Split'.*num_split"):
        builder.build()


def test_an_attribute_value_the_kernel_rejects_raises_naming_the_op(session) -> None:
    builder = session.op_builder("Split").add_input(0).add_input([1, 2]).set_attr("num_split", 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[Op:Split\]"):
        builder.build()


def test_a_const_whose_value_mismatches_its_dtype_raises_naming_the_op(session) -> None:
    builder = (
        session.op_builder("Const")
        .set_attr("dtype", tf.float32)
        .set_attr("value", tf.constant([1, 2]))
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"(?s)^Type mismatch.*\[Op:Const\]$"):
        builder.build()


def test_a_missing_required_attribute_raises_naming_the_op(session) -> None:
    with pytest.raises(TypeError, match=r"op 'Split'.*num_split"):
        session.op_builder("Split").add_input(0).add_input([1, 2]).build()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda s: s.op_builder("Add").add_input(1).build(), r"takes 2 input.*\(x, y\).*1 were"),
        (
            lambda s: s.op_builder("Add").add_input(1).add_input(2).add_input(3).build(),
            "3 were added",
        ),
        (lambda s: s.op_builder("AddN").add_input(1).build(), "'inputs'.*takes a list"),
        (
            lambda s: s.op_builder("Add").add_input_list([1]).add_input(2).build(),
            "'x'.*takes one tensor",
        ),
    ],
    ids=["too few", "too many", "list expected", "tensor expected"],
)
def test_inputs_that_do_not_fit_the_op_are_rejected(session, build, message) -> None:
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        build(session)


def test_an_inferred_type_attribute_given_converts_the_inputs(session) -> None:
    op = session.op_builder("Add").add_input(2).add_input(4).set_attr("T", tf.float64).build()
    assert op.dtype(0) == tf.float64
    assert op.tensor(0).numpy() == 6.0
    op = session.op_builder("AddN").add_input_list([1, 2]).set_attr("T", tf.int64).build()
    assert op.dtype(0) == tf.int64


def test_an_inferred_attribute_that_contradicts_the_inputs_is_rejected(session) -> None:
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'N' of op 'AddN' is 3.*has 2"):
        session.op_builder("AddN").add_input_list([1, 2]).set_attr("N", 3).build()
    builder = session.op_builder("Add").add_input(tf.constant(1)).add_input(2)
    with pytest.raises(ValueError, match=r"op 'Add'.*float32.*int32"):
        builder.set_attr("T", tf.float32).build()


def test_a_renamed_python_argument_maps_by_position(session) -> None:
    # tf.raw_ops calls Squeeze's attribute squeeze_dims "axis", and Split's split_dim "axis".
    op = session.op_builder("Squeeze").add_input(tf.zeros([1, 2, 1])).set_attr("squeeze_dims", [0])
    assert op.build().shape(0) == tf.TensorShape([2, 1])


def test_a_builder_builds_once(session) -> None:
    builder = session.op_builder("Add").add_input(1).add_input(2)
    builder.build()
    with pytest.raises(RuntimeError, match="already built"):
        builder.build()


def test_a_failed_build_registers_nothing(session) -> None:
    before = session.stats().registered
    with pytest.raises(tf.errors.InvalidArgumentError):
        session.op_builder("Add").add_input(1).build()
    assert session.stats().registered == before
    assert add(session).tensor(0).numpy() == 6
    assert session.stats().registered == before + 1


def test_an_operation_is_not_an_input(session) -> None:
    with pytest.raises(TypeError, match=r"operation.output\(i\)"):
        session.op_builder("Neg").add_input(add(session))


def test_an_async_session_runs_ops() -> None:
    session = EagerSession.options().async_().resource_cleanup_strategy(ON_SAFE_POINTS).build()
    try:
        op = add(session, 20, 22)
        assert op.tensor(0).numpy() == 42
    finally:
        session.close()
    with pytest.raises(SessionClosedError):
        op.tensor(0)


@pytest.fixture
def graph_path(monkeypatch) -> None:
    """Make every op take the one-op-function path that ops with tensor attributes take."""
    original = operations.op_info

    def no_raw(op_type: str) -> OpInfo:
        return dataclasses.replace(original(op_type), raw=None)

    monkeypatch.setattr(operations, "op_info", no_raw)


@pytest.mark.usefixtures("graph_path")
def test_ops_run_as_a_function_keep_their_output_structure(session) -> None:
    op = session.op_builder("Split").add_input(0).add_input([1, 2, 3, 4]).set_attr("num_split", 2)
    op = op.build()
    assert op.output_list_length("output") == 2
    assert op.tensor(1).numpy().tolist() == [3, 4]
    op = session.op_builder("UniqueWithCountsV2").add_input([5, 5, 7]).add_input([0]).build()
    assert [op.output_list_length(n) for n in ("y", "idx", "count")] == [1, 1, 1]
    assert op.tensor(2).numpy().tolist() == [2, 1]
    op = session.op_builder("Add").add_input(2).add_input(4).set_attr("T", tf.float32).build()
    assert op.tensor(0).numpy() == 6.0


@pytest.mark.usefixtures("graph_path")
def test_ops_without_outputs_run_as_a_function_still_run(session) -> None:
    op = session.op_builder("Assert").add_input(True).add_input_list([1]).build()
    assert op.num_outputs == 0
    with pytest.raises(tf.errors.InvalidArgumentError, match="assertion failed"):
        session.op_builder("Assert").add_input(False).add_input_list([1]).build()


# ---------------------------------------------------------------- TensorTest


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_a_tensor_resolved_from_an_eager_op_is_released_when_its_session_closes(
    make_session, strategy, no_cyclic_gc
) -> None:
    session = make_session(strategy)
    op = const(session, [1, 2, 3])
    tensor = weakref.ref(op.tensor(0))
    assert tensor() is not None
    session.close()
    assert tensor() is None
    with pytest.raises(SessionClosedError):
        op.tensor(0)


# ---------------------------------------------------------------- ownership, with real garbage


def test_an_operation_dies_by_reference_counting_alone(session, no_cyclic_gc) -> None:
    op = add(session)
    dead = weakref.ref(op)
    del op
    assert dead() is None


def test_on_safe_points_frees_outputs_at_the_next_op_builder_only(
    make_session, no_cyclic_gc
) -> None:
    session = make_session(ON_SAFE_POINTS)
    op = add(session)
    tensor = weakref.ref(op.tensor(0))
    registered = session.stats().registered
    del op
    assert tensor() is not None, "freed before a safe point"
    assert session.stats().pending == 1
    session.op_builder("NoOp")
    assert tensor() is None
    stats = session.stats()
    assert (stats.deleted, stats.pending, stats.registered) == (1, 0, registered - 1)


def test_on_safe_points_frees_the_outputs_of_a_const(make_session, no_cyclic_gc) -> None:
    session = make_session(ON_SAFE_POINTS)
    op = const(session, [1.0, 2.0], tf.float32)
    tensor = weakref.ref(op.tensor(0))
    del op
    assert tensor() is not None
    session.op_builder("NoOp")
    assert tensor() is None


def test_on_session_close_frees_outputs_only_at_close(make_session, no_cyclic_gc) -> None:
    session = make_session(ON_SESSION_CLOSE)
    op = add(session)
    tensor = weakref.ref(op.tensor(0))
    del op
    session.op_builder("NoOp")
    add(session)
    assert tensor() is not None, "freed before close"
    assert session.stats().deleted == 0
    session.close()
    assert tensor() is None


def test_in_background_frees_outputs_soon(make_session, no_cyclic_gc) -> None:
    session = make_session(IN_BACKGROUND)
    op = add(session)
    tensor = weakref.ref(op.tensor(0))
    del op
    assert wait_until(lambda: tensor() is None), "outputs not freed within 2 s"
    assert wait_until(lambda: session.stats().deleted == 1)


def test_an_output_keeps_its_operation_and_tensor_alive(make_session, no_cyclic_gc) -> None:
    session = make_session(ON_SAFE_POINTS)
    op = add(session)
    output = op.output(0)
    operation, tensor = weakref.ref(op), weakref.ref(op.tensor(0))
    del op
    session.op_builder("NoOp")
    assert operation() is not None
    assert output.tensor().numpy() == 6
    del output
    assert operation() is None
    session.op_builder("NoOp")
    assert tensor() is None


def test_a_tensor_the_user_keeps_outlives_its_operation(make_session, no_cyclic_gc) -> None:
    session = make_session(ON_SAFE_POINTS)
    op = add(session)
    tensor = op.tensor(0)
    del op
    session.op_builder("NoOp")
    assert session.stats().deleted == 1
    assert tensor.numpy() == 6


def test_outputs_used_as_inputs_chain_ops(session) -> None:
    x = const(session, [1.0, -2.0], tf.float32)
    neg = session.op_builder("Neg").add_input(x.output(0)).build()
    total = session.op_builder("AddN").add_input_list([x.output(0), neg.output(0)]).build()
    assert total.tensor(0).numpy().tolist() == [0.0, 0.0]
    assert x.output(0) == x.output(0)
    assert x.output(0) != neg.output(0)
    assert len({x.output(0), x.output(0)}) == 1
    assert isinstance(x.output(0), Output)
    assert repr(x.output(0)) == "<Output const:0 (Const)>"
