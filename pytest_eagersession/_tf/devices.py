"""The GPUs TensorFlow placed, and its allocator's statistics for each (current and peak bytes).

Callers check first that TensorFlow is imported (``kinds.tensorflow_ready``).
"""

from __future__ import annotations

from pytest_eagersession import _tf
from pytest_eagersession._tf.tracing import initialized_context

#: The logical GPUs, listed once the context started (TensorFlow fixes them then).
_GPUS: list[str] | None = None


def gpu_devices() -> list[str]:
    """The logical GPU devices (``GPU:0``, ...); none without a GPU or before the context starts."""
    global _GPUS
    if _GPUS is None:
        if initialized_context() is None:
            return []
        tf = _tf.tensorflow()
        logical = tf.config.list_logical_devices("GPU")
        _GPUS = [device.name.split("device:", 1)[-1] for device in logical]
    return list(_GPUS)


def memory_info(device: str) -> dict[str, int]:
    """``{"current": bytes, "peak": bytes}`` of ``device``, from TensorFlow's allocator."""
    return dict(_tf.tensorflow().config.experimental.get_memory_info(device))


def reset_peak(device: str) -> None:
    """Make the device's peak its current use."""
    _tf.tensorflow().config.experimental.reset_memory_stats(device)
