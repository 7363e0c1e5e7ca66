"""Assertions on what TensorFlow code leaves behind: growth, leaks, retracing and memory.

Each check is a plain function or context manager (no pytest here), and each failure is an
``AssertionError`` whose text is the whole report. Nothing here keeps a checked object alive:
reports hold text, numbers and weak references only. The gc's state (enabled, thresholds, debug
flags) is the same after a check as before it, whether the check passed or failed.

- ``assert_no_growth(fn)`` (``growth``): calls ``fn`` after a warm-up and fails when each run
  leaves new TensorFlow objects (or registered functions) alive, listing them per run with
  their holders.
- ``assert_no_leaks(session, since=checkpoint)`` (``leaks``): what was made after a checkpoint
  and is still alive fails, with the plugin's leak report.
- ``TraceCounter`` / ``assert_max_traces(n)`` (``traces``): tf.function traces per function,
  with the input signature of each trace.
- ``ByteMeter`` / ``max_bytes(limit)`` (``memory``, with ``tracked_bytes`` and ``devices``):
  the peak of tracked TensorFlow bytes (and of GPU memory).
- ``eager_checks(...)`` (``checks``): all of them at once, as a context manager or a decorator
  (unittest).

The error types are in ``errors``, the records the checks return in ``findings``; import every
name from this package, which is the public path.
"""

from __future__ import annotations

from pytest_eagersession.assertions.checks import EagerChecks, eager_checks
from pytest_eagersession.assertions.devices import DEVICE_MEMORY, DeviceMemory
from pytest_eagersession.assertions.errors import (
    EagerAssertionError,
    EagerChecksError,
    GrowthError,
    LeakAssertionError,
    MemoryLimitError,
    RetracingError,
)
from pytest_eagersession.assertions.findings import LargeObject, RunGrowth, Trace, TracedFunction
from pytest_eagersession.assertions.growth import (
    DEFAULT_RUNS,
    DEFAULT_WARMUP,
    LISTED_PER_RUN,
    assert_no_growth,
)
from pytest_eagersession.assertions.leaks import assert_no_leaks, explain_here
from pytest_eagersession.assertions.memory import (
    LARGEST_AT_PEAK,
    ByteLimit,
    ByteMeter,
    max_bytes,
)
from pytest_eagersession.assertions.scope import preserved_gc_state
from pytest_eagersession.assertions.traces import (
    LISTED_SIGNATURES,
    TraceCounter,
    TraceLimit,
    assert_max_traces,
    retracing_text,
)
from pytest_eagersession.base.sizes import parse_size

__all__ = [
    "DEFAULT_RUNS",
    "DEFAULT_WARMUP",
    "DEVICE_MEMORY",
    "LARGEST_AT_PEAK",
    "LISTED_PER_RUN",
    "LISTED_SIGNATURES",
    "ByteLimit",
    "ByteMeter",
    "DeviceMemory",
    "EagerAssertionError",
    "EagerChecks",
    "EagerChecksError",
    "GrowthError",
    "LargeObject",
    "LeakAssertionError",
    "MemoryLimitError",
    "RetracingError",
    "RunGrowth",
    "Trace",
    "TraceCounter",
    "TraceLimit",
    "TracedFunction",
    "assert_max_traces",
    "assert_no_growth",
    "assert_no_leaks",
    "eager_checks",
    "explain_here",
    "max_bytes",
    "parse_size",
    "preserved_gc_state",
    "retracing_text",
]
