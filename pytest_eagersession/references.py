"""Native references: the session's handle on a resource whose owner is a Python object."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_eagersession.session import EagerSession


class NativeReference:
    """A weak reference to an object that owns a resource, registered in a session.

    Port of Java's ``EagerSession.NativeReference``. When the referent becomes garbage the
    reference is put in the session's garbage queue, and the session's cleanup strategy decides
    when ``delete()`` runs. ``delete()`` runs at most once: when the referent's death is
    processed, or when the session closes, whichever comes first. ``clear()`` detaches the
    reference without deleting: the owner takes its resource back.
    """

    def __init__(self, session: EagerSession, referent: object) -> None:
        self._session = session
        session_queue = session._garbage_queue
        registry = session._registry
        self_ref = weakref.ref(self)

        def referent_died(_: object) -> None:
            me = self_ref()
            if me is not None and id(me) in registry:
                session_queue.put(me)

        self._referent: weakref.ref[object] | None = weakref.ref(referent, referent_died)
        session._register(self)

    @property
    def session(self) -> EagerSession:
        """The session this reference is registered in."""
        return self._session

    @property
    def registered(self) -> bool:
        """Whether the reference is still waiting to be deleted (or cleared)."""
        return id(self) in self._session._registry

    def delete(self) -> None:
        """Free the native resource. Subclasses override it; the session calls it at most once."""

    def clear(self) -> None:
        """Detach from the session without deleting: the referent's owner keeps the resource."""
        self._session._unregister(self, deleting=False)
        self._referent = None


class CallbackReference(NativeReference):
    """A native reference whose ``delete()`` calls a function (``session.attach``)."""

    def __init__(
        self, session: EagerSession, referent: object, deleter: Callable[[], object]
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
