"""EagerSession's contracts: ports of Java's EagerSessionTest, and versions with real garbage."""

from __future__ import annotations

import queue
import threading
import time
import warnings
from collections.abc import Callable, Iterator

import pytest
from support import IN_BACKGROUND, ON_SAFE_POINTS, ON_SESSION_CLOSE, wait_until

from pytest_eagersession import (
    EagerSession,
    NativeReference,
    ResourceCleanupStrategy,
    ResourceCleanupWarning,
    SessionClosedError,
)


class Referent:
    """Something a native reference can point at."""


class CountingReference(NativeReference):
    """Fails the test if deleted twice, as the Java test reference did."""

    def __init__(self, session: EagerSession, referent: object) -> None:
        self.deletions = 0
        super().__init__(session, referent)

    def delete(self) -> None:
        self.deletions += 1
        if self.deletions > 1:
            pytest.fail("a native reference was deleted twice")

    @property
    def deleted(self) -> bool:
        return self.deletions == 1


@pytest.fixture
def make_session() -> Iterator[Callable[..., EagerSession]]:
    sessions: list[EagerSession] = []

    def make(
        strategy: ResourceCleanupStrategy, garbage: queue.Queue[object] | None = None
    ) -> EagerSession:
        session = EagerSession.options().resource_cleanup_strategy(strategy).build(garbage)
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.close()


# ---------------------------------------------------------------- ports of EagerSessionTest


def test_close_twice_is_a_no_op() -> None:
    session = EagerSession.create()
    session.close()
    assert session.closed
    session.close()
    assert session.closed


def test_on_session_close_keeps_collected_resource_until_close(make_session) -> None:
    garbage: queue.Queue[object] = queue.Queue()
    session = make_session(ON_SESSION_CLOSE, garbage)
    referent = Referent()
    reference = CountingReference(session, referent)
    garbage.put(reference)  # stands in for the collector
    session.safe_point()
    session.safe_point()
    assert not reference.deleted
    assert garbage.qsize() == 1
    session.close()
    assert reference.deleted


def test_on_safe_points_deletes_collected_resource_and_empties_queue(make_session) -> None:
    garbage: queue.Queue[object] = queue.Queue()
    session = make_session(ON_SAFE_POINTS, garbage)
    referent = Referent()
    reference = CountingReference(session, referent)
    garbage.put(reference)
    assert not reference.deleted
    session.safe_point()
    assert reference.deleted
    assert garbage.empty()


def test_in_background_deletes_collected_resource_quickly(make_session) -> None:
    garbage: queue.Queue[object] = queue.Queue()
    session = make_session(IN_BACKGROUND, garbage)
    referent = Referent()
    reference = CountingReference(session, referent)
    garbage.put(reference)
    assert wait_until(lambda: reference.deleted, timeout=0.5)


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_cleared_reference_is_never_deleted(make_session, strategy) -> None:
    garbage: queue.Queue[object] = queue.Queue()
    session = make_session(strategy, garbage)
    referent = Referent()
    reference = CountingReference(session, referent)
    reference.clear()
    assert not reference.registered
    garbage.put(reference)
    session.safe_point()
    session.close()  # its cleaner thread, if any, has ended: nothing deletes later
    assert reference.deletions == 0


def test_new_reference_on_closed_session_raises() -> None:
    session = EagerSession.create()
    session.close()
    with pytest.raises(SessionClosedError, match="Eager session has been closed"):
        CountingReference(session, Referent())
    with pytest.raises(SessionClosedError):
        session.attach(Referent(), lambda: None)


def test_op_builder_on_closed_session_raises() -> None:
    session = EagerSession.create()
    session.close()
    with pytest.raises(SessionClosedError, match="Eager session has been closed"):
        session.op_builder("Const")


def test_op_builder_drains_even_on_a_closed_session_before_the_check() -> None:
    # Java's opBuilder() drained the queue first, then checked for closed.
    garbage: queue.Queue[object] = queue.Queue()
    session = EagerSession.options().resource_cleanup_strategy(ON_SAFE_POINTS).build(garbage)
    session.close()
    garbage.put(Referent())
    with pytest.raises(SessionClosedError):
        session.op_builder("Const")
    assert garbage.empty()


