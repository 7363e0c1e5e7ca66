"""The session under stress: with concurrency, faults and bad input, nothing is lost or hangs.

Every stress test runs for a bounded time and joins its threads with a timeout, so that a
deadlock fails the test instead of hanging the run. The subprocess tests need a fresh process:
what happens at interpreter exit, and a machine without TensorFlow.
"""

from __future__ import annotations

import gc
import os
import queue
import random
import subprocess
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import (
    ALLOW_CHOICES,
    IN_BACKGROUND,
    LEAKS_CHOICES,
    MARKER_SIGNATURE,
    ON_SAFE_POINTS,
    STRATEGY_CHOICES,
)
from support import wait_until as wait_for

from pytest_eagersession import (
    DevicePlacementPolicy,
    EagerSession,
    NativeReference,
    ResourceCleanupStrategy,
    ResourceCleanupWarning,
)
from pytest_eagersession.core import session as session_module
from pytest_eagersession.core.survivors import check_allow_filter
from pytest_eagersession.core.tracking import TRACKER
from pytest_eagersession.plugin.setting_values import (
    SettingsError,
    parse_bool,
    parse_count,
    parse_strategy,
)
from pytest_eagersession.plugin.settings import (
    LEAK_MODES,
    Settings,
    bind_marker,
    parse_leaks,
    policy_for,
    resolve,
)

tf = pytest.importorskip("tensorflow")

STRATEGIES = list(ResourceCleanupStrategy)

#: How long each stress test makes and drops resources.
STRESS_S = 0.75
THREADS = 8
#: A thread still alive this long after its work should have ended is deadlocked.
JOIN_S = 30.0

SIGNATURE = f"its signature is {MARKER_SIGNATURE}"

# Each test builds and closes its own sessions, with their own strategies and checks; the
# outer plugin's leak check would only see the tensors that the threads' races attribute to
# it (ownership is process-wide: see docs/guarantees.md).
pytestmark = pytest.mark.cleanup(leaks="off")


class Referent:
    """Something a native reference can point at."""


