"""The process's resident memory, read in a couple of microseconds where the system allows.

The ``IN_BACKGROUND`` cleaner wakes every few milliseconds; listing what its session made costs
far more than that on a heap of tens of thousands of objects. Tensor bytes cannot grow by much
without the process's resident memory growing too (a new buffer is new pages, unless it reuses
memory freed just before), so between its listings the cleaner reads this instead. On Linux it
is one ``pread`` of ``/proc/self/statm``; elsewhere there is no reading this cheap, and None
tells the caller to list every time.
"""

from __future__ import annotations

import os
import sys
import threading


class ResidentMemory:
    """Reads the resident set size of the process that reads it (a fork reopens the file)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = 0
        self._page = 0
        self._unavailable = not sys.platform.startswith("linux")

    def read(self) -> int | None:
        """Resident bytes now, or None where they cannot be read cheaply."""
        if self._unavailable:
            return None
        try:
            return int(os.pread(self._open(), 64, 0).split()[1]) * self._page
        except (OSError, IndexError, ValueError):
            self._unavailable = True
            return None

    def _open(self) -> int:
        pid = os.getpid()
        if self._fd is None or self._pid != pid:
            with self._lock:
                if self._fd is None or self._pid != pid:
                    if self._fd is not None:  # the parent's file, in a child: its numbers
                        os.close(self._fd)
                    self._page = os.sysconf("SC_PAGE_SIZE")
                    self._fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
                    self._pid = pid
        return self._fd


#: The process's one reader (its file stays open for the life of the process).
RESIDENT = ResidentMemory()
