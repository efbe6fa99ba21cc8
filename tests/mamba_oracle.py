"""Independent numpy oracle of the Mamba-1 and Mamba-2 forward under fp32_v1 (prefill and
decode), written from the reference rules S-1 .. S-35 (mamba arithmetic v1) and the M-rules
they cite. Slow and plain on purpose: float32 numpy arrays only, every operand read flushed
and every value written flushed (S-1), every serial chain in its rule's order, vectorized
only across independent elements. Tiny models only. It imports nothing from ``mojolearn``.

Reused helpers: ``model_oracle`` (ftz, mul, add, div, fma -- a true single-rounding fma,
checked against exact rational arithmetic in tests/test_mamba_oracle.py --, sqrt M-5,
expf M-14, logf M-8, rmsnorm M-4, materialize M-26) and ``oracle`` (leaf_size; every product
here is ``dot_v1``, fp32.v1 written over exactly k steps, checked bit-equal to
``oracle.gemm_fp32_v1_nt`` in the tests: that one always runs 128 masked steps a leaf, four
times the work at k = 32).

PUBLIC API
----------
load_config(d) -> cfg
    d: a Hugging Face ``mamba`` / ``mamba2`` config.json dict (S-6, S-7). Returns a dict:
    family ("mamba1" | "mamba2"), model_type, d, di (= 2d), n_layers, vocab, tied (bool),
    K (4), eps (float32 1e-5), N (16 | 128); Mamba-1: r (ceil(d/16)); Mamba-2: P (64),
    H (di/64), CD (di + 256), Q (256), dt_limit ((lo, hi) float32); hf (a copy of d).
make_config(model_type, hidden_size, num_hidden_layers, vocab_size, *, tie_word_embeddings,
            time_step_limit) -> d          a complete config.json dict within S-6.
random_weights(cfg, seed=0, scale=1.0) -> weights
    A fresh float32 checkpoint dict (names and shapes as S-4 / S-5); scale multiplies the
    block projection matrices.
write_checkpoint(directory, cfg, weights, inf_spelling="__float__") -> directory
    config.json + model.safetensors as Hugging Face writes them.
init_state(cfg, batch) -> state            the fresh (all-zero) decode state.
forward(weights, cfg, ids, state=None, weight_format="float32", variant=())
        -> (logits (B, L, V) float32, new_state)
    weights: {name: float32 ndarray} named as in the checkpoint (``lm_head.weight`` is
    ignored when tied); cfg: load_config's dict or a raw config.json dict; ids: (B, L)
    integers; state: None (fresh) or a previous call's new_state (never modified).
    variant: names of deliberate rule changes, for the sensitivity tests only
    ("norm_chain": M-4's chain for the S-10 norms; "conv_bias_last": S-13's bias added
    after the taps; "seg_diff": S-21's segment sums as sub(cs[i], cs[j])).
materialize(w, weight_format)              S-30 / M-26 for one block projection matrix.
Building blocks: rmsnorm_lanes (S-10), final_norm (S-11), log1p / softplus (S-14),
silu (S-1), clamp (S-19), conv_causal (S-13), dot_v1 (S-2), mamba1_mixer (S-16 .. S-18),
mamba2_mixer (S-19 .. S-25), ssd (S-20 .. S-24, S-28).

STATE LAYOUT (S-26, S-27)
-------------------------
A state is a list with one dict per layer, in layer order. Every array is float32 (C order),
B the batch size:

Mamba-1 layer:  {"conv": (B, di, 4), "h": (B, di, 16)}
  conv[b, c, :]  channel c's last four pre-conv values (in_proj columns [0, di)), oldest
                 first; the next call reads conv[b, c, 1:4] as positions -3, -2, -1
                 (zeros when fresh). h[b, c, n]: the selective-scan state after the last
                 token.
Mamba-2 layer:  {"conv": (B, CD, 4), "h": (B, H, 64, 128), "xbc": (B, 256, CD),
                 "dt": (B, 256, H), "q": int}
  conv           as Mamba-1 over the CD = di + 256 raw xBC channels (in_proj columns
                 [di, di + CD)).
  h[b, head, p, n]  the SSM state after the last COMPLETED chunk (zeros before one completes).
  q              rows in the open chunk: (tokens seen) mod 256, the same for every row.
  xbc[b, i, :]   open-chunk row i (i < q): post-SiLU conv output (x [0, di), B [di, di+128),
                 C [di+128, di+256)); rows i >= q are +0.
  dt[b, i, head] open-chunk row i (i < q): the raw dt, in_proj columns [di + CD, di + CD + H)
                 before dt_bias / softplus / clamp (S-19 recomputes it: the same bits as
                 holding S-19's dt, S-27); rows i >= q are +0.
The state after a partial chunk is not held (S-27: only a report). A step is a call with
L = 1 (S-26, S-28); here it rebuilds the open chunk's Xd, dA, cs and segment sums from the
held rows and computes only its own output row (the same bits as S-28's incremental form,
which keeps cs[q-1] and the last segment-sum row instead).

READINGS OF THE RULES (where a rule leaves a choice open; see the module's tests)
- S-22: a diagonal-block cell j > i is folded as fma(+0, +0, acc), i.e. an exact +0 added,
  in prefill and decode alike; the contraction always runs all 256 positions (two leaves of
  128, then one add).
- S-19 clamp: zeros are ordered -0 < +0 (total order); a NaN dt passes through (IEEE
  comparisons), the bounds are never NaN (refused by load_config).
- S-6: a fixed field that is absent is taken at its fixed value (the oracle refuses only
  present wrong values); Mamba-1's time_step_limit is ignored (no clamp).
- S-14 log1p's small branch runs M-8's steps with the exponent f32(0) (the two fma with e
  are kept; they change nothing).
"""
from __future__ import annotations

