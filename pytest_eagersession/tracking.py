"""Finding the TensorFlow objects a session owns, without slowing TensorFlow's fast path down.

TensorFlow offers no cheap hook on tensor creation (an op callback, even an empty one, takes every
op off the fast path). But every EagerTensor, variable and iterator is a gc-tracked Python object,
born in the youngest gc generation. The tracker scans the two young generations just before the
collector promotes them to the old one (a ``gc.callbacks`` hook on collections of generation 1 and
up), when a session is activated and when it is deactivated: each new object is seen once, while
it is young, and attributed to the innermost active session. Objects older than a session were
promoted before it began, so they are never its own. The scan is weak: a record holds a weak
reference and a kind, nothing else.
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_eagersession.kinds import Classifier, tensor_nbytes, tensorflow_ready

if TYPE_CHECKING:
    from pytest_eagersession.session import EagerSession

#: Tracked bytes the young generations may grow by before cyclic garbage is collected.
CYCLE_BYTES_THRESHOLD = 8 * 1024 * 1024

_PACKAGE_DIR = __file__.rsplit("/", 1)[0]
_INTERNAL_PATH_PARTS = (
    "/tensorflow/",
    "/keras/",
    "/tf_keras/",
    "/_pytest/",
    "/pluggy/",
    "/contextlib.py",
    "/threading.py",
    "/__autograph_generated_file",  # a tf.function's converted code: its caller is the user's
    _PACKAGE_DIR + "/",
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
        """Record ``obj`` once (a second scan of the same young object is ignored)."""
        key = id(obj)
        with self._lock:
            record = self._records.get(key)
            if record is not None and record.ref() is obj:
                return
            self._seq += 1
            self._records[key] = _Record(weakref.ref(obj), kind, self._seq)
            if len(self._records) > self._prune_above:
                self._prune()

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

    def alive(self, since: int = 0) -> list[tuple[object, str, int]]:
        """``(object, kind, seq)`` for each record still alive, newer than ``since``."""
        with self._lock:
            records = list(self._records.values())
        found = []
        for record in records:
            obj = record.ref()
            if obj is not None and record.seq > since:
                found.append((obj, record.kind, record.seq))
        return found

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


class CycleCollector:
    """Collects cyclic garbage when tracked bytes grow, not on Python's allocation count.

    A loop that keeps only the latest of many cyclic objects holding big tensors allocates too few
    Python objects to trigger the collector, so its garbage piles up. Each time the bytes grow past
    the threshold, the young generation is collected; every fourth time the middle one too, and
    every 32nd time all of them, so that garbage promoted while it was still alive goes too.
    """

    def __init__(self, threshold: int = CYCLE_BYTES_THRESHOLD) -> None:
        self.threshold = threshold
        self._grown = 0
        self._collections = 0

    @property
    def collections(self) -> int:
        """How many collections the growth of tracked bytes triggered."""
        return self._collections

    def note(self, nbytes: int) -> None:
        """Count ``nbytes`` of new tensors; collect when they pass the threshold."""
        self._grown += nbytes
        if self._grown >= self.threshold:
            self.collect()

    def collect(self) -> None:
        """Collect now, on the ladder described above."""
        self._grown = 0
        self._collections += 1
        if self._collections % 32 == 0:
            gc.collect()
        elif self._collections % 4 == 0:
            gc.collect(1)
        else:
            gc.collect(0)


class Tracker:
    """The process-wide discovery engine; sessions register while they are active."""

    def __init__(self) -> None:
        self._classifier = Classifier()
        self._active: tuple[EagerSession, ...] = ()
        self._fallback: EagerSession | None = None
        self._installed = False
        self._lock = threading.RLock()

    @property
    def classifier(self) -> Classifier:
        """The shared type-to-kind classifier."""
        return self._classifier

    def owner(self) -> EagerSession | None:
        """The session new objects belong to: the latest activated, else the default one."""
        active = self._active
        return active[-1] if active else self._fallback

    def push(self, session: EagerSession) -> None:
        """Make ``session`` the owner of objects created from now on."""
        if tensorflow_ready():
            # Promote what exists now out of the young generations, attributing it (if a session
            # is active) to the outer owner: none of it is the new session's.
            gc.collect(1)
        with self._lock:
            self._active = (*self._active, session)
            self._install()

    def pop(self, session: EagerSession) -> None:
        """Attribute the young objects to their owner, then stop owning for ``session``."""
        self.discover()
        if tensorflow_ready():
            # Promote them too: still young, they would be the next owner's at its next scan,
            # and an outer session would own what an inner one made.
            gc.collect(1)
        with self._lock:
            active = list(self._active)
            for index in range(len(active) - 1, -1, -1):
                if active[index] is session:
                    del active[index]
                    break
            self._active = tuple(active)
            self._update_installation()

    def set_fallback(self, session: EagerSession | None) -> None:
        """The default session owns what is made while no session is active."""
        with self._lock:
            self._fallback = session
            self._update_installation()

    def is_active(self, session: EagerSession) -> bool:
        """Whether ``session`` is on the stack of active sessions (any thread)."""
        return any(active is session for active in self._active)

    def is_innermost(self, session: EagerSession) -> bool:
        """Whether ``session`` is the owner of new objects right now."""
        return self.owner() is session

    def discover(self) -> None:
        """Scan the young generations and give each new TensorFlow object to its owner."""
        owner = self.owner()
        if owner is None or not tensorflow_ready():
            return
        kind_of = self._classifier.kind
        ownership = owner._ownership
        for generation in (0, 1):
            for obj in gc.get_objects(generation):
                kind = kind_of(obj)
                if kind is not None:
                    ownership.add(obj, kind)

    def young_tensor_bytes(self) -> int:
        """Bytes of the tensors in the youngest generation, garbage included."""
        if not tensorflow_ready():
            return 0
        from tensorflow.python.framework.ops import EagerTensor

        return sum(tensor_nbytes(obj) for obj in gc.get_objects(0) if type(obj) is EagerTensor)

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] >= 1:
            self.discover()

    def _install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._on_collection)
            self._installed = True

    def _update_installation(self) -> None:
        if self._active or self._fallback is not None:
            self._install()
        elif self._installed:
            gc.callbacks.remove(self._on_collection)
            self._installed = False


TRACKER = Tracker()


def user_code_location() -> str | None:
    """``path:line in function`` of the innermost frame outside TensorFlow, Keras, pytest, us."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not any(part in filename for part in _INTERNAL_PATH_PARTS) and not filename.startswith(
            "<"
        ):
            return f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


def make_op_callback(
    session: EagerSession, *, safe_points: bool, track_creation: bool, collector: CycleCollector
) -> Callable[..., None]:
    """The op callback an active session installs: safe points, byte counting, creation sites."""

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
            ownership = session._ownership
            # Generated ops' Python fallbacks pass the type as bytes (b"Fill"), the C path as str.
            op = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
            for output in outputs:
                ownership.note_creation(output, op, where)
        if safe_points:
            collector.note(sum(tensor_nbytes(output) for output in outputs))

    return on_op
