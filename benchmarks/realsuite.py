"""The real-suite gate: other people's tests, with the plugin off and on, side by side.

Runs two libraries' own tests, each a fixed subset of the test files their installed wheels
ship, as suites of their own: Keras's (with the project's ``tf.test.TestCase``-style suite,
``realsuite/tf_style``) and Sonnet's (``dm-sonnet``: ``tf.test.TestCase`` and absl
``parameterized`` tests), so that the gate is not tuned to one library. Each suite runs twice:
with ``-p no:eagersession`` and with the plugin on, at its default settings; each is reported
on its own (counts, the on/off wall-time ratio, the plugin's time by phase), then every test's
outcome is compared. The plugin may change a test's outcome in one way only: by reporting a leak
at its teardown. Any other difference (a failure, another error, a test that passes only with
the plugin) breaks the gate.

    python benchmarks/realsuite.py [--only on|off] [--suite NAME ...] [--json PATH] [-n N]
                                   [--rounds N] [--side-by-side]
                                   [--eagersession-OPTION=VALUE ...] [-- PYTEST_ARGS ...]

``--rounds 2`` runs each side twice, off-on-on-off, and adds the times up: on a machine whose
speed drifts while the gate runs (a shared one does, by several percent in a few minutes), the
side that runs second would otherwise carry the drift alone. ``--side-by-side`` runs the two
sides of a suite at the same time instead, each with half of ``-n``'s workers, so that the
drift falls on both alike; the side that ends first runs again, untimed, until the other ends,
so that the machine stays as busy to the end. Each side's CPU time is its own (the kernel's
account of its process and workers). CI runs ``--side-by-side -n 2 --rounds 2``: on its 2-core
machine one side's own rounds in turn differed by up to 17%; side by side, the plugin-off side
against itself came out at 1.01x (Sonnet) and 1.00x (Keras).

``--eagersession-*`` options go to the plugin-on runs; ``-n`` and everything after ``--``
(``-k``, ``-x``, ...) go to every run. ``--suite keras`` or ``--suite sonnet`` runs that suite
alone. ``--only on`` runs the plugin-on side alone (a version matrix job): a test then breaks
the gate if it fails or errors other than by a leak report, since every test here passes
without the plugin. ``--only off`` checks that baseline. Keras comes with TensorFlow; Sonnet
with the project's ``test`` extra: where it is not installed, its suite is skipped with a line
saying so, and the verdict names it. ``./scripts/realsuite`` runs this in the project's
environment. Exit status: 0 the gate holds, 1 it does not, 2 a run did not complete (a crash,
a usage error, no report).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GATE = ROOT / "realsuite"  # the gate's rootdir: pytest.ini, our suites, the staging folder
STAGE = GATE / "_gate"  # generated, git-ignored: the copied libraries' tests and the results

# Keras's own test files, relative to keras/src in the installed wheel, in the order they run.
# Chosen to pass without the plugin with KERAS_BACKEND=tensorflow on a CPU-only machine, and to
# run in about 3 minutes there (2 cores). Not taken: files that need JAX, torch, grain, orbax or
# tensorboard; files that deserialize classes defined in their own module by module name (they
# only work inside the keras package: core/wrapper, rnn/rnn, rnn/dropout_rnn_cell); and the
# slowest files (models/model_test, trainers/trainer_test, conv_test, embedding_test, ...).
KERAS_TEST_FILES: tuple[str, ...] = (
    # layers/core
    "layers/core/dense_test.py",
    "layers/core/identity_test.py",
    "layers/core/input_layer_test.py",
    "layers/core/lambda_layer_test.py",
    "layers/core/masking_test.py",
    # layers/activations
    "layers/activations/activation_test.py",
    "layers/activations/elu_test.py",
    "layers/activations/leaky_relu_test.py",
    "layers/activations/prelu_test.py",
    "layers/activations/relu_test.py",
    "layers/activations/softmax_test.py",
    # layers/normalization
    "layers/normalization/group_normalization_test.py",
    "layers/normalization/layer_normalization_test.py",
    "layers/normalization/rms_normalization_test.py",
    "layers/normalization/unit_normalization_test.py",
    # layers/convolutional
    "layers/convolutional/depthwise_conv_test.py",
    # layers/pooling
    "layers/pooling/adaptive_pooling1d_test.py",
    "layers/pooling/adaptive_pooling2d_test.py",
    "layers/pooling/adaptive_pooling3d_test.py",
    "layers/pooling/average_pooling_test.py",
    "layers/pooling/global_average_pooling_test.py",
    "layers/pooling/global_max_pooling_test.py",
    "layers/pooling/max_pooling_test.py",
    # layers/rnn
    "layers/rnn/conv_lstm_test.py",
    "layers/rnn/simple_rnn_test.py",
    "layers/rnn/time_distributed_test.py",
    # layers/merging
    "layers/merging/merging_test.py",
    # layers/reshaping
    "layers/reshaping/cropping1d_test.py",
    "layers/reshaping/cropping2d_test.py",
    "layers/reshaping/flatten_test.py",
    "layers/reshaping/permute_test.py",
    "layers/reshaping/repeat_vector_test.py",
    "layers/reshaping/reshape_test.py",
    "layers/reshaping/up_sampling1d_test.py",
    "layers/reshaping/zero_padding1d_test.py",
    "layers/reshaping/zero_padding2d_test.py",
    "layers/reshaping/zero_padding3d_test.py",
    # optimizers
    "optimizers/adadelta_test.py",
    "optimizers/adagrad_test.py",
    "optimizers/adam_test.py",
    "optimizers/adamax_test.py",
    "optimizers/adamw_test.py",
    "optimizers/ftrl_test.py",
    "optimizers/lamb_test.py",
    "optimizers/loss_scale_optimizer_test.py",
    "optimizers/nadam_test.py",
    "optimizers/optimizer_test.py",
    "optimizers/rmsprop_test.py",
    "optimizers/sgd_test.py",
    "optimizers/schedules/learning_rate_schedule_test.py",
    # callbacks
    "callbacks/callback_test.py",
    "callbacks/lambda_callback_test.py",
    "callbacks/terminate_on_nan_test.py",
    # trainers
    "trainers/compile_utils_test.py",
    "trainers/epoch_iterator_test.py",
    "trainers/data_adapters/data_adapter_utils_test.py",
    # models
    "models/cloning_test.py",
    "models/functional_test.py",
    "models/sequential_test.py",
    # the TensorFlow backend
    "backend/tensorflow/name_scope_test.py",
    "backend/tensorflow/saved_model_test.py",
    "backend/tensorflow/distribute_test.py",
    "backend/tensorflow/optimizer_distribute_test.py",
)

# The project's own suite of TensorFlow-style tests, relative to realsuite/.
OWN_TEST_FILES: tuple[str, ...] = (
    "tf_style/test_tf_testcase.py",
    "tf_style/test_module_fixtures.py",
    "tf_style/test_warnings_as_errors.py",
)

# Sonnet's own test files (dm-sonnet 2.0.2, in the project's test extra), relative to sonnet/src
# in the installed wheel, in the order they run: tf.test.TestCase subclasses (Sonnet's
# test_utils.TestCase, which enters a tf.device scope in setUp and leaves it in tearDown) with
# absl parameterized, the style of many TensorFlow libraries; no Keras. Chosen to pass without
# the plugin on a CPU-only machine, with TensorFlow 2.16 to 2.21, and to run in about 35 s there
# (2 cores, -n 2). Not taken: depthwise_conv_test (TensorFlow 2.16's depthwise_conv2d_native
# crashes the interpreter with a segmentation fault in it, plugin or not);
# optimizers/momentum_test, rmsprop_test and sgd_test (their reference tests call
# tf.keras.optimizers.legacy, gone in Keras 3); conformance/keras_test (a Keras 3 layer that
# wraps a Sonnet module does not track its variables: its counts of variables fail);
# conformance/checkpoint_test (finds its golden checkpoints by a path relative to the Sonnet
# repository's root, and its tests share one temporary folder across xdist workers: outcomes
# flip from run to run); conformance/doctest_test (NumPy 2 prints scalars as np.float32(3.0),
# which sonnet.functional's doctests do not expect); conformance/tensorflow1_test (graph mode
# only: all skipped); and the slowest files (conformance/function_test, 190 s of tests;
# optimizers/adam_test, 130 s; conformance/optimizer_test and xla_test, 60 and 45 s;
# nets/cifar10_convnet_test and resnet_test, 35 and 25 s).
SONNET_TEST_FILES: tuple[str, ...] = (
    # modules
    "base_test.py",
    "build_test.py",
    "deferred_test.py",
    "once_test.py",
    "utils_test.py",
    "custom_getter_test.py",
    "sequential_test.py",
    "batch_apply_test.py",
    "mixed_precision_test.py",
    # layers
    "linear_test.py",
    "parallel_linear_test.py",
    "bias_test.py",
    "embed_test.py",
    "conv_test.py",
    "conv_transpose_test.py",
    "reshape_test.py",
    "pad_test.py",
    "dropout_test.py",
    "leaky_clip_by_value_test.py",
    "scale_gradient_test.py",
    "recurrent_test.py",
    # normalization, state
    "axis_norm_test.py",
    "batch_norm_test.py",
    "group_norm_test.py",
    "moving_averages_test.py",
    "metrics_test.py",
    # initializers, regularizers
    "initializers_test.py",
    "regularizers_test.py",
    # nets
    "nets/mlp_test.py",
    "nets/vqvae_test.py",
    "nets/dnc/control_test.py",
    "nets/dnc/read_test.py",
    "nets/dnc/util_test.py",
    "nets/dnc/write_test.py",
    # distribution
    "distribute/replicator_test.py",
    "distribute/distributed_batch_norm_test.py",
    # the functional API (Sonnet's own, on TensorFlow)
    "functional/haiku_test.py",
    "functional/jax_test.py",
    "functional/optimizers_test.py",
    # conformance: every module built, copied, pickled, under a strategy, saved and loaded
    "conformance/api_test.py",
    "conformance/descriptors_test.py",
    "conformance/goldens_test.py",
    "conformance/build_test.py",
    "conformance/copy_test.py",
    "conformance/pickle_test.py",
    "conformance/distribute_test.py",
    "conformance/saved_model_test.py",
)

OUTCOME_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
TEXT_LINES = 15  # lines of a failure's text shown per test
LEAK_TEXT = re.compile(r"\bleaked \d+ TensorFlow objects? \(.*?\) that outlived its \w+ scope")


@dataclass(frozen=True)
class Suite:
    """One library's own tests, as the gate stages and runs them: a suite of its own."""

    name: str  # in the output, the files' names and --suite
    library: str  # for people
    distribution: str  # the installed distribution, for its version
    module: str  # the package whose installed files hold the tests
    folder: str  # the tests' folder in that package
    package: str  # the copies' package under _gate/ (never the library's: it would shadow it)
    files: tuple[str, ...]
    own: tuple[str, ...] = ()  # our suite's files, run with this one, relative to realsuite/
    conftest: str = ""  # a file of realsuite/ copied to _gate/conftest.py
    required: bool = False  # its library missing is an error, not a skipped suite
    install: str = ""  # where its library comes from, for the line that skips its suite
    chosen_from: str = ""  # the library's release whose test files the list names

    def paths(self) -> list[str]:
        """Its test files, relative to realsuite/, in the order they run."""
        staged = [f"{STAGE.name}/{self.package}/{name}" for name in self.files]
        return staged + list(self.own)


