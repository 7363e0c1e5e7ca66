"""Device memory: each GPU's peak above its use at the start, from TensorFlow's allocator.

The allocator keeps one peak per device, process-wide; a meter resets it as it starts, so every
meter running then notes the peak so far first, and nested meters each keep their own.
"""

from __future__ import annotations

import contextlib
import threading

from pytest_eagersession._tf.devices import gpu_devices, memory_info, reset_peak
from pytest_eagersession.core.kinds import tensorflow_ready


class DeviceMemory:
    """TensorFlow's per-GPU allocator statistics (``tf.config.experimental``), by device name."""

    def devices(self) -> list[str]:
        """The logical GPU devices (``GPU:0``, ...), none without a GPU or before TF's context."""
        if not tensorflow_ready():
            return []
        return gpu_devices()

    def info(self, device: str) -> dict[str, int]:
        """``{"current": bytes, "peak": bytes}`` of ``device``."""
        return memory_info(device)

    def reset(self, device: str) -> None:
        """Make the device's peak its current use."""
        reset_peak(device)


DEVICE_MEMORY = DeviceMemory()
_RUNNING: list[DevicePeaks] = []
_RUNNING_LOCK = threading.Lock()


class DevicePeaks:
    """Each GPU's peak memory above its use at ``start``, measured until ``stop``.

    Errors of the allocator's statistics are ignored: a device that cannot say has no peak.
    """

    def __init__(self) -> None:
        self._start: dict[str, int] = {}
        self._peak: dict[str, int] = {}
        self._peaks: dict[str, int] = {}

    @property
    def peaks(self) -> dict[str, int]:
        """Per GPU, its peak memory above its use at the start (empty without a GPU)."""
        return dict(self._peaks)

    def start(self) -> None:
        """Note each GPU's use now and reset its peak (the running ones keep theirs)."""
        with contextlib.suppress(Exception):
            devices = DEVICE_MEMORY.devices()
            with _RUNNING_LOCK:
                for device in devices:
                    info = DEVICE_MEMORY.info(device)
                    for running in _RUNNING:  # an outer meter keeps its peak over our reset
                        running._note_peak(device, info["peak"])
                    self._start[device] = info["current"]
                    self._peak[device] = info["current"]
                    DEVICE_MEMORY.reset(device)
                _RUNNING.append(self)

    def stop(self) -> None:
        """Read each GPU's peak since ``start``."""
        with _RUNNING_LOCK:
            if self in _RUNNING:
                _RUNNING.remove(self)
        with contextlib.suppress(Exception):
            for device in DEVICE_MEMORY.devices():
                peak = DEVICE_MEMORY.info(device)["peak"]
                self._note_peak(device, peak)
                start = self._start.get(device, 0)
                self._peaks[device] = max(0, self._peak[device] - start)

    def _note_peak(self, device: str, peak: int) -> None:
        self._peak[device] = max(self._peak.get(device, 0), int(peak))
