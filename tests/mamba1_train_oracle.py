"""Independent numpy oracle of the Mamba-1 backward (rules T-63 .. T-73 of
contracts/ops/IDENTICAL_TRAIN_CONTRACT.md), written from the rule text: float32 arrays,
every operand read flushed and every value flushed (the step helpers of mamba_oracle:
mul, add, sub, div, fma, expf, silu, each flushing), every chain in its rule's order,
vectorized only across independent elements (rows, channels). It imports nothing from
``mojolearn``. Sums over tokens and channels use training_oracle.fold (T-2).

PUBLIC API
----------
lane_norm_backward(dy, x, w, eps) -> (dx, terms)           T-63, T-64 (terms per row)
silu_backward(v, du) -> dv                                 T-66
softplus_backward(raw, bias, dd, clamp=None) -> dv         T-67 (clamp: S-19's (lo, hi))
conv_backward(x, w, g) -> (dx, terms)                      T-65; x, g (B, L, C); terms
                                                           (B, L, C, 4)
scan_backward(u, delta, A, Bm, Cm, D, z, g, variant=()) -> dict
    T-68 .. T-71 over (B, L, di): du_s, ddelta, dz (B, L, di); dB, dC (B, L, 16) (the
    fold over the channels); ta (B, L, di, 16) and td (B, L, di) (the per-token terms of
    A_log and D). variant (sabotage, for the tests): "dh_mul_add" (dh by mul then add),
    "ddelta_a_first" (the A step before the B step), "channels_chain_desc" (B and C
    summed over the channels by a descending chain).
mixer_backward(p, xn, dout, variant=()) -> (dxn, grads)
    The whole Mamba-1 mixer's backward (T-65 .. T-73) of one block, p its tensors without
    the "mixer." prefix, xn (B, L, d) the block norm's output, dout the gradient at the
    mixer's output; variant as scan_backward's.
"""
from __future__ import annotations

import numpy as np

import mamba_oracle as SO
import training_oracle as TO
from mamba_oracle import F, add, div, expf, fma, ftz, mul, neg, silu, sqrt, sub

N = 16


def _a(x):
    return ftz(np.asarray(x, dtype=np.float32))


def lane_rstd(x, eps=SO.EPS):
    """S-10's rstd over the last axis: 32 lanes of fma chains, their pairwise fold in lane
    order, M-4's mean and rstd."""
    x = _a(x)
    n = x.shape[-1]
    acc = np.zeros(x.shape[:-1] + (32,), dtype=np.float32)
    for s in range(0, n, 32):
        cnt = min(32, n - s)
        blk = x[..., s:s + cnt]
        acc[..., :cnt] = fma(blk, blk, acc[..., :cnt])
    while acc.shape[-1] > 1:
        acc = add(acc[..., 0::2], acc[..., 1::2])
    mean = div(acc[..., 0], F(n))
    return div(F(1), sqrt(add(mean, F(eps))))


def lane_norm_backward(dy, x, w, eps=SO.EPS):
    """T-63 (dx) and T-64's per-row terms; rows over the leading axes, width the last."""
    dy, x, w = _a(dy), _a(x), _a(w)
    n = x.shape[-1]
    rstd = lane_rstd(x, eps)[..., None]
    dh = mul(dy, w)
    c = np.zeros(x.shape[:-1], dtype=np.float32)
    for j in range(n):  # T-9's serial chain, j ascending
        c = fma(dh[..., j], x[..., j], c)
    r3 = mul(mul(rstd, rstd), rstd)
    dv = div(mul(F(-0.5), mul(c[..., None], r3)), F(n))
    dx = add(mul(dh, rstd), mul(dv, mul(F(2), x)))
    terms = mul(dy, mul(x, rstd))
    return dx, terms


def dsilu(v):
    """T-66's ds."""
    v = _a(v)
    den = add(expf(neg(v)), F(1))
    sg = div(F(1), den)
    return mul(sg, add(F(1), mul(v, sub(F(1), sg))))


def silu_backward(v, du):
    """T-66: dv = mul(du, ds)."""
    return mul(_a(du), dsilu(v))


def softplus_backward(raw, bias, dd, clamp=None):
    """T-67: v = add(raw, bias); v > 20 passes dd; else mul(dd, div(1, add(expf(neg(v)), 1)));
    with clamp = (lo, hi) (S-19), +0 where the clamp replaces softplus(v)."""
    v = add(_a(raw), _a(bias))
    dd = _a(dd)
    sg = div(F(1), add(expf(neg(v)), F(1)))
    out = np.where(v > F(20), dd, mul(dd, sg)).astype(np.float32)
    if clamp is not None:
        lo, hi = (ftz(np.float32(c)) for c in clamp)
        c = SO.softplus(v)
        low = SO._gt(lo, c)
        c = np.where(low, lo, c)
        hit = low | SO._gt(c, hi)
        out = np.where(hit, F(0), out).astype(np.float32)
    return out


