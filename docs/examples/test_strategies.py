"""The strategies page's examples: when each strategy deletes what died."""

import time

from pytest_eagersession import EagerSession


def fill(session):
    """An op that outputs a 4 MiB tensor, owned by the session through its operation."""
    return session.op_builder("Fill").add_input([1024, 1024]).add_input(1.0).build()


# --8<-- [start:strategies]
def test_in_background_deletes_soon():
    session = EagerSession.options().resource_cleanup_strategy("in_background").build()
    operation = fill(session)
    del operation  # garbage: the session's cleaner thread deletes its outputs
    deadline = time.monotonic() + 5.0
    while session.stats().deleted == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert session.stats().deleted == 1
    session.close()


def test_on_safe_points_deletes_at_the_next_safe_point():
    session = EagerSession.options().resource_cleanup_strategy("on_safe_points").build()
    operation = fill(session)
    del operation  # garbage, queued: nothing runs until a safe point
    assert session.stats().pending == 1
    fill(session)  # op_builder() is a safe point: the first outputs go now
    assert session.stats().deleted == 1
    session.close()


def test_on_session_close_deletes_at_close():
    session = EagerSession.options().resource_cleanup_strategy("on_session_close").build()
    for _ in range(3):
        operation = fill(session)
    del operation  # three operations are garbage, 12 MiB still held
    assert session.stats().registered == 3
    session.close()  # every strategy deletes everything at close
    assert session.stats().deleted == 3


# --8<-- [end:strategies]