SUITES: tuple[Suite, ...] = (
    Suite(
        name="keras",
        library="Keras",
        distribution="keras",
        module="keras",
        folder="src",
        package="keras_src",
        files=KERAS_TEST_FILES,
        chosen_from="3.15.1",
        own=OWN_TEST_FILES,
        conftest="keras_conftest.py",
        required=True,
        install="TensorFlow installs it",
    ),
    Suite(
        name="sonnet",
        library="Sonnet",
        distribution="dm-sonnet",
        module="sonnet",
        folder="src",
        package="sonnet_src",
        files=SONNET_TEST_FILES,
        chosen_from="2.0.2",
        install="the project's test extra installs it: pip install -e '.[test]'",
    ),
)


@dataclass
class TestResult:
    """One test's outcome in one run, from the JUnit XML: the worst of its phases."""

    outcome: str = "passed"
    call_failed: bool = False
    messages: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    def add(self, outcome: str, message: str = "", text: str = "") -> None:
        if OUTCOME_RANK[outcome] > OUTCOME_RANK[self.outcome]:
            self.outcome = outcome
        if outcome == "failed":
            self.call_failed = True
        if message:
            self.messages.append(message)
        if text:
            self.texts.append(text)


@dataclass
class Run:
    """One pytest run of the gate."""

    name: str
    returncode: int
    wall_s: float
    cpu_s: float
    results: dict[str, TestResult]
    leaks: dict[str, list[dict[str, Any]]]
    log: Path
    suite: str = ""
    report: Path | None = None  # the plugin's JSON report, for the profile

    def counts(self) -> dict[str, int]:
        counted = Counter(result.outcome for result in self.results.values())
        return {outcome: counted.get(outcome, 0) for outcome in OUTCOME_RANK} | {
            "total": len(self.results)
        }

    rounds: int = 1
    side_by_side: bool = False  # ran at the same time as the other side

    def timed_with(self, other: Run) -> Run:
        """This run, its times added to those of ``other`` (a later round of the same side);
        its outcomes stay this run's, its exit status the worse of the two."""
        return dataclasses.replace(
            self,
            returncode=max(self.returncode, other.returncode),
            wall_s=self.wall_s + other.wall_s,
            cpu_s=self.cpu_s + other.cpu_s,
            rounds=self.rounds + other.rounds,
        )

    def figures(self) -> dict[str, Any]:
        """The run's entry of the gate's JSON: counts, times, exit status."""
        return {
            "counts": self.counts(),
            "wall_s": round(self.wall_s, 2),
            "cpu_s": round(self.cpu_s, 2),
            "rounds": self.rounds,
            "side_by_side": self.side_by_side,
            "returncode": self.returncode,
        }


