"""Who holds a set of objects: one forward walk from the roots finds a chain to each of them.

A backwards search (``gc.get_referrers``, as objgraph does it) scans the whole heap once per
link of each chain; this walk visits each object reachable from the roots once, for all the
objects wanted at the same time, and keeps its search structures as ids and per-level lists.

The walk is breadth first, so each chain is a shortest one from its tier of roots; roots come
in tiers (the user's modules and classes, then running frames, then the test framework's state,
then TensorFlow's and Keras's module state), and a later tier only goes where the earlier ones
did not. What a tier's roots do not own stays closed to it: a module reached from another
module (or a module's namespace, through a function's globals), and in the tiers that are not
TensorFlow's, the classes that TensorFlow's and Keras's modules define, which are walked from
their own module's root. A class leads to its own attributes only, not to its bases.

Two shortcuts keep it from walking the whole heap. A container of more than ``_BULKY``
references (a suite's data), and an object of a class the caller names (TensorFlow's graphs),
is set aside and walked through last in its tier, only for what was not found elsewhere: a
chain through it may then not be a shortest one. And before the walk goes through such
containers or TensorFlow's modules, what is still wanted is proved unheld backwards where it
can be (``unheld``): the walk need not go everywhere to say so.

It only goes forward from roots, so it never meets an object that another thread is still
building (nothing refers to such an object yet), and it can hold what it meets.
"""

from __future__ import annotations

import gc
import sys
import time
import types
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from gc import get_referents, is_tracked
from itertools import accumulate, compress, count, repeat
from operator import eq, gt, not_, sub
from sys import getrefcount
from typing import Any

from pytest_eagersession.heap.frames import drop_snapshots, running_locals, stack
from pytest_eagersession.heap.listing import whole_heap_visible
from pytest_eagersession.heap.unheld import unheld
from pytest_eagersession.heap.walks import View, referents_of

#: Module name prefixes whose state belongs to TensorFlow and Keras.
TENSORFLOW_MODULES = ("tensorflow", "keras", "tf_keras", "tensorboard")

#: This package's folder (above this module's own): threads running code under it are ours,
#: never roots.
PACKAGE_DIR = __file__.rsplit("/", 2)[0] + "/"

_FRAME = types.FrameType


@dataclass(frozen=True)
class Root:
    """Where a chain may start."""

    name: str
    """How a chain from it begins: ``test_x``, ``frame of test_y (path:line)``."""
    obj: object
    """A module, a running frame, or an object of the test framework's."""
    kind: str
    """``"module"``, ``"frame"``, ``"context"`` (context variables) or ``"framework"``."""
    internal: bool = False
    """TensorFlow's or Keras's own state."""


@dataclass
class Walk:
    """What one walk found: for each object wanted (by id), its root and chain.

    The chains hold the objects on them: ``close()`` drops them, and the snapshots of running
    frames' locals that the walk read, once the chains are rendered.
    """

    chains: dict[int, tuple[Root, list[Any]]]
    """``root object, ..., wanted object`` by the wanted object's id."""
    timed_out: bool
    """The deadline stopped the walk before every wanted object was found or ruled out."""
    read_locals: list[types.FrameType] = field(default_factory=list)
    """Running frames whose locals the walk read."""
    instances: list[Any] | None = None
    """The instances of ``walk``'s ``also`` class, when its backward proof ran (None if not)."""

    def close(self) -> None:
        """Drop the chains, and the locals' snapshots that reading them left on frames.

        Not while a tracer (a debugger) may be working with such a snapshot: it writes it back.
        """
        self.chains.clear()
        if self.instances is not None:
            self.instances.clear()
        drop_snapshots(self.read_locals)


def module_roots() -> list[Root]:
    """Every imported module, the user's first, then installed ones, TensorFlow's last."""
    installed = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    ranked = []
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType):
            continue
        top = name.split(".")[0]
        internal = top in TENSORFLOW_MODULES
        path = getattr(module, "__file__", None) or ""
        rank = 2 if internal else 1 if not path or path.startswith(installed) else 0
        ranked.append((rank, name, module, internal))
    ranked.sort(key=lambda item: (item[0], item[1]))
    return [Root(name, module, "module", internal) for _, name, module, internal in ranked]


