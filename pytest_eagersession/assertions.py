"""Assertions on what TensorFlow code leaves behind: growth, leaks, retracing and memory.

Each check is a plain function or context manager (no pytest here), and each failure is an
``AssertionError`` whose text is the whole report. Nothing here keeps a checked object alive:
reports hold text, numbers and weak references only. The gc's state (enabled, thresholds, debug
flags) is the same after a check as before it, whether the check passed or failed.

- ``assert_no_growth(fn)``: calls ``fn`` after a warm-up and fails when each run leaves new
  TensorFlow objects (or registered functions) alive, listing them per run with their holders.
- ``assert_no_leaks(session, since=checkpoint)``: what was made after a checkpoint and is still
  alive fails, with the plugin's leak report.
- ``TraceCounter`` / ``assert_max_traces(n)``: tf.function traces per function, with the input
  signature of each trace.
- ``ByteMeter`` / ``max_bytes(limit)``: the peak of tracked TensorFlow bytes (and of GPU memory).
- ``eager_checks(...)``: all of them at once, as a context manager or a decorator (unittest).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import heapq
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from pytest_eagersession import _tf
from pytest_eagersession.explain import DEFAULT_BUDGET_S, Explanation, explain_all
from pytest_eagersession.holders import PACKAGE_DIR
from pytest_eagersession.kinds import (
    TENSOR,
    VARIABLE,
    Description,
    describe,
    tensor_nbytes,
    tensorflow_ready,
)
from pytest_eagersession.report import LeakRecord, build_records, render
from pytest_eagersession.sizes import format_bytes, parse_size
from pytest_eagersession.survivors import AllowFilter, Survivor, check_allow_filter, op_callback
from pytest_eagersession.tracking import TRACKER, user_code_location

if TYPE_CHECKING:
    from pytest_eagersession.session import EagerSession

P = ParamSpec("P")
R = TypeVar("R")
ProbeT = TypeVar("ProbeT")
LimitT = TypeVar("LimitT")

#: Runs before the measured ones, so that caches and lazy state are made first.
DEFAULT_WARMUP = 2
#: Measured runs of ``assert_no_growth``; a cache keeping the last k results passes if k < runs-1.
DEFAULT_RUNS = 5
#: Objects listed per run in a growth report, and largest objects listed at a memory peak.
LISTED_PER_RUN = 5
LARGEST_AT_PEAK = 5
#: Signatures listed per function in a retracing report.
LISTED_SIGNATURES = 10


# ----------------------------------------------------------------- errors


class EagerAssertionError(AssertionError):
    """A failed check of this module; ``str()`` is the whole report."""


class GrowthError(EagerAssertionError):
    """``assert_no_growth`` found objects that pile up run after run."""

    def __init__(self, message: str, runs: Sequence[RunGrowth]) -> None:
        super().__init__(message)
        self.runs = tuple(runs)


class LeakAssertionError(EagerAssertionError):
    """``assert_no_leaks`` found objects made after the checkpoint that are still alive."""

    def __init__(self, message: str, records: Sequence[LeakRecord]) -> None:
        super().__init__(message)
        self.records = tuple(records)


class RetracingError(EagerAssertionError):
    """A tf.function traced more often than allowed."""

    def __init__(self, message: str, functions: Sequence[TracedFunction]) -> None:
        super().__init__(message)
        self.functions = tuple(functions)


class MemoryLimitError(EagerAssertionError):
    """The peak of tracked TensorFlow bytes, or of a GPU's memory, passed the limit."""

    def __init__(self, message: str, peak_bytes: int, limit: int) -> None:
        super().__init__(message)
        self.peak_bytes = peak_bytes
        self.limit = limit


class EagerChecksError(EagerAssertionError):
    """More than one check of ``eager_checks`` failed; ``errors`` holds each one."""

    def __init__(self, errors: Sequence[EagerAssertionError]) -> None:
        super().__init__("\n\n".join(str(error) for error in errors))
        self.errors = tuple(errors)


# ----------------------------------------------------------------- the interpreter's state


@contextlib.contextmanager
def preserved_gc_state() -> Iterator[None]:
    """Restore the gc's enabled flag, thresholds and debug flags when the block ends."""
    enabled = gc.isenabled()
    debug = gc.get_debug()
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_debug(debug)
        gc.set_threshold(*threshold)
        if enabled:
            gc.enable()
        else:
            gc.disable()


