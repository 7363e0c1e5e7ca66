"""``./scripts/matrix``: which pairs it runs, how it finds interpreters, and the table it writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from support import load_script

from pytest_eagersession.base.support_range import PYTHON_RANGE, TENSORFLOW_RANGE, parse_version

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "matrix.py"


@pytest.fixture(scope="module")
def matrix() -> ModuleType:
    return load_script(SCRIPT, "matrix_script")


def test_the_pairs_cover_the_claimed_range(matrix: ModuleType) -> None:
    tested = [pair for pair in matrix.PAIRS if not pair.prerelease]
    pythons = {pair.python for pair in tested}
    oldest, newest = PYTHON_RANGE
    assert pythons == {f"3.{minor}" for minor in range(oldest[1], newest[1] + 1)}
    tensorflows = {pair.tensorflow for pair in tested}
    assert tensorflows == {f"2.{TENSORFLOW_RANGE[0][1]}", f"2.{TENSORFLOW_RANGE[1][1]}"}
    gated = [pair.name for pair in matrix.PAIRS if pair.gate]
    assert gated == [f"py3.{newest[1]}-tf2.{TENSORFLOW_RANGE[1][1]}", "py3.11-tf2.16"]
    assert tested[0].requirements == ("tensorflow-cpu==2.21.*",)
    (floors,) = [pair for pair in tested if pair.floors]
    assert floors is tested[-1]  # the oldest pair installs the floors


def test_the_oldest_pair_installs_every_floor_the_metadata_declares(
    matrix: ModuleType, tmp_path: Path
) -> None:
    # ./scripts/matrix runs on Python 3.11 or later (python3.11 where it can): it reads
    # pyproject.toml with tomllib, which Python 3.10, one of the pairs, lacks
    pytest.importorskip("tomllib")
    (floors,) = [pair for pair in matrix.PAIRS if pair.floors]
    pins = dict(pin.split("==") for pin in floors.requirements)
    assert set(pins) == {"pytest", "objgraph", "tensorflow-cpu"}
    assert pins["tensorflow-cpu"].startswith(f"{floors.tensorflow}.")
    written = tmp_path / "pyproject.toml"
    written.write_text(
        '[project]\ndependencies = ["pytest>=9.1", "objgraph>=3.6.1"]\n'
        '[project.optional-dependencies]\ncpu = ["tensorflow-cpu>=2.17.1,<2.30"]\n'
    )
    assert matrix.floors(written) == ("pytest==9.1", "objgraph==3.6.1", "tensorflow-cpu==2.17.1")
    written.write_text(
        '[project]\ndependencies = ["pytest"]\n[project.optional-dependencies]\ncpu = []\n'
    )
    with pytest.raises(ValueError, match="'pytest' declares no floor"):
        matrix.floors(written)


def test_the_prerelease_is_the_next_tensorflow_outside_the_range(matrix: ModuleType) -> None:
    (pre,) = [pair for pair in matrix.PAIRS if pair.prerelease]
    assert pre.name == "py3.13-tf2.22-pre"
    assert parse_version(pre.tensorflow) > TENSORFLOW_RANGE[1]
    assert pre.requirements == ("tensorflow-cpu~=2.22.0rc0",)  # its release candidates, then 2.22.x
    assert not pre.gate


@pytest.mark.parametrize(
    ("prerelease_fails", "regular_fails", "status"),
    [(False, False, 0), (True, False, 0), (False, True, 1), (True, True, 1)],
)
def test_a_failing_prerelease_is_shown_but_does_not_set_the_exit_status(
    matrix: ModuleType, prerelease_fails: bool, regular_fails: bool, status: int
) -> None:
    (pre,) = [pair for pair in matrix.PAIRS if pair.prerelease]
    outcomes = [
        matrix.Outcome(matrix.PAIRS[0], setup="cached", tests="1 failed", failed=regular_fails),
        matrix.Outcome(pre, setup="cached", tests="2 failed", failed=prerelease_fails),
    ]
    assert matrix.exit_status(outcomes) == status
    rows = matrix.table(outcomes).splitlines()
    assert rows[1].endswith("FAILED" if regular_fails else "ok")
    assert rows[2].startswith("py3.13-tf2.22-pre ")
    assert rows[2].endswith(
        f"{'FAILED' if prerelease_fails else 'ok'} (pre-release, allowed to fail)"
    )
    tensorflow = matrix.markdown(outcomes).splitlines()[3].split(" | ")[1]
    assert tensorflow == "2.22 (pre-release, allowed to fail)"


def test_a_failed_setup_of_the_prerelease_does_not_set_the_exit_status(
    matrix: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(pair: object, python: str) -> None:
        raise matrix.SetupFailed(
            ["pip", "install", "tensorflow-cpu"], "ERROR: ResolutionImpossible", machine=False
        )

    monkeypatch.setattr(matrix, "interpreter", lambda version: sys.executable)
    monkeypatch.setattr(matrix, "environment", broken)
    assert matrix.main(["--setup-only", "--pair", "py3.13-tf2.22-pre"]) == 0
    shown = capsys.readouterr().out
    assert "set-up failed: pip install tensorflow-cpu: ERROR: ResolutionImpossible" in shown
    assert matrix.main(["--setup-only", "--pair", "py3.11-tf2.16"]) == 1


#: pip's words, cut from real runs: the index out of reach, the disk full, and a conflict.
OFFLINE = """\
WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after \
connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object \
at 0x7f>: Failed to establish a new connection: [Errno -3] Temporary failure in name \
resolution')': /simple/matplotlib/
ERROR: Could not find a version that satisfies the requirement matplotlib>=3.7 (from versions: none)
ERROR: No matching distribution found for matplotlib>=3.7
"""
DISK_FULL = (
    "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n"
)
CONFLICT = """\
ERROR: Cannot install pytest-eagersession[test]==0.1.0 and pytest==7.0 because these package \
versions have conflicting dependencies.
ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""


