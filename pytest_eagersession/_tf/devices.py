"""The GPUs TensorFlow placed, and its allocator's statistics for each (current and peak bytes).

Callers check first that TensorFlow is imported (``kinds.tensorflow_ready``).
"""

from __future__ import annotations

from pytest_eagersession import _tf
from pytest_eagersession._tf.tracing import initialized_context


def gpu_devices() -> list[str]:
    """The logical GPU devices (``GPU:0``, ...); none without a GPU or before the context starts."""
    if initialized_context() is None:
        return []
    tf = _tf.tensorflow()
    return [device.name.split("device:", 1)[-1] for device in tf.config.list_logical_devices("GPU")]


def memory_info(device: str) -> dict[str, int]:
    """``{"current": bytes, "peak": bytes}`` of ``device``, from TensorFlow's allocator."""
    return dict(_tf.tensorflow().config.experimental.get_memory_info(device))


def reset_peak(device: str) -> None:
    """Make the device's peak its current use."""
    _tf.tensorflow().config.experimental.reset_memory_stats(device)
