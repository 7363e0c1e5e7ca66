"""``./scripts/matrix``: which pairs it runs, how it finds interpreters, and the table it writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from support import load_script

from pytest_eagersession.support_range import PYTHON_RANGE, TENSORFLOW_RANGE

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "matrix.py"


@pytest.fixture(scope="module")
def matrix() -> ModuleType:
    return load_script(SCRIPT, "matrix_script")


def test_the_pairs_cover_the_claimed_range(matrix: ModuleType) -> None:
    pythons = {pair.python for pair in matrix.PAIRS}
    oldest, newest = PYTHON_RANGE
    assert pythons == {f"3.{minor}" for minor in range(oldest[1], newest[1] + 1)}
    tensorflows = {pair.tensorflow for pair in matrix.PAIRS}
    assert tensorflows == {f"2.{TENSORFLOW_RANGE[0][1]}", f"2.{TENSORFLOW_RANGE[1][1]}"}
    gated = [pair.name for pair in matrix.PAIRS if pair.gate]
    assert gated == [f"py3.{newest[1]}-tf2.{TENSORFLOW_RANGE[1][1]}", "py3.11-tf2.16"]


def test_an_interpreter_must_really_be_the_version_asked(
    matrix: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pyenv shim answers for a version it does not enable: it exits non-zero.
    shim = tmp_path / "python3.99"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.99: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    liar = tmp_path / "python3.98"
    liar.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    liar.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    assert matrix.interpreter("3.99") is None
    assert matrix.interpreter("3.98") is None  # it runs, but it is this Python, not 3.98
    current = f"{sys.version_info[0]}.{sys.version_info[1]}"
    (tmp_path / f"python{current}").symlink_to(sys.executable)
    assert matrix.interpreter(current) == str(tmp_path / f"python{current}")


def test_a_missing_interpreter_is_skipped_not_failed(
    matrix: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(matrix, "interpreter", lambda version: None)
    outcome = matrix.check(matrix.PAIRS[0], [], gate=True, setup_only=False)
    assert not outcome.failed
    assert outcome.setup == f"skipped: python{matrix.PAIRS[0].python} is not installed"
    assert "skipped" in matrix.table([outcome]).splitlines()[1]


def test_the_markdown_table_keeps_versions_and_counts_but_not_timings(matrix: ModuleType) -> None:
    ran = matrix.Outcome(
        matrix.PAIRS[-1],
        setup="cached",
        tests="424 passed, 1 skipped, 243 warnings in 171.98s (0:02:51)",
        gate="VERDICT: OK: of 913 tests run with the plugin alone (no baseline), it failed or "
        "errored none other than by a leak report (4 by a leak report)",
        notes=["3.11.7 2.16.2 3.15.1"],
    )
    missing = matrix.Outcome(matrix.PAIRS[0], setup="skipped: python3.13 is not installed")
    assert matrix.markdown([ran, missing]).splitlines()[2:] == [
        "| 3.11.7 | 2.16.2 | 3.15.1 | 424 passed, 1 skipped "
        "| OK (913 tests, 4 true leaks reported) |",
        "| 3.13 (not installed) | 2.21 | - | - | - |",
    ]


def test_unknown_pairs_are_refused_naming_the_valid_ones() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--pair", "py2.7-tf1.0"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "invalid choice: 'py2.7-tf1.0'" in result.stderr
    assert "py3.11-tf2.16" in result.stderr
    listed = subprocess.run(
        [sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, check=True
    )
    assert listed.stdout.split() == [
        "py3.13-tf2.21", "py3.12-tf2.21", "py3.11-tf2.21", "py3.10-tf2.21", "py3.11-tf2.16"
    ]  # fmt: skip


def test_a_failed_run_shows_the_end_of_its_log(
    matrix: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    code = "import sys; print('1 failed, 2 passed'); print('boom'); sys.exit(3)"
    status, summary = matrix.run(venv, ["-c", code], tmp_path / "log.txt")
    assert (status, summary) == (3, "1 failed, 2 passed")
    shown = capsys.readouterr().out
    assert f"-- exit status 3; the end of {tmp_path / 'log.txt'}:" in shown
    assert "   | boom" in shown
    status, summary = matrix.run(venv, ["-c", "print('3 passed')"], tmp_path / "log.txt")
    assert (status, summary) == (0, "3 passed")
    assert capsys.readouterr().out == ""