class TestDefaultSession:
    @pytest.fixture(autouse=True)
    def reset_default(self) -> Iterator[None]:
        saved = EagerSession._default
        EagerSession._default = None
        yield
        made = EagerSession._default
        EagerSession._default = saved
        if made is not None:
            made._close()

    def test_init_default_then_get_default_is_the_same_session(self) -> None:
        options = EagerSession.options().resource_cleanup_strategy("on-safe-points")
        session = EagerSession.init_default(options)
        assert EagerSession.get_default() is session
        assert session.resource_cleanup_strategy is ON_SAFE_POINTS
        assert session.is_default

    def test_second_init_default_raises(self) -> None:
        EagerSession.init_default(EagerSession.options())
        with pytest.raises(RuntimeError, match=r"^Default eager session is already initialized$"):
            EagerSession.init_default(EagerSession.options())

    def test_init_default_after_get_default_raises(self) -> None:
        EagerSession.get_default()
        with pytest.raises(RuntimeError, match="already initialized"):
            EagerSession.init_default(EagerSession.options())

    def test_get_default_is_built_lazily_with_default_options(self) -> None:
        assert EagerSession._default is None
        session = EagerSession.get_default()
        assert session.resource_cleanup_strategy is IN_BACKGROUND
        assert EagerSession.get_default() is session

    def test_closing_the_default_session_raises_every_time(self) -> None:
        session = EagerSession.get_default()
        for _ in range(2):
            with pytest.raises(RuntimeError, match=r"^Default eager session cannot be closed$"):
                session.close()
        assert not session.closed

    def test_default_session_cleaner_is_a_daemon(self) -> None:
        session = EagerSession.get_default()
        assert session.cleaner is not None
        assert session.cleaner.thread.daemon


# ---------------------------------------------------------------- contracts with real garbage


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_referent_death_only_enqueues(make_session, strategy) -> None:
    session = make_session(strategy)
    referent = Referent()
    reference = CountingReference(session, referent)
    if strategy is IN_BACKGROUND:
        assert session.cleaner is not None
        session.cleaner.stop()  # hold the cleaner so the queue can be seen
        assert wait_until(lambda: session.stats().pending == 0)  # its thread read the stop
    del referent
    assert not reference.deleted
    assert session.stats().pending == 1


def test_in_background_deletes_when_the_referent_dies(make_session) -> None:
    session = make_session(IN_BACKGROUND)
    referent = Referent()
    reference = CountingReference(session, referent)
    del referent
    assert wait_until(lambda: reference.deleted)
    assert session.stats().deleted == 1


def test_on_safe_points_deletes_at_the_next_safe_point_only(make_session) -> None:
    session = make_session(ON_SAFE_POINTS)
    referent = Referent()
    reference = CountingReference(session, referent)
    del referent  # no thread runs under this strategy: only a safe point deletes
    assert not reference.deleted
    session.safe_point()
    assert reference.deleted


def test_on_session_close_waits_for_close(make_session) -> None:
    session = make_session(ON_SESSION_CLOSE)
    referent = Referent()
    reference = CountingReference(session, referent)
    del referent  # no thread runs under this strategy, and a safe point deletes nothing
    session.safe_point()
    assert not reference.deleted
    session.close()
    assert reference.deleted


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_close_deletes_references_whose_referent_is_alive(make_session, strategy) -> None:
    session = make_session(strategy)
    referent = Referent()
    reference = CountingReference(session, referent)
    session.close()
    assert reference.deleted
    assert referent is not None


def package_threads() -> list[threading.Thread]:
    """The package's threads alive now (every cleaner is named ``eagersession-...``)."""
    return [thread for thread in threading.enumerate() if thread.name.startswith("eagersession-")]


def test_in_background_has_a_daemon_thread_of_its_own_from_build_to_close() -> None:
    """As in TensorFlow Java: each session's thread starts as it is built and ends as it is
    closed (the close waits for its end); closing one leaves the other's running."""
    import tensorflow  # noqa: F401  (built before TensorFlow is imported, see the test below)

    before = set(threading.enumerate())
    session = EagerSession.create()
    other = EagerSession.create()
    assert session.cleaner is not None
    assert other.cleaner is not None
    thread, other_thread = session.cleaner.thread, other.cleaner.thread
    assert set(threading.enumerate()) - before == {thread, other_thread}
    assert thread.daemon
    assert thread.name == f"eagersession-cleaner-{id(session):x}"
    assert session.cleaner.running
    session.close()  # waits for the thread to end: a check right after finds none of ours
    assert not session.cleaner.running
    assert not thread.is_alive()
    assert other.cleaner.running
    other.close()
    assert set(threading.enumerate()) == before


BEFORE_TENSORFLOW = """
import threading

from pytest_eagersession import EagerSession


def ours():
    return sum(t.name.startswith("eagersession-") for t in threading.enumerate())


class Referent:
    pass


session = EagerSession.create()
session.activate()
session.deactivate()
counts = [ours()]  # built and used, nothing of TensorFlow's to clean: no thread
other = EagerSession.create()
session.attach(Referent(), lambda: None)  # a reference to delete: its thread starts
counts.append(ours())
import tensorflow  # noqa: E402

other.activate()  # the first activation after TensorFlow is imported starts the other's
other.deactivate()
counts.append(ours())
third = EagerSession.create()  # built with TensorFlow imported: at once
counts.append(ours())
for each in (session, other, third):
    each.close()
counts.append(ours())
print(counts)
"""


