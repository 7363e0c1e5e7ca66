"""What outlives a session: finding survivors, telling expected ones apart, and destroying leaks.

Also the TensorFlow-side housekeeping a session does around that: a fresh default graph while it
is active, and TensorFlow's tensor-pinning caches cleared before survivors are counted.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import itertools
import re
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, Union

from pytest_eagersession import heap
from pytest_eagersession.kinds import (
    ITERATOR,
    RESOURCE,
    TABLE,
    TENSOR,
    VARIABLE,
    Description,
    describe,
    owned_handle,
)
from pytest_eagersession.tracking import Ownership


@dataclass(frozen=True)
class Survivor:
    """A tracked object still alive after its session's cleanup: text and numbers only.

    ``ref`` is a weak reference to the object, for tools that explain who holds it; the record
    never keeps the object alive.
    """

    description: Description
    seq: int
    op: str | None = None
    created_at: str | None = None
    ref: weakref.ref[Any] | None = field(default=None, compare=False, repr=False)
    allowed: bool = False
    retention: str | None = None
    """What of TensorFlow's own keeps it, when that is a known TensorFlow leak (not the code's)."""

    @property
    def kind(self) -> str:
        """``tensor``, ``variable``, ``resource handle``, ``iterator``, ``table``, ..."""
        return self.description.kind

    def summary(self) -> str:
        """One line saying what it is and, when known, what made it and where."""
        text = f"{self.kind}: {self.description.summary()}"
        if self.op:
            text += f", made by {self.op}"
        if self.created_at:
            text += f" at {self.created_at}"
        return text


AllowPredicate: TypeAlias = Callable[[Survivor], bool]
AllowFilter: TypeAlias = Union[AllowPredicate, str, Sequence[Union[AllowPredicate, str]]]  # noqa: UP007


def check_allow_filter(allowed: AllowFilter | None) -> AllowPredicate | None:
    """Turn an allow filter into one predicate; a bad one raises ``TypeError`` or ``ValueError``."""
    if allowed is None:
        return None
    items: Sequence[AllowPredicate | str] = (
        [allowed] if isinstance(allowed, str) or callable(allowed) else allowed
    )
    predicates: list[AllowPredicate] = []
    for item in items:
        if isinstance(item, str):
            try:
                pattern = re.compile(item)
            except (re.error, OverflowError, RecursionError) as error:  # a{99999999999}, ((((...
                raise ValueError(
                    f"allow pattern {item!r} is not a regular expression: {error}"
                ) from None
            predicates.append(_pattern_predicate(pattern))
        elif callable(item):
            predicates.append(item)
        else:
            raise TypeError(
                "allow takes a predicate on a Survivor, a regular expression searched in its "
                f"summary, or a list of those; got {type(item).__name__}"
            )
    return lambda survivor: any(predicate(survivor) for predicate in predicates)


def _pattern_predicate(pattern: re.Pattern[str]) -> AllowPredicate:
    def matches(survivor: Survivor) -> bool:
        return pattern.search(survivor.summary()) is not None

    return matches


def find(
    ownership: Ownership,
    since: int,
    is_detached: Callable[[object], bool],
    allow: AllowPredicate | None,
    generator_before: weakref.ref[Any] | None = None,
    thaw: Callable[[], bool] | None = None,
    retention: Retention | None = None,
) -> list[Survivor]:
    """The survivors among ``ownership``'s records; collects garbage only when some are alive.

    ``generator_before`` is TensorFlow's global random generator when the session began: one
    that replaced it since (``tf.random.set_global_generator``) is a survivor, not a singleton.
    ``thaw`` undoes a freeze of the older objects (``heap.OlderObjectsFrozen``): the first
    collection then walks the session's objects alone, and only if some of them outlive it is
    the heap thawed and collected whole (an old cycle may be what keeps them). A survivor that
    ``retention`` says TensorFlow keeps is marked so.
    """
    alive = ownership.alive(since)
    try:
        if not alive:
            if thaw is not None:
                thaw()
            return []
        alive = []  # hold nothing while the collector runs
        gc.collect()
        if thaw is not None and thaw() and ownership.alive(since):
            gc.collect()
        alive = ownership.alive(since)
        if not alive:
            return []
        ignored = tensorflow_singletons(generator_before)
        handles = set()
        for obj, kind, _ in alive:
            handle = owned_handle(obj, kind)
            if handle is not None:
                handles.add(id(handle))
        held = tensors_held_by_others(alive)
        found = []
        for obj, kind, seq in alive:
            key = id(obj)
            if key in ignored or key in handles or key in held or is_detached(obj):
                continue
            op, where = ownership.creation_of(obj)
            if op is None:
                op, where = ownership.creation_of(owned_handle(obj, kind))
            kept_by = retention.kept.get(key) if retention is not None else None
            survivor = Survivor(
                describe(obj, kind), seq, op, where, weakref.ref(obj), retention=kept_by
            )
            if allow is not None and allow(survivor):
                survivor = dataclasses.replace(survivor, allowed=True)
            found.append(survivor)
        return found
    finally:
        del alive


#: The most objects the walk from tracked objects to the tensors they hold visits.
HOLD_WALK_LIMIT = 50_000


def tensors_held_by_others(alive: Sequence[tuple[object, str, int]]) -> set[int]:
    """Ids of the tracked tensors that another tracked object (not a tensor) holds.

    A parked iterator holds its dataset's tensors, a tf.function the tensors it captured:
    reporting the holder says it all, and destroying it (or detaching or allowing it) covers
    them. The walk follows references but stops at modules, classes and module dictionaries,
    so that a function's globals never make a module-level tensor look held.
    """
    tensors = {id(obj) for obj, kind, _ in alive if kind == TENSOR}
    roots = [obj for obj, kind, _ in alive if kind != TENSOR]
    if not tensors or not roots:
        return set()
    namespaces = (getattr(module, "__dict__", None) for module in list(sys.modules.values()))
    stops = {id(namespace) for namespace in namespaces if namespace is not None}
    seen = {id(root) for root in roots}
    queue = collections.deque(roots)
    held: set[int] = set()
    try:
        while queue and len(seen) < HOLD_WALK_LIMIT:
            for referent in gc.get_referents(queue.popleft()):
                key = id(referent)
                if key in seen:
                    continue
                seen.add(key)
                if key in tensors:
                    held.add(key)
                elif key not in stops and not isinstance(referent, (type, types.ModuleType)):
                    queue.append(referent)
    finally:
        queue.clear()
        del roots
    return held


def global_random_generator() -> object:
    """TensorFlow's global random generator, or None while nothing made one."""
    random_ops = sys.modules.get("tensorflow.python.ops.stateful_random_ops")
    return getattr(random_ops, "global_generator", None)


