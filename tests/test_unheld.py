"""Proving backwards that no root reaches an object, and the walk's shortcuts that rely on it."""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator

import pytest

from pytest_eagersession.heap.holders import _BULKY, PACKAGE_DIR, Root, thread_roots, walk
from pytest_eagersession.heap.listing import BOUNDARY, instances_of, referrers, whole_heap_visible
from pytest_eagersession.heap.unheld import unheld


class Payload:
    """Something to look for: an instance the collector tracks."""


def cycle_only() -> Payload:
    """A payload that only a reference cycle keeps: no root reaches it."""
    target = Payload()
    cycle: list[object] = [target]
    cycle.append(cycle)
    return target


@pytest.fixture
def module() -> Iterator[types.ModuleType]:
    scratch = types.ModuleType("scratch_unheld")
    sys.modules[scratch.__name__] = scratch
    yield scratch
    del sys.modules[scratch.__name__]


def roots_of(module: types.ModuleType) -> set[int]:
    return {id(module), id(vars(module))}


@pytest.fixture
def visible_heap() -> None:
    """Skip where someone else froze the heap: its references are hidden from a proof."""
    if not whole_heap_visible():
        pytest.skip("this interpreter starts with frozen objects (Python 3.12.1): no proof runs")


def test_referrers_never_hand_back_a_tuple() -> None:
    target = Payload()
    in_list = [target]
    in_tuple = (target, 1)
    found, tuples = referrers((target,))
    assert any(obj is in_list for obj in found)
    assert not any(isinstance(obj, tuple) for obj in found)
    assert frozenset({id(target), id(1)}) in tuples
    assert frozenset({id(target)}) not in tuples  # the one that carried it to the collector
    del in_tuple


def test_instances_of_a_python_class_include_its_subclasses() -> None:
    class Base:
        pass

    class Derived(Base):
        pass

    made = [Base(), Derived(), Derived()]
    found = instances_of(Base)
    assert sorted(map(id, found)) == sorted(map(id, made))
    found.clear()


@pytest.mark.usefixtures("visible_heap")
def test_an_object_only_a_cycle_keeps_is_proved_unheld(module: types.ModuleType) -> None:
    target = cycle_only()
    assert unheld([target], roots=roots_of(module), package_dir=PACKAGE_DIR) == {id(target)}


def test_a_module_global_is_not_unheld(module: types.ModuleType) -> None:
    target = Payload()
    module.KEPT = {"deep": [[target]]}  # type: ignore[attr-defined]
    assert unheld([target], roots=roots_of(module), package_dir=PACKAGE_DIR) == set()


def test_a_tuple_referrer_leaves_the_object_to_the_walk(module: types.ModuleType) -> None:
    target = Payload()
    kept = (target,)
    cycle: list[object] = [kept]
    cycle.append(cycle)
    del kept, cycle
    assert unheld([target], roots=roots_of(module), package_dir=PACKAGE_DIR) == set()


def test_a_root_threads_local_is_not_unheld(module: types.ModuleType) -> None:
    target = Payload()
    started, done = threading.Event(), threading.Event()

    def keep(held: Payload) -> None:
        started.set()
        done.wait(10)
        del held

    thread = threading.Thread(target=keep, args=(target,))
    thread.start()
    try:
        started.wait(10)
        threads = {id(root.obj) for root in thread_roots()}
        assert unheld([target], roots=roots_of(module) | threads, package_dir=PACKAGE_DIR) == set()
    finally:
        done.set()
        thread.join()


@pytest.mark.usefixtures("visible_heap")
def test_a_callers_local_is_not_unheld_when_its_frame_is_a_root(module: types.ModuleType) -> None:
    target = Payload()
    frame = sys._getframe()
    assert unheld([target], roots=roots_of(module), package_dir=PACKAGE_DIR) == {id(target)}
    assert unheld([target], roots=roots_of(module) | {id(frame)}, package_dir=PACKAGE_DIR) == set()
    del frame


@pytest.mark.usefixtures("visible_heap")
def test_the_proof_sees_through_the_boundary(module: types.ModuleType) -> None:
    """The line a session draws (the test's own) freezes what is older: each pass of the proof
    thaws it for its one call into C, and draws it again."""
    holder = Payload()
    module.HELD = holder  # type: ignore[attr-defined]
    target = cycle_only()
    held = Payload()
    holder.kept = held  # type: ignore[attr-defined]
    BOUNDARY.draw()  # both are older than the line now: frozen
    assert BOUNDARY.drawn
    found = unheld([target, held], roots=roots_of(module), package_dir=PACKAGE_DIR)
    assert found == {id(target)}
    assert BOUNDARY.drawn


