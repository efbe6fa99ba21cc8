"""What ONE GPU thread of a state-space op computes (contracts/ops/
IDENTICAL_SSM_CONTRACT.md, rules S-*).

Width-1 calls of the per-element rules the CPU kernels use (arith.elementary: expf,
silu, softplus, mul, sqrt_rn; arith.tree: chain_step, tree_add), in the CPU
kernels' (mojo/ssm/cpu/ops.mojo) operation order: one thread per unit of the CPU's
loops (a row, a (batch row, channel), a (batch row, head)), so every serial chain
runs in one thread exactly as one CPU lane runs it. Every operand is flushed as it is
loaded and every result as it is stored or carried, because a GPU has no DAZ mode;
the CPU run (cpu_run.mojo) calls these bodies in loops under IEEE mode (DAZ and FTZ
off), so the tests check the bodies' own arithmetic.
"""
from std.math import fma
from std.memory import bitcast
from std.collections import Array
from common.ptr import F32Ptr, ptr_f32
from arith.fp import ftz
from arith.tree import chain_step, tree_add, leaf_size
from arith.elementary import mul, sqrt_rn, expf, silu, softplus

comptime F1 = SIMD[DType.float32, 1]
comptime Q = 256  # Mamba-2 chunk rows (S-3)
comptime N2 = 128  # Mamba-2 states (S-3)
comptime P2 = 64  # Mamba-2 head_dim (S-3)
comptime N1 = 16  # Mamba-1 states (S-3)
comptime LANES = 32  # S-10's lanes


@always_inline
def ld(p: F32Ptr, i: Int) -> F1:
    """An operand as the contract reads it: flushed."""
    return ftz(F1(p.unsafe_load(i)))


