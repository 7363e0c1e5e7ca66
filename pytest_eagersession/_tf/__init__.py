"""Every touch of TensorFlow's and Keras's private API, and the one place importing TensorFlow.

This module imports TensorFlow lazily, with a message that says what to install, and checks
its version. The submodules, each importing TensorFlow's private modules on first use only:

- ``classes``: which class is which kind of resource, and the one table of handle attributes;
- ``context``: the eager context: executors, device policy, config, its caches;
- ``callbacks``: op callbacks kept installed across threads (``execute.execute``);
- ``resources``: destroying resource handles, the gradient registry, the replica-function
  cache, the default graph;
- ``opdefs``: the op registry and the graph-building helper of the op builder;
- ``state``: TensorFlow's and Keras's module state (random generators, registries, tapes);
- ``tracing`` and ``devices`` (the assertions' trace detection and device memory, once moved);
- ``names``: the table of every private name used, what uses it, the versions tested.

A TensorFlow upgrade is this folder to read, and ``tests/test_tf_names.py`` to run.
"""

from __future__ import annotations

import sys
from types import ModuleType

from pytest_eagersession.base.errors import TensorFlowMissingError
from pytest_eagersession.base.support_range import parse_version, version_text

MINIMUM_VERSION = (2, 16)

_INSTALL_HINT = (
    "install one TensorFlow distribution, for example "
    "`pip install 'pytest-eagersession[cpu]'` (tensorflow-cpu) or "
    "`pip install 'pytest-eagersession[tensorflow]'`"
)


def is_loaded() -> bool:
    """Whether some code already imported TensorFlow (we never import it just to look)."""
    return "tensorflow" in sys.modules


def is_ready() -> bool:
    """Whether TensorFlow is fully imported (never import it, never look at it half-imported)."""
    module = sys.modules.get("tensorflow")
    return module is not None and hasattr(module, "Variable") and hasattr(module, "__version__")


def tensorflow() -> ModuleType:
    """Import TensorFlow, or raise ``TensorFlowMissingError`` saying how to install it."""
    tf_module = sys.modules.get("tensorflow")
    if tf_module is None or not hasattr(tf_module, "__version__"):
        try:
            import tensorflow as tf

            tf_module = tf
        except ImportError as error:
            raise TensorFlowMissingError(
                f"pytest-eagersession needs TensorFlow {version_text(MINIMUM_VERSION)} or "
                f"newer, and `import tensorflow` failed ({error}); {_INSTALL_HINT}"
            ) from error
    # Checked whoever imported it: an older TensorFlow that other code imported first is no better.
    found = parse_version(str(getattr(tf_module, "__version__", "0")))
    if found < MINIMUM_VERSION:
        raise TensorFlowMissingError(
            f"pytest-eagersession needs TensorFlow {version_text(MINIMUM_VERSION)} or newer, "
            f"found {tf_module.__version__}; {_INSTALL_HINT}"
        )
    return tf_module
