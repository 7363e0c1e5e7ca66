"""Holders already explained in this run: where to look first for the next leak's chain.

Suites leak into the same few places test after test (a library's cache, a callback's list). A
chain found by the walk from a module is remembered as a route: the module's name and, for
each link, how to take it again (a global's name, or the child's place among its parent's
references), up to the container that held the object. The next report follows each route from
the live module, link by link, checking each link's type, and looks for its objects among the
container's references: a chain found so is as real as the walk's, at the cost of a few lookups
instead of a walk of the heap. A route that no longer leads anywhere is dropped; what no route
finds is left to the walk. Only names, numbers and type names are kept: no object.
"""

from __future__ import annotations

import itertools
import sys
import types
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from gc import get_referents
from typing import Any

from pytest_eagersession.holders import Root

#: Routes kept, the most recently useful first; the oldest goes when a new one comes.
MOST_ROUTES = 64

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
            self._routes.move_to_end(key, last=False)
            return
        types_reached = tuple(type(child).__name__ for child in chain[1:-1])
        self._routes[key] = Route(root.name, root.internal, key[1], types_reached)
        self._routes.move_to_end(key, last=False)
        while len(self._routes) > self._most:
            self._routes.popitem()

    def find(self, objects: Iterable[object]) -> dict[int, tuple[Root, list[Any]]]:
        """The chains the known routes give to ``objects``, by id (each route once, in order)."""
        wanted = {id(obj): obj for obj in objects}
        found: dict[int, tuple[Root, list[Any]]] = {}
        useful: list[tuple[str, tuple[Step, ...]]] = []
        for key, route in list(self._routes.items()):
            if not wanted:
                break
            path = _follow(route)
            if path is None:
                del self._routes[key]  # the module or a link is gone: the route leads nowhere
                continue
            module = path[0]
            root = Root(route.root, module, "module", route.internal)
            for child in _children(path[-1]):
                obj = wanted.pop(id(child), None)
                if obj is not None and obj is child:
                    found[id(obj)] = (root, [*path, obj])
                    useful.append(key)
            path.clear()
        for key in useful:
            if key in self._routes:
                self._routes.move_to_end(key, last=False)
        wanted.clear()
        self.hits += len(found)
        return found


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


def _follow(route: Route) -> list[Any] | None:
    module = sys.modules.get(route.root)
    if not isinstance(module, types.ModuleType):
        return None
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
            path.clear()
            return None
        path.append(child)
    return path


def _children(container: Any) -> list[Any]:
    if isinstance(container, types.ModuleType):
        return list(vars(container).values())
    return get_referents(container)
