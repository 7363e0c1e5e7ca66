"""The garbage proof: trial deletion over a small set says "dead" only of what is dead."""

from __future__ import annotations

import ctypes
import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_eagersession.heap import garbage


class Node:
    """A plain object that takes attributes and weak references."""


#: Module state, as a test's leak would keep it.
KEPT: list[object] = []


@pytest.fixture(autouse=True)
def no_collections() -> Iterator[None]:
    """No collection runs while a test builds its garbage: the proof must find it as it is."""
    gc.disable()
    try:
        yield
    finally:
        KEPT.clear()
        gc.enable()
        gc.collect()


def cycle_holding(payload: object) -> weakref.ref[Node]:
    """Two nodes in a cycle, the first holding ``payload``; returns a weak reference to it."""
    first, second = Node(), Node()
    first.other, second.other = second, first
    first.payload = payload
    return weakref.ref(first)


def proven(target: object, *seeds: object) -> bool:
    """Whether ``target`` is proven garbage (it and ``seeds`` held only weakly here)."""
    ref = weakref.ref(target)
    seed_refs = [weakref.ref(seed) for seed in seeds]
    del target, seeds
    return bool(garbage.unreachable([ref], seed_refs))


def test_a_dead_cycle_is_proven_garbage() -> None:
    ref = cycle_holding(Node())
    assert garbage.unreachable([ref]) == {id(ref())}


def test_a_cycle_that_module_state_holds_is_not() -> None:
    ref = cycle_holding(Node())
    KEPT.append(ref())
    assert garbage.unreachable([ref]) == set()
    KEPT.clear()
    assert garbage.unreachable([ref]) == {id(ref())}


def test_a_cycle_that_a_running_frames_local_holds_is_not() -> None:
    ref = cycle_holding(Node())
    local = ref()
    assert garbage.unreachable([ref]) == set()
    del local
    assert garbage.unreachable([ref]) == {id(ref())}


def test_a_reference_that_native_code_holds_keeps_it_reachable() -> None:
    """A reference the collector cannot see (native code's) counts as one from a root."""
    ref = cycle_holding(Node())
    native = ctypes.py_object(ref())
    ctypes.pythonapi.Py_IncRef(native)
    del native
    try:
        assert garbage.unreachable([ref]) == set()
    finally:
        ctypes.pythonapi.Py_DecRef(ctypes.py_object(ref()))
    assert garbage.unreachable([ref]) == {id(ref())}


def wrapped_node() -> weakref.ref[Node]:
    """A node that holds a function whose closure holds the node (as Keras's layers do)."""
    node = Node()

    def wrapper() -> Node:
        return node

    node.call = wrapper
    return weakref.ref(node)


def test_a_cycle_through_a_closure_cell_is_proven() -> None:
    ref = wrapped_node()
    assert ref() is not None
    assert garbage.unreachable([ref]) == {id(ref())}


def test_a_target_held_by_a_dead_cycle_needs_the_cycle_as_a_seed() -> None:
    """What a dead cycle holds is proven only if the set reaches the cycle: the seeds do."""
    leaf = Node()
    holder = cycle_holding(leaf)
    leaf_ref = weakref.ref(leaf)
    del leaf
    assert garbage.unreachable([leaf_ref]) == set()  # the cycle holds it: reachable, unproven
    assert garbage.unreachable([leaf_ref], [holder]) == {id(leaf_ref())}
    KEPT.append(holder())
    assert garbage.unreachable([leaf_ref], [holder]) == set()


def test_a_target_only_weak_references_reach_is_garbage_and_a_dead_one_is_left_out() -> None:
    node = Node()
    node.itself = node
    node.watcher = weakref.ref(node)
    ref = weakref.ref(node)
    dead = weakref.ref(Node())
    del node
    assert dead() is None
    assert garbage.unreachable([ref, dead]) == {id(ref())}


def test_a_set_past_the_limit_proves_nothing() -> None:
    ref = cycle_holding([Node() for _ in range(50)])
    assert garbage.unreachable([ref], limit=10) == set()
    assert garbage.unreachable([ref], limit=100) == {id(ref())}


def test_module_globals_do_not_join_the_set() -> None:
    """A function in the cycle leads to its module's globals; the walk stays out of them."""
    namespace: dict[str, Any] = {}
    module_globals = {"KEPT": KEPT, "__builtins__": __builtins__}
    exec("def function():\n    return KEPT\n", module_globals, namespace)
    function: Callable[[], Any] = namespace.pop("function")
    ref = cycle_holding(function)
    del function, module_globals
    assert garbage.unreachable([ref], limit=20) == {id(ref())}


def test_the_proof_leaves_no_reference_of_its_own() -> None:
    """After the proof, the targets have the references they had: none of ours remains."""
    ref = cycle_holding(Node())
    before = sys_refcount(ref)
    assert garbage.unreachable([ref], [ref])
    assert sys_refcount(ref) == before


def sys_refcount(ref: weakref.ref[Any]) -> int:
    import sys

    return sys.getrefcount(ref())


@pytest.mark.parametrize("seeded", [False, True])
def test_proven_garbage_is_what_the_collector_frees(seeded: bool) -> None:
    """Against the collector itself: of 50 targets among 200 linked objects, the proof's garbage
    is exactly what ``gc.collect()`` frees when seeded with all 200 (unseeded, a part of it),
    never an object it keeps."""
    nodes = [Node() for _ in range(200)]
    for index, node in enumerate(nodes):
        node.next = nodes[(index * 7 + 3) % 200] if index % 3 else None
        node.back = nodes[(index * 13 + 5) % 200] if index % 5 == 0 else None
    KEPT.extend(nodes[::37])
    refs = [weakref.ref(node) for node in nodes]
    ids = [id(node) for node in nodes]
    del nodes, node
    pairs = zip(ids[::4], refs[::4], strict=True)
    targets = [(key, ref) for key, ref in pairs if ref() is not None]
    proof = garbage.unreachable([ref for _, ref in targets], refs if seeded else [])
    gc.enable()
    gc.collect()
    freed = {key for key, ref in targets if ref() is None}
    assert freed, "the graph should have garbage among the targets"
    assert proof <= freed
    if seeded:
        assert proof == freed


def test_older_objects_that_take_weak_references_stay_out_of_the_set() -> None:
    """Given the ids of what is new, the walk stops at older objects that take weak references
    (so it does not spread into older state), and what they hold counts as held."""
    older = [Node() for _ in range(100)]
    ref = cycle_holding(older)  # a list: no weak reference, so it joins; its nodes do not
    new = {id(ref()), id(ref().other)}
    assert garbage.unreachable([ref], limit=50) == set()  # walked into the older nodes: too many
    assert garbage.unreachable([ref], new=new, limit=50) == {id(ref())}
    older[0].held = ref()
    assert garbage.unreachable([ref], new=new, limit=50) == set()
