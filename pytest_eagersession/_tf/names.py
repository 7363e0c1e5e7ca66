"""Every private TensorFlow and Keras name the package uses, what uses it, and the versions tested.

A TensorFlow upgrade starts here: ``tests/test_tf_names.py`` checks that each name resolves on
the installed TensorFlow (and Keras, where one is installed). A name is an attribute chain from
a module (``of`` empty) or an attribute of an object of the kind ``of`` names (the test makes
one of each kind). Names of the plain public API (``tf.constant``) are not listed.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_eagersession.base.support_range import TENSORFLOW_RANGE

#: The TensorFlow minor releases these names were tested on, oldest and newest.
TESTED_VERSIONS = TENSORFLOW_RANGE


@dataclass(frozen=True)
class PrivateName:
    """One private name: where it lives, and what of ours uses it."""

    module: str
    """The module it is found in (or the module of the object it is an attribute of)."""
    attribute: str
    """A dotted attribute chain from the module, or from an object of kind ``of``."""
    used_by: str
    """The function of ours that uses it (in ``_tf`` unless said)."""
    of: str = ""
    """For an attribute of an object: the kind of object (``variable``, ``context``, ...)."""
    required: bool = True
    """False for a name only some tested versions have (looked up with a default)."""

    @property
    def path(self) -> str:
        """``module.attribute``, or ``module:<of>.attribute`` for an object's attribute."""
        return f"{self.module}:<{self.of}>.{self.attribute}" if self.of else self.path_in_module

    @property
    def path_in_module(self) -> str:
        """``module.attribute``."""
        return f"{self.module}.{self.attribute}"


_OPS = "tensorflow.python.framework.ops"
_CONTEXT = "tensorflow.python.eager.context"
_POLYMORPHIC = "tensorflow.python.eager.polymorphic_function"

