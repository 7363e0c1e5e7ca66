"""Where a check runs: the session owning what it makes, the gc state it restores, its name."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pytest_eagersession.tracking import TRACKER

if TYPE_CHECKING:
    from pytest_eagersession.session import EagerSession


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
    owner = TRACKER.owner()
    if owner is not None and TRACKER.is_active(owner) and not owner.closed:
        yield owner
        return
    from pytest_eagersession.session import EagerSession

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
