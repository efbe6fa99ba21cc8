"""Independent numpy oracle of the training primitives under fp32_v1, written from the
reference rules T-1 .. T-46 (training arithmetic v1) and the contract's T-62, the M-rules
they cite (M-4 RMSNorm, M-5 sqrt, M-8 logf, M-13 rowmax, M-14 expf) and fp32.v1
(arithmetic v1). Slow and plain on purpose: float32 numpy arrays only, every operand
read flushed and every value written flushed (T-1), every serial loop in its rule's
order, vectorized only across independent outputs (and across the leaves of one
reduction, which are independent until the tree).
It imports nothing from ``mojolearn``.

Reused helpers: ``model_oracle`` (mul/add/div, the correctly rounded float32 fma
``oracle.fma_f32``, sqrt M-5, expf M-14, logf M-8) and ``oracle`` (leaf_size).

PUBLIC API (all arrays float32 unless said; nothing passed in is modified)
---------------------------------------------------------------------------
Reductions (T-2): dot(a, b, leaf=None) over the last axis (leading axes broadcast);
fold(x, leaf=None) over the last axis; chain(x) over the last axis; tree(parts) the
balanced pairwise tree with odd carry over the last axis.
linear_forward(a, w) (T-4); linear_backward(dc, a, w) -> (da, dw) (T-5, T-6).
rms_norm_forward(x, w, eps) (T-8 / M-4); rms_norm_backward(dy, x, w, eps) -> (dx, dw)
(T-9 .. T-11); head_norm_backward(dy, x, w, eps, heads, variant=()) -> (dx, dw) (T-62,
qwen3's per-head q / k norm).
softmax_backward(w, dp, scale, variant=()) (T-49, the attention's softmax backward; the
weights it takes are T-47's, model_oracle.attention_weights).
bias_backward(dy, variant=()) (T-7).
embedding_forward(weight, ids) (T-12); embedding_backward(dy, ids, vocab) (T-13).
cross_entropy(logits, targets, ignore_index=-100, reduction="mean", label_smoothing=0.0,
num_items=None, return_grad=False, variant=()) (T-14 .. T-18).
chunked_lm_head_loss(h, w, targets, return_grad=False, variant=()) -> loss or
(loss, dh, dw) (T-19 .. T-21).
clip_grad_norm(grads, max_norm) -> (total, clipped list) (T-23 .. T-25); raises
NonFinite when the total is not finite.
accumulate_grads(mgrads, variant=()) (T-26); aligned_split(tokens, A, strict=True) (T-27).
pw(b, t, variant=()) (T-30).
lr schedules (T-36 .. T-38): ConstantLR, WarmupLinearLR, WarmupCosineLR with .lr_at(t),
exact rational / mpmath arithmetic, one rounding to float32 at the end.
Optimizers (T-29 .. T-35, T-39): SGD, Adam, AdamW with step(grads, max_norm=None) ->
new params (the object keeps its own copies), state_dict(), load_state_dict(sd).

VARIANTS (deliberate single-rule changes, for the sabotage tests only)
- dot/fold ``leaf``: another leaf size than fp32.v1's L(k).
- cross_entropy ``variant``: "den_chain" (T-14's den as one chain), "lp_chain" (T-15).
- bias_backward ``variant``: "fold" (T-7 as fold(k = rows) instead of the chain).
- chunked_lm_head_loss ``variant``: "z_dot" (T-19's z by dot(k = width)), "den_fold"
  (T-19's den as fold(k = V)), "mean_chain" (T-20 as one chain over the rows),
  "grad_dot" (T-21's dH and dW by dot(k = V) / dot(k = rows)).
- accumulate_grads ``variant``: "running" (a running sum instead of T-26's tree).
- pw ``variant``: "running" (a running product instead of T-30's binary powering).
- rms_norm_backward ``variant``: "dw_chain" (T-11 as a chain over rows).
- head_norm_backward ``variant``: "heads_desc" (T-62's chain over the heads descending),
  "flat" (one fold over the tokens x heads rows instead of the per-token join).
- Adam ``variant``: "eps_inside" (T-31: eps inside the root).
- softmax_backward ``variant``: "desc" (T-49's chain over the keys descending).

READINGS (where the rules leave something open; see the report of the tests)
- T-15 / T-18: the gradient formula is used as written for every eps (at eps = 0 it gives
  w_v's bits: sub(w, +0) = w).
- T-17: reduction "sum" with num_items None or <= 0 divides by 1 (div(total, 1)).
- T-33: with momentum 0 there is no buffer; SGD's exp_avg stays +0.
- T-39: buf_initialized is 1 for a tensor once it has taken a momentum step (SGD) or any
  step (Adam, AdamW); the tests compare it only where the rules fix it (SGD with momentum).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

# T-1's operators (operands read flushed, results flushed) are S-1's: one home,
# tests/mamba_oracle.py
try:
    import oracle as O
    from mamba_oracle import add, div, expf, fma, ftz, logf, mul, neg, sqrt, sub  # noqa: F401
except ImportError:  # imported as tests.training_oracle
    from tests import oracle as O
    from tests.mamba_oracle import add, div, expf, fma, ftz, logf, mul, neg, sqrt, sub  # noqa: F401

F = np.float32


class NonFinite(ValueError):
    """The oracle's own refusal (T-41's non-finite clip total)."""


# ----------------------------------------------------------------- T-1 operations
def a32(x):
    return np.asarray(x, dtype=np.float32)


def rowmax(x):
    """M-13's maximum over the last axis, -0 ordered below +0 (no NaN reaches it here)."""
    x = ftz(x)
    m = np.max(x, axis=-1)
    pos_zero = np.any((x == 0) & ~np.signbit(x), axis=-1)
    m = np.where(m == 0, np.where(pos_zero, F(0.0), F(-0.0)), m)
    return a32(m)


