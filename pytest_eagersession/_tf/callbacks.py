"""Op callbacks that stay installed while any session in any thread needs them."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

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
    with _OP_CALLBACKS_LOCK:
        _op_callbacks_installed += 1
        execute.execute = execute.execute_with_callbacks
    try:
        yield
    finally:
        with contextlib.suppress(KeyError):
            ctx.remove_op_callback(callback)
        with _OP_CALLBACKS_LOCK:
            _op_callbacks_installed -= 1
            if _op_callbacks_installed == 0 and not ctx.op_callbacks:
                execute.execute = execute.quick_execute