import json
import math
import os

import numpy as np

try:
    import model_oracle as MO
    import oracle as O
except ImportError:  # imported as tests.mamba_oracle
    from tests import model_oracle as MO
    from tests import oracle as O

F = np.float32
EPS = F(1e-5)  # S-3: 0x3727C5AC
LOG1P_SMALL = np.array([0x3ED413CD], dtype=np.uint32).view(np.float32)[0]  # S-14
K_CONV = 4
Q_CHUNK = 256
VARIANTS = frozenset({"norm_chain", "conv_bias_last", "seg_diff"})


# ----------------------------------------------------------------- S-1 operations
def ftz(x):
    """A float32 subnormal becomes the zero of its sign (a copy)."""
    return MO.ftz(x)


def mul(a, b):
    return MO.mul(ftz(a), ftz(b))


def add(a, b):
    return MO.add(ftz(a), ftz(b))


def div(a, b):
    return MO.div(ftz(a), ftz(b))


def fma(a, b, c):
    return MO.fma(ftz(a), ftz(b), ftz(c))


def neg(x):
    """Flips the sign bit (S-1)."""
    return np.negative(ftz(x))


def sub(a, b):
    return add(a, neg(b))


def sqrt(x):
    return ftz(MO.sqrt(ftz(x)))


def expf(x):
    return ftz(MO.expf(ftz(x)))


def logf(x):
    return ftz(MO.logf(ftz(x)))


def silu(z):
    """S-1: div(z, add(expf(neg(z)), 1)), one division (M-17)."""
    z = ftz(z)
    return div(z, add(expf(neg(z)), F(1)))


# ----------------------------------------------------------------- S-14
_LOG_C = [-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
          -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1]


def _log_poly_exp0(t):
    """M-8's polynomial and recombination on t with the exponent f32(0)."""
    z = mul(t, t)
    p = np.full_like(t, F(7.0376836292e-2))
    for c in _LOG_C:
        p = fma(p, t, F(c))
    y = mul(mul(t, z), p)
    fe = np.zeros_like(t)
    y = fma(fe, F(-2.12194440e-4), y)
    y = fma(F(-0.5), z, y)
    r = add(t, y)
    return fma(fe, F(0.693359375), r)


def log1p(e):
    """S-14 for e >= 0 (read flushed): +0 -> +0; e <= 0x3ED413CD: M-8's polynomial on
    t = e, exponent 0; otherwise logf(add(e, 1))."""
    e = ftz(np.asarray(e, dtype=np.float32))
    small = e <= LOG1P_SMALL
    out = np.where(small, _log_poly_exp0(e), logf(add(e, F(1))))
    out = np.where(e == 0, F(0), out)  # +0 gives +0
    return ftz(out.astype(np.float32))


def softplus(x):
    """S-14: x if x > 20, else log1p(expf(x))."""
    x = ftz(np.asarray(x, dtype=np.float32))
    return ftz(np.where(x > F(20), x, log1p(expf(x))).astype(np.float32))


