"""Worker threads that append every batch they make to one module-level list."""

import threading

import tensorflow as tf

# --8<-- [start:leak]
_BATCHES = []


def prefetch(worker, count):
    for step in range(count):
        _BATCHES.append(tf.fill([256, 256], float(worker * count + step)))


def test_leaks_prefetched_batches():
    workers = [threading.Thread(target=prefetch, args=(n, 6)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(_BATCHES) == 24


# --8<-- [end:leak]
