"""CPU kernels of the state-space (Mamba-1 / Mamba-2) ops (contracts/ops/
IDENTICAL_SSM_CONTRACT.md, rules S-*).

Each function covers a range of independent units (rows, channels, (row, head)
pairs) so an entry can split a call into tasks; no result depends on the split. The
per-element rules are the arithmetic layer's (arith.elementary: expf, logf, sqrt,
silu, softplus); this file lays out the loops and keeps every serial chain in its
rule's order. Callers run under the contract state (common.fpstate); every operand is
read through daz_in and every stored value is flushed.
"""
from std.math import fma
from std.memory import bitcast
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from common.ptr import F32Ptr, ptr_f32
from arith.fp import ftz, daz_in
from arith.tree import chain_step_daz
from arith.elementary import mul, sqrt_rn, expf, silu, softplus

comptime W = simd_width_of[DType.float32]()
comptime F1 = SIMD[DType.float32, 1]
comptime FW = SIMD[DType.float32, W]
comptime F16 = SIMD[DType.float32, 16]
comptime F32L = SIMD[DType.float32, 32]
comptime Q = 256  # Mamba-2 chunk rows (S-3)
comptime N2 = 128  # Mamba-2 states (S-3)
comptime P2 = 64  # Mamba-2 head_dim (S-3)


@always_inline
def _ld(p: F32Ptr, i: Int) -> F1:
    return daz_in(F1(p.unsafe_load(i)))


# ------------------------------------------------------------------ S-10 block norms
def norm_lanes_rows(x: F32Ptr, ldx: Int, w: F32Ptr, dst: F32Ptr, ldo: Int, n: Int, eps: Float32,
                    r0: Int, r1: Int):
    """S-10: 32 lanes (lane k sums x_j^2 over j = k, k+32, ... by one fma chain from +0),
    folded pairwise in lane order (five levels), then M-4's mean, rstd and scaling."""
    for r in range(r0, r1):
        var xr = x.unsafe_offset(r * ldx)
        var acc = F32L(0)
        var j = 0
        while j + 32 <= n:
            var v = daz_in(xr.unsafe_load[width=32](j))
            acc = chain_step_daz[32](v, v, acc)
            j += 32
        if j < n:
            var v = F32L(0)
            for t in range(n - j):
                v[t] = _ld(xr, j + t)[0]
            acc = chain_step_daz[32](v, v, acc)
        acc = ftz(acc)
        # pairwise in lane order: (p0 + p1), (p2 + p3), ... five levels
        var l16 = SIMD[DType.float32, 16](0)
        for k in range(16):
            l16[k] = ftz(F1(acc[2 * k]) + F1(acc[2 * k + 1]))[0]
        var l8 = SIMD[DType.float32, 8](0)
        for k in range(8):
            l8[k] = ftz(F1(l16[2 * k]) + F1(l16[2 * k + 1]))[0]
        var l4 = SIMD[DType.float32, 4](0)
        for k in range(4):
            l4[k] = ftz(F1(l8[2 * k]) + F1(l8[2 * k + 1]))[0]
        var a0 = ftz(F1(l4[0]) + F1(l4[1]))
        var a1 = ftz(F1(l4[2]) + F1(l4[3]))
        var sumsq = ftz(a0 + a1)
        var mean = ftz(sumsq / F1(Float32(n)))
        var rstd = ftz(F1(1) / sqrt_rn(ftz(mean + daz_in(F1(eps)))))
        var o = dst.unsafe_offset(r * ldo)
        var rs = FW(rstd[0])
        j = 0
        while j + W <= n:
            var t = ftz(mul(daz_in(xr.unsafe_load[width=W](j)), rs))
            o.unsafe_store(j, ftz(mul(daz_in(w.unsafe_load[width=W](j)), t)))
            j += W
        while j < n:
            var t = ftz(mul(_ld(xr, j), rstd))
            o.unsafe_store(j, ftz(mul(_ld(w, j), t))[0])
            j += 1


