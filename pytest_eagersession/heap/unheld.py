"""Proving, backwards, that no root reaches an object: cheaper than walking the whole heap.

An object that nothing reachable holds (one a reference cycle or native code keeps) is what
makes the forward walk (``holders``) go everywhere before it can say so. Going the other way,
the objects that refer to it, then those that refer to them, and so on, usually close in a few
steps on a set no root is part of: that proves it. Each step is one pass of the collector over
the heap for all the objects still being proved (``heap.referrers``).

The proof gives up, and leaves the object to the walk, on anything it cannot follow or bound:
a tuple among the referrers (it may be half built by another thread, so it is never held), a
root, a module, a running frame that is a root, or a set that grows past a limit. It never
says "unheld" of an object the walk would reach.

The locals of running frames are not the collector's to show (from Python 3.11): they are read
through ``f_locals``, and a frame whose locals hold part of the set joins it; a root's frame
ends the proof.
"""

from __future__ import annotations

import gc
import sys
import time
import types
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_eagersession.heap.frames import drop_snapshots, running_locals, stack
from pytest_eagersession.heap.listing import family, only_instances, referrers, whole_heap_visible

#: Objects a proof may gather, per object proved, before it gives up.
MAX_SET = 256
#: Passes over the heap a proof may make.
MAX_STEPS = 8


@dataclass
class _Proof:
    """One object's proof in progress: what refers to it, transitively, so far."""

    members: set[int]
    frontier: dict[int, Any] = field(default_factory=dict)


def unheld(
    wanted: Sequence[object],
    *,
    roots: Collection[int],
    ours: Collection[int] = (),
    package_dir: str = "",
    deadline: float = float("inf"),
    also: type | None = None,
    instances: list[object] | None = None,
) -> set[int]:
    """Ids of the objects of ``wanted`` that no root reaches, proved backwards.

    ``roots``: the ids of the roots (modules, their namespaces, root frames, the framework's
    objects). ``ours``: ids of the caller's own containers, never followed. Frames running code
    under ``package_dir`` are the caller's own too. Past ``deadline``, no more steps.

    ``also``: a class defined in Python whose instances the first pass over the heap collects
    into ``instances`` too (they refer to their class), for what the caller would otherwise
    spend another pass on.
    """
    if not wanted or not whole_heap_visible():
        return set()
    proofs = {id(obj): _Proof({id(obj)}, {id(obj): obj}) for obj in wanted}
    frames: list[types.FrameType] = []
    read: list[types.FrameType] = []
    own = {*ours, id(frames), id(read)}
    try:
        locals_ids = _running_frames(package_dir, frames, read)
        # a snapshot of a running frame's locals refers to what they do: the frame stands for it
        own.update(id(frame.f_locals) for frame in read)
        proved: set[int] = set()
        for steps in range(MAX_STEPS + 1):
            for key, proof in list(proofs.items()):
                # the running frames' locals, which the collector does not show
                holding = [
                    frame
                    for frame, ids in zip(frames, locals_ids, strict=True)
                    if id(frame) not in proof.members and not ids.isdisjoint(proof.members)
                ]
                if any(id(frame) in roots for frame in holding):
                    del proofs[key]
                    continue
                proof.frontier.update((id(frame), frame) for frame in holding)
                proof.members.update(map(id, holding))
                del holding
                if not proof.frontier:  # nothing more refers to the set: no root reaches it
                    proved.add(key)
                    del proofs[key]
            if not proofs or steps == MAX_STEPS or time.perf_counter() > deadline:
                break
            extra = family(also) if also is not None and steps == 0 else ()
            found = _step(proofs, roots, own, package_dir, extra)
            if extra and instances is not None:
                instances.extend(only_instances(found, extra[0]))
            found.clear()
        return proved
    finally:
        proofs.clear()
        frames.clear()
        drop_snapshots(read)


def _step(
    proofs: dict[int, _Proof],
    roots: Collection[int],
    ours: Collection[int],
    package_dir: str,
    extra: tuple[type, ...] = (),
) -> list[object]:
    """One pass over the heap: each proof's frontier is replaced by its new referrers, which
    come back, with those of the ``extra`` classes."""
    owners: dict[int, list[int]] = {}
    for key, proof in proofs.items():
        for member in proof.frontier:
            owners.setdefault(member, []).append(key)
    # one tuple carries the frontier, and ``referrers`` leaves it out
    frontier = (
        *{key: obj for proof in proofs.values() for key, obj in proof.frontier.items()}.values(),
        *extra,
    )
    for proof in proofs.values():
        proof.frontier = {}
    found, tuples = referrers(frontier)
    del frontier
    failed: set[int] = set()
    for items in tuples:
        for member in items.intersection(owners):
            failed.update(owners[member])
    try:
        for referrer in found:
            key = id(referrer)
            if key in ours or _ours(referrer, package_dir):
                continue
            targets = {
                owner
                for child in map(id, gc.get_referents(referrer))
                for owner in owners.get(child, ())
            }
            if key in roots or isinstance(referrer, types.ModuleType):
                failed |= targets
                continue
            for owner in targets - failed:
                proof = proofs[owner]
                if key not in proof.members:
                    proof.members.add(key)
                    proof.frontier[key] = referrer
    except BaseException:
        found.clear()
        raise
    for key in failed:
        proofs.pop(key, None)
    for key, proof in list(proofs.items()):
        if len(proof.members) > MAX_SET:
            del proofs[key]
    return found


def _ours(obj: object, package_dir: str) -> bool:
    return (
        bool(package_dir)
        and isinstance(obj, types.FrameType)
        and obj.f_code.co_filename.startswith(package_dir)
    )


def _running_frames(
    package_dir: str, frames: list[types.FrameType], read: list[types.FrameType]
) -> list[set[int]]:
    """Every thread's running frames but the caller's own (into ``frames``), and the ids of
    each one's locals; ``read``: the frames whose locals' snapshot reading them left."""
    locals_ids = []
    for top in sys._current_frames().values():
        for frame in stack(top):
            if _ours(frame, package_dir):
                continue
            frames.append(frame)
            locals_ids.append(set(map(id, running_locals(frame, read))))
    return locals_ids
