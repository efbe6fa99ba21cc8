"""The backward of the transformer's own ops (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md,
rules T-47 .. T-62): the attention probabilities recomputed with the forward's own
functions, the softmax backward, the SiLU-gated MLP backward, and the per-token terms
of qwen3's per-head norm weight gradient. Per-element steps
come from arith/ (mul, expf, ftz); every operand is read flushed (DAZ under the
contract floating-point state, or explicitly) and every stored value flushed.
"""
from std.memory import bitcast
from std.sys import simd_width_of
from common.ptr import F32Ptr
from arith.fp import ftz, daz_in
from arith.elementary import mul, silu_mul_bwd, sqrt_rn
from arith.tree import leaf_size, leaf_count, chain_step_daz, tree_add, serial_add_daz
from std.collections import List
from std.collections import Array
from transformer.cpu.attention import (
    HG, attn_scale, _srow, group_row_len, group_scores_f32, group_softmax, _all_small,
)

comptime W = simd_width_of[DType.float32]()
comptime F1 = SIMD[DType.float32, 1]
comptime FW = SIMD[DType.float32, W]


def attn_keys_small(kt: F32Ptr, L: Int, hd: Int, bg: Int) -> Bool:
    """Every key of (batch, key/value head) bg (kt: (batch, kvh, hd, L)) finite with
    |k| < 2**40: what attn_probs_unit needs (with the query row's own check) to stop a
    row at the query's own key."""
    return _all_small(kt.unsafe_offset(bg * hd * L), hd, L, L)


def attn_probs_unit(q: F32Ptr, ldq: Int, kt: F32Ptr, p: F32Ptr, L: Int, nh: Int, kvh: Int,
                    hd: Int, keys_small: Bool, u: Int, ws: F32Ptr):
    """T-47: the attention weights of unit u, the query i = u % L of (batch, key/value
    head) u // L, for every query head that reads that key/value head, each row of L
    keys exactly as the forward computes it over the whole row (M-11 scores by fp32.v1
    over head_dim, M-6 scale, M-12 mask, M-13 softmax: the forward's own functions,
    transformer/cpu/attention.mojo), stored to p (batch, nh, L, L). kt: (batch, kvh,
    hd, L); ws: HG score rows of _srow(L) floats.

    Up to HG heads of the group at once, as the forward runs them: every key vector
    loaded once feeds each head's chains, and the heads' serial denominators run side
    by side; every (head, key) chain is the one the head alone computes. Masked keys
    (past the query) weigh exactly +0 when the keys and the query rows are finite and
    small (keys_small, and |q| < 2**40): the score is a finite |dot| < 2**100, the mask
    makes it exactly -FLT_MAX, expf gives +0, the denominator is unchanged by +0 and
    the weight is div(+0, den) = +0 (the forward's argument, attention.mojo). Those
    rows are computed up to the query's own key and stored with +0 after it; any other
    row is computed over all L keys."""
    var i = u % L
    var bg = u // L
    var g = bg % kvh
    var b = bg // kvh
    var group = nh // kvh
    var scale = attn_scale(hd)
    var srow = _srow(L)
    var kb = kt.unsafe_offset(bg * hd * L)
    var hh0 = 0
    while hh0 < group:
        var gn = min(HG, group - hh0)
        var h0 = g * group + hh0
        var q0 = q.unsafe_offset((b * L + i) * ldq + h0 * hd)
        var n_eff = group_row_len(q0, gn, hd, keys_small, L, i)
        group_scores_f32(q0, kb, L, hd, gn, n_eff, scale, ws, srow)
        group_softmax(ws, srow, gn, n_eff, i)
        for t in range(gn):
            var s = ws.unsafe_offset(t * srow)
            var dst = p.unsafe_offset(((b * nh + h0 + t) * L + i) * L)
            var j = 0
            while j + W <= n_eff:
                dst.unsafe_store(j, s.unsafe_load[width=W](j))
                j += W
            while j < n_eff:
                dst.unsafe_store(j, s.unsafe_load(j))
                j += 1
            while j + W <= L:
                dst.unsafe_store(j, FW(0))
                j += W
            while j < L:
                dst.unsafe_store(j, Float32(0))
                j += 1
        hh0 += gn