class Ledger:
    """What the references of a stress test saw, shared by every thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.early: list[str] = []
        self.errors: list[str] = []

    def note_early(self, what: str) -> None:
        with self.lock:
            self.early.append(what)

    def note_error(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)


class Watched(NativeReference):
    """Counts its deletions and notes one that came while its referent was alive, before close."""

    def __init__(
        self, session: EagerSession, referent: object, ledger: Ledger, *, fail: bool = False
    ) -> None:
        self._probe = weakref.ref(referent)
        self._ledger = ledger
        self._fail = fail
        self._count_lock = threading.Lock()
        self.deletions = 0
        super().__init__(session, referent)

    def delete(self) -> None:
        with self._count_lock:
            self.deletions += 1
        if self._probe() is not None and not self._ledger.closing.is_set():
            self._ledger.note_early(f"{self!r} deleted while its referent was alive")
        if self._fail:
            raise OSError("device gone")


class Deleter:
    """The deleter given to ``session.attach``, with the same checks as ``Watched``."""

    def __init__(self, referent: object, ledger: Ledger) -> None:
        self._probe = weakref.ref(referent)
        self._ledger = ledger
        self._count_lock = threading.Lock()
        self.deletions = 0

    def __call__(self) -> None:
        with self._count_lock:
            self.deletions += 1
        if self._probe() is not None and not self._ledger.closing.is_set():
            self._ledger.note_early("an attached deleter ran while its referent was alive")


def build(strategy: ResourceCleanupStrategy, **options: Any) -> EagerSession:
    builder = EagerSession.options().resource_cleanup_strategy(strategy)
    for name, value in options.items():
        getattr(builder, name)(value)
    return builder.build()


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    return wait_for(condition, timeout)


def run_threads(target: Callable[[int], None], count: int = THREADS) -> None:
    """Run ``target(n)`` in ``count`` threads; fail if one raises or is still alive after JOIN_S."""
    failures: list[BaseException] = []

    def guarded(number: int) -> None:
        try:
            target(number)
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    threads = [
        threading.Thread(target=guarded, args=(n,), name=f"stress-{n}", daemon=True)
        for n in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_S)
    stuck = [thread.name for thread in threads if thread.is_alive()]
    assert not stuck, f"deadlocked threads: {stuck}"
    if failures:
        raise failures[0]


def cleaner_stopped(session: EagerSession) -> bool:
    cleaner = session.cleaner
    return cleaner is None or not cleaner.running


# ---------------------------------------------------------------- concurrency


@pytest.mark.parametrize("faults", [False, True], ids=["clean", "failing-deletes"])
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.value)
def test_threads_share_one_session(strategy: ResourceCleanupStrategy, faults: bool) -> None:
    """8 threads make and drop references (to plain objects and tensors) in one active session."""
    session = build(strategy)
    ledger = Ledger()
    kept: list[object] = []
    made: list[tuple[Watched | Deleter, bool]] = []  # (reference or deleter, will it fail)
    deadline = time.monotonic() + STRESS_S

    def worker(number: int) -> None:
        rng = random.Random(number)
        mine: list[tuple[Watched | Deleter, bool]] = []
        keep: list[object] = []
        session.activate()
        try:
            while len(mine) < 20 or time.monotonic() < deadline:  # however late it started
                referent: object = (
                    tf.constant([float(number)]) * 2 if rng.random() < 0.3 else Referent()
                )
                fail = faults and rng.random() < 0.1
                if fail or rng.random() < 0.5:
                    mine.append((Watched(session, referent, ledger, fail=fail), fail))
                else:
                    deleter = Deleter(referent, ledger)
                    session.attach(referent, deleter)
                    mine.append((deleter, False))
                if rng.random() < 0.2:
                    keep.append(referent)  # alive until after close: never deleted before it
                del referent
                if rng.random() < 0.05:
                    session.safe_point()
                    session.stats()
        finally:
            session.deactivate()
        with ledger.lock:
            made.extend(mine)
            kept.extend(keep)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_threads(worker)
        created = len(made)
        failing = sum(1 for _, fail in made if fail)
        assert created >= THREADS * 20
        stats = session.stats()
        assert stats.registered + stats.deleted == created
        dropped = created - len(kept)
        if strategy is IN_BACKGROUND:
            assert wait_until(lambda: session.stats().deleted == dropped), session.stats()
        elif strategy is ON_SAFE_POINTS:
            session.safe_point()
            assert session.stats().deleted == dropped
        else:
            assert session.stats().deleted == 0
            assert session.stats().pending == dropped
        assert ledger.early == []
        ledger.closing.set()
        session.close()
    assert [entry.deletions for entry, _ in made] == [1] * created
    stats = session.stats()
    assert (stats.registered, stats.deleted, stats.pending) == (0, created, 0)
    assert stats.cleanup_errors == failing
    cleanup_warnings = [w for w in caught if issubclass(w.category, ResourceCleanupWarning)]
    assert len(cleanup_warnings) == failing
    assert cleaner_stopped(session)
    assert not session.active
    tensors = [obj for obj in kept if not isinstance(obj, Referent)]
    assert all(float(t[0]) >= 0 for t in tensors)  # still alive and usable after close


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.value)
def test_threads_with_sessions_of_their_own(strategy: ResourceCleanupStrategy) -> None:
    """8 threads each open, use and close sessions of their own, over and over."""
    ledger = Ledger()
    closed: list[EagerSession] = []
    deadline = time.monotonic() + STRESS_S

    def worker(number: int) -> None:
        rng = random.Random(number)
        rounds = 0
        while rounds < 2 or time.monotonic() < deadline:  # however late it started
            rounds += 1
            own_ledger = Ledger()
            references = []
            kept = []
            with build(strategy) as session:
                for index in range(20):
                    referent: object = Referent() if index % 2 else tf.constant([1.0]) + index
                    references.append(Watched(session, referent, own_ledger))
                    if rng.random() < 0.3:
                        kept.append(referent)
                    del referent
                total = tf.add_n([tf.constant([float(index)]) for index in range(5)])
                assert float(total[0]) == 10.0
                stats = session.stats()
                assert stats.registered + stats.deleted == 20
                own_ledger.closing.set()
            stats = session.stats()
            if (stats.registered, stats.deleted, stats.pending) != (0, 20, 0):
                ledger.note_error(f"{session!r}: {stats}")
            if [reference.deletions for reference in references] != [1] * 20:
                ledger.note_error(f"{session!r}: a reference not deleted exactly once")
            if not cleaner_stopped(session) or session.active:
                ledger.note_error(f"{session!r}: still running after close")
            ledger.early.extend(own_ledger.early)
            with ledger.lock:
                closed.append(session)
            kept.clear()

    run_threads(worker)
    assert len(closed) >= 2 * THREADS
    assert all(session.closed for session in closed)
    assert ledger.errors == []
    assert ledger.early == []
    assert not any(TRACKER.is_active(session) for session in closed)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.value)
def test_concurrent_closes_return_once_everything_is_deleted(
    strategy: ResourceCleanupStrategy,
) -> None:
    session = build(strategy)
    ledger = Ledger()
    kept = [Referent() for _ in range(100)]

    class SlowReference(Watched):
        def delete(self) -> None:
            time.sleep(0.001)
            super().delete()

    references = [SlowReference(session, referent, ledger) for referent in kept]
    session.activate()
    tensor = tf.constant([1.0, 2.0])
    session.deactivate()
    ledger.closing.set()
    barrier = threading.Barrier(THREADS)
    seen: list[tuple[list[int], tuple[Any, ...]]] = []

    def close(_: int) -> None:
        barrier.wait()
        survivors = session.close()
        seen.append(([reference.deletions for reference in references], survivors))

    run_threads(close)
    assert len(seen) == THREADS
    for deletions, survivors in seen:
        assert deletions == [1] * len(references)  # nobody returned before the cleanup was done
        assert [survivor.ref() for survivor in survivors] == [tensor]
    assert ledger.early == []


def test_closing_stops_ownership_in_every_thread_that_activated_the_session() -> None:
    session = EagerSession.create()
    release = threading.Event()
    activated = threading.Barrier(3)

    def hold(_: int) -> None:
        session.activate()
        activated.wait()
        release.wait(JOIN_S)
        session.deactivate()  # still allowed after close: it only undoes this thread's scope

    holders = [threading.Thread(target=hold, args=(n,), daemon=True) for n in range(2)]
    for holder in holders:
        holder.start()
    activated.wait()
    assert session.active
    session.close()
    try:
        assert not session.active
        assert TRACKER.owner() is not session
    finally:
        release.set()
        for holder in holders:
            holder.join(JOIN_S)
    assert not any(holder.is_alive() for holder in holders)


class RecordingQueue(queue.Queue):  # type: ignore[type-arg]
    """A garbage queue that records what is put in it: each put wakes a waiting cleaner."""

    def __init__(self) -> None:
        super().__init__()
        self.puts: list[object] = []

    def put(self, item: object, block: bool = True, timeout: float | None = None) -> None:
        self.puts.append(item)
        super().put(item, block, timeout)


def _ends(session: EagerSession) -> Callable[[], bool]:
    """Whether ``session`` was freed: its cleaner's thread no longer runs its job."""
    ref = weakref.ref(session)
    return lambda: gc.collect() >= 0 and ref() is None