# ----------------------------------------------------------------- T-2 reductions
def tree(parts):
    """fp32.v1 rule 4 over the last axis: add adjacent pairs (flushed), an odd last element
    carried unchanged to the next level, until one value remains."""
    level = a32(parts)
    while level.shape[-1] > 1:
        n = level.shape[-1]
        h = n // 2
        s = add(level[..., 0:2 * h:2], level[..., 1:2 * h:2])
        if n % 2:
            s = np.concatenate([s, level[..., n - 1:n]], axis=-1)
        level = a32(s)
    return level[..., 0]


def _leaves(x, L):
    """x (..., k) laid out as (..., nleaves, L); padding is never read (masked steps)."""
    k = x.shape[-1]
    nl = -(-k // L)
    pad = nl * L - k
    if pad:
        x = np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), np.float32)], axis=-1)
    return x.reshape(x.shape[:-1] + (nl, L)), nl


def dot(a, b, leaf=None):
    """T-2 dot(k): fp32.v1 over the last axis of a and b (leading axes broadcast). Leaves of
    L(k) (or ``leaf``), each acc = fma(a, b, acc) from +0 ascending (flushed), then tree."""
    a = ftz(a)
    b = ftz(b)
    k = a.shape[-1]
    assert b.shape[-1] == k and k >= 1
    L = O.leaf_size(k) if leaf is None else int(leaf)
    a4, nl = _leaves(a, L)
    b4, _ = _leaves(b, L)
    starts = np.arange(nl) * L
    acc = np.zeros(np.broadcast_shapes(a4.shape[:-1], b4.shape[:-1]), np.float32)
    for t in range(min(L, k)):
        valid = (starts + t) < k
        new = fma(a4[..., t], b4[..., t], acc)
        acc = np.where(valid, new, acc).astype(np.float32)
    return tree(acc)


