"""A module-scoped fixture's value kept past the module: a leak of the module's scope."""

import pytest
import tensorflow as tf

_SHARED = {}


@pytest.fixture(scope="module")
def lookup_table():
    table = tf.Variable(tf.range(100), name="lookup_table")
    _SHARED["lookup"] = table  # published for other modules: outlives this one
    return table


def test_uses_the_table(lookup_table):
    assert int(lookup_table[5]) == 5


def test_leaks_module_fixture_published(lookup_table):
    assert int(tf.reduce_sum(lookup_table)) == 4950
