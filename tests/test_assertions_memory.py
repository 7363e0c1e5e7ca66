"""max_bytes and ByteMeter: the peak of tracked TensorFlow bytes and of each GPU's memory."""

from __future__ import annotations

import pytest

from pytest_eagersession.assertions import (
    DEVICE_MEMORY,
    ByteMeter,
    MemoryLimitError,
    max_bytes,
    parse_size,
)

tf = pytest.importorskip("tensorflow")

HERE = __file__
MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("64 MiB", 64 * MIB),
        ("64MiB", 64 * MIB),
        ("1.5 GiB", 3 * 512 * MIB),
        ("2 gb", 2_000_000_000),
        ("10 KB", 10_000),
        ("10 KiB", 10_240),
        ("3 MB", 3_000_000),
        ("512 B", 512),
        ("100", 100),
        (4096, 4096),
    ],
)
def test_parse_size_reads_human_sizes(text, size) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["64 Mb/s", "lots", "", "-1 MiB", "64 TiB", -5, 1.5, None, True])
def test_a_bad_size_is_an_error_naming_the_units(bad) -> None:
    with pytest.raises(ValueError, match=r"B, KB, KiB, MB, MiB, GB, GiB|cannot be negative"):
        parse_size(bad)
    with pytest.raises(ValueError, match=r"B, KB, KiB, MB, MiB, GB, GiB|cannot be negative"):
        max_bytes(bad)


def test_over_the_byte_limit_fails_showing_the_largest_objects_at_the_peak() -> None:
    @max_bytes("3 MiB", where="the step")
    def step() -> None:
        activations = tf.zeros([1024, 1024])  # 4 MiB, made by an op
        del activations

    with pytest.raises(MemoryLimitError) as failure:
        step()
    text = str(failure.value)
    lines = text.splitlines()
    assert lines[0] == (
        "the step peaked at 4.0 MiB of tracked TensorFlow objects, over its max_bytes of "
        "3.0 MiB (3145728 B)."
    )
    assert lines[2].startswith(
        f"    1. tensor: EagerTensor float32[1024,1024] 4.0 MiB on CPU:0, made by Fill at {HERE}:"
    )
    assert lines[2].endswith("(freed since)")
    assert 4 * MIB <= failure.value.peak_bytes < 4 * MIB + 1024
    assert failure.value.limit == 3 * MIB


def test_the_peak_counts_what_is_alive_at_once_not_everything_ever_made() -> None:
    with max_bytes("3 MiB") as meter:
        for _ in range(8):
            chunk = tf.zeros([256, 1024])  # 1 MiB each; the previous one dies on rebinding
        del chunk
    # The new chunk, then the old one goes; under IN_BACKGROUND a chunk the cleaner is measuring
    # when the loop drops it lives until the measure ends (TensorFlow's size read lets this
    # thread run): one chunk more, never the 8 MiB made.
    assert MIB <= meter.peak_bytes <= 3 * MIB + 1024
    assert meter.current_bytes == 0


@pytest.mark.cleanup("on_safe_points")  # no cleaner thread: nothing but the loop holds a chunk
def test_without_a_cleaner_thread_the_peak_is_exactly_the_two_chunks_alive_at_once() -> None:
    with max_bytes("3 MiB") as meter:
        for _ in range(8):
            chunk = tf.zeros([256, 1024])
        del chunk
    assert 2 * MIB <= meter.peak_bytes <= 2 * MIB + 1024
    assert meter.current_bytes == 0


def test_constants_and_variables_count_though_no_op_makes_them() -> None:
    import numpy as np

    with ByteMeter() as meter:
        constant = tf.constant(np.zeros((512, 512), np.float32))  # 1 MiB, converted
        variable = tf.Variable(np.zeros((256, 512), np.float32))  # 0.5 MiB
    assert meter.peak_bytes >= MIB + MIB // 2
    assert meter.largest_at_peak() == []  # no limit: no snapshot was needed
    del constant, variable


def test_objects_made_before_the_meter_are_not_counted() -> None:
    big = tf.zeros([1024, 1024]) + 1.0
    with max_bytes("1 KiB") as meter:
        total = tf.reduce_sum(big)
    assert meter.peak_bytes < 1024  # the sum and its axes, not the 4 MiB made before
    del big, total


class FakeGpu:
    """``DeviceMemory`` for one GPU whose allocator the test drives."""

    def __init__(self) -> None:
        self.current = 100 * MIB
        self.peak = 900 * MIB  # an earlier test's peak, before any reset

    def devices(self) -> list[str]:
        return ["GPU:0"]

    def info(self, device: str) -> dict[str, int]:
        return {"current": self.current, "peak": self.peak}

    def reset(self, device: str) -> None:
        self.peak = self.current

    def allocate(self, nbytes: int) -> None:
        self.current += nbytes
        self.peak = max(self.peak, self.current)

    def free(self, nbytes: int) -> None:
        self.current -= nbytes