@dataclass
class Difference:
    """A test whose outcome the plugin changed."""

    nodeid: str
    off: str
    on: str
    leak: bool  # the change is the plugin's leak report, and nothing else
    signature: str
    text: list[str]
    leaks: list[dict[str, Any]]


# ----------------------------------------------------------------------------- staging


def tests_root(suite: Suite) -> Path | None:
    """The suite's test folder in the installed package, found without importing it (and
    TensorFlow); None where the library is not installed."""
    spec = importlib.util.find_spec(suite.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / suite.folder


def stage(suite: Suite) -> list[str] | None:
    """Copy the suite's test files under realsuite/_gate/, with its conftest; None where its
    library is not installed (an error if the suite is required).

    The copies form a package (``keras_src``, ``sonnet_src``), as they do in the libraries'
    repositories, so that pytest imports them by their dotted names and Keras's ``from conftest
    import`` finds ours; they import the library itself by its own name, from the installed
    wheel. Returns the suite's paths relative to realsuite/, in the order they run.
    """
    source = tests_root(suite)
    if source is None:
        if suite.required:
            raise SystemExit(f"realsuite: {suite.library} is not installed in this environment")
        return None
    missing = [name for name in suite.files if not (source / name).is_file()]
    if missing:
        raise SystemExit(
            f"realsuite: not in the installed {suite.library} ({source}): {', '.join(missing)}"
        )
    package = STAGE / suite.package
    if package.exists():
        shutil.rmtree(package)
    for name in suite.files:
        target = package / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target)
    for folder in [package, *package.rglob("*")]:
        if folder.is_dir() and folder.name != "__pycache__":
            (folder / "__init__.py").touch()
    if suite.conftest:
        shutil.copyfile(GATE / suite.conftest, STAGE / "conftest.py")
    return suite.paths()