def test_a_session_built_before_tensorflow_starts_its_thread_only_when_it_has_work() -> None:
    """A suite that never imports TensorFlow starts no thread: before TensorFlow, a session's
    thread starts with its first registered reference, or its first activation after."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", BEFORE_TENSORFLOW], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[0, 1, 2, 3, 0]"


def test_once_every_session_is_closed_no_thread_of_the_package_is_alive() -> None:
    """Sessions used every way a suite uses them (nested, activated in threads, deleting,
    never activated) leave no thread once closed: none is parked for later."""
    import tensorflow as tf

    before = set(package_threads())  # sessions other tests left open, if any
    sessions = [EagerSession.create() for _ in range(6)]
    sessions[0].activate()
    sessions[1].activate()  # nested
    referents = [Referent() for _ in range(3)]
    for referent in referents:
        CountingReference(sessions[0], referent)
    tf.constant(1.0) + 1.0
    del referents  # the first session's thread deletes them
    sessions[1].deactivate()
    sessions[0].deactivate()
    worker = threading.Thread(target=lambda: sessions[2].activate() and sessions[2].deactivate())
    worker.start()
    worker.join()
    assert len(set(package_threads()) - before) == 6
    for session in sessions:
        session.close()
    assert set(package_threads()) <= before


def test_a_closed_sessions_thread_keeps_nothing_of_it() -> None:
    import gc
    import weakref

    session = EagerSession.create()
    with session:
        pass
    assert session.cleaner is not None
    thread = session.cleaner.thread
    ref = weakref.ref(session)
    session.close()
    del session
    assert not thread.is_alive()
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("strategy", [IN_BACKGROUND, ON_SAFE_POINTS, ON_SESSION_CLOSE])
def test_a_closed_session_is_freed_as_soon_as_it_is_dropped(strategy) -> None:
    """No reference cycle keeps a closed session: its parts refer back to it weakly. (A cycle
    waits for the collector, and a plugin run keeps the heap frozen between tests: every
    test's session, with its thread's locks and events, stayed until the heap grew by a
    quarter.)"""
    import gc
    import weakref

    import tensorflow as tf

    session = EagerSession.options().resource_cleanup_strategy(strategy).build()
    with session:
        assert float(tf.reduce_sum(tf.ones([4]) + 1.0)) == 8.0
    ref = weakref.ref(session)
    gc.disable()
    try:
        session.close()
        del session
        assert ref() is None
    finally:
        gc.enable()


def test_close_waits_for_the_deleter_under_way_and_deletes_what_is_queued_itself() -> None:
    """Close waits for what its cleaner is doing (a deleter), not for its thread to leave; the
    cleaner deletes nothing more: what is queued behind is the close's."""
    session = EagerSession.create()
    inside, go = threading.Event(), threading.Event()
    ran: list[tuple[str, threading.Thread]] = []

    def slow() -> None:
        ran.append(("slow", threading.current_thread()))
        inside.set()
        go.wait(10)

    first, second = Referent(), Referent()
    session.attach(first, slow)
    session.attach(second, lambda: ran.append(("queued", threading.current_thread())))
    del first
    assert inside.wait(5)  # the cleaner's thread is inside the first deleter
    del second  # queued behind it
    timer = threading.Timer(0.2, go.set)
    timer.start()
    started = time.monotonic()
    session.close()
    waited = time.monotonic() - started
    timer.join()
    assert waited >= 0.15
    assert [(name, thread is threading.current_thread()) for name, thread in ran] == [
        ("slow", False),
        ("queued", True),
    ]


def test_a_session_activated_long_after_its_build_is_still_cleaned(make_session) -> None:
    """The thread's first wait assumes an activation soon after the build; a session activated
    later (a wider fixture's, built before its first test) wakes it and is watched."""
    import tensorflow as tf

    session = make_session(IN_BACKGROUND)
    threading.Event().wait(0.05)  # the scenario: nothing happens for a while after the build

    class Cyclic:
        def __init__(self, value: object) -> None:
            self.value, self.me = value, self

    with session:
        for i in range(40):
            Cyclic(tf.fill([256, 1024], float(i)))  # 1 MiB each, only in cycles
        assert wait_until(lambda: session.stats().cycle_collections > 0)


