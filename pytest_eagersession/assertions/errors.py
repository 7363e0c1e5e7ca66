"""The errors of the checks: ``AssertionError``s whose text is the whole report.

Each names itself ``pytest_eagersession.assertions.<Name>``, the path users import it from, in
tracebacks and test reports.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_eagersession.assertions.findings import RunGrowth, TracedFunction
from pytest_eagersession.reports.report import LeakRecord

_PUBLIC_MODULE = "pytest_eagersession.assertions"


class EagerAssertionError(AssertionError):
    """A failed check of ``pytest_eagersession.assertions``; ``str()`` is the whole report."""

    __module__ = _PUBLIC_MODULE


class GrowthError(EagerAssertionError):
    """``assert_no_growth`` found objects that pile up run after run."""

    __module__ = _PUBLIC_MODULE

    def __init__(self, message: str, runs: Sequence[RunGrowth]) -> None:
        super().__init__(message)
        self.runs = tuple(runs)


class LeakAssertionError(EagerAssertionError):
    """``assert_no_leaks`` found objects made after the checkpoint that are still alive."""

    __module__ = _PUBLIC_MODULE

    def __init__(self, message: str, records: Sequence[LeakRecord]) -> None:
        super().__init__(message)
        self.records = tuple(records)


class RetracingError(EagerAssertionError):
    """A tf.function traced more often than allowed."""

    __module__ = _PUBLIC_MODULE

    def __init__(self, message: str, functions: Sequence[TracedFunction]) -> None:
        super().__init__(message)
        self.functions = tuple(functions)


class MemoryLimitError(EagerAssertionError):
    """The peak of tracked TensorFlow bytes, or of a GPU's memory, passed the limit."""

    __module__ = _PUBLIC_MODULE

    def __init__(self, message: str, peak_bytes: int, limit: int) -> None:
        super().__init__(message)
        self.peak_bytes = peak_bytes
        self.limit = limit


class EagerChecksError(EagerAssertionError):
    """More than one check of ``eager_checks`` failed; ``errors`` holds each one."""

    __module__ = _PUBLIC_MODULE

    def __init__(self, errors: Sequence[EagerAssertionError]) -> None:
        super().__init__("\n\n".join(str(error) for error in errors))
        self.errors = tuple(errors)
