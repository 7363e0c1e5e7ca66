"""A session's TensorFlow context: async execution, device placement policy and ConfigProto."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf
from tensorflow.python.eager import context

from pytest_eagersession import DevicePlacementPolicy, EagerSession


def test_async_session_runs_ops_asynchronously_and_waits_at_close() -> None:
    session = EagerSession.options().async_(True).build()
    assert session.is_async
    with session:
        assert context.context().executor.is_async()
        total = session.op_builder("Add").add_input(2).add_input(4).build()
        assert int(total.tensor(0)) == 6
        product = tf.constant(3) * 7
    assert int(product) == 21
    assert not context.context().executor.is_async()
    assert session.closed


def test_sync_session_leaves_the_executor_alone() -> None:
    with EagerSession.create():
        assert not context.context().executor.is_async()


def test_device_placement_policy_applies_while_active_only() -> None:
    before = context.context().device_policy
    options = EagerSession.options().device_placement_policy("explicit")
    session = options.build()
    assert session.device_placement_policy is DevicePlacementPolicy.EXPLICIT
    with session:
        assert context.context().device_policy == context.DEVICE_PLACEMENT_EXPLICIT
    assert context.context().device_policy == before


def test_device_placement_policy_applies_to_op_builder_ops() -> None:
    seen = []
    original = context.device_policy

    def spy(policy):
        seen.append(policy)
        return original(policy)

    context.device_policy = spy
    try:
        with EagerSession.options().device_placement_policy("warn").build() as session:
            session.op_builder("Add").add_input(1).add_input(2).build()
    finally:
        context.device_policy = original
    assert context.DEVICE_PLACEMENT_WARN in seen


def test_config_after_tensorflow_started_is_a_clear_error() -> None:
    tf.constant(1.0)  # the context is initialized now
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=3)
    with pytest.raises(RuntimeError, match=r"already initialized.*before any TensorFlow op"):
        EagerSession.options().config(config).build()


def test_config_equal_to_the_running_one_is_accepted() -> None:
    current = context.context().config
    session = EagerSession.options().config(current).build()
    session.close()


def test_config_before_the_first_op_is_applied() -> None:
    script = textwrap.dedent(
        """
        import tensorflow as tf
        from pytest_eagersession import EagerSession
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=3)
        session = EagerSession.options().config(config).build()
        with session:
            tf.constant(1.0) + 1.0
        from tensorflow.python.eager import context
        print("threads", context.context().config.inter_op_parallelism_threads)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "threads 3"
