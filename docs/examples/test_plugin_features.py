"""The plugin page's examples: markers, fixtures and scopes."""

import pytest
import tensorflow as tf

_REGISTRY = {}


# --8<-- [start:markers]
@pytest.mark.cleanup("on_safe_points")  # this test's session deletes garbage at each op
def test_strategy_marker(eager_session):
    total = tf.zeros(())
    for step in range(100):
        total += float(step)
    assert eager_session.resource_cleanup_strategy.name == "ON_SAFE_POINTS"


@pytest.mark.cleanup(allow=r"variable: ResourceVariable 'vocabulary_size'")
def test_allowed_survivor():
    _REGISTRY["vocabulary_size"] = tf.Variable(30_000, name="vocabulary_size")  # by design


def test_detached_survivor(eager_session):
    step = tf.Variable(0, name="step")
    _REGISTRY["step"] = step
    eager_session.detach(step)  # expected to outlive the test: not reported


@pytest.mark.cleanup(max_traces=1, max_bytes="16 MiB")  # limits on the test's body
def test_limits():
    double = tf.function(lambda x: x * 2.0)
    for _ in range(3):
        assert double(tf.ones((1024, 1024))).shape == (1024, 1024)  # 4 MiB each, one trace


# --8<-- [end:markers]


# --8<-- [start:scopes]
@pytest.fixture(scope="module")
def embeddings():
    # Made in the module's session: not a leak of the test that first asked for it.
    return tf.Variable(tf.random.normal((1000, 16)), name="embeddings")


def test_first_user(embeddings):
    assert embeddings.shape == (1000, 16)


def test_second_user(embeddings, module_eager_session):
    assert module_eager_session.stats().tracked >= 1
    assert float(tf.reduce_sum(tf.zeros_like(embeddings))) == 0.0


# --8<-- [end:scopes]
