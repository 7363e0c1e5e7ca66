"""What kind of holder a chain's root is, in words a reader recognises, and how to clear it.

A chain names its root by a module path (``keras.src.saving.object_registration``) or a frame;
this says whose state that is: the test module's own, the user's other code, a third-party
library's (named by its distribution), TensorFlow's or Keras's, a running thread's or function's
locals, pytest's. Only text is kept: the distribution names, cached by top-level package.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
import threading
import types
from collections.abc import Sequence
from typing import Any

from pytest_eagersession.heap.holders import Root

#: Whose state a TensorFlow-side module is, by its top-level package.
_FRAMEWORKS = {
    "tensorflow": "TensorFlow's",
    "keras": "Keras's",
    "tf_keras": "Keras's",
    "tensorboard": "TensorBoard's",
}
_THREAD = "thread "
#: How to clear what a running thread holds: the thread's own code decides when it lets go.
_STOP_THREAD = "; stop it and join it before the test ends, or in its fixture's teardown"


def describe_root(root: Root, chain: Sequence[Any], first_link: str) -> str:
    """One line: what kind of holder ``root`` is, and how to clear it where that is known.

    ``chain`` is the walk's (the root first), ``first_link`` its rendered first link
    (``mod.CACHE (dict)``); the line does not repeat it, the chain above it names it.
    """
    where = first_link.split(" (", 1)[0]
    if root.kind == "framework":
        return "pytest's state: kept until the end of the run"
    if root.kind == "context":
        return (
            "a context variable of this thread (contextvars): reset it with the token its "
            "set() returned"
        )
    if root.kind == "frame":
        if root.name.startswith(_THREAD):
            thread = root.name[len(_THREAD) :].split(": ", 1)[0]
            return f"a local variable of the running thread {thread!r}{_STOP_THREAD}"
        return "a local variable of a function still running"
    running = _running_thread(root, chain)
    if running is not None:
        return (
            f"the thread {running.name!r}, still running: its Thread object keeps its target "
            f"and arguments until it ends{_STOP_THREAD}"
        )
    module = owning_module(root, chain)
    name = module.__name__ if module is not None else root.name
    held = chain[1] if len(chain) > 1 else None
    hint = _clear_hint(where, held)
    top = name.split(".", 1)[0]
    if top in _FRAMEWORKS:
        return f"{_FRAMEWORKS[top]} state{hint}"
    path = getattr(module, "__file__", None) or ""
    library = _distribution(top) if _installed(path) else None
    if library is not None:
        return f"a module-level cache or registry of the library {library}{hint}"
    base = os.path.basename(path)
    if base == "conftest.py":
        kind = "a conftest.py's module state"
    elif base.startswith("test_") or base.endswith("_test.py"):
        kind = "the test module's own state"
    else:
        kind = "module state of the code under test"
    if not hint and isinstance(held, (dict, list, set)):
        hint = "; clear it in a fixture, or monkeypatch a fresh one for each test"
    return f"{kind}{hint}"


def owning_module(root: Root, chain: Sequence[Any]) -> types.ModuleType | None:
    """The module whose state a chain from a module root is: the root, or the module that
    defines the class the chain goes through first when the root only imported it
    (``gpflow.base.Transform._cache`` is TensorFlow Probability's ``Bijector._cache``)."""
    module = root.obj if isinstance(root.obj, types.ModuleType) else None
    held = chain[1] if module is not None and len(chain) > 1 else None
    if isinstance(held, type):
        owner = sys.modules.get(getattr(held, "__module__", None) or "")
        if isinstance(owner, types.ModuleType) and getattr(owner, "__file__", None):
            return owner
    return module


def library_state(root: Root, chain: Sequence[Any]) -> bool:
    """Whether a chain from a module root starts in an installed library's state (site-packages),
    which later code may still use, rather than in the user's own modules."""
    module = owning_module(root, chain)
    return module is not None and _installed(getattr(module, "__file__", None) or "")


def _running_thread(root: Root, chain: Sequence[Any]) -> threading.Thread | None:
    """The thread a chain from ``threading``'s own registry of running threads goes through
    (``threading._active (dict) -> [ident] (Thread)._target ...``), or None for any other chain.
    Such a chain is not module state anyone clears: the thread keeps its target, arguments and
    attributes until it ends."""
    if root.obj is not threading or len(chain) < 3:
        return None
    thread = chain[2]
    return thread if isinstance(thread, threading.Thread) else None


def _clear_hint(where: str, held: object) -> str:
    if isinstance(held, functools._lru_cache_wrapper):
        return f"; {where}.cache_clear() empties it"
    return ""


def _installed(path: str) -> bool:
    return bool(path) and any(
        part in ("site-packages", "dist-packages") for part in path.split(os.sep)
    )


@functools.lru_cache(maxsize=256)
def _distribution(top: str) -> str | None:
    """The installed distribution that provides the top-level package ``top`` (text only)."""
    names = _packages().get(top)
    return names[0] if names else None


@functools.lru_cache(maxsize=1)
def _packages() -> dict[str, list[str]]:
    try:
        return dict(importlib.metadata.packages_distributions())
    except Exception:  # broken metadata of some installed package: name no library
        return {}
