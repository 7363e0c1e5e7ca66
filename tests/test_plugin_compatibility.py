"""What real TensorFlow suites do, under the plugin: no outcome changes but a true leak's.

Each inner suite passes with ``-p no:eagersession``; these tests check that it passes with the
plugin on too (and that the one true leak among them is still reported).
"""

from __future__ import annotations

import keras  # noqa: F401  (imported once: pytester restores sys.modules after each run)
import pytest
import tensorflow  # noqa: F401
from support import CHAIN_BUDGET, INNER_RUN, run_inner

pytestmark = pytest.mark.cleanup(leaks="off")


def without_plugin(pytester: pytest.Pytester, *args: str, **outcomes: int) -> None:
    """Run the suite with the plugin off (its options dropped); it must give ``outcomes``."""
    plain = [arg for arg in args if not arg.startswith("--eagersession")]
    pytester.runpytest_inprocess(*INNER_RUN, "-p", "no:eagersession", *plain).assert_outcomes(
        **outcomes
    )


def both_ways(pytester: pytest.Pytester, *args: str, **outcomes: int) -> pytest.RunResult:
    """Run the suite with the plugin off, then on; both must give ``outcomes``."""
    without_plugin(pytester, *args, **outcomes)
    result = run_inner(pytester, *args)
    result.assert_outcomes(**outcomes)
    return result


def test_reset_default_graph_and_clear_session_inside_a_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import keras
        import tensorflow as tf

        def test_reset_default_graph():
            tf.compat.v1.reset_default_graph()
            assert float(tf.constant(2.0) * 3.0) == 6.0

        def test_clear_session():
            keras.backend.clear_session()
            model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
            assert model(tf.ones((1, 2))).shape == (1, 1)
            keras.backend.clear_session()

        def test_from_generator_after_a_reset():
            tf.compat.v1.reset_default_graph()
            dataset = tf.data.Dataset.from_generator(
                lambda: iter(range(3)), output_signature=tf.TensorSpec((), tf.int64)
            )
            assert [int(x) for x in dataset] == [0, 1, 2]
        """
    )
    result = both_ways(pytester, passed=3)
    result.stdout.no_fnmatch_line("*leaked*")


def test_tf_test_case_patterns(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import keras
        import tensorflow as tf
        from absl.testing import parameterized
        from tensorflow.python.framework import test_util

        class GraphAndEager(tf.test.TestCase, parameterized.TestCase):
            def setUp(self):
                super().setUp()
                keras.backend.clear_session()
                self.model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])

            def tearDown(self):
                tf.config.run_functions_eagerly(False)
                super().tearDown()

            def test_model_on_self(self):
                self.assertEqual(self.model(tf.ones((4, 3))).shape, (4, 2))

            def test_cached_session_in_graph_mode(self):
                with tf.Graph().as_default(), self.cached_session() as sess:
                    total = tf.constant(1.0) + tf.constant(2.0)
                    self.assertEqual(sess.run(total), 3.0)

            @test_util.run_in_graph_and_eager_modes
            def test_both_modes(self):
                self.assertAllEqual(self.evaluate(tf.constant([1, 2]) * 2), [2, 4])

            @parameterized.named_parameters(("eager", True), ("traced", False))
            def test_run_functions_eagerly(self, eagerly):
                tf.config.run_functions_eagerly(eagerly)
                double = tf.function(lambda x: x * 2)
                self.assertEqual(float(double(tf.constant(2.0))), 4.0)

            @test_util.assert_no_new_tensors
            def test_tensorflows_own_leak_check(self):
                self.assertEqual(float(tf.reduce_sum(tf.ones((3, 3)))), 9.0)

            @test_util.assert_no_garbage_created
            def test_tensorflows_own_garbage_check(self):
                self.assertEqual(len([1, 2, 3]), 3)
        """
    )
    # tf.test.TestCase's deprecated test_session() is collected, and skips itself
    without_plugin(pytester, passed=7, skipped=1)  # once: it is the same run for each strategy
    for strategy in ("in_background", "on_safe_points", "on_session_close"):
        result = run_inner(pytester, f"--eagersession-strategy={strategy}")
        result.assert_outcomes(passed=7, skipped=1)
        result.stdout.no_fnmatch_line("*leaked*")


