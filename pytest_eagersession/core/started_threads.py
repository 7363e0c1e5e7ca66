"""Threads started while a window is open, and the TensorFlow objects each of them makes.

A fixture of a wider scope that starts a thread (a heartbeat, a prefetcher, a metrics
recorder) owns what that thread makes, whenever it makes it: while a test runs too, when the
collector's line gives every new object to the test's session. The window is open while the
fixture is set up: ``threading.setprofile`` has each thread started meanwhile run a hook first,
which watches that thread's eager tensors (``callbacks.watch_thread``) and then gives the
thread back the profiler it would have had. Only those threads pay for being watched.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from pytest_eagersession.core.cleaner import is_cleaner_thread
from pytest_eagersession.core.kinds import owned_handle, tensorflow_ready

_Profiler = Callable[[Any, str, Any], object]

#: How long closing a window waits for the threads started in it to be hooked.
HOOK_WAIT_S = 1.0

#: The attribute of our hook that names the profiler it hands the thread back to.
_BEFORE_OURS = "eagersession_profiler_before"


class StartedThreads:
    """Which window started each watched thread, and what those threads made (weakly)."""

    def __init__(self) -> None:
        self._made: dict[str, _Made] = {}
        self._lock = threading.Lock()
        self._hooked: set[int | None] = set()  # idents of the threads whose hook ran
        self._hooked_changed = threading.Condition()

    @contextlib.contextmanager
    def window(self, key: str) -> Iterator[list[threading.Thread]]:
        """Threads started while the block runs (from any thread) are ``key``'s.

        The list it gives holds, once the block ended, the threads started in it that are
        still alive, a session's cleaner aside. Before TensorFlow is imported nothing is
        watched, and no profiler is set.
        """
        started: list[threading.Thread] = []
        before = set(threading.enumerate())
        if not tensorflow_ready():
            try:
                yield started
            finally:
                started += _new_threads(before)
            return
        previous: Any = threading.getprofile()
        # Inside another window (a fixture that sets up another with getfixturevalue), the
        # threads started are the inner one's alone: the outer hook is not chained.
        outer: _Profiler | None = getattr(previous, _BEFORE_OURS, previous)
        threading.setprofile(self._hook(key, outer))
        try:
            yield started
        finally:
            new = [thread for thread in threading.enumerate() if thread not in before]
            self._await_hooks(new)
            threading.setprofile(previous)
            started += [thread for thread in new if not is_cleaner_thread(thread)]

    def _await_hooks(self, started: list[threading.Thread]) -> None:
        """Wait until each thread of ``started`` ran the hook (or ended), for up to
        ``HOOK_WAIT_S``: ``Thread.start()`` returns before the new thread reads the profiler it
        will run, and a window closed first would leave it unwatched."""
        deadline = time.monotonic() + HOOK_WAIT_S
        with self._hooked_changed:
            while any(thread.ident not in self._hooked and thread.is_alive() for thread in started):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._hooked_changed.wait(min(left, 0.01))
            self._hooked.difference_update(thread.ident for thread in started)

    def maker_of(self, obj: object, kind: str) -> str | None:
        """The key of the window whose threads made ``obj`` (or its resource handle), or None."""
        handle = owned_handle(obj, kind)
        for key, made in list(self._made.items()):
            if made.holds(obj) or (handle is not None and made.holds(handle)):
                return key
        return None

    def watches(self, key: str) -> bool:
        """Whether a thread that ``key``'s window started is watched: what it makes is known."""
        return key in self._made

    def forget(self, key: str) -> None:
        """Stop attributing to ``key`` (its scope ended); its threads are watched on, unused.

        Once no window's threads are attributed, the wrap of TensorFlow's constant maker goes.
        """
        with self._lock:
            made = self._made.pop(key, None)
            last = made is not None and not self._made
        if last:
            from pytest_eagersession._tf.callbacks import unwrap_constants

            unwrap_constants()

    def _hook(self, key: str, previous: _Profiler | None) -> _Profiler:
        def first_event(frame: Any, event: str, arg: Any) -> object:
            sys.setprofile(previous)  # from now on, the profiler this thread would have had
            thread = threading.current_thread()
            try:
                if not is_cleaner_thread(thread) and tensorflow_ready():
                    self._watch(key, thread)
            finally:
                with self._hooked_changed:
                    self._hooked.add(thread.ident)
                    self._hooked_changed.notify_all()
            return previous(frame, event, arg) if previous is not None else None

        setattr(first_event, _BEFORE_OURS, previous)
        return first_event

    def _watch(self, key: str, thread: threading.Thread) -> None:
        from pytest_eagersession._tf.callbacks import watch_thread

        with self._lock:
            made = self._made.setdefault(key, _Made())
        watch_thread(made.add)


def _new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """The live threads not in ``before``, a session's cleaner aside."""
    return [
        thread
        for thread in threading.enumerate()
        if thread not in before and not is_cleaner_thread(thread)
    ]


class _Made:
    """Weak references to objects, by id (tensors take no hash), each gone as its object dies."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[Any]] = {}

    def add(self, obj: object) -> None:
        key = id(obj)
        refs = self._refs

        def forget(ref: weakref.ref[Any]) -> None:
            if refs.get(key) is ref:
                refs.pop(key, None)

        with contextlib.suppress(TypeError):  # takes no weak reference: nothing to own
            refs[key] = weakref.ref(obj, forget)

    def holds(self, obj: object) -> bool:
        ref = self._refs.get(id(obj))
        return ref is not None and ref() is obj
