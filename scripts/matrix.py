"""The version matrix: the test suite on every supported Python and TensorFlow pair.

For each pair, a virtual environment is built once under ``.venvs-matrix/`` (rebuilt when
``pyproject.toml`` changes) with the project's wheel from ``dist/`` (``./scripts/dist`` builds
it) installed as users install it, not editable, with its ``test`` extra and that TensorFlow
release; a cached environment gets the wheel reinstalled. The oldest pair installs the lowest
release of each dependency that ``pyproject.toml`` accepts (pytest, objgraph, TensorFlow), so
that the floors it declares are ones that run. Then the test suite runs in it, from a scratch
folder outside the source tree, so that what it imports is the installed package. On the
newest and the oldest pair the real-suite gate's plugin-on run follows
(``benchmarks/realsuite.py --only on``). A pair whose interpreter is missing is skipped with a
message. Prints a table; exit status 1 if any pair that ran failed, pre-releases aside.

An environment pip could not build for the machine's reason (the package index unreachable or
cut off mid-download, the disk full: what pip printed says which) is tried three times, half a
minute and a minute apart, then left out: its row says NOT RUN with pip's words, a closing line
repeats it, and it does not set the exit status, since it says nothing of the project. Any other
failure of pip (requirements that conflict, a release with no wheel for that Python) fails the
pair at once.

Pre-releases: the next TensorFlow's release candidate, with the newest Python it has wheels for
that is installed here, runs the same test suite as the pairs without the gate (the whole
suite: it is where private TensorFlow names move; a few minutes at ``-n 2``, like each pair) but
is allowed to fail: its row says so, and its result does not set the exit status (nor CI's).
It shows early what the next release changes. Its environment takes the newest candidate of
that release when it is built; delete ``.venvs-matrix/PAIR`` to take a newer one.

    ./scripts/matrix [--pair PAIR ...] [--skip PAIR ...] [--no-gate] [--setup-only] [--list]
                     [-n WORKERS] [--markdown PATH] [--ran PAIR=VENV=LOG] [-- PYTEST_ARGS]

``--ran`` puts a pair that ran elsewhere into the table (``./scripts/test`` runs its own
environment's pair, the installed wheel, and skips it here): its versions are read from VENV
and its result from the pytest log LOG.

Standard library only: it runs before any environment exists.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / ".venvs-matrix"
DIST = ROOT / "dist"
TAIL_LINES = 60  # of a failed run's log, printed


@dataclass(frozen=True)
class Pair:
    """One Python minor version with one TensorFlow minor release."""

    python: str
    tensorflow: str
    gate: bool = False
    """Also run the real-suite gate's plugin-on side here."""
    prerelease: bool = False
    """A release candidate of ``tensorflow``, outside the tested range: allowed to fail."""
    floors: bool = False
    """Install the lowest releases ``pyproject.toml`` accepts (``tensorflow`` must be its
    floor's minor release)."""

    @property
    def name(self) -> str:
        return f"py{self.python}-tf{self.tensorflow}{'-pre' if self.prerelease else ''}"

    @property
    def requirements(self) -> tuple[str, ...]:
        """What pip installs beside the wheel: the release, its newest pre-release (named in
        the specifier, so that pip takes pre-releases of TensorFlow alone, not of its
        dependencies), or every floor."""
        if self.floors:
            return floors()
        if self.prerelease:
            return (f"tensorflow-cpu~={self.tensorflow}.0rc0",)
        return (f"tensorflow-cpu=={self.tensorflow}.*",)


#: ``name>=floor`` (extras and an upper bound may follow): the floor of a requirement.
FLOOR = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*(?P<floor>[0-9][0-9.]*)\b")


def floors(pyproject: Path = ROOT / "pyproject.toml") -> tuple[str, ...]:
    """``name==floor`` for each dependency and for the ``cpu`` extra's TensorFlow."""
    import tomllib  # Python 3.11: ./scripts/matrix runs python3.11 where it can

    project = tomllib.loads(pyproject.read_text())["project"]
    pins = []
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["cpu"]]:
        match = FLOOR.match(requirement)
        if match is None:
            raise ValueError(f"pyproject.toml: {requirement!r} declares no floor (>=)")
        pins.append(f"{match['name']}=={match['floor']}")
    return tuple(pins)


