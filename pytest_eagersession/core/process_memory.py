"""The memory the process holds, read between two tests: resident, the C allocator's free
part of it, and each GPU's memory in use.

What a test leaves behind shows as resident memory that stays after its teardown. Part of
that may be memory the C allocator keeps free for later (glibc keeps freed small blocks in its
arenas rather than handing them back): resident, but not in use. ``allocator_free`` is that
part where the C library tells it (glibc's ``mallinfo2``); Python's own small-object arenas and
other allocators keep memory the same way and are not told apart. On a GPU, TensorFlow's
allocator keeps what it freed reserved; the figure read here is what it has in use, so a cache
of the allocator never counts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from pytest_eagersession._tf import devices
from pytest_eagersession.core.kinds import tensorflow_ready
from pytest_eagersession.core.resident import RESIDENT


@dataclass(frozen=True)
class MemoryReading:
    """The process's memory at one moment; None where it cannot be read."""

    resident: int | None
    """Bytes resident in RAM (Linux)."""
    allocator_free: int | None
    """Bytes the C allocator holds free, part of ``resident`` where touched (glibc)."""
    gpus: dict[str, int] = field(default_factory=dict)
    """Each GPU's bytes in use by TensorFlow's allocator (none before TensorFlow, or without)."""


def read_memory() -> MemoryReading:
    """The process's memory now: a few microseconds, more with many allocator arenas."""
    gpus = {}
    if tensorflow_ready():
        for device in devices.gpu_devices():
            gpus[device] = int(devices.memory_info(device).get("current", 0))
    return MemoryReading(RESIDENT.read(), _allocator_free(), gpus)


@dataclass(frozen=True)
class Retained:
    """How far memory stood above its level before a test, after it."""

    resident: int
    """Resident bytes after the test, less before it."""
    allocator_free: int
    """Of those, the growth of what the C allocator holds free: kept, not in use."""
    gpus: dict[str, int]
    """Each GPU's bytes in use after the test, less before it."""
    resident_after: int
    """Resident bytes after the test: where the run's curve stands."""
    gpus_after: dict[str, int] = field(default_factory=dict)
    """Each GPU's bytes in use after the test."""

    @property
    def in_use(self) -> int:
        """The resident growth the C allocator does not hold free (at least 0)."""
        return max(0, self.resident - max(0, self.allocator_free))

    def to_json(self) -> dict[str, Any]:
        """Plain figures, in bytes."""
        return {
            "resident_bytes": self.resident,
            "allocator_free_bytes": self.allocator_free,
            "in_use_bytes": self.in_use,
            "gpu_bytes": dict(self.gpus),
            "resident_after_bytes": self.resident_after,
            "gpu_after_bytes": dict(self.gpus_after),
        }


def retained(before: MemoryReading, after: MemoryReading) -> Retained | None:
    """What stayed between ``before`` and ``after``; None where resident memory is not read."""
    if before.resident is None or after.resident is None:
        return None
    free = 0
    if before.allocator_free is not None and after.allocator_free is not None:
        free = after.allocator_free - before.allocator_free
    gpus = {device: in_use - before.gpus.get(device, 0) for device, in_use in after.gpus.items()}
    return Retained(after.resident - before.resident, free, gpus, after.resident, dict(after.gpus))


@functools.cache
def _mallinfo2() -> Any:
    """glibc's ``mallinfo2`` (2.33 and later), or None where the C library has none."""
    import ctypes  # here, not at import: the plugin's import stays light
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        """``struct mallinfo2``: ten ``size_t`` counters."""

        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = MallInfo2
    function.argtypes = []
    return function


def _allocator_free() -> int | None:
    """The bytes glibc's allocator holds free in all its arenas, or None."""
    mallinfo2 = _mallinfo2()
    if mallinfo2 is None:
        return None
    info = mallinfo2()
    return int(info.fordblks)
