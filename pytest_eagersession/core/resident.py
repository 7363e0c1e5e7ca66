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
from typing import Any


class ResidentMemory:
    """Reads the resident set size of the process that reads it (a fork reopens the file)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = 0
        self._page = 0
        self._unavailable = not sys.platform.startswith("linux")
        self._pread: Any = None
        self._buffer: Any = None

    def read(self) -> int | None:
        """Resident bytes now, or None where they cannot be read cheaply."""
        if self._unavailable:
            return None
        try:
            fd = self._open()
            buffer = self._buffer
            count = self._pread(fd, buffer, len(buffer), 0)
            if count <= 0:
                raise OSError("no reading of /proc/self/statm")
            return int(buffer.raw[:count].split()[1]) * self._page
        except (OSError, IndexError, ValueError, AttributeError):
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
                    if self._pread is None:
                        self._pread, self._buffer = _pread_holding_the_interpreter()
                    self._fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
                    self._pid = pid
        return self._fd


def _pread_holding_the_interpreter() -> tuple[Any, Any]:
    """The C library's ``pread``, called without releasing the interpreter, and a buffer.

    ``os.pread`` lets other threads run while it reads; the cleaner thread then waits for the
    interpreter again to go on, a second hand-over for a read of a microsecond. The buffer is
    shared: nothing else runs Python while the call holds the interpreter.
    """
    import ctypes  # here, not at import: the plugin's import stays light

    pread = ctypes.PyDLL(None, use_errno=True).pread
    pread.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long)
    pread.restype = ctypes.c_ssize_t
    return pread, ctypes.create_string_buffer(64)


#: The process's one reader (its file stays open for the life of the process).
RESIDENT = ResidentMemory()
