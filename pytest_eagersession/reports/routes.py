"""Holders already explained in this run: where to look first for the next leak's chain.

Suites leak into the same few places test after test (a library's cache, a callback's list). A
chain found by the walk from a module is remembered as a route: the module's name and, for
each link, how to take it again (a global's name, or the child's place among its parent's
references), up to the container that held the object. The next report follows each route from
the live module, link by link, checking each link's type, and looks for its objects among the
container's references: a chain found so is as real as the walk's, at the cost of a few lookups
instead of a walk of the heap. A registry or cache keeps each test's object under a key of its
own, so a route to the last test's entry misses the next one: what the routes did not find is
then looked for along each route's types, taking at every link each child of the type the route
reached there, whatever its key (``TYPED_OBJECTS``: a cache of traced graphs keys a test's
objects several links deep), then near the globals the routes start at, breadth first, a few
links deep (``NEARBY_OBJECTS``), before the walk of the heap; each search meets a bounded
number of objects. A route whose module or global is gone is dropped; what none of them finds
is left to the walk. Only names, numbers and type names are kept: no object.

Before those, a leak the test has just made is looked for beneath every object a route still
leads to, through what the test made alone (``YOUNG_OBJECTS``): the heap's line keeps apart
what was made since the test began (``heap.listing.Boundary``), and a new entry in a known
cache hangs there, however many links of the test's own objects lead from it to the leak (a
traced graph, its operations, a closure that captured a variable). That search meets only the
test's objects that are still alive, and costs what they are, not what the heap is.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import types
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from gc import get_referents
from typing import Any

from pytest_eagersession.heap import listing as heap
from pytest_eagersession.heap.holders import Root

#: Routes kept, the most recently useful first; the oldest goes when a new one comes.
MOST_ROUTES = 64

#: The most objects a search near the routes' globals meets before leaving the rest to the walk.
NEARBY_OBJECTS = 20_000
#: How many links beyond the longest route from a global that search goes.
NEARBY_EXTRA_LINKS = 2

#: The most objects the search along the routes' types meets, over all routes of one report.
TYPED_OBJECTS = 100_000

#: The most objects the search beneath the routes, through what was made since the heap's
#: line, meets (the objects a route leads to count, with all their references).
YOUNG_OBJECTS = 100_000

#: A link: a module's global by name, or the child's place among its parent's references.
Step = tuple[str, str | int]


@dataclass(frozen=True)
class Route:
    """How to reach, from a module, a container that held a leak."""

    root: str
    """The module's name in ``sys.modules`` (and how the chain begins)."""
    internal: bool
    """The module is TensorFlow's or Keras's."""
    steps: tuple[Step, ...]
    types: tuple[str, ...]
    """The type name of what each step reached."""
    held: frozenset[str] = frozenset()
    """The type names of the objects found in the container it reaches: the search along its
    types (``TYPED_OBJECTS``) is spent only on routes that held an object of a wanted type."""


