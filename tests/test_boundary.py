"""The line a session draws in the collector (``heap.BOUNDARY``), and other code's view of the heap.

While a session is active, everything older is frozen (``gc.freeze()``): the collector's
generations hold exactly what was made since. These tests run inside the plugin's own test
session, so the line is drawn throughout; the lifecycle without the plugin (thawed when the last
session ends) runs in a fresh interpreter.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from support import ON_SESSION_CLOSE

from pytest_eagersession import EagerSession
from pytest_eagersession.core.tracking import TRACKER
from pytest_eagersession.heap import listing as heap
from pytest_eagersession.heap.listing import BOUNDARY

tf = pytest.importorskip("tensorflow")


class Cycle:
    """Garbage only the cycle collector frees: it refers to itself."""

    def __init__(self, payload: Any = None) -> None:
        self.me = self
        self.payload = payload


@pytest.fixture
def session() -> Iterator[EagerSession]:
    made = EagerSession.options().resource_cleanup_strategy(ON_SESSION_CLOSE).build()
    yield made
    made.close()


def kept_by(session: EagerSession) -> list[object]:
    return [survivor.ref() for survivor in session.survivors()]


def test_the_line_is_drawn_while_a_session_is_active(session: EagerSession) -> None:
    with session:
        assert BOUNDARY.drawn
        assert gc.get_freeze_count() > 0
        assert gc.get_objects is not heap._GET_OBJECTS  # other code's listing thaws first


def test_a_listing_by_other_code_sees_the_whole_heap_and_keeps_the_line(session: EagerSession):
    old = Cycle()
    BOUNDARY.draw()  # older than the line from now on
    with session:
        made = tf.constant([1.0, 2.0])
        assert any(obj is old for obj in gc.get_objects())
        assert any(obj is old for obj in gc.get_objects(2))  # frozen objects go back to the oldest
        # the old cycle refers to itself: through its __dict__, or inline (3.13's attributes)
        assert any(
            ref is old or (type(ref) is dict and ref.get("me") is old)
            for ref in gc.get_referrers(old)
        )
        assert BOUNDARY.drawn
        later = tf.constant([3.0])
    assert sorted(map(id, kept_by(session))) == sorted([id(made), id(later)])
    del made, later


def test_a_listing_asked_for_a_wrong_generation_fails_as_the_interpreters(session):
    with session, pytest.raises(ValueError, match="generation"):
        gc.get_objects(5)


def test_a_collection_by_other_code_collects_the_whole_heap(session: EagerSession) -> None:
    old = weakref.ref(Cycle())  # garbage already, but older than the line: frozen
    BOUNDARY.draw()
    with session:
        assert old() is not None
        assert heap.BOUNDARY.collect_new() is not None  # what the session made, alone: not it
        assert old() is not None
        made = tf.constant([1.0])
        assert gc.collect() > 0
        assert old() is None
        assert BOUNDARY.drawn
    assert kept_by(session) == [made]
    del made


MADE_BY_A_FINALIZER: list[Any] = []


class MakesATensorWhenCollected:
    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        MADE_BY_A_FINALIZER.append(tf.constant([7.0, 7.0, 7.0]))


def test_what_a_finalizer_makes_during_a_whole_collection_is_the_sessions(session) -> None:
    old = weakref.ref(MakesATensorWhenCollected())  # garbage, behind the line
    BOUNDARY.draw()
    with session:
        gc.collect()
        assert old() is None
        assert len(MADE_BY_A_FINALIZER) == 1
    assert kept_by(session) == MADE_BY_A_FINALIZER
    MADE_BY_A_FINALIZER.clear()


@pytest.mark.parametrize("call", ["freeze", "unfreeze"])
def test_freezing_or_thawing_by_other_code_keeps_what_the_session_made(session, call) -> None:
    with session:
        before = tf.constant([1.0])
        getattr(gc, call)()
        assert BOUNDARY.drawn  # a thaw waits until the line is erased
        after = tf.constant([2.0, 2.0])
    assert sorted(map(id, kept_by(session))) == sorted([id(before), id(after)])
    del before, after


def test_an_inner_session_collects_its_own_garbage_without_the_whole_heap(
    session: EagerSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole: list[int] = []
    real = BOUNDARY.collect_whole

    def counted(classes: Any = ()) -> Any:
        whole.append(1)
        return real(classes)

    monkeypatch.setattr(BOUNDARY, "collect_whole", counted)
    monkeypatch.setattr(BOUNDARY, "compaction_due", lambda: False)  # its own test, below
    inner = EagerSession.options().resource_cleanup_strategy(ON_SESSION_CLOSE).build()
    with session:
        outer_made = tf.constant([1.0])
        with inner:
            dying = weakref.ref(Cycle(tf.ones((64,))))
        assert dying() is None  # collected at the inner session's close
        assert whole == []  # by a collection of what it made, alone
    assert kept_by(session) == [outer_made]
    del outer_made


def test_a_survivor_kept_only_by_an_old_cycle_is_found_by_the_whole_collection(
    session: EagerSession,
) -> None:
    parked = [Cycle()]
    BOUNDARY.draw()  # the cycle is older than the session
    with session:
        parked[0].payload = tf.ones((16,))
        parked.clear()  # garbage now, behind the line
    assert session.close() == ()


def test_the_heap_is_collected_whole_once_it_grew_by_a_quarter(
    session: EagerSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the line held between sessions, the interpreter cannot collect what it froze: the
    tracker does, when a session ends and the heap grew by a quarter."""
    inner = EagerSession.options().resource_cleanup_strategy(ON_SESSION_CLOSE).build()
    with session:
        old = weakref.ref(Cycle())
        BOUNDARY.draw()
        blocks = sys.getallocatedblocks()
        with inner:
            pass
        assert old() is not None  # the heap did not grow: the line was only drawn again
        BOUNDARY.draw()
        monkeypatch.setattr(heap.sys, "getallocatedblocks", lambda: 2 * blocks)
        inner2 = EagerSession.options().resource_cleanup_strategy(ON_SESSION_CLOSE).build()
        with inner2:
            pass
        assert old() is not None  # weighed only after young collections: the heap was idle
        for _ in range(heap.COMPACTION_CHECK_EVERY):
            gc.collect(0)
        inner3 = EagerSession.options().resource_cleanup_strategy(ON_SESSION_CLOSE).build()
        with inner3:
            pass
        assert old() is None
        assert BOUNDARY.drawn


