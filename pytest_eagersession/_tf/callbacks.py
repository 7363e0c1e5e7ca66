"""Op callbacks that stay installed while any session in any thread needs them; watching what
one thread makes."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

_OP_CALLBACKS_LOCK = threading.Lock()
_op_callbacks_installed = 0


@contextlib.contextmanager
def op_callback(callback: Callable[..., None]) -> Iterator[None]:
    """Install ``callback`` as an op callback of the calling thread while the block runs.

    Ops that leave the C fast path, and tf.function calls, run callbacks only while TensorFlow's
    ``execute.execute`` is patched. ``op_callbacks.remove_op_callback`` undoes that patch as soon
    as the *calling thread* has no callback left, which would silence the callbacks of sessions
    active in other threads; so the patch stays until the last of our callbacks is removed.
    """
    global _op_callbacks_installed
    from tensorflow.python.eager import context, execute

    ctx = context.context()
    ctx.add_op_callback(callback)
    _count_callback()
    try:
        yield
    finally:
        with contextlib.suppress(KeyError):
            ctx.remove_op_callback(callback)
        with _OP_CALLBACKS_LOCK:
            _op_callbacks_installed -= 1
            if _op_callbacks_installed == 0 and not ctx.op_callbacks:
                execute.execute = execute.quick_execute


def watch_thread(note: Callable[[object], None]) -> None:
    """Hand ``note`` each eager tensor the calling thread makes from now until it ends.

    Two ways in, since neither sees everything: an op callback of this thread (op callbacks
    are thread-local: other threads' ops stay on the C fast path), which sees every op's
    outputs, a ``tf.function`` call's included; and a wrap of TensorFlow's eager constant
    maker, which sees ``tf.constant`` and the conversion of Python and NumPy values, made
    without an op. The callback is never removed (it ends with the thread's own state), so
    ``execute.execute`` keeps calling callbacks for the rest of the process: a check of an
    empty list per op in the other threads' ops that leave the fast path.
    """
    from tensorflow.python.eager import context

    def on_op(
        op_type: str,
        inputs: object,
        attrs: object,
        outputs: object,
        op_name: str | None = None,
        graph: object = None,
    ) -> None:
        if graph is None and isinstance(outputs, (list, tuple)):
            for output in outputs:
                note(output)

    _wrap_constants()
    _THREAD_NOTES.note = note
    context.context().add_op_callback(on_op)
    _count_callback()


def _count_callback() -> None:
    """Count one more op callback of ours, and have ``execute.execute`` run callbacks."""
    global _op_callbacks_installed
    from tensorflow.python.eager import execute

    with _OP_CALLBACKS_LOCK:
        _op_callbacks_installed += 1
        execute.execute = execute.execute_with_callbacks


#: The watched thread's ``note``, for the eager constants it makes.
_THREAD_NOTES = threading.local()
#: TensorFlow's own eager constant maker while ours wraps it, else None.
_wrapped_maker: Callable[..., Any] | None = None


def _wrap_constants() -> None:
    """Wrap TensorFlow's eager constant maker (once): a watched thread's constants are noted.

    Every thread's ``tf.constant`` pays for the wrap (about half a microsecond, a tenth of a
    small constant's cost) while it is in place: ``unwrap_constants`` takes it away.
    """
    global _wrapped_maker
    from tensorflow.python.framework import constant_op

    with _OP_CALLBACKS_LOCK:
        if _wrapped_maker is not None:
            return
        make = constant_op.convert_to_eager_tensor

        def convert_to_eager_tensor(value: Any, ctx: Any, dtype: Any = None) -> Any:
            made = make(value, ctx, dtype)
            note = getattr(_THREAD_NOTES, "note", None)
            if note is not None:
                note(made)
            return made

        functools.update_wrapper(convert_to_eager_tensor, make)
        constant_op.convert_to_eager_tensor = convert_to_eager_tensor
        _wrapped_maker = make


def unwrap_constants() -> None:
    """Put TensorFlow's eager constant maker back (no watched thread needs it any more).

    A thread watched before sees its ops alone from now on, until ``watch_thread`` runs again.
    """
    global _wrapped_maker
    from tensorflow.python.framework import constant_op

    with _OP_CALLBACKS_LOCK:
        if _wrapped_maker is not None:
            constant_op.convert_to_eager_tensor = _wrapped_maker
            _wrapped_maker = None
