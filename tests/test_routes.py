"""Holders explained before are looked in first: the same chains as the walk's, without a walk."""

from __future__ import annotations

import gc
import sys
import types
from typing import ClassVar

import pytest
import tensorflow  # noqa: F401  (imported before the inner runs: they would import it again)
from support import run_inner

from pytest_eagersession.reports import explain
from pytest_eagersession.reports import routes as routes_module
from pytest_eagersession.reports.routes import KnownRoutes


class Thing:
    pass


@pytest.fixture
def library(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A third-party library's module with a cache of lists and a registry class."""
    module = types.ModuleType("fake_library")
    module.CACHE = {"batches": [], "other": []}  # type: ignore[attr-defined]

    class Registry:
        entries: ClassVar[list[object]] = []

    module.Registry = Registry  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_library", module)
    return module


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many objects each walk of the heap looked for."""
    counted: list[int] = []
    real = explain.walk

    def counting(wanted, *args, **kwargs):  # type: ignore[no-untyped-def]
        counted.append(len(wanted))
        return real(wanted, *args, **kwargs)

    monkeypatch.setattr(explain, "walk", counting)
    return counted


def test_a_known_holder_gives_the_walks_chain_without_a_walk(
    library: types.ModuleType, walks: list[int]
) -> None:
    routes = KnownRoutes()
    first, second, third = Thing(), Thing(), Thing()
    library.CACHE["batches"].append(first)
    library.Registry.entries.append(second)
    learned = explain.explain_all([first, second], routes=routes)
    assert walks == [2]
    assert len(routes) == 2

    library.CACHE["batches"].append(third)
    library.Registry.entries.append(Thing())
    [again] = explain.explain_all([third], routes=routes)
    assert walks == [2, 0]  # found by the route: the walk had nothing left to look for
    assert routes.hits == 1
    [walked] = explain.explain_all([third])  # no routes: the walk's own answer
    assert (
        again.chain
        == walked.chain
        == "fake_library.CACHE (dict) -> ['batches'] (list) -> [1] -> Thing"
    )
    assert (again.root, again.internal, again.holder) == (walked.root, False, walked.holder)
    assert learned[1].chain == "fake_library.Registry.entries (list) -> [0] -> Thing"


def test_a_route_that_leads_nowhere_is_dropped_and_the_walk_finds_the_rest(
    library: types.ModuleType, walks: list[int]
) -> None:
    routes = KnownRoutes()
    kept = Thing()
    library.CACHE["batches"].append(kept)
    explain.explain_all([kept], routes=routes)
    library.CACHE = {"batches": [kept]}  # type: ignore[attr-defined]  # a new dict, other places
    del sys.modules["fake_library"].CACHE
    library.ELSEWHERE = [Thing(), kept]  # type: ignore[attr-defined]
    [found] = explain.explain_all([kept], routes=routes)
    assert walks == [1, 1]
    assert found.chain == "fake_library.ELSEWHERE (list) -> [1] -> Thing"
    assert routes.hits == 0  # the old route is gone, the new one learned
    assert len(routes) == 1


def _registered(library: types.ModuleType, key: str) -> Thing:
    """A class registered under ``key`` in the library's registry, holding a new Thing."""
    kept = Thing()
    library.REGISTRY[key] = type(f"Model_{key}", (), {"call": kept})
    return kept


def test_an_entry_under_a_new_key_is_found_near_the_known_holder(
    library: types.ModuleType, walks: list[int]
) -> None:
    library.REGISTRY = {"other": 1}  # type: ignore[attr-defined]
    routes = KnownRoutes()
    explain.explain_all([_registered(library, "a")], routes=routes)
    assert walks == [1]

    kept = _registered(library, "b")  # the next test's class: a key of its own
    [near] = explain.explain_all([kept], routes=routes)
    assert walks == [1, 0]  # no walk of the heap
    assert routes.hits == 1
    [walked] = explain.explain_all([kept])
    assert near.chain == walked.chain == "fake_library.REGISTRY (dict) -> ['b'].call -> Thing"
    assert (near.root, near.internal, near.holder) == (walked.root, False, walked.holder)

    [again] = explain.explain_all([_registered(library, "c")], routes=routes)
    assert walks == [1, 0, 1, 0]
    assert again.chain == "fake_library.REGISTRY (dict) -> ['c'].call -> Thing"


def test_a_leak_that_was_a_global_itself_gives_a_route_that_only_looks_at_globals(
    library: types.ModuleType, walks: list[int]
) -> None:
    routes = KnownRoutes()
    library.KEPT = Thing()  # type: ignore[attr-defined]
    explain.explain_all([library.KEPT], routes=routes)
    assert len(routes) == 1  # a route of no links: the module's globals

    library.AGAIN = Thing()  # type: ignore[attr-defined]
    elsewhere = Thing()
    library.CACHE["batches"].append(elsewhere)
    again, walked = explain.explain_all([library.AGAIN, elsewhere], routes=routes)
    assert walks == [1, 1]  # the global by the route, the rest by the walk
    assert again.chain == "fake_library.AGAIN -> Thing"
    assert walked.chain == "fake_library.CACHE (dict) -> ['batches'] (list) -> [0] -> Thing"


class Graph:
    """A traced function's graph: what it captured, by id."""

    def __init__(self, captured: object) -> None:
        self.captures = {id(captured): captured}


def _traced(library: types.ModuleType, key: str) -> Thing:
    """A call cached under ``key``, whose graph captured a new Thing (a key of its own twice)."""
    kept = Thing()
    library.GRAPHS[key] = (Graph(kept),)
    return kept


def test_an_entry_several_keys_deep_is_found_along_the_routes_types(
    library: types.ModuleType, walks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    library.GRAPHS = {f"filler{n}": [[n]] for n in range(200)}  # type: ignore[attr-defined]
    routes = KnownRoutes()
    explain.explain_all([_traced(library, "a")], routes=routes)
    assert walks == [1]
    monkeypatch.setattr(routes_module, "NEARBY_OBJECTS", 50)  # the fillers exhaust that search

    del library.GRAPHS["a"]  # the route's entry is gone: its places lead elsewhere now
    library.GRAPHS["late"] = [[0]]
    kept = _traced(library, "b")
    [typed] = explain.explain_all([kept], routes=routes)
    assert walks == [1, 0]  # no walk of the heap
    assert routes.hits == 1
    [walked] = explain.explain_all([kept])
    assert typed.chain == walked.chain
    assert typed.chain == (
        f"fake_library.GRAPHS (dict) -> ['b'] (tuple) -> [0] (Graph).captures (dict) -> "
        f"[{id(kept)}] -> Thing"
    )

    monkeypatch.setattr(routes_module, "TYPED_OBJECTS", 50)  # bounded too: the walk finds it
    monkeypatch.setattr(routes_module, "YOUNG_OBJECTS", 0)  # (what the test made, all of it)
    [bounded] = explain.explain_all([_traced(library, "c")], routes=routes)
    assert walks == [1, 0, 1, 1]
    assert bounded.chain is not None
    assert bounded.chain.startswith("fake_library.GRAPHS (dict) -> ['c']")


class Variable:
    """Another kind of object than ``Thing``, cached the same way by another global."""


def test_the_search_along_types_takes_only_routes_that_held_the_kind_wanted(
    library: types.ModuleType, walks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A route to Things through a large cache does not spend the search's budget when a
    Variable is wanted: the route that held a Variable before is tried, and finds it."""
    library.GRAPHS = {f"filler{n}": [[n]] for n in range(200)}  # type: ignore[attr-defined]
    library.VARIABLES = {}  # type: ignore[attr-defined]
    routes = KnownRoutes()
    first = Variable()
    library.VARIABLES["a"] = (Graph(first),)
    explain.explain_all([first], routes=routes)  # learned first: tried last
    explain.explain_all([_traced(library, "a")], routes=routes)
    assert walks == [1, 1]
    monkeypatch.setattr(routes_module, "NEARBY_OBJECTS", 0)
    monkeypatch.setattr(routes_module, "TYPED_OBJECTS", 150)  # less than the Things' cache

    del library.VARIABLES["a"]  # its entry is gone: a new one under a new key, elsewhere
    library.VARIABLES["late"] = [[0]]
    second = Variable()
    library.VARIABLES["b"] = (Graph(second),)
    [typed] = explain.explain_all([second], routes=routes)
    assert walks == [1, 1, 0]  # found along the Variables' route, no walk
    assert typed.chain == (
        f"fake_library.VARIABLES (dict) -> ['b'] (tuple) -> [0] (Graph).captures (dict) -> "
        f"[{id(second)}] -> Variable"
    )


def test_the_search_near_a_holder_is_bounded_and_leaves_the_rest_to_the_walk(
    library: types.ModuleType, walks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    library.REGISTRY = {}  # type: ignore[attr-defined]
    routes = KnownRoutes()
    explain.explain_all([_registered(library, "a")], routes=routes)
    library.REGISTRY.update({f"filler{n}": [n] for n in range(50)})
    monkeypatch.setattr(routes_module, "NEARBY_OBJECTS", 20)  # spent on the fillers
    monkeypatch.setattr(routes_module, "TYPED_OBJECTS", 0)  # only the search near the holder
    monkeypatch.setattr(routes_module, "YOUNG_OBJECTS", 0)
    kept = _registered(library, "b")
    [found] = explain.explain_all([kept], routes=routes)
    assert walks == [1, 1]
    assert routes.hits == 0
    assert found.chain == "fake_library.REGISTRY (dict) -> ['b'].call -> Thing"

    elsewhere = Thing()
    library.UNRELATED = [[elsewhere]]  # type: ignore[attr-defined]
    monkeypatch.setattr(routes_module, "NEARBY_OBJECTS", 20_000)
    [walked] = explain.explain_all([elsewhere], routes=routes)
    assert walks == [1, 1, 1]  # not near any known holder: the walk's
    assert walked.chain == "fake_library.UNRELATED (list) -> [0] (list) -> [0] -> Thing"


def test_routes_keep_no_object_and_start_only_at_modules(
    library: types.ModuleType, walks: list[int]
) -> None:
    routes = KnownRoutes(most=2)
    kept = [Thing() for _ in range(3)]
    library.A, library.B, library.C = ([obj] for obj in kept)  # type: ignore[attr-defined]
    explain.explain_all(kept, routes=routes)
    assert len(routes) == 2  # the most recent two
    # Everything the routes reach is their own bookkeeping: names, numbers, type names.
    reached, pending = {id(routes): routes}, [routes]
    while pending:
        for child in gc.get_referents(pending.pop()):
            if id(child) not in reached and not isinstance(child, type):
                reached[id(child)] = child
                pending.append(child)
    kinds = {type(obj).__name__ for obj in reached.values()}
    allowed = {"KnownRoutes", "OrderedDict", "dict", "tuple", "str", "int", "Route", "bool"}
    assert kinds <= allowed | {"frozenset"}

    def held_by_a_frame() -> None:
        local = Thing()
        assert explain.explain_all([local], routes=routes, stack=[sys._getframe()])[0].chain

    held_by_a_frame()
    assert len(routes) == 2  # a frame's chain is not a route


LIBRARY = """
    import tensorflow as tf

    SEEN = []

    def remember(tensor):
        SEEN.append(tensor)
"""

SUITE = """
    import pytest
    import tensorflow as tf

    import shared_cache

    @pytest.mark.parametrize("size", [1, 2, 3, 4])
    def test_remembers(size):
        shared_cache.remember(tf.ones([size]))
"""

CONFTEST = """
    from pytest_eagersession.plugin.verdicts import ROUTES_KEY

    def pytest_terminal_summary(terminalreporter, config):
        terminalreporter.write_line(f"route hits: {config.stash[ROUTES_KEY].hits}")
"""


def test_in_a_run_the_first_report_walks_and_the_next_follow_its_route(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(shared_cache=LIBRARY, test_remember=SUITE, conftest=CONFTEST)
    result = run_inner(pytester)
    result.assert_outcomes(passed=4, errors=4)
    for index in range(4):
        result.stdout.fnmatch_lines([f"*held by shared_cache.SEEN (list) -> [[]{index}[]] -> *"])
    result.stdout.fnmatch_lines(["route hits: 3"])


GRAPH_CACHE_LIBRARY = """
    CACHE = {}

    class Graph:
        def __init__(self, captured):
            self.captures = {id(captured): captured}

    class Operation:
        def __init__(self, variable):
            def assign():
                return variable

            self.outputs = [assign]
"""

GRAPH_CACHE_SUITE = """
    import tensorflow as tf

    import graph_cache

    def test_caches_a_graph():
        graph_cache.CACHE["a"] = (graph_cache.Graph(tf.ones([2])),)

    def test_caches_a_graph_whose_operation_closes_over_a_variable():
        graph = graph_cache.Graph(tf.ones([2]))
        graph.operations = [graph_cache.Operation(tf.Variable([1.0]))]
        graph_cache.CACHE["b"] = (graph,)
"""


@pytest.mark.parametrize("young_objects", [routes_module.YOUNG_OBJECTS, 0])
def test_a_new_entry_beneath_a_known_holder_is_found_through_what_the_test_made(
    pytester: pytest.Pytester,
    walks: list[int],
    monkeypatch: pytest.MonkeyPatch,
    young_objects: int,
) -> None:
    """GPflow's cache of traced graphs: the route learned from the first leak leads to a
    graph's captures; the next test's variable hangs in a new entry, through the graph's
    operations and a closure, where neither the route's places nor its types lead. What the
    test made leads there from the cache: no walk of the heap (without that search, one)."""
    monkeypatch.setattr(routes_module, "YOUNG_OBJECTS", young_objects)
    monkeypatch.setattr(routes_module, "NEARBY_OBJECTS", 0)  # the search near the globals, off
    pytester.makepyfile(graph_cache=GRAPH_CACHE_LIBRARY, test_graphs=GRAPH_CACHE_SUITE)
    result = run_inner(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*held by graph_cache.CACHE (dict) -> [[]'b'[]] (tuple) -> [[]0[]] (Graph).operations"
            " (list) -> [[]0[]] (Operation).outputs (list) -> [[]0[]] (function) -> closure"
            " variable -> ResourceVariable*"
        ]
    )
    walked = [wanted for wanted in walks if wanted]  # a walk for nothing costs nothing
    assert len(walked) == (1 if young_objects else 2)