def test_the_heap_size_is_read_only_as_often_as_the_interpreter_weighs_its_oldest_generation(
    session: EagerSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting the allocated blocks walks the whole heap: a session that ends after a few ops
    does not pay for it; one that made a few thousand containers does."""
    reads: list[int] = []
    count = sys.getallocatedblocks
    monkeypatch.setattr(heap.sys, "getallocatedblocks", lambda: reads.append(1) or count())
    with session:
        for _ in range(heap.COMPACTION_CHECK_EVERY):
            gc.collect(0)
        BOUNDARY.compaction_due()
        assert reads == [1]
        for _ in range(20):
            inner = EagerSession.options().resource_cleanup_strategy(ON_SESSION_CLOSE).build()
            with inner:
                tf.constant([1.0]) + 1.0
        assert len(reads) == 1  # 20 small sessions ended: no young collection enough to read
        for _ in range(heap.COMPACTION_CHECK_EVERY):
            gc.collect(0)
        BOUNDARY.compaction_due()
        assert len(reads) == 2


def test_objects_made_by_threads_while_the_line_moves_are_all_attributed() -> None:
    """Threads make and keep tensors while sessions begin and end around them, nested, and other
    code lists the heap and collects: every tensor kept is exactly one session's."""
    outer = EagerSession.options().resource_cleanup_strategy(ON_SESSION_CLOSE).build()
    made: list[Any] = []
    stop = threading.Event()

    def make() -> None:
        for index in range(4000):  # bounded: the main thread's rounds share the interpreter
            if stop.is_set():
                return
            made.append(tf.constant([float(index)]))

    inners = []
    with outer:
        threads = [threading.Thread(target=make) for _ in range(3)]
        for thread in threads:
            thread.start()
        try:
            for round_ in range(12):
                inner = EagerSession.options().resource_cleanup_strategy(ON_SESSION_CLOSE).build()
                inners.append(inner)
                with inner:
                    made.append(tf.constant([-1.0]))
                    if round_ % 4 == 0:
                        gc.collect()
                    else:
                        gc.get_referrers(made)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    owners: dict[int, int] = {}
    for session in [outer, *inners]:
        for survivor in session.survivors():
            owners[id(survivor.ref())] = owners.get(id(survivor.ref()), 0) + 1
    assert len(made) > 100
    missing = [tensor for tensor in made if id(tensor) not in owners]
    assert not missing, f"{len(missing)} of {len(made)} tensors unattributed"
    assert set(owners.values()) == {1}  # none owned twice
    made.clear()
    for inner in inners:
        inner.close()
    outer.close()


LIFECYCLE = r"""
import gc, sys
import tensorflow as tf
from pytest_eagersession import EagerSession
from pytest_eagersession.heap.listing import BOUNDARY

original = gc.get_objects
start = gc.get_freeze_count()
session = EagerSession.create()
session.activate()
assert BOUNDARY.drawn and gc.get_freeze_count() > start
assert gc.get_objects is not original
kept = tf.ones((4,))
assert len(gc.get_objects()) > 0
assert gc.get_freeze_count() > 0  # a listing thaws for its one call, then draws the line again
inner = EagerSession.create()
with inner:
    pass
assert BOUNDARY.drawn  # the outer session still owns new objects
survivors = session.close()
assert [s.kind for s in survivors] == ["tensor"], survivors
assert not BOUNDARY.drawn and gc.get_freeze_count() == 0
assert gc.get_objects is original
with EagerSession.create():
    assert BOUNDARY.drawn
assert not BOUNDARY.drawn
default = EagerSession.get_default()
assert BOUNDARY.drawn  # the default session owns what is made outside the others
with EagerSession.create():
    pass
assert BOUNDARY.drawn
print("ok")
"""


def test_the_line_is_erased_when_the_last_session_ends_without_the_plugin() -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", LIFECYCLE], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "ok"


HELD = r"""
import gc
import tensorflow as tf
from pytest_eagersession import EagerSession
from pytest_eagersession.heap.listing import BOUNDARY
from pytest_eagersession.core.tracking import TRACKER

release = TRACKER.hold()
with EagerSession.create():
    pass
assert BOUNDARY.drawn  # held between sessions
with EagerSession.create():
    pass
release()
assert not BOUNDARY.drawn and gc.get_freeze_count() == 0
print("ok")
"""


def test_a_held_line_stays_between_sessions_until_released() -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", HELD], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "ok"


def test_the_plugin_holds_the_line_for_its_run() -> None:
    assert TRACKER._holds >= 1
