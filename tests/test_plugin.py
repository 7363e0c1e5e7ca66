"""The pytest plugin end to end: inner pytest runs through ``pytester``.

TensorFlow and Keras are imported here, once, so that in-process inner runs reuse them (pytester
restores ``sys.modules`` after each run). Subprocess runs are kept for what needs a fresh process.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

# Imported once here: pytester restores sys.modules after each in-process run, so a module that
# only an inner run imported would be imported again by the next one.
import keras  # noqa: F401
import pytest
import tensorflow
from support import CHAIN_BUDGET, LEAKY, MARKER_SIGNATURE, STRATEGY_CHOICES, run_inner

from pytest_eagersession import SessionStats
from pytest_eagersession.plugin.setting_values import SettingsError
from pytest_eagersession.plugin.settings import OPTIONS, LeakMode, Settings, resolve
from pytest_eagersession.plugin.verdicts import PHASES, PYTEST_ADVICE
from pytest_eagersession.reports.report import LeakRecord, render

# The inner runs' TensorFlow objects are checked by the inner plugin. What they make outside
# their own sessions (collection, parametrize values, the handles that replace destroyed ones)
# belongs to the outer test's session, and pytester keeps the inner reports and tracebacks
# that hold it: the outer tests do not check for leaks of their own.
pytestmark = pytest.mark.cleanup(leaks="off")

CHOICES = f"*: unknown strategy *; {STRATEGY_CHOICES}*"
SIGNATURE = f"{MARKER_SIGNATURE}, max_traces=None, max_bytes=None)"


LEAK_LINES = [
    "*ERROR at teardown of test_leak*",
    "*test_leaky.py::test_leak leaked 1 TensorFlow object (8 B) that outlived its function scope*",
    "*1. tensor: EagerTensor float32[[]2] 8 B*",
    "*held by test_leaky._CACHE (list) -> [[]0] -> EagerTensor*",
]


def _stats_fields() -> set[str]:
    return {field.name for field in dataclasses.fields(SessionStats)}


# ----------------------------------------------------------------- options and the marker


def test_help_lists_the_options(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, "--help")
    assert result.ret == 0
    for option in OPTIONS:
        result.stdout.fnmatch_lines([f"*{option.flag}*"])
        if option.ini_help is not None:
            result.stdout.fnmatch_lines([f"  {option.key} (*):", f"*{option.ini_help[:40]}*"])
    result.stdout.fnmatch_lines(
        [
            "*TensorFlow eager sessions and leak checks*",
            "*--eagersession-strategy=STRATEGY*",
            "*--eagersession-leaks=MODE*",
            "*--eagersession-allow=REGEX*",
            "*--eagersession-track-creation*",
            "*--eagersession-max-leaks=N*",
            "*--eagersession-retention=MODE*",
            "*--eagersession-json=PATH*",
            "*--eagersession-graphs=DIR*",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*eagersession_strategy*", "*eagersession_leaks*", "*eagersession_retention*"]
    )


def test_each_setting_is_named_once_in_the_option_table() -> None:
    names = [option.name for option in OPTIONS]
    fields = [option.field for option in OPTIONS]
    assert len(set(names)) == len(names)
    from_verbosity = {"chain_depth", "full_chains"}  # -v sets them; no option of their own
    assert sorted(fields) == sorted(
        field.name for field in dataclasses.fields(Settings) if field.name not in from_verbosity
    )


def test_leak_modes_are_an_enum_that_takes_the_same_words() -> None:
    assert [mode.value for mode in LeakMode] == ["fail", "warn", "off"]
    assert resolve({"leaks": " WARN "}, {}).leaks is LeakMode.WARN
    assert resolve({}, {"leaks": "off"}).leaks is LeakMode.OFF
    with pytest.raises(SettingsError, match="unknown leaks mode 'never'; choose one of fail, "):
        resolve({"leaks": "never"}, {})


def test_markers_lists_the_cleanup_marker(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, "--markers")
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"@pytest.mark.{SIGNATURE}: run the test in an eager session*"])


def test_strict_markers_accept_the_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_strict="""
        import pytest

        pytestmark = pytest.mark.cleanup(leaks="fail")

        @pytest.mark.cleanup("on_safe_points", track_creation=True)
        def test_marked(eager_session):
            assert eager_session.resource_cleanup_strategy.name == "ON_SAFE_POINTS"
        """
    )
    result = run_inner(pytester, "--strict-markers")
    result.assert_outcomes(passed=1)


# ----------------------------------------------------------------- leaks fail the test


def test_leaky_test_errors_at_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaky=LEAKY)
    result = run_inner(pytester)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(LEAK_LINES)
    result.stdout.fnmatch_lines(
        [
            "*eagersession: leaked TensorFlow objects*",
            "test_leaky.py::test_leak: 1 leaked (8 B)",
            "*short test summary info*",
        ]
    )
    result.stdout.no_fnmatch_line("*test_leaky.py::test_clean leaked*")
    result.stdout.no_fnmatch_line("test_leaky.py::test_clean: * leaked*")


def test_a_leak_has_its_own_status_and_still_counts_as_an_error(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_leaky=LEAKY)
    result = run_inner(pytester)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "test_leaky.py .L. *",
            "*short test summary info*",
            "LEAKED test_leaky.py::test_leak - Failed: test_leaky.py::test_leak leaked 1 *",
        ]
    )
    verbose = run_inner(pytester, "-v")
    verbose.assert_outcomes(passed=2, errors=1)
    verbose.stdout.fnmatch_lines(
        ["test_leaky.py::test_leak PASSED *", "test_leaky.py::test_leak LEAKED *"]
    )


def test_a_teardown_that_fails_for_another_reason_is_an_error_not_a_leak(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_broken="""
        import pytest
        import tensorflow as tf

        _CACHE = []

        @pytest.fixture
        def broken():
            yield
            raise RuntimeError("teardown broke")

        def test_leak_and_broken_teardown(broken):
            _CACHE.append(tf.constant([1.0, 2.0]))
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["test_broken.py .E *", "ERROR test_broken.py::test_leak_and_broken_teardown - Runtime*"]
    )
    result.stdout.no_fnmatch_line("*LEAKED*")


