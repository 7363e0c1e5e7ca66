"""The ``IN_BACKGROUND`` strategy's thread: one for each session, from its build to its close.

As in TensorFlow Java, a session under ``IN_BACKGROUND`` has a thread of its own, dedicated to
cleanup, started when the session is built and ended when it is closed. (A session built before
TensorFlow is imported starts it at its first activation after TensorFlow is, or its first
registered reference: until then there is nothing to clean, and a suite that never imports
TensorFlow starts no thread.) The thread blocks on
the session's garbage queue and deletes each reference whose referent died. While its session
owns new objects (it is the innermost active one), the thread also wakes by itself so that the
session's ``GarbageWatch`` (``cycle_watch``) collects the cycles that hold tensors; ``Pace``
says when it wakes and what a wake does. Five mechanisms, each kept for a bound that the
benchmarks measure (``docs/strategies.md``, "What the cleaner thread does"):

1. **Looks follow growth.** ``LOOK_INTERVAL_S[0]`` between looks while the bytes grow; once
   they did not for ``QUIET_S``, each wait doubles, up to ``LOOK_INTERVAL_S[1]``.
2. **A quiet start.** A session's first wait, and the first after it becomes the owner again,
   is ``QUIET_START_S``: most tests end before it, and are never woken.
3. **Resident memory on still wakes.** Once the bytes a look saw stay still for ``QUIET_S``, a
   wake reads the process's resident memory (``resident``) and lists only if it grew, or at
   every ``QUIET_SKIPS + 1``-th wake.
4. **A duty cap.** Listing takes at most one part in ``LOOK_DUTY`` of the thread's time.
5. **Short slices.** The thread asks Linux for short time slices (``wakeups``) at its first
   look, and its starter for the one call that starts it.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import weakref

from pytest_eagersession._tf import is_ready as tensorflow_ready
from pytest_eagersession.core.cycle_watch import GarbageWatch
from pytest_eagersession.core.references import STOP, WAKE, ReferenceRegistry, report_failures
from pytest_eagersession.core.resident import RESIDENT
from pytest_eagersession.core.tracking import TRACKER, Owner
from pytest_eagersession.core.wakeups import ask_for_prompt_wakeups, run_promptly

#: How long stopping waits for the thread to end (it ends what it is doing first: a look, or a
#: deleter that may take a while).
CLEANER_JOIN_TIMEOUT_S = 5.0
#: The shortest and the longest wait between two looks: the shortest while the bytes grow (a
#: loop makes a 16 MiB tensor every 0.7 ms), the longest once they are quiet (what a quiet
#: thread costs the code's ops: one hand-over of the interpreter each wake; and how long a loop
#: that starts after a quiet stretch runs unseen: 64 ms let the 16 MiB loop reach 134 MiB).
LOOK_INTERVAL_S = (0.0005, 0.016)
#: Seconds without growth after which the waits between looks double towards the longest.
QUIET_S = 0.05
#: The first wait when a session starts or becomes the owner again: most tests take a
#: millisecond or two, and each wake costs the test's thread a hand-over of the interpreter.
QUIET_START_S = 0.002
#: Listing what a session made may take at most one part in this many of its cleaner's time.
LOOK_DUTY = 10
#: While still, the most wakes in a row that read the process's resident memory alone, not
#: listing, since it grew by less than a sixteenth of the threshold.
QUIET_SKIPS = 7

#: What a cleaner's wait returns when its time ran out (no item came).
_TIMED_OUT = object()
#: Every cleaner's thread, for code that tells the package's threads from the user's.
_THREADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def is_cleaner_thread(thread: threading.Thread) -> bool:
    """Whether ``thread`` is a session's cleaner (the package's), not the code's."""
    return thread in _THREADS


class Pace:
    """When a cleaner's next wake comes (``wait``), and what a wake does.

    A wake while the bytes are still reads the resident memory and lists nothing unless it grew
    by a sixteenth of the threshold (a test that builds a model keeps tens of thousands of
    objects, and listing them at every wake cost Sonnet's suite several percent); resident
    memory alone would miss garbage that refills memory freed before (a loop's own, once its
    first collection freed it), so while the bytes move, every wake lists.
    """

    def __init__(self, watch: GarbageWatch) -> None:
        self._watch = watch
        self.restart()

    def restart(self) -> None:
        """The session starts, or became the owner of new objects: start quiet, as if nothing
        grew, from the resident memory of now."""
        self.wait: float = QUIET_START_S
        self._grew_at = float("-inf")
        self._still_at, self._still_since = 0, float("-inf")
        self._skipped = 0
        self._resident_at = RESIDENT.read() or 0

    def wake(self) -> None:
        """A wait ran out: look (or read the resident memory alone), and set the next wait."""
        now = time.monotonic()
        shortest, longest = LOOK_INTERVAL_S
        step = self._watch.threshold // 16
        if now - self._still_since >= QUIET_S and self._skipped < QUIET_SKIPS:
            resident = RESIDENT.read()
            if resident is not None and resident - self._resident_at < step:
                self._skipped += 1
                self.wait = max(self.wait, min(2 * self.wait, longest))
                return
        self._skipped, self._resident_at = 0, RESIDENT.read() or 0
        grown = self._watch.look()
        seen = self._watch.bytes_seen
        if grown >= step:
            self._grew_at = now
        if grown >= step // 8 or abs(seen - self._still_at) >= step // 8:
            self._still_at, self._still_since = seen, now
        wait = shortest if now - self._grew_at < QUIET_S else min(2 * self.wait, longest)
        self.wait = max(wait, LOOK_DUTY * self._watch.listing_seconds)


