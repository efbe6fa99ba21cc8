"""One rank of a ParallelCausalLM check, run by torchrun from tests/test_parallel.py:

    torchrun --standalone --nproc-per-node N tests/parallel_worker.py SPEC.json

SPEC: {"mode": "bits" | "die" | "hang" | "mismatch" | "checkpoint" | "ids" | "weights" |
"arguments" | "generate", "cases": [...], "other_path": a checkpoint rank 1 loads in
"checkpoint" mode, "tmpdir": a folder every rank shares, ...}. Each rank writes its lines
to tmpdir/rank<r>.txt (the ranks' stdout would interleave).
"bits": for each case every rank loads ParallelCausalLM and CausalLM (in this process,
the reference) and compares, bit for bit: forward of a batch, prefill then steps with
a state, greedy and sampled generate, save_state -> CausalLM.resume and
CausalLM.save_state -> resume. Writes "RESULT <json>" per case; any difference raises.
The other modes make one rank fail on purpose and write what the others raised.
"weights", "arguments" and "generate" run several cases in one job, each case's
"RAISED case <i> rank <r> ..." line telling what that rank raised (or "nothing" and
a digest of what it returned):
"weights": case {"paths": [path of rank 0, path of rank 1]}: each rank loads its path
and runs forward.
"arguments": case {"kw": [load keywords of rank 0, of rank 1]}: each rank loads
cases[0]'s path with its keywords (and the spec's timeout).
"generate": case {"args": [[ids, max_new_tokens, {keywords}] of rank 0, of rank 1]}:
one model loaded, each rank calls generate with its arguments.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time

import numpy as np


def _same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
        diff = int(np.sum(a.view(np.uint32) != b.view(np.uint32))) if a.shape == b.shape else -1
        raise AssertionError(f"{what}: parallel differs from CausalLM ({diff} values, shapes "
                             f"{a.shape} / {b.shape})")


def bits(case, tmpdir, rank):
    from mojolearn.models import CausalLM, ParallelCausalLM

    kw = dict(numeric_profile=case["profile"], weight_format=case["format"])
    t0 = time.perf_counter()
    lm = ParallelCausalLM.load(case["path"], layout=case["layout"],
                               tensor_size=case.get("tensor_size"), **kw)
    load_s = time.perf_counter() - t0
    ref = CausalLM.load(case["path"], **kw)
    vocab = ref.config.vocab_size
    rng = np.random.default_rng(case.get("seed", 1))
    ids = rng.integers(0, vocab, (3, 9))
    _same(lm.forward(ids), ref.forward(ids), "forward, batch 3")
    _same(lm.forward(ids[1]), ref.forward(ids[1]), "forward, one sequence")
    st, rs = lm.allocate_state(3, 14), ref.allocate_state(3, 14)
    _same(lm.forward(ids[:, :6], st), ref.forward(ids[:, :6], rs), "prefill")
    for t in range(3):
        _same(lm.step(ids[:, 6 + t:7 + t], st), ref.step(ids[:, 6 + t:7 + t], rs), f"step {t}")
    # a state saved by the parallel model resumes in one process, and the other way round
    p1 = os.path.join(tmpdir, "parallel.safetensors")
    p2 = os.path.join(tmpdir, "single.safetensors")
    lm.save_state(p1, st)
    r1 = ref.resume(p1)
    if rank == 0:
        ref.save_state(p2, rs)
    lm.comm.barrier("the test's file")
    s2 = lm.resume(p2)
    nxt = ids[:, :2]
    want = ref.step(nxt, rs)
    _same(ref.step(nxt, r1), want, "CausalLM.resume of a parallel state")
    _same(lm.step(nxt, s2), want, "resume of a CausalLM state")
    _same(lm.step(nxt, st), want, "the parallel state, continued")
    _same(lm.generate(ids[:1, :4], 5), ref.generate(ids[:1, :4], 5), "greedy generate")
    _same(lm.generate(ids[:2, :3], 4, greedy=False, seed=7),
          ref.generate(ids[:2, :3], 4, greedy=False, seed=7), "sampled generate")
    return {"case": case, "rank": rank, "load_s": round(load_s, 3), "bytes_sent": lm.bytes_sent,
            "held": lm.held()}


def several(spec, rank, say):
    """The modes of several cases in one job (see the module docstring)."""
    import hashlib

    from mojolearn.models import ParallelCausalLM

    mode, timeout = spec["mode"], spec["timeout"]
    base = spec["cases"][0] if spec.get("cases") else None
    lm = None
    if mode == "generate":
        lm = ParallelCausalLM.load(base["path"], layout=base["layout"], timeout=timeout)
    for i, case in enumerate(spec["runs"]):
        t0 = time.perf_counter()
        try:
            if mode == "weights":
                m = ParallelCausalLM.load(case["paths"][rank], timeout=timeout)
                got = m.forward([[1, 2, 3]])
            elif mode == "arguments":
                kw = dict(case["kw"][rank], timeout=timeout)
                m = ParallelCausalLM.load(kw.pop("path", base["path"]), **kw)
                got = m.forward([[1, 2, 3]])
            else:
                ids, n, kw = case["args"][rank]
                got = lm.generate(ids, n, **kw)
            digest = hashlib.sha256(np.ascontiguousarray(got).tobytes()).hexdigest()[:16]
            say(f"RAISED case {i} rank {rank} nothing after {time.perf_counter() - t0:.1f}s: "
                f"{digest}")
        except Exception as e:  # noqa: BLE001 - what each rank raised is the test's output
            say(f"RAISED case {i} rank {rank} {type(e).__name__} after "
                f"{time.perf_counter() - t0:.1f}s: {e}")


def main():
    spec = json.loads(open(sys.argv[1]).read())
    out = None

    def say(line):
        out.write(line + "\n")
        out.flush()

    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=spec.get("timeout", 120)))
    rank = dist.get_rank()
    out = open(os.path.join(spec["tmpdir"], f"rank{rank}.txt"), "w")
    from mojolearn.models import ParallelCausalLM

    mode = spec["mode"]
    if mode == "bits":
        for i, case in enumerate(spec["cases"]):
            d = os.path.join(spec["tmpdir"], f"case{i}")
            os.makedirs(d, exist_ok=True)
            say("RESULT " + json.dumps(bits(case, d, rank)))
        dist.barrier()
        dist.destroy_process_group()
        return
    if mode in ("weights", "arguments", "generate"):
        several(spec, rank, say)
        os._exit(0)
    case = spec["cases"][0]
    kw = dict(layout=case["layout"], numeric_profile=case["profile"], timeout=spec["timeout"])
    if mode == "mismatch" and rank == 1:
        kw["numeric_profile"] = "fixed15_v1" if case["profile"] == "fp32_v1" else "fp32_v1"
    if mode == "checkpoint" and rank == 1:
        case = dict(case, path=spec["other_path"])
    t0 = time.perf_counter()
    try:
        lm = ParallelCausalLM.load(case["path"], **kw)
        ids = [[1, 2, 3]]
        if mode == "ids" and rank == 1:
            ids = [[1, 2, 4]]
        if rank == 1 and mode == "die":
            os._exit(0)  # gone without a word (an exit torchrun does not treat as a failure)
        if rank == 1 and mode == "hang":
            time.sleep(spec["timeout"] * 2 + 2)
            os._exit(0)
        t0 = time.perf_counter()
        lm.forward(ids)
        say(f"RAISED rank {rank} nothing")
    except Exception as e:  # noqa: BLE001 - what each rank raised is the test's output
        say(f"RAISED rank {rank} {type(e).__name__} after {time.perf_counter() - t0:.1f}s: {e}")
    os._exit(0)


if __name__ == "__main__":
    main()