# ----------------------------------------------------------------------------- running


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


# ----------------------------------------------------------------------------- reading


def nodeid_key(nodeid: str) -> str:
    """The id JUnit XML knows a test by (pytest's ``mangle_test_address``), from its node id."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]) + "::" + names[-1]


def read_junit(path: Path) -> dict[str, TestResult]:
    """Every test case's worst outcome; a case pytest splits in two (a failing call and a
    failing teardown) is merged back."""
    results: dict[str, TestResult] = defaultdict(TestResult)
    for case in ET.parse(path).getroot().iter("testcase"):
        key = f"{case.get('classname', '')}::{case.get('name', '')}"
        result = results[key]
        result.add("passed")
        for child in case:
            kind = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(child.tag)
            if kind is not None:
                result.add(kind, child.get("message", ""), child.text or "")
    return dict(results)


def read_leaks(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The leaks the plugin reported (not the allowed ones), by JUnit key."""
    if not path.is_file():
        return {}
    tests = json.loads(path.read_text(encoding="utf-8")).get("tests", [])
    leaks: dict[str, list[dict[str, Any]]] = {}
    for test in tests:
        reported = [leak for leak in test.get("leaks") or [] if not leak.get("allowed")]
        if reported:
            leaks[nodeid_key(test["nodeid"])] = reported
    return leaks


def read_profile(path: Path, slowest: int = 5) -> dict[str, Any]:
    """Where the plugin's time went (the JSON report's ``timings``): per phase over the run,
    split between tests that leaked and the others, and the tests it cost most."""
    if not path.is_file():
        return {}
    tests = json.loads(path.read_text(encoding="utf-8")).get("tests", [])
    phases: dict[str, dict[str, float]] = {}
    per_test = []
    for test in tests:
        timings = test.get("timings") or {}
        side = "leaking" if test.get("leaks") else "clean"
        for phase, seconds in timings.items():
            sums = phases.setdefault(phase, {"clean": 0.0, "leaking": 0.0})
            sums[side] += seconds
        per_test.append((sum(timings.values()), test["nodeid"], timings))
    per_test.sort(key=lambda item: -item[0])
    return {
        "tests": len(tests),
        "leaking_tests": sum(1 for test in tests if test.get("leaks")),
        "phases_s": {
            phase: {side: round(value, 3) for side, value in sums.items()}
            for phase, sums in phases.items()
        },
        "slowest": [
            {"nodeid": nodeid, "total_s": round(total, 3), "timings": timings}
            for total, nodeid, timings in per_test[:slowest]
        ],
    }


def print_profile(profile: dict[str, Any], wall_s: float, suite: str = "") -> None:
    """The plugin's time by phase, and the tests it cost most (in one suite's run)."""
    if not profile:
        return
    phases = profile["phases_s"]
    total = sum(sum(sides.values()) for sides in phases.values())
    print(
        f"\n== {suite + ': ' if suite else ''}the plugin's time by phase: {total:.1f} s of the "
        f"{wall_s:.1f} s run "
        f"({profile['tests']} tests, {profile['leaking_tests']} leaking)"
    )
    print(f"   {'phase':<8} {'clean tests':>12} {'leaking tests':>14}")
    for phase, sides in phases.items():
        print(f"   {phase:<8} {sides['clean']:>11.2f}s {sides['leaking']:>13.2f}s")
    print("   the tests it cost most:")
    for test in profile["slowest"]:
        parts = ", ".join(f"{phase} {seconds:.3f}" for phase, seconds in test["timings"].items())
        print(f"   {test['total_s']:.3f} s  {test['nodeid']} ({parts})")


def gate_paths() -> list[str]:
    """Every test file of the gate, relative to realsuite/, in the order they run."""
    return [path for suite in SUITES for path in suite.paths()]


def display_id(key: str) -> str:
    """A JUnit key back to the test's node id, for people."""
    dotted, _, name = key.partition("::")
    for path in gate_paths():
        module = path.removesuffix(".py").replace("/", ".")
        if dotted == module:
            return f"{path}::{name}"
        if dotted.startswith(module + "."):
            return f"{path}::{dotted[len(module) + 1 :].replace('.', '::')}::{name}"
    return key


ANSI = re.compile(r"(\x1b|#x1B)\[[0-9;]*m")


def raised(text: str) -> str:
    """The exception a traceback ends with: its last block of pytest's ``E`` lines."""
    blocks: list[list[str]] = []
    previous = False
    for line in ANSI.sub("", text).splitlines():
        current = line.startswith("E ") or line == "E"
        if current:
            if not previous:
                blocks.append([])
            blocks[-1].append(line[1:].strip())
        previous = current
    return "\n".join(blocks[-1]) if blocks else ""


