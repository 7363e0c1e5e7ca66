"""Collecting what a session made and let die: the cycle watch, and the ``IN_BACKGROUND`` thread.

Reference counting frees most tensors at once; a tensor held in a reference cycle (a model that
points back at itself, a closure over its own frame, a callback holding its owner) waits for the
collector, which counts allocations, not bytes, and promotes live cycles into generations it
rarely visits: a loop that keeps only its latest cycle piles up the others. A session's watch
(``GarbageWatch``) looks at the bytes its tensors and variables hold instead, and collects when
they grow: what the session made is all in the collector's generations (the line of
``tracking``), so listing it is one call into C and collecting it walks it alone. Under
``IN_BACKGROUND`` the session's ``Cleaner`` thread looks every fraction of a millisecond while
the bytes grow; under ``ON_SAFE_POINTS`` the op callback looks every half threshold of outputs.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import operator
import queue
import sys
import threading
import time
import weakref
from typing import Any

from pytest_eagersession import workers
from pytest_eagersession._tf import is_ready as tensorflow_ready
from pytest_eagersession._tf.classes import byte_holder_types, tensor_measures, variable_nbytes
from pytest_eagersession.heap import BOUNDARY, measured, others
from pytest_eagersession.references import STOP, WAKE, ReferenceRegistry, report_failures
from pytest_eagersession.resident import RESIDENT
from pytest_eagersession.tracking import TRACKER, Owner
from pytest_eagersession.wakeups import ask_for_prompt_wakeups

#: Bytes the tensors and variables a session made may grow by before their cycles are collected.
CYCLE_BYTES_THRESHOLD = 8 * 1024 * 1024
#: How long stopping waits for what the cleaner is doing (a look, or a deleter) to end.
CLEANER_JOIN_TIMEOUT_S = 5.0
#: The shortest and the longest wait of a cleaner between two looks (shortest while bytes grow).
LOOK_INTERVAL_S = (0.0005, 0.008)
#: Seconds without growth after which a cleaner's looks back off towards the longest wait.
QUIET_S = 0.05
#: A cleaner's first wait when its session starts or resumes, quiet: most tests take a
#: millisecond or two, and each wake costs the test's thread a hand-over of the interpreter.
QUIET_START_S = 0.002
#: The longest a thread's first wait grows to while the sessions it serves keep ending inside
#: it (back-to-back small tests): it doubles each time one does, and is ``QUIET_START_S`` again
#: once one outlives it. A closed session's thread whose wait ends within this is not woken
#: for the next session, which it serves as it wakes.
FIRST_WAIT_MOST_S = 0.008
#: A stopped cleaner whose timed wait ends within this is not woken: it leaves then, or when
#: the next session takes its thread (``workers``), whichever comes first.
STOP_UNWOKEN_S = 0.01
#: Listing what a session made may take at most one part in this many of its cleaner's time.
LOOK_DUTY = 10
#: While quiet, the most wakes in a row at which a cleaner reads the process's resident memory
#: alone, not listing, since it grew by less than a sixteenth of the threshold.
QUIET_SKIPS = 7
#: After collections that free little, the watch waits for up to this many thresholds of growth.
MOST_THRESHOLDS = 64


#: Held while a watch counts bytes: it holds one tensor at a time then, and TensorFlow's C
#: functions let other threads run meanwhile. A survivor check holds it too, so that it never
#: finds a tensor alive only because a cleaner was counting it (a leak that is not).
COUNTING = threading.RLock()  # reentrant: a check may run ops, whose callback may count

_THREAD = threading.local()  # a cleaner thread's own, kept as it parks: what it asked of the
# kernel, and its first wait


def _first_wait() -> float:
    """The calling cleaner thread's first wait for its next session (``FIRST_WAIT_MOST_S``)."""
    wait: float = getattr(_THREAD, "first_wait", QUIET_START_S)
    return wait


def _lengthen_first_wait() -> None:
    """The calling thread's last session ended before its first wait did: the next may too."""
    _THREAD.first_wait = min(2 * _first_wait(), FIRST_WAIT_MOST_S)


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
        self._owner = owner
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
        if due and TRACKER.collect_new(self._owner) is not None:
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
        owner, types = self._owner, self._types
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


#: What a cleaner's wait returns when its time ran out (no item came).
_TIMED_OUT = object()
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


