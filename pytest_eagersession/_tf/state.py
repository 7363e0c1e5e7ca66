"""TensorFlow's and Keras's module state: process-wide objects made once, and registries.

Objects made once per process on first use are never a test's leak; registries filled by user
code (custom Keras objects, an installed random generator, gradients, tf.distribute's cache,
the default graph's Python functions) and gradient tapes are named in explanations.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from typing import Any

#: Keras's registry of custom objects (``keras.saving.register_keras_serializable``).
KERAS_CUSTOM_OBJECT_REGISTRIES = (
    "keras.src.saving.object_registration.GLOBAL_CUSTOM_OBJECTS",
    "keras.src.saving.object_registration.GLOBAL_CUSTOM_NAMES",
)
#: Where TensorFlow keeps the global random generator (``tf.random.set_global_generator``).
RANDOM_GENERATOR_GLOBALS = (
    "tensorflow.python.ops.stateful_random_ops.global_generator",
    "tensorflow.python.ops.stateful_random_ops._global_generator",
)
#: TensorFlow's gradient registry (``tf.RegisterGradient``; ``tf.custom_gradient`` in a graph;
#: ``tf.saved_model.load`` for a loaded model's custom gradients). Both names are one registry.
GRADIENT_REGISTRY_GLOBALS = (
    "tensorflow.python.framework.ops.gradient_registry",
    "tensorflow.python.framework.ops._gradient_registry",
)
#: ``tf.distribute``'s cache of a function per strategy (``strategy.run`` of a tf.function).
REPLICA_FN_CACHE_GLOBALS = ("tensorflow.python.distribute.mirrored_run._cfer_fn_cache",)
#: The stack of default graphs; the global default graph keeps the Python functions of
#: ``tf.py_function``, ``tf.numpy_function`` and ``Dataset.from_generator``.
DEFAULT_GRAPH_GLOBALS = ("tensorflow.python.framework.ops._default_graph_stack",)


def global_random_generator() -> object:
    """TensorFlow's global random generator, or None while nothing made one."""
    random_ops = sys.modules.get("tensorflow.python.ops.stateful_random_ops")
    return getattr(random_ops, "global_generator", None)


def singleton_ids(generator_before: weakref.ref[Any] | None = None) -> set[int]:
    """Ids of objects TensorFlow and Keras create once per process on first use.

    The global random generator counts when TensorFlow made it on first use (there was none
    before) or it is still the one there was: not when the session's code installed its own.
    """
    ids: set[int] = set()
    generator = global_random_generator()
    if generator is not None and (generator_before is None or generator_before() is generator):
        ids.add(id(generator))
        state = getattr(generator, "_state_var", None)
        if state is not None:
            ids.update((id(state), id(getattr(state, "handle", None))))
    # Keras 3's unseeded random ops draw from a global SeedGenerator made on first use (per
    # thread); its state is a Keras variable around a tf.Variable.
    keras_state = sys.modules.get("keras.src.backend.common.global_state")
    get_attribute = getattr(keras_state, "get_global_attribute", None)
    if get_attribute is not None:
        with contextlib.suppress(Exception):
            seed_state = getattr(get_attribute("global_seed_generator"), "state", None)
            variable = getattr(seed_state, "_value", None)
            if variable is not None:
                ids.update((id(variable), id(getattr(variable, "handle", None))))
    return ids


def gradient_tape_class() -> type | None:
    """``tf.GradientTape``, once TensorFlow is imported (None before: never import it to look)."""
    backprop = sys.modules.get("tensorflow.python.eager.backprop")
    tape_class = getattr(backprop, "GradientTape", None)
    return tape_class if isinstance(tape_class, type) else None


def graph_class() -> type | None:
    """``tf.Graph`` (``FuncGraph``'s base), once TensorFlow is imported; None before."""
    ops = sys.modules.get("tensorflow.python.framework.ops")
    graph = getattr(ops, "Graph", None)
    return graph if isinstance(graph, type) else None


def tape_recording(tape: object) -> str | None:
    """What a ``tf.GradientTape`` still holds a recording for, or None when it holds none.

    ``"persistent"``: a persistent tape, which keeps its recording until it is dropped;
    ``"unused"``: a tape whose ``gradient()`` was never called, which keeps it until then.
    """
    if getattr(tape, "_tape", None) is None:
        return None
    return "persistent" if getattr(tape, "_persistent", False) else "unused"