comptime SB_ROWS = 8  # rows of the softmax backward whose chains run side by side


def softmax_bwd_rows(pr: F32Ptr, dpr: F32Ptr, ds: F32Ptr, n: Int, scale: Float32, r0: Int, r1: Int):
    """T-49: per row, c = chain over j ascending of fma(w_j, dp_j, c) from +0 (flushed
    at every step); ds_j = mul(mul(w_j, sub(dp_j, c)), scale). SB_ROWS rows' chains run
    side by side (independent chains in flight instead of one fma latency per step),
    each step chain_step_daz (the flush of every step deferred to the value leaving
    the registers: the same bits under the contract floating-point state)."""
    var r = r0
    while r + SB_ROWS <= r1:
        var c = Array[F1, SB_ROWS](fill=F1(0))
        for j in range(n):
            comptime for t in range(SB_ROWS):
                var at = (r + t) * n + j
                c[t] = chain_step_daz[1](F1(pr.unsafe_load(at)), F1(dpr.unsafe_load(at)), c[t])
        comptime for t in range(SB_ROWS):
            _softmax_bwd_out(pr, dpr, ds, n, scale, r + t, ftz(c[t]))
        r += SB_ROWS
    while r < r1:
        var c = F1(0)
        for j in range(n):
            c = chain_step_daz[1](F1(pr.unsafe_load(r * n + j)), F1(dpr.unsafe_load(r * n + j)), c)
        _softmax_bwd_out(pr, dpr, ds, n, scale, r, ftz(c))
        r += 1


@always_inline
def _softmax_bwd_out(pr: F32Ptr, dpr: F32Ptr, ds: F32Ptr, n: Int, scale: Float32, r: Int, c: F1):
    """T-49's second step for row r, its chain c (flushed)."""
    var w = pr.unsafe_offset(r * n)
    var dp = dpr.unsafe_offset(r * n)
    var o = ds.unsafe_offset(r * n)
    var cv = FW(c[0])
    var sv = FW(scale)
    var j = 0
    while j + W <= n:
        var d = ftz(ftz(dp.unsafe_load[width=W](j)) - cv)
        o.unsafe_store(j, ftz(mul(ftz(mul(ftz(w.unsafe_load[width=W](j)), d)), sv)))
        j += W
    while j < n:
        var d = ftz(ftz(F1(dp.unsafe_load(j))) - c)
        o.unsafe_store(j, ftz(mul(ftz(mul(ftz(F1(w.unsafe_load(j))), d)), F1(scale)))[0])
        j += 1


def silu_mul_bwd_rows(gu: F32Ptr, ldgu: Int, dp: F32Ptr, ldp: Int, dgu: F32Ptr, ff: Int, r0: Int, r1: Int):
    """T-52: the gated MLP's backward, p = mul(silu(g), u): rows r0 .. r1 of gu (g in
    columns 0 .. ff, u in ff .. 2ff) and dp (rows, ff) give dgu (rows, 2ff). Its expf
    is the DAZ form (run_tasks holds the contract floating-point state)."""
    for r in range(r0, r1):
        var gr = gu.unsafe_offset(r * ldgu)
        var dr = dp.unsafe_offset(r * ldp)
        var o = dgu.unsafe_offset(r * 2 * ff)
        var j = 0
        while j + W <= ff:
            var res = silu_mul_bwd[W, True](gr.unsafe_load[width=W](j), gr.unsafe_load[width=W](ff + j),
                                            dr.unsafe_load[width=W](j))
            o.unsafe_store(j, res[0])
            o.unsafe_store(ff + j, res[1])
            j += W
        while j < ff:
            var res = silu_mul_bwd[1, True](F1(gr.unsafe_load(j)), F1(gr.unsafe_load(ff + j)),
                                            F1(dr.unsafe_load(j)))
            o.unsafe_store(j, res[0][0])
            o.unsafe_store(ff + j, res[1][0])
            j += 1


