"""EagerSession: owns TensorFlow resources and deletes them by a cleanup strategy.

A port of TensorFlow Java's ``org.tensorflow.EagerSession``: the session's lifecycle, its
activation and its safe points. The references it owns are a ``ReferenceRegistry``, its
background thread a ``Cleaner``, its settings a ``SessionSettings``. The module imports neither
TensorFlow nor pytest; TensorFlow is imported when a session first needs it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, ClassVar

from pytest_eagersession._tf import callbacks as tf_callbacks
from pytest_eagersession._tf import context as tf_context
from pytest_eagersession._tf import resources as tf_resources
from pytest_eagersession.base.errors import SessionClosedError
from pytest_eagersession.base.strategies import DevicePlacementPolicy, ResourceCleanupStrategy
from pytest_eagersession.core import survivors
from pytest_eagersession.core.activations import OPEN_SESSIONS, thread_activations
from pytest_eagersession.core.cleaner import Cleaner
from pytest_eagersession.core.cycle_watch import COUNTING, GarbageWatch
from pytest_eagersession.core.kinds import tensorflow_ready
from pytest_eagersession.core.operations import EagerOperationBuilder
from pytest_eagersession.core.references import (
    CallbackReference,
    GarbageQueue,
    NativeReference,
    ReferenceRegistry,
    report_failures,
)
from pytest_eagersession.core.session_settings import SessionSettings, SessionStats
from pytest_eagersession.core.survivors import AllowFilter, CloseHints, Survivor
from pytest_eagersession.core.tracking import TRACKER, Ownership, make_op_callback

__all__ = [
    "EagerSession",
    "GarbageQueue",
    "Options",
    "SessionOptions",
    "SessionStats",
]


class SessionOptions:
    """Fluent settings for new sessions (Java's ``EagerSession.Options``).

    One ``Options`` can build many sessions; each takes a copy of the settings at ``build()``.
    """

    def __init__(self) -> None:
        self._settings = SessionSettings()

    @property
    def settings(self) -> SessionSettings:
        """The settings collected so far, as a frozen record."""
        return self._settings

    def _set(self, **changes: Any) -> SessionOptions:
        self._settings = dataclasses.replace(self._settings, **changes)
        return self

    def freeze_older_objects(self, enabled: bool = True) -> SessionOptions:
        """Deprecated: every session keeps older objects frozen while active (since 0.2).

        The freeze is now how a session tells what it made from what was there before (see
        ``tracking``), so it cannot be turned off: ``enabled=False`` raises ``ValueError``.
        """
        warnings.warn(
            "freeze_older_objects() is deprecated: every session freezes older objects "
            "while it is active",
            DeprecationWarning,
            stacklevel=2,
        )
        if not enabled:
            raise ValueError(
                "freeze_older_objects(False): a session always freezes older objects while "
                "active; it is how it tells its own objects from older ones"
            )
        return self

    def clear_kernel_cache(self, enabled: bool = True) -> SessionOptions:
        """Also clear TensorFlow's kernel cache at close (the next ops pay to rebuild kernels)."""
        return self._set(clear_kernel_cache=bool(enabled))

    def track_creation(self, enabled: bool = True) -> SessionOptions:
        """Record the op and the user-code line that made each output (costs an op callback)."""
        return self._set(track_creation=bool(enabled))

    def allow(self, allowed: AllowFilter | None) -> SessionOptions:
        """Survivors to expect: a predicate on a ``Survivor``, a regex searched in its summary,
        or a list of those. Allowed survivors are reported as such and never destroyed."""
        return self._set(allow=survivors.check_allow_filter(allowed))

    def destroy_survivors(self, enabled: bool = True) -> SessionOptions:
        """Destroy the resource handles of survivors at close (the default), as Java did."""
        return self._set(destroy_survivors=bool(enabled))

    def async_(self, enabled: bool = True) -> SessionOptions:
        """Run the session's ops with TensorFlow's asynchronous eager execution."""
        if not isinstance(enabled, bool):
            raise TypeError(f"async_ takes a bool, not {type(enabled).__name__}")
        return self._set(is_async=enabled)

    def device_placement_policy(self, policy: DevicePlacementPolicy | str) -> SessionOptions:
        """What TensorFlow does with inputs on the wrong device, while the session is active."""
        return self._set(device_placement_policy=DevicePlacementPolicy.parse(policy))

    def resource_cleanup_strategy(self, strategy: ResourceCleanupStrategy | str) -> SessionOptions:
        """When resources whose owners died are deleted (an enum member or its name)."""
        return self._set(resource_cleanup_strategy=ResourceCleanupStrategy.parse(strategy))

    def config(self, config_proto: Any) -> SessionOptions:
        """A ``tf.compat.v1.ConfigProto`` for TensorFlow's context (before its first op only)."""
        return self._set(config=config_proto)

    def build(self, garbage_queue: GarbageQueue | None = None) -> EagerSession:
        """Build a session with these settings.

        ``garbage_queue`` replaces the queue that dying referents fill, so that tests can put
        references in by hand to stand in for the garbage collector (Java's ``buildForGcTest``).
        """
        return EagerSession(self, garbage_queue, _key=_BUILD_KEY)

    def __repr__(self) -> str:
        settings = self._settings
        return (
            f"EagerSession.Options(async_={settings.is_async}, "
            f"device_placement_policy={settings.device_placement_policy.name}, "
            f"resource_cleanup_strategy={settings.resource_cleanup_strategy.name}, "
            f"config={'set' if settings.config is not None else None}, "
            f"track_creation={settings.track_creation})"
        )


_BUILD_KEY = object()
Options = SessionOptions
_OPEN_SESSIONS: weakref.WeakSet[EagerSession] = OPEN_SESSIONS


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
        settings = options.settings
        self._settings = settings
        self._strategy = settings.resource_cleanup_strategy
        self._references = ReferenceRegistry(garbage_queue, on_register=self._start_cleaner)
        self._lock = threading.Lock()
        self._closed = False
        self._closing_thread: int | None = None
        self._close_done = threading.Event()
        self._is_default = False
        self._executor: Any = None
        self._ownership = Ownership()
        self._watch = GarbageWatch(self)
        self._survivors: tuple[Survivor, ...] | None = None
        self._close_collection_seconds = 0.0
        self._check = survivors.SurvivorCheck(self._ownership, settings.allow)
        if settings.config is not None:
            tf_context.apply_config(settings.config)
        if settings.is_async:
            self._executor = tf_context.new_executor(enable_async=True)
        self._cleaner: Cleaner | None = None
        if self._strategy is ResourceCleanupStrategy.IN_BACKGROUND:
            self._cleaner = Cleaner(self, self._references, self._watch)
            if tensorflow_ready():
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
        session.resume()  # it owns what is made outside sessions from now on: watch it
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
        return self._settings.device_placement_policy

    @property
    def is_async(self) -> bool:
        """Whether the session runs its ops asynchronously."""
        return self._settings.is_async

    @property
    def settings(self) -> SessionSettings:
        """The settings the session was built with."""
        return self._settings

    @property
    def references(self) -> ReferenceRegistry:
        """The registry of the native references the session owns (``NativeReference`` joins it)."""
        return self._references

    @property
    def ownership(self) -> Ownership:
        """The weak records of the TensorFlow objects attributed to the session (the tracker's)."""
        return self._ownership

    @property
    def cleaner(self) -> Cleaner | None:
        """The background cleaner under ``IN_BACKGROUND``, else None (for tests and diagnostics)."""
        return self._cleaner

    @property
    def watch(self) -> GarbageWatch:
        """The byte watch that collects the cycles the session made (for tests and
        diagnostics): the bytes its last look counted, the collections it started."""
        return self._watch

    @property
    def is_default(self) -> bool:
        """Whether this is the process-wide default session."""
        return self._is_default

    def stats(self) -> SessionStats:
        """A snapshot of the session's counts."""
        if TRACKER.is_innermost(self):
            TRACKER.attribute()  # count what was made since the line, not only what was listed
        counts = self._references.counts()
        return SessionStats(
            registered=counts.registered,
            peak_registered=counts.peak_registered,
            deleted=counts.deleted,
            pending=self._references.pending(),
            cleanup_runs=counts.cleanup_runs,
            cleanup_errors=counts.cleanup_errors,
            tracked=self._ownership.seq,
            cycle_collections=self._watch.collections,
            close_collection_seconds=self._close_collection_seconds,
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
        self.safe_point()
        self.check_open()
        return EagerOperationBuilder(self, op_type, name)

    def safe_point(self) -> None:
        """Under ``ON_SAFE_POINTS``, delete now what died since the last safe point."""
        if self._strategy is ResourceCleanupStrategy.ON_SAFE_POINTS:
            self._references.drain()

    def check_open(self) -> None:
        """Raise ``SessionClosedError`` once the session is closed."""
        if self._closed:
            raise SessionClosedError()

    def resume(self) -> None:
        """It owns new objects again (a session activated inside it ended): watch afresh.

        The tracker calls it.
        """
        self._watch.restart()
        if self._cleaner is not None:
            if tensorflow_ready():
                self._cleaner.start()
            self._cleaner.wake()

    def _start_cleaner(self) -> None:
        """A reference joined: the cleaner's thread must run to delete it once it dies."""
        if self._cleaner is not None:
            self._cleaner.start()

    # ----------------------------------------------------------------- TensorFlow scope

    def execution_scope(self) -> contextlib.AbstractContextManager[None]:
        """Apply the session's execution mode and device policy to the ops run inside.

        ``activate()`` enters it; the op builder enters it for the op it runs.
        """
        policy = self._settings.device_placement_policy
        silent = policy is DevicePlacementPolicy.SILENT
        return tf_context.execution_scope(self._executor, None if silent else policy.name)

    # ----------------------------------------------------------------- closing

    def close(self, *, hints: CloseHints | None = None) -> tuple[Survivor, ...]:
        """Delete every resource still registered and stop the cleaner. A second call is a no-op.

        Returns the survivors: tracked objects still alive after the cleanup, as plain records.
        ``hints`` is what the caller knows of them (``CloseHints``): which it hands to
        another owner, and which a holder it knows keeps; neither makes the check collect the
        whole heap to see whether they are garbage. Raises ``RuntimeError`` for the default
        session, which lives as long as the process.
        """
        if self._is_default:
            raise RuntimeError("Default eager session cannot be closed")
        return self._close(hints)

    def _close(self, hints: CloseHints | None = None) -> tuple[Survivor, ...]:
        me = threading.get_ident()
        with self._lock:
            # A close that an exception cut short (KeyboardInterrupt, a timeout's signal, a
            # deleter raising one) left work undone: the next close() does it.
            cut_short = self._closed and self._survivors is None and self._close_done.is_set()
            closing = self._closing_thread if self._closed and not cut_short else None
            if closing is None:
                self._closed = True
                self._references.close()  # registering refuses from now on
                self._closing_thread = me
                self._close_done.clear()
        if closing is not None:
            # Another thread is closing: return once its cleanup is done, with what it found
            # (the closing thread itself, from a deleter, must not wait for itself).
            if closing != me:
                self._close_done.wait()
            return self._survivors or ()
        try:
            return self._close_now(hints)
        finally:
            self._close_done.set()

    def _close_now(self, hints: CloseHints | None) -> tuple[Survivor, ...]:
        if self._cleaner is not None:
            self._cleaner.request_stop()  # first: however close ends, the cleaner stops
        _OPEN_SESSIONS.discard(self)
        failures: list[str] = []
        async_error: Exception | None = None
        try:
            # Its objects stay behind the line until its survivors are known: collecting them
            # there costs what they are, not what the heap is. The line moves in ``finally``.
            self._deactivate_everywhere(settle=False)
            if self._cleaner is not None:
                self._cleaner.join()
            if self._executor is not None:
                try:
                    self._executor.wait()
                except Exception as error:  # an op failed asynchronously: raise after cleanup
                    async_error = error
                    with contextlib.suppress(Exception):
                        self._executor.clear_error()
            references = self._references
            for reference in references.remaining():
                references.delete(reference, failures)
            references.discard_queue()
            references.count_run()
            if tensorflow_ready():
                tf_context.clear_caches(kernels=self._settings.clear_kernel_cache)
                collecting_before = TRACKER.young_collection_seconds()
                self._survivors = tuple(self._find_survivors(since=0, release=True, hints=hints))
                spent = TRACKER.young_collection_seconds() - collecting_before
                self._close_collection_seconds = spent
                if self._settings.destroy_survivors:
                    survivors.destroy_resources(
                        survivor for survivor in self._survivors if not survivor.allowed
                    )
            else:
                self._survivors = ()
        finally:
            TRACKER.settle()
            self._ownership.clear()
            self._check.clear()
        report_failures(failures)
        if async_error is not None:
            raise async_error
        return self._survivors

    # ----------------------------------------------------------------- activation

    def activate(self) -> EagerSession:
        """Make this the calling thread's active session: it owns what TensorFlow makes now.

        Sessions nest: the innermost active one owns new objects. While active, the session's
        device policy, async executor and cleanup apply, and TensorFlow's default graph is a
        fresh one, so that what TensorFlow ties to the default graph dies with the session.
        """
        self.check_open()
        stack = contextlib.ExitStack()
        if tensorflow_ready():
            self._check.begin()
            stack.enter_context(tf_resources.fresh_default_graph())
            stack.enter_context(self.execution_scope())
            track_creation = self._settings.track_creation
            safe_points = self._strategy is ResourceCleanupStrategy.ON_SAFE_POINTS
            if track_creation or safe_points:
                on_op = make_op_callback(
                    self,
                    safe_points=safe_points,
                    track_creation=track_creation,
                    note_bytes=self._watch.note if safe_points else None,
                )
                stack.enter_context(tf_callbacks.op_callback(on_op))
        TRACKER.push(self)
        thread_activations().append((self, stack))
        self.resume()  # watch what it makes from now on
        return self

    def deactivate(self) -> None:
        """Undo the matching ``activate()`` of this thread (innermost first)."""
        self._deactivate(settle=True)

    def _deactivate(self, *, settle: bool) -> None:
        activations = thread_activations()
        if not activations or activations[-1][0] is not self:
            raise RuntimeError(
                f"{self!r} is not the innermost active session of this thread; "
                "deactivate sessions in the reverse order of activation"
            )
        _, stack = activations.pop()
        try:
            TRACKER.pop(self, settle=settle)
        finally:
            stack.close()

    @property
    def active(self) -> bool:
        """Whether the session is active in some thread."""
        return TRACKER.is_active(self)

    def _deactivate_everywhere(self, *, settle: bool) -> None:
        activations = thread_activations()
        while any(session is self for session, _ in activations):
            session, stack = activations.pop()
            try:
                TRACKER.pop(session, settle=settle)
            finally:
                stack.close()
        while TRACKER.is_active(self):  # active in other threads: stop owning for each
            TRACKER.pop(self, settle=settle)

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
        if self._is_default:
            self.deactivate()
            return
        try:
            # The line stays until the close has collected what the block made, there alone.
            self._deactivate(settle=False)
        finally:
            try:
                self._close_after_block(exc)
            finally:
                TRACKER.settle()

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
        if TRACKER.is_innermost(self):
            TRACKER.attribute()
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
        self._references.drain()
        return tuple(self._find_survivors(since, release=True))

    def detach(self, obj: object) -> None:
        """Declare ``obj`` expected to outlive the session: not reported, not destroyed."""
        self._check.detach(obj)

    def suspect_holder(self, obj: object) -> None:
        """Name an object made before the session that may keep its objects in a cycle.

        A unittest case made at collection holds what its ``setUp`` made in attributes, and
        dies in a cycle after its teardown. The collection of what the session made cannot
        free such a cycle; a whole collection could, at hundreds of milliseconds with
        TensorFlow loaded. Named here (kept weakly), it is part of the cheap proof at close
        that survivors are garbage. Naming one that is no such holder changes no verdict.
        """
        self._check.suspect_holder(obj)

    def known_retention(self) -> tuple[str, ...]:
        """What TensorFlow's own known leaks kept of the session's objects and it released.

        See ``survivors.release_retention``: gradient-registry entries handed to their graph,
        ``tf.distribute`` cache entries dropped. What could not be released is in the
        survivors, each with its ``retention``.
        """
        return self._check.released

    def _find_survivors(
        self,
        since: int,
        *,
        release: bool = False,
        hints: CloseHints | None = None,
    ) -> list[Survivor]:
        if TRACKER.is_innermost(self):
            TRACKER.attribute()
        with COUNTING:  # no cleaner holds a tensor of the code's while it is judged
            return self._check.find(since, release=release, hints=hints)
