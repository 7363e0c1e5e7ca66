"""A gradient tape.gradient() returns for several sources at once: TensorFlow's leak, named so."""

from __future__ import annotations

import gc
import weakref

import pytest
import tensorflow as tf
from support import run_inner

from pytest_eagersession._tf import gradients


def _sum_gradients() -> tuple[list[object], weakref.ref[object]]:
    a, c = tf.Variable(1.0), tf.Variable(2.0)
    with tf.GradientTape() as tape:
        total = a + c  # the sum's gradient is each addend's: one tensor for both
    result = tape.gradient(total, [a, c])
    return result, weakref.ref(result[0])


@pytest.fixture(scope="module")
def tensorflow_keeps_them() -> None:
    """Skip where the installed TensorFlow frees such a gradient (it no longer leaks)."""
    result, ref = _sum_gradients()
    shared = result[0] is result[1]
    del result
    gc.collect()
    if not shared or ref() is None:
        pytest.skip(f"TensorFlow {tf.__version__} frees a gradient returned for two sources")


@pytest.mark.usefixtures("tensorflow_keeps_them")
def test_the_tape_s_shared_gradients_are_remembered_weakly_and_returned_unchanged() -> None:
    gradients.watch()
    gradients.watch()  # once per process: no second wrapper
    since = gradients.latest()
    result, ref = _sum_gradients()
    assert result[0] is result[1]
    assert [(obj, n) for obj, n in gradients.shared(since)] == [(result[0], 2)]
    assert gradients.latest() == since + 1

    a = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        doubled = a * 2.0 + a * 3.0  # one source, and distinct gradients: not remembered
    assert float(tape.gradient(doubled, a)) == 5.0
    assert gradients.latest() == since + 1
    del result
    gc.collect()
    assert ref() is not None  # TensorFlow's own reference: still alive, still listed
    assert len(gradients.shared(since)) == 1


SUITE = """
    import tensorflow as tf

    def test_sum_gradient():
        a = tf.Variable(tf.ones([64, 64]))
        c = tf.Variable(tf.ones([64, 64]))
        with tf.GradientTape() as tape:
            total = a + c
        da, dc = tape.gradient(total, [a, c])
        assert da is dc

    def test_sum_gradient_in_a_graph():
        with tf.Graph().as_default():
            a, c = tf.Variable(1.0), tf.Variable(2.0)
            with tf.GradientTape() as tape:
                total = a + c
            da, dc = tape.gradient(total, [a, c])
            assert da is dc

    def test_one_source_at_a_time():
        a = tf.Variable(tf.ones([64, 64]))
        c = tf.Variable(tf.ones([64, 64]))
        with tf.GradientTape(persistent=True) as tape:
            total = a + c
        assert tape.gradient(total, a) is not tape.gradient(total, c)
"""

KEPT = (
    "kept by TensorFlow's tape.gradient(), which returned one tensor for 2 sources at once and "
    "keeps a reference to it that is never released (ask for each source's gradient apart, or "
    "take them in a tf.function)"
)


@pytest.mark.usefixtures("tensorflow_keeps_them")
def test_what_such_a_gradient_keeps_is_tensorflow_s_known_leak_not_the_test_s(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_gradients=SUITE)
    result = run_inner(pytester)
    result.assert_outcomes(passed=3)
    result.stdout.no_fnmatch_line("*no Python holder*")
    result.stdout.fnmatch_lines(
        [
            "*eagersession: TensorFlow's own known leaks*",
            "2 tests left objects in TensorFlow's known leaks (not their code's doing; they "
            "pass: --eagersession-retention=fail fails them): 0 released at the end of their "
            "scope, 3 still kept.",
            f"test_gradients.py::test_sum_gradient: tensor: EagerTensor float32[[]64,64[]] "
            f"16.0 KiB on CPU:0: {KEPT}",
            f"test_gradients.py::test_sum_gradient_in_a_graph: variable: ResourceVariable "
            f"'Variable' float32[[][]] 4 B: {KEPT}",
        ]
    )

    failing = run_inner(pytester, "--eagersession-retention=fail")
    failing.assert_outcomes(passed=3, errors=2)
    failing.stdout.no_fnmatch_line("*no Python holder*")  # failed, but with the holder named
    failing.stdout.fnmatch_lines(
        [
            "test_gradients.py::test_sum_gradient leaked 1 TensorFlow object (16.0 KiB)*",
            "  1. tensor: EagerTensor float32[[]64,64[]] 16.0 KiB on CPU:0",
            f"     {KEPT}",
        ]
    )
