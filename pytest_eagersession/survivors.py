"""What outlives a session: finding survivors, telling expected ones apart, and destroying leaks.

Also the TensorFlow-side housekeeping a session does around that: a fresh default graph while it
is active, and TensorFlow's tensor-pinning caches cleared before survivors are counted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import re
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, Union

from pytest_eagersession.kinds import (
    ITERATOR,
    RESOURCE,
    TABLE,
    VARIABLE,
    Description,
    describe,
    owned_handle,
)
from pytest_eagersession.tracking import Ownership


@dataclass(frozen=True)
class Survivor:
    """A tracked object still alive after its session's cleanup: text and numbers only.

    ``ref`` is a weak reference to the object, for tools that explain who holds it; the record
    never keeps the object alive.
    """

    description: Description
    seq: int
    op: str | None = None
    created_at: str | None = None
    ref: weakref.ref[Any] | None = field(default=None, compare=False, repr=False)
    allowed: bool = False

    @property
    def kind(self) -> str:
        """``tensor``, ``variable``, ``resource handle``, ``iterator``, ``table``, ..."""
        return self.description.kind

    def summary(self) -> str:
        """One line saying what it is and, when known, what made it and where."""
        text = f"{self.kind}: {self.description.summary()}"
        if self.op:
            text += f", made by {self.op}"
        if self.created_at:
            text += f" at {self.created_at}"
        return text


AllowPredicate: TypeAlias = Callable[[Survivor], bool]
AllowFilter: TypeAlias = Union[AllowPredicate, str, Sequence[Union[AllowPredicate, str]]]  # noqa: UP007


def check_allow_filter(allowed: AllowFilter | None) -> AllowPredicate | None:
    """Turn an allow filter into one predicate; a bad one raises ``TypeError`` or ``ValueError``."""
    if allowed is None:
        return None
    items: Sequence[AllowPredicate | str] = (
        [allowed] if isinstance(allowed, str) or callable(allowed) else allowed
    )
    predicates: list[AllowPredicate] = []
    for item in items:
        if isinstance(item, str):
            try:
                pattern = re.compile(item)
            except re.error as error:
                raise ValueError(
                    f"allow pattern {item!r} is not a regular expression: {error}"
                ) from None
            predicates.append(_pattern_predicate(pattern))
        elif callable(item):
            predicates.append(item)
        else:
            raise TypeError(
                "allow takes a predicate on a Survivor, a regular expression searched in its "
                f"summary, or a list of those; got {type(item).__name__}"
            )
    return lambda survivor: any(predicate(survivor) for predicate in predicates)


def _pattern_predicate(pattern: re.Pattern[str]) -> AllowPredicate:
    def matches(survivor: Survivor) -> bool:
        return pattern.search(survivor.summary()) is not None

    return matches


def find(
    ownership: Ownership,
    since: int,
    is_detached: Callable[[object], bool],
    allow: AllowPredicate | None,
) -> list[Survivor]:
    """The survivors among ``ownership``'s records; collects garbage only when some are alive."""
    alive = ownership.alive(since)
    try:
        if not alive:
            return []
        alive = []  # hold nothing while the collector runs
        gc.collect()
        alive = ownership.alive(since)
        if not alive:
            return []
        ignored = tensorflow_singletons()
        handles = set()
        for obj, kind, _ in alive:
            handle = owned_handle(obj, kind)
            if handle is not None:
                handles.add(id(handle))
        found = []
        for obj, kind, seq in alive:
            if id(obj) in ignored or id(obj) in handles or is_detached(obj):
                continue
            op, where = ownership.creation_of(obj)
            if op is None:
                op, where = ownership.creation_of(owned_handle(obj, kind))
            survivor = Survivor(describe(obj, kind), seq, op, where, weakref.ref(obj))
            if allow is not None and allow(survivor):
                survivor = dataclasses.replace(survivor, allowed=True)
            found.append(survivor)
        return found
    finally:
        del alive


def tensorflow_singletons() -> set[int]:
    """Ids of objects TensorFlow and Keras create once per process on first use."""
    ids: set[int] = set()
    random_ops = sys.modules.get("tensorflow.python.ops.stateful_random_ops")
    generator = getattr(random_ops, "global_generator", None)
    if generator is not None:
        ids.add(id(generator))
        state = getattr(generator, "_state_var", None)
        if state is not None:
            ids.update((id(state), id(getattr(state, "handle", None))))
    return ids


def destroy_resources(survivors: Iterable[Survivor]) -> int:
    """Cut these survivors off their resources; the objects then fail when used.

    Eager resources are reference-counted by their handle tensors, so TensorFlow's
    ``DestroyResourceOp`` cannot delete them while the handle lives. Instead the owner's handle is
    replaced by a handle to a resource that does not exist, named so that TensorFlow's error says
    what happened; the real resource is freed once nothing else holds its handle.
    """
    destroyed = 0
    for survivor in survivors:
        obj = survivor.ref() if survivor.ref is not None else None
        if obj is not None and _replace_handle(obj, survivor):
            destroyed += 1
        del obj
    return destroyed


_HANDLE_ATTRIBUTES = {
    VARIABLE: "_handle",
    ITERATOR: "_iterator_resource",
    TABLE: "_resource_handle",
    RESOURCE: "_resource_handle",
}


def _replace_handle(obj: Any, survivor: Survivor) -> bool:
    attribute = _HANDLE_ATTRIBUTES.get(survivor.kind)
    if attribute is None or not hasattr(obj, attribute):
        return False
    from tensorflow.python.framework import dtypes
    from tensorflow.python.ops import gen_resource_variable_ops

    name = survivor.description.name or survivor.description.type.rsplit(".", 1)[-1]
    try:
        if survivor.kind == VARIABLE:
            dtype, shape = obj.dtype.base_dtype, obj.shape
        else:
            dtype, shape = dtypes.int64, []
        dead = gen_resource_variable_ops.var_handle_op(
            dtype=dtype,
            shape=shape,
            container="pytest-eagersession",
            shared_name=f"{name} was deleted when its eager session closed",
        )
        setattr(obj, attribute, dead)
    except Exception:  # an object that refuses is left as it is, and still reported
        return False
    return True


def clear_tensorflow_caches(*, kernels: bool) -> None:
    """Flush the eager context's caches that pin tensors, and wait for async executors.

    Clearing the kernel cache makes every op kind re-create its kernel on its next run (about
    0.1 ms each), so it is asked for only where it pays: at the close of long-lived sessions.
    """
    from tensorflow.python.eager import context

    ctx = context.context()
    if getattr(ctx, "_context_handle", None) is None:
        return
    context.async_wait()
    ctx._clear_caches()
    if kernels:
        ctx.clear_kernel_cache()


@contextlib.contextmanager
def fresh_default_graph() -> Iterator[None]:
    """A new default graph for eager code, as TensorFlow's own test decorators use."""
    from tensorflow.python.eager import context
    from tensorflow.python.framework import ops

    if not context.executing_eagerly():
        yield
        return
    with ops.Graph().as_default(), context.eager_mode():
        yield


@contextlib.contextmanager
def op_callback(callback: Callable[..., None]) -> Iterator[None]:
    """Install ``callback`` as an op callback of the calling thread while the block runs."""
    from tensorflow.python.framework import op_callbacks

    op_callbacks.add_op_callback(callback)
    try:
        yield
    finally:
        with contextlib.suppress(KeyError):
            op_callbacks.remove_op_callback(callback)