# ----------------------------------------------------------------- S-2 reductions
def dot_v1(a, b):
    """fp32.v1 contraction over the last axis of a and b (leading axes broadcast): leaves of
    O.leaf_size(k) steps, each an ascending fma chain from +0, joined by the balanced
    pairwise tree (k <= 128: one chain)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    k = a.shape[-1]
    assert b.shape[-1] == k
    return _dot_steps(k, lambda j: (a[..., j], b[..., j]))


def _dot_steps(k, term):
    """fp32.v1 over k steps; term(j) gives the j-th operand pair (broadcastable arrays)."""
    leaf = O.leaf_size(k)
    parts = []
    for s in range(0, k, leaf):
        acc = None
        for j in range(s, min(s + leaf, k)):
            x, y = term(j)
            if acc is None:
                acc = np.zeros(np.broadcast_shapes(np.shape(x), np.shape(y)), dtype=np.float32)
            acc = fma(x, y, acc)
        parts.append(acc)
    while len(parts) > 1:
        nxt = [add(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
        if len(parts) % 2:
            nxt.append(parts[-1])
        parts = nxt
    return parts[0]


def proj(x, w):
    """S-12: dot(k) of rows x (..., k) with a weight w stored (out, in): fp32.v1 of
    x @ w.T. Computed by dot_v1 (k steps, where oracle.gemm_fp32_v1_nt always runs 128
    masked steps a leaf: the same bits, checked in the tests, 4x faster at k = 32)."""
    x = np.asarray(x, dtype=np.float32)
    w = np.asarray(w, dtype=np.float32)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    out = dot_v1(x2[:, None, :], w[None, :, :])
    return out.reshape(*lead, w.shape[0])


# ----------------------------------------------------------------- S-10 / S-11 norms
def rmsnorm_lanes(x, w, eps=EPS):
    """S-10 over the last axis of x (width n): lane k = 0..31 is an fma chain over
    j = k, k+32, ... from +0; the 32 partials fold pairwise in lane order (five levels);
    mean = div(sumsq, n); rstd = div(1, sqrt(add(mean, eps))); y = mul(w, mul(x, rstd))."""
    x = ftz(np.asarray(x, dtype=np.float32))
    n = x.shape[-1]
    lead = x.shape[:-1]
    acc = np.zeros(lead + (32,), dtype=np.float32)
    for s in range(0, n, 32):
        cnt = min(32, n - s)
        blk = x[..., s:s + cnt]
        acc[..., :cnt] = fma(blk, blk, acc[..., :cnt])
    while acc.shape[-1] > 1:
        acc = add(acc[..., 0::2], acc[..., 1::2])
    sumsq = acc[..., 0]
    mean = div(sumsq, F(n))
    rstd = div(F(1), sqrt(add(mean, F(eps))))
    return mul(ftz(w), mul(x, rstd[..., None]))


def rmsnorm_chain(x, w, eps=EPS):
    """M-4 (one serial fma chain) over the last axis: S-11's final norm."""
    x = ftz(np.asarray(x, dtype=np.float32))
    return MO.rmsnorm(x.reshape(-1, x.shape[-1]), ftz(w), F(eps)).reshape(x.shape)


final_norm = rmsnorm_chain


def _block_norm(x, w, eps, variant):
    return rmsnorm_chain(x, w, eps) if "norm_chain" in variant else rmsnorm_lanes(x, w, eps)


# ----------------------------------------------------------------- S-13 conv
def conv_causal(x, w, bias, window=None, bias_last=False):
    """S-13 causal depthwise conv. x (B, L, C) pre-conv values, w (C, 4) (or (C, 1, 4)),
    bias (C,), window (B, C, 4) (None: zeros). Per channel and position:
    acc = bias; for k = 0..3: acc = fma(w[c, k], x[l - 3 + k], acc); positions before the
    call come from window[:, :, 1:]. Returns (out (B, L, C), new_window (B, C, 4): the last
    four pre-conv values, oldest first). bias_last: the variant that adds the bias after
    the taps (for the sensitivity test)."""
    x = ftz(np.asarray(x, dtype=np.float32))
    Bn, L, C = x.shape
    w = ftz(np.asarray(w, dtype=np.float32).reshape(C, K_CONV))
    bias = ftz(np.asarray(bias, dtype=np.float32))
    if window is None:
        window = np.zeros((Bn, C, K_CONV), dtype=np.float32)
    window = ftz(window)
    hist = np.concatenate([window.transpose(0, 2, 1), x], axis=1)  # (B, 4 + L, C)
    acc = np.zeros((Bn, L, C), dtype=np.float32) if bias_last else \
        np.broadcast_to(bias, (Bn, L, C)).astype(np.float32)
    for k in range(K_CONV):
        # x[l - 3 + k] is hist[1 + l + k]
        acc = fma(w[:, k], hist[:, 1 + k:1 + k + L, :], acc)
    if bias_last:
        acc = add(acc, bias)
    new_window = np.ascontiguousarray(hist[:, -K_CONV:, :].transpose(0, 2, 1))
    return acc, new_window


# ----------------------------------------------------------------- S-19 clamp
def _gt(a, b):
    """a > b, with -0 < +0 (a total order on the zeros); NaN compares false."""
    return (a > b) | ((a == 0) & (b == 0) & ~np.signbit(a) & np.signbit(b))


def clamp(v, lo, hi):
    """S-19: v = x; if lo > v: v = lo; if hi < v: v = hi (flushed operands)."""
    v = ftz(np.asarray(v, dtype=np.float32))
    lo = ftz(np.asarray(lo, dtype=np.float32))
    hi = ftz(np.asarray(hi, dtype=np.float32))
    v = np.where(_gt(lo, v), lo, v).astype(np.float32)
    v = np.where(_gt(v, hi), hi, v).astype(np.float32)
    return v


# ----------------------------------------------------------------- config (S-6, S-7)
def _to_float(v, field):
    """One config number: int/float, or +-inf however spelled (S-7)."""
    if isinstance(v, dict) and set(v) == {"__float__"}:
        v = v["__float__"]
    if isinstance(v, bool):
        raise ValueError(f"{field}: {v!r} is not a number")
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise ValueError(f"{field}: {v!r} is not a number") from None
    if not isinstance(v, (int, float)):
        raise ValueError(f"{field}: {v!r} is not a number")
    return float(v)


