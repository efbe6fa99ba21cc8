"""Low-bit weights stay low-bit in the models (M-26 storage, M-22 for fixed15_v1): a
model loaded with bfloat16 or int8 weights holds the projections in that format for
its whole life (fp32_v1: bf16 / int8 panels that the kernels widen as they read them;
fixed15_v1: the int15 codes once, 2 bytes a weight), a tied fp32_v1 head and the
embedding are one float32 copy, and every logit is still the oracle's (the float32
path on the materialized weights): prefill, steps (the decode rows, one to three
sequences, and the few-rows nest, five), both profiles, tied and untied heads."""
import numpy as np
import pytest

import model_oracle as MO
from bits import assert_same_bits
from mojolearn.models import CausalLM
from mojolearn._core.loader import blocking
from test_models import TINY, tiny_weights, write_model, ids_for

NR = blocking()["NR"]


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def model(request, tmp_path_factory):
    cfg = dict(TINY, tie_word_embeddings=request.param)
    w = tiny_weights(cfg, seed=11)
    return write_model(tmp_path_factory.mktemp("lowbit"), cfg, w), cfg, w


def proj_weights(cfg):
    """(rows, k) of every projection matrix a layer holds (q/k/v stacked, gate/up)."""
    d, ff = cfg["hidden_size"], cfg["intermediate_size"]
    hd = d // cfg["num_attention_heads"]
    nq, nk = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    return [(nq + 2 * nk, d), (d, nq), (2 * ff, d), (d, ff)]


def pad(n):
    return (n + NR - 1) // NR * NR


@pytest.mark.parametrize("profile", ["fp32_v1", "fixed15_v1"])
@pytest.mark.parametrize("fmt", ["bfloat16", "int8"])
def test_logits_prefill_and_steps_equal_the_oracle(model, profile, fmt):
    """M-18 M-22 M-26: prefill, then steps of 1, 3 and 5 sequences, against the oracle on
    the materialized weights, bit for bit."""
    path, cfg, w = model
    lm = CausalLM.load(path, numeric_profile=profile, weight_format=fmt)
    for B in (1, 3, 5):
        ids = ids_for(cfg, B, 8, seed=20 + B)
        want = MO.forward(w, cfg, ids, profile, fmt)
        assert_same_bits(lm.forward(ids), want, f"prefill B={B}")
        st = lm.allocate_state(B, 8)
        lm.forward(ids[:, :5], st)
        for t in range(5, 8):
            assert_same_bits(lm.step(ids[:, t:t + 1], st), want[:, t, :], f"step {t} B={B}")


@pytest.mark.parametrize("profile,fmt", [("fp32_v1", "float32"), ("fp32_v1", "bfloat16"),
                                         ("fp32_v1", "int8"), ("fixed15_v1", "float32"),
                                         ("fixed15_v1", "int8")])
def test_held_bytes_by_format(model, profile, fmt):
    """What a model holds, by format: the projections in their stored bytes (int8 panels
    1 a weight plus a float32 scale a row, bf16 panels 2, int15 codes 2 plus an int32
    exponent a row, float32 panels 4), the head as float32 panels (fp32_v1) or int15
    codes (fixed15_v1), the embedding the gather reads only when it is not the head's
    own table; nbytes() is the sum."""
    path, cfg, w = model
    lm = CausalLM.load(path, numeric_profile=profile, weight_format=fmt)
    held = lm.held()
    assert lm.nbytes() == sum(held.values())
    L, d, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]
    tied = cfg["tie_word_embeddings"]
    norms = 4 * d * (2 * L + 1)
    projs = proj_weights(cfg)
    if profile == "fixed15_v1":
        want_proj = ("int15", L * sum(2 * n * k + 4 * n for n, k in projs))
        head = ("int15", 2 * V * d + 4 * V)
        embed = 4 * V * d
    else:
        per = {"float32": lambda n, k: 4 * pad(n) * k,
               "bfloat16": lambda n, k: (2 * pad(n) * k + 3) // 4 * 4,
               "int8": lambda n, k: (pad(n) * k + 63) // 64 * 64 + 4 * pad(n)}[fmt]
        want_proj = (fmt, L * sum(per(n, k) for n, k in projs))
        head = ("float32", 4 * pad(V) * d)
        embed = 0 if tied else 4 * V * d
    want = {"float32": norms + embed}
    for key, n in (want_proj, head):
        want[key] = want.get(key, 0) + n
    assert held == want, (held, want)
    assert (lm.embed is None) == (tied and profile == "fp32_v1")


def test_load_streams_the_checkpoint(tmp_path):
    """CausalLM.load reads each tensor once, when its holder is made, and lets it go
    after: at no time are more than a few tensors alive as float32 (the peak of a load
    is about what the model holds, not the checkpoint's float32 size beside it)."""
    import weakref

    from mojolearn.models import loader

    cfg = dict(TINY, num_hidden_layers=6, tie_word_embeddings=True)
    w = tiny_weights(cfg, seed=12)
    path = write_model(tmp_path / "stream", cfg, w)
    total = sum(a.nbytes for a in w.values())
    alive, reads, peak = [], {}, [0]
    real = loader.read_model

    def counting(p, lazy=False):
        c, weights = real(p, lazy=lazy)
        assert lazy and isinstance(weights, loader.LazyWeights)
        for name, (shape, read) in list(weights._entries.items()):
            def wrapped(read=read, name=name):
                a = read()
                reads[name] = reads.get(name, 0) + 1
                alive.append((weakref.ref(a), a.nbytes))
                peak[0] = max(peak[0], sum(n for r, n in alive if r() is not None))
                return a
            weights._entries[name] = (shape, wrapped)
        return c, weights

    import mojolearn.models._transformer.causal_lm as cl
    old = cl.read_model
    cl.read_model = counting
    try:
        lm = CausalLM.load(path)
    finally:
        cl.read_model = old
    assert sorted(reads) == sorted(w) and set(reads.values()) == {1}
    assert peak[0] <= 2 * w["model.embed_tokens.weight"].nbytes + 3 * w[
        "model.layers.0.mlp.gate_proj.weight"].nbytes < total
    ids = ids_for(cfg, 1, 6, seed=13)
    assert_same_bits(lm.forward(ids), MO.forward(w, cfg, ids, "fp32_v1"))