@pytest.mark.parametrize("strategy", [ON_SAFE_POINTS, ON_SESSION_CLOSE])
def test_other_strategies_start_no_thread(strategy) -> None:
    before = set(threading.enumerate())
    session = EagerSession.options().resource_cleanup_strategy(strategy).build()
    assert session.cleaner is None
    with session:
        assert set(threading.enumerate()) == before
    session.close()


def test_attach_calls_the_deleter_once() -> None:
    calls: list[int] = []
    session = EagerSession.options().resource_cleanup_strategy(ON_SAFE_POINTS).build()
    referent = Referent()
    reference = session.attach(referent, lambda: calls.append(1))
    assert reference.registered
    del referent
    session.safe_point()
    session.close()
    assert calls == [1]


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_each_reference_deleted_at_most_once_under_races(strategy) -> None:
    session = EagerSession.options().resource_cleanup_strategy(strategy).build()
    references = []
    referents = [Referent() for _ in range(300)]
    for referent in referents:
        references.append(CountingReference(session, referent))
    stop = threading.Event()

    def safe_points() -> None:
        while not stop.is_set():
            session.safe_point()

    racer = threading.Thread(target=safe_points)
    racer.start()
    del referents[::2]
    session.close()
    stop.set()
    racer.join()
    assert all(reference.deletions == 1 for reference in references)
    assert session.stats().deleted == 300


# ---------------------------------------------------------------- faults and stats


class FailingReference(NativeReference):
    def delete(self) -> None:
        raise OSError("device gone")


@pytest.mark.parametrize("strategy", list(ResourceCleanupStrategy))
def test_a_failing_delete_warns_and_cleanup_goes_on(strategy) -> None:
    session = EagerSession.options().resource_cleanup_strategy(strategy).build()
    bad_referent, good_referent = Referent(), Referent()
    FailingReference(session, bad_referent)
    good = CountingReference(session, good_referent)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del bad_referent
        if strategy is IN_BACKGROUND:
            assert wait_until(lambda: session.stats().cleanup_errors == 1)
        session.safe_point()
        del good_referent
        session.safe_point()
        session.close()
    assert good.deleted
    assert session.stats().cleanup_errors == 1
    if strategy is not IN_BACKGROUND:  # the cleaner's warning goes to its own thread
        assert [w.category for w in caught] == [ResourceCleanupWarning]
        assert "raised OSError: device gone; cleanup went on" in str(caught[0].message)


def test_background_cleaner_survives_a_failing_delete() -> None:
    session = EagerSession.create()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = Referent()
        FailingReference(session, first)
        del first
        assert wait_until(lambda: session.stats().cleanup_errors == 1)
    second = Referent()
    good = CountingReference(session, second)
    del second
    assert wait_until(lambda: good.deleted)
    session.close()


def test_stats_count_registered_peak_deleted_pending_and_runs() -> None:
    session = EagerSession.options().resource_cleanup_strategy(ON_SAFE_POINTS).build()
    referents = [Referent() for _ in range(3)]
    for referent in referents:
        CountingReference(session, referent)
    assert session.stats().registered == 3
    del referents[:2]
    stats = session.stats()
    assert (stats.registered, stats.pending, stats.deleted) == (3, 2, 0)
    session.safe_point()
    stats = session.stats()
    assert (stats.registered, stats.peak_registered, stats.deleted) == (1, 3, 2)
    assert (stats.pending, stats.cleanup_runs) == (0, 1)
    session.close()
    stats = session.stats()
    assert (stats.registered, stats.deleted, stats.cleanup_runs) == (0, 3, 2)


def test_with_block_closes_the_session() -> None:
    with EagerSession.create() as session:
        reference = CountingReference(session, Referent())
        assert not session.closed
    assert session.closed
    assert reference.deleted


def test_sessions_are_built_through_options_only() -> None:
    with pytest.raises(TypeError, match=r"EagerSession\.create\(\)"):
        EagerSession(EagerSession.options())


def test_one_options_builds_many_sessions() -> None:
    options = EagerSession.options().resource_cleanup_strategy(ON_SESSION_CLOSE)
    first, second = options.build(), options.build()
    assert first is not second
    assert first.resource_cleanup_strategy is second.resource_cleanup_strategy is ON_SESSION_CLOSE
    first.close()
    assert not second.closed
    second.close()


def test_options_reject_bad_values_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="choose one of in_background, on_safe_points"):
        EagerSession.options().resource_cleanup_strategy("sometimes")
    with pytest.raises(ValueError, match="explicit, warn, silent, silent_for_int32"):
        EagerSession.options().device_placement_policy("loud")
    with pytest.raises(TypeError, match="bool"):
        EagerSession.options().async_("yes")  # type: ignore[arg-type]