def test_the_header_names_tensorflow_only_once_imported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run_inner(pytester, "--eagersession-leaks=warn")
    version = tensorflow.__version__
    result.stdout.fnmatch_lines(
        [f"eagersession: strategy in_background, leaks warn, TensorFlow {version}"]
    )


def test_the_report_s_advice_is_the_caller_s() -> None:
    record = LeakRecord(
        scope="checkpoint",
        type="EagerTensor",
        kind="tensor",
        dtype="float32",
        shape="[2]",
        nbytes=8,
        device="CPU:0",
        op=None,
        created_at=None,
        retained_by=None,
        summary="tensor: EagerTensor float32[2] 8 B on CPU:0",
    )
    neutral = render("The code", "checkpoint", [record], strategy="in_background")
    assert "--eagersession" not in neutral
    assert "pytest" not in neutral
    assert neutral.endswith(
        "Expected? Allow it with allow=... or session.detach(obj); "
        "creation sites: the session's track_creation option."
    )
    pytest_text = render(
        "The code", "checkpoint", [record], strategy="in_background", advice=PYTEST_ADVICE
    )
    assert pytest_text.endswith(
        "Expected? Allow it with @pytest.mark.cleanup(allow=...) or eager_session.detach(obj); "
        "creation sites: --eagersession-track-creation."
    )


def test_leaked_variable_is_destroyed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_var="""
        import tensorflow as tf

        class Holder:
            var = None

        def test_keep_variable():
            Holder.var = tf.Variable([1.0, 2.0])

        def test_use_it_later():
            Holder.var.numpy()
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=1, failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_keep_variable*",
            "*1. variable: ResourceVariable 'Variable' float32[[]2] 8 B*",
            "*held by test_var.Holder.var -> ResourceVariable*",
            "*The variable objects were cut off their TensorFlow resources at the end of the "
            "scope: using them now fails.*",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*_ test_use_it_later _*", "E * deleted when its eager session closed*"]
    )


# ----------------------------------------------------------------- no false leaks


def test_failing_test_shows_only_its_own_failure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_fails="""
        import pytest
        import tensorflow as tf

        @pytest.fixture(scope="module")
        def table():
            return tf.Variable([1.0, 2.0, 3.0])

        def test_fails():
            t = tf.constant([1.0, 2.0])
            big = tf.zeros([1000])
            assert float(tf.reduce_sum(t)) + float(tf.reduce_sum(big)) == 4.0

        def test_last_of_the_module_fails(table):
            assert table.numpy().tolist() == [0.0]
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*assert (3.0 + 0.0) == 4.0*", "*assert [[]1.0, 2.0, 3.0[]] == [[]0.0[]]*"]
    )
    result.stdout.no_fnmatch_line("*leaked*")


