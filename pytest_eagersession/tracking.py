"""Finding the TensorFlow objects a session owns, without slowing TensorFlow's fast path down.

TensorFlow offers no cheap hook on tensor creation (an op callback, even an empty one, takes every
op off the fast path). But every EagerTensor, variable and iterator is a gc-tracked Python object,
born in the young gc generations. The tracker scans them just before the collector promotes
them to the oldest (a ``gc.callbacks`` hook; at every collection while pacing, see ``Tracker``),
when a session is activated and when it is deactivated: each new object is seen while it is
young, and attributed to the innermost active session. Objects older than a session were
promoted before it began, so they are never its own. The scan is weak: a record holds a weak
reference and a kind, nothing else; the heap listing itself never outlives one call into C (see
``heap``).
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from pytest_eagersession.frames import stack
from pytest_eagersession.kinds import TENSOR, Classifier, tensor_nbytes, tensorflow_ready

#: Scans in a row that find few new tensor bytes before the collector's pace is left alone.
QUIET_SCANS = 4
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

    def add_all(self, found: list[tuple[object, str]]) -> int:
        """Record each ``(object, kind)``; return the bytes of the tensors new to the records."""
        nbytes = 0
        with self._lock:
            records = self._records
            for obj, kind in found:
                key = id(obj)
                record = records.get(key)
                if record is not None and record.ref() is obj:
                    continue
                self._seq += 1
                records[key] = _Record(weakref.ref(obj), kind, self._seq)
                if kind == TENSOR:
                    nbytes += tensor_nbytes(obj)
            if len(records) > self._prune_above:
                self._prune()
        return nbytes

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


class Owner(Protocol):
    """What the tracker needs of a session that owns the objects made while it is active."""

    @property
    def ownership(self) -> Ownership:
        """The weak records of the objects attributed to the owner."""
        ...

    def note_young_bytes(self, generation: int, nbytes: int) -> bool:
        """A scan at the start of a ``generation`` collection found ``nbytes`` of new tensors.

        True to keep pacing: to scan at every collection.
        """
        ...

    def safe_point(self) -> None:
        """A point where the owner's cleanup strategy may delete what died."""
        ...


class CycleCollector:
    """Collects cyclic garbage as tracked tensor bytes grow, not on Python's allocation count.

    A loop that keeps only the latest of many reference cycles holding big tensors allocates too
    few Python objects to wake the collector, or lets the collector promote each cycle while it
    is still alive, so that its garbage piles up in an older generation. ``note()`` counts the
    bytes of new tensors; each time they pass the threshold a collection is due: of the young
    generations, or of all of them every ``FULL_EVERY``-th time (what was promoted alive dies
    in the oldest). ``collect()`` runs it, where a collection may run: never inside another
    collection's callback.
    """

    FULL_EVERY = 3

    def __init__(self, threshold: int = CYCLE_BYTES_THRESHOLD) -> None:
        self.threshold = threshold
        self._grown = 0
        self._passed = 0
        self._due = -1
        self._collections = 0
        self._lock = threading.Lock()

    @property
    def collections(self) -> int:
        """How many collections the growth of tracked bytes triggered or brought forward."""
        return self._collections

    def note(self, nbytes: int) -> int | None:
        """Count ``nbytes`` of new tensors; the generation now due (1 or 2), or None."""
        with self._lock:
            self._grown += nbytes
            if self._grown < self.threshold:
                return None
            self._grown = 0
            self._passed += 1
            generation = 2 if self._passed % self.FULL_EVERY == 0 else 1
            self._due = max(self._due, generation)
            return generation

    def collect_full(self) -> None:
        """Collect every generation now (the background cleaner, on memory growth)."""
        if not gc.isenabled():  # the code turned automatic collection off: leave it so
            return
        with self._lock:
            self._collections += 1
        gc.collect()

    def collect_middle(self) -> None:
        """Collect the young and middle generations now (the cleaner, when the code is idle)."""
        if not gc.isenabled():  # the code turned automatic collection off: leave it so
            return
        with self._lock:
            self._collections += 1
        gc.collect(1)

    def count_early(self) -> None:
        """Count a collection of the interpreter's that pacing brought forward."""
        with self._lock:
            self._collections += 1

    def collect(self) -> None:
        """Run the collection that is due, if one is."""
        with self._lock:
            generation, self._due = self._due, -1
            if generation < 0 or not gc.isenabled():  # automatic collection is off: stays off
                return
            self._collections += 1
        gc.collect(generation)


