"""EagerSession: owns TensorFlow resources and deletes them by a cleanup strategy.

A port of TensorFlow Java's ``org.tensorflow.EagerSession``. The module imports neither
TensorFlow nor pytest; TensorFlow is imported when a session first needs it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pytest_eagersession import _tf, heap, survivors
from pytest_eagersession.errors import ResourceCleanupWarning, SessionClosedError
from pytest_eagersession.kinds import tensorflow_ready
from pytest_eagersession.references import CallbackReference, NativeReference
from pytest_eagersession.strategies import DevicePlacementPolicy, ResourceCleanupStrategy
from pytest_eagersession.survivors import AllowFilter, AllowPredicate, Survivor
from pytest_eagersession.tracking import (
    TRACKER,
    CycleCollector,
    Ownership,
    ResidentMemory,
    make_op_callback,
)

if TYPE_CHECKING:
    from pytest_eagersession.assertions import RunGrowth
    from pytest_eagersession.operations import EagerOperationBuilder

#: How long ``close()`` waits for the background cleaner to stop.
CLEANER_JOIN_TIMEOUT_S = 5.0
#: How often the cleaner of the session that owns new objects looks at the process's memory.
CLEANER_POLL_S = 0.005
#: Scans keep pacing while each finds at least this fraction of the threshold in new tensors.
PACING_FRACTION = 16

_STOP = object()
_WAKE = object()
_RESIDENT = ResidentMemory()
_ACTIVATIONS = threading.local()


class GarbageQueue(Protocol):
    """What a session needs of its garbage queue (``queue.Queue`` and ``SimpleQueue`` fit)."""

    def put(self, item: Any) -> None: ...

    def get(self, block: bool = True, timeout: float | None = None) -> Any: ...


@dataclass(frozen=True)
class SessionStats:
    """Counts a session keeps about the references it owns."""

    registered: int
    """References registered now, waiting to be deleted."""
    peak_registered: int
    """The most references registered at once."""
    deleted: int
    """References deleted so far (each one once)."""
    pending: int
    """References queued because their referent died, not yet deleted."""
    cleanup_runs: int
    """Cleanup passes that deleted something: cleaner wake-ups, safe points, and close."""
    cleanup_errors: int
    """``delete()`` calls that raised (each reported as a ``ResourceCleanupWarning``)."""
    tracked: int = 0
    """TensorFlow objects attributed to the session so far (alive or not)."""
    cycle_collections: int = 0
    """Collections of cyclic garbage the growth of tracked bytes triggered."""


class SessionOptions:
    """Fluent settings for new sessions (Java's ``EagerSession.Options``).

    One ``Options`` can build many sessions; each takes a copy of the settings at ``build()``.
    """

    def __init__(self) -> None:
        self._async = False
        self._device_placement_policy = DevicePlacementPolicy.SILENT
        self._resource_cleanup_strategy = ResourceCleanupStrategy.IN_BACKGROUND
        self._config: Any = None
        self._track_creation = False
        self._allow: AllowPredicate | None = None
        self._destroy_survivors = True
        self._clear_kernel_cache = False
        self._freeze_older_objects = False

    def freeze_older_objects(self, enabled: bool = True) -> SessionOptions:
        """While active, keep older objects out of the collector's way (``gc.freeze``).

        The survivor check at close then collects what the session made in milliseconds
        instead of walking the whole heap. For short sessions such as one test's: objects older
        than the session are not collected until it ends. Heap listings made meanwhile
        (``gc.get_objects``, ``gc.get_referrers``) thaw the heap first and see all of it.
        """
        self._freeze_older_objects = bool(enabled)
        return self

    def clear_kernel_cache(self, enabled: bool = True) -> SessionOptions:
        """Also clear TensorFlow's kernel cache at close (the next ops pay to rebuild kernels)."""
        self._clear_kernel_cache = bool(enabled)
        return self

    def track_creation(self, enabled: bool = True) -> SessionOptions:
        """Record the op and the user-code line that made each output (costs an op callback)."""
        self._track_creation = bool(enabled)
        return self

    def allow(self, allowed: AllowFilter | None) -> SessionOptions:
        """Survivors to expect: a predicate on a ``Survivor``, a regex searched in its summary,
        or a list of those. Allowed survivors are reported as such and never destroyed."""
        self._allow = survivors.check_allow_filter(allowed)
        return self

    def destroy_survivors(self, enabled: bool = True) -> SessionOptions:
        """Destroy the resource handles of survivors at close (the default), as Java did."""
        self._destroy_survivors = bool(enabled)
        return self

    def async_(self, enabled: bool = True) -> SessionOptions:
        """Run the session's ops with TensorFlow's asynchronous eager execution."""
        if not isinstance(enabled, bool):
            raise TypeError(f"async_ takes a bool, not {type(enabled).__name__}")
        self._async = enabled
        return self

    def device_placement_policy(self, policy: DevicePlacementPolicy | str) -> SessionOptions:
        """What TensorFlow does with inputs on the wrong device, while the session is active."""
        self._device_placement_policy = DevicePlacementPolicy.parse(policy)
        return self

    def resource_cleanup_strategy(self, strategy: ResourceCleanupStrategy | str) -> SessionOptions:
        """When resources whose owners died are deleted (an enum member or its name)."""
        self._resource_cleanup_strategy = ResourceCleanupStrategy.parse(strategy)
        return self

    def config(self, config_proto: Any) -> SessionOptions:
        """A ``tf.compat.v1.ConfigProto`` for TensorFlow's context (before its first op only)."""
        self._config = config_proto
        return self

    def build(self, garbage_queue: GarbageQueue | None = None) -> EagerSession:
        """Build a session with these settings.

        ``garbage_queue`` replaces the queue that dying referents fill, so that tests can put
        references in by hand to stand in for the garbage collector (Java's ``buildForGcTest``).
        """
        return EagerSession(self, garbage_queue, _key=_BUILD_KEY)

    def __repr__(self) -> str:
        return (
            f"EagerSession.Options(async_={self._async}, "
            f"device_placement_policy={self._device_placement_policy.name}, "
            f"resource_cleanup_strategy={self._resource_cleanup_strategy.name}, "
            f"config={'set' if self._config is not None else None}, "
            f"track_creation={self._track_creation})"
        )


_BUILD_KEY = object()
Options = SessionOptions
_OPEN_SESSIONS: weakref.WeakSet[EagerSession] = weakref.WeakSet()


class EagerSession:
    """An environment for running TensorFlow ops eagerly that owns the resources they make.

    Build one with ``EagerSession.create()`` or ``EagerSession.options()...build()``; close it
    with ``close()`` or a ``with`` block. Closing deletes every resource still registered.
    """

    Options: ClassVar[type[SessionOptions]] = SessionOptions

    _default: ClassVar[EagerSession | None] = None
    _default_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        options: SessionOptions,
        garbage_queue: GarbageQueue | None = None,
        *,
        _key: object = None,
    ) -> None:
        if _key is not _BUILD_KEY:
            raise TypeError("build sessions with EagerSession.create() or EagerSession.options()")
        self._strategy = options._resource_cleanup_strategy
        self._async = options._async
        self._device_placement_policy = options._device_placement_policy
        self._config = options._config
        self._garbage_queue: GarbageQueue = (
            garbage_queue if garbage_queue is not None else queue.SimpleQueue()
        )
        self._registry: dict[int, NativeReference] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._closing_thread: int | None = None
        self._close_done = threading.Event()
        self._is_default = False
        self._peak_registered = 0
        self._deleted = 0
        self._cleanup_runs = 0
        self._cleanup_errors = 0
        self._executor: Any = None
        self._track_creation = options._track_creation
        self._allow = options._allow
        self._destroy_survivors = options._destroy_survivors
        self._clear_kernel_cache = options._clear_kernel_cache
        self._freezer = heap.OlderObjectsFrozen() if options._freeze_older_objects else None
        self._ownership = Ownership()
        self._collector = CycleCollector()
        self._detached: dict[int, weakref.ref[Any]] = {}
        self._survivors: tuple[Survivor, ...] | None = None
        self._generator_before: weakref.ref[Any] | None = None
        self._retention_mark: survivors.RetentionMark | None = None
        self._released: list[str] = []
        if self._config is not None:
            _apply_config(self._config)
        if self._async:
            self._executor = _tf_context().executor_new(enable_async=True)
        self._cleaner: threading.Thread | None = None
        if self._strategy is ResourceCleanupStrategy.IN_BACKGROUND:
            self._cleaner = threading.Thread(
                target=self._run_cleaner, name=f"eagersession-cleaner-{id(self):x}", daemon=True
            )
            self._cleaner.start()
        _OPEN_SESSIONS.add(self)

    # ----------------------------------------------------------------- construction

    @staticmethod
    def options() -> SessionOptions:
        """Settings for a new session, to chain and ``build()``."""
        return SessionOptions()

    @staticmethod
    def create() -> EagerSession:
        """A session with the default settings (``IN_BACKGROUND`` cleanup)."""
        return SessionOptions().build()

    @classmethod
    def init_default(cls, options: SessionOptions) -> EagerSession:
        """Build the process-wide default session with ``options``; allowed once, before use."""
        with cls._default_lock:
            if cls._default is not None:
                raise RuntimeError("Default eager session is already initialized")
            cls._default = cls._build_default(options)
            return cls._default

    @classmethod
    def get_default(cls) -> EagerSession:
        """The process-wide default session, built with default settings on first use."""
        with cls._default_lock:
            if cls._default is None:
                cls._default = cls._build_default(SessionOptions())
            return cls._default

    @classmethod
    def _build_default(cls, options: SessionOptions) -> EagerSession:
        session = options.build()
        session._is_default = True
        TRACKER.set_fallback(session)
        return session

    # ----------------------------------------------------------------- properties

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has run."""
        return self._closed

    @property
    def resource_cleanup_strategy(self) -> ResourceCleanupStrategy:
        """The strategy this session deletes resources by."""
        return self._strategy

    @property
    def device_placement_policy(self) -> DevicePlacementPolicy:
        """The device placement policy applied while the session runs ops."""
        return self._device_placement_policy

    @property
    def is_async(self) -> bool:
        """Whether the session runs its ops asynchronously."""
        return self._async

    @property
    def is_default(self) -> bool:
        """Whether this is the process-wide default session."""
        return self._is_default

    def stats(self) -> SessionStats:
        """A snapshot of the session's counts."""
        if TRACKER.is_active(self):
            TRACKER.discover()  # count what was made since the last scan, not only what was seen
        with self._lock:
            return SessionStats(
                registered=len(self._registry),
                peak_registered=self._peak_registered,
                deleted=self._deleted,
                pending=_queue_size(self._garbage_queue),
                cleanup_runs=self._cleanup_runs,
                cleanup_errors=self._cleanup_errors,
                tracked=self._ownership.seq,
                cycle_collections=self._collector.collections,
            )

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        default = " default" if self._is_default else ""
        return f"<EagerSession {self._strategy.name}{default} {state}>"

    # ----------------------------------------------------------------- resources

    def attach(self, referent: object, deleter: Callable[[], object]) -> NativeReference:
        """Register ``referent``; ``deleter()`` frees its resource once it dies (or at close)."""
        return CallbackReference(self, referent, deleter)

    def op_builder(self, op_type: str, name: str | None = None) -> EagerOperationBuilder:
        """A builder for one eager operation of type ``op_type`` (a safe point, as in Java)."""
        from pytest_eagersession.operations import EagerOperationBuilder

        self.safe_point()
        self._check_open()
        return EagerOperationBuilder(self, op_type, name)

    def safe_point(self) -> None:
        """Under ``ON_SAFE_POINTS``, delete now what died since the last safe point."""
        if self._strategy is ResourceCleanupStrategy.ON_SAFE_POINTS:
            self._drain()

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError()

    def _register(self, reference: NativeReference) -> None:
        with self._lock:
            if self._closed:
                raise SessionClosedError()
            self._registry[id(reference)] = reference
            self._peak_registered = max(self._peak_registered, len(self._registry))

    def _unregister(self, reference: NativeReference, *, deleting: bool) -> bool:
        """Remove ``reference``; True when this call removed it (so the caller may delete it)."""
        with self._lock:
            removed = self._registry.pop(id(reference), None) is not None
            if removed and deleting:
                self._deleted += 1
            return removed

    def _delete(self, reference: NativeReference, failures: list[str]) -> bool:
        """Delete ``reference`` unless someone already did; collect the failure text."""
        if not self._unregister(reference, deleting=True):
            return False
        try:
            reference.delete()
        except Exception as error:  # a faulty deleter must not stop the cleanup
            with self._lock:
                self._cleanup_errors += 1
            failures.append(f"{reference!r}.delete() raised {type(error).__name__}: {error}")
        return True

    def _drain(self) -> None:
        """Delete what is in the garbage queue now, without waiting."""
        failures: list[str] = []
        deleted = 0
        while True:
            try:
                item = self._garbage_queue.get(block=False)
            except queue.Empty:
                break
            if item is not _STOP and item is not _WAKE and self._delete(item, failures):
                deleted += 1
        if deleted:
            with self._lock:
                self._cleanup_runs += 1
        _report_failures(failures)

    def _run_cleaner(self) -> None:
        """The ``IN_BACKGROUND`` thread: delete references as their referents die.

        It blocks on the garbage queue and wakes for work: a dead referent, a collection of
        cyclic garbage that the growth of tensor bytes made due, or the stop. While its session
        owns new objects, it also reads the process's resident memory every few milliseconds:
        when that grew by the threshold where no scan looked yet, it has the next allocation
        start a collection. It never lists the heap, and collections that start in it are not
        scanned (see ``Tracker``).
        """
        garbage = self._garbage_queue
        ident = threading.get_ident()
        TRACKER.quiet_thread(ident)
        memory = _MemoryWatch(self._collector)
        try:
            while True:
                watching = TRACKER.is_innermost(self) and tensorflow_ready()
                try:
                    item = garbage.get(timeout=CLEANER_POLL_S) if watching else garbage.get()
                except queue.Empty:
                    memory.look()
                    continue
                if item is _STOP:
                    return
                if item is _WAKE:
                    memory = _MemoryWatch(self._collector)
                    continue
                failures: list[str] = []
                if self._delete(item, failures):
                    with self._lock:
                        self._cleanup_runs += 1
                # A warning filter set to "error" would raise here; nobody could catch it in
                # this thread, and the count in stats() already records the failure.
                with contextlib.suppress(Exception):
                    _report_failures(failures)
        finally:
            TRACKER.quiet_thread(ident, quiet=False)

    def _note_young_bytes(self, generation: int, nbytes: int) -> bool:
        """A scan at the start of a ``generation`` collection found ``nbytes`` of new tensors.

        Under ``IN_BACKGROUND`` the collector's pace follows them (and the cleaner runs the
        full collections, see ``_MemoryWatch``); the other strategies leave the pace alone
        (``ON_SAFE_POINTS`` counts the bytes at its safe points). True to keep pacing: to scan
        at every collection, while tensors come in bytes that matter.
        """
        if self._strategy is not ResourceCleanupStrategy.IN_BACKGROUND or self._closed:
            TRACKER.pace(generation, 0)
            return False
        if TRACKER.pace(generation, nbytes):
            self._collector.count_early()
        return nbytes >= self._collector.threshold // PACING_FRACTION

    # ----------------------------------------------------------------- TensorFlow scope

    @contextlib.contextmanager
    def _tf_scope(self) -> Iterator[None]:
        """Apply the session's execution mode and device policy to the ops run inside."""
        with contextlib.ExitStack() as stack:
            if self._executor is not None:
                stack.enter_context(_tf_context().executor_scope(self._executor))
            if self._device_placement_policy is not DevicePlacementPolicy.SILENT:
                stack.enter_context(
                    _tf_context().device_policy(
                        _tf_context().placement_policy(self._device_placement_policy)
                    )
                )
            yield

    # ----------------------------------------------------------------- closing

    def close(self) -> tuple[Survivor, ...]:
        """Delete every resource still registered and stop the cleaner. A second call is a no-op.

        Returns the survivors: tracked objects still alive after the cleanup, as plain records.
        Raises ``RuntimeError`` for the default session, which lives as long as the process.
        """
        if self._is_default:
            raise RuntimeError("Default eager session cannot be closed")
        return self._close()

    def _close(self) -> tuple[Survivor, ...]:
        me = threading.get_ident()
        with self._lock:
            # A close that an exception cut short (KeyboardInterrupt, a timeout's signal, a
            # deleter raising one) left work undone: the next close() does it.
            cut_short = self._closed and self._survivors is None and self._close_done.is_set()
            closing = self._closing_thread if self._closed and not cut_short else None
            if closing is None:
                self._closed = True
                self._closing_thread = me
                self._close_done.clear()
        if closing is not None:
            # Another thread is closing: return once its cleanup is done, with what it found
            # (the closing thread itself, from a deleter, must not wait for itself).
            if closing != me:
                self._close_done.wait()
            return self._survivors or ()
        try:
            return self._close_now()
        finally:
            self._close_done.set()

    def _close_now(self) -> tuple[Survivor, ...]:
        if self._cleaner is not None:
            self._garbage_queue.put(_STOP)  # first: however close ends, the cleaner stops
        _OPEN_SESSIONS.discard(self)
        self._deactivate_everywhere()
        self._join_cleaner()
        failures: list[str] = []
        async_error: Exception | None = None
        try:
            if self._executor is not None:
                try:
                    self._executor.wait()
                except Exception as error:  # an op failed asynchronously: raise after cleanup
                    async_error = error
                    with contextlib.suppress(Exception):
                        self._executor.clear_error()
            with self._lock:
                remaining = list(self._registry.values())
            for reference in remaining:
                self._delete(reference, failures)
            self._discard_queue()
            with self._lock:
                self._cleanup_runs += 1
            if tensorflow_ready():
                survivors.clear_tensorflow_caches(kernels=self._clear_kernel_cache)
                self._survivors = tuple(self._find_survivors(since=0, release=True))
                if self._destroy_survivors:
                    survivors.destroy_resources(
                        survivor for survivor in self._survivors if not survivor.allowed
                    )
            else:
                self._survivors = ()
        finally:
            if self._freezer is not None:
                self._freezer.thaw()
            self._ownership.clear()
            self._detached.clear()
        _report_failures(failures)
        if async_error is not None:
            raise async_error
        return self._survivors

    def _stop_cleaner(self) -> None:
        if self._cleaner is not None:
            self._garbage_queue.put(_STOP)
            self._join_cleaner()

    def _join_cleaner(self) -> None:
        cleaner = self._cleaner
        if cleaner is not None and cleaner is not threading.current_thread():
            cleaner.join(CLEANER_JOIN_TIMEOUT_S)

    def _discard_queue(self) -> None:
        while True:
            try:
                self._garbage_queue.get(block=False)
            except queue.Empty:
                return

    # ----------------------------------------------------------------- activation

    def activate(self) -> EagerSession:
        """Make this the calling thread's active session: it owns what TensorFlow makes now.

        Sessions nest: the innermost active one owns new objects. While active, the session's
        device policy, async executor and cleanup apply, and TensorFlow's default graph is a
        fresh one, so that what TensorFlow ties to the default graph dies with the session.
        """
        self._check_open()
        stack = contextlib.ExitStack()
        if tensorflow_ready():
            generator = survivors.global_random_generator()
            if generator is not None and self._generator_before is None:
                self._generator_before = weakref.ref(generator)
            if self._retention_mark is None:
                self._retention_mark = survivors.retention_mark()
            stack.enter_context(survivors.fresh_default_graph())
            stack.enter_context(self._tf_scope())
            if self._track_creation or self._strategy is ResourceCleanupStrategy.ON_SAFE_POINTS:
                stack.enter_context(
                    survivors.op_callback(
                        make_op_callback(
                            self,
                            safe_points=self._strategy is ResourceCleanupStrategy.ON_SAFE_POINTS,
                            track_creation=self._track_creation,
                            collector=self._collector,
                        )
                    )
                )
        TRACKER.push(self)
        if self._freezer is not None:
            self._freezer.freeze()
        _thread_activations().append((self, stack))
        if self._cleaner is not None:
            self._garbage_queue.put(_WAKE)  # watch memory from now on
        return self

    def deactivate(self) -> None:
        """Undo the matching ``activate()`` of this thread (innermost first)."""
        activations = _thread_activations()
        if not activations or activations[-1][0] is not self:
            raise RuntimeError(
                f"{self!r} is not the innermost active session of this thread; "
                "deactivate sessions in the reverse order of activation"
            )
        _, stack = activations.pop()
        try:
            TRACKER.pop(self)
        finally:
            if self._freezer is not None:
                self._freezer.thaw()
            stack.close()

    @property
    def active(self) -> bool:
        """Whether the session is active in some thread."""
        return TRACKER.is_active(self)

    def _deactivate_everywhere(self) -> None:
        activations = _thread_activations()
        while any(session is self for session, _ in activations):
            session, stack = activations.pop()
            try:
                TRACKER.pop(session)
            finally:
                stack.close()
        while TRACKER.is_active(self):  # active in other threads: stop owning for each
            TRACKER.pop(self)

    def __enter__(self) -> EagerSession:
        return self.activate()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._closed:
            return
        try:
            self.deactivate()
        finally:
            if not self._is_default:
                self._close_after_block(exc)

    def _close_after_block(self, exc: BaseException | None) -> None:
        """Close at the end of a ``with`` block; an error of the block itself stays the one seen."""
        if exc is None:
            self._close()
            return
        try:
            self._close()
        except Exception as error:  # an async op's error, a cleanup warning turned into an error
            if sys.version_info >= (3, 11):
                exc.add_note(f"while closing {self!r}: {type(error).__name__}: {error}")

    # ----------------------------------------------------------------- survivors

    def checkpoint(self) -> int:
        """A mark for ``survivors(since=...)``: what is created after it is newer."""
        if TRACKER.is_active(self):
            TRACKER.discover()
        return self._ownership.seq

    def survivors(self, since: int = 0) -> tuple[Survivor, ...]:
        """The tracked objects still alive after cleanup, as plain records.

        Before close it runs the session's cleanup and a garbage collection first; after close
        it returns what ``close()`` found. ``since`` keeps only objects newer than a checkpoint.
        """
        if self._survivors is not None:
            return tuple(s for s in self._survivors if s.seq > since)
        if not tensorflow_ready():
            return ()
        self._drain()
        return tuple(self._find_survivors(since, release=True))

    def detach(self, obj: object) -> None:
        """Declare ``obj`` expected to outlive the session: not reported, not destroyed."""
        self._detached[id(obj)] = weakref.ref(obj)

    def assert_no_leaks(self, since: int = 0, *, allow: AllowFilter | None = None) -> None:
        """Fail if what was made after checkpoint ``since`` is still alive (the plugin's report).

        See ``pytest_eagersession.assertions.assert_no_leaks``; raises ``LeakAssertionError``.
        """
        from pytest_eagersession.assertions import assert_no_leaks

        assert_no_leaks(self, since=since, allow=allow)

    def assert_no_growth(
        self,
        fn: Callable[[], object],
        *,
        warmup: int = 2,
        runs: int = 5,
        allow: AllowFilter | None = None,
    ) -> tuple[RunGrowth, ...]:
        """Call ``fn`` repeatedly in this session; fail if each run leaves objects alive.

        See ``pytest_eagersession.assertions.assert_no_growth``; raises ``GrowthError``.
        """
        from pytest_eagersession.assertions import assert_no_growth

        return assert_no_growth(fn, warmup=warmup, runs=runs, session=self, allow=allow)

    def _is_detached(self, obj: object) -> bool:
        ref = self._detached.get(id(obj))
        return ref is not None and ref() is obj

    def known_retention(self) -> tuple[str, ...]:
        """What TensorFlow's own known leaks kept of the session's objects and it released.

        See ``survivors.release_retention``: gradient-registry entries handed to their graph,
        ``tf.distribute`` cache entries dropped. What could not be released is in the
        survivors, each with its ``retention``.
        """
        return tuple(self._released)

    def _find_survivors(self, since: int, *, release: bool = False) -> list[Survivor]:
        if TRACKER.is_active(self):
            TRACKER.discover()
        retention = None
        if release and self._retention_mark is not None:
            retention = survivors.release_retention(self._retention_mark)
            self._released.extend(retention.released)
        return survivors.find(
            self._ownership,
            since,
            self._is_detached,
            self._allow,
            generator_before=self._generator_before,
            thaw=self._freezer.thaw if self._freezer is not None else None,
            retention=retention,
        )


