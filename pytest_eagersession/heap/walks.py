"""Walking forward from objects: what an object refers to, in each of the package's three views.

``referents_of`` is the one answer to "what does this object refer to": the garbage proof, the
walks from known roots and the holder walk each ask it in their own view (``View``). A forward
walk is safe from other threads: a tuple that another thread is still building is
referred to by nothing, so no walk can reach it (unlike a listing of the heap, ``heap``).
"""

from __future__ import annotations

import contextlib
import enum
import gc
import types
from collections.abc import Callable, Iterable, Sequence


class View(enum.Enum):
    """Which of an object's references a walk follows: the one question "what does this refer
    to" asks in three ways, by the package's three walks.

    Whatever the view, a function's or a frame's globals and builtins are never followed:
    everything would be reachable from them.
    """

    PROOF = "proof"
    """Every other reference, code objects and closure cells included: the garbage proof
    (``garbage``) counts each reference between the objects it judges."""
    STATE = "state"
    """What holds state: a function's closure contents, defaults and ``__dict__``; a frame's
    locals and the frame below it, not its code. The walks from known roots (``reachable``)."""
    HOLDER = "holder"
    """As ``STATE`` for a frame, less the frame below it, which the holder walk reaches as a
    thread's frame of its own; a class's own ``__dict__`` alone, its bases being their
    modules' to walk; a function, as any object, by all its references (``holders``)."""


def referents_of(obj: object, view: View = View.STATE) -> list[object]:
    """What ``obj`` refers to, in ``view``; which no container of the walk holds meanwhile."""
    if isinstance(obj, types.FrameType):
        cut = {id(obj.f_globals), id(obj.f_builtins)}
        if view is View.HOLDER:
            cut.add(id(obj.f_back))
        keep_code = view is View.PROOF
        return [
            child
            for child in gc.get_referents(obj)
            if id(child) not in cut and (keep_code or not isinstance(child, types.CodeType))
        ]
    if isinstance(obj, types.FunctionType) and view is not View.HOLDER:
        if view is View.STATE:
            return _state_of_function(obj)
        cut = {id(obj.__globals__), id(getattr(obj, "__builtins__", None))}
        return [child for child in gc.get_referents(obj) if id(child) not in cut]
    if view is View.HOLDER and isinstance(obj, type):
        return [child for child in gc.get_referents(obj) if type(child) is dict]
    return gc.get_referents(obj)


def referents(objects: Sequence[object], view: View = View.STATE) -> list[object]:
    """``referents_of`` each of ``objects``, together; the plain ones in one call into C."""
    viewed = _VIEWED[view]
    found: list[object] = []
    plain: list[object] = []
    for obj in objects:
        if isinstance(obj, viewed):
            found.extend(referents_of(obj, view))
        else:
            plain.append(obj)
    found.extend(gc.get_referents(*plain))
    return found


#: The kinds of object whose references each view cuts (every other kind: gc's referents).
_VIEWED: dict[View, tuple[type, ...]] = {
    View.PROOF: (types.FunctionType, types.FrameType),
    View.STATE: (types.FunctionType, types.FrameType),
    View.HOLDER: (types.FrameType, type),
}


def _state_of_function(function: types.FunctionType) -> list[object]:
    found: list[object] = []
    for cell in function.__closure__ or ():
        with contextlib.suppress(ValueError):  # an empty cell
            found.append(cell.cell_contents)
    found.extend((function.__defaults__, function.__kwdefaults__, function.__dict__))
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
