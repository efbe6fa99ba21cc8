"""Threads battery (issue 43): work shared between threads must give each thread the
bits it gets alone. ``run(seconds)`` runs, for about that long, threads that share one
CausalLM (forward and prefill + steps on their own states, with different batches),
threads that switch their own numeric mode (``modes.using``) around products, and one
that flips the process mode all the while; returns a list of failures (empty when every result was the
single-thread bits). tests/test_threads_models.py runs it briefly in make test;
make fuzz runs it longer."""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "python")]


def _model(tmp):
    from test_models import TINY, tiny_weights, write_model
    from mojolearn.models import CausalLM

    cfg = dict(TINY, hidden_size=160, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=144)
    return CausalLM.load(write_model(tmp, cfg, tiny_weights(cfg, seed=17))), cfg


def run(seconds: float, threads: int = 4) -> list:
    from mojolearn import linalg, modes

    tmp = tempfile.mkdtemp(prefix="mlthreads-")
    lm, cfg = _model(os.path.join(tmp, "m"))
    rng = np.random.default_rng(3)
    batches = [rng.integers(0, cfg["vocab_size"], size=(1 + i % 3, 5 + i)) for i in range(threads)]
    want = [lm.forward(ids) for ids in batches]
    a = rng.standard_normal((33, 700)).astype(np.float32)
    b = rng.standard_normal((700, 29)).astype(np.float32)
    ref = {}
    for m in ("identical", "fast", "deterministic"):
        with modes.using(m):
            ref[m] = np.asarray(linalg.matmul(a, b)).view(np.uint32)
    if np.array_equal(ref["identical"], ref["fast"]):  # pragma: no cover - the product's k
        raise RuntimeError("threads battery: identical and fast give the same bits here")
    failures, counts = [], {"model": 0, "modes": 0}
    stop = time.time() + seconds
    lock = threading.Lock()

    def model_worker(i):
        ids = batches[i]
        n = 0
        while time.time() < stop:
            got = lm.forward(ids)
            st = lm.allocate_state(ids.shape[0], ids.shape[1] + 1)
            pre = lm.forward(ids[:, :3], st)
            steps = [lm.step(ids[:, t:t + 1], st)[:, None, :] for t in range(3, ids.shape[1])]
            stepped = np.concatenate([pre] + steps, axis=1)
            for what, x in (("forward", got), ("prefill + steps", stepped)):
                if not np.array_equal(x.view(np.uint32), want[i].view(np.uint32)):
                    with lock:
                        failures.append(f"shared CausalLM, thread {i}: {what} differs from "
                                        f"the single-thread bits")
            n += 1
        with lock:
            counts["model"] += n

    def mode_worker(i):
        names = ("identical", "fast", "deterministic")
        n = 0
        while time.time() < stop:
            m = names[(i + n) % 3]
            with modes.using(m):
                got = np.asarray(linalg.matmul(a, b)).view(np.uint32)
            if not np.array_equal(got, ref[m]):
                with lock:
                    failures.append(f"modes.using({m!r}) in thread {i}: not that mode's bits")
            n += 1
        with lock:
            counts["modes"] += n

    def churn():
        # the process mode flips all the while: a thread inside using() must not see it
        old = modes.set_numeric_mode("identical")
        try:
            while time.time() < stop:
                modes.set_numeric_mode("fast")
                time.sleep(0.0005)
                modes.set_numeric_mode("deterministic")
                time.sleep(0.0005)
        finally:
            modes.set_numeric_mode(old)

    ts = [threading.Thread(target=model_worker, args=(i,)) for i in range(threads)]
    ts += [threading.Thread(target=mode_worker, args=(i,)) for i in range(threads)]
    ts.append(threading.Thread(target=churn))
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    run.counts = counts
    return failures


if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    bad = run(secs)
    print(f"threads battery: {run.counts} calls in {secs:g} s, {len(bad)} failures")
    for f in bad[:20]:
        print("FAIL", f)
    sys.exit(1 if bad else 0)
