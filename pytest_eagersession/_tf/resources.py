"""Destroying TensorFlow resources, and the TensorFlow registries that keep objects alive.

Resource handles are replaced on the objects that own them; the gradient registry, the
``tf.distribute`` replica-function cache and the default graph are TensorFlow's module state
that a session releases or swaps.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import weakref
from collections.abc import Iterator
from typing import Any

from pytest_eagersession._tf.classes import HANDLES, VARIABLE

#: The container the dead handles are made in.
CONTAINER = "pytest-eagersession"


def destroy_handle(obj: Any, kind: str, name: str) -> bool:
    """Replace the resource handle ``obj`` owns by a handle to a resource that does not exist.

    The resource is freed once nothing else holds its handle; ``obj`` then fails when used, and
    TensorFlow's error names ``name``. False when ``obj`` has no handle or refuses the new one.
    """
    attribute = HANDLES.get(kind)
    if attribute is None or not hasattr(obj, attribute.replace):
        return False
    from tensorflow.python.framework import dtypes
    from tensorflow.python.ops import gen_resource_variable_ops

    shared_name = f"{name} was deleted when its eager session closed"
    try:
        if kind == VARIABLE:
            # Not a VarHandleOp: assigning through a handle to a missing variable creates it,
            # which would bring the variable back (one shared by every variable of that name).
            # A mutex under that name makes every variable op fail, naming the variable.
            dead = gen_resource_variable_ops.mutex_v2(container=CONTAINER, shared_name=shared_name)
        else:
            dead = gen_resource_variable_ops.var_handle_op(
                dtype=dtypes.int64, shape=[], container=CONTAINER, shared_name=shared_name
            )
        setattr(obj, attribute.replace, dead)
    except Exception:  # an object that refuses is left as it is, and still reported
        return False
    return True


def gradient_registry() -> dict[str, Any] | None:
    """TensorFlow's registry of gradient functions by name, once TensorFlow made it."""
    ops = sys.modules.get("tensorflow.python.framework.ops")
    registry = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    return registry if isinstance(registry, dict) else None


def replica_fn_caches() -> list[weakref.WeakKeyDictionary[Any, Any]]:
    """``tf.distribute``'s caches of a function per strategy (``call_for_each_replica``)."""
    mirrored_run = sys.modules.get("tensorflow.python.distribute.mirrored_run")
    cache = getattr(mirrored_run, "_cfer_fn_cache", None)
    return [cache] if isinstance(cache, weakref.WeakKeyDictionary) else []


def graph_of_node(obj: object) -> Any:
    """The graph ``obj`` is (a ``tf.Graph``) or belongs to (a graph tensor or op), or None."""
    graph_class, node_classes, eager_tensor = _graph_classes()
    if isinstance(obj, graph_class):
        return obj
    if isinstance(obj, node_classes) and not isinstance(obj, eager_tensor):
        node: Any = obj
        return node.graph
    return None


@functools.cache
def _graph_classes() -> tuple[type, tuple[type, ...], type]:
    from tensorflow.python.framework import ops, tensor

    return ops.Graph, (tensor.Tensor, ops.Operation), ops.EagerTensor


@contextlib.contextmanager
def fresh_default_graph() -> Iterator[None]:
    """A new global default graph for the calling thread while the block runs.

    What eager code ties to the default graph (``from_generator``'s and ``py_function``'s Python
    functions) then dies with the block. The graph is swapped in place of the thread's global
    default one, not pushed on the stack of nested graphs, so that ``reset_default_graph()``
    (``keras.backend.clear_session()``, ``tf.test.TestCase.setUp``) works inside the block
    as it works outside. Inside a ``with graph.as_default()`` nothing is changed.
    """
    from tensorflow.python.framework import ops

    # The stack is read through the module, never kept in a local: this generator's frame lives
    # while the block runs, and a chain to what the default graph keeps would go through it.
    if not ops._default_graph_stack.is_cleared():
        yield
        return
    saved = ops._default_graph_stack._global_default_graph
    ops._default_graph_stack._global_default_graph = None  # TensorFlow makes one on first use
    try:
        yield
    finally:
        ops._default_graph_stack._global_default_graph = saved
