"""Who holds a leaked object: the chain of references from a root (a module, a live frame) to it.

The chain is found with objgraph's back-reference search (reimplemented here with a time
budget, and without objgraph's full collection per search, which costs ~0.2 s) and rendered to
one line of text at once, for example ``test_x._CACHE (list) -> [0] -> EagerTensor``; nothing
keeps the object.
"""

from __future__ import annotations

import gc
import sys
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Module name prefixes whose state counts as "TensorFlow internals".
TENSORFLOW_MODULES = ("tensorflow", "keras", "tf_keras", "tensorboard")

#: TensorFlow's and Keras's module state that keeps what user code put there, by the chain's start:
#: such a chain is TensorFlow's, but the cause is the code that filled it.
FILLED_BY_USER_CODE = (
    (
        (
            "keras.src.saving.object_registration.GLOBAL_CUSTOM_OBJECTS",
            "keras.src.saving.object_registration.GLOBAL_CUSTOM_NAMES",
        ),
        "registered by user code with keras.saving.register_keras_serializable: "
        "Keras keeps it for the rest of the run",
    ),
    (
        (
            "tensorflow.python.ops.stateful_random_ops.global_generator",
            "tensorflow.python.ops.stateful_random_ops._global_generator",
        ),
        "installed by user code with tf.random.set_global_generator: "
        "TensorFlow keeps it for the rest of the run",
    ),
)

NO_HOLDER = (
    "no Python holder found: it is kept alive from native code (a persistent GradientTape, "
    "a C++ resource) or only by objects Python cannot see"
)


@dataclass(frozen=True)
class Explanation:
    """Who holds a leaked object, as text."""

    chain: str | None
    """``root (type) -> link -> ... -> Type``, or None when no root was found."""
    internal: bool = False
    """The root is TensorFlow's or Keras's own module state."""
    seconds: float = 0.0
    """How long the search took."""
    timed_out: bool = False
    """The search ran out of time before it found a root."""
    more_time: str | None = "-v searches longer"
    """How to give the search more time, said when it ran out."""
    root: str | None = None
    """What the chain starts at: ``"module"`` or ``"frame"`` (a running frame's locals)."""
    cause: str | None = None
    """For TensorFlow's state that keeps what user code put there: how it got there."""

    @property
    def certain(self) -> bool:
        """Whether the holder is the user's own module state: nobody else can be using it."""
        return self.chain is not None and self.root == "module" and not self.internal

    def text(self) -> str:
        """The line a report shows."""
        if self.chain is None and self.timed_out:
            advice = f"; {self.more_time}" if self.more_time else ""
            return f"no holder found within {self.seconds:.1f} s (the search stopped there{advice})"
        if self.chain is None:
            return NO_HOLDER
        if self.cause is not None:
            return f"held by {self.chain} ({self.cause})"
        if self.internal:
            return f"held by TensorFlow internals: {self.chain}"
        return f"held by {self.chain}"


@dataclass
class StackRoots:
    """For a search made while the code that holds the object still runs.

    The gc cannot see what a running frame's locals hold, so the caller names them:
    ``held_by_frame`` maps the id of each object a frame's locals hold to that frame.
    """

    own_frames: set[int]
    """Frames of the searching code: never roots."""
    held_by_frame: dict[int, types.FrameType]
    """Objects that running frames' locals hold, by id, and the frame holding each."""
    ignore: set[int] = field(default_factory=set)
    """Ids of the caller's own bookkeeping, never part of a chain."""