def conv_backward(x, w, g):
    """T-65: x, g (B, L, C), w (C, 4). dx[l] = chain over j = l .. min(l + 3, L - 1) of
    fma(g[j], w[:, 3 - (j - l)], acc) from +0; terms[l, c, k] = mul(g[l], x[l - 3 + k])."""
    x, g = _a(x), _a(g)
    w = _a(np.asarray(w).reshape(-1, 4))
    Bn, L, C = x.shape
    dx = np.zeros((Bn, L, C), dtype=np.float32)
    for l in range(L):
        acc = np.zeros((Bn, C), dtype=np.float32)
        for j in range(l, min(l + 4, L)):
            acc = fma(g[:, j], w[:, 3 - (j - l)], acc)
        dx[:, l] = acc
    terms = np.zeros((Bn, L, C, 4), dtype=np.float32)
    for l in range(L):
        for k in range(4):
            p = l - 3 + k
            xv = x[:, p] if p >= 0 else np.zeros((Bn, C), dtype=np.float32)
            terms[:, l, :, k] = mul(g[:, l], xv)
    return dx, terms


def scan_backward(u, delta, A, Bm, Cm, D, z, g, variant=()):
    """T-68 .. T-71 (see the module docstring)."""
    u, delta, A, Bm, Cm, D, z, g = (_a(v) for v in (u, delta, A, Bm, Cm, D, z, g))
    Bn, L, di = u.shape
    # the forward recomputed (S-17), h after each token, and y
    hs = np.zeros((Bn, L + 1, di, N), dtype=np.float32)  # hs[:, t + 1] = h after token t
    y = np.zeros((Bn, L, di), dtype=np.float32)
    for t in range(L):
        acc = np.zeros((Bn, di), dtype=np.float32)
        for n in range(N):
            da = expf(mul(delta[:, t], A[:, n]))
            db = mul(delta[:, t], Bm[:, t, n, None])
            hn = fma(da, hs[:, t, :, n], mul(db, u[:, t]))
            hs[:, t + 1, :, n] = hn
            acc = fma(Cm[:, t, n, None], hn, acc)
        y[:, t] = acc
    out = {k: np.zeros((Bn, L, di), dtype=np.float32) for k in ("du_s", "ddelta", "dz", "td")}
    tb = np.zeros((Bn, L, di, N), dtype=np.float32)
    tc = np.zeros((Bn, L, di, N), dtype=np.float32)
    ta = np.zeros((Bn, L, di, N), dtype=np.float32)
    carry = np.zeros((Bn, di, N), dtype=np.float32)
    for t in reversed(range(L)):
        s = add(y[:, t], mul(u[:, t], D))
        ds = mul(g[:, t], silu(z[:, t]))
        out["dz"][:, t] = mul(mul(g[:, t], s), dsilu(z[:, t]))
        out["td"][:, t] = mul(ds, u[:, t])
        dua = np.zeros((Bn, di), dtype=np.float32)
        dda = np.zeros((Bn, di), dtype=np.float32)
        for n in range(N):
            cn = Cm[:, t, n, None]
            bn = Bm[:, t, n, None]
            if "dh_mul_add" in variant:
                dh = add(mul(ds, cn), carry[:, :, n])
            else:
                dh = fma(ds, cn, carry[:, :, n])
            da = expf(mul(delta[:, t], A[:, n]))
            db = mul(delta[:, t], bn)
            carry[:, :, n] = mul(dh, da)
            ddb = mul(dh, u[:, t])
            dua = fma(dh, db, dua)
            dp = mul(mul(dh, hs[:, t, :, n]), da)
            if "ddelta_a_first" in variant:
                dda = fma(ddb, bn, fma(dp, A[:, n], dda))
            else:
                dda = fma(dp, A[:, n], fma(ddb, bn, dda))
            tb[:, t, :, n] = mul(ddb, delta[:, t])
            tc[:, t, :, n] = mul(ds, hs[:, t + 1, :, n])
            ta[:, t, :, n] = mul(mul(dp, delta[:, t]), A[:, n])
        out["du_s"][:, t] = add(dua, mul(ds, D))
        out["ddelta"][:, t] = dda
    if "channels_chain_desc" in variant:
        out["dB"] = TO.chain(tb.transpose(0, 1, 3, 2)[..., ::-1])
        out["dC"] = TO.chain(tc.transpose(0, 1, 3, 2)[..., ::-1])
    else:  # T-69: fold(k = di) over the channels ascending
        out["dB"] = TO.fold(tb.transpose(0, 1, 3, 2))
        out["dC"] = TO.fold(tc.transpose(0, 1, 3, 2))
    out["ta"], out["tb"], out["tc"] = ta, tb, tc
    return out


