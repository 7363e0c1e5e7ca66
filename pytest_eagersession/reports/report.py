"""Leak reports: survivors turned into text records, rendered for the terminal and for JSON."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_eagersession.base.sizes import format_bytes
from pytest_eagersession.core.kinds import (
    FUNCTION,
    ITERATOR,
    RESOURCE,
    RESOURCE_HANDLE,
    TABLE,
    TENSOR,
    VARIABLE,
)
from pytest_eagersession.core.survivors import Survivor, destroy_resources
from pytest_eagersession.heap.holders import Root
from pytest_eagersession.reports.explain import (
    DEFAULT_BUDGET_S,
    MORE_TIME,
    Explanation,
    explain_all,
)
from pytest_eagersession.reports.grouping import group_records, root_of, shorten, slot_of
from pytest_eagersession.reports.routes import KnownRoutes

# Objects a user holds by name come first; tensors, which they often hold through them, last.
KIND_ORDER = {
    VARIABLE: 0,
    ITERATOR: 1,
    TABLE: 2,
    RESOURCE: 3,
    FUNCTION: 4,
    RESOURCE_HANDLE: 5,
    TENSOR: 6,
}


# Kinds whose TensorFlow resource the session can release while the Python object lives on.
_RESOURCE_OWNERS = frozenset({VARIABLE, ITERATOR, TABLE, RESOURCE})


@dataclass(frozen=True)
class Advice:
    """What a report tells its reader to do, in the words of the caller's front-end.

    The defaults name the library's parameters; the pytest plugin passes its options instead.
    """

    allow: str = "allow=... or session.detach(obj)"
    """How to accept an expected survivor."""
    creation: str = "the session's track_creation option"
    """How to record the op and line that made each object."""
    untraced: str = "explain_limit"
    """What limits how many leaks are traced to their holders."""
    more_time: str | None = MORE_TIME
    """How to give the search for holders more time; None: say nothing."""


@dataclass(frozen=True)
class LeakRecord:
    """One leaked object as text: what it is, what made it, the scope it outlived, who holds it."""

    scope: str
    type: str
    kind: str
    dtype: str | None
    shape: str | None
    nbytes: int | None
    device: str | None
    op: str | None
    created_at: str | None
    retained_by: str | None
    summary: str
    allowed: bool = False
    destroyed: bool = False
    """Its TensorFlow resource was released at the end of the scope: using it now fails."""
    root: str | None = None
    """What the holder's chain starts at (a module's global, a library's cache); None untraced."""
    slot: str | None = None
    """The index or key it sits at in its last container (``[14]``, ``['a']``), if it does."""
    holder_kind: str | None = None
    """What kind of holder the root is (the test module's state, a library's cache, ...)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON report's fields for this leak."""
        return asdict(self)


def build_records(
    survivors: Sequence[Survivor],
    scope: str,
    *,
    explain_limit: int | None,
    chain_depth: int,
    chain_budget_s: float = DEFAULT_BUDGET_S,
    graphs_dir: str | None = None,
    graph_prefix: str = "leak",
    graph_errors: list[str] | None = None,
    explainer: Callable[[Sequence[object]], Sequence[Explanation | None]] | None = None,
    framework: Sequence[Root] = (),
    destroy: bool = False,
    advice: Advice = Advice(),
    routes: KnownRoutes | None = None,
) -> list[LeakRecord]:
    """Records for ``survivors``, the first ``explain_limit`` (None: all) with their holders.

    The holders of all of them are found in one walk (``explain.explain_all``, or
    ``explainer``), from the modules, the threads and ``framework``'s roots. With ``destroy``,
    a resource owner whose holder is certainly the user's own module state is cut off its
    resource; one held from anywhere else (TensorFlow's state, a running frame, nothing found)
    may still be in use by later code, and is left intact. A holder search that runs out of time
    says ``advice.more_time``.

    ``routes``: the holders this run explained before, looked in before the walk.

    A graph that cannot be written (an unwritable folder, objgraph missing) costs the graphs
    only: the reason goes to ``graph_errors`` once, and no more graphs are tried.
    """
    # Ties go by the summary: the order the tracker saw objects in depends on when it scanned.
    ordered = sorted(
        survivors,
        key=lambda s: (KIND_ORDER.get(s.kind, 9), -(s.description.nbytes or 0), s.summary()),
    )
    traced = [
        (index, obj)
        for index, survivor in enumerate(ordered[:explain_limit])
        if survivor.ref is not None and (obj := survivor.ref()) is not None
    ]
    explanations: dict[int, Explanation | None] = {}
    if traced:
        objects = [obj for _, obj in traced]
        found = (
            explainer(objects)
            if explainer is not None
            else explain_all(
                objects,
                budget_s=chain_budget_s,
                framework=framework,
                more_time=advice.more_time,
                routes=routes,
            )
        )
        explanations = {
            index: explanation for (index, _), explanation in zip(traced, found, strict=True)
        }
        del objects, found
    graphs = dict(traced) if graphs_dir is not None else {}
    del traced
    records = []
    for index, survivor in enumerate(ordered):
        explanation = explanations.get(index)
        chain = None if explanation is None else explanation.chain
        destroyed = False
        if explanation is not None:
            if destroy and explanation.certain and survivor.kind in _RESOURCE_OWNERS:
                destroyed = destroy_resources([survivor]) == 1
            if graphs_dir is not None and index in graphs:
                try:
                    write_graph(
                        graphs[index], graphs_dir, f"{graph_prefix}-{index + 1}", chain_depth
                    )
                except Exception as error:
                    graphs_dir = None
                    if graph_errors is not None:
                        graph_errors.append(_graph_error_text(error))
        retained_by = None if explanation is None else explanation.text()
        if chain is None and survivor.retention is not None:  # the walk cannot see TensorFlow's
            retained_by = f"kept by {survivor.retention}"
        description = survivor.description
        records.append(
            LeakRecord(
                scope=scope,
                type=description.type,
                kind=survivor.kind,
                dtype=description.dtype,
                shape=description.shape,
                nbytes=description.nbytes,
                device=description.device,
                op=survivor.op,
                created_at=survivor.created_at,
                retained_by=retained_by,
                summary=survivor.summary(),
                allowed=survivor.allowed,
                destroyed=destroyed,
                root=None if chain is None else root_of(chain),
                slot=None if chain is None else slot_of(chain),
                holder_kind=None if explanation is None else explanation.holder,
            )
        )
    graphs.clear()
    # Items of one container in their order there (the walk found them in any order).
    return sorted(records, key=_report_order)


