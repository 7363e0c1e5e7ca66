"""An object a wider-scoped fixture's thread makes belongs to that fixture's scope.

A prefetcher that a module fixture starts makes tensors all the time, during the tests too:
whichever test is running when it makes one, what the prefetcher keeps (in its queue, its
frames, the module-level buffer its code fills) is the module's, never that test's leak, in
any order and under xdist. A prefetcher that keeps everything it ever made leaks for the
module; a test that keeps what it made from a batch leaks for the test.

One limit: the tracker cannot tell which thread made an object. A batch the prefetcher made
while a test ran, kept where neither the fixture's value, nor the prefetcher's frames, nor the
globals its code names reach it, stays that test's.
"""

from __future__ import annotations

import pytest
import tensorflow  # noqa: F401  (imported once: in-process inner runs reuse it)
from support import INNER_RUN, run_inner

PREFETCHER = """
    import queue
    import threading

    import pytest
    import tensorflow as tf

    RECENT = []  # the prefetcher's own module-level buffer: its last few batches
    {keep_all}

    @pytest.fixture(scope="module")
    def batches():
        ready = queue.Queue(maxsize=4)
        stop = threading.Event()

        def prefetch():
            while not stop.is_set():
                batch = tf.random.uniform((32, 32))
                RECENT.append(batch)
                del RECENT[:-3]
                {keep_all_line}
                try:
                    ready.put(batch, timeout=0.002)
                except queue.Full:
                    pass

        thread = threading.Thread(target=prefetch, daemon=True)
        thread.start()
        yield ready
        stop.set()
        thread.join()
        RECENT.clear()

    @pytest.mark.parametrize("step", range({tests}))
    def test_trains_on_a_batch(batches, step):
        batch = batches.get(timeout=10)
        assert float(tf.reduce_sum(batch)) >= 0.0
        threading.Event().wait(0.01)  # the prefetcher makes more meanwhile
"""

REVERSED = """
    def pytest_collection_modifyitems(items):
        items.reverse()
"""

TESTS = 12


def suite(*, keep_all: bool = False) -> str:
    return PREFETCHER.format(
        keep_all="EVERY = []  # and everything it ever made" if keep_all else "",
        keep_all_line="EVERY.append(batch)" if keep_all else "pass",
        tests=TESTS,
    )


@pytest.mark.parametrize("order", ["serial", "reversed", "xdist"])
def test_a_module_fixtures_prefetcher_never_leaks_for_a_test(
    pytester: pytest.Pytester, order: str
) -> None:
    pytester.makepyfile(test_prefetch=suite())
    args: list[str] = []
    if order == "reversed":
        pytester.makeconftest(REVERSED)
    if order == "xdist":
        result = pytester.runpytest_subprocess(*INNER_RUN, "-n", "2")
    else:
        result = run_inner(pytester, *args)
    result.assert_outcomes(passed=TESTS)
    result.stdout.no_fnmatch_line("*leaked*")


def test_a_prefetcher_that_keeps_everything_leaks_for_its_module(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_prefetch=suite(keep_all=True))
    result = run_inner(pytester)
    result.assert_outcomes(passed=TESTS, errors=1)
    result.stdout.fnmatch_lines(["*test_prefetch.py::test_trains_on_a_batch*leaked*module scope*"])
    result.stdout.no_fnmatch_line("*leaked*function scope*")


def test_a_test_that_keeps_what_it_made_from_a_batch_leaks_for_itself(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_prefetch=suite()
        + """
    MINE = []

    def test_keeps_one(batches):
        MINE.append(batches.get(timeout=10) * 2.0)  # made by the test: its own
"""
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=TESTS + 1, errors=1)
    result.stdout.fnmatch_lines(["*::test_keeps_one leaked 1 TensorFlow object*function scope*"])