@contextlib.contextmanager
def _owning_session(session: EagerSession | None) -> Iterator[EagerSession]:
    """The session that owns what the block makes.

    ``session`` itself (activated for the block unless it already owns new objects); without
    one, the active session (the plugin's test session under pytest); without that, a temporary
    session that never destroys what outlives it.
    """
    if session is not None:
        if TRACKER.owner() is session:
            yield session
            return
        session.activate()
        try:
            yield session
        finally:
            session.deactivate()
        return
    owner = TRACKER.owner()
    if owner is not None and TRACKER.is_active(owner) and not owner.closed:
        yield owner
        return
    from pytest_eagersession.session import EagerSession

    temporary = (
        EagerSession.options()
        .resource_cleanup_strategy("on_session_close")
        .destroy_survivors(False)
        .build()
    )
    with temporary:
        yield temporary


def _leaks_since(
    session: EagerSession, since: int, until: int | None, allow: AllowFilter | None
) -> list[Survivor]:
    """Survivors made after ``since`` (and up to ``until``), neither allowed nor expected."""
    predicate = check_allow_filter(allow)
    found = []
    for survivor in session.survivors(since=since):
        if survivor.allowed or (until is not None and survivor.seq > until):
            continue
        if predicate is not None and predicate(survivor):
            continue
        found.append(survivor)
    return found


# ----------------------------------------------------------------- who holds it


def explain_here(obj: object, *, budget_s: float = DEFAULT_BUDGET_S) -> str:
    """Who holds ``obj``, as a report's line; the locals of the checking code's callers count.

    The plugin's teardown leaves every frame of its own thread out: the test has returned. A
    check made in the middle of a test must name the test's own locals, so the frames below
    this package's own are roots too, before any other.
    """
    return _explain_here([obj], budget_s=budget_s)[0].text()


def _explain_here(
    objects: Sequence[object], *, budget_s: float = DEFAULT_BUDGET_S
) -> list[Explanation]:
    stack = _callers()
    try:
        return explain_all(objects, budget_s=budget_s, stack=stack, more_time=None)
    finally:
        stack.clear()


def _callers() -> list[types.FrameType]:
    """The running frames below this package's own (and contextlib's, which it enters)."""
    frames: list[types.FrameType] = []
    frame: types.FrameType | None = sys._getframe(1)
    ours = True
    try:
        while frame is not None:
            filename = frame.f_code.co_filename
            ours = ours and (
                filename.startswith(PACKAGE_DIR) or filename.endswith("/contextlib.py")
            )
            if not ours:
                frames.append(frame)
            frame = frame.f_back
    finally:
        del frame
    return frames


def _records(
    survivors: Sequence[Survivor],
    scope: str,
    *,
    explain_limit: int | None,
    explained: dict[int, Explanation] | None = None,
) -> list[LeakRecord]:
    """``report.build_records``'s records, with holders found by ``_explain_here``.

    ``explained`` has the explanations of a walk made already, by the objects' ids.
    """

    def holders(objects: Sequence[object]) -> Sequence[Explanation | None]:
        if explained is not None:
            return [explained.get(id(obj)) for obj in objects]
        return _explain_here(objects)

    return build_records(
        survivors, scope, explain_limit=explain_limit, chain_depth=0, explainer=holders
    )


def _explained_together(
    buckets: Sequence[Sequence[Survivor]], limit: int | None
) -> dict[int, Explanation]:
    """One walk for the survivors of several runs (the first ``limit``), by their ids."""
    objects: list[object] = []
    for survivor in chain.from_iterable(buckets):
        if limit is not None and len(objects) >= limit:
            break
        obj = None if survivor.ref is None else survivor.ref()
        if obj is not None:
            objects.append(obj)
    try:
        if not objects:
            return {}
        return {
            id(obj): explanation
            for obj, explanation in zip(objects, _explain_here(objects), strict=True)
        }
    finally:
        objects.clear()


# ----------------------------------------------------------------- leaks since a checkpoint


