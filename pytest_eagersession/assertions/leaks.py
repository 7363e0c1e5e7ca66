"""Leaks since a checkpoint: what a piece of code made that is still alive, and who holds it.

The holders are searched from the checking code's callers: a check made in the middle of a
test names the test's own locals. ``assert_no_growth`` uses the same survivors and records.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING

from pytest_eagersession.assertions.errors import LeakAssertionError
from pytest_eagersession.assertions.scope import active_session, preserved_gc_state
from pytest_eagersession.core.survivors import AllowFilter, Survivor, check_allow_filter
from pytest_eagersession.heap.frames import stack
from pytest_eagersession.heap.holders import PACKAGE_DIR
from pytest_eagersession.reports.explain import DEFAULT_BUDGET_S, Explanation, explain_all
from pytest_eagersession.reports.report import LeakRecord, build_records, render

if TYPE_CHECKING:
    from pytest_eagersession.core.session import EagerSession


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
        session = active_session()
        if session is None:
            raise RuntimeError("assert_no_leaks: no eager session is active; pass one")
    with preserved_gc_state():
        leaks = leaks_since(session, since, None, allow)
        if not leaks:
            return
        records = leak_records(leaks, "checkpoint", explain_limit=explain_limit)
        del leaks
    text = render(
        where or f"The code run since checkpoint {since}",
        "checkpoint",
        records,
        strategy=session.resource_cleanup_strategy.value,
    )
    raise LeakAssertionError(text, records)


def leaks_since(
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
    ours = True
    for frame in stack(sys._getframe(1)):
        filename = frame.f_code.co_filename
        ours = ours and (filename.startswith(PACKAGE_DIR) or filename.endswith("/contextlib.py"))
        if not ours:
            frames.append(frame)
    return frames


def leak_records(
    survivors: Sequence[Survivor],
    scope: str,
    *,
    explain_limit: int | None,
    explained: dict[int, Explanation] | None = None,
) -> list[LeakRecord]:
    """``report.build_records``'s records, with holders found from the checking code's callers.

    ``explained`` has the explanations of a walk made already, by the objects' ids.
    """

    def holders(objects: Sequence[object]) -> Sequence[Explanation | None]:
        if explained is not None:
            return [explained.get(id(obj)) for obj in objects]
        return _explain_here(objects)

    return build_records(
        survivors, scope, explain_limit=explain_limit, chain_depth=0, explainer=holders
    )


def explained_together(
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
