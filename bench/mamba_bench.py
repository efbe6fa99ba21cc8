"""The Mamba rows of make bench: a Mamba-130m-shaped model (d_model 768, 24 layers,
vocab 50280, random weights from transformers' own initialization) and its Mamba-2
sibling (heads of 64), CausalLM against transformers' torch path on the same box:
prefill of 512 tokens and greedy decode (tokens after a 32-token prompt); and one AdamW
training step of a 2-layer model of the same width (256 tokens) against transformers'
torch path + torch.optim.AdamW (their sequential scan takes seconds a layer, so the
row keeps two layers and 5 reps)."""
from __future__ import annotations

import os
import tempfile

import numpy as np


def _model(transformers, torch, family, quick, layers=None):
    d, n_layers = (256, 2) if quick else (768, 24)
    layers = layers or n_layers
    torch.manual_seed(0)
    if family == "mamba1":
        cfg = transformers.MambaConfig(vocab_size=50280, hidden_size=d, state_size=16,
                                       num_hidden_layers=layers)
        model = transformers.MambaForCausalLM(cfg)
    else:
        cfg = transformers.Mamba2Config(vocab_size=50280, hidden_size=d, state_size=128,
                                        num_hidden_layers=layers, n_groups=1, head_dim=64,
                                        num_heads=2 * d // 64, chunk_size=256)
        model = transformers.Mamba2ForCausalLM(cfg)
    return model.eval(), d, layers


def run_mamba(B, threads, quick, torch):
    """Adds the Mamba prefill and decode rows to the bench B (skipped without torch)."""
    if torch is None or os.environ.get("MOJOLEARN_BENCH_NO_MODELS"):
        print("Mamba rows skipped (they time against transformers, which needs torch)")
        return
    import transformers

    from mojolearn.models import CausalLM

    n = 64 if quick else 512
    new = 4 if quick else 16
    for family in ("mamba1", "mamba2"):
        hf, d, layers = _model(transformers, torch, family, quick)
        with tempfile.TemporaryDirectory() as tmp:
            hf.save_pretrained(tmp)
            lm = CausalLM.load(tmp)
        ids = (np.arange(n, dtype=np.int64)[None, :] * 7919) % 50280
        tids = torch.from_numpy(ids)

        def torch_fwd():
            with torch.no_grad():
                return hf(tids).logits

        name = f"{family}-130m-shape" if not quick else f"{family}-d{d}"
        print(f"{name} ({layers} layers, d_model {d}) CausalLM.forward, prefill {n} tokens "
              f"({threads} threads) vs transformers' torch path")
        row = B.case(f"causallm;{name};prefill;{n}", "CausalLM.forward", "fp32_v1", (1, n),
                     {"mojolearn": lambda: lm.forward(ids), "torch": torch_fwd}, peer="torch",
                     settle=("torch",))
        if row:
            ours = lm.forward(ids)
            ref = torch_fwd().float().numpy()
            row["rel_err_vs_torch"] = float(np.abs(ours - ref).max() / np.abs(ref).max())
        p = ids[:, :32]
        tp = torch.from_numpy(p)

        def torch_gen():
            with torch.no_grad():
                return hf.generate(tp, max_new_tokens=new, min_new_tokens=new, do_sample=False)

        print(f"{name} greedy decode, {new} tokens after a 32-token prompt")
        drow = B.case(f"causallm;{name};decode;{new}", "CausalLM.generate", "fp32_v1", (1, new),
                      {"mojolearn": lambda: lm.generate(p, new), "torch": torch_gen},
                      peer="torch", settle=("torch",))
        if drow:
            drow["tokens_per_s"] = {k: new / (v / 1e3) for k, v in drow["median_ms"].items()}
        del hf, lm
        if family in TRAINED:
            run_mamba_training(B, threads, quick, torch, transformers, family)


TRAINED = ("mamba1", "mamba2")  # the families training.Trainer computes


def run_mamba_training(B, threads, quick, torch, transformers, family):
    """One training step (forward, backward, clip to 1.0, AdamW) of a 2-layer model:
    training.Trainer against transformers + torch.optim.AdamW, the same weights."""
    from mojolearn import training

    hf, d, layers = _model(transformers, torch, family, quick, layers=2)
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        tr = training.Trainer(tmp, max_norm=1.0)
    n = 32 if quick else 256
    ids = (np.arange(n, dtype=np.int64)[None, :] * 7919) % 50280
    tids = torch.from_numpy(ids)
    hf.train()
    topt = torch.optim.AdamW(hf.parameters(), lr=1e-3, weight_decay=0.01)

    def torch_step():
        topt.zero_grad()
        loss = hf(input_ids=tids, labels=tids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
        topt.step()
        return loss

    l0 = float(tr.loss(ids))
    with torch.no_grad():
        t0 = float(hf(input_ids=tids, labels=tids).loss)
    print(f"{family} ({layers} layers, d_model {d}) one AdamW training step, 1 x {n} tokens "
          f"({threads} threads) vs transformers' torch path + torch.optim.AdamW")
    B.case(f"training;{family}-d{d}-{layers}l;adamw-step;{n}", "Trainer.step", "fp32_v1",
           (1, n), {"mojolearn": lambda: tr.step(ids), "torch": torch_step}, peer="torch",
           settle=("torch",), reps=5, extra={"loss_rel_diff_vs_torch": abs(l0 - t0) / abs(t0)})
    del hf, tr
