"""Tests of the Mamba-1 / Mamba-2 numpy oracle (tests/mamba_oracle.py, rules S-1 .. S-35):
its helpers against exact or independent references, its logits against transformers' own
MambaForCausalLM / Mamba2ForCausalLM (a reference written elsewhere), its invariances
(S-29) bit for bit, and variants of single rules that must move its bits.

Nothing here imports mojolearn.
"""
from __future__ import annotations

import json
import os
import sys
from fractions import Fraction

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mamba_oracle as M  # noqa: E402
import model_oracle as MO  # noqa: E402
import oracle as O  # noqa: E402

F = np.float32


def bits(x):
    return np.array(x, dtype=np.float32, copy=True, order="C").view(np.uint32)


def same(a, b):
    a = np.asarray(a)
    b = np.asarray(b)
    return a.dtype == b.dtype == np.float32 and a.shape == b.shape and np.array_equal(bits(a), bits(b))


def same_state(s1, s2):
    assert len(s1) == len(s2)
    for a, b in zip(s1, s2):
        assert set(a) == set(b)
        for k in a:
            if k == "q":
                assert a[k] == b[k]
            else:
                assert same(a[k], b[k]), k
    return True


def n_diff(a, b):
    return int((bits(a) != bits(b)).sum())


def f32_bits(u):
    return np.array([u], dtype=np.uint32).view(np.float32)[0]


_CACHE = {}


def model(mt, d, layers=2, vocab=61, tied=False, seed=1, limit=None):
    """(cfg, weights) of a random checkpoint (cached per arguments)."""
    key = (mt, d, layers, vocab, tied, seed, limit)
    if key not in _CACHE:
        hf = M.make_config(mt, d, layers, vocab, tie_word_embeddings=tied, time_step_limit=limit)
        cfg = M.load_config(hf)
        _CACHE[key] = (cfg, M.random_weights(cfg, seed))
    return _CACHE[key]


def ids_for(B, L, vocab=61, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, size=(B, L))


# ------------------------------------------------------------------ helpers (S-1, S-2)
def _round_f32(q):
    """Exact rational q rounded to float32 (nearest-even), for normal-range results."""
    r = np.float32(float(q))
    best = None
    for c in (np.nextafter(r, F(-np.inf)), r, np.nextafter(r, F(np.inf))):
        key = (abs(Fraction(float(c)) - q), int(bits(c)) & 1)
        if best is None or key < best[0]:
            best = (key, c)
    return best[1]


def test_fma_is_one_rounding():
    """S-1: model_oracle.fma (oracle.fma_f32) is a true fused multiply-add in float32: on
    products built to land within a float64 ulp of a float32 half-way point (where a
    float64 product-then-round double-rounds), it equals the exact rational result rounded
    once, and the naive float64 route differs on those cases."""
    rng = np.random.default_rng(5)
    n = 1500
    k = rng.integers(1, 60, n).astype(np.float32)
    e = rng.integers(-30, 30, n)
    sg = np.where(rng.random(n) < 0.5, -1, 1).astype(np.float32)
    a = (F(1) + k * F(2.0 ** -23)).astype(np.float32)
    b = ((F(1) - k * F(2.0 ** -23)) * F(2.0 ** -24) * (2.0 ** e) * sg).astype(np.float32)
    odd = (2 * rng.integers(0, 2 ** 22, n) + 1).astype(np.float64)
    c = ((1.0 + odd * 2.0 ** -23) * 2.0 ** e * np.where(rng.random(n) < 0.5, -1, 1)).astype(np.float32)
    # plus ordinary random cases
    a = np.concatenate([a, rng.standard_normal(500).astype(np.float32)])
    b = np.concatenate([b, rng.standard_normal(500).astype(np.float32)])
    c = np.concatenate([c, rng.standard_normal(500).astype(np.float32)])
    got = MO.fma(a, b, c)
    want = np.array([_round_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
                     for x, y, z in zip(a, b, c)], dtype=np.float32)
    assert same(got, want)
    naive = (a.astype(np.float64) * b + c).astype(np.float32)
    assert n_diff(naive[:n], want[:n]) > n // 4


