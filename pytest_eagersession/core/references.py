"""Native references and the registry of them that a session owns.

A ``NativeReference`` is a session's handle on a resource whose owner is a Python object; the
``ReferenceRegistry`` keeps a session's references, the queue their dying referents fill, and
the counts of what was deleted. Neither knows the session itself.
"""

from __future__ import annotations

import queue
import threading
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_eagersession.base.errors import ResourceCleanupWarning, SessionClosedError

#: Put in a garbage queue to stop the cleaner that reads it.
STOP = object()
#: Put in a garbage queue to have its cleaner start watching memory afresh.
WAKE = object()


class GarbageQueue(Protocol):
    """What a session needs of its garbage queue (``queue.Queue`` and ``SimpleQueue`` fit)."""

    def put(self, item: Any) -> None: ...

    def get(self, block: bool = True, timeout: float | None = None) -> Any: ...


class ReferenceRegistry:
    """The references one session owns, the garbage queue, and the counts of deletions.

    Thread-safe. Each reference is deleted at most once: by ``delete()`` when its referent's
    death is processed, or when the session closes, whichever comes first. Once ``close()``
    ran, registering raises ``SessionClosedError``.
    """

    def __init__(
        self,
        garbage_queue: GarbageQueue | None = None,
        on_register: Callable[[], object] | None = None,  # a bound method: held weakly
    ) -> None:
        self.garbage_queue: GarbageQueue = (
            garbage_queue if garbage_queue is not None else queue.SimpleQueue()
        )
        """The queue dying referents put their references in."""
        # Weakly: the registry's session holds it, and a cycle between them would leave every
        # closed session, with its thread's locks and events, to the collector (which a plugin
        # run, keeping the heap frozen between tests, runs seldom).
        self._on_register = weakref.WeakMethod(on_register) if on_register is not None else None
        self._discarded = False
        self._references: dict[int, NativeReference] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._peak = 0
        self._deleted = 0
        self._cleanup_runs = 0
        self._cleanup_errors = 0

    def register(self, reference: NativeReference) -> None:
        """Keep ``reference`` until it is deleted or cleared; ``SessionClosedError`` once closed.

        Then calls ``on_register`` (a session starts its cleaner's thread then, if it had not).
        """
        with self._lock:
            if self._closed:
                raise SessionClosedError()
            self._references[id(reference)] = reference
            self._peak = max(self._peak, len(self._references))
        on_register = self._on_register() if self._on_register is not None else None
        if on_register is not None:
            on_register()

    def holds(self, reference: NativeReference) -> bool:
        """Whether ``reference`` is registered here (not deleted, not cleared)."""
        return id(reference) in self._references

    def unregister(self, reference: NativeReference, *, deleting: bool) -> bool:
        """Remove ``reference``; True when this call removed it (so the caller may delete it)."""
        with self._lock:
            removed = self._references.pop(id(reference), None) is not None
            if removed and deleting:
                self._deleted += 1
            return removed

    def delete(self, reference: NativeReference, failures: list[str]) -> bool:
        """Delete ``reference`` unless someone already did; collect the failure text."""
        if not self.unregister(reference, deleting=True):
            return False
        try:
            reference.delete()
        except Exception as error:  # a faulty deleter must not stop the cleanup
            with self._lock:
                self._cleanup_errors += 1
            failures.append(f"{reference!r}.delete() raised {type(error).__name__}: {error}")
        return True

    def count_run(self) -> None:
        """Count one cleanup pass that deleted something."""
        with self._lock:
            self._cleanup_runs += 1

    def drain(self) -> None:
        """Delete what is in the garbage queue now, without waiting; warn about failures."""
        failures: list[str] = []
        deleted = 0
        while True:
            try:
                item = self.garbage_queue.get(block=False)
            except queue.Empty:
                break
            if item is not STOP and item is not WAKE and self.delete(item, failures):
                deleted += 1
        if deleted:
            self.count_run()
        report_failures(failures)

    def close(self) -> list[NativeReference]:
        """Refuse new references from now on; the references still registered."""
        with self._lock:
            self._closed = True
            return list(self._references.values())

    def remaining(self) -> list[NativeReference]:
        """The references registered now."""
        with self._lock:
            return list(self._references.values())

    def discard_queue(self) -> None:
        """Empty the garbage queue without deleting (close deleted everything already); a
        ``STOP`` stays, for a cleaner thread that has not read it yet."""
        self._discarded = True
        stopped = False
        while True:
            try:
                stopped = self.garbage_queue.get(block=False) is STOP or stopped
            except queue.Empty:
                break
        if stopped:
            self.garbage_queue.put(STOP)

    def pending(self) -> int:
        """How many items wait in the garbage queue (0 when the queue does not say, or once
        the close discarded it: a stop left for the cleaner's thread is not garbage)."""
        size = getattr(self.garbage_queue, "qsize", None)
        return int(size()) if callable(size) and not self._discarded else 0

    def counts(self) -> ReferenceCounts:
        """The counts at one instant."""
        with self._lock:
            return ReferenceCounts(
                len(self._references),
                self._peak,
                self._deleted,
                self._cleanup_runs,
                self._cleanup_errors,
            )

    def __len__(self) -> int:
        return len(self._references)