def fold(x, leaf=None):
    """T-2 fold(k) over the last axis: per leaf acc = add(acc, x_i) from +0, then tree."""
    x = ftz(x)
    k = x.shape[-1]
    assert k >= 1
    L = O.leaf_size(k) if leaf is None else int(leaf)
    x4, nl = _leaves(x, L)
    starts = np.arange(nl) * L
    acc = np.zeros(x4.shape[:-1], np.float32)
    for t in range(min(L, k)):
        valid = (starts + t) < k
        acc = np.where(valid, add(acc, x4[..., t]), acc).astype(np.float32)
    return tree(acc)


def chain(x):
    """T-2 chain over the last axis: one serial add loop from +0, ascending."""
    x = ftz(x)
    acc = np.zeros(x.shape[:-1], np.float32)
    for i in range(x.shape[-1]):
        acc = add(acc, x[..., i])
    return acc


def softmax_backward(w, dp, scale, variant=()):
    """T-49 over the last axis (one row per leading index): c = chain over j ascending
    of fma(w_j, dp_j, c) from +0 (flushed at every step); ds_j = mul(mul(w_j,
    sub(dp_j, c)), scale). Variant "desc" (sabotage only): the chain descending."""
    w = ftz(w)
    dp = ftz(dp)
    c = np.zeros(w.shape[:-1], np.float32)
    order = range(w.shape[-1] - 1, -1, -1) if "desc" in variant else range(w.shape[-1])
    for j in order:
        c = fma(w[..., j], dp[..., j], c)
    return mul(mul(w, sub(dp, c[..., None])), np.float32(scale))


# ----------------------------------------------------------------- T-4 .. T-6 linear
def linear_forward(a, w, leaf=None):
    """T-4: y[..., n] = dot(k = K)(a[..., :], w[n, :]); w stored (N, K)."""
    a = ftz(a)
    w = ftz(w)
    K = a.shape[-1]
    a2 = a.reshape(-1, K)
    y = dot(a2[:, None, :], w[None, :, :], leaf)
    return y.reshape(a.shape[:-1] + (w.shape[0],))


def linear_backward(dc, a, w, leaf=None):
    """T-5: da = dC . W, dot(k = N); T-6: dW = dC^T . A, dot(k = M tokens)."""
    dc = ftz(dc)
    a = ftz(a)
    w = ftz(w)
    N, K = w.shape
    a2 = a.reshape(-1, K)
    d2 = dc.reshape(-1, N)
    da = dot(d2[:, None, :], np.ascontiguousarray(w.T)[None, :, :])
    dw = dot(np.ascontiguousarray(d2.T)[:, None, :], np.ascontiguousarray(a2.T)[None, :, :], leaf)
    return da.reshape(a.shape), dw


def bias_backward(dy, variant=()):
    """T-7: per output column a chain over the rows ascending, acc = add(acc, dy[r]) from
    +0 (dy (..., n), leading dims flattened to rows; a 1-D dy is one row)."""
    dy = ftz(dy)
    n = dy.shape[-1]
    cols = np.ascontiguousarray(dy.reshape(-1, n).T)            # (n, rows)
    if cols.shape[1] == 0:
        return np.zeros(n, np.float32)
    return fold(cols) if "fold" in variant else chain(cols)


# ----------------------------------------------------------------- T-8 .. T-11 RMSNorm
def _rstd(x2, eps):
    """M-4: acc = chain of fma(x, x, acc); mean = div(acc, f32(d));
    rstd = div(1, sqrt(add(mean, eps)))."""
    d = x2.shape[-1]
    acc = np.zeros(x2.shape[:-1], np.float32)
    for j in range(d):
        acc = fma(x2[:, j], x2[:, j], acc)
    mean = div(acc, F(d))
    return div(F(1), sqrt(add(mean, F(eps))))


def rms_norm_forward(x, w, eps):
    """T-8 / M-4 over the last axis (a 1-D x is one row): y = mul(w, mul(x, rstd))."""
    x = ftz(x)
    w = ftz(w)
    x2 = x.reshape(-1, x.shape[-1])
    rstd = _rstd(x2, F(eps))
    y = mul(w[None, :], mul(x2, rstd[:, None]))
    return y.reshape(x.shape)


