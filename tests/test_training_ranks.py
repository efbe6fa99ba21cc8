"""Data-parallel training (rule T-61 of contracts/ops/IDENTICAL_TRAIN_CONTRACT.md): N
torchrun ranks, each on its rows, end every step with one process's losses, weights and
optimizer state; files move between N ranks and one process; a rank that dies is named."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_parallel import run_torchrun  # noqa: E402
from test_training_model import write_model  # noqa: E402

import mamba_oracle as SO  # noqa: E402

pytest.importorskip("torch")


def torchrun(nproc, spec, tmp_path, timeout=900):
    """tests/train_worker.py on nproc ranks: (the torchrun result, the ranks' lines)."""
    return run_torchrun(nproc, spec, tmp_path, "train_worker.py", timeout)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("ranks")
    return {"llama": write_model(d / "llama", "llama", seed=21),
            "qwen2": write_model(d / "qwen2", "qwen2", seed=22),
            "phi3": write_model(d / "phi3", "phi3", seed=23),
            "qwen3": write_model(d / "qwen3", "qwen3", seed=24),
            "mamba": _ssm(d / "mamba", MAMBA1, 25), "mamba2": _ssm(d / "mamba2", MAMBA2, 26)}


# Mamba-1 with an untied head, two layers, di = 96; Mamba-2 with a tied head, 3 heads and
# S-19's dt clamp (the T-76 path)
MAMBA1 = dict(model_type="mamba", vocab_size=67, hidden_size=48, num_hidden_layers=2,
              state_size=16, expand=2, conv_kernel=4, tie_word_embeddings=False)
MAMBA2 = dict(model_type="mamba2", vocab_size=53, hidden_size=96, num_hidden_layers=1,
              state_size=128, expand=2, conv_kernel=4, n_groups=1, head_dim=64, num_heads=3,
              chunk_size=256, tie_word_embeddings=True, time_step_limit=[0.01, 0.08])


def _ssm(path, cfg, seed):
    SO.write_checkpoint(str(path), cfg, SO.random_weights(cfg, seed=seed))
    return str(path)


@pytest.mark.parametrize("arch, rows", [("llama", [2, 2]), ("qwen2", [2, 2, 2]),
                                        ("llama", [2, 4, 2, 2]), ("phi3", [2, 2]),
                                        ("qwen3", [2, 2]), ("mamba", [2, 2]),
                                        ("mamba2", [2, 2, 2])])
def test_T61_ranks_equal_one_process(models, tmp_path, arch, rows):
    """T-61, T-62: 2, 3 and 4 ranks (llama with GQA and an untied head; qwen2 with biases
    and a tied head; phi3's stacked weights and partial rotary; qwen3's per-head q / k
    norms, their weight gradients folded in parts over the tokens; uneven rows; Mamba-1
    (T-74) with an untied head and Mamba-2 (T-86) with a tied head and the dt clamp, every
    mixer sum over the tokens folded in parts), 6 AdamW steps with a warmup-cosine
    schedule and clipping:
    every rank's losses, weights and optimizer state equal one process's on the whole
    batch after every step; a file saved by the ranks resumes in one process and one
    saved by one process resumes on the ranks, the next steps equal; save_model on the
    ranks (rank 0 writes) loads with the trainer's logits."""
    spec = {"mode": "bits", "path": models[arch], "rows": rows, "length": 64, "steps": 6}
    r, lines = torchrun(len(rows), spec, tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:] + "\n".join(lines)
    got = [json.loads(x[len("RESULT "):]) for x in lines if x.startswith("RESULT ")]
    assert len(got) == len(rows)
    assert all(g["losses"] == got[0]["losses"] for g in got)


@pytest.mark.parametrize("arch", ["llama", "mamba"])
def test_T61_sabotage_an_all_reduce_sum_is_seen(models, tmp_path, arch):
    """T-61: the check above can fail: joining the ranks' whole products by a running sum
    (an all-reduce sum) instead of folding the parts by the tree gives other weights
    with uneven ranks (1 leaf and 2 leaves), for a transformer and for Mamba-1."""
    spec = {"mode": "sabotage", "path": models[arch], "rows": [2, 4], "length": 64,
            "steps": 2}
    r, lines = torchrun(2, spec, tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:] + "\n".join(lines)
    got = [int(x.split()[1]) for x in lines if x.startswith("SABOTAGE")]
    assert len(got) == 2 and min(got) > 0, lines


def test_T61_a_dead_rank_is_named(models, tmp_path):
    """T-61: a rank that exits before its step ends the other with a RuntimeError naming
    the operation and the timeout, within the timeout (20 s) plus slack."""
    spec = {"mode": "die", "path": models["llama"], "rows": [2, 2], "length": 64, "steps": 1,
            "timeout": 20}
    r, lines = torchrun(2, spec, tmp_path, timeout=300)
    raised = [x for x in lines if x.startswith("RAISED")]
    assert len(raised) == 1, (lines, r.stderr[-3000:])
    parts = raised[0].split(" ", 3)
    assert parts[1] == "RuntimeError" and "mojolearn: Trainer rank 0" in parts[3], raised
    assert float(parts[2]) < 120, raised


def test_T61_misaligned_ranks_are_refused(models, tmp_path):
    """T-61: ranks whose token ranges do not start on leaf boundaries (rows of 1 x 64
    tokens: rank 1 starts at 64 of 256, leaf 128) are refused by name on every rank."""
    spec = {"mode": "bits", "path": models["llama"], "rows": [1, 3], "length": 64, "steps": 1}
    r, lines = torchrun(2, spec, tmp_path)
    errs = [x for x in lines if x.startswith("ERROR")]
    assert len(errs) == 2 and all("not on a multiple of the fp32.v1 leaf 128" in e
                                  for e in errs), lines
