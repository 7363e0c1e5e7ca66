"""What an op type takes, from TensorFlow's op registry, looked up once a type.

The op builder (``operations``) binds inputs and attributes by the names of an op's
definition; it runs the op through its generated ``tf.raw_ops`` function where that function's
keywords line up with the definition, and as a function of its own otherwise.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

from pytest_eagersession import _tf
from pytest_eagersession._tf import opdefs

#: Attribute types a ``raw_ops`` function cannot take: such an op runs as a function.
TENSOR_ATTR_TYPES = frozenset({"tensor", "list(tensor)"})


@dataclass(frozen=True)
class OpInfo:
    """What a builder needs to know about an op type, looked up once per type."""

    op_def: Any
    attrs: dict[str, Any]
    """Attribute name to its ``OpDef.AttrDef``."""
    inferred: frozenset[str]
    """Attributes TensorFlow infers from the inputs."""
    raw: Any
    """The ``tf.raw_ops`` function, or None when the op must run as a function."""
    params: dict[str, str]
    """OpDef argument and attribute names to the ``raw`` function's keyword names."""


@functools.cache
def op_info(op_type: str) -> OpInfo:
    """What ``op_type`` takes; TensorFlow's ``NotFoundError`` where it is not registered."""
    tf = _tf.tensorflow()
    op_def = opdefs.op_def(op_type)
    if op_def is None:
        raise tf.errors.NotFoundError(
            None,
            None,
            f"Op type not registered '{op_type}' in this TensorFlow: "
            "make sure the op and its kernel are registered in this process",
        )
    inferred = frozenset(
        attr
        for arg in op_def.input_arg
        for attr in (arg.type_attr, arg.number_attr, arg.type_list_attr)
        if attr
    )
    attrs = {attr.name: attr for attr in op_def.attr}
    raw = getattr(tf.raw_ops, op_type, None)
    params: dict[str, str] = {}
    if raw is not None:
        params = raw_params(op_def, inferred, raw)
    if not params or any(attr.type in TENSOR_ATTR_TYPES for attr in op_def.attr):
        raw = None
    return OpInfo(op_def, attrs, inferred, raw, params)


def raw_params(op_def: Any, inferred: frozenset[str], raw: Any) -> dict[str, str]:
    """Map OpDef names onto a ``raw_ops`` function's keywords, or {} when they don't line up.

    Generated functions take the inputs in OpDef order (some renamed, e.g. ``split_dim`` to
    ``axis``), then the attributes not inferred: those without a default, then the rest.
    """
    names = [p for p in inspect.signature(raw).parameters if p != "name"]
    free = [attr for attr in op_def.attr if attr.name not in inferred]
    ordered = [a.name for a in free if not a.HasField("default_value")]
    ordered += [a.name for a in free if a.HasField("default_value")]
    expected = [arg.name for arg in op_def.input_arg] + ordered
    if len(names) != len(expected):
        return {}
    return dict(zip(expected, names, strict=True))


def is_list_arg(arg: Any) -> bool:
    """Whether an ``OpDef.ArgDef`` takes a list of tensors (a count or a list of types)."""
    return bool(arg.number_attr or arg.type_list_attr)


def attr_value(tf: Any, value: Any) -> Any:
    """A Python value for an ``AttrValue`` proto (an attribute's default)."""

    def convert(kind: str, item: Any) -> Any:
        if kind == "type":
            return tf.as_dtype(item)
        if kind == "shape":
            return tf.TensorShape(item)
        return item

    kind = value.WhichOneof("value")
    if kind == "list":
        for field in ("s", "i", "f", "b", "type", "shape", "tensor", "func"):
            items = getattr(value.list, field)
            if len(items):
                return [convert(field, item) for item in items]
        return []
    return convert(kind, getattr(value, kind))
