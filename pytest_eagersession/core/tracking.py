"""Which session owns each TensorFlow object: the one that was innermost when it was made.

TensorFlow offers no cheap hook on tensor creation (an op callback, even an empty one, takes every
op off the fast path). The line between sessions is drawn in the collector instead
(``heap.BOUNDARY``): when a session begins, the objects made before are frozen (``gc.freeze()``),
so that the collector's generations hold exactly what is made while it is the innermost session,
whatever collections run meanwhile, in whichever thread, at whatever thresholds. When it ends,
or another begins inside it, what is there is listed in one call into C and each TensorFlow
object (EagerTensors, variables, iterators, tables, tf.functions: all gc-tracked) becomes the
session's; the line is drawn again. A record holds a weak reference and a kind, nothing else.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from pytest_eagersession.core.kinds import Classifier, tensor_nbytes, tensorflow_ready
from pytest_eagersession.heap.frames import stack
from pytest_eagersession.heap.holders import PACKAGE_DIR
from pytest_eagersession.heap.listing import (
    BOUNDARY,
    instances_weakly,
    of_types_weakly,
    of_types_weakly_apart,
)

_INTERNAL_PATH_PARTS = (
    "/tensorflow/",
    "/keras/",
    "/tf_keras/",
    "/_pytest/",
    "/pluggy/",
    "/contextlib.py",
    "/threading.py",
    "/__autograph_generated_file",  # a tf.function's converted code: its caller is the user's
    PACKAGE_DIR,
)


class _Record:
    __slots__ = ("kind", "ref", "seq")

    def __init__(self, ref: weakref.ref[Any], kind: str, seq: int) -> None:
        self.ref = ref
        self.kind = kind
        self.seq = seq


class Ownership:
    """The weak records of what one session owns, plus where each object was made."""

    def __init__(self) -> None:
        self._records: dict[int, _Record] = {}
        self._creations: dict[int, tuple[weakref.ref[Any], str, str | None]] = {}
        self._lock = threading.RLock()
        self._seq = 0
        self._prune_above = 4096

    @property
    def seq(self) -> int:
        """The sequence number of the latest object recorded."""
        return self._seq

    def add(self, obj: object, kind: str) -> None:
        """Record ``obj`` once (a second listing of the same object is ignored)."""
        self.add_all([(weakref.ref(obj), kind)])

    def add_all(self, found: Iterable[tuple[weakref.ref[Any], str]]) -> None:
        """Record the referent of each ``(weak reference, kind)``, in order, unless it is
        recorded already or dead."""
        with self._lock:
            records = self._records
            for ref, kind in found:
                obj = ref()
                if obj is None:
                    continue
                key = id(obj)
                record = records.get(key)
                if record is not None and record.ref() is obj:
                    continue
                self._seq += 1
                records[key] = _Record(ref, kind, self._seq)
            obj = None
            if len(records) > self._prune_above:
                self._prune()

    def owns(self, obj: object) -> bool:
        """Whether ``obj`` is recorded here."""
        record = self._records.get(id(obj))
        return record is not None and record.ref() is obj

    def note_creation(self, obj: object, op: str, where: str | None) -> None:
        """Remember which op made ``obj`` and which line of user code ran it."""
        with self._lock:
            self._creations[id(obj)] = (weakref.ref(obj), op, where)
            if len(self._creations) > self._prune_above:
                self._prune()

    def creation_of(self, obj: object) -> tuple[str | None, str | None]:
        """``(op, where)`` for ``obj`` if creation tracking saw it made."""
        entry = self._creations.get(id(obj))
        if entry is None or entry[0]() is not obj:
            return None, None
        return entry[1], entry[2]

    def alive(self, since: int = 0) -> list[tuple[weakref.ref[Any], str, int]]:
        """``(weak reference, kind, seq)`` for each record still alive, newer than ``since``.

        Weakly: a caller that holds the list while other threads run keeps nothing alive and
        shows among no object's referrers."""
        with self._lock:
            records = list(self._records.values())
        return [
            (record.ref, record.kind, record.seq)
            for record in records
            if record.seq > since and record.ref() is not None
        ]

    def __len__(self) -> int:
        return len(self._records)

    def clear(self) -> None:
        """Forget everything (after the session reported its survivors)."""
        with self._lock:
            self._records.clear()
            self._creations.clear()

    def _prune(self) -> None:
        self._records = {k: r for k, r in self._records.items() if r.ref() is not None}
        self._creations = {k: c for k, c in self._creations.items() if c[0]() is not None}
        self._prune_above = max(4096, 2 * (len(self._records) + len(self._creations)))


class Owner(Protocol):
    """What the tracker needs of a session that owns the objects made while it is innermost."""

    @property
    def ownership(self) -> Ownership:
        """The weak records of the objects attributed to the owner."""
        ...

    def resume(self) -> None:
        """The owner is the innermost again: a session that began inside it ended."""
        ...

    def safe_point(self) -> None:
        """A point where the owner's cleanup strategy may delete what died."""
        ...


