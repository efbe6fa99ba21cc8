"""The Mamba-2 chunked SSD for training, part 1: its forward up to the skip (S-20 ..
S-25's s, the inference kernel's bits) keeping the state entering every chunk (rule T-75
of contracts/ops/IDENTICAL_TRAIN_CONTRACT.md), and what the backward (ssd_bwd.mojo,
T-77 .. T-85) recomputes per chunk by the same functions: dt, dA, Xd, cs, expf(cs), the
segment sums and Lm, Mx, C . h_prev. Units are (batch row, head) pairs, each its own.
Every operand is read flushed (daz_in) and every stored value flushed (ftz); every chain
runs in its rule's order, vector lanes only across independent outputs. Called by
train/cpu/ssd_entry.mojo.
"""
from std.math import fma
from std.memory import bitcast
from std.sys import simd_width_of
from common.ptr import F32Ptr, ptr_f32
from arith.fp import ftz, daz_in
from arith.tree import chain_step_daz
from arith.elementary import mul, expf

comptime W = simd_width_of[DType.float32]()
comptime F1 = SIMD[DType.float32, 1]
comptime FW = SIMD[DType.float32, W]
comptime Q = 256  # chunk rows (S-3)
comptime N = 128  # states (S-3)
comptime P = 64  # head_dim (S-3)
comptime HALF = 128  # the position leaf of a k = 256 contraction (S-22)

# per-task workspace layout (floats)
comptime O_XD = 0  # Xd (Q, P)
comptime O_XDT = O_XD + Q * P  # Xd transposed (P, Q)
comptime O_DS = O_XDT + P * Q  # dS rows of the chunk (Q, P)
comptime O_CH = O_DS + Q * P  # C . h_prev (Q, P)
comptime O_DCH = O_CH + Q * P  # d(C . h_prev) (Q, P)
comptime O_DXS = O_DCH + Q * P  # dXd from the state pass (Q, P)
comptime O_DXY = O_DXS + Q * P  # dXd from the diagonal block (Q, P)
comptime O_BQ = O_DXY + Q * P  # B rows (Q, N)
comptime O_CQ = O_BQ + Q * N  # C rows (Q, N)
comptime O_BD = O_CQ + Q * N  # Bd (Q, N)
comptime O_DBS = O_BD + Q * N  # dB from the state pass (Q, N)
comptime O_DCY = O_DBS + Q * N  # dC from Yo (Q, N)
comptime O_LM = O_DCY + Q * N  # Lm (Q, Q)
comptime O_MX = O_LM + Q * Q  # Mx (Q, Q)
comptime O_DG = O_MX + Q * Q  # dG (Q, Q)
comptime O_DSEG = O_DG + Q * Q  # dseg, then its column suffix sums (Q, Q)
comptime O_HP = O_DSEG + Q * Q  # h_prev (P, N)
comptime O_HT = O_HP + P * N  # h_prev transposed (N, P)
comptime O_DHN = O_HT + N * P  # the gradient at the state leaving the chunk (P, N)
comptime O_DHC = O_DHN + P * N  # the gradient at h_prev (P, N)
comptime O_DST = O_DHC + P * N  # dHn transposed (N, P)
comptime O_V = O_DST + N * P  # 12 vectors of Q
comptime WS_FLOATS = O_V + 12 * Q


@always_inline
def _ld(p: F32Ptr, i: Int) -> F1:
    return daz_in(F1(p.unsafe_load(i)))


@always_inline
def _lv(p: F32Ptr, i: Int) -> FW:
    return daz_in(p.unsafe_offset(i).unsafe_load[width=W](0))


@always_inline
def _st(p: F32Ptr, i: Int, v: F1):
    p.unsafe_store(i, ftz(v)[0])


@always_inline
def _sv(p: F32Ptr, i: Int, v: FW):
    p.unsafe_offset(i).unsafe_store(0, ftz(v))


@always_inline
def _add(a: F1, b: F1) -> F1:
    return ftz(a + b)


@always_inline
def _addv(a: FW, b: FW) -> FW:
    return ftz(a + b)


@always_inline
def _gt_total(a: F1, b: F1) -> Bool:
    """a > b with -0 ordered below +0 (S-19's clamp on flushed operands)."""
    if a[0] == b[0]:
        var ab = bitcast[DType.uint32, 1](a)[0]
        var bb = bitcast[DType.uint32, 1](b)[0]
        return ab == 0 and bb == 0x80000000
    return a[0] > b[0]