@pytest.mark.parametrize("state", ["just built", "active", "idle"])
def test_a_close_ends_the_cleaners_thread_whatever_its_wait(state: str) -> None:
    """A closed session's thread leaves as it reads the close's ``STOP``, and the close waits
    for that: from its first wait (just built), a timed one (active), or an untimed one (idle:
    deactivated, its first wait over); nothing of the session stays with it."""
    from pytest_eagersession.core.references import STOP

    garbage = RecordingQueue()
    session = EagerSession.options().build(garbage_queue=garbage)
    assert session.cleaner is not None
    thread = session.cleaner.thread
    if state != "just built":
        session.activate()
    if state == "idle":
        session.deactivate()
        threading.Event().wait(0.05)  # the scenario: nothing happens for a while
    session.close()
    assert garbage.puts[:1] == [STOP]
    assert not thread.is_alive()
    ended = _ends(session)
    del session
    assert ended()


def test_tensorflow_threads_run_python_inside_an_active_session() -> None:
    """tf.data's threads call back into Python (py_function) while the cleaner deletes."""
    session = EagerSession.create()
    ledger = Ledger()
    deleters: list[Deleter] = []

    def make_in_tensorflow_thread(value: Any) -> Any:
        referent = Referent()
        deleter = Deleter(referent, ledger)
        session.attach(referent, deleter)
        deleters.append(deleter)
        return value * 2

    def worker(_: int) -> None:
        dataset = (
            tf.data.Dataset.range(40)
            .map(lambda x: tf.py_function(make_in_tensorflow_thread, [x], tf.int64))
            .prefetch(4)
        )
        assert sum(int(value) for value in dataset) == 2 * sum(range(40))

    with session:
        run_threads(worker, count=4)
        assert wait_until(lambda: session.stats().deleted == len(deleters))
    assert len(deleters) == 4 * 40
    assert [deleter.deletions for deleter in deleters] == [1] * len(deleters)
    assert ledger.early == []
    assert cleaner_stopped(session)


