"""The enums of TensorFlow Java's EagerSession: resource cleanup and device placement."""

from __future__ import annotations

import enum


class _ParsableEnum(enum.Enum):
    @classmethod
    def parse(cls, text: str | _ParsableEnum) -> _ParsableEnum:
        """Return the member named ``text`` (any case, ``-`` or ``_``), or raise ``ValueError``."""
        if isinstance(text, cls):
            return text
        if isinstance(text, str):
            key = text.strip().upper().replace("-", "_")
            if key in cls.__members__:
                return cls.__members__[key]
        raise ValueError(f"unknown {cls.__name__} {text!r}; choose one of {cls.choices()}")

    @classmethod
    def choices(cls) -> str:
        """The valid names, lower case, as a user writes them."""
        return ", ".join(name.lower() for name in cls.__members__)


class ResourceCleanupStrategy(_ParsableEnum):
    """When a session deletes the resources whose owners have become garbage.

    Every strategy deletes everything still registered when the session closes.
    """

    IN_BACKGROUND = "in_background"
    """A daemon thread per session deletes resources as soon as their owners die (default)."""

    ON_SAFE_POINTS = "on_safe_points"
    """No thread: the calling thread deletes them at safe points (each op it builds, runs)."""

    ON_SESSION_CLOSE = "on_session_close"
    """Nothing is deleted before the session closes."""

    @classmethod
    def parse(cls, text: str | _ParsableEnum) -> ResourceCleanupStrategy:
        """The strategy named ``text`` (any case, ``-`` or ``_``); ``ValueError`` otherwise."""
        member = super().parse(text)
        assert isinstance(member, ResourceCleanupStrategy)
        return member


class DevicePlacementPolicy(_ParsableEnum):
    """What TensorFlow does when an op's inputs live on another device than the op."""

    EXPLICIT = "explicit"
    """Raise an error."""

    WARN = "warn"
    """Copy the tensors and log a warning."""

    SILENT = "silent"
    """Copy the tensors silently (TensorFlow's default)."""

    SILENT_FOR_INT32 = "silent_for_int32"
    """Copy int32 tensors silently, raise for the others."""

    @classmethod
    def parse(cls, text: str | _ParsableEnum) -> DevicePlacementPolicy:
        """The policy named ``text`` (any case, ``-`` or ``_``); ``ValueError`` otherwise."""
        member = super().parse(text)
        assert isinstance(member, DevicePlacementPolicy)
        return member
