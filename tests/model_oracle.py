"""Independent numpy oracle of the transformer forward under fp32_v1 and fixed15_v1,
written from contracts/ops/IDENTICAL_NN_CONTRACT.md (rules M-1 .. M-26) and the GEMM
oracle in tests/oracle.py. Slow and plain on purpose: every float32 operation is one
numpy operation on float32 arrays, every fma goes through oracle.fma_f32, every result
is flushed. Tiny models only.
"""
from __future__ import annotations

import numpy as np

try:
    import oracle as O
except ImportError:  # imported as tests.model_oracle (the fuzz runner)
    from tests import oracle as O

F = np.float32
FLT_MIN = F(2.0 ** -126)
NEG_FLT_MAX = np.array([0xFF7FFFFF], dtype=np.uint32).view(np.float32)[0]
QNAN = np.array([0x7FC00000], dtype=np.uint32).view(np.float32)[0]


def a32(x):
    return np.asarray(x, dtype=np.float32)


def ftz(x):
    return O.ftz(a32(x))


def mul(a, b):
    with np.errstate(all="ignore"):
        return ftz(a32(a) * a32(b))


def add(a, b):
    with np.errstate(all="ignore"):
        return ftz(a32(a) + a32(b))


def div(a, b):
    with np.errstate(all="ignore"):
        return ftz(a32(a) / a32(b))


def fma(a, b, c):
    return ftz(O.fma_f32(a32(a), a32(b), a32(c)))


# ----------------------------------------------------------------- elementary (M-5..M-14)
def sqrt(x):
    """M-5: the correctly rounded IEEE square root."""
    return ftz(np.sqrt(a32(x)))


_EXP_C = [1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1]


def expf(x):
    x = a32(x)
    with np.errstate(all="ignore"):
        zf = np.floor(fma(x, F(1.4426950408889634), F(0.5)))
        ok = (x <= F(88.722835)) & (x >= F(-87.33655)) & ~np.isnan(x)
        zf = np.where(ok, zf, F(0)).astype(np.float32)
        r = fma(zf, F(-0.693359375), x)
        r = fma(zf, F(2.12194440e-4), r)
        q = np.full_like(x, F(1.9875691500e-4))
        for c in _EXP_C:
            q = fma(q, r, F(c))
        y = fma(q, mul(r, r), r)
        y = add(y, F(1))
        k = zf.astype(np.int64)
        h = k >> 1
        y = a32(y) * O.pow2f(h)
        y = a32(y) * O.pow2f(k - h)
        y = np.where(np.abs(y) < FLT_MIN, F(0), y).astype(np.float32)
        y = np.where(x > F(88.722835), F(np.inf), y)
        y = np.where(x < F(-87.33655), F(0), y)
        y = np.where(np.isnan(x), x, y)
    return a32(y)


_LOG_C = [-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
          -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1]


def logf(x):
    """M-8, for positive normal x."""
    x = a32(x)
    with np.errstate(all="ignore"):
        m, e = np.frexp(x)
    m = a32(m)
    e = e.astype(np.int64)
    small = m < F(0.707106781186547524)
    e = np.where(small, e - 1, e)
    m = np.where(small, m + m, m).astype(np.float32)
    t = a32(m - F(1))
    z = mul(t, t)
    p = np.full_like(t, F(7.0376836292e-2))
    for c in _LOG_C:
        p = fma(p, t, F(c))
    y = mul(mul(t, z), p)
    fe = e.astype(np.float32)
    y = fma(fe, F(-2.12194440e-4), y)
    y = fma(F(-0.5), z, y)
    r = add(t, y)
    with np.errstate(all="ignore"):
        out = fma(fe, F(0.693359375), r)
        out = np.where(x == np.inf, F(np.inf), out)
        out = np.where(x == 0, F(-np.inf), out)
        out = np.where(x < 0, F(np.nan), out)
        out = np.where(np.isnan(x), x, out)
    return a32(out)


def powf(x, y):
    y = a32(y)
    return np.where(y == 0, F(1), expf(mul(y, logf(x)))).astype(np.float32)


def sincos(x):
    """M-9: (sin, cos)."""
    x = a32(x)
    a = np.abs(x)
    j = np.floor(mul(a, F(1.27323954473516))).astype(np.int64)
    y = j.astype(np.float32)
    odd = (j & 1) == 1
    j = np.where(odd, j + 1, j)
    y = np.where(odd, add(y, F(1)), y).astype(np.float32)
    j = j & 7
    r = fma(y, F(-0.78515625), a)
    r = fma(y, F(-2.4187564849853515625e-4), r)
    r = fma(y, F(-3.77489497744594108e-8), r)
    ss = np.where(x < 0, F(-1), F(1)).astype(np.float32)
    sc = np.ones_like(x)
    big = j > 3
    j = np.where(big, j - 4, j)
    ss = np.where(big, -ss, ss)
    sc = np.where(big, -sc, sc)
    sc = np.where(j > 1, -sc, sc)
    z = mul(r, r)
    ps = fma(fma(F(-1.9515295891e-4), z, F(8.3321608736e-3)), z, F(-1.6666654611e-1))
    ys = fma(mul(r, z), ps, r)
    pc = fma(fma(F(2.443315711809948e-5), z, F(-1.388731625493765e-3)), z, F(4.166664568298827e-2))
    yc = fma(mul(z, z), pc, fma(F(-0.5), z, F(1)))
    swap = (j == 1) | (j == 2)
    s = np.where(swap, yc, ys)
    c = np.where(swap, ys, yc)
    return mul(ss, s), mul(sc, c)


