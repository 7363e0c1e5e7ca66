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

It only goes forward from roots, so it never meets an object that another thread is still
building (nothing refers to such an object yet), and it can hold what it meets.
"""

from __future__ import annotations

import gc
import sys
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from gc import get_referents, is_tracked
from itertools import compress, repeat
from operator import eq, gt, not_
from sys import getrefcount
from typing import Any

from pytest_eagersession.frames import stack
from pytest_eagersession.unheld import unheld

#: Module name prefixes whose state belongs to TensorFlow and Keras.
TENSORFLOW_MODULES = ("tensorflow", "keras", "tf_keras", "tensorboard")

#: This package's folder: threads running code under it are ours, never roots.
PACKAGE_DIR = __file__.rsplit("/", 1)[0] + "/"

#: Before 3.13, reading a running frame's locals copies them into a dict that the frame keeps.
_LOCALS_SNAPSHOT = sys.version_info < (3, 13)

_FRAME = types.FrameType
_CO_OPTIMIZED = 0x1  # a function's frame: its f_locals is a snapshot, not a namespace


@dataclass(frozen=True)
class Root:
    """Where a chain may start."""

    name: str
    """How a chain from it begins: ``test_x``, ``frame of test_y (path:line)``."""
    obj: object
    """A module, a running frame, or an object of the test framework's."""
    kind: str
    """``"module"``, ``"frame"`` or ``"framework"``."""
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

    def close(self) -> None:
        """Drop the chains, and the locals' snapshots that reading them left on frames.

        Not while a tracer (a debugger) may be working with such a snapshot: it writes it back.
        """
        self.chains.clear()
        for frame in self.read_locals:
            if frame.f_trace is None and sys.gettrace() is None:
                frame.f_locals.clear()
        self.read_locals.clear()


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


def frame_name(frame: types.FrameType) -> str:
    """``frame of test_x (path:line)``."""
    code = frame.f_code
    return f"frame of {code.co_name} ({code.co_filename}:{frame.f_lineno})"


def running_frames() -> set[int]:
    """Ids of the frames every thread is executing now, the calling thread's included."""
    return {id(frame) for top in sys._current_frames().values() for frame in stack(top)}


def walk(
    wanted: Sequence[object], tiers: Sequence[Sequence[Root]], *, deadline: float = float("inf")
) -> Walk:
    """Walk from each tier of roots in turn until every object of ``wanted`` has a chain.

    The locals of frames still executing are read through ``f_locals`` (the collector does not
    show them); the result's ``close()`` drops any snapshot that reading leaves on a frame.
    """
    walker = _Walker({id(obj) for obj in wanted}, running_frames())
    # The root modules' namespaces are met as roots only: never through a function's globals.
    walker.seen.update(dict.fromkeys(map(id, map(vars, _modules(tiers))), -1))
    found = Walk(walker.chains, False, walker.read_locals)
    # The walk makes a list per object it meets; left on, the collector would run full
    # collections of the heap it is walking, several times per walk.
    collecting = gc.isenabled()
    gc.disable()
    try:
        proved = False
        for tier in tiers:
            if not walker.pending or walker.timed_out:
                break
            if not proved and tier and all(root.internal for root in tier):
                # TensorFlow's and Keras's state is most of the heap: before walking it, what
                # provably nothing holds stops being looked for.
                proved = True
                walker.pending -= _unheld(walker, wanted, tiers, deadline)
                if not walker.pending:
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
    walker: _Walker, wanted: Sequence[object], tiers: Sequence[Sequence[Root]], deadline: float
) -> set[int]:
    """The objects still looked for that no root reaches, proved backwards (``unheld``)."""
    roots = {id(root.obj) for tier in tiers for root in tier}
    roots.update(id(vars(key)) for key in _modules(tiers))
    pending = [obj for obj in wanted if id(obj) in walker.pending]
    ours = {id(wanted), id(pending), *(id(path) for _, path in walker.chains.values())}
    try:
        return unheld(pending, roots=roots, ours=ours, package_dir=PACKAGE_DIR, deadline=deadline)
    finally:
        pending.clear()


def _modules(tiers: Sequence[Sequence[Root]]) -> list[types.ModuleType]:
    return [root.obj for tier in tiers for root in tier if isinstance(root.obj, types.ModuleType)]


#: Objects per batch when a chain is read back through a level.
_BATCH = 512


def _one_reference() -> int:
    """What ``getrefcount`` says, in ``_Walker._fresh``, of an object only one reference leads to."""
    holder = [[]]
    flat = list(filter(is_tracked, get_referents(*[holder])))
    return next(map(getrefcount, flat))


_ONE_REFERENCE = _one_reference()


