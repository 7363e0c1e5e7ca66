"""Helpers shared by the test modules (importable because pytest puts tests/ on sys.path)."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from pytest_eagersession import ResourceCleanupStrategy

if TYPE_CHECKING:
    import pytest

IN_BACKGROUND = ResourceCleanupStrategy.IN_BACKGROUND
ON_SAFE_POINTS = ResourceCleanupStrategy.ON_SAFE_POINTS
ON_SESSION_CLOSE = ResourceCleanupStrategy.ON_SESSION_CLOSE

#: What a usage error about each setting names as the valid values.
STRATEGY_CHOICES = "choose one of in_background, on_safe_points, on_session_close"
LEAKS_CHOICES = "choose one of fail, warn, off"
ALLOW_CHOICES = (
    "allow takes a predicate on a Survivor, a regular expression searched in its summary, "
    "or a list of those"
)
#: The marker's signature, as far as it goes today (keywords may be added after these).
MARKER_SIGNATURE = "cleanup(strategy=None, *, leaks=None, allow=None, track_creation=None"

#: Inner runs search each leak's holders for up to 10 s, not the default 0.5 s: the chains the
#: tests check must not depend on how loaded the machine is.
CHAIN_BUDGET = "--eagersession-chain-budget=10"
#: Inner runs leave out the plugins that would write files or change the order.
INNER_RUN = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:randomly")


def run_inner(pytester: pytest.Pytester, *args: str, **kwargs: bool) -> pytest.RunResult:
    """An inner pytest run, in this process, with the plugin on and a generous chain budget."""
    return pytester.runpytest_inprocess(*INNER_RUN, CHAIN_BUDGET, *args, **kwargs)


def return_free_memory() -> bool:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``).

    After it, memory the process allocates shows as growth of its resident memory even where
    the allocator reuses space freed earlier. False where the C library has no such call.
    """
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is None:
        return False
    trim(0)
    return True


def load_script(path: Path, name: str) -> ModuleType:
    """Import a script of the repository (not a package module) as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def wait_until(condition: Callable[[], bool], timeout: float = 2.0) -> bool:
    """Poll ``condition`` every 2 ms until it holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.002)
    return condition()


#: A test file with one leaky test (a module-level list of tensors) and one clean test.
LEAKY = """
    import tensorflow as tf

    _CACHE = []

    def test_leak():
        _CACHE.append(tf.constant([1.0, 2.0]))

    def test_clean():
        t = tf.constant([1.0, 2.0])
        assert float(tf.reduce_sum(t)) == 3.0
"""