# ----------------------------------------------------------------- ops
def rmsnorm(x, w, eps):
    """M-4, rows of x (n, d)."""
    x = ftz(x)
    n, d = x.shape
    acc = np.zeros(n, dtype=np.float32)
    for j in range(d):
        acc = fma(x[:, j], x[:, j], acc)
    mean = div(acc, F(d))
    rstd = div(F(1), sqrt(add(mean, F(eps))))
    return mul(ftz(w)[None, :], mul(x, rstd[:, None]))


def rope_table(npos, head_dim, theta):
    half = head_dim // 2
    i = np.arange(half)
    e = div((2 * i).astype(np.float32), F(head_dim))
    inv = div(F(1), powf(np.full(half, F(theta)), e))
    p = np.arange(npos).astype(np.float32)
    ang = mul(p[:, None], inv[None, :])
    s, c = sincos(ang)
    return c, s


def rope(x, cos, sin, positions):
    """M-10: x (n, head_dim) rows at the given absolute positions."""
    h = x.shape[1] // 2
    c = cos[positions]
    s = sin[positions]
    lo, hi = x[:, :h], x[:, h:]
    out = np.empty_like(x)
    out[:, :h] = add(mul(lo, c), mul(-hi, s))
    out[:, h:] = add(mul(hi, c), mul(lo, s))
    return out


def attn_scale(head_dim):
    return div(F(1), sqrt(F(head_dim)))


def proj(x, w, profile):
    """A product with weights stored (out, in): fp32.v1 or int15i64.v1 (M-3, M-19..M-23)."""
    if profile == "fp32_v1":
        return O.gemm_fp32_v1_nt(a32(x), a32(w))
    return O.gemm_int15_f32(a32(x), a32(w))


def attention(q, k, v, pos0, profile, head_dim):
    """One (batch, head): q (L, hd) rotated, k (T, hd) rotated keys, v (T, hd)."""
    v = ftz(v)  # every operand flushed as it is loaded (the products flush q and k)
    w = attention_weights(q, k, pos0, profile, head_dim)
    acc = np.zeros((q.shape[0], head_dim), dtype=np.float32)
    for j in range(k.shape[0]):
        acc = fma(w[:, j:j + 1], v[j][None, :], acc)
    return acc


def attention_weights(q, k, pos0, profile, head_dim):
    """The weights w (L, T) of one (batch, head) (M-11 .. M-14): q (L, hd) rotated
    queries at positions pos0 .. pos0 + L - 1, k (T, hd) rotated keys."""
    L = q.shape[0]
    T = k.shape[0]
    s = proj(q, k, profile)  # M-11 / M-21
    s = mul(s, attn_scale(head_dim))
    qpos = pos0 + np.arange(L)
    mask = np.where(np.arange(T)[None, :] <= qpos[:, None], F(0), NEG_FLT_MAX).astype(np.float32)
    s = add(s, mask)
    # every row's own chain, all rows a step at a time: key j's step of every row is one
    # numpy operation on the L rows (each output still sums its keys in ascending order)
    mx = np.empty(L, dtype=np.float32)
    for i in range(L):
        mx[i] = QNAN if np.isnan(s[i]).any() else F(np.max(s[i]))
    e = expf(add(s, -mx[:, None]))
    den = np.zeros(L, dtype=np.float32)
    for j in range(T):
        den = add(den, e[:, j])
    return div(e, den[:, None])


def silu_mul(g, u):
    g, u = ftz(g), ftz(u)  # every operand flushed as it is loaded
    sg = div(g, add(expf(-g), F(1)))
    return mul(sg, u)


def materialize(w, weight_format):
    """M-26: bfloat16 / int8 storage materialized to float32."""
    if weight_format == "float32":
        return a32(w)
    if weight_format == "bfloat16":
        return O.from_bf16(O.to_bf16(a32(w)))
    codes, exps = O.quantize_int8(a32(w))
    return O.dequantize_int8(codes, exps)


def rope_partial(x, cos, sin, positions, rot):
    """M-34: the first rot elements of each row rotated by M-10 (a table of rot / 2
    columns), the rest copied (flushed)."""
    out = ftz(a32(x)).copy()
    out[:, :rot] = rope(ftz(x[:, :rot]), cos, sin, positions)
    return out