class KnownRoutes:
    """The routes of one run, learned from the walk's chains and tried before the next walk."""

    def __init__(self, most: int = MOST_ROUTES) -> None:
        self._routes: OrderedDict[tuple[str, tuple[Step, ...]], Route] = OrderedDict()
        self._most = most
        self.hits = 0
        """Objects whose chain a route gave (the walk did not look for them)."""

    def __len__(self) -> int:
        return len(self._routes)

    def learn(self, root: Root, chain: Sequence[Any]) -> None:
        """Remember the route of a chain that starts at a module (others are not kept)."""
        if root.kind != "module" or not isinstance(chain[0], types.ModuleType) or len(chain) < 2:
            return
        steps = []
        for parent, child in itertools.pairwise(chain[:-1]):  # up to the container
            step = _step(parent, child)
            if step is None:
                return
            steps.append(step)
        key = (root.name, tuple(steps))
        if key in self._routes:
            self._note_held(key, chain[-1])
            self._routes.move_to_end(key, last=False)
            return
        types_reached = tuple(type(child).__name__ for child in chain[1:-1])
        held = frozenset([type(chain[-1]).__name__])
        self._routes[key] = Route(root.name, root.internal, key[1], types_reached, held)
        self._routes.move_to_end(key, last=False)
        while len(self._routes) > self._most:
            self._routes.popitem()

    def held(self, objects: Sequence[object]) -> set[int]:
        """The ids of those of ``objects`` that a known route reaches from its live module.

        A chain found so is proof that the object is alive. The routes learn as ``find``
        does; the objects' reports, which follow them again, count the hits.
        """
        hits = self.hits
        found = self.find(objects)
        self.hits = hits
        held = set(found)
        found.clear()
        return held

    def find(self, objects: Iterable[object]) -> dict[int, tuple[Root, list[Any]]]:
        """The chains the known routes give to ``objects``, by id.

        Each route is followed once, the most recently useful first; what none of them leads
        to is then looked for near their globals (``NEARBY_OBJECTS``), and the chains found so
        are learned as routes of their own.
        """
        wanted = {id(obj): obj for obj in objects}
        found: dict[int, tuple[Root, list[Any]]] = {}
        useful: list[tuple[str, tuple[Step, ...]]] = []
        # each global a route starts at, once: the route that reached it and its longest route
        starts: dict[tuple[str, str | int], tuple[Route, int]] = {}
        # as far as each route still leads: where the test's new objects may hang
        followed: list[tuple[Route, list[Any]]] = []
        for key, route in list(self._routes.items()):
            if not wanted:
                break
            path, complete = _follow(route)
            if len(path) > 1:
                start = (route.root, route.steps[0][1])
                first, longest = starts.get(start, (route, 0))
                starts[start] = (first, max(longest, len(route.steps)))
                followed.append((route, path))
            if not complete:
                if len(path) < 2:  # the module or its global is gone: the route leads nowhere
                    del self._routes[key]
                continue  # else a link moved (a cache's entries come and go): by types
            root = Root(route.root, path[0], "module", route.internal)
            for child in _children(path[-1]):
                obj = wanted.pop(id(child), None)
                if obj is not None and obj is child:
                    found[id(obj)] = (root, [*path, obj])
                    self._note_held(key, obj)
                    useful.append(key)
        for key in useful:
            if key in self._routes:
                self._routes.move_to_end(key, last=False)
        try:
            if wanted and followed:
                beneath = _beneath(followed, wanted)
                for root, chain in beneath.values():
                    self.learn(root, chain)
                found.update(beneath)
        finally:
            for _, path in followed:
                path.clear()
            followed.clear()
        if wanted:
            typed = self._along_types(wanted)
            for root, chain in typed.values():
                self.learn(root, chain)
            found.update(typed)
        if wanted and starts:
            nearby = self._near(starts.values(), wanted)
            for root, chain in nearby.values():
                self.learn(root, chain)
            found.update(nearby)
        wanted.clear()
        self.hits += len(found)
        return found

    def _note_held(self, key: tuple[str, tuple[Step, ...]], obj: object) -> None:
        """Add ``obj``'s type to the types the route at ``key`` held."""
        route = self._routes[key]
        name = type(obj).__name__
        if name not in route.held:
            self._routes[key] = dataclasses.replace(route, held=route.held | {name})

    def _along_types(self, wanted: dict[int, object]) -> dict[int, tuple[Root, list[Any]]]:
        """Chains to ``wanted`` objects that take each route's links by type, whatever their
        places: a cache that keeps each call's entry under a key of its own, several links deep
        (a library's cache of traced graphs), holds the next test's objects the same way.

        Only routes that held an object of a type wanted are taken: the budget is shared, and
        routes to other kinds of objects (a graph's captured tensors, when a variable is
        wanted) spent it before the route that leads to the one wanted was tried.
        """
        found: dict[int, tuple[Root, list[Any]]] = {}
        budget = TYPED_OBJECTS
        namespaces = _namespaces()
        wanted_types = {type(obj).__name__ for obj in wanted.values()}
        for route in list(self._routes.values()):
            if not wanted or budget <= 0:
                break
            if route.held.isdisjoint(wanted_types):
                continue
            paths, budget = _by_types(route, wanted, budget, namespaces)
            if paths:
                module = sys.modules[route.root]
                root = Root(route.root, module, "module", route.internal)
                for key, path in paths.items():
                    found[key] = (root, [module, *path])
        return found

    def _near(
        self, starts: Iterable[tuple[Route, int]], wanted: dict[int, object]
    ) -> dict[int, tuple[Root, list[Any]]]:
        """Chains to ``wanted`` objects found within a few links of the routes' globals."""
        found: dict[int, tuple[Root, list[Any]]] = {}
        budget = NEARBY_OBJECTS
        namespaces = _namespaces()
        for route, longest in starts:
            if not wanted or budget <= 0:
                break
            module = sys.modules.get(route.root)
            name = route.steps[0][1]
            if not isinstance(module, types.ModuleType) or not isinstance(name, str):
                continue
            start = vars(module).get(name)
            if start is None:
                continue
            root = Root(route.root, module, "module", route.internal)
            paths, budget = _search(start, wanted, longest + NEARBY_EXTRA_LINKS, budget, namespaces)
            for key, path in paths.items():
                found[key] = (root, [module, *path])
        return found