def signature(message: str) -> str:
    """A failure's message reduced to what tests failing the same way share."""
    lines = [line.strip() for line in ANSI.sub("", message).splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    first = lines[0]
    if "Exception encountered when calling" in first and len(lines) > 1:
        first += " " + lines[1]  # Keras's wrapper: the cause is on the next line
    first = re.sub(r"failed on (setup|teardown) with ", r"\1: ", first)
    first = re.sub(r"0x[0-9a-fA-F]+", "0x...", first)
    first = re.sub(r"\b\d{6,}\b", "N", first)
    first = re.sub(r"_\d+\b", "_N", first)  # Keras's numbered layer, model and variable names
    return first[:240]


def trimmed(text: str, lines: int = TEXT_LINES, *, tail: bool = False) -> list[str]:
    """At most ``lines`` lines of ``text``: its start, or its end (where a traceback's error is)."""
    kept = ANSI.sub("", text).rstrip().splitlines()
    if len(kept) <= lines:
        return kept
    if tail:
        return [f"... ({len(kept) - lines} lines above)", *kept[-lines:]]
    return [*kept[:lines], f"... ({len(kept) - lines} more lines)"]


# ----------------------------------------------------------------------------- comparing


def is_leak_only(result: TestResult, leaks: list[dict[str, Any]]) -> bool:
    """Whether this plugin-on result is a leak report and nothing else."""
    return (
        result.outcome == "error"
        and bool(leaks)
        and not result.call_failed
        and bool(result.texts)
        and all(LEAK_TEXT.search(text) for text in result.texts)
    )


def failure(result: TestResult) -> str:
    """What a failed or errored test raised, as a signature."""
    text = "\n\n".join(result.texts)
    return signature(raised(text) or (result.messages[0] if result.messages else ""))


def difference(key: str, off: str, on_result: TestResult, on_run: Run) -> Difference:
    leaks = on_run.leaks.get(key, [])
    leak = is_leak_only(on_result, leaks)
    if on_result.messages:
        message = on_result.messages[0]
    elif on_result.outcome == "passed":
        message = f"passes with the plugin, {off} without it"
    else:
        message = f"{on_result.outcome} with the plugin"
    text = "\n\n".join(on_result.texts) if on_result.texts else message
    return Difference(
        nodeid=display_id(key),
        off=off,
        on=on_result.outcome,
        leak=leak,
        signature="leak report" if leak else signature(raised(text) or message),
        text=trimmed(text, tail=not leak),
        leaks=leaks,
    )


def changed(off: TestResult, on: TestResult) -> bool:
    """Whether the plugin changed this outcome: another outcome, or a failure of another kind."""
    if off.outcome != on.outcome:
        return True
    return off.outcome in ("failed", "error") and failure(off) != failure(on)


def compare(off: Run | None, on: Run) -> list[Difference]:
    """The tests whose outcome differs; without a plugin-off run, those that fail or error."""
    differences = []
    for key, on_result in on.results.items():
        if off is None:
            if on_result.outcome in ("failed", "error"):
                differences.append(difference(key, "not run", on_result, on))
            continue
        off_result = off.results.get(key)
        if off_result is None:
            differences.append(difference(key, "missing", on_result, on))
        elif changed(off_result, on_result):
            off_outcome = off_result.outcome
            if off_outcome == on_result.outcome:
                off_outcome += f" ({failure(off_result)})"  # failing another way
            differences.append(difference(key, off_outcome, on_result, on))
    for key, off_result in (off.results if off is not None else {}).items():
        if key not in on.results:
            differences.append(
                Difference(display_id(key), off_result.outcome, "missing", False, "not run", [], [])
            )
    return differences


def holder(leak: dict[str, Any]) -> str:
    """What holds a leak, for grouping: the first link of its ``retained_by`` chain."""
    chain = leak.get("retained_by")
    if not chain:
        return "(not traced: beyond --eagersession-max-leaks)"
    first = chain.split(" -> ")[0]
    return re.sub(r"\d+(\.\d+)? s\b", "N s", first)


def leak_groups(on: Run) -> list[dict[str, Any]]:
    """Every reported leak of the plugin-on run, grouped by holder, largest group first."""
    groups: dict[str, dict[str, Any]] = {}
    for key, leaks in on.leaks.items():
        for leak in leaks:
            group = groups.setdefault(
                holder(leak), {"holder": holder(leak), "leaks": 0, "kinds": Counter(), "tests": []}
            )
            group["leaks"] += 1
            group["kinds"][leak.get("kind", "?")] += 1
            if display_id(key) not in group["tests"]:
                group["tests"].append(display_id(key))
            group.setdefault("example", leak.get("retained_by"))
            group.setdefault("example_summary", leak.get("summary"))
    ordered = sorted(groups.values(), key=lambda g: (-len(g["tests"]), -g["leaks"], g["holder"]))
    for group in ordered:
        group["kinds"] = dict(group["kinds"].most_common())
    return ordered


# ----------------------------------------------------------------------------- reporting


def label(suite: str) -> str:
    """The prefix of a section's title: the suite it is about."""
    return f"{suite}: " if suite else ""


def print_counts(runs: Iterable[Run], suite: str = "") -> None:
    print(f"\n== {label(suite)}counts")
    print(
        f"   {'run':<12}{'total':>7}{'passed':>8}{'failed':>8}{'error':>7}{'skipped':>9}"
        f"{'wall':>10}{'cpu':>10}"
    )
    for run in runs:
        c = run.counts()
        print(
            f"   plugin {run.name:<5}{c['total']:>7}{c['passed']:>8}{c['failed']:>8}"
            f"{c['error']:>7}{c['skipped']:>9}{run.wall_s:>9.1f}s{run.cpu_s:>9.1f}s"
        )


def ratios(off: Run, on: Run) -> dict[str, float]:
    """Plugin on / plugin off, in wall and in CPU time."""
    return {
        "wall": round(on.wall_s / off.wall_s, 3) if off.wall_s else float("nan"),
        "cpu": round(on.cpu_s / off.cpu_s, 3) if off.cpu_s else float("nan"),
    }


def transition(item: Difference) -> str:
    if item.off == "not run":
        return f"{item.on} with the plugin; no plugin-off run"
    return f"{item.off} without the plugin, {item.on} with it"


def print_differences(differences: Sequence[Difference], baseline: bool, suite: str = "") -> None:
    broken = [d for d in differences if not d.leak]
    leaked = [d for d in differences if d.leak]
    if broken:
        title = "outcome changed" if baseline else "failed or errored"
        print(
            f"\n== {label(suite)}BROKEN by the plugin: {len(broken)} tests ({title}, not by a "
            "leak report)"
        )
        groups: dict[str, list[Difference]] = defaultdict(list)
        for item in broken:
            groups[item.signature].append(item)
        for sig, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"\n-- {len(items)} x {sig}")
            print(f"   for example {items[0].nodeid} ({transition(items[0])}):")
            for line in items[0].text:
                print(f"   | {line}")
            for item in items:
                print(f"   {item.nodeid} ({transition(item)})")
    if leaked:
        print(f"\n== {label(suite)}changed by a leak report: {len(leaked)} tests")
        for item in leaked:
            print(f"\n-- {item.nodeid} ({transition(item)})")
            for line in item.text:
                print(f"   | {line}")


