"""TensorFlow's eager context as a session uses it: executors, device policy, config, caches."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pytest_eagersession import _tf


def _context_module() -> Any:
    _tf.tensorflow()  # first: without TensorFlow, the error that says what to install
    from tensorflow.python.eager import context

    return context


def new_executor(*, enable_async: bool) -> Any:
    """A new eager executor (asynchronous when ``enable_async``)."""
    _context_module()
    from tensorflow.python.eager import executor

    return executor.new_executor(enable_async)


def executor_scope(executor: Any) -> contextlib.AbstractContextManager[None]:
    """Run the ops of the block on ``executor``."""
    manager: contextlib.AbstractContextManager[None] = _context_module().executor_scope(executor)
    return manager


def device_policy(name: str) -> contextlib.AbstractContextManager[None]:
    """Apply the device placement policy ``name`` (``EXPLICIT``, ``WARN``, ...) in the block."""
    context = _context_module()
    value = getattr(context, f"DEVICE_PLACEMENT_{name}")
    manager: contextlib.AbstractContextManager[None] = context.device_policy(value)
    return manager


@contextlib.contextmanager
def execution_scope(executor: Any | None, policy: str | None) -> Iterator[None]:
    """Run the ops of the block on ``executor`` and under the device placement ``policy``
    (None for either: TensorFlow's own)."""
    with contextlib.ExitStack() as stack:
        if executor is not None:
            stack.enter_context(executor_scope(executor))
        if policy is not None:
            stack.enter_context(device_policy(policy))
        yield


def initialized(ctx: Any) -> bool:
    """Whether the eager context ``ctx`` has started (an op or a device query ran)."""
    return getattr(ctx, "_context_handle", None) is not None


def apply_config(config_proto: Any) -> None:
    """Give TensorFlow's context a ConfigProto, which it only takes before its first op."""
    ctx = _context_module().context()
    if initialized(ctx):
        if ctx.config == config_proto:
            return
        raise RuntimeError(
            "cannot apply the session's config: TensorFlow's eager context is already "
            "initialized (an op or device query ran in this process), and a ConfigProto only "
            "takes effect before that; build this session before any TensorFlow op runs, "
            "or leave config unset"
        )
    ctx._config = config_proto


def clear_caches(*, kernels: bool) -> None:
    """Flush the eager context's caches that pin tensors, and wait for async executors.

    Clearing the kernel cache makes every op kind re-create its kernel on its next run (about
    0.1 ms each), so it is asked for only where it pays: at the close of long-lived sessions.
    """
    from tensorflow.python.eager import context

    ctx = context.context()
    if not initialized(ctx):
        return
    context.async_wait()
    ctx._clear_caches()
    if kernels:
        ctx.clear_kernel_cache()
