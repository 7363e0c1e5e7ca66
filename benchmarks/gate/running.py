"""Running one side of a suite (plugin off or on), alone or side by side with the other."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gate.reading import read_junit, read_leaks
from gate.records import Run
from gate.suites import GATE, ROOT, STAGE, Suite


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def pytest_command(
    paths: Sequence[str], junit: Path, extra: Sequence[str], plugin: bool, report: Path
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(GATE / "pytest.ini"),
        "--rootdir",
        str(GATE),
        "-p",
        "no:cacheprovider",
        "-q",
        f"--junitxml={junit}",
    ]
    if installed("pytest_randomly"):
        command += ["-p", "no:randomly"]
    if installed("pytest_timeout"):
        command += ["-o", "timeout=600"]
    if plugin:
        command.append(f"--eagersession-json={report}")
    else:
        command += ["-p", "no:eagersession"]
    return [*command, *extra, *paths]


@dataclass
class Started:
    """One side's pytest run, started and not yet reaped: what finishing it needs."""

    suite: str  # its name
    name: str
    plugin: bool
    process: subprocess.Popen[bytes]
    junit: Path
    report: Path
    log: Path
    started: float


def gate_environment() -> dict[str, str]:
    """The environment every run of the gate gets: the same for both sides."""
    return dict(
        os.environ,
        KERAS_BACKEND="tensorflow",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONHASHSEED="0",
        PYTHONDONTWRITEBYTECODE="1",
    )


def start_side(
    suite: Suite,
    name: str,
    paths: Sequence[str],
    extra: Sequence[str],
    plugin: bool,
    round_: int = 0,
    *,
    filler: bool = False,
) -> Started:
    """Start one pytest run of one suite, plugin ``name`` ("off" or "on"), in round ``round_``.

    A ``filler`` run keeps the machine as busy as a timed run while the other side finishes:
    its files are its own, nothing reads them, and it is killed with its workers (its own
    process group) once that side is done."""
    results_dir = STAGE / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{suite.name}-{name}" + (f"-round{round_ + 1}" if round_ else "")
    stem += "-filler" if filler else ""
    junit = results_dir / f"junit-{stem}.xml"
    report = results_dir / f"eagersession-{stem}.json"
    log = results_dir / f"output-{stem}.txt"
    for stale in (junit, report, log):
        stale.unlink(missing_ok=True)
    command = pytest_command(paths, junit, extra, plugin, report)
    if not filler:
        print(
            f"== {suite.name}, plugin {name}: {len(paths)} test files "
            f"(output: {log.relative_to(ROOT)})",
            flush=True,
        )
    process = launch(command, GATE, gate_environment(), log)
    return Started(suite.name, name, plugin, process, junit, report, log, time.perf_counter())


def launch(
    command: Sequence[str], cwd: Path, env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """Start ``command`` in a process group of its own (``stop`` ends its workers with it),
    its output, after the command line, in ``log``."""
    with log.open("w", encoding="utf-8") as output:
        output.write(" ".join(command) + "\n\n")
        output.flush()
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def reaped(run: Started, wait: bool = True) -> tuple[float, float] | None:
    """``(wall, cpu)`` seconds of a run that has ended (``None`` while it runs, if not
    ``wait``), its exit status set on its process. The CPU time is this run's alone, its
    xdist workers' included: the kernel's account of one child, which stays right while
    another side runs beside it."""
    pid, status, usage = os.wait4(run.process.pid, 0 if wait else os.WNOHANG)
    if pid == 0:
        return None
    wall = time.perf_counter() - run.started
    run.process.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime


def stop(run: Started) -> None:
    """End a run that may still be going (a filler, or a run left by an interruption): its
    whole process group, its xdist workers with it."""
    if run.process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.process.pid, signal.SIGKILL)
        reaped(run)