def print_leak_groups(groups: Sequence[dict[str, Any]], suite: str = "") -> None:
    if not groups:
        return
    total = sum(group["leaks"] for group in groups)
    print(f"\n== {label(suite)}leaks by holder: {total} leaked objects, {len(groups)} holders")
    for group in groups:
        kinds = ", ".join(f"{count} {kind}" for kind, count in group["kinds"].items())
        tests = group["tests"]
        print(f"\n-- {group['holder']}")
        print(f"   {group['leaks']} leaks ({kinds}) in {len(tests)} tests")
        print(f"   e.g. {group['example_summary']}")
        if group["example"] and group["example"] != group["holder"]:
            print(f"        {group['example']}")
        for nodeid in tests[:5]:
            print(f"   {nodeid}")
        if len(tests) > 5:
            print(f"   ... and {len(tests) - 5} more")


def print_suites(suites: dict[str, dict[str, Any]]) -> None:
    """One line per suite and one for them all: tests, wall times, ratios, what changed."""
    print("\n== suites")
    print(
        f"   {'suite':<9}{'tests':>7}{'off wall':>10}{'on wall':>10}{'on/off wall':>13}"
        f"{'on/off cpu':>12}{'broken':>8}{'leak reports':>14}"
    )
    for name, figures in suites.items():
        if "skipped" in figures:
            print(f"   {name:<9} not run: {figures['skipped']}")
            continue
        runs = figures["runs"]
        tests = max(run["counts"]["total"] for run in runs.values())
        off = f"{runs['off']['wall_s']:.1f}s" if "off" in runs else "-"
        on = f"{runs['on']['wall_s']:.1f}s" if "on" in runs else "-"
        ratio = figures.get("ratio")
        wall = f"{ratio['wall']:.2f}x" if ratio else "-"
        cpu = f"{ratio['cpu']:.2f}x" if ratio else "-"
        broken = figures.get("broken", len(figures.get("baseline_failures", [])))
        leaked = figures.get("changed_by_leak_report", "-")
        print(f"   {name:<9}{tests:>7}{off:>10}{on:>10}{wall:>13}{cpu:>12}{broken:>8}{leaked:>14}")
    runs = [run for f in suites.values() for run in f.get("runs", {}).values()]
    rounds = max((run.get("rounds", 1) for run in runs), default=1)
    if any(run.get("side_by_side") for run in runs):
        times = f"{rounds} times" if rounds > 1 else "once"
        print(f"   (the two sides of a suite ran side by side, {times}; the times are the sums)")
    elif rounds > 1:
        print(f"   (each side ran {rounds} times, in ABBA order; the times are the sums)")


# ----------------------------------------------------------------------------- main