def thread_roots() -> list[Root]:
    """The running frames of the other threads (not ours, not the calling thread's)."""
    import threading

    names = {thread.ident: thread.name for thread in threading.enumerate()}
    current = threading.get_ident()
    roots: list[Root] = []
    for ident, top in sys._current_frames().items():
        if ident == current:
            continue
        frames = list(stack(top))
        if any(frame.f_code.co_filename.startswith(PACKAGE_DIR) for frame in frames):
            continue  # one of our own threads: its locals are our bookkeeping
        name = names.get(ident, f"thread {ident}")
        roots.extend(
            Root(f"thread {name}: {frame_name(frame)}", frame, "frame") for frame in frames
        )
    return roots


def context_roots() -> list[Root]:
    """The values of the calling thread's context variables (``contextvars``), by name.

    A value set with ``ContextVar.set`` lives in the thread's context, which no Python object
    refers to: without this root it would have no Python holder. The root is a dict made for
    the walk (``{name: value}``), dropped with it.
    """
    import contextvars

    values: dict[str, object] = {}
    for variable, value in contextvars.copy_context().items():
        name = variable.name
        while name in values:  # two variables of one name: both are roots
            name += "'"
        values[name] = value
    return [Root("the thread's context variables", values, "context")] if values else []


def frame_name(frame: types.FrameType) -> str:
    """``frame of test_x (path:line)``."""
    code = frame.f_code
    return f"frame of {code.co_name} ({code.co_filename}:{frame.f_lineno})"


def running_frames() -> set[int]:
    """Ids of the frames every thread is executing now, the calling thread's included."""
    return {id(frame) for top in sys._current_frames().values() for frame in stack(top)}


def walk(
    wanted: Sequence[object],
    tiers: Sequence[Sequence[Root]],
    *,
    deadline: float = float("inf"),
    last: tuple[type, ...] = (),
    also: type | None = None,
) -> Walk:
    """Walk from each tier of roots in turn until every object of ``wanted`` has a chain.

    Objects of the ``last`` classes (TensorFlow's graphs: many objects, rarely a leak's
    holder) are walked through last in their tier, as bulky containers are. The instances of
    ``also`` (a class defined in Python) come back in ``instances`` when the walk's backward
    proof ran: its first pass over the heap finds them at no extra cost.

    The locals of frames still executing are read through ``f_locals`` (the collector does not
    show them); the result's ``close()`` drops any snapshot that reading leaves on a frame.
    """
    walker = _Walker(
        {id(obj) for obj in wanted},
        running_frames(),
        lambda: _unheld(walker, wanted, tiers, deadline, also, found),
        last,
    )
    # The root modules' namespaces are met as roots only: never through a function's globals.
    walker.seen.update(dict.fromkeys(map(id, map(vars, _modules(tiers))), -1))
    found = Walk(walker.chains, False, walker.read_locals)
    # The walk makes a list per object it meets; left on, the collector would run full
    # collections of the heap it is walking, several times per walk.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for tier in tiers:
            if tier and all(root.internal for root in tier) and walker.pending:
                # TensorFlow's and Keras's state is most of the heap: before walking it, what
                # provably nothing holds stops being looked for.
                walker.prove_unheld()
            if not walker.pending or walker.timed_out:
                break
            walker.walk_tier(tier, deadline)
    except BaseException:
        found.close()
        raise
    finally:
        if collecting:
            gc.enable()
    found.timed_out = walker.timed_out
    walker.seen.clear()
    return found


def _unheld(
    walker: _Walker,
    wanted: Sequence[object],
    tiers: Sequence[Sequence[Root]],
    deadline: float,
    also: type | None,
    found: Walk,
) -> set[int]:
    """The objects still looked for that no root reaches, proved backwards (``unheld``)."""
    roots = {id(root.obj) for tier in tiers for root in tier}
    roots.update(id(vars(key)) for key in _modules(tiers))
    pending = [obj for obj in wanted if id(obj) in walker.pending]
    ours = {id(wanted), id(pending), *(id(path) for _, path in walker.chains.values())}
    try:
        if also is not None and whole_heap_visible():  # else no pass can be made
            found.instances = []
            ours.add(id(found.instances))
        return unheld(
            pending,
            roots=roots,
            ours=ours,
            package_dir=PACKAGE_DIR,
            deadline=deadline,
            also=also,
            instances=found.instances,
        )
    finally:
        pending.clear()


def _modules(tiers: Sequence[Sequence[Root]]) -> list[types.ModuleType]:
    return [root.obj for tier in tiers for root in tier if isinstance(root.obj, types.ModuleType)]


#: Objects per batch when a chain is read back through a level.
_BATCH = 512