NAMES: tuple[PrivateName, ...] = (
    # classes: what is a resource of which kind
    PrivateName(
        _OPS, "EagerTensor", "classes.search_roots, classes.kind_bases, classes.tensor_measures"
    ),
    PrivateName("tensorflow.python.trackable.base", "Trackable", "classes.search_roots"),
    PrivateName("tensorflow.python.data.ops.iterator_ops", "OwnedIterator", "classes.kind_bases"),
    PrivateName(
        f"{_POLYMORPHIC}.polymorphic_function",
        "Function",
        "classes.kind_bases, tracing.function_label",
    ),
    PrivateName("tensorflow.python.ops.lookup_ops", "LookupInterface", "classes.kind_bases"),
    PrivateName("tensorflow.python.ops.variables", "Variable", "classes.kind_bases"),
    PrivateName("tensorflow.python.trackable.resource", "CapturableResource", "classes.kind_bases"),
    PrivateName(
        "tensorflow.python.ops.resource_variable_ops",
        "BaseResourceVariable",
        "classes.byte_holders",
    ),
    PrivateName(
        _OPS,
        "_num_elements",
        "classes.tensor_nbytes, classes.tensor_built, classes.tensor_measures",
        of="tensor",
    ),
    PrivateName(_OPS, "_datatype_enum", "classes.tensor_measures", of="tensor"),
    PrivateName("tensorflow.core.framework.types_pb2", "DataType", "classes.tensor_measures"),
    PrivateName("tensorflow.python.framework.dtypes", "as_dtype", "classes.tensor_measures"),
    PrivateName(_OPS, "_handle", "classes.HANDLES (destroy_handle)", of="variable"),
    PrivateName(
        "tensorflow.python.data.ops.iterator_ops",
        "_iterator_resource",
        "classes.HANDLES (owned_handle, destroy_handle)",
        of="iterator",
    ),
    PrivateName(
        "tensorflow.python.ops.lookup_ops",
        "_resource_handle",
        "classes.HANDLES (owned_handle, destroy_handle)",
        of="table",
    ),
    # context: the eager context
    PrivateName(_CONTEXT, "context", "context, callbacks"),
    PrivateName(_CONTEXT, "executor_scope", "context.executor_scope"),
    PrivateName(_CONTEXT, "device_policy", "context.device_policy"),
    PrivateName(_CONTEXT, "DEVICE_PLACEMENT_EXPLICIT", "context.device_policy"),
    PrivateName(_CONTEXT, "DEVICE_PLACEMENT_WARN", "context.device_policy"),
    PrivateName(_CONTEXT, "DEVICE_PLACEMENT_SILENT", "context.device_policy"),
    PrivateName(_CONTEXT, "DEVICE_PLACEMENT_SILENT_FOR_INT32", "context.device_policy"),
    PrivateName(_CONTEXT, "async_wait", "context.clear_caches"),
    PrivateName("tensorflow.python.eager.executor", "new_executor", "context.new_executor"),
    PrivateName(
        _CONTEXT,
        "_context_handle",
        "context.initialized (tracing.initialized_context too)",
        of="context",
    ),
    PrivateName(_CONTEXT, "_config", "context.apply_config", of="context"),
    PrivateName(_CONTEXT, "_clear_caches", "context.clear_caches", of="context"),
    PrivateName(_CONTEXT, "clear_kernel_cache", "context.clear_caches", of="context"),
    PrivateName(_CONTEXT, "list_function_names", "tracing.registered_function_names", of="context"),
    # callbacks: op callbacks across threads
    PrivateName(
        _CONTEXT, "add_op_callback", "callbacks.op_callback, callbacks.watch_thread", of="context"
    ),
    PrivateName(_CONTEXT, "remove_op_callback", "callbacks.op_callback", of="context"),
    PrivateName(_CONTEXT, "op_callbacks", "callbacks.op_callback", of="context"),
    PrivateName(
        "tensorflow.python.eager.execute",
        "execute",
        "callbacks.op_callback, callbacks.watch_thread",
    ),
    PrivateName(
        "tensorflow.python.eager.execute",
        "execute_with_callbacks",
        "callbacks.op_callback, callbacks.watch_thread",
    ),
    PrivateName("tensorflow.python.eager.execute", "quick_execute", "callbacks.op_callback"),
    PrivateName(
        "tensorflow.python.framework.constant_op",
        "convert_to_eager_tensor",
        "callbacks.watch_thread",
    ),
    # resources: destroying handles, registries that keep objects
    PrivateName(
        "tensorflow.python.ops.gen_resource_variable_ops", "mutex_v2", "resources.destroy_handle"
    ),
    PrivateName(
        "tensorflow.python.ops.gen_resource_variable_ops",
        "var_handle_op",
        "resources.destroy_handle",
    ),
    PrivateName("tensorflow.python.framework.dtypes", "int64", "resources.destroy_handle"),
    PrivateName(
        _OPS,
        "_gradient_registry._registry",
        "resources.gradient_registry, state.GRADIENT_REGISTRY_GLOBALS (explain)",
    ),
    PrivateName(_OPS, "gradient_registry", "state.GRADIENT_REGISTRY_GLOBALS (explain)"),
    PrivateName(
        "tensorflow.python.distribute.mirrored_run",
        "_cfer_fn_cache",
        "resources.replica_fn_caches, state.REPLICA_FN_CACHE_GLOBALS (explain)",
    ),
    PrivateName("tensorflow.python.eager.imperative_grad", "imperative_grad", "gradients.watch"),
    PrivateName(_OPS, "Graph", "resources.graph_of_node"),
    PrivateName(_OPS, "Operation", "resources.graph_of_node"),
    PrivateName("tensorflow.python.framework.tensor", "Tensor", "resources.graph_of_node"),
    PrivateName(
        _OPS,
        "_default_graph_stack.is_cleared",
        "resources.fresh_default_graph, state.DEFAULT_GRAPH_GLOBALS (explain)",
    ),
    PrivateName(
        _OPS, "_default_graph_stack._global_default_graph", "resources.fresh_default_graph"
    ),
    # opdefs: running one op by its type name
    PrivateName("tensorflow.python.framework.op_def_registry", "get", "opdefs.op_def"),
    PrivateName(
        "tensorflow.python.framework.op_def_library", "_apply_op_helper", "opdefs.apply_op"
    ),
    PrivateName("tensorflow.core.framework.tensor_pb2", "TensorProto", "opdefs.is_tensor_proto"),
    # state: module state of TensorFlow and Keras
    PrivateName(
        "tensorflow.python.ops.stateful_random_ops",
        "global_generator",
        "state.global_random_generator, state.RANDOM_GENERATOR_GLOBALS (explain)",
    ),
    PrivateName(
        "tensorflow.python.ops.stateful_random_ops",
        "_global_generator",
        "state.RANDOM_GENERATOR_GLOBALS (explain; absent from TensorFlow 2.21)",
        required=False,
    ),
    PrivateName(
        "tensorflow.python.ops.stateful_random_ops",
        "_state_var",
        "state.singleton_ids",
        of="generator",
    ),
    PrivateName(
        "keras.src.backend.common.global_state", "get_global_attribute", "state.singleton_ids"
    ),
    PrivateName(
        "keras.src.backend.common.variables", "_value", "state.singleton_ids", of="keras variable"
    ),
    PrivateName(
        "keras.src.saving.object_registration",
        "GLOBAL_CUSTOM_OBJECTS",
        "state.KERAS_CUSTOM_OBJECT_REGISTRIES (explain)",
    ),
    PrivateName(
        "keras.src.saving.object_registration",
        "GLOBAL_CUSTOM_NAMES",
        "state.KERAS_CUSTOM_OBJECT_REGISTRIES (explain)",
    ),
    PrivateName("tensorflow.python.eager.backprop", "GradientTape", "state.gradient_tape_class"),
    PrivateName("tensorflow.python.framework.ops", "Graph", "state.graph_class (explain)"),
    PrivateName(
        "tensorflow.python.eager.backprop", "_persistent", "state.tape_recording", of="tape"
    ),
    PrivateName("tensorflow.python.eager.backprop", "_tape", "state.tape_recording", of="tape"),
    # tracing: trace counting and where a trace came from. ``tracing._trace_origin`` also reads
    # the locals of ``_maybe_define_function``'s frame (``tracing_options``, with its
    # ``function_cache``, ``python_function`` and ``scope_type``) and of ``Function`` methods
    # (``self``), and leaves out functions defined under ``tensorflow/python/data/``.
    PrivateName(
        f"{_POLYMORPHIC}.transform",
        "CONCRETE_FUNCTION_CALLBACKS",
        "tracing.add_trace_callback, tracing.remove_trace_callback",
    ),
    PrivateName(
        f"{_POLYMORPHIC}.tracing_compilation",
        "_maybe_define_function",
        "tracing._trace_origin (by frame name)",
    ),
    PrivateName(
        f"{_POLYMORPHIC}.polymorphic_function",
        "_function_cache",
        "tracing._trace_origin",
        of="function",
    ),
    # tracing: naming traced functions and their graphs in chains (their ``name`` and
    # ``graph.name`` are public); a class of a module under ``tensorflow.python.saved_model``
    # is one the SavedModel loader restores
    PrivateName(f"{_POLYMORPHIC}.concrete_function", "ConcreteFunction", "tracing.function_label"),
    PrivateName(f"{_POLYMORPHIC}.atomic_function", "AtomicFunction", "tracing.function_label"),
    PrivateName("tensorflow.python.framework.func_graph", "FuncGraph", "tracing.function_label"),
    PrivateName("tensorflow.python.saved_model.load", "_WrapperFunction", "tracing.function_label"),
    PrivateName(
        "tensorflow.python.saved_model.function_deserialization",
        "RestoredFunction",
        "tracing.function_label",
    ),
)
"""The table: each private name once per use site's theme, by ``_tf`` submodule."""

#: Top-level packages whose private modules only ``_tf`` may name.
PRIVATE_PACKAGES = ("tensorflow.python", "tensorflow.core", "keras.src", "tf_keras.src")


def private_attributes() -> frozenset[str]:
    """Every ``_private`` attribute name in the table (the last part of each chain)."""
    return frozenset(
        part for name in NAMES for part in name.attribute.split(".") if part.startswith("_")
    )
