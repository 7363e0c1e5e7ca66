"""Survivors that a wider-scoped fixture's value holds belong to that fixture's scope.

A module-scoped model built lazily during the first test that calls it makes its variables in
that test's session, but the fixture cache, not the test, keeps them: they are handed over to
the module's session, which reports them if they outlive the module.
"""

from __future__ import annotations

import gc
import types
from collections.abc import Iterable, Sequence
from typing import Any

from pytest_eagersession.session import EagerSession
from pytest_eagersession.survivors import Survivor

#: How many objects the search from the fixture values may visit.
REACH_LIMIT = 200_000

_OPAQUE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.FrameType)


def reachable_ids(roots: Iterable[object], limit: int = REACH_LIMIT) -> set[int]:
    """Ids of the objects reachable from ``roots`` (not through modules, classes or functions)."""
    seen: set[int] = set()
    frontier = [root for root in roots if not isinstance(root, _OPAQUE)]
    while frontier and len(seen) < limit:
        fresh = []
        for obj in frontier:
            key = id(obj)
            if key not in seen:
                seen.add(key)
                fresh.append(obj)
        frontier = [child for child in gc.get_referents(*fresh) if not isinstance(child, _OPAQUE)]
        del fresh
    return seen


def adopt_held(
    survivors: Sequence[Survivor], scopes: Sequence[tuple[EagerSession, list[object]]]
) -> tuple[Survivor, ...]:
    """Give each survivor a fixture value reaches to that value's session; return the rest."""
    remaining = list(survivors)
    for session, values in scopes:
        if not remaining or session.closed or not values:
            continue
        reached = reachable_ids(values)
        kept = []
        for survivor in remaining:
            obj: Any = survivor.ref() if survivor.ref is not None else None
            if obj is not None and id(obj) in reached:
                session._ownership.add(obj, _kind_of(survivor))
            else:
                kept.append(survivor)
            del obj
        remaining = kept
    return tuple(remaining)


def _kind_of(survivor: Survivor) -> str:
    kind = survivor.kind
    return "tensor" if kind == "resource handle" else kind