def test_fixture_values_are_not_leaks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_fixtures="""
        import pytest
        import tensorflow as tf

        @pytest.fixture
        def tensor():
            return tf.constant([1.0, 2.0])

        @pytest.fixture
        def variable():
            yield tf.Variable([1.0, 2.0])

        @pytest.fixture(scope="module")
        def weights():
            return tf.constant([1.0, 2.0, 3.0])

        @pytest.fixture(scope="module")
        def shared_variable():
            return tf.Variable([1.0, 2.0])

        class Lazy:
            # builds its variable on first use: in the session of the first test that calls it
            variable = None

            def __call__(self):
                if self.variable is None:
                    self.variable = tf.Variable([10.0])
                return self.variable

        @pytest.fixture(scope="module")
        def lazy():
            return Lazy()

        def test_function_fixtures(tensor, variable):
            assert float(tf.reduce_sum(tensor + variable)) == 6.0

        def test_first(weights, shared_variable, lazy):
            shared_variable.assign_add([1.0, 1.0])
            lazy().assign_add([1.0])
            assert weights.shape == (3,)

        def test_second(weights, shared_variable, lazy):
            assert float(tf.reduce_sum(weights)) == 6.0
            assert shared_variable.numpy().tolist() == [2.0, 3.0]
            assert lazy().numpy().tolist() == [11.0]
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=3)
    result.stdout.no_fnmatch_line("*leaked*")


def test_module_fixture_leak_is_reported_at_module_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_modleak="""
        import pytest
        import tensorflow as tf

        _KEPT = []

        @pytest.fixture(scope="module")
        def weights():
            t = tf.constant([1.0, 2.0, 3.0])
            _KEPT.append(t)
            return t

        @pytest.fixture(scope="module")
        def side_effect():
            _KEPT.append(tf.constant([7, 8]))

        def test_first(weights, side_effect):
            assert weights.shape == (3,)

        def test_second(weights):
            assert float(tf.reduce_sum(weights)) == 6.0
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_second*",
            "The module of test_modleak.py::test_second leaked 2 TensorFlow objects (20 B) "
            "that outlived its module scope*",
            "*1. tensor: EagerTensor float32[[]3] 12 B*",
            "*held by test_modleak._KEPT (list) -> [[]0] -> EagerTensor*",
            "*2. tensor: EagerTensor int32[[]2] 8 B*",
            "*held by test_modleak._KEPT (list) -> [[]1] -> EagerTensor*",
        ]
    )
    result.stdout.no_fnmatch_line("*ERROR at teardown of test_first*")
    result.stdout.no_fnmatch_line("*function scope*")


def test_function_and_module_leaks_in_one_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_both="""
        import pytest
        import tensorflow as tf

        _KEPT = []

        @pytest.fixture(scope="module")
        def weights():
            _KEPT.append(tf.constant([1.0, 2.0, 3.0]))

        def test_only(weights):
            _KEPT.append(tf.constant([4.0]))
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_only*",
            "test_both.py::test_only leaked 1 TensorFlow object (4 B) that outlived its "
            "function scope*",
            "*held by test_both._KEPT (list) -> [[]1] -> EagerTensor*",
            "The module of test_both.py::test_only leaked 1 TensorFlow object (12 B) "
            "that outlived its module scope*",
            "*held by test_both._KEPT (list) -> [[]0] -> EagerTensor*",
        ]
    )


def test_no_false_leaks(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(
        test_noleaks="""
        import logging

        import keras
        import numpy as np
        import pytest
        import tensorflow as tf

        @pytest.mark.parametrize("t", [tf.constant(1.0), tf.constant([2.0, 3.0])])
        def test_parametrized(t):
            assert float(tf.reduce_sum(t)) > 0

        def test_caplog(caplog):
            caplog.set_level(logging.INFO)
            t = tf.constant([1.0, 2.0])
            logging.getLogger("inner").info("value %s", t)
            assert caplog.records[0].args[0] is t

        def test_keras_model():
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
            model.compile(optimizer="sgd", loss="mse")
            x = np.ones((4, 3), "float32")
            model.fit(x, np.zeros((4, 2), "float32"), epochs=1, verbose=0)
            assert model(x).shape == (4, 2)

        class Node:
            def __init__(self):
                self.me = self
                self.tensor = tf.constant([1.0, 2.0])
                self.variable = tf.Variable(1.0)

        def test_reference_cycles():
            for _ in range(3):
                Node()
        """
    )
    # The outer run's log capture handlers would keep the inner run's records, with the tensor.
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    result = run_inner(pytester)
    result.assert_outcomes(passed=5)
    result.stdout.no_fnmatch_line("*leaked*")


# ----------------------------------------------------------------- strategies


STRATEGIES = """
    import pytest

    def test_unmarked(eager_session):
        assert eager_session.resource_cleanup_strategy.name == "{unmarked}"

    @pytest.mark.cleanup("on_safe_points")
    def test_positional(eager_session):
        assert eager_session.resource_cleanup_strategy.name == "ON_SAFE_POINTS"

    @pytest.mark.cleanup(strategy="on_safe_points")
    def test_keyword(eager_session):
        assert eager_session.resource_cleanup_strategy.name == "ON_SAFE_POINTS"

    @pytest.mark.cleanup(strategy="on_safe_points")
    class TestMarkedClass:
        def test_in_class(self, eager_session):
            assert eager_session.resource_cleanup_strategy.name == "ON_SAFE_POINTS"

        @pytest.mark.cleanup("on_session_close")
        def test_closest_mark_wins(self, eager_session):
            assert eager_session.resource_cleanup_strategy.name == "ON_SESSION_CLOSE"