def _one_reference() -> int:
    """What ``getrefcount`` says, in ``_Walker._fresh``, of an object one reference leads to."""
    holder: list[list[object]] = [[]]
    flat = list(filter(is_tracked, get_referents(*[holder])))
    return next(map(getrefcount, flat))


_ONE_REFERENCE = _one_reference()


class _Walker:
    """The walk's state across tiers. ``seen`` holds the ids of the objects met that more than
    one reference leads to, each with the number of the reference that met it first (-1: a
    root, or what must never be walked through)."""

    def __init__(
        self,
        wanted: set[int],
        running: set[int],
        prove: Callable[[], set[int]],
        last: tuple[type, ...] = (),
    ) -> None:
        self.pending = set(wanted)
        self.last = last
        self.running = running
        self.prove = prove
        self.proved = False
        self.read_locals: list[types.FrameType] = []
        self.seen: dict[int, int] = {}
        self.met = 0  # references looked up so far
        self.chains: dict[int, tuple[Root, list[Any]]] = {}
        self.timed_out = False
        # this tier's answers of ``_special``, by id, so that reading chains back reuses them
        self.special: dict[int, list[Any] | None] = {}
        # met, but left to a later tier's roots (counted as seen until that tier starts)
        self.deferred: list[int] = []

    def prove_unheld(self) -> None:
        """Once per walk: stop looking for what provably nothing holds (``unheld``)."""
        if not self.proved:
            self.proved = True
            self.pending -= self.prove()

    def walk_tier(self, tier: Sequence[Root], deadline: float) -> None:
        """Walk from ``tier``'s roots; then, if something is still wanted, through what the walk
        set aside (after the backward proof, which may spare that)."""
        for key in self.deferred:
            self.seen.pop(key, None)
        self.deferred.clear()
        roots = {id(root.obj): root for root in reversed(tier) if id(root.obj) not in self.seen}
        if not roots:
            return
        internal = all(root.internal for root in roots.values())
        self.seen.update(dict.fromkeys(roots, -1))
        self.special.clear()
        first = _Search(self, internal, deadline, set_aside=True)
        last = _Search(self, internal, deadline, set_aside=False)
        try:
            first.run([root.obj for root in tier if id(root.obj) in roots], root=True)
            for key, path in first.paths().items():
                self.chains[key] = roots[id(path[0])], path
            if first.aside and self.pending and not self.timed_out:
                self.prove_unheld()
                if self.pending:
                    last.run([obj for obj, _, _ in first.aside], root=False)
                    starts = {id(obj): (obj, depth, place) for obj, depth, place in first.aside}
                    for key, path in last.paths().items():
                        head = first.path(*starts[id(path[0])])
                        self.chains[key] = roots[id(head[0])], head[:-1] + path
                    starts.clear()
        finally:
            first.close()
            last.close()
            self.special.clear()

    def _special(self, obj: Any, internal: bool, root: bool) -> list[Any] | None:
        """A module's, frame's or class's children; None: not this tier's to walk."""
        if isinstance(obj, types.ModuleType):
            # its globals, read as one link each: ``module.NAME``
            return list(vars(obj).values()) if root else None
        if isinstance(obj, types.FrameType):
            return self._frame_children(obj)
        if not internal and _tensorflow_global(obj):
            return None
        # a class holds its own attributes; its bases are their own modules' to walk
        return referents_of(obj, View.HOLDER)

    def _frame_children(self, frame: types.FrameType) -> list[Any]:
        """A frame's locals: never its globals, builtins, code, or the frame below it."""
        if id(frame) in self.running:
            return running_locals(frame, self.read_locals)
        return referents_of(frame, View.HOLDER)

    def _children_of(
        self, objects: list[Any], internal: bool, root: bool, record: bool = False
    ) -> list[Any]:
        """What ``objects`` refer to, in the walk's sense. ``record``: while walking, keep the
        answers for modules, frames and classes, and defer those another tier walks."""
        special = {kind for kind in set(map(type, objects)) if _is_special(kind)}
        if not special:
            return get_referents(*objects)
        mask = list(map(special.__contains__, map(type, objects)))
        flat = get_referents(*compress(objects, map(not_, mask)))
        for obj in compress(objects, mask):
            key = id(obj)
            if key in self.special:
                children = self.special[key]
            else:
                children = self._special(obj, internal, root)
                if record:
                    self.special[key] = children
                    if children is None:  # another root walks it
                        self.deferred.append(key)
            flat.extend(children or ())
        return flat


#: A container with more references than this is walked through last, in its tier, and only
#: when what is wanted was not found elsewhere (and not proved unheld): a list of a million
#: numbers costs as much to walk as the rest of the heap.
_BULKY = 10_000