class Tracker:
    """The process-wide stack of sessions, and the line drawn at each change of its top.

    The innermost session owns what is made: the latest activated (in any thread), else the
    default session. Its objects are the ones the collector's generations hold
    (``heap.BOUNDARY``), listed when the line moves: when a session is activated inside it,
    when it is deactivated, and when it asks (``attribute``: a checkpoint, the stats). An object
    is given to one session only: a session that ends hands nothing it owns to the one below.

    The line is drawn only once TensorFlow is imported (a session activated before owns
    nothing). With nobody left to own new objects the heap is thawed again, unless the line is
    held (``hold``, the plugin's, for its whole run): tests then pay neither the thaw nor the
    whole collection that the interpreter would run soon after it, and what they leave frozen
    is collected whole once a quarter more is frozen than was after the last such collection,
    the interpreter's own rule for its oldest generation.
    """

    def __init__(self) -> None:
        self._classifier = Classifier()
        self._active: tuple[Owner, ...] = ()
        self._fallback: Owner | None = None
        self._ending: tuple[Ownership, ...] = ()  # ended on the boundary, not settled yet
        self._holds = 0
        self._lock = BOUNDARY.lock
        self._spent = threading.local()  # each thread's seconds in ``collect_new``
        BOUNDARY.new_classes = self._new_classes
        BOUNDARY.adopt = self._adopt

    @property
    def classifier(self) -> Classifier:
        """The shared type-to-kind classifier."""
        return self._classifier

    def owner(self) -> Owner | None:
        """The session new objects belong to: the latest activated, else the default one."""
        active = self._active
        return active[-1] if active else self._fallback

    def is_active(self, session: Owner) -> bool:
        """Whether ``session`` is on the stack of active sessions (any thread)."""
        return any(active is session for active in self._active)

    def is_innermost(self, session: Owner) -> bool:
        """Whether ``session`` is the owner of new objects right now."""
        return self.owner() is session

    def push(self, session: Owner) -> None:
        """Make ``session`` the owner of what is made from now on."""
        with self._lock:
            if tensorflow_ready():
                previous = self.owner()
                self._give(previous, BOUNDARY.draw(self._new_classes()))
            self._active = (*self._active, session)

    def pop(self, session: Owner, *, settle: bool = True) -> None:
        """Give ``session`` what was made while it was innermost, and stop owning for it.

        With ``settle=False`` the line stays where it was until ``settle()``: a session that
        closes collects its own objects there first, cheaply, and the owner below it takes only
        what is made from now on.
        """
        with self._lock:
            innermost = self.owner() is session and self.is_active(session)
            if innermost:
                self._give(session, self._listed())
            active = list(self._active)
            for index in range(len(active) - 1, -1, -1):
                if active[index] is session:
                    del active[index]
                    break
            self._active = tuple(active)
            if innermost:
                self._ending = (*self._ending, session.ownership)
                if settle:
                    self.settle()

    def settle(self) -> None:
        """Draw the line for the owner now innermost (or thaw, with no owner and no hold)."""
        with self._lock:
            if not self._ending:
                return
            owner = self.owner()
            try:
                if not BOUNDARY.drawn:
                    pass
                elif owner is None and not self._holds:
                    BOUNDARY.erase()
                elif BOUNDARY.compaction_due():
                    self._give(owner, BOUNDARY.collect_whole(self._new_classes())[1])
                else:
                    self._give(owner, BOUNDARY.draw(self._new_classes()))
            finally:
                self._ending = ()
        if owner is not None:
            owner.resume()

    def set_fallback(self, session: Owner | None) -> None:
        """The default session owns what is made while no session is active."""
        with self._lock:
            self._fallback = session
            if self._active:
                return
            if session is not None and tensorflow_ready():
                BOUNDARY.draw()  # what is there now is older than the default session
            elif session is None and not self._holds:
                BOUNDARY.erase()

    def hold(self) -> Callable[[], None]:
        """Keep the line drawn between sessions; returns the call that lets it go."""
        with self._lock:
            self._holds += 1
        released = threading.Event()

        def release() -> None:
            if released.is_set():
                return
            released.set()
            with self._lock:
                self._holds -= 1
                if not self._holds and self.owner() is None and BOUNDARY.drawn:
                    BOUNDARY.erase()

        return release

    def attribute(self) -> None:
        """Give the innermost session what was made since the line was drawn (kept drawn)."""
        with self._lock:
            self._give(self.owner(), self._listed())

    def new_weakly(
        self, session: Owner, types: frozenset[type], generations: Sequence[int] = (0, 1, 2)
    ) -> list[weakref.ref[Any]] | None:
        """Weak references to the objects of exactly ``types`` made since the line (garbage
        included) that are in ``generations``, listed in one call into C; None unless
        ``session`` owns new objects now, behind a line."""
        with self._lock:
            if not (BOUNDARY.drawn and self.owner() is session and tensorflow_ready()):
                return None
            return of_types_weakly(types, generations)

    def new_weakly_apart(
        self, session: Owner, types: frozenset[type], generations: Sequence[int]
    ) -> list[list[weakref.ref[Any]]] | None:
        """``new_weakly``, each of ``generations`` apart, in one call into C."""
        with self._lock:
            if not (BOUNDARY.drawn and self.owner() is session and tensorflow_ready()):
                return None
            return of_types_weakly_apart(types, generations)

    def collect_new(self, session: Owner | None = None) -> int | None:
        """Collect what was made since the line, alone: the number collected, or None where no
        line is drawn, or where ``session`` (when given) does not own new objects now."""
        with self._lock:
            if session is not None and self.owner() is not session:
                return None
            started = time.perf_counter()
            try:
                return BOUNDARY.collect_new()
            finally:
                seconds = time.perf_counter() - started
                self._spent.seconds = self.young_collection_seconds() + seconds

    def young_collection_seconds(self) -> float:
        """The seconds the calling thread has spent in ``collect_new`` so far: collecting what
        was made since the line (the sessions' own garbage, which the interpreter would
        otherwise collect in its own time)."""
        seconds: float = getattr(self._spent, "seconds", 0.0)
        return seconds

    def frozen_new(self) -> list[weakref.ref[Any]]:
        """Weak references to what other code's heap-wide calls froze while it was new."""
        return BOUNDARY.frozen_new()

    def collect_whole(self) -> None:
        """Collect the whole heap; the line stays where it is."""
        with self._lock:
            self._give(self.owner(), BOUNDARY.collect_whole(self._new_classes())[1])

    def _new_classes(self) -> tuple[type, ...]:
        """What to list when the line moves: nothing without an owner, or before TensorFlow."""
        if self.owner() is None or not tensorflow_ready():
            return ()
        return self._classifier.search_roots()

    def _listed(self) -> list[weakref.ref[Any]]:
        if not BOUNDARY.drawn:
            return []
        return instances_weakly(self._new_classes(), (0, 1, 2))

    def _adopt(self, refs: list[weakref.ref[Any]]) -> None:
        """What other code's thawing call found made since the line: the innermost's."""
        with self._lock:
            self._give(self.owner(), refs)

    def _give(self, owner: Owner | None, refs: list[weakref.ref[Any]]) -> None:
        """Record for ``owner`` the TensorFlow objects among ``refs``' referents that no
        session ending on the line owns. Weakly: other threads run meanwhile (the kind of a new
        class is Python code), and must not see a list of ours among their objects' referrers;
        each object is held by this frame's local alone while it is classified."""
        if owner is None or not refs:
            return
        kind_of = self._classifier.kind
        ending = self._ending
        found = []
        for ref in refs:
            obj = ref()
            if obj is None:
                continue
            kind = kind_of(obj)
            if kind is not None and not _owned_by_any(ending, obj):
                found.append((ref, kind))
        obj = None
        refs.clear()
        owner.ownership.add_all(found)