#: The tested range, newest pair first and oldest last (the gate runs on both), then pre-releases.
PAIRS: tuple[Pair, ...] = (
    Pair("3.13", "2.21", gate=True),
    Pair("3.12", "2.21"),
    Pair("3.11", "2.21"),
    Pair("3.10", "2.21"),
    Pair("3.11", "2.16", gate=True, floors=True),
    # TensorFlow 2.22.0rc0 has wheels for Python 3.10 to 3.14; 3.14 is not installed here.
    Pair("3.13", "2.22", prerelease=True),
)


@dataclass
class Outcome:
    """What happened to one pair."""

    pair: Pair
    setup: str = ""
    tests: str = "-"
    gate: str = "-"
    failed: bool = False
    unbuilt: bool = False
    """Its environment could not be built for the machine's trouble (the index unreachable,
    the disk full): not run, and not failed."""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def interpreter(version: str) -> str | None:
    """A ``pythonX.Y`` that really is that version: on PATH, else under pyenv's root.

    pyenv's shims answer only for the versions its current setting enables; the others are
    still installed under ``$(pyenv root)/versions``.
    """
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(map(str, pyenv.glob(f"versions/{version}.*/bin/python{version}")))
    for candidate in candidates:
        if candidate is None:
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


def wheel() -> Path:
    """The one wheel of the project in ``dist/``."""
    found = sorted(DIST.glob("pytest_eagersession-*.whl"))
    if len(found) != 1:
        raise FileNotFoundError(f"{DIST} holds {len(found)} wheels, not one: run ./scripts/dist")
    return found[0]


def environment(pair: Pair, python: str) -> tuple[Path, str]:
    """The pair's virtual environment, built if its stamp is missing, with the wheel in
    ``dist/`` installed anew either way; ``(venv, how)``."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    venv = VENVS / pair.name
    stamp = venv / f".installed-{digest}"
    built = wheel()
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    log = venv / "setup.txt"
    if stamp.exists():
        with log.open("a") as out:
            install(out, [*pip, "--no-deps", "--force-reinstall", str(built)])
        return venv, "cached"
    started = time.perf_counter()
    shutil.rmtree(venv, ignore_errors=True)
    print(f"== {pair.name}: building {venv} (TensorFlow is large: about a minute)", flush=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    with log.open("w") as out:
        install(out, [*pip, "--upgrade", "pip"])
        install(out, [*pip, f"{built}[test]", *pair.requirements])
    stamp.touch()
    return venv, f"built in {time.perf_counter() - started:.0f} s"


#: What pip prints when the machine, not the project, stopped it: the index unreachable or
#: cut off mid-download, or the disk full. Anything else (a conflict between requirements, a
#: release that does not exist for that Python) is the project's to mend.
MACHINE_TROUBLE = re.compile(
    r"NewConnectionError|ConnectTimeoutError|ReadTimeoutError|Max retries exceeded"
    r"|Temporary failure in name resolution|Name or service not known|Connection reset"
    r"|Connection refused|Network is unreachable|ProxyError|SSLError|IncompleteRead"
    r"|HTTP error 5\d\d|No space left on device|Disk quota exceeded"
    r"|THESE PACKAGES DO NOT MATCH THE HASHES"
)
INSTALL_ATTEMPTS = 3  # for the machine's trouble; a failure of the project's is not retried
RETRY_PAUSE_SECONDS = 30.0  # before the second attempt; doubled before the third


class SetupFailed(Exception):
    """pip failed to build a pair's environment; ``reason`` is its first error line."""

    def __init__(self, command: Sequence[str], reason: str, *, machine: bool) -> None:
        super().__init__(f"{' '.join(command)}: {reason}")
        self.command = list(command)
        self.reason = reason
        self.machine = machine
        """The machine's trouble (:data:`MACHINE_TROUBLE`), not the project's."""


