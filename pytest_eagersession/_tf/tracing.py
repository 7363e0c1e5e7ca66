"""How tf.function traces are seen, and which functions the eager context has registered.

TensorFlow has no public hook for "a trace was made": this module appends to the private
``CONCRETE_FUNCTION_CALLBACKS`` list and reads the tracing frames' locals to learn which Python
function, and which tf.function object, the trace belongs to. Callers check first that
TensorFlow is imported (``kinds.tensorflow_ready``); nothing here imports it just to look.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Callable
from typing import Any, NamedTuple

from pytest_eagersession._tf import context
from pytest_eagersession.heap.frames import stack

#: Where TensorFlow's ``tf.data`` code lives: the functions it traces for itself are its own.
_TF_DATA_DIR = "/tensorflow/python/data/"


class TraceOrigin(NamedTuple):
    """What a trace being made belongs to."""

    function: Any
    """The Python function traced."""
    owner: Any
    """The tf.function object whose cache gets the trace, or None if it was not found."""
    creates_variables: bool
    """Whether it is traced in the variable-creating scope (the first call's first trace)."""


TraceCallback = Callable[[Any, TraceOrigin], None]


def add_trace_callback(on_trace: TraceCallback) -> Callable[[Any], None]:
    """Call ``on_trace(concrete_function, origin)`` for each trace TensorFlow counts.

    Counted is what ``experimental_get_tracing_count()`` counts: a concrete function added to a
    tf.function's cache. An exception of ``on_trace`` never reaches the traced tf.function.
    Returns the installed callback, for ``remove_trace_callback``.
    """
    from tensorflow.python.eager.polymorphic_function import transform

    def callback(concrete: Any) -> None:
        with contextlib.suppress(Exception):
            origin = _trace_origin(sys._getframe(1))
            if origin is not None:
                on_trace(concrete, origin)

    transform.CONCRETE_FUNCTION_CALLBACKS.append(callback)
    return callback


def remove_trace_callback(callback: Callable[[Any], None]) -> None:
    """Undo ``add_trace_callback``."""
    from tensorflow.python.eager.polymorphic_function import transform

    callbacks = transform.CONCRETE_FUNCTION_CALLBACKS
    for index in range(len(callbacks) - 1, -1, -1):
        if callbacks[index] is callback:
            del callbacks[index]


def _trace_origin(frame: types.FrameType | None) -> TraceOrigin | None:
    """The origin of the trace being made below ``frame``; None when TensorFlow does not count it.

    ``tracing_compilation._maybe_define_function`` has the tracing options (the Python function,
    the cache, the scope); the ``polymorphic_function`` frame above it whose ``_function_cache``
    is that cache is the tf.function object.
    """
    cache: Any = None
    options: Any = None
    for caller in stack(frame):
        code = caller.f_code
        if options is None:
            if code.co_name == "_maybe_define_function" and code.co_filename.endswith(
                "tracing_compilation.py"
            ):
                options = caller.f_locals.get("tracing_options")
                cache = getattr(options, "function_cache", None)
                if cache is None:  # no cache: TensorFlow does not count it as a trace
                    return None
        elif code.co_filename.endswith("polymorphic_function.py"):
            candidate: Any = caller.f_locals.get("self")
            if getattr(candidate, "_function_cache", None) is cache:
                return TraceOrigin(
                    candidate.python_function, candidate, _creates_variables(options)
                )
    if options is None:
        return None
    return TraceOrigin(getattr(options, "python_function", None), None, _creates_variables(options))


def _creates_variables(options: Any) -> bool:
    return getattr(getattr(options, "scope_type", None), "name", "") == "VARIABLE_CREATION"


def is_tf_data_function(location: str | None) -> bool:
    """Whether a function defined at ``location`` (``path:line``) is one of tf.data's own."""
    return location is not None and _TF_DATA_DIR in location


def concrete_name(concrete: Any) -> str:
    """The name of a traced (concrete) function in the eager context."""
    name = getattr(concrete, "name", "")
    return name.decode() if isinstance(name, bytes) else str(name)


def signature_text(concrete: Any) -> str:
    """The input signature a concrete function was traced for, as TensorFlow prints it."""
    try:
        parameters = concrete.function_type.parameters.values()
        return "(" + ", ".join(str(parameter) for parameter in parameters) + ")"
    except Exception:
        return str(getattr(concrete, "structured_input_signature", "(?)"))


def initialized_context() -> Any | None:
    """TensorFlow's eager context, or None while it is not initialized (no devices yet)."""
    from tensorflow.python.eager import context as context_module

    ctx = context_module.context()
    return ctx if context.initialized(ctx) else None


def registered_function_names() -> frozenset[str]:
    """Names of the functions registered with the eager context (none before it starts)."""
    ctx = initialized_context()
    if ctx is None:
        return frozenset()
    try:
        return frozenset(
            name.decode() if isinstance(name, bytes) else str(name)
            for name in ctx.list_function_names()
        )
    except Exception:
        return frozenset()


#: The classes of traced functions and their graphs, by module: a chain names each by its
#: function's name.
_FUNCTION_CLASSES = (
    ("tensorflow.python.eager.polymorphic_function.polymorphic_function", "Function"),
    ("tensorflow.python.eager.polymorphic_function.concrete_function", "ConcreteFunction"),
    ("tensorflow.python.eager.polymorphic_function.atomic_function", "AtomicFunction"),
    ("tensorflow.python.framework.func_graph", "FuncGraph"),
)
#: Where the functions a SavedModel's loader restores come from.
_SAVED_MODEL_MODULES = "tensorflow.python.saved_model."


def function_label(obj: object) -> str | None:
    """``FuncGraph 'step'``: a traced function or its graph with the Python function's name.

    A function ``tf.saved_model.load`` restored says so. None for anything else, and before
    TensorFlow imported those modules (never imported here).
    """
    kind = type(obj)
    for module_name, class_name in _FUNCTION_CLASSES:
        cls = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(cls, type) and type.__subclasscheck__(cls, kind):
            break
    else:
        return None
    try:
        found: Any = obj
        # a concrete function's graph is built; an AtomicFunction's may be built on demand
        name = found.graph.name if class_name == "ConcreteFunction" else found.name
    except Exception:
        return kind.__name__
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    label = f"{kind.__name__} {str(name)!r}"
    if kind.__module__.startswith(_SAVED_MODEL_MODULES):
        label += " loaded from a SavedModel"
    return label
