"""Tracked bytes: the buffers of the tensors and variables made while counting, while alive.

Op outputs are seen at once (an op callback). Other tensors and variables are listed, weakly,
when a collection of the youngest gc generation starts, and measured at the next op or when
counting stops: a collection can start inside any allocation, TensorFlow's own C code
included (a tensor's constructor, say), where asking TensorFlow about a tensor may read a
state it is still building; the next op's callback and ``stop`` run where the user's Python
code could ask the same. Each counted object is held by a weak reference whose callback takes
its bytes off.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import heapq
import threading
import weakref
from collections.abc import Callable
from typing import Any

from pytest_eagersession._tf.classes import byte_holder_types, variable_nbytes
from pytest_eagersession.assertions.findings import LargeObject
from pytest_eagersession.core.kinds import (
    TENSOR,
    VARIABLE,
    describe,
    tensor_nbytes,
    tensorflow_ready,
)
from pytest_eagersession.core.survivors import op_callback
from pytest_eagersession.core.tracking import user_code_location
from pytest_eagersession.heap import listing as heap

_LISTED_PRUNE_ABOVE = 4096
"""Listed references kept before the dead ones among them are dropped (no op ran meanwhile)."""


class _Entry:
    __slots__ = ("kind", "nbytes", "ref", "site")

    def __init__(self, ref: weakref.ref[Any], nbytes: int, kind: str, site: str | None) -> None:
        self.ref = ref
        self.nbytes = nbytes
        self.kind = kind
        self.site = site


class TrackedBytes:
    """The current and peak tracked bytes between ``start`` and ``stop``.

    Past ``snapshot_above`` bytes it notes the ``largest`` objects alive at the peak (again
    each time the peak grows by a sixteenth), with the line that made each.
    """

    def __init__(self, snapshot_above: int | None, largest: int) -> None:
        self._snapshot_above = snapshot_above
        self._largest = largest
        self._entries: dict[int, _Entry] = {}
        self._ignored: dict[int, weakref.ref[Any]] = {}
        self._listed: list[weakref.ref[Any]] = []
        """Listed by a collection's start, to measure at the next op or at ``stop``."""
        self._tensor_type: type | None = None
        self._types: frozenset[type] = frozenset()
        """While running: EagerTensor and every resource variable class, for exact-type listings
        (a set lookup per object, not an MRO test); dropped at ``stop``."""
        self._lock = threading.RLock()
        self.current = 0
        self.peak = 0
        self.made = 0
        """How many tensors and variables with a buffer were counted (alive or not)."""
        self._snapshot: list[tuple[int, str, weakref.ref[Any]]] = []
        self.snapshot_peak = 0
        self.running = False
        self._stack: contextlib.ExitStack | None = None

    def largest_at_peak(self) -> list[LargeObject]:
        """The largest objects alive at the last snapshot of the peak."""
        return [
            LargeObject(nbytes, summary, ref() is not None)
            for nbytes, summary, ref in self._snapshot
        ]

    def start(self) -> None:
        """Start counting; what is alive already is not counted."""
        self.running = True
        stack = contextlib.ExitStack()
        self._stack = stack
        if self._know_types():
            self._ignore_young()
            stack.enter_context(op_callback(self._on_op))
        gc.callbacks.append(self._on_collection)
        stack.callback(_remove_callback, self._on_collection)

    def stop(self) -> None:
        """Count what the last collection did not see, then stop counting."""
        try:
            self._measure_listed()
            self._scan()
        finally:
            self.running = False
            stack, self._stack = self._stack, None
            if stack is not None:
                stack.close()
            with self._lock:
                self._entries.clear()  # the weak references die first: no callback fires later
                self._ignored.clear()
                self._listed.clear()
                self._tensor_type, self._types = None, frozenset()

    def _know_types(self) -> bool:
        if not self._types and tensorflow_ready():
            tensors, types = byte_holder_types()
            with self._lock:  # ``stop`` clears them under the lock: none is kept after it
                if self.running:
                    self._tensor_type, self._types = tensors, types
        return bool(self._types)

    def _ignore_young(self) -> None:
        for ref in heap.of_types_weakly(self._types, (0, 1)):
            obj = ref()
            if obj is not None:
                self._ignored[id(obj)] = ref
            del obj

    def _on_op(
        self,
        op_type: Any,
        inputs: Any,
        attrs: Any,
        outputs: Any,
        op_name: Any = None,
        graph: Any = None,
    ) -> None:
        if not self.running:
            return
        if self._listed:
            self._measure_listed()
        if graph is not None or not outputs:
            return
        site: str | None = None
        for output in outputs:
            nbytes = tensor_nbytes(output)
            if nbytes:
                if site is None and self._snapshot_above is not None:
                    op = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
                    where = user_code_location()
                    site = f"made by {op}" + (f" at {where}" if where else "")
                self._add(output, TENSOR, nbytes, site)

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start" and self.running:
            with contextlib.suppress(Exception):
                self._list_young()

    def _list_young(self) -> None:
        """Weak references to the young tensors and variables; nothing of TensorFlow's is read."""
        if not self._know_types():
            return
        young = heap.of_types_weakly(self._types, (0,))
        with self._lock:
            if len(self._listed) > _LISTED_PRUNE_ABOVE:  # no op for a long while: drop the dead
                self._listed = [ref for ref in self._listed if ref() is not None]
            self._listed.extend(young)

    def _measure_listed(self) -> None:
        with self._lock:
            listed, self._listed = self._listed, []
        self._measure_each(listed)

    def _scan(self) -> None:
        if self._know_types():
            self._measure_each(heap.of_types_weakly(self._types, (0,)))

    def _measure_each(self, refs: list[weakref.ref[Any]]) -> None:
        for ref in refs:
            obj = ref()
            if obj is None:
                continue
            if type(obj) is self._tensor_type:
                kind, nbytes = TENSOR, tensor_nbytes(obj)
            else:
                kind, nbytes = VARIABLE, variable_nbytes(obj)
            if nbytes:
                self._add(obj, kind, nbytes, None)
            del obj

    def _add(self, obj: object, kind: str, nbytes: int, site: str | None) -> None:
        key = id(obj)
        with self._lock:
            ignored = self._ignored.get(key)
            if ignored is not None:
                if ignored() is obj:
                    return
                del self._ignored[key]
            entry = self._entries.get(key)
            if entry is not None and entry.ref() is obj:
                return
            try:
                ref = weakref.ref(obj, functools.partial(self._dead, key))
            except TypeError:
                return
            self._entries[key] = _Entry(ref, nbytes, kind, site)
            self.made += 1
            self.current += nbytes
            if self.current > self.peak:
                self.peak = self.current
                self._maybe_snapshot()

    def _dead(self, key: int, ref: weakref.ref[Any]) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.ref is ref:
                del self._entries[key]
                self.current -= entry.nbytes

    def _maybe_snapshot(self) -> None:
        above = self._snapshot_above
        if above is None or self.peak <= above:
            return
        if self._snapshot and self.peak < self.snapshot_peak + self.snapshot_peak // 16:
            return
        entries = list(self._entries.values())  # a collection in between may change the dict
        largest = heapq.nlargest(self._largest, entries, key=lambda e: e.nbytes)
        del entries
        snapshot = []
        for entry in largest:
            obj = entry.ref()
            if obj is None:
                continue
            summary = f"{entry.kind}: {describe(obj, entry.kind).summary()}"
            if entry.site:
                summary += f", {entry.site}"
            snapshot.append((entry.nbytes, summary, entry.ref))
            del obj
        self._snapshot = snapshot
        self.snapshot_peak = self.peak


def _remove_callback(callback: Callable[[str, dict[str, int]], None]) -> None:
    for index in range(len(gc.callbacks) - 1, -1, -1):
        if gc.callbacks[index] == callback:
            del gc.callbacks[index]
            return
