"""Byte limits: the peak of tracked TensorFlow bytes, and of each GPU's memory, against a limit."""

from __future__ import annotations

from types import TracebackType

from pytest_eagersession.assertions.devices import DevicePeaks
from pytest_eagersession.assertions.errors import MemoryLimitError
from pytest_eagersession.assertions.findings import LargeObject
from pytest_eagersession.assertions.limits import LimitBlock
from pytest_eagersession.assertions.tracked_bytes import TrackedBytes
from pytest_eagersession.base.sizes import format_bytes, parse_size

#: Largest objects listed at a memory peak.
LARGEST_AT_PEAK = 5


class ByteMeter:
    """The peak of tracked TensorFlow bytes while active, and of each GPU's memory.

    Tracked bytes are the buffer sizes of the EagerTensors (strings, resource handles and
    variants excluded) and tf.Variables made while the meter runs, counted while they are
    alive. Op outputs are seen at once (an op callback), other tensors and variables (constants,
    ``convert_to_tensor``, variables) at the next op after a collection of the youngest gc
    generation listed them, or when the meter stops. Not counted: temporaries inside an op or a
    tf.function, TensorFlow's caches, NumPy arrays (a tensor sharing its buffer with one counts
    once). Under ``IN_BACKGROUND`` a tensor the code drops while the session's cleaner reads its
    size lives until the read ends: a peak may then exceed the code's own by that one tensor.
    Where a GPU is present, ``device_peaks`` has each GPU's peak memory above its use at the
    start, from TensorFlow's allocator.
    """

    def __init__(self, limit: int | str | None = None, *, largest: int = LARGEST_AT_PEAK) -> None:
        self.limit = None if limit is None else parse_size(limit)
        self._tracked = TrackedBytes(self.limit, largest)
        self._devices = DevicePeaks()

    @property
    def peak_bytes(self) -> int:
        """The most tracked bytes alive at once."""
        return self._tracked.peak

    @property
    def current_bytes(self) -> int:
        """Tracked bytes alive now (once stopped: when it stopped)."""
        return self._tracked.current

    @property
    def objects_made(self) -> int:
        """Tensors and variables with a buffer made while the meter ran, alive or not."""
        return self._tracked.made

    @property
    def device_peaks(self) -> dict[str, int]:
        """Per GPU, its peak memory above its use at the start (empty without a GPU)."""
        return self._devices.peaks

    def largest_at_peak(self) -> list[LargeObject]:
        """The largest objects alive at the peak (taken only past the limit, within 1/16)."""
        return self._tracked.largest_at_peak()

    def start(self) -> ByteMeter:
        """Start measuring; what is alive already is not counted."""
        if self._tracked.running:
            raise RuntimeError("this ByteMeter is already running")
        self._tracked.start()
        self._devices.start()
        return self

    def stop(self) -> None:
        """Stop measuring (the figures stay)."""
        if not self._tracked.running:
            return
        try:
            self._tracked.stop()
        finally:
            self._devices.stop()

    def __enter__(self) -> ByteMeter:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def check(self, where: str = "The block") -> None:
        """Raise ``MemoryLimitError`` when a peak passed the limit (no limit: never)."""
        if self.limit is None:
            return
        text = self.limit_text(where)
        if text is not None:
            peak = max([self.peak_bytes, *self.device_peaks.values()])
            raise MemoryLimitError(text, peak, self.limit)

    def limit_text(self, where: str) -> str | None:
        """The report of the peaks over the limit, or None."""
        limit = self.limit
        if limit is None:
            return None
        lines: list[str] = []
        if self.peak_bytes > limit:
            lines.append(
                f"{where} peaked at {format_bytes(self.peak_bytes)} of tracked TensorFlow "
                f"objects, over its max_bytes of {format_bytes(limit)} ({limit} B)."
            )
            largest = self.largest_at_peak()
            if largest:
                total = sum(item.nbytes for item in largest)
                lines.append(
                    f"  The largest alive at the peak ({format_bytes(total)} of "
                    f"{format_bytes(self._tracked.snapshot_peak)}):"
                )
                for number, item in enumerate(largest, start=1):
                    state = "still alive" if item.alive else "freed since"
                    lines.append(f"    {number}. {item.summary} ({state})")
        for device, peak in sorted(self.device_peaks.items()):
            if peak > limit:
                lines.append(
                    f"{where} raised {device}'s memory by {format_bytes(peak)} at its peak, "
                    f"over its max_bytes of {format_bytes(limit)} (TensorFlow's allocator: "
                    "tensors, temporaries, workspaces)."
                )
        return "\n".join(lines) if lines else None


class ByteLimit(LimitBlock[ByteMeter, int]):
    """``max_bytes``'s context manager and decorator."""

    def __init__(self, limit: int | str, where: str | None) -> None:
        super().__init__(parse_size(limit), where)

    @property
    def meter(self) -> ByteMeter:
        """The meter of the latest ``with`` block."""
        return self._started()

    def _begin(self) -> ByteMeter:
        return ByteMeter(self._limit).start()

    def _end(self, probe: ByteMeter, *, check: bool) -> None:
        probe.stop()
        if check:
            probe.check(self._where or "The block")


def max_bytes(limit: int | str, *, where: str | None = None) -> ByteLimit:
    """Fail when the block's (or decorated call's) peak tracked bytes pass ``limit``.

    ``limit`` is bytes or a size such as ``"64 MiB"``; with a GPU, each GPU's peak memory above
    its use at the start must stay under it too. ``with max_bytes("64 MiB") as meter:`` or
    ``@max_bytes("64 MiB")``. Raises ``MemoryLimitError``; a bad size raises ``ValueError``.
    """
    return ByteLimit(limit, where)
