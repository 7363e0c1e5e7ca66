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
from collections.abc import Collection, Iterable, Iterator, Sequence
from functools import partial
from typing import Any

from pytest_eagersession.heap.listing import WEAKREF_OFFSET
from pytest_eagersession.heap.walks import View, referents_of

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

    The targets and seeds themselves are held through their weak references alone, dereferenced
    one at a time, and inside the one call that reads the counts: they may be another thread's
    fresh objects, which must not show a list of ours among their referrers. What the walk
    reaches from them, one of them holds too.
    """
    entries, members, index, wanted = _closure(targets, seeds, new, limit)
    if not wanted:
        return set()
    reachable = _reachable(entries, members, index)
    return {key for key in wanted if not reachable[index[key]]}


def _closure(
    targets: Sequence[weakref.ref[Any]],
    seeds: Sequence[weakref.ref[Any]],
    new: Collection[int] | None,
    limit: int,
) -> tuple[list[weakref.ref[Any]], list[object], dict[int, int], list[int]]:
    """The set: the weak references of its entries (targets and seeds, each once), then the
    objects the walk reached from them; their index by id (the entries first, then the
    members after a place left for a probe); the ids of the targets in it (none past
    ``limit``). A function of its own, so that no local of the walk outlives it."""
    entries: list[weakref.ref[Any]] = []
    index: dict[int, int] = {}
    wanted: list[int] = []
    frontier: list[Any] = []
    for position, ref in enumerate(itertools.chain(targets, seeds)):
        entry = ref()
        key = id(entry)
        if entry is None or key in index or not gc.is_tracked(entry) or isinstance(entry, _NEVER):
            continue
        index[key] = len(entries)
        entries.append(ref)
        if position < len(targets):
            wanted.append(key)
        frontier.extend(referents_of(entry, View.PROOF))
    entry = None
    members: list[object] = []
    offset = len(entries) + 1  # the entries' probe comes between
    while frontier:
        grown = len(members)
        for obj in frontier:
            key = id(obj)
            if (
                key not in index
                and gc.is_tracked(obj)
                and not isinstance(obj, _NEVER)
                and (new is None or key in new or not WEAKREF_OFFSET(type(obj)))
            ):
                index[key] = offset + len(members)
                members.append(obj)
        if len(entries) + len(members) > limit:
            return [], [], {}, []
        frontier = [child for obj in members[grown:] for child in referents_of(obj, View.PROOF)]
    return entries, members, index, wanted


def _reachable(
    entries: list[weakref.ref[Any]], members: list[object], index: dict[int, int]
) -> list[bool]:
    """Trial deletion over the set (``members`` is emptied here): whether each is reachable from
    outside, by the positions of ``index``.

    Each half gets a probe that nothing else holds, read the same way as its objects: its count
    is the references of our own reading (an entry's probe is held by one local besides).
    An entry that died since the walk reads as ``None``: reachable, never proven.
    """
    probe: set[int] = set()  # takes a weak reference; held by this local alone
    refs = [*entries, weakref.ref(probe)]
    members.append(object())
    size = len(refs) + len(members)
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:  # one call into C: no other thread runs between the counts and the references
        snapshot: list[Any] = list(
            itertools.chain(
                map(sys.getrefcount, map(weakref.ref.__call__, refs)),
                map(sys.getrefcount, members),
                _edges(map(weakref.ref.__call__, refs)),
                _edges(members),
            )
        )
    finally:
        members.clear()
        if paused:
            gc.enable()
    del probe
    counts: list[int] = snapshot[:size]
    edges: list[tuple[int, ...]] = snapshot[size:]
    ours_weakly = counts[len(refs) - 1] - 1
    ours = counts[-1]
    held = [count - ours_weakly for count in counts[: len(refs)]]
    held += [count - ours for count in counts[len(refs) :]]
    held[len(refs) - 1] = 0  # the entries' probe: its local is no holder of the set
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


def _edges(objects: Iterable[object]) -> Iterator[tuple[int, ...]]:
    """A pipeline of the ids each of ``objects`` refers to, as tuples made in C."""
    return map(tuple, map(partial(map, id), map(gc.get_referents, objects)))