struct SsdT(ImplicitlyCopyable, Movable):
    """One training call of the SSD over a batch (fresh state, q0 = 0)."""
    var xbc: Int  # post-SiLU xBC rows (batch * L, ldx): x [0, di), B [di, di+N), C [di+N, di+2N)
    var ldx: Int
    var dt: Int  # dt after S-19 (batch * L, H)
    var a: Int  # A (H)
    var dv: Int  # D (H)
    var hs: Int  # the state entering each chunk (batch, H, nch, P, N)
    var gmat: Int  # G (batch, nch, Q, Q) (row i: j <= i)
    var batch: Int
    var L: Int
    var H: Int
    var di: Int

    def __init__(out self, xbc: Int, ldx: Int, dt: Int, a: Int, dv: Int, hs: Int, gmat: Int,
                  batch: Int, L: Int, H: Int, di: Int):
        self.xbc = xbc
        self.ldx = ldx
        self.dt = dt
        self.a = a
        self.dv = dv
        self.hs = hs
        self.gmat = gmat
        self.batch = batch
        self.L = L
        self.H = H
        self.di = di

    @always_inline
    def nch(self) -> Int:
        return (self.L + Q - 1) // Q

    @always_inline
    def row(self, b: Int, t: Int) -> F32Ptr:
        return ptr_f32(self.xbc).unsafe_offset((b * self.L + t) * self.ldx)

    @always_inline
    def hs_at(self, b: Int, hh: Int, ch: Int) -> F32Ptr:
        return ptr_f32(self.hs).unsafe_offset(((b * self.H + hh) * self.nch() + ch) * P * N)


def _chunk_rows(s: SsdT, b: Int, hh: Int, base: Int, real: Int, ws: F32Ptr, a_h: F1):
    """S-21 over the chunk's real rows: dt, dA, Xd (and its transpose), cs, expf(cs);
    the B and C rows flushed. Rows past real: +0 (cs: the last real value)."""
    var dtv = ws.unsafe_offset(O_V)
    var dav = ws.unsafe_offset(O_V + Q)
    var csv = ws.unsafe_offset(O_V + 2 * Q)
    var ecs = ws.unsafe_offset(O_V + 3 * Q)
    var xd = ws.unsafe_offset(O_XD)
    var xdt = ws.unsafe_offset(O_XDT)
    var bq = ws.unsafe_offset(O_BQ)
    var cq = ws.unsafe_offset(O_CQ)
    for i in range(Q):
        if i < real:
            var row = s.row(b, base + i)
            var dti = _ld(ptr_f32(s.dt), (b * s.L + base + i) * s.H + hh)
            _st(dtv, i, dti)
            _st(dav, i, mul(dti, a_h))
            var x = row.unsafe_offset(hh * P)
            for p in range(P):
                var v = ftz(mul(_ld(x, p), dti))
                _st(xd, i * P + p, v)
                _st(xdt, p * Q + i, v)
            for n in range(N):
                _st(bq, i * N + n, _ld(row, s.di + n))
                _st(cq, i * N + n, _ld(row, s.di + N + n))
        else:
            dtv.unsafe_store(i, 0.0)
            dav.unsafe_store(i, 0.0)
            for p in range(P):
                xd.unsafe_store(i * P + p, 0.0)
                xdt.unsafe_store(p * Q + i, 0.0)
            for n in range(N):
                bq.unsafe_store(i * N + n, 0.0)
                cq.unsafe_store(i * N + n, 0.0)
    var prev = F1(0)
    for i in range(Q):
        if i < real:
            var c = F1(dav.unsafe_load(i)) if i == 0 else _add(prev, F1(dav.unsafe_load(i)))
            prev = c
        csv.unsafe_store(i, prev[0])
        _st(ecs, i, expf(prev))


def _load_h(hsrc: F32Ptr, ws: F32Ptr):
    """h_prev (P, N) and its transpose (N, P), flushed."""
    var hp = ws.unsafe_offset(O_HP)
    var ht = ws.unsafe_offset(O_HT)
    for p in range(P):
        for n in range(N):
            var v = _ld(hsrc, p * N + n)
            hp.unsafe_store(p * N + n, v[0])
            ht.unsafe_store(n * P + p, v[0])


def _ch_rows(real: Int, ws: F32Ptr):
    """CH(i, p) = dot(k = 128) over n of C[i] and h_prev[p] (S-24's contraction)."""
    var cq = ws.unsafe_offset(O_CQ)
    var ht = ws.unsafe_offset(O_HT)
    var ch = ws.unsafe_offset(O_CH)
    for i in range(real):
        var p = 0
        while p < P:
            var acc = FW(0)
            for n in range(N):
                acc = chain_step_daz[W](FW(cq.unsafe_load(i * N + n)), ht.unsafe_offset(n * P + p).unsafe_load[width=W](0), acc)
            _sv(ch, i * P + p, acc)
            p += W


