"""The survivor check collects the whole heap only for a survivor it would report."""

from __future__ import annotations

from typing import Any

import pytest
import tensorflow  # noqa: F401  (imported before the inner runs: they would import it again)
from support import run_inner

from pytest_eagersession.tracking import TRACKER

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
    assert whole_collections == [1]  # a survivor it reports: the heap is collected whole first
