"""Retracing: how often each tf.function traced, for which input signatures, and why it did."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import weakref
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from pytest_eagersession import _tf
from pytest_eagersession._tf.tracing import (
    TraceOrigin,
    add_trace_callback,
    concrete_name,
    is_tf_data_function,
    remove_trace_callback,
    signature_text,
)
from pytest_eagersession.assertions.errors import RetracingError
from pytest_eagersession.assertions.findings import Trace, TracedFunction
from pytest_eagersession.assertions.limits import LimitBlock

#: Signatures listed per function in a retracing report.
LISTED_SIGNATURES = 10


class TraceCounter:
    """Counts the traces of tf.functions while it is active (``with`` or ``start``/``stop``).

    A trace is counted when TensorFlow adds a concrete function to a tf.function's cache, which
    is what ``experimental_get_tracing_count()`` counts: a function that creates variables
    traces twice on its first call, and the report marks that first trace. tf.data's internal
    functions are left out. Traces of every thread count. Holds no traced function: only text
    and weak references.
    """

    def __init__(self) -> None:
        self._traces: list[Trace] = []
        self._instances: dict[tuple[str, str | None], list[tuple[int, Any]]] = {}
        self._first_traces: dict[tuple[str, str | None, int], int] = {}
        self._lock = threading.Lock()
        self._callback: Callable[[Any], None] | None = None

    @property
    def traces(self) -> list[Trace]:
        """Every trace counted so far, in order."""
        with self._lock:
            return list(self._traces)

    @property
    def total(self) -> int:
        """How many traces were counted."""
        return len(self._traces)

    def start(self) -> TraceCounter:
        """Start counting."""
        if self._callback is not None:
            raise RuntimeError("this TraceCounter is already counting")
        _tf.tensorflow()
        self._callback = add_trace_callback(self._on_trace)
        return self

    def stop(self) -> None:
        """Stop counting (the counts stay)."""
        callback, self._callback = self._callback, None
        if callback is not None:
            remove_trace_callback(callback)

    def __enter__(self) -> TraceCounter:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def functions(self) -> list[TracedFunction]:
        """Traces per Python function, most traced first."""
        grouped: dict[tuple[str, str | None], list[Trace]] = {}
        for trace in self.traces:
            grouped.setdefault((trace.function, trace.location), []).append(trace)
        result = [
            TracedFunction(
                function=name,
                location=location,
                traces=len(traces),
                instances=len({trace.instance for trace in traces}),
                signatures=tuple(trace.signature_text() for trace in traces),
            )
            for (name, location), traces in grouped.items()
        ]
        return sorted(result, key=lambda item: -item.traces)

    def over(self, limit: int) -> list[TracedFunction]:
        """The functions that traced more than ``limit`` times."""
        return [function for function in self.functions() if function.traces > limit]

    def check(self, limit: int, where: str = "The block") -> None:
        """Raise ``RetracingError`` naming each function that traced more than ``limit`` times."""
        over = self.over(limit)
        if over:
            raise RetracingError(retracing_text(where, limit, over), over)

    def _on_trace(self, concrete: Any, origin: TraceOrigin) -> None:
        name, location = _function_identity(origin.function)
        if is_tf_data_function(location):
            return
        concrete_text = concrete_name(concrete)
        signature = signature_text(concrete)
        with self._lock:
            instances = self._instances.setdefault((name, location), [])
            instance = _instance_number(instances, origin.owner)
            key = (name, location, instance)
            if origin.creates_variables:
                self._first_traces.setdefault(key, len(self._traces))
            else:
                first = self._first_traces.pop(key, None)
                if first is not None:  # its first trace made variables: TensorFlow traced again
                    self._traces[first] = dataclasses.replace(
                        self._traces[first], creates_variables=True
                    )
            self._traces.append(Trace(name, location, signature, concrete_text, instance))


def _function_identity(function: Any) -> tuple[str, str | None]:
    target = getattr(function, "__func__", function)
    with contextlib.suppress(Exception):
        target = getattr(target, "__wrapped__", target)
    code = getattr(target, "__code__", None)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if not isinstance(name, str):
        name = type(target).__qualname__
    location = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else None
    return name, location


def _instance_number(instances: list[tuple[int, Any]], owner: Any) -> int:
    if owner is None:
        return 1
    for number, (key, known) in enumerate(instances, start=1):
        if key == id(owner) and (known is None or known() is owner):
            return number
    ref: Any = None
    with contextlib.suppress(TypeError):
        ref = weakref.ref(owner)
    instances.append((id(owner), ref))
    return len(instances)


def retracing_text(where: str, limit: int, functions: Sequence[TracedFunction]) -> str:
    """The report of functions that traced more than ``limit`` times."""
    noun = "time" if limit == 1 else "times"
    lines = [f"{where} traced tf.functions more than max_traces={limit} allows ({limit} {noun}):"]
    for function in functions:
        where_defined = f" ({function.location})" if function.location else ""
        by = ""
        if function.instances > 1:
            by = f", by {function.instances} tf.function objects"
        lines.append(f"  {function.function}{where_defined} traced {function.traces} times{by}:")
        for number, signature in enumerate(function.signatures[:LISTED_SIGNATURES], start=1):
            lines.append(f"    {number}. {signature}")
        if len(function.signatures) > LISTED_SIGNATURES:
            lines.append(f"    ... and {len(function.signatures) - LISTED_SIGNATURES} more")
        hint = _retracing_hint(function)
        if hint:
            lines.append(f"    {hint}")
    return "\n".join(lines)


def _retracing_hint(function: TracedFunction) -> str | None:
    if function.instances > 1:
        return (
            f"{function.instances} tf.function objects traced it: one made anew for each call "
            "(or for each instance, on a method) traces anew; make it once and reuse it."
        )
    signatures = [s for s in function.signatures if "(first call, created variables" not in s]
    if len(signatures) <= 1:
        return None
    if len(set(signatures)) < len(signatures):
        return (
            "Some signatures repeat: the traces differ in what the function captures "
            "(a Python value from its closure, a new object each call)."
        )
    if any("Literal[" in signature for signature in signatures):
        return (
            "Python values are part of the signature (Literal[...]): pass tensors "
            "(tf.constant(x)), or give the tf.function an input_signature."
        )
    return (
        "The shapes or dtypes differ: give the tf.function an input_signature with None "
        "dimensions, or reduce_retracing=True."
    )


class TraceLimit(LimitBlock[TraceCounter, int]):
    """``assert_max_traces``'s context manager and decorator."""

    def __init__(self, limit: int, where: str | None) -> None:
        super().__init__(check_limit(limit), where)

    @property
    def counter(self) -> TraceCounter:
        """The counter of the latest ``with`` block."""
        return self._started()

    def _begin(self) -> TraceCounter:
        return TraceCounter().start()

    def _end(self, probe: TraceCounter, *, check: bool) -> None:
        probe.stop()
        if check:
            probe.check(self._limit, self._where or "The block")


def assert_max_traces(limit: int, *, where: str | None = None) -> TraceLimit:
    """Fail when a tf.function traces more than ``limit`` times in the block or decorated call.

    ``with assert_max_traces(1) as counter:`` or ``@assert_max_traces(1)``. The limit is per
    Python function, over all the tf.function objects that wrap it. Raises ``RetracingError``.
    """
    return TraceLimit(limit, where)


def check_limit(limit: object) -> int:
    """``limit`` as a number of traces; ``ValueError`` unless a whole number of 0 or more."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"max_traces must be a whole number of 0 or more, got {limit!r}")
    return limit