def assert_no_leaks(
    session: EagerSession | None = None,
    *,
    since: int = 0,
    allow: AllowFilter | None = None,
    where: str | None = None,
    explain_limit: int | None = None,
) -> None:
    """Fail with the plugin's leak report if something made after ``since`` is still alive.

    ``session`` defaults to the active one; ``since`` is a ``session.checkpoint()``. Reference
    cycles are collected first; nothing is destroyed. Raises ``LeakAssertionError``.
    """
    if session is None:
        session = TRACKER.owner()
        if session is None or not TRACKER.is_active(session):
            raise RuntimeError("assert_no_leaks: no eager session is active; pass one")
    with preserved_gc_state():
        leaks = _leaks_since(session, since, None, allow)
        if not leaks:
            return
        records = _records(leaks, "checkpoint", explain_limit=explain_limit)
        del leaks
    text = render(
        where or f"The code run since checkpoint {since}",
        "checkpoint",
        records,
        strategy=session.resource_cleanup_strategy.value,
    )
    raise LeakAssertionError(text, records)


# ----------------------------------------------------------------- growth


@dataclass(frozen=True)
class RunGrowth:
    """What one measured run of ``assert_no_growth`` left alive at the end of the check."""

    run: int
    """1 for the first run after the warm-up."""
    records: tuple[LeakRecord, ...]
    """TensorFlow objects the run made that were still alive after the last run."""
    functions: tuple[str, ...]
    """Functions the run registered with TensorFlow's eager context, still registered."""
    traces: tuple[str, ...]
    """tf.function traces made during the run: ``name (location) (signature)``."""

    @property
    def grew(self) -> bool:
        """Whether the run left something alive."""
        return bool(self.records or self.functions)

    @property
    def nbytes(self) -> int:
        """Bytes of the objects it left alive (those of known size)."""
        return sum(record.nbytes or 0 for record in self.records)


def assert_no_growth(
    fn: Callable[[], object],
    *,
    warmup: int = DEFAULT_WARMUP,
    runs: int = DEFAULT_RUNS,
    session: EagerSession | None = None,
    allow: AllowFilter | None = None,
    explain_limit: int | None = None,
) -> tuple[RunGrowth, ...]:
    """Call ``fn`` ``warmup`` times, then ``runs`` times, and fail if each run leaves objects.

    Identity, not counts: the TensorFlow objects (tensors, variables, resource handles,
    iterators, tables, tf.functions) each run makes, and the functions it registers with the
    eager context, are checked after the last run; one freed and one kept never net out. It
    fails when every measured run but the last left something alive (the last may keep its
    result). Returns what each run left, to inspect; raises ``GrowthError``.
    """
    if not callable(fn):
        raise TypeError(f"assert_no_growth takes a callable, not {type(fn).__name__}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a whole number of 0 or more, got {warmup!r}")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ValueError(f"runs must be a whole number of 2 or more, got {runs!r}")
    _tf.tensorflow()
    with preserved_gc_state(), _owning_session(session) as owner, TraceCounter() as counter:
        for _ in range(warmup):
            fn()
        marks = [owner.checkpoint()]
        names = [_registered_functions()]
        trace_marks = [len(counter.traces)]
        for _ in range(runs):
            fn()
            marks.append(owner.checkpoint())
            names.append(_registered_functions())
            trace_marks.append(len(counter.traces))
        found = _leaks_since(owner, marks[0], marks[-1], allow)
        still_registered = _registered_functions()
        traces = counter.traces
        buckets: list[list[Survivor]] = [[] for _ in range(runs)]
        for survivor in found:
            for run in range(runs):
                if survivor.seq <= marks[run + 1]:
                    buckets[run].append(survivor)
                    break
        del found
        grew = [
            bool(buckets[run]) or bool((names[run + 1] - names[run]) & still_registered)
            for run in range(runs)
        ]
        failing = all(grew[:-1])
        explained = _explained_together(buckets, explain_limit if failing else 0)
        results = []
        for run in range(runs):
            records = _records(buckets[run], "run", explain_limit=None, explained=explained)
            results.append(
                RunGrowth(
                    run=run + 1,
                    records=tuple(records),
                    functions=tuple(sorted((names[run + 1] - names[run]) & still_registered)),
                    traces=tuple(
                        trace.text() for trace in traces[trace_marks[run] : trace_marks[run + 1]]
                    ),
                )
            )
        del buckets
        explained.clear()
    if failing:
        raise GrowthError(_growth_text(fn, warmup, results), results)
    return tuple(results)


