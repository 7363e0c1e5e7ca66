"""Threads that run one job and park for the next (``workers``), without TensorFlow."""

from __future__ import annotations

import os
import random
import select
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from support import wait_until

from pytest_eagersession import workers


@pytest.fixture(autouse=True)
def no_parked_threads() -> Iterator[None]:
    workers.end_parked()
    yield
    workers.end_parked()


def test_a_job_runs_on_a_thread_named_for_it_and_its_thread_serves_the_next() -> None:
    seen: list[tuple[str, threading.Thread]] = []
    release = threading.Event()

    def job() -> None:
        seen.append((threading.current_thread().name, threading.current_thread()))
        release.wait(10)

    first = workers.start("first-job", job)
    assert wait_until(lambda: len(seen) == 1)
    assert first.running
    assert not first.join(0.01)
    release.set()
    assert first.join(5)
    assert not first.running
    assert workers.parked_threads() == [first.thread]
    assert first.thread.name == workers.PARKED_NAME
    second = workers.start("second-job", job)
    assert second.join(5)
    assert seen == [("first-job", first.thread), ("second-job", first.thread)]
    assert second.thread is first.thread


def test_a_released_job_parks_its_thread_at_once_and_the_next_job_runs_after_it() -> None:
    order: list[str] = []
    release = threading.Event()
    started = threading.Event()

    def ending() -> None:
        started.set()
        release.wait(10)
        order.append("ending")

    first = workers.start("ending-job", ending)
    assert started.wait(5)
    first.release()
    assert first.running  # still running: nobody waited for it
    assert workers.parked_threads() == [first.thread]
    assert first.thread.name == workers.PARKED_NAME
    before = set(threading.enumerate())
    second = workers.start("next-job", lambda: order.append("next"))
    assert second.thread is first.thread  # taken from the park, no thread started
    assert workers.parked_threads() == []
    assert not second.join(0.05)  # it waits for the first job to return
    release.set()
    assert second.join(5)
    assert order == ["ending", "next"]
    assert set(threading.enumerate()) == before
    assert workers.parked_threads() == [first.thread]  # parked once, not twice
    first.release()  # ended: releasing it again parks nothing
    assert workers.parked_threads() == [first.thread]


def test_a_released_jobs_nudge_is_left_to_the_next_start_which_calls_it_once() -> None:
    """``release(nudge)`` does not wake the job: the next start that takes the thread does,
    once, after handing it the next job; so the thread wakes once for both."""
    wake = threading.Event()
    nudged: list[str] = []

    def asleep() -> None:
        wake.wait(10)

    def nudge(urgent: bool) -> None:
        nudged.append(f"urgent={urgent}")
        wake.set()

    first = workers.start("asleep-job", asleep)
    first.release(nudge=nudge)
    assert nudged == []
    assert not first.join(0.05)  # nobody woke it
    assert workers.parked_threads() == [first.thread]
    ran = threading.Event()
    second = workers.start("next-job", ran.set)
    assert second.thread is first.thread
    assert nudged == ["urgent=False"]  # a start: the job may be left to return by itself
    assert second.join(5)
    assert ran.is_set()
    assert not first.running
    third = workers.start("third-job", lambda: None)  # the nudge is spent: not called again
    assert third.join(5)
    assert nudged == ["urgent=False"]


def test_a_nudge_is_dropped_once_its_job_returned_and_called_at_once_without_room(
    monkeypatch,
) -> None:
    nudged: list[str] = []
    finish = threading.Event()
    returned = workers.start("returns", lambda: finish.wait(10) and None)
    returned.release(nudge=lambda urgent: nudged.append("late"))
    finish.set()
    assert returned.join(5)
    assert workers.start("after-return", lambda: None).join(5)
    assert nudged == []  # it returned by itself: nobody need make it
    monkeypatch.setattr(workers, "PARKED_MOST", 0)
    wake = threading.Event()
    roomless = workers.start("no-room-nudged", lambda: wake.wait(10) and None)
    roomless.release(nudge=lambda urgent: (nudged.append(f"now, urgent={urgent}"), wake.set()))
    assert nudged == ["now, urgent=True"]  # nobody would take the thread: it is nudged at once
    assert roomless.join(5)