def _namespaces() -> set[int]:
    """The ids of the modules' namespaces, which no search enters (the walk starts at them)."""
    return {
        id(vars(module))
        for module in list(sys.modules.values())
        if issubclass(type(module), types.ModuleType)
    }


def _by_types(
    route: Route, wanted: dict[int, object], budget: int, namespaces: set[int]
) -> tuple[dict[int, list[Any]], int]:
    """Paths from ``route``'s global to ``wanted`` objects (popped from it) whose every link
    reaches an object of the type the route's link reached, meeting at most ``budget`` objects;
    and the budget left. The first link is the global itself; the rest are taken by type."""
    if not route.steps:  # the object was the global itself: the routes' own loop looked there
        return {}, budget
    module = sys.modules.get(route.root)
    kind, name = route.steps[0]
    if not isinstance(module, types.ModuleType) or kind != "global" or not isinstance(name, str):
        return {}, budget
    start = vars(module).get(name)
    if start is None or type(start).__name__ != route.types[0]:
        return {}, budget
    level: list[list[Any]] = [[start]]
    try:
        for type_name in route.types[1:]:
            below: list[list[Any]] = []
            seen: set[int] = set()
            for path in level:
                children = _links(path[-1])
                budget -= len(children)
                for child in children:
                    key = id(child)
                    if type(child).__name__ != type_name or key in seen or key in namespaces:
                        continue
                    seen.add(key)
                    below.append([*path, child])
                del children
                if budget <= 0:
                    return {}, budget
            level.clear()
            level = below
        paths: dict[int, list[Any]] = {}
        for path in level:
            for child in _children(path[-1]):
                key = id(child)
                if key in wanted and wanted[key] is child:
                    del wanted[key]
                    paths[key] = [*path, child]
        return paths, budget
    finally:
        level.clear()


def _beneath(
    followed: Sequence[tuple[Route, list[Any]]], wanted: dict[int, object]
) -> dict[int, tuple[Root, list[Any]]]:
    """Chains to ``wanted`` objects (popped from it) that hang beneath an object on a route's
    ``followed`` path through objects made since the heap's line alone, breadth first, meeting
    at most ``YOUNG_OBJECTS`` objects. Nothing where no line is drawn: the generations then hold
    the whole heap."""
    if not heap.BOUNDARY.drawn:
        return {}
    young = heap.ids((0, 1, 2))
    namespaces = _namespaces()
    found: dict[int, tuple[Root, list[Any]]] = {}
    level: list[tuple[Route, list[Any]]] = []
    seen: set[int] = set()
    for route, path in followed:
        for depth in range(1, len(path)):  # the module aside: a global is the walk's to find
            if id(path[depth]) not in seen:
                seen.add(id(path[depth]))
                level.append((route, path[: depth + 1]))
    budget = YOUNG_OBJECTS
    try:
        while level and wanted and budget > 0:
            below: list[tuple[Route, list[Any]]] = []
            for route, path in level:
                children = _links(path[-1])
                budget -= len(children)
                for child in children:
                    key = id(child)
                    if key not in young or key in seen or key in namespaces:
                        continue
                    seen.add(key)
                    if key in wanted and wanted[key] is child:
                        del wanted[key]
                        root = Root(route.root, path[0], "module", route.internal)
                        found[key] = (root, [*path, child])
                    below.append((route, [*path, child]))
                del children
                if budget <= 0:
                    break
            level.clear()
            level = below
        return found
    finally:
        level.clear()