class CollectionPacer:
    """Paces Python's automatic collections by the tensor bytes the young generation holds.

    The tracker scans the youngest generation at the start of each collection, so it knows how
    many tensor bytes (live or cyclic garbage) arrived since the last one. Where that is a lot,
    the pacer lowers the youngest generation's threshold, so that the next collection comes
    sooner, and asks for the middle generation once the bytes scanned into it pass the
    threshold. The collections stay the interpreter's own, run by the thread that allocates:
    nothing is collected from another thread. Where automatic collection is off (``gc.disable``
    or a zero threshold) it stays off. Thresholds are restored as found when pacing ends,
    unless someone else changed them meanwhile.
    """

    MIN_YOUNG_THRESHOLD = 10

    def __init__(self, threshold: int = CYCLE_BYTES_THRESHOLD) -> None:
        self.threshold = threshold
        self._found: tuple[int, ...] = ()
        self._set: tuple[int, ...] = ()
        self._middle_bytes = 0
        self._lock = threading.RLock()

    def observe(self, generation: int, nbytes: int) -> bool:
        """Adjust the thresholds after a scan that found ``nbytes`` of new tensors.

        True when the collection that called the scan came early, by thresholds of ours.
        """
        with self._lock:
            return self._observe(generation, nbytes)

    def hurry(self) -> None:
        """Make the next allocation start a collection: memory grew where no scan looked yet."""
        with self._lock:
            current = self._current()
            if not gc.isenabled() or self._found[0] <= 0:
                return
            wanted = (1, *current[1:])
            if wanted != current:
                gc.set_threshold(*wanted)
            self._set = wanted

    def spare_older(self) -> None:
        """Keep the collection after this one, of the youngest generation, from taking older ones.

        Called where a collection of the youngest generation starts in a thread that may not
        scan (a cleaner). Each such collection brings the middle generation's collection
        nearer; if the next one, started in that thread too, took the middle or the oldest
        generation, the young objects would be promoted unseen and never attributed. So their
        thresholds are raised just past their counts; the next scan, in a thread that may scan,
        puts them back (``observe``), and until then the collections that come are the young
        generation's alone.
        """
        with self._lock:
            current = self._current()
            if not gc.isenabled() or current[0] <= 0:
                return
            young, middle, oldest, *rest = current
            _, middle_count, oldest_count = gc.get_count()
            # This collection adds one to the middle count; the next one takes the middle
            # generation once that count passes its threshold (the oldest likewise).
            middle = max(middle, middle_count + 2)
            oldest = max(oldest, oldest_count + 1)
            wanted = (young, middle, oldest, *rest)
            if wanted != current:
                gc.set_threshold(*wanted)
            self._set = wanted

    def _current(self) -> tuple[int, ...]:
        current = gc.get_threshold()
        if current != self._set:
            self._found = current  # ours were replaced (or never set): these are the user's
        return current

    def _observe(self, generation: int, nbytes: int) -> bool:
        current = self._current()
        early = current != self._found
        young, middle, *rest = self._found
        if young <= 0:  # automatic collection is off: leave it so
            return early
        window = current[0] if current[0] > 0 else young
        if nbytes:  # as many allocations as bring half the threshold, going by this window's
            paced = self.threshold // 2 * window // nbytes
            young = max(self.MIN_YOUNG_THRESHOLD, min(young, paced))
        if generation == 0:
            self._middle_bytes += nbytes
        else:
            self._middle_bytes = 0
        if self._middle_bytes >= self.threshold:
            middle = 0  # the next collection takes the middle generation too
        wanted = (young, middle, *rest)
        if wanted != current:
            gc.set_threshold(*wanted)
        self._set = wanted
        return early

    def restore(self) -> None:
        """Give the collector back the thresholds found, unless someone changed ours."""
        with self._lock:
            if self._set and gc.get_threshold() == self._set:
                gc.set_threshold(*self._found)
            self._set = self._found = ()
            self._middle_bytes = 0