def fold_div(x: F32Ptr, n: Int, d: Float32) -> Float32:
    """T-17 / T-58: div(fold(k = n) of x[0 .. n), d): per leaf of leaf_size(n) values a
    chain acc = add(acc, x_i) from +0, the leaves by the balanced pairwise tree (odd one
    carried), then one division."""
    var leaf = leaf_size(n)
    var nl = leaf_count(n)
    var parts = List[Float32](capacity=max(1, nl))
    for lf in range(nl):
        var acc = F1(0)
        for i in range(lf * leaf, min(n, (lf + 1) * leaf)):
            acc = ftz(acc + ftz(F1(x.unsafe_load(i))))
        parts.append(acc[0])
    if nl == 0:
        parts.append(Float32(0))
        nl = 1
    while nl > 1:
        var half = nl // 2
        for t in range(half):
            parts[t] = tree_add[1](F1(parts[2 * t]), F1(parts[2 * t + 1]))[0]
        if nl % 2 == 1:
            parts[half] = parts[nl - 1]
        nl = half + nl % 2
    return ftz(F1(parts[0]) / ftz(F1(d)))[0]  # d read flushed: this runs outside run_tasks


def rmsnorm_terms_rows(dy: F32Ptr, x: F32Ptr, d: Int, eps: Float32, dst: F32Ptr, r0: Int, r1: Int):
    """T-11's terms: dst[r, j] = mul(dy_rj, mul(x_rj, rstd_r)), rstd by M-4 (the forward's
    steps), for the weight gradient's fold over the rows when it is computed in parts
    (data-parallel ranks: contract 6.7)."""
    for r in range(r0, r1):
        var xr = x.unsafe_offset(r * d)
        var acc = F1(0)
        for j in range(d):
            var v = F1(xr.unsafe_load(j))
            acc = chain_step_daz[1](v, v, acc)
        acc = ftz(acc)
        var mean = ftz(acc / F1(Float32(d)))
        var rstd = ftz(F1(1) / sqrt_rn(ftz(mean + daz_in(F1(eps)))))
        var dr = dy.unsafe_offset(r * d)
        var o = dst.unsafe_offset(r * d)
        var rs = FW(rstd[0])
        var j = 0
        while j + W <= d:
            var t = ftz(mul(daz_in(xr.unsafe_load[width=W](j)), rs))
            o.unsafe_store(j, ftz(mul(daz_in(dr.unsafe_load[width=W](j)), t)))
            j += W
        while j < d:
            var t = ftz(mul(daz_in(xr.unsafe_load[width=1](j)), rstd))
            o.unsafe_store(j, ftz(mul(daz_in(dr.unsafe_load[width=1](j)), t)))
            j += 1


def head_norm_terms_rows(dy: F32Ptr, x: F32Ptr, rstd: F32Ptr, heads: Int, hd: Int, dst: F32Ptr,
                         t0: Int, t1: Int):
    """T-62's per-token terms of qwen3's per-head q / k norm weight gradient: tokens t0 ..
    t1 of dy and x (tokens, heads * hd), rstd (tokens * heads,) the rows' M-4 rstd (as
    rms_backward_rows stores it); dst[t, j] = chain over heads h ascending from +0 of
    add(acc, mul(dy[t, h, j], mul(x[t, h, j], rstd[t, h]))): T-11's term per (token,
    head) row, joined head by head into one term a token (the fold over the tokens is
    the caller's). W columns a step in the lanes, each lane the scalar rule."""
    for t in range(t0, t1):
        var o = dst.unsafe_offset(t * hd)
        var j = 0
        while j + W <= hd:
            var acc = FW(0)
            for h in range(heads):
                var r = t * heads + h
                var rs = FW(rstd.unsafe_load(r))
                var xv = daz_in(x.unsafe_offset(r * hd).unsafe_load[width=W](j))
                var dv = daz_in(dy.unsafe_offset(r * hd).unsafe_load[width=W](j))
                acc = serial_add_daz[W](acc, mul(dv, mul(xv, rs)))
            o.unsafe_store(j, ftz(acc))
            j += W
        while j < hd:
            var acc = F1(0)
            for h in range(heads):
                var r = t * heads + h
                var rs = F1(rstd.unsafe_load(r))
                var xv = daz_in(F1(x.unsafe_offset(r * hd).unsafe_load(j)))
                var dv = daz_in(F1(dy.unsafe_offset(r * hd).unsafe_load(j)))
                acc = serial_add_daz[1](acc, mul(dv, mul(xv, rs)))
            o.unsafe_store(j, ftz(acc)[0])
            j += 1