class _MemoryWatch:
    """What the cleaner makes of the process's resident memory, read every few milliseconds.

    Growth by the threshold where no scan looked yet has the next allocation start a
    collection (of the young generation, by the interpreter, in the allocating thread). Growth
    by ``FULL_EVERY`` thresholds since the last full collection means cycles promoted alive
    into the oldest generation are dying there: the cleaner collects in full. A full collection
    that frees less than a threshold doubles the growth the next one waits for, so that memory
    the code keeps (a dataset, a model) does not make it collect in vain.
    """

    def __init__(self, collector: CycleCollector) -> None:
        self._collector = collector
        self._low: int | None = None
        self._full_low: int | None = None
        self._full_gap = collector.FULL_EVERY * collector.threshold

    def look(self) -> None:
        resident = _RESIDENT.read()
        if resident is None:
            return
        threshold = self._collector.threshold
        self._low = resident if self._low is None else min(self._low, resident)
        self._full_low = resident if self._full_low is None else min(self._full_low, resident)
        if resident - self._full_low >= self._full_gap:
            self._collector.collect_full()
            after = _RESIDENT.read() or resident
            freed = resident - after
            self._full_gap = (
                self._collector.FULL_EVERY * threshold
                if freed >= threshold
                else min(2 * self._full_gap, 1 << 34)
            )
            self._low = self._full_low = after
        elif resident - self._low >= threshold:
            TRACKER.hurry()
            self._low = resident