@pytest.fixture
def gpu(monkeypatch) -> FakeGpu:
    fake = FakeGpu()
    for name in ("devices", "info", "reset"):
        monkeypatch.setattr(DEVICE_MEMORY, name, getattr(fake, name))
    return fake


def test_a_gpu_peak_over_the_limit_fails_and_nested_meters_keep_their_peaks(gpu) -> None:
    inner = max_bytes("64 MiB")

    def burst() -> None:
        with inner:
            gpu.allocate(80 * MIB)
            gpu.free(80 * MIB)

    with ByteMeter() as outer:
        gpu.allocate(300 * MIB)
        gpu.free(300 * MIB)
        with pytest.raises(MemoryLimitError) as failure:
            burst()
    assert inner.meter.device_peaks == {"GPU:0": 80 * MIB}
    assert outer.device_peaks == {"GPU:0": 300 * MIB}  # the inner meter's reset lost nothing
    assert str(failure.value) == (
        "The block raised GPU:0's memory by 80.0 MiB at its peak, over its max_bytes of "
        "64.0 MiB (TensorFlow's allocator: tensors, temporaries, workspaces)."
    )
    with max_bytes("64 MiB") as calm:
        gpu.allocate(MIB)
    assert calm.device_peaks == {"GPU:0": MIB}


def test_a_collection_lists_young_tensors_and_the_next_op_measures_them(monkeypatch) -> None:
    # A collection may start inside TensorFlow's C code (a tensor's constructor), where asking
    # TensorFlow about a tensor can read what it is still building: the meter asks nothing
    # there, and measures what a collection listed at the next op.
    import gc

    import numpy as np

    from pytest_eagersession.assertions import tracked_bytes

    collecting = [False]
    measured_while_collecting = []
    real_nbytes = tracked_bytes.tensor_nbytes

    def spy(obj):
        measured_while_collecting.append(collecting[0])
        return real_nbytes(obj)

    def mark(phase, info) -> None:
        collecting[0] = phase == "start"

    monkeypatch.setattr(tracked_bytes, "tensor_nbytes", spy)
    gc.callbacks.insert(0, mark)  # before the meter's: it is appended at start
    try:
        with ByteMeter() as meter:
            constants = []
            for _ in range(16):
                constants.append(tf.constant(np.ones((128, 256), np.float32)))  # 128 KiB, no op
                gc.collect(0)
            before_op = meter.peak_bytes
            tf.zeros([1])
            after_op = meter.peak_bytes
    finally:
        gc.callbacks.remove(mark)
    assert measured_while_collecting, "nothing was measured"
    assert not any(measured_while_collecting)
    assert before_op < 16 * 128 * 1024  # listed, not measured, until an op runs
    assert 16 * 128 * 1024 <= after_op < 16 * 128 * 1024 + 1024
    del constants


def test_a_long_stretch_without_ops_keeps_only_the_listed_tensors_still_alive(monkeypatch) -> None:
    import gc

    import numpy as np

    from pytest_eagersession.assertions import tracked_bytes

    monkeypatch.setattr(tracked_bytes, "_LISTED_PRUNE_ABOVE", 4)
    with ByteMeter() as meter:
        for _ in range(24):
            constant = tf.constant(np.ones((16, 16), np.float32))
            gc.collect(0)  # lists it; no op runs to measure and clear the list
            del constant
        listed = len(meter._tracked._listed)
    assert listed <= 8  # 24 without the pruning


def test_a_variable_that_wraps_another_counts_its_buffer_once() -> None:
    import numpy as np

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with ByteMeter() as meter, strategy.scope():
        variable = tf.Variable(np.zeros((256, 1024), np.float32))  # 1 MiB, one replica
    assert type(variable).__name__ == "MirroredVariable"  # wraps the replica's variable
    assert MIB <= meter.peak_bytes < MIB + 1024  # 2 MiB when the wrapper counted too
    assert meter.objects_made == 1
    del variable


def test_a_collection_that_ends_after_the_meter_stopped_keeps_nothing_of_it() -> None:
    import threading

    meter = ByteMeter()
    with meter:
        kept = tf.constant([1.0, 2.0])
    tracked = meter._tracked
    # A collection in another thread passed the running check just before ``stop``; its
    # listing then goes on, after ``stop`` emptied the meter.
    late = threading.Thread(target=tracked._list_young)
    late.start()
    late.join()
    assert tracked._types == frozenset()  # TensorFlow's variable classes, and any user's
    assert tracked._listed == []
    del kept