def tensorflow_singletons(generator_before: weakref.ref[Any] | None = None) -> set[int]:
    """Ids of objects TensorFlow and Keras create once per process on first use.

    The global random generator counts when TensorFlow made it on first use (there was none
    before) or it is still the one there was: not when the session's code installed its own.
    """
    ids: set[int] = set()
    generator = global_random_generator()
    if generator is not None and (generator_before is None or generator_before() is generator):
        ids.add(id(generator))
        state = getattr(generator, "_state_var", None)
        if state is not None:
            ids.update((id(state), id(getattr(state, "handle", None))))
    # Keras 3's unseeded random ops draw from a global SeedGenerator made on first use (per
    # thread); its state is a Keras variable around a tf.Variable.
    keras_state = sys.modules.get("keras.src.backend.common.global_state")
    get_attribute = getattr(keras_state, "get_global_attribute", None)
    if get_attribute is not None:
        with contextlib.suppress(Exception):
            seed_state = getattr(get_attribute("global_seed_generator"), "state", None)
            variable = getattr(seed_state, "_value", None)
            if variable is not None:
                ids.update((id(variable), id(getattr(variable, "handle", None))))
    return ids


def destroy_resources(survivors: Iterable[Survivor]) -> int:
    """Cut these survivors off their resources; the objects then fail when used.

    Eager resources are reference-counted by their handle tensors, so TensorFlow's
    ``DestroyResourceOp`` cannot delete them while the handle lives. Instead the owner's handle is
    replaced by a handle to a resource that does not exist (for a variable, to a tiny one of
    another type), named so that TensorFlow's error says what happened; the real resource is
    freed once nothing else holds its handle.
    """
    destroyed = 0
    for survivor in survivors:
        obj = survivor.ref() if survivor.ref is not None else None
        if obj is not None and _replace_handle(obj, survivor):
            destroyed += 1
        del obj
    return destroyed


_HANDLE_ATTRIBUTES = {
    VARIABLE: "_handle",
    ITERATOR: "_iterator_resource",
    TABLE: "_resource_handle",
    RESOURCE: "_resource_handle",
}


