"""The tested version range, and what the plugin says outside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_eagersession.base.support_range import (
    PYTHON_RANGE,
    TENSORFLOW_RANGE,
    python_warning,
    tensorflow_warning,
)


@pytest.mark.parametrize("minor", range(PYTHON_RANGE[0][1], PYTHON_RANGE[1][1] + 1))
def test_tested_pythons_get_no_warning(minor: int) -> None:
    assert python_warning((3, minor)) is None


def test_a_newer_python_is_told_what_is_not_known_to_work() -> None:
    warning = python_warning((3, 14))
    assert warning is not None
    assert "tested on Python 3.10 to 3.13, not 3.14" in warning
    assert "3.14.0 to 3.14.4 collect incrementally" in warning
    assert "gc.freeze()" in warning


def test_an_older_python_is_named() -> None:
    assert python_warning((3, 9)) == "pytest-eagersession is tested on Python 3.10 to 3.13, not 3.9"


@pytest.mark.parametrize("version", ["2.16.2", "2.18.1", "2.21.0", "2.21.0rc1"])
def test_tested_tensorflows_get_no_warning(version: str) -> None:
    assert tensorflow_warning(version) is None


@pytest.mark.parametrize("version", ["2.22.0", "2.22.0-rc0", "3.0.0"])
def test_a_newer_tensorflow_is_named(version: str) -> None:
    warning = tensorflow_warning(version)
    assert warning is not None
    assert f"tested on TensorFlow 2.16 to 2.21, not {version}" in warning


def test_the_project_metadata_states_the_same_range() -> None:
    text = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    newest_python = PYTHON_RANGE[1]
    assert f'requires-python = ">=3.{PYTHON_RANGE[0][1]},<3.{newest_python[1] + 1}"' in text
    oldest_tf, newest_tf = TENSORFLOW_RANGE
    assert re.search(rf'"tensorflow-cpu>=2\.{oldest_tf[1]}(\.\d+)?,<2\.{newest_tf[1] + 1}"', text)
    for minor in range(PYTHON_RANGE[0][1], newest_python[1] + 1):
        assert f"Programming Language :: Python :: 3.{minor}" in text


def test_the_header_names_the_settings_and_warns_on_an_untested_python(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["eagersession: strategy in_background, leaks fail*"])
    if python_warning() is None:  # (a TensorFlow outside the range warns in the summary)
        result.stdout.no_fnmatch_line("*eagersession: WARNING: *tested on Python*")
    pytester.makeconftest(
        "import pytest_eagersession.plugin as plugin\n"
        "from pytest_eagersession.base import support_range\n"
        "plugin.python_warning = lambda: support_range.python_warning((3, 14))\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--eagersession-strategy=on_safe_points")
    result.stdout.fnmatch_lines(
        [
            "eagersession: strategy on_safe_points, leaks fail*",
            "eagersession: WARNING: *tested on Python 3.10 to 3.13, not 3.14*",
        ]
    )
    result.assert_outcomes(passed=1)
