"""Exceptions and warnings of the session."""

from __future__ import annotations


class SessionClosedError(RuntimeError):
    """A closed session, or something it owned, was used (Java's IllegalStateException)."""

    def __init__(self, message: str = "Eager session has been closed") -> None:
        super().__init__(message)


class ResourceCleanupWarning(RuntimeWarning):
    """A resource's ``delete()`` raised; the cleanup went on with the others."""


class TensorFlowMissingError(ImportError):
    """TensorFlow is not importable, or is older than this package supports."""