# ---------------------------------------------------------------- faults


@pytest.mark.parametrize("error", [ValueError("boom"), KeyboardInterrupt()], ids=type)
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.value)
def test_an_exception_in_a_with_block_propagates_unchanged(
    strategy: ResourceCleanupStrategy, error: BaseException
) -> None:
    session = build(strategy)
    ledger = Ledger()
    referent = Referent()
    reference = Watched(session, referent, ledger)
    ledger.closing.set()

    def block() -> None:
        with session:
            assert float(tf.reduce_sum(tf.constant([1.0, 2.0]))) == 3.0
            raise error

    with pytest.raises(type(error)) as caught:
        block()
    assert caught.value is error
    assert session.closed
    assert not session.active
    assert cleaner_stopped(session)
    assert reference.deletions == 1


def test_a_cleanup_error_at_close_does_not_replace_the_blocks_exception() -> None:
    session = EagerSession.create()
    referent = Referent()

    def failing() -> None:
        raise OSError("device gone")

    session.attach(referent, failing)
    error = ValueError("the block's own error")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceCleanupWarning)
        with pytest.raises(ValueError, match="the block's own error") as caught, session:
            raise error
    assert caught.value is error
    if sys.version_info >= (3, 11):
        assert any("ResourceCleanupWarning" in note for note in caught.value.__notes__)
    assert session.closed
    assert cleaner_stopped(session)


def test_a_cleanup_error_without_a_block_error_is_raised_after_cleanup() -> None:
    session = EagerSession.create()
    ledger = Ledger()
    bad, good = Referent(), Referent()
    Watched(session, bad, ledger, fail=True)
    reference = Watched(session, good, ledger)
    ledger.closing.set()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceCleanupWarning)
        with pytest.raises(ResourceCleanupWarning, match="device gone"), session:
            pass
    assert reference.deletions == 1
    assert session.closed
    assert cleaner_stopped(session)


def test_an_asynchronous_op_error_at_close_still_deletes_everything() -> None:
    session = EagerSession.options().async_(True).build()
    ledger = Ledger()
    referent = Referent()
    reference = Watched(session, referent, ledger)
    ledger.closing.set()
    with pytest.raises(tf.errors.InvalidArgumentError, match="not in"), session:
        tf.gather(tf.constant([1, 2, 3]), [10])
    assert reference.deletions == 1
    assert session.stats().registered == 0
    assert session.closed
    assert cleaner_stopped(session)
    assert session.close() == session.close()


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.value)
def test_a_close_cut_short_is_finished_by_the_next_close(
    strategy: ResourceCleanupStrategy,
) -> None:
    """Ctrl-C (or a timeout's signal) in the middle of close(): a deleter stands in for it."""
    session = build(strategy)
    ledger = Ledger()
    kept = [Referent() for _ in range(4)]

    def interrupt() -> None:
        raise KeyboardInterrupt

    session.attach(kept[0], interrupt)
    references = [Watched(session, referent, ledger) for referent in kept[1:]]
    ledger.closing.set()
    with pytest.raises(KeyboardInterrupt):
        session.close()
    assert session.closed
    assert wait_until(lambda: cleaner_stopped(session))
    assert [reference.deletions for reference in references] == [0, 0, 0]
    assert session.close() == ()
    assert [reference.deletions for reference in references] == [1, 1, 1]
    stats = session.stats()
    assert (stats.registered, stats.deleted, stats.pending) == (0, 4, 0)
    assert session.close() == ()  # and now a no-op


