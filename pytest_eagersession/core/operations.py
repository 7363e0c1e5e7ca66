"""Eager operations built in a session: ports of Java's EagerOperationBuilder and EagerOperation.

An ``EagerOperation`` owns its output tensors through a ``NativeReference`` whose referent is
the operation itself: when the operation becomes garbage, its session's cleanup strategy decides
when the outputs are dropped, and closing the session drops them all. TensorFlow is imported
when a builder is first made.
"""

from __future__ import annotations

import contextlib
import operator
import re
from collections.abc import Iterable
from typing import Any, NoReturn, Protocol

from pytest_eagersession import _tf
from pytest_eagersession._tf import opdefs
from pytest_eagersession.base.errors import SessionClosedError
from pytest_eagersession.core.op_types import (
    TENSOR_ATTR_TYPES,
    attr_value,
    is_list_arg,
    op_info,
)
from pytest_eagersession.core.references import NativeReference, ReferenceRegistry


class OperationSession(Protocol):
    """What operations and their builder need of a session (``EagerSession`` is one)."""

    @property
    def closed(self) -> bool:
        """Whether the session is closed."""
        ...

    @property
    def references(self) -> ReferenceRegistry:
        """The registry an operation's outputs join."""
        ...

    def check_open(self) -> None:
        """Raise ``SessionClosedError`` once the session is closed."""
        ...

    def execution_scope(self) -> contextlib.AbstractContextManager[None]:
        """Apply the session's execution mode and device policy to the ops run inside."""
        ...


class Output:
    """Output ``index`` of an ``EagerOperation``; keeping it keeps the operation alive."""

    __slots__ = ("_index", "_operation")

    def __init__(self, operation: EagerOperation, index: int) -> None:
        self._operation = operation
        self._index = index

    @property
    def op(self) -> EagerOperation:
        """The operation this is an output of."""
        return self._operation

    @property
    def index(self) -> int:
        """The position of this output among the operation's outputs."""
        return self._index

    @property
    def dtype(self) -> Any:
        """The output's ``tf.DType``."""
        return self._operation.dtype(self._index)

    @property
    def shape(self) -> Any:
        """The output's ``tf.TensorShape``."""
        return self._operation.shape(self._index)

    def tensor(self) -> Any:
        """The output's ``tf.Tensor``."""
        return self._operation.tensor(self._index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Output):
            return NotImplemented
        return self._operation is other._operation and self._index == other._index

    def __hash__(self) -> int:
        return hash((id(self._operation), self._index))

    def __repr__(self) -> str:
        return f"<Output {self._operation.name}:{self._index} ({self._operation.type})>"


class _OutputsReference(NativeReference):
    """Holds an operation's output tensors; ``delete()`` drops them."""

    def __init__(
        self, session: OperationSession, operation: EagerOperation, tensors: list[Any]
    ) -> None:
        self.tensors: list[Any] | None = tensors
        super().__init__(session, operation)

    def delete(self) -> None:
        """Drop the output tensors, so TensorFlow can free them."""
        self.tensors = None

    def __repr__(self) -> str:
        held = "released" if self.tensors is None else f"{len(self.tensors)} tensor(s)"
        return f"<_OutputsReference {held}>"


