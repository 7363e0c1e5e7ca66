"""Parked iterators: an iterator kept to resume later holds its pipeline's resources."""

import pytest
import tensorflow as tf

# --8<-- [start:leak]
_ITERATORS = {}


def batches(name):
    """Resume the named pipeline where the last call left it."""
    if name not in _ITERATORS:
        _ITERATORS[name] = iter(tf.data.Dataset.range(1000).batch(100))
    return _ITERATORS[name]


def test_leaks_parked_iterator():
    first = next(batches("train"))
    assert first.shape == (100,)


# --8<-- [end:leak]


# --8<-- [start:fix]
@pytest.fixture
def train_batches():
    # The fixture's value is the test's own: pytest drops it at teardown.
    return iter(tf.data.Dataset.range(1000).batch(100))


def test_fixed_iterator_from_fixture(train_batches):
    first = next(train_batches)
    assert first.shape == (100,)


# --8<-- [end:fix]