def _growth_text(fn: Callable[[], object], warmup: int, runs: Sequence[RunGrowth]) -> str:
    objects = sum(len(run.records) for run in runs) / len(runs)
    functions = sum(len(run.functions) for run in runs) / len(runs)
    rates = []
    nbytes = sum(run.nbytes for run in runs) // len(runs)
    if objects:
        size = f" ({format_bytes(nbytes)})" if nbytes else ""
        rates.append(f"{_count(objects, 'TensorFlow object')}{size}")
    if functions:
        rates.append(_count(functions, "registered function"))
    grown = sum(1 for run in runs if run.grew)
    lines = [
        f"{_callable_name(fn)} grows: {grown} of its {len(runs)} runs after {warmup} warm-up "
        f"runs left new objects alive to the end (about {' and '.join(rates)} a run):"
    ]
    number = 0
    for run in runs:
        if not run.grew:
            lines.append(f"  run {run.run}: nothing left alive")
            continue
        parts = []
        if run.records:
            noun = "object" if len(run.records) == 1 else "objects"
            parts.append(f"+{len(run.records)} {noun} ({format_bytes(run.nbytes)})")
        if run.functions:
            noun = "function" if len(run.functions) == 1 else "functions"
            parts.append(f"+{len(run.functions)} registered {noun}")
        lines.append(f"  run {run.run}: {', '.join(parts)}")
        for record in run.records[:LISTED_PER_RUN]:
            number += 1
            lines.append(f"    {number}. {record.summary}")
            if record.retained_by is not None:
                lines.append(f"       {record.retained_by}")
        if len(run.records) > LISTED_PER_RUN:
            lines.append(f"    ... and {len(run.records) - LISTED_PER_RUN} more")
        for function in run.functions[:LISTED_PER_RUN]:
            lines.append(f"    registered function {function}")
        for trace in run.traces[:LISTED_PER_RUN]:
            lines.append(f"    traced {trace}")
    if functions:
        lines.append(
            "A tf.function that traces on every call keeps each trace's function registered: "
            "see the signatures above (a Python number or a new shape each call retraces)."
        )
    return "\n".join(lines)


def _count(number: float, noun: str) -> str:
    return f"{number:.3g} {noun}" + ("" if number == 1 else "s")


def _registered_functions() -> frozenset[str]:
    """Names of the functions registered with TensorFlow's eager context."""
    if not tensorflow_ready():
        return frozenset()
    from tensorflow.python.eager import context

    ctx = context.context()
    if getattr(ctx, "_context_handle", None) is None:
        return frozenset()
    try:
        return frozenset(
            name.decode() if isinstance(name, bytes) else str(name)
            for name in ctx.list_function_names()
        )
    except Exception:
        return frozenset()


def _callable_name(fn: object) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return str(name) if name else type(fn).__name__


# ----------------------------------------------------------------- retracing


@dataclass(frozen=True)
class Trace:
    """One trace of a tf.function: which function, for which input signature."""

    function: str
    """The Python function's qualified name."""
    location: str | None
    """``path:line`` where the Python function is defined."""
    signature: str
    """The input signature that caused the trace, as TensorFlow prints it."""
    concrete: str
    """The name of the traced function in TensorFlow's eager context."""
    instance: int
    """Which tf.function object traced it, numbered by first trace (1, 2, ...)."""
    creates_variables: bool = False
    """The first call's trace of a function that created variables (it then traced again)."""

    def text(self) -> str:
        """``name (path:line) (signature)``."""
        where = f" ({self.location})" if self.location else ""
        return f"{self.function}{where} {self.signature_text()}"

    def signature_text(self) -> str:
        """The signature, marked when it is the variable-creating first trace."""
        if self.creates_variables:
            return f"{self.signature} (first call, created variables: traced again)"
        return self.signature


