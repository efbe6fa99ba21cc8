"""The training rows of make bench:
  - one AdamW step of SmolLM2-135M at batch 1 x 256 tokens (forward, backward, clip,
    AdamW): mojolearn.training.Trainer.step against transformers (float32) +
    loss.backward + torch.optim.AdamW, interleaved; the peak resident memory of each side
    measured in a process of its own (three steps after loading);
  - AdamW alone on 10M parameters (ten tensors of 1M): training.AdamW.step against
    torch.optim.AdamW (its default foreach path)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_PEAK = r"""
import json, sys, numpy as np
side, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ids = (np.arange(n, dtype=np.int64)[None, :] * 7919) % 49152
if side == "mojolearn":
    from mojolearn import training
    tr = training.Trainer(path, max_norm=1.0)
    for _ in range(3):
        tr.step(ids)
else:
    import torch, transformers
    m = transformers.LlamaForCausalLM.from_pretrained(path, dtype=torch.float32)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
    t = torch.from_numpy(ids)
    for _ in range(3):
        opt.zero_grad()
        loss = m(input_ids=t, labels=t).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
# VmHWM: this process's own peak (ru_maxrss keeps the parent's peak across fork + exec)
print(json.dumps([int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")][0] / 1024))
"""


def _peak_mb(side, path, n, threads):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"),
               MOJOLEARN_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, "-c", _PEAK, side, path, str(n)], capture_output=True,
                       text=True, timeout=1800, env=env)
    if r.returncode:
        print(f"  peak memory of {side}: the run failed ({r.stderr.strip()[-300:]})")
        return None
    return round(float(r.stdout.split()[-1]), 1)


def run_training(B, threads, quick, torch, model_dir):
    """Adds the training rows to the bench B (the SmolLM2 row needs torch and the model)."""
    from mojolearn import training

    rng = np.random.default_rng(0)
    # ---- AdamW alone
    sizes = [100_000] * 10 if quick else [1_000_000] * 10
    params = [rng.standard_normal(s).astype(np.float32) for s in sizes]
    grads = [(rng.standard_normal(s) * 1e-2).astype(np.float32) for s in sizes]
    opt = training.AdamW([p.copy() for p in params], lr=1e-3)
    cont = {"mojolearn": lambda: opt.step(grads)}
    if torch is not None:
        tp = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params]
        for p, g in zip(tp, grads):
            p.grad = torch.from_numpy(g)
        topt = torch.optim.AdamW(tp, lr=1e-3)
        cont["torch"] = topt.step
    total = sum(sizes)
    print(f"AdamW step on {total / 1e6:g}M parameters ({threads} threads) vs torch.optim.AdamW")
    B.case(f"training;adamw;{total}", "AdamW.step", "fp32_v1", (total,), cont,
           peer="torch" if torch is not None else None, settle=("torch",))
    # ---- one training step of SmolLM2-135M
    if model_dir is None or torch is None:
        print("SmolLM2 training row skipped (it times against transformers + torch)")
        return
    import transformers

    n = 32 if quick else 256
    ids = (np.arange(n, dtype=np.int64)[None, :] * 7919) % 49152
    tr = training.Trainer(model_dir, max_norm=1.0)
    hf = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    hf.train()
    topt = torch.optim.AdamW(hf.parameters(), lr=1e-3, weight_decay=0.01)
    tids = torch.from_numpy(ids)

    def torch_step():
        topt.zero_grad()
        loss = hf(input_ids=tids, labels=tids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
        topt.step()
        return loss

    print(f"SmolLM2-135M one AdamW training step, batch 1 x {n} tokens ({threads} threads) vs "
          f"transformers + torch.optim.AdamW")
    # the loss of the first step on both sides (same weights): the trainer's arithmetic
    # against torch's, as a check that the two time the same computation
    l0 = float(tr.loss(ids))
    with torch.no_grad():
        t0 = float(hf(input_ids=tids, labels=tids).loss)
    peak = None
    if not quick:
        peak = {s: _peak_mb(s, model_dir, n, threads) for s in ("mojolearn", "torch")}
    B.case(f"training;smollm2-135m;adamw-step;{n}", "Trainer.step", "fp32_v1", (1, n),
           {"mojolearn": lambda: tr.step(ids), "torch": torch_step}, peer="torch",
           settle=("torch",),
           extra={"loss_rel_diff_vs_torch": abs(l0 - t0) / abs(t0), "peak_rss_mb": peak})
    if not quick:
        # the cost of identity inside torch for training: the same transformers step with
        # mojolearn.torch.identical() on (products fp32.v1 forward and backward, the
        # fused attention with the training contract's backward) vs off
        import mojolearn.torch as mtorch

        def identical_step():
            with mtorch.identical():
                return torch_step()

        print(f"transformers SmolLM2-135M one AdamW step, batch 1 x {n}: "
              "mojolearn.torch.identical() on vs off")
        trow = B.case(f"torch-identical;smollm2-135m;adamw-step;{n}", "transformers training step",
                      "fp32.v1 inside torch", (1, n),
                      {"mojolearn": identical_step, "torch": torch_step}, peer="torch",
                      settle=("torch",))
        if trow:
            trow["note"] = ("ratio = off / on (< 1: the mode is slower); forward, backward, "
                            "clip and torch.optim.AdamW, the step taken on one model by both")
    import train_ranks_bench

    train_ranks_bench.run(B, model_dir, quick)
    if peak and all(peak.values()):
        print(f"  peak resident memory: mojolearn {peak['mojolearn']:.0f} MB, torch "
              f"{peak['torch']:.0f} MB ({peak['mojolearn'] / peak['torch']:.2f}x)")
