"""The conftest.py of the real-suite gate's copy of Keras's own tests.

``benchmarks/realsuite.py`` copies this file next to the Keras test files it takes from the
installed wheel, as ``_gate/conftest.py`` above their package ``_gate/keras_src``. The wheel
ships the tests but not the Keras repository's root ``conftest.py``, which they expect: this is
its equivalent for the TensorFlow backend on one machine. It applies to the Keras copies only
(another library's suite is staged beside them, in ``_gate/sonnet_src``).

- It registers the repository's markers (``requires_trainable_backend``, ``multi_device``) and
  skips the tests that need what this machine lacks, as the repository's conftest does.
- It provides ``skip_if_backend``, which some test files import with ``from conftest import``.
- It applies the repository's ``filterwarnings`` setting (warnings are errors, except the
  categories it ignores) to these tests only, as a marker.
"""

from __future__ import annotations

import os

import pytest

# The Keras repository's [tool.pytest.ini_options] filterwarnings, in its order.
KERAS_FILTERWARNINGS = (
    "error",
    "ignore::DeprecationWarning",
    "ignore::ImportWarning",
    "ignore::RuntimeWarning",
    "ignore::PendingDeprecationWarning",
    "ignore::FutureWarning",
    "ignore::UserWarning",
    "ignore:Custom mask layers require a config",
)


def _backend() -> str:
    return os.environ.get("KERAS_BACKEND", "tensorflow")


def skip_if_backend(given_backend: str, reason: str) -> pytest.MarkDecorator:
    """Skip a test on one backend (the Keras repository's helper of the same name)."""
    return pytest.mark.skipif(_backend() == given_backend, reason=reason)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "requires_trainable_backend: mark test for trainable backend only"
    )
    config.addinivalue_line(
        "markers", "multi_device: mark test for running with multiple devices only"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "keras_src")
    requires_trainable_backend = pytest.mark.skipif(
        _backend() in ("numpy", "openvino"),
        reason="Trainer not implemented for NumPy and OpenVINO backend.",
    )
    # The repository's conftest counts devices for JAX and torch only: with TensorFlow,
    # multi-device tests are always skipped.
    requires_multiple_devices = pytest.mark.skip(reason="Requires multiple devices")
    filterwarnings = pytest.mark.filterwarnings(*KERAS_FILTERWARNINGS)
    for item in items:
        if not str(item.path).startswith(here + os.sep):
            continue
        # First among the test's own markers: pytest applies them in order, the last winning.
        item.add_marker(filterwarnings, append=False)
        if "requires_trainable_backend" in item.keywords:
            item.add_marker(requires_trainable_backend)
        if "multi_device" in item.keywords:
            item.add_marker(requires_multiple_devices)
