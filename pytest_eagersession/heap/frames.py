"""Walking a thread's stack, from one frame outwards to the thread's first; reading the locals
of running frames without leaving a snapshot of them behind."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator


def stack(frame: types.FrameType | None) -> Iterator[types.FrameType]:
    """``frame``, the frame that called it, and so on outwards.

    A generator holds only the frame it is at; one dropped before its end releases that too.
    """
    while frame is not None:
        yield frame
        frame = frame.f_back


#: Before 3.13, reading a running frame's locals copies them into a dict that the frame keeps.
_LOCALS_SNAPSHOT = sys.version_info < (3, 13)
_CO_OPTIMIZED = 0x1  # a function's frame: its f_locals is a snapshot, not a namespace


def running_locals(frame: types.FrameType, read: list[types.FrameType]) -> list[object]:
    """The values of a running frame's locals, which the collector does not show.

    A frame whose reading left a snapshot of them on it goes into ``read``: give that list to
    ``drop_snapshots`` once done, so that the snapshot keeps nothing alive.
    """
    if _LOCALS_SNAPSHOT and frame.f_code.co_flags & _CO_OPTIMIZED:
        read.append(frame)
    return list(frame.f_locals.values())


def drop_snapshots(read: list[types.FrameType]) -> None:
    """Empty the locals' snapshots that reading left on ``read``'s frames, and the list.

    Not while a tracer (a debugger) may be working with such a snapshot: it writes it back.
    """
    for frame in read:
        if frame.f_trace is None and sys.gettrace() is None:
            frame.f_locals.clear()
    read.clear()
