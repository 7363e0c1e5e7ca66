"""Which sessions are open in the process, and which each thread has activated.

Sessions still open as the process exits are closed then, quietly.

Activations nest per thread, innermost last, each with the exit stack that undoes it. A forked
child inherits the parent's open sessions but not their threads: it forgets them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref
from typing import Any

from pytest_eagersession.core.tracking import Owner

#: The sessions not closed yet (``EagerSession`` objects), held weakly.
OPEN_SESSIONS: weakref.WeakSet[Any] = weakref.WeakSet()

_ACTIVATIONS = threading.local()


def thread_activations() -> list[tuple[Owner, contextlib.ExitStack]]:
    """The calling thread's activations, innermost last (the list itself, to change)."""
    activations: list[tuple[Owner, contextlib.ExitStack]] | None = getattr(
        _ACTIVATIONS, "stack", None
    )
    if activations is None:
        activations = _ACTIVATIONS.stack = []
    return activations


def _abandon_sessions_after_fork() -> None:
    """A forked child inherits the parent's sessions but not their threads: they are not its own.

    Closing them at the child's exit would run the parent's deleters (and TensorFlow, which is
    not fork-safe) in the child; the parent still owns and closes them.
    """
    OPEN_SESSIONS.clear()


@atexit.register
def _close_sessions_left_open() -> None:
    """Close sessions that careless code left open, default included, without raising."""
    for session in list(OPEN_SESSIONS):
        with contextlib.suppress(Exception):
            session._close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_abandon_sessions_after_fork)