def rms_norm_backward(dy, x, w, eps, variant=()):
    """T-9 .. T-11."""
    dy = ftz(dy)
    x = ftz(x)
    w = ftz(w)
    d = x.shape[-1]
    x2 = x.reshape(-1, d)
    dy2 = dy.reshape(-1, d)
    rows = x2.shape[0]
    rstd = _rstd(x2, F(eps))
    dh = mul(dy2, w[None, :])                                   # T-9
    c = np.zeros(rows, np.float32)
    for j in range(d):
        c = fma(dh[:, j], x2[:, j], c)
    r3 = mul(mul(rstd, rstd), rstd)                             # T-10
    dv = div(mul(F(-0.5), mul(c, r3)), F(d))
    dx = add(mul(dh, rstd[:, None]), mul(dv[:, None], mul(F(2), x2)))
    terms = mul(dy2, mul(x2, rstd[:, None]))                    # T-11, (rows, d)
    tt = np.ascontiguousarray(terms.T)                          # (d, rows)
    dw = chain(tt) if "dw_chain" in variant else fold(tt)
    return dx.reshape(x.shape), dw


def head_norm_backward(dy, x, w, eps, heads, variant=()):
    """T-62 (qwen3's per-head q / k RMSNorm): x, dy (tokens, heads * hd), w (hd,). Each
    (token, head) is a row of hd: dx by T-9, T-10. The weight gradient: per (token, head)
    row T-11's term mul(dy, mul(x, rstd)); per token the chain over the heads ascending,
    acc = add(acc, term_h) from +0; then fold(k = tokens) of those per-token terms.
    Variants (sabotage only): "heads_desc" (the heads' chain descending), "flat" (one
    fold over the tokens x heads rows, T-11 of the reshaped rows)."""
    dy = ftz(dy)
    x = ftz(x)
    w = ftz(w)
    hd = w.shape[0]
    tokens = x.shape[0]
    x2 = x.reshape(tokens * heads, hd)
    dy2 = dy.reshape(tokens * heads, hd)
    dx, flat_dw = rms_norm_backward(dy2, x2, w, eps)              # T-9, T-10 per row
    if "flat" in variant:
        return dx.reshape(x.shape), flat_dw
    rstd = _rstd(x2, F(eps))
    terms = mul(dy2, mul(x2, rstd[:, None])).reshape(tokens, heads, hd)
    order = range(heads - 1, -1, -1) if "heads_desc" in variant else range(heads)
    acc = np.zeros((tokens, hd), np.float32)
    for h in order:
        acc = add(acc, terms[:, h, :])
    dw = fold(np.ascontiguousarray(acc.T)) if tokens else np.zeros(hd, np.float32)
    return dx.reshape(x.shape), dw


# ----------------------------------------------------------------- T-12, T-13 embedding
def embedding_forward(weight, ids):
    """T-12: the gather, every value flushed."""
    return ftz(ftz(weight)[np.asarray(ids, dtype=np.int64)])