def explain(
    obj: object,
    *,
    max_depth: int = 10,
    budget_s: float = 0.5,
    stack: StackRoots | None = None,
    more_time: str | None = "-v searches longer",
) -> Explanation:
    """Find and render the shortest chain from a root to ``obj``.

    The search is objgraph's breadth-first walk over ``gc.get_referrers``, bounded by
    ``max_depth`` links and ``budget_s`` seconds, so that an object nothing in Python holds
    cannot stall the run while the whole heap is searched. Roots are modules and frames not on
    the stack; with ``stack``, also what the running frames' locals hold.
    """
    started = time.perf_counter()
    if stack is None:
        stack = StackRoots(_current_frames(), {})
    own_frames = stack.own_frames | {id(sys._getframe())}
    held_by_frame = stack.held_by_frame

    def is_root(candidate: object) -> bool:
        if id(candidate) in held_by_frame:
            return True
        if isinstance(candidate, types.ModuleType):
            return _is_proper_module(candidate)
        return isinstance(candidate, types.FrameType) and id(candidate) not in own_frames

    chain: list[Any] | None = [obj] if id(obj) in held_by_frame else None
    timed_out = False
    if chain is None:
        ignore = own_frames | stack.ignore | {id(stack)}
        chain, timed_out = backref_chain(obj, is_root, max_depth, started + budget_s, ignore)
    seconds = time.perf_counter() - started
    try:
        if chain is None:
            return Explanation(None, seconds=seconds, timed_out=timed_out, more_time=more_time)
        frame = held_by_frame.get(id(chain[0]))
        if frame is not None:
            chain.insert(0, frame)
        root = chain[0]
        internal = isinstance(root, types.ModuleType) and root.__name__.split(".")[0] in (
            TENSORFLOW_MODULES
        )
        root_kind = "module" if isinstance(root, types.ModuleType) else "frame"
        text = render_chain(chain)
        return Explanation(
            text, internal, seconds, more_time=more_time, root=root_kind, cause=_cause(text)
        )
    finally:
        del chain


#: How many objects one ``gc.get_referrers`` call asks about (it compares each against all).
_BATCH = 64


def backref_chain(
    obj: object,
    is_root: Callable[[object], bool],
    max_depth: int,
    deadline: float,
    ignore_ids: set[int],
) -> tuple[list[Any] | None, bool]:
    """Breadth-first search from ``obj`` up its referrers to a root; ``(chain, timed_out)``.

    Level by level, like objgraph's, but one heap scan serves up to ``_BATCH`` objects of a
    level instead of one: a chain of 17 links took 0.5 s one object at a time.
    """
    parent: dict[int, Any] = {id(obj): None}
    level: list[Any] = [obj]
    ignore = set(ignore_ids)
    ignore.update((id(parent), id(ignore), id(sys._getframe())))
    try:
        for _ in range(max_depth):
            ignore.add(id(level))
            following: list[Any] = []
            ignore.add(id(following))
            for start in range(0, len(level), _BATCH):
                if time.perf_counter() > deadline:
                    return None, True
                batch = level[start : start + _BATCH]
                wanted = {id(item) for item in batch}
                referrers = gc.get_referrers(*batch)
                ignore.update((id(batch), id(referrers)))
                for source in referrers:
                    key = id(source)
                    if key in ignore or key in parent:
                        continue
                    child = next((c for c in gc.get_referents(source) if id(c) in wanted), None)
                    if child is None:
                        continue
                    parent[key] = child
                    if is_root(source):
                        chain = [source]
                        while parent[id(chain[-1])] is not None:
                            chain.append(parent[id(chain[-1])])
                        return chain, False
                    following.append(source)
                del referrers, batch
            if not following:
                return None, False
            level = following
        return None, False
    finally:
        parent.clear()


def _cause(chain: str) -> str | None:
    for starts, cause in FILLED_BY_USER_CODE:
        if any(chain.startswith((start + " ", start + ".")) for start in starts):
            return cause
    return None


def _is_proper_module(candidate: types.ModuleType) -> bool:
    return sys.modules.get(candidate.__name__) is candidate


def _current_frames() -> set[int]:
    frames = set()
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        frames.add(id(frame))
        frame = frame.f_back
    return frames


