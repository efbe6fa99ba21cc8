"""mojolearn.models against the independent numpy oracle of the whole forward
(tests/model_oracle.py, contracts/ops rules M-1..M-27), bit for bit, on tiny random
checkpoints written here; and the identities the contract promises."""
import json
import os

import numpy as np
import pytest

import model_oracle as MO
from bits import assert_same_bits
import mojolearn
from mojolearn.models import CausalLM, TransformerBlock

TINY = dict(model_type="llama", vocab_size=61, hidden_size=48, intermediate_size=80,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=64,
            tie_word_embeddings=False, hidden_act="silu")


def tiny_weights(cfg, seed=0, scale=0.2):
    rng = np.random.default_rng(seed)
    d, ff = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim") or (128 if cfg["model_type"] == "qwen3" else
                                 d // cfg["num_attention_heads"])
    nq, nk = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    f = lambda *s: (rng.standard_normal(s) * scale).astype(np.float32)  # noqa: E731
    w = {"model.embed_tokens.weight": f(cfg["vocab_size"], d),
         "model.norm.weight": (1 + f(d)).astype(np.float32)}
    if not cfg.get("tie_word_embeddings"):
        w["lm_head.weight"] = f(cfg["vocab_size"], d)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w.update({p + "input_layernorm.weight": (1 + f(d)).astype(np.float32),
                  p + "post_attention_layernorm.weight": (1 + f(d)).astype(np.float32),
                  p + "self_attn.q_proj.weight": f(nq, d), p + "self_attn.k_proj.weight": f(nk, d),
                  p + "self_attn.v_proj.weight": f(nk, d), p + "self_attn.o_proj.weight": f(d, nq),
                  p + "mlp.gate_proj.weight": f(ff, d), p + "mlp.up_proj.weight": f(ff, d),
                  p + "mlp.down_proj.weight": f(d, ff)})
        if cfg["model_type"] == "qwen2":
            w.update({p + "self_attn.q_proj.bias": f(nq), p + "self_attn.k_proj.bias": f(nk),
                      p + "self_attn.v_proj.bias": f(nk)})
        if cfg["model_type"] == "qwen3":
            w.update({p + "self_attn.q_norm.weight": (1 + f(hd)).astype(np.float32),
                      p + "self_attn.k_norm.weight": (1 + f(hd)).astype(np.float32)})
        if cfg["model_type"] == "phi3":  # stored stacked, as Phi-3 checkpoints are
            w[p + "self_attn.qkv_proj.weight"] = np.concatenate(
                [w.pop(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
            w[p + "mlp.gate_up_proj.weight"] = np.concatenate(
                [w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")])
    return w


def write_model(path, cfg, weights):
    from safetensors.numpy import save_file
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    save_file(weights, os.path.join(path, "model.safetensors"))
    return str(path)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = dict(TINY)
    w = tiny_weights(cfg)
    return write_model(tmp_path_factory.mktemp("tiny"), cfg, w), cfg, w


def ids_for(cfg, B, L, seed=1):
    return np.random.default_rng(seed).integers(0, cfg["vocab_size"], size=(B, L))


@pytest.mark.parametrize("profile", ["fp32_v1", "fixed15_v1"])
@pytest.mark.parametrize("fmt", ["float32", "bfloat16", "int8"])
def test_logits_equal_oracle(tiny, profile, fmt):
    """M-1 M-2 M-3 M-4 M-7 M-10 M-11 M-12 M-13 M-15 M-16 M-17 M-19 M-20 M-21 M-22 M-23 M-24
    M-26: the whole forward against the oracle, bit for bit, per profile and weight format."""
    path, cfg, w = tiny
    lm = CausalLM.load(path, numeric_profile=profile, weight_format=fmt)
    ids = ids_for(cfg, 2, 7)
    got = lm.forward(ids)
    want = MO.forward(w, cfg, ids, profile, fmt)
    assert_same_bits(got, want)


@pytest.mark.parametrize("mt", ["qwen2", "llama_gqa_hd24"])
def test_other_shapes_equal_oracle(tmp_path, mt):
    """M-27 qwen2's q/k/v bias, and M-6 with head_dim 24 (scale one ulp below torch's)."""
    cfg = dict(TINY)
    if mt == "qwen2":
        cfg["model_type"] = "qwen2"
    else:
        cfg.update(hidden_size=72, num_attention_heads=3, num_key_value_heads=1,
                   tie_word_embeddings=True)
    w = tiny_weights(cfg, seed=3)
    path = write_model(tmp_path / mt, cfg, w)
    for profile in ("fp32_v1", "fixed15_v1"):
        lm = CausalLM.load(path, numeric_profile=profile)
        ids = ids_for(cfg, 1, 5, seed=4)
        assert_same_bits(lm.forward(ids), MO.forward(w, cfg, ids, profile))


def test_long_head_dim_two_leaves(tmp_path):
    """M-11: Q.K^T with head_dim 160 > 128: two fp32.v1 leaves and the tree (M-11)."""
    cfg = dict(TINY, hidden_size=320, num_attention_heads=2, num_key_value_heads=1,
               head_dim=160, intermediate_size=64, num_hidden_layers=1)
    w = tiny_weights(cfg, seed=5)
    path = write_model(tmp_path / "hd160", cfg, w)
    lm = CausalLM.load(path)
    ids = ids_for(cfg, 1, 4, seed=6)
    assert_same_bits(lm.forward(ids), MO.forward(w, cfg, ids, "fp32_v1"))


@pytest.mark.parametrize("profile", ["fp32_v1", "fixed15_v1"])
def test_identity_threads_batch_prefill_decode(tiny, profile):
    """M-18 M-25: thread counts 1/2/3, a sequence alone vs in a batch of 3, prefill
    vs prefill then steps vs chunked prefill: the same bits."""
    path, cfg, _ = tiny
    lm = CausalLM.load(path, numeric_profile=profile)
    ids = ids_for(cfg, 3, 9, seed=7)
    old = mojolearn.get_num_threads()
    try:
        ref = None
        for t in (1, 2, 3):
            mojolearn.set_num_threads(t)
            got = lm.forward(ids)
            if ref is None:
                ref = got
            assert_same_bits(got, ref)
    finally:
        mojolearn.set_num_threads(old)
    # a row alone, in another order
    assert_same_bits(lm.forward(ids[1:2]), ref[1:2])
    assert_same_bits(lm.forward(ids[::-1]), ref[::-1])
    # prefill n-1 then one step
    st = lm.allocate_state(3, 9)
    lm.forward(ids[:, :8], st)
    assert_same_bits(lm.step(ids[:, 8:], st), ref[:, -1, :])
    # chunked prefill 4 + 3 + 2 (positions continue)
    st = lm.allocate_state(3, 9)
    a = lm.forward(ids[:, :4], st)
    b = lm.forward(ids[:, 4:7], st)
    c = lm.forward(ids[:, 7:], st)
    assert_same_bits(np.concatenate([a, b, c], axis=1), ref)


def test_transformers_4_and_5_rope_spellings_agree(tmp_path, tiny):
    """M-7: theta read from rope_theta (transformers 4) or rope_parameters (5) alike."""
    _, cfg, w = tiny
    c5 = dict(cfg)
    theta = c5.pop("rope_theta")
    c5["rope_parameters"] = {"rope_theta": theta, "rope_type": "default"}
    c_other = dict(cfg, rope_theta=500000.0)
    p4 = write_model(tmp_path / "v4", cfg, w)
    p5 = write_model(tmp_path / "v5", c5, w)
    po = write_model(tmp_path / "vo", c_other, w)
    ids = ids_for(cfg, 1, 12)
    l4 = CausalLM.load(p4).forward(ids)
    assert_same_bits(CausalLM.load(p5).forward(ids), l4)
    assert not np.array_equal(CausalLM.load(po).forward(ids), l4)  # theta matters


def test_generation_greedy_and_state_roundtrip(tiny, tmp_path):
    """M-18: generation continues the cache; a saved state resumes to the same bits."""
    path, cfg, _ = tiny
    lm = CausalLM.load(path)
    ids = ids_for(cfg, 2, 5, seed=11)
    out = lm.generate(ids, 6)
    assert out.shape == (2, 11) and out.dtype == np.int64
    assert np.array_equal(out[:, :5], ids)
    # each generated token is the argmax of the full forward of its prefix
    for t in range(5, 11):
        lg = lm.forward(out[:, :t])
        assert np.array_equal(out[:, t], np.argmax(lg[:, -1, :], axis=1))
    # a saved state resumes to the same bits
    st = lm.allocate_state(2, 11)
    lm.forward(ids, st)
    lm.save_state(tmp_path / "st.safetensors", st)
    st2 = lm.resume(tmp_path / "st.safetensors")
    nxt = out[:, 5:6]
    assert_same_bits(lm.step(nxt, st2), lm.step(nxt, st))
    # sampling is seeded
    a = lm.generate(ids, 4, greedy=False, seed=3)
    b = lm.generate(ids, 4, greedy=False, seed=3)
    assert np.array_equal(a, b)


def test_state_profile_rules(tiny, tmp_path):
    """M-18 M-19: a state carries its profile; another profile's reader refuses it."""
    path, cfg, _ = tiny
    f32 = CausalLM.load(path, numeric_profile="fp32_v1")
    f15 = CausalLM.load(path, numeric_profile="fixed15_v1")
    st = f15.allocate_state(1, 4)
    f15.forward(ids_for(cfg, 1, 2), st)
    f15.save_state(tmp_path / "s15.safetensors", st)
    with pytest.raises(ValueError, match="fixed15_v1"):
        f32.resume(tmp_path / "s15.safetensors")
    with pytest.raises(ValueError, match="another model or profile"):
        f32.step(ids_for(cfg, 1, 1), st)
    from mojolearn import checkpoint
    assert checkpoint.load(tmp_path / "s15.safetensors").numeric_profile == "fixed15_v1"


def test_block_defaults_to_fp32_even_under_fixed15_default(tiny):
    """M-1 M-3: a bare block (family transformer_block) gets fp32_v1 by default, and its
    output equals the oracle's one layer."""
    _, cfg, w = tiny
    bw = {k[len("model.layers.0."):]: v for k, v in w.items() if k.startswith("model.layers.0.")}
    old = mojolearn.set_numeric_profile("fixed15_v1")
    try:
        blk = TransformerBlock(bw, n_heads=4, n_kv_heads=2, rms_norm_eps=1e-5, max_positions=16)
        assert blk.numeric_profile == "fp32_v1"
        lm_default = CausalLM.load(tiny[0])
        assert lm_default.numeric_profile == "fixed15_v1"
    finally:
        mojolearn.set_numeric_profile(old)
    x = np.random.default_rng(2).standard_normal((2, 5, 48)).astype(np.float32)
    got = blk(x)
    # the oracle's one layer: embed -> layer 0 only, read at the residual stream
    cfg1 = dict(cfg, num_hidden_layers=1)
    want = _oracle_block(bw, cfg1, x)
    assert_same_bits(got, want)
    with pytest.raises(ValueError, match="int8_v1"):
        TransformerBlock(bw, n_heads=4, n_kv_heads=2, numeric_profile="int8_v1")


def _oracle_block(bw, cfg, x):
    d = cfg["hidden_size"]
    B, L, _ = x.shape
    hd = d // cfg["num_attention_heads"]
    nh, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    xs = x.reshape(B * L, d)
    cos, sin = MO.rope_table(16, hd, np.float32(cfg["rope_theta"]))
    h = MO.rmsnorm(xs, bw["input_layernorm.weight"], np.float32(1e-5))
    q = MO.proj(h, bw["self_attn.q_proj.weight"], "fp32_v1")
    k = MO.proj(h, bw["self_attn.k_proj.weight"], "fp32_v1")
    v = MO.proj(h, bw["self_attn.v_proj.weight"], "fp32_v1")
    ctx = np.empty((B * L, nh * hd), dtype=np.float32)
    pos = np.tile(np.arange(L), B)
    for b in range(B):
        r = slice(b * L, (b + 1) * L)
        for hh in range(nh):
            g = hh // (nh // kvh)
            qh = MO.rope(q[r, hh * hd:(hh + 1) * hd], cos, sin, pos[r])
            kh = MO.rope(k[r, g * hd:(g + 1) * hd], cos, sin, pos[r])
            ctx[r, hh * hd:(hh + 1) * hd] = MO.attention(qh, kh, v[r, g * hd:(g + 1) * hd], 0,
                                                         "fp32_v1", hd)
    xs = MO.add(xs, MO.proj(ctx, bw["self_attn.o_proj.weight"], "fp32_v1"))
    h2 = MO.rmsnorm(xs, bw["post_attention_layernorm.weight"], np.float32(1e-5))
    g_ = MO.proj(h2, bw["mlp.gate_proj.weight"], "fp32_v1")
    u_ = MO.proj(h2, bw["mlp.up_proj.weight"], "fp32_v1")
    xs = MO.add(xs, MO.proj(MO.silu_mul(g_, u_), bw["mlp.down_proj.weight"], "fp32_v1"))
    return xs.reshape(B, L, d)


def _llamacpp_permute(w, n_head):
    # the row order llama.cpp's converter writes for q and k (pairs interleaved)
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_gguf_loader_equals_hf_directory(tmp_path, tiny):
    """M-1 M-10: a GGUF file written the way llama.cpp's converter writes one (q/k rows
    interleaved per head, F32 tensors) loads to the same logits as the HF directory it
    came from: the loader puts q/k rows back in RoPE halves."""
    gguf = pytest.importorskip("gguf")
    path, cfg, w = tiny
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    out = tmp_path / "tiny.gguf"
    wr = gguf.GGUFWriter(str(out), "llama")
    wr.add_block_count(cfg["num_hidden_layers"])
    wr.add_context_length(cfg["max_position_embeddings"])
    wr.add_embedding_length(cfg["hidden_size"])
    wr.add_feed_forward_length(cfg["intermediate_size"])
    wr.add_head_count(cfg["num_attention_heads"])
    wr.add_head_count_kv(cfg["num_key_value_heads"])
    wr.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    wr.add_rope_freq_base(cfg["rope_theta"])
    wr.add_vocab_size(cfg["vocab_size"])
    for name, t in w.items():
        if name == "model.embed_tokens.weight":
            g = "token_embd.weight"
        elif name == "model.norm.weight":
            g = "output_norm.weight"
        elif name == "lm_head.weight":
            g = "output.weight"
        else:
            parts = name.split(".")
            key = ".".join(parts[3:-1])
            g = f"blk.{parts[2]}.{names[key]}.weight"
            if key == "self_attn.q_proj":
                t = _llamacpp_permute(t, cfg["num_attention_heads"])
            elif key == "self_attn.k_proj":
                t = _llamacpp_permute(t, cfg["num_key_value_heads"])
        wr.add_tensor(g, np.ascontiguousarray(t))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    ids = ids_for(cfg, 1, 9, seed=21)
    assert_same_bits(CausalLM.load(out).forward(ids), CausalLM.load(path).forward(ids))


def _attn_case(B, L, nh, kvh, hd, pos0, seed, edit=None):
    rng = np.random.default_rng(seed)
    T = pos0 + L
    q = (rng.standard_normal((B * L, nh * hd))).astype(np.float32)
    k = (rng.standard_normal((B, kvh, T, hd))).astype(np.float32)
    v = (rng.standard_normal((B, kvh, T, hd))).astype(np.float32)
    if edit:
        edit(q, k, v)
    return q, k, v


def _attention_vs_oracle(q, k, v, B, L, nh, kvh, hd, pos0, profile, what):
    """The attention kernel on (q, k, v) against the oracle, head by head."""
    from mojolearn.models._exec import kernels as K

    T = pos0 + L
    kt = np.ascontiguousarray(k.transpose(0, 1, 3, 2))
    out = np.empty((B * L, nh * hd), dtype=np.float32)
    K.attention(q, nh * hd, kt, np.ascontiguousarray(v), out, B, L, nh, kvh, hd, pos0, T,
                profile == "fixed15_v1")
    want = np.empty_like(out)
    for b in range(B):
        for h in range(nh):
            g = h // (nh // kvh)
            qh = MO.ftz(q[b * L:(b + 1) * L, h * hd:(h + 1) * hd])
            want[b * L:(b + 1) * L, h * hd:(h + 1) * hd] = MO.attention(
                qh, MO.ftz(k[b, g]), MO.ftz(v[b, g]), pos0, profile, hd)
    assert_same_bits(out, want, what)


@pytest.mark.parametrize("profile", ["fp32_v1", "fixed15_v1"])
@pytest.mark.parametrize("case", ["plain", "huge_masked_key", "inf_value_masked", "huge_query",
                                  "nan_key", "neg_zero_and_subnormal", "cached_prefix"])
def test_attention_kernel_edges(profile, case):
    """M-11 M-12 M-13 M-14 M-15 M-21 M-24: the attention kernel against the oracle on
    edge values: a huge key or query (the masked cells are then computed, not skipped),
    an inf value behind the mask (0 * inf is NaN in P.V), a NaN key, signed zeros and
    subnormals, and queries after cached keys."""
    B, L, nh, kvh, hd, pos0 = 2, 6, 4, 2, 32, 0
    edit = None
    if case == "huge_masked_key":
        def edit(q, k, v):
            k[0, 1, 5, 3] = 3e30
    elif case == "inf_value_masked":
        def edit(q, k, v):
            v[1, 0, 4, 7] = np.inf
    elif case == "huge_query":
        def edit(q, k, v):
            q[2, 5] = 1e25
    elif case == "nan_key":
        def edit(q, k, v):
            k[0, 0, 2, 0] = np.nan
    elif case == "neg_zero_and_subnormal":
        def edit(q, k, v):
            q[:, ::3] = -0.0
            k[..., 1::4] = np.float32(1e-40)
            v[..., ::5] = np.float32(-3e-39)
    elif case == "cached_prefix":
        pos0 = 5
    q, k, v = _attn_case(B, L, nh, kvh, hd, pos0, seed=13, edit=edit)
    _attention_vs_oracle(q, k, v, B, L, nh, kvh, hd, pos0, profile, case)


_GROUP_SHAPES = [
    # (B, L, nh, kvh, hd, pos0): query heads per key/value head 3, 4, 5 (4 + 1), 8 (4 + 4),
    # 6 with head_dim 160 (two leaves; 4 + 2), head_dim 96 (a column block and a rest),
    # 2 with one leaf, rows longer than the key blocks of every group size (AVX2: 48
    # keys for one head, 32 for two, 24 for three; AVX-512: 128 for one or two heads,
    # the last two shapes), a cached prefix
    (1, 70, 12, 4, 64, 0), (2, 37, 8, 2, 64, 40), (1, 66, 10, 2, 96, 0),
    (1, 20, 16, 2, 64, 70), (1, 67, 6, 1, 160, 3), (1, 75, 4, 2, 64, 0),
    (1, 140, 2, 2, 64, 9), (1, 150, 4, 2, 64, 0)]
_GROUP_CASES = [
    pytest.param(shape, edit, marks=() if fast else pytest.mark.slow,
                 id=f"{'x'.join(map(str, shape))}-{edit}")
    for shape in _GROUP_SHAPES
    for edit in ("plain", "huge_query_one_head", "inf_value_masked", "nan_key")
    # the quick run: every shape once, each edit once
    for fast in [(_GROUP_SHAPES.index(shape) + ["plain", "huge_query_one_head",
                  "inf_value_masked", "nan_key"].index(edit)) % 4 == 0]]


@pytest.mark.parametrize("profile", ["fp32_v1", "fixed15_v1"])
@pytest.mark.parametrize("shape,edit", _GROUP_CASES)
def test_attention_kernel_head_groups(profile, shape, edit):
    """M-11 .. M-15, M-21, M-24: the query heads of one key/value head are computed
    together (each key and value load feeds all of them); every head's bits equal the
    oracle's for the group sizes and head dims that take the shared path and its
    remainders, with one head of a group forcing the full row (a huge query), an inf
    value behind the mask and a NaN key."""
    B, L, nh, kvh, hd, pos0 = shape

    def change(q, k, v):
        if edit == "huge_query_one_head":
            q[L // 2, hd + 1] = 3e25          # head 1 only: its group takes every key
        elif edit == "inf_value_masked":
            v[0, 0, pos0 + L - 1, 5] = np.inf  # behind the mask for every earlier query
        elif edit == "nan_key":
            k[0, kvh - 1, pos0 + 2, 1] = np.nan

    q, k, v = _attn_case(B, L, nh, kvh, hd, pos0, seed=sum(shape), edit=change)
    _attention_vs_oracle(q, k, v, B, L, nh, kvh, hd, pos0, profile, f"{shape} {edit}")


@pytest.mark.parametrize("n", [1, 7, 15, 16, 17, 33, 64, 300])
def test_softmax_log_softmax_mean_rows(n):
    """M-28 M-29 M-30: softmax, log_softmax and mean over rows (the torch mode's
    kernels, W lanes a step with the tails element-wise: n on both sides of 8 and 16)
    against the oracle, with NaN, inf, -inf and subnormal entries, a row of -inf, a
    zero maximum of either sign alone (log_softmax then reaches logf(1) = +0) and
    +0 and -0 as maxima together (its sign is not promised and must not show)."""
    from mojolearn.models._exec import kernels as K

    rng = np.random.default_rng(n)
    x = (rng.standard_normal((10, n)) * 10).astype(np.float32)
    x[1, 0] = np.nan
    x[2, -1] = -np.inf
    x[3, 0] = np.float32(1e-40)
    if n > 1:
        x[4, 1] = np.inf
    x[5] = -np.inf
    x[6] = -300.0
    x[6, n // 2] = -0.0                    # the maximum, alone: den = 1
    x[7] = -300.0
    x[7, -1] = 0.0
    x[8] = -300.0
    x[8, 0] = -0.0
    x[8, -1] = 0.0                         # +0 and -0 both the maximum (n > 1)
    x[9] = -1e-40                          # subnormals: read as -0
    for log in (False, True):
        assert_same_bits(K.softmax_rows(x, log=log), MO.softmax_rows(x, log=log), f"log={log}")
    assert_same_bits(K.mean_rows(x), MO.mean_rows(x), "mean")


@pytest.mark.parametrize("ff", [1, 15, 16, 17, 63, 64, 65, 200])
def test_silu_mul_rows_against_the_oracle(ff):
    """M-17: the SiLU gate product (four vectors a step, then one, then the tail
    element-wise: ff on both sides of 16 and 64) against the oracle, with NaN, +-inf,
    +-0, subnormal, huge and tiny gates and values, for 1 and 2 threads."""
    from mojolearn.models._exec import kernels as K

    rng = np.random.default_rng(ff)
    gu = (rng.standard_normal((9, 2 * ff)) * 6).astype(np.float32)
    edge = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 100.0, -100.0,
                     88.8, -87.4, 1e-30, 3e38], dtype=np.float32)
    flat = gu[:4].reshape(-1)
    flat[:min(flat.size, 40)] = np.resize(edge, min(flat.size, 40))
    gu[4, ff:] = np.resize(edge[::-1], ff)
    want = MO.silu_mul(gu[:, :ff], gu[:, ff:])
    for n in (1, 2):
        mojolearn.set_num_threads(n)
        got = K.silu_mul(gu, ff, np.empty((9, ff), np.float32))
        assert_same_bits(got, want, f"silu_mul ff={ff} threads={n}")


_EDGE_ROWS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-30, -3e-20,
                       1e20, -3e38, 7.5, -0.125], dtype=np.float32)


@pytest.mark.parametrize("rows,d", [(1, 576), (7, 333), (8, 72), (9, 5), (17, 64), (300, 40)])
def test_rmsnorm_rows_against_the_oracle(rows, d):
    """M-4: the kernel's rows (eight chains side by side, then one at a time; 300 rows
    of 40 split over two tasks; values of magnitudes 2^-12 .. 2^12, so the order of
    each row's sum shows) against the oracle, with rows of NaN, +-inf, +-0,
    subnormals, tiny values (squares flushed), huge values (squares overflow), an
    all-zero row (eps 0: +0 mean), for 1 and 2 threads and two eps."""
    from mojolearn.models._exec import kernels as K

    rng = np.random.default_rng(rows * 100 + d)
    # magnitudes spread over 2^-12 .. 2^12: the sum's order shows in its bits
    x = (rng.standard_normal((rows, d)) * 2.0 ** rng.integers(-12, 13, (rows, d))).astype(np.float32)
    for r in range(rows):
        kind = r % 5 if r % 10 < 5 else 0
        if kind == 1:
            x[r, :] = np.resize(np.roll(_EDGE_ROWS, r), d)
        elif kind == 2:
            x[r, :] *= np.float32(1e-22)  # squares below the normal range
        elif kind == 3:
            x[r, :] *= np.float32(1e19)  # squares overflow
        elif kind == 4 and r % 3 == 0:
            x[r, :] = 0.0
    w = (rng.standard_normal(d) * 2).astype(np.float32)
    w[:3] = [1e-40, -0.0, np.inf][:min(3, d)]
    for eps in (1e-5, 0.0):
        want = MO.rmsnorm(x, w, np.float32(eps))
        for n in (1, 2):
            mojolearn.set_num_threads(n)
            got = K.rmsnorm(x, w, K.f32_bits(eps), np.empty_like(x))
            assert_same_bits(got, want, f"rmsnorm rows={rows} d={d} eps={eps} threads={n}")


@pytest.mark.parametrize("head_dim,rot", [(64, 64), (40, 40), (96, 96), (64, 24), (10, 10), (34, 2)])
@pytest.mark.parametrize("transposed", [False, True])
def test_rope_rows_against_the_oracle(head_dim, rot, transposed):
    """M-10, M-34: the rotation (whole vectors of the half, then element-wise: halves
    of 32, 20, 48, 12, 5 and 1) of 3 heads of 70 rows (two sequences, a cached prefix)
    into a row-major output and into the transposed key cache, the unrotated rest
    copied, against the oracle, with NaN, +-inf, +-0, subnormal and huge inputs, for 1
    and 2 threads."""
    from mojolearn.models._exec import kernels as K

    rng = np.random.default_rng(head_dim * 7 + rot)
    nh, B, L, pos0 = 3, 2, 35, 5
    rows, tmax = B * L, pos0 + L + 3
    x = (rng.standard_normal((rows, nh * head_dim)) * 4).astype(np.float32)
    flat = x[::4].reshape(-1)
    flat[::7] = np.resize(_EDGE_ROWS, flat[::7].size)
    x[::4] = flat.reshape(x[::4].shape)
    cos, sin = K.rope_table(tmax, rot, K.f32_bits(10000.0))
    pos = np.tile(np.arange(pos0, pos0 + L), B)
    want = np.empty((rows, nh, head_dim), np.float32)
    for h in range(nh):
        want[:, h] = MO.rope_partial(x[:, h * head_dim:(h + 1) * head_dim], cos, sin, pos, rot)
    for n in (1, 2):
        mojolearn.set_num_threads(n)
        if transposed:
            cache = np.full((B, nh, head_dim, tmax), 7.0, np.float32)
            K.rope(x, 0, nh * head_dim, cache, 0, 0, nh, head_dim, cos, sin, pos0, L, rows,
                   transposed=True, tmax=tmax, rot_dim=rot)
            got = cache[:, :, :, pos0:pos0 + L].transpose(0, 3, 1, 2).reshape(rows, nh, head_dim)
            assert (cache[:, :, :, :pos0] == 7.0).all() and (cache[:, :, :, pos0 + L:] == 7.0).all()
        else:
            out = np.full((rows, nh * head_dim + 5), 7.0, np.float32)
            K.rope(x, 0, nh * head_dim, out, nh * head_dim + 5, head_dim, nh, head_dim, cos, sin,
                   pos0, L, rows, rot_dim=rot)
            assert (out[:, nh * head_dim:] == 7.0).all()
            got = out[:, :nh * head_dim].reshape(rows, nh, head_dim)
        assert_same_bits(got, want, f"rope hd={head_dim} rot={rot} transposed={transposed} threads={n}")
