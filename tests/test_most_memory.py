"""``--eagersession-most-memory N``: the tests whose bodies peaked highest, after the run."""

from __future__ import annotations

import pytest
import tensorflow  # noqa: F401  (imported before the inner runs: they would import it again)
from support import INNER_RUN, run_inner

SIZES_SUITE = """
    import pytest
    import tensorflow as tf

    @pytest.mark.parametrize("side", [64, 256, 512, 128])
    def test_holds_a_square(side):
        square = tf.ones([side, side])  # side * side * 4 bytes at the peak
        assert float(tf.reduce_sum(square)) == side * side

    def test_makes_nothing():
        pass
"""

TABLE = [
    "*eagersession: the 3 tests with the highest peak of tracked bytes*",
    "      peak   GPU peak  test",
    "*1.0 MiB*test_sizes.py::test_holds_a_square[[]512[]]",
    "*256.0 KiB*test_sizes.py::test_holds_a_square[[]256[]]",
    "*64.0 KiB*test_sizes.py::test_holds_a_square[[]128[]]",
]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_heaviest_tests_are_listed_once_for_the_run(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    pytester.makepyfile(test_sizes=SIZES_SUITE)
    if workers:  # one table, from the controller, whatever worker ran each test
        result = pytester.runpytest_subprocess(*INNER_RUN, "--eagersession-most-memory=3", *workers)
    else:
        result = run_inner(pytester, "--eagersession-most-memory=3")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(TABLE)
    assert result.stdout.str().count("highest peak of tracked bytes") == 1
    result.stdout.no_fnmatch_line("*test_holds_a_square[[]64[]]*")


def test_the_table_is_set_in_the_ini_file_and_off_by_default(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sizes=SIZES_SUITE)
    result = run_inner(pytester)
    result.stdout.no_fnmatch_line("*highest peak*")
    pytester.makeini("[pytest]\neagersession_most_memory = 3\n")
    result = run_inner(pytester)
    result.stdout.fnmatch_lines(TABLE)


@pytest.mark.parametrize("value", ["-1", "abc", "2.5"])
def test_a_bad_count_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile(test_sizes=SIZES_SUITE)
    result = run_inner(pytester, f"--eagersession-most-memory={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*--eagersession-most-memory*expected a whole number of 0 or more, got '{value}'*"]
    )


LIMITED_SUITE = """
    import pytest
    import tensorflow as tf

    def ones_of(side):
        return float(tf.reduce_sum(tf.ones([side, side])))  # side * side * 4 bytes at the peak

    def test_stays_under_the_limit():
        assert ones_of(128) == 128 * 128  # 64 KiB

    def test_goes_over_the_limit():
        assert ones_of(1024) == 1024 * 1024  # 4 MiB

    @pytest.mark.cleanup(max_bytes="8 MiB")
    def test_has_a_limit_of_its_own():
        assert ones_of(1024) == 1024 * 1024
"""


@pytest.mark.parametrize("where", ["option", "ini"])
def test_a_default_limit_fails_every_test_over_it_unless_its_marker_says_otherwise(
    pytester: pytest.Pytester, where: str
) -> None:
    pytester.makepyfile(test_limited=LIMITED_SUITE)
    if where == "ini":
        pytester.makeini("[pytest]\neagersession_max_bytes = 1 MiB\n")
        result = run_inner(pytester)
    else:
        result = run_inner(pytester, "--eagersession-max-bytes=1MiB")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*peaked at 4.0 MiB of tracked TensorFlow objects, over its max_bytes of 1.0 MiB*",
            "FAILED test_limited.py::test_goes_over_the_limit*",
        ]
    )


def test_a_bad_default_limit_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one(): pass")
    result = run_inner(pytester, "--eagersession-max-bytes=lots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--eagersession-max-bytes*"])
