"""Growth: a function that leaves new TensorFlow objects (or registered functions) each run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pytest_eagersession import _tf
from pytest_eagersession._tf.tracing import registered_function_names
from pytest_eagersession.assertions.errors import GrowthError
from pytest_eagersession.assertions.findings import RunGrowth
from pytest_eagersession.assertions.leaks import explained_together, leak_records, leaks_since
from pytest_eagersession.assertions.scope import callable_name, owning_session, preserved_gc_state
from pytest_eagersession.assertions.traces import TraceCounter
from pytest_eagersession.base.sizes import format_bytes
from pytest_eagersession.core.kinds import tensorflow_ready
from pytest_eagersession.core.survivors import AllowFilter, Survivor

if TYPE_CHECKING:
    from pytest_eagersession.core.session import EagerSession

#: Runs before the measured ones, so that caches and lazy state are made first.
DEFAULT_WARMUP = 2
#: Measured runs of ``assert_no_growth``; a cache keeping the last k results passes if k < runs-1.
DEFAULT_RUNS = 5
#: Objects listed per run in a growth report.
LISTED_PER_RUN = 5


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
    result). ``session`` owns what the runs make (activated for the check); without one, the
    active session, or a temporary one. Returns what each run left, to inspect; raises
    ``GrowthError``.
    """
    if not callable(fn):
        raise TypeError(f"assert_no_growth takes a callable, not {type(fn).__name__}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a whole number of 0 or more, got {warmup!r}")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ValueError(f"runs must be a whole number of 2 or more, got {runs!r}")
    _tf.tensorflow()
    with preserved_gc_state(), owning_session(session) as owner, TraceCounter() as counter:
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
        found = leaks_since(owner, marks[0], marks[-1], allow)
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
        explained = explained_together(buckets, explain_limit if failing else 0)
        results = []
        for run in range(runs):
            records = leak_records(buckets[run], "run", explain_limit=None, explained=explained)
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


def _registered_functions() -> frozenset[str]:
    """Names of the functions registered with TensorFlow's eager context."""
    if not tensorflow_ready():
        return frozenset()
    return registered_function_names()


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
        f"{callable_name(fn)} grows: {grown} of its {len(runs)} runs after {warmup} warm-up "
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