FROZEN_BY_SOMEONE_ELSE = """
import gc, sys, types
from pytest_eagersession.heap.unheld import unheld

class Payload:
    pass

target = Payload()
cycle = [target]
cycle.append(cycle)
del cycle
module = types.ModuleType("scratch")
gc.freeze()  # what is frozen may refer to it unseen: nothing can be proved
print(sorted(unheld([target], roots={id(module), id(vars(module))})))
"""


def test_a_heap_someone_else_froze_leaves_everything_to_the_walk() -> None:
    import subprocess

    result = subprocess.run(
        [sys.executable, "-c", FROZEN_BY_SOMEONE_ELSE], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def tiers_of(module: types.ModuleType) -> list[list[Root]]:
    return [[Root(module.__name__, module, "module")]]


def test_an_object_in_a_bulky_container_only_is_found_through_it(
    module: types.ModuleType,
) -> None:
    target = Payload()
    module.BIG = [[index] for index in range(_BULKY)] + [target]  # type: ignore[attr-defined]
    found = walk([target], tiers_of(module))
    try:
        root, path = found.chains[id(target)]
        assert root.obj is module
        assert path[1] is module.BIG  # type: ignore[attr-defined]
        assert path[-1] is target
    finally:
        found.close()


def test_a_chain_avoids_a_bulky_container_when_another_exists(module: types.ModuleType) -> None:
    target = Payload()
    module.BIG = [target] + [[index] for index in range(_BULKY)]  # type: ignore[attr-defined]
    module.SMALL = {"a": {"b": [target]}}  # type: ignore[attr-defined]
    found = walk([target], tiers_of(module))
    try:
        _, path = found.chains[id(target)]
        assert path[1] is module.SMALL  # type: ignore[attr-defined]
    finally:
        found.close()


def test_an_unheld_object_beside_a_bulky_container_is_not_found(
    module: types.ModuleType,
) -> None:
    target = cycle_only()
    module.BIG = [[index] for index in range(_BULKY + 1)]  # type: ignore[attr-defined]
    held = Payload()
    module.SMALL = [held]  # type: ignore[attr-defined]
    found = walk([target, held], tiers_of(module))
    try:
        assert set(found.chains) == {id(held)}
        assert not found.timed_out
    finally:
        found.close()


class Heavy:
    """Stands for a class the caller has walked last (TensorFlow's graphs)."""

    def __init__(self, held: object) -> None:
        self.held = held


def test_a_chain_avoids_what_is_walked_last_when_another_exists(
    module: types.ModuleType,
) -> None:
    target = Payload()
    module.HEAVY = Heavy(target)  # type: ignore[attr-defined]
    module.LONG = {"a": {"b": {"c": [target]}}}  # type: ignore[attr-defined]
    found = walk([target], tiers_of(module), last=(Heavy,))
    try:
        _, path = found.chains[id(target)]
        assert path[1] is module.LONG  # type: ignore[attr-defined]
    finally:
        found.close()
    found = walk([target], tiers_of(module))
    try:
        _, path = found.chains[id(target)]
        assert path[1] is module.HEAVY  # type: ignore[attr-defined]
    finally:
        found.close()


def test_what_is_walked_last_still_leads_to_what_only_it_holds(module: types.ModuleType) -> None:
    target = Payload()
    module.HEAVY = [Heavy(target)]  # type: ignore[attr-defined]
    found = walk([target], tiers_of(module), last=(Heavy,))
    try:
        _, path = found.chains[id(target)]
        assert path[2] is module.HEAVY[0]  # type: ignore[attr-defined]
        assert path[-1] is target
    finally:
        found.close()


@pytest.mark.usefixtures("visible_heap")
def test_the_proofs_first_pass_collects_instances_of_a_class(module: types.ModuleType) -> None:
    target = cycle_only()
    heavy = [Heavy(None), Heavy(None)]
    collected: list[object] = []
    proved = unheld(
        [target], roots=roots_of(module), package_dir=PACKAGE_DIR, also=Heavy, instances=collected
    )
    assert proved == {id(target)}
    assert {id(obj) for obj in heavy} <= {id(obj) for obj in collected}
    assert all(isinstance(obj, Heavy) for obj in collected)
    collected.clear()