def test_end_parked_nudges_a_released_job_that_still_runs() -> None:
    wake = threading.Event()
    urgency: list[bool] = []
    job = workers.start("asleep", lambda: wake.wait(10) and None)
    job.release(nudge=lambda urgent: (urgency.append(urgent), wake.set()))
    started = time.monotonic()
    workers.end_parked(timeout=5)
    assert time.monotonic() - started < 2
    assert not job.thread.is_alive()
    assert not job.running
    assert urgency == [True]  # the run ends: nothing may be left to end by itself


def test_a_released_job_without_room_to_park_ends_its_thread(monkeypatch) -> None:
    monkeypatch.setattr(workers, "PARKED_MOST", 0)
    release = threading.Event()
    job = workers.start("no-room", lambda: release.wait(10) and None)
    job.release()
    assert workers.parked_threads() == []
    release.set()
    assert job.join(5)
    assert wait_until(lambda: not job.thread.is_alive())


def test_a_workers_thread_is_known_as_ours_running_or_parked() -> None:
    release = threading.Event()
    job = workers.start("ours", lambda: release.wait(10) and None)
    assert workers.is_worker(job.thread)
    release.set()
    assert job.join(5)
    assert workers.is_worker(job.thread)  # parked
    assert not workers.is_worker(threading.current_thread())
    other = threading.Thread(target=lambda: None)
    assert not workers.is_worker(other)


def test_no_job_is_lost_however_starts_releases_joins_and_ends_interleave() -> None:
    """Jobs released while they run or before they ran (ended by then, or left for the next
    start to nudge), joined, and the parked threads ended now and then: every job runs, once,
    in order, and no thread is left running one."""
    rng = random.Random(7)
    runs: list[int] = []
    asleep: workers.Job | None = None  # released with a nudge: the next start ends it
    for index in range(300):
        finish = threading.Event()
        nudged = rng.random() < 0.25
        wait = 10 if nudged else rng.choice([0, 0.001, 0.004])

        def job(index: int = index, finish: threading.Event = finish, wait: float = wait) -> None:
            runs.append(index)
            finish.wait(wait)

        started = workers.start(f"job-{index}", job)
        if asleep is not None:
            assert asleep.join(5), "the start did not nudge the job asleep on its thread"
            asleep = None
        time.sleep(rng.choice([0, 0.0005, 0.003]))
        if nudged:
            started.release(nudge=lambda urgent, finish=finish: finish.set())
            asleep = started
        elif rng.random() < 0.5:
            started.release()
            finish.set()
        else:
            finish.set()
            assert started.join(5)
        if rng.random() < 0.05:
            workers.end_parked()
            asleep = None
        assert asleep is not None or started.join(5), f"job {index} never ended"
    workers.end_parked()
    assert asleep is None or asleep.join(5)
    assert runs == list(range(300))
    assert workers.parked_threads() == []


def test_a_job_that_raises_is_reported_and_its_thread_still_parks(monkeypatch) -> None:
    reported: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", reported.append)

    def broken() -> None:
        raise ValueError("broken job")

    job = workers.start("broken-job", broken)
    assert job.join(5)
    assert [type(args.exc_value) for args in reported] == [ValueError]
    assert reported[0].thread is job.thread
    assert workers.parked_threads() == [job.thread]


def test_end_parked_ends_the_parked_threads_and_a_later_job_starts_a_new_one() -> None:
    job = workers.start("a-job", lambda: None)
    assert job.join(5)
    assert wait_until(lambda: workers.parked_threads() == [job.thread])
    workers.end_parked()
    assert not job.thread.is_alive()
    later = workers.start("later-job", lambda: None)
    assert later.join(5)
    assert later.thread is not job.thread


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_forgets_the_threads_it_does_not_have() -> None:
    job = workers.start("before-fork", lambda: None)
    assert job.join(5)
    assert workers.parked_threads() == [job.thread]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no parked thread, and a job still runs
        try:
            ran = threading.Event()
            child_job = workers.start("in-child", ran.set)
            ok = not [t for t in workers.parked_threads() if t is job.thread]
            ok = ok and child_job.join(5) and ran.is_set()
            os.write(write, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 30)  # a child that hangs fails, not the run
    answer = os.read(read, 2) if ready else b"hung"
    os.close(read)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert answer == b"ok"
