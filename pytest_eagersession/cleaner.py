"""The ``IN_BACKGROUND`` cleaner: a daemon thread per session that deletes what died.

It blocks on the session's garbage queue and wakes for work: a dead referent, a collection of
cyclic garbage that the growth of tensor bytes made due, or the stop. While its session owns
new objects, it also reads the process's resident memory every few milliseconds and paces the
collector by it (``MemoryWatch``), and by the tensor bytes the tracker's scans find
(``Cleaner.pace``). It never lists the heap, and collections that start in it are not scanned
(see ``tracking.Tracker``).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading

from pytest_eagersession._tf import is_ready as tensorflow_ready
from pytest_eagersession.references import STOP, WAKE, ReferenceRegistry, report_failures
from pytest_eagersession.tracking import TRACKER, CycleCollector, Owner

#: How long stopping waits for the cleaner thread to end.
CLEANER_JOIN_TIMEOUT_S = 5.0
#: How often the cleaner of the session that owns new objects looks at the process's memory.
CLEANER_POLL_S = 0.005
#: Scans keep pacing while each finds at least this fraction of the threshold in new tensors.
PACING_FRACTION = 16


class ResidentMemory:
    """The process's resident memory, read without allocating a tracked object (Linux only)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._pid = 0
        self._page = 0

    def read(self) -> int | None:
        """Resident bytes now, or None where the system does not say."""
        if self._pid != os.getpid():  # first use, or a forked child: its own /proc/self
            self._pid = os.getpid()
            try:
                self._fd = os.open("/proc/self/statm", os.O_RDONLY)
                self._page = os.sysconf("SC_PAGE_SIZE")
            except (OSError, ValueError, AttributeError):
                self._fd = None
        if self._fd is None:
            return None
        try:
            fields = os.pread(self._fd, 96, 0)
        except OSError:
            return None
        start = fields.index(b" ") + 1
        return int(fields[start : fields.index(b" ", start)]) * self._page


_RESIDENT = ResidentMemory()


class MemoryWatch:
    """What the cleaner makes of the process's resident memory, read every few milliseconds.

    Growth by the threshold where no scan looked yet has the next allocation start a
    collection (of the young generation, by the interpreter, in the allocating thread). Growth
    by ``FULL_EVERY`` thresholds since the last full collection means cycles promoted alive
    into the oldest generation are dying there: the cleaner collects in full. A full collection
    that frees less than a threshold doubles the growth the next one waits for, so that memory
    the code keeps (a dataset, a model) does not make it collect in vain.

    A collection in the cleaner promotes the young objects without a scan (the cleaner never
    lists the heap), so the full one waits for a scan: it hurries the collector, and collects
    as soon as a thread that may scan has looked at the young generations since, or after
    ``FULL_WAIT_LOOKS`` looks without one (the code is not allocating: waiting, or in a long
    TensorFlow call; what it made since the last scan may then go unattributed).
    """

    FULL_WAIT_LOOKS = 10

    def __init__(self, collector: CycleCollector, baseline: int | None = None) -> None:
        self._collector = collector
        # ``baseline``: the resident memory when the session was activated, read then, so that
        # what the code allocates before the cleaner's first look counts as growth.
        self._low: int | None = baseline
        self._full_low: int | None = baseline
        self._full_gap = collector.FULL_EVERY * collector.threshold
        self._full_after_scan: int | None = None  # the scan count a full collection waits past
        self._full_waited = 0  # looks since it began to wait
        self._hurried_at: int | None = None  # the scan count at the latest hurry, while waiting
        self._idle_looks = 0

    def look(self) -> None:
        """Read the resident memory once and act on its growth."""
        resident = _RESIDENT.read()
        if resident is None:
            return
        threshold = self._collector.threshold
        self._low = resident if self._low is None else min(self._low, resident)
        self._full_low = resident if self._full_low is None else min(self._full_low, resident)
        if self._full_after_scan is not None or resident - self._full_low >= self._full_gap:
            self._collect_full_after_a_scan(resident, threshold)
            return
        if resident - self._low >= threshold:
            TRACKER.hurry()
            self._low = resident
            if self._hurried_at is None:
                self._hurried_at, self._idle_looks = TRACKER.middle_collections, 0
        elif self._hurried_at is not None:
            self._collect_young_if_idle()

    def _collect_young_if_idle(self) -> None:
        """After a hurry: the code's own collection of the middle generation, or the cleaner's.

        Cycles promoted alive die in the middle generation, which a cleaner's own young
        collections leave alone (see ``Tracker``). Where the code's threads collect it within
        ``FULL_WAIT_LOOKS`` looks, nothing more is needed; where they do not (the code waits,
        or its young collections are all the hurry brought), the cleaner collects it.
        """
        assert self._hurried_at is not None
        self._idle_looks += 1
        if TRACKER.middle_collections != self._hurried_at:
            self._hurried_at = None
        elif self._idle_looks >= self.FULL_WAIT_LOOKS:
            self._hurried_at = None
            self._collector.collect_middle()

    def _collect_full_after_a_scan(self, resident: int, threshold: int) -> None:
        if self._full_after_scan is None:
            self._full_after_scan, self._full_waited = TRACKER.scans, 0
            TRACKER.hurry()
            return
        self._full_waited += 1
        if TRACKER.scans == self._full_after_scan and self._full_waited < self.FULL_WAIT_LOOKS:
            return  # no scan yet: the young objects would be promoted unseen
        self._full_after_scan = None
        self._collector.collect_full()
        after = _RESIDENT.read() or resident
        freed = resident - after
        self._full_gap = (
            self._collector.FULL_EVERY * threshold
            if freed >= threshold
            else min(2 * self._full_gap, 1 << 34)
        )
        self._low = self._full_low = after