def _lm_mx(s: SsdT, b: Int, ch_i: Int, real: Int, ws: F32Ptr):
    """Lm(i, j) = expf(seg(i, j)) with seg rebuilt row by row (S-21) and
    Mx(i, j) = mul(G(i, j), Lm(i, j)) (S-22), for j <= i < real."""
    var dav = ws.unsafe_offset(O_V + Q)
    var segr = ws.unsafe_offset(O_V + 4 * Q)
    var lm = ws.unsafe_offset(O_LM)
    var mx = ws.unsafe_offset(O_MX)
    var gm = ptr_f32(s.gmat).unsafe_offset((b * s.nch() + ch_i) * Q * Q)
    for j in range(Q):
        segr.unsafe_store(j, 0.0)
    for i in range(real):
        var dai = F1(dav.unsafe_load(i))
        if i > 0:
            for j in range(i):
                _st(segr, j, F1(segr.unsafe_load(j)) + dai)
        segr.unsafe_store(i, 0.0)
        for j in range(i + 1):
            var l = ftz(expf(F1(segr.unsafe_load(j))))
            lm.unsafe_store(i * Q + j, l[0])
            _st(mx, i * Q + j, mul(_ld(gm, i * Q + j), l))


# ------------------------------------------------------------------ forward (T-75)
def ssd_forward_unit(s: SsdT, so: F32Ptr, lds: Int, b: Int, hh: Int, ws: F32Ptr):
    """S-20 .. S-25 up to s = add(Y, mul(x, D)) for one (batch row, head), fresh state;
    the state entering every chunk kept in hs (T-75)."""
    var nch = s.nch()
    var a_h = _ld(ptr_f32(s.a), hh)
    var d_h = _ld(ptr_f32(s.dv), hh)
    var hcur = ws.unsafe_offset(O_DHN)  # the running state (P, N)
    for k in range(P * N):
        hcur.unsafe_store(k, 0.0)
    var xd = ws.unsafe_offset(O_XD)
    var csv = ws.unsafe_offset(O_V + 2 * Q)
    var ecs = ws.unsafe_offset(O_V + 3 * Q)
    var mx = ws.unsafe_offset(O_MX)
    var chm = ws.unsafe_offset(O_CH)
    var bq = ws.unsafe_offset(O_BQ)
    var bd = ws.unsafe_offset(O_BD)
    for ci in range(nch):
        var base = ci * Q
        var real = min(s.L - base, Q)
        var hsv = s.hs_at(b, hh, ci)
        for k in range(P * N):
            hsv.unsafe_store(k, hcur.unsafe_load(k))
        _chunk_rows(s, b, hh, base, real, ws, a_h)
        _load_h(hcur, ws)
        _ch_rows(real, ws)
        _lm_mx(s, b, ci, real, ws)
        for i in range(real):
            var xrow = s.row(b, base + i).unsafe_offset(hh * P)
            var orow = so.unsafe_offset((b * s.L + base + i) * lds + hh * P)
            var e = FW(ecs.unsafe_load(i))
            var p = 0
            while p < P:
                var l0 = FW(0)
                var l1 = FW(0)
                for j in range(min(i + 1, HALF)):
                    l0 = chain_step_daz[W](FW(mx.unsafe_load(i * Q + j)), xd.unsafe_offset(j * P + p).unsafe_load[width=W](0), l0)
                for j in range(HALF, i + 1):
                    l1 = chain_step_daz[W](FW(mx.unsafe_load(i * Q + j)), xd.unsafe_offset(j * P + p).unsafe_load[width=W](0), l1)
                var yd = _addv(ftz(l0), ftz(l1))
                var yo = ftz(mul(chm.unsafe_offset(i * P + p).unsafe_load[width=W](0), e))
                var y = _addv(yd, yo)
                var xv = _lv(xrow, p)
                _sv(orow, p, y + ftz(mul(xv, FW(d_h[0]))))
                p += W
        if ci + 1 < nch:
            # S-23: the chunk's state, then h advances (the chunk is complete)
            var last = F1(csv.unsafe_load(Q - 1))
            for i in range(Q):
                var dec = ftz(expf(ftz(last - F1(csv.unsafe_load(i)))))
                for n in range(N):
                    _st(bd, i * N + n, mul(F1(bq.unsafe_load(i * N + n)), dec))
            var el = ftz(expf(last))
            for p in range(P):
                var n = 0
                while n < N:
                    var l0 = FW(0)
                    var l1 = FW(0)
                    for i in range(HALF):
                        l0 = chain_step_daz[W](FW(xd.unsafe_load(i * P + p)), bd.unsafe_offset(i * N + n).unsafe_load[width=W](0), l0)
                    for i in range(HALF, Q):
                        l1 = chain_step_daz[W](FW(xd.unsafe_load(i * P + p)), bd.unsafe_offset(i * N + n).unsafe_load[width=W](0), l1)
                    var sv = _addv(ftz(l0), ftz(l1))
                    var hv = hcur.unsafe_offset(p * N + n).unsafe_load[width=W](0)
                    _sv(hcur, p * N + n, fma(FW(el[0]), hv, sv))
                    n += W
