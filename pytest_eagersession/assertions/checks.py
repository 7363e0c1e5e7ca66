"""All the checks at once, around a block, a function or a unittest method: ``eager_checks``."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from pytest_eagersession.assertions.errors import (
    EagerAssertionError,
    EagerChecksError,
    LeakAssertionError,
    MemoryLimitError,
    RetracingError,
)
from pytest_eagersession.assertions.leaks import assert_no_leaks
from pytest_eagersession.assertions.memory import ByteMeter
from pytest_eagersession.assertions.scope import callable_name, owning_session
from pytest_eagersession.assertions.traces import TraceCounter, check_limit
from pytest_eagersession.base.sizes import parse_size
from pytest_eagersession.core.survivors import AllowFilter, check_allow_filter

if TYPE_CHECKING:
    from pytest_eagersession.core.session import EagerSession

P = ParamSpec("P")
R = TypeVar("R")


class EagerChecks:
    """Retracing, memory and leak checks around a block, a function or a unittest method.

    ``with eager_checks(max_traces=1):`` or ``@eager_checks(max_bytes="64 MiB")``. Each check
    runs only when the block ends without an exception; several failures raise one
    ``EagerChecksError`` that lists them all. Each decorated call gets a fresh set of checks.
    ``counter`` (a ``TraceCounter``, with ``max_traces`` or ``count_traces``) and ``meter`` (a
    ``ByteMeter``, with ``max_bytes`` or ``measure_bytes``) keep what was measured.
    """

    def __init__(
        self,
        *,
        max_traces: int | None = None,
        max_bytes: int | str | None = None,
        leaks: bool = True,
        allow: AllowFilter | None = None,
        measure_bytes: bool = False,
        count_traces: bool = False,
        where: str | None = None,
        session: EagerSession | None = None,
    ) -> None:
        self.max_traces = None if max_traces is None else check_limit(max_traces)
        self.max_bytes = None if max_bytes is None else parse_size(max_bytes)
        self.leaks = bool(leaks)
        check_allow_filter(allow)  # a bad filter fails here, not when the block ends
        self._allow = allow
        self._measure_bytes = measure_bytes or self.max_bytes is not None
        self._count_traces = count_traces or self.max_traces is not None
        self._where = where
        self._session = session
        self.counter: TraceCounter | None = None
        self.meter: ByteMeter | None = None
        self._stack: contextlib.ExitStack | None = None
        self._owner: EagerSession | None = None
        self._checkpoint = 0

    def start(self) -> EagerChecks:
        """Start the checks (``__enter__`` without the ``with``)."""
        if self._stack is not None:
            raise RuntimeError("these checks are already running")
        stack = contextlib.ExitStack()
        try:
            if self.leaks:
                self._owner = stack.enter_context(owning_session(self._session))
                self._checkpoint = self._owner.checkpoint()
            if self._count_traces:
                self.counter = stack.enter_context(TraceCounter())
            if self._measure_bytes:
                self.meter = stack.enter_context(ByteMeter(self.max_bytes))
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def finish(self, *, check: bool = True) -> list[EagerAssertionError]:
        """Stop the checks; with ``check``, return the failures (does not raise them)."""
        stack, self._stack = self._stack, None
        if stack is None:
            return []
        errors: list[EagerAssertionError] = []
        where = self._where or "The block"
        try:
            if self.meter is not None:
                self.meter.stop()
            if self.counter is not None:
                self.counter.stop()
            if check:
                errors = self._failures(where)
        finally:
            stack.close()
        return errors

    def _failures(self, where: str) -> list[EagerAssertionError]:
        errors: list[EagerAssertionError] = []
        if self.counter is not None and self.max_traces is not None:
            try:
                self.counter.check(self.max_traces, where)
            except RetracingError as error:
                errors.append(error)
        if self.meter is not None:
            try:
                self.meter.check(where)
            except MemoryLimitError as error:
                errors.append(error)
        if self.leaks and self._owner is not None:
            try:
                assert_no_leaks(self._owner, since=self._checkpoint, allow=self._allow, where=where)
            except LeakAssertionError as error:
                errors.append(error)
        return errors

    def to_json(self) -> dict[str, Any]:
        """What was measured, for a JSON report.

        With bytes: ``peak_bytes``, ``device_peak_bytes`` (per GPU), ``end_bytes`` (tracked
        bytes still alive at the end) and ``objects_made``; with traces: ``trace_count`` and
        ``traces`` (per function).
        """
        result: dict[str, Any] = {}
        if self.meter is not None:
            result["peak_bytes"] = self.meter.peak_bytes
            result["device_peak_bytes"] = self.meter.device_peaks
            result["end_bytes"] = self.meter.current_bytes
            result["objects_made"] = self.meter.objects_made
        if self.counter is not None:
            result["trace_count"] = self.counter.total
            result["traces"] = [function.to_json() for function in self.counter.functions()]
        return result

    def __enter__(self) -> EagerChecks:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        errors = self.finish(check=exc_type is None)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise EagerChecksError(errors)

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        where = self._where or callable_name(func)

        @functools.wraps(func)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            with self._fresh(where):
                return func(*args, **kwargs)

        return checked

    def _fresh(self, where: str) -> EagerChecks:
        return EagerChecks(
            max_traces=self.max_traces,
            max_bytes=self.max_bytes,
            leaks=self.leaks,
            allow=self._allow,
            measure_bytes=self._measure_bytes,
            count_traces=self._count_traces,
            where=where,
            session=self._session,
        )


def eager_checks(
    *,
    max_traces: int | None = None,
    max_bytes: int | str | None = None,
    leaks: bool = True,
    allow: AllowFilter | None = None,
) -> EagerChecks:
    """Retracing, memory and leak checks, as a context manager or a decorator.

    For a unittest (``tf.test.TestCase``) suite adopting the checks one test at a time::

        @eager_checks(max_traces=1, max_bytes="64 MiB")
        def test_step(self): ...

    ``leaks``: what the block made and is still alive at its end fails (in the ``with`` form,
    that includes objects the enclosing function's locals still hold).
    """
    return EagerChecks(max_traces=max_traces, max_bytes=max_bytes, leaks=leaks, allow=allow)
