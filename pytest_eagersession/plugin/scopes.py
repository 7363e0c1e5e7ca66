"""The sessions of the wider scopes: a class, a module, a package, the whole run.

A wider-scoped fixture is set up inside the session of its scope, made on first use. That
session closes when pytest tears the scope down, after the teardown of the test that ends it,
and its leaks fail that test. What a wider-scoped fixture's value holds belongs to its scope,
and so does a thread it started, with what that thread makes (``StartedThreads``): survivors
of narrower sessions that are the scope's are handed over. What a test hands to such a thread
stays the test's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_eagersession.core.session import EagerSession, SessionOptions
from pytest_eagersession.core.started_threads import StartedThreads
from pytest_eagersession.plugin.setting_values import SettingsError
from pytest_eagersession.plugin.settings import LeakMode, Settings, TestPolicy, policy_for
from pytest_eagersession.plugin.verdicts import judge
from pytest_eagersession.reports.fixture_values import owned_kind

#: The fixture scopes wider than a test, each with a session of its own.
WIDER_SCOPES = ("class", "module", "package", "session")

#: How long survivors that no look reached are looked for again while a wider fixture's thread
#: runs. A thread that is not watched (started before TensorFlow was imported, or outside the
#: fixture's setup) can have its newest object in flight, where no walk sees it: made and not
#: stored yet, or an argument of a call into TensorFlow (a heartbeat's reading, every 20 ms,
#: was a test's leak now and then, with no holder). Soon after it is stored where the thread
#: keeps it, or dead: within milliseconds here, longer when the thread waits for a core (two
#: test runs on two cores). Only tests with such survivors wait; a true leak, at most this.
IN_FLIGHT_S = 0.25
#: The pause between those looks, in which the thread runs on.
IN_FLIGHT_PAUSE_S = 0.005


@dataclass
class WiderScope:
    """An open wider scope as a test's close sees it: its session and what it holds."""

    session: EagerSession
    values: list[object]
    """Its fixtures' values."""
    threads: list[object]
    """The threads its fixtures started, and the values of the globals their code names."""
    watched: bool
    """Whether what its threads make is known (``StartedThreads``)."""


class Reach:
    """What each wider scope's fixture values and threads reach, found on the first question
    (ids only), and which scope's threads made an object."""

    def __init__(
        self, scopes: list[WiderScope], maker_of: Callable[[object, str], EagerSession | None]
    ) -> None:
        self.scopes = scopes
        self.maker_of = maker_of
        self._sets: list[tuple[set[int], set[int]]] | None = None

    @property
    def looked(self) -> bool:
        """Whether the reach was found (a survivor was asked about)."""
        return self._sets is not None

    def sets(self) -> list[tuple[set[int], set[int]]]:
        """The ids each scope's values reach and those its threads reach, in ``scopes``' order."""
        if self._sets is None:
            from pytest_eagersession.reports.fixture_values import reachable_ids

            self._sets = [
                (reachable_ids(scope.values), reachable_ids(scope.threads)) for scope in self.scopes
            ]
        return self._sets

    def __call__(self, survivor: Any) -> bool:
        obj = survivor.ref() if survivor.ref is not None else None
        if obj is None:
            return False
        if self.maker_of(obj, survivor.kind) is not None:
            return True
        key = id(obj)
        return any(key in values or key in threads for values, threads in self.sets())