def render_chain(chain: Sequence[Any]) -> str:
    """``[module, dict, list, tensor]`` becomes ``mod._CACHE (list) -> [0] -> EagerTensor``."""
    parts = [_root_name(chain[0])]
    index = 1
    while index < len(chain):
        parent, child = chain[index - 1], chain[index]
        if isinstance(child, dict) and index + 1 < len(chain) and _owns_dict(parent, child):
            # an object's or module's __dict__: show the attribute, not the dict
            grandchild = chain[index + 1]
            parts[-1] += f".{_key_for(child, grandchild)}"
            parts[-1] += _type_suffix(grandchild, last=index + 1 == len(chain) - 1)
            index += 2
            continue
        if (
            isinstance(parent, types.FunctionType)
            and child is parent.__closure__
            and index + 1 < len(chain)
            and isinstance(chain[index + 1], types.CellType)
        ):
            # function -> its closure tuple -> a cell: one link, named by the free variable
            cell = chain[index + 1]
            parts.append(_link(parent, cell))
            if index + 2 < len(chain):  # the cell's contents: no link of their own
                parts[-1] += _type_suffix(chain[index + 2], last=index + 2 == len(chain) - 1)
            index += 3
            continue
        link = _link(parent, child)
        last = index == len(chain) - 1
        if link.startswith("("):  # no name for the link: the type alone says it
            parts.append(link)
        elif link.startswith("."):
            # An attribute reads as one: ``(Mean).total`` whether or not the interpreter shows
            # the instance's __dict__ between the two (it does not for inline values, 3.11+).
            parts[-1] += link + _type_suffix(child, last=last)
        else:
            parts.append(link + _type_suffix(child, last=last))
        index += 1
    if len(chain) == 1:
        return parts[0]
    last_name = type(chain[-1]).__name__
    if parts[-1] == f"({last_name})":  # an unnamed last link: the type alone ends the chain
        parts[-1] = last_name
    text = " -> ".join(parts)
    if not text.endswith(last_name):
        text += f" -> {last_name}"
    return text


def _root_name(root: Any) -> str:
    if isinstance(root, types.ModuleType):
        return root.__name__
    if isinstance(root, types.FrameType):
        return f"frame of {root.f_code.co_name} ({root.f_code.co_filename}:{root.f_lineno})"
    return type(root).__name__


def _owns_dict(parent: Any, child: dict[Any, Any]) -> bool:
    try:
        attributes = getattr(parent, "__dict__", None)
        if attributes is child:
            return True
        # a class's __dict__ is a read-only proxy of the dict the chain goes through
        return (
            isinstance(parent, type)
            and attributes is not None
            and len(attributes) == len(child)
            and all(attributes.get(key) is value for key, value in child.items())
        )
    except Exception:
        return False


def _type_suffix(obj: Any, *, last: bool) -> str:
    if last or isinstance(obj, (type, types.ModuleType)):
        return ""
    return f" ({type(obj).__name__})"


def _key_for(mapping: dict[Any, Any], value: Any) -> str:
    for key, item in mapping.items():
        if item is value:
            return str(key)
    return "?"


def _link(parent: Any, child: Any) -> str:
    """How ``parent`` refers to ``child``, as a user would write it."""
    try:
        if isinstance(parent, dict):
            return f"[{_short_repr(_key_of(parent, child))}]"
        if isinstance(parent, (list, tuple)):
            for position, item in enumerate(parent):
                if item is child:
                    return f"[{position}]"
        if isinstance(parent, types.FrameType):
            for name, value in parent.f_locals.items():
                if value is child:
                    return f"local {name}"
        if isinstance(parent, types.FunctionType) and parent.__closure__:
            names = parent.__code__.co_freevars
            for name, cell in zip(names, parent.__closure__, strict=False):
                if cell is child:
                    return f"closure {name}"
        if isinstance(parent, types.CellType):
            return "cell contents"
        if isinstance(parent, types.MethodType):
            return "__self__" if parent.__self__ is child else "__func__"
        if isinstance(parent, types.TracebackType):
            return "tb_frame" if parent.tb_frame is child else "tb_next"
        attributes = getattr(parent, "__dict__", None)
        if isinstance(attributes, dict):
            for name, value in attributes.items():
                if value is child:
                    return f".{name}"
        for name in getattr(type(parent), "__slots__", ()):
            if getattr(parent, name, None) is child:
                return f".{name}"
    except Exception:
        pass
    return f"({type(child).__name__})"


def _key_of(mapping: dict[Any, Any], child: Any) -> Any:
    for key, value in mapping.items():
        if value is child:
            return key
        if key is child:
            return f"key {_short_repr(key)}"
    return "?"


def _short_repr(value: Any, limit: int = 40) -> str:
    text = value if isinstance(value, str) and value.startswith("key ") else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
