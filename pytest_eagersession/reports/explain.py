"""Who holds a leaked object: the chain of references from a root (a module, a frame) to it.

The chains come from one forward walk from the roots for all the objects of a report
(``holders.walk``), rendered to one line of text each at once, for example
``test_x._CACHE (list) -> [0] -> EagerTensor``; nothing keeps the objects.
"""

from __future__ import annotations

import time
import types
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_eagersession._tf.state import (
    DEFAULT_GRAPH_GLOBALS,
    GRADIENT_REGISTRY_GLOBALS,
    KERAS_CUSTOM_OBJECT_REGISTRIES,
    RANDOM_GENERATOR_GLOBALS,
    REPLICA_FN_CACHE_GLOBALS,
    gradient_tape_class,
    graph_class,
)
from pytest_eagersession._tf.tracing import function_label
from pytest_eagersession.heap.holders import (
    Root,
    context_roots,
    frame_name,
    module_roots,
    thread_roots,
    walk,
)
from pytest_eagersession.reports.native import native_holder
from pytest_eagersession.reports.root_kinds import describe_root, library_state
from pytest_eagersession.reports.routes import KnownRoutes

#: TensorFlow's and Keras's module state that keeps what user code put there, by the chain's start:
#: such a chain is TensorFlow's, but the cause is the code that filled it.
#: A chain that starts at this package's own module state: the plugin keeps it, not the test.
OWN_STATE = __name__.partition(".")[0] + "."
OWN_STATE_CAUSE = (
    "kept by pytest-eagersession's own state, not by the test's code: a bug in the plugin, "
    "please report it"
)

FILLED_BY_USER_CODE = (
    (
        KERAS_CUSTOM_OBJECT_REGISTRIES,
        "registered by user code with keras.saving.register_keras_serializable: "
        "Keras keeps it for the rest of the run",
    ),
    (
        RANDOM_GENERATOR_GLOBALS,
        "installed by user code with tf.random.set_global_generator: "
        "TensorFlow keeps it for the rest of the run",
    ),
    (
        GRADIENT_REGISTRY_GLOBALS,
        "registered in TensorFlow's gradient registry by tf.RegisterGradient, by a "
        "tf.custom_gradient traced in a tf.function (as Keras's train step does) or by "
        "tf.saved_model.load for a loaded model's custom gradient: TensorFlow never drops an entry",
    ),
    (
        REPLICA_FN_CACHE_GLOBALS,
        "cached by tf.distribute for strategy.run of a tf.function: the entry keeps the strategy "
        "and the function, so TensorFlow keeps both for the rest of the run",
    ),
    (
        DEFAULT_GRAPH_GLOBALS,
        "kept by TensorFlow's default graph, which holds the Python functions of tf.py_function, "
        "tf.numpy_function and Dataset.from_generator until it is reset "
        "(tf.compat.v1.reset_default_graph, keras.backend.clear_session)",
    ),
)

#: Seconds the one walk for a report's holders may take, unless told otherwise.
DEFAULT_BUDGET_S = 5.0
#: How a search that ran out of time can be given more, unless the caller words it otherwise.
MORE_TIME = "a larger budget_s searches longer"