class EagerOperation:
    """An operation that has run eagerly in a session, and owns its output tensors.

    Made by ``EagerOperationBuilder.build()``. Once its session has closed, every accessor but
    ``type`` and ``name`` raises ``SessionClosedError``.
    """

    def __init__(
        self,
        session: OperationSession,
        op_type: str,
        name: str,
        tensors: list[Any],
        output_spans: dict[str, tuple[int, int]],
        input_lengths: dict[str, int],
    ) -> None:
        self._session = session
        self._type = op_type
        self._name = name
        self._output_spans = output_spans
        self._input_lengths = input_lengths
        # The tensors live only in the reference: when this operation dies, the session's
        # strategy decides when they are dropped.
        self._outputs = _OutputsReference(session, self, tensors)

    @property
    def type(self) -> str:
        """The op type, e.g. ``"Add"``."""
        return self._type

    @property
    def name(self) -> str:
        """The name given to the builder (the op type when none was)."""
        return self._name

    @property
    def num_outputs(self) -> int:
        """How many output tensors the operation has."""
        return len(self._tensors())

    def output_list_length(self, name: str) -> int:
        """How many tensors the output argument ``name`` has (1 for a single tensor)."""
        self._tensors()
        span = self._output_spans.get(name)
        if span is None:
            self._unknown_arg("output", name, self._output_spans)
        return span[1]

    def input_list_length(self, name: str) -> int:
        """How many tensors were given for the input argument ``name`` (1 for a single one)."""
        self._tensors()
        length = self._input_lengths.get(name)
        if length is None:
            self._unknown_arg("input", name, self._input_lengths)
        return length

    def dtype(self, index: int) -> Any:
        """The ``tf.DType`` of output ``index``."""
        return self._tensor_at(index).dtype

    def shape(self, index: int) -> Any:
        """The ``tf.TensorShape`` of output ``index``."""
        return self._tensor_at(index).shape

    def tensor(self, index: int) -> Any:
        """The ``tf.Tensor`` of output ``index``."""
        return self._tensor_at(index)

    def output(self, index: int) -> Output:
        """Output ``index``, to use as another operation's input."""
        self._tensor_at(index)
        return Output(self, operator.index(index))

    def _tensors(self) -> list[Any]:
        tensors = self._outputs.tensors
        if tensors is None or self._session.closed:
            raise SessionClosedError()
        return tensors

    def _tensor_at(self, index: int) -> Any:
        tensors = self._tensors()
        position = operator.index(index)
        if not 0 <= position < len(tensors):
            raise IndexError(
                f"output index {position} is out of range for op {_label(self._type, self._name)}"
                f", which has {len(tensors)} output(s)"
            )
        return tensors[position]

    def _unknown_arg(self, kind: str, name: str, known: Iterable[str]) -> NoReturn:
        names = ", ".join(repr(n) for n in known) or "none"
        raise ValueError(
            f"op {_label(self._type, self._name)} has no {kind} argument named {name!r}; "
            f"its {kind} arguments are: {names}"
        )

    def __repr__(self) -> str:
        return f"<EagerOperation {self._name!r} type={self._type}>"


