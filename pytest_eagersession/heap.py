"""Listing the heap without ever holding other code's objects while another thread can run.

``gc.get_objects()`` returns a list that holds a reference to every object in a generation,
including a tuple that another thread is still building from an iterator. If that thread
resumes while the list is alive, the tuple has two references, its resize fails, and CPython
raises ``SystemError`` in that thread's code. A Python loop over the list gives other threads
that chance at every iteration.

So the listing here is made, filtered and emptied inside one call into C (``list()`` consuming
a chain of C iterators): the interpreter only switches threads between bytecodes, and none runs
until the call returns what the filter kept. The filter is ``type.__instancecheck__``, the C
subclass test, never a Python-level ``__instancecheck__``. The collector is paused for the call,
so that no collection (and none of its Python callbacks) can start inside it.

Only the objects of the given classes come back; the caller may hold those.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Sequence
from functools import partial


def instances(classes: Sequence[type], generations: Sequence[int]) -> list[object]:
    """The gc-tracked objects of ``generations`` that are instances of one of ``classes``.

    An object of two of the classes comes back twice. The generations are listed in the same
    call, so no object can move from one to another in between.
    """
    if not classes or not generations:
        return []
    # A stream of heap listings, one per generation; each is read once per class, then emptied.
    listings = itertools.tee(map(gc.get_objects, generations), len(classes) + 1)
    selected = [
        itertools.chain.from_iterable(map(partial(filter, _instance_test(cls)), listing))
        for cls, listing in zip(classes, listings[:-1], strict=True)
    ]
    # list.clear returns None: the emptying adds nothing to the result, but drops the listing's
    # references before the C call returns (tee keeps its last items buffered).
    emptied: filter[None] = filter(None, map(list.clear, listings[-1]))
    pipeline = itertools.chain(*selected, emptied)
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return list(pipeline)
    finally:
        if paused:
            gc.enable()


def _instance_test(cls: type) -> partial[bool]:
    """``isinstance(obj, cls)`` by the MRO alone, in C (no metaclass hook runs)."""
    return partial(type.__instancecheck__, cls)
