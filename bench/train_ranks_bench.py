"""The data-parallel training row of `make bench`: SmolLM2-135M, 2 ranks (torchrun, gloo,
one thread a rank), 5 AdamW steps with clipping on a batch of 2 rows x 256 tokens (one
row a rank), against one process on the whole batch: the time per step, and whether
the two give the same losses and weights (the bits are the tests'; this row records
them on the real model).

    torchrun --standalone --nproc-per-node 2 bench/train_ranks_bench.py MODEL N STEPS OUT
        (the worker: every rank trains; rank 0 also runs the one-process reference after,
        with the threads of both ranks, and writes OUT)
"""
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _digest(tr):
    h = hashlib.sha256()
    for w in tr.weights().values():
        h.update(w.tobytes())
    return h.hexdigest()[:16]


def worker(model, n, steps, out):
    import numpy as np
    import torch.distributed as dist

    dist.init_process_group("gloo")
    from mojolearn import training
    from mojolearn._core import threads

    rank = dist.get_rank()
    batch = (np.arange(2 * n, dtype=np.int64).reshape(2, n) * 7919) % 49152
    tr = training.Trainer(model, group=dist.group.WORLD, max_norm=1.0)
    times, losses = [], []
    for _ in range(steps):
        dist.barrier()
        t = time.perf_counter()
        losses.append(float(tr.step(batch[rank:rank + 1])))
        times.append((time.perf_counter() - t) * 1e3)
    digest = _digest(tr)
    del tr
    dist.barrier()
    if rank == 0:
        threads.set_num_threads(2)
        one = training.Trainer(model, max_norm=1.0)
        ref_times, ref_losses = [], []
        for _ in range(steps):
            t = time.perf_counter()
            ref_losses.append(float(one.step(batch)))
            ref_times.append((time.perf_counter() - t) * 1e3)
        with open(out, "w") as f:
            json.dump({"ranks_ms": times, "one_ms": ref_times, "losses": losses,
                       "one_losses": ref_losses, "same_weights": digest == _digest(one)}, f)
    dist.barrier()
    dist.destroy_process_group()


def run(B, model_dir, quick):
    """Adds the 2-rank training row to the bench B (torchrun)."""
    n, steps = (64, 2) if quick else (256, 5)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        env = dict(os.environ, MOJOLEARN_NUM_THREADS="1", OMP_NUM_THREADS="1",
                   PYTHONPATH=os.path.join(ROOT, "python"))
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            "--nproc-per-node=2", os.path.abspath(__file__), model_dir, str(n),
                            str(steps), out], capture_output=True, text=True, env=env, cwd=tmp)
        if r.returncode or not os.path.exists(out):
            print(f"  training on 2 ranks: failed: {(r.stdout + r.stderr)[-400:]}")
            return None
        res = json.load(open(out))
    # the first step of each side pays for the first touch of its buffers: medians of the rest
    med = statistics.median(res["ranks_ms"][1:] or res["ranks_ms"])
    one = statistics.median(res["one_ms"][1:] or res["one_ms"])
    same = res["same_weights"] and res["losses"] == res["one_losses"]
    row = {"case": f"training;smollm2-135m;2-ranks;{n}",
           "op": "Trainer.step, 2 ranks x 1 row (1 thread a rank) vs one process x 2 rows "
                 "(2 threads)",
           "profile": "fp32_v1", "shape": [2, n], "ranks": 2, "threads_per_rank": 1,
           "median_ms": {"mojolearn": med, "one_process": one},
           "reps_ms": {"mojolearn": [round(x, 1) for x in res["ranks_ms"]],
                       "one_process": [round(x, 1) for x in res["one_ms"]]},
           "peer": "one_process", "ratio": one / med, "same_bits_as_one_process": same,
           "losses": res["losses"], "wall_s": round(time.perf_counter() - t0, 1)}
    B.rows.append(row)
    print(f"  training on 2 ranks: {med:8.1f} ms a step vs {one:8.1f} ms in one process "
          f"({row['ratio']:.2f}x); losses and weights {'equal' if same else 'DIFFER'}")
    return row


if __name__ == "__main__":
    worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
