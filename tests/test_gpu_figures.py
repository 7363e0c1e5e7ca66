"""The per-GPU figures across the run, with TensorFlow's allocator statistics faked.

No GPU here: the inner run's conftest replaces the three TensorFlow calls that
``_tf/devices.py`` reads (the logical GPUs, a GPU's memory info, the reset of its peak) with a
GPU whose peak each test drives. Each inner run is a fresh process: the GPUs are listed once.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

MIB = 1024 * 1024

FAKE_GPU = """
    import pytest
    import tensorflow as tf

    class _Device:
        name = "/job:localhost/replica:0/task:0/device:GPU:0"

    _STATE = {"current": 100 << 20, "peak": 100 << 20}
    _real_list = tf.config.list_logical_devices

    def _list(device_type=None):
        return [_Device()] if device_type == "GPU" else _real_list(device_type)

    def _reset(device):
        _STATE["peak"] = _STATE["current"]

    tf.config.list_logical_devices = _list
    tf.config.experimental.get_memory_info = lambda device: dict(_STATE)
    tf.config.experimental.reset_memory_stats = _reset
    tf.constant(0)  # the eager context starts: TensorFlow has placed its devices

    @pytest.fixture
    def gpu_burst():
        def burst(nbytes):
            _STATE["peak"] = max(_STATE["peak"], _STATE["current"] + nbytes)
        return burst

    @pytest.fixture
    def gpu_keep():
        def keep(nbytes):
            _STATE["current"] += nbytes
            _STATE["peak"] = max(_STATE["peak"], _STATE["current"])
        return keep
"""

SUITE = """
    import os

    def test_gpu_heavy(gpu_burst):
        gpu_burst(int(os.environ["GPU_MIB"]) << 20)

    def test_gpu_light(gpu_burst):
        gpu_burst(1 << 20)
"""

ARGS = ("-p", "no:randomly", "-p", "no:hypothesispytest", "--eagersession-fail-on-increase")


def test_gpu_peaks_are_ranked_charted_and_compared_with_the_last_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile(test_gpu=SUITE)
    junit = pytester.path / "junit.xml"
    monkeypatch.setenv("GPU_MIB", "8")
    result = pytester.runpytest_subprocess(
        *ARGS, "--eagersession-most-memory=2", f"--junitxml={junit}"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*the 2 tests with the highest peak of tracked bytes*",
            "*0 B    8.0 MiB  test_gpu.py::test_gpu_heavy",
            "*0 B    1.0 MiB  test_gpu.py::test_gpu_light",
        ]
    )
    properties = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in ET.parse(junit).iter("testcase")
    }
    assert properties["test_gpu_heavy"]["eagersession_gpu_peak_bytes"] == str(8 * MIB)

    monkeypatch.setenv("GPU_MIB", "32")
    result = pytester.runpytest_subprocess(*ARGS)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_gpu.py::test_gpu_heavy peaked at 32.0 MiB of GPU:0's memory, up 300%; the "
            "last run 8.0 MiB*"
        ]
    )


KEEPING_SUITE = """
    def test_uses_the_gpu_and_gives_it_back(gpu_burst):
        gpu_burst(128 << 20)

    def test_keeps_gpu_memory(gpu_keep):
        gpu_keep(64 << 20)
"""


def test_gpu_memory_that_stays_after_a_test_is_listed_and_drawn(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile(test_gpu=KEEPING_SUITE)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:randomly",
        "--eagersession-most-retained=2",
        "--eagersession-plot=memory.svg",
        "--eagersession-json=report.json",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*64.0 MiB  test_gpu.py::test_keeps_gpu_memory"])
    assert "test_uses_the_gpu_and_gives_it_back" not in result.stdout.str().split("stayed")[-1]
    tests = json.loads((pytester.path / "report.json").read_text())["tests"]
    retained = {test["nodeid"].split("::")[1]: test["retained"] for test in tests}
    assert retained["test_keeps_gpu_memory"]["gpu_bytes"] == {"GPU:0": 64 * MIB}
    assert retained["test_keeps_gpu_memory"]["gpu_after_bytes"] == {"GPU:0": 164 * MIB}
    assert retained["test_uses_the_gpu_and_gives_it_back"]["gpu_bytes"] == {"GPU:0": 0}
    picture = (pytester.path / "memory.svg").read_text(encoding="utf-8")
    assert ">GPU:0 in use<" in picture
    # the step is named by what the test kept, on the GPU too (not "+0.0 MiB" of RAM alone)
    (label,) = [line for line in picture.splitlines() if "test_keeps_gpu_memory (" in line]
    assert ", GPU:0 +64.0 MiB)<" in label