def embedding_backward(dy, ids, vocab, variant=()):
    """T-13: per vocab row one chain acc = add(acc, dy[t]) over positions t ascending in the
    flattened order; rows that do not occur are +0."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    dy = ftz(dy)
    d = dy.shape[-1]
    dy2 = dy.reshape(-1, d)
    assert dy2.shape[0] == ids.shape[0]
    out = np.zeros((int(vocab), d), np.float32)
    order = range(ids.shape[0])
    if "descending" in variant:
        order = reversed(order)
    for t in order:
        v = ids[t]
        out[v] = add(out[v], dy2[t])
    return out


# ----------------------------------------------------------------- T-14 .. T-18 cross entropy
def cross_entropy(logits, targets, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  num_items=None, return_grad=False, variant=()):
    x = ftz(logits)
    N, V = x.shape
    tg = np.asarray(targets, dtype=np.int64).reshape(-1)
    assert tg.shape[0] == N
    eps = F(label_smoothing)
    ignored = tg == ignore_index
    ty = np.where(ignored, 0, tg)
    m = rowmax(x)                                               # T-14
    s = sub(x, m[:, None])
    e = expf(s)
    den = chain(e) if "den_chain" in variant else fold(e)
    lden = logf(den)
    s_y = s[np.arange(N), ty]
    nll = neg(sub(s_y, lden))
    if eps != 0:                                                # T-15
        lp = sub(s, lden[:, None])
        lsum = chain(lp) if "lp_chain" in variant else fold(lp)
        smooth = neg(div(lsum, F(V)))
        row = add(mul(sub(F(1), eps), nll), mul(eps, smooth))
    else:
        row = nll
    row = np.where(ignored, F(0.0), row).astype(np.float32)    # T-16
    count = int((~ignored).sum())
    if reduction == "none":
        return row
    total = fold(row[None, :])[0]                               # T-17
    if reduction == "mean":
        D = F(count)
    elif reduction == "sum":
        D = F(num_items) if (num_items is not None and num_items > 0) else F(1)
    else:
        raise ValueError(reduction)
    loss = div(total, D)[()]
    if not return_grad:
        return F(loss)
    w = div(e, den[:, None])                                    # T-18
    t_o = div(eps, F(V))
    t_y = add(sub(F(1), eps), t_o)
    tv = np.broadcast_to(t_o, (N, V)).astype(np.float32).copy()
    tv[np.arange(N), ty] = t_y
    g = div(sub(w, tv), D)
    g[ignored] = F(0.0)
    return F(loss), a32(g)


# ----------------------------------------------------------------- T-19 .. T-21 chunked LM head
T20_PART = 256   # T-20: the mean's rows in leaves of 256 (a fixed size, not fp32.v1's L(k))


def chunked_lm_head_loss(h, w, targets, return_grad=False, variant=()):
    """T-19 .. T-21 of h (rows, width), w (V, width), targets (rows,) in [0, V).

    T-19: z[r, v] = chain over f ascending of fma(h_rf, W_vf, acc) from +0; m = rowmax;
    s = sub(z, m); e = expf(s); den = chain over v = 0 .. V-1 of add(den, e_v);
    row = neg(sub(s_y, logf(den))). T-20: rows in leaves of 256 (chains from +0), the
    leaves by the balanced tree, loss = div(total, f32(rows)). T-21: dl = div(sub(div(e,
    den), onehot), f32(rows)); dH[r, f] = chain over v ascending of fma(dl_rv, W_vf, acc);
    dW[v, f] = chain over r ascending of fma(dl_rv, h_rf, acc)."""
    h = ftz(h)
    w = ftz(w)
    R, Fw = h.shape
    V = w.shape[0]
    y = np.asarray(targets, dtype=np.int64).reshape(-1)
    assert y.shape == (R,) and V >= 2 and R >= 1
    if "z_dot" in variant:
        z = dot(h[:, None, :], w[None, :, :])
    else:
        z = np.zeros((R, V), np.float32)
        for f in range(Fw):                                     # T-19's fma chain
            z = fma(h[:, f:f + 1], w[None, :, f], z)
    m = rowmax(z)
    s = sub(z, m[:, None])
    e = expf(s)
    den = fold(e) if "den_fold" in variant else chain(e)
    lden = logf(den)
    s_y = s[np.arange(R), y]
    row = neg(sub(s_y, lden))
    if "mean_chain" in variant:                                 # T-20
        total = chain(row[None, :])[0]
    else:
        total = fold(row[None, :], leaf=T20_PART)[0]
    loss = F(div(total, F(R))[()])
    if not return_grad:
        return loss
    onehot = np.zeros((R, V), np.float32)
    onehot[np.arange(R), y] = F(1)
    dl = div(sub(div(e, den[:, None]), onehot), F(R))           # T-21
    if "grad_dot" in variant:
        dh = dot(dl[:, None, :], np.ascontiguousarray(w.T)[None, :, :])
        dw = dot(np.ascontiguousarray(dl.T)[:, None, :], np.ascontiguousarray(h.T)[None, :, :])
        return loss, dh, dw
    dh = np.zeros((R, Fw), np.float32)
    for v in range(V):                                          # chain over v ascending
        dh = fma(dl[:, v:v + 1], w[None, v, :], dh)
    dw = np.zeros((V, Fw), np.float32)
    for r in range(R):                                          # chain over rows ascending
        dw = fma(dl[r][:, None], h[r][None, :], dw)
    return loss, dh, dw


# ----------------------------------------------------------------- T-23 .. T-25 clipping
def clip_grad_norm(grads, max_norm):
    """-> (total, clipped copies). Raises NonFinite on a non-finite total (T-41)."""
    gs = [ftz(g) for g in grads]
    n = np.array([sqrt(dot(g.reshape(1, -1), g.reshape(1, -1))[0]) for g in gs], np.float32)
    total = sqrt(dot(n[None, :], n[None, :])[0])[()]
    if not np.isfinite(total):
        raise NonFinite("non-finite total norm")
    coef = div(F(max_norm), add(total, F(1e-6)))[()]
    if not coef < F(1):
        coef = F(1)
    return F(total), [mul(F(coef), g) for g in gs]


# ----------------------------------------------------------------- T-26, T-27 accumulation
def _is_pow2(n):
    return n >= 1 and (n & (n - 1)) == 0


def accumulate_grads(mgrads, variant=()):
    """T-26: per tensor, a balanced tree over the micro-batches (add(g0, g1), add(g2, g3),
    ..., next level); A = 1 gives ftz(g0)."""
    A = len(mgrads)
    assert _is_pow2(A)
    out = []
    for j in range(len(mgrads[0])):
        level = [ftz(mg[j]) for mg in mgrads]
        if "running" in variant:
            acc = level[0]
            for g in level[1:]:
                acc = add(acc, g)
            out.append(acc)
            continue
        while len(level) > 1:
            level = [add(level[i], level[i + 1]) for i in range(0, len(level), 2)]
        out.append(ftz(level[0]))
    return out


def aligned_split(tokens, A, strict=True):
    """T-27: A a power of two, L = L(T) divides T, A divides P = T / L, L(T / A) = L; ours
    (strict) also needs P / A a power of two."""
    T = int(tokens)
    A = int(A)
    if not _is_pow2(A) or T < 1:
        return False
    L = O.leaf_size(T)
    if T % L:
        return False
    P = T // L
    if P % A:
        return False
    if T % A or O.leaf_size(T // A) != L:
        return False
    return _is_pow2(P // A) if strict else True


# ----------------------------------------------------------------- T-30 pw
def pw(b, t, variant=()):
    """T-30: binary exponentiation from the lowest bit, products by mul."""
    b = F(b)
    t = int(t)
    if "running" in variant:
        acc = F(1)
        for _ in range(t):
            acc = mul(acc, b)[()]
        return F(acc)
    acc = F(1)
    x = b
    while t:
        if t & 1:
            acc = mul(acc, x)[()]
        x = mul(x, x)[()]
        t >>= 1
    return F(acc)


# ----------------------------------------------------------------- T-36 .. T-38 schedules
def round_f32(q):
    """The float32 nearest (ties to even) the exact rational q (normal range)."""
    q = Fraction(q)
    if q == 0:
        return F(0.0)
    sign = -1 if q < 0 else 1
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    assert Fraction(2) ** e <= q < Fraction(2) ** (e + 1)
    e = max(e, -126)
    scaled = q / Fraction(2) ** (e - 23)
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    return F(sign * math.ldexp(n, e - 23))


def _exact_cos_term(p):
    """(1 + cos(pi p)) / 2 for p in {0, 1/3, 1/2, 2/3, 1}, exactly; else None."""
    table = {Fraction(0): Fraction(1), Fraction(1, 3): Fraction(3, 4), Fraction(1, 2): Fraction(1, 2),
             Fraction(2, 3): Fraction(1, 4), Fraction(1): Fraction(0)}
    return table.get(p)


def _cosine_value(P, m, p):
    """m + (P - m)(1 + cos(pi p))/2 rounded once; mpmath at 100 digits, both ends of a
    1e-80 relative enclosure must round alike (else raise: never guess)."""
    ex = _exact_cos_term(p)
    if ex is not None:
        return round_f32(m + (P - m) * ex)
    import mpmath
    with mpmath.workdps(100):
        pm = mpmath.mpf(p.numerator) / p.denominator
        v = mpmath.mpf(m.numerator) / m.denominator + (mpmath.mpf((P - m).numerator) / (P - m).denominator) \
            * (1 + mpmath.cos(mpmath.pi * pm)) / 2
        lo = v - abs(v) * mpmath.mpf(10) ** -80
        hi = v + abs(v) * mpmath.mpf(10) ** -80

        def frac(u):
            man, ex2 = mpmath.mpf(u).man_exp
            return Fraction(int(man)) * (Fraction(2) ** int(ex2)) if ex2 >= 0 else Fraction(int(man), 2 ** (-int(ex2)))
        a, b = round_f32(frac(lo)), round_f32(frac(hi))
    if a.view(np.uint32) != b.view(np.uint32):
        raise ArithmeticError("cosine value straddles a float32 rounding boundary")
    return a


class _Schedule:
    kind = None

    def __init__(self, peak_lr, warmup_steps=0, total_steps=None, min_lr=0.0):
        self.P = Fraction(float(F(peak_lr)))
        self.m = Fraction(float(F(min_lr)))
        self.W = int(warmup_steps)
        self.T = None if total_steps is None else int(total_steps)

    def lr_at(self, t):
        t = int(t)
        assert t >= 1
        P, m, W, T = self.P, self.m, self.W, self.T
        if t <= W:
            return round_f32(P * t / W)
        if self.kind == "constant":
            return round_f32(P)
        if t >= T:
            return round_f32(m)
        p = Fraction(t - W, T - W)
        if self.kind == "linear":
            return round_f32(P + (m - P) * p)
        return _cosine_value(P, m, p)


class ConstantLR(_Schedule):
    kind = "constant"

    def __init__(self, peak_lr, warmup_steps=0):
        super().__init__(peak_lr, warmup_steps)


class WarmupLinearLR(_Schedule):
    kind = "linear"

    def __init__(self, peak_lr, warmup_steps, total_steps, min_lr=0.0):
        super().__init__(peak_lr, warmup_steps, total_steps, min_lr)


class WarmupCosineLR(_Schedule):
    kind = "cosine"

    def __init__(self, peak_lr, warmup_steps, total_steps, min_lr=0.0):
        super().__init__(peak_lr, warmup_steps, total_steps, min_lr)


# ----------------------------------------------------------------- T-29 .. T-35, T-39 optimizers
class _Opt:
    def __init__(self, params, lr, lr_schedule, maximize, variant=()):
        self.params = [ftz(p).copy() for p in params]
        self.lr = F(lr)
        self.sched = lr_schedule
        self.maximize = bool(maximize)
        self.variant = tuple(variant)
        self.t = 0
        self.m = [np.zeros_like(p) for p in self.params]
        self.v = [np.zeros_like(p) for p in self.params]
        self.init = [0] * len(self.params)

    def _lr(self):
        return self.sched.lr_at(self.t) if self.sched is not None else self.lr

    def step(self, grads, max_norm=None):
        """-> (new params copies, grads as used (clipped when max_norm))."""
        grads = [ftz(g) for g in grads]
        if max_norm is not None:                                 # (1)
            _, grads = clip_grad_norm(grads, max_norm)
        self.t += 1                                              # (2)
        self._step(grads, self._lr())                           # (3) .. (5)
        return [p.copy() for p in self.params], grads

    def step_accumulated(self, mgrads, max_norm=None):
        return self.step(accumulate_grads(mgrads), max_norm)

    def state_dict(self):
        return {"t": self.t,
                "exp_avg": np.concatenate([x.reshape(-1) for x in self.m]).astype(np.float32),
                "exp_avg_sq": np.concatenate([x.reshape(-1) for x in self.v]).astype(np.float32),
                "buf_initialized": np.array(self.init, np.int32)}

    def load_state_dict(self, sd):
        self.t = int(sd["t"])
        off = 0
        for j, p in enumerate(self.params):
            n = p.size
            self.m[j] = ftz(np.asarray(sd["exp_avg"])[off:off + n].reshape(p.shape)).copy()
            self.v[j] = ftz(np.asarray(sd["exp_avg_sq"])[off:off + n].reshape(p.shape)).copy()
            off += n
        self.init = [int(x) for x in np.asarray(sd["buf_initialized"]).reshape(-1)]


class SGD(_Opt):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, maximize=False, lr_schedule=None):
        super().__init__(params, lr, lr_schedule, maximize)
        self.mu = F(momentum)
        self.damp = F(dampening)
        self.wd = F(weight_decay)
        self.nesterov = bool(nesterov)

    def _step(self, grads, lr):
        c_damp = sub(F(1), self.damp)
        for j, (p, g) in enumerate(zip(self.params, grads)):
            p = ftz(p)
            g = ftz(g)
            if self.maximize:                                    # T-34
                g = neg(g)
            if self.wd != 0:
                g = fma(self.wd, p, g)
            if self.mu != 0:
                if not self.init[j]:
                    b = g.copy()
                    self.init[j] = 1
                else:
                    b = fma(c_damp, g, mul(self.mu, self.m[j]))
                self.m[j] = a32(b)
                g = fma(self.mu, b, g) if self.nesterov else b
            self.params[j] = fma(neg(lr), g, p)


class Adam(_Opt):
    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 maximize=False, lr_schedule=None, variant=()):
        super().__init__(params, lr, lr_schedule, maximize, variant)
        self.b1 = F(betas[0])
        self.b2 = F(betas[1])
        self.eps = F(eps)
        self.wd = F(weight_decay)

    def _step(self, grads, lr):
        t = self.t
        b1, b2, eps, wd = self.b1, self.b2, self.eps, self.wd
        bc1 = sub(F(1), pw(b1, t))                               # T-29 (4)
        bc2 = sub(F(1), pw(b2, t))
        step = div(lr, bc1)
        rt = sqrt(bc2)
        c1 = sub(F(1), b1)
        c2 = sub(F(1), b2)
        decay = sub(F(1), mul(lr, wd))
        for j, (p, g) in enumerate(zip(self.params, grads)):
            p = ftz(p)
            g = ftz(g)
            m = ftz(self.m[j])
            v = ftz(self.v[j])
            if self.maximize:
                g = neg(g)
            if wd != 0:                                          # T-32
                if self.decoupled:
                    p = mul(decay, p)
                else:
                    g = fma(wd, p, g)
            m = fma(c1, g, mul(b1, m))                           # T-31
            v = fma(c2, mul(g, g), mul(b2, v))
            if "eps_inside" in self.variant:
                den = sqrt(div(add(v, eps), mul(rt, rt)))
            else:
                den = add(div(sqrt(v), rt), eps)
            q = div(m, den)
            self.params[j] = fma(neg(step), q, p)
            self.m[j] = m
            self.v[j] = v
            self.init[j] = 1


class AdamW(Adam):
    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 maximize=False, lr_schedule=None, variant=()):
        super().__init__(params, lr, betas, eps, weight_decay, maximize, lr_schedule, variant)
