"""The fuzz suite, short and deterministic (issue 11): every public entry of
linalg, lowbit, checkpoint and profiles (plus thread counts and environment
values), with random shapes, strides, dtypes, broadcast views, out= faults,
quantized tuples with wrong parts, truncated/corrupt/huge-headered files and
hostile paths. Every answer must be the oracle's bits (tests/oracle.py) or a
built-in exception whose message starts with "mojolearn" and names the argument.
And (issue 33) every public entry of mojolearn.models on tiny models the table
writes: hostile ids, states, checkpoints and generation arguments; after each
refusal the model and its state must still give a fresh model's bits.
And every public entry of mojolearn.training (primitives, optimizers, schedules,
Trainer): the training oracle's bits (tests/training_oracle.py) on small shapes, and
after a refusal the arrays, optimizer or trainer handed in are unchanged.

The table of entries is tests/fuzz_cases.py (ENTRIES: (name, generator) pairs). The cases run in a few child processes
(tests/fuzz_run.py), so a crash or a hang fails this test naming the case and
its replay command instead of killing the run. The long run is `make fuzz`
(FUZZ_EXAMPLES cases per entry, default 400; it prints the count per entry).
"""
from __future__ import annotations

import os

import pytest

from tests import fuzz_run
from tests.fuzz_cases import ENTRIES

SHORT_EXAMPLES = 15  # per entry: 39 entries -> 585 cases


def test_fuzz_short_run():
    results, crashes = fuzz_run.run(examples=SHORT_EXAMPLES, seed=11, batches=3, timeout=300)
    print(fuzz_run.report(results))
    bad = fuzz_run.failures(results, crashes)
    assert not bad, "\n\n".join(bad[:20])
    assert set(results) == {name for name, _ in ENTRIES}
    for name, stats in results.items():
        assert stats["cases"] >= SHORT_EXAMPLES // 2, (name, stats)


def test_every_public_entry_is_in_the_table():
    """linalg's, lowbit's, checkpoint's and profiles' public functions all have a
    generator (by name, or through a shared generator named in COVERED)."""
    import mojolearn
    from mojolearn import checkpoint, linalg, lowbit, profiles

    names = {n for n, _ in ENTRIES}
    covered = {
        "lowbit.materialize": "lowbit.unpack", "lowbit.is_packed": "lowbit.format_of",
        "lowbit.BF16Weight": "lowbit.BF16Weight/Int8Weight",
        "lowbit.Int8Weight": "lowbit.BF16Weight/Int8Weight",
        "linalg.PreparedWeight": "linalg.prepare",
        **{f"linalg.{f}": "linalg.k-split" for f in (
            "matmul_part", "matmul_int8_part", "matmul_int15_part", "fold_parts",
            "PartialProduct", "k_split", "leaf_size")},
    }
    for mod, prefix in ((linalg, "linalg"), (lowbit, "lowbit"), (checkpoint, "checkpoint")):
        for fn in mod.__all__:
            obj = getattr(mod, fn)
            if not callable(obj) or fn in ("backend", "Checkpoint", "release_workspace"):
                continue
            key = f"{prefix}.{fn}"
            assert key in names or covered.get(key) in names, f"{key} has no fuzz generator"
    assert "profiles" in names and "set_num_threads" in names and "env" in names
    assert callable(mojolearn.set_num_threads) and profiles.resolve