@dataclass(frozen=True)
class TracedFunction:
    """The traces of one Python function, over every tf.function object that wraps it."""

    function: str
    location: str | None
    traces: int
    instances: int
    """How many tf.function objects traced it (more than one: a tf.function made per call)."""
    signatures: tuple[str, ...]
    """The input signature of each trace, in order."""

    def to_json(self) -> dict[str, Any]:
        """The JSON report's fields for this function."""
        return dataclasses.asdict(self)


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
        from tensorflow.python.eager.polymorphic_function import transform

        def on_trace(concrete: Any) -> None:
            with contextlib.suppress(Exception):  # never break the user's tf.function
                self._on_trace(concrete)

        self._callback = on_trace
        transform.CONCRETE_FUNCTION_CALLBACKS.append(on_trace)
        return self

    def stop(self) -> None:
        """Stop counting (the counts stay)."""
        callback, self._callback = self._callback, None
        if callback is None:
            return
        from tensorflow.python.eager.polymorphic_function import transform

        callbacks = transform.CONCRETE_FUNCTION_CALLBACKS
        for index in range(len(callbacks) - 1, -1, -1):
            if callbacks[index] is callback:
                del callbacks[index]

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

    def _on_trace(self, concrete: Any) -> None:
        found = _trace_origin(sys._getframe(2))
        if found is None:
            return
        function, owner, variable_creation = found
        name, location = _function_identity(function)
        if location is not None and "/tensorflow/python/data/" in location:
            return
        concrete_name = getattr(concrete, "name", "")
        if isinstance(concrete_name, bytes):
            concrete_name = concrete_name.decode()
        signature = _signature_text(concrete)
        with self._lock:
            instances = self._instances.setdefault((name, location), [])
            instance = _instance_number(instances, owner)
            key = (name, location, instance)
            if variable_creation:
                self._first_traces.setdefault(key, len(self._traces))
            else:
                first = self._first_traces.pop(key, None)
                if first is not None:  # its first trace made variables: TensorFlow traced again
                    self._traces[first] = dataclasses.replace(
                        self._traces[first], creates_variables=True
                    )
            self._traces.append(Trace(name, location, signature, str(concrete_name), instance))


def _trace_origin(frame: types.FrameType | None) -> tuple[Any, Any, bool] | None:
    """``(python function, tf.function, in variable-creation scope)`` of the trace being made.

    None when TensorFlow does not count it (a trace outside any function cache).
    """
    cache: Any = None
    options: Any = None
    try:
        while frame is not None:
            code = frame.f_code
            if options is None:
                if code.co_name == "_maybe_define_function" and code.co_filename.endswith(
                    "tracing_compilation.py"
                ):
                    options = frame.f_locals.get("tracing_options")
                    cache = getattr(options, "function_cache", None)
                    if cache is None:  # no cache: TensorFlow does not count it as a trace
                        return None
            elif code.co_filename.endswith("polymorphic_function.py"):
                candidate: Any = frame.f_locals.get("self")
                if getattr(candidate, "_function_cache", None) is cache:
                    return candidate.python_function, candidate, _creates_variables(options)
            frame = frame.f_back
    finally:
        del frame
    if options is None:
        return None
    return getattr(options, "python_function", None), None, _creates_variables(options)


def _creates_variables(options: Any) -> bool:
    return getattr(getattr(options, "scope_type", None), "name", "") == "VARIABLE_CREATION"


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


def _signature_text(concrete: Any) -> str:
    try:
        parameters = concrete.function_type.parameters.values()
        return "(" + ", ".join(str(parameter) for parameter in parameters) + ")"
    except Exception:
        return str(getattr(concrete, "structured_input_signature", "(?)"))


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


class _LimitBlock(Generic[ProbeT, LimitT]):
    """A limit usable as ``with`` block (yielding its probe) and as a decorator."""

    def __init__(self, limit: LimitT, where: str | None) -> None:
        self._limit = limit
        self._where = where
        self._probe: ProbeT | None = None

    def _begin(self) -> ProbeT:
        raise NotImplementedError

    def _end(self, probe: ProbeT, *, check: bool) -> None:
        raise NotImplementedError

    def __enter__(self) -> ProbeT:
        self._probe = self._begin()
        return self._probe

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._probe is not None:
            self._end(self._probe, check=exc_type is None)

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        limit, where = self._limit, self._where or _callable_name(func)
        block_type = type(self)

        @functools.wraps(func)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            with block_type(limit, where):
                return func(*args, **kwargs)

        return checked

    def _started(self) -> ProbeT:
        if self._probe is None:
            raise RuntimeError("the block has not started yet")
        return self._probe


class TraceLimit(_LimitBlock[TraceCounter, int]):
    """``assert_max_traces``'s context manager and decorator."""

    def __init__(self, limit: int, where: str | None) -> None:
        super().__init__(_check_limit(limit), where)

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


def _check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"max_traces must be a whole number of 0 or more, got {limit!r}")
    return limit


# ----------------------------------------------------------------- memory


@dataclass(frozen=True)
class LargeObject:
    """One of the largest tracked objects alive at a peak."""

    nbytes: int
    summary: str
    alive: bool = False
    """Still alive when the meter stopped."""


class _Entry:
    __slots__ = ("kind", "nbytes", "ref", "site")

    def __init__(self, ref: weakref.ref[Any], nbytes: int, kind: str, site: str | None) -> None:
        self.ref = ref
        self.nbytes = nbytes
        self.kind = kind
        self.site = site