def test_mocks_that_record_tensors_are_not_kept_alive(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from unittest import mock
        import tensorflow as tf

        def test_mock_records_a_variable():
            callback = mock.MagicMock()
            variable = tf.Variable(tf.ones((4,)))
            callback(variable, scale=tf.constant(2.0))
            callback.assert_called_once()

        def test_patch_object():
            with mock.patch.object(tf.random, "uniform", return_value=tf.zeros((2,))):
                assert tf.random.uniform((2,)).numpy().tolist() == [0.0, 0.0]
        """
    )
    result = both_ways(pytester, passed=2)
    result.stdout.no_fnmatch_line("*leaked*")


def test_what_wider_fixtures_own_through_closures_and_threads(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import threading
        import keras
        import pytest
        import tensorflow as tf

        @pytest.fixture(scope="module")
        def make_model():
            built = {}

            def make(units):  # memoises what it makes: the fixture owns it
                if units not in built:
                    built[units] = keras.Sequential([keras.Input((2,)), keras.layers.Dense(units)])
                return built[units]

            return make

        @pytest.fixture(scope="module")
        def model():
            return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])

        @pytest.fixture(scope="module")
        def monitor():
            latest = []
            stop = threading.Event()

            def watch():
                while not stop.is_set():
                    reading = tf.random.uniform((8,))  # kept in this thread's frame
                    latest[:] = [float(tf.reduce_sum(reading))]
                    stop.wait(0.01)

            thread = threading.Thread(target=watch, daemon=True)
            thread.start()
            yield latest
            stop.set()
            thread.join()

        def test_factory_first(make_model):
            assert make_model(3)(tf.ones((1, 2))).shape == (1, 3)

        def test_factory_again(make_model):
            assert make_model(3)(tf.ones((1, 2))).shape == (1, 3)

        def test_predict_builds_the_models_functions(model):
            assert model.predict(tf.ones((4, 2)), verbose=0).shape == (4, 1)

        def test_predict_again(model):
            assert model.predict(tf.ones((4, 2)), verbose=0).shape == (4, 1)

        def test_monitor_runs(monitor):
            threading.Event().wait(0.05)
            assert monitor
        """
    )
    result = both_ways(pytester, passed=5)
    result.stdout.no_fnmatch_line("*leaked*")


def test_a_replaced_global_generator_is_a_leak(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import tensorflow as tf

        def test_uses_the_global_generator():
            assert tf.random.get_global_generator().normal((2,)).shape == (2,)

        def test_replaces_it():
            tf.random.set_global_generator(tf.random.Generator.from_seed(1))

        def test_uses_it_after():
            # The leak is TensorFlow's state now: reported, but not destroyed under this test.
            assert tf.random.get_global_generator().normal((2,)).shape == (2,)
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_replaces_it leaked*",
            "*held by tensorflow.*global_generator* (installed by user code with "
            "tf.random.set_global_generator: TensorFlow keeps it for the rest of the run)",
        ]
    )
    result.stdout.no_fnmatch_line("*cut off*")


def test_heap_listings_see_objects_older_than_the_test(pytester: pytest.Pytester) -> None:
    # The plugin freezes older objects while a test runs (its survivor check then collects the
    # test's objects alone); code that lists the heap must still see all of it.
    pytester.makepyfile(
        """
        import gc
        import tensorflow as tf

        class Old:
            pass

        OLD = Old()

        class Cycle:
            def __init__(self):
                self.me = self
                self.tensor = None

        PARKED = [Cycle()]

        def test_get_objects_sees_module_state():
            assert any(obj is OLD for obj in gc.get_objects())

        def test_get_referrers_sees_module_state():
            assert any(ref is OLD.__dict__ or ref is globals() for ref in gc.get_referrers(OLD))

        def test_an_old_cycle_that_dies_with_a_new_tensor_is_not_a_leak():
            cycle = PARKED.pop()  # made at import: older than the test
            cycle.tensor = tf.ones((64,))
            del cycle  # garbage now, in a cycle the frozen heap holds
        """
    )
    result = both_ways(pytester, passed=3)
    result.stdout.no_fnmatch_line("*leaked*")