def test_every_public_model_entry_is_in_the_table():
    """Every public name of mojolearn.models, and every public method of the model
    classes, has a generator in the table (by the entry that calls it)."""
    import inspect

    from mojolearn import models

    names = {n for n, _ in ENTRIES}
    covered = {
        "CausalLM.load": "models.load", "CausalLM.forward": "models.forward",
        "CausalLM.__call__": "models.forward", "CausalLM.step": "models.step",
        "CausalLM.allocate_state": "models.state", "CausalLM.save_state": "models.state",
        "CausalLM.resume": "models.state", "CausalLM.generate": "models.generate",
        "CausalLM.generate_text": "models.generate_text",
        "CausalLM.nbytes": None,  # no argument
        "CausalLM.held": None,  # no argument
        "CausalLM.kept_bytes": None, "CausalLM.release_buffers": None,  # no argument
        "CausalLM": "models.CausalLM/ModelConfig", "ModelConfig": "models.CausalLM/ModelConfig",
        "ModelConfig.from_dict": "models.CausalLM/ModelConfig",
        "ModelConfig.from_file": "models.CausalLM/ModelConfig",
        "ModelConfig.fingerprint": None,  # no argument
        "GenerationState": "models.step",  # made by allocate_state; fields changed there
        "TransformerBlock": "models.TransformerBlock",
        "TransformerBlock.forward": "models.TransformerBlock",
        "TransformerBlock.__call__": "models.TransformerBlock",
        "Tokenizer": "models.Tokenizer", "Tokenizer.load": "models.Tokenizer",
        "Tokenizer.encode": "models.Tokenizer", "Tokenizer.decode": "models.Tokenizer",
        "Tokenizer.check_model": "models.Tokenizer",
        **{f"ParallelCausalLM{m}": "models.ParallelCausalLM" for m in (
            "", ".load", ".forward", ".__call__", ".step", ".allocate_state", ".save_state",
            ".resume", ".generate", ".generate_text")},
        "ParallelCausalLM.held": None, "ParallelCausalLM.close": None,  # no argument
        "ParallelGenerationState": "models.ParallelCausalLM",
        "Mamba1Block": "models.mamba", "Mamba2Block": "models.mamba",
        "MambaState": "models.mamba", "MambaState.arrays": "models.mamba",
        # made only by a model on a GPU (forward(..., output="device")): no GPU here to
        # make one; tests/test_gpu_model.py checks it through the reference backend
        "DeviceTensor": None, "DeviceTensor.numpy": None,
    }
    for name in models.__all__:
        obj = getattr(models, name)
        if not inspect.isclass(obj):
            continue  # SUPPORTED, WEIGHT_FORMATS: tuples
        entries = [name] + [f"{name}.{m}" for m in vars(obj) if not m.startswith("_")
                            and callable(getattr(obj, m))]
        if "__call__" in vars(obj):
            entries.append(f"{name}.__call__")
        for e in entries:
            assert e in covered, f"{e} is public and has no fuzz generator"
            assert covered[e] is None or covered[e] in names, (e, covered[e])


def test_every_public_training_entry_is_in_the_table():
    """Every public name of mojolearn.training, and every public method of its classes,
    has a generator in the table (by the entry that calls it)."""
    import inspect

    from mojolearn import training

    names = {n for n, _ in ENTRIES}
    prim = "training.primitives"
    opt = "training.optimizers"
    covered = {
        **{f: prim for f in (
            "linear_forward", "linear_backward", "rms_norm_forward", "rms_norm_backward",
            "embedding_forward", "embedding_backward", "cross_entropy", "clip_grad_norm_",
            "accumulate_grads", "aligned_split", "splits_that_work", "bias_backward",
            "chunked_lm_head_loss")},
        **{f"{c}{m}": opt for c in ("ConstantLR", "WarmupLinearLR", "WarmupCosineLR")
           for m in ("", ".lr_at", ".to_dict", ".from_dict")},
        "schedule_from_dict": opt,
        **{f"{c}{m}": opt for c in ("SGD", "Adam", "AdamW")
           for m in ("", ".step", ".step_accumulated", ".state_dict", ".load_state_dict")},
        **{f"Trainer{m}": "training.Trainer" for m in (
            "", ".step", ".gradients", ".loss", ".weights", ".save", ".resume",
            ".save_model")},
    }
    for name in training.__all__:
        obj = getattr(training, name)
        entries = [name]
        if inspect.isclass(obj):
            entries += [f"{name}.{m}" for c in obj.__mro__ if c is not object
                        for m in vars(c) if not m.startswith("_")
                        and callable(getattr(obj, m, None))]
            if "__call__" in vars(obj):
                entries.append(f"{name}.__call__")
        for e in entries:
            assert e in covered, f"{e} is public and has no fuzz generator"
            assert covered[e] is None or covered[e] in names, (e, covered[e])


def test_runner_names_a_crashing_case_and_goes_on(monkeypatch):
    """A case that kills its interpreter (here SIGSEGV) fails the run
    naming the entry and seed; the batch's later entries still run; a bare
    Exception is reported as one."""
    monkeypatch.setenv("MOJOLEARN_FUZZ_SELFTEST", "1")
    results, crashes = fuzz_run.run(examples=3, seed=1, batches=1, timeout=120)
    assert len(crashes) == 1 and "entry='selftest.crash'" in crashes[0], crashes
    assert "--replay 'selftest.crash'" in crashes[0]
    assert results["selftest.fine"]["cases"] == 3
    assert results["selftest.after_crash"]["cases"] == 3
    wrong = results["selftest.wrong"]["failures"]
    assert len(wrong) == 3 and all("builtins.Exception" in f["why"] for f in wrong), wrong


@pytest.mark.parametrize("entry", [n for n, _ in ENTRIES])
def test_cases_are_reproducible(entry, tmp_path):
    """A case is rebuilt from (entry, seed) alone: the replay path gives the same label."""
    import numpy as np

    gen = dict(ENTRIES)[entry]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = gen(np.random.default_rng(123), str(tmp_path / "a"))
    b = gen(np.random.default_rng(123), str(tmp_path / "b"))
    assert a.label.replace(str(tmp_path / "a"), "") == b.label.replace(str(tmp_path / "b"), "")
