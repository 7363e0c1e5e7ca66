"""The survivor check collects the whole heap only for a survivor it would report and no chain
from a live root explains: a leak whose holder the walk (or a route) finds costs that walk alone.
"""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
import tensorflow  # noqa: F401  (imported before the inner runs: they would import it again)
from support import run_inner

from pytest_eagersession.core.tracking import TRACKER

MODULE_CACHE_SUITE = """
    import pytest
    import tensorflow as tf

    @pytest.fixture(scope="module")
    def cache():
        return []

    def test_fills_the_modules_cache(cache):
        cache.append(tf.ones([4]))

    def test_fills_it_again(cache):
        cache.append(tf.ones([4]))
        assert len(cache) == 2

    KEPT = []

    def test_keeps_one_itself():
        KEPT.append(tf.ones([4]))
"""


@pytest.fixture
def whole_collections(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The survivor check's whole-heap collections, counted."""
    calls: list[int] = []
    collect_whole = TRACKER.collect_whole

    def counted() -> Any:
        calls.append(1)
        return collect_whole()

    monkeypatch.setattr(TRACKER, "collect_whole", counted)
    return calls


def test_a_survivor_a_wider_fixture_takes_over_costs_no_whole_collection(
    pytester: pytest.Pytester, whole_collections: list[int]
) -> None:
    pytester.makepyfile(test_shared=MODULE_CACHE_SUITE)
    result = run_inner(pytester, "-p", "no:randomly", "-k", "fills")
    result.assert_outcomes(passed=2)
    assert whole_collections == []  # the module's fixture value reaches both tensors
    result = run_inner(pytester, "-p", "no:randomly", "-k", "itself")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*held by test_shared.KEPT (list)*"])
    assert whole_collections == []  # the walk's chain from the module proves it alive


REPEATED_LEAK_SUITE = """
    import pytest
    import tensorflow as tf

    KEPT = []

    @pytest.mark.parametrize("step", range(3))
    def test_keeps_one(step):
        KEPT.append(tf.ones([4]))
"""


def test_a_leak_held_where_an_earlier_one_was_costs_no_whole_collection(
    pytester: pytest.Pytester, whole_collections: list[int]
) -> None:
    """The first leak's report teaches the run its holder; the next leaks held there are proven
    alive by following it, not by collecting the whole heap."""
    pytester.makepyfile(test_repeated=REPEATED_LEAK_SUITE)
    result = run_inner(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=3, errors=3)
    result.stdout.fnmatch_lines(["*held by test_repeated.KEPT (list)*"] * 3)
    assert whole_collections == []  # the first by the walk's chain, the next by its route


FROZEN_CYCLE_SUITE = """
    import gc
    import weakref

    import tensorflow as tf

    class Layer:
        def __init__(self, size):
            self.weights = [tf.Variable(tf.zeros([size]))]
            self.call = lambda: self.weights  # the layer's own closure: a cycle

    KEPT = []

    def build_and_collect(size):
        layer = Layer(size)
        gc.collect()  # alive at the code's own collection: frozen with the rest
        return weakref.ref(layer)

    def test_a_layer_that_dies_after_a_collection():
        assert build_and_collect(4)() is not None  # dead now, but only in its cycle

    def test_a_big_layer_that_dies_after_a_collection():
        assert build_and_collect(1 << 19)() is not None  # 2 MiB of weights

    def test_a_layer_that_module_state_keeps():
        KEPT.append(build_and_collect(4)())

    class Watched:
        pass

    WATCHES = []

    def clear_when_collected(registry):
        trigger = Watched()
        trigger.itself = trigger
        WATCHES.append(weakref.ref(trigger, lambda _: registry.clear()))

    def test_a_cycle_freed_by_a_weak_reference_callback():
        # the layer's cycle is let go by the callback, when a collection frees the trigger
        clear_when_collected({"layer": Layer(4)})
"""


def test_a_cycle_frozen_while_alive_is_proven_dead_without_a_whole_collection(
    pytester: pytest.Pytester, whole_collections: list[int]
) -> None:
    """Code that calls gc.collect() midway freezes what is alive then; a cycle of it that dies
    later is proven garbage by trial deletion, not by a whole collection."""
    pytester.makepyfile(test_frozen=FROZEN_CYCLE_SUITE)
    result = run_inner(pytester, "-p", "no:randomly", "-k", "a_layer_that_dies or weak_reference")
    result.assert_outcomes(passed=2)
    assert whole_collections == []


def test_a_big_dead_cycle_is_collected_at_once(
    pytester: pytest.Pytester, whole_collections: list[int]
) -> None:
    """Proven garbage that holds more than a MiB of tensors is collected now, not left."""
    pytester.makepyfile(test_frozen=FROZEN_CYCLE_SUITE)
    result = run_inner(pytester, "-p", "no:randomly", "-k", "big_layer")
    result.assert_outcomes(passed=1)
    assert whole_collections == [1]


def test_a_frozen_cycle_that_module_state_keeps_is_still_a_leak(
    pytester: pytest.Pytester, whole_collections: list[int]
) -> None:
    pytester.makepyfile(test_frozen=FROZEN_CYCLE_SUITE)
    result = run_inner(pytester, "-p", "no:randomly", "-k", "module_state_keeps")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*held by test_frozen.KEPT (list)*"])
    assert whole_collections == []


NATIVE_HOLDER_SUITE = """
    import tensorflow as tf

    TAPES = []

    def test_a_persistent_tape_keeps_what_it_watched():
        tape = tf.GradientTape(persistent=True)
        with tape:
            x = tf.constant(3.0)
            tape.watch(x)
            y = x * x
        TAPES.append(tape)  # the tape's C++ state keeps x and y: no Python chain reaches them
"""


def test_a_leak_no_python_chain_explains_is_told_from_garbage_by_a_whole_collection(
    pytester: pytest.Pytester, whole_collections: list[int]
) -> None:
    """With no chain to prove it alive, only a whole collection tells a survivor from garbage
    that an older cycle keeps."""
    pytester.makepyfile(test_native=NATIVE_HOLDER_SUITE)
    result = run_inner(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*no Python holder*"])
    assert whole_collections == [1]


def test_a_leak_of_a_failed_test_is_not_walked_for(
    pytester: pytest.Pytester, whole_collections: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed test gets no leak report (its traceback holds its locals): its close does not
    look for holders."""
    from pytest_eagersession.reports import explain

    walks: list[int] = []
    real_walk = explain.walk

    def counted(*args: Any, **kwargs: Any) -> Any:
        walks.append(1)
        return real_walk(*args, **kwargs)

    monkeypatch.setattr(explain, "walk", counted)
    pytester.makepyfile(
        test_failing="""
        import tensorflow as tf

        KEPT = []

        def test_keeps_one_and_fails():
            KEPT.append(tf.ones([4]))
            assert False
        """
    )
    result = run_inner(pytester, "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    assert walks == []


UNITTEST_CASE_SUITE = """
    import unittest

    import tensorflow as tf

    class ModelTest(unittest.TestCase):
        def setUp(self):
            self.inputs = tf.ones([8, 4])
            self.kernel = tf.Variable(tf.zeros([4, 2]))
            self.checks = [self.assertEqual]  # the case holds its own bound method: a cycle

        def test_multiplies(self):
            assert tf.matmul(self.inputs, self.kernel).shape == (8, 2)

        def test_keeps_the_kernel(self):
            KEPT.append(self.kernel)

    KEPT = []
"""


def test_what_a_unittest_case_s_setup_made_costs_no_whole_collection(
    pytester: pytest.Pytester, whole_collections: list[int]
) -> None:
    """pytest makes a unittest case before the test's session opens and lets it go in a cycle
    after the teardown; what its attributes hold is proven garbage without a whole collection
    (tf-keras's data adapter tests paid about 0.2 s each for one)."""
    pytester.makepyfile(test_case=UNITTEST_CASE_SUITE)
    result = run_inner(pytester, "-p", "no:randomly", "-k", "multiplies")
    result.assert_outcomes(passed=1)
    assert whole_collections == []
    result = run_inner(pytester, "-p", "no:randomly", "-k", "keeps_the_kernel")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*held by test_case.KEPT (list)*"])


class Cyclic:
    """Holds a value in a reference cycle: only the collector frees it."""

    def __init__(self, value: object) -> None:
        self.value, self.me = value, self


def test_a_close_tells_its_collection_of_the_session_s_cycles_apart() -> None:
    """The garbage a session left in cycles is collected by its close, and timed apart; a
    session whose tracked objects all died needs no collection."""
    import tensorflow as tf

    from pytest_eagersession import EagerSession, ResourceCleanupStrategy

    strategy = ResourceCleanupStrategy.ON_SESSION_CLOSE  # no collection before the close
    gc.disable()  # nor the interpreter's
    try:
        with EagerSession.options().resource_cleanup_strategy(strategy).build() as session:
            for step in range(200):
                Cyclic([tf.fill([4], float(step)) for _ in range(20)])
    finally:
        gc.enable()
    assert session.stats().tracked == 200 * 20
    assert session.stats().close_collection_seconds > 0
    with EagerSession.options().resource_cleanup_strategy(strategy).build() as session:
        float(tf.reduce_sum(tf.ones([4])))
    assert session.stats().close_collection_seconds == 0


CYCLES_SUITE = """
    import gc
    import tensorflow as tf

    def setup_module():
        gc.disable()  # only the close collects what the tests leave in cycles

    def teardown_module():
        gc.enable()

    class Cyclic:
        def __init__(self, value):
            self.value, self.me = value, self

    def test_leaves_cycles():
        for step in range(200):
            Cyclic([tf.fill([4], float(step)) for _ in range(20)])

    def test_leaves_nothing_alive():
        assert float(tf.reduce_sum(tf.ones([4]))) == 4.0
"""


def test_the_json_report_times_the_collection_of_a_test_s_cycles_apart_from_its_close(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_cycles=CYCLES_SUITE)
    result = run_inner(
        pytester,
        "-p",
        "no:randomly",
        "--eagersession-strategy=on_session_close",
        "--eagersession-json=report.json",
    )
    result.assert_outcomes(passed=2)
    report = json.loads((pytester.path / "report.json").read_text(encoding="utf-8"))
    tests = {test["nodeid"].split("::")[-1]: test for test in report["tests"]}
    cycles, clean = tests["test_leaves_cycles"], tests["test_leaves_nothing_alive"]
    assert cycles["timings"]["collect"] > 0
    assert cycles["timings"]["collect"] == pytest.approx(
        cycles["stats"]["close_collection_seconds"], abs=1e-6
    )
    assert clean["timings"]["collect"] == 0
