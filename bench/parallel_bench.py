"""The ParallelCausalLM row of `make bench`: SmolLM2-135M prefill (512 tokens, batch 1)
on 2 ranks per layout (torchrun, gloo, the host's threads shared between the ranks)
against one process on all of them, and the bytes each rank sends per token, prefill
and decode. On a 2-core box the time is for the record; the bits are the tests'.

    torchrun --standalone --nproc-per-node 2 bench/parallel_bench.py MODEL LAYOUT N REPS OUT
        (the worker: every rank times, rank 0 writes OUT)
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def worker(model, layout, n, reps, out):
    import numpy as np
    import torch.distributed as dist

    dist.init_process_group("gloo")
    from mojolearn.models import ParallelCausalLM

    lm = ParallelCausalLM.load(model, layout=layout, numeric_profile="fp32_v1")
    ids = (np.arange(n, dtype=np.int64)[None, :] * 7919) % lm.config.vocab_size
    lm.forward(ids[:, :16])  # warm
    times = []
    b0 = lm.bytes_sent
    for _ in range(reps):
        dist.barrier()
        t = time.perf_counter()
        lm.forward(ids)
        times.append((time.perf_counter() - t) * 1e3)
    prefill_bytes = (lm.bytes_sent - b0) / reps / n
    st = lm.allocate_state(1, 48)
    lm.step(ids[:, :32], st)
    b1 = lm.bytes_sent
    t = time.perf_counter()
    for i in range(16):
        lm.step(ids[:, 32 + i:33 + i], st)
    decode_ms = (time.perf_counter() - t) * 1e3 / 16
    decode_bytes = (lm.bytes_sent - b1) / 16
    got = [None] * dist.get_world_size()
    dist.all_gather_object(got, {"rank": dist.get_rank(), "prefill_ms": times,
                                 "prefill_bytes_per_token": prefill_bytes,
                                 "decode_ms_per_token": decode_ms,
                                 "decode_bytes_per_token": decode_bytes})
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(got, f)
    dist.destroy_process_group()


def run(B, model_dir, threads, one_process_ms, n, reps):
    """Adds one row per layout to the bench B (torchrun of 2 ranks each); one_process_ms:
    the median prefill of the same n tokens in one process (CausalLM, fp32_v1)."""
    rows = []
    for layout in ("pipeline", "tensor"):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.json")
            env = dict(os.environ, MOJOLEARN_NUM_THREADS=str(max(1, threads // 2)),
                       OMP_NUM_THREADS="1",
                       PYTHONPATH=os.path.join(ROOT, "python"))
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                "--nproc-per-node=2", os.path.abspath(__file__), model_dir, layout,
                                str(n), str(reps), out], capture_output=True, text=True, env=env,
                               cwd=tmp)
            if r.returncode or not os.path.exists(out):
                print(f"  parallel {layout}: failed: {(r.stdout + r.stderr)[-400:]}")
                continue
            ranks = json.load(open(out))
        med = statistics.median(ranks[0]["prefill_ms"])
        row = {"case": f"parallel;smollm2-135m;prefill;{n};{layout}",
               "op": "ParallelCausalLM.forward (2 ranks) vs CausalLM.forward (1 process)",
               "profile": "fp32_v1", "shape": [1, n], "ranks": 2,
               "threads_per_rank": max(1, threads // 2),
               # "mojolearn": the 2-rank run, its peer the same prefill in one process
               "median_ms": {"mojolearn": med, "one_process": one_process_ms},
               "reps_ms": {"mojolearn": [round(x, 3) for x in ranks[0]["prefill_ms"]]},
               "peer": "one_process", "ratio": one_process_ms / med,
               "prefill_bytes_per_token": [round(x["prefill_bytes_per_token"]) for x in ranks],
               "decode_ms_per_token": [round(x["decode_ms_per_token"], 3) for x in ranks],
               "decode_bytes_per_token": [round(x["decode_bytes_per_token"]) for x in ranks],
               "wall_s": round(time.perf_counter() - t0, 1)}
        B.rows.append(row)
        rows.append(row)
        print(f"  parallel {layout:8s}: prefill {med:8.1f} ms on 2 ranks vs {one_process_ms:8.1f} "
              f"ms in one process ({row['ratio']:.2f}x); bytes sent per token, prefill "
              f"{row['prefill_bytes_per_token']}, decode {row['decode_bytes_per_token']}")
    return rows


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
