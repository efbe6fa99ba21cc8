"""Models loaded from a checkpoint stored low-bit (mojolearn.checkpoint of
lowbit.pack(weights, fmt): every matrix, the embedding and the head included, as bf16
bits or int8 codes): the table and the head are held in those bytes (rule M-26: they
are the checkpoint's float32, which the stored bytes materialize), and every logit is
that of the float32 model built from the materialized weights (lowbit.unpack)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from bits import assert_same_bits
from mojolearn import checkpoint, lowbit
from mojolearn.models import CausalLM, ModelConfig
from test_models import TINY, tiny_weights, ids_for


def write_stored(path, cfg, w, fmt):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    packed = lowbit.pack(w, fmt)
    checkpoint.save(os.path.join(path, "model.safetensors"), packed)
    return str(path), packed


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def stored(request, tmp_path_factory):
    cfg = dict(TINY, tie_word_embeddings=request.param)
    w = tiny_weights(cfg, seed=11)
    out = {}
    for fmt in ("int8", "bfloat16"):
        path, packed = write_stored(tmp_path_factory.mktemp(f"stored-{fmt}"), cfg, w, fmt)
        out[fmt] = (path, packed)
    return cfg, out


@pytest.mark.parametrize("profile", ["fp32_v1", "fixed15_v1"])
@pytest.mark.parametrize("stored_fmt", ["int8", "bfloat16"])
@pytest.mark.parametrize("weight_format", ["float32", "int8", "bfloat16"])
def test_logits_equal_the_materialized_model(stored, profile, stored_fmt, weight_format):
    """M-26 with L-1 / L-6: a model loaded from a checkpoint stored bf16 / int8 gives the
    logits (prefill, then steps) of CausalLM built from lowbit.unpack of the same
    checkpoint, both profiles, every weight_format, tied and untied heads."""
    cfg, files = stored
    path, packed = files[stored_fmt]
    f32, fmt = lowbit.unpack(packed)
    assert fmt == stored_fmt
    ref = CausalLM(ModelConfig.from_dict(cfg), {k: np.asarray(v) for k, v in f32.items()},
                   numeric_profile=profile, weight_format=weight_format)
    lm = CausalLM.load(path, numeric_profile=profile, weight_format=weight_format)
    ids = ids_for(cfg, 2, 6)
    assert_same_bits(lm.forward(ids), ref.forward(ids))
    st, rs = lm.allocate_state(2, 9), ref.allocate_state(2, 9)
    assert_same_bits(lm.forward(ids[:, :4], st), ref.forward(ids[:, :4], rs))
    for t in range(3):
        assert_same_bits(lm.step(ids[:, 4 + t:5 + t] if t < 2 else ids[:, :1], st),
                         ref.step(ids[:, 4 + t:5 + t] if t < 2 else ids[:, :1], rs))


@pytest.mark.parametrize("profile", ["fp32_v1", "fixed15_v1"])
@pytest.mark.parametrize("stored_fmt", ["int8", "bfloat16"])
def test_the_table_and_head_are_held_in_their_stored_bytes(stored, profile, stored_fmt):
    """M-26: the embedding (and a head) stored low-bit are held low-bit: no float32 copy
    of the table; a tied fp32_v1 head and the gather read one copy; the float32 bytes
    held are the norms' alone."""
    cfg, files = stored
    path, _ = files[stored_fmt]
    lm = CausalLM.load(path, numeric_profile=profile, weight_format=stored_fmt)
    held = lm.held()
    d, vocab = cfg["hidden_size"], cfg["vocab_size"]
    norms = 4 * d * (2 * cfg["num_hidden_layers"] + 1)
    assert held["float32"] == norms, held
    table = lm.embed if lm.embed is not None else lm.head.w
    assert table.format == stored_fmt
    per = {"int8": 1, "bfloat16": 2}[stored_fmt]
    # the table's panels: about `per` bytes a weight (panels pad the vocabulary to NR)
    assert table.nbytes < (per + 1) * vocab * d + 8 * 1024 * 64
    if cfg["tie_word_embeddings"] and profile == "fp32_v1":
        assert lm.embed is None  # one copy
    assert sum(held.values()) < 0.75 * sum(np.asarray(v).nbytes for v in
                                            lowbit.unpack(files[stored_fmt][1])[0].values())


def test_refused_int8_files(tmp_path):
    """L-6 storage: an I8 tensor without its exponents, or exponents without their I8
    tensor, are refused by name when the model is read."""
    from safetensors.numpy import save_file

    cfg = dict(TINY)
    w = tiny_weights(cfg, seed=2)
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    bad = dict(w)
    bad["model.embed_tokens.weight"] = np.zeros((cfg["vocab_size"], cfg["hidden_size"]), np.int8)
    save_file(bad, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match="needs its row exponents"):
        CausalLM.load(str(d))
    bad = dict(w)
    bad["extra.int8_exponents"] = np.zeros((3,), np.int32)
    save_file(bad, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match="no I8 tensor"):
        CausalLM.load(str(d))
    bad = dict(w)
    bad["odd"] = np.zeros((3,), np.int32)
    save_file(bad, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match="has dtype I32"):
        CausalLM.load(str(d))
