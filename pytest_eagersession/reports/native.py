"""The native holder of an object that nothing in Python holds, and who holds that holder.

A walk from the roots cannot follow references that TensorFlow keeps in C++. Of those, a
``tf.GradientTape`` keeps every tensor it recorded, until its ``gradient()`` is called or, for a
persistent tape, until the tape is dropped: such a tape is the likely holder of a tensor with no
Python holder, and the useful answer is who holds the tape. TensorFlow's other holders (the
gradient registry, ``tf.distribute``'s cache, the default graph, traced functions' graphs)
keep what they hold in Python, where the walk finds them and names them itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pytest_eagersession._tf.state import gradient_tape_class, tape_recording
from pytest_eagersession.heap.holders import Root, walk
from pytest_eagersession.heap.listing import instances_of

#: Renders a chain from the root of the given name (``explain.render_chain``).
Renderer = Callable[[Sequence[Any], str], str]

#: How long each kind of tape keeps its recording, by ``tape_recording``'s answer.
_KEEPS = {
    "persistent": "such a tape keeps every tensor it recorded until it is dropped",
    "unused": "a tape keeps every tensor it recorded until its gradient() is called",
}
_ADJECTIVE = {"persistent": "persistent ", "unused": ""}
_CLAUSE = {"persistent": "", "unused": ", whose gradient() was never called,"}


def native_holder(
    tiers: Sequence[Sequence[Root]],
    *,
    deadline: float,
    render: Renderer,
    tapes: Sequence[object] | None = None,
) -> str | None:
    """``the persistent GradientTape held by ...: ...``, or None when no native holder is known.

    Lists the live tapes that hold a recording (costly: call it only for an object the walk
    from ``tiers`` found no chain to), walks ``tiers`` until ``deadline`` for who holds them,
    and names the first one reached. ``tapes``: the live tapes, when the caller found them
    already. Keeps nothing.
    """
    tape_class = gradient_tape_class()
    if tape_class is None:
        return None
    live = list(instances_of(tape_class) if tapes is None else tapes)
    recording = [tape for tape in live if tape_recording(tape)]
    live.clear()
    try:
        if not recording:
            return None
        found = walk(recording, tiers, deadline=deadline)
        try:
            for tape in recording:
                hit = found.chains.get(id(tape))
                if hit is not None:
                    root, chain = hit
                    return _tape_text(tape, render(chain, root.name), len(recording) - 1)
            return None
        finally:
            found.close()
    finally:
        recording.clear()


def _tape_text(tape: object, holder: str, others: int) -> str:
    recording = tape_recording(tape) or "unused"
    more = f" (and {others} more)" if others else ""
    return (
        f"the {_ADJECTIVE[recording]}GradientTape{_CLAUSE[recording]} held by {holder}{more}: "
        f"{_KEEPS[recording]}"
    )
