"""assert_max_traces and TraceCounter: tf.function traces per Python function, and why."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_eagersession.assertions import RetracingError, TraceCounter, assert_max_traces

tf = pytest.importorskip("tensorflow")

HERE = __file__


def test_max_traces_fails_naming_the_function_its_count_and_signatures() -> None:
    @tf.function
    def scale(x: Any) -> Any:
        return x * 2.0

    @assert_max_traces(1, where="the loop")
    def loop() -> None:
        for value in (1.0, 2.0, 3.0):
            scale(value)
        scale(tf.constant([1.0, 2.0]))

    with pytest.raises(RetracingError) as failure:
        loop()
    text = str(failure.value)
    line = scale.python_function.__code__.co_firstlineno
    assert text.splitlines() == [
        "the loop traced tf.functions more than max_traces=1 allows (1 time):",
        f"  test_max_traces_fails_naming_the_function_its_count_and_signatures.<locals>.scale "
        f"({HERE}:{line}) traced 4 times:",
        "    1. (x: Literal[1.0])",
        "    2. (x: Literal[2.0])",
        "    3. (x: Literal[3.0])",
        "    4. (x: TensorSpec(shape=(2,), dtype=tf.float32, name=None))",
        "    Python values are part of the signature (Literal[...]): pass tensors "
        "(tf.constant(x)), or give the tf.function an input_signature.",
    ]
    (function,) = failure.value.functions
    assert (function.traces, function.instances) == (4, 1)
    assert scale.experimental_get_tracing_count() == 4  # TensorFlow's own count agrees


def test_max_traces_passes_when_tensors_of_one_signature_reuse_the_trace() -> None:
    @tf.function
    def scale(x: Any) -> Any:
        return x * 2.0

    with assert_max_traces(1) as counter:
        for value in (1.0, 2.0, 3.0):
            scale(tf.constant(value))
    assert counter.total == 1
    assert [f.traces for f in counter.functions()] == [1]


def test_a_tf_function_made_per_call_is_counted_per_python_function() -> None:
    def double(x: Any) -> Any:
        return x * 2.0

    def wrap_each_call() -> None:
        with assert_max_traces(2):
            for _ in range(3):
                tf.function(double)(tf.constant(1.0))

    with pytest.raises(RetracingError) as failure:
        wrap_each_call()
    assert "double" in str(failure.value)
    assert "traced 3 times, by 3 tf.function objects:" in str(failure.value)
    assert "make it once and reuse it" in str(failure.value)


def test_a_function_that_creates_variables_traces_twice_and_the_report_says_why() -> None:
    made = []

    @tf.function
    def lazily_built(x: Any) -> Any:
        if not made:
            made.append(tf.Variable(2.0))
        return made[0] * x

    with TraceCounter() as counter:
        lazily_built(tf.constant(1.0))
        lazily_built(tf.constant(2.0))
    (function,) = counter.functions()
    assert function.traces == lazily_built.experimental_get_tracing_count() == 2
    assert function.signatures[0].endswith("(first call, created variables: traced again)")
    assert not function.signatures[1].endswith("traced again)")
    with pytest.raises(RetracingError, match="created variables: traced again"):
        counter.check(1)
    made.clear()


def test_the_decorator_form_counts_per_call_and_tf_data_functions_are_not_counted() -> None:
    scale = tf.function(lambda x: x * 2.0)

    @assert_max_traces(1)
    def steady() -> None:
        tf.data.Dataset.range(3).map(lambda x: x + 1).reduce(tf.constant(0, tf.int64), tf.add)
        scale(tf.constant(1.0))

    steady()
    steady()  # each call counts from zero

    @assert_max_traces(0)
    def traces() -> None:
        tf.function(lambda: tf.constant(1.0))()

    with pytest.raises(RetracingError, match=r"\.<locals>\.traces traced tf.functions more"):
        traces()


def test_trace_limits_are_checked() -> None:
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match="max_traces must be a whole number of 0 or more"):
            assert_max_traces(bad)  # type: ignore[arg-type]