class ScopeSessions:
    """The open sessions of the wider scopes, and what their fixtures' values reach."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._sessions: dict[str, tuple[EagerSession, TestPolicy]] = {}
        self._values: dict[str, list[object]] = {}
        self._named: dict[str, list[tuple[str, str]]] = {}  # globals the threads' code names
        self._ending: list[tuple[str, str]] | None = None
        self._threads = StartedThreads()

    def fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Generator[None, object, object]:
        """Set a wider-scoped fixture up inside the session of its scope (the body of the
        plugin's ``pytest_fixture_setup`` wrapper)."""
        scope = fixturedef.scope
        if scope not in WIDER_SCOPES:
            return (yield)
        session = self.session_for(request.node, scope)
        key = _scope_key(request.node, scope)
        session.activate()
        try:
            with self._threads.window(key) as started:
                value = yield
        finally:
            session.deactivate()
        # What the value reaches belongs to the scope, and so does what a thread that the
        # fixture started (a monitor, a prefetcher) keeps in its frames.
        # That thread may have ended by the time the scope's survivors are handed over: the
        # globals its code names (the buffer it fills) are kept, as names, from now.
        values = self._values.setdefault(key, [])
        values.append(value)
        values.extend(started)
        if started:
            from pytest_eagersession.reports.fixture_values import globals_named_by_target

            named = self._named.setdefault(key, [])
            for thread in started:
                named.extend(globals_named_by_target(thread))
        return value

    def session_for(self, node: Any, scope: str) -> EagerSession:
        """The session of ``node`` (a class, module, package or the whole run), made once."""
        key = _scope_key(node, scope)
        entry = self._sessions.get(key)
        if entry is None:
            try:
                policy = policy_for(self._settings, marks(node))
            except SettingsError as error:
                pytest.fail(str(error), pytrace=False)
            session = options_for(policy).clear_kernel_cache().build()
            entry = (session, policy)
            self._sessions[key] = entry
            node.addfinalizer(lambda: self._ended(key, scope))
        return entry[0]

    def open_sessions(self) -> list[EagerSession]:
        """The sessions of the wider scopes open now."""
        return [session for session, _ in self._sessions.values()]

    def defer_closing(self) -> None:
        """Hold back the sessions of the scopes that end from now until ``close_deferred``.

        In a test's teardown: its fixtures' values, which pytest holds until its fixture
        finalizers ran, are not leaks of the scopes that end with it.
        """
        self._ending = []

    def close_deferred(
        self, item: pytest.Item, collect: Callable[[], AbstractContextManager[None]]
    ) -> None:
        """Close the sessions held back, each inside ``collect()`` (a context manager)."""
        ending, self._ending = self._ending or [], None
        for key, scope in ending:
            with collect():
                self._close(key, scope, item)

    def kept_elsewhere(self) -> Reach | None:
        """Whether an open wider scope's fixture value or thread reaches a survivor, or its
        thread made it; None without such values. Pass it to ``unclaimed`` for the same
        survivors: what it said is reached is handed over from the same look (a prefetcher's
        batch in flight must not be reached at one moment and missed at the next)."""
        reach = Reach(self._scoped_values(), self._maker_of)
        return reach if reach.scopes else None

    def unclaimed(self, survivors: tuple[Any, ...], reach: Reach | None = None) -> list[Any]:
        """The survivors no open wider scope takes over, none allows, and still alive.

        A survivor that a wider scope's watched thread made is that scope's, wherever it is.
        One that such a thread's frames reach but that the thread did not make was handed to
        it (put on a prefetcher's queue): it stays the test's. One that a fixture value reaches
        (a model built lazily by the first test) is the fixture's scope's. Sessions are built
        not to destroy their survivors on close: what a wider scope takes over must be handed
        over intact, and the report decides which leaks are certain enough to destroy.
        """
        handed: list[Any] = []
        remaining = list(survivors)
        if reach is not None and reach.looked:
            # What the survivor check was told is reached, from that look; the rest (made or
            # moved since, as a whole collection ran) from a look now.
            remaining, handed = _adopt(remaining, reach)
        del reach
        remaining, more = self._unreached(remaining)
        handed += more
        deadline = time.monotonic() + IN_FLIGHT_S
        while remaining and self._threads_running() and time.monotonic() < deadline:
            time.sleep(IN_FLIGHT_PAUSE_S)  # the wider scopes' threads store or drop it
            remaining, more = self._unreached(remaining)
            handed += more
        return sorted(_alive(handed) + remaining, key=lambda survivor: survivor.seq)

    def _maker_of(self, obj: object, kind: str) -> EagerSession | None:
        """The open session of the wider scope whose watched threads made ``obj``."""
        key = self._threads.maker_of(obj, kind)
        entry = self._sessions.get(key) if key is not None else None
        return entry[0] if entry is not None and not entry[0].closed else None

    def _unreached(self, survivors: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """The survivors a look now finds in no open wider scope, not allowed, still alive;
        and those it finds handed to a watched scope's threads."""
        handed: list[Any] = []
        now = Reach(self._scoped_values(), self._maker_of)
        if now.scopes and survivors:
            survivors, handed = _adopt(survivors, now)
        del now
        return _alive(survivors), handed

    def _threads_running(self) -> bool:
        """Whether a thread that an open wider scope's fixture started is still running."""
        return any(
            isinstance(value, threading.Thread) and value.is_alive()
            for key in self._sessions
            for value in self._values.get(key, ())
        )

    def _scoped_values(self) -> list[WiderScope]:
        """Each open wider scope with its fixture values, threads and the globals named."""
        keys = [key for key in self._sessions if self._values.get(key)]
        if not keys:
            return []
        from pytest_eagersession.reports.fixture_values import named_globals

        scopes = []
        for key in keys:
            values = self._values[key]
            scopes.append(
                WiderScope(
                    self._sessions[key][0],
                    [value for value in values if not isinstance(value, threading.Thread)],
                    [
                        *(value for value in values if isinstance(value, threading.Thread)),
                        *named_globals(self._named.get(key, [])),
                    ],
                    watched=self._threads.watches(key),
                )
            )
        return scopes

    def close_all(self) -> None:
        """Close what is still open at the end of the run: its leaks have no test to fail."""
        for key in list(self._sessions):
            session, _ = self._sessions.pop(key)
            self._values.pop(key, None)
            self._named.pop(key, None)
            self._threads.forget(key)
            if not session.closed:
                session.close()  # no test to fail: nothing is destroyed

    def _ended(self, key: str, scope: str) -> None:
        if self._ending is not None:  # in a test's teardown: close after its fixtures
            self._ending.append((key, scope))
        else:  # torn down at the end of an interrupted run: no test left to fail
            self._close(key, scope, None)

    def _close(self, key: str, scope: str, item: pytest.Item | None) -> None:
        entry = self._sessions.pop(key, None)
        self._values.pop(key, None)
        self._named.pop(key, None)
        self._threads.forget(key)
        if entry is None:
            return
        session, policy = entry
        if session.closed:
            return
        survivors = session.close()
        if policy.leaks is LeakMode.OFF or item is None:
            return
        judge(item, scope, session, self.unclaimed(survivors), policy, self._settings)


def _adopt(survivors: Sequence[Any], reach: Reach) -> tuple[list[Any], list[Any]]:
    """Give each survivor that a wider scope's watched threads made, or that its values or
    threads reach, to that scope's session; return the rest, and those handed to a watched
    scope's threads (reached by them, made by none of them). Dead survivors are dropped."""
    remaining: list[Any] = []
    handed: list[Any] = []
    for survivor in survivors:
        obj = survivor.ref() if survivor.ref is not None else None
        if obj is None:
            continue
        maker = reach.maker_of(obj, survivor.kind)
        if maker is not None:
            maker.ownership.add(obj, owned_kind(survivor))
            del obj
            continue
        key = id(obj)
        for scope, (values, threads) in zip(reach.scopes, reach.sets(), strict=True):
            if scope.session.closed:
                continue
            if scope.watched and key in threads:
                handed.append(survivor)
                break
            if key in values or key in threads:
                scope.session.ownership.add(obj, owned_kind(survivor))
                break
        else:
            remaining.append(survivor)
        del obj
    return remaining, handed


def _alive(survivors: Sequence[Any]) -> list[Any]:
    """The survivors not allowed and still alive (one may have died since, in another thread)."""
    return [
        survivor
        for survivor in survivors
        if not survivor.allowed and (survivor.ref is None or survivor.ref() is not None)
    ]


def marks(node: Any) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The ``cleanup`` marks of ``node``, closest first, as plain arguments."""
    return [(tuple(mark.args), dict(mark.kwargs)) for mark in node.iter_markers("cleanup")]


def options_for(policy: TestPolicy) -> SessionOptions:
    """The options of a session run under ``policy``."""
    return (
        EagerSession.options()
        .resource_cleanup_strategy(policy.strategy)
        .track_creation(policy.track_creation)
        .allow(policy.allow)
        .destroy_survivors(False)  # the plugin destroys leaks, after wider scopes took theirs
    )


def _scope_key(node: Any, scope: str) -> str:
    return "::session::" if scope == "session" else f"{scope}::{node.nodeid}"
