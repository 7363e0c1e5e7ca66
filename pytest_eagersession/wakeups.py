"""Asking the kernel to wake a short-lived, latency-bound thread of ours promptly.

The ``IN_BACKGROUND`` cleaner sleeps a fraction of a millisecond between looks and runs for
less than that when it wakes. On a busy machine (TensorFlow's own worker threads keep the
cores busy between ops) Linux's scheduler lets a woken thread wait up to its time slice for a
core: milliseconds, during which a fast loop makes tens of MiB of tensors that the cleaner does
not see. Since Linux 6.12 (EEVDF) a thread may ask for a shorter slice: it then runs sooner
when it wakes, and no more often: its share of the CPU is that of its nice value, unchanged.
The request needs no privilege, keeps the thread's policy and nice value, and is made only for
a thread under the normal policy (a suite run under ``chrt -b`` or ``-i`` is left as it is).
Older kernels accept it and ignore it; elsewhere nothing is asked.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
import threading
from typing import Any

#: The slice the cleaner asks for, in nanoseconds (the kernel accepts 0.1 to 100 ms).
PROMPT_SLICE_NS = 100_000

#: ``sched_setattr``'s system call number, by machine (Linux's own tables).
_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274, "arm64": 274, "riscv64": 274, "ppc64le": 355}

_SCHED_OTHER = 0


def ask_for_prompt_wakeups(slice_ns: int = PROMPT_SLICE_NS) -> bool:
    """Ask that the calling thread be given ``slice_ns`` slices; whether the kernel took it.

    True means the request was accepted, not that the kernel honours it (before Linux 6.12 it
    does not). False where nothing was asked (not Linux, an unknown machine, a policy other
    than the normal one) or where the request was refused (a seccomp filter).
    """
    number = _SCHED_SETATTR.get(platform.machine())
    if not sys.platform.startswith("linux") or number is None:
        return False
    thread = threading.get_native_id()
    try:
        if os.sched_getscheduler(thread) != _SCHED_OTHER:
            return False
        nice = os.getpriority(os.PRIO_PROCESS, thread)
        import ctypes  # here, not at import: the plugin's import stays light

        layout = _sched_attr_type()
        attributes = layout(
            size=ctypes.sizeof(layout), policy=_SCHED_OTHER, nice=nice, runtime=slice_ns
        )
        return int(_syscall()(number, thread, ctypes.byref(attributes), 0)) == 0
    except (OSError, AttributeError):
        return False


@functools.cache
def _syscall() -> Any:
    """The C library's ``syscall()``, looked up once."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True).syscall


@functools.cache
def _sched_attr_type() -> Any:
    """``struct sched_attr`` as of Linux 3.14 (``SCHED_ATTR_SIZE_VER0``: 48 bytes)."""
    import ctypes

    class SchedAttr(ctypes.Structure):
        _fields_ = [
            ("size", ctypes.c_uint32),
            ("policy", ctypes.c_uint32),
            ("flags", ctypes.c_uint64),
            ("nice", ctypes.c_int32),
            ("priority", ctypes.c_uint32),
            ("runtime", ctypes.c_uint64),
            ("deadline", ctypes.c_uint64),
            ("period", ctypes.c_uint64),
        ]

    return SchedAttr
