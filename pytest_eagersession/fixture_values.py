"""Survivors that a wider-scoped fixture's value holds belong to that fixture's scope.

A module-scoped model built lazily during the first test that calls it makes its variables in
that test's session, but the fixture cache, not the test, keeps them: they are handed over to
the module's session, which reports them if they outlive the module.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

from pytest_eagersession import heap
from pytest_eagersession.kinds import RESOURCE_HANDLE, TENSOR
from pytest_eagersession.session import EagerSession
from pytest_eagersession.survivors import Survivor

#: How many objects the search from the fixture values may visit.
REACH_LIMIT = 200_000

_OPAQUE = (types.ModuleType, type, types.CodeType, types.BuiltinFunctionType)


def reachable_ids(roots: Iterable[object], limit: int = REACH_LIMIT) -> set[int]:
    """Ids of the objects reachable from ``roots``: what a fixture value owns.

    The walk goes through attributes, containers, bound methods, partials, and functions'
    closures and defaults (a factory that memoises what it makes, a model's ``train_function``
    around its ``tf.function`` s), and into the frames of a live thread among the roots (a
    monitor a fixture started). It never goes through modules, classes, code, or a function's
    or frame's globals: from there everything would be reachable.
    """
    namespaces = {id(module.__dict__) for module in list(sys.modules.values()) if module}
    roots = list(roots)
    roots.extend(_thread_frames(roots))
    return heap.reachable(roots, limit=limit, opaque=partial(_opaque, namespaces=namespaces))


def _opaque(obj: object, *, namespaces: set[int]) -> bool:
    return obj is None or isinstance(obj, _OPAQUE) or id(obj) in namespaces


def _thread_frames(roots: list[object]) -> list[object]:
    """The running frames of the live threads among ``roots`` (not the caller's own)."""
    threads = [root for root in roots if isinstance(root, threading.Thread) and root.is_alive()]
    if not threads:
        return []
    current = sys._current_frames()
    me = threading.get_ident()
    frames: list[object] = []
    for thread in threads:
        frame = current.get(thread.ident) if thread.ident not in (None, me) else None
        if frame is not None:
            frames.append(frame)
    return frames


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
                session.ownership.add(obj, _kind_of(survivor))
            else:
                kept.append(survivor)
            del obj
        remaining = kept
    return tuple(remaining)


def _kind_of(survivor: Survivor) -> str:
    kind = survivor.kind
    return TENSOR if kind == RESOURCE_HANDLE else kind
