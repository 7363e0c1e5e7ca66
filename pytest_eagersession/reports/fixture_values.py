"""What a wider-scoped fixture's values and threads reach, for the survivors they hold.

A module-scoped model built lazily during the first test that calls it makes its variables in
that test's session, but the fixture cache, not the test, keeps them: they are handed over to
the module's session, which reports them if they outlive the module.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterable
from functools import partial

from pytest_eagersession.core.kinds import RESOURCE_HANDLE, TENSOR
from pytest_eagersession.core.survivors import Survivor
from pytest_eagersession.heap import walks

#: How many objects the search from the fixture values may visit.
REACH_LIMIT = 200_000

_OPAQUE = (types.ModuleType, type, types.CodeType, types.BuiltinFunctionType)


def reachable_ids(roots: Iterable[object], limit: int = REACH_LIMIT) -> set[int]:
    """Ids of the objects reachable from ``roots``: what a fixture value owns.

    The walk goes through attributes, containers, bound methods, partials, and functions'
    closures and defaults (a factory that memoises what it makes, a model's ``train_function``
    around its ``tf.function`` s), and into the frames of a live thread among the roots (a
    monitor a fixture started), with the globals its running code names (the module-level
    buffer a prefetcher fills). It never goes through modules, classes, code, or a function's
    or frame's other globals: from there everything would be reachable.
    """
    namespaces = {id(module.__dict__) for module in list(sys.modules.values()) if module}
    roots = list(roots)
    frames = _thread_frames(roots)
    roots.extend(frames)
    roots.extend(_globals_named(frames))
    return walks.reachable(roots, limit=limit, opaque=partial(_opaque, namespaces=namespaces))


def _opaque(obj: object, *, namespaces: set[int]) -> bool:
    return obj is None or isinstance(obj, _OPAQUE) or id(obj) in namespaces


def _thread_frames(roots: list[object]) -> list[types.FrameType]:
    """The running frames of the live threads among ``roots`` (not the caller's own)."""
    threads = [root for root in roots if isinstance(root, threading.Thread) and root.is_alive()]
    if not threads:
        return []
    current = sys._current_frames()
    me = threading.get_ident()
    frames: list[types.FrameType] = []
    for thread in threads:
        frame = current.get(thread.ident) if thread.ident not in (None, me) else None
        if frame is not None:
            frames.append(frame)
    return frames


def _globals_named(frames: list[types.FrameType]) -> list[object]:
    """The values of the globals that the code of ``frames`` and the frames below names.

    Not ``threading``'s own frames: its globals list every thread of the process.
    """
    found: list[object] = []
    for top in frames:
        frame: types.FrameType | None = top
        while frame is not None:
            namespace = frame.f_globals
            if namespace.get("__name__") == "threading":
                frame = frame.f_back
                continue
            for name in frame.f_code.co_names:
                if name in namespace:
                    found.append(namespace[name])
            frame = frame.f_back
    return found


def globals_named_by_target(thread: threading.Thread) -> list[tuple[str, str]]:
    """``(module, name)`` for each global the code a thread was started to run names.

    Read while the thread is alive (``Thread`` forgets its target when ``run`` returns), kept
    as text: what it names is looked up again when the thread may be gone (``named_globals``).
    """
    target = getattr(thread, "_target", None)
    code = getattr(target, "__code__", None)
    namespace = getattr(target, "__globals__", None)
    if not isinstance(code, types.CodeType) or not isinstance(namespace, dict):
        return []
    module = namespace.get("__name__")
    if not isinstance(module, str) or module == "threading":
        return []
    names: list[str] = []
    codes = [code]
    for each in codes:  # grows as it goes: the code of functions defined inside
        names.extend(name for name in each.co_names if name in namespace)
        codes.extend(const for const in each.co_consts if isinstance(const, types.CodeType))
    return [(module, name) for name in dict.fromkeys(names)]


def named_globals(names: Iterable[tuple[str, str]]) -> list[object]:
    """The current values of the ``(module, name)`` globals that still exist."""
    found = []
    for module_name, name in names:
        module = sys.modules.get(module_name)
        namespace = getattr(module, "__dict__", None)
        if namespace is not None and name in namespace:
            found.append(namespace[name])
    return found


def owned_kind(survivor: Survivor) -> str:
    """The kind to record ``survivor`` under in the session that takes it over (a resource
    handle is recorded as the tensor it is)."""
    kind = survivor.kind
    return TENSOR if kind == RESOURCE_HANDLE else kind