class Cleaner:
    """The background thread of one session, from ``start()`` to ``stop()``.

    The thread is a daemon named ``eagersession-cleaner-<session id>``. Stopping it puts a
    ``STOP`` on the garbage queue; the thread ends what it is doing (a look, or a deleter) and
    leaves as it reads it, and ``join()`` waits for that: a hand-over of the interpreter each
    way, a fraction of a millisecond, so that a check after the close finds no thread of ours.
    """

    def __init__(self, owner: Owner, references: ReferenceRegistry, watch: GarbageWatch) -> None:
        self._owner = weakref.ref(owner)  # weakly: see ``GarbageWatch``; the session holds this
        self._references = references
        self._pace = Pace(watch)
        self._lock = threading.Lock()
        self._stopped = False
        self._started = False
        self._untimed = False  # whether the thread waits now with no timeout
        self._restart = False  # a wake asked for while its wait was timed
        self.prompt_wakeups = False
        """Whether the kernel accepted the thread's request for short slices (``wakeups``),
        made at its first look."""
        self.thread = threading.Thread(
            target=self._run, name=f"eagersession-cleaner-{id(owner):x}", daemon=True
        )
        """The daemon thread that runs it, alive from ``start()`` to the session's close."""
        _THREADS.add(self.thread)

    def start(self) -> None:
        """Start the thread, unless it started already or was asked to stop."""
        if self._started:  # read without the lock: the new thread may hold it a while
            return
        with self._lock:  # held through the start; the new thread's first wait does not take it
            if self._started or self._stopped:
                return
            self._started = True
            run_promptly(self.thread.start)  # on busy cores, a start waits for two of them

    @property
    def running(self) -> bool:
        """Whether its thread runs and was not asked to stop."""
        return not self._stopped and self.thread.is_alive()

    def wake(self) -> None:
        """Watch afresh: the session became the owner of new objects (activated, or resumed).

        A thread waiting with no timeout is woken. One in a timed wait is not (a test's thread
        would hand it the interpreter at each activation): it starts afresh as that wait ends.
        """
        with self._lock:
            if self._stopped or not self._started:
                return  # a thread that starts later watches afresh
            if not self._untimed:
                self._restart = True
                return
            self._untimed = False
        self._references.garbage_queue.put(WAKE)

    def request_stop(self) -> None:
        """Stop it: it starts nothing more (a look, or a deleter: what is queued is left to the
        session's close), and its thread ends as it reads the ``STOP``."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._references.garbage_queue.put(STOP)

    def join(self) -> None:
        """Wait, up to ``CLEANER_JOIN_TIMEOUT_S``, for the thread to end once it was asked to
        stop (it ends what it is doing first). Called from the thread itself (a deleter that
        closes its session), it returns at once: the thread ends when the deleter returns."""
        with self._lock:
            started = self._started
        if started and threading.current_thread() is not self.thread:
            self.thread.join(CLEANER_JOIN_TIMEOUT_S)

    def stop(self) -> None:
        """Stop it and wait for its thread to end."""
        self.request_stop()
        self.join()

    def _watching(self) -> bool:
        """Whether the thread's next wait is timed: its session owns new objects. (Its first
        wait always is: a session is most often activated as soon as it is built.)"""
        owner = self._owner()
        return owner is not None and TRACKER.is_innermost(owner) and tensorflow_ready()

    def _run(self) -> None:
        references = self._references
        garbage = references.garbage_queue
        pace = self._pace
        # The first wait is the quiet start, timed, and its pace is fresh: it needs neither the
        # lock (which ``start()`` may still hold) nor a restart a wake asked for meanwhile (left
        # to the next wait). Most tests end during it, and each step the new thread takes before
        # it waits makes the test's thread wait for the interpreter (see ``start()``).
        watching, asked = True, False
        while True:
            try:
                item = garbage.get(timeout=pace.wait) if watching else garbage.get()
            except queue.Empty:
                item = _TIMED_OUT
            if item is STOP:  # put after the stop was asked: the thread ends reading it
                return
            if self._stopped:  # until the STOP: what is still registered is the close's
                item = None
            elif item is WAKE:
                pace.restart()
            elif item is _TIMED_OUT:
                if not asked:  # at the first look: most threads end before they look
                    asked, self.prompt_wakeups = True, ask_for_prompt_wakeups()
                if self._watching():
                    pace.wake()
            else:
                failures: list[str] = []
                if references.delete(item, failures):
                    references.count_run()
                item = None  # the reference is not kept while the thread waits
                # A warning filter set to "error" would raise here; nobody could catch it in
                # this thread, and the count in stats() already records it.
                with contextlib.suppress(Exception):
                    report_failures(failures)
            with self._lock:  # a wake that comes after this sees which wait this is
                watching = self._watching() and not self._stopped
                self._untimed = not watching
                restart, self._restart = self._restart, False
            if restart:
                pace.restart()