def split_arguments(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str], list[str]]:
    """Our options; the arguments for both runs; those for the plugin-on run only."""
    argv = list(argv)
    both: list[str] = []
    if "--" in argv:
        both = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=("on", "off"), help="run one side only")
    parser.add_argument(
        "--suite",
        action="append",
        choices=[suite.name for suite in SUITES],
        help="run only this suite (repeatable; default: all)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON here")
    parser.add_argument(
        "-n",
        "--numprocesses",
        metavar="N",
        help="pytest-xdist workers: each run's, or with --side-by-side both sides' together",
    )
    parser.add_argument(
        "--rounds",
        type=positive,
        default=1,
        metavar="N",
        help="run each side N times, in ABBA order (off on, on off, ...), so that a machine "
        "that slows down or speeds up during the gate weighs on both sides alike; the times "
        "add up, the outcomes are the first round's (default 1)",
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="run the plugin-off and plugin-on sides of a suite at the same time, each with "
        "half of -n's workers (serial without -n), so that the machine's drift weighs on both "
        "alike; the side that ends first runs again, untimed, until the other ends",
    )
    options, rest = parser.parse_known_args(argv)
    if options.side_by_side and options.only:
        parser.error("--side-by-side needs both sides: leave out --only")
    if options.side_by_side and options.numprocesses is not None:
        workers = options.numprocesses
        if not workers.isdigit() or int(workers) < 2 or int(workers) % 2:
            parser.error(
                f"--side-by-side gives each side half of -n's workers: -n must be an even "
                f"number (2, 4, ...), not {workers!r}; leave -n out for one serial process "
                "a side"
            )
    plugin_only: list[str] = []
    unknown: list[str] = []
    index = 0
    while index < len(rest):
        arg = rest[index]
        index += 1
        if not arg.startswith("--eagersession"):
            unknown.append(arg)
            continue
        plugin_only.append(arg)
        takes_value = arg != "--eagersession-track-creation" and "=" not in arg
        if takes_value and index < len(rest) and not rest[index].startswith("-"):
            plugin_only.append(rest[index])
            index += 1
    if unknown:
        parser.error(
            f"unrecognized arguments: {' '.join(unknown)} (pytest's own go after --, "
            "e.g. -- -k dense; the plugin's as --eagersession-OPTION=VALUE)"
        )
    if options.numprocesses is not None:
        workers = options.numprocesses
        if options.side_by_side:
            workers = str(int(workers) // 2)
        both = ["-n", workers, *both]
    return options, both, plugin_only


def abba(names: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """``(round, side)`` in the order to run them: the sides in turn, reversed every other
    round (off on, on off, off on, ...)."""
    return [
        (round_, name)
        for round_ in range(rounds)
        for name in (names if round_ % 2 == 0 else names[::-1])
    ]


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def version(*distributions: str) -> str | None:
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def baseline_failures(off: Run, suite: str = "") -> list[str]:
    """``--only off``: the tests that fail or error without the plugin, printed."""
    bad = {k: r for k, r in off.results.items() if r.outcome in ("failed", "error")}
    if bad:
        print(f"\n== {label(suite)}failing without the plugin: {len(bad)} tests")
    for key, result in bad.items():
        print(f"\n-- {display_id(key)} ({result.outcome})")
        text = "\n\n".join(result.texts) or "\n".join(result.messages)
        for line in trimmed(text, tail=True):
            print(f"   | {line}")
    return [display_id(key) for key in bad]


def baseline_verdict(total: int, bad: int) -> tuple[str, int]:
    """``--only off``: every test must pass or skip without the plugin."""
    if bad:
        return (
            f"VERDICT: BASELINE BROKEN: {bad} of {total} tests fail without the "
            "plugin; the gate's file list does not suit this environment",
            1,
        )
    return f"VERDICT: BASELINE OK: all {total} tests pass or skip without the plugin", 0


def plugin_figures(off: Run | None, on: Run, suite: str = "") -> dict[str, Any]:
    """The plugin may change an outcome only by a leak report (without ``off``: may fail or
    error a test only by a leak report). What it changed, printed, and as figures."""
    differences = compare(off, on)
    groups = leak_groups(on)
    print_differences(differences, baseline=off is not None, suite=suite)
    print_leak_groups(groups, suite=suite)
    broken = [d for d in differences if not d.leak]
    return {
        "differences": [asdict(d) for d in differences],
        "broken": len(broken),
        "changed_by_leak_report": len(differences) - len(broken),
        "broken_by_signature": dict(Counter(d.signature for d in broken).most_common()),
        "leak_groups": groups,
    }


def plugin_verdict(total: int, broken: int, leaked: int, baseline: bool) -> tuple[str, int]:
    if baseline:
        what = f"of {total} tests, the plugin changed the outcome of"
    else:
        what = f"of {total} tests run with the plugin alone (no baseline), it failed or errored"
    if broken:
        return (
            f"VERDICT: BROKEN: {what} {broken} other than by a leak report "
            f"(and {leaked} by a leak report)",
            1,
        )
    return (
        f"VERDICT: OK: {what} none other than by a leak report ({leaked} by a leak report)",
        0,
    )


def describe(suite: Suite) -> str:
    """What a suite runs, for people."""
    what = f"{len(suite.files)} of {suite.library} {version(suite.distribution)}'s test files"
    if suite.own:
        what += f" and {len(suite.own)} of ours"
    return what


def report_suite(suite: Suite, off: Run | None, on: Run | None) -> dict[str, Any]:
    """One suite's section: its counts, on/off ratio, the plugin's time by phase and what the
    plugin changed; returns its figures."""
    runs = [run for run in (off, on) if run is not None]
    print(f"\n==== the {suite.name} suite: {describe(suite)}")
    print_counts(runs, suite.name)
    figures: dict[str, Any] = {
        "library": suite.library,
        "version": version(suite.distribution),
        "files": list(suite.files) + list(suite.own),
        "runs": {run.name: run.figures() for run in runs},
    }
    if off is not None and on is not None:
        figures["ratio"] = ratios(off, on)
        print(
            f"   plugin on / plugin off: {figures['ratio']['wall']:.2f}x wall time, "
            f"{figures['ratio']['cpu']:.2f}x CPU time"
        )
    if on is not None and on.report is not None:
        figures["profile"] = read_profile(on.report)
        print_profile(figures["profile"], on.wall_s / on.rounds, suite.name)
    if on is None:
        assert off is not None
        figures["baseline_failures"] = baseline_failures(off, suite.name)
    else:
        figures.update(plugin_figures(off, on, suite.name))
    return figures


def main(argv: Sequence[str]) -> int:
    options, both, plugin_only = split_arguments(argv)
    tensorflow = version("tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-macos")
    chosen = [suite for suite in SUITES if not options.suite or suite.name in options.suite]
    staged: list[tuple[Suite, list[str]]] = []
    not_run: dict[str, str] = {}
    for suite in chosen:
        paths = stage(suite)
        if paths is None:
            not_run[suite.name] = f"{suite.distribution} is not installed"
            print(
                f"realsuite: SKIPPED the {suite.name} suite: {not_run[suite.name]} here "
                f"({suite.install})",
                flush=True,
            )
        else:
            staged.append((suite, paths))
    print(
        f"realsuite: TensorFlow {tensorflow}; "
        + "; ".join(f"{suite.name}: {describe(suite)}" for suite, _ in staged),
        flush=True,
    )
    if not staged:
        print("VERDICT: INCOMPLETE: no suite could run; nothing compared", flush=True)
        return 2
    sides: dict[str, dict[str, Run]] = {}
    names = [name for name in ("off", "on") if options.only in (None, name)]
    try:
        for suite, paths in staged:
            sides[suite.name] = {}
            if options.side_by_side:
                for round_ in range(options.rounds):
                    runs = run_side_by_side(
                        suite, paths, {"off": both, "on": [*both, *plugin_only]}, round_
                    )
                    for run in runs.values():
                        add_round(sides[suite.name], run)
                continue
            for round_, name in abba(names, options.rounds):
                run = run_side(
                    suite,
                    name,
                    paths,
                    [*both, *plugin_only] if name == "on" else both,
                    plugin=name == "on",
                    round_=round_,
                )
                add_round(sides[suite.name], run)
    except RunIncomplete as error:
        print(f"\nrealsuite: {error}", file=sys.stderr)
        print("VERDICT: INCOMPLETE: a run did not finish; nothing compared", flush=True)
        return 2
    suites: dict[str, dict[str, Any]] = {}
    for suite, _ in staged:
        suites[suite.name] = report_suite(
            suite, sides[suite.name].get("off"), sides[suite.name].get("on")
        )
    for name, reason in not_run.items():
        suites[name] = {"skipped": reason}
    # The suites together: the verdict, and the figures as the gate has always written them.
    off = merged([s["off"] for s in sides.values()]) if options.only != "on" else None
    on = merged([s["on"] for s in sides.values()]) if options.only != "off" else None
    runs = [run for run in (off, on) if run is not None]
    print_suites(suites)
    figures: dict[str, Any] = {
        "keras": version("keras"),
        "sonnet": version("dm-sonnet"),
        "tensorflow": tensorflow,
        "files": {"keras": list(KERAS_TEST_FILES), "own": list(OWN_TEST_FILES)}
        | {suite.name: list(suite.files) for suite, _ in staged if suite.name != "keras"},
        "arguments": {"both": both, "plugin_on": plugin_only},
        "suites": suites,
        "not_run": not_run,
        "runs": {run.name: run.figures() for run in runs},
    }
    if off is not None and on is not None:
        figures["ratio"] = ratios(off, on)
        print(
            f"   all suites, plugin on / plugin off: {figures['ratio']['wall']:.2f}x wall time, "
            f"{figures['ratio']['cpu']:.2f}x CPU time"
        )
    in_suites = [figures_ for figures_ in suites.values() if "skipped" not in figures_]
    if on is None:
        assert off is not None
        bad = [test for s in in_suites for test in s["baseline_failures"]]
        figures["baseline_failures"] = bad
        verdict, status = baseline_verdict(len(off.results), len(bad))
    else:
        figures["differences"] = [d for s in in_suites for d in s["differences"]]
        figures["broken"] = sum(s["broken"] for s in in_suites)
        figures["changed_by_leak_report"] = sum(s["changed_by_leak_report"] for s in in_suites)
        figures["broken_by_signature"] = dict(
            Counter(d["signature"] for d in figures["differences"] if not d["leak"]).most_common()
        )
        figures["leak_groups"] = leak_groups(on)
        verdict, status = plugin_verdict(
            len(on.results), figures["broken"], figures["changed_by_leak_report"], off is not None
        )
    if not_run:
        verdict += "; NOT RUN: " + ", ".join(
            f"the {name} suite ({reason})" for name, reason in not_run.items()
        )
    figures["verdict"] = verdict
    figures["status"] = status
    print(f"\n{verdict}")
    if options.json:
        path = Path(options.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        print(f"(figures written to {path})")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