@pytest.mark.parametrize(
    ("output", "reason", "machine"),
    [
        (
            OFFLINE,
            "ERROR: Could not find a version that satisfies the requirement matplotlib>=3.7 "
            "(from versions: none) (NewConnectionError)",
            True,
        ),
        (DISK_FULL, DISK_FULL.strip(), True),
        (CONFLICT, CONFLICT.splitlines()[0], False),
        ("", "pip printed nothing", False),
        (
            "WARNING: Location 'file:///opt/pypi-more/simple/cffi/' is ignored\nKilled\n",
            "Killed",
            False,
        ),
    ],
)
def test_pip_says_whether_the_machine_or_the_project_stopped_it(
    matrix: ModuleType, output: str, reason: str, machine: bool
) -> None:
    assert matrix.failure_reason(output) == (reason, machine)


def pip_that_fails(tmp_path: Path, output: str) -> list[str]:
    """A stand-in for pip that prints ``output``, counts its calls and fails."""
    script = tmp_path / "pip.py"
    script.write_text(
        "import pathlib, sys\n"
        f"calls = pathlib.Path({str(tmp_path / 'calls')!r})\n"
        "calls.write_text(str(int(calls.read_text() or 0) + 1) if calls.exists() else '1')\n"
        f"sys.stdout.write({output!r})\n"
        "sys.exit(1)\n"
    )
    return [sys.executable, str(script)]


@pytest.mark.parametrize(("output", "attempts"), [(OFFLINE, 3), (CONFLICT, 1)])
def test_the_machines_trouble_is_retried_and_the_projects_is_not(
    matrix: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    output: str,
    attempts: int,
) -> None:
    monkeypatch.setattr(matrix, "RETRY_PAUSE_SECONDS", 0.0)
    command = pip_that_fails(tmp_path, output)
    with (tmp_path / "setup.txt").open("w") as log, pytest.raises(matrix.SetupFailed) as failed:
        matrix.install(log, command)
    assert (tmp_path / "calls").read_text() == str(attempts)
    assert failed.value.machine is (output is OFFLINE)
    assert failed.value.reason == matrix.failure_reason(output)[0]
    assert (tmp_path / "setup.txt").read_text() == output * attempts  # every attempt kept