def failure_reason(output: str) -> tuple[str, bool]:
    """pip's own words for why it failed (its first ``ERROR:`` line, else its last line) and
    whether that was the machine's trouble rather than the project's."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    # Without an ERROR line, the last: pip's first lines here are its warnings about this
    # machine's index locations, which say nothing of the failure.
    reason = errors[0] if errors else (lines or ["pip printed nothing"])[-1]
    trouble = MACHINE_TROUBLE.search(output)
    if trouble is not None and trouble.group(0) not in reason:
        reason = f"{reason} ({trouble.group(0)})"
    return reason, trouble is not None


def install(log: TextIO, command: list[str]) -> None:
    """Run a pip command into ``log``; on failure print the log's end and raise
    :class:`SetupFailed`. The machine's trouble is retried, twice, after a pause."""
    for attempt in range(1, INSTALL_ATTEMPTS + 1):
        log.flush()
        start = log.tell()
        if subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode == 0:
            return
        log.flush()
        with open(log.name, errors="replace") as written:
            written.seek(start)
            output = written.read()
        print(output[-3000:], file=sys.stderr)
        reason, machine = failure_reason(output)
        if not machine or attempt == INSTALL_ATTEMPTS:
            raise SetupFailed(command, reason, machine=machine)
        pause = RETRY_PAUSE_SECONDS * 2 ** (attempt - 1)
        print(
            f"(pip failed for the machine's reason, {reason}; again in {pause:.0f} s)", flush=True
        )
        time.sleep(pause)


