"""Every object made in an active session is the session's, whatever collects meanwhile.

Code inside one session keeps every tensor, variable and dataset iterator it makes, while it
also makes short-lived Python garbage, under gc thresholds a program may set itself, from the
session's own thread or from threads started inside it; the session's survivors at close must
include every kept object, each once. Under ``IN_BACKGROUND`` the cleaner looks and collects
next to all of it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_eagersession import EagerSession

tf = pytest.importorskip("tensorflow")

#: Iterations of each maker: one tensor, one variable and one iterator kept per iteration.
ITERATIONS = 27
THRESHOLDS = {
    "default": None,  # the interpreter's own
    "low": (10, 10, 10),  # a program's own tuning
    "tiny": (1, 1, 1),  # a collection at nearly every allocation
    "young only": (50, 0, 0),  # the older generations never collected on their own
}
SIZES = {"16 B": (4,), "1 MiB": (512, 512)}

# The plugin's own session of each test cleans up at close: no second cleaner thread.
pytestmark = pytest.mark.cleanup("on_session_close")


@pytest.fixture
def thresholds(request: pytest.FixtureRequest) -> Iterator[None]:
    saved = gc.get_threshold()
    wanted = THRESHOLDS[request.param]
    if wanted is not None:
        gc.set_threshold(*wanted)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


def make_and_keep(kept: list[Any], shape: tuple[int, ...], garbage: int) -> None:
    dataset = tf.data.Dataset.range(3)
    for index in range(ITERATIONS):
        kept.append(tf.fill(shape, float(index)))
        kept.append(tf.Variable(tf.zeros((2,)), name=f"kept_{index}"))
        kept.append(iter(dataset))
        for _ in range(garbage):
            _ = [index]  # short-lived Python objects: they move the collector's counts


@pytest.mark.parametrize("strategy", ["in_background", "on_session_close"])
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("garbage", [0, 300])
@pytest.mark.parametrize("threads", [0, 4])
@pytest.mark.parametrize("thresholds", list(THRESHOLDS), indirect=True)
@pytest.mark.usefixtures("thresholds")
def test_every_kept_object_is_a_survivor_of_its_session(
    strategy: str, size: str, garbage: int, threads: int
) -> None:
    kept: list[Any] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            make_and_keep(kept, SIZES[size], garbage)
        except BaseException as error:  # reported by the test, not lost in the thread
            errors.append(error)

    session = EagerSession.options().resource_cleanup_strategy(strategy).build()
    with session:
        if threads:
            started = [threading.Thread(target=worker) for _ in range(threads)]
            for thread in started:
                thread.start()
            for thread in started:
                thread.join()
        else:
            worker()
    assert not errors, errors
    owned: dict[int, int] = {}
    for survivor in session.survivors():
        obj = survivor.ref()
        if obj is not None:
            owned[id(obj)] = owned.get(id(obj), 0) + 1
    expected = 3 * ITERATIONS * max(threads, 1)
    assert len(kept) == expected
    missing = [obj for obj in kept if id(obj) not in owned]
    kinds = sorted({type(obj).__name__ for obj in missing})
    assert not missing, f"{len(missing)} of {expected} kept objects unattributed ({kinds})"
    assert all(count == 1 for count in owned.values())
    kept.clear()