"""


@pytest.mark.parametrize(
    ("ini", "cli", "unmarked"),
    [
        (None, None, "IN_BACKGROUND"),
        (None, "on_session_close", "ON_SESSION_CLOSE"),
        ("on_safe_points", None, "ON_SAFE_POINTS"),
        ("on_session_close", "on-safe-points", "ON_SAFE_POINTS"),
    ],
    ids=["default", "cli", "ini", "cli-over-ini"],
)
def test_strategy_selection(
    pytester: pytest.Pytester, ini: str | None, cli: str | None, unmarked: str
) -> None:
    pytester.makepyfile(test_strategies=STRATEGIES.format(unmarked=unmarked))
    if ini is not None:
        pytester.makeini(f"[pytest]\neagersession_strategy = {ini}\n")
    args = [f"--eagersession-strategy={cli}"] if cli is not None else []
    result = run_inner(pytester, *args)
    result.assert_outcomes(passed=5)


def test_module_pytestmark_and_marker_over_cli_and_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\neagersession_strategy = on_session_close\n")
    pytester.makepyfile(
        test_pytestmark="""
        import pytest

        pytestmark = pytest.mark.cleanup("on_safe_points")

        def test_module_mark(eager_session, module_eager_session):
            assert eager_session.resource_cleanup_strategy.name == "ON_SAFE_POINTS"
            assert module_eager_session.resource_cleanup_strategy.name == "ON_SAFE_POINTS"
        """
    )
    result = run_inner(pytester, "--eagersession-strategy=in_background")
    result.assert_outcomes(passed=1)


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("args", "ini", "expected"),
    [
        (["--eagersession-strategy=sometimes"], None, CHOICES),
        ([], "eagersession_strategy = nope", CHOICES),
        (["--eagersession-leaks=maybe"], None, "*unknown leaks mode 'maybe'; choose one of fail*"),
        (["--eagersession-max-leaks=-1"], None, "*expected a whole number of 0 or more*"),
        (["--eagersession-allow=("], None, "*--eagersession-allow*"),
        (["--eagersession-chain-budget=0"], None, "*expected a number of seconds above 0, got '0'"),
        ([], "eagersession_chain_budget = soon", "*expected a number of seconds above 0*"),
    ],
    ids=[
        "cli-strategy",
        "ini-strategy",
        "cli-leaks",
        "max-leaks",
        "allow-regex",
        "cli-chain-budget",
        "ini-chain-budget",
    ],
)
def test_bad_settings_are_usage_errors(
    pytester: pytest.Pytester, args: list[str], ini: str | None, expected: str
) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    if ini is not None:
        pytester.makeini(f"[pytest]\n{ini}\n")
    # not run_inner(): its own --eagersession-chain-budget would win over the ini value under test
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {expected}"])
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    result.stderr.no_fnmatch_line("*INTERNALERROR*")


@pytest.mark.parametrize(
    ("args", "ini", "verbosity", "expected"),
    [
        ([], None, 0, 5.0),
        ([], None, 1, 20.0),
        (["--eagersession-chain-budget=3.5"], None, 0, 3.5),
        ([], "eagersession_chain_budget = 1.25", 0, 1.25),
        (["--eagersession-chain-budget=4"], "eagersession_chain_budget = 1.25", 1, 4.0),
    ],
    ids=["default", "verbose", "cli", "ini", "cli-over-ini"],
)
def test_chain_budget_from_command_line_ini_and_verbosity(
    pytester: pytest.Pytester, args: list[str], ini: str | None, verbosity: int, expected: float
) -> None:
    pytester.makepyfile(
        f"""
        from pytest_eagersession.plugin import SETTINGS_KEY

        def test_budget(pytestconfig):
            assert pytestconfig.stash[SETTINGS_KEY].chain_budget_s == {expected}
        """
    )
    if ini is not None:
        pytester.makeini(f"[pytest]\n{ini}\n")
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args, *["-v"] * verbosity
    )
    result.assert_outcomes(passed=1)


def test_bad_marker_errors_only_its_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_badmark="""
        import pytest

        @pytest.mark.cleanup("bad")
        def test_bad_strategy():
            pass

        @pytest.mark.cleanup(unknown=1)
        def test_unknown_argument():
            pass

        @pytest.mark.cleanup(leaks="sometimes")
        def test_bad_leaks(eager_session):
            pass

        def test_fine(eager_session):
            pass
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=1, errors=3)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_bad_strategy*",
            "@pytest.mark.cleanup(strategy=...): unknown strategy 'bad'; choose one of "
            "in_background, on_safe_points, on_session_close",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_unknown_argument*",
            "@pytest.mark.cleanup: *unknown*; its signature is " + SIGNATURE,
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_bad_leaks*",
            "@pytest.mark.cleanup(leaks=...): unknown leaks mode 'sometimes'; "
            "choose one of fail, warn, off",
            "*short test summary info*",
        ]
    )
    result.stdout.no_fnmatch_line("*During handling of the above exception*")
    result.stdout.no_fnmatch_line("*KeyError*")
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