def parse_time_step_limit(v):
    """S-7: (lo, hi), each rounded once to float32; absent (0, +inf); NaN refused."""
    if v is None:
        return F(0.0), F(np.inf)
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise ValueError(f"time_step_limit: {v!r} is not a pair")
    out = []
    for i, x in enumerate(v):
        f = _to_float(x, f"time_step_limit[{i}]")
        if math.isnan(f):
            raise ValueError(f"time_step_limit[{i}] is NaN")
        with np.errstate(over="ignore"):
            out.append(F(f))
    return out[0], out[1]


def _fixed(d, field, want, present_ok=None):
    if field not in d or d[field] is None:
        return
    v = d[field]
    if present_ok is not None:
        if not present_ok(v):
            raise ValueError(f"{field} is {v!r}; only {want!r} is computed")
        return
    if isinstance(want, float):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and F(v) == F(want)
    else:
        ok = type(v) is type(want) and v == want
    if not ok:
        raise ValueError(f"{field} is {v!r}; only {want!r} is computed")


def load_config(d):
    """S-6 / S-7: the sizes of a Hugging Face mamba / mamba2 config.json dict; refuses the
    values S-6 refuses (ValueError; an unknown model_type NotImplementedError)."""
    if isinstance(d, dict) and "family" in d:
        return d
    mt = d.get("model_type")
    if mt not in ("mamba", "mamba2"):
        raise NotImplementedError(f"model_type {mt!r}: only 'mamba' and 'mamba2'")
    for f in ("hidden_size", "num_hidden_layers", "vocab_size"):
        v = d.get(f)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{f} is {v!r}; a positive integer is needed")
    dm = d["hidden_size"]
    di = 2 * dm
    tied = d.get("tie_word_embeddings", True)
    if tied is None:
        tied = True
    if not isinstance(tied, bool):
        raise ValueError(f"tie_word_embeddings is {tied!r}")
    fam = "mamba1" if mt == "mamba" else "mamba2"
    N = 16 if fam == "mamba1" else 128
    _fixed(d, "state_size", N)
    _fixed(d, "expand", 2)
    _fixed(d, "intermediate_size", di)
    _fixed(d, "conv_kernel", K_CONV)
    _fixed(d, "layer_norm_epsilon", 1e-5)
    _fixed(d, "hidden_act", "silu")
    _fixed(d, "use_bias", False)
    _fixed(d, "use_conv_bias", True)
    cfg = dict(family=fam, model_type=mt, d=dm, di=di, n_layers=d["num_hidden_layers"],
               vocab=d["vocab_size"], tied=tied, K=K_CONV, eps=EPS, N=N, hf=dict(d))
    if fam == "mamba1":
        r = -(-dm // 16)
        _fixed(d, "time_step_rank", r, present_ok=lambda v: v == "auto" or (
            isinstance(v, int) and not isinstance(v, bool) and v == r))
        cfg["r"] = r
    else:
        if dm % 32:
            raise ValueError(f"hidden_size {dm}: Mamba-2 needs a multiple of 32")
        H = di // 64
        _fixed(d, "n_groups", 1)
        _fixed(d, "head_dim", 64)
        _fixed(d, "num_heads", H)
        _fixed(d, "chunk_size", Q_CHUNK)
        _fixed(d, "rms_norm", True)
        _fixed(d, "norm_before_gate", False)
        cfg.update(P=64, H=H, CD=di + 2 * N, Q=Q_CHUNK,
                   dt_limit=parse_time_step_limit(d.get("time_step_limit")))
    return cfg


def make_config(model_type, hidden_size, num_hidden_layers, vocab_size, *,
                tie_word_embeddings=True, time_step_limit=None):
    """A config.json dict (every S-6 field written) as transformers saves one."""
    dm = hidden_size
    d = {"model_type": model_type, "hidden_size": dm, "num_hidden_layers": num_hidden_layers,
         "vocab_size": vocab_size, "tie_word_embeddings": tie_word_embeddings,
         "expand": 2, "conv_kernel": K_CONV, "layer_norm_epsilon": 1e-5, "hidden_act": "silu",
         "use_bias": False, "use_conv_bias": True, "residual_in_fp32": True,
         "dtype": "float32", "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
    if model_type == "mamba":
        d.update(architectures=["MambaForCausalLM"], state_size=16,
                 intermediate_size=2 * dm, time_step_rank=-(-dm // 16))
    elif model_type == "mamba2":
        d.update(architectures=["Mamba2ForCausalLM"], state_size=128, n_groups=1,
                 head_dim=64, num_heads=2 * dm // 64, chunk_size=Q_CHUNK,
                 time_step_limit=list(time_step_limit) if time_step_limit is not None
                 else [0.0, float("inf")])
    else:
        raise NotImplementedError(model_type)
    load_config(d)
    return d


# ----------------------------------------------------------------- weights
def _layer_shapes(cfg):
    dm, di, N = cfg["d"], cfg["di"], cfg["N"]
    if cfg["family"] == "mamba1":
        r = cfg["r"]
        return {"norm.weight": (dm,), "mixer.in_proj.weight": (2 * di, dm),
                "mixer.conv1d.weight": (di, 1, K_CONV), "mixer.conv1d.bias": (di,),
                "mixer.x_proj.weight": (r + 2 * N, di), "mixer.dt_proj.weight": (di, r),
                "mixer.dt_proj.bias": (di,), "mixer.A_log": (di, N), "mixer.D": (di,),
                "mixer.out_proj.weight": (dm, di)}
    H, CD = cfg["H"], cfg["CD"]
    return {"norm.weight": (dm,), "mixer.in_proj.weight": (2 * di + 2 * N + H, dm),
            "mixer.conv1d.weight": (CD, 1, K_CONV), "mixer.conv1d.bias": (CD,),
            "mixer.dt_bias": (H,), "mixer.A_log": (H,), "mixer.D": (H,),
            "mixer.norm.weight": (di,), "mixer.out_proj.weight": (dm, di)}


def expected_shapes(cfg):
    """{name: shape} of a checkpoint for cfg (S-4 / S-5)."""
    cfg = load_config(cfg)
    out = {"backbone.embeddings.weight": (cfg["vocab"], cfg["d"]),
           "backbone.norm_f.weight": (cfg["d"],)}
    for i in range(cfg["n_layers"]):
        for k, s in _layer_shapes(cfg).items():
            out[f"backbone.layers.{i}.{k}"] = s
    if not cfg["tied"]:
        out["lm_head.weight"] = (cfg["vocab"], cfg["d"])
    return out


PROJECTIONS = {"mamba1": ("in_proj.weight", "x_proj.weight", "dt_proj.weight", "out_proj.weight"),
               "mamba2": ("in_proj.weight", "out_proj.weight")}


def random_weights(cfg, seed=0, scale=1.0):
    """A random float32 checkpoint for cfg: embedding N(0, 1); norm weights 1 + N(0, 0.1);
    projections N(0, 1/k) times scale; conv weights U(-0.5, 0.5), biases N(0, 0.1);
    A_log = log(U(1, 16)); D = U(0.5, 1.5); dt biases the inverse softplus of
    exp(U(log 1e-3, log 1e-1)) (computed in float64, then rounded: data, not the forward)."""
    cfg = load_config(cfg)
    rng = np.random.default_rng(seed)
    f = np.float32

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(f)

    def inv_softplus_dt(n):
        dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), n))
        return (dt + np.log(-np.expm1(-dt))).astype(f)

    w = {}
    for name, shape in expected_shapes(cfg).items():
        leaf = name.split("mixer.")[-1]
        if name == "backbone.embeddings.weight":
            w[name] = normal(shape, 1.0)
        elif name == "lm_head.weight":
            w[name] = normal(shape, 1.0 / math.sqrt(shape[1]))
        elif name.endswith("norm.weight") or name.endswith("norm_f.weight"):
            w[name] = (1.0 + rng.standard_normal(shape) * 0.1).astype(f)
        elif leaf in PROJECTIONS[cfg["family"]]:
            std = 1.0 / math.sqrt(shape[1])
            if leaf == "dt_proj.weight":
                std *= 0.5
            w[name] = normal(shape, std * scale)
        elif leaf == "conv1d.weight":
            w[name] = rng.uniform(-0.5, 0.5, shape).astype(f)
        elif leaf == "conv1d.bias":
            w[name] = normal(shape, 0.1)
        elif leaf == "A_log":
            w[name] = np.log(rng.uniform(1.0, 16.0, shape)).astype(f)
        elif leaf == "D":
            w[name] = rng.uniform(0.5, 1.5, shape).astype(f)
        elif leaf in ("dt_proj.bias", "dt_bias"):
            w[name] = inv_softplus_dt(shape[0])
        else:
            raise AssertionError(name)
    return w


def _json_with_inf(obj, spelling):
    def enc(v):
        if isinstance(v, float) and math.isinf(v):
            s = "Infinity" if v > 0 else "-Infinity"
            if spelling == "__float__":
                return {"__float__": s}
            if spelling == "inf":
                return "inf" if v > 0 else "-inf"
            return v
        if isinstance(v, dict):
            return {k: enc(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [enc(x) for x in v]
        return v

    text = json.dumps(enc(obj), indent=2, sort_keys=True)
    if spelling == "1e999":
        text = text.replace("-Infinity", "-1e999").replace("Infinity", "1e999")
    return text


def write_checkpoint(directory, cfg, weights, inf_spelling="__float__"):
    """config.json and model.safetensors in directory, as transformers' save_pretrained
    writes them (float32 tensors, metadata format "pt"). cfg: a config.json dict or
    load_config's dict. inf_spelling: how an infinite time_step_limit bound is written
    ("__float__": transformers' {"__float__": "Infinity"}; "Infinity": Python's json;
    "inf": a string; "1e999": an overflowing number)."""
    from safetensors.numpy import save_file

    hf = cfg["hf"] if "family" in cfg else cfg
    load_config(hf)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as fh:
        fh.write(_json_with_inf(hf, inf_spelling) + "\n")
    tensors = {k: np.ascontiguousarray(np.asarray(v, dtype=np.float32)) for k, v in weights.items()}
    save_file(tensors, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    return directory


def materialize(w, weight_format):
    """S-30 / M-26: a block projection matrix stored as weight_format, materialized once to
    float32 (bfloat16: from_bf16(to_bf16(W)); int8: dequantize_int8(quantize_int8(W)))."""
    if weight_format not in ("float32", "bfloat16", "int8"):
        raise ValueError(f"weight_format {weight_format!r}: float32, bfloat16 or int8")
    return MO.materialize(np.asarray(w, dtype=np.float32), weight_format)


def _prepare(weights, cfg, weight_format):
    """Checks names, shapes and dtypes; flushes every tensor as read (S-1); materializes the
    block projection matrices (S-30)."""
    want = expected_shapes(cfg)
    W = {}
    for name, shape in want.items():
        if name not in weights:
            raise ValueError(f"missing tensor {name}")
        v = np.asarray(weights[name])
        if v.dtype != np.float32:
            raise TypeError(f"{name} is {v.dtype}, not float32")
        if v.shape != shape:
            raise ValueError(f"{name} has shape {v.shape}, not {shape}")
        W[name] = ftz(v)
    extra = set(weights) - set(want) - {"lm_head.weight"}
    if extra:
        raise ValueError(f"unexpected tensors {sorted(extra)}")
    projs = PROJECTIONS[cfg["family"]]
    for name in list(W):
        if name.startswith("backbone.layers.") and name.split("mixer.")[-1] in projs \
                and ".mixer." in name:
            W[name] = materialize(W[name], weight_format)
    return W


# ----------------------------------------------------------------- state
def init_state(cfg, batch):
    """The fresh decode state (all zeros, q = 0); layout in the module docstring."""
    cfg = load_config(cfg)
    di, N = cfg["di"], cfg["N"]
    out = []
    for _ in range(cfg["n_layers"]):
        if cfg["family"] == "mamba1":
            out.append({"conv": np.zeros((batch, di, K_CONV), np.float32),
                        "h": np.zeros((batch, di, N), np.float32)})
        else:
            H, CD, Q = cfg["H"], cfg["CD"], cfg["Q"]
            out.append({"conv": np.zeros((batch, CD, K_CONV), np.float32),
                        "h": np.zeros((batch, H, 64, N), np.float32),
                        "xbc": np.zeros((batch, Q, CD), np.float32),
                        "dt": np.zeros((batch, Q, H), np.float32), "q": 0})
    return out


def _check_state(state, cfg, batch):
    ref = init_state(cfg, batch)
    if not isinstance(state, (list, tuple)) or len(state) != len(ref):
        raise ValueError("state: one dict per layer expected")
    for i, (s, r) in enumerate(zip(state, ref)):
        if set(s) != set(r):
            raise ValueError(f"state[{i}] keys {sorted(s)} != {sorted(r)}")
        for k, v in r.items():
            if k == "q":
                q = s[k]
                if not isinstance(q, (int, np.integer)) or not 0 <= int(q) < Q_CHUNK:
                    raise ValueError(f"state[{i}]['q'] is {q!r}")
                continue
            a = np.asarray(s[k])
            if a.dtype != np.float32:
                raise TypeError(f"state[{i}][{k!r}] is {a.dtype}, not float32")
            if a.shape != v.shape:
                raise ValueError(f"state[{i}][{k!r}] has shape {a.shape}, not {v.shape}")


# ----------------------------------------------------------------- Mamba-1 (S-16 .. S-18)
def mamba1_mixer(p, cfg, xn, st, variant=()):
    """S-16 .. S-18. p: the layer's mixer tensors without the "mixer." prefix (in_proj.weight,
    conv1d.weight, conv1d.bias, x_proj.weight, dt_proj.weight, dt_proj.bias, A_log, D,
    out_proj.weight), materialized and flushed; xn (B, L, d): the block norm's output;
    st: the layer state {"conv", "h"}. Returns (out (B, L, d), new layer state)."""
    Bn, L, _ = xn.shape
    di, N, r = cfg["di"], cfg["N"], cfg["r"]
    xz = proj(xn, p["in_proj.weight"])                       # dot(k = d)
    xc, z = xz[..., :di], xz[..., di:]
    conv, window = conv_causal(xc, p["conv1d.weight"], p["conv1d.bias"], st["conv"],
                               bias_last="conv_bias_last" in variant)
    u = silu(conv)                                            # (B, L, di)
    xp = proj(u, p["x_proj.weight"])                          # dot(k = di)
    dt_low, Bm, Cm = xp[..., :r], xp[..., r:r + N], xp[..., r + N:r + 2 * N]
    delta = softplus(add(proj(dt_low, p["dt_proj.weight"]), p["dt_proj.bias"]))  # S-16
    A = neg(expf(p["A_log"]))                                 # S-15, (di, N)
    h = ftz(st["h"]).copy()                                   # (B, di, N)
    y = np.empty((Bn, L, di), dtype=np.float32)
    for t in range(L):                                        # S-17, tokens in order
        dl = delta[:, t, :, None]                             # (B, di, 1)
        da = expf(mul(dl, A[None]))
        db = mul(dl, Bm[:, t, None, :])
        dbu = mul(db, u[:, t, :, None])
        h = fma(da, h, dbu)
        acc = np.zeros((Bn, di), dtype=np.float32)
        for n in range(N):                                    # y: n ascending from +0
            acc = fma(Cm[:, t, n, None], h[:, :, n], acc)
        y[:, t] = acc
    s = add(y, mul(u, p["D"]))                                # S-18
    g = mul(s, silu(z))
    out = proj(g, p["out_proj.weight"])                       # dot(k = di)
    return out, {"conv": window, "h": h}


# ----------------------------------------------------------------- Mamba-2 (S-19 .. S-25)
def ssd(x, dt, Bm, Cm, A, h, q0, variant=()):
    """S-20 .. S-24 and S-28 for one batch row over the working sequence (T rows: the q0
    open-chunk rows held in the state, then the call's own rows).
    x (T, H, P) post-SiLU x; dt (T, H) after S-19; Bm, Cm (T, N); A (H,); h (H, P, N) the
    state entering the first chunk. Returns (Y (T - q0, H, P) for the call's rows, h after
    the last completed chunk)."""
    T, H, P = x.shape
    N = Bm.shape[1]
    Q = Q_CHUNK
    Y = np.empty((T - q0, H, P), dtype=np.float32)
    h = ftz(h)
    for c0 in range(0, T, Q):
        real = min(Q, T - c0)
        rows = np.arange(max(q0 - c0, 0), real)               # the call's rows in this chunk
        sl = slice(c0, c0 + real)
        # S-21: discretize first (dt binds to x and A)
        Xd = np.zeros((Q, H, P), dtype=np.float32)
        Xd[:real] = mul(x[sl], dt[sl][:, :, None])
        dA = mul(dt[sl], A[None, :])                          # (real, H)
        Bp = np.zeros((Q, N), dtype=np.float32)
        Bp[:real] = ftz(Bm[sl])
        Cp = np.zeros((Q, N), dtype=np.float32)
        Cp[:real] = ftz(Cm[sl])
        cs = np.empty((Q, H), dtype=np.float32)
        cs[0] = dA[0]
        for i in range(1, real):
            cs[i] = add(cs[i - 1], dA[i])
        cs[real:] = cs[real - 1]                              # rows past real: the last value
        # segment sums rebuilt row by row: seg(i, i) = +0, seg(i, j) = add(seg(i-1, j), dA[i])
        seg = np.zeros((Q, Q, H), dtype=np.float32)
        if "seg_diff" in variant:
            for i in range(real):
                seg[i, :i] = sub(cs[i][None, :], cs[:i])
        else:
            for i in range(1, real):
                seg[i, :i] = add(seg[i - 1, :i], dA[i][None, :])
        tri = np.arange(Q)[None, :] <= np.arange(Q)[:, None]  # j <= i
        Lm = np.where(tri[:, :, None], expf(seg), F(0)).astype(np.float32)  # (Q, Q, H)
        if rows.size:
            # S-22 diagonal block: G = dot(k = 128) of C and B over n
            G = _dot_steps(N, lambda n: (Cp[rows, n][:, None], Bp[None, :, n]))  # (nr, Q)
            keep = np.arange(Q)[None, :] <= rows[:, None]     # (nr, Q): j <= i
            Mx = np.where(keep[:, :, None], mul(G[:, :, None], Lm[rows]), F(0)).astype(np.float32)
            zero = np.zeros((rows.size, H, P), dtype=np.float32)

            def yd_term(j):
                # a cell j > i contributes fma(+0, +0, acc): an exact +0
                xj = np.where(keep[:, j, None, None], Xd[j][None], zero)
                return Mx[:, j, :, None], xj

            Yd = _dot_steps(Q, yd_term)                       # (nr, H, P), k = 256
            # S-24: contract C with h_prev over n first, then scale by expf(cs[i])
            CH = _dot_steps(N, lambda n: (Cp[rows, n][:, None, None], h[None, :, :, n]))
            Yo = mul(CH, expf(cs[rows])[:, :, None])
            Y[c0 + rows - q0] = add(Yd, Yo)
        if real == Q:                                         # S-23: chunk state, state pass
            last = cs[Q - 1]                                  # (H,)
            decay = expf(sub(last[None, :], cs))              # (Q, H)
            Bd = mul(Bp[:, None, :], decay[:, :, None])       # (Q, H, N)
            S = _dot_steps(Q, lambda i: (Xd[i][:, :, None], Bd[i][:, None, :]))  # (H, P, N)
            h = fma(expf(last)[:, None, None], h, S)
    return Y, h


def mamba2_mixer(p, cfg, xn, st, variant=()):
    """S-19 .. S-25, S-27, S-28. p: the layer's mixer tensors without the "mixer." prefix
    (in_proj.weight, conv1d.weight, conv1d.bias, dt_bias, A_log, D, norm.weight -- the
    GATED norm --, out_proj.weight), materialized and flushed; xn (B, L, d); st: the layer
    state. Returns (out (B, L, d), new layer state)."""
    Bn, L, _ = xn.shape
    di, N, H, P, CD, Q = cfg["di"], cfg["N"], cfg["H"], cfg["P"], cfg["CD"], cfg["Q"]
    lo, hi = cfg["dt_limit"]
    zx = proj(xn, p["in_proj.weight"])                        # dot(k = d)
    z, xBC, dt_raw = zx[..., :di], zx[..., di:di + CD], zx[..., di + CD:]
    conv, window = conv_causal(xBC, p["conv1d.weight"], p["conv1d.bias"], st["conv"],
                               bias_last="conv_bias_last" in variant)
    xbc = silu(conv)                                          # (B, L, CD)
    A = neg(expf(p["A_log"]))                                 # S-15, (H,)
    q0 = int(st["q"])
    T = q0 + L
    qn = T % Q
    Y = np.empty((Bn, L, H, P), dtype=np.float32)
    h_new = np.empty((Bn, H, P, N), dtype=np.float32)
    xbc_state = np.zeros((Bn, Q, CD), dtype=np.float32)
    dt_state = np.zeros((Bn, Q, H), dtype=np.float32)
    for b in range(Bn):
        wx = np.concatenate([ftz(st["xbc"][b, :q0]), xbc[b]], axis=0)      # (T, CD)
        wdt = np.concatenate([ftz(st["dt"][b, :q0]), dt_raw[b]], axis=0)   # (T, H)
        dt = clamp(softplus(add(wdt, p["dt_bias"][None, :])), lo, hi)      # S-19
        xh = wx[:, :di].reshape(T, H, P)
        Bm, Cm = wx[:, di:di + N], wx[:, di + N:di + 2 * N]
        Y[b], h_new[b] = ssd(xh, dt, Bm, Cm, A, st["h"][b], q0, variant)
        xbc_state[b, :qn] = wx[T - qn:]
        dt_state[b, :qn] = wdt[T - qn:]
    xcur = xbc[..., :di].reshape(Bn, L, H, P)
    s = add(Y, mul(xcur, p["D"][:, None]))                    # S-25: D added last
    g = mul(s.reshape(Bn, L, di), silu(z))                    # the gate before the norm
    gn = _block_norm(g, p["norm.weight"], cfg["eps"], variant)  # S-10, gated norm weight
    out = proj(gn, p["out_proj.weight"])                      # dot(k = di)
    return out, {"conv": window, "h": h_new, "xbc": xbc_state, "dt": dt_state, "q": qn}


# ----------------------------------------------------------------- S-8 / S-9
def forward(weights, cfg, ids, state=None, weight_format="float32", variant=()):
    """S-8 / S-9: logits (B, L, V) float32 and the new state (one dict per layer)."""
    cfg = load_config(cfg)
    variant = frozenset(variant)
    if variant - VARIANTS:
        raise ValueError(f"unknown variant {sorted(variant - VARIANTS)}")
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.shape[1] < 1 or ids.shape[0] < 1 or ids.dtype.kind not in "iu":
        raise ValueError("ids must be a (B, L) integer array with B, L >= 1")
    if ids.min() < 0 or ids.max() >= cfg["vocab"]:
        raise ValueError("token id out of range")
    Bn, L = ids.shape
    W = _prepare(weights, cfg, weight_format)
    if state is None:
        state = init_state(cfg, Bn)
    _check_state(state, cfg, Bn)
    mixer = mamba1_mixer if cfg["family"] == "mamba1" else mamba2_mixer
    emb = W["backbone.embeddings.weight"]
    x = emb[ids].copy()                                       # M-2: the exact rows
    new_state = []
    for li in range(cfg["n_layers"]):
        pre = f"backbone.layers.{li}."
        p = {k[len(pre) + len("mixer."):]: v for k, v in W.items() if k.startswith(pre + "mixer.")}
        xn = _block_norm(x, W[pre + "norm.weight"], cfg["eps"], variant)  # S-10
        m, ns = mixer(p, cfg, xn, state[li], variant)
        x = add(x, m)                                         # S-9
        new_state.append(ns)
    hN = final_norm(x, W["backbone.norm_f.weight"], cfg["eps"])  # S-11: M-4
    head = emb if cfg["tied"] else W["lm_head.weight"]
    logits = proj(hN, head)                                   # dot(k = d)
    return logits.reshape(Bn, L, cfg["vocab"]).astype(np.float32), new_state