class DeviceMemory:
    """TensorFlow's per-GPU allocator statistics (``tf.config.experimental``), by device name."""

    def devices(self) -> list[str]:
        """The logical GPU devices (``GPU:0``, ...), none without a GPU or before TF's context."""
        if not tensorflow_ready():
            return []
        from tensorflow.python.eager import context

        if getattr(context.context(), "_context_handle", None) is None:
            return []
        import tensorflow as tf

        return [
            device.name.split("device:", 1)[-1] for device in tf.config.list_logical_devices("GPU")
        ]

    def info(self, device: str) -> dict[str, int]:
        """``{"current": bytes, "peak": bytes}`` of ``device``."""
        import tensorflow as tf

        return dict(tf.config.experimental.get_memory_info(device))

    def reset(self, device: str) -> None:
        """Make the device's peak its current use."""
        import tensorflow as tf

        tf.config.experimental.reset_memory_stats(device)


DEVICE_MEMORY = DeviceMemory()
_ACTIVE_METERS: list[ByteMeter] = []
_ACTIVE_METERS_LOCK = threading.Lock()


class ByteMeter:
    """The peak of tracked TensorFlow bytes while active, and of each GPU's memory.

    Tracked bytes are the buffer sizes of the EagerTensors (strings, resource handles and
    variants excluded) and tf.Variables made while the meter runs, counted while they are
    alive. Op outputs are seen at once (an op callback), other tensors and variables (constants,
    ``convert_to_tensor``, variables) at the next collection of the youngest gc generation or
    when the meter stops. Not counted: temporaries inside an op or a tf.function, TensorFlow's
    caches, NumPy arrays (a tensor sharing its buffer with one counts once). Where a GPU is
    present, ``device_peaks`` has each GPU's peak memory above its use at the start, from
    TensorFlow's allocator.
    """

    def __init__(self, limit: int | str | None = None, *, largest: int = LARGEST_AT_PEAK) -> None:
        self.limit = None if limit is None else parse_size(limit)
        self._largest = largest
        self._entries: dict[int, _Entry] = {}
        self._ignored: dict[int, weakref.ref[Any]] = {}
        self._lock = threading.RLock()
        self._current = 0
        self._peak = 0
        self._snapshot: list[tuple[int, str, weakref.ref[Any]]] = []
        self._snapshot_peak = 0
        self._running = False
        self._scanning = False
        self._stack: contextlib.ExitStack | None = None
        self._device_start: dict[str, int] = {}
        self._device_peak: dict[str, int] = {}
        self._device_peaks: dict[str, int] = {}

    @property
    def peak_bytes(self) -> int:
        """The most tracked bytes alive at once."""
        return self._peak

    @property
    def current_bytes(self) -> int:
        """Tracked bytes alive now."""
        return self._current

    @property
    def device_peaks(self) -> dict[str, int]:
        """Per GPU, its peak memory above its use at the start (empty without a GPU)."""
        return dict(self._device_peaks)

    def largest_at_peak(self) -> list[LargeObject]:
        """The largest objects alive at the peak (taken only past the limit, within 1/16)."""
        return [
            LargeObject(nbytes, summary, ref() is not None)
            for nbytes, summary, ref in self._snapshot
        ]

    def start(self) -> ByteMeter:
        """Start measuring; what is alive already is not counted."""
        if self._running:
            raise RuntimeError("this ByteMeter is already running")
        self._running = True
        stack = contextlib.ExitStack()
        self._stack = stack
        if tensorflow_ready():
            self._ignore_young()
            stack.enter_context(op_callback(self._on_op))
        gc.callbacks.append(self._on_collection)
        stack.callback(_remove_callback, self._on_collection)
        self._start_devices()
        return self

    def stop(self) -> None:
        """Stop measuring (the figures stay)."""
        if not self._running:
            return
        try:
            self._scan()
            self._stop_devices()
        finally:
            self._running = False
            stack, self._stack = self._stack, None
            if stack is not None:
                stack.close()
            with self._lock:
                self._entries.clear()  # the weak references die first: no callback fires later
                self._ignored.clear()

    def __enter__(self) -> ByteMeter:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def check(self, where: str = "The block") -> None:
        """Raise ``MemoryLimitError`` when a peak passed the limit (no limit: never)."""
        if self.limit is None:
            return
        text = self.limit_text(where)
        if text is not None:
            peak = max([self._peak, *self._device_peaks.values()])
            raise MemoryLimitError(text, peak, self.limit)

    def limit_text(self, where: str) -> str | None:
        """The report of the peaks over the limit, or None."""
        limit = self.limit
        if limit is None:
            return None
        lines: list[str] = []
        if self._peak > limit:
            lines.append(
                f"{where} peaked at {format_bytes(self._peak)} of tracked TensorFlow objects, "
                f"over its max_bytes of {format_bytes(limit)} ({limit} B)."
            )
            largest = self.largest_at_peak()
            if largest:
                total = sum(item.nbytes for item in largest)
                lines.append(
                    f"  The largest alive at the peak ({format_bytes(total)} of "
                    f"{format_bytes(self._snapshot_peak)}):"
                )
                for number, item in enumerate(largest, start=1):
                    state = "still alive" if item.alive else "freed since"
                    lines.append(f"    {number}. {item.summary} ({state})")
        for device, peak in sorted(self._device_peaks.items()):
            if peak > limit:
                lines.append(
                    f"{where} raised {device}'s memory by {format_bytes(peak)} at its peak, "
                    f"over its max_bytes of {format_bytes(limit)} (TensorFlow's allocator: "
                    "tensors, temporaries, workspaces)."
                )
        return "\n".join(lines) if lines else None

    # ------------------------------------------------------------- counting

    def _ignore_young(self) -> None:
        for obj, kind in TRACKER.classifier.find((0, 1)):
            if kind in (TENSOR, VARIABLE):
                with contextlib.suppress(TypeError):
                    self._ignored[id(obj)] = weakref.ref(obj)

    def _on_op(
        self,
        op_type: Any,
        inputs: Any,
        attrs: Any,
        outputs: Any,
        op_name: Any = None,
        graph: Any = None,
    ) -> None:
        if graph is not None or not outputs or not self._running:
            return
        site: str | None = None
        for output in outputs:
            nbytes = tensor_nbytes(output)
            if nbytes:
                if site is None and self.limit is not None:
                    op = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
                    where = user_code_location()
                    site = f"made by {op}" + (f" at {where}" if where else "")
                self._add(output, TENSOR, nbytes, site)

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start" and self._running:
            with contextlib.suppress(Exception):
                self._scan()

    def _scan(self) -> None:
        if self._scanning or not tensorflow_ready() or TRACKER.in_quiet_thread():
            return
        self._scanning = True  # a collection during the scan calls back here: skip that one
        young = TRACKER.classifier.find((0,))
        try:
            for obj, kind in young:
                if kind == TENSOR:
                    nbytes = tensor_nbytes(obj)
                elif kind == VARIABLE:
                    nbytes = describe(obj, VARIABLE).nbytes or 0
                else:
                    continue
                if nbytes:
                    self._add(obj, kind, nbytes, None)
        finally:
            del young
            self._scanning = False

    def _add(self, obj: object, kind: str, nbytes: int, site: str | None) -> None:
        key = id(obj)
        with self._lock:
            ignored = self._ignored.get(key)
            if ignored is not None:
                if ignored() is obj:
                    return
                del self._ignored[key]
            entry = self._entries.get(key)
            if entry is not None and entry.ref() is obj:
                return
            try:
                ref = weakref.ref(obj, functools.partial(self._dead, key))
            except TypeError:
                return
            self._entries[key] = _Entry(ref, nbytes, kind, site)
            self._current += nbytes
            if self._current > self._peak:
                self._peak = self._current
                self._maybe_snapshot()

    def _dead(self, key: int, ref: weakref.ref[Any]) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.ref is ref:
                del self._entries[key]
                self._current -= entry.nbytes

    def _maybe_snapshot(self) -> None:
        limit = self.limit
        if limit is None or self._peak <= limit:
            return
        if self._snapshot and self._peak < self._snapshot_peak + self._snapshot_peak // 16:
            return
        entries = list(self._entries.values())  # a collection in between may change the dict
        largest = heapq.nlargest(self._largest, entries, key=lambda e: e.nbytes)
        del entries
        snapshot = []
        for entry in largest:
            obj = entry.ref()
            if obj is None:
                continue
            description: Description = describe(obj, entry.kind)
            summary = f"{entry.kind}: {description.summary()}"
            if entry.site:
                summary += f", {entry.site}"
            snapshot.append((entry.nbytes, summary, entry.ref))
            del obj
        self._snapshot = snapshot
        self._snapshot_peak = self._peak

    # ------------------------------------------------------------- devices

    def _start_devices(self) -> None:
        with contextlib.suppress(Exception):
            devices = DEVICE_MEMORY.devices()
            with _ACTIVE_METERS_LOCK:
                for device in devices:
                    info = DEVICE_MEMORY.info(device)
                    for meter in _ACTIVE_METERS:  # an outer meter keeps its peak over our reset
                        meter._note_device_peak(device, info["peak"])
                    self._device_start[device] = info["current"]
                    self._device_peak[device] = info["current"]
                    DEVICE_MEMORY.reset(device)
                _ACTIVE_METERS.append(self)

    def _stop_devices(self) -> None:
        with _ACTIVE_METERS_LOCK:
            if self in _ACTIVE_METERS:
                _ACTIVE_METERS.remove(self)
        with contextlib.suppress(Exception):
            for device in DEVICE_MEMORY.devices():
                peak = DEVICE_MEMORY.info(device)["peak"]
                self._note_device_peak(device, peak)
                start = self._device_start.get(device, 0)
                self._device_peaks[device] = max(0, self._device_peak[device] - start)

    def _note_device_peak(self, device: str, peak: int) -> None:
        self._device_peak[device] = max(self._device_peak.get(device, 0), int(peak))