def test_a_block_that_deactivated_its_session_still_closes_it() -> None:
    session = EagerSession.create()
    with pytest.raises(RuntimeError, match="not the innermost active session"), session:
        session.deactivate()
    assert session.closed
    assert cleaner_stopped(session)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_fork_while_a_background_session_is_open() -> None:
    ledger = Ledger()
    with EagerSession.create() as session:
        tensor = tf.constant([1.0, 2.0]) * 2
        referent = Referent()
        kept_reference = Watched(session, referent, ledger)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
            pid = os.fork()
        if pid == 0:  # the child: TensorFlow-free work, then out without running anything else
            code = 1
            try:
                total = sum(range(1000))
                inherited = list(session_module._OPEN_SESSIONS)
                code = 0 if total == 499500 and not inherited else 3
            finally:
                os._exit(code)
        deadline = time.monotonic() + JOIN_S
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        assert os.WIFEXITED(status)
        assert os.WEXITSTATUS(status) == 0, "the child inherited open sessions"
        # The parent's session still works: its cleaner deletes, its ops run.
        dropped = Referent()
        reference = Watched(session, dropped, ledger)
        del dropped
        assert wait_until(lambda: reference.deletions == 1)
        assert float(tf.reduce_sum(tensor)) == 6.0
        ledger.closing.set()
    assert kept_reference.deletions == 1
    assert ledger.early == []
    assert cleaner_stopped(session)


CARELESS = """
import os, sys, time
import tensorflow as tf
from pytest_eagersession import EagerSession

sys.stderr.write("--- imported ---\\n")
sys.stderr.flush()

class Referent:
    pass

def deleter(label):
    return lambda: print(f"deleted {label} in {os.getpid()}", flush=True)

keep = []
for strategy in ("in_background", "on_safe_points", "on_session_close"):
    session = EagerSession.options().resource_cleanup_strategy(strategy).build()
    session.activate()
    keep += [tf.constant([1.0]) * 2, tf.Variable([2.0]), Referent()]
    session.attach(keep[-1], deleter(strategy))
    for _ in range(3):
        referent = Referent()
        session.attach(referent, deleter(strategy + " dropped"))
        del referent
default = EagerSession.get_default()
keep.append(Referent())
default.attach(keep[-1], deleter("default"))
forgotten = EagerSession.create()
keep.append(Referent())
forgotten.attach(keep[-1], deleter("forgotten"))
del forgotten
if hasattr(os, "fork"):
    # A child that exits the normal way: the sessions it inherited are not its to close.
    pid = os.fork()
    if pid == 0:
        sys.exit(0)
    deadline = time.monotonic() + 30
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            print("child hung", flush=True)
            break
        time.sleep(0.01)
print(f"parent {os.getpid()} done {time.time()}", flush=True)
"""


def test_sessions_left_open_are_closed_quietly_at_exit() -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "error"}
    result = subprocess.run(
        [sys.executable, "-c", CARELESS], capture_output=True, text=True, timeout=120, env=env
    )
    ended = time.time()
    assert result.returncode == 0, result.stderr
    assert result.stderr.split("--- imported ---\n", 1)[1] == ""
    lines = result.stdout.splitlines()
    done = [line for line in lines if line.startswith("parent ")]
    assert len(done) == 1
    _, parent, _, done_at = done[0].split()
    assert ended - float(done_at) < 10.0, "closing at exit took too long"
    deleted = sorted(line for line in lines if line.startswith("deleted "))
    expected = ["default", "forgotten", "in_background", "on_safe_points", "on_session_close"]
    dropped = [f"{label} dropped" for label in expected[2:] for _ in range(3)]
    assert deleted == sorted(f"deleted {label} in {parent}" for label in expected + dropped)
    assert "child hung" not in lines


TENSORFLOW_MISSING = """
import sys, types
sys.modules["tensorflow"] = None
from pytest_eagersession import EagerSession, TensorFlowMissingError

def expect_missing(label, action, text):
    try:
        action()
    except TensorFlowMissingError as error:
        assert "pip install 'pytest-eagersession[cpu]'" in str(error), str(error)
        assert text in str(error), str(error)
        print("missing:", label)
    else:
        print("no error:", label)

expect_missing("async", lambda: EagerSession.options().async_(True).build(), "import")
expect_missing("config", lambda: EagerSession.options().config(object()).build(), "import")
with EagerSession.create() as session:
    expect_missing(
        "op_builder",
        lambda: session.op_builder("Add").add_input(1).add_input(2).build(),
        "import",
    )

    class Referent:
        pass

    referent, deleted = Referent(), []
    session.attach(referent, lambda: deleted.append(1))
    assert session.survivors() == () and session.checkpoint() == 0
assert deleted == [1] and session.close() == ()
print("tensorflow-free session works")

old = types.ModuleType("tensorflow")
old.__version__ = "2.10.0"
sys.modules["tensorflow"] = old  # imported by someone else first
expect_missing("imported too old", lambda: EagerSession.options().async_(True).build(), "2.10.0")
del sys.modules["tensorflow"]
sys.path.insert(0, sys.argv[1])  # a fake tensorflow 2.15 package, imported by us
expect_missing("too old", lambda: EagerSession.options().async_(True).build(), "found 2.15.1")
"""