class Cleaner:
    """The background thread of one session, started at once; ``stop()`` ends it."""

    def __init__(
        self, owner: Owner, references: ReferenceRegistry, collector: CycleCollector
    ) -> None:
        self._owner = owner
        self._references = references
        self._collector = collector
        self._baseline: int | None = None
        self.thread = threading.Thread(
            target=self._run, name=f"eagersession-cleaner-{id(owner):x}", daemon=True
        )
        """The daemon thread (tests join it)."""
        self.thread.start()

    def wake(self) -> None:
        """Start watching memory afresh, from the resident memory now: the session was just
        activated (the thread may look only after the code has allocated a lot)."""
        self._baseline = _RESIDENT.read()
        self._references.garbage_queue.put(WAKE)

    def request_stop(self) -> None:
        """Ask the thread to end once it has deleted what is queued before."""
        self._references.garbage_queue.put(STOP)

    def join(self) -> None:
        """Wait for the thread to end (not from the thread itself), ``CLEANER_JOIN_TIMEOUT_S``."""
        if self.thread is not threading.current_thread():
            self.thread.join(CLEANER_JOIN_TIMEOUT_S)

    def stop(self) -> None:
        """Stop the thread and wait for it."""
        self.request_stop()
        self.join()

    def pace(self, generation: int, nbytes: int) -> bool:
        """Pace the collector by ``nbytes`` of new tensors a scan at a collection found.

        The full collections are the cleaner's (``MemoryWatch``). True to keep pacing: to scan
        at every collection, while tensors come in bytes that matter.
        """
        if TRACKER.pace(generation, nbytes):
            self._collector.count_early()
        return nbytes >= self._collector.threshold // PACING_FRACTION

    def _run(self) -> None:
        references = self._references
        garbage = references.garbage_queue
        ident = threading.get_ident()
        TRACKER.quiet_thread(ident)
        memory = MemoryWatch(self._collector)
        try:
            while True:
                watching = TRACKER.is_innermost(self._owner) and tensorflow_ready()
                try:
                    item = garbage.get(timeout=CLEANER_POLL_S) if watching else garbage.get()
                except queue.Empty:
                    # A session activated inside this one since the wait began owns the pace now.
                    if TRACKER.is_innermost(self._owner):
                        memory.look()
                    continue
                if item is STOP:
                    return
                if item is WAKE:
                    memory = MemoryWatch(self._collector, self._baseline)
                    continue
                failures: list[str] = []
                if references.delete(item, failures):
                    references.count_run()
                # A warning filter set to "error" would raise here; nobody could catch it in
                # this thread, and the count in stats() already records the failure.
                with contextlib.suppress(Exception):
                    report_failures(failures)
        finally:
            TRACKER.quiet_thread(ident, quiet=False)