# ------------------------------------------------------------------ S-13 causal conv
@always_inline
def _conv_cols[w: Int](x: F32Ptr, ldx: Int, cw: F32Ptr, bias: F32Ptr, win: F32Ptr, dst: F32Ptr,
                       ldo: Int, L: Int, c0: Int, b: Int, C: Int, act: Bool):
    """Channels c0 .. c0 + w of batch row b: acc = bias, then fma(w[c, k], x[l - 3 + k],
    acc) for k = 0 .. 3 (oldest tap first; positions before the call from the window);
    the window (b, c, 4) becomes the last four pre-conv values, oldest first."""
    comptime V = SIMD[DType.float32, w]
    var t0 = V(0)
    var t1 = V(0)
    var t2 = V(0)
    var t3 = V(0)
    var k0 = V(0)
    var k1 = V(0)
    var k2 = V(0)
    var k3 = V(0)
    var bs = V(0)
    for i in range(w):
        var c = c0 + i
        var wb = (b * C + c) * 4
        t1[i] = _ld(win, wb + 1)[0]
        t2[i] = _ld(win, wb + 2)[0]
        t3[i] = _ld(win, wb + 3)[0]
        t0[i] = _ld(win, wb)[0]
        k0[i] = _ld(cw, c * 4)[0]
        k1[i] = _ld(cw, c * 4 + 1)[0]
        k2[i] = _ld(cw, c * 4 + 2)[0]
        k3[i] = _ld(cw, c * 4 + 3)[0]
        bs[i] = _ld(bias, c)[0]
    # t1, t2, t3: the newest three values before position 0
    for l in range(L):
        var xv = ftz(daz_in(x.unsafe_offset((b * L + l) * ldx + c0).unsafe_load[width=w](0)))
        var acc = ftz(fma(k0, t1, bs))
        acc = ftz(fma(k1, t2, acc))
        acc = ftz(fma(k2, t3, acc))
        acc = ftz(fma(k3, xv, acc))
        if act:
            acc = silu(acc)
        dst.unsafe_offset((b * L + l) * ldo + c0).unsafe_store(0, acc)
        t0 = t1
        t1 = t2
        t2 = t3
        t3 = xv
    for i in range(w):
        var wb = (b * C + c0 + i) * 4
        win.unsafe_store(wb, t0[i])
        win.unsafe_store(wb + 1, t1[i])
        win.unsafe_store(wb + 2, t2[i])
        win.unsafe_store(wb + 3, t3[i])


def conv_range(x: F32Ptr, ldx: Int, cw: F32Ptr, bias: F32Ptr, win: F32Ptr, dst: F32Ptr, ldo: Int,
               batch: Int, L: Int, C: Int, act: Bool, u0: Int, u1: Int):
    """Units u0 .. u1 of (batch row, block of W channels)."""
    var nblk = (C + W - 1) // W
    for u in range(u0, u1):
        var b = u // nblk
        var c0 = (u % nblk) * W
        if c0 + W <= C:
            _conv_cols[W](x, ldx, cw, bias, win, dst, ldo, L, c0, b, C, act)
        else:
            for c in range(c0, C):
                _conv_cols[1](x, ldx, cw, bias, win, dst, ldo, L, c, b, C, act)


# ------------------------------------------------------------------ S-14 / S-16 / S-19 delta
def softplus_rows(x: F32Ptr, ldx: Int, bias: F32Ptr, dst: F32Ptr, ldo: Int, n: Int, clamp: Bool,
                  lo: Float32, hi: Float32, r0: Int, r1: Int):
    """dst[r, j] = softplus(add(x[r, j], bias[j])), then (clamp) S-19's clamp to [lo, hi]:
    v = x; if lo > v: v = lo; if hi < v: v = hi (flushed operands, -0 < +0)."""
    var vlo = daz_in(F1(lo))
    var vhi = daz_in(F1(hi))
    for r in range(r0, r1):
        var j0 = 0
        if not clamp:  # lane by lane: the same bits as one element at a time
            while j0 + W <= n:
                var xv = daz_in(x.unsafe_offset(r * ldx + j0).unsafe_load[width=W](0))
                var bv = daz_in(bias.unsafe_offset(j0).unsafe_load[width=W](0))
                dst.unsafe_offset(r * ldo + j0).unsafe_store(0, ftz(softplus(ftz(xv + bv))))
                j0 += W
        for j in range(j0, n):
            var v = softplus(ftz(_ld(x, r * ldx + j) + _ld(bias, j)))
            if clamp:
                if _gt_total(vlo, v):
                    v = vlo
                if _gt_total(v, vhi):
                    v = vhi
            dst.unsafe_store(r * ldo + j, ftz(v)[0])