def _replace_handle(obj: Any, survivor: Survivor) -> bool:
    attribute = _HANDLE_ATTRIBUTES.get(survivor.kind)
    if attribute is None or not hasattr(obj, attribute):
        return False
    from tensorflow.python.framework import dtypes
    from tensorflow.python.ops import gen_resource_variable_ops

    name = survivor.description.name or survivor.description.type.rsplit(".", 1)[-1]
    shared_name = f"{name} was deleted when its eager session closed"
    try:
        if survivor.kind == VARIABLE:
            # Not a VarHandleOp: assigning through a handle to a missing variable creates it,
            # which would bring the variable back (one shared by every variable of that name).
            # A mutex under that name makes every variable op fail, naming the variable.
            dead = gen_resource_variable_ops.mutex_v2(
                container="pytest-eagersession", shared_name=shared_name
            )
        else:
            dead = gen_resource_variable_ops.var_handle_op(
                dtype=dtypes.int64,
                shape=[],
                container="pytest-eagersession",
                shared_name=shared_name,
            )
        setattr(obj, attribute, dead)
    except Exception:  # an object that refuses is left as it is, and still reported
        return False
    return True


class _GraphOwnedGradient:
    """Stands in the gradient registry for a function that its graph now owns."""

    __slots__ = ("_function", "_name")

    def __init__(self, function: Callable[..., Any], name: str) -> None:
        self._function = weakref.ref(function)
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        function = self._function()
        if function is None:
            raise LookupError(f"the graph that gradient {self._name} was registered for is gone")
        return function(*args, **kwargs)


@dataclass(frozen=True)
class RetentionMark:
    """Where TensorFlow's known retainers stood when a session began."""

    registry_size: int
    cache_keys: frozenset[int]


@dataclass(frozen=True)
class Retention:
    """TensorFlow's own retention of a session's objects, found at its close, as text."""

    released: tuple[str, ...] = ()
    """What TensorFlow kept and the session released (the objects are then garbage)."""
    kept: dict[int, str] = field(default_factory=dict)
    """Objects TensorFlow still keeps (by id) and what keeps them; reported apart."""


def retention_mark() -> RetentionMark:
    """The state of TensorFlow's known retainers now, for ``release_retention`` at close."""
    registry = _gradient_registry()
    keys = frozenset(id(key) for cache in _replica_fn_caches() for key in list(cache.keys()))
    return RetentionMark(len(registry) if registry is not None else 0, keys)


def release_retention(mark: RetentionMark) -> Retention:
    """Release what TensorFlow's known leaks kept of the code run since ``mark``.

    Two retainers are known; each is handled the same way whatever library filled it:

    - TensorFlow's gradient registry never forgets a ``tf.custom_gradient`` traced into a graph
      (any ``tf.function``, Keras's train step, a Gaussian-process library's kernels): the
      entry's function holds the graph, and the graph what it captured. Each entry whose graph
      is found is moved onto that graph, and the registry keeps a weak reference: the graph and
      its captures die with their last user, and the gradient works while they live. Entries
      whose graph is unclear stay; what they keep is reported apart.
    - ``tf.distribute``'s ``call_for_each_replica`` caches a function per strategy in a
      ``WeakKeyDictionary`` whose values hold their keys: no entry ever goes. The entries made
      since the mark are dropped; a later call rebuilds its entry.
    """
    released: list[str] = []
    unresolved: list[tuple[str, Any]] = []
    registry = _gradient_registry()
    if registry is not None:
        fresh = list(
            itertools.islice(registry.items(), min(mark.registry_size, len(registry)), None)
        )
        for name, entry in fresh:
            function = entry.get("type") if isinstance(entry, dict) else None
            if not (isinstance(name, str) and name.startswith("CustomGradient-")):
                continue
            if not isinstance(function, types.FunctionType):
                continue  # moved already (by an inner session's close)
            if _move_onto_graph(name, entry, function):
                released.append(f"gradient registry entry {name}: handed to its graph")
            else:
                unresolved.append((name, function))
        del fresh
    for cache in _replica_fn_caches():
        for key in list(cache.keys()):
            if id(key) not in mark.cache_keys:
                released.append(
                    f"tf.distribute replica-function cache entry for {type(key).__name__}: dropped"
                )
                del cache[key]
    kept: dict[int, str] = {}
    for name, function in unresolved:
        text = f"TensorFlow's gradient registry, entry {name} (its graph is unclear)"
        for key in _reach(function):
            kept.setdefault(key, text)
    return Retention(tuple(released), kept)


def _move_onto_graph(name: str, entry: dict[str, Any], function: types.FunctionType) -> bool:
    graph = _graph_of(function)
    if graph is None:
        return False
    owned = getattr(graph, "_eagersession_custom_gradients", None)
    if owned is None:
        owned = []
        try:
            graph._eagersession_custom_gradients = owned
        except AttributeError:
            return False
    owned.append(function)
    entry["type"] = _GraphOwnedGradient(function, name)
    return True


def _gradient_registry() -> dict[str, Any] | None:
    ops = sys.modules.get("tensorflow.python.framework.ops")
    registry = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    return registry if isinstance(registry, dict) else None


