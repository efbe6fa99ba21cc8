"""One rank of a data-parallel Trainer check, run by torchrun from
tests/test_training_ranks.py:

    torchrun --standalone --nproc-per-node N tests/train_worker.py SPEC.json

SPEC: {"mode": "bits" | "sabotage" | "die", "path": a model folder, "rows": rows of each
rank, "length": L, "steps": n, "tmpdir": a folder every rank shares}. Each rank writes
its lines to tmpdir/rank<r>.txt.
"bits": every rank trains on its rows with group=, and in the same process a
single-process Trainer steps on the whole batch (the reference); losses, weights and
optimizer state are compared bit for bit after every step; then a file saved by the N
ranks is resumed by one process and a file saved by one process by the N ranks, and the
next two steps compared. Writes "RESULT <json>"; any difference raises.
"sabotage": the same run with the parts joined by a sum of each rank's whole product in
rank order (what an all-reduce sum computes): writes "SABOTAGE <n differing tensors>".
"die": rank 1 exits before its first step; the others write what they raised.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time

import numpy as np


def data(spec, V, step):
    rng = np.random.default_rng(1000 + step)
    return rng.integers(0, V, size=(sum(spec["rows"]), spec["length"]), dtype=np.int64)


def mine(spec, batch, rank):
    o = sum(spec["rows"][:rank])
    return batch[o:o + spec["rows"][rank]]


def same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.tobytes() != b.tobytes():
        raise AssertionError(f"{what}: ranks differ from one process")


def check(tr, ref, what):
    wa, wb = tr.weights(), ref.weights()
    for n in wa:
        same(wa[n], wb[n], f"{what}: weight {n}")
    sa, sb = tr.optimizer.state_dict(), ref.optimizer.state_dict()
    for k in ("exp_avg", "exp_avg_sq"):
        same(sa[k], sb[k], f"{what}: optimizer {k}")
    assert int(sa["t"]) == int(sb["t"]), what


def main():
    import torch.distributed as dist
    from mojolearn import training

    spec = json.load(open(sys.argv[1]))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    out = open(os.path.join(spec["tmpdir"], f"rank{rank}.txt"), "w")
    world = dist.group.WORLD
    kw = dict(max_norm=0.5, lr=2e-3,
              lr_schedule=training.WarmupCosineLR(2e-3, warmup_steps=2, total_steps=12,
                                                  min_lr=1e-4))
    try:
        if spec["mode"] == "die":
            tr = training.Trainer(spec["path"], group=world, timeout=spec.get("timeout", 20), **kw)
            V = tr.config.vocab_size
            if rank == 1:
                out.close()
                os._exit(0)  # gone without a word (an exit torchrun does not treat as a failure)
            t0 = time.perf_counter()
            try:
                tr.step(mine(spec, data(spec, V, 0), rank))
                out.write("RAISED nothing\n")
            except Exception as e:  # noqa: BLE001 - the test reads what was raised
                out.write(f"RAISED {type(e).__name__} {time.perf_counter() - t0:.1f} {e}\n")
            out.flush()
            os._exit(0)
        if spec["mode"] == "sabotage":
            from mojolearn._train import ranks as R

            def summed(parts):  # each rank's whole product, then a running sum over ranks
                acc = None
                for p in parts:
                    v = np.asarray(p.values)
                    loc = v[0].copy()
                    for x in v[1:]:
                        loc = (loc + x).astype(np.float32)
                    acc = loc if acc is None else (acc + loc).astype(np.float32)
                return acc

            R._ksplit = type("K", (), dict(vars(R._ksplit)))  # a copy of the module's names
            R._ksplit.fold_parts = staticmethod(summed)
        tr = training.Trainer(spec["path"], group=world, **kw)
        ref = training.Trainer(spec["path"], **kw)
        V = tr.config.vocab_size
        losses = []
        differ = 0
        for s in range(spec["steps"]):
            batch = data(spec, V, s)
            la = tr.step(mine(spec, batch, rank))
            lb = ref.step(batch)
            losses.append(float(la))
            if spec["mode"] == "sabotage":
                wa, wb = tr.weights(), ref.weights()
                differ = max(differ, sum(wa[n].tobytes() != wb[n].tobytes() for n in wa))
                continue
            same(np.float32(la), np.float32(lb), f"step {s}: loss")
            check(tr, ref, f"step {s}")
        if spec["mode"] == "sabotage":
            out.write(f"SABOTAGE {differ}\n")
            out.flush()
            dist.destroy_process_group()
            return
        # N ranks save, one process resumes (and the other way round)
        f_ranks = os.path.join(spec["tmpdir"], "ranks.safetensors")
        f_one = os.path.join(spec["tmpdir"], f"one{rank}.safetensors")
        tr.save(f_ranks)
        ref.save(f_one)
        tr.save_model(os.path.join(spec["tmpdir"], "folder"))  # rank 0 writes, all wait
        from mojolearn.models import CausalLM

        same(CausalLM.load(os.path.join(spec["tmpdir"], "folder")).forward(batch[:1, :8]),
             tr.model.forward(batch[:1, :8]), "save_model on the ranks")
        one = training.Trainer.resume(f_ranks)
        back = training.Trainer.resume(f_one, group=world)
        for s in range(spec["steps"], spec["steps"] + 2):
            batch = data(spec, V, s)
            lb = ref.step(batch)
            same(np.float32(one.step(batch)), np.float32(lb), f"resumed by one process {s}")
            same(np.float32(back.step(mine(spec, batch, rank))), np.float32(lb),
                 f"resumed by the ranks {s}")
            check(one, ref, f"resumed by one process {s}")
            check(back, ref, f"resumed by the ranks {s}")
        out.write("RESULT " + json.dumps({"rank": rank, "losses": losses}) + "\n")
        out.flush()
        dist.destroy_process_group()
    except BaseException as e:
        out.write(f"ERROR {type(e).__name__}: {e}\n")
        out.flush()
        raise


if __name__ == "__main__":
    main()