def _thread_activations() -> list[tuple[EagerSession, contextlib.ExitStack]]:
    activations: list[tuple[EagerSession, contextlib.ExitStack]] | None = getattr(
        _ACTIVATIONS, "stack", None
    )
    if activations is None:
        activations = _ACTIVATIONS.stack = []
    return activations


def _queue_size(garbage: GarbageQueue) -> int:
    size = getattr(garbage, "qsize", None)
    return int(size()) if callable(size) else 0


def _report_failures(failures: list[str]) -> None:
    for text in failures:
        warnings.warn(f"{text}; cleanup went on", ResourceCleanupWarning, stacklevel=3)


class _ContextAccess:
    """The few TensorFlow eager-context functions the session uses, imported on first use."""

    def __init__(self) -> None:
        self._context: Any = None

    def _module(self) -> Any:
        if self._context is None:
            _tf.tensorflow()
            from tensorflow.python.eager import context

            self._context = context
        return self._context

    def executor_new(self, *, enable_async: bool) -> Any:
        self._module()  # first: without TensorFlow, the error that says what to install
        from tensorflow.python.eager import executor

        return executor.new_executor(enable_async)

    def executor_scope(self, executor: Any) -> contextlib.AbstractContextManager[None]:
        manager: contextlib.AbstractContextManager[None] = self._module().executor_scope(executor)
        return manager

    def device_policy(self, policy: int) -> contextlib.AbstractContextManager[None]:
        manager: contextlib.AbstractContextManager[None] = self._module().device_policy(policy)
        return manager

    def placement_policy(self, policy: DevicePlacementPolicy) -> int:
        value: int = getattr(self._module(), f"DEVICE_PLACEMENT_{policy.name}")
        return value

    def context(self) -> Any:
        return self._module().context()


_CONTEXT = _ContextAccess()


def _tf_context() -> _ContextAccess:
    return _CONTEXT


def _apply_config(config_proto: Any) -> None:
    """Give TensorFlow's context a ConfigProto, which it only takes before its first op."""
    context = _tf_context().context()
    if getattr(context, "_context_handle", None) is not None:
        if context.config == config_proto:
            return
        raise RuntimeError(
            "cannot apply the session's config: TensorFlow's eager context is already "
            "initialized (an op or device query ran in this process), and a ConfigProto only "
            "takes effect before that; build this session before any TensorFlow op runs, "
            "or leave config unset"
        )
    context._config = config_proto


@atexit.register
def _close_sessions_left_open() -> None:
    """Close sessions that careless code left open, default included, without raising."""
    for session in list(_OPEN_SESSIONS):
        with contextlib.suppress(Exception):
            session._close()


def _abandon_sessions_after_fork() -> None:
    """A forked child inherits the parent's sessions but not their threads: they are not its own.

    Closing them at the child's exit would run the parent's deleters (and TensorFlow, which is
    not fork-safe) in the child; the parent still owns and closes them.
    """
    _OPEN_SESSIONS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_abandon_sessions_after_fork)
