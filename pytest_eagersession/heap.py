"""Listing the heap without ever holding other code's objects while another thread can run.

``gc.get_objects()`` returns a list that holds a reference to every object in a generation,
including a tuple that another thread is still building from an iterator. If that thread
resumes while the list is alive, the tuple has two references, its resize fails, and CPython
raises ``SystemError`` in that thread's code. A Python loop over the list gives other threads
that chance at every iteration.

So the listing here is made, filtered and emptied inside one call into C (``list()`` consuming
a chain of C iterators): the interpreter only switches threads between bytecodes, and none runs
until the call returns what the filter kept. The filter is ``type.__subclasscheck__``, the C
subclass test, applied to each object's type: never a Python-level ``__instancecheck__``, and
never a question to the object (``isinstance`` asks a non-instance for its ``__class__``, which
may be a property: Python code, in the middle of the call). The collector is paused for the
call, so that no collection (and none of its Python callbacks) can start inside it.

Only the objects of the given classes come back; the caller may hold those.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import operator
import threading
import types
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any


def instances(classes: Sequence[type], generations: Sequence[int]) -> list[object]:
    """The gc-tracked objects of ``generations`` that are instances of one of ``classes``.

    An object of two of the classes comes back twice. The generations are listed in the same
    call, so no object can move from one to another in between.
    """
    if not classes or not generations:
        return []
    # A stream of heap listings, one per generation: two reads per class (the objects, and
    # their types for the test), then one that empties each listing.
    listings = itertools.tee(map(_GET_OBJECTS, generations), 2 * len(classes) + 1)
    selected = [
        itertools.compress(
            itertools.chain.from_iterable(objects),
            map(_subclass_test(cls), map(type, itertools.chain.from_iterable(kinds))),
        )
        for cls, objects, kinds in zip(classes, listings[0:-1:2], listings[1:-1:2], strict=True)
    ]
    # list.clear returns None: the emptying adds nothing to the result, but drops the listing's
    # references before the C call returns (tee keeps its last items buffered).
    emptied: filter[None] = filter(None, map(list.clear, listings[-1]))
    return _in_one_call(itertools.chain(*selected, emptied))


def _in_one_call(pipeline: Iterable[Any]) -> list[Any]:
    """``list(pipeline)``, with the collector paused so that none of its callbacks runs inside."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return list(pipeline)
    finally:
        if paused:
            gc.enable()


def referrers(objects: tuple[object, ...]) -> tuple[list[object], list[frozenset[int]]]:
    """What refers to ``objects``: the referrers other than tuples, and each tuple's item ids.

    A tuple that refers to one of them may be one another thread is still building, so tuples
    never come back: only the ids of what each one holds, which hold nothing. Made and filtered
    in one call into C, as ``instances`` lists the heap. The ``objects`` tuple itself is left
    out (before 3.13 the collector skips the tuple it is given; from 3.13 it is given a copy).
    A frozen heap hides its referrers: thaw it first (``OlderObjectsFrozen.thaw_all``).
    """
    if not objects:
        return [], []
    is_tuple = _subclass_test(tuple)
    listings = itertools.tee(itertools.starmap(_GET_REFERRERS, [objects]), 6)

    def flat(index: int) -> Iterable[object]:
        return itertools.chain.from_iterable(listings[index])

    # each tuple's item ids, as a frozenset made in C; then a marker; then the other referrers
    tuples = map(
        frozenset,
        map(
            partial(map, id),
            itertools.compress(
                flat(0),
                map(
                    operator.and_,
                    map(is_tuple, map(type, flat(1))),
                    map(operator.ne, map(id, flat(2)), itertools.repeat(id(objects))),
                ),
            ),
        ),
    )
    others = itertools.compress(flat(3), map(operator.not_, map(is_tuple, map(type, flat(4)))))
    emptied: filter[None] = filter(None, map(list.clear, listings[5]))
    found = _in_one_call(itertools.chain(tuples, (_MARKER,), others, emptied))
    split = next(index for index, item in enumerate(found) if item is _MARKER)
    held: list[frozenset[int]] = found[:split]
    return found[split + 1 :], held


_MARKER = object()


def instances_of(cls: type) -> list[object]:
    """The live instances of ``cls`` and of its subclasses.

    An instance of a class defined in Python refers to its class, so for such a class one pass
    over the heap for what refers to it and to its subclasses finds them all: cheaper than
    listing the heap (``instances``), which a class defined in C still needs.
    """
    if not cls.__flags__ & _HEAP_TYPE or not OlderObjectsFrozen.thaw_all():
        return instances([cls], (0, 1, 2))
    found, _ = referrers(family(cls))
    try:
        return only_instances(found, cls)
    finally:
        found.clear()


def family(cls: type) -> tuple[type, ...]:
    """``cls`` and every subclass of it, each once."""
    classes: list[type] = [cls]
    for kind in classes:  # grows as it goes
        classes.extend(sub for sub in type.__subclasses__(kind) if sub not in classes)  # type: ignore[var-annotated]
    return tuple(classes)