def _replica_fn_caches() -> list[weakref.WeakKeyDictionary[Any, Any]]:
    mirrored_run = sys.modules.get("tensorflow.python.distribute.mirrored_run")
    cache = getattr(mirrored_run, "_cfer_fn_cache", None)
    return [cache] if isinstance(cache, weakref.WeakKeyDictionary) else []


def _reach(root: object) -> set[int]:
    """Ids of what ``root`` reaches through closures, objects and containers (not modules)."""
    return heap.reachable([root], limit=4 * GRAPH_WALK_LIMIT, opaque=_module_or_class)


def _module_or_class(obj: object) -> bool:
    return isinstance(obj, (types.ModuleType, type))


#: How many objects the walk from a gradient function to its graph may visit.
GRAPH_WALK_LIMIT = 5_000


def _graph_of(function: types.FunctionType) -> Any:
    """The graph ``function`` was registered while building, or None when that is unclear.

    A breadth-first walk from the function (closures, wrapper objects, containers; never
    modules or classes) to the graphs, graph tensors and operations it keeps: the arguments
    and results of the ``tf.custom_gradient`` call, the graph it was traced in. The nearest
    graph is the one, unless two are equally near.
    """
    from tensorflow.python.framework import ops, tensor

    opaque = (types.ModuleType, type, types.CodeType)
    seen = {id(function)}
    level: list[Any] = [function]
    try:
        while level and len(seen) < GRAPH_WALK_LIMIT:
            graphs: dict[int, Any] = {}
            following: list[Any] = []
            for referent in heap.referents(level):
                if id(referent) in seen or isinstance(referent, opaque):
                    continue
                seen.add(id(referent))
                if isinstance(referent, ops.Graph):
                    graphs[id(referent)] = referent
                elif isinstance(referent, (tensor.Tensor, ops.Operation)) and not isinstance(
                    referent, ops.EagerTensor
                ):
                    graph = referent.graph
                    graphs[id(graph)] = graph
                else:
                    following.append(referent)
            if graphs:
                return next(iter(graphs.values())) if len(graphs) == 1 else None
            level = following
        return None
    finally:
        level = []


def clear_tensorflow_caches(*, kernels: bool) -> None:
    """Flush the eager context's caches that pin tensors, and wait for async executors.

    Clearing the kernel cache makes every op kind re-create its kernel on its next run (about
    0.1 ms each), so it is asked for only where it pays: at the close of long-lived sessions.
    """
    from tensorflow.python.eager import context

    ctx = context.context()
    if getattr(ctx, "_context_handle", None) is None:
        return
    context.async_wait()
    ctx._clear_caches()
    if kernels:
        ctx.clear_kernel_cache()


@contextlib.contextmanager
def fresh_default_graph() -> Iterator[None]:
    """A new global default graph for the calling thread while the block runs.

    What eager code ties to the default graph (``from_generator``'s and ``py_function``'s Python
    functions) then dies with the block. The graph is swapped in place of the thread's global
    default one, not pushed on the stack of nested graphs, so that ``reset_default_graph()``
    (``keras.backend.clear_session()``, ``tf.test.TestCase.setUp``) works inside the block
    as it works outside. Inside a ``with graph.as_default()`` nothing is changed.
    """
    from tensorflow.python.framework import ops

    graphs = ops._default_graph_stack
    if not graphs.is_cleared():
        yield
        return
    saved = graphs._global_default_graph
    graphs._global_default_graph = None  # TensorFlow makes a new one on first use
    try:
        yield
    finally:
        graphs._global_default_graph = saved


_OP_CALLBACKS_LOCK = threading.Lock()
_op_callbacks_installed = 0


@contextlib.contextmanager
def op_callback(callback: Callable[..., None]) -> Iterator[None]:
    """Install ``callback`` as an op callback of the calling thread while the block runs.

    Ops that leave the C fast path, and tf.function calls, run callbacks only while TensorFlow's
    ``execute.execute`` is patched. ``op_callbacks.remove_op_callback`` undoes that patch as soon
    as the *calling thread* has no callback left, which would silence the callbacks of sessions
    active in other threads; so the patch stays until the last of our callbacks is removed.
    """
    global _op_callbacks_installed
    from tensorflow.python.eager import context, execute

    ctx = context.context()
    ctx.add_op_callback(callback)
    with _OP_CALLBACKS_LOCK:
        _op_callbacks_installed += 1
        execute.execute = execute.execute_with_callbacks
    try:
        yield
    finally:
        with contextlib.suppress(KeyError):
            ctx.remove_op_callback(callback)
        with _OP_CALLBACKS_LOCK:
            _op_callbacks_installed -= 1
            if _op_callbacks_installed == 0 and not ctx.op_callbacks:
                execute.execute = execute.quick_execute
