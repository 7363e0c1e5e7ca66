"""Helpers shared by the test modules (importable because pytest puts tests/ on sys.path)."""

from __future__ import annotations

import time
from collections.abc import Callable

#: Inner runs search each leak's holders for up to 10 s, not the default 0.5 s: the chains the
#: tests check must not depend on how loaded the machine is.
CHAIN_BUDGET = "--eagersession-chain-budget=10"


def wait_until(condition: Callable[[], bool], timeout: float = 2.0) -> bool:
    """Poll ``condition`` every 2 ms until it holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.002)
    return condition()


#: A test file with one leaky test (a module-level list of tensors) and one clean test.
LEAKY = """
    import tensorflow as tf

    _CACHE = []

    def test_leak():
        _CACHE.append(tf.constant([1.0, 2.0]))

    def test_clean():
        t = tf.constant([1.0, 2.0])
        assert float(tf.reduce_sum(t)) == 3.0
"""
