"""Module caches: a module-level dict that keeps every tensor it was given."""

import pytest
import tensorflow as tf

# --8<-- [start:leak]
_NORMALIZERS = {}


def normalizer(name, values):
    """Compute a batch's mean once per name, and keep it for the next call."""
    if name not in _NORMALIZERS:
        _NORMALIZERS[name] = tf.reduce_mean(tf.constant(values))
    return _NORMALIZERS[name]


def test_leaks_normalizer_cache():
    mean = normalizer("heights", [1.0, 2.0, 3.0])
    assert float(mean) == 2.0


# --8<-- [end:leak]


# --8<-- [start:fix]
@pytest.fixture
def empty_normalizers(monkeypatch):
    # A fresh cache for this test; the old one is put back, and this one dropped, at teardown.
    monkeypatch.setattr(f"{__name__}._NORMALIZERS", {})


def test_fixed_normalizer_cache(empty_normalizers):
    mean = normalizer("heights", [1.0, 2.0, 3.0])
    assert float(mean) == 2.0


# --8<-- [end:fix]