def test_the_freeze_option_is_deprecated_and_cannot_be_turned_off() -> None:
    # Every session draws its line with gc.freeze() now (test_boundary.py): the old opt-in
    # still builds, with a warning, and asking for no freeze says why it cannot be had.
    from pytest_eagersession import EagerSession

    with pytest.warns(DeprecationWarning, match="every session freezes older objects"):
        options = EagerSession.options().freeze_older_objects()
    options.build().close()
    with (
        pytest.warns(DeprecationWarning, match="deprecated"),
        pytest.raises(ValueError, match="how it tells its own objects from older ones"),
    ):
        EagerSession.options().freeze_older_objects(False)


RETENTION_SUITE = """
    import tensorflow as tf

    @tf.custom_gradient
    def clip_gradient(x):
        return tf.identity(x), lambda dy: tf.clip_by_value(dy, -1.0, 1.0)

    def test_custom_gradient_in_a_function():
        variable = tf.Variable(3.0)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = clip_gradient(variable * 2.0)
            return tape.gradient(loss, variable)

        assert float(step()) == 2.0  # d(2v)/dv, clipped to 1 on the way

    def test_distribute_strategy_run():
        strategy = tf.distribute.MirroredStrategy(["CPU:0"])
        with strategy.scope():
            variable = tf.Variable(1.0)

        @tf.function
        def add(x):
            return variable + x

        assert float(strategy.run(add, args=(tf.constant(1.0),))) == 2.0
"""


def test_tensorflows_own_leaks_are_released_and_listed_apart(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_retention=RETENTION_SUITE)
    result = both_ways(pytester, passed=2)
    result.stdout.no_fnmatch_line("*leaked*")
    result.stdout.fnmatch_lines(
        [
            "*eagersession: TensorFlow's own known leaks*",
            "2 tests left objects in TensorFlow's known leaks (not their code's doing; they "
            "pass: --eagersession-retention=fail fails them): * released at the end of their "
            "scope, 0 still kept.",
        ]
    )


@pytest.mark.parametrize("how", ["cli", "ini"])
def test_retention_fail_fails_on_them(pytester: pytest.Pytester, how: str) -> None:
    pytester.makepyfile(test_retention=RETENTION_SUITE)
    if how == "ini":
        pytester.makeini("[pytest]\neagersession_retention = fail\n")
        result = run_inner(pytester)
    else:
        result = run_inner(pytester, "--eagersession-retention=fail")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*test_custom_gradient_in_a_function: TensorFlow's own known leaks kept objects*",
            "*gradient registry entry CustomGradient-*: handed to its graph",
            "*test_distribute_strategy_run: TensorFlow's own known leaks kept objects*",
            "*tf.distribute replica-function cache entry for MirroredStrategy: dropped",
        ]
    )


def test_a_bad_retention_mode_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run_inner(pytester, "--eagersession-retention=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--eagersession-retention / eagersession_retention: unknown retention mode "
            "'sometimes'; choose one of report, fail*"
        ]
    )


def test_a_suite_that_freezes_the_heap_itself(pytester: pytest.Pytester) -> None:
    # Python 3.12.1 starts with frozen objects, and some suites call gc.freeze() themselves:
    # the plugin's own freeze then stands aside. What is made between two tests (here the dead
    # handle that replaces a destroyed leak's) is nobody's, not the next test's.
    pytester.makeconftest("import gc\n\ngc.freeze()\n")
    pytester.makepyfile(
        """
        import tensorflow as tf

        _PARKED = {}

        def test_parks_an_iterator():
            iterator = iter(tf.data.Dataset.range(100).batch(10))
            next(iterator)
            _PARKED["train"] = iterator

        def test_clean():
            def rows():
                yield from range(5)

            spec = tf.TensorSpec((), tf.int64)
            dataset = tf.data.Dataset.from_generator(rows, output_signature=spec)
            assert [int(x) for x in dataset] == [0, 1, 2, 3, 4]

        def test_clean_too():
            assert float(tf.reduce_sum(tf.ones([4]))) == 4.0
        """
    )
    common = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest"]
    off = pytester.runpytest_subprocess(*common, "-p", "no:eagersession")
    off.assert_outcomes(passed=3)
    result = pytester.runpytest_subprocess(*common, CHAIN_BUDGET)
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*::test_parks_an_iterator leaked 1 TensorFlow object*"])
    result.stdout.no_fnmatch_line("*::test_clean* leaked*")