# ----------------------------------------------------------------- leaks="warn", "off", allow


@pytest.mark.parametrize("how", ["marker", "cli", "ini"])
def test_leaks_warn(pytester: pytest.Pytester, how: str) -> None:
    mark = '@pytest.mark.cleanup(leaks="warn")' if how == "marker" else ""
    pytester.makepyfile(
        test_warn=f"""
        import pytest
        import tensorflow as tf

        _CACHE = []

        {mark}
        def test_leak():
            _CACHE.append(tf.constant([1.0, 2.0]))

        def test_after():
            assert _CACHE[0].numpy().tolist() == [1.0, 2.0]
        """
    )
    if how == "ini":
        pytester.makeini("[pytest]\neagersession_leaks = warn\n")
    result = run_inner(pytester, *(["--eagersession-leaks=warn"] if how == "cli" else []))
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*warnings summary*",
            "test_warn.py::test_leak",
            "*EagerSessionLeakWarning: test_warn.py::test_leak leaked 1 TensorFlow object*",
            "*held by test_warn._CACHE (list) -> [[]0] -> EagerTensor*",
        ]
    )


@pytest.mark.parametrize(
    ("mark", "args"),
    [
        ('@pytest.mark.cleanup(leaks="off")', []),
        ("", ["--eagersession-leaks=off"]),
        ('@pytest.mark.cleanup(allow=r"EagerTensor float32\\[2\\]")', []),
        ("@pytest.mark.cleanup(allow=[lambda survivor: survivor.kind == 'tensor'])", []),
        ("", ["--eagersession-allow=float32", "--eagersession-allow=nothing"]),
    ],
    ids=["marker-off", "cli-off", "marker-allow", "marker-allow-predicate", "cli-allow"],
)
def test_leaks_off_and_allowed(pytester: pytest.Pytester, mark: str, args: list[str]) -> None:
    pytester.makepyfile(
        test_allowed=f"""
        import pytest
        import tensorflow as tf

        _CACHE = []

        {mark}
        def test_leak():
            _CACHE.append(tf.constant([1.0, 2.0]))
        """
    )
    result = run_inner(pytester, *args)
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*warnings summary*")
    result.stdout.no_fnmatch_line("*leaked*")


