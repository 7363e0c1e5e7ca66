"""The settings a session is built with, and the counts it keeps: plain frozen records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_eagersession.base.strategies import DevicePlacementPolicy, ResourceCleanupStrategy
from pytest_eagersession.core.survivors import AllowPredicate


@dataclass(frozen=True)
class SessionSettings:
    """What ``SessionOptions`` collected; each session keeps the one it was built with."""

    is_async: bool = False
    """Run ops with TensorFlow's asynchronous eager execution."""
    device_placement_policy: DevicePlacementPolicy = DevicePlacementPolicy.SILENT
    """What TensorFlow does with inputs on the wrong device, while the session is active."""
    resource_cleanup_strategy: ResourceCleanupStrategy = ResourceCleanupStrategy.IN_BACKGROUND
    """When resources whose owners died are deleted."""
    config: Any = None
    """A ``tf.compat.v1.ConfigProto`` for TensorFlow's context, or None."""
    track_creation: bool = False
    """Record the op and the user-code line that made each output."""
    allow: AllowPredicate | None = None
    """The survivors to expect, as one predicate."""
    destroy_survivors: bool = True
    """Destroy the resource handles of survivors at close."""
    clear_kernel_cache: bool = False
    """Also clear TensorFlow's kernel cache at close."""


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
    close_collection_seconds: float = 0.0
    """Seconds its close spent collecting what the session made: the garbage it left in
    cycles, which the interpreter collects anyway, in its own time, without a session. Growing
    with what the session made, and 0 when nothing it tracked was alive at close."""