@pytest.mark.parametrize("k", [1, 5, 32, 64, 127, 128, 129, 256, 300])
def test_dot_v1_is_fp32_v1(k):
    """S-2 / S-12: dot_v1 (used for every product here) gives oracle.gemm_fp32_v1_nt's bits
    (leaves of 128, ascending fma chains from +0, balanced tree), subnormals and -0 in."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((7, k)).astype(np.float32)
    w = rng.standard_normal((5, k)).astype(np.float32)
    a[0, 0] = f32_bits(0x00000123)  # subnormal input: read as +0
    a[1, :] = -0.0
    w[2, ::3] *= F(1e-20)
    assert same(M.proj(a, w), O.gemm_fp32_v1_nt(a, w))
    assert same(M.dot_v1(a[:, None, :], w[None, :, :]), O.gemm_fp32_v1_nt(a, w))


def test_log1p_softplus_silu():
    """S-14 / S-1: log1p's two branches meet at 0x3ED413CD and are within 2 ulp of the true
    value on both sides; softplus(x) = x above 20, log1p(expf(x)) at and below 20, +0 far
    below; silu is div(z, add(expf(-z), 1))."""
    thr = M.LOG1P_SMALL
    e = np.concatenate([np.linspace(0, 4, 4001, dtype=np.float32),
                        [thr, np.nextafter(thr, F(1)), np.nextafter(thr, F(0)), F(1e-30), F(3e-8)]]).astype(np.float32)
    got = M.log1p(e)
    ref = np.log1p(e.astype(np.float64)).astype(np.float32)
    ulp = np.abs(np.spacing(ref))
    assert np.all(np.abs(got.astype(np.float64) - ref) <= 2 * ulp + 1e-45)
    assert bits(M.log1p(np.array([0.0], np.float32)))[0] == 0
    # the small branch is M-8's polynomial (not logf(1 + e)): they differ somewhere below thr
    small = e[(e > 0) & (e <= thr)]
    assert n_diff(M.log1p(small), M.logf(M.add(small, F(1)))) > 0
    x = np.array([20.0, np.nextafter(F(20), F(30)), 25.0, -100.0, -87.0, 0.0, 3.0], np.float32)
    sp = M.softplus(x)
    assert sp[1] == x[1] and sp[2] == x[2]
    assert sp[0] == M.log1p(M.expf(F(20)))
    assert bits(sp[3]) == 0
    z = np.linspace(-30, 30, 601, dtype=np.float32)
    assert same(M.silu(z), MO.div(z, MO.add(MO.expf(-z), F(1))))
    assert np.allclose(M.silu(z), z / (1 + np.exp(-z.astype(np.float64))), rtol=1e-6, atol=1e-30)


def _lanes_scalar(x, w, eps):
    """S-10 written per element with scalars (a second, plain reading of the rule)."""
    n = x.size
    lanes = []
    for k in range(32):
        acc = F(0)
        for j in range(k, n, 32):
            acc = MO.fma(x[j], x[j], acc)[()]
        lanes.append(F(acc))
    while len(lanes) > 1:
        lanes = [F(MO.add(lanes[i], lanes[i + 1])) for i in range(0, len(lanes), 2)]
    mean = MO.div(lanes[0], F(n))
    rstd = MO.div(F(1), MO.sqrt(MO.add(mean, eps)))
    return np.array([MO.mul(w[j], MO.mul(x[j], rstd)) for j in range(n)], dtype=np.float32)


@pytest.mark.parametrize("n", [20, 64, 96, 160])
def test_rmsnorm_lanes(n):
    """S-10: rmsnorm_lanes equals a scalar reading of the rule (32 lanes j = k, k+32, ...,
    pairwise fold, then M-4's tail), eps f32(1e-5) = 0x3727C5AC; and S-11's chain (M-4)
    differs from it on some rows."""
    assert int(bits(M.EPS)) == 0x3727C5AC
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((40, n)) * 3).astype(np.float32)
    w = (1 + rng.standard_normal(n) * 0.1).astype(np.float32)
    got = M.rmsnorm_lanes(x, w)
    for r in range(0, 40, 7):
        assert same(got[r], _lanes_scalar(x[r], w, M.EPS))
    if n > 32:
        assert n_diff(got, M.rmsnorm_chain(x, w)) > 0


def test_conv_causal():
    """S-13: acc = bias, then fma(w[c, k], x[l-3+k], acc) for k = 0..3 (oldest tap first);
    the window carries the last four pre-conv values (oldest first), so two calls equal one;
    bias added last (the variant) gives other bits."""
    rng = np.random.default_rng(3)
    B, L, C = 2, 9, 24
    x = rng.standard_normal((B, L, C)).astype(np.float32)
    w = rng.uniform(-0.5, 0.5, (C, 1, 4)).astype(np.float32)
    b = (rng.standard_normal(C) * 0.1).astype(np.float32)
    out, win = M.conv_causal(x, w, b)
    xp = np.concatenate([np.zeros((B, 3, C), np.float32), x], axis=1)
    for bb in range(B):
        for l in range(L):
            for c in range(0, C, 5):
                acc = b[c]
                for k in range(4):
                    acc = MO.fma(w[c, 0, k], xp[bb, l + k, c], acc)[()]
                assert bits(out[bb, l, c]) == bits(acc)
    assert same(win, np.ascontiguousarray(x[:, -4:, :].transpose(0, 2, 1)))
    o1, w1 = M.conv_causal(x[:, :2], w, b)
    o2, w2 = M.conv_causal(x[:, 2:3], w, b, w1)
    o3, w3 = M.conv_causal(x[:, 3:], w, b, w2)
    assert same(np.concatenate([o1, o2, o3], axis=1), out) and same(w3, win)
    ol, _ = M.conv_causal(x, w, b, bias_last=True)
    assert n_diff(ol, out) > 0


def test_clamp():
    """S-19's clamp: lo first, then hi (lo > hi: hi wins); -0 < +0."""
    v = np.array([0.5, 0.0, 2.0, 1e-3], np.float32)
    assert same(M.clamp(v, F(0.1), F(1.0)), np.array([0.5, 0.1, 1.0, 0.1], np.float32))
    assert same(M.clamp(v, F(0.8), F(0.3)), np.full(4, 0.3, np.float32))
    assert bits(M.clamp(F(0.0), F(0.0), F(-0.0))) == 0x80000000
    assert bits(M.clamp(F(-0.0), F(0.0), F(1.0))) == 0


# ------------------------------------------------------------------ config (S-6, S-7)
@pytest.mark.parametrize("spelling", ["__float__", "Infinity", "inf", "1e999"])
def test_time_step_limit_spellings(tmp_path, spelling):
    """S-7: +inf read however config.json spells it; each bound rounded once to float32."""
    hf = M.make_config("mamba2", 64, 1, 11, time_step_limit=(0.1, float("inf")))
    cfg, w = model("mamba2", 64, 1, 11)
    M.write_checkpoint(tmp_path, hf, w, inf_spelling=spelling)
    text = (tmp_path / "config.json").read_text()
    assert {"__float__": '"__float__"', "Infinity": "Infinity", "inf": '"inf"',
            "1e999": "1e999"}[spelling] in text
    lo, hi = M.load_config(json.loads(text))["dt_limit"]
    assert bits(lo) == bits(F(0.1)) and hi == np.inf and lo.dtype == hi.dtype == np.float32


def test_config_reads_and_refusals():
    """S-6: sizes read; tie_word_embeddings absent means tied; Mamba-1's time_step_rank
    "auto" or ceil(d/16); a value outside S-6 refused by name; a NaN limit refused (S-35)."""
    base1 = M.make_config("mamba", 40, 2, 50)
    base2 = M.make_config("mamba2", 64, 2, 50, tie_word_embeddings=False)
    c1 = M.load_config({k: v for k, v in base1.items() if k != "tie_word_embeddings"})
    assert c1["tied"] is True and c1["r"] == 3 and c1["di"] == 80 and c1["N"] == 16
    assert M.load_config(dict(base1, time_step_rank="auto"))["r"] == 3
    c2 = M.load_config(base2)
    assert (c2["H"], c2["CD"], c2["P"], c2["Q"], c2["tied"]) == (2, 384, 64, 256, False)
    assert c2["dt_limit"][0] == 0 and c2["dt_limit"][1] == np.inf
    bad = [(base1, "state_size", 32), (base1, "expand", 3), (base1, "conv_kernel", 3),
           (base1, "time_step_rank", 4), (base1, "layer_norm_epsilon", 1e-6),
           (base1, "hidden_act", "gelu"), (base1, "use_bias", True), (base1, "use_conv_bias", False),
           (base2, "state_size", 64), (base2, "n_groups", 8), (base2, "head_dim", 32),
           (base2, "num_heads", 4), (base2, "chunk_size", 128), (base2, "norm_before_gate", True),
           (base2, "rms_norm", False), (base2, "intermediate_size", 96)]
    for base, field, val in bad:
        with pytest.raises(ValueError, match=field):
            M.load_config(dict(base, **{field: val}))
    with pytest.raises(ValueError, match="multiple of 32"):
        M.load_config(dict(base2, hidden_size=48, num_heads=None))
    with pytest.raises(ValueError, match="NaN"):
        M.load_config(dict(base2, time_step_limit=[0.0, float("nan")]))
    with pytest.raises(NotImplementedError):
        M.load_config(dict(base1, model_type="llama"))


def test_checkpoint_round_trip(tmp_path):
    """S-4 / S-5: write_checkpoint writes every tensor under its checkpoint name and shape
    (lm_head only when untied), float32 bits unchanged; forward refuses a non-float32
    tensor (TypeError), a misshapen or missing one (ValueError), and float16 weights."""
    from safetensors.numpy import load_file
    for mt, d, tied in (("mamba", 32, True), ("mamba2", 64, False)):
        cfg, w = model(mt, d, tied=tied)
        M.write_checkpoint(tmp_path / mt, cfg, w)
        back = load_file(str(tmp_path / mt / "model.safetensors"))
        assert set(back) == set(w) == set(M.expected_shapes(cfg))
        assert ("lm_head.weight" in back) == (not tied)
        for k in w:
            assert same(back[k], w[k])
        assert M.load_config(json.loads((tmp_path / mt / "config.json").read_text()))["d"] == d
    cfg, w = model("mamba", 32, tied=True)
    ids = ids_for(1, 2)
    with pytest.raises(TypeError):
        M.forward(dict(w, **{"backbone.norm_f.weight": w["backbone.norm_f.weight"].astype(np.float64)}), cfg, ids)
    with pytest.raises(ValueError, match="shape"):
        M.forward(dict(w, **{"backbone.layers.0.mixer.D": np.ones(3, np.float32)}), cfg, ids)
    with pytest.raises(ValueError, match="missing"):
        M.forward({k: v for k, v in w.items() if "A_log" not in k}, cfg, ids)
    with pytest.raises(ValueError, match="float16"):
        M.forward(w, cfg, ids, weight_format="float16")


# ------------------------------------------------------------------ against transformers
def _rel(ours, theirs):
    return float(np.abs(ours.astype(np.float64) - theirs).max() / np.abs(theirs).max())


def _hf_classes():
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers


def _hf_logits(hf_model, ids):
    import torch
    with torch.no_grad():
        return hf_model(torch.from_numpy(np.asarray(ids)), use_cache=False).logits.float().numpy()


CASES = [  # (model_type, d, tied, time_step_limit, batch, lengths)
    ("mamba", 32, True, None, 2, (1, 7)),
    ("mamba", 64, False, None, 1, (1, 7, 40)),
    ("mamba2", 64, False, None, 2, (1, 7)),
    ("mamba2", 128, True, None, 1, (1, 7)),
    ("mamba2", 64, False, (0.004, 0.03), 1, (7, 40)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-d{c[1]}-{'tied' if c[2] else 'untied'}"
                         + ("-limit" if c[3] else ""))
def test_against_transformers_checkpoint(tmp_path, case):
    """S-4 .. S-25 against transformers: a random checkpoint written by write_checkpoint and
    loaded by MambaForCausalLM / Mamba2ForCausalLM.from_pretrained (float32, torch slow
    path, its one-shot forward): the oracle's logits within 1e-5 of the largest |logit|,
    argmax equal everywhere. With a time_step_limit the clamp (S-19) bites: the oracle
    without it gives other bits."""
    transformers = _hf_classes()
    import torch
    mt, d, tied, limit, B, lengths = case
    cfg, w = model(mt, d, tied=tied, seed=d, limit=limit)
    M.write_checkpoint(tmp_path, cfg, w)
    cls = transformers.MambaForCausalLM if mt == "mamba" else transformers.Mamba2ForCausalLM
    hf_model = cls.from_pretrained(tmp_path, dtype=torch.float32).eval()
    for L in lengths:
        ids = ids_for(B, L, seed=L)
        ours, _ = M.forward(w, cfg, ids)
        ref = _hf_logits(hf_model, ids)
        rel = _rel(ours, ref)
        print(f"{mt} d={d} tied={tied} limit={limit} B={B} L={L}: max|diff|/max|logit| = {rel:.3g}")
        assert rel <= 1e-5
        assert np.array_equal(ours.argmax(-1), ref.argmax(-1))
    if limit is not None:
        free = dict(cfg, dt_limit=(F(0), F(np.inf)))
        assert n_diff(M.forward(w, free, ids)[0], ours) > 0


@pytest.mark.parametrize("mt,d", [("mamba", 64), ("mamba2", 64)])
def test_against_transformers_own_model(tmp_path, mt, d):
    """S-4 / S-5 / S-6 names and config as transformers itself writes them: a tiny model made
    by transformers (its own initialization, norm weights, A_log and D moved off their
    initial values), saved by save_pretrained; the oracle reads config.json with load_config
    (Mamba-2: the {"__float__": "Infinity"} limit) and the weights from state_dict().
    Logits within 1e-5 of the largest; 5 greedy tokens by the oracle's prefill + decode
    (S-26 .. S-28) equal the argmax of transformers' one-shot forward at each length."""
    transformers = _hf_classes()
    import torch
    torch.manual_seed(7)
    if mt == "mamba":
        hcfg = transformers.MambaConfig(hidden_size=d, num_hidden_layers=2, vocab_size=61,
                                        state_size=16, expand=2, conv_kernel=4)
        hf_model = transformers.MambaForCausalLM(hcfg)
    else:
        hcfg = transformers.Mamba2Config(hidden_size=d, num_hidden_layers=2, vocab_size=61,
                                         num_heads=2 * d // 64, head_dim=64, n_groups=1,
                                         state_size=128, chunk_size=256, expand=2)
        hf_model = transformers.Mamba2ForCausalLM(hcfg)
    hf_model = hf_model.eval()
    with torch.no_grad():
        for n, p in hf_model.named_parameters():
            if "norm" in n or n.endswith(".D") or n.endswith("A_log"):
                p.add_(torch.randn_like(p) * 0.3)
    hf_model.save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    if mt == "mamba2":
        assert raw["time_step_limit"][1] == {"__float__": "Infinity"}
    cfg = M.load_config(raw)
    w = {k: v.detach().cpu().numpy().copy() for k, v in hf_model.state_dict().items()}
    ids = ids_for(2, 11, seed=4)
    ours, _ = M.forward(w, cfg, ids)
    ref = _hf_logits(hf_model, ids)
    rel = _rel(ours, ref)
    print(f"{mt} d={d} (transformers' init): max|diff|/max|logit| = {rel:.3g}")
    assert rel <= 1e-5 and np.array_equal(ours.argmax(-1), ref.argmax(-1))
    seq = [5, 17, 3]
    logits, st = M.forward(w, cfg, np.array([seq]))
    for _ in range(5):
        nxt = int(np.argmax(logits[0, -1]))
        ref = _hf_logits(hf_model, np.array([seq]))
        assert nxt == int(np.argmax(ref[0, -1]))
        seq.append(nxt)
        logits, st = M.forward(w, cfg, np.array([[nxt]]), st)


def test_against_transformers_two_chunks(tmp_path):
    """S-20 .. S-24 across a chunk boundary: Mamba-2 at L = 300 (a full chunk of 256, then
    44 rows) within 1e-5 of transformers' chunked one-shot forward, argmax equal."""
    transformers = _hf_classes()
    import torch
    cfg, w = model("mamba2", 64, seed=11)
    M.write_checkpoint(tmp_path, cfg, w)
    hf_model = transformers.Mamba2ForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    ids = ids_for(1, 300, seed=9)
    ours, st = M.forward(w, cfg, ids)
    ref = _hf_logits(hf_model, ids)
    rel = _rel(ours, ref)
    print(f"mamba2 d=64 L=300: max|diff|/max|logit| = {rel:.3g}")
    assert rel <= 1e-5 and np.array_equal(ours.argmax(-1), ref.argmax(-1))
    assert st[0]["q"] == 44


@pytest.mark.slow
def test_against_transformers_two_chunks_d128(tmp_path):
    """As test_against_transformers_two_chunks at d_model 128 (4 heads), tied, batch 2."""
    transformers = _hf_classes()
    import torch
    cfg, w = model("mamba2", 128, tied=True, seed=12)
    M.write_checkpoint(tmp_path, cfg, w)
    hf_model = transformers.Mamba2ForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    ids = ids_for(2, 300, seed=10)
    ours, _ = M.forward(w, cfg, ids)
    ref = _hf_logits(hf_model, ids)
    rel = _rel(ours, ref)
    print(f"mamba2 d=128 L=300 B=2: max|diff|/max|logit| = {rel:.3g}")
    assert rel <= 1e-5 and np.array_equal(ours.argmax(-1), ref.argmax(-1))


# ------------------------------------------------------------------ invariances (S-29)
def _pieces(w, cfg, ids, cuts, weight_format="float32"):
    outs, st = [], None
    edges = [0, *cuts, ids.shape[1]]
    for a, b in zip(edges[:-1], edges[1:]):
        o, st = M.forward(w, cfg, ids[:, a:b], st, weight_format=weight_format)
        outs.append(o)
    return np.concatenate(outs, axis=1), st


@pytest.mark.parametrize("fmt", ["float32", "int8"])
def test_mamba1_prefill_then_steps(fmt):
    """S-26 / S-29: Mamba-1 prefill 6 then 8 steps, 1 then 11 steps, and pieces 3 + 4 + 7,
    equal one prefill of 14 bit for bit: logits, conv windows and h (also under int8
    weights, S-30)."""
    cfg, w = model("mamba", 64)
    ids = ids_for(2, 14, seed=1)
    full, sf = M.forward(w, cfg, ids, weight_format=fmt)
    for cuts in (list(range(6, 14)), list(range(1, 14)), [3, 7]):
        got, st = _pieces(w, cfg, ids, cuts, fmt)
        assert same(got, full) and same_state(st, sf)


def test_mamba2_prefill_then_steps_short():
    """S-27 / S-28 / S-29: Mamba-2 prefill 6 then 8 steps, and 10 + 25 + 5, equal one
    prefill bit for bit (logits; conv, h, open rows and q); rows at or past q are +0."""
    cfg, w = model("mamba2", 64)
    ids = ids_for(2, 40, seed=2)
    full, sf = M.forward(w, cfg, ids)
    got, st = _pieces(w, cfg, ids[:, :14], list(range(6, 14)))
    f14, s14 = M.forward(w, cfg, ids[:, :14])
    assert same(got, f14) and same_state(st, s14) and same(got, full[:, :14])
    got, st = _pieces(w, cfg, ids, [10, 35])
    assert same(got, full) and same_state(st, sf)
    for layer in sf:
        assert layer["q"] == 40
        assert not np.any(bits(layer["xbc"][:, 40:])) and not np.any(bits(layer["dt"][:, 40:]))
        assert not np.any(bits(layer["h"]))  # no chunk completed yet


def test_mamba2_decode_across_chunk_boundary():
    """S-23 / S-27 / S-28: prefill 250 then 12 steps equals prefill 262 bit for bit; the step
    at q = 255 completes the chunk (h advances, q returns to 0); the result also equals the
    first 262 rows of a longer run (a prefix alone, S-29)."""
    cfg, w = model("mamba2", 32, layers=1, seed=3)
    ids = ids_for(1, 262, seed=3)
    full, sf = M.forward(w, cfg, ids)
    out, st = M.forward(w, cfg, ids[:, :250])
    outs = [out]
    for i in range(250, 262):
        o, st = M.forward(w, cfg, ids[:, i:i + 1], st)
        outs.append(o)
        if i == 255:
            assert st[0]["q"] == 0 and np.any(bits(st[0]["h"]))
    assert same(np.concatenate(outs, axis=1), full) and same_state(st, sf)
    assert sf[0]["q"] == 6


def test_mamba2_pieces_across_chunk_boundary():
    """S-20 / S-27 / S-29: 100 + 197 + 3 equals one prefill of 300 bit for bit (the second
    call resumes 100 open rows, completes the chunk and leaves 41), and a prefix of 7 alone
    equals the first 7 rows of the 300."""
    cfg, w = model("mamba2", 32, layers=1, seed=4)
    ids = ids_for(1, 300, seed=4)
    full, sf = M.forward(w, cfg, ids)
    got, st = _pieces(w, cfg, ids, [100, 297])
    assert same(got, full) and same_state(st, sf) and sf[0]["q"] == 44
    assert same(M.forward(w, cfg, ids[:, :7])[0], full[:, :7])


@pytest.mark.parametrize("mt,d", [("mamba", 64), ("mamba2", 64)])
def test_batch_rows_alone_and_permuted(mt, d):
    """S-29: each row of a batch of 3 equals the row alone, and permuting the rows permutes
    the results, bit for bit (logits and states), after a prefill and after a step."""
    cfg, w = model(mt, d)
    ids = ids_for(3, 9, seed=5)
    full, sf = M.forward(w, cfg, ids[:, :8])
    f2, sf2 = M.forward(w, cfg, ids[:, 8:], sf)
    for r in range(3):
        one, s1 = M.forward(w, cfg, ids[r:r + 1, :8])
        assert same(one, full[r:r + 1])
        o2, s2 = M.forward(w, cfg, ids[r:r + 1, 8:], s1)
        assert same(o2, f2[r:r + 1])
        for a, b in zip(s2, sf2):
            for k in a:
                assert a[k] == b[k] if k == "q" else same(a[k], b[k][r:r + 1])
    perm = [2, 0, 1]
    pf, _ = M.forward(w, cfg, ids[perm, :8])
    assert same(pf, full[perm])


# ------------------------------------------------------------------ weight formats (S-30)
@pytest.mark.parametrize("fmt", ["bfloat16", "int8"])
def test_weight_formats(fmt):
    """S-30: bfloat16 / int8 materialize exactly the block projection matrices (Mamba-1
    in_proj, x_proj, dt_proj, out_proj; Mamba-2 in_proj, out_proj) once, then the float32
    rules run: equal to float32 logits of the checkpoint with those matrices materialized by
    hand, and different from the plain float32 logits."""
    for mt, d, tied in (("mamba", 32, False), ("mamba2", 64, True)):
        cfg, w = model(mt, d, tied=tied)
        names = [k for k in w if any(k.endswith("mixer." + p) for p in M.PROJECTIONS[cfg["family"]])]
        assert len(names) == 2 * len(M.PROJECTIONS[cfg["family"]])
        by_hand = dict(w)
        for k in names:
            by_hand[k] = MO.materialize(w[k], fmt)
        ids = ids_for(1, 6, seed=6)
        got = M.forward(w, cfg, ids, weight_format=fmt)[0]
        assert same(got, M.forward(by_hand, cfg, ids)[0])
        assert n_diff(got, M.forward(w, cfg, ids)[0]) > 0


# ------------------------------------------------------------------ single-rule variants
@pytest.mark.parametrize("mt", ["mamba", "mamba2"])
def test_rule_variants_move_bits(mt):
    """The oracle's rules are live: S-10's 32-lane norm replaced by M-4's chain (d_model 64),
    and S-13's bias-as-seed replaced by the bias added last, each change some logits of a
    2 x 9 prefill; Mamba-2's S-21 segment sums as sub(cs[i], cs[j]) change some at L = 40."""
    cfg, w = model(mt, 64)
    ids = ids_for(2, 9, seed=8)
    base = M.forward(w, cfg, ids)[0]
    counts = {}
    for v in ("norm_chain", "conv_bias_last"):
        counts[v] = (n_diff(M.forward(w, cfg, ids, variant=[v])[0], base), base.size)
    if mt == "mamba2":
        ids = ids_for(1, 40, seed=8)
        b40 = M.forward(w, cfg, ids)[0]
        counts["seg_diff"] = (n_diff(M.forward(w, cfg, ids, variant=["seg_diff"])[0], b40), b40.size)
    print(mt, "logits moved per variant (moved, of):", counts)
    assert all(c > 0 for c, _ in counts.values()), counts