@always_inline
def _gt_total(a: F1, b: F1) -> Bool:
    """a > b, with -0 ordered below +0 (S-19's clamp on flushed operands)."""
    if a[0] == b[0]:
        var ab = bitcast[DType.uint32, 1](a)[0]
        var bb = bitcast[DType.uint32, 1](b)[0]
        return ab == 0 and bb == 0x80000000
    return a[0] > b[0]


def neg_exp(x: F32Ptr, dst: F32Ptr, n: Int):
    """S-15: A = neg(expf(A_log))."""
    for j in range(n):
        dst.unsafe_store(j, (-ftz(expf(_ld(x, j))))[0])


# ------------------------------------------------------------------ S-17 / S-18 Mamba-1 scan
@always_inline
def _scan_cols[w: Int](
    u: F32Ptr, ldu: Int, dl: F32Ptr, ldd: Int, a: F32Ptr, bc: F32Ptr, ldbc: Int, boff: Int,
    coff: Int, dv: F32Ptr, z: F32Ptr, ldz: Int, h: F32Ptr, dst: F32Ptr, ldo: Int, L: Int, di: Int,
    b: Int, c0: Int, hb: F32Ptr, ab: F32Ptr,
):
    """Channels c0 .. c0 + w of batch row b, one channel a lane (every lane its own
    chains: the bits of one channel at a time). hb, ab: work of 16 * w floats (h and A
    transposed, state-major)."""
    comptime V = SIMD[DType.float32, w]
    for i in range(w):
        var c = c0 + i
        for nn in range(16):
            hb.unsafe_store(nn * w + i, daz_in(F1(h.unsafe_load((b * di + c) * 16 + nn)))[0])
            ab.unsafe_store(nn * w + i, daz_in(F1(a.unsafe_load(c * 16 + nn)))[0])
    var dc = daz_in(dv.unsafe_offset(c0).unsafe_load[width=w](0))
    for t in range(L):
        var row = b * L + t
        var delta = daz_in(dl.unsafe_offset(row * ldd + c0).unsafe_load[width=w](0))
        var uu = daz_in(u.unsafe_offset(row * ldu + c0).unsafe_load[width=w](0))
        var brow = bc.unsafe_offset(row * ldbc + boff)
        var crow = bc.unsafe_offset(row * ldbc + coff)
        var y = V(0)
        for nn in range(16):
            var av = ab.unsafe_offset(nn * w).unsafe_load[width=w](0)
            var da = ftz(expf(ftz(mul(delta, av))))
            var db = ftz(mul(delta, V(_ld(brow, nn)[0])))
            var dbu = ftz(mul(db, uu))
            var hv = ftz(fma(da, hb.unsafe_offset(nn * w).unsafe_load[width=w](0), dbu))
            hb.unsafe_offset(nn * w).unsafe_store(0, hv)
            y = ftz(fma(V(_ld(crow, nn)[0]), hv, y))
        var sk = ftz(y + ftz(mul(uu, dc)))
        var g = ftz(mul(sk, silu(daz_in(z.unsafe_offset(row * ldz + c0).unsafe_load[width=w](0)))))
        dst.unsafe_offset(row * ldo + c0).unsafe_store(0, g)
    for i in range(w):
        for nn in range(16):
            h.unsafe_store((b * di + c0 + i) * 16 + nn, hb.unsafe_load(nn * w + i))