def test_a_pair_the_machine_could_not_build_is_not_run_and_not_failed(
    matrix: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unreachable(pair: object, python: str) -> None:
        raise matrix.SetupFailed(
            ["pip", "install"], *matrix.failure_reason(OFFLINE)[:1], machine=True
        )

    monkeypatch.setattr(matrix, "interpreter", lambda version: sys.executable)
    monkeypatch.setattr(matrix, "environment", unreachable)
    assert matrix.main(["--setup-only", "--pair", "py3.12-tf2.21"]) == 0
    shown = capsys.readouterr().out.splitlines()
    (row,) = [line for line in shown if line.startswith("py3.12-tf2.21 ")]
    assert "not built, the machine's trouble: ERROR: Could not find a version" in row
    assert row.endswith("NOT RUN")
    assert shown[-1].startswith("NOT RUN: py3.12-tf2.21, not built, the machine's trouble: ")
    outcome = matrix.check(matrix.PAIRS[1], [], gate=True, setup_only=False)
    assert outcome.unbuilt
    assert not outcome.failed
    assert matrix.markdown([outcome]).splitlines()[2] == (
        "| 3.12 (not run: the machine's trouble) | 2.21 | - | - | - | - |"
    )


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
    (oldest,) = [pair for pair in matrix.PAIRS if pair.name == "py3.11-tf2.16"]
    ran = matrix.Outcome(
        oldest,
        setup="cached",
        tests="424 passed, 1 skipped, 243 warnings in 171.98s (0:02:51)",
        gate="VERDICT: OK: of 913 tests run with the plugin alone (no baseline), it failed or "
        "errored none other than by a leak report (4 by a leak report)",
        notes=["3.11.7 2.16.1 3.15.1 8.3.0"],
    )
    missing = matrix.Outcome(matrix.PAIRS[0], setup="skipped: python3.13 is not installed")
    assert matrix.markdown([ran, missing]).splitlines()[2:] == [
        "| 3.11.7 | 2.16.1 (the floors) | 3.15.1 | 8.3.0 | 424 passed, 1 skipped "
        "| OK (913 tests, 4 true leaks reported) |",
        "| 3.13 (not installed) | 2.21 | - | - | - | - |",
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
        "py3.13-tf2.21", "py3.12-tf2.21", "py3.11-tf2.21", "py3.10-tf2.21", "py3.11-tf2.16",
        "py3.13-tf2.22-pre",
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


def test_a_pair_run_elsewhere_joins_the_table_in_its_place(
    matrix: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "main-pass.txt"
    log.write_text("....\n==== 1070 passed, 1 skipped in 301.2s (0:05:01) ====\n")
    monkeypatch.setattr(matrix, "versions", lambda venv: f"3.11.7 2.21.0 3.15.1 9.2.0 {venv}")
    outcome = matrix.ran_elsewhere(f"py3.11-tf2.21={tmp_path / 'venv'}={log}")
    assert outcome.pair.name == "py3.11-tf2.21"
    assert not outcome.failed
    assert outcome.tests == "1070 passed, 1 skipped in 301.2s (0:05:01)"
    assert matrix.markdown([outcome]).splitlines()[2] == (
        "| 3.11.7 | 2.21.0 | 3.15.1 | 9.2.0 | 1070 passed, 1 skipped | - |"
    )
    log.write_text("==== 2 failed, 1068 passed in 300.0s ====\n")
    assert matrix.ran_elsewhere(f"py3.11-tf2.21={tmp_path}={log}").failed
    log.write_text("INTERNALERROR> boom\n")
    assert matrix.ran_elsewhere(f"py3.11-tf2.21={tmp_path}={log}").failed


def test_a_pairs_suite_runs_this_trees_tests_but_the_distributions(matrix: ModuleType) -> None:
    command = matrix.suite_command(["-n", "2"], ["-k", "plugin"])
    root = SCRIPT.parent.parent
    assert command[:6] == [
        "-m",
        "pytest",
        "-c",
        str(root / "pyproject.toml"),
        "--rootdir",
        str(root),
    ]
    assert f"--ignore={root / 'tests' / 'test_distributions.py'}" in command
    assert (root / "tests" / "test_distributions.py").exists()
    assert command[-3:] == [str(root / "tests"), "-k", "plugin"]


def test_the_table_says_how_long_each_pair_took(matrix: ModuleType) -> None:
    outcomes = [
        matrix.Outcome(matrix.PAIRS[0], setup="cached", tests="3 passed", seconds=270.0),
        matrix.Outcome(matrix.PAIRS[1], setup="skipped: python3.12 is not installed"),
    ]
    header, ran, skipped = matrix.table(outcomes).splitlines()
    took = header.index("took")
    assert ran[took:].startswith("4.5 min")
    assert skipped[took:].startswith("-")
