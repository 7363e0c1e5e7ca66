"""Collecting the cyclic garbage a session made, by the bytes its tensors hold: ``GarbageWatch``.

Reference counting frees most tensors at once; a tensor held in a reference cycle (a model that
points back at itself, a closure over its own frame, a callback holding its owner) waits for the
collector, which counts allocations, not bytes, and promotes live cycles into generations it
rarely visits: a loop that keeps only its latest cycle piles up the others. A session's watch
looks at the bytes its tensors and variables hold instead, and collects when they grow: what
the session made is all in the collector's generations (the line of ``tracking``), so listing
it is one call into C and collecting it walks it alone. Who looks, and when, is the
strategy's: the ``IN_BACKGROUND`` thread at its own pace (``cleaner``), the ``ON_SAFE_POINTS``
op callback every half threshold of outputs (``GarbageWatch.note``).
"""

from __future__ import annotations

import gc
import itertools
import operator
import sys
import threading
import time
import weakref
from typing import Any

from pytest_eagersession._tf import is_ready as tensorflow_ready
from pytest_eagersession._tf.classes import byte_holder_types, tensor_measures, variable_nbytes
from pytest_eagersession.core.tracking import TRACKER, Owner
from pytest_eagersession.heap.listing import BOUNDARY, measured, others

#: Bytes the tensors and variables a session made may grow by before their cycles are collected.
CYCLE_BYTES_THRESHOLD = 8 * 1024 * 1024
#: After collections that free little, the watch waits for up to this many thresholds of growth.
MOST_THRESHOLDS = 64

#: Held while a watch counts bytes: it holds one tensor at a time then, and TensorFlow's C
#: functions let other threads run meanwhile. A survivor check holds it too, so that it never
#: finds a tensor alive only because a cleaner was counting it (a leak that is not).
COUNTING = threading.RLock()  # reentrant: a check may run ops, whose callback may count