def test_allow_does_not_hide_other_leaks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_partly="""
        import pytest
        import tensorflow as tf

        _CACHE = []

        @pytest.mark.cleanup(allow="int32")
        def test_leak():
            _CACHE.append(tf.constant([1.0, 2.0]))
            _CACHE.append(tf.constant([1, 2]))
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*leaked 1 TensorFlow object*", "*EagerTensor float32*"])
    result.stdout.no_fnmatch_line("*EagerTensor int32*")


# ----------------------------------------------------------------- fixtures


def test_session_fixtures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_fixtures="""
        import pytest
        import tensorflow as tf
        from pytest_eagersession import EagerSession

        _KEPT = []

        def test_fixtures_are_sessions(
            eager_session, class_eager_session, module_eager_session, session_eager_session
        ):
            sessions = [
                eager_session, class_eager_session, module_eager_session, session_eager_session
            ]
            assert all(isinstance(session, EagerSession) for session in sessions)
            assert len({id(session) for session in sessions}) == 4
            assert not any(session.closed for session in sessions)

        class TestInClass:
            def test_class_session(self, eager_session, class_eager_session):
                assert isinstance(class_eager_session, EagerSession)
                assert class_eager_session is not eager_session

        def test_detach(eager_session):
            t = tf.constant([1.0, 2.0])
            eager_session.detach(t)
            _KEPT.append(t)

        def test_detached_still_usable():
            assert _KEPT[0].numpy().tolist() == [1.0, 2.0]
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=4)