class EagerOperationBuilder:
    """Builds and runs one eager operation (Java's ``EagerOperationBuilder``).

    Made by ``EagerSession.op_builder()``; the fluent methods return the builder, ``build()``
    runs the op.

    Inputs are added in the order of the op's input arguments. Type attributes TensorFlow infers
    from the inputs (``T``, ``N``, ...) may be left out; when given, inputs are converted to them.
    """

    def __init__(self, session: OperationSession, op_type: str, name: str | None = None) -> None:
        if not isinstance(op_type, str):
            raise TypeError(f"op_type must be a str, not {type(op_type).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, not {type(name).__name__}")
        self._session = session
        self._info = op_info(op_type)
        self._type = op_type
        self._name = op_type if name is None else name
        self._inputs: list[tuple[bool, Any]] = []
        self._attrs: dict[str, Any] = {}
        self._device: str | None = None
        self._built = False

    def add_input(self, value: Any) -> EagerOperationBuilder:
        """Add one tensor (an ``Output``, a ``tf.Tensor``, or anything TF converts) as the next
        input argument."""
        self._check_usable()
        self._inputs.append((False, _resolve(value)))
        return self

    def add_input_list(self, values: Iterable[Any]) -> EagerOperationBuilder:
        """Add a list of tensors as the next input argument (one that takes a list)."""
        self._check_usable()
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise TypeError(f"add_input_list takes an iterable, not {type(values).__name__}")
        self._inputs.append((True, [_resolve(value) for value in values]))
        return self

    def set_attr(self, name: str, value: Any) -> EagerOperationBuilder:
        """Set attribute ``name``: a bool, int, float, str, ``tf.DType``, shape, tensor, or a list
        of one kind."""
        self._check_usable()
        attr = self._info.attrs.get(name)
        if attr is None:
            names = ", ".join(repr(n) for n in self._info.attrs) or "none"
            raise _tf.tensorflow().errors.InvalidArgumentError(
                None,
                None,
                f"op {_label(self._type, self._name)} has no attribute {name!r}; "
                f"its attributes are: {names}",
            )
        if attr.type in TENSOR_ATTR_TYPES:
            try:
                if attr.type == "tensor":
                    value = _tensor_proto(value)
                else:
                    value = [_tensor_proto(item) for item in value]
            except (TypeError, ValueError) as error:
                _reraise_naming(error, self._type, self._name)
        self._attrs[name] = value
        return self

    def set_device(self, device: str) -> EagerOperationBuilder:
        """Run the operation on ``device`` (e.g. ``"/cpu:0"``)."""
        self._check_usable()
        if not isinstance(device, str):
            raise TypeError(f"device must be a str, not {type(device).__name__}")
        try:
            _tf.tensorflow().DeviceSpec.from_string(device)
        except ValueError as error:
            _reraise_naming(error, self._type, self._name)
        self._device = device
        return self

    def add_control_input(self, operation: object) -> EagerOperationBuilder:
        """Unsupported: eager ops run when built, so there is nothing to order."""
        self._check_usable()
        raise NotImplementedError("Control inputs are not supported in an eager session")

    def build(self) -> EagerOperation:
        """Run the operation now and return it; the builder cannot be used again."""
        self._check_usable()
        tf = _tf.tensorflow()
        try:
            bound, input_lengths = self._bind_inputs(tf)
            attrs = self._apply_inferred_attrs(tf, bound)
            with self._session.execution_scope(), _device_scope(tf, self._device):
                if self._info.raw is not None:
                    tensors, spans = self._run_raw(bound, attrs)
                else:
                    tensors, spans = self._run_in_graph(tf, bound, attrs)
        except (TypeError, ValueError) as error:
            _reraise_naming(error, self._type, self._name)
        except tf.errors.OpError as error:
            label = _label(self._type, self._name)
            if f"[Op:{self._type}]" in error.message or f"op {label}" in error.message:
                raise
            raise type(error)(error.node_def, error.op, f"op {label}: {error.message}") from error
        operation = EagerOperation(
            self._session, self._type, self._name, tensors, spans, input_lengths
        )
        self._built = True
        self._inputs = []
        self._attrs = {}
        return operation

    # ----------------------------------------------------------------- internals

    def _check_usable(self) -> None:
        self._session.check_open()
        if self._built:
            raise RuntimeError(f"op {_label(self._type, self._name)} was already built")

    def _bind_inputs(self, tf: Any) -> tuple[dict[str, Any], dict[str, int]]:
        """Match the added inputs, in order, to the op's input arguments."""
        args = self._info.op_def.input_arg
        if len(self._inputs) != len(args):
            names = ", ".join(arg.name for arg in args) or "none"
            raise tf.errors.InvalidArgumentError(
                None,
                None,
                f"op {_label(self._type, self._name)} takes {len(args)} input argument(s) "
                f"({names}), but {len(self._inputs)} were added",
            )
        bound: dict[str, Any] = {}
        lengths: dict[str, int] = {}
        for arg, (is_list, value) in zip(args, self._inputs, strict=True):
            if is_list != is_list_arg(arg):
                wanted = "a list (add_input_list)" if not is_list else "one tensor (add_input)"
                raise tf.errors.InvalidArgumentError(
                    None,
                    None,
                    f"input argument {arg.name!r} of op {_label(self._type, self._name)} "
                    f"takes {wanted}",
                )
            bound[arg.name] = value
            lengths[arg.name] = len(value) if is_list else 1
        return bound, lengths

    def _apply_inferred_attrs(self, tf: Any, bound: dict[str, Any]) -> dict[str, Any]:
        """Check the given inferred attributes against the inputs and convert to their types.

        Returns the attributes left to pass to TensorFlow (inferred ones removed).
        """
        attrs = dict(self._attrs)
        label = _label(self._type, self._name)
        for arg in self._info.op_def.input_arg:
            value = bound[arg.name]
            if arg.number_attr in attrs and len(value) != attrs[arg.number_attr]:
                raise tf.errors.InvalidArgumentError(
                    None,
                    None,
                    f"attribute {arg.number_attr!r} of op {label} is {attrs[arg.number_attr]}, "
                    f"but input argument {arg.name!r} has {len(value)} tensor(s)",
                )
            if arg.type_attr in attrs:
                dtype = tf.as_dtype(attrs[arg.type_attr])
                if is_list_arg(arg):
                    bound[arg.name] = [tf.convert_to_tensor(v, dtype=dtype) for v in value]
                else:
                    bound[arg.name] = tf.convert_to_tensor(value, dtype=dtype)
            if arg.type_list_attr in attrs:
                dtypes = [tf.as_dtype(d) for d in attrs[arg.type_list_attr]]
                if len(dtypes) != len(value):
                    raise tf.errors.InvalidArgumentError(
                        None,
                        None,
                        f"attribute {arg.type_list_attr!r} of op {label} lists {len(dtypes)} "
                        f"type(s), but input argument {arg.name!r} has {len(value)} tensor(s)",
                    )
                bound[arg.name] = [
                    tf.convert_to_tensor(v, dtype=d) for v, d in zip(value, dtypes, strict=True)
                ]
        for name in self._info.inferred:
            attrs.pop(name, None)
        return attrs

    def _run_raw(
        self, bound: dict[str, Any], attrs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, tuple[int, int]]]:
        """Run through ``tf.raw_ops``, TensorFlow's eager entry point for every op it wraps."""
        info = self._info
        kwargs = {info.params[name]: value for name, value in bound.items()}
        kwargs.update((info.params[name], value) for name, value in attrs.items())
        result = info.raw(**kwargs, name=self._name)
        args = info.op_def.output_arg
        per_arg = [result] if len(args) == 1 else list(result or ())
        tensors: list[Any] = []
        spans: dict[str, tuple[int, int]] = {}
        for arg, value in zip(args, per_arg, strict=True):
            start = len(tensors)
            if is_list_arg(arg):
                tensors.extend(value)
            else:
                tensors.append(value)
            spans[arg.name] = (start, len(tensors) - start)
        return tensors, spans

    def _run_in_graph(
        self, tf: Any, bound: dict[str, Any], attrs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, tuple[int, int]]]:
        """Run an op that eager Python cannot (tensor attributes, no ``raw_ops`` function) as a
        one-op function."""
        op_def = self._info.op_def
        for attr in op_def.attr:
            missing = attr.name not in attrs and attr.name not in self._info.inferred
            if missing and attr.HasField("default_value"):
                attrs[attr.name] = attr_value(tf, attr.default_value)
        structure: list[int | None] = []

        def body() -> list[Any]:
            found, op, outputs = opdefs.apply_op(self._type, **bound, **attrs)
            structure.extend(found)
            if outputs:
                return list(outputs)
            with tf.control_dependencies([op]):  # make the function run a no-output op
                return [tf.identity(tf.constant(0))]

        function = tf.compat.v1.wrap_function(body, signature=[])
        try:
            result = function()
        except tf.errors.OpError as error:
            # Keep the kernel's own words, not the trace of where the function was built.
            message = re.sub(r"\[Op:__inference_\w+\]", f"[Op:{self._type}]", error.message)
            if message.startswith("Graph execution error"):
                message = message.rsplit("\n\n", 1)[-1]
            raise type(error)(error.node_def, error.op, message) from error
        tensors = list(result) if op_def.output_arg else []
        spans: dict[str, tuple[int, int]] = {}
        start = 0
        for arg, length in zip(op_def.output_arg, structure, strict=True):
            count = 1 if length is None else length
            spans[arg.name] = (start, count)
            start += count
        return tensors, spans


def _resolve(value: Any) -> Any:
    """An ``Output`` becomes its tensor; anything else goes to TensorFlow as it is."""
    if isinstance(value, Output):
        return value.tensor()
    if isinstance(value, EagerOperation):
        raise TypeError(f"pass an output of {value!r} (operation.output(i)), not the operation")
    return value


def _tensor_proto(value: Any) -> Any:
    if opdefs.is_tensor_proto(value):
        return value
    return _tf.tensorflow().make_tensor_proto(_resolve(value))


def _device_scope(tf: Any, device: str | None) -> contextlib.AbstractContextManager[Any]:
    return tf.device(device) if device is not None else contextlib.nullcontext()


def _label(op_type: str, name: str) -> str:
    return repr(op_type) if name == op_type else f"{op_type!r} named {name!r}"


def _reraise_naming(error: Exception, op_type: str, name: str) -> NoReturn:
    """Raise ``error`` again with the op named, keeping its class where that is possible."""
    if type(error) in (TypeError, ValueError):
        raise type(error)(f"op {_label(op_type, name)}: {error}") from error
    raise error