class GarbageWatch:
    """When a session collects the cyclic garbage it made.

    A look lists the tensors and variables made since the session's line (live or garbage) and
    adds up their bytes; once those exceed the least they were since the last collection by
    ``threshold``, it collects what the session made (``TRACKER.collect_new``: a few
    milliseconds), and the bytes left are the new least. A collection that frees less than half
    a threshold (the bytes are the code's, kept on purpose) doubles the growth the next one
    waits for, up to ``MOST_THRESHOLDS`` thresholds; one that frees a threshold resets it. The
    first since the line doubles nothing: the tensor a loop has just made is alive then, and
    what the code keeps is not known yet.
    Where automatic collection is off (``gc.disable()``, or a zero threshold), it stays off.
    """

    def __init__(self, owner: Owner, threshold: int = CYCLE_BYTES_THRESHOLD) -> None:
        # Weakly: the session holds its watch, and a cycle between them would leave a closed
        # session (its thread's locks and events with it) to the collector.
        self._owner = weakref.ref(owner)
        self.threshold = threshold
        self._least = 0  # nothing is made since a line just drawn
        self._last = 0
        self._step = threshold
        self._noted = 0
        self._collections = 0
        self._baseline = False  # a collection since the line showed what the code keeps
        self._lock = threading.Lock()
        self._types: frozenset[type] = frozenset()
        self._sizes: dict[int, tuple[weakref.ref[Any], int]] = {}  # by id of a weak reference
        self._older: list[weakref.ref[Any]] = []  # the oldest generation's last listing
        self._older_key: tuple[int, ...] | None = None  # and when it was made
        self._middle: list[weakref.ref[Any]] = []  # the middle one's
        self._middle_key: tuple[int, ...] | None = None
        self._sizes_pruned_at = 1024
        self.listing_seconds = 0.0
        """The CPU time the last look took to list and count the bytes (collecting aside; waiting
        for the interpreter while the loop runs is not the look's cost)."""

    @property
    def bytes_seen(self) -> int:
        """The bytes of tensors and variables the last look counted (0 before any)."""
        return self._last

    @property
    def collections(self) -> int:
        """How many collections the growth of bytes started."""
        return self._collections

    def restart(self) -> None:
        """The session's line was drawn again (it was activated): start from nothing.

        The classes of tensors and variables are listed again too: an import since may have
        defined a new kind of variable.
        """
        with self._lock:
            self._least, self._last, self._noted = 0, 0, 0
            self._step = self.threshold
            self._baseline = False
            self._types = frozenset()
            self._sizes = {}
            self._forget_listings()

    def note(self, nbytes: int) -> None:
        """Count ``nbytes`` of op outputs; look once half a threshold of them came."""
        with self._lock:
            self._noted += nbytes
            if self._noted < self.threshold // 2:
                return
            self._noted = 0
        self.look()

    def look(self) -> int:
        """Collect if the bytes grew past the threshold; return their growth since the last look."""
        if not gc.isenabled() or gc.get_threshold()[0] <= 0:
            return 0
        total = self._bytes()
        if total is None:  # the session does not own new objects now
            return 0
        with self._lock:
            grown = total - self._last
            least = min(self._least, total)
            due = total - least >= self._step
        owner = self._owner()
        if due and owner is not None and TRACKER.collect_new(owner) is not None:
            with self._lock:  # counted before the bytes are listed again, which takes a while
                self._collections += 1
            before, total = total, self._bytes() or 0
            least = total
            with self._lock:
                freed = before - total
                self._step = (
                    self.threshold
                    if freed >= self.threshold // 2 or not self._baseline
                    else min(2 * self._step, MOST_THRESHOLDS * self.threshold)
                )
                self._baseline = True
        with self._lock:
            self._least, self._last = least, total
        return max(grown, 0)

    def _listed(self) -> list[weakref.ref[Any]] | None:
        """Weak references to the tensors and variables the session made (None: it owns no new
        objects now). Objects enter an older generation only when a collection of the one
        before it, or a freeze, moves them there; between those, they leave it only by dying
        (their weak references tell). So the oldest generation is listed again only after a
        collection of the middle one or of itself, and the middle one only after a collection
        of the youngest: code that builds a model makes the youngest collections run every
        millisecond or so, while the oldest holds most of what the session keeps, and most
        looks come between two collections of any kind. Listing every generation at every
        look cost most of the looks' time.
        """
        middle_key, oldest_key = _generation_keys()
        owner, types = self._owner(), self._types
        if owner is None:
            return None
        if oldest_key is not None and oldest_key == self._older_key:
            if middle_key == self._middle_key:
                young = TRACKER.new_weakly(owner, types, (0,))
                if young is None:
                    return None
                if _generation_keys()[0] == middle_key:
                    return self._older + self._middle + young
            else:
                listed = TRACKER.new_weakly_apart(owner, types, (0, 1))
                if listed is None:
                    return None
                young, middle = listed
                now_middle, now_oldest = _generation_keys()
                if now_oldest == oldest_key:
                    self._keep_middle(middle, middle_key, now_middle)
                    return self._older + middle + young
        listed = TRACKER.new_weakly_apart(owner, types, (0, 1, 2))
        if listed is None:
            self._forget_listings()
            return None
        young, middle, older = listed
        now_middle, now_oldest = _generation_keys()
        if oldest_key is not None and now_oldest == oldest_key:
            self._older, self._older_key = older, oldest_key
            self._keep_middle(middle, middle_key, now_middle)
        else:
            self._forget_listings()
        return young + middle + older

    def _keep_middle(
        self,
        middle: list[weakref.ref[Any]],
        key: tuple[int, ...] | None,
        now: tuple[int, ...] | None,
    ) -> None:
        """Keep the middle generation's listing for the next looks, unless a collection moved
        objects into it while it was listed (its key changed)."""
        self._middle, self._middle_key = (middle, key) if now == key else ([], None)

    def _forget_listings(self) -> None:
        self._older, self._older_key = [], None
        self._middle, self._middle_key = [], None

    def _counted(self, refs: list[weakref.ref[Any]], tensors: type, measures: Any) -> int:
        """The bytes of the live tensors and variables of ``refs``, each measured once while it
        lives: the sizes are kept by the weak reference the listing returns (the same object
        for one referent while it lives, since ``weakref.ref`` hands back the one it made
        before), never by the object.

        A tensor's shape and dtype are fixed, and its element count is a TensorFlow C function
        that lets other threads run: measured at every look, each tensor a model keeps passed
        the interpreter to the code's thread and back, and stayed alive meanwhile even if the
        code dropped it. A variable's size is read by Python code in TensorFlow: once is
        enough too. What an earlier look measured is counted in C, from the sizes alone.
        """
        sizes = self._sizes
        keys = list(map(id, refs))
        known = list(filter(None, map(sizes.get, keys)))
        total: int = sum(
            itertools.compress(
                map(_SIZE, known),
                map(operator.is_not, map(_REFERENT, map(_REF, known)), itertools.repeat(None)),
            )
        )
        if len(known) == len(refs):
            return total
        new = list(itertools.compress(refs, map(operator.not_, map(sizes.__contains__, keys))))
        for entry in measured(new, tensors, measures):
            sizes[id(entry[0])] = entry
            total += entry[1]
        variable = None
        for ref in others(new, tensors):
            variable = ref()
            if variable is not None:
                entry = sizes[id(ref)] = (ref, variable_nbytes(variable))
                total += entry[1]
        variable = None  # no variable outlives the count in this frame
        if len(sizes) > self._sizes_pruned_at:
            self._sizes = {key: entry for key, entry in sizes.items() if entry[0]() is not None}
            self._sizes_pruned_at = max(1024, 2 * len(self._sizes))
        return total

    def _bytes(self) -> int | None:
        if not tensorflow_ready():
            return None
        started = time.thread_time()
        tensors, measures = tensor_measures()
        if not self._types:
            self._types = byte_holder_types()[1]
        try:
            # Weakly: TensorFlow's C functions let other threads run now and then, and the
            # code is often still using what is listed (nothing of ours may show as a holder).
            found = self._listed()
            if found is None:
                return None
            with COUNTING:
                return self._counted(found, tensors, measures)
        except Exception:  # a tensor half built (TensorFlow's status error), or died meanwhile
            return None
        finally:
            self.listing_seconds = time.thread_time() - started


_REF = operator.itemgetter(0)
_SIZE = operator.itemgetter(1)
_REFERENT = weakref.ref.__call__


def _generation_keys() -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """What changes whenever objects enter the collector's middle generation, and its oldest:
    the counts of collections of the generations before it (their survivors move on) and of
    itself, and the line's moves (``heap.Boundary.moves``); None while a move is under way, or
    where the generations work otherwise (Python 3.14's incremental collector)."""
    moves = BOUNDARY.moves
    if moves % 2 or sys.version_info >= (3, 14):
        return None, None
    stats = gc.get_stats()
    youngest, middle, oldest = (stats[n]["collections"] for n in range(3))
    return (moves, youngest, middle, oldest), (moves, middle, oldest)
