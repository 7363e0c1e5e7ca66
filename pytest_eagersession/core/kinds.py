"""Which Python objects are TensorFlow resources, and how to describe one in plain text."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from pytest_eagersession._tf import is_ready as tensorflow_ready
from pytest_eagersession._tf.classes import (
    FUNCTION,
    ITERATOR,
    RESOURCE,
    RESOURCE_HANDLE,
    TABLE,
    TENSOR,
    VARIABLE,
    kind_bases,
    owned_handle,
    search_roots,
    tensor_built,
    tensor_nbytes,
)
from pytest_eagersession.base.sizes import format_bytes
from pytest_eagersession.heap import listing as heap

__all__ = [
    "FUNCTION",
    "ITERATOR",
    "RESOURCE",
    "RESOURCE_HANDLE",
    "TABLE",
    "TENSOR",
    "VARIABLE",
    "Classifier",
    "Description",
    "describe",
    "owned_handle",
    "short_device",
    "tensor_nbytes",
    "tensorflow_ready",
]


class Classifier:
    """Maps an object to its kind of TensorFlow resource, or None; one dict lookup per type.

    The cache is keyed by the type's id and holds the type weakly (``unittest.mock`` makes a
    class per mock, whose calls record the test's objects): an entry goes when its type dies.
    """

    def __init__(self) -> None:
        self._by_type: dict[int, tuple[weakref.ref[type], str | None]] = {}
        self._bases: list[tuple[type, str]] | None = None
        self._roots: tuple[type, ...] | None = None

    def kind(self, obj: object) -> str | None:
        """The kind of ``obj`` (``TENSOR``, ``VARIABLE``, ...), or None if it is no resource."""
        cls = type(obj)
        entry = self._by_type.get(id(cls))
        if entry is not None and entry[0]() is cls:
            return entry[1]
        kind = None
        for base, base_kind in self._tf_bases():
            if issubclass(cls, base):
                kind = base_kind
                break
        key = id(cls)
        self._by_type[key] = (weakref.ref(cls, partial(_forget, self._by_type, key)), kind)
        return kind

    def find(self, generations: Sequence[int]) -> list[tuple[object, str]]:
        """``(object, kind)`` for each TensorFlow resource in the gc ``generations``."""
        kind_of = self.kind
        found = []
        for obj in heap.instances(self.search_roots(), generations):
            kind = kind_of(obj)
            if kind is not None:
                found.append((obj, kind))
        return found

    def search_roots(self) -> tuple[type, ...]:
        """The classes every TensorFlow resource is an instance of (imports TensorFlow's)."""
        if self._roots is None:
            self._roots = search_roots()
        return self._roots

    def _tf_bases(self) -> list[tuple[type, str]]:
        if self._bases is None:
            self._bases = kind_bases()
        return self._bases


def _forget(cache: dict[int, Any], key: int, ref: weakref.ref[type]) -> None:
    entry = cache.get(key)
    if entry is not None and entry[0] is ref:
        del cache[key]


@dataclass(frozen=True)
class Description:
    """What a resource is, as text and numbers only."""

    kind: str
    type: str
    dtype: str | None = None
    shape: str | None = None
    nbytes: int | None = None
    device: str | None = None
    name: str | None = None

    def summary(self) -> str:
        """One line: ``EagerTensor float32[1024,1024] 4.0 MiB on CPU:0``."""
        parts = [self.type.rsplit(".", 1)[-1]]
        if self.name:
            parts.append(repr(self.name))
        if self.dtype:
            parts.append(f"{self.dtype}{self.shape or ''}")
        if self.nbytes is not None:
            parts.append(format_bytes(self.nbytes))
        if self.device:
            parts.append(f"on {short_device(self.device)}")
        return " ".join(parts)


def describe(obj: Any, kind: str) -> Description:
    """Describe a live resource; never raises (a broken object gets its type only)."""
    type_name = f"{type(obj).__module__}.{type(obj).__qualname__}"
    try:
        return _describe(obj, kind, type_name)
    except Exception:
        return Description(kind=kind, type=type_name)


def _describe(obj: Any, kind: str, type_name: str) -> Description:
    if kind == TENSOR:
        if not tensor_built(obj):  # its constructor is still running: dtype would crash
            return Description(kind, type_name)
        dtype = obj.dtype
        if dtype.name == "resource":
            return Description(RESOURCE_HANDLE, type_name, "resource", None, None, obj.device)
        return Description(
            kind,
            type_name,
            dtype.name,
            _shape_text(obj.shape),
            _nbytes(dtype, obj.shape),
            obj.device,
        )
    if kind == VARIABLE:
        return Description(
            kind,
            type_name,
            obj.dtype.name,
            _shape_text(obj.shape),
            _nbytes(obj.dtype, obj.shape),
            obj.device,
            _short_variable_name(obj.name),
        )
    if kind == FUNCTION:
        return Description(kind, type_name, name=getattr(obj, "name", None))
    handle = owned_handle(obj, kind)
    return Description(kind, type_name, device=getattr(handle, "device", None))


def _shape_text(shape: Any) -> str:
    dims = shape.as_list() if shape.rank is not None else None
    if dims is None:
        return "[?]"
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


def _nbytes(dtype: Any, shape: Any) -> int | None:
    elements = shape.num_elements()
    if elements is None or dtype.name == "string":
        return None
    return int(elements) * int(dtype.size)


def _short_variable_name(name: str) -> str:
    return name[:-2] if name.endswith(":0") else name


def short_device(device: str) -> str:
    """``/job:localhost/replica:0/task:0/device:CPU:0`` becomes ``CPU:0``."""
    return device.rsplit("device:", 1)[-1] if device else device
