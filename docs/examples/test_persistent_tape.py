"""Persistent tapes: a GradientTape(persistent=True) keeps every intermediate until deleted."""

import tensorflow as tf


# --8<-- [start:leak]
class Trainer:
    """Keeps its tape to compute more gradients later."""

    def __init__(self):
        self.tape = None

    def losses(self, x):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            hidden = tf.tanh(tf.matmul(x, x, transpose_b=True))
            loss = tf.reduce_sum(hidden)
        self.tape = tape
        return loss


_TRAINER = Trainer()


def test_leaks_kept_persistent_tape():
    x = tf.random.normal((64, 64))
    loss = _TRAINER.losses(x)
    assert _TRAINER.tape.gradient(loss, x).shape == (64, 64)


# --8<-- [end:leak]


# --8<-- [start:fix]
def test_fixed_tape_released():
    trainer = Trainer()
    x = tf.random.normal((64, 64))
    loss = trainer.losses(x)
    assert trainer.tape.gradient(loss, x).shape == (64, 64)
    trainer.tape = None  # a persistent tape holds its tensors until it is dropped


# --8<-- [end:fix]
