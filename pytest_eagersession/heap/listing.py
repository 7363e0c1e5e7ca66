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

Only the objects of the given classes come back; the caller may hold those. No function of
another library is ever called inside a listing: TensorFlow's C functions release the
interpreter now and then (``EagerTensor._num_elements`` does), so a caller that must ask them
something lists weak references (``of_types_weakly``) and asks each object alone
(``measured``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import operator
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any


def instances(classes: Sequence[type], generations: Sequence[int]) -> list[object]:
    """The gc-tracked objects of ``generations`` that are instances of one of ``classes``.

    Each comes back once, in the order of the listing. The generations are listed in the same
    call, so no object can move from one to another in between. While the boundary is drawn
    (``BOUNDARY``), frozen objects are in none of them: the three generations hold exactly what
    was made since it was drawn.
    """
    if not classes or not generations:
        return []
    return _in_one_call(_listing(classes, generations))


def instances_weakly(classes: Sequence[type], generations: Sequence[int]) -> list[weakref.ref[Any]]:
    """``instances``, as weak references (to those of classes whose instances take one), for a
    caller that runs Python code over them while other threads run: nothing it holds then
    keeps an object alive or shows as one of its referrers (``gc.get_referrers``)."""
    if not classes or not generations:
        return []
    return _in_one_call(_listing(classes, generations, weak=True))


def of_types_weakly(types: frozenset[type], generations: Sequence[int]) -> list[weakref.ref[Any]]:
    """``instances_weakly`` of the objects whose type is one of ``types`` exactly (each must
    take a weak reference): a set lookup per object where ``instances`` tests each class's MRO,
    twice as fast, for a caller that knows every concrete class it wants (``family``)."""
    if not types or not generations:
        return []
    return _in_one_call(_weak_selection(types, generations))


def of_types_weakly_apart(
    types: frozenset[type], generations: Sequence[int]
) -> list[list[weakref.ref[Any]]]:
    """``of_types_weakly`` of each of ``generations``, apart, listed in one call: no object can
    move from one to another in between."""
    steps: list[Iterable[Any]] = []
    for generation in generations:
        if steps:
            steps.append((_MARKER,))
        steps.append(_weak_selection(types, (generation,)))
    return _apart(_in_one_call(itertools.chain.from_iterable(steps)), len(generations))


def _weak_selection(types: frozenset[type], generations: Sequence[int]) -> Iterator[Any]:
    """The pipeline of ``of_types_weakly``, to consume inside one call (``_in_one_call``)."""
    listings = itertools.tee(map(_GET_OBJECTS, generations), 3)
    selected = itertools.compress(
        itertools.chain.from_iterable(listings[0]),
        map(types.__contains__, map(type, itertools.chain.from_iterable(listings[1]))),
    )
    emptied: filter[None] = filter(None, map(list.clear, listings[2]))
    return itertools.chain(map(weakref.ref, selected), emptied)


def ids(generations: Sequence[int]) -> set[int]:
    """The ids of the gc-tracked objects of ``generations``, listed in one call into C."""
    listings = itertools.tee(map(_GET_OBJECTS, generations), 2)
    emptied: filter[None] = filter(None, map(list.clear, listings[1]))
    return set(
        _in_one_call(itertools.chain(map(id, itertools.chain.from_iterable(listings[0])), emptied))
    )


def others(refs: Sequence[weakref.ref[Any]], cls: type) -> list[weakref.ref[Any]]:
    """The references of ``refs`` whose referent is not of exactly ``cls`` (dead ones too)."""
    kinds = map(type, map(weakref.ref.__call__, refs))
    return list(itertools.compress(refs, map(operator.is_not, kinds, itertools.repeat(cls))))


def measured(
    refs: Sequence[weakref.ref[Any]], cls: type, measures: Sequence[Sequence[Callable[[Any], Any]]]
) -> list[tuple[weakref.ref[Any], int]]:
    """``(reference, size)`` for each live referent of ``refs`` of exactly ``cls``, the size
    the product of ``measures``: each a chain of C functions applied in turn (the first to the
    object, each next to what the one before returned).

    Counted in C, one object at a time: while a measure runs, the object it measures is held
    by the call alone, never by a container that another thread could see. The measures are
    taken in order for each object, so the first can refuse (raise for) an object the others
    could not read; the count then ends with that exception.
    """
    if not refs or not measures:
        return []
    alive = map(weakref.ref.__call__, refs)
    mine = itertools.compress(refs, map(operator.is_, map(type, alive), itertools.repeat(cls)))
    copies = itertools.tee(mine, len(measures) + 1)

    def measure(index: int) -> Iterator[Any]:
        values: Iterator[Any] = map(weakref.ref.__call__, copies[index])
        for step in measures[index]:
            values = map(step, values)
        return values

    sizes = functools.reduce(partial(map, operator.mul), map(measure, range(len(measures))))
    return list(zip(copies[-1], sizes, strict=True))


def _listing(
    classes: Sequence[type],
    generations: Sequence[int],
    *,
    weak: bool = False,
) -> Iterator[Any]:
    """The lazy pipeline behind ``instances``, to consume inside one call (``_in_one_call``).

    It yields the instances (weak references to them if ``weak``, for the classes whose
    instances take one), then empties the listings (``list.clear`` returns None: nothing is
    yielded).
    """
    if weak:
        classes = [cls for cls in classes if cls.__weakrefoffset__]
    # A stream of heap listings, one per generation, read three times: the objects, their
    # types (for the test, one copy per class), and to empty each listing.
    listings = itertools.tee(map(_GET_OBJECTS, generations), 3)
    kinds = itertools.tee(map(type, itertools.chain.from_iterable(listings[1])), len(classes))
    tests = [map(_subclass_test(cls), copy) for cls, copy in zip(classes, kinds, strict=True)]
    wanted = functools.reduce(partial(map, operator.or_), tests) if tests else iter(())
    selected: Iterator[Any] = itertools.compress(itertools.chain.from_iterable(listings[0]), wanted)
    if weak:
        selected = map(weakref.ref, selected)
    emptied: filter[None] = filter(None, map(list.clear, listings[2]))
    return itertools.chain(selected, emptied)


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


def _weakly_referable(generations: Sequence[int]) -> Iterator[Any]:
    """A pipeline of weak references to the objects of ``generations`` whose type takes one,
    to consume inside one call (``_in_one_call``); it empties its listings."""
    listings = itertools.tee(map(_GET_OBJECTS, generations), 3)
    referable = map(WEAKREF_OFFSET, map(type, itertools.chain.from_iterable(listings[1])))
    selected = itertools.compress(itertools.chain.from_iterable(listings[0]), referable)
    emptied: filter[None] = filter(None, map(list.clear, listings[2]))
    return itertools.chain(map(weakref.ref, selected), emptied)


def _call(function: Callable[[], None]) -> filter[None]:
    """A pipeline step that calls ``function()`` (which returns None) and yields nothing."""
    return filter(None, itertools.starmap(function, ((),)))


def _apart(items: list[Any], parts: int) -> list[list[Any]]:
    """``items`` cut at its first ``parts - 1`` markers (``_MARKER``), in one pass: ``parts``
    lists, the last ones empty where markers are missing.

    ``list.index`` is C, and what comes before a marker (weak references, frozensets) compares
    with it by identity: no referent's ``__eq__`` runs.
    """
    apart: list[list[Any]] = []
    start = 0
    for _ in range(parts - 1):
        try:
            end = items.index(_MARKER, start)
        except ValueError:
            end = len(items)
        apart.append(items[start:end])
        start = end + 1
    apart.append(items[start:])
    return apart


def referrers(objects: tuple[object, ...]) -> tuple[list[object], list[frozenset[int]]]:
    """What refers to ``objects``: the referrers other than tuples, and each tuple's item ids.

    A tuple that refers to one of them may be one another thread is still building, so tuples
    never come back: only the ids of what each one holds, which hold nothing. Made and filtered
    in one call into C, as ``instances`` lists the heap, over the whole heap (``BOUNDARY``
    thaws it for that call). The ``objects`` tuple itself is left out (before 3.13 the
    collector skips the tuple it is given; from 3.13 it is given a copy). A heap that other
    code froze hides its referrers: ``whole_heap_visible()`` says whether it can be seen.
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
    found = BOUNDARY.whole(itertools.chain(tuples, (_MARKER,), others, emptied))
    held, others_found = _apart(found, 2)
    return others_found, held


_MARKER = object()


def instances_of(cls: type) -> list[object]:
    """The live instances of ``cls`` and of its subclasses.

    An instance of a class defined in Python refers to its class, so for such a class one pass
    over the heap for what refers to it and to its subclasses finds them all: cheaper than
    listing the heap (``instances``), which a class defined in C still needs.
    """
    if not cls.__flags__ & _HEAP_TYPE or not whole_heap_visible():
        return BOUNDARY.whole(_listing([cls], (0, 1, 2)))
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


def whole_heap_visible() -> bool:
    """Whether a listing of the heap (``referrers``) can see all of it.

    Frozen objects are in no generation the collector lists. The boundary's own freeze is
    thawed for each listing; one that other code made before it was drawn (Python 3.12.1
    starts with one) is not, and hides what it froze.
    """
    return BOUNDARY.drawn or gc.get_freeze_count() == 0


class Boundary:
    """``gc.freeze()`` as the line between the objects made before it and those made since.

    While the line is drawn, the collector's three generations hold exactly the gc-tracked
    objects made since, whatever collections ran in between, in whichever thread, and its
    permanent generation everything older: ``instances(classes, (0, 1, 2))`` lists what is
    new, and ``collect_new`` collects it alone, in a few milliseconds where a whole collection
    with TensorFlow loaded takes hundreds. ``draw`` moves the line to now, ``erase`` thaws.

    Other code's view of the heap stays whole. While the line is drawn, ``gc.get_objects``,
    ``gc.get_referrers`` and ``gc.collect`` (of the oldest generation) are replaced by versions
    that thaw the heap, run, and draw the line again, all in one call into C, in which no other
    thread runs; ``gc.freeze`` and ``gc.unfreeze`` draw it again (which freezes everything: a
    thaw waits until the line is erased). What was new before such a call is handed to
    ``adopt`` first: weak references to the instances of ``new_classes()``, which the caller
    sets (the tracker, so that each goes to the session it was made in).

    What the line's moves list comes back as weak references, never as the objects: their
    callers run Python code over them while other threads run.

    Each method takes ``lock``; the caller may hold it across several.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        """Held by every method; a caller that must see no other thread's change between two
        calls holds it across them."""
        self.new_classes: Callable[[], Sequence[type]] = tuple
        """The classes whose new instances ``adopt`` is given before a thaw; none by default."""
        self.adopt: Callable[[list[weakref.ref[Any]]], None] = _ignore
        """Takes weak references to the new instances listed before other code's thaw."""
        self._drawn = False
        self._thawed = False  # inside one of our thawing calls (a finalizer may call gc again)
        self._blocks = 0  # the interpreter's allocated blocks when the heap was last collected
        self._blocks_read_at = -COMPACTION_CHECK_EVERY  # young collections at the last reading
        self._frozen_new: list[weakref.ref[Any]] = []
        self._moves = 0

    @property
    def moves(self) -> int:
        """A count that changes as each freeze or thaw of ours begins and as it ends (odd while
        one is under way): a caller that saw the same even count before and after a listing
        of the generations knows that none moved objects out of them meanwhile."""
        return self._moves

    @contextlib.contextmanager
    def _moving(self) -> Iterator[None]:
        self._moves += 1
        try:
            yield
        finally:
            self._moves += 1

    @contextlib.contextmanager
    def _thawing(self) -> Iterator[None]:
        """Inside one of our thawing calls; the heap is frozen again however the call ends."""
        self._thawed = True
        try:
            yield
        except BaseException:
            _FREEZE()  # not in one call with the rest: an error's path
            raise
        finally:
            self._thawed = False

    def frozen_new(self) -> list[weakref.ref[Any]]:
        """Weak references to what was new, of the objects that take one, when a thaw (a call
        of ``whole`` or ``collect_whole(remember=True)``) froze it with the rest, since the line
        was drawn: the objects the young collection can no longer reach (``garbage``)."""
        with self.lock:
            self._frozen_new = [ref for ref in self._frozen_new if ref() is not None]
            return list(self._frozen_new)

    def _remember(self, refs: list[weakref.ref[Any]]) -> None:
        """Keep ``refs`` for ``frozen_new``, up to ``MAX_FROZEN_NEW`` in all."""
        room = MAX_FROZEN_NEW - len(self._frozen_new)
        if room < len(refs):
            self._frozen_new = [ref for ref in self._frozen_new if ref() is not None]
            room = MAX_FROZEN_NEW - len(self._frozen_new)
        self._frozen_new.extend(refs[: max(room, 0)])

    @property
    def drawn(self) -> bool:
        """Whether the line is drawn: the generations hold only what was made since."""
        return self._drawn

    def draw(self, classes: Sequence[type] = ()) -> list[weakref.ref[Any]]:
        """Draw the line now: weak references to the instances of ``classes`` made since it
        was last drawn.

        The listing and the freeze are one call into C: an object made in another thread
        meanwhile is either listed or made after the line. Not drawn before, nothing is listed
        (everything in the heap would be) and the line is drawn for the first time.
        """
        with self.lock, self._moving():
            self._frozen_new = []
            if not self._drawn:
                _FREEZE()
                self._drawn = True
                self._blocks = self._blocks or sys.getallocatedblocks()
                _replace_gc_functions(self)
                return []
            return _in_one_call(
                itertools.chain(_listing(classes, (0, 1, 2), weak=True), _call(_FREEZE))
            )

    def erase(self, classes: Sequence[type] = ()) -> list[weakref.ref[Any]]:
        """Thaw everything: weak references to the instances of ``classes`` made since the
        line was drawn."""
        with self.lock, self._moving():
            self._frozen_new = []
            if not self._drawn:
                return []
            found = _in_one_call(
                itertools.chain(_listing(classes, (0, 1, 2), weak=True), _call(_UNFREEZE))
            )
            self._drawn = False
            _restore_gc_functions()
            return found

    def collect_new(self) -> int | None:
        """Collect what was made since the line was drawn, alone: the number of objects
        collected, or None (nothing done) if the line is not drawn.

        ``gc.collect`` itself, not the replacement that collects the whole heap.
        """
        with self.lock:
            if not self._drawn:
                return None
            return _COLLECT(2)

    def collect_whole(
        self, classes: Sequence[type] = (), *, remember: bool = False
    ) -> tuple[int, list[weakref.ref[Any]]]:
        """Collect the whole heap and keep the line: the number collected, and weak references
        to what was new.

        What was new: the instances of ``classes`` made since the line was drawn that outlive
        the collection, and those made during it (by finalizers, or other threads while they
        ran). The listing, the thaw, the collection and the new line are one call into C; what
        was new is held only weakly during the collection, so that it can collect it. With
        ``remember`` (other code's collection), what was new is kept weakly for ``frozen_new``;
        without, the collection moves the line as ``draw`` does.
        """
        with self.lock, self._moving():
            if not self._drawn or self._thawed:
                return _COLLECT(2), []
            with self._thawing():
                items = _in_one_call(
                    itertools.chain(
                        _listing(classes, (0, 1, 2), weak=True),
                        (_MARKER,),
                        _weakly_referable((0, 1, 2)) if remember else (),
                        (_MARKER,),
                        _call(_UNFREEZE),
                        itertools.starmap(_COLLECT, ((2,),)),
                        _listing(classes, (0, 1), weak=True),  # made during it: all young
                        _call(_FREEZE),
                    )
                )
            self._blocks = sys.getallocatedblocks()
            refs, frozen, rest = _apart(items, 3)
            if remember:
                self._remember(frozen)
            else:
                self._frozen_new = []
            collected: int = rest[0]
            return collected, [*_alive(refs), *rest[1:]]

    def compaction_due(self) -> bool:
        """Whether the heap grew by a quarter since it was last collected whole (or the line was
        first drawn), by the interpreter's count of allocated blocks: its rule for its oldest
        generation, which it cannot apply to what the line keeps frozen. Weighed as often as it
        does (``COMPACTION_CHECK_EVERY``): the count walks every arena (0.1 ms with TensorFlow)."""
        young = gc.get_stats()[0]["collections"]
        if not self._drawn or young - self._blocks_read_at < COMPACTION_CHECK_EVERY:
            return False
        self._blocks_read_at = young
        return 4 * sys.getallocatedblocks() > 5 * self._blocks

    def whole(self, pipeline: Iterable[Any]) -> list[Any]:
        """``list(pipeline)`` in one call into C, over the whole heap: thawed for it if drawn."""
        with self.lock, self._moving():
            if not self._drawn or self._thawed:
                return _in_one_call(pipeline)
            with self._thawing():
                items = _in_one_call(
                    itertools.chain(
                        _listing(self.new_classes(), (0, 1, 2), weak=True),
                        (_MARKER,),
                        _weakly_referable((0, 1, 2)),
                        (_MARKER,),
                        _call(_UNFREEZE),
                        pipeline,
                        _call(_FREEZE),
                    )
                )
            refs, frozen, result = _apart(items, 3)
            self._remember(frozen)
            new = _alive(refs)
            if new:
                self.adopt(new)
            return result

    def _redraw(self) -> None:
        """``gc.freeze()`` or ``gc.unfreeze()`` called by other code while the line is drawn."""
        with self.lock:
            new = self.draw(self.new_classes())
            if new:
                self.adopt(new)

    def _collect(self) -> int:
        """``gc.collect()`` called by other code while the line is drawn: the whole heap."""
        with self.lock:
            collected, new = self.collect_whole(self.new_classes(), remember=True)
            if new:
                self.adopt(new)
            return collected


def _ignore(_: list[weakref.ref[Any]]) -> None:
    pass


def _alive(refs: list[Any]) -> list[weakref.ref[Any]]:
    """The weak references of ``refs`` whose objects are still alive."""
    alive = map(operator.is_not, map(weakref.ref.__call__, refs), itertools.repeat(None))
    return list(itertools.compress(refs, alive))


def _replace_gc_functions(boundary: Boundary) -> None:
    """While the line is drawn, other code's heap listings and collections see the whole heap."""

    def get_objects(generation: int | None = None) -> list[object]:
        if generation is not None and generation not in (0, 1, 2):
            return _GET_OBJECTS(generation)  # the interpreter's own error
        return boundary.whole(itertools.starmap(_GET_OBJECTS, ((generation,),)))[0]  # type: ignore[no-any-return]

    def get_referrers(*objects: object) -> list[object]:
        return boundary.whole(itertools.starmap(_GET_REFERRERS, (objects,)))[0]  # type: ignore[no-any-return]

    def collect(generation: int = 2) -> int:
        if generation != 2 or isinstance(generation, bool):
            return _COLLECT(generation)  # the young generations, or the interpreter's own error
        return boundary._collect()

    def freeze() -> None:
        boundary._redraw()

    def unfreeze() -> None:
        boundary._redraw()

    for name, replacement, original in (
        ("get_objects", get_objects, _GET_OBJECTS),
        ("get_referrers", get_referrers, _GET_REFERRERS),
        ("collect", collect, _COLLECT),
        ("freeze", freeze, _FREEZE),
        ("unfreeze", unfreeze, _UNFREEZE),
    ):
        functools.update_wrapper(replacement, original)
        setattr(gc, name, replacement)


def _restore_gc_functions() -> None:
    """Put back each of ``gc``'s functions that is still our replacement (not someone else's)."""
    for name, original in _GC_FUNCTIONS.items():
        if getattr(getattr(gc, name), "__wrapped__", None) is original:
            setattr(gc, name, original)


#: A type's ``__weakrefoffset__`` read through ``type``'s own descriptor: C alone, whatever
#: the metaclass (non-zero: its instances take weak references).
WEAKREF_OFFSET = type.__dict__["__weakrefoffset__"].__get__
#: Young collections between two readings of the heap's size (``compaction_due``).
COMPACTION_CHECK_EVERY = 10  # the interpreter's, between two of its middle generation
#: The most weak references ``frozen_new`` keeps; past that, the proof that needs them may fail
#: (and the whole heap is collected instead).
MAX_FROZEN_NEW = 50_000

_GET_OBJECTS = gc.get_objects
_GET_REFERRERS = gc.get_referrers
_COLLECT = gc.collect
_FREEZE = gc.freeze
_UNFREEZE = gc.unfreeze
_GC_FUNCTIONS = {
    "get_objects": _GET_OBJECTS,
    "get_referrers": _GET_REFERRERS,
    "collect": _COLLECT,
    "freeze": _FREEZE,
    "unfreeze": _UNFREEZE,
}

#: The process's one boundary (``gc.freeze`` is process-wide).
BOUNDARY = Boundary()