class _Wait:
    """When a cleaner's thread wakes by itself: inf while it waits untimed, -inf before its
    first wait."""

    __slots__ = ("ends",)

    def __init__(self) -> None:
        self.ends = float("-inf")


def _wake_unless_soon(wait: _Wait, put: Any, urgent: bool) -> None:
    """A stopped cleaner's thread is taken by the next session: wake it (``put(STOP)``), unless
    the nudge is not ``urgent`` and the thread's wait ends within ``FIRST_WAIT_MOST_S`` by
    itself. It then runs the next session's job as it wakes, which starts that session's watch
    at most that late. (A job that never waited gets a ``STOP`` it will not read: the thread is
    in an earlier job's wait, one that a start found ending that soon.)"""
    if urgent or not 0.0 <= wait.ends - time.monotonic() <= FIRST_WAIT_MOST_S:
        put(STOP)


class Cleaner:
    """The background thread of one session, running from the session's first activation (or
    first registered reference) to ``stop()``.

    The thread is its own while it runs; a parked one is reused (``workers``), since starting a
    thread a test cost as much as the rest of a small test's session.

    It blocks on the session's garbage queue and deletes each reference whose referent died.
    While its session owns new objects it also looks at them (``GarbageWatch``) between items:
    every ``LOOK_INTERVAL_S[0]`` while their bytes grow, backing off to ``LOOK_INTERVAL_S[1]``
    once they did not for ``QUIET_S``, and never spending more than a ``LOOK_DUTY``-th of its
    CPU time listing. Once the bytes it saw neither grew nor changed by a 128th of the
    threshold for ``QUIET_S``, a wake reads the process's resident memory (``resident``) and
    lists only if it grew by a sixteenth of the threshold since the last look, or at the
    ``QUIET_SKIPS + 1``-th wake: a test that builds a model keeps tens of thousands of objects,
    and listing them at every wake cost Sonnet's suite several percent of its time. A session
    starts quiet (when it opens and each time it becomes the owner again): most tests make
    little, and listing through each one's first ``QUIET_S`` was two thirds of the looks in
    Sonnet's suite; memory that grows from the start brings a listing at the first wake, which
    comes ``QUIET_START_S`` after the start (so a test of a millisecond is not woken), or up to
    ``FIRST_WAIT_MOST_S`` on a thread whose last sessions ended sooner than that. (Resident
    memory alone would miss garbage that fills memory freed before: a loop's own, once its
    first collection freed it.) It asks the kernel for short time slices as it starts
    (``wakeups``): on a busy machine a woken thread may otherwise wait milliseconds for a core;
    so does the thread that starts it, for that call alone.
    """

    def __init__(self, owner: Owner, references: ReferenceRegistry, watch: GarbageWatch) -> None:
        self._owner = owner
        self._references = references
        self._watch = watch
        self._lock = threading.Lock()
        self._busy = threading.RLock()  # held by the thread while it acts (a deleter may close)
        self._job: workers.Job | None = None
        self._stopped = False
        self._wait = _Wait()  # the thread's wait: shared with the nudge its release leaves
        self.prompt_wakeups = False
        """Whether the kernel accepted the thread's request for short slices (``wakeups``)."""

    @property
    def thread(self) -> threading.Thread | None:
        """The daemon thread that runs it: None until it starts, parked once it stopped."""
        job = self._job
        return job.thread if job is not None else None

    @property
    def running(self) -> bool:
        """Whether it started and was not asked to stop."""
        return self._job is not None and not self._stopped

    def start(self) -> None:
        """Start the thread, unless it started or was asked to stop already.

        The session starts it when it is first activated or first registers a reference, not
        when it is built: started with the session's activation, it starts watching at once,
        one hand-over of the interpreter to the thread instead of two (start, then a wake).
        """
        self._start()

    def wake(self) -> None:
        """Watch afresh: the session became the owner of new objects (activated, or resumed)."""
        if not self._start():  # a thread that starts now watches afresh already
            self._references.garbage_queue.put(WAKE)

    def request_stop(self) -> None:
        """Stop it: it starts nothing more (a look, or a deleter: what is queued is left to
        the session's close), and its thread parks without anyone waiting for it.

        A thread asleep in a wait that ends within ``STOP_UNWOKEN_S`` is not woken (a test of
        a millisecond ends inside the first wait): the next session to start wakes it, once,
        to leave this one and run its own (``workers.Job.release``), or it leaves as the wait
        ends. One asleep for longer, or untimed, is woken now.
        """
        with self._lock:
            self._stopped = True
            asleep_long = self._wait.ends - time.monotonic() > STOP_UNWOKEN_S
        job = self._job
        if job is None:  # never started: no thread to tell
            return
        put = self._references.garbage_queue.put
        if asleep_long:
            put(STOP)
        job.release(nudge=functools.partial(_wake_unless_soon, self._wait, put))

    def join(self) -> None:
        """Wait, up to ``CLEANER_JOIN_TIMEOUT_S``, until what it is doing now (a look, or a
        deleter) is done: once it was asked to stop, it then does nothing more. Not the thread's
        end, which no one waits for: it parks for the next session (``workers``)."""
        if self._busy.acquire(timeout=CLEANER_JOIN_TIMEOUT_S):
            self._busy.release()

    def stop(self) -> None:
        """Stop it and wait until it does nothing more."""
        self.request_stop()
        self.join()

    def _start(self) -> bool:
        """Start the thread unless it started already: whether a wake is needless now (the
        thread starts now, or it was asked to stop)."""
        if self._job is not None:
            return False
        with self._lock:
            if self._stopped:
                return True
            if self._job is None:
                self._job = workers.start(f"eagersession-cleaner-{id(self._owner):x}", self._run)
                return True
        return False

    def _run(self) -> None:
        if self._stopped:  # its session closed before the thread came to it: a short one
            _lengthen_first_wait()
            return
        asked = getattr(_THREAD, "prompt_wakeups", None)  # a parked thread asked already
        if asked is None:
            asked = _THREAD.prompt_wakeups = ask_for_prompt_wakeups()
        self.prompt_wakeups = asked
        references = self._references
        garbage = references.garbage_queue
        watch = self._watch
        shortest, longest = LOOK_INTERVAL_S
        interval = _first_wait()
        woke = False  # whether a wait ended by itself while the session was open
        grew_at = float("-inf")  # nothing grew yet: the looks back off until something does
        skipped = 0  # wakes in a row that read the resident memory alone
        # The bytes, and since when they stay so: a session starts quiet, so that a test that
        # makes little is watched through its resident memory alone.
        still_at, still_since = 0, float("-inf")
        resident_at = RESIDENT.read() or 0  # the resident memory at the last look
        while True:
            watching = TRACKER.is_innermost(self._owner) and tensorflow_ready()
            with self._lock:  # a stop that comes after this sees when the wait ends
                if self._stopped:
                    return
                self._wait.ends = time.monotonic() + interval if watching else float("inf")
            try:
                item = garbage.get(timeout=interval) if watching else garbage.get()
            except queue.Empty:
                item = _TIMED_OUT
            with self._busy:
                if self._stopped or item is STOP:
                    if not woke and self._wait.ends < float("inf"):
                        _lengthen_first_wait()  # it ended inside its first timed wait
                    return
                if item is _TIMED_OUT:
                    if not woke:
                        woke, _THREAD.first_wait = True, QUIET_START_S
                    now = time.monotonic()
                    step = watch.threshold // 16
                    if now - still_since >= QUIET_S and skipped < QUIET_SKIPS:
                        resident = RESIDENT.read()
                        if resident is not None and resident - resident_at < step:
                            skipped += 1
                            interval = max(interval, min(2 * interval, longest))
                            continue
                    skipped, resident_at = 0, RESIDENT.read() or 0
                    grown = watch.look()
                    if grown >= step:
                        grew_at = now
                    if grown >= step // 8 or abs(watch.bytes_seen - still_at) >= step // 8:
                        still_at, still_since = watch.bytes_seen, now
                    interval = shortest if now - grew_at < QUIET_S else min(2 * interval, longest)
                    interval = max(interval, LOOK_DUTY * watch.listing_seconds)
                    continue
                if item is WAKE:
                    interval, grew_at = QUIET_START_S, float("-inf")
                    still_at, still_since = 0, float("-inf")
                    continue
                failures: list[str] = []
                if references.delete(item, failures):
                    references.count_run()
                item = _TIMED_OUT  # the reference is not kept while the thread waits
                # A warning filter set to "error" would raise here; nobody could catch it in
                # this thread, and the count in stats() already records the failure.
                with contextlib.suppress(Exception):
                    report_failures(failures)
