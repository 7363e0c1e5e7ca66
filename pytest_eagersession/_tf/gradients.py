"""Gradients that ``tf.GradientTape.gradient`` returns for several sources at once.

Where a backward function hands its gradient on unchanged to several sources (the sum
``a + b``: its gradient is each addend's), the tape returns one tensor object for all of them,
and TensorFlow's C++ side of ``gradient()`` keeps one reference too many to that object: it is
never freed, whatever Python does (seen eagerly with TensorFlow 2.21, one tensor per call, the
size of the target; not inside a ``tf.function``, whose gradients are graph tensors). Nothing
in Python holds it, so a walk from the roots finds no holder.

``watch()`` wraps ``imperative_grad.imperative_grad``, which every ``gradient()`` calls, once
per process, so that each object returned so is remembered, weakly, with how many sources it
was returned for and a sequence number; ``shared(since)`` lists those still alive, newer than
``since`` (``latest()`` before the code to watch).
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections import Counter
from typing import Any

_MODULE = "tensorflow.python.eager.imperative_grad"
#: The wrapper's attribute that holds what it remembered: found through TensorFlow's module, so
#: that a second copy of this module (a test run inside a test run) reads the one record.
_RECORD = "_eagersession_shared_gradients"
#: Entries kept before the dead ones are dropped.
_PRUNE_ABOVE = 1024
#: Held while the wrapper is installed: two threads' first sessions must not wrap it twice.
_INSTALLING = threading.Lock()


class _Record:
    """The objects returned for several sources, by id: a weak reference, the sources, a seq."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[int, tuple[weakref.ref[Any], int, int]] = {}
        self.seq = 0

    def note(self, result: list[Any]) -> None:
        counts = Counter(id(item) for item in result if item is not None)
        shared = {id(item): item for item in result if counts[id(item)] > 1}
        if not shared:
            return
        with self.lock:
            for key, item in shared.items():
                known = self.entries.get(key)
                if known is not None and known[0]() is item:
                    continue
                try:
                    ref = weakref.ref(item)
                except TypeError:  # an object without weak references: not remembered
                    continue
                self.seq += 1
                self.entries[key] = (ref, counts[key], self.seq)
            if len(self.entries) > _PRUNE_ABOVE:
                for key in [key for key, entry in self.entries.items() if entry[0]() is None]:
                    del self.entries[key]


def _record() -> _Record | None:
    module = sys.modules.get(_MODULE)
    record = getattr(getattr(module, "imperative_grad", None), _RECORD, None)
    # this module's _Record, or another copy's (a test run inside a test run imports us again)
    return record if type(record).__name__ == _Record.__name__ else None


def watch() -> None:
    """Remember the objects ``gradient()`` returns for several sources (once TensorFlow is in)."""
    with _INSTALLING:
        module = sys.modules.get(_MODULE)
        function = getattr(module, "imperative_grad", None)
        if function is None or hasattr(function, _RECORD):
            return
        record = _Record()

        @functools.wraps(function)
        def imperative_grad(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            if type(result) is list and len(result) > 1:
                record.note(result)
            return result

        setattr(imperative_grad, _RECORD, record)
        module.imperative_grad = imperative_grad  # type: ignore[union-attr]


def latest() -> int:
    """The sequence number of the latest object remembered (0: none yet)."""
    record = _record()
    return record.seq if record is not None else 0


def shared(since: int = 0) -> list[tuple[object, int]]:
    """Each object still alive that ``gradient()`` returned for several sources after
    ``since`` (a ``latest()``), and for how many."""
    record = _record()
    if record is None:
        return []
    with record.lock:
        entries = [entry for entry in record.entries.values() if entry[2] > since]
    alive = []
    for ref, count, _ in entries:
        obj = ref()
        if obj is not None:
            alive.append((obj, count))
    return alive
