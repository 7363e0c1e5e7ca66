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

Starting such a thread has the same cost for the thread that starts it: ``Thread.start()``
returns only once the new thread has run, so on busy cores the caller waits for the new thread
to get a core, then for one of its own again (a millisecond on average on two busy cores, 3.7
ms at the 90th percentile, against a fifth of a millisecond with short slices). ``run_promptly``
gives the caller short slices for that call alone, and its own back after.
"""

from __future__ import annotations

import functools
import platform
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

#: The slice the cleaner asks for, in nanoseconds (the kernel accepts 0.1 to 100 ms).
PROMPT_SLICE_NS = 100_000

#: ``sched_setattr``'s and ``sched_getattr``'s system call numbers, by machine (Linux's tables).
_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274, "arm64": 274, "riscv64": 274, "ppc64le": 355}
_SCHED_GETATTR = {"x86_64": 315, "aarch64": 275, "arm64": 275, "riscv64": 275, "ppc64le": 356}
#: The one scheduling flag a thread's own request keeps (the others need a larger structure).
_SCHED_FLAG_RESET_ON_FORK = 0x01

T = TypeVar("T")

_default_slice_ns: int | None = None  # the kernel's, once run_promptly has learned it

_SCHED_OTHER = 0


def ask_for_prompt_wakeups(slice_ns: int = PROMPT_SLICE_NS) -> bool:
    """Ask that the calling thread be given ``slice_ns`` slices; whether the kernel took it.

    True means the request was accepted, not that the kernel honours it (before Linux 6.12 it
    does not). False where nothing was asked (not Linux, an unknown machine, a policy other
    than the normal one) or where the request was refused (a seccomp filter).
    """
    own = _attributes()
    if own is None or own.policy != _SCHED_OTHER:
        return False
    return _set(own, slice_ns)


def run_promptly(call: Callable[[], T]) -> T:
    """``call()``, the calling thread on short slices meanwhile; its own slice after.

    Meant for ``Thread.start()`` (see the module's docstring). The thread's policy, nice value
    and reset-on-fork flag are kept; a thread under another policy than the normal one, or where
    the kernel shows no attributes, runs ``call`` as it is.
    """
    own = _attributes()
    if own is None or own.policy != _SCHED_OTHER or not _set(own, PROMPT_SLICE_NS):
        return call()
    try:
        return call()
    finally:
        # The default slice is asked for with 0, one of the thread's own choosing by its value;
        # the kernel shows both as a value, so the default is learned once, by asking for it.
        global _default_slice_ns
        if _default_slice_ns is None:
            _set(own, 0)
            now = _attributes()
            _default_slice_ns = now.runtime if now is not None else 0
        _set(own, 0 if own.runtime == _default_slice_ns else own.runtime)


def _attributes() -> Any:
    """The calling thread's ``struct sched_attr``, or None where it cannot be read."""
    number = _SCHED_GETATTR.get(platform.machine())
    if not sys.platform.startswith("linux") or number is None:
        return None
    try:
        import ctypes

        layout = _sched_attr_type()
        attributes = layout()
        thread = threading.get_native_id()
        size = ctypes.sizeof(layout)
        if int(_syscall()(number, thread, ctypes.byref(attributes), size, 0)) != 0:
            return None
        return attributes
    except (OSError, AttributeError):
        return None


def _set(own: Any, slice_ns: int) -> bool:
    """Ask for ``own``'s attributes with a slice of ``slice_ns`` (0: the default) for the
    calling thread; whether the kernel took them."""
    import ctypes  # here, not at import: the plugin's import stays light

    layout = _sched_attr_type()
    attributes = layout(
        size=ctypes.sizeof(layout),
        policy=own.policy,
        flags=own.flags & _SCHED_FLAG_RESET_ON_FORK,
        nice=own.nice,
        runtime=slice_ns,
    )
    number = _SCHED_SETATTR[platform.machine()]
    thread = threading.get_native_id()
    try:
        return int(_syscall()(number, thread, ctypes.byref(attributes), 0)) == 0
    except (OSError, AttributeError):
        return False


@functools.cache
def _syscall() -> Any:
    """The C library's ``syscall()``, looked up once."""
    import ctypes

    # Called holding the interpreter (PyDLL): the calls take microseconds, and releasing it
    # would make the calling thread wait for it again, a hand-over between threads each time.
    return ctypes.PyDLL(None, use_errno=True).syscall


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
