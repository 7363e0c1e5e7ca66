"""What outlives a session: finding survivors, telling expected ones apart, and destroying leaks.

Also releasing what TensorFlow's known leaks keep of a session's objects. The TensorFlow-side
housekeeping around that (a fresh default graph while a session is active, TensorFlow's
tensor-pinning caches, op callbacks) lives in ``_tf``; its names stay importable from here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import re
import sys
import types
import weakref
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, Union

from pytest_eagersession._tf import gradients, resources
from pytest_eagersession._tf.callbacks import op_callback
from pytest_eagersession._tf.context import clear_caches as clear_tensorflow_caches
from pytest_eagersession._tf.resources import fresh_default_graph
from pytest_eagersession._tf.state import global_random_generator
from pytest_eagersession._tf.state import singleton_ids as tensorflow_singletons
from pytest_eagersession.core.kinds import TENSOR, Description, describe, owned_handle
from pytest_eagersession.core.tracking import TRACKER, Ownership
from pytest_eagersession.heap import garbage, walks
from pytest_eagersession.heap import listing as heap

__all__ = [  # the TensorFlow-side housekeeping lives in _tf; kept importable from here
    "AllowFilter",
    "AllowPredicate",
    "Retention",
    "RetentionMark",
    "Survivor",
    "SurvivorCheck",
    "check_allow_filter",
    "clear_tensorflow_caches",
    "destroy_resources",
    "find",
    "fresh_default_graph",
    "global_random_generator",
    "op_callback",
    "release_retention",
    "retention_mark",
    "tensorflow_singletons",
    "tensors_held_by_others",
]


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


class CloseHints(Protocol):
    """What the code that closes a session knows of its survivors, to spare a whole collection."""

    def kept_elsewhere(self, survivor: Survivor) -> bool:
        """Whether the caller hands ``survivor`` to another owner (a wider scope's session)."""

    def known_holders(self, objects: Sequence[object]) -> Collection[int]:
        """The ids of those of ``objects`` that a chain from a live root is known to hold."""


def find(
    ownership: Ownership,
    since: int,
    is_detached: Callable[[object], bool],
    allow: AllowPredicate | None,
    generator_before: weakref.ref[Any] | None = None,
    retention: Retention | None = None,
    hints: CloseHints | None = None,
    old_holders: Sequence[weakref.ref[Any]] = (),
) -> list[Survivor]:
    """The survivors among ``ownership``'s records; collects garbage only when some are alive.

    ``generator_before`` is TensorFlow's global random generator when the session began: one
    that replaced it since (``tf.random.set_global_generator``) is a survivor, not a singleton.
    The first collection walks what was made since the tracker's line alone (a session that
    closes keeps its objects there until this check ends), again while it frees something and a
    survivor is left that would be reported (neither allowed, nor kept by TensorFlow, nor one
    that ``hints`` says the caller hands to another owner). Such a survivor may be part of a
    cycle frozen while alive: proven garbage (``_garbage_left``), it is dropped. Only what is
    left unproven, and that no holder the caller knows keeps (``hints.known_holders``: a chain
    from a live module is proof that it is alive), makes the check collect the heap whole,
    since an old cycle may be what keeps it, and find the survivors again: a whole collection
    with TensorFlow loaded costs hundreds of milliseconds. ``old_holders`` are objects made
    before the session that may be such a cycle (a unittest case that pytest made at
    collection, whose attributes hold what its ``setUp`` made): the proof looks at them too. A
    survivor that ``retention`` says TensorFlow keeps is marked so.
    """
    if not ownership.alive(since):
        return []

    def reported(survivor: Survivor) -> bool:
        return (
            not survivor.allowed
            and survivor.retention is None
            and not (hints is not None and hints.kept_elsewhere(survivor))
        )

    collected = TRACKER.collect_new()
    if collected is None:  # no line drawn: the one collection is of the whole heap
        TRACKER.collect_whole()
    found = _survivors(ownership, since, is_detached, allow, generator_before, retention)
    if collected is None or not any(map(reported, found)):
        return found
    # What a collection's finalizers and weak reference callbacks let go, the next one frees.
    for _ in range(MORE_YOUNG_COLLECTIONS):
        if not collected:
            break
        collected = TRACKER.collect_new() or 0
        found = _survivors(ownership, since, is_detached, allow, generator_before, retention)
        if not any(map(reported, found)):
            return found
    left = _garbage_left(found, old_holders)
    if left is not None and not any(map(reported, left)):
        return left
    if left is not None and hints is not None and _all_held(left, reported, hints):
        return left
    found = []  # weak references and text only, but nothing of theirs is needed now
    left = None
    TRACKER.collect_whole()
    return _survivors(ownership, since, is_detached, allow, generator_before, retention)


#: Young collections the check may repeat while each frees something and a survivor is left.
MORE_YOUNG_COLLECTIONS = 3
#: The most bytes of tensors and variables that survivors proven garbage may hold and still be
#: left to the interpreter's next whole collection; past it the check collects them at once.
GARBAGE_LEFT_BYTES = 1 << 20


def _garbage_left(
    found: list[Survivor], old_holders: Sequence[weakref.ref[Any]] = ()
) -> list[Survivor] | None:
    """``found`` less the survivors proven garbage without a whole collection; None when those
    proven hold more than ``GARBAGE_LEFT_BYTES`` (collected at once, for the next test).

    A cycle that died after other code collected or listed the heap was frozen while alive
    (``heap.Boundary``): the young collection cannot reach it, a whole one costs hundreds of
    milliseconds with TensorFlow loaded. Trial deletion over what the survivors, the objects
    frozen while new and ``old_holders`` lead to (``garbage.unreachable``) proves such a cycle
    dead in about a millisecond; it stays in memory until the interpreter's next whole
    collection, as it would without the plugin.
    """
    proven = garbage.unreachable(
        [s.ref for s in found if s.ref is not None],
        [*TRACKER.frozen_new(), *old_holders],
        new=heap.ids((0, 1, 2)),  # what the line holds: made since it was drawn
    )
    dead: list[Survivor] = []
    left: list[Survivor] = []
    for survivor in found:
        obj = survivor.ref() if survivor.ref is not None else None
        (dead if obj is None or id(obj) in proven else left).append(survivor)
        del obj
    if sum(s.description.nbytes or 0 for s in dead) > GARBAGE_LEFT_BYTES:
        return None
    return left


def _all_held(
    survivors: Sequence[Survivor], reported: Callable[[Survivor], bool], hints: CloseHints
) -> bool:
    """Whether a holder the caller knows keeps every survivor that would be reported."""
    objects = [s.ref() for s in survivors if reported(s) and s.ref is not None]
    try:
        if any(obj is None for obj in objects):
            return False  # died meanwhile: a whole collection settles what is left
        held = hints.known_holders(objects)
        return all(id(obj) in held for obj in objects)
    finally:
        objects.clear()


def _survivors(
    ownership: Ownership,
    since: int,
    is_detached: Callable[[object], bool],
    allow: AllowPredicate | None,
    generator_before: weakref.ref[Any] | None,
    retention: Retention | None,
) -> list[Survivor]:
    """``find``'s survivors as they are now, without collecting.

    Each object is held by a local alone while it is looked at: other threads run meanwhile,
    and no list of ours may show among their objects' referrers (``gc.get_referrers``).
    """
    alive = ownership.alive(since)
    if not alive:
        return []
    ignored = tensorflow_singletons(generator_before)
    handles = set()
    for ref, kind, _ in alive:
        handle = owned_handle(ref(), kind)
        if handle is not None:
            handles.add(id(handle))
    handle = None
    held = tensors_held_by_others(alive)
    found = []
    for ref, kind, seq in alive:
        obj = ref()
        key = id(obj)
        if obj is None or key in ignored or key in handles or key in held or is_detached(obj):
            continue
        op, where = ownership.creation_of(obj)
        if op is None:
            op, where = ownership.creation_of(owned_handle(obj, kind))
        kept_by = retention.kept.get(key) if retention is not None else None
        survivor = Survivor(describe(obj, kind), seq, op, where, ref, retention=kept_by)
        if allow is not None and allow(survivor):
            survivor = dataclasses.replace(survivor, allowed=True)
        found.append(survivor)
    obj = None
    return found


class SurvivorCheck:
    """What one session needs to find its survivors at close, kept from its start.

    The objects declared to outlive it, TensorFlow's global random generator and known
    retainers as they stood when it was first activated, and what of those it released.
    """

    def __init__(
        self,
        ownership: Ownership,
        allow: AllowPredicate | None,
    ) -> None:
        self._ownership = ownership
        self._allow = allow
        self._detached: dict[int, weakref.ref[Any]] = {}
        self._old_holders: list[weakref.ref[Any]] = []
        self._generator_before: weakref.ref[Any] | None = None
        self._retention_mark: RetentionMark | None = None
        self._released: list[str] = []

    def begin(self) -> None:
        """Note TensorFlow's state at the session's first activation (TensorFlow loaded)."""
        generator = global_random_generator()
        if generator is not None and self._generator_before is None:
            self._generator_before = weakref.ref(generator)
        if self._retention_mark is None:
            self._retention_mark = retention_mark()

    def detach(self, obj: object) -> None:
        """Expect ``obj`` to outlive the session: never a survivor."""
        self._detached[id(obj)] = weakref.ref(obj)

    def suspect_holder(self, obj: object) -> None:
        """Look at ``obj`` (weakly) when proving survivors garbage at close; see ``find``."""
        with contextlib.suppress(TypeError):  # takes no weak reference: no cycle to prove
            self._old_holders.append(weakref.ref(obj))

    def is_detached(self, obj: object) -> bool:
        """Whether ``obj`` was detached."""
        ref = self._detached.get(id(obj))
        return ref is not None and ref() is obj

    @property
    def released(self) -> tuple[str, ...]:
        """What TensorFlow's known leaks kept and ``find(release=True)`` released, as text."""
        return tuple(self._released)

    def find(
        self,
        since: int,
        *,
        release: bool = False,
        hints: CloseHints | None = None,
    ) -> list[Survivor]:
        """The survivors newer than ``since``; first release TensorFlow's retention if asked."""
        retention = None
        if release and self._retention_mark is not None:
            retention = release_retention(self._retention_mark)
            self._released.extend(retention.released)
        return find(
            self._ownership,
            since,
            self.is_detached,
            self._allow,
            generator_before=self._generator_before,
            retention=retention,
            hints=hints,
            old_holders=self._old_holders,
        )

    def clear(self) -> None:
        """Forget the detached objects and the suspected holders (the session closed)."""
        self._detached.clear()
        self._old_holders.clear()


#: The most objects the walk from tracked objects to the tensors they hold visits.
HOLD_WALK_LIMIT = 50_000


def tensors_held_by_others(alive: Sequence[tuple[weakref.ref[Any], str, int]]) -> set[int]:
    """Ids of the tracked tensors that another tracked object (not a tensor) holds.

    A parked iterator holds its dataset's tensors, a tf.function the tensors it captured:
    reporting the holder says it all, and destroying it (or detaching or allowing it) covers
    them. The walk (``walks.reachable``) stops at the tensors, and at modules, classes and
    module dictionaries, so that a function's globals never make a module-level tensor look held.
    It starts from what the holders refer to, each holder held by a local alone meanwhile: what
    the walk's lists hold, a tracked object holds too.
    """
    tensors = {id(ref()) for ref, kind, _ in alive if kind == TENSOR}
    tensors.discard(id(None))
    holders = [ref for ref, kind, _ in alive if kind != TENSOR]
    if not tensors or not holders:
        return set()
    namespaces = (getattr(module, "__dict__", None) for module in list(sys.modules.values()))
    stops = {id(namespace) for namespace in namespaces if namespace is not None}

    def opaque(obj: object) -> bool:
        return id(obj) in stops or isinstance(obj, (type, types.ModuleType))

    first: list[object] = []
    for ref in holders:
        holder = ref()
        if holder is not None and not opaque(holder):
            first.extend(walks.referents_of(holder))
    holder = None
    try:
        reached = walks.reachable(
            first, limit=HOLD_WALK_LIMIT, opaque=opaque, leaves=lambda obj: id(obj) in tensors
        )
    finally:
        first.clear()
    return reached & tensors


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
        name = survivor.description.name or survivor.description.type.rsplit(".", 1)[-1]
        if obj is not None and resources.destroy_handle(obj, survivor.kind, name):
            destroyed += 1
        del obj
    return destroyed


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
    shared_gradients: int = 0
    """``gradients.latest()`` then: the tape's shared gradients remembered before."""


@dataclass(frozen=True)
class Retention:
    """TensorFlow's own retention of a session's objects, found at its close, as text."""

    released: tuple[str, ...] = ()
    """What TensorFlow kept and the session released (the objects are then garbage)."""
    kept: dict[int, str] = field(default_factory=dict)
    """Objects TensorFlow still keeps (by id) and what keeps them; reported apart."""


def retention_mark() -> RetentionMark:
    """The state of TensorFlow's known retainers now, for ``release_retention`` at close.

    It starts the note of the tape's shared gradients first (``gradients.watch``, once per
    process), so that the mark's count of them means something.
    """
    registry = resources.gradient_registry()
    caches = resources.replica_fn_caches()
    keys = frozenset(id(key) for cache in caches for key in list(cache.keys()))
    gradients.watch()
    return RetentionMark(len(registry) if registry is not None else 0, keys, gradients.latest())


def release_retention(mark: RetentionMark) -> Retention:
    """Release what TensorFlow's known leaks kept of the code run since ``mark``.

    Three retainers are known; each is handled the same way whatever library filled it:

    - TensorFlow's gradient registry never forgets a ``tf.custom_gradient`` traced into a graph
      (any ``tf.function``, Keras's train step, a Gaussian-process library's kernels): the
      entry's function holds the graph, and the graph what it captured. Each entry whose graph
      is found is moved onto that graph, and the registry keeps a weak reference: the graph and
      its captures die with their last user, and the gradient works while they live. Entries
      whose graph is unclear stay; what they keep is reported apart.
    - ``tf.distribute``'s ``call_for_each_replica`` caches a function per strategy in a
      ``WeakKeyDictionary`` whose values hold their keys: no entry ever goes. The entries made
      since the mark are dropped; a later call rebuilds its entry.
    - ``tf.GradientTape.gradient`` keeps one reference too many to a gradient it returns for
      several sources at once (``_tf/gradients``): nothing can release it; it, and what a graph
      tensor's graph holds, is reported apart.
    """
    released: list[str] = []
    unresolved: list[tuple[str, Any]] = []
    registry = resources.gradient_registry()
    if registry is not None and len(registry) > mark.registry_size:  # else skip ~1,000 entries
        fresh = list(itertools.islice(registry.items(), mark.registry_size, None))
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
    for cache in resources.replica_fn_caches():
        for key in list(cache.keys()):
            if id(key) not in mark.cache_keys:
                released.append(
                    f"tf.distribute replica-function cache entry for {type(key).__name__}: dropped"
                )
                del cache[key]
    kept: dict[int, str] = {}
    for gradient, sources in gradients.shared(mark.shared_gradients):
        text = (
            f"TensorFlow's tape.gradient(), which returned one tensor for {sources} sources at "
            "once and keeps a reference to it that is never released (ask for each source's "
            "gradient apart, or take them in a tf.function)"
        )
        for key in _reach(gradient):
            kept.setdefault(key, text)
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


def _reach(root: object) -> set[int]:
    """Ids of what ``root`` reaches through closures, objects and containers (not modules)."""
    return walks.reachable([root], limit=4 * GRAPH_WALK_LIMIT, opaque=_module_or_class)


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
    opaque = (types.ModuleType, type, types.CodeType)
    seen = {id(function)}
    level: list[Any] = [function]
    try:
        while level and len(seen) < GRAPH_WALK_LIMIT:
            graphs: dict[int, Any] = {}
            following: list[Any] = []
            for referent in walks.referents(level):
                if id(referent) in seen or isinstance(referent, opaque):
                    continue
                seen.add(id(referent))
                graph = resources.graph_of_node(referent)
                if graph is not None:
                    graphs[id(graph)] = graph
                else:
                    following.append(referent)
            if graphs:
                return next(iter(graphs.values())) if len(graphs) == 1 else None
            level = following
        return None
    finally:
        level = []