@dataclass(frozen=True)
class ReferenceCounts:
    """What a ``ReferenceRegistry`` counted (``SessionStats`` has the meaning of each)."""

    registered: int
    peak_registered: int
    deleted: int
    cleanup_runs: int
    cleanup_errors: int


def report_failures(failures: list[str]) -> None:
    """Warn once per failed ``delete()`` with a ``ResourceCleanupWarning``."""
    for text in failures:
        warnings.warn(f"{text}; cleanup went on", ResourceCleanupWarning, stacklevel=3)


class ReferenceOwner(Protocol):
    """What a reference needs of its session: the registry to join."""

    @property
    def references(self) -> ReferenceRegistry:
        """The registry of the session's references."""
        ...


class NativeReference:
    """A weak reference to an object that owns a resource, registered in a session.

    Port of Java's ``EagerSession.NativeReference``. When the referent becomes garbage the
    reference is put in the session's garbage queue, and the session's cleanup strategy decides
    when ``delete()`` runs. ``delete()`` runs at most once: when the referent's death is
    processed, or when the session closes, whichever comes first. ``clear()`` detaches the
    reference without deleting: the owner takes its resource back.
    """

    def __init__(self, session: ReferenceOwner, referent: object) -> None:
        self._session = session
        registry = session.references
        self._registry = registry
        self_ref = weakref.ref(self)

        def referent_died(_: object) -> None:
            me = self_ref()
            if me is not None and registry.holds(me):
                registry.garbage_queue.put(me)

        self._referent: weakref.ref[object] | None = weakref.ref(referent, referent_died)
        registry.register(self)

    @property
    def session(self) -> ReferenceOwner:
        """The session this reference is registered in (an ``EagerSession``)."""
        return self._session

    @property
    def registered(self) -> bool:
        """Whether the reference is still waiting to be deleted (or cleared)."""
        return self._registry.holds(self)

    def delete(self) -> None:
        """Free the native resource. Subclasses override it; the session calls it at most once."""

    def clear(self) -> None:
        """Detach from the session without deleting: the referent's owner keeps the resource."""
        self._registry.unregister(self, deleting=False)
        self._referent = None


class CallbackReference(NativeReference):
    """A native reference whose ``delete()`` calls a function (``session.attach``)."""

    def __init__(
        self, session: ReferenceOwner, referent: object, deleter: Callable[[], object]
    ) -> None:
        self._deleter: Callable[[], object] | None = deleter
        super().__init__(session, referent)

    def delete(self) -> None:
        """Call the deleter given to ``session.attach``, then forget it."""
        deleter, self._deleter = self._deleter, None
        if deleter is not None:
            deleter()

    def __repr__(self) -> str:
        return f"<CallbackReference deleter={self._deleter!r}>"