def finished(run: Started, wall: float, cpu: float) -> Run:
    """The ``Run`` of a reaped run, from its JUnit XML and the plugin's JSON report."""
    last = [line for line in run.log.read_text(encoding="utf-8").splitlines() if line.strip()]
    print(
        f"   {run.suite}, plugin {run.name}: {last[-1] if last else '(no output)'}",
        flush=True,
    )
    status = run.process.returncode
    # 5: pytest collected no test (a -k that matches none of this suite's): an empty run.
    if status not in (0, 1, 5) or not run.junit.is_file():
        tail = "\n".join(last[-30:])
        raise RunIncomplete(
            f"{run.suite}, plugin {run.name}: pytest exited with status {status}"
            f"{'' if run.junit.is_file() else ' and wrote no JUnit XML'}; the end of its "
            f"output:\n{tail}"
        )
    leaks = read_leaks(run.report) if run.plugin else {}
    return Run(
        run.name,
        0 if status == 5 else status,
        wall,
        cpu,
        read_junit(run.junit),
        leaks,
        run.log,
        run.suite,
        run.report,
    )


def run_side(
    suite: Suite,
    name: str,
    paths: Sequence[str],
    extra: Sequence[str],
    plugin: bool,
    round_: int = 0,
) -> Run:
    """One pytest run of one suite, plugin ``name`` ("off" or "on"), alone on the machine."""
    run = start_side(suite, name, paths, extra, plugin, round_)
    try:
        times = reaped(run)
    finally:
        stop(run)
    assert times is not None
    return finished(run, *times)


def run_side_by_side(
    suite: Suite,
    paths: Sequence[str],
    extra: dict[str, Sequence[str]],
    round_: int = 0,
) -> dict[str, Run]:
    """Both sides of one suite at the same time, ``extra[side]`` the arguments of each
    (``side_by_side``)."""

    def start(name: str, filler: bool) -> Started:
        return start_side(suite, name, paths, extra[name], name == "on", round_, filler=filler)

    ended = side_by_side(start)
    return {
        name: dataclasses.replace(finished(run, wall, cpu), side_by_side=True)
        for name, (run, wall, cpu) in ended.items()
    }


def side_by_side(
    start: Callable[[str, bool], Started], names: Sequence[str] = ("off", "on")
) -> dict[str, tuple[Started, float, float]]:
    """Runs of each side in ``names`` at the same time (``start(name, filler)`` starts one):
    each side's run, wall and CPU seconds. A machine that slows down or speeds up slows or
    speeds both alike. The side that finishes first runs again, untimed (a filler), until the
    other is done, so that the other's last tests meet the same load as its first ones instead
    of a machine of their own; fillers leave no files."""
    runs = {name: start(name, False) for name in names}
    times: dict[str, tuple[float, float]] = {}
    fillers: dict[str, Started] = {}
    try:
        while len(times) < len(runs):
            for name, run in runs.items():
                if name in times:
                    continue
                ended = reaped(run, wait=False)
                if ended is None:
                    continue
                times[name] = ended
                if len(times) < len(runs):
                    fillers[name] = start(name, True)
            for name, filler in list(fillers.items()):
                if reaped(filler, wait=False) is not None:  # ended before the other side
                    fillers[name] = start(name, True)
            time.sleep(0.05)
    finally:
        for run in [*runs.values(), *fillers.values()]:
            stop(run)
        for filler in fillers.values():
            for path in (filler.junit, filler.report, filler.log):
                path.unlink(missing_ok=True)
    return {name: (run, *times[name]) for name, run in runs.items()}


def add_round(sides: dict[str, Run], run: Run) -> None:
    """Count ``run`` as a round of its side in ``sides`` (by side name): the first, or a later
    one whose times add up (``Run.timed_with``)."""
    first = sides.get(run.name)
    sides[run.name] = run if first is None else first.timed_with(run)


def merged(runs: Sequence[Run]) -> Run:
    """The suites' runs of one side as one run: every test, the times added up."""
    return Run(
        name=runs[0].name,
        returncode=max(run.returncode for run in runs),
        wall_s=sum(run.wall_s for run in runs),
        cpu_s=sum(run.cpu_s for run in runs),
        results={key: result for run in runs for key, result in run.results.items()},
        leaks={key: leaks for run in runs for key, leaks in run.leaks.items()},
        log=runs[0].log,
        suite="all",
        rounds=runs[0].rounds,
        side_by_side=runs[0].side_by_side,
    )


class RunIncomplete(Exception):
    """A run that did not get as far as a report of every test."""