def test_without_tensorflow_the_tensorflow_paths_say_what_to_install(tmp_path) -> None:
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text('__version__ = "2.15.1"\n')
    result = subprocess.run(
        [sys.executable, "-c", TENSORFLOW_MISSING, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        "missing: async",
        "missing: config",
        "missing: op_builder",
        "tensorflow-free session works",
        "missing: imported too old",
        "missing: too old",
    ]


# ---------------------------------------------------------------- bad input, as properties

ANY_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=8)
    | st.sampled_from(
        [
            "in_background",
            "ON-SAFE-POINTS",
            " on_session_close ",
            "fail",
            "WARN",
            "off",
            "true",
            "0",
            "",
            " ",
            "(",
            "a{99999999999}",
            "(" * 1000 + ")" * 1000,
            ResourceCleanupStrategy.ON_SAFE_POINTS,
            DevicePlacementPolicy.WARN,
            float("inf"),
            len,
            object(),
        ]
    ),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=3), children, max_size=2)
    ),
    max_leaves=6,
)
FUZZ = settings(max_examples=300, deadline=None, database=None)


def attempt(
    parse: Callable[..., Any], *args: Any, expected: type[Exception] = SettingsError
) -> tuple[Any, str | None]:
    """``(result, None)``, or ``(None, message)`` for an ``expected`` error; others propagate."""
    try:
        return parse(*args), None
    except expected as error:
        return None, str(error)


@FUZZ
@given(ANY_VALUE)
def test_strategy_parsers_raise_only_value_errors_naming_the_choices(value: Any) -> None:
    strategy, error = attempt(ResourceCleanupStrategy.parse, value, expected=ValueError)
    assert isinstance(strategy, ResourceCleanupStrategy) or STRATEGY_CHOICES in str(error)
    strategy, error = attempt(parse_strategy, value, "WHERE")
    if error is None:
        assert isinstance(strategy, ResourceCleanupStrategy)
    else:
        assert error.startswith("WHERE: unknown strategy")
        assert STRATEGY_CHOICES in error
    policy, error = attempt(DevicePlacementPolicy.parse, value, expected=ValueError)
    if error is None:
        assert isinstance(policy, DevicePlacementPolicy)
    else:
        assert "choose one of explicit, warn, silent, silent_for_int32" in error


@FUZZ
@given(ANY_VALUE)
def test_value_parsers_raise_only_settings_errors_naming_the_choices(value: Any) -> None:
    leaks, error = attempt(parse_leaks, value, "WHERE")
    assert leaks in LEAK_MODES if error is None else error.startswith("WHERE: unknown leaks")
    assert error is None or LEAKS_CHOICES in error
    flag, error = attempt(parse_bool, value, "WHERE")
    assert isinstance(flag, bool) if error is None else "expected true or false" in error
    count, error = attempt(parse_count, value, "WHERE")
    if error is None:
        assert isinstance(count, int)
        assert count >= 0
    else:
        assert "WHERE: expected a whole number of 0 or more" in error


MARKER_MESSAGES = (
    STRATEGY_CHOICES,
    LEAKS_CHOICES,
    SIGNATURE,
    ALLOW_CHOICES,
    "True or False",
    "is not a regular expression",
    "expected a whole number of 0 or more",
    "is not a size",
    "a size cannot be negative",
)
MARKER_KEYWORDS = ("strategy", "leaks", "allow", "track_creation", "max_traces", "max_bytes")
MARKER_KEYS = st.sampled_from([*MARKER_KEYWORDS, "unknown"])