def _report_order(record: LeakRecord) -> tuple[int, int, str, bool, str, int, str]:
    slot = record.slot or ""
    index = int(slot[1:-1]) if slot[1:-1].isdigit() else -1
    return (
        KIND_ORDER.get(record.kind, 9),
        -(record.nbytes or 0),
        record.summary,
        record.retained_by is None,  # the traced first, as they were chosen
        record.root or "",
        index,
        slot,
    )


def render(
    where: str,
    scope: str,
    records: Sequence[LeakRecord],
    *,
    strategy: str,
    advice: Advice = Advice(),
    full_chains: bool = False,
) -> str:
    """The text a failing (or warned) test shows, ending with ``advice``.

    Leaks held the same way but for their slot in one container are one entry
    (``grouping.group_records``); a chain longer than ``grouping.MOST_LINKS_SHOWN`` links shows
    its root and its last links, unless ``full_chains``.
    """
    total = sum(record.nbytes or 0 for record in records)
    noun = "object" if len(records) == 1 else "objects"
    lines = [
        f"{where} leaked {len(records)} TensorFlow {noun} ({format_bytes(total)}) "
        f"that outlived its {scope} scope (cleanup strategy {strategy}):"
    ]
    groups = group_records(records)
    told: set[str | None] = set()
    for number, group in enumerate(groups, start=1):
        lines.append(f"  {number}. {group.headline()}")
        held_by = group.held_by()
        if held_by is not None:
            lines.append(f"     {held_by if full_chains else shorten(held_by)}")
        if group.first.holder_kind is not None and group.first.root not in told:
            told.add(group.first.root)  # once a root: the entries after it name it again
            lines.append(f"     holder: {group.first.holder_kind}")
    unexplained = sum(1 for record in records if record.retained_by is None)
    if unexplained and any(record.retained_by is not None for record in records):
        lines.append(f"  ({unexplained} more not traced: {advice.untraced} limits how many are)")
    destroyed = [number for number, g in enumerate(groups, start=1) if g.first.destroyed]
    if destroyed:
        holders = sorted(
            {g.first.kind for g in groups if g.first.destroyed}, key=lambda kind: KIND_ORDER[kind]
        )
        owners = [n for n, g in enumerate(groups, start=1) if g.first.kind in _RESOURCE_OWNERS]
        if destroyed == owners:
            lines.append(
                f"The {', '.join(holders)} objects were cut off their TensorFlow resources at "
                "the end of the scope: using them now fails."
            )
        else:
            kept = [number for number in owners if number not in destroyed]
            lines.append(
                f"Cut off their TensorFlow resources at the end of the scope (using them now "
                f"fails): {_numbers(destroyed)}. Left intact, since their holder is not "
                f"certainly this scope's code: {_numbers(kept)}."
            )
    lines.append(f"Expected? Allow it with {advice.allow}; creation sites: {advice.creation}.")
    return "\n".join(lines)


def _numbers(numbers: Sequence[int]) -> str:
    return ", ".join(f"{number}." for number in numbers)


def write_json(
    path: str, tests: Iterable[dict[str, Any]], *, holders: Sequence[dict[str, Any]] = ()
) -> None:
    """Write the run's JSON report (each test, then each holder once), creating the folder.

    One line per test and per holder: ``grep`` finds a test's entry, and each line is encoded
    by the standard library's C encoder (an indented report is encoded in Python, three times
    slower: 29 us a test).
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tests_array, holders_array = _one_a_line(tests), _one_a_line(holders)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f'{{\n  "tests": {tests_array},\n  "holders": {holders_array}\n}}\n')


def _one_a_line(entries: Iterable[dict[str, Any]]) -> str:
    """A JSON array, one entry a line (inside the report's object)."""
    lines = [f"    {json.dumps(entry)}" for entry in entries]
    return "[\n" + ",\n".join(lines) + "\n  ]" if lines else "[]"


def write_graph(obj: object, folder: str, name: str, depth: int) -> list[str]:
    """A picture of who refers to ``obj``: DOT always, PNG where Graphviz's ``dot`` exists."""
    import objgraph

    os.makedirs(folder, exist_ok=True)
    written = []
    dot_path = os.path.join(folder, f"{name}.dot")
    objgraph.show_backrefs(
        [obj], max_depth=min(depth, 6), filename=dot_path, filter=_graph_filter, refcounts=True
    )
    written.append(dot_path)
    if shutil.which("dot"):
        png_path = os.path.join(folder, f"{name}.png")
        objgraph.show_backrefs(
            [obj], max_depth=min(depth, 6), filename=png_path, filter=_graph_filter
        )
        written.append(png_path)
    return written


def _graph_error_text(error: Exception) -> str:
    if isinstance(error, ImportError) and error.name == "objgraph":
        return "objgraph is not installed (pip install objgraph)"
    return f"{type(error).__name__}: {error}"


def _graph_filter(obj: object) -> bool:
    import types

    return not isinstance(obj, types.FrameType)