def _remove_callback(callback: Callable[[str, dict[str, int]], None]) -> None:
    for index in range(len(gc.callbacks) - 1, -1, -1):
        if gc.callbacks[index] == callback:
            del gc.callbacks[index]
            return


class ByteLimit(_LimitBlock[ByteMeter, int]):
    """``max_bytes``'s context manager and decorator."""

    def __init__(self, limit: int | str, where: str | None) -> None:
        super().__init__(parse_size(limit), where)

    @property
    def meter(self) -> ByteMeter:
        """The meter of the latest ``with`` block."""
        return self._started()

    def _begin(self) -> ByteMeter:
        return ByteMeter(self._limit).start()

    def _end(self, probe: ByteMeter, *, check: bool) -> None:
        probe.stop()
        if check:
            probe.check(self._where or "The block")


def max_bytes(limit: int | str, *, where: str | None = None) -> ByteLimit:
    """Fail when the block's (or decorated call's) peak tracked bytes pass ``limit``.

    ``limit`` is bytes or a size such as ``"64 MiB"``; with a GPU, each GPU's peak memory above
    its use at the start must stay under it too. ``with max_bytes("64 MiB") as meter:`` or
    ``@max_bytes("64 MiB")``. Raises ``MemoryLimitError``; a bad size raises ``ValueError``.
    """
    return ByteLimit(limit, where)