NO_HOLDER = (
    "no Python holder: nothing reachable from a module, a running frame or the test framework "
    "refers to it (it is kept alive from native code, such as a C++ resource or a persistent "
    "GradientTape, or only by objects Python cannot see)"
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
    more_time: str | None = MORE_TIME
    """How to give the search more time, said when it ran out (in the caller's words)."""
    root: str | None = None
    """What the chain starts at: ``"module"``, ``"frame"`` (a running frame's locals) or
    ``"framework"`` (the test framework's state)."""
    cause: str | None = None
    """For TensorFlow's state that keeps what user code put there: how it got there."""
    native: str | None = None
    """With no Python holder: the native holder that likely keeps it, and who holds that."""
    holder: str | None = None
    """What kind of holder the chain's root is, in one line (``root_kinds.describe_root``)."""
    library: bool = False
    """The chain starts in an installed library's state (``root_kinds.library_state``)."""

    @property
    def certain(self) -> bool:
        """Whether the holder is the user's own module state: nobody else can be using it."""
        return (
            self.chain is not None
            and self.root == "module"
            and not self.internal
            and not self.library
            and self.cause != OWN_STATE_CAUSE
        )

    def text(self) -> str:
        """The line a report shows."""
        if self.chain is None and self.timed_out:
            advice = f"; {self.more_time}" if self.more_time else ""
            return f"no holder found within {self.seconds:.1f} s (the search stopped there{advice})"
        if self.chain is None and self.native is not None:
            return f"no Python holder; likely kept from native code by {self.native}"
        if self.chain is None:
            return NO_HOLDER
        if self.cause is not None:
            return f"held by {self.chain} ({self.cause})"
        if self.internal:
            return f"held by TensorFlow internals: {self.chain}"
        return f"held by {self.chain}"


def explain(
    obj: object,
    *,
    budget_s: float = DEFAULT_BUDGET_S,
    stack: Sequence[types.FrameType] = (),
    framework: Sequence[Root] = (),
    more_time: str | None = MORE_TIME,
) -> Explanation:
    """Who holds ``obj``: ``explain_all`` for one object."""
    return explain_all(
        [obj], budget_s=budget_s, stack=stack, framework=framework, more_time=more_time
    )[0]


def explain_all(
    objects: Sequence[object],
    *,
    budget_s: float = DEFAULT_BUDGET_S,
    stack: Sequence[types.FrameType] = (),
    framework: Sequence[Root] = (),
    more_time: str | None = MORE_TIME,
    routes: KnownRoutes | None = None,
) -> list[Explanation]:
    """Find and render a shortest chain from a root to each of ``objects``, in one walk.

    Roots, in order of preference: ``stack`` (the running frames of code that checks for leaks
    in the middle of a test), modules and their classes other than TensorFlow's and Keras's,
    the other threads' running frames, ``framework`` (the test framework's state), TensorFlow's
    and Keras's modules. The walk stops after ``budget_s`` seconds; an object it did not reach
    once it went everywhere has no Python holder. With ``routes`` (and no ``stack``), the
    holders explained before are looked in first: what they hold needs no walk, and the walk's
    chains from modules are added to them.
    """
    started = time.perf_counter()
    known = routes.find(objects) if routes is not None and not stack else {}
    # a list of its own: a backward proof in the walk leaves it out, and the caller's is not
    targets = [obj for obj in objects if id(obj) not in known]
    tiers: list[list[Root]] = []
    if targets:  # what the routes did not find: the walk's
        modules = module_roots()
        tiers = [
            [Root(frame_name(frame), frame, "frame") for frame in stack],
            [root for root in modules if not root.internal],
            [*thread_roots(), *context_roots()],
            list(framework),
            [root for root in modules if root.internal],
        ]
    deadline = started + budget_s
    # a graph is many objects and seldom a leak's holder: walked through last in its tier
    graph = graph_class()
    found = walk(
        targets,
        tiers,
        deadline=deadline,
        last=(graph,) if graph else (),
        also=gradient_tape_class(),  # the tapes, in case something has no Python holder
    )
    if routes is not None:
        for root, chain in found.chains.values():
            routes.learn(root, chain)
    found.chains.update(known)
    known.clear()
    native: str | None = None
    try:
        if not found.timed_out and len(found.chains) < len({id(obj) for obj in objects}):
            # Something has no Python holder: a native one (a tape) may keep it, and who holds
            # that is the useful answer. The walk's backward proof found the tapes, if it ran.
            native = native_holder(
                tiers, deadline=deadline, render=_render_from, tapes=found.instances
            )
        seconds = time.perf_counter() - started
        explanations = []
        for obj in objects:
            hit = found.chains.get(id(obj))
            if hit is None:
                explanations.append(
                    Explanation(
                        None,
                        seconds=seconds,
                        timed_out=found.timed_out,
                        more_time=more_time,
                        native=None if found.timed_out else native,
                    )
                )
                continue
            root, chain = hit
            text = render_chain(chain, root_name=root.name)
            explanations.append(
                Explanation(
                    text,
                    root.internal,
                    seconds,
                    more_time=more_time,
                    root=root.kind,
                    cause=_cause(text),
                    holder=describe_root(root, chain, text.split(" -> ", 1)[0]),
                    library=root.kind == "module" and library_state(root, chain),
                )
            )
        return explanations
    finally:
        found.close()
        targets.clear()


def _cause(chain: str) -> str | None:
    if chain.startswith(OWN_STATE):
        return OWN_STATE_CAUSE
    for starts, cause in FILLED_BY_USER_CODE:
        if any(chain.startswith((start + " ", start + ".")) for start in starts):
            return cause
    return None


def _render_from(chain: Sequence[Any], root_name: str) -> str:
    return render_chain(chain, root_name=root_name)


def render_chain(chain: Sequence[Any], *, root_name: str | None = None) -> str:
    """``[module, dict, list, tensor]`` becomes ``mod._CACHE (list) -> [0] -> EagerTensor``."""
    parts = [root_name or _root_name(chain[0])]
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
        if isinstance(child, types.TracebackType):
            # an exception's traceback reads as one link to the frame it reaches
            if isinstance(parent, BaseException):
                parts[-1] += ".__traceback__"
            index += 1
            continue
        if isinstance(child, types.FrameType):
            parts.append(frame_name(child))
            index += 1
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
    if parts[-1] == f"({_label(chain[-1])})":  # an unnamed last link: the type alone ends the chain
        parts[-1] = last_name
    text = " -> ".join(parts)
    if not text.endswith(last_name):
        text += f" -> {last_name}"
    return text


def _root_name(root: Any) -> str:
    if isinstance(root, types.ModuleType):
        return root.__name__
    if isinstance(root, types.FrameType):
        return frame_name(root)
    return type(root).__name__


_MISSING = object()


def _owns_dict(parent: Any, child: dict[Any, Any]) -> bool:
    try:
        attributes = getattr(parent, "__dict__", None)
        if attributes is child:
            return True
        if attributes is None:
            # an instance dict its class does not show as __dict__ (pybind11 classes, such as
            # tf.Graph): its first attribute reads back through the object
            first = next(iter(child.items()), None)
            return (
                first is not None
                and isinstance(first[0], str)
                and getattr(parent, first[0], _MISSING) is first[1]
            )
        # a class's __dict__ is a read-only proxy of the dict the chain goes through
        return (
            isinstance(parent, type)
            and len(attributes) == len(child)
            and all(attributes.get(key) is value for key, value in child.items())
        )
    except Exception:
        return False


def _type_suffix(obj: Any, *, last: bool) -> str:
    if last or isinstance(obj, (type, types.ModuleType)):
        return ""
    return f" ({_label(obj)})"


def _label(obj: Any) -> str:
    """An object's type name; a traced function's or graph's says whose it is."""
    return function_label(obj) or type(obj).__name__


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
    return f"({_label(child)})"


def _key_of(mapping: dict[Any, Any], child: Any) -> Any:
    for key, value in mapping.items():
        if value is child:
            return key
        if key is child:
            return f"key {_short_repr(key)}"
    return "?"


def _short_repr(value: Any, limit: int = 40) -> str:
    if isinstance(value, weakref.ref):  # a weak-key dictionary's key: its address says nothing
        target = value()
        return "weakref to dead object" if target is None else f"weakref to {_label(target)}"
    text = value if isinstance(value, str) and value.startswith("key ") else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