class Tracker:
    """The process-wide discovery engine; sessions register while they are active.

    A ``gc.callbacks`` hook scans the young generations at the start of each collection of the
    middle one: what is there is about to be promoted to the oldest, so each object that lives
    to see such a collection is seen while young. While the owner's tensors come in bytes that
    matter (pacing), the youngest generation is scanned at every collection instead, so that
    the collector's pace can follow them; otherwise the scan costs what it would per op, about
    1%. Scans run only in threads that are not a session's cleaner: a collection that starts in
    a cleaner thread is let go, and the next scan looks at the middle generation too.
    """

    def __init__(self) -> None:
        self._classifier = Classifier()
        self._active: tuple[Owner, ...] = ()
        self._fallback: Owner | None = None
        self._installed = False
        self._lock = threading.RLock()
        self._quiet_threads: set[int] = set()
        self._young_seen = False  # every object in the middle generation was scanned
        self._starts = 0  # collections started so far, in any thread
        self._pacing = False
        self._quiet_scans = 0
        self._scanning = False
        self._own_collection = False
        self._pacer = CollectionPacer()
        self._scans = 0
        self._middle_collections = 0

    @property
    def classifier(self) -> Classifier:
        """The shared type-to-kind classifier."""
        return self._classifier

    @property
    def scans(self) -> int:
        """How many scans of the young generations have run so far (a counter, never reset)."""
        return self._scans

    @property
    def middle_collections(self) -> int:
        """How many collections of the middle (or oldest) generation the code's threads started."""
        return self._middle_collections

    def owner(self) -> Owner | None:
        """The session new objects belong to: the latest activated, else the default one."""
        active = self._active
        return active[-1] if active else self._fallback

    def push(self, session: Owner) -> None:
        """Make ``session`` the owner of objects created from now on."""
        if tensorflow_ready():
            # Attribute what is young now to the outer owner (if a session is active, else to
            # nobody) and promote it: none of it is the new session's.
            self.discover()
            self._collect_young()
        with self._lock:
            self._active = (*self._active, session)
            self._install()

    def pop(self, session: Owner) -> None:
        """Attribute the young objects to their owner, then stop owning for ``session``."""
        self.discover()
        if tensorflow_ready():
            # Promote them too: still young, they would be the next owner's at its next scan,
            # and an outer session would own what an inner one made.
            self._collect_young()
        with self._lock:
            active = list(self._active)
            for index in range(len(active) - 1, -1, -1):
                if active[index] is session:
                    del active[index]
                    break
            self._active = tuple(active)
            self._update_installation()

    def set_fallback(self, session: Owner | None) -> None:
        """The default session owns what is made while no session is active."""
        with self._lock:
            self._fallback = session
            self._update_installation()

    def is_active(self, session: Owner) -> bool:
        """Whether ``session`` is on the stack of active sessions (any thread)."""
        return any(active is session for active in self._active)

    def is_innermost(self, session: Owner) -> bool:
        """Whether ``session`` is the owner of new objects right now."""
        return self.owner() is session

    def quiet_thread(self, ident: int, quiet: bool = True) -> None:
        """Never scan from thread ``ident`` (a cleaner: background threads never list the heap)."""
        with self._lock:
            if quiet:
                self._quiet_threads.add(ident)
            else:
                self._quiet_threads.discard(ident)

    def in_quiet_thread(self) -> bool:
        """Whether the calling thread must not list the heap."""
        return threading.get_ident() in self._quiet_threads

    def discover(self, generation: int | None = None) -> None:
        """Scan the young generation and give each new TensorFlow object to its owner.

        ``generation`` is that of the automatic collection about to start, if one is: the
        owner then paces the next ones by the tensor bytes found.
        """
        owner: Owner | None = self.owner()
        if owner is None or not tensorflow_ready():
            return
        if self._scanning or self.in_quiet_thread():
            self._young_seen = False  # what this collection promotes was not seen
            return
        # Until the listing is made, no collection may start: one started by the scan's own
        # allocations would move young objects on unseen, a tensor made just now included.
        # (``gc.isenabled`` and ``gc.disable`` allocate nothing the collector tracks.)
        paused = gc.isenabled()
        if paused:
            gc.disable()
        starts = self._starts
        self._scanning = True  # a collection the scan itself starts must not scan again
        try:
            try:
                found = self._classifier.find((0,) if self._young_seen else (0, 1))
            finally:
                if paused:
                    gc.enable()
            nbytes = owner.ownership.add_all(found)
            del found
        finally:
            self._scanning = False
        # A collection that started since (recording can start one, as can another thread)
        # moved young objects on unseen: the next scan looks at the middle generation too.
        self._young_seen = self._starts == starts
        self._scans += 1
        if generation is not None:
            # Pacing stops after a few scans in a row found little: one right after another
            # collection finds little by itself.
            if owner.note_young_bytes(generation, nbytes):
                self._pacing, self._quiet_scans = True, 0
            else:
                self._quiet_scans += 1
                self._pacing = self._pacing and self._quiet_scans < QUIET_SCANS

    def pace(self, generation: int, nbytes: int) -> bool:
        """Let the pacer adjust the collector's thresholds after a scan; True if it came early."""
        return self._pacer.observe(generation, nbytes)

    def hurry(self) -> None:
        """Have the next allocation start a collection (and so a scan), from any thread."""
        self._pacing = True
        self._pacer.hurry()

    def _collect_young(self) -> None:
        """Scan for the current owner, then move both young generations to the oldest.

        Both: an object left in the middle generation (say, one made between two sessions,
        when nobody owns what is made) would be the next session's at its first scan of it.
        """
        self._own_collection = True
        try:
            gc.collect(1)
        finally:
            self._own_collection = False
        self._young_seen = True  # nothing is young now

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        if phase != "start":
            return
        self._starts += 1
        generation = info["generation"]
        if generation >= 1 and not self.in_quiet_thread():
            self._middle_collections += 1
        if generation == 0 and self.in_quiet_thread():
            self._young_seen = False
            self._pacer.spare_older()
            return
        if generation >= 1 or self._pacing or self._own_collection:
            self.discover(None if self._own_collection else generation)
        elif self._quiet_threads and _older_generation_next():
            # The next collection promotes the young objects, and a cleaner may be the thread
            # that starts it: look at them now, and have this thread's next allocation start it.
            self.discover(generation)
            self.hurry()
        else:
            self._young_seen = False  # unscanned young objects move to the middle generation

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
        if not self._active:
            self._pacing = False
            self._pacer.restore()


#: The process-wide tracker; its owners are ``EagerSession`` objects.
def _older_generation_next() -> bool:
    """At the start of a young collection: whether the next one takes an older generation."""
    _, middle_count, oldest_count = gc.get_count()
    _, middle, oldest = gc.get_threshold()
    return 0 < middle < middle_count + 1 or 0 < oldest < oldest_count


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
    session: Owner, *, safe_points: bool, track_creation: bool, collector: CycleCollector
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
            ownership = session.ownership
            # Generated ops' Python fallbacks pass the type as bytes (b"Fill"), the C path as str.
            op = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
            for output in outputs:
                ownership.note_creation(output, op, where)
        if safe_points and collector.note(sum(map(tensor_nbytes, outputs))) is not None:
            collector.collect()

    return on_op
