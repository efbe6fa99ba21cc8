"""The Trainer's BufferPool checked the same way for every family it serves
(tests/test_training_model.py, test_training_mamba1.py, test_training_mamba2.py)."""
from __future__ import annotations

import numpy as np


def _bits(x):
    return np.float32(x).view(np.uint32)[()]


def changing_calls(batch, V):
    """The calls the Mamba trainers' pool tests run (``batch(V, B=, L=, seed=)`` makes one
    batch of token ids): steps of two shapes, one with micro-batches, gradients and a
    loss of two more, and a step of the first shape again."""
    return [("step", batch(V, B=2, L=24, seed=3), 1), ("step", batch(V, B=4, L=64, seed=4), 2),
            ("gradients", batch(V, B=2, L=17, seed=5), 1), ("loss", batch(V, B=3, L=9, seed=6), 1),
            ("step", batch(V, B=2, L=24, seed=8), 1)]


def pooled_trainer_matches_fresh(a, b, calls, ids, same_grads):
    """a: a Trainer with its pool; b: the same Trainer made again with ``b._pool = None``
    (every array new, as before the pool). ``calls``: (func, ids, accumulation) with
    func "step", "gradients" or "loss", run on both: the same losses, gradients and
    weights bit for bit. Then a step of ``ids`` takes again the arrays of the step
    before it, and within the call the arrays the code dropped: the pool holds fewer
    arrays than the call asked for."""
    for func, x, acc in calls:
        if func == "step":
            la, lb = a.step(x, accumulation=acc), b.step(x, accumulation=acc)
            assert _bits(la) == _bits(lb), func
        elif func == "gradients":
            same_grads(a.gradients(x), b.gradients(x))
        else:
            assert _bits(a.loss(x)) == _bits(b.loss(x)), func
    same_grads(a.weights(), b.weights())
    # the arrays of one step are taken again by the next
    a.step(ids)
    b.step(ids)
    # (the pool holds every array of the last call until the next release, so their ids
    # stay unique; holding them here would keep the call from reusing them mid-call)
    before = {k: sorted(id(x) for x in v) for k, v in a._pool._used.items()}
    takes = []
    take = a._pool.take
    a._pool.take = lambda shape: takes.append(shape) or take(shape)
    a.step(ids)
    del a._pool.take
    b.step(ids)
    after = {k: sorted(id(x) for x in v) for k, v in a._pool._used.items()}
    assert before and before == after
    # within the call, arrays the code dropped were taken again: the pool holds fewer
    # than the call asked for (the backward's per-layer temporaries share arrays)
    assert sum(map(len, after.values())) < len(takes)
    same_grads(a.weights(), b.weights())