def _fold_tokens(terms):
    """fold(k = tokens) over the leading (B, L) axes in row order (T-2)."""
    t = _a(terms)
    flat = t.reshape((-1,) + t.shape[2:])
    return TO.fold(np.moveaxis(flat, 0, -1))


def _dw(dy, x):
    """T-6: dW = dY^T . X, dot(k = tokens) (dy, x (B, L, .))."""
    dy2 = _a(dy).reshape(-1, dy.shape[-1])
    x2 = _a(x).reshape(-1, x.shape[-1])
    return TO.dot(dy2.T[:, None, :], x2.T[None, :, :])


def _dx(dy, w):
    """T-5: dX = dY . W, dot(k = out width) (w stored (out, in))."""
    return SO.proj(dy, _a(w).T)


def mixer_backward(p, xn, dout, variant=()):
    """The Mamba-1 mixer's backward (T-65 .. T-73), forward by mamba_oracle's steps."""
    xn, dout = _a(xn), _a(dout)
    Bn, L, d = xn.shape
    di = 2 * d
    r = p["dt_proj.weight"].shape[1]
    xz = SO.proj(xn, p["in_proj.weight"])
    xc, z = xz[..., :di], xz[..., di:]
    cv, _ = SO.conv_causal(xc, p["conv1d.weight"], p["conv1d.bias"])
    u = silu(cv)
    xp = SO.proj(u, p["x_proj.weight"])
    dt_low, Bm, Cm = xp[..., :r], xp[..., r:r + N], xp[..., r + N:]
    raw = SO.proj(dt_low, p["dt_proj.weight"])
    delta = SO.softplus(add(raw, p["dt_proj.bias"]))
    A = neg(expf(p["A_log"]))
    g = _gate(u, delta, A, Bm, Cm, p["D"], z)
    grads = {"out_proj.weight": _dw(dout, g)}
    dg = _dx(dout, p["out_proj.weight"])
    sc = scan_backward(u, delta, A, Bm, Cm, p["D"], z, dg, variant)
    grads["A_log"] = _fold_tokens(sc["ta"])
    grads["D"] = _fold_tokens(sc["td"])
    ddt = softplus_backward(raw, p["dt_proj.bias"], sc["ddelta"])
    grads["dt_proj.bias"] = _fold_tokens(ddt)
    grads["dt_proj.weight"] = _dw(ddt, dt_low)
    dxp = np.concatenate([_dx(ddt, p["dt_proj.weight"]), sc["dB"], sc["dC"]], axis=-1)
    grads["x_proj.weight"] = _dw(dxp, u)
    du = add(_dx(dxp, p["x_proj.weight"]), sc["du_s"])
    dcv = silu_backward(cv, du)
    dxc, terms = conv_backward(xc, p["conv1d.weight"], dcv)
    grads["conv1d.weight"] = _fold_tokens(terms).reshape(di, 1, 4)
    grads["conv1d.bias"] = _fold_tokens(dcv)
    dxz = np.concatenate([dxc, sc["dz"]], axis=-1)
    grads["in_proj.weight"] = _dw(dxz, xn)
    return _dx(dxz, p["in_proj.weight"]), grads


def _gate(u, delta, A, Bm, Cm, D, z):
    """S-17, S-18 up to the gate, by the mamba_oracle steps (the forward's g)."""
    Bn, L, di = u.shape
    h = np.zeros((Bn, di, N), dtype=np.float32)
    y = np.zeros((Bn, L, di), dtype=np.float32)
    for t in range(L):
        dl = delta[:, t, :, None]
        h = fma(expf(mul(dl, A[None])), h, mul(mul(dl, Bm[:, t, None, :]), u[:, t, :, None]))
        acc = np.zeros((Bn, di), dtype=np.float32)
        for n in range(N):
            acc = fma(Cm[:, t, n, None], h[:, :, n], acc)
        y[:, t] = acc
    return mul(add(y, mul(u, D)), silu(z))