class _Search:
    """One breadth-first search from a list of objects, in one tier.

    It keeps each level's objects and, for each batch of ``_BATCH`` objects, where its
    children end in the next level (``_Ends``): enough to read a path back without keeping
    who referred to whom. The next level is the objects met for the first time, those that one
    reference leads to first, then the others.
    """

    def __init__(
        self, walker: _Walker, internal: bool, deadline: float, *, set_aside: bool
    ) -> None:
        self.walker = walker
        self.internal = internal
        self.deadline = deadline
        self.set_aside = set_aside
        self.levels: list[list[Any]] = []
        self.ends: list[_Ends] = []
        # by id: the object, the level whose children it is among, its place there
        self.found: dict[int, tuple[Any, int, int]] = {}
        # what was set aside, each with its parents' level and its place
        self.aside: list[tuple[Any, int, int]] = []
        # of the types met, those of the walker's ``last`` classes
        self.late_kinds: dict[type, bool] = {}

    def run(self, start: list[Any], *, root: bool) -> None:
        walker = self.walker
        level = start
        try:
            while level and walker.pending:
                if time.perf_counter() > self.deadline:
                    walker.timed_out = True
                    return
                flat, flat_ends = self._expand(level, root=root and not self.levels)
                self.levels.append(level)
                met = walker.met
                level, ends = self._fresh(flat, flat_ends)
                self.ends.append(ends)
                del flat
                # What is wanted is held by the caller too, so it is looked up: met here
                # when its number is this level's.
                hits = {key for key in walker.pending if walker.seen.get(key, -1) >= met}
                if hits:
                    places = compress(range(len(level)), map(hits.__contains__, map(id, level)))
                    for place in places:
                        self.found[id(level[place])] = level[place], len(self.levels) - 1, place
                    walker.pending -= hits
        finally:
            level = []

    def paths(self) -> dict[int, list[Any]]:
        """The path to each object found, by its id."""
        return self._paths(self.found)

    def close(self) -> None:
        self.levels.clear()
        self.ends.clear()
        self.found.clear()
        self.aside.clear()
        self.late_kinds.clear()

    def _expand(self, level: list[Any], *, root: bool) -> tuple[list[Any], list[int]]:
        """What the objects of ``level`` refer to, in the walk's sense, one list for all; and
        its length after each batch of ``_BATCH`` objects."""
        walker = self.walker
        flat: list[Any] = []
        flat_ends = []
        for start in range(0, len(level), _BATCH):
            batch = level[start : start + _BATCH]
            children = walker._children_of(batch, self.internal, root, True)
            if self.set_aside and not root:
                bulky = len(children) > _BULKY
                if bulky or (walker.last and any(map(self._late, set(map(type, batch))))):
                    children = self._set_aside(batch, start, root, bulky=bulky)
            # what the collector does not track (strings, numbers, dicts of them) holds nothing
            flat.extend(filter(is_tracked, children))
            del children, batch
            flat_ends.append(len(flat))
        return flat, flat_ends

    def _set_aside(self, batch: list[Any], start: int, root: bool, *, bulky: bool) -> list[Any]:
        """The children of ``batch`` but for what is set aside: its objects of the walker's
        ``last`` classes and, when ``bulky``, its containers of more than ``_BULKY``."""
        walker = self.walker
        parents = len(self.levels) - 1  # the batch is among the children of that level
        rest = []
        for offset, obj in enumerate(batch):
            if self._late(type(obj)) or (
                bulky and len(walker._children_of([obj], self.internal, root)) > _BULKY
            ):
                self.aside.append((obj, parents, start + offset))
            else:
                rest.append(obj)
        try:
            return walker._children_of(rest, self.internal, root, True)
        finally:
            rest.clear()

    def _late(self, kind: type) -> bool:
        late = self.late_kinds.get(kind)
        if late is None:
            late = self.late_kinds[kind] = issubclass(kind, self.walker.last)
        return late

    def _fresh(self, flat: list[Any], flat_ends: list[int]) -> tuple[list[Any], _Ends]:
        """The objects of ``flat`` the walk meets for the first time, each once.

        Most of a heap is trees: an object that one reference leads to (its count says so) is
        met once, from its one referrer, so it needs no lookup. The others are looked up once
        each: every reference gets a number of its own, which ``setdefault`` answers only for
        an id met for the first time.
        """
        walker = self.walker
        shared = list(map(gt, map(getrefcount, flat), repeat(_ONE_REFERENCE)))
        level = list(compress(flat, map(not_, shared)))
        multiple = list(compress(flat, shared))
        numbers = range(walker.met, walker.met + len(multiple))
        walker.met += len(multiple)
        firsts = list(map(eq, map(walker.seen.setdefault, map(id, multiple), numbers), numbers))
        singles = len(level)
        level.extend(compress(multiple, firsts))
        del multiple
        multiple_ends = _counts(shared, flat_ends)
        single_ends = list(map(sub, flat_ends, multiple_ends))
        return level, _Ends(singles, single_ends, _counts(firsts, multiple_ends))

    def path(self, obj: Any, depth: int, place: int) -> list[Any]:
        """The path from the search's start to ``obj``, met among the children of level
        ``depth``, at ``place`` in the next."""
        return self._paths({id(obj): (obj, depth, place)})[id(obj)]

    def _paths(self, found: dict[int, tuple[Any, int, int]]) -> dict[int, list[Any]]:
        """Paths read back level by level, all at once: the batch that met each head is found
        by its place, and in it the first object that refers to it; paths that share a batch
        are read in one pass over it."""
        paths = {key: [obj] for key, (obj, _, _) in found.items()}
        places = {key: place for key, (_, _, place) in found.items()}
        for at in range(max((depth for _, depth, _ in found.values()), default=-1), -1, -1):
            batches: dict[int, dict[int, list[int]]] = {}
            for key, (_, depth, _) in found.items():
                if depth >= at:
                    start = self.ends[at].batch(places[key]) * _BATCH
                    heads = batches.setdefault(start, {})
                    heads.setdefault(id(paths[key][-1]), []).append(key)
            for start, heads in batches.items():
                batch = self.levels[at][start : start + _BATCH]
                offsets = self._first_referrers(batch, set(heads), root=at == 0)
                del batch
                for head, keys in heads.items():
                    for key in keys:
                        places[key] = start + offsets[head]
                        paths[key].append(self.levels[at][places[key]])
        for path in paths.values():
            path.reverse()
        return paths

    def _first_referrers(self, batch: list[Any], heads: set[int], *, root: bool) -> dict[int, int]:
        """For each object of ``heads`` (ids), where in ``batch`` the first object whose
        children include it is. The collector answers for most objects, in C; modules, frames
        and classes, whose children are of the walk's choosing, are asked one by one."""
        remaining = set(heads)
        offsets: dict[int, int] = {}
        if any(map(_is_special, set(map(type, batch)))):
            candidates: Iterable[int] = range(len(batch))
        else:
            ids: Iterator[Iterator[int]] = map(partial(map, id), map(get_referents, batch))
            # lazily: ``remaining`` shrinks as heads are placed
            candidates = compress(count(), map(not_, map(remaining.isdisjoint, ids)))
        for offset in candidates:
            children = self.walker._children_of([batch[offset]], self.internal, root)
            for head in remaining.intersection(map(id, children)):
                offsets[head] = offset
            del children
            remaining -= offsets.keys()
            if not remaining:
                return offsets
        raise LookupError("a walk's path could not be read back")


