"""The Mamba-2 chunked SSD for training, part 2: the backward of one (batch row, head)
from the gradient at s (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md, rules T-77 .. T-85),
chunks last to first, each chunk's forward values recomputed by ssd_ops.mojo's own
functions; the join of B's and C's per-head gradients by a chain over the heads
ascending (T-84) in a pass over the tokens; the dt clamp's backward (T-76). Every operand
is read flushed and every stored value flushed; lanes only across independent outputs.
Called by train/cpu/ssd_entry.mojo.
"""
from common.ptr import F32Ptr, ptr_f32
from arith.fp import ftz, daz_in
from arith.tree import chain_step_daz
from arith.elementary import mul, expf
from train.cpu.ssd_ops import (
    W, F1, FW, Q, N, P, HALF, O_XD, O_XDT, O_DS, O_CH, O_DCH, O_DXS, O_DXY, O_BQ, O_CQ, O_BD,
    O_DBS, O_DCY, O_LM, O_MX, O_DG, O_DSEG, O_HP, O_DHN, O_DHC, O_DST, O_V, SsdT, _ld, _lv,
    _st, _sv, _add, _addv, _gt_total, _chunk_rows, _load_h, _ch_rows, _lm_mx,
)


# ------------------------------------------------------------------ backward (T-77 .. T-85)
def ssd_backward_unit(s: SsdT, ds: F32Ptr, ldds: Int, dxo: F32Ptr, lddx: Int, ddt: F32Ptr,
                      ta: F32Ptr, td: F32Ptr, wsb: F32Ptr, wsc: F32Ptr, b: Int, hh: Int,
                      ws: F32Ptr):
    """The backward of one (batch row, head), chunks last to first (T-77 .. T-85): dx into
    dxo's x columns, ddt, the per-token terms of A_log and D, and this head's dB, dC
    rows (wsb, wsc: (batch, H, L, N)) for T-84's join."""
    var nch = s.nch()
    var a_h = _ld(ptr_f32(s.a), hh)
    var d_h = _ld(ptr_f32(s.dv), hh)
    var dtv = ws.unsafe_offset(O_V)
    var csv = ws.unsafe_offset(O_V + 2 * Q)
    var ecs = ws.unsafe_offset(O_V + 3 * Q)
    var dec = ws.unsafe_offset(O_V + 5 * Q)
    var du = ws.unsafe_offset(O_V + 6 * Q)
    var dcs = ws.unsafe_offset(O_V + 7 * Q)
    var dda = ws.unsafe_offset(O_V + 8 * Q)
    var xd = ws.unsafe_offset(O_XD)
    var xdt = ws.unsafe_offset(O_XDT)
    var dsv = ws.unsafe_offset(O_DS)
    var chm = ws.unsafe_offset(O_CH)
    var dch = ws.unsafe_offset(O_DCH)
    var dxs = ws.unsafe_offset(O_DXS)
    var dxy = ws.unsafe_offset(O_DXY)
    var bq = ws.unsafe_offset(O_BQ)
    var cq = ws.unsafe_offset(O_CQ)
    var bd = ws.unsafe_offset(O_BD)
    var dbs = ws.unsafe_offset(O_DBS)
    var dcy = ws.unsafe_offset(O_DCY)
    var lm = ws.unsafe_offset(O_LM)
    var mx = ws.unsafe_offset(O_MX)
    var dg = ws.unsafe_offset(O_DG)
    var dseg = ws.unsafe_offset(O_DSEG)
    var hp = ws.unsafe_offset(O_HP)
    var dhn = ws.unsafe_offset(O_DHN)
    var dhc = ws.unsafe_offset(O_DHC)
    var dst = ws.unsafe_offset(O_DST)
    var ci = nch - 1
    while ci >= 0:
        var base = ci * Q
        var real = min(s.L - base, Q)
        var nxt = ci + 1 < nch
        var gm = ptr_f32(s.gmat).unsafe_offset((b * nch + ci) * Q * Q)
        _chunk_rows(s, b, hh, base, real, ws, a_h)
        _load_h(s.hs_at(b, hh, ci), ws)
        _ch_rows(real, ws)
        _lm_mx(s, b, ci, real, ws)
        for i in range(real):
            var dr = ds.unsafe_offset((b * s.L + base + i) * ldds + hh * P)
            for p in range(P):
                _st(dsv, i * P + p, _ld(dr, p))
        # T-80: the state pass h_next = fma(el, h_prev, S) and S-23's chunk state
        var dlast = F1(0)
        if nxt:
            var last = F1(csv.unsafe_load(Q - 1))
            var el = ftz(expf(last))
            for i in range(Q):
                var dc = ftz(expf(ftz(last - F1(csv.unsafe_load(i)))))
                dec.unsafe_store(i, dc[0])
                for n in range(N):
                    _st(bd, i * N + n, mul(F1(bq.unsafe_load(i * N + n)), dc))
            # del = dot(k = 8192) over (p, n), p-major: one leaf per p, then the tree
            var leaves = ws.unsafe_offset(O_V + 9 * Q)
            for p in range(P):
                var acc = F1(0)
                for n in range(N):
                    acc = chain_step_daz[1](_ld(dhn, p * N + n), F1(hp.unsafe_load(p * N + n)), acc)
                _st(leaves, p, acc)
            var cnt = P
            while cnt > 1:
                for k in range(cnt // 2):
                    _st(leaves, k, F1(leaves.unsafe_load(2 * k)) + F1(leaves.unsafe_load(2 * k + 1)))
                cnt //= 2
            var dl_h = F1(leaves.unsafe_load(0))
            for p in range(P):
                for n in range(N):
                    var g = _ld(dhn, p * N + n)
                    _st(dhc, p * N + n, mul(g, el))
                    dst.unsafe_store(n * P + p, g[0])
            # dXd_S[i, p] = dot(k = 128) over n of dHn[p, n] and Bd[i, n]
            for i in range(Q):
                var p = 0
                while p < P:
                    var acc = FW(0)
                    for n in range(N):
                        acc = chain_step_daz[W](FW(bd.unsafe_load(i * N + n)), dst.unsafe_offset(n * P + p).unsafe_load[width=W](0), acc)
                    _sv(dxs, i * P + p, acc)
                    p += W
            # dBd[i, n] = dot(k = 64) over p of dHn[p, n] and Xd[i, p]; dB_S, ddecay, du
            var dlc = F1(0)
            for i in range(Q):
                var n = 0
                while n < N:
                    var acc = FW(0)
                    for p in range(P):
                        acc = chain_step_daz[W](FW(xd.unsafe_load(i * P + p)), dhn.unsafe_offset(p * N + n).unsafe_load[width=W](0), acc)
                    _sv(bd, i * N + n, acc)  # bd now holds dBd
                    n += W
                var dcv = F1(dec.unsafe_load(i))
                var ddec = F1(0)
                for n in range(N):
                    var g = F1(bd.unsafe_load(i * N + n))
                    _st(dbs, i * N + n, mul(g, dcv))
                    ddec = chain_step_daz[1](g, F1(bq.unsafe_load(i * N + n)), ddec)
                var u = ftz(mul(ftz(ddec), dcv))
                du.unsafe_store(i, u[0])
                dlc = _add(dlc, u)
            dlast = _add(dlc, ftz(mul(ftz(dl_h), el)))
        # T-79: Yo = mul(CH, expf(cs)): dCH, dE -> dcs, dC_Yo, dh_Yo
        for i in range(real):
            var e = F1(ecs.unsafe_load(i))
            var de = F1(0)
            for p in range(P):
                var g = F1(dsv.unsafe_load(i * P + p))
                _st(dch, i * P + p, mul(g, e))
                de = chain_step_daz[1](g, F1(chm.unsafe_load(i * P + p)), de)
            _st(dcs, i, mul(ftz(de), e))
            var n = 0
            while n < N:
                var acc = FW(0)
                for p in range(P):
                    acc = chain_step_daz[W](FW(dch.unsafe_load(i * P + p)), hp.unsafe_offset(p * N + n).unsafe_load[width=W](0), acc)
                _sv(dcy, i * N + n, acc)
                n += W
        if ci > 0:
            for p in range(P):
                var n = 0
                while n < N:
                    var l0 = FW(0)
                    var l1 = FW(0)
                    for i in range(min(real, HALF)):
                        l0 = chain_step_daz[W](FW(dch.unsafe_load(i * P + p)), cq.unsafe_offset(i * N + n).unsafe_load[width=W](0), l0)
                    for i in range(HALF, real):
                        l1 = chain_step_daz[W](FW(dch.unsafe_load(i * P + p)), cq.unsafe_offset(i * N + n).unsafe_load[width=W](0), l1)
                    var dy = _addv(ftz(l0), ftz(l1))
                    if nxt:
                        dy = _addv(dhc.unsafe_offset(p * N + n).unsafe_load[width=W](0), dy)
                    _sv(dhc, p * N + n, dy)
                    n += W
        # T-78: the diagonal block. dMx(i, j) = dot(k = 64) over p of dS[i] and Xd[j]
        for i in range(real):
            var j = 0
            while j <= i:
                var acc = FW(0)
                for p in range(P):
                    acc = chain_step_daz[W](FW(dsv.unsafe_load(i * P + p)), xdt.unsafe_offset(p * Q + j).unsafe_load[width=W](0), acc)
                acc = ftz(acc)
                for t in range(W):
                    var jj = j + t
                    if jj <= i:
                        var dm = F1(acc[t])
                        var l = F1(lm.unsafe_load(i * Q + jj))
                        _st(dg, i * Q + jj, mul(dm, l))
                        if jj < i:
                            var dl = ftz(mul(dm, _ld(gm, i * Q + jj)))
                            _st(dseg, i * Q + jj, mul(dl, l))
                j += W
        # dXd_Y[j, p]: over i in [j, real), position leaves
        for j in range(real):
            var p = 0
            while p < P:
                var l0 = FW(0)
                var l1 = FW(0)
                for i in range(j, min(real, HALF)):
                    l0 = chain_step_daz[W](FW(mx.unsafe_load(i * Q + j)), dsv.unsafe_offset(i * P + p).unsafe_load[width=W](0), l0)
                for i in range(max(j, HALF), real):
                    l1 = chain_step_daz[W](FW(mx.unsafe_load(i * Q + j)), dsv.unsafe_offset(i * P + p).unsafe_load[width=W](0), l1)
                _sv(dxy, j * P + p, _addv(ftz(l0), ftz(l1)))
                p += W
        # dC_G[i, n] over j in [0, i]; dB_G[j, n] over i in [j, real) (T-81)
        for i in range(real):
            var t = base + i
            var crow = wsc.unsafe_offset(((b * s.H + hh) * s.L + t) * N)
            var n = 0
            while n < N:
                var l0 = FW(0)
                var l1 = FW(0)
                for j in range(min(i + 1, HALF)):
                    l0 = chain_step_daz[W](FW(dg.unsafe_load(i * Q + j)), bq.unsafe_offset(j * N + n).unsafe_load[width=W](0), l0)
                for j in range(HALF, i + 1):
                    l1 = chain_step_daz[W](FW(dg.unsafe_load(i * Q + j)), bq.unsafe_offset(j * N + n).unsafe_load[width=W](0), l1)
                var g = _addv(ftz(l0), ftz(l1))
                _sv(crow, n, _addv(g, dcy.unsafe_offset(i * N + n).unsafe_load[width=W](0)))
                n += W
        for j in range(real):
            var t = base + j
            var brow = wsb.unsafe_offset(((b * s.H + hh) * s.L + t) * N)
            var n = 0
            while n < N:
                var l0 = FW(0)
                var l1 = FW(0)
                for i in range(j, min(real, HALF)):
                    l0 = chain_step_daz[W](FW(dg.unsafe_load(i * Q + j)), cq.unsafe_offset(i * N + n).unsafe_load[width=W](0), l0)
                for i in range(max(j, HALF), real):
                    l1 = chain_step_daz[W](FW(dg.unsafe_load(i * Q + j)), cq.unsafe_offset(i * N + n).unsafe_load[width=W](0), l1)
                var g = _addv(ftz(l0), ftz(l1))
                if nxt:
                    g = _addv(g, dbs.unsafe_offset(j * N + n).unsafe_load[width=W](0))
                _sv(brow, n, g)
                n += W
        # T-82: the cumulative and segment sums backward
        if nxt:
            for i in range(Q):
                _st(dcs, i, F1(dcs.unsafe_load(i)) - F1(du.unsafe_load(i)))
            _st(dcs, Q - 1, F1(dcs.unsafe_load(Q - 1)) + dlast)
        var acc_c = F1(0)
        var i_r = real - 1
        while i_r >= 0:
            acc_c = _add(acc_c, F1(dcs.unsafe_load(i_r)))
            dda.unsafe_store(i_r, acc_c[0])
            i_r -= 1
        for j in range(real):
            var acc = F1(0)
            var i2 = real - 1
            while i2 > j:
                acc = _add(acc, F1(dseg.unsafe_load(i2 * Q + j)))
                dseg.unsafe_store(i2 * Q + j, acc[0])
                i2 -= 1
        for k in range(real):
            var acc = F1(0)
            for j in range(k):
                acc = _add(acc, F1(dseg.unsafe_load(k * Q + j)))
            _st(dda, k, F1(dda.unsafe_load(k)) + acc)
        # T-83: dx, ddt and the per-token terms
        for i in range(real):
            var t = base + i
            var xrow = s.row(b, t).unsafe_offset(hh * P)
            var dxr = dxo.unsafe_offset((b * s.L + t) * lddx + hh * P)
            var dti = F1(dtv.unsafe_load(i))
            var ddai = F1(dda.unsafe_load(i))
            var c1 = F1(0)
            var c2 = F1(0)
            for p in range(P):
                var g = F1(dxy.unsafe_load(i * P + p))
                if nxt:
                    g = _add(g, F1(dxs.unsafe_load(i * P + p)))
                var xv = _ld(xrow, p)
                var dsp = F1(dsv.unsafe_load(i * P + p))
                _st(dxr, p, ftz(mul(g, dti)) + ftz(mul(dsp, d_h)))
                c1 = chain_step_daz[1](g, xv, c1)
                c2 = chain_step_daz[1](dsp, xv, c2)
            var ti = (b * s.L + t) * s.H + hh
            _st(ddt, ti, ftz(c1) + ftz(mul(ddai, a_h)))
            _st(ta, ti, mul(ftz(mul(ddai, dti)), a_h))
            _st(td, ti, c2)
        if ci > 0:
            for k in range(P * N):
                dhn.unsafe_store(k, dhc.unsafe_load(k))
        ci -= 1


def ssd_join_rows(s: SsdT, wsb: F32Ptr, wsc: F32Ptr, dxo: F32Ptr, lddx: Int, r0: Int, r1: Int):
    """T-84: dB[t, n], dC[t, n] = chains over the heads ascending from +0 of the heads'
    rows, for the token rows r0 .. r1 (flattened (batch row, position))."""
    for r in range(r0, r1):
        var b = r // s.L
        var t = r % s.L
        var drow = dxo.unsafe_offset(r * lddx + s.di)
        var n = 0
        while n < N:
            var ab = FW(0)
            var ac = FW(0)
            for hh in range(s.H):
                var off = ((b * s.H + hh) * s.L + t) * N + n
                ab = _addv(ab, _lv(wsb, off))
                ac = _addv(ac, _lv(wsc, off))
            _sv(drow, n, ab)
            _sv(drow, N + n, ac)
            n += W


def dt_clamp_bwd(g: F32Ptr, v: F32Ptr, dst: F32Ptr, lo: Float32, hi: Float32, i0: Int, i1: Int):
    """T-76: the gradient passes where S-19's clamp kept v (ties with lo or hi included),
    +0 where it replaced v."""
    var vlo = daz_in(F1(lo))
    var vhi = daz_in(F1(hi))
    for i in range(i0, i1):
        var x = _ld(v, i)
        if _gt_total(vlo, x) or _gt_total(x, vhi):
            dst.unsafe_store(i, 0.0)
        else:
            _st(dst, i, _ld(g, i))
