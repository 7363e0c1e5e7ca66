"""pytest-eagersession: TensorFlow Java's EagerSession for Python, and a pytest plugin on it.

Importing this package imports neither TensorFlow nor objgraph, and registers no pytest hooks.
"""

from __future__ import annotations

from pytest_eagersession.base.errors import (
    ResourceCleanupWarning,
    SessionClosedError,
    TensorFlowMissingError,
)
from pytest_eagersession.base.strategies import DevicePlacementPolicy, ResourceCleanupStrategy
from pytest_eagersession.core.operations import EagerOperation, EagerOperationBuilder, Output
from pytest_eagersession.core.references import NativeReference
from pytest_eagersession.core.session import EagerSession, Options, SessionOptions, SessionStats
from pytest_eagersession.core.session_settings import SessionSettings
from pytest_eagersession.core.survivors import Survivor

__all__ = [
    "DevicePlacementPolicy",
    "EagerOperation",
    "EagerOperationBuilder",
    "EagerSession",
    "NativeReference",
    "Options",
    "Output",
    "ResourceCleanupStrategy",
    "ResourceCleanupWarning",
    "SessionClosedError",
    "SessionOptions",
    "SessionSettings",
    "SessionStats",
    "Survivor",
    "TensorFlowMissingError",
]