def stress_tensorflow_threads(
    seconds: float, workers: int = 3, *, heap_users: bool = False
) -> tuple[list[str], dict[str, int]]:
    """Run TensorFlow eager ops here while ``workers`` threads build tuples from generators.

    Each worker builds tuples from generators longer than ``tuple()``'s first guess of 10 (so
    CPython resizes them, which fails if another thread holds a reference to the half-built
    tuple), ``tf.TensorShape``s from generators, and small ``tf.constant`` / ``tf.add`` ops whose
    ``.shape`` TensorFlow builds as a tuple. This thread runs matmuls and reductions, builds tuples
    too, and leaves reference cycles holding 256 KiB tensors behind: a session's cleanup has work.

    With ``heap_users``, two more threads use the paths that thaw the heap while a session's
    line is drawn: one lists referrers (``gc.get_referrers``) and collects the whole heap
    (``gc.collect()``) in turn, one activates a session of its own around its ops, as a thread
    a test starts may, and now and then leaves a cycle frozen by its own ``gc.collect()`` to
    die before the session closes (the close's garbage proof walks it).

    Returns ``(errors, rounds)``: every error of any thread as ``--- where:`` and its traceback
    (those the loops catch, and those that reach ``threading.excepthook``, such as a session's
    cleaner dying), and the rounds each thread completed. The run stops at the first error, or
    after ``seconds``.
    """
    import gc
    import threading
    import traceback

    import tensorflow as tf

    errors: list[str] = []
    rounds: dict[str, int] = {}
    stop = threading.Event()

    def record(where: str, text: str) -> None:
        errors.append(f"--- {where}:\n{text}")  # list.append is atomic: no lock needed
        stop.set()

    def worker(index: int) -> None:
        name = threading.current_thread().name
        done = 0
        try:
            while not stop.is_set():
                size = 11 + (index + done) % 24
                numbers = tuple(number for number in range(size))
                shape = tf.TensorShape(tuple(2 if axis < 2 else 1 for axis in range(size)))
                values = tf.constant([float(number) for number in numbers])
                total = tf.add(values, values)
                if len(numbers) != size or shape.rank != size or total.shape != (size,):
                    raise AssertionError(f"wrong sizes: {len(numbers)}, {shape}, {total.shape}")
                done += 1
                rounds[name] = done
        except Exception:
            record(f"thread {name}", traceback.format_exc())

    def excepthook(args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else "?"
        text = "".join(
            traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)
        )
        record(f"uncaught in thread {name} (threading.excepthook)", text)

    def heap_user() -> None:
        name = threading.current_thread().name
        done = 0
        try:
            while not stop.is_set():
                marker = tf.constant([float(done)])
                if done % 4 == 3:
                    gc.collect()
                elif len(gc.get_referrers(marker)) > 1:
                    raise AssertionError("a fresh tensor had referrers besides this frame")
                done += 1
                rounds[name] = done
                stop.wait(0.02)
        except Exception:
            record(f"thread {name}", traceback.format_exc())

    class Holder:
        variable: object
        itself: object

    def session_user() -> None:
        from pytest_eagersession import EagerSession

        name = threading.current_thread().name
        done = 0
        try:
            while not stop.is_set():
                with EagerSession.create():
                    numbers = tuple(number for number in range(11 + done % 24))
                    total = tf.reduce_sum(tf.constant([float(n) for n in numbers]))
                    if float(total) != sum(numbers):
                        raise AssertionError(f"wrong sum: {float(total)}")
                    if done % 4 == 1:  # a cycle alive at a collection, dead at the close:
                        held = Holder()  # the close's garbage proof walks it
                        held.variable, held.itself = tf.Variable(total), held
                        gc.collect()
                        del held
                done += 1
                rounds[name] = done
        except Exception:
            record(f"thread {name}", traceback.format_exc())

    previous_hook = threading.excepthook
    threading.excepthook = excepthook
    threads = [
        threading.Thread(target=worker, args=(index,), name=f"stress-worker-{index}", daemon=True)
        for index in range(workers)
    ]
    if heap_users:
        threads.append(threading.Thread(target=heap_user, name="stress-heap-user", daemon=True))
        threads.append(
            threading.Thread(target=session_user, name="stress-session-user", daemon=True)
        )
    try:
        for thread in threads:
            rounds[thread.name] = 0
            thread.start()
        rounds["main"] = 0
        matrix = tf.ones((16, 16))
        deadline = time.monotonic() + seconds
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                product = tf.matmul(matrix, matrix)
                total = tf.reduce_sum(tf.add(product, 1.0))
                cycle: list[object] = [tf.zeros((256, 256))]  # garbage that only the gc frees
                cycle.append(cycle)
                dims = tuple(int(dim) for dim in product.shape) + tuple(n for n in range(12))
                if float(total) != 16.0 * 16 * 17 or len(dims) != 14:
                    raise AssertionError(f"wrong results: {float(total)}, {dims}")
                rounds["main"] += 1
        except Exception:
            record("the main thread", traceback.format_exc())
    finally:
        stop.set()
        for thread in threads:
            thread.join(10.0)
            if thread.is_alive():
                record(f"thread {thread.name}", "still running 10 s after the stop\n")
        threading.excepthook = previous_hook
    return errors, rounds