class _Walker:
    """The walk's state. ``seen`` holds the ids of the objects met that more than one reference
    leads to, each with the number of the reference that met it first (a root's is -1)."""

    def __init__(self, wanted: set[int], running: set[int]) -> None:
        self.pending = set(wanted)
        self.running = running
        self.read_locals: list[types.FrameType] = []
        self.seen: dict[int, int] = {}
        self.met = 0  # references looked up so far
        self.chains: dict[int, tuple[Root, list[Any]]] = {}
        self.timed_out = False
        # this tier's answers of ``_special``, by id, so that reading chains back reuses them
        self.special: dict[int, list[Any] | None] = {}
        # met, but left to a later tier's roots (counted as seen until that tier starts)
        self.deferred: list[int] = []

    def walk_tier(self, tier: Sequence[Root], deadline: float) -> None:
        for key in self.deferred:
            self.seen.pop(key, None)
        self.deferred.clear()
        roots = {id(root.obj): root for root in reversed(tier) if id(root.obj) not in self.seen}
        if not roots:
            return
        internal = all(root.internal for root in roots.values())
        level: list[Any] = [root.obj for root in tier if id(root.obj) in roots]
        self.seen.update(dict.fromkeys(roots, -1))
        levels: list[list[Any]] = []
        found: dict[int, tuple[Any, int]] = {}  # by id: the object, the level that met it
        self.special.clear()
        try:
            while level and self.pending:
                if time.perf_counter() > deadline:
                    self.timed_out = True
                    return
                flat = self._expand(level, internal, root=not levels)
                levels.append(level)
                start = self.met
                level = self._fresh(flat)
                del flat
                # What is wanted is held by the caller too, so it is looked up: met here
                # when its number is this level's.
                hits = {key for key in self.pending if self.seen.get(key, -1) >= start}
                if hits:
                    for obj in compress(level, map(hits.__contains__, map(id, level))):
                        found[id(obj)] = obj, len(levels) - 1
                    self.pending -= hits
            for key, path in self._chains(found, levels, internal).items():
                self.chains[key] = roots[id(path[0])], path
        finally:
            levels.clear()
            found.clear()
            self.special.clear()
            level = []

    def _fresh(self, flat: list[Any]) -> list[Any]:
        """The objects of ``flat`` the walk meets for the first time, each once.

        Most of a heap is trees: an object that one reference leads to (its count says so) is
        met once, from its one referrer, so it needs no lookup. The others are looked up once
        each: every reference gets a number of its own, which ``setdefault`` answers only for
        an id met for the first time.
        """
        shared = list(map(gt, map(getrefcount, flat), repeat(_ONE_REFERENCE)))
        fresh = list(compress(flat, map(not_, shared)))
        multiple = list(compress(flat, shared))
        del shared
        numbers = range(self.met, self.met + len(multiple))
        self.met += len(multiple)
        first = map(eq, map(self.seen.setdefault, map(id, multiple), numbers), numbers)
        fresh.extend(compress(multiple, first))
        return fresh

    def _expand(self, level: list[Any], internal: bool, *, root: bool) -> list[Any]:
        """What the objects of ``level`` refer to, in the walk's sense, one list for all."""
        special = {kind for kind in set(map(type, level)) if _is_special(kind)}
        if not special:
            flat = get_referents(*level)
        else:
            mask = list(map(special.__contains__, map(type, level)))
            flat = get_referents(*compress(level, map(not_, mask)))
            for obj in compress(level, mask):
                children = self.special[id(obj)] = self._special(obj, internal, root)
                if children is None:  # another root walks it
                    self.deferred.append(id(obj))
                else:
                    flat.extend(children)
        # what the collector does not track (strings, numbers, dicts of them) holds nothing
        return list(filter(is_tracked, flat))

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
        return [child for child in get_referents(obj) if type(child) is dict]

    def _frame_children(self, frame: types.FrameType) -> list[Any]:
        """A frame's locals: never its globals, builtins, code, or the frame below it."""
        if id(frame) in self.running:
            if _LOCALS_SNAPSHOT and frame.f_code.co_flags & _CO_OPTIMIZED:
                self.read_locals.append(frame)
            return list(frame.f_locals.values())
        return [
            child
            for child in get_referents(frame)
            if child is not frame.f_globals
            and child is not frame.f_builtins
            and child is not frame.f_back
            and not isinstance(child, types.CodeType)
        ]

    def _chains(
        self, found: dict[int, tuple[Any, int]], levels: list[list[Any]], internal: bool
    ) -> dict[int, list[Any]]:
        """The walk's paths from the roots to the objects ``found``, read back level by level.

        The walk kept each level's objects, not who referred to whom: for each level, from the
        deepest, the chains' heads are looked for among the children of the level's objects,
        a batch at a time, and each is given the first object that refers to it.
        """
        paths = {key: [obj] for key, (obj, _) in found.items()}
        for depth in range(len(levels) - 1, -1, -1):
            heads = {id(paths[key][-1]) for key, (_, met) in found.items() if met >= depth}
            parents = self._parents(heads, levels[depth], internal, root=depth == 0)
            for key, (_, met) in found.items():
                if met >= depth:
                    paths[key].append(parents[id(paths[key][-1])])
        for path in paths.values():
            path.reverse()
        return paths

    def _parents(
        self, heads: set[int], level: list[Any], internal: bool, *, root: bool
    ) -> dict[int, Any]:
        parents: dict[int, Any] = {}
        missing = set(heads)
        for start in range(0, len(level), _BATCH):
            batch = level[start : start + _BATCH]
            if missing.isdisjoint(map(id, self._children_of(batch, internal, root))):
                continue
            for obj in batch:
                for key in missing.intersection(map(id, self._children_of([obj], internal, root))):
                    parents[key] = obj
                missing -= parents.keys()
            if not missing:
                break
        return parents

    def _children_of(self, objects: list[Any], internal: bool, root: bool) -> list[Any]:
        """``_expand`` without its bookkeeping: for reading chains back."""
        kinds = list(map(type, objects))
        special = {kind for kind in set(kinds) if _is_special(kind)}
        if not special:
            return get_referents(*objects)
        mask = list(map(special.__contains__, kinds))
        flat = get_referents(*compress(objects, map(not_, mask)))
        for obj in compress(objects, mask):
            key = id(obj)
            children = (
                self.special[key] if key in self.special else self._special(obj, internal, root)
            )
            flat.extend(children or ())
        return flat


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