def run(venv: Path, command: Sequence[str], log: Path) -> tuple[int, str]:
    """Run ``command`` in ``venv`` from a scratch folder outside the source tree (so that the
    package imported is the installed one: tests/conftest.py refuses the tree's, told by
    ``EAGERSESSION_TEST_INSTALLED``); ``(status, last summary line)``."""
    env = dict(os.environ)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["EAGERSESSION_TEST_INSTALLED"] = str(ROOT)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.pop("PYTHONPATH", None)
    with log.open("w") as out, tempfile.TemporaryDirectory(prefix="matrix-") as scratch:
        status = subprocess.run(
            [str(venv / "bin" / "python"), *command],
            cwd=scratch,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    if status != 0:  # what failed, in the output CI keeps (the log stays in the venv)
        print(f"-- exit status {status}; the end of {log}:")
        print("\n".join(f"   | {line}" for line in lines[-TAIL_LINES:]), flush=True)
    summary = next(
        (line for line in reversed(lines) if re.search(r"\b(passed|failed|VERDICT)\b", line)),
        lines[-1] if lines else "no output",
    )
    return status, summary.strip("= ")


def versions(venv: Path) -> str:
    """The exact Python, TensorFlow, Keras and pytest versions installed in ``venv``.

    TensorFlow's release candidates depend on ``keras-nightly``, not ``keras``.
    """
    probe = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m, platform; "
            "keras = [d.version for d in m.distributions() "
            "if d.metadata['Name'].lower().replace('_', '-') in ('keras', 'keras-nightly')]; "
            "print(platform.python_version(), m.version('tensorflow-cpu'), (keras or ['?'])[0], "
            "m.version('pytest'))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return probe.stdout.strip() or "?"


#: Test modules the pairs leave to the main pass of ./scripts/test: building and checking the
#: distributions (half a minute a pair) gives the same files whatever Python runs the build;
#: the benchmarks' own tooling (the gate's steps, side by side: a quarter of a minute a pair)
#: is the same script on every pair, and the pairs that run the gate run it whole.
MAIN_PASS_ONLY = ("test_distributions.py", "test_realsuite_profile.py")


def suite_command(workers: Sequence[str], pytest_args: Sequence[str]) -> list[str]:
    """The pair's test suite: this tree's tests and configuration, run from anywhere."""
    return [
        *("-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT)),
        *("-q", "-p", "no:cacheprovider", *workers),
        *(f"--ignore={ROOT / 'tests' / name}" for name in MAIN_PASS_ONLY),
        str(ROOT / "tests"),
        *pytest_args,
    ]


def check(
    pair: Pair,
    pytest_args: Sequence[str],
    *,
    gate: bool,
    setup_only: bool,
    workers: Sequence[str] = (),
) -> Outcome:
    outcome = Outcome(pair)
    started = time.perf_counter()
    python = interpreter(pair.python)
    if python is None:
        outcome.setup = f"skipped: python{pair.python} is not installed"
        return outcome
    try:
        venv, outcome.setup = environment(pair, python)
    except SetupFailed as error:
        if error.machine:  # the matrix could not run here; that says nothing of the project
            outcome.setup = f"not built, the machine's trouble: {error.reason}"
            outcome.unbuilt = True
        else:
            outcome.setup = f"set-up failed: {' '.join(error.command)}: {error.reason}"
            outcome.failed = True
        return outcome
    except subprocess.CalledProcessError as error:  # python -m venv
        outcome.setup = f"set-up failed: {' '.join(map(str, error.cmd))}"
        outcome.failed = True
        return outcome
    except FileNotFoundError as error:
        outcome.setup = f"set-up failed: {error}"
        outcome.failed = True
        return outcome
    outcome.notes.append(versions(venv))
    if setup_only:
        return outcome
    logs = venv / "logs"
    logs.mkdir(exist_ok=True)
    print(f"== {pair.name}: the test suite (log: {logs / 'tests.txt'})", flush=True)
    status, outcome.tests = run(venv, suite_command(workers, pytest_args), logs / "tests.txt")
    outcome.failed |= status != 0
    if gate and pair.gate:
        print(f"== {pair.name}: the real-suite gate, plugin on (log: {logs / 'gate.txt'})")
        gate_command = [str(ROOT / "benchmarks" / "realsuite.py"), "--only", "on", *workers]
        status, outcome.gate = run(venv, gate_command, logs / "gate.txt")
        outcome.failed |= status != 0
    outcome.seconds = time.perf_counter() - started
    return outcome


def gate_summary(verdict: str) -> str:
    """``VERDICT: OK: of 913 tests ... (4 by a leak report)`` becomes ``OK (913 tests, 4 true
    leaks reported)``."""
    match = re.search(r"VERDICT: (\w+)", verdict)
    if match is None:
        return verdict
    found = re.search(r"of (\d+) tests.*\((\d+) by a leak report\)", verdict)
    if found is None:
        return match.group(1)
    return f"{match.group(1)} ({found.group(1)} tests, {found.group(2)} true leaks reported)"


def result(outcome: Outcome) -> str:
    """The table's word for a pair: ``ok``, ``FAILED``, ``skipped`` or ``NOT RUN``, and a
    pre-release's allowance to fail."""
    word = "skipped" if outcome.setup.startswith("skipped") else "ok"
    if outcome.unbuilt:
        word = "NOT RUN"
    if outcome.failed:
        word = "FAILED"
    return f"{word} (pre-release, allowed to fail)" if outcome.pair.prerelease else word


def exit_status(outcomes: Sequence[Outcome]) -> int:
    """1 if a pair failed, pre-releases aside (they are allowed to fail), else 0. A pair the
    machine could not build (:attr:`Outcome.unbuilt`) did not fail: the table and the closing
    lines say it did not run."""
    return int(any(o.failed and not o.pair.prerelease for o in outcomes))


def table(outcomes: Sequence[Outcome]) -> str:
    rows = [
        (
            "pair",
            "installed (Python, TF, Keras, pytest)",
            "environment",
            "tests",
            "gate",
            "took",
            "result",
        )
    ]
    for o in outcomes:
        installed = o.notes[0] if o.notes else "-"
        took = f"{o.seconds / 60:.1f} min" if o.seconds else "-"
        cells = (o.pair.name, installed, o.setup, o.tests, gate_summary(o.gate), took, result(o))
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def markdown(outcomes: Sequence[Outcome]) -> str:
    """The table for the docs: versions and results, without the timings."""

    def counts(summary: str) -> str:
        return re.sub(r",? *\d+ warnings?|,? in [\d.]+s.*$", "", summary).strip() or "-"

    lines = [
        "| Python | TensorFlow | Keras | pytest | test suite | real-suite gate, plugin on |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        if o.notes:
            python, tensorflow, keras, pytest = [*o.notes[0].split(), "?", "?", "?", "?"][:4]
        elif o.unbuilt:
            python, tensorflow = (
                f"{o.pair.python} (not run: the machine's trouble)",
                o.pair.tensorflow,
            )
            keras = pytest = "-"
        else:
            python, tensorflow = f"{o.pair.python} (not installed)", o.pair.tensorflow
            keras = pytest = "-"
        if o.pair.prerelease:
            tensorflow += " (pre-release, allowed to fail)"
        if o.pair.floors:
            tensorflow += " (the floors)"
        gate = gate_summary(o.gate)
        lines.append(
            f"| {python} | {tensorflow} | {keras} | {pytest} | {counts(o.tests)} | {gate} |"
        )
    return "\n".join(lines) + "\n"


def ran_elsewhere(spec: str) -> Outcome:
    """The outcome of ``--ran PAIR=VENV=LOG``: a pair's test suite run outside the matrix."""
    name, venv, log = spec.split("=", 2)
    (pair,) = [pair for pair in PAIRS if pair.name == name]
    outcome = Outcome(pair, setup="ran by ./scripts/test")
    outcome.notes.append(versions(Path(venv)))
    lines = [line.strip() for line in Path(log).read_text(errors="replace").splitlines()]
    summaries = [line for line in lines if re.search(r"\b(passed|failed)\b", line)]
    outcome.tests = summaries[-1].strip("= ") if summaries else "no summary in the log"
    outcome.failed = "failed" in outcome.tests or not summaries
    return outcome


def main(argv: Sequence[str]) -> int:
    pytest_args: list[str] = []
    if "--" in argv:
        pytest_args = list(argv[argv.index("--") + 1 :])
        argv = argv[: argv.index("--")]
    names = [pair.name for pair in PAIRS]
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pair", action="append", choices=names, help="run only these pairs")
    parser.add_argument(
        "--skip", action="append", choices=names, default=[], help="leave these pairs out"
    )
    parser.add_argument("--no-gate", action="store_true", help="run no real-suite gate")
    parser.add_argument(
        "--setup-only", action="store_true", help="build the environments, run nothing"
    )
    parser.add_argument("--list", action="store_true", help="print the pairs' names and stop")
    parser.add_argument("--markdown", metavar="PATH", help="also write the table here (Markdown)")
    parser.add_argument(
        "--ran",
        action="append",
        default=[],
        metavar="PAIR=VENV=LOG",
        help="a pair run elsewhere, for the table (its environment and its pytest log)",
    )
    parser.add_argument(
        "-n",
        "--workers",
        default="2",
        metavar="N",
        help="pytest-xdist workers for each pair's test suite and gate (default 2; 0: serially)",
    )
    options = parser.parse_args(argv)
    if options.list:
        print("\n".join(names))
        return 0
    workers = ["-n", options.workers] if options.workers != "0" else []
    chosen = [
        pair
        for pair in PAIRS
        if (options.pair is None or pair.name in options.pair) and pair.name not in options.skip
    ]
    outcomes = [
        check(
            pair,
            pytest_args,
            gate=not options.no_gate,
            setup_only=options.setup_only,
            workers=workers,
        )
        for pair in chosen
    ]
    elsewhere = {outcome.pair.name: outcome for outcome in map(ran_elsewhere, options.ran)}
    outcomes = sorted(
        [*outcomes, *(o for o in elsewhere.values() if o.pair not in chosen)],
        key=lambda outcome: PAIRS.index(outcome.pair),
    )
    print()
    print(table(outcomes))
    if options.markdown:
        Path(options.markdown).write_text(markdown(outcomes))
    for pair in PAIRS:
        if pair.name in options.skip and pair.name not in elsewhere:
            print(f"({pair.name} left out, as --skip asked)")
    for outcome in outcomes:
        if outcome.unbuilt:
            log = VENVS / outcome.pair.name / "setup.txt"
            print(f"NOT RUN: {outcome.pair.name}, {outcome.setup} (pip's log: {log})")
    return exit_status(outcomes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