# ----------------------------------------------------------------- all at once


class EagerChecks:
    """Retracing, memory and leak checks around a block, a function or a unittest method.

    ``with eager_checks(max_traces=1):`` or ``@eager_checks(max_bytes="64 MiB")``. Each check
    runs only when the block ends without an exception; several failures raise one
    ``EagerChecksError`` that lists them all. Each decorated call gets a fresh set of checks.
    ``counter`` (a ``TraceCounter``, with ``max_traces``) and ``meter`` (a ``ByteMeter``, with
    ``max_bytes`` or ``measure_bytes``) keep what was measured.
    """

    def __init__(
        self,
        *,
        max_traces: int | None = None,
        max_bytes: int | str | None = None,
        leaks: bool = True,
        allow: AllowFilter | None = None,
        measure_bytes: bool = False,
        where: str | None = None,
        session: EagerSession | None = None,
    ) -> None:
        self.max_traces = None if max_traces is None else _check_limit(max_traces)
        self.max_bytes = None if max_bytes is None else parse_size(max_bytes)
        self.leaks = bool(leaks)
        check_allow_filter(allow)
        self._allow = allow
        self._measure_bytes = measure_bytes or self.max_bytes is not None
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
                self._owner = stack.enter_context(_owning_session(self._session))
                self._checkpoint = self._owner.checkpoint()
            if self.max_traces is not None:
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
        """What was measured, for a JSON report: peak bytes, GPU peaks, traces per function."""
        result: dict[str, Any] = {}
        if self.meter is not None:
            result["peak_bytes"] = self.meter.peak_bytes
            result["device_peak_bytes"] = self.meter.device_peaks
        if self.counter is not None:
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
        where = self._where or _callable_name(func)

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
