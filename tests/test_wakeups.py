"""The cleaner thread asks the kernel for short slices, and changes nothing else about itself;
the thread that starts it has short slices for that call alone."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from pytest_eagersession import EagerSession
from pytest_eagersession.core.wakeups import PROMPT_SLICE_NS, ask_for_prompt_wakeups, run_promptly

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's scheduler")


def slice_of(thread_id: int) -> int | None:
    """The thread's EEVDF slice in ns, None where the kernel does not show one (before 6.6)."""
    with open(f"/proc/self/task/{thread_id}/sched") as handle:
        for line in handle:
            if line.startswith("se.slice"):
                return int(line.split(":")[1])
    return None


def in_a_thread(body: Callable[[], Any]) -> Any:
    """``body()``, run in a fresh thread (its scheduling changes die with it)."""
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(body()))
    thread.start()
    thread.join()
    return results[0]


@linux_only
def test_the_cleaner_thread_runs_with_short_slices() -> None:
    if not in_a_thread(ask_for_prompt_wakeups):
        pytest.skip("the kernel refuses sched_setattr here")
    if slice_of(threading.get_native_id()) is None:
        pytest.skip("this kernel shows no slice (before EEVDF)")
    with EagerSession.options().resource_cleanup_strategy("in_background").build() as session:
        cleaner = session.cleaner
        assert cleaner is not None
        for _ in range(1000):  # the thread asks at its first look (after the quiet start)
            if cleaner.prompt_wakeups:
                break
            threading.Event().wait(0.001)
        assert cleaner.prompt_wakeups
        assert cleaner.thread.native_id is not None
        assert slice_of(cleaner.thread.native_id) == PROMPT_SLICE_NS
    assert slice_of(threading.get_native_id()) != PROMPT_SLICE_NS  # the caller keeps its own


@linux_only
def test_asking_keeps_the_threads_nice_value_and_policy() -> None:
    def body() -> tuple[bool, int, int]:
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, os.getpriority(os.PRIO_PROCESS, me) + 3)
        before = os.getpriority(os.PRIO_PROCESS, me)
        asked = ask_for_prompt_wakeups()
        assert os.getpriority(os.PRIO_PROCESS, me) == before
        return asked, os.sched_getscheduler(me), before

    asked, policy, _ = in_a_thread(body)
    assert policy == os.SCHED_OTHER
    if not asked:
        pytest.skip("the kernel refused sched_setattr here")


@linux_only
def test_a_thread_under_another_policy_is_left_as_it_is() -> None:
    def body() -> tuple[bool, int]:
        me = threading.get_native_id()
        os.sched_setscheduler(me, os.SCHED_BATCH, os.sched_param(0))
        return ask_for_prompt_wakeups(), os.sched_getscheduler(me)

    asked, policy = in_a_thread(body)
    assert not asked
    assert policy == os.SCHED_BATCH


@linux_only
@pytest.mark.parametrize("own_slice_ns", [None, 2_000_000], ids=["default", "its-own"])
def test_a_prompt_call_runs_on_short_slices_and_the_thread_gets_its_own_back(
    own_slice_ns: int | None,
) -> None:
    def body() -> tuple[int | None, int | None, int | None, tuple[int, int], tuple[int, int]]:
        me = threading.get_native_id()
        if own_slice_ns is not None and not ask_for_prompt_wakeups(own_slice_ns):
            pytest.skip("the kernel refuses sched_setattr here")
        os.setpriority(os.PRIO_PROCESS, me, os.getpriority(os.PRIO_PROCESS, me) + 2)
        before = slice_of(me)
        kept = (os.getpriority(os.PRIO_PROCESS, me), os.sched_getscheduler(me))
        during = run_promptly(lambda: slice_of(me))
        after = slice_of(me)
        return (
            before,
            during,
            after,
            kept,
            (os.getpriority(os.PRIO_PROCESS, me), os.sched_getscheduler(me)),
        )

    before, during, after, kept, kept_after = in_a_thread(body)
    if before is None:
        pytest.skip("this kernel shows no slice (before EEVDF)")
    if own_slice_ns is not None:
        assert before == own_slice_ns
    assert during == PROMPT_SLICE_NS
    assert after == before
    assert kept_after == kept


@linux_only
def test_a_prompt_call_that_raises_still_gives_the_thread_its_own_slice_back() -> None:
    def body() -> tuple[int | None, int | None]:
        me = threading.get_native_id()
        before = slice_of(me)

        def fails() -> None:
            raise ValueError("from the call")

        with pytest.raises(ValueError, match="from the call"):
            run_promptly(fails)
        return before, slice_of(me)

    before, after = in_a_thread(body)
    assert after == before


@linux_only
def test_a_prompt_call_leaves_a_thread_under_another_policy_as_it_is() -> None:
    def body() -> tuple[str, int]:
        me = threading.get_native_id()
        os.sched_setscheduler(me, os.SCHED_BATCH, os.sched_param(0))
        return run_promptly(lambda: "ran"), os.sched_getscheduler(me)

    assert in_a_thread(body) == ("ran", os.SCHED_BATCH)


def seconds_beside_a_spinning_thread(call: Callable[[], object], times: int = 50) -> float:
    """Seconds this thread took to make ``call()`` ``times`` times while another thread spins:
    a call that releases the interpreter waits for it again, about a switch interval each."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        started = time.perf_counter()
        for _ in range(times):
            call()
        return time.perf_counter() - started
    finally:
        stop.set()
        spinner.join()


@linux_only
def test_the_cleaners_system_calls_keep_the_interpreter() -> None:
    """Reading the resident memory and the thread's slice take microseconds: releasing the
    interpreter for them made a waking cleaner wait for it a second time."""
    import ctypes

    from pytest_eagersession.core import wakeups
    from pytest_eagersession.core.resident import ResidentMemory

    memory = ResidentMemory()
    assert memory.read() is not None
    # Both are the C library's functions called through ctypes.PyDLL, which keeps it.
    assert memory._pread._flags_ & ctypes._FUNCFLAG_PYTHONAPI
    assert wakeups._syscall()._flags_ & ctypes._FUNCFLAG_PYTHONAPI
    # And so they run at once beside a thread that wants the interpreter (50 calls of a few
    # microseconds; one that released it could wait a switch interval to get it back).
    switch = sys.getswitchinterval()
    assert seconds_beside_a_spinning_thread(memory.read) < 10 * switch
    assert seconds_beside_a_spinning_thread(ask_for_prompt_wakeups) < 10 * switch