def _owned_by_any(ownerships: Sequence[Ownership], obj: object) -> bool:
    """Whether one of ``ownerships`` records ``obj``.

    A loop, not ``any()`` of a generator: the generator would hold ``obj`` in a cell, which
    other threads' ``gc.get_referrers`` can see."""
    for ownership in ownerships:  # noqa: SIM110
        if ownership.owns(obj):
            return True
    return False


#: The process-wide tracker; its owners are ``EagerSession`` objects.
TRACKER = Tracker()


def user_code_location() -> str | None:
    """``path:line in function`` of the innermost frame outside TensorFlow, Keras, pytest, us."""
    for frame in stack(sys._getframe(2)):
        filename = frame.f_code.co_filename
        if not filename.startswith("<") and not any(
            part in filename for part in _INTERNAL_PATH_PARTS
        ):
            return f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    return None


def make_op_callback(
    session: Owner,
    *,
    safe_points: bool,
    track_creation: bool,
    note_bytes: Callable[[int], None] | None = None,
) -> Callable[..., None]:
    """The op callback an active session installs: safe points, creation sites, output bytes.

    ``note_bytes`` is given the bytes of each op's outputs (``ON_SAFE_POINTS``'s cycle watch).
    """

    def on_op(
        op_type: str,
        inputs: Any,
        attrs: Any,
        outputs: Any,
        op_name: Any = None,
        graph: Any = None,
    ) -> None:
        if graph is not None:  # building a graph (tf.function tracing): nothing is allocated
            return
        if not TRACKER.is_innermost(session):  # an inner session's ops: its strategy applies
            return
        if safe_points:
            session.safe_point()
        if not outputs:
            return
        if track_creation:
            where = user_code_location()
            ownership = session.ownership
            # Generated ops' Python fallbacks pass the type as bytes (b"Fill"), the C path as str.
            op = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
            for output in outputs:
                ownership.note_creation(output, op, where)
        if note_bytes is not None:
            note_bytes(sum(map(tensor_nbytes, outputs)))

    return on_op
