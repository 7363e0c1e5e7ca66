"""Proving that objects are cyclic garbage without collecting the whole heap.

The collector decides what is garbage by trial deletion: from each object's reference count it
subtracts the references that other objects of the collected set hold (what ``tp_traverse``
reports); an object left with references held from outside the set is reachable, and so is
everything it leads to; the rest is garbage. ``unreachable`` runs the same test on a small set
of our choosing: the objects to judge and what they lead to, forward, up to a limit.

It is sound on any set: a reference from outside the set (another object, a running frame,
native code, a cache of TensorFlow's) counts as one from a root, so the worst a set that
misses part of a cycle can do is leave it unproven, and the caller collects the whole heap as
before. The counts and the references are read in one call into C, with the collector paused,
so that no other thread moves a reference between the two readings. The walk that builds the
set runs forward only, where no other thread's half-built tuple can be met (nothing refers to
it yet), and the set is emptied before the verdict is returned.

Why a set must be chosen: an object alive when other code collected or listed the heap is
frozen with the rest (``heap.Boundary``), and a cycle of such objects that dies afterwards is
beyond the young collection. Its members are found again from ``heap.BOUNDARY.frozen_new()``:
weak references to what was new at each of those calls.
"""

from __future__ import annotations

import gc
import itertools
import sys
import types
import weakref
from collections.abc import Collection, Sequence
from functools import partial
from typing import Any

from pytest_eagersession.heap import WEAKREF_OFFSET

#: The most objects the set may hold before the proof gives up (about 2 ms per thousand).
MAX_SET = 20_000

#: What never joins the set: classes, modules and code are reachable from their modules, and
#: would lead the walk everywhere.
_NEVER = (type, types.ModuleType, types.CodeType)


def unreachable(
    targets: Sequence[weakref.ref[Any]],
    seeds: Sequence[weakref.ref[Any]] = (),
    *,
    new: Collection[int] | None = None,
    limit: int = MAX_SET,
) -> set[int]:
    """Ids of the live referents of ``targets`` that are cyclic garbage, proven by trial deletion.

    The set judged is what the live referents of ``targets`` and ``seeds`` lead to, forward.
    Given ``new`` (ids), only through objects that are new: the targets, the seeds, those ids,
    and the objects that take no weak reference (whose age the caller cannot tell); an older
    object that takes one stays out, so that the walk does not spread into older state, and
    what it holds counts as held from outside. A target the proof cannot show dead (held from
    outside the set, or beyond ``limit``, which leaves every target unproven) is not in the
    result; nothing is ever proven by mistake.
    """
    members, index, wanted = _closure(targets, seeds, new, limit)
    if not wanted:
        return set()
    reachable = _reachable(members, index)
    return {key for key in wanted if not reachable[index[key]]}


def _closure(
    targets: Sequence[weakref.ref[Any]],
    seeds: Sequence[weakref.ref[Any]],
    new: Collection[int] | None,
    limit: int,
) -> tuple[list[object], dict[int, int], list[int]]:
    """The set, each member once; its index by id; the ids of the targets in it (none past
    ``limit``). A function of its own, so that no local of the walk outlives it."""
    members: list[object] = []
    index: dict[int, int] = {}
    frontier: list[Any] = [ref() for ref in itertools.chain(targets, seeds)]
    wanted = [id(obj) for obj in frontier[: len(targets)] if obj is not None]
    entries = {id(obj) for obj in frontier if obj is not None}
    while frontier:
        grown = len(members)
        for obj in frontier:
            key = id(obj)
            if (
                key not in index
                and gc.is_tracked(obj)
                and not isinstance(obj, _NEVER)
                and (new is None or key in entries or key in new or not WEAKREF_OFFSET(type(obj)))
            ):
                index[key] = len(members)
                members.append(obj)
        if len(members) > limit:
            return [], {}, []
        frontier = _referents(members[grown:])
    return members, index, [key for key in wanted if key in index]


def _referents(objects: Sequence[object]) -> list[object]:
    """What ``objects`` refer to, less the globals and builtins of functions and frames."""
    found: list[object] = []
    for obj in objects:
        children = gc.get_referents(obj)
        if isinstance(obj, types.FunctionType):
            skip = (id(obj.__globals__), id(getattr(obj, "__builtins__", None)))
        elif isinstance(obj, types.FrameType):
            skip = (id(obj.f_globals), id(obj.f_builtins))
        else:
            found.extend(children)
            continue
        found.extend(child for child in children if id(child) not in skip)
    return found


def _reachable(members: list[object], index: dict[int, int]) -> list[bool]:
    """Trial deletion over ``members`` (emptied here): whether each is reachable from outside."""
    members.append(object())  # a probe that only the list holds: the count of our own references
    size = len(members)
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:  # one call into C: no other thread runs between the counts and the references
        snapshot: list[Any] = list(
            itertools.chain(
                map(sys.getrefcount, members),
                map(tuple, map(partial(map, id), map(gc.get_referents, members))),
            )
        )
    finally:
        members.clear()
        if paused:
            gc.enable()
    counts: list[int] = snapshot[:size]
    edges: list[tuple[int, ...]] = snapshot[size : 2 * size - 1]
    ours = counts[-1]
    held = [count - ours for count in counts[:-1]]
    for children in edges:
        for child in children:
            position = index.get(child)
            if position is not None:
                held[position] -= 1
    reachable = [count > 0 for count in held]
    stack = [position for position, outside in enumerate(reachable) if outside]
    while stack:
        for child in edges[stack.pop()]:
            position = index.get(child)
            if position is not None and not reachable[position]:
                reachable[position] = True
                stack.append(position)
    return reachable
