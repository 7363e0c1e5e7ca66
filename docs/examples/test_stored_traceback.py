"""Stored tracebacks: an exception kept for later keeps every frame's locals alive."""

import tensorflow as tf

# --8<-- [start:leak]
_ERRORS = []


def load_batch(size):
    batch = tf.random.uniform((size, 256))
    if size > 100:
        raise ValueError(f"batch of {size} rows is too large")
    return batch


def test_leaks_stored_exception():
    try:
        load_batch(512)
    except ValueError as error:
        _ERRORS.append(error)  # error.__traceback__ -> load_batch's frame -> batch
    assert len(_ERRORS) == 1


# --8<-- [end:leak]


# --8<-- [start:fix]
def test_fixed_stored_message():
    try:
        load_batch(512)
    except ValueError as error:
        _ERRORS.append(str(error))  # the text, not the exception and its frames
    assert _ERRORS[-1] == "batch of 512 rows is too large"


# --8<-- [end:fix]