@dataclass(frozen=True)
class _Ends:
    """Where each batch's children end in a level: its first ``singles`` objects (those one
    reference leads to), then the others."""

    singles: int
    single_ends: list[int]
    other_ends: list[int]

    def batch(self, place: int) -> int:
        """The batch whose children include the object at ``place``."""
        if place < self.singles:
            return bisect_right(self.single_ends, place)
        return bisect_right(self.other_ends, place - self.singles)


def _counts(flags: list[bool], ends: list[int]) -> list[int]:
    """How many of ``flags`` are true up to each of ``ends`` (which run up to its length)."""
    batches = map(flags.__getitem__, map(slice, [0, *ends[:-1]], ends))
    return list(accumulate(map(list.count, batches, repeat(True))))


def _is_special(kind: type) -> bool:
    """Objects of this type have children of the walk's own choosing."""
    return kind is _FRAME or issubclass(kind, (type, types.ModuleType))


def _tensorflow_global(obj: Any) -> bool:
    """A class of TensorFlow's or Keras's that its module holds by its name.

    A class made at run time belongs to whatever holds it; a module's own belongs to the
    module, and is walked from there.
    """
    name = getattr(obj, "__module__", None)
    if not isinstance(name, str) or name.partition(".")[0] not in TENSORFLOW_MODULES:
        return False
    module = sys.modules.get(name)
    return module is not None and getattr(module, "__dict__", {}).get(obj.__name__) is obj