@FUZZ
@given(
    args=st.lists(ANY_VALUE, max_size=3),
    kwargs=st.dictionaries(MARKER_KEYS | st.text(max_size=4), ANY_VALUE, max_size=4),
    outer=st.dictionaries(MARKER_KEYS, ANY_VALUE, max_size=2),
)
@example(args=[], kwargs={"allow": 5}, outer={})
@example(args=[], kwargs={"allow": True}, outer={})
@example(args=[], kwargs={"allow": ["a{99999999999}"]}, outer={})
@example(args=[], kwargs={"allow": "(" * 1000 + ")" * 1000}, outer={})
@example(args=[], kwargs={"leaks": ["fail"]}, outer={})
def test_marker_arguments_raise_only_settings_errors_naming_the_choices(
    args: list[Any], kwargs: dict[str, Any], outer: dict[str, Any]
) -> None:
    bound, error = attempt(bind_marker, args, kwargs)
    if error is None:
        assert set(bound) <= set(MARKER_KEYWORDS)
    else:
        assert SIGNATURE in error
    marks = [(tuple(args), kwargs), ((), outer)]  # the closest first, as pytest yields them
    policy, error = attempt(policy_for, Settings(), marks)
    if error is None:
        assert isinstance(policy.strategy, ResourceCleanupStrategy)
        assert policy.leaks in LEAK_MODES
        assert isinstance(policy.track_creation, bool)
    else:
        assert error.startswith("@pytest.mark.cleanup")
        assert any(text in error for text in MARKER_MESSAGES), error


OPTIONAL_TEXT = st.none() | st.text(max_size=12) | st.sampled_from(["on_safe_points", "warn", "7"])
OPTION_MESSAGES = (
    STRATEGY_CHOICES,
    LEAKS_CHOICES,
    "expected true or false",
    "expected a whole number of 0 or more",
    "--eagersession-allow / eagersession_allow: allow pattern",
    "--eagersession-json: expected a file path",
    "--eagersession-graphs: expected a folder path",
)


@FUZZ
@given(
    cli=st.fixed_dictionaries(
        {
            "strategy": OPTIONAL_TEXT,
            "leaks": OPTIONAL_TEXT,
            "allow": st.none() | st.lists(st.text(max_size=8), max_size=3),
            "track_creation": st.sampled_from([None, True]),
            "max_leaks": OPTIONAL_TEXT,
            "json": OPTIONAL_TEXT,
            "graphs": OPTIONAL_TEXT,
        }
    ),
    ini=st.fixed_dictionaries(
        {
            "strategy": st.text(max_size=12),
            "leaks": st.text(max_size=12),
            "allow": st.lists(st.text(max_size=8), max_size=3),
            "track_creation": st.text(max_size=6),
            "max_leaks": st.text(max_size=6),
        }
    ),
    verbosity=st.integers(-2, 3),
)
@example(cli={"allow": ["a{99999999999}"]}, ini={}, verbosity=0)
@example(cli={"json": " "}, ini={}, verbosity=0)
def test_options_raise_only_settings_errors_naming_the_choices(
    cli: dict[str, Any], ini: dict[str, Any], verbosity: int
) -> None:
    resolved, error = attempt(lambda: resolve(cli, ini, verbosity=verbosity))
    if error is None:
        assert isinstance(resolved.strategy, ResourceCleanupStrategy)
        assert resolved.leaks in LEAK_MODES
        assert resolved.max_leaks is None or resolved.max_leaks >= 0
        assert resolved.json_path is None or resolved.json_path.strip()
    else:
        assert any(text in error for text in OPTION_MESSAGES), error


def test_a_blank_command_line_value_is_an_error_not_the_default() -> None:
    with pytest.raises(SettingsError, match=STRATEGY_CHOICES):
        resolve({"strategy": ""}, {"strategy": "on_safe_points"})
    with pytest.raises(SettingsError, match=LEAKS_CHOICES):
        resolve({"leaks": " "}, {})
    assert resolve({}, {"strategy": "", "leaks": ""}) == Settings()


@pytest.mark.parametrize("pattern", ["(", "a{99999999999}", "(" * 1000 + ")" * 1000])
def test_an_unusable_allow_pattern_is_a_value_error(pattern: str) -> None:
    with pytest.raises(ValueError, match="is not a regular expression"):
        check_allow_filter(pattern)


@pytest.fixture(autouse=True)
def _no_thread_of_ours_left() -> Iterator[None]:
    """Each test here ends with no cleaner thread of the sessions it made."""
    before = {thread.ident for thread in threading.enumerate()}
    yield
    left = [
        thread.name
        for thread in threading.enumerate()
        if thread.name.startswith("eagersession-cleaner-")
        and thread.ident not in before
        and thread is not threading.current_thread()
    ]
    # The outer plugin's own session for this test is still open: it started before us.
    assert left == []
