"""Walking a thread's stack: the frames from one frame outwards to the thread's first."""

from __future__ import annotations

import types
from collections.abc import Iterator


def stack(frame: types.FrameType | None) -> Iterator[types.FrameType]:
    """``frame``, the frame that called it, and so on outwards.

    A generator holds only the frame it is at; one dropped before its end releases that too.
    """
    while frame is not None:
        yield frame
        frame = frame.f_back