def _step(parent: Any, child: Any) -> Step | None:
    if isinstance(parent, types.ModuleType):
        for name, value in vars(parent).items():
            if value is child and isinstance(name, str):
                return ("global", name)
        return None
    if isinstance(parent, types.FrameType):
        return None
    for place, referent in enumerate(get_referents(parent)):
        if referent is child:
            return ("referent", place)
    return None


def _follow(route: Route) -> tuple[list[Any], bool]:
    """As far as ``route`` still leads from its live module, and whether it leads all the way."""
    module = sys.modules.get(route.root)
    if not isinstance(module, types.ModuleType):
        return [], False
    path: list[Any] = [module]
    for (kind, where), type_name in zip(route.steps, route.types, strict=True):
        parent = path[-1]
        child: Any = None
        if kind == "global" and isinstance(parent, types.ModuleType) and isinstance(where, str):
            child = vars(parent).get(where)
        elif kind == "referent" and isinstance(where, int):
            referents = get_referents(parent)
            child = referents[where] if where < len(referents) else None
            del referents
        if child is None or type(child).__name__ != type_name:
            return path, False
        path.append(child)
    return path, True


def _search(
    start: Any, wanted: dict[int, object], links: int, budget: int, namespaces: set[int]
) -> tuple[dict[int, list[Any]], int]:
    """Paths from ``start`` to the ``wanted`` objects (popped from it) within ``links`` links,
    breadth first, meeting at most ``budget`` objects; and the budget left.

    Links are taken as the walk takes them: a class leads to its namespace only, and neither a
    module, a frame nor a module's namespace (``namespaces``, by id) is entered.
    """
    paths: dict[int, list[Any]] = {}
    seen = {id(start)}
    levels: list[list[Any]] = [[start]]
    parents: list[list[int]] = [[-1]]
    try:
        while len(levels) <= links and wanted and budget > 0:
            level = levels[-1]
            below: list[Any] = []
            above: list[int] = []
            for place, obj in enumerate(level):
                before = len(below)
                for child in _links(obj):
                    key = id(child)
                    if key in seen or key in namespaces:
                        continue
                    seen.add(key)
                    if key in wanted and wanted[key] is child:
                        del wanted[key]
                        paths[key] = [*_path_to(levels, parents, place), child]
                        continue
                    below.append(child)
                    above.append(place)
                budget -= len(below) - before
                if budget <= 0:
                    break
            levels.append(below)
            parents.append(above)
        return paths, budget
    finally:
        levels.clear()


def _links(obj: Any) -> list[Any]:
    kind = type(obj)  # never isinstance: it may ask the object for its __class__ (Python code)
    if issubclass(kind, (types.ModuleType, types.FrameType)):
        return []
    if issubclass(kind, type):
        return [child for child in get_referents(obj) if type(child) is dict]
    return get_referents(obj)


def _path_to(levels: list[list[Any]], parents: list[list[int]], place: int) -> list[Any]:
    """The objects from the search's start to ``levels[-1][place]``, in order."""
    path = []
    for depth in range(len(levels) - 1, -1, -1):
        path.append(levels[depth][place])
        place = parents[depth][place]
    path.reverse()
    return path


def _children(container: Any) -> list[Any]:
    if isinstance(container, types.ModuleType):
        return list(vars(container).values())
    return get_referents(container)