def forward(weights, cfg, ids, profile="fp32_v1", weight_format="float32"):
    """Logits (batch, length, vocab) of a Llama-family model (qwen2 adds q/k/v bias; qwen3
    per-head q/k RMSNorm, M-33; phi3 stacked q/k/v and gate/up products and rotary on
    part of each head, M-34)."""
    ids = np.asarray(ids)
    B, L = ids.shape
    d = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    kvh = cfg["num_key_value_heads"]
    mt = cfg["model_type"]
    hd = cfg.get("head_dim") or (128 if mt == "qwen3" else d // nh)
    prf = cfg.get("partial_rotary_factor", 1.0) if mt == "phi3" else 1.0
    rot = int(hd * prf)
    eps = F(cfg["rms_norm_eps"])
    cos, sin = rope_table(L, rot, F(cfg["rope_theta"]))
    W = {k: a32(v) for k, v in weights.items()}
    proj_names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                  "qkv_proj", "gate_up_proj")
    for k in list(W):
        if k.split(".")[-2] in proj_names and k.endswith(".weight"):
            W[k] = materialize(W[k], weight_format)
    x = W["model.embed_tokens.weight"][ids.reshape(-1)].copy()  # M-2
    pos = np.tile(np.arange(L), B)
    for li in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{li}."
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        if p + "self_attn.qkv_proj.weight" in W:  # one product of the stacked weight, sliced
            qkv = proj(h, W[p + "self_attn.qkv_proj.weight"], profile)
            q, k, v = qkv[:, :nh * hd], qkv[:, nh * hd:(nh + kvh) * hd], qkv[:, (nh + kvh) * hd:]
        else:
            q = proj(h, W[p + "self_attn.q_proj.weight"], profile)
            k = proj(h, W[p + "self_attn.k_proj.weight"], profile)
            v = proj(h, W[p + "self_attn.v_proj.weight"], profile)
        if p + "self_attn.q_proj.bias" in W:
            q = add(q, W[p + "self_attn.q_proj.bias"][None, :])
            k = add(k, W[p + "self_attn.k_proj.bias"][None, :])
            v = add(v, W[p + "self_attn.v_proj.bias"][None, :])
        if p + "self_attn.q_norm.weight" in W:  # M-33: M-4 over each head's hd values
            q = rmsnorm(q.reshape(-1, hd), W[p + "self_attn.q_norm.weight"], eps).reshape(q.shape)
            k = rmsnorm(k.reshape(-1, hd), W[p + "self_attn.k_norm.weight"], eps).reshape(k.shape)
        ctx = np.empty((B * L, nh * hd), dtype=np.float32)
        for b in range(B):
            rows = slice(b * L, (b + 1) * L)
            for hh in range(nh):
                g = hh // (nh // kvh)
                qh = rope_partial(q[rows, hh * hd:(hh + 1) * hd], cos, sin, pos[rows], rot)
                kh = rope_partial(k[rows, g * hd:(g + 1) * hd], cos, sin, pos[rows], rot)
                vh = v[rows, g * hd:(g + 1) * hd]
                ctx[rows, hh * hd:(hh + 1) * hd] = attention(qh, kh, vh, 0, profile, hd)
        o = proj(ctx, W[p + "self_attn.o_proj.weight"], profile)
        x = add(x, o)
        h2 = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        if p + "mlp.gate_up_proj.weight" in W:
            gu = proj(h2, W[p + "mlp.gate_up_proj.weight"], profile)
            ff = gu.shape[1] // 2
            gg, uu = gu[:, :ff], gu[:, ff:]
        else:
            gg = proj(h2, W[p + "mlp.gate_proj.weight"], profile)
            uu = proj(h2, W[p + "mlp.up_proj.weight"], profile)
        dn = proj(silu_mul(gg, uu), W[p + "mlp.down_proj.weight"], profile)
        x = add(x, dn)
    h = rmsnorm(x, W["model.norm.weight"], eps)
    tied = cfg.get("tie_word_embeddings", False)
    head = W["model.embed_tokens.weight"] if tied else W["lm_head.weight"]
    logits = proj(h, head, profile)
    return logits.reshape(B, L, -1)


def softmax_rows(x, log=False):
    """M-28 / M-29 over the last axis."""
    x = ftz(x)
    out = np.empty_like(x)
    for r in np.ndindex(x.shape[:-1]):
        row = x[r]
        mx = QNAN if np.isnan(row).any() else F(np.max(row))
        sh = add(row, -mx)
        e = expf(sh)
        den = F(0)
        for j in range(row.size):
            den = add(den, e[j])
        out[r] = add(sh, -logf(np.array([den], dtype=np.float32))[0]) if log else div(e, den)
    return out


def mean_rows(x):
    """M-30: a serial sum ascending, then one division by n."""
    x = ftz(x)
    acc = np.zeros(x.shape[:-1], dtype=np.float32)
    for j in range(x.shape[-1]):
        acc = add(acc, x[..., j])
    return div(acc, F(x.shape[-1]))
