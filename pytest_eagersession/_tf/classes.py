"""TensorFlow's classes as the tracker sees them: which kind each is, and where it keeps its handle.

The kinds are plain strings, defined here once (``kinds`` re-exports them). The classes come from
TensorFlow's private modules, imported on first use: the plugin never imports TensorFlow itself.
"""

from __future__ import annotations

import contextlib
import functools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_eagersession.heap.listing import family

TENSOR = "tensor"
RESOURCE_HANDLE = "resource handle"
VARIABLE = "variable"
ITERATOR = "iterator"
TABLE = "table"
RESOURCE = "resource"
FUNCTION = "function"


def search_roots() -> tuple[type, ...]:
    """Classes every resource is an instance of: eager tensors and trackable objects."""
    from tensorflow.python.framework.ops import EagerTensor
    from tensorflow.python.trackable.base import Trackable

    return (EagerTensor, Trackable)


def byte_holders() -> tuple[type, type]:
    """The classes whose instances hold the bytes a session watches: tensors, then variables."""
    from tensorflow.python.framework.ops import EagerTensor
    from tensorflow.python.ops.resource_variable_ops import BaseResourceVariable

    return (EagerTensor, BaseResourceVariable)


def byte_holder_types() -> tuple[type, frozenset[type]]:
    """EagerTensor, and it with every concrete resource variable class, for listings by exact type
    (a set lookup per object, not an MRO test). Made anew each time: an import may define a new
    kind of variable, and a caller holds the set only while it counts."""
    tensors, variables = byte_holders()
    return tensors, frozenset((tensors, *family(variables)))


@functools.cache
def tensor_measures() -> tuple[type, list[list[Callable[[Any], Any]]]]:
    """EagerTensor, and the C functions whose product is a tensor's bytes (``heap.measured``).

    The element count comes first: it raises for a half-built tensor (see ``tensor_built``)
    before the dtype's enum, which would read the missing handle, is asked for. Item sizes are
    looked up by enum in a table made once (cached: TensorFlow's class, no user's); an enum it
    lacks counts 0 bytes.
    """
    from tensorflow.core.framework.types_pb2 import DataType
    from tensorflow.python.framework.dtypes import as_dtype
    from tensorflow.python.framework.ops import EagerTensor

    sizes: defaultdict[int, int] = defaultdict(int)
    for enum in DataType.values():
        with contextlib.suppress(Exception):  # DT_INVALID has no dtype
            sizes[enum] = int(as_dtype(enum).size)
    return EagerTensor, [
        [EagerTensor._num_elements],
        [EagerTensor._datatype_enum, sizes.__getitem__],
    ]


def kind_bases() -> list[tuple[type, str]]:
    """``(class, kind)`` pairs, most specific first: an object's kind is its first base's."""
    from tensorflow.python.data.ops.iterator_ops import OwnedIterator
    from tensorflow.python.eager.polymorphic_function.polymorphic_function import Function
    from tensorflow.python.framework.ops import EagerTensor
    from tensorflow.python.ops.lookup_ops import LookupInterface
    from tensorflow.python.ops.variables import Variable
    from tensorflow.python.trackable.resource import CapturableResource

    return [
        (EagerTensor, TENSOR),
        (Variable, VARIABLE),
        (OwnedIterator, ITERATOR),
        (LookupInterface, TABLE),
        (CapturableResource, RESOURCE),
        (Function, FUNCTION),
    ]


@dataclass(frozen=True)
class HandleAttribute:
    """Where an object of one kind keeps the resource-handle tensor it owns."""

    read: str
    """The attribute to read the handle from (a variable's public ``handle``)."""
    replace: str
    """The attribute that holds it, to replace when the resource is destroyed."""


#: The one table of handle attributes, by kind; kinds not listed own no handle.
HANDLES = {
    VARIABLE: HandleAttribute(read="handle", replace="_handle"),
    ITERATOR: HandleAttribute(read="_iterator_resource", replace="_iterator_resource"),
    TABLE: HandleAttribute(read="_resource_handle", replace="_resource_handle"),
    RESOURCE: HandleAttribute(read="_resource_handle", replace="_resource_handle"),
}


def owned_handle(obj: Any, kind: str) -> Any:
    """The resource-handle tensor an object owns (a variable's ``handle``), or None."""
    attribute = HANDLES.get(kind)
    if attribute is None:
        return None
    try:
        return getattr(obj, attribute.read, None)
    except Exception:
        return None


def tensor_built(obj: Any) -> bool:
    """Whether the EagerTensor ``obj`` has its native handle yet.

    ``EagerTensor.__init__`` (``tf.constant`` of a Python value) tracks the object before it
    makes the handle: a collection that starts inside it lists the tensor half-built, and so
    does another thread that runs meanwhile (the collection's callbacks let it). Reading such
    a tensor's ``dtype`` dereferences the missing handle and crashes the process; the element
    count checks for it and raises. Nothing else about the tensor may be read before this.
    """
    try:
        obj._num_elements()
    except Exception:
        return False
    return True


def tensor_nbytes(obj: Any) -> int:
    """Bytes of an EagerTensor's buffer, 0 when unknown; cheap enough for the hot path.

    The element count comes first: it raises for a half-built tensor (see ``tensor_built``)
    before ``dtype`` is read.
    """
    try:
        return int(obj._num_elements()) * int(obj.dtype.size)
    except Exception:
        return 0


def variable_nbytes(obj: Any) -> int:
    """Bytes of a variable's buffer, 0 when unknown (strings, an unknown shape)."""
    try:
        elements = obj.shape.num_elements()
        dtype = obj.dtype
        if elements is None or dtype.name == "string":
            return 0
        return int(elements) * int(dtype.size)
    except Exception:
        return 0
