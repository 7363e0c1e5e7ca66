"""Walking forward from objects: what they refer to, as the package's walks from roots follow it.

A forward walk is safe from other threads: a tuple that another thread is still building is
referred to by nothing, so no walk can reach it (unlike a listing of the heap, ``heap``).
"""

from __future__ import annotations

import contextlib
import gc
import types
from collections.abc import Callable, Iterable, Sequence


def referents(objects: Sequence[object]) -> list[object]:
    """What ``objects`` refer to, as the walks from known roots follow it.

    A function leads to its closure cells' contents, its defaults and its ``__dict__``, a frame
    to its locals and the frame below it: never to their globals, builtins or code, from where
    everything would be reachable. Other objects lead to their gc referents. Forward walks are
    safe from other threads: a tuple still being built is referred to by nothing.
    """
    found: list[object] = []
    plain: list[object] = []
    for obj in objects:
        if isinstance(obj, (types.FunctionType, types.FrameType)):
            found.extend(_referents_of_code(obj))
        else:
            plain.append(obj)
    found.extend(gc.get_referents(*plain))
    return found


def referents_of(obj: object) -> list[object]:
    """``referents`` of one object, which no container of the walk holds meanwhile."""
    if isinstance(obj, (types.FunctionType, types.FrameType)):
        return _referents_of_code(obj)
    return gc.get_referents(obj)


def _referents_of_code(obj: types.FunctionType | types.FrameType) -> list[object]:
    if isinstance(obj, types.FrameType):
        return [
            child
            for child in gc.get_referents(obj)
            if child is not obj.f_globals
            and child is not obj.f_builtins
            and not isinstance(child, types.CodeType)
        ]
    found: list[object] = []
    for cell in obj.__closure__ or ():
        with contextlib.suppress(ValueError):  # an empty cell
            found.append(cell.cell_contents)
    found.extend((obj.__defaults__, obj.__kwdefaults__, obj.__dict__))
    return found


def reachable(
    roots: Iterable[object],
    *,
    limit: int,
    opaque: Callable[[object], bool],
    leaves: Callable[[object], bool] | None = None,
) -> set[int]:
    """Ids of what ``roots`` reach through ``referents``, not through ``opaque`` objects.

    Breadth first, up to about ``limit`` objects; the objects themselves are dropped. An object
    ``leaves`` accepts is reached but not walked through.
    """
    seen: set[int] = set()
    frontier = [root for root in roots if not opaque(root)]
    try:
        while frontier and len(seen) < limit:
            fresh = []
            for obj in frontier:
                if id(obj) not in seen:
                    seen.add(id(obj))
                    if leaves is None or not leaves(obj):
                        fresh.append(obj)
            frontier = [child for child in referents(fresh) if not opaque(child)]
            del fresh
    finally:
        frontier = []
    return seen