def only_instances(objects: Sequence[object], cls: type) -> list[object]:
    """The objects of ``objects`` that are instances of ``cls``, by their type's MRO alone."""
    test = _subclass_test(cls)
    return [obj for obj in objects if test(type(obj))]


#: ``Py_TPFLAGS_HEAPTYPE``: a class made by a class statement or ``type()``, not in C.
_HEAP_TYPE = 1 << 9


def _subclass_test(cls: type) -> partial[bool]:
    """``issubclass(kind, cls)`` by the MRO alone, in C.

    Applied to an object's type, never to the object: ``isinstance`` would ask an object that
    is not an instance for its ``__class__``, which runs Python code (a mock's property).
    """
    return partial(type.__subclasscheck__, cls)


def referents(objects: Sequence[object]) -> list[object]:
    """What ``objects`` refer to, as the walks from known roots follow it.

    A function leads to its closure cells' contents, its defaults and its ``__dict__``, a frame
    to its locals and the frame below it: never to their globals, builtins or code, from where
    everything would be reachable. Other objects lead to their gc referents. Forward walks are
    safe from other threads: a tuple still being built is referred to by nothing.
    """
    found: list[object] = []
    plain: list[object] = []
    for obj in objects:
        if isinstance(obj, types.FunctionType):
            for cell in obj.__closure__ or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    found.append(cell.cell_contents)
            found.extend((obj.__defaults__, obj.__kwdefaults__, obj.__dict__))
        elif isinstance(obj, types.FrameType):
            found.extend(
                child
                for child in gc.get_referents(obj)
                if child is not obj.f_globals
                and child is not obj.f_builtins
                and not isinstance(child, types.CodeType)
            )
        else:
            plain.append(obj)
    found.extend(gc.get_referents(*plain))
    return found


def reachable(
    roots: Iterable[object],
    *,
    limit: int,
    opaque: Callable[[object], bool],
    leaves: Callable[[object], bool] | None = None,
) -> set[int]:
    """Ids of what ``roots`` reach through ``referents``, not through ``opaque`` objects.

    Breadth first, up to about ``limit`` objects; the objects themselves are dropped. An object
    ``leaves`` accepts is reached but not walked through.
    """
    seen: set[int] = set()
    frontier = [root for root in roots if not opaque(root)]
    try:
        while frontier and len(seen) < limit:
            fresh = []
            for obj in frontier:
                if id(obj) not in seen:
                    seen.add(id(obj))
                    if leaves is None or not leaves(obj):
                        fresh.append(obj)
            frontier = [child for child in referents(fresh) if not opaque(child)]
            del fresh
    finally:
        frontier = []
    return seen


class OlderObjectsFrozen:
    """Keeps the objects older than a session out of the collector's way while it is active.

    ``gc.freeze()`` moves every object into a generation the collector never visits, so that a
    full collection at the session's end walks only what was made since: a few milliseconds
    instead of a few hundred with TensorFlow loaded. ``thaw()`` moves them back. Frozen
    objects are invisible to ``gc.get_objects()`` and ``gc.get_referrers()``, so while frozen
    those two are wrapped to thaw first: code that lists the heap (objgraph, TensorFlow's
    own leak checks) sees all of it, and the session just loses the shortcut.

    One freeze at a time, and never over one made by someone else (``gc.get_freeze_count()``).
    """

    _lock = threading.Lock()
    _holder: OlderObjectsFrozen | None = None

    def freeze(self) -> bool:
        """Freeze now, unless the heap is frozen already; True when this call froze it."""
        with OlderObjectsFrozen._lock:
            if OlderObjectsFrozen._holder is not None or gc.get_freeze_count():
                return False
            gc.freeze()
            OlderObjectsFrozen._holder = self
            gc.get_objects = _thawing(_GET_OBJECTS)
            gc.get_referrers = _thawing(_GET_REFERRERS)
            return True

    @property
    def frozen(self) -> bool:
        """Whether this holder's freeze is in force."""
        return OlderObjectsFrozen._holder is self

    def thaw(self) -> bool:
        """Undo this holder's freeze; True when it was in force."""
        return _thaw(self)

    @staticmethod
    def thaw_all() -> bool:
        """Undo whichever holder's freeze is in force; True when the heap is not frozen now."""
        _thaw(None)
        return gc.get_freeze_count() == 0


def _thaw(holder: OlderObjectsFrozen | None) -> bool:
    with OlderObjectsFrozen._lock:
        if OlderObjectsFrozen._holder is None or holder not in (None, OlderObjectsFrozen._holder):
            return False
        OlderObjectsFrozen._holder = None
        if getattr(gc.get_objects, "__wrapped__", None) is _GET_OBJECTS:
            gc.get_objects = _GET_OBJECTS
        if getattr(gc.get_referrers, "__wrapped__", None) is _GET_REFERRERS:
            gc.get_referrers = _GET_REFERRERS
        gc.unfreeze()
        return True


def _thawing(function: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    @functools.wraps(function)
    def thawed_first(*args: Any, **kwargs: Any) -> list[Any]:
        _thaw(None)
        return function(*args, **kwargs)

    return thawed_first


_GET_OBJECTS = gc.get_objects
_GET_REFERRERS = gc.get_referrers