def mamba1_scan_range(
    u: F32Ptr, ldu: Int, dl: F32Ptr, ldd: Int, a: F32Ptr, bc: F32Ptr, ldbc: Int, boff: Int,
    coff: Int, dv: F32Ptr, z: F32Ptr, ldz: Int, h: F32Ptr, dst: F32Ptr, ldo: Int, L: Int, di: Int,
    u0: Int, u1: Int,
):
    """Units u0 .. u1 of (batch row, block of W channels), tokens in order: per state n,
    da = expf(mul(delta, A)), db = mul(delta, B), dbu = mul(db, u), h = fma(da, h, dbu);
    y = the chain over n of fma(C, h, acc) from +0; s = add(y, mul(u, D));
    out = mul(s, silu(z)). h (batch, di, 16) is read and written in place."""
    var nblk = (di + W - 1) // W
    var hb = unsafe_alloc[Float32](16 * W, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var ab = unsafe_alloc[Float32](16 * W, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    for unit in range(u0, u1):
        var b = unit // nblk
        var c0 = (unit % nblk) * W
        if c0 + W <= di:
            _scan_cols[W](u, ldu, dl, ldd, a, bc, ldbc, boff, coff, dv, z, ldz, h, dst, ldo, L, di,
                          b, c0, hb, ab)
        else:
            for c in range(c0, di):
                _scan_cols[1](u, ldu, dl, ldd, a, bc, ldbc, boff, coff, dv, z, ldz, h, dst, ldo, L,
                              di, b, c, hb, ab)
    hb.unsafe_free()
    ab.unsafe_free()


# ------------------------------------------------------------------ S-19 .. S-28 Mamba-2 SSD
struct Ssd2Args(ImplicitlyCopyable, Movable):
    """One call of the chunked SSD over a batch (pointers and sizes; see ssd2_unit)."""
    var xbc: Int  # this call's post-SiLU xBC rows (batch * L, ldx): x, B, C
    var ldx: Int
    var dt: Int  # this call's dt (batch * L, H) after S-19
    var a: Int  # A (H) = neg(expf(A_log))
    var dv: Int  # D (H)
    var z: Int  # z rows (batch * L, ldz)
    var ldz: Int
    var h: Int  # state h (batch, H, 64, 128): after the last completed chunk
    var open_x: Int  # state open rows (batch, 256, CD): post-SiLU xBC
    var open_dt: Int  # state open rows (batch, 256, H): dt
    var seg: Int  # state (batch, H, 256): the segment-sum row of the last open row
    var cs: Int  # state (batch, H): cs of the last open row
    var g: Int  # out: gated rows (batch * L, ldo) before the gated norm
    var ldo: Int
    var gmat: Int  # work: G (batch, nchunks, 256, 256) (row i: j <= i)
    var batch: Int
    var L: Int
    var H: Int
    var di: Int
    var q0: Int  # open rows held before this call

    def __init__(out self, xbc: Int, ldx: Int, dt: Int, a: Int, dv: Int, z: Int,
                  ldz: Int, h: Int, open_x: Int, open_dt: Int, seg: Int, cs: Int,
                  g: Int, ldo: Int, gmat: Int, batch: Int, L: Int, H: Int, di: Int, q0: Int):
        self.xbc = xbc
        self.ldx = ldx
        self.dt = dt
        self.a = a
        self.dv = dv
        self.z = z
        self.ldz = ldz
        self.h = h
        self.open_x = open_x
        self.open_dt = open_dt
        self.seg = seg
        self.cs = cs
        self.g = g
        self.ldo = ldo
        self.gmat = gmat
        self.batch = batch
        self.L = L
        self.H = H
        self.di = di
        self.q0 = q0

    @always_inline
    def cd(self) -> Int:
        return self.di + 2 * N2

    @always_inline
    def nchunks(self) -> Int:
        return (self.q0 + self.L + Q - 1) // Q

    @always_inline
    def row_ptr(self, b: Int, i: Int) -> F32Ptr:
        """Working row i (of the whole working sequence) of batch row b: its xBC."""
        if i < self.q0:
            return ptr_f32(self.open_x).unsafe_offset((b * Q + i) * self.cd())
        return ptr_f32(self.xbc).unsafe_offset((b * self.L + i - self.q0) * self.ldx)

    @always_inline
    def dt_at(self, b: Int, i: Int, hh: Int) -> F1:
        if i < self.q0:
            return _ld(ptr_f32(self.open_dt), (b * Q + i) * self.H + hh)
        return _ld(ptr_f32(self.dt), (b * self.L + i - self.q0) * self.H + hh)


def ssd2_gram_range(s: Ssd2Args, u0: Int, u1: Int):
    """G(i, j) = dot(k = 128) of C[i] and B[j] (one ascending chain, k <= 128), for the
    rows i of this call's outputs and j <= i, per (batch row, chunk, row block of 16);
    shared by every head (one group)."""
    var nch = s.nchunks()
    for unit in range(u0, u1):
        var b = unit // (nch * 16)
        var rem = unit % (nch * 16)
        var ch = rem // 16
        var blk = rem % 16
        var base = ch * Q
        var first = max(s.q0 - base, 0)
        var real = min(s.q0 + s.L - base, Q)
        var gm = ptr_f32(s.gmat).unsafe_offset((b * nch + ch) * Q * Q)
        for i in range(max(first, blk * 16), min(real, blk * 16 + 16)):
            var ci = s.row_ptr(b, base + i).unsafe_offset(s.di + N2)
            for j in range(i + 1):
                var bj = s.row_ptr(b, base + j).unsafe_offset(s.di)
                var acc = F1(0)
                var nn = 0
                # one chain over n ascending: vector loads, the fmas in order
                while nn < N2:
                    var cvv = daz_in(ci.unsafe_load[width=W](nn))
                    var bvv = daz_in(bj.unsafe_load[width=W](nn))
                    for t in range(W):
                        acc = chain_step_daz[1](F1(cvv[t]), F1(bvv[t]), acc)
                    nn += W
                gm.unsafe_store(i * Q + j, ftz(acc)[0])


def ssd2_unit_range(s: Ssd2Args, u0: Int, u1: Int):
    """Units u0 .. u1 of (batch row, head): every chunk of the working sequence (the
    q0 open rows held, then this call's L rows), S-21 .. S-25 for this call's rows, S-23
    for each chunk this call completes, and the open rows' caches at the end."""
    var nch = s.nchunks()
    var cd = s.cd()
    var xd = unsafe_alloc[Float32](Q * P2, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var csv = unsafe_alloc[Float32](Q, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var dav = unsafe_alloc[Float32](Q, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var segr = unsafe_alloc[Float32](Q, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var mx = unsafe_alloc[Float32](Q, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var ht = unsafe_alloc[Float32](N2 * P2, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var bd = unsafe_alloc[Float32](Q * N2, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    for unit in range(u0, u1):
        var b = unit // s.H
        var hh = unit % s.H
        var a_h = _ld(ptr_f32(s.a), hh)
        var d_h = _ld(ptr_f32(s.dv), hh)
        var hp = ptr_f32(s.h).unsafe_offset((b * s.H + hh) * P2 * N2)  # (64, 128), p-major
        var segst = ptr_f32(s.seg).unsafe_offset((b * s.H + hh) * Q)
        for ch in range(nch):
            var base = ch * Q
            var first = max(s.q0 - base, 0)  # rows before this are not this call's
            var real = min(s.q0 + s.L - base, Q)
            # S-21: Xd, dA, cs over the chunk's real rows
            for i in range(real):
                var row = s.row_ptr(b, base + i)
                var dti = s.dt_at(b, base + i, hh)
                dav.unsafe_store(i, ftz(mul(dti, a_h))[0])
                var x = row.unsafe_offset(hh * P2)
                for p in range(P2):
                    xd.unsafe_store(i * P2 + p, ftz(mul(_ld(x, p), dti))[0])
            var prev = F1(0)
            for i in range(real):
                var c = F1(dav.unsafe_load(i)) if i == 0 else ftz(prev + F1(dav.unsafe_load(i)))
                csv.unsafe_store(i, c[0])
                prev = c
            # h_prev transposed (n-major) for Yo's contraction over n
            for p in range(P2):
                for nn in range(N2):
                    ht.unsafe_store(nn * P2 + p, daz_in(F1(hp.unsafe_load(p * N2 + nn)))[0])
            # the segment-sum row entering row `first`: seg(first - 1, .)
            if first > 0:
                for j in range(first - 1):
                    segr.unsafe_store(j, daz_in(F1(segst.unsafe_load(j)))[0])
                segr.unsafe_store(first - 1, 0.0)
            var gm = ptr_f32(s.gmat).unsafe_offset((b * nch + ch) * Q * Q)
            for i in range(first, real):
                # seg(i, j) = add(seg(i - 1, j), dA[i]) for j < i; seg(i, i) = +0
                var dai = F1(dav.unsafe_load(i))
                var jj = 0
                while jj + W <= i:  # lanes are independent columns: the same chains
                    var sv = segr.unsafe_offset(jj).unsafe_load[width=W](0)
                    segr.unsafe_offset(jj).unsafe_store(0, ftz(sv + FW(dai[0])))
                    jj += W
                for j in range(jj, i):
                    segr.unsafe_store(j, ftz(F1(segr.unsafe_load(j)) + dai)[0])
                segr.unsafe_store(i, 0.0)
                # Mx(i, j) = mul(G(i, j), Lm(i, j)), j <= i
                var jm = 0
                while jm + W <= i + 1:  # expf and mul lane by lane: the same bits
                    var lmv = ftz(expf(segr.unsafe_offset(jm).unsafe_load[width=W](0)))
                    var gv = gm.unsafe_offset(i * Q + jm).unsafe_load[width=W](0)
                    mx.unsafe_offset(jm).unsafe_store(0, ftz(mul(gv, lmv)))
                    jm += W
                for j in range(jm, i + 1):
                    var lm = ftz(expf(F1(segr.unsafe_load(j))))
                    mx.unsafe_store(j, ftz(mul(F1(gm.unsafe_load(i * Q + j)), lm))[0])
                # Yd(i, p): leaves j in [0, 128) and [128, 256), then one add (+0 cells
                # past the diagonal add nothing)
                var ecs = ftz(expf(F1(csv.unsafe_load(i))))
                var crow = s.row_ptr(b, base + i).unsafe_offset(s.di + N2)
                var xrow = s.row_ptr(b, base + i).unsafe_offset(hh * P2)
                var out_row = base + i - s.q0
                var grow = ptr_f32(s.g).unsafe_offset((b * s.L + out_row) * s.ldo + hh * P2)
                var zrow = ptr_f32(s.z).unsafe_offset((b * s.L + out_row) * s.ldz + hh * P2)
                var p = 0
                while p < P2:
                    var l0 = FW(0)
                    var l1 = FW(0)
                    for j in range(min(i + 1, 128)):
                        l0 = chain_step_daz[W](FW(mx.unsafe_load(j)), xd.unsafe_offset(j * P2 + p).unsafe_load[width=W](0), l0)
                    for j in range(128, i + 1):
                        l1 = chain_step_daz[W](FW(mx.unsafe_load(j)), xd.unsafe_offset(j * P2 + p).unsafe_load[width=W](0), l1)
                    var yd = ftz(ftz(l0) + ftz(l1))
                    # Yo(i, p) = mul(dot(k = 128)(C[i], h_prev[p]), expf(cs[i]))
                    var yo = FW(0)
                    for nn in range(N2):
                        yo = chain_step_daz[W](FW(_ld(crow, nn)[0]), ht.unsafe_offset(nn * P2 + p).unsafe_load[width=W](0), yo)
                    yo = ftz(mul(ftz(yo), FW(ecs[0])))
                    var y = ftz(yd + yo)
                    # S-25: s = add(Y, mul(x, D)); g = mul(s, silu(z))
                    var xv = daz_in(xrow.unsafe_load[width=W](p))
                    var sk = ftz(y + ftz(mul(xv, FW(d_h[0]))))
                    var gz = ftz(mul(sk, silu(daz_in(zrow.unsafe_load[width=W](p)))))
                    grow.unsafe_store(p, gz)
                    p += W
            if real == Q:
                # S-23: the chunk is complete: its state, then h advances
                var last = F1(csv.unsafe_load(Q - 1))
                for i in range(Q):
                    var dec = ftz(expf(ftz(last - F1(csv.unsafe_load(i)))))
                    var bi = s.row_ptr(b, base + i).unsafe_offset(s.di)
                    for nn in range(N2):
                        bd.unsafe_store(i * N2 + nn, ftz(mul(_ld(bi, nn), dec))[0])
                var el = ftz(expf(last))
                for p in range(P2):
                    var nn = 0
                    while nn < N2:
                        var l0 = FW(0)
                        var l1 = FW(0)
                        for i in range(128):
                            l0 = chain_step_daz[W](FW(xd.unsafe_load(i * P2 + p)), bd.unsafe_offset(i * N2 + nn).unsafe_load[width=W](0), l0)
                        for i in range(128, Q):
                            l1 = chain_step_daz[W](FW(xd.unsafe_load(i * P2 + p)), bd.unsafe_offset(i * N2 + nn).unsafe_load[width=W](0), l1)
                        var sv = ftz(ftz(l0) + ftz(l1))
                        var hv = daz_in(hp.unsafe_offset(p * N2 + nn).unsafe_load[width=W](0))
                        hp.unsafe_offset(p * N2 + nn).unsafe_store(0, ftz(fma(FW(el[0]), hv, sv)))
                        nn += W
            else:
                # the open rows' caches: the last segment-sum row and cs
                for j in range(Q):
                    segst.unsafe_store(j, segr.unsafe_load(j) if j < real else Float32(0))
                ptr_f32(s.cs).unsafe_store(b * s.H + hh, csv.unsafe_load(real - 1) if real > 0 else Float32(0))
    xd.unsafe_free()
    csv.unsafe_free()
    dav.unsafe_free()
    segr.unsafe_free()
    mx.unsafe_free()
    ht.unsafe_free()
    bd.unsafe_free()


def ssd2_store_open(s: Ssd2Args, b: Int):
    """The open rows after the call (S-27): the last partial chunk's post-SiLU xBC and
    dt rows; rows at or past q are zeroed. Rows already held stay (they are rows
    0 .. q0 of the same chunk when no chunk completed)."""
    var T = s.q0 + s.L
    var q = T % Q
    var start = T - q  # working index of the open chunk's first row
    var cd = s.cd()
    # copy new rows first from the end, so held rows are read before any overwrite
    for i in range(q):
        var wi = start + i
        if wi < s.q0:
            continue  # a held row of the same chunk: already in place
        var src = s.row_ptr(b, wi)
        var dsto = ptr_f32(s.open_x).unsafe_offset((b * Q + i) * cd)
        for c in range(cd):
            dsto.unsafe_store(c, ftz(_ld(src, c))[0])
        for hh in range(s.H):
            ptr_f32(s.open_dt).unsafe_store((b * Q + i) * s.H + hh, s.dt_at(b, wi, hh)[0])
    for i in range(q, Q):
        var dsto = ptr_f32(s.open_x).unsafe_offset((b * Q + i) * cd)
        for c in range(cd):
            dsto.unsafe_store(c, Float32(0))
        for hh in range(s.H):
            ptr_f32(s.open_dt).unsafe_store((b * Q + i) * s.H + hh, Float32(0))
