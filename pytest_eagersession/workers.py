"""Threads that run one job at a time and wait, parked, for the next: a session's cleaner thread.

A test suite opens a session a test, each with its own cleaner thread. Starting a thread costs
its starter a wait (``Thread.start()`` returns once the new thread has run: a third of a
millisecond with both cores of a busy machine taken) and the thread its set-up, and ending it
costs the closer a join of its teardown. A thread whose job ended parks instead, blocked on its
own queue (it never wakes while parked), and the next job takes it: each job still has a thread
to itself for as long as it runs. A parked thread holds nothing of its last job. At most
``PARKED_MOST`` are kept; ``end_parked()`` ends them (the plugin calls it as the run ends).

A starter that told its job to end need not wait for it: ``Job.release()`` parks the thread at
once, and a job given to it next runs when the last one has returned. Nor need it wake the
thread to say so: ``release(nudge)`` leaves the nudge (what makes the job return) to whoever
takes the thread next. A closed session's cleaner, asleep for a millisecond or two more, is then
woken once, for both jobs, or not at all: the next session's start lets a wait that ends soon
run out, and the thread runs that session's job as it wakes.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import weakref
from collections.abc import Callable

from pytest_eagersession.wakeups import run_promptly

#: The most threads kept parked; a job that ends while as many wait lets its thread end.
PARKED_MOST = 4
#: The name of a parked thread (a running one bears its job's).
PARKED_NAME = "eagersession-parked"


class Job:
    """A job given to a thread: ``join()`` waits for it to end, not for the thread to."""

    __slots__ = ("_done", "_released", "_worker", "thread")

    def __init__(self, worker: _Worker) -> None:
        self._worker = worker
        self.thread = worker.thread
        """The thread that runs the job (parked, or another job's, once it ended)."""
        self._done = threading.Event()
        self._released: bool | None = None  # parked by ``release`` (False: there was no room)

    @property
    def running(self) -> bool:
        """Whether the job has not ended yet."""
        return not self._done.is_set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the job to end; whether it did."""
        return self._done.wait(timeout)

    def release(self, nudge: Callable[[bool], object] | None = None) -> None:
        """Park the thread now, without waiting for the job to end: the job was told to end,
        and nothing it still does matters to its starter. A job given to the thread next runs
        once this one ended.

        ``nudge(urgent)`` makes the job return: called by the next ``start()`` that takes the
        thread (``urgent`` False: a job about to return by itself may be left to), or, urgent,
        by ``end_parked()``, or at once where there is no room to park. It must hold nothing of
        the job's (its queue's ``put``, not the job).
        """
        with _lock:
            if self._released is not None or self._done.is_set():
                return
            self.thread.name = PARKED_NAME
            self._released = _park(self._worker)
            if self._released:
                self._worker.nudge, nudge = nudge, None
        if nudge is not None:
            nudge(True)


_Work = tuple[Callable[[], None], Job]


class _Worker:
    """One daemon thread serving the jobs put on its queue; ``None`` ends it."""

    def __init__(self, name: str) -> None:
        self.work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self.nudge: Callable[[bool], object] | None = None  # a released job's, still running
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        _threads.add(self.thread)

    def _serve(self) -> None:
        thread = self.thread
        while True:
            work = self.work.get()
            if work is None:
                return
            target, job = work
            del work
            try:
                target()
            except SystemExit:
                pass
            except BaseException:
                threading.excepthook(threading.ExceptHookArgs((*sys.exc_info(), thread)))
            del target  # nothing of the job stays with the parked thread
            with _lock:
                self.nudge = None  # it returned: nobody need make it
                parked = job._released
                if parked is None:
                    thread.name = PARKED_NAME
                    parked = _park(self)
                job._done.set()
            del job
            if not parked:
                return


_lock = threading.Lock()
_parked: list[_Worker] = []
_threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()  # every worker's


def is_worker(thread: threading.Thread) -> bool:
    """Whether ``thread`` is one of ours (running a job, or parked): not the code's."""
    return thread in _threads


def start(name: str, target: Callable[[], None]) -> Job:
    """Run ``target()`` on a parked thread, or on a new daemon thread, named ``name``."""
    nudge = None
    with _lock:
        worker = _parked.pop() if _parked else None
        if worker is not None:
            worker.thread.name = name
            nudge, worker.nudge = worker.nudge, None
    if worker is None:
        worker = _Worker(name)
        run_promptly(worker.thread.start)  # on busy cores, a start waits for two of them
    job = Job(worker)
    worker.work.put((target, job))
    if nudge is not None:  # the released job still runs: one wake ends it and starts this one
        nudge(False)
    return job


def parked_threads() -> list[threading.Thread]:
    """The threads parked now."""
    with _lock:
        return [worker.thread for worker in _parked]


def end_parked(timeout: float = 1.0) -> None:
    """End the parked threads, waiting up to ``timeout`` seconds for each."""
    with _lock:
        ending = list(_parked)
        _parked.clear()
        nudges = [worker.nudge for worker in ending]
        for worker in ending:
            worker.nudge = None
    for worker, nudge in zip(ending, nudges, strict=True):
        worker.work.put(None)
        if nudge is not None:
            nudge(True)
    for worker in ending:
        worker.thread.join(timeout)


def _park(worker: _Worker) -> bool:
    """Park ``worker`` if there is room (``_lock`` held): whether it parked."""
    if len(_parked) >= PARKED_MOST:
        return False
    _parked.append(worker)
    return True


def _forget_parked() -> None:
    """In a forked child the parked threads do not exist: forget them."""
    global _lock
    _lock = threading.Lock()
    _parked.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parked)
