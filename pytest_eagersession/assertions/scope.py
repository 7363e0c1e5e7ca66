"""Where a check runs: the session owning what it makes, the gc state it restores, its name."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from pytest_eagersession.core.session import EagerSession
from pytest_eagersession.core.tracking import TRACKER


def active_session() -> EagerSession | None:
    """The session that owns new objects now, if one is active (the plugin's, under pytest)."""
    owner = TRACKER.owner()
    if isinstance(owner, EagerSession) and TRACKER.is_active(owner):
        return owner
    return None


@contextlib.contextmanager
def preserved_gc_state() -> Iterator[None]:
    """Restore the gc's enabled flag, thresholds and debug flags when the block ends."""
    enabled = gc.isenabled()
    debug = gc.get_debug()
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_debug(debug)
        gc.set_threshold(*threshold)
        if enabled:
            gc.enable()
        else:
            gc.disable()


@contextlib.contextmanager
def owning_session(session: EagerSession | None) -> Iterator[EagerSession]:
    """The session that owns what the block makes.

    ``session`` itself (activated for the block unless it already owns new objects); without
    one, the active session (the plugin's test session under pytest); without that, a temporary
    session that never destroys what outlives it.
    """
    if session is not None:
        if TRACKER.owner() is session:
            yield session
            return
        session.activate()
        try:
            yield session
        finally:
            session.deactivate()
        return
    owner = active_session()
    if owner is not None and not owner.closed:
        yield owner
        return
    temporary = (
        EagerSession.options()
        .resource_cleanup_strategy("on_session_close")
        .destroy_survivors(False)
        .build()
    )
    with temporary:
        yield temporary


def callable_name(fn: object) -> str:
    """How a report names the function it checked."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return str(name) if name else type(fn).__name__