def test_op_builder_through_the_fixture(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_eagersession.core.operations")
    pytester.makepyfile(
        test_ops="""
        import tensorflow as tf

        def test_add(eager_session):
            op = (
                eager_session.op_builder("Add")
                .add_input(tf.constant(2.0))
                .add_input(tf.constant(3.0))
                .build()
            )
            assert float(op.output(0).tensor()) == 5.0
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=1)


# ----------------------------------------------------------------- JSON, junitxml, graphs

JSON_TESTS = """
    import pytest
    import tensorflow as tf

    _CACHE = []
    _TRACKED = []

    def test_leak():
        _CACHE.append(tf.constant([1.0, 2.0]))

    @pytest.mark.cleanup("on_safe_points", track_creation=True)
    def test_tracked():
        _TRACKED.append(tf.zeros([3], tf.int32) + 1)

    def test_clean():
        t = tf.constant([1.0, 2.0])
        assert float(tf.reduce_sum(t)) == 3.0
"""

LEAK_FIELDS = {
    "destroyed",
    "scope",
    "type",
    "kind",
    "dtype",
    "shape",
    "nbytes",
    "device",
    "op",
    "created_at",
    "retained_by",
    "summary",
    "allowed",
    "root",
    "slot",
    "holder_kind",
}


def _by_nodeid(path: Path) -> dict[str, dict[str, Any]]:
    data = json.loads(path.read_text())
    assert set(data) == {"tests", "holders"}
    return {entry["nodeid"]: entry for entry in data["tests"]}


def test_json_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_json=JSON_TESTS)
    out = pytester.path / "reports" / "leaks.json"
    result = run_inner(pytester, f"--eagersession-json={out}")
    result.assert_outcomes(passed=3, errors=2)
    tests = _by_nodeid(out)
    assert list(tests) == [
        "test_json.py::test_leak",
        "test_json.py::test_tracked",
        "test_json.py::test_clean",
    ]
    # one line per test, and per holder: grep finds a test's entry whole
    lines = out.read_text().splitlines()
    for nodeid, entry in tests.items():
        (line,) = [line for line in lines if f'"nodeid": "{nodeid}"' in line]
        assert json.loads(line.strip().rstrip(",")) == entry
    assert len(lines) == 2 + len(tests) + 2 + len(json.loads(out.read_text())["holders"]) + 2
    for entry in tests.values():
        assert set(entry) == {
            "nodeid",
            "outcome",
            "strategy",
            "stats",
            "leaks",
            "retention",
            "peak_bytes",
            "device_peak_bytes",
            "end_bytes",
            "objects_made",
            "trace_count",
            "traces",
            "timings",
            "retained",
            "run_order",
            "worker",
        }
        assert set(entry["stats"]) == _stats_fields()
        assert list(entry["timings"]) == list(PHASES)
        assert all(seconds >= 0 for seconds in entry["timings"].values())
        counts = {name: value for name, value in entry["stats"].items() if "seconds" not in name}
        assert all(isinstance(value, int) for value in counts.values())
        assert entry["stats"]["close_collection_seconds"] >= 0

    leak = tests["test_json.py::test_leak"]
    # A leaking test's time goes to finding who holds its leak too; a clean one's does not.
    assert leak["timings"]["explain"] > 0
    assert tests["test_json.py::test_clean"]["timings"]["explain"] == 0
    assert leak["outcome"] == "error"
    assert leak["strategy"] == "in_background"
    assert len(leak["leaks"]) == 1
    record = leak["leaks"][0]
    assert set(record) == LEAK_FIELDS
    assert record["device"].endswith("CPU:0")
    del record["device"]
    assert record == {
        "scope": "function",
        "type": "tensorflow.python.framework.ops.EagerTensor",
        "kind": "tensor",
        "dtype": "float32",
        "shape": "[2]",
        "nbytes": 8,
        "op": None,
        "created_at": None,
        "retained_by": "held by test_json._CACHE (list) -> [0] -> EagerTensor",
        "summary": "tensor: EagerTensor float32[2] 8 B on CPU:0",
        "allowed": False,
        "destroyed": False,
        "root": "test_json._CACHE (list)",
        "slot": "[0]",
        "holder_kind": "the test module's own state; clear it in a fixture, or monkeypatch a "
        "fresh one for each test",
    }

    tracked = tests["test_json.py::test_tracked"]
    assert tracked["outcome"] == "error"
    assert tracked["strategy"] == "on_safe_points"
    [record] = tracked["leaks"]
    assert record["op"] == "AddV2"
    assert record["created_at"] == f"{pytester.path / 'test_json.py'}:12 in test_tracked"
    assert (record["dtype"], record["shape"], record["nbytes"]) == ("int32", "[3]", 12)
    assert record["retained_by"] == "held by test_json._TRACKED (list) -> [0] -> EagerTensor"

    clean = tests["test_json.py::test_clean"]
    assert clean["outcome"] == "passed"
    assert clean["strategy"] == "in_background"
    assert clean["leaks"] == []
    # The body's figures: the leaking test's constant is still alive at its end; the clean
    # test's sum is counted (an op's output), its constant not (no op made it, and it died
    # before any scan); neither traced.
    assert (leak["peak_bytes"], leak["end_bytes"], leak["objects_made"]) == (8, 8, 1)
    assert (clean["peak_bytes"], clean["end_bytes"], clean["objects_made"]) == (4, 0, 1)
    assert (clean["trace_count"], clean["traces"]) == (0, [])

    # Each holder once, most bytes first, with what it keeps and the tests that left it.
    assert json.loads(out.read_text())["holders"] == [
        {
            "root": "test_json._TRACKED (list)",
            "holder": "the test module's own state; clear it in a fixture, or monkeypatch a "
            "fresh one for each test",
            "objects": 1,
            "nbytes": 12,
            "kinds": {"tensor": 1},
            "tests": ["test_json.py::test_tracked"],
        },
        {
            "root": "test_json._CACHE (list)",
            "holder": "the test module's own state; clear it in a fixture, or monkeypatch a "
            "fresh one for each test",
            "objects": 1,
            "nbytes": 8,
            "kinds": {"tensor": 1},
            "tests": ["test_json.py::test_leak"],
        },
    ]


def test_junitxml_and_graphs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaky=LEAKY)
    xml_path = pytester.path / "junit.xml"
    graphs = pytester.path / "graphs"
    result = run_inner(pytester, f"--junitxml={xml_path}", f"--eagersession-graphs={graphs}")
    result.assert_outcomes(passed=2, errors=1)
    root = ET.parse(xml_path).getroot()
    leak_properties = {
        case.get("name"): [
            prop.get("value")
            for prop in case.iter("property")
            if prop.get("name") == "eagersession_leak"
        ]
        for case in root.iter("testcase")
    }
    assert leak_properties == {
        "test_leak": [
            "tensor: EagerTensor float32[2] 8 B on CPU:0; "
            "held by test_leaky._CACHE (list) -> [0] -> EagerTensor"
        ],
        "test_clean": [],
    }
    dots = sorted(graphs.glob("*.dot"))
    assert [dot.name for dot in dots] == ["test_leaky.py__test_leak-function-1.dot"]
    assert dots[0].read_text().startswith("digraph")


# ----------------------------------------------------------------- xdist, -W error


def test_xdist_gives_the_same_outcomes_and_leaks(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_json=JSON_TESTS)
    serial_json = pytester.path / "serial.json"
    parallel_json = pytester.path / "parallel.json"
    serial = run_inner(pytester, f"--eagersession-json={serial_json}")
    serial.assert_outcomes(passed=3, errors=2)
    parallel = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", CHAIN_BUDGET, "-n", "2", f"--eagersession-json={parallel_json}"
    )
    parallel.assert_outcomes(passed=3, errors=2)
    parallel.stdout.fnmatch_lines(
        [
            "*eagersession: leaked TensorFlow objects*",
            "test_json.py::test_* 1 leaked (*)",
            "test_json.py::test_* 1 leaked (*)",
        ]
    )
    # The leak's status travels from the workers with the report.
    parallel.stdout.fnmatch_lines(["LEAKED test_json.py::test_*", "LEAKED test_json.py::test_*"])

    def comparable(path: Path) -> dict[str, Any]:
        return {
            nodeid: (entry["outcome"], entry["strategy"], entry["leaks"])
            for nodeid, entry in _by_nodeid(path).items()
        }

    assert comparable(parallel_json) == comparable(serial_json)


def test_warnings_as_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaky=LEAKY)
    result = run_inner(pytester, "-W", "error")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(LEAK_LINES)
    result.stdout.no_fnmatch_line("*warnings summary*")


# ----------------------------------------------------------------- unittest


def test_unittest_test_cases(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_unit="""
        import tensorflow as tf

        _CACHE = []

        class LeakyTest(tf.test.TestCase):
            def test_leak(self):
                _CACHE.append(tf.constant([1.0, 2.0]))

        class CleanTest(tf.test.TestCase):
            def test_clean(self):
                self.assertAllEqual(tf.constant([1.0, 2.0]) * 2, [2.0, 4.0])
        """
    )
    result = run_inner(pytester)
    # tf.test.TestCase.test_session is a context manager, which pytest collects and skips
    result.assert_outcomes(passed=2, errors=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of LeakyTest.test_leak*",
            "*test_unit.py::LeakyTest::test_leak leaked 1 TensorFlow object*",
            "*held by test_unit._CACHE (list) -> [[]0] -> EagerTensor*",
        ]
    )
    result.stdout.no_fnmatch_line("*ERROR at teardown of CleanTest*")


# ----------------------------------------------------------------- TensorFlow stays unimported

NO_TENSORFLOW = """
    import sys

    def test_tensorflow_not_imported():
        assert "tensorflow" not in sys.modules
"""


def test_disabled_plugin_never_imports_tensorflow(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain=NO_TENSORFLOW
        + """
    def test_no_fixture(eager_session):
        pass
    """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:eagersession")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*fixture 'eager_session' not found*"])


def test_enabled_plugin_without_tensorflow_never_imports_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain=NO_TENSORFLOW
        + """
    def test_fixture(eager_session):
        assert not eager_session.closed

    class TestWider:
        def test_wider(self, class_eager_session, module_eager_session):
            assert class_eager_session is not module_eager_session
    """
    )
    json_path = pytester.path / "out.json"
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--eagersession-strategy=on_safe_points",
        f"--eagersession-json={json_path}",
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["eagersession: strategy on_safe_points, leaks fail"])
    result.stdout.no_fnmatch_line("*TensorFlow*")  # not imported for the header
    tests = _by_nodeid(json_path)
    assert {entry["strategy"] for entry in tests.values()} == {"on_safe_points"}


ONE_PLUGIN_OBJECT = """
    import json

    import pytest
    import tensorflow as tf

    from pytest_eagersession.plugin import RUN_KEY

    KEPT = []

    def pytest_sessionstart(session):
        ours = [
            name
            for name, plugin in session.config.pluginmanager.list_name_plugin()
            if name and name.startswith("eagersession") and plugin is not None
        ]
        run = session.config.stash[RUN_KEY]
        with open("registered.json", "w") as out:
            json.dump({"names": sorted(ours), "scopes": run.scopes.open_sessions() == []}, out)

    @pytest.fixture(scope="session")
    def shared():
        yield
        KEPT.append(tf.Variable([1.0]))  # made as the run's last scope closes: its leak
"""


def test_the_plugin_registers_one_object_and_writes_the_json_report_last(
    pytester: pytest.Pytester,
) -> None:
    """One object of the plugin's own is registered, kept in ``config.stash``; the end of the
    run closes the wider scopes before the JSON report is written, so their leaks are in it."""
    pytester.makeconftest(ONE_PLUGIN_OBJECT)
    pytester.makepyfile(test_one="def test_uses(shared):\n    pass\n")
    out = pytester.path / "report.json"
    result = run_inner(pytester, f"--eagersession-json={out}")
    registered = json.loads((pytester.path / "registered.json").read_text())
    assert registered == {"names": ["eagersession", "eagersession-run"], "scopes": True}
    report = json.loads(out.read_text())
    leaks = [leak for test in report["tests"] for leak in test.get("leaks", [])]
    assert result.ret != 0
    assert ["ResourceVariable" in leak["summary"] for leak in leaks] == [True]
