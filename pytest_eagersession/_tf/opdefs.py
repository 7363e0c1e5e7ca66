"""TensorFlow's op registry and graph-building helper, for running one op by its type name."""

from __future__ import annotations

from typing import Any


def op_def(op_type: str) -> Any:
    """The registered ``OpDef`` of ``op_type``, or None when this TensorFlow has no such op."""
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get(op_type)


def apply_op(op_type: str, **arguments: Any) -> tuple[list[int | None], Any, Any]:
    """Add one op to the current graph: ``(list lengths per output argument, op, outputs)``."""
    from tensorflow.python.framework import op_def_library

    found, _, op, outputs = op_def_library._apply_op_helper(op_type, name=op_type, **arguments)
    return found, op, outputs


def is_tensor_proto(value: object) -> bool:
    """Whether ``value`` is a ``TensorProto`` already."""
    from tensorflow.core.framework import tensor_pb2

    return isinstance(value, tensor_pb2.TensorProto)