# ------------------------------------------------------------------ S-10 block norms
def norm_lanes_thread(x: F32Ptr, ldx: Int, w: F32Ptr, dst: F32Ptr, ldo: Int, n: Int,
                      eps: Float32, r: Int):
    """S-10, row r: lane k = 0 .. 31 the chain fma(x_j, x_j, acc) over j = k, k + 32, ...
    from +0; the lanes folded pairwise in lane order (five levels); mean, rstd and
    mul(w, mul(x, rstd)) as M-4."""
    var xr = x.unsafe_offset(r * ldx)
    var part = Array[Float32, LANES](fill=0)
    for k in range(LANES):
        var acc = F1(0)
        var j = k
        while j < n:
            var v = ld(xr, j)
            acc = chain_step[1](v, v, acc)
            j += LANES
        part[k] = acc[0]
    var m = LANES
    while m > 1:
        for k in range(m // 2):
            part[k] = tree_add[1](F1(part[2 * k]), F1(part[2 * k + 1]))[0]
        m //= 2
    var sumsq = F1(part[0])
    var mean = ftz(sumsq / F1(Float32(n)))
    var rstd = ftz(F1(1) / sqrt_rn(ftz(mean + ftz(F1(eps)))))
    var o = dst.unsafe_offset(r * ldo)
    for j in range(n):
        var t = mul(ld(xr, j), rstd)
        o.unsafe_store(j, mul(ld(w, j), t)[0])


# ------------------------------------------------------------------ S-13 causal conv
def conv_thread(x: F32Ptr, ldx: Int, cw: F32Ptr, bias: F32Ptr, win: F32Ptr, dst: F32Ptr,
                ldo: Int, L: Int, C: Int, act: Bool, b: Int, c: Int):
    """S-13, channel c of batch row b over the call's L positions: acc = bias, then
    fma(w[c, k], x[l - 3 + k], acc) for k = 0 .. 3 (oldest tap first, positions before
    the call from the window (b, c, 4)); SiLU (S-1) when act. The window becomes the
    last four pre-conv values, oldest first (flushed)."""
    var wb = (b * C + c) * 4
    var t0 = ld(win, wb)
    var t1 = ld(win, wb + 1)
    var t2 = ld(win, wb + 2)
    var t3 = ld(win, wb + 3)
    var k0 = ld(cw, c * 4)
    var k1 = ld(cw, c * 4 + 1)
    var k2 = ld(cw, c * 4 + 2)
    var k3 = ld(cw, c * 4 + 3)
    var bs = ld(bias, c)
    for l in range(L):
        var xv = ld(x, (b * L + l) * ldx + c)
        var acc = ftz(fma(k0, t1, bs))
        acc = ftz(fma(k1, t2, acc))
        acc = ftz(fma(k2, t3, acc))
        acc = ftz(fma(k3, xv, acc))
        if act:
            acc = silu(acc)
        dst.unsafe_store((b * L + l) * ldo + c, acc[0])
        t0 = t1
        t1 = t2
        t2 = t3
        t3 = xv
    win.unsafe_store(wb, t0[0])
    win.unsafe_store(wb + 1, t1[0])
    win.unsafe_store(wb + 2, t2[0])
    win.unsafe_store(wb + 3, t3[0])


# ------------------------------------------------------------------ S-14 / S-16 / S-19
@always_inline
def gt_total(a: F1, b: F1) -> Bool:
    """a > b on flushed operands, with -0 ordered below +0 (S-19's clamp)."""
    if a[0] == b[0]:
        var ab = bitcast[DType.uint32, 1](a)[0]
        var bb = bitcast[DType.uint32, 1](b)[0]
        return ab == 0 and bb == 0x80000000
    return a[0] > b[0]


def softplus_thread(x: F32Ptr, ldx: Int, bias: F32Ptr, dst: F32Ptr, ldo: Int, clamp: Bool,
                    lo: Float32, hi: Float32, r: Int, j: Int):
    """S-14 / S-16 / S-19, element (r, j): softplus(add(x, bias[j])), then (clamp) S-19's
    total-order clamp: v = x; if lo > v: v = lo; if hi < v: v = hi."""
    var v = softplus(ftz(ld(x, r * ldx + j) + ld(bias, j)))
    if clamp:
        var vlo = ftz(F1(lo))
        var vhi = ftz(F1(hi))
        if gt_total(vlo, v):
            v = vlo
        if gt_total(v, vhi):
            v = vhi
    dst.unsafe_store(r * ldo + j, ftz(v)[0])


def neg_exp_thread(x: F32Ptr, dst: F32Ptr, j: Int):
    """S-15, element j: A = neg(expf(A_log))."""
    dst.unsafe_store(j, (-ftz(expf(ld(x, j))))[0])


# ------------------------------------------------------------------ S-17 / S-18 Mamba-1
def mamba1_scan_thread[y_descending: Bool = False](
    u: F32Ptr, ldu: Int, dl: F32Ptr, ldd: Int, a: F32Ptr, bc: F32Ptr, ldbc: Int, boff: Int,
    coff: Int, dv: F32Ptr, z: F32Ptr, ldz: Int, h: F32Ptr, dst: F32Ptr, ldo: Int, L: Int,
    di: Int, b: Int, c: Int,
):
    """S-17, S-18 up to the gate, channel c of batch row b, tokens in order, its 16
    states in registers: per state n, da = expf(mul(delta, A[c, n])),
    db = mul(delta, B[t, n]), dbu = mul(db, u), h_n = fma(da, h_n, dbu); y = the chain
    over n = 0 .. 15 of fma(C[t, n], h_n, acc) from +0; s = add(y, mul(u, D[c]));
    out = mul(s, silu(z)). h (batch, di, 16) is read and written back.
    y_descending (test support only, the sabotage check): the y chain over n descending,
    which S-17 forbids; every launch uses False."""
    var hs = Array[Float32, N1](fill=0)
    var av = Array[Float32, N1](fill=0)
    var hb = (b * di + c) * N1
    for nn in range(N1):
        hs[nn] = ld(h, hb + nn)[0]
        av[nn] = ld(a, c * N1 + nn)[0]
    var dc = ld(dv, c)
    for t in range(L):
        var row = b * L + t
        var delta = ld(dl, row * ldd + c)
        var uu = ld(u, row * ldu + c)
        var brow = bc.unsafe_offset(row * ldbc + boff)
        var crow = bc.unsafe_offset(row * ldbc + coff)
        for nn in range(N1):
            var da = ftz(expf(mul(delta, F1(av[nn]))))
            var db = mul(delta, ld(brow, nn))
            var dbu = mul(db, uu)
            hs[nn] = ftz(fma(da, F1(hs[nn]), dbu))[0]
        var y = F1(0)
        for k in range(N1):
            var nn = N1 - 1 - k if y_descending else k
            y = ftz(fma(ld(crow, nn), F1(hs[nn]), y))
        var sk = ftz(y + mul(uu, dc))
        var g = mul(sk, silu(ld(z, row * ldz + c)))
        dst.unsafe_store(row * ldo + c, g[0])
    for nn in range(N1):
        h.unsafe_store(hb + nn, hs[nn])


# ------------------------------------------------------------------ S-19 .. S-28 Mamba-2
@fieldwise_init
struct SsdCall(ImplicitlyCopyable, Movable):
    """One call of the chunked SSD over a batch, as the CPU's Ssd2Args (addresses and
    sizes): xbc this call's post-SiLU xBC rows (batch * L, ldx); dt (batch * L, H) after
    S-19; a = A, dv = D (H); z rows (batch * L, ldz); the state h (batch, H, 64, 128),
    open_x (batch, 256, di + 256), open_dt (batch, 256, H), seg (batch, H, 256),
    cs (batch, H); g the gated rows out (batch * L, ldo); gmat the Gram work
    (batch, nchunks, 256, 256); q0 the open rows held before this call."""
    var xbc: Int
    var ldx: Int
    var dt: Int
    var a: Int
    var dv: Int
    var z: Int
    var ldz: Int
    var h: Int
    var open_x: Int
    var open_dt: Int
    var seg: Int
    var cs: Int
    var g: Int
    var ldo: Int
    var gmat: Int
    var batch: Int
    var L: Int
    var H: Int
    var di: Int
    var q0: Int

    @always_inline
    def cd(self) -> Int:
        return self.di + 2 * N2

    @always_inline
    def nchunks(self) -> Int:
        return (self.q0 + self.L + Q - 1) // Q

    @always_inline
    def row_ptr(self, b: Int, i: Int) -> F32Ptr:
        """Working row i (held open rows first, then this call's) of batch row b."""
        if i < self.q0:
            return ptr_f32(self.open_x).unsafe_offset((b * Q + i) * self.cd())
        return ptr_f32(self.xbc).unsafe_offset((b * self.L + i - self.q0) * self.ldx)

    @always_inline
    def dt_at(self, b: Int, i: Int, hh: Int) -> F1:
        if i < self.q0:
            return ld(ptr_f32(self.open_dt), (b * Q + i) * self.H + hh)
        return ld(ptr_f32(self.dt), (b * self.L + i - self.q0) * self.H + hh)


def ssd_gram_thread(s: SsdCall, b: Int, ch: Int, i: Int):
    """S-22's G, row i of chunk ch of batch row b (nothing for a row that is not this
    call's): G(i, j) = dot(k = 128) of C[i] and B[j] (one ascending chain from +0) for
    j <= i; shared by every head (one group)."""
    var nch = s.nchunks()
    var base = ch * Q
    var first = max(s.q0 - base, 0)
    var real = min(s.q0 + s.L - base, Q)
    if i < first or i >= real:
        return
    var gm = ptr_f32(s.gmat).unsafe_offset((b * nch + ch) * Q * Q)
    var ci = s.row_ptr(b, base + i).unsafe_offset(s.di + N2)
    for j in range(i + 1):
        var bj = s.row_ptr(b, base + j).unsafe_offset(s.di)
        var acc = F1(0)
        for nn in range(N2):
            acc = chain_step[1](ld(ci, nn), ld(bj, nn), acc)
        gm.unsafe_store(i * Q + j, acc[0])


comptime SSD_WS_XD = 0  # Xd (256, 64)
comptime SSD_WS_CS = Q * P2  # cs (256)
comptime SSD_WS_DA = SSD_WS_CS + Q  # dA (256)
comptime SSD_WS_SEG = SSD_WS_DA + Q  # the segment-sum row (256)
comptime SSD_WS_MX = SSD_WS_SEG + Q  # Mx row (256)
comptime SSD_WS_DEC = SSD_WS_MX + Q  # decay (256)
comptime SSD_WS_FLOATS = SSD_WS_DEC + Q  # the scratch of one (batch row, head) thread


def ssd_unit_thread(s: SsdCall, ws: F32Ptr, b: Int, hh: Int):
    """S-20 .. S-25 (and S-27 / S-28's caches), head hh of batch row b, every chunk of
    the working sequence in order: for this call's rows the output gated row
    mul(add(Y, mul(x, D)), silu(z)); for each chunk the call completes, S-23's state
    pass advancing h; at the end the open rows' segment-sum row and cs. ws: this
    thread's scratch of SSD_WS_FLOATS floats. G must be ready (ssd_gram_thread)."""
    var nch = s.nchunks()
    var lf = leaf_size(Q)  # the two position leaves of dot(k = 256) (S-12, S-22, S-23)
    var xd = ws.unsafe_offset(SSD_WS_XD)
    var csv = ws.unsafe_offset(SSD_WS_CS)
    var dav = ws.unsafe_offset(SSD_WS_DA)
    var segr = ws.unsafe_offset(SSD_WS_SEG)
    var mx = ws.unsafe_offset(SSD_WS_MX)
    var dec = ws.unsafe_offset(SSD_WS_DEC)
    var a_h = ld(ptr_f32(s.a), hh)
    var d_h = ld(ptr_f32(s.dv), hh)
    var hp = ptr_f32(s.h).unsafe_offset((b * s.H + hh) * P2 * N2)  # (64, 128), p-major
    var segst = ptr_f32(s.seg).unsafe_offset((b * s.H + hh) * Q)
    for ch in range(nch):
        var base = ch * Q
        var first = max(s.q0 - base, 0)
        var real = min(s.q0 + s.L - base, Q)
        # S-21: Xd = mul(x, dt), dA = mul(dt, A), over the chunk's real rows
        for i in range(real):
            var row = s.row_ptr(b, base + i)
            var dti = s.dt_at(b, base + i, hh)
            dav.unsafe_store(i, mul(dti, a_h)[0])
            for p in range(P2):
                xd.unsafe_store(i * P2 + p, mul(ld(row, hh * P2 + p), dti)[0])
        # cs: the serial cumulative sum, restarting at the chunk
        var prev = F1(0)
        for i in range(real):
            var c = F1(dav.unsafe_load(i)) if i == 0 else ftz(prev + F1(dav.unsafe_load(i)))
            csv.unsafe_store(i, c[0])
            prev = c
        # the segment-sum row entering row `first`: seg(first - 1, .) from the state
        if first > 0:
            for j in range(first - 1):
                segr.unsafe_store(j, ld(segst, j)[0])
            segr.unsafe_store(first - 1, 0.0)
        var gm = ptr_f32(s.gmat).unsafe_offset((b * nch + ch) * Q * Q)
        for i in range(first, real):
            # seg(i, j) = add(seg(i - 1, j), dA[i]) for j < i; seg(i, i) = +0
            var dai = F1(dav.unsafe_load(i))
            for j in range(i):
                segr.unsafe_store(j, ftz(F1(segr.unsafe_load(j)) + dai)[0])
            segr.unsafe_store(i, 0.0)
            # S-22: Mx(i, j) = mul(G(i, j), expf(seg(i, j))), j <= i
            for j in range(i + 1):
                var lm = ftz(expf(F1(segr.unsafe_load(j))))
                mx.unsafe_store(j, mul(ld(gm, i * Q + j), lm)[0])
            var ecs = ftz(expf(F1(csv.unsafe_load(i))))
            var crow = s.row_ptr(b, base + i).unsafe_offset(s.di + N2)
            var xrow = s.row_ptr(b, base + i).unsafe_offset(hh * P2)
            var out_row = base + i - s.q0
            var grow = ptr_f32(s.g).unsafe_offset((b * s.L + out_row) * s.ldo + hh * P2)
            var zrow = ptr_f32(s.z).unsafe_offset((b * s.L + out_row) * s.ldz + hh * P2)
            for p in range(P2):
                # Yd: leaves j in [0, 128) and [128, 256) (+0 cells past i add nothing)
                var l0 = F1(0)
                var l1 = F1(0)
                for j in range(min(i + 1, lf)):
                    l0 = chain_step[1](F1(mx.unsafe_load(j)), F1(xd.unsafe_load(j * P2 + p)), l0)
                for j in range(lf, i + 1):
                    l1 = chain_step[1](F1(mx.unsafe_load(j)), F1(xd.unsafe_load(j * P2 + p)), l1)
                var yd = tree_add[1](l0, l1)
                # S-24: Yo = mul(dot(k = 128)(C[i], h_prev[p]), expf(cs[i]))
                var yo = F1(0)
                for nn in range(N2):
                    yo = chain_step[1](ld(crow, nn), ld(hp, p * N2 + nn), yo)
                yo = mul(yo, ecs)
                var y = ftz(yd + yo)
                # S-25: s = add(Y, mul(x, D)); g = mul(s, silu(z))
                var sk = ftz(y + mul(ld(xrow, p), d_h))
                grow.unsafe_store(p, mul(sk, silu(ld(zrow, p)))[0])
        if real == Q:
            # S-23: the chunk is complete: its state, then h advances
            var last = F1(csv.unsafe_load(Q - 1))
            for i in range(Q):
                dec.unsafe_store(i, ftz(expf(ftz(last - F1(csv.unsafe_load(i)))))[0])
            var el = ftz(expf(last))
            for p in range(P2):
                for nn in range(N2):
                    var l0 = F1(0)
                    var l1 = F1(0)
                    for i in range(lf):
                        var bdv = mul(ld(s.row_ptr(b, base + i), s.di + nn), F1(dec.unsafe_load(i)))
                        l0 = chain_step[1](F1(xd.unsafe_load(i * P2 + p)), bdv, l0)
                    for i in range(lf, Q):
                        var bdv = mul(ld(s.row_ptr(b, base + i), s.di + nn), F1(dec.unsafe_load(i)))
                        l1 = chain_step[1](F1(xd.unsafe_load(i * P2 + p)), bdv, l1)
                    var sv = tree_add[1](l0, l1)
                    var hv = ld(hp, p * N2 + nn)
                    hp.unsafe_store(p * N2 + nn, ftz(fma(el, hv, sv))[0])
        else:
            # the open rows' caches: the last segment-sum row and cs
            for j in range(Q):
                segst.unsafe_store(j, segr.unsafe_load(j) if j < real else Float32(0))
            ptr_f32(s.cs).unsafe_store(b * s.H + hh, csv.unsafe_load(real - 1) if real > 0 else Float32(0))


def ssd_store_open_thread(s: SsdCall, b: Int, i: Int):
    """S-27, open row i of batch row b after the call (run after every unit): the last
    partial chunk's post-SiLU xBC and dt rows (flushed); rows at or past q zeroed. A
    held row of the same chunk stays in place; a new row is read from this call's rows
    only, so the rows are independent threads."""
    var T = s.q0 + s.L
    var q = T % Q
    var start = T - q
    var cd = s.cd()
    var dsto = ptr_f32(s.open_x).unsafe_offset((b * Q + i) * cd)
    var dstd = ptr_f32(s.open_dt).unsafe_offset((b * Q + i) * s.H)
    if i < q:
        var wi = start + i
        if wi < s.q0:
            return
        var src = s.row_ptr(b, wi)
        for c in range(cd):
            dsto.unsafe_store(c, ld(src, c)[0])
        for hh in range(s.H):
            dstd.unsafe_store(hh, s.dt_at(b, wi, hh)[0])
    else:
        for c in range(cd):
            dsto.unsafe_store(c, Float32(0))
        for hh in range(s.H):
            dstd.unsafe_store(hh, Float32(0))
